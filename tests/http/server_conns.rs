//! Idle server connections shared between workers (docs/design.md#keep-alive-and-the-idle-pool):
//! each worker keeps its own pool of idle kept-alive server connections, and a worker with none to
//! the server it needs takes one from another worker's pool before it opens a new one. So clients
//! that do not keep their connections alive, spread over two workers, make Quill open about as many
//! server connections as requests are in flight at once, not the sum of each worker's peak. Each
//! test starts the real binary (`--workers 2 -H --admin`) in front of the scripted backend of
//! tests/support/http.rs, which counts the connections it accepts and keeps them alive.

use crate::admin_support;
use crate::ctl;
use crate::http_support;
use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use admin_support::{metrics, start_with_admin, wait_metrics, Metrics};
use http_support::{Backend, BackendOptions, Step};
use support::{Quill, QuillProcess, IO_TIMEOUT};

const WORKERS: usize = 2;

/// Quill with 2 workers and an admin listener, one HTTP listener in front of `server` with the
/// `[listener.http]` lines `http`.
fn start(server: SocketAddr, http: &str) -> (QuillProcess, SocketAddr) {
    start_with_admin(|dir, port, admin| {
        let global = format!("workers = {WORKERS}\nadmin = \"{admin}\"");
        let cfg = dir.join("quill.toml");
        let text = http_support::toml_config(port, &global, http, &[server.to_string()]);
        std::fs::write(&cfg, text).expect("write quill.toml");
        vec!["--config".into(), cfg.display().to_string()]
    })
}

/// A backend answering every request with 200 and a small body, keeping the connection.
fn backend(opts: BackendOptions) -> Backend {
    named("hello", opts)
}

/// A backend answering every request with 200 and the body `name`, keeping the connection.
fn named(name: &'static str, opts: BackendOptions) -> Backend {
    Backend::start_with(opts, move |_| {
        vec![Step::Send(http_support::response(200, "", name.as_bytes()))]
    })
}

/// `clients` threads, each doing `each` requests one after the other, each on a new client
/// connection with `Connection: close` (as `ab` without `-k`), reading each answer to its end.
/// Returns how many answers were 200 with the body "hello".
fn load(proxy: SocketAddr, clients: usize, each: usize) -> usize {
    load_expecting(proxy, clients, each, "hello")
}

/// [`load`], counting the answers whose body is `body`.
fn load_expecting(proxy: SocketAddr, clients: usize, each: usize, body: &'static str) -> usize {
    let started = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            thread::spawn(move || {
                let mut ok = 0;
                for i in 0..each {
                    if started.elapsed() > Duration::from_secs(120) {
                        break;
                    }
                    let Ok(mut s) = TcpStream::connect(proxy) else {
                        continue;
                    };
                    let _ = s.set_read_timeout(Some(IO_TIMEOUT));
                    let _ = s.set_write_timeout(Some(IO_TIMEOUT));
                    let req = format!(
                        "GET /c{c}/r{i} HTTP/1.1\r\nHost: example.test\r\nConnection: close\r\n\r\n"
                    );
                    if s.write_all(req.as_bytes()).is_err() {
                        continue;
                    }
                    let mut answer = Vec::new();
                    let _ = s.read_to_end(&mut answer);
                    if answer.starts_with(b"HTTP/1.1 200 ") && answer.ends_with(body.as_bytes()) {
                        ok += 1;
                    }
                }
                ok
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap_or(0)).sum()
}

fn conns(m: &Metrics, kind: &str) -> u64 {
    m.value("quill_http_server_connections_total", &[("kind", kind)]) as u64
}

#[test]
fn http_workers_take_idle_server_connections_from_each_other() {
    const CLIENTS: usize = 16;
    const EACH: usize = 150;
    let b = backend(BackendOptions::default());
    let (q, admin) = start(b.addr(), "");
    let ok = load(SocketAddr::from(([127, 0, 0, 1], q.port)), CLIENTS, EACH);
    assert_eq!(ok, CLIENTS * EACH, "every request answered 200");
    let total = (CLIENTS * EACH) as u64;
    // The counters are published by each worker once per turn of its loop.
    let m = wait_metrics(admin, "every request counted", |m| {
        conns(m, "opened") + conns(m, "reused") >= total
    });
    let opened = b.accepted();
    let limit = CLIENTS + 2 * WORKERS;
    eprintln!(
        "{CLIENTS} clients x {EACH} requests, {WORKERS} workers: {opened} server connections \
         opened (limit {limit}), {} reused",
        conns(&m, "reused")
    );
    assert!(
        opened <= limit,
        "{opened} server connections opened for {CLIENTS} clients at once on {WORKERS} \
         workers (at most {limit})"
    );
    // A connection taken from another worker's pool counts as reused, never as opened.
    assert_eq!(conns(&m, "opened"), opened as u64, "{}", m.text);
    assert_eq!(
        conns(&m, "opened") + conns(&m, "reused"),
        total,
        "{}",
        m.text
    );
}

#[test]
fn http_idle_server_connections_moved_between_workers_are_closed_when_the_server_closes_them() {
    const CLIENTS: usize = 8;
    const EACH: usize = 60;
    // The backend closes a connection left idle for 300 ms: whichever worker holds it idle
    // then, having taken it from the other or not, sees the close at once and drops it (the
    // idle timeout, a minute, does not come into it).
    let b = backend(BackendOptions {
        idle_close: Some(Duration::from_millis(300)),
        ..BackendOptions::default()
    });
    let (q, admin) = start(b.addr(), "server_idle_timeout = \"60s\"");
    let proxy = SocketAddr::from(([127, 0, 0, 1], q.port));
    let ok = load(proxy, CLIENTS, EACH);
    assert_eq!(ok, CLIENTS * EACH, "every request answered 200");
    let m = wait_metrics(admin, "the idle connections closed", |m| {
        m.value("quill_http_server_idle_connections", &[]) == 0.0
    });
    let before = conns(&m, "opened") + conns(&m, "reused");
    assert_eq!(before, (CLIENTS * EACH) as u64, "{}", m.text);
    // None was lent out dead: a new round is answered on new connections.
    let ok = load(proxy, CLIENTS, 5);
    assert_eq!(
        ok,
        CLIENTS * 5,
        "every request of the second round answered 200"
    );
    let m = metrics(admin);
    assert!(b.errors().is_empty(), "backend saw {:?}", b.errors());
    assert!(conns(&m, "opened") > 0, "{}", m.text);
}

#[test]
fn http_idle_connections_to_a_server_a_reload_removed_are_never_lent_for_another() {
    const CLIENTS: usize = 8;
    const EACH: usize = 20;
    let (old, new) = (
        named("old", BackendOptions::default()),
        named("new", BackendOptions::default()),
    );
    let toml = |port: u16, server: SocketAddr| {
        http_support::toml_config(
            port,
            &format!("workers = {WORKERS}"),
            "server_idle_timeout = \"60s\"",
            &[server.to_string()],
        )
    };
    let q = Quill::start_with(|dir, port| {
        let cfg = dir.join("quill.toml");
        std::fs::write(&cfg, toml(port, old.addr())).expect("write quill.toml");
        vec![
            "--config".into(),
            cfg.display().to_string(),
            "-C".into(),
            dir.join("ctl.sock").display().to_string(),
        ]
    });
    let sock = q.path("ctl.sock");
    ctl::wait_ctl(&q, &sock);
    let proxy = SocketAddr::from(([127, 0, 0, 1], q.port));
    let ok = load_expecting(proxy, CLIENTS, EACH, "old");
    assert_eq!(
        ok,
        CLIENTS * EACH,
        "every request answered by the old server"
    );
    let before = old.requests().len();
    assert_eq!(before, CLIENTS * EACH);
    // The old server's connections stay idle in both workers' pools (a minute's timeout, and
    // it keeps them open); the reload replaces it with the new one, at the same index.
    std::fs::write(q.path("quill.toml"), toml(q.port, new.addr())).expect("rewrite");
    ctl::ctl_ok(&sock, "reload");
    let ok = load_expecting(proxy, CLIENTS, EACH, "new");
    assert_eq!(
        ok,
        CLIENTS * EACH,
        "every request answered by the new server"
    );
    assert_eq!(
        old.requests().len(),
        before,
        "no request went to the old server on a connection kept from before the reload"
    );
    assert!(
        new.accepted() <= CLIENTS + 2 * WORKERS,
        "{}",
        new.accepted()
    );
}
