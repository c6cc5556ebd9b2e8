//! Property tests over arbitrary bytes and mutated messages (fixed seeds, and messages generated
//! from start lines, framing fields and chunked bodies; then bit flips, inserted and deleted
//! bytes, line breaks and separators dropped in): nothing panics, and a head parsed again at
//! every prefix, or a body fed in pieces at every split, reads exactly as it does whole.
//!
//! The default case counts keep the run well under 20 s in a debug build (CI allows 30 s);
//! `PROPTEST_CASES=N` runs N cases of each property instead, for longer searches.

use proptest::prelude::*;

use super::*;

pub(super) fn config(default: u32) -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(default),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Valid messages to mutate: heads followed by a body framed as they say.
const REQUESTS: &[&[u8]] = &[
    b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /x?y=1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    b"POST /p HTTP/1.1\r\nHost: a.example:80\r\nContent-Length: 5\r\n\r\nhello",
    b"PUT /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;e=1\r\nhello\r\n0\r\nT: v\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
    b"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n",
    b"GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
];

const RESPONSES: &[&[u8]] = &[
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"HTTP/1.0 404 Not Found\r\n\r\nuntil close",
    b"HTTP/1.1 204\r\nServer: x\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
];

/// A start line: requests of each target form, responses with and without a body.
fn start_line() -> impl Strategy<Value = &'static str> {
    prop::sample::select(
        &[
            "GET / HTTP/1.1",
            "POST /a?b=c HTTP/1.1",
            "PUT http://h/x HTTP/1.0",
            "OPTIONS * HTTP/1.1",
            "CONNECT h:443 HTTP/1.1",
            "HTTP/1.1 200 OK",
            "HTTP/1.0 200 OK",
            "HTTP/1.1 204 No Content",
            "HTTP/1.1 304 Not Modified",
            "HTTP/1.1 101 Switching Protocols",
        ][..],
    )
}

/// A short word from a small alphabet that includes the grammar's separators.
fn word(alphabet: &'static [u8], len: std::ops::Range<usize>) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(alphabet), len)
        .prop_map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// A field line (without its CRLF): the framing and host fields in their usual and unusual
/// spellings, or any name and value.
fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(
            &[
                "Host: a",
                "Host: [::1]:80",
                "Connection: close",
                "Connection: keep-alive, Upgrade",
                "Transfer-Encoding: chunked",
                "Transfer-Encoding: gzip, chunked",
                "transfer-encoding: identity",
                "Content-Length: 0",
                "X-Empty:",
            ][..]
        )
        .prop_map(String::from),
        (0u64..40).prop_map(|n| format!("Content-Length: {n}")),
        (word(b"aZ-_9", 1..6), word(b"a ;=,\t\"9", 0..8)).prop_map(|(n, v)| format!("{n}: {v}")),
    ]
}

/// A chunked body: chunks with and without extensions, the last chunk, trailers, and maybe bytes
/// of a next message after it.
fn chunked_body() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec((1usize..20, word(b"a=;\" ", 0..4)), 0..4),
        prop::collection::vec((word(b"aT-", 1..4), word(b"v ", 0..4)), 0..2),
        prop::collection::vec(any::<u8>(), 0..6),
    )
        .prop_map(|(chunks, trailers, after)| {
            let mut out = Vec::new();
            for (size, ext) in chunks {
                let ext = if ext.is_empty() {
                    ext
                } else {
                    format!(";{ext}")
                };
                out.extend(format!("{size:x}{ext}\r\n").as_bytes());
                out.extend(std::iter::repeat_n(b'd', size));
                out.extend(b"\r\n");
            }
            out.extend(b"0\r\n");
            for (name, value) in trailers {
                out.extend(format!("{name}: {value}\r\n").as_bytes());
            }
            out.extend(b"\r\n");
            out.extend(after);
            out
        })
}

/// A whole message: a start line, fields, and a chunked body or a few bytes.
fn message() -> impl Strategy<Value = Vec<u8>> {
    (
        start_line(),
        prop::collection::vec(field(), 0..6),
        prop_oneof![chunked_body(), prop::collection::vec(any::<u8>(), 0..30)],
    )
        .prop_map(|(start, fields, body)| {
            let mut out = format!("{start}\r\n").into_bytes();
            for f in fields {
                out.extend(format!("{f}\r\n").as_bytes());
            }
            out.extend(b"\r\n");
            out.extend(body);
            out
        })
}

/// One edit: (kind, position, byte).
pub(super) fn edits() -> impl Strategy<Value = Vec<(u8, usize, u8)>> {
    prop::collection::vec((0u8..4, any::<usize>(), any::<u8>()), 0..4)
}

/// Applies the edits: flip a bit, insert a byte, delete a byte, or put in a byte that matters
/// to the grammar (CR, LF, space, tab, colon, comma, semicolon, NUL).
pub(super) fn mutate(seed: &[u8], edits: &[(u8, usize, u8)]) -> Vec<u8> {
    const SPECIAL: &[u8] = b"\r\n \t:,;\0";
    let mut out = seed.to_vec();
    for &(kind, at, byte) in edits {
        let at = at % (out.len() + 1);
        match kind {
            0 if at < out.len() => out[at] ^= 1 << (byte % 8),
            1 => out.insert(at, byte),
            2 if at < out.len() => {
                out.remove(at);
            }
            _ => out.insert(at, SPECIAL[byte as usize % SPECIAL.len()]),
        }
    }
    out
}

/// Small limits too, so that the size rules are met by short inputs.
fn limits(small: bool) -> Limits {
    if small {
        Limits {
            max_head: 40,
            max_request_line: 24,
            max_headers: 2,
            require_host: true,
        }
    } else {
        Limits::default()
    }
}

/// A parse at every prefix agrees with the parse of the whole: incomplete before the head's end,
/// the same head after it, or the same error.
fn same_at_every_prefix<T, F>(buf: &[u8], parse: F) -> Result<(), TestCaseError>
where
    T: PartialEq + std::fmt::Debug,
    F: Fn(&[u8]) -> Result<Option<T>, Error>,
    T: HasLen,
{
    let whole = parse(buf);
    for end in 0..=buf.len() {
        let part = parse(&buf[..end]);
        match &whole {
            Ok(Some(h)) if end < h.head_len() => prop_assert_eq!(part, Ok(None), "prefix {}", end),
            Ok(Some(_)) => prop_assert_eq!(&part, &whole, "prefix {}", end),
            Ok(None) => prop_assert_eq!(part, Ok(None), "prefix {}", end),
            Err(e) => prop_assert!(
                part == Ok(None) || part == Err(*e),
                "prefix {}: {:?}, whole: {:?}",
                end,
                part,
                e
            ),
        }
    }
    Ok(())
}

/// Either kind of head: where its body starts.
trait HasLen {
    fn head_len(&self) -> usize;
}

impl HasLen for RequestHead {
    fn head_len(&self) -> usize {
        self.len
    }
}

impl HasLen for ResponseHead {
    fn head_len(&self) -> usize {
        self.len
    }
}

/// Feeds `data` in the pieces that `cuts` make, stopping at the body's end: the bytes used, the
/// payload, and whether it ended, or the first error.
fn feed_in_pieces(
    framing: Framing,
    data: &[u8],
    cuts: &[usize],
) -> Result<(usize, u64, bool), Error> {
    let mut body = Body::new(framing);
    let (mut used, mut payload) = (0, 0);
    let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
    bounds.push(data.len());
    bounds.sort_unstable();
    let mut from = 0;
    for to in bounds {
        if body.is_done() {
            break;
        }
        let fed = body.feed(&data[from..to])?;
        assert!(fed.used <= to - from);
        used += fed.used;
        payload += fed.payload;
        from = to;
    }
    Ok((used, payload, body.is_done()))
}

/// The body after a head, fed whole and in pieces, reads the same.
fn body_same_in_pieces(framing: Framing, data: &[u8], cuts: &[usize]) -> Result<(), TestCaseError> {
    let whole = feed_in_pieces(framing, data, &[]);
    for split in 0..=data.len() {
        prop_assert_eq!(
            feed_in_pieces(framing, data, &[split]),
            whole,
            "split at {}",
            split
        );
    }
    prop_assert_eq!(
        feed_in_pieces(framing, data, cuts),
        whole,
        "cuts {:?}",
        cuts
    );
    Ok(())
}

/// Every check on one input: requests, responses (to GET and to HEAD), the status peek, and the
/// body after whatever head was found.
fn check_all(buf: &[u8], small: bool, cuts: &[usize]) -> Result<(), TestCaseError> {
    let limits = limits(small);
    same_at_every_prefix(buf, |b| parse_request(b, &limits))?;
    same_at_every_prefix(buf, |b| parse_response(b, &limits, false))?;
    same_at_every_prefix(buf, |b| parse_response(b, &limits, true))?;
    for eof in [false, true] {
        let _ = status_code(buf, eof);
    }
    if let Ok(Some(h)) = parse_request(buf, &limits) {
        prop_assert_eq!(fields(buf, h.len).count(), h.fields);
        body_same_in_pieces(h.framing, &buf[h.len..], cuts)?;
    }
    if let Ok(Some(h)) = parse_response(buf, &limits, false) {
        prop_assert_eq!(fields(buf, h.len).count(), h.fields);
        body_same_in_pieces(h.framing, &buf[h.len..], cuts)?;
    }
    // The raw bytes as a chunked body, whatever they are.
    body_same_in_pieces(Framing::Chunked, buf, cuts)
}

proptest! {
    #![proptest_config(config(10_000))]

    #[test]
    fn mutated_requests_parse_the_same_in_pieces_and_never_panic(
        seed in prop::sample::select(REQUESTS),
        edits in edits(),
        small in any::<bool>(),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        check_all(&mutate(seed, &edits), small, &cuts)?;
    }

    #[test]
    fn mutated_responses_parse_the_same_in_pieces_and_never_panic(
        seed in prop::sample::select(RESPONSES),
        edits in edits(),
        small in any::<bool>(),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        check_all(&mutate(seed, &edits), small, &cuts)?;
    }

    #[test]
    fn generated_and_mutated_messages_parse_the_same_in_pieces_and_never_panic(
        message in message(),
        edits in edits(),
        small in any::<bool>(),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        check_all(&mutate(&message, &edits), small, &cuts)?;
    }

    #[test]
    fn mutated_chunked_bodies_decode_the_same_in_pieces(
        body in chunked_body(),
        edits in edits(),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        body_same_in_pieces(Framing::Chunked, &mutate(&body, &edits), &cuts)?;
    }

    /// A chunk size is read as its value when it has at most `MAX_CHUNK_SIZE_DIGITS` digits
    /// (zeros of padding included) and refused when it has more, in any split (E14,
    /// docs/design.md#framing-passed-on-is-framing-understood).
    #[test]
    fn chunk_sizes_are_read_by_value_within_the_digit_bound(
        value in 1u64..100_000,
        zeros in 0usize..40,
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let hex = format!("{value:x}");
        let size = format!("{}{hex}", "0".repeat(zeros));
        let mut body = format!("{size}\r\n").into_bytes();
        body.extend(std::iter::repeat_n(b'x', value as usize));
        body.extend(b"\r\n0\r\n\r\n");
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % body.len()).collect();
        cuts.sort_unstable();
        let mut b = Body::new(Framing::Chunked);
        let (mut at, mut payload, mut outcome) = (0, 0u64, Ok(false));
        for end in cuts.into_iter().chain([body.len()]) {
            if end < at {
                continue;
            }
            match b.feed(&body[at..end]) {
                Ok(f) => {
                    payload += f.payload;
                    at += f.used;
                    outcome = Ok(f.done);
                }
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
        if size.len() <= super::body::MAX_CHUNK_SIZE_DIGITS as usize {
            prop_assert_eq!(outcome, Ok(true));
            prop_assert_eq!(payload, value);
        } else {
            prop_assert_eq!(outcome, Err(Error::BadChunkSize));
        }
    }

    /// Feeding a chunk's payload at once (`data_left`) and its framing byte by byte picks out
    /// exactly the payload, whatever the chunk sizes.
    #[test]
    fn data_left_picks_out_the_payload_of_a_chunked_body(
        chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..300), 0..8),
    ) {
        let mut body = Vec::new();
        for c in &chunks {
            body.extend(format!("{:x};ext=1\r\n", c.len()).bytes());
            body.extend(c);
            body.extend(b"\r\n");
        }
        body.extend(b"0\r\nTrailer: x\r\n\r\n");
        let mut b = Body::new(Framing::Chunked);
        let (mut at, mut payload) = (0, Vec::new());
        while !b.is_done() {
            let step = b.data_left().map_or(1, |left| left as usize);
            let fed = b.feed(&body[at..at + step]).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            if fed.payload > 0 {
                payload.extend_from_slice(&body[at..at + fed.used]);
            }
            at += fed.used;
        }
        prop_assert_eq!(at, body.len());
        prop_assert_eq!(payload, chunks.concat());
    }

    #[test]
    fn arbitrary_bytes_parse_the_same_in_pieces_and_never_panic(
        buf in prop::collection::vec(any::<u8>(), 0..200),
        small in any::<bool>(),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        check_all(&buf, small, &cuts)?;
    }
}

#[test]
fn unmutated_seeds_are_whole_messages() {
    for seed in REQUESTS {
        let h = parse_request(seed, &Limits::default()).unwrap().unwrap();
        let fed = Body::new(h.framing).feed(&seed[h.len..]).unwrap();
        assert!(fed.done && h.len + fed.used == seed.len(), "{seed:?}");
    }
    for seed in RESPONSES {
        // Past any 1xx heads to the final response.
        let mut at = 0;
        let h = loop {
            let h = parse_response(&seed[at..], &Limits::default(), false)
                .unwrap()
                .unwrap();
            if h.status >= 200 {
                break h;
            }
            at += h.len;
        };
        let mut body = Body::new(h.framing);
        let fed = body.feed(&seed[at + h.len..]).unwrap();
        assert_eq!(at + h.len + fed.used, seed.len(), "{seed:?}");
        assert!(body.finish().is_ok());
    }
}
