//! The shared strict HTTP/1 module (`quill_core::http1`) as its users meet it: the admin listener
//! refuses a head that could be read two ways, the demo backend skips request bodies and refuses
//! malformed heads, and `quill bench` counts a response with conflicting lengths as bad. Every
//! run is the real binary (or the demo backend) over loopback.

use crate::admin_support;
use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use admin_support::*;
use support::*;

#[test]
fn admin_listener_refuses_heads_that_could_be_read_two_ways() {
    let backend = http("a");
    let (_q, admin) = start_pen_with_admin(&[], &[spec(backend.addr())]);
    let two_ways: &[&[u8]] = &[
        // Bare LF line ends (a front end that wants CRLF sees one line).
        b"GET /metrics HTTP/1.1\nHost: localhost\n\n",
        // Both framings at once: the request-smuggling classic.
        b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n",
        // A length that some read as 5.
        b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nContent-Length: +5\r\n\r\n",
        // A control character in a value.
        b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nX: a\x01b\r\n\r\n",
    ];
    for raw in two_ways {
        let reply = request(admin, raw);
        assert_eq!(
            reply.status,
            400,
            "{:?}: {}",
            String::from_utf8_lossy(raw),
            reply.head
        );
    }
    // The same request, well formed, is answered.
    assert_eq!(
        request(admin, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").status,
        200
    );
}

/// Sends `raw` to `addr`, then reads until the connection closes (bounded).
fn exchange(addr: SocketAddr, raw: &[u8]) -> String {
    let mut s = connect(addr);
    write_all(&mut s, raw);
    let _ = s.shutdown(std::net::Shutdown::Write);
    String::from_utf8_lossy(&read_until_eof(&mut s, IO_TIMEOUT)).into_owned()
}

#[test]
fn demo_backend_skips_request_bodies_and_refuses_malformed_heads() {
    let backend = http("a");
    // A POST with a body, then a GET on the same connection: the body is not read as a request.
    let answers = exchange(
        backend.addr(),
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 8\r\n\r\nGET /x\r\nGET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    let statuses: Vec<&str> = answers
        .lines()
        .filter(|l| l.starts_with("HTTP/1.1 "))
        .collect();
    assert_eq!(
        statuses,
        ["HTTP/1.1 405 Method Not Allowed", "HTTP/1.1 200 OK"],
        "{answers:?}"
    );
    assert!(answers.ends_with("\r\n\r\na\n"), "{answers:?}");
    // A space before a colon: 400, and the connection is closed.
    let refused = exchange(backend.addr(), b"GET / HTTP/1.1\r\nHost : a\r\n\r\n");
    assert!(
        refused.starts_with("HTTP/1.1 400 Bad Request\r\n"),
        "{refused:?}"
    );
    assert!(refused.contains("Connection: close\r\n"), "{refused:?}");
}

#[test]
fn bench_counts_a_response_with_conflicting_lengths_as_bad() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    // Answers each connection once with two different lengths, then closes (bounded in time).
    // The reader before http1 took the last length (3, the body's size) and counted a success.
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let server = thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !stopped.load(Ordering::SeqCst) && Instant::now() < deadline {
            let Ok((mut c, _)) = listener.accept() else {
                thread::sleep(Duration::from_millis(5));
                continue;
            };
            let _ = c.set_nonblocking(false);
            let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
                match c.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = c.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
            );
        }
    });
    let url = format!("http://{addr}/");
    let (_, out, err) = run_quill_output(&[
        "bench",
        "--json",
        "--active",
        "1",
        "--requests",
        "3",
        "--timeout",
        "2s",
        &url,
    ]);
    stop.store(true, Ordering::SeqCst);
    server.join().unwrap();
    let v: serde_json::Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("bad JSON ({e}):\n{out}\nstderr:\n{err}"));
    assert_eq!(v["complete"].as_u64(), Some(0), "{v}");
    assert_eq!(v["failures"]["bad_response"].as_u64(), Some(3), "{v}");
}
