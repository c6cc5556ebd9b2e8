//! One TCP session: pick a server, connect (nonblocking, with failover and blacklisting), then copy
//! both ways until both directions are done. The worker owns sessions and feeds them events; a
//! session never blocks and never allocates on the copy path.

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};
use socket2::SockRef;

use super::flow::{Failure, Flow, Pools};
use super::{Ready, Stream};
use crate::addr::BackendAddr;
use crate::backend::{Pool, Server};
use crate::balancer::{self, Client};
use crate::clock::millis;
use crate::config::Tuning;
use crate::metrics::{Counters, End};

/// The client's address.
#[derive(Clone, Copy, Debug)]
pub enum Peer {
    Ip(SocketAddr),
    Unix,
}

impl Peer {
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Peer::Ip(a) => Some(a.ip()),
            Peer::Unix => None,
        }
    }

    /// The client address with its port (for `connections`).
    pub fn to_string_with_port(&self) -> String {
        match self {
            Peer::Ip(a) => a.to_string(),
            Peer::Unix => "unix".to_string(),
        }
    }
}

impl fmt::Display for Peer {
    /// The client IP as Pen logs it (no port); "unix" for Unix-socket clients.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Ip(a) => write!(f, "{}", a.ip()),
            Peer::Unix => f.write_str("unix"),
        }
    }
}

/// Where the session is in its search for a server.
#[derive(Debug, Default)]
struct Attempt {
    /// The balancer was asked.
    picked: bool,
    /// The balancer's first choice, the origin of the failover order.
    first: Option<usize>,
    /// How many servers after `first` were offered.
    tried: usize,
    emergency: bool,
    /// Index of the server being connected to (None for the emergency server).
    current: Option<usize>,
    /// Bumped on each connect, so a stale timeout is recognised.
    seq: u32,
    /// Waiting for the resolver to turn the server's name into an address.
    resolving: bool,
}

/// What a session waits for after starting an attempt; both end by the deadline (clock ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempting {
    /// A nonblocking connect is in progress.
    Connect(u64),
    /// The server is a `BackendAddr::Name`: the worker must ask the resolver, then call
    /// `Session::resolved` with the answer.
    Resolve(u64),
}

/// One client connection and its backend connection.
#[derive(Debug)]
pub struct Session {
    pub pool: Arc<Pool>,
    /// Unique in the process (`connection N`, `close N`).
    pub id: u64,
    pub client: Stream,
    pub peer: Peer,
    pub backend: Option<Stream>,
    /// The server the backend connection goes to; counted in its sessions while Some.
    pub server: Option<Arc<Server>>,
    pub connected: bool,
    pub client_ready: Ready,
    pub backend_ready: Ready,
    /// Client to server.
    pub up: Flow,
    /// Server to client.
    pub down: Flow,
    pub started_ms: u64,
    /// Last time bytes moved (idle and FIN timeouts count from here).
    pub active_ms: u64,
    /// When the client was accepted, for the connect time.
    accepted_at: Instant,
    /// The client's ACL denied it: it goes to the abuse server.
    pub denied: bool,
    /// The server reset and the session waits for the client to acknowledge the server's last
    /// bytes before passing the reset on (which would destroy them in flight).
    pub server_gone: bool,
    attempt: Attempt,
}

/// Whether a connect error is ours (no descriptors, no ports, no memory) rather than the server's:
/// such errors must not blacklist a healthy server.
pub fn is_local_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM | libc::EADDRNOTAVAIL)
    )
}

impl Session {
    pub fn new(pool: Arc<Pool>, id: u64, client: Stream, peer: Peer, now_ms: u64) -> Session {
        Session {
            pool,
            id,
            client,
            peer,
            backend: None,
            server: None,
            connected: false,
            client_ready: Ready::default(),
            backend_ready: Ready::default(),
            up: Flow::default(),
            down: Flow::default(),
            started_ms: now_ms,
            active_ms: now_ms,
            accepted_at: Instant::now(),
            denied: false,
            server_gone: false,
            attempt: Attempt::default(),
        }
    }

    /// Microseconds from accept to the backend connection (failovers included).
    pub fn connect_time_us(&self) -> u64 {
        self.accepted_at.elapsed().as_micros() as u64
    }

    /// The current connect attempt's number (for timeouts).
    pub fn attempt_seq(&self) -> u32 {
        self.attempt.seq
    }

    /// The next server to try, in Pen's order: the balancer's choice, then the servers after it,
    /// then the emergency server. `stubborn` stops after the first choice.
    fn next_server(&mut self, now_ms: u64, rand: u64) -> Option<Arc<Server>> {
        let pool = self.pool.clone();
        let a = &mut self.attempt;
        if self.denied {
            // Pen sends denied clients to the abuse server, once, with no failover.
            if a.picked {
                return None;
            }
            a.picked = true;
            a.emergency = true;
            a.current = None;
            return pool.abuse.clone();
        }
        if !a.picked {
            a.picked = true;
            let t = &pool.tuning;
            let client = match self.peer {
                Peer::Ip(addr) => Client {
                    ip: Some(addr.ip()),
                    port: addr.port(),
                },
                Peer::Unix => Client { ip: None, port: 0 },
            };
            let tracked = match client.ip {
                Some(ip) if pool.mode.tracking() => pool.clients.lookup(
                    ip,
                    (now_ms / 1000) as u32,
                    t.tracking_time.as_secs() as u32,
                ),
                _ => None,
            };
            a.first = balancer::pick(
                &pool.view(client.ip),
                &pool.mode,
                &client,
                tracked,
                &pool.cursor,
                rand,
                now_ms,
            );
            if let Some(i) = a.first {
                a.current = Some(i);
                return Some(pool.servers[i].clone());
            }
        } else if let (Some(first), false) = (a.first, pool.mode.stubborn) {
            if let Some(i) =
                balancer::failover(&pool.view(self.peer.ip()), first, &mut a.tried, now_ms)
            {
                a.current = Some(i);
                return Some(pool.servers[i].clone());
            }
        }
        let stubborn_failed = pool.mode.stubborn && a.first.is_some();
        if a.emergency || stubborn_failed {
            return None;
        }
        a.emergency = true;
        a.current = None;
        pool.emergency.clone()
    }

    /// Starts a nonblocking connect to the next server that will take one, or asks for the
    /// server's name to be resolved first. Err when no server is left to try.
    pub fn connect_next(
        &mut self,
        registry: &Registry,
        token: Token,
        now_ms: u64,
        rand: u64,
        counters: &Counters,
    ) -> Result<Attempting, End> {
        loop {
            let server = self.next_server(now_ms, rand).ok_or(End::NoServer)?;
            server.session_started();
            if matches!(server.addr(), BackendAddr::Name { .. }) {
                self.server = Some(server);
                self.attempt.resolving = true;
                self.attempt.seq = self.attempt.seq.wrapping_add(1);
                return Ok(Attempting::Resolve(self.deadline(now_ms)));
            }
            if let Some(deadline) =
                self.start_connect(server, None, registry, token, now_ms, counters)?
            {
                return Ok(Attempting::Connect(deadline));
            }
        }
    }

    /// Whether the session waits for the resolver.
    pub fn is_resolving(&self) -> bool {
        self.attempt.resolving
    }

    /// The resolver answered for the server being tried: connect to the address, or, when the
    /// name did not resolve, go on to the next server (no blacklist: the name may resolve for the
    /// next client, as socket-proxyd would try again). Err when no server is left to try.
    pub fn resolved(
        &mut self,
        answer: io::Result<SocketAddr>,
        registry: &Registry,
        token: Token,
        now_ms: u64,
        rand: u64,
        counters: &Counters,
    ) -> Result<Attempting, End> {
        self.attempt.resolving = false;
        let server = self.server.take().ok_or(End::Error)?;
        match answer {
            Ok(addr) => {
                if let Some(deadline) =
                    self.start_connect(server, Some(addr), registry, token, now_ms, counters)?
                {
                    return Ok(Attempting::Connect(deadline));
                }
            }
            Err(e) => {
                server.session_ended();
                server.failures.fetch_add(1, Ordering::Relaxed);
                Counters::add(&counters.connect_failures, 1);
                tracing::info!("cannot resolve server {}: {e}", server.addr());
            }
        }
        self.connect_next(registry, token, now_ms, rand, counters)
    }

    fn deadline(&self, now_ms: u64) -> u64 {
        now_ms.saturating_add(millis(self.pool.tuning.connect_timeout))
    }

    /// Opens and registers a connection to `server` (at `resolved` when its address is a name).
    /// Ok(Some(deadline)) when the connect is under way, Ok(None) when the server failed at once
    /// (it is blacklisted; try the next), Err on a local failure.
    fn start_connect(
        &mut self,
        server: Arc<Server>,
        resolved: Option<SocketAddr>,
        registry: &Registry,
        token: Token,
        now_ms: u64,
        counters: &Counters,
    ) -> Result<Option<u64>, End> {
        let t = &self.pool.tuning;
        let opened = match resolved {
            Some(addr) => open_tcp(addr, t),
            None => open(server.addr(), t),
        };
        match opened {
            Ok(mut stream) => {
                if let Err(e) = registry.register(
                    stream.source(),
                    token,
                    Interest::READABLE | Interest::WRITABLE,
                ) {
                    tracing::warn!("cannot register backend socket: {e}");
                    server.session_ended();
                    return Err(End::Error);
                }
                self.backend = Some(stream);
                self.server = Some(server);
                self.attempt.seq = self.attempt.seq.wrapping_add(1);
                Ok(Some(self.deadline(now_ms)))
            }
            Err(e) if is_local_error(&e) => {
                server.session_ended();
                tracing::warn!("cannot connect to {}: {e} (local resources)", server.addr());
                Err(End::Error)
            }
            Err(e) => {
                server.session_ended();
                self.blacklist(&server, now_ms, &e, counters);
                Ok(None)
            }
        }
    }

    /// The connect in progress failed (refused, unreachable, timed out; or the resolver did not
    /// answer in time): blacklist the server and forget the socket. The caller then calls
    /// `connect_next`.
    pub fn connect_failed(&mut self, now_ms: u64, why: &io::Error, counters: &Counters) {
        self.attempt.resolving = false;
        self.backend = None;
        self.backend_ready = Ready::default();
        if let Some(server) = self.server.take() {
            server.session_ended();
            self.blacklist(&server, now_ms, why, counters);
        }
    }

    fn blacklist(&self, server: &Server, now_ms: u64, why: &io::Error, counters: &Counters) {
        server.failures.fetch_add(1, Ordering::Relaxed);
        Counters::add(&counters.connect_failures, 1);
        if self.attempt.current.is_some() {
            server.blacklist(now_ms, self.pool.tuning.blacklist);
            tracing::info!(
                "server {} failed ({why}); blacklisted for {}s",
                server.addr(),
                self.pool.tuning.blacklist.as_secs()
            );
        } else {
            tracing::info!("emergency server {} failed ({why})", server.addr());
        }
    }

    /// The backend connection is established: remember the client's server.
    pub fn connected(&mut self, now_ms: u64) {
        self.connected = true;
        self.active_ms = now_ms;
        if let (Some(i), Some(ip), true) = (
            self.attempt.current,
            self.peer.ip(),
            self.pool.mode.tracking(),
        ) {
            self.pool.clients.store(ip, i, (now_ms / 1000) as u32);
        }
    }

    /// Copies what the sockets allow in both directions. Returns how the session ends, if it does.
    pub fn drive(&mut self, pools: &mut Pools, now_ms: u64) -> Option<End> {
        let backend = self.backend.as_ref()?;
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
            &mut self.backend_ready,
            pools,
        ) {
            Ok(p) => p,
            Err(Failure::Read(_)) => return Some(End::ClientReset),
            Err(Failure::Write(_)) => return Some(End::ServerReset),
        };
        progress |= match self.down.pump(
            self.up.is_done(),
            backend,
            &self.client,
            &mut self.backend_ready,
            &mut self.client_ready,
            pools,
        ) {
            Ok(p) => p,
            Err(Failure::Read(_)) => return Some(End::ServerReset),
            Err(Failure::Write(_)) => return Some(End::ClientReset),
        };
        if progress {
            self.active_ms = now_ms;
        }
        let fastclose = self.pool.tuning.tcp_fastclose;
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

    /// Whether a flow stopped on its budget and must be driven again without an event.
    pub fn wants_more(&self) -> bool {
        self.up.yielded || self.down.yielded
    }

    /// Whether one direction has finished and the other not, or the server reset while its last
    /// bytes still wait for the client (the FIN timeout applies to both).
    pub fn is_half_closed(&self) -> bool {
        self.up.is_done() != self.down.is_done() || self.backend_ready.error
    }

    /// After the server reset: whether bytes it sent are still on their way to the client
    /// (unacknowledged in the client's socket). A reset passed on now would destroy them, where a
    /// direct connection would have delivered them first; the worker waits (at most the FIN
    /// timeout) before closing.
    pub fn client_catching_up(&self) -> bool {
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
    pub fn arm_resets(&self, end: End) {
        let (client, backend) = match end {
            End::ServerReset => (true, false),
            End::ClientReset => (false, true),
            End::Shutdown => (true, true),
            End::Error if self.connected => (true, true),
            _ => (
                self.down.has_pending() || self.backend_ready.error,
                self.up.has_pending(),
            ),
        };
        if client {
            self.client.reset_on_close();
        }
        if let (true, Some(b)) = (backend, &self.backend) {
            b.reset_on_close();
        }
    }

    /// Gives buffers back before the session is dropped.
    pub fn release(&mut self, pools: &mut Pools) {
        self.up.release(pools);
        self.down.release(pools);
        if let Some(server) = self.server.take() {
            server.session_ended();
        }
    }
}

/// Opens a nonblocking connection (connect in progress for TCP). A `Name` must have been resolved
/// by the caller (`open_tcp`): resolving here would block the worker.
fn open(addr: &BackendAddr, t: &Tuning) -> io::Result<Stream> {
    match addr {
        BackendAddr::Tcp(a) => open_tcp(*a, t),
        BackendAddr::Unix(p) => UnixStream::connect(p).map(Stream::Unix),
        BackendAddr::Abstract(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            UnixStream::connect_addr(&addr).map(Stream::Unix)
        }
        BackendAddr::Name { host, .. } => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("'{host}' must be resolved before connecting"),
        )),
    }
}

fn open_tcp(addr: SocketAddr, t: &Tuning) -> io::Result<Stream> {
    let s = TcpStream::connect(addr)?;
    if t.tcp_nodelay {
        s.set_nodelay(true)?;
    }
    if t.keepalive {
        SockRef::from(&s).set_keepalive(true)?;
    }
    Ok(Stream::Tcp(s))
}

#[cfg(test)]
mod tests {
    /// An idle session must stay well under the 1 KiB per connection budget (two descriptors and
    /// this struct; no buffer is held while idle).
    #[test]
    fn idle_session_is_small() {
        let size = std::mem::size_of::<super::Session>();
        assert!(size <= 320, "Session is {size} bytes");
    }
}
