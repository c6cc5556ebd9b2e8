//! Helpers for the control-socket tests (tests/control/control.rs, tests/security/control.rs,
//! tests/core/acl.rs, ...): start Quill with a control socket (Unix or TCP), talk Pen's framing to
//! it (write one line, read the reply to EOF), run `quill ctl`, and connect from another loopback
//! source address. Declared once per test binary, in its main.rs, next to `support`.

use std::fs;
use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

/// How long one control exchange may take (replies come at once; this only bounds a broken test).
pub const CTL_TIMEOUT: Duration = Duration::from_secs(5);

/// Quill with a Unix control socket at DIR/ctl.sock; access log at DIR/access.log.
pub fn start_ctl(opts: &[&str], servers: &[String]) -> (QuillProcess, PathBuf) {
    let q = Quill::start_with(|dir, port| {
        let sock = dir.join("ctl.sock").display().to_string();
        let mut o: Vec<&str> = vec!["-C", &sock];
        o.extend_from_slice(opts);
        pen_args(dir, port, &o, servers)
    });
    let sock = q.path("ctl.sock");
    wait_ctl(&q, &sock);
    (q, sock)
}

/// Waits (bounded) until the control socket answers `pid` with Quill's pid.
pub fn wait_ctl(q: &QuillProcess, sock: &Path) {
    let deadline = Instant::now() + READY_TIMEOUT;
    for _ in 0..1000 {
        if let Ok(reply) = try_ctl(sock, "pid") {
            assert_eq!(
                reply.trim(),
                q.pid.to_string(),
                "pid over {}",
                sock.display()
            );
            return;
        }
        assert!(
            Instant::now() < deadline,
            "control socket {} not answering; stderr:\n{}",
            sock.display(),
            q.stderr()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// One exchange over the Unix socket: write `line` and a newline, read the reply until EOF.
pub fn try_ctl(sock: &Path, line: &str) -> io::Result<String> {
    let mut s = UnixStream::connect(sock)?;
    s.set_read_timeout(Some(CTL_TIMEOUT))?;
    s.set_write_timeout(Some(CTL_TIMEOUT))?;
    exchange(&mut s, line)
}

fn exchange(s: &mut (impl io::Read + Write), line: &str) -> io::Result<String> {
    s.write_all(format!("{line}\n").as_bytes())?;
    let (out, res) = try_read_until_eof(s, CTL_TIMEOUT, 4 << 20);
    res?;
    String::from_utf8(out).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// [`try_ctl`] that fails the test when the socket does not answer.
pub fn ctl(sock: &Path, line: &str) -> String {
    try_ctl(sock, line).unwrap_or_else(|e| panic!("control {line:?} over {}: {e}", sock.display()))
}

/// A command that must succeed: its reply is not an error.
pub fn ctl_ok(sock: &Path, line: &str) -> String {
    let reply = ctl(sock, line);
    assert!(
        !reply.starts_with("error:"),
        "{line:?} should succeed, got {reply:?}"
    );
    reply
}

/// A command that must fail with one error line containing `needle`; returns that line.
pub fn ctl_err(sock: &Path, line: &str, needle: &str) -> String {
    let reply = ctl(sock, line);
    assert!(
        reply.starts_with("error: ") && reply.ends_with('\n') && reply.lines().count() == 1,
        "{line:?} should get one error line, got {reply:?}"
    );
    assert!(
        reply.contains(needle),
        "{line:?}: error should name {needle:?}: {reply:?}"
    );
    reply
}

/// One exchange over TCP from the default source address.
pub fn ctl_tcp(addr: SocketAddr, line: &str) -> io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, CTL_TIMEOUT)?;
    set_timeouts(&s, CTL_TIMEOUT);
    exchange(&mut s, line)
}

/// One exchange over TCP from the loopback source address `src` (e.g. 127.0.0.2).
pub fn ctl_tcp_from(src: IpAddr, addr: SocketAddr, line: &str) -> io::Result<String> {
    let mut s = connect_from(src, addr)?;
    exchange(&mut s, line)
}

/// Connects to `dst` from the local address `src` (port chosen by the kernel), with timeouts set.
pub fn connect_from(src: IpAddr, dst: SocketAddr) -> io::Result<TcpStream> {
    let domain = socket2::Domain::for_address(dst);
    let s = socket2::Socket::new(domain, socket2::Type::STREAM, None)?;
    s.bind(&SocketAddr::new(src, 0).into())?;
    s.connect_timeout(&dst.into(), CTL_TIMEOUT)?;
    let s: TcpStream = s.into();
    set_timeouts(&s, IO_TIMEOUT);
    Ok(s)
}

/// The first line a Greet backend sends through Quill to a client from `src`, or None when Quill
/// closed the connection without one (a denied client).
pub fn greet_from(src: IpAddr, dst: SocketAddr) -> Option<String> {
    let mut s = connect_from(src, dst).unwrap_or_else(|e| panic!("connect {src} -> {dst}: {e}"));
    try_read_line(&mut s).ok()
}

/// Runs `quill ctl ARGS` with `QUILL_SOCKET` set to `env_socket` (or unset); bounded.
/// Returns (exit code, stdout, stderr).
pub fn run_ctl(env_socket: Option<&Path>, args: &[&str]) -> (i32, String, String) {
    let dir = scratch_dir();
    let (out_path, err_path) = (dir.path().join("out"), dir.path().join("err"));
    let mut cmd = Command::new(BIN);
    cmd.arg("ctl")
        .args(args)
        .env_remove("QUILL_SOCKET")
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out_path).unwrap())
        .stderr(fs::File::create(&err_path).unwrap());
    if let Some(p) = env_socket {
        cmd.env("QUILL_SOCKET", p);
    }
    let mut child = cmd.spawn().expect("spawn quill ctl");
    let status = wait_or_kill(
        &mut child,
        Duration::from_secs(10),
        &format!("quill ctl {args:?}"),
    );
    let read = |p: &Path| strip_ansi(&fs::read_to_string(p).unwrap_or_default());
    let code = status
        .code()
        .unwrap_or_else(|| panic!("quill ctl {args:?} killed: {status}"));
    (code, read(&out_path), read(&err_path))
}

/// `quill ctl --socket SOCK ARGS`, expected to succeed; returns stdout.
pub fn quill_ctl(sock: &Path, args: &[&str]) -> String {
    let sock = sock.display().to_string();
    let mut all = vec!["--socket", &sock];
    all.extend_from_slice(args);
    let (code, out, err) = run_ctl(None, &all);
    assert_eq!(code, 0, "quill ctl {all:?}: stdout {out:?}, stderr {err:?}");
    out
}

/// One parsed line of `servers`: the words after the index, as (key, value) pairs in order.
pub fn server_fields(line: &str) -> Vec<(String, String)> {
    let words: Vec<&str> = line.split_whitespace().collect();
    words[1..]
        .chunks(2)
        .map(|kv| (kv[0].to_string(), kv.get(1).unwrap_or(&"").to_string()))
        .collect()
}

/// The value of `key` on line `index` of a `servers` reply.
pub fn server_field(servers: &str, index: usize, key: &str) -> String {
    let line = servers
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&index.to_string()))
        .unwrap_or_else(|| panic!("no server {index} in {servers:?}"));
    server_fields(line)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no {key} on {line:?}"))
}

/// Backend names seen by `n` clients connecting one after the other (each closed at once).
pub fn names(port: u16, n: usize) -> Vec<String> {
    (0..n).map(|_| greet_name(port)).collect()
}

/// Quill with TCP control on a free loopback port and `extra` options; returns it and the control
/// address once it answers.
pub fn start_tcp_ctl(extra: &[&str], servers: &[String]) -> (QuillProcess, SocketAddr) {
    let caddr = std::cell::Cell::new(SocketAddr::from(([127, 0, 0, 1], 0)));
    let q = Quill::start_with(|dir, port| {
        caddr.set(SocketAddr::from(([127, 0, 0, 1], free_port())));
        let c = caddr.get().to_string();
        let mut opts = vec!["-C", c.as_str()];
        opts.extend_from_slice(extra);
        pen_args(dir, port, &opts, servers)
    });
    let caddr = caddr.get();
    wait_tcp_ctl(&q, caddr, None);
    (q, caddr)
}

/// Waits (bounded) until the TCP control socket at `caddr` answers `pid` with this process's pid
/// (sent as `auth TOKEN pid` when `auth` is given).
pub fn wait_tcp_ctl(q: &QuillProcess, caddr: SocketAddr, auth: Option<&str>) {
    let line = match auth {
        Some(t) => format!("auth {t} pid"),
        None => "pid".to_string(),
    };
    let deadline = Instant::now() + READY_TIMEOUT;
    while ctl_tcp(caddr, &line).ok() != Some(format!("{}\n", q.pid)) {
        assert!(
            Instant::now() < deadline,
            "TCP control {caddr} not answering; stderr:\n{}",
            q.stderr()
        );
        thread::sleep(Duration::from_millis(20));
    }
}
