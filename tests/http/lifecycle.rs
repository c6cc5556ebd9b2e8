//! HTTP mode errors, timeouts and lifecycle (docs/design.md#errors-quill-answers): dead servers
//! (503, failover), servers that reset (502 before the head, a cut client after it), a silent
//! server (504), slowloris (408, without delaying anyone else), idle keep-alive clients and idle
//! server connections, and draining on SIGTERM or `--takeover` (U1,
//! docs/design.md#drain-loses-no-request): busy clients answered with `Connection: close`, idle
//! ones (kept alive, or accepted with no request yet) kept for one more request within
//! `drain_grace`, the silent ones closed spread over it.

use crate::http_support;
use crate::support;

use std::io;
use std::time::{Duration, Instant};

use http_support::*;
use support::refused_addr;

const T: Duration = Duration::from_secs(10);

#[test]
fn http_dead_server_gives_503() {
    let p = start_pen(&[refused_addr()]);
    let mut c = p.client();
    let r = c.roundtrip(&get("/dead"));
    assert_eq!(r.status, 503, "{}", show(&r.raw_head));
}

#[test]
fn http_dead_server_fails_over_to_the_next() {
    let b = Backend::echo();
    let p = start_pen(&[refused_addr(), b.addr()]);
    for i in 0..6 {
        // New client connections, so the first server is tried again and again.
        let mut c = p.client();
        let r = c.roundtrip(&get(&format!("/f{i}")));
        assert_eq!(r.status, 200, "request {i}: {}", show(&r.raw_head));
        assert!(r.text().starts_with(&format!("GET /f{i} ")));
    }
    assert_eq!(b.wait_requests(6, T).len(), 6);
}

#[test]
fn http_server_reset_before_the_head_gives_502() {
    let b = Backend::start(|_| vec![Step::Reset]);
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    let r = c.roundtrip(&request("POST", "/reset", "", b"once"));
    assert_eq!(r.status, 502, "{}", show(&r.raw_head));
    // Not replayed: a POST whose body was sent.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(b.requests().len(), 1, "the request was sent again");
}

#[test]
fn http_server_reset_mid_body_cuts_the_client() {
    let b = Backend::start(|_| {
        vec![
            Step::Send(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n".to_vec()),
            Step::Send(body_pattern(1000)),
            Step::Sleep(Duration::from_millis(100)),
            Step::Reset,
        ]
    });
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    c.send(&get("/cut"));
    match c.try_read_response(false, T) {
        Ok(r) => panic!(
            "a response cut by the server reached the client whole: {} with {} body bytes",
            r.status,
            r.body.len()
        ),
        Err(e) => assert_ne!(
            e.kind(),
            io::ErrorKind::TimedOut,
            "the client connection must be cut, not left hanging: {e}"
        ),
    }
}

#[test]
fn http_silent_server_gives_504() {
    let b = Backend::silent();
    let p = start_proxy("response_timeout = \"1s\"\n", &[b.addr()]);
    let mut c = p.client();
    let started = Instant::now();
    c.send(&get("/silent"));
    let r = c
        .try_read_response(false, T)
        .unwrap_or_else(|e| panic!("no 504 within {T:?}: {e}"));
    assert_eq!(r.status, 504, "{}", show(&r.raw_head));
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "504 before the 1 s response_timeout: {:?}",
        started.elapsed()
    );
}

#[test]
fn http_slowloris_client_gets_408_without_delaying_others() {
    let b = Backend::echo();
    let p = start_proxy_global("workers = 1", "header_timeout = \"1s\"\n", &[b.addr()]);
    let mut slow = p.client();
    slow.send(b"GET /slow HTTP/1.1\r\nHost: h\r\n");
    let started = Instant::now();
    let mut other = p.client();
    let mut served = 0;
    let mut answer = None;
    // Trickle one header byte at a time; the other client is served meanwhile.
    for i in 0..100 {
        if served < 5 {
            let r = other.roundtrip(&get(&format!("/other{i}")));
            assert_eq!(r.status, 200);
            served += 1;
        }
        match slow.try_read_response(false, Duration::from_millis(100)) {
            Ok(r) => {
                answer = Some(r);
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {}
            Err(e) => panic!("the slow client got no 408 but {e}"),
        }
        if !slow.try_send(b"X") {
            // Closed: the answer is in the buffer or was lost; read it.
            answer = slow.try_read_response(false, T).ok();
            break;
        }
        assert!(started.elapsed() < T, "no 408 within {T:?}");
    }
    let r = answer.expect("a 408 for the slow client");
    assert_eq!(r.status, 408, "{}", show(&r.raw_head));
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "408 before the 1 s header_timeout"
    );
    assert_eq!(
        served, 5,
        "the other client was served while the slow one trickled"
    );
    let _ = slow.expect_closed(T);
    assert!(
        b.requests().iter().all(|r| r.target != "/slow"),
        "the slow request reached the server"
    );
    // And the other client is still served after.
    assert_eq!(other.roundtrip(&get("/after")).status, 200);
}

#[test]
fn http_idle_keepalive_client_is_closed_after_keepalive_timeout() {
    let b = Backend::echo();
    let p = start_proxy("keepalive_timeout = \"1s\"\n", &[b.addr()]);
    let mut c = p.client();
    assert_eq!(c.roundtrip(&get("/once")).status, 200);
    assert!(
        c.stays_open(Duration::from_millis(300)),
        "closed before keepalive_timeout"
    );
    let waited = Instant::now();
    let _ = c.expect_closed(Duration::from_secs(5));
    assert!(waited.elapsed() < Duration::from_secs(5));
}

#[test]
fn http_keepalive_requests_closes_the_connection_after_its_last_request() {
    let b = Backend::echo();
    let p = start_proxy("keepalive_requests = 3\n", &[b.addr()]);
    let mut c = p.client();
    for path in ["/1", "/2"] {
        let r = c.roundtrip(&get(path));
        assert_eq!(r.status, 200);
        assert_ne!(
            r.header("connection")
                .map(str::to_ascii_lowercase)
                .as_deref(),
            Some("close"),
            "{}",
            show(&r.raw_head)
        );
    }
    let last = c.roundtrip(&get("/3"));
    assert_eq!(last.status, 200);
    assert_eq!(
        last.header("connection")
            .map(str::to_ascii_lowercase)
            .as_deref(),
        Some("close"),
        "{}",
        show(&last.raw_head)
    );
    assert!(
        c.expect_closed(Duration::from_secs(5)).is_ok(),
        "not closed after the third"
    );
    // The count is per connection: a new one carries its own three.
    let mut c2 = p.client();
    for _ in 0..2 {
        assert_eq!(c2.roundtrip(&get("/again")).status, 200);
    }
    assert!(
        c2.stays_open(Duration::from_millis(200)),
        "closed before its third request"
    );
}

#[test]
fn http_idle_server_connection_closed_by_the_server_is_not_reused() {
    let b = Backend::start_with(
        BackendOptions {
            idle_close: Some(Duration::from_millis(200)),
            ..BackendOptions::default()
        },
        |r| vec![Step::Send(echo_response(r))],
    );
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    assert_eq!(c.roundtrip(&get("/first")).status, 200);
    // The server closes its idle kept-alive connection; the proxy must notice.
    assert!(
        wait_until(T, || b.ended().contains(&0)),
        "the backend did not close"
    );
    std::thread::sleep(Duration::from_millis(300));
    // A POST (not replayable): it must go on a new connection, not the closed one.
    let r = c.roundtrip(&request("POST", "/second", "", b"not idempotent"));
    assert_eq!(r.status, 200, "{}", show(&r.raw_head));
    assert!(r.text().contains("POST /second "), "{}", r.text());
    assert_eq!(b.accepted(), 2);
}

/// A backend that answers `/busy` with `len` pattern bytes once `gate` opens, and echoes
/// anything else at once.
fn busy_backend(gate: &Gate, len: usize) -> Backend {
    let g = gate.clone();
    Backend::start(move |r| {
        if r.target == "/busy" {
            vec![
                Step::Wait(g.clone()),
                Step::Send(response(200, "", &body_pattern(len))),
            ]
        } else {
            vec![Step::Send(echo_response(r))]
        }
    })
}

/// Sends quill SIGTERM and asserts (bounded) that it starts draining.
fn sigterm_and_wait_for_the_drain(p: &Proxy) {
    p.signal("TERM");
    assert!(
        p.quill
            .as_ref()
            .is_some_and(|q| q.wait_stderr_contains("stopping", T)),
        "quill does not drain:\n{}",
        p.stderr()
    );
}

/// While a SIGTERM drain keeps idle clients for their grace, the listening socket is closed once
/// the workers have taken what was queued: a new client is refused at once (the kernel answers
/// its SYN with a reset) instead of being queued for a process that no longer accepts and reset
/// when it exits. Every connection that did get in before is served.
#[test]
fn a_client_connecting_during_a_sigterm_drain_is_refused_not_queued_for_nobody() {
    let b = Backend::fixed(10);
    let global = "drain_timeout = \"30s\"\ndrain_grace = \"3s\"\nworkers = 1";
    let p = start_proxy_global(global, "", &[b.addr()]);
    if p.quill.is_none() {
        return; // HAProxy's soft stop is another mechanism: not compared here.
    }
    let mut idle = p.client();
    assert_eq!(idle.roundtrip(&get("/before")).status, 200);
    sigterm_and_wait_for_the_drain(&p);
    // Bounded: 100 tries over at most 2 s. A connection that still gets in (the worker had not
    // taken the drain up yet) must be served, never reset.
    let mut refused = false;
    for _ in 0..100 {
        match std::net::TcpStream::connect_timeout(&p.addr(), Duration::from_millis(500)) {
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                refused = true;
                break;
            }
            Err(e) => panic!("connect during the drain: {e}"),
            Ok(s) => {
                let mut c = Client::from_stream(s);
                let r = c.roundtrip(&get("/during"));
                assert_eq!(
                    r.status, 200,
                    "a client that got in during the drain is served"
                );
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        refused,
        "a client connecting during the drain was queued, not refused\n{}",
        p.stderr()
    );
    // The idle client kept for the grace still gets its one more request.
    let r = idle.roundtrip(&get("/after"));
    assert_eq!(r.status, 200);
    assert!(r.says_close(), "{:?}", r.headers);
}

#[test]
fn http_sigterm_keeps_idle_clients_for_the_drain_grace_and_busy_ones_get_connection_close() {
    let gate = Gate::new();
    let b = busy_backend(&gate, 50_000);
    // Without deferred accepts: a client that never sends is then Quill's at once, the case
    // checked here (deferred, the kernel holds such a client until its first bytes or about a
    // second; a stop closes it with the listening socket, a reload or takeover keeps it).
    let global = "drain_timeout = \"30s\"\ndrain_grace = \"2s\"\nworkers = 1\ndefer_accept = false";
    let mut p = start_proxy_global(global, "", &[b.addr()]);
    if p.quill.is_none() {
        return; // HAProxy closes idle clients at once unless told otherwise: not compared here.
    }
    // Kept-alive clients that stay silent, and one that never sends a request.
    let mut idle: Vec<Client> = (0..6).map(|_| p.client()).collect();
    for (i, c) in idle.iter_mut().enumerate() {
        assert_eq!(c.roundtrip(&get(&format!("/before{i}"))).status, 200);
    }
    let mut fresh = p.client();
    let mut busy = p.client();
    busy.send(&get("/busy"));
    b.wait_requests(7, T);
    let term = Instant::now();
    sigterm_and_wait_for_the_drain(&p);
    // The busy one gets its whole response, marked close, then EOF.
    gate.open_once();
    let r = busy
        .try_read_response(false, T)
        .unwrap_or_else(|e| panic!("the busy client lost its response: {e}"));
    assert_eq!(r.status, 200);
    assert_eq!(r.body, body_pattern(50_000));
    assert!(
        r.says_close(),
        "the response during a drain says close: {:?}",
        r.headers
    );
    busy.expect_closed(T)
        .expect("an orderly close after the last response");
    // The silent kept-alive clients are closed within the grace (2 s), not at once and not all
    // together: over its second half, evenly (with 8 sessions on the one worker, about 125 ms
    // apart). Measured from before the signal, so a slow machine only makes them later.
    let mut closed_after: Vec<Duration> = idle
        .iter_mut()
        .map(|c| {
            let _ = c.expect_closed(Duration::from_secs(10));
            term.elapsed()
        })
        .collect();
    closed_after.sort();
    let (first, last) = (closed_after[0], closed_after[closed_after.len() - 1]);
    assert!(
        first >= Duration::from_millis(800),
        "an idle client was closed {first:?} after SIGTERM: before the second half of the 2 s grace ({closed_after:?})"
    );
    assert!(
        last - first >= Duration::from_millis(300),
        "the idle clients were closed all at once: {closed_after:?}"
    );
    // The client that never sent a request is kept to the end of the grace.
    let _ = fresh.expect_closed(Duration::from_secs(10));
    assert!(
        term.elapsed() >= Duration::from_millis(1900),
        "the client with no request yet was closed {:?} after SIGTERM, before the 2 s grace ended",
        term.elapsed()
    );
    assert!(
        p.wait_exit(Duration::from_secs(10)),
        "quill still running {:?} after SIGTERM with nothing left to do (drain_timeout 30 s)",
        term.elapsed()
    );
}

/// A server that answers the first request of each connection, keeps it alive, and then closes
/// it on the next request without a byte of answer: what a kept-alive connection that the
/// server gave up on just as a request went out looks like.
fn closes_on_second_request() -> Backend {
    Backend::start(|r| {
        if r.index == 0 {
            vec![Step::Send(echo_response(r))]
        } else {
            vec![Step::Close]
        }
    })
}

#[test]
fn http_idempotent_request_on_a_reused_connection_that_fails_is_retried_once_on_a_new_one() {
    let b = closes_on_second_request();
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    assert_eq!(c.roundtrip(&get("/first")).status, 200);
    // Reused connection, closed by the server on this request: sent again on a new one.
    let r = c.roundtrip(&get("/again"));
    assert_eq!(r.status, 200, "{}", show(&r.raw_head));
    assert!(r.text().starts_with("GET /again "), "{}", r.text());
    assert_eq!(b.accepted(), 2, "one retry on one new connection");
    let again: Vec<_> = b
        .requests()
        .into_iter()
        .filter(|q| q.target == "/again")
        .collect();
    assert_eq!(
        again.len(),
        2,
        "sent twice: on the reused and on the new connection"
    );
}

#[test]
fn http_non_idempotent_request_on_a_reused_connection_that_fails_is_not_replayed() {
    let b = closes_on_second_request();
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    assert_eq!(c.roundtrip(&get("/first")).status, 200);
    let r = c.roundtrip(&request("POST", "/pay", "", b"once"));
    assert_eq!(r.status, 502, "{}", show(&r.raw_head));
    let posts = b
        .requests()
        .into_iter()
        .filter(|q| q.method == "POST")
        .count();
    assert_eq!(posts, 1, "a POST is never sent twice");
}

/// Sends `req` and reads its response: an error (in words) when the connection was closed or
/// reset instead.
fn try_roundtrip(c: &mut Client, req: &[u8]) -> io::Result<Response> {
    if !c.try_send(req) {
        return Err(io::Error::other("the request could not be sent"));
    }
    c.try_read_response(false, T)
}

/// The old process of a takeover, with the one client it serves; `drain_grace` as given.
struct Takeover {
    p: Proxy,
    new: Option<support::QuillProcess>,
    sock: std::path::PathBuf,
    _ctl_dir: tempfile::TempDir,
}

impl Takeover {
    /// Quill (one worker, a control socket) in front of `servers`; None for the HAProxy
    /// reference, which has no takeover.
    fn start(grace: &str, servers: &[std::net::SocketAddr]) -> Option<Takeover> {
        let ctl_dir = support::scratch_dir();
        let sock = ctl_dir.path().join("c.sock");
        let global = format!(
            "control = \"{}\"\ndrain_timeout = \"30s\"\ndrain_grace = \"{grace}\"\nworkers = 1",
            sock.display()
        );
        let p = start_proxy_global(&global, "", servers);
        p.quill.as_ref()?;
        Some(Takeover {
            p,
            new: None,
            sock,
            _ctl_dir: ctl_dir,
        })
    }

    fn old(&mut self) -> &mut support::QuillProcess {
        self.p.quill.as_mut().expect("quill")
    }

    /// The sessions the old process has open (`quill ctl connections`).
    fn connections(&self) -> String {
        let sock = self.sock.display().to_string();
        let (code, out, err) =
            support::run_quill_output(&["ctl", "--socket", &sock, "connections"]);
        assert_eq!(code, 0, "{err}");
        out
    }

    /// A new process takes the listening socket over; returns once the old one drains.
    fn take_over(&mut self) {
        let old = self.p.quill.as_ref().expect("quill");
        let args = vec![
            "--config".to_string(),
            old.path("quill.toml").display().to_string(),
            "--takeover".into(),
            self.sock.display().to_string(),
        ];
        let port = old.port;
        let new = support::QuillProcess::spawn_in(support::scratch_dir(), args, port);
        let old = self.p.quill.as_ref().expect("quill");
        assert!(
            new.wait_stderr_contains("took over", T),
            "new:\n{}\nold:\n{}",
            new.stderr(),
            old.stderr()
        );
        assert!(
            old.wait_stderr_contains("stopping", T),
            "the old process does not drain:\n{}",
            old.stderr()
        );
        self.new = Some(new);
    }

    /// Asserts that the old process exits (`why`: what it is waited for, for the message), with
    /// status 0.
    fn assert_old_exits_cleanly(&mut self, why: &str) {
        let st = self.old().wait_exit(T).expect(why);
        assert_eq!(st.code(), Some(0), "{}", self.old().stderr());
    }
}

/// Sends `GET path` on `c` and asserts the echo server's answer comes back (`what`: the
/// request, for the message) marked close, followed by an orderly close.
fn assert_echoed_then_closed(c: &mut Client, path: &str, what: &str) {
    let r = try_roundtrip(c, &get(path)).unwrap_or_else(|e| panic!("{what} got no answer: {e}"));
    assert_eq!(r.status, 200, "{}", show(&r.raw_head));
    assert!(
        r.text().starts_with(&format!("GET {path} ")),
        "{}",
        r.text()
    );
    assert!(r.says_close(), "{}", show(&r.raw_head));
    c.expect_closed(T)
        .expect("an orderly close after the response");
}

#[test]
fn connection_accepted_before_takeover_is_answered_after_it() {
    let b = Backend::echo();
    let Some(mut t) = Takeover::start("5s", &[b.addr()]) else {
        return;
    };
    // A client connects; the old process accepts it; its request comes only after the takeover
    // (trial U1: it was closed unanswered).
    let mut c = t.p.client();
    let port = c.s.local_addr().unwrap().port();
    assert!(
        wait_until(T, || t.connections().contains(&format!(":{port}"))),
        "the old process holds the connection: {}",
        t.connections()
    );
    t.take_over();
    std::thread::sleep(Duration::from_millis(300));
    assert_echoed_then_closed(&mut c, "/fresh", "the request after the takeover");
    t.assert_old_exits_cleanly("the old process exits once its last client is answered");
}

#[test]
fn idle_kept_alive_client_whose_next_request_comes_during_the_drain_grace_is_answered() {
    let b = Backend::echo();
    // Started with no grace; a reload gives it one (a drain takes the running configuration's).
    let Some(mut t) = Takeover::start("0s", &[b.addr()]) else {
        return;
    };
    let config = t.old().path("quill.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("drain_grace = \"0s\"", "drain_grace = \"5s\""),
    )
    .unwrap();
    t.p.signal("HUP");
    assert!(
        t.old().wait_stderr_contains("SIGHUP: reloaded", T),
        "{}",
        t.old().stderr()
    );
    let mut c = t.p.client();
    let first = c.roundtrip(&get("/first"));
    assert_eq!(first.status, 200);
    assert!(!first.says_close(), "{}", show(&first.raw_head));
    t.take_over();
    // Within the first half of the grace: the request is answered, marked close.
    std::thread::sleep(Duration::from_millis(500));
    assert_echoed_then_closed(&mut c, "/next", "the kept-alive client's next request");
    // New clients reach the new process.
    let mut fresh = Client::connect(t.p.addr());
    assert_eq!(fresh.roundtrip(&get("/after")).status, 200);
    t.assert_old_exits_cleanly("the old process exits once its last client is answered");
}

#[test]
fn http_takeover_keeps_idle_clients_for_the_drain_grace_and_finishes_busy_ones_with_connection_close(
) {
    let gate = Gate::new();
    let b = busy_backend(&gate, 20_000);
    let Some(mut t) = Takeover::start("1s", &[b.addr()]) else {
        return;
    };
    let mut idle = t.p.client();
    assert_eq!(idle.roundtrip(&get("/before")).status, 200);
    let mut busy = t.p.client();
    busy.send(&get("/busy"));
    assert!(
        wait_until(T, || b.requests().iter().any(|r| r.target == "/busy")),
        "the busy request reached the server"
    );
    let started = Instant::now();
    t.take_over();
    // The silent kept-alive client is closed within the grace (1 s), not at the drain deadline.
    let r = idle.try_read_response(false, T);
    assert!(r.is_err(), "the idle client got {r:?} instead of a close");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The busy one gets its whole answer, told to close.
    gate.open_once();
    let resp = busy.read_response();
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, body_pattern(20_000));
    assert!(resp.says_close(), "{}", show(&resp.raw_head));
    // New clients reach the new process; the old one exits once its last request is answered.
    let mut fresh = Client::connect(t.p.addr());
    assert_eq!(fresh.roundtrip(&get("/after")).status, 200);
    t.assert_old_exits_cleanly("the old process exits well before the drain deadline");
}

/// The sessions a Quill with `--admin ADDR` has accepted (refused ones included).
fn accepted(admin: std::net::SocketAddr) -> f64 {
    crate::admin_support::metrics(admin).value("quill_sessions_accepted_total", &[])
}

/// TCP_DEFER_ACCEPT (`defer_accept`, on by default where clients speak first): a client that
/// has connected but sent nothing is not accepted yet (the kernel holds it: no session, no
/// place under `-x`, no wake-up); its first bytes get it accepted, and it is answered. One
/// that never sends is accepted all the same after about a second (then `header_timeout`
/// applies).
#[test]
fn an_http_listener_accepts_a_client_once_its_first_bytes_are_in() {
    let b = Backend::echo();
    let (q, admin) =
        crate::admin_support::start_pen_with_admin(&["-H", "-x", "1"], &[b.addr().to_string()]);
    // The start-up check's own connections (closed: a FIN gets a client accepted too).
    let base = accepted(admin);
    let silent = std::net::TcpStream::connect(("127.0.0.1", q.port)).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(
        accepted(admin),
        base,
        "a client that has sent nothing was accepted"
    );
    let from = silent.local_addr().unwrap();
    assert_eq!(
        server_side_state(q.port, from).as_deref(),
        Some("03"),
        "the kernel does not hold the silent client in SYN received"
    );
    // The only place under -x 1 is free for a client that speaks.
    let mut c = Client::connect(([127, 0, 0, 1], q.port).into());
    let r = c.roundtrip(&get("/speaks"));
    assert_eq!(r.status, 200, "{}", show(&r.raw_head));
    drop(c);
    assert!(wait_until(T, || crate::admin_support::metrics(admin)
        .value("quill_sessions_active", &[])
        == 0.0));
    // The silent one speaks at last: accepted then, and answered.
    let mut silent = Client::from_stream(silent);
    silent.send(&get("/late"));
    let r = silent.read_response();
    assert_eq!(r.status, 200, "{}", show(&r.raw_head));
    assert_eq!(accepted(admin), base + 2.0);
    // One that never sends: accepted within a few seconds anyway (bounded wait).
    let _quiet = std::net::TcpStream::connect(("127.0.0.1", q.port)).unwrap();
    let start = Instant::now();
    assert!(
        wait_until(Duration::from_secs(8), || accepted(admin) == base + 3.0),
        "a client that sends nothing was never accepted"
    );
    assert!(
        start.elapsed() >= Duration::from_millis(500),
        "accepted before its bytes"
    );
}

/// The state (`/proc/net/tcp`'s `st`: 01 established, 03 SYN received) of the server side of
/// the connection from `client` to local port `port`, if the kernel lists it.
fn server_side_state(port: u16, client: std::net::SocketAddr) -> Option<String> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let local = format!(":{port:04X}");
    let remote = format!(":{:04X}", client.port());
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.len() > 3 && f[1].ends_with(&local) && f[2].ends_with(&remote)).then(|| f[3].to_string())
    })
}

/// `no defer_accept` (`-O`): the kernel completes a client's connection as soon as it connects
/// (its server side is established at once, where a deferred one stays "SYN received" for about
/// a second), and Quill accepts it: a silent client then holds the only place under `-x 1`, so
/// the next client, which speaks, is refused.
#[test]
fn with_defer_accept_off_a_silent_client_is_accepted_at_once() {
    let b = Backend::echo();
    let (q, admin) = crate::admin_support::start_pen_with_admin(
        &["-H", "-x", "1", "-O", "no defer_accept"],
        &[b.addr().to_string()],
    );
    let base = accepted(admin);
    let silent = std::net::TcpStream::connect(("127.0.0.1", q.port)).unwrap();
    let from = silent.local_addr().unwrap();
    assert!(
        wait_until(Duration::from_millis(900), || {
            server_side_state(q.port, from).as_deref() == Some("01")
        }),
        "the server side is {:?}, not established: the accept was deferred",
        server_side_state(q.port, from)
    );
    assert!(
        wait_until(T, || accepted(admin) == base + 1.0),
        "the silent client was not accepted"
    );
    let mut c = Client::connect(([127, 0, 0, 1], q.port).into());
    c.send(&get("/refused"));
    if let Ok(r) = c.try_read_response(false, T) {
        assert_ne!(r.status, 200, "served beyond -x 1: {}", show(&r.raw_head));
    }
}
