//! Server selection: round robin, tracking, hash, weight, prio, MAXCONN, leastconn, p2c.
//! Backends are Greet servers, so the first line a client reads names the backend that serves it.

use crate::support;

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::time::Duration;
use support::*;

fn greeters(names: &[&str]) -> Vec<DemoServer> {
    names.iter().map(|n| greet(n)).collect()
}

fn specs(servers: &[DemoServer]) -> Vec<String> {
    servers.iter().map(|s| spec(s.addr())).collect()
}

/// Opens `n` sessions one after the other and keeps them open; returns (names, streams).
fn hold_sessions(port: u16, n: usize) -> (Vec<String>, Vec<TcpStream>) {
    let mut names = Vec::new();
    let mut held = Vec::new();
    for _ in 0..n {
        let (name, s) = greet_session(port);
        names.push(name);
        held.push(s);
    }
    (names, held)
}

fn count(names: &[String], name: &str) -> usize {
    names.iter().filter(|n| *n == name).count()
}

#[test]
fn roundrobin_gives_each_server_exactly_its_share() {
    let b = greeters(&["a", "b", "c"]);
    let q = Quill::start(&["-r", "--workers", "2"], &specs(&b));
    let names: Vec<String> = (0..30).map(|_| greet_name(q.port)).collect();
    let t = tally(&names);
    let want: BTreeMap<String, usize> = [
        ("a".to_string(), 10),
        ("b".to_string(), 10),
        ("c".to_string(), 10),
    ]
    .into();
    assert_eq!(
        t, want,
        "30 sequential clients over 3 servers with -r: {names:?}"
    );
}

#[test]
fn tracking_sends_a_client_back_to_its_last_server() {
    let b = greeters(&["a", "b", "c"]);
    let q = Quill::start(&["--workers", "2"], &specs(&b));
    let names: Vec<String> = (0..20).map(|_| greet_name(q.port)).collect();
    let first = names[0].clone();
    assert!(
        ["a", "b", "c"].contains(&first.as_str()),
        "unexpected backend {first}"
    );
    assert!(
        names.iter().all(|n| *n == first),
        "without -r all clients from 127.0.0.1 go to one server: {names:?}"
    );
}

#[test]
fn hash_mode_is_consistent_for_the_same_client() {
    let b = greeters(&["a", "b", "c"]);
    let q = Quill::start(&["-h", "--workers", "2"], &specs(&b));
    let names: Vec<String> = (0..20).map(|_| greet_name(q.port)).collect();
    assert!(
        names.iter().all(|n| *n == names[0]),
        "-h: the same client address maps to one server: {names:?}"
    );
}

#[test]
fn hash_with_roundrobin_hashes_address_and_port() {
    let b = greeters(&["a", "b", "c"]);
    let q = Quill::start(&["-h", "-r", "--workers", "2"], &specs(&b));
    let names: Vec<String> = (0..30).map(|_| greet_name(q.port)).collect();
    let t = tally(&names);
    assert!(
        t.len() >= 2,
        "-h -r hashes the client port too, so 30 clients should reach more than one server: {t:?}"
    );
}

#[test]
fn weight_zero_server_is_never_chosen() {
    let b = greeters(&["a", "zero", "c"]);
    let servers = vec![
        spec_full(b[0].addr(), 0, 0, 1, 0),
        spec_full(b[1].addr(), 0, 0, 0, 0),
        spec_full(b[2].addr(), 0, 0, 1, 0),
    ];
    let q = Quill::start(&["-r", "-W", "--workers", "2"], &servers);
    // Held, then sequential: both must avoid the weight-0 server. Held first, from no sessions:
    // the sequential clients' sessions end in Quill a little after the clients close, and one
    // still counted would tilt the 3/3 share of the held ones (it did under load).
    let (held, _streams) = hold_sessions(q.port, 6);
    assert_eq!(count(&held, "zero"), 0, "weight 0 server chosen: {held:?}");
    assert_eq!(
        count(&held, "a"),
        3,
        "equal weights share held sessions: {held:?}"
    );
    assert_eq!(
        count(&held, "c"),
        3,
        "equal weights share held sessions: {held:?}"
    );
    let seq: Vec<String> = (0..12).map(|_| greet_name(q.port)).collect();
    assert_eq!(count(&seq, "zero"), 0, "weight 0 server chosen: {seq:?}");
}

#[test]
fn weight_mode_balances_held_sessions_by_weight() {
    let b = greeters(&["heavy", "light"]);
    let servers = vec![
        spec_full(b[0].addr(), 0, 0, 3, 0),
        spec_full(b[1].addr(), 0, 0, 1, 0),
    ];
    let q = Quill::start(&["-r", "-W", "--workers", "2"], &servers);
    let (names, _held) = hold_sessions(q.port, 8);
    assert_eq!(
        count(&names, "heavy"),
        6,
        "weight 3 vs 1 over 8 held sessions: {names:?}"
    );
    assert_eq!(
        count(&names, "light"),
        2,
        "weight 3 vs 1 over 8 held sessions: {names:?}"
    );
}

#[test]
fn prio_sends_all_to_lowest_prio_then_next_when_it_is_dead() {
    let hi = greet("prio-1");
    let top = greet("prio-0");
    let low = greet("prio-2");
    let servers = vec![
        spec_full(hi.addr(), 0, 0, 1, 1),
        spec_full(top.addr(), 0, 0, 1, 0),
        spec_full(low.addr(), 0, 0, 1, 2),
    ];
    let q = Quill::start(
        &["-r", "-O", "prio", "-b", "30", "--workers", "2"],
        &servers,
    );
    for i in 0..8 {
        let (name, mut s) = greet_session(q.port);
        assert_eq!(
            name, "prio-0",
            "client {i}: all clients go to the lowest prio value"
        );
        echo_roundtrip(&mut s, b"x");
    }
    // Kill the prio-0 server: clients now go to the next prio (prio-1), never prio-2.
    let top_addr = top.addr();
    drop(top);
    wait_refused(top_addr, Duration::from_secs(5));
    // The first client after the death is failed over "to the next servers in order" (list
    // order, per the contract), so it may land on any live server; once prio-0 is blacklisted,
    // selection picks the next prio.
    let (first, mut s) = greet_session(q.port);
    assert!(
        first == "prio-1" || first == "prio-2",
        "failed-over client served by {first}"
    );
    echo_roundtrip(&mut s, b"y");
    for i in 0..8 {
        let (name, mut s) = greet_session(q.port);
        assert_eq!(
            name, "prio-1",
            "client {i} after prio-0 was blacklisted should go to prio 1"
        );
        echo_roundtrip(&mut s, b"y");
    }
}

#[test]
fn maxconn_soft_limit_sends_next_client_elsewhere() {
    let b = greeters(&["one", "many"]);
    let servers = vec![format!("{}:1", b[0].addr()), spec(b[1].addr())];
    let q = Quill::start(&["-r", "--workers", "2"], &servers);
    let (names, held) = hold_sessions(q.port, 4);
    assert_eq!(
        count(&names, "one"),
        1,
        "server with MAXCONN 1 holds exactly one of 4 open sessions: {names:?}"
    );
    assert_eq!(count(&names, "many"), 3, "{names:?}");
    // Close everything; once the sessions are gone, "one" serves again.
    let before = q.log_lines().len();
    drop(held);
    q.wait_log_lines(before + 4, Duration::from_secs(5));
    let again: Vec<String> = (0..4).map(|_| greet_name(q.port)).collect();
    assert!(
        again.iter().any(|n| n == "one"),
        "after its session closed, the MAXCONN 1 server is available again: {again:?}"
    );
}

#[test]
fn prio_with_maxconn_overflows_to_next_prio() {
    let top = greet("top");
    let next = greet("next");
    let servers = vec![
        spec_full(next.addr(), 0, 0, 1, 1),
        format!("{}:1:0:1:0", top.addr()),
    ];
    let q = Quill::start(&["-r", "-O", "prio", "--workers", "2"], &servers);
    let (a, _sa) = greet_session(q.port);
    assert_eq!(a, "top", "first client goes to the prio 0 server");
    let (b, _sb) = greet_session(q.port);
    assert_eq!(
        b, "next",
        "prio 0 server is at MAXCONN 1: the next client goes to the next prio"
    );
}

#[test]
fn leastconn_picks_the_least_loaded_server() {
    let b = greeters(&["a", "b", "c"]);
    let q = Quill::start(&["-r", "-O", "leastconn", "--workers", "2"], &specs(&b));
    let (names, held) = hold_sessions(q.port, 9);
    let t = tally(&names);
    for n in ["a", "b", "c"] {
        assert_eq!(
            t.get(n),
            Some(&3),
            "leastconn: 9 held sessions over 3 servers: {names:?}"
        );
    }
    // Close the three sessions on "a": the next three clients all go to "a".
    let before = q.log_lines().len();
    let mut keep = Vec::new();
    for (name, s) in names.iter().zip(held) {
        if name != "a" {
            keep.push(s);
        }
    }
    q.wait_log_lines(before + 3, Duration::from_secs(5));
    let (next, _more) = hold_sessions(q.port, 3);
    assert_eq!(
        next,
        vec!["a", "a", "a"],
        "leastconn: new clients go to the now-empty server"
    );
    drop(keep);
}

#[test]
fn p2c_distributes_held_sessions() {
    let b = greeters(&["a", "b", "c"]);
    let q = Quill::start(&["-r", "-O", "p2c", "--workers", "2"], &specs(&b));
    let (names, _held) = hold_sessions(q.port, 12);
    let t = tally(&names);
    // Power of two choices never piles everything on one server; with 12 sessions over 3 servers
    // every server gets some (the chance of one getting none is below 1e-4).
    assert_eq!(t.len(), 3, "p2c should use all three servers: {names:?}");
    assert!(
        t.values().all(|&n| n <= 8),
        "p2c should not pile sessions on one server: {t:?}"
    );
}

#[test]
fn roundrobin_skips_a_dead_server_so_others_share_evenly() {
    let b = greeters(&["a", "b"]);
    let dead = refused_addr();
    let servers = vec![spec(b[0].addr()), spec(dead), spec(b[1].addr())];
    let q = Quill::start(&["-r", "-b", "30", "--workers", "2"], &servers);
    let names: Vec<String> = (0..20).map(|_| greet_name(q.port)).collect();
    let t = tally(&names);
    assert_eq!(t.len(), 2, "{names:?}");
    // The dead server's share goes to the others; after the failover they alternate.
    let (a, bb) = (count(&names, "a"), count(&names, "b"));
    assert!(
        a.abs_diff(bb) <= 2,
        "a={a} b={bb} should share evenly: {names:?}"
    );
}

/// The servers' specs as listed, and in the opposite order.
fn both_orders(servers: &[DemoServer]) -> (Vec<String>, Vec<String>) {
    let forward = specs(servers);
    let mut reversed = forward.clone();
    reversed.reverse();
    (forward, reversed)
}

/// The backend each of `clients` loopback source addresses (127.1.X.Y) reaches through `port`.
fn picks_from_many_addresses(port: u16, clients: u32) -> Vec<String> {
    let dst = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    (0..clients)
        .map(|i| {
            let src = std::net::IpAddr::from([127, 1, (i / 200) as u8, (i % 200 + 2) as u8]);
            crate::ctl::greet_from(src, dst).unwrap_or_else(|| panic!("no greeting for {src}"))
        })
        .collect()
}

#[test]
fn maglev_quills_agree_on_each_client_whatever_order_their_servers_are_listed_in() {
    // Two processes with the same four servers listed in opposite orders, and a third without
    // one of them: each of 300 client addresses reaches the same server through the first two,
    // and through the third unless its server is the one left out (Maglev moves a little more
    // than the removed server's share: about 0.06% of keys here, so at most a few of 300).
    const CLIENTS: u32 = 300;
    let b = greeters(&["a", "b", "c", "d"]);
    let (forward, reversed) = both_orders(&b);
    let q1 = Quill::start(&["--maglev", "--workers", "2"], &forward);
    let q2 = Quill::start(&["--maglev", "--workers", "1"], &reversed);
    let q3 = Quill::start(&["--maglev", "--workers", "2"], &forward[..3]);
    let one = picks_from_many_addresses(q1.port, CLIENTS);
    let two = picks_from_many_addresses(q2.port, CLIENTS);
    assert_eq!(one, two, "the same client address, another server");
    let t = tally(&one);
    for name in ["a", "b", "c", "d"] {
        let n = t.get(name).copied().unwrap_or(0);
        assert!(
            n >= CLIENTS as usize / 8,
            "{name} got {n} of {CLIENTS} clients: {t:?}"
        );
    }
    // Client tracking is off: the same address goes back to its server, whatever came between.
    assert_eq!(picks_from_many_addresses(q1.port, CLIENTS), one);
    let three = picks_from_many_addresses(q3.port, CLIENTS);
    let moved = one
        .iter()
        .zip(&three)
        .filter(|(was, now)| was.as_str() != "d" && was != now)
        .count();
    assert!(
        moved <= 3,
        "{moved} clients of a, b and c moved when d left"
    );
    assert!(three.iter().all(|n| n != "d"));
}

#[test]
fn maglev_tables_show_the_same_fingerprint_on_every_quill_with_the_same_servers() {
    use crate::admin_support::{metrics, start_pen_with_admin};
    let b = greeters(&["a", "b", "c"]);
    let (forward, reversed) = both_orders(&b);
    let fingerprint = |servers: &[String]| {
        let (_q, admin) = start_pen_with_admin(&["--maglev"], servers);
        let m = metrics(admin);
        let f = m.family("quill_hash_table_info");
        assert_eq!(f.samples.len(), 1, "{}", m.text);
        let s = &f.samples[0];
        assert_eq!(s.labels["size"], "65537");
        assert_eq!(s.labels["prio"], "0");
        s.labels["fingerprint"].clone()
    };
    let one = fingerprint(&forward);
    assert_eq!(one.len(), 16, "{one}");
    assert_eq!(fingerprint(&reversed), one);
    assert_ne!(
        fingerprint(&forward[..2]),
        one,
        "another server set, another table"
    );
}

#[test]
fn quill_ctl_hash_tells_the_fingerprint_every_quill_with_the_same_servers_shares() {
    use crate::ctl::{ctl, start_ctl};
    let b = greeters(&["a", "b", "c"]);
    let (forward, reversed) = both_orders(&b);
    let (_q1, s1) = start_ctl(&["--maglev"], &forward);
    let (_q2, s2) = start_ctl(&["--maglev", "-O", "prio"], &reversed);
    let one = ctl(&s1, "hash table");
    let words: Vec<&str> = one.split_whitespace().collect();
    assert_eq!(words.len(), 6, "{one}");
    assert_eq!(
        &words[..5],
        ["prio", "0", "size", "65537", "fingerprint"],
        "{one}"
    );
    assert!(
        words[5].len() == 16 && words[5].bytes().all(|b| b.is_ascii_hexdigit()),
        "{one}"
    );
    // Every server at priority 0: with prio, one level, the same table.
    assert_eq!(ctl(&s2, "hash table"), one);
    // `quill check` computes the same table from the same servers, in any order.
    let mut args = vec!["check", "--maglev", "8080"];
    args.extend(reversed.iter().map(String::as_str));
    let (code, out, err) = run_quill_output(&args);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "maglev table: prio 0, 65537 slots, fingerprint {}",
            words[5]
        )),
        "{out}"
    );
    let (_q3, s3) = start_ctl(&["-r"], &forward);
    assert!(ctl(&s3, "hash table").contains("no Maglev table"));
}

#[test]
fn maglev_http_listeners_agree_on_each_client_whatever_order_their_servers_are_listed_in() {
    // HTTP mode picks a server per request through the same table: two Quills -H with the
    // servers in opposite orders answer each of 100 client addresses from the same backend.
    use std::io::{Read, Write};
    let b: Vec<DemoServer> = ["a", "b", "c"].iter().map(|n| http(n)).collect();
    let (forward, reversed) = both_orders(&b);
    // Started without `settle`: on an HTTP listener the readiness probe, which sends nothing,
    // writes no access log line to wait for (5 s each).
    let start = |opts: &[&str], servers: &[String]| {
        let (q, probe, _) = Quill::spawn_first(|dir, port| pen_args(dir, port, opts, servers));
        drop(probe);
        q
    };
    let q1 = start(&["-H", "--maglev", "--workers", "2"], &forward);
    let q2 = start(&["-H", "--maglev", "--workers", "1"], &reversed);
    let body_from = |src: std::net::IpAddr, port: u16| {
        let dst = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let mut s = crate::ctl::connect_from(src, dst).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        text.rsplit("\r\n\r\n")
            .next()
            .unwrap_or("")
            .trim()
            .to_string()
    };
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..100u8 {
        let src = std::net::IpAddr::from([127, 3, 0, i + 1]);
        let one = body_from(src, q1.port);
        assert_eq!(one, body_from(src, q2.port), "client {src}");
        seen.insert(one);
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
}

/// Three processes, each with the four servers in another order in a TOML file, show one table;
/// each reloads its file with the order changed again (and one weight changed, then changed back)
/// and the table follows: the same fingerprint everywhere after every step, another one while the
/// weight differs.
#[test]
fn maglev_three_quills_keep_one_table_across_reloads_in_any_order() {
    use crate::ctl::{ctl, ctl_ok, wait_ctl};
    let b = greeters(&["a", "b", "c", "d"]);
    let list = specs(&b);
    let order = |rot: usize, weight_of_first: u32| {
        let mut v: Vec<String> = list
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let w = if i == 0 { weight_of_first } else { 1 };
                format!("{{ address = \"{s}\", weight = {w} }}")
            })
            .collect();
        v.rotate_left(rot % 4);
        if rot % 2 == 1 {
            v.reverse();
        }
        v.join(", ")
    };
    let write = |dir: &std::path::Path, port: u16, servers: &str| {
        std::fs::write(
            dir.join("q.toml"),
            format!(
                "control = \"{}\"\n[[listener]]\nname = \"m\"\nlisten = \"127.0.0.1:{port}\"\nmode = [\"maglev\"]\nservers = [{servers}]\n",
                dir.join("ctl.sock").display()
            ),
        )
        .unwrap();
    };
    let quills: Vec<QuillProcess> = (0..3)
        .map(|k| {
            // No access log: nothing to settle, the readiness probe is simply closed.
            Quill::spawn_first(|dir, port| {
                write(dir, port, &order(k, 1));
                vec!["--config".into(), dir.join("q.toml").display().to_string()]
            })
            .0
        })
        .collect();
    let table = |q: &QuillProcess| {
        let sock = q.path("ctl.sock");
        wait_ctl(q, &sock);
        ctl(&sock, "hash table")
    };
    let first = table(&quills[0]);
    assert!(first.contains("fingerprint"), "{first}");
    for q in &quills {
        assert_eq!(table(q), first);
    }
    for (step, weight) in [(1usize, 1u32), (2, 3), (3, 1)] {
        for (k, q) in quills.iter().enumerate() {
            write(q.dir.path(), q.port, &order(k + step, weight));
            ctl_ok(&q.path("ctl.sock"), "reload");
        }
        let now = table(&quills[0]);
        for q in &quills {
            assert_eq!(table(q), now, "step {step}");
        }
        assert_eq!(
            now == first,
            weight == 1,
            "step {step}: {now} against {first}"
        );
    }
}
