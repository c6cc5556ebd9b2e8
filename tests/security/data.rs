//! Attacks on the data path (docs/design.md#probe-findings): truncation masked as a clean end (D5),
//! one client address holding every session (`max_per_source`), and running out of descriptors
//! starving the control socket and the admin listener (D17).

use crate::support;

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use socket2::{Domain, SockRef, Socket, Type};
use support::*;

/// Bytes the resetting backend sends before its reset (the probe's reproducer).
const PARTIAL: usize = 100_000;

/// A backend thread that runs `serve` on every connection it accepts until dropped (or for at most
/// two minutes).
struct Backend {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Backend {
    fn start(serve: fn(TcpStream)) -> Backend {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind backend");
        l.set_nonblocking(true).expect("nonblocking backend");
        let addr = l.local_addr().expect("backend address");
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            while !stop2.load(Ordering::SeqCst) && Instant::now() < deadline {
                match l.accept() {
                    Ok((c, _)) => {
                        let _ = c.set_nonblocking(false);
                        thread::spawn(move || serve(c));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Backend { addr, stop }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Sends `PARTIAL` bytes, then resets the connection (SO_LINGER 0, close).
fn send_then_reset(mut c: TcpStream) {
    let _ = c.write_all(&[b'x'; PARTIAL]);
    let _ = SockRef::from(&c).set_linger(Some(Duration::ZERO));
}

/// Streams bytes until the connection fails (bounded in time): an endless download.
fn stream_forever(mut c: TcpStream) {
    let chunk = [b'y'; 64 * 1024];
    let _ = c.set_write_timeout(Some(Duration::from_secs(30)));
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline && c.write_all(&chunk).is_ok() {}
}

/// Reads until the connection ends: the bytes received and whether it ended with a reset.
/// `pace` sleeps between reads of at most 64 KiB (a slow client); bounded by `within`.
fn read_to_end_paced(s: &mut TcpStream, pace: Duration, within: Duration) -> (usize, Closed) {
    s.set_read_timeout(Some(within)).expect("read timeout");
    let deadline = Instant::now() + within;
    let mut buf = vec![0u8; 64 * 1024];
    let mut n = 0;
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return (n, Closed::Eof),
            Ok(k) => n += k,
            Err(e) if is_reset(&e) => return (n, Closed::Reset),
            Err(e) => panic!("read failed after {n} bytes: {e}"),
        }
        if !pace.is_zero() {
            thread::sleep(pace);
        }
    }
    panic!("connection still open after {within:?} ({n} bytes)");
}

fn server_reset_reaches_the_client(opts: &[&str]) {
    let b = Backend::start(send_then_reset);
    let q = Quill::start(opts, &[spec(b.addr)]);
    let before = q.log_lines().len();
    for i in 0..10 {
        let mut s = connect_port(q.port);
        let (n, how) = read_to_end_paced(&mut s, Duration::ZERO, Duration::from_secs(10));
        assert_eq!(
            how,
            Closed::Reset,
            "{opts:?} session {i}: a clean end after {n} bytes hides the server's reset"
        );
        assert!(n <= PARTIAL, "{opts:?} session {i}: {n} bytes");
    }
    let lines = q.wait_log_lines(before + 10, Duration::from_secs(5));
    for l in &lines[before..] {
        assert_eq!(l.end, "server_reset", "{opts:?}: {l:?}");
    }
}

#[test]
fn server_reset_after_a_partial_response_reaches_the_client_as_a_reset() {
    server_reset_reaches_the_client(&[]);
}

#[test]
fn server_reset_after_a_partial_response_reaches_the_client_as_a_reset_without_splice() {
    server_reset_reaches_the_client(&["--no-splice"]);
}

#[test]
fn client_reset_reaches_the_server_as_a_reset() {
    let h = Holder::start();
    let q = Quill::start(&[], &[spec(h.addr())]);
    let index = h.count();
    let mut s = connect_port(q.port);
    write_all(&mut s, b"hi");
    let mut server_side = h.wait_conn(index, Duration::from_secs(5));
    let mut got = [0u8; 2];
    server_side
        .read_exact(&mut got)
        .expect("the server gets the bytes");
    SockRef::from(&s)
        .set_linger(Some(Duration::ZERO))
        .expect("SO_LINGER");
    drop(s);
    server_side
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut rest = [0u8; 16];
    match server_side.read(&mut rest) {
        Err(e) if is_reset(&e) => {}
        other => panic!("the client's reset reached the server as {other:?}"),
    }
    // (The readiness probe's session stays half-open: the holder never closes.)
    let line = wait_log_line(&q.log_path(), Duration::from_secs(5), |l| l.bytes_in == 2);
    assert_eq!(line.end, "client_reset", "{line:?}");
}

/// Starts a download through `q` and checks bytes flow.
fn start_download(q: &QuillProcess) -> TcpStream {
    let mut s = connect_port(q.port);
    let got = read_exact_within(&mut s, 256 * 1024, Duration::from_secs(10));
    assert_eq!(got.len(), 256 * 1024);
    s
}

#[test]
fn drain_deadline_cut_reaches_the_client_as_a_reset() {
    let b = Backend::start(stream_forever);
    let mut q = Quill::start(&["--drain-timeout", "1s"], &[spec(b.addr)]);
    let mut s = start_download(&q);
    q.signal("TERM");
    // A slow client (about 3 MB/s): the download is still running at the deadline.
    let (n, how) = read_to_end_paced(&mut s, Duration::from_millis(20), Duration::from_secs(30));
    assert_eq!(
        how,
        Closed::Reset,
        "the drain deadline cut the download after {n} bytes with a clean end"
    );
    q.wait_exit(Duration::from_secs(10)).expect("quill exits");
    // The access log still says why (the probe session before it ended on its own).
    let line = wait_log_line(&q.log_path(), Duration::from_secs(2), |l| {
        l.bytes_out >= 256 * 1024
    });
    assert_eq!(line.end, "shutdown", "{line:?}");
}

#[test]
fn second_signal_cut_reaches_the_client_as_a_reset() {
    let b = Backend::start(stream_forever);
    let mut q = Quill::start(&["--drain-timeout", "60s"], &[spec(b.addr)]);
    let mut s = start_download(&q);
    q.signal("TERM");
    thread::sleep(Duration::from_millis(300));
    q.signal("TERM");
    let (n, how) = read_to_end_paced(&mut s, Duration::from_millis(5), Duration::from_secs(30));
    assert_eq!(
        how,
        Closed::Reset,
        "the second signal cut the download after {n} bytes with a clean end"
    );
    q.wait_exit(Duration::from_secs(10)).expect("quill exits");
}

/// A client connection from `ip` (bound before connecting).
fn connect_from(ip: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    sock.bind(&SocketAddr::from((ip, 0)).into())
        .unwrap_or_else(|e| panic!("bind {ip}: {e}"));
    sock.connect_timeout(&to.into(), Duration::from_secs(5))
        .expect("connect");
    let s: TcpStream = sock.into();
    set_timeouts(&s, IO_TIMEOUT);
    s
}

/// Whether `s` is served: an echo round trip works (false when quill closes it instead).
fn served(s: &mut TcpStream, msg: &[u8]) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    if s.write_all(msg).is_err() {
        return false;
    }
    let mut got = vec![0u8; msg.len()];
    s.read_exact(&mut got).is_ok() && got == msg
}

#[test]
fn one_client_address_cannot_hold_more_than_max_per_source_sessions() {
    let e = echo();
    let q = Quill::start_with(|dir, port| {
        let log = dir.join("access.log");
        let cfg = dir.join("quill.toml");
        let text = format!(
            "log = \"{}\"\n\n[[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:{port}\"\nservers = [\"{}\"]\nmax_per_source = 5\n",
            log.display(),
            e.addr()
        );
        std::fs::write(&cfg, text).expect("write config");
        vec!["--config".into(), cfg.display().to_string()]
    });
    let addr = q.addr();
    let mut held: Vec<TcpStream> = (0..5)
        .map(|i| {
            let mut s = connect_from(Ipv4Addr::LOCALHOST, addr);
            assert!(served(&mut s, b"ping\n"), "session {i} of 5 not served");
            s
        })
        .collect();
    let before = q.log_lines().len();
    let mut sixth = connect_from(Ipv4Addr::LOCALHOST, addr);
    let (got, _) = wait_closed(&mut sixth, Duration::from_secs(5));
    assert!(got.is_empty(), "the 6th session got {got:?}");
    let line = q.wait_line_at(before, Duration::from_secs(5));
    assert_eq!(
        (line.client.as_str(), line.end.as_str()),
        ("127.0.0.1", "refused")
    );

    let mut other = connect_from(Ipv4Addr::new(127, 0, 0, 2), addr);
    assert!(
        served(&mut other, b"another address\n"),
        "a client from 127.0.0.2 was refused"
    );

    // One of the five leaves: its place is free again (once quill has seen it go).
    let gone = held.pop().expect("five sessions");
    gone.shutdown(std::net::Shutdown::Write).unwrap();
    drop(gone);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut again = loop {
        let mut s = connect_from(Ipv4Addr::LOCALHOST, addr);
        if served(&mut s, b"back\n") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "no session from 127.0.0.1 after one of the five closed"
        );
        thread::sleep(Duration::from_millis(50));
    };
    assert!(served(&mut again, b"still\n"));
    for (i, s) in held.iter_mut().enumerate() {
        assert!(served(s, b"held\n"), "held session {i} was disturbed");
    }
}

/// quill run through `prlimit` (prlimit execs it: same PID); killed on drop.
struct Limited {
    child: Child,
    dir: tempfile::TempDir,
}

impl Limited {
    fn stderr(&self) -> String {
        strip_ansi(&std::fs::read_to_string(self.dir.path().join("stderr.txt")).unwrap_or_default())
    }
}

impl Drop for Limited {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!("---- quill stderr ----\n{}", self.stderr());
        }
    }
}

/// Connects to `addr` and polls until it answers (bounded).
fn wait_listening(q: &mut Limited, addr: SocketAddr) {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(Some(st)) = q.child.try_wait() {
            panic!("quill exited early ({st}):\n{}", q.stderr());
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "quill not ready:\n{}",
            q.stderr()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `request` on a new connection to `addr` and reads the answer until EOF (bounded).
fn ask(addr: SocketAddr, request: &[u8]) -> io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(3)))?;
    s.write_all(request)?;
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[test]
fn emfile_on_the_data_path_leaves_the_control_socket_and_admin_listener_answering() {
    if Command::new("prlimit")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_or(true, |s| !s.success())
    {
        eprintln!("SKIPPED: prlimit (util-linux) is not installed");
        return;
    }
    let e = echo();
    let dir = scratch_dir();
    let (port, control, admin) = (free_port(), free_port(), free_port());
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let stderr = std::fs::File::create(dir.path().join("stderr.txt")).unwrap();
    let child = Command::new("prlimit")
        .arg("--nofile=300:300")
        .arg("--")
        .arg(BIN)
        .args(["-x", "1000", "-C"])
        .arg(format!("127.0.0.1:{control}"))
        .arg("--admin")
        .arg(format!("127.0.0.1:{admin}"))
        .arg(format!("127.0.0.1:{port}"))
        .arg(spec(e.addr()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn prlimit");
    let pid = child.id();
    let mut q = Limited { child, dir };
    wait_listening(&mut q, addr);
    let control = SocketAddr::from(([127, 0, 0, 1], control));
    let admin = SocketAddr::from(([127, 0, 0, 1], admin));
    wait_listening(&mut q, admin);
    let warning = q.stderr();
    assert!(
        warning.contains("-x 1000") && warning.contains("300") && warning.contains("at most"),
        "no warning naming -x and the open-file limit:\n{warning}"
    );

    // 400 idle clients: more than 300 descriptors could hold as sessions.
    let mut clients = Vec::new();
    for _ in 0..400 {
        if let Ok(c) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            clients.push(c);
        }
    }
    thread::sleep(Duration::from_millis(500));
    for round in 0..3 {
        let answer = ask(control, b"pid\n")
            .unwrap_or_else(|e| panic!("round {round}: control socket: {e}\n{}", q.stderr()));
        assert_eq!(answer.trim(), pid.to_string(), "round {round}: control");
        let metrics = ask(
            admin,
            format!("GET /metrics HTTP/1.0\r\nHost: {admin}\r\n\r\n").as_bytes(),
        )
        .unwrap_or_else(|e| panic!("round {round}: admin listener: {e}\n{}", q.stderr()));
        assert!(
            metrics.starts_with("HTTP/1.1 200") && metrics.contains("quill_sessions_active"),
            "round {round}: /metrics: {}",
            first_line(&metrics)
        );
    }
    assert!(
        !q.stderr().contains("Too many open files"),
        "sessions ran the process out of descriptors:\n{}",
        q.stderr()
    );
    // Some clients were served all along: an echo still works on the first one.
    assert!(served(&mut clients[0], b"still served\n"));
    drop(clients);
}
