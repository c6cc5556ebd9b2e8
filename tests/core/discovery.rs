//! Pools that follow DNS (docs/discovery.md): real DNS servers from Debian on loopback, serving
//! the names Consul and Kubernetes publish, changed while Quill runs. knot (records changed at run
//! time with `knotc`, SRV targets' addresses in the additional section), unbound (local data, no
//! additional records: Quill asks the targets' A records) and dnsmasq (TTL 0, as Consul). Each
//! server runs in the test's scratch directory on a free loopback port and is stopped by its PID.

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::ctl::*;
use crate::support::*;

/// A DNS server process, killed by PID when dropped.
struct Dns {
    child: Child,
    port: u16,
    dir: PathBuf,
    what: &'static str,
}

impl Drop for Dns {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port free for both UDP and TCP on 127.0.0.1.
fn dns_port() -> u16 {
    for _ in 0..50 {
        let p = free_port();
        if std::net::UdpSocket::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
    panic!("no free port for UDP and TCP");
}

impl Dns {
    fn spawn(what: &'static str, dir: &Path, port: u16, cmd: &mut Command) -> Dns {
        let err = fs::File::create(dir.join(format!("{what}.err"))).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("{what} is installed (scripts/test installs it): {e}"));
        let dns = Dns {
            child,
            port,
            dir: dir.to_path_buf(),
            what,
        };
        dns.wait_answering();
        dns
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Waits (bounded) until the server answers over TCP (dig is not needed: a connect does).
    fn wait_answering(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(self.addr()).is_err() {
            assert!(
                Instant::now() < deadline,
                "{} does not listen on {}: {}",
                self.what,
                self.addr(),
                fs::read_to_string(self.dir.join(format!("{}.err", self.what))).unwrap_or_default()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// knot serving `zones` (name, zone file text), changeable with [`Dns::knotc`].
    fn knot(dir: &Path, zones: &[(&str, String)]) -> Dns {
        let port = dns_port();
        let mut conf = format!(
            "server:\n  rundir: \"{d}\"\n  listen: 127.0.0.1@{port}\n  udp-max-payload: 1232\n\
             database:\n  storage: \"{d}\"\n\
             control:\n  listen: \"{d}/knot.sock\"\n\
             log:\n  - target: stderr\n    any: info\n\
             template:\n  - id: default\n    storage: \"{d}\"\n    zonefile-sync: -1\n    journal-content: none\n\
             zone:\n",
            d = dir.display()
        );
        for (name, text) in zones {
            fs::write(dir.join(format!("{name}.zone")), text).unwrap();
            conf += &format!("  - domain: {name}\n    file: \"{name}.zone\"\n");
        }
        fs::write(dir.join("knot.conf"), conf).unwrap();
        let mut cmd = Command::new("knotd");
        cmd.arg("-c").arg(dir.join("knot.conf"));
        Dns::spawn("knotd", dir, port, &mut cmd)
    }

    /// Runs one knotc transaction on `zone`: each of `changes` is `zone-set ...` or
    /// `zone-unset ...` arguments.
    fn knotc(&self, zone: &str, changes: &[&[&str]]) {
        let sock = self.dir.join("knot.sock");
        let run = |args: &[&str]| {
            let out = Command::new("knotc")
                .arg("-s")
                .arg(&sock)
                .args(args)
                .output()
                .expect("knotc");
            assert!(
                out.status.success(),
                "knotc {args:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(&["zone-begin", zone]);
        for c in changes {
            let mut args = vec![c[0], zone];
            args.extend_from_slice(&c[1..]);
            run(&args);
        }
        run(&["zone-commit", zone]);
    }
}

/// The zone `consul.` with `_http._tcp.web.service.consul` pointing at `ports` (targets
/// `bK.node.consul`, all at 127.0.0.1), TTL `ttl`.
fn consul_zone(ports: &[u16], ttl: u32) -> String {
    let mut z = format!(
        "$ORIGIN consul.\n$TTL {ttl}\n@ SOA ns.consul. admin.consul. 1 60 60 60 {ttl}\n@ NS ns.consul.\nns A 127.0.0.1\n"
    );
    for (k, p) in ports.iter().enumerate() {
        z += &format!("_http._tcp.web.service SRV 1 1 {p} b{k}.node\nb{k}.node A 127.0.0.1\n");
    }
    z
}

/// The servers `quill ctl` reports for the only listener: their ports.
fn server_ports(sock: &Path) -> Vec<u16> {
    let mut ports: Vec<u16> = ctl(sock, "servers").lines().filter_map(port_of).collect();
    ports.sort();
    ports
}

/// The port of a Pen server line (`0 addr 127.0.0.1 port 8080 ...`).
fn port_of(line: &str) -> Option<u16> {
    let mut words = line.split_whitespace();
    words.find(|w| *w == "port")?;
    words.next()?.parse().ok()
}

/// Waits (bounded by `within`) until the listener's servers are `want` (sorted); returns how long
/// it took.
fn wait_ports(sock: &Path, want: &[u16], within: Duration) -> Duration {
    let mut want = want.to_vec();
    want.sort();
    let start = Instant::now();
    loop {
        let now = server_ports(sock);
        if now == want {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "servers {now:?}, expected {want:?} within {within:?}"
        );
        thread::sleep(Duration::from_millis(25));
    }
}

/// One HTTP/1.0 request; the `X-Backend` that answered.
fn backend_of(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    reply
        .lines()
        .find_map(|l| l.strip_prefix("X-Backend: "))
        .unwrap_or_else(|| panic!("no X-Backend in {reply:?}"))
        .to_string()
}

fn start_toml(dir: &Path, body: impl Fn(u16) -> String) -> (QuillProcess, PathBuf) {
    let _ = dir;
    let q = Quill::start_with(|d, port| {
        let conf = d.join("q.toml");
        let sock = d.join("ctl.sock");
        fs::write(
            &conf,
            format!("control = \"{}\"\n", sock.display()) + &body(port),
        )
        .unwrap();
        vec!["--config".into(), conf.display().to_string()]
    });
    let sock = q.path("ctl.sock");
    wait_ctl(&q, &sock);
    (q, sock)
}

/// Consul's SRV name from knot: the pool is the records' targets and ports, each change in the
/// records reaches it within TTL + 1 s, and `wrk` sees no failed request while servers are added
/// and removed ten times (removed ones drain, added ones serve at once: no health check here).
#[test]
fn dns_srv_pool_follows_knot_changes_within_ttl_and_wrk_sees_no_failure() {
    let backends: Vec<DemoServer> = (0..4).map(|k| http(&format!("b{k}"))).collect();
    let ports: Vec<u16> = backends.iter().map(|b| b.addr().port()).collect();
    let dir = scratch_dir();
    // Every target's address is in the zone; the changes are to the SRV records.
    let mut zone = consul_zone(&ports[..2], 1);
    for k in 2..4 {
        zone += &format!("b{k}.node A 127.0.0.1\n");
    }
    let dns = Dns::knot(dir.path(), &[("consul", zone)]);
    let (q, sock) = start_ctl(
        &["-H"],
        &[format!("srv:_http._tcp.web.service.consul@{}", dns.addr())],
    );
    wait_ports(&sock, &ports[..2], Duration::from_secs(5));
    let url = format!("http://127.0.0.1:{}/", q.port);
    let out = dir.path().join("wrk.txt");
    let mut wrk = Command::new("wrk")
        .args(["-t1", "-c8", "-d60s", "--timeout", "10s", &url])
        .stdout(fs::File::create(&out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("wrk is installed (scripts/test installs it)");
    // Ten changes: add b2, add b3, remove b0, ... each set non-empty.
    let sets: [&[usize]; 10] = [
        &[0, 1, 2],
        &[0, 1, 2, 3],
        &[1, 2, 3],
        &[2, 3],
        &[3],
        &[0, 3],
        &[0, 1],
        &[1],
        &[1, 2, 3],
        &[0, 1, 2, 3],
    ];
    let mut current: Vec<usize> = vec![0, 1];
    let mut slowest = Duration::ZERO;
    for set in sets {
        let mut changes: Vec<Vec<String>> = Vec::new();
        for &k in current.iter().filter(|k| !set.contains(k)) {
            changes.push(vec![
                "zone-unset".into(),
                "_http._tcp.web.service".into(),
                "SRV".into(),
                format!("1 1 {} b{k}.node", ports[k]),
            ]);
        }
        for &k in set.iter().filter(|k| !current.contains(k)) {
            changes.push(vec![
                "zone-set".into(),
                "_http._tcp.web.service".into(),
                "1".into(),
                "SRV".into(),
                format!("1 1 {} b{k}.node", ports[k]),
            ]);
        }
        let refs: Vec<Vec<&str>> = changes
            .iter()
            .map(|c| c.iter().map(String::as_str).collect())
            .collect();
        let refs: Vec<&[&str]> = refs.iter().map(Vec::as_slice).collect();
        dns.knotc("consul", &refs);
        let want: Vec<u16> = set.iter().map(|&k| ports[k]).collect();
        // TTL 1 s + 1 s.
        slowest = slowest.max(wait_ports(&sock, &want, Duration::from_secs(2)));
        current = set.to_vec();
        thread::sleep(Duration::from_millis(300));
    }
    let _ = Command::new("kill")
        .args(["-INT", &wrk.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while wrk.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "wrk does not stop");
        thread::sleep(Duration::from_millis(10));
    }
    let summary = fs::read_to_string(&out).unwrap();
    assert!(summary.contains("requests in"), "{summary}");
    assert!(
        !summary.contains("Socket errors") && !summary.contains("Non-2xx"),
        "wrk saw failures while the pool changed:\n{summary}"
    );
    eprintln!("slowest change: {slowest:?}\n{summary}");
    assert!(q.stderr().contains("servers from DNS"), "{}", q.stderr());
    drop(backends);
}

/// dnsmasq serves TTL 0, as Consul does: Quill asks at most once a second, never once per use, and
/// the SRV answer's additional records give the targets' addresses (one query per round).
#[test]
fn dns_ttl_zero_is_asked_at_most_once_a_second() {
    let (a, b) = (http("a"), http("b"));
    let dir = scratch_dir();
    let port = dns_port();
    let hosts = dir.path().join("hosts");
    fs::create_dir(&hosts).unwrap();
    fs::write(
        hosts.join("h"),
        "127.0.0.1 a.node.consul\n127.0.0.1 b.node.consul\n",
    )
    .unwrap();
    let log = dir.path().join("dns.log");
    let mut cmd = Command::new("dnsmasq");
    cmd.args([
        "-k",
        "-p",
        &port.to_string(),
        "--listen-address=127.0.0.1",
        "--bind-interfaces",
        "--no-resolv",
        "--no-hosts",
        "--log-queries",
    ])
    .arg(format!("--log-facility={}", log.display()))
    .arg(format!(
        "--pid-file={}",
        dir.path().join("dnsmasq.pid").display()
    ))
    .arg(format!("--hostsdir={}", hosts.display()))
    .arg(format!(
        "--srv-host=_http._tcp.web.service.consul,a.node.consul,{},0,10",
        a.addr().port()
    ))
    .arg(format!(
        "--srv-host=_http._tcp.web.service.consul,b.node.consul,{},0,10",
        b.addr().port()
    ));
    let dns = Dns::spawn("dnsmasq", dir.path(), port, &mut cmd);
    let (q, sock) = start_ctl(
        &["-H", "-r"],
        &[format!("srv:_http._tcp.web.service.consul@{}", dns.addr())],
    );
    wait_ports(
        &sock,
        &[a.addr().port(), b.addr().port()],
        Duration::from_secs(5),
    );
    let seen: std::collections::BTreeSet<String> = (0..20).map(|_| backend_of(q.addr())).collect();
    assert_eq!(
        seen.len(),
        2,
        "both servers serve: {seen:?}\n{}\n{}",
        ctl(&sock, "servers"),
        q.stderr()
    );
    let count = || {
        fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("query[") && l.contains("web.service.consul"))
            .count()
    };
    let before = count();
    thread::sleep(Duration::from_secs(5));
    let asked = count() - before;
    // One round a second, one query a round (the targets' addresses came with the answer).
    assert!(
        (3..=6).contains(&asked),
        "{asked} queries in 5 s with TTL 0"
    );
    drop(q);
}

/// unbound's local data has no additional records: Quill asks each target's A record, under the
/// names Kubernetes publishes for a headless service's named port.
#[test]
fn dns_kubernetes_srv_names_resolve_targets_without_additional_records() {
    let (a, b) = (http("pod-a"), http("pod-b"));
    let dir = scratch_dir();
    let port = dns_port();
    let d = dir.path().display();
    let svc = "web.default.svc.cluster.local";
    let conf = format!(
        "server:\n  interface: 127.0.0.1\n  port: {port}\n  do-daemonize: no\n  username: \"\"\n  chroot: \"\"\n  directory: \"{d}\"\n  pidfile: \"{d}/unbound.pid\"\n  use-syslog: no\n  do-ip6: no\n  local-zone: \"cluster.local.\" static\n  local-data: \"_http._tcp.{svc}. 5 IN SRV 0 1 {pa} pod-a.{svc}.\"\n  local-data: \"_http._tcp.{svc}. 5 IN SRV 0 1 {pb} pod-b.{svc}.\"\n  local-data: \"pod-a.{svc}. 5 IN A 127.0.0.1\"\n  local-data: \"pod-b.{svc}. 5 IN A 127.0.0.1\"\nremote-control:\n  control-enable: no\n",
        pa = a.addr().port(),
        pb = b.addr().port()
    );
    fs::write(dir.path().join("unbound.conf"), conf).unwrap();
    let mut cmd = Command::new("unbound");
    cmd.arg("-d").arg("-c").arg(dir.path().join("unbound.conf"));
    let dns = Dns::spawn("unbound", dir.path(), port, &mut cmd);
    let (q, sock) = start_ctl(
        &["-H", "-r"],
        &[format!("srv:_http._tcp.{svc}@{}", dns.addr())],
    );
    wait_ports(
        &sock,
        &[a.addr().port(), b.addr().port()],
        Duration::from_secs(5),
    );
    let seen: std::collections::BTreeSet<String> = (0..20).map(|_| backend_of(q.addr())).collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
}

/// An SRV set of 100 records does not fit the 1,232 bytes of a UDP answer: the truncated answer
/// is asked again over TCP and all 100 servers are in the pool.
#[test]
fn dns_truncated_srv_answer_of_100_records_is_asked_again_over_tcp() {
    let dir = scratch_dir();
    // Ports nobody listens on: the pool's contents are what is checked, not traffic.
    let ports: Vec<u16> = (0..100).map(|k| 40_000 + k).collect();
    let dns = Dns::knot(dir.path(), &[("consul", consul_zone(&ports, 30))]);
    let (_q, sock) = start_ctl(
        &[],
        &[format!("srv:_http._tcp.web.service.consul@{}", dns.addr())],
    );
    wait_ports(&sock, &ports, Duration::from_secs(5));
}

/// A host name and port from TOML (`servers = { name, port }`, Kubernetes' service name): a
/// server per address; the resolvers going silent keep the pool as it was, and after `hold`
/// the pool is reported stale in the log and /metrics; when they answer again it is fresh.
#[test]
fn dns_failure_keeps_the_last_good_set_and_reports_it_stale_after_hold() {
    let a = http("a");
    let dir = scratch_dir();
    let name = "web.default.svc.cluster.local";
    let zone = "$ORIGIN cluster.local.\n$TTL 1\n@ SOA ns admin 1 60 60 60 1\n@ NS ns\nns A 127.0.0.1\nweb.default.svc A 127.0.0.1\n".to_string();
    let dns = Dns::knot(dir.path(), &[("cluster.local", zone)]);
    let admin = free_port();
    let dns_addr = dns.addr();
    let (q, sock) = start_toml(dir.path(), |port| {
        format!(
            "admin = \"127.0.0.1:{admin}\"\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nservers = {{ name = \"{name}\", port = {}, resolvers = [\"{dns_addr}\"], hold = \"2s\" }}\n",
            a.addr().port()
        )
    });
    wait_ports(&sock, &[a.addr().port()], Duration::from_secs(5));
    assert_eq!(backend_of(q.addr()), "a");
    drop(dns);
    assert!(
        q.wait_stderr_contains("the pool is stale", Duration::from_secs(8)),
        "{}",
        q.stderr()
    );
    // Still served by the last good set.
    assert_eq!(server_ports(&sock), vec![a.addr().port()]);
    assert_eq!(backend_of(q.addr()), "a");
    let metrics = http_get(SocketAddr::from(([127, 0, 0, 1], admin)), "/metrics");
    assert!(
        metrics.contains(
            "quill_discovery_stale{pool=\"web\",source=\"dns:web.default.svc.cluster.local:"
        ) && metrics
            .lines()
            .any(|l| l.starts_with("quill_discovery_stale{") && l.ends_with(" 1")),
        "{metrics}"
    );
}

/// GET PATH over HTTP/1.0; the whole reply.
fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    reply
}

/// A server that arrives in a checked pool starts down and takes no client until its check
/// passes; a named pool that follows DNS keeps its servers across a reload.
#[test]
fn dns_new_server_in_a_checked_pool_waits_for_its_check_and_a_reload_keeps_the_set() {
    let (a, b) = (http("a"), http("b"));
    let dir = scratch_dir();
    let dns = Dns::knot(
        dir.path(),
        &[("consul", consul_zone(&[a.addr().port()], 1))],
    );
    let dns_addr = dns.addr();
    let body = move |port: u16| {
        format!(
            "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
             [[listener.route]]\npath = \"/\"\npool = \"api\"\n\
             [[pool]]\nname = \"api\"\nmode = [\"roundrobin\"]\nhealth = {{ interval = \"500ms\", rise = 2 }}\n\
             servers = {{ srv = \"_http._tcp.web.service.consul\", resolvers = [\"{dns_addr}\"] }}\n"
        )
    };
    let (q, sock) = start_toml(dir.path(), body);
    let pool_ports = |sock: &Path| -> Vec<(u16, String)> {
        ctl(sock, "pool api servers")
            .lines()
            .filter_map(|l| Some((port_of(l)?, l.to_string())))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while pool_ports(&sock).len() != 1 {
        assert!(
            Instant::now() < deadline,
            "{}",
            ctl(&sock, "pool api servers")
        );
        thread::sleep(Duration::from_millis(25));
    }
    dns.knotc(
        "consul",
        &[
            &[
                "zone-set",
                "_http._tcp.web.service",
                "1",
                "SRV",
                &format!("1 1 {} b1.node", b.addr().port()),
            ],
            &["zone-set", "b1.node", "1", "A", "127.0.0.1"],
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(3);
    let b_line = loop {
        if let Some((_, line)) = pool_ports(&sock)
            .into_iter()
            .find(|(p, _)| *p == b.addr().port())
        {
            break line;
        }
        assert!(
            Instant::now() < deadline,
            "{}",
            ctl(&sock, "pool api servers")
        );
        thread::sleep(Duration::from_millis(25));
    };
    // Just added: down until two checks pass; meanwhile every request goes to a.
    assert!(b_line.contains("down"), "{b_line}");
    for _ in 0..10 {
        assert_eq!(backend_of(q.addr()), "a");
    }
    // Up after its checks (2 × 500 ms); then both serve.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let seen: std::collections::BTreeSet<String> =
            (0..10).map(|_| backend_of(q.addr())).collect();
        if seen.len() == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}",
            ctl(&sock, "pool api servers")
        );
        thread::sleep(Duration::from_millis(100));
    }
    ctl_ok(&sock, "reload");
    assert_eq!(
        pool_ports(&sock).len(),
        2,
        "{}",
        ctl(&sock, "pool api servers")
    );
    let seen: std::collections::BTreeSet<String> = (0..10).map(|_| backend_of(q.addr())).collect();
    assert_eq!(seen.len(), 2);
}

/// Mistakes name what and where: the TOML line, the command-line argument.
#[test]
fn dns_discovery_errors_name_the_line_or_argument_and_check_explains_it() {
    let dir = scratch_dir();
    let conf = dir.path().join("q.toml");
    for (body, needle) in [
        (
            "servers = { srv = \"_h._tcp.x\", port = 80 }",
            "srv takes neither name nor port",
        ),
        ("servers = { name = \"x.consul\" }", "name needs a port"),
        (
            "servers = { srv = \"_h._tcp.x\", resolvers = [\"nowhere\"] }",
            "resolver 'nowhere'",
        ),
        ("servers = { srv = \"_h._tcp.x\", hold = \"0s\" }", "hold"),
        ("servers = { srv = \"a..b\" }", "not a valid DNS name"),
    ] {
        fs::write(
            &conf,
            format!("[[listener]]\nname = \"w\"\nlisten = \"127.0.0.1:1\"\n{body}\n"),
        )
        .unwrap();
        let (code, _, err) = run_quill_output(&["check", "--config", conf.to_str().unwrap()]);
        assert_eq!(code, 2, "{body}: {err}");
        assert!(err.contains("q.toml:4"), "{body}: {err}");
        assert!(err.contains(needle), "{body}: {err}");
    }
    let (code, _, err) = run_quill_output(&["check", "127.0.0.1:1", "dns:web.consul"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("dns:web.consul") && err.contains("dns:NAME:PORT"),
        "{err}"
    );
    let (code, _, err) =
        run_quill_output(&["check", "127.0.0.1:1", "srv:_h._tcp.x", "127.0.0.1:2"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no other server"), "{err}");
    fs::write(
        &conf,
        "[[listener]]\nname = \"w\"\nlisten = \"127.0.0.1:1\"\nservers = { srv = \"_http._tcp.web.service.consul\", resolvers = [\"127.0.0.1:8600\"] }\n",
    )
    .unwrap();
    let (code, out, err) = run_quill_output(&["check", "--config", conf.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "servers from DNS: SRV _http._tcp.web.service.consul from 127.0.0.1:8600, hold 30s"
        ),
        "{out}"
    );
}

/// A first resolver that never answers costs one timeout: the query goes to the next, and the
/// rounds after it start with the one that answered (at most one query a second to the silent one
/// in the first round, none later).
#[test]
fn dns_silent_first_resolver_is_skipped_for_the_next() {
    let a = http("a");
    let dir = scratch_dir();
    let dns = Dns::knot(
        dir.path(),
        &[("consul", consul_zone(&[a.addr().port()], 1))],
    );
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    silent
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let (_q, sock) = start_ctl(
        &[],
        &[format!(
            "srv:_http._tcp.web.service.consul@{}@{}",
            silent.local_addr().unwrap(),
            dns.addr()
        )],
    );
    wait_ports(&sock, &[a.addr().port()], Duration::from_secs(4));
    // Three more rounds (TTL 1 s): the silent resolver hears nothing more.
    let mut buf = [0u8; 2048];
    while silent.recv(&mut buf).is_ok() {}
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut heard = 0;
    while Instant::now() < deadline {
        if silent.recv(&mut buf).is_ok() {
            heard += 1;
        }
    }
    assert_eq!(heard, 0, "the silent resolver is asked again");
}
