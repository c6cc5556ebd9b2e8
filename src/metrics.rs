//! Counters: what happened to sessions, kept per worker (no shared cache line on the data path) and
//! summed when read. Names follow `quill_<subsystem>_<what>_<unit>` when exported.

use std::sync::atomic::{AtomicU64, Ordering};

/// How a session ended; one word in the access log and one counter each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Both directions finished normally.
    Done,
    ClientReset,
    ServerReset,
    IdleTimeout,
    FinTimeout,
    /// One side's EOF closed the session (`tcp_fastclose`).
    Fastclose,
    /// No server could be reached (all failed or unavailable, no emergency server).
    NoServer,
    /// Over `-x`: accepted and closed at once.
    Refused,
    /// Cut by the drain deadline or a second stop signal.
    Shutdown,
    /// A local failure (out of descriptors or memory).
    Error,
}

impl End {
    pub const ALL: [End; 10] = [
        End::Done,
        End::ClientReset,
        End::ServerReset,
        End::IdleTimeout,
        End::FinTimeout,
        End::Fastclose,
        End::NoServer,
        End::Refused,
        End::Shutdown,
        End::Error,
    ];

    pub fn name(self) -> &'static str {
        match self {
            End::Done => "done",
            End::ClientReset => "client_reset",
            End::ServerReset => "server_reset",
            End::IdleTimeout => "idle_timeout",
            End::FinTimeout => "fin_timeout",
            End::Fastclose => "fastclose",
            End::NoServer => "no_server",
            End::Refused => "refused",
            End::Shutdown => "shutdown",
            End::Error => "error",
        }
    }
}

/// One worker's counters. Aligned so two workers never share a cache line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Counters {
    pub accepted: AtomicU64,
    pub connect_failures: AtomicU64,
    pub accept_errors: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    ended: [AtomicU64; End::ALL.len()],
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        // Only the owning worker writes: a load and a store avoid a locked instruction.
        counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    pub fn ended(&self, end: End) {
        Self::add(&self.ended[end as usize], 1);
    }

    pub fn ended_count(&self, end: End) -> u64 {
        self.ended[end as usize].load(Ordering::Relaxed)
    }
}

/// Sums the workers' counters into one line for logs (`SIGUSR1`, exit).
pub fn summary(workers: &[Counters]) -> String {
    let sum = |f: &dyn Fn(&Counters) -> u64| workers.iter().map(f).sum::<u64>();
    let mut out = format!(
        "sessions accepted {}, bytes in {}, bytes out {}, connect failures {}, accept errors {}",
        sum(&|c| c.accepted.load(Ordering::Relaxed)),
        sum(&|c| c.bytes_in.load(Ordering::Relaxed)),
        sum(&|c| c.bytes_out.load(Ordering::Relaxed)),
        sum(&|c| c.connect_failures.load(Ordering::Relaxed)),
        sum(&|c| c.accept_errors.load(Ordering::Relaxed)),
    );
    for end in End::ALL {
        let n = sum(&|c| c.ended_count(end));
        if n > 0 {
            out += &format!(", {} {n}", end.name());
        }
    }
    out
}
