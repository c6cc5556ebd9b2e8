//! A worker: one thread, one epoll instance, its own sessions, buffers and timers. Workers share
//! only the listening sockets (exclusive wake-ups: one worker takes each connection), the pools'
//! atomics, the counters and the pools of idle HTTP server connections (a short lock per
//! checkout and checkin, uncontended unless another worker is taking one: `state::idle`); the
//! data path takes no other lock.

use std::collections::VecDeque;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use mio::event::Event;
use mio::{Events, Poll, Token};

use super::panics;
use super::resolver::{self, Resolver};
use super::timers::{Armed, Timer, Timers};
use super::PIPES_PER_WORKER;
use crate::log::HttpEntry;
use crate::log::{AccessLog, Entry, LogPlan};
use crate::metrics::{Counters, End};
use crate::net::{ClientAddr, Stream};
use crate::proxy::copy::Pools;
use crate::proxy::{Ctx, Session, Side, Step, NEVER};
use crate::state::idle::{Owner, ServerConns};
use crate::state::permit::SessionPermit;
use crate::state::shared::{Listener, Phase, Report, Request, Shared, SourceSlot};
use crate::sys;
use crate::udp::UdpWorker;

/// What the worker lends its UDP flows for one call (a macro: the fields borrowed apart).
macro_rules! udp_cx {
    ($w:ident, $now:expr) => {
        crate::udp::Cx {
            registry: $w.poll.registry(),
            now: $now,
            rand: {
                $w.rng ^= $w.rng << 13;
                $w.rng ^= $w.rng >> 7;
                $w.rng ^= $w.rng << 17;
                $w.rng
            },
            counters: &$w.shared.counters[$w.id],
            shared: &$w.shared,
            // A flow writes to its listener's file (found by the name of its pool snapshot).
            logs: &mut $w.logs,
            log_plan: &$w.log_plan,
        }
    };
}

/// Token of the waker that tells a worker to look at the shared phase.
pub(crate) const WAKER: Token = Token(usize::MAX);
/// Listener with id `i` is registered with token `LISTENER_BASE + i`.
const LISTENER_BASE: usize = 1 << 60;
const GEN_BITS: u32 = 24;
const GEN_MASK: u32 = (1 << GEN_BITS) - 1;
const CLIENT: usize = 0;
const BACKEND: usize = 1;
/// How often the drain deadline is checked while draining.
const SWEEP_MS: u64 = 250;
/// A worker hands an accepted client to the least loaded worker when it holds more than this
/// many sessions beyond that one's, plus an eighth of its own (so that steady traffic, whose
/// counts move by a few, keeps its clients where they were accepted).
const SPREAD_SLACK: u64 = 2;
/// How long a listener rests after the process ran out of descriptors.
const EMFILE_PAUSE_MS: u64 = 100;
/// Running out of descriptors is said at most this often per worker (then at debug level).
const EMFILE_WARN_MS: u64 = 10_000;
/// Free copy buffers a worker keeps for the next burst (16 KiB each).
const BUFFERS_PER_WORKER: usize = 64;
/// Recently accepted clients a worker remembers for `recent`.
const RECENT: usize = 256;

fn token(idx: usize, gen: u32, side: usize) -> Token {
    Token(((gen as usize) << 32) | (idx << 1) | side)
}

fn decode(t: Token) -> (usize, u32, usize) {
    ((t.0 & 0xffff_ffff) >> 1, (t.0 >> 32) as u32, t.0 & 1)
}

struct Slot {
    gen: u32,
    session: Option<Session>,
    /// The session's place under `-x` (`Shared::active`): Some exactly while `session` is.
    permit: Option<SessionPermit>,
    /// The session counted against its client address (`max_per_source`).
    source: Option<SourceSlot>,
    /// The session's live timer.
    timer: Armed,
    /// The session's listener (its `Listener::id`) and the index of its access log file in the
    /// worker's `logs` (None: not logged).
    listener: u64,
    log: Option<u32>,
}

impl Slot {
    /// Whether `t` is this slot's session's live timer.
    fn holds(&self, t: &Timer) -> bool {
        self.gen == t.gen && self.timer.holds(t) && self.session.is_some()
    }
}

/// A listener as one worker sees it.
struct WorkerListener {
    listener: Arc<Listener>,
    /// Paused (deregistered) until this time after EMFILE; 0 = active.
    paused_until: u64,
}

pub(crate) struct Worker {
    id: usize,
    poll: Poll,
    shared: Arc<Shared>,
    listeners: Vec<WorkerListener>,
    /// Address of the shared listener list this worker last registered (compared, never used).
    listeners_seen: usize,
    slots: Vec<Slot>,
    free: Vec<u32>,
    live: usize,
    pools: Pools,
    /// Server connections of HTTP sessions, busy and idle.
    conns: ServerConns,
    /// Session deadlines, earliest first.
    timers: Timers,
    /// A handle on each access log file of `log_plan` (None: it could not be opened), in its
    /// order, and the log generation they were opened for.
    logs: Vec<Option<AccessLog>>,
    log_plan: LogPlan,
    log_generation: u64,
    rng: u64,
    draining: bool,
    /// While draining, the end of the drain grace (clock ms; `NEVER` before).
    grace_end: u64,
    next_sweep: u64,
    /// Sessions (index, generation) to drive again next turn, and the list being driven now.
    again: Vec<(u32, u32)>,
    again_now: Vec<(u32, u32)>,
    /// The waker fired: look at the inbox, the listeners and the log.
    woken: bool,
    next_session: u64,
    recent: VecDeque<(IpAddr, u64)>,
    /// When running out of descriptors was last said at warn level (clock ms).
    emfile_warned_ms: Option<u64>,
    /// Resolves server names (socket-proxyd's form); None when no pool has one.
    resolver: Option<Arc<Resolver>>,
    /// The resolver's answers being handled (kept to reuse its allocation).
    answers: Vec<resolver::Answer>,
    /// UDP listeners and their flows on this worker.
    udp: UdpWorker,
}

impl Worker {
    /// A worker on `poll` (its waker already registered with `WAKER`).
    /// `logs` are the access log files of the shared log plan, in its order, opened before
    /// privileges were dropped.
    pub(crate) fn new(
        id: usize,
        poll: Poll,
        shared: Arc<Shared>,
        logs: Vec<std::fs::File>,
        resolver: Option<Arc<Resolver>>,
    ) -> io::Result<Worker> {
        let log_generation = shared.log_generation.load(Ordering::Relaxed);
        let log_plan = shared
            .access_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut files = logs.into_iter();
        let logs = log_plan
            .files
            .iter()
            .map(|(_, format)| files.next().map(|f| AccessLog::new(f, *format)))
            .collect();
        let conns = ServerConns::new(shared.idle.clone(), id, poll.registry())?;
        let mut w = Worker {
            id,
            poll,
            listeners: Vec::new(),
            listeners_seen: 0,
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            pools: Pools::new(BUFFERS_PER_WORKER, PIPES_PER_WORKER, shared.splice),
            conns,
            timers: Timers::default(),
            logs,
            log_plan,
            log_generation,
            rng: 0x9e37_79b9_7f4a_7c15 ^ ((id as u64 + 1) << 17) ^ crate::clock::unix_time(),
            draining: false,
            grace_end: NEVER,
            next_sweep: 0,
            again: Vec::new(),
            again_now: Vec::new(),
            woken: false,
            next_session: 0,
            recent: VecDeque::with_capacity(RECENT),
            emfile_warned_ms: None,
            resolver,
            answers: Vec::new(),
            udp: UdpWorker::new(id, shared.counters.len()),
            shared,
        };
        w.sync_listeners()?;
        Ok(w)
    }

    fn counters(&self) -> &Counters {
        &self.shared.counters[self.id]
    }

    /// Sessions open, for the other workers' `spread` (a store on this worker's own line).
    fn publish_load(&self) {
        self.shared.loads[self.id]
            .live
            .store(self.live as u64, Ordering::Relaxed);
    }

    fn register_listener(&self, i: usize) -> io::Result<()> {
        let l = &self.listeners[i].listener;
        sys::epoll_add_exclusive(
            self.poll.as_raw_fd(),
            l.socket.as_fd(),
            (LISTENER_BASE + l.id as usize) as u64,
        )
    }

    fn deregister_listener(&self, i: usize) {
        let _ = sys::epoll_del(
            self.poll.as_raw_fd(),
            self.listeners[i].listener.socket.as_fd(),
        );
    }

    /// Registers listeners that appeared in the shared list and lets go of those that left it.
    /// Sessions of a removed listener carry on: they hold their pool, not the listener.
    fn sync_listeners(&mut self) -> io::Result<()> {
        let current = self.shared.listeners.load_full();
        let seen = Arc::as_ptr(&current) as usize;
        if seen == self.listeners_seen || self.draining {
            return Ok(());
        }
        self.listeners_seen = seen;
        self.udp.sync(&current, self.poll.as_raw_fd());
        let mut i = 0;
        while i < self.listeners.len() {
            let id = self.listeners[i].listener.id;
            if current.iter().any(|l| l.id == id) {
                i += 1;
                continue;
            }
            if self.listeners[i].paused_until == 0 {
                self.deregister_listener(i);
            }
            self.listeners.swap_remove(i);
        }
        for l in current.iter() {
            if self.listeners.iter().any(|w| w.listener.id == l.id) || l.socket.udp().is_some() {
                continue;
            }
            self.listeners.push(WorkerListener {
                listener: l.clone(),
                paused_until: 0,
            });
            self.register_listener(self.listeners.len() - 1)?;
        }
        Ok(())
    }

    /// Runs the event loop until the worker has drained or is told to stop, then closes its inbox
    /// (requests left there are dropped, so whoever waits for them hears at once).
    pub(crate) fn run(mut self) {
        self.event_loop();
        self.shared.heartbeats[self.id].store(u64::MAX, Ordering::Relaxed);
        let left = self.shared.inboxes[self.id]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(left);
    }

    fn event_loop(&mut self) {
        let mut events = Events::with_capacity(1024);
        loop {
            // Server connection counts for the metrics, published once per turn before the
            // worker waits (stores on its own cache line, none when nothing moved).
            self.counters().publish_server_conns(self.conns.counts());
            let now = self.shared.clock.now_ms();
            let timeout = self
                .next_wakeup(now)
                .map(|at| Duration::from_millis(at.saturating_sub(now)));
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!("worker {}: epoll failed: {e}", self.id);
                    self.close_all(End::Error, self.shared.clock.now_ms());
                    return;
                }
            }
            let now = self.shared.clock.now_ms();
            // A drain begun while this worker slept is taken up before the turn's events, so
            // a response that arrives in the same turn as the wake-up already says close.
            if !self.draining && matches!(self.shared.phase(), Phase::Draining) {
                self.start_drain(now);
            }
            for ev in events.iter() {
                self.dispatch(ev, now);
            }
            self.drive_again(now);
            {
                let mut cx = udp_cx!(self, now);
                if self.udp.has_again() {
                    self.udp.drive_again(&mut cx);
                }
                // The turn's replies to UDP clients leave together (one sendmmsg).
                self.udp.flush(&mut cx);
            }
            self.expire(now);
            {
                let mut cx = udp_cx!(self, now);
                self.udp.expire(&mut cx);
            }
            self.conns.expire(now);
            self.pools.after_turn(now);
            if self.draining && now >= self.next_sweep {
                self.next_sweep = now + SWEEP_MS;
                self.sweep(now);
            }
            let stop = self.follow_phase(now);
            for log in self.logs.iter_mut().flatten() {
                log.flush();
            }
            if stop {
                return;
            }
        }
    }

    fn next_wakeup(&self, now: u64) -> Option<u64> {
        if !self.again.is_empty() || self.udp.has_again() {
            return Some(now);
        }
        let timers = self.timers.next().into_iter();
        let pauses = self
            .listeners
            .iter()
            .map(|l| l.paused_until)
            .filter(|&p| p > 0);
        let sweep = if self.draining {
            Some(self.next_sweep.max(now))
        } else {
            None
        };
        let idle = self.conns.next_expiry();
        let trim = self.pools.trim_due();
        let flows = self.udp.next_expiry();
        timers
            .chain(flows)
            .chain(pauses)
            .chain(sweep)
            .chain(idle)
            .chain(trim)
            .min()
    }

    fn dispatch(&mut self, ev: &Event, now: u64) {
        let t = ev.token();
        if t == WAKER {
            self.woken = true;
            return;
        }
        if crate::udp::is_udp_token(t) {
            let mut cx = udp_cx!(self, now);
            self.udp.on_event(t, &mut cx);
            return;
        }
        if t.0 >= LISTENER_BASE {
            let id = (t.0 - LISTENER_BASE) as u64;
            if let Some(i) = self.listeners.iter().position(|l| l.listener.id == id) {
                self.accept(i, now);
            }
            return;
        }
        let t = if ServerConns::is_conn_token(t) {
            // A server connection of an HTTP session, or an idle one.
            match self.conns.owner(ev) {
                Owner::Session(owner) => Token(owner.0 | BACKEND),
                Owner::Nobody => return,
            }
        } else {
            t
        };
        let (idx, gen, side) = decode(t);
        let side = if side == CLIENT {
            Side::Client
        } else {
            Side::Server
        };
        self.call(idx, gen, now, |s, cx| s.on_ready(side, ev, cx));
    }

    /// Calls session `idx` (if it is still generation `gen`) and does what it asks; a panic in
    /// the call resets that session alone (see `runtime::panics`).
    fn call(
        &mut self,
        idx: usize,
        gen: u32,
        now: u64,
        f: impl FnOnce(&mut Session, &mut Ctx) -> Step,
    ) {
        let outcome = {
            let Some((s, mut cx)) = self.session(idx, gen, now) else {
                return;
            };
            panics::contain(|| f(s, &mut cx))
        };
        match outcome {
            Ok(step) => self.follow(idx, step, now),
            Err(panic) => self.reset_panicked(idx, &panic, now),
        }
    }

    /// Session `idx` panicked: it is logged and counted, and closed as [`End::Panic`] (client
    /// and server connections reset, buffers and lease given back, its server connection
    /// closed, never returned to the idle pool); the worker and its other sessions go on.
    fn reset_panicked(&mut self, idx: usize, panic: &str, now: u64) {
        let id = self.slots[idx].session.as_ref().map_or(0, Session::id);
        tracing::error!(
            "worker {}: session {id} panicked; it is reset and every other session goes on: {panic}",
            self.id
        );
        self.close(idx, End::Panic, now);
    }

    /// Session `idx` if it is still generation `gen`, and what it may use for one call.
    fn session(&mut self, idx: usize, gen: u32, now: u64) -> Option<(&mut Session, Ctx<'_>)> {
        let slot = self.slots.get_mut(idx)?;
        if slot.gen != gen {
            return None;
        }
        let s = slot.session.as_mut()?;
        let log = match slot.log {
            Some(i) => self.logs.get_mut(i as usize).and_then(Option::as_mut),
            None => None,
        };
        let cx = Ctx {
            registry: self.poll.registry(),
            client_token: token(idx, gen, CLIENT),
            server_token: token(idx, gen, BACKEND),
            now,
            rng: &mut self.rng,
            counters: &self.shared.counters[self.id],
            pools: &mut self.pools,
            conns: &mut self.conns,
            log,
            draining: self.draining,
            grace_end: self.grace_end,
            rates: self.shared.rates(),
        };
        Some((s, cx))
    }

    /// Does what a session asked for.
    fn follow(&mut self, idx: usize, step: Step, now: u64) {
        match step {
            Step::Wait(deadline) => {
                self.arm(idx, deadline, false, now);
            }
            Step::Resolve(server, deadline) => {
                let seq = self.arm(idx, deadline, true, now);
                let key = resolver::Key {
                    idx: idx as u32,
                    gen: self.slots[idx].gen,
                    seq,
                };
                match &self.resolver {
                    Some(r) => r.ask(self.id, key, server),
                    None => {
                        tracing::warn!("no resolver for a server name; closing the session");
                        self.close(idx, End::NoServer, now);
                    }
                }
            }
            Step::Again => self.again.push((idx as u32, self.slots[idx].gen)),
            Step::Close(end) => self.close(idx, end, now),
            Step::Admit(addr) => self.admit_proxied(idx, addr, now),
        }
    }

    /// A trusted client's PROXY header was read: its slot is freed without an end (it is the
    /// same client) and it is admitted as a client from `addr`.
    fn admit_proxied(&mut self, idx: usize, addr: ClientAddr, now: u64) {
        let Some((mut s, permit)) = self.free_slot(idx) else {
            return;
        };
        // Its place under `-x` is given back and taken again by `admit`, as for a new client.
        drop(permit);
        if let Some((listener, stream)) = s.take_proxied() {
            self.admit(&listener, stream, addr, now);
        }
    }

    /// Makes sure a timer fires at `deadline` or before for session `idx` (see [`Timers::arm`]).
    fn arm(&mut self, idx: usize, deadline: u64, force: bool, now: u64) -> u32 {
        let slot = &mut self.slots[idx];
        self.timers
            .arm(&mut slot.timer, idx as u32, slot.gen, deadline, force, now)
    }

    /// Drives the sessions that yielded on their budget, after this turn's events.
    fn drive_again(&mut self, now: u64) {
        let mut again = std::mem::take(&mut self.again_now);
        std::mem::swap(&mut again, &mut self.again);
        for &(idx, gen) in &again {
            self.call(idx as usize, gen, now, |s, cx| s.resume(cx));
        }
        again.clear();
        self.again_now = again;
    }

    // === accept ===

    fn accept(&mut self, li: usize, now: u64) {
        let listener = self.listeners[li].listener.clone();
        for _ in 0..self.shared.accept_batch {
            match listener.socket.accept() {
                Ok((stream, peer)) => {
                    if let Some((stream, peer)) = self.spread(&listener, stream, peer) {
                        self.open(&listener, stream, peer, now);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                    ) =>
                {
                    Counters::add(&self.counters().accept_errors, 1);
                    if self
                        .emfile_warned_ms
                        .is_none_or(|t| now.saturating_sub(t) >= EMFILE_WARN_MS)
                    {
                        self.emfile_warned_ms = Some(now);
                        tracing::warn!(
                            "accept: {e}; pausing the listener for {EMFILE_PAUSE_MS} ms (said at most every {} s)",
                            EMFILE_WARN_MS / 1000
                        );
                    } else {
                        tracing::debug!(
                            "accept: {e}; pausing the listener for {EMFILE_PAUSE_MS} ms"
                        );
                    }
                    self.deregister_listener(li);
                    self.listeners[li].paused_until = now + EMFILE_PAUSE_MS;
                    return;
                }
                Err(e) => {
                    // ECONNABORTED and friends concern one client only.
                    Counters::add(&self.counters().accept_errors, 1);
                    tracing::debug!("accept: {e}");
                }
            }
        }
    }

    /// Keeps an accepted client (gives it back) or hands it to the least loaded worker when this
    /// one is clearly busier (`SPREAD_SLACK`). The kernel wakes the first waiting worker for a
    /// burst of connects and that worker takes the whole queue, so without this one worker could
    /// hold every connection of a burst (measured: all 50 of `wrk -c50`'s, the other worker
    /// idle). The other worker opens it from its inbox (`Request::Adopt`) as if it had accepted
    /// it; a wake-up is sent only when its inbox was empty.
    fn spread(
        &mut self,
        listener: &Arc<Listener>,
        stream: Stream,
        peer: ClientAddr,
    ) -> Option<(Stream, ClientAddr)> {
        let loads = &self.shared.loads;
        if loads.len() < 2 || self.draining {
            return Some((stream, peer));
        }
        let mine = loads[self.id].get();
        let least = loads
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != self.id)
            .map(|(i, l)| (l.get(), i))
            .min();
        let Some((theirs, target)) = least else {
            return Some((stream, peer));
        };
        if mine <= theirs + SPREAD_SLACK + mine / 8 {
            return Some((stream, peer));
        }
        let Some(waker) = self.shared.wakers.get().and_then(|w| w.get(target)) else {
            return Some((stream, peer));
        };
        let was_empty = {
            let mut inbox = self.shared.inboxes[target]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let Some(queue) = inbox.as_mut() else {
                // That worker has stopped.
                return Some((stream, peer));
            };
            loads[target].pending.fetch_add(1, Ordering::Relaxed);
            queue.push(Request::Adopt(listener.clone(), stream, peer));
            queue.len() == 1
        };
        if was_empty {
            if let Err(e) = waker.wake() {
                tracing::warn!("worker {}: cannot wake worker {target}: {e}", self.id);
            }
        }
        None
    }

    fn open(&mut self, listener: &Arc<Listener>, stream: Stream, peer: ClientAddr, now: u64) {
        Counters::add(&self.counters().accepted, 1);
        let pool = listener.pool.load();
        if pool.accept_proxy.is_empty() {
            return self.admit(listener, stream, peer, now);
        }
        let http = pool.http.is_some();
        let trusted = peer
            .ip()
            .is_some_and(|ip| pool.accept_proxy.iter().any(|n| n.contains(ip)));
        drop(pool);
        if !trusted {
            // Not one of the listener's upstream proxies: closed at accept.
            return self.refuse(&peer, End::ProxyUntrusted, http, listener);
        }
        let Some(permit) = self.permit_or_refuse(&peer, http, listener) else {
            return;
        };
        let id = self.next_id();
        let session = Session::proxy_header(listener.clone(), id, stream, peer, now);
        self.install(session, permit, None, listener, now);
    }

    /// The next session id: unique in the process (worker number in the low part).
    fn next_id(&mut self) -> u64 {
        let id = self.next_session * self.shared.counters.len() as u64 + self.id as u64;
        self.next_session += 1;
        id
    }

    /// Puts a new session of `listener` (and its permit) in a free slot and starts it.
    fn install(
        &mut self,
        session: Session,
        permit: SessionPermit,
        source: Option<SourceSlot>,
        listener: &Listener,
        now: u64,
    ) {
        let idx = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                self.slots.push(Slot {
                    gen: 0,
                    session: None,
                    permit: None,
                    source: None,
                    timer: Armed::default(),
                    listener: 0,
                    log: None,
                });
                self.slots.len() - 1
            }
        };
        self.slots[idx].permit = Some(permit);
        self.slots[idx].source = source;
        self.slots[idx].listener = listener.id;
        self.slots[idx].log = self.log_plan.file_of(&listener.name);
        self.live += 1;
        self.publish_load();
        let gen = self.slots[idx].gen;
        self.slots[idx].session = Some(session);
        self.call(idx, gen, now, |s, cx| s.start(cx));
    }

    /// Admits a client from `peer` (its own address, or the one its PROXY header carried):
    /// `-x`, `client_acl`, `max_per_source`, then the session its listener calls for.
    fn admit(&mut self, listener: &Arc<Listener>, stream: Stream, peer: ClientAddr, now: u64) {
        let pool = listener.pool.load_full();
        let http = pool.http.is_some();
        if let Some(ip) = peer.ip() {
            if self.recent.len() == RECENT {
                self.recent.pop_front();
            }
            self.recent.push_back((ip, now));
        }
        let Some(permit) = self.permit_or_refuse(&peer, http, listener) else {
            return;
        };
        let denied = !pool.admits(peer.ip());
        if denied && pool.abuse.is_none() {
            drop(permit);
            return self.refuse(&peer, End::Denied, http, listener);
        }
        let limit = pool.tuning.max_per_source;
        let source = match peer.ip() {
            Some(ip) if limit > 0 => {
                let slot = self.shared.sources().admit(listener.id, ip, limit);
                if slot.is_none() {
                    // Over its address's share: closed at once, as over `-x`.
                    drop(permit);
                    return self.refuse(&peer, End::Refused, http, listener);
                }
                slot
            }
            _ => None,
        };
        let id = self.next_id();
        if let Some(tls) = pool.tls.as_ref().filter(|_| !denied) {
            self.make_room_for_handshake(tls, peer.ip(), now);
        }
        let session = if pool.tls.is_some() && !denied {
            match Session::tls(listener.clone(), pool, id, stream, peer, now) {
                Ok(s) => s,
                Err(_closed) => {
                    // Over `max_handshakes` in progress on this worker: closed at once.
                    crate::proxy::handshake::overloaded(self.counters());
                    drop(source);
                    drop(permit);
                    return self.refuse(&peer, End::Refused, http, listener);
                }
            }
        } else if pool.http.is_some() && !denied {
            Session::http(listener.clone(), id, stream, peer, now)
        } else if pool.routes.is_some() && !denied {
            // A TCP listener's routes pick the pool by the TLS ClientHello's server name.
            Session::peek(pool, id, stream, peer, now)
        } else {
            Session::tcp(pool, id, stream, peer, denied, now)
        };
        self.install(session, permit, source, listener, now);
    }

    /// Closes the least recently active TLS handshakes (counted as evicted) while a new one from
    /// `ip` would be over the worker's or that address's bound.
    fn make_room_for_handshake(
        &mut self,
        tls: &crate::tls::ServerTls,
        ip: Option<IpAddr>,
        now: u64,
    ) {
        use crate::proxy::handshake;
        for _ in 0..4 {
            let max = (tls.max_handshakes, tls.max_handshakes_per_source);
            let Some(victim) = handshake::to_evict(max.0, max.1, ip) else {
                return;
            };
            let (idx, gen, _) = decode(victim);
            let held = self
                .slots
                .get(idx)
                .is_some_and(|s| s.gen == gen && s.session.is_some());
            if held {
                handshake::evicted(self.counters());
                self.close(idx, End::TlsTimeout, now);
            }
            handshake::forget(victim);
        }
    }

    /// Hands the resolver's answers to the sessions still waiting for them.
    fn take_resolved(&mut self, now: u64) {
        let Some(resolver) = self.resolver.clone() else {
            return;
        };
        let mut answers = std::mem::take(&mut self.answers);
        resolver.take_answers(self.id, &mut answers);
        for answer in answers.drain(..) {
            let resolver::Key { idx, gen, seq } = answer.key;
            let idx = idx as usize;
            if self
                .slots
                .get(idx)
                .is_none_or(|slot| slot.timer.seq() != seq)
            {
                // The attempt moved on (timed out, session closed, slot reused).
                continue;
            }
            self.call(idx, gen, now, |s, cx| s.on_resolved(answer.result, cx));
        }
        self.answers = answers;
    }

    /// Calls the sessions whose deadline came.
    fn expire(&mut self, now: u64) {
        loop {
            let slots = &self.slots;
            let due = self.timers.pop_due(now, |t| {
                slots.get(t.idx as usize).is_some_and(|slot| slot.holds(t))
            });
            let Some(t) = due else { break };
            let idx = t.idx as usize;
            self.slots[idx].timer.clear();
            self.call(idx, t.gen, now, |s, cx| s.on_deadline(cx));
        }
        let slots = &self.slots;
        self.timers.sweep_stale(self.live, |t| {
            slots.get(t.idx as usize).is_some_and(|slot| slot.holds(t))
        });
    }

    // === timeouts, drain, close ===

    /// Cuts every session once the drain deadline has passed.
    fn sweep(&mut self, now: u64) {
        let hard_deadline = match self.shared.phase() {
            Phase::Draining => Some(self.shared.drain_deadline_ms.load(Ordering::Relaxed)),
            _ => None,
        };
        if hard_deadline.is_some_and(|d| now >= d) {
            self.close_all(End::Shutdown, now);
        }
    }

    /// Applies the shared phase (drain, stop), and, after a wake-up, log reopening, listener
    /// changes and the control thread's requests. Returns true when the worker ends.
    fn follow_phase(&mut self, now: u64) -> bool {
        if std::mem::take(&mut self.woken) {
            self.shared.heartbeats[self.id].store(now, Ordering::Relaxed);
            self.follow_log();
            if let Err(e) = self.sync_listeners() {
                tracing::warn!("worker {}: cannot register a listener: {e}", self.id);
            }
            self.answer(now);
            self.take_resolved(now);
        }
        for i in 0..self.listeners.len() {
            let p = self.listeners[i].paused_until;
            if p > 0 && p <= now && !self.draining {
                self.listeners[i].paused_until = 0;
                if let Err(e) = self.register_listener(i) {
                    tracing::warn!("cannot resume listener: {e}");
                }
            }
        }
        match self.shared.phase() {
            Phase::Running => false,
            Phase::Draining => {
                if !self.draining {
                    self.start_drain(now);
                }
                self.live == 0 && self.udp.flows() == 0 && self.close_inbox()
            }
            Phase::Stopping => {
                self.close_all(End::Shutdown, now);
                true
            }
        }
    }

    /// Reopens every access log file after the log generation moved on (SIGUSR2, `reopen`, a
    /// reload), opening the files of a new plan and closing those it no longer names; open
    /// sessions then write to their listener's file in the new plan (a session of a listener
    /// the change removed keeps its file if the plan still has it with the same format).
    fn follow_log(&mut self) {
        let generation = self.shared.log_generation.load(Ordering::Relaxed);
        if generation == self.log_generation {
            return;
        }
        self.log_generation = generation;
        let plan = self
            .shared
            .access_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for log in self.logs.iter_mut().flatten() {
            log.flush();
        }
        self.logs = plan
            .files
            .iter()
            .map(|(path, format)| match AccessLog::open(path, *format) {
                Ok(log) => Some(log),
                Err(e) => {
                    tracing::warn!("cannot open access log {}: {e}", path.display());
                    None
                }
            })
            .collect();
        if plan != self.log_plan {
            let listeners = self.shared.listeners.load();
            let by_id: std::collections::HashMap<u64, Option<u32>> = listeners
                .iter()
                .map(|l| (l.id, plan.file_of(&l.name)))
                .collect();
            let old = &self.log_plan;
            for slot in self.slots.iter_mut().filter(|s| s.session.is_some()) {
                slot.log = match by_id.get(&slot.listener) {
                    Some(&log) => log,
                    None => slot
                        .log
                        .and_then(|i| old.files.get(i as usize))
                        .and_then(|f| plan.files.iter().position(|g| g == f))
                        .map(|i| i as u32),
                };
            }
            self.log_plan = plan;
        }
    }

    /// Closes the inbox unless a client handed over waits in it (then the worker stays to open
    /// it: it was woken for it). Under the inbox's lock, so no client is handed over after this
    /// looked.
    fn close_inbox(&self) -> bool {
        let mut inbox = self.shared.inboxes[self.id]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if inbox
            .as_ref()
            .is_some_and(|q| q.iter().any(|r| matches!(r, Request::Adopt(..))))
        {
            return false;
        }
        drop(inbox.take());
        true
    }

    /// Answers the control thread, and opens the clients other workers handed over.
    fn answer(&mut self, now: u64) {
        let requests = self.shared.inboxes[self.id]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        for r in requests {
            match r {
                Request::Report(reply) => {
                    let mut sessions: Vec<_> = self
                        .slots
                        .iter()
                        .filter_map(|slot| slot.session.as_ref())
                        .map(|s| s.info(now))
                        .collect();
                    self.udp.report(now, &mut sessions);
                    // Clock milliseconds to Unix seconds (the clock started with the process).
                    let started = self.shared.started_unix;
                    let recent = self
                        .recent
                        .iter()
                        .map(|&(ip, ms)| (ip, started + ms / 1000))
                        .collect();
                    let _ = reply.send(Report { sessions, recent });
                }
                Request::Close(id, reply) => {
                    let found = self
                        .slots
                        .iter()
                        .position(|slot| slot.session.as_ref().is_some_and(|s| s.id() == id));
                    if let Some(idx) = found {
                        self.close(idx, End::Closed, now);
                    }
                    let flow = found.is_none() && {
                        let mut cx = udp_cx!(self, now);
                        self.udp.close_id(id, &mut cx)
                    };
                    let _ = reply.send(found.is_some() || flow);
                }
                Request::Adopt(listener, stream, peer) => {
                    self.shared.loads[self.id]
                        .pending
                        .fetch_sub(1, Ordering::Relaxed);
                    self.open(&listener, stream, peer, now);
                }
            }
        }
    }

    fn start_drain(&mut self, now: u64) {
        self.draining = true;
        self.udp.start_drain(self.poll.as_raw_fd());
        for i in 0..self.listeners.len() {
            if self.listeners[i].paused_until == 0 {
                self.deregister_listener(i);
            }
            // Off the wait queue first, then take what is queued: a client that arrives after
            // this wakes another process sharing the socket (takeover) instead of waiting for us.
            for _ in 0..64 {
                let before = self.counters().accepted.load(Ordering::Relaxed);
                self.accept(i, now);
                if self.counters().accepted.load(Ordering::Relaxed) - before
                    < u64::from(self.shared.accept_batch)
                {
                    break;
                }
            }
        }
        if self.shared.drain_pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Every worker has taken what was queued: the listening sockets close now, not when
            // their last session ends, so a client that connects during the drain is refused
            // at once instead of being queued for nobody and reset at exit. A process that took
            // the sockets over (or systemd) holds its own reference, and goes on accepting.
            for l in &self.listeners {
                l.listener.socket.close_stream_socket();
            }
        }
        self.listeners.clear();
        // Idle HTTP clients are not closed now: a client whose request is on its way (a
        // connection accepted a moment ago, a kept-alive one between two requests) would lose
        // it. Each is kept for one more request, answered with `Connection: close`; those that
        // stay silent close at times spread evenly over the second half of the grace (not all
        // at once, and not while a client in the middle of a sequence of requests is about to
        // send its next one), a connection with no request yet at its end. Busy ones close
        // after their current exchange.
        let grace = self.shared.drain_grace_ms.load(Ordering::Relaxed);
        self.grace_end = now.saturating_add(grace);
        let half = grace / 2;
        let n = self.live.max(1) as u64;
        let mut k = 0;
        for idx in 0..self.slots.len() {
            let Some(s) = self.slots[idx].session.as_mut() else {
                continue;
            };
            k += 1;
            let close_at = self.grace_end - half + half * k / n;
            if let Some(deadline) = s.drain(close_at, self.grace_end) {
                self.arm(idx, deadline, false, now);
            }
        }
        self.conns.close_idle();
        tracing::debug!("worker {}: draining {} session(s)", self.id, self.live);
    }

    fn close_all(&mut self, end: End, now: u64) {
        for idx in 0..self.slots.len() {
            self.close(idx, end, now);
        }
        let mut cx = udp_cx!(self, now);
        self.udp.close_all(end, &mut cx);
    }

    /// Takes a place for a new session under `-x` (and what the open-file limit allows), or,
    /// when there is no room, refuses the client (counted and logged): the caller closes it.
    fn permit_or_refuse(
        &mut self,
        peer: &ClientAddr,
        http: bool,
        listener: &Listener,
    ) -> Option<SessionPermit> {
        // UDP flows hold one descriptor each: sessions (two each) get what they leave.
        let flows = self.shared.udp_flows.load(Ordering::Relaxed);
        let max = self.shared.max_sessions.load(Ordering::Relaxed).min(
            self.shared
                .fd_sessions
                .load(Ordering::Relaxed)
                .saturating_sub(flows.div_ceil(2)),
        );
        let permit = self.shared.active.try_take(max);
        if permit.is_none() {
            self.refuse(peer, End::Refused, http, listener);
        }
        permit
    }

    /// A client refused at accept as `end`: counted and logged (the caller closes it).
    fn refuse(&mut self, peer: &ClientAddr, end: End, http: bool, listener: &Listener) {
        self.counters().ended(end);
        self.log_refused(peer, end, http, listener);
    }

    /// Takes slot `idx`'s session and its permit out and frees the slot (a new generation, its
    /// source count and timer given back); None when it held none. The caller drops the permit
    /// when the session is done with.
    fn free_slot(&mut self, idx: usize) -> Option<(Session, Option<SessionPermit>)> {
        let slot = &mut self.slots[idx];
        let s = slot.session.take()?;
        let permit = slot.permit.take();
        slot.gen = (slot.gen + 1) & GEN_MASK;
        slot.source = None;
        slot.timer.clear();
        self.free.push(idx as u32);
        self.live -= 1;
        self.publish_load();
        Some((s, permit))
    }

    fn close(&mut self, idx: usize, end: End, now: u64) {
        let owner = token(idx, self.slots[idx].gen, CLIENT);
        let log = self.slots[idx].log;
        let Some((mut s, permit)) = self.free_slot(idx) else {
            return;
        };
        let http = matches!(s, Session::Http(_));
        let http_at_close = s.logs_http_at_close();
        let closed = panics::contain(|| s.close(end, &mut self.pools, &mut self.conns));
        if end == End::Panic {
            // Whatever server connection slot the session still held is freed: the connection
            // it named was closed with the session, never returned to the idle pool.
            self.conns.forget_owned_by(owner);
        }
        let c = match closed {
            Ok(c) => c,
            Err(panic) => return self.close_panicked(s, permit, owner, &panic),
        };
        // The lease (the server's count of this session) lives to the end of this call, since the
        // log line below names its server; dropping it there instead of ending it first saves an
        // Arc clone (a shared counter touched by every worker) per session.
        if let Some(lease) = &c.server {
            lease.server().count_bytes(c.bytes_in, c.bytes_out);
        }
        drop(permit);
        self.shared.last_busy_ms.store(now, Ordering::Relaxed);
        let counters = &self.shared.counters[self.id];
        counters.ended(end);
        Counters::add(&counters.bytes_in, c.bytes_in);
        Counters::add(&counters.bytes_out, c.bytes_out);
        let server_addr = c
            .server
            .as_ref()
            .map(|lease| lease.server().addr() as &dyn std::fmt::Display);
        tracing::debug!(
            "session {} -> {}: {} bytes in, {} bytes out, {}",
            c.client,
            server_addr.unwrap_or(&"-"),
            c.bytes_in,
            c.bytes_out,
            end.name()
        );
        if http_at_close {
            self.log_refused_to(log, &c.client, end, true);
        } else if !http {
            // HTTP sessions log each request instead.
            self.log_line(
                log,
                &c.client,
                server_addr,
                c.bytes_in,
                c.bytes_out,
                now.saturating_sub(c.started_ms),
                end,
            );
        }
    }

    /// A session panicked while it was being closed: it is dropped as it is (its sockets closed,
    /// its lease given back by their own drops) and counted; nothing of it is logged but the panic.
    fn close_panicked(
        &mut self,
        s: Session,
        permit: Option<SessionPermit>,
        owner: Token,
        panic: &str,
    ) {
        tracing::error!(
            "worker {}: session {} panicked while closing; dropped: {panic}",
            self.id,
            s.id()
        );
        if let Err(again) = panics::contain(move || drop(s)) {
            tracing::error!(
                "worker {}: dropping that session panicked too: {again}",
                self.id
            );
        }
        self.conns.forget_owned_by(owner);
        drop(permit);
        self.counters().ended(End::Panic);
    }

    /// A client refused at accept: a session line on a TCP listener, a request line without a
    /// request on an HTTP one (one format per listener in the file).
    fn log_refused(&mut self, peer: &ClientAddr, end: End, http: bool, listener: &Listener) {
        let log = self.log_plan.file_of(&listener.name);
        self.log_refused_to(log, peer, end, http);
    }

    /// [`Self::log_refused`] into access log file `log` (None: not logged).
    fn log_refused_to(&mut self, log: Option<u32>, peer: &ClientAddr, end: End, http: bool) {
        if !http {
            return self.log_line(log, peer, None, 0, 0, 0, end);
        }
        if let Some(log) = self.log_file(log) {
            log.write_http(&HttpEntry {
                client_ip: peer,
                unix_time: crate::clock::unix_time(),
                text: &[],
                lens: [0; 5],
                generated_id: &[],
                status: 0,
                own: true,
                bytes_in: 0,
                bytes_out: 0,
                server: None,
                route: None,
                client_cert: None,
                connect_us: None,
                first_byte_us: None,
                total_us: 0,
                end,
            });
        }
    }

    /// Access log file `i` of this worker, if it logs there and the file is open.
    fn log_file(&mut self, i: Option<u32>) -> Option<&mut AccessLog> {
        self.logs.get_mut(i? as usize)?.as_mut()
    }

    #[allow(clippy::too_many_arguments)]
    fn log_line(
        &mut self,
        log: Option<u32>,
        peer: &ClientAddr,
        server: Option<&dyn std::fmt::Display>,
        up: u64,
        down: u64,
        ms: u64,
        end: End,
    ) {
        if let Some(log) = self.log_file(log) {
            log.write(&Entry {
                client_ip: peer,
                unix_time: crate::clock::unix_time(),
                server,
                bytes_in: up,
                bytes_out: down,
                duration_ms: ms,
                end,
            });
        }
    }
}
