//! Pen's `http` / `no http` control commands (docs/design.md#http-mode): `http` turns a
//! listener into an HTTP reverse proxy for the connections it accepts from then on (default HTTP
//! settings, `X-Forwarded-For` added, as `-H` does), `no http` back into a TCP forwarder;
//! connections already open keep the mode they started in. `no http` is refused on a listener
//! with routes, `pool NAME http` on a named pool. `write` saves the mode and a reload keeps it.
//! Each test starts the real binary with a control socket in front of the scripted backend of
//! tests/support/http.rs, which records the requests exactly as they arrived.

use crate::ctl;
use crate::http_support;
use crate::support;

use std::path::Path;
use std::time::Duration;

use ctl::*;
use http_support::*;
use support::*;

const T: Duration = Duration::from_secs(10);

/// A backend that answers every request 200 and keeps the connection.
fn backend() -> Backend {
    Backend::start(|_| vec![Step::Send(response(200, "", b"ok"))])
}

/// What the backend received for the `n`-th request (waiting for it, bounded).
fn nth(b: &Backend, n: usize) -> Request {
    b.wait_requests(n + 1, T)[n].clone()
}

/// A GET of `target` whose head the test knows byte for byte.
fn get_raw(target: &str) -> Vec<u8> {
    format!("GET {target} HTTP/1.1\r\nHost: example.test\r\n\r\n").into_bytes()
}

/// Whether the listener behind `sock` shows `http` among its mode words.
fn mode_says_http(sock: &Path) -> bool {
    ctl(sock, "mode").split_whitespace().any(|w| w == "http")
}

/// `mode` says `http` exactly when `http` (`when`: what the test is at).
fn assert_http_mode(sock: &Path, http: bool, when: &str) {
    assert_eq!(mode_says_http(sock), http, "{when}: {}", ctl(sock, "mode"));
}

#[test]
fn http_control_command_turns_a_tcp_listener_into_http_for_new_connections() {
    let b = backend();
    let (q, sock) = start_ctl(&[], &[b.addr().to_string()]);
    assert_http_mode(&sock, false, "starts as TCP");
    // A connection opened while the listener is TCP: its bytes go through as sent.
    let mut old = Client::connect(q.addr());
    assert_eq!(old.roundtrip(&get_raw("/before")).status, 200);
    let first = nth(&b, 0);
    assert_eq!(
        first.raw_head,
        get_raw("/before"),
        "TCP forwards the head untouched"
    );
    ctl_ok(&sock, "http");
    assert_http_mode(&sock, true, "after http");
    // `http` again on an HTTP listener changes nothing and answers OK.
    ctl_ok(&sock, "http");
    // The connection already open stays a raw TCP session.
    assert_eq!(old.roundtrip(&get_raw("/old-conn")).status, 200);
    let second = nth(&b, 1);
    assert_eq!(second.target, "/old-conn");
    assert_eq!(second.raw_head, get_raw("/old-conn"), "still raw TCP");
    assert_eq!(second.conn, first.conn, "on the same server connection");
    // A new connection is served in HTTP mode: the server sees who the client is.
    let mut new = Client::connect(q.addr());
    assert_eq!(new.roundtrip(&get_raw("/new-conn")).status, 200);
    let third = nth(&b, 2);
    assert_eq!(third.target, "/new-conn");
    assert_eq!(
        third.header_all("x-forwarded-for"),
        ["127.0.0.1"],
        "{}",
        show(&third.raw_head)
    );
    let s = ctl(&sock, "json status");
    assert!(s.contains("\"protocol\":\"http\""), "{s}");
}

#[test]
fn no_http_control_command_turns_it_back_to_tcp() {
    let b = backend();
    let (q, sock) = start_ctl(&["-H"], &[b.addr().to_string()]);
    assert_http_mode(&sock, true, "started with -H");
    let mut old = Client::connect(q.addr());
    assert_eq!(old.roundtrip(&get_raw("/before")).status, 200);
    assert_eq!(nth(&b, 0).header_all("x-forwarded-for"), ["127.0.0.1"]);
    ctl_ok(&sock, "no http");
    assert_http_mode(&sock, false, "after no http");
    // The connection opened in HTTP mode stays HTTP.
    assert_eq!(old.roundtrip(&get_raw("/old-conn")).status, 200);
    let second = nth(&b, 1);
    assert_eq!(second.target, "/old-conn");
    assert_eq!(second.header_all("x-forwarded-for"), ["127.0.0.1"]);
    // A new connection is a TCP session again: the head arrives as the client sent it.
    let mut new = Client::connect(q.addr());
    assert_eq!(new.roundtrip(&get_raw("/new-conn")).status, 200);
    let third = nth(&b, 2);
    assert_eq!(
        third.raw_head,
        get_raw("/new-conn"),
        "{}",
        show(&third.raw_head)
    );
    // `no http` on a TCP listener changes nothing and answers OK.
    ctl_ok(&sock, "no http");
    ctl_err(&sock, "http now", "now");
}

#[test]
fn no_http_control_command_is_refused_on_a_listener_with_routes() {
    let (api, web) = (backend(), backend());
    let (q, probe, _) = Quill::spawn_first(|dir, port| {
        let cfg = dir.join("quill.toml");
        let text = format!(
            "control = \"{}\"\nworkers = 1\n\
             [[pool]]\nname = \"api\"\nservers = [\"{}\"]\n\
             [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
             servers = [\"{}\"]\n\
             [[listener.route]]\nname = \"api\"\npath = \"/api/\"\npool = \"api\"\n",
            dir.join("ctl.sock").display(),
            api.addr(),
            web.addr()
        );
        std::fs::write(&cfg, text).unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    });
    drop(probe);
    let sock = q.path("ctl.sock");
    wait_ctl(&q, &sock);
    let e = ctl_err(&sock, "no http", "routes");
    assert!(e.contains("'web'"), "{e}");
    ctl_err(&sock, "listener web no http", "routes");
    ctl_err(&sock, "pool api http", "not a pool setting");
    ctl_err(&sock, "pool api no http", "not a pool setting");
    assert_http_mode(&sock, true, "still HTTP");
    // Still routing: the refusal changed nothing.
    let mut c = Client::connect(q.addr());
    assert_eq!(c.roundtrip(&get_raw("/api/x")).status, 200);
    assert_eq!(nth(&api, 0).header_all("x-forwarded-for"), ["127.0.0.1"]);
}

#[test]
fn http_control_command_is_written_and_kept_by_a_reload() {
    let b = backend();
    let dir_file = std::cell::RefCell::new(std::path::PathBuf::new());
    let q = Quill::start_with(|dir, port| {
        let cmds = dir.join("saved.cmds");
        std::fs::write(&cmds, "# empty\n").unwrap();
        *dir_file.borrow_mut() = cmds.clone();
        let sock = dir.join("ctl.sock").display().to_string();
        let cmds = cmds.display().to_string();
        pen_args(
            dir,
            port,
            &["-C", &sock, "-F", &cmds],
            &[b.addr().to_string()],
        )
    });
    let sock = q.path("ctl.sock");
    wait_ctl(&q, &sock);
    ctl_ok(&sock, "http");
    // A reload before `write`: the sources did not change the mode, the runtime change stays.
    let reply = ctl(&sock, "reload");
    assert!(reply.contains("reloaded"), "{reply}");
    assert_http_mode(&sock, true, "after reload");
    ctl_ok(&sock, "write");
    let written = std::fs::read_to_string(&*dir_file.borrow()).unwrap();
    assert!(
        written.lines().any(|l| l == "http"),
        "write saves the mode:\n{written}"
    );
    // After `write` the -F file itself says `http`: a reload reads it back.
    let reply = ctl(&sock, "reload");
    assert!(reply.contains("reloaded"), "{reply}");
    assert_http_mode(&sock, true, "after reload");
    let mut c = Client::connect(q.addr());
    assert_eq!(c.roundtrip(&get_raw("/x")).status, 200);
    assert_eq!(nth(&b, 0).header_all("x-forwarded-for"), ["127.0.0.1"]);
    // And back: `no http`, written, read back by the next reload as TCP.
    drop(c);
    ctl_ok(&sock, "no http");
    ctl_ok(&sock, "write");
    let written = std::fs::read_to_string(&*dir_file.borrow()).unwrap();
    assert!(written.lines().any(|l| l == "no http"), "{written}");
    let reply = ctl(&sock, "reload");
    assert!(reply.contains("reloaded"), "{reply}");
    assert_http_mode(&sock, false, "after reload");
    let mut c = Client::connect(q.addr());
    assert_eq!(c.roundtrip(&get_raw("/y")).status, 200);
    assert_eq!(nth(&b, 1).raw_head, get_raw("/y"));
}
