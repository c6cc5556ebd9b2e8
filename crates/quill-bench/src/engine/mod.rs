//! The load engine: one mio event loop per thread, a fixed slab of active client slots, the idle
//! connections beside them, and a [`Tally`] of what happened.
//!
//! Written for speed: the request bytes are built once, each slot owns a fixed receive buffer and
//! the response parser allocates nothing, so a request costs its syscalls and two clock reads.
//! Connections are registered once (edge-triggered, read and write) and never re-registered:
//! a write tried while the connect is still in progress simply waits for the writable edge.
//!
//! Kept-alive HTTP connections wake once per response, not once per segment: after a response of
//! S bytes (Content-Length framed, at most one buffer), the socket's receive low-water mark
//! (SO_RCVLOWAT) is set to S, so the kernel signals readiness when the next response of that size
//! is whole. Servers such as nginx write the head and the body in two segments; without the mark
//! the client wakes for the head alone, and every wake-up of a sleeping client is paid for by the
//! server's CPU (measured against one nginx worker with `bench/loadgen.sh`: 0.96 of `wrk -t1`'s
//! rate before, 1.00 to 1.07 after, in four runs). The mark is a guess, so it is made safe:
//! - a read that leaves the response incomplete drops the mark to 1 at once (a longer response
//!   then wakes on its next byte; lowering the mark signals data already there);
//! - a request waiting longer than four times the recent mean latency of whole responses (at
//!   least 1 ms, at most 50 ms) gets its mark dropped and is read at once, so a shorter response
//!   is delayed by that much at most (the read does not rely on the kernel signalling it);
//! - a response that turns out shorter than its mark turns the marks off in that event loop for
//!   the rest of the run (each thread, and each spread child, finds out for itself).
//!
//! The files: `tally.rs` what a run counts ([`Tally`], failures by [`Kind`]), `response.rs` the
//! reading of one response into a slot, `udp.rs` the engine of `udp://` targets.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use socket2::{Domain, Socket, Type};

use super::{Options, Stop};
use quill_core::http1::{Body, Framing, Limits, ResponseHead};

mod response;
mod tally;
mod udp;

pub use tally::Tally;
pub(crate) use tally::{Failures, Kind};

use response::{is_wait, read_response};
use tally::MAX_LATENCY_US;

/// Receive buffer per active slot: a response head must fit in it; bodies stream through it.
const RECV_BUF: usize = 16 * 1024;
/// Response heads: the whole head must fit the receive buffer; 48 fields at most.
const LIMITS: Limits = Limits {
    max_head: RECV_BUF,
    max_request_line: RECV_BUF,
    max_headers: 48,
    require_host: false,
};
/// Idle connects in flight at once per thread (more would overflow the server's SYN backlog).
const IDLE_BATCH: usize = 256;
/// How often in-flight requests are checked against `--timeout`.
const SWEEP: Duration = Duration::from_millis(100);
/// How often requests waiting behind a receive low-water mark are checked (see the module doc).
const PROBE: Duration = Duration::from_millis(1);

// === Running ===

/// Points where the engine's caller steps in (watching and progress, or the handshake of a
/// spread child).
pub(crate) trait Phases {
    /// Every idle connection is open (or failed); returns when the active phase may start.
    fn idle_open(&mut self) {}
    /// The active phase is over; returns when the idle connections may be checked and closed.
    fn active_done(&mut self) {}
    /// The counts so far, about every 10 ms while a phase runs.
    fn tick(&mut self, _counts: Counts) {}
}

/// What the engine threads have done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Idle connections open.
    pub idle: u64,
    /// Complete requests.
    pub done: u64,
    pub failed: u64,
}

impl Counts {
    fn sum(progress: &[Progress]) -> Counts {
        let mut c = Counts::default();
        for p in progress {
            c.idle += p.idle.load(Ordering::Relaxed);
            c.done += p.done.load(Ordering::Relaxed);
            c.failed += p.failed.load(Ordering::Relaxed);
        }
        c
    }

    pub(crate) fn add(&mut self, o: Counts) {
        self.idle += o.idle;
        self.done += o.done;
        self.failed += o.failed;
    }
}

/// Counters the engine threads publish for the progress line.
#[derive(Default)]
struct Progress {
    done: AtomicU64,
    failed: AtomicU64,
    idle: AtomicU64,
}

/// Lets threads wait for a phase the main thread opens (a barrier the main thread can poll).
#[derive(Default)]
struct Gate {
    arrived: AtomicUsize,
    opened: AtomicUsize,
}

impl Gate {
    fn pass(&self, phase: usize) {
        self.arrived.fetch_add(1, Ordering::AcqRel);
        while self.opened.load(Ordering::Acquire) < phase {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
}

/// Runs the idle and active phases on `opts.threads` threads and merges what they measured.
pub(crate) fn run(opts: &Options, phases: &mut dyn Phases) -> Result<Tally, String> {
    let n = opts.threads.min(opts.active.max(1)).max(1);
    let request: Arc<[u8]> = opts.target.request(opts.keepalive).into();
    let gate = Arc::new(Gate::default());
    let progress: Arc<[Progress]> = (0..n).map(|_| Progress::default()).collect();
    let mut handles = Vec::with_capacity(n);
    for t in 0..n {
        let plan = Plan::share(opts, t, n, request.clone());
        let (gate, progress) = (gate.clone(), progress.clone());
        let h = std::thread::Builder::new()
            .name(format!("bench-{t}"))
            .spawn(move || plan.run(&gate, &progress[t]))
            .map_err(|e| format!("cannot start a bench thread: {e}"))?;
        handles.push(h);
    }
    wait_arrived(&gate, n, 1, || phases.tick(Counts::sum(&progress)));
    phases.idle_open();
    let start = Instant::now();
    gate.opened.store(1, Ordering::Release);
    wait_arrived(&gate, n, 2, || phases.tick(Counts::sum(&progress)));
    phases.active_done();
    gate.opened.store(2, Ordering::Release);
    let mut total = Tally::default();
    for h in handles {
        let (tally, end) = h
            .join()
            .map_err(|_| "a bench thread panicked".to_string())??;
        let mut tally: Tally = tally;
        tally.seconds = end.saturating_duration_since(start).as_secs_f64();
        total.merge(&tally);
    }
    Ok(total)
}

fn wait_arrived(gate: &Gate, n: usize, phase: usize, mut tick: impl FnMut()) {
    while gate.arrived.load(Ordering::Acquire) < n * phase {
        tick();
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One thread's share of the run.
struct Plan {
    addr: SocketAddr,
    line_mode: bool,
    request: Arc<[u8]>,
    idle: usize,
    active: usize,
    stop: Stop,
    keepalive: bool,
    timeout: Duration,
    sources: Option<Arc<[IpAddr]>>,
    first_source: usize,
    /// udp:// target, and its datagram size.
    udp: bool,
    size: usize,
}

/// `total / n`, the first `total % n` shares one more.
fn share(total: u64, t: usize, n: usize) -> u64 {
    total / n as u64 + u64::from((t as u64) < total % n as u64)
}

impl Plan {
    fn share(opts: &Options, t: usize, n: usize, request: Arc<[u8]>) -> Plan {
        let stop = match opts.stop {
            Stop::Requests(r) => Stop::Requests(share(r, t, n)),
            after => after,
        };
        Plan {
            addr: opts.target.addr,
            line_mode: !opts.target.is_http(),
            request,
            idle: share(opts.idle as u64, t, n) as usize,
            active: share(opts.active as u64, t, n) as usize,
            stop,
            keepalive: opts.keepalive,
            timeout: opts.timeout,
            sources: opts.sources.clone(),
            first_source: t,
            udp: opts.target.is_udp(),
            size: opts.size,
        }
    }

    /// Opens the idle connections, passes the gate, drives the active slots, passes the gate,
    /// checks the idle connections. Returns the tally and when the active phase ended. The gates
    /// are passed even when something fails, so the other threads never wait forever.
    fn run(self, gate: &Gate, progress: &Progress) -> Result<(Tally, Instant), String> {
        if self.udp {
            return udp::run(self, gate, progress);
        }
        let mut engine = match Engine::new(self, progress) {
            Ok(e) => e,
            Err(e) => {
                gate.pass(1);
                gate.pass(2);
                return Err(format!("cannot create an event loop: {e}"));
            }
        };
        engine.open_idle();
        gate.pass(1);
        engine.drive_active();
        let end = Instant::now();
        gate.pass(2);
        engine.check_idle();
        Ok((engine.tally, end))
    }
}

// === The event loop ===

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No request in flight (stopped, or between connections).
    Free,
    /// Writing the request from this offset (also while the connect is in progress).
    Sending(usize),
    Receiving,
}

/// One active client.
struct Slot {
    conn: Option<TcpStream>,
    phase: Phase,
    started: Instant,
    buf: Box<[u8]>,
    /// Head bytes gathered so far (until the head is parsed).
    filled: usize,
    head: Option<ResponseHead>,
    /// Where the response's body ends.
    framing: Body,
    /// Bytes and body bytes of the response in progress.
    raw: u64,
    body: u64,
    /// The connection's SO_RCVLOWAT (1: the kernel's default).
    lowat: u32,
    /// The response size the request in flight was sent expecting (0: none).
    expect: u32,
}

impl Slot {
    fn new(now: Instant) -> Slot {
        Slot {
            conn: None,
            phase: Phase::Free,
            started: now,
            buf: vec![0; RECV_BUF].into_boxed_slice(),
            filled: 0,
            head: None,
            framing: Body::new(Framing::None),
            raw: 0,
            body: 0,
            lowat: 1,
            expect: 0,
        }
    }

    fn reset_response(&mut self) {
        self.filled = 0;
        self.head = None;
        self.raw = 0;
        self.body = 0;
    }
}

/// How a response read ended.
enum Read_ {
    /// Wait for the next readable edge.
    Wait,
    /// Whole: (2xx, connection reusable).
    Whole(bool, bool),
    Failed(Kind),
}

enum IdleState {
    Connecting(Instant),
    Open,
    Failed,
}

struct Engine<'p> {
    plan: Plan,
    poll: Poll,
    slots: Vec<Slot>,
    idle: Vec<(TcpStream, IdleState)>,
    tally: Tally,
    progress: &'p Progress,
    /// Requests still to start (`Stop::Requests`), or the deadline (`Stop::After`).
    left: u64,
    deadline: Option<Instant>,
    busy: usize,
    next_source: usize,
    /// Keep-alive slots whose next request waits for the end of this loop turn.
    deferred: Vec<usize>,
    /// Receive low-water marks may be set (keep-alive HTTP, until a response proves them wrong).
    marks: bool,
    /// Slots whose connection has a mark above 1 now (the probe runs only while there are some).
    marked: usize,
    /// Failed requests (the idle phase's failures are not counted here).
    active_failed: u64,
    /// Mean latency of recent whole responses, µs (an exponentially weighted mean over ~32).
    recent_us: u64,
}

impl<'p> Engine<'p> {
    fn new(plan: Plan, progress: &'p Progress) -> io::Result<Engine<'p>> {
        let now = Instant::now();
        let slots = (0..plan.active).map(|_| Slot::new(now)).collect();
        let next_source = plan.first_source;
        Ok(Engine {
            poll: Poll::new()?,
            slots,
            idle: Vec::with_capacity(plan.idle),
            deferred: Vec::with_capacity(plan.active),
            marks: plan.keepalive && !plan.line_mode,
            marked: 0,
            active_failed: 0,
            recent_us: 0,
            tally: Tally::default(),
            progress,
            left: 0,
            deadline: None,
            busy: 0,
            next_source,
            plan,
        })
    }

    /// A nonblocking connect to the target, from the next source address when there are several.
    fn connect(&mut self, token: Token) -> io::Result<TcpStream> {
        let addr = self.plan.addr;
        let socket = Socket::new(
            Domain::for_address(addr),
            Type::STREAM.nonblocking().cloexec(),
            None,
        )?;
        // With a new connection per request there is one write per connection: Nagle cannot hold
        // it back, and TCP_NODELAY would cost a syscall per request. On a kept-alive connection
        // it can (measured: `wrk`, which sets it, drove nginx 5-10% faster before), and there the
        // setsockopt is paid once per connection.
        if self.plan.keepalive {
            socket.set_tcp_nodelay(true)?;
        }
        if let Some(sources) = &self.plan.sources {
            let source = sources[self.next_source % sources.len()];
            self.next_source = self.next_source.wrapping_add(1);
            quill_core::sys::set_bind_address_no_port(socket.as_fd())?;
            socket.bind(&SocketAddr::new(source, 0).into())?;
        }
        match socket.connect(&addr.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        let mut stream = TcpStream::from_std(socket.into());
        self.poll.registry().register(
            &mut stream,
            token,
            Interest::READABLE | Interest::WRITABLE,
        )?;
        Ok(stream)
    }

    // --- idle connections ---

    fn open_idle(&mut self) {
        let mut events = Events::with_capacity(1024);
        let base = self.slots.len();
        let (mut started, mut pending) = (0, 0);
        let mut last_sweep = Instant::now();
        while started < self.plan.idle || pending > 0 {
            while started < self.plan.idle && pending < IDLE_BATCH {
                let token = Token(base + self.idle.len());
                match self.connect(token) {
                    Ok(s) => {
                        self.idle.push((s, IdleState::Connecting(Instant::now())));
                        pending += 1;
                    }
                    Err(e) => self.tally.failures.add(Kind::of(&e)),
                }
                started += 1;
            }
            if pending == 0 {
                continue;
            }
            if let Err(e) = self.poll.poll(&mut events, Some(SWEEP)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    self.tally.failures.add(Kind::Other);
                    return;
                }
            }
            for ev in events.iter() {
                if let Some(i) = ev.token().0.checked_sub(base) {
                    pending -= self.settle_idle(i);
                }
            }
            if last_sweep.elapsed() >= SWEEP {
                last_sweep = Instant::now();
                pending -= self.expire_idle(last_sweep);
            }
            self.progress
                .idle
                .store(self.idle_open_count(), Ordering::Relaxed);
        }
        self.progress
            .idle
            .store(self.idle_open_count(), Ordering::Relaxed);
    }

    fn idle_open_count(&self) -> u64 {
        self.idle
            .iter()
            .filter(|(_, s)| matches!(s, IdleState::Open))
            .count() as u64
    }

    /// Learns whether idle connection `i` connected; returns 1 when it stopped being pending.
    fn settle_idle(&mut self, i: usize) -> usize {
        let Some((stream, state)) = self.idle.get_mut(i) else {
            return 0;
        };
        if !matches!(state, IdleState::Connecting(_)) {
            return 0;
        }
        let kind = match stream.take_error() {
            Ok(Some(e)) | Err(e) => Kind::of(&e),
            Ok(None) => match stream.peer_addr() {
                Ok(_) => {
                    *state = IdleState::Open;
                    return 1;
                }
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return 0,
                Err(e) => Kind::of(&e),
            },
        };
        *state = IdleState::Failed;
        self.tally.failures.add(kind);
        1
    }

    fn expire_idle(&mut self, now: Instant) -> usize {
        let mut expired = 0;
        for (_, state) in self.idle.iter_mut() {
            if let IdleState::Connecting(t) = state {
                if now.duration_since(*t) > self.plan.timeout {
                    *state = IdleState::Failed;
                    self.tally.failures.add(Kind::Timeout);
                    expired += 1;
                }
            }
        }
        expired
    }

    /// At the end: an idle connection still open reads `WouldBlock`; one the server closed reads
    /// EOF or an error (`idle_closed`); one the server wrote to is a `bad_response`.
    fn check_idle(&mut self) {
        let mut byte = [0u8; 1];
        for (stream, state) in self.idle.iter_mut() {
            if !matches!(state, IdleState::Open) {
                continue;
            }
            match stream.read(&mut byte) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.tally.idle_held += 1,
                Ok(0) | Err(_) => self.tally.failures.add(Kind::IdleClosed),
                Ok(_) => self.tally.failures.add(Kind::BadResponse),
            }
        }
    }

    // --- active clients ---

    fn drive_active(&mut self) {
        let now = Instant::now();
        match self.plan.stop {
            Stop::Requests(r) => self.left = r,
            Stop::After(d) => self.deadline = Some(now + d),
        }
        for i in 0..self.slots.len() {
            self.restart(i, now);
            self.drive(i);
        }
        let mut events = Events::with_capacity(1024);
        let mut last_sweep = now;
        let mut last_probe = now;
        while self.busy > 0 {
            let now = Instant::now();
            let mut wait = if self.marked > 0 { PROBE } else { SWEEP };
            if let Some(d) = self.deadline {
                if now >= d {
                    break;
                }
                wait = wait.min(d - now);
            }
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    self.tally.failures.add(Kind::Other);
                    return;
                }
            }
            for ev in events.iter() {
                if ev.token().0 < self.slots.len() {
                    self.drive(ev.token().0);
                }
            }
            if self.marked > 0 && last_probe.elapsed() >= PROBE {
                last_probe = Instant::now();
                self.probe(last_probe);
            }
            // Next requests on kept-alive connections go out together, after this turn's reads
            // (the probe's included). Sending never finishes a response, so none is added here.
            let deferred = std::mem::take(&mut self.deferred);
            for &i in &deferred {
                self.drive(i);
            }
            self.deferred = deferred;
            self.deferred.clear();
            if last_sweep.elapsed() >= SWEEP {
                last_sweep = Instant::now();
                self.expire(last_sweep);
            }
        }
    }

    /// Whether another request may start now.
    fn claim(&mut self, now: Instant) -> bool {
        match self.deadline {
            Some(d) => now < d,
            None if self.left > 0 => {
                self.left -= 1;
                true
            }
            None => false,
        }
    }

    /// Starts the slot's next request on a new connection, or frees the slot when the run is over.
    /// Does not write: the caller's `drive` loop does, so a chain of failures never recurses.
    fn restart(&mut self, i: usize, mut now: Instant) {
        loop {
            self.slots[i].conn = None;
            if self.slots[i].lowat > 1 {
                self.marked -= 1;
            }
            self.slots[i].lowat = 1;
            self.slots[i].expect = 0;
            self.slots[i].reset_response();
            if !self.claim(now) {
                if self.slots[i].phase != Phase::Free {
                    self.busy -= 1;
                }
                self.slots[i].phase = Phase::Free;
                return;
            }
            if self.slots[i].phase == Phase::Free {
                self.busy += 1;
            }
            self.slots[i].started = now;
            self.slots[i].phase = Phase::Sending(0);
            match self.connect(Token(i)) {
                Ok(s) => {
                    self.slots[i].conn = Some(s);
                    return;
                }
                Err(e) => {
                    self.record(i, now);
                    self.count_failure(Kind::of(&e));
                    now = Instant::now();
                }
            }
        }
    }

    /// Advances slot `i` as far as its socket allows. A new connection is written to at once:
    /// loopback connects usually complete within the connect call, which saves a loop turn.
    fn drive(&mut self, i: usize) {
        loop {
            match self.slots[i].phase {
                Phase::Free => return,
                Phase::Sending(off) => match self.send(i, off) {
                    // No read now: the answer cannot be there yet, and a read that finds nothing
                    // would cost a syscall per request. Its arrival brings a readable edge.
                    Ok(true) => {
                        self.slots[i].phase = Phase::Receiving;
                        return;
                    }
                    Ok(false) => return,
                    Err(kind) => self.fail(i, kind),
                },
                Phase::Receiving => match self.receive(i) {
                    Read_::Wait => {
                        // Part of the response is here: the mark may exceed what is left.
                        if self.slots[i].lowat > 1 && self.slots[i].raw > 0 {
                            self.set_lowat(i, 1);
                        }
                        return;
                    }
                    Read_::Whole(ok, reusable) => {
                        if self.finish(i, ok, reusable) {
                            self.deferred.push(i);
                            return;
                        }
                    }
                    Read_::Failed(kind) => self.fail(i, kind),
                },
            }
        }
    }

    /// Writes the rest of the request; true when all of it is written.
    fn send(&mut self, i: usize, mut off: usize) -> Result<bool, Kind> {
        let slot = &mut self.slots[i];
        let Some(conn) = slot.conn.as_mut() else {
            return Err(Kind::Other);
        };
        while off < self.plan.request.len() {
            match conn.write(&self.plan.request[off..]) {
                Ok(n) => off += n,
                Err(e) if is_wait(&e) => {
                    slot.phase = Phase::Sending(off);
                    return Ok(false);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Kind::of(&e)),
            }
        }
        Ok(true)
    }

    /// Reads what has arrived and feeds it to the parser.
    fn receive(&mut self, i: usize) -> Read_ {
        let slot = &mut self.slots[i];
        let Some(mut conn) = slot.conn.take() else {
            return Read_::Failed(Kind::Other);
        };
        let r = read_response(&mut conn, slot, self.plan.line_mode);
        slot.conn = Some(conn);
        r
    }

    /// Records a whole response. With keep-alive and a reusable connection the next request goes
    /// on the same connection, else on a new one.
    /// Returns true when the next request goes on the same connection (sent at the turn's end).
    fn finish(&mut self, i: usize, ok: bool, reusable: bool) -> bool {
        let now = Instant::now();
        self.record(i, now);
        // Only whole responses feed the recent latency: a timeout must not stretch the probe.
        let us = now
            .saturating_duration_since(self.slots[i].started)
            .as_micros() as u64;
        self.recent_us = if self.recent_us == 0 {
            us
        } else {
            (self.recent_us * 31 + us) / 32
        };
        if ok {
            self.tally.complete += 1;
            self.progress
                .done
                .store(self.tally.complete, Ordering::Relaxed);
        } else {
            self.count_failure(Kind::BadResponse);
        }
        if self.plan.keepalive && reusable && self.claim(now) {
            self.mark(i);
            let slot = &mut self.slots[i];
            slot.reset_response();
            slot.started = now;
            slot.phase = Phase::Sending(0);
            true
        } else {
            self.restart(i, now);
            false
        }
    }

    /// Records a failed request and starts the next one; the caller's `drive` loop sends it.
    fn fail(&mut self, i: usize, kind: Kind) {
        let now = Instant::now();
        self.record(i, now);
        self.count_failure(kind);
        self.restart(i, now);
    }

    fn count_failure(&mut self, kind: Kind) {
        self.tally.failures.add(kind);
        self.active_failed += 1;
        self.progress
            .failed
            .store(self.active_failed, Ordering::Relaxed);
    }

    /// Adds the slot's response bytes and latency to the tally.
    fn record(&mut self, i: usize, now: Instant) {
        let slot = &self.slots[i];
        self.tally.bytes += slot.raw;
        self.tally.body_bytes += slot.body;
        let us = now.saturating_duration_since(slot.started).as_micros() as u64;
        self.tally
            .latency
            .saturating_record(us.clamp(1, MAX_LATENCY_US));
    }

    /// Sets the receive low-water mark for the next response on a kept-alive connection: the size
    /// of the one just read, when it was Content-Length framed and fits the buffer. A response
    /// shorter than its mark turns the marks off in this event loop for the rest of the run.
    fn mark(&mut self, i: usize) {
        let slot = &self.slots[i];
        let size = u32::try_from(slot.raw).unwrap_or(u32::MAX);
        if slot.expect > 0 && size < slot.expect {
            self.marks_off(i);
            return;
        }
        let framed = slot
            .head
            .is_some_and(|h| matches!(h.framing, Framing::Length(_)));
        let want = if self.marks && framed && (size as usize) <= RECV_BUF {
            size
        } else {
            1
        };
        self.slots[i].expect = if want > 1 { want } else { 0 };
        if self.slots[i].lowat != want {
            self.set_lowat(i, want);
        }
    }

    /// Drops every mark: slot `short`'s response came back shorter than expected. Another
    /// request already waiting behind a mark is read at once.
    fn marks_off(&mut self, short: usize) {
        self.marks = false;
        for i in 0..self.slots.len() {
            self.slots[i].expect = 0;
            if self.slots[i].lowat > 1 {
                self.set_lowat(i, 1);
                if i != short && self.slots[i].phase == Phase::Receiving {
                    self.drive(i);
                }
            }
        }
    }

    /// Sets SO_RCVLOWAT. Lowering it makes the kernel signal data already there, so nothing is
    /// missed. If the call fails, the slot keeps the kernel's value and its mark is forgotten.
    fn set_lowat(&mut self, i: usize, bytes: u32) {
        let slot = &mut self.slots[i];
        let Some(conn) = slot.conn.as_ref() else {
            return;
        };
        let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        if quill_core::sys::set_recv_lowat(conn.as_fd(), value).is_ok() {
            match (slot.lowat > 1, bytes > 1) {
                (false, true) => self.marked += 1,
                (true, false) => self.marked -= 1,
                _ => {}
            }
            slot.lowat = bytes;
        } else if bytes > 1 {
            slot.expect = 0;
        }
    }

    /// Drops the mark of every request waiting much longer than recent ones did, in case its
    /// response is shorter than the mark, and reads what is there.
    fn probe(&mut self, now: Instant) {
        let late = Duration::from_micros((self.recent_us * 4).clamp(1_000, 50_000));
        for i in 0..self.slots.len() {
            let slot = &self.slots[i];
            if slot.lowat > 1
                && slot.phase == Phase::Receiving
                && now.saturating_duration_since(slot.started) > late
            {
                self.set_lowat(i, 1);
                self.drive(i);
            }
        }
    }

    /// Fails every request older than the timeout.
    fn expire(&mut self, now: Instant) {
        for i in 0..self.slots.len() {
            let slot = &self.slots[i];
            if slot.phase != Phase::Free && now.duration_since(slot.started) > self.plan.timeout {
                self.fail(i, Kind::Timeout);
                self.drive(i);
            }
        }
    }
}
