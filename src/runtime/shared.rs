//! What all workers share: the pools (swapped atomically), the session count against `-x`, the
//! process phase, the log generation and the counters. Atomics only: no lock on the data path.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use arc_swap::ArcSwap;

use crate::backend::Pool;
use crate::clock::Clock;
use crate::config::Global;
use crate::metrics::Counters;

/// Where the process is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Running,
    /// Not accepting; open sessions finish until the drain deadline.
    Draining,
    /// Closing everything now.
    Stopping,
}

pub struct Shared {
    pub clock: Clock,
    /// One pool per listener, in listener order.
    pub pools: Vec<ArcSwap<Pool>>,
    pub max_sessions: u64,
    pub active: AtomicU64,
    pub accept_batch: u32,
    /// Whether bulk flows use splice pipes.
    pub splice: bool,
    phase: AtomicU8,
    pub drain_deadline_ms: AtomicU64,
    /// Bumped by SIGHUP: workers reopen the access log.
    pub log_generation: AtomicU64,
    pub access_log: Option<PathBuf>,
    /// One per worker.
    pub counters: Vec<Counters>,
}

impl Shared {
    /// Shared state for `g.workers` workers over `pools` (one per listener).
    pub fn new(clock: Clock, pools: Vec<ArcSwap<Pool>>, max_sessions: u64, g: &Global) -> Shared {
        Shared {
            clock,
            pools,
            max_sessions,
            active: AtomicU64::new(0),
            accept_batch: g.accept_batch.max(1),
            splice: g.splice,
            phase: AtomicU8::new(0),
            drain_deadline_ms: AtomicU64::new(u64::MAX),
            log_generation: AtomicU64::new(0),
            access_log: g.log.clone(),
            counters: (0..g.workers).map(|_| Counters::default()).collect(),
        }
    }

    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Acquire) {
            0 => Phase::Running,
            1 => Phase::Draining,
            _ => Phase::Stopping,
        }
    }

    pub fn set_phase(&self, phase: Phase) {
        let v = match phase {
            Phase::Running => 0,
            Phase::Draining => 1,
            Phase::Stopping => 2,
        };
        self.phase.store(v, Ordering::Release);
    }
}
