//! Accepting through epoll and through io_uring (`accept`): the same proxying either way, the
//! fallback to epoll when the kernel refuses io_uring, no client lost across reloads (one removing
//! a listener) or a graceful stop with the ring's multishot accepts, a burst spread over the
//! workers, and a burst of 2,000 clients all served.

use crate::reload::{listener_toml, request, start_config, write_config, Hammer};
use crate::support;
use crate::workers::burst_is_spread_over_two_workers;

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};
use support::*;

/// How many io_uring instances process `pid` holds (one per worker on the io_uring path).
fn rings_of(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| fs::read_link(e.unwrap().path()).ok())
        .filter(|target| target.to_string_lossy() == "anon_inode:[io_uring]")
        .count()
}

/// `-H --workers 2 --accept MODE` in front of `server`, ready and settled.
fn start_http(mode: &str, server: &DemoServer) -> QuillProcess {
    Quill::start(
        &["-H", "--workers", "2", "--accept", mode],
        &[spec(server.addr())],
    )
}

#[test]
fn epoll_and_io_uring_accept_proxy_the_same_http_requests() {
    let a = http("a");
    // `auto` is io_uring where the kernel allows it, as here.
    for (mode, rings) in [("epoll", 0), ("io_uring", 2), ("auto", 2)] {
        let q = start_http(mode, &a);
        assert_eq!(rings_of(q.pid), rings, "--accept {mode}");
        for i in 0..100 {
            let got = request(q.addr());
            assert_eq!(got.as_deref(), Ok("a"), "--accept {mode}, request {i}");
        }
        assert!(
            !q.stderr().contains("io_uring unavailable"),
            "{}",
            q.stderr()
        );
    }
}

/// Starts quill with `args` and a listener on a free port, the kernel's io_uring refused to it;
/// with `ready`, waits until it accepts (a few attempts, as a port may be taken meanwhile).
fn spawn_refused(opts: &[&str], server: &str, ready: bool) -> QuillProcess {
    let mut last = String::new();
    for _attempt in 0..5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let mut all = vec!["QUILL_TEST_IO_URING_REFUSED=1".to_string(), BIN.to_string()];
        all.extend(opts.iter().map(|a| a.to_string()));
        all.push(format!("127.0.0.1:{port}"));
        all.push(server.to_string());
        let mut q = QuillProcess::spawn_in_cmd("env", scratch_dir(), all, port);
        if !ready {
            return q;
        }
        match q.wait_ready_tcp(q.addr()) {
            Ok(_) => return q,
            Err(e) => last = e,
        }
    }
    panic!("quill did not start: {last}");
}

#[test]
fn accept_auto_falls_back_to_epoll_when_io_uring_is_refused_and_says_so_once() {
    let a = http("a");
    let q = spawn_refused(
        &["-H", "--workers", "2", "--accept", "auto"],
        &spec(a.addr()),
        true,
    );
    for i in 0..20 {
        assert_eq!(request(q.addr()).as_deref(), Ok("a"), "request {i}");
    }
    assert_eq!(rings_of(q.pid), 0);
    let said = q.stderr().matches("io_uring unavailable").count();
    assert_eq!(said, 1, "{}", q.stderr());

    // Asked for by name, a refused io_uring stops Quill at start, saying why.
    let mut q = spawn_refused(&["--accept", "io_uring"], &spec(a.addr()), false);
    let status = q.wait_exit(Duration::from_secs(10)).expect("quill exits");
    assert!(!status.success());
    assert!(
        q.stderr()
            .contains("accept io_uring: cannot set up an io_uring"),
        "{}",
        q.stderr()
    );
}

#[test]
fn io_uring_accept_loses_no_client_across_reloads_and_a_graceful_stop() {
    let (a, b) = (http("a"), http("b"));
    let spare_port = free_port();
    let spare = listener_toml("spare", spare_port, &[a.addr()], "");
    let mut q = start_config(|port| {
        // Clients accepted at connect (no TCP_DEFER_ACCEPT), so the drain has idle ones to keep.
        "accept = \"io_uring\"\ndrain_grace = \"5s\"\ndefer_accept = false\n".to_string()
            + &listener_toml("web", port, &[a.addr(), b.addr()], "")
            + &spare
    });
    assert_eq!(rings_of(q.pid), 2);
    let spare_addr: std::net::SocketAddr = format!("127.0.0.1:{spare_port}").parse().unwrap();
    assert_eq!(request(spare_addr).as_deref(), Ok("a"));
    let conf = q.path("q.toml");
    let base = fs::read_to_string(&conf).unwrap();
    let hammer = Hammer::start(q.addr(), 4);
    hammer.wait_more(50, Duration::from_secs(10));
    for i in 0..6 {
        let mode = if i % 2 == 0 {
            "leastconn"
        } else {
            "roundrobin"
        };
        write_config(&conf, &base.replace("roundrobin", mode));
        q.signal("HUP");
        let deadline = Instant::now() + Duration::from_secs(10);
        while q.stderr().matches("SIGHUP: reloaded").count() <= i {
            assert!(Instant::now() < deadline, "{}", q.stderr());
            thread::sleep(Duration::from_millis(10));
        }
        hammer.wait_more(20, Duration::from_secs(10));
    }
    // A listener removed by a reload has its accepts cancelled: its port refuses, the other
    // listener goes on.
    write_config(&conf, &base.replace(&spare, ""));
    q.signal("HUP");
    wait_refused(spare_addr, Duration::from_secs(10));
    hammer.wait_more(20, Duration::from_secs(10));
    let (ok, failures) = hammer.finish();
    assert!(
        failures.is_empty(),
        "{} failed of {ok}: {failures:?}",
        failures.len()
    );

    // Clients connected (accepted by the ring, or still in the listen queue) when SIGTERM comes
    // are each served one request during the drain.
    let mut clients: Vec<TcpStream> = (0..40).map(|_| connect(q.addr())).collect();
    q.signal("TERM");
    assert!(
        q.wait_stderr_contains("stopping: no new sessions", Duration::from_secs(5)),
        "{}",
        q.stderr()
    );
    for (i, c) in clients.iter_mut().enumerate() {
        set_timeouts(c, Duration::from_secs(5));
        c.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        let mut reply = String::new();
        c.read_to_string(&mut reply)
            .unwrap_or_else(|e| panic!("client {i}: {e}\n{}", q.stderr()));
        assert!(reply.starts_with("HTTP/1.1 200"), "client {i}: {reply:?}");
    }
    drop(clients);
    let status = q.wait_exit(Duration::from_secs(10)).expect("quill exits");
    assert!(status.success(), "{}", q.stderr());
}

/// One client process: opens `n` connections to `port` at once, then sends a request on each
/// and reads each reply; prints how many were `200`.
const BURST_CLIENT: &str = r#"
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
socks = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    socks.append(s)
for s in socks:
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
ok = 0
for s in socks:
    reply = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    except OSError as e:
        print("error", e, file=sys.stderr)
    ok += reply.startswith(b"HTTP/1.1 200")
    s.close()
print(ok)
"#;

#[test]
fn a_burst_of_2000_clients_from_4_processes_is_all_served_with_io_uring_accept() {
    const PROCESSES: usize = 4;
    const EACH: usize = 500;
    let a = http("a");
    let q = start_http("io_uring", &a);
    let mut children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new("python3")
                .args(["-c", BURST_CLIENT, &q.port.to_string(), &EACH.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("python3 runs the client")
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut served = 0;
    for i in 0..PROCESSES {
        let status = loop {
            if let Some(status) = children[i].try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                // Each stopped by its pid (`Child::kill`).
                for c in &mut children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                panic!("the clients took over 60 s");
            }
            thread::sleep(Duration::from_millis(20));
        };
        let child = &mut children[i];
        let mut out = String::new();
        let mut err = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert!(status.success(), "client {i}: {err}");
        served += out.trim().parse::<usize>().unwrap();
    }
    assert_eq!(served, PROCESSES * EACH, "{}", q.stderr());
}

#[test]
fn clients_accepted_through_io_uring_are_spread_over_the_workers() {
    // As with epoll (`workers::a_burst_of_clients_is_spread_over_the_workers`): the worker whose
    // ring accepted a burst hands clients to the other one while it holds clearly more.
    burst_is_spread_over_two_workers(&["--accept", "io_uring"], |pid| {
        assert_eq!(rings_of(pid), 2)
    });
}
