//! Issue 26 point 2 and 4: HTTP/2 streams on the HTTP path that exists. ALPN h2 by default on
//! TLS, h2c with prior knowledge when configured, requests reaching servers as strict HTTP/1.1
//! (`:authority` as `Host`, cookie crumbs joined, the scheme in `X-Forwarded-Proto`), bodies
//! both ways within flow control, trailers, 421 for a name the connection cannot serve, the
//! access log and the metrics; and the downgrade rules, refused before a byte reaches a server.

use std::time::Duration;

use crate::admin_support;
use crate::http_support::{body_pattern, chunked_response, response, Backend, Step};
use crate::kit::{client, curl, start_h2c, start_tls};
use crate::support::{Quill, IO_TIMEOUT};
use crate::tls_support::{toml_path, Ca, KeyAlg};

#[test]
fn tls_http_listener_offers_h2_by_alpn_and_still_serves_http11() {
    let backend = Backend::echo();
    let q = start_tls(&backend, "", "");
    let url = format!("https://localhost:{}/x", q.port);
    let resolve = format!("localhost:{}:127.0.0.1", q.port);
    let (out, err, ok) = curl(&["-sik", "--http2", "--resolve", &resolve, &url]);
    assert!(ok && out.starts_with("HTTP/2 200"), "{out}\n{err}");
    let (out, err, ok) = curl(&["-sik", "--http1.1", "--resolve", &resolve, &url]);
    assert!(ok && out.starts_with("HTTP/1.1 200"), "{out}\n{err}");
}

#[test]
fn alpn_http11_only_turns_http2_off() {
    let backend = Backend::echo();
    let q = start_tls(&backend, "alpn = [\"http/1.1\"]", "");
    let url = format!("https://localhost:{}/x", q.port);
    let resolve = format!("localhost:{}:127.0.0.1", q.port);
    let (out, err, ok) = curl(&["-sik", "--http2", "--resolve", &resolve, &url]);
    assert!(ok && out.starts_with("HTTP/1.1 200"), "{out}\n{err}");
}

#[test]
fn h2c_prior_knowledge_and_http11_share_the_port_when_configured() {
    let backend = Backend::echo();
    let q = start_h2c(&backend, "", "");
    let url = format!("http://127.0.0.1:{}/x", q.port);
    let (out, err, ok) = curl(&["-si", "--http2-prior-knowledge", &url]);
    assert!(ok && out.starts_with("HTTP/2 200"), "{out}\n{err}");
    let (out, err, ok) = curl(&["-si", &url]);
    assert!(ok && out.starts_with("HTTP/1.1 200"), "{out}\n{err}");
    assert_eq!(backend.wait_requests(2, IO_TIMEOUT).len(), 2);
}

#[test]
fn h2c_is_not_taken_unless_configured() {
    let backend = Backend::echo();
    let q = Quill::start(&["-H"], &[backend.addr().to_string()]);
    let r = client(q.port, &["--request", "GET /"]);
    assert_eq!(r.status(1), None, "{:?}", r.lines);
    assert!(
        backend.requests().is_empty(),
        "the HTTP/2 preface reached no server"
    );
}

#[test]
fn request_reaches_the_server_as_strict_http11_with_host_cookies_and_scheme() {
    let backend = Backend::echo();
    let q = start_h2c(&backend, "", "");
    let r = client(
        q.port,
        &[
            "--authority",
            "example.test:8080",
            "--request",
            "GET /a/b?c=d",
            "--header",
            "cookie: a=1",
            "--header",
            "accept: */*",
            "--header",
            "cookie: b=2",
            "--header",
            "te: trailers",
        ],
    );
    assert_eq!(r.status(1), Some(200), "{:?}", r.lines);
    let reqs = backend.wait_requests(1, IO_TIMEOUT);
    let req = &reqs[0];
    assert_eq!(
        (
            req.method.as_str(),
            req.target.as_str(),
            req.version.as_str()
        ),
        ("GET", "/a/b?c=d", "HTTP/1.1")
    );
    assert_eq!(req.header("host"), Some("example.test:8080"));
    assert_eq!(req.header("cookie"), Some("a=1; b=2"));
    assert_eq!(req.header("x-forwarded-proto"), Some("http"));
    assert!(!req.has("te"), "te is hop-by-hop: {:?}", req.headers);
    // The response came back without HTTP/1's connection fields.
    assert!(r.header(1, "connection").is_none(), "{:?}", r.lines);
    assert!(r.header(1, "keep-alive").is_none());
}

#[test]
fn x_forwarded_proto_is_https_over_tls() {
    let backend = Backend::echo();
    let q = start_tls(&backend, "", "");
    let r = client(
        q.port,
        &["--tls", "--authority", "localhost", "--request", "GET /"],
    );
    assert_eq!(r.status(1), Some(200), "{:?} {}", r.lines, r.stderr);
    let reqs = backend.wait_requests(1, IO_TIMEOUT);
    assert_eq!(reqs[0].header("x-forwarded-proto"), Some("https"));
}

#[test]
fn request_bodies_stream_to_the_server_with_length_or_chunked() {
    let backend = Backend::echo();
    let q = start_h2c(&backend, "", "");
    // 300 KiB: more than a stream's window, so the client waits for Quill's WINDOW_UPDATEs.
    let n = 300 * 1024;
    let r = client(
        q.port,
        &["--request", "POST /up", "--body-bytes", &n.to_string()],
    );
    assert_eq!(r.status(1), Some(200), "{:?}", r.lines);
    assert!(r.body_text(1).contains(&format!("body-length: {n}")));
    let r = client(
        q.port,
        &[
            "--request",
            "POST /up",
            "--body-bytes",
            &n.to_string(),
            "--no-length",
        ],
    );
    assert_eq!(r.status(1), Some(200), "{:?}", r.lines);
    let reqs = backend.wait_requests(2, IO_TIMEOUT);
    assert_eq!(reqs[0].header("content-length"), Some(&*n.to_string()));
    assert_eq!(reqs[0].body.len(), n);
    assert_eq!(reqs[1].header("transfer-encoding"), Some("chunked"));
    assert_eq!(reqs[1].body.len(), n);
    let sent: Vec<u8> = (0..n).map(|i| (i % 256) as u8).collect();
    assert!(
        reqs[0].body == sent && reqs[1].body == sent,
        "bodies differ"
    );
}

#[test]
fn request_trailers_reach_the_server_in_the_chunked_body() {
    let backend = Backend::echo();
    let q = start_h2c(&backend, "", "");
    let r = client(
        q.port,
        &[
            "--request",
            "POST /t",
            "--body-bytes",
            "1000",
            "--no-length",
            "--trailer",
            "x-checksum: 42",
        ],
    );
    assert_eq!(r.status(1), Some(200), "{:?}", r.lines);
    let reqs = backend.wait_requests(1, IO_TIMEOUT);
    assert_eq!(
        reqs[0].trailers,
        [("x-checksum".to_string(), "42".to_string())]
    );
}

#[test]
fn a_one_mebibyte_download_arrives_whole_through_the_windows() {
    let n = 1024 * 1024;
    let backend = Backend::fixed(n);
    let q = start_h2c(&backend, "", "");
    let r = client(q.port, &["--request", "GET /big", "--request", "GET /big"]);
    let want = body_pattern(n);
    for sid in [1, 3] {
        assert_eq!(r.status(sid), Some(200), "{:?}", r.lines);
        assert_eq!(r.body_len(sid), n);
        assert!(r.body_is(sid, &want), "stream {sid}: the body differs");
    }
}

/// Over TLS the connection's output goes out a record a write while more frames are written
/// behind it, and each record is sealed from the output's bytes: four downloads at once arrive
/// every byte in order.
#[test]
fn downloads_over_tls_arrive_byte_for_byte() {
    let n = 1024 * 1024 + 12_345;
    let backend = Backend::fixed(n);
    let q = start_tls(&backend, "", "");
    let mut args = vec!["--tls"];
    for _ in 0..4 {
        args.extend(["--request", "GET /big"]);
    }
    let r = client(q.port, &args);
    let want = body_pattern(n);
    for sid in [1, 3, 5, 7] {
        assert_eq!(r.status(sid), Some(200), "{:?}", r.lines);
        assert!(r.body_is(sid, &want), "stream {sid}: the body differs");
    }
}

#[test]
fn chunked_response_becomes_data_and_its_trailers_http2_trailers() {
    let backend = Backend::start(|_| {
        vec![Step::Send(chunked_response(
            &[b"hello ", b"world"],
            &[("X-Checksum", "abc")],
        ))]
    });
    let q = start_h2c(&backend, "", "");
    let r = client(q.port, &["--request", "GET /c"]);
    assert_eq!(r.status(1), Some(200), "{:?}", r.lines);
    assert_eq!(r.body_text(1), "hello world");
    assert_eq!(
        r.trailers(1).get("x-checksum").map(String::as_str),
        Some("abc")
    );
    assert!(r.header(1, "transfer-encoding").is_none());
}

/// A response of many small chunks that arrives all at once is sent whole without the client
/// sending anything more (the HTTP/2 side turns a bounded number of chunks into frames a pass,
/// then takes the rest in the next pass, not at the client's next frame).
#[test]
fn a_response_of_many_small_chunks_is_sent_whole_without_waiting_for_the_client() {
    let chunks: Vec<Vec<u8>> = (0..300).map(|i| format!("{:03}", i).into_bytes()).collect();
    let parts: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
    let whole: String = chunks.iter().map(|c| String::from_utf8_lossy(c)).collect();
    let reply = chunked_response(&parts, &[]);
    let backend = Backend::start(move |_| vec![Step::Send(reply.clone())]);
    let q = start_h2c(&backend, "", "");
    let started = std::time::Instant::now();
    let r = client(q.port, &["--timeout", "3", "--request", "GET /many"]);
    assert_eq!(r.status(1), Some(200), "{:?}", r.lines);
    assert_eq!(r.body_text(1), whole);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "the response waited for the client's timeout"
    );
}

#[test]
fn fifty_streams_share_one_connection_and_its_server_connections() {
    let backend = Backend::echo();
    let q = start_h2c(&backend, "", "");
    let mut args = Vec::new();
    for i in 0..50 {
        args.push("--request".to_string());
        args.push(format!("GET /s{i}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = client(q.port, &args);
    for i in 0..50 {
        let sid = 1 + 2 * i;
        assert_eq!(r.status(sid), Some(200), "stream {sid}: {:?}", r.lines);
        assert!(r.body_text(sid).contains(&format!("GET /s{i} HTTP/1.1")));
    }
    assert_eq!(backend.wait_requests(50, IO_TIMEOUT).len(), 50);
    assert!(
        backend.accepted() <= 50,
        "{} server connections",
        backend.accepted()
    );
}

#[test]
fn a_name_this_connection_cannot_serve_gets_421_so_the_browser_connects_again() {
    let backend = Backend::fixed(2);
    let ca = Ca::new("Site CA");
    let a = ca.server("a", &["a.test"], KeyAlg::EcdsaP256);
    let b = ca.server("b", &["b.test", "*.b.test"], KeyAlg::EcdsaP256);
    let addr = backend.addr();
    let q = Quill::start_with(|dir, port| {
        let (ac, ak) = a.write(dir, "a");
        let (bc, bk) = b.write(dir, "b");
        let text = format!(
            "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nservers = [\"{addr}\"]\n[listener.tls]\ncerts = [ {{ cert = \"{}\", key = \"{}\" }}, {{ cert = \"{}\", key = \"{}\" }} ]\n",
            toml_path(&ac),
            toml_path(&ak),
            toml_path(&bc),
            toml_path(&bk)
        );
        let cfg = dir.join("quill.toml");
        std::fs::write(&cfg, text).unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    });
    let r = client(
        q.port,
        &[
            "--tls",
            "--sni",
            "b.test",
            "--request",
            "GET / www.b.test",
            "--request",
            "GET / a.test",
        ],
    );
    assert_eq!(r.status(1), Some(200), "{:?} {}", r.lines, r.stderr);
    assert_eq!(r.status(3), Some(421), "{:?}", r.lines);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(backend.requests().len(), 1, "the 421 reached no server");
}

#[test]
fn access_log_line_says_http2() {
    let backend = Backend::echo();
    let q = start_h2c(&backend, "", "");
    let r = client(q.port, &["--request", "GET /logged"]);
    assert_eq!(r.status(1), Some(200));
    let log = q.path("access.log");
    let mut text = String::new();
    for _ in 0..100 {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("/logged") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(text.contains("\"GET /logged HTTP/2.0\" 200"), "{text}");
}

#[test]
fn metrics_count_http2_connections_and_streams() {
    let backend = Backend::echo();
    let addr = backend.addr();
    let (q, admin) = admin_support::start_with_admin(|dir, port, admin| {
        let text = format!(
            "admin = \"{admin}\"\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nservers = [\"{addr}\"]\n[listener.http]\nh2c = true\n"
        );
        let cfg = dir.join("quill.toml");
        std::fs::write(&cfg, text).unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    });
    let r = client(
        q.port,
        &[
            "--request",
            "GET /1",
            "--request",
            "GET /2",
            "--request",
            "GET /3",
        ],
    );
    assert_eq!(r.status(5), Some(200));
    let m = admin_support::metrics(admin);
    assert_eq!(m.value("quill_h2_connections_total", &[]), 1.0);
    assert_eq!(m.value("quill_h2_streams_total", &[]), 3.0);
}

/// Each request breaks one rule of RFC 9113 §8.2 or §8.1.1: the stream is reset with
/// PROTOCOL_ERROR and not one byte reaches the server.
#[test]
fn downgrade_rules_refuse_a_request_before_it_reaches_a_server() {
    let backend = Backend::echo();
    let q = start_h2c(&backend, "", "");
    let cases: &[&[&str]] = &[
        &["--header", "X-Upper: 1"],
        &["--header", "connection: close"],
        &["--header", "transfer-encoding: chunked"],
        &["--header", "keep-alive: 5"],
        &["--header", "upgrade: websocket"],
        &["--header", "proxy-connection: x"],
        &["--header", "te: gzip"],
        &["--header", "x-a: b\r\nx-injected: 1"],
        &["--header", "x-a: b\nx-injected: 1"],
        &["--header", "host: other.test"],
        &["--header", "content-length: 5"],
        &["--header", ":path: /again"],
        &["--header", ":protocol: websocket"],
        &["--body-bytes", "10", "--header", "content-length: 9"],
    ];
    for case in cases {
        let mut args = vec!["--request", "GET /", "--authority", "h.test"];
        args.extend_from_slice(case);
        let r = client(q.port, &args);
        assert!(
            r.reset(1) == Some(1) || matches!(r.goaway(), Some((1, _))),
            "{case:?}: {:?}",
            r.lines
        );
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(backend.received_total(), 0, "{:?}", backend.received());
}

#[test]
fn server_failure_before_any_response_byte_is_a_502_on_the_stream() {
    let backend = Backend::start(|_| vec![Step::Reset]);
    let q = start_h2c(&backend, "", "");
    let r = client(q.port, &["--request", "GET /", "--request", "GET /2"]);
    assert_eq!(r.status(1), Some(502), "{:?}", r.lines);
    assert_eq!(r.status(3), Some(502), "{:?}", r.lines);
    assert!(
        r.goaway().is_none(),
        "the connection goes on: {:?}",
        r.lines
    );
}

#[test]
fn server_cutting_a_response_resets_only_its_stream() {
    let backend = Backend::start(|r| {
        if r.target == "/cut" {
            vec![
                Step::Send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc".to_vec()),
                Step::Reset,
            ]
        } else {
            vec![Step::Send(response(200, "", b"fine"))]
        }
    });
    let q = start_h2c(&backend, "", "");
    let r = client(q.port, &["--request", "GET /cut", "--request", "GET /ok"]);
    assert_eq!(r.status(1), Some(200));
    assert!(
        r.reset(1).is_some(),
        "a cut body is a reset stream: {:?}",
        r.lines
    );
    assert_eq!(r.status(3), Some(200));
    assert_eq!(r.body_text(3), "fine");
}

/// The request-smuggling corpus with an HTTP/2 front (docs/http2.md#what-is-refused-and-why): each
/// of its 159 cases' method, target and fields sent as one HTTP/2 request exactly as given. Every
/// case is refused (reset, a 4xx, or the connection closed) or reaches the server as one normalised
/// HTTP/1.1 request (it parses strictly, carries at most one framing field, and none of the
/// case's non-compliant fields as they came), and no Severe case reaches it at all; the server
/// never sees bytes it cannot parse.
#[test]
fn desync_corpus_through_an_http2_front_is_refused_or_normalised() {
    use crate::desync::{loaded_corpus, normalised};
    use std::fmt::Write as _;
    let cases = loaded_corpus();
    assert_eq!(cases.len(), 159);
    let backend = Backend::echo();
    let q = start_h2c(&backend, "", "");
    let hex = |b: &[u8]| {
        let mut s = String::from("h");
        for x in b {
            let _ = write!(s, "{x:02x}");
        }
        s
    };
    let mut file = String::new();
    for c in &cases {
        // A plain Content-Length gets a body of that length (at most 64 bytes), so a forwarded
        // request completes.
        let body = c
            .headers
            .iter()
            .find(|(n, _, _)| n.eq_ignore_ascii_case(b"content-length"))
            .and_then(|(_, v, _)| std::str::from_utf8(v).ok()?.parse::<usize>().ok())
            .unwrap_or(0)
            .min(64);
        let _ = write!(
            file,
            "{} {} {}",
            hex(&c.method),
            hex(&c.uri),
            hex(body.to_string().as_bytes())
        );
        // Names in lower case, as HTTP/2 requires and every client library sends them (an
        // upper-case name is refused outright, which would hide what the case's value does).
        for (n, v, _) in &c.headers {
            let _ = write!(file, " {} {}", hex(&n.to_ascii_lowercase()), hex(v));
        }
        file.push('\n');
    }
    let path = q.path("cases.txt");
    std::fs::write(&path, file).unwrap();
    let (out, err, ok) = crate::kit::run(
        std::process::Command::new(crate::kit::PYTHON)
            .arg(crate::kit::script("desync.py"))
            .arg("--port")
            .arg(q.port.to_string())
            .arg("--cases")
            .arg(&path),
        Duration::from_secs(240),
    );
    assert!(ok, "{out}\n{err}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        backend.errors().is_empty(),
        "the server saw bytes it could not parse: {:?}",
        backend.errors()
    );
    let reqs = backend.requests();
    let mut failures = Vec::new();
    let mut tally = std::collections::BTreeMap::new();
    for (i, line) in out.lines().enumerate() {
        let c = &cases[i];
        let forwarded: Vec<_> = reqs
            .iter()
            .filter(|r| r.header("x-case") == Some(&*i.to_string()))
            .collect();
        let outcome = line.split_once(' ').map_or("", |(_, r)| r);
        let outcome = outcome.split_once(' ').map_or("", |(_, r)| r);
        match forwarded.as_slice() {
            [] => *tally.entry("refused").or_insert(0) += 1,
            [r] => {
                let mut got = r.raw_head.clone();
                got.extend_from_slice(&r.raw_body);
                match normalised(c, &got) {
                    Ok(()) => *tally.entry("normalised").or_insert(0) += 1,
                    Err(e) => failures.push(format!("{:?} [{}]: {e}", c.name, c.tier)),
                }
            }
            many => failures.push(format!("{:?}: {} requests", c.name, many.len())),
        }
        // A case made Severe by its version line has nothing to carry it over HTTP/2 (which has
        // no version field): the rest of it is an ordinary request, judged as normalised above.
        let version_only = c.version != b"HTTP/1.1";
        if c.tier == "Severe" && !version_only && !forwarded.is_empty() {
            failures.push(format!(
                "{:?}: a Severe case was forwarded ({outcome})",
                c.name
            ));
        }
    }
    assert_eq!(out.lines().count(), 159, "{out}\n{err}");
    eprintln!("h2 corpus outcomes: {tally:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The front is not one that refuses everything: most Compliant cases go through.
    let compliant = cases.iter().filter(|c| c.tier == "Compliant").count();
    assert!(
        tally.get("normalised").copied().unwrap_or(0) * 2 >= compliant,
        "{tally:?} for {compliant} Compliant cases"
    );
}

/// A server's 103 and its final response in one write: the stream's session writes both header
/// blocks into the pipe before the connection takes either, and each reaches the client.
#[test]
fn an_interim_response_and_the_final_one_in_one_write_both_reach_the_client() {
    let backend = Backend::start(|_| {
        vec![Step::Send(
            b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Final: yes\r\n\r\nhi".to_vec(),
        )]
    });
    let q = start_h2c(&backend, "", "");
    let r = client(q.port, &["--request", "GET /"]);
    assert_eq!(r.interim(1), vec![103], "{:?}", r.lines);
    assert_eq!(r.status(1), Some(200), "{:?}", r.lines);
    assert_eq!(
        r.header(1, "x-final").as_deref(),
        Some("yes"),
        "{:?}",
        r.lines
    );
    assert_eq!(r.body_text(1), "hi", "{:?}", r.lines);
}

/// Two interim responses and a chunked final one in one write, and a 103 apart from its final
/// response: every head reaches the client, the body whole.
#[test]
fn interim_responses_together_or_apart_all_reach_the_client() {
    let backend = Backend::start(|r| {
        if r.target == "/apart" {
            vec![
                Step::Send(b"HTTP/1.1 103 Early Hints\r\nLink: <a>\r\n\r\n".to_vec()),
                Step::Sleep(Duration::from_millis(300)),
                Step::Send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi".to_vec()),
            ]
        } else {
            vec![Step::Send(
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: <a>\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n".to_vec(),
            )]
        }
    });
    let q = start_h2c(&backend, "", "");
    let r = client(
        q.port,
        &["--request", "GET /together", "--request", "GET /apart"],
    );
    for stream in [1, 3] {
        assert_eq!(r.status(stream), Some(200), "{:?}", r.lines);
        assert_eq!(r.body_text(stream), "hi", "{:?}", r.lines);
    }
    assert_eq!(r.interim(3), vec![103], "{:?}", r.lines);
}

/// A field an edit adds goes to an HTTP/2 client without the spaces around its configured value
/// (RFC 9113 §8.2.1 forbids them), as an HTTP/1.1 client reads it.
#[test]
fn an_added_field_goes_without_the_spaces_around_its_configured_value() {
    let backend = Backend::start(|_| vec![Step::Send(response(200, "", b"ok"))]);
    let q = start_h2c(
        &backend,
        "response_headers = { set = { \"X-Sp\" = \" padded \" } }",
        "",
    );
    let r = client(q.port, &["--request", "GET /"]);
    assert_eq!(r.status(1), Some(200), "{:?}", r.lines);
    assert!(
        r.lines.iter().any(|l| l == "stream 1 header x-sp: padded"),
        "{:?}",
        r.lines
    );
}

/// HEAD, 304 and 204 responses keep the fields an HTTP/1.1 client would get: the server's
/// Content-Length of HEAD and 304 (once), none for 204, and no hop-by-hop field.
#[test]
fn head_304_and_204_responses_carry_the_fields_an_http1_client_gets() {
    let backend = Backend::start(|r| {
        if r.target == "/304" {
            vec![Step::Send(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\nETag: \"x\"\r\nCONNECTION: X-Hop\r\nX-Hop: 1\r\nX-UP: Up\r\n\r\n".to_vec())]
        } else if r.target == "/204" {
            vec![Step::Send(
                b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nX-B: b\r\n\r\n".to_vec(),
            )]
        } else {
            vec![Step::Send(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\nKeep-Alive: timeout=5\r\nX-Obs: caf\xe9\r\n\r\n".to_vec())]
        }
    });
    let q = start_h2c(&backend, "", "");
    let r = client(
        q.port,
        &[
            "--request",
            "HEAD /h",
            "--request",
            "GET /304",
            "--request",
            "GET /204",
        ],
    );
    assert_eq!(r.status(1), Some(200), "{:?}", r.lines);
    assert_eq!(r.header(1, "content-length").as_deref(), Some("5"));
    assert!(r.header(1, "keep-alive").is_none());
    assert_eq!(r.status(3), Some(304), "{:?}", r.lines);
    assert_eq!(r.header(3, "content-length").as_deref(), Some("7"));
    assert!(r.header(3, "x-hop").is_none() && r.header(3, "connection").is_none());
    assert_eq!(r.header(3, "x-up").as_deref(), Some("Up"));
    assert_eq!(r.status(5), Some(204), "{:?}", r.lines);
    assert!(r.header(5, "content-length").is_none());
    assert_eq!(r.header(5, "x-b").as_deref(), Some("b"));
}
