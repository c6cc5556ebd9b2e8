//! The TLS handshake before a session on a listener with TLS termination: the client's socket is
//! registered, the handshake runs on its events within `handshake_timeout`, and once done the
//! session becomes the TCP or HTTP session the listener serves, with the TLS stream as its client
//! (`Session::Handshake` replaces itself). No server is picked or connected before the handshake
//! is over: a client that never finishes costs no server connection.
//!
//! Each worker bounds its handshakes in progress (`max_handshakes`), and those from one client
//! address (`max_handshakes_per_source`). A client over either bound is not refused: the least
//! recently active handshake (of the worker, or of that address) is closed to make room, counted
//! as an `evicted` failure. A handshake's activity is the last time its client sent bytes, so
//! connections held silent, or stalled halfway through a ClientHello, are the ones that go, and a
//! client that keeps its handshake moving (a real one takes a round trip or two) is not. A client
//! that sends nothing within `handshake_first_byte_timeout` is closed sooner than
//! `handshake_timeout`.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use mio::event::Event;
use mio::{Interest, Token};

use super::{Closing, Ctx, Side, Step};
use crate::backend::Pool;
use crate::clock::millis;
use crate::metrics::{End, TlsFailure, TlsKind};
use crate::net::tls::{Handshake, HandshakeError, TlsStream};
use crate::net::{ClientAddr, Ready, Stream};
use crate::state::shared::{Listener, SessionInfo};

thread_local! {
    /// Handshakes in progress on this worker.
    static IN_PROGRESS: RefCell<InProgress> = RefCell::new(InProgress::default());
}

/// The worker's handshakes in progress: how many, and, for those started (their session's
/// token known), when each was last active, by age and by client address.
#[derive(Default)]
struct InProgress {
    count: u32,
    /// (last active, token) of every started handshake, least recently active first.
    by_age: BTreeSet<(u64, usize)>,
    /// Each started handshake's last activity and address.
    entries: HashMap<usize, (u64, Option<IpAddr>)>,
    /// Per address: (last active, token) of its started handshakes.
    by_source: HashMap<IpAddr, BTreeSet<(u64, usize)>>,
}

impl InProgress {
    fn insert(&mut self, token: usize, at: u64, ip: Option<IpAddr>) {
        self.entries.insert(token, (at, ip));
        self.by_age.insert((at, token));
        if let Some(ip) = ip {
            self.by_source.entry(ip).or_default().insert((at, token));
        }
    }

    fn remove(&mut self, token: usize) -> Option<(u64, Option<IpAddr>)> {
        let (at, ip) = self.entries.remove(&token)?;
        self.by_age.remove(&(at, token));
        if let Some(ip) = ip {
            if let Some(set) = self.by_source.get_mut(&ip) {
                set.remove(&(at, token));
                if set.is_empty() {
                    self.by_source.remove(&ip);
                }
            }
        }
        Some((at, ip))
    }
}

/// The handshake to close before a new client from `ip` starts one, when the worker (`max`) or
/// that address (`per_source`) is at its bound: that address's least recently active one, else
/// the worker's. The caller closes it (its slot then leaves the table) and asks again; a token
/// it cannot close must be [`forget`]ten.
pub(crate) fn to_evict(max: u32, per_source: u32, ip: Option<IpAddr>) -> Option<Token> {
    IN_PROGRESS.with_borrow(|p| {
        if let Some(set) = ip.and_then(|ip| p.by_source.get(&ip)) {
            if set.len() >= per_source as usize {
                return set.first().map(|&(_, t)| Token(t));
            }
        }
        if p.count >= max {
            return p.by_age.first().map(|&(_, t)| Token(t));
        }
        None
    })
}

/// Drops a handshake the worker no longer holds from the table.
pub(crate) fn forget(token: Token) {
    IN_PROGRESS.with_borrow_mut(|p| p.remove(token.0));
}

/// A slot among the worker's handshakes in progress, given back when dropped.
#[derive(Debug)]
struct Slot {
    /// The session's client token, once started (registered in the table).
    token: Option<usize>,
}

impl Slot {
    fn take(max: u32) -> Option<Slot> {
        IN_PROGRESS.with_borrow_mut(|p| {
            if p.count >= max {
                return None;
            }
            p.count += 1;
            Some(Slot { token: None })
        })
    }

    /// The handshake started (as `token`) at `now`, from `ip`.
    fn start(&mut self, token: Token, now: u64, ip: Option<IpAddr>) {
        IN_PROGRESS.with_borrow_mut(|p| {
            if let Some(old) = self.token.take() {
                p.remove(old);
            }
            p.insert(token.0, now, ip);
        });
        self.token = Some(token.0);
    }

    /// The client sent bytes at `now`.
    fn active(&self, now: u64) {
        let Some(token) = self.token else { return };
        IN_PROGRESS.with_borrow_mut(|p| {
            if let Some((at, ip)) = p.remove(token) {
                p.insert(token, now.max(at), ip);
            }
        });
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let _ = IN_PROGRESS.try_with(|p| {
            let mut p = p.borrow_mut();
            p.count = p.count.saturating_sub(1);
            if let Some(token) = self.token {
                p.remove(token);
            }
        });
    }
}

/// A client in its TLS handshake.
#[derive(Debug)]
pub(crate) struct Handshaking {
    id: u64,
    /// Some until the handshake is done and the stream moves into the next session.
    client: Option<Stream>,
    addr: ClientAddr,
    ready: Ready,
    listener: Arc<Listener>,
    pool: Arc<Pool>,
    started_ms: u64,
    deadline: u64,
    /// Until the client's first byte: the time it must come by.
    first_byte_by: Option<u64>,
    slot: Slot,
}

/// What the handshake phase tells `Session`.
pub(crate) enum Next {
    Step(Step),
    /// Done: replace the phase with this session and start it with the client's readiness.
    Session(Box<super::Session>, Ready),
}

/// Why a handshake failed, for the counters.
fn failure_of(e: &HandshakeError) -> TlsFailure {
    use rustls::Error as E;
    match e {
        HandshakeError::Closed | HandshakeError::Io(_) => TlsFailure::Closed,
        HandshakeError::Tls(e) => match e {
            E::PeerIncompatible(_) | E::NoApplicationProtocol => TlsFailure::Incompatible,
            E::NoCertificatesPresented
            | E::InvalidCertificate(_)
            | E::InvalidCertRevocationList(_) => TlsFailure::ClientCertificate,
            E::AlertReceived(_) => TlsFailure::Alert,
            E::InvalidMessage(_)
            | E::InappropriateMessage { .. }
            | E::InappropriateHandshakeMessage { .. }
            | E::PeerMisbehaved(_)
            | E::DecryptError => TlsFailure::Protocol,
            E::General(m) if m.contains("certificate") => TlsFailure::NoCertificate,
            _ => TlsFailure::Other,
        },
    }
}

impl Handshaking {
    /// The listener is an HTTP one: a client that ends in the handshake is logged as a request
    /// line without a request, in the listener's one format.
    pub(crate) fn is_http(&self) -> bool {
        self.pool.http().is_some()
    }

    /// A client just accepted on a TLS listener; Err (the caller closes and counts it) when the
    /// worker has `max_handshakes` in progress still (see [`to_evict`]).
    pub(crate) fn new(
        listener: Arc<Listener>,
        pool: Arc<Pool>,
        id: u64,
        client: Stream,
        addr: ClientAddr,
        now: u64,
    ) -> Result<Handshaking, Stream> {
        let Some(tls) = pool.tls().cloned() else {
            return Err(client);
        };
        let Some(slot) = Slot::take(tls.max_handshakes) else {
            return Err(client);
        };
        let conn = match rustls::server::UnbufferedServerConnection::new(tls.config.clone()) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("tls: cannot start a handshake: {e}");
                return Err(client);
            }
        };
        let stream = Stream::Tls(Box::new(TlsStream::server(client, conn)));
        Ok(Handshaking {
            id,
            client: Some(stream),
            addr,
            ready: Ready::default(),
            listener,
            started_ms: now,
            deadline: now.saturating_add(millis(tls.handshake_timeout)),
            first_byte_by: Some(now.saturating_add(millis(tls.handshake_first_byte_timeout))),
            pool,
            slot,
        })
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn start(&mut self, cx: &mut Ctx) -> Step {
        let Some(client) = &mut self.client else {
            return Step::Close(End::Error);
        };
        if let Err(e) = cx.registry.register(
            client.source(),
            cx.client_token,
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::warn!("cannot register client socket: {e}");
            return Step::Close(End::Error);
        }
        self.slot.start(cx.client_token, cx.now, self.addr.ip());
        Step::Wait(self.wait_until())
    }

    /// The next deadline: the first byte's, then the handshake's.
    fn wait_until(&self) -> u64 {
        self.first_byte_by
            .map_or(self.deadline, |by| by.min(self.deadline))
    }

    pub(crate) fn on_ready(&mut self, side: Side, ev: &Event, cx: &mut Ctx) -> Next {
        if side == Side::Client {
            self.ready.update(ev);
            if ev.is_readable() {
                self.slot.active(cx.now);
            }
        }
        self.drive(cx)
    }

    pub(crate) fn on_deadline(&mut self, cx: &mut Ctx) -> Step {
        let silent = self.first_byte_by.is_some_and(|by| cx.now >= by);
        if cx.now >= self.deadline || silent {
            cx.counters.tls_failure(TlsFailure::Timeout);
            return Step::Close(End::TlsTimeout);
        }
        Step::Wait(self.wait_until())
    }

    pub(crate) fn drive(&mut self, cx: &mut Ctx) -> Next {
        let Some(Stream::Tls(tls)) = &self.client else {
            return Next::Step(Step::Close(End::Error));
        };
        let r = tls.handshake(&mut self.ready);
        if self.first_byte_by.is_some() && tls.handshake_heard() {
            self.first_byte_by = None;
        }
        match r {
            Ok(Handshake::Pending) => Next::Step(Step::Wait(self.wait_until())),
            Ok(Handshake::Done) => {
                let kind = {
                    let (version, resumed) = tls.negotiated();
                    let v13 = version == Some(rustls::ProtocolVersion::TLSv1_3);
                    match (v13, resumed) {
                        (false, false) => TlsKind::Full12,
                        (false, true) => TlsKind::Resumed12,
                        (true, false) => TlsKind::Full13,
                        (true, true) => TlsKind::Resumed13,
                    }
                };
                cx.counters.tls_handshake(kind);
                let Some(client) = self.client.take() else {
                    return Next::Step(Step::Close(End::Error));
                };
                let h2 = client.tls().is_some_and(|t| t.alpn_h2());
                let session = if self.pool.http().is_some() && h2 {
                    super::Session::H2(Box::new(super::h2::H2Session::new(
                        self.listener.clone(),
                        self.id,
                        client,
                        self.addr,
                        cx.now,
                    )))
                } else if self.pool.http().is_some() {
                    super::Session::Http(Box::new(super::http::HttpSession::new(
                        self.listener.clone(),
                        self.id,
                        client,
                        self.addr,
                        cx.now,
                    )))
                } else {
                    super::Session::tcp(
                        self.pool.clone(),
                        self.id,
                        client,
                        self.addr,
                        false,
                        self.started_ms,
                    )
                };
                Next::Session(Box::new(session), self.ready)
            }
            Err(e) => {
                let why = failure_of(&e);
                tracing::debug!("{}: tls handshake: {e:?}", self.addr.to_string_with_port());
                cx.counters.tls_failure(why);
                Next::Step(Step::Close(if why == TlsFailure::Closed {
                    End::ClientReset
                } else {
                    End::TlsFailed
                }))
            }
        }
    }

    pub(crate) fn info(&self, now: u64) -> SessionInfo {
        SessionInfo {
            id: self.id,
            listener: self.listener.name.clone(),
            client: self.addr.to_string_with_port(),
            server: None,
            age_ms: now.saturating_sub(self.started_ms),
            bytes_in: 0,
            bytes_out: 0,
            state: "handshake",
        }
    }

    pub(crate) fn close(&mut self, end: End) -> Closing {
        if matches!(end, End::Shutdown | End::Panic) {
            if let Some(c) = &self.client {
                c.reset_on_close();
            }
        }
        Closing {
            client: self.addr,
            server: None,
            bytes_in: 0,
            bytes_out: 0,
            started_ms: self.started_ms,
        }
    }
}

/// Counts a client refused because the worker has `max_handshakes` in progress.
pub(crate) fn overloaded(cx: &crate::metrics::Counters) {
    cx.tls_failure(TlsFailure::Overload);
}

/// Counts a handshake closed to make room for a new client.
pub(crate) fn evicted(cx: &crate::metrics::Counters) {
    cx.tls_failure(TlsFailure::Evicted);
}
