//! Reload and restart without loss: SIGHUP and `quill ctl reload` apply a new configuration in
//! place (servers and listeners added, removed or changed; sessions untouched; an invalid file
//! rejected with its `file:line`), and `--takeover` replaces a running process with zero failed
//! connections.

mod support;

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use support::*;

/// Runs `quill ctl --socket SOCK WORDS...` (bounded); returns (success, stdout, stderr).
fn ctl(sock: &Path, words: &[&str]) -> (bool, String, String) {
    let sock = sock.display().to_string();
    let mut all = vec!["ctl", "--socket", sock.as_str()];
    all.extend_from_slice(words);
    let (code, out, err) = run_quill_output(&all);
    (code == 0, out, err)
}

fn ctl_ok(sock: &Path, words: &[&str]) -> String {
    let (ok, out, err) = ctl(sock, words);
    assert!(ok, "quill ctl {words:?} failed: {err}{out}");
    out
}

/// Server addresses in `servers` output order.
fn server_addrs(sock: &Path, listener: Option<&str>) -> Vec<String> {
    let mut words = Vec::new();
    if let Some(l) = listener {
        words.extend(["listener", l]);
    }
    words.push("servers");
    ctl_ok(sock, &words)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            format!("{}:{}", f[2], f[4])
        })
        .collect()
}

fn free_listen_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP request through `addr`; Ok(body's backend name) or the failure in words.
fn request(addr: SocketAddr) -> Result<String, String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut reply = Vec::new();
    s.read_to_end(&mut reply)
        .map_err(|e| format!("read: {e}"))?;
    let text = String::from_utf8_lossy(&reply);
    if !text.starts_with("HTTP/1.") {
        return Err(format!("bad reply {text:?}"));
    }
    text.lines()
        .last()
        .map(str::to_string)
        .ok_or_else(|| "empty body".into())
}

/// Clients requesting through `addr` in a loop on several threads until stopped.
struct Hammer {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failures: Arc<Mutex<Vec<String>>>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Hammer {
    fn start(addr: SocketAddr, threads: usize) -> Hammer {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let deadline = Instant::now() + Duration::from_secs(60);
        let threads = (0..threads)
            .map(|_| {
                let (stop, ok, failures) = (stop.clone(), ok.clone(), failures.clone());
                thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                        match request(addr) {
                            Ok(_) => {
                                ok.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => failures.lock().unwrap().push(e),
                        }
                    }
                })
            })
            .collect();
        Hammer {
            stop,
            ok,
            failures,
            threads,
        }
    }

    fn count(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }

    /// Waits (bounded) until `n` more requests have succeeded.
    fn wait_more(&self, n: u64, within: Duration) {
        let start = self.count();
        let deadline = Instant::now() + within;
        while self.count() < start + n {
            assert!(
                Instant::now() < deadline,
                "only {} requests in {within:?}; failures: {:?}",
                self.count() - start,
                self.failures.lock().unwrap()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stops the clients; returns (successes, failures).
    fn finish(self) -> (u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        let failures = self.failures.lock().unwrap().clone();
        (self.ok.load(Ordering::Relaxed), failures)
    }
}

/// The admin listener's `/api/status` answer (head and body).
fn admin_status(port: u16) -> String {
    let mut admin = TcpStream::connect(("127.0.0.1", port)).unwrap();
    set_timeouts(&admin, Duration::from_secs(5));
    admin
        .write_all(b"GET /api/status HTTP/1.0\r\n\r\n")
        .unwrap();
    String::from_utf8_lossy(&read_until_eof(&mut admin, Duration::from_secs(5))).into_owned()
}

fn write_config(path: &Path, body: &str) {
    // Written then renamed, so a reload never reads half a file.
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, body).unwrap();
    fs::rename(&tmp, path).unwrap();
}

fn listener_toml(name: &str, port: u16, servers: &[SocketAddr], extra: &str) -> String {
    let list: Vec<String> = servers.iter().map(|s| format!("\"{s}\"")).collect();
    format!(
        "[[listener]]\nname = \"{name}\"\nlisten = \"127.0.0.1:{port}\"\nmode = [\"roundrobin\"]\n{extra}servers = [{}]\n",
        list.join(", ")
    )
}

/// Starts quill on `--config DIR/q.toml -C DIR/c.sock`; the config's first listener is on `port`.
fn start_config(body: impl Fn(u16) -> String) -> QuillProcess {
    // No access log here, so nothing to settle: the readiness probe is simply closed.
    let (q, _probe, _) = Quill::spawn_first(|dir, port| {
        write_config(&dir.join("q.toml"), &body(port));
        vec![
            "--config".into(),
            dir.join("q.toml").display().to_string(),
            "-C".into(),
            dir.join("c.sock").display().to_string(),
            "--workers".into(),
            "2".into(),
        ]
    });
    // Readiness above is the first listener accepting; the others are bound a moment later, and
    // the process says "ready: N worker(s)" once every one is.
    assert!(
        q.wait_stderr_contains("worker(s), at most", Duration::from_secs(10)),
        "{}",
        q.stderr()
    );
    q
}

#[test]
fn reload_sighup_changes_servers_in_place_and_keeps_sessions() {
    let (a, b, c) = (http("a"), http("b"), http("c"));
    let g = greet("g");
    let q = start_config(|port| {
        listener_toml("web", port, &[a.addr(), b.addr()], "")
            + &listener_toml("echo", free_listen_port(), &[g.addr()], "")
    });
    let sock = q.path("c.sock");
    let conf = q.path("q.toml");
    let echo_port: u16 = fs::read_to_string(&conf)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("listen"))
        .nth(1)
        .and_then(|l| l.rsplit(':').next())
        .map(|p| p.trim_end_matches('"').parse().unwrap())
        .unwrap();
    // A session that must live through the reloads.
    let (name, mut long) = greet_session(echo_port);
    assert_eq!(name, "g");
    for _ in 0..4 {
        request(q.addr()).unwrap();
    }
    let total_of_a = |servers: &str| -> String {
        let line = servers.lines().next().unwrap();
        let f: Vec<&str> = line.split_whitespace().collect();
        let at = f.iter().position(|w| *w == "total").unwrap();
        f[at + 1].to_string()
    };
    let total_a_before = total_of_a(&ctl_ok(&sock, &["listener", "web", "servers"]));
    assert_ne!(total_a_before, "0");

    // Drop b, add c, give a weight 5.
    let text = fs::read_to_string(&conf).unwrap();
    let text = text.replacen(
        &format!("servers = [\"{}\", \"{}\"]", a.addr(), b.addr()),
        &format!(
            "servers = [{{ address = \"{}\", weight = 5 }}, \"{}\"]",
            a.addr(),
            c.addr()
        ),
        1,
    );
    write_config(&conf, &text);
    q.signal("HUP");
    assert!(
        q.wait_stderr_contains("SIGHUP: reloaded", Duration::from_secs(5)),
        "{}",
        q.stderr()
    );
    assert_eq!(
        server_addrs(&sock, Some("web")),
        vec![a.addr().to_string(), c.addr().to_string()]
    );
    let servers = ctl_ok(&sock, &["listener", "web", "servers"]);
    let first = servers.lines().next().unwrap();
    assert!(first.contains("weight 5"), "{servers}");
    assert_eq!(
        total_of_a(&servers),
        total_a_before,
        "server a kept its counters across the reload: {servers}"
    );
    let mut names = Vec::new();
    for _ in 0..4 {
        names.push(request(q.addr()).unwrap());
    }
    assert!(
        names.iter().any(|n| n == "c"),
        "new server serves: {names:?}"
    );
    assert!(
        !names.iter().any(|n| n == "b"),
        "removed server gets nothing: {names:?}"
    );
    // The old session never noticed.
    echo_roundtrip(&mut long, b"after reload\n");
}

#[test]
fn reload_invalid_config_is_rejected_with_file_line_and_old_keeps_running() {
    let (a, b) = (http("a"), http("b"));
    let mut q = start_config(|port| listener_toml("web", port, &[a.addr(), b.addr()], ""));
    let sock = q.path("c.sock");
    let conf = q.path("q.toml");
    let good = fs::read_to_string(&conf).unwrap();
    write_config(&conf, &format!("{good}bogus_key = 1\n"));
    q.signal("HUP");
    let conf_name = conf.display().to_string();
    assert!(
        q.wait_stderr_contains("reload rejected", Duration::from_secs(5)),
        "{}",
        q.stderr()
    );
    let err_line = q
        .stderr()
        .lines()
        .find(|l| l.contains("reload rejected"))
        .unwrap()
        .to_string();
    assert!(
        err_line.contains(&format!("{conf_name}:")) && err_line.contains("bogus_key"),
        "the error names file:line and the key: {err_line}"
    );
    // Same through the control socket: exit status 1 and the message.
    let (ok, _, err) = ctl(&sock, &["reload"]);
    assert!(!ok, "reload of a bad file must fail");
    assert!(err.contains(&format!("{conf_name}:")), "{err}");
    // Still serving with the old configuration.
    assert_eq!(
        server_addrs(&sock, None),
        vec![a.addr().to_string(), b.addr().to_string()]
    );
    request(q.addr()).unwrap();
    assert!(q.try_exit().is_none());
    // A fixed file reloads.
    write_config(
        &conf,
        &good.replace(&b.addr().to_string(), &a.addr().to_string()),
    );
    let out = ctl_ok(&sock, &["reload"]);
    assert!(out.starts_with("reloaded"), "{out}");
}

#[test]
fn reload_adds_and_removes_listeners() {
    let a = http("a");
    let q = start_config(|port| listener_toml("web", port, &[a.addr()], ""));
    let sock = q.path("c.sock");
    let conf = q.path("q.toml");
    let base = fs::read_to_string(&conf).unwrap();
    let extra_port = free_listen_port();
    write_config(
        &conf,
        &(base.clone() + &listener_toml("more", extra_port, &[a.addr()], "")),
    );
    let out = ctl_ok(&sock, &["reload"]);
    assert!(out.contains("listener 'more'"), "{out}");
    let extra: SocketAddr = format!("127.0.0.1:{extra_port}").parse().unwrap();
    assert_eq!(request(extra).unwrap(), "a");
    // An open session on the listener that goes away keeps working.
    let mut held = TcpStream::connect(extra).unwrap();
    set_timeouts(&held, Duration::from_secs(5));
    write_config(&conf, &base);
    let out = ctl_ok(&sock, &["reload"]);
    assert!(
        out.contains("listener 'more'") && out.contains("removed"),
        "{out}"
    );
    wait_refused(extra, Duration::from_secs(5));
    held.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let body = read_until_eof(&mut held, Duration::from_secs(5));
    assert!(String::from_utf8_lossy(&body).ends_with("a\n"));
    request(q.addr()).unwrap();
}

#[test]
fn reload_moving_a_listener_to_a_busy_port_changes_nothing() {
    let a = http("a");
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_port = busy.local_addr().unwrap().port();
    let q = start_config(|port| listener_toml("web", port, &[a.addr()], ""));
    let sock = q.path("c.sock");
    let conf = q.path("q.toml");
    let base = fs::read_to_string(&conf).unwrap();
    write_config(
        &conf,
        &(base.clone() + &listener_toml("more", busy_port, &[a.addr()], "")),
    );
    let (ok, _, err) = ctl(&sock, &["reload"]);
    assert!(!ok, "binding a busy port must fail the reload");
    assert!(err.contains(&busy_port.to_string()), "{err}");
    let (ok, _, err) = ctl(&sock, &["listener", "more", "servers"]);
    assert!(!ok && err.contains("no listener named 'more'"), "{err}");
    request(q.addr()).unwrap();
}

#[test]
fn reload_rereads_the_command_file() {
    let (a, b) = (http("a"), http("b"));
    let q = Quill::start_with(|dir, port| {
        fs::write(dir.join("pen.cmds"), "roundrobin\n").unwrap();
        vec![
            "-F".into(),
            dir.join("pen.cmds").display().to_string(),
            "-C".into(),
            dir.join("c.sock").display().to_string(),
            format!("127.0.0.1:{port}"),
            a.addr().to_string(),
            b.addr().to_string(),
        ]
    });
    let sock = q.path("c.sock");
    assert_eq!(ctl_ok(&sock, &["mode"]).trim(), "roundrobin");
    fs::write(
        q.path("pen.cmds"),
        "roundrobin\nweight\nserver 1 weight 7\n",
    )
    .unwrap();
    q.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(5);
    while ctl_ok(&sock, &["mode"]).trim() != "roundrobin weight" {
        assert!(
            Instant::now() < deadline,
            "mode not reloaded: {}",
            q.stderr()
        );
        thread::sleep(Duration::from_millis(20));
    }
    assert!(ctl_ok(&sock, &["servers"])
        .lines()
        .nth(1)
        .unwrap()
        .contains("weight 7"));
}

#[test]
fn reload_under_load_fails_no_connection() {
    let (a, b) = (http("a"), http("b"));
    let q = start_config(|port| listener_toml("web", port, &[a.addr(), b.addr()], ""));
    let sock = q.path("c.sock");
    let conf = q.path("q.toml");
    let base = fs::read_to_string(&conf).unwrap();
    let hammer = Hammer::start(q.addr(), 4);
    hammer.wait_more(50, Duration::from_secs(10));
    for i in 0..10 {
        // Alternate between two real changes so every reload does work.
        let body = if i % 2 == 0 {
            base.replace("mode = [\"roundrobin\"]", "mode = [\"leastconn\"]")
        } else {
            base.clone()
        };
        write_config(&conf, &body);
        if i % 3 == 0 {
            ctl_ok(&sock, &["reload"]);
        } else {
            q.signal("HUP");
        }
        hammer.wait_more(20, Duration::from_secs(10));
    }
    let (ok, failures) = hammer.finish();
    assert!(ok >= 250, "{ok} requests");
    assert!(
        failures.is_empty(),
        "{} failed of {}: {failures:?}",
        failures.len(),
        ok
    );
}

#[test]
fn takeover_under_load_fails_no_connection_and_old_process_drains() {
    let (a, b) = (http("a"), http("b"));
    let g = greet("g");
    let dir = scratch_dir();
    let echo_port = free_listen_port();
    let admin_port = free_listen_port();
    let mut old = start_config(|port| {
        format!("admin = \"127.0.0.1:{admin_port}\"\n")
            + &listener_toml("web", port, &[a.addr(), b.addr()], "")
            + &listener_toml("echo", echo_port, &[g.addr()], "")
    });
    let old_sock = old.path("c.sock");
    let (name, mut long) = greet_session(echo_port);
    assert_eq!(name, "g");
    let hammer = Hammer::start(old.addr(), 4);
    hammer.wait_more(50, Duration::from_secs(10));

    // The new process: same configuration, sockets from the old one.
    let args = vec![
        "--config".to_string(),
        old.path("q.toml").display().to_string(),
        "-C".into(),
        old_sock.display().to_string(),
        "--workers".into(),
        "2".into(),
        "--takeover".into(),
        old_sock.display().to_string(),
    ];
    let new = QuillProcess::spawn_in(dir, args, old.port);
    assert!(
        new.wait_stderr_contains("took over", Duration::from_secs(10)),
        "new:\n{}\nold:\n{}",
        new.stderr(),
        old.stderr()
    );
    hammer.wait_more(100, Duration::from_secs(10));
    // The old process drains: it keeps the open session, then exits 0 once it ends.
    assert!(old.wait_stderr_contains("stopping", Duration::from_secs(5)));
    echo_roundtrip(&mut long, b"during the drain\n");
    assert!(
        old.try_exit().is_none(),
        "old process left with a session open"
    );
    drop(long);
    let st = old
        .wait_exit(Duration::from_secs(10))
        .expect("old process exits");
    assert_eq!(st.code(), Some(0), "{}", old.stderr());
    hammer.wait_more(100, Duration::from_secs(10));
    let (ok, failures) = hammer.finish();
    assert!(
        failures.is_empty(),
        "{} failed of {}: {failures:?}",
        failures.len(),
        ok
    );
    // The new process owns the control socket (left in place by the old one) and both listeners.
    let pid = ctl_ok(&old_sock, &["pid"]);
    assert_eq!(pid.trim(), new.pid.to_string());
    let (name, _s) = greet_session(echo_port);
    assert_eq!(name, "g");
    // The admin listener moved too: the new process answers on the same port.
    let reply = admin_status(admin_port);
    assert!(reply.contains(&format!("\"pid\":{}", new.pid)), "{reply}");
}

#[test]
fn takeover_without_a_running_process_fails_clearly() {
    let a = http("a");
    let dir = scratch_dir();
    let missing = dir.path().join("nobody.sock");
    let port = free_listen_port();
    let mut q = QuillProcess::spawn_in(
        dir,
        vec![
            "--takeover".into(),
            missing.display().to_string(),
            format!("127.0.0.1:{port}"),
            a.addr().to_string(),
        ],
        port,
    );
    let st = q.wait_exit(Duration::from_secs(5)).expect("exits");
    assert_eq!(st.code(), Some(1));
    assert!(
        first_line(&q.stderr()).contains(&missing.display().to_string()),
        "{}",
        q.stderr()
    );
}

#[test]
fn status_still_shows_pools_while_draining() {
    let g = greet("g");
    let admin_port = free_listen_port();
    let q = start_config(|port| {
        format!("admin = \"127.0.0.1:{admin_port}\"\ndrain_timeout = \"10s\"\n")
            + &listener_toml("echo", port, &[g.addr()], "")
    });
    let (name, mut held) = greet_session(q.port);
    assert_eq!(name, "g");
    q.signal("TERM");
    assert!(q.wait_stderr_contains("stopping", Duration::from_secs(5)));
    let reply = admin_status(admin_port);
    assert!(reply.contains("\"phase\":\"draining\""), "{reply}");
    assert!(
        reply.contains(&g.addr().to_string()),
        "the pool is still shown: {reply}"
    );
    echo_roundtrip(&mut held, b"still served\n");
}
