//! How many workers accept clients (`concentrate`). Every worker accepts while the machine has
//! a core to spare. When other processes (a load generator, the servers behind Quill, php-fpm)
//! leave no core idle, two half-busy workers each run dry and sleep, and each sleep is a
//! context switch that a single worker carrying the same load would not make (measured: `wrk
//! -c50` on 1 KiB, 2 workers 47.3 µs and 0.11 switches per request, 1 worker 43.3 µs and
//! 0.02). So while no core is idle and what Quill spends fits in one worker fewer, one fewer
//! accepts; the others hand their kept-alive HTTP clients over between requests. A worker is
//! added back once a core is idle again and the accepting ones are busy.
//!
//! The main loop samples `/proc/stat` (the machine) and `/proc/self/stat` (Quill) every
//! [`PERIOD`]; a change needs two samples in a row that call for it, and none follows another
//! within [`HOLD`] periods.

use std::time::{Duration, Instant};

/// How often the main loop samples the CPUs.
pub(super) const PERIOD: Duration = Duration::from_millis(250);
/// Idle cores (of the machine) below which a worker fewer may carry the load.
const CONTENDED_BELOW: f64 = 0.25;
/// Idle cores from which a worker more can run.
const SPARE_FROM: f64 = 0.5;
/// Busy share of the accepting workers (cores per worker) from which one more is added: they
/// are about saturated.
const BUSY_FROM: f64 = 0.9;
/// Periods after a change during which no other is made (no flapping).
const HOLD: u32 = 8;

/// One period's CPU use, in cores (a core fully used for the whole period is 1.0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Sample {
    /// The machine's idle time (idle and I/O wait).
    pub spare: f64,
    /// Quill's own time (user and system, every thread).
    pub quill: f64,
}

/// The number of accepting workers after a period like `s`, from `accepting` of `workers`.
pub(super) fn wanted(accepting: usize, workers: usize, s: Sample) -> usize {
    if accepting < workers && s.spare >= SPARE_FROM && s.quill >= accepting as f64 * BUSY_FROM {
        return accepting + 1;
    }
    if accepting > 1 && s.spare < CONTENDED_BELOW && s.quill <= (accepting - 1) as f64 {
        return accepting - 1;
    }
    accepting.clamp(1, workers.max(1))
}

/// Cumulative CPU ticks (USER_HZ) as `/proc` counts them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Ticks {
    /// All CPUs' time, every state but guest (counted within user).
    total: u64,
    /// All CPUs' idle and I/O wait time.
    idle: u64,
    /// This process's user and system time.
    own: u64,
    cpus: u32,
}

impl Ticks {
    /// Reads `/proc/stat` and `/proc/self/stat`; None when either cannot be read or parsed.
    pub(super) fn read() -> Option<Ticks> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        Ticks::parse(&stat, &own)
    }

    /// The ticks in the texts of `/proc/stat` and `/proc/PID/stat`.
    pub(super) fn parse(stat: &str, own: &str) -> Option<Ticks> {
        let mut lines = stat.lines();
        let first = lines.next()?.strip_prefix("cpu ")?;
        let v: Vec<u64> = first
            .split_whitespace()
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        // user nice system idle iowait irq softirq steal [guest guest_nice]
        if v.len() < 8 {
            return None;
        }
        let total = v[..8].iter().sum();
        let idle = v[3] + v[4];
        let cpus = lines
            .filter(|l| {
                l.strip_prefix("cpu")
                    .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
            })
            .count() as u32;
        // The command name may hold spaces and parentheses: fields are counted after its last
        // ')'. utime and stime are fields 14 and 15, the 12th and 13th after the name.
        let rest = &own[own.rfind(')')? + 1..];
        let mut f = rest.split_whitespace().skip(11);
        let utime: u64 = f.next()?.parse().ok()?;
        let stime: u64 = f.next()?.parse().ok()?;
        Some(Ticks {
            total,
            idle,
            own: utime + stime,
            cpus: cpus.max(1),
        })
    }

    /// What happened between `before` and `self`, in cores; None when no time passed.
    pub(super) fn since(&self, before: &Ticks) -> Option<Sample> {
        let total = self.total.checked_sub(before.total)?;
        if total == 0 {
            return None;
        }
        let cores = f64::from(self.cpus);
        let per = |t: u64| t as f64 / total as f64 * cores;
        Some(Sample {
            spare: per(self.idle.saturating_sub(before.idle)),
            quill: per(self.own.saturating_sub(before.own)),
        })
    }
}

/// The main loop's side: samples every [`PERIOD`] and sets [`Shared::accepting`].
///
/// [`Shared::accepting`]: crate::state::shared::Shared::accepting
pub(super) struct Balancer {
    last: Option<Ticks>,
    next: Instant,
    /// The change the previous sample called for (a change needs two in a row).
    called: Option<usize>,
    /// Periods left before another change may be made.
    hold: u32,
}

impl Balancer {
    pub(super) fn new() -> Balancer {
        Balancer {
            last: None,
            next: Instant::now() + PERIOD,
            called: None,
            hold: 0,
        }
    }

    /// When due, samples the CPUs and returns the new number of accepting workers, if it
    /// changes. With fewer than two sessions open there is nothing to gather or spread: nothing
    /// is read (an idle Quill makes no system call for this), and the next sample starts anew.
    pub(super) fn tick(
        &mut self,
        accepting: usize,
        workers: usize,
        sessions: u64,
    ) -> Option<usize> {
        let now = Instant::now();
        if now < self.next {
            return None;
        }
        self.next = now + PERIOD;
        if sessions < 2 {
            self.last = None;
            self.called = None;
            return None;
        }
        let ticks = Ticks::read()?;
        let sample = self.last.replace(ticks).and_then(|b| ticks.since(&b))?;
        if self.hold > 0 {
            self.hold -= 1;
            return None;
        }
        let want = wanted(accepting, workers, sample);
        if want == accepting {
            self.called = None;
            return None;
        }
        if self.called.replace(want) != Some(want) {
            return None;
        }
        self.called = None;
        self.hold = HOLD;
        tracing::debug!(
            "{want} of {workers} workers accept clients ({:.2} cores idle, Quill {:.2})",
            sample.spare,
            sample.quill
        );
        Some(want)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(spare: f64, quill: f64) -> Sample {
        Sample { spare, quill }
    }

    #[test]
    fn with_a_core_idle_every_worker_keeps_accepting() {
        // Half-busy workers on a machine with room: nothing changes.
        assert_eq!(wanted(2, 2, s(1.0, 1.0)), 2);
        assert_eq!(wanted(8, 8, s(0.3, 0.5)), 8);
    }

    #[test]
    fn under_contention_a_load_that_fits_gathers_on_fewer_workers() {
        // The benchmark's case: wrk holds one core, Quill's two workers 0.95 between them.
        assert_eq!(wanted(2, 2, s(0.05, 0.95)), 1);
        assert_eq!(wanted(4, 4, s(0.1, 1.5)), 3);
        assert_eq!(wanted(3, 4, s(0.1, 1.5)), 2);
        // Quill needs every accepting worker: none is let go.
        assert_eq!(wanted(2, 2, s(0.0, 1.4)), 2);
        // Never below one.
        assert_eq!(wanted(1, 2, s(0.0, 0.1)), 1);
    }

    #[test]
    fn gathered_workers_stay_gathered_while_no_core_is_idle() {
        // One worker at 0.93 with wrk on the other core: no core to add a worker on.
        assert_eq!(wanted(1, 2, s(0.07, 0.93)), 1);
    }

    #[test]
    fn a_busy_worker_gets_help_once_a_core_is_idle() {
        assert_eq!(wanted(1, 2, s(1.0, 0.95)), 2);
        assert_eq!(wanted(2, 4, s(2.0, 1.9)), 3);
        // Not saturated: one worker is enough even with idle cores.
        assert_eq!(wanted(1, 2, s(1.5, 0.3)), 1);
        assert_eq!(wanted(1, 2, s(0.6, 0.8)), 1);
        // Never above the workers there are.
        assert_eq!(wanted(2, 2, s(1.5, 1.9)), 2);
    }

    #[test]
    fn with_fewer_than_two_sessions_nothing_is_sampled() {
        let mut b = Balancer::new();
        b.next = Instant::now();
        assert_eq!(b.tick(2, 2, 1), None);
        assert_eq!(b.last, None, "nothing read");
        // With two sessions the first due tick reads the baseline.
        b.next = Instant::now();
        assert_eq!(b.tick(2, 2, 2), None);
        assert!(b.last.is_some(), "/proc read");
    }

    #[test]
    fn proc_texts_give_cores() {
        let stat = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\n\
                    cpu1 50 0 25 400 25 0 0 0 0 0\nintr 1 2 3\nctxt 99\n";
        let own = "1234 (quill (w) 2) S 1 2 3 4 5 6 7 8 9 10 30 20 0 0 20 0 3 0";
        let a = Ticks::parse(stat, own).unwrap();
        assert_eq!(a.cpus, 2);
        assert_eq!(a.total, 1000);
        assert_eq!(a.idle, 850);
        assert_eq!(a.own, 50);
        let stat2 = "cpu  200 0 100 850 50 0 0 0 0 0\ncpu0 x\ncpu1 y\n";
        let own2 = "1234 (quill (w) 2) S 1 2 3 4 5 6 7 8 9 10 80 40 0 0 20 0 3 0";
        let b = Ticks::parse(stat2, own2).unwrap();
        // 200 ticks passed over 2 CPUs: 50 idle = 0.5 core, 70 of Quill's = 0.7 core.
        assert_eq!(b.since(&a), Some(s(0.5, 0.7)));
        assert_eq!(a.since(&a), None);
        assert_eq!(Ticks::parse("cpu  1 2 3\n", own), None);
        assert_eq!(Ticks::parse(stat, "1234 no-parenthesis"), None);
    }
}
