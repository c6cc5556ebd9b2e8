//! The TLS handshake before a session on a listener with TLS termination: the client's socket is
//! registered, the handshake runs on its events within `handshake_timeout`, and once done the
//! session becomes the TCP or HTTP session the listener serves, with the TLS stream as its client
//! (`Session::Handshake` replaces itself). No server is picked or connected before the handshake
//! is over: a client that never finishes costs no server connection.
//!
//! Each worker bounds its handshakes in progress (`max_handshakes`): a client over it is closed at
//! accept and counted as an `overload` failure.

use std::cell::Cell;
use std::sync::Arc;

use mio::event::Event;
use mio::Interest;

use super::{Closing, Ctx, Side, Step};
use crate::backend::Pool;
use crate::clock::millis;
use crate::metrics::{End, TlsFailure, TlsKind};
use crate::net::tls::{Handshake, HandshakeError, TlsStream};
use crate::net::{ClientAddr, Ready, Stream};
use crate::state::shared::{Listener, SessionInfo};

thread_local! {
    /// Handshakes in progress on this worker.
    static IN_PROGRESS: Cell<u32> = const { Cell::new(0) };
}

/// A slot among the worker's handshakes in progress, given back when dropped.
#[derive(Debug)]
struct Slot;

impl Slot {
    fn take(max: u32) -> Option<Slot> {
        IN_PROGRESS.with(|n| {
            if n.get() >= max {
                return None;
            }
            n.set(n.get() + 1);
            Some(Slot)
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        IN_PROGRESS.with(|n| n.set(n.get().saturating_sub(1)));
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
    _slot: Slot,
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
        self.pool.http.is_some()
    }

    /// A client just accepted on a TLS listener; None (closed, counted) when the worker has
    /// `max_handshakes` in progress already.
    pub(crate) fn new(
        listener: Arc<Listener>,
        pool: Arc<Pool>,
        id: u64,
        client: Stream,
        addr: ClientAddr,
        now: u64,
    ) -> Result<Handshaking, Stream> {
        let Some(tls) = pool.tls.clone() else {
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
            pool,
            _slot: slot,
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
        Step::Wait(self.deadline)
    }

    pub(crate) fn on_ready(&mut self, side: Side, ev: &Event, cx: &mut Ctx) -> Next {
        if side == Side::Client {
            self.ready.update(ev);
        }
        self.drive(cx)
    }

    pub(crate) fn on_deadline(&mut self, cx: &mut Ctx) -> Step {
        if cx.now >= self.deadline {
            cx.counters.tls_failure(TlsFailure::Timeout);
            return Step::Close(End::TlsTimeout);
        }
        Step::Wait(self.deadline)
    }

    pub(crate) fn drive(&mut self, cx: &mut Ctx) -> Next {
        let Some(Stream::Tls(tls)) = &self.client else {
            return Next::Step(Step::Close(End::Error));
        };
        match tls.handshake(&mut self.ready) {
            Ok(Handshake::Pending) => Next::Step(Step::Wait(self.deadline)),
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
                let session = if self.pool.http.is_some() {
                    super::Session::http(self.listener.clone(), self.id, client, self.addr, cx.now)
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
