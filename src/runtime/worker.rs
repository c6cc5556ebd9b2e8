//! A worker: one thread, one epoll instance, its own sessions, buffers and timers. Workers share
//! only the listening sockets (exclusive wake-ups: one worker takes each connection), the pools'
//! atomics and the counters; the data path takes no lock.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use mio::event::Event;
use mio::{Events, Interest, Poll, Token};

use super::resolver::{self, Resolver};
use super::PIPES_PER_WORKER;
use crate::clock::millis;
use crate::log::{AccessLog, Entry};
use crate::metrics::{Counters, End};
use crate::proxy::flow::Pools;
use crate::proxy::tcp::{Attempting, Peer, Session};
use crate::proxy::Stream;
use crate::state::shared::{Listener, Phase, Report, Request, SessionInfo, Shared, SourceSlot};
use crate::sys;

/// Token of the waker that tells a worker to look at the shared phase.
pub const WAKER: Token = Token(usize::MAX);
/// Listener with id `i` is registered with token `LISTENER_BASE + i`.
const LISTENER_BASE: usize = 1 << 60;
const GEN_BITS: u32 = 24;
const GEN_MASK: u32 = (1 << GEN_BITS) - 1;
const CLIENT: usize = 0;
const BACKEND: usize = 1;
/// How often idle, FIN and drain deadlines are checked.
const SWEEP_MS: u64 = 250;
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
    /// The session counted against its client address (`max_per_source`).
    source: Option<SourceSlot>,
}

/// A pending connect timeout, ordered by deadline.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Timer {
    deadline: u64,
    idx: u32,
    gen: u32,
    seq: u32,
}

/// A listener as one worker sees it.
struct WorkerListener {
    listener: Arc<Listener>,
    /// Paused (deregistered) until this time after EMFILE; 0 = active.
    paused_until: u64,
}

pub struct Worker {
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
    /// Connect deadlines, earliest first.
    timers: BinaryHeap<Reverse<Timer>>,
    log: Option<AccessLog>,
    rng: u64,
    draining: bool,
    next_sweep: u64,
    doomed: Vec<(usize, End)>,
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
}

impl Worker {
    /// A worker on `poll` (its waker already registered with `WAKER`).
    /// `log` is the access log file, opened before privileges were dropped.
    pub fn new(
        id: usize,
        poll: Poll,
        shared: Arc<Shared>,
        log: Option<std::fs::File>,
        resolver: Option<Arc<Resolver>>,
    ) -> io::Result<Worker> {
        let log = {
            let settings = shared.access_log.lock().unwrap_or_else(|e| e.into_inner());
            match (&settings.0, log) {
                (Some(path), Some(file)) => Some(AccessLog::new(
                    path,
                    file,
                    settings.1,
                    shared.log_generation.load(Ordering::Relaxed),
                )),
                _ => None,
            }
        };
        let mut w = Worker {
            id,
            poll,
            listeners: Vec::new(),
            listeners_seen: 0,
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            pools: Pools::new(BUFFERS_PER_WORKER, PIPES_PER_WORKER, shared.splice),
            timers: BinaryHeap::new(),
            log,
            rng: 0x9e37_79b9_7f4a_7c15 ^ ((id as u64 + 1) << 17) ^ crate::clock::unix_time(),
            draining: false,
            next_sweep: 0,
            doomed: Vec::new(),
            again: Vec::new(),
            again_now: Vec::new(),
            woken: false,
            next_session: 0,
            recent: VecDeque::with_capacity(RECENT),
            emfile_warned_ms: None,
            resolver,
            answers: Vec::new(),
            shared,
        };
        w.sync_listeners()?;
        Ok(w)
    }

    fn counters(&self) -> &Counters {
        &self.shared.counters[self.id]
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
            if self.listeners.iter().any(|w| w.listener.id == l.id) {
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
    pub fn run(mut self) {
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
            for ev in events.iter() {
                self.dispatch(ev, now);
            }
            self.drive_again(now);
            self.expire_connects(now);
            if now >= self.next_sweep {
                self.next_sweep = now + SWEEP_MS;
                self.sweep(now);
            }
            let stop = self.follow_phase(now);
            if let Some(log) = &mut self.log {
                log.flush();
            }
            if stop {
                return;
            }
        }
    }

    fn next_wakeup(&self, now: u64) -> Option<u64> {
        if !self.again.is_empty() {
            return Some(now);
        }
        let timers = self.timers.peek().map(|t| t.0.deadline).into_iter();
        let pauses = self
            .listeners
            .iter()
            .map(|l| l.paused_until)
            .filter(|&p| p > 0);
        let sweep = if self.live > 0 || self.draining {
            Some(self.next_sweep.max(now))
        } else {
            None
        };
        timers.chain(pauses).chain(sweep).min()
    }

    fn dispatch(&mut self, ev: &Event, now: u64) {
        let t = ev.token();
        if t == WAKER {
            self.woken = true;
            return;
        }
        if t.0 >= LISTENER_BASE {
            let id = (t.0 - LISTENER_BASE) as u64;
            if let Some(i) = self.listeners.iter().position(|l| l.listener.id == id) {
                self.accept(i, now);
            }
            return;
        }
        let (idx, gen, side) = decode(t);
        let Some(Slot {
            gen: g,
            session: Some(s),
            ..
        }) = self.slots.get_mut(idx)
        else {
            return;
        };
        if *g != gen {
            return;
        }
        if side == CLIENT {
            s.client_ready.update(ev);
            if !s.connected {
                if ev.is_error() {
                    self.close(idx, End::ClientReset, now);
                }
                return;
            }
        } else {
            s.backend_ready.update(ev);
            if !s.connected {
                if s.backend.is_none() {
                    return;
                }
                if ev.is_error() || (ev.is_write_closed() && !ev.is_writable()) {
                    let why = s
                        .backend
                        .as_ref()
                        .and_then(|b| b.take_error().ok().flatten());
                    let why =
                        why.unwrap_or_else(|| io::Error::from(io::ErrorKind::ConnectionRefused));
                    if why.kind() != io::ErrorKind::ConnectionReset {
                        self.retry_connect(idx, now, &why);
                        return;
                    }
                    // Not a failed connect: the server accepted, maybe sent data, and reset before
                    // this event was read. Its bytes are delivered, then its reset passed on (the
                    // error flag makes the end of its data read as a reset, not as EOF).
                    s.backend_ready.error = true;
                } else if !ev.is_writable() {
                    return;
                }
                s.connected(now);
                self.shared.counters[self.id].connected(s.connect_time_us());
            }
        }
        self.drive(idx, now);
    }

    fn drive(&mut self, idx: usize, now: u64) {
        let Some(s) = self.slots[idx].session.as_mut() else {
            return;
        };
        if s.server_gone {
            if !s.client_catching_up() {
                self.close(idx, End::ServerReset, now);
            }
            return;
        }
        match s.drive(&mut self.pools, now) {
            // The server's last bytes reach the client before its reset does (checked again on
            // the client's events and at each sweep).
            Some(End::ServerReset) if s.client_catching_up() => s.server_gone = true,
            Some(end) => self.close(idx, end, now),
            None if s.wants_more() => self.again.push((idx as u32, self.slots[idx].gen)),
            None => {}
        }
    }

    /// Drives the sessions that yielded on their budget, after this turn's events.
    fn drive_again(&mut self, now: u64) {
        let mut again = std::mem::take(&mut self.again_now);
        std::mem::swap(&mut again, &mut self.again);
        for &(idx, gen) in &again {
            if self.slots[idx as usize].gen == gen {
                self.drive(idx as usize, now);
            }
        }
        again.clear();
        self.again_now = again;
    }

    // === accept ===

    fn accept(&mut self, li: usize, now: u64) {
        let listener = self.listeners[li].listener.clone();
        for _ in 0..self.shared.accept_batch {
            match listener.socket.accept() {
                Ok((stream, peer)) => self.open(&listener, stream, peer, now),
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

    fn open(&mut self, listener: &Listener, stream: Stream, peer: Peer, now: u64) {
        Counters::add(&self.counters().accepted, 1);
        if let Some(ip) = peer.ip() {
            if self.recent.len() == RECENT {
                self.recent.pop_front();
            }
            self.recent.push_back((ip, now));
        }
        let max = self
            .shared
            .max_sessions
            .load(Ordering::Relaxed)
            .min(self.shared.fd_sessions.load(Ordering::Relaxed));
        if self.shared.active.fetch_add(1, Ordering::Relaxed) >= max {
            self.shared.active.fetch_sub(1, Ordering::Relaxed);
            self.counters().ended(End::Refused);
            self.log_line(&peer, None, 0, 0, 0, End::Refused);
            return;
        }
        let pool = listener.pool.load_full();
        let denied = !pool.admits(peer.ip());
        if denied && pool.abuse.is_none() {
            self.shared.active.fetch_sub(1, Ordering::Relaxed);
            self.counters().ended(End::Denied);
            self.log_line(&peer, None, 0, 0, 0, End::Denied);
            return;
        }
        let limit = pool.tuning.max_per_source;
        let source = match peer.ip() {
            Some(ip) if limit > 0 => {
                let slot = self.shared.sources().admit(listener.id, ip, limit);
                if slot.is_none() {
                    // Over its address's share: closed at once, as over `-x`.
                    self.shared.active.fetch_sub(1, Ordering::Relaxed);
                    self.counters().ended(End::Refused);
                    self.log_line(&peer, None, 0, 0, 0, End::Refused);
                    return;
                }
                slot
            }
            _ => None,
        };
        let idx = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                self.slots.push(Slot {
                    gen: 0,
                    session: None,
                    source: None,
                });
                self.slots.len() - 1
            }
        };
        self.slots[idx].source = source;
        self.live += 1;
        let gen = self.slots[idx].gen;
        let id = self.next_session * self.shared.counters.len() as u64 + self.id as u64;
        self.next_session += 1;
        let mut session = Session::new(pool, id, stream, peer, now);
        session.denied = denied;
        let registered = self.poll.registry().register(
            session.client.source(),
            token(idx, gen, CLIENT),
            Interest::READABLE | Interest::WRITABLE,
        );
        self.slots[idx].session = Some(session);
        if let Err(e) = registered {
            tracing::warn!("cannot register client socket: {e}");
            self.close(idx, End::Error, now);
            return;
        }
        self.connect(idx, now);
    }

    // === connect ===

    fn connect(&mut self, idx: usize, now: u64) {
        let rand = self.next_rand();
        let gen = self.slots[idx].gen;
        let counters = &self.shared.counters[self.id];
        let Some(s) = self.slots[idx].session.as_mut() else {
            return;
        };
        let step = s.connect_next(
            self.poll.registry(),
            token(idx, gen, BACKEND),
            now,
            rand,
            counters,
        );
        self.follow_attempt(idx, step, now);
    }

    fn next_rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// Arms the deadline of the attempt a session started (and asks the resolver when the server
    /// is a name), or closes the session when no server was left.
    fn follow_attempt(&mut self, idx: usize, step: Result<Attempting, End>, now: u64) {
        let gen = self.slots[idx].gen;
        let Some(s) = self.slots[idx].session.as_ref() else {
            return;
        };
        let seq = s.attempt_seq();
        let deadline = match step {
            Ok(Attempting::Connect(deadline)) => deadline,
            Ok(Attempting::Resolve(deadline)) => {
                let key = resolver::Key {
                    idx: idx as u32,
                    gen,
                    seq,
                };
                match (&self.resolver, &s.server) {
                    (Some(r), Some(server)) => r.ask(self.id, key, server.clone()),
                    _ => {
                        tracing::warn!("no resolver for a server name; closing the session");
                        self.close(idx, End::NoServer, now);
                        return;
                    }
                }
                deadline
            }
            Err(end) => {
                self.close(idx, end, now);
                return;
            }
        };
        self.timers.push(Reverse(Timer {
            deadline,
            idx: idx as u32,
            gen,
            seq,
        }));
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
            let waiting = match self.slots.get(idx) {
                Some(Slot {
                    gen: g,
                    session: Some(s),
                    ..
                }) => *g == gen && s.is_resolving() && s.attempt_seq() == seq,
                _ => false,
            };
            if !waiting {
                continue;
            }
            let rand = self.next_rand();
            let counters = &self.shared.counters[self.id];
            let Some(s) = self.slots[idx].session.as_mut() else {
                continue;
            };
            let step = s.resolved(
                answer.result,
                self.poll.registry(),
                token(idx, gen, BACKEND),
                now,
                rand,
                counters,
            );
            self.follow_attempt(idx, step, now);
        }
        self.answers = answers;
    }

    fn retry_connect(&mut self, idx: usize, now: u64, why: &io::Error) {
        let counters = &self.shared.counters[self.id];
        let Some(s) = self.slots[idx].session.as_mut() else {
            return;
        };
        s.connect_failed(now, why, counters);
        self.connect(idx, now);
    }

    /// Fails connects past their deadline; drops timers whose session moved on.
    fn expire_connects(&mut self, now: u64) {
        while let Some(&Reverse(t)) = self.timers.peek() {
            let live = match &self.slots.get(t.idx as usize) {
                Some(Slot {
                    gen,
                    session: Some(s),
                    ..
                }) => *gen == t.gen && !s.connected && s.attempt_seq() == t.seq,
                _ => false,
            };
            if live && t.deadline > now {
                break;
            }
            self.timers.pop();
            if live {
                let resolving = self.slots[t.idx as usize]
                    .session
                    .as_ref()
                    .is_some_and(|s| s.is_resolving());
                let why = if resolving {
                    "name resolution timed out"
                } else {
                    "connect timed out"
                };
                let why = io::Error::new(io::ErrorKind::TimedOut, why);
                self.retry_connect(t.idx as usize, now, &why);
            }
        }
    }

    // === timeouts, drain, close ===

    fn sweep(&mut self, now: u64) {
        let hard_deadline = match self.shared.phase() {
            Phase::Draining => Some(self.shared.drain_deadline_ms.load(Ordering::Relaxed)),
            _ => None,
        };
        for (idx, slot) in self.slots.iter().enumerate() {
            let Some(s) = &slot.session else { continue };
            let t = &s.pool.tuning;
            let quiet = now.saturating_sub(s.active_ms);
            let end = if hard_deadline.is_some_and(|d| now >= d) {
                Some(End::Shutdown)
            } else if s.server_gone {
                let late = quiet >= millis(t.fin_timeout);
                (late || !s.client_catching_up()).then_some(End::ServerReset)
            } else if s.connected && s.is_half_closed() && quiet >= millis(t.fin_timeout) {
                Some(End::FinTimeout)
            } else if s.connected && !t.idle_timeout.is_zero() && quiet >= millis(t.idle_timeout) {
                Some(End::IdleTimeout)
            } else {
                None
            };
            if let Some(end) = end {
                self.doomed.push((idx, end));
            }
        }
        let doomed = std::mem::take(&mut self.doomed);
        for &(idx, end) in &doomed {
            self.close(idx, end, now);
        }
        self.doomed = doomed;
        self.doomed.clear();
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
                self.live == 0
            }
            Phase::Stopping => {
                self.close_all(End::Shutdown, now);
                true
            }
        }
    }

    /// Reopens, opens or closes the access log after its settings moved on.
    fn follow_log(&mut self) {
        let generation = self.shared.log_generation.load(Ordering::Relaxed);
        if self
            .log
            .as_ref()
            .is_some_and(|l| l.generation() == generation)
        {
            return;
        }
        let (path, format) = self
            .shared
            .access_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(log) = &mut self.log {
            log.flush();
        }
        self.log = match path {
            Some(path) => match AccessLog::open(&path, format, generation) {
                Ok(log) => Some(log),
                Err(e) => {
                    tracing::warn!("cannot open access log {}: {e}", path.display());
                    None
                }
            },
            None => None,
        };
    }

    /// Answers the control thread.
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
                    let sessions = self
                        .slots
                        .iter()
                        .filter_map(|slot| slot.session.as_ref())
                        .map(|s| SessionInfo {
                            id: s.id,
                            listener: s.pool.name.clone(),
                            client: s.peer.to_string_with_port(),
                            server: s.server.as_ref().map(|sv| sv.addr().to_string()),
                            age_ms: now.saturating_sub(s.started_ms),
                            bytes_in: s.up.bytes,
                            bytes_out: s.down.bytes,
                            state: if s.is_resolving() {
                                "resolving"
                            } else if !s.connected {
                                "connecting"
                            } else if s.is_half_closed() {
                                "half-closed"
                            } else {
                                "open"
                            },
                        })
                        .collect();
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
                        .position(|slot| slot.session.as_ref().is_some_and(|s| s.id == id));
                    if let Some(idx) = found {
                        self.close(idx, End::Closed, now);
                    }
                    let _ = reply.send(found.is_some());
                }
            }
        }
    }

    fn start_drain(&mut self, now: u64) {
        self.draining = true;
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
        self.listeners.clear();
        tracing::debug!("worker {}: draining {} session(s)", self.id, self.live);
    }

    fn close_all(&mut self, end: End, now: u64) {
        for idx in 0..self.slots.len() {
            self.close(idx, end, now);
        }
    }

    fn close(&mut self, idx: usize, end: End, now: u64) {
        let slot = &mut self.slots[idx];
        let Some(mut s) = slot.session.take() else {
            return;
        };
        slot.gen = (slot.gen + 1) & GEN_MASK;
        slot.source = None;
        self.free.push(idx as u32);
        self.live -= 1;
        // Taken rather than cloned: the log line still needs its address after the count drops.
        let server = s.server.take();
        if let Some(sv) = &server {
            sv.session_ended();
            sv.count_bytes(s.up.bytes, s.down.bytes);
        }
        // Before the buffers go back: whether bytes were left undelivered decides the resets.
        s.arm_resets(end);
        s.release(&mut self.pools);
        self.shared.active.fetch_sub(1, Ordering::Relaxed);
        self.shared.last_busy_ms.store(now, Ordering::Relaxed);
        let c = &self.shared.counters[self.id];
        c.ended(end);
        Counters::add(&c.bytes_in, s.up.bytes);
        Counters::add(&c.bytes_out, s.down.bytes);
        let server_addr = server
            .as_ref()
            .map(|sv| sv.addr() as &dyn std::fmt::Display);
        tracing::debug!(
            "session {} -> {}: {} bytes in, {} bytes out, {}",
            s.peer,
            server_addr.unwrap_or(&"-"),
            s.up.bytes,
            s.down.bytes,
            end.name()
        );
        self.log_line(
            &s.peer,
            server_addr,
            s.up.bytes,
            s.down.bytes,
            now.saturating_sub(s.started_ms),
            end,
        );
    }

    fn log_line(
        &mut self,
        peer: &Peer,
        server: Option<&dyn std::fmt::Display>,
        up: u64,
        down: u64,
        ms: u64,
        end: End,
    ) {
        if let Some(log) = &mut self.log {
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
