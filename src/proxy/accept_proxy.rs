//! Reading the PROXY protocol header of a client from a trusted upstream proxy
//! (docs/design.md#proxy-protocol:
//! `accept_proxy = ["CIDR", ...]` on a listener). The first phase of such a client's session,
//! before TLS and before any pick: the worker has checked at accept that the client's source is
//! one of the listener's trusted networks. The phase looks at the client's bytes with
//! `recv(MSG_PEEK)` on each readable edge until [`quill_core::proxy_header::parse`] has a whole
//! header, then reads exactly the header's bytes (what follows stays in the socket for the next
//! phase), takes the client off its epoll registration and hands it back to the worker with the
//! address the header carries ([`Step::Admit`]): the worker then admits it as if it had been
//! accepted from that address (ACLs, `max_per_source`, tracking, TLS, HTTP or TCP).
//!
//! Bounded: at most [`MAX_HEADER`] bytes looked at, and the listener's connect timeout (`-t`;
//! 10 s when it is 0) for the whole header. A client that sends something else, closes first or
//! is too slow ends `proxy_invalid`. A v2 LOCAL or v1 UNKNOWN header keeps the real peer address.

use std::sync::Arc;

use mio::event::Event;
use mio::Interest;
use quill_core::proxy_header::{self, Parse, MAX_HEADER};

use super::{Closing, Ctx, Step};
use crate::clock::millis;
use crate::metrics::End;
use crate::net::{ClientAddr, Stream};
use crate::state::shared::{Listener, SessionInfo};

/// How long a client has to send its whole header when the listener's connect timeout is 0.
const HEADER_TIMEOUT_MS: u64 = 10_000;

/// A trusted client whose PROXY header is awaited.
#[derive(Debug)]
pub(crate) struct ProxyWait {
    id: u64,
    listener: Arc<Listener>,
    /// None once handed back to the worker.
    client: Option<Stream>,
    /// The connection's own peer (the upstream proxy).
    peer: ClientAddr,
    /// Whether the listener speaks HTTP (how its access log lines look).
    pub http: bool,
    started_ms: u64,
    deadline: u64,
}

impl ProxyWait {
    pub(crate) fn new(
        listener: Arc<Listener>,
        id: u64,
        client: Stream,
        peer: ClientAddr,
        now: u64,
    ) -> ProxyWait {
        let pool = listener.load_pool();
        let timeout = match millis(pool.tuning.connect_timeout) {
            0 => HEADER_TIMEOUT_MS,
            ms => ms,
        };
        let http = pool.http().is_some();
        ProxyWait {
            id,
            listener: listener.clone(),
            client: Some(client),
            peer,
            http,
            started_ms: now,
            deadline: now.saturating_add(timeout),
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Registers the client for reading. Bytes it already sent make the registration report it
    /// readable, so the first look waits for that event.
    pub(crate) fn start(&mut self, cx: &mut Ctx) -> Step {
        let Some(client) = &mut self.client else {
            return Step::Close(End::Error);
        };
        if let Err(e) = cx
            .registry
            .register(client.source(), cx.client_token, Interest::READABLE)
        {
            tracing::warn!("cannot register client socket: {e}");
            return Step::Close(End::Error);
        }
        Step::Wait(self.deadline)
    }

    pub(crate) fn on_ready(&mut self, ev: &Event, cx: &mut Ctx) -> Step {
        if ev.is_error() {
            return Step::Close(End::ClientReset);
        }
        if !ev.is_readable() && !ev.is_read_closed() {
            return Step::Wait(self.deadline);
        }
        self.look(ev.is_read_closed(), cx)
    }

    pub(crate) fn on_deadline(&mut self, cx: &mut Ctx) -> Step {
        if cx.now >= self.deadline {
            self.refuse(&"no whole PROXY header in time");
            return Step::Close(End::ProxyInvalid);
        }
        Step::Wait(self.deadline)
    }

    pub(crate) fn wait(&self) -> Step {
        Step::Wait(self.deadline)
    }

    fn refuse(&self, why: &dyn std::fmt::Display) {
        tracing::info!(
            "{}: closed by accept_proxy: {why}",
            self.peer.to_string_with_port()
        );
    }

    /// Looks at what waits in the client's socket; once a whole header is there, consumes it and
    /// asks the worker to admit the client with the address it carries.
    fn look(&mut self, eof: bool, cx: &mut Ctx) -> Step {
        let Some(client) = &mut self.client else {
            return Step::Close(End::Error);
        };
        let mut buf = [0u8; MAX_HEADER];
        let n = match rustix::net::recv(&*client, &mut buf[..], rustix::net::RecvFlags::PEEK) {
            Ok((0, _)) => {
                self.refuse(&"closed before a PROXY header");
                return Step::Close(End::ProxyInvalid);
            }
            Ok((n, _)) => n,
            Err(e) if e == rustix::io::Errno::AGAIN => return Step::Wait(self.deadline),
            Err(e) => {
                tracing::debug!(
                    "{}: {}",
                    self.peer.to_string_with_port(),
                    std::io::Error::from(e)
                );
                return Step::Close(End::ClientReset);
            }
        };
        let header = match proxy_header::parse(buf.get(..n).unwrap_or_default()) {
            Parse::Done(h) => h,
            Parse::Incomplete if !eof && n < MAX_HEADER => return Step::Wait(self.deadline),
            Parse::Incomplete => {
                self.refuse(&"closed before its PROXY header was whole");
                return Step::Close(End::ProxyInvalid);
            }
            Parse::Invalid(why) => {
                self.refuse(&why);
                return Step::Close(End::ProxyInvalid);
            }
        };
        // The header's bytes are in the socket (just seen): this read takes exactly them.
        match rustix::net::recv(
            &*client,
            &mut buf[..header.consumed],
            rustix::net::RecvFlags::empty(),
        ) {
            Ok((got, _)) if got == header.consumed => {}
            other => {
                tracing::debug!(
                    "{}: reading the PROXY header's {} bytes gave {other:?}",
                    self.peer.to_string_with_port(),
                    header.consumed
                );
                return Step::Close(End::ClientReset);
            }
        }
        if let Err(e) = cx.registry.deregister(client.source()) {
            tracing::warn!("cannot deregister client socket: {e}");
            return Step::Close(End::Error);
        }
        let addr = header
            .addrs
            .map_or(self.peer, |(src, _)| ClientAddr::Ip(src));
        Step::Admit(addr)
    }

    /// The listener and the client's socket (deregistered), for the worker to admit it.
    pub(crate) fn take(&mut self) -> Option<(Arc<Listener>, Stream)> {
        Some((self.listener.clone(), self.client.take()?))
    }

    pub(crate) fn info(&self, now_ms: u64) -> SessionInfo {
        SessionInfo {
            id: self.id,
            listener: self.listener.load_pool().name.clone(),
            client: self.peer.to_string_with_port(),
            server: None,
            age_ms: now_ms.saturating_sub(self.started_ms),
            bytes_in: 0,
            bytes_out: 0,
            state: "proxy-header",
        }
    }

    pub(crate) fn close(&mut self) -> Closing {
        Closing {
            client: self.peer,
            server: None,
            bytes_in: 0,
            bytes_out: 0,
            started_ms: self.started_ms,
        }
    }
}
