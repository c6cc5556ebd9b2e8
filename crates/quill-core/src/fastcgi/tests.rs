use proptest::prelude::*;

use super::*;

/// A record as a server would write it.
fn record(kind: u8, id: u16, content: &[u8], padding: u8) -> Vec<u8> {
    let mut out = header(kind, id, content.len() as u16, padding).to_vec();
    out.extend_from_slice(content);
    out.extend(std::iter::repeat_n(0xee, usize::from(padding)));
    out
}

fn end_record(app_status: u32, protocol_status: u8) -> Vec<u8> {
    let mut content = app_status.to_be_bytes().to_vec();
    content.extend_from_slice(&[protocol_status, 0, 0, 0]);
    record(kind::END_REQUEST, REQUEST_ID, &content, 0)
}

/// What a stream of events says, with adjacent pieces of one stream joined (how bytes are cut
/// decides the pieces, never the streams).
#[derive(Debug, PartialEq, Eq)]
enum Said {
    Out(Vec<u8>),
    Err(Vec<u8>),
    End(u32, ProtocolStatus),
    Values(Values),
}

/// Feeds `input` cut at `cuts` (offsets, any order) and collects what the decoder said, or its
/// error.
fn decode_cut(input: &[u8], cuts: &[usize]) -> Result<Vec<Said>, Error> {
    let mut bounds: Vec<usize> = cuts.iter().map(|&c| c.min(input.len())).collect();
    bounds.push(input.len());
    bounds.sort_unstable();
    let mut dec = Decoder::new(REQUEST_ID);
    let mut said = Vec::new();
    let mut start = 0;
    for end in bounds {
        let mut piece = &input[start..end];
        start = end;
        // Each call consumes at least one byte or gives an event: bounded by twice the length.
        for _ in 0..=2 * input.len() + 2 {
            if piece.is_empty() {
                break;
            }
            let (n, event) = dec.feed(piece)?;
            if let Some(e) = event {
                push(&mut said, e, piece);
            }
            piece = &piece[n..];
        }
        assert!(piece.is_empty(), "the decoder stopped consuming");
    }
    Ok(said)
}

fn push(said: &mut Vec<Said>, event: Event, input: &[u8]) {
    match (event, said.last_mut()) {
        (Event::Stdout(r), Some(Said::Out(v))) => v.extend_from_slice(&input[r]),
        (Event::Stdout(r), _) => said.push(Said::Out(input[r].to_vec())),
        (Event::Stderr(r), Some(Said::Err(v))) => v.extend_from_slice(&input[r]),
        (Event::Stderr(r), _) => said.push(Said::Err(input[r].to_vec())),
        (
            Event::End {
                app_status,
                protocol_status,
            },
            _,
        ) => said.push(Said::End(app_status, protocol_status)),
        (Event::GetValuesResult(v), _) => said.push(Said::Values(v)),
    }
}

// === writers ===

#[test]
fn a_begin_request_with_keep_conn_is_the_spec_bytes() {
    let mut out = Vec::new();
    begin_request(&mut out, REQUEST_ID, Role::Responder, true);
    assert_eq!(out, [1, 1, 0, 1, 0, 8, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0]);
}

#[test]
fn a_begin_request_without_keep_conn_has_no_flags() {
    let mut out = vec![0xaa];
    begin_request(&mut out, 7, Role::Responder, false);
    assert_eq!(out, [0xaa, 1, 1, 0, 7, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn abort_and_end_of_stdin_are_empty_records() {
    let mut out = Vec::new();
    abort_request(&mut out, REQUEST_ID);
    end_stdin(&mut out, REQUEST_ID);
    assert_eq!(out, [1, 2, 0, 1, 0, 0, 0, 0, 1, 5, 0, 1, 0, 0, 0, 0]);
}

#[test]
fn short_params_take_one_length_byte_and_are_padded_then_ended() {
    let mut out = Vec::new();
    let mut params = Params::new(&mut out, REQUEST_ID);
    params.add(b"A", b"bc").unwrap();
    params.finish();
    assert_eq!(
        out,
        [1, 4, 0, 1, 0, 5, 3, 0, 1, 2, b'A', b'b', b'c', 0, 0, 0, 1, 4, 0, 1, 0, 0, 0, 0]
    );
}

#[test]
fn a_value_of_128_bytes_or_more_takes_four_length_bytes() {
    let mut out = Vec::new();
    let mut params = Params::new(&mut out, REQUEST_ID);
    params.add(b"N", &[b'v'; 300]).unwrap();
    params.finish();
    assert_eq!(&out[8..14], &[1, 0x80, 0, 0x01, 0x2c, b'N']);
    assert_eq!(u16::from_be_bytes([out[4], out[5]]), 1 + 4 + 1 + 300);
}

#[test]
fn no_params_is_only_the_empty_record() {
    let mut out = Vec::new();
    Params::new(&mut out, REQUEST_ID).finish();
    assert_eq!(out, [1, 4, 0, 1, 0, 0, 0, 0]);
}

#[test]
fn params_over_one_record_go_on_in_the_next_with_pairs_whole() {
    let mut out = Vec::new();
    let mut params = Params::new(&mut out, REQUEST_ID);
    let value = vec![b'x'; 40_000];
    params.add(b"ONE", &value).unwrap();
    params.add(b"TWO", &value).unwrap();
    params.finish();
    let records = read_params(&out);
    assert_eq!(records.len(), 2, "two full records, then the empty one");
    assert_eq!(records[0], vec![(b"ONE".to_vec(), value.clone())]);
    assert_eq!(records[1], vec![(b"TWO".to_vec(), value)]);
}

#[test]
fn a_pair_longer_than_a_record_is_refused_and_nothing_is_written() {
    let mut out = Vec::new();
    let mut params = Params::new(&mut out, REQUEST_ID);
    params.add(b"A", b"1").unwrap();
    let too_long = vec![b'x'; MAX_CONTENT];
    assert_eq!(params.add(b"B", &too_long), Err(NameRefused::TooLong));
    params.finish();
    assert_eq!(
        read_params(&out),
        vec![vec![(b"A".to_vec(), b"1".to_vec())]]
    );
}

#[test]
fn request_fields_become_http_names_in_upper_case_with_underscores() {
    let mut name = Vec::new();
    http_param_name(b"Accept-Encoding", &mut name).unwrap();
    assert_eq!(name, b"HTTP_ACCEPT_ENCODING");
    let mut out = Vec::new();
    let mut params = Params::new(&mut out, REQUEST_ID);
    params.add_field(b"x-Forwarded-for", b"192.0.2.1").unwrap();
    params.finish();
    let pairs = read_params(&out).concat();
    assert_eq!(
        pairs,
        vec![(b"HTTP_X_FORWARDED_FOR".to_vec(), b"192.0.2.1".to_vec())]
    );
}

#[test]
fn proxy_never_becomes_http_proxy() {
    for name in [&b"Proxy"[..], b"PROXY", b"pRoXy"] {
        let mut out = Vec::new();
        assert_eq!(http_param_name(name, &mut out), Err(NameRefused::Proxy));
        let mut params = Params::new(&mut out, REQUEST_ID);
        assert_eq!(
            params.add_field(name, b"http://evil:1"),
            Err(NameRefused::Proxy)
        );
        params.finish();
        assert_eq!(
            out,
            [1, 4, 0, 1, 0, 0, 0, 0],
            "nothing written for {name:?}"
        );
    }
    let mut out = Vec::new();
    http_param_name(b"Proxy-Authorization", &mut out).unwrap();
    assert_eq!(out, b"HTTP_PROXY_AUTHORIZATION");
}

#[test]
fn field_names_that_are_not_tokens_or_have_underscores_are_refused() {
    let refused = [
        (&b""[..], NameRefused::NotToken),
        (b"Bad Name", NameRefused::NotToken),
        (b"a:b", NameRefused::NotToken),
        (b"caf\xc3\xa9", NameRefused::NotToken),
        (b"X_Real_IP", NameRefused::Underscore),
        (b"Content-Type", NameRefused::OwnName),
        (b"content-length", NameRefused::OwnName),
    ];
    for (name, why) in refused {
        let mut out = Vec::new();
        assert_eq!(http_param_name(name, &mut out), Err(why), "{name:?}");
        assert!(out.is_empty());
    }
}

#[test]
fn a_stdin_header_pads_to_eight_and_the_padding_matches() {
    assert_eq!(stdin_header(REQUEST_ID, 5), [1, 5, 0, 1, 0, 5, 3, 0]);
    assert_eq!(padding(5), [0, 0, 0]);
    assert_eq!(stdin_header(REQUEST_ID, 16), [1, 5, 0, 1, 0, 16, 0, 0]);
    assert!(padding(16).is_empty());
}

#[test]
fn stdin_splits_bytes_at_hand_into_records_of_at_most_the_chunk() {
    let body: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    let mut out = Vec::new();
    stdin(&mut out, REQUEST_ID, &body);
    end_stdin(&mut out, REQUEST_ID);
    let mut back = Vec::new();
    let mut rest = &out[..];
    let mut records = 0;
    while !rest.is_empty() {
        assert_eq!(&rest[..4], &[1, kind::STDIN, 0, 1]);
        let len = usize::from(u16::from_be_bytes([rest[4], rest[5]]));
        let pad = usize::from(rest[6]);
        assert!(len <= encode::STDIN_CHUNK && (len + pad) % 8 == 0);
        back.extend_from_slice(&rest[8..8 + len]);
        rest = &rest[8 + len + pad..];
        records += 1;
    }
    assert_eq!(records, 3, "two with content, then the empty one");
    assert_eq!(back, body);
}

#[test]
fn get_values_asks_for_the_three_standard_values_on_id_zero() {
    let mut out = Vec::new();
    get_values(&mut out);
    assert_eq!(&out[..4], &[1, kind::GET_VALUES, 0, 0]);
    assert_eq!(out.len() % 8, 0);
    let len = usize::from(u16::from_be_bytes([out[4], out[5]]));
    let names: Vec<Vec<u8>> = read_pairs(&out[8..8 + len])
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        [&b"FCGI_MAX_CONNS"[..], b"FCGI_MAX_REQS", b"FCGI_MPXS_CONNS"]
    );
}

/// The name-value pairs of each non-empty `PARAMS` record, checking the record framing.
fn read_params(mut out: &[u8]) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut records = Vec::new();
    loop {
        assert_eq!(&out[..4], &[1, kind::PARAMS, 0, 1]);
        let len = usize::from(u16::from_be_bytes([out[4], out[5]]));
        let pad = usize::from(out[6]);
        assert_eq!((len + pad) % 8, 0, "padded to eight");
        if len == 0 {
            assert_eq!(out.len(), 8, "the empty record ends the stream");
            return records;
        }
        records.push(read_pairs(&out[8..8 + len]));
        out = &out[8 + len + pad..];
    }
}

/// The name-value pairs of a `PARAMS` record's content (for the gateway's tests too).
pub(crate) fn read_pairs(mut content: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let len = |c: &mut &[u8]| {
        if c[0] < 128 {
            let n = usize::from(c[0]);
            *c = &c[1..];
            n
        } else {
            let n = u32::from_be_bytes([c[0] & 0x7f, c[1], c[2], c[3]]) as usize;
            *c = &c[4..];
            n
        }
    };
    let mut pairs = Vec::new();
    while !content.is_empty() {
        let n = len(&mut content);
        let v = len(&mut content);
        pairs.push((content[..n].to_vec(), content[n..n + v].to_vec()));
        content = &content[n + v..];
    }
    pairs
}

#[test]
fn a_path_splits_at_the_first_segment_ending_with_the_split() {
    type Split<'a> = Option<(&'a [u8], &'a [u8])>;
    let cases: [(&[u8], Split); 8] = [
        (b"/a.php/b/c", Some((b"/a.php", b"/b/c"))),
        (b"/a.php", Some((b"/a.php", b""))),
        (b"/dir/x.php/", Some((b"/dir/x.php", b"/"))),
        (b"/a.php.jpg", None),
        (b"/a.php.jpg/b.php/c", Some((b"/a.php.jpg/b.php", b"/c"))),
        (
            b"/uploads/evil.jpg/x.php",
            Some((b"/uploads/evil.jpg/x.php", b"")),
        ),
        (b"/.php/x", None),
        (b"/dir/", None),
    ];
    for (path, want) in cases {
        assert_eq!(
            split_script(path, b".php"),
            want,
            "{:?}",
            String::from_utf8_lossy(path)
        );
    }
    assert_eq!(split_script(b"/a.php", b""), None);
}

// === decoder ===

#[test]
fn stdout_stderr_and_end_are_read_with_padding_skipped() {
    let mut input = record(kind::STDOUT, 1, b"Status: 200\r\n\r\nhi", 6);
    input.extend(record(kind::STDERR, 1, b"warn", 4));
    input.extend(record(kind::STDOUT, 1, b"", 0));
    input.extend(end_record(3, 0));
    assert_eq!(
        decode_cut(&input, &[]).unwrap(),
        [
            Said::Out(b"Status: 200\r\n\r\nhi".to_vec()),
            Said::Err(b"warn".to_vec()),
            Said::End(3, ProtocolStatus::RequestComplete),
        ]
    );
}

#[test]
fn stdout_ranges_point_into_the_input_fed() {
    let input = record(kind::STDOUT, 1, b"abc", 5);
    let mut dec = Decoder::new(REQUEST_ID);
    assert_eq!(dec.feed(&input).unwrap(), (11, Some(Event::Stdout(8..11))));
    assert!(!dec.is_between_records());
    assert_eq!(dec.feed(&input[11..]).unwrap(), (5, None));
    assert!(dec.is_between_records());
}

#[test]
fn end_is_given_only_after_its_padding_and_then_the_decoder_is_done() {
    let mut content = 0u32.to_be_bytes().to_vec();
    content.extend_from_slice(&[2, 0, 0, 0]);
    let input = record(kind::END_REQUEST, 1, &content, 8);
    let mut dec = Decoder::new(REQUEST_ID);
    assert_eq!(dec.feed(&input[..16]).unwrap(), (16, None));
    assert!(!dec.is_done());
    let (n, event) = dec.feed(&input[16..]).unwrap();
    assert_eq!(n, 8);
    let end = Event::End {
        app_status: 0,
        protocol_status: ProtocolStatus::Overloaded,
    };
    assert_eq!(event, Some(end));
    assert!(dec.is_done() && dec.is_between_records());
    assert_eq!(dec.feed(&[1]), Err(Error::AfterEnd));
}

#[test]
fn a_version_other_than_one_is_refused() {
    let mut input = record(kind::STDOUT, 1, b"x", 7);
    input[0] = 2;
    assert_eq!(decode_cut(&input, &[3]), Err(Error::Version(2)));
}

#[test]
fn another_request_id_is_refused_and_management_records_need_id_zero() {
    let input = record(kind::STDOUT, 2, b"x", 7);
    assert_eq!(
        decode_cut(&input, &[]),
        Err(Error::RequestId {
            kind: kind::STDOUT,
            id: 2
        })
    );
    let input = record(kind::STDOUT, 0, b"x", 7);
    assert_eq!(
        decode_cut(&input, &[]),
        Err(Error::RequestId {
            kind: kind::STDOUT,
            id: 0
        })
    );
    let input = record(kind::GET_VALUES_RESULT, 1, b"", 0);
    let refused = Error::RequestId {
        kind: kind::GET_VALUES_RESULT,
        id: 1,
    };
    assert_eq!(decode_cut(&input, &[]), Err(refused));
}

#[test]
fn types_a_server_does_not_send_are_refused() {
    for t in [
        kind::BEGIN_REQUEST,
        kind::PARAMS,
        kind::STDIN,
        kind::DATA,
        kind::UNKNOWN_TYPE,
        42,
    ] {
        let input = record(t, 1, b"", 0);
        assert_eq!(decode_cut(&input, &[]), Err(Error::UnexpectedType(t)));
    }
}

#[test]
fn an_end_request_of_other_than_eight_bytes_is_refused() {
    let input = record(kind::END_REQUEST, 1, &[0; 4], 4);
    assert_eq!(decode_cut(&input, &[]), Err(Error::EndLength(4)));
}

#[test]
fn a_byte_after_end_request_is_refused() {
    let mut input = end_record(0, 0);
    input.extend(record(kind::STDOUT, 1, b"late", 4));
    assert_eq!(decode_cut(&input, &[8]), Err(Error::AfterEnd));
}

#[test]
fn php_fpm_answer_to_get_values_reads_as_no_multiplexing() {
    let input = record(kind::GET_VALUES_RESULT, 0, b"\x0f\x01FCGI_MPXS_CONNS0", 6);
    let values = Values {
        mpxs_conns: Some(false),
        ..Values::default()
    };
    assert_eq!(decode_cut(&input, &[9, 20]), Ok(vec![Said::Values(values)]));
    let all = b"\x0e\x03FCGI_MAX_CONNS100\x0d\x02FCGI_MAX_REQS50\x05\x01OTHERx";
    let input = record(kind::GET_VALUES_RESULT, 0, all, 0);
    let values = Values {
        max_conns: Some(100),
        max_reqs: Some(50),
        mpxs_conns: None,
    };
    assert_eq!(decode_cut(&input, &[]), Ok(vec![Said::Values(values)]));
}

#[test]
fn a_malformed_or_long_get_values_result_is_refused() {
    let input = record(kind::GET_VALUES_RESULT, 0, b"\x0f\x05FCGI_MPXS_CONNS0", 0);
    assert_eq!(decode_cut(&input, &[]), Err(Error::Values));
    let input = record(kind::GET_VALUES_RESULT, 0, b"\x0e\x01FCGI_MAX_CONNSx", 0);
    assert_eq!(decode_cut(&input, &[]), Err(Error::Values));
    let long = [0u8; decode::MAX_VALUES + 1];
    let input = record(kind::GET_VALUES_RESULT, 0, &long, 0);
    assert_eq!(decode_cut(&input, &[]), Err(Error::Values));
}

// === properties ===

/// A record a server may send for the request, before its end.
fn server_record() -> impl Strategy<Value = (bool, Vec<u8>, u8)> {
    (
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..300),
        any::<u8>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn records_cut_anywhere_give_the_streams_written(
        records in proptest::collection::vec(server_record(), 0..8),
        app_status in any::<u32>(),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let mut input = Vec::new();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        for (is_err, content, pad) in &records {
            let kind = if *is_err { kind::STDERR } else { kind::STDOUT };
            input.extend(record(kind, REQUEST_ID, content, *pad));
            if *is_err { err.extend_from_slice(content) } else { out.extend_from_slice(content) }
        }
        input.extend(end_record(app_status, 0));
        let cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
        let said = decode_cut(&input, &cuts).unwrap();
        let whole = decode_cut(&input, &[]).unwrap();
        prop_assert_eq!(&said, &whole);
        let (mut got_out, mut got_err) = (Vec::new(), Vec::new());
        for s in &said[..said.len() - 1] {
            match s {
                Said::Out(v) => got_out.extend_from_slice(v),
                Said::Err(v) => got_err.extend_from_slice(v),
                other => prop_assert!(false, "unexpected {:?}", other),
            }
        }
        prop_assert_eq!(got_out, out);
        prop_assert_eq!(got_err, err);
        prop_assert_eq!(said.last(), Some(&Said::End(app_status, ProtocolStatus::RequestComplete)));
    }

    #[test]
    fn arbitrary_bytes_read_the_same_cut_or_whole(
        input in proptest::collection::vec(any::<u8>(), 0..200),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
        match (decode_cut(&input, &[]), decode_cut(&input, &cuts)) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => prop_assert!(false, "whole {:?} but cut {:?}", a, b),
        }
    }

}

proptest! {
    // Long values (to cross record boundaries) make each case slow in a debug build: fewer cases.
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn params_written_read_back_as_the_pairs_in_order(
        pairs in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 0..200), 0..40_000usize, any::<u8>()),
            0..6,
        ),
    ) {
        // Long values of one repeated byte: drawing 40,000 bytes each is slow in a debug build.
        let pairs: Vec<(Vec<u8>, Vec<u8>)> =
            pairs.into_iter().map(|(name, len, byte)| (name, vec![byte; len])).collect();
        let mut out = Vec::new();
        let mut params = Params::new(&mut out, REQUEST_ID);
        for (name, value) in &pairs {
            params.add(name, value).unwrap();
        }
        params.finish();
        prop_assert_eq!(read_params(&out).concat(), pairs);
    }
}

// === a request's parameters ===

fn request<'a>() -> Request<'a> {
    Request {
        method: b"POST",
        request_uri: b"/app/a.php/b?x=1",
        document_uri: b"/app/a.php/b",
        query: b"x=1",
        script_name: b"/app/a.php",
        path_info: b"/b",
        document_root: b"/srv/www",
        protocol: b"HTTP/1.1",
        https: true,
        content_type: b"text/plain",
        content_length: Some(5),
        server_name: b"example.com",
        server_software: b"quill",
        remote: "[::ffff:192.0.2.7]:40000".parse().unwrap(),
        local: Some("[2001:db8::1]:443".parse().unwrap()),
    }
}

#[test]
fn a_request_gives_the_nginx_parameter_set_and_its_fields_as_http_names() {
    let fields: [(&[u8], &[u8]); 7] = [
        (b"Host", b"example.com"),
        (b"Cookie", b"a=1"),
        (b"Proxy", b"http://evil:1"),
        (b"Content-Type", b"text/plain"),
        (b"X-Dup", b"1"),
        (b"cookie", b"b=2"),
        (b"x-dup", b"2"),
    ];
    let mut out = Vec::new();
    let mut params = Params::new(&mut out, REQUEST_ID);
    let left_out = write_params(&request(), fields.iter().copied(), &mut params).unwrap();
    params.finish();
    assert_eq!(left_out, 2, "Proxy and Content-Type");
    let pairs = read_params(&out).concat();
    let text: Vec<String> = pairs
        .iter()
        .map(|(n, v)| {
            format!(
                "{}={}",
                String::from_utf8_lossy(n),
                String::from_utf8_lossy(v)
            )
        })
        .collect();
    let want = [
        "GATEWAY_INTERFACE=CGI/1.1",
        "SERVER_SOFTWARE=quill",
        "REQUEST_METHOD=POST",
        "REQUEST_URI=/app/a.php/b?x=1",
        "DOCUMENT_URI=/app/a.php/b",
        "QUERY_STRING=x=1",
        "SCRIPT_NAME=/app/a.php",
        "DOCUMENT_ROOT=/srv/www",
        "SERVER_PROTOCOL=HTTP/1.1",
        "REQUEST_SCHEME=https",
        "CONTENT_TYPE=text/plain",
        "SERVER_NAME=example.com",
        "SCRIPT_FILENAME=/srv/www/app/a.php",
        "PATH_INFO=/b",
        "HTTPS=on",
        "CONTENT_LENGTH=5",
        "REMOTE_ADDR=192.0.2.7",
        "REMOTE_PORT=40000",
        "SERVER_ADDR=2001:db8::1",
        "SERVER_PORT=443",
        "REDIRECT_STATUS=200",
        "HTTP_HOST=example.com",
        "HTTP_COOKIE=a=1; b=2",
        "HTTP_X_DUP=1, 2",
    ];
    assert_eq!(text, want);
}

#[test]
fn a_plain_request_has_no_https_path_info_length_or_server_address() {
    let req = Request {
        https: false,
        path_info: b"",
        content_length: None,
        local: None,
        ..request()
    };
    let mut out = Vec::new();
    let mut params = Params::new(&mut out, REQUEST_ID);
    write_params(&req, std::iter::empty(), &mut params).unwrap();
    params.finish();
    let names: Vec<Vec<u8>> = read_params(&out)
        .concat()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    for absent in [
        &b"HTTPS"[..],
        b"PATH_INFO",
        b"CONTENT_LENGTH",
        b"SERVER_ADDR",
        b"SERVER_PORT",
    ] {
        assert!(
            !names.iter().any(|n| n == absent),
            "{:?}",
            String::from_utf8_lossy(absent)
        );
    }
    assert!(names.iter().any(|n| n == b"REQUEST_SCHEME"));
}
