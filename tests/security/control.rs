//! The control socket under attack (D1, D2, D7, D14, D17 in docs/design.md#probe-findings): what a
//! TCP client may do at each `control_level`, that nothing over TCP reaches files, paths or local
//! sockets, the Unix socket's peer uid check, the bearer token, and that idle, dripping or
//! oversized clients and a full descriptor table never leave a legitimate client unanswered.

use crate::ctl;
use crate::support;

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ctl::*;
use support::*;

/// Quill from a TOML file with `control` at `control` (a loopback port when None) and the
/// top-level lines `global`; returns it and the control address (TCP) once it answers.
fn start_toml(global: &str, server: SocketAddr) -> (QuillProcess, SocketAddr) {
    let caddr = std::cell::Cell::new(SocketAddr::from(([127, 0, 0, 1], 0)));
    let q = Quill::start_with(|dir, port| {
        caddr.set(SocketAddr::from(([127, 0, 0, 1], free_port())));
        let cfg = format!(
            "control = \"{c}\"\nlog = \"{log}\"\n{global}\n\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nservers = [\"{server}\"]\n",
            c = caddr.get(),
            log = dir.join("access.log").display(),
        );
        let path = dir.join("quill.toml");
        std::fs::write(&path, cfg).unwrap();
        vec!["--config".into(), path.display().to_string()]
    });
    let caddr = caddr.get();
    (q, caddr)
}

/// Over TCP: one error line that contains `needle`.
fn tcp_err(caddr: SocketAddr, line: &str, needle: &str) -> String {
    let reply = ctl_tcp(caddr, line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    let start = if line.starts_with("json ") {
        "{\"error\":"
    } else {
        "error: "
    };
    assert!(
        reply.starts_with(start) && reply.ends_with('\n') && reply.lines().count() == 1,
        "{line:?} over TCP should get one error line, got {reply:?}"
    );
    assert!(
        reply.contains(needle),
        "{line:?}: {reply:?} lacks {needle:?}"
    );
    reply
}

fn tcp_ok(caddr: SocketAddr, line: &str) -> String {
    let reply = ctl_tcp(caddr, line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    assert!(!reply.starts_with("error"), "{line:?} over TCP: {reply:?}");
    reply
}

const UNIX_ONLY: &str = "needs the Unix control socket";

// === D1, D2: nothing over TCP reaches a file, a path or a local socket ===

#[test]
fn tcp_control_cannot_point_a_server_at_a_unix_socket() {
    // The victim: a Quill whose control socket is Unix (0600), reachable only by root.
    let backend = greet("backend");
    let (victim, victim_sock) = start_ctl(&[], &[spec(backend.addr())]);
    let victim_listen = ctl(&victim_sock, "listen");
    // The attacker's way in: another Quill with a loopback TCP control socket.
    let (q, caddr) = start_tcp_ctl(&[], &[spec(backend.addr())]);
    let v = victim_sock.display().to_string();
    for line in [
        format!("server 0 address {v}"),
        format!("json server 0 address {v}"),
        format!("listener default server 0 address {v} port 1"),
        format!("server add {v}"),
        "server 0 address @quill-victim".to_string(),
        "server add @quill-victim".to_string(),
        "server 0 address ../victim.sock".to_string(),
        "server add ./victim.sock:0:0:1".to_string(),
    ] {
        tcp_err(caddr, &line, UNIX_ONLY);
    }
    let servers = tcp_ok(caddr, "servers");
    assert_eq!(servers.lines().count(), 1, "{servers}");
    assert!(
        servers.contains(&format!("port {}", backend.addr().port())),
        "{servers}"
    );
    // What the attacker would now send through the data path reaches the real backend only.
    let mut s = connect_port(q.port);
    assert_eq!(read_line(&mut s), "backend");
    let _ = s.write_all(b"takeover\n");
    drop(s);
    // The victim is untouched: same pid, same listener, still answering on its socket.
    assert_eq!(ctl(&victim_sock, "pid"), format!("{}\n", victim.pid));
    assert_eq!(ctl(&victim_sock, "listen"), victim_listen);
    let servers = ctl(&victim_sock, "servers");
    assert!(servers.contains(" weight 1 "), "{servers}");
}

#[test]
fn tcp_control_cannot_listen_on_a_path() {
    let backend = greet("b");
    let (q, caddr) = start_tcp_ctl(&[], &[spec(backend.addr())]);
    let private = q.path("rootonly");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let conf = private.join("app.conf");
    std::fs::write(&conf, "secret\n").unwrap();
    let before = tcp_ok(caddr, "listen");
    let other = format!("127.0.0.1:{}", free_port());
    for line in [
        format!("listen {}", conf.display()),
        format!("listener default listen {}", conf.display()),
        format!("listen {other}"),
    ] {
        tcp_err(caddr, &line, UNIX_ONLY);
    }
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), "secret\n");
    assert!(std::fs::metadata(&conf).unwrap().is_file());
    assert_eq!(tcp_ok(caddr, "listen"), before);
    assert_eq!(greet_name(q.port), "b");
}

#[test]
fn tcp_control_cannot_exit_or_take_over() {
    let backend = greet("b");
    // -X allows `exit`, but only over the Unix socket.
    let (mut q, caddr) = start_tcp_ctl(&["-X"], &[spec(backend.addr())]);
    let written = q.path("owned.cmds");
    for line in [
        "exit".to_string(),
        "json exit".to_string(),
        "takeover".to_string(),
        "takeover_done".to_string(),
        format!("write {}", written.display()),
        format!("include {}", q.path("access.log").display()),
        "include /etc/shadow".to_string(),
        format!("log {}", written.display()),
        format!("web_stats {}", written.display()),
    ] {
        tcp_err(caddr, &line, UNIX_ONLY);
    }
    // The probe's takeover conversation: `takeover`, then `done` on the same connection.
    let mut s = TcpStream::connect(caddr).unwrap();
    set_timeouts(&s, CTL_TIMEOUT);
    s.write_all(b"takeover\n").unwrap();
    thread::sleep(Duration::from_millis(200));
    let _ = s.write_all(b"done\n");
    let (reply, _) = try_read_until_eof(&mut s, CTL_TIMEOUT, 1 << 16);
    let reply = String::from_utf8_lossy(&reply);
    assert!(
        reply.starts_with("error: ") && reply.contains(UNIX_ONLY),
        "{reply:?}"
    );
    tcp_err(caddr, "done", "unknown command");
    thread::sleep(Duration::from_millis(300));
    assert!(q.try_exit().is_none(), "quill exited: {}", q.stderr());
    assert!(!written.exists(), "a file was written over TCP");
    assert_eq!(tcp_ok(caddr, "pid"), format!("{}\n", q.pid));
    assert_eq!(greet_name(q.port), "b");
}

// === levels ===

#[test]
fn tcp_control_read_level_cannot_drain_a_server() {
    let backend = greet("b");
    let (q, caddr) = start_toml("control_level = \"read\"", backend.addr());
    wait_tcp_ctl(&q, caddr, None);
    // Read: state, settings, sessions.
    for line in [
        "servers",
        "status",
        "recent",
        "connections",
        "pid",
        "blacklist",
        "mode",
    ] {
        tcp_ok(caddr, line);
    }
    let needs = "needs control level operate (this connection has read)";
    for line in [
        "server 0 drain",
        "server 0 disable",
        "server 0 weight 5",
        "close 1",
    ] {
        tcp_err(caddr, line, needs);
    }
    tcp_err(
        caddr,
        "hash",
        "needs control level admin (this connection has read)",
    );
    let servers = tcp_ok(caddr, "servers");
    assert!(
        servers.contains("state up") && servers.contains(" weight 1 "),
        "{servers}"
    );
    assert_eq!(greet_name(q.port), "b");
}

#[test]
fn tcp_control_operate_level_cannot_add_a_server() {
    let (a, b) = (greet("a"), greet("b"));
    // Default level: operate.
    let (q, caddr) = start_tcp_ctl(&[], &[spec(a.addr())]);
    let needs = "needs control level admin (this connection has operate)";
    for line in [
        format!("server add {}", b.addr()),
        format!("server 0 address {}", b.addr().ip()),
        format!("server 0 port {}", b.addr().port()),
        "server 0 acl 1".to_string(),
        "server 0 remove".to_string(),
        "hash".to_string(),
        "no roundrobin".to_string(),
        "timeout 1".to_string(),
        "idle_timeout 1".to_string(),
        "conn_max 1".to_string(),
        "clients_max 5".to_string(),
        "acl 1 deny 127.0.0.1".to_string(),
        "client_acl 1".to_string(),
        "control_acl 1".to_string(),
        "no web_stats".to_string(),
        "no log".to_string(),
        "debug 1".to_string(),
        "reload".to_string(),
    ] {
        tcp_err(caddr, &line, needs);
    }
    // What operate may do: take servers in and out, weigh them, close a session.
    tcp_ok(caddr, "server 0 weight 3 max 10 hard 20");
    tcp_ok(caddr, "server 0 drain");
    tcp_ok(caddr, "server 0 enable");
    let servers = tcp_ok(caddr, "servers");
    assert_eq!(servers.lines().count(), 1, "a server was added: {servers}");
    assert!(
        servers.contains(&format!("port {}", a.addr().port())) && servers.contains(" weight 3 "),
        "{servers}"
    );
    assert_eq!(greet_name(q.port), "a");
}

#[test]
fn tcp_control_admin_level_must_be_granted() {
    let (a, b) = (greet("a"), greet("b"));
    let (q, caddr) = start_toml("control_level = \"admin\"", a.addr());
    wait_tcp_ctl(&q, caddr, None);
    tcp_ok(caddr, &format!("server add {}", b.addr()));
    tcp_ok(caddr, "server 0 disable");
    tcp_ok(caddr, "conn_max 100");
    tcp_ok(
        caddr,
        &format!(
            "server 1 address {} port {}",
            b.addr().ip(),
            b.addr().port()
        ),
    );
    assert_eq!(greet_name(q.port), "b");
    // Even admin never reaches files, paths or local sockets over TCP.
    let path = q.path("x.sock").display().to_string();
    for line in [
        format!("server add {path}"),
        format!("server 1 address {path}"),
        format!("listen {path}"),
        format!("write {}", q.path("w.cmds").display()),
        "exit".to_string(),
        "takeover".to_string(),
    ] {
        tcp_err(caddr, &line, UNIX_ONLY);
    }
    assert!(!q.path("x.sock").exists() && !q.path("w.cmds").exists());
}

// === the Unix socket: root and Quill's own user only ===

/// Runs `argv` as uid/gid 65534 (nobody) with `setpriv`; None when that is not possible here.
fn as_nobody(argv: &[&str]) -> Option<(i32, String, String)> {
    if rustix::process::geteuid().as_raw() != 0 {
        return None;
    }
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .find(|p| Path::new(p).exists())?;
    let dir = scratch_dir();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(argv)
        .env_remove("QUILL_SOCKET")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .ok()?;
    let status = wait_or_kill(
        &mut child,
        Duration::from_secs(10),
        &format!("{argv:?} as nobody"),
    );
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    Some((status.code().unwrap_or(-1), read(&out), read(&err)))
}

#[test]
fn unix_control_refuses_another_uid() {
    let backend = greet("b");
    let (q, sock) = start_ctl(&[], &[spec(backend.addr())]);
    // Only to reach the peer check: a socket file anyone may connect to.
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::set_permissions(q.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let s = sock.display().to_string();
    let Some((code, out, err)) = as_nobody(&[BIN, "ctl", "--socket", &s, "server", "0", "drain"])
    else {
        eprintln!("skipped: needs root and setpriv to run a client as another uid");
        return;
    };
    assert!(
        !err.contains("Permission denied"),
        "the test did not reach the peer check: {err}"
    );
    assert_eq!(code, 1, "stdout {out:?} stderr {err:?}");
    assert!(
        err.contains("denied") && err.contains("uid 65534"),
        "{err:?}"
    );
    let (code, _, err) = as_nobody(&[BIN, "ctl", "--socket", &s, "exit"]).unwrap();
    assert_eq!(code, 1, "{err}");
    // Nothing changed, and root is still served.
    let servers = ctl(&sock, "servers");
    assert!(servers.contains("state up"), "{servers}");
    assert_eq!(ctl(&sock, "pid"), format!("{}\n", q.pid));
    assert!(
        q.wait_stderr_contains("uid 65534 denied", Duration::from_secs(5)),
        "the refusal is logged: {}",
        q.stderr()
    );
}

// === the bearer token ===

fn run_ctl_env(args: &[&str], env: &[(&str, &Path)]) -> (i32, String, String) {
    let dir = scratch_dir();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let mut cmd = Command::new(BIN);
    cmd.arg("ctl")
        .args(args)
        .env_remove("QUILL_SOCKET")
        .env_remove("QUILL_TOKEN_FILE")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let status = wait_or_kill(
        &mut child,
        Duration::from_secs(10),
        &format!("quill ctl {args:?}"),
    );
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    (status.code().unwrap_or(-1), read(&out), read(&err))
}

#[test]
fn tcp_control_without_the_token_is_denied() {
    let backend = greet("b");
    let dir = scratch_dir();
    let token_file = dir.path().join("control.token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    let global = format!("control_token_file = \"{}\"", token_file.display());
    let (q, caddr) = start_toml(&global, backend.addr());
    wait_tcp_ctl(&q, caddr, Some("s3cret-token"));
    for line in [
        "servers",
        "server 0 drain",
        "auth wrong servers",
        "auth s3cret-tokeN servers",
        "auth s3cret-token- servers",
        "auth  servers",
        "auth",
    ] {
        assert_eq!(ctl_tcp(caddr, line).unwrap(), "error: denied\n", "{line:?}");
    }
    // The refusal arrives even when the client sends more before reading (no reset).
    let mut bytes = b"servers\n".to_vec();
    bytes.extend(vec![b'z'; 256 * 1024]);
    let s = TcpStream::connect(caddr).unwrap();
    set_timeouts(&s, CTL_TIMEOUT);
    assert_eq!(send_all_then_read(s, &bytes).unwrap(), "error: denied\n");
    assert!(tcp_ok(caddr, "auth s3cret-token servers").contains("state up"));
    tcp_ok(caddr, "auth s3cret-token server 0 weight 2");
    // The token does not raise the level.
    tcp_err(caddr, "auth s3cret-token hash", "needs control level admin");
    // quill ctl: --token-file, or $QUILL_TOKEN_FILE.
    let c = caddr.to_string();
    let t = token_file.display().to_string();
    let (code, out, err) = run_ctl_env(&["--socket", &c, "--token-file", &t, "pid"], &[]);
    assert_eq!((code, out), (0, format!("{}\n", q.pid)), "{err}");
    let (code, out, err) = run_ctl_env(
        &["--socket", &c, "pid"],
        &[("QUILL_TOKEN_FILE", &token_file)],
    );
    assert_eq!((code, out), (0, format!("{}\n", q.pid)), "{err}");
    let (code, _, err) = run_ctl_env(&["--socket", &c, "pid"], &[]);
    assert_eq!(code, 1);
    assert!(err.contains("denied"), "{err}");
    // A new token in the file replaces the old one.
    std::fs::write(&token_file, "another-one-longer\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while ctl_tcp(caddr, "auth another-one-longer pid").unwrap() != format!("{}\n", q.pid) {
        assert!(Instant::now() < deadline, "the new token is not taken");
        thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        ctl_tcp(caddr, "auth s3cret-token pid").unwrap(),
        "error: denied\n"
    );
}

#[test]
fn an_empty_or_missing_control_token_file_stops_quill_at_start() {
    let dir = scratch_dir();
    let empty = dir.path().join("empty.token");
    std::fs::write(&empty, "  \n").unwrap();
    let missing = dir.path().join("missing.token");
    for (file, says) in [(&empty, "empty"), (&missing, "No such file")] {
        let cfg = dir.path().join("q.toml");
        std::fs::write(
            &cfg,
            format!(
                "control = \"127.0.0.1:{}\"\ncontrol_token_file = \"{}\"\n\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{}\"\nservers = [\"127.0.0.1:9\"]\n",
                free_port(),
                file.display(),
                free_port()
            ),
        )
        .unwrap();
        let (code, err) = run_quill_expect_exit(&["--config", cfg.to_str().unwrap()]);
        assert_ne!(code, 0);
        assert!(
            err.contains("control_token_file")
                && err.contains(&file.display().to_string())
                && err.contains(says),
            "{err}"
        );
    }
}

// === D7: the control plane cannot be starved ===

trait Sock: Read + Write + Send {
    fn nonblocking(&self, on: bool) -> io::Result<()>;
}
impl Sock for TcpStream {
    fn nonblocking(&self, on: bool) -> io::Result<()> {
        self.set_nonblocking(on)
    }
}
impl Sock for UnixStream {
    fn nonblocking(&self, on: bool) -> io::Result<()> {
        self.set_nonblocking(on)
    }
}

type Connect = Arc<dyn Fn() -> io::Result<Box<dyn Sock>> + Send + Sync>;

/// Holds `idle` silent connections and `slow` ones that send a byte every 500 ms (never a
/// newline), re-opening any the server closes, until stopped (at most 60 s).
struct Attack {
    stop: Arc<AtomicBool>,
    held: Arc<AtomicUsize>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Attack {
    fn start(connect: Connect, idle: usize, slow: usize) -> Attack {
        let stop = Arc::new(AtomicBool::new(false));
        let held = Arc::new(AtomicUsize::new(0));
        let (stop2, held2) = (stop.clone(), held.clone());
        let thread = thread::spawn(move || {
            let open = |c: &Connect| {
                c().ok().inspect(|s| {
                    let _ = s.nonblocking(true);
                })
            };
            let mut socks: Vec<(bool, Option<Box<dyn Sock>>)> = (0..idle + slow)
                .map(|i| (i >= idle, open(&connect)))
                .collect();
            let end = Instant::now() + Duration::from_secs(60);
            while !stop2.load(Ordering::Relaxed) && Instant::now() < end {
                let mut n = 0;
                for (slow, sock) in socks.iter_mut() {
                    let alive = match sock {
                        Some(s) => {
                            let mut buf = [0u8; 256];
                            let readable = match s.read(&mut buf) {
                                Ok(0) => false,
                                Ok(_) => true,
                                Err(e) => e.kind() == io::ErrorKind::WouldBlock,
                            };
                            readable && (!*slow || s.write(b"s").is_ok())
                        }
                        None => false,
                    };
                    if !alive {
                        *sock = open(&connect);
                    }
                    n += usize::from(sock.is_some());
                }
                held2.store(n, Ordering::Relaxed);
                for _ in 0..10 {
                    if stop2.load(Ordering::Relaxed) {
                        break;
                    }
                    thread::sleep(Duration::from_millis(50));
                }
            }
        });
        Attack {
            stop,
            held,
            thread: Some(thread),
        }
    }
}

impl Drop for Attack {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// 100 tries of `servers`, 60 ms apart (so the attack's connections time out and come back
/// meanwhile); at least 99 must be answered within 1 s.
fn legit_clients_are_answered(connect: Connect, q: &QuillProcess) {
    let attack = Attack::start(connect.clone(), 300, 300);
    let deadline = Instant::now() + Duration::from_secs(20);
    while attack.held.load(Ordering::Relaxed) < 550 {
        assert!(
            Instant::now() < deadline,
            "the attack did not get its connections"
        );
        thread::sleep(Duration::from_millis(50));
    }
    let mut slow = Vec::new();
    for i in 0..100 {
        let t = Instant::now();
        let ok = connect().and_then(|mut s| {
            s.write_all(b"servers\n")?;
            let mut reply = String::new();
            s.read_to_string(&mut reply)?;
            Ok(reply)
        });
        let took = t.elapsed();
        match ok {
            Ok(r) if r.contains("state up") && took < Duration::from_secs(1) => {}
            other => slow.push((i, took, other)),
        }
        thread::sleep(Duration::from_millis(60));
    }
    let held = attack.held.load(Ordering::Relaxed);
    drop(attack);
    assert!(slow.len() <= 1, "unanswered or late: {slow:?}");
    assert!(held >= 550, "the attack held only {held} connections");
    assert!(q.stderr().lines().count() < 5_000, "log flood");
}

#[test]
fn control_answers_while_300_idle_and_300_slow_clients_are_held() {
    let backend = greet("b");
    let (q, caddr) = start_tcp_ctl(&[], &[spec(backend.addr())]);
    let connect: Connect = Arc::new(move || {
        let s = TcpStream::connect_timeout(&caddr, Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        s.set_write_timeout(Some(Duration::from_secs(2)))?;
        Ok(Box::new(s) as Box<dyn Sock>)
    });
    legit_clients_are_answered(connect, &q);
}

#[test]
fn unix_control_answers_while_300_idle_and_300_slow_clients_are_held() {
    let backend = greet("b");
    let (q, sock) = start_ctl(&[], &[spec(backend.addr())]);
    let connect: Connect = Arc::new(move || {
        let s = UnixStream::connect(&sock)?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        s.set_write_timeout(Some(Duration::from_secs(2)))?;
        Ok(Box::new(s) as Box<dyn Sock>)
    });
    legit_clients_are_answered(connect, &q);
}

#[test]
fn control_keeps_answering_while_four_takeovers_wait_and_says_busy_beyond() {
    let backend = greet("b");
    let (q, sock) = start_ctl(&[], &[spec(backend.addr())]);
    // Four takeover handshakes that never say `done` each hold a thread for up to 60 s.
    let takers: Vec<UnixStream> = (0..4)
        .map(|_| {
            let mut s = UnixStream::connect(&sock).unwrap();
            s.write_all(b"takeover\n").unwrap();
            s
        })
        .collect();
    thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    assert_eq!(ctl(&sock, "pid"), format!("{}\n", q.pid));
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    // A fifth blocking command is told so, in a reply that is not lost to a reset.
    let mut s = UnixStream::connect(&sock).unwrap();
    s.set_read_timeout(Some(CTL_TIMEOUT)).unwrap();
    s.write_all(b"takeover\nand more bytes the server never reads\n")
        .unwrap();
    let (out, res) = try_read_until_eof(&mut s, CTL_TIMEOUT, 1 << 16);
    assert!(res.is_ok(), "{res:?}");
    assert_eq!(String::from_utf8_lossy(&out), "error: busy\n");
    // Once they give up, blocking commands run again.
    drop(takers);
    let deadline = Instant::now() + Duration::from_secs(5);
    let w = q.path("w.cmds");
    while !ctl(&sock, &format!("write {}", w.display())).is_empty() {
        assert!(
            Instant::now() < deadline,
            "still busy after the takers left"
        );
        thread::sleep(Duration::from_millis(50));
    }
    assert!(w.exists());
}

// === D14: replies are not lost to a reset ===

/// Sends all of `bytes` before reading anything, then reads the reply to the end.
fn send_all_then_read(mut s: impl Read + Write, bytes: &[u8]) -> io::Result<String> {
    s.write_all(bytes)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[test]
fn control_reply_to_an_overlong_line_is_not_lost_to_a_reset() {
    let backend = greet("b");
    let (_q, caddr) = start_tcp_ctl(&[], &[spec(backend.addr())]);
    let (_u, sock) = start_ctl(&[], &[spec(backend.addr())]);
    let expected = "error: command line longer than 4096 bytes\n";
    for size in [4097, 64 * 1024, 1 << 20] {
        let mut line = vec![b'x'; size];
        line.push(b'\n');
        for round in 0..3 {
            let s = TcpStream::connect(caddr).unwrap();
            set_timeouts(&s, CTL_TIMEOUT);
            let got = send_all_then_read(s, &line);
            assert_eq!(
                got.as_deref().ok(),
                Some(expected),
                "TCP {size} bytes, round {round}: {got:?}"
            );
            let s = UnixStream::connect(&sock).unwrap();
            s.set_read_timeout(Some(CTL_TIMEOUT)).unwrap();
            s.set_write_timeout(Some(CTL_TIMEOUT)).unwrap();
            let got = send_all_then_read(s, &line);
            assert_eq!(
                got.as_deref().ok(),
                Some(expected),
                "Unix {size} bytes, round {round}: {got:?}"
            );
        }
    }
    // A refused command followed by more bytes: its reply arrives too.
    let mut bytes = b"exit\n".to_vec();
    bytes.extend(vec![b'y'; 256 * 1024]);
    let s = TcpStream::connect(caddr).unwrap();
    set_timeouts(&s, CTL_TIMEOUT);
    let got = send_all_then_read(s, &bytes).unwrap();
    assert!(
        got.starts_with("error: ") && got.contains(UNIX_ONLY),
        "{got:?}"
    );
}

// === D17: a full descriptor table does not silence the control socket ===

#[test]
fn control_answers_when_the_data_path_has_used_every_descriptor() {
    let prlimit = PathBuf::from("/usr/bin/prlimit");
    if !prlimit.exists() || rustix::process::geteuid().as_raw() != 0 {
        eprintln!("skipped: needs /usr/bin/prlimit and root");
        return;
    }
    let holder = Holder::start();
    let (q, sock) = start_ctl(&[], &[spec(holder.addr())]);
    // 100 sessions hold about 200 descriptors, numbered from the lowest free one up...
    let clients: Vec<TcpStream> = (0..100).map(|_| connect(q.addr())).collect();
    assert!(
        holder.wait_count(100, Duration::from_secs(10)),
        "sessions not established"
    );
    // ...so with the limit lowered under them, every new descriptor fails with EMFILE.
    let status = Command::new(&prlimit)
        .args(["--pid", &q.pid.to_string(), "--nofile=64:64"])
        .status()
        .unwrap();
    assert!(status.success(), "prlimit failed");
    let probe = TcpStream::connect(q.addr()).unwrap();
    assert!(
        q.wait_stderr_contains("Too many open files", Duration::from_secs(10)),
        "the data path did not run out of descriptors: {}",
        q.stderr()
    );
    thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let reply = try_ctl(&sock, "pid");
    assert_eq!(
        reply.as_deref().ok(),
        Some(format!("{}\n", q.pid).as_str()),
        "{reply:?} after {:?}; stderr: {}",
        t.elapsed(),
        q.stderr()
    );
    assert!(
        q.stderr()
            .contains("serving one client with the reserved descriptor"),
        "the control socket was not short of descriptors: {}",
        q.stderr()
    );
    // The reserve is taken again once that client is gone: a second one is served too.
    assert_eq!(ctl(&sock, "pid"), format!("{}\n", q.pid));
    drop((clients, probe));
}
