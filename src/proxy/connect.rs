//! Getting a client a connected server socket, or the reason there is none: the balancer's pick,
//! nonblocking connects with failover in Pen's order, blacklisting of servers that fail, the
//! emergency server, the abuse server for denied clients, and the hand-off to the resolver for
//! servers given by name. Protocol-blind: a TCP session uses one [`Connector`] for its life and
//! copies through the socket it holds once connected; an HTTP session uses one per exchange
//! ([`Connector::for_http`]), each holding the pool snapshot it picked from.
//!
//! The connector keeps the server socket, its readiness and the server's lease after the connect
//! rather than handing them over: a session is smaller by a socket and a lease (memory per idle
//! connection counts).

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use mio::event::Event;
use mio::{Interest, Token};

use super::Ctx;
use crate::addr::BackendAddr;
use crate::backend::{Pool, Server, ServerLease};
use crate::balancer::{self, Client};
use crate::clock::millis;
use crate::metrics::{Counters, End};
use crate::net::fastcgi::FcgiStream;
use crate::net::tls::{Handshake, HandshakeError, TlsStream};
use crate::net::{self, ClientAddr, Ready, Stream};
use crate::queue::RECHECK_MS;
use crate::state::idle::ServerConns;

/// The PROXY protocol header of `version` for a client (`proxy_protocol`: sent first on a new
/// server connection by the TCP session, the HTTP exchange, or [`Connector::send_preface`] before
/// a TLS handshake): its address and the address it reached (`listener`: the listener's own when
/// it is not a wildcard, else the client socket's local address, one `getsockname`);
/// `UNKNOWN`/LOCAL for a Unix-socket client or when the local address cannot be had.
pub(crate) fn proxy_header(
    version: crate::config::ProxyVersion,
    client: &ClientAddr,
    socket: &Stream,
    listener: Option<SocketAddr>,
) -> quill_core::proxy_header::Encoded {
    use quill_core::proxy_header::{encode, encode_unknown};
    let local = || match listener {
        Some(a) => Some(a),
        None => socket2::SockRef::from(socket)
            .local_addr()
            .ok()?
            .as_socket(),
    };
    match (client, local()) {
        (ClientAddr::Ip(src), Some(dst)) => encode(version, *src, dst),
        _ => encode_unknown(version),
    }
}

/// Where a connector is after a call.
#[derive(Debug)]
pub(crate) enum Progress {
    /// A connect or a name resolution is under way until the deadline (clock ms).
    Waiting(u64),
    /// The server is a `BackendAddr::Name`: ask the resolver, then call
    /// [`Connector::on_resolved`] (or [`Connector::on_deadline`] if no answer came in time).
    Resolve(Arc<Server>, u64),
    /// The server socket is connected: [`Connector::server_side`] gives it.
    Connected,
    /// The TCP connect to a server of a pool with both `proxy_protocol` and `server_tls` is
    /// done: the PROXY header goes now, in plaintext, before the TLS handshake. The session
    /// builds it and calls [`Connector::send_preface`].
    Preface,
    /// No server is left to try (`NoServer`), or a local failure (`Error`).
    Failed(End),
}

/// What starting a connect to one server gave.
enum Started {
    Connecting,
    /// The server failed at once and is blacklisted: try the next.
    FailedTryNext,
    /// Out of local resources: no server is to blame, the session ends.
    LocalError,
}

/// One client's search for a server.
#[derive(Debug)]
pub(crate) struct Connector {
    /// The pool snapshot the search picks from.
    pool: Arc<Pool>,
    /// The listener whose client this is, when the pool may be a named one (HTTP routes):
    /// failure lines name both. None: the pool is the listener's own (same name).
    listener: Option<Arc<crate::state::shared::Listener>>,
    /// Whose search it is: a TCP client's (a denied one's), or an HTTP exchange's.
    kind: Kind,
    /// Which servers were offered so far.
    pick: Pick,
    /// Where the attempt under way is.
    phase: Phase,
    /// Where the connection came from (meaningful once connected).
    source: Source,
    /// The balancer's first choice, the origin of the failover order. Server indexes are kept
    /// in 32 bits: a session is small; a pool never nears 4 billion servers.
    first: Option<u32>,
    /// How many servers after `first` were offered.
    tried: u32,
    /// Index of the server being connected to (None for the emergency and abuse servers).
    current: Option<u32>,
    /// When the connect or resolution under way fails (clock ms).
    deadline: u64,
    /// The server socket (connecting or connected), and the server it goes to (or whose name is
    /// being resolved), counted in its sessions while the lease is held.
    socket: Option<Stream>,
    lease: Option<ServerLease>,
    /// What the server socket's events said so far.
    ready: Ready,
    /// The server connection slot of the socket (HTTP).
    conn: Option<u32>,
    /// HTTP: the server the request's stickiness cookie names, taken like a tracked client's.
    sticky: Option<u32>,
    /// HTTP: the request's Maglev key (its `hash_key` header or cookie, hashed), looked up
    /// instead of the client address's.
    key: Option<u64>,
    /// HTTP: the request's wait in the pool's queue, once it waited (boxed: rare, and a TCP
    /// session's connector stays small).
    wait: Option<Box<QueueWait>>,
}

/// An HTTP request's wait for a server of a full pool (`queue`).
#[derive(Debug)]
struct QueueWait {
    /// When the wait ends with a 503 (clock ms).
    until: u64,
    /// The session's client token, which it waits under.
    token: Token,
}

/// Whose search a [`Connector`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A TCP client's: the session's server token, no idle connections.
    Tcp,
    /// A TCP client the ACL denied: it goes to the abuse server, once, with no failover.
    Denied,
    /// An HTTP exchange's: the connection may be one of the worker's idle ones, and its socket
    /// has a server connection slot ([`crate::state::idle::ServerConns`]) instead of the session's
    /// server token.
    Http,
    /// An HTTP exchange's that never reuses an idle connection (a retry after a reused one
    /// failed).
    HttpFresh,
}

impl Kind {
    fn is_http(self) -> bool {
        matches!(self, Kind::Http | Kind::HttpFresh)
    }
}

/// Which servers a [`Connector`] offered, in Pen's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pick {
    /// The balancer was not asked yet.
    Unasked,
    /// The balancer chose; failover goes on in the pool.
    Pool,
    /// The emergency server (or, for a denied client, the abuse server) was offered: the last.
    Emergency,
}

/// Where a [`Connector`]'s attempt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No attempt under way: about to pick the next server (or none left).
    Picking,
    /// Waiting for the resolver to turn the server's name into an address.
    Resolving,
    /// The nonblocking TCP connect is under way.
    Connecting,
    /// The TCP connect is done and the TLS handshake with the server (`server_tls`) under way:
    /// part of connecting (a failed handshake fails the server over like a refused connect).
    Handshaking,
    /// HTTP: every usable server is at its `max`: waiting in the pool's queue for a place.
    Queued,
    /// The server socket is connected (the search is over): TLS to the server included.
    Connected,
    /// HTTP: the exchange is over and the connection was handed on (to the idle pool, to the
    /// client session, or closed).
    Released,
}

/// Where a connected [`Connector`]'s connection came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// Connected by this connector.
    Fresh,
    /// An idle connection of the worker's pool, reused (HTTP).
    Idle,
    /// The client session's private connection (it carried a PROXY header naming this client on
    /// an earlier request): it must never join the shared idle pool (HTTP).
    Private,
}

/// An HTTP client session's own server connection between its requests: it began with a PROXY
/// header naming that client (`proxy_protocol`), so it serves no other client. Its slot in
/// [`ServerConns`] stays lent to the session (events on it go to the session); the server's
/// lease ended with the exchange, as for an idle connection.
#[derive(Debug)]
pub(crate) struct PrivateConn {
    socket: Stream,
    conn: u32,
    server: Arc<Server>,
}

impl PrivateConn {
    /// Closes the connection and frees its slot (its later events are stale).
    pub(crate) fn close(self, conns: &mut ServerConns) {
        conns.forget(self.conn);
    }
}

impl Connector {
    pub(crate) fn new(pool: Arc<Pool>, denied: bool) -> Connector {
        Connector {
            pool,
            listener: None,
            kind: if denied { Kind::Denied } else { Kind::Tcp },
            pick: Pick::Unasked,
            phase: Phase::Picking,
            source: Source::Fresh,
            first: None,
            tried: 0,
            current: None,
            deadline: 0,
            socket: None,
            lease: None,
            ready: Ready::default(),
            conn: None,
            sticky: None,
            key: None,
            wait: None,
        }
    }

    /// A connector for one HTTP exchange: an idle connection to the chosen server is reused
    /// when the worker has one, or taken from another worker's pool (unless `fresh`: a retry
    /// after a reused connection failed). The server is chosen for this request: by its
    /// stickiness cookie's server (`sticky`) while available, else by the pool's mode, with
    /// `maglev` by the request's own key when it has one.
    pub(crate) fn for_http(
        pool: Arc<Pool>,
        fresh: bool,
        sticky: Option<u32>,
        key: Option<u64>,
    ) -> Connector {
        let mut c = Connector::new(pool, false);
        c.kind = if fresh { Kind::HttpFresh } else { Kind::Http };
        c.sticky = sticky;
        c.key = key;
        c
    }

    /// Names `listener` as the one whose client this connector serves (in its failure lines):
    /// kept only when it is not the pool's own name (a route's pool), since a count changed per
    /// request on the listener both workers share moves its line between their cores.
    pub(crate) fn via(mut self, listener: &Arc<crate::state::shared::Listener>) -> Connector {
        if listener.name != self.pool.name {
            self.listener = Some(listener.clone());
        }
        self
    }

    /// The index of the server connected to in the pool (None for the emergency server).
    pub(crate) fn current(&self) -> Option<u32> {
        self.current
    }

    /// Whether the connection is an idle one reused (HTTP).
    pub(crate) fn is_reused(&self) -> bool {
        self.phase == Phase::Connected && self.source != Source::Fresh
    }

    /// Whether the connection began with a PROXY header naming this client (`proxy_protocol`):
    /// the client session's private one, reused, or a new one to a pool that sends the header.
    /// It serves no other client (HTTP).
    pub(crate) fn names_client(&self) -> bool {
        self.phase == Phase::Connected
            && match self.source {
                Source::Private => true,
                Source::Fresh => self.pool.tuning.proxy_protocol.is_some(),
                Source::Idle => false,
            }
    }

    /// The exchange is over (HTTP) on a connection that carried this client's PROXY header and
    /// may take another request: it stays with the client session instead of joining the
    /// worker's idle pool. The lease ends. None (and the connection is left to
    /// [`Connector::release`]) when it is not connected or in error.
    pub(crate) fn keep_private(&mut self) -> Option<PrivateConn> {
        if self.phase != Phase::Connected || self.ready.error {
            return None;
        }
        let (Some(socket), Some(lease), Some(conn)) =
            (self.socket.take(), self.lease.take(), self.conn.take())
        else {
            return None;
        };
        self.phase = Phase::Released;
        Some(PrivateConn {
            socket,
            conn,
            server: lease.end(),
        })
    }

    /// The exchange is over (HTTP): hands the connection back to the worker's idle pool when
    /// `keep` (the server may take another request on it), else closes it. The lease ends.
    pub(crate) fn release(&mut self, keep: bool, expires: u64, max_idle: u32, cx: &mut Ctx) {
        let socket = self.socket.take();
        let lease = self.lease.take();
        let Some(id) = self.conn.take() else {
            return;
        };
        let connected = self.phase == Phase::Connected;
        match (socket, lease, keep && connected && !self.ready.error) {
            (Some(socket), Some(lease), true) => {
                // In the idle pool before the lease ends: the request the freed place wakes
                // (queue), in any worker, finds the connection there.
                cx.conns
                    .checkin(id, socket, lease.server(), max_idle, expires);
                drop(lease);
            }
            _ => {
                cx.conns.forget(id);
            }
        }
        self.phase = Phase::Released;
    }

    pub(crate) fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    pub(crate) fn is_connected(&self) -> bool {
        self.phase == Phase::Connected
    }

    /// The connected server socket and its readiness (None before the connect completes).
    pub(crate) fn server_side(&mut self) -> Option<(&Stream, &mut Ready)> {
        match (&self.socket, self.phase == Phase::Connected) {
            (Some(s), true) => Some((s, &mut self.ready)),
            _ => None,
        }
    }

    /// What the server socket's events said so far.
    pub(crate) fn ready(&self) -> &Ready {
        &self.ready
    }

    /// Whether the connector waits for the resolver.
    pub(crate) fn is_resolving(&self) -> bool {
        self.phase == Phase::Resolving
    }

    /// When the attempt under way fails.
    pub(crate) fn deadline(&self) -> u64 {
        self.deadline
    }

    /// The server being connected to, resolved, or connected, if any.
    pub(crate) fn server(&self) -> Option<&Arc<Server>> {
        self.lease.as_ref().map(ServerLease::server)
    }

    /// The session is closing: the lease of the server connected or tried, for the counters and
    /// the log line. The socket, if any, closes when the connector is dropped.
    pub(crate) fn take_lease(&mut self) -> Option<ServerLease> {
        self.lease.take()
    }

    /// Makes the close of the server socket abortive (an RST): see `TcpSession::arm_resets`.
    pub(crate) fn reset_on_close(&self) {
        if let Some(s) = &self.socket {
            s.reset_on_close();
        }
    }

    /// The session is closing (HTTP): the server connection slot is freed; the socket closes
    /// when the connector is dropped.
    pub(crate) fn forget_conn(&mut self, conns: &mut ServerConns) {
        if let Some(id) = self.conn.take() {
            conns.forget(id);
        }
    }

    /// Starts a nonblocking connect to the next server that will take one, or asks for the
    /// server's name to be resolved first.
    pub(crate) fn connect_next(&mut self, client: &ClientAddr, cx: &mut Ctx) -> Progress {
        // An HTTP request that arrives while others wait for a server joins the line behind
        // them, whatever place it might find free (one a woken waiter is about to take).
        if self.kind.is_http()
            && self.pick == Pick::Unasked
            && self.wait.is_none()
            && self.pool.queue.len() > 0
            && self.pool.may_queue(cx.now)
        {
            return self.queue_or_fail(cx);
        }
        self.connect_from(None, client, cx)
    }

    /// Waits in the pool's queue (HTTP, a server usable but full, `queue_timeout` not over), or
    /// there is no server for this request.
    fn queue_or_fail(&mut self, cx: &mut Ctx) -> Progress {
        if !self.kind.is_http() || !self.pool.may_queue(cx.now) {
            return Progress::Failed(End::NoServer);
        }
        let front = self.wait.is_some();
        let until = match &self.wait {
            Some(w) if cx.now >= w.until => {
                self.pool.queue.timed_out.fetch_add(1, Ordering::Relaxed);
                return Progress::Failed(End::NoServer);
            }
            Some(w) => w.until,
            None => {
                let until = cx
                    .now
                    .saturating_add(millis(self.pool.tuning.queue_timeout));
                self.wait = Some(Box::new(QueueWait {
                    until,
                    token: cx.client_token,
                }));
                until
            }
        };
        self.pool.queue.wait(cx.client_token, cx.mailbox, front);
        self.pick = Pick::Unasked;
        self.first = None;
        self.tried = 0;
        self.current = None;
        self.phase = Phase::Queued;
        self.deadline = until.min(cx.now.saturating_add(RECHECK_MS));
        Progress::Waiting(self.deadline)
    }

    /// A place came free on the pool this connector waits for (its worker was posted the wake):
    /// it looks for a server again, back at the head of the line if the place is gone. None when
    /// it no longer waits (the wake is then passed on).
    pub(crate) fn on_wake(&mut self, client: &ClientAddr, cx: &mut Ctx) -> Option<Progress> {
        if self.phase != Phase::Queued {
            return None;
        }
        self.phase = Phase::Picking;
        Some(self.connect_from(None, client, cx))
    }

    /// Like [`Connector::connect_next`] for an HTTP client session holding its private server
    /// connection: the balancer picks as usual, and when it picks that connection's server the
    /// connection serves the request (no syscall); else it is closed first (a session holds at
    /// most one server connection, so the events of its server side are never ambiguous).
    pub(crate) fn connect_private(
        &mut self,
        private: PrivateConn,
        client: &ClientAddr,
        cx: &mut Ctx,
    ) -> Progress {
        let rand = cx.rand();
        let first = self.next_server(client, cx.now, rand);
        match first {
            Some(server)
                if self.kind != Kind::HttpFresh && Arc::ptr_eq(&server, &private.server) =>
            {
                let PrivateConn { socket, conn, .. } = private;
                self.socket = Some(socket);
                self.conn = Some(conn);
                self.lease = Some(self.lease_of(server));
                // Idle and connected: its send buffer is empty (any readable event while it
                // was idle closed it).
                self.ready = Ready {
                    writable: true,
                    ..Ready::default()
                };
                self.source = Source::Private;
                self.phase = Phase::Connected;
                cx.conns.reused += 1;
                self.remember(client, cx.now);
                Progress::Connected
            }
            first => {
                private.close(cx.conns);
                self.connect_from(Some(first), client, cx)
            }
        }
    }

    /// Connects to `first` (the balancer's pick already made) or to the next server.
    fn connect_from(
        &mut self,
        mut first: Option<Option<Arc<Server>>>,
        client: &ClientAddr,
        cx: &mut Ctx,
    ) -> Progress {
        let rand = cx.rand();
        loop {
            let next = match first.take() {
                Some(picked) => picked,
                None => self.next_server(client, cx.now, rand),
            };
            let Some(server) = next else {
                return self.queue_or_fail(cx);
            };
            let lease = self.lease_of(server);
            if matches!(lease.server().addr(), BackendAddr::Name { .. }) {
                let server = lease.server().clone();
                self.lease = Some(lease);
                self.phase = Phase::Resolving;
                self.deadline = self.deadline_from(cx.now);
                return Progress::Resolve(server, self.deadline);
            }
            // A pool that sends PROXY headers takes no idle connection (each one named its
            // client and stays private to it: see `connect_private`).
            if self.kind == Kind::Http && self.pool.tuning.proxy_protocol.is_none() {
                if let Some((id, socket)) =
                    cx.conns
                        .checkout(lease.server(), cx.client_token, cx.registry)
                {
                    self.socket = Some(socket);
                    self.conn = Some(id);
                    self.lease = Some(lease);
                    // Idle and connected: its send buffer is empty.
                    self.ready = Ready {
                        writable: true,
                        ..Ready::default()
                    };
                    self.source = Source::Idle;
                    self.phase = Phase::Connected;
                    self.remember(client, cx.now);
                    return Progress::Connected;
                }
            }
            match self.start_connect(lease, None, client, cx) {
                Started::Connecting => return Progress::Waiting(self.deadline),
                Started::FailedTryNext => continue,
                Started::LocalError => return Progress::Failed(End::Error),
            }
        }
    }

    /// An event on the server socket: once connected, only noted; while connecting, the connect
    /// completed or failed (the server is blacklisted and the next one tried).
    pub(crate) fn on_ready(&mut self, ev: &Event, client: &ClientAddr, cx: &mut Ctx) -> Progress {
        let Some(socket) = &self.socket else {
            return Progress::Waiting(self.deadline);
        };
        self.ready.update(ev);
        match self.phase {
            Phase::Connected => return Progress::Connected,
            Phase::Handshaking => return self.drive_tls(client, cx),
            Phase::Picking
            | Phase::Queued
            | Phase::Resolving
            | Phase::Connecting
            | Phase::Released => {}
        }
        if ev.is_error() || (ev.is_write_closed() && !ev.is_writable()) {
            let why = socket.take_error().ok().flatten();
            let why = why.unwrap_or_else(|| io::Error::from(io::ErrorKind::ConnectionRefused));
            if why.kind() != io::ErrorKind::ConnectionReset {
                self.fail(&why, cx);
                return self.connect_next(client, cx);
            }
            // Not a failed connect: the server accepted, maybe sent data, and reset before this
            // event was read. Its bytes are delivered, then its reset passed on (the error flag
            // makes the end of its data read as a reset, not as EOF).
            self.ready.error = true;
        } else if !ev.is_writable() {
            return Progress::Waiting(self.deadline);
        }
        if matches!(socket, Stream::Tls(_)) {
            self.phase = Phase::Handshaking;
            if self.pool.tuning.proxy_protocol.is_some() {
                return Progress::Preface;
            }
            return self.drive_tls(client, cx);
        }
        self.phase = Phase::Connected;
        self.source = Source::Fresh;
        self.remember(client, cx.now);
        Progress::Connected
    }

    /// After [`Progress::Preface`]: writes the PROXY `header` on the bare socket (the connect
    /// just completed: its send buffer is empty and takes the header whole), then starts the TLS
    /// handshake on the same connection, as HAProxy's `send-proxy` with `ssl` does. A server that
    /// cannot take it fails like a refused connect.
    pub(crate) fn send_preface(
        &mut self,
        header: &[u8],
        client: &ClientAddr,
        cx: &mut Ctx,
    ) -> Progress {
        let Some(Stream::Tls(tls)) = &self.socket else {
            return Progress::Failed(End::Error);
        };
        // MSG_MORE: the kernel holds the header until the ClientHello's write, so both leave
        // in one segment (the extra syscall stays; a second segment does not).
        let why = match tls.sock().write_last(header) {
            Ok(n) if n == header.len() => return self.drive_tls(client, cx),
            Ok(n) => io::Error::other(format!(
                "PROXY header: {n} of {} bytes written",
                header.len()
            )),
            Err(e) => io::Error::new(e.kind(), format!("PROXY header: {e}")),
        };
        self.fail(&why, cx);
        self.connect_next(client, cx)
    }

    /// Moves the TLS handshake with the server on; done = connected. A failure (the server's
    /// certificate refused, no TLS there) fails the server like a refused connect.
    fn drive_tls(&mut self, client: &ClientAddr, cx: &mut Ctx) -> Progress {
        let Some(Stream::Tls(tls)) = &self.socket else {
            return Progress::Failed(End::Error);
        };
        match tls.handshake(&mut self.ready) {
            Ok(Handshake::Pending) => Progress::Waiting(self.deadline),
            Ok(Handshake::Done) => {
                self.phase = Phase::Connected;
                self.source = Source::Fresh;
                self.remember(client, cx.now);
                Progress::Connected
            }
            Err(e) => {
                let why = match e {
                    HandshakeError::Tls(e) => format!("TLS handshake: {e}"),
                    HandshakeError::Closed => "TLS handshake: closed by the server".to_string(),
                    HandshakeError::Io(e) => format!("TLS handshake: {e}"),
                };
                self.fail(&io::Error::other(why), cx);
                self.connect_next(client, cx)
            }
        }
    }

    /// Remembers the client's server (tracking).
    fn remember(&self, client: &ClientAddr, now_ms: u64) {
        if let (Some(i), Some(ip), true) = (self.current, client.ip(), self.pool.mode.tracking()) {
            self.pool
                .clients
                .store(ip, i as usize, (now_ms / 1000) as u32);
        }
    }

    /// The resolver answered for the server being tried: connect to the address, or, when the
    /// name did not resolve, go on to the next server (no blacklist: the name may resolve for the
    /// next client, as socket-proxyd would try again).
    pub(crate) fn on_resolved(
        &mut self,
        answer: io::Result<SocketAddr>,
        client: &ClientAddr,
        cx: &mut Ctx,
    ) -> Progress {
        if self.phase != Phase::Resolving {
            return self.state();
        }
        self.phase = Phase::Picking;
        let Some(lease) = self.lease.take() else {
            return Progress::Failed(End::Error);
        };
        match answer {
            Ok(addr) => match self.start_connect(lease, Some(addr), client, cx) {
                Started::Connecting => return Progress::Waiting(self.deadline),
                Started::FailedTryNext => {}
                Started::LocalError => return Progress::Failed(End::Error),
            },
            Err(e) => {
                let server = lease.end();
                server.failures.fetch_add(1, Ordering::Relaxed);
                Counters::add(&cx.counters.connect_failures, 1);
                tracing::info!("cannot resolve server {}: {e}", server.addr());
            }
        }
        self.connect_next(client, cx)
    }

    /// The deadline may have passed: fail the attempt (blacklisting its server) and try the
    /// next. A call before the deadline changes nothing.
    pub(crate) fn on_deadline(&mut self, client: &ClientAddr, cx: &mut Ctx) -> Progress {
        if self.phase == Phase::Connected || cx.now < self.deadline {
            return self.state();
        }
        if self.phase == Phase::Queued {
            // The periodic look, or the end of the wait: out of line, then a look (which puts
            // it back at the head of the line, or ends the wait when its time is up).
            if let Some(w) = &self.wait {
                self.pool.queue.leave(w.token);
            }
            self.phase = Phase::Picking;
            return self.connect_from(None, client, cx);
        }
        let why = if self.phase == Phase::Resolving {
            "name resolution timed out"
        } else {
            "connect timed out"
        };
        self.fail(&io::Error::new(io::ErrorKind::TimedOut, why), cx);
        self.connect_next(client, cx)
    }

    fn state(&self) -> Progress {
        if self.phase == Phase::Connected {
            Progress::Connected
        } else {
            Progress::Waiting(self.deadline)
        }
    }

    /// The next server to try, in Pen's order: the balancer's choice, then the servers after it,
    /// then the emergency server. `stubborn` stops after the first choice.
    fn next_server(&mut self, client: &ClientAddr, now_ms: u64, rand: u64) -> Option<Arc<Server>> {
        let pool = &self.pool;
        if self.kind == Kind::Denied {
            // Pen sends denied clients to the abuse server, once, with no failover.
            if self.pick != Pick::Unasked {
                return None;
            }
            self.pick = Pick::Emergency;
            self.current = None;
            return pool.abuse.clone();
        }
        if self.pick == Pick::Unasked {
            self.pick = Pick::Pool;
            let t = &pool.tuning;
            let client = match client {
                ClientAddr::Ip(addr) => Client {
                    ip: Some(addr.ip()),
                    port: addr.port(),
                    key: self.key,
                },
                ClientAddr::Unix => Client {
                    ip: None,
                    port: 0,
                    key: self.key,
                },
            };
            let tracked = match client.ip {
                // A stickiness cookie names the client's server the way tracking would.
                _ if self.sticky.is_some() => self.sticky.map(|i| i as usize),
                Some(ip) if pool.mode.tracking() => pool.clients.lookup(
                    ip,
                    (now_ms / 1000) as u32,
                    t.tracking_time.as_secs() as u32,
                ),
                _ => None,
            };
            let first = balancer::pick(
                &pool.view(client.ip),
                &pool.mode,
                &client,
                tracked,
                &pool.cursor,
                rand,
                now_ms,
            );
            self.first = first.map(|i| i as u32);
            if let Some(i) = first {
                self.current = Some(i as u32);
                return Some(pool.servers[i].clone());
            }
        } else if let (Some(first), false) = (self.first, pool.mode.stubborn) {
            let mut tried = self.tried as usize;
            let next =
                balancer::failover(&pool.view(client.ip()), first as usize, &mut tried, now_ms);
            self.tried = tried as u32;
            if let Some(i) = next {
                self.current = Some(i as u32);
                return Some(pool.servers[i].clone());
            }
        }
        let stubborn_failed = pool.mode.stubborn && self.first.is_some();
        if self.pick == Pick::Emergency || stubborn_failed {
            return None;
        }
        self.pick = Pick::Emergency;
        self.current = None;
        pool.emergency.clone()
    }

    /// A claim on `server`; an HTTP request's wakes the pool's next waiter when it ends.
    fn lease_of(&self, server: Arc<Server>) -> ServerLease {
        let lease = ServerLease::new(server);
        if self.kind.is_http() && !self.pool.tuning.queue_timeout.is_zero() {
            lease.queued(&self.pool.queue)
        } else {
            lease
        }
    }

    fn deadline_from(&self, now_ms: u64) -> u64 {
        now_ms.saturating_add(millis(self.pool.tuning.connect_timeout))
    }

    /// Opens and registers a connection to the leased server (at `resolved` when its address is
    /// a name). A server that fails at once is blacklisted; its lease ends here either way.
    fn start_connect(
        &mut self,
        lease: ServerLease,
        resolved: Option<SocketAddr>,
        client: &ClientAddr,
        cx: &mut Ctx,
    ) -> Started {
        let t = &self.pool.tuning;
        let from = net::local_end(t, client);
        let opened = match resolved {
            Some(addr) => net::connect_tcp(addr, t, from),
            None => net::connect(lease.server().addr(), t, from),
        };
        let opened = match (opened, &self.pool.server_tls) {
            (Ok(stream), Some(tls)) => {
                let ip = match resolved {
                    Some(a) => Some(a.ip()),
                    None => match lease.server().addr() {
                        BackendAddr::Tcp(a) => Some(a.ip()),
                        _ => None,
                    },
                };
                match tls.connect(ip) {
                    Ok(conn) => Ok(Stream::Tls(Box::new(TlsStream::client(stream, conn)))),
                    Err(e) => Err(io::Error::other(e.to_string())),
                }
            }
            // A FastCGI server's connection reads and writes as an HTTP/1.1 server's. It is kept
            // between requests only when the server has a `max`: a php-fpm child serves one
            // connection until it closes, so more kept connections than children would leave
            // requests on connections no child accepts (docs/fastcgi.md#connections).
            (Ok(stream), None) if self.pool.fastcgi => Ok(Stream::Fcgi(Box::new(FcgiStream::new(
                stream,
                &lease.server().addr().to_string(),
                lease.server().max() > 0,
            )))),
            (opened, _) => opened,
        };
        match opened {
            Ok(mut stream) => {
                let token = if self.kind.is_http() {
                    let (id, token) = cx.conns.open(cx.client_token);
                    self.conn = Some(id);
                    token
                } else {
                    cx.server_token
                };
                if let Err(e) = cx.registry.register(
                    stream.source(),
                    token,
                    Interest::READABLE | Interest::WRITABLE,
                ) {
                    tracing::warn!("cannot register backend socket: {e}");
                    if let Some(id) = self.conn.take() {
                        cx.conns.forget(id);
                    }
                    return Started::LocalError;
                }
                self.socket = Some(stream);
                self.lease = Some(lease);
                self.source = Source::Fresh;
                self.phase = Phase::Connecting;
                self.ready = Ready::default();
                self.deadline = self.deadline_from(cx.now);
                Started::Connecting
            }
            Err(e) if net::is_local_error(&e) => {
                tracing::warn!(
                    "cannot connect to {}: {e} (local resources)",
                    lease.server().addr()
                );
                Started::LocalError
            }
            Err(e) => {
                let server = lease.end();
                self.blacklist(&server, cx.now, &e, cx.counters);
                Started::FailedTryNext
            }
        }
    }

    /// The attempt under way failed (refused, unreachable, timed out; or the resolver did not
    /// answer in time): blacklist the server and forget the socket.
    fn fail(&mut self, why: &io::Error, cx: &mut Ctx) {
        self.phase = Phase::Picking;
        self.socket = None;
        if let Some(id) = self.conn.take() {
            cx.conns.forget(id);
        }
        self.ready = Ready::default();
        if let Some(lease) = self.lease.take() {
            let server = lease.end();
            self.blacklist(&server, cx.now, why, cx.counters);
        }
    }

    fn blacklist(&self, server: &Server, now_ms: u64, why: &io::Error, counters: &Counters) {
        server.failures.fetch_add(1, Ordering::Relaxed);
        Counters::add(&counters.connect_failures, 1);
        // Which pool and which listener's client: the same address may serve several.
        let pool = &self.pool.name;
        let listener = self.listener.as_ref().map_or(pool, |l| &l.name);
        if self.current.is_some() {
            server.blacklist(now_ms, self.pool.tuning.blacklist);
            tracing::info!(
                "server {} (pool {pool}, listener {listener}) failed ({why}); blacklisted for {}s",
                server.addr(),
                self.pool.tuning.blacklist.as_secs()
            );
        } else {
            tracing::info!(
                "emergency server {} (pool {pool}, listener {listener}) failed ({why})",
                server.addr()
            );
        }
    }
}

impl Drop for Connector {
    /// A request that closes while waiting leaves the line (its client went, or the session
    /// was reset).
    fn drop(&mut self) {
        if self.phase == Phase::Queued {
            if let Some(w) = &self.wait {
                self.pool.queue.leave(w.token);
            }
        }
    }
}
