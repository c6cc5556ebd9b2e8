//! Tests of head rewriting, one per rule: start lines, hop-by-hop fields, framing, the forwarding
//! fields, `Via`, `X-Request-ID`, header edits, path rewriting, and the output buffer's size.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::*;
use crate::http1::{parse_request, parse_response, Limits};

const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));

/// What an HTTP listener with the defaults does: append to XFF, add X-Forwarded-Proto.
fn rw() -> RequestRewrite<'static> {
    RequestRewrite {
        client: Some(CLIENT),
        trusted: false,
        forwarded_for: ForwardedFor::Append,
        proto: "http",
        x_forwarded_proto: false,
        x_forwarded_host: false,
        forwarded: false,
        via: None,
        request_id: None,
        edits: [&[], &[], &[]],
        rewrite_path: None,
        normalize_path: false,
        underscores: true,
        upgrade: false,
    }
}

fn resp_rw() -> ResponseRewrite<'static> {
    ResponseRewrite {
        client_version: Version::Http11,
        close: false,
        keep_alive_10: false,
        via: None,
        edits: [&[], &[], &[]],
        upgrade: false,
    }
}

/// The request head rewritten, as text.
fn request(text: &str, rw: &RequestRewrite) -> String {
    let buf = text.as_bytes();
    let head = parse_request(buf, &Limits::default())
        .unwrap_or_else(|e| panic!("{text:?}: {e}"))
        .unwrap_or_else(|| panic!("{text:?}: incomplete"));
    let mut out = [0u8; 4096];
    let n = write_request(buf, &head, rw, &mut out).unwrap_or_else(|_| panic!("overflow"));
    String::from_utf8_lossy(&out[..n]).into_owned()
}

/// The response head rewritten, as text.
fn response(text: &str, to_head: bool, rw: &ResponseRewrite) -> String {
    let buf = text.as_bytes();
    let head = parse_response(buf, &Limits::default(), to_head)
        .unwrap_or_else(|e| panic!("{text:?}: {e}"))
        .unwrap_or_else(|| panic!("{text:?}: incomplete"));
    let mut out = [0u8; 4096];
    let n = write_response(buf, &head, rw, &mut out).unwrap_or_else(|_| panic!("overflow"));
    String::from_utf8_lossy(&out[..n]).into_owned()
}

fn edit(op: EditOp, name: &str, value: &str) -> HeaderEdit {
    HeaderEdit {
        op,
        name: name.into(),
        value: value.into(),
    }
}

#[test]
fn request_line_is_the_proxys_own_and_fields_are_copied_as_they_came() {
    let out = request(
        "GET /a?b=c HTTP/1.1\r\nHost: a.example\r\nX-Odd:  v  \r\naccept: */*\r\n\r\n",
        &rw(),
    );
    assert_eq!(
        out,
        "GET /a?b=c HTTP/1.1\r\nHost: a.example\r\nX-Odd:  v  \r\naccept: */*\r\n\
         X-Forwarded-For: 192.0.2.7\r\n\r\n"
    );
}

#[test]
fn http_1_0_request_goes_as_1_0_with_keep_alive() {
    let out = request("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", &rw());
    assert_eq!(
        out,
        "GET / HTTP/1.0\r\nConnection: keep-alive\r\nX-Forwarded-For: 192.0.2.7\r\n\r\n"
    );
    // Even when the client did not ask: the server may keep the connection to the proxy.
    let out = request("GET / HTTP/1.0\r\n\r\n", &rw());
    assert!(out.contains("\r\nConnection: keep-alive\r\n"), "{out}");
}

#[test]
fn absolute_form_target_goes_in_origin_form_with_its_host() {
    let r = rw();
    let out = request(
        "GET http://b.example:8080/p?q HTTP/1.1\r\nHost: B.example:8080\r\n\r\n",
        &r,
    );
    assert_eq!(
        out,
        "GET /p?q HTTP/1.1\r\nHost: b.example:8080\r\nX-Forwarded-For: 192.0.2.7\r\n\r\n"
    );
    let out = request(
        "GET HTTPS://b.example HTTP/1.1\r\nHost: b.example\r\n\r\n",
        &r,
    );
    assert!(
        out.starts_with("GET / HTTP/1.1\r\nHost: b.example\r\n"),
        "{out}"
    );
    let out = request(
        "GET http://b.example?x=1 HTTP/1.1\r\nHost: b.example:80\r\n\r\n",
        &r,
    );
    assert!(out.starts_with("GET /?x=1 HTTP/1.1\r\n"), "{out}");
    // Asterisk and authority forms go as they came.
    let out = request("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", &r);
    assert!(out.starts_with("OPTIONS * HTTP/1.1\r\n"), "{out}");
    let out = request("CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n", &r);
    assert!(out.starts_with("CONNECT a:443 HTTP/1.1\r\n"), "{out}");
}

#[test]
fn rewrite_path_replaces_the_prefix_and_keeps_the_query() {
    let mut r = rw();
    r.rewrite_path = Some(("/api", "/v2"));
    let go = |target: &str, r: &RequestRewrite| {
        let out = request(&format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n"), r);
        out.split(' ').nth(1).unwrap_or_default().to_owned()
    };
    assert_eq!(go("/api/users?id=1", &r), "/v2/users?id=1");
    assert_eq!(go("/api", &r), "/v2");
    assert_eq!(go("/other/api?x", &r), "/other/api?x");
    assert_eq!(go("http://a/api/x?y", &r), "/v2/x?y");
    // The query is not part of the path.
    assert_eq!(go("/x?/api", &r), "/x?/api");
    // Stripping: the result still starts with "/".
    r.rewrite_path = Some(("/api", ""));
    assert_eq!(go("/api/users", &r), "/users");
    assert_eq!(go("/api", &r), "/");
    assert_eq!(go("/api?q=1", &r), "/?q=1");
    assert_eq!(go("/apix", &r), "/x");
    r.rewrite_path = Some(("/", "app/"));
    assert_eq!(go("/x", &r), "/app/x");
    // An absolute-form target without a path asks for "/".
    assert_eq!(go("http://a?q", &r), "/app/?q");
    // A replacement that is no target is not used (the configuration refuses it).
    r.rewrite_path = Some(("/api", "/a b"));
    assert_eq!(go("/api/x", &r), "/api/x");
}

#[test]
fn hop_by_hop_fields_are_removed() {
    let out = request(
        "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, X-Secret, close\r\nKeep-Alive: 5\r\n\
         Proxy-Connection: keep-alive\r\nTE: trailers\r\nUpgrade: websocket\r\nx-secret: 1\r\n\
         X-Kept: 2\r\n\r\n",
        &rw(),
    );
    assert_eq!(
        out,
        "GET / HTTP/1.1\r\nHost: a\r\nX-Kept: 2\r\nX-Forwarded-For: 192.0.2.7\r\n\r\n"
    );
}

#[test]
fn fields_named_in_connection_are_removed_but_never_host() {
    let out = request(
        "GET / HTTP/1.1\r\nConnection: Host, X-A\r\nHost: a\r\nConnection: x-b\r\nX-A: 1\r\n\
         X-B: 2\r\nX-C: 3\r\n\r\n",
        &rw(),
    );
    assert_eq!(
        out,
        "GET / HTTP/1.1\r\nHost: a\r\nX-C: 3\r\nX-Forwarded-For: 192.0.2.7\r\n\r\n"
    );
    // Naming a forwarding field cannot strip the proxy's own.
    let out = request(
        "GET / HTTP/1.1\r\nHost: a\r\nConnection: X-Forwarded-For\r\n\r\n",
        &rw(),
    );
    assert!(out.contains("\r\nX-Forwarded-For: 192.0.2.7\r\n"), "{out}");
}

#[test]
fn request_framing_is_regenerated_as_exactly_one_field() {
    let r = rw();
    let out = request(
        "POST / HTTP/1.1\r\nContent-Length: 5\r\nHost: a\r\ncontent-length: 5\r\n\r\n",
        &r,
    );
    assert_eq!(
        out,
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nX-Forwarded-For: 192.0.2.7\r\n\r\n"
    );
    let out = request(
        "POST / HTTP/1.1\r\ntransfer-encoding:  CHUNKED \r\nHost: a\r\n\r\n",
        &r,
    );
    assert_eq!(
        out,
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\
         X-Forwarded-For: 192.0.2.7\r\n\r\n"
    );
    let out = request("GET / HTTP/1.1\r\nHost: a\r\n\r\n", &r);
    assert!(!out.contains("Content-Length") && !out.contains("Transfer-Encoding"));
}

#[test]
fn upgrade_is_kept_with_connection_upgrade_when_asked() {
    let mut r = rw();
    r.upgrade = true;
    let out = request(
        "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Key: k\r\n\r\n",
        &r,
    );
    assert_eq!(
        out,
        "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\
         Connection: upgrade\r\nX-Forwarded-For: 192.0.2.7\r\n\r\n"
    );
}

#[test]
fn x_forwarded_for_is_appended_from_a_trusted_peer() {
    let mut r = rw();
    r.trusted = true;
    let text = "GET / HTTP/1.1\r\nX-Forwarded-For: 203.0.113.1\r\nHost: a\r\n\
                x-forwarded-for: 203.0.113.2, 10.0.0.1\r\nX-Forwarded-For:\r\n\r\n";
    assert_eq!(
        request(text, &r),
        "GET / HTTP/1.1\r\nHost: a\r\n\
         X-Forwarded-For: 203.0.113.1, 203.0.113.2, 10.0.0.1, 192.0.2.7\r\n\r\n"
    );
    // Not trusted, or replace: the client's address only.
    r.trusted = false;
    let only = "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 192.0.2.7\r\n\r\n";
    assert_eq!(request(text, &r), only);
    r.trusted = true;
    r.forwarded_for = ForwardedFor::Replace;
    assert_eq!(request(text, &r), only);
    // Empty list elements at the ends of an incoming value are dropped.
    r.forwarded_for = ForwardedFor::Append;
    let text = "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: , 10.0.0.1,\r\n\r\n";
    assert!(
        request(text, &r).contains("\r\nX-Forwarded-For: 10.0.0.1, 192.0.2.7\r\n"),
        "{}",
        request(text, &r)
    );
}

#[test]
fn x_forwarded_for_off_leaves_the_field_untouched() {
    let mut r = rw();
    r.forwarded_for = ForwardedFor::Off;
    let text = "GET / HTTP/1.1\r\nX-Forwarded-For: 203.0.113.1\r\nHost: a\r\n\r\n";
    assert_eq!(request(text, &r), text);
    let text = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    assert_eq!(request(text, &r), text);
}

#[test]
fn an_ipv6_client_and_a_mapped_ipv4_client_are_written_plainly() {
    let mut r = rw();
    r.forwarded = true;
    r.client = Some(IpAddr::V6(
        "2001:db8::1".parse().unwrap_or(Ipv6Addr::LOCALHOST),
    ));
    let out = request("GET / HTTP/1.1\r\nHost: a\r\n\r\n", &r);
    assert!(
        out.contains("\r\nX-Forwarded-For: 2001:db8::1\r\n"),
        "{out}"
    );
    assert!(
        out.contains("\r\nForwarded: for=\"[2001:db8::1]\";proto=http;host=a\r\n"),
        "{out}"
    );
    r.client = Some(IpAddr::V6(Ipv4Addr::new(198, 51, 100, 9).to_ipv6_mapped()));
    let out = request("GET / HTTP/1.1\r\nHost: a\r\n\r\n", &r);
    assert!(
        out.contains("\r\nX-Forwarded-For: 198.51.100.9\r\n"),
        "{out}"
    );
    assert!(out.contains("\r\nForwarded: for=198.51.100.9;"), "{out}");
}

#[test]
fn no_client_address_adds_no_forwarding_fields() {
    let mut r = rw();
    r.client = None;
    r.x_forwarded_proto = true;
    r.x_forwarded_host = true;
    r.forwarded = true;
    let text =
        "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.1.1.1\r\nX-Forwarded-Proto: https\r\n\
                X-Forwarded-Host: b\r\nForwarded: for=1.1.1.1\r\n\r\n";
    assert_eq!(request(text, &r), "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    r.trusted = true;
    assert_eq!(request(text, &r), text);
}

#[test]
fn x_forwarded_proto_and_host_are_kept_from_a_trusted_peer_else_ours() {
    let mut r = rw();
    r.x_forwarded_proto = true;
    r.x_forwarded_host = true;
    r.proto = "https";
    let text = "GET / HTTP/1.1\r\nHost: a.example\r\nX-Forwarded-Proto: http\r\n\
                X-Forwarded-Host: evil\r\n\r\n";
    assert_eq!(
        request(text, &r),
        "GET / HTTP/1.1\r\nHost: a.example\r\nX-Forwarded-For: 192.0.2.7\r\n\
         X-Forwarded-Proto: https\r\nX-Forwarded-Host: a.example\r\n\r\n"
    );
    r.trusted = true;
    assert_eq!(
        request(text, &r),
        "GET / HTTP/1.1\r\nHost: a.example\r\nX-Forwarded-Proto: http\r\n\
         X-Forwarded-Host: evil\r\nX-Forwarded-For: 192.0.2.7\r\n\r\n"
    );
    // A trusted peer that sent none gets ours.
    let out = request("GET / HTTP/1.1\r\nHost: a.example\r\n\r\n", &r);
    assert!(out.contains("\r\nX-Forwarded-Proto: https\r\n"), "{out}");
    assert!(out.contains("\r\nX-Forwarded-Host: a.example\r\n"), "{out}");
    // The host of an absolute-form target is the one asked for.
    let out = request(
        "GET http://b.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n",
        &r,
    );
    assert!(out.contains("\r\nX-Forwarded-Host: b.example\r\n"), "{out}");
    // No host known: nothing to write.
    let out = request("GET / HTTP/1.0\r\n\r\n", &r);
    assert!(!out.contains("X-Forwarded-Host"), "{out}");
}

#[test]
fn forwarded_is_appended_from_a_trusted_peer_else_replaced() {
    let mut r = rw();
    r.forwarded = true;
    let text = "GET / HTTP/1.1\r\nForwarded: for=198.51.100.1\r\nHost: a.example:8080\r\n\
                Forwarded: for=10.0.0.1;proto=https\r\n\r\n";
    let out = request(text, &r);
    assert!(
        out.ends_with("\r\nForwarded: for=192.0.2.7;proto=http;host=\"a.example:8080\"\r\n\r\n"),
        "{out}"
    );
    assert_eq!(out.matches("Forwarded:").count(), 1, "{out}");
    r.trusted = true;
    let out = request(text, &r);
    assert!(
        out.ends_with(
            "\r\nForwarded: for=198.51.100.1, for=10.0.0.1;proto=https, \
             for=192.0.2.7;proto=http;host=\"a.example:8080\"\r\n\r\n"
        ),
        "{out}"
    );
    // Without a host, no host=.
    let out = request("GET / HTTP/1.0\r\n\r\n", &r);
    assert!(
        out.contains("\r\nForwarded: for=192.0.2.7;proto=http\r\n"),
        "{out}"
    );
}

#[test]
fn via_is_added_to_requests_and_responses() {
    let mut r = rw();
    r.via = Some("quill");
    let out = request("GET / HTTP/1.1\r\nHost: a\r\nVia: 1.1 edge\r\n\r\n", &r);
    assert!(
        out.ends_with("\r\nVia: 1.1 edge\r\nX-Forwarded-For: 192.0.2.7\r\nVia: 1.1 quill\r\n\r\n"),
        "{out}"
    );
    // The received protocol is the version the message came in (RFC 9110 §7.6.3).
    let out = request("GET / HTTP/1.0\r\n\r\n", &r);
    assert!(out.contains("\r\nVia: 1.0 quill\r\n"), "{out}");
    let mut p = resp_rw();
    p.via = Some("quill");
    let out = response("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false, &p);
    assert_eq!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nVia: 1.1 quill\r\n\r\n"
    );
}

#[test]
fn x_request_id_is_added_when_the_request_has_none() {
    let mut r = rw();
    r.request_id = Some(b"abc123");
    let out = request("GET / HTTP/1.1\r\nHost: a\r\n\r\n", &r);
    assert!(out.ends_with("\r\nX-Request-ID: abc123\r\n\r\n"), "{out}");
    let out = request(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: theirs\r\n\r\n",
        &r,
    );
    assert!(out.contains("\r\nX-Request-Id: theirs\r\n"), "{out}");
    assert_eq!(out.to_ascii_lowercase().matches("x-request-id").count(), 1);
}

#[test]
fn edits_remove_set_and_add_in_order_after_the_proxys_fields() {
    let listener = [
        edit(EditOp::Remove, "x-forwarded-for", ""),
        edit(EditOp::Set, "Server-Side", "1"),
        edit(EditOp::Add, "X-Multi", "a"),
    ];
    let route = [
        edit(EditOp::Add, "X-Multi", "b"),
        edit(EditOp::Remove, "server-side", ""),
        edit(EditOp::Set, "X-Tag", "route"),
        edit(EditOp::Remove, "Cookie", ""),
    ];
    let mut r = rw();
    r.edits = [&listener, &route, &[]];
    let out = request(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Tag: client\r\nCookie: c\r\nServer-Side: 0\r\n\
         X-Multi: 0\r\n\r\n",
        &r,
    );
    assert_eq!(
        out,
        "GET / HTTP/1.1\r\nHost: a\r\nX-Multi: 0\r\nX-Multi: a\r\nX-Multi: b\r\nX-Tag: route\r\n\r\n"
    );
    // Response edits likewise; Set replaces the server's field.
    let set = [
        edit(EditOp::Set, "Server", "quill"),
        edit(EditOp::Remove, "via", ""),
    ];
    let mut p = resp_rw();
    p.edits = [&[], &set, &[]];
    p.via = Some("quill");
    let out = response(
        "HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Length: 0\r\n\r\n",
        false,
        &p,
    );
    assert_eq!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nServer: quill\r\n\r\n"
    );
}

#[test]
fn edits_of_framing_and_hop_by_hop_fields_are_ignored() {
    let bad = [
        edit(EditOp::Remove, "content-length", ""),
        edit(EditOp::Set, "Transfer-Encoding", "gzip"),
        edit(EditOp::Add, "Connection", "close"),
        edit(EditOp::Add, "Bad Name", "x"),
        edit(EditOp::Add, "X-Bad", "a\r\nInjected: 1"),
    ];
    let mut r = rw();
    r.edits = [&bad, &[], &[]];
    let out = request(
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n",
        &r,
    );
    assert_eq!(
        out,
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nX-Forwarded-For: 192.0.2.7\r\n\r\n"
    );
}

#[test]
fn response_status_line_is_http_1_1_with_the_reason_kept() {
    let p = resp_rw();
    let out = response(
        "HTTP/1.0 404 Not  Here\r\nServer: x\r\nContent-Length: 3\r\n\r\n",
        false,
        &p,
    );
    assert_eq!(
        out,
        "HTTP/1.1 404 Not  Here\r\nServer: x\r\nContent-Length: 3\r\n\r\n"
    );
    let out = response("HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", false, &p);
    assert!(out.starts_with("HTTP/1.1 200 \r\n"), "{out}");
}

#[test]
fn response_framing_is_regenerated_as_exactly_one_field() {
    let p = resp_rw();
    let out = response(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nKeep-Alive: timeout=5\r\n\
         Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nTE: x\r\n\r\n",
        false,
        &p,
    );
    assert_eq!(out, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    let out = response(
        "HTTP/1.1 200 OK\r\ncontent-length: 7\r\nContent-Length: 7\r\n\r\n",
        false,
        &p,
    );
    assert_eq!(out, "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n");
    // Close-delimited: no framing field.
    let out = response("HTTP/1.1 200 OK\r\nServer: x\r\n\r\n", false, &p);
    assert_eq!(out, "HTTP/1.1 200 OK\r\nServer: x\r\n\r\n");
}

#[test]
fn response_without_body_keeps_content_length_for_head_and_304_only() {
    let p = resp_rw();
    let text = "HTTP/1.1 200 OK\r\ncontent-length: 42\r\nContent-Length: 42\r\n\r\n";
    assert_eq!(
        response(text, true, &p),
        "HTTP/1.1 200 OK\r\ncontent-length: 42\r\n\r\n"
    );
    let text = "HTTP/1.1 304 Not Modified\r\nContent-Length: 42\r\nETag: \"x\"\r\n\r\n";
    assert_eq!(response(text, false, &p), text);
    let text = "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nX: y\r\n\r\n";
    assert_eq!(
        response(text, false, &p),
        "HTTP/1.1 204 No Content\r\nX: y\r\n\r\n"
    );
    let text = "HTTP/1.1 100 Continue\r\nContent-Length: 5\r\n\r\n";
    assert_eq!(response(text, false, &p), "HTTP/1.1 100 Continue\r\n\r\n");
    // Transfer-Encoding of a HEAD answer is hop-by-hop: removed.
    let text = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(response(text, true, &p), "HTTP/1.1 200 OK\r\n\r\n");
}

#[test]
fn response_connection_says_close_keep_alive_or_upgrade() {
    let text = "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n";
    let mut p = resp_rw();
    p.close = true;
    assert_eq!(
        response(text, false, &p),
        "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    );
    let mut p = resp_rw();
    p.keep_alive_10 = true;
    p.client_version = Version::Http10;
    assert_eq!(
        response(text, false, &p),
        "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n"
    );
    let mut p = resp_rw();
    p.upgrade = true;
    let text = "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\
                Sec-WebSocket-Accept: s\r\n\r\n";
    assert_eq!(
        response(text, false, &p),
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: s\r\n\
         Connection: upgrade\r\n\r\n"
    );
    // Without an upgrade under way, Upgrade is hop-by-hop like the rest.
    let p = resp_rw();
    let out = response(
        "HTTP/1.1 200 OK\r\nUpgrade: h2c\r\nContent-Length: 0\r\n\r\n",
        false,
        &p,
    );
    assert_eq!(out, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
}

#[test]
fn a_small_output_buffer_is_an_overflow_at_every_size() {
    let text = b"POST http://h/p?q HTTP/1.0\r\nHost: h\r\nContent-Length: 10\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n";
    let head = parse_request(text, &Limits::default())
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("not parsed"));
    let mut r = rw();
    r.forwarded = true;
    r.x_forwarded_host = true;
    r.x_forwarded_proto = true;
    r.via = Some("quill");
    r.request_id = Some(b"id");
    let mut big = [0u8; 1024];
    let full = write_request(text, &head, &r, &mut big).unwrap_or(0);
    assert!(full > 0);
    for size in 0..full {
        let mut out = vec![0u8; size];
        assert_eq!(
            write_request(text, &head, &r, &mut out),
            Err(Overflow),
            "{size}"
        );
    }
    let mut exact = vec![0u8; full];
    assert_eq!(write_request(text, &head, &r, &mut exact), Ok(full));
    assert_eq!(exact, big[..full]);

    let text = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nServer: s\r\n\r\n";
    let head = parse_response(text, &Limits::default(), false)
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("not parsed"));
    let mut p = resp_rw();
    p.close = true;
    p.via = Some("quill");
    let full = write_response(text, &head, &p, &mut big).unwrap_or(0);
    for size in 0..full {
        let mut out = vec![0u8; size];
        assert_eq!(
            write_response(text, &head, &p, &mut out),
            Err(Overflow),
            "{size}"
        );
    }
}

#[test]
fn host_can_be_set_but_not_added_or_removed() {
    let add = [
        edit(EditOp::Add, "Host", "b"),
        edit(EditOp::Remove, "host", ""),
    ];
    let mut r = rw();
    r.edits = [&add, &[], &[]];
    let text = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    assert_eq!(
        request(text, &r),
        "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 192.0.2.7\r\n\r\n"
    );
    let set = [edit(EditOp::Set, "host", "b.example")];
    r.edits = [&[], &set, &[]];
    assert_eq!(
        request(text, &r),
        "GET / HTTP/1.1\r\nX-Forwarded-For: 192.0.2.7\r\nhost: b.example\r\n\r\n"
    );
    // It replaces the authority of an absolute-form target too, and gives a 1.0 request one.
    let out = request("GET http://c/ HTTP/1.1\r\nHost: c\r\n\r\n", &r);
    assert_eq!(
        out.to_ascii_lowercase().matches("host:").count(),
        1,
        "{out}"
    );
    assert!(out.contains("\r\nhost: b.example\r\n"), "{out}");
    let out = request("GET / HTTP/1.0\r\n\r\n", &r);
    assert!(out.contains("\r\nhost: b.example\r\n"), "{out}");
    // A value that is no host is not used.
    let bad = [edit(EditOp::Set, "Host", "a b")];
    r.edits = [&bad, &[], &[]];
    assert_eq!(
        request(text, &r),
        "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 192.0.2.7\r\n\r\n"
    );
}

#[test]
fn framing_lookalikes_are_never_passed_on() {
    for name in [
        "Content_Length",
        "Transfer_Encoding",
        "Transfer---Encoding",
        "content__length",
    ] {
        let req = format!("POST / HTTP/1.1\r\nHost: h\r\n{name}: 5\r\nX-Keep: 1\r\n\r\n");
        let out = request(&req, &rw());
        assert!(!out.contains(name), "{name} passed on: {out}");
        assert!(out.contains("X-Keep: 1"), "{out}");
    }
    assert!(!is_framing_lookalike(b"Content-Length"));
    assert!(!is_framing_lookalike(b"Content-Lengths"));
    assert!(is_framing_lookalike(b"CONTENT_LENGTH"));
}

#[test]
fn underscore_fields_are_dropped_unless_kept_and_identity_spellings_always() {
    let text = "GET / HTTP/1.1\r\nHost: a\r\nX_Forwarded_For: 6.6.6.6\r\n\
                X_Client_Cert_Subject: CN=admin\r\nX-Client-Cert_Subject: CN=admin\r\n\
                X_Custom: 1\r\nX-Ok: 1\r\n\r\n";
    let mut r = rw();
    r.underscores = false;
    let out = request(text, &r);
    assert!(!out.contains('_'), "{out}");
    assert!(out.contains("\r\nX-Ok: 1\r\n"), "{out}");
    // Kept: all but the spellings of what Quill writes or removes itself.
    r.underscores = true;
    let strip = [HeaderEdit {
        op: EditOp::Remove,
        name: "X-Client-Cert-Subject".into(),
        value: "".into(),
    }];
    r.edits = [&[], &[], &strip];
    let out = request(text, &r);
    assert!(out.contains("\r\nX_Custom: 1\r\n"), "{out}");
    assert!(!out.contains("Cert"), "{out}");
    assert!(!out.contains("X_Forwarded_For"), "{out}");
    assert!(out.contains("\r\nX-Forwarded-For: 192.0.2.7\r\n"), "{out}");
    // Forwarding off: the client's field (either spelling) goes as it came.
    r.forwarded_for = ForwardedFor::Off;
    let out = request(text, &r);
    assert!(out.contains("\r\nX_Forwarded_For: 6.6.6.6\r\n"), "{out}");
}

#[test]
fn the_path_goes_as_sent_unless_normalize_path_or_a_rewrite_applies() {
    let go = |target: &str, r: &RequestRewrite| {
        let out = request(&format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n"), r);
        out.split(' ').nth(1).unwrap_or_default().to_owned()
    };
    let mut r = rw();
    assert_eq!(go("//a/./b/../c%41?x=/../y", &r), "//a/./b/../c%41?x=/../y");
    r.normalize_path = true;
    assert_eq!(go("//a/./b/../c%41?x=/../y", &r), "/a/cA?x=/../y");
    assert_eq!(go("http://a//x/..", &r), "/");
    assert_eq!(go("/plain?q", &r), "/plain?q");
    // A path without a normal form goes as sent (the proxy refuses it before).
    assert_eq!(go("/../x", &r), "/../x");
    r.normalize_path = false;
    r.rewrite_path = Some(("/api/", "/v2/"));
    assert_eq!(go("//api/./x?q", &r), "/v2/x?q");
    assert_eq!(go("/%61pi/x", &r), "/v2/x");
    assert_eq!(go("//other/./x", &r), "//other/./x");
    assert_eq!(go("/api/x", &r), "/v2/x");
    r.rewrite_path = Some(("/api/", ""));
    assert_eq!(go("//api/", &r), "/");
    assert_eq!(go("//api/x/", &r), "/x/");
}

#[test]
fn ipv4_addresses_are_written_with_every_digit_count() {
    let mut buf = [0u8; 48];
    for (ip, text) in [
        ([0, 9, 10, 255], "0.9.10.255"),
        ([100, 99, 1, 0], "100.99.1.0"),
        ([203, 0, 113, 7], "203.0.113.7"),
    ] {
        let written = format_ip(IpAddr::from(ip), &mut buf);
        assert_eq!(written, text.as_bytes());
    }
}

/// Typical requests take the quick path (the request line as it came, each field kept or
/// removed by its name alone), and it writes what deciding each line writes; requests with a
/// field or a target to act on do not take it.
#[test]
fn plain_requests_are_copied_by_name_as_deciding_each_line_would_write_them() {
    let remove = [HeaderEdit {
        op: EditOp::Remove,
        name: "X-Secret".into(),
        value: "".into(),
    }];
    let edited = RequestRewrite {
        edits: [&remove, &[], &[]],
        normalize_path: true,
        request_id: Some(b"0123456789abcdef"),
        ..rw()
    };
    let plain = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    let browser = "GET /x?y HTTP/1.1\r\nHost: a\r\nUser-Agent: u\r\nConnection: keep-alive\r\n\
                   Keep-Alive: 300\r\nAccept: */*\r\n\r\n";
    // (request, rewrite, the line as it came, the fields by name)
    let cases: [(&str, &RequestRewrite, bool, bool); 8] = [
        (plain, &rw(), true, true),
        (browser, &edited, true, true),
        (
            "GET / HTTP/1.0\r\nHost: a\r\nConnection: close\r\n\r\n",
            &rw(),
            true,
            true,
        ),
        // A name as long as an edited one, a hop-by-hop field named, an underscore.
        (
            "GET / HTTP/1.1\r\nHost: a\r\nX-Public: 1\r\n\r\n",
            &edited,
            true,
            false,
        ),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: x\r\nX: 1\r\n\r\n",
            &rw(),
            true,
            false,
        ),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nX_Y: 1\r\n\r\n",
            &rw(),
            true,
            false,
        ),
        // An abnormal path normalized, an absolute-form target.
        (
            "GET /a/../b HTTP/1.1\r\nHost: a\r\n\r\n",
            &edited,
            false,
            true,
        ),
        (
            "GET http://b/ HTTP/1.1\r\nHost: b\r\n\r\n",
            &rw(),
            false,
            false,
        ),
    ];
    for (text, rw, line, by_name) in cases {
        let buf = text.as_bytes();
        let mut index = FieldIndex::empty();
        let head = crate::http1::parse_request_indexed(buf, &Limits::default(), &mut index)
            .unwrap()
            .unwrap();
        let req = Request::new(buf, &head, rw, &index);
        assert_eq!(req.verbatim_line().is_some(), line, "{text:?}");
        assert_eq!(req.kept_by_name(), by_name, "{text:?}");
        let mut out = [[0u8; 1024]; 2];
        let [quick, decided] = &mut out;
        let n = write_request_with(buf, &head, &index, rw, quick, true).unwrap();
        let m = write_request_with(buf, &head, &index, rw, decided, false).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&quick[..n]),
            String::from_utf8_lossy(&decided[..m]),
            "{text:?}"
        );
    }
}

/// Typical responses take the quick path (the status line as it came, each field kept or
/// removed by its name alone), and it writes what deciding each line writes.
#[test]
fn plain_responses_are_copied_by_name_as_deciding_each_line_would_write_them() {
    let nginx = "HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Type: text/html\r\n\
                 Content-Length: 5\r\nConnection: keep-alive\r\nETag: \"x\"\r\n\r\n";
    // (response, for a HEAD request, the status line as it came, the fields by name)
    let cases: [(&str, bool, bool, bool); 6] = [
        (nginx, false, true, true),
        (nginx, true, true, true),
        (
            "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n",
            false,
            false,
            true,
        ),
        (
            "HTTP/1.1 204\r\nContent-Length: 0\r\n\r\n",
            false,
            false,
            true,
        ),
        (
            "HTTP/1.1 200 OK\r\nConnection: x\r\nX: 1\r\nContent-Length: 1\r\n\r\n",
            false,
            true,
            false,
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
            true,
            false,
        ),
    ];
    for (text, to_head, line, by_name) in cases {
        let buf = text.as_bytes();
        let mut index = FieldIndex::empty();
        let head =
            crate::http1::parse_response_indexed(buf, &Limits::default(), to_head, &mut index)
                .unwrap()
                .unwrap();
        let keep = ResponseKeep::new(buf, &index, &head, &resp_rw());
        assert_eq!(keep.by_name(&index), by_name, "{text:?}");
        let mut out = [[0u8; 1024]; 2];
        let [quick, decided] = &mut out;
        let n = write_response_with(buf, &head, &index, &resp_rw(), quick, true).unwrap();
        let m = write_response_with(buf, &head, &index, &resp_rw(), decided, false).unwrap();
        let (quick, decided) = (&quick[..n], &decided[..m]);
        assert_eq!(
            String::from_utf8_lossy(quick),
            String::from_utf8_lossy(decided),
            "{text:?}"
        );
        let status_line = &buf[..buf.iter().position(|&b| b == b'\n').unwrap() + 1];
        assert_eq!(quick.starts_with(status_line), line, "{text:?}");
    }
}

/// A head whose index cannot hold every field (a request line past 64 KiB: the index's offsets
/// are 16-bit) is written as deciding each line writes it, its request line once: the quick
/// paths must not take the index's first field for the end of the request line.
#[test]
fn a_head_the_index_cannot_hold_is_rewritten_line_by_line() {
    let limits = Limits {
        max_head: 256 * 1024,
        max_request_line: 256 * 1024,
        ..Limits::default()
    };
    let target = format!("/{}", "a".repeat(70_000));
    let text = format!(
        "GET {target} HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let buf = text.as_bytes();
    let mut index = FieldIndex::empty();
    let head = crate::http1::parse_request_indexed(buf, &limits, &mut index)
        .unwrap()
        .unwrap();
    assert!(
        index.lines().count() < head.fields,
        "the index should not hold every field"
    );
    let mut out = vec![vec![0u8; 200_000]; 2];
    let (quick, decided) = out.split_at_mut(1);
    let n = write_request_with(buf, &head, &index, &rw(), &mut quick[0], true).unwrap();
    let m = write_request_with(buf, &head, &index, &rw(), &mut decided[0], false).unwrap();
    let written = String::from_utf8_lossy(&quick[0][..n]).into_owned();
    assert_eq!(written, String::from_utf8_lossy(&decided[0][..m]));
    assert_eq!(
        written.matches("HTTP/1.1").count(),
        1,
        "the request line once"
    );
    assert!(!written
        .to_ascii_lowercase()
        .contains("connection: keep-alive"));
}

/// Edit names of 63 bytes or more share one length bit: the lists are still compared whole.
#[test]
fn long_edited_names_remove_only_their_own_fields() {
    let long = "X-".to_string() + &"L".repeat(68);
    let other = "X-".to_string() + &"O".repeat(63);
    let remove = [HeaderEdit {
        op: EditOp::Remove,
        name: long.clone().into(),
        value: "".into(),
    }];
    let rw = RequestRewrite {
        edits: [&remove, &[], &[]],
        ..rw()
    };
    let text = format!("GET / HTTP/1.1\r\nHost: a\r\n{long}: 1\r\n{other}: 2\r\n\r\n");
    let buf = text.as_bytes();
    let mut index = FieldIndex::empty();
    let head = crate::http1::parse_request_indexed(buf, &Limits::default(), &mut index)
        .unwrap()
        .unwrap();
    let mut out = [0u8; 1024];
    let n = write_request_indexed(buf, &head, &index, &rw, &mut out).unwrap();
    let written = String::from_utf8_lossy(&out[..n]);
    assert!(!written.contains(&long), "{written}");
    assert!(written.contains(&format!("{other}: 2")), "{written}");
}

#[test]
fn value_check_by_words_agrees_with_the_byte_rule() {
    let byte_rule = |v: &[u8]| {
        v.iter()
            .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80)
    };
    // Every byte at every place of a 17-byte value (two words and a remainder), beside tabs,
    // spaces, DEL and obs-text neighbours that could borrow into it.
    for len in [0usize, 1, 7, 8, 9, 16, 17] {
        for at in 0..len {
            for b in 0..=255u8 {
                for fill in [b'a', b'\t', b' ', 0x7f, 0x80, 0xff, 0x00] {
                    let mut v = vec![fill; len];
                    v[at] = b;
                    assert_eq!(is_value(&v), byte_rule(&v), "{v:02x?}");
                }
            }
        }
    }
}
