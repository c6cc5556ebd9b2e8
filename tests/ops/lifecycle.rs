//! Process lifecycle: SIGTERM drain, second signal, drain deadline, pid file, access log fields,
//! SIGHUP log reopen, -u USER.

use crate::support;

use std::io;
use std::net::{Shutdown, TcpStream};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::*;

/// Polls connect (bounded) until quill refuses new connections. Connections that still get
/// through are closed at once.
fn wait_until_refused(q: &QuillProcess, within: Duration) {
    let deadline = Instant::now() + within;
    for _ in 0..1000 {
        match TcpStream::connect_timeout(&q.addr(), Duration::from_millis(300)) {
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "new connections still accepted {within:?} after SIGTERM:\n{}",
            q.stderr()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_drains_open_session_then_exits_0() {
    let g = greet("g");
    let mut q = Quill::start(
        &["--drain-timeout", "10s", "--workers", "2"],
        &[spec(g.addr())],
    );
    let (name, mut s) = greet_session(q.port);
    assert_eq!(name, "g");
    q.signal("TERM");
    wait_until_refused(&q, Duration::from_secs(5));
    // The open session keeps working.
    assert!(
        q.try_exit().is_none(),
        "quill exited with a session still open"
    );
    echo_roundtrip(&mut s, b"after SIGTERM\n");
    thread::sleep(Duration::from_millis(300));
    echo_roundtrip(&mut s, b"still draining\n");
    assert!(
        q.try_exit().is_none(),
        "quill exited with a session still open"
    );
    // The session completes; then quill exits 0.
    s.shutdown(Shutdown::Write).unwrap();
    let rest = read_until_eof(&mut s, Duration::from_secs(5));
    assert!(rest.is_empty());
    let st = q
        .wait_exit(Duration::from_secs(8))
        .expect("quill should exit once the last session ended");
    assert_eq!(st.code(), Some(0), "exit status after drain: {st}");
    let line = wait_log_line(&q.log_path(), Duration::from_secs(2), |l| l.bytes_in == 29);
    assert_eq!(line.end, "done", "{line:?}");
}

#[test]
fn second_sigterm_exits_at_once() {
    let g = greet("g");
    let mut q = Quill::start(
        &["--drain-timeout", "30s", "--workers", "2"],
        &[spec(g.addr())],
    );
    let (_, mut s) = greet_session(q.port);
    q.signal("TERM");
    wait_until_refused(&q, Duration::from_secs(5));
    assert!(q.try_exit().is_none());
    let t = Instant::now();
    q.signal("TERM");
    let st = q
        .wait_exit(Duration::from_secs(5))
        .expect("second SIGTERM should exit at once");
    assert_eq!(st.code(), Some(0), "{st}");
    assert!(t.elapsed() < Duration::from_secs(5));
    let (_, _how) = wait_closed(&mut s, Duration::from_secs(5));
}

#[test]
fn drain_deadline_closes_remaining_sessions_and_logs_shutdown() {
    let g = greet("g");
    let mut q = Quill::start(
        &["--drain-timeout", "2s", "--workers", "2"],
        &[spec(g.addr())],
    );
    let (_, mut s) = greet_session(q.port);
    echo_roundtrip(&mut s, b"12345\n");
    let t = Instant::now();
    q.signal("TERM");
    wait_until_refused(&q, Duration::from_secs(5));
    echo_roundtrip(&mut s, b"still served during the drain\n");
    let st = q
        .wait_exit(Duration::from_secs(10))
        .expect("quill should exit at the drain deadline");
    assert_eq!(st.code(), Some(0), "{st}");
    assert!(
        t.elapsed() >= Duration::from_millis(1500),
        "exited before the 2 s drain deadline: {:?}",
        t.elapsed()
    );
    let (_, _how) = wait_closed(&mut s, Duration::from_secs(5));
    let line = wait_log_line(&q.log_path(), Duration::from_secs(2), |l| l.bytes_in > 6);
    assert_eq!(line.end, "shutdown", "{line:?}");
    assert_eq!(line.server, g.addr().to_string(), "{line:?}");
    assert_eq!(line.bytes_in, 6 + 30, "{line:?}");
}

#[test]
fn pid_file_written_at_start_and_removed_at_exit() {
    let g = greet("g");
    let pid_holder = std::sync::Mutex::new(std::path::PathBuf::new());
    let mut q = Quill::start_with(|dir, port| {
        let pid_file = dir.join("quill.pid");
        *pid_holder.lock().unwrap() = pid_file.clone();
        let mut a = vec!["-p".to_string(), pid_file.display().to_string()];
        a.extend(pen_args(dir, port, &["--workers", "2"], &[spec(g.addr())]));
        a
    });
    let pid_file = pid_holder.lock().unwrap().clone();
    let text = std::fs::read_to_string(&pid_file).expect("pid file exists after start");
    assert_eq!(text.trim(), q.pid.to_string(), "pid file content");
    q.signal("TERM");
    let st = q
        .wait_exit(Duration::from_secs(10))
        .expect("quill exits on SIGTERM with no sessions");
    assert_eq!(st.code(), Some(0), "{st}");
    assert!(!pid_file.exists(), "pid file removed at exit");
}

#[test]
fn sigint_also_drains_and_exits_0() {
    let g = greet("g");
    let mut q = Quill::start(
        &["--drain-timeout", "3s", "--workers", "2"],
        &[spec(g.addr())],
    );
    q.signal("INT");
    let st = q
        .wait_exit(Duration::from_secs(10))
        .expect("quill exits on SIGINT");
    assert_eq!(st.code(), Some(0), "{st}");
}

#[test]
fn access_log_lines_have_the_documented_fields() {
    let e = echo();
    let q = Quill::start(&["--workers", "2"], &[spec(e.addr())]);
    let before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let mut s = connect_port(q.port);
    let data = pattern_bytes(0, 1234);
    write_all(&mut s, &data);
    assert_eq!(
        read_exact_within(&mut s, 1234, Duration::from_secs(5)),
        data
    );
    thread::sleep(Duration::from_millis(50));
    s.shutdown(Shutdown::Write).unwrap();
    assert!(read_until_eof(&mut s, Duration::from_secs(5)).is_empty());
    let after = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let line = wait_log_line(&q.log_path(), Duration::from_secs(5), |l| {
        l.bytes_in == 1234
    });
    assert_eq!(line.client, "127.0.0.1", "{line:?}");
    let t: f64 = line
        .time
        .parse()
        .unwrap_or_else(|_| panic!("UNIX_TIME not a number: {line:?}"));
    assert!(
        t >= before - 2.0 && t <= after + 2.0,
        "UNIX_TIME {t} not within [{before}, {after}]: {line:?}"
    );
    assert_eq!(line.server, e.addr().to_string(), "{line:?}");
    assert_eq!(line.bytes_out, 1234, "{line:?}");
    let (int, frac) = line
        .duration
        .split_once('.')
        .unwrap_or_else(|| panic!("DURATION has no decimals: {line:?}"));
    assert!(
        int.chars().all(|c| c.is_ascii_digit())
            && frac.len() == 3
            && frac.chars().all(|c| c.is_ascii_digit()),
        "DURATION should have 3 decimals: {line:?}"
    );
    let d: f64 = line.duration.parse().unwrap();
    assert!(
        d >= 0.04 && d <= after - before + 1.0,
        "DURATION {d}: {line:?}"
    );
    assert_eq!(line.end, "done", "{line:?}");
}

#[test]
fn access_log_records_no_server_when_all_servers_are_dead() {
    let servers = vec![spec(refused_addr())];
    let (q, mut c, _) = Quill::start_first(&["-r", "-b", "30", "--workers", "2"], &servers);
    let _ = std::io::Write::write_all(&mut c, b"anyone?");
    let (data, _how) = wait_closed(&mut c, Duration::from_secs(5));
    assert!(data.is_empty());
    let line = wait_log_line(&q.log_path(), Duration::from_secs(5), |_| true);
    assert_eq!(line.server, "-", "{line:?}");
    assert_eq!(line.end, "no_server", "{line:?}");
    assert_eq!(line.bytes_out, 0, "{line:?}");
}

#[test]
fn sighup_reopens_the_access_log() {
    let g = greet("g");
    let mut q = Quill::start(&["--workers", "2"], &[spec(g.addr())]);
    let log = q.log_path();
    // Session 1 goes to the original file.
    let (_, mut s) = greet_session(q.port);
    echo_roundtrip(&mut s, b"one\n");
    s.shutdown(Shutdown::Write).unwrap();
    read_until_eof(&mut s, Duration::from_secs(5));
    wait_log_line(&log, Duration::from_secs(5), |l| l.bytes_in == 4);
    let rotated = q.path("access.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    q.signal("HUP");
    // New sessions (bounded) until one shows up in a new file at the original path.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut found = false;
    for i in 0..50 {
        let (_, mut s) = greet_session(q.port);
        echo_roundtrip(&mut s, b"twenty-two bytes here\n");
        s.shutdown(Shutdown::Write).unwrap();
        read_until_eof(&mut s, Duration::from_secs(5));
        if wait_log(&log, Duration::from_millis(300), |ls| {
            ls.iter().any(|l| l.bytes_in == 22)
        })
        .is_ok()
        {
            found = true;
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no new log file after SIGHUP ({i} sessions)"
        );
    }
    assert!(found, "no new access log at {} after SIGHUP", log.display());
    let old = read_access_log(&rotated);
    assert!(
        old.iter().any(|l| l.bytes_in == 4),
        "session 1 stays in the rotated file: {old:#?}"
    );
    assert!(
        q.try_exit().is_none(),
        "quill died on SIGHUP:\n{}",
        q.stderr()
    );
}

fn uid_of(user: &str) -> Option<u32> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.first() == Some(&user)).then(|| f.get(2)?.parse().ok())?
    })
}

#[test]
fn user_option_runs_as_that_user_after_binding() {
    if !running_as_root() {
        eprintln!("SKIPPED: -u needs root to test");
        return;
    }
    let Some(nobody) = uid_of("nobody") else {
        eprintln!("SKIPPED: no user 'nobody' in /etc/passwd");
        return;
    };
    let g = greet("g");
    let server = spec(g.addr());
    // No access log here: it would live in a root-only tempdir.
    let q = Quill::start_with(|_dir, port| {
        vec![
            "-u".into(),
            "nobody".into(),
            "--workers".into(),
            "2".into(),
            format!("127.0.0.1:{port}"),
            server.clone(),
        ]
    });
    // The socket accepts as soon as it is bound; privileges drop just after: wait for "ready".
    assert!(q.wait_stderr_contains("ready:", Duration::from_secs(5)));
    let status = std::fs::read_to_string(format!("/proc/{}/status", q.pid)).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    let uids: Vec<u32> = uid_line
        .split_whitespace()
        .skip(1)
        .map(|u| u.parse().unwrap())
        .collect();
    assert_eq!(
        uids,
        vec![nobody; 4],
        "real/effective/saved/fs uid should all be nobody: {uid_line}"
    );
    // Still serves.
    let (name, mut s) = greet_session(q.port);
    assert_eq!(name, "g");
    echo_roundtrip(&mut s, b"as nobody\n");
}

#[test]
fn chroot_option_confines_the_process_after_binding() {
    if !running_as_root() {
        eprintln!("SKIPPED: -j needs root to test");
        return;
    }
    let jail = scratch_dir();
    let jail_path = jail.path().canonicalize().unwrap();
    let g = greet("g");
    let server = spec(g.addr());
    let jail_arg = jail_path.display().to_string();
    let q = Quill::start_with(|_dir, port| {
        vec![
            "-j".into(),
            jail_arg.clone(),
            "--workers".into(),
            "2".into(),
            format!("127.0.0.1:{port}"),
            server.clone(),
        ]
    });
    // The process root is the jail; servers resolved before the chroot still work. The socket
    // accepts as soon as it is bound; the chroot happens just after: wait for "ready".
    assert!(q.wait_stderr_contains("ready:", Duration::from_secs(5)));
    let root_link = std::fs::read_link(format!("/proc/{}/root", q.pid)).unwrap();
    assert_eq!(root_link, jail_path);
    let (name, mut s) = greet_session(q.port);
    assert_eq!(name, "g");
    echo_roundtrip(&mut s, b"from the jail\n");
}
