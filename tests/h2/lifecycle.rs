//! Issue 26 point 6: the life of an HTTP/2 connection. Concurrency past
//! `h2_max_concurrent_streams` refused, `keepalive_requests` then GOAWAY, the idle and header
//! timeouts of HTTP/1, and a drain (SIGTERM) that lets the streams in flight finish behind a
//! GOAWAY.

use std::time::{Duration, Instant};

use crate::http_support::{response, Backend, Gate, Step};
use crate::kit::{client, run, start_h2c, PYTHON};
use crate::support::{QuillProcess, IO_TIMEOUT};

#[test]
fn streams_past_max_concurrent_streams_are_refused() {
    let gate = Gate::new();
    let g = gate.clone();
    let backend =
        Backend::start(move |_| vec![Step::Wait(g.clone()), Step::Send(response(200, "", b"ok"))]);
    let q = start_h2c(&backend, "h2_max_concurrent_streams = 2", "");
    let port = q.port;
    let t = std::thread::spawn(move || {
        client(
            port,
            &[
                "--request",
                "GET /1",
                "--request",
                "GET /2",
                "--request",
                "GET /3",
            ],
        )
    });
    assert!(backend.wait_accepted(2, IO_TIMEOUT));
    std::thread::sleep(Duration::from_millis(200));
    gate.open_once();
    gate.open_once();
    let r = t.join().unwrap();
    assert_eq!(r.status(1), Some(200), "{:?}", r.lines);
    assert_eq!(r.status(3), Some(200), "{:?}", r.lines);
    assert_eq!(r.reset(5), Some(7), "REFUSED_STREAM: {:?}", r.lines);
    assert_eq!(backend.requests().len(), 2);
}

#[test]
fn keepalive_requests_ends_the_connection_with_goaway_after_the_last() {
    let backend = Backend::echo();
    let q = start_h2c(&backend, "keepalive_requests = 2", "");
    let r = client(
        q.port,
        &[
            "--request",
            "GET /1",
            "--request",
            "GET /2",
            "--request",
            "GET /3",
            "--timeout",
            "3",
        ],
    );
    assert_eq!(r.status(1), Some(200), "{:?}", r.lines);
    assert_eq!(r.status(3), Some(200), "{:?}", r.lines);
    assert_eq!(r.status(5), None, "past the last request: {:?}", r.lines);
    assert_eq!(r.goaway(), Some((0, 3)), "{:?}", r.lines);
}

#[test]
fn idle_connection_gets_goaway_and_is_closed_at_keepalive_timeout() {
    let backend = Backend::echo();
    let q = start_h2c(&backend, "keepalive_timeout = \"1s\"", "");
    let started = Instant::now();
    let r = client(q.port, &["--request", "GET /", "--linger", "5"]);
    assert_eq!(r.status(1), Some(200));
    assert_eq!(r.goaway(), Some((0, 1)), "{:?}", r.lines);
    assert!(r.closed(), "{:?}", r.lines);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "{took:?}"
    );
}

#[test]
fn a_header_block_left_unfinished_is_closed_at_header_timeout() {
    let backend = Backend::echo();
    let q = start_h2c(&backend, "header_timeout = \"1s\"", "");
    // Preface, SETTINGS, then HEADERS without END_HEADERS and nothing more.
    let code = format!(
        "import socket,time,sys\n\
         s=socket.create_connection(('127.0.0.1',{}),timeout=5)\n\
         s.sendall(b'PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n'+bytes([0,0,0,4,0,0,0,0,0]))\n\
         s.sendall(bytes([0,0,1,1,0,0,0,0,1,0x82]))\n\
         t=time.time();data=b''\n\
         while time.time()-t<4:\n  c=s.recv(65536)\n  data+=c\n  if not c: break\n\
         print(round(time.time()-t,2), data.hex())\n",
        q.port
    );
    let (out, err, ok) = run(
        std::process::Command::new(PYTHON).arg("-c").arg(&code),
        Duration::from_secs(10),
    );
    assert!(ok, "{out}{err}");
    let (secs, hex) = out.trim().split_once(' ').unwrap();
    let secs: f64 = secs.parse().unwrap();
    assert!((0.8..3.5).contains(&secs), "closed after {secs} s");
    // A GOAWAY (type 07) with PROTOCOL_ERROR (00000001) before the close.
    assert!(
        hex.contains("0000080700000000") && hex.ends_with("00000001"),
        "{hex}"
    );
}

#[test]
fn sigterm_lets_streams_in_flight_finish_behind_goaway() {
    let gate = Gate::new();
    let g = gate.clone();
    let backend = Backend::start(move |_| {
        vec![
            Step::Wait(g.clone()),
            Step::Send(response(200, "", b"finished")),
        ]
    });
    let q = start_h2c(&backend, "", "");
    let port = q.port;
    let t = std::thread::spawn(move || {
        client(
            port,
            &[
                "--request",
                "GET /1",
                "--request",
                "GET /2",
                "--linger",
                "3",
            ],
        )
    });
    assert_eq!(backend.wait_requests(2, IO_TIMEOUT).len(), 2);
    q.signal("TERM");
    std::thread::sleep(Duration::from_millis(500));
    gate.open_once();
    gate.open_once();
    let r = t.join().unwrap();
    for sid in [1, 3] {
        assert_eq!(r.status(sid), Some(200), "{:?}", r.lines);
        assert_eq!(r.body_text(sid), "finished");
    }
    let (code, _) = r.goaway().expect("a GOAWAY before the close");
    assert_eq!(code, 0);
    assert!(r.closed(), "{:?}", r.lines);
}

/// Reloads `q` with a response header every later response gets (`X-Reloaded: yes`).
fn reload_adding_a_response_header(q: &QuillProcess) {
    let cfg = q.path("quill.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text.replace(
            "h2c = true",
            "h2c = true\nresponse_headers = { set = { \"X-Reloaded\" = \"yes\" } }",
        ),
    )
    .unwrap();
    q.signal("HUP");
    assert!(
        q.wait_stderr_contains("reload", Duration::from_secs(10)),
        "{}",
        q.stderr()
    );
}

#[test]
fn a_reload_keeps_streams_in_flight_and_the_next_streams_take_the_new_configuration() {
    let gate = Gate::new();
    let g = gate.clone();
    let backend = Backend::start(move |r| {
        if r.target == "/slow" {
            vec![
                Step::Wait(g.clone()),
                Step::Send(response(200, "", b"slow")),
            ]
        } else {
            vec![Step::Send(response(200, "", b"fast"))]
        }
    });
    let q = start_h2c(&backend, "", "");
    let port = q.port;
    let t = std::thread::spawn(move || client(port, &["--request", "GET /slow"]));
    assert_eq!(backend.wait_requests(1, IO_TIMEOUT).len(), 1);
    reload_adding_a_response_header(&q);
    gate.open_once();
    let r = t.join().unwrap();
    assert_eq!(r.status(1), Some(200), "{:?}", r.lines);
    assert_eq!(r.body_text(1), "slow");
    let r = client(port, &["--request", "GET /fast"]);
    assert_eq!(r.status(1), Some(200), "{:?}", r.lines);
    assert_eq!(
        r.header(1, "x-reloaded").as_deref(),
        Some("yes"),
        "{:?}",
        r.lines
    );
}

/// An HTTP/2 connection open across a reload: its next stream takes the new configuration, as
/// a kept-alive HTTP/1 connection's next request does (each connection notes its listener's
/// pool and takes the new one at its next stream).
#[test]
fn a_connection_open_across_a_reload_gives_its_next_stream_the_new_configuration() {
    let backend = Backend::start(|_| vec![Step::Send(response(200, "", b"ok"))]);
    let q = start_h2c(&backend, "", "");
    let port = q.port;
    let go = q.path("then");
    let go_arg = go.to_str().unwrap().to_string();
    let t = std::thread::spawn(move || {
        client(
            port,
            &[
                "--request",
                "GET /before",
                "--then-after",
                &go_arg,
                "--then",
                "GET /after",
            ],
        )
    });
    assert_eq!(backend.wait_requests(1, IO_TIMEOUT).len(), 1);
    reload_adding_a_response_header(&q);
    std::fs::write(&go, b"").unwrap();
    let r = t.join().unwrap();
    assert_eq!(r.status(1), Some(200), "{:?}", r.lines);
    assert_eq!(r.header(1, "x-reloaded"), None, "{:?}", r.lines);
    assert_eq!(r.status(3), Some(200), "{:?}", r.lines);
    assert_eq!(
        r.header(3, "x-reloaded").as_deref(),
        Some("yes"),
        "the same connection's next stream: {:?}",
        r.lines
    );
    assert_eq!(backend.wait_requests(2, IO_TIMEOUT).len(), 2);
}

#[test]
fn takeover_lets_the_old_process_finish_its_streams_behind_goaway_and_loses_none() {
    let gate = Gate::new();
    let g = gate.clone();
    let backend = Backend::start(move |r| {
        if r.target.starts_with("/slow") {
            vec![Step::Wait(g.clone()), Step::Send(response(200, "", b"old"))]
        } else {
            vec![Step::Send(response(200, "", b"new"))]
        }
    });
    let mut old = start_h2c(&backend, "", "");
    let port = old.port;
    let t = std::thread::spawn(move || {
        client(
            port,
            &[
                "--request",
                "GET /slow1",
                "--request",
                "GET /slow2",
                "--linger",
                "2",
            ],
        )
    });
    assert_eq!(backend.wait_requests(2, IO_TIMEOUT).len(), 2);
    let sock = old.path("c.sock").display().to_string();
    let args = vec![
        "--config".to_string(),
        old.path("quill.toml").display().to_string(),
        "-C".into(),
        sock.clone(),
        "--takeover".into(),
        sock,
    ];
    let new = crate::support::QuillProcess::spawn_in(crate::support::scratch_dir(), args, port);
    assert!(
        new.wait_stderr_contains("took over", Duration::from_secs(10)),
        "new:\n{}\nold:\n{}",
        new.stderr(),
        old.stderr()
    );
    // New connections reach the new process while the old one drains.
    let r = client(port, &["--request", "GET /fast"]);
    assert_eq!(r.status(1), Some(200), "{:?}", r.lines);
    assert_eq!(r.body_text(1), "new");
    gate.open_once();
    gate.open_once();
    let r = t.join().unwrap();
    for sid in [1, 3] {
        assert_eq!(r.status(sid), Some(200), "{:?}", r.lines);
        assert_eq!(r.body_text(sid), "old");
    }
    assert_eq!(r.goaway().map(|g| g.0), Some(0), "{:?}", r.lines);
    let st = old
        .wait_exit(Duration::from_secs(10))
        .expect("the old process exits");
    assert_eq!(st.code(), Some(0), "{}", old.stderr());
}
