//! Kept-alive HTTP clients and the workers that carry them (`concentrate`, docs/design.md): while
//! other processes leave no core idle, the workers past the first let go of the listeners and
//! hand their kept-alive clients, between two requests, to the worker that still accepts; the
//! clients see nothing of it. Each test starts the real binary (`--workers 2`, an admin listener)
//! in front of the scripted backend of tests/support/http.rs, and busy-loop processes (one per
//! core, stopped by their PIDs) to take every idle core. With `listen_per_worker`, a worker that
//! no longer accepts still takes the clients the kernel queues on its own socket.

use crate::admin_support;
use crate::http_support;
use crate::support;

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use admin_support::{metrics, start_with_admin, wait_metrics};
use http_support::{Backend, Client, Step};
use support::{QuillProcess, IO_TIMEOUT};

/// Processes that each keep a core busy until dropped (killed by PID and reaped).
struct Burners(Vec<Child>);

impl Burners {
    fn one_per_core() -> Burners {
        let cores = thread::available_parallelism().map_or(2, |n| n.get());
        Burners(
            (0..cores)
                .map(|_| {
                    Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .stdin(Stdio::null())
                        .spawn()
                        .expect("start a busy loop")
                })
                .collect(),
        )
    }
}

impl Drop for Burners {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Quill with 2 workers and an admin listener in front of `server`, with the top-level lines
/// `global`.
fn start(server: SocketAddr, global: &str) -> (QuillProcess, SocketAddr) {
    start_with_admin(|dir, port, admin| {
        let global = format!("workers = 2\nadmin = \"{admin}\"\n{global}");
        let cfg = dir.join("quill.toml");
        let text = http_support::toml_config(port, &global, "", &[server.to_string()]);
        std::fs::write(&cfg, text).expect("write quill.toml");
        vec!["--config".into(), cfg.display().to_string()]
    })
}

/// Answers every request with 200 and a body naming its path, keeping the connection.
fn echo_path_backend() -> Backend {
    Backend::start_with(Default::default(), |req| {
        vec![Step::Send(http_support::response(
            200,
            "",
            req.target.as_bytes(),
        ))]
    })
}

/// `clients` kept-alive connections, each sending one to three pipelined requests at a time,
/// their bytes cut in two at a random point with a pause of up to a millisecond between the
/// halves (so a move finds a client between requests, in the middle of a head, or with a
/// request waiting unread), until `stop` (at most 60 s and 100,000 rounds each), checking every
/// answer is 200 with its own path as the body. Returns the requests answered right and the
/// first wrong answer, if any.
fn keep_alive_load(
    proxy: SocketAddr,
    clients: usize,
    stop: Arc<AtomicBool>,
) -> Vec<thread::JoinHandle<(u64, Option<String>)>> {
    (0..clients)
        .map(|c| {
            let stop = stop.clone();
            thread::spawn(move || {
                let started = Instant::now();
                let mut ok = 0;
                let mut rng = 0x9e37_79b9_u64 ^ ((c as u64) << 20);
                let mut next = move |n: u64| {
                    rng = rng
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    (rng >> 33) % n
                };
                let mut client = Client::connect(proxy);
                client.s.set_nodelay(true).unwrap();
                for i in 0..100_000u64 {
                    if stop.load(Ordering::Relaxed) || started.elapsed() > Duration::from_secs(60) {
                        break;
                    }
                    let paths: Vec<String> = (0..1 + next(3))
                        .map(|k| format!("/c{c}/r{i}.{k}"))
                        .collect();
                    let bytes: Vec<u8> = paths
                        .iter()
                        .flat_map(|p| {
                            format!("GET {p} HTTP/1.1\r\nHost: example.test\r\n\r\n").into_bytes()
                        })
                        .collect();
                    let cut = next(bytes.len() as u64 + 1) as usize;
                    let sent = client.s.write_all(&bytes[..cut]).and_then(|()| {
                        thread::sleep(Duration::from_micros(next(1000)));
                        client.s.write_all(&bytes[cut..])
                    });
                    if let Err(e) = sent {
                        return (ok, Some(format!("client {c} round {i}: write: {e}")));
                    }
                    for path in &paths {
                        match client.try_read_response(false, IO_TIMEOUT) {
                            Ok(r) if r.status == 200 && r.body == path.as_bytes() => ok += 1,
                            Ok(r) => {
                                let body = String::from_utf8_lossy(&r.body);
                                return (
                                    ok,
                                    Some(format!("client {c} {path}: {} {body:?}", r.status)),
                                );
                            }
                            Err(e) => return (ok, Some(format!("client {c} {path}: {e}"))),
                        }
                    }
                }
                (ok, None)
            })
        })
        .collect()
}

/// Stops the load and returns the requests answered right, panicking on any wrong answer.
fn finish(stop: &AtomicBool, load: Vec<thread::JoinHandle<(u64, Option<String>)>>) -> u64 {
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for t in load {
        let (ok, err) = t.join().expect("client thread");
        assert!(err.is_none(), "{}", err.unwrap());
        total += ok;
    }
    total
}

#[test]
fn with_no_core_idle_kept_alive_clients_gather_on_one_worker_and_lose_nothing() {
    let b = echo_path_backend();
    let (q, admin) = start(b.addr(), "");
    let proxy = SocketAddr::from(([127, 0, 0, 1], q.port));
    // The start-up probe's connection, and any other before the load.
    let before = metrics(admin).value("quill_sessions_accepted_total", &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let load = keep_alive_load(proxy, 8, stop.clone());
    let burners = Burners::one_per_core();
    // The main loop samples the CPUs every 250 ms and acts on two samples in a row.
    let m = wait_metrics(admin, "one worker accepting and clients moved", |m| {
        m.value("quill_workers_accepting", &[]) == 1.0
            && m.value("quill_sessions_moved_total", &[]) >= 1.0
    });
    let moved = m.value("quill_sessions_moved_total", &[]);
    // The clients go on being served by the worker they moved to.
    thread::sleep(Duration::from_millis(500));
    drop(burners);
    let answered = finish(&stop, load);
    assert!(answered > 0, "no request answered");
    let m = metrics(admin);
    eprintln!(
        "{answered} requests answered right, {moved} moves seen, {} in all",
        m.value("quill_sessions_moved_total", &[])
    );
    // Moving is not accepting again, nor ending: 8 clients, 8 sessions.
    assert_eq!(
        m.value("quill_sessions_accepted_total", &[]) - before,
        8.0,
        "{}",
        m.text
    );
    // A new client is taken by the worker that accepts, and served.
    let mut client = Client::connect(proxy);
    client.send(b"GET /new HTTP/1.1\r\nHost: example.test\r\n\r\n");
    let r = client.read_response();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"/new");
}

#[test]
fn with_concentrate_off_every_worker_keeps_accepting_on_a_busy_machine() {
    let b = echo_path_backend();
    let (q, admin) = start(b.addr(), "concentrate = false");
    let proxy = SocketAddr::from(([127, 0, 0, 1], q.port));
    let stop = Arc::new(AtomicBool::new(false));
    let load = keep_alive_load(proxy, 8, stop.clone());
    let burners = Burners::one_per_core();
    // Four times what the gathering above needs (two samples of 250 ms).
    thread::sleep(Duration::from_secs(2));
    drop(burners);
    let answered = finish(&stop, load);
    assert!(answered > 0, "no request answered");
    let m = metrics(admin);
    assert_eq!(m.value("quill_workers_accepting", &[]), 2.0, "{}", m.text);
    assert_eq!(
        m.value("quill_sessions_moved_total", &[]),
        0.0,
        "{}",
        m.text
    );
}

/// CPU time (utime + stime, in ticks) of each `quill-worker-N` thread of process `pid`.
fn worker_ticks(pid: u32) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).expect("/proc/PID/task") {
        let Ok(stat) = std::fs::read_to_string(t.expect("task").path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = &stat[open + 1..close];
        if !name.starts_with("quill-worker") {
            continue;
        }
        let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let ticks = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
        out.push((name.to_string(), ticks));
    }
    out.sort();
    out
}

#[test]
fn gathered_workers_still_accept_h2c_clients_which_cannot_move() {
    let b = echo_path_backend();
    let h2c_port = crate::support::free_port();
    let (q, admin) = start(
        b.addr(),
        &format!(
            "[[listener]]\nname = \"h2c\"\nlisten = \"127.0.0.1:{h2c_port}\"\nprotocol = \"http\"\nservers = [\"{}\"]\n[listener.http]\nh2c = true\n",
            b.addr()
        ),
    );
    let proxy = SocketAddr::from(([127, 0, 0, 1], q.port));
    let stop = Arc::new(AtomicBool::new(false));
    let load = keep_alive_load(proxy, 8, stop.clone());
    let burners = Burners::one_per_core();
    wait_metrics(admin, "one worker accepting", |m| {
        m.value("quill_workers_accepting", &[]) == 1.0
    });
    // The plain clients are gathered; the machine stays busy, so one worker goes on accepting.
    finish(&stop, load);
    // 16 HTTP/2 connections, opened now: an HTTP/2 connection stays on the worker that accepted
    // it, so both workers must take some (with only the gathered worker accepting, one would
    // carry them all for their whole life while the other idles).
    let before = worker_ticks(q.pid);
    let out = Command::new("timeout")
        .args(["60", "h2load", "-c16", "-m4", "-n40000", "-t2"])
        .arg(format!("http://127.0.0.1:{h2c_port}/x"))
        .stdin(Stdio::null())
        .output()
        .expect("run h2load (nghttp2-client)");
    let text = String::from_utf8_lossy(&out.stdout);
    let after = worker_ticks(q.pid);
    let m = metrics(admin);
    drop(burners);
    assert!(text.contains("40000 succeeded"), "{text}");
    assert_eq!(m.value("quill_workers_accepting", &[]), 1.0, "{}", m.text);
    assert_eq!(before.len(), 2, "{before:?}");
    let used: Vec<u64> = after
        .iter()
        .zip(&before)
        .map(|((_, a), (_, b))| a - b)
        .collect();
    let total: u64 = used.iter().sum();
    eprintln!("worker CPU ticks during the HTTP/2 load: {used:?}");
    assert!(
        used.iter().all(|&u| u * 8 >= total),
        "a worker took less than an eighth of the HTTP/2 work: {used:?} ticks"
    );
}

#[test]
fn with_one_socket_per_worker_a_gathered_worker_still_takes_the_clients_queued_on_its_socket() {
    // `listen_per_worker`: the kernel hashes new clients to either worker's socket whatever
    // `concentrate` decided, so the worker that no longer accepts keeps watching its own socket
    // and hands each client to the one that does; none waits unaccepted.
    let b = echo_path_backend();
    let (q, admin) = start(b.addr(), "listen_per_worker = true");
    let proxy = SocketAddr::from(([127, 0, 0, 1], q.port));
    let stop = Arc::new(AtomicBool::new(false));
    let load = keep_alive_load(proxy, 8, stop.clone());
    let burners = Burners::one_per_core();
    wait_metrics(admin, "one worker accepting", |m| {
        m.value("quill_workers_accepting", &[]) == 1.0
    });
    finish(&stop, load);
    // 40 new clients, each from a port of its own: about half land on the gathered worker's
    // socket (all 40 on the other one would happen once in 2^40 runs).
    for i in 0..40 {
        let mut c = Client::connect(proxy);
        c.send(format!("GET /new{i} HTTP/1.1\r\nHost: example.test\r\n\r\n").as_bytes());
        let r = c.read_response();
        assert_eq!(r.status, 200, "client {i}");
        assert_eq!(r.body, format!("/new{i}").as_bytes(), "client {i}");
    }
    let m = metrics(admin);
    drop(burners);
    assert_eq!(m.value("quill_workers_accepting", &[]), 1.0, "{}", m.text);
}
