//! Following the shared phase: a drain (the listeners' queues taken, idle clients given one
//! more request within the grace, the deadline sweep) and a stop.

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use super::Worker;
use crate::metrics::End;
use crate::state::shared::Phase;

impl Worker {
    /// Applies the shared phase (drain, stop), and, after a wake-up, log reopening, listener
    /// changes and the control thread's requests. Returns true when the worker ends.
    pub(super) fn follow_phase(&mut self, now: u64) -> bool {
        if std::mem::take(&mut self.woken) {
            self.shared.heartbeats[self.id].store(now, Ordering::Relaxed);
            self.follow_log();
            if let Err(e) = self.sync_listeners(now) {
                tracing::warn!("worker {}: cannot register a listener: {e}", self.id);
            }
            self.follow_accepting(now);
            self.answer(now);
            self.take_resolved(now);
            self.take_queue_wakes(now);
        }
        for i in 0..self.listeners.len() {
            let p = self.listeners[i].paused_until;
            if p > 0 && p <= now && !self.draining {
                self.listeners[i].paused_until = 0;
                if !self.takes(i) {
                    // Registered again when this worker accepts again.
                    continue;
                }
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

    /// Cuts every session once the drain deadline has passed.
    pub(super) fn sweep(&mut self, now: u64) {
        let hard_deadline = match self.shared.phase() {
            Phase::Draining => Some(self.shared.drain_deadline_ms.load(Ordering::Relaxed)),
            _ => None,
        };
        if hard_deadline.is_some_and(|d| now >= d) {
            self.close_all(End::Shutdown, now);
        }
    }

    pub(super) fn start_drain(&mut self, now: u64) {
        self.draining = true;
        self.udp.start_drain(self.poll.as_raw_fd());
        for i in 0..self.listeners.len() {
            if self.listeners[i].paused_until == 0 {
                self.deregister_listener(i);
            }
            // Off the wait queue (or its accept cancelled, and what that took opened) first, then
            // take what is queued: a client that arrives after this wakes another process sharing
            // the socket (takeover) instead of waiting for us.
            self.reap(now);
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
            // Every worker has taken what was queued on its sockets. With one socket per worker
            // (`listen_per_worker`), clients the kernel queued on another worker's socket since
            // that worker's pass are taken here, the last pass before the close.
            for i in 0..self.listeners.len() {
                if self.listeners[i].own {
                    self.accept_every_socket(i, now);
                }
            }
            // The listening sockets close now, not when their last session ends, so a client
            // that connects during the drain is refused at once instead of being queued for
            // nobody and reset at exit. A process that took the sockets over (or systemd) holds
            // its own reference, and goes on accepting.
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

    pub(super) fn close_all(&mut self, end: End, now: u64) {
        for idx in 0..self.slots.len() {
            self.close(idx, end, now);
        }
        let mut cx = udp_cx!(self, now);
        self.udp.close_all(end, &mut cx);
    }
}
