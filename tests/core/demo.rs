//! `quill demo`: prints what to try, serves three HTTP demo backends in rotation.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;
use support::*;

fn get_root(port: u16) -> String {
    let mut s = connect_port(port);
    write_all(
        &mut s,
        b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    );
    let raw = read_until_eof(&mut s, Duration::from_secs(10));
    let text = String::from_utf8_lossy(&raw).into_owned();
    assert!(text.starts_with("HTTP/1.1 200"), "demo response: {text:?}");
    let (_, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end: {text:?}"));
    body.to_string()
}

#[test]
fn demo_prints_curl_hint_and_rotates_three_backends() {
    let (q, out) = start_demo();
    assert!(
        out.contains("curl"),
        "demo should print what to try (a curl command) on stdout:\n{out}"
    );
    // The printed control socket answers `listener demo servers` with the three backends.
    let sock = out
        .split_whitespace()
        .skip_while(|w| *w != "--socket")
        .nth(1)
        .unwrap_or_else(|| panic!("no control socket in the demo's hints:\n{out}"))
        .to_string();
    let servers = std::process::Command::new(env!("CARGO_BIN_EXE_quill"))
        .args(["ctl", "--socket", &sock, "listener", "demo", "servers"])
        .output()
        .expect("run quill ctl");
    let listing = String::from_utf8_lossy(&servers.stdout);
    assert_eq!(listing.lines().count(), 3, "{listing}");
    let bodies: Vec<String> = (0..3).map(|_| get_root(q.port)).collect();
    let set: BTreeSet<&str> = bodies.iter().map(|b| b.as_str()).collect();
    let want: BTreeSet<&str> = ["demo-1\n", "demo-2\n", "demo-3\n"].into();
    assert_eq!(
        set, want,
        "three successive GET / should show demo-1, demo-2 and demo-3: {bodies:?}"
    );
    // The process is killed (not stopped) when the test ends: its socket file is ours to remove.
    let _ = std::fs::remove_file(&sock);
}

/// One response from a kept-alive connection: head and Content-Length body.
fn read_one(s: &mut std::net::TcpStream) -> String {
    use std::io::Read;
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    for _ in 0..1000 {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if raw.len() >= end + 4 + len {
                return String::from_utf8_lossy(&raw[..end + 4 + len]).into_owned();
            }
        }
        let n = s
            .read(&mut buf)
            .expect("read from the demo's HTTP listener");
        assert!(
            n > 0,
            "connection closed: {:?}",
            String::from_utf8_lossy(&raw)
        );
        raw.extend_from_slice(&buf[..n]);
    }
    panic!("no whole response");
}

#[test]
fn demo_http_listener_routes_api_and_keeps_connections_alive() {
    let (_q, out) = start_demo();
    let addr = out
        .lines()
        .find_map(|l| l.strip_prefix("And HTTP mode (a reverse proxy with routes) on http://"))
        .and_then(|rest| rest.strip_suffix("/:"))
        .unwrap_or_else(|| panic!("no HTTP listener in the demo's hints:\n{out}"))
        .to_string();
    // The demo's listeners are bound one after the other: the first one accepting (what
    // `start_demo` waits for) does not mean the HTTP one already listens. Bounded wait: 5 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut s = loop {
        match std::net::TcpStream::connect(&addr) {
            Ok(s) => break s,
            Err(e) if std::time::Instant::now() >= deadline => {
                panic!("connect to the HTTP listener: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let ask = |s: &mut std::net::TcpStream, path: &str| {
        let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
        write_all(s, req.as_bytes());
        read_one(s)
    };
    // All on one kept-alive client connection: the route to the api pool, then the rest.
    let api = ask(&mut s, "/api/users");
    assert!(
        api.starts_with("HTTP/1.1 200") && api.ends_with("api-1\n"),
        "{api}"
    );
    let web = ask(&mut s, "/");
    assert!(
        web.ends_with("\n") && web.contains("\r\n\r\ndemo-"),
        "{web}"
    );
    let headers = ask(&mut s, "/headers");
    assert!(headers.contains("X-Forwarded-For: 127.0.0.1"), "{headers}");
    assert!(headers.contains("X-Request-ID: "), "{headers}");
}
