//! The connection fed whole conversations: what it answers by itself, what it hands the
//! application, and how it ends floods.

use super::frame::{self, flag, kind, setting, Code, Header, PREFACE};
use super::hpack::{encode_field, Decoder};
use super::*;

/// An event without the borrow of the input.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Ev {
    Request(u32, bool),
    Data(u32, Vec<u8>, bool),
    Trailers(u32),
    Reset(u32, Code),
    WindowOpened,
    GoAway,
    Error(Code),
}

/// Feeds `input` frame by frame; the events and the bytes left over.
pub(super) fn feed_all(c: &mut Conn, input: &[u8], now: u64) -> (Vec<Ev>, usize) {
    let mut at = 0;
    let mut evs = Vec::new();
    for _ in 0..100_000 {
        let (n, ev) = c.feed(&input[at..], now);
        at += n;
        match ev {
            Event::None => {}
            Event::Request { stream, end_stream } => evs.push(Ev::Request(stream, end_stream)),
            Event::Data {
                stream,
                data,
                end_stream,
            } => evs.push(Ev::Data(stream, data.to_vec(), end_stream)),
            Event::Trailers { stream } => evs.push(Ev::Trailers(stream)),
            Event::Reset { stream, code } => evs.push(Ev::Reset(stream, code)),
            Event::WindowOpened => evs.push(Ev::WindowOpened),
            Event::GoAway => evs.push(Ev::GoAway),
            Event::Error(code) => {
                evs.push(Ev::Error(code));
                break;
            }
        }
        if n == 0 {
            break;
        }
    }
    (evs, at)
}

/// A frame's bytes.
pub(super) fn frame_bytes(k: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write_header(&mut out, payload.len(), k, flags, stream);
    out.extend_from_slice(payload);
    out
}

pub(super) fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, v) in fields {
        if n.bytes().any(|b| b.is_ascii_uppercase()) {
            // A literal name as it is (Quill's encoder would lowercase it).
            out.push(0);
            out.push(n.len() as u8);
            out.extend_from_slice(n.as_bytes());
            out.push(v.len() as u8);
            out.extend_from_slice(v.as_bytes());
        } else {
            encode_field(&mut out, n.as_bytes(), v.as_bytes());
        }
    }
    out
}

pub(super) fn get(stream: u32, path: &str) -> Vec<u8> {
    frame_bytes(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        stream,
        &block(&[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", path),
            (":authority", "example.com"),
        ]),
    )
}

pub(super) fn start() -> Vec<u8> {
    let mut v = PREFACE.to_vec();
    frame::write_settings(&mut v, &[]);
    v
}

/// The frames of the connection's output (type, flags, stream, payload), taken.
fn frames(c: &mut Conn) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let out = c.output().to_vec();
    c.sent(out.len());
    let mut at = 0;
    let mut v = Vec::new();
    while let Some(h) = Header::parse(&out[at..]) {
        let end = at + 9 + h.len as usize;
        v.push((h.kind, h.flags, h.stream, out[at + 9..end].to_vec()));
        at = end;
    }
    v
}

fn goaway_code(f: &[(u8, u8, u32, Vec<u8>)]) -> Option<u32> {
    f.iter()
        .find(|x| x.0 == kind::GOAWAY)
        .map(|x| u32::from_be_bytes([x.3[4], x.3[5], x.3[6], x.3[7]]))
}

fn rst_code(f: &[(u8, u8, u32, Vec<u8>)], stream: u32) -> Option<u32> {
    f.iter()
        .find(|x| x.0 == kind::RST_STREAM && x.2 == stream)
        .map(|x| u32::from_be_bytes([x.3[0], x.3[1], x.3[2], x.3[3]]))
}

fn decoded(payload: &[u8]) -> Vec<(String, String)> {
    let mut d = Decoder::default();
    let mut v = Vec::new();
    d.decode(payload, |n, val| {
        v.push((
            String::from_utf8_lossy(n).into_owned(),
            String::from_utf8_lossy(val).into_owned(),
        ))
    })
    .unwrap();
    v
}

fn open() -> Conn {
    let mut c = Conn::new(Config::default());
    let (evs, _) = feed_all(&mut c, &start(), 0);
    assert!(evs.is_empty());
    let f = frames(&mut c);
    assert_eq!(f[0].0, kind::SETTINGS, "the server preface comes first");
    assert!(f.iter().any(|x| x.0 == kind::SETTINGS && x.1 == flag::ACK));
    c
}

#[test]
fn server_preface_is_settings_then_the_clients_settings_are_acknowledged() {
    let c = open();
    assert!(c.accepts());
}

#[test]
fn a_bad_preface_is_refused() {
    let mut c = Conn::new(Config::default());
    let (evs, _) = feed_all(&mut c, b"GET / HTTP/1.1\r\n\r\n", 0);
    assert_eq!(evs, [Ev::Error(Code::PROTOCOL_ERROR)]);
}

#[test]
fn a_request_becomes_a_strict_http1_head_with_host_and_joined_cookies() {
    let mut c = open();
    let req = frame_bytes(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        1,
        &block(&[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/a?b=c"),
            (":authority", "example.com"),
            ("cookie", "a=1"),
            ("accept", "*/*"),
            ("cookie", "b=2"),
            ("te", "trailers"),
        ]),
    );
    let (evs, _) = feed_all(&mut c, &req, 0);
    assert_eq!(evs, [Ev::Request(1, true)]);
    let mut out = Vec::new();
    write_http1(c.fields(), BodyForm::None, &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "GET /a?b=c HTTP/1.1\r\nhost: example.com\r\naccept: */*\r\ncookie: a=1; b=2\r\n\r\n"
    );
}

#[test]
fn a_body_without_length_is_chunked_for_the_server() {
    let mut c = open();
    let req = frame_bytes(
        kind::HEADERS,
        flag::END_HEADERS,
        1,
        &block(&[
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "h"),
        ]),
    );
    let mut input = req;
    input.extend(frame_bytes(kind::DATA, flag::END_STREAM, 1, b"hello"));
    let (evs, _) = feed_all(&mut c, &input, 0);
    assert_eq!(
        evs,
        [Ev::Request(1, false), Ev::Data(1, b"hello".to_vec(), true)]
    );
}

fn malformed(fields: &[(&str, &str)]) {
    let mut c = open();
    let req = frame_bytes(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        1,
        &block(fields),
    );
    let (evs, _) = feed_all(&mut c, &req, 0);
    assert_eq!(evs, [Ev::Reset(1, Code::PROTOCOL_ERROR)], "{fields:?}");
    let f = frames(&mut c);
    assert_eq!(rst_code(&f, 1), Some(1), "{fields:?}");
}

const BASE: [(&str, &str); 4] = [
    (":method", "GET"),
    (":scheme", "https"),
    (":path", "/"),
    (":authority", "h"),
];

fn with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    let mut v = BASE.to_vec();
    v.extend_from_slice(extra);
    v
}

#[test]
fn downgrade_rules_of_rfc9113_8_2_make_a_request_malformed() {
    malformed(&with(&[("X-Upper", "1")]));
    malformed(&with(&[("connection", "close")]));
    malformed(&with(&[("transfer-encoding", "chunked")]));
    malformed(&with(&[("keep-alive", "1")]));
    malformed(&with(&[("upgrade", "websocket")]));
    malformed(&with(&[("te", "gzip")]));
    malformed(&with(&[("x", "a\r\nx-injected: 1")]));
    malformed(&with(&[("x", "a\0")]));
    malformed(&with(&[("x", " lead")]));
    malformed(&with(&[("", "v")]));
    malformed(&with(&[("content-length", "1x")]));
    malformed(&with(&[("content-length", "1"), ("content-length", "2")]));
    malformed(&with(&[("host", "other")]));
    malformed(&with(&[(":protocol", "websocket")]));
    malformed(&with(&[(":status", "200")]));
    malformed(&with(&[(":method", "POST")]));
    malformed(&[
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "h"),
    ]);
    malformed(&[
        (":method", "GET"),
        ("accept", "*/*"),
        (":scheme", "https"),
        (":path", "/"),
    ]);
    malformed(&[(":method", "GET"), (":scheme", "https"), (":path", "")]);
}

#[test]
fn content_length_must_match_the_data_received() {
    let mut c = open();
    let mut input = frame_bytes(
        kind::HEADERS,
        flag::END_HEADERS,
        1,
        &block(&with(&[("content-length", "3")])),
    );
    input.extend(frame_bytes(kind::DATA, flag::END_STREAM, 1, b"hello"));
    let (evs, _) = feed_all(&mut c, &input, 0);
    assert_eq!(
        evs,
        [Ev::Request(1, false), Ev::Reset(1, Code::PROTOCOL_ERROR)]
    );
}

#[test]
fn response_becomes_headers_and_data_without_connection_fields() {
    let mut c = open();
    feed_all(&mut c, &get(1, "/"), 0);
    frames(&mut c);
    let mut r = Response::new(false);
    let h1 = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nX-A: b\r\n\r\nhello";
    assert_eq!(r.pump(&mut c, 1, h1, false, (0, &[])), Ok(h1.len()));
    assert!(r.is_done());
    let f = frames(&mut c);
    assert_eq!(f[0].0, kind::HEADERS);
    assert_eq!(
        decoded(&f[0].3),
        [
            (":status".to_string(), "200".to_string()),
            ("content-length".into(), "5".into()),
            ("x-a".into(), "b".into())
        ]
    );
    assert_eq!(
        (f[1].0, f[1].1, &f[1].3[..]),
        (kind::DATA, flag::END_STREAM, &b"hello"[..])
    );
    assert_eq!(c.open_streams(), 0);
}

/// The rewrite of a final response to an HTTP/1.1 client kept alive: `via` and `edits` only.
fn response_rewrite<'a>(
    via: Option<&'a str>,
    edits: &'a [crate::http1::rewrite::HeaderEdit],
) -> crate::http1::rewrite::ResponseRewrite<'a> {
    crate::http1::rewrite::ResponseRewrite {
        client_version: crate::http1::Version::Http11,
        close: false,
        keep_alive_10: false,
        via,
        edits: [edits, &[], &[]],
        upgrade: false,
    }
}

#[test]
fn a_head_written_as_a_header_block_becomes_the_frames_its_http1_text_does() {
    use crate::http1::rewrite::{write_response_indexed, EditOp, HeaderEdit};
    use crate::http1::{self, FieldIndex};
    let server = b"HTTP/1.1 200 OK\r\nServer: s\r\nContent-Length: 5\r\nConnection: keep-alive, X-Hop\r\nX-Hop: h\r\nX-A:  b \r\nDate: d\r\n\r\nhello";
    let mut index = FieldIndex::empty();
    let head = http1::parse_response_indexed(server, &Default::default(), false, &mut index)
        .unwrap()
        .unwrap();
    let edit = |op, name: &str, value: &str| HeaderEdit {
        op,
        name: name.into(),
        value: value.into(),
    };
    let edits = [
        edit(EditOp::Remove, "date", ""),
        edit(EditOp::Add, "X-Added", "yes"),
    ];
    let rw = response_rewrite(Some("quill"), &edits);
    // As HTTP/1.1 text (what Quill's own answers are), parsed again by the connection's side.
    let mut out = [0u8; 512];
    let n = write_response_indexed(server, &head, &index, &rw, &mut out).unwrap();
    let mut text = out[..n].to_vec();
    text.extend_from_slice(b"hello");
    // As a header block, sent as it is.
    let n = encode_response_head(server, &head, &index, &rw, &mut out).unwrap();
    let mut block = out[..n].to_vec();
    block.extend_from_slice(b"hello");
    let written = Written {
        status: head.status,
        framing: head.framing,
        block: n,
    };
    let mut sent = Vec::new();
    let noted = [(0, written)];
    for (bytes, w) in [(&block, &noted[..]), (&text, &[][..])] {
        let mut c = open();
        feed_all(&mut c, &get(1, "/"), 0);
        frames(&mut c);
        let mut r = Response::new(false);
        // The head not all there yet: nothing is taken.
        let head_len = bytes.len() - 5;
        assert_eq!(
            r.pump(&mut c, 1, &bytes[..head_len - 1], false, (0, w)),
            Ok(0)
        );
        assert_eq!(r.pump(&mut c, 1, bytes, false, (0, w)), Ok(bytes.len()));
        assert!(r.is_done());
        let f = frames(&mut c);
        sent.push((decoded(&f[0].3), f[1].3.clone()));
    }
    assert_eq!(sent[0], sent[1]);
    assert_eq!(
        sent[0].0,
        [
            (":status".to_string(), "200".to_string()),
            ("server".into(), "s".into()),
            ("x-a".into(), "b".into()),
            ("content-length".into(), "5".into()),
            ("via".into(), "1.1 quill".into()),
            ("x-added".into(), "yes".into()),
        ]
    );
    // A block that does not fit is refused, not cut.
    assert_eq!(
        encode_response_head(server, &head, &index, &rw, &mut out[..20]),
        None
    );
}

/// An interim head and the final one, both written as header blocks before the connection
/// took either (a 103 and a 200 in one read from the server): each goes as its own HEADERS, found
/// by its offset in the response, also when the bytes before them were taken by an earlier call.
#[test]
fn interim_and_final_header_blocks_in_one_input_each_become_headers() {
    use crate::http1::{self, FieldIndex};
    let rw = response_rewrite(None, &[]);
    let mut bytes = b"ignored: taken before".to_vec();
    let base = bytes.len();
    let mut notes = Vec::new();
    for server in [
        &b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Final: yes\r\n\r\n",
    ] {
        let mut index = FieldIndex::empty();
        let head = http1::parse_response_indexed(server, &Default::default(), false, &mut index)
            .unwrap()
            .unwrap();
        let mut out = [0u8; 256];
        let n = encode_response_head(server, &head, &index, &rw, &mut out).unwrap();
        let written = Written {
            status: head.status,
            framing: head.framing,
            block: n,
        };
        notes.push((bytes.len() as u64, written));
        bytes.extend_from_slice(&out[..n]);
    }
    bytes.extend_from_slice(b"hi");
    let mut c = open();
    feed_all(&mut c, &get(1, "/"), 0);
    frames(&mut c);
    let mut r = Response::new(false);
    let input = &bytes[base..];
    assert_eq!(
        r.pump(&mut c, 1, input, false, (base as u64, &notes)),
        Ok(input.len())
    );
    assert!(r.is_done());
    let f = frames(&mut c);
    assert_eq!(f.len(), 3, "{f:?}");
    assert_eq!(
        decoded(&f[0].3),
        [
            (":status".to_string(), "103".to_string()),
            ("link".into(), "</s.css>".into())
        ]
    );
    assert_eq!(f[0].1 & flag::END_STREAM, 0);
    assert_eq!(
        decoded(&f[1].3),
        [
            (":status".to_string(), "200".to_string()),
            ("x-final".into(), "yes".into()),
            ("content-length".into(), "2".into())
        ]
    );
    assert_eq!(
        (f[2].0, f[2].1, &f[2].3[..]),
        (kind::DATA, flag::END_STREAM, &b"hi"[..])
    );
}

#[test]
fn chunked_response_is_dechunked_and_its_trailers_end_the_stream() {
    let mut c = open();
    feed_all(&mut c, &get(1, "/"), 0);
    frames(&mut c);
    let mut r = Response::new(false);
    let h1 = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nGrpc-Status: 0\r\n\r\n";
    // Fed in pieces of 7 bytes, as a socket may deliver it.
    let mut taken = 0;
    let mut pending: Vec<u8> = Vec::new();
    for piece in h1.chunks(7) {
        pending.extend_from_slice(piece);
        let n = r.pump(&mut c, 1, &pending, false, (0, &[])).unwrap();
        pending.drain(..n);
        taken += n;
    }
    assert_eq!(taken, h1.len());
    assert!(r.is_done());
    let f = frames(&mut c);
    let body: Vec<u8> = f
        .iter()
        .filter(|x| x.0 == kind::DATA)
        .flat_map(|x| x.3.clone())
        .collect();
    assert_eq!(body, b"hello world");
    let last = f.last().unwrap();
    assert_eq!(
        (last.0, last.1 & flag::END_STREAM),
        (kind::HEADERS, flag::END_STREAM)
    );
    assert_eq!(
        decoded(&last.3),
        [("grpc-status".to_string(), "0".to_string())]
    );
}

#[test]
fn head_and_304_responses_end_with_their_headers() {
    let mut c = open();
    feed_all(&mut c, &get(1, "/"), 0);
    let mut r = Response::new(true);
    let h1 = b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n";
    assert_eq!(r.pump(&mut c, 1, h1, false, (0, &[])), Ok(h1.len()));
    assert!(r.is_done());
    feed_all(&mut c, &get(3, "/"), 0);
    let mut r = Response::new(false);
    let h1 = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n";
    assert_eq!(r.pump(&mut c, 3, h1, false, (0, &[])), Ok(h1.len()));
    assert!(r.is_done());
    assert_eq!(c.open_streams(), 0);
}

#[test]
fn data_waits_for_the_window_and_goes_on_after_window_update() {
    let mut c = Conn::new(Config::default());
    let mut input = PREFACE.to_vec();
    frame::write_settings(&mut input, &[(setting::INITIAL_WINDOW_SIZE, 3)]);
    feed_all(&mut c, &input, 0);
    feed_all(&mut c, &get(1, "/"), 0);
    frames(&mut c);
    let mut r = Response::new(false);
    let h1 = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789";
    let head_len = h1.len() - 10;
    assert_eq!(r.pump(&mut c, 1, h1, false, (0, &[])), Ok(head_len + 3));
    assert_eq!(
        r.pump(&mut c, 1, &h1[head_len + 3..], false, (0, &[])),
        Ok(0)
    );
    let mut wu = Vec::new();
    frame::write_window_update(&mut wu, 1, 100);
    assert_eq!(feed_all(&mut c, &wu, 0).0, [Ev::WindowOpened]);
    assert_eq!(
        r.pump(&mut c, 1, &h1[head_len + 3..], false, (0, &[])),
        Ok(7)
    );
    assert!(r.is_done());
    let f = frames(&mut c);
    let body: Vec<u8> = f
        .iter()
        .filter(|x| x.0 == kind::DATA)
        .flat_map(|x| x.3.clone())
        .collect();
    assert_eq!(body, b"0123456789");
}

#[test]
fn streams_past_the_concurrency_limit_are_refused() {
    let mut c = open();
    let mut input = Vec::new();
    for i in 0..101u32 {
        input.extend(get(1 + 2 * i, "/"));
    }
    let (evs, _) = feed_all(&mut c, &input, 0);
    assert_eq!(evs.len(), 100);
    let f = frames(&mut c);
    assert_eq!(rst_code(&f, 201), Some(Code::REFUSED_STREAM.0));
}

#[test]
fn rapid_reset_is_ended_with_enhance_your_calm() {
    let mut c = open();
    let mut input = Vec::new();
    for i in 0..1000u32 {
        let id = 1 + 2 * i;
        input.extend(get(id, "/"));
        input.extend(frame_bytes(kind::RST_STREAM, 0, id, &8u32.to_be_bytes()));
    }
    let (evs, _) = feed_all(&mut c, &input, 0);
    let requests = evs.iter().filter(|e| matches!(e, Ev::Request(..))).count();
    assert!(
        requests <= 101,
        "{requests} requests reached the application"
    );
    assert_eq!(evs.last(), Some(&Ev::Error(Code::ENHANCE_YOUR_CALM)));
    assert_eq!(
        goaway_code(&frames(&mut c)),
        Some(Code::ENHANCE_YOUR_CALM.0)
    );
}

#[test]
fn continuation_flood_is_ended_with_enhance_your_calm() {
    let mut c = open();
    let mut input = frame_bytes(kind::HEADERS, 0, 1, &block(&BASE));
    for _ in 0..100 {
        input.extend(frame_bytes(
            kind::CONTINUATION,
            0,
            1,
            &block(&[("x-a", "b")]),
        ));
    }
    let (evs, _) = feed_all(&mut c, &input, 0);
    assert_eq!(evs, [Ev::Error(Code::ENHANCE_YOUR_CALM)]);
}

#[test]
fn hpack_bomb_is_answered_431_and_keeps_nothing() {
    let mut c = open();
    // One 4000-byte value into the dynamic table, then 3000 one-byte references to it.
    let mut b = block(&BASE);
    b.push(0x40);
    b.push(5);
    b.extend_from_slice(b"x-big");
    b.push(0x7f);
    b.extend_from_slice(&[0xa1, 0x1e]); // 4000 = 127 + 3873 = 127 + 0x21 + 0x1e*128
    b.extend(std::iter::repeat_n(b'a', 4000));
    b.extend(std::iter::repeat_n(0x80 | 62, 3000));
    let mut input = frame_bytes(kind::HEADERS, flag::END_STREAM, 1, &b[..4000]);
    input.extend(frame_bytes(
        kind::CONTINUATION,
        flag::END_HEADERS,
        1,
        &b[4000..],
    ));
    let (evs, _) = feed_all(&mut c, &input, 0);
    assert!(evs.is_empty(), "{evs:?}");
    assert!(c.fields().too_large);
    let f = frames(&mut c);
    assert_eq!(
        decoded(&f[0].3),
        [(":status".to_string(), "431".to_string())]
    );
}

#[test]
fn ping_and_settings_floods_are_ended_with_enhance_your_calm() {
    for (k, payload) in [(kind::PING, &[0u8; 8][..]), (kind::SETTINGS, &[][..])] {
        let mut c = open();
        let mut input = Vec::new();
        for _ in 0..5000 {
            input.extend(frame_bytes(k, 0, 0, payload));
        }
        let (evs, _) = feed_all(&mut c, &input, 0);
        assert_eq!(evs.last(), Some(&Ev::Error(Code::ENHANCE_YOUR_CALM)));
    }
}

#[test]
fn control_frames_at_a_steady_pace_are_fine() {
    let mut c = open();
    for i in 0..5000u64 {
        let ping = frame_bytes(kind::PING, 0, 0, &[0u8; 8]);
        let (evs, _) = feed_all(&mut c, &ping, i * 20);
        assert!(evs.is_empty(), "ping {i} at {} ms: {evs:?}", i * 20);
    }
}

#[test]
fn frames_on_a_stream_quill_reset_are_dropped_but_on_a_closed_one_are_an_error() {
    let mut c = open();
    let mut input = frame_bytes(kind::HEADERS, flag::END_HEADERS, 1, &block(&BASE));
    input.extend(frame_bytes(kind::DATA, 0, 1, b"ab"));
    feed_all(&mut c, &input, 0);
    c.reset(1, Code::CANCEL);
    let (evs, _) = feed_all(&mut c, &frame_bytes(kind::DATA, 0, 1, b"cd"), 0);
    assert!(evs.is_empty());
    // Stream 3 ends both ways, then the client sends on it.
    feed_all(&mut c, &get(3, "/"), 0);
    let mut r = Response::new(false);
    r.pump(
        &mut c,
        3,
        b"HTTP/1.1 204 No Content\r\n\r\n",
        false,
        (0, &[]),
    )
    .unwrap();
    let (evs, _) = feed_all(&mut c, &frame_bytes(kind::DATA, 0, 3, b"x"), 0);
    assert_eq!(evs, [Ev::Error(Code::STREAM_CLOSED)]);
}

#[test]
fn graceful_goaway_lets_streams_finish_then_the_connection_is_done() {
    let mut c = open();
    feed_all(&mut c, &get(1, "/"), 0);
    c.goaway_graceful(false);
    feed_all(&mut c, &get(3, "/"), 0);
    c.goaway_graceful(true);
    assert!(!c.is_done());
    let (evs, _) = feed_all(&mut c, &get(5, "/"), 0);
    assert!(evs.is_empty(), "a stream past the GOAWAY is ignored");
    for id in [1, 3] {
        let mut r = Response::new(false);
        r.pump(
            &mut c,
            id,
            b"HTTP/1.1 204 No Content\r\n\r\n",
            false,
            (0, &[]),
        )
        .unwrap();
    }
    assert!(c.is_done());
    let f = frames(&mut c);
    let last = f.iter().rfind(|x| x.0 == kind::GOAWAY).unwrap();
    assert_eq!(&last.3[..4], &3u32.to_be_bytes());
}

#[test]
fn max_requests_sends_goaway_after_the_last() {
    let mut c = Conn::new(Config {
        max_requests: 2,
        ..Config::default()
    });
    feed_all(&mut c, &start(), 0);
    let mut input = get(1, "/");
    input.extend(get(3, "/"));
    input.extend(get(5, "/"));
    let (evs, _) = feed_all(&mut c, &input, 0);
    assert_eq!(evs, [Ev::Request(1, true), Ev::Request(3, true)]);
    assert!(!c.accepts());
}

#[test]
fn a_lent_output_buffer_takes_the_frames_and_is_given_back_empty_with_its_room() {
    let mut c = open();
    c.shrink();
    assert!(c.output_released());
    let lent = Vec::with_capacity(32 * 1024);
    let at = lent.as_ptr();
    c.lend_output(lent);
    feed_all(&mut c, &get(1, "/"), 0);
    let mut r = Response::new(false);
    let h1 = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
    assert_eq!(r.pump(&mut c, 1, h1, false, (0, &[])), Ok(h1.len()));
    // The frames went into the lent buffer, without growing it elsewhere.
    assert_eq!(c.output().as_ptr(), at);
    assert!(
        c.take_output_buffer().is_none(),
        "not taken while it holds frames"
    );
    let f = frames(&mut c);
    assert_eq!((f[0].0, f[1].0), (kind::HEADERS, kind::DATA));
    let back = c.take_output_buffer().expect("given back once sent");
    assert!(back.is_empty() && back.capacity() >= 32 * 1024);
    assert!(c.output_released());
    // A connection that holds a buffer keeps it: the one lent is dropped.
    c.lend_output(Vec::with_capacity(64));
    c.lend_output(Vec::with_capacity(128));
    assert!(c.output().is_empty() && !c.output_released());
}

/// A socket that takes the output a piece at a time while more frames are written after it
/// (a TLS socket takes one record a write) gets every frame whole, once and in order: the body
/// comes out the same as when all is written and sent at once.
#[test]
fn output_sent_in_pieces_while_more_is_written_comes_out_whole_and_in_order() {
    let big = Config {
        stream_window: 1 << 24,
        conn_window: 1 << 24,
        ..Config::default()
    };
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut input = PREFACE.to_vec();
    frame::write_settings(&mut input, &[(setting::INITIAL_WINDOW_SIZE, 1 << 24)]);
    frame::write_window_update(&mut input, 0, (1 << 24) - frame::DEFAULT_WINDOW);
    for pieces in [false, true] {
        let mut c = Conn::new(big);
        feed_all(&mut c, &input, 0);
        feed_all(&mut c, &get(1, "/"), 0);
        let mut wire = Vec::new();
        let mut take = |c: &mut Conn, n: usize| {
            let out = c.output();
            let n = n.min(out.len());
            wire.extend_from_slice(&out[..n]);
            c.sent(n);
        };
        let (mut at, mut seed) = (0, 7u32);
        while at < body.len() {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let n = if pieces {
                1 + (seed >> 8) as usize % 9_000
            } else {
                body.len()
            };
            let end = (at + n).min(body.len());
            let taken = c.send_data(1, &body[at..end], end == body.len());
            assert_eq!(taken, end - at, "the windows are open");
            at = end;
            let k = if pieces {
                (seed >> 4) as usize % 12_000
            } else {
                0
            };
            take(&mut c, k);
        }
        take(&mut c, usize::MAX);
        assert!(c.output().is_empty());
        let (mut at, mut data, mut ended) = (0, Vec::new(), false);
        while let Some(h) = Header::parse(&wire[at..]) {
            let end = at + 9 + h.len as usize;
            if h.kind == kind::DATA {
                assert!(!ended, "nothing after the end of the stream");
                data.extend_from_slice(&wire[at + 9..end]);
                ended = h.flags & flag::END_STREAM != 0;
            }
            at = end;
        }
        assert_eq!(at, wire.len(), "whole frames (pieces: {pieces})");
        assert!(ended);
        assert!(data == body, "the body in order (pieces: {pieces})");
    }
}
