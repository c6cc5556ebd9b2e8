//! Reading one response into an active slot: a line in tcp mode, an HTTP/1 response (head parsed
//! by `quill_core::http1`, body framed by its `Body`) otherwise, until it is whole, the socket is
//! drained, or something fails.

use std::io::{self, Read};

use mio::net::TcpStream;
use quill_core::http1::{self, Body, Framing, ResponseHead};

use super::{Kind, Read_, Slot, LIMITS};

/// Reads from `conn` until the response is whole, the socket is drained, or something fails.
pub(super) fn read_response(conn: &mut TcpStream, slot: &mut Slot, line_mode: bool) -> Read_ {
    loop {
        let from = if slot.head.is_some() || line_mode {
            0
        } else {
            slot.filled
        };
        if from == slot.buf.len() {
            // The head does not fit in the buffer.
            return Read_::Failed(Kind::BadResponse);
        }
        let n = match conn.read(&mut slot.buf[from..]) {
            Ok(0) => return eof(slot, line_mode),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Read_::Wait,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Read_::Failed(Kind::of(&e)),
        };
        slot.raw += n as u64;
        let outcome = if line_mode {
            take_line(slot, n)
        } else {
            take_http(slot, from, n)
        };
        if let Some(r) = outcome {
            return r;
        }
    }
}

/// A write that must wait for the writable edge.
pub(super) fn is_wait(e: &io::Error) -> bool {
    // A write while the connect is still in progress fails with EAGAIN (or ENOTCONN on some paths).
    e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::NotConnected
}

/// The server closed the connection: the end of an until-close body, else a truncated response.
fn eof(slot: &mut Slot, line_mode: bool) -> Read_ {
    match slot.head {
        Some(h) if !line_mode && h.framing == Framing::Close => Read_::Whole(is_ok(&h), false),
        _ => Read_::Failed(if slot.raw == 0 {
            Kind::Reset
        } else {
            Kind::BadResponse
        }),
    }
}

/// A 2xx response counts as a success.
fn is_ok(head: &ResponseHead) -> bool {
    (200..300).contains(&head.status)
}

/// Tcp mode: the response is whole at the first newline.
fn take_line(slot: &mut Slot, n: usize) -> Option<Read_> {
    match slot.buf[..n].iter().position(|&b| b == b'\n') {
        Some(at) => {
            slot.body += at as u64 + 1;
            Some(Read_::Whole(true, at + 1 == n))
        }
        None => {
            slot.body += n as u64;
            None
        }
    }
}

/// HTTP: `n` new bytes at `from` in the slot's buffer. None: the response is not whole yet.
fn take_http(slot: &mut Slot, from: usize, n: usize) -> Option<Read_> {
    let (head, body_at) = match slot.head {
        Some(h) => (h, from),
        None => {
            slot.filled = from + n;
            match http1::parse_response(&slot.buf[..slot.filled], &LIMITS, false) {
                Ok(Some(h)) => {
                    slot.head = Some(h);
                    slot.framing = Body::new(h.framing);
                    (h, h.len)
                }
                Ok(None) => return None,
                Err(_) => return Some(Read_::Failed(Kind::BadResponse)),
            }
        }
    };
    let end = from + n;
    let fed = match slot.framing.feed(&slot.buf[body_at..end]) {
        Ok(f) => f,
        Err(_) => return Some(Read_::Failed(Kind::BadResponse)),
    };
    slot.body += fed.payload;
    if !fed.done {
        return None;
    }
    // Bytes after the end of the response: the server is out of step; do not reuse.
    let clean = body_at + fed.used == end;
    Some(Read_::Whole(is_ok(&head), head.keep_alive() && clean))
}
