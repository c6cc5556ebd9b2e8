//! A TLS connection over a nonblocking socket, driven by the event loop (rustls' buffered API, no
//! runtime). To a session it behaves like the socket it wraps, edge-triggered included: `read`
//! gives plaintext and returns short only once the socket is drained (EAGAIN) or closed, so a
//! short read still means "wait for the next edge"; `write` takes plaintext and sends records.
//!
//! The one difference is the *backlog*: records rustls has made but the socket did not take
//! (it was full). A write first sends the backlog and fails with `WouldBlock` while any is left, so
//! a writer that keeps writing never loses order; a writer that has nothing more to say calls
//! [`TlsStream::flush_backlog`] (through `Stream::flush_backlog`) on the next writable edge, and a
//! direction or exchange counts as written only once the backlog is empty. `shutdown_write` sends
//! close_notify, then the TCP FIN once the backlog is out.
//!
//! Copies: the socket's bytes go into rustls' buffer (`read_tls`), are decrypted in place, and
//! copied once into the session's pooled buffer; plaintext is encrypted from the pooled buffer
//! into rustls' send buffer and written from there. A TLS stream never splices: the kernel holds
//! records, not the session's bytes (kTLS would change that: see ARCHITECTURE.md).

use std::cell::{Cell, RefCell};
use std::io::{self, IoSlice, Read, Write};

use rustls::Connection;

use super::{Ready, Stream};

/// The most plaintext encrypted per write: one full record.
const CHUNK: usize = 16 * 1024;

/// A TLS connection and its socket.
#[derive(Debug)]
pub(crate) struct TlsStream {
    /// The socket: `Stream::Tcp` or `Stream::Unix`, never `Stream::Tls`.
    sock: Stream,
    conn: RefCell<Connection>,
    /// The socket reported EOF: rustls knows, nothing more will be read from it.
    eof: Cell<bool>,
    /// The peer's plaintext ended (close_notify, or the socket's EOF without one): the next read
    /// returns 0 once what came before is read.
    ended: Cell<bool>,
    /// close_notify was queued (once).
    notified: Cell<bool>,
    /// The FIN is owed once the backlog is out.
    shut_pending: Cell<bool>,
}

/// Where a handshake is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Handshake {
    /// Done and every handshake byte sent.
    Done,
    /// Waiting for the socket (readable or writable, as the flags say).
    Pending,
}

/// Why a handshake failed.
#[derive(Debug)]
pub(crate) enum HandshakeError {
    /// The peer closed (or reset) before the end.
    Closed,
    /// The socket failed.
    Io(io::Error),
    /// The TLS exchange failed: the alert was sent.
    Tls(rustls::Error),
}

/// `io::Read`/`io::Write` over the plain socket for rustls' `read_tls`/`write_tls`.
struct Io<'a>(&'a Stream);

impl Read for Io<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Io<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl TlsStream {
    pub(crate) fn new(sock: Stream, conn: Connection) -> TlsStream {
        TlsStream {
            sock,
            conn: RefCell::new(conn),
            eof: Cell::new(false),
            ended: Cell::new(false),
            notified: Cell::new(false),
            shut_pending: Cell::new(false),
        }
    }

    pub(crate) fn sock(&self) -> &Stream {
        &self.sock
    }

    pub(crate) fn sock_mut(&mut self) -> &mut Stream {
        &mut self.sock
    }

    /// The rustls connection, for what the handshake decided (version, SNI, ALPN, peer
    /// certificates).
    pub(crate) fn conn(&self) -> std::cell::Ref<'_, Connection> {
        self.conn.borrow()
    }

    /// Moves the handshake on as far as the socket allows. On `Done`, `ready.readable` is set when
    /// application data already arrived with the handshake (edge-triggered: no new edge would
    /// announce it).
    pub(crate) fn handshake(&self, ready: &mut Ready) -> Result<Handshake, HandshakeError> {
        let mut conn = self.conn.borrow_mut();
        let mut plaintext = false;
        for _ in 0..64 {
            while conn.wants_write() && ready.writable {
                match conn.write_tls(&mut Io(&self.sock)) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready.writable = false,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(HandshakeError::Io(e)),
                }
            }
            if !conn.is_handshaking() {
                if conn.wants_write() {
                    return Ok(Handshake::Pending);
                }
                if plaintext || self.eof.get() {
                    ready.readable = true;
                }
                return Ok(Handshake::Done);
            }
            if !ready.readable {
                return Ok(Handshake::Pending);
            }
            match conn.read_tls(&mut Io(&self.sock)) {
                Ok(0) => {
                    self.eof.set(true);
                    return Err(HandshakeError::Closed);
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready.readable = false;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    if ready.error || e.kind() == io::ErrorKind::ConnectionReset {
                        return Err(HandshakeError::Closed);
                    }
                    return Err(HandshakeError::Io(e));
                }
            }
            match conn.process_new_packets() {
                Ok(state) => plaintext = state.plaintext_bytes_to_read() > 0,
                Err(e) => {
                    // The alert rustls queued, best effort: the client learns why.
                    let _ = conn.write_tls(&mut Io(&self.sock));
                    return Err(HandshakeError::Tls(e));
                }
            }
        }
        Ok(Handshake::Pending)
    }

    /// Reads plaintext, like a socket read: `Ok(0)` at the end (close_notify, or the socket's EOF
    /// without one), `WouldBlock` when nothing is there; short only when the socket is drained.
    pub(crate) fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut conn = self.conn.borrow_mut();
        let mut n = 0;
        loop {
            match conn.reader().read(&mut buf[n..]) {
                Ok(0) => {
                    self.ended.set(true);
                    return Ok(n);
                }
                Ok(k) => {
                    n += k;
                    if n == buf.len() {
                        return Ok(n);
                    }
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The socket closed without close_notify: an end all the same (many clients do
                // it); what was sent before it is delivered.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    self.ended.set(true);
                    return Ok(n);
                }
                Err(e) => return if n > 0 { Ok(n) } else { Err(e) },
            }
            if self.eof.get() {
                return Ok(n);
            }
            match conn.read_tls(&mut Io(&self.sock)) {
                Ok(0) => self.eof.set(true),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return if n > 0 { Ok(n) } else { Err(e) };
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return if n > 0 { Ok(n) } else { Err(e) },
            }
            if let Err(e) = conn.process_new_packets() {
                let _ = conn.write_tls(&mut Io(&self.sock));
                return if n > 0 { Ok(n) } else { Err(tls_error(e)) };
            }
            // Records rustls must answer (a key update, an alert): out with the next write, or
            // now if the socket takes them.
            if conn.wants_write() {
                let _ = conn.write_tls(&mut Io(&self.sock));
            }
        }
    }

    /// Whether the peer's plaintext has ended: a short read does not mean "wait for an edge" then
    /// (close_notify comes with no event of its own), the next read returns 0.
    pub(crate) fn ended(&self) -> bool {
        self.ended.get()
    }

    /// Sends the backlog. Ok(true) when none is left (and the FIN owed, if any, was sent).
    fn send_backlog(&self, conn: &mut Connection) -> io::Result<bool> {
        while conn.wants_write() {
            match conn.write_tls(&mut Io(&self.sock)) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.shut_pending.replace(false) {
            self.sock.shutdown_write()?;
        }
        Ok(true)
    }

    /// Encrypts and sends plaintext: how much was taken. `WouldBlock` while an earlier backlog is
    /// still unsent.
    pub(crate) fn write(&self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    pub(crate) fn write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut conn = self.conn.borrow_mut();
        if !self.send_backlog(&mut conn)? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        // At most one record's worth per call keeps rustls' send buffer (and the backlog) small.
        let mut taken = [IoSlice::new(&[]); 4];
        let mut room = CHUNK;
        let mut count = 0;
        for b in bufs.iter().filter(|b| !b.is_empty()) {
            if room == 0 || count == taken.len() {
                break;
            }
            let len = b.len().min(room);
            taken[count] = IoSlice::new(&b[..len]);
            room -= len;
            count += 1;
        }
        if count == 0 {
            return Ok(0);
        }
        let n = conn.writer().write_vectored(&taken[..count])?;
        // Out now if the socket takes it; what it does not is the backlog.
        self.send_backlog(&mut conn)?;
        Ok(n)
    }

    /// Whether records wait for the socket.
    pub(crate) fn has_backlog(&self) -> bool {
        self.conn.borrow().wants_write() || self.shut_pending.get()
    }

    /// Sends what waits; Ok(true) when nothing is left.
    pub(crate) fn flush_backlog(&self) -> io::Result<bool> {
        let mut conn = self.conn.borrow_mut();
        self.send_backlog(&mut conn)
    }

    /// Half-close: close_notify, then the socket's FIN once every record is out (`WouldBlock`
    /// while some wait: the FIN goes with the backlog's last byte).
    pub(crate) fn shutdown_write(&self) -> io::Result<()> {
        let mut conn = self.conn.borrow_mut();
        if !self.notified.replace(true) {
            conn.send_close_notify();
            self.shut_pending.set(true);
        }
        if self.send_backlog(&mut conn)? {
            Ok(())
        } else {
            Err(io::ErrorKind::WouldBlock.into())
        }
    }
}

impl Drop for TlsStream {
    /// A session ending without a half-close still tells the peer it was a clean end, when the
    /// socket takes the alert now.
    fn drop(&mut self) {
        if !self.notified.get() {
            let conn = self.conn.get_mut();
            if !conn.is_handshaking() {
                conn.send_close_notify();
                let _ = conn.write_tls(&mut Io(&self.sock));
            }
        }
    }
}
