//! UDP balancing (docs/design.md#udp-flows): `-U` and `protocol = "udp"`, per-client flows relayed
//! to real UDP echo servers the tests start on loopback, through the real `quill` binary.

use crate::ctl;
use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use ctl::*;
use support::*;

/// How long a reply may take on loopback before the test calls it lost.
const REPLY: Duration = Duration::from_secs(2);

/// A UDP server on loopback: answers each datagram with `NAME:` and the datagram, `replies`
/// times (0: silent), and remembers which client addresses wrote to it.
struct UdpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<SocketAddr>>>,
    datagrams: Arc<AtomicUsize>,
    thread: Option<thread::JoinHandle<()>>,
}

impl UdpServer {
    fn start(name: &str) -> UdpServer {
        UdpServer::start_at(IpAddr::V4(Ipv4Addr::LOCALHOST), name, 1)
    }

    fn start_at(ip: IpAddr, name: &str, replies: usize) -> UdpServer {
        let socket = UdpSocket::bind(SocketAddr::new(ip, 0)).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let addr = socket.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let datagrams = Arc::new(AtomicUsize::new(0));
        let (st, se, dg) = (stop.clone(), seen.clone(), datagrams.clone());
        let prefix = format!("{name}:").into_bytes();
        let thread = thread::spawn(move || {
            let mut buf = [0u8; 2048];
            // Bounded: a test lasts well under this many 20 ms waits.
            for _ in 0..30_000 {
                if st.load(Ordering::Relaxed) {
                    return;
                }
                let Ok((n, from)) = socket.recv_from(&mut buf) else {
                    continue;
                };
                dg.fetch_add(1, Ordering::Relaxed);
                se.lock().unwrap().push(from);
                let mut answer = prefix.clone();
                answer.extend_from_slice(&buf[..n]);
                for _ in 0..replies {
                    let _ = socket.send_to(&answer, from);
                }
            }
        });
        UdpServer {
            addr,
            stop,
            seen,
            datagrams,
            thread: Some(thread),
        }
    }

    /// Distinct client addresses (Quill's flow sockets) that wrote to this server.
    fn flows(&self) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .collect::<BTreeSet<_>>()
            .len()
    }

    fn datagrams(&self) -> usize {
        self.datagrams.load(Ordering::Relaxed)
    }
}

impl Drop for UdpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A free UDP port on `ip`, from this binary's block of the port registry (below the ephemeral
/// range, 32768 and up on Linux): a port the kernel handed out as ephemeral could be taken again by
/// any socket (a flow's, a benchmark's) before Quill binds it.
fn free_udp_port(ip: IpAddr) -> u16 {
    support::ports::port_on(ip).expect("a free port in this binary's block")
}

/// Starts quill with `args` and waits (bounded) until it says it is ready.
fn start(dir: tempfile::TempDir, args: Vec<String>, port: u16) -> QuillProcess {
    let q = QuillProcess::spawn_in(dir, args, port);
    assert!(
        q.wait_stderr_contains("ready: ", READY_TIMEOUT)
            && q.wait_stderr_contains(" worker(s)", READY_TIMEOUT),
        "quill not ready; stderr:\n{}",
        q.stderr()
    );
    q
}

/// `quill -U OPTS -l DIR/access.log 127.0.0.1:PORT SERVERS...`
fn start_pen(opts: &[&str], servers: &[&UdpServer]) -> QuillProcess {
    let dir = scratch_dir();
    let port = free_udp_port(Ipv4Addr::LOCALHOST.into());
    let servers: Vec<String> = servers.iter().map(|s| s.addr.to_string()).collect();
    let mut o = vec!["-U"];
    o.extend_from_slice(opts);
    let args = pen_args(dir.path(), port, &o, &servers);
    start(dir, args, port)
}

/// Quill with the TOML `body` (which names `{PORT}`, `{LOG}` and `{CTL}`) at DIR/q.toml.
fn start_toml(body: &str) -> QuillProcess {
    let dir = scratch_dir();
    let port = free_udp_port(Ipv4Addr::LOCALHOST.into());
    let text = body
        .replace("{PORT}", &port.to_string())
        .replace(
            "{LOG}",
            &dir.path().join("access.log").display().to_string(),
        )
        .replace("{CTL}", &dir.path().join("ctl.sock").display().to_string());
    let path = dir.path().join("q.toml");
    fs::write(&path, text).unwrap();
    let args = vec!["--config".to_string(), path.display().to_string()];
    start(dir, args, port)
}

/// Quill with an admin listener on a free port, one worker and the TOML `rest` (as for
/// [`start_toml`]): (quill, admin address).
fn start_with_admin(rest: &str) -> (QuillProcess, SocketAddr) {
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let q = start_toml(&format!("admin = \"{admin}\"\n{ONE_WORKER}{rest}"));
    (q, admin)
}

/// A client socket on `ip` (any 127.0.0.0/8 address works on Linux loopback).
fn client_on(ip: IpAddr) -> UdpSocket {
    let c = UdpSocket::bind(SocketAddr::new(ip, 0)).unwrap();
    c.set_read_timeout(Some(REPLY)).unwrap();
    c
}

fn client() -> UdpSocket {
    client_on(Ipv4Addr::LOCALHOST.into())
}

/// Sends `msg` to `to` and waits for one reply: (reply, where it came from).
fn ask(c: &UdpSocket, to: SocketAddr, msg: &str) -> Option<(String, SocketAddr)> {
    c.send_to(msg.as_bytes(), to).unwrap();
    let mut buf = [0u8; 2048];
    let (n, from) = c.recv_from(&mut buf).ok()?;
    Some((String::from_utf8_lossy(&buf[..n]).into_owned(), from))
}

/// Like [`ask`], but retried (bounded) until a reply comes: a first datagram may be lost to a
/// dead server before the flow moves on.
fn ask_until_answered(c: &UdpSocket, to: SocketAddr, msg: &str) -> String {
    c.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    for _ in 0..20 {
        if let Some((r, _)) = ask(c, to, msg) {
            c.set_read_timeout(Some(REPLY)).unwrap();
            return r;
        }
    }
    panic!("no reply to {msg:?} from {to}");
}

fn reply_of(c: &UdpSocket, to: SocketAddr, msg: &str) -> String {
    ask(c, to, msg)
        .unwrap_or_else(|| panic!("no reply to {msg:?} from {to}"))
        .0
}

fn server_name(reply: &str) -> &str {
    reply.split(':').next().unwrap_or_default()
}

#[test]
fn udp_datagrams_reach_server_and_replies_come_back() {
    let a = UdpServer::start("a");
    let q = start_pen(&[], &[&a]);
    let c = client();
    for i in 0..5 {
        let (reply, from) = ask(&c, q.addr(), &format!("hello {i}")).expect("a reply");
        assert_eq!(reply, format!("a:hello {i}"));
        assert_eq!(from, q.addr(), "the reply comes from the listening address");
    }
    // A datagram bigger than a TCP-ish buffer still goes through whole.
    let big = "x".repeat(1400);
    assert_eq!(reply_of(&c, q.addr(), &big), format!("a:{big}"));
    assert_eq!(a.flows(), 1, "one client, one flow socket at the server");
    assert_eq!(a.datagrams(), 6);
}

#[test]
fn udp_client_flow_sticks_to_one_server() {
    let (a, b) = (UdpServer::start("a"), UdpServer::start("b"));
    let q = start_pen(&["-r"], &[&a, &b]);
    for _ in 0..4 {
        let c = client();
        let first = reply_of(&c, q.addr(), "0");
        let name = server_name(&first).to_string();
        for i in 1..10 {
            let r = reply_of(&c, q.addr(), &i.to_string());
            assert_eq!(
                server_name(&r),
                name,
                "a flow's datagrams all reach one server"
            );
        }
    }
}

#[test]
fn udp_round_robin_spreads_flows_evenly() {
    // Pen's -rU is known to spread UDP clients unevenly; here every new flow takes the next
    // server of the shared round-robin cursor, whichever worker holds it.
    let (a, b, c3) = (
        UdpServer::start("a"),
        UdpServer::start("b"),
        UdpServer::start("c"),
    );
    let q = start_pen(&["-r", "--workers", "2"], &[&a, &b, &c3]);
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let clients: Vec<UdpSocket> = (0..30).map(|_| client()).collect();
    for c in &clients {
        let r = reply_of(c, q.addr(), "hi");
        *counts.entry(server_name(&r).to_string()).or_default() += 1;
    }
    assert_eq!(
        counts.values().copied().collect::<Vec<_>>(),
        vec![10, 10, 10],
        "{counts:?}"
    );
    assert_eq!((a.flows(), b.flows(), c3.flows()), (10, 10, 10));
}

#[test]
fn udp_maglev_quills_send_each_client_to_the_same_server_in_any_listed_order() {
    // Two Quills with the same three servers listed in opposite orders: every client address
    // (100 of them, 127.2.0.X) reaches the same server through either, and all three serve.
    let (a, b, c3) = (
        UdpServer::start("a"),
        UdpServer::start("b"),
        UdpServer::start("c"),
    );
    let q1 = start_pen(&["--maglev", "--workers", "2"], &[&a, &b, &c3]);
    let q2 = start_pen(&["--maglev", "--workers", "1"], &[&c3, &b, &a]);
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..100u8 {
        let c = client_on(IpAddr::from([127, 2, 0, i + 1]));
        let one = reply_of(&c, q1.addr(), "m").to_string();
        let two = reply_of(&c, q2.addr(), "m").to_string();
        assert_eq!(
            server_name(&one),
            server_name(&two),
            "client 127.2.0.{}",
            i + 1
        );
        *counts.entry(server_name(&one).to_string()).or_default() += 1;
    }
    assert_eq!(counts.len(), 3, "{counts:?}");
    assert!(counts.values().all(|&n| n >= 15), "{counts:?}");
}

#[test]
fn udp_weights_and_priorities_apply_per_flow() {
    // Priorities: every flow goes to the best (lowest) priority while it is available.
    let (a, b) = (UdpServer::start("a"), UdpServer::start("b"));
    let servers = [spec_full(a.addr, 0, 0, 1, 2), spec_full(b.addr, 0, 0, 1, 1)];
    let dir = scratch_dir();
    let port = free_udp_port(Ipv4Addr::LOCALHOST.into());
    let args = pen_args(dir.path(), port, &["-U", "-O", "prio"], &servers);
    let q = start(dir, args, port);
    let held: Vec<UdpSocket> = (0..6).map(|_| client()).collect();
    for c in &held {
        assert_eq!(server_name(&reply_of(c, q.addr(), "p")), "b");
    }
    drop(q);
    // Weights: open flows count as the server's sessions, shared 3 to 1.
    let (a, b) = (UdpServer::start("a"), UdpServer::start("b"));
    let servers = [spec_full(a.addr, 0, 0, 3, 0), spec_full(b.addr, 0, 0, 1, 0)];
    let dir = scratch_dir();
    let port = free_udp_port(Ipv4Addr::LOCALHOST.into());
    // -r: no client tracking (every client here is 127.0.0.1, which tracking keeps on one server).
    let args = pen_args(dir.path(), port, &["-U", "-r", "-W"], &servers);
    let q = start(dir, args, port);
    let held: Vec<UdpSocket> = (0..8).map(|_| client()).collect();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for c in &held {
        let r = reply_of(c, q.addr(), "w");
        *counts.entry(server_name(&r).to_string()).or_default() += 1;
    }
    assert_eq!(counts.get("a"), Some(&6), "{counts:?}");
    assert_eq!(counts.get("b"), Some(&2), "{counts:?}");
}

const ONE_WORKER: &str = "workers = 1\nlog = \"{LOG}\"\ncontrol = \"{CTL}\"\n";

fn udp_listener(servers: &[&UdpServer], udp: &str) -> String {
    let list: Vec<String> = servers.iter().map(|s| format!("\"{}\"", s.addr)).collect();
    format!(
        "[[listener]]\nname = \"dns\"\nlisten = \"127.0.0.1:{{PORT}}\"\nprotocol = \"udp\"\nservers = [{}]\nudp = {{ {udp} }}\n",
        list.join(", ")
    )
}

#[test]
fn udp_flow_timeout_ends_idle_flow() {
    let a = UdpServer::start("a");
    let q = start_toml(&format!(
        "{ONE_WORKER}{}",
        udp_listener(&[&a], "flow_timeout = \"300ms\"")
    ));
    let c = client();
    let started = Instant::now();
    assert_eq!(reply_of(&c, q.addr(), "one"), "a:one");
    let line = q.wait_line_at(0, Duration::from_secs(5));
    let waited = started.elapsed();
    assert_eq!(line.end, "idle_timeout", "{line:?}");
    assert!(
        waited >= Duration::from_millis(250),
        "ended after {waited:?}, before its 300ms timeout"
    );
    assert_eq!((line.bytes_in, line.bytes_out), (3, 5), "{line:?}");
    // The client's next datagram makes a new flow (a new socket at the server).
    assert_eq!(reply_of(&c, q.addr(), "two"), "a:two");
    assert_eq!(a.flows(), 2);
}

#[test]
fn udp_max_flows_evicts_oldest_idle_flow() {
    let a = UdpServer::start("a");
    let q = start_toml(&format!(
        "{ONE_WORKER}{}",
        udp_listener(&[&a], "max_flows = 2, flow_timeout = \"1m\"")
    ));
    let ip = |n: u8| IpAddr::V4(Ipv4Addr::new(127, 0, 0, n));
    let (c1, c2, c3) = (client_on(ip(1)), client_on(ip(2)), client_on(ip(3)));
    assert_eq!(reply_of(&c1, q.addr(), "1"), "a:1");
    assert_eq!(reply_of(&c2, q.addr(), "2"), "a:2");
    // c1 is active again: c2 is now the flow idle for longest.
    assert_eq!(reply_of(&c1, q.addr(), "1"), "a:1");
    assert_eq!(reply_of(&c3, q.addr(), "3"), "a:3");
    let line = q.wait_line_at(0, Duration::from_secs(5));
    assert_eq!(
        (line.client.as_str(), line.end.as_str()),
        ("127.0.0.2", "evicted")
    );
    // c1 keeps its flow (no new socket at the server); c2 comes back with a new one.
    let before = a.flows();
    assert_eq!(reply_of(&c1, q.addr(), "1"), "a:1");
    assert_eq!(a.flows(), before, "c1's flow was kept");
    assert_eq!(reply_of(&c2, q.addr(), "2"), "a:2");
    assert_eq!(a.flows(), before + 1, "c2 got a new flow");
    // Room for c2: c3 has been idle for longest now (c1 spoke after it).
    let line = q.wait_line_at(1, Duration::from_secs(5));
    assert_eq!(
        (line.client.as_str(), line.end.as_str()),
        ("127.0.0.3", "evicted")
    );
}

#[test]
fn udp_flow_responses_ends_flow_after_n_replies() {
    // The server answers every datagram twice; with flow_responses = 1 the flow ends after the
    // first answer, so the client sees one.
    let a = UdpServer::start_at(Ipv4Addr::LOCALHOST.into(), "a", 2);
    let q = start_toml(&format!(
        "{ONE_WORKER}{}",
        udp_listener(&[&a], "flow_responses = 1")
    ));
    let c = client();
    assert_eq!(reply_of(&c, q.addr(), "q1"), "a:q1");
    let line = q.wait_line_at(0, Duration::from_secs(5));
    assert_eq!(line.end, "responses", "{line:?}");
    c.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(
        c.recv_from(&mut buf).is_err(),
        "the second answer went nowhere"
    );
    // The next query is a new flow.
    c.set_read_timeout(Some(REPLY)).unwrap();
    assert_eq!(reply_of(&c, q.addr(), "q2"), "a:q2");
    assert_eq!(q.wait_line_at(1, Duration::from_secs(5)).end, "responses");
    assert_eq!(a.flows(), 2);
}

#[test]
fn udp_reply_comes_from_address_client_wrote_to_on_wildcard_listener() {
    let a = UdpServer::start("a");
    let dir = scratch_dir();
    let port = free_udp_port(Ipv4Addr::UNSPECIFIED.into());
    let args = vec![
        "-U".to_string(),
        format!("0.0.0.0:{port}"),
        a.addr.to_string(),
    ];
    let _q = start(dir, args, port);
    for last in [1u8, 2] {
        let to = SocketAddr::new(Ipv4Addr::new(127, 0, 0, last).into(), port);
        let c = client();
        let (reply, from) = ask(&c, to, "where").expect("a reply");
        assert_eq!(reply, "a:where");
        assert_eq!(
            from, to,
            "the reply leaves from the address the client wrote to"
        );
    }
}

#[test]
fn udp_ipv6_flows_work() {
    let v6 = IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);
    if UdpSocket::bind(SocketAddr::new(v6, 0)).is_err() {
        eprintln!("skipped: no IPv6 loopback on this machine");
        return;
    }
    let a = UdpServer::start_at(v6, "a", 1);
    let dir = scratch_dir();
    let port = free_udp_port(v6);
    let args = vec![
        "-U".to_string(),
        format!("[::1]:{port}"),
        a.addr.to_string(),
    ];
    let _q = start(dir, args, port);
    let c = client_on(v6);
    let to = SocketAddr::new(v6, port);
    let (reply, from) = ask(&c, to, "six").expect("a reply over IPv6");
    assert_eq!((reply.as_str(), from), ("a:six", to));
    // An IPv4 client of an IPv4 server behind an IPv6 wildcard is not this test's business;
    // an IPv6 client to an IPv4 server is: the flow's socket has the server's family.
    let b = UdpServer::start("b");
    let dir = scratch_dir();
    let port = free_udp_port(v6);
    let args = vec!["-U".to_string(), format!("[::]:{port}"), b.addr.to_string()];
    let _q = start(dir, args, port);
    let to = SocketAddr::new(v6, port);
    let (reply, from) = ask(&c, to, "mixed").expect("a reply");
    assert_eq!((reply.as_str(), from), ("b:mixed", to));
}

#[test]
fn udp_dead_server_is_blacklisted_by_icmp_unreachable() {
    let a = UdpServer::start("a");
    // Nothing listens here: the kernel answers ICMP port unreachable.
    let dead = SocketAddr::new(
        Ipv4Addr::LOCALHOST.into(),
        free_udp_port(Ipv4Addr::LOCALHOST.into()),
    );
    let dir = scratch_dir();
    let port = free_udp_port(Ipv4Addr::LOCALHOST.into());
    let sock = dir.path().join("ctl.sock").display().to_string();
    let args = pen_args(
        dir.path(),
        port,
        &["-U", "-r", "-b", "60", "-C", &sock],
        &[dead.to_string(), a.addr.to_string()],
    );
    let q = start(dir, args, port);
    wait_ctl(&q, &q.path("ctl.sock"));
    // The first flow goes to the dead server (round robin starts there); its datagram draws the
    // ICMP error, the flow moves to `a`, and the client's retry is answered.
    let c = client();
    assert_eq!(server_name(&ask_until_answered(&c, q.addr(), "x")), "a");
    let servers = ctl(&q.path("ctl.sock"), "servers");
    let first = servers.lines().next().unwrap_or_default();
    assert!(
        first.contains("blacklisted") || first.contains("blacklist"),
        "{servers}"
    );
    // Every new flow now skips the dead server.
    for _ in 0..6 {
        let c = client();
        assert_eq!(server_name(&reply_of(&c, q.addr(), "y")), "a");
    }
    let m = ctl(&q.path("ctl.sock"), "servers");
    assert!(m.lines().count() >= 2, "{m}");
}

#[test]
fn udp_access_log_has_one_line_per_flow() {
    let a = UdpServer::start("a");
    let q = start_toml(&format!(
        "{ONE_WORKER}{}",
        udp_listener(&[&a], "flow_timeout = \"200ms\"")
    ));
    let ip = |n: u8| IpAddr::V4(Ipv4Addr::new(127, 0, 0, n));
    for n in 1..=3u8 {
        let c = client_on(ip(n));
        for _ in 0..n {
            assert_eq!(reply_of(&c, q.addr(), "abcd"), "a:abcd");
        }
    }
    let lines = q.wait_log_lines(3, Duration::from_secs(5));
    thread::sleep(Duration::from_millis(400));
    let lines_after = q.log_lines();
    assert_eq!(lines_after.len(), 3, "{lines_after:#?}");
    let mut by_client: Vec<_> = lines
        .iter()
        .map(|l| {
            (
                l.client.clone(),
                l.server.clone(),
                l.bytes_in,
                l.bytes_out,
                l.end.clone(),
            )
        })
        .collect();
    by_client.sort();
    let server = a.addr.to_string();
    assert_eq!(
        by_client,
        vec![
            (
                "127.0.0.1".into(),
                server.clone(),
                4,
                6,
                "idle_timeout".into()
            ),
            (
                "127.0.0.2".into(),
                server.clone(),
                8,
                12,
                "idle_timeout".into()
            ),
            ("127.0.0.3".into(), server, 12, 18, "idle_timeout".into()),
        ]
    );
}

/// L1 (docs/design.md#what-an-operator-sees-is-whole): a UDP listener with its own `log` writes its
/// flows there, another UDP listener on the process-wide file writes there: each file holds its
/// listener's flows only.
#[test]
fn udp_listeners_each_log_to_their_own_file() {
    let a = UdpServer::start("a");
    let b = UdpServer::start("b");
    let other = free_udp_port(Ipv4Addr::LOCALHOST.into());
    let q = start_toml(&format!(
        "{ONE_WORKER}{}[[listener]]\nname = \"dns2\"\nlisten = \"127.0.0.1:{other}\"\nprotocol = \"udp\"\nservers = [\"{}\"]\nlog = \"{{LOG}}.dns2\"\nudp = {{ flow_responses = 1 }}\n",
        udp_listener(&[&a], "flow_responses = 1"),
        b.addr
    ));
    let c = client();
    assert_eq!(reply_of(&c, q.addr(), "one"), "a:one");
    let to_other = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), other);
    assert_eq!(reply_of(&c, to_other, "two"), "b:two");
    let own = PathBuf::from(format!("{}.dns2", q.log_path().display()));
    let shared = wait_log_line(&q.log_path(), Duration::from_secs(5), |_| true);
    let mine = wait_log_line(&own, Duration::from_secs(5), |_| true);
    assert_eq!(shared.server, a.addr.to_string(), "{shared:?}");
    assert_eq!(mine.server, b.addr.to_string(), "{mine:?}");
    thread::sleep(Duration::from_millis(200));
    assert_eq!(read_access_log(&q.log_path()).len(), 1);
    assert_eq!(read_access_log(&own).len(), 1);
}

#[test]
fn udp_pen_command_line_dash_u_works() {
    let (a, b) = (UdpServer::start("a"), UdpServer::start("b"));
    let dir = scratch_dir();
    let port = free_udp_port(Ipv4Addr::LOCALHOST.into());
    // `quill -U 127.0.0.1:PORT a:p b:p`, as with Pen.
    let args = vec![
        "-U".to_string(),
        format!("127.0.0.1:{port}"),
        a.addr.to_string(),
        b.addr.to_string(),
    ];
    let q = start(dir, args, port);
    // Pen tracks clients by address by default: each address keeps its server, and new
    // addresses are spread.
    let mut names = BTreeSet::new();
    for n in 1..=4u8 {
        let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, n));
        let name = server_name(&reply_of(&client_on(ip), q.addr(), "pen")).to_string();
        let again = server_name(&reply_of(&client_on(ip), q.addr(), "pen")).to_string();
        assert_eq!(
            name, again,
            "a tracked client address returns to its server"
        );
        names.insert(name);
    }
    assert_eq!(names.len(), 2, "both servers serve flows: {names:?}");
    // `quill check` agrees, and -U with --config says where UDP goes instead.
    let (code, out, err) = run_quill_output(&["check", "-U", "127.0.0.1:9", &a.addr.to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, err) = run_quill_expect_exit(&["-U", "--config", "/nonexistent.toml"]);
    assert_eq!(code, 2);
    assert!(err.contains("protocol = \"udp\""), "{err}");
}

#[test]
fn udp_config_errors_name_file_and_line() {
    let dir = scratch_dir();
    let cases = [
        (
            "[[listener]]\nname = \"d\"\nlisten = \"127.0.0.1:5353\"\nprotocol = \"udp\"\nservers = [\"127.0.0.1:53\"]\nudp = { max_flows = 0 }\n",
            6,
            "udp: max_flows: 0 is out of range",
        ),
        (
            "[[listener]]\nname = \"d\"\nlisten = \"127.0.0.1:5353\"\nprotocol = \"udp\"\nservers = [\"127.0.0.1:53\"]\nudp = { flow_timeout = \"later\" }\n",
            6,
            "udp: flow_timeout:",
        ),
        (
            "[[listener]]\nname = \"d\"\nlisten = \"127.0.0.1:5353\"\nservers = [\"127.0.0.1:53\"]\nudp = { flow_responses = 1 }\n",
            5,
            "[listener.udp] needs protocol = \"udp\"",
        ),
        (
            "[[listener]]\nname = \"d\"\nlisten = \"127.0.0.1:5353\"\nprotocol = \"udp\"\nservers = [\"127.0.0.1:53\"]\nudp = { flow_timeouts = 3 }\n",
            6,
            "flow_timeouts",
        ),
    ];
    for (i, (text, line, needle)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("c{i}.toml"));
        fs::write(&path, text).unwrap();
        let p = path.display().to_string();
        let (code, _out, err) = run_quill_output(&["check", "--config", &p]);
        assert_eq!(code, 2, "{text}: {err}");
        let want = format!("{p}:{line}:");
        assert!(err.contains(&want), "{err:?} should name {want}");
        assert!(err.contains(needle), "{err:?} should contain {needle:?}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err:?}");
    }
}

#[test]
fn udp_control_connections_show_flows_and_close_ends_one() {
    let a = UdpServer::start("a");
    let q = start_toml(&format!("{ONE_WORKER}{}", udp_listener(&[&a], "")));
    let sock = q.path("ctl.sock");
    wait_ctl(&q, &sock);
    let c = client();
    assert_eq!(reply_of(&c, q.addr(), "hello"), "a:hello");
    let me = c.local_addr().unwrap().to_string();
    let list = ctl(&sock, "connections");
    let line = list
        .lines()
        .find(|l| l.contains(&format!("client {me} ")))
        .unwrap_or_else(|| panic!("no flow of {me} in:\n{list}"));
    assert!(line.contains(&format!("server {} ", a.addr)), "{line}");
    assert!(line.contains("in 5 out 7 flow"), "{line}");
    let id = line.split_whitespace().next().unwrap();
    ctl_ok(&sock, &format!("close {id}"));
    let ended = q.wait_line_at(0, Duration::from_secs(5));
    assert_eq!(ended.end, "closed", "{ended:?}");
    assert!(!ctl(&sock, "connections").contains(&me));
    // `server N drain` applies to new flows: the next client goes elsewhere.
    let b = UdpServer::start("b");
    drop(q);
    let dir = scratch_dir();
    let port = free_udp_port(Ipv4Addr::LOCALHOST.into());
    let csock = dir.path().join("ctl.sock");
    let cs = csock.display().to_string();
    let args = pen_args(
        dir.path(),
        port,
        &["-U", "-r", "-C", &cs],
        &[a.addr.to_string(), b.addr.to_string()],
    );
    let q = start(dir, args, port);
    wait_ctl(&q, &csock);
    ctl_ok(&csock, "server 0 drain");
    for _ in 0..4 {
        assert_eq!(server_name(&reply_of(&client(), q.addr(), "d")), "b");
    }
}

#[test]
fn udp_metrics_count_flows_and_datagrams() {
    let a = UdpServer::start("a");
    let (q, admin) = start_with_admin(&udp_listener(&[&a], "max_flows = 2"));
    let ip = |n: u8| IpAddr::V4(Ipv4Addr::new(127, 0, 0, n));
    for n in 1..=3u8 {
        let c = client_on(ip(n));
        assert_eq!(reply_of(&c, q.addr(), "12345"), "a:12345");
        assert_eq!(reply_of(&c, q.addr(), "12345"), "a:12345");
    }
    let read = |text: &str, name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
            .trim()
            .parse()
            .unwrap()
    };
    // The worker counts a reply just after sending it: the client may ask before that.
    let deadline = Instant::now() + Duration::from_secs(5);
    let text = loop {
        let text = http_get(admin, "/metrics");
        if read(&text, "quill_udp_datagrams_sent_total") >= 6 || Instant::now() > deadline {
            break text;
        }
        thread::sleep(Duration::from_millis(20));
    };
    let value = |name: &str| read(&text, name);
    assert_eq!(value("quill_udp_flows_total"), 3);
    assert_eq!(value("quill_udp_flows_active"), 2);
    assert_eq!(value("quill_udp_flow_evictions_total"), 1);
    assert_eq!(value("quill_udp_datagrams_received_total"), 6);
    assert_eq!(value("quill_udp_datagrams_sent_total"), 6);
    assert_eq!(value("quill_udp_bytes_received_total"), 30);
    assert_eq!(value("quill_udp_bytes_sent_total"), 42);
    assert_eq!(value("quill_udp_datagrams_dropped_total"), 0);
    assert!(
        text.contains("quill_sessions_ended_total{reason=\"evicted\"} 1"),
        "{text}"
    );
}

/// `GET path` from the admin listener (bounded), the body.
fn http_get(addr: SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(addr) {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            if let Some(i) = out.find("\r\n\r\n") {
                return out[i + 4..].to_string();
            }
        }
        assert!(Instant::now() < deadline, "admin {addr} not answering");
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn udp_reload_keeps_flows() {
    let (a, b) = (UdpServer::start("a"), UdpServer::start("b"));
    let q = start_toml(&format!("{ONE_WORKER}{}", udp_listener(&[&a], "")));
    let kept = client();
    assert_eq!(reply_of(&kept, q.addr(), "1"), "a:1");
    // The listener now lists only b: SIGHUP applies it to new flows; the open flow stays on a.
    let path = q.path("q.toml");
    let text = fs::read_to_string(&path).unwrap();
    fs::write(
        &path,
        text.replace(&a.addr.to_string(), &b.addr.to_string()),
    )
    .unwrap();
    q.signal("HUP");
    assert!(
        q.wait_stderr_contains("SIGHUP: reloaded", Duration::from_secs(5)),
        "{}",
        q.stderr()
    );
    for i in 2..5 {
        assert_eq!(reply_of(&kept, q.addr(), &i.to_string()), format!("a:{i}"));
    }
    assert_eq!(reply_of(&client(), q.addr(), "new"), "b:new");
    assert_eq!(a.flows(), 1, "the open flow kept its socket");
}

#[test]
fn udp_takeover_keeps_serving() {
    let a = UdpServer::start("a");
    let old = start_toml(&format!(
        "drain_timeout = \"10s\"\n{ONE_WORKER}{}",
        udp_listener(&[&a], "flow_timeout = \"1s\"")
    ));
    let old_sock = old.path("ctl.sock");
    wait_ctl(&old, &old_sock);
    let c = client();
    assert_eq!(reply_of(&c, old.addr(), "before"), "a:before");
    let dir = scratch_dir();
    let args = vec![
        "--config".to_string(),
        old.path("q.toml").display().to_string(),
        "--workers".into(),
        "2".into(),
        "--takeover".into(),
        old_sock.display().to_string(),
    ];
    let mut new = QuillProcess::spawn_in(dir, args, old.port);
    assert!(
        new.wait_stderr_contains("took over", Duration::from_secs(10)),
        "new:\n{}\nold:\n{}",
        new.stderr(),
        old.stderr()
    );
    // Every datagram is answered across the handover: the sockets are the same.
    for i in 0..20 {
        assert_eq!(reply_of(&c, old.addr(), &i.to_string()), format!("a:{i}"));
        assert_eq!(reply_of(&client(), old.addr(), "x"), "a:x");
    }
    let mut old = old;
    let st = old
        .wait_exit(Duration::from_secs(10))
        .expect("the old process exits once its flows timed out");
    assert_eq!(st.code(), Some(0), "{}", old.stderr());
    assert_eq!(reply_of(&c, old.addr(), "after"), "a:after");
    assert!(new.try_exit().is_none(), "{}", new.stderr());
}

/// RssAnon of a process in KiB (heap and stacks, not the binary's pages).
fn rss_anon_kib(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Opens `n` flows, each from a client socket of its own, kept open (a closed one's port could
/// come back for the next client, which would then reuse its flow).
fn open_flows(to: SocketAddr, n: usize, held: &mut Vec<UdpSocket>) {
    for i in 0..n {
        let c = client();
        let r = reply_of(&c, to, &format!("{i}"));
        assert!(r.starts_with("a:"), "{r}");
        held.push(c);
    }
}

#[test]
fn udp_idle_flows_cost_at_most_half_a_kib_each() {
    const N: usize = 5_000;
    let a = UdpServer::start("a");
    let q = start_toml(&format!(
        "{ONE_WORKER}{}",
        udp_listener(
            &[&a],
            "flow_timeout = \"10m\", max_flows = 20000, max_flows_per_source = 20000"
        )
    ));
    // The test holds a socket per client: room for them.
    let nofile = quill_core::sys::raise_nofile_limit().unwrap_or(1024);
    if nofile < (N as u64 + 1000) {
        eprintln!("skipped: {nofile} open files allowed, {N} client sockets needed");
        return;
    }
    let mut held = Vec::with_capacity(N + 200);
    // Warm up (the datagram buffer, the first table growth), then measure N more idle flows.
    open_flows(q.addr(), 200, &mut held);
    let before = rss_anon_kib(q.pid);
    open_flows(q.addr(), N, &mut held);
    let after = rss_anon_kib(q.pid);
    let per_flow = (after.saturating_sub(before)) * 1024 / N as u64;
    eprintln!(
        "RssAnon {before} KiB -> {after} KiB with {N} more idle UDP flows ({per_flow} B each)"
    );
    assert!(
        per_flow <= 512,
        "each idle flow costs {per_flow} bytes of quill's anonymous RSS ({before} -> {after} KiB)"
    );
    assert_eq!(a.flows(), N + 200, "every client got a flow of its own");
}

#[test]
fn udp_health_check_marks_silent_server_down() {
    // `a` answers, `b` takes datagrams and never answers: the UDP check (a datagram sent, an
    // answer holding the text expected) takes b down, and every new flow goes to a.
    let a = UdpServer::start("a");
    let b = UdpServer::start_at(Ipv4Addr::LOCALHOST.into(), "b", 0);
    let q = start_toml(&format!(
        "{ONE_WORKER}{}health = {{ type = \"udp\", send = \"ping\", expect = \":ping\", interval = \"100ms\", timeout = \"200ms\", rise = 1, fall = 1 }}\nmode = [\"roundrobin\"]\n",
        udp_listener(&[&a, &b], "")
    ));
    let sock = q.path("ctl.sock");
    wait_ctl(&q, &sock);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let servers = ctl(&sock, "servers");
        let lines: Vec<&str> = servers.lines().collect();
        if lines.len() >= 2 && lines[1].contains("down") && !lines[0].contains("down") {
            break;
        }
        assert!(Instant::now() < deadline, "b never went down:\n{servers}");
        thread::sleep(Duration::from_millis(50));
    }
    assert!(a.datagrams() > 0 && b.datagrams() > 0, "both were probed");
    for _ in 0..6 {
        assert_eq!(server_name(&reply_of(&client(), q.addr(), "q")), "a");
    }
}

#[test]
fn udp_health_checks_must_be_udp_on_a_udp_listener() {
    let dir = scratch_dir();
    let path = dir.path().join("h.toml");
    let p = path.display().to_string();
    let udp = "[[listener]]\nname = \"d\"\nlisten = \"127.0.0.1:5353\"\nprotocol = \"udp\"\nservers = [\"127.0.0.1:53\"]\n";
    let tcp =
        "[[listener]]\nname = \"t\"\nlisten = \"127.0.0.1:5354\"\nservers = [\"127.0.0.1:53\"]\n";
    for (text, needle) in [
        (
            format!("{udp}health = {{ type = \"tcp\" }}\n"),
            "a UDP listener's health check must be type udp",
        ),
        (
            format!("{tcp}health = {{ type = \"udp\", send = \"x\" }}\n"),
            "a udp health check needs a UDP listener",
        ),
        (
            format!("{udp}health = {{ type = \"udp\", path = \"/\" }}\n"),
            "health: path and host need type = \"http\"",
        ),
    ] {
        fs::write(&path, &text).unwrap();
        let (code, _out, err) = run_quill_output(&["check", "--config", &p]);
        assert_eq!(code, 2, "{text}: {err}");
        assert!(err.contains(&format!("{p}:")), "{err}");
        assert!(err.contains(needle), "{err:?} should contain {needle:?}");
    }
    let (code, err) = run_quill_expect_exit(&[
        "check",
        "-U",
        "--check",
        "tcp",
        "127.0.0.1:5353",
        "127.0.0.1:53",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("must be type udp"), "{err}");
    let (code, out, err) = run_quill_output(&[
        "check",
        "-U",
        "--check",
        "udp:PING",
        "--check-expect",
        "PONG",
        "127.0.0.1:5353",
        "127.0.0.1:53",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("udp sending \"PING\" expecting \"PONG\""),
        "{out}"
    );
    // A file-wide [health] is for the TCP listeners: the UDP one loads without it.
    fs::write(&path, format!("[health]\ntype = \"tcp\"\n{udp}")).unwrap();
    let (code, out, err) = run_quill_output(&["check", "--config", &p]);
    assert_eq!(code, 0, "{out}{err}");
}

/// The socket-activating parent for a datagram socket: binds it (SO_REUSEPORT, as
/// `ReusePort=yes` does), moves it to descriptor 3, sets the LISTEN_ variables naming it, and
/// execs quill (same pid, so LISTEN_PID names quill).
const ACTIVATE_UDP_PY: &str = r#"
import os, socket, sys
host, port, name, inode_file = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
s.bind((host, port))
open(inode_file, "w").write(str(os.fstat(s.fileno()).st_ino))
high = os.dup(s.fileno())
s.close()
os.dup2(high, 3)
os.close(high)
env = dict(os.environ)
env["LISTEN_FDS"] = "1"
env["LISTEN_PID"] = str(os.getpid())
env["LISTEN_FDNAMES"] = name
os.execve(sys.argv[5], sys.argv[5:], env)
"#;

#[test]
fn udp_socket_activation_takes_the_named_datagram_socket() {
    let a = UdpServer::start("a");
    let dir = scratch_dir();
    let port = free_udp_port(Ipv4Addr::LOCALHOST.into());
    let cfg = dir.path().join("q.toml");
    fs::write(
        &cfg,
        format!(
            "workers = 2\n[[listener]]\nname = \"dns\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"udp\"\nservers = [\"{}\"]\n",
            a.addr
        ),
    )
    .unwrap();
    let script = dir.path().join("activate.py");
    fs::write(&script, ACTIVATE_UDP_PY).unwrap();
    let inode_file = dir.path().join("inode");
    let args = vec![
        script.display().to_string(),
        "127.0.0.1".into(),
        port.to_string(),
        "dns".into(),
        inode_file.display().to_string(),
        BIN.to_string(),
        "--config".into(),
        cfg.display().to_string(),
    ];
    let q = QuillProcess::spawn_in_cmd("python3", dir, args, port);
    assert!(
        q.wait_stderr_contains("inherited 1 listening socket(s)", READY_TIMEOUT),
        "{}",
        q.stderr()
    );
    assert!(
        q.wait_stderr_contains(" worker(s)", READY_TIMEOUT),
        "{}",
        q.stderr()
    );
    // Quill holds the passed socket (its inode among quill's descriptors) and serves on it and
    // the socket it bound beside it for its second worker.
    let inode = fs::read_to_string(&inode_file).unwrap();
    let held = fs::read_dir(format!("/proc/{}/fd", q.pid))
        .unwrap()
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .any(|l| l.to_string_lossy() == format!("socket:[{}]", inode.trim()));
    assert!(held, "quill keeps the socket systemd passed");
    for _ in 0..6 {
        assert_eq!(server_name(&reply_of(&client(), q.addr(), "s")), "a");
    }
}

#[test]
fn udp_flows_and_health_checks_leave_from_the_source_address() {
    // `source` pins the local address of every flow's socket (and of the UDP checks), as for
    // TCP: with several addresses, a host is no longer held to one address's ephemeral ports.
    let a = UdpServer::start("a");
    let q = start_toml(&format!(
        "{ONE_WORKER}{}source = \"127.0.0.3\"\nhealth = {{ type = \"udp\", send = \"ping\", expect = \":ping\", interval = \"100ms\", timeout = \"500ms\" }}\n",
        udp_listener(&[&a], "")
    ));
    for i in 0..3 {
        assert_eq!(
            reply_of(&client(), q.addr(), &format!("q{i}")),
            format!("a:q{i}")
        );
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while a.datagrams() < 5 {
        assert!(Instant::now() < deadline, "no health check reached a");
        thread::sleep(Duration::from_millis(20));
    }
    let seen = a.seen.lock().unwrap().clone();
    assert!(
        seen.iter()
            .all(|s| s.ip() == IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3))),
        "every datagram from 127.0.0.3: {seen:?}"
    );
}

/// The v2 header of a UDP datagram from `src` to `dst` (IPv4), written out by hand from the
/// specification (not with Quill's encoder).
fn v2_dgram_v4(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x21, 0x12, 0, 12]);
    for a in [src, dst] {
        let IpAddr::V4(ip) = a.ip() else {
            panic!("{a} is not IPv4")
        };
        h.extend_from_slice(&ip.octets());
    }
    h.extend_from_slice(&src.port().to_be_bytes());
    h.extend_from_slice(&dst.port().to_be_bytes());
    h
}

#[test]
fn udp_proxy_protocol_v2_header_precedes_each_datagram() {
    // A server that keeps every datagram whole and answers "ok".
    let server = UdpSocket::bind("127.0.0.1:0").unwrap();
    server
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let addr = server.local_addr().unwrap();
    let got = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let (g, st) = (got.clone(), stop.clone());
    let t = thread::spawn(move || {
        let mut buf = [0u8; 2048];
        // Bounded: at most 20 s of 50 ms waits.
        for _ in 0..400 {
            if st.load(Ordering::Relaxed) {
                return;
            }
            if let Ok((n, from)) = server.recv_from(&mut buf) {
                g.lock().unwrap().push(buf[..n].to_vec());
                let _ = server.send_to(b"ok", from);
            }
        }
    });
    let q = start_toml(&format!(
        "workers = 1\n[[listener]]\nname = \"dns\"\nlisten = \"0.0.0.0:{{PORT}}\"\nprotocol = \"udp\"\nservers = [\"{addr}\"]\nproxy_protocol = \"v2\"\n"
    ));
    // The wildcard listener: the header names the address the client wrote to (127.0.0.2).
    let to = SocketAddr::new(Ipv4Addr::new(127, 0, 0, 2).into(), q.addr().port());
    let c = client();
    for msg in ["first", "second"] {
        let (reply, from) = ask(&c, to, msg).expect("an answer");
        assert_eq!((reply.as_str(), from), ("ok", to));
    }
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
    let want = v2_dgram_v4(c.local_addr().unwrap(), to);
    let got = got.lock().unwrap().clone();
    assert_eq!(got.len(), 2, "{got:?}");
    for (d, msg) in got.iter().zip(["first", "second"]) {
        assert_eq!(d[..want.len()], want[..], "header of {msg:?}");
        assert_eq!(&d[want.len()..], msg.as_bytes());
    }
    // v1 has no datagram form: refused with the line.
    let dir = scratch_dir();
    let path = dir.path().join("v1.toml");
    fs::write(
        &path,
        format!("[[listener]]\nname = \"dns\"\nlisten = \"127.0.0.1:5353\"\nprotocol = \"udp\"\nservers = [\"{addr}\"]\nproxy_protocol = \"v1\"\n"),
    )
    .unwrap();
    let (code, _, err) = run_quill_output(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("proxy_protocol v1 has no datagram form"),
        "{err}"
    );
}

#[test]
fn udp_flow_responses_waits_for_every_query_of_a_pipelining_client() {
    // A client that sends three queries before any answer (as a DNS client does on one socket)
    // gets three answers: with flow_responses = 1 the flow ends once each query has had its
    // one, not at the first. The server holds its answers until all three arrived.
    let server = UdpSocket::bind("127.0.0.1:0").unwrap();
    server
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let addr = server.local_addr().unwrap();
    let t = thread::spawn(move || {
        let mut held = Vec::new();
        let mut buf = [0u8; 512];
        // Bounded: at most 10 s of 50 ms waits.
        for _ in 0..200 {
            if let Ok((n, from)) = server.recv_from(&mut buf) {
                held.push((buf[..n].to_vec(), from));
                if held.len() == 3 {
                    for (d, to) in &held {
                        let _ = server.send_to(d, to);
                    }
                    return;
                }
            }
        }
    });
    let q = start_toml(&format!(
        "{ONE_WORKER}[[listener]]\nname = \"dns\"\nlisten = \"127.0.0.1:{{PORT}}\"\nprotocol = \"udp\"\nservers = [\"{addr}\"]\nudp = {{ flow_responses = 1 }}\n"
    ));
    let c = client();
    for m in ["q1", "q2", "q3"] {
        c.send_to(m.as_bytes(), q.addr()).unwrap();
    }
    let mut got = BTreeSet::new();
    let mut buf = [0u8; 64];
    for _ in 0..3 {
        let (n, _) = c.recv_from(&mut buf).expect("every query answered");
        got.insert(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert_eq!(got, BTreeSet::from(["q1".into(), "q2".into(), "q3".into()]));
    t.join().unwrap();
    let line = q.wait_line_at(0, Duration::from_secs(5));
    assert_eq!(line.end, "responses", "{line:?}");
    // Every answer counted for the flow, the last one's too (all three may leave in one batch).
    assert_eq!((line.bytes_in, line.bytes_out), (6, 6), "{line:?}");
}

#[test]
fn udp_open_flow_keeps_exit_idle_time_from_exiting() {
    // --exit-idle-time counts an open UDP flow as a session: Quill stays while the flow lives
    // (3 s of flow_timeout), then exits once it has been idle for the limit (1 s).
    let a = UdpServer::start("a");
    let dir = scratch_dir();
    let port = free_udp_port(Ipv4Addr::LOCALHOST.into());
    let path = dir.path().join("q.toml");
    fs::write(
        &path,
        format!(
            "workers = 1\n[[listener]]\nname = \"dns\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"udp\"\nservers = [\"{}\"]\nudp = {{ flow_timeout = \"3s\" }}\n",
            a.addr
        ),
    )
    .unwrap();
    let args = vec![
        "--config".to_string(),
        path.display().to_string(),
        "--exit-idle-time".to_string(),
        "1".to_string(),
    ];
    let mut q = start(dir, args, port);
    let c = client();
    assert_eq!(reply_of(&c, q.addr(), "hi"), "a:hi");
    let opened = Instant::now();
    // Well past the 1 s limit, the flow (3 s) is still open: Quill must still be there.
    thread::sleep(Duration::from_millis(2000));
    assert_eq!(reply_of(&c, q.addr(), "still"), "a:still");
    let last = Instant::now();
    // The flow times out 3 s after its last datagram, then 1 s of idle: Quill exits.
    assert!(
        q.wait_exit(Duration::from_secs(10)).is_some(),
        "quill did not exit after the flow ended:\n{}",
        q.stderr()
    );
    assert!(
        last.elapsed() >= Duration::from_millis(3500),
        "exited {:?} after the last datagram, before its flow timed out ({:?} since the first)",
        last.elapsed(),
        opened.elapsed()
    );
}

/// A UDP server that holds its answers until `expect` datagrams have come (bounded: 10 s), then
/// sends them all at once (`r:` and the datagram), so that Quill finds many flows' replies ready
/// in one turn of its worker.
fn burst_server(expect: usize) -> (SocketAddr, thread::JoinHandle<usize>) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let addr = socket.local_addr().unwrap();
    let handle = thread::spawn(move || {
        let mut held: Vec<(Vec<u8>, SocketAddr)> = Vec::new();
        let mut buf = [0u8; 2048];
        let deadline = Instant::now() + Duration::from_secs(10);
        while held.len() < expect && Instant::now() < deadline {
            if let Ok((n, from)) = socket.recv_from(&mut buf) {
                let mut answer = b"r:".to_vec();
                answer.extend_from_slice(&buf[..n]);
                held.push((answer, from));
            }
        }
        for (answer, to) in &held {
            socket.send_to(answer, to).unwrap();
        }
        held.len()
    });
    (addr, handle)
}

#[test]
fn udp_replies_from_many_flows_in_one_turn_all_reach_their_clients() {
    // 2 x 60 flows over two listeners on one worker (more replies than one sendmmsg batch holds,
    // leaving from two listening sockets); the server answers them all in one burst.
    const PER: usize = 60;
    let (server, burst) = burst_server(2 * PER);
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let live_port = free_udp_port(Ipv4Addr::LOCALHOST.into());
    let q = start_toml(&format!(
        "admin = \"{admin}\"\n{ONE_WORKER}\
         [[listener]]\nname = \"dns\"\nlisten = \"127.0.0.1:{{PORT}}\"\nprotocol = \"udp\"\n\
         servers = [\"{server}\"]\nudp = {{ flow_responses = 1 }}\n\
         [[listener]]\nname = \"live\"\nlisten = \"127.0.0.1:{live_port}\"\nprotocol = \"udp\"\n\
         servers = [\"{server}\"]\n"
    ));
    let live = SocketAddr::from(([127, 0, 0, 1], live_port));
    let clients: Vec<(UdpSocket, Vec<u8>)> = (0..2 * PER)
        .map(|i| {
            (
                client(),
                format!("q{i}-{}", "x".repeat(i % 37)).into_bytes(),
            )
        })
        .collect();
    for (i, (c, msg)) in clients.iter().enumerate() {
        let to = if i < PER { q.addr() } else { live };
        c.send_to(msg, to).unwrap();
    }
    assert_eq!(
        burst.join().unwrap(),
        2 * PER,
        "the server did not get every query"
    );
    let mut buf = [0u8; 2048];
    for (i, (c, msg)) in clients.iter().enumerate() {
        let (n, from) = c
            .recv_from(&mut buf)
            .unwrap_or_else(|e| panic!("client {i}: no reply: {e}"));
        let mut want = b"r:".to_vec();
        want.extend_from_slice(msg);
        assert_eq!(&buf[..n], &want[..], "client {i} got another's reply");
        assert_eq!(from, if i < PER { q.addr() } else { live }, "client {i}");
    }
    // Exactly one reply each: nothing else arrives.
    thread::sleep(Duration::from_millis(300));
    for (i, (c, _)) in clients.iter().enumerate() {
        c.set_nonblocking(true).unwrap();
        assert!(
            c.recv_from(&mut buf).is_err(),
            "client {i}: a second datagram"
        );
    }
    // Every reply counted once, for its own flow: the access log of the ended flows has each
    // one's reply bytes, and the metrics the sum of all.
    let lines = q.wait_log_lines(PER, Duration::from_secs(5));
    let mut logged: Vec<u64> = lines.iter().map(|l| l.bytes_out).collect();
    let mut sent: Vec<u64> = clients[..PER]
        .iter()
        .map(|(_, m)| m.len() as u64 + 2)
        .collect();
    logged.sort_unstable();
    sent.sort_unstable();
    assert_eq!(logged, sent);
    assert!(lines.iter().all(|l| l.end == "responses"), "{lines:?}");
    let text = http_get(admin, "/metrics");
    let value = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
            .trim()
            .parse()
            .unwrap()
    };
    let bytes: u64 = clients.iter().map(|(_, m)| m.len() as u64 + 2).sum();
    assert_eq!(value("quill_udp_datagrams_sent_total"), 2 * PER as u64);
    assert_eq!(value("quill_udp_bytes_sent_total"), bytes);
    assert_eq!(value("quill_udp_datagrams_dropped_total"), 0);
    assert_eq!(value("quill_udp_flows_active"), PER as u64);
}

// E4, E5, E6, E15 (docs/design.md#udp-cannot-loop-or-starve): UDP cannot loop or starve. Forging a
// source address or an ICMP error takes a raw socket (IP_HDRINCL): these tests run as root (as
// CI does) and send only to 127.0.0.1.

/// A raw IPv4 socket that sends whole packets (IPPROTO_RAW: the IP header is ours), or None
/// (with a note) when the test does not run as root.
fn raw_socket() -> Option<socket2::Socket> {
    use socket2::{Domain, Protocol, Socket, Type};
    match Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(255))) {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!("SKIPPED: no raw socket ({e}); forging a source needs root");
            None
        }
    }
}

/// The Internet checksum of `b`.
fn inet_checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for pair in b.chunks(2) {
        let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum >> 16) + (sum & 0xffff);
    }
    !(sum as u16)
}

/// An IPv4 header for `payload_len` bytes of protocol `proto`, checksummed.
fn ipv4_header(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, payload_len: usize) -> Vec<u8> {
    let total = (20 + payload_len) as u16;
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0x12, 0x34, 0, 0, 64, proto, 0, 0]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    let c = inet_checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

/// A whole IPv4 UDP datagram from `src` to `dst` carrying `payload` (UDP checksum filled in).
fn ipv4_udp(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Vec<u8> {
    let (IpAddr::V4(s), IpAddr::V4(d)) = (src.ip(), dst.ip()) else {
        panic!("IPv4 only");
    };
    let len = (8 + payload.len()) as u16;
    let mut udp = Vec::new();
    udp.extend_from_slice(&src.port().to_be_bytes());
    udp.extend_from_slice(&dst.port().to_be_bytes());
    udp.extend_from_slice(&len.to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&s.octets());
    pseudo.extend_from_slice(&d.octets());
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&len.to_be_bytes());
    pseudo.extend_from_slice(&udp);
    let c = match inet_checksum(&pseudo) {
        0 => 0xffff,
        c => c,
    };
    udp[6..8].copy_from_slice(&c.to_be_bytes());
    let mut p = ipv4_header(s, d, 17, udp.len());
    p.extend_from_slice(&udp);
    p
}

/// Sends the whole IPv4 packet `p` (its destination is in its header; loopback only).
fn send_raw(raw: &socket2::Socket, p: &[u8]) {
    let dst = Ipv4Addr::new(p[16], p[17], p[18], p[19]);
    assert!(dst.is_loopback(), "raw packets go to loopback only");
    raw.send_to(p, &SocketAddr::new(dst.into(), 0).into())
        .unwrap();
}

/// An ICMP port unreachable from `from` to 127.0.0.1 quoting a datagram `flow` -> `server`
/// whose payload starts with `quoted`.
fn icmp_port_unreachable(
    from: Ipv4Addr,
    flow: SocketAddr,
    server: SocketAddr,
    quoted: &[u8],
) -> Vec<u8> {
    let original = ipv4_udp(flow, server, quoted);
    let mut icmp = vec![3, 3, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&original);
    let c = inet_checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let mut p = ipv4_header(from, Ipv4Addr::LOCALHOST, 1, icmp.len());
    p.extend_from_slice(&icmp);
    p
}

/// The local ports of the UDP sockets connected to `server` (IPv4): Quill's flow sockets. One
/// socket a port: a read of /proc/net/udp while other tests open and close sockets may list a
/// socket twice (the same inode), which is not a second socket.
fn flow_ports(server: SocketAddr) -> Vec<u16> {
    let IpAddr::V4(ip) = server.ip() else {
        panic!("IPv4 only");
    };
    let want = format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(ip.octets()),
        server.port()
    );
    let mut seen = Vec::new();
    fs::read_to_string("/proc/net/udp")
        .unwrap()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // sl, local, remote, st, queues, tr, retrnsmt, uid, timeout, inode.
            let port = (f.get(2) == Some(&want.as_str()))
                .then(|| u16::from_str_radix(f[1].rsplit(':').next()?, 16).ok())
                .flatten()?;
            let inode = f.get(9).copied().unwrap_or_default().to_string();
            (!seen.contains(&inode)).then(|| {
                seen.push(inode);
                port
            })
        })
        .collect()
}

/// The value of the metric sample `name` (with its labels, as written) in `text`.
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

/// `quill -U -r -b 60 -C DIR/ctl.sock 127.0.0.1:PORT SERVERS...` (round robin, a server out
/// for 60 s after errors), ready and its control socket answering: (quill, control socket).
fn start_blacklisting(servers: &[String]) -> (QuillProcess, PathBuf) {
    let dir = scratch_dir();
    let port = free_udp_port(Ipv4Addr::LOCALHOST.into());
    let sock = dir.path().join("ctl.sock");
    let args = pen_args(
        dir.path(),
        port,
        &["-U", "-r", "-b", "60", "-C", &sock.display().to_string()],
        servers,
    );
    let q = start(dir, args, port);
    wait_ctl(&q, &sock);
    (q, sock)
}

/// The one flow socket Quill holds to `server` (asserted to be one), as 127.0.0.1:port. Waits
/// (5 s at most) for it to appear: the datagram that opens it may still be on its way through
/// Quill when the client's own wait for an answer ran out.
fn only_flow_to(server: SocketAddr) -> SocketAddr {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut ports = flow_ports(server);
    while ports.is_empty() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
        ports = flow_ports(server);
    }
    assert_eq!(ports.len(), 1, "one flow socket to {server}: {ports:?}");
    SocketAddr::from(([127, 0, 0, 1], ports[0]))
}

/// Asserts that the control socket `sock` lists no server as blacklisted.
fn assert_none_blacklisted(sock: &Path) {
    let servers = ctl(sock, "servers");
    assert!(
        servers.lines().all(|l| l.contains(" blacklisted 0")),
        "{servers}"
    );
}

/// Asserts that the control socket `sock` lists its first server as blacklisted.
fn assert_first_blacklisted(sock: &Path) {
    let servers = ctl(sock, "servers");
    let first = servers.lines().next().unwrap_or_default();
    assert!(
        first.contains(" blacklisted ") && !first.contains(" blacklisted 0"),
        "{servers}"
    );
}

#[test]
fn datagram_from_quills_own_address_starts_no_loop() {
    let Some(raw) = raw_socket() else {
        return;
    };
    let a = UdpServer::start("a");
    let any_port = free_udp_port(Ipv4Addr::UNSPECIFIED.into());
    let (q, admin) = start_with_admin(&format!(
        "{}[[listener]]\nname = \"any\"\nlisten = \"0.0.0.0:{any_port}\"\nprotocol = \"udp\"\nservers = [\"{}\"]\n",
        udp_listener(&[&a], ""),
        a.addr
    ));
    let own = q.addr();
    let wildcard = SocketAddr::from(([127, 0, 0, 1], any_port));
    // Each would make Quill answer itself, and its answer come back as the same client's
    // datagram, for ever (the probe saw 23,000-36,000 datagrams a second from one).
    // The listener's own address, to itself:
    send_raw(&raw, &ipv4_udp(own, own, b"loop-1"));
    // A wildcard listener's port on another local address (any 127.0.0.0/8 address is local):
    send_raw(
        &raw,
        &ipv4_udp(
            SocketAddr::from(([127, 0, 23, 7], any_port)),
            wildcard,
            b"loop-2",
        ),
    );
    // One listener's address to the other listener:
    send_raw(&raw, &ipv4_udp(own, wildcard, b"loop-3"));
    thread::sleep(Duration::from_millis(600));
    let text = http_get(admin, "/metrics");
    assert_eq!(
        metric(&text, "quill_udp_datagrams_received_total"),
        0,
        "a datagram from Quill's own address was relayed (a loop); server saw {}",
        a.datagrams()
    );
    assert_eq!(a.datagrams(), 0);
    assert_eq!(metric(&text, "quill_udp_flows_total"), 0);
    assert_eq!(
        metric(
            &text,
            "quill_udp_datagrams_refused_total{reason=\"quill_address\"}"
        ),
        3
    );
    // A client of its own is served as before.
    assert_eq!(reply_of(&client(), own, "hi"), "a:hi");
}

#[test]
fn datagram_from_a_pool_server_is_dropped() {
    let Some(raw) = raw_socket() else {
        return;
    };
    let a = UdpServer::start("a");
    let (q, admin) = start_with_admin(&udp_listener(&[&a], ""));
    // From the (echo) server itself: Quill relays it to the server, whose answer goes back to
    // Quill's flow, on to the "client" (the server), which answers again: a ping-pong.
    send_raw(&raw, &ipv4_udp(a.addr, q.addr(), b"ping"));
    thread::sleep(Duration::from_millis(600));
    let text = http_get(admin, "/metrics");
    assert_eq!(
        a.datagrams(),
        0,
        "a datagram from the pool's server reached it (a ping-pong)"
    );
    assert_eq!(metric(&text, "quill_udp_flows_total"), 0);
    assert_eq!(
        metric(
            &text,
            "quill_udp_datagrams_refused_total{reason=\"pool_server\"}"
        ),
        1
    );
    assert_eq!(reply_of(&client(), q.addr(), "hi"), "a:hi");
}

#[test]
fn flow_spray_leaves_descriptors_for_tcp_and_admin() {
    // Quill with 1,024 descriptors (prlimit execs it: same PID), a UDP listener with the default
    // max_flows, a TCP listener and the admin listener in one process.
    if Command::new("prlimit").arg("--version").output().is_err() {
        eprintln!("SKIPPED: prlimit (util-linux) is not installed");
        return;
    }
    const SPRAY: usize = 1_500;
    let a = UdpServer::start("a");
    let tcp_server = echo();
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let tcp_port = free_port();
    let dir = scratch_dir();
    let port = free_udp_port(Ipv4Addr::LOCALHOST.into());
    let config = format!(
        "admin = \"{admin}\"\nworkers = 1\nlog = \"{}\"\n{}[[listener]]\nname = \"t\"\nlisten = \"127.0.0.1:{tcp_port}\"\nservers = [\"{}\"]\n",
        dir.path().join("access.log").display(),
        udp_listener(&[&a], "flow_timeout = \"1m\"").replace("{PORT}", &port.to_string()),
        tcp_server.addr()
    );
    let path = dir.path().join("q.toml");
    fs::write(&path, config).unwrap();
    let args = vec![
        "--nofile=1024:1024".to_string(),
        BIN.to_string(),
        "--config".to_string(),
        path.display().to_string(),
    ];
    let q = QuillProcess::spawn_in_cmd("prlimit", dir, args, port);
    assert!(
        q.wait_stderr_contains(" worker(s)", READY_TIMEOUT),
        "{}",
        q.stderr()
    );
    // 1,500 clients, six source ports on each of 250 loopback addresses (real sockets, no
    // forging needed): one descriptor each in Quill if nothing holds them back.
    let mut held = Vec::with_capacity(SPRAY);
    for i in 0..SPRAY {
        let ip = Ipv4Addr::new(127, 0, 23, 1 + (i % 250) as u8);
        let c = UdpSocket::bind(SocketAddr::new(ip.into(), 0)).unwrap();
        c.send_to(b"s", q.addr()).unwrap();
        held.push(c);
        if i % 10 == 9 {
            // Paced, so that the listening socket's buffer never overflows.
            thread::sleep(Duration::from_millis(1));
        }
    }
    // The spray is read in order: once this client is answered, all of it was.
    let last = client();
    let _ = ask_until_answered(&last, q.addr(), "last");
    let fds = fs::read_dir(format!("/proc/{}/fd", q.pid)).unwrap().count();
    // The TCP listener of the same process still serves, several sessions at once.
    let mut sessions: Vec<_> = (0..5).map(|_| connect_port(tcp_port)).collect();
    for s in &mut sessions {
        set_timeouts(s, Duration::from_secs(2));
        echo_roundtrip(s, b"tcp-ok");
    }
    // And the admin listener answers.
    let text = http_get(admin, "/metrics");
    let flows = metric(&text, "quill_udp_flows_active");
    let refused = metric(
        &text,
        "quill_udp_datagrams_refused_total{reason=\"descriptors\"}",
    ) + metric(&text, "quill_udp_flow_evictions_total");
    eprintln!("{flows} flows open, {refused} refused or evicted, {fds} descriptors in quill");
    assert!(
        fds < 1000,
        "{fds} of quill's 1,024 descriptors taken after the spray"
    );
    assert!(refused > 0, "{text}");
    assert!(
        q.stderr().matches("Too many open files").count() == 0,
        "{}",
        q.stderr()
    );
}

#[test]
fn one_source_cannot_evict_other_clients_flows() {
    let a = UdpServer::start("a");
    let (q, admin) = start_with_admin(&udp_listener(
        &[&a],
        "max_flows = 100, flow_timeout = \"1m\"",
    ));
    let legit = client_on(IpAddr::V4(Ipv4Addr::new(127, 0, 23, 2)));
    assert_eq!(reply_of(&legit, q.addr(), "1"), "a:1");
    // One host, 300 source ports (the probe used 2,000 against max_flows 1,000), paced by a
    // third client's round trips (one worker, one socket: read in order) so that no datagram is
    // lost to a full socket buffer.
    let pacer = client_on(IpAddr::V4(Ipv4Addr::new(127, 0, 23, 4)));
    let mut held = Vec::new();
    for i in 0..300 {
        let c = client_on(IpAddr::V4(Ipv4Addr::new(127, 0, 23, 3)));
        c.send_to(b"x", q.addr()).unwrap();
        held.push(c);
        if i % 50 == 49 {
            ask_until_answered(&pacer, q.addr(), "p");
        }
    }
    assert_eq!(ask_until_answered(&legit, q.addr(), "2"), "a:2");
    assert_eq!(
        a.flows(),
        1 + 1 + 100 / 4,
        "the legitimate client kept its flow; the spraying host got a quarter of max_flows"
    );
    let text = http_get(admin, "/metrics");
    assert_eq!(metric(&text, "quill_udp_flow_evictions_total"), 0, "{text}");
    assert_eq!(
        metric(
            &text,
            "quill_udp_datagrams_refused_total{reason=\"source_limit\"}"
        ),
        300 - 25
    );
    assert!(
        q.log_lines().iter().all(|l| l.end != "evicted"),
        "{:?}",
        q.log_lines()
    );
}

#[test]
fn forged_icmp_unreachable_cannot_blacklist_a_server() {
    let Some(raw) = raw_socket() else {
        return;
    };
    let (s0, s1) = (UdpServer::start("s0"), UdpServer::start("s1"));
    let (q, sock) = start_blacklisting(&[s0.addr.to_string(), s1.addr.to_string()]);
    let c = client();
    assert_eq!(
        reply_of(&c, q.addr(), "secret-query-1"),
        "s0:secret-query-1"
    );
    let flow = only_flow_to(s0.addr);
    // Each forgery twice (two errors would take a server out): from an unrelated address,
    // from the server's address quoting only the headers (the probe's), and quoting a guess.
    for _ in 0..2 {
        let forged = [
            icmp_port_unreachable(Ipv4Addr::new(127, 0, 0, 99), flow, s0.addr, b""),
            icmp_port_unreachable(Ipv4Addr::LOCALHOST, flow, s0.addr, b""),
            icmp_port_unreachable(Ipv4Addr::LOCALHOST, flow, s0.addr, b"guess-what-was-sent"),
        ];
        for p in &forged {
            send_raw(&raw, p);
        }
    }
    thread::sleep(Duration::from_millis(300));
    assert_none_blacklisted(&sock);
    // The flow stays with s0 (no new socket there, none at s1).
    assert_eq!(
        reply_of(&c, q.addr(), "secret-query-2"),
        "s0:secret-query-2"
    );
    assert_eq!((s0.flows(), s1.flows()), (1, 0));
    // A new client starts at s1 (round robin), the next at s0 again: nobody is out.
    assert_eq!(server_name(&reply_of(&client(), q.addr(), "n")), "s1");
    assert_eq!(server_name(&reply_of(&client(), q.addr(), "n")), "s0");
}

#[test]
fn real_unreachable_server_is_still_taken_out() {
    let a = UdpServer::start("a");
    // Nothing listens here: the kernel answers each datagram with ICMP port unreachable, from
    // the server's address, quoting the datagram.
    let dead = SocketAddr::new(
        Ipv4Addr::LOCALHOST.into(),
        free_udp_port(Ipv4Addr::LOCALHOST.into()),
    );
    let (q, sock) = start_blacklisting(&[dead.to_string(), a.addr.to_string()]);
    let c = client();
    let started = Instant::now();
    assert_eq!(server_name(&ask_until_answered(&c, q.addr(), "x")), "a");
    eprintln!("answered after {:?}", started.elapsed());
    assert_first_blacklisted(&sock);
    for _ in 0..4 {
        assert_eq!(server_name(&reply_of(&client(), q.addr(), "y")), "a");
    }
}

#[test]
fn one_quoted_icmp_error_and_an_unanswered_datagram_take_a_server_out() {
    let Some(raw) = raw_socket() else {
        return;
    };
    // s0 is silent (a server that stopped answering); s1 answers.
    let s0 = UdpServer::start_at(Ipv4Addr::LOCALHOST.into(), "s0", 0);
    let s1 = UdpServer::start("s1");
    let (q, sock) = start_blacklisting(&[s0.addr.to_string(), s1.addr.to_string()]);
    let c = client();
    c.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(ask(&c, q.addr(), "query-1").is_none(), "s0 is silent");
    let flow = only_flow_to(s0.addr);
    // One error as s0's host would send it: from its address, quoting the datagram. One alone
    // takes no server out.
    send_raw(
        &raw,
        &icmp_port_unreachable(Ipv4Addr::LOCALHOST, flow, s0.addr, b"query-1"),
    );
    thread::sleep(Duration::from_millis(200));
    assert_none_blacklisted(&sock);
    // The next datagram still goes to s0 and stays unanswered...
    let sent = Instant::now();
    assert!(ask(&c, q.addr(), "query-2").is_none());
    assert_eq!((s0.datagrams(), s1.datagrams()), (2, 0));
    // ...for a second: the client's retry goes to s1, and s0 is out.
    thread::sleep(Duration::from_millis(1_100).saturating_sub(sent.elapsed()));
    c.set_read_timeout(Some(REPLY)).unwrap();
    assert_eq!(reply_of(&c, q.addr(), "query-3"), "s1:query-3");
    assert_first_blacklisted(&sock);
}
