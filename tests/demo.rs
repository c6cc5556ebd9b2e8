//! `quill demo`: prints what to try, serves three HTTP demo backends in rotation.

mod support;

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
    // The printed control socket answers `servers` with the three backends.
    let sock = out
        .split_whitespace()
        .skip_while(|w| *w != "--socket")
        .nth(1)
        .unwrap_or_else(|| panic!("no control socket in the demo's hints:\n{out}"))
        .to_string();
    let servers = std::process::Command::new(env!("CARGO_BIN_EXE_quill"))
        .args(["ctl", "--socket", &sock, "servers"])
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
