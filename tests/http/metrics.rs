//! HTTP observability (docs/design.md#access-log-and-metrics): `/metrics` counts an HTTP
//! listener's requests by status class and their durations, the server connections opened and
//! reused and the idle ones, and parse errors by kind; `/api/status` (what the status page
//! reads) carries the same per HTTP listener, and per route for a listener with routes
//! (`quill_http_route_*`, kept across a reload for a route of the same name). Each test starts the real binary (`-H`, `--admin`)
//! in front of the scripted backend of tests/support/http.rs, sends requests whose outcome is
//! known, and checks the exact counts. The last test loads the status page in headless Chromium
//! (Debian's `chromium` at /usr/bin/chromium, as tests/control/status_page.rs needs; without it
//! that test fails, it never skips).

use crate::admin_support;
use crate::ctl;
use crate::http_support;
use crate::support;

use std::fs;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use admin_support::chromium::{attr, dump_dom, series_values, tag, Gate};
use admin_support::{
    check_histogram, metrics, start_pen_with_admin, start_with_admin, status_json, wait_metrics,
};
use http_support::{Backend, Client, Step};
use support::QuillProcess;

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
    start_pen_with_admin(&["-H"], &[server.to_string()])
}

/// `quill --admin ADDR --config DIR/quill.toml`, the file being `text(DIR, PORT)`.
fn start_with_config(text: impl Fn(&Path, u16) -> String) -> (QuillProcess, SocketAddr) {
    start_with_admin(|dir, port, admin| {
        let cfg = dir.join("quill.toml");
        fs::write(&cfg, text(dir, port)).unwrap();
        vec![
            "--admin".into(),
            admin.to_string(),
            "--config".into(),
            cfg.display().to_string(),
        ]
    })
}

/// Puts `text` in place of the file at `path` in one step (a new file renamed over it).
fn replace_file(path: &Path, text: &str) {
    let tmp = path.with_extension("new");
    fs::write(&tmp, text).unwrap();
    fs::rename(&tmp, path).unwrap();
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

/// What [`known_traffic`] leaves per status class: three 200s, then the server's 404 and
/// Quill's own 400.
const KNOWN_CLASSES: [(&str, f64); 6] = [
    ("1xx", 0.0),
    ("2xx", 3.0),
    ("3xx", 0.0),
    ("4xx", 2.0),
    ("5xx", 0.0),
    ("none", 0.0),
];

/// The [`backend`], quill in front of it ([`start`]) and the [`known_traffic`] through it.
fn start_with_known_traffic() -> (Backend, QuillProcess, SocketAddr) {
    let b = backend();
    let (q, admin) = start(b.addr());
    known_traffic(q.port);
    (b, q, admin)
}

/// `quill_http_requests_total` of the listener `default`, class `class`.
fn default_class(m: &admin_support::Metrics, class: &str) -> f64 {
    m.value(
        "quill_http_requests_total",
        &[("listener", "default"), ("class", class)],
    )
}

#[test]
fn http_metrics_count_requests_by_listener_and_status_class() {
    let b = backend();
    let (q, admin) = start(b.addr());
    let before = metrics(admin);
    for class in CLASSES {
        assert_eq!(
            default_class(&before, class),
            0.0,
            "{class} before any request"
        );
    }
    known_traffic(q.port);
    let m = wait_metrics(admin, "five requests", |m| {
        m.sum("quill_http_requests_total", &[("listener", "default")]) >= 5.0
    });
    assert_eq!(m.family("quill_http_requests_total").kind, "counter");
    for (class, n) in KNOWN_CLASSES {
        assert_eq!(default_class(&m, class), n, "class {class}:\n{}", m.text);
    }
    assert_eq!(
        m.samples("quill_http_requests_total", &[]).len(),
        CLASSES.len(),
        "one series per class of the one listener"
    );
}

#[test]
fn http_requests_cut_before_any_response_count_as_class_none() {
    let b = Backend::start(|_| vec![Step::Hang]);
    let (q, admin) = start(b.addr());
    let mut c = Client::connect(SocketAddr::from(([127, 0, 0, 1], q.port)));
    // A body promised and cut: the client leaves while the request is still going up.
    c.send(
        b"POST /upload HTTP/1.1\r\nHost: example.test\r\nContent-Length: 100000\r\n\r\nfirst bytes",
    );
    assert!(
        http_support::wait_until(Duration::from_secs(10), || b.received_total() > 0),
        "the request head reached the server"
    );
    drop(c);
    let m = wait_metrics(admin, "the cut request", |m| {
        m.sum("quill_http_requests_total", &[("listener", "default")]) >= 1.0
    });
    for class in CLASSES {
        let want = if class == "none" { 1.0 } else { 0.0 };
        assert_eq!(default_class(&m, class), want, "class {class}:\n{}", m.text);
    }
}

#[test]
fn http_request_duration_histogram_counts_requests_a_server_answered() {
    let (_b, _q, admin) = start_with_known_traffic();
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
    let (b, _q, admin) = start_with_known_traffic();
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
    let (_b, _q, admin) = start_with_known_traffic();
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
    for (class, n) in KNOWN_CLASSES {
        assert_eq!(classes[class], n as u64, "class {class}: {h}");
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
    let (_q, admin) = start_pen_with_admin(&[], &[b.addr().to_string()]);
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

#[test]
fn http_request_counts_survive_a_reload() {
    let (b1, b2) = (backend(), backend());
    let (q, admin) = start_with_config(|_, port| {
        http_support::toml_config(port, "", "", &[b1.addr().to_string()])
    });
    known_traffic(q.port);
    let _ = wait_metrics(admin, "five requests", |m| {
        m.sum("quill_http_requests_total", &[("listener", "web")]) >= 5.0
    });
    // A second server: the listener stays, its pool is rebuilt.
    let servers = [b1.addr().to_string(), b2.addr().to_string()];
    let next = http_support::toml_config(q.port, "", "", &servers);
    replace_file(&q.path("quill.toml"), &next);
    q.signal("HUP");
    assert!(
        q.wait_stderr_contains("SIGHUP: reloaded", Duration::from_secs(5)),
        "no reload:\n{}",
        q.stderr()
    );
    let mut c = Client::connect(SocketAddr::from(([127, 0, 0, 1], q.port)));
    assert_eq!(c.roundtrip(&http_support::get("/after")).status, 200);
    drop(c);
    let m = wait_metrics(admin, "six requests", |m| {
        m.sum("quill_http_requests_total", &[("listener", "web")]) >= 6.0
    });
    let class = |c: &str| {
        m.value(
            "quill_http_requests_total",
            &[("listener", "web"), ("class", c)],
        )
    };
    assert_eq!((class("2xx"), class("4xx")), (4.0, 2.0), "{}", m.text);
    assert_eq!(
        check_histogram(&m, "quill_http_request_duration_seconds"),
        5.0
    );
}

// ---------------------------------------------------------------------------------------------
// Per route
// ---------------------------------------------------------------------------------------------

/// A backend that answers `.../missing` with 404, `.../boom` with 500 and anything else with
/// 200, keeping connections.
fn status_backend() -> Backend {
    Backend::start(|r| {
        let status = if r.target.ends_with("/missing") {
            404
        } else if r.target.ends_with("/boom") {
            500
        } else {
            200
        };
        vec![Step::Send(http_support::response(status, "", b"hi"))]
    })
}

/// The TOML of an HTTP listener `web` on `port` over `default` (its own servers), two workers,
/// a control socket at DIR/ctl.sock, the named pool `api` over `api`, and the route tables
/// `routes`.
fn routed_config(
    dir: &Path,
    port: u16,
    api: &[String],
    default: SocketAddr,
    routes: &str,
) -> String {
    let api: Vec<String> = api.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "control = \"{}\"\nworkers = 2\n\
         [[pool]]\nname = \"api\"\nservers = [{}]\n\
         [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
         servers = [\"{default}\"]\n{routes}",
        dir.join("ctl.sock").display(),
        api.join(", ")
    )
}

const API_ROUTE: &str = "[[listener.route]]\nname = \"api\"\npath = \"/api/\"\npool = \"api\"\n";
const OLD_ROUTE: &str = "[[listener.route]]\nname = \"old\"\npath = \"/old/\"\n\
                         redirect = { to = \"https://example.com/new/\", status = 301 }\n";

/// Quill with `--admin` and the file of [`routed_config`]; returns the process, the admin
/// address and the file's path (for reloads).
fn start_routed(
    api: &Backend,
    default: &Backend,
    routes: &str,
) -> (QuillProcess, SocketAddr, std::path::PathBuf) {
    let (q, admin) = start_with_config(|dir, port| {
        routed_config(dir, port, &[api.addr().to_string()], default.addr(), routes)
    });
    let cfg = q.path("quill.toml");
    ctl::wait_ctl(&q, &q.path("ctl.sock"));
    (q, admin, cfg)
}

/// Sends each request on the kept-alive client `c` and checks its status.
fn expect(c: &mut Client, requests: &[(&str, u16)]) {
    for (target, want) in requests {
        let r = c.roundtrip(&http_support::get(target));
        assert_eq!(r.status, *want, "{target}");
    }
}

/// On one kept-alive client connection to quill of [`start_routed`] (with `API_ROUTE` and
/// `OLD_ROUTE`): `/api/a` (200), `second` to `api`, `/old/x` (301) and `/x` (200, no route); then
/// waits until `/metrics` counted the four on `web`'s routes.
fn four_routed_requests(q: &QuillProcess, admin: SocketAddr, second: (&str, u16)) {
    let mut c = Client::connect(q.addr());
    expect(
        &mut c,
        &[("/api/a", 200), second, ("/old/x", 301), ("/x", 200)],
    );
    drop(c);
    let _ = wait_metrics(admin, "four routed requests", |m| {
        m.sum("quill_http_route_requests_total", &[("listener", "web")]) >= 4.0
    });
}

/// `quill_http_route_requests_total` of route `route` on `web`, class `class`.
fn route_class(m: &admin_support::Metrics, route: &str, class: &str) -> f64 {
    m.value(
        "quill_http_route_requests_total",
        &[("listener", "web"), ("route", route), ("class", class)],
    )
}

/// The timed requests of route `route` on `web` (`_count`, equal to its `+Inf` bucket).
fn route_timed(m: &admin_support::Metrics, route: &str) -> f64 {
    let name = "quill_http_route_request_duration_seconds";
    let labels = [("listener", "web"), ("route", route)];
    let count = m.value(&format!("{name}_count"), &labels);
    let mut inf = labels.to_vec();
    inf.push(("le", "+Inf"));
    assert_eq!(m.value(&format!("{name}_bucket"), &inf), count, "{route}");
    count
}

#[test]
fn http_route_metrics_count_requests_per_route_and_class() {
    let (api, default) = (status_backend(), status_backend());
    let (q, admin, _) = start_routed(&api, &default, &format!("{API_ROUTE}{OLD_ROUTE}"));
    let before = metrics(admin);
    for route in ["api", "old", "(no route)"] {
        for class in CLASSES {
            assert_eq!(
                route_class(&before, route, class),
                0.0,
                "{route} {class} before"
            );
        }
    }
    let mut c = Client::connect(q.addr());
    expect(
        &mut c,
        &[
            ("/api/a", 200),
            ("/api/missing", 404),
            ("/api/b", 200),
            ("/old/x", 301),
            ("/x", 200),
            ("/boom", 500),
        ],
    );
    drop(c);
    expect(&mut Client::connect(q.addr()), &[("/old/y", 301)]);
    // Refused before routing (a bare LF): the listener counts it, no route does.
    let mut bad = Client::connect(q.addr());
    let r = bad.roundtrip(b"GET /api/x HTTP/1.1\nHost: example.test\r\n\r\n");
    assert_eq!(r.status, 400);
    let m = wait_metrics(admin, "eight requests", |m| {
        m.sum("quill_http_requests_total", &[("listener", "web")]) >= 8.0
            && m.sum("quill_http_route_requests_total", &[("listener", "web")]) >= 7.0
    });
    assert_eq!(m.family("quill_http_route_requests_total").kind, "counter");
    assert_eq!(
        m.family("quill_http_route_request_duration_seconds").kind,
        "histogram"
    );
    let want = [
        ("api", [("2xx", 2.0), ("4xx", 1.0)]),
        ("old", [("3xx", 2.0), ("4xx", 0.0)]),
        ("(no route)", [("2xx", 1.0), ("5xx", 1.0)]),
    ];
    for (route, counts) in want {
        let total: f64 = counts.iter().map(|(_, n)| n).sum();
        for (class, n) in counts {
            assert_eq!(
                route_class(&m, route, class),
                n,
                "{route} {class}:\n{}",
                m.text
            );
        }
        assert_eq!(
            m.sum(
                "quill_http_route_requests_total",
                &[("listener", "web"), ("route", route)]
            ),
            total,
            "{route}: no other class counted:\n{}",
            m.text
        );
    }
    assert_eq!(
        m.samples("quill_http_route_requests_total", &[]).len(),
        3 * CLASSES.len(),
        "one series per route and class, a route once"
    );
    // Timed as the listener's are: what a server answered, not Quill's own redirects.
    assert_eq!(route_timed(&m, "api"), 3.0);
    assert_eq!(route_timed(&m, "old"), 0.0);
    assert_eq!(route_timed(&m, "(no route)"), 2.0);
    // The listener's series are unchanged by routes: every request, the 400 included.
    for (class, n) in [("2xx", 3.0), ("3xx", 2.0), ("4xx", 2.0), ("5xx", 1.0)] {
        assert_eq!(
            m.value(
                "quill_http_requests_total",
                &[("listener", "web"), ("class", class)]
            ),
            n,
            "listener {class}"
        );
    }
    // /api/status carries the same per route, in configuration order.
    let s = status_json(admin);
    let routes = s["listeners"][0]["http"]["routes"]
        .as_array()
        .expect("http.routes")
        .clone();
    let seen: Vec<(String, u64)> = routes
        .iter()
        .map(|r| {
            (
                r["route"].as_str().unwrap_or_default().to_string(),
                r["requests"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("api".to_string(), 3),
            ("old".to_string(), 2),
            ("(no route)".to_string(), 2)
        ]
    );
    assert_eq!(routes[0]["classes"]["4xx"], 1, "{}", routes[0]);
    assert_eq!(routes[2]["classes"]["5xx"], 1, "{}", routes[2]);
    assert_eq!(s["listeners"][0]["http"]["requests"], 8);
}

#[test]
fn http_route_metrics_count_a_request_no_route_matched_as_no_route() {
    let api = status_backend();
    // A listener with routes and no servers of its own: what no route takes is answered 404.
    let (q, admin) = start_with_config(|_, port| {
        format!(
            "[[pool]]\nname = \"api\"\nservers = [\"{}\"]\n\
             [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
             {API_ROUTE}",
            api.addr()
        )
    });
    expect(
        &mut Client::connect(q.addr()),
        &[("/nowhere", 404), ("/api/a", 200), ("/else", 404)],
    );
    let m = wait_metrics(admin, "three requests", |m| {
        m.sum("quill_http_route_requests_total", &[("listener", "web")]) >= 3.0
    });
    assert_eq!(route_class(&m, "(no route)", "4xx"), 2.0, "{}", m.text);
    assert_eq!(route_class(&m, "api", "2xx"), 1.0, "{}", m.text);
    assert_eq!(
        route_timed(&m, "(no route)"),
        0.0,
        "Quill's own 404 is not timed"
    );
    assert_eq!(api.requests().len(), 1);
}

#[test]
fn http_route_metrics_count_a_routes_acl_and_rate_refusals_on_that_route() {
    let api = status_backend();
    // `/api/` admits only 127.0.0.2; `/slow/` allows one request, then one a minute.
    let (q, admin) = start_with_config(|_, port| {
        format!(
            "[acl]\n1 = [\"permit 127.0.0.2\", \"deny 0.0.0.0/0\"]\n\
             [[pool]]\nname = \"api\"\nservers = [\"{}\"]\n\
             [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
             [[listener.route]]\nname = \"api\"\npath = \"/api/\"\nclient_acl = 1\npool = \"api\"\n\
             [[listener.route]]\nname = \"slow\"\npath = \"/slow/\"\nrate = \"1/m\"\nburst = 1\npool = \"api\"\n",
            api.addr()
        )
    });
    expect(
        &mut Client::connect(q.addr()),
        &[
            ("/api/a", 403),
            ("/slow/a", 200),
            ("/slow/b", 429),
            ("/api/b", 403),
        ],
    );
    let m = wait_metrics(admin, "four requests", |m| {
        m.sum("quill_http_route_requests_total", &[("listener", "web")]) >= 4.0
    });
    assert_eq!(route_class(&m, "api", "4xx"), 2.0, "{}", m.text);
    assert_eq!(route_class(&m, "slow", "2xx"), 1.0, "{}", m.text);
    assert_eq!(route_class(&m, "slow", "4xx"), 1.0, "{}", m.text);
    assert_eq!(
        m.sum(
            "quill_http_route_requests_total",
            &[("listener", "web"), ("route", "(no route)")]
        ),
        0.0,
        "{}",
        m.text
    );
    assert_eq!(api.requests().len(), 1);
}

#[test]
fn http_route_metrics_survive_a_reload() {
    let (api, api2, default) = (status_backend(), status_backend(), status_backend());
    let (q, admin, cfg) = start_routed(&api, &default, &format!("{API_ROUTE}{OLD_ROUTE}"));
    four_routed_requests(&q, admin, ("/api/b", 200));
    // The new file: `api` matches another path and its pool has a second server, `old` is
    // gone, `new` answers 503 itself.
    let routes = "[[listener.route]]\nname = \"new\"\npath = \"/new/\"\n\
                  respond = { status = 503, body = \"later\\n\" }\n\
                  [[listener.route]]\nname = \"api\"\npath = \"/v2/\"\npool = \"api\"\n";
    let dir = cfg.parent().expect("a directory").to_path_buf();
    let servers = [api.addr().to_string(), api2.addr().to_string()];
    let text = routed_config(&dir, q.port, &servers, default.addr(), routes);
    replace_file(&cfg, &text);
    let reply = ctl::ctl(&q.path("ctl.sock"), "reload");
    assert!(reply.contains("reloaded"), "{reply}");
    let mut c = Client::connect(q.addr());
    expect(&mut c, &[("/v2/a", 200), ("/new/x", 503), ("/x", 200)]);
    drop(c);
    let m = wait_metrics(admin, "seven requests", |m| {
        m.sum("quill_http_requests_total", &[("listener", "web")]) >= 7.0
            && m.sum("quill_http_route_requests_total", &[("listener", "web")]) >= 6.0
    });
    assert_eq!(
        route_class(&m, "api", "2xx"),
        3.0,
        "api kept its two:\n{}",
        m.text
    );
    assert_eq!(route_timed(&m, "api"), 3.0);
    assert_eq!(route_class(&m, "new", "5xx"), 1.0);
    assert_eq!(route_class(&m, "(no route)", "2xx"), 2.0);
    assert!(
        m.samples("quill_http_route_requests_total", &[("route", "old")])
            .is_empty(),
        "a route gone with the reload is no longer reported:\n{}",
        m.text
    );
    assert_eq!(
        m.samples("quill_http_route_requests_total", &[]).len(),
        3 * CLASSES.len()
    );
}

// ---------------------------------------------------------------------------------------------
// The status page in headless Chromium (tests/admin_support/chromium.rs, as
// tests/control/status_page.rs)
// ---------------------------------------------------------------------------------------------

/// The HTTP line (`<p class="http">` to its `</p>`) of listener `listener`'s section.
fn http_line<'a>(dom: &'a str, listener: &str) -> &'a str {
    let needle = format!("<section class=\"listener panel\" data-listener=\"{listener}\"");
    let section = &dom[dom
        .find(&needle)
        .unwrap_or_else(|| panic!("no section for the listener:\n{dom}"))..];
    let http = &section[section
        .find("<p class=\"http\"")
        .expect("the listener's HTTP line")..];
    &http[..http.find("</p>").expect("end of the HTTP line")]
}

/// The `data-value` of the first element whose tag contains `needle`.
fn value(html: &str, needle: &str) -> f64 {
    let t = tag(html, needle).unwrap_or_else(|| panic!("no {needle} in DOM:\n{html}"));
    attr(t, "data-value")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no numeric data-value: {t}"))
}

#[test]
fn http_status_page_shows_request_rate_and_status_classes() {
    let b = backend();
    let (q, admin) = start(b.addr());
    let port = q.port;
    let gate = Gate::start(admin, move || {
        known_traffic(port);
        Ok(())
    });

    let dom = dump_dom(&gate.url(), 6000);
    gate.check();
    let polls = gate.polls.load(Ordering::SeqCst);
    assert!(polls >= 3, "the page polled {polls} times");

    let http = http_line(&dom, "default");
    let p = tag(http, "<p").expect("the HTTP line's tag");
    assert!(!p.contains("hidden"), "shown: {http}");
    assert_eq!(value(http, "class=\"http-requests\""), 5.0, "{http}");
    for (class, n) in KNOWN_CLASSES {
        let needle = format!(" data-class=\"{class}\"");
        assert_eq!(value(http, &needle), n, "class {class}: {http}");
    }
    assert!(value(http, "class=\"http-duration\"") > 0.0, "{http}");
    assert_eq!(value(&dom, " id=\"http-opened\""), 1.0);
    assert_eq!(value(&dom, " id=\"http-reused\""), 3.0);
    assert_eq!(value(&dom, " id=\"http-idle\""), 1.0);
    // Rates come from differences between the page's own samples: a positive one means the
    // page saw the requests counted while it stayed loaded.
    let values = series_values(&dom, " data-series=\"http\" data-listener=\"default\"");
    assert!(values.len() >= 2, "requests/s drawn: {values:?}");
    assert!(
        values.iter().any(|&v| v > 0.0),
        "requests/s never moved: {values:?}"
    );
}

#[test]
fn http_status_page_shows_requests_per_route() {
    let (api, default) = (status_backend(), status_backend());
    let (q, admin, _) = start_routed(&api, &default, &format!("{API_ROUTE}{OLD_ROUTE}"));
    four_routed_requests(&q, admin, ("/api/missing", 404));
    let dom = dump_dom(&format!("http://{admin}/"), 3000);
    let http = http_line(&dom, "web");
    // The listener's own figures come first, as without routes.
    assert_eq!(value(http, "class=\"http-requests\""), 4.0, "{http}");
    assert_eq!(value(http, " data-class=\"2xx\""), 2.0, "{http}");
    let route = |name: &str| {
        let at = http
            .find(&format!("data-route=\"{name}\""))
            .unwrap_or_else(|| panic!("no line for route {name}: {http}"));
        let rest = &http[at..];
        // Up to the next route's line.
        let end = rest[1..].find("data-route=").map_or(rest.len(), |e| e + 1);
        &rest[..end]
    };
    // Each route's line: its requests, then the count of each class named.
    let line_says = |name: &str, requests: f64, classes: &[(&str, f64)]| {
        let line = route(name);
        let total = value(line, "class=\"http-route-requests\"");
        assert_eq!(total, requests, "{line}");
        for (class, n) in classes {
            let got = value(line, &format!(" data-class=\"{class}\""));
            assert_eq!(got, *n, "{class}: {line}");
        }
    };
    line_says("api", 2.0, &[("2xx", 1.0), ("4xx", 1.0)]);
    line_says("old", 1.0, &[("3xx", 1.0)]);
    line_says("(no route)", 1.0, &[("2xx", 1.0)]);
}
