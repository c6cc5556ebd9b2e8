//! Counters: what happened to sessions, kept per worker (no shared cache line on the data path) and
//! summed when read; HTTP requests per listener and per route ([`HttpStats`], one block per worker
//! as well).
//! Names follow `quill_<subsystem>_<what>_<unit>` when exported (src/admin/prometheus.rs).
//!
//! HTTP responses are also counted by [`Source`] (who made them) and status class, with the 304s
//! and 206s apart; the worker's file cache publishes its hits, misses and entries here
//! ([`FileCacheCounts`]); the running CGI children are one process-wide gauge
//! ([`cgi_started`], [`cgi_ended`]).

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
    /// The TLS handshake failed (the reason is counted in `tls_failures`).
    TlsFailed,
    /// The TLS handshake took longer than `handshake_timeout`.
    TlsTimeout,
    /// A UDP flow made room for a new one at `max_flows` (the flow idle for longest).
    Evicted,
    /// A UDP flow had its `flow_responses` replies.
    Responses,
    /// A listener with `accept_proxy`: the client's source is not one of its trusted networks,
    /// closed at accept.
    ProxyUntrusted,
    /// A listener with `accept_proxy`: a trusted source sent no valid PROXY header (bad bytes,
    /// EOF or the deadline first).
    ProxyInvalid,
    /// A bug: the session's code panicked, and the session alone was reset (`runtime::panics`).
    Panic,
}

impl End {
    pub(crate) const ALL: [End; 19] = [
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
        End::TlsFailed,
        End::TlsTimeout,
        End::Evicted,
        End::Responses,
        End::ProxyUntrusted,
        End::ProxyInvalid,
        End::Panic,
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
            End::TlsFailed => "tls_failed",
            End::TlsTimeout => "tls_timeout",
            End::Evicted => "evicted",
            End::Responses => "responses",
            End::ProxyUntrusted => "proxy_untrusted",
            End::ProxyInvalid => "proxy_invalid",
            End::Panic => "panic",
        }
    }
}

/// Who produced an HTTP response: the access log's SOURCE field and the `source` label of the
/// response metrics. The HTTP session sets it per response: `Server` for an exchange with a
/// pool's server (`Exchange::source`, which a FastCGI pool's exchange sets to `Fastcgi`), `File`
/// for what a static root answers, `Cgi` for a CGI script's response, `Quill` for Quill's own
/// answers (a route's redirect, respond or deny, a refusal, an error in place of a response).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Source {
    #[default]
    Server,
    File,
    Fastcgi,
    Cgi,
    Quill,
}

impl Source {
    pub(crate) const ALL: [Source; 5] = [
        Source::Server,
        Source::File,
        Source::Fastcgi,
        Source::Cgi,
        Source::Quill,
    ];

    /// Its word in the access log and its label value.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Source::Server => "server",
            Source::File => "file",
            Source::Fastcgi => "fastcgi",
            Source::Cgi => "cgi",
            Source::Quill => "quill",
        }
    }
}

/// What a worker's file cache has done and holds, as published (`Counters::publish_file_cache`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FileCacheCounts {
    pub hits: u64,
    pub misses: u64,
    /// Entries held now.
    pub entries: u64,
}

/// CGI children running now, process-wide (`quill_cgi_children`).
static CGI_CHILDREN: AtomicU64 = AtomicU64::new(0);

/// A CGI child was started: call once per child spawned, and [`cgi_ended`] once when it is
/// reaped (whatever ended it), so the gauge reads the children alive.
pub(crate) fn cgi_started() {
    CGI_CHILDREN.fetch_add(1, Ordering::Relaxed);
}

/// A CGI child counted by [`cgi_started`] was reaped. Never goes below 0.
pub(crate) fn cgi_ended() {
    let _ = CGI_CHILDREN.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
}

/// The CGI children running now.
pub(crate) fn cgi_children() -> u64 {
    CGI_CHILDREN.load(Ordering::Relaxed)
}

/// HTTP/2 error codes counted (RFC 9113 §7: 0 to 13; a larger one counts as 13's neighbour,
/// the last slot).
pub(crate) const H2_CODES: usize = 15;

/// One worker's counters. Aligned so two workers never share a cache line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Counters {
    /// The worker's index (which block of an [`HttpStats`] it writes).
    worker: usize,
    pub accepted: AtomicU64,
    pub connect_failures: AtomicU64,
    pub accept_errors: AtomicU64,
    /// Kept-alive HTTP clients this worker handed to another between two requests.
    pub moved: AtomicU64,
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
    /// HTTP responses by [`Source`] and status class (index as `http_classes`), and the 304s
    /// and 206s among them by source.
    responses: [[AtomicU64; 6]; Source::ALL.len()],
    not_modified: [AtomicU64; Source::ALL.len()],
    partial: [AtomicU64; Source::ALL.len()],
    /// The worker's file cache, as published ([`FileCacheCounts`]).
    file_cache_hits: AtomicU64,
    file_cache_misses: AtomicU64,
    file_cache_entries: AtomicU64,
    /// Malformed requests and responses, by `http1::Error` kind.
    http_parse_errors: [AtomicU64; HTTP_ERROR_KINDS],
    /// The worker's server connections for HTTP sessions (`state::idle::ServerConns`): opened and
    /// reused since the start. The worker publishes them once per turn of its event loop, before
    /// it waits (see `publish_server_conns`); idle ones are read live from the shared pools.
    server_conns_opened: AtomicU64,
    server_conns_reused: AtomicU64,
    /// TLS handshakes completed, by [`TlsKind`].
    tls_handshakes: [AtomicU64; TlsKind::ALL.len()],
    /// TLS handshakes failed, by [`TlsFailure`].
    tls_failures: [AtomicU64; TlsFailure::ALL.len()],
    /// HTTP/2: client connections, streams (requests) begun, and connections ended on an error
    /// Quill sent (GOAWAY), by error code.
    h2_connections: AtomicU64,
    h2_streams: AtomicU64,
    h2_errors: [AtomicU64; H2_CODES],
    /// UDP: flows this worker has open, and opened since the start.
    pub udp_flows_open: AtomicU64,
    pub udp_flows_total: AtomicU64,
    /// UDP: datagrams and bytes from clients to servers, and back.
    pub udp_datagrams_in: AtomicU64,
    pub udp_datagrams_out: AtomicU64,
    pub udp_bytes_in: AtomicU64,
    pub udp_bytes_out: AtomicU64,
    /// UDP: flows evicted at `max_flows`, and datagrams dropped (no server, cut short, a full
    /// socket buffer, a client over the limit with nothing to evict).
    pub udp_evictions: AtomicU64,
    pub udp_drops: AtomicU64,
    /// UDP: datagrams that made no flow, by [`UdpRefusal`] (counted in `udp_drops` too).
    pub udp_refused: [AtomicU64; UdpRefusal::ALL.len()],
    /// UDP: ICMP errors on flow sockets not taken as a server's (another sender, or quoting
    /// nothing the flow sent).
    pub udp_icmp_ignored: AtomicU64,
}

/// Why a UDP datagram made no flow (the `reason` label of `quill_udp_datagrams_refused_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UdpRefusal {
    /// Its source is one of Quill's own UDP listening addresses: answering would loop.
    QuillAddress,
    /// Its source is a server of the listener's pool: answering would ping-pong.
    PoolServer,
    /// Its source holds `max_flows_per_source` flows already.
    SourceLimit,
    /// The flows' share of the open-file limit is taken, and this worker had no flow of the
    /// listener to evict.
    Descriptors,
}

impl UdpRefusal {
    pub(crate) const ALL: [UdpRefusal; 4] = [
        UdpRefusal::QuillAddress,
        UdpRefusal::PoolServer,
        UdpRefusal::SourceLimit,
        UdpRefusal::Descriptors,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            UdpRefusal::QuillAddress => "quill_address",
            UdpRefusal::PoolServer => "pool_server",
            UdpRefusal::SourceLimit => "source_limit",
            UdpRefusal::Descriptors => "descriptors",
        }
    }
}

/// What a completed TLS handshake was: its version, and full or resumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TlsKind {
    Full12,
    Resumed12,
    Full13,
    Resumed13,
}

impl TlsKind {
    pub(crate) const ALL: [TlsKind; 4] = [
        TlsKind::Full12,
        TlsKind::Resumed12,
        TlsKind::Full13,
        TlsKind::Resumed13,
    ];

    /// The `version` and `kind` labels.
    pub(crate) fn labels(self) -> (&'static str, &'static str) {
        match self {
            TlsKind::Full12 => ("1.2", "full"),
            TlsKind::Resumed12 => ("1.2", "resumed"),
            TlsKind::Full13 => ("1.3", "full"),
            TlsKind::Resumed13 => ("1.3", "resumed"),
        }
    }
}

/// Why a TLS handshake failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TlsFailure {
    /// Not done within `handshake_timeout`.
    Timeout,
    /// The client closed or reset before the end.
    Closed,
    /// No version, cipher suite, group or ALPN protocol in common.
    Incompatible,
    /// No certificate for the client's server name (strict SNI), or none usable for its
    /// signature schemes.
    NoCertificate,
    /// The client's certificate was missing, invalid or revoked.
    ClientCertificate,
    /// The client sent an alert (e.g. it refused our certificate).
    Alert,
    /// Bytes that are not TLS, or a malformed message.
    Protocol,
    /// Over `max_handshakes` in progress on the worker: closed at accept.
    Overload,
    /// The least recently active handshake, closed to make room for a new client (over
    /// `max_handshakes` or `max_handshakes_per_source`).
    Evicted,
    Other,
}

impl TlsFailure {
    pub(crate) const ALL: [TlsFailure; 10] = [
        TlsFailure::Timeout,
        TlsFailure::Closed,
        TlsFailure::Incompatible,
        TlsFailure::NoCertificate,
        TlsFailure::ClientCertificate,
        TlsFailure::Alert,
        TlsFailure::Protocol,
        TlsFailure::Overload,
        TlsFailure::Evicted,
        TlsFailure::Other,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            TlsFailure::Timeout => "timeout",
            TlsFailure::Closed => "closed",
            TlsFailure::Incompatible => "incompatible",
            TlsFailure::NoCertificate => "no_certificate",
            TlsFailure::ClientCertificate => "client_certificate",
            TlsFailure::Alert => "alert",
            TlsFailure::Protocol => "protocol",
            TlsFailure::Overload => "overload",
            TlsFailure::Evicted => "evicted",
            TlsFailure::Other => "other",
        }
    }
}

/// What the worker's server connection pool has done, as published (`Counters::server_conns`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ServerConnCounts {
    pub opened: u64,
    pub reused: u64,
}

/// HTTP requests of one listener or one route, kept per worker: one block each, on
/// cache lines of its own, written only by its worker. Summed when read.
#[derive(Debug)]
pub(crate) struct HttpStats {
    blocks: Box<[HttpBlock]>,
}

#[derive(Debug, Default)]
#[repr(align(128))]
struct HttpBlock {
    /// Requests by status class (index 1-5; 0 = no status: cut before a reply was sent).
    classes: [AtomicU64; 6],
    /// Request durations (head received to response sent): counts per bucket of
    /// `REQUEST_BUCKETS_US`, the last open-ended, and the sum in microseconds.
    buckets: [AtomicU64; REQUEST_BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
}

/// [`HttpStats`] summed over the workers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct HttpTotals {
    /// By status class: index 0 none, 1-5 = 1xx-5xx.
    pub classes: [u64; 6],
    /// Timed requests per bucket of `REQUEST_BUCKETS_US` (not cumulative; the last is
    /// open-ended) and their sum in microseconds.
    pub buckets: Vec<u64>,
    pub sum_us: u64,
}

/// The label of status class `i` of [`HttpTotals::classes`].
pub(crate) const HTTP_CLASS_NAMES: [&str; 6] = ["none", "1xx", "2xx", "3xx", "4xx", "5xx"];

fn class_of(status: u16) -> usize {
    usize::from(status / 100).min(5)
}

fn bucket_of(us: u64) -> usize {
    REQUEST_BUCKETS_US
        .iter()
        .position(|&le| us <= le)
        .unwrap_or(REQUEST_BUCKETS_US.len())
}

impl HttpStats {
    /// Room for `workers` workers.
    pub(crate) fn new(workers: usize) -> HttpStats {
        HttpStats {
            blocks: (0..workers.max(1)).map(|_| HttpBlock::default()).collect(),
        }
    }

    /// Counts one request of worker `worker` in status class `class` (see [`class_of`]) and,
    /// when it was timed, `us` microseconds in bucket `bucket` (see [`bucket_of`]); Quill's own
    /// refusals are not timed.
    fn count(&self, worker: usize, class: usize, timed: Option<(usize, u64)>) {
        let Some(b) = self.blocks.get(worker) else {
            return;
        };
        Counters::add(&b.classes[class], 1);
        if let Some((bucket, us)) = timed {
            Counters::add(&b.buckets[bucket], 1);
            Counters::add(&b.sum_us, us);
        }
    }

    /// The workers' blocks summed.
    pub(crate) fn totals(&self) -> HttpTotals {
        let mut t = HttpTotals {
            buckets: vec![0; REQUEST_BUCKETS_US.len() + 1],
            ..HttpTotals::default()
        };
        for b in self.blocks.iter() {
            for (acc, c) in t.classes.iter_mut().zip(&b.classes) {
                *acc += c.load(Ordering::Relaxed);
            }
            for (acc, c) in t.buckets.iter_mut().zip(&b.buckets) {
                *acc += c.load(Ordering::Relaxed);
            }
            t.sum_us += b.sum_us.load(Ordering::Relaxed);
        }
        t
    }
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

    /// An HTTP/2 connection began.
    pub(crate) fn h2_connection(&self) {
        Self::add(&self.h2_connections, 1);
    }

    /// An HTTP/2 stream (a request) began.
    pub(crate) fn h2_stream(&self) {
        Self::add(&self.h2_streams, 1);
    }

    /// An HTTP/2 connection ended on an error Quill sent.
    pub(crate) fn h2_error(&self, code: quill_core::h2::Code) {
        let i = (code.0 as usize).min(H2_CODES - 1);
        Self::add(&self.h2_errors[i], 1);
    }

    /// (connections, streams, errors by code).
    pub(crate) fn h2_counts(&self) -> (u64, u64, [u64; H2_CODES]) {
        (
            self.h2_connections.load(Ordering::Relaxed),
            self.h2_streams.load(Ordering::Relaxed),
            std::array::from_fn(|i| self.h2_errors[i].load(Ordering::Relaxed)),
        )
    }

    pub(crate) fn tls_handshake(&self, kind: TlsKind) {
        Self::add(&self.tls_handshakes[kind as usize], 1);
    }

    pub(crate) fn tls_failure(&self, why: TlsFailure) {
        Self::add(&self.tls_failures[why as usize], 1);
    }

    pub(crate) fn tls_handshakes(&self, kind: TlsKind) -> u64 {
        self.tls_handshakes[kind as usize].load(Ordering::Relaxed)
    }

    pub(crate) fn tls_failures(&self, why: TlsFailure) -> u64 {
        self.tls_failures[why as usize].load(Ordering::Relaxed)
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

    /// Creates the counters of worker `worker` (its index in `Shared::counters`).
    pub(crate) fn new(worker: usize) -> Counters {
        Counters {
            worker,
            ..Counters::default()
        }
    }

    /// One HTTP request over, on the listener counted by `stats` and, when it reached routing
    /// on a listener with routes, on its route (or the listener's no-route counters) `route`:
    /// answered with `status` (0: none was), after `us` microseconds when given (head received
    /// to response sent; None for Quill's own refusals). Counted in the worker's totals too.
    /// Relaxed adds to the worker's own blocks only: no lock, no lookup.
    pub(crate) fn http_request(
        &self,
        stats: &HttpStats,
        route: Option<&HttpStats>,
        status: u16,
        us: Option<u64>,
    ) {
        // The class and the bucket once, for up to three places.
        let class = class_of(status);
        let timed = us.map(|us| (bucket_of(us), us));
        stats.count(self.worker, class, timed);
        if let Some(route) = route {
            route.count(self.worker, class, timed);
        }
        Self::add(&self.http_classes[class], 1);
        if let Some((bucket, us)) = timed {
            Self::add(&self.request_buckets[bucket], 1);
            Self::add(&self.request_sum_us, us);
        }
    }

    /// One HTTP response (status 0: none was sent) made by `source`, by class, and as a 304 or
    /// 206 when it is one.
    pub(crate) fn http_response(&self, source: Source, status: u16) {
        let s = source as usize;
        Self::add(&self.responses[s][class_of(status)], 1);
        match status {
            304 => Self::add(&self.not_modified[s], 1),
            206 => Self::add(&self.partial[s], 1),
            _ => {}
        }
    }

    /// Responses of `source`: by class (index as [`Counters::http_classes`]), then the 304s and
    /// the 206s.
    pub(crate) fn http_responses(&self, source: Source) -> ([u64; 6], u64, u64) {
        let s = source as usize;
        (
            std::array::from_fn(|i| self.responses[s][i].load(Ordering::Relaxed)),
            self.not_modified[s].load(Ordering::Relaxed),
            self.partial[s].load(Ordering::Relaxed),
        )
    }

    /// Publishes the worker's file cache counts (a store each; only when they moved).
    pub(crate) fn publish_file_cache(&self, now: FileCacheCounts) {
        for (c, v) in [
            (&self.file_cache_hits, now.hits),
            (&self.file_cache_misses, now.misses),
            (&self.file_cache_entries, now.entries),
        ] {
            if c.load(Ordering::Relaxed) != v {
                c.store(v, Ordering::Relaxed);
            }
        }
    }

    /// The file cache counts last published.
    pub(crate) fn file_cache(&self) -> FileCacheCounts {
        FileCacheCounts {
            hits: self.file_cache_hits.load(Ordering::Relaxed),
            misses: self.file_cache_misses.load(Ordering::Relaxed),
            entries: self.file_cache_entries.load(Ordering::Relaxed),
        }
    }

    /// Publishes the worker's server connection counts (a store each; only when they moved).
    pub(crate) fn publish_server_conns(&self, now: ServerConnCounts) {
        for (c, v) in [
            (&self.server_conns_opened, now.opened),
            (&self.server_conns_reused, now.reused),
        ] {
            if c.load(Ordering::Relaxed) != v {
                c.store(v, Ordering::Relaxed);
            }
        }
    }

    /// The server connection counts last published.
    pub(crate) fn server_conns(&self) -> ServerConnCounts {
        ServerConnCounts {
            opened: self.server_conns_opened.load(Ordering::Relaxed),
            reused: self.server_conns_reused.load(Ordering::Relaxed),
        }
    }

    /// One HTTP request answered with `status` (0: none was), in the worker's totals only.
    #[cfg(test)]
    fn http_status(&self, status: u16) {
        Self::add(&self.http_classes[class_of(status)], 1);
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
    let classes = workers.iter().fold([0u64; 6], |mut acc, c| {
        for (a, n) in acc.iter_mut().zip(c.http_classes()) {
            *a += n;
        }
        acc
    });
    if classes.iter().any(|&n| n > 0) {
        out += &format!(", http requests {}", classes.iter().sum::<u64>());
        for (name, n) in HTTP_CLASS_NAMES.iter().zip(classes) {
            if n > 0 {
                out += &format!(" {name} {n}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use quill_core::http1::Error;

    #[test]
    fn every_parse_error_kind_has_a_counter_and_a_unique_name() {
        assert!(Error::ALL.len() <= HTTP_ERROR_KINDS);
        let mut names = std::collections::BTreeSet::new();
        for (i, e) in Error::ALL.iter().enumerate() {
            assert_eq!(*e as usize, i, "{e:?} is not at its index in Error::ALL");
            assert!(names.insert(e.name()), "{} named twice", e.name());
        }
        // ALL ends with the last kind declared, so none is missing.
        assert_eq!(Error::ALL.len(), Error::Truncated as usize + 1);
    }

    #[test]
    fn http_requests_count_per_worker_block_by_class_and_bucket() {
        let stats = HttpStats::new(2);
        let (w0, w1) = (Counters::new(0), Counters::new(1));
        w0.http_request(&stats, None, 200, Some(250));
        w0.http_request(&stats, None, 204, Some(251));
        w1.http_request(&stats, None, 404, Some(20_000_000));
        w1.http_request(&stats, None, 400, None);
        w1.http_request(&stats, None, 0, None);
        w1.http_request(&stats, None, 503, Some(0));
        let t = stats.totals();
        assert_eq!(t.classes, [1, 0, 2, 0, 2, 1]);
        let mut want = vec![0; REQUEST_BUCKETS_US.len() + 1];
        want[0] = 2; // 250 µs (inclusive) and 0
        want[1] = 1; // 251 µs
        want[REQUEST_BUCKETS_US.len()] = 1; // past the last bound
        assert_eq!(t.buckets, want);
        assert_eq!(t.sum_us, 250 + 251 + 20_000_000);
        assert_eq!(w0.http_classes(), [0, 0, 2, 0, 0, 0]);
        assert_eq!(w1.http_classes(), [1, 0, 0, 0, 2, 1]);
        // A worker index past the blocks counts nowhere rather than panicking.
        Counters::new(7).http_request(&stats, None, 200, Some(1));
        assert_eq!(stats.totals().classes[2], 2);
    }

    #[test]
    fn a_request_with_a_route_counts_on_the_listener_and_on_the_route() {
        let (listener, api, web) = (HttpStats::new(2), HttpStats::new(2), HttpStats::new(2));
        let (w0, w1) = (Counters::new(0), Counters::new(1));
        w0.http_request(&listener, Some(&api), 200, Some(300));
        w1.http_request(&listener, Some(&api), 502, Some(5));
        w1.http_request(&listener, Some(&web), 301, None);
        w0.http_request(&listener, None, 400, None);
        assert_eq!(listener.totals().classes, [0, 0, 1, 1, 1, 1]);
        let a = api.totals();
        assert_eq!(a.classes, [0, 0, 1, 0, 0, 1]);
        assert_eq!(a.sum_us, 305);
        assert_eq!(a.buckets.iter().sum::<u64>(), 2);
        let w = web.totals();
        assert_eq!(w.classes, [0, 0, 0, 1, 0, 0]);
        assert_eq!(w.buckets.iter().sum::<u64>(), 0, "untimed answers stay out");
        assert_eq!(w0.http_classes(), [0, 0, 1, 0, 1, 0], "once in the totals");
    }

    #[test]
    fn server_connection_counts_publish_as_given() {
        let c = Counters::new(0);
        assert_eq!(c.server_conns(), ServerConnCounts::default());
        let now = ServerConnCounts {
            opened: 3,
            reused: 9,
        };
        c.publish_server_conns(now);
        assert_eq!(c.server_conns(), now);
    }

    #[test]
    fn responses_count_by_source_and_class_with_304_and_206_apart() {
        let c = Counters::new(0);
        c.http_response(Source::File, 200);
        c.http_response(Source::File, 304);
        c.http_response(Source::File, 206);
        c.http_response(Source::File, 206);
        c.http_response(Source::Server, 502);
        c.http_response(Source::Quill, 0);
        assert_eq!(c.http_responses(Source::File), ([0, 0, 3, 1, 0, 0], 1, 2));
        assert_eq!(c.http_responses(Source::Server), ([0, 0, 0, 0, 0, 1], 0, 0));
        assert_eq!(c.http_responses(Source::Quill), ([1, 0, 0, 0, 0, 0], 0, 0));
        assert_eq!(c.http_responses(Source::Cgi), ([0; 6], 0, 0));
        let names: std::collections::BTreeSet<_> = Source::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(names.len(), Source::ALL.len());
    }

    #[test]
    fn file_cache_counts_publish_as_given() {
        let c = Counters::new(0);
        assert_eq!(c.file_cache(), FileCacheCounts::default());
        let now = FileCacheCounts {
            hits: 5,
            misses: 2,
            entries: 2,
        };
        c.publish_file_cache(now);
        assert_eq!(c.file_cache(), now);
    }

    #[test]
    fn the_cgi_gauge_never_goes_below_zero() {
        // The one test that moves the process-wide gauge: it starts and ends at rest.
        let at_rest = cgi_children();
        cgi_started();
        cgi_started();
        assert_eq!(cgi_children(), at_rest + 2);
        cgi_ended();
        cgi_ended();
        assert_eq!(cgi_children(), at_rest);
        if at_rest == 0 {
            cgi_ended();
            assert_eq!(cgi_children(), 0);
        }
    }

    #[test]
    fn the_summary_names_http_requests_by_class_only_when_there_are_some() {
        let w = [Counters::new(0), Counters::new(1)];
        assert!(!summary(&w).contains("http"));
        w[0].http_status(200);
        w[1].http_status(502);
        w[1].http_status(200);
        assert!(
            summary(&w).ends_with(", http requests 3 2xx 2 5xx 1"),
            "{}",
            summary(&w)
        );
    }
}
