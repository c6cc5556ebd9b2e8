//! SNI routing without termination (docs/design.md#sni-routing-without-termination): the first
//! phase of a session on a TCP listener whose routes name TLS server names. The session looks at
//! the client's ClientHello with `recv(MSG_PEEK)`, consuming nothing, again on each readable edge
//! until the hello is whole ([`quill_core::tls_hello::parse`]); the first route whose `sni` names
//! the server name gives the pool, else the listener's own servers. The client then goes to a
//! [`TcpSession`] with that pool, so the TLS bytes, the ClientHello included, reach the server
//! untouched on the TCP data path (splice included). Quill holds no key and decrypts nothing.
//!
//! Bounded: at most [`MAX_WIRE`] bytes peeked (a 16 KiB hello in at most 32 records), and the
//! listener's connect timeout (`-t`; 10 s when it is 0) for the whole hello to arrive. A client
//! that sends something else than a ClientHello is closed (`tls_failed`), one that names no route
//! on a listener without servers too (`no_server`: strict SNI), one too slow `tls_timeout`.

use std::io;
use std::sync::Arc;

use mio::event::Event;
use mio::Interest;
use quill_core::tls_hello::{self, MAX_WIRE};

use super::tcp::TcpSession;
use super::{Closing, Ctx, Step};
use crate::backend::Pool;
use crate::clock::millis;
use crate::metrics::End;
use crate::net::{ClientAddr, Ready, Stream};
use crate::route::Action;
use crate::state::shared::SessionInfo;

/// How long a client has to send its whole ClientHello when the listener's connect timeout is 0.
const HELLO_TIMEOUT_MS: u64 = 10_000;

/// A client whose ClientHello is awaited.
#[derive(Debug)]
pub(crate) struct PeekSession {
    id: u64,
    /// None once handed over to its TCP session.
    client: Option<Stream>,
    /// What the client's events said, handed to the TCP session with the socket.
    ready: Ready,
    addr: ClientAddr,
    /// The listener's pool snapshot: its routes and its own servers.
    pool: Arc<Pool>,
    started_ms: u64,
    deadline: u64,
}

/// What a peek leads to.
#[expect(
    clippy::large_enum_variant,
    reason = "returned once, moved straight into the worker's slot: boxing would allocate per client"
)]
pub(crate) enum Peeked {
    /// Go on waiting, or close.
    Step(Step),
    /// The hello named its pool: the TCP session to start in this one's place, with the client's
    /// socket registered already and what is known of its readiness.
    Routed(TcpSession, Ready),
}

impl PeekSession {
    pub(crate) fn new(
        pool: Arc<Pool>,
        id: u64,
        client: Stream,
        addr: ClientAddr,
        now: u64,
    ) -> Self {
        let timeout = match millis(pool.tuning.connect_timeout) {
            0 => HELLO_TIMEOUT_MS,
            ms => ms,
        };
        PeekSession {
            id,
            client: Some(client),
            ready: Ready::default(),
            addr,
            pool,
            started_ms: now,
            deadline: now.saturating_add(timeout),
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Registers the client for both ways, as the TCP session it becomes keeps it. No peek yet:
    /// bytes the client already sent make the registration report it readable, so the first peek
    /// waits for that event (no EAGAIN spent on a hello still on its way).
    pub(crate) fn start(&mut self, cx: &mut Ctx) -> Peeked {
        let Some(client) = &mut self.client else {
            return Peeked::Step(Step::Close(End::Error));
        };
        if let Err(e) = cx.registry.register(
            client.source(),
            cx.client_token,
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::warn!("cannot register client socket: {e}");
            return Peeked::Step(Step::Close(End::Error));
        }
        Peeked::Step(self.wait())
    }

    /// An event on the client: on a readable edge, more of the hello (or its end) arrived.
    pub(crate) fn on_ready(&mut self, ev: &Event) -> Peeked {
        self.ready.update(ev);
        if ev.is_error() {
            return Peeked::Step(Step::Close(End::ClientReset));
        }
        if !ev.is_readable() && !ev.is_read_closed() {
            // Writable only (the registration's first event): nothing new to look at.
            return Peeked::Step(self.wait());
        }
        self.peek(ev.is_read_closed())
    }

    pub(crate) fn on_deadline(&mut self, cx: &mut Ctx) -> Step {
        if cx.now >= self.deadline {
            tracing::debug!(
                "{}: no whole TLS ClientHello in time",
                self.addr.to_string_with_port()
            );
            return Step::Close(End::TlsTimeout);
        }
        Step::Wait(self.deadline)
    }

    /// Whatever comes before the hello is whole: nothing to do but wait.
    pub(crate) fn wait(&self) -> Step {
        Step::Wait(self.deadline)
    }

    /// Looks at the bytes waiting in the client's socket, leaving them there. `eof`: the client
    /// has sent all it will.
    fn peek(&mut self, eof: bool) -> Peeked {
        let Some(client) = &self.client else {
            return Peeked::Step(Step::Close(End::Error));
        };
        let mut buf = [0u8; MAX_WIRE];
        let n = match rustix::net::recv(client, &mut buf[..], rustix::net::RecvFlags::PEEK) {
            Ok((0, _)) => return Peeked::Step(Step::Close(End::Done)),
            Ok((n, _)) => n,
            Err(e) if e == rustix::io::Errno::AGAIN => {
                self.ready.readable = false;
                return Peeked::Step(self.wait());
            }
            Err(e) => {
                tracing::debug!(
                    "{}: {}",
                    self.addr.to_string_with_port(),
                    io::Error::from(e)
                );
                return Peeked::Step(Step::Close(End::ClientReset));
            }
        };
        let seen = buf.get(..n).unwrap_or_default();
        let name = match tls_hello::parse(seen) {
            Ok(Some(hello)) => hello.server_name(),
            Ok(None) if eof || n == MAX_WIRE => {
                return Peeked::Step(Step::Close(if eof { End::Done } else { End::TlsFailed }));
            }
            Ok(None) => return Peeked::Step(self.wait()),
            Err(e) => {
                tracing::debug!(
                    "{}: not a TLS ClientHello: {e}",
                    self.addr.to_string_with_port()
                );
                return Peeked::Step(Step::Close(End::TlsFailed));
            }
        };
        let Some(pool) = self.pool_for(name.as_ref().map(|n| n.as_bytes())) else {
            tracing::debug!(
                "{}: no route for TLS server name {:?} and no servers",
                self.addr.to_string_with_port(),
                name
            );
            return Peeked::Step(Step::Close(End::NoServer));
        };
        self.hand_over(pool)
    }

    /// The pool of the first route naming `name`, else the listener's own when it has servers.
    fn pool_for(&self, name: Option<&[u8]>) -> Option<Arc<Pool>> {
        let routed = name
            .and_then(|n| self.pool.routes.as_ref()?.find_sni(n))
            .and_then(|r| match &r.action {
                Action::Pool(p) => Some(p.clone()),
                _ => None,
            });
        let own = || {
            let has_servers = !self.pool.servers.is_empty() || self.pool.emergency.is_some();
            has_servers.then(|| self.pool.clone())
        };
        routed.or_else(own)
    }

    /// Gives the client to a TCP session over `pool`, registered as it is: the ClientHello still
    /// waits in its socket, readable, for the TCP session's first read.
    fn hand_over(&mut self, pool: Arc<Pool>) -> Peeked {
        let Some(client) = self.client.take() else {
            return Peeked::Step(Step::Close(End::Error));
        };
        let tcp = TcpSession::new(pool, self.id, client, self.addr, false, self.started_ms);
        Peeked::Routed(tcp, self.ready)
    }

    pub(crate) fn info(&self, now_ms: u64) -> SessionInfo {
        SessionInfo {
            id: self.id,
            listener: self.pool.name.clone(),
            client: self.addr.to_string_with_port(),
            server: None,
            age_ms: now_ms.saturating_sub(self.started_ms),
            bytes_in: 0,
            bytes_out: 0,
            state: "tls-hello",
        }
    }

    /// Nothing was read or sent: only the counters and the log line need the client.
    pub(crate) fn close(&mut self) -> Closing {
        Closing {
            client: self.addr,
            server: None,
            bytes_in: 0,
            bytes_out: 0,
            started_ms: self.started_ms,
        }
    }
}
