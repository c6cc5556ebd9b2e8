use proptest::prelude::*;

use super::*;
use crate::cgi::translate::tests::dechunk;
use crate::fastcgi::tests::read_pairs;
use crate::fastcgi::{header, kind, padding_len};

fn cx<'a>(script: &'a [u8], path_info: &'a [u8]) -> Context<'a> {
    Context {
        remote: "192.0.2.7:51000".parse().unwrap(),
        local: Some("127.0.0.1:8080".parse().unwrap()),
        https: false,
        document_root: b"/srv/www",
        document_uri: b"/a.php/x",
        script_name: script,
        path_info,
        server_software: b"quill",
        max_body: 1 << 20,
    }
}

/// The records of `bytes`: (type, content), padding checked away.
fn records(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        assert!(bytes.len() >= 8, "a whole header");
        assert_eq!(bytes[0], 1, "version");
        assert_eq!(u16::from_be_bytes([bytes[2], bytes[3]]), REQUEST_ID);
        let len = usize::from(u16::from_be_bytes([bytes[4], bytes[5]]));
        let pad = usize::from(bytes[6]);
        out.push((bytes[1], bytes[8..8 + len].to_vec()));
        bytes = &bytes[8 + len + pad..];
    }
    out
}

/// The stream of one type, joined.
fn stream(recs: &[(u8, Vec<u8>)], t: u8) -> Vec<u8> {
    recs.iter()
        .filter(|(k, _)| *k == t)
        .flat_map(|(_, c)| c.clone())
        .collect()
}

/// Name-value pairs of a PARAMS stream, as text.
fn pairs(b: &[u8]) -> Vec<(String, String)> {
    let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
    read_pairs(b)
        .iter()
        .map(|(n, v)| (text(n), text(v)))
        .collect()
}

fn param<'a>(p: &'a [(String, String)], name: &str) -> Option<&'a str> {
    p.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// Everything the gateway makes of `request` (written in pieces of `cut` bytes).
fn send(g: &mut Gateway, request: &[u8], cut: usize) -> Vec<(u8, Vec<u8>)> {
    for piece in request.chunks(cut.max(1)) {
        assert_eq!(g.write(piece).unwrap(), piece.len());
    }
    let out = g.output().to_vec();
    g.sent(out.len());
    records(&out)
}

fn record(t: u8, content: &[u8]) -> Vec<u8> {
    let pad = padding_len(content.len());
    let mut r = header(t, REQUEST_ID, content.len() as u16, pad).to_vec();
    r.extend_from_slice(content);
    r.extend(std::iter::repeat_n(0, usize::from(pad)));
    r
}

fn end(status: u8) -> Vec<u8> {
    record(kind::END_REQUEST, &[0, 0, 0, 0, status, 0, 0, 0])
}

#[test]
fn a_get_becomes_begin_keep_conn_params_and_an_empty_stdin() {
    let mut g = Gateway::new();
    g.begin(&cx(b"/a.php", b"/x"));
    let req = b"GET /a.php/x?q=1 HTTP/1.1\r\nHost: example.com:8080\r\nProxy: evil\r\nX-A: 1\r\nX-A: 2\r\nCookie: a=1\r\nCookie: b=2\r\nConnection: keep-alive\r\n\r\n";
    let recs = send(&mut g, req, 1000);
    assert_eq!(recs[0], (kind::BEGIN_REQUEST, vec![0, 1, 1, 0, 0, 0, 0, 0]));
    let p = pairs(&stream(&recs, kind::PARAMS));
    assert_eq!(param(&p, "SCRIPT_FILENAME"), Some("/srv/www/a.php"));
    assert_eq!(param(&p, "SCRIPT_NAME"), Some("/a.php"));
    assert_eq!(param(&p, "PATH_INFO"), Some("/x"));
    assert_eq!(param(&p, "QUERY_STRING"), Some("q=1"));
    assert_eq!(param(&p, "REQUEST_URI"), Some("/a.php/x?q=1"));
    assert_eq!(param(&p, "REQUEST_METHOD"), Some("GET"));
    assert_eq!(param(&p, "SERVER_NAME"), Some("example.com"));
    assert_eq!(param(&p, "REMOTE_ADDR"), Some("192.0.2.7"));
    assert_eq!(param(&p, "REMOTE_PORT"), Some("51000"));
    assert_eq!(param(&p, "SERVER_PORT"), Some("8080"));
    assert_eq!(param(&p, "HTTP_HOST"), Some("example.com:8080"));
    assert_eq!(param(&p, "HTTP_X_A"), Some("1, 2"));
    assert_eq!(param(&p, "HTTP_COOKIE"), Some("a=1; b=2"));
    assert_eq!(param(&p, "HTTP_PROXY"), None, "httpoxy");
    assert_eq!(param(&p, "HTTP_CONNECTION"), None, "hop-by-hop");
    assert_eq!(param(&p, "CONTENT_LENGTH"), None);
    assert_eq!(param(&p, "HTTPS"), None);
    // The PARAMS stream and STDIN each end with an empty record.
    let last = &recs[recs.len() - 2..];
    assert_eq!(last[0], (kind::PARAMS, vec![]));
    assert_eq!(last[1], (kind::STDIN, vec![]));
    // Nothing more is taken for this request.
    assert_eq!(g.write(b"x"), Err(Error::Unexpected));
}

#[test]
fn a_body_with_length_streams_as_stdin_in_any_pieces() {
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut req = format!(
        "POST /a.php HTTP/1.1\r\nHost: h\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    for cut in [1usize, 7, 4096, 1 << 20] {
        let mut g = Gateway::new();
        g.begin(&cx(b"/a.php", b""));
        let recs = send(&mut g, &req, cut);
        let p = pairs(&stream(&recs, kind::PARAMS));
        assert_eq!(param(&p, "CONTENT_LENGTH"), Some("200000"));
        assert_eq!(param(&p, "CONTENT_TYPE"), Some("text/plain"));
        assert_eq!(stream(&recs, kind::STDIN), body, "cut {cut}");
        assert_eq!(recs.last().unwrap(), &(kind::STDIN, vec![]));
    }
}

#[test]
fn a_chunked_body_is_collected_and_sent_with_its_length() {
    let req = b"POST /a.php HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n";
    for cut in [1usize, 3, 1000] {
        let mut g = Gateway::new();
        g.begin(&cx(b"/a.php", b""));
        let recs = send(&mut g, req, cut);
        let p = pairs(&stream(&recs, kind::PARAMS));
        assert_eq!(param(&p, "CONTENT_LENGTH"), Some("11"));
        assert_eq!(param(&p, "HTTP_TRANSFER_ENCODING"), None);
        assert_eq!(stream(&recs, kind::STDIN), b"hello world");
    }
}

#[test]
fn a_chunked_body_over_max_body_is_refused() {
    let mut g = Gateway::new();
    let mut c = cx(b"/a.php", b"");
    c.max_body = 4;
    g.begin(&c);
    let req = b"POST /a.php HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    assert_eq!(g.write(req), Err(Error::BodyTooLarge));
}

#[test]
fn https_is_on_over_tls() {
    let mut g = Gateway::new();
    let mut c = cx(b"/a.php", b"");
    c.https = true;
    g.begin(&c);
    let recs = send(&mut g, b"GET /a.php HTTP/1.1\r\nHost: h\r\n\r\n", 100);
    let p = pairs(&stream(&recs, kind::PARAMS));
    assert_eq!(param(&p, "HTTPS"), Some("on"));
    assert_eq!(param(&p, "REQUEST_SCHEME"), Some("https"));
}

/// Reads `records` through the gateway in pieces of `cut` bytes into buffers of `room` bytes,
/// keeping what it does not consume, as a socket reader does.
fn receive(g: &mut Gateway, records: &[u8], cut: usize, room: usize) -> Result<Vec<u8>, Error> {
    let mut pending: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    let mut buf = vec![0; room];
    let mut fed = 0;
    for _ in 0..1_000_000 {
        if fed < records.len() {
            let n = cut.min(records.len() - fed);
            pending.extend_from_slice(&records[fed..fed + n]);
            fed += n;
        }
        let (u, w) = g.read(&pending, &mut buf)?;
        pending.drain(..u);
        out.extend_from_slice(&buf[..w]);
        if g.is_complete() && pending.is_empty() {
            return Ok(out);
        }
        if fed == records.len() && u == 0 && w == 0 {
            break;
        }
    }
    Ok(out)
}

fn php_reply(body: &[u8]) -> Vec<u8> {
    let mut r = Vec::new();
    let mut stdout =
        b"X-Powered-By: PHP\r\nContent-type: text/html; charset=UTF-8\r\n\r\n".to_vec();
    stdout.extend_from_slice(body);
    for piece in stdout.chunks(8192) {
        r.extend(record(kind::STDOUT, piece));
    }
    r.extend(record(kind::STDERR, b"PHP Notice: one\nPHP Notice: two\n"));
    r.extend(record(kind::STDOUT, b""));
    r.extend(end(0));
    r
}

#[test]
fn a_php_reply_becomes_a_chunked_response_and_stderr_lines() {
    let mut g = Gateway::new();
    g.begin(&cx(b"/a.php", b""));
    send(&mut g, b"GET /a.php HTTP/1.1\r\nHost: h\r\n\r\n", 100);
    let out = receive(&mut g, &php_reply(b"<p>hi</p>"), 1 << 16, 1 << 16).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out),
        "HTTP/1.1 200 OK\r\nX-Powered-By: PHP\r\nContent-type: text/html; charset=UTF-8\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n<p>hi</p>\r\n0\r\n\r\n"
    );
    let mut lines = Vec::new();
    g.stderr_lines(|l| lines.push(String::from_utf8_lossy(l).into_owned()));
    assert_eq!(lines, ["PHP Notice: one", "PHP Notice: two"]);
    // The connection carries the next request.
    g.begin(&cx(b"/b.php", b""));
    let recs = send(&mut g, b"GET /b.php HTTP/1.1\r\nHost: h\r\n\r\n", 100);
    assert_eq!(recs[0].0, kind::BEGIN_REQUEST);
}

#[test]
fn an_http_1_0_request_gets_a_response_ended_by_the_close_without_keep_conn() {
    let mut g = Gateway::new();
    g.begin(&cx(b"/a.php", b""));
    let recs = send(&mut g, b"GET /a.php HTTP/1.0\r\n\r\n", 100);
    assert_eq!(recs[0], (kind::BEGIN_REQUEST, vec![0, 1, 0, 0, 0, 0, 0, 0]));
    let out = receive(&mut g, &php_reply(b"hi"), 1000, 1000).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out),
        "HTTP/1.1 200 OK\r\nX-Powered-By: PHP\r\nContent-type: text/html; charset=UTF-8\r\nConnection: close\r\n\r\nhi"
    );
}

#[test]
fn an_overloaded_application_before_any_output_is_an_error() {
    let mut g = Gateway::new();
    g.begin(&cx(b"/a.php", b""));
    send(&mut g, b"GET /a.php HTTP/1.1\r\nHost: h\r\n\r\n", 100);
    let e = receive(&mut g, &end(2), 100, 100).unwrap_err();
    assert_eq!(e, Error::Refused(ProtocolStatus::Overloaded));
}

#[test]
fn an_end_without_a_head_is_an_error() {
    let mut g = Gateway::new();
    g.begin(&cx(b"/a.php", b""));
    send(&mut g, b"GET /a.php HTTP/1.1\r\nHost: h\r\n\r\n", 100);
    let e = receive(&mut g, &end(0), 100, 100).unwrap_err();
    assert_eq!(e, Error::Response(crate::cgi::translate::Error::NoHead));
}

#[test]
fn a_head_request_gets_no_body_from_the_reply() {
    let mut g = Gateway::new();
    g.begin(&cx(b"/a.php", b""));
    send(&mut g, b"HEAD /a.php HTTP/1.1\r\nHost: h\r\n\r\n", 100);
    let out = receive(&mut g, &php_reply(b"body"), 100, 100).unwrap();
    let text = String::from_utf8_lossy(&out);
    assert!(text.ends_with("chunked\r\n\r\n"), "{text}");
}

#[test]
fn stderr_is_bounded_per_request() {
    let mut g = Gateway::new();
    g.begin(&cx(b"/a.php", b""));
    send(&mut g, b"GET /a.php HTTP/1.1\r\nHost: h\r\n\r\n", 100);
    let mut reply = Vec::new();
    for _ in 0..200 {
        reply.extend(record(kind::STDERR, b"warning\n"));
    }
    reply.extend(php_reply(b"ok"));
    let mut given = 0;
    let mut fed = 0;
    let mut buf = vec![0; 4096];
    let mut pending = Vec::new();
    for _ in 0..10_000 {
        if fed < reply.len() {
            let n = 64.min(reply.len() - fed);
            pending.extend_from_slice(&reply[fed..fed + n]);
            fed += n;
        }
        let (u, _) = g.read(&pending, &mut buf).unwrap();
        pending.drain(..u);
        g.stderr_lines(|_| given += 1);
        if g.is_complete() {
            break;
        }
    }
    assert!(g.is_complete());
    assert_eq!(given, 64);
    assert_eq!(g.stderr_dropped(), 202 - 64);
}

proptest! {
    /// Records cut anywhere, read through any buffer size, give the same response.
    #[test]
    fn any_cuts_and_buffer_sizes_give_the_same_response(
        body in proptest::collection::vec(any::<u8>(), 0..30_000),
        cut in 1usize..9000,
        room in 1usize..5000,
    ) {
        let reply = php_reply(&body);
        let mut g = Gateway::new();
        g.begin(&cx(b"/a.php", b""));
        send(&mut g, b"GET /a.php HTTP/1.1\r\nHost: h\r\n\r\n", 100);
        let whole = receive(&mut g, &reply, reply.len(), 1 << 20).unwrap();
        let mut g = Gateway::new();
        g.begin(&cx(b"/a.php", b""));
        send(&mut g, b"GET /a.php HTTP/1.1\r\nHost: h\r\n\r\n", 100);
        let cut_out = receive(&mut g, &reply, cut, room).unwrap();
        prop_assert!(g.is_complete());
        // Same head; the same payload once de-chunked (chunk sizes depend on the cuts).
        let end = |b: &[u8]| b.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        prop_assert_eq!(&cut_out[..end(&cut_out)], &whole[..end(&whole)]);
        prop_assert_eq!(dechunk(&cut_out[end(&cut_out)..]), body);
    }

    /// Arbitrary bytes from the application never panic the gateway.
    #[test]
    fn arbitrary_replies_never_panic(reply in proptest::collection::vec(any::<u8>(), 0..2000), room in 1usize..300) {
        let mut g = Gateway::new();
        g.begin(&cx(b"/a.php", b""));
        send(&mut g, b"GET /a.php HTTP/1.1\r\nHost: h\r\n\r\n", 100);
        let _ = receive(&mut g, &reply, 13, room);
    }
}
