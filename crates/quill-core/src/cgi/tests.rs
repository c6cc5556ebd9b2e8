use proptest::prelude::*;

use super::*;

fn parse(buf: &[u8]) -> Result<Option<(CgiHead, usize)>, Error> {
    parse_head(buf, &Limits::default())
}

fn head(buf: &[u8]) -> CgiHead {
    let (head, len) = parse(buf).unwrap().expect("a whole head");
    assert_eq!(head.len, len);
    head
}

fn response(buf: &[u8], framing: Framing, connection: Connection) -> String {
    let mut out = b"junk".to_vec();
    let n = write_response_head(&head(buf), buf, framing, connection, &mut out);
    assert_eq!(n, out.len() - 4);
    String::from_utf8(out[4..].to_vec()).unwrap()
}

#[test]
fn a_php_document_with_bare_lf_is_read_and_the_body_follows() {
    let buf = b"X-Powered-By: PHP/8.2\nContent-type: text/html; charset=UTF-8\n\n<p>hi";
    let h = head(buf);
    assert_eq!(&buf[h.len..], b"<p>hi");
    assert_eq!(h.content_type.unwrap().of(buf), b"text/html; charset=UTF-8");
    assert_eq!((h.status, h.location, h.content_length), (None, None, None));
    assert_eq!(h.kind(buf), Kind::Document);
    assert_eq!(h.status_code(), 200);
}

#[test]
fn status_with_and_without_a_reason() {
    let buf = b"Status: 404 Not Found\r\nContent-Type: text/plain\r\n\r\n";
    let h = head(buf);
    let status = h.status.unwrap();
    assert_eq!(
        (status.code, status.reason.of(buf)),
        (404, &b"Not Found"[..])
    );
    let text = response(buf, Framing::Length(0), Connection::Omit);
    assert!(text.starts_with("HTTP/1.1 404 Not Found\r\n"), "{text}");
    let buf = b"Status: 503\nContent-Type: text/plain\n\n";
    let text = response(buf, Framing::Length(0), Connection::Omit);
    assert!(
        text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
        "{text}"
    );
}

#[test]
fn statuses_that_are_not_a_final_code_with_a_reason_are_refused() {
    for value in [
        "99",
        "1000",
        "abc",
        "404x",
        "100 Continue",
        "199",
        "600",
        "099",
        "",
    ] {
        let buf = format!("Status: {value}\nContent-Type: text/plain\n\n");
        assert_eq!(
            parse(buf.as_bytes()),
            Err(Error::InvalidStatus),
            "{value:?}"
        );
    }
    assert!(parse(b"Status: 200\n\n").unwrap().is_some());
    assert!(parse(b"Status: 599 \n\n").unwrap().is_some());
}

#[test]
fn a_local_location_without_status_is_a_local_redirect_answered_302_otherwise() {
    let buf = b"Location: /other.php?x=1\n\n";
    let h = head(buf);
    let Kind::LocalRedirect(at) = h.kind(buf) else {
        panic!("{:?}", h.kind(buf))
    };
    assert_eq!(at.of(buf), b"/other.php?x=1");
    let text = response(buf, Framing::Length(0), Connection::Omit);
    assert_eq!(
        text,
        "HTTP/1.1 302 Found\r\nLocation: /other.php?x=1\r\nContent-Length: 0\r\n\r\n"
    );
}

#[test]
fn an_absolute_or_network_location_is_a_client_redirect_302_unless_a_status_is_given() {
    for buf in [
        &b"Location: https://example.com/\n\n"[..],
        b"Location: //example.com/x\n\n",
    ] {
        let h = head(buf);
        assert_eq!((h.kind(buf), h.status_code()), (Kind::ClientRedirect, 302));
    }
    let buf = b"Status: 301 Moved Permanently\nLocation: /new\nContent-Type: text/html\n\n";
    let h = head(buf);
    assert_eq!((h.kind(buf), h.status_code()), (Kind::ClientRedirect, 301));
}

#[test]
fn hop_by_hop_fields_status_and_length_are_not_passed_on_and_the_rest_keep_their_order() {
    let buf =
        b"Set-Cookie: a=1\r\nConnection: close\r\nStatus: 201\r\nTransfer-Encoding: chunked\r\n\
Keep-Alive: timeout=5\r\nContent-Length: 5\r\nX-A:  two  words \r\nTE: trailers\r\nUpgrade: h2c\r\n\
Trailer: X\r\nProxy-Connection: x\r\nSet-Cookie: b=2\r\n\r\nhello";
    let h = head(buf);
    assert_eq!(h.content_length, Some(5));
    let fields: Vec<(&[u8], &[u8])> = h.fields(buf).collect();
    let want: [(&[u8], &[u8]); 3] = [
        (b"Set-Cookie", b"a=1"),
        (b"X-A", b"two  words"),
        (b"Set-Cookie", b"b=2"),
    ];
    assert_eq!(fields, want);
    let text = response(buf, Framing::Length(5), Connection::KeepAlive);
    assert_eq!(
        text,
        "HTTP/1.1 201 Created\r\nSet-Cookie: a=1\r\nX-A: two  words\r\nSet-Cookie: b=2\r\n\
Content-Length: 5\r\nConnection: keep-alive\r\n\r\n"
    );
}

#[test]
fn the_caller_framing_and_connection_are_written() {
    let buf = b"Content-Type: text/plain\n\n";
    let chunked = response(buf, Framing::Chunked, Connection::Close);
    assert_eq!(
        chunked,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\
Connection: close\r\n\r\n"
    );
    let closed = response(buf, Framing::Close, Connection::Close);
    assert_eq!(
        closed,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
    );
}

#[test]
fn a_response_without_content_type_is_passed_without_one() {
    let buf = b"Status: 204 No Content\n\n";
    let text = response(buf, Framing::Length(0), Connection::Omit);
    assert_eq!(text, "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n");
}

#[test]
fn malformed_heads_are_refused_each_with_its_kind() {
    let cases: [(&[u8], Error); 14] = [
        (b"\n", Error::NoFields),
        (b"\r\n", Error::NoFields),
        (b"A: 1\n folded\n\n", Error::ObsFold),
        (b"A: 1\n\tfolded\n\n", Error::ObsFold),
        (b"no colon\n\n", Error::InvalidFieldName),
        (b"Bad Name: 1\n\n", Error::InvalidFieldName),
        (b"Name : 1\n\n", Error::InvalidFieldName),
        (b"A: x\ry\n\n", Error::BareCr),
        (b"A: x\r\r\n\n", Error::BareCr),
        (b"A: x\0y\n\n", Error::ControlChar),
        (b"Content-Length: 1x\n\n", Error::InvalidContentLength),
        (
            b"Content-Length: 1\nContent-Length: 2\n\n",
            Error::ConflictingContentLength,
        ),
        (
            b"Content-Type: a\nContent-type: b\n\n",
            Error::DuplicateField,
        ),
        (b"Location:\n\n", Error::InvalidLocation),
    ];
    for (buf, why) in cases {
        assert_eq!(parse(buf), Err(why), "{:?}", String::from_utf8_lossy(buf));
    }
    assert!(parse(b"Content-Length: 7\ncontent-length: 7\n\n")
        .unwrap()
        .is_some());
}

#[test]
fn an_unfinished_head_is_incomplete_until_over_the_limit() {
    let limits = Limits {
        max_head: 32,
        max_fields: 2,
    };
    assert_eq!(parse_head(b"Content-Type: text/plain\n", &limits), Ok(None));
    assert_eq!(parse_head(&[b'a'; 33], &limits), Err(Error::HeadTooLarge));
    assert_eq!(parse_head(&[b'a'; 32], &limits), Ok(None));
    let head = b"Content-Type: text/plain\nA: 1234\n\n";
    assert_eq!(parse_head(head, &limits), Err(Error::HeadTooLarge));
    assert_eq!(
        parse_head(b"A: 1\nB: 2\nC: 3\n\n", &limits),
        Err(Error::TooManyFields)
    );
    let fits = b"Content-Type: text/plain\nA: 12\n\n";
    assert_eq!(fits.len(), 32);
    assert!(parse_head(fits, &limits).unwrap().is_some());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_prefix_is_incomplete_or_reads_as_the_whole(
        input in proptest::collection::vec(
            prop_oneof![
                Just(b'\n'), Just(b'\r'), Just(b':'), Just(b' '), Just(b'1'),
                Just(b'S'), any::<u8>(),
            ],
            0..80,
        ),
        prefix in "Status: 2|Content-Length: |Location: /|X: ",
    ) {
        let mut data = prefix.into_bytes();
        data.extend_from_slice(&input);
        let limits = Limits { max_head: 64, max_fields: 4 };
        let whole = parse_head(&data, &limits);
        if let Ok(Some((head, len))) = whole {
            prop_assert!(len <= data.len() && len <= limits.max_head);
            prop_assert_eq!(head.len, len);
            let mut out = Vec::new();
            write_response_head(&head, &data, Framing::Chunked, Connection::Omit, &mut out);
            let parsed = crate::http1::parse_response(&out, &crate::http1::Limits::default(), false);
            prop_assert!(matches!(parsed, Ok(Some(_))), "{:?} gave {:?}", String::from_utf8_lossy(&out), parsed);
        }
        for end in 0..data.len() {
            match (parse_head(&data[..end], &limits), &whole) {
                (Ok(None), _) => {}
                (Ok(Some(p)), Ok(Some(w))) => prop_assert_eq!(&p, w),
                (Err(_), Err(_)) => {}
                (p, w) => prop_assert!(false, "prefix {}: {:?} but whole {:?}", end, p, w),
            }
        }
    }
}
