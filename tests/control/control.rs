//! The control socket (docs/design.md#control-protocol): Pen's framing over a Unix socket (mode
//! 0600) or loopback TCP, `quill ctl`, the safety rules, and every penctl command group: settings,
//! servers, sessions, process, files (`write`, `-F`, `include`), JSON replies and several
//! listeners. Backends are Greet servers, so the first line a client reads names the server it
//! reached.

use crate::ctl;
use crate::support;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use ctl::*;
use support::*;

const OTHER_LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

fn greeters(names: &[&str]) -> (Vec<DemoServer>, Vec<String>) {
    let servers: Vec<DemoServer> = names.iter().map(|n| greet(n)).collect();
    let specs = servers.iter().map(|s| spec(s.addr())).collect();
    (servers, specs)
}

// === transport ===

#[test]
fn control_unix_socket_is_mode_0600_and_answers_raw_framing_and_quill_ctl() {
    let (_b, specs) = greeters(&["a"]);
    let (q, sock) = start_ctl(&[], &specs);
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "socket mode is {:o}", mode & 0o777);
    // nc -U style: one line in, the reply until the server closes.
    assert_eq!(ctl(&sock, "pid"), format!("{}\n", q.pid));
    assert_eq!(quill_ctl(&sock, &["pid"]), format!("{}\n", q.pid));
    let servers = quill_ctl(&sock, &["servers"]);
    assert!(servers.starts_with("0 addr 127.0.0.1 port "), "{servers:?}");
    match nc_unix(&sock, "pid\n") {
        Some(out) => assert_eq!(out, format!("{}\n", q.pid)),
        None => eprintln!("nc not found: skipped the nc -U exchange"),
    }
}

/// `printf LINE | nc -U SOCK` (OpenBSD netcat), bounded; None when nc is not installed.
fn nc_unix(sock: &Path, input: &str) -> Option<String> {
    use std::process::{Command, Stdio};
    let mut child = Command::new("nc")
        .arg("-U")
        .arg(sock)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(input.as_bytes()).ok()?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while child.try_wait().ok()?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("nc -U {} did not exit after the reply", sock.display());
        }
        thread::sleep(Duration::from_millis(10));
    }
    let mut out = String::new();
    child.stdout.take()?.read_to_string(&mut out).ok()?;
    Some(out)
}

#[test]
fn control_tcp_on_loopback_answers_raw_framing_and_quill_ctl() {
    let (_b, specs) = greeters(&["a"]);
    let (q, caddr) = start_tcp_ctl(&[], &specs);
    assert_eq!(ctl_tcp(caddr, "pid").unwrap(), format!("{}\n", q.pid));
    let out = quill_ctl(Path::new(&caddr.to_string()), &["servers"]);
    assert!(out.starts_with("0 addr 127.0.0.1 port "), "{out:?}");
    // A bare port means a loopback port, for `-C` and for `quill ctl --socket` alike.
    let bare = quill_ctl(Path::new(&caddr.port().to_string()), &["pid"]);
    assert_eq!(bare, format!("{}\n", q.pid));
}

#[test]
fn control_on_all_addresses_without_control_acl_is_refused_at_start() {
    let port = free_port();
    let control = format!("0.0.0.0:{}", free_port());
    let listen = format!("127.0.0.1:{port}");
    let (code, err) = run_quill_expect_exit(&["-C", &control, &listen, "127.0.0.1:9"]);
    assert_eq!(code, 2, "stderr:\n{err}");
    assert!(err.contains(&control), "message names {control}: {err}");
    assert!(err.contains("control_acl"), "message names the fix: {err}");
}

#[test]
fn control_acl_denies_a_tcp_client_from_a_denied_address() {
    let (_b, specs) = greeters(&["a"]);
    let (q, caddr) = start_tcp_ctl(
        &["-O", "acl 1 deny 127.0.0.2", "-O", "control_acl 1"],
        &specs,
    );
    let denied = ctl_tcp_from(OTHER_LOOPBACK, caddr, "pid").expect("denied client gets a reply");
    assert_eq!(denied, "error: denied\n");
    let allowed = ctl_tcp_from(IpAddr::V4(Ipv4Addr::LOCALHOST), caddr, "pid").unwrap();
    assert_eq!(allowed, format!("{}\n", q.pid));
}

#[test]
fn file_naming_commands_are_refused_over_tcp() {
    let (_b, specs) = greeters(&["a"]);
    let (q, caddr) = start_tcp_ctl(&[], &specs);
    let target = q.path("made-over-tcp");
    let t = target.display().to_string();
    std::fs::write(q.path("cmds"), "server 0 weight 9\n").unwrap();
    let include = q.path("cmds").display().to_string();
    for line in [
        format!("write {t}"),
        format!("log {t}"),
        format!("web_stats {t}"),
        format!("include {include}"),
        "write".to_string(),
    ] {
        let reply = ctl_tcp(caddr, &line).unwrap();
        assert!(
            reply.starts_with("error: ") && reply.contains("needs the Unix control socket"),
            "{line:?} over TCP: {reply:?}"
        );
    }
    assert!(!target.exists(), "a file was made over TCP");
    let servers = ctl_tcp(caddr, "servers").unwrap();
    assert!(
        servers.contains(" weight 1 "),
        "include ran over TCP: {servers}"
    );
    // `no web_stats` names no file, but changes a setting: admin level, not the default operate.
    let reply = ctl_tcp(caddr, "no web_stats").unwrap();
    assert!(reply.contains("needs control level admin"), "{reply:?}");
}

#[test]
fn quill_ctl_without_socket_uses_quill_socket_env() {
    let (_b, specs) = greeters(&["a"]);
    let (q, sock) = start_ctl(&[], &specs);
    let (code, out, err) = run_ctl(Some(&sock), &["pid"]);
    assert_eq!((code, out.clone()), (0, format!("{}\n", q.pid)), "{err}");
}

#[test]
fn quill_ctl_unreachable_socket_exits_1_naming_it() {
    let dir = scratch_dir();
    let missing = dir.path().join("nobody.sock");
    let m = missing.display().to_string();
    let (code, out, err) = run_ctl(None, &["--socket", &m, "servers"]);
    assert_eq!(code, 1, "stdout {out:?} stderr {err:?}");
    assert!(err.contains(&m), "message names the socket: {err}");
    let refused = refused_addr().to_string();
    let (code, _, err) = run_ctl(None, &["--socket", &refused, "pid"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&refused), "{err}");
    // Without --socket and $QUILL_SOCKET: the documented default path.
    let (code, _, err) = run_ctl(None, &["pid"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("/run/quill/quill.sock"), "{err}");
}

#[test]
fn unknown_or_malformed_commands_get_one_error_line_and_ctl_exits_1() {
    let (_b, specs) = greeters(&["a"]);
    let (_q, sock) = start_ctl(&[], &specs);
    ctl_err(&sock, "frobnicate", "frobnicate");
    ctl_err(&sock, "server x weight 2", "'x'");
    ctl_err(&sock, "server 0 colour red", "colour");
    ctl_err(&sock, "server 5 weight 2", "server 5");
    ctl_err(&sock, "blacklist soon", "soon");
    ctl_err(&sock, "tcp_fastclose sideways", "sideways");
    ctl_err(&sock, "pid now", "now");
    ctl_err(&sock, "no servers", "no servers");
    ctl_err(&sock, "", "empty");
    let s = sock.display().to_string();
    let (code, out, err) = run_ctl(None, &["--socket", &s, "frobnicate"]);
    assert_eq!(code, 1, "stdout {out:?}");
    assert!(out.is_empty(), "an error prints nothing on stdout: {out:?}");
    assert!(err.contains("unknown command 'frobnicate'"), "{err}");
}

/// A control connection that gets no reply line ended one way or the other, without hanging.
fn garbage_exchange(sock: &Path, bytes: &[u8]) -> String {
    let mut s = UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(CTL_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(CTL_TIMEOUT)).unwrap();
    let _ = s.write_all(bytes);
    let (out, _) = try_read_until_eof(&mut s, CTL_TIMEOUT, 1 << 20);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn control_survives_oversized_lines_non_utf8_and_silent_clients() {
    let (_b, specs) = greeters(&["a"]);
    let (q, sock) = start_ctl(&[], &specs);
    // Clients that connect and never send, or send half a line, hold nothing up.
    let mut silent: Vec<UnixStream> = (0..3)
        .map(|_| UnixStream::connect(&sock).unwrap())
        .collect();
    silent[0].write_all(b"serv").unwrap();
    let t = Instant::now();
    assert_eq!(ctl(&sock, "pid"), format!("{}\n", q.pid));
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "a silent client held the control socket for {:?}",
        t.elapsed()
    );
    let long = garbage_exchange(&sock, &vec![b'x'; 64 * 1024]);
    assert!(long.is_empty() || long.starts_with("error: "), "{long:?}");
    let bad = garbage_exchange(&sock, b"pid \xff\xfe\n");
    assert!(
        bad.starts_with("error: ") && bad.contains("UTF-8"),
        "{bad:?}"
    );
    let nul = garbage_exchange(&sock, b"\0\0\0\n");
    assert!(nul.starts_with("error: "), "{nul:?}");
    // Still answering, while the silent clients are still connected.
    assert_eq!(ctl(&sock, "pid"), format!("{}\n", q.pid));
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "took {:?}",
        t.elapsed()
    );
    // And the silent clients are let go of in the end (bounded by the server's read timeout).
    silent[1]
        .set_read_timeout(Some(Duration::from_secs(8)))
        .unwrap();
    let (_, res) = try_read_until_eof(&mut silent[1], Duration::from_secs(8), 1024);
    assert!(res.is_ok() || res.as_ref().is_err_and(is_reset), "{res:?}");
    drop(silent);
}

#[test]
fn control_lets_go_of_a_client_that_drips_its_line() {
    let (_b, specs) = greeters(&["a"]);
    let (q, sock) = start_ctl(&[], &specs);
    let mut s = UnixStream::connect(&sock).unwrap();
    s.set_write_timeout(Some(CTL_TIMEOUT)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    // One byte every 200 ms: never silent for a whole read timeout, never a whole line.
    let t = Instant::now();
    let mut reply = Vec::new();
    for _ in 0..50 {
        if s.write_all(b"p").is_err() {
            break;
        }
        let mut buf = [0u8; 256];
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
            Err(e) if is_reset(&e) => break,
            Err(_) => {}
        }
    }
    let took = t.elapsed();
    assert!(took < Duration::from_secs(7), "held for {took:?}");
    assert!(took >= Duration::from_secs(4), "dropped after {took:?}");
    let reply = String::from_utf8_lossy(&reply);
    assert!(
        reply.is_empty() || reply.contains("no command line within"),
        "{reply:?}"
    );
    assert_eq!(ctl(&sock, "pid"), format!("{}\n", q.pid));
}

#[test]
fn control_serves_a_client_at_once_while_many_silent_ones_are_connected() {
    let (_b, specs) = greeters(&["a"]);
    let (q, sock) = start_ctl(&[], &specs);
    // The old design had 16 slots; an event loop holds them all and still answers at once.
    let silent: Vec<UnixStream> = (0..100)
        .map(|_| UnixStream::connect(&sock).unwrap())
        .collect();
    thread::sleep(Duration::from_millis(200));
    for _ in 0..5 {
        let t = Instant::now();
        assert_eq!(ctl(&sock, "pid"), format!("{}\n", q.pid));
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "took {:?}",
            t.elapsed()
        );
    }
    drop(silent);
}

// === settings ===

/// Names reached by `n` clients after `line` was applied.
fn after(sock: &Path, port: u16, line: &str, n: usize) -> Vec<String> {
    ctl_ok(sock, line);
    names(port, n)
}

#[test]
fn mode_words_and_their_no_forms_change_mode_and_selection() {
    let (_b, specs) = greeters(&["a", "b"]);
    let (q, sock) = start_ctl(&[], &specs);
    assert_eq!(ctl(&sock, "mode"), "tracking\n");
    // Tracking: one client address keeps its server.
    let tracked = names(q.port, 4);
    assert!(tracked.iter().all(|n| *n == tracked[0]), "{tracked:?}");
    let rr = after(&sock, q.port, "roundrobin", 4);
    assert_eq!(ctl(&sock, "mode"), "roundrobin\n");
    assert_eq!(tally(&rr).len(), 2, "round robin uses both: {rr:?}");
    assert_eq!(ctl_ok(&sock, "no roundrobin"), "");
    let hashed = after(&sock, q.port, "hash", 4);
    assert_eq!(ctl(&sock, "mode"), "hash\n");
    assert!(hashed.iter().all(|n| *n == hashed[0]), "{hashed:?}");
    for word in ["weight", "prio", "stubborn", "leastconn", "p2c"] {
        ctl_ok(&sock, word);
        assert!(ctl(&sock, "mode").contains(word), "{word} not in mode");
        ctl_ok(&sock, &format!("no {word}"));
        assert!(!ctl(&sock, "mode").contains(word), "no {word} left it set");
    }
    ctl_ok(&sock, "no hash");
    assert_eq!(ctl(&sock, "mode"), "tracking\n");
    ctl_err(&sock, "hash please", "please");
}

#[test]
fn tuning_settings_are_set_and_shown() {
    let (_b, specs) = greeters(&["a"]);
    let (_q, sock) = start_ctl(&[], &specs);
    for (set, show, want) in [
        ("blacklist 7", "blacklist", "7"),
        ("timeout 2", "timeout", "2"),
        ("tracking 60", "tracking", "60"),
        ("idle_timeout 9", "idle_timeout", "9"),
        ("clients_max 100", "clients_max", "100"),
        ("conn_max 50", "conn_max", "50"),
        ("tcp_fastclose both", "tcp_fastclose", "both"),
        ("debug 2", "debug", "2"),
    ] {
        assert_eq!(ctl_ok(&sock, set), "", "{set}");
        assert_eq!(ctl(&sock, show), format!("{want}\n"), "{show} after {set}");
    }
    for line in ["tcp_nodelay", "no tcp_nodelay", "keepalive", "no keepalive"] {
        assert_eq!(ctl_ok(&sock, line), "", "{line}");
    }
    ctl_ok(&sock, "keepalive");
    // `write` shows what is in force, including the switches that have no show form.
    let saved = sock.with_file_name("saved.cmds");
    ctl_ok(&sock, &format!("write {}", saved.display()));
    let text = std::fs::read_to_string(&saved).unwrap();
    for line in [
        "blacklist 7s",
        "timeout 2s",
        "tracking 1m",
        "idle_timeout 9s",
        "clients_max 100",
        "conn_max 50",
        "tcp_fastclose both",
        "no tcp_nodelay",
        "\nkeepalive",
    ] {
        assert!(text.contains(line), "{line:?} not in written file:\n{text}");
    }
    ctl_err(&sock, "timeout 0", "timeout");
    ctl_err(&sock, "conn_max 0", "conn_max");
    ctl_err(&sock, "clients_max lots", "lots");
}

#[test]
fn idle_timeout_set_over_control_closes_idle_sessions() {
    let (_b, specs) = greeters(&["a"]);
    let (q, sock) = start_ctl(&[], &specs);
    ctl_ok(&sock, "idle_timeout 1");
    let before = q.log_lines().len();
    let (name, mut s) = greet_session(q.port);
    assert_eq!(name, "a");
    let t = Instant::now();
    let (_, how) = wait_closed(&mut s, Duration::from_secs(5));
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "closed too early"
    );
    assert_eq!(how, Closed::Eof);
    assert_eq!(
        q.wait_line_at(before, Duration::from_secs(5)).end,
        "idle_timeout"
    );
}

#[test]
fn conn_max_1_refuses_a_second_concurrent_client() {
    let (_b, specs) = greeters(&["a"]);
    let (q, sock) = start_ctl(&[], &specs);
    ctl_ok(&sock, "conn_max 1");
    assert_eq!(ctl(&sock, "conn_max"), "1\n");
    let (name, first) = greet_session(q.port);
    assert_eq!(name, "a");
    let mut second = connect_port(q.port);
    let (data, _) = wait_closed(&mut second, Duration::from_secs(5));
    assert!(data.is_empty(), "the refused client got {data:?}");
    wait_log_line(&q.log_path(), Duration::from_secs(5), |l| {
        l.end == "refused"
    });
    drop(first);
    // Once the first has ended, a new client is served again.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = connect_port(q.port);
        if try_read_line(&mut s).is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never served after the first ended"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

// === servers ===

/// An open session on the Greet server `name` (round robin: a few tries reach it).
fn session_on(port: u16, name: &str) -> std::net::TcpStream {
    for _ in 0..4 {
        let (got, s) = greet_session(port);
        if got == name {
            return s;
        }
    }
    panic!("no session reached {name} in 4 tries");
}

#[test]
fn servers_lists_pen_columns_then_state_columns_and_server_settings_change_them() {
    let (b, specs) = greeters(&["a", "b"]);
    let (q, sock) = start_ctl(&["-r"], &specs);
    names(q.port, 2);
    let out = ctl(&sock, "servers");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let keys: Vec<String> = server_fields(lines[0])
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        keys,
        [
            "addr",
            "port",
            "conn",
            "max",
            "hard",
            "weight",
            "prio",
            "sx",
            "rx",
            "state",
            "health",
            "total",
            "failures",
            "blacklisted"
        ],
        "{}",
        lines[0]
    );
    for (i, srv) in b.iter().enumerate() {
        assert_eq!(server_field(&out, i, "addr"), "127.0.0.1");
        assert_eq!(server_field(&out, i, "port"), srv.addr().port().to_string());
        assert_eq!(server_field(&out, i, "state"), "up");
        assert_eq!(server_field(&out, i, "health"), "unchecked");
    }
    // Each server had one session that read its two-byte greeting.
    let total: u64 = (0..2)
        .map(|i| server_field(&out, i, "total").parse::<u64>().unwrap())
        .sum();
    assert!(total >= 2, "{out}");
    ctl_ok(&sock, "server 1 max 5 hard 6 weight 3 prio 2");
    let out = ctl(&sock, "servers");
    for (k, v) in [("max", "5"), ("hard", "6"), ("weight", "3"), ("prio", "2")] {
        assert_eq!(server_field(&out, 1, k), v, "{k}: {out}");
        assert_eq!(
            server_field(&out, 0, k),
            if k == "weight" { "1" } else { "0" }
        );
    }
}

#[test]
fn server_blacklist_marks_it_blacklisted_and_traffic_avoids_it() {
    let (_b, specs) = greeters(&["a", "b"]);
    let (q, sock) = start_ctl(&["-r"], &specs);
    ctl_ok(&sock, "server 0 blacklist 30");
    let out = ctl(&sock, "servers");
    assert_eq!(server_field(&out, 0, "state"), "blacklisted", "{out}");
    let left: u64 = server_field(&out, 0, "blacklisted").parse().unwrap();
    assert!((29..=30).contains(&left), "{out}");
    assert_eq!(server_field(&out, 1, "state"), "up");
    let seen = names(q.port, 4);
    assert!(seen.iter().all(|n| n == "b"), "{seen:?}");
}

#[test]
fn server_drain_takes_no_new_sessions_while_an_open_one_finishes() {
    let (_b, specs) = greeters(&["a", "b"]);
    let (q, sock) = start_ctl(&["-r"], &specs);
    let mut s = session_on(q.port, "a");
    ctl_ok(&sock, "server 0 drain");
    let out = ctl(&sock, "servers");
    assert_eq!(server_field(&out, 0, "state"), "drain", "{out}");
    assert_eq!(server_field(&out, 0, "conn"), "1", "{out}");
    let seen = names(q.port, 4);
    assert!(seen.iter().all(|n| n == "b"), "{seen:?}");
    // The open session still works to its natural end.
    echo_roundtrip(&mut s, b"still here\n");
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let (_, how) = wait_closed(&mut s, Duration::from_secs(5));
    assert_eq!(how, Closed::Eof);
    // Its access-log line: server a, the 11 bytes sent, ended normally.
    let a_port = server_field(&out, 0, "port");
    wait_log_line(&q.log_path(), Duration::from_secs(5), |l| {
        l.server.ends_with(&format!(":{a_port}")) && l.bytes_in == 11 && l.end == "done"
    });
    ctl_ok(&sock, "server 0 enable");
    assert_eq!(server_field(&ctl(&sock, "servers"), 0, "state"), "up");
}

#[test]
fn server_disable_and_enable_take_it_out_and_back() {
    let (_b, specs) = greeters(&["a", "b"]);
    let (q, sock) = start_ctl(&["-r"], &specs);
    ctl_ok(&sock, "server 1 disable");
    assert_eq!(server_field(&ctl(&sock, "servers"), 1, "state"), "disabled");
    let seen = names(q.port, 4);
    assert!(seen.iter().all(|n| n == "a"), "{seen:?}");
    ctl_ok(&sock, "server 1 enable");
    assert_eq!(server_field(&ctl(&sock, "servers"), 1, "state"), "up");
    let seen = names(q.port, 4);
    assert_eq!(tally(&seen).get("b"), Some(&2), "{seen:?}");
}

#[test]
fn server_add_then_traffic_reaches_the_new_server() {
    let (_b, specs) = greeters(&["a"]);
    let newcomer = greet("new");
    let (q, sock) = start_ctl(&["-r"], &specs);
    ctl_ok(&sock, &format!("server add {}", newcomer.addr()));
    let out = ctl(&sock, "servers");
    assert_eq!(out.lines().count(), 2, "{out}");
    assert_eq!(
        server_field(&out, 1, "port"),
        newcomer.addr().port().to_string()
    );
    let seen = names(q.port, 4);
    assert_eq!(tally(&seen).get("new"), Some(&2), "{seen:?}");
    ctl_err(&sock, "server add nowhere:99999", "nowhere");
    // Pen's way: `server N` one past the last creates it.
    let third = greet("third");
    ctl_ok(
        &sock,
        &format!("server 2 address 127.0.0.1 port {}", third.addr().port()),
    );
    let seen = names(q.port, 3);
    assert_eq!(tally(&seen).get("third"), Some(&1), "{seen:?}");
    ctl_err(&sock, "server 4 address 127.0.0.1 port 9", "number 3");
    ctl_err(&sock, "server 3 weight 2", "needs an address");
}

#[test]
fn server_remove_lets_its_open_sessions_finish() {
    let (_b, specs) = greeters(&["a", "b"]);
    let (q, sock) = start_ctl(&["-r"], &specs);
    let mut s = session_on(q.port, "b");
    ctl_ok(&sock, "server 1 remove");
    let out = ctl(&sock, "servers");
    assert_eq!(out.lines().count(), 1, "{out}");
    let seen = names(q.port, 3);
    assert!(seen.iter().all(|n| n == "a"), "{seen:?}");
    echo_roundtrip(&mut s, b"after removal\n");
    ctl_err(&sock, "server 1 remove", "server 1");
    ctl_err(&sock, "server 0 remove", "no servers");
}

#[test]
fn server_address_and_port_move_it() {
    let (_b, specs) = greeters(&["a"]);
    let there = greet("moved");
    let (q, sock) = start_ctl(&[], &specs);
    assert_eq!(greet_name(q.port), "a");
    ctl_ok(
        &sock,
        &format!("server 0 address 127.0.0.1 port {}", there.addr().port()),
    );
    let out = ctl(&sock, "servers");
    assert_eq!(
        server_field(&out, 0, "port"),
        there.addr().port().to_string()
    );
    let seen = names(q.port, 3);
    assert!(seen.iter().all(|n| n == "moved"), "{seen:?}");
    ctl_err(&sock, "server 0 port 0", "port");
}

// === sessions ===

/// The `connections` line of the session whose client address is `client`.
fn connection_line(sock: &Path, client: SocketAddr) -> Option<String> {
    ctl(sock, "connections")
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some(&client.to_string()))
        .map(str::to_string)
}

#[test]
fn connections_connection_close_and_recent_show_and_end_sessions() {
    let (b, specs) = greeters(&["a"]);
    let (q, sock) = start_ctl(&[], &specs);
    let (_, mut s) = greet_session(q.port);
    echo_roundtrip(&mut s, b"hello");
    let me = s.local_addr().unwrap();
    let line = connection_line(&sock, me).expect("our session in connections");
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[1..4], ["listener", "default", "client"], "{line}");
    assert_eq!(words[5..7], ["server", &b[0].addr().to_string()], "{line}");
    assert_eq!(words[9..13], ["in", "5", "out", "7"], "{line}");
    assert_eq!(words[13], "open", "{line}");
    let id = words[0];
    assert_eq!(ctl(&sock, &format!("connection {id}")), format!("{line}\n"));
    let before = q.log_lines().len();
    assert_eq!(ctl_ok(&sock, &format!("close {id}")), "");
    let (_, how) = wait_closed(&mut s, Duration::from_secs(5));
    assert_eq!(how, Closed::Eof);
    assert_eq!(q.wait_line_at(before, Duration::from_secs(5)).end, "closed");
    assert!(connection_line(&sock, me).is_none());
    ctl_err(
        &sock,
        &format!("connection {id}"),
        &format!("no connection {id}"),
    );
    ctl_err(
        &sock,
        &format!("close {id}"),
        &format!("no connection {id}"),
    );
    ctl_err(&sock, "close everything", "everything");
    let recent = ctl(&sock, "recent");
    let mine = recent
        .lines()
        .find(|l| l.starts_with("127.0.0.1 connects "))
        .unwrap_or_else(|| panic!("127.0.0.1 not in recent: {recent:?}"));
    let count: u64 = mine.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(count >= 2, "{mine}");
    assert!(ctl(&sock, "recent 60").contains("127.0.0.1 connects "));
}

// === process ===

#[test]
fn exit_is_refused_without_dash_x() {
    let (_b, specs) = greeters(&["a"]);
    let (mut q, sock) = start_ctl(&[], &specs);
    ctl_err(&sock, "exit", "-X");
    assert!(
        q.wait_exit(Duration::from_millis(300)).is_none(),
        "quill exited"
    );
    assert_eq!(ctl(&sock, "pid"), format!("{}\n", q.pid));
}

#[test]
fn exit_with_dash_x_ends_the_process_with_status_0() {
    let (_b, specs) = greeters(&["a"]);
    let (mut q, sock) = start_ctl(&["-X"], &specs);
    let reply = quill_ctl(&sock, &["--json", "exit"]);
    let v: serde_json::Value = serde_json::from_str(reply.trim()).expect("JSON reply");
    assert_eq!(v["ok"], true, "{reply}");
    let st = q.wait_exit(Duration::from_secs(10)).expect("quill exits");
    assert_eq!(st.code(), Some(0), "{st}");
    assert!(!sock.exists(), "the control socket file is removed at exit");
}

#[test]
fn status_returns_pen_html_and_writes_the_w_file() {
    let (b, specs) = greeters(&["a", "b"]);
    let (q, sock) = Quill::start_with(|dir, port| {
        let w = dir.join("status.html").display().to_string();
        let c = dir.join("ctl.sock").display().to_string();
        pen_args(dir, port, &["-C", &c, "-w", &w], &specs)
    })
    .with_ctl();
    let html = ctl(&sock, "status");
    assert!(
        html.starts_with("<!DOCTYPE html>") && html.contains("</html>"),
        "{html}"
    );
    for s in &b {
        assert!(
            html.contains(&s.addr().to_string()),
            "{} not in {html}",
            s.addr()
        );
    }
    let file = std::fs::read_to_string(q.path("status.html")).expect("-w file written");
    assert!(file.contains(&b[1].addr().to_string()), "{file}");
}

trait WithCtl {
    fn with_ctl(self) -> (QuillProcess, std::path::PathBuf);
}

impl WithCtl for QuillProcess {
    /// The process and its control socket at DIR/ctl.sock, once it answers.
    fn with_ctl(self) -> (QuillProcess, std::path::PathBuf) {
        let sock = self.path("ctl.sock");
        wait_ctl(&self, &sock);
        (self, sock)
    }
}

#[test]
fn web_stats_writes_the_report_to_a_new_file() {
    let (b, specs) = greeters(&["a"]);
    let (q, sock) = start_ctl(&[], &specs);
    assert_eq!(ctl(&sock, "web_stats"), "none\n");
    let path = q.path("web.html");
    ctl_ok(&sock, &format!("web_stats {}", path.display()));
    assert_eq!(ctl(&sock, "web_stats"), format!("{}\n", path.display()));
    let html = std::fs::read_to_string(&path).expect("web_stats wrote the file");
    assert!(html.contains(&b[0].addr().to_string()), "{html}");
    ctl_ok(&sock, "no web_stats");
    assert_eq!(ctl(&sock, "web_stats"), "none\n");
}

#[test]
fn log_file_starts_an_access_log_at_a_new_path() {
    let (_b, specs) = greeters(&["a"]);
    // No -l at start: `log FILE` opens one.
    let (q, sock) = Quill::start_with(|dir, port| {
        let c = dir.join("ctl.sock").display().to_string();
        let mut a = vec!["-C".to_string(), c, format!("127.0.0.1:{port}")];
        a.extend(specs.iter().cloned());
        a
    })
    .with_ctl();
    assert_eq!(ctl(&sock, "log"), "none\n");
    let path = q.path("new.log");
    ctl_ok(&sock, &format!("log {}", path.display()));
    assert_eq!(ctl(&sock, "log"), format!("{}\n", path.display()));
    let (_, mut s) = greet_session(q.port);
    echo_roundtrip(&mut s, b"abc");
    drop(s);
    let line = wait_log_line(&path, Duration::from_secs(5), |l| l.bytes_in == 3);
    assert_eq!(line.end, "done");
    ctl_ok(&sock, "no log");
    assert_eq!(ctl(&sock, "log"), "none\n");
}

#[test]
fn debug_listen_and_control_show_their_values() {
    let (_b, specs) = greeters(&["a"]);
    let (q, sock) = start_ctl(&["-d"], &specs);
    assert_eq!(ctl(&sock, "debug"), "1\n");
    ctl_ok(&sock, "debug 0");
    assert_eq!(ctl(&sock, "debug"), "0\n");
    assert_eq!(ctl(&sock, "listen"), format!("127.0.0.1:{}\n", q.port));
    assert_eq!(ctl(&sock, "control"), format!("{}\n", sock.display()));
    ctl_err(&sock, "control 127.0.0.1:1", "'127.0.0.1:1'");
}

#[test]
fn listen_moves_the_listener_to_a_new_port() {
    let (_b, specs) = greeters(&["a"]);
    let (q, sock) = start_ctl(&[], &specs);
    let new_port = free_port();
    ctl_ok(&sock, &format!("listen 127.0.0.1:{new_port}"));
    assert_eq!(ctl(&sock, "listen"), format!("127.0.0.1:{new_port}\n"));
    assert_eq!(greet_name(new_port), "a");
    wait_refused(q.addr(), Duration::from_secs(5));
}

// === files: write, -F, include, -O ===

/// What `--json servers` says about the configuration (not the traffic) of each server.
fn server_settings(sock: &Path) -> Vec<serde_json::Value> {
    let reply = quill_ctl(sock, &["--json", "servers"]);
    let v: serde_json::Value = serde_json::from_str(reply.trim()).expect("JSON servers");
    v.as_array()
        .expect("an array")
        .iter()
        .map(|s| {
            serde_json::json!({
                "address": s["address"], "max": s["max"], "hard": s["hard"],
                "weight": s["weight"], "prio": s["prio"], "admin": s["admin"],
                "state": s["state"], "acl": s["acl"],
            })
        })
        .collect()
}

/// `quill -C DIR/ctl.sock -F FILE 127.0.0.1:PORT`: everything else comes from the file.
fn start_from_file(file: &Path) -> (QuillProcess, std::path::PathBuf) {
    let f = file.display().to_string();
    Quill::start_with(|dir, port| {
        let c = dir.join("ctl.sock").display().to_string();
        vec![
            "-C".into(),
            c,
            "-F".into(),
            f.clone(),
            format!("127.0.0.1:{port}"),
        ]
    })
    .with_ctl()
}

#[test]
fn write_then_dash_f_reproduces_servers_weights_modes_and_drain() {
    let (b, specs) = greeters(&["a", "b", "c"]);
    let (_q, sock) = start_ctl(&[], &specs);
    for line in [
        "server 1 weight 3 max 10 hard 12",
        "server 2 prio 4",
        "server 0 drain",
        "server 2 disable",
        "roundrobin",
        "weight",
        "blacklist 12",
        "acl 3 deny 10.0.0.0/8",
        "server 1 acl 3",
    ] {
        ctl_ok(&sock, line);
    }
    let saved = sock.with_file_name("saved.cmds");
    ctl_ok(&sock, &format!("write {}", saved.display()));
    let want_servers = server_settings(&sock);
    let want_mode = ctl(&sock, "mode");
    assert_eq!(want_mode, "roundrobin weight\n");
    // A new process from the file alone: no servers on its command line.
    let (q2, sock2) = start_from_file(&saved);
    assert_eq!(server_settings(&sock2), want_servers);
    assert_eq!(ctl(&sock2, "mode"), want_mode);
    assert_eq!(ctl(&sock2, "blacklist"), "12\n");
    assert_eq!(ctl(&sock2, "acl 3"), "deny 10.0.0.0/8\n");
    // Server 0 drains and server 2 is disabled there too: everything goes to b.
    let seen = names(q2.port, 3);
    assert!(seen.iter().all(|n| n == "b"), "{seen:?}");
    // `write` without a FILE writes the -F file.
    ctl_ok(&sock2, "server 1 weight 5");
    ctl_ok(&sock2, "write");
    let text = std::fs::read_to_string(&saved).unwrap();
    assert!(
        text.contains(&format!(
            "server 1 address 127.0.0.1 port {} max 10 hard 12 weight 5",
            b[1].addr().port()
        )),
        "{text}"
    );
    ctl_err(&sock, "write", "FILE");
}

#[test]
fn write_then_reload_keeps_what_was_changed_over_the_command_line_settings() {
    let (_b, specs) = greeters(&["a", "b"]);
    let dir = scratch_dir();
    let file = dir.path().join("state.cmds");
    std::fs::write(&file, "# empty at first\n").unwrap();
    let f = file.display().to_string();
    let (_q, sock) = start_ctl(
        &[
            "-r",
            "-O",
            "acl 1 deny 127.0.0.2",
            "-O",
            "client_acl 1",
            "-F",
            &f,
        ],
        &specs,
    );
    for line in [
        "no roundrobin",
        "hash",
        "no client_acl",
        "acl 1 deny 127.0.0.3",
    ] {
        ctl_ok(&sock, line);
    }
    let before = (
        ctl(&sock, "mode"),
        ctl(&sock, "client_acl"),
        ctl(&sock, "acl 1"),
    );
    ctl_ok(&sock, "write");
    // Twice: a reload must not add the command line's ACL entries again each time.
    for _ in 0..2 {
        ctl_ok(&sock, "reload");
        let after = (
            ctl(&sock, "mode"),
            ctl(&sock, "client_acl"),
            ctl(&sock, "acl 1"),
        );
        assert_eq!(after, before, "reload lost what write saved");
    }
}

#[test]
fn an_ipv6_server_is_written_and_read_back_and_can_be_named_bare() {
    if free_port_v6().is_none() {
        eprintln!("skipped: ::1 is not usable here");
        return;
    }
    let v6 = DemoServer::start("[::1]:0", Behaviour::Greet { name: "six".into() }).unwrap();
    let (_b, specs) = greeters(&["four"]);
    let (q, sock) = start_ctl(&[], &specs);
    // Pen's form: a bare IPv6 address after `address`.
    ctl_ok(
        &sock,
        &format!("server 0 address ::1 port {}", v6.addr().port()),
    );
    assert_eq!(server_field(&ctl(&sock, "servers"), 0, "addr"), "::1");
    assert_eq!(greet_name(q.port), "six");
    ctl_ok(&sock, "server 0 weight 2");
    let saved = q.path("v6.cmds");
    ctl_ok(&sock, &format!("write {}", saved.display()));
    let (q2, sock2) = start_from_file(&saved);
    assert_eq!(server_settings(&sock2), server_settings(&sock));
    assert_eq!(greet_name(q2.port), "six");
}

#[test]
fn command_file_errors_name_file_and_line_and_exit_2() {
    let dir = scratch_dir();
    let file = dir.path().join("bad.cmds");
    std::fs::write(&file, "# comment\nroundrobin\nserver 0 weight lots\n").unwrap();
    let f = file.display().to_string();
    let listen = format!("127.0.0.1:{}", free_port());
    let (code, err) = run_quill_expect_exit(&["-F", &f, &listen, "127.0.0.1:9"]);
    assert_eq!(code, 2, "{err}");
    let first = first_line(&err);
    assert!(
        first.contains(&format!("{f}:3: ")) && first.contains("lots"),
        "{first}"
    );
    std::fs::write(&file, "servers\n").unwrap();
    let (code, err) = run_quill_expect_exit(&["-F", &f, &listen, "127.0.0.1:9"]);
    assert_eq!(code, 2, "{err}");
    assert!(first_line(&err).contains(&format!("{f}:1: ")), "{err}");
    let missing = dir.path().join("missing.cmds").display().to_string();
    let (code, err) = run_quill_expect_exit(&["-F", &missing, &listen]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&missing), "{err}");
}

#[test]
fn include_applies_a_file_and_a_bad_one_changes_nothing() {
    let (_b, specs) = greeters(&["a", "b"]);
    let (q, sock) = start_ctl(&[], &specs);
    let good = q.path("good.cmds");
    std::fs::write(&good, "server 0 weight 7\nhash  # a comment\n").unwrap();
    assert_eq!(ctl_ok(&sock, &format!("include {}", good.display())), "");
    assert_eq!(server_field(&ctl(&sock, "servers"), 0, "weight"), "7");
    assert_eq!(ctl(&sock, "mode"), "hash\n");
    let bad = q.path("bad.cmds");
    std::fs::write(&bad, "server 1 weight 9\nfrobnicate\n").unwrap();
    ctl_err(
        &sock,
        &format!("include {}", bad.display()),
        &format!("{}:2: ", bad.display()),
    );
    assert_eq!(
        server_field(&ctl(&sock, "servers"), 1, "weight"),
        "1",
        "half an include applied"
    );
    ctl_err(&sock, "include /nonexistent/x.cmds", "/nonexistent/x.cmds");
}

#[test]
fn dash_o_server_weight_still_applies_at_start() {
    let (_b, specs) = greeters(&["a", "b"]);
    let (_q, sock) = start_ctl(&["-O", "server 1 weight 3", "-O", "prio"], &specs);
    assert_eq!(server_field(&ctl(&sock, "servers"), 1, "weight"), "3");
    assert_eq!(ctl(&sock, "mode"), "prio\n");
}

#[test]
fn json_replies_parse_for_ctl_and_the_leading_json_word() {
    let (b, specs) = greeters(&["a", "b"]);
    let (q, sock) = start_ctl(&["-r"], &specs);
    let parse = |s: &str| -> serde_json::Value {
        serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {s:?}"))
    };
    let servers = parse(&quill_ctl(&sock, &["--json", "servers"]));
    let list = servers.as_array().expect("array");
    assert_eq!(list.len(), 2);
    assert_eq!(list[1]["address"], b[1].addr().to_string());
    assert_eq!(list[1]["index"], 1);
    for key in [
        "state", "health", "admin", "sessions", "weight", "ramp", "sent", "received",
    ] {
        assert!(list[0].get(key).is_some(), "{key} missing: {}", list[0]);
    }
    assert_eq!(parse(&quill_ctl(&sock, &["--json", "mode"])), "roundrobin");
    assert_eq!(parse(&quill_ctl(&sock, &["--json", "pid"]))["pid"], q.pid);
    assert_eq!(parse(&ctl(&sock, "json pid"))["pid"], q.pid);
    assert_eq!(parse(&ctl(&sock, "json blacklist")), 30.0);
    assert_eq!(parse(&ctl(&sock, "json server 0 weight 2"))["ok"], true);
    let status = parse(&ctl(&sock, "json status"));
    assert_eq!(status["listeners"][0]["servers"][0]["weight"], 2);
    let err = parse(&ctl(&sock, "json frobnicate"));
    assert!(
        err["error"].as_str().unwrap().contains("frobnicate"),
        "{err}"
    );
    let s = sock.display().to_string();
    let (code, out, _) = run_ctl(
        None,
        &["--socket", &s, "--json", "server", "9", "weight", "1"],
    );
    assert_eq!(code, 1, "{out}");
}

// === several listeners ===

/// Quill with DIR/quill.toml: `control` at DIR/ctl.sock, `log` at DIR/access.log, then
/// `rest(port)`; once its control socket answers.
fn start_toml_ctl(rest: impl Fn(u16) -> String) -> (QuillProcess, std::path::PathBuf) {
    Quill::start_with(|dir, port| {
        let cfg = format!(
            "control = \"{sock}\"\nlog = \"{log}\"\n\n{rest}",
            sock = dir.join("ctl.sock").display(),
            log = dir.join("access.log").display(),
            rest = rest(port),
        );
        let path = dir.join("quill.toml");
        std::fs::write(&path, cfg).unwrap();
        vec!["--config".into(), path.display().to_string()]
    })
    .with_ctl()
}

/// The `[[listener]]` table `web`: round robin on `port` over `web[0]` and `web[1]`.
fn web_listener(port: u16, web: &[DemoServer]) -> String {
    format!(
        r#"[[listener]]
name = "web"
listen = "127.0.0.1:{port}"
mode = ["roundrobin"]
servers = ["{w0}", "{w1}"]
"#,
        w0 = web[0].addr(),
        w1 = web[1].addr(),
    )
}

#[test]
fn several_listeners_are_chosen_with_listener_name_and_an_unprefixed_pool_command_says_how() {
    let (web, _) = greeters(&["web-a", "web-b"]);
    let (db, _) = greeters(&["db-a"]);
    let (q, sock) = start_toml_ctl(|port| {
        format!(
            r#"{web}
[[listener]]
name = "db"
listen = "127.0.0.1:{p2}"
servers = ["{d0}"]
"#,
            web = web_listener(port, &web),
            p2 = free_port(),
            d0 = db[0].addr(),
        )
    });
    let web_servers = ctl(&sock, "listener web servers");
    assert_eq!(web_servers.lines().count(), 2, "{web_servers}");
    let db_servers = ctl(&sock, "listener db servers");
    assert_eq!(db_servers.lines().count(), 1, "{db_servers}");
    assert_eq!(
        server_field(&db_servers, 0, "port"),
        db[0].addr().port().to_string()
    );
    assert_eq!(ctl(&sock, "listener web mode"), "roundrobin\n");
    assert_eq!(ctl(&sock, "listener db mode"), "tracking\n");
    for line in ["servers", "server 0 weight 2", "mode", "hash"] {
        ctl_err(&sock, line, "listener NAME");
    }
    ctl_err(&sock, "listener nope servers", "'nope'");
    ctl_err(&sock, "listener", "name");
    ctl_ok(&sock, "listener web server 1 disable");
    assert_eq!(
        server_field(&ctl(&sock, "listener web servers"), 1, "state"),
        "disabled"
    );
    assert_eq!(
        server_field(&ctl(&sock, "listener db servers"), 0, "state"),
        "up"
    );
    let seen = names(q.port, 3);
    assert!(seen.iter().all(|n| n == "web-a"), "{seen:?}");
    // Process-wide settings need no listener.
    ctl_ok(&sock, "conn_max 100");
    assert_eq!(ctl(&sock, "conn_max"), "100\n");
    // `write` names the listener on every pool line, and `include` reads that back.
    let saved = q.path("saved.cmds");
    ctl_ok(&sock, &format!("write {}", saved.display()));
    let text = std::fs::read_to_string(&saved).unwrap();
    assert!(text.contains("listener db server 0 address"), "{text}");
    ctl_ok(&sock, "listener web server 1 enable");
    ctl_ok(&sock, &format!("include {}", saved.display()));
    assert_eq!(
        server_field(&ctl(&sock, "listener web servers"), 1, "state"),
        "disabled"
    );
}

// === listeners and pools by name ===

/// `quill` from a TOML file with the TCP listeners `web` (two servers, on the test's port) and
/// `db` (one), the UDP listener `dns` and the named pool `api`; returns the process, its control
/// socket and the `db` listener's port.
fn start_three_listeners_and_a_pool(
    web: &[DemoServer],
    db: &[DemoServer],
) -> (QuillProcess, std::path::PathBuf, u16) {
    let db_port = free_port();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let (q, sock) = start_toml_ctl(|port| {
        format!(
            r#"[[pool]]
name = "api"
servers = ["{d0}"]

{web}
[[listener]]
name = "db"
listen = "127.0.0.1:{db_port}"
servers = ["{d0}"]

[[listener]]
name = "dns"
listen = "127.0.0.1:{p3}"
protocol = "udp"
servers = ["{u0}"]
"#,
            web = web_listener(port, web),
            p3 = free_port(),
            d0 = db[0].addr(),
            u0 = udp.local_addr().unwrap(),
        )
    });
    (q, sock, db_port)
}

#[test]
fn listener_name_connections_lists_only_that_listeners_sessions() {
    let (web, _) = greeters(&["web-a", "web-b"]);
    let (db, _) = greeters(&["db-a"]);
    let (q, sock, db_port) = start_three_listeners_and_a_pool(&web, &db);
    let (_, mut w) = greet_session(q.port);
    echo_roundtrip(&mut w, b"w");
    let (_, mut d) = greet_session(db_port);
    echo_roundtrip(&mut d, b"d");
    let listed = |text: &str| -> Vec<String> {
        text.lines()
            .map(|l| l.split_whitespace().nth(2).unwrap().to_string())
            .collect()
    };
    let all = ctl(&sock, "connections");
    assert_eq!(listed(&all).len(), 2, "{all}");
    let only_web = ctl(&sock, "listener web connections");
    assert_eq!(listed(&only_web), ["web"], "{only_web}");
    assert!(only_web.contains(&w.local_addr().unwrap().to_string()));
    let only_db = ctl(&sock, "listener db connections");
    assert_eq!(listed(&only_db), ["db"], "{only_db}");
    assert!(only_db.contains(&d.local_addr().unwrap().to_string()));
    assert_eq!(ctl(&sock, "listener dns connections"), "");
    ctl_err(
        &sock,
        "listener nope connections",
        "no listener named 'nope'",
    );
}

#[test]
fn listeners_and_pools_commands_list_them_and_servers_names_the_listeners() {
    let (web, _) = greeters(&["web-a", "web-b"]);
    let (db, _) = greeters(&["db-a"]);
    let (q, sock, db_port) = start_three_listeners_and_a_pool(&web, &db);
    let listeners = ctl(&sock, "listeners");
    let lines: Vec<&str> = listeners.lines().collect();
    assert_eq!(lines.len(), 3, "{listeners}");
    assert_eq!(
        lines[0],
        format!(
            "web listen 127.0.0.1:{} protocol tcp mode roundrobin servers 2",
            q.port
        )
    );
    assert_eq!(
        lines[1],
        format!("db listen 127.0.0.1:{db_port} protocol tcp mode tracking servers 1")
    );
    assert!(
        lines[2].starts_with("dns listen 127.0.0.1:") && lines[2].contains(" protocol udp "),
        "{listeners}"
    );
    assert_eq!(ctl(&sock, "pools"), "api mode tracking servers 1\n");
    let json: serde_json::Value = serde_json::from_str(&ctl(&sock, "json listeners")).unwrap();
    assert_eq!(json[2]["protocol"], "udp", "{json}");
    let err = ctl_err(&sock, "servers", "listener NAME");
    assert!(err.contains("3 listeners (web, db, dns)"), "{err}");
    ctl_err(&sock, "listeners now", "unexpected argument");
}

#[test]
fn write_saves_a_udp_listener_as_udp_without_tcp_settings() {
    let (web, _) = greeters(&["web-a", "web-b"]);
    let (db, _) = greeters(&["db-a"]);
    let (q, sock, _) = start_three_listeners_and_a_pool(&web, &db);
    let saved = q.path("saved.cmds");
    ctl_ok(&sock, &format!("write {}", saved.display()));
    let text = std::fs::read_to_string(&saved).unwrap();
    assert!(text.contains("# listener dns: UDP"), "{text}");
    for setting in ["tcp_nodelay", "tcp_fastclose", "keepalive"] {
        assert!(
            !text
                .lines()
                .any(|l| l.starts_with("listener dns ") && l.contains(setting)),
            "a UDP listener written with {setting}:\n{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("listener web ") && l.contains(setting)),
            "the TCP listener keeps {setting}:\n{text}"
        );
    }
    assert!(text.contains("listener dns server 0 address"), "{text}");
    // And the file reads back.
    ctl_ok(&sock, &format!("include {}", saved.display()));
}

#[test]
fn ctl_reload_is_logged_in_quills_own_log_as_sighup_is() {
    let (web, _) = greeters(&["web-a", "web-b"]);
    let (db, _) = greeters(&["db-a"]);
    let (q, sock, _) = start_three_listeners_and_a_pool(&web, &db);
    let reply = ctl(&sock, "reload");
    assert!(reply.starts_with("reloaded: "), "{reply}");
    assert!(
        q.wait_stderr_contains("control reload: reloaded: ", Duration::from_secs(5)),
        "no log line for the reload:\n{}",
        q.stderr()
    );
    let cfg = q.path("quill.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("{text}\nbogus_key = 1\n")).unwrap();
    ctl_err(&sock, "reload", "reload rejected");
    assert!(
        q.wait_stderr_contains(
            "control reload: reload rejected, still running the previous configuration: ",
            Duration::from_secs(5)
        ),
        "no log line for the rejected reload:\n{}",
        q.stderr()
    );
}

// === paths in a configuration file ===

/// Polls `cond` every 20 ms for at most `within`.
fn poll_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    cond()
}

#[test]
fn relative_paths_in_a_config_file_are_resolved_from_its_directory() {
    let (_b, specs) = greeters(&["a"]);
    let dir = scratch_dir();
    // The file is in DIR/cfg2; quill runs in DIR/elsewhere.
    let cfg_dir = dir.path().join("cfg2");
    let cwd = dir.path().join("elsewhere");
    std::fs::create_dir_all(&cfg_dir).unwrap();
    std::fs::create_dir_all(&cwd).unwrap();
    let port = free_port();
    std::fs::write(
        cfg_dir.join("site.toml"),
        format!(
            "log = \"access.log\"\ncontrol = \"ctl2.sock\"\npid_file = \"quill.pid\"\n\
             [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nservers = [\"{}\"]\n",
            specs[0]
        ),
    )
    .unwrap();
    let script = "cd \"$0\" && exec \"$1\" --config ../cfg2/site.toml";
    let args = vec![
        "-c".to_string(),
        script.to_string(),
        cwd.display().to_string(),
        BIN.to_string(),
    ];
    let mut q = QuillProcess::spawn_in_cmd("/bin/sh", scratch_dir(), args, port);
    let (probe, _) = q.wait_ready_tcp(q.addr()).unwrap();
    drop(probe);
    let sock = cfg_dir.join("ctl2.sock");
    assert!(
        poll_until(Duration::from_secs(5), || sock.exists()),
        "no control socket at {}; in the working directory: {:?}\n{}",
        sock.display(),
        std::fs::read_dir(&cwd).unwrap().collect::<Vec<_>>(),
        q.stderr()
    );
    assert_eq!(ctl(&sock, "pid"), format!("{}\n", q.pid));
    assert_eq!(
        std::fs::read_to_string(cfg_dir.join("quill.pid"))
            .unwrap()
            .trim(),
        q.pid.to_string()
    );
    let (_, s) = greet_session(port);
    drop(s);
    assert!(
        poll_until(Duration::from_secs(5), || cfg_dir
            .join("access.log")
            .exists()),
        "no access log in the file's directory"
    );
    assert_eq!(
        std::fs::read_dir(&cwd).unwrap().count(),
        0,
        "nothing is written in the working directory"
    );
    // Where the meaning changed, a warning says so.
    for what in [
        "log 'access.log'",
        "control 'ctl2.sock'",
        "pid_file 'quill.pid'",
    ] {
        assert!(
            q.stderr().contains(&format!(
                "{what} is relative: it is now taken from the configuration file's directory"
            )),
            "no warning for {what}:\n{}",
            q.stderr()
        );
    }
}
