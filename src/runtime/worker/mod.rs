//! A worker: one thread, one epoll instance, its own sessions, buffers and timers. Workers share
//! only the listening sockets (exclusive wake-ups: one worker takes each connection), the pools'
//! atomics, the counters and the pools of idle HTTP server connections (a short lock per
//! checkout and checkin, uncontended unless another worker is taking one: `state::idle`); the
//! data path takes no other lock.
//!
//! Here: the slots, the event loop, the calls into sessions and what they ask for (timers, the
//! resolver, another turn). Beside it: [`admit`] (accepting and admitting clients),
//! [`listeners`] (the listeners it watches), [`drain`] (the shared phase: drain and stop),
//! [`inbox`] (the control thread's requests, clients handed over), [`gather`] (kept-alive
//! clients moved to the workers that accept), [`close`] (ending a session) and [`logs`] (the
//! access log files).

use std::collections::VecDeque;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use mio::event::Event;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use super::panics;
use super::resolver::{self, Resolver};
use super::timers::{Armed, Timer, Timers};
use super::PIPES_PER_WORKER;
use crate::log::{AccessLog, LogPlan};
use crate::metrics::{Counters, End};
use crate::proxy::copy::Pools;
use crate::proxy::{Ctx, Session, Side, Step, NEVER};
use crate::queue::{Mailbox, Wake};
use crate::state::idle::{Owner, ServerConns};
use crate::state::permit::SessionPermit;
use crate::state::shared::{Listener, Phase, Shared, SourceSlot};
use crate::sys;
use crate::udp::UdpWorker;

/// What the worker lends its UDP flows for one call (a macro: the fields borrowed apart).
macro_rules! udp_cx {
    ($w:ident, $now:expr) => {
        crate::udp::Cx {
            registry: $w.poll.registry(),
            now: $now,
            rand: $w.rng.next_u64(),
            counters: &$w.shared.counters[$w.id],
            shared: &$w.shared,
            // A flow writes to its listener's file (found by the name of its pool snapshot).
            logs: &mut $w.logs,
            log_plan: &$w.log_plan,
        }
    };
}

mod admit;
mod close;
mod drain;
mod gather;
mod inbox;
mod listeners;
mod logs;

/// Token of the waker that tells a worker to look at the shared phase.
pub(crate) const WAKER: Token = Token(usize::MAX);
/// Token of the worker's ring: readable while accepted clients wait in it.
const RING: Token = Token(usize::MAX - 1);
/// Listener with id `i` is registered with token `LISTENER_BASE + i`.
const LISTENER_BASE: usize = 1 << 60;
const GEN_BITS: u32 = 24;
const GEN_MASK: u32 = (1 << GEN_BITS) - 1;
const CLIENT: usize = 0;
const BACKEND: usize = 1;
/// How often the drain deadline is checked while draining.
const SWEEP_MS: u64 = 250;
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
    /// A multishot accept is armed for it in the worker's ring (and not cancelled since).
    armed: bool,
    /// Its clients stay on the worker that accepted them (TLS, or HTTP/2 with `h2c`): every
    /// worker accepts them, whatever `concentrate` decides, as it cannot gather them later.
    /// Read once, when the worker first takes the listener (the accept path reads no pool).
    pinned: bool,
    /// The listener's sockets this worker accepts from (`ListenSocket::share`): `[0]`, or with
    /// one socket per worker (`listen_per_worker`) its own.
    share: Vec<usize>,
    /// The listener has one socket per worker: this worker's share is nobody else's, so it
    /// accepts from it even while it does not take clients (`concentrate`), handing them over.
    own: bool,
}

pub(crate) struct Worker {
    id: usize,
    poll: Poll,
    /// The ring whose multishot accepts take this worker's TCP clients (`accept`), if any.
    ring: Option<sys::AcceptRing>,
    /// The ring's completions being opened (kept to reuse its allocation).
    accepted: Vec<sys::Accepted>,
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
    /// Clock µs of this turn (its `now` in milliseconds is read with it): sessions measure
    /// durations with it instead of reading the clock per request.
    turn_us: u64,
    /// A handle on each access log file of `log_plan` (None: it could not be opened), in its
    /// order, and the log generation they were opened for.
    logs: Vec<Option<AccessLog>>,
    log_plan: LogPlan,
    log_generation: u64,
    rng: quill_core::rand::Rng,
    /// The file cache of static roots.
    files: crate::web::Files,
    draining: bool,
    /// Whether this worker accepts clients (its listeners registered): the first
    /// `Shared::accepting` workers do (see `runtime::balance`).
    accepting: bool,
    /// `Shared::accepting` as this turn saw it.
    accepting_n: usize,
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
    /// Wakes for requests waiting in pools' queues, posted by any worker, and the list being
    /// handled (kept to reuse its allocation).
    mailbox: Arc<Mailbox>,
    queue_wakes: Vec<(Token, Wake)>,
    /// Sessions made by the last call (HTTP/2 streams), and pokes between the two ends of
    /// HTTP/2 streams' pipes being handled (`net::h2pipe`); both kept to reuse their allocation.
    spawned: Vec<Session>,
    pokes: Vec<Token>,
}

impl Worker {
    /// A worker on `poll` (its waker already registered with `WAKER`), accepting TCP clients
    /// through `ring` when there is one. `logs` are the access log files of the shared log plan,
    /// in its order, opened before privileges were dropped.
    pub(crate) fn new(
        id: usize,
        poll: Poll,
        ring: Option<sys::AcceptRing>,
        shared: Arc<Shared>,
        logs: Vec<std::fs::File>,
        resolver: Option<Arc<Resolver>>,
        waker: Arc<mio::Waker>,
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
        if let Some(ring) = &ring {
            poll.registry().register(
                &mut SourceFd(&ring.as_fd().as_raw_fd()),
                RING,
                Interest::READABLE,
            )?;
        }
        let arm_later = ring.is_some();
        let mut w = Worker {
            id,
            poll,
            ring,
            accepted: Vec::new(),
            listeners: Vec::new(),
            listeners_seen: 0,
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            pools: Pools::new(BUFFERS_PER_WORKER, PIPES_PER_WORKER, shared.splice),
            conns,
            timers: Timers::default(),
            turn_us: 0,
            logs,
            log_plan,
            log_generation,
            rng: quill_core::rand::Rng::new(
                0x9e37_79b9_7f4a_7c15 ^ ((id as u64 + 1) << 17) ^ crate::clock::unix_time(),
            ),
            files: crate::web::Files::default(),
            draining: false,
            accepting: true,
            accepting_n: shared.loads.len(),
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
            mailbox: Arc::new(Mailbox::new(waker)),
            queue_wakes: Vec::new(),
            spawned: Vec::new(),
            pokes: Vec::new(),
            shared,
        };
        if !arm_later {
            w.sync_listeners(0)?;
        }
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

    /// Runs the event loop until the worker has drained or is told to stop, then closes its inbox
    /// (requests left there are dropped, so whoever waits for them hears at once).
    pub(crate) fn run(mut self) {
        self.mailbox.own();
        crate::per_worker::enter_worker(self.id);
        if self.ring.is_some() {
            // The kernel completes a ring's accepts on the thread that armed them: this one.
            if let Err(e) = self.sync_listeners(self.shared.clock.now_ms()) {
                tracing::warn!("worker {}: cannot register a listener: {e}", self.id);
            }
        }
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
            // One clock read a turn: its milliseconds for deadlines, its microseconds for the
            // durations the access log and the metrics give (sessions read no clock of their own).
            self.turn_us = self.shared.clock.now_us();
            let now = crate::clock::ms_of(self.turn_us);
            self.accepting_n = self.shared.accepting.0.load(Ordering::Relaxed);
            // A drain begun while this worker slept is taken up before the turn's events, so
            // a response that arrives in the same turn as the wake-up already says close.
            if !self.draining && matches!(self.shared.phase(), Phase::Draining) {
                self.start_drain(now);
            }
            for ev in events.iter() {
                self.dispatch(ev, now);
            }
            self.drive_again(now);
            self.take_pokes(now);
            // (Skipped whole by a worker without UDP: its context costs a random number.)
            let udp = !self.udp.is_empty();
            if udp {
                let mut cx = udp_cx!(self, now);
                if self.udp.has_again() {
                    self.udp.drive_again(&mut cx);
                }
                // The turn's replies to UDP clients leave together (one sendmmsg).
                self.udp.flush(&mut cx);
            }
            self.expire(now);
            if udp {
                let mut cx = udp_cx!(self, now);
                self.udp.expire(&mut cx);
            }
            if self.mailbox.is_pending() {
                // Wakes posted during this turn (a freed place in a queue, by this worker itself).
                self.take_queue_wakes(now);
            }
            self.conns.expire(now);
            self.pools.after_turn(now, crate::proxy::http::trim_spares);
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
        if !self.again.is_empty()
            || self.udp.has_again()
            || self.mailbox.is_pending()
            || crate::net::h2pipe::has_pokes()
        {
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
        if t == RING {
            self.reap(now);
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
        // What the sessions it spawned share with it (it may close now).
        let (listener, log) = (self.slots[idx].listener, self.slots[idx].log);
        match outcome {
            Ok(step) => self.follow(idx, step, now),
            Err(panic) => self.reset_panicked(idx, &panic, now),
        }
        if !self.spawned.is_empty() {
            self.start_spawned(listener, log, now);
        }
    }

    /// Gives the sessions the last call made (HTTP/2 streams of the connection in the slot of
    /// listener `listener` and access log `log`) their slots, and starts them. They hold no
    /// place under `-x` and no count of their address: their connection does.
    fn start_spawned(&mut self, listener: u64, log: Option<u32>, now: u64) {
        let mut spawned = std::mem::take(&mut self.spawned);
        for mut s in spawned.drain(..) {
            s.set_id(self.next_id());
            let (idx, gen) = self.place_in(s, None, None, (listener, log));
            self.call(idx, gen, now, |s, cx| s.start(cx));
        }
        if self.spawned.is_empty() {
            self.spawned = spawned;
        }
    }

    /// Pokes the sessions the other ends of their HTTP/2 pipes asked for (a few rounds: a poke
    /// may make another; what is left waits for the next turn, which then does not sleep).
    fn take_pokes(&mut self, now: u64) {
        for _ in 0..8 {
            let mut pokes = std::mem::take(&mut self.pokes);
            crate::net::h2pipe::take_pokes(&mut pokes);
            if pokes.is_empty() {
                self.pokes = pokes;
                return;
            }
            pokes.sort_unstable_by_key(|t| t.0);
            pokes.dedup();
            for &t in &pokes {
                let (idx, gen, _) = decode(t);
                self.call(idx, gen, now, |s, cx| s.poke(cx));
            }
            pokes.clear();
            self.pokes = pokes;
        }
    }

    /// Session `idx` if it is still generation `gen`, and what it may use for one call.
    fn session(&mut self, idx: usize, gen: u32, now: u64) -> Option<(&mut Session, Ctx<'_>)> {
        let slot = self.slots.get_mut(idx)?;
        if slot.gen != gen {
            return None;
        }
        let s = slot.session.as_mut()?;
        let log = crate::log::Logs {
            files: &mut self.logs,
            plan: &self.log_plan,
            listener: slot.log,
        };
        let cx = Ctx {
            registry: self.poll.registry(),
            client_token: token(idx, gen, CLIENT),
            server_token: token(idx, gen, BACKEND),
            now,
            now_us: self.turn_us,
            rng: &mut self.rng,
            counters: &self.shared.counters[self.id],
            pools: &mut self.pools,
            conns: &mut self.conns,
            log,
            draining: self.draining,
            grace_end: self.grace_end,
            rates: self.shared.rates(),
            files: &mut self.files,
            mailbox: &self.mailbox,
            spawned: &mut self.spawned,
        };
        Some((s, cx))
    }

    /// Does what a session asked for.
    fn follow(&mut self, idx: usize, step: Step, now: u64) {
        match step {
            Step::Wait(deadline) => {
                if self.shared.concentrate && self.gather(idx, now) {
                    return;
                }
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

    /// Hands this worker's sessions what other threads posted for them: places freed in pools'
    /// queues (a wake whose request no longer waits goes to the next in line) and file ranges
    /// read into the page cache.
    fn take_queue_wakes(&mut self, now: u64) {
        let mut wakes = std::mem::take(&mut self.queue_wakes);
        self.mailbox.take(&mut wakes);
        for (token, wake) in wakes.drain(..) {
            let (idx, gen, _) = decode(token);
            let mut taken = false;
            let read = matches!(wake, Wake::Read);
            self.call(idx, gen, now, |s, cx| match s.on_wake(read, cx) {
                Some(step) => {
                    taken = true;
                    step
                }
                None => s.on_deadline(cx),
            });
            if let (false, Wake::Queue(queue)) = (taken, wake) {
                queue.wake_one();
            }
        }
        self.queue_wakes = wakes;
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
}
