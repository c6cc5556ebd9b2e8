//! Shared helpers for the integration tests: start the real `quill` binary, talk to it over loopback
//! sockets, and read its access log. Every wait here has a deadline, every loop is bounded, every
//! read has a timeout, and every child process is killed by PID when its guard is dropped.

use std::fs;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

pub mod ports;

pub use quill::demo::{pattern, Behaviour, DemoServer};

/// Path of the binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_quill");

/// How long we wait for quill to accept connections after spawning it.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Default timeout for a single blocking read or write on a test socket.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// Addresses and ports
// ---------------------------------------------------------------------------------------------

/// A port on 127.0.0.1 that nothing holds, over TCP or UDP, from this binary's block of the
/// port registry ([`ports`]): no other test of the run is handed it.
pub fn free_port() -> u16 {
    ports::port_on(Ipv4Addr::LOCALHOST.into()).expect("a free port in this binary's block")
}

/// A port on ::1 that nothing holds, from the port registry, or None when ::1 is not usable here.
pub fn free_port_v6() -> Option<u16> {
    ports::port_on(Ipv6Addr::LOCALHOST.into())
}

/// An address on 127.0.0.1 where connect() is refused (nothing listens there): a port of the
/// registry, which no other test of the run listens on.
pub fn refused_addr() -> SocketAddr {
    SocketAddr::new(Ipv4Addr::LOCALHOST.into(), free_port())
}

/// Starts a demo backend on 127.0.0.1 with an ephemeral port.
pub fn demo(behaviour: Behaviour) -> DemoServer {
    DemoServer::start("127.0.0.1:0", behaviour).expect("start demo backend")
}

/// A Greet backend: sends "NAME\n" on connect, then echoes.
pub fn greet(name: &str) -> DemoServer {
    demo(Behaviour::Greet {
        name: name.to_string(),
    })
}

/// An Echo backend.
pub fn echo() -> DemoServer {
    demo(Behaviour::Echo)
}

/// An HTTP backend.
pub fn http(name: &str) -> DemoServer {
    demo(Behaviour::Http {
        name: name.to_string(),
    })
}

/// Wait (bounded) until connecting to `addr` is refused, e.g. after dropping a DemoServer.
pub fn wait_refused(addr: SocketAddr, within: Duration) {
    let deadline = Instant::now() + within;
    for _ in 0..1000 {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "{addr} still accepts connections after {within:?}"
        );
        thread::sleep(Duration::from_millis(20));
    }
    panic!("{addr} still accepts connections");
}

// ---------------------------------------------------------------------------------------------
// Socket helpers
// ---------------------------------------------------------------------------------------------

/// Connects to a TCP address with a connect timeout and read/write timeouts set.
pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    set_timeouts(&s, IO_TIMEOUT);
    s
}

/// Connects to 127.0.0.1:port.
pub fn connect_port(port: u16) -> TcpStream {
    connect(SocketAddr::from(([127, 0, 0, 1], port)))
}

pub fn set_timeouts(s: &TcpStream, t: Duration) {
    s.set_read_timeout(Some(t)).unwrap();
    s.set_write_timeout(Some(t)).unwrap();
}

/// Reads one line (up to and including '\n', at most 4096 bytes) within `IO_TIMEOUT`.
/// Returns the line without the trailing newline.
pub fn read_line<R: Read>(r: &mut R) -> String {
    try_read_line(r).unwrap_or_else(|e| panic!("read_line: {e}"))
}

/// Like [`read_line`] but returns an error on EOF, timeout or reset.
pub fn try_read_line<R: Read>(r: &mut R) -> io::Result<String> {
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    let deadline = Instant::now() + IO_TIMEOUT;
    while out.len() < 4096 {
        if Instant::now() > deadline {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "line deadline"));
        }
        match r.read(&mut b) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("EOF after {:?}", String::from_utf8_lossy(&out)),
                ))
            }
            Ok(_) => {
                if b[0] == b'\n' {
                    return Ok(String::from_utf8_lossy(&out).into_owned());
                }
                out.push(b[0]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(io::ErrorKind::InvalidData, "line too long"))
}

/// Reads exactly `n` bytes (bounded by `within`).
pub fn read_exact_within<R: Read>(r: &mut R, n: usize, within: Duration) -> Vec<u8> {
    let deadline = Instant::now() + within;
    let mut out = vec![0u8; n];
    let mut got = 0;
    while got < n {
        assert!(
            Instant::now() < deadline,
            "read_exact: only {got} of {n} bytes within {within:?}"
        );
        match r.read(&mut out[got..]) {
            Ok(0) => panic!("read_exact: EOF after {got} of {n} bytes"),
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                panic!("read_exact: stalled, no data for the read timeout after {got} of {n} bytes")
            }
            Err(e) => panic!("read_exact: {e} after {got} of {n} bytes"),
        }
    }
    out
}

/// Reads until EOF (bounded by `within` and by `max` bytes). Panics on timeout or error.
pub fn read_until_eof<R: Read>(r: &mut R, within: Duration) -> Vec<u8> {
    match try_read_until_eof(r, within, 256 << 20) {
        (out, Ok(())) => out,
        (out, Err(e)) => panic!("read_until_eof: {e} after {} bytes", out.len()),
    }
}

/// Reads until EOF; returns the bytes read and how the read ended (Ok on EOF).
pub fn try_read_until_eof<R: Read>(
    r: &mut R,
    within: Duration,
    max: usize,
) -> (Vec<u8>, io::Result<()>) {
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if Instant::now() > deadline {
            return (
                out,
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no EOF before deadline",
                )),
            );
        }
        if out.len() > max {
            return (
                out,
                Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "more bytes than expected",
                )),
            );
        }
        match r.read(&mut buf) {
            Ok(0) => return (out, Ok(())),
            Ok(k) => out.extend_from_slice(&buf[..k]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (out, Err(e)),
        }
    }
}

/// How a connection ended when we waited for it to close.
#[derive(Debug, PartialEq, Eq)]
pub enum Closed {
    /// Orderly EOF.
    Eof,
    /// Connection reset / aborted / broken pipe.
    Reset,
}

/// Waits (bounded) for the peer to close `s`: returns the bytes received before the close and how it
/// closed. Panics if the connection is still open after `within`.
pub fn wait_closed(s: &mut TcpStream, within: Duration) -> (Vec<u8>, Closed) {
    let _ = s.set_read_timeout(Some(within.max(Duration::from_millis(10))));
    let (data, res) = try_read_until_eof(s, within, 64 << 20);
    match res {
        Ok(()) => (data, Closed::Eof),
        Err(e) if is_reset(&e) => (data, Closed::Reset),
        Err(e) => panic!(
            "connection not closed within {within:?}: {e} (got {} bytes)",
            data.len()
        ),
    }
}

pub fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}

/// True when the connection is still open: no EOF, no reset, nothing to read within `probe`.
pub fn still_open(s: &mut TcpStream, probe: Duration) -> bool {
    let _ = s.set_read_timeout(Some(probe));
    let mut b = [0u8; 1];
    let r = match s.read(&mut b) {
        Ok(_) => false,
        Err(e) => matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ),
    };
    let _ = s.set_read_timeout(Some(IO_TIMEOUT));
    r
}

/// Writes all of `data` (the socket has a write timeout).
pub fn write_all<W: Write>(w: &mut W, data: &[u8]) {
    w.write_all(data)
        .unwrap_or_else(|e| panic!("write_all of {} bytes: {e}", data.len()));
}

/// `n` bytes of the demo pattern, starting at offset `start`.
pub fn pattern_bytes(start: u64, n: usize) -> Vec<u8> {
    (start..start + n as u64).map(pattern).collect()
}

/// One echo round trip through a Greet backend session: writes `msg`, expects it back exactly.
pub fn echo_roundtrip(s: &mut TcpStream, msg: &[u8]) {
    write_all(s, msg);
    let got = read_exact_within(s, msg.len(), IO_TIMEOUT);
    assert_eq!(got, msg, "echoed bytes differ");
}

/// Connects to quill on 127.0.0.1:port, reads the Greet backend's name line and returns (name, stream).
pub fn greet_session(port: u16) -> (String, TcpStream) {
    let mut s = connect_port(port);
    let name = read_line(&mut s);
    (name, s)
}

/// Connects, reads the greeting, closes; returns the backend name.
pub fn greet_name(port: u16) -> String {
    greet_session(port).0
}

// ---------------------------------------------------------------------------------------------
// Test-local backends
// ---------------------------------------------------------------------------------------------

/// A TCP backend that accepts connections and holds them open without reading or closing them.
/// Optionally sends `greeting` and shuts down its write side right after accepting.
pub struct Holder {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    pub conns: Arc<Mutex<Vec<TcpStream>>>,
    pub accepted: Arc<AtomicU64>,
}

impl Holder {
    pub fn start() -> Holder {
        Holder::start_with(None, false)
    }

    /// `greeting`: bytes written right after accept; `shutdown_write`: then send FIN.
    pub fn start_with(greeting: Option<Vec<u8>>, shutdown_write: bool) -> Holder {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let conns = Arc::new(Mutex::new(Vec::new()));
        let accepted = Arc::new(AtomicU64::new(0));
        let (stop2, conns2, acc2) = (stop.clone(), conns.clone(), accepted.clone());
        thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            while !stop2.load(Ordering::SeqCst) && Instant::now() < deadline {
                match l.accept() {
                    Ok((mut c, _)) => {
                        let _ = c.set_nonblocking(false);
                        set_timeouts(&c, IO_TIMEOUT);
                        if let Some(g) = &greeting {
                            let _ = c.write_all(g);
                        }
                        if shutdown_write {
                            let _ = c.shutdown(Shutdown::Write);
                        }
                        acc2.fetch_add(1, Ordering::SeqCst);
                        conns2.lock().unwrap().push(c);
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Holder {
            addr,
            stop,
            conns,
            accepted,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn count(&self) -> usize {
        self.conns.lock().unwrap().len()
    }

    /// Waits (bounded) until at least `n` connections were accepted; false on timeout.
    pub fn wait_count(&self, n: usize, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while self.count() < n {
            if Instant::now() >= deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// Waits (bounded) for the n-th accepted connection and returns a clone of it.
    pub fn wait_conn(&self, index: usize, within: Duration) -> TcpStream {
        let deadline = Instant::now() + within;
        loop {
            if let Some(c) = self.conns.lock().unwrap().get(index) {
                return c.try_clone().unwrap();
            }
            assert!(
                Instant::now() < deadline,
                "holder: connection #{index} not accepted within {within:?}"
            );
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// A black-holed server on loopback: a listener with a tiny backlog whose accept queue is filled
/// with connections that are never accepted, so the kernel drops further SYNs and connect() times
/// out. `None` if the trick does not work on this kernel.
pub struct BlackHole {
    _listener: TcpListener,
    _fillers: Vec<TcpStream>,
    addr: SocketAddr,
}

impl BlackHole {
    pub fn start() -> Option<BlackHole> {
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
        sock.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .ok()?;
        sock.listen(0).ok()?;
        let listener: TcpListener = sock.into();
        let addr = listener.local_addr().ok()?;
        let mut fillers = Vec::new();
        // Fill the accept queue (bounded): stop at the first connect that times out.
        for _ in 0..200 {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                Ok(c) => fillers.push(c),
                Err(_) => break,
            }
        }
        // Verify: a plain connect with a 1 s timeout must time out.
        let t = Instant::now();
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Err(e)
                if e.kind() == io::ErrorKind::TimedOut
                    || t.elapsed() >= Duration::from_millis(900) =>
            {
                Some(BlackHole {
                    _listener: listener,
                    _fillers: fillers,
                    addr,
                })
            }
            _ => None,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// A Unix-socket echo server at `path` (a test-local backend). Stops accepting when dropped.
pub struct UnixEcho {
    pub path: PathBuf,
    stop: Arc<AtomicBool>,
    pub accepted: Arc<AtomicU64>,
}

impl UnixEcho {
    pub fn start(path: &Path) -> UnixEcho {
        let l = UnixListener::bind(path).unwrap_or_else(|e| panic!("bind {}: {e}", path.display()));
        l.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicU64::new(0));
        let (stop2, acc2) = (stop.clone(), accepted.clone());
        thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            while !stop2.load(Ordering::SeqCst) && Instant::now() < deadline {
                match l.accept() {
                    Ok((c, _)) => {
                        acc2.fetch_add(1, Ordering::SeqCst);
                        thread::spawn(move || unix_echo(c));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        UnixEcho {
            path: path.to_path_buf(),
            stop,
            accepted,
        }
    }
}

fn unix_echo(mut c: UnixStream) {
    let _ = c.set_nonblocking(false);
    let _ = c.set_read_timeout(Some(IO_TIMEOUT));
    let _ = c.set_write_timeout(Some(IO_TIMEOUT));
    let mut buf = [0u8; 16 * 1024];
    for _ in 0..1_000_000 {
        match c.read(&mut buf) {
            Ok(0) => {
                let _ = c.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => {
                if c.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(_) => return,
        }
    }
}

impl Drop for UnixEcho {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------------------------
// System calls counted in a running process
// ---------------------------------------------------------------------------------------------

/// `strace -f -c` attached to a running process (every thread), counting some system calls
/// until [`Strace::counts`]. Stopped by its PID on drop.
pub struct Strace {
    child: Child,
    out: PathBuf,
}

impl Strace {
    /// Attaches to `pid`, counting the calls in `calls` (strace's `trace=` list); the summary is
    /// written to `out`. None (with why on stderr, naming `test`) where strace is not installed or
    /// cannot attach: the caller skips its check.
    pub fn attach(test: &str, pid: u32, calls: &str, out: &Path) -> Option<Strace> {
        if Command::new("strace").arg("-V").output().is_err() {
            eprintln!("strace is not installed: {test} skipped");
            return None;
        }
        let mut child = Command::new("strace")
            .args(["-f", "-c", "-e", &format!("trace={calls}"), "-o"])
            .arg(out)
            .args(["-p", &pid.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run strace");
        // strace says "Process N attached" per thread; all are attached before it says anything
        // else.
        let mut err = io::BufReader::new(child.stderr.take().expect("strace's stderr"));
        let mut first = String::new();
        let _ = io::BufRead::read_line(&mut err, &mut first);
        let st = Strace {
            child,
            out: out.to_path_buf(),
        };
        if !first.contains("attached") {
            eprintln!(
                "strace cannot attach here ({}): {test} skipped",
                first.trim()
            );
            return None;
        }
        thread::spawn(move || {
            let mut rest = String::new();
            let _ = err.read_to_string(&mut rest);
        });
        Some(st)
    }

    /// Stops counting (SIGINT: strace writes its summary) and returns how many times each call
    /// was made, with strace's summary table as text.
    pub fn counts(mut self) -> (std::collections::HashMap<String, usize>, String) {
        let stopped = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(stopped.success());
        // strace detaches and writes its summary at once; killed (on drop) if it has not within
        // ten seconds.
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        let text = fs::read_to_string(&self.out).unwrap_or_default();
        // `% time  seconds  usecs/call  calls  [errors]  syscall`: the count is the fourth field
        // (the `total` line left out).
        let counts = text
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|f| f.len() >= 5 && f.last() != Some(&"total") && f[3].parse::<usize>().is_ok())
            .map(|f| (f[f.len() - 1].to_string(), f[3].parse().unwrap_or(0)))
            .collect();
        (counts, text)
    }
}

impl Drop for Strace {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// The quill process
// ---------------------------------------------------------------------------------------------

/// Removes ANSI colour escapes (tracing may colour its output even when not on a terminal).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                while let Some(&n) = chars.peek() {
                    chars.next();
                    if n.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// First non-empty line of some output (ANSI stripped).
pub fn first_line(s: &str) -> String {
    strip_ansi(s)
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .to_string()
}

/// A running quill child process. Killed with SIGKILL (by PID) on drop; its stdout and stderr are
/// captured to files in a private tempdir and printed when the test is failing.
pub struct QuillProcess {
    child: Child,
    pub pid: u32,
    /// Private scratch directory (logs, configs, sockets, pid files).
    pub dir: tempfile::TempDir,
    pub stdout_path: PathBuf,
    pub stderr_path: PathBuf,
    /// The listen port (TCP listeners on 127.0.0.1 / ::1), 0 when not applicable.
    pub port: u16,
    /// The listen IP (127.0.0.1 unless changed with [`Quill::spawn_first_at`]).
    pub ip: std::net::IpAddr,
    /// Number of successful readiness connections (each may have become a session).
    pub probes: usize,
    exit: Option<ExitStatus>,
    args: Vec<String>,
}

/// A fresh scratch directory for a quill process (short path: Unix socket paths must stay short).
pub fn scratch_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("quill-t")
        .tempdir_in("/tmp")
        .expect("tempdir")
}

impl QuillProcess {
    /// Spawns quill with `args` (no readiness wait), stdout/stderr to files in `dir`.
    pub fn spawn_in(dir: tempfile::TempDir, args: Vec<String>, port: u16) -> QuillProcess {
        QuillProcess::spawn_in_cmd(BIN, dir, args, port)
    }

    /// Like [`QuillProcess::spawn_in`] through `program` (a parent that execs quill, keeping its
    /// pid: a socket-activating one).
    pub fn spawn_in_cmd(
        program: &str,
        dir: tempfile::TempDir,
        args: Vec<String>,
        port: u16,
    ) -> QuillProcess {
        let stdout_path = dir.path().join("stdout.txt");
        let stderr_path = dir.path().join("stderr.txt");
        let child = Command::new(program)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(fs::File::create(&stdout_path).unwrap())
            .stderr(fs::File::create(&stderr_path).unwrap())
            .spawn()
            .expect("spawn quill");
        let pid = child.id();
        QuillProcess {
            child,
            pid,
            dir,
            stdout_path,
            stderr_path,
            port,
            ip: std::net::Ipv4Addr::LOCALHOST.into(),
            probes: 0,
            exit: None,
            args,
        }
    }

    pub fn stderr(&self) -> String {
        strip_ansi(&fs::read_to_string(&self.stderr_path).unwrap_or_default())
    }

    pub fn stdout(&self) -> String {
        strip_ansi(&fs::read_to_string(&self.stdout_path).unwrap_or_default())
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The default access log path (used by [`Quill::start`] and friends).
    pub fn log_path(&self) -> PathBuf {
        self.path("access.log")
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }

    /// Non-blocking check: has the process exited?
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            if let Ok(Some(st)) = self.child.try_wait() {
                self.exit = Some(st);
            }
        }
        self.exit
    }

    /// Waits (bounded) for the process to exit; None if it is still running after `within`.
    pub fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(st) = self.try_exit() {
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends a signal by PID with kill(1): "TERM", "INT", "HUP", ...
    pub fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid.to_string())
            .status()
            .expect("run kill");
        assert!(st.success(), "kill -{sig} {} failed", self.pid);
    }

    /// Polls connect() to 127.0.0.1:port (bounded) until it succeeds; returns the connected stream
    /// (it IS the first client) and the instant the successful attempt started. Panics with quill's
    /// stderr when quill exits or the deadline passes.
    pub fn wait_ready_tcp(&mut self, addr: SocketAddr) -> Result<(TcpStream, Instant), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        for _ in 0..10_000 {
            if let Some(st) = self.try_exit() {
                return Err(format!(
                    "quill exited early ({st}); stderr:\n{}",
                    self.stderr()
                ));
            }
            let started = Instant::now();
            if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
                set_timeouts(&s, IO_TIMEOUT);
                self.probes += 1;
                return Ok((s, started));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "quill not accepting on {addr} within {READY_TIMEOUT:?}; stderr:\n{}",
                    self.stderr()
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
        Err("readiness loop exhausted".into())
    }

    /// Same for a Unix socket listener.
    pub fn wait_ready_unix(&mut self, path: &Path) -> UnixStream {
        let deadline = Instant::now() + READY_TIMEOUT;
        for _ in 0..10_000 {
            if let Some(st) = self.try_exit() {
                panic!("quill exited early ({st}); stderr:\n{}", self.stderr());
            }
            if let Ok(s) = UnixStream::connect(path) {
                s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
                s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
                self.probes += 1;
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "quill not accepting on {} within {READY_TIMEOUT:?}; stderr:\n{}",
                path.display(),
                self.stderr()
            );
            thread::sleep(Duration::from_millis(20));
        }
        panic!("readiness loop exhausted");
    }

    /// Waits (bounded) until stderr contains `needle`.
    pub fn wait_stderr_contains(&self, needle: &str, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if self.stderr().contains(needle) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Access log lines at the default path.
    pub fn log_lines(&self) -> Vec<LogLine> {
        read_access_log(&self.log_path())
    }

    /// Waits (bounded) until the default access log has at least `n` lines; returns them.
    pub fn wait_log_lines(&self, n: usize, within: Duration) -> Vec<LogLine> {
        wait_log(&self.log_path(), within, |l| l.len() >= n).unwrap_or_else(|got| {
            panic!(
                "expected {n} access log lines, got {}: {got:#?}\nstderr:\n{}",
                got.len(),
                self.stderr()
            )
        })
    }

    /// Waits (bounded) for the access log line number `index` (0-based) and returns it; use the
    /// line count taken before a session started to get that session's line.
    pub fn wait_line_at(&self, index: usize, within: Duration) -> LogLine {
        self.wait_log_lines(index + 1, within)[index].clone()
    }

    /// Waits for the readiness probe sessions to be logged (they may have held a backend
    /// connection). Bounded; does not fail if they never show up.
    pub fn settle(&self) {
        if !self
            .args
            .iter()
            .any(|a| a == "-l" || a == "--log" || a == "--config")
        {
            return;
        }
        // Lines counted, not parsed: on an HTTP listener the probes' lines (a TLS handshake
        // ended, a PROXY header never sent) are the listener's combined or JSON lines.
        let path = self.log_path();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let text = fs::read_to_string(&path).unwrap_or_default();
            if text.matches('\n').count() >= self.probes {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for QuillProcess {
    fn drop(&mut self) {
        if self.try_exit().is_none() {
            // SIGKILL by PID.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if thread::panicking() {
            eprintln!(
                "---- quill {:?} (pid {}) stderr ----\n{}",
                self.args,
                self.pid,
                self.stderr()
            );
            let out = self.stdout();
            if !out.is_empty() {
                eprintln!("---- quill stdout ----\n{out}");
            }
            if let Ok(log) = fs::read_to_string(self.log_path()) {
                eprintln!("---- access log ----\n{log}");
            }
        }
    }
}

/// Starting quill with a TCP listener on 127.0.0.1 (free port picked, retried on "in use").
pub struct Quill;

impl Quill {
    /// Spawns quill with the args built by `build(dir, port)`, waits for readiness by polling
    /// connect, and returns the process plus the readiness connection (the first client) and the
    /// instant its connect attempt started.
    pub fn spawn_first(
        build: impl Fn(&Path, u16) -> Vec<String>,
    ) -> (QuillProcess, TcpStream, Instant) {
        Quill::spawn_first_at(std::net::Ipv4Addr::LOCALHOST.into(), build)
    }

    /// Like [`Quill::spawn_first`] for a listener on `ip` (127.0.0.1 or ::1).
    pub fn spawn_first_at(
        ip: std::net::IpAddr,
        build: impl Fn(&Path, u16) -> Vec<String>,
    ) -> (QuillProcess, TcpStream, Instant) {
        let mut last = String::new();
        for _attempt in 0..5 {
            let dir = scratch_dir();
            let port = TcpListener::bind(SocketAddr::new(ip, 0))
                .and_then(|l| l.local_addr())
                .unwrap_or_else(|e| panic!("bind {ip} port 0: {e}"))
                .port();
            let args = build(dir.path(), port);
            let mut q = QuillProcess::spawn_in(dir, args, port);
            q.ip = ip;
            match q.wait_ready_tcp(q.addr()) {
                Ok((s, t)) => return (q, s, t),
                Err(e) => {
                    let in_use =
                        q.try_exit().is_some() && q.stderr().to_lowercase().contains("in use");
                    if !in_use {
                        panic!("{e}");
                    }
                    last = e;
                }
            }
        }
        panic!("could not start quill after 5 attempts: {last}");
    }

    /// Spawns with `build`, waits for readiness, closes the probe and waits for it to settle.
    pub fn start_with(build: impl Fn(&Path, u16) -> Vec<String>) -> QuillProcess {
        let (q, probe, _) = Quill::spawn_first(build);
        drop(probe);
        q.settle();
        q
    }

    /// `quill OPTS -l DIR/access.log 127.0.0.1:PORT SERVERS...`, ready and settled.
    pub fn start(opts: &[&str], servers: &[String]) -> QuillProcess {
        Quill::start_with(|dir, port| pen_args(dir, port, opts, servers))
    }

    /// Like [`Quill::start`] but keeps the readiness connection as the first client.
    pub fn start_first(opts: &[&str], servers: &[String]) -> (QuillProcess, TcpStream, Instant) {
        Quill::spawn_first(|dir, port| pen_args(dir, port, opts, servers))
    }
}

/// Pen-style arguments: OPTS, an access log in `dir`, the listen address, the servers.
pub fn pen_args(dir: &Path, port: u16, opts: &[&str], servers: &[String]) -> Vec<String> {
    let mut a: Vec<String> = opts.iter().map(|s| s.to_string()).collect();
    a.push("-l".into());
    a.push(dir.join("access.log").display().to_string());
    a.push(format!("127.0.0.1:{port}"));
    a.extend(servers.iter().cloned());
    a
}

/// Server spec for a backend address ("127.0.0.1:PORT" / "[::1]:PORT").
pub fn spec(addr: SocketAddr) -> String {
    addr.to_string()
}

/// Server spec with extra Pen fields: HOST:PORT:MAXCONN:HARD:WEIGHT:PRIO.
pub fn spec_full(addr: SocketAddr, maxconn: u32, hard: u32, weight: u32, prio: u32) -> String {
    format!("{addr}:{maxconn}:{hard}:{weight}:{prio}")
}

/// Runs quill to completion (bounded) and returns (exit code, stdout, stderr), ANSI stripped.
/// A process still running after the deadline is killed and the test fails.
pub fn run_quill_output(args: &[&str]) -> (i32, String, String) {
    let dir = scratch_dir();
    let mut q = QuillProcess::spawn_in(dir, args.iter().map(|s| s.to_string()).collect(), 0);
    let st = q.wait_exit(Duration::from_secs(10));
    let Some(st) = st else {
        panic!(
            "quill {args:?} still running after 10 s; stderr:\n{}",
            q.stderr()
        );
    };
    let code = st
        .code()
        .unwrap_or_else(|| panic!("quill {args:?} killed by signal: {st}"));
    (code, q.stdout(), q.stderr())
}

/// Runs quill expecting it to exit; returns (exit code, stderr).
pub fn run_quill_expect_exit(args: &[&str]) -> (i32, String) {
    let (code, _out, err) = run_quill_output(args);
    (code, err)
}

// ---------------------------------------------------------------------------------------------
// Access log
// ---------------------------------------------------------------------------------------------

/// Every reason a session can end with, as the access log and the metrics name them.
pub const END_REASONS: [&str; 18] = [
    "done",
    "client_reset",
    "server_reset",
    "idle_timeout",
    "fin_timeout",
    "fastclose",
    "no_server",
    "refused",
    "shutdown",
    "error",
    "denied",
    "closed",
    "tls_failed",
    "tls_timeout",
    "evicted",
    "responses",
    "proxy_untrusted",
    "proxy_invalid",
];

/// One access log line: CLIENT_IP UNIX_TIME SERVER BYTES_IN BYTES_OUT DURATION END
#[derive(Debug, Clone, PartialEq)]
pub struct LogLine {
    pub raw: String,
    pub client: String,
    pub time: String,
    pub server: String,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub duration: String,
    pub end: String,
}

pub fn parse_log_line(line: &str) -> Option<LogLine> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() != 7 {
        return None;
    }
    Some(LogLine {
        raw: line.to_string(),
        client: f[0].to_string(),
        time: f[1].to_string(),
        server: f[2].to_string(),
        bytes_in: f[3].parse().ok()?,
        bytes_out: f[4].parse().ok()?,
        duration: f[5].to_string(),
        end: f[6].to_string(),
    })
}

/// All complete lines of an access log. A line that does not have the documented shape fails the
/// test (the format is part of the contract).
pub fn read_access_log(path: &Path) -> Vec<LogLine> {
    let text = fs::read_to_string(path).unwrap_or_default();
    let mut out = Vec::new();
    // Only complete lines (a line being written may not have its newline yet).
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    for l in complete.lines().filter(|l| !l.trim().is_empty()) {
        let parsed = parse_log_line(l).unwrap_or_else(|| {
            panic!("access log line does not have the documented 7 fields: {l:?}")
        });
        out.push(parsed);
    }
    out
}

/// Waits (bounded) until `pred` holds for the lines of the log at `path`. Err(lines) on timeout.
pub fn wait_log(
    path: &Path,
    within: Duration,
    pred: impl Fn(&[LogLine]) -> bool,
) -> Result<Vec<LogLine>, Vec<LogLine>> {
    let deadline = Instant::now() + within;
    loop {
        let lines = read_access_log(path);
        if pred(&lines) {
            return Ok(lines);
        }
        if Instant::now() >= deadline {
            return Err(lines);
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) for a log line matching `pred`; panics with the log if none shows up.
pub fn wait_log_line(path: &Path, within: Duration, pred: impl Fn(&LogLine) -> bool) -> LogLine {
    match wait_log(path, within, |ls| ls.iter().any(&pred)) {
        Ok(ls) => ls.into_iter().find(|l| pred(l)).unwrap(),
        Err(ls) => panic!(
            "no matching access log line within {within:?} in {}: {ls:#?}",
            path.display()
        ),
    }
}

/// Counts occurrences of each name in a list.
pub fn tally(names: &[String]) -> std::collections::BTreeMap<String, usize> {
    let mut m = std::collections::BTreeMap::new();
    for n in names {
        *m.entry(n.clone()).or_insert(0) += 1;
    }
    m
}

/// Compares big buffers without printing megabytes on failure.
pub fn assert_same_bytes(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let first_diff = got.iter().zip(want).position(|(a, b)| a != b);
    panic!(
        "{what}: got {} bytes, want {}; first difference at {:?}",
        got.len(),
        want.len(),
        first_diff.or(Some(got.len().min(want.len())))
    );
}

/// Writes `data` on a clone of `s` from another thread, then shuts down the write side; reads
/// everything until EOF on this thread. Returns what was read.
pub fn send_and_collect(s: &mut TcpStream, data: Vec<u8>, within: Duration) -> Vec<u8> {
    let mut w = s.try_clone().unwrap();
    let writer = thread::spawn(move || {
        w.write_all(&data).expect("write");
        w.shutdown(Shutdown::Write).expect("shutdown write");
    });
    let got = read_until_eof(s, within);
    writer.join().expect("writer thread");
    got
}

/// VmRSS of a process in KiB, from /proc/PID/status.
pub fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status:\n{status}"))
}

/// Whether the tests run as root (needed for -u and -j).
pub fn running_as_root() -> bool {
    let me = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    me.lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

/// `quill demo` on a free port; returns it once its hints are printed.
pub fn start_demo() -> (QuillProcess, String) {
    let (q, probe, _) = Quill::spawn_first(|_dir, port| {
        vec![
            "demo".into(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
        ]
    });
    drop(probe);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !q.stdout().contains("Stop with Ctrl-C") && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    let out = q.stdout();
    assert!(out.contains("Stop with Ctrl-C"), "{out}");
    (q, out)
}

/// Waits for `child` to exit, at most `within`; past that it is killed and the test fails naming
/// `what`. Every short-lived command a test runs (`quill ctl`, a shell script) ends through here.
pub fn wait_or_kill(child: &mut Child, within: Duration, what: &str) -> ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(st) = child.try_wait().expect("wait for a child process") {
            return st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} still running after {within:?}");
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for a child at most `within`, killing it by its PID past that; its output.
pub fn wait_child(mut child: std::process::Child, within: Duration) -> std::process::Output {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait_with_output().unwrap()
}
