//! A TCP session: a client socket, a [`Connector`] that finds it a server, then two
//! [`Direction`]s copying both ways until both are done. It answers the worker's calls with a
//! [`Step`]; its one deadline is the connect timeout while connecting, then the idle and FIN
//! timeouts. Never blocks, and never allocates on the copy path.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Instant;

use mio::event::Event;
use mio::Interest;

use super::connect::{Connector, Progress};
use super::copy::{Direction, Failure, Pools};
use super::{Closing, Ctx, Side, Step, NEVER};
use crate::backend::Pool;
use crate::clock::millis;
use crate::metrics::End;
use crate::net::{ClientAddr, Ready, Stream};
use crate::state::shared::SessionInfo;

/// After the server reset while its last bytes still travel to the client: how often the session
/// looks whether the client has them all (it is not woken for that).
const CATCH_UP_POLL_MS: u64 = 250;

/// One client connection and its backend connection.
#[derive(Debug)]
pub(crate) struct TcpSession {
    /// Unique in the process (`connection N`, `close N`).
    id: u64,
    client: Stream,
    addr: ClientAddr,
    /// Finds the server and then holds its socket, its readiness and the server's count of this
    /// session; holds the pool snapshot the session started with.
    connector: Connector,
    client_ready: Ready,
    /// Client to server.
    up: Direction,
    /// Server to client.
    down: Direction,
    started_ms: u64,
    /// Last time bytes moved (idle and FIN timeouts count from here).
    active_ms: u64,
    /// When the client was accepted, for the connect time.
    accepted_at: Instant,
    /// The server reset and the session waits for the client to acknowledge the server's last
    /// bytes before passing the reset on (which would destroy them in flight).
    server_gone: bool,
}

impl TcpSession {
    /// A socket failed mid-copy: says why at debug level (the access log has only the end).
    fn failed(&self, end: End, e: &io::Error) -> End {
        tracing::debug!("{}: {end:?}: {e}", self.addr.to_string_with_port());
        end
    }

    pub(crate) fn new(
        pool: Arc<Pool>,
        id: u64,
        client: Stream,
        addr: ClientAddr,
        denied: bool,
        now_ms: u64,
    ) -> TcpSession {
        TcpSession {
            id,
            client,
            addr,
            connector: Connector::new(pool, denied),
            client_ready: Ready::default(),
            up: Direction::default(),
            down: Direction::default(),
            started_ms: now_ms,
            active_ms: now_ms,
            accepted_at: Instant::now(),
            server_gone: false,
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn start(&mut self, cx: &mut Ctx) -> Step {
        if let Err(e) = cx.registry.register(
            self.client.source(),
            cx.client_token,
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::warn!("cannot register client socket: {e}");
            return Step::Close(End::Error);
        }
        self.begin(cx)
    }

    /// Starts looking for a server for a client whose socket is registered already, with the
    /// readiness known of it (after a TLS handshake).
    pub(crate) fn start_registered(&mut self, ready: Ready, cx: &mut Ctx) -> Step {
        self.client_ready = ready;
        self.begin(cx)
    }

    fn begin(&mut self, cx: &mut Ctx) -> Step {
        let progress = self.connector.connect_next(&self.addr, cx);
        self.follow(progress, cx)
    }

    pub(crate) fn on_ready(&mut self, side: Side, ev: &Event, cx: &mut Ctx) -> Step {
        match side {
            Side::Client => {
                self.client_ready.update(ev);
                if !self.connector.is_connected() {
                    if ev.is_error() {
                        return Step::Close(End::ClientReset);
                    }
                    return Step::Wait(self.connector.deadline());
                }
            }
            Side::Server if !self.connector.is_connected() => {
                let progress = self.connector.on_ready(ev, &self.addr, cx);
                return self.follow(progress, cx);
            }
            Side::Server => {
                // Connected: the event only marks the server socket ready for the copy below.
                self.connector.on_ready(ev, &self.addr, cx);
            }
        }
        self.drive(cx)
    }

    pub(crate) fn on_resolved(&mut self, answer: io::Result<SocketAddr>, cx: &mut Ctx) -> Step {
        if self.connector.is_connected() {
            return Step::Wait(self.deadline(cx.now));
        }
        let progress = self.connector.on_resolved(answer, &self.addr, cx);
        self.follow(progress, cx)
    }

    pub(crate) fn on_deadline(&mut self, cx: &mut Ctx) -> Step {
        if !self.connector.is_connected() {
            let progress = self.connector.on_deadline(&self.addr, cx);
            return self.follow(progress, cx);
        }
        let t = &self.connector.pool().tuning;
        let quiet = cx.now.saturating_sub(self.active_ms);
        if self.server_gone {
            if quiet >= millis(t.fin_timeout) || !self.client_catching_up() {
                return Step::Close(End::ServerReset);
            }
        } else if self.is_half_closed() && quiet >= millis(t.fin_timeout) {
            return Step::Close(End::FinTimeout);
        } else if !t.idle_timeout.is_zero() && quiet >= millis(t.idle_timeout) {
            return Step::Close(End::IdleTimeout);
        }
        Step::Wait(self.deadline(cx.now))
    }

    pub(crate) fn resume(&mut self, cx: &mut Ctx) -> Step {
        self.drive(cx)
    }

    /// The session's one deadline: the connect's while connecting; once connected the FIN
    /// timeout of a half-closed session (or of a server reset the client is catching up on,
    /// looked at every [`CATCH_UP_POLL_MS`] too) and the idle timeout, whichever comes first.
    fn deadline(&self, now_ms: u64) -> u64 {
        if !self.connector.is_connected() {
            return self.connector.deadline();
        }
        let t = &self.connector.pool().tuning;
        let fin = self.active_ms.saturating_add(millis(t.fin_timeout));
        if self.server_gone {
            return fin.min(now_ms.saturating_add(CATCH_UP_POLL_MS));
        }
        let idle = if t.idle_timeout.is_zero() {
            NEVER
        } else {
            self.active_ms.saturating_add(millis(t.idle_timeout))
        };
        if self.is_half_closed() {
            fin.min(idle)
        } else {
            idle
        }
    }

    /// Turns the connector's answer into the worker's next step; a new connection starts copying.
    fn follow(&mut self, progress: Progress, cx: &mut Ctx) -> Step {
        match progress {
            Progress::Waiting(deadline) => Step::Wait(deadline),
            Progress::Resolve(server, deadline) => Step::Resolve(server, deadline),
            Progress::Failed(end) => Step::Close(end),
            Progress::Preface => {
                let pool = self.connector.pool();
                let (Some(version), local) = (pool.tuning.proxy_protocol, pool.local) else {
                    return Step::Close(End::Error);
                };
                let header = super::connect::proxy_header(version, &self.addr, &self.client, local);
                let progress = self
                    .connector
                    .send_preface(header.as_bytes(), &self.addr, cx);
                self.follow(progress, cx)
            }
            Progress::Connected => {
                // With `server_tls` the header went before the handshake (`Preface`).
                let pool = self.connector.pool();
                if let (Some(version), None) = (pool.tuning.proxy_protocol, &pool.server_tls) {
                    let local = self.connector.pool().local;
                    let header =
                        super::connect::proxy_header(version, &self.addr, &self.client, local);
                    self.up.preload(header.as_bytes(), cx.pools);
                }
                self.active_ms = cx.now;
                cx.counters
                    .connected(self.accepted_at.elapsed().as_micros() as u64);
                self.drive(cx)
            }
        }
    }

    /// Copies, and says what the worker does next.
    fn drive(&mut self, cx: &mut Ctx) -> Step {
        if !self.connector.is_connected() {
            return Step::Wait(self.deadline(cx.now));
        }
        if self.server_gone {
            if !self.client_catching_up() {
                return Step::Close(End::ServerReset);
            }
            return Step::Wait(self.deadline(cx.now));
        }
        match self.copy(cx.pools, cx.now) {
            // The server's last bytes reach the client before its reset does (looked at again on
            // the client's events and at the deadline).
            Some(End::ServerReset) if self.client_catching_up() => {
                self.server_gone = true;
                Step::Wait(self.deadline(cx.now))
            }
            Some(end) => Step::Close(end),
            None if self.wants_more() => Step::Again,
            None => Step::Wait(self.deadline(cx.now)),
        }
    }

    pub(crate) fn info(&self, now_ms: u64) -> SessionInfo {
        SessionInfo {
            id: self.id,
            listener: self.connector.pool().name.clone(),
            client: self.addr.to_string_with_port(),
            server: self.connector.server().map(|sv| sv.addr().to_string()),
            age_ms: now_ms.saturating_sub(self.started_ms),
            bytes_in: self.up.bytes,
            bytes_out: self.down.bytes,
            state: if self.connector.is_resolving() {
                "resolving"
            } else if !self.connector.is_connected() {
                "connecting"
            } else if self.is_half_closed() {
                "half-closed"
            } else {
                "open"
            },
        }
    }

    pub(crate) fn close(&mut self, end: End, pools: &mut Pools) -> Closing {
        // Before the buffers go back: whether bytes were left undelivered decides the resets.
        self.arm_resets(end);
        self.up.release(pools);
        self.down.release(pools);
        Closing {
            client: self.addr,
            server: self.connector.take_lease(),
            bytes_in: self.up.bytes,
            bytes_out: self.down.bytes,
            started_ms: self.started_ms,
        }
    }

    /// Copies what the sockets allow in both directions. Returns how the session ends, if it does.
    fn copy(&mut self, pools: &mut Pools, now_ms: u64) -> Option<End> {
        let (backend, backend_ready) = self.connector.server_side()?;
        if self.client_ready.error {
            // The client reset: nothing can reach it any more, and what it sent last would only
            // start work whose answer has nowhere to go (a backend that is not reading would
            // otherwise keep the session for ever).
            return Some(End::ClientReset);
        }
        let mut progress = match self.up.pump(
            self.down.is_done(),
            &self.client,
            backend,
            &mut self.client_ready,
            backend_ready,
            pools,
        ) {
            Ok(p) => p,
            Err(Failure::Read(e)) => return Some(self.failed(End::ClientReset, &e)),
            Err(Failure::Write(e)) => return Some(self.failed(End::ServerReset, &e)),
        };
        progress |= match self.down.pump(
            self.up.is_done(),
            backend,
            &self.client,
            backend_ready,
            &mut self.client_ready,
            pools,
        ) {
            Ok(p) => p,
            Err(Failure::Read(e)) => return Some(self.failed(End::ServerReset, &e)),
            Err(Failure::Write(e)) => return Some(self.failed(End::ClientReset, &e)),
        };
        if progress {
            self.active_ms = now_ms;
        }
        let fastclose = self.connector.pool().tuning.tcp_fastclose;
        let client_gone = self.up.eof && !self.up.has_pending() && fastclose.on_client_eof();
        let server_gone = self.down.eof && !self.down.has_pending() && fastclose.on_server_eof();
        if self.up.is_done() && self.down.is_done() {
            Some(End::Done)
        } else if client_gone || server_gone {
            Some(End::Fastclose)
        } else {
            None
        }
    }

    /// Whether a direction stopped on its budget and must be driven again without an event.
    fn wants_more(&self) -> bool {
        self.up.yielded || self.down.yielded
    }

    /// Whether one direction has finished and the other not, or the server reset while its last
    /// bytes still wait for the client (the FIN timeout applies to both).
    fn is_half_closed(&self) -> bool {
        self.up.is_done() != self.down.is_done() || self.connector.ready().error
    }

    /// After the server reset: whether bytes it sent are still on their way to the client
    /// (unacknowledged in the client's socket). A reset passed on now would destroy them, where a
    /// direct connection would have delivered them first; the worker waits (at most the FIN
    /// timeout) before closing.
    fn client_catching_up(&self) -> bool {
        match &self.client {
            Stream::Tcp(s) if !self.client_ready.error => {
                crate::sys::unacked_bytes(s.as_fd()).is_ok_and(|n| n > 0)
            }
            _ => false,
        }
    }

    /// Before the session is dropped: makes the close abortive (an RST) on each side whose peer
    /// would otherwise take a cut stream for a complete one, as a direct connection would show it.
    /// A reset is passed on as a reset; a session cut by the drain deadline or a second stop
    /// signal resets both sides; any other end resets a side only when bytes meant for it are
    /// left undelivered (or its server reset). Normal ends (both EOFs, `tcp_fastclose`, timeouts
    /// of an idle or half-closed session, `close N` with nothing in flight) stay clean FINs.
    fn arm_resets(&self, end: End) {
        let (client, backend) = match end {
            End::ServerReset => (true, false),
            End::ClientReset => (false, true),
            End::Shutdown | End::Panic => (true, true),
            End::Error if self.connector.is_connected() => (true, true),
            _ => (
                self.down.has_pending() || self.connector.ready().error,
                self.up.has_pending(),
            ),
        };
        if client {
            self.client.reset_on_close();
        }
        if backend {
            self.connector.reset_on_close();
        }
    }
}

#[cfg(test)]
mod tests {
    /// An idle session must stay well under the 1 KiB per connection budget (two descriptors and
    /// this struct; no buffer is held while idle): 320 bytes in a debug build, where mio's sockets
    /// carry a selector id (296 before TLS: `Stream` gained a boxed TLS variant, 8 bytes more for
    /// each of the session's two streams, less padding; 304 before the connector named its
    /// listener in failure lines, 8 bytes); 320 since a server's lease holds its pool's queue, to
    /// wake the next waiting HTTP request (8 bytes); 336 since the connector holds an HTTP
    /// request's Maglev key (`hash_key`) for its picks, queued ones included (16 bytes). Boxed in
    /// the worker's slot, whose `Session` is a pointer and a tag whatever the connection's kind.
    #[test]
    fn idle_session_is_small() {
        let size = std::mem::size_of::<super::TcpSession>();
        assert!(size <= 336, "TcpSession is {size} bytes");
        let slot = std::mem::size_of::<super::super::Session>();
        assert!(slot <= 16, "Session is {slot} bytes");
    }
}
