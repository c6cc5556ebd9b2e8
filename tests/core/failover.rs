//! Failover: refused and black-holed servers, blacklisting, the emergency server, stubborn mode.
//!
//! These tests keep quill's readiness connection as their first client (instead of closing it), so
//! the first server quill ever tries is tried on behalf of a client the test watches.

use crate::support;

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::thread;
use std::time::{Duration, Instant};
use support::*;

/// Sends `payload` on `s` right away and expects the Greet backend `name` to answer with its name
/// followed by the echoed payload, byte for byte.
fn expect_greet_echo(s: &mut TcpStream, name: &str, payload: &[u8]) {
    write_all(s, payload);
    let mut want = format!("{name}\n").into_bytes();
    want.extend_from_slice(payload);
    let got = read_exact_within(s, want.len(), Duration::from_secs(10));
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
}

#[test]
fn tcp_dead_server_fails_over_to_next_with_client_bytes_intact() {
    let e = greet("e");
    let dead = refused_addr();
    let servers = vec![spec(dead), spec(e.addr())];
    // Round robin over [dead, e]: one of the first two clients is sent to the dead server first.
    let (q, mut c1, _) =
        Quill::start_first(&["-r", "-b", "30", "-t", "1", "--workers", "2"], &servers);
    let p1 = b"first client bytes, sent before any server was chosen\n".to_vec();
    let p2 = b"second client\n".to_vec();
    expect_greet_echo(&mut c1, "e", &p1);
    let mut c2 = connect_port(q.port);
    expect_greet_echo(&mut c2, "e", &p2);
    for c in [&mut c1, &mut c2] {
        c.shutdown(Shutdown::Write).unwrap();
        let rest = read_until_eof(c, Duration::from_secs(5));
        assert!(rest.is_empty(), "unexpected trailing bytes {rest:?}");
    }
    // Each session is logged once, with the server that finally served it.
    let lines = q.wait_log_lines(2, Duration::from_secs(5));
    assert_eq!(lines.len(), 2, "one line per session: {lines:#?}");
    for line in &lines {
        assert_eq!(line.server, e.addr().to_string(), "{line:?}");
        assert_eq!(line.end, "done", "{line:?}");
    }
    let mut ins: Vec<u64> = lines.iter().map(|l| l.bytes_in).collect();
    ins.sort();
    let mut want = vec![p1.len() as u64, p2.len() as u64];
    want.sort();
    assert_eq!(
        ins, want,
        "BYTES_IN of the failed-over sessions: {lines:#?}"
    );
    assert_eq!(
        e.served()
            .connections
            .load(std::sync::atomic::Ordering::SeqCst),
        2
    );
}

#[test]
fn blacklisted_server_is_skipped_until_blacklist_expires() {
    const BLACKLIST: Duration = Duration::from_secs(3);
    let e = greet("e");
    let dead = refused_addr();
    let servers = vec![spec(dead), spec(e.addr())];
    let (q, mut c1, t0) =
        Quill::start_first(&["-r", "-b", "3", "-t", "1", "--workers", "2"], &servers);
    // Among the first two clients one is sent to the dead server, which fails at some time >= t0
    // and is then blacklisted until at least t0 + 3 s.
    expect_greet_echo(&mut c1, "e", b"1\n");
    let mut c2 = connect_port(q.port);
    expect_greet_echo(&mut c2, "e", b"2\n");
    let failed_by = Instant::now();
    drop((c1, c2));

    // The dead server's port starts listening again.
    let back = DemoServer::start(
        &dead.to_string(),
        Behaviour::Greet {
            name: "back".into(),
        },
    )
    .unwrap_or_else(|err| panic!("re-listen on {dead}: {err}"));
    // While blacklisted it gets no connections.
    let window_end = t0 + BLACKLIST - Duration::from_millis(700);
    let mut n = 0;
    while Instant::now() < window_end && n < 100 {
        let (name, _s) = greet_session(q.port);
        assert_eq!(
            name, "e",
            "client {n} during the blacklist period went to the blacklisted server"
        );
        n += 1;
        thread::sleep(Duration::from_millis(50));
    }
    assert!(
        n > 0,
        "quill started too slowly to test the blacklist window"
    );
    assert_eq!(
        back.served()
            .connections
            .load(std::sync::atomic::Ordering::SeqCst),
        0,
        "blacklisted server got connections"
    );

    // After the blacklist expires it is used again.
    let after = failed_by + BLACKLIST + Duration::from_millis(500);
    thread::sleep(after.saturating_duration_since(Instant::now()));
    let mut seen = Vec::new();
    for _ in 0..10 {
        let (name, _s) = greet_session(q.port);
        seen.push(name.clone());
        if name == "back" {
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    assert!(
        seen.iter().any(|n| n == "back"),
        "server not used again after -b expired: {seen:?}"
    );
}

#[test]
fn black_holed_server_costs_first_client_one_connect_timeout_only() {
    let Some(hole) = BlackHole::start() else {
        eprintln!("SKIPPED: cannot make a black-holed server on loopback here (accept-queue trick did not time out)");
        return;
    };
    let e = greet("e");
    let servers = vec![spec(hole.addr()), spec(e.addr())];
    let (q, mut c1, t1) =
        Quill::start_first(&["-r", "-t", "2", "-b", "30", "--workers", "2"], &servers);
    // First two clients: one of them is sent to the black hole first and pays one connect timeout.
    expect_greet_echo(&mut c1, "e", b"c1\n");
    let d1 = t1.elapsed();
    let t2 = Instant::now();
    let mut c2 = connect_port(q.port);
    expect_greet_echo(&mut c2, "e", b"c2\n");
    let d2 = t2.elapsed();
    let (slow, fast) = if d1 > d2 { (d1, d2) } else { (d2, d1) };
    assert!(
        slow >= Duration::from_millis(1500),
        "one of the first two clients should wait out the 2 s connect timeout: {d1:?} {d2:?}"
    );
    assert!(
        slow < Duration::from_secs(8),
        "connect timeout is 2 s: {d1:?} {d2:?}"
    );
    assert!(
        fast < Duration::from_millis(1500),
        "only one client pays the timeout: {d1:?} {d2:?}"
    );
    // Later clients skip the blacklisted black hole: served well under the connect timeout.
    for i in 0..6 {
        let t = Instant::now();
        let mut c = connect_port(q.port);
        expect_greet_echo(&mut c, "e", format!("later {i}\n").as_bytes());
        let d = t.elapsed();
        assert!(
            d < Duration::from_millis(1500),
            "client {i} after the black hole was blacklisted took {d:?}"
        );
    }
    drop(hole);
}

#[test]
fn emergency_server_used_when_all_servers_are_dead() {
    let em = greet("emergency");
    let servers = vec![spec(refused_addr()), spec(refused_addr())];
    let e_addr = em.addr().to_string();
    let (q, mut c1, _) = Quill::start_first(
        &["-r", "-e", &e_addr, "-b", "30", "--workers", "2"],
        &servers,
    );
    expect_greet_echo(
        &mut c1,
        "emergency",
        b"first: all servers fail, then the emergency one\n",
    );
    for i in 0..3 {
        let mut c = connect_port(q.port);
        expect_greet_echo(&mut c, "emergency", format!("later {i}\n").as_bytes());
    }
    c1.shutdown(Shutdown::Write).unwrap();
    read_until_eof(&mut c1, Duration::from_secs(5));
    let line = wait_log_line(&q.log_path(), Duration::from_secs(5), |l| l.bytes_in > 40);
    assert_eq!(
        line.server, e_addr,
        "the session is logged with the emergency server: {line:?}"
    );
}

#[test]
fn stubborn_closes_the_client_instead_of_failing_over() {
    let e = greet("e");
    let servers = vec![spec(refused_addr()), spec(e.addr())];
    let (q, c1, _) = Quill::start_first(&["-s", "-r", "-b", "30", "--workers", "2"], &servers);
    let c2 = connect_port(q.port);
    let mut results = Vec::new();
    for mut c in [c1, c2] {
        let _ = c.write_all(b"hi\n");
        let _ = c.shutdown(Shutdown::Write);
        let (data, _how) = wait_closed(&mut c, Duration::from_secs(5));
        results.push(String::from_utf8_lossy(&data).into_owned());
    }
    results.sort();
    assert_eq!(
        results,
        vec!["".to_string(), "e\nhi\n".to_string()],
        "with -s the client whose first choice (the dead server) fails is closed, the other is served"
    );
    // The failed server is blacklisted: later clients' first choice is the live one.
    for _ in 0..3 {
        let mut c = connect_port(q.port);
        expect_greet_echo(&mut c, "e", b"later\n");
    }
}
