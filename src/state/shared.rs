//! What all workers share: the listeners and their pools (swapped atomically), the session count
//! against `-x`, the process phase, the log settings and the counters. Atomics only on the data
//! path; the control thread talks to a worker through its inbox and waker.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;
use mio::Waker;

use super::idle::IdlePools;
use super::permit::SessionCount;
use crate::addr::ListenAddr;
use crate::backend::Pool;
use crate::clock::Clock;
use crate::config::Global;
use crate::listener::ListenSocket;
use crate::metrics::{Counters, HttpStats};
use crate::route::RateTable;

/// Where the process is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Running,
    /// Not accepting; open sessions finish until the drain deadline.
    Draining,
    /// Closing everything now.
    Stopping,
}

/// A listening socket and the pool behind it.
#[derive(Debug)]
pub(crate) struct Listener {
    /// Unique for the life of the process (workers key their registrations on it).
    pub id: u64,
    pub name: String,
    pub addr: ListenAddr,
    pub socket: ListenSocket,
    /// Read by [`Listener::load_pool`], replaced by [`Listener::set_pool`] only, which keeps
    /// `pool_generation` with it.
    pool: ArcSwap<Pool>,
    /// The `generation` of `pool`'s current pool.
    pool_generation: AtomicU64,
    /// Its HTTP requests by status class and duration, per worker (HTTP listeners only count).
    pub http: Arc<HttpStats>,
    /// UDP flows open on it in all workers (held to its pool's `max_flows`).
    pub flows: AtomicU64,
    /// Its UDP flows by source (held to `max_flows_per_source`).
    pub flow_sources: FlowSources,
}

impl Listener {
    pub(crate) fn new(
        id: u64,
        name: String,
        addr: ListenAddr,
        socket: ListenSocket,
        pool: Pool,
        workers: usize,
    ) -> Listener {
        Listener {
            id,
            name,
            addr,
            socket,
            pool_generation: AtomicU64::new(pool.generation),
            pool: ArcSwap::from_pointee(pool),
            http: Arc::new(HttpStats::new(workers)),
            flows: Default::default(),
            flow_sources: Default::default(),
        }
    }

    /// The listener's current pool (the snapshot sessions take).
    pub(crate) fn load_pool(&self) -> arc_swap::Guard<Arc<Pool>> {
        self.pool.load()
    }

    /// [`load_pool`](Self::load_pool) as an `Arc` of its own.
    pub(crate) fn load_pool_full(&self) -> Arc<Pool> {
        self.pool.load_full()
    }

    /// Makes `pool` the listener's pool (a reload).
    pub(crate) fn set_pool(&self, pool: Arc<Pool>) {
        let generation = pool.generation;
        self.pool.store(pool);
        self.pool_generation.store(generation, Ordering::Release);
    }

    /// The listener's current pool if `held` is not it (a reload replaced it), else None. Per
    /// request, with no atomic write: `ArcSwap::load` writes twice (its debt slot), and a count
    /// changed on every request would move a line all workers read between their cores.
    pub(crate) fn newer_pool(&self, held: &Pool) -> Option<Arc<Pool>> {
        // Acquire: a generation seen means its pool is stored (`set_pool`).
        (self.pool_generation.load(Ordering::Acquire) != held.generation)
            .then(|| self.load_pool_full())
    }

    /// Whether its clients stay on the worker that accepted them for good: TLS (the session's
    /// state cannot move) and HTTP/2 by `h2c` (one session per stream). Plain HTTP/1 clients
    /// move between two requests, and TCP clients are gathered by where they are accepted
    /// (`concentrate`).
    pub(crate) fn clients_pinned(&self) -> bool {
        let pool = self.load_pool();
        pool.http().is_some_and(|s| s.h2c || pool.tls().is_some())
    }
}

/// A listener's flows by source (shared by the workers, touched when a flow starts or ends):
/// an IPv4 address, or the /64 of an IPv6 one.
#[derive(Debug, Default)]
pub(crate) struct FlowSources(Mutex<HashMap<IpAddr, u32>>);

impl FlowSources {
    /// The source `ip` counts under: IPv4 (mapped ones too) as is, IPv6 by its /64.
    fn key(ip: IpAddr) -> IpAddr {
        match ip.to_canonical() {
            IpAddr::V6(v6) => {
                let bits = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(bits.into())
            }
            v4 => v4,
        }
    }

    /// One more flow from `ip` unless it holds `max` already (then false).
    pub(crate) fn take(&self, ip: IpAddr, max: u64) -> bool {
        // A panic contained elsewhere cannot have left the map half-changed (no call in it
        // panics): a poisoned lock is taken as it is, the bound still applies.
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(FlowSources::key(ip)).or_insert(0);
        if u64::from(*n) >= max {
            return false;
        }
        *n += 1;
        true
    }

    /// A flow from `ip` ended.
    pub(crate) fn give(&self, ip: IpAddr) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let key = FlowSources::key(ip);
        if let Some(n) = m.get_mut(&key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&key);
            }
        }
    }
}

/// One open session, as `connections` and `connection N` show it.
#[derive(Clone, Debug)]
pub(crate) struct SessionInfo {
    pub id: u64,
    pub listener: String,
    pub client: String,
    pub server: Option<String>,
    pub age_ms: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// resolving, connecting, open, half-closed
    pub state: &'static str,
}

/// What a worker reports when asked.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub sessions: Vec<SessionInfo>,
    /// Recently accepted clients: address and Unix time.
    pub recent: Vec<(IpAddr, u64)>,
}

/// A question or order for one worker, answered on the channel it carries.
#[derive(Debug)]
pub(crate) enum Request {
    Report(mpsc::Sender<Report>),
    /// Close session `id` if this worker has it; answers whether it did.
    Close(u64, mpsc::Sender<bool>),
    /// A client another worker accepted and handed over, being the busier one
    /// (`runtime::worker`'s accept spreads clients by [`Load`]): open it as if accepted here.
    Adopt(Arc<Listener>, crate::net::Stream, crate::net::ClientAddr),
    /// A kept-alive HTTP client between two requests, moved from a worker that no longer
    /// accepts or holds clearly more clients (`runtime::worker`'s `gather`): carry it on here.
    /// The session with its place under `-x` and its address's count, as the worker's `Moved`
    /// (this layer cannot name a session's type, which lives above it).
    Move(Box<dyn std::any::Any + Send>),
}

/// How many workers accept clients, on a line of its own (read by every worker once a turn,
/// written rarely).
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct Accepting(pub AtomicUsize);

/// A worker's load, by which a worker that accepts a client decides to keep it or hand it to the
/// least loaded worker: its sessions open (stored by the worker), plus the clients handed to it
/// that it has not opened yet (counted by the sender, taken off by the worker). Aligned so that
/// two workers never share a cache line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Load {
    pub live: AtomicU64,
    pub pending: AtomicU64,
}

impl Load {
    pub(crate) fn get(&self) -> u64 {
        self.live.load(Ordering::Relaxed) + self.pending.load(Ordering::Relaxed)
    }
}

pub(crate) struct Shared {
    pub clock: Clock,
    /// The listeners, in configuration order. Replaced whole when one is added or removed.
    pub listeners: ArcSwap<Vec<Arc<Listener>>>,
    /// Sessions allowed at once (`-x`, `conn_max`).
    pub max_sessions: AtomicU64,
    /// Sessions the open-file limit leaves room for after the reserve (control, admin, health
    /// checks, pipes, logs); workers never go past it whatever `max_sessions` says.
    pub fd_sessions: AtomicU64,
    /// UDP flows open in all workers (one descriptor each): they take at most `fd_sessions`
    /// descriptors, half of the sessions' share, and sessions get what they leave.
    pub udp_flows: AtomicU64,
    /// Sessions open in all workers; each holds a permit of it (`Worker::admit`).
    pub active: Arc<SessionCount>,
    pub accept_batch: u32,
    /// Whether bulk flows use splice pipes.
    pub splice: bool,
    /// Whether the main loop gathers clients on fewer workers under CPU contention
    /// (`concentrate`, and more than one worker).
    pub concentrate: bool,
    /// Workers that accept clients: the first this many (the others hand their kept-alive HTTP
    /// clients over between requests); set by the main loop (`runtime::balance`).
    pub accepting: Accepting,
    phase: AtomicU8,
    pub drain_deadline_ms: AtomicU64,
    /// Of a drain: how long idle HTTP clients are kept for one more request (ms, at most the
    /// drain timeout), stored before the phase turns to draining.
    pub drain_grace_ms: AtomicU64,
    /// Of a drain: workers that have not yet taken their share of the listeners' queues; the last
    /// one closes the listening sockets (`Worker::start_drain`).
    pub drain_pending: AtomicU64,
    /// Bumped when the access log must be reopened (SIGHUP, `log FILE`, reload).
    pub log_generation: AtomicU64,
    /// The access log files and which listener writes into which, read by workers when the
    /// generation moves (set by the controller from the configuration).
    pub access_log: Mutex<crate::log::LogPlan>,
    /// One per worker.
    pub counters: Vec<Counters>,
    /// One per worker: requests from the control thread; None once the worker has stopped.
    pub inboxes: Vec<Mutex<Option<Vec<Request>>>>,
    /// One per worker: its load, for spreading accepted clients.
    pub loads: Vec<Load>,
    /// The workers' pools of idle server connections (HTTP), one per worker: a worker takes from
    /// another's when its own has none to the server it needs.
    pub idle: Arc<IdlePools>,
    /// One per worker, set once the workers exist.
    pub wakers: OnceLock<Vec<Arc<Waker>>>,
    /// Set when a new process took the sockets over: the socket files belong to it now.
    pub handed_over: AtomicBool,
    /// Clock ms when the last session ended or the process started (for `--exit-idle-time`).
    pub last_busy_ms: AtomicU64,
    /// Unix time the process started.
    pub started_unix: u64,
    /// One per worker: clock ms when it last answered a wake-up (u64::MAX once it has stopped).
    /// The watchdog pings systemd only while every worker answers.
    pub heartbeats: Vec<AtomicU64>,
    /// Files of the Unix sockets systemd passed: they belong to the socket unit, never removed.
    pub systemd_files: OnceLock<Vec<PathBuf>>,
    /// The admin listener, kept here so a takeover can hand it over.
    pub admin_socket: OnceLock<Arc<std::net::TcpListener>>,
    /// What the listeners were when the drain began: status keeps showing the pools while their
    /// sessions finish (the listener list itself is emptied so the sockets close).
    pub drained: ArcSwap<Vec<DrainedListener>>,
    /// Sessions per client address for `max_per_source`; made when a listener first needs it.
    sources: OnceLock<Arc<SourceCounts>>,
    /// The named pools (`[[pool]]`), in configuration order; replaced whole on every change
    /// (routes in the listeners' pools hold the same `Arc`s). Control commands, health checks and
    /// status read them here.
    pub pools: ArcSwap<Vec<Arc<Pool>>>,
    /// Requests per (route, client address) for routes' `rate` (its slots are made on first
    /// use).
    rates: RateTable,
    /// What DNS discovery did for each pool that follows it (`crate::discovery` writes it; the
    /// metrics read it).
    pub discovery: Mutex<Vec<DiscoveryStat>>,
}

/// One DNS-discovered pool's record, for `/metrics`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct DiscoveryStat {
    /// The listener's or named pool's name.
    pub pool: String,
    /// `srv:NAME` or `dns:NAME:PORT`.
    pub source: String,
    /// Servers in the last good set.
    pub servers: usize,
    /// Rounds that found servers, and rounds that failed (no answer, an error, nothing usable).
    pub rounds_ok: u64,
    pub rounds_failed: u64,
    /// Queries sent (UDP and TCP, follow-ups and retries included).
    pub queries: u64,
    /// Rounds that changed the pool.
    pub changes: u64,
    /// The resolvers have failed for longer than `hold`: the last good set is kept.
    pub stale: bool,
}

/// A listener that no longer accepts, as status reports show it during a drain.
#[derive(Debug)]
pub(crate) struct DrainedListener {
    pub name: String,
    pub addr: ListenAddr,
    pub pool: Arc<Pool>,
    /// Its HTTP request counters (requests in flight still count during the drain).
    pub http: Arc<HttpStats>,
}

impl Shared {
    /// Shared state for `g.workers` workers over `listeners`.
    pub(crate) fn new(
        clock: Clock,
        listeners: Vec<Arc<Listener>>,
        max_sessions: u64,
        g: &Global,
    ) -> Shared {
        Shared {
            clock,
            listeners: ArcSwap::from_pointee(listeners),
            max_sessions: AtomicU64::new(max_sessions),
            fd_sessions: AtomicU64::new(u64::MAX),
            udp_flows: AtomicU64::new(0),
            active: Arc::new(SessionCount::default()),
            accept_batch: g.accept_batch.max(1),
            splice: g.splice,
            // One worker has no other to hand a client to.
            concentrate: g.gathers(),
            accepting: Accepting(AtomicUsize::new(g.workers)),
            phase: AtomicU8::new(0),
            drain_deadline_ms: AtomicU64::new(u64::MAX),
            drain_grace_ms: AtomicU64::new(0),
            drain_pending: AtomicU64::new(g.workers as u64),
            log_generation: AtomicU64::new(0),
            access_log: Mutex::new(crate::log::LogPlan::default()),
            counters: (0..g.workers).map(Counters::new).collect(),
            inboxes: (0..g.workers)
                .map(|_| Mutex::new(Some(Vec::new())))
                .collect(),
            loads: (0..g.workers).map(|_| Load::default()).collect(),
            idle: Arc::new(IdlePools::new(g.workers)),
            wakers: OnceLock::new(),
            handed_over: AtomicBool::new(false),
            last_busy_ms: AtomicU64::new(clock.now_ms()),
            started_unix: crate::clock::unix_time(),
            heartbeats: (0..g.workers).map(|_| AtomicU64::new(0)).collect(),
            systemd_files: OnceLock::new(),
            admin_socket: OnceLock::new(),
            drained: ArcSwap::from_pointee(Vec::new()),
            sources: OnceLock::new(),
            pools: ArcSwap::from_pointee(Vec::new()),
            rates: RateTable::new(),
            discovery: Mutex::new(Vec::new()),
        }
    }

    /// The per-source session counts (allocated on first use: nothing while no listener has a
    /// `max_per_source`).
    pub(crate) fn sources(&self) -> &Arc<SourceCounts> {
        self.sources.get_or_init(|| Arc::new(SourceCounts::new()))
    }

    /// The rate limit table of every route (its 1 MiB of slots is allocated when a route with
    /// `rate` first admits a request: nothing while none does). Workers call `admit` on it per
    /// request.
    pub(crate) fn rates(&self) -> &RateTable {
        &self.rates
    }

    /// The named pool called `name`.
    pub(crate) fn pool(&self, name: &str) -> Option<Arc<Pool>> {
        self.pools.load().iter().find(|p| p.name == name).cloned()
    }

    pub(crate) fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Acquire) {
            0 => Phase::Running,
            1 => Phase::Draining,
            _ => Phase::Stopping,
        }
    }

    pub(crate) fn set_phase(&self, phase: Phase) {
        let v = match phase {
            Phase::Running => 0,
            Phase::Draining => 1,
            Phase::Stopping => 2,
        };
        self.phase.store(v, Ordering::Release);
    }

    /// Wakes every worker (to look at the phase, the listeners, the log or its inbox).
    pub(crate) fn wake_all(&self) {
        for w in self.wakers.get().into_iter().flatten() {
            let _ = w.wake();
        }
    }

    /// Sends `make(reply)` to every worker and collects the answers (workers that have stopped
    /// answer nothing).
    pub(crate) fn ask_all<T>(&self, make: impl Fn(mpsc::Sender<T>) -> Request) -> Vec<T> {
        let (tx, rx) = mpsc::channel();
        for inbox in &self.inboxes {
            if let Some(queue) = inbox.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                queue.push(make(tx.clone()));
            }
        }
        drop(tx);
        self.wake_all();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut out = Vec::new();
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match rx.recv_timeout(left) {
                Ok(v) => out.push(v),
                Err(_) => break,
            }
        }
        out
    }
}

impl Shared {
    /// Whether `path` is the file of a socket systemd passed (never removed by Quill).
    pub(crate) fn is_systemd_file(&self, path: &std::path::Path) -> bool {
        self.systemd_files
            .get()
            .is_some_and(|files| files.iter().any(|f| f == path))
    }
}

/// Counters behind `max_per_source`: open sessions per (listener, client address), shared by all
/// workers without a lock. A fixed table of atomic counters indexed by a keyed hash (SipHash with a
/// key drawn at start, so a client cannot choose addresses that collide on purpose).
///
/// Never exact in one direction only: a counter sums the sessions of every address that hashes
/// to it, so an address never holds more than the limit, and an address under its limit is
/// refused only when it shares its counter with other addresses whose sessions, with its own,
/// reach the limit. With K client addresses holding sessions on limited listeners, a given
/// address shares its counter with another with a probability of about K / `SOURCE_SLOTS`.
#[derive(Debug)]
pub(crate) struct SourceCounts {
    key: RandomState,
    counts: Box<[AtomicU32]>,
}

/// Counters in the table (a power of two): 256 KiB, allocated only when a limit is set.
pub(crate) const SOURCE_SLOTS: usize = 1 << 16;

impl SourceCounts {
    fn new() -> SourceCounts {
        SourceCounts {
            key: RandomState::new(),
            counts: (0..SOURCE_SLOTS).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// The counter of `ip` on `listener`. A client reaching a dual-stack listener over IPv4 is
    /// the same client as over IPv4-mapped IPv6.
    fn index(&self, listener: u64, ip: IpAddr) -> usize {
        self.key.hash_one((listener, ip.to_canonical())) as usize & (SOURCE_SLOTS - 1)
    }

    /// Counts one more session of `ip` on listener `listener`, or None when that would take it
    /// past `limit` (nothing is counted then). The session is counted until the slot drops.
    pub(crate) fn admit(
        self: &Arc<Self>,
        listener: u64,
        ip: IpAddr,
        limit: u32,
    ) -> Option<SourceSlot> {
        let idx = self.index(listener, ip);
        let count = &self.counts[idx];
        // One atomic add decides: of racing sessions of one address, exactly those that found
        // the count under the limit stay counted.
        if count.fetch_add(1, Ordering::Relaxed) >= limit {
            count.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(SourceSlot {
            table: self.clone(),
            idx: idx as u32,
        })
    }

    /// The count behind `listener` and `ip` (for tests).
    #[cfg(test)]
    fn count(&self, listener: u64, ip: IpAddr) -> u32 {
        self.counts[self.index(listener, ip)].load(Ordering::Relaxed)
    }
}

/// One session counted against its client address; uncounted when dropped.
#[derive(Debug)]
pub(crate) struct SourceSlot {
    table: Arc<SourceCounts>,
    idx: u32,
}

impl Drop for SourceSlot {
    fn drop(&mut self) {
        self.table.counts[self.idx as usize].fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_held_to_its_limit_and_released_on_drop() {
        let t = Arc::new(SourceCounts::new());
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        let held: Vec<_> = (0..3).map(|_| t.admit(7, a, 3)).collect();
        assert!(held.iter().all(Option::is_some));
        assert!(
            t.admit(7, a, 3).is_none(),
            "a fourth session of one address"
        );
        assert!(
            t.admit(7, mapped, 3).is_none(),
            "the mapped form is the same address"
        );
        assert_eq!(t.count(7, a), 3, "a refusal leaves nothing counted");
        drop(held);
        assert_eq!(t.count(7, a), 0);
        assert!(t.admit(7, a, 3).is_some());
    }
}
