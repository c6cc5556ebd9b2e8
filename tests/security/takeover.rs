//! `--takeover` against a changed configuration and against a hostile or silent "old process"
//! (D9, D14 in docs/design.md#probe-findings). Handed-over sockets are adopted only when they
//! listen where the new configuration says; a listener, admin listener or control socket that moved
//! is bound anew (the old address is released when the old process exits), and a socket at any
//! other address, or one that is not a listening stream socket, is closed. The fake old processes
//! here speak the handshake themselves: read `takeover\n`, answer the names as a JSON line with the
//! sockets attached (SCM_RIGHTS), then read `done\n`.

use crate::support;

use std::io::{IoSlice, Read, Write};
use std::mem::MaybeUninit;
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::thread;
use std::time::Duration;

use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use support::*;

/// One exchange over a Unix control socket (Pen's framing: a line, the reply until EOF).
fn ctl(sock: &Path, line: &str) -> String {
    let mut s =
        UnixStream::connect(sock).unwrap_or_else(|e| panic!("connect {}: {e}", sock.display()));
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.write_all(format!("{line}\n").as_bytes()).unwrap();
    String::from_utf8(read_until_eof(&mut s, IO_TIMEOUT)).unwrap()
}

/// `GET /api/status` from the admin listener on 127.0.0.1:port, or the connect error.
fn admin_status(port: u16) -> Result<String, std::io::Error> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    set_timeouts(&s, IO_TIMEOUT);
    s.write_all(b"GET /api/status HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    Ok(String::from_utf8_lossy(&read_until_eof(&mut s, IO_TIMEOUT)).into_owned())
}

fn refused(port: u16) -> bool {
    TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(2),
    )
    .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
}

#[test]
fn takeover_with_a_changed_listen_address_binds_the_new_one() {
    let g = greet("g");
    let (admin1, admin2) = (free_port(), free_port());
    let old = Quill::start_with(|dir, port| {
        let sock = dir.join("m.sock").display().to_string();
        let admin = format!("127.0.0.1:{admin1}");
        pen_args(
            dir,
            port,
            &["-C", &sock, "--admin", &admin],
            &[spec(g.addr())],
        )
    });
    let old_sock = old.path("m.sock");
    assert!(admin_status(admin1).is_ok(), "{}", old.stderr());

    // The new process: another listen address, another admin port, another control socket.
    let dir = scratch_dir();
    let new_sock = dir.path().join("n.sock");
    let port2 = free_port();
    let args = vec![
        "-C".to_string(),
        new_sock.display().to_string(),
        "--admin".into(),
        format!("127.0.0.1:{admin2}"),
        "--takeover".into(),
        old_sock.display().to_string(),
        format!("127.0.0.1:{port2}"),
        g.addr().to_string(),
    ];
    let mut new = QuillProcess::spawn_in(dir, args, port2);
    assert!(
        new.wait_stderr_contains("took over", Duration::from_secs(10)),
        "new:\n{}\nold:\n{}",
        new.stderr(),
        old.stderr()
    );
    let stderr = new.stderr();
    assert!(
        stderr.contains(&format!(
            "takeover: listener 'default' moved from 127.0.0.1:{} to 127.0.0.1:{port2}: bound anew",
            old.port
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "admin listener moved from 127.0.0.1:{admin1} to 127.0.0.1:{admin2}: bound anew"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("control socket moved from"), "{stderr}");
    // The new addresses serve, and say the truth.
    let (_s, _) = new.wait_ready_tcp(new.addr()).expect("new address serves");
    assert_eq!(greet_name(port2), "g");
    let status = admin_status(admin2).expect("new admin port answers");
    assert!(status.contains(&format!("\"pid\":{}", new.pid)), "{status}");
    assert_eq!(ctl(&new_sock, "pid").trim(), new.pid.to_string());
    assert_eq!(
        ctl(&new_sock, "listen").trim(),
        format!("127.0.0.1:{port2}")
    );
    // The old process drains and exits; its addresses are released with it.
    let mut old = old;
    let st = old
        .wait_exit(Duration::from_secs(10))
        .expect("old process exits");
    assert_eq!(st.code(), Some(0), "{}", old.stderr());
    assert!(refused(old.port), "old listen address still accepting");
    assert!(refused(admin1), "old admin port still accepting");
    assert_eq!(greet_name(port2), "g");
}

/// A fake old process at `path`: answers one `takeover` with `names` and `fds`, then reads the
/// new process's `done` (if it comes within the timeout) and says `ok`.
fn fake_old_process(path: &Path, names: &[&str], fds: Vec<OwnedFd>) -> thread::JoinHandle<String> {
    let listener = UnixListener::bind(path).unwrap();
    let payload = format!(
        "{{\"names\":[{}]}}\n",
        names
            .iter()
            .map(|n| format!("\"{n}\""))
            .collect::<Vec<_>>()
            .join(",")
    );
    thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        let mut asked = [0u8; 9];
        conn.read_exact(&mut asked).unwrap();
        assert_eq!(&asked, b"takeover\n");
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        let lent: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
        assert!(control.push(SendAncillaryMessage::ScmRights(&lent)));
        rustix::net::sendmsg(
            &conn,
            &[IoSlice::new(payload.as_bytes())],
            &mut control,
            SendFlags::empty(),
        )
        .unwrap();
        let said = try_read_line(&mut conn).unwrap_or_default();
        let _ = conn.write_all(b"ok\n");
        said
    })
}

#[test]
fn takeover_never_adopts_a_socket_bound_elsewhere() {
    let g = greet("g");
    let dir = scratch_dir();
    let fake = dir.path().join("fake.sock");
    // Handed over as listener 'default' but listening on another port; and as 'admin', a UDP
    // socket.
    let foreign = TcpListener::bind("127.0.0.1:0").unwrap();
    let foreign_port = foreign.local_addr().unwrap().port();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let fds = vec![
        foreign.as_fd().try_clone_to_owned().unwrap(),
        udp.as_fd().try_clone_to_owned().unwrap(),
    ];
    let old = fake_old_process(&fake, &["default", "admin"], fds);
    let (port, admin) = (free_port(), free_port());
    let args = vec![
        "--admin".to_string(),
        format!("127.0.0.1:{admin}"),
        "--takeover".into(),
        fake.display().to_string(),
        format!("127.0.0.1:{port}"),
        g.addr().to_string(),
    ];
    let mut q = QuillProcess::spawn_in(dir, args, port);
    let (_probe, _) = q
        .wait_ready_tcp(q.addr())
        .expect("the configured address serves");
    assert_eq!(old.join().unwrap(), "done");
    let stderr = q.stderr();
    assert!(
        stderr.contains(&format!(
            "takeover: listener 'default' moved from 127.0.0.1:{foreign_port} to 127.0.0.1:{port}: bound anew"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("takeover: socket 'admin': not a listening stream socket; closing it"),
        "{stderr}"
    );
    assert_eq!(greet_name(port), "g");
    assert!(admin_status(admin).is_ok_and(|s| s.contains(&format!("\"pid\":{}", q.pid))));
    // Once the test (and its fake old process) let go of their copies, nothing listens on the
    // foreign port: Quill never took it.
    drop(foreign);
    assert!(
        refused(foreign_port),
        "the foreign listener was adopted: it still accepts"
    );
}

#[test]
fn silent_takeover_peer_is_named_in_the_error() {
    let g = greet("g");
    let dir = scratch_dir();
    let fake = dir.path().join("silent.sock");
    let listener = UnixListener::bind(&fake).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let silent = thread::spawn(move || {
        // Accepts and says nothing until the test is done with it.
        let (_conn, _) = listener.accept().unwrap();
        let _ = rx.recv_timeout(Duration::from_secs(30));
    });
    let port = free_port();
    let args = vec![
        "--takeover".to_string(),
        fake.display().to_string(),
        format!("127.0.0.1:{port}"),
        g.addr().to_string(),
    ];
    let mut q = QuillProcess::spawn_in(dir, args, port);
    let st = q
        .wait_exit(Duration::from_secs(20))
        .expect("quill gives up");
    let _ = tx.send(());
    silent.join().unwrap();
    assert_eq!(st.code(), Some(1), "{}", q.stderr());
    assert_eq!(
        first_line(&q.stderr()),
        format!(
            "quill: error: takeover: the process behind {} did not answer within 5 s",
            fake.display()
        )
    );
}
