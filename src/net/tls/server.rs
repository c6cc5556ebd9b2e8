//! The server side of a terminated TLS connection: the handshake on rustls' unbuffered API,
//! records fed to it one at a time, then the traffic pass, where `quill_core::tls_records`
//! protects the records and this file moves them between the socket and the pooled buffers.

use std::io::{self, IoSlice};

use quill_core::tls_records::{Event, Records};
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, InsufficientSizeError};
use rustls::HandshakeKind;

use super::buffers::{give_back, grow, lend, Span, TLS_BUF};
use super::{tls_error, Handshake, HandshakeError, Ready, Stream, TlsStream};

/// A handshake message may be larger than a record (a client's certificate chain): the incoming
/// buffer grows up to this while one is joined, as rustls' own limit (64 KiB) allows.
const MAX_HANDSHAKE_BUF: usize = 0xffff + 4 * TLS_BUF;
/// Plaintext up to this size, given in several slices (a head and a short body), is gathered
/// into one record rather than one record a slice.
const GATHER: usize = 4096;

/// The server side: rustls' unbuffered API for the handshake, then our record layer
/// (`quill_core::tls_records`). Every buffer is empty (no memory) unless it holds bytes.
pub(super) struct Server {
    pub(super) state: State,
    /// The handshake is over and rustls has nothing left to send: the connection can become its
    /// traffic state.
    pub(super) traffic_ready: bool,
    /// The handshake resumed a session.
    pub(super) resumed: bool,
    /// The verified client certificate's subject (computed once, when the handshake ends: the
    /// traffic state keeps no certificate).
    pub(super) subject: Option<Box<str>>,
    /// ALPN chose `h2`.
    pub(super) h2: bool,
    /// Records read from the socket, not yet processed: `inb[..in_used]`.
    pub(super) inb: Box<[u8]>,
    pub(super) in_used: usize,
    /// While handshaking, the bytes of `inb` rustls may see: whole records, given one at a time
    /// as it asks for more, so that it never sees a record past the client's Finished. Those
    /// (application data, a KeyUpdate, close_notify, sent in the same write as the Finished) are
    /// the traffic state's to read: rustls' connection would take them in and keep (or drop)
    /// what they brought when it is turned into the traffic state.
    pub(super) fed: usize,
    /// rustls last said `BlockedHandshake` with `inb[..blocked_at]` before it: it wants a record
    /// more, and is not shown those bytes again until there is one (or more of a partial one).
    /// Showing them again is not idle: a record rustls could not decrypt after refusing the
    /// client's early data ("trial decryption") is dropped without being counted in `discard`
    /// when it is the last record shown, so each showing would count its length again against
    /// the early data rustls allows to drop (16 KiB), and a client's rejected 0-RTT record would
    /// fail the handshake (bad_record_mac) while the server waits for the client's Finished.
    pub(super) blocked_at: Option<usize>,
    /// Records made, not yet taken by the socket (the backlog).
    pub(super) out: Span,
    /// Plaintext decrypted but not yet read (a record larger than the reader's room, or records
    /// that came while only writing).
    pub(super) plain: Span,
    /// The client's close_notify came: the plaintext ends after `plain`.
    pub(super) peer_closed: bool,
    /// The ClientHello was looked at for its server name.
    pub(super) hello_seen: bool,
    /// rustls failed (and its alert was sent): the connection is over.
    pub(super) failed: bool,
    /// The last `fill` read less than the room it offered: the socket was drained then.
    pub(super) short_fill: bool,
}

/// A server connection's state: handshaking on rustls' connection (boxed: large, and dropped
/// when the handshake ends), then the traffic state, small.
pub(super) enum State {
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
pub(super) enum Goal<'a> {
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
pub(super) enum Pass {
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
    pub(super) fn new(conn: UnbufferedServerConnection) -> Server {
        Server {
            state: State::Handshaking(Box::new(conn)),
            traffic_ready: false,
            resumed: false,
            subject: None,
            h2: false,
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

    pub(super) fn has_backlog(&self) -> bool {
        self.out.len() > 0
    }

    fn has_plain(&self) -> bool {
        self.plain.len() > 0
    }

    /// Returns the buffers that hold nothing to the pool.
    pub(super) fn release(&mut self) {
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
    pub(super) fn pass(
        &mut self,
        sock: &Stream,
        goal: &mut Goal<'_>,
    ) -> Result<Pass, rustls::Error> {
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

    pub(super) fn is_handshaking(&self) -> bool {
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
        self.h2 = conn.alpn_protocol() == Some(b"h2");
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
                    rec.owed(out);
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
                    rec.write(&slices[..k], out).map(|()| Pass::Met)
                }
            }
            Goal::CloseNotify => {
                rec.close_notify(out);
                Ok(Pass::Met)
            }
        };
        if result.is_err() {
            rec.owed(out);
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
    /// [`TlsStream::handshake`] on the server side.
    pub(super) fn server_handshake(
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

    /// [`TlsStream::read`] on the server side.
    pub(super) fn server_read(&self, s: &mut Server, buf: &mut [u8]) -> io::Result<usize> {
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

    /// Encrypts `bufs` (at most a record's worth) into the server's outgoing buffer: a few short
    /// slices together as one record, longer ones a record each.
    pub(super) fn server_write(&self, s: &mut Server, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
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

    /// Seals `bufs` into one record in the outgoing buffer.
    fn server_encrypt(&self, s: &mut Server, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        match s.pass(&self.sock, &mut Goal::Write(bufs)) {
            Ok(Pass::Met) => Ok(()),
            Ok(Pass::Closed) => Err(io::ErrorKind::BrokenPipe.into()),
            Ok(_) => Err(io::ErrorKind::WouldBlock.into()),
            Err(e) => Err(tls_error(e)),
        }
    }
}
