//! `/metrics`: a [`Snapshot`] in the Prometheus text exposition format 0.0.4.
//!
//! Names follow `quill_<subsystem>_<what>_<unit>`; counters end in `_total`. Every family is
//! written whole (HELP, TYPE, then all its samples), as the format requires, and every label value
//! is escaped. The names are a contract with dashboards and alerts: rename nothing lightly.

use std::fmt::Write as _;

use crate::metrics::End;
use crate::status::{
    Histogram, HttpListenerStatus, HttpRouteStatus, QueueStatus, ServerStatus, Snapshot,
};

/// The Content-Type of the text format.
pub(super) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The server states `quill_server_state` enumerates (`ServerStatus::state`).
const SERVER_STATES: [&str; 5] = ["up", "blacklisted", "down", "drain", "disabled"];

#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A per-server family whose value is one integer of [`ServerStatus`].
struct ServerFamily {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    value: fn(&ServerStatus) -> u64,
}

const SERVER_FAMILIES: &[ServerFamily] = &[
    ServerFamily {
        name: "quill_server_sessions_active",
        kind: Kind::Gauge,
        help: "Sessions open to the server now.",
        value: |s| s.sessions,
    },
    ServerFamily {
        name: "quill_server_sessions_total",
        kind: Kind::Counter,
        help: "Sessions sent to the server.",
        value: |s| s.total,
    },
    ServerFamily {
        name: "quill_server_connect_failures_total",
        kind: Kind::Counter,
        help: "Connects to the server that failed (refused, reset, unreachable or timed out).",
        value: |s| s.failures,
    },
    ServerFamily {
        name: "quill_server_up",
        kind: Kind::Gauge,
        help: "1 when the server is believed reachable: not down by health checks and not blacklisted after a failed connect (drain and disable do not count: see quill_server_state).",
        value: |s| u64::from(s.health != "down" && s.blacklisted_ms.is_none()),
    },
    ServerFamily {
        name: "quill_server_checks_total",
        kind: Kind::Counter,
        help: "Active health checks run against the server.",
        value: |s| s.checks,
    },
    ServerFamily {
        name: "quill_server_checks_failed_total",
        kind: Kind::Counter,
        help: "Active health checks of the server that failed.",
        value: |s| s.checks_failed,
    },
    ServerFamily {
        name: "quill_server_bytes_sent_total",
        kind: Kind::Counter,
        help: "Bytes sent to the server (from clients), counted when sessions end.",
        value: |s| s.sent,
    },
    ServerFamily {
        name: "quill_server_bytes_received_total",
        kind: Kind::Counter,
        help: "Bytes received from the server (for clients), counted when sessions end.",
        value: |s| s.received,
    },
    ServerFamily {
        name: "quill_server_weight",
        kind: Kind::Gauge,
        help: "The server's configured weight.",
        value: |s| u64::from(s.weight),
    },
    ServerFamily {
        name: "quill_server_sessions_max",
        kind: Kind::Gauge,
        help: "The server's session limit (MAXCONN); 0 means none.",
        value: |s| u64::from(s.max),
    },
];

/// Renders the whole exposition.
pub(super) fn render(snap: &Snapshot) -> String {
    let mut out = Exposition::default();
    process(&mut out, snap);
    sessions(&mut out, snap);
    connect_histogram(&mut out, snap);
    listeners(&mut out, snap);
    hash_tables(&mut out, snap);
    discovery(&mut out, snap);
    servers(&mut out, snap);
    queues(&mut out, snap);
    http(&mut out, snap);
    responses(&mut out, snap);
    files(&mut out, snap);
    tls(&mut out, snap);
    h2(&mut out, snap);
    out.text
}

/// HTTP responses of the whole process by who made them (`source`) and status class, and the
/// 304s and 206s among them: always written, so alerts never lack a series.
fn responses(out: &mut Exposition, snap: &Snapshot) {
    let sources = &snap.http.sources;
    let name = "quill_http_responses_total";
    out.family(
        name,
        Kind::Counter,
        "HTTP responses of all listeners by source (server: a pool's server; file: a static root; fastcgi; cgi; quill: Quill's own answer) and status class (none: the request was cut before any response).",
    );
    for (source, s) in sources {
        for (class, n) in &s.classes {
            out.sample(name, &[("source", source), ("class", class)], *n);
        }
    }
    let name = "quill_http_responses_not_modified_total";
    out.family(
        name,
        Kind::Counter,
        "304 Not Modified responses by source (counted in quill_http_responses_total's 3xx too).",
    );
    for (source, s) in sources {
        out.sample(name, &[("source", source)], s.not_modified);
    }
    let name = "quill_http_responses_partial_total";
    out.family(
        name,
        Kind::Counter,
        "206 Partial Content responses by source (counted in quill_http_responses_total's 2xx too).",
    );
    for (source, s) in sources {
        out.sample(name, &[("source", source)], s.partial);
    }
}

/// The file caches of static roots, the descriptors they hold, and the CGI children.
fn files(out: &mut Exposition, snap: &Snapshot) {
    let f = &snap.files;
    let name = "quill_file_cache_lookups_total";
    out.family(
        name,
        Kind::Counter,
        "Lookups of a path beneath a static root in the workers' file caches: hit (a fresh or still valid entry) or miss (opened from the file system).",
    );
    out.sample(name, &[("result", "hit")], f.cache_hits);
    out.sample(name, &[("result", "miss")], f.cache_misses);
    let name = "quill_file_cold_reads_total";
    out.family(
        name,
        Kind::Counter,
        "File ranges (up to 1 MiB) found not in the page cache and read by the reader threads, off the workers, before they were sent.",
    );
    out.sample(name, &[], f.cold_reads);
    let gauges: [(&str, &str, u64); 4] = [
        (
            "quill_file_cache_entries",
            "Entries the workers' file caches hold now.",
            f.cache_entries,
        ),
        (
            "quill_file_cache_descriptors",
            "Descriptors of large files the file caches hold open now.",
            f.descriptors,
        ),
        (
            "quill_file_cache_descriptors_max",
            "The most descriptors the file caches may hold (their share of the open-file limit).",
            f.descriptors_max,
        ),
        (
            "quill_cgi_children",
            "CGI children running now.",
            snap.cgi.children,
        ),
    ];
    for (name, help, value) in gauges {
        out.family(name, Kind::Gauge, help);
        out.sample(name, &[], value);
    }
}

fn h2(out: &mut Exposition, snap: &Snapshot) {
    let counters = [
        (
            "quill_h2_connections_total",
            "HTTP/2 client connections (ALPN h2 over TLS, or h2c with prior knowledge).",
            snap.h2.connections,
        ),
        (
            "quill_h2_streams_total",
            "HTTP/2 streams begun by clients: requests that came over HTTP/2 (each is also counted by the HTTP request families).",
            snap.h2.streams,
        ),
    ];
    for (name, help, value) in counters {
        out.family(name, Kind::Counter, help);
        out.sample(name, &[], value);
    }
    let name = "quill_h2_connection_errors_total";
    out.family(
        name,
        Kind::Counter,
        "HTTP/2 connections Quill ended with an error, by the code of its GOAWAY (ENHANCE_YOUR_CALM: a flood or abuse limit; PROTOCOL_ERROR, FRAME_SIZE_ERROR, ...: a broken client).",
    );
    for (code, n) in &snap.h2.errors {
        out.sample(name, &[("code", code)], *n);
    }
}

fn tls(out: &mut Exposition, snap: &Snapshot) {
    let name = "quill_tls_handshakes_total";
    out.family(
        name,
        Kind::Counter,
        "TLS handshakes completed by clients of TLS listeners, by protocol version and kind (full, or resumed with a session ticket).",
    );
    for h in &snap.tls.handshakes {
        out.sample(name, &[("version", h.version), ("kind", h.kind)], h.count);
    }
    let name = "quill_tls_handshake_failures_total";
    out.family(
        name,
        Kind::Counter,
        "TLS handshakes that failed, by reason (timeout, closed, incompatible, no_certificate, client_certificate, alert, protocol, overload, other).",
    );
    for (reason, n) in &snap.tls.failures {
        out.sample(name, &[("reason", reason)], *n);
    }
    let name = "quill_tls_certificate_expiry_seconds";
    // A family is written only with samples: none without a TLS listener.
    if !snap.listeners.iter().any(|l| l.tls.is_some()) {
        return;
    }
    out.family(
        name,
        Kind::Gauge,
        "Seconds until a served certificate's notAfter (negative once expired).",
    );
    for l in &snap.listeners {
        for c in l.tls.iter().flat_map(|t| &t.certificates) {
            out.sample_text(
                name,
                &[("listener", &l.name), ("cert", &c.file)],
                &c.expires_in_s.to_string(),
            );
        }
    }
}

fn process(out: &mut Exposition, snap: &Snapshot) {
    out.family(
        "quill_build_info",
        Kind::Gauge,
        "Always 1; the label says which Quill runs.",
    );
    out.sample("quill_build_info", &[("version", snap.version)], 1);
    out.family(
        "quill_process_start_time_seconds",
        Kind::Gauge,
        "Unix time the process started.",
    );
    out.sample("quill_process_start_time_seconds", &[], snap.started);
    out.family(
        "quill_process_draining",
        Kind::Gauge,
        "1 once the process stopped accepting (draining or stopping).",
    );
    out.sample(
        "quill_process_draining",
        &[],
        u64::from(snap.phase != "running"),
    );
    out.family(
        "quill_workers",
        Kind::Gauge,
        "Worker threads (event loops).",
    );
    out.sample("quill_workers", &[], snap.workers as u64);
    out.family(
        "quill_workers_accepting",
        Kind::Gauge,
        "Workers that accept clients now: all of them, unless no core was idle and fewer carried the load (concentrate).",
    );
    out.sample(
        "quill_workers_accepting",
        &[],
        snap.workers_accepting as u64,
    );
}

fn sessions(out: &mut Exposition, snap: &Snapshot) {
    let t = &snap.totals;
    let plain: [(&str, Kind, &str, u64); 18] = [
        (
            "quill_sessions_accepted_total",
            Kind::Counter,
            "Client connections accepted (including those refused or denied right after).",
            t.accepted,
        ),
        (
            "quill_sessions_active",
            Kind::Gauge,
            "Sessions open now.",
            snap.active_sessions,
        ),
        (
            "quill_sessions_max",
            Kind::Gauge,
            "Sessions allowed at once (-x, conn_max).",
            snap.max_sessions,
        ),
        (
            "quill_client_bytes_received_total",
            Kind::Counter,
            "Bytes received from clients (and forwarded to servers), counted when sessions end.",
            t.bytes_in,
        ),
        (
            "quill_client_bytes_sent_total",
            Kind::Counter,
            "Bytes sent to clients (received from servers), counted when sessions end.",
            t.bytes_out,
        ),
        (
            "quill_backend_connect_failures_total",
            Kind::Counter,
            "Connects to servers that failed, all servers together.",
            t.connect_failures,
        ),
        (
            "quill_accept_errors_total",
            Kind::Counter,
            "accept() calls that failed (for example out of file descriptors).",
            t.accept_errors,
        ),
        (
            "quill_sessions_moved_total",
            Kind::Counter,
            "Kept-alive HTTP clients moved to another worker between two requests (concentrate).",
            t.moved,
        ),
        (
            "quill_udp_flows_active",
            Kind::Gauge,
            "UDP flows open now.",
            t.udp.flows_open,
        ),
        (
            "quill_udp_flows_total",
            Kind::Counter,
            "UDP flows opened (one per client address and port on a listener).",
            t.udp.flows_total,
        ),
        (
            "quill_udp_datagrams_received_total",
            Kind::Counter,
            "UDP datagrams from clients forwarded to servers.",
            t.udp.datagrams_in,
        ),
        (
            "quill_udp_datagrams_sent_total",
            Kind::Counter,
            "UDP datagrams from servers relayed to clients.",
            t.udp.datagrams_out,
        ),
        (
            "quill_udp_bytes_received_total",
            Kind::Counter,
            "UDP payload bytes from clients forwarded to servers.",
            t.udp.bytes_in,
        ),
        (
            "quill_udp_bytes_sent_total",
            Kind::Counter,
            "UDP payload bytes from servers relayed to clients.",
            t.udp.bytes_out,
        ),
        (
            "quill_udp_flow_evictions_total",
            Kind::Counter,
            "UDP flows ended to make room at max_flows (the flow idle for longest).",
            t.udp.evictions,
        ),
        (
            "quill_udp_datagrams_dropped_total",
            Kind::Counter,
            "UDP datagrams dropped: denied, no server, cut short, no room, or a full socket buffer.",
            t.udp.drops,
        ),
        (
            "quill_udp_icmp_errors_ignored_total",
            Kind::Counter,
            "ICMP errors on UDP flow sockets not taken as their server's: sent by another host, or quoting nothing the flow sent.",
            t.udp.icmp_ignored,
        ),
        (
            "quill_listeners",
            Kind::Gauge,
            "Listeners configured.",
            snap.listeners.len() as u64,
        ),
    ];
    for (name, kind, help, value) in plain {
        out.family(name, kind, help);
        out.sample(name, &[], value);
    }
    let name = "quill_session_panics_total";
    out.family(
        name,
        Kind::Counter,
        "Sessions whose code panicked (a bug): each was reset alone, the process went on.",
    );
    let panics = t.ended.get(End::Panic.name()).copied().unwrap_or(0);
    out.sample(name, &[], panics);
    let name = "quill_sessions_ended_total";
    out.family(
        name,
        Kind::Counter,
        "Sessions ended, by how they ended (the access log's last field).",
    );
    for end in End::ALL {
        let n = t.ended.get(end.name()).copied().unwrap_or(0);
        out.sample(name, &[("reason", end.name())], n);
    }
    let name = "quill_udp_datagrams_refused_total";
    out.family(
        name,
        Kind::Counter,
        "UDP datagrams that made no flow: from Quill's own address or a server of the pool (a loop), from a source at max_flows_per_source, or with the flows' descriptors taken.",
    );
    for r in crate::metrics::UdpRefusal::ALL {
        let n = t.udp.refused.get(r.name()).copied().unwrap_or(0);
        out.sample(name, &[("reason", r.name())], n);
    }
}

/// `quill_backend_connect_duration_seconds`: the snapshot keeps counts per bucket with bounds
/// in microseconds; Prometheus wants cumulative buckets with bounds in seconds.
fn connect_histogram(out: &mut Exposition, snap: &Snapshot) {
    let name = "quill_backend_connect_duration_seconds";
    out.family(
        name,
        Kind::Histogram,
        "Time from accepting a client to its server connection being established.",
    );
    histogram(out, name, &[], &snap.connect_time);
}

/// The samples of one histogram series: cumulative buckets with bounds in seconds (`le` after
/// `labels`), the sum in seconds and the count.
fn histogram(out: &mut Exposition, name: &str, labels: &[(&str, &str)], h: &Histogram) {
    let bucket = format!("{name}_bucket");
    let mut cumulative = 0;
    for (i, count) in h.counts.iter().enumerate() {
        cumulative += count;
        let le = match h.bounds_us.get(i) {
            Some(&us) => seconds(us),
            None => "+Inf".to_string(),
        };
        let mut with_le = labels.to_vec();
        with_le.push(("le", &le));
        out.sample(&bucket, &with_le, cumulative);
    }
    out.sample_text(&format!("{name}_sum"), labels, &seconds(h.sum_us));
    out.sample(&format!("{name}_count"), labels, cumulative);
}

/// One sample per Maglev table: its owner, priority level, size and fingerprint.
/// Left out when no pool has one.
fn hash_tables(out: &mut Exposition, snap: &Snapshot) {
    let name = "quill_hash_table_info";
    let any = snap.listeners.iter().any(|l| !l.maglev.is_empty())
        || snap.pools.iter().any(|p| !p.maglev.is_empty());
    if !any {
        return;
    }
    out.family(
        name,
        Kind::Gauge,
        "Always 1, one per Maglev table (mode maglev, one per priority level with prio): Quills with the same servers, weights and priorities show the same fingerprint.",
    );
    let owners = snap
        .listeners
        .iter()
        .map(|l| (("listener", l.name.as_str()), &l.maglev))
        .chain(
            snap.pools
                .iter()
                .map(|p| (("pool", p.name.as_str()), &p.maglev)),
        );
    for ((kind, owner), tables) in owners {
        for t in tables {
            let (prio, size) = (t.prio.to_string(), t.size.to_string());
            out.sample(
                name,
                &[
                    (kind, owner),
                    ("prio", &prio),
                    ("size", &size),
                    ("fingerprint", &t.fingerprint),
                ],
                1,
            );
        }
    }
}

/// The pools whose servers come from DNS (left out when none does).
fn discovery(out: &mut Exposition, snap: &Snapshot) {
    if snap.discovery.is_empty() {
        return;
    }
    type Field = fn(&crate::state::shared::DiscoveryStat) -> u64;
    let families: [(&str, Kind, &str, Field); 6] = [
        ("quill_discovery_servers", Kind::Gauge, "Servers in the last set DNS gave the pool.", |d| d.servers as u64),
        ("quill_discovery_stale", Kind::Gauge, "1 while the resolvers have failed for longer than the pool's hold: it keeps its last servers.", |d| u64::from(d.stale)),
        ("quill_discovery_rounds_total", Kind::Counter, "Discovery rounds that found servers.", |d| d.rounds_ok),
        ("quill_discovery_failures_total", Kind::Counter, "Discovery rounds that failed (no answer, an error, nothing usable): the pool kept its servers.", |d| d.rounds_failed),
        ("quill_discovery_changes_total", Kind::Counter, "Discovery rounds that changed the pool's servers.", |d| d.changes),
        ("quill_discovery_queries_total", Kind::Counter, "DNS queries sent for the pool (follow-ups, TCP and retries included).", |d| d.queries),
    ];
    for (name, kind, help, field) in families {
        out.family(name, kind, help);
        for d in &snap.discovery {
            out.sample(name, &[("pool", &d.pool), ("source", &d.source)], field(d));
        }
    }
}

fn listeners(out: &mut Exposition, snap: &Snapshot) {
    let name = "quill_listener_info";
    out.family(
        name,
        Kind::Gauge,
        "Always 1, one per listener: its address, balancing mode and health check.",
    );
    for l in &snap.listeners {
        let check = l.health_check.as_deref().unwrap_or("none");
        out.sample(
            name,
            &[
                ("listener", &l.name),
                ("listen", &l.listen),
                ("mode", &l.mode),
                ("health_check", check),
            ],
            1,
        );
    }
}

/// Every server of every pool, the emergency and abuse servers included (as `server="emergency"`
/// and `server="abuse"`), with its owner, index and address as labels. A listener's own servers
/// carry `listener="NAME"`, a named pool's (`[[pool]]`, reached through routes) `pool="NAME"`.
fn server_rows(snap: &Snapshot) -> Vec<((&'static str, &str), String, &ServerStatus)> {
    let mut rows = Vec::new();
    for l in &snap.listeners {
        let owner = ("listener", l.name.as_str());
        for s in &l.servers {
            rows.push((owner, s.index.to_string(), s));
        }
        if let Some(s) = &l.emergency {
            rows.push((owner, "emergency".to_string(), s));
        }
        if let Some(s) = &l.abuse {
            rows.push((owner, "abuse".to_string(), s));
        }
    }
    for p in &snap.pools {
        let owner = ("pool", p.name.as_str());
        for s in &p.servers {
            rows.push((owner, s.index.to_string(), s));
        }
        if let Some(s) = &p.emergency {
            rows.push((owner, "emergency".to_string(), s));
        }
    }
    rows
}

fn servers(out: &mut Exposition, snap: &Snapshot) {
    let rows = server_rows(snap);
    for f in SERVER_FAMILIES {
        out.family(f.name, f.kind, f.help);
        for (owner, index, s) in &rows {
            let labels = [*owner, ("server", index), ("address", &s.address)];
            out.sample(f.name, &labels, (f.value)(s));
        }
    }
    let name = "quill_server_state";
    out.family(
        name,
        Kind::Gauge,
        "1 for the server's current state (up, blacklisted, down, drain, disabled), 0 for the others.",
    );
    for (owner, index, s) in &rows {
        for state in SERVER_STATES {
            let labels = [
                *owner,
                ("server", index),
                ("address", &s.address),
                ("state", state),
            ];
            out.sample(name, &labels, u64::from(s.state == state));
        }
    }
    let name = "quill_server_slow_start_ratio";
    out.family(
        name,
        Kind::Gauge,
        "Share of its normal load the server gets during slow start (1 = full).",
    );
    for (owner, index, s) in &rows {
        let labels = [*owner, ("server", index), ("address", &s.address)];
        out.sample_text(name, &labels, &thousandths(u64::from(s.ramp)));
    }
}

/// Each listener's and named pool's queue of HTTP requests waiting for a server at its `max`.
fn queues(out: &mut Exposition, snap: &Snapshot) {
    let rows: Vec<_> = snap
        .listeners
        .iter()
        .map(|l| (("listener", l.name.as_str()), &l.queue))
        .chain(
            snap.pools
                .iter()
                .map(|p| (("pool", p.name.as_str()), &p.queue)),
        )
        .collect();
    type Family = (&'static str, Kind, &'static str, fn(&QueueStatus) -> u64);
    let families: [Family; 3] = [
        (
            "quill_queue_waiting",
            Kind::Gauge,
            "HTTP requests waiting now for a server of the pool (every usable one at its max).",
            |q| q.waiting,
        ),
        (
            "quill_queue_requests_total",
            Kind::Counter,
            "HTTP requests that waited for a server of the pool.",
            |q| q.total,
        ),
        (
            "quill_queue_timeouts_total",
            Kind::Counter,
            "HTTP requests that waited queue_timeout without a server (answered 503).",
            |q| q.timed_out,
        ),
    ];
    for (name, kind, help, value) in families {
        out.family(name, kind, help);
        for (owner, q) in &rows {
            out.sample(name, &[*owner], value(q));
        }
    }
}

/// Who an HTTP request series belongs to: the listener (routes will add a `route` label here).
fn http_rows(snap: &Snapshot) -> Vec<(Vec<(&'static str, &str)>, &HttpListenerStatus)> {
    snap.listeners
        .iter()
        .filter_map(|l| Some((vec![("listener", l.name.as_str())], l.http.as_ref()?)))
        .collect()
}

/// The per-route HTTP families, once a listener has routes: each route by name, and
/// `(no route)` for the requests that matched none.
fn http_routes(out: &mut Exposition, snap: &Snapshot) {
    let rows: Vec<([(&str, &str); 2], &HttpRouteStatus)> = snap
        .listeners
        .iter()
        .filter_map(|l| Some((l.name.as_str(), l.http.as_ref()?)))
        .flat_map(|(l, h)| {
            h.routes
                .iter()
                .map(move |r| ([("listener", l), ("route", r.route.as_str())], r))
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    let name = "quill_http_route_requests_total";
    out.family(
        name,
        Kind::Counter,
        "HTTP requests of a listener with routes, by the route they took ((no route): matched none) and status class; requests refused before routing count only in quill_http_requests_total.",
    );
    for (labels, r) in &rows {
        for (class, n) in &r.classes {
            out.sample(name, &[labels[0], labels[1], ("class", class)], *n);
        }
    }
    let name = "quill_http_route_request_duration_seconds";
    out.family(
        name,
        Kind::Histogram,
        "As quill_http_request_duration_seconds, per route ((no route): matched none).",
    );
    for (labels, r) in &rows {
        histogram(out, name, labels, &r.duration);
    }
}

/// The HTTP families. Those per listener appear once an HTTP listener exists; the process-wide
/// ones (server connections, parse errors) always, so alerts on them never lack a series.
fn http(out: &mut Exposition, snap: &Snapshot) {
    let rows = http_rows(snap);
    if !rows.is_empty() {
        let name = "quill_http_requests_total";
        out.family(
            name,
            Kind::Counter,
            "HTTP requests answered, by status class of the response sent (1xx-5xx; none: the client connection was cut before any response).",
        );
        for (labels, h) in &rows {
            for (class, n) in &h.classes {
                let mut l = labels.clone();
                l.push(("class", class));
                out.sample(name, &l, *n);
            }
        }
        let name = "quill_http_request_duration_seconds";
        out.family(
            name,
            Kind::Histogram,
            "Time from a request's head received to the end of its exchange (response sent, or cut), for requests passed to a server; answers Quill makes itself (400, 503, ...) are not timed.",
        );
        for (labels, h) in &rows {
            histogram(out, name, labels, &h.duration);
        }
    }
    http_routes(out, snap);
    let h = &snap.http;
    let name = "quill_http_server_connections_total";
    out.family(
        name,
        Kind::Counter,
        "Server connections HTTP requests went on: opened (a connect attempted, whether or not it succeeded), or reused from the idle kept-alive pool.",
    );
    out.sample(name, &[("kind", "opened")], h.server_connections_opened);
    out.sample(name, &[("kind", "reused")], h.server_connections_reused);
    let name = "quill_http_server_idle_connections";
    out.family(
        name,
        Kind::Gauge,
        "Kept-alive server connections idle in the workers' pools now.",
    );
    out.sample(name, &[], h.server_connections_idle);
    let name = "quill_http_parse_errors_total";
    out.family(
        name,
        Kind::Counter,
        "Malformed HTTP requests and responses refused, by the rule they broke.",
    );
    for (kind, n) in &h.parse_errors {
        out.sample(name, &[("kind", kind)], *n);
    }
}

// === impl Exposition ===

/// The text being written.
#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.text, "# TYPE {name} {}", kind.name());
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        self.sample_text(name, labels, &value.to_string());
    }

    fn sample_text(&mut self, name: &str, labels: &[(&str, &str)], value: &str) {
        self.text += name;
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{k}=\"{}\"", escape_label(v));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }
}

/// Label values escape backslash, double quote and line feed.
fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// HELP text escapes backslash and line feed.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Microseconds as exact decimal seconds ("0.00025", "1", "3.5").
fn seconds(us: u64) -> String {
    decimal(us, 1_000_000, 6)
}

/// Thousandths as an exact decimal ("0.5", "1").
fn thousandths(n: u64) -> String {
    decimal(n, 1_000, 3)
}

fn decimal(n: u64, unit: u64, digits: usize) -> String {
    let (whole, frac) = (n / unit, n % unit);
    if frac == 0 {
        return whole.to_string();
    }
    let frac = format!("{frac:0digits$}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::ListenerStatus;

    #[test]
    fn seconds_are_exact_decimals() {
        for (us, want) in [
            (0, "0"),
            (100, "0.0001"),
            (250, "0.00025"),
            (1_000_000, "1"),
            (3_000_000, "3"),
            (3_500_001, "3.500001"),
        ] {
            assert_eq!(seconds(us), want, "{us} µs");
        }
        assert_eq!(thousandths(500), "0.5");
        assert_eq!(thousandths(1000), "1");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label("x\ny"), "x\\ny");
        assert_eq!(escape_help("a\\b\nc"), "a\\\\b\\nc");
    }

    fn snapshot(listeners: Vec<ListenerStatus>) -> Snapshot {
        use crate::status::{HttpProcess, Totals};
        Snapshot {
            version: "0",
            pid: 1,
            time: 0,
            started: 0,
            phase: "running",
            workers: 1,
            workers_accepting: 1,
            max_sessions: 1,
            active_sessions: 0,
            totals: Totals {
                accepted: 0,
                ended: Default::default(),
                bytes_in: 0,
                bytes_out: 0,
                connect_failures: 0,
                accept_errors: 0,
                moved: 0,
                udp: Default::default(),
            },
            connect_time: Histogram {
                bounds_us: vec![100],
                counts: vec![0, 0],
                sum_us: 0,
            },
            http: HttpProcess {
                server_connections_opened: 4,
                server_connections_reused: 9,
                server_connections_idle: 2,
                parse_errors: [("bare_lf", 1), ("obs_fold", 0)].into_iter().collect(),
                sources: [(
                    "file",
                    crate::status::SourceStatus {
                        responses: 4,
                        classes: [("2xx", 3), ("3xx", 1)].into_iter().collect(),
                        not_modified: 1,
                        partial: 2,
                    },
                )]
                .into_iter()
                .collect(),
            },
            files: crate::status::FilesStatus {
                cache_hits: 7,
                cache_misses: 3,
                cache_entries: 3,
                descriptors: 1,
                descriptors_max: 100,
                cold_reads: 4,
            },
            cgi: crate::status::CgiStatus { children: 2 },
            tls: crate::status::TlsProcess {
                handshakes: vec![crate::status::TlsHandshakes {
                    version: "1.3",
                    kind: "resumed",
                    count: 3,
                }],
                failures: [("timeout", 2)].into_iter().collect(),
            },
            h2: crate::status::H2Process {
                connections: 4,
                streams: 9,
                errors: [("ENHANCE_YOUR_CALM", 1), ("PROTOCOL_ERROR", 0)]
                    .into_iter()
                    .collect(),
            },
            listeners,
            pools: Vec::new(),
            discovery: Vec::new(),
        }
    }

    fn listener(name: &str, http: Option<HttpListenerStatus>) -> ListenerStatus {
        ListenerStatus {
            name: name.into(),
            listen: "127.0.0.1:1".into(),
            mode: "tracking".into(),
            protocol: if http.is_some() { "http" } else { "tcp" },
            health_check: None,
            http,
            tls: None,
            servers: Vec::new(),
            emergency: None,
            abuse: None,
            queue: Default::default(),
            maglev: Vec::new(),
        }
    }

    #[test]
    fn h2_families_count_connections_streams_and_errors_by_code() {
        let text = render(&snapshot(vec![listener("web", None)]));
        for line in [
            "quill_h2_connections_total 4",
            "quill_h2_streams_total 9",
            "quill_h2_connection_errors_total{code=\"ENHANCE_YOUR_CALM\"} 1",
            "quill_h2_connection_errors_total{code=\"PROTOCOL_ERROR\"} 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing in:\n{text}"
            );
        }
    }

    #[test]
    fn tls_families_count_handshakes_failures_and_certificate_expiry() {
        let mut l = listener("secure", None);
        l.tls = Some(crate::status::ListenerTls {
            certificates: vec![crate::status::CertStatus {
                file: "/etc/q/site.pem".into(),
                names: vec!["example.com".into()],
                not_after: 100,
                expires_in_s: -5,
            }],
        });
        let text = render(&snapshot(vec![l]));
        for line in [
            "quill_tls_handshakes_total{version=\"1.3\",kind=\"resumed\"} 3",
            "quill_tls_handshake_failures_total{reason=\"timeout\"} 2",
            "quill_tls_certificate_expiry_seconds{listener=\"secure\",cert=\"/etc/q/site.pem\"} -5",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing in:\n{text}"
            );
        }
    }

    #[test]
    fn http_families_per_listener_and_for_the_process() {
        let web = HttpListenerStatus {
            requests: 3,
            classes: [("2xx", 2), ("5xx", 1)].into_iter().collect(),
            duration: Histogram {
                bounds_us: vec![250, 1_000_000],
                counts: vec![1, 1, 1],
                sum_us: 2_500_250,
            },
            routes: Vec::new(),
        };
        let snap = snapshot(vec![listener("tcp", None), listener("web", Some(web))]);
        let mut out = Exposition::default();
        http(&mut out, &snap);
        let samples: Vec<&str> = out.text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "quill_http_requests_total{listener=\"web\",class=\"2xx\"} 2",
                "quill_http_requests_total{listener=\"web\",class=\"5xx\"} 1",
                "quill_http_request_duration_seconds_bucket{listener=\"web\",le=\"0.00025\"} 1",
                "quill_http_request_duration_seconds_bucket{listener=\"web\",le=\"1\"} 2",
                "quill_http_request_duration_seconds_bucket{listener=\"web\",le=\"+Inf\"} 3",
                "quill_http_request_duration_seconds_sum{listener=\"web\"} 2.50025",
                "quill_http_request_duration_seconds_count{listener=\"web\"} 3",
                "quill_http_server_connections_total{kind=\"opened\"} 4",
                "quill_http_server_connections_total{kind=\"reused\"} 9",
                "quill_http_server_idle_connections 2",
                "quill_http_parse_errors_total{kind=\"bare_lf\"} 1",
                "quill_http_parse_errors_total{kind=\"obs_fold\"} 0",
            ]
        );
        // Without an HTTP listener only the process-wide families are written.
        let mut out = Exposition::default();
        http(&mut out, &snapshot(vec![listener("tcp", None)]));
        assert!(!out.text.contains("quill_http_requests_total"));
        assert!(out
            .text
            .contains("# TYPE quill_http_parse_errors_total counter"));
    }

    #[test]
    fn route_families_per_listener_route_and_class() {
        let route = |name: &str, ok: u64| HttpRouteStatus {
            route: name.into(),
            requests: ok,
            classes: [("2xx", ok), ("5xx", 0)].into_iter().collect(),
            duration: Histogram {
                bounds_us: vec![250],
                counts: vec![ok, 0],
                sum_us: 100 * ok,
            },
        };
        let web = HttpListenerStatus {
            requests: 3,
            classes: [("2xx", 3), ("5xx", 0)].into_iter().collect(),
            duration: Histogram {
                bounds_us: vec![250],
                counts: vec![3, 0],
                sum_us: 300,
            },
            routes: vec![route("api", 2), route("(no route)", 1)],
        };
        let plain = HttpListenerStatus {
            routes: Vec::new(),
            ..web.clone()
        };
        let snap = snapshot(vec![
            listener("web", Some(web)),
            listener("plain", Some(plain)),
        ]);
        let mut out = Exposition::default();
        http(&mut out, &snap);
        let samples: Vec<&str> = out
            .text
            .lines()
            .filter(|l| l.starts_with("quill_http_route_"))
            .collect();
        assert_eq!(
            samples,
            [
                "quill_http_route_requests_total{listener=\"web\",route=\"api\",class=\"2xx\"} 2",
                "quill_http_route_requests_total{listener=\"web\",route=\"api\",class=\"5xx\"} 0",
                "quill_http_route_requests_total{listener=\"web\",route=\"(no route)\",class=\"2xx\"} 1",
                "quill_http_route_requests_total{listener=\"web\",route=\"(no route)\",class=\"5xx\"} 0",
                "quill_http_route_request_duration_seconds_bucket{listener=\"web\",route=\"api\",le=\"0.00025\"} 2",
                "quill_http_route_request_duration_seconds_bucket{listener=\"web\",route=\"api\",le=\"+Inf\"} 2",
                "quill_http_route_request_duration_seconds_sum{listener=\"web\",route=\"api\"} 0.0002",
                "quill_http_route_request_duration_seconds_count{listener=\"web\",route=\"api\"} 2",
                "quill_http_route_request_duration_seconds_bucket{listener=\"web\",route=\"(no route)\",le=\"0.00025\"} 1",
                "quill_http_route_request_duration_seconds_bucket{listener=\"web\",route=\"(no route)\",le=\"+Inf\"} 1",
                "quill_http_route_request_duration_seconds_sum{listener=\"web\",route=\"(no route)\"} 0.0001",
                "quill_http_route_request_duration_seconds_count{listener=\"web\",route=\"(no route)\"} 1",
            ]
        );
        // No listener with routes: no route family at all.
        let mut out = Exposition::default();
        http(&mut out, &snapshot(vec![listener("tcp", None)]));
        assert!(!out.text.contains("quill_http_route_"));
    }

    #[test]
    fn response_and_file_families_by_source_and_result() {
        let snap = snapshot(Vec::new());
        let mut out = Exposition::default();
        responses(&mut out, &snap);
        files(&mut out, &snap);
        let samples: Vec<&str> = out.text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "quill_http_responses_total{source=\"file\",class=\"2xx\"} 3",
                "quill_http_responses_total{source=\"file\",class=\"3xx\"} 1",
                "quill_http_responses_not_modified_total{source=\"file\"} 1",
                "quill_http_responses_partial_total{source=\"file\"} 2",
                "quill_file_cache_lookups_total{result=\"hit\"} 7",
                "quill_file_cache_lookups_total{result=\"miss\"} 3",
                "quill_file_cold_reads_total 4",
                "quill_file_cache_entries 3",
                "quill_file_cache_descriptors 1",
                "quill_file_cache_descriptors_max 100",
                "quill_cgi_children 2",
            ]
        );
        assert!(out.text.contains("# TYPE quill_cgi_children gauge\n"));
    }

    #[test]
    fn samples_carry_labels_in_order() {
        let mut e = Exposition::default();
        e.family("quill_x_total", Kind::Counter, "X.");
        e.sample("quill_x_total", &[("a", "1"), ("b", "q\"")], 7);
        e.sample("quill_x_total", &[], 8);
        assert_eq!(
            e.text,
            "# HELP quill_x_total X.\n# TYPE quill_x_total counter\nquill_x_total{a=\"1\",b=\"q\\\"\"} 7\nquill_x_total 8\n"
        );
    }
}
