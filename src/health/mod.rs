//! Active health checks: one thread with its own event loop probes every server of every pool
//! that has a check, and moves servers down after `fall` failed probes in a row and back up after
//! `rise` passed ones (a server coming up starts its slow start and loses its blacklist).
//!
//! The thread follows the running configuration: every [`SYNC_MS`] it looks at the listeners'
//! current pools and the named pools (`[[pool]]`), starts watching new servers (first probe at a random point of the interval, so
//! a hundred servers do not fire at once) and forgets removed ones. It never blocks on a socket,
//! holds at most one probe (one socket) per server, and never touches a session.
//!
//! The same thread and event loop follow the pools whose servers come from DNS
//! ([`crate::discovery`]): off the data path, like the probes.

mod probe;
mod verdict;

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use mio::{Events, Poll, Registry, Token};
use quill_core::rand::Rng;

use crate::addr::BackendAddr;
use crate::backend::{Health, Pool, Server};
use crate::clock::millis;
use crate::config::HealthCheck;
use crate::discovery::Discoverer;
use crate::state::controller::Controller;
use crate::state::shared::{Phase, Shared};
use probe::{Probe, StartError};
use verdict::{Outcome, Streak, Transition};

/// How often (ms) the checker looks for configuration changes.
const SYNC_MS: u64 = 100;
/// Least time (ms) between two warnings about local resources (no descriptors, no ports).
const LOCAL_WARN_MS: u64 = 10_000;

/// Starts the health checker thread. It runs for the life of the process and idles when no pool
/// has a check.
pub(crate) fn spawn(controller: Arc<Controller>) -> io::Result<()> {
    let poll = Poll::new()?;
    let checker = Checker::new(controller, poll);
    thread::Builder::new()
        .name("quill-health".into())
        .spawn(move || checker.run())?;
    Ok(())
}

// === Watched servers ===

/// One server under watch: its check, its run of results and its probe in flight.
struct Watched {
    server: Arc<Server>,
    /// The pool's name, for log lines.
    pool: String,
    check: HealthCheck,
    /// The pool's TLS to its servers (`server_tls`): probes speak TLS too.
    tls: Option<Arc<crate::tls::client::ClientTls>>,
    /// The pool's `source` and `proxy_protocol`: probes leave from that address and send the
    /// header first, as the pool's connections do.
    how: probe::Leave,
    streak: Streak,
    /// Clock ms when the next probe is due (while none is in flight).
    due_ms: u64,
    probe: Option<Probe>,
    /// The sync round that last saw the server in a pool with a check.
    seen: u64,
}

impl Watched {
    /// Takes a probe's outcome: counts it, and moves the server up or down when the run says so.
    fn conclude(&mut self, outcome: Outcome, now_ms: u64) {
        let ok = outcome == Outcome::Pass;
        let started = self.probe.take().map_or(now_ms, |p| p.started_ms);
        self.due_ms = started
            .saturating_add(millis(self.check.interval))
            .max(now_ms);
        self.server.record_check(ok);
        let is_down = self.server.health() == Health::Down;
        let addr = self.server.addr();
        match (&outcome, self.streak.record(ok, is_down, &self.check)) {
            (Outcome::Fail(why), Some(Transition::Down { failed })) => {
                if self.server.change_health(Health::Up, Health::Down, now_ms) {
                    tracing::info!(
                        "server {addr} (pool {}) is down: {why} ({failed} failed checks)",
                        self.pool
                    );
                }
            }
            (_, Some(Transition::Up { passed })) => {
                if self.server.change_health(Health::Down, Health::Up, now_ms) {
                    tracing::info!(
                        "server {addr} (pool {}) is up ({passed} passed checks)",
                        self.pool
                    );
                }
            }
            (Outcome::Fail(why), _) => {
                tracing::debug!("health check of {addr} (pool {}) failed: {why}", self.pool);
            }
            (Outcome::Pass, _) => {}
        }
    }

    /// A new check for this server: start counting afresh, at a random point of the new interval.
    fn restart(&mut self, check: &HealthCheck, now_ms: u64, rand: u64) {
        self.check = check.clone();
        self.streak = Streak::default();
        self.probe = None;
        self.due_ms = now_ms + jitter(check, rand);
    }
}

/// A random delay within the check's interval, for a server's first probe.
fn jitter(check: &HealthCheck, rand: u64) -> u64 {
    rand % millis(check.interval).max(1)
}

/// The token of a server's probes: the server's address in memory, unique while it is watched
/// (the checker holds an `Arc` to it), and at most one probe per server.
fn key(server: &Arc<Server>) -> usize {
    Arc::as_ptr(server) as usize
}

// === The checker ===

struct Checker {
    shared: Arc<Shared>,
    poll: Poll,
    servers: HashMap<usize, Watched>,
    /// The pools seen at the last sync (held, so a new pool cannot reuse an old one's address).
    pools: Vec<Arc<Pool>>,
    round: u64,
    next_sync_ms: u64,
    /// Earliest due time or probe deadline; nothing to do before it.
    next_wake_ms: u64,
    last_local_warn_ms: u64,
    rng: Rng,
    discovery: Discoverer,
}

impl Checker {
    fn new(controller: Arc<Controller>, poll: Poll) -> Checker {
        let seed = crate::clock::unix_time() ^ (u64::from(std::process::id()) << 32);
        Checker {
            shared: controller.shared().clone(),
            discovery: Discoverer::new(controller, seed.rotate_left(17)),
            poll,
            servers: HashMap::new(),
            pools: Vec::new(),
            round: 0,
            next_sync_ms: 0,
            next_wake_ms: u64::MAX,
            last_local_warn_ms: 0,
            rng: Rng::new(seed | 1),
        }
    }

    fn run(mut self) {
        let mut events = Events::with_capacity(256);
        while self.shared.phase() != Phase::Stopping {
            let now = self.shared.clock.now_ms();
            let wait = self
                .next_wake_ms
                .min(self.next_sync_ms)
                .min(self.discovery.next_wake())
                .saturating_sub(now);
            if let Err(e) = self
                .poll
                .poll(&mut events, Some(Duration::from_millis(wait)))
            {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::error!("health checker stopped: cannot wait for events: {e}");
                return;
            }
            let now = self.shared.clock.now_ms();
            for event in &events {
                self.on_event(event, now);
            }
            if now >= self.next_sync_ms {
                self.sync(now);
                self.next_sync_ms = now + SYNC_MS;
            }
            if now >= self.next_wake_ms {
                self.tick(now);
            }
            if now >= self.discovery.next_wake() {
                self.discovery.tick(self.poll.registry(), now);
            }
        }
    }

    fn on_event(&mut self, event: &mio::event::Event, now_ms: u64) {
        if Discoverer::owns(event.token()) {
            self.discovery
                .on_event(event.token(), self.poll.registry(), now_ms);
            return;
        }
        let Some(w) = self.servers.get_mut(&event.token().0) else {
            return;
        };
        let Some(outcome) = w.probe.as_mut().and_then(|p| p.advance(event)) else {
            return;
        };
        w.conclude(outcome, now_ms);
        self.next_wake_ms = self.next_wake_ms.min(w.due_ms);
    }

    /// Brings the watch list in line with the pools: new servers and changed checks start afresh,
    /// servers no longer in a checked pool are forgotten (their probe's socket closes).
    fn sync(&mut self, now_ms: u64) {
        // The listeners' pools, then the named pools routes send requests to.
        let pools: Vec<Arc<Pool>> = self
            .shared
            .listeners
            .load()
            .iter()
            .map(|l| l.load_pool_full())
            .chain(self.shared.pools.load().iter().cloned())
            .collect();
        let same = pools.len() == self.pools.len()
            && pools
                .iter()
                .zip(&self.pools)
                .all(|(a, b)| Arc::ptr_eq(a, b));
        if same {
            return;
        }
        let listeners = self.shared.listeners.load();
        let named = self.shared.pools.load();
        let followed = listeners
            .iter()
            .filter_map(|l| {
                let d = l.load_pool().discovery.clone()?;
                Some((l.name.clone(), false, d))
            })
            .chain(
                named
                    .iter()
                    .filter_map(|p| Some((p.name.clone(), true, p.discovery.clone()?))),
            );
        self.discovery.sync(followed, self.poll.registry(), now_ms);
        self.round += 1;
        for pool in &pools {
            let Some(check) = &pool.health else {
                continue;
            };
            // A server name is resolved per session on the resolver threads; the checker never
            // resolves (it must not block), so such servers are not checked.
            let checkable = pool
                .servers
                .iter()
                .filter(|s| !matches!(s.addr(), BackendAddr::Name { .. }));
            for server in checkable {
                let rand = self.next_rand();
                self.watch(server, pool, check, now_ms, rand);
            }
        }
        let round = self.round;
        self.servers.retain(|_, w| w.seen == round);
        self.pools = pools;
        // New servers and restarted checks may be due before the current wake-up time.
        self.next_wake_ms = now_ms;
    }

    fn watch(
        &mut self,
        server: &Arc<Server>,
        pool: &Pool,
        check: &HealthCheck,
        now_ms: u64,
        rand: u64,
    ) {
        match self.servers.entry(key(server)) {
            Entry::Occupied(mut e) => {
                let w = e.get_mut();
                w.seen = self.round;
                if w.check != *check {
                    w.restart(check, now_ms, rand);
                }
                if w.pool != pool.name {
                    w.pool = pool.name.clone();
                }
                w.tls = pool.server_tls.clone();
                w.how = probe::Leave::of(&pool.tuning);
            }
            Entry::Vacant(e) => {
                // A server that starts down (added to a running pool) is checked at once: it
                // takes no client until it passes.
                let first = if server.health() == Health::Down {
                    now_ms
                } else {
                    now_ms + jitter(check, rand)
                };
                e.insert(Watched {
                    server: server.clone(),
                    pool: pool.name.clone(),
                    check: check.clone(),
                    tls: pool.server_tls.clone(),
                    how: probe::Leave::of(&pool.tuning),
                    streak: Streak::default(),
                    due_ms: first,
                    probe: None,
                    seen: self.round,
                });
            }
        }
    }

    /// Fails probes past their deadline, starts the probes that are due, and finds the next time
    /// there is something to do.
    fn tick(&mut self, now_ms: u64) {
        let registry = self.poll.registry();
        let mut next = u64::MAX;
        let mut local: Option<io::Error> = None;
        for (&token, w) in &mut self.servers {
            if let Some(p) = &w.probe {
                if now_ms >= p.deadline_ms {
                    let why = p.timeout_reason(millis(w.check.timeout));
                    w.conclude(Outcome::Fail(why), now_ms);
                }
            }
            if w.probe.is_none() && now_ms >= w.due_ms {
                if let Err(e) = start(w, registry, Token(token), now_ms) {
                    local = Some(e);
                }
            }
            next = next.min(w.probe.as_ref().map_or(w.due_ms, |p| p.deadline_ms));
        }
        self.next_wake_ms = next;
        if let Some(e) = local {
            self.warn_local(&e, now_ms);
        }
    }

    /// Warns that probes cannot start for lack of local resources, at most every
    /// [`LOCAL_WARN_MS`].
    fn warn_local(&mut self, e: &io::Error, now_ms: u64) {
        if self.last_local_warn_ms == 0 || now_ms >= self.last_local_warn_ms + LOCAL_WARN_MS {
            self.last_local_warn_ms = now_ms;
            tracing::warn!("health checks skipped: {e} (local resources)");
        }
    }

    fn next_rand(&mut self) -> u64 {
        self.rng.next_u64()
    }
}

/// Starts a probe of `w`'s server. A server that fails at once is judged at once; a local
/// shortage skips this round without judging the server (Err).
fn start(w: &mut Watched, registry: &Registry, token: Token, now_ms: u64) -> io::Result<()> {
    match Probe::start(
        w.server.addr(),
        &w.check,
        w.tls.as_deref(),
        w.how,
        registry,
        token,
        now_ms,
    ) {
        Ok(p) => {
            w.probe = Some(p);
            Ok(())
        }
        Err(StartError::Server(outcome)) => {
            w.conclude(outcome, now_ms);
            Ok(())
        }
        Err(StartError::Local(e)) => {
            w.due_ms = now_ms.saturating_add(millis(w.check.interval));
            Err(e)
        }
    }
}
