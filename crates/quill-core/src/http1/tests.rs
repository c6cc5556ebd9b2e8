//! One test per rule of docs/design.md#http-parsing-rules (named after it), plus response framing
//! (RFC 9112 §6.3), the chunked decoder, the status peek of health checks and the canned replies.

use super::*;

const LIMITS: Limits = Limits {
    max_head: 1024,
    max_request_line: 1024,
    max_headers: 8,
    require_host: true,
};

fn req(text: &[u8]) -> Result<Option<RequestHead>, Error> {
    parse_request(text, &LIMITS)
}

fn req_err(text: &[u8]) -> Error {
    match req(text) {
        Err(e) => e,
        other => panic!(
            "{:?}: expected an error, got {other:?}",
            String::from_utf8_lossy(text)
        ),
    }
}

fn req_ok(text: &[u8]) -> RequestHead {
    match req(text) {
        Ok(Some(h)) => h,
        other => panic!(
            "{:?}: expected a head, got {other:?}",
            String::from_utf8_lossy(text)
        ),
    }
}

fn resp(text: &[u8], to_head: bool) -> Result<Option<ResponseHead>, Error> {
    parse_response(text, &LIMITS, to_head)
}

fn resp_ok(text: &[u8]) -> ResponseHead {
    match resp(text, false) {
        Ok(Some(h)) => h,
        other => panic!(
            "{:?}: expected a head, got {other:?}",
            String::from_utf8_lossy(text)
        ),
    }
}

/// Feeds `data` whole to a decoder of `framing`.
fn decode(framing: Framing, data: &[u8]) -> Result<Fed, Error> {
    Body::new(framing).feed(data)
}

#[test]
fn a_plain_request_is_read_with_its_parts() {
    let text =
        b"GET /a?b=c HTTP/1.1\r\nHost: example.com:80 \r\nConnection: keep-alive\r\n\r\nrest";
    let h = req_ok(text);
    assert_eq!(h.len, text.len() - 4);
    assert_eq!(h.method, Method::Get);
    assert_eq!(h.method_span.of(text), b"GET");
    assert_eq!(h.target.of(text), b"/a?b=c");
    assert_eq!(h.target_form, Target::Origin);
    assert_eq!(h.version, Version::Http11);
    assert_eq!(h.host.map(|s| s.of(text)), Some(&b"example.com:80"[..]));
    assert_eq!(h.framing, Framing::None);
    assert_eq!(h.fields, 2);
    assert!(h.keep_alive());
}

#[test]
fn an_incomplete_head_is_none_until_its_blank_line() {
    let text = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n";
    for end in 0..text.len() {
        assert_eq!(req(&text[..end]), Ok(None), "prefix of {end} bytes");
    }
    assert_eq!(req_ok(text).framing, Framing::Length(3));
}

#[test]
fn bare_cr_is_rejected() {
    assert_eq!(req_err(b"GET / HTTP/1.1\rHost: a\r\n\r\n"), Error::BareCr);
    assert_eq!(
        req_err(b"GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n"),
        Error::BareCr
    );
    assert_eq!(req_err(b"GET / HTTP/1.1\r\nHost: a\r\n\rX"), Error::BareCr);
}

#[test]
fn bare_lf_is_rejected() {
    assert_eq!(req_err(b"GET / HTTP/1.1\nHost: a\r\n\r\n"), Error::BareLf);
    assert_eq!(req_err(b"GET / HTTP/1.1\r\nHost: a\n\r\n"), Error::BareLf);
    assert_eq!(req_err(b"GET / HTTP/1.1\r\nHost: a\r\n\n"), Error::BareLf);
    assert_eq!(req_err(b"GET / HTTP/1.1\r\nX: a\nb\r\n\r\n"), Error::BareLf);
}

#[test]
fn nul_and_control_characters_in_the_head_are_rejected() {
    assert_eq!(
        req_err(b"GET / HTTP/1.1\r\nHost: a\0b\r\n\r\n"),
        Error::ControlChar
    );
    assert_eq!(
        req_err(b"GET / HTTP/1.1\r\nX: \x01\r\n\r\n"),
        Error::ControlChar
    );
    assert_eq!(
        req_err(b"GET / HTTP/1.1\r\nX: \x7f\r\n\r\n"),
        Error::ControlChar
    );
    assert_eq!(req_err(b"GET /\0 HTTP/1.1\r\n\r\n"), Error::ControlChar);
    assert_eq!(req_err(b"G\x0bET / HTTP/1.1\r\n\r\n"), Error::ControlChar);
    assert_eq!(
        req_err(b"GET / HTTP/1.1\r\nX\x0c: a\r\n\r\n"),
        Error::ControlChar
    );
    // A tab inside a value is allowed.
    assert!(req(b"GET / HTTP/1.1\r\nHost: a\r\nX: a\tb\r\n\r\n").is_ok_and(|h| h.is_some()));
}

#[test]
fn space_or_tab_before_colon_is_rejected() {
    for text in [
        &b"GET / HTTP/1.1\r\nHost : a\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length\t: 0\r\n\r\n",
    ] {
        assert_eq!(req_err(text), Error::SpaceBeforeColon);
    }
}

#[test]
fn obs_fold_is_rejected() {
    assert_eq!(
        req_err(b"GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n c\r\n\r\n"),
        Error::ObsFold
    );
    assert_eq!(
        req_err(b"GET / HTTP/1.1\r\n\tHost: a\r\n\r\n"),
        Error::ObsFold
    );
}

#[test]
fn invalid_token_in_method_is_rejected() {
    for text in [
        &b"G(ET / HTTP/1.1\r\nHost: a\r\n\r\n"[..],
        b" GET / HTTP/1.1\r\nHost: a\r\n\r\n",
        b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
        b"G\xc3\xa9T / HTTP/1.1\r\nHost: a\r\n\r\n",
    ] {
        assert_eq!(req_err(text), Error::InvalidMethod, "{text:?}");
    }
    assert_eq!(
        req_ok(b"M-SEARCH /x HTTP/1.1\r\nHost: a\r\n\r\n").method,
        Method::Other
    );
}

#[test]
fn invalid_token_in_header_name_is_rejected() {
    for text in [
        &b"GET / HTTP/1.1\r\nHo(st: a\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\n: a\r\n\r\n",
        b"GET / HTTP/1.1\r\nno colon\r\n\r\n",
        b"GET / HTTP/1.1\r\nnocolon\r\n\r\n",
        b"GET / HTTP/1.1\r\nX\xff: a\r\n\r\n",
    ] {
        assert_eq!(req_err(text), Error::InvalidHeaderName, "{text:?}");
    }
}

#[test]
fn content_length_not_all_digits_is_rejected() {
    for value in ["+5", "-1", "0x10", "5 5", "5,5", "", "1_0", "five"] {
        let text = format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {value}\r\n\r\n");
        assert_eq!(
            req_err(text.as_bytes()),
            Error::InvalidContentLength,
            "{value:?}"
        );
    }
}

#[test]
fn content_length_that_overflows_is_rejected() {
    let text = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551616\r\n\r\n";
    assert_eq!(req_err(text), Error::InvalidContentLength);
    let max = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551615\r\n\r\n";
    assert_eq!(req_ok(max).framing, Framing::Length(u64::MAX));
}

#[test]
fn several_content_lengths_with_different_values_are_rejected() {
    let text = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n";
    assert_eq!(req_err(text), Error::ConflictingContentLength);
}

#[test]
fn several_content_lengths_with_the_same_value_count_once() {
    let text = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\ncontent-length: 05\r\n\r\n";
    assert_eq!(req_ok(text).framing, Framing::Length(5));
}

#[test]
fn content_length_with_transfer_encoding_is_rejected() {
    for text in [
        &b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
    ] {
        assert_eq!(req_err(text), Error::ContentLengthWithTransferEncoding);
    }
    let response = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(
        resp(response, false),
        Err(Error::ContentLengthWithTransferEncoding)
    );
}

#[test]
fn transfer_encoding_whose_last_coding_is_not_chunked_is_rejected() {
    for value in [
        "gzip",
        "chunked, gzip",
        "chunked, chunked",
        "chunked;x=1",
        "\"chunked\"",
        "",
    ] {
        let text = format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: {value}\r\n\r\n");
        assert_eq!(
            req_err(text.as_bytes()),
            Error::TransferEncodingNotChunked,
            "{value:?}"
        );
    }
    // Two fields are one list: chunked must end it.
    let two = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n";
    assert_eq!(req_err(two), Error::TransferEncodingNotChunked);
    for value in ["chunked", "CHUNKED", " chunked ", ",chunked,"] {
        let text = format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: {value}\r\n\r\n");
        assert_eq!(
            req_ok(text.as_bytes()).framing,
            Framing::Chunked,
            "{value:?}"
        );
    }
}

#[test]
fn unknown_transfer_coding_is_rejected_with_501() {
    // A registered coding under chunked is refused too (E14,
    // docs/design.md#framing-passed-on-is-framing-understood): Quill decodes none, so it cannot
    // pass one on as understood.
    for value in [
        "identity",
        "br, chunked",
        "foo",
        "gzip, chunked",
        "gzip,,chunked",
        "deflate, chunked",
        "x-gzip, chunked",
    ] {
        let text = format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: {value}\r\n\r\n");
        let e = req_err(text.as_bytes());
        assert_eq!(e, Error::UnknownTransferCoding, "{value:?}");
        assert_eq!(e.request_status(), 501);
    }
}

#[test]
fn chunked_in_http_1_0_is_rejected() {
    let text = b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(req_err(text), Error::TransferEncodingInHttp10);
    let response = b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(resp(response, false), Err(Error::TransferEncodingInHttp10));
}

#[test]
fn request_target_must_be_origin_or_absolute_form() {
    assert_eq!(
        req_ok(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n").target_form,
        Target::Origin
    );
    let abs = b"GET http://a.example/x HTTP/1.1\r\nHost: a.example\r\n\r\n";
    assert_eq!(req_ok(abs).target_form, Target::Absolute);
    for target in [
        "x",
        "a.example:80",
        "http:///x",
        "ftp://a/",
        "/a#frag",
        "/a\\b",
        "/\u{ff}",
    ] {
        let text = format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(req_err(text.as_bytes()), Error::InvalidTarget, "{target:?}");
    }
}

#[test]
fn asterisk_form_is_for_options_only() {
    let ok = req_ok(b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(ok.target_form, Target::Asterisk);
    assert_eq!(
        req_err(b"GET * HTTP/1.1\r\nHost: a\r\n\r\n"),
        Error::InvalidTarget
    );
}

#[test]
fn authority_form_is_for_connect_only() {
    let ok = req_ok(b"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n");
    assert_eq!(ok.target_form, Target::Authority);
    assert_eq!(ok.method, Method::Connect);
    for text in [
        &b"CONNECT /x HTTP/1.1\r\nHost: a\r\n\r\n"[..],
        b"CONNECT a.example HTTP/1.1\r\nHost: a\r\n\r\n",
        b"CONNECT a.example:x HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET a.example:443 HTTP/1.1\r\nHost: a\r\n\r\n",
    ] {
        assert_eq!(req_err(text), Error::InvalidTarget, "{text:?}");
    }
}

#[test]
fn missing_host_in_http_1_1_is_rejected() {
    assert_eq!(req_err(b"GET / HTTP/1.1\r\n\r\n"), Error::MissingHost);
    assert_eq!(req_ok(b"GET / HTTP/1.0\r\n\r\n").host, None);
    let lenient = Limits {
        require_host: false,
        ..LIMITS
    };
    assert!(parse_request(b"GET / HTTP/1.1\r\n\r\n", &lenient).is_ok_and(|h| h.is_some()));
    // An empty Host is what a client sends for a target without authority: allowed.
    assert!(req_ok(b"GET / HTTP/1.1\r\nHost:\r\n\r\n")
        .host
        .is_some_and(|s| s.is_empty()));
}

#[test]
fn several_hosts_are_rejected() {
    let text = b"GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n";
    assert_eq!(req_err(text), Error::SeveralHosts);
    let lenient = Limits {
        require_host: false,
        ..LIMITS
    };
    assert_eq!(parse_request(text, &lenient), Err(Error::SeveralHosts));
}

#[test]
fn host_that_is_not_a_host_and_port_is_rejected() {
    for host in ["a b", "a/b", "a@b", "a\"b"] {
        let text = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
        assert_eq!(req_err(text.as_bytes()), Error::InvalidHost, "{host:?}");
    }
    assert!(req_ok(b"GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n")
        .host
        .is_some());
    // A percent-encoded name could be read two ways; a port is digits.
    for host in [
        "admin%2etest",
        "a:b",
        "a:123456",
        "a|b",
        "a{b",
        "[::1",
        "a:1:2",
    ] {
        let text = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
        assert_eq!(req_err(text.as_bytes()), Error::InvalidHost, "{host:?}");
    }
}

#[test]
fn absolute_form_authority_is_the_request_host_and_host_must_agree() {
    let text = b"GET http://B.example:80/p?q HTTP/1.1\r\nHost: b.example\r\n\r\n";
    let h = req_ok(text);
    assert_eq!(h.authority.map(|a| a.of(text)), Some(&b"B.example:80"[..]));
    let text = b"GET /p HTTP/1.1\r\nHost: a.example\r\n\r\n";
    assert_eq!(
        req_ok(text).authority.map(|a| a.of(text)),
        Some(&b"a.example"[..])
    );
    // HTTP/1.0 without Host: the authority alone.
    let text = b"GET https://a.example:8443 HTTP/1.0\r\n\r\n";
    assert_eq!(
        req_ok(text).authority.map(|a| a.of(text)),
        Some(&b"a.example:8443"[..])
    );
    assert_eq!(req_ok(b"GET / HTTP/1.0\r\n\r\n").authority, None);
    // An empty or invalid authority, or userinfo: refused (E2).
    for target in [
        "http://x@/secret",
        "http://x@admin.test/secret",
        "http://admin.test|/secret",
        "http://a{b/secret",
        "HTTP://x^y/",
        "http://:80/",
        "http://a:b/",
        "http://[::1/",
    ] {
        let text = format!("GET {target} HTTP/1.1\r\nHost: admin.test\r\n\r\n");
        assert_eq!(req_err(text.as_bytes()), Error::InvalidTarget, "{target}");
    }
    // A Host that names another host or port than the authority (E9).
    for (target, host) in [
        ("https://b.test/", "a.test"),
        ("http://a.test/", "a.test:8080"),
        ("https://a.test/", "a.test:80"),
        ("http://a.test/", ""),
    ] {
        let text = format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n");
        assert_eq!(
            req_err(text.as_bytes()),
            Error::InvalidHost,
            "{target} {host}"
        );
    }
    for (target, host) in [
        ("http://a.test/", "A.TEST:80"),
        ("https://a.test:443/", "a.test"),
        ("http://a.test:/", "a.test"),
        ("http://[::1]:80/", "[::1]"),
    ] {
        let text = format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n");
        assert!(
            req(text.as_bytes()).is_ok_and(|h| h.is_some()),
            "{target} {host}"
        );
    }
}

#[test]
fn version_other_than_1_0_and_1_1_is_rejected() {
    for text in [
        &b"GET / HTTP/1.2\r\nHost: a\r\n\r\n"[..],
        b"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
        b"GET / SPDY/3\r\n\r\n",
        b"GET / http/1.1\r\nHost: a\r\n\r\n",
        b"GET / HTTP/1.1 \r\nHost: a\r\n\r\n",
    ] {
        assert_eq!(req_err(text), Error::InvalidVersion, "{text:?}");
    }
    assert_eq!(
        req_err(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
        Error::InvalidTarget
    );
    // HTTP/0.9: no version at all.
    assert_eq!(req_err(b"GET /\r\n"), Error::InvalidRequestLine);
    assert_eq!(req_err(b"GET  / HTTP/1.1\r\n\r\n"), Error::InvalidTarget);
}

#[test]
fn head_over_the_size_limit_is_too_large() {
    let mut text = b"GET / HTTP/1.1\r\nX: ".to_vec();
    text.extend(std::iter::repeat_n(b'a', 2000));
    assert_eq!(req_err(&text), Error::HeadTooLarge);
    assert_eq!(Error::HeadTooLarge.request_status(), 431);
    // Exactly at the limit: accepted.
    let mut exact = b"GET / HTTP/1.1\r\nHost: a\r\nX: ".to_vec();
    exact.extend(std::iter::repeat_n(b'a', LIMITS.max_head - exact.len() - 4));
    exact.extend(b"\r\n\r\n");
    assert_eq!(req_ok(&exact).len, LIMITS.max_head);
}

#[test]
fn more_fields_than_the_limit_are_too_many() {
    let mut text = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
    for i in 0..LIMITS.max_headers {
        text.extend(format!("X-{i}: v\r\n").as_bytes());
    }
    text.extend(b"\r\n");
    assert_eq!(req_err(&text), Error::TooManyHeaders);
    assert_eq!(Error::TooManyHeaders.request_status(), 431);
}

#[test]
fn connection_tokens_decide_keep_alive() {
    let close = req_ok(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, Close\r\n\r\n");
    assert!(close.connection.close && !close.keep_alive());
    let old = req_ok(b"GET / HTTP/1.0\r\n\r\n");
    assert!(!old.keep_alive());
    let old_ka = req_ok(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert!(old_ka.keep_alive());
    let up =
        req_ok(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
    assert!(up.connection.upgrade);
}

#[test]
fn fields_are_walked_in_order_with_their_lines() {
    let text = b"GET / HTTP/1.1\r\nHost: a\r\nX-Y:  two words \t\r\nEmpty:\r\n\r\nbody";
    let h = req_ok(text);
    let got: Vec<(&[u8], &[u8], &[u8])> = fields(text, h.len)
        .map(|f| (f.name.of(text), f.value.of(text), f.line.of(text)))
        .collect();
    assert_eq!(
        got,
        vec![
            (&b"Host"[..], &b"a"[..], &b"Host: a\r\n"[..]),
            (b"X-Y", b"two words", b"X-Y:  two words \t\r\n"),
            (b"Empty", b"", b"Empty:\r\n"),
        ]
    );
}

#[test]
fn response_head_is_read_with_status_and_reason() {
    let text = b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nabc";
    let h = resp_ok(text);
    assert_eq!(
        (h.status, h.version, h.len),
        (404, Version::Http11, text.len() - 3)
    );
    assert_eq!(h.reason.of(text), b"Not Found");
    assert_eq!(h.framing, Framing::Length(3));
    assert!(h.keep_alive());
    // No reason at all, with or without its space.
    assert_eq!(resp_ok(b"HTTP/1.1 204\r\n\r\n").status, 204);
    assert_eq!(resp_ok(b"HTTP/1.1 204 \r\n\r\n").status, 204);
}

#[test]
fn response_to_head_has_no_body() {
    let text = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n";
    assert_eq!(
        resp(text, true).map(|h| h.map(|h| h.framing)),
        Ok(Some(Framing::None))
    );
}

#[test]
fn informational_204_and_304_responses_have_no_body() {
    for status in [
        "100 Continue",
        "101 Switching Protocols",
        "204 No Content",
        "304 Not Modified",
    ] {
        let text = format!("HTTP/1.1 {status}\r\nContent-Length: 10\r\n\r\n");
        assert_eq!(resp_ok(text.as_bytes()).framing, Framing::None, "{status}");
    }
}

#[test]
fn response_without_length_is_close_delimited() {
    let h = resp_ok(b"HTTP/1.1 200 OK\r\n\r\n");
    assert_eq!(h.framing, Framing::Close);
    assert!(!h.keep_alive());
    let chunked = resp_ok(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_eq!(chunked.framing, Framing::Chunked);
}

#[test]
fn responses_are_held_to_the_same_rules() {
    let cases: &[(&[u8], Error)] = &[
        (b"HTTP/1.1 200 OK\nX: a\r\n\r\n", Error::BareLf),
        (b"HTTP/1.1 200 OK\r\nX : a\r\n\r\n", Error::SpaceBeforeColon),
        (b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", Error::ObsFold),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            Error::ConflictingContentLength,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            Error::TransferEncodingNotChunked,
        ),
        (b"HTTP/1.1 200 O\x00K\r\n\r\n", Error::ControlChar),
        (b"HTTP/1.1 20 OK\r\n\r\n", Error::InvalidStatusLine),
        (b"HTTP/1.1 099 OK\r\n\r\n", Error::InvalidStatusLine),
        (b"HTTP/1.1 200X\r\n\r\n", Error::InvalidStatusLine),
        (b"HTTP/1.2 200 OK\r\n\r\n", Error::InvalidVersion),
        (b"SSH-2.0-OpenSSH\r\n\r\n", Error::InvalidStatusLine),
    ];
    for (text, want) in cases {
        assert_eq!(
            resp(text, false),
            Err(*want),
            "{:?}",
            String::from_utf8_lossy(text)
        );
    }
}

#[test]
fn status_code_is_known_as_soon_as_the_bytes_show_it() {
    type Peek = Result<Option<u16>, Error>;
    let cases: &[(&[u8], bool, Peek)] = &[
        (b"HTTP/1.1 200 OK\r\n", false, Ok(Some(200))),
        (
            b"HTTP/1.0 503 Service Unavailable\r\nX: y\r\n",
            false,
            Ok(Some(503)),
        ),
        (b"HTTP/1.1 204\r\n", false, Ok(Some(204))),
        (b"HTTP/1.1 301 ", false, Ok(Some(301))),
        (b"HTTP/1.1 404", true, Ok(Some(404))),
        (b"HTTP/1.1 200 OK\n", false, Ok(Some(200))),
        (b"", false, Ok(None)),
        (b"HTT", false, Ok(None)),
        (b"HTTP/1.1 20", false, Ok(None)),
        (b"HTTP/1.1 200", false, Ok(None)),
        (b"HTTP/1.1 20", true, Err(Error::InvalidStatusLine)),
        (b"", true, Err(Error::InvalidStatusLine)),
        (
            b"SSH-2.0-OpenSSH_9.6\r\n",
            false,
            Err(Error::InvalidStatusLine),
        ),
        (b"X", false, Err(Error::InvalidStatusLine)),
        (b"HTTP/2 200\r\n", false, Err(Error::InvalidStatusLine)),
        (b"HTTP/1.1 2000\r\n", false, Err(Error::InvalidStatusLine)),
        (b"HTTP/1.1 abc\r\n", false, Err(Error::InvalidStatusLine)),
        (b"HTTP/1.1 099\r\n", false, Err(Error::InvalidStatusLine)),
        (b"HTTP/1.1 600\r\n", false, Err(Error::InvalidStatusLine)),
        (b"HTTP/1.x 200\r\n", false, Err(Error::InvalidStatusLine)),
        (b"HTTP/1.1  200\r\n", false, Err(Error::InvalidStatusLine)),
    ];
    for (bytes, eof, want) in cases {
        assert_eq!(
            status_code(bytes, *eof),
            *want,
            "{:?} eof={eof}",
            String::from_utf8_lossy(bytes)
        );
    }
}

#[test]
fn length_body_ends_after_its_bytes() {
    let mut b = Body::new(Framing::Length(5));
    assert_eq!(b.feed(b"abc").map(|f| (f.used, f.done)), Ok((3, false)));
    assert_eq!(b.finish(), Err(Error::Truncated));
    let fed = b.feed(b"defGET").unwrap();
    assert_eq!((fed.used, fed.payload, fed.done), (2, 2, true));
    assert!(b.is_done() && b.finish().is_ok());
    assert_eq!(b.feed(b"more").map(|f| f.used), Ok(0));
    assert!(Body::new(Framing::None).is_done());
    assert!(Body::new(Framing::Length(0)).is_done());
}

#[test]
fn close_delimited_body_takes_everything_until_eof() {
    let mut b = Body::new(Framing::Close);
    assert_eq!(b.feed(b"abc").map(|f| (f.used, f.done)), Ok((3, false)));
    assert_eq!(b.finish(), Ok(()));
}

#[test]
fn chunked_body_counts_payload_in_any_split() {
    let body = b"5;x=1\r\nhello\r\n0b\r\n, world! ok\r\n0\r\nX-T: 1\r\n\r\nEXTRA";
    let end = body.len() - 5;
    for split in 0..end {
        let mut b = Body::new(Framing::Chunked);
        let first = b.feed(&body[..split]).unwrap();
        assert!(!first.done, "split {split}");
        let second = b.feed(&body[split..]).unwrap();
        assert!(second.done, "split {split}");
        assert_eq!(first.payload + second.payload, 16, "split {split}");
        assert_eq!(first.used + second.used, end, "split {split}");
    }
}

#[test]
fn bad_chunk_size_is_rejected() {
    for data in [
        &b"zz\r\n"[..],
        b"\r\n",
        b"0x5\r\nhello\r\n0\r\n\r\n",
        b"+5\r\nhello\r\n",
        b"-1\r\n",
        b"11111111111111111\r\n",
    ] {
        assert_eq!(
            decode(Framing::Chunked, data),
            Err(Error::BadChunkSize),
            "{data:?}"
        );
    }
    // 16 hex digits still fit.
    assert!(decode(Framing::Chunked, b"fffffffffffffff0\r\nab").is_ok());
}

#[test]
fn zero_padded_chunk_sizes_are_bounded() {
    // E14 (docs/design.md#framing-passed-on-is-framing-understood): a 66-digit zero-padded size
    // went to servers as it came. At most MAX_CHUNK_SIZE_DIGITS digits, zeros included.
    let max = body::MAX_CHUNK_SIZE_DIGITS as usize;
    let padded = |digits: usize| {
        let mut v = "0".repeat(digits - 1).into_bytes();
        v.extend(b"5\r\nhello\r\n0\r\n\r\n");
        v
    };
    assert!(decode(Framing::Chunked, &padded(max)).is_ok_and(|f| f.done && f.payload == 5));
    for digits in [max + 1, 66] {
        assert_eq!(
            decode(Framing::Chunked, &padded(digits)),
            Err(Error::BadChunkSize),
            "{digits} digits"
        );
    }
    // The last chunk too.
    let zeros = format!("{}\r\n\r\n", "0".repeat(max + 1));
    assert_eq!(
        decode(Framing::Chunked, zeros.as_bytes()),
        Err(Error::BadChunkSize)
    );
    // 16 significant digits with four zeros of padding fit; a 17th significant one never does.
    assert!(decode(Framing::Chunked, b"0000fffffffffffffff0\r\nab").is_ok());
    assert_eq!(
        decode(Framing::Chunked, b"00010000000000000000\r\n"),
        Err(Error::BadChunkSize)
    );
}

#[test]
fn chunk_extensions_are_bounded() {
    let line = |ext: usize| {
        let mut v = b"5;".to_vec();
        v.extend(std::iter::repeat_n(b'e', ext));
        v.extend(b"\r\nhello\r\n0\r\n\r\n");
        v
    };
    // "5;" + the extension + CRLF make the line.
    let most = body::MAX_CHUNK_LINE - 4;
    assert!(decode(Framing::Chunked, &line(most)).is_ok_and(|f| f.done));
    assert_eq!(
        decode(Framing::Chunked, &line(most + 1)),
        Err(Error::BadChunkLine)
    );
    assert_eq!(
        decode(Framing::Chunked, &line(2000)),
        Err(Error::BadChunkLine)
    );
}

#[test]
fn bad_chunk_line_is_rejected() {
    for data in [
        &b"5\nhello\r\n"[..],
        b"5;a\rb\r\nhello\r\n",
        b"5;a\x00\r\nhello\r\n",
        b"5 \r\nhello\r\n",
        b"5\r\nhelloX\r\n",
        b"5\r\nhello\n0\r\n\r\n",
        b"5\r\nhello\r\r\n",
    ] {
        assert_eq!(
            decode(Framing::Chunked, data),
            Err(Error::BadChunkLine),
            "{data:?}"
        );
    }
    let mut long = b"1;".to_vec();
    long.extend(std::iter::repeat_n(b'x', body::MAX_CHUNK_LINE));
    assert_eq!(decode(Framing::Chunked, &long), Err(Error::BadChunkLine));
    // Extensions with spaces before the semicolon are fine.
    assert!(decode(Framing::Chunked, b"5 ; a=\"b c\"\r\nhello\r\n0\r\n\r\n").is_ok_and(|f| f.done));
}

#[test]
fn bad_trailer_is_rejected() {
    for data in [
        &b"0\r\nX : 1\r\n\r\n"[..],
        b"0\r\n X: 1\r\n\r\n",
        b"0\r\nX: 1\n\r\n",
        b"0\r\nX: \x01\r\n\r\n",
        b"0\r\n\n",
        b"0\r\n\rX",
        b"0\r\nnocolon\r\n\r\n",
    ] {
        assert_eq!(
            decode(Framing::Chunked, data),
            Err(Error::BadTrailer),
            "{data:?}"
        );
    }
    let mut long = b"0\r\nX: ".to_vec();
    long.extend(std::iter::repeat_n(b'x', body::MAX_TRAILERS));
    assert_eq!(decode(Framing::Chunked, &long), Err(Error::BadTrailer));
}

#[test]
fn an_error_sticks_and_a_cut_body_is_truncated() {
    let mut b = Body::new(Framing::Chunked);
    assert_eq!(b.feed(b"5\r\nhel").map(|f| f.payload), Ok(3));
    assert_eq!(b.finish(), Err(Error::Truncated));
    assert_eq!(b.feed(b"loX"), Err(Error::BadChunkLine));
    assert_eq!(b.feed(b"\r\n0\r\n\r\n"), Err(Error::BadChunkLine));
    assert_eq!(b.finish(), Err(Error::BadChunkLine));
}

#[test]
fn canned_replies_are_well_formed() {
    for status in [
        400, 403, 404, 405, 408, 413, 414, 421, 429, 431, 500, 501, 502, 503, 504, 505,
    ] {
        let reply = canned(status).unwrap_or_else(|| panic!("no canned {status}"));
        let h = parse_response(reply.bytes, &Limits::default(), false)
            .unwrap_or_else(|e| panic!("{status}: {e}"))
            .unwrap_or_else(|| panic!("{status}: incomplete"));
        assert_eq!(h.status, status);
        assert_eq!(h.reason.of(reply.bytes), reason(status).as_bytes());
        assert!(h.connection.close);
        assert_eq!(h.len, reply.head_len);
        assert_eq!(reply.head(), &reply.bytes[..h.len]);
        let body = &reply.bytes[h.len..];
        assert_eq!(h.framing, Framing::Length(body.len() as u64), "{status}");
        assert_eq!(body, format!("{status} {}\n", reason(status)).as_bytes());
    }
    assert_eq!(canned(200), None);
    assert_eq!(reason(299), "Unknown");
}

#[test]
fn errors_name_themselves_and_map_to_statuses() {
    assert_eq!(Error::ObsFold.name(), "obs_fold");
    assert_eq!(Error::BareLf.to_string(), "LF not preceded by CR");
    assert_eq!(
        Error::ContentLengthWithTransferEncoding.request_status(),
        400
    );
}

#[test]
fn request_line_over_the_limit_is_too_long() {
    let limits = Limits {
        max_request_line: 32,
        ..LIMITS
    };
    // 30 bytes and its CRLF: at the limit, accepted.
    let line = format!("GET /{} HTTP/1.1\r\n", "a".repeat(16));
    assert_eq!(line.len(), 32);
    let text = format!("{line}Host: a\r\n\r\n");
    assert!(parse_request(text.as_bytes(), &limits).is_ok_and(|h| h.is_some()));
    // One byte more: refused as soon as the bytes show it, before its end.
    let long = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(17));
    assert_eq!(
        parse_request(long.as_bytes(), &limits),
        Err(Error::RequestLineTooLong)
    );
    assert_eq!(
        parse_request(&long.as_bytes()[..32], &limits),
        Err(Error::RequestLineTooLong)
    );
    assert_eq!(parse_request(&long.as_bytes()[..31], &limits), Ok(None));
    // A long method or a long target alike.
    let method = format!("{} / HTTP/1.1\r\n", "M".repeat(40));
    assert_eq!(
        parse_request(method.as_bytes(), &limits),
        Err(Error::RequestLineTooLong)
    );
    assert_eq!(Error::RequestLineTooLong.request_status(), 414);
    assert_eq!(Error::RequestLineTooLong.name(), "request_line_too_long");
    // Fields may be longer than the request line: the head's limit is theirs.
    let field = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n",
        "v".repeat(100)
    );
    assert!(parse_request(field.as_bytes(), &limits).is_ok_and(|h| h.is_some()));
    // A line limit at or over the head's: the head's limit is met first (431).
    let huge = format!("GET /{} HTTP/1.1\r\n", "a".repeat(2000));
    assert_eq!(
        parse_request(huge.as_bytes(), &LIMITS),
        Err(Error::HeadTooLarge)
    );
    assert_eq!(Limits::default().max_request_line, 8 * 1024);
}

#[test]
fn field_value_is_the_first_value_of_the_name() {
    let text = b"GET / HTTP/1.1\r\nHost: a\r\nexpect:  100-continue \r\nX-Request-ID: 1\r\nx-request-id: 2\r\n\r\nbody";
    let h = req_ok(text);
    assert_eq!(
        field_value(text, h.len, b"Expect"),
        Some(&b"100-continue"[..])
    );
    assert_eq!(field_value(text, h.len, b"x-request-id"), Some(&b"1"[..]));
    assert_eq!(field_value(text, h.len, b"cookie"), None);
    // The body is not part of the head.
    assert_eq!(field_value(text, h.len, b"body"), None);
}

#[test]
fn a_blank_line_is_found_whatever_the_line_ends_and_only_then() {
    use super::has_blank_line;
    assert!(has_blank_line(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nbody"));
    assert!(has_blank_line(b"GET / HTTP/1.1\nHost: a\n\n"));
    assert!(has_blank_line(b"\n\r\n"));
    assert!(has_blank_line(b"a\r\n\n"));
    assert!(!has_blank_line(b"GET / HTTP/1.1\r\nHost: a\r\n"));
    assert!(!has_blank_line(b"GET / HTTP/1.1\r\nHost: a\r\n\r"));
    assert!(!has_blank_line(b"a\r\r\n\r"));
    assert!(!has_blank_line(b""));
    // The same answer as a look at every window of the bytes, for every cut of a head.
    let head = b"HTTP/1.1 200 OK\r\nA: b\n\r\nC: d\r\n\r\nxyz\n";
    for from in 0..head.len() {
        for to in from..=head.len() {
            let b = &head[from..to];
            let slow = b.windows(2).any(|w| w == b"\n\n") || b.windows(3).any(|w| w == b"\n\r\n");
            assert_eq!(has_blank_line(b), slow, "{from}..{to}");
        }
    }
}
