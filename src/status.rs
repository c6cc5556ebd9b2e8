//! A point-in-time picture of the whole process: listeners, pools, every server's state and
//! counters, the session totals, HTTP listeners' (and their routes') requests by status class
//! and duration, HTTP responses by source, the file caches and the CGI children.
//! Everything that reports (the `servers` command, `/metrics`, `/api/status`, the status page,
//! Pen's HTML report) renders one of these, so they agree.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde::Serialize;

use crate::acl::AclId;
use crate::backend::{Health, Pool, Server};
use crate::metrics::{
    End, HttpStats, ServerConnCounts, Source, TlsFailure, TlsKind, CONNECT_BUCKETS_US,
    HTTP_CLASS_NAMES, REQUEST_BUCKETS_US,
};
use crate::state::controller::Controller;
use crate::state::shared::{Phase, Shared};
use crate::web::cache::FdBudget;

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Snapshot {
    pub version: &'static str,
    pub pid: u32,
    /// Unix time of the snapshot and of the process start.
    pub time: u64,
    pub started: u64,
    pub phase: &'static str,
    pub workers: usize,
    /// Workers that accept clients now (fewer than `workers` while `concentrate` gathers
    /// clients, see `runtime::balance`).
    pub workers_accepting: usize,
    pub max_sessions: u64,
    pub active_sessions: u64,
    pub totals: Totals,
    pub connect_time: Histogram,
    /// HTTP counters of the whole process (zero while no HTTP listener served a request).
    pub http: HttpProcess,
    /// TLS handshakes of the whole process.
    pub tls: TlsProcess,
    /// HTTP/2 client connections of the whole process.
    pub h2: H2Process,
    /// The workers' file caches (static roots) and the descriptors they hold.
    pub files: FilesStatus,
    /// CGI children.
    pub cgi: CgiStatus,
    pub listeners: Vec<ListenerStatus>,
    /// The named pools (`[[pool]]`) in configuration order, with their servers: routes send
    /// requests to them, so their servers are watched as a listener's are.
    pub pools: Vec<PoolStatus>,
    /// The pools whose servers come from DNS, with what discovery did for them.
    pub discovery: Vec<crate::state::shared::DiscoveryStat>,
}

/// A named pool (`[[pool]]`) and its servers.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct PoolStatus {
    pub name: String,
    pub mode: String,
    /// The health check in words, if any.
    pub health_check: Option<String>,
    pub servers: Vec<ServerStatus>,
    pub emergency: Option<ServerStatus>,
    pub queue: QueueStatus,
    /// The Maglev tables (mode `maglev`), best priority level first; empty otherwise.
    pub maglev: Vec<MaglevStatus>,
}

/// One Maglev table of a pool: its priority level, size and fingerprint (the same on every
/// Quill with the same servers, weights and priorities).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct MaglevStatus {
    pub prio: u32,
    pub size: usize,
    /// 16 hexadecimal digits.
    pub fingerprint: String,
}

impl MaglevStatus {
    pub(crate) fn of(pool: &crate::backend::Pool) -> Vec<MaglevStatus> {
        pool.maglev
            .iter()
            .flat_map(|m| m.fingerprints())
            .map(|(prio, size, fp)| MaglevStatus {
                prio,
                size,
                fingerprint: format!("{fp:016x}"),
            })
            .collect()
    }
}

/// HTTP requests waiting for a server while every usable one is at its `max`.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct QueueStatus {
    /// Waiting now.
    pub waiting: u64,
    /// Ever put in line, and given up at `queue_timeout` (answered 503).
    pub total: u64,
    pub timed_out: u64,
}

impl QueueStatus {
    fn of(q: &crate::queue::Queue) -> QueueStatus {
        QueueStatus {
            waiting: q.len() as u64,
            total: q.queued.load(Ordering::Relaxed),
            timed_out: q.timed_out.load(Ordering::Relaxed),
        }
    }
}

/// The workers' file caches, summed, and the process-wide descriptor budget they share.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct FilesStatus {
    /// Lookups answered from a cache entry, and those that went to the file system.
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Entries held now.
    pub cache_entries: u64,
    /// Descriptors of large files held open by the caches now, and the most they may hold.
    pub descriptors: u64,
    pub descriptors_max: u64,
    /// File ranges found not in the page cache and read off the workers before being sent.
    pub cold_reads: u64,
}

/// CGI children.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct CgiStatus {
    /// Running now.
    pub children: u64,
}

/// The HTTP responses one source made (`server`, `file`, `fastcgi`, `cgi`, `quill`), summed
/// over the workers and the listeners.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct SourceStatus {
    pub responses: u64,
    /// By status class: `1xx` to `5xx`, and `none` for a request cut before any response.
    pub classes: BTreeMap<&'static str, u64>,
    /// The 304s and the 206s among them.
    pub not_modified: u64,
    pub partial: u64,
}

/// HTTP/2 on client connections, summed over the workers.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct H2Process {
    pub connections: u64,
    /// Streams begun (requests).
    pub streams: u64,
    /// Connections Quill ended with an error (its GOAWAY's code): `PROTOCOL_ERROR`,
    /// `ENHANCE_YOUR_CALM` (a flood), ...
    pub errors: BTreeMap<&'static str, u64>,
}

/// TLS handshakes of every listener, summed over the workers.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct TlsProcess {
    /// Completed, by version and kind (`full` or `resumed`).
    pub handshakes: Vec<TlsHandshakes>,
    /// Failed, by reason (`timeout`, `closed`, `incompatible`, `no_certificate`, ...).
    pub failures: BTreeMap<&'static str, u64>,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct TlsHandshakes {
    pub version: &'static str,
    pub kind: &'static str,
    pub count: u64,
}

/// A TLS listener's certificates.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ListenerTls {
    pub certificates: Vec<CertStatus>,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct CertStatus {
    /// The certificate file.
    pub file: String,
    pub names: Vec<String>,
    /// notAfter, Unix seconds, and the seconds left until then (negative once expired).
    pub not_after: i64,
    pub expires_in_s: i64,
}

/// HTTP counters that belong to no one listener: the workers' server connections and the
/// parse errors.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct HttpProcess {
    /// Server connections opened (connects attempted), and requests sent on a kept-alive one
    /// taken from the idle pool instead.
    pub server_connections_opened: u64,
    pub server_connections_reused: u64,
    /// Kept-alive server connections idle in the workers' pools now.
    pub server_connections_idle: u64,
    /// Requests and responses refused by the parser, by kind (`bare_lf`, `obs_fold`, ...).
    pub parse_errors: BTreeMap<&'static str, u64>,
    /// Responses by who made them (`server`, `file`, `fastcgi`, `cgi`, `quill`).
    pub sources: BTreeMap<&'static str, SourceStatus>,
}

/// One HTTP listener's requests.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct HttpListenerStatus {
    /// Requests answered (all classes, `none` included).
    pub requests: u64,
    /// By status class: `1xx` to `5xx`, and `none` for requests cut before any reply.
    pub classes: BTreeMap<&'static str, u64>,
    /// Durations of the requests passed to a server (head received to the exchange's end);
    /// Quill's own answers are not timed.
    pub duration: Histogram,
    /// Per route, in configuration order (a name once), then `(no route)` for the requests
    /// that matched none; empty on a listener without routes. Requests refused before routing
    /// (malformed, too large, timed out) count on the listener only.
    pub routes: Vec<HttpRouteStatus>,
}

/// One route's requests (the same counts as a listener's, for the requests it took).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct HttpRouteStatus {
    /// The route's name, or `(no route)`.
    pub route: String,
    pub requests: u64,
    pub classes: BTreeMap<&'static str, u64>,
    pub duration: Histogram,
}

/// Session counters summed over the workers.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Totals {
    pub accepted: u64,
    /// Sessions ended, by how they ended (`done`, `client_reset`, `no_server`, `refused`, ...).
    pub ended: BTreeMap<&'static str, u64>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub connect_failures: u64,
    pub accept_errors: u64,
    /// Kept-alive HTTP clients moved to another worker between two requests.
    pub moved: u64,
    pub udp: UdpTotals,
}

/// UDP flow counters summed over the workers.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct UdpTotals {
    pub flows_open: u64,
    pub flows_total: u64,
    pub datagrams_in: u64,
    pub datagrams_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub evictions: u64,
    pub drops: u64,
    /// Datagrams that made no flow, by reason (`quill_address`, `pool_server`, `source_limit`,
    /// `descriptors`).
    pub refused: std::collections::BTreeMap<&'static str, u64>,
    /// ICMP errors on flow sockets not taken as their server's.
    pub icmp_ignored: u64,
}

/// Durations: upper bounds in microseconds (the last bucket has none) and counts per bucket.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Histogram {
    pub bounds_us: Vec<u64>,
    pub counts: Vec<u64>,
    pub sum_us: u64,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct ListenerStatus {
    pub name: String,
    pub listen: String,
    pub mode: String,
    /// `tcp`, `udp` or `http`.
    pub protocol: &'static str,
    /// The health check in words, if any.
    pub health_check: Option<String>,
    /// Requests by status class and duration (HTTP listeners only).
    pub http: Option<HttpListenerStatus>,
    /// TLS termination's certificates (TLS listeners only).
    pub tls: Option<ListenerTls>,
    pub servers: Vec<ServerStatus>,
    pub emergency: Option<ServerStatus>,
    pub abuse: Option<ServerStatus>,
    pub queue: QueueStatus,
    /// The Maglev tables (mode `maglev`), best priority level first; empty otherwise.
    pub maglev: Vec<MaglevStatus>,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct ServerStatus {
    pub index: usize,
    pub address: String,
    /// disabled, drain, down, blacklisted or up (the first that applies).
    pub state: &'static str,
    /// unchecked, up or down.
    pub health: &'static str,
    /// enabled, drain or disabled.
    pub admin: &'static str,
    pub sessions: u64,
    pub total: u64,
    pub failures: u64,
    pub max: u32,
    pub hard: u32,
    pub weight: u32,
    pub prio: u32,
    pub acl: Option<AclId>,
    /// Milliseconds of blacklist left.
    pub blacklisted_ms: Option<u64>,
    pub checks: u64,
    pub checks_failed: u64,
    /// Share during slow start in thousandths (1000 = full).
    pub ramp: u32,
    /// Bytes sent to the server and received from it by finished sessions.
    pub sent: u64,
    pub received: u64,
}

pub(crate) fn server_status(index: usize, s: &Server, now_ms: u64) -> ServerStatus {
    let spec = s.spec();
    ServerStatus {
        index,
        address: s.addr().to_string(),
        state: s.state_name(now_ms),
        health: match s.health() {
            Health::Unchecked => "unchecked",
            Health::Up => "up",
            Health::Down => "down",
        },
        admin: spec.state.name(),
        sessions: s.sessions.load(Ordering::Relaxed),
        total: s.total(),
        failures: s.failures.load(Ordering::Relaxed),
        max: spec.max,
        hard: spec.hard,
        weight: spec.weight,
        prio: spec.prio,
        acl: spec.acl,
        blacklisted_ms: s.blacklisted_until(now_ms).map(|t| t - now_ms),
        checks: s.checks.load(Ordering::Relaxed),
        checks_failed: s.checks_failed.load(Ordering::Relaxed),
        ramp: s.ramp(now_ms),
        sent: s.sent(),
        received: s.received(),
    }
}

/// Takes the picture.
pub(crate) fn snapshot(shared: &Shared) -> Snapshot {
    let now_ms = shared.clock.now_ms();
    let sum = |f: &dyn Fn(&crate::metrics::Counters) -> u64| shared.counters.iter().map(f).sum();
    let mut counts = vec![0; CONNECT_BUCKETS_US.len() + 1];
    let mut sum_us = 0;
    for c in &shared.counters {
        let (b, s) = c.connect_histogram();
        for (acc, v) in counts.iter_mut().zip(b) {
            *acc += v;
        }
        sum_us += s;
    }
    let live = shared.listeners.load();
    let drained = shared.drained.load();
    type Current<'a> = (&'a str, String, Arc<Pool>, &'a HttpStats);
    let current: Vec<Current> = if live.is_empty() {
        drained
            .iter()
            .map(|l| {
                (
                    l.name.as_str(),
                    l.addr.to_string(),
                    l.pool.clone(),
                    &*l.http,
                )
            })
            .collect()
    } else {
        live.iter()
            .map(|l| {
                let pool = l.load_pool_full();
                (l.name.as_str(), l.addr.to_string(), pool, &*l.http)
            })
            .collect()
    };
    let now_unix = crate::clock::unix_time() as i64;
    let listeners = current
        .iter()
        .map(|(name, addr, pool, http)| ListenerStatus {
            name: name.to_string(),
            listen: addr.clone(),
            mode: pool.mode.to_string(),
            protocol: protocol(pool),
            health_check: pool.health.as_ref().map(|h| h.to_string()),
            http: pool.http().map(|_| http_listener(http, pool)),
            tls: pool.tls().map(|t| listener_tls(t, now_unix)),
            servers: pool
                .servers
                .iter()
                .enumerate()
                .map(|(i, s)| server_status(i, s, now_ms))
                .collect(),
            emergency: pool.emergency.as_ref().map(|s| server_status(0, s, now_ms)),
            abuse: pool.abuse.as_ref().map(|s| server_status(0, s, now_ms)),
            queue: QueueStatus::of(&pool.queue),
            maglev: MaglevStatus::of(pool),
        })
        .collect();
    let pools = shared
        .pools
        .load()
        .iter()
        .map(|p| PoolStatus {
            name: p.name.clone(),
            mode: p.mode.to_string(),
            health_check: p.health.as_ref().map(|h| h.to_string()),
            servers: p
                .servers
                .iter()
                .enumerate()
                .map(|(i, s)| server_status(i, s, now_ms))
                .collect(),
            emergency: p.emergency.as_ref().map(|s| server_status(0, s, now_ms)),
            queue: QueueStatus::of(&p.queue),
            maglev: MaglevStatus::of(p),
        })
        .collect();
    Snapshot {
        version: env!("CARGO_PKG_VERSION"),
        pid: std::process::id(),
        time: crate::clock::unix_time(),
        started: shared.started_unix,
        phase: match shared.phase() {
            Phase::Running => "running",
            Phase::Draining => "draining",
            Phase::Stopping => "stopping",
        },
        workers: shared.counters.len(),
        workers_accepting: shared.accepting.0.load(Ordering::Relaxed),
        max_sessions: shared.max_sessions.load(Ordering::Relaxed),
        active_sessions: shared.active.load(Ordering::Relaxed),
        totals: Totals {
            accepted: sum(&|c| c.accepted.load(Ordering::Relaxed)),
            ended: End::ALL
                .iter()
                .map(|&e| (e.name(), sum(&|c| c.ended_count(e))))
                .collect(),
            bytes_in: sum(&|c| c.bytes_in.load(Ordering::Relaxed)),
            bytes_out: sum(&|c| c.bytes_out.load(Ordering::Relaxed)),
            connect_failures: sum(&|c| c.connect_failures.load(Ordering::Relaxed)),
            accept_errors: sum(&|c| c.accept_errors.load(Ordering::Relaxed)),
            moved: sum(&|c| c.moved.load(Ordering::Relaxed)),
            udp: UdpTotals {
                flows_open: sum(&|c| c.udp_flows_open.load(Ordering::Relaxed)),
                flows_total: sum(&|c| c.udp_flows_total.load(Ordering::Relaxed)),
                datagrams_in: sum(&|c| c.udp_datagrams_in.load(Ordering::Relaxed)),
                datagrams_out: sum(&|c| c.udp_datagrams_out.load(Ordering::Relaxed)),
                bytes_in: sum(&|c| c.udp_bytes_in.load(Ordering::Relaxed)),
                bytes_out: sum(&|c| c.udp_bytes_out.load(Ordering::Relaxed)),
                evictions: sum(&|c| c.udp_evictions.load(Ordering::Relaxed)),
                drops: sum(&|c| c.udp_drops.load(Ordering::Relaxed)),
                refused: crate::metrics::UdpRefusal::ALL
                    .iter()
                    .map(|&r| {
                        (
                            r.name(),
                            sum(&|c| c.udp_refused[r as usize].load(Ordering::Relaxed)),
                        )
                    })
                    .collect(),
                icmp_ignored: sum(&|c| c.udp_icmp_ignored.load(Ordering::Relaxed)),
            },
        },
        connect_time: Histogram {
            bounds_us: CONNECT_BUCKETS_US.to_vec(),
            counts,
            sum_us,
        },
        http: http_process(shared),
        tls: tls_process(shared),
        h2: h2_process(shared),
        files: files_status(shared),
        cgi: CgiStatus {
            children: crate::metrics::cgi_children(),
        },
        listeners,
        pools,
        discovery: shared
            .discovery
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone(),
    }
}

/// What a listener's clients speak: `http`, `udp` or `tcp`.
pub(crate) fn protocol(pool: &Pool) -> &'static str {
    if pool.http().is_some() {
        "http"
    } else if pool.udp().is_some() {
        "udp"
    } else {
        "tcp"
    }
}

fn listener_tls(tls: &crate::tls::ServerTls, now_unix: i64) -> ListenerTls {
    ListenerTls {
        certificates: tls
            .certs
            .served()
            .iter()
            .map(|c| CertStatus {
                file: c.path.display().to_string(),
                names: c.names.clone(),
                not_after: c.not_after_unix,
                expires_in_s: c.not_after_unix.saturating_sub(now_unix),
            })
            .collect(),
    }
}

fn h2_process(shared: &Shared) -> H2Process {
    let mut p = H2Process::default();
    // Always there, so that an alert on a flood never lacks its series.
    for code in [
        quill_core::h2::Code::ENHANCE_YOUR_CALM,
        quill_core::h2::Code::PROTOCOL_ERROR,
    ] {
        p.errors.insert(code.name(), 0);
    }
    for c in shared.counters.iter() {
        let (conns, streams, errors) = c.h2_counts();
        p.connections += conns;
        p.streams += streams;
        for (i, n) in errors.iter().enumerate() {
            if *n > 0 {
                *p.errors
                    .entry(quill_core::h2::Code(i as u32).name())
                    .or_default() += n;
            }
        }
    }
    p
}

fn tls_process(shared: &Shared) -> TlsProcess {
    let sum = |f: &dyn Fn(&crate::metrics::Counters) -> u64| shared.counters.iter().map(f).sum();
    TlsProcess {
        handshakes: TlsKind::ALL
            .iter()
            .map(|&k| {
                let (version, kind) = k.labels();
                TlsHandshakes {
                    version,
                    kind,
                    count: sum(&|c| c.tls_handshakes(k)),
                }
            })
            .collect(),
        failures: TlsFailure::ALL
            .iter()
            .map(|&f| (f.name(), sum(&|c| c.tls_failures(f))))
            .collect(),
    }
}

fn http_listener(stats: &HttpStats, pool: &Pool) -> HttpListenerStatus {
    let (requests, classes, duration) = http_counts(stats);
    let routes = pool.routes.as_ref().map_or_else(Vec::new, |r| {
        r.all_stats()
            .into_iter()
            .map(|(name, stats)| {
                let (requests, classes, duration) = http_counts(stats);
                HttpRouteStatus {
                    route: name.to_string(),
                    requests,
                    classes,
                    duration,
                }
            })
            .collect()
    });
    HttpListenerStatus {
        requests,
        classes,
        duration,
        routes,
    }
}

/// Requests in all, by class, and the duration histogram of `stats`.
fn http_counts(stats: &HttpStats) -> (u64, BTreeMap<&'static str, u64>, Histogram) {
    let t = stats.totals();
    (
        t.classes.iter().sum(),
        HTTP_CLASS_NAMES.iter().copied().zip(t.classes).collect(),
        Histogram {
            bounds_us: REQUEST_BUCKETS_US.to_vec(),
            counts: t.buckets,
            sum_us: t.sum_us,
        },
    )
}

fn http_process(shared: &Shared) -> HttpProcess {
    let mut conns = ServerConnCounts::default();
    for c in &shared.counters {
        let w = c.server_conns();
        conns.opened += w.opened;
        conns.reused += w.reused;
    }
    HttpProcess {
        server_connections_opened: conns.opened,
        server_connections_reused: conns.reused,
        // Read live, not as published: another worker may take from a sleeping worker's pool.
        server_connections_idle: shared.idle.idle() as u64,
        parse_errors: quill_core::http1::Error::ALL
            .iter()
            .map(|&e| {
                let n = shared
                    .counters
                    .iter()
                    .map(|c| c.http_parse_errors(e as usize))
                    .sum();
                (e.name(), n)
            })
            .collect(),
        sources: Source::ALL
            .iter()
            .map(|&s| (s.name(), source_status(shared, s)))
            .collect(),
    }
}

fn source_status(shared: &Shared, source: Source) -> SourceStatus {
    let (mut classes, mut not_modified, mut partial) = ([0u64; 6], 0, 0);
    for c in &shared.counters {
        let (by_class, n304, n206) = c.http_responses(source);
        for (acc, n) in classes.iter_mut().zip(by_class) {
            *acc += n;
        }
        not_modified += n304;
        partial += n206;
    }
    SourceStatus {
        responses: classes.iter().sum(),
        classes: HTTP_CLASS_NAMES.iter().copied().zip(classes).collect(),
        not_modified,
        partial,
    }
}

fn files_status(shared: &Shared) -> FilesStatus {
    let mut f = FilesStatus {
        descriptors: FdBudget::held() as u64,
        descriptors_max: FdBudget::limit() as u64,
        cold_reads: crate::web::readahead::reads(),
        ..FilesStatus::default()
    };
    for c in &shared.counters {
        let w = c.file_cache();
        f.cache_hits += w.hits;
        f.cache_misses += w.misses;
        f.cache_entries += w.entries;
    }
    f
}

/// One line of `servers`, in Pen's format with Quill's columns appended.
pub(crate) fn pen_server_line(s: &ServerStatus) -> String {
    let (addr, port) = match s.address.rsplit_once(':') {
        Some((a, p)) if !s.address.starts_with('/') && !s.address.starts_with('@') => {
            (a.trim_start_matches('[').trim_end_matches(']'), p)
        }
        _ => (s.address.as_str(), "0"),
    };
    format!(
        "{} addr {addr} port {port} conn {} max {} hard {} weight {} prio {} sx {} rx {} state {} health {} total {} failures {} blacklisted {}\n",
        s.index,
        s.sessions,
        s.max,
        s.hard,
        s.weight,
        s.prio,
        s.sent,
        s.received,
        s.state,
        s.health,
        s.total,
        s.failures,
        s.blacklisted_ms.map_or(0, |ms| ms.div_ceil(1000)),
    )
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Pen's HTML status report (`-w`, SIGUSR1, `status`): a static page with the process, the
/// settings and one table row per server.
pub(crate) fn pen_html(snap: &Snapshot) -> String {
    let mut out = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Quill status</title></head><body>\n",
    );
    out += &format!(
        "<h1>Quill {} status</h1>\n<p>pid {}, time {}, started {}, {} worker(s), {} of at most {} sessions open, {} accepted</p>\n",
        snap.version, snap.pid, snap.time, snap.started, snap.workers, snap.active_sessions,
        snap.max_sessions, snap.totals.accepted
    );
    for l in &snap.listeners {
        out += &format!(
            "<h2>Listener {} on {}</h2>\n<p>mode {}{}</p>\n",
            esc(&l.name),
            esc(&l.listen),
            esc(&l.mode),
            l.health_check
                .as_ref()
                .map_or(String::new(), |h| format!(", health check {}", esc(h)))
        );
        out += "<table border=\"1\">\n<tr><th>server</th><th>address</th><th>state</th><th>conn</th><th>max</th><th>hard</th><th>weight</th><th>prio</th><th>sx</th><th>rx</th><th>total</th><th>failures</th></tr>\n";
        for s in &l.servers {
            out += &format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                s.index, esc(&s.address), s.state, s.sessions, s.max, s.hard, s.weight, s.prio,
                s.sent, s.received, s.total, s.failures
            );
        }
        out += "</table>\n";
    }
    out += "</body></html>\n";
    out
}

/// Writes Pen's HTML report to the `-w` file, if one is set.
pub(crate) fn write_file(controller: &Controller) -> Result<(), String> {
    let Some(path) = controller.status_file() else {
        return Ok(());
    };
    let html = pen_html(&snapshot(controller.shared()));
    std::fs::write(&path, html)
        .map_err(|e| format!("cannot write status file {}: {e}", path.display()))
}
