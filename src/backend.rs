//! Who is in a pool and whether they can take work: each server's live state (sessions, blacklist)
//! in atomics shared by all workers, and the pool snapshot a listener swaps atomically on change.
//!
//! Never connects or probes: workers report connect outcomes here.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::acl::{AclId, Acls};
use crate::addr::{AdminState, BackendAddr, ServerSpec};
use crate::balancer::{ClientTable, Cursor, MaglevSet, Mode, ServerSet};
use crate::clock::millis;
use crate::config::model::{HashKey, UdpSettings};
use crate::config::{HealthCheck, HttpSettings, ListenerConfig, ListenerKind, StreamProto, Tuning};
use crate::per_worker::{self, Line, PerWorker};
use crate::queue::Queue;
use quill_core::http1::rewrite::{EditOp, HeaderEdit};

const NO_ACL: u8 = u8::MAX;

/// What active health checks last decided about a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Health {
    /// No checks configured: only failed connects (the blacklist) take a server out.
    Unchecked,
    Up,
    Down,
}

/// One server's live state, shared by all workers and the health checker. The address is fixed
/// for the server's life; limits and states change in place (control commands, reloads), so the
/// session counts stay right while the configuration moves under them.
#[derive(Debug)]
pub(crate) struct Server {
    addr: BackendAddr,
    max: AtomicU32,
    hard: AtomicU32,
    weight: AtomicU32,
    prio: AtomicU32,
    acl: AtomicU8,
    admin: AtomicU8,
    health: AtomicU8,
    /// When the server last came up (clock ms), for slow start; 0 = long ago.
    up_since_ms: AtomicU64,
    /// The pool's slow-start time in ms (0 = off).
    slow_start_ms: AtomicU64,
    /// Sessions using (or connecting to) this server now: read by every worker's choice
    /// (least connections, `max`), so shared, on a cache line of its own, away from the
    /// settings every choice reads.
    pub sessions: Line<AtomicU64>,
    /// Until when (clock ms) the server is skipped; 0 = not blacklisted.
    blacklisted_until: AtomicU64,
    /// Connects that failed.
    pub failures: AtomicU64,
    /// Health checks run, and how many failed.
    pub checks: AtomicU64,
    pub checks_failed: AtomicU64,
    /// Sessions ever sent here, and the bytes of finished sessions, each worker's own (an HTTP
    /// request counts in both: see `per_worker`).
    counts: PerWorker<Counts>,
}

/// A worker's counts of one server (see [`Server::total`], [`Server::sent`],
/// [`Server::received`]).
#[derive(Debug, Default)]
struct Counts {
    total: AtomicU64,
    /// Bytes sent to the server and received from it, by finished sessions (Pen's sx and rx).
    sent: AtomicU64,
    received: AtomicU64,
}

impl Server {
    pub(crate) fn new(spec: ServerSpec) -> Server {
        let s = Server {
            addr: spec.addr.clone(),
            max: AtomicU32::new(0),
            hard: AtomicU32::new(0),
            weight: AtomicU32::new(1),
            prio: AtomicU32::new(0),
            acl: AtomicU8::new(NO_ACL),
            admin: AtomicU8::new(0),
            health: AtomicU8::new(Health::Unchecked as u8),
            up_since_ms: AtomicU64::new(0),
            slow_start_ms: AtomicU64::new(0),
            sessions: Line(AtomicU64::new(0)),
            blacklisted_until: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            checks: AtomicU64::new(0),
            checks_failed: AtomicU64::new(0),
            counts: PerWorker::new(),
        };
        s.set_spec(&spec);
        s
    }

    /// Takes the limits, ACL and admin state of `spec` (same address).
    pub(crate) fn set_spec(&self, spec: &ServerSpec) {
        self.max.store(spec.max, Ordering::Relaxed);
        self.hard.store(spec.hard, Ordering::Relaxed);
        self.weight.store(spec.weight, Ordering::Relaxed);
        self.prio.store(spec.prio, Ordering::Relaxed);
        self.acl
            .store(spec.acl.map_or(NO_ACL, AclId::get), Ordering::Relaxed);
        self.admin.store(spec.state as u8, Ordering::Relaxed);
    }

    /// The server as a spec (for `write` and status).
    pub(crate) fn spec(&self) -> ServerSpec {
        ServerSpec {
            addr: self.addr.clone(),
            max: self.max.load(Ordering::Relaxed),
            hard: self.hard.load(Ordering::Relaxed),
            weight: self.weight(),
            prio: self.prio(),
            acl: self.acl(),
            state: self.admin(),
            identity: None,
        }
    }

    pub(crate) fn addr(&self) -> &BackendAddr {
        &self.addr
    }

    /// MAXCONN: the soft limit on sessions (requests in flight, for HTTP); 0 = none.
    pub(crate) fn max(&self) -> u32 {
        self.max.load(Ordering::Relaxed)
    }

    pub(crate) fn weight(&self) -> u32 {
        self.weight.load(Ordering::Relaxed)
    }

    pub(crate) fn prio(&self) -> u32 {
        self.prio.load(Ordering::Relaxed)
    }

    pub(crate) fn acl(&self) -> Option<AclId> {
        AclId::new(self.acl.load(Ordering::Relaxed))
    }

    pub(crate) fn admin(&self) -> AdminState {
        match self.admin.load(Ordering::Relaxed) {
            0 => AdminState::Enabled,
            1 => AdminState::Drain,
            _ => AdminState::Disabled,
        }
    }

    pub(crate) fn health(&self) -> Health {
        match self.health.load(Ordering::Relaxed) {
            0 => Health::Unchecked,
            1 => Health::Up,
            _ => Health::Down,
        }
    }

    /// Records a health verdict; a server coming up starts its slow start at `now_ms`.
    pub(crate) fn set_health(&self, health: Health, now_ms: u64) {
        let old = self.health.swap(health as u8, Ordering::Relaxed);
        if old == Health::Down as u8 && health != Health::Down {
            self.came_up(now_ms);
        }
    }

    /// Moves the health from `from` to `to` only if it is still `from`, so a verdict reached
    /// while a reload removed the check (health now unchecked) is dropped instead of leaving the
    /// server down for good. Returns whether it moved.
    pub(crate) fn change_health(&self, from: Health, to: Health, now_ms: u64) -> bool {
        let moved = self
            .health
            .compare_exchange(from as u8, to as u8, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok();
        if moved && from == Health::Down && to != Health::Down {
            self.came_up(now_ms);
        }
        moved
    }

    fn came_up(&self, now_ms: u64) {
        self.up_since_ms.store(now_ms, Ordering::Relaxed);
        // A server that checks say is back must not wait out a blacklist from before.
        self.blacklisted_until.store(0, Ordering::Relaxed);
    }

    /// Counts one health check.
    pub(crate) fn record_check(&self, ok: bool) {
        self.checks.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.checks_failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn set_slow_start(&self, d: Duration) {
        self.slow_start_ms.store(millis(d), Ordering::Relaxed);
    }

    /// How much of its share the server takes now, in thousandths: below 1000 during slow start.
    /// The ramp starts when the server last came back: up after health checks said down, enabled
    /// after a drain or disable, or out of a blacklist (its end is the start).
    pub(crate) fn ramp(&self, now_ms: u64) -> u32 {
        let span = self.slow_start_ms.load(Ordering::Relaxed);
        if span == 0 {
            return 1000;
        }
        let back = self.blacklisted_until.load(Ordering::Relaxed);
        let since = self.up_since_ms.load(Ordering::Relaxed).max(back);
        if since == 0 || since > now_ms {
            return 1000;
        }
        let elapsed = now_ms.saturating_sub(since);
        if elapsed >= span {
            return 1000;
        }
        (elapsed * 1000 / span).max(1) as u32
    }

    pub(crate) fn is_blacklisted(&self, now_ms: u64) -> bool {
        self.blacklisted_until.load(Ordering::Relaxed) > now_ms
    }

    /// Until when the server is blacklisted (clock ms), if it is.
    pub(crate) fn blacklisted_until(&self, now_ms: u64) -> Option<u64> {
        Some(self.blacklisted_until.load(Ordering::Relaxed)).filter(|&t| t > now_ms)
    }

    /// Skips this server until `now_ms + d`.
    pub(crate) fn blacklist(&self, now_ms: u64, d: Duration) {
        self.blacklisted_until
            .store(now_ms.saturating_add(millis(d)), Ordering::Relaxed);
    }

    /// Whether the server may take new sessions at all: enabled, not down, not blacklisted.
    pub(crate) fn is_usable(&self, now_ms: u64) -> bool {
        self.admin.load(Ordering::Relaxed) == AdminState::Enabled as u8
            && self.health.load(Ordering::Relaxed) != Health::Down as u8
            && !self.is_blacklisted(now_ms)
    }

    /// Pen's availability rule: usable, and under MAXCONN, or, for a client tracked to this
    /// server, under HARD (0 = no limit).
    pub(crate) fn is_available(&self, tracked: bool, now_ms: u64) -> bool {
        if !self.is_usable(now_ms) {
            return false;
        }
        let sessions = self.sessions.load(Ordering::Relaxed);
        let hard = self.hard.load(Ordering::Relaxed);
        let limit = if tracked && hard > 0 {
            hard
        } else {
            self.max.load(Ordering::Relaxed)
        };
        limit == 0 || sessions < u64::from(limit)
    }

    /// One word for the state, most important first: disabled, drain, down, blacklisted, up.
    pub(crate) fn state_name(&self, now_ms: u64) -> &'static str {
        match (self.admin(), self.health()) {
            (AdminState::Disabled, _) => "disabled",
            (AdminState::Drain, _) => "drain",
            (_, Health::Down) => "down",
            _ if self.is_blacklisted(now_ms) => "blacklisted",
            _ => "up",
        }
    }

    /// Adds a finished session's (or HTTP request's) bytes, in the calling worker's counts.
    pub(crate) fn count_bytes(&self, sent: u64, received: u64) {
        let (counts, alone) = self.counts.mine();
        if sent > 0 {
            per_worker::add(&counts.sent, alone, sent);
        }
        if received > 0 {
            per_worker::add(&counts.received, alone, received);
        }
    }

    /// Sessions ever sent here (HTTP: requests), all workers'.
    pub(crate) fn total(&self) -> u64 {
        self.sum(|c| &c.total)
    }

    /// Bytes sent to the server by finished sessions, all workers'.
    pub(crate) fn sent(&self) -> u64 {
        self.sum(|c| &c.sent)
    }

    /// Bytes received from the server by finished sessions, all workers'.
    pub(crate) fn received(&self) -> u64 {
        self.sum(|c| &c.received)
    }

    /// One of the counts, every worker's slot added up.
    fn sum(&self, of: impl Fn(&Counts) -> &AtomicU64) -> u64 {
        self.counts
            .slots()
            .map(|c| of(c).load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }
}

/// One session's claim on a server: counted in the server's sessions (and its total) from
/// [`ServerLease::new`] until the lease is dropped, whichever way the session or the attempt ends.
/// For TCP the lease lasts from the connect attempt to the close; for HTTP it will be one request in
/// flight.
/// An HTTP request's lease also holds its pool's queue: the place it frees goes to the oldest
/// request waiting there (`queue`).
#[derive(Debug)]
pub(crate) struct ServerLease {
    server: Arc<Server>,
    queue: Option<Arc<Queue>>,
}

impl ServerLease {
    pub(crate) fn new(server: Arc<Server>) -> ServerLease {
        server.sessions.fetch_add(1, Ordering::Relaxed);
        let (counts, alone) = server.counts.mine();
        per_worker::add(&counts.total, alone, 1);
        ServerLease {
            server,
            queue: None,
        }
    }

    /// The same lease, waking the next request waiting in `queue` when it ends.
    pub(crate) fn queued(mut self, queue: &Arc<Queue>) -> ServerLease {
        self.queue = Some(queue.clone());
        self
    }

    pub(crate) fn server(&self) -> &Arc<Server> {
        &self.server
    }

    /// Ends the lease now, keeping the server (for the log line that follows the close).
    pub(crate) fn end(self) -> Arc<Server> {
        let server = self.server.clone();
        drop(self);
        server
    }
}

impl Drop for ServerLease {
    fn drop(&mut self) {
        self.server.sessions.fetch_sub(1, Ordering::Relaxed);
        if let Some(queue) = &self.queue {
            queue.wake_one();
        }
    }
}

/// A listener's pool as the data path sees it: servers, emergency and abuse servers, mode, tuning
/// and ACLs. Swapped whole when the configuration changes; sessions keep the snapshot they started
/// with. Servers, the round-robin cursor and the tracking table carry over from the previous
/// snapshot when they still apply.
#[derive(Debug)]
pub(crate) struct Pool {
    /// This pool's number, never another's: a listener's `pool_generation` names its current
    /// pool, so a session sees that its own is still current without touching the `ArcSwap`.
    pub generation: u64,
    pub name: String,
    pub mode: Mode,
    pub tuning: Tuning,
    pub servers: Vec<Arc<Server>>,
    pub emergency: Option<Arc<Server>>,
    /// Where clients denied by `client_acl` go; None = closed.
    pub abuse: Option<Arc<Server>>,
    pub cursor: Arc<Cursor>,
    /// The Maglev tables of a pool whose mode has `maglev` (kept from the previous pool while
    /// its servers, weights and priorities are the same).
    pub maglev: Option<Arc<MaglevSet>>,
    /// HTTP requests waiting for a server while all are at `max` (kept across rebuilds).
    pub queue: Arc<Queue>,
    pub clients: Arc<ClientTable>,
    pub client_acl: Option<AclId>,
    /// The process's ACL lists (client and per-server ACLs refer to them).
    pub acls: Arc<Acls>,
    pub health: Option<HealthCheck>,
    /// What the listener accepts (its `ListenerKind`, with TLS built): what `Worker::admit`
    /// matches on.
    pub kind: PoolKind,
    /// HTTP cookie stickiness (`sticky_cookie`), on an HTTP listener's own pool or a named pool.
    pub sticky: Option<Sticky>,
    /// What `maglev` hashes (`hash_key`): the client address, or an HTTP request's header or
    /// cookie (read per request by the HTTP proxy, which passes its hash in `Client::key`).
    pub hash_key: HashKey,
    /// Where its servers come from when DNS publishes them (`crate::discovery` follows it).
    pub discovery: Option<crate::config::model::Discovery>,
    /// An HTTP listener's routes (None when it has none; always None on a named pool). Set by
    /// the controller after `build`, once the named pools they point to exist; a reload swaps
    /// them with the pool, so the next request sees the new routes.
    pub routes: Option<Arc<Routes>>,
    /// TLS to the pool's servers (`server_tls`), kept from the previous pool while its settings
    /// are unchanged.
    pub server_tls: Option<Arc<crate::tls::client::ClientTls>>,
    /// Its servers speak FastCGI (`protocol = "fastcgi"`): each connection is an
    /// [`crate::net::fastcgi::FcgiStream`].
    pub fastcgi: bool,
    /// The listener's address when it is one IP's (not a wildcard): every client reached it, so
    /// the PROXY header sent to servers names it without a `getsockname`.
    pub local: Option<std::net::SocketAddr>,
}

/// A pool's side of its listener's kind (`config::ListenerKind`).
#[derive(Debug)]
pub(crate) enum PoolKind {
    /// A stream listener's pool, or a named pool (a stream without TLS of its own).
    Stream(StreamPool),
    /// A UDP listener's flow settings.
    Udp(UdpSettings),
    /// A DSR listener: frames, no sessions.
    Dsr,
}

/// Which session an accepted client of a stream listener gets (see [`Pool::admission`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// A TLS handshake first (then HTTP or TCP inside).
    Tls,
    /// HTTP in clear.
    Http,
    /// The TLS ClientHello read, untouched, to pick a pool by its server name (SNI routes).
    Peek,
    /// Bytes relayed to a server; a client `client_acl` denies goes to the abuse server or is
    /// closed.
    Tcp,
}

/// A stream listener's pool: TLS, PROXY acceptance and what its clients speak.
#[derive(Debug)]
pub(crate) struct StreamPool {
    /// TLS termination (None: clients speak in clear). Set by the controller after `build`,
    /// kept from the previous pool while the listener's TLS settings are unchanged.
    pub tls: Option<Arc<crate::tls::ServerTls>>,
    /// The listener's trusted upstream proxies (`accept_proxy`); empty: none.
    pub accept_proxy: Vec<crate::acl::Net>,
    /// The HTTP settings of an HTTP listener's pool; None for TCP.
    pub http: Option<Arc<HttpSettings>>,
}

impl PoolKind {
    fn of(kind: &ListenerKind) -> PoolKind {
        match kind {
            ListenerKind::Stream(s) => PoolKind::Stream(StreamPool {
                tls: None,
                accept_proxy: s.accept_proxy.clone(),
                http: match &s.proto {
                    StreamProto::Http(h) => Some(Arc::new(h.clone())),
                    StreamProto::Tcp => None,
                },
            }),
            ListenerKind::Udp(u) => PoolKind::Udp(u.clone()),
            ListenerKind::Dsr(_) => PoolKind::Dsr,
        }
    }
}

/// A listener's routes, whose pool actions hold named pools.
pub(crate) type Routes = crate::route::Routes<Pool>;

/// HTTP stickiness by a cookie Quill inserts (`sticky_cookie`): the cookie's name, and per server
/// (in the pool's order) its value, a hash of the server's address (the same in every worker,
/// process and reload while the address is listed), and the `Set-Cookie` edit that gives it.
#[derive(Debug)]
pub(crate) struct Sticky {
    pub name: Box<str>,
    pub values: Vec<[u8; 16]>,
    pub set_cookie: Vec<[HeaderEdit; 1]>,
}

impl Sticky {
    fn new(name: &str, servers: &[Arc<Server>]) -> Sticky {
        let values: Vec<[u8; 16]> = servers
            .iter()
            .map(|s| crate::route::hex16(crate::route::fnv1a(s.addr().to_string().bytes())))
            .collect();
        let set_cookie = values
            .iter()
            .map(|v| {
                [HeaderEdit {
                    op: EditOp::Add,
                    name: "Set-Cookie".into(),
                    value: format!(
                        "{name}={}; Path=/; HttpOnly; SameSite=Lax",
                        String::from_utf8_lossy(v)
                    )
                    .into(),
                }]
            })
            .collect();
        Sticky {
            name: name.into(),
            values,
            set_cookie,
        }
    }

    /// The server a request's `Cookie` fields name (`fields`: each `Cookie` field's value).
    pub(crate) fn server_of<'a>(&self, cookies: impl Iterator<Item = &'a [u8]>) -> Option<u32> {
        let value = cookie_value(cookies, self.name.as_bytes())?;
        self.values
            .iter()
            .position(|v| v[..] == *value)
            .map(|i| i as u32)
    }
}

/// The value of the first cookie named `name` (exact case) in a request's `Cookie` fields (each
/// field's value, in order): the `name=value` pairs are split at `;`, and the pair and the value
/// are trimmed of whitespace. None when no pair has that name.
pub(crate) fn cookie_value<'a>(
    cookies: impl Iterator<Item = &'a [u8]>,
    name: &[u8],
) -> Option<&'a [u8]> {
    for header in cookies {
        for pair in header.split(|&b| b == b';') {
            let pair = pair.trim_ascii();
            let Some(eq) = pair.iter().position(|&b| b == b'=') else {
                continue;
            };
            if &pair[..eq] == name {
                return Some(pair[eq + 1..].trim_ascii());
            }
        }
    }
    None
}

impl Pool {
    /// Builds the pool for `l`, keeping from `old` every server whose address is still listed (its
    /// sessions, counters, blacklist and health), the round-robin cursor, and the tracking table
    /// when the server list and its size are unchanged.
    /// Linear in the number of servers: old servers are found by address in a map, each taken
    /// at most once (the first with that address first, as listed).
    pub(crate) fn build(
        l: &ListenerConfig,
        acls: Arc<Acls>,
        old: Option<&Pool>,
        now_ms: u64,
    ) -> Pool {
        let mut reusable: HashMap<&BackendAddr, VecDeque<Arc<Server>>> = HashMap::new();
        for s in old.map_or(&[][..], |o| &o.servers[..]) {
            reusable.entry(s.addr()).or_default().push_back(s.clone());
        }
        // A server added to a running, checked pool waits for its checks before any client meets
        // it; at start (and for a new listener) servers begin up so traffic flows at once.
        let checked_later = old.is_some() && l.health.is_some();
        let servers: Vec<Arc<Server>> = l
            .servers
            .iter()
            .map(|spec| {
                let kept = reusable.get_mut(&spec.addr).and_then(VecDeque::pop_front);
                if kept.is_none() && checked_later {
                    let s = Arc::new(Server::new(spec.clone()));
                    s.set_health(Health::Down, now_ms);
                    return s;
                }
                match kept {
                    Some(s) => {
                        if s.admin() != AdminState::Enabled && spec.state == AdminState::Enabled {
                            // Back in service: slow start applies as after a health recovery.
                            s.up_since_ms.store(now_ms, Ordering::Relaxed);
                        }
                        s.set_spec(spec);
                        s
                    }
                    None => Arc::new(Server::new(spec.clone())),
                }
            })
            .collect();
        for s in &servers {
            s.set_slow_start(l.slow_start);
            if l.health.is_none() {
                s.set_health(Health::Unchecked, now_ms);
            } else if s.health() == Health::Unchecked {
                s.set_health(Health::Up, now_ms);
            }
        }
        for (i, d) in &l.initial_blacklist {
            if let Some(s) = servers.get(*i) {
                s.blacklist(now_ms, *d);
            }
        }
        let extra = |addr: &Option<BackendAddr>, old: Option<&Arc<Server>>| {
            addr.clone().map(|addr| match old {
                Some(o) if *o.addr() == addr => o.clone(),
                _ => Arc::new(Server::new(ServerSpec::new(addr))),
            })
        };
        let emergency = extra(&l.emergency, old.and_then(|o| o.emergency.as_ref()));
        let abuse = extra(&l.abuse, old.and_then(|o| o.abuse.as_ref()));
        let same_list = old.is_some_and(|o| {
            o.servers.len() == servers.len()
                && o.servers
                    .iter()
                    .zip(&servers)
                    .all(|(a, b)| Arc::ptr_eq(a, b))
        });
        let clients = match old {
            Some(o) if same_list && o.tuning.clients_max == l.tuning.clients_max => {
                o.clients.clone()
            }
            _ => Arc::new(ClientTable::new(l.tuning.clients_max)),
        };
        let maglev = l.mode.maglev.then(|| {
            let from = l.maglev_servers();
            match old.and_then(|o| o.maglev.as_ref()) {
                Some(m) if m.built_from(&from, l.mode.prio) => m.clone(),
                _ => Arc::new(MaglevSet::build(from, l.mode.prio)),
            }
        });
        let sticky = l
            .sticky_cookie
            .as_deref()
            .map(|name| Sticky::new(name, &servers));
        static GENERATIONS: AtomicU64 = AtomicU64::new(1);
        Pool {
            generation: GENERATIONS.fetch_add(1, Ordering::Relaxed),
            name: l.name.clone(),
            mode: l.mode,
            tuning: l.tuning.clone(),
            servers,
            emergency,
            abuse,
            cursor: old.map_or_else(Arc::default, |o| o.cursor.clone()),
            maglev,
            queue: old.map_or_else(Arc::default, |o| o.queue.clone()),
            clients,
            client_acl: l.client_acl,
            kind: PoolKind::of(&l.kind),
            routes: None,
            server_tls: None,
            fastcgi: l.fastcgi,
            local: match &l.listen {
                crate::addr::ListenAddr::Tcp(a) if !a.ip().is_unspecified() => Some(*a),
                _ => None,
            },
            sticky,
            hash_key: l.hash_key.clone(),
            discovery: l.discovery.clone(),
            acls,
            health: l.health.clone(),
        }
    }

    /// A stream pool's settings; None for UDP and DSR.
    pub(crate) fn stream(&self) -> Option<&StreamPool> {
        match &self.kind {
            PoolKind::Stream(s) => Some(s),
            _ => None,
        }
    }

    /// An HTTP listener's settings; None for any other pool.
    pub(crate) fn http(&self) -> Option<&Arc<HttpSettings>> {
        self.stream()?.http.as_ref()
    }

    /// The listener's TLS termination; None when its clients speak in clear.
    pub(crate) fn tls(&self) -> Option<&Arc<crate::tls::ServerTls>> {
        self.stream()?.tls.as_ref()
    }

    /// The listener's trusted upstream proxies; empty: none.
    pub(crate) fn accept_proxy(&self) -> &[crate::acl::Net] {
        self.stream().map_or(&[], |s| &s.accept_proxy[..])
    }

    /// Whether its listener waits for a client's first bytes before accepting it (`defer_accept`,
    /// where clients speak first: HTTP, TLS, a PROXY header, a ClientHello for SNI routes); as
    /// [`ListenerConfig::defers_accept`](crate::config::ListenerConfig::defers_accept).
    pub(crate) fn defers_accept(&self) -> bool {
        self.tuning.defer_accept
            && (!self.accept_proxy().is_empty() || !matches!(self.admission(false), Admission::Tcp))
    }

    /// What session a client accepted on this pool's listener gets; `denied`: `client_acl`
    /// denied it (it gets a TCP session to the abuse server, or is closed). UDP and DSR
    /// listeners accept no stream: TCP, as for a denied client.
    pub(crate) fn admission(&self, denied: bool) -> Admission {
        match &self.kind {
            PoolKind::Stream(_) if denied => Admission::Tcp,
            PoolKind::Stream(StreamPool { tls: Some(_), .. }) => Admission::Tls,
            PoolKind::Stream(StreamPool { http: Some(_), .. }) => Admission::Http,
            PoolKind::Stream(_) if self.routes.is_some() => Admission::Peek,
            PoolKind::Stream(_) | PoolKind::Udp(_) | PoolKind::Dsr => Admission::Tcp,
        }
    }

    /// A UDP listener's flow settings; None for any other pool.
    pub(crate) fn udp(&self) -> Option<&UdpSettings> {
        match &self.kind {
            PoolKind::Udp(u) => Some(u),
            _ => None,
        }
    }

    /// Whether `client_acl` lets this client in (Unix-socket clients always pass).
    pub(crate) fn admits(&self, ip: Option<IpAddr>) -> bool {
        match (self.client_acl, ip) {
            (Some(n), Some(ip)) => self.acls.permits(n, ip),
            _ => true,
        }
    }

    /// Whether an HTTP request that found no server should wait in the queue: waiting is on
    /// (`queue_timeout`) and a server is usable but at its `max`, so a place will come free.
    pub(crate) fn may_queue(&self, now_ms: u64) -> bool {
        !self.tuning.queue_timeout.is_zero()
            && self
                .servers
                .iter()
                .any(|s| s.is_usable(now_ms) && !s.is_available(false, now_ms))
    }

    /// The pool as one client sees it: per-server ACLs and slow start apply.
    pub(crate) fn view(&self, client: Option<IpAddr>) -> PoolView<'_> {
        PoolView { pool: self, client }
    }
}

/// A pool seen by one client: a server whose ACL denies the client is unavailable to it.
pub(crate) struct PoolView<'a> {
    pub pool: &'a Pool,
    client: Option<IpAddr>,
}

impl ServerSet for PoolView<'_> {
    fn len(&self) -> usize {
        self.pool.servers.len()
    }

    fn is_available(&self, i: usize, tracked: bool, now_ms: u64) -> bool {
        let s = &self.pool.servers[i];
        if !s.is_available(tracked, now_ms) {
            return false;
        }
        match (s.acl(), self.client) {
            (Some(n), Some(ip)) => self.pool.acls.permits(n, ip),
            _ => true,
        }
    }

    fn load(&self, i: usize) -> u64 {
        self.pool.servers[i].sessions.load(Ordering::Relaxed)
    }

    fn weight(&self, i: usize) -> u32 {
        self.pool.servers[i].weight()
    }

    fn prio(&self, i: usize) -> u32 {
        self.pool.servers[i].prio()
    }

    fn ramp(&self, i: usize, now_ms: u64) -> u32 {
        self.pool.servers[i].ramp(now_ms)
    }

    fn maglev(&self) -> Option<&MaglevSet> {
        self.pool.maglev.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_counts_the_session_until_it_is_dropped_or_ended() {
        let s = Arc::new(server());
        let a = ServerLease::new(s.clone());
        let b = ServerLease::new(s.clone());
        assert_eq!(s.sessions.load(Ordering::Relaxed), 2);
        assert_eq!(s.total(), 2);
        drop(a);
        assert_eq!(s.sessions.load(Ordering::Relaxed), 1);
        let kept = b.end();
        assert!(Arc::ptr_eq(&kept, &s));
        assert_eq!(s.sessions.load(Ordering::Relaxed), 0);
        assert_eq!(s.total(), 2, "the total never goes down");
    }

    fn server() -> Server {
        let s = Server::new(ServerSpec::new(BackendAddr::Unix("/x".into())));
        s.set_slow_start(Duration::from_secs(10));
        s
    }

    #[test]
    fn slow_start_follows_a_blacklist_and_a_recovery() {
        let s = server();
        assert_eq!(
            s.ramp(5_000),
            1000,
            "a server that never left takes its full share"
        );
        s.blacklist(1_000, Duration::from_secs(2));
        assert_eq!(
            s.ramp(8_000),
            500,
            "ramping from the blacklist's end at 3 s"
        );
        assert_eq!(s.ramp(13_000), 1000);
        s.set_health(Health::Down, 20_000);
        s.set_health(Health::Up, 30_000);
        assert_eq!(s.ramp(32_500), 250);
    }

    #[test]
    fn slow_start_follows_an_enable() {
        let l = |state| {
            let mut l = ListenerConfig::new("p", crate::addr::ListenAddr::Unix("/l".into()));
            let mut spec = ServerSpec::new(BackendAddr::Unix("/x".into()));
            spec.state = state;
            l.servers.push(spec);
            l.slow_start = Duration::from_secs(10);
            l
        };
        let drained = Pool::build(&l(AdminState::Drain), Arc::default(), None, 1_000);
        let enabled = Pool::build(
            &l(AdminState::Enabled),
            Arc::default(),
            Some(&drained),
            50_000,
        );
        assert!(Arc::ptr_eq(&drained.servers[0], &enabled.servers[0]));
        assert_eq!(enabled.servers[0].ramp(55_000), 500);
    }

    #[test]
    fn a_client_is_admitted_as_its_listeners_kind_says() {
        let pool = |kind| {
            let mut l = ListenerConfig::new("p", crate::addr::ListenAddr::Unix("/l".into()));
            l.kind = kind;
            Pool::build(&l, Arc::default(), None, 0)
        };
        let tcp = pool(ListenerKind::default());
        assert_eq!(tcp.admission(false), Admission::Tcp);
        let http = pool(ListenerKind::http(HttpSettings::default()));
        assert_eq!(http.admission(false), Admission::Http);
        assert_eq!(
            http.admission(true),
            Admission::Tcp,
            "denied: abuse server or closed"
        );
        assert!(http.http().is_some() && http.tls().is_none() && http.udp().is_none());
        let udp = pool(ListenerKind::Udp(UdpSettings::default()));
        assert_eq!(udp.admission(false), Admission::Tcp);
        assert!(udp.udp().is_some() && udp.http().is_none());
    }
}
