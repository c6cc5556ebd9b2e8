//! Reload and restart without loss: SIGHUP and `quill ctl reload` apply a new configuration in
//! place (servers and listeners added, removed or changed; sessions untouched; an invalid file
//! rejected with its `file:line`), and `--takeover` replaces a running process with zero failed
//! connections; in HTTP mode, `wrk` sees no error across takeovers, reloads and a SIGTERM restart.

use crate::support;

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
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

/// A port to move a listener to: the port registry's ([`free_port`]).
fn free_listen_port() -> u16 {
    free_port()
}

/// One HTTP request through `addr`; Ok(body's backend name) or the failure in words.
pub(super) fn request(addr: SocketAddr) -> Result<String, String> {
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
pub(super) struct Hammer {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failures: Arc<Mutex<Vec<String>>>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Hammer {
    pub(super) fn start(addr: SocketAddr, threads: usize) -> Hammer {
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
    pub(super) fn wait_more(&self, n: u64, within: Duration) {
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
    pub(super) fn finish(self) -> (u64, Vec<String>) {
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

pub(super) fn write_config(path: &Path, body: &str) {
    // Written then renamed, so a reload never reads half a file.
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, body).unwrap();
    fs::rename(&tmp, path).unwrap();
}

pub(super) fn listener_toml(name: &str, port: u16, servers: &[SocketAddr], extra: &str) -> String {
    let list: Vec<String> = servers.iter().map(|s| format!("\"{s}\"")).collect();
    format!(
        "[[listener]]\nname = \"{name}\"\nlisten = \"127.0.0.1:{port}\"\nmode = [\"roundrobin\"]\n{extra}servers = [{}]\n",
        list.join(", ")
    )
}

/// Starts quill on `--config DIR/q.toml -C DIR/c.sock`; the config's first listener is on `port`.
pub(super) fn start_config(body: impl Fn(u16) -> String) -> QuillProcess {
    start_config_workers("2", body)
}

/// [`start_config`] with `--workers workers`.
pub(super) fn start_config_workers(workers: &str, body: impl Fn(u16) -> String) -> QuillProcess {
    // No access log here, so nothing to settle: the readiness probe is simply closed.
    let (q, _probe, _) = Quill::spawn_first(|dir, port| {
        write_config(&dir.join("q.toml"), &body(port));
        vec![
            "--config".into(),
            dir.join("q.toml").display().to_string(),
            "-C".into(),
            dir.join("c.sock").display().to_string(),
            "--workers".into(),
            workers.into(),
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
    takeover_under_load("epoll", "", |_| {});
}

/// The same with both processes accepting through io_uring: the old one cancels its rings'
/// accepts when it drains, and opens what they took before.
#[test]
fn takeover_under_load_with_io_uring_accept_fails_no_connection() {
    takeover_under_load("io_uring", "", |_| {});
}

/// A takeover while 4 clients request in a loop, both processes with `accept = ACCEPT` and the
/// global settings `extra`; `after` sees the listener's port once the old process has exited.
pub(super) fn takeover_under_load(accept: &str, extra: &str, after: impl Fn(u16)) {
    let (a, b) = (http("a"), http("b"));
    let g = greet("g");
    let dir = scratch_dir();
    let echo_port = free_listen_port();
    let admin_port = free_listen_port();
    let mut old = start_config(|port| {
        format!("accept = \"{accept}\"\nadmin = \"127.0.0.1:{admin_port}\"\n{extra}")
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
    after(new.port);
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

// ---------------------------------------------------------------------------------------------
// HTTP under wrk across takeovers, reloads and a SIGTERM restart (U1,
// docs/design.md#drain-loses-no-request)
// ---------------------------------------------------------------------------------------------

/// The supervisor of a socket-activated restart, as systemd: binds and listens on the port once,
/// then on each line read (a directory) forks, moves the socket to descriptor 3, sets
/// `LISTEN_FDS`, `LISTEN_PID` (the child's own pid) and `LISTEN_FDNAMES`, sends the child's output
/// to files in that directory and execs quill with the arguments after the spec; it prints each
/// child's pid. Children are reaped by the kernel (SIGCHLD ignored).
const SUPERVISOR_PY: &str = r#"
import fcntl, os, signal, socket, sys
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
port, name, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen(1024)
high = fcntl.fcntl(s.fileno(), fcntl.F_DUPFD, 100)
s.close()
print("listening", flush=True)
for line in sys.stdin:
    d = line.strip()
    pid = os.fork()
    if pid == 0:
        os.dup2(high, 3)
        os.close(high)
        out = os.open(os.path.join(d, "stdout.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        err = os.open(os.path.join(d, "stderr.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 1)
        os.dup2(err, 2)
        env = dict(os.environ, LISTEN_FDS="1", LISTEN_PID=str(os.getpid()), LISTEN_FDNAMES=name)
        os.execve(argv[0], argv, env)
    print(pid, flush=True)
"#;

/// Holds the listening socket across quill processes (see [`SUPERVISOR_PY`]); kills every
/// process it started, and itself, by PID when dropped.
struct Supervisor {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::io::BufReader<std::process::ChildStdout>,
    started: Vec<u32>,
}

impl Supervisor {
    fn start(port: u16, name: &str, quill_args: &[String]) -> Supervisor {
        let dir = scratch_dir();
        let script = dir.path().join("supervisor.py");
        fs::write(&script, SUPERVISOR_PY).unwrap();
        let mut child = std::process::Command::new("python3")
            .arg(&script)
            .arg(port.to_string())
            .arg(name)
            .arg(BIN)
            .args(quill_args)
            .env_remove("LISTEN_FDS")
            .env_remove("LISTEN_PID")
            .env_remove("LISTEN_FDNAMES")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs the supervisor");
        let input = child.stdin.take().unwrap();
        let output = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut s = Supervisor {
            child,
            input,
            output,
            started: Vec::new(),
        };
        assert_eq!(s.line(), "listening");
        s
    }

    fn line(&mut self) -> String {
        use std::io::BufRead;
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        line.trim().to_string()
    }

    /// Starts quill with the socket, its output in `dir`; returns its pid.
    fn spawn(&mut self, dir: &Path) -> u32 {
        writeln!(self.input, "{}", dir.display()).unwrap();
        let pid: u32 = self.line().parse().expect("the supervisor prints a pid");
        self.started.push(pid);
        pid
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        for pid in &self.started {
            if alive(*pid) {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether process `pid` still runs (the supervisor's children are reaped at once).
fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// One quill process of the chain: started by the test (`--takeover`) or by the supervisor.
enum Proc {
    Own(QuillProcess),
    Activated(u32, tempfile::TempDir),
}

impl Proc {
    fn pid(&self) -> u32 {
        match self {
            Proc::Own(q) => q.pid,
            Proc::Activated(pid, _) => *pid,
        }
    }

    fn stderr(&self) -> String {
        match self {
            Proc::Own(q) => q.stderr(),
            Proc::Activated(_, dir) => {
                strip_ansi(&fs::read_to_string(dir.path().join("stderr.txt")).unwrap_or_default())
            }
        }
    }

    fn wait_stderr(&self, needle: &str, count: usize) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.stderr().matches(needle).count() < count {
            assert!(
                Instant::now() < deadline,
                "quill {} did not log {needle:?} ({count}):\n{}",
                self.pid(),
                self.stderr()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits (bounded) for the process to end; false if it still runs.
    fn wait_gone(&mut self, within: Duration) -> bool {
        match self {
            Proc::Own(q) => q.wait_exit(within).is_some_and(|st| st.code() == Some(0)),
            Proc::Activated(pid, _) => {
                let deadline = Instant::now() + within;
                while alive(*pid) {
                    if Instant::now() >= deadline {
                        return false;
                    }
                    thread::sleep(Duration::from_millis(10));
                }
                true
            }
        }
    }
}

/// `wrk` on `url` in the background (kept alive, or a new connection per request), until
/// [`Wrk::finish`] interrupts it; bounded by its own duration.
struct Wrk {
    child: std::process::Child,
    out: PathBuf,
}

impl Wrk {
    fn start(url: &str, keep_alive: bool, dir: &Path) -> Wrk {
        let out = dir.join(if keep_alive {
            "wrk-ka.txt"
        } else {
            "wrk-close.txt"
        });
        let mut cmd = std::process::Command::new("wrk");
        cmd.args(["-t1", "-c8", "-d60s", "--timeout", "10s"]);
        if !keep_alive {
            cmd.args(["-H", "Connection: close"]);
        }
        let child = cmd
            .arg(url)
            .stdout(fs::File::create(&out).unwrap())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("wrk is installed (scripts/test installs it: apt-get install wrk)");
        Wrk { child, out }
    }

    /// Stops wrk with SIGINT (it then prints its summary); returns the summary.
    fn finish(mut self) -> String {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "wrk does not stop");
            thread::sleep(Duration::from_millis(10));
        }
        fs::read_to_string(&self.out).unwrap()
    }
}

impl Drop for Wrk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The number of requests a wrk summary reports ("N requests in ...").
fn wrk_requests(summary: &str) -> u64 {
    summary
        .lines()
        .find(|l| l.contains("requests in"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no request count in wrk's summary:\n{summary}"))
}

/// HTTP loses nothing when Quill is replaced or reconfigured under load (trial U1: 1 to 13 wrk
/// errors per takeover, HAProxy 0). `wrk` runs twice, kept alive and with a new connection per
/// request (`Connection: close`); during each run, 10 takeovers (each new process takes the
/// sockets from the previous one; the old one drains), 10 reloads (SIGHUP, the server list
/// changing each time) and a SIGTERM restart. The restart follows systemd's socket activation:
/// a supervisor (as systemd) holds the listening socket; the running process gets SIGTERM and
/// drains; once it has exited a new one starts with the same socket (`LISTEN_FDS`), and clients
/// that connect meanwhile wait in the socket's backlog. Every wrk request must succeed: no socket
/// error (connect, read, write, timeout) and no non-2xx answer.
#[test]
fn http_under_wrk_loses_nothing_across_takeovers_reloads_and_a_sigterm_restart() {
    let (a, b) = (http("a"), http("b"));
    let dir = scratch_dir();
    let port = free_listen_port();
    let conf = dir.path().join("q.toml");
    let sock = dir.path().join("c.sock");
    let body = |servers: &[SocketAddr]| {
        format!(
            "control = \"{}\"\nworkers = 2\ndrain_timeout = \"10s\"\n",
            sock.display()
        ) + &listener_toml("web", port, servers, "protocol = \"http\"\n")
    };
    write_config(&conf, &body(&[a.addr(), b.addr()]));
    let args = vec!["--config".to_string(), conf.display().to_string()];
    let mut sup = Supervisor::start(port, "web", &args);
    let first = scratch_dir();
    let mut current = Proc::Activated(sup.spawn(first.path()), first);
    current.wait_stderr("worker(s), at most", 1);
    let url = format!("http://127.0.0.1:{port}/");
    let mut draining: Vec<Proc> = Vec::new();
    for keep_alive in [true, false] {
        let wrk = Wrk::start(&url, keep_alive, dir.path());
        thread::sleep(Duration::from_millis(300));
        for i in 0..10 {
            // A takeover: the new process gets the sockets, the old one drains.
            let mut args = args.clone();
            args.extend(["--takeover".to_string(), sock.display().to_string()]);
            let next = Proc::Own(QuillProcess::spawn_in(scratch_dir(), args, port));
            next.wait_stderr("took over", 1);
            draining.push(std::mem::replace(&mut current, next));
            thread::sleep(Duration::from_millis(50));
            // A reload that changes the servers.
            let servers = if i % 2 == 0 {
                vec![a.addr()]
            } else {
                vec![a.addr(), b.addr()]
            };
            write_config(&conf, &body(&servers));
            let _ = std::process::Command::new("kill")
                .args(["-HUP", &current.pid().to_string()])
                .status();
            current.wait_stderr("SIGHUP: reloaded", 1);
            thread::sleep(Duration::from_millis(50));
        }
        // The SIGTERM restart, as systemd with socket activation does it.
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &current.pid().to_string()])
            .status();
        assert!(
            current.wait_gone(Duration::from_secs(10)),
            "the stopped process did not exit 0 within 10 s:\n{}",
            current.stderr()
        );
        let fresh = scratch_dir();
        current = Proc::Activated(sup.spawn(fresh.path()), fresh);
        current.wait_stderr("worker(s), at most", 1);
        thread::sleep(Duration::from_millis(300));
        let summary = wrk.finish();
        let mode = if keep_alive {
            "kept alive"
        } else {
            "Connection: close"
        };
        assert!(
            !summary.contains("Socket errors") && !summary.contains("Non-2xx"),
            "wrk ({mode}) across 10 takeovers, 10 reloads and a restart:\n{summary}"
        );
        assert!(
            wrk_requests(&summary) >= 1000,
            "wrk ({mode}) made too few requests to mean anything:\n{summary}"
        );
        println!("wrk ({mode}): {}", summary.trim());
    }
    for mut old in draining {
        assert!(
            old.wait_gone(Duration::from_secs(10)),
            "a replaced process did not exit 0 after its drain:\n{}",
            old.stderr()
        );
    }
    drop(current);
}
