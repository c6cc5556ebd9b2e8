//! The admin listener (`--admin`): `/metrics` in the Prometheus text format moving with traffic,
//! `/api/status` JSON, answers to bad requests, resistance to slow and hostile clients; and the
//! other reports: Pen's HTML report (`-w` + SIGUSR1) and the JSON access log.

use crate::admin_support;
use crate::support;

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use admin_support::*;
use support::*;

fn three_http_backends() -> (Vec<DemoServer>, Vec<String>) {
    let backends: Vec<DemoServer> = ["a", "b", "c"].iter().map(|n| http(n)).collect();
    let specs = backends.iter().map(|b| spec(b.addr())).collect();
    (backends, specs)
}

#[test]
fn metrics_follow_the_text_format_with_quill_names() {
    let (_backends, servers) = three_http_backends();
    let (_q, admin) = start_pen_with_admin(&["-r"], &servers);
    let m = metrics(admin);
    for f in &m.families {
        assert!(
            f.name.starts_with("quill_"),
            "{} lacks the quill_ prefix",
            f.name
        );
        assert!(!f.help.is_empty(), "{} has no HELP text", f.name);
        assert_eq!(
            f.kind == "counter",
            f.name.ends_with("_total"),
            "{}: counters, and only counters, end in _total (type {})",
            f.name,
            f.kind
        );
        assert!(!f.samples.is_empty(), "{} has no sample", f.name);
    }
    let want = [
        ("quill_sessions_accepted_total", "counter"),
        ("quill_sessions_ended_total", "counter"),
        ("quill_sessions_active", "gauge"),
        ("quill_sessions_max", "gauge"),
        ("quill_client_bytes_received_total", "counter"),
        ("quill_client_bytes_sent_total", "counter"),
        ("quill_backend_connect_failures_total", "counter"),
        ("quill_accept_errors_total", "counter"),
        ("quill_sessions_moved_total", "counter"),
        ("quill_workers_accepting", "gauge"),
        ("quill_backend_connect_duration_seconds", "histogram"),
        ("quill_process_start_time_seconds", "gauge"),
        ("quill_build_info", "gauge"),
        ("quill_server_sessions_active", "gauge"),
        ("quill_server_sessions_total", "counter"),
        ("quill_server_connect_failures_total", "counter"),
        ("quill_server_up", "gauge"),
        ("quill_server_state", "gauge"),
        ("quill_server_checks_total", "counter"),
        ("quill_server_checks_failed_total", "counter"),
        ("quill_server_bytes_sent_total", "counter"),
        ("quill_server_bytes_received_total", "counter"),
        ("quill_server_weight", "gauge"),
    ];
    for (name, kind) in want {
        assert_eq!(m.family(name).kind, kind, "type of {name}");
    }
    for reason in END_REASONS {
        m.value("quill_sessions_ended_total", &[("reason", reason)]);
    }
    assert_eq!(
        m.value(
            "quill_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    let started = m.value("quill_process_start_time_seconds", &[]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        started <= now && started > now - 120.0,
        "start time {started} vs now {now}"
    );
    for (i, s) in servers.iter().enumerate() {
        let index = i.to_string();
        let labels = [("listener", "default"), ("server", &index), ("address", s)];
        assert_eq!(m.value("quill_server_up", &labels), 1.0, "{s} up");
        assert_eq!(m.value("quill_server_weight", &labels), 1.0, "{s} weight");
        let states = m.samples("quill_server_state", &labels);
        let on: Vec<_> = states.iter().filter(|s| s.value == 1.0).collect();
        assert_eq!(on.len(), 1, "{s}: exactly one state is 1: {states:?}");
        assert_eq!(on[0].labels["state"], "up");
    }
    check_histogram(&m, "quill_backend_connect_duration_seconds");
}

#[test]
fn metrics_count_sessions_bytes_and_connect_times_as_traffic_flows() {
    const N: usize = 30;
    let (_backends, servers) = three_http_backends();
    let (q, admin) = start_pen_with_admin(&["-r"], &servers);
    let lines_before = q.log_lines().len();
    let before = metrics(admin);
    let connects_before = check_histogram(&before, "quill_backend_connect_duration_seconds");

    http_requests(q.port, N);
    q.wait_log_lines(lines_before + N, Duration::from_secs(10));
    let n = N as f64;
    let accepted = before.value("quill_sessions_accepted_total", &[]) + n;
    let done = before.value("quill_sessions_ended_total", &[("reason", "done")]) + n;
    let after = wait_metrics(admin, "all sessions ended", |m| {
        m.value("quill_sessions_ended_total", &[("reason", "done")]) >= done
            && m.value("quill_sessions_active", &[]) == 0.0
    });

    assert_eq!(after.value("quill_sessions_accepted_total", &[]), accepted);
    assert_eq!(
        after.value("quill_sessions_ended_total", &[("reason", "done")]),
        done
    );
    let total = |m: &Metrics| m.sum("quill_server_sessions_total", &[("listener", "default")]);
    assert_eq!(
        total(&after) - total(&before),
        n,
        "per-server totals sum to N"
    );
    for (i, s) in servers.iter().enumerate() {
        let index = i.to_string();
        let labels = [("server", index.as_str()), ("address", s.as_str())];
        assert!(
            after.value("quill_server_sessions_total", &labels) > 0.0,
            "round robin sent nothing to {s}"
        );
        assert_eq!(after.value("quill_server_sessions_active", &labels), 0.0);
    }
    let connects = check_histogram(&after, "quill_backend_connect_duration_seconds");
    assert_eq!(connects - connects_before, n, "one connect per session");
    // Client bytes are exactly our requests; the server side saw the same bytes.
    let request_bytes = (N * REQUEST.len()) as f64;
    let received = |m: &Metrics| m.value("quill_client_bytes_received_total", &[]);
    assert_eq!(received(&after) - received(&before), request_bytes);
    let to_servers = |m: &Metrics| m.sum("quill_server_bytes_sent_total", &[]);
    assert_eq!(to_servers(&after) - to_servers(&before), request_bytes);
    let sent = |m: &Metrics| m.value("quill_client_bytes_sent_total", &[]);
    let from_servers = |m: &Metrics| m.sum("quill_server_bytes_received_total", &[]);
    assert!(
        sent(&after) - sent(&before) >= n * 17.0,
        "responses counted"
    );
    assert_eq!(
        sent(&after) - sent(&before),
        from_servers(&after) - from_servers(&before)
    );
}

#[test]
fn metrics_count_connect_failures_and_sessions_without_a_server() {
    let dead = refused_addr();
    let (q, admin) = start_pen_with_admin(&["-r"], &[spec(dead)]);
    let before = metrics(admin);
    let mut s = connect_port(q.port);
    let (got, _) = wait_closed(&mut s, Duration::from_secs(10));
    assert!(got.is_empty(), "a client without a server is closed");
    let no_server = before.value("quill_sessions_ended_total", &[("reason", "no_server")]) + 1.0;
    let m = wait_metrics(admin, "the no_server session", |m| {
        m.value("quill_sessions_ended_total", &[("reason", "no_server")]) >= no_server
    });
    let dead = dead.to_string();
    let labels = [("server", "0"), ("address", dead.as_str())];
    assert!(m.value("quill_backend_connect_failures_total", &[]) >= 1.0);
    assert!(m.value("quill_server_connect_failures_total", &labels) >= 1.0);
    assert_eq!(m.value("quill_server_up", &labels), 0.0, "blacklisted");
    assert_eq!(
        m.value(
            "quill_server_state",
            &[labels[0], labels[1], ("state", "blacklisted")]
        ),
        1.0
    );
}

#[test]
fn api_status_json_lists_every_listener_and_server() {
    let (_backends, servers) = three_http_backends();
    let (q, admin) =
        start_with_admin(|dir, port, admin| two_listener_config(dir, port, admin, &servers));
    http_requests(q.port, 4);
    let st = status_json(admin);
    assert_eq!(st["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(st["pid"], q.pid);
    assert!(st["totals"]["accepted"].as_u64().unwrap() >= 4, "{st}");
    for reason in END_REASONS {
        assert!(
            st["totals"]["ended"][reason].is_u64(),
            "ended.{reason} in {st}"
        );
    }
    let listeners = st["listeners"].as_array().expect("listeners array");
    let names: Vec<&str> = listeners
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["web", "odd\"name\\x"]);
    let addrs = |l: &serde_json::Value| -> Vec<String> {
        l["servers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["address"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(addrs(&listeners[0]), servers[..2]);
    assert_eq!(addrs(&listeners[1]), servers[2..]);
    assert_eq!(listeners[1]["emergency"]["address"], servers[0].as_str());
    let web_total: u64 = listeners[0]["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["total"].as_u64().unwrap())
        .sum();
    assert!(web_total >= 4, "web servers' totals: {web_total}");
    for key in [
        "state", "health", "sessions", "total", "failures", "checks", "sent", "received",
    ] {
        assert!(
            !listeners[0]["servers"][0][key].is_null(),
            "server field {key} in {st}"
        );
    }

    // The same servers in /metrics, with the odd name escaped (the parser unescapes it).
    let m = metrics(admin);
    assert!(
        m.text.contains(r#"listener="odd\"name\\x""#),
        "escaped label in:\n{}",
        m.text
    );
    for (listener, server, addr) in [
        ("web", "0", &servers[0]),
        ("web", "1", &servers[1]),
        ("odd\"name\\x", "0", &servers[2]),
        ("odd\"name\\x", "emergency", &servers[0]),
    ] {
        let labels = [
            ("listener", listener),
            ("server", server),
            ("address", addr.as_str()),
        ];
        m.value("quill_server_sessions_total", &labels);
    }
    let listed: BTreeSet<&str> = m
        .samples("quill_listener_info", &[])
        .iter()
        .map(|s| s.labels["listener"].as_str())
        .collect();
    assert_eq!(listed, BTreeSet::from(["web", "odd\"name\\x"]));
}

#[test]
fn admin_answers_bad_requests_with_4xx() {
    let (_backends, servers) = three_http_backends();
    let (_q, admin) = start_pen_with_admin(&[], &servers);
    assert_eq!(get(admin, "/nope").status, 404);
    assert_eq!(get(admin, "/metrics/").status, 404);
    let post = request(
        admin,
        b"POST /metrics HTTP/1.1\r\nHost: localhost\r\nContent-Length: 3\r\n\r\nabc",
    );
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow").as_deref(), Some("GET, HEAD"));
    assert_eq!(
        request(admin, b"DELETE /api/status HTTP/1.1\r\n\r\n").status,
        405
    );
    assert_eq!(request(admin, b"hello there\r\n\r\n").status, 400);
    assert_eq!(
        request(admin, b"GET / HTTP/1.1\r\nno colon\r\n\r\n").status,
        400
    );
    let mut huge = b"GET /metrics HTTP/1.1\r\nX-Big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 64 * 1024));
    huge.extend(b"\r\n\r\n");
    assert_eq!(request(admin, &huge).status, 431);
    let mut many = b"GET /metrics HTTP/1.1\r\n".to_vec();
    for i in 0..100 {
        many.extend(format!("X-{i}: v\r\n").as_bytes());
    }
    many.extend(b"\r\n");
    assert_eq!(request(admin, &many).status, 431);

    // HEAD: the headers of GET, no body; a query string is ignored.
    let head = request(admin, b"HEAD /api/status HTTP/1.1\r\n\r\n");
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty(), "HEAD body: {:?}", head.text());
    assert!(
        head.header("content-length")
            .unwrap()
            .parse::<usize>()
            .unwrap()
            > 0
    );
    assert_eq!(get(admin, "/metrics?name[]=x").status, 200);
    let page = get(admin, "/");
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("content-type").as_deref(),
        Some("text/html; charset=utf-8")
    );
    assert!(page.text().contains("api/status"), "the page polls the API");
    // Self-contained: no URL but the SVG namespace name, no external script or style.
    let text = page.text().replace("http://www.w3.org/2000/svg", "");
    for outside in ["http://", "https://", "<link", " src=", "@import"] {
        assert!(
            !text.contains(outside),
            "the page loads something from elsewhere: {outside}"
        );
    }
}

#[test]
fn admin_keeps_serving_after_malformed_oversized_and_reset_requests() {
    let (_backends, servers) = three_http_backends();
    let (q, admin) = start_pen_with_admin(&[], &servers);
    // Binary junk, a megabyte of it.
    let junk: Vec<u8> = (0..1 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let _ = try_request(admin, &junk);
    // A head that never ends, far over the limit.
    let mut endless = b"GET /metrics HTTP/1.1\r\n".to_vec();
    endless.extend(std::iter::repeat_n(b'x', 512 * 1024));
    let _ = try_request(admin, &endless);
    // Half a request, then a reset.
    for _ in 0..10 {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.connect(&admin.into()).unwrap();
        let _ = (&s).write_all(b"GET /metr");
        s.set_linger(Some(Duration::ZERO)).unwrap();
        drop(s);
    }
    // Non-UTF-8 and NUL bytes in a path and a header.
    let _ = try_request(admin, b"GET /\xff\x00 HTTP/1.1\r\nX: \xfe\r\n\r\n");
    let _ = try_request(admin, b"GET /metrics HTTP/9.9\r\n\r\n");

    let m = metrics(admin);
    m.family("quill_sessions_accepted_total");
    assert!(
        q.stderr().matches("panicked").count() == 0,
        "{}",
        q.stderr()
    );
    // And the data path was never involved.
    http_requests(q.port, 2);
}

#[test]
fn admin_slow_client_does_not_block_others_and_is_cut_at_the_deadline() {
    let (_backends, servers) = three_http_backends();
    let (_q, admin) = start_pen_with_admin(&[], &servers);
    let mut slow = connect(admin);
    write_all(&mut slow, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n");
    let started = Instant::now();
    // While the slow client holds its connection, others are answered (well before its deadline).
    for _ in 0..3 {
        let mut s = connect(admin);
        set_timeouts(&s, Duration::from_secs(3));
        write_all(&mut s, b"GET /api/status HTTP/1.1\r\n\r\n");
        let (bytes, end) = try_read_until_eof(&mut s, Duration::from_secs(3), 1 << 20);
        end.unwrap_or_else(|e| panic!("second client not answered while a slow one waits: {e}"));
        assert_eq!(parse_reply(&bytes).unwrap().status, 200);
    }
    assert!(
        still_open(&mut slow, Duration::from_millis(100)),
        "slow client cut early"
    );
    // The slow client gets 408 once its 5 s are up, however it trickles its bytes.
    let trickle = slow.try_clone().unwrap();
    let writer = thread::spawn(move || {
        let mut t = trickle;
        for _ in 0..40 {
            if t.write_all(b"X-Slow: 1\r\n").is_err() {
                return;
            }
            thread::sleep(Duration::from_millis(250));
        }
    });
    let (bytes, _) = wait_closed(&mut slow, Duration::from_secs(15));
    let _ = writer.join();
    let reply = parse_reply(&bytes).expect("an answer before the close");
    assert_eq!(reply.status, 408, "{}", reply.head);
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "cut after {:?}",
        started.elapsed()
    );
}

#[test]
fn admin_full_of_idle_connections_closes_the_oldest_to_serve_a_new_one() {
    // The admin listener serves at most 1024 connections at once (docs/security.md).
    const CAP: usize = 1024;
    // The test holds CAP sockets at once: more than a default soft limit of 1024 descriptors.
    let _ = quill_core::sys::raise_nofile_limit();
    let (_backends, servers) = three_http_backends();
    let (q, admin) = start_pen_with_admin(&[], &servers);
    let mut oldest = connect(admin);
    let idle: Vec<TcpStream> = (1..CAP).map(|_| connect(admin)).collect();
    // The listener is full of clients that sent nothing: a scrape still gets its answer, at once
    // (not a 503), and the connection that waited longest without a request made room for it.
    for _ in 0..3 {
        assert_eq!(metrics_status(admin), 200, "{}", q.stderr());
    }
    let (bytes, _) = wait_closed(&mut oldest, Duration::from_secs(3));
    assert!(bytes.is_empty(), "an evicted idle client gets no answer");
    drop(idle);
    assert_eq!(get(admin, "/metrics").status, 200);
}

/// `GET /metrics` status, answered within 3 s.
fn metrics_status(admin: std::net::SocketAddr) -> u16 {
    let mut s = connect(admin);
    set_timeouts(&s, Duration::from_secs(3));
    write_all(&mut s, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let (bytes, end) = try_read_until_eof(&mut s, Duration::from_secs(3), 1 << 20);
    end.unwrap_or_else(|e| panic!("scrape not answered: {e}"));
    parse_reply(&bytes).unwrap().status
}

#[test]
fn sigusr1_writes_pens_html_report_listing_every_server() {
    let (_backends, servers) = three_http_backends();
    let q = Quill::start_with(|dir, port| {
        let report = dir.join("status.html").display().to_string();
        pen_args(dir, port, &["-r", "-w", &report], &servers)
    });
    http_requests(q.port, 3);
    let report = q.path("status.html");
    let _ = fs::remove_file(&report);
    q.signal("USR1");
    let deadline = Instant::now() + Duration::from_secs(10);
    let html = loop {
        let html = fs::read_to_string(&report).unwrap_or_default();
        if html.contains("</html>") {
            break html;
        }
        assert!(
            Instant::now() < deadline,
            "no report at {} after SIGUSR1",
            report.display()
        );
        thread::sleep(Duration::from_millis(20));
    };
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    for s in &servers {
        assert!(
            html.contains(&format!("<td>{s}</td>")),
            "{s} missing from:\n{html}"
        );
    }
    assert_eq!(
        html.matches("<tr><td>").count(),
        servers.len(),
        "one row per server:\n{html}"
    );
    assert!(html.contains("accepted"), "{html}");
}

#[test]
fn json_access_log_lines_parse_with_the_documented_keys() {
    const N: usize = 5;
    let (_backends, servers) = three_http_backends();
    let (q, probe, _) = Quill::spawn_first(|dir, port| {
        let mut a = vec![
            "-r".to_string(),
            "--log-format".into(),
            "json".into(),
            "-l".into(),
            dir.join("access.jsonl").display().to_string(),
            format!("127.0.0.1:{port}"),
        ];
        a.extend(servers.iter().cloned());
        a
    });
    drop(probe);
    http_requests(q.port, N);
    let path = q.path("access.jsonl");
    let deadline = Instant::now() + Duration::from_secs(10);
    let lines: Vec<String> = loop {
        let text = fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        // The readiness probe and our N requests, each line complete.
        if lines.len() > N && text.ends_with('\n') {
            break lines;
        }
        assert!(
            Instant::now() < deadline,
            "{} lines in {}:\n{text}",
            lines.len(),
            path.display()
        );
        thread::sleep(Duration::from_millis(20));
    };
    let keys = [
        "client",
        "time",
        "server",
        "bytes_in",
        "bytes_out",
        "duration_ms",
        "end",
    ];
    let mut served = 0;
    for line in &lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        let obj = v
            .as_object()
            .unwrap_or_else(|| panic!("not an object: {line}"));
        let got: BTreeSet<&str> = obj.keys().map(String::as_str).collect();
        assert_eq!(got, BTreeSet::from(keys), "keys of {line}");
        assert_eq!(v["client"], "127.0.0.1", "{line}");
        assert!(v["time"].as_u64().unwrap() > 1_600_000_000, "{line}");
        assert!(
            v["duration_ms"].is_u64() && v["bytes_out"].is_u64(),
            "{line}"
        );
        assert!(END_REASONS.contains(&v["end"].as_str().unwrap()), "{line}");
        if v["bytes_in"] == REQUEST.len() {
            served += 1;
            assert_eq!(v["end"], "done", "{line}");
            assert!(servers.iter().any(|s| v["server"] == s.as_str()), "{line}");
            assert!(v["bytes_out"].as_u64().unwrap() > 0, "{line}");
        }
    }
    assert_eq!(served, N, "our requests in:\n{}", lines.join("\n"));
}

/// `quill` with `[[pool]] api` (two servers, reached by the route `/api/` of the HTTP listener
/// `web`) and the UDP listener `dns`; returns the process, admin address, the backends (kept
/// alive) with their addresses, and the UDP server's socket.
fn start_pool_and_udp() -> (
    QuillProcess,
    std::net::SocketAddr,
    Vec<DemoServer>,
    Vec<String>,
    std::net::UdpSocket,
) {
    let (backends, servers) = three_http_backends();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp_addr = udp.local_addr().unwrap();
    let (q, admin) = start_with_admin(|dir, port, admin| {
        pool_and_udp_config(dir, port, admin, &servers, udp_addr)
    });
    (q, admin, backends, servers, udp)
}

#[test]
fn named_pools_servers_appear_in_metrics_and_api_status() {
    let (q, admin, _backends, servers, _udp) = start_pool_and_udp();
    for i in 0..4 {
        let r = request(
            q.addr(),
            format!("GET /api/{i} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.head);
    }
    let st = status_json(admin);
    let pools = st["pools"]
        .as_array()
        .unwrap_or_else(|| panic!("no pools in {st}"));
    assert_eq!(pools.len(), 1, "{st}");
    assert_eq!(pools[0]["name"], "api");
    assert_eq!(pools[0]["mode"], "tracking", "Pen's default: {}", pools[0]);
    let addrs: Vec<&str> = pools[0]["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["address"].as_str().unwrap())
        .collect();
    assert_eq!(addrs, [servers[0].as_str(), servers[1].as_str()]);
    let total: u64 = pools[0]["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["total"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 4, "the pool's servers took the four requests: {st}");
    assert_eq!(pools[0]["servers"][0]["state"], "up");

    // /metrics: the pool's servers labelled with the pool (not a listener), with their traffic.
    let m = metrics(admin);
    let mut sum = 0.0;
    for (i, addr) in servers[..2].iter().enumerate() {
        let labels = [
            ("pool", "api"),
            ("server", &i.to_string() as &str),
            ("address", addr.as_str()),
        ];
        sum += m.value("quill_server_sessions_total", &labels);
        assert_eq!(m.value("quill_server_up", &labels), 1.0, "{}", m.text);
        let mut up = labels.to_vec();
        up.push(("state", "up"));
        assert_eq!(m.value("quill_server_state", &up), 1.0, "{}", m.text);
    }
    assert_eq!(sum, 4.0, "{}", m.text);
    // The listener's own server is still there, labelled with its listener.
    m.value(
        "quill_server_sessions_total",
        &[
            ("listener", "web"),
            ("server", "0"),
            ("address", servers[2].as_str()),
        ],
    );
}

#[test]
fn a_udp_listener_is_reported_as_udp() {
    let (_q, admin, _backends, _servers, _udp) = start_pool_and_udp();
    let st = status_json(admin);
    let protocols: Vec<(&str, &str)> = st["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["name"].as_str().unwrap(), l["protocol"].as_str().unwrap()))
        .collect();
    assert_eq!(protocols, [("web", "http"), ("dns", "udp")], "{st}");
}
