//! UDP mode (`udp://HOST:PORT`): request/response over datagrams, loss counted exactly.
//!
//! Each active client is one flow: one connected UDP socket for the whole run (a balancer sees
//! one client address and port per flow). A flow sends a datagram of `--size` bytes whose first
//! 8 bytes are a sequence number (little-endian), waits for the same bytes back, and sends the
//! next. A reply is matched to its request by that number, so the counts are exact:
//! - the echo of the request in flight, with every byte right: a complete request;
//! - the right number but other bytes or another length: `bad_response`;
//! - no reply within `--timeout`: lost (`timeout`); its reply, if it still comes, is `late`;
//! - an ICMP port unreachable (ECONNREFUSED on the connected socket): `refused`.
//!
//! A `--duration` run stops sending at the deadline and then waits for the requests in flight
//! (their replies or their timeouts), so every datagram sent is accounted for; the run's length is
//! the deadline or the last reply after it, whichever is later.
//!
//! Idle flows (`--idle F`): each sends one datagram and waits for its reply (so the balancer holds
//! a flow with a server), then stays silent until the end. At the end an idle flow counts as held
//! if nothing arrived on it meanwhile (no datagram, no ICMP error).
//!
//! Nothing is allocated per datagram: the payload is built once per thread (the sequence number
//! written into it before each send) and one receive buffer serves every flow.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};
use socket2::{Domain, Socket, Type};

use super::{Gate, IdleState, Kind, Plan, Progress, Stop, Tally, MAX_LATENCY_US};

/// Bytes of the sequence number at the start of every datagram.
const SEQ: usize = 8;
/// Idle flows waiting for their first reply at once, per thread. A burst of new flows is what a
/// balancer handles worst (a new server socket each): against nginx with 10 workers on 2 CPUs,
/// 256 at once per process lost 5-15% of the first datagrams (full socket buffers), so the opening
/// goes in smaller steps; a flow takes one round trip, so 32 still open thousands a second.
const IDLE_BATCH: usize = 32;
/// Largest datagram read; anything longer is cut and so does not match (bad_response).
const RECV_BUF: usize = 65_536;

/// Runs one thread's share of a UDP run (see [`Plan::run`]): idle flows, gate, active flows,
/// gate, idle check. The gates are passed even when something fails.
pub(super) fn run(
    plan: Plan,
    gate: &Gate,
    progress: &Progress,
) -> Result<(Tally, Instant), String> {
    let mut engine = match Udp::new(plan, progress) {
        Ok(e) => e,
        Err(e) => {
            gate.pass(1);
            gate.pass(2);
            return Err(e);
        }
    };
    engine.open_idle();
    gate.pass(1);
    let end = engine.drive_active();
    gate.pass(2);
    engine.check_idle();
    Ok((engine.tally, end))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// No request in flight.
    Free,
    /// The send would block: retried on the writable edge.
    Sending,
    /// Sent; waiting for the echo.
    Waiting,
}

struct Flow {
    sock: UdpSocket,
    state: State,
    /// The sequence number of the request in flight.
    seq: u64,
    started: Instant,
}

struct IdleFlow {
    sock: Option<UdpSocket>,
    state: IdleState,
    seq: u64,
}

/// What a received datagram is to the flow it arrived on.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// The echo of the request in flight.
    Match,
    /// The request in flight's number, but not its bytes.
    Bad,
    /// Matches no request in flight.
    Stray,
}

/// Judges `got` against the payload `sent` whose sequence number is `seq`, for a flow waiting
/// (or not) for it.
fn judge(got: &[u8], sent: &[u8], seq: u64, waiting: bool) -> Verdict {
    let number = got
        .get(..SEQ)
        .and_then(|b| <[u8; SEQ]>::try_from(b).ok())
        .map(u64::from_le_bytes);
    if !waiting || number != Some(seq) {
        return Verdict::Stray;
    }
    if got.len() == sent.len() && got[SEQ..] == sent[SEQ..] {
        Verdict::Match
    } else {
        Verdict::Bad
    }
}

/// The datagram of `size` bytes: the sequence number (zero here), then printable filler.
fn payload(size: usize) -> Vec<u8> {
    (0..size.max(SEQ))
        .map(|i| if i < SEQ { 0 } else { b'a' + (i % 26) as u8 })
        .collect()
}

struct Udp<'p> {
    plan: Plan,
    poll: Poll,
    flows: Vec<Flow>,
    idle: Vec<IdleFlow>,
    payload: Vec<u8>,
    buf: Box<[u8]>,
    tally: Tally,
    progress: &'p Progress,
    next_seq: u64,
    next_source: usize,
    /// Requests still to start (`Stop::Requests`), or the deadline (`Stop::After`).
    left: u64,
    deadline: Option<Instant>,
    busy: usize,
    active_failed: u64,
    /// When the last request finished (answered or failed).
    last_end: Option<Instant>,
}

impl<'p> Udp<'p> {
    /// Opens the active flows' sockets (before the clock starts).
    fn new(plan: Plan, progress: &'p Progress) -> Result<Udp<'p>, String> {
        let poll = Poll::new().map_err(|e| format!("cannot create an event loop: {e}"))?;
        let now = Instant::now();
        let mut u = Udp {
            payload: payload(plan.size),
            buf: vec![0; RECV_BUF].into_boxed_slice(),
            flows: Vec::with_capacity(plan.active),
            idle: Vec::with_capacity(plan.idle),
            tally: Tally::default(),
            progress,
            next_seq: 1,
            next_source: plan.first_source,
            left: 0,
            deadline: None,
            busy: 0,
            active_failed: 0,
            last_end: None,
            poll,
            plan,
        };
        for i in 0..u.plan.active {
            let sock = u
                .socket(Token(i), Interest::READABLE | Interest::WRITABLE)
                .map_err(|e| format!("cannot open UDP flow {}: {e}", i + 1))?;
            u.flows.push(Flow {
                sock,
                state: State::Free,
                seq: 0,
                started: now,
            });
        }
        Ok(u)
    }

    /// A nonblocking UDP socket connected to the target, bound to the next source address when
    /// there are several (the kernel picks the port), registered with `token`.
    fn socket(&mut self, token: Token, interest: Interest) -> io::Result<UdpSocket> {
        let addr = self.plan.addr;
        let socket = Socket::new(
            Domain::for_address(addr),
            Type::DGRAM.nonblocking().cloexec(),
            None,
        )?;
        if let Some(sources) = &self.plan.sources {
            let source = sources[self.next_source % sources.len()];
            self.next_source = self.next_source.wrapping_add(1);
            socket.bind(&SocketAddr::new(source, 0).into())?;
        }
        socket.connect(&addr.into())?;
        let mut sock = UdpSocket::from_std(socket.into());
        self.poll.registry().register(&mut sock, token, interest)?;
        Ok(sock)
    }

    /// Writes `seq` into the payload and sends it on `sock`.
    fn send_on(payload: &mut [u8], sock: &UdpSocket, seq: u64) -> io::Result<()> {
        payload[..SEQ].copy_from_slice(&seq.to_le_bytes());
        loop {
            match sock.send(payload) {
                Ok(n) if n == payload.len() => return Ok(()),
                Ok(_) => return Err(io::Error::other("datagram cut short")),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    // --- idle flows ---

    fn open_idle(&mut self) {
        let mut events = Events::with_capacity(1024);
        let base = self.flows.len();
        let (mut started, mut pending) = (0, 0);
        let mut last_sweep = Instant::now();
        while started < self.plan.idle || pending > 0 {
            while started < self.plan.idle && pending < IDLE_BATCH {
                let seq = self.next_seq;
                self.next_seq += 1;
                let token = Token(base + self.idle.len());
                let opened = self.socket(token, Interest::READABLE).and_then(|s| {
                    Udp::send_on(&mut self.payload, &s, seq)?;
                    Ok(s)
                });
                match opened {
                    Ok(s) => {
                        self.idle.push(IdleFlow {
                            sock: Some(s),
                            state: IdleState::Connecting(Instant::now()),
                            seq,
                        });
                        pending += 1;
                    }
                    Err(e) => {
                        self.tally.failures.add(Kind::of(&e));
                        self.idle.push(IdleFlow {
                            sock: None,
                            state: IdleState::Failed,
                            seq,
                        });
                    }
                }
                started += 1;
            }
            if pending == 0 {
                continue;
            }
            if let Err(e) = self.poll.poll(&mut events, Some(super::SWEEP)) {
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
            if last_sweep.elapsed() >= super::SWEEP {
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
            .filter(|f| matches!(f.state, IdleState::Open))
            .count() as u64
    }

    /// Reads what arrived on idle flow `i`; returns 1 when it stopped waiting for its reply.
    fn settle_idle(&mut self, i: usize) -> usize {
        let mut settled = 0;
        // Bounded: a flow's socket buffer holds a limited number of datagrams.
        for _ in 0..1_000 {
            let Some(flow) = self.idle.get(i) else {
                return settled;
            };
            let Some(sock) = flow.sock.as_ref() else {
                return settled;
            };
            let waiting = matches!(flow.state, IdleState::Connecting(_));
            let got = sock.recv(&mut self.buf);
            let flow = &mut self.idle[i];
            match got {
                Ok(n) => match judge(&self.buf[..n], &self.payload, flow.seq, waiting) {
                    Verdict::Match => {
                        flow.state = IdleState::Open;
                        settled = 1;
                    }
                    Verdict::Bad => {
                        flow.state = IdleState::Failed;
                        self.tally.failures.add(Kind::BadResponse);
                        settled = 1;
                    }
                    Verdict::Stray => self.tally.late += 1,
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return settled,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if waiting {
                        flow.state = IdleState::Failed;
                        self.tally.failures.add(Kind::of(&e));
                        settled = 1;
                    }
                }
            }
        }
        settled
    }

    fn expire_idle(&mut self, now: Instant) -> usize {
        let mut expired = 0;
        for flow in &mut self.idle {
            if let IdleState::Connecting(t) = flow.state {
                if now.duration_since(t) > self.plan.timeout {
                    flow.state = IdleState::Failed;
                    self.tally.failures.add(Kind::Timeout);
                    expired += 1;
                }
            }
        }
        expired
    }

    /// At the end: an idle flow that answered and has nothing waiting (no datagram, no ICMP
    /// error) is held; one with an error is `idle_closed`; one that received a datagram while
    /// silent is a `bad_response`.
    fn check_idle(&mut self) {
        for flow in &self.idle {
            let (Some(sock), IdleState::Open) = (flow.sock.as_ref(), &flow.state) else {
                continue;
            };
            match sock.recv(&mut self.buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.tally.idle_held += 1,
                Err(_) => self.tally.failures.add(Kind::IdleClosed),
                Ok(_) => self.tally.failures.add(Kind::BadResponse),
            }
        }
    }

    // --- active flows ---

    /// Runs the active phase; returns when it ended (see the module doc).
    fn drive_active(&mut self) -> Instant {
        let now = Instant::now();
        match self.plan.stop {
            Stop::Requests(r) => self.left = r,
            Stop::After(d) => self.deadline = Some(now + d),
        }
        for i in 0..self.flows.len() {
            self.next(i, now);
        }
        let mut events = Events::with_capacity(1024);
        let sweep = (self.plan.timeout / 4).clamp(Duration::from_millis(1), super::SWEEP);
        let mut last_sweep = now;
        while self.busy > 0 {
            if let Err(e) = self.poll.poll(&mut events, Some(sweep)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    self.tally.failures.add(Kind::Other);
                    break;
                }
            }
            for ev in events.iter() {
                let i = ev.token().0;
                if i >= self.flows.len() {
                    continue;
                }
                if ev.is_readable() || ev.is_error() {
                    self.readable(i);
                }
                if ev.is_writable() && self.flows[i].state == State::Sending && !self.send(i) {
                    self.next(i, Instant::now());
                }
            }
            if last_sweep.elapsed() >= sweep {
                last_sweep = Instant::now();
                self.expire(last_sweep);
            }
        }
        let last = self.last_end.unwrap_or(now);
        match self.deadline {
            Some(d) => last.max(d),
            None => last,
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

    /// Starts flow `i`'s next request, or frees the flow when the run is over. A send that fails
    /// at once is counted and the next request tried (bounded by the claims).
    fn next(&mut self, i: usize, now: Instant) {
        loop {
            if !self.claim(now) {
                if self.flows[i].state != State::Free {
                    self.busy -= 1;
                }
                self.flows[i].state = State::Free;
                return;
            }
            if self.flows[i].state == State::Free {
                self.busy += 1;
            }
            self.flows[i].started = now;
            self.flows[i].state = State::Sending;
            if self.send(i) {
                return;
            }
        }
    }

    /// Sends the request of flow `i` (state `Sending`). False when it failed (counted).
    fn send(&mut self, i: usize) -> bool {
        let seq = self.next_seq;
        self.next_seq += 1;
        let flow = &mut self.flows[i];
        flow.seq = seq;
        match Udp::send_on(&mut self.payload, &flow.sock, seq) {
            Ok(()) => {
                flow.state = State::Waiting;
                self.tally.sent += 1;
                true
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => true,
            Err(e) => {
                self.finished(i, Instant::now(), Err(Kind::of(&e)));
                false
            }
        }
    }

    /// Reads every datagram (or error) waiting on flow `i`.
    fn readable(&mut self, i: usize) {
        // Bounded: a socket buffer holds a limited number of datagrams.
        for _ in 0..1_000 {
            let flow = &self.flows[i];
            let waiting = flow.state == State::Waiting;
            let got = flow.sock.recv(&mut self.buf);
            let now = Instant::now();
            let outcome = match got {
                Ok(n) => match judge(&self.buf[..n], &self.payload, flow.seq, waiting) {
                    Verdict::Match => {
                        self.tally.bytes += n as u64;
                        self.tally.body_bytes += n as u64;
                        Ok(())
                    }
                    Verdict::Bad => Err(Kind::BadResponse),
                    Verdict::Stray => {
                        self.tally.late += 1;
                        continue;
                    }
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // An ICMP error for an earlier datagram: it belongs to the request in flight
                // only if there is one.
                Err(_) if !waiting => continue,
                Err(e) => Err(Kind::of(&e)),
            };
            let answered = outcome.is_ok();
            self.finished(i, now, outcome);
            self.next(i, now);
            if answered {
                // No read that would find nothing: the next request's echo cannot be here yet,
                // and its arrival brings a new edge (each datagram queued wakes an edge-triggered
                // epoll). A stray datagram queued behind the echo is read with that next one.
                return;
            }
        }
    }

    /// Records the end of flow `i`'s request: its latency, and a success or a failure.
    fn finished(&mut self, i: usize, now: Instant, outcome: Result<(), Kind>) {
        let flow = &mut self.flows[i];
        let us = now.saturating_duration_since(flow.started).as_micros() as u64;
        self.tally
            .latency
            .saturating_record(us.clamp(1, MAX_LATENCY_US));
        flow.state = State::Sending;
        self.last_end = Some(now);
        match outcome {
            Ok(()) => {
                self.tally.complete += 1;
                self.progress
                    .done
                    .store(self.tally.complete, Ordering::Relaxed);
            }
            Err(kind) => {
                self.tally.failures.add(kind);
                self.active_failed += 1;
                self.progress
                    .failed
                    .store(self.active_failed, Ordering::Relaxed);
            }
        }
    }

    /// Counts every request older than the timeout as lost and starts the flow's next one.
    fn expire(&mut self, now: Instant) {
        for i in 0..self.flows.len() {
            let flow = &self.flows[i];
            if flow.state != State::Free && now.duration_since(flow.started) > self.plan.timeout {
                self.finished(i, now, Err(Kind::Timeout));
                self.next(i, now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_matched_by_sequence_number_and_bytes() {
        let mut sent = payload(64);
        sent[..SEQ].copy_from_slice(&7u64.to_le_bytes());
        assert_eq!(judge(&sent, &sent, 7, true), Verdict::Match);
        // Late: an older request's echo, or no request in flight.
        assert_eq!(judge(&sent, &sent, 8, true), Verdict::Stray);
        assert_eq!(judge(&sent, &sent, 7, false), Verdict::Stray);
        // Right number, wrong bytes or length.
        let mut other = sent.clone();
        other[40] ^= 1;
        assert_eq!(judge(&other, &sent, 7, true), Verdict::Bad);
        assert_eq!(judge(&sent[..63], &sent, 7, true), Verdict::Bad);
        // Too short to carry a number.
        assert_eq!(judge(&sent[..5], &sent, 7, true), Verdict::Stray);
    }

    #[test]
    fn payload_has_the_size_asked_and_room_for_the_number() {
        assert_eq!(payload(512).len(), 512);
        assert_eq!(payload(8).len(), 8);
        assert!(payload(64)[SEQ..].iter().all(u8::is_ascii_lowercase));
    }
}
