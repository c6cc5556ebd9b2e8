//! Property tests of head rewriting: for any request or response head the parser accepts
//! (generated from start lines and fields, hop-by-hop and forwarding ones among them, then maybe
//! mutated), under any rewrite settings and edits, the rewritten head parses again with the same
//! method, target, version, status and framing; it has no hop-by-hop field but the proxy's own
//! `Connection` (and `Upgrade` during an upgrade), exactly one framing field for a delimited body,
//! and one byte less of output buffer is an `Overflow`.
//!
//! Default case counts keep the run to a few seconds in a debug build; `PROPTEST_CASES=N` runs N.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::proptests::{config, edits, mutate};
use super::rewrite::*;
use super::*;

const REQUEST_LINES: &[&str] = &[
    "GET / HTTP/1.1",
    "POST /api/v1?x=1 HTTP/1.1",
    "GET http://h.example/api/x?y HTTP/1.1",
    "GET HTTPS://h.example HTTP/1.1",
    "GET http://h.example?q=/api HTTP/1.0",
    "GET //api/./x/../y%41?a=/../b HTTP/1.1",
    "GET http://h.example//api%2Fx/.. HTTP/1.1",
    "PUT /api HTTP/1.0",
    "HEAD /apix HTTP/1.1",
    "OPTIONS * HTTP/1.1",
    "CONNECT h.example:443 HTTP/1.1",
    "DELETE /a/../b HTTP/1.1",
];

const STATUS_LINES: &[&str] = &[
    "HTTP/1.1 200 OK",
    "HTTP/1.0 200 OK",
    "HTTP/1.1 204 No Content",
    "HTTP/1.1 304 Not Modified",
    "HTTP/1.1 101 Switching Protocols",
    "HTTP/1.1 100 Continue",
    "HTTP/1.1 404",
    "HTTP/1.1 503 Service \tUnavailable",
];

/// Fields that matter to rewriting, in their usual and unusual spellings.
const FIELDS: &[&str] = &[
    "Connection: close",
    "connection: keep-alive, Upgrade",
    "Connection: X-A, te",
    "Connection: host, content-length, x-forwarded-for",
    "Connection: ,,X-Request-ID",
    "Keep-Alive: timeout=5",
    "Proxy-Connection: keep-alive",
    "TE: trailers",
    "Upgrade: websocket",
    "Transfer-Encoding: chunked",
    "transfer-encoding: gzip, chunked",
    "Content-Length: 0",
    "Content-Length: 12",
    "X-Forwarded-For: 203.0.113.1",
    "x-forwarded-for: 10.0.0.1, 10.0.0.2,",
    "X-Forwarded-For:",
    "X-Forwarded-Proto: https",
    "X-Forwarded-Host: evil.example",
    "Forwarded: for=198.51.100.1;proto=https",
    "Via: 1.0 edge",
    "X-Request-ID: abc",
    "X-A: 1",
    "x-a: 2",
    "Cookie: c=1",
    "X-Obs: caf\u{e9}",
    "X_Forwarded_For: 192.0.2.9",
    "x_forwarded-proto: http",
    "X-Forwarded_Host: other.example",
    "X_Request_ID: q",
    "Content_Length: 3",
    "Transfer--Encoding: chunked",
];

/// Names for edits: plain ones, the proxy's own, protected ones and an invalid one.
const EDIT_NAMES: &[&str] = &[
    "X-A",
    "x-new",
    "Via",
    "X-Forwarded-For",
    "forwarded",
    "X-Request-ID",
    "Cookie",
    "Content-Length",
    "Connection",
    "Transfer-Encoding",
    "Upgrade",
    "Host",
    "Bad Name",
];

const EDIT_VALUES: &[&str] = &[
    "1",
    "v w",
    "",
    "a\r\nX-Injected: 1",
    "tab\there",
    " pad\t",
    " ",
];

fn word(alphabet: &'static [u8], len: std::ops::Range<usize>) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(alphabet), len)
        .prop_map(|b| String::from_utf8_lossy(&b).into_owned())
}

fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(FIELDS).prop_map(String::from),
        1 => (word(b"aZ-_9", 1..6), word(b"a ;=,\t\"9", 0..8))
            .prop_map(|(n, v)| format!("{n}: {v}")),
    ]
}

/// A head: a start line, fields (a `Host` among them, mostly), then maybe a few mutations.
fn head(lines: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(lines),
        prop::collection::vec(field(), 0..7),
        prop::option::weighted(
            0.9,
            (
                0usize..8,
                prop::sample::select(&["h.example", "[::1]:80", "a:1"][..]),
            ),
        ),
        prop::option::weighted(0.3, edits()),
    )
        .prop_map(|(start, mut fields, host, edits)| {
            if let Some((at, host)) = host {
                fields.insert(at.min(fields.len()), format!("Host: {host}"));
            }
            let mut out = format!("{start}\r\n").into_bytes();
            for f in fields {
                out.extend(f.as_bytes());
                out.extend(b"\r\n");
            }
            out.extend(b"\r\nbody");
            match edits {
                Some(edits) => mutate(&out, &edits),
                None => out,
            }
        })
}

/// Edits as the configuration would give them (and some it would refuse).
fn header_edits() -> impl Strategy<Value = Vec<HeaderEdit>> {
    let op = prop::sample::select(&[EditOp::Set, EditOp::Add, EditOp::Remove][..]);
    let one = (
        op,
        prop::sample::select(EDIT_NAMES),
        prop::sample::select(EDIT_VALUES),
    )
        .prop_map(|(op, name, value)| HeaderEdit {
            op,
            name: name.into(),
            value: if op == EditOp::Remove { "" } else { value }.into(),
        });
    prop::collection::vec(one, 0..5)
}

/// The settings of a request rewrite that are not borrowed.
#[derive(Clone, Debug)]
struct Settings {
    client: Option<IpAddr>,
    trusted: bool,
    forwarded_for: ForwardedFor,
    proto: &'static str,
    flags: [bool; 3],
    via: Option<&'static str>,
    request_id: Option<&'static [u8]>,
    rewrite_path: Option<(&'static str, &'static str)>,
    upgrade: bool,
    normalize_path: bool,
    underscores: bool,
}

fn settings() -> impl Strategy<Value = Settings> {
    let client = prop::sample::select(vec![
        None,
        Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7))),
        Some(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1))),
        Some(IpAddr::V6(Ipv4Addr::new(198, 51, 100, 9).to_ipv6_mapped())),
    ]);
    let ff = prop::sample::select(
        &[
            ForwardedFor::Append,
            ForwardedFor::Replace,
            ForwardedFor::Off,
        ][..],
    );
    let rewrite = prop::sample::select(
        &[
            None,
            Some(("/api", "/v2")),
            Some(("/api", "")),
            Some(("/", "x/")),
            Some(("", "/p")),
        ][..],
    );
    (
        (
            client,
            any::<bool>(),
            ff,
            prop::sample::select(&["http", "https"][..]),
        ),
        (
            any::<[bool; 3]>(),
            any::<bool>(),
            any::<bool>(),
            rewrite,
            any::<bool>(),
        ),
        any::<[bool; 2]>(),
    )
        .prop_map(
            |(
                (client, trusted, forwarded_for, proto),
                (flags, via, id, rewrite_path, upgrade),
                [normalize_path, underscores],
            )| {
                Settings {
                    client,
                    trusted,
                    forwarded_for,
                    proto,
                    flags,
                    via: via.then_some("quill"),
                    request_id: id.then_some(&b"0123-abcd"[..]),
                    rewrite_path,
                    upgrade,
                    normalize_path,
                    underscores,
                }
            },
        )
}

/// Big enough for any head the proxy writes, with a request line and fields of any length.
const LOOSE: Limits = Limits {
    max_head: 64 * 1024,
    max_request_line: 64 * 1024,
    max_headers: 1000,
    require_host: true,
};

/// How many fields of `name` the head in `buf` has.
fn count(buf: &[u8], len: usize, name: &[u8]) -> usize {
    fields(buf, len)
        .filter(|f| f.name.of(buf).eq_ignore_ascii_case(name))
        .count()
}

/// The values of the `Connection` fields of a head, as lower-case tokens.
fn connection_tokens(buf: &[u8], len: usize) -> Vec<Vec<u8>> {
    fields(buf, len)
        .filter(|f| f.name.of(buf).eq_ignore_ascii_case(b"connection"))
        .flat_map(|f| {
            f.value
                .of(buf)
                .split(|&b| b == b',')
                .map(|t| t.trim_ascii().to_ascii_lowercase())
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Writes with `write` into a buffer of `size` bytes.
fn written<F>(size: usize, write: F) -> (Result<usize, Overflow>, Vec<u8>)
where
    F: Fn(&mut [u8]) -> Result<usize, Overflow>,
{
    let mut out = vec![0u8; size];
    let n = write(&mut out);
    (n, out)
}

/// The rewritten head fits exactly its length, and not one byte less.
fn fits_exactly<F>(head_len: usize, write: F) -> Result<Vec<u8>, TestCaseError>
where
    F: Fn(&mut [u8]) -> Result<usize, Overflow>,
{
    let (n, mut out) = written(2 * head_len + 4096, &write);
    let n = n.map_err(|_| TestCaseError::fail("overflow with a big buffer"))?;
    out.truncate(n);
    let (exact, bytes) = written(n, &write);
    prop_assert_eq!(exact, Ok(n));
    prop_assert_eq!(&bytes, &out);
    if n > 0 {
        prop_assert_eq!(written(n - 1, &write).0, Err(Overflow));
    }
    Ok(out)
}

/// The target the server gets when no path is rewritten: origin-form for an absolute one.
/// `target` with its path in normal form (as it is if it has none).
fn normalized_target(target: &[u8]) -> Vec<u8> {
    let q = target
        .iter()
        .position(|&b| b == b'?')
        .unwrap_or(target.len());
    let (p, query) = target.split_at(q);
    let mut out = vec![0u8; p.len()];
    match path::normalize_into(p, &mut out) {
        Ok(n) => {
            out.truncate(n);
            out.extend_from_slice(query);
            out
        }
        Err(_) => target.to_vec(),
    }
}

fn expected_target(target: &[u8], form: Target) -> Vec<u8> {
    if form != Target::Absolute {
        return target.to_vec();
    }
    let rest = &target[target.iter().position(|&b| b == b':').unwrap_or(0) + 3..];
    let at = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(rest.len());
    let mut out = rest[at..].to_vec();
    if out.first() != Some(&b'/') {
        out.insert(0, b'/');
    }
    out
}

/// No hop-by-hop field but the proxy's `Connection` with exactly `tokens`, and `Upgrade` when
/// `upgrade`; one framing field as `framing` says (`None` allows the kept `Content-Length`).
fn hop_and_framing(
    out: &[u8],
    len: usize,
    tokens: &[&[u8]],
    upgrade: bool,
    framing: Framing,
) -> Result<(), TestCaseError> {
    for name in [&b"keep-alive"[..], b"proxy-connection", b"te"] {
        prop_assert_eq!(
            count(out, len, name),
            0,
            "{:?}",
            String::from_utf8_lossy(name)
        );
    }
    if !upgrade {
        prop_assert_eq!(count(out, len, b"upgrade"), 0);
    }
    prop_assert_eq!(
        count(out, len, b"connection"),
        usize::from(!tokens.is_empty())
    );
    let expected: Vec<Vec<u8>> = tokens.iter().map(|t| t.to_vec()).collect();
    prop_assert_eq!(connection_tokens(out, len), expected);
    let (te, cl) = (
        count(out, len, b"transfer-encoding"),
        count(out, len, b"content-length"),
    );
    match framing {
        Framing::Chunked => prop_assert_eq!((te, cl), (1, 0)),
        Framing::Length(_) => prop_assert_eq!((te, cl), (0, 1)),
        Framing::Close => prop_assert_eq!((te, cl), (0, 0)),
        Framing::None => prop_assert!(te == 0 && cl <= 1),
    }
    Ok(())
}

fn check_request(
    buf: &[u8],
    s: &Settings,
    edits: &[HeaderEdit],
    cut: usize,
) -> Result<(), TestCaseError> {
    let Ok(Some(head)) = parse_request(buf, &Limits::default()) else {
        return Ok(());
    };
    let (first, second) = edits.split_at(cut.min(edits.len()));
    let rw = RequestRewrite {
        client: s.client,
        trusted: s.trusted,
        forwarded_for: s.forwarded_for,
        proto: s.proto,
        x_forwarded_proto: s.flags[0],
        x_forwarded_host: s.flags[1],
        forwarded: s.flags[2],
        via: s.via,
        request_id: s.request_id,
        edits: [first, second, &[]],
        rewrite_path: s.rewrite_path,
        normalize_path: s.normalize_path,
        underscores: s.underscores,
        upgrade: s.upgrade,
    };
    let out = fits_exactly(head.len, |out| write_request(buf, &head, &rw, out))?;
    // The parser's field index gives the very same head as a scan of the bytes.
    let mut index = FieldIndex::empty();
    prop_assert_eq!(
        parse_request_indexed(buf, &Limits::default(), &mut index),
        Ok(Some(head))
    );
    let (_, indexed) = written(out.len(), |o| {
        write_request_indexed(buf, &head, &index, &rw, o)
    });
    prop_assert_eq!(&indexed, &out);
    // The lines copied at once are the lines decided one by one.
    let (_, each) = written(out.len(), |o| {
        super::rewrite::write_request_with(buf, &head, &index, &rw, o, false)
    });
    prop_assert_eq!(&each, &out);
    let again = match parse_request(&out, &LOOSE) {
        Ok(Some(h)) => h,
        other => {
            return Err(TestCaseError::fail(format!(
                "{:?} -> {:?}: {other:?}",
                String::from_utf8_lossy(&buf[..head.len]),
                String::from_utf8_lossy(&out)
            )))
        }
    };
    prop_assert_eq!(again.len, out.len());
    prop_assert_eq!(again.method_span.of(&out), head.method_span.of(buf));
    prop_assert_eq!(again.version, head.version);
    prop_assert_eq!(again.framing, head.framing);
    prop_assert_eq!(fields(&out, again.len).count(), again.fields);
    let target = again.target.of(&out);
    match (s.rewrite_path, head.target_form) {
        (None, form) => {
            let want = expected_target(head.target.of(buf), form);
            let want = if s.normalize_path {
                normalized_target(&want)
            } else {
                want
            };
            prop_assert_eq!(target, &want[..]);
        }
        (Some(_), Target::Origin | Target::Absolute) => {
            prop_assert_eq!(again.target_form, Target::Origin);
            let query = head.target.of(buf).iter().position(|&b| b == b'?');
            let query = query.map_or(&b""[..], |q| &head.target.of(buf)[q..]);
            prop_assert!(target.ends_with(query));
        }
        (Some(_), _) => prop_assert_eq!(target, head.target.of(buf)),
    }
    let mut tokens: Vec<&[u8]> = Vec::new();
    if head.version == Version::Http10 {
        tokens.push(b"keep-alive");
    }
    if s.upgrade {
        tokens.push(b"upgrade");
    }
    hop_and_framing(&out, again.len, &tokens, s.upgrade, head.framing)?;
    // Fields the input's Connection named are gone, unless the proxy or an edit writes its own.
    let ours = [
        &b"host"[..],
        b"upgrade",
        b"connection",
        b"content-length",
        b"transfer-encoding",
        b"x-forwarded-for",
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"forwarded",
        b"via",
        b"x-request-id",
    ];
    for token in connection_tokens(buf, head.len) {
        let edited = edits
            .iter()
            .any(|e| e.name.as_bytes().eq_ignore_ascii_case(&token));
        if !ours.contains(&&token[..]) && !edited && token != b"close" && token != b"keep-alive" {
            prop_assert_eq!(count(&out, again.len, &token), 0);
        }
    }
    if edits.is_empty() {
        forwarding_without_edits(buf, &head, &out, &again, s)?;
    }
    Ok(())
}

/// The forwarding fields, where no edit changes them.
fn forwarding_without_edits(
    buf: &[u8],
    head: &RequestHead,
    out: &[u8],
    again: &RequestHead,
    s: &Settings,
) -> Result<(), TestCaseError> {
    let xff = b"x-forwarded-for";
    let named = |name: &[u8]| {
        connection_tokens(buf, head.len)
            .iter()
            .any(|t| t.eq_ignore_ascii_case(name))
    };
    let incoming = if named(xff) {
        0
    } else {
        count(buf, head.len, xff)
    };
    let xff_out = count(out, again.len, xff);
    match (s.forwarded_for, s.client) {
        (ForwardedFor::Off, _) => prop_assert_eq!(xff_out, incoming),
        (_, None) => prop_assert_eq!(xff_out, if s.trusted { incoming } else { 0 }),
        (_, Some(ip)) => {
            prop_assert_eq!(xff_out, 1);
            let value = field_value(out, again.len, xff).unwrap_or_default();
            let ip = ip.to_canonical().to_string();
            prop_assert!(value.ends_with(ip.as_bytes()));
            if !s.trusted || s.forwarded_for == ForwardedFor::Replace {
                prop_assert_eq!(value, ip.as_bytes());
            }
        }
    }
    if s.request_id.is_some() {
        prop_assert!(count(out, again.len, b"x-request-id") >= 1);
    }
    if s.via.is_some() {
        prop_assert_eq!(
            count(out, again.len, b"via"),
            count(buf, head.len, b"via") * usize::from(!named(b"via")) + 1
        );
    }
    Ok(())
}

fn check_response(
    buf: &[u8],
    to_head: bool,
    flags: [bool; 4],
    edits: &[HeaderEdit],
) -> Result<(), TestCaseError> {
    let Ok(Some(head)) = parse_response(buf, &Limits::default(), to_head) else {
        return Ok(());
    };
    let [close, keep_alive_10, via, upgrade] = flags;
    let rw = ResponseRewrite {
        client_version: Version::Http11,
        close,
        keep_alive_10,
        via: via.then_some(["quill", " q ", " "][edits.len() % 3]),
        edits: [edits, &[], &[]],
        upgrade,
    };
    own_parse_agrees(buf, &Limits::default(), to_head)?;
    let out = fits_exactly(head.len, |out| write_response(buf, &head, &rw, out))?;
    let mut index = FieldIndex::empty();
    let parsed = parse_response_indexed(buf, &Limits::default(), to_head, &mut index);
    prop_assert_eq!(parsed, Ok(Some(head)));
    let (_, indexed) = written(out.len(), |o| {
        write_response_indexed(buf, &head, &index, &rw, o)
    });
    prop_assert_eq!(&indexed, &out);
    // The lines copied by name are the lines decided one by one.
    let (_, each) = written(out.len(), |o| {
        super::rewrite::write_response_with(buf, &head, &index, &rw, o, false)
    });
    prop_assert_eq!(&each, &out);
    // The fields another form carries (HTTP/2's HEADERS): those of the written head, in order,
    // but the fields of an HTTP/1 connection, names in any case.
    let mut visited: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    response_fields(buf, &head, &index, &rw, |f| {
        visited.push(match f {
            ResponseField::Kept(n, v) | ResponseField::Added(n, v) => {
                (n.to_ascii_lowercase(), v.to_vec())
            }
            ResponseField::Length(n) => (b"content-length".to_vec(), n.to_string().into_bytes()),
            ResponseField::Via(received, name) => (b"via".to_vec(), [received, name].concat()),
        })
    });
    let mut strict = FieldIndex::empty();
    if let Ok(Some(_)) = parse_response_indexed(&out, &LOOSE, to_head, &mut strict) {
        let written: Vec<_> = strict
            .end_to_end(&out)
            .map(|f| {
                (
                    f.name.of(&out).to_ascii_lowercase(),
                    f.value.of(&out).to_vec(),
                )
            })
            .collect();
        prop_assert_eq!(visited, written);
    }
    let again = match parse_response(&out, &LOOSE, to_head) {
        Ok(Some(h)) => h,
        other => {
            return Err(TestCaseError::fail(format!(
                "{:?} -> {:?}: {other:?}",
                String::from_utf8_lossy(&buf[..head.len]),
                String::from_utf8_lossy(&out)
            )))
        }
    };
    own_parse_agrees(&out, &LOOSE, to_head)?;
    prop_assert_eq!(again.len, out.len());
    prop_assert_eq!(again.version, Version::Http11);
    prop_assert_eq!(again.status, head.status);
    prop_assert_eq!(again.reason.of(&out), head.reason.of(buf));
    prop_assert_eq!(again.framing, head.framing);
    let mut tokens: Vec<&[u8]> = Vec::new();
    if close {
        tokens.push(b"close");
    } else if keep_alive_10 {
        tokens.push(b"keep-alive");
    }
    if upgrade {
        tokens.push(b"upgrade");
    }
    hop_and_framing(&out, again.len, &tokens, upgrade, head.framing)?;
    if head.status < 200 || head.status == 204 {
        prop_assert_eq!(count(&out, again.len, b"content-length"), 0);
    }
    Ok(())
}

/// `parse_own_response_indexed` gives what the strict parse gives, index included, for a head
/// the strict parse accepts, and waits for more on every cut of it.
fn own_parse_agrees(buf: &[u8], limits: &Limits, to_head: bool) -> Result<(), TestCaseError> {
    let mut strict_index = FieldIndex::empty();
    let Ok(Some(head)) = parse_response_indexed(buf, limits, to_head, &mut strict_index) else {
        return Ok(());
    };
    let mut own_index = FieldIndex::empty();
    let own = parse_own_response_indexed(buf, limits, to_head, &mut own_index);
    prop_assert_eq!(own, Ok(Some(head)));
    let spans = |ix: &FieldIndex| {
        ix.iter(buf)
            .map(|f| (f.line, f.name, f.value))
            .collect::<Vec<_>>()
    };
    prop_assert_eq!(spans(&own_index), spans(&strict_index));
    for cut in 0..head.len {
        let mut ix = FieldIndex::empty();
        let partial = parse_own_response_indexed(&buf[..cut], limits, to_head, &mut ix);
        prop_assert_eq!(partial, Ok(None), "cut at {}", cut);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(3_000))]

    #[test]
    fn rewritten_requests_parse_again_the_same_without_hop_by_hop_fields(
        buf in head(REQUEST_LINES),
        s in settings(),
        edits in prop_oneof![Just(Vec::new()), header_edits()],
        cut in 0usize..5,
    ) {
        check_request(&buf, &s, &edits, cut)?;
    }

    #[test]
    fn rewritten_responses_parse_again_the_same_without_hop_by_hop_fields(
        buf in head(STATUS_LINES),
        to_head in any::<bool>(),
        flags in any::<[bool; 4]>(),
        edits in header_edits(),
    ) {
        check_response(&buf, to_head, flags, &edits)?;
    }
}

/// The generators reach what they are for: most generated heads are accepted.
#[test]
fn most_generated_heads_are_accepted() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut requests, mut responses) = (0, 0);
    for _ in 0..200 {
        let req = head(REQUEST_LINES)
            .new_tree(&mut runner)
            .map(|t| t.current());
        let resp = head(STATUS_LINES)
            .new_tree(&mut runner)
            .map(|t| t.current());
        if req.is_ok_and(|b| matches!(parse_request(&b, &Limits::default()), Ok(Some(_)))) {
            requests += 1;
        }
        if resp.is_ok_and(|b| matches!(parse_response(&b, &Limits::default(), false), Ok(Some(_))))
        {
            responses += 1;
        }
    }
    assert!(requests >= 40 && responses >= 40, "{requests} {responses}");
}
