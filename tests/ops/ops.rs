//! Operating Quill day to day: log rotation that changes nothing else (SIGUSR2, `quill ctl reopen`,
//! `log PATH` on the same path), reloads that keep what the operator changed at run time unless
//! the sources changed the same thing (Pen's command line, a TOML file, a `-F` file), `--help` on
//! every subcommand, and the demo's backlog and printed hints.

use crate::ctl;
use crate::support;

use std::fs;
use std::net::{Shutdown, SocketAddr};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ctl::*;
use support::*;

/// One greet session through Quill that sends `msg` and half-closes; returns the backend's name.
fn session(port: u16, msg: &[u8]) -> String {
    let (name, mut s) = greet_session(port);
    echo_roundtrip(&mut s, msg);
    s.shutdown(Shutdown::Write).unwrap();
    read_until_eof(&mut s, Duration::from_secs(5));
    name
}

/// Runs sessions of a distinctive size (bounded) until one is logged in a new file at `log`.
fn wait_new_log_file(q: &QuillProcess, log: &Path, after: &str) {
    let msg = b"a line for the new file, 36 bytes..\n";
    let deadline = Instant::now() + Duration::from_secs(10);
    for i in 0..50 {
        session(q.port, msg);
        let found = wait_log(log, Duration::from_millis(300), |ls| {
            ls.iter().any(|l| l.bytes_in == msg.len() as u64)
        });
        if found.is_ok() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no new access log at {} after {after} ({i} sessions); stderr:\n{}",
            log.display(),
            q.stderr()
        );
    }
    panic!("no new access log at {} after {after}", log.display());
}

/// Logs one session, then moves the access log away as logrotate does; returns the new name.
fn log_then_rotate(q: &QuillProcess) -> PathBuf {
    let log = q.log_path();
    session(q.port, b"one\n");
    wait_log_line(&log, Duration::from_secs(5), |l| l.bytes_in == 4);
    let rotated = q.path("access.log.1");
    fs::rename(&log, &rotated).unwrap();
    rotated
}

fn state(sock: &Path, index: usize) -> String {
    server_field(&ctl(sock, "servers"), index, "state")
}

/// Waits (bounded) for `needle` on stderr and returns the stderr line holding it.
fn stderr_line(q: &QuillProcess, needle: &str) -> String {
    assert!(
        q.wait_stderr_contains(needle, Duration::from_secs(10)),
        "no {needle:?} on stderr:\n{}",
        q.stderr()
    );
    q.stderr()
        .lines()
        .rfind(|l| l.contains(needle))
        .unwrap_or_default()
        .to_string()
}

// ---------------------------------------------------------------------------------------------
// Log rotation
// ---------------------------------------------------------------------------------------------

#[test]
fn sigusr2_reopens_the_access_log_without_undoing_a_drain() {
    let (a, b) = (greet("a"), greet("b"));
    let (mut q, sock) = start_ctl(&["-r", "--workers", "2"], &[spec(a.addr()), spec(b.addr())]);
    ctl_ok(&sock, "server 1 drain");
    let rotated = log_then_rotate(&q);
    q.signal("USR2");
    wait_new_log_file(&q, &q.log_path(), "SIGUSR2");
    assert!(
        q.try_exit().is_none(),
        "quill died on SIGUSR2:\n{}",
        q.stderr()
    );
    assert_eq!(state(&sock, 1), "drain", "SIGUSR2 must not reload");
    assert_eq!(session(q.port, b"x\n"), "a", "the drained server stays out");
    let err = q.stderr();
    assert!(err.contains("SIGUSR2: access log reopened"), "{err}");
    assert!(!err.contains("reloaded"), "{err}");
    assert!(
        read_access_log(&rotated).iter().any(|l| l.bytes_in == 4),
        "the first session stays in the rotated file"
    );
}

#[test]
fn ctl_reopen_reopens_the_access_log_after_a_move() {
    let a = greet("a");
    let (q, sock) = start_ctl(&["--workers", "2"], &[spec(a.addr())]);
    ctl_ok(&sock, "roundrobin");
    log_then_rotate(&q);
    let reply = quill_ctl(&sock, &["reopen"]);
    assert_eq!(
        reply,
        format!("reopened: {}\n", q.log_path().display()),
        "{reply}"
    );
    wait_new_log_file(&q, &q.log_path(), "quill ctl reopen");
    assert_eq!(
        ctl(&sock, "mode").trim(),
        "roundrobin",
        "reopen is no reload"
    );
    ctl_err(&sock, "reopen now", "unexpected argument 'now'");
}

#[test]
fn log_same_path_reopens_after_a_move() {
    let a = greet("a");
    let (q, sock) = start_ctl(&["--workers", "2"], &[spec(a.addr())]);
    log_then_rotate(&q);
    ctl_ok(&sock, &format!("log {}", q.log_path().display()));
    wait_new_log_file(&q, &q.log_path(), "log PATH (the same path)");
}

// ---------------------------------------------------------------------------------------------
// Reload keeps runtime changes: Pen's command line
// ---------------------------------------------------------------------------------------------

#[test]
fn reload_keeps_a_server_drained_at_run_time() {
    let (a, b) = (greet("a"), greet("b"));
    let (q, sock) = start_ctl(&["-r"], &[spec(a.addr()), spec(b.addr())]);
    ctl_ok(&sock, "server 1 drain");
    q.signal("HUP");
    let line = stderr_line(&q, "SIGHUP: reloaded");
    assert!(line.ends_with("SIGHUP: reloaded: no change"), "{line}");
    assert_eq!(state(&sock, 1), "drain", "{}", q.stderr());
    assert_eq!(session(q.port, b"x\n"), "a");
    assert_eq!(session(q.port, b"x\n"), "a");
    // The operator brings it back; a reload keeps that too.
    ctl_ok(&sock, "server 1 enable");
    assert_eq!(quill_ctl(&sock, &["reload"]), "reloaded: no change\n");
    assert_eq!(state(&sock, 1), "up");
}

#[test]
fn reload_keeps_a_runtime_mode_change() {
    let (a, b) = (greet("a"), greet("b"));
    // Pen's default: client tracking.
    let (q, sock) = start_ctl(&[], &[spec(a.addr()), spec(b.addr())]);
    assert_eq!(ctl(&sock, "mode").trim(), "tracking");
    let default_timeout = ctl(&sock, "timeout");
    ctl_ok(&sock, "roundrobin");
    ctl_ok(&sock, "timeout 7");
    let timeout = ctl(&sock, "timeout");
    assert_ne!(timeout, default_timeout);
    q.signal("HUP");
    stderr_line(&q, "SIGHUP: reloaded");
    assert_eq!(ctl(&sock, "mode").trim(), "roundrobin", "{}", q.stderr());
    assert_eq!(
        ctl(&sock, "timeout"),
        timeout,
        "a runtime timeout survives too"
    );
    let names: Vec<String> = (0..4).map(|_| session(q.port, b"x\n")).collect();
    assert!(names.iter().any(|n| n == "b"), "round robin: {names:?}");
}

#[test]
fn reload_keeps_a_server_removed_at_run_time() {
    let (a, b, c) = (greet("a"), greet("b"), greet("c"));
    let (q, sock) = start_ctl(&["-r"], &[spec(a.addr()), spec(b.addr()), spec(c.addr())]);
    ctl_ok(&sock, "server 1 remove");
    q.signal("HUP");
    stderr_line(&q, "SIGHUP: reloaded");
    let servers = ctl(&sock, "servers");
    assert_eq!(servers.lines().count(), 2, "{servers}");
    assert!(
        !servers.contains(&format!("port {} ", b.addr().port())),
        "{servers}"
    );
    let names: Vec<String> = (0..4).map(|_| session(q.port, b"x\n")).collect();
    assert!(!names.iter().any(|n| n == "b"), "{names:?}");
}

// ---------------------------------------------------------------------------------------------
// Reload keeps runtime changes: a TOML file
// ---------------------------------------------------------------------------------------------

fn write_toml(path: &Path, body: &str) {
    // Written then renamed, so a reload never reads half a file.
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, body).unwrap();
    fs::rename(&tmp, path).unwrap();
}

/// A one-listener TOML file on `port` with `servers` (TOML values, e.g. `"HOST:PORT"`).
fn toml(port: u16, servers: &[String]) -> String {
    format!(
        "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nmode = [\"roundrobin\"]\nservers = [{}]\n",
        servers.join(", ")
    )
}

fn quoted(addr: SocketAddr) -> String {
    format!("\"{addr}\"")
}

/// Quill on DIR/q.toml (written by `body(port)`), control socket DIR/ctl.sock.
fn start_toml(body: impl Fn(u16) -> String) -> (QuillProcess, PathBuf, PathBuf) {
    let q = Quill::start_with(|dir, port| {
        write_toml(&dir.join("q.toml"), &body(port));
        vec![
            "--config".into(),
            dir.join("q.toml").display().to_string(),
            "-C".into(),
            dir.join("ctl.sock").display().to_string(),
        ]
    });
    let sock = q.path("ctl.sock");
    wait_ctl(&q, &sock);
    let conf = q.path("q.toml");
    (q, sock, conf)
}

/// `servers` as `HOST:PORT` in order.
fn server_addrs(sock: &Path) -> Vec<String> {
    let servers = ctl(sock, "servers");
    (0..servers.lines().count())
        .map(|i| {
            format!(
                "{}:{}",
                server_field(&servers, i, "addr"),
                server_field(&servers, i, "port")
            )
        })
        .collect()
}

#[test]
fn reload_keeps_a_server_added_at_run_time() {
    let (a, b, c, d) = (greet("a"), greet("b"), greet("c"), greet("d"));
    let (q, sock, conf) = start_toml(|port| toml(port, &[quoted(a.addr()), quoted(b.addr())]));
    ctl_ok(&sock, &format!("server add {}:0:0:3", c.addr()));
    ctl_ok(&sock, &format!("server add {}:0:0:4", d.addr()));
    assert_eq!(quill_ctl(&sock, &["reload"]), "reloaded: no change\n");
    let want = |v: &[&support::DemoServer]| -> Vec<String> {
        v.iter().map(|s| s.addr().to_string()).collect()
    };
    assert_eq!(server_addrs(&sock), want(&[&a, &b, &c, &d]));
    assert_eq!(server_field(&ctl(&sock, "servers"), 2, "weight"), "3");
    // The file now names d itself, with its own weight: d is the file's server from then on
    // (still once), and c, which only the operator added, stays.
    let port = q.port;
    let d_in_file = format!("{{ address = \"{}\", weight = 9 }}", d.addr());
    write_toml(
        &conf,
        &toml(port, &[quoted(a.addr()), quoted(b.addr()), d_in_file]),
    );
    let reply = quill_ctl(&sock, &["reload"]);
    assert!(
        reply.contains(&format!("server {} changed", d.addr())),
        "{reply}"
    );
    assert_eq!(server_addrs(&sock), want(&[&a, &b, &c, &d]));
    let servers = ctl(&sock, "servers");
    assert_eq!(server_field(&servers, 2, "weight"), "3", "{servers}");
    assert_eq!(server_field(&servers, 3, "weight"), "9", "{servers}");
}

#[test]
fn reload_applies_a_weight_the_file_changed_even_if_changed_at_run_time() {
    let (a, b) = (greet("a"), greet("b"));
    let a_with = |w: u32| format!("{{ address = \"{}\", weight = {w} }}", a.addr());
    let (q, sock, conf) = start_toml(|port| toml(port, &[a_with(2), quoted(b.addr())]));
    ctl_ok(&sock, "server 0 weight 5 max 40");
    ctl_ok(&sock, "server 1 drain");
    write_toml(&conf, &toml(q.port, &[a_with(7), quoted(b.addr())]));
    q.signal("HUP");
    let line = stderr_line(&q, "SIGHUP: reloaded");
    assert!(
        line.contains(&format!("'web': server {} changed", a.addr())),
        "the reload says what changed: {line}"
    );
    let servers = ctl(&sock, "servers");
    assert_eq!(
        server_field(&servers, 0, "weight"),
        "7",
        "the file's new weight wins"
    );
    assert_eq!(
        server_field(&servers, 0, "max"),
        "40",
        "the file did not touch max"
    );
    assert_eq!(server_field(&servers, 1, "state"), "drain", "{servers}");
}

// ---------------------------------------------------------------------------------------------
// Reload keeps runtime changes: a `-F` command file
// ---------------------------------------------------------------------------------------------

#[test]
fn reload_applies_what_the_command_file_changed_and_keeps_the_rest() {
    let (a, b) = (greet("a"), greet("b"));
    let q = Quill::start_with(|dir, port| {
        fs::write(dir.join("pen.cmds"), "server 0 weight 2\n").unwrap();
        let cmds = dir.join("pen.cmds").display().to_string();
        let sock = dir.join("ctl.sock").display().to_string();
        pen_args(
            dir,
            port,
            &["-F", &cmds, "-C", &sock],
            &[spec(a.addr()), spec(b.addr())],
        )
    });
    let sock = q.path("ctl.sock");
    wait_ctl(&q, &sock);
    ctl_ok(&sock, "server 1 disable");
    ctl_ok(&sock, "server 0 weight 4");
    ctl_ok(&sock, "hash");
    fs::write(q.path("pen.cmds"), "server 0 weight 2\nroundrobin\n").unwrap();
    let reply = quill_ctl(&sock, &["reload"]);
    assert_eq!(reply, "reloaded: 'default': mode roundrobin hash\n");
    let servers = ctl(&sock, "servers");
    assert_eq!(server_field(&servers, 0, "weight"), "4", "{servers}");
    assert_eq!(server_field(&servers, 1, "state"), "disabled", "{servers}");
}

// ---------------------------------------------------------------------------------------------
// Help on every subcommand
// ---------------------------------------------------------------------------------------------

#[test]
fn ctl_help_prints_help_without_a_socket() {
    for flag in ["--help", "-h"] {
        let (code, out, err) = run_ctl(None, &[flag]);
        assert_eq!(code, 0, "quill ctl {flag}: {err}");
        assert!(out.contains("Usage: quill ctl"), "{out}");
        assert!(out.contains("--socket"), "{out}");
        assert!(err.is_empty(), "{err}");
    }
}

#[test]
fn ctl_socket_then_help_prints_help_and_sends_nothing() {
    let dir = scratch_dir();
    let path = dir.path().join("s.sock");
    let listener = UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let (code, out, err) = run_ctl(None, &["--socket", path.to_str().unwrap(), "--help"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Usage: quill ctl"), "{out}");
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "quill ctl --help connected to the socket"
    );
}

#[test]
fn demo_and_check_help_print_help() {
    for (sub, usage) in [
        ("demo", "Usage: quill demo"),
        ("check", "Usage: quill check"),
    ] {
        for flag in ["--help", "-h"] {
            let (code, out, err) = run_quill_output(&[sub, flag]);
            assert_eq!(code, 0, "quill {sub} {flag}: {err}");
            assert!(out.contains(usage), "quill {sub} {flag}: {out}");
        }
    }
}

#[test]
fn every_subcommand_prints_help_with_h_and_help() {
    for sub in [
        &["bench"][..],
        &["generate"],
        &["generate", "man"],
        &["generate", "completions"],
    ] {
        let usage = format!("Usage: quill {}", sub.join(" "));
        for flag in ["--help", "-h"] {
            let mut args = sub.to_vec();
            args.push(flag);
            let (code, out, err) = run_quill_output(&args);
            assert_eq!(code, 0, "quill {args:?}: {err}");
            assert!(out.contains(&usage), "quill {args:?}: {out}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The demo
// ---------------------------------------------------------------------------------------------

/// Removes the demo's control socket (the process is killed, not stopped, when a test ends).
fn remove_demo_socket(out: &str) {
    if let Some(sock) = out
        .split_whitespace()
        .skip_while(|w| *w != "--socket")
        .nth(1)
    {
        let _ = fs::remove_file(sock);
    }
}

#[test]
fn demo_prints_a_linux_command_for_the_status_page() {
    let (_q, out) = start_demo();
    remove_demo_socket(&out);
    let line = out
        .lines()
        .find(|l| l.contains("status page"))
        .unwrap_or_else(|| panic!("no status page hint:\n{out}"));
    assert!(
        line.trim_start().starts_with("xdg-open http://127.0.0.1:"),
        "{line}"
    );
    assert!(!out.contains("  open http"), "{out}");
}

#[test]
fn demo_backends_listen_with_the_listener_backlog() {
    let (_q, out) = start_demo();
    remove_demo_socket(&out);
    // "... over 3 demo backends (127.0.0.1:P1, 127.0.0.1:P2, 127.0.0.1:P3), ..."
    let list = out
        .split_once("demo backends (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(list, _)| list.to_string())
        .unwrap_or_else(|| panic!("no backend list:\n{out}"));
    let backends: Vec<SocketAddr> = list.split(", ").map(|a| a.parse().unwrap()).collect();
    assert_eq!(backends.len(), 3, "{list}");
    // The kernel caps a backlog at somaxconn; Quill's listener default is 1024.
    let somaxconn: u32 = fs::read_to_string("/proc/sys/net/core/somaxconn")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let want = 1024.min(somaxconn);
    for b in backends {
        // `ss -ltn`: for a listening socket, Send-Q is its backlog.
        let ss = std::process::Command::new("ss")
            .args(["-Hltn", &format!("sport = :{}", b.port())])
            .output()
            .expect("run ss");
        let text = String::from_utf8_lossy(&ss.stdout).into_owned();
        let send_q = text
            .split_whitespace()
            .nth(2)
            .unwrap_or_else(|| panic!("no listening socket on {b} in ss output: {text:?}"));
        assert_eq!(
            send_q,
            want.to_string(),
            "backlog of demo backend {b}: {text}"
        );
    }
}
