//! Transparent proxying (`transparent`, Pen's) and a pinned source address (`source IP`) over the
//! real binary. The transparent test builds three hosts out of network namespaces: a client
//! (10.71.1.2), Quill (10.71.1.1 towards the client, 10.71.2.1 towards the server) and a server
//! (10.71.2.2, routing the client subnet back through Quill), with the policy routing a
//! transparent set-up needs on Quill's host (the commands of docs/transparent.md); the server
//! answers each connection with the peer address it sees. The `source` test runs on loopback
//! (127.0.0.2 is a local address there). The errors need no namespace.

use crate::ctl;
use crate::netns;
use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use netns::{lab_or_skip, Lab};
use support::*;

/// A server answering each connection (at most `n`, for at most 20 s) with "PEER_IP:PORT\n".
fn peer_echo(listener: TcpListener, n: usize) -> thread::JoinHandle<()> {
    listener.set_nonblocking(true).unwrap();
    thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut served = 0;
        while served < n && Instant::now() < deadline {
            match listener.accept() {
                Ok((mut s, peer)) => {
                    s.set_nonblocking(false).unwrap();
                    let _ = s.write_all(format!("{peer}\n").as_bytes());
                    served += 1;
                }
                Err(_) => thread::sleep(Duration::from_millis(5)),
            }
        }
    })
}

fn read_peer(s: TcpStream) -> SocketAddr {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    line.trim()
        .parse()
        .unwrap_or_else(|_| panic!("server said {line:?}"))
}

/// Client, Quill and server namespaces joined by two veth pairs; Quill's host with the policy
/// routing of docs/transparent.md. Returns the lab and the three namespace names.
fn transparent_lab(test: &str) -> Option<(Lab, String, String, String)> {
    let mut lab = lab_or_skip(test)?;
    let (c, q, s) = (lab.ns("c"), lab.ns("q"), lab.ns("s"));
    lab.veth(&c, "eth0", "10.71.1.2/24", &q, "cl0", "10.71.1.1/24");
    lab.veth(&q, "sv0", "10.71.2.1/24", &s, "eth0", "10.71.2.2/24");
    lab.ip(&c, &["route", "add", "default", "via", "10.71.1.1"]);
    // The server answers the client's address through Quill.
    lab.ip(&s, &["route", "add", "10.71.1.0/24", "via", "10.71.2.1"]);
    // Quill's host: what comes back from the servers' side is delivered locally, to the socket
    // bound to the client's address.
    lab.ip(&q, &["rule", "add", "iif", "sv0", "lookup", "100"]);
    lab.ip(
        &q,
        &[
            "route",
            "add",
            "local",
            "0.0.0.0/0",
            "dev",
            "lo",
            "table",
            "100",
        ],
    );
    Some((lab, c, q, s))
}

#[test]
fn transparent_server_sees_client_address() {
    let Some((mut lab, c, q, s)) = transparent_lab("transparent_server_sees_client_address") else {
        return;
    };
    let server = lab.within(&s, || TcpListener::bind("10.71.2.2:7000").unwrap());
    let done = peer_echo(server, 3);
    let quill = lab.spawn(
        &q,
        &[BIN, "-O", "transparent", "10.71.1.1:8000", "10.71.2.2:7000"],
    );
    // The readiness probe comes from Quill's own namespace: its own address, 10.71.1.1.
    let probe = lab.wait_listening(&c, "10.71.1.1:8000".parse().unwrap(), quill);
    let seen = read_peer(probe);
    assert_eq!(seen.ip().to_string(), "10.71.1.2", "server saw {seen}");
    // Two more clients from the client namespace, one bound to a second address of its own.
    lab.ip(&c, &["addr", "add", "10.71.1.3/24", "dev", "eth0"]);
    let from3 = lab.within(&c, || {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.bind(&"10.71.1.3:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        sock.connect(&"10.71.1.1:8000".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        TcpStream::from(sock)
    });
    let local = from3.local_addr().unwrap();
    let seen = read_peer(from3);
    assert_eq!(
        seen.ip(),
        local.ip(),
        "server saw {seen}, client was {local}"
    );
    // Port 0 on purpose: the kernel picks the server connection's port (see docs/transparent.md).
    let plain = lab.within(&c, || TcpStream::connect("10.71.1.1:8000").unwrap());
    assert_eq!(read_peer(plain).ip().to_string(), "10.71.1.2");
    lab.stop(quill);
    done.join().unwrap();
}

#[test]
fn transparent_without_the_policy_routing_fails_the_connect_not_quill() {
    // Without the `ip rule` the server's answers go to the client's host, not to Quill: the
    // connect times out, the client is closed, and Quill keeps running and serving.
    let Some(mut lab) = lab_or_skip("transparent_without_the_policy_routing") else {
        return;
    };
    let (c, q, s) = (lab.ns("c"), lab.ns("q"), lab.ns("s"));
    lab.veth(&c, "eth0", "10.71.1.2/24", &q, "cl0", "10.71.1.1/24");
    lab.veth(&q, "sv0", "10.71.2.1/24", &s, "eth0", "10.71.2.2/24");
    lab.ip(&s, &["route", "add", "10.71.1.0/24", "via", "10.71.2.1"]);
    lab.sysctl(&q, "net.ipv4.ip_forward=1");
    let server = lab.within(&s, || TcpListener::bind("10.71.2.2:7000").unwrap());
    let _done = peer_echo(server, 2);
    let quill = lab.spawn(
        &q,
        &[
            BIN,
            "-t",
            "1",
            "-O",
            "transparent",
            "10.71.1.1:8000",
            "10.71.2.2:7000",
        ],
    );
    let mut probe = lab.wait_listening(&c, "10.71.1.1:8000".parse().unwrap(), quill);
    probe
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut line = String::new();
    let got = BufReader::new(&mut probe).read_line(&mut line);
    assert!(
        matches!(got, Ok(0) | Err(_)),
        "the client was served without the policy routing: {line:?}"
    );
    assert!(lab.children[quill].exited().is_none(), "quill exited");
}

#[test]
fn source_address_pins_local_address_of_server_connections() {
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    let done = peer_echo(server, 2);
    let (q, probe, _) = Quill::spawn_first(|_dir, port| {
        vec![
            "-O".into(),
            "source 127.0.0.2".into(),
            format!("127.0.0.1:{port}"),
            addr.to_string(),
        ]
    });
    assert_eq!(read_peer(probe).ip().to_string(), "127.0.0.2");
    // Every connection, not only the first.
    assert_eq!(read_peer(connect(q.addr())).ip().to_string(), "127.0.0.2");
    drop(q);
    done.join().unwrap();
}

#[test]
fn source_address_from_a_toml_listener() {
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    let done = peer_echo(server, 1);
    let (_q, probe, _) = Quill::spawn_first(|dir, port| {
        let path = dir.join("quill.toml");
        std::fs::write(
            &path,
            format!(
                "[[listener]]\nname = \"l\"\nlisten = \"127.0.0.1:{port}\"\nsource = \"127.0.0.3\"\nservers = [\"{addr}\"]\n"
            ),
        )
        .unwrap();
        vec!["--config".into(), path.display().to_string()]
    });
    assert_eq!(read_peer(probe).ip().to_string(), "127.0.0.3");
    done.join().unwrap();
}

#[test]
fn transparent_udp_server_sees_client_address() {
    let Some((mut lab, c, q, s)) = transparent_lab("transparent_udp_server_sees_client_address")
    else {
        return;
    };
    // The server answers each datagram with the address it came from.
    let server = lab.within(&s, || UdpSocket::bind("10.71.2.2:7000").unwrap());
    server
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let answering = thread::spawn(move || {
        let mut buf = [0u8; 512];
        // Bounded: at most 20 s of 50 ms waits.
        for _ in 0..400 {
            if let Ok((_, from)) = server.recv_from(&mut buf) {
                let _ = server.send_to(from.to_string().as_bytes(), from);
                if &buf[..4] == b"last" {
                    return;
                }
            }
        }
    });
    let quill = lab.spawn(
        &q,
        &[
            BIN,
            "-U",
            "-O",
            "transparent",
            "10.71.1.1:8000",
            "10.71.2.2:7000",
        ],
    );
    let client = lab.within(&c, || UdpSocket::bind("10.71.1.2:0").unwrap());
    client
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    // Quill may still be starting: ask again until it answers (bounded).
    let mut seen = None;
    for _ in 0..50 {
        client.send_to(b"last", "10.71.1.1:8000").unwrap();
        let mut buf = [0u8; 128];
        if let Ok((n, from)) = client.recv_from(&mut buf) {
            assert_eq!(from.to_string(), "10.71.1.1:8000", "the reply's source");
            seen = Some(String::from_utf8_lossy(&buf[..n]).into_owned());
            break;
        }
    }
    let seen: SocketAddr = seen
        .expect("an answer through Quill")
        .parse()
        .expect("an address");
    assert_eq!(seen.ip().to_string(), "10.71.1.2", "server saw {seen}");
    lab.stop(quill);
    answering.join().unwrap();
}

/// Runs `quill ARGS` to its end (it must exit at once); (status code, stderr).
fn run_quill(args: &[&str]) -> (Option<i32>, String) {
    let dir = scratch_dir();
    let mut q = QuillProcess::spawn_in(dir, args.iter().map(|s| s.to_string()).collect(), 0);
    let st = q
        .wait_exit(Duration::from_secs(10))
        .expect("quill did not exit");
    (st.code(), q.stderr())
}

#[test]
fn transparent_and_source_errors_name_the_setting() {
    let port = free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    for (args, expect) in [
        (
            vec!["-O", "source nowhere", &listen, "127.0.0.1:9"],
            "source: 'nowhere' is not an IP address",
        ),
        (
            vec!["-O", "source ::1", &listen, "127.0.0.1:9"],
            "is of the other address family",
        ),
        (
            vec!["-O", "source 0.0.0.0", &listen, "127.0.0.1:9"],
            "not a unicast address",
        ),
        (
            vec![
                "-O",
                "transparent",
                "-O",
                "source 127.0.0.2",
                &listen,
                "127.0.0.1:9",
            ],
            "not with transparent",
        ),
        (
            vec!["-H", "-O", "transparent", &listen, "127.0.0.1:9"],
            "transparent: applies to a TCP listener only",
        ),
    ] {
        let (code, err) = run_quill(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(expect), "{args:?}: {err}");
    }
}

#[test]
fn transparent_in_toml_on_an_http_listener_is_refused() {
    let dir = scratch_dir();
    let path = dir.path().join("q.toml");
    std::fs::write(
        &path,
        format!(
            "[[listener]]\nname = \"web\"\nprotocol = \"http\"\nlisten = \"127.0.0.1:{}\"\ntransparent = true\nservers = [\"127.0.0.1:9\"]\n",
            free_port()
        ),
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["check", "--config", &path.display().to_string()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("listener 'web': transparent: applies to a TCP listener only"),
        "{err}"
    );
}

#[test]
fn transparent_without_the_capability_stops_at_start() {
    if !running_as_root() {
        println!("skipped: transparent_without_the_capability_stops_at_start: needs root to drop to nobody");
        return;
    }
    let listen = format!("127.0.0.1:{}", free_port());
    let (code, err) = run_quill(&["-u", "nobody", "-O", "transparent", &listen, "127.0.0.1:9"]);
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("transparent") && err.contains("CAP_NET_ADMIN"),
        "{err}"
    );
}

#[test]
fn transparent_server_sees_client_ipv6_address() {
    let Some(mut lab) = lab_or_skip("transparent_server_sees_client_ipv6_address") else {
        return;
    };
    let (c, q, s) = (lab.ns("c"), lab.ns("q"), lab.ns("s"));
    lab.veth(&c, "eth0", "", &q, "cl0", "");
    lab.veth(&q, "sv0", "", &s, "eth0", "");
    for (ns, ifname, addr) in [
        (&c, "eth0", "fd00:71:1::2/64"),
        (&q, "cl0", "fd00:71:1::1/64"),
        (&q, "sv0", "fd00:71:2::1/64"),
        (&s, "eth0", "fd00:71:2::2/64"),
    ] {
        lab.ip(ns, &["-6", "addr", "add", addr, "dev", ifname, "nodad"]);
    }
    lab.ip(
        &c,
        &["-6", "route", "add", "default", "via", "fd00:71:1::1"],
    );
    lab.ip(
        &s,
        &[
            "-6",
            "route",
            "add",
            "fd00:71:1::/64",
            "via",
            "fd00:71:2::1",
        ],
    );
    lab.ip(&q, &["-6", "rule", "add", "iif", "sv0", "lookup", "100"]);
    lab.ip(
        &q,
        &[
            "-6", "route", "add", "local", "::/0", "dev", "lo", "table", "100",
        ],
    );
    let server = lab.within(&s, || TcpListener::bind("[fd00:71:2::2]:7000").unwrap());
    let done = peer_echo(server, 2);
    let quill = lab.spawn(
        &q,
        &[
            BIN,
            "-O",
            "transparent",
            "[fd00:71:1::1]:8000",
            "[fd00:71:2::2]:7000",
        ],
    );
    let probe = lab.wait_listening(&c, "[fd00:71:1::1]:8000".parse().unwrap(), quill);
    assert_eq!(read_peer(probe).ip().to_string(), "fd00:71:1::2");
    let again = lab.within(&c, || TcpStream::connect("[fd00:71:1::1]:8000").unwrap());
    assert_eq!(read_peer(again).ip().to_string(), "fd00:71:1::2");
    lab.stop(quill);
    done.join().unwrap();
}

#[test]
fn health_checks_leave_from_the_source_address() {
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    server.set_nonblocking(true).unwrap();
    let port = free_port();
    let dir = scratch_dir();
    let _q = QuillProcess::spawn_in(
        dir,
        vec![
            "--check".into(),
            "tcp".into(),
            "--check-interval".into(),
            "100ms".into(),
            "-O".into(),
            "source 127.0.0.4".into(),
            format!("127.0.0.1:{port}"),
            addr.to_string(),
        ],
        port,
    );
    // No client: every connection the server sees is a probe.
    let mut peers = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while peers.len() < 3 && Instant::now() < deadline {
        match server.accept() {
            Ok((_, peer)) => peers.push(peer.ip().to_string()),
            Err(_) => thread::sleep(Duration::from_millis(10)),
        }
    }
    assert!(peers.len() >= 3, "only {} probes arrived", peers.len());
    assert!(peers.iter().all(|p| p == "127.0.0.4"), "{peers:?}");
}

#[test]
fn source_is_a_control_command_and_dsr_if_is_refused_at_run_time() {
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    // The readiness probe, then one connection per setting.
    let done = peer_echo(server, 3);
    let (q, sock) = ctl::start_ctl(&[], &[addr.to_string()]);
    ctl::ctl_ok(&sock, "source 127.0.0.5");
    assert_eq!(ctl::ctl(&sock, "source").trim(), "127.0.0.5");
    assert_eq!(read_peer(connect(q.addr())).ip().to_string(), "127.0.0.5");
    ctl::ctl_ok(&sock, "no source");
    assert_eq!(read_peer(connect(q.addr())).ip().to_string(), "127.0.0.1");
    ctl::ctl_err(&sock, "source ::1", "other address family");
    // Refused: a running proxy does not become a frame forwarder.
    ctl::ctl_err(&sock, "dsr_if eth0", "dsr_if: ");
    done.join().unwrap();
}

#[test]
fn toml_source_and_dsr_ip_errors_name_the_key_and_line() {
    let dir = scratch_dir();
    for (key, expect) in [
        (
            "source = \"nowhere\"",
            "q.toml:4: source: 'nowhere' is not an IP address",
        ),
        (
            "dsr_if = \"eth0\"\ndsr_ip = \"::1\"",
            "q.toml:5: dsr_ip: '::1' is not an IPv4 address",
        ),
    ] {
        let path = dir.path().join("q.toml");
        std::fs::write(
            &path,
            format!("[[listener]]\nname = \"l\"\nlisten = \"10.9.0.1:80\"\n{key}\nservers = [\"10.9.0.2:80\"]\n"),
        )
        .unwrap();
        let out = Command::new(BIN)
            .args(["check", "--config", &path.display().to_string()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(expect), "{err}");
    }
}
