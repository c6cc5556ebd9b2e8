//! Pen's access control lists over the real binary: `acl N permit|deny ...` with `client_acl`
//! (denied clients are closed, or sent to the abuse server `-B`), per-server `server N acl A`,
//! CIDR, dotted masks and IPv6 entries, Pen's "no match: the opposite of the last entry" rule,
//! `no acl N`, and ACLs from a TOML file. Clients come from 127.0.0.1 and 127.0.0.2 (a client
//! socket bound to 127.0.0.2 before connecting), and from ::1.

use crate::ctl;
use crate::support;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use ctl::*;
use support::*;

fn v4(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// Whether a client from `src` is served (gets the Greet line) by Quill at `dst`.
fn served(src: IpAddr, dst: SocketAddr) -> bool {
    greet_from(src, dst).is_some()
}

/// For each last byte `i`, whether a client from 127.0.0.i is served.
fn served_from(last: &[u8], dst: SocketAddr) -> Vec<bool> {
    last.iter().map(|&i| served(v4(i), dst)).collect()
}

#[test]
fn client_acl_closes_a_denied_client_and_serves_others() {
    let a = greet("a");
    let (q, sock) = start_ctl(&[], &[spec(a.addr())]);
    ctl_ok(&sock, "acl 1 deny 127.0.0.2");
    assert_eq!(ctl(&sock, "acl 1"), "deny 127.0.0.2/32\n");
    // A list that no client_acl names changes nothing.
    assert!(served(v4(2), q.addr()));
    ctl_ok(&sock, "client_acl 1");
    assert_eq!(ctl(&sock, "client_acl"), "1\n");
    let mut denied = connect_from(v4(2), q.addr()).unwrap();
    let (data, _) = wait_closed(&mut denied, Duration::from_secs(5));
    assert!(data.is_empty(), "denied client got {data:?}");
    let line = wait_log_line(&q.log_path(), Duration::from_secs(5), |l| l.end == "denied");
    assert_eq!(
        (line.client.as_str(), line.server.as_str()),
        ("127.0.0.2", "-"),
        "{line:?}"
    );
    assert_eq!(greet_from(v4(1), q.addr()).as_deref(), Some("a"));
    ctl_ok(&sock, "no client_acl");
    assert_eq!(ctl(&sock, "client_acl"), "none\n");
    assert!(served(v4(2), q.addr()));
}

#[test]
fn denied_client_reaches_the_abuse_server_instead() {
    let (a, abuse) = (greet("a"), greet("abuse"));
    let b = abuse.addr().to_string();
    let (q, sock) = start_ctl(
        &["-B", &b, "-O", "acl 1 deny 127.0.0.2", "-O", "client_acl 1"],
        &[spec(a.addr())],
    );
    assert_eq!(greet_from(v4(2), q.addr()).as_deref(), Some("abuse"));
    assert_eq!(greet_from(v4(1), q.addr()).as_deref(), Some("a"));
    // The abuse server is not one of the pool's servers.
    assert_eq!(ctl(&sock, "servers").lines().count(), 1);
}

#[test]
fn cidr_and_dotted_mask_entries_match_their_networks() {
    let a = greet("a");
    let (q, sock) = start_ctl(&["-O", "client_acl 1"], &[spec(a.addr())]);
    // 127.0.0.2/31 covers .2 and .3; the list ends in deny, so the rest is permitted.
    ctl_ok(&sock, "acl 1 deny 127.0.0.2/31");
    let got = served_from(&[1, 2, 3, 4], q.addr());
    assert_eq!(got, [true, false, false, true]);
    // A dotted mask: 255.255.255.252 covers .4 to .7.
    ctl_ok(&sock, "no acl 1");
    ctl_ok(&sock, "acl 1 deny 127.0.0.4 255.255.255.252");
    assert_eq!(ctl(&sock, "acl 1"), "deny 127.0.0.4/30\n");
    let got = served_from(&[3, 4, 7, 8], q.addr());
    assert_eq!(got, [true, false, false, true]);
    ctl_err(&sock, "acl 1 deny 127.0.0.0 255.0.255.0", "contiguous");
    ctl_err(&sock, "acl 1 deny 127.0.0.0/33", "/33");
    ctl_err(&sock, "acl 10 deny 127.0.0.1", "'10'");
    ctl_err(&sock, "acl 1 allow 127.0.0.1", "allow");
}

#[test]
fn no_match_is_the_opposite_of_the_last_entry_and_no_acl_clears_the_list() {
    let a = greet("a");
    let (q, sock) = start_ctl(&["-O", "client_acl 2"], &[spec(a.addr())]);
    // First match wins: .2 is denied before the permit for 127.0.0.0/29 is reached.
    ctl_ok(&sock, "acl 2 deny 127.0.0.2");
    ctl_ok(&sock, "acl 2 permit 127.0.0.0/29");
    assert_eq!(
        ctl(&sock, "acl 2"),
        "deny 127.0.0.2/32\npermit 127.0.0.0/29\n"
    );
    // The last entry permits, so an address no entry matches (.9) is denied.
    let got = served_from(&[1, 2, 3, 9], q.addr());
    assert_eq!(got, [true, false, true, false]);
    // An empty list permits everyone.
    ctl_ok(&sock, "no acl 2");
    assert_eq!(ctl(&sock, "acl 2"), "\n");
    let got = served_from(&[1, 2, 9], q.addr());
    assert_eq!(got, [true, true, true]);
}

#[test]
fn ipv6_entries_match_ipv6_clients() {
    let Some(_) = free_port_v6() else {
        eprintln!("skipped: ::1 is not usable here");
        return;
    };
    let a = greet("a");
    let (q, probe, _) = Quill::spawn_first_at(IpAddr::V6(Ipv6Addr::LOCALHOST), |dir, port| {
        let c = dir.join("ctl.sock").display().to_string();
        vec![
            "-C".into(),
            c,
            "-O".into(),
            "client_acl 3".into(),
            "-l".into(),
            dir.join("access.log").display().to_string(),
            format!("[::1]:{port}"),
            spec(a.addr()),
        ]
    });
    drop(probe);
    let sock = q.path("ctl.sock");
    wait_ctl(&q, &sock);
    let one = IpAddr::V6(Ipv6Addr::LOCALHOST);
    assert!(served(one, q.addr()));
    ctl_ok(&sock, "acl 3 deny ::1");
    assert_eq!(ctl(&sock, "acl 3"), "deny ::1/128\n");
    assert!(!served(one, q.addr()));
    ctl_ok(&sock, "no acl 3");
    ctl_ok(&sock, "acl 3 permit ::/127");
    assert!(served(one, q.addr()));
    ctl_ok(&sock, "no acl 3");
    ctl_ok(&sock, "acl 3 permit 2001:db8::/32");
    assert!(
        !served(one, q.addr()),
        "the list ends in permit: others are denied"
    );
    ctl_err(&sock, "acl 3 permit ::1 64", "64");
}

#[test]
fn acl_and_client_acl_from_a_toml_file() {
    let a = greet("a");
    let q = Quill::start_with(|dir, port| {
        let cfg = format!(
            r#"log = "{log}"

[acl]
4 = ["deny 127.0.0.2", "deny 127.0.0.3"]

[[listener]]
name = "web"
listen = "127.0.0.1:{port}"
client_acl = 4
servers = ["{a}"]
"#,
            log = dir.join("access.log").display(),
            a = a.addr(),
        );
        let path = dir.join("quill.toml");
        std::fs::write(&path, cfg).unwrap();
        vec!["--config".into(), path.display().to_string()]
    });
    let got = served_from(&[1, 2, 3, 4], q.addr());
    assert_eq!(got, [true, false, false, true]);
    wait_log_line(&q.log_path(), Duration::from_secs(5), |l| {
        l.client == "127.0.0.3" && l.end == "denied"
    });
}

#[test]
fn acl_errors_in_a_toml_file_name_file_and_line() {
    let dir = scratch_dir();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[acl]\n4 = [\"deny 127.0.0.300\"]\n\n[[listener]]\nname = \"w\"\nlisten = \"127.0.0.1:1\"\nservers = [\"127.0.0.1:9\"]\n",
    )
    .unwrap();
    let (code, _, err) = run_quill_output(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    let first = first_line(&err);
    assert!(
        first.contains(&format!("{}:2:", path.display())) && first.contains("127.0.0.300"),
        "{first}"
    );
}

#[test]
fn server_acl_keeps_denied_clients_off_that_server() {
    let (a, b) = (greet("a"), greet("b"));
    let (q, sock) = start_ctl(&["-r"], &[spec(a.addr()), spec(b.addr())]);
    ctl_ok(&sock, "acl 5 deny 127.0.0.2");
    ctl_ok(&sock, "server 0 acl 5");
    let servers = ctl(&sock, "json servers");
    let v: serde_json::Value = serde_json::from_str(servers.trim()).unwrap();
    assert_eq!(v[0]["acl"], 5);
    let from2: Vec<String> = (0..4).filter_map(|_| greet_from(v4(2), q.addr())).collect();
    assert_eq!(from2, ["b", "b", "b", "b"]);
    let from1: Vec<String> = (0..4).filter_map(|_| greet_from(v4(1), q.addr())).collect();
    assert_eq!(tally(&from1).get("a"), Some(&2), "{from1:?}");
    ctl_ok(&sock, "server 0 acl none");
    let from2: Vec<String> = (0..4).filter_map(|_| greet_from(v4(2), q.addr())).collect();
    assert_eq!(tally(&from2).get("a"), Some(&2), "{from2:?}");
}
