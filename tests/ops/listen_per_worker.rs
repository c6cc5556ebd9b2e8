//! One listening socket per worker (`listen_per_worker`): one SO_REUSEPORT socket per worker for
//! each TCP listener, every one of them served (also by a worker that rests under
//! `concentrate`), a second process still refused the port, and a takeover that keeps every
//! socket and loses no client.

use crate::ctl::ctl_ok;
use crate::reload::{
    listener_toml, request, start_config, start_config_workers, takeover_under_load, write_config,
    Hammer,
};
use crate::support;
use crate::workers::burst_is_spread_over_two_workers;

use std::fs;
use std::path::Path;
use std::time::Duration;
use support::*;

/// How many TCP sockets listen on `port` (IPv4, from /proc/net/tcp).
fn listening_sockets(port: u16) -> usize {
    let table = fs::read_to_string("/proc/net/tcp").unwrap();
    let local = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1].ends_with(&local) && f[3] == "0A"
        })
        .count()
}

#[test]
fn listen_per_worker_binds_one_socket_per_worker_and_serves_every_client() {
    let a = http("a");
    // `concentrate` on (the default); a worker that rests under it is in tests/http/workers.rs.
    for workers in ["2", "3"] {
        let q = Quill::start(
            &["-H", "--workers", workers, "--listen-per-worker"],
            &[spec(a.addr())],
        );
        assert_eq!(
            listening_sockets(q.port),
            workers.parse::<usize>().unwrap(),
            "--workers {workers}"
        );
        // Each connection comes from a new port, hashed to any of the sockets.
        for i in 0..200 {
            let got = request(q.addr());
            assert_eq!(got.as_deref(), Ok("a"), "--workers {workers}, request {i}");
        }
    }
    // The default stays one socket shared by the workers.
    let q = Quill::start(&["-H", "--workers", "2"], &[spec(a.addr())]);
    assert_eq!(listening_sockets(q.port), 1);
}

#[test]
fn listen_per_worker_spreads_a_burst_over_the_workers() {
    burst_is_spread_over_two_workers(&["--listen-per-worker"], |_| {});
}

#[test]
fn listen_per_worker_with_io_uring_accept_serves_every_client() {
    let a = http("a");
    let q = Quill::start(
        &[
            "-H",
            "--workers",
            "2",
            "--listen-per-worker",
            "--accept",
            "io_uring",
        ],
        &[spec(a.addr())],
    );
    assert_eq!(listening_sockets(q.port), 2);
    for i in 0..200 {
        assert_eq!(request(q.addr()).as_deref(), Ok("a"), "request {i}");
    }
}

#[test]
fn listen_per_worker_second_quill_on_the_same_port_exits_1_in_use() {
    // SO_REUSEPORT would let a second process join the group; without `reuseport` Quill first
    // checks that the port is free, in both orders.
    let a = greet("a");
    for (first, second) in [(true, false), (false, true), (true, true)] {
        let flags = |per_worker: bool| {
            let mut f = vec!["--workers", "2"];
            if per_worker {
                f.push("--listen-per-worker");
            }
            f
        };
        let q = Quill::start(&flags(first), &[spec(a.addr())]);
        let listen = format!("127.0.0.1:{}", q.port);
        let server = spec(a.addr());
        let mut args = flags(second);
        args.extend([listen.as_str(), server.as_str()]);
        let (code, err) = run_quill_expect_exit(&args);
        assert_eq!(code, 1, "{first} then {second}: stderr:\n{err}");
        assert!(err.to_lowercase().contains("in use"), "{err}");
        assert_eq!(listening_sockets(q.port), if first { 2 } else { 1 });
    }
}

#[test]
fn listen_per_worker_takeover_under_load_keeps_every_socket_and_fails_no_connection() {
    // The new process receives both sockets of each listener and accepts from both: a socket
    // left behind would reset the clients queued on it when the old process exits.
    takeover_under_load("epoll", "listen_per_worker = true\n", |port| {
        assert_eq!(listening_sockets(port), 2)
    });
}

/// Takes over (`--takeover`) from the process whose configuration is `conf` and control socket
/// `sock`, with `--workers workers`; returns the new process once the old one (`old`) has exited.
fn take_over(old: &mut QuillProcess, conf: &Path, sock: &Path, workers: &str) -> QuillProcess {
    let args: Vec<String> = vec![
        "--config".into(),
        conf.display().to_string(),
        "-C".into(),
        sock.display().to_string(),
        "--workers".into(),
        workers.into(),
        "--takeover".into(),
        sock.display().to_string(),
    ];
    let new = QuillProcess::spawn_in(scratch_dir(), args, old.port);
    assert!(
        new.wait_stderr_contains("took over", Duration::from_secs(10)),
        "new:\n{}\nold:\n{}",
        new.stderr(),
        old.stderr()
    );
    let st = old
        .wait_exit(Duration::from_secs(15))
        .expect("the old process exits");
    assert_eq!(st.code(), Some(0), "{}", old.stderr());
    new
}

#[test]
fn listen_per_worker_takeover_into_more_or_fewer_workers_keeps_every_socket() {
    let a = http("a");
    let mut first = start_config(|port| {
        "listen_per_worker = true\n".to_string() + &listener_toml("web", port, &[a.addr()], "")
    });
    let (conf, sock) = (first.path("q.toml"), first.path("c.sock"));
    assert_eq!(listening_sockets(first.port), 2);
    let hammer = Hammer::start(first.addr(), 4);
    hammer.wait_more(50, Duration::from_secs(10));
    // Three workers: the two sockets handed over and a third bound beside them.
    let mut second = take_over(&mut first, &conf, &sock, "3");
    assert_eq!(listening_sockets(second.port), 3);
    hammer.wait_more(50, Duration::from_secs(10));
    // One worker: it accepts from all three, none is closed.
    let third = take_over(&mut second, &conf, &sock, "1");
    assert_eq!(listening_sockets(third.port), 3);
    hammer.wait_more(50, Duration::from_secs(10));
    let (ok, failures) = hammer.finish();
    assert!(
        failures.is_empty(),
        "{} failed of {ok}: {failures:?}",
        failures.len()
    );
    for i in 0..100 {
        assert_eq!(request(third.addr()).as_deref(), Ok("a"), "request {i}");
    }
}

#[test]
fn takeover_from_one_shared_socket_keeps_it_alone_with_listen_per_worker() {
    // The socket handed over has no SO_REUSEPORT: nothing can be bound beside it, so the new
    // process accepts from it alone, as the old one did (a restart changes it).
    let a = http("a");
    let mut first = start_config(|port| listener_toml("web", port, &[a.addr()], ""));
    let (conf, sock) = (first.path("q.toml"), first.path("c.sock"));
    let body = fs::read_to_string(&conf).unwrap();
    write_config(&conf, &format!("listen_per_worker = true\n{body}"));
    let second = take_over(&mut first, &conf, &sock, "2");
    assert_eq!(listening_sockets(second.port), 1);
    for i in 0..100 {
        assert_eq!(request(second.addr()).as_deref(), Ok("a"), "request {i}");
    }
}

/// Starts `workers` workers with `listen_per_worker` and one listener "web", rewrites the
/// configuration with `edit`, takes over with as many workers, and checks the new process
/// listens on every socket of the old one and serves; returns it.
fn per_worker_takeover(workers: usize, edit: impl Fn(&str) -> String) -> QuillProcess {
    let a = http("a");
    let n = workers.to_string();
    let mut first = start_config_workers(&n, |port| {
        "listen_per_worker = true\n".to_string() + &listener_toml("web", port, &[a.addr()], "")
    });
    let (conf, sock) = (first.path("q.toml"), first.path("c.sock"));
    assert_eq!(listening_sockets(first.port), workers);
    write_config(&conf, &edit(&fs::read_to_string(&conf).unwrap()));
    let second = take_over(&mut first, &conf, &sock, &n);
    assert_eq!(listening_sockets(second.port), workers);
    for i in 0..50 {
        assert_eq!(request(second.addr()).as_deref(), Ok("a"), "request {i}");
    }
    second
}

#[test]
fn listen_per_worker_takeover_of_a_renamed_listener_keeps_every_socket() {
    // The new configuration names the listener otherwise: its sockets are found by their
    // address, all of them (closing one would reset the clients queued on it).
    let second = per_worker_takeover(4, |body| body.replace("name = \"web\"", "name = \"www\""));
    assert!(
        !second.stderr().contains("matches no listener"),
        "{}",
        second.stderr()
    );
}

#[test]
fn listen_per_worker_takeover_hands_over_more_than_sixty_four_sockets() {
    // 70 workers: 70 sockets of the listener and the control socket in one message.
    let second = per_worker_takeover(70, str::to_string);
    assert!(
        second.stderr().contains("inherited 71"),
        "{}",
        second.stderr()
    );
}

#[test]
fn listen_per_worker_a_listener_added_by_reload_is_bound_as_the_process_started() {
    // `workers` and `listen_per_worker` take effect at a start: a reload that turns the setting
    // on, with more workers, binds its new listener as the running ones (one shared socket), and
    // a process started with it binds a new listener's sockets for its own two workers.
    let a = http("a");
    for (at_start, sockets) in [("", 1), ("listen_per_worker = true\n", 2)] {
        let q = start_config(|port| {
            at_start.to_string() + &listener_toml("web", port, &[a.addr()], "")
        });
        let (conf, sock) = (q.path("q.toml"), q.path("c.sock"));
        let body = fs::read_to_string(&conf).unwrap();
        let extra_port = free_port();
        let next = format!(
            "workers = 5\nlisten_per_worker = true\n{}{}",
            body.replace("listen_per_worker = true\n", ""),
            listener_toml("more", extra_port, &[a.addr()], "")
        );
        write_config(&conf, &next);
        let out = ctl_ok(&sock, "reload");
        assert!(out.contains("listener 'more'"), "{out}");
        assert_eq!(
            listening_sockets(extra_port),
            sockets,
            "started with {at_start:?}"
        );
        let extra = std::net::SocketAddr::from(([127, 0, 0, 1], extra_port));
        for i in 0..20 {
            assert_eq!(request(extra).as_deref(), Ok("a"), "request {i}");
        }
    }
}

#[test]
fn listen_per_worker_clients_queued_when_a_sigterm_comes_are_all_served() {
    // Clients that connected while the process was stopped wait in the queues of both workers'
    // sockets when the drain begins; each is taken and answered before the sockets close (by
    // its own worker's last pass, or by the last worker to drain, which looks at every socket).
    let a = http("a");
    let mut q = Quill::start(
        &["-H", "--workers", "2", "--listen-per-worker"],
        &[spec(a.addr())],
    );
    assert_eq!(listening_sockets(q.port), 2);
    q.signal("STOP");
    // Each connection comes from a new port, hashed to either socket (all 24 on one: 2^-23).
    let mut clients = Vec::new();
    for i in 0..24 {
        let mut c = std::net::TcpStream::connect_timeout(&q.addr(), Duration::from_secs(2))
            .unwrap_or_else(|e| panic!("client {i}: {e}"));
        std::io::Write::write_all(&mut c, b"GET / HTTP/1.0\r\n\r\n").unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        clients.push(c);
    }
    q.signal("TERM");
    q.signal("CONT");
    for (i, mut c) in clients.into_iter().enumerate() {
        let mut reply = Vec::new();
        let read = std::io::Read::read_to_end(&mut c, &mut reply);
        let text = String::from_utf8_lossy(&reply);
        assert!(
            read.is_ok() && text.starts_with("HTTP/1.1 200") && text.trim_end().ends_with('a'),
            "client {i}, queued at the SIGTERM, got {read:?} {text:?}\n{}",
            q.stderr()
        );
    }
    let st = q
        .wait_exit(Duration::from_secs(20))
        .expect("quill exits after the drain");
    assert_eq!(st.code(), Some(0), "{}", q.stderr());
}
