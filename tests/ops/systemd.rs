//! systemd integration, tested the way systemd does it: a parent process (python3, so the test
//! itself needs no `unsafe`) binds and listens, moves the sockets to descriptors 3.., sets
//! `LISTEN_FDS`, `LISTEN_PID` (its own pid: it then execs quill, which keeps it) and
//! `LISTEN_FDNAMES`, and execs the real binary. sd_notify messages are read from a datagram socket
//! the test binds and names in `NOTIFY_SOCKET`. Also the drop-in form for systemd-socket-proxyd.

use crate::support;

use std::fs;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use support::*;

// ---------------------------------------------------------------------------------------------
// The socket-activating parent
// ---------------------------------------------------------------------------------------------

/// Binds and listens on every socket of the spec, moves them to 3.., sets the LISTEN_ variables
/// and execs argv (same pid, so LISTEN_PID names quill). It writes the sockets' inodes to
/// `inodes` first, so the test can tell them from any socket quill would bind itself.
/// Optional: WATCHDOG_PID = its own pid.
const PARENT_PY: &str = r#"
import fcntl, json, os, socket, sys
spec = json.loads(sys.argv[1])
high = []
inodes = []
for s in spec["sockets"]:
    if "path" in s:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(s["path"])
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((s["host"], s["port"]))
    sock.listen(128)
    inodes.append(str(os.fstat(sock.fileno()).st_ino))
    high.append(fcntl.fcntl(sock.fileno(), fcntl.F_DUPFD, 100))
    sock.close()
with open(spec["inodes"], "w") as f:
    f.write(" ".join(inodes))
for i, fd in enumerate(high):
    os.dup2(fd, 3 + i)
    os.close(fd)
env = dict(os.environ)
env["LISTEN_FDS"] = str(len(high))
env["LISTEN_PID"] = str(os.getpid())
env["LISTEN_FDNAMES"] = ":".join(s.get("name", "unknown") for s in spec["sockets"])
if spec.get("watchdog_pid_self"):
    env["WATCHDOG_PID"] = str(os.getpid())
os.execve(spec["argv"][0], spec["argv"], env)
"#;

/// A socket the parent passes.
enum Sock {
    Tcp { port: u16, name: &'static str },
    Unix { path: PathBuf, name: &'static str },
}

fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// Quill started by the socket-activating parent. Killed by PID when dropped; its stderr is
/// printed when the test fails.
struct Activated {
    child: Child,
    pid: u32,
    dir: tempfile::TempDir,
    exit: Option<ExitStatus>,
}

/// How to start one: sockets, quill's arguments, extra environment, and an optional wrapper
/// command put in front of the parent (used for a private mount namespace).
#[derive(Default)]
struct Launch<'a> {
    sockets: Vec<Sock>,
    args: Vec<String>,
    env: Vec<(&'a str, String)>,
    watchdog_pid_self: bool,
    wrapper: Vec<String>,
}

impl Activated {
    fn start(launch: Launch) -> Activated {
        Activated::start_in(scratch_dir(), launch)
    }

    fn start_in(dir: tempfile::TempDir, launch: Launch) -> Activated {
        let sockets: Vec<serde_json::Value> = launch
            .sockets
            .iter()
            .map(|s| match s {
                Sock::Tcp { port, name } => {
                    serde_json::json!({"host": "127.0.0.1", "port": port, "name": name})
                }
                Sock::Unix { path, name } => {
                    serde_json::json!({"path": path.display().to_string(), "name": name})
                }
            })
            .collect();
        let mut argv = vec![BIN.to_string()];
        argv.extend(launch.args.iter().cloned());
        let spec = serde_json::json!({
            "sockets": sockets,
            "inodes": dir.path().join("inodes").display().to_string(),
            "argv": argv,
            "watchdog_pid_self": launch.watchdog_pid_self,
        });
        let script = dir.path().join("parent.py");
        fs::write(&script, PARENT_PY).unwrap();
        let mut words = launch.wrapper.clone();
        words.extend([
            python().to_string(),
            script.display().to_string(),
            spec.to_string(),
        ]);
        let mut cmd = Command::new(&words[0]);
        cmd.args(&words[1..])
            .env_remove("LISTEN_FDS")
            .env_remove("LISTEN_PID")
            .env_remove("LISTEN_FDNAMES")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .stdin(Stdio::null())
            .stdout(fs::File::create(dir.path().join("stdout.txt")).unwrap())
            .stderr(fs::File::create(dir.path().join("stderr.txt")).unwrap());
        for (k, v) in &launch.env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn the socket-activating parent");
        Activated {
            pid: child.id(),
            child,
            dir,
            exit: None,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn stderr(&self) -> String {
        strip_ansi(&fs::read_to_string(self.path("stderr.txt")).unwrap_or_default())
    }

    fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            if let Ok(Some(st)) = self.child.try_wait() {
                self.exit = Some(st);
            }
        }
        self.exit
    }

    fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
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

    fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid.to_string())
            .status()
            .expect("run kill");
        assert!(st.success(), "kill -{sig} {} failed", self.pid);
    }

    /// Waits (bounded) until stderr has `needle`; panics with stderr if quill exits first.
    fn wait_stderr(&mut self, needle: &str) {
        let deadline = Instant::now() + READY_TIMEOUT;
        while !self.stderr().contains(needle) {
            if let Some(st) = self.try_exit() {
                panic!(
                    "quill exited ({st}) before logging {needle:?}:\n{}",
                    self.stderr()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} in stderr within {READY_TIMEOUT:?}:\n{}",
                self.stderr()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until quill serves: its last "ready:" line, the workers' ("ready: N worker(s), at
    /// most ..."), logged once they run. Each listener's "ready:" line comes before it (waiting
    /// for the first "ready:" let a test read stderr before the workers' line was written).
    fn wait_ready(&mut self) {
        self.wait_stderr(" worker(s), at most ");
    }

    /// Sends a control command over the control socket in the scratch directory.
    fn ctl(&self, command: &[&str]) -> String {
        let socket = self.path("ctl.sock").display().to_string();
        let mut args = vec!["ctl", "--socket", socket.as_str()];
        args.extend_from_slice(command);
        let (code, out, err) = run_quill_output(&args);
        assert_eq!(code, 0, "quill ctl {command:?}: {err}");
        out
    }
}

impl Drop for Activated {
    fn drop(&mut self) {
        if self.try_exit().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if thread::panicking() {
            eprintln!(
                "---- quill (pid {}) stderr ----\n{}",
                self.pid,
                self.stderr()
            );
            if let Ok(log) = fs::read_to_string(self.path("access.log")) {
                eprintln!("---- access log ----\n{log}");
            }
        }
    }
}

/// `quill OPTS SERVER` in socket-proxyd's form on one inherited socket at 127.0.0.1:port.
fn proxyd(port: u16, opts: &[&str], server: &str) -> Activated {
    let mut args: Vec<String> = opts.iter().map(|s| s.to_string()).collect();
    args.push(server.to_string());
    let mut q = Activated::start(Launch {
        sockets: vec![Sock::Tcp {
            port,
            name: "quill-proxyd.socket",
        }],
        args,
        ..Launch::default()
    });
    q.wait_ready();
    q
}

/// The socket-proxyd form with a control socket `ctl.sock` in the scratch directory.
fn proxyd_with_control(opts: &[&str], server: &str) -> Activated {
    let dir = scratch_dir();
    let mut args = vec![
        "-C".to_string(),
        dir.path().join("ctl.sock").display().to_string(),
    ];
    args.extend(opts.iter().map(|s| s.to_string()));
    args.push(server.to_string());
    let mut q = Activated::start_in(
        dir,
        Launch {
            sockets: vec![Sock::Tcp {
                port: free_port(),
                name: "quill-proxyd.socket",
            }],
            args,
            ..Launch::default()
        },
    );
    q.wait_ready();
    q
}

/// Runs quill directly (no sockets passed) with `env`, expecting it to exit within 10 s.
fn run_with_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let dir = scratch_dir();
    let err_path = dir.path().join("stderr.txt");
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(&err_path).unwrap());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn quill");
    let status = wait_or_kill(
        &mut child,
        Duration::from_secs(10),
        &format!("quill {args:?}"),
    );
    let err = strip_ansi(&fs::read_to_string(&err_path).unwrap_or_default());
    (status.code().expect("exit code"), err)
}

// ---------------------------------------------------------------------------------------------
// What the tests look at
// ---------------------------------------------------------------------------------------------

/// Inodes of the sockets listening on TCP port `port` (IPv4 and IPv6), from /proc/net.
fn listening_inodes(port: u16) -> Vec<String> {
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let listening = f.get(3) == Some(&"0A");
            let on_port = f
                .get(1)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok())
                == Some(port);
            if listening && on_port {
                out.extend(f.get(9).map(|s| s.to_string()));
            }
        }
    }
    out
}

/// Asserts that the only socket listening on `port` is the parent's socket number `i` (the one
/// it bound and passed): quill bound nothing of its own there.
fn assert_serves_inherited(q: &Activated, port: u16, i: usize) {
    let inodes = fs::read_to_string(q.path("inodes")).expect("the parent wrote its inodes");
    let passed = inodes.split_whitespace().nth(i).expect("inode of socket i");
    assert_eq!(
        listening_inodes(port),
        vec![passed.to_string()],
        "port {port}: the listener must be the socket passed as descriptor {}",
        3 + i
    );
    let held = fs::read_dir(format!("/proc/{}/fd", q.pid))
        .expect("quill's descriptors")
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .any(|link| link.to_string_lossy() == format!("socket:[{passed}]"));
    assert!(held, "quill does not hold the passed socket {passed}");
}

/// The datagram socket named in NOTIFY_SOCKET.
struct Notify {
    socket: UnixDatagram,
    /// What NOTIFY_SOCKET says: a path, or @name for an abstract socket.
    address: String,
}

impl Notify {
    fn at_path(path: &Path) -> Notify {
        let socket = UnixDatagram::bind(path).expect("bind the notify socket");
        Notify {
            socket,
            address: path.display().to_string(),
        }
    }

    fn abstract_named(name: &str) -> Notify {
        let addr = UnixAddr::from_abstract_name(name.as_bytes()).unwrap();
        let socket = UnixDatagram::bind_addr(&addr).expect("bind the abstract notify socket");
        Notify {
            socket,
            address: format!("@{name}"),
        }
    }

    /// The next message, if one comes within `within`.
    fn next(&self, within: Duration) -> Option<String> {
        self.socket
            .set_read_timeout(Some(within.max(Duration::from_millis(1))))
            .unwrap();
        let mut buf = [0u8; 4096];
        let n = self.socket.recv(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// Messages until one satisfies `done` (included) or `within` passes.
    fn until(&self, within: Duration, done: impl Fn(&str) -> bool) -> Vec<String> {
        let deadline = Instant::now() + within;
        let mut got = Vec::new();
        for _ in 0..10_000 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let Some(m) = self.next(left) else { break };
            let finished = done(&m);
            got.push(m);
            if finished {
                break;
            }
        }
        got
    }
}

// ---------------------------------------------------------------------------------------------
// Test-local backends
// ---------------------------------------------------------------------------------------------

/// An echo server on a Linux abstract Unix socket.
fn abstract_echo(name: &str) -> UnixListener {
    let addr = UnixAddr::from_abstract_name(name.as_bytes()).unwrap();
    let l = UnixListener::bind_addr(&addr).expect("bind abstract socket");
    let server = l.try_clone().unwrap();
    thread::spawn(move || {
        for _ in 0..64 {
            let Ok((mut c, _)) = server.accept() else {
                return;
            };
            thread::spawn(move || {
                c.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
                let mut buf = [0u8; 4096];
                for _ in 0..10_000 {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if c.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    l
}

/// A TCP backend that reads until the client's EOF, then answers "got N bytes\n" and closes.
fn eof_answerer() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    thread::spawn(move || {
        for _ in 0..16 {
            let Ok((mut c, _)) = l.accept() else { return };
            thread::spawn(move || {
                set_timeouts(&c, IO_TIMEOUT);
                let (data, _) = try_read_until_eof(&mut c, IO_TIMEOUT, 1 << 20);
                let _ = c.write_all(format!("got {} bytes\n", data.len()).as_bytes());
            });
        }
    });
    addr
}

fn unix_roundtrip(path_or_abstract: &str, port: u16) {
    let mut s = connect_port(port);
    echo_roundtrip(&mut s, format!("through {path_or_abstract}\n").as_bytes());
}

// ---------------------------------------------------------------------------------------------
// Socket activation
// ---------------------------------------------------------------------------------------------

/// Quill activated with two TCP sockets (each a port and its `FileDescriptorName`) and two
/// listeners: "web" configured on `web_port`, forwarding to a server greeting "A", and "api" on
/// `api_port`, to one greeting "B". Waits until it is ready, having inherited both sockets.
fn activate_web_and_api(
    web_port: u16,
    api_port: u16,
    sockets: [(u16, &'static str); 2],
) -> (Activated, [DemoServer; 2]) {
    let (a, b) = (greet("A"), greet("B"));
    let dir = scratch_dir();
    let config = dir.path().join("quill.toml");
    fs::write(
        &config,
        format!(
            "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{web_port}\"\nservers = [\"{}\"]\n\n\
             [[listener]]\nname = \"api\"\nlisten = \"127.0.0.1:{api_port}\"\nservers = [\"{}\"]\n",
            a.addr(),
            b.addr()
        ),
    )
    .unwrap();
    let mut q = Activated::start_in(
        dir,
        Launch {
            sockets: sockets
                .iter()
                .map(|&(port, name)| Sock::Tcp { port, name })
                .collect(),
            args: vec!["--config".into(), config.display().to_string()],
            ..Launch::default()
        },
    );
    q.wait_ready();
    assert!(
        q.stderr().contains("inherited 2 listening socket(s)"),
        "{}",
        q.stderr()
    );
    (q, [a, b])
}

#[test]
fn socket_activation_serves_on_inherited_socket() {
    // "web" is matched by its name although its configured address differs; "api" by address.
    let (named_port, addressed_port, unbound_port) = (free_port(), free_port(), free_port());
    let (q, _servers) = activate_web_and_api(
        unbound_port,
        addressed_port,
        [(named_port, "web"), (addressed_port, "quill.socket")],
    );
    assert_eq!(greet_name(named_port), "A");
    assert_eq!(greet_name(addressed_port), "B");
    assert_serves_inherited(&q, named_port, 0);
    assert_serves_inherited(&q, addressed_port, 1);
    assert!(
        listening_inodes(unbound_port).is_empty(),
        "quill bound the configured address of 'web' instead of using its inherited socket"
    );
}

#[test]
fn socket_activation_two_sockets_sharing_a_unit_name_each_serve_their_own_listener() {
    // systemd gives every socket of a unit its `FileDescriptorName`: "web" (named like the
    // socket) and "api" (at the other socket's address) each take their own, and neither binds.
    let (web_port, api_port) = (free_port(), free_port());
    let (q, _servers) =
        activate_web_and_api(web_port, api_port, [(web_port, "web"), (api_port, "web")]);
    assert_eq!(greet_name(web_port), "A");
    assert_eq!(greet_name(api_port), "B");
    assert_serves_inherited(&q, web_port, 0);
    assert_serves_inherited(&q, api_port, 1);
}

#[test]
fn socket_activation_pen_form_takes_the_socket_at_its_address_and_closes_the_rest() {
    let a = greet("A");
    let (port, stray_port) = (free_port(), free_port());
    let mut q = Activated::start(Launch {
        sockets: vec![
            Sock::Tcp {
                port: stray_port,
                name: "stray",
            },
            Sock::Tcp {
                port,
                name: "quill.socket",
            },
        ],
        args: vec![format!("127.0.0.1:{port}"), a.addr().to_string()],
        ..Launch::default()
    });
    q.wait_ready();
    assert_eq!(greet_name(port), "A");
    assert_serves_inherited(&q, port, 1);
    assert!(q
        .stderr()
        .contains("inherited socket stray matches no listener; closing it"));
    assert!(
        listening_inodes(stray_port).is_empty(),
        "a socket no listener uses must be closed, not left accepting"
    );
}

#[test]
fn socket_activation_sd_notify_ready_reloading_stopping() {
    let a = greet("A");
    let port = free_port();
    let dir = scratch_dir();
    let notify = Notify::at_path(&dir.path().join("notify.sock"));
    let config = dir.path().join("quill.toml");
    fs::write(
        &config,
        format!(
            "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nservers = [\"{}\"]\n",
            a.addr()
        ),
    )
    .unwrap();
    let mut q = Activated::start_in(
        dir,
        Launch {
            sockets: vec![Sock::Tcp { port, name: "web" }],
            args: vec!["--config".into(), config.display().to_string()],
            env: vec![("NOTIFY_SOCKET", notify.address.clone())],
            ..Launch::default()
        },
    );
    assert_eq!(
        notify.next(READY_TIMEOUT).as_deref(),
        Some("READY=1"),
        "first message"
    );
    // READY means serving: no retry needed.
    assert_eq!(greet_name(port), "A");

    q.signal("HUP");
    let reloading = notify.next(IO_TIMEOUT).expect("a message after SIGHUP");
    let mut lines = reloading.lines();
    assert_eq!(lines.next(), Some("RELOADING=1"), "{reloading:?}");
    let usec = lines
        .next()
        .and_then(|l| l.strip_prefix("MONOTONIC_USEC="))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no MONOTONIC_USEC in {reloading:?}"));
    assert!(usec > 0);
    assert_eq!(notify.next(IO_TIMEOUT).as_deref(), Some("READY=1"));
    q.wait_stderr("SIGHUP: reloaded");
    assert_eq!(greet_name(port), "A", "still serving after the reload");

    q.signal("TERM");
    assert_eq!(notify.next(IO_TIMEOUT).as_deref(), Some("STOPPING=1"));
    let st = q.wait_exit(Duration::from_secs(10)).expect("quill exits");
    assert!(st.success(), "{st}");
}

#[test]
fn watchdog_pings_when_watchdog_usec_set() {
    let a = greet("A");
    // Abstract NOTIFY_SOCKET addresses (@name) are what systemd uses in containers.
    let name = format!("quill-test-notify-{}-{}", std::process::id(), free_port());
    let notify = Notify::abstract_named(&name);
    let _q = Activated::start(Launch {
        sockets: vec![Sock::Tcp {
            port: free_port(),
            name: "quill-proxyd.socket",
        }],
        args: vec![a.addr().to_string()],
        env: vec![
            ("NOTIFY_SOCKET", notify.address.clone()),
            ("WATCHDOG_USEC", "400000".into()),
        ],
        watchdog_pid_self: true,
        ..Launch::default()
    });
    let got = notify.until(Duration::from_secs(6), |_| false);
    let pings = got.iter().filter(|m| m.as_str() == "WATCHDOG=1").count();
    assert!(got.iter().any(|m| m == "READY=1"), "{got:?}");
    // WATCHDOG_USEC 400 ms: a ping every 200 ms, so about 30 in 6 s; a handful is enough.
    assert!(pings >= 5, "only {pings} WATCHDOG=1 in 6 s: {got:?}");

    // WATCHDOG_PID names another process (systemd's way of saying "not you"): no pings.
    let notify_dir = scratch_dir();
    let notify = Notify::at_path(&notify_dir.path().join("notify.sock"));
    let _other = Activated::start(Launch {
        sockets: vec![Sock::Tcp {
            port: free_port(),
            name: "quill-proxyd.socket",
        }],
        args: vec![a.addr().to_string()],
        env: vec![
            ("NOTIFY_SOCKET", notify.address.clone()),
            ("WATCHDOG_USEC", "400000".into()),
            ("WATCHDOG_PID", "1".into()),
        ],
        ..Launch::default()
    });
    assert_eq!(notify.next(READY_TIMEOUT).as_deref(), Some("READY=1"));
    let after = notify.until(Duration::from_millis(1500), |_| false);
    assert!(after.is_empty(), "{after:?}");
}

// ---------------------------------------------------------------------------------------------
// The systemd-socket-proxyd form
// ---------------------------------------------------------------------------------------------

#[test]
fn proxyd_form_forwards_to_single_server() {
    let a = greet("A");
    let (p0, p1) = (free_port(), free_port());
    let mut q = Activated::start(Launch {
        sockets: vec![
            Sock::Tcp {
                port: p0,
                name: "quill-proxyd.socket",
            },
            Sock::Tcp {
                port: p1,
                name: "quill-proxyd.socket",
            },
        ],
        args: vec![a.addr().to_string()],
        ..Launch::default()
    });
    q.wait_ready();
    let stderr = q.stderr();
    assert!(stderr.contains("listener 'socket0'"), "{stderr}");
    assert!(stderr.contains("listener 'socket1'"), "{stderr}");
    assert!(stderr.contains("at most 256 sessions"), "{stderr}");
    for port in [p0, p1] {
        let (name, mut s) = greet_session(port);
        assert_eq!(name, "A");
        echo_roundtrip(&mut s, b"hello through the socket-proxyd form\n");
    }
    assert_serves_inherited(&q, p0, 0);
    assert_serves_inherited(&q, p1, 1);
}

#[test]
fn socket_activation_unix_socket_file_stays_for_systemd() {
    // systemd owns the path of a ListenStream=/path socket: after Quill exits (here on
    // --exit-idle-time, as socket-proxyd's users run it) the next client must still find the file,
    // or systemd could never start Quill again.
    let a = greet("A");
    let dir = scratch_dir();
    let path = dir.path().join("front.sock");
    let mut q = Activated::start_in(
        dir,
        Launch {
            sockets: vec![Sock::Unix {
                path: path.clone(),
                name: "quill-proxyd.socket",
            }],
            args: vec![
                "--exit-idle-time".into(),
                "500ms".into(),
                a.addr().to_string(),
            ],
            ..Launch::default()
        },
    );
    q.wait_ready();
    let mut s = UnixStream::connect(&path).expect("connect to the passed Unix socket");
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    assert_eq!(read_line(&mut s), "A");
    drop(s);
    let st = q
        .wait_exit(Duration::from_secs(10))
        .expect("quill exits when idle");
    assert!(st.success(), "{st}");
    assert!(path.exists(), "quill removed the socket file systemd bound");
}

#[test]
fn proxyd_form_defaults_to_port_80_and_checks_its_argument() {
    // Port 80 is not bound here: the control socket shows where quill would connect.
    let q = proxyd_with_control(&["-c", "7"], "localhost");
    let servers = q.ctl(&["servers"]);
    assert!(
        servers.starts_with("0 addr localhost port 80 "),
        "{servers}"
    );
    // socket-proxyd's -c is its connection limit; Pen's -c (tracking table) has no use here.
    assert_eq!(q.ctl(&["conn_max"]).trim(), "7");
    drop(q);
    let q = proxyd_with_control(&[], "127.0.0.1");
    let servers = q.ctl(&["servers"]);
    assert!(
        servers.starts_with("0 addr 127.0.0.1 port 80 "),
        "{servers}"
    );
    assert_eq!(q.ctl(&["conn_max"]).trim(), "256");
    drop(q);

    // The argument is checked before any socket is touched (LISTEN_PID names another process).
    let env = [("LISTEN_FDS", "1"), ("LISTEN_PID", "1")];
    for bad in ["@", "host:0", "host:http", "a b", "host:80:5", "::1"] {
        let (code, err) = run_with_env(&[bad], &env);
        assert_eq!(code, 2, "{bad}: {err}");
        assert!(err.contains(&format!("'{bad}'")), "{bad}: {err}");
    }
    let (code, err) = run_with_env(&["127.0.0.1:8080"], &env);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no socket was passed to this process"),
        "{err}"
    );
}

#[test]
fn proxyd_unix_and_abstract_socket_backends() {
    let dir = scratch_dir();
    let path = dir.path().join("echo.sock");
    let _unix = UnixEcho::start(&path);
    let name = format!("quill-test-echo-{}-{}", std::process::id(), free_port());
    let _abstract = abstract_echo(&name);

    let port = free_port();
    let _q = proxyd(port, &[], &path.display().to_string());
    unix_roundtrip(&path.display().to_string(), port);

    let port = free_port();
    let _q = proxyd(port, &[], &format!("@{name}"));
    unix_roundtrip(&name, port);
    // A second session: the abstract server is reached again (a session each).
    unix_roundtrip(&name, port);
}

#[test]
fn proxyd_tries_the_server_for_every_session() {
    // socket-proxyd has no blacklist: a server that was down for one client is tried again
    // for the next. (Pen's default would skip it for 30 s.)
    let dir = scratch_dir();
    let path = dir.path().join("later.sock");
    let port = free_port();
    let _q = proxyd(port, &[], &path.display().to_string());
    let mut s = connect_port(port);
    let (data, _) = wait_closed(&mut s, IO_TIMEOUT);
    assert!(data.is_empty());
    let _echo = UnixEcho::start(&path);
    unix_roundtrip("a server that came up", port);
}

#[test]
fn proxyd_connections_max_is_exact() {
    let a = greet("A");
    let port = free_port();
    let _q = proxyd(port, &["--connections-max", "3"], &a.addr().to_string());
    let mut held: Vec<TcpStream> = (0..3)
        .map(|_| {
            let (name, s) = greet_session(port);
            assert_eq!(name, "A");
            s
        })
        .collect();
    // socket-proxyd would take a 4th (it checks > max); Quill closes it at once.
    let mut fourth = connect_port(port);
    let (data, _) = wait_closed(&mut fourth, Duration::from_secs(5));
    assert!(data.is_empty(), "the 4th client got {data:?}");

    // The held sessions are untouched, and a freed place is taken again.
    for s in &mut held {
        echo_roundtrip(s, b"still here\n");
    }
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = connect_port(port);
        if try_read_line(&mut s).is_ok_and(|l| l == "A") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no session after one of 3 closed"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn proxyd_exit_idle_time_exits_when_idle() {
    let a = greet("A");
    // No client at all: exits 0 once 1 s has passed without a session.
    let started = Instant::now();
    let mut q = proxyd(
        free_port(),
        &["--exit-idle-time", "1s"],
        &a.addr().to_string(),
    );
    let st = q
        .wait_exit(Duration::from_secs(10))
        .expect("quill still running 10 s after start with --exit-idle-time 1s");
    assert!(st.success(), "{st}");
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert!(q.stderr().contains("exiting (--exit-idle-time)"));

    // A session open keeps it; once the session ends, it exits after the idle time.
    let port = free_port();
    let mut q = Activated::start(Launch {
        sockets: vec![Sock::Tcp {
            port,
            name: "quill-proxyd.socket",
        }],
        args: vec!["--exit-idle-time".into(), "1s".into(), a.addr().to_string()],
        ..Launch::default()
    });
    // The parent listens before quill runs: this client waits in the backlog if need be.
    let (name, mut s) = retry_greet_session(port);
    assert_eq!(name, "A");
    thread::sleep(Duration::from_millis(2500));
    assert!(q.try_exit().is_none(), "exited with a session open");
    echo_roundtrip(&mut s, b"still open\n");
    let closed = Instant::now();
    drop(s);
    let st = q
        .wait_exit(Duration::from_secs(10))
        .expect("quill still running 10 s after its last session ended");
    assert!(st.success(), "{st}");
    assert!(closed.elapsed() >= Duration::from_millis(900));
}

/// Connects (retrying until the parent's socket exists, bounded) and reads the greeting.
fn retry_greet_session(port: u16) -> (String, TcpStream) {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            set_timeouts(&s, IO_TIMEOUT);
            return (read_line(&mut s), s);
        }
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn proxyd_keeps_half_close() {
    let backend = eof_answerer();
    let port = free_port();
    let _q = proxyd(port, &[], &backend.to_string());
    let mut s = connect_port(port);
    write_all(&mut s, &[b'x'; 5000]);
    s.shutdown(Shutdown::Write).unwrap();
    // socket-proxyd closes both ways at the client's EOF; the answer must still come back.
    let got = read_until_eof(&mut s, IO_TIMEOUT);
    assert_eq!(String::from_utf8_lossy(&got), "got 5000 bytes\n");
}

#[test]
fn proxyd_resolves_server_name_per_session() {
    let a = greet("A");
    let port = a.addr().port();
    // `localhost` may list ::1 first (socket-proxyd, like Quill, uses the first address only).
    let _a6 = DemoServer::start(
        &format!("[::1]:{port}"),
        Behaviour::Greet { name: "A".into() },
    )
    .ok();
    let listen = free_port();
    let mut q = proxyd(listen, &["-d"], &format!("localhost:{port}"));
    for _ in 0..3 {
        assert_eq!(greet_name(listen), "A");
    }
    // One lookup per session, numbered: the name is not resolved once and cached.
    q.wait_stderr("(lookup 3)");
    let lookups = q
        .stderr()
        .lines()
        .filter(|l| l.contains(&format!("resolved localhost:{port} to ")))
        .count();
    assert_eq!(lookups, 3, "{}", q.stderr());
}

#[test]
fn proxyd_follows_a_renamed_server_between_sessions() {
    // A real re-resolution needs a name whose address the test can change: /etc/hosts is
    // replaced in a private mount namespace (the machine's file is not touched), with
    // nsswitch limited to files so that a missing name never becomes a DNS query.
    let probe = Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .stderr(Stdio::null())
        .status();
    if !probe.is_ok_and(|st| st.success()) {
        eprintln!("SKIPPED: no private mount namespace here (needs root and unshare)");
        return;
    }
    let a = greet("A");
    let port = a.addr().port();
    let Ok(b) = DemoServer::start(
        &format!("127.0.0.2:{port}"),
        Behaviour::Greet { name: "B".into() },
    ) else {
        eprintln!("SKIPPED: cannot listen on 127.0.0.2:{port}");
        return;
    };
    let dir = scratch_dir();
    let hosts = dir.path().join("hosts");
    let nsswitch = dir.path().join("nsswitch.conf");
    fs::write(&hosts, "127.0.0.1 quill-backend.test\n").unwrap();
    fs::write(&nsswitch, "hosts: files\n").unwrap();
    let log = dir.path().join("access.log");
    let listen = free_port();
    let mount = format!(
        "mount --bind {} /etc/hosts && mount --bind {} /etc/nsswitch.conf && exec \"$0\" \"$@\"",
        hosts.display(),
        nsswitch.display()
    );
    let mut q = Activated::start_in(
        dir,
        Launch {
            sockets: vec![Sock::Tcp {
                port: listen,
                name: "quill-proxyd.socket",
            }],
            args: vec![
                "-l".into(),
                log.display().to_string(),
                format!("quill-backend.test:{port}"),
            ],
            wrapper: vec![
                "unshare".into(),
                "-m".into(),
                "--propagation".into(),
                "private".into(),
                "sh".into(),
                "-c".into(),
                mount,
            ],
            ..Launch::default()
        },
    );
    q.wait_ready();
    assert_eq!(greet_name(listen), "A");
    // Rewritten in place (same inode), so the bind mount shows the new text.
    fs::write(&hosts, "127.0.0.2 quill-backend.test\n").unwrap();
    assert_eq!(greet_name(listen), "B", "the name was not resolved again");
    drop(b);

    // A name that no longer resolves ends the session as no_server, and is not blacklisted:
    // the next session resolves again.
    fs::write(&hosts, "127.0.0.1 someone-else.test\n").unwrap();
    let mut s = connect_port(listen);
    let (data, _) = wait_closed(&mut s, IO_TIMEOUT);
    assert!(data.is_empty());
    wait_log_line(&log, IO_TIMEOUT, |l| l.end == "no_server");
    fs::write(&hosts, "127.0.0.1 quill-backend.test\n").unwrap();
    assert_eq!(greet_name(listen), "A");
}

#[test]
fn proxyd_form_sends_proxy_v1() {
    // As systemd-socket-proxyd --proxy-protocol: a v1 line naming the client and the address
    // it reached, then the client's bytes. The server reads the line itself.
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    let reader = thread::spawn(move || {
        let (mut s, _) = server.accept().unwrap();
        s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        let mut got = Vec::new();
        let mut b = [0u8; 1];
        while got.iter().filter(|&&c| c == b'\n').count() < 2 && got.len() < 300 {
            match s.read(&mut b) {
                Ok(1) => got.push(b[0]),
                _ => break,
            }
        }
        String::from_utf8_lossy(&got).to_string()
    });
    let port = free_port();
    let _q = proxyd(port, &["--proxy-protocol"], &addr.to_string());
    let mut c = connect_port(port);
    let me = c.local_addr().unwrap();
    c.write_all(b"first line\n").unwrap();
    let got = reader.join().unwrap();
    assert_eq!(
        got,
        format!(
            "PROXY TCP4 127.0.0.1 127.0.0.1 {} {port}\r\nfirst line\n",
            me.port()
        )
    );
}
