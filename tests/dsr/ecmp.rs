//! Several Quills behind ECMP, agreeing without talking (Maglev), over the real binary in network
//! namespaces:
//!
//! ```text
//!  client 10.74.1.2-9 ── router 10.74.1.1 | 10.74.0.1 ── bridge ── quill 1-3 (10.74.0.21-23)
//!                        VIP 10.74.2.100/32 over one nexthop      └─ server 1-3 (10.74.0.11-13,
//!                        per Quill (multipath, L4 hash)              VIP on loopback, port 8000)
//! ```
//!
//! The router sends each connection to one Quill by a hash of its 5-tuple
//! (`fib_multipath_hash_policy=1`), through a resilient nexthop group (`ip nexthop ... type
//! resilient`: deleting one nexthop reassigns only its buckets) or, where the kernel has none,
//! a plain multipath route. Each server answers with its name and the address the connection
//! came from, so a test knows which server and which Quill each connection reached.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use quill_core::maglev::{hash_bytes, Server, Table};

use crate::dsr::pattern;
use crate::netns::{lab_or_skip, Lab};
use crate::support::BIN;

const VIP: &str = "10.74.2.100";
const PORT: u16 = 8000;
const SERVERS: [&str; 3] = ["10.74.0.11:8000", "10.74.0.12:8000", "10.74.0.13:8000"];
/// The client's addresses (10.74.1.2 to .9).
const CLIENTS: usize = 8;

fn vip() -> SocketAddr {
    format!("{VIP}:{PORT}").parse().unwrap()
}

struct Ecmp {
    lab: Lab,
    c: String,
    r: String,
    quills: Vec<String>,
    servers: Vec<String>,
    /// Whether the router's route is a resilient nexthop group (else a plain multipath route).
    resilient: bool,
}

/// `ip ARGS...`, Ok or ip's message.
fn try_ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// The namespaces, addresses, routes and the servers' service; no Quill started yet. With
/// `vip_on_quills` the Quills hold the virtual address (proxy mode), else not (DSR).
fn ecmp_lab(test: &str, vip_on_quills: bool) -> Option<Ecmp> {
    let mut lab = lab_or_skip(test)?;
    let h = lab.ns("h");
    let c = lab.ns("c");
    let r = lab.ns("r");
    let quills: Vec<String> = (1..=3).map(|k| lab.ns(&format!("q{k}"))).collect();
    let servers: Vec<String> = (1..=3).map(|k| lab.ns(&format!("s{k}"))).collect();
    lab.veth(&c, "eth0", "10.74.1.2/24", &r, "eth1", "10.74.1.1/24");
    for k in 3..2 + CLIENTS {
        lab.ip(
            &c,
            &["addr", "add", &format!("10.74.1.{k}/24"), "dev", "eth0"],
        );
    }
    lab.ip(&c, &["route", "add", "default", "via", "10.74.1.1"]);
    let mut members: Vec<(&str, &str, String)> = vec![(&r, "eth0", "10.74.0.1/24".to_string())];
    for (k, q) in quills.iter().enumerate() {
        members.push((q, "eth0", format!("10.74.0.{}/24", 21 + k)));
    }
    for (k, s) in servers.iter().enumerate() {
        members.push((s, "eth0", format!("10.74.0.{}/24", 11 + k)));
    }
    let members: Vec<(&str, &str, &str)> = members
        .iter()
        .map(|(n, i, a)| (*n, *i, a.as_str()))
        .collect();
    lab.bridge(&h, &members);
    lab.sysctl(&r, "net.ipv4.ip_forward=1");
    lab.sysctl(&r, "net.ipv4.fib_multipath_hash_policy=1");
    for scope in ["all", "default", "eth0", "eth1"] {
        lab.sysctl(&r, &format!("net.ipv4.conf.{scope}.rp_filter=0"));
    }
    let vip32 = format!("{VIP}/32");
    for ns in quills.iter().chain(&servers) {
        lab.ip(ns, &["route", "add", "default", "via", "10.74.0.1"]);
    }
    let on_lo: Vec<&String> = if vip_on_quills {
        servers.iter().chain(&quills).collect()
    } else {
        servers.iter().collect()
    };
    for ns in on_lo {
        lab.ip(ns, &["addr", "add", &vip32, "dev", "lo"]);
        for scope in ["all", "eth0"] {
            lab.sysctl(ns, &format!("net.ipv4.conf.{scope}.arp_ignore=1"));
            lab.sysctl(ns, &format!("net.ipv4.conf.{scope}.arp_announce=2"));
        }
    }
    for (k, s) in servers.iter().enumerate() {
        let l = lab.within(s, || TcpListener::bind(("0.0.0.0", PORT)).unwrap());
        thread::spawn(move || service(l, k + 1));
    }
    // The route: a resilient group of one nexthop per Quill, or a plain multipath route.
    let rn = r.as_str();
    for k in 0..3 {
        let via = format!("10.74.0.{}", 21 + k);
        let id = (k + 1).to_string();
        lab.ip(
            rn,
            &["nexthop", "add", "id", &id, "via", &via, "dev", "eth0"],
        );
    }
    let resilient = try_ip(&[
        "-n",
        rn,
        "nexthop",
        "add",
        "id",
        "100",
        "group",
        "1/2/3",
        "type",
        "resilient",
        "buckets",
        "64",
    ])
    .and_then(|()| try_ip(&["-n", rn, "route", "add", &vip32, "nhid", "100"]));
    let resilient = match resilient {
        Ok(()) => true,
        Err(why) => {
            println!("{test}: no resilient nexthop group ({why}): a plain multipath route");
            let mut args = vec!["route", "add", vip32.as_str()];
            let vias: Vec<String> = (0..3).map(|k| format!("10.74.0.{}", 21 + k)).collect();
            for v in &vias {
                args.extend_from_slice(&["nexthop", "via", v]);
            }
            lab.ip(rn, &args);
            false
        }
    };
    println!(
        "{test}: {}",
        if resilient {
            "resilient nexthop group (64 buckets)"
        } else {
            "plain multipath route"
        }
    );
    Some(Ecmp {
        lab,
        c,
        r,
        quills,
        servers,
        resilient,
    })
}

/// Accepts for at most 90 s. A connection sends a line: `who` is answered with `sK PEER` (the
/// server's number and the address the connection came from) and every later line is echoed;
/// a number N is answered with N pattern bytes, paced (32 KiB every 4 ms: a 16 MiB download
/// takes about 2 s), then the connection is closed.
fn service(l: TcpListener, k: usize) {
    l.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    while Instant::now() < deadline {
        let Ok((s, peer)) = l.accept() else {
            thread::sleep(Duration::from_millis(5));
            continue;
        };
        thread::spawn(move || {
            s.set_nonblocking(false).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut r = BufReader::new(&s);
            let mut line = String::new();
            if r.read_line(&mut line).is_err() {
                return;
            }
            if line.trim() == "who" {
                if (&s)
                    .write_all(format!("s{k} {}\n", peer.ip()).as_bytes())
                    .is_err()
                {
                    return;
                }
                for _ in 0..100 {
                    line.clear();
                    match r.read_line(&mut line) {
                        Ok(n) if n > 0 => {
                            if (&s).write_all(line.as_bytes()).is_err() {
                                return;
                            }
                        }
                        _ => return,
                    }
                }
            } else if let Ok(n) = line.trim().parse::<usize>() {
                let all = pattern(n.min(64 << 20));
                for chunk in all.chunks(32 << 10) {
                    if (&s).write_all(chunk).is_err() {
                        return;
                    }
                    thread::sleep(Duration::from_millis(4));
                }
            }
        });
    }
}

/// The server (1-based) the proxy's Maglev table names for client address `ip` (mode `maglev`
/// without `roundrobin`: the key is the address alone, `Client::maglev_key`).
fn table_says(ip: Ipv4Addr) -> usize {
    let table = Table::build(&Server::equal(&SERVERS), 0);
    table.lookup(hash_bytes(&ip.octets(), 0), |_| true).unwrap() + 1
}

/// A connection of the client: its address, the server and the Quill (1-based) it reached.
struct Conn {
    stream: TcpStream,
    from: Ipv4Addr,
    server: usize,
    quill: usize,
}

/// Opens `per_address` connections from each client address, asks `who` on each.
fn connect_all(lab: &Lab, c: &str, per_address: usize) -> Vec<Conn> {
    lab.within(c, move || {
        let mut out = Vec::new();
        for a in 0..CLIENTS {
            let from = Ipv4Addr::new(10, 74, 1, 2 + a as u8);
            for _ in 0..per_address {
                let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                    .unwrap();
                sock.bind(&SocketAddr::new(IpAddr::V4(from), 0).into())
                    .unwrap();
                sock.connect_timeout(&vip().into(), Duration::from_secs(5))
                    .unwrap_or_else(|e| panic!("connect from {from}: {e}"));
                let mut stream = TcpStream::from(sock);
                stream
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
                stream.write_all(b"who\n").unwrap();
                let line =
                    read_line(&mut stream).unwrap_or_else(|e| panic!("who from {from}: {e}"));
                // "sK 10.74.0.2Q"
                let (s, peer) = line.trim().split_once(' ').unwrap();
                let server = s[1..].parse().unwrap();
                let peer: Ipv4Addr = peer.parse().unwrap();
                let quill = usize::from(peer.octets()[3]) - 20;
                out.push(Conn {
                    stream,
                    from,
                    server,
                    quill,
                });
            }
        }
        out
    })
}

/// One line, read a byte at a time (the stream stays usable for the next).
fn read_line(s: &mut TcpStream) -> std::io::Result<String> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while line.len() < 200 {
        match s.read(&mut b)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            _ if b[0] == b'\n' => break,
            _ => line.push(b[0]),
        }
    }
    Ok(String::from_utf8_lossy(&line).to_string())
}

impl Ecmp {
    /// Takes Quill `k` (1-based) out of the router's route.
    fn remove_quill(&self, k: usize) {
        if self.resilient {
            self.lab
                .ip(&self.r, &["nexthop", "del", "id", &k.to_string()]);
        } else {
            let vip32 = format!("{VIP}/32");
            let mut args = vec!["route", "replace", vip32.as_str()];
            let vias: Vec<String> = (1..=3)
                .filter(|&q| q != k)
                .map(|q| format!("10.74.0.{}", 20 + q))
                .collect();
            for v in &vias {
                args.extend_from_slice(&["nexthop", "via", v]);
            }
            self.lab.ip(&self.r, &args);
        }
    }
}

/// (a) In TCP proxy mode with `maglev`, every client address reaches the same server through
/// whichever Quill ECMP sends each of its connections to (the one its table names); (b) taking
/// one Quill out of the route breaks only the connections it carried: the others keep working,
/// and new connections still reach the same servers.
#[test]
fn ecmp_quills_agree_on_each_clients_server_and_losing_one_moves_only_its_flows() {
    let test = "ecmp_quills_agree_on_each_clients_server_and_losing_one_moves_only_its_flows";
    let Some(mut e) = ecmp_lab(test, true) else {
        return;
    };
    let listen = format!("{VIP}:{PORT}");
    // Each Quill lists the servers in its own order.
    let orders = [[0, 1, 2], [2, 1, 0], [1, 2, 0]];
    for (k, q) in e.quills.clone().iter().enumerate() {
        let mut args = vec![BIN, "--maglev", listen.as_str()];
        args.extend(orders[k].iter().map(|&i| SERVERS[i]));
        let i = e.lab.spawn(q, &args);
        drop(e.lab.wait_listening(q, vip(), i));
    }
    const PER_ADDRESS: usize = 12;
    let conns = connect_all(&e.lab, &e.c, PER_ADDRESS);
    for a in 0..CLIENTS {
        let mine: Vec<&Conn> = conns[a * PER_ADDRESS..(a + 1) * PER_ADDRESS]
            .iter()
            .collect();
        let from = mine[0].from;
        let servers: Vec<usize> = mine.iter().map(|c| c.server).collect();
        let quills: Vec<usize> = mine.iter().map(|c| c.quill).collect();
        assert!(
            servers.iter().all(|&s| s == table_says(from)),
            "{from}: servers {servers:?} through Quills {quills:?}; the table says {}",
            table_says(from)
        );
        let mut distinct = quills.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(
            distinct.len() >= 2,
            "{from}: every connection through Quill {quills:?}: ECMP did not spread them"
        );
    }
    let mut servers: Vec<usize> = conns.iter().map(|c| c.server).collect();
    servers.sort_unstable();
    servers.dedup();
    assert!(servers.len() >= 2, "every client on server {servers:?}");

    // (b) Quill 1 leaves the route.
    e.remove_quill(1);
    thread::sleep(Duration::from_millis(200));
    let mut conns = conns;
    let (mut kept, mut broken) = (0, 0);
    for (n, c) in conns.iter_mut().enumerate() {
        let msg = format!("ping {n}\n");
        let echoed = c
            .stream
            .write_all(msg.as_bytes())
            .and_then(|()| read_line(&mut c.stream));
        let ok = matches!(&echoed, Ok(l) if format!("{l}\n") == msg);
        if c.quill == 1 {
            // Its packets now reach a Quill without the connection: reset (or silence).
            assert!(!ok, "connection {n} through the removed Quill still works");
            broken += 1;
        } else if e.resilient {
            assert!(
                ok,
                "connection {n} from {} through Quill {} broke when Quill 1 left: {echoed:?}",
                c.from, c.quill
            );
            kept += 1;
        } else if ok {
            // A plain multipath route rehashes more than Quill 1's share: only counted.
            kept += 1;
        }
    }
    println!(
        "{kept} of the other Quills' {} connections kept, {broken} (Quill 1's) broken",
        conns.len() - broken
    );
    assert!(broken > 0, "Quill 1 carried no connection");
    if e.resilient {
        assert!(kept > 0);
    }
    drop(conns);
    // New connections: Quills 2 and 3 only, each client still on its server.
    let after = connect_all(&e.lab, &e.c, 4);
    for c in &after {
        assert_ne!(c.quill, 1, "a new connection reached the removed Quill");
        assert_eq!(
            c.server,
            table_says(c.from),
            "{} after Quill 1 left",
            c.from
        );
    }
    let _ = &e.servers;
}

/// TCP counters of namespace `ns` from /proc/net/snmp: (EstabResets, OutRsts).
fn resets(lab: &Lab, ns: &str) -> (u64, u64) {
    let text = lab.output(ns, &["cat", "/proc/net/snmp"]);
    let tcp: Vec<&str> = text.lines().filter(|l| l.starts_with("Tcp:")).collect();
    let names: Vec<&str> = tcp[0].split_whitespace().collect();
    let values: Vec<&str> = tcp[1].split_whitespace().collect();
    let get = |name: &str| -> u64 {
        let i = names.iter().position(|n| *n == name).unwrap();
        values[i].parse().unwrap()
    };
    (get("EstabResets"), get("OutRsts"))
}

/// (c) In DSR mode with `maglev`, a download in flight survives its Quill leaving the route: the
/// client's packets reach another Quill, which sends them to the same server (same table, same
/// key), and the download completes byte for byte with no reset on either side.
#[test]
fn ecmp_dsr_maglev_download_survives_moving_to_another_quill() {
    let test = "ecmp_dsr_maglev_download_survives_moving_to_another_quill";
    let Some(mut e) = ecmp_lab(test, false) else {
        return;
    };
    let listen = format!("{VIP}:{PORT}");
    let orders = [[0, 1, 2], [2, 1, 0], [1, 2, 0]];
    let mut children = Vec::new();
    for (k, q) in e.quills.clone().iter().enumerate() {
        let mut args = vec![BIN, "-O", "dsr_if eth0", "--maglev", listen.as_str()];
        args.extend(orders[k].iter().map(|&i| SERVERS[i]));
        children.push(e.lab.spawn(q, &args));
    }
    // Ready once the client gets through (whichever Quill), then a probe round for the MACs.
    for &i in &children {
        drop(e.lab.wait_listening(&e.c.clone(), vip(), i));
    }
    thread::sleep(Duration::from_millis(1500));
    let rx = |e: &Ecmp| -> Vec<u64> {
        e.quills
            .iter()
            .map(|q| e.lab.counter(q, "eth0", "rx_packets"))
            .collect()
    };
    let before: Vec<(u64, u64)> = std::iter::once(&e.c)
        .chain(&e.servers)
        .map(|ns| resets(&e.lab, ns))
        .collect();
    const N: usize = 16 << 20;
    let c = e.c.clone();
    let path = format!("/run/netns/{c}");
    let download = thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap();
        quill_core::sys::enter_netns(std::os::fd::AsFd::as_fd(&file)).unwrap();
        let mut s = TcpStream::connect_timeout(&vip(), Duration::from_secs(5)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(format!("{N}\n").as_bytes()).unwrap();
        let mut got = Vec::with_capacity(N);
        let r = s.read_to_end(&mut got);
        (r.map(|_| got), Instant::now())
    });
    // Which Quill carries it: the one whose interface receives the client's ACKs (watched for
    // up to 3 s: on a loaded machine the download may take a while to get going).
    thread::sleep(Duration::from_millis(400));
    let r0 = rx(&e);
    let mut moved: Vec<u64> = vec![0; 3];
    for _ in 0..10 {
        thread::sleep(Duration::from_millis(300));
        let r1 = rx(&e);
        moved = r1.iter().zip(&r0).map(|(b, a)| b - a).collect();
        if moved.iter().any(|&m| m > 50) {
            break;
        }
    }
    let carrier = (0..3).max_by_key(|&k| moved[k]).unwrap() + 1;
    assert!(
        moved[carrier - 1] > 50,
        "no Quill carries the download: frames received {moved:?}"
    );
    e.remove_quill(carrier);
    let removed_at = Instant::now();
    let r2 = rx(&e);
    thread::sleep(Duration::from_millis(300));
    let r3 = rx(&e);
    let after: Vec<u64> = r3.iter().zip(&r2).map(|(b, a)| b - a).collect();
    let (got, done) = download.join().unwrap();
    let got = got.unwrap_or_else(|err| panic!("download failed after Quill {carrier} left: {err}"));
    assert!(
        done > removed_at,
        "the download ended before Quill {carrier} left: the test moved nothing"
    );
    assert_eq!(got.len(), N, "download cut short");
    assert!(got == pattern(N), "download corrupted");
    // The client's packets went on through another Quill.
    let others: u64 = (0..3).filter(|&k| k + 1 != carrier).map(|k| after[k]).sum();
    assert!(
        others > 50,
        "no other Quill took the flow: frames received {after:?} (before the move {moved:?})"
    );
    let after_resets: Vec<(u64, u64)> = std::iter::once(&e.c)
        .chain(&e.servers)
        .map(|ns| resets(&e.lab, ns))
        .collect();
    assert_eq!(
        before, after_resets,
        "TCP resets (EstabResets, OutRsts) of the client and the servers changed"
    );
    println!(
        "download moved from Quill {carrier}: frames in the 300 ms before {moved:?}, after {after:?}"
    );
    for &i in &children {
        assert!(e.lab.children[i].exited().is_none(), "a Quill stopped");
    }
}
