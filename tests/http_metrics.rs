//! HTTP observability (issue 11 point 9, DESIGN §6.3 Metrics): `/metrics` counts an HTTP
//! listener's requests by status class and their durations, the server connections opened and
//! reused and the idle ones, and parse errors by kind; `/api/status` (what the status page
//! reads) carries the same per HTTP listener. Each test starts the real binary (`-H`, `--admin`)
//! in front of the scripted backend of tests/support/http.rs, sends requests whose outcome is
//! known, and checks the exact counts.

mod admin_support;
#[path = "support/http.rs"]
mod http_support;
mod support;

use std::net::SocketAddr;

use admin_support::{check_histogram, metrics, start_with_admin, status_json, wait_metrics};
use http_support::{Backend, Client, Step};
use support::{pen_args, QuillProcess};

/// Every parse error kind `quill_http_parse_errors_total` names (`http1::Error::name`).
const PARSE_ERROR_KINDS: [&str; 27] = [
    "head_too_large",
    "request_line_too_long",
    "too_many_headers",
    "bare_cr",
    "bare_lf",
    "control_char",
    "space_before_colon",
    "obs_fold",
    "invalid_method",
    "invalid_header_name",
    "invalid_request_line",
    "invalid_target",
    "invalid_version",
    "invalid_status_line",
    "invalid_content_length",
    "conflicting_content_length",
    "content_length_with_transfer_encoding",
    "transfer_encoding_not_chunked",
    "unknown_transfer_coding",
    "transfer_encoding_in_http_1_0",
    "missing_host",
    "several_hosts",
    "invalid_host",
    "bad_chunk_size",
    "bad_chunk_line",
    "bad_trailer",
    "truncated",
];

const CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "none"];

/// A backend that answers `/missing` with 404 and anything else with 200, keeping connections.
fn backend() -> Backend {
    Backend::start(|r| {
        let status = if r.target == "/missing" { 404 } else { 200 };
        vec![Step::Send(http_support::response(status, "", b"hello"))]
    })
}

/// `quill --admin ADDR -H -l DIR/access.log 127.0.0.1:PORT SERVER`.
fn start(server: SocketAddr) -> (QuillProcess, SocketAddr) {
    start_with_admin(|dir, port, admin| {
        let mut args = vec!["--admin".to_string(), admin.to_string()];
        args.extend(pen_args(dir, port, &["-H"], &[server.to_string()]));
        args
    })
}

/// The traffic of known outcome: on one kept-alive client connection, three 200s and a 404 from
/// the backend (one server connection opened, then reused three times); on another, a request
/// with a bare LF that Quill answers 400 itself (nothing reaches the server).
fn known_traffic(port: u16) {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut c = Client::connect(addr);
    for (target, want) in [("/a", 200), ("/b", 200), ("/missing", 404), ("/c", 200)] {
        let r = c.roundtrip(&http_support::get(target));
        assert_eq!(r.status, want, "{target}");
        assert!(!r.says_close(), "{target}: the connection stays open");
    }
    drop(c);
    let mut bad = Client::connect(addr);
    let r = bad.roundtrip(b"GET /x HTTP/1.1\nHost: example.test\r\n\r\n");
    assert_eq!(r.status, 400, "a bare LF");
}

#[test]
fn http_metrics_count_requests_by_listener_and_status_class() {
    let b = backend();
    let (q, admin) = start(b.addr());
    let before = metrics(admin);
    for class in CLASSES {
        assert_eq!(
            before.value(
                "quill_http_requests_total",
                &[("listener", "default"), ("class", class)]
            ),
            0.0,
            "{class} before any request"
        );
    }
    known_traffic(q.port);
    let m = wait_metrics(admin, "five requests", |m| {
        m.sum("quill_http_requests_total", &[("listener", "default")]) >= 5.0
    });
    assert_eq!(m.family("quill_http_requests_total").kind, "counter");
    let want = [
        ("1xx", 0.0),
        ("2xx", 3.0),
        ("3xx", 0.0),
        ("4xx", 2.0),
        ("5xx", 0.0),
        ("none", 0.0),
    ];
    for (class, n) in want {
        assert_eq!(
            m.value(
                "quill_http_requests_total",
                &[("listener", "default"), ("class", class)]
            ),
            n,
            "class {class}:\n{}",
            m.text
        );
    }
    assert_eq!(
        m.samples("quill_http_requests_total", &[]).len(),
        CLASSES.len(),
        "one series per class of the one listener"
    );
}

#[test]
fn http_request_duration_histogram_counts_requests_a_server_answered() {
    let b = backend();
    let (q, admin) = start(b.addr());
    known_traffic(q.port);
    let m = wait_metrics(admin, "five requests", |m| {
        m.sum("quill_http_requests_total", &[("listener", "default")]) >= 5.0
    });
    let name = "quill_http_request_duration_seconds";
    assert_eq!(
        check_histogram(&m, name),
        4.0,
        "the four answered by the server are timed, Quill's own 400 is not"
    );
    for s in m.samples(&format!("{name}_bucket"), &[]) {
        assert_eq!(
            s.labels.get("listener").map(String::as_str),
            Some("default")
        );
    }
    let sum = m.value(&format!("{name}_sum"), &[("listener", "default")]);
    assert!(sum > 0.0 && sum < 40.0, "sum of four durations: {sum} s");
}

#[test]
fn http_server_connections_count_opened_reused_and_idle() {
    let b = backend();
    let (q, admin) = start(b.addr());
    let before = metrics(admin);
    for kind in ["opened", "reused"] {
        assert_eq!(
            before.value("quill_http_server_connections_total", &[("kind", kind)]),
            0.0,
            "{kind} before any request"
        );
    }
    assert_eq!(before.value("quill_http_server_idle_connections", &[]), 0.0);
    known_traffic(q.port);
    let m = wait_metrics(admin, "the server connection idle again", |m| {
        m.value("quill_http_server_connections_total", &[("kind", "reused")]) >= 3.0
            && m.value("quill_http_server_idle_connections", &[]) >= 1.0
    });
    assert_eq!(
        m.value("quill_http_server_connections_total", &[("kind", "opened")]),
        1.0,
        "one server connection for four requests:\n{}",
        m.text
    );
    assert_eq!(
        m.value("quill_http_server_connections_total", &[("kind", "reused")]),
        3.0
    );
    assert_eq!(m.value("quill_http_server_idle_connections", &[]), 1.0);
    assert_eq!(m.family("quill_http_server_idle_connections").kind, "gauge");
    assert_eq!(b.accepted(), 1, "the backend saw one connection");
}

#[test]
fn http_parse_errors_are_counted_by_kind() {
    let b = backend();
    let (q, admin) = start(b.addr());
    known_traffic(q.port);
    let m = wait_metrics(admin, "the bare LF counted", |m| {
        m.value("quill_http_parse_errors_total", &[("kind", "bare_lf")]) >= 1.0
    });
    assert_eq!(m.family("quill_http_parse_errors_total").kind, "counter");
    for kind in PARSE_ERROR_KINDS {
        let want = if kind == "bare_lf" { 1.0 } else { 0.0 };
        assert_eq!(
            m.value("quill_http_parse_errors_total", &[("kind", kind)]),
            want,
            "{kind}"
        );
    }
    assert_eq!(
        m.samples("quill_http_parse_errors_total", &[]).len(),
        PARSE_ERROR_KINDS.len(),
        "one series per kind, no more"
    );
    assert_eq!(b.requests().len(), 4, "the refused request reached nobody");
}

#[test]
fn http_api_status_shows_requests_by_class_for_http_listeners() {
    let b = backend();
    let (q, admin) = start(b.addr());
    known_traffic(q.port);
    let _ = wait_metrics(admin, "five requests and the idle connection", |m| {
        m.sum("quill_http_requests_total", &[("listener", "default")]) >= 5.0
            && m.value("quill_http_server_idle_connections", &[]) >= 1.0
    });
    let s = status_json(admin);
    let l = &s["listeners"][0];
    assert_eq!(l["name"], "default");
    assert_eq!(l["protocol"], "http");
    let h = &l["http"];
    assert_eq!(h["requests"], 5, "{h}");
    let classes = &h["classes"];
    for (class, n) in [
        ("1xx", 0),
        ("2xx", 3),
        ("3xx", 0),
        ("4xx", 2),
        ("5xx", 0),
        ("none", 0),
    ] {
        assert_eq!(classes[class], n, "class {class}: {h}");
    }
    let d = &h["duration"];
    let counts: Vec<u64> = d["counts"]
        .as_array()
        .expect("duration.counts")
        .iter()
        .map(|v| v.as_u64().expect("a count"))
        .collect();
    assert_eq!(counts.iter().sum::<u64>(), 4, "{d}");
    assert_eq!(
        counts.len(),
        d["bounds_us"].as_array().expect("duration.bounds_us").len() + 1,
        "one open-ended bucket past the bounds"
    );
    let p = &s["http"];
    assert_eq!(p["server_connections_opened"], 1, "{p}");
    assert_eq!(p["server_connections_reused"], 3, "{p}");
    assert_eq!(p["server_connections_idle"], 1, "{p}");
    assert_eq!(p["parse_errors"]["bare_lf"], 1, "{p}");
    assert_eq!(
        p["parse_errors"].as_object().map(|o| o.len()),
        Some(PARSE_ERROR_KINDS.len())
    );
}

#[test]
fn tcp_listeners_have_no_http_request_series() {
    let b = backend();
    let (_q, admin) = start_with_admin(|dir, port, admin| {
        let mut args = vec!["--admin".to_string(), admin.to_string()];
        args.extend(pen_args(dir, port, &[], &[b.addr().to_string()]));
        args
    });
    let m = metrics(admin);
    assert!(
        !m.text.contains("quill_http_requests_total")
            && !m.text.contains("quill_http_request_duration_seconds"),
        "no per-listener HTTP family without an HTTP listener:\n{}",
        m.text
    );
    // The process-wide ones are always there, at zero.
    assert_eq!(
        m.value("quill_http_server_connections_total", &[("kind", "opened")]),
        0.0
    );
    assert_eq!(
        m.value("quill_http_parse_errors_total", &[("kind", "bare_lf")]),
        0.0
    );
    let s = status_json(admin);
    assert_eq!(s["listeners"][0]["protocol"], "tcp");
    assert!(s["listeners"][0]["http"].is_null());
}
