//! Active health checks and slow start, end to end: the real binary checks backends this file
//! starts (TCP, HTTP, Unix socket), and the tests watch what operators see (`quill ctl servers`,
//! `status`, the log) and where clients go. Short intervals (100 ms) keep every test to a few
//! seconds; every wait is bounded and every process is killed by PID.

use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

/// Fast checks: every 100 ms, 100 ms timeout, up after 2 passes, down after 2 failures.
const FAST: [&str; 8] = [
    "--check-interval",
    "100ms",
    "--check-timeout",
    "100ms",
    "--rise",
    "2",
    "--fall",
    "2",
];

// ---------------------------------------------------------------------------------------------
// Helpers: quill with a control socket, `quill ctl`, bounded waits
// ---------------------------------------------------------------------------------------------

/// The control socket of a quill started by [`start`].
fn ctl_path(q: &QuillProcess) -> PathBuf {
    q.dir.path().join("ctl.sock")
}

/// Pen-form quill with `-C DIR/ctl.sock`, OPTS and the servers; ready and settled.
fn start(opts: &[&str], servers: &[String]) -> QuillProcess {
    Quill::start_with(|dir, port| {
        let mut args = vec!["-C".to_string(), dir.join("ctl.sock").display().to_string()];
        args.extend(pen_args(dir, port, opts, servers));
        args
    })
}

/// Runs `quill ctl --socket SOCK ARGS...` (bounded, killed by PID if stuck); returns stdout.
fn ctl(sock: &Path, args: &[&str]) -> String {
    let sock = sock.display().to_string();
    let mut all = vec!["ctl", "--socket", sock.as_str()];
    all.extend_from_slice(args);
    let (code, out, err) = run_quill_output(&all);
    assert_eq!(code, 0, "quill ctl {args:?} failed: {err}{out}");
    out
}

/// `quill ctl --json servers` of the only listener.
fn servers(q: &QuillProcess) -> Vec<Value> {
    let text = ctl(&ctl_path(q), &["--json", "servers"]);
    match serde_json::from_str(&text) {
        Ok(Value::Array(v)) => v,
        other => panic!("servers reply is not a JSON array: {other:?}: {text}"),
    }
}

/// Server `i` of `servers`.
fn server(q: &QuillProcess, i: usize) -> Value {
    servers(q)
        .get(i)
        .cloned()
        .unwrap_or_else(|| panic!("no server {i} in {:?}", servers(q)))
}

fn num(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no number {field} in {v}"))
}

/// Polls (every 10 ms, bounded by `within`) until `cond` holds; false on timeout.
fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    for _ in 0..10_000 {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Waits until server `i`'s `field` (a string) is `want`; panics with the servers otherwise.
/// Returns how long it took.
fn wait_field(q: &QuillProcess, i: usize, field: &str, want: &str, within: Duration) -> Duration {
    let t0 = Instant::now();
    if !eventually(within, || server(q, i)[field] == want) {
        panic!(
            "server {i} {field} is not {want} within {within:?}: {:#?}\nstderr:\n{}",
            servers(q),
            q.stderr()
        );
    }
    t0.elapsed()
}

/// Starts a Greet backend on `addr` again (after the one there was dropped), retrying briefly
/// while the port is still being released.
fn greet_at(addr: SocketAddr, name: &str) -> DemoServer {
    let mut last = String::new();
    for _ in 0..50 {
        match DemoServer::start(
            &addr.to_string(),
            Behaviour::Greet {
                name: name.to_string(),
            },
        ) {
            Ok(s) => return s,
            Err(e) => last = e.to_string(),
        }
        thread::sleep(Duration::from_millis(20));
    }
    panic!("cannot listen on {addr} again: {last}");
}

/// Backend names of `n` sequential sessions.
fn names(port: u16, n: usize) -> Vec<String> {
    (0..n).map(|_| greet_name(port)).collect()
}

// ---------------------------------------------------------------------------------------------
// A check target: a tiny HTTP server whose answer the test changes
// ---------------------------------------------------------------------------------------------

/// What the target does with each connection.
#[derive(Clone, Copy, Debug)]
enum Answer {
    /// Reads the request head, answers with this status and closes.
    Status(u16),
    /// Answers something that is not HTTP and closes.
    Garbage,
    /// Reads the request and closes without a byte of answer.
    Close,
    /// Accepts and never answers (the connection is kept until quill closes it).
    Silent,
}

struct Target {
    addr: SocketAddr,
    answer: Arc<Mutex<Answer>>,
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicU64>,
    /// Request heads received (the last 100).
    requests: Arc<Mutex<Vec<String>>>,
    /// Connections kept by `Silent`.
    held: Arc<Mutex<Vec<TcpStream>>>,
}

impl Target {
    fn start(answer: Answer) -> Target {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let t = Target {
            addr: l.local_addr().unwrap(),
            answer: Arc::new(Mutex::new(answer)),
            stop: Arc::new(AtomicBool::new(false)),
            accepted: Arc::new(AtomicU64::new(0)),
            requests: Arc::new(Mutex::new(Vec::new())),
            held: Arc::new(Mutex::new(Vec::new())),
        };
        let (answer, stop, accepted, requests, held) = (
            t.answer.clone(),
            t.stop.clone(),
            t.accepted.clone(),
            t.requests.clone(),
            t.held.clone(),
        );
        thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                let Ok((c, _)) = l.accept() else {
                    thread::sleep(Duration::from_millis(2));
                    continue;
                };
                accepted.fetch_add(1, Ordering::SeqCst);
                let a = *answer.lock().unwrap();
                let (requests, held) = (requests.clone(), held.clone());
                thread::spawn(move || serve(c, a, &requests, &held));
            }
        });
        t
    }

    fn spec(&self) -> String {
        self.addr.to_string()
    }

    fn set(&self, a: Answer) {
        *self.answer.lock().unwrap() = a;
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    /// How many of the held connections quill still has open.
    fn open_held(&self) -> usize {
        self.held
            .lock()
            .unwrap()
            .iter()
            .filter(|c| is_open(c))
            .count()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Whether the peer still has `c` open: drains what it sent; EOF or an error means closed.
fn is_open(mut c: &TcpStream) -> bool {
    c.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 1024];
    for _ in 0..100 {
        match c.read(&mut buf) {
            Ok(0) => return false,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        }
    }
    true
}

fn serve(mut c: TcpStream, a: Answer, requests: &Mutex<Vec<String>>, held: &Mutex<Vec<TcpStream>>) {
    set_timeouts(&c, Duration::from_secs(2));
    match a {
        Answer::Close => {
            read_head(&mut c);
        }
        Answer::Silent => held.lock().unwrap().push(c),
        Answer::Garbage => {
            let _ = c.write_all(b"SSH-2.0-OpenSSH_9.6\r\n");
        }
        Answer::Status(code) => {
            let head = read_head(&mut c);
            if head.is_empty() {
                return; // a TCP check: connected and closed.
            }
            {
                let mut r = requests.lock().unwrap();
                if r.len() >= 100 {
                    r.remove(0);
                }
                r.push(head);
            }
            let _ = c.write_all(
                format!(
                    "HTTP/1.1 {code} Whatever\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
                .as_bytes(),
            );
        }
    }
}

/// Reads a request head (to the blank line, EOF, 8 KiB or the read timeout).
fn read_head(c: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut b = [0u8; 512];
    while head.len() < 8192 && !head.ends_with(b"\r\n\r\n") {
        match c.read(&mut b) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&b[..n]),
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

// ---------------------------------------------------------------------------------------------
// TCP checks
// ---------------------------------------------------------------------------------------------

#[test]
fn health_tcp_check_takes_dead_server_down_before_a_client_meets_it() {
    let (a, b) = (greet("a"), greet("b"));
    let b_addr = b.addr();
    let mut opts = vec!["-r", "--check", "tcp"];
    opts.extend(FAST);
    let q = start(&opts, &[spec(a.addr()), spec(b_addr)]);
    // Both are checked and pass.
    assert!(
        eventually(Duration::from_secs(3), || servers(&q)
            .iter()
            .all(|s| s["health"] == "up" && num(s, "checks") >= 2)),
        "both servers should pass checks: {:#?}",
        servers(&q)
    );

    drop(b);
    wait_refused(b_addr, Duration::from_secs(2));
    // fall (2) x interval (100 ms) + timeout and scheduling slack.
    let took = wait_field(&q, 1, "health", "down", Duration::from_secs(2));
    assert_eq!(server(&q, 1)["state"], "down");
    let line = format!("server {b_addr} (pool default) is down: connect refused (2 failed checks)");
    assert!(
        q.wait_stderr_contains(&line, Duration::from_secs(2)),
        "log should say {line:?} (down after {took:?}):\n{}",
        q.stderr()
    );
    let b_total = num(&server(&q, 1), "total");

    // No client meets the dead server: every session goes to a, none fails.
    let got = names(q.port, 20);
    assert!(got.iter().all(|n| n == "a"), "sessions went to: {got:?}");
    let dead = server(&q, 1);
    assert_eq!(
        num(&dead, "failures"),
        0,
        "no client connect failed: {dead}"
    );
    assert_eq!(
        num(&dead, "total"),
        b_total,
        "no session was sent to b: {dead}"
    );
    assert!(num(&dead, "checks_failed") >= 2, "{dead}");
    let status: Value = serde_json::from_str(&ctl(&ctl_path(&q), &["--json", "status"])).unwrap();
    assert_eq!(status["totals"]["connect_failures"], 0, "{status}");
}

#[test]
fn health_server_comes_back_up_after_rise_successes() {
    let (a, b) = (greet("a"), greet("b"));
    let b_addr = b.addr();
    let q = start(
        &[
            "-r",
            "--check",
            "tcp",
            "--check-interval",
            "100ms",
            "--check-timeout",
            "100ms",
            "--rise",
            "3",
            "--fall",
            "2",
        ],
        &[spec(a.addr()), spec(b_addr)],
    );
    drop(b);
    wait_refused(b_addr, Duration::from_secs(2));
    wait_field(&q, 1, "health", "down", Duration::from_secs(2));
    assert_eq!(names(q.port, 4), ["a", "a", "a", "a"], "b is down");

    let _b2 = greet_at(b_addr, "b2");
    let took = wait_field(&q, 1, "health", "up", Duration::from_secs(3));
    let line = format!("server {b_addr} (pool default) is up (3 passed checks)");
    assert!(
        q.wait_stderr_contains(&line, Duration::from_secs(2)),
        "log should say {line:?} (up after {took:?}):\n{}",
        q.stderr()
    );
    // Three passes at 100 ms apart cannot take less than two intervals.
    assert!(took >= Duration::from_millis(150), "up after only {took:?}");
    assert_eq!(server(&q, 1)["state"], "up");
    // Round robin over both again.
    let t = tally(&names(q.port, 10));
    assert_eq!(
        (t.get("a"), t.get("b2")),
        (Some(&5), Some(&5)),
        "round robin after the server came back: {t:?}"
    );
}

#[test]
fn health_check_covers_unix_socket_servers() {
    let a = greet("a");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.sock");
    let app = UnixEcho::start(&path);
    let mut opts = vec!["--check", "tcp"];
    opts.extend(FAST);
    let q = start(&opts, &[spec(a.addr()), path.display().to_string()]);
    let before = app.accepted.load(Ordering::SeqCst);
    assert!(
        eventually(Duration::from_secs(3), || app
            .accepted
            .load(Ordering::SeqCst)
            >= before + 2
            && num(&server(&q, 1), "checks") >= 2),
        "the Unix socket server should be checked: {:#?}",
        servers(&q)
    );
    assert_eq!(server(&q, 1)["health"], "up");

    drop(app); // stops accepting: connects are refused from now on.
    wait_field(&q, 1, "health", "down", Duration::from_secs(3));
    let line = format!(
        "server {} (pool default) is down: connect refused (2 failed checks)",
        path.display()
    );
    assert!(
        q.wait_stderr_contains(&line, Duration::from_secs(2)),
        "log should say {line:?}:\n{}",
        q.stderr()
    );
}

// ---------------------------------------------------------------------------------------------
// HTTP checks
// ---------------------------------------------------------------------------------------------

#[test]
fn health_http_check_expects_status_range() {
    let ok = Target::start(Answer::Status(200));
    let sick = Target::start(Answer::Status(503));
    let mut opts = vec!["--check", "http:/health", "--check-expect", "200-299"];
    opts.extend(FAST);
    let q = start(&opts, &[ok.spec(), sick.spec()]);

    wait_field(&q, 1, "health", "down", Duration::from_secs(3));
    let line = format!(
        "server {} (pool default) is down: status 503 (expected 200-299) (2 failed checks)",
        sick.addr
    );
    assert!(
        q.wait_stderr_contains(&line, Duration::from_secs(2)),
        "log should say {line:?}:\n{}",
        q.stderr()
    );
    assert!(
        eventually(Duration::from_secs(2), || num(&server(&q, 0), "checks")
            >= 2),
        "{:#?}",
        servers(&q)
    );
    let s0 = server(&q, 0);
    assert_eq!(s0["health"], "up", "{s0}");
    assert_eq!(num(&s0, "checks_failed"), 0, "{s0}");

    // The request: GET path over HTTP/1.0, naming the server, closing after the answer.
    let req = ok.requests().first().cloned().expect("a check request");
    assert!(req.starts_with("GET /health HTTP/1.0\r\n"), "{req:?}");
    for header in [
        format!("\r\nHost: {}\r\n", ok.addr),
        "\r\nUser-Agent: quill-health\r\n".to_string(),
        "\r\nConnection: close\r\n".to_string(),
    ] {
        assert!(req.contains(&header), "{header:?} missing in {req:?}");
    }

    // Both ends of the range count: 204 passes, 302 (inside the default 200-399) fails.
    sick.set(Answer::Status(204));
    ok.set(Answer::Status(302));
    wait_field(&q, 1, "health", "up", Duration::from_secs(3));
    wait_field(&q, 0, "health", "down", Duration::from_secs(3));
    let line = format!(
        "server {} (pool default) is down: status 302 (expected 200-299) (2 failed checks)",
        ok.addr
    );
    assert!(
        q.wait_stderr_contains(&line, Duration::from_secs(2)),
        "log should say {line:?}:\n{}",
        q.stderr()
    );
}

#[test]
fn health_http_check_rejects_garbage_and_timeouts() {
    let garbage = Target::start(Answer::Garbage);
    let silent = Target::start(Answer::Silent);
    let closer = Target::start(Answer::Close);
    let good = Target::start(Answer::Status(200));
    let mut opts = vec!["--check", "http:/"];
    opts.extend(FAST);
    let q = start(
        &opts,
        &[garbage.spec(), silent.spec(), closer.spec(), good.spec()],
    );
    for i in 0..3 {
        wait_field(&q, i, "health", "down", Duration::from_secs(3));
    }
    for (t, why) in [
        (&garbage, "invalid status line \"SSH-2.0-OpenSSH_9.6\""),
        (&silent, "no status line within 100ms"),
        (&closer, "closed before a status line"),
    ] {
        let line = format!(
            "server {} (pool default) is down: {why} (2 failed checks)",
            t.addr
        );
        assert!(
            q.wait_stderr_contains(&line, Duration::from_secs(2)),
            "log should say {line:?}:\n{}",
            q.stderr()
        );
    }

    // The silent server does not hold the checker up: the good one keeps being checked and its
    // checks keep passing, and the silent one gets one probe at a time, each closed at its timeout.
    // (A held-up checker would stop the good server's checks or make them time out: no passes.)
    // One slow check of the good server under CPU contention (100 ms timeout) is not what this
    // test is about, so it counts passes within a bounded wait rather than demanding no failure.
    let s3 = server(&q, 3);
    let (checks, failed) = (num(&s3, "checks"), num(&s3, "checks_failed"));
    let accepted = silent.accepted();
    let mut most_open = 0;
    for _ in 0..12 {
        thread::sleep(Duration::from_millis(50));
        most_open = most_open.max(silent.open_held());
    }
    let started = Instant::now();
    let mut s3 = server(&q, 3);
    while num(&s3, "checks") - num(&s3, "checks_failed") < checks - failed + 3
        && started.elapsed() < Duration::from_secs(3)
    {
        thread::sleep(Duration::from_millis(50));
        s3 = server(&q, 3);
    }
    let passed = (num(&s3, "checks") - num(&s3, "checks_failed")) - (checks - failed);
    let newly_failed = num(&s3, "checks_failed") - failed;
    assert_eq!(s3["health"], "up", "{s3}");
    assert!(
        passed >= 3,
        "good server passed {passed} checks in {:?}: {s3}",
        started.elapsed() + Duration::from_millis(600)
    );
    assert!(
        newly_failed < passed,
        "good server failed {newly_failed} checks and passed {passed}: {s3}"
    );
    assert!(
        silent.accepted() >= accepted + 2,
        "silent server probed again"
    );
    assert!(
        most_open <= 1,
        "at most one probe per server at a time: {most_open} open"
    );
}

// ---------------------------------------------------------------------------------------------
// What operators see
// ---------------------------------------------------------------------------------------------

#[test]
fn health_state_visible_in_servers_and_status() {
    let a = greet("a");
    let dead = refused_addr();
    let mut opts = vec!["--check", "tcp"];
    opts.extend(FAST);
    let q = start(&opts, &[spec(a.addr()), spec(dead)]);
    wait_field(&q, 1, "health", "down", Duration::from_secs(3));
    let sock = ctl_path(&q);

    let text = ctl(&sock, &["servers"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with(&format!("0 addr 127.0.0.1 port {} ", a.addr().port()))
            && lines[0].contains(" state up health up "),
        "{text}"
    );
    assert!(
        lines[1].starts_with(&format!("1 addr 127.0.0.1 port {} ", dead.port()))
            && lines[1].contains(" state down health down "),
        "{text}"
    );

    let status: Value = serde_json::from_str(&ctl(&sock, &["--json", "status"])).unwrap();
    let l = &status["listeners"][0];
    assert_eq!(
        l["health_check"], "tcp every 100ms, timeout 100ms, rise 2, fall 2",
        "{l}"
    );
    assert_eq!(l["servers"][1]["health"], "down", "{l}");
    assert_eq!(l["servers"][1]["state"], "down", "{l}");
    assert!(num(&l["servers"][1], "checks_failed") >= 2, "{l}");
    let html = ctl(&sock, &["status"]);
    assert!(html.contains("health check tcp every 100ms"), "{html}");
    assert!(html.contains("</td><td>down</td>"), "{html}");
}

#[test]
fn health_checks_continue_for_drained_and_disabled_servers() {
    let (a, b) = (greet("a"), greet("b"));
    let (a_addr, b_addr) = (a.addr(), b.addr());
    let mut opts = vec!["--check", "tcp"];
    opts.extend(FAST);
    let q = start(&opts, &[spec(a_addr), spec(b_addr)]);
    let sock = ctl_path(&q);
    ctl(&sock, &["server", "0", "drain"]);
    ctl(&sock, &["server", "1", "disable"]);
    assert_eq!(server(&q, 0)["state"], "drain");
    assert_eq!(server(&q, 1)["state"], "disabled");
    let (c0, c1) = (num(&server(&q, 0), "checks"), num(&server(&q, 1), "checks"));
    assert!(
        eventually(Duration::from_secs(3), || num(&server(&q, 0), "checks")
            >= c0 + 2
            && num(&server(&q, 1), "checks") >= c1 + 2),
        "drained and disabled servers are still checked: {:#?}",
        servers(&q)
    );

    // Their health is still known: both die, both are seen down; the admin state stays on top.
    drop((a, b));
    wait_field(&q, 0, "health", "down", Duration::from_secs(3));
    wait_field(&q, 1, "health", "down", Duration::from_secs(3));
    assert_eq!(server(&q, 0)["state"], "drain");
    assert_eq!(server(&q, 1)["state"], "disabled");
    assert!(ctl(&sock, &["servers"]).contains(" state drain health down "));
}

// ---------------------------------------------------------------------------------------------
// Reload
// ---------------------------------------------------------------------------------------------

/// A one-listener config ("web" on `port`) with an access log in `dir`, the servers and a
/// `[listener.health]` table (or "").
fn reload_config(dir: &Path, port: u16, servers: &[&Target], health: &str) -> String {
    let list: Vec<String> = servers.iter().map(|t| format!("\"{}\"", t.addr)).collect();
    format!(
        "log = \"{}\"\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nservers = [{}]\n{health}",
        dir.join("access.log").display(),
        list.join(", ")
    )
}

#[test]
fn health_check_follows_reload() {
    let a = Target::start(Answer::Status(200));
    let b = Target::start(Answer::Status(503));
    let tcp = "[listener.health]\ntype = \"tcp\"\ninterval = \"100ms\"\ntimeout = \"100ms\"\nrise = 2\nfall = 2\n";
    let http = "[listener.health]\ntype = \"http\"\npath = \"/health\"\ninterval = \"100ms\"\ntimeout = \"100ms\"\nrise = 2\nfall = 2\n";
    let cfg_path = Arc::new(Mutex::new(PathBuf::new()));
    let q = Quill::start_with(|dir, port| {
        let cfg = dir.join("quill.toml");
        std::fs::write(&cfg, reload_config(dir, port, &[&a], tcp)).unwrap();
        *cfg_path.lock().unwrap() = cfg.clone();
        vec![
            "-C".into(),
            dir.join("ctl.sock").display().to_string(),
            "--config".into(),
            cfg.display().to_string(),
        ]
    });
    let cfg = cfg_path.lock().unwrap().clone();
    let sock = ctl_path(&q);
    // TCP checks: a is connected to, but asked nothing.
    assert!(
        eventually(Duration::from_secs(3), || num(&server(&q, 0), "checks")
            >= 2),
        "{:#?}",
        servers(&q)
    );
    assert!(
        eventually(Duration::from_secs(2), || a.accepted() >= 2),
        "a is connected to"
    );
    assert!(a.requests().is_empty(), "{:?}", a.requests());

    // Reload with a new server and an HTTP check: both servers are checked the new way. The new
    // server starts down (it joined a running, checked pool) and its 503 keeps it there.
    std::fs::write(&cfg, reload_config(q.dir.path(), q.port, &[&a, &b], http)).unwrap();
    ctl(&sock, &["reload"]);
    wait_field(&q, 1, "health", "down", Duration::from_secs(3));
    assert!(
        eventually(Duration::from_secs(3), || num(
            &server(&q, 1),
            "checks_failed"
        ) >= 2),
        "b is checked: {:#?}",
        servers(&q)
    );
    assert_eq!(num(&server(&q, 1), "total"), 0, "no client met b");
    assert!(
        eventually(Duration::from_secs(2), || !a.requests().is_empty()),
        "a is asked GET /health after the reload"
    );
    assert!(a.requests()[0].starts_with("GET /health HTTP/1.0\r\n"));
    assert_eq!(server(&q, 0)["health"], "up");

    // Reload (SIGHUP) without a check: checks stop, nobody is down any more.
    std::fs::write(&cfg, reload_config(q.dir.path(), q.port, &[&a, &b], "")).unwrap();
    q.signal("HUP");
    wait_field(&q, 1, "health", "unchecked", Duration::from_secs(3));
    assert_eq!(server(&q, 1)["state"], "up");
    thread::sleep(Duration::from_millis(300));
    let (ca, cb) = (num(&server(&q, 0), "checks"), num(&server(&q, 1), "checks"));
    thread::sleep(Duration::from_millis(400));
    assert_eq!(
        (num(&server(&q, 0), "checks"), num(&server(&q, 1), "checks")),
        (ca, cb),
        "no checks without a check configured"
    );
}

// ---------------------------------------------------------------------------------------------
// Slow start
// ---------------------------------------------------------------------------------------------

#[test]
fn slow_start_ramps_a_returning_server() {
    let (a, b) = (greet("a"), greet("b"));
    let b_addr = b.addr();
    let mut opts = vec!["-r", "--slow-start", "4s", "--check", "tcp"];
    opts.extend(FAST);
    let q = start(&opts, &[spec(a.addr()), spec(b_addr)]);
    // At start nobody ramps.
    assert_eq!(num(&server(&q, 1), "ramp"), 1000);
    drop(b);
    wait_refused(b_addr, Duration::from_secs(2));
    wait_field(&q, 1, "health", "down", Duration::from_secs(2));

    let _b2 = greet_at(b_addr, "b");
    wait_field(&q, 1, "health", "up", Duration::from_secs(2));
    let up = Instant::now();
    let ramp = num(&server(&q, 1), "ramp");
    assert!(ramp > 0 && ramp < 500, "ramp right after coming up: {ramp}");

    // First second: b takes clearly less than half of the new sessions (its share of the round
    // robin is ramp/(1+ramp), and the ramp is at most 1/4 here).
    let mut early = Vec::new();
    while up.elapsed() < Duration::from_secs(1) && early.len() < 1000 {
        early.push(greet_name(q.port));
    }
    let b_early = early.iter().filter(|n| *n == "b").count();
    eprintln!(
        "slow start: b took {b_early} of {} sessions in the first second",
        early.len()
    );
    assert!(early.len() >= 20, "only {} sessions in 1 s", early.len());
    assert!(
        b_early * 10 < early.len() * 3,
        "b took {b_early} of {} sessions during slow start",
        early.len()
    );
    assert!(b_early > 0, "a ramping server still gets some sessions");

    // After the ramp: half each.
    assert!(
        eventually(Duration::from_secs(6), || num(&server(&q, 1), "ramp")
            == 1000),
        "ramp should reach 1000 after 4 s: {:#?}",
        servers(&q)
    );
    let late = names(q.port, 100);
    let b_late = late.iter().filter(|n| *n == "b").count();
    eprintln!("slow start: b took {b_late} of 100 sessions after the ramp");
    assert!(
        (40..=60).contains(&b_late),
        "b took {b_late} of 100 sessions after slow start"
    );
}

#[test]
fn health_server_added_at_run_time_takes_no_client_before_passing_checks() {
    let a = greet("a");
    let b = Target::start(Answer::Status(200));
    let opts = [
        "-r",
        "--check",
        "http:/health",
        "--check-interval",
        "300ms",
        "--check-timeout",
        "200ms",
        "--rise",
        "3",
        "--fall",
        "2",
    ];
    let q = start(&opts, &[spec(a.addr())]);
    let sock = ctl_path(&q);
    ctl(&sock, &["server", "add", &b.spec()]);
    // Down from the start, while its three checks run: every client goes to a.
    assert_eq!(server(&q, 1)["health"], "down", "{:#?}", servers(&q));
    let got = names(q.port, 10);
    assert!(got.iter().all(|n| n == "a"), "sessions went to: {got:?}");
    assert_eq!(num(&server(&q, 1), "total"), 0);
    // Up after rise passed checks, then it takes its share.
    wait_field(&q, 1, "health", "up", Duration::from_secs(5));
    assert!(num(&server(&q, 1), "checks") >= 3, "{:#?}", servers(&q));
    let line = format!("server {} (pool default) is up", b.addr);
    assert!(
        q.wait_stderr_contains(&line, Duration::from_secs(2)),
        "{}",
        q.stderr()
    );
}
