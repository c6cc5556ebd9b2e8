//! Fuzz target for `quill_core::http1::rewrite`: the first bytes choose the rewrite settings and
//! edits, the rest is a message. For every request or response head the parser accepts, the
//! rewritten head must parse again with the same method, version, status and framing, carry no
//! hop-by-hop field but the proxy's own `Connection` (and `Upgrade` during an upgrade), exactly
//! one framing field for a delimited body, and overflow one byte short of its length (the
//! invariants of src/http1/rewrite_proptests.rs, for longer runs).

#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use quill_core::http1::rewrite::{
    write_request, write_response, EditOp, ForwardedFor, HeaderEdit, Overflow, RequestRewrite,
    ResponseRewrite,
};
use quill_core::http1::{fields, parse_request, parse_response, Framing, Limits, Version};

const LOOSE: Limits = Limits {
    max_head: 64 * 1024,
    max_request_line: 64 * 1024,
    max_headers: 1000,
    require_host: false,
};

const NAMES: [&str; 8] = [
    "X-A",
    "Via",
    "X-Forwarded-For",
    "Forwarded",
    "X-Request-ID",
    "Host",
    "Content-Length",
    "Connection",
];

/// Up to three edits, one byte each: the operation and a name.
fn edits(bytes: &[u8]) -> Vec<HeaderEdit> {
    bytes
        .iter()
        .map(|&b| HeaderEdit {
            op: [EditOp::Set, EditOp::Add, EditOp::Remove][usize::from(b % 3)],
            name: NAMES[usize::from(b / 3) % NAMES.len()].into(),
            value: if b % 3 == 2 { "" } else { "v" }.into(),
        })
        .collect()
}

fn count(buf: &[u8], len: usize, name: &[u8]) -> usize {
    fields(buf, len)
        .filter(|f| f.name.of(buf).eq_ignore_ascii_case(name))
        .count()
}

/// Writes with `write` into a buffer big enough, then checks that one byte less overflows.
fn write_checked(head_len: usize, write: impl Fn(&mut [u8]) -> Result<usize, Overflow>) -> Vec<u8> {
    let mut out = vec![0u8; 2 * head_len + 4096];
    let n = write(&mut out).expect("a big buffer overflowed");
    out.truncate(n);
    if n > 0 {
        let mut short = vec![0u8; n - 1];
        assert_eq!(write(&mut short), Err(Overflow));
    }
    out
}

/// No hop-by-hop field but `Connection` (at most one) and `Upgrade` when `upgrade`; one framing
/// field as `framing` says.
fn hop_and_framing(out: &[u8], len: usize, upgrade: bool, framing: Framing) {
    for name in [&b"keep-alive"[..], b"proxy-connection", b"te"] {
        assert_eq!(count(out, len, name), 0);
    }
    assert!(upgrade || count(out, len, b"upgrade") == 0);
    assert!(count(out, len, b"connection") <= 1);
    let (te, cl) = (count(out, len, b"transfer-encoding"), count(out, len, b"content-length"));
    match framing {
        Framing::Chunked => assert_eq!((te, cl), (1, 0)),
        Framing::Length(_) => assert_eq!((te, cl), (0, 1)),
        Framing::Close => assert_eq!((te, cl), (0, 0)),
        Framing::None => assert!(te == 0 && cl <= 1),
    }
}

fn request(knobs: &[u8; 4], edits: &[HeaderEdit], data: &[u8]) {
    let Ok(Some(head)) = parse_request(data, &Limits::default()) else {
        return;
    };
    let k = knobs[0];
    let client = match k % 4 {
        0 => None,
        1 => Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7))),
        2 => Some(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1))),
        _ => Some(IpAddr::V6(Ipv4Addr::new(198, 51, 100, 9).to_ipv6_mapped())),
    };
    let rewrite_path = match knobs[1] % 4 {
        0 => None,
        1 => Some(("/api", "/v2")),
        2 => Some(("/", "")),
        _ => Some(("", "x")),
    };
    let flag = |bit: u8| knobs[2] & (1 << bit) != 0;
    let rw = RequestRewrite {
        client,
        trusted: flag(0),
        forwarded_for: [ForwardedFor::Append, ForwardedFor::Replace, ForwardedFor::Off]
            [usize::from(knobs[3] % 3)],
        proto: if flag(1) { "https" } else { "http" },
        x_forwarded_proto: flag(2),
        x_forwarded_host: flag(3),
        forwarded: flag(4),
        via: flag(5).then_some("quill"),
        request_id: flag(6).then_some(&b"id-1"[..]),
        edits: [edits, &[], &[]],
        rewrite_path,
        normalize_path: knobs[1] & 0x10 != 0,
        underscores: knobs[1] & 0x20 != 0,
        upgrade: flag(7),
    };
    let out = write_checked(head.len, |out| write_request(data, &head, &rw, out));
    let again = parse_request(&out, &LOOSE)
        .expect("the rewritten request does not parse")
        .expect("the rewritten request is incomplete");
    assert_eq!(again.len, out.len());
    assert_eq!(again.method_span.of(&out), head.method_span.of(data));
    assert_eq!(again.version, head.version);
    assert_eq!(again.framing, head.framing);
    hop_and_framing(&out, again.len, rw.upgrade, head.framing);
}

fn response(knobs: &[u8; 4], edits: &[HeaderEdit], data: &[u8]) {
    let to_head = knobs[0] & 1 != 0;
    let Ok(Some(head)) = parse_response(data, &Limits::default(), to_head) else {
        return;
    };
    let flag = |bit: u8| knobs[1] & (1 << bit) != 0;
    let rw = ResponseRewrite {
        client_version: if flag(0) { Version::Http10 } else { Version::Http11 },
        close: flag(1),
        keep_alive_10: flag(2),
        via: flag(3).then_some("quill"),
        edits: [&[], edits, &[]],
        upgrade: flag(4),
    };
    let out = write_checked(head.len, |out| write_response(data, &head, &rw, out));
    let again = parse_response(&out, &LOOSE, to_head)
        .expect("the rewritten response does not parse")
        .expect("the rewritten response is incomplete");
    assert_eq!(again.len, out.len());
    assert_eq!(again.status, head.status);
    assert_eq!(again.framing, head.framing);
    hop_and_framing(&out, again.len, rw.upgrade, head.framing);
}

fuzz_target!(|data: &[u8]| {
    let Some((knobs, rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let (n, rest) = rest.split_first().map_or((0, rest), |(&n, r)| (usize::from(n % 4), r));
    let (edit_bytes, message) = rest.split_at(n.min(rest.len()));
    let edits = edits(edit_bytes);
    request(knobs, &edits, message);
    response(knobs, &edits, message);
});
