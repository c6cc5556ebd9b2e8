//! Direct server return on the Maglev table (`--maglev`), over the real binary in the lab of
//! `dsr.rs`: a flow's server is the one the documented function names (the table of
//! `quill_core::maglev` over the servers' identities, the flow's key `quill_core::dsr::maglev_key`),
//! whatever order the servers are listed in and whichever Quill process forwards it; and a flow
//! that Quill already forwards keeps its server when a server comes back, while that server
//! stays up.

use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::thread;
use std::time::Duration;

use quill_core::dsr::{self, Flow};
use quill_core::maglev::{Server, Table};

use crate::dsr::{dsr_lab, PORT, VIP};
use crate::netns::Lab;

const S1: &str = "10.72.0.11:8000";
const S2: &str = "10.72.0.12:8000";

/// The server ("s1", "s2") each UDP flow from 10.72.0.2 and one of `ports` reaches, `each`
/// datagrams per flow (every one of them answered by the same server, or the test fails).
fn flows_reach(lab: &Lab, ns: &str, ports: &[u16], each: usize) -> Vec<String> {
    let ports = ports.to_vec();
    lab.within(ns, move || {
        ports
            .iter()
            .map(|&port| {
                let u = UdpSocket::bind(("10.72.0.2", port)).unwrap();
                u.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                u.connect((VIP, PORT)).unwrap();
                let mut who: Option<String> = None;
                let mut buf = [0u8; 2048];
                for i in 0..each {
                    let msg = format!("port {port} datagram {i}");
                    u.send(msg.as_bytes()).unwrap();
                    let n = u
                        .recv(&mut buf)
                        .unwrap_or_else(|e| panic!("flow from port {port}: no reply: {e}"));
                    let reply = String::from_utf8_lossy(&buf[..n]).to_string();
                    let (server, echoed) = reply.split_once(':').unwrap();
                    assert_eq!(echoed, msg, "wrong bytes back");
                    if let Some(w) = &who {
                        assert_eq!(w, server, "flow from port {port} was split");
                    }
                    who = Some(server.to_string());
                }
                who.unwrap()
            })
            .collect()
    })
}

/// The server the Maglev function names for the UDP flow from 10.72.0.2:`port`, the table built
/// from `servers` (identities as written, weight 1, seed 0), walking past those `up` refuses.
fn table_says(servers: &[&str], port: u16, up: impl Fn(&str) -> bool) -> String {
    let table = Table::build(&Server::equal(servers), 0);
    let flow = Flow {
        src: IpAddr::V4(Ipv4Addr::new(10, 72, 0, 2)),
        dst: IpAddr::V4(VIP.parse().unwrap()),
        proto: dsr::PROTO_UDP,
        src_port: port,
        dst_port: PORT,
        tcp_flags: 0,
        tcp_seq: 0,
    };
    let i = table
        .lookup(dsr::maglev_key(&flow), |i| up(servers[i]))
        .expect("no server up");
    match servers[i] {
        S1 => "s1".to_string(),
        _ => "s2".to_string(),
    }
}

#[test]
fn dsr_maglev_sends_each_flow_where_the_table_says_whatever_the_process_or_server_order() {
    let Some(mut d) = dsr_lab(
        "dsr_maglev_sends_each_flow_where_the_table_says_whatever_the_process_or_server_order",
    ) else {
        return;
    };
    let ports: Vec<u16> = (41_000..41_032).collect();
    let expected: Vec<String> = ports
        .iter()
        .map(|&p| table_says(&[S1, S2], p, |_| true))
        .collect();
    // The fixed ports spread over both servers (the table is a fixed function of them).
    assert!(
        expected.iter().any(|s| s == "s1") && expected.iter().any(|s| s == "s2"),
        "{expected:?}"
    );
    let first = d.start_quill_with(&["--maglev"], &[S1, S2]);
    assert!(
        d.lab.children[first].stderr().contains("Maglev table"),
        "{}",
        d.lab.children[first].stderr()
    );
    let got = flows_reach(&d.lab, &d.c.clone(), &ports, 3);
    assert_eq!(got, expected, "first Quill (servers .11, .12)");
    // Another process (a new random key: rendezvous would reshuffle), the servers reversed.
    d.lab.stop(first);
    d.start_quill_with(&["--maglev"], &[S2, S1]);
    let got = flows_reach(&d.lab, &d.c.clone(), &ports, 3);
    assert_eq!(got, expected, "second Quill (servers .12, .11)");
}

/// Server 2 answers no ARP probe at first (arp_ignore 8), so every flow goes to server 1; once it
/// answers, new flows go where the table says (half of them to server 2), but the flows Quill
/// already forwards stay on server 1 (its connection tracking), also those the table now gives
/// to server 2. When server 1 stops answering and Quill forgets it (5 s), its flows move.
#[test]
fn dsr_maglev_tracked_flow_keeps_its_server_when_a_forgotten_server_comes_back() {
    let Some(mut d) =
        dsr_lab("dsr_maglev_tracked_flow_keeps_its_server_when_a_forgotten_server_comes_back")
    else {
        return;
    };
    let [s1, s2] = d.servers.clone();
    d.lab.sysctl(&s2, "net.ipv4.conf.eth0.arp_ignore=8");
    d.start_quill_with(&["--maglev"], &[S1, S2]);
    let c = d.c.clone();
    let old: Vec<u16> = (42_000..42_032).collect();
    let got = flows_reach(&d.lab, &c, &old, 2);
    assert!(
        got.iter().all(|s| s == "s1"),
        "server 2 is not known yet: {got:?}"
    );
    // The flows whose table slot names server 2: they would move if Quill did not track them.
    let would_move: Vec<u16> = old
        .iter()
        .copied()
        .filter(|&p| table_says(&[S1, S2], p, |_| true) == "s2")
        .collect();
    assert!(!would_move.is_empty(), "no flow of the test is server 2's");

    d.lab.sysctl(&s2, "net.ipv4.conf.eth0.arp_ignore=1");
    // Probes go out every second.
    thread::sleep(Duration::from_millis(2500));
    let new: Vec<u16> = (43_000..43_032).collect();
    let expected_new: Vec<String> = new
        .iter()
        .map(|&p| table_says(&[S1, S2], p, |_| true))
        .collect();
    assert_eq!(flows_reach(&d.lab, &c, &new, 2), expected_new, "new flows");
    assert!(expected_new.iter().any(|s| s == "s2"));
    let got = flows_reach(&d.lab, &c, &old, 2);
    assert!(
        got.iter().all(|s| s == "s1"),
        "tracked flows moved when server 2 came back ({} of them are server 2's in the table): {got:?}",
        would_move.len()
    );

    // Server 1 goes silent: once forgotten, its flows (tracked or not) take the table's next
    // available server.
    d.lab.sysctl(&s1, "net.ipv4.conf.eth0.arp_ignore=8");
    thread::sleep(Duration::from_millis(6500));
    let got = flows_reach(&d.lab, &c, &old, 1);
    assert!(
        got.iter().all(|s| s == "s2"),
        "flows stayed on a forgotten server: {got:?}"
    );
}

/// `quill check ARGS`: (status code, stdout, stderr).
fn check(args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(crate::support::BIN)
        .arg("check")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// `--maglev`, the mode word (`-O maglev`) and TOML's `mode` turn the table on for a DSR
/// listener, and `quill check` says how flows choose their server, with the table's fingerprint:
/// the same for the servers in any order. Without it, weighted rendezvous.
#[test]
fn dsr_maglev_is_read_from_the_command_line_a_mode_word_and_toml_and_explained() {
    let choice = |out: &str| {
        out.lines()
            .find(|l| l.contains("a flow's server"))
            .unwrap_or_default()
            .to_string()
    };
    let fingerprint = |out: &str| {
        out.lines()
            .find(|l| l.contains("maglev table:"))
            .and_then(|l| l.split("fingerprint ").nth(1))
            .map(|f| f.split(' ').next().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    let (code, out, err) = check(&["-O", "dsr_if eth0", "10.9.0.1:80", S1, S2]);
    assert_eq!(code, Some(0), "{err}");
    assert!(choice(&out).contains("weighted rendezvous"), "{out}");
    assert!(fingerprint(&out).is_empty(), "{out}");
    let mut seen = Vec::new();
    for args in [
        vec!["-O", "dsr_if eth0", "--maglev", "10.9.0.1:80", S1, S2],
        vec!["-O", "dsr_if eth0", "-O", "maglev", "10.9.0.1:80", S2, S1],
    ] {
        let (code, out, err) = check(&args);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        assert!(choice(&out).contains("Maglev table"), "{args:?}: {out}");
        assert!(choice(&out).contains("65536 flows"), "{args:?}: {out}");
        seen.push(fingerprint(&out));
    }
    let dir = crate::support::scratch_dir();
    let path = dir.path().join("q.toml");
    std::fs::write(
        &path,
        format!("[[listener]]\nname = \"l\"\nlisten = \"10.9.0.1:80\"\ndsr_if = \"eth0\"\nmode = [\"maglev\"]\nservers = [\"{S2}\", \"{S1}\"]\n"),
    )
    .unwrap();
    let (code, out, err) = check(&["--config", &path.display().to_string()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(choice(&out).contains("Maglev table"), "{out}");
    seen.push(fingerprint(&out));
    assert!(!seen[0].is_empty(), "no fingerprint");
    assert!(
        seen.iter().all(|f| f == &seen[0]),
        "fingerprints differ: {seen:?}"
    );
}
