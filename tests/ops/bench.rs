//! `quill bench`: the table's numbers against a server that counts what it served (and fails on
//! purpose), idle connections held open and silent, `--watch` against a process burning CPU,
//! `--sources`, tcp mode, JSON and usage errors. Every run is the real binary over loopback.

use crate::support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

// === A counting HTTP server ===

/// What the server served, counted on its side of the wire.
#[derive(Default)]
struct Served {
    requests: AtomicU64,
    ok: AtomicU64,
    errors: AtomicU64,
    resets: AtomicU64,
    bytes: AtomicU64,
    body: AtomicU64,
    connections: AtomicU64,
    /// Connections open right now that have not sent a byte, and the most seen at once.
    silent: AtomicU64,
    max_silent: AtomicU64,
    /// Connections the server closed because they stayed silent.
    closed_silent: AtomicU64,
    peers: Mutex<BTreeSet<IpAddr>>,
}

/// How the server misbehaves on purpose.
#[derive(Clone, Copy, Default)]
struct Faults {
    /// Request number n (from 1) with n % error_every == 0 is answered 500.
    error_every: u64,
    /// Otherwise, n % reset_every == 0 is answered with a reset (SO_LINGER 0) and no bytes.
    reset_every: u64,
    /// Close a connection that stays silent this long (None: wait for ever).
    close_silent_after: Option<Duration>,
    /// Answer with Content-Length bodies whose size changes from request to request (0 B to
    /// 18 KiB, shorter and longer than the one before), in two writes: head, then body.
    vary_size: bool,
    /// Answer the k-th request on a connection with a body of k x 37 bytes (each response longer
    /// than the one before on that connection), in two writes: head, then body.
    grow_size: bool,
}

struct CountingServer {
    addr: SocketAddr,
    served: Arc<Served>,
}

const BODY: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz\n";

impl CountingServer {
    fn start(faults: Faults) -> CountingServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().unwrap();
        let served = Arc::new(Served::default());
        let s = served.clone();
        thread::spawn(move || {
            // Bounded: at most this many connections over the server's life.
            for conn in listener.incoming().take(5_000) {
                let Ok(conn) = conn else { continue };
                let s = s.clone();
                thread::spawn(move || serve(conn, &s, faults));
            }
        });
        CountingServer { addr, served }
    }

    fn url(&self) -> String {
        format!("http://{}/x", self.addr)
    }

    fn get(&self, f: impl Fn(&Served) -> &AtomicU64) -> u64 {
        f(&self.served).load(Ordering::SeqCst)
    }
}

fn serve(mut conn: TcpStream, s: &Served, faults: Faults) {
    s.connections.fetch_add(1, Ordering::SeqCst);
    if let Ok(peer) = conn.peer_addr() {
        s.peers.lock().unwrap().insert(peer.ip());
    }
    let now_silent = s.silent.fetch_add(1, Ordering::SeqCst) + 1;
    s.max_silent.fetch_max(now_silent, Ordering::SeqCst);
    let first_wait = faults.close_silent_after.unwrap_or(Duration::from_secs(30));
    conn.set_read_timeout(Some(first_wait)).unwrap();
    let mut silent = true;
    let mut on_conn = 0;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    // Bounded: a connection carries at most this many reads.
    for _ in 0..100_000 {
        let n = match conn.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(_) => {
                if silent && faults.close_silent_after.is_some() {
                    s.closed_silent.fetch_add(1, Ordering::SeqCst);
                }
                break;
            }
        };
        if silent {
            silent = false;
            s.silent.fetch_sub(1, Ordering::SeqCst);
            conn.set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
        }
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = find(&buf, b"\r\n\r\n") {
            let head: Vec<u8> = buf.drain(..end + 4).collect();
            let close = String::from_utf8_lossy(&head)
                .to_ascii_lowercase()
                .contains("connection: close");
            on_conn += 1;
            if !respond(&mut conn, s, faults, on_conn) || close {
                finish(silent, s);
                return;
            }
        }
    }
    finish(silent, s);
}

fn finish(silent: bool, s: &Served) {
    if silent {
        s.silent.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Answers one request (the `on_conn`-th on its connection); false when the connection was reset
/// on purpose.
fn respond(conn: &mut TcpStream, s: &Served, faults: Faults, on_conn: usize) -> bool {
    let n = s.requests.fetch_add(1, Ordering::SeqCst) + 1;
    if faults.error_every > 0 && n.is_multiple_of(faults.error_every) {
        let body = b"oops\n";
        let head = format!(
            "HTTP/1.1 500 Internal Server Error\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        send(conn, s, head.as_bytes(), body, body.len());
        s.errors.fetch_add(1, Ordering::SeqCst);
        return true;
    }
    if faults.reset_every > 0 && n.is_multiple_of(faults.reset_every) {
        let _ = socket2::SockRef::from(&*conn).set_linger(Some(Duration::ZERO));
        s.resets.fetch_add(1, Ordering::SeqCst);
        return false;
    }
    if faults.vary_size || faults.grow_size {
        let reps = if faults.grow_size {
            on_conn
        } else {
            [1, 60, 2, 500, 0, 3][(n % 6) as usize]
        };
        let body = BODY.repeat(reps);
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
        // Two writes, as nginx does (head, then the body by sendfile), with a pause between.
        if conn.write_all(head.as_bytes()).is_err() {
            return false;
        }
        thread::sleep(Duration::from_micros(200));
        send(conn, s, b"", &body, body.len());
        s.bytes.fetch_add(head.len() as u64, Ordering::SeqCst);
        s.ok.fetch_add(1, Ordering::SeqCst);
        return true;
    }
    if n.is_multiple_of(3) {
        // Chunked, in two chunks: the payload is BODY, the framing is extra bytes on the wire.
        let (a, b) = BODY.split_at(10);
        let mut wire = format!("{:x}\r\n", a.len()).into_bytes();
        wire.extend_from_slice(a);
        wire.extend_from_slice(format!("\r\n{:x}\r\n", b.len()).as_bytes());
        wire.extend_from_slice(b);
        wire.extend_from_slice(b"\r\n0\r\n\r\n");
        let head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        send(conn, s, head.as_bytes(), &wire, BODY.len());
    } else {
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", BODY.len());
        send(conn, s, head.as_bytes(), BODY, BODY.len());
    }
    s.ok.fetch_add(1, Ordering::SeqCst);
    true
}

fn send(conn: &mut TcpStream, s: &Served, head: &[u8], wire_body: &[u8], payload: usize) {
    let mut all = head.to_vec();
    all.extend_from_slice(wire_body);
    if conn.write_all(&all).is_ok() {
        s.bytes.fetch_add(all.len() as u64, Ordering::SeqCst);
        s.body.fetch_add(payload as u64, Ordering::SeqCst);
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

// === Running the bench ===

/// Runs `quill bench ARGS` to completion (bounded) and returns (exit code, stdout, stderr).
fn bench(args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["bench"];
    all.extend_from_slice(args);
    run_quill_output(&all)
}

/// Runs `quill bench --json ARGS`, expects exit 0 and returns the JSON object.
fn bench_json(args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let (code, out, err) = bench(&all);
    assert_eq!(code, 0, "quill bench {args:?} exit code; stderr:\n{err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("bad JSON ({e}):\n{out}"))
}

fn num(v: &Value, path: &str) -> u64 {
    path.split('.')
        .fold(v, |v, k| &v[k])
        .as_u64()
        .unwrap_or_else(|| panic!("{path} missing in {v}"))
}

/// The value column of a table line, found by its label.
fn table_value<'a>(table: &'a str, label: &str) -> &'a str {
    let line = table
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no '{label}' line in:\n{table}"));
    assert!(
        line.len() > 30 && line.as_bytes()[29] == b' ' && line.as_bytes()[30] != b' ',
        "value of '{label}' must start at column 31:\n{line}"
    );
    &line[30..]
}

// === Tests ===

#[test]
fn bench_table_counts_match_what_the_server_served_with_injected_failures() {
    let server = CountingServer::start(Faults {
        error_every: 10,
        reset_every: 7,
        ..Faults::default()
    });
    let (code, table, err) = bench(&["--active", "8", "--requests", "300", &server.url()]);
    assert_eq!(code, 0, "stderr:\n{err}");
    let (ok, errors, resets) = (
        server.get(|s| &s.ok),
        server.get(|s| &s.errors),
        server.get(|s| &s.resets),
    );
    assert_eq!(server.get(|s| &s.requests), 300, "server saw every request");
    assert!(errors > 0 && resets > 0, "faults were injected");
    for (label, want) in [
        ("Idle Connections:", "0".to_string()),
        ("Active Connections:", "8".to_string()),
        ("Total Concurrency Level:", "8".to_string()),
        ("Complete requests:", ok.to_string()),
        ("Failed requests:", (errors + resets).to_string()),
        (
            "Total transferred:",
            format!("{} bytes", server.get(|s| &s.bytes)),
        ),
        (
            "HTML transferred:",
            format!("{} bytes", server.get(|s| &s.body)),
        ),
        (
            "Failures by kind:",
            format!("reset {resets}, bad_response {errors}"),
        ),
    ] {
        assert_eq!(table_value(&table, label), want, "{label}\n{table}");
    }
    for label in [
        "Average time taken for tests:",
        "Requests per second:",
        "Transfer rate:",
        "Latency p50:",
        "Latency p99.9:",
        "Latency max:",
    ] {
        table_value(&table, label);
    }
    assert!(table_value(&table, "Requests per second:").ends_with("[#/sec] (mean)"));
    assert!(table_value(&table, "Transfer rate:").ends_with("[Kbytes/sec] received"));
}

#[test]
fn bench_keepalive_reuses_connections_and_counts_exactly() {
    let server = CountingServer::start(Faults {
        error_every: 10,
        reset_every: 7,
        ..Faults::default()
    });
    let v = bench_json(&[
        "--active",
        "4",
        "--requests",
        "200",
        "--keepalive",
        &server.url(),
    ]);
    assert_eq!(server.get(|s| &s.requests), 200);
    assert_eq!(num(&v, "complete"), server.get(|s| &s.ok));
    assert_eq!(num(&v, "failures.bad_response"), server.get(|s| &s.errors));
    assert_eq!(num(&v, "failures.reset"), server.get(|s| &s.resets));
    assert_eq!(num(&v, "total_bytes"), server.get(|s| &s.bytes));
    assert_eq!(num(&v, "body_bytes"), server.get(|s| &s.body));
    // A connection ends only at a reset (every 7th request, not also 10th), so far fewer
    // connections than requests: 4 to start with, plus one per reset that had a request after it.
    let (resets, conns) = (server.get(|s| &s.resets), server.get(|s| &s.connections));
    assert!(
        conns <= 4 + resets && conns + 4 >= 4 + resets,
        "{conns} connections for {resets} resets"
    );
}

#[test]
fn bench_keepalive_responses_shorter_or_longer_than_the_last_are_read_without_stalling() {
    // Kept-alive connections wait for a whole response of the last one's size (SO_RCVLOWAT).
    // A shorter response must still be read (the mark is dropped within a few ms), and a longer
    // one too (the mark falls to 1 at the first partial read): none may run into the timeout.
    let server = CountingServer::start(Faults {
        vary_size: true,
        ..Faults::default()
    });
    let v = bench_json(&[
        "--active",
        "3",
        "--requests",
        "600",
        "--keepalive",
        "--timeout",
        "2s",
        &server.url(),
    ]);
    assert_eq!(server.get(|s| &s.requests), 600);
    assert_eq!(num(&v, "failed"), 0, "{v}");
    assert_eq!(num(&v, "complete"), 600);
    assert_eq!(num(&v, "total_bytes"), server.get(|s| &s.bytes));
    assert_eq!(num(&v, "body_bytes"), server.get(|s| &s.body));
    assert_eq!(
        server.get(|s| &s.connections),
        3,
        "all on the first connections"
    );
    // A stalled response would wait for the 2 s timeout; the slowest one must be far quicker.
    let max_us = v["latency_us"]["max"].as_u64().expect("latency_us.max");
    assert!(max_us < 1_000_000, "slowest response {max_us} µs: {v}");
}

#[test]
fn bench_keepalive_responses_growing_on_every_request_are_read_without_stalling() {
    // Each response is longer than the last one on its connection, so every one meets a mark
    // set too low and is finished by the partial-read rule (or the probe), never the timeout.
    let server = CountingServer::start(Faults {
        grow_size: true,
        ..Faults::default()
    });
    let v = bench_json(&[
        "--active",
        "2",
        "--requests",
        "300",
        "--keepalive",
        "--timeout",
        "2s",
        &server.url(),
    ]);
    assert_eq!(num(&v, "failed"), 0, "{v}");
    assert_eq!(num(&v, "complete"), 300);
    assert_eq!(num(&v, "body_bytes"), server.get(|s| &s.body));
    assert_eq!(server.get(|s| &s.connections), 2);
    let max_us = v["latency_us"]["max"].as_u64().expect("latency_us.max");
    assert!(max_us < 1_000_000, "slowest response {max_us} µs: {v}");
}

#[test]
fn bench_without_keepalive_opens_one_connection_per_request() {
    let server = CountingServer::start(Faults::default());
    let v = bench_json(&["--active", "5", "--requests", "60", &server.url()]);
    assert_eq!(num(&v, "complete"), 60);
    assert_eq!(num(&v, "failed"), 0);
    assert_eq!(server.get(|s| &s.connections), 60);
    assert_eq!(num(&v, "body_bytes"), 60 * BODY.len() as u64);
    let p50 = num(&v, "latency_us.p50");
    let max = num(&v, "latency_us.max");
    assert!(p50 > 0 && p50 <= max, "latency p50 {p50} max {max}");
}

#[test]
fn bench_idle_connections_stay_open_and_silent_for_the_whole_run() {
    let server = CountingServer::start(Faults::default());
    let v = bench_json(&[
        "--idle",
        "30",
        "--active",
        "2",
        "--duration",
        "1s",
        "--keepalive",
        &server.url(),
    ]);
    assert_eq!(num(&v, "idle"), 30);
    assert_eq!(num(&v, "idle_held"), 30, "{v}");
    assert_eq!(num(&v, "failures.idle_closed"), 0);
    assert!(num(&v, "complete") > 0);
    // The server saw 30 connections open at once that never sent a byte (the active ones
    // write as soon as they connect).
    assert!(
        server.get(|s| &s.max_silent) >= 30,
        "max silent {}",
        server.get(|s| &s.max_silent)
    );
    assert_eq!(
        server.get(|s| &s.connections),
        32,
        "30 idle and 2 kept-alive"
    );
}

#[test]
fn bench_counts_idle_connections_the_server_closed() {
    let server = CountingServer::start(Faults {
        close_silent_after: Some(Duration::from_millis(300)),
        ..Faults::default()
    });
    let v = bench_json(&[
        "--idle",
        "6",
        "--active",
        "1",
        "--duration",
        "1200ms",
        "--keepalive",
        &server.url(),
    ]);
    assert_eq!(server.get(|s| &s.closed_silent), 6);
    assert_eq!(num(&v, "failures.idle_closed"), 6, "{v}");
    assert_eq!(num(&v, "idle_held"), 0);
    assert_eq!(num(&v, "failed"), 6);
}

/// CPU ticks (user + system) of a process, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // The test assumes the usual 100 ticks per second (the bench asks sysconf).
    ticks as f64 / 100.0
}

/// A child process burning CPU; killed by PID on drop.
struct Burner(Child);

impl Drop for Burner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn bench_watch_reports_the_cpu_a_busy_process_burned() {
    let server = CountingServer::start(Faults::default());
    let burner = Burner(
        Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn sh"),
    );
    let pid = burner.0.id();
    let before = cpu_seconds(pid);
    let pid_arg = pid.to_string();
    let v = bench_json(&[
        "--active",
        "1",
        "--duration",
        "1500ms",
        "--keepalive",
        "--watch",
        &pid_arg,
        &server.url(),
    ]);
    let outside = cpu_seconds(pid) - before;
    let w = &v["watch"][0];
    assert_eq!(w["pid"].as_u64(), Some(pid as u64));
    let reported = w["user_seconds"].as_f64().unwrap() + w["system_seconds"].as_f64().unwrap();
    // The bench watched the 1.5 s active phase, inside the window measured here.
    assert!(outside > 0.3, "the burner got {outside} s of CPU");
    assert!(
        reported <= outside + 0.05 && reported >= 0.5 * outside,
        "reported {reported} s, measured {outside} s around the run"
    );
    assert!(w["peak_rss_kib"].as_u64().unwrap() > 0);
    assert!(w["cpu_us_per_request"].as_f64().unwrap() > 0.0);
    drop(burner);
}

#[test]
fn bench_sources_spread_clients_over_the_given_addresses() {
    let server = CountingServer::start(Faults::default());
    let v = bench_json(&[
        "--active",
        "4",
        "--requests",
        "20",
        "--sources",
        "127.0.0.2-127.0.0.3",
        &server.url(),
    ]);
    assert_eq!(num(&v, "complete"), 20);
    let peers = server.served.peers.lock().unwrap().clone();
    let want: BTreeSet<IpAddr> = ["127.0.0.2", "127.0.0.3"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    assert_eq!(peers, want);
}

#[test]
fn bench_help_documents_sources_syntax() {
    let (code, out, _) = bench(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--sources <A-B>"), "{out}");
    assert!(out.contains("127.0.0.1-127.0.0.50"), "{out}");
    assert!(out.contains("--watch <PID>"), "{out}");
}

#[test]
fn bench_bad_arguments_exit_2_with_a_one_line_error_naming_the_value() {
    let target = "http://127.0.0.1:1/";
    for (args, needle) in [
        (vec!["--active", "many", target], "many"),
        (vec!["--duration", "3 weeks", target], "3 weeks"),
        (
            vec!["--sources", "127.0.0.9-127.0.0.1", target],
            "127.0.0.9-127.0.0.1",
        ),
        (vec!["ftp://127.0.0.1:21"], "ftp://127.0.0.1:21"),
        (vec!["--active", "0", target], "--active 0"),
        (vec!["--watch", "4000000000", target], "4000000000"),
        (
            vec!["--requests", "5", "--duration", "1s", target],
            "--duration",
        ),
    ] {
        let (code, _, err) = bench(&args);
        assert_eq!(code, 2, "{args:?}: stderr:\n{err}");
        assert!(
            first_line(&err).contains(needle),
            "{args:?}: first stderr line should name '{needle}':\n{err}"
        );
    }
}

#[test]
fn bench_refused_target_counts_refused_failures() {
    let addr = refused_addr();
    let url = format!("http://{addr}/");
    let v = bench_json(&["--active", "2", "--requests", "10", &url]);
    assert_eq!(num(&v, "complete"), 0);
    assert_eq!(num(&v, "failures.refused"), 10, "{v}");
}

/// An echo-line server counting lines.
fn line_echo() -> (SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let lines = Arc::new(AtomicU64::new(0));
    let l = lines.clone();
    thread::spawn(move || {
        for conn in listener.incoming().take(1_000) {
            let Ok(conn) = conn else { continue };
            let l = l.clone();
            thread::spawn(move || {
                conn.set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                let mut w = conn.try_clone().unwrap();
                let mut r = BufReader::new(conn);
                let mut line = String::new();
                for _ in 0..10_000 {
                    line.clear();
                    match r.read_line(&mut line) {
                        Ok(n) if n > 0 => {}
                        _ => return,
                    }
                    l.fetch_add(1, Ordering::SeqCst);
                    if w.write_all(line.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, lines)
}

#[test]
fn bench_tcp_mode_sends_a_line_and_reads_a_line() {
    let (addr, lines) = line_echo();
    let url = format!("tcp://{addr}");
    let v = bench_json(&["--active", "5", "--requests", "50", &url]);
    assert_eq!(num(&v, "complete"), 50);
    assert_eq!(lines.load(Ordering::SeqCst), 50);
    // Each answer is the line "quill-bench\n" echoed back.
    assert_eq!(num(&v, "total_bytes"), 50 * 12);
    assert_eq!(num(&v, "body_bytes"), 50 * 12);
    let v = bench_json(&["--active", "2", "--requests", "40", "--keepalive", &url]);
    assert_eq!(num(&v, "complete"), 40);
    assert_eq!(num(&v, "failed"), 0);
}

#[test]
fn bench_threads_share_the_work() {
    let server = CountingServer::start(Faults::default());
    let v = bench_json(&[
        "--threads",
        "3",
        "--active",
        "7",
        "--requests",
        "101",
        "--keepalive",
        &server.url(),
    ]);
    assert_eq!(num(&v, "complete"), 101);
    assert_eq!(server.get(|s| &s.requests), 101);
    assert_eq!(server.get(|s| &s.connections), 7);
}

#[test]
fn bench_progress_lines_are_plain_when_stderr_is_not_a_terminal() {
    let server = CountingServer::start(Faults::default());
    let start = Instant::now();
    let (code, _, err) = bench(&[
        "--active",
        "1",
        "--duration",
        "2200ms",
        "--keepalive",
        &server.url(),
    ]);
    assert_eq!(code, 0);
    assert!(start.elapsed() >= Duration::from_secs(2));
    assert!(
        !err.contains('\r'),
        "no carriage returns off a terminal:\n{err:?}"
    );
    assert!(
        err.lines().filter(|l| l.contains("req/s")).count() >= 1,
        "periodic progress lines:\n{err}"
    );
}

/// Runs a shell command on a pseudo-terminal 72 columns wide (`script`, util-linux), bounded;
/// returns everything written to the terminal.
fn on_terminal(cmd: &str) -> String {
    let cmd = format!("stty cols 72; {cmd}");
    let mut child = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("script (util-linux) runs");
    let mut out = child.stdout.take().unwrap();
    let reader = thread::spawn(move || {
        let mut text = Vec::new();
        let _ = out.read_to_end(&mut text);
        String::from_utf8_lossy(&text).into_owned()
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
    }
    let Some(status) = child.try_wait().unwrap() else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{cmd}: still running after 20 s");
    };
    let text = reader.join().unwrap();
    // `script -e` exits with the command's status.
    assert!(status.success(), "{cmd}: {status}; terminal:\n{text:?}");
    text
}

/// Splits terminal output at the table and checks the progress before it: redraws of one line,
/// each a bar with a percentage that fits 72 columns, cleared before the table. Returns the
/// draws and the table.
fn progress_draws(text: &str) -> (Vec<String>, String) {
    let table_at = text
        .find("Idle Connections:")
        .unwrap_or_else(|| panic!("no table:\n{text:?}"));
    let (progress, table) = text.split_at(table_at);
    // Lines before the bar (the "spreading" notice) end with a newline; the bar never does.
    let bar = progress.rsplit('\n').next().unwrap_or(progress);
    assert!(
        bar.ends_with("\r\x1b[K"),
        "the bar is cleared before the table: {progress:?}"
    );
    let draws: Vec<String> = bar
        .split('\r')
        .filter_map(|d| d.strip_suffix("\x1b[K"))
        .filter(|d| !d.is_empty())
        .map(str::to_string)
        .collect();
    assert!(draws.len() >= 3, "redrawn several times: {progress:?}");
    for d in &draws {
        assert!(
            d.starts_with('[') && d[1..].contains("] ") && d.contains('%'),
            "a bar with a percentage: {d:?}"
        );
        assert!(d.len() < 72, "fits 72 columns: {d:?} ({} chars)", d.len());
    }
    (draws, table.to_string())
}

/// The request count of an active-phase draw (`[...]  50% 0.8/1.5 s, 1,234 req, ...`).
fn drawn_requests(d: &str) -> Option<u64> {
    let after = d.split(" s, ").nth(1)?;
    after.split(" req").next()?.replace(',', "").parse().ok()
}

#[test]
fn bench_progress_bar_redraws_one_line_on_a_terminal() {
    let server = CountingServer::start(Faults::default());
    let text = on_terminal(&format!(
        "exec {BIN} bench --idle 20 --active 2 --duration 1500ms --keepalive {}",
        server.url()
    ));
    let (draws, table) = progress_draws(&text);
    assert!(table.contains("Complete requests:"), "{table}");
    assert!(
        draws.iter().any(|d| d.contains("req/s")),
        "the active phase shows counts and rate: {draws:?}"
    );
    let counts: Vec<u64> = draws.iter().filter_map(|d| drawn_requests(d)).collect();
    assert!(
        counts.windows(2).all(|w| w[0] <= w[1]) && counts.last() > Some(&0),
        "the count rises: {draws:?}"
    );
    assert!(
        draws.last().unwrap().contains('#'),
        "the bar fills: {draws:?}"
    );
}

#[test]
fn bench_progress_bar_sums_the_child_processes_of_a_spread_run() {
    // 300 descriptors per process: 250 idle + 5 active need 3 processes (see the test below).
    let server = CountingServer::start(Faults::default());
    let text = on_terminal(&format!(
        "ulimit -n 300 && exec {BIN} bench --idle 250 --active 5 --duration 1500ms --keepalive {}",
        server.url()
    ));
    assert!(
        text.contains("spreading 255 connections over 3 processes"),
        "{text:?}"
    );
    let (draws, table) = progress_draws(&text);
    let complete: u64 = table_value(&table, "Complete requests:")
        .trim()
        .parse()
        .unwrap();
    let counts: Vec<u64> = draws.iter().filter_map(|d| drawn_requests(d)).collect();
    let last = *counts
        .last()
        .unwrap_or_else(|| panic!("active draws: {draws:?}"));
    assert!(
        last > 0 && last <= complete,
        "the children's counts are summed: last drawn {last}, complete {complete}: {draws:?}"
    );
}

#[test]
fn bench_spreads_connections_over_child_processes_when_descriptors_run_short() {
    let server = CountingServer::start(Faults::default());
    // 300 descriptors per process (hard limit too, so it cannot be raised), 200 kept in reserve:
    // 100 connections per process, so 250 idle + 5 active need 3 processes.
    let script = format!(
        "ulimit -n 300 && exec {BIN} bench --json --idle 250 --active 5 --requests 50 --keepalive {}",
        server.url()
    );
    let dir = scratch_dir();
    let out = dir.path().join("out");
    let err = dir.path().join("err");
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("spawn sh");
    let status = wait_or_kill(&mut child, Duration::from_secs(20), "quill bench");
    let (out, err) = (
        std::fs::read_to_string(out).unwrap(),
        std::fs::read_to_string(err).unwrap(),
    );
    assert!(status.success(), "stderr:\n{err}");
    assert!(
        err.contains("spreading 255 connections over 3 processes"),
        "stderr:\n{err}"
    );
    let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(num(&v, "processes"), 3);
    assert_eq!(num(&v, "complete"), 50);
    assert_eq!(num(&v, "idle_held"), 250, "{v}");
    assert_eq!(num(&v, "failed"), 0);
    assert_eq!(server.get(|s| &s.requests), 50);
    assert!(server.get(|s| &s.max_silent) >= 250);
    assert_eq!(server.get(|s| &s.connections), 255);
}

#[test]
fn bench_sweep_measures_every_target_at_every_level_and_plots_them() {
    let (a, b) = (
        CountingServer::start(Faults::default()),
        CountingServer::start(Faults::default()),
    );
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("chart.svg");
    let (ta, tb) = (format!("a={}", a.url()), format!("b={}", b.url()));
    let report = bench_json(&[
        "--sweep",
        "2:5:2",
        "--requests",
        "30",
        "--target",
        &ta,
        "--target",
        &tb,
        "--plot",
        svg.to_str().unwrap(),
    ]);
    // END is inclusive: 2, 4, 5; both targets at each level, each a full measurement.
    let levels: Vec<u64> = report["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(levels, [2, 4, 5]);
    let rows = report["results"].as_array().unwrap();
    assert_eq!(rows.len(), 6, "{report}");
    for (name, server) in [("a", &a), ("b", &b)] {
        let mine: Vec<&Value> = rows.iter().filter(|r| r["target"] == name).collect();
        let actives: Vec<u64> = mine.iter().map(|r| num(r, "active")).collect();
        assert_eq!(actives, [2, 4, 5], "{name}");
        let complete: u64 = mine.iter().map(|r| num(r, "summary.complete")).sum();
        assert_eq!(complete, 90, "{name}: 3 levels x 30 requests");
        assert_eq!(
            server.get(|s| &s.requests),
            90,
            "{name}: the server saw them all"
        );
    }
    let chart = std::fs::read_to_string(&svg).expect("the chart was written");
    assert!(chart.starts_with("<svg"), "{chart}");
    for text in ["requests per second", "concurrent active connections"] {
        assert!(chart.contains(text), "chart lacks {text:?}");
    }
    // The legend names every target (text elements hold their text on a line of its own).
    for name in ["a", "b"] {
        assert!(
            chart.lines().any(|l| l.trim() == name),
            "legend lacks {name}"
        );
    }
}

#[test]
fn bench_rounds_repeat_every_measurement_rotating_the_order_and_report_medians() {
    let (a, b) = (
        CountingServer::start(Faults::default()),
        CountingServer::start(Faults::default()),
    );
    let (ta, tb) = (format!("a={}", a.url()), format!("b={}", b.url()));
    let args = [
        "--sweep",
        "1:2:1",
        "--requests",
        "20",
        "--rounds",
        "3",
        "--target",
        &ta,
        "--target",
        &tb,
    ];
    let mut json_args = vec!["--json"];
    json_args.extend_from_slice(&args);
    let (code, out, err) = bench(&json_args);
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(num(&report, "rounds"), 3);
    // Every target at every level in every round: 2 x 2 x 3 measurements of 20 requests.
    assert_eq!(report["results"].as_array().unwrap().len(), 12, "{report}");
    for server in [&a, &b] {
        assert_eq!(server.get(|s| &s.requests), 2 * 3 * 20);
    }
    let medians = report["medians"].as_array().unwrap();
    assert_eq!(medians.len(), 4, "{report}");
    for m in medians {
        assert_eq!(num(m, "rounds"), 3);
        assert_eq!(num(m, "complete"), 60);
        assert_eq!(num(m, "failed"), 0);
        let rps: Vec<f64> = report["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["target"] == m["target"] && r["active"] == m["active"])
            .map(|r| r["summary"]["requests_per_second"].as_f64().unwrap())
            .collect();
        let mut sorted = rps.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(m["requests_per_second"].as_f64(), Some(sorted[1]), "{m}");
        assert_eq!(m["requests_per_second_min"].as_f64(), Some(sorted[0]));
        assert_eq!(m["requests_per_second_max"].as_f64(), Some(sorted[2]));
    }
    // The order rotates from round to round: who goes first at level 1 changes.
    let firsts: Vec<&str> = err
        .lines()
        .filter(|l| l.contains(" at 1 active"))
        .filter_map(|l| l.split("] ").nth(1)?.split(' ').next())
        .collect();
    assert_eq!(firsts.len(), 6, "{err}");
    assert_ne!(
        firsts[0], firsts[2],
        "round 1 and round 2 start alike:\n{err}"
    );
    // The table shows one line per target and level, with the rounds and the range.
    let (code, table, err) = bench(&args);
    assert_eq!(code, 0, "{err}");
    assert!(table.lines().next().unwrap().contains("range"), "{table}");
    assert_eq!(table.lines().count(), 1 + 4, "{table}");
}

#[test]
fn bench_help_documents_sweep_and_targets() {
    let (code, help, _) = bench(&["--help"]);
    assert_eq!(code, 0);
    for text in [
        "--sweep",
        "END inclusive",
        "50:120:50 gives 50, 100, 120",
        "--target",
        "NAME=URL",
        "--plot",
        "--rounds",
        "median",
    ] {
        assert!(help.contains(text), "--help lacks {text:?}:\n{help}");
    }
}

#[test]
fn bench_target_names_must_be_unique_and_not_mixed_with_a_positional_target() {
    let (code, _, err) = bench(&[
        "--target",
        "a=http://127.0.0.1:1/",
        "--target",
        "a=http://127.0.0.1:2/",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("--target a: the name is used twice"), "{err}");
    let (code, _, err) = bench(&["http://127.0.0.1:1/", "--target", "a=http://127.0.0.1:2/"]);
    assert_eq!(code, 2);
    assert!(err.contains("not both"), "{err}");
    let (code, _, err) = bench(&["--sweep", "10:5:1", "http://127.0.0.1:1/"]);
    assert_eq!(code, 2);
    assert!(err.contains("10:5:1"), "{err}");
}

// === UDP mode ===

/// What a UDP echo server saw, counted on its side of the wire.
#[derive(Default)]
struct Echoed {
    received: AtomicU64,
    echoed: AtomicU64,
    dropped: AtomicU64,
    delayed: AtomicU64,
    peers: Mutex<BTreeSet<SocketAddr>>,
}

/// A UDP echo server on loopback. Datagram number n (from 1) with n % drop_every == 0 gets no
/// answer; otherwise, n % late_every == 0 is answered after `late_by`. 0 turns a fault off.
fn udp_echo(drop_every: u64, late_every: u64, late_by: Duration) -> (SocketAddr, Arc<Echoed>) {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = sock.local_addr().unwrap();
    let seen = Arc::new(Echoed::default());
    let s = seen.clone();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        // Bounded: at most this many datagrams over the server's life.
        for _ in 0..200_000 {
            let Ok((n, peer)) = sock.recv_from(&mut buf) else {
                return;
            };
            let count = s.received.fetch_add(1, Ordering::SeqCst) + 1;
            s.peers.lock().unwrap().insert(peer);
            if drop_every > 0 && count % drop_every == 0 {
                s.dropped.fetch_add(1, Ordering::SeqCst);
                continue;
            }
            if late_every > 0 && count % late_every == 0 {
                s.delayed.fetch_add(1, Ordering::SeqCst);
                let (late, data) = (sock.try_clone().unwrap(), buf[..n].to_vec());
                thread::spawn(move || {
                    thread::sleep(late_by);
                    let _ = late.send_to(&data, peer);
                });
                continue;
            }
            if sock.send_to(&buf[..n], peer).is_ok() {
                s.echoed.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    (addr, seen)
}

#[test]
fn bench_udp_counts_every_lost_datagram_exactly() {
    let (addr, seen) = udp_echo(10, 0, Duration::ZERO);
    let url = format!("udp://{addr}");
    let v = bench_json(&[
        "--active",
        "8",
        "--requests",
        "500",
        "--timeout",
        "300ms",
        "--size",
        "200",
        &url,
    ]);
    assert_eq!(seen.received.load(Ordering::SeqCst), 500);
    assert_eq!(seen.dropped.load(Ordering::SeqCst), 50);
    assert_eq!(num(&v, "datagrams_sent"), 500, "{v}");
    assert_eq!(num(&v, "complete"), 450, "{v}");
    assert_eq!(num(&v, "lost"), 50, "{v}");
    assert_eq!(num(&v, "failures.timeout"), 50, "{v}");
    assert_eq!(num(&v, "failed"), 50, "{v}");
    assert_eq!(num(&v, "late"), 0, "{v}");
    // Each answer is the whole datagram, echoed.
    assert_eq!(num(&v, "total_bytes"), 450 * 200, "{v}");
    // Eight flows: eight client sockets, each sending every one of its requests.
    assert_eq!(seen.peers.lock().unwrap().len(), 8);
    // The table shows the same counts.
    let (code, table, err) = bench(&[
        "--active",
        "2",
        "--requests",
        "20",
        "--timeout",
        "300ms",
        &url,
    ]);
    assert_eq!(code, 0, "stderr:\n{err}");
    assert_eq!(table_value(&table, "Datagrams sent:"), "20");
    assert!(
        table_value(&table, "Lost datagrams:").starts_with('2'),
        "{table}"
    );
}

#[test]
fn bench_udp_replies_after_the_timeout_count_late_and_lost_never_answered() {
    // Every 5th datagram is answered 400 ms later; the client waits 150 ms.
    let (addr, seen) = udp_echo(0, 5, Duration::from_millis(400));
    let url = format!("udp://{addr}");
    let v = bench_json(&[
        "--active",
        "2",
        "--requests",
        "50",
        "--timeout",
        "150ms",
        &url,
    ]);
    assert_eq!(seen.delayed.load(Ordering::SeqCst), 10);
    assert_eq!(num(&v, "complete"), 40, "{v}");
    assert_eq!(num(&v, "lost"), 10, "{v}");
    // The late replies that came before the run ended (the last ones may come after it) are
    // counted as late, never as answers.
    let late = num(&v, "late");
    assert!((1..=10).contains(&late), "{v}");
}

#[test]
fn bench_udp_idle_flows_get_one_reply_each_and_stay_silent() {
    let (addr, seen) = udp_echo(0, 0, Duration::ZERO);
    let url = format!("udp://{addr}");
    let v = bench_json(&[
        "--idle",
        "300",
        "--active",
        "2",
        "--requests",
        "20",
        "--sources",
        "127.0.0.1-127.0.0.3",
        &url,
    ]);
    assert_eq!(num(&v, "idle_held"), 300, "{v}");
    assert_eq!(num(&v, "complete"), 20, "{v}");
    assert_eq!(num(&v, "failed"), 0, "{v}");
    // One datagram per idle flow, one per request; 302 flows, each its own address and port,
    // spread over the three sources.
    assert_eq!(seen.received.load(Ordering::SeqCst), 320);
    let peers = seen.peers.lock().unwrap();
    assert_eq!(peers.len(), 302);
    let ips: BTreeSet<IpAddr> = peers.iter().map(SocketAddr::ip).collect();
    assert_eq!(ips.len(), 3, "{ips:?}");
}

#[test]
fn bench_udp_spreads_flows_over_child_processes_when_descriptors_run_short() {
    let (addr, seen) = udp_echo(0, 0, Duration::ZERO);
    // 100 descriptors per process (see the TCP test): 250 idle + 5 active flows need 3 processes.
    let script = format!(
        "ulimit -n 300 && exec {BIN} bench --json --idle 250 --active 5 --requests 50 --size 100 udp://{addr}"
    );
    let dir = scratch_dir();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("spawn sh");
    let status = wait_or_kill(&mut child, Duration::from_secs(20), "quill bench");
    let (out, err) = (
        std::fs::read_to_string(out).unwrap(),
        std::fs::read_to_string(err).unwrap(),
    );
    assert!(status.success(), "stderr:\n{err}");
    assert!(
        err.contains("spreading 255 connections over 3 processes"),
        "stderr:\n{err}"
    );
    let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(num(&v, "processes"), 3);
    assert_eq!(num(&v, "complete"), 50, "{v}");
    assert_eq!(num(&v, "datagrams_sent"), 50, "{v}");
    assert_eq!(num(&v, "idle_held"), 250, "{v}");
    assert_eq!(num(&v, "failed"), 0, "{v}");
    // The children got --size: every answer is 100 bytes.
    assert_eq!(num(&v, "total_bytes"), 50 * 100, "{v}");
    assert_eq!(seen.received.load(Ordering::SeqCst), 300);
    assert_eq!(seen.peers.lock().unwrap().len(), 255);
}

#[test]
fn bench_udp_port_unreachable_counts_refused() {
    // A port nobody listens on: the kernel answers each datagram with ICMP port unreachable.
    let port = free_port();
    let url = format!("udp://127.0.0.1:{port}");
    let v = bench_json(&["--active", "2", "--requests", "10", "--timeout", "2s", &url]);
    assert_eq!(num(&v, "complete"), 0, "{v}");
    assert_eq!(num(&v, "failures.refused"), 10, "{v}");
    assert_eq!(num(&v, "lost"), 0, "{v}");
}

#[test]
fn bench_udp_bad_arguments_exit_2_naming_the_value() {
    for (args, needle) in [
        (vec!["--size", "4", "udp://127.0.0.1:9"], "--size"),
        (vec!["--size", "70000", "udp://127.0.0.1:9"], "--size"),
        (vec!["--size", "64", "tcp://127.0.0.1:9"], "--size 64"),
        (vec!["udp://127.0.0.1"], "udp://127.0.0.1"),
    ] {
        let (code, _, err) = bench(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(first_line(&err).contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn bench_help_documents_udp_targets_size_and_loss() {
    let (code, out, _) = bench(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("udp://HOST:PORT"), "{out}");
    assert!(out.contains("--size <BYTES>"), "{out}");
    assert!(out.contains("lost"), "{out}");
    assert!(out.contains("late"), "{out}");
}
