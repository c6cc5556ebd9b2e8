//! A TLS connection over a nonblocking socket, driven by the event loop (no runtime). To a session
//! it behaves like the socket it wraps, edge-triggered included: `read` gives plaintext and
//! returns short only once the socket is drained (a socket read that took less than it was
//! offered, or EAGAIN) or closed, so a short read still means
//! "wait for the next edge"; `write` takes plaintext and sends records.
//!
//! The one difference is the *backlog*: records made but not taken by the socket (it was full). A
//! write first sends the backlog and fails with `WouldBlock` while any is left, so a writer that
//! keeps writing never loses order; a writer that has nothing more to say calls
//! [`TlsStream::flush_backlog`] (through `Stream::flush_backlog`) on the next writable edge, and a
//! direction or exchange counts as written only once the backlog is empty. `shutdown_write` sends
//! close_notify, then the TCP FIN once the backlog is out.
//!
//! Terminated TLS (the server side, what a listener accepts) does its handshake on rustls'
//! *unbuffered* API, then drops rustls' connection: its traffic secrets and a `KernelConnection`
//! (rustls' kernel API, for key updates) become the traffic state, and records are protected by
//! our record layer (`quill_core::tls_records`, pure) with rustls' own
//! `MessageEncrypter`/`MessageDecrypter`.
//! The records read from the socket and the records made for it live in buffers this module
//! lends from a per-worker (thread-local) pool only while they hold bytes, so an idle connection
//! owns no buffer at all, only its keys and sequence numbers. rustls' buffered connection keeps a
//! 4 KiB receive buffer (and its queues' capacity) for the connection's whole life.
//! Originated TLS (to servers, [`TlsStream::client`]) keeps rustls' buffered `ClientConnection`:
//! few of those are open at once, and idle ones are pooled by HTTP mode.
//!
//! Copies (server side, after the handshake): the socket's bytes are read into the pooled record
//! buffer, decrypted there in place and copied once into the session's buffer (a record that does
//! not fit waits in a pooled plaintext buffer); plaintext (several slices gathered) is sealed by
//! rustls' encrypter into a record of its own and copied into the pooled outgoing buffer, written
//! from there. A TLS stream never splices: the kernel
//! holds records, not the session's bytes (kTLS would change that: see
//! docs/internals/tls.md#where-ktls-would-plug-in).
//!
//! The files: this one holds [`TlsStream`], what a session sees, and dispatches to a side;
//! `server.rs` the server side (the handshake on the unbuffered API, then the traffic pass over
//! the record layer); `client.rs` the client side on rustls' buffered connection; `buffers.rs` the
//! per-worker pool of record buffers and the `Span` that lends from it.

use std::cell::{Cell, OnceCell, RefCell};
use std::io::{self, IoSlice, Write};

use rustls::server::UnbufferedServerConnection;
use rustls::{ClientConnection, HandshakeKind, ProtocolVersion};

use super::{Ready, Stream};

mod buffers;
mod client;
mod server;

pub(crate) use buffers::{give_back, lend, take_churn, trim_pool};

use buffers::churn;
use client::Io;
use server::{Goal, Server, State};

/// The most plaintext encrypted per write: one full record.
const CHUNK: usize = 16 * 1024;

/// A TLS connection and its socket.
#[derive(Debug)]
pub(crate) struct TlsStream {
    /// The socket: `Stream::Tcp` or `Stream::Unix`, never `Stream::Tls`.
    sock: Stream,
    conn: RefCell<Conn>,
    /// The server name the client asked for (server side; from its ClientHello).
    sni: OnceCell<Box<str>>,
    /// The socket reported EOF: nothing more will be read from it.
    eof: Cell<bool>,
    /// The peer's plaintext ended (close_notify, or the socket's EOF without one): the next read
    /// returns 0 once what came before is read.
    ended: Cell<bool>,
    /// close_notify was queued (once).
    notified: Cell<bool>,
    /// The FIN is owed once the backlog is out.
    shut_pending: Cell<bool>,
}

/// The side of a TLS connection. The server side is held inline (the `TlsStream` is boxed already:
/// one allocation per accepted client; its handshaking rustls connection is boxed, its traffic
/// state small); the rarer client side is boxed. Boxing the server side too would cost every
/// accepted client a second allocation, hence the allowed size difference.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
enum Conn {
    Client(Box<ClientConnection>),
    Server(Server),
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

/// A TLS failure as the `io::Error` a socket read or write returns.
fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl TlsStream {
    fn with(sock: Stream, conn: Conn) -> TlsStream {
        TlsStream {
            sock,
            conn: RefCell::new(conn),
            sni: OnceCell::new(),
            eof: Cell::new(false),
            ended: Cell::new(false),
            notified: Cell::new(false),
            shut_pending: Cell::new(false),
        }
    }

    /// A connection to a server (origination), on rustls' buffered API.
    pub(crate) fn client(sock: Stream, conn: ClientConnection) -> TlsStream {
        TlsStream::with(sock, Conn::Client(Box::new(conn)))
    }

    /// A client's connection to a TLS listener (termination), on rustls' unbuffered API.
    pub(crate) fn server(sock: Stream, conn: UnbufferedServerConnection) -> TlsStream {
        TlsStream::with(sock, Conn::Server(Server::new(conn)))
    }

    pub(crate) fn sock(&self) -> &Stream {
        &self.sock
    }

    pub(crate) fn sock_mut(&mut self) -> &mut Stream {
        &mut self.sock
    }

    /// What the handshake decided: the version, and whether it resumed a session.
    pub(crate) fn negotiated(&self) -> (Option<ProtocolVersion>, bool) {
        let resumed = |k: Option<HandshakeKind>| k == Some(HandshakeKind::Resumed);
        match &*self.conn.borrow() {
            Conn::Client(c) => (c.protocol_version(), resumed(c.handshake_kind())),
            Conn::Server(s) => match &s.state {
                State::Handshaking(c) => (c.protocol_version(), resumed(c.handshake_kind())),
                State::Traffic(r) => (
                    Some(if r.is_tls13() {
                        ProtocolVersion::TLSv1_3
                    } else {
                        ProtocolVersion::TLSv1_2
                    }),
                    s.resumed,
                ),
                State::Gone => (None, false),
            },
        }
    }

    /// The subject of the peer's verified certificate, if it sent one (server side: kept from
    /// the handshake and handed over here, so the connection does not hold it twice).
    pub(crate) fn take_peer_subject(&self) -> Option<Box<str>> {
        match &mut *self.conn.borrow_mut() {
            Conn::Client(c) => c
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| crate::tls::certs::subject_of(c))
                .map(String::into_boxed_str),
            Conn::Server(s) => s.subject.take(),
        }
    }

    /// Whether ALPN chose HTTP/2 (server side, once the handshake is done).
    pub(crate) fn alpn_h2(&self) -> bool {
        match &*self.conn.borrow() {
            Conn::Client(_) => false,
            Conn::Server(s) => s.h2,
        }
    }

    /// Whether the client sent anything yet (server side, during the handshake).
    pub(crate) fn handshake_heard(&self) -> bool {
        match &*self.conn.borrow() {
            Conn::Client(_) => true,
            Conn::Server(s) => s.hello_seen || s.in_used > 0 || !s.is_handshaking(),
        }
    }

    /// The server name the client asked for (server side), in lower case.
    pub(crate) fn server_name(&self) -> Option<&str> {
        self.sni.get().map(|s| &**s)
    }

    /// Moves the handshake on as far as the socket allows. On `Done`, `ready.readable` is set when
    /// application data already arrived with the handshake (edge-triggered: no new edge would
    /// announce it).
    pub(crate) fn handshake(&self, ready: &mut Ready) -> Result<Handshake, HandshakeError> {
        let mut conn = self.conn.borrow_mut();
        match &mut *conn {
            Conn::Client(c) => self.client_handshake(c, ready),
            Conn::Server(s) => {
                let r = self.server_handshake(s, ready);
                match &r {
                    Ok(Handshake::Done) => {
                        churn(1);
                        s.release();
                    }
                    Ok(Handshake::Pending) => {}
                    Err(_) => s.release(),
                }
                r
            }
        }
    }

    /// Reads plaintext, like a socket read: `Ok(0)` at the end (close_notify, or the socket's EOF
    /// without one), `WouldBlock` when nothing is there; short only when the socket is drained.
    pub(crate) fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut conn = self.conn.borrow_mut();
        match &mut *conn {
            Conn::Client(c) => self.client_read(c, buf),
            Conn::Server(s) => {
                let r = self.server_read(s, buf);
                s.release();
                r
            }
        }
    }

    /// Whether the peer's plaintext has ended: a short read does not mean "wait for an edge" then
    /// (close_notify comes with no event of its own), the next read returns 0.
    pub(crate) fn ended(&self) -> bool {
        self.ended.get()
    }

    /// Sends the backlog. Ok(true) when none is left (and the FIN owed, if any, was sent).
    fn send_backlog(&self, conn: &mut Conn) -> io::Result<bool> {
        match conn {
            Conn::Client(c) => {
                while c.wants_write() {
                    match c.write_tls(&mut Io(&self.sock)) {
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            Conn::Server(s) => {
                if !s.out.send(&self.sock)? {
                    return Ok(false);
                }
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
        // At most one record's worth per call keeps the backlog small.
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
        let n = match &mut *conn {
            Conn::Client(c) => c.writer().write_vectored(&taken[..count])?,
            Conn::Server(s) => {
                let r = self.server_write(s, &taken[..count]);
                if r.is_err() {
                    s.release();
                }
                r?
            }
        };
        // Out now if the socket takes it; what it does not is the backlog.
        self.send_backlog(&mut conn)?;
        if let Conn::Server(s) = &mut *conn {
            s.release();
        }
        Ok(n)
    }

    /// Whether records wait for the socket.
    pub(crate) fn has_backlog(&self) -> bool {
        let pending = match &*self.conn.borrow() {
            Conn::Client(c) => c.wants_write(),
            Conn::Server(s) => s.has_backlog(),
        };
        pending || self.shut_pending.get()
    }

    /// Sends what waits; Ok(true) when nothing is left.
    pub(crate) fn flush_backlog(&self) -> io::Result<bool> {
        let mut conn = self.conn.borrow_mut();
        self.send_backlog(&mut conn)
    }

    /// Queues close_notify (once).
    fn notify(&self, conn: &mut Conn) {
        if self.notified.replace(true) {
            return;
        }
        match conn {
            Conn::Client(c) => c.send_close_notify(),
            Conn::Server(s) => {
                let _ = s.pass(&self.sock, &mut Goal::CloseNotify);
            }
        }
    }

    /// Half-close: close_notify, then the socket's FIN once every record is out (`WouldBlock`
    /// while some wait: the FIN goes with the backlog's last byte).
    pub(crate) fn shutdown_write(&self) -> io::Result<()> {
        let mut conn = self.conn.borrow_mut();
        if !self.notified.get() {
            self.notify(&mut conn);
            self.shut_pending.set(true);
        }
        let done = self.send_backlog(&mut conn);
        if let Conn::Server(s) = &mut *conn {
            s.release();
        }
        if done? {
            Ok(())
        } else {
            Err(io::ErrorKind::WouldBlock.into())
        }
    }
}

impl Drop for TlsStream {
    /// A session ending without a half-close still tells the peer it was a clean end, when the
    /// socket takes the alert now. The buffers go back to the worker's pool.
    fn drop(&mut self) {
        let conn = self.conn.get_mut();
        let handshaking = match conn {
            Conn::Client(c) => c.is_handshaking(),
            Conn::Server(s) => !matches!(s.state, State::Traffic(_)),
        };
        if !self.notified.get() && !handshaking {
            self.notified.set(true);
            match conn {
                Conn::Client(c) => {
                    c.send_close_notify();
                    let _ = c.write_tls(&mut Io(&self.sock));
                }
                Conn::Server(s) => {
                    // Only if nothing waits before it: the alert must not jump the queue.
                    if !s.has_backlog() {
                        let _ = s.pass(&self.sock, &mut Goal::CloseNotify);
                        let _ = s.out.send(&self.sock);
                    }
                }
            }
        }
        if let Conn::Server(s) = conn {
            s.in_used = 0;
            s.out.start = s.out.end;
            s.plain.start = s.plain.end;
            s.release();
        }
    }
}

#[cfg(test)]
mod tests {
    /// The traffic state is small: rustls' connection (about 1.1 KiB inline) is gone once the
    /// handshake ends, so the stream an idle connection keeps is a few hundred bytes.
    #[test]
    fn an_idle_tls_stream_is_a_few_hundred_bytes() {
        let stream = std::mem::size_of::<super::TlsStream>();
        let records = std::mem::size_of::<quill_core::tls_records::Records>();
        let kernel = std::mem::size_of::<
            rustls::kernel::KernelConnection<rustls::server::ServerConnectionData>,
        >();
        println!("TlsStream {stream} bytes, Records {records} bytes, KernelConnection {kernel}");
        assert!(stream <= 320, "TlsStream is {stream} bytes");
        assert!(records <= 128, "Records is {records} bytes");
    }
}
