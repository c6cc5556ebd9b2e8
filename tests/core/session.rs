//! The session contract seen from outside. A server's session count (`conn` in `servers`) is held
//! by a lease for exactly as long as a session uses or tries that server, and it comes back
//! whichever way the session ends: failover after a refused connect, a connect timeout, a reset
//! from either side, the idle and FIN timeouts, a normal end, `close N`. And a session's one
//! deadline carries it from its connect timeout to its idle timeout, moving later with traffic.
//! And a bug in one session ends that session alone: a panic in its code resets it, gives back
//! its lease, and the worker and every other session go on.

use crate::admin_support;
use crate::ctl;
use crate::http_support;
use crate::support;

use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use admin_support::metrics;
use ctl::*;
use http_support::{body_pattern, echo_response, get, Backend, Client, Gate, Step};
use support::*;

/// Bound on every wait here; the timeouts under test are 1 to 2 s.
const WITHIN: Duration = Duration::from_secs(10);

/// Server `i`'s session count, as `servers` shows it.
fn conn(sock: &Path, i: usize) -> u64 {
    let servers = ctl(sock, "servers");
    server_field(&servers, i, "conn").parse().unwrap()
}

fn failures(sock: &Path, i: usize) -> u64 {
    let servers = ctl(sock, "servers");
    server_field(&servers, i, "failures").parse().unwrap()
}

/// Waits (bounded) until server `i` counts `want` sessions; fails the test otherwise.
fn wait_conn(q: &QuillProcess, sock: &Path, i: usize, want: u64, what: &str) {
    let deadline = Instant::now() + WITHIN;
    loop {
        let now = conn(sock, i);
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: server {i} counts {now} sessions, not {want}, after {WITHIN:?}\nservers:\n{}\nstderr:\n{}",
            ctl(sock, "servers"),
            q.stderr()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for the access log line of a session that ended with `end` (the readiness probe's line
/// may come first) and returns it.
fn wait_end(q: &QuillProcess, end: &str) -> LogLine {
    wait_log_line(&q.log_path(), WITHIN, |l| l.end == end)
}

/// Waits (bounded) until server `i` is out of the blacklist the readiness probe's failed connect
/// put it in.
fn wait_up(sock: &Path, i: usize) {
    let deadline = Instant::now() + WITHIN;
    while server_field(&ctl(sock, "servers"), i, "state") != "up" {
        assert!(Instant::now() < deadline, "server {i} never came back up");
        thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until the holder has accepted `n` connections in all.
fn wait_accepted(h: &Holder, n: u64) {
    let deadline = Instant::now() + WITHIN;
    while h.accepted.load(std::sync::atomic::Ordering::SeqCst) < n {
        assert!(
            Instant::now() < deadline,
            "holder: {n} connections not accepted"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

fn reset(s: TcpStream) {
    socket2::SockRef::from(&s)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(s);
}

/// The seconds of an access log duration ("S.mmm").
fn seconds(line: &LogLine) -> f64 {
    line.duration
        .parse()
        .unwrap_or_else(|_| panic!("duration in {}", line.raw))
}

fn echo_client(q: &QuillProcess) -> TcpStream {
    let mut c = connect(q.addr());
    echo_roundtrip(&mut c, b"hello\n");
    c
}

#[test]
fn server_session_count_returns_to_zero_after_every_way_a_session_ends() {
    // A refused connect: the session fails over; the refused server's count comes back at once
    // (while the session lives on at the next server), the next server's at the end.
    {
        let e = echo();
        let refused = refused_addr();
        let (q, sock) = start_ctl(&["-r"], &[spec(refused), spec(e.addr())]);
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(echo_client(&q));
        }
        assert!(
            failures(&sock, 0) >= 1,
            "no session tried the refused server"
        );
        assert_eq!(
            conn(&sock, 0),
            0,
            "the refused server still counts a session"
        );
        wait_conn(&q, &sock, 1, 4, "four sessions at the echo server");
        for mut c in held {
            c.shutdown(Shutdown::Write).unwrap();
            read_until_eof(&mut c, WITHIN);
        }
        wait_conn(&q, &sock, 1, 0, "after failover and normal ends");
        assert_eq!(conn(&sock, 0), 0);
        wait_end(&q, "done");
    }
    // A connect to a silent address: counted while connecting, given back at the timeout.
    if let Some(hole) = BlackHole::start() {
        let (q, sock) = start_ctl(&["-t", "1s", "-b", "10ms"], &[spec(hole.addr())]);
        wait_up(&sock, 0);
        let mut c = connect(q.addr());
        wait_conn(&q, &sock, 0, 1, "connecting to a silent server");
        let listing = ctl(&sock, "connections");
        assert!(
            listing.contains("connecting") && listing.contains(&hole.addr().to_string()),
            "connections while connecting: {listing:?}"
        );
        wait_closed(&mut c, WITHIN);
        wait_conn(&q, &sock, 0, 0, "after the connect timeout");
        wait_end(&q, "no_server");
    } else {
        eprintln!("no black hole on this kernel: connect timeout part skipped");
    }
    // Resets from either side, the idle and FIN timeouts, `close N`.
    {
        let e = echo();
        let (q, sock) = start_ctl(&["--idle-timeout", "1s"], &[spec(e.addr())]);
        let c = echo_client(&q);
        wait_conn(&q, &sock, 0, 1, "client reset: open");
        reset(c);
        wait_conn(&q, &sock, 0, 0, "after a client reset");
        wait_end(&q, "client_reset");

        let mut c = echo_client(&q);
        wait_conn(&q, &sock, 0, 1, "idle: open");
        wait_closed(&mut c, WITHIN);
        wait_conn(&q, &sock, 0, 0, "after the idle timeout");
        wait_end(&q, "idle_timeout");
    }
    {
        let h = Holder::start();
        let (q, sock) = start_ctl(&["--fin-timeout", "1s"], &[spec(h.addr())]);
        let base = h.accepted.load(std::sync::atomic::Ordering::SeqCst);
        let mut c = connect(q.addr());
        wait_accepted(&h, base + 1);
        wait_conn(&q, &sock, 0, 1, "server reset: open");
        let server_side = h.conns.lock().unwrap().pop().unwrap();
        reset(server_side);
        wait_closed(&mut c, WITHIN);
        wait_conn(&q, &sock, 0, 0, "after a server reset");
        wait_end(&q, "server_reset");

        // Half-closed by the client, the server never answers: the FIN timeout.
        let c = connect(q.addr());
        wait_accepted(&h, base + 2);
        c.shutdown(Shutdown::Write).unwrap();
        wait_conn(&q, &sock, 0, 1, "fin: half-closed");
        wait_conn(&q, &sock, 0, 0, "after the FIN timeout");
        wait_end(&q, "fin_timeout");

        // Cut by the control command.
        let _c = connect(q.addr());
        wait_accepted(&h, base + 3);
        wait_conn(&q, &sock, 0, 1, "close N: open");
        let listing = ctl(&sock, "connections");
        let id = listing
            .lines()
            .find(|l| l.contains(&h.addr().to_string()))
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or_else(|| panic!("no session in {listing:?}"))
            .to_string();
        ctl_ok(&sock, &format!("close {id}"));
        wait_conn(&q, &sock, 0, 0, "after close N");
        wait_end(&q, "closed");
    }
}

#[test]
fn connect_timeout_and_idle_timeout_both_fire_from_the_one_session_deadline() {
    let Some(hole) = BlackHole::start() else {
        eprintln!("no black hole on this kernel: test skipped");
        return;
    };
    let e = echo();
    let emergency = e.addr().to_string();
    let (q, sock) = start_ctl(
        &[
            "-t",
            "1s",
            "-b",
            "10ms",
            "--idle-timeout",
            "1s",
            "-e",
            &emergency,
        ],
        &[spec(hole.addr())],
    );
    wait_up(&sock, 0);
    let started = Instant::now();
    let mut c = connect(q.addr());
    // The connect to the silent server times out (the first deadline), the session goes on to
    // the emergency server and echoes...
    echo_roundtrip(&mut c, b"late\n");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "answered after {:?}, before the connect timeout",
        started.elapsed()
    );
    assert_eq!(
        conn(&sock, 0),
        0,
        "the silent server still counts the session"
    );
    assert!(failures(&sock, 0) >= 1);
    // ...then falls idle, and the same deadline, re-armed, ends it.
    wait_closed(&mut c, WITHIN);
    let line = wait_end(&q, "idle_timeout");
    assert_eq!(line.server, e.addr().to_string(), "{}", line.raw);
    assert!(seconds(&line) >= 1.8, "both timeouts in {}", line.raw);
}

#[test]
fn idle_timeout_counts_from_the_last_traffic_not_from_the_first_deadline() {
    let e = echo();
    let (q, _sock) = start_ctl(&["--idle-timeout", "2s"], &[spec(e.addr())]);
    let mut c = connect(q.addr());
    // Traffic every 0.5 s for 3 s: past the first idle deadline, the session is still open.
    for i in 0..6 {
        echo_roundtrip(&mut c, format!("tick {i}\n").as_bytes());
        thread::sleep(Duration::from_millis(500));
    }
    echo_roundtrip(&mut c, b"still here\n");
    wait_closed(&mut c, WITHIN);
    let line = wait_end(&q, "idle_timeout");
    assert!(seconds(&line) >= 4.5, "idle closed too early: {}", line.raw);
}

/// docs/design.md#a-bug-ends-one-session: a panic in one session's code (injected with
/// `QUILL_FAULT_PANIC_TARGET` once the session holds a server connection, its buffers and a lease)
/// resets that client alone, twice over, on a one-worker Quill: a kept-alive client and a download
/// in progress on the same worker go on, new clients are served, the server's session count comes
/// back to 0 (no lease kept), the panics are logged with a backtrace and counted, and the process
/// lives.
#[test]
fn a_panicking_session_is_reset_and_every_other_session_goes_on() {
    let gate = Gate::new();
    let half = 256 * 1024;
    let body = body_pattern(2 * half);
    let (g, b) = (gate.clone(), body.clone());
    let backend = Backend::start(move |r| {
        if r.target != "/stream" {
            return vec![Step::Send(echo_response(r))];
        }
        let mut first =
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", b.len()).into_bytes();
        first.extend_from_slice(&b[..half]);
        vec![
            Step::Send(first),
            Step::Wait(g.clone()),
            Step::Send(b[half..].to_vec()),
        ]
    });
    let dir = scratch_dir();
    let sock = dir.path().join("ctl.sock");
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let port = free_port();
    let args: Vec<String> = [
        "QUILL_FAULT_PANIC_TARGET=/boom",
        BIN,
        "-H",
        "-r",
        "--workers",
        "1",
        "-C",
        &sock.display().to_string(),
        "--admin",
        &admin.to_string(),
        &format!("127.0.0.1:{port}"),
        &backend.addr().to_string(),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let mut q = QuillProcess::spawn_in_cmd("/usr/bin/env", dir, args, port);
    let (probe, _) = q.wait_ready_tcp(q.addr()).unwrap();
    drop(probe);
    wait_ctl(&q, &sock);

    let mut kept = Client::connect(q.addr());
    assert_eq!(kept.roundtrip(&get("/first")).status, 200);
    let mut download = Client::connect(q.addr());
    download.send(&get("/stream"));
    let started = download.read_raw(half, WITHIN);
    assert!(started.len() >= half, "the download's first half arrives");

    for round in 1..=2u64 {
        let mut doomed = Client::connect(q.addr());
        doomed.send(&get("/boom"));
        let got = match doomed.expect_closed(WITHIN) {
            Ok(bytes) | Err(bytes) => bytes,
        };
        assert!(
            got.is_empty(),
            "round {round}: the panicking session answered {:?}",
            String::from_utf8_lossy(&got)
        );
        assert_eq!(
            kept.roundtrip(&get(&format!("/kept-{round}"))).status,
            200,
            "round {round}: the kept-alive client goes on after the panic\n{}",
            q.stderr()
        );
        let mut fresh = Client::connect(q.addr());
        assert_eq!(fresh.roundtrip(&get("/fresh")).status, 200);
        assert_eq!(
            metrics(admin).value("quill_session_panics_total", &[]),
            round as f64,
            "round {round}"
        );
    }
    gate.open_once();
    let at = started
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("the download's head")
        + 4;
    let rest = download.read_raw(at + 2 * half - started.len(), WITHIN);
    let mut whole = started;
    whole.extend_from_slice(&rest);
    assert_same_bytes(&whole[at..], &body, "the download across two panics");
    drop(kept);
    drop(download);
    wait_conn(
        &q,
        &sock,
        0,
        0,
        "every lease given back, the panicked ones too",
    );
    assert_eq!(
        metrics(admin).value("quill_sessions_ended_total", &[("reason", "panic")]),
        2.0
    );
    let stderr = q.stderr();
    assert_eq!(
        stderr.matches("panicked; it is reset").count(),
        2,
        "each panic logged once:\n{stderr}"
    );
    assert!(
        stderr.contains("fault injected by QUILL_FAULT_PANIC_TARGET")
            && stderr.contains("backtrace:"),
        "the panic's message and backtrace are logged:\n{stderr}"
    );
    assert!(q.try_exit().is_none(), "Quill is still running:\n{stderr}");
}
