//! Forwarding: byte-exact data both ways, half-close, fin/idle timeouts, -x, tcp_fastclose, IPv6,
//! Unix sockets, abusive clients.

use crate::support;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};
use support::*;

#[test]
fn forwarding_is_byte_exact_both_ways_5mib() {
    let e = echo();
    let q = Quill::start(&["--workers", "2"], &[spec(e.addr())]);
    let mut s = connect_port(q.port);
    let data = pattern_bytes(17, 5 << 20);
    let got = send_and_collect(&mut s, data.clone(), Duration::from_secs(60));
    assert_same_bytes(&got, &data, "5 MiB echoed through quill");
    let line = wait_log_line(&q.log_path(), Duration::from_secs(5), |l| l.bytes_in > 0);
    assert_eq!(line.bytes_in, 5 << 20, "{line:?}");
    assert_eq!(line.bytes_out, 5 << 20, "{line:?}");
    assert_eq!(line.end, "done", "{line:?}");
}

/// Reads one HTTP response (head + Content-Length body) from `s`. Returns (head, body).
fn read_http_response(s: &mut TcpStream) -> (String, Vec<u8>) {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert!(head.len() < 16 * 1024, "response head too long");
        let n = s.read(&mut b).expect("read response head");
        assert_eq!(
            n,
            1,
            "EOF inside response head: {:?}",
            String::from_utf8_lossy(&head)
        );
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .expect("Content-Length");
    let body = read_exact_within(s, len, Duration::from_secs(60));
    (head, body)
}

#[test]
fn large_http_responses_are_byte_exact() {
    let h = http("web");
    let q = Quill::start(&["--workers", "2"], &[spec(h.addr())]);
    let mut s = connect_port(q.port);
    // Keep-alive: several responses on one connection.
    for n in [1usize, 65_537, 1_000_003, 10 << 20] {
        write_all(
            &mut s,
            format!("GET /bytes/{n} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes(),
        );
        let (head, body) = read_http_response(&mut s);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_same_bytes(&body, &pattern_bytes(0, n), &format!("GET /bytes/{n}"));
    }
    // Last one with Connection: close, read to EOF.
    let n = 3_000_001;
    write_all(
        &mut s,
        format!("GET /bytes/{n} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    let (head, body) = read_http_response(&mut s);
    assert!(head.contains("Connection: close"), "{head}");
    assert_same_bytes(&body, &pattern_bytes(0, n), "GET with Connection: close");
    s.shutdown(Shutdown::Write).unwrap();
    let rest = read_until_eof(&mut s, Duration::from_secs(10));
    assert!(
        rest.is_empty(),
        "bytes after the last response: {}",
        rest.len()
    );
}

#[test]
fn client_half_close_is_carried_through() {
    let e = echo();
    let q = Quill::start(&["--workers", "2"], &[spec(e.addr())]);
    let mut s = connect_port(q.port);
    let data = pattern_bytes(3, 300_000);
    // The client shuts down its write side right after sending: the echo server only sees EOF
    // after all the data, and still answers all of it; then the client sees EOF.
    let got = send_and_collect(&mut s, data.clone(), Duration::from_secs(30));
    assert_same_bytes(&got, &data, "echo after client half-close");
    let line = wait_log_line(&q.log_path(), Duration::from_secs(5), |l| l.bytes_in > 0);
    assert_eq!(
        (line.bytes_in, line.bytes_out, line.end.as_str()),
        (300_000, 300_000, "done"),
        "{line:?}"
    );
}

#[test]
fn server_half_close_is_carried_through() {
    // A backend that says hello, shuts down its write side, then reads what the client still sends.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        set_timeouts(&c, IO_TIMEOUT);
        c.write_all(b"hello\n").unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        let got = try_read_until_eof(&mut c, Duration::from_secs(10), 1 << 20);
        let _ = tx.send(got.0);
    });
    let (q, mut s, _) = Quill::start_first(&["--workers", "2"], &[spec(addr)]);
    let _ = &q;
    assert_eq!(read_line(&mut s), "hello");
    let mut b = [0u8; 16];
    assert_eq!(
        s.read(&mut b).expect("read EOF"),
        0,
        "server's FIN reaches the client"
    );
    // The other direction still works.
    write_all(&mut s, b"late data from client");
    s.shutdown(Shutdown::Write).unwrap();
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("backend result");
    assert_eq!(
        got, b"late data from client",
        "client bytes after the server's half-close"
    );
}

#[test]
fn fin_timeout_closes_a_stalled_half_closed_session() {
    let hold = Holder::start();
    let q = Quill::start(
        &["--fin-timeout", "1s", "--workers", "2"],
        &[spec(hold.addr())],
    );
    // The readiness probe's backend connection is accepted first (it is not ours).
    hold.wait_count(q.probes, Duration::from_secs(2));
    let before = hold.count();
    let mut s = connect_port(q.port);
    write_all(&mut s, b"x");
    let backend = hold.wait_conn(before, Duration::from_secs(5));
    let _ = backend; // held open, never read, never closed
    s.shutdown(Shutdown::Write).unwrap();
    let t = Instant::now();
    let (data, _how) = wait_closed(&mut s, Duration::from_secs(8));
    let took = t.elapsed();
    assert!(data.is_empty());
    assert!(
        took >= Duration::from_millis(500),
        "a half-closed session is not cut at once (closed after {took:?})"
    );
    assert!(
        took < Duration::from_secs(6),
        "fin-timeout 1s: closed after {took:?}"
    );
    let line = wait_log_line(&q.log_path(), Duration::from_secs(5), |l| l.bytes_in == 1);
    assert_eq!(line.end, "fin_timeout", "{line:?}");
    assert_eq!(line.server, hold.addr().to_string(), "{line:?}");
}

#[test]
fn idle_timeout_closes_a_silent_session() {
    let g = greet("g");
    let q = Quill::start(
        &["--idle-timeout", "1s", "--workers", "2"],
        &[spec(g.addr())],
    );
    let before = q.log_lines().len();
    let (name, mut s) = greet_session(q.port);
    assert_eq!(name, "g");
    let t = Instant::now();
    let (data, _how) = wait_closed(&mut s, Duration::from_secs(8));
    let took = t.elapsed();
    assert!(data.is_empty(), "{data:?}");
    assert!(
        took >= Duration::from_millis(500),
        "closed after {took:?}, before the idle timeout"
    );
    assert!(
        took < Duration::from_secs(6),
        "idle timeout 1s: closed after {took:?}"
    );
    let line = q.wait_line_at(before, Duration::from_secs(5));
    assert_eq!((line.bytes_in, line.bytes_out), (0, 2), "{line:?}");
    assert_eq!(line.end, "idle_timeout", "{line:?}");
}

#[test]
fn idle_timeout_spares_active_sessions() {
    let g = greet("g");
    let q = Quill::start(
        &["--idle-timeout", "1s", "--workers", "2"],
        &[spec(g.addr())],
    );
    let (_, mut s) = greet_session(q.port);
    let t = Instant::now();
    let mut i = 0;
    while t.elapsed() < Duration::from_millis(2600) && i < 40 {
        echo_roundtrip(&mut s, format!("tick {i}\n").as_bytes());
        thread::sleep(Duration::from_millis(300));
        i += 1;
    }
    assert!(
        still_open(&mut s, Duration::from_millis(100)),
        "an active session must not be idle-closed"
    );
}

#[test]
fn max_connections_closes_extra_clients_at_once() {
    let g = greet("g");
    let q = Quill::start(&["-x", "2", "--workers", "2"], &[spec(g.addr())]);
    let (a, mut sa) = greet_session(q.port);
    let (b, mut sb) = greet_session(q.port);
    assert_eq!((a.as_str(), b.as_str()), ("g", "g"));
    let mut sc = connect_port(q.port);
    let t = Instant::now();
    let (data, _how) = wait_closed(&mut sc, Duration::from_secs(3));
    assert!(data.is_empty(), "the third client gets nothing: {data:?}");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "the third client is closed at once ({:?})",
        t.elapsed()
    );
    // The first two keep working.
    echo_roundtrip(&mut sa, b"a still works\n");
    echo_roundtrip(&mut sb, b"b still works\n");
    let refused = wait_log_line(&q.log_path(), Duration::from_secs(5), |l| {
        l.end == "refused"
    });
    assert_eq!(refused.server, "-", "{refused:?}");
    // Free a slot: a new client is served again.
    sa.shutdown(Shutdown::Write).unwrap();
    read_until_eof(&mut sa, Duration::from_secs(5));
    drop(sa);
    wait_log_line(&q.log_path(), Duration::from_secs(5), |l| {
        l.bytes_in == 14 && l.end == "done"
    });
    let (d, mut sd) = greet_session(q.port);
    assert_eq!(d, "g");
    echo_roundtrip(&mut sd, b"d\n");
}

#[test]
fn tcp_fastclose_both_closes_session_on_client_eof() {
    let hold = Holder::start();
    let q = Quill::start(
        &[
            "-O",
            "tcp_fastclose both",
            "--fin-timeout",
            "30s",
            "--workers",
            "2",
        ],
        &[spec(hold.addr())],
    );
    // The readiness probe's backend connection is accepted first (it is not ours).
    hold.wait_count(q.probes, Duration::from_secs(2));
    let before = hold.count();
    let mut s = connect_port(q.port);
    write_all(&mut s, b"x");
    let mut backend = hold.wait_conn(before, Duration::from_secs(5));
    // The byte has reached the backend before the client sends its FIN.
    assert_eq!(
        read_exact_within(&mut backend, 1, Duration::from_secs(5)),
        b"x"
    );
    s.shutdown(Shutdown::Write).unwrap();
    let t = Instant::now();
    let (data, _) = wait_closed(&mut s, Duration::from_secs(5));
    assert!(data.is_empty());
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "fastclose: client EOF ends the session at once ({:?})",
        t.elapsed()
    );
    // The backend side is closed too (without fastclose it would stay half-open for --fin-timeout).
    let (got, _) = wait_closed(&mut backend, Duration::from_secs(5));
    assert!(got.is_empty(), "{got:?}");
    let line = wait_log_line(&q.log_path(), Duration::from_secs(5), |l| l.bytes_in == 1);
    assert_eq!(line.end, "fastclose", "{line:?}");
}

#[test]
fn tcp_fastclose_still_delivers_bytes_sent_just_before_eof() {
    let hold = Holder::start();
    let q = Quill::start(
        &[
            "-O",
            "tcp_fastclose both",
            "--fin-timeout",
            "30s",
            "--workers",
            "2",
        ],
        &[spec(hold.addr())],
    );
    for i in 0..5 {
        // The readiness probe's backend connection is accepted first (it is not ours).
        hold.wait_count(q.probes, Duration::from_secs(2));
        let before = hold.count();
        let mut s = connect_port(q.port);
        let msg = format!("last words {i}");
        write_all(&mut s, msg.as_bytes());
        s.shutdown(Shutdown::Write).unwrap();
        let mut backend = hold.wait_conn(before, Duration::from_secs(5));
        let (got, how) = wait_closed(&mut backend, Duration::from_secs(5));
        assert_eq!(
            String::from_utf8_lossy(&got),
            msg,
            "session {i}: client bytes sent before its FIN must reach the server before fastclose closes it (backend saw {how:?})"
        );
        let _ = wait_closed(&mut s, Duration::from_secs(5));
    }
    drop(q);
}

#[test]
fn tcp_fastclose_both_closes_session_on_server_eof() {
    // The backend greets, then sends FIN but keeps its read side open.
    let hold = Holder::start_with(Some(b"bye\n".to_vec()), true);
    let q = Quill::start(
        &[
            "-O",
            "tcp_fastclose both",
            "--fin-timeout",
            "30s",
            "--workers",
            "2",
        ],
        &[spec(hold.addr())],
    );
    // The readiness probe's backend connection is accepted first (it is not ours).
    hold.wait_count(q.probes, Duration::from_secs(2));
    let before = hold.count();
    let lines_before = q.log_lines().len();
    let mut s = connect_port(q.port);
    assert_eq!(read_line(&mut s), "bye");
    let mut backend = hold.wait_conn(before, Duration::from_secs(5));
    let (data, _) = wait_closed(&mut s, Duration::from_secs(5));
    assert!(data.is_empty());
    // Although the client never half-closed, quill closed the backend connection completely.
    let t = Instant::now();
    let (got, _) = wait_closed(&mut backend, Duration::from_secs(5));
    assert!(got.is_empty());
    assert!(t.elapsed() < Duration::from_secs(3));
    let line = q.wait_line_at(lines_before, Duration::from_secs(5));
    assert_eq!(line.bytes_out, 4, "{line:?}");
    assert_eq!(line.end, "fastclose", "{line:?}");
}

#[test]
fn ipv6_listen_and_server_on_loopback() {
    let Ok(e) = DemoServer::start("[::1]:0", Behaviour::Echo) else {
        eprintln!("SKIPPED: ::1 is not available here");
        return;
    };
    let server = spec(e.addr());
    let (q, mut s, _) = Quill::spawn_first_at(IpAddr::V6(Ipv6Addr::LOCALHOST), |dir, port| {
        vec![
            "-l".into(),
            dir.join("access.log").display().to_string(),
            format!("[::1]:{port}"),
            server.clone(),
        ]
    });
    assert!(q.addr().is_ipv6());
    let data = pattern_bytes(0, 100_000);
    let got = send_and_collect(&mut s, data.clone(), Duration::from_secs(20));
    assert_same_bytes(&got, &data, "echo over IPv6");
    let line = wait_log_line(&q.log_path(), Duration::from_secs(5), |l| {
        l.bytes_in == 100_000
    });
    assert_eq!(line.client, "::1", "{line:?}");
    assert_eq!(line.server, e.addr().to_string(), "{line:?}");
    assert_eq!(line.end, "done", "{line:?}");
}

#[test]
fn unix_socket_listener_and_unix_socket_server() {
    let dir = scratch_dir();
    let backend_path = dir.path().join("b.sock");
    let listen_path = dir.path().join("q.sock");
    let log = dir.path().join("access.log");
    let backend = UnixEcho::start(&backend_path);
    let args = vec![
        "-l".to_string(),
        log.display().to_string(),
        listen_path.display().to_string(),
        backend_path.display().to_string(),
    ];
    let mut q = QuillProcess::spawn_in(dir, args, 0);
    let mut s: UnixStream = q.wait_ready_unix(&listen_path);
    let meta = std::fs::metadata(&listen_path).expect("listen socket file exists");
    assert!(
        meta.file_type().is_socket(),
        "{} should be a socket",
        listen_path.display()
    );
    let data = pattern_bytes(5, 200_000);
    let mut w = s.try_clone().unwrap();
    let d2 = data.clone();
    let writer = thread::spawn(move || {
        w.write_all(&d2).unwrap();
        w.shutdown(Shutdown::Write).unwrap();
    });
    let got = read_until_eof(&mut s, Duration::from_secs(20));
    writer.join().unwrap();
    assert_same_bytes(
        &got,
        &data,
        "echo through a Unix listener and a Unix server",
    );
    assert!(backend.accepted.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    let line = wait_log_line(&log, Duration::from_secs(5), |l| l.bytes_in == 200_000);
    assert_eq!(line.server, backend_path.display().to_string(), "{line:?}");
    assert_eq!(line.end, "done", "{line:?}");
    drop(q);
}

#[test]
fn tcp_listener_forwards_to_unix_socket_server() {
    let dir = scratch_dir();
    let backend_path = dir.path().join("e.sock");
    let _backend = UnixEcho::start(&backend_path);
    let q = Quill::start(&["--workers", "2"], &[backend_path.display().to_string()]);
    let mut s = connect_port(q.port);
    let data = pattern_bytes(9, 50_000);
    let got = send_and_collect(&mut s, data.clone(), Duration::from_secs(20));
    assert_same_bytes(&got, &data, "TCP client to a Unix socket server");
}

#[test]
fn abusive_clients_are_survived() {
    let e = echo();
    let mut q = Quill::start(
        &["--workers", "2", "--fin-timeout", "1s"],
        &[spec(e.addr())],
    );
    let addr: SocketAddr = q.addr();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            thread::spawn(move || {
                for i in 0..50usize {
                    let Ok(c) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
                        continue;
                    };
                    set_timeouts(&c, Duration::from_secs(2));
                    let mut c = c;
                    let garbage: Vec<u8> = (0..(1 + (i * 7919 + t * 104_729) % 70_000))
                        .map(|k| (k * 31 + i) as u8)
                        .collect();
                    match (i + t) % 6 {
                        0 => {} // connect, close at once
                        1 => {
                            let _ = c.write_all(&garbage);
                        }
                        2 => {
                            let _ = socket2::SockRef::from(&c).set_linger(Some(Duration::ZERO));
                            // RST
                        }
                        3 => {
                            let _ = c.write_all(&garbage);
                            let _ = socket2::SockRef::from(&c).set_linger(Some(Duration::ZERO));
                        }
                        4 => {
                            let _ = c.write_all(&garbage[..garbage.len().min(100)]);
                            let _ = c.shutdown(Shutdown::Write);
                        }
                        _ => {
                            let _ = c.write_all(b"\x00\xff\r\n\r\nGET / HTTP/1.1\r\n");
                            let mut b = [0u8; 8];
                            let _ = c.read(&mut b);
                            let _ = socket2::SockRef::from(&c).set_linger(Some(Duration::ZERO));
                        }
                    }
                    drop(c);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("abuser thread");
    }
    assert!(
        q.try_exit().is_none(),
        "quill died under abusive clients:\n{}",
        q.stderr()
    );
    // A normal session still works, byte for byte.
    let mut s = connect_port(q.port);
    let data = pattern_bytes(1, 1 << 20);
    let got = send_and_collect(&mut s, data.clone(), Duration::from_secs(30));
    assert_same_bytes(&got, &data, "normal session after 200 abusive ones");
    // Every log line (read_access_log checks the shape) has a documented END word.
    let line = wait_log_line(&q.log_path(), Duration::from_secs(5), |l| {
        l.bytes_in == 1 << 20
    });
    assert_eq!(line.end, "done");
    for l in q.log_lines() {
        assert!(
            END_REASONS.contains(&l.end.as_str()),
            "undocumented END {:?} in {l:?}",
            l.end
        );
    }
    assert!(q.try_exit().is_none(), "quill died:\n{}", q.stderr());
}
