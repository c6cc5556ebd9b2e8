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
//! our record layer (`quill_core::tls_records`, pure) with rustls' own `MessageEncrypter`/`MessageDecrypter`.
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
//! holds records, not the session's bytes (kTLS would change that: see ARCHITECTURE.md).

use std::cell::{Cell, OnceCell, RefCell};
use std::io::{self, IoSlice, Read, Write};

use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, InsufficientSizeError};
use rustls::{ClientConnection, HandshakeKind, ProtocolVersion};

use super::{Ready, Stream};

use quill_core::tls_records::{Event, Records};

/// The most plaintext encrypted per write: one full record.
const CHUNK: usize = 16 * 1024;
/// Size of a pooled record buffer: one record of the largest size on the wire (16 KiB of
/// plaintext, 2 KiB of expansion TLS 1.2 allows, the header) fits.
pub(crate) const TLS_BUF: usize = 16 * 1024 + 2048 + 5 + 123;
/// A handshake message may be larger than a record (a client's certificate chain): the incoming
/// buffer grows up to this while one is joined, as rustls' own limit (64 KiB) allows.
const MAX_HANDSHAKE_BUF: usize = 0xffff + 4 * TLS_BUF;
/// Free record buffers a worker keeps (the rest of a burst's go back to the heap).
const POOL_MAX: usize = 64;
/// Free record buffers a worker keeps once a burst is over.
const POOL_KEEP: usize = 4;
/// Plaintext up to this size, given in several slices (a head and a short body), is gathered
/// into one record rather than one record a slice.
const GATHER: usize = 4096;

thread_local! {
    /// This worker's free record buffers, each `TLS_BUF` long.
    static POOL: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
    /// Buffers freed because the pool was full, plus handshakes finished, since the worker's
    /// pools last looked ([`take_churn`]): a burst of either leaves free memory in the heap for
    /// the worker's trim.
    static CHURN: Cell<usize> = const { Cell::new(0) };
}

/// A record buffer from this worker's pool (or a new one).
fn lend() -> Box<[u8]> {
    POOL.with_borrow_mut(Vec::pop)
        .unwrap_or_else(|| vec![0u8; TLS_BUF].into_boxed_slice())
}

/// `buf` made `len` long, its first `keep` bytes kept (for the rare record or handshake message
/// larger than a pooled buffer).
fn grow(buf: &mut Box<[u8]>, keep: usize, len: usize) {
    let mut bigger = vec![0u8; len].into_boxed_slice();
    bigger[..keep].copy_from_slice(&buf[..keep]);
    let mut old = std::mem::replace(buf, bigger);
    give_back(&mut old);
}

/// Gives `buf` back (when it is the pool's size: one grown for a large handshake message is
/// freed). `buf` is left empty, holding no memory.
fn give_back(buf: &mut Box<[u8]>) {
    let buf = std::mem::take(buf);
    if buf.len() != TLS_BUF {
        if !buf.is_empty() {
            churn(1);
        }
        return;
    }
    POOL.with_borrow_mut(|pool| {
        if pool.len() < POOL_MAX {
            pool.push(buf);
        } else {
            churn(1);
        }
    });
}

fn churn(n: usize) {
    CHURN.with(|c| c.set(c.get().saturating_add(n)));
}

/// Record buffers freed and handshakes finished on this worker since the last call (for
/// `Pools::after_turn`, which trims the heap once such a burst is over).
pub(crate) fn take_churn() -> usize {
    CHURN.with(|c| c.replace(0))
}

/// Keeps a few of this worker's free record buffers (after a burst: each connection that
/// becomes busy again takes one only while it holds bytes).
pub(crate) fn trim_pool() {
    POOL.with_borrow_mut(|pool| {
        pool.truncate(POOL_KEEP);
        pool.shrink_to_fit();
    });
}

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

/// Bytes held in a pooled buffer: `buf[start..end]`. Holds no memory while empty (once
/// released).
#[derive(Default)]
struct Span {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Span {
    fn len(&self) -> usize {
        self.end - self.start
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Room for `need` more bytes after the held ones (lent, moved down or grown as needed).
    fn room(&mut self, need: usize) -> &mut [u8] {
        if self.buf.is_empty() {
            self.buf = lend();
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        if self.buf.len() - self.end < need && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() - self.end < need {
            grow(&mut self.buf, self.end, self.end + need);
        }
        &mut self.buf[self.end..]
    }

    fn push(&mut self, bytes: &[u8]) {
        self.room(bytes.len())[..bytes.len()].copy_from_slice(bytes);
        self.end += bytes.len();
    }

    /// Copies held bytes into `out`: how many.
    fn take(&mut self, out: &mut [u8]) -> usize {
        let n = out.len().min(self.len());
        out[..n].copy_from_slice(&self.buf[self.start..self.start + n]);
        self.start += n;
        self.release();
        n
    }

    /// Gives the buffer back when it holds nothing.
    fn release(&mut self) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            if !self.buf.is_empty() {
                give_back(&mut self.buf);
            }
        }
    }

    /// Writes the held bytes to `sock` as far as it takes them: Ok(true) when none is left.
    fn send(&mut self, sock: &Stream) -> io::Result<bool> {
        while self.start < self.end {
            match sock.write(self.bytes()) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.start += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.release();
        Ok(true)
    }
}

/// The server side: rustls' unbuffered API for the handshake, then our record layer
/// (`quill_core::tls_records`). Every buffer is empty (no memory) unless it holds bytes.
struct Server {
    state: State,
    /// The handshake is over and rustls has nothing left to send: the connection can become its
    /// traffic state.
    traffic_ready: bool,
    /// The handshake resumed a session.
    resumed: bool,
    /// The verified client certificate's subject (computed once, when the handshake ends: the
    /// traffic state keeps no certificate).
    subject: Option<Box<str>>,
    /// Records read from the socket, not yet processed: `inb[..in_used]`.
    inb: Box<[u8]>,
    in_used: usize,
    /// While handshaking, the bytes of `inb` rustls may see: whole records, given one at a time
    /// as it asks for more, so that it never sees a record past the client's Finished. Those
    /// (application data, a KeyUpdate, close_notify, sent in the same write as the Finished) are
    /// the traffic state's to read: rustls' connection would take them in and keep (or drop)
    /// what they brought when it is turned into the traffic state.
    fed: usize,
    /// rustls last said `BlockedHandshake` with `inb[..blocked_at]` before it: it wants a record
    /// more, and is not shown those bytes again until there is one (or more of a partial one).
    /// Showing them again is not idle: a record rustls could not decrypt after refusing the
    /// client's early data ("trial decryption") is dropped without being counted in `discard`
    /// when it is the last record shown, so each showing would count its length again against
    /// the early data rustls allows to drop (16 KiB), and a client's rejected 0-RTT record would
    /// fail the handshake (bad_record_mac) while the server waits for the client's Finished.
    blocked_at: Option<usize>,
    /// Records made, not yet taken by the socket (the backlog).
    out: Span,
    /// Plaintext decrypted but not yet read (a record larger than the reader's room, or records
    /// that came while only writing).
    plain: Span,
    /// The client's close_notify came: the plaintext ends after `plain`.
    peer_closed: bool,
    /// The ClientHello was looked at for its server name.
    hello_seen: bool,
    /// rustls failed (and its alert was sent): the connection is over.
    failed: bool,
    /// The last `fill` read less than the room it offered: the socket was drained then.
    short_fill: bool,
}

/// A server connection's state: handshaking on rustls' connection (boxed: large, and dropped
/// when the handshake ends), then the traffic state, small.
enum State {
    Handshaking(Box<UnbufferedServerConnection>),
    Traffic(Records),
    /// Neither: the change from one to the other failed.
    Gone,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("in_used", &self.in_used)
            .field("out", &self.out.len())
            .field("plain", &self.plain.len())
            .field("peer_closed", &self.peer_closed)
            .finish_non_exhaustive()
    }
}

/// What a pass over rustls' states is for.
enum Goal<'a> {
    /// Finish the handshake.
    Handshake,
    /// Decrypt into this buffer (filled up to `.1`).
    Read(&'a mut [u8], usize),
    /// Encrypt this plaintext (one write's worth, a record: several slices are gathered).
    Write(&'a [IoSlice<'a>]),
    /// Encrypt a close_notify alert.
    CloseNotify,
}

/// How a pass ended.
#[derive(Debug, PartialEq, Eq)]
enum Pass {
    /// The goal is met (read: the buffer is full; write: the plaintext or alert is in `out`).
    Met,
    /// rustls needs more bytes from the peer.
    NeedInput,
    /// The peer's plaintext has ended (close_notify).
    PeerClosed,
    /// Both sides sent close_notify: nothing more can be written.
    Closed,
}

impl Server {
    fn new(conn: UnbufferedServerConnection) -> Server {
        Server {
            state: State::Handshaking(Box::new(conn)),
            traffic_ready: false,
            resumed: false,
            subject: None,
            inb: Box::default(),
            in_used: 0,
            fed: 0,
            blocked_at: None,
            out: Span::default(),
            plain: Span::default(),
            peer_closed: false,
            hello_seen: false,
            failed: false,
            short_fill: false,
        }
    }

    fn has_backlog(&self) -> bool {
        self.out.len() > 0
    }

    fn has_plain(&self) -> bool {
        self.plain.len() > 0
    }

    /// Returns the buffers that hold nothing to the pool.
    fn release(&mut self) {
        if self.in_used == 0 && !self.inb.is_empty() {
            give_back(&mut self.inb);
        }
        self.out.release();
        self.plain.release();
    }

    /// Reads the socket into `inb`: Ok(0) at EOF, `WouldBlock` when drained (`short_fill` says
    /// whether the read took less than it was offered).
    fn fill(&mut self, sock: &Stream) -> io::Result<usize> {
        if self.inb.is_empty() {
            self.inb = lend();
        }
        if self.in_used == self.inb.len() {
            // Only a handshake message being joined can fill a buffer made for a whole record.
            if self.inb.len() >= MAX_HANDSHAKE_BUF || !self.is_handshaking() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "TLS message larger than allowed",
                ));
            }
            let len = (self.inb.len() * 2).min(MAX_HANDSHAKE_BUF);
            grow(&mut self.inb, self.in_used, len);
        }
        loop {
            let room = self.inb.len() - self.in_used;
            match sock.read(&mut self.inb[self.in_used..]) {
                Ok(n) => {
                    self.in_used += n;
                    self.short_fill = n < room;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Drops `discard` processed bytes from the front of `inb`.
    fn discard(&mut self, discard: usize) {
        if discard == 0 {
            return;
        }
        let discard = discard.min(self.in_used);
        self.inb.copy_within(discard..self.in_used, 0);
        self.in_used -= discard;
        self.fed = self.fed.saturating_sub(discard);
    }

    /// Lets rustls see the next record of `inb` (`fed` moves to its end, which may be past the
    /// bytes read so far: rustls sees what there is of it, and judges its header at once):
    /// whether there was one.
    fn feed(&mut self) -> bool {
        if self.fed >= self.in_used {
            return false;
        }
        let Some(&[_, _, _, a, b]) = self.inb.get(self.fed..self.fed + 5) else {
            return false;
        };
        if self.fed + 5 > self.in_used {
            return false;
        }
        self.fed += 5 + usize::from(u16::from_be_bytes([a, b]));
        true
    }

    /// Runs rustls' states over what `inb` holds until `goal` is met or rustls needs more input.
    /// Handshake records are encoded into `out` and sent when the socket takes them; application
    /// data beyond the goal's room is kept in `plain`.
    fn pass(&mut self, sock: &Stream, goal: &mut Goal<'_>) -> Result<Pass, rustls::Error> {
        // Each round consumes a record, a handshake message or a state change, so what `inb`
        // holds bounds it; the bound only guards against a state that would not move.
        if self.failed {
            return Err(rustls::Error::General("the TLS connection failed".into()));
        }
        for _ in 0..1024 {
            let State::Handshaking(conn) = &mut self.state else {
                return self.traffic_pass(sock, goal);
            };
            let shown = self.fed.min(self.in_used);
            if self.blocked_at == Some(shown) {
                // Nothing new for rustls: the next record, if whole.
                if self.feed() {
                    continue;
                }
                return Ok(Pass::NeedInput);
            }
            self.blocked_at = None;
            let status = conn.process_tls_records(&mut self.inb[..shown]);
            let mut discard = status.discard;
            let mut outcome = None;
            let mut failed = None;
            match status.state {
                Err(e) => failed = Some(e),
                Ok(ConnectionState::ReadTraffic(mut r)) => {
                    while let Some(record) = r.next_record() {
                        let record = match record {
                            Ok(r) => r,
                            Err(e) => {
                                failed = Some(e);
                                break;
                            }
                        };
                        discard += record.discard;
                        let payload = record.payload;
                        let taken = match goal {
                            Goal::Read(buf, n) => {
                                let k = payload.len().min(buf.len() - *n);
                                buf[*n..*n + k].copy_from_slice(&payload[..k]);
                                *n += k;
                                k
                            }
                            _ => 0,
                        };
                        if taken < payload.len() {
                            self.plain.push(&payload[taken..]);
                        }
                    }
                    if let Goal::Read(buf, n) = goal {
                        if *n == buf.len() {
                            outcome = Some(Pass::Met);
                        }
                    }
                }
                Ok(ConnectionState::ReadEarlyData(mut r)) => {
                    // 0-RTT is off: none is accepted, none should come; dropped if it does.
                    while let Some(record) = r.next_record() {
                        match record {
                            Ok(record) => discard += record.discard,
                            Err(e) => {
                                failed = Some(e);
                                break;
                            }
                        }
                    }
                }
                Ok(ConnectionState::EncodeTlsData(mut e)) => {
                    let mut need = 0;
                    loop {
                        match e.encode(self.out.room(need)) {
                            Ok(n) => {
                                self.out.end += n;
                                break;
                            }
                            Err(EncodeError::InsufficientSize(InsufficientSizeError {
                                required_size,
                            })) if need < required_size => need = required_size,
                            Err(_) => break,
                        }
                    }
                }
                Ok(ConnectionState::TransmitTlsData(t)) => {
                    // The records are ours to send now: what the socket does not take stays in
                    // `out`, the backlog, sent before anything made later.
                    t.done();
                    if self.out.send(sock).is_err() {
                        // The socket failed: the next read or write reports it.
                        self.out.start = self.out.end;
                    }
                }
                Ok(ConnectionState::BlockedHandshake) => {
                    // rustls took every record it was given: the next one, if whole.
                    self.blocked_at = Some(shown.saturating_sub(discard));
                    if !self.feed() {
                        outcome = Some(Pass::NeedInput);
                    }
                }
                Ok(ConnectionState::PeerClosed) => self.peer_closed = true,
                Ok(ConnectionState::Closed) => {
                    self.peer_closed = true;
                    outcome = Some(Pass::Closed);
                }
                Ok(ConnectionState::WriteTraffic(mut w)) => match goal {
                    Goal::Handshake | Goal::Read(..) => {
                        self.traffic_ready = true;
                        outcome = Some(if self.peer_closed {
                            Pass::PeerClosed
                        } else {
                            Pass::NeedInput
                        });
                    }
                    Goal::Write(bufs) => {
                        // Several slices (a head and a short body) are gathered into one record:
                        // copied after the room the record takes in `out`, encrypted from there.
                        let total: usize = bufs.iter().map(|b| b.len()).sum();
                        let gather = bufs.len() > 1;
                        let mut need = total + 64;
                        loop {
                            let room = self.out.room(need + if gather { total } else { 0 });
                            let (dst, src) = room.split_at_mut(need);
                            let plain: &[u8] = if gather {
                                let mut at = 0;
                                for b in bufs.iter() {
                                    src[at..at + b.len()].copy_from_slice(b);
                                    at += b.len();
                                }
                                &src[..total]
                            } else {
                                bufs.first().map_or(&[][..], |b| &b[..])
                            };
                            match w.encrypt(plain, dst) {
                                Ok(n) => {
                                    self.out.end += n;
                                    outcome = Some(Pass::Met);
                                    break;
                                }
                                Err(EncryptError::InsufficientSize(InsufficientSizeError {
                                    required_size,
                                })) if need < required_size => need = required_size,
                                Err(_) => {
                                    failed = Some(rustls::Error::EncryptError);
                                    break;
                                }
                            }
                        }
                    }
                    Goal::CloseNotify => {
                        let mut need = 64;
                        loop {
                            match w.queue_close_notify(self.out.room(need)) {
                                Ok(n) => {
                                    self.out.end += n;
                                    break;
                                }
                                Err(EncryptError::InsufficientSize(InsufficientSizeError {
                                    required_size,
                                })) if need < required_size => need = required_size,
                                Err(_) => break,
                            }
                        }
                        outcome = Some(Pass::Met);
                    }
                },
                Ok(_) => outcome = Some(Pass::NeedInput),
            }
            self.discard(discard);
            if let Some(e) = failed {
                self.send_alert(sock);
                return Err(e);
            }
            if let Some(o) = outcome {
                return Ok(o);
            }
        }
        Ok(Pass::NeedInput)
    }

    /// After an error: sends the alert rustls queued (best effort: the client learns why). Only
    /// queued records are asked for: another pass would process the failed bytes again.
    fn send_alert(&mut self, sock: &Stream) {
        self.failed = true;
        for _ in 0..4 {
            let State::Handshaking(conn) = &mut self.state else {
                break;
            };
            if !conn.wants_write() {
                break;
            }
            // rustls hands out queued records before it looks at the input: none is given.
            let status = conn.process_tls_records(&mut []);
            match status.state {
                Ok(ConnectionState::EncodeTlsData(mut e)) => {
                    if let Ok(n) = e.encode(self.out.room(64)) {
                        self.out.end += n;
                    }
                }
                _ => break,
            }
        }
        let _ = self.out.send(sock);
    }

    fn is_handshaking(&self) -> bool {
        match &self.state {
            State::Handshaking(c) => c.is_handshaking(),
            State::Traffic(_) | State::Gone => false,
        }
    }

    /// Turns a finished handshake into the traffic state: rustls' connection is dropped, its
    /// secrets and a `KernelConnection` (for key updates) kept. Only once rustls has nothing left
    /// to send (`traffic_ready`), as its kernel API requires.
    fn become_traffic(&mut self) -> Result<(), rustls::Error> {
        let State::Handshaking(conn) = &self.state else {
            return Ok(());
        };
        if !self.traffic_ready || conn.is_handshaking() {
            return Err(rustls::Error::HandshakeNotComplete);
        }
        // rustls was given records one at a time and discards each it took: bytes it was given
        // and kept are a handshake message being joined across records after the handshake,
        // which the traffic state refuses.
        if self.fed > 0 {
            return Err(rustls::Error::General(
                "a handshake message split across records after the handshake".into(),
            ));
        }
        self.resumed = conn.handshake_kind() == Some(HandshakeKind::Resumed);
        self.subject = conn
            .peer_certificates()
            .and_then(|c| c.first())
            .and_then(|c| crate::tls::certs::subject_of(c))
            .map(String::into_boxed_str);
        let State::Handshaking(conn) = std::mem::replace(&mut self.state, State::Gone) else {
            return Ok(());
        };
        let (secrets, kernel) = conn.dangerous_into_kernel_connection()?;
        self.state = State::Traffic(Records::new(secrets, kernel)?);
        Ok(())
    }

    /// [`Server::pass`] in the traffic state: the records `inb` holds read by [`Records`], the
    /// records made (and those owed: a key update, an alert) put in `out`.
    fn traffic_pass(&mut self, sock: &Stream, goal: &mut Goal<'_>) -> Result<Pass, rustls::Error> {
        let State::Traffic(rec) = &mut self.state else {
            self.failed = true;
            return Err(rustls::Error::General("the TLS connection failed".into()));
        };
        let out = &mut self.out;
        let mut emit = |b: &[u8]| out.push(b);
        let result = match goal {
            Goal::Handshake => Ok(Pass::NeedInput),
            Goal::Read(buf, n) => {
                let mut result = Ok(Pass::NeedInput);
                let mut at = 0;
                // Each round takes a whole record (5 bytes at least) or ends the loop.
                for _ in 0..=self.in_used / 5 {
                    if self.peer_closed {
                        result = Ok(Pass::PeerClosed);
                        break;
                    }
                    let (used, event) = match rec.read(&mut self.inb[at..self.in_used]) {
                        Ok(Some(r)) => r,
                        Ok(None) => break,
                        Err(e) => {
                            result = Err(e);
                            break;
                        }
                    };
                    match event {
                        Event::Data(range) => {
                            let payload = &self.inb[at + range.start..at + range.end];
                            let k = payload.len().min(buf.len() - *n);
                            buf[*n..*n + k].copy_from_slice(&payload[..k]);
                            *n += k;
                            if k < payload.len() {
                                self.plain.push(&payload[k..]);
                            }
                        }
                        Event::PeerClosed => self.peer_closed = true,
                        Event::Nothing => {}
                    }
                    at += used;
                    rec.owed(&mut emit);
                    if *n == buf.len() {
                        result = Ok(Pass::Met);
                        break;
                    }
                }
                if at > 0 {
                    self.inb.copy_within(at..self.in_used, 0);
                    self.in_used -= at;
                }
                result
            }
            Goal::Write(bufs) => {
                if rec.write_closed() {
                    Ok(Pass::Closed)
                } else {
                    let mut slices: [&[u8]; 4] = [&[]; 4];
                    let k = bufs.len().min(slices.len());
                    for (slot, b) in slices.iter_mut().zip(bufs.iter()) {
                        *slot = b;
                    }
                    rec.write(&slices[..k], &mut emit).map(|()| Pass::Met)
                }
            }
            Goal::CloseNotify => {
                rec.close_notify(&mut emit);
                Ok(Pass::Met)
            }
        };
        if result.is_err() {
            rec.owed(&mut emit);
            self.failed = true;
        }
        if matches!(goal, Goal::Read(..)) || result.is_err() {
            // What a read owes the peer (a key update, an alert) goes now if the socket takes it.
            if self.out.send(sock).is_err() {
                self.out.start = self.out.end;
            }
        }
        result
    }
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

    fn server_handshake(
        &self,
        s: &mut Server,
        ready: &mut Ready,
    ) -> Result<Handshake, HandshakeError> {
        for _ in 0..64 {
            if s.has_backlog() && ready.writable {
                match s.out.send(&self.sock) {
                    Ok(true) => {}
                    Ok(false) => ready.writable = false,
                    Err(e) => return Err(HandshakeError::Io(e)),
                }
            }
            if !s.hello_seen && s.in_used > 0 {
                match quill_core::tls_hello::parse(&s.inb[..s.in_used]) {
                    Ok(None) => {}
                    Ok(Some(hello)) => {
                        s.hello_seen = true;
                        if let Some(name) = hello.server_name() {
                            let name = String::from_utf8_lossy(name.as_bytes()).to_lowercase();
                            let _ = self.sni.set(name.into_boxed_str());
                        }
                    }
                    // rustls says why (its alert and error).
                    Err(_) => s.hello_seen = true,
                }
            }
            let pass = s.pass(&self.sock, &mut Goal::Handshake);
            match pass {
                Err(e) => return Err(HandshakeError::Tls(e)),
                Ok(Pass::PeerClosed | Pass::Closed) => return Err(HandshakeError::Closed),
                Ok(Pass::Met | Pass::NeedInput) => {}
            }
            if !s.is_handshaking() {
                if !s.traffic_ready {
                    continue;
                }
                if let Err(e) = s.become_traffic() {
                    s.failed = true;
                    return Err(HandshakeError::Tls(e));
                }
                if s.has_backlog() {
                    if ready.writable {
                        continue;
                    }
                    return Ok(Handshake::Pending);
                }
                if s.has_plain() || s.in_used > 0 || self.eof.get() {
                    ready.readable = true;
                }
                return Ok(Handshake::Done);
            }
            if s.has_backlog() && ready.writable {
                continue;
            }
            if !ready.readable {
                return Ok(Handshake::Pending);
            }
            match s.fill(&self.sock) {
                Ok(0) => {
                    self.eof.set(true);
                    return Err(HandshakeError::Closed);
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready.readable = false;
                    if s.in_used == 0 {
                        give_back(&mut s.inb);
                    }
                }
                Err(e) => {
                    if ready.error || e.kind() == io::ErrorKind::ConnectionReset {
                        return Err(HandshakeError::Closed);
                    }
                    return Err(HandshakeError::Io(e));
                }
            }
        }
        Ok(Handshake::Pending)
    }

    fn client_handshake(
        &self,
        conn: &mut ClientConnection,
        ready: &mut Ready,
    ) -> Result<Handshake, HandshakeError> {
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
                    // The alert rustls queued, best effort: the server learns why.
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
        match &mut *conn {
            Conn::Client(c) => self.client_read(c, buf),
            Conn::Server(s) => {
                let r = self.server_read(s, buf);
                s.release();
                r
            }
        }
    }

    fn server_read(&self, s: &mut Server, buf: &mut [u8]) -> io::Result<usize> {
        let mut n = s.plain.take(buf);
        if n == buf.len() {
            return Ok(n);
        }
        // A socket read that did not fill the room it was given drained the socket: once its
        // records are processed, the read ends there instead of spending a read on EAGAIN (bytes
        // that come later bring a new edge). Only within this call: an edge may come after it.
        let mut drained = false;
        loop {
            let mut goal = Goal::Read(buf, n);
            let pass = s.pass(&self.sock, &mut goal);
            if let Goal::Read(_, got) = goal {
                n = got;
            }
            match pass {
                Err(e) => return if n > 0 { Ok(n) } else { Err(tls_error(e)) },
                Ok(Pass::Met) => return Ok(n),
                Ok(Pass::PeerClosed | Pass::Closed) => {
                    if !s.has_plain() {
                        self.ended.set(true);
                    }
                    return Ok(n);
                }
                Ok(Pass::NeedInput) => {}
            }
            if s.peer_closed {
                self.ended.set(true);
                return Ok(n);
            }
            if self.eof.get() {
                // The socket closed without close_notify: an end all the same (many clients do
                // it); what was sent before it is delivered.
                self.ended.set(true);
                return Ok(n);
            }
            if drained {
                return if n > 0 {
                    Ok(n)
                } else {
                    Err(io::ErrorKind::WouldBlock.into())
                };
            }
            match s.fill(&self.sock) {
                Ok(0) => self.eof.set(true),
                Ok(_) => drained = s.short_fill,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return if n > 0 { Ok(n) } else { Err(e) };
                }
                Err(e) => return if n > 0 { Ok(n) } else { Err(e) },
            }
        }
    }

    fn client_read(&self, conn: &mut ClientConnection, buf: &mut [u8]) -> io::Result<usize> {
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

    /// Encrypts `bufs` (at most a record's worth) into the server's outgoing buffer: a few short
    /// slices together as one record, longer ones a record each.
    fn server_write(&self, s: &mut Server, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if bufs.len() > 1 && total <= GATHER {
            return self.server_encrypt(s, bufs).map(|()| total);
        }
        let mut n = 0;
        for b in bufs {
            if let Err(e) = self.server_encrypt(s, std::slice::from_ref(b)) {
                return if n > 0 { Ok(n) } else { Err(e) };
            }
            n += b.len();
        }
        Ok(n)
    }

    fn server_encrypt(&self, s: &mut Server, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        match s.pass(&self.sock, &mut Goal::Write(bufs)) {
            Ok(Pass::Met) => Ok(()),
            Ok(Pass::Closed) => Err(io::ErrorKind::BrokenPipe.into()),
            Ok(_) => Err(io::ErrorKind::WouldBlock.into()),
            Err(e) => Err(tls_error(e)),
        }
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
        let records = std::mem::size_of::<super::Records>();
        let kernel = std::mem::size_of::<
            rustls::kernel::KernelConnection<rustls::server::ServerConnectionData>,
        >();
        println!("TlsStream {stream} bytes, Records {records} bytes, KernelConnection {kernel}");
        assert!(stream <= 320, "TlsStream is {stream} bytes");
        assert!(records <= 128, "Records is {records} bytes");
    }
}
