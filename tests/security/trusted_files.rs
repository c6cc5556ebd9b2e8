//! Files Quill reads as configuration (`include`, `-F`, `--config`) or writes to (`log FILE`), and
//! the files at the paths where it binds Unix sockets, under attack (D8, D12, D14 and the
//! Unix-bind part of D1 and D2, in docs/design.md#probe-findings). A configuration file is a
//! regular file of at most 4 MiB, opened without waiting and read before the controller's lock is
//! taken; an `include` error never quotes the file; an access log that cannot be opened is refused
//! before anything changes; a Unix bind only ever replaces a stale socket, and the clean-up at exit
//! only ever removes a socket. Also: a SIGHUP while draining changes nothing (it used to bind the
//! listeners again).

use crate::ctl;
use crate::support;

use std::fs;
use std::path::Path;
use std::thread;
use std::time::Duration;

use ctl::*;
use support::*;

/// Makes a FIFO at `path` (no writer ever opens it here).
fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap_or_else(|e| panic!("mkfifo {}: {e}", path.display()));
}

/// Runs `line` over the control socket on a thread of its own; the reply (or the error) comes
/// back through the channel, so a command that hangs cannot hang the test.
fn ctl_in_background(sock: &Path, line: &str) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (sock, line) = (sock.to_path_buf(), line.to_string());
    thread::spawn(move || {
        let reply = try_ctl(&sock, &line).unwrap_or_else(|e| format!("no reply: {e}"));
        let _ = tx.send(reply);
    });
    rx
}

#[test]
fn include_of_a_fifo_does_not_block_other_commands_or_shutdown() {
    let g = greet("g");
    let (mut q, sock) = start_ctl(&[], &[spec(g.addr())]);
    let fifo = q.path("fifo");
    mkfifo(&fifo);
    let include = ctl_in_background(&sock, &format!("include {}", fifo.display()));
    let reply = include
        .recv_timeout(CTL_TIMEOUT)
        .expect("include of a FIFO answered");
    assert_eq!(
        reply,
        format!("error: {}: not a regular file\n", fifo.display())
    );
    // The old code read the FIFO under the controller's lock: this command hung behind it.
    assert_eq!(ctl(&sock, "server 0 weight 2"), "");
    assert_eq!(server_field(&ctl(&sock, "servers"), 0, "weight"), "2");
    // A device is not read either (the old code read /dev/zero until memory ran out).
    let zero = ctl_in_background(&sock, "include /dev/zero");
    assert_eq!(
        zero.recv_timeout(CTL_TIMEOUT)
            .expect("include of /dev/zero answered"),
        "error: /dev/zero: not a regular file\n"
    );
    // A reload and then a stop are acted on.
    q.signal("HUP");
    assert!(
        q.wait_stderr_contains("SIGHUP: reloaded", Duration::from_secs(5)),
        "{}",
        q.stderr()
    );
    q.signal("TERM");
    let st = q
        .wait_exit(Duration::from_secs(10))
        .expect("SIGTERM acted on");
    assert_eq!(st.code(), Some(0), "{}", q.stderr());
}

#[test]
fn include_never_quotes_the_file_it_rejects() {
    let g = greet("g");
    let (q, sock) = start_ctl(&[], &[spec(g.addr())]);
    // A secret file: the first line is what /etc/shadow's would be.
    let secret = q.path("shadow");
    fs::write(
        &secret,
        "root:$6$SALTYSECRET$hash:19000:0:99999:7:::\nserver 0 weight 5\n",
    )
    .unwrap();
    let reply = ctl_err(
        &sock,
        &format!("include {}", secret.display()),
        &format!("{}:1: not a control command", secret.display()),
    );
    assert!(
        !reply.contains("SALTY") && !reply.contains("root"),
        "{reply}"
    );
    // A line that parses but cannot be applied is not quoted either.
    let refused = q.path("refused.cmds");
    fs::write(&refused, "server 7 address TOPSECRET.invalid\n").unwrap();
    let reply = ctl_err(
        &sock,
        &format!("include {}", refused.display()),
        &format!("{}:1: ", refused.display()),
    );
    // The reply names the file, whose random temporary path may hold a 7 itself: look past it.
    let rest = reply.replace(&refused.display().to_string(), "");
    assert!(
        !rest.contains("TOPSECRET") && !rest.contains('7'),
        "{reply}"
    );
    // Nor a file named by an `include` line in it (the name is the file's content).
    let nest = q.path("nest.cmds");
    fs::write(&nest, format!("include {}\n", secret.display())).unwrap();
    let reply = ctl_err(
        &sock,
        &format!("include {}", nest.display()),
        &format!("{}:1: ", nest.display()),
    );
    assert!(
        !reply.contains("shadow") && !reply.contains("SALTY"),
        "{reply}"
    );
    assert_eq!(
        server_field(&ctl(&sock, "servers"), 0, "weight"),
        "1",
        "a rejected include changed something"
    );
    if Path::new("/etc/shadow").exists() {
        let reply = ctl(&sock, "include /etc/shadow");
        assert!(reply.starts_with("error: /etc/shadow"), "{reply}");
        assert!(!reply.contains("root"), "{reply}");
    }
}

#[test]
fn command_file_at_start_still_names_the_offending_word() {
    // The operator's own -F file keeps the detailed message (only `include` hides it).
    let g = greet("g");
    let dir = scratch_dir();
    let file = dir.path().join("start.cmds");
    fs::write(&file, "server 0 weight 3\nfrobnicate now\n").unwrap();
    let port = free_port();
    let (code, err) = run_quill_expect_exit(&[
        "-F",
        &file.display().to_string(),
        &format!("127.0.0.1:{port}"),
        &g.addr().to_string(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("{}:2: ", file.display())) && err.contains("frobnicate"),
        "{err}"
    );
}

#[test]
fn log_to_an_unopenable_file_is_an_error() {
    let g = greet("g");
    let (q, sock) = start_ctl(&[], &[spec(g.addr())]);
    let before = ctl(&sock, "log");
    assert_eq!(before.trim(), q.log_path().display().to_string());
    let missing = q.path("no-such-dir/a.log");
    ctl_err(
        &sock,
        &format!("log {}", missing.display()),
        &format!("cannot open access log {}", missing.display()),
    );
    assert_eq!(
        ctl(&sock, "log"),
        before,
        "a refused log changed the setting"
    );
    let dir = q.path("");
    ctl_err(
        &sock,
        &format!("log {}", dir.display()),
        "cannot open access log",
    );
    // A FIFO nobody reads would block the writer: refused at once too.
    let fifo = q.path("log.fifo");
    mkfifo(&fifo);
    let reply = ctl_in_background(&sock, &format!("log {}", fifo.display()))
        .recv_timeout(CTL_TIMEOUT)
        .expect("log FIFO answered");
    assert!(
        reply.starts_with("error: cannot open access log"),
        "{reply}"
    );
    assert_eq!(ctl(&sock, "log"), before);
    // A file that can be opened is taken.
    let good = q.path("other.log");
    assert_eq!(ctl(&sock, &format!("log {}", good.display())), "");
    assert_eq!(ctl(&sock, "log").trim(), good.display().to_string());
}

#[test]
fn toml_with_invalid_utf8_names_the_line() {
    let dir = scratch_dir();
    let file = dir.path().join("bad.toml");
    let mut body = b"[[listener]]\nname = \"a\"\n# caf".to_vec();
    body.extend_from_slice(&[0xe9, b'\n']);
    body.extend_from_slice(b"listen = \"127.0.0.1:1\"\n");
    fs::write(&file, body).unwrap();
    let path = file.display().to_string();
    let (code, err) = run_quill_expect_exit(&["check", "--config", &path]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        first_line(&err),
        format!("quill: error: {path}:3: not valid UTF-8")
    );
    let (code, err) = run_quill_expect_exit(&["--config", &path]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("{path}:3: not valid UTF-8")), "{err}");
    // A -F file too.
    let cmds = dir.path().join("bad.cmds");
    fs::write(&cmds, b"hash\n\xff\n").unwrap();
    let (code, err) = run_quill_expect_exit(&[
        "-F",
        &cmds.display().to_string(),
        "127.0.0.1:1",
        "127.0.0.1:2",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("{}:2: not valid UTF-8", cmds.display())),
        "{err}"
    );
}

#[test]
fn configuration_from_a_fifo_a_device_or_a_huge_file_is_refused() {
    let dir = scratch_dir();
    let fifo = dir.path().join("q.toml");
    mkfifo(&fifo);
    let fifo = fifo.display().to_string();
    // Without a writer the old code waited in open(2) forever (run_quill_output bounds it).
    let (code, err) = run_quill_expect_exit(&["check", "--config", &fifo]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("{fifo}: not a regular file")),
        "{err}"
    );
    let (code, err) = run_quill_expect_exit(&["-F", "/dev/zero", "127.0.0.1:1", "127.0.0.1:2"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/dev/zero: not a regular file"), "{err}");
    let huge = dir.path().join("huge.toml");
    let mut body = String::from("# padding\n");
    while body.len() <= 4 << 20 {
        body.push_str("# ................................................................\n");
    }
    fs::write(&huge, body).unwrap();
    let huge = huge.display().to_string();
    let (code, err) = run_quill_expect_exit(&["check", "--config", &huge]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("{huge}: larger than 4 MiB")), "{err}");
}

#[test]
fn unix_listener_never_replaces_a_regular_file() {
    let g = greet("g");
    let dir = scratch_dir();
    let data = dir.path().join("data.sock");
    fs::write(&data, "precious\n").unwrap();
    let (code, err) = run_quill_expect_exit(&[&data.display().to_string(), &g.addr().to_string()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "cannot listen on {}: exists and is not a socket",
            data.display()
        )),
        "{err}"
    );
    assert_eq!(fs::read_to_string(&data).unwrap(), "precious\n");

    // The control socket path: the same.
    let control = dir.path().join("ctl.sock");
    fs::write(&control, "precious\n").unwrap();
    let port = free_port();
    let (code, err) = run_quill_expect_exit(&[
        "-C",
        &control.display().to_string(),
        &format!("127.0.0.1:{port}"),
        &g.addr().to_string(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&control.display().to_string()) && err.contains("exists and is not a socket"),
        "{err}"
    );
    assert_eq!(fs::read_to_string(&control).unwrap(), "precious\n");

    // A symlink is not followed, and not removed.
    let link = dir.path().join("link.sock");
    std::os::unix::fs::symlink(&data, &link).unwrap();
    let (code, err) = run_quill_expect_exit(&[&link.display().to_string(), &g.addr().to_string()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("exists and is not a socket"), "{err}");
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(fs::read_to_string(&data).unwrap(), "precious\n");
}

#[test]
fn listen_over_control_never_replaces_a_regular_file_but_a_stale_socket_is_replaced() {
    let g = greet("g");
    let (q, sock) = start_ctl(&[], &[spec(g.addr())]);
    let file = q.path("app.conf");
    fs::write(&file, "secret\n").unwrap();
    ctl_err(
        &sock,
        &format!("listen {}", file.display()),
        "exists and is not a socket",
    );
    assert_eq!(fs::read_to_string(&file).unwrap(), "secret\n");
    // A socket file nobody listens on (left by a crash) is replaced, at start and by `listen`.
    let stale = q.path("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert_eq!(ctl(&sock, &format!("listen {}", stale.display())), "");
    let mut s = std::os::unix::net::UnixStream::connect(&stale).expect("serves the new socket");
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    assert_eq!(read_line(&mut s), "g");

    let dir = scratch_dir();
    let path = dir.path().join("data.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let mut q2 = QuillProcess::spawn_in(
        dir,
        vec![path.display().to_string(), g.addr().to_string()],
        0,
    );
    let mut s = q2.wait_ready_unix(&path);
    assert_eq!(read_line(&mut s), "g");
}

#[test]
fn sighup_while_draining_does_not_listen_again() {
    let g = greet("g");
    let (mut q, _sock) = start_ctl(&[], &[spec(g.addr())]);
    let (name, _held) = greet_session(q.port);
    assert_eq!(name, "g");
    q.signal("TERM");
    assert!(q.wait_stderr_contains("stopping", Duration::from_secs(5)));
    // The old code rebuilt the (emptied) listener list: the port was bound again while draining.
    q.signal("HUP");
    assert!(
        q.wait_stderr_contains("SIGHUP", Duration::from_secs(5)),
        "{}",
        q.stderr()
    );
    assert!(
        std::net::TcpStream::connect_timeout(&q.addr(), Duration::from_secs(2))
            .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused),
        "listening again while draining"
    );
    q.signal("TERM");
    let st = q
        .wait_exit(Duration::from_secs(10))
        .expect("second SIGTERM stops");
    assert_eq!(st.code(), Some(0), "{}", q.stderr());
}

#[test]
fn stopping_never_removes_a_file_that_replaced_its_socket() {
    let g = greet("g");
    let dir = scratch_dir();
    let path = dir.path().join("data.sock");
    let control = dir.path().join("ctl.sock");
    let mut q = QuillProcess::spawn_in(
        dir,
        vec![
            "-C".into(),
            control.display().to_string(),
            path.display().to_string(),
            g.addr().to_string(),
        ],
        0,
    );
    let mut s = q.wait_ready_unix(&path);
    assert_eq!(read_line(&mut s), "g");
    drop(s);
    wait_ctl(&q, &control);
    // Someone puts files where the sockets were; Quill's clean-up at exit must leave them.
    for p in [&path, &control] {
        let tmp = p.with_extension("new");
        fs::write(&tmp, "not yours\n").unwrap();
        fs::rename(&tmp, p).unwrap();
    }
    q.signal("TERM");
    let st = q.wait_exit(Duration::from_secs(10)).expect("stops");
    assert_eq!(st.code(), Some(0), "{}", q.stderr());
    assert_eq!(fs::read_to_string(&path).unwrap(), "not yours\n");
    assert_eq!(fs::read_to_string(&control).unwrap(), "not yours\n");
}
