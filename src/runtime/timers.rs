//! A worker's session deadlines: one heap of timers, each session with at most one live timer.
//!
//! A session has one deadline (connect, idle, FIN: whichever applies now) and tells it after every
//! call. Re-arming on every event would push a timer per read, so arming is lazy: a new timer only
//! when the deadline comes earlier than the armed one; a deadline that moved later is found when
//! the armed timer fires and the session, called early, answers with its deadline of now. A timer
//! is live while its slot's generation and timer number are the ones it carries; others are stale
//! and dropped when met. Closed sessions leave stale timers behind: when they outnumber the live
//! ones the heap is swept.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::proxy::NEVER;

/// Stale timers tolerated beyond two per session before the heap is swept.
const SLACK: usize = 1024;

/// One armed deadline of session `idx` (generation `gen`), numbered `seq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Timer {
    pub deadline: u64,
    pub idx: u32,
    pub gen: u32,
    pub seq: u32,
}

/// What a slot knows of its session's timer: when the live one fires ([`NEVER`]: none), and its
/// number.
#[derive(Clone, Copy, Debug)]
pub(super) struct Armed {
    at: u64,
    seq: u32,
}

impl Default for Armed {
    fn default() -> Armed {
        Armed { at: NEVER, seq: 0 }
    }
}

impl Armed {
    /// The live timer's number (a resolver answer carries it too).
    pub(super) fn seq(&self) -> u32 {
        self.seq
    }

    /// Whether `t` is the live timer (the caller checks the generation).
    pub(super) fn holds(&self, t: &Timer) -> bool {
        self.seq == t.seq
    }

    /// No timer is live any more (it fired, or the session closed). The number is kept, so the
    /// slot's next session does not take an old timer for its own.
    pub(super) fn clear(&mut self) {
        self.at = NEVER;
    }
}

#[derive(Debug, Default)]
pub(super) struct Timers {
    heap: BinaryHeap<Reverse<Timer>>,
}

impl Timers {
    /// Makes sure a timer fires at `at` or before for session `idx`: a new one when `at` is
    /// earlier than the armed one, or when `force`d (a new attempt that must not take an older
    /// timer's number); else nothing. A deadline already past fires next turn, not in a loop
    /// within this one. With no deadline ([`NEVER`]) the armed timer goes stale at once, so it
    /// leaves the heap as soon as it reaches the top instead of at its time (a burst of sessions
    /// that connect and fall idle does not keep a timer each). Returns the live timer's number.
    pub(super) fn arm(
        &mut self,
        armed: &mut Armed,
        idx: u32,
        gen: u32,
        at: u64,
        force: bool,
        now: u64,
    ) -> u32 {
        if at == NEVER {
            if armed.at != NEVER {
                armed.seq = armed.seq.wrapping_add(1);
                armed.at = NEVER;
            }
            return armed.seq;
        }
        if !force && at >= armed.at {
            return armed.seq;
        }
        armed.seq = armed.seq.wrapping_add(1);
        armed.at = at.max(now.saturating_add(1));
        self.heap.push(Reverse(Timer {
            deadline: armed.at,
            idx,
            gen,
            seq: armed.seq,
        }));
        armed.seq
    }

    /// When the earliest timer fires (it may be stale: waking for it is harmless).
    pub(super) fn next(&self) -> Option<u64> {
        self.heap.peek().map(|t| t.0.deadline)
    }

    /// The next live timer due at `now`, dropping the stale ones met on the way.
    pub(super) fn pop_due(&mut self, now: u64, live: impl Fn(&Timer) -> bool) -> Option<Timer> {
        while let Some(&Reverse(t)) = self.heap.peek() {
            let is_live = live(&t);
            if is_live && t.deadline > now {
                return None;
            }
            self.heap.pop();
            if is_live {
                return Some(t);
            }
        }
        None
    }

    /// Drops every stale timer once they outnumber the `sessions` live ones (with some slack).
    pub(super) fn sweep_stale(&mut self, sessions: usize, live: impl Fn(&Timer) -> bool) {
        if self.heap.len() > 2 * sessions + SLACK {
            self.heap.retain(|Reverse(t)| live(t));
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_deadline_keeps_the_armed_timer() {
        let (mut timers, mut armed) = (Timers::default(), Armed::default());
        let first = timers.arm(&mut armed, 0, 0, 100, false, 0);
        assert_eq!(timers.arm(&mut armed, 0, 0, 200, false, 0), first);
        assert_eq!(timers.len(), 1);
        assert_eq!(timers.next(), Some(100));
    }

    #[test]
    fn no_deadline_makes_the_armed_timer_stale_at_once() {
        let (mut timers, mut armed) = (Timers::default(), Armed::default());
        let first = timers.arm(&mut armed, 0, 0, 100, false, 0);
        assert_ne!(timers.arm(&mut armed, 0, 0, NEVER, false, 0), first);
        // Dropped when met at the top, long before its time.
        assert_eq!(timers.pop_due(1, |t: &Timer| armed.holds(t)), None);
        assert_eq!(timers.len(), 0);
        // Nothing armed: no deadline changes nothing.
        let seq = armed.seq();
        assert_eq!(timers.arm(&mut armed, 0, 0, NEVER, false, 0), seq);
    }

    #[test]
    fn an_earlier_deadline_arms_a_new_timer_and_the_old_one_goes_stale() {
        let (mut timers, mut armed) = (Timers::default(), Armed::default());
        timers.arm(&mut armed, 3, 7, 200, false, 0);
        let seq = timers.arm(&mut armed, 3, 7, 100, false, 0);
        assert_eq!(timers.len(), 2);
        let live = |t: &Timer| t.gen == 7 && t.seq == seq;
        assert_eq!(timers.pop_due(99, live), None);
        let t = timers.pop_due(150, live).expect("the 100 ms timer is due");
        assert_eq!((t.deadline, t.idx, t.seq), (100, 3, seq));
        armed.clear();
        // The 200 ms timer is stale: dropped without firing.
        assert_eq!(timers.pop_due(250, |t: &Timer| armed.holds(t)), None);
        assert_eq!(timers.len(), 0);
    }

    #[test]
    fn after_firing_any_deadline_is_armed_again() {
        let (mut timers, mut armed) = (Timers::default(), Armed::default());
        timers.arm(&mut armed, 0, 0, 100, false, 0);
        assert!(timers.pop_due(100, |t: &Timer| armed.holds(t)).is_some());
        armed.clear();
        timers.arm(&mut armed, 0, 0, 5000, false, 100);
        assert_eq!(timers.next(), Some(5000));
    }

    #[test]
    fn a_forced_arm_always_gets_a_new_number() {
        let (mut timers, mut armed) = (Timers::default(), Armed::default());
        let a = timers.arm(&mut armed, 0, 0, 100, false, 0);
        let b = timers.arm(&mut armed, 0, 0, 300, true, 0);
        assert_ne!(a, b);
        assert_eq!(armed.seq(), b);
        assert!(timers
            .pop_due(1000, |t: &Timer| armed.holds(t))
            .is_some_and(|t| t.deadline == 300));
    }

    #[test]
    fn a_deadline_already_past_fires_next_turn() {
        let (mut timers, mut armed) = (Timers::default(), Armed::default());
        timers.arm(&mut armed, 0, 0, 5, false, 10);
        assert_eq!(timers.next(), Some(11));
        assert_eq!(timers.pop_due(10, |t: &Timer| armed.holds(t)), None);
    }

    #[test]
    fn stale_timers_are_swept_when_they_outnumber_the_sessions() {
        let mut timers = Timers::default();
        for i in 0..(SLACK as u32 + 10) {
            let mut armed = Armed::default();
            timers.arm(&mut armed, i, 0, 1000, false, 0);
        }
        // Only session 0 is still open.
        timers.sweep_stale(1, |t: &Timer| t.idx == 0);
        assert_eq!(timers.len(), 1);
    }
}
