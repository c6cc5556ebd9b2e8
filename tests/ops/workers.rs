//! Worker threads and SO_REUSEPORT: many concurrent sessions, two processes on one port.

use crate::ctl;
use crate::support;

use ctl::*;
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};
use support::*;

/// Open sessions per worker, from `connections` (a session id's remainder by the worker count is
/// its worker's index).
pub(super) fn sessions_per_worker(sock: &std::path::Path, workers: u64) -> Vec<usize> {
    let mut per = vec![0; workers as usize];
    for line in ctl(sock, "connections").lines() {
        let id: u64 = line.split_whitespace().next().unwrap().parse().unwrap();
        per[(id % workers) as usize] += 1;
    }
    per
}

#[test]
fn a_burst_of_clients_is_spread_over_the_workers() {
    // The kernel wakes the first waiting worker for each connect of a burst; the worker that
    // accepts hands a client to the other one while it holds clearly more (a few plus an eighth).
    burst_is_spread_over_two_workers(&[], |_| {});
}

/// 40 clients connected at once through Quill with two workers (and `extra` flags; `started` sees
/// the process first) end up about half on each worker, and every one is served.
pub(crate) fn burst_is_spread_over_two_workers(extra: &[&str], started: impl Fn(u32)) {
    const N: usize = 40;
    let e = echo();
    let mut flags = vec!["--workers", "2", "--no-concentrate"];
    flags.extend_from_slice(extra);
    let (q, sock) = start_ctl(&flags, &[spec(e.addr())]);
    started(q.pid);
    let mut conns: Vec<TcpStream> = (0..N).map(|_| connect_port(q.port)).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    let per = loop {
        let per = sessions_per_worker(&sock, 2);
        if per.iter().sum::<usize>() == N {
            break per;
        }
        assert!(
            Instant::now() < deadline,
            "{per:?} sessions listed, not {N}:\n{}",
            q.stderr()
        );
        thread::sleep(Duration::from_millis(20));
    };
    assert!(
        per.iter().all(|&n| n >= N / 2 - N / 8),
        "sessions per worker {per:?}: each should hold about half of {N}"
    );
    // Every client handed over is served like any other.
    for (i, c) in conns.iter_mut().enumerate() {
        let msg = format!("hello {i}\n");
        c.write_all(msg.as_bytes()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut got = vec![0u8; msg.len()];
        std::io::Read::read_exact(c, &mut got).unwrap();
        assert_eq!(got, msg.as_bytes(), "client {i}");
    }
}

#[test]
fn workers_serve_200_concurrent_echo_sessions_byte_exact() {
    const N: usize = 200;
    const SIZE: usize = 64 * 1024;
    let e = echo();
    let q = Quill::start(&["--workers", "2"], &[spec(e.addr())]);
    // Open all sessions first, so they are all open at the same time.
    let conns: Vec<TcpStream> = (0..N).map(|_| connect_port(q.port)).collect();
    let handles: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, mut s)| {
            thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    let data = pattern_bytes(i as u64 * 7, SIZE);
                    let mut w = s.try_clone().unwrap();
                    let d2 = data.clone();
                    let writer = thread::Builder::new()
                        .stack_size(128 * 1024)
                        .spawn(move || {
                            w.write_all(&d2).unwrap();
                            w.shutdown(Shutdown::Write).unwrap();
                        })
                        .unwrap();
                    let got = read_until_eof(&mut s, Duration::from_secs(60));
                    writer.join().unwrap();
                    got == data
                })
                .unwrap()
        })
        .collect();
    let ok = handles
        .into_iter()
        .map(|h| h.join().unwrap_or(false))
        .filter(|&b| b)
        .count();
    assert_eq!(ok, N, "sessions with byte-exact echo");
    // Every session logged with the right byte counts.
    let lines = q.wait_log_lines(q.probes + N, Duration::from_secs(10));
    let full: Vec<_> = lines.iter().filter(|l| l.bytes_in == SIZE as u64).collect();
    assert_eq!(full.len(), N, "access log lines with BYTES_IN {SIZE}");
    assert!(
        full.iter()
            .all(|l| l.bytes_out == SIZE as u64 && l.end == "done"),
        "{full:#?}"
    );
}

#[test]
fn reuseport_lets_two_quill_processes_share_a_port() {
    let a = greet("a");
    let b = greet("b");
    let (sa, sb) = (spec(a.addr()), spec(b.addr()));
    let first = Quill::start(&["--reuseport", "--workers", "2"], &[sa]);
    let port = first.port;
    // Second process on the same port: must come up and stay up.
    let dir = scratch_dir();
    let args = pen_args(dir.path(), port, &["--reuseport", "--workers", "2"], &[sb]);
    let mut second = QuillProcess::spawn_in(dir, args, port);
    assert!(
        second.wait_stderr_contains("ready", Duration::from_secs(10)),
        "second quill with --reuseport did not become ready:\n{}",
        second.stderr()
    );
    assert!(
        second.try_exit().is_none(),
        "second quill exited:\n{}",
        second.stderr()
    );
    // Kill the first: the port is still served, by the second (backend "b").
    drop(first);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let (mut s, _) = second
        .wait_ready_tcp(addr)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        read_line(&mut s),
        "b",
        "the second process serves the shared port"
    );
    echo_roundtrip(&mut s, b"shared\n");
}

#[test]
fn second_quill_on_same_port_without_reuseport_exits_1_in_use() {
    let a = greet("a");
    let first = Quill::start(&["--workers", "2"], &[spec(a.addr())]);
    let listen = format!("127.0.0.1:{}", first.port);
    let server = spec(a.addr());
    let (code, err) = run_quill_expect_exit(&["--workers", "2", &listen, &server]);
    assert_eq!(
        code, 1,
        "second bind on a used port exits 1; stderr:\n{err}"
    );
    assert!(
        err.to_lowercase().contains("in use"),
        "stderr should say 'in use':\n{err}"
    );
    assert!(
        first_line(&err).contains(&listen),
        "first line should name {listen}:\n{err}"
    );
    // The first one is unaffected.
    let (name, mut s) = greet_session(first.port);
    assert_eq!(name, "a");
    echo_roundtrip(&mut s, b"ok\n");
}
