//! The head of a static root's response, written into a pooled buffer: the status line, `Date`,
//! the representation's fields, `Content-Length`, `Connection`, then the blank line. No
//! allocation; a head that would not fit (fields are bounded by the configuration: it cannot
//! happen) becomes a bare 500.

use std::sync::Arc;

use quill_core::http1::reason;

use super::cache::Rep;
use super::send::Sending;
use super::serve::Answer;
use crate::proxy::copy::Buf;

/// A response head being written.
pub(crate) struct Head {
    buf: Buf,
    len: usize,
    date: [u8; 29],
    keep_alive: bool,
    head_only: bool,
    overflow: bool,
}

impl Head {
    pub(crate) fn new(buf: Buf, date: &[u8], keep_alive: bool, head_only: bool) -> Head {
        let mut d = [b' '; 29];
        let n = date.len().min(29);
        d[..n].copy_from_slice(&date[..n]);
        Head {
            buf,
            len: 0,
            date: d,
            keep_alive,
            head_only,
            overflow: false,
        }
    }

    fn put(&mut self, bytes: &[u8]) {
        match self.buf.get_mut(self.len..self.len + bytes.len()) {
            Some(dst) => {
                dst.copy_from_slice(bytes);
                self.len += bytes.len();
            }
            None => self.overflow = true,
        }
    }

    fn num(&mut self, n: u64) {
        let mut buf = [0; quill_core::decimal::MAX_DIGITS];
        self.put(quill_core::decimal::digits(n, &mut buf));
    }

    /// The status line, `Date` and the given fields.
    fn start(&mut self, status: u16, fields: &[(&[u8], &[u8])]) {
        self.put(b"HTTP/1.1 ");
        self.num(status.into());
        self.put(b" ");
        self.put(reason(status).as_bytes());
        self.put(b"\r\nDate: ");
        let date = self.date;
        self.put(&date);
        self.put(b"\r\n");
        for (name, value) in fields {
            self.put(name);
            self.put(b": ");
            self.put(value);
            self.put(b"\r\n");
        }
    }

    /// `Content-Length` (none for 304, which describes the file without sending it),
    /// `Connection` and the end of the head.
    fn end(&mut self, status: u16, length: Option<u64>) {
        if let Some(n) = length.filter(|_| status != 304) {
            self.put(b"Content-Length: ");
            self.num(n);
            self.put(b"\r\n");
        }
        self.put(if self.keep_alive {
            b"Connection: keep-alive\r\n\r\n"
        } else {
            b"Connection: close\r\n\r\n"
        });
    }

    fn finish(self, status: u16) -> Answer {
        let (buf, len, status) = if self.overflow {
            let mut buf = self.buf;
            let bare = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
            buf[..bare.len()].copy_from_slice(bare);
            (buf, bare.len(), 500)
        } else {
            (self.buf, self.len, status)
        };
        Answer {
            status,
            sending: Sending::new(buf, len),
            range: None,
        }
    }

    /// A response without a body (a status, a redirect, 304, 412, 416).
    pub(crate) fn status_only(mut self, status: u16, fields: &[(&[u8], &[u8])]) -> Answer {
        self.start(status, fields);
        self.end(status, Some(0));
        self.finish(status)
    }

    /// A response whose body is `body` (a listing).
    pub(crate) fn with_body(
        mut self,
        status: u16,
        content_type: &[u8],
        body: &[u8],
        fields: &[(&[u8], &[u8])],
    ) -> Answer {
        self.start(status, fields);
        self.put(b"Content-Type: ");
        self.put(content_type);
        self.put(b"\r\n");
        self.end(status, Some(body.len() as u64));
        let head_only = self.head_only;
        let mut a = self.finish(status);
        if !head_only && a.status == status {
            a.sending.extra(body);
        }
        a
    }

    /// A response whose body comes from `rep` (the caller adds its segments unless this is a
    /// HEAD request: then [`Answer::sending`] is told to send the head only).
    pub(crate) fn file(
        mut self,
        status: u16,
        content_type: &[u8],
        length: u64,
        fields: &[(&[u8], &[u8])],
        rep: Arc<Rep>,
    ) -> Answer {
        self.start(status, fields);
        self.put(b"Content-Type: ");
        self.put(content_type);
        self.put(b"\r\n");
        self.end(status, Some(length));
        let head_only = self.head_only;
        let mut a = self.finish(status);
        if !head_only && a.status == status {
            a.sending = a.sending.with_rep(rep);
        } else {
            a.sending.head_only();
        }
        a
    }
}
