//! A connection to a FastCGI server that reads and writes like an HTTP/1.1 server's
//! ([`FcgiStream`]): the proxy writes an HTTP/1.1 request and reads an HTTP/1.1 response, and
//! [`quill_core::fastcgi::Gateway`] turns one into records and the records back into the other.
//! Like a TLS stream, it takes bytes it cannot send yet into a backlog (the records), flushed on
//! the next writable edge, and a read is short only when the socket is drained.

use std::cell::{Cell, RefCell};
use std::io;

use quill_core::fastcgi::{Context, Gateway};

use super::{Ready, Stream};

/// Bytes read from the socket per call (records), before translation.
const RAW: usize = 16 * 1024;

/// A backlog of records over this refuses more request bytes (`WouldBlock`) until it drains.
const BACKLOG_MAX: usize = 64 * 1024;

/// A FastCGI server connection speaking HTTP/1.1 to the proxy.
#[derive(Debug)]
pub(crate) struct FcgiStream {
    /// The socket: `Stream::Tcp` or `Stream::Unix`.
    sock: Stream,
    gateway: RefCell<Gateway>,
    /// Records read and not yet translated, at `raw_start..raw_end` of `raw`.
    raw: RefCell<Raw>,
    /// The socket's EOF was read.
    eof: Cell<bool>,
    /// The request could not be written (a chunked body over `max_body`): reads fail too, so the
    /// proxy answers instead of waiting for a response that cannot come.
    failed: Cell<bool>,
    /// The server, for the log lines of its STDERR.
    server: Box<str>,
}

#[derive(Debug)]
struct Raw {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// The last socket read was short: the socket is drained.
    drained: bool,
}

impl FcgiStream {
    /// A connection to `server`; `keep_conn`: ask it to keep the connection between requests.
    pub(crate) fn new(sock: Stream, server: &str, keep_conn: bool) -> FcgiStream {
        let mut gateway = Gateway::new();
        gateway.keep_conn(keep_conn);
        FcgiStream {
            sock,
            gateway: RefCell::new(gateway),
            raw: RefCell::new(Raw {
                buf: vec![0; RAW].into_boxed_slice(),
                start: 0,
                end: 0,
                drained: false,
            }),
            eof: Cell::new(false),
            failed: Cell::new(false),
            server: server.into(),
        }
    }

    pub(crate) fn sock(&self) -> &Stream {
        &self.sock
    }

    pub(crate) fn sock_mut(&mut self) -> &mut Stream {
        &mut self.sock
    }

    /// Begins a request on the connection: the HTTP/1.1 request written next is `cx`'s.
    pub(crate) fn begin(&self, cx: &Context) {
        self.gateway.borrow_mut().begin(cx);
        self.failed.set(false);
        let mut raw = self.raw.borrow_mut();
        raw.start = 0;
        raw.end = 0;
    }

    /// Reads response bytes, like a socket read: `Ok(0)` at the socket's EOF, `WouldBlock` when
    /// nothing is there; short only when the socket is drained (or ended).
    pub(crate) fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.failed.get() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "fastcgi: the request could not be written",
            ));
        }
        let mut g = self.gateway.borrow_mut();
        let mut raw = self.raw.borrow_mut();
        let mut wrote = 0;
        loop {
            let (used, w) = {
                let Raw {
                    buf: rb,
                    start,
                    end,
                    ..
                } = &*raw;
                g.read(&rb[*start..*end], &mut buf[wrote..])
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?
            };
            raw.start += used;
            wrote += w;
            self.log_stderr(&mut g);
            if wrote == buf.len() || g.is_complete() {
                return Ok(wrote);
            }
            if raw.start < raw.end && used == 0 && w == 0 {
                // Nothing could move (cannot happen with room in `buf`): give what there is.
                return Ok(wrote);
            }
            if raw.start == raw.end {
                raw.start = 0;
                raw.end = 0;
            }
            if self.eof.get() || (raw.drained && wrote > 0) {
                raw.drained = false;
                return Ok(wrote);
            }
            if raw.end == raw.buf.len() {
                // Untranslated records fill the buffer: move them to its start.
                let (s, e) = (raw.start, raw.end);
                raw.buf.copy_within(s..e, 0);
                raw.start = 0;
                raw.end = e - s;
            }
            let at = raw.end;
            match self.sock.read(&mut raw.buf[at..]) {
                Ok(0) => self.eof.set(true),
                Ok(n) => {
                    raw.drained = n < raw.buf.len() - at;
                    raw.end += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && wrote > 0 => {
                    return Ok(wrote);
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn log_stderr(&self, g: &mut Gateway) {
        g.stderr_lines(|line| {
            tracing::warn!(
                "fastcgi server {}: {}",
                self.server,
                String::from_utf8_lossy(line)
            );
        });
    }

    /// Takes request bytes (all of them, once the backlog is under its bound; `WouldBlock` while
    /// it is over).
    pub(crate) fn write(&self, buf: &[u8]) -> io::Result<usize> {
        let mut g = self.gateway.borrow_mut();
        self.send(&mut g)?;
        if g.output().len() > BACKLOG_MAX {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = g.write(buf).map_err(|e| {
            self.failed.set(true);
            io::Error::new(io::ErrorKind::InvalidData, e)
        })?;
        match self.send(&mut g) {
            Ok(_) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(n),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let mut n = 0;
        for b in bufs {
            match self.write(b) {
                Ok(k) => n += k,
                Err(e) if n > 0 && e.kind() == io::ErrorKind::WouldBlock => return Ok(n),
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    /// Sends the records waiting: Ok(true) when none is left.
    fn send(&self, g: &mut Gateway) -> io::Result<bool> {
        while !g.output().is_empty() {
            match self.sock.write(g.output()) {
                Ok(n) => g.sent(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    pub(crate) fn has_backlog(&self) -> bool {
        !self.gateway.borrow().output().is_empty()
    }

    /// Sends the backlog if the socket is writable: Ok(true) when none is left.
    pub(crate) fn flush_backlog(&self, ready: &mut Ready) -> io::Result<bool> {
        if !self.has_backlog() {
            return Ok(true);
        }
        if !ready.writable {
            return Ok(false);
        }
        let done = self.send(&mut self.gateway.borrow_mut())?;
        if !done {
            ready.writable = false;
        }
        Ok(done)
    }

    /// Sends the backlog now: Ok(true) when none is left.
    pub(crate) fn send_backlog(&self) -> io::Result<bool> {
        self.send(&mut self.gateway.borrow_mut())
    }

    /// Whether the socket's EOF was read (a short read then is not a drained socket).
    pub(crate) fn ended(&self) -> bool {
        self.eof.get()
    }
}
