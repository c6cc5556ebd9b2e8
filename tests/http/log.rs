//! The access log of an HTTP listener (docs/design.md#access-log-and-metrics): one line per
//! request, not per connection; `text` is Apache's combined format followed by Quill's fields,
//! `json` the same fields as one object (docs/observability.md#access-log). X-Request-ID is logged,
//! the client's or Quill's.

use crate::http_support;
use crate::support;
use crate::tls_support;

use std::time::Duration;

use http_support::*;
use support::*;

const T: Duration = Duration::from_secs(10);

/// Quill `-H -r -l LOG [extra]` on `server`; returns the process and the log's path.
fn start_logged(
    extra: &[&str],
    server: std::net::SocketAddr,
) -> (QuillProcess, std::path::PathBuf) {
    let (q, probe, _) = Quill::spawn_first(|dir, port| {
        let mut a: Vec<String> = vec![
            "-H".into(),
            "-r".into(),
            "-l".into(),
            dir.join("access.log").display().to_string(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a.push(format!("127.0.0.1:{port}"));
        a.push(server.to_string());
        a
    });
    drop(probe);
    let log = q.path("access.log");
    (q, log)
}

fn lines_when(log: &std::path::Path, n: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let ok = wait_until(T, || {
        lines = std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        lines.len() >= n
    });
    assert!(ok, "expected {n} log lines, got {lines:?}");
    lines
}

#[test]
fn http_access_log_has_one_combined_line_per_request() {
    let b = Backend::fixed(100);
    let (q, log) = start_logged(&[], b.addr());
    let mut c = Client::connect(q.addr());
    let r1 = c.roundtrip(
        b"GET /one?x=1 HTTP/1.1\r\nHost: a.test\r\nUser-Agent: agent \"q\"\r\nReferer: http://r.test/\r\n\r\n",
    );
    assert_eq!(r1.status, 200);
    let r2 = c.roundtrip(b"GET /two HTTP/1.1\r\nHost: a.test\r\nX-Request-ID: abc-123\r\n\r\n");
    assert_eq!(r2.status, 200);
    // Quill's own answer to a malformed request is logged too, its source `quill`.
    let mut bad = Client::connect(q.addr());
    let r3 = bad.roundtrip(b"GET /bad HTTP/1.1\r\nHost: a.test\r\nBad Name: x\r\n\r\n");
    assert_eq!(r3.status, 400);
    let lines = lines_when(&log, 3);
    assert_eq!(lines.len(), 3, "one line per request: {lines:?}");
    // The malformed request came on another connection, maybe to the other worker, whose lines
    // are flushed on its own turns: find each request's line by its request, not its place.
    let line_of = |path: &str| -> String {
        lines
            .iter()
            .find(|l| l.contains(&format!("\"GET {path} HTTP/1.1\"")))
            .unwrap_or_else(|| panic!("no line for {path}: {lines:?}"))
            .clone()
    };
    let (one, two, bad_line) = (&line_of("/one?x=1"), line_of("/two"), line_of("/bad"));
    assert!(one.starts_with("127.0.0.1 - - ["), "{one}");
    assert!(
        one.contains(" +0000] \"GET /one?x=1 HTTP/1.1\" 200 "),
        "{one}"
    );
    assert!(
        one.contains("\"http://r.test/\" \"agent \\x22q\\x22\""),
        "referer and escaped user agent: {one}"
    );
    assert!(
        one.contains(&format!(" {} - server ", b.addr())),
        "server, route, source: {one}"
    );
    // Quill made the first request's id (16 hex digits) and logged it; the second kept its own.
    let id = one.rsplit(' ').next().unwrap_or("");
    assert!(
        id.len() == 18 && id[1..17].bytes().all(|c| c.is_ascii_hexdigit()),
        "request id: {one}"
    );
    assert_eq!(
        b.requests()[0].header("x-request-id"),
        Some(&id[1..17]),
        "the id logged is the one sent"
    );
    assert!(
        two.contains("\"GET /two HTTP/1.1\" 200 ") && two.ends_with(" done \"abc-123\""),
        "{two}"
    );
    assert!(
        bad_line.contains("\"GET /bad HTTP/1.1\" 400 ") && bad_line.contains(" - - quill "),
        "{bad_line}"
    );
    // BYTES_OUT is the response as the client received it, head and body.
    let bytes: u64 = one
        .split('"')
        .nth(2)
        .and_then(|s| s.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert_eq!(
        bytes as usize,
        r1.raw_head.len() + r1.body.len(),
        "BYTES_OUT: {one}"
    );
}

#[test]
fn http_access_log_json_has_the_same_fields() {
    let b = Backend::fixed(10);
    let (q, log) = start_logged(&["--log-format", "json"], b.addr());
    let mut c = Client::connect(q.addr());
    assert_eq!(c.roundtrip(&get("/j")).status, 200);
    let lines = lines_when(&log, 1);
    let v: serde_json::Value = serde_json::from_str(&lines[0]).expect("a JSON object");
    for key in [
        "client",
        "time",
        "request",
        "host",
        "status",
        "bytes_in",
        "bytes_out",
        "referer",
        "user_agent",
        "server",
        "route",
        "source",
        "connect_ms",
        "first_byte_ms",
        "total_ms",
        "end",
        "request_id",
    ] {
        assert!(v.get(key).is_some(), "no {key} in {v}");
    }
    assert_eq!(v["request"], "GET /j HTTP/1.1");
    assert_eq!(v["status"], 200);
    assert_eq!(v["source"], "server");
    assert_eq!(v["end"], "done");
    assert_eq!(v["route"], serde_json::Value::Null);
    assert_eq!(v["server"], b.addr().to_string());
}

#[test]
fn quills_own_503_carries_a_real_request_id_logged_and_in_x_request_id() {
    // The only server refuses: no server can be reached, Quill answers 503 itself.
    let dead = refused_addr();
    let (q, log) = start_logged(&[], dead);
    let mut ids = Vec::new();
    for path in ["/a", "/b"] {
        let mut c = Client::connect(q.addr());
        let r = c.roundtrip(&get(path));
        assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.raw_head));
        let id = r
            .header("x-request-id")
            .unwrap_or_else(|| panic!("no X-Request-ID: {}", String::from_utf8_lossy(&r.raw_head)))
            .to_string();
        assert!(
            id.len() == 16 && id.bytes().all(|c| c.is_ascii_hexdigit()) && id != "0000000000000000",
            "request id {id:?}"
        );
        ids.push(id);
    }
    assert_ne!(ids[0], ids[1], "each request its own id");
    // The client's own id is the one logged and echoed.
    let mut c = Client::connect(q.addr());
    let r = c.roundtrip(b"GET /c HTTP/1.1\r\nHost: a.test\r\nX-Request-ID: mine-42\r\n\r\n");
    assert_eq!(r.status, 503);
    assert_eq!(r.header("x-request-id"), Some("mine-42"));
    let lines = lines_when(&log, 3);
    for (path, id) in [
        ("/a", &ids[0]),
        ("/b", &ids[1]),
        ("/c", &"mine-42".to_string()),
    ] {
        let line = lines
            .iter()
            .find(|l| l.contains(&format!("\"GET {path} HTTP/1.1\" 503 ")))
            .unwrap_or_else(|| panic!("no 503 line for {path}: {lines:?}"));
        assert!(line.ends_with(&format!(" \"{id}\"")), "{line}");
    }
}

#[test]
fn server_failed_lines_name_the_pool_and_the_listener() {
    let dead = refused_addr();
    let b = Backend::fixed(10);
    let q = Quill::start_with(|dir, port| {
        let cfg = format!(
            "log = \"{log}\"\n\
             [[pool]]\nname = \"api\"\nservers = [\"{dead}\"]\n\
             [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
             servers = [\"{own}\"]\n\
             [[listener.route]]\nname = \"api\"\npath = \"/api/\"\npool = \"api\"\n",
            log = dir.join("access.log").display(),
            own = b.addr(),
        );
        let path = dir.join("quill.toml");
        std::fs::write(&path, cfg).unwrap();
        vec!["--config".into(), path.display().to_string()]
    });
    let mut c = Client::connect(q.addr());
    assert_eq!(c.roundtrip(&get("/api/x")).status, 503);
    drop(c);
    let line = format!("server {dead} (pool api, listener web) failed (");
    assert!(
        q.wait_stderr_contains(&line, T),
        "log should say {line:?}:\n{}",
        q.stderr()
    );
}

#[test]
fn tls_failures_and_resets_on_an_http_listener_are_logged_in_its_own_format() {
    use std::io::Write;
    let b = Backend::fixed(10);
    let cert = tls_support::self_signed("site", &["site.test"], tls_support::KeyAlg::EcdsaP256);
    // (Not `start_with`: its settling reads the log as Pen's lines, which this one is not.)
    let (q, probe, _) = Quill::spawn_first(|dir, port| {
        let (c, k) = cert.write(dir, "site");
        let cfg = format!(
            "log = \"{log}\"\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\n\
             protocol = \"http\"\nservers = [\"{own}\"]\n[listener.tls]\n\
             certs = [ {{ cert = \"{c}\", key = \"{k}\" }} ]\n",
            log = tls_support::toml_path(&dir.join("access.log")),
            own = b.addr(),
            c = tls_support::toml_path(&c),
            k = tls_support::toml_path(&k),
        );
        let path = dir.join("quill.toml");
        std::fs::write(&path, cfg).unwrap();
        vec!["--config".into(), path.display().to_string()]
    });
    drop(probe);
    let log = q.path("access.log");
    // Not TLS at all (a failed handshake), and a connection closed before any byte (a reset of
    // an unused pre-connection, as browsers open).
    let mut plain = connect_port(q.port);
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: site.test\r\n\r\n")
        .unwrap();
    let _ = read_until_eof(&mut plain, IO_TIMEOUT);
    drop(connect_port(q.port));
    // The readiness probe's connection may have left a line too: every line counts.
    let lines = lines_when(&log, 2);
    for line in &lines {
        assert!(
            line.starts_with("127.0.0.1 - - [") && line.contains("] \"-\" 0 "),
            "not a combined line: {line:?} in {lines:?}"
        );
    }
    assert!(
        lines.iter().any(|l| l.contains(" tls_failed ")),
        "{lines:?}"
    );
}

/// A Pen session line: `CLIENT TIME SERVER BYTES_IN BYTES_OUT SECONDS END`, seven fields.
fn is_pen_line(line: &str) -> bool {
    let f: Vec<&str> = line.split(' ').collect();
    f.len() == 7
        && f[0].parse::<std::net::IpAddr>().is_ok()
        && f[1].parse::<u64>().is_ok()
        && f[3].parse::<u64>().is_ok()
        && f[4].parse::<u64>().is_ok()
        && f[5].split_once('.').is_some_and(|(s, ms)| {
            s.parse::<u64>().is_ok() && ms.len() == 3 && ms.parse::<u32>().is_ok()
        })
        && f[6].bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
}

/// An Apache combined line (and Quill's fields after it): `CLIENT - - [TIME] "REQUEST" STATUS
/// BYTES "REFERER" "AGENT" ...`.
fn is_combined_line(line: &str) -> bool {
    let Some((head, rest)) = line.split_once(" - - [") else {
        return false;
    };
    let Some((time, rest)) = rest.split_once("] \"") else {
        return false;
    };
    let Some((_request, rest)) = rest.split_once("\" ") else {
        return false;
    };
    let f: Vec<&str> = rest.split(' ').collect();
    head.parse::<std::net::IpAddr>().is_ok()
        && time.ends_with(" +0000")
        && f.len() >= 2
        && f[0].parse::<u16>().is_ok()
        && f[1].parse::<u64>().is_ok()
        && rest.matches('"').count() >= 4
}

/// The configuration of [`start_two_logs`]: HTTP listener `web` on `port` with its own log
/// `web`, TCP listener `tcp` on `tcp_port` on the process-wide log `tcp`.
fn two_logs_config(
    dir: &std::path::Path,
    port: u16,
    tcp_port: u16,
    server: &str,
    web: &str,
    tcp: &str,
) -> String {
    format!(
        "log = \"{tcp}\"\n\
         [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
         log = \"{web}\"\nservers = [\"{server}\"]\n\
         [[listener]]\nname = \"tcp\"\nlisten = \"127.0.0.1:{tcp_port}\"\nservers = [\"{server}\"]\n",
        tcp = tls_support::toml_path(&dir.join(tcp)),
        web = tls_support::toml_path(&dir.join(web)),
    )
}

/// Quill with an HTTP listener logging to `web.log` (its own `log`) and a TCP listener logging
/// to `tcp.log` (the process-wide `log`); returns the process and the TCP listener's port.
fn start_two_logs(server: std::net::SocketAddr) -> (QuillProcess, u16) {
    let tcp_port = free_port();
    let (q, probe, _) = Quill::spawn_first(|dir, port| {
        let cfg = two_logs_config(
            dir,
            port,
            tcp_port,
            &server.to_string(),
            "web.log",
            "tcp.log",
        );
        let path = dir.join("quill.toml");
        std::fs::write(&path, cfg).unwrap();
        vec!["--config".into(), path.display().to_string()]
    });
    drop(probe);
    (q, tcp_port)
}

/// One HTTP request through the TCP listener on `port` (bytes relayed as they are).
fn tcp_roundtrip(port: u16) {
    use std::io::Write;
    let mut s = connect_port(port);
    s.write_all(b"GET /tcp HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
        .unwrap();
    let answer = read_until_eof(&mut s, IO_TIMEOUT);
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
}

/// The lines of `log` once it holds a line containing each of `needles`, and `n` lines with
/// `count` in them (bounded: the test fails after `T`).
fn lines_with(log: &std::path::Path, needles: &[&str], count: (&str, usize)) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let ok = wait_until(T, || {
        lines = std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        needles.iter().all(|n| lines.iter().any(|l| l.contains(n)))
            && lines.iter().filter(|l| l.contains(count.0)).count() >= count.1
    });
    assert!(
        ok,
        "{} should hold {needles:?} and {count:?}: {lines:?}",
        log.display()
    );
    lines
}

#[test]
fn per_listener_logs_keep_one_format_per_file() {
    let b = Backend::fixed(10);
    let (q, tcp_port) = start_two_logs(b.addr());
    for path in ["/a", "/b", "/c"] {
        let mut c = Client::connect(q.addr());
        assert_eq!(c.roundtrip(&get(path)).status, 200);
    }
    for _ in 0..2 {
        tcp_roundtrip(tcp_port);
    }
    let web = lines_with(
        &q.path("web.log"),
        &["GET /a ", "GET /b ", "GET /c "],
        ("", 3),
    );
    let tcp = lines_with(&q.path("tcp.log"), &[], (" done", 2));
    // Every line of each file parses in that file's format, none in the other's.
    for line in &web {
        assert!(
            is_combined_line(line) && !is_pen_line(line),
            "web.log: {line:?} in {web:?}"
        );
    }
    for line in &tcp {
        assert!(
            is_pen_line(line) && !is_combined_line(line),
            "tcp.log: {line:?} in {tcp:?}"
        );
    }
    for path in ["/a", "/b", "/c"] {
        assert!(
            web.iter()
                .any(|l| l.contains(&format!("\"GET {path} HTTP/1.1\" 200 "))),
            "{path} in {web:?}"
        );
    }
    assert!(
        tcp.iter().filter(|l| l.ends_with(" done")).count() >= 2,
        "{tcp:?}"
    );
    // A reload that would put both listeners into one file is refused; the files stay as they were.
    let cfg = q.path("quill.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let mixed = text.replace(
        &format!("log = \"{}\"", tls_support::toml_path(&q.path("web.log"))),
        &format!("log = \"{}\"", tls_support::toml_path(&q.path("tcp.log"))),
    );
    assert_ne!(mixed, text);
    std::fs::write(&cfg, mixed).unwrap();
    q.signal("HUP");
    assert!(
        q.wait_stderr_contains("reload rejected", T),
        "{}",
        q.stderr()
    );
    assert!(
        q.stderr().contains("'web'") && q.stderr().contains("'tcp'"),
        "{}",
        q.stderr()
    );
    let mut c = Client::connect(q.addr());
    assert_eq!(c.roundtrip(&get("/d")).status, 200);
    drop(c);
    let web = lines_with(&q.path("web.log"), &["GET /d "], ("", 4));
    assert!(web.iter().all(|l| is_combined_line(l)), "{web:?}");
    let tcp = std::fs::read_to_string(q.path("tcp.log")).unwrap();
    assert!(tcp.lines().all(is_pen_line), "{tcp}");
}

#[test]
fn sigusr2_reopens_every_listeners_log() {
    let b = Backend::fixed(10);
    let (q, tcp_port) = start_two_logs(b.addr());
    let mut c = Client::connect(q.addr());
    assert_eq!(c.roundtrip(&get("/before")).status, 200);
    drop(c);
    tcp_roundtrip(tcp_port);
    let _ = lines_with(&q.path("web.log"), &["GET /before "], ("", 1));
    let _ = lines_with(&q.path("tcp.log"), &[], (" done", 1));
    // Rotated as logrotate does: moved away, then the process told to reopen.
    for name in ["web.log", "tcp.log"] {
        std::fs::rename(q.path(name), q.path(&format!("{name}.1"))).unwrap();
    }
    q.signal("USR2");
    // Each worker reopens when woken; until then lines may still reach the moved files, so
    // requests are sent until both new files have theirs (bounded).
    let deadline = std::time::Instant::now() + T;
    let (mut web, mut tcp) = (String::new(), String::new());
    while std::time::Instant::now() < deadline {
        let mut c = Client::connect(q.addr());
        assert_eq!(c.roundtrip(&get("/after")).status, 200);
        drop(c);
        tcp_roundtrip(tcp_port);
        std::thread::sleep(Duration::from_millis(50));
        web = std::fs::read_to_string(q.path("web.log")).unwrap_or_default();
        tcp = std::fs::read_to_string(q.path("tcp.log")).unwrap_or_default();
        if web.contains("\"GET /after HTTP/1.1\"") && tcp.lines().any(|l| l.ends_with(" done")) {
            break;
        }
    }
    assert!(
        web.contains("\"GET /after HTTP/1.1\""),
        "web.log reopened: {web:?}"
    );
    assert!(
        tcp.lines().any(|l| l.ends_with(" done")),
        "tcp.log reopened: {tcp:?}"
    );
    assert!(web.lines().all(is_combined_line), "{web}");
    assert!(tcp.lines().all(is_pen_line), "{tcp}");
    let old = std::fs::read_to_string(q.path("web.log.1")).unwrap();
    assert!(old.contains("/before"), "{old}");
}
