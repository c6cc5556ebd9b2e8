//! HTTP mode, protocol and headers (docs/design.md#http-behaviour): keep-alive both ways,
//! HTTP/1.0 and 1.1, pipelining, HEAD/1xx/204/304 framing, `Expect: 100-continue`, chunked (with
//! trailers), close-delimited and large bodies streamed, SSE event by event, hop-by-hop removal,
//! X-Forwarded-*, Via, Forwarded, X-Request-ID and listener header edits. Each test starts the
//! real binary in front of the scripted backend of tests/support/http.rs.
//!
//! The first tests check the support code itself (backend and client against each other, no
//! proxy), so a failure below them is the proxy's. `QUILL_HTTP_REFERENCE=haproxy cargo test
//! --test http proxy::` runs the same tests through HAProxy (`mode http`) as a reference.

use crate::http_support;
use crate::support::Strace;

use std::time::Duration;

use http_support::*;

const T: Duration = Duration::from_secs(10);

/// The X-Forwarded-For list the backend got, all its fields joined.
fn xff(r: &Request) -> Vec<String> {
    r.header_all("x-forwarded-for")
        .iter()
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_string())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The support code, without a proxy
// ---------------------------------------------------------------------------------------------

#[test]
fn support_backend_and_client_agree_on_every_framing() {
    let gate = Gate::new();
    let g = gate.clone();
    let b = Backend::start(move |r| match r.target.as_str() {
        "/echo" => vec![Step::Send(echo_response(r))],
        "/fixed" => vec![Step::Send(fixed_response(r, 3000))],
        "/chunked" => vec![Step::Send(chunked_response(
            &[b"ab", b"cde"],
            &[("X-Checksum", "42")],
        ))],
        "/204" => vec![Step::Send(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec())],
        "/304" => vec![Step::Send(
            b"HTTP/1.1 304 Not Modified\r\nETag: \"e\"\r\n\r\n".to_vec(),
        )],
        "/1xx" => vec![
            Step::Send(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n".to_vec()),
            Step::Send(response(200, "", b"final")),
        ],
        "/gated" => vec![
            Step::Send(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n".to_vec(),
            ),
            Step::Wait(g.clone()),
            Step::Send(b"6\r\nsecond\r\n0\r\n\r\n".to_vec()),
        ],
        "/close" => vec![
            Step::Send(b"HTTP/1.1 200 OK\r\n\r\n".to_vec()),
            Step::Send(body_pattern(5000)),
            Step::Close,
        ],
        _ => vec![Step::Send(response(404, "", b""))],
    });
    let mut c = Client::connect(b.addr());
    let r = c.roundtrip(&request("POST", "/echo", "X-Test: 1\r\n", b"hello"));
    assert_eq!(r.status, 200);
    assert!(
        r.text().starts_with("POST /echo HTTP/1.1\n"),
        "{}",
        r.text()
    );
    assert!(r.text().contains("X-Test: 1\n"), "{}", r.text());
    assert!(r.text().contains("body-length: 5\n"), "{}", r.text());
    assert_eq!(c.roundtrip(&get("/fixed")).body, body_pattern(3000));
    c.send(&request("HEAD", "/fixed", "", b""));
    let h = c.read_head_response();
    assert_eq!((h.status, h.body.len()), (200, 0));
    assert_eq!(h.header("content-length"), Some("3000"));
    let r = c.roundtrip(&get("/chunked"));
    assert_eq!(r.body, b"abcde");
    assert_eq!(
        r.trailers,
        vec![("X-Checksum".to_string(), "42".to_string())]
    );
    assert_eq!(c.roundtrip(&get("/204")).status, 204);
    assert_eq!(c.roundtrip(&get("/304")).status, 304);
    c.send(&get("/1xx"));
    assert_eq!(c.read_response().status, 103);
    assert_eq!(c.read_response().body, b"final");
    // A chunked upload with a trailer, decoded by the backend.
    let mut up = b"PUT /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    up.extend_from_slice(&chunked_body(&[b"xy", b"z"], &[("X-T", "1")]));
    assert!(c.roundtrip(&up).text().contains("body-length: 3\n"));
    // Pacing: the first chunk arrives before the gate opens.
    c.send(&get("/gated"));
    c.read_until(b"first", T);
    gate.open_once();
    let r = c.read_response();
    assert_eq!(r.body, b"firstsecond");
    // Expect: 100-continue.
    c.send(b"POST /echo HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
    assert_eq!(c.read_response().status, 100);
    c.send(b"abc");
    assert!(c.read_response().text().contains("body-length: 3\n"));
    // Close-delimited.
    let r = c.roundtrip(&get("/close"));
    assert!(r.close_delimited);
    assert_eq!(r.body, body_pattern(5000));
    let reqs = b.requests();
    assert_eq!(reqs.len(), 11);
    assert_eq!(reqs[7].body, b"xyz");
    assert_eq!(reqs[7].trailers, vec![("X-T".to_string(), "1".to_string())]);
    assert_eq!(b.accepted(), 1);
    assert!(b.errors().is_empty(), "{:?}", b.errors());
}

#[test]
fn support_backend_records_bytes_and_resets_and_hangs() {
    let b = Backend::start(|r| match r.target.as_str() {
        "/reset" => vec![
            Step::Send(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n".to_vec()),
            Step::Send(body_pattern(1000)),
            Step::Sleep(Duration::from_millis(50)),
            Step::Reset,
        ],
        _ => vec![Step::Hang],
    });
    let mut c = Client::connect(b.addr());
    c.send(&get("/reset"));
    let e = c.try_read_response(false, T).unwrap_err();
    assert!(
        e.kind() != std::io::ErrorKind::TimedOut,
        "a reset must end the read: {e}"
    );
    let mut c = Client::connect(b.addr());
    c.send(&get("/hang"));
    assert!(c
        .try_read_response(false, Duration::from_millis(300))
        .is_err());
    assert!(b.wait_accepted(2, T));
    let got = b.received();
    assert_eq!(got[0], get("/reset"));
    assert_eq!(got[1], get("/hang"));
    let fresh = Backend::echo();
    fresh.assert_nothing_received("a fresh backend");
}

// ---------------------------------------------------------------------------------------------
// Keep-alive, versions, pipelining
// ---------------------------------------------------------------------------------------------

#[test]
fn http_keep_alive_reuses_one_server_connection() {
    let b = Backend::echo();
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    for i in 0..10 {
        let r = c.roundtrip(&get(&format!("/n{i}")));
        assert_eq!(r.status, 200);
        assert!(
            r.text().starts_with(&format!("GET /n{i} HTTP/1.1\n")),
            "{}",
            r.text()
        );
        assert!(!r.says_close());
    }
    let reqs = b.wait_requests(10, T);
    assert_eq!(reqs.len(), 10);
    assert_eq!(
        b.conns_with_requests(),
        1,
        "10 requests on one client connection"
    );
}

#[test]
fn http_response_head_goes_out_with_its_body_in_one_send() {
    // A rewritten response head no longer than the server's (its `Connection: keep-alive`
    // dropped, nothing added) takes the server's head's place in the buffer, just before the body
    // read with it: one `sendto` a response and no `writev`. A head the rewrite makes longer
    // (`Via` added, nothing dropped) goes from a buffer of its own, in a `writev` with the body.
    // The client gets every byte either way.
    const N: usize = 100;
    let test = "http_response_head_goes_out_with_its_body_in_one_send";
    let body = body_pattern(1024);
    for (http, longer) in [("", false), ("via = \"edge1\"\n", true)] {
        let answer = response(
            200,
            if longer {
                ""
            } else {
                "Connection: keep-alive\r\n"
            },
            &body,
        );
        let b = Backend::start(move |_| vec![Step::Send(answer.clone())]);
        let p = start_proxy(http, &[b.addr()]);
        // Quill's own system calls (not HAProxy's, as the reference).
        let Some(q) = &p.quill else { return };
        let mut c = p.client();
        assert_eq!(c.roundtrip(&get("/first")).status, 200);
        let Some(st) = Strace::attach(test, q.pid, "writev,sendto,sendmsg,write", &q.path("st"))
        else {
            return;
        };
        std::thread::sleep(Duration::from_millis(300));
        for i in 0..N {
            let r = c.roundtrip(&get(&format!("/n{i}")));
            assert_eq!(r.status, 200, "request {i}");
            assert!(r.body == body, "request {i}: the body differs");
            assert_eq!(r.header("via").is_some(), longer, "{:?}", r.headers);
            assert!(r.header("connection").is_none(), "{:?}", r.headers);
            assert_eq!(r.header("content-length"), Some("1024"), "{:?}", r.headers);
        }
        let (calls, text) = st.counts();
        let writev = calls.get("writev").copied().unwrap_or(0);
        let sendto = calls.get("sendto").copied().unwrap_or(0);
        if longer {
            // Nearly always the body is read with its head; one read behind it goes alone.
            assert!(
                writev >= N / 2,
                "{writev} writev for {N} longer heads:\n{text}"
            );
        } else {
            assert_eq!(writev, 0, "a head that fits went by writev:\n{text}");
            // A request to the server and a response to the client, each by `sendto`.
            assert!(sendto >= 2 * N, "{sendto} sendto for {N} requests:\n{text}");
        }
    }
}

#[test]
fn http_pen_form_adds_x_forwarded_for_to_every_request() {
    let b = Backend::echo();
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    for i in 0..3 {
        assert_eq!(c.roundtrip(&get(&format!("/x{i}"))).status, 200);
    }
    for r in b.wait_requests(3, T) {
        assert_eq!(xff(&r), vec!["127.0.0.1"], "request {}", r.target);
    }
}

#[test]
fn http_clients_without_keep_alive_still_reuse_server_connections() {
    let b = Backend::echo();
    let p = start_pen_with(&["--workers", "1"], &[b.addr()]);
    for i in 0..10 {
        let mut c = p.client();
        let r = c.roundtrip(&request(
            "GET",
            &format!("/c{i}"),
            "Connection: close\r\n",
            b"",
        ));
        assert_eq!(r.status, 200);
        assert!(
            r.says_close(),
            "the response to `Connection: close` says close"
        );
        c.expect_closed(T).expect("an orderly close");
    }
    b.wait_requests(10, T);
    // One worker (HAProxy: two threads) keeps its server connection for the next client.
    let most = if reference_haproxy() { 2 } else { 1 };
    assert!(
        b.conns_with_requests() <= most,
        "10 clients without keep-alive used {} server connections",
        b.conns_with_requests()
    );
}

#[test]
fn http_server_closing_after_each_response_keeps_the_client_alive() {
    let b = Backend::closing();
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    for i in 0..5 {
        let r = c.roundtrip(&get(&format!("/s{i}")));
        assert_eq!(r.status, 200, "request {i}: {}", show(&r.raw_head));
        assert!(r.text().starts_with(&format!("GET /s{i} ")), "{}", r.text());
        assert!(
            !r.says_close(),
            "the server's close is not the client's: {:?}",
            r.headers
        );
    }
    assert_eq!(
        b.accepted(),
        5,
        "a connection the server closed is never reused"
    );
}

#[test]
fn http_1_0_client_gets_its_answer_and_a_close() {
    let b = Backend::echo();
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    c.send(b"GET /old HTTP/1.0\r\n\r\n");
    let r = c.read_response();
    assert_eq!(r.status, 200);
    assert!(r.text().contains("GET /old "), "{}", r.text());
    assert!(r.says_close(), "{:?}", r.headers);
    c.expect_closed(T)
        .expect("an orderly close after the answer");
}

#[test]
fn http_1_0_keep_alive_client_is_kept() {
    let b = Backend::echo();
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    for i in 0..3 {
        c.send(format!("GET /k{i} HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").as_bytes());
        let r = c.read_response();
        assert_eq!(r.status, 200);
        assert!(r.text().contains(&format!("GET /k{i} ")), "{}", r.text());
        assert!(
            !r.close_delimited,
            "a kept-alive 1.0 client needs a delimited body"
        );
        assert!(
            !r.says_close(),
            "answer {i} keeps the connection: {:?}",
            r.headers
        );
        // A 1.0 client knows no persistence by default: the answer says keep-alive.
        let tokens = r.header_all("connection").join(",").to_ascii_lowercase();
        assert!(tokens.contains("keep-alive"), "answer {i}: {:?}", r.headers);
    }
}

#[test]
fn http_pipelined_requests_are_answered_in_order() {
    // Earlier requests take longer, and bodies differ in size and framing.
    let b = Backend::start(|r| {
        let i: u64 = r.target.trim_start_matches("/p").parse().unwrap_or(0);
        let body = format!("answer to {}", r.target).repeat(1 + i as usize * 50);
        let reply = if i.is_multiple_of(2) {
            response(200, "", body.as_bytes())
        } else {
            chunked_response(&[body.as_bytes()], &[])
        };
        vec![
            Step::Sleep(Duration::from_millis(100u64.saturating_sub(i * 20))),
            Step::Send(reply),
        ]
    });
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    let mut all = Vec::new();
    for i in 0..5 {
        all.extend_from_slice(&get(&format!("/p{i}")));
    }
    all.extend_from_slice(&request("POST", "/p5", "", b"pipelined body"));
    c.send(&all);
    for i in 0..6 {
        let r = c.read_response();
        assert_eq!(r.status, 200);
        let want = format!("answer to /p{i}").repeat(1 + i * 50);
        assert_eq!(r.text(), want, "response {i} out of order or cut");
    }
    let reqs = b.wait_requests(6, T);
    assert_eq!(reqs[5].body, b"pipelined body");
}

// ---------------------------------------------------------------------------------------------
// Framing of responses without a body, 1xx, Expect
// ---------------------------------------------------------------------------------------------

#[test]
fn http_head_response_has_no_body() {
    let b = Backend::fixed(1000);
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    c.send(&request("HEAD", "/h", "", b""));
    let h = c.read_head_response();
    assert_eq!(h.status, 200);
    assert_eq!(
        h.header("content-length"),
        Some("1000"),
        "HEAD keeps the length"
    );
    assert!(h.body.is_empty());
    // The next response starts right after the head: no stray body bytes in between.
    let r = c.roundtrip(&get("/g"));
    assert_eq!(r.status, 200);
    assert_eq!(r.body, body_pattern(1000));
    assert_eq!(b.wait_requests(2, T)[0].method, "HEAD");
}

#[test]
fn http_204_and_304_have_no_body() {
    let b = Backend::start(|r| match r.target.as_str() {
        "/204" => vec![Step::Send(
            b"HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n".to_vec(),
        )],
        "/304" => vec![Step::Send(
            b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Length: 77\r\n\r\n".to_vec(),
        )],
        _ => vec![Step::Send(echo_response(r))],
    });
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    let r = c.roundtrip(&get("/204"));
    assert_eq!((r.status, r.body.len()), (204, 0));
    assert_eq!(r.header("transfer-encoding"), None, "{:?}", r.headers);
    assert_eq!(r.header("content-length"), None, "{:?}", r.headers);
    let r = c.roundtrip(&get("/304"));
    assert_eq!((r.status, r.body.len()), (304, 0));
    assert_eq!(r.header("transfer-encoding"), None, "{:?}", r.headers);
    let r = c.roundtrip(&get("/after"));
    assert_eq!(r.status, 200);
    assert!(r.text().starts_with("GET /after "), "{}", r.text());
}

#[test]
fn http_informational_1xx_is_passed_before_the_final_response() {
    let b = Backend::start(|_| {
        vec![
            Step::Send(
                b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n".to_vec(),
            ),
            Step::Sleep(Duration::from_millis(100)),
            Step::Send(response(200, "", b"final")),
        ]
    });
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    c.send(&get("/early"));
    let first = c.read_response();
    assert_eq!(first.status, 103);
    assert_eq!(first.header("link"), Some("</style.css>; rel=preload"));
    let fin = c.read_response();
    assert_eq!((fin.status, fin.body.as_slice()), (200, &b"final"[..]));
    // The connection still works.
    assert_eq!(c.roundtrip(&get("/again")).status, 103);
    assert_eq!(c.read_response().status, 200);
}

#[test]
fn two_thousand_interim_responses_then_the_final_one_reach_the_client() {
    // E10 (docs/design.md#framing-passed-on-is-framing-understood): 2,000 `102 Processing` heads at
    // once (56,000 bytes, more than the 16 KiB server buffer) piled up in it and the client got a
    // reset after 606 of them. Each is passed on and forgotten; the final response follows, and the
    // connection is reused.
    const N: usize = 2000;
    let b = Backend::start(|_| {
        let mut all = b"HTTP/1.1 102 Processing\r\n\r\n".repeat(N);
        all.extend(response(200, "", b"final"));
        vec![Step::Send(all)]
    });
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    for round in 0..2 {
        c.send(&get("/slow"));
        for i in 0..N {
            let r = c
                .try_read_response(false, T)
                .unwrap_or_else(|e| panic!("round {round}: interim {i} of {N}: {e}"));
            assert_eq!(r.status, 102, "round {round}: interim {i}");
        }
        let fin = c.read_response();
        assert_eq!((fin.status, fin.body.as_slice()), (200, &b"final"[..]));
    }
}

#[test]
fn http_expect_100_continue_passes_through() {
    let b = Backend::echo();
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    c.send(b"PUT /up HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n");
    let interim = c.read_response();
    assert_eq!(
        interim.status, 100,
        "the client waits for 100 Continue before its body"
    );
    c.send(b"0123456789");
    let r = c.read_response();
    assert_eq!(r.status, 200);
    assert!(r.text().contains("body-length: 10\n"), "{}", r.text());
    let reqs = b.wait_requests(1, T);
    assert_eq!(reqs[0].body, b"0123456789");
    assert!(
        reqs[0].expects_continue(),
        "the server sees the Expect: {:?}",
        reqs[0].headers
    );
}

// ---------------------------------------------------------------------------------------------
// Bodies
// ---------------------------------------------------------------------------------------------

#[test]
fn http_chunked_request_and_response_stream_with_trailers() {
    let b = Backend::start(|r| {
        vec![Step::Send(chunked_response(
            &[b"resp-one ", &r.body, b" resp-two"],
            &[("X-Checksum", "c0ffee")],
        ))]
    });
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    c.send(b"POST /chunks HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n5\r\nhello\r\n");
    // The first chunk reaches the server before the client sends the rest: streamed, not held.
    assert!(
        wait_until(T, || b
            .received()
            .iter()
            .any(|c| c.windows(5).any(|w| w == b"hello"))),
        "the first chunk was held back: {:?}",
        b.received()
    );
    c.send(b"6\r\n world\r\n0\r\nX-Sum: 11\r\n\r\n");
    let r = c.read_response();
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "resp-one hello world resp-two");
    assert!(
        r.trailers
            .iter()
            .any(|(n, v)| n.eq_ignore_ascii_case("x-checksum") && v == "c0ffee"),
        "response trailers: {:?} (raw {:?})",
        r.trailers,
        String::from_utf8_lossy(&r.raw_body)
    );
    let req = &b.wait_requests(1, T)[0];
    assert_eq!(req.body, b"hello world");
    assert_eq!(req.header_all("transfer-encoding"), vec!["chunked"]);
    assert_eq!(req.header("content-length"), None);
    assert!(
        req.trailers
            .iter()
            .any(|(n, v)| n.eq_ignore_ascii_case("x-sum") && v == "11"),
        "request trailers: {:?}",
        req.trailers
    );
}

#[test]
fn http_close_delimited_response_reaches_the_client() {
    let b = Backend::start(|_| {
        vec![
            Step::Send(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\r\n".to_vec(),
            ),
            Step::Send(body_pattern(100_000)),
            Step::Sleep(Duration::from_millis(20)),
            Step::Send(body_pattern(50_000)),
            Step::Close,
        ]
    });
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    let r = c.roundtrip(&get("/stream"));
    assert_eq!(r.status, 200);
    let mut want = body_pattern(100_000);
    want.extend_from_slice(&body_pattern(50_000));
    assert_eq!(r.body.len(), want.len());
    assert!(r.body == want, "the body differs");
    if r.close_delimited {
        // Passed on close-delimited: then the connection must end with it.
        c.expect_closed(T)
            .expect("closed after a close-delimited body");
    }
}

#[test]
fn http_large_bodies_stream_both_ways_byte_exact() {
    const UP: usize = 6 << 20;
    const DOWN: usize = 7 << 20;
    let b = Backend::start(|r| {
        let ok = r.body == body_pattern(UP);
        let status = if ok {
            "X-Upload: ok\r\n"
        } else {
            "X-Upload: differs\r\n"
        };
        vec![Step::Send(response(200, status, &body_pattern(DOWN)))]
    });
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    let r = c.roundtrip(&request("POST", "/big", "", &body_pattern(UP)));
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("x-upload"),
        Some("ok"),
        "the server got the upload byte exact"
    );
    assert_eq!(r.body.len(), DOWN);
    assert!(r.body == body_pattern(DOWN), "the download differs");
    // And once more on the same connections, chunked this time.
    let mut up = b"POST /big HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let data = body_pattern(UP);
    let chunks: Vec<&[u8]> = data.chunks(1 << 20).collect();
    up.extend_from_slice(&chunked_body(&chunks, &[]));
    let r = c.roundtrip(&up);
    assert_eq!(r.header("x-upload"), Some("ok"));
    assert!(r.body == body_pattern(DOWN));
}

#[test]
fn http_content_length_bodies_stream_before_they_are_complete() {
    const HALF: usize = 256 * 1024;
    // Both bodies: the pattern, with a marker ending the first half.
    let body = || {
        let mut b = body_pattern(2 * HALF);
        b[HALF - 8..HALF].copy_from_slice(b"HALFMARK");
        b
    };
    let gate = Gate::new();
    let g = gate.clone();
    let b = Backend::start(move |_| {
        let body = body();
        let mut first =
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
        first.extend_from_slice(&body[..HALF]);
        vec![
            Step::Send(first),
            Step::Wait(g.clone()),
            Step::Send(body[HALF..].to_vec()),
        ]
    });
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    let up = body();
    c.send(
        format!(
            "PUT /half HTTP/1.1\r\nHost: h\r\nContent-Length: {}\r\n\r\n",
            up.len()
        )
        .as_bytes(),
    );
    c.send(&up[..HALF]);
    // Upload: the first half reaches the server while the client holds the second back.
    assert!(
        wait_until(T, || b
            .received()
            .iter()
            .any(|r| r.windows(8).any(|w| w == b"HALFMARK"))),
        "the server got {} bytes of a half-sent body: the proxy holds it",
        b.received_total()
    );
    c.send(&up[HALF..]);
    // Download: the first half reaches the client while the server holds the second back.
    c.read_until(b"HALFMARK", T);
    gate.open_once();
    let r = c.read_response();
    assert_eq!(r.status, 200);
    assert!(r.body == body(), "the download differs");
    assert!(b.wait_requests(1, T)[0].body == up, "the upload differs");
}

#[test]
fn http_sse_events_arrive_one_by_one() {
    let gate = Gate::new();
    let g = gate.clone();
    let b = Backend::start(move |_| {
        let ev = |n: &str| {
            let e = format!("data: {n}\n\n");
            format!("{:x}\r\n{e}\r\n", e.len()).into_bytes()
        };
        let mut head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        head.extend_from_slice(&ev("one"));
        vec![
            Step::Send(head),
            Step::Wait(g.clone()),
            Step::Send(ev("two")),
            Step::Wait(g.clone()),
            Step::Send(ev("three")),
            Step::Send(b"0\r\n\r\n".to_vec()),
        ]
    });
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    c.send(&request(
        "GET",
        "/events",
        "Accept: text/event-stream\r\n",
        b"",
    ));
    // Each event arrives while the server still holds the next one back.
    let got = c.read_until(b"data: one", T);
    assert!(!got.windows(3).any(|w| w == b"two"));
    gate.open_once();
    let got = c.read_until(b"data: two", T);
    assert!(!got.windows(5).any(|w| w == b"three"));
    gate.open_once();
    let r = c.read_response();
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "data: one\n\ndata: two\n\ndata: three\n\n");
}

// ---------------------------------------------------------------------------------------------
// Headers
// ---------------------------------------------------------------------------------------------

#[test]
fn http_hop_by_hop_headers_are_removed() {
    let b = Backend::start(|r| {
        let body = echo_text(r);
        vec![Step::Send(response(
            200,
            "Connection: X-Resp-Private\r\nX-Resp-Private: s\r\nKeep-Alive: timeout=5\r\nX-Resp-Public: p\r\n",
            body.as_bytes(),
        ))]
    });
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    let r = c.roundtrip(
        b"GET /hop HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Private\r\nX-Private: secret\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\nX-Public: ok\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    let req = &b.wait_requests(1, T)[0];
    for gone in ["x-private", "keep-alive", "proxy-connection", "te"] {
        assert!(!req.has(gone), "the server saw {gone}: {:?}", req.headers);
    }
    for v in req.header_all("connection") {
        assert!(
            !v.to_ascii_lowercase().contains("x-private"),
            "Connection: {v}"
        );
    }
    assert_eq!(req.header("x-public"), Some("ok"));
    for gone in ["x-resp-private", "keep-alive"] {
        assert!(
            r.header(gone).is_none(),
            "the client saw {gone}: {:?}",
            r.headers
        );
    }
    assert_eq!(r.header("x-resp-public"), Some("p"));
    // Framing is regenerated: exactly one of Content-Length / Transfer-Encoding goes on.
    c.roundtrip(
        b"POST /cl HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nabcde",
    );
    let mut up = b"POST /te HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    up.extend_from_slice(&chunked_body(&[b"abc"], &[]));
    c.roundtrip(&up);
    let reqs = b.wait_requests(3, T);
    assert_eq!(
        reqs[1].header_all("content-length"),
        vec!["5"],
        "{:?}",
        reqs[1].headers
    );
    assert!(!reqs[1].has("transfer-encoding"));
    assert_eq!(reqs[1].body, b"abcde");
    assert_eq!(
        reqs[2].header_all("transfer-encoding").len(),
        1,
        "{:?}",
        reqs[2].headers
    );
    assert!(!reqs[2].has("content-length"), "{:?}", reqs[2].headers);
    assert_eq!(reqs[2].body, b"abc");
}

#[test]
fn http_x_forwarded_for_appends_replaces_or_is_off() {
    let b = Backend::echo();
    let with_xff = request("GET", "/f", "X-Forwarded-For: 203.0.113.7\r\n", b"");
    let send = |http: &str, req: &[u8]| -> Request {
        let before = b.requests().len();
        let p = start_proxy(http, &[b.addr()]);
        assert_eq!(p.client().roundtrip(req).status, 200);
        b.wait_requests(before + 1, T)[before].clone()
    };
    // Append, from a trusted peer: the incoming list is kept and the peer appended.
    let trusted = "forwarded_for = \"append\"\ntrusted_proxies = [\"127.0.0.1\"]\n";
    assert_eq!(
        xff(&send(trusted, &with_xff)),
        vec!["203.0.113.7", "127.0.0.1"]
    );
    assert_eq!(xff(&send(trusted, &get("/n"))), vec!["127.0.0.1"]);
    // Append, from a peer that is not trusted: its list is dropped.
    let untrusted = "forwarded_for = \"append\"\ntrusted_proxies = [\"10.0.0.0/8\"]\n";
    assert_eq!(xff(&send(untrusted, &with_xff)), vec!["127.0.0.1"]);
    // Replace: only the peer, trusted or not.
    let replace = "forwarded_for = \"replace\"\ntrusted_proxies = [\"127.0.0.1\"]\n";
    assert_eq!(xff(&send(replace, &with_xff)), vec!["127.0.0.1"]);
    // Off: nothing added.
    let off = "forwarded_for = \"off\"\n";
    assert!(xff(&send(off, &get("/n"))).is_empty());
}

#[test]
fn http_x_forwarded_proto_and_host_are_set() {
    let b = Backend::echo();
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    let r = c.roundtrip(
        b"GET /ph HTTP/1.1\r\nHost: shop.example:8080\r\nX-Forwarded-Proto: https\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    let req = &b.wait_requests(1, T)[0];
    assert_eq!(
        req.header("host"),
        Some("shop.example:8080"),
        "Host passes unchanged"
    );
    assert_eq!(
        req.header_all("x-forwarded-proto"),
        vec!["http"],
        "set from the listener, a client's own value replaced"
    );
    assert_eq!(
        req.header_all("x-forwarded-host"),
        vec!["shop.example:8080"]
    );
    drop(p);
    let p = start_proxy(
        "x_forwarded_proto = false\nx_forwarded_host = false\n",
        &[b.addr()],
    );
    assert_eq!(p.client().roundtrip(&get("/off")).status, 200);
    let req = &b.wait_requests(2, T)[1];
    assert!(!req.has("x-forwarded-host"), "{:?}", req.headers);
}

#[test]
fn http_via_and_forwarded_when_enabled() {
    let b = Backend::echo();
    let p = start_proxy("via = \"edge1\"\nforwarded = true\n", &[b.addr()]);
    let r = p
        .client()
        .roundtrip(b"GET /v HTTP/1.1\r\nHost: shop.example\r\n\r\n");
    assert_eq!(r.status, 200);
    let via: Vec<&str> = r.header_all("via");
    assert!(
        via.iter().any(|v| v.contains("1.1 edge1")),
        "response Via: {via:?}"
    );
    let req = &b.wait_requests(1, T)[0];
    assert!(
        req.header_all("via")
            .iter()
            .any(|v| v.contains("1.1 edge1")),
        "request Via: {:?}",
        req.headers
    );
    let fwd = req.header_all("forwarded").join(",").to_ascii_lowercase();
    assert!(
        fwd.contains("for=127.0.0.1") || fwd.contains("for=\"127.0.0.1"),
        "Forwarded: {fwd}"
    );
    assert!(fwd.contains("proto=http"), "Forwarded: {fwd}");
    assert!(
        fwd.contains("host=shop.example") || fwd.contains("host=\"shop.example"),
        "Forwarded: {fwd}"
    );
    drop(p);
    // Off by default.
    let p = start_pen(&[b.addr()]);
    let r = p.client().roundtrip(&get("/d"));
    assert!(r.header("via").is_none(), "{:?}", r.headers);
    let req = &b.wait_requests(2, T)[1];
    assert!(
        !req.has("via") && !req.has("forwarded"),
        "{:?}",
        req.headers
    );
}

#[test]
fn http_request_id_is_added_when_absent_and_kept_when_present() {
    let b = Backend::echo();
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    c.roundtrip(&get("/a"));
    c.roundtrip(&get("/b"));
    c.roundtrip(&request("GET", "/c", "X-Request-ID: abc-123\r\n", b""));
    let reqs = b.wait_requests(3, T);
    let a = reqs[0].header_all("x-request-id");
    let bb = reqs[1].header_all("x-request-id");
    assert_eq!(a.len(), 1, "{:?}", reqs[0].headers);
    assert_eq!(bb.len(), 1, "{:?}", reqs[1].headers);
    assert!(a[0].len() >= 8, "an id worth the name: {:?}", a[0]);
    assert_ne!(a[0], bb[0], "each request its own id");
    assert_eq!(reqs[2].header_all("x-request-id"), vec!["abc-123"]);
    drop(p);
    let p = start_proxy("request_id = false\n", &[b.addr()]);
    p.client().roundtrip(&get("/none"));
    let req = &b.wait_requests(4, T)[3];
    assert!(!req.has("x-request-id"), "{:?}", req.headers);
}

#[test]
fn http_listener_header_edits_apply_to_requests_and_responses() {
    let b = Backend::start(|r| {
        vec![Step::Send(response(
            200,
            "Server: secret-server/1.0\r\nX-Frame-Options: SAMEORIGIN\r\n",
            echo_text(r).as_bytes(),
        ))]
    });
    let p = start_proxy(
        "request_headers = { remove = [\"X-Debug\"], set = { \"X-Env\" = \"prod\" }, add = { \"X-A\" = \"1\" } }\n\
         response_headers = { remove = [\"Server\"], set = { \"X-Frame-Options\" = \"DENY\" }, add = { \"X-Added\" = \"yes\" } }\n",
        &[b.addr()],
    );
    let r = p.client().roundtrip(&request(
        "GET",
        "/e",
        "X-Debug: 1\r\nx-env: dev\r\nX-A: 0\r\n",
        b"",
    ));
    assert_eq!(r.status, 200);
    let req = &b.wait_requests(1, T)[0];
    assert!(!req.has("x-debug"), "{:?}", req.headers);
    assert_eq!(req.header_all("x-env"), vec!["prod"]);
    assert_eq!(req.header_all("x-a"), vec!["0", "1"]);
    assert!(r.header("server").is_none(), "{:?}", r.headers);
    assert_eq!(r.header_all("x-frame-options"), vec!["DENY"]);
    assert_eq!(r.header_all("x-added"), vec!["yes"]);
}

#[test]
fn http_request_split_into_single_bytes_is_proxied_the_same() {
    let b = Backend::echo();
    let p = start_pen(&[b.addr()]);
    let req = request(
        "POST",
        "/split?q=1",
        "X-One: 1\r\nX-Two: two\r\n",
        b"a body of some length",
    );
    let mut whole = p.client();
    assert_eq!(whole.roundtrip(&req).status, 200);
    let mut bytewise = p.client();
    for byte in &req {
        bytewise.send(std::slice::from_ref(byte));
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(bytewise.read_response().status, 200);
    let reqs = b.wait_requests(2, T);
    let strip = |r: &Request| {
        let h: Vec<(String, String)> = r
            .headers
            .iter()
            .filter(|(n, _)| !n.eq_ignore_ascii_case("x-request-id"))
            .cloned()
            .collect();
        (
            r.method.clone(),
            r.target.clone(),
            r.version.clone(),
            h,
            r.body.clone(),
        )
    };
    assert_eq!(strip(&reqs[0]), strip(&reqs[1]));
}

#[test]
fn underscore_identity_headers_never_reach_the_server() {
    // E7: CGI, WSGI and PHP read `X_Forwarded_For` and `X_Client_Cert_Subject` as the fields
    // Quill writes or removes itself; nginx drops such names by default, and so does Quill.
    let b = Backend::echo();
    let p = start_proxy("", &[b.addr()]);
    let raw = b"GET /u HTTP/1.1\r\nHost: shop.example\r\nX_Forwarded_For: 6.6.6.6\r\n\
                X_Client_Cert_Subject: CN=admin\r\nX-Client-Cert_Subject: CN=admin\r\n\
                X_Custom: 1\r\nX-Kept: 1\r\n\r\n";
    assert_eq!(p.client().roundtrip(raw).status, 200);
    let req = &b.wait_requests(1, T)[0];
    assert!(
        req.headers.iter().all(|(n, _)| !n.contains('_')),
        "{:?}",
        req.headers
    );
    assert_eq!(req.header_all("x-forwarded-for"), vec!["127.0.0.1"]);
    assert_eq!(req.header_all("x-kept"), vec!["1"]);
    drop(p);
    // Kept on request, but never the spellings of what Quill writes or removes itself.
    let p = start_proxy("underscores_in_headers = true\n", &[b.addr()]);
    assert_eq!(p.client().roundtrip(raw).status, 200);
    let req = &b.wait_requests(2, T)[1];
    let names: Vec<&str> = req.headers.iter().map(|(n, _)| n.as_str()).collect();
    assert!(
        names.iter().any(|n| n.eq_ignore_ascii_case("x_custom")),
        "{names:?}"
    );
    assert!(
        !names
            .iter()
            .any(|n| n.contains('_') && !n.eq_ignore_ascii_case("x_custom")),
        "{names:?}"
    );
    assert_eq!(req.header_all("x-forwarded-for"), vec!["127.0.0.1"]);
}
