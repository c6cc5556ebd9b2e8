//! Counters: what happened to sessions, kept per worker (no shared cache line on the data path) and
//! summed when read. Names follow `quill_<subsystem>_<what>_<unit>` when exported.

use std::sync::atomic::{AtomicU64, Ordering};

/// How a session ended; one word in the access log and one counter each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
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
    /// Denied by the client ACL and closed (no abuse server).
    Denied,
    /// Closed by the operator (`close N`).
    Closed,
}

impl End {
    pub(crate) const ALL: [End; 12] = [
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
        End::Denied,
        End::Closed,
    ];

    pub(crate) fn name(self) -> &'static str {
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
            End::Denied => "denied",
            End::Closed => "closed",
        }
    }
}

/// One worker's counters. Aligned so two workers never share a cache line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Counters {
    pub accepted: AtomicU64,
    pub connect_failures: AtomicU64,
    pub accept_errors: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    ended: [AtomicU64; End::ALL.len()],
    /// Connect times (accept to backend connected): counts per bucket of `CONNECT_BUCKETS_US`,
    /// the last one open-ended, and the sum in microseconds.
    connect_buckets: [AtomicU64; CONNECT_BUCKETS_US.len() + 1],
    connect_sum_us: AtomicU64,
    /// HTTP requests answered, by status class (index 1-5; 0 = no status: cut before a reply).
    http_classes: [AtomicU64; 6],
    /// Request durations (head received to response sent): counts per bucket of
    /// `REQUEST_BUCKETS_US`, the last open-ended, and the sum in microseconds.
    request_buckets: [AtomicU64; REQUEST_BUCKETS_US.len() + 1],
    request_sum_us: AtomicU64,
    /// Malformed requests and responses, by `http1::Error` kind.
    http_parse_errors: [AtomicU64; HTTP_ERROR_KINDS],
}

/// Room for every `http1::Error` kind (checked by a unit test).
pub(crate) const HTTP_ERROR_KINDS: usize = 32;

/// Upper bounds (inclusive, microseconds) of the request duration histogram's buckets.
pub(crate) const REQUEST_BUCKETS_US: [u64; 14] = [
    250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 10_000_000,
];

/// Upper bounds (inclusive, microseconds) of the connect time histogram's buckets.
pub(crate) const CONNECT_BUCKETS_US: [u64; 12] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 100_000, 250_000, 1_000_000, 3_000_000,
];

impl Counters {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        // Only the owning worker writes: a load and a store avoid a locked instruction.
        counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    pub(crate) fn ended(&self, end: End) {
        Self::add(&self.ended[end as usize], 1);
    }

    pub(crate) fn ended_count(&self, end: End) -> u64 {
        self.ended[end as usize].load(Ordering::Relaxed)
    }

    /// Records one backend connection established after `us` microseconds.
    pub(crate) fn connected(&self, us: u64) {
        let b = CONNECT_BUCKETS_US
            .iter()
            .position(|&le| us <= le)
            .unwrap_or(CONNECT_BUCKETS_US.len());
        Self::add(&self.connect_buckets[b], 1);
        Self::add(&self.connect_sum_us, us);
    }

    /// One HTTP request answered with `status` (0: none was).
    pub(crate) fn http_status(&self, status: u16) {
        let class = usize::from(status / 100).min(5);
        Self::add(&self.http_classes[class], 1);
    }

    /// One HTTP request over, after `us` microseconds.
    pub(crate) fn http_request_done(&self, us: u64) {
        let b = REQUEST_BUCKETS_US
            .iter()
            .position(|&le| us <= le)
            .unwrap_or(REQUEST_BUCKETS_US.len());
        Self::add(&self.request_buckets[b], 1);
        Self::add(&self.request_sum_us, us);
    }

    /// One message refused by the HTTP parser.
    pub(crate) fn http_parse_error(&self, e: quill_core::http1::Error) {
        if let Some(c) = self.http_parse_errors.get(e as usize) {
            Self::add(c, 1);
        }
    }

    /// HTTP requests by status class (index 0: none, 1-5: 1xx-5xx).
    pub(crate) fn http_classes(&self) -> [u64; 6] {
        std::array::from_fn(|i| self.http_classes[i].load(Ordering::Relaxed))
    }

    /// Per-bucket request duration counts (not cumulative) and the sum (µs).
    pub(crate) fn request_histogram(&self) -> (Vec<u64>, u64) {
        (
            self.request_buckets
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
            self.request_sum_us.load(Ordering::Relaxed),
        )
    }

    /// Parse errors of the kind with this index.
    pub(crate) fn http_parse_errors(&self, kind: usize) -> u64 {
        self.http_parse_errors
            .get(kind)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Per-bucket connect counts (not cumulative; the last bucket is open-ended) and the sum (µs).
    pub(crate) fn connect_histogram(&self) -> (Vec<u64>, u64) {
        (
            self.connect_buckets
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
            self.connect_sum_us.load(Ordering::Relaxed),
        )
    }
}

/// Sums the workers' counters into one line for logs (`SIGUSR1`, exit).
pub(crate) fn summary(workers: &[Counters]) -> String {
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
