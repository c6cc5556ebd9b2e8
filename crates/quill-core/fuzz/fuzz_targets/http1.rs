//! Fuzz target for `quill_core::http1`: request heads, response heads (to GET and to HEAD), the
//! status peek and the chunked decoder, on arbitrary bytes. Besides never panicking, a head parsed
//! at a prefix must agree with the head parsed whole, and a body fed in two pieces must read as it
//! does whole (the invariants of src/http1/proptests.rs, for longer runs).

#![no_main]

use libfuzzer_sys::fuzz_target;
use quill_core::http1::{parse_request, parse_response, status_code, Body, Error, Framing, Limits};

/// Prefixes checked per input: all of them for short inputs, a spread for long ones.
fn prefixes(len: usize) -> impl Iterator<Item = usize> {
    let step = (len / 64).max(1);
    (0..=len).step_by(step).chain(std::iter::once(len))
}

/// `part` (a parse of a prefix of `end` bytes) agrees with `whole` whose head is `head_len` long.
fn agrees<T: PartialEq + std::fmt::Debug>(
    part: &Result<Option<T>, Error>,
    whole: &Result<Option<T>, Error>,
    head_len: Option<usize>,
    end: usize,
) {
    let ok = match (whole, head_len) {
        (Ok(Some(_)), Some(len)) if end < len => *part == Ok(None),
        (Ok(Some(_)), _) => part == whole,
        (Ok(None), _) => *part == Ok(None),
        (Err(e), _) => *part == Ok(None) || *part == Err(*e),
    };
    assert!(ok, "prefix {end}: {part:?}, whole: {whole:?}");
}

/// Feeds `data` in two pieces split at `at`: bytes used, payload, done, or the error.
fn feed_split(framing: Framing, data: &[u8], at: usize) -> Result<(usize, u64, bool), Error> {
    let mut body = Body::new(framing);
    let first = body.feed(&data[..at])?;
    if body.is_done() {
        return Ok((first.used, first.payload, true));
    }
    let second = body.feed(&data[at..])?;
    Ok((
        first.used + second.used,
        first.payload + second.payload,
        body.is_done(),
    ))
}

fn body_agrees(framing: Framing, data: &[u8]) {
    let whole = feed_split(framing, data, data.len());
    for at in prefixes(data.len()) {
        assert_eq!(feed_split(framing, data, at), whole, "split at {at}");
    }
}

fuzz_target!(|data: &[u8]| {
    let small = Limits {
        max_head: 64,
        max_request_line: 32,
        max_headers: 3,
        require_host: true,
    };
    for limits in [Limits::default(), small] {
        let whole = parse_request(data, &limits);
        let len = whole.as_ref().ok().and_then(|h| h.map(|h| h.len));
        for end in prefixes(data.len()) {
            agrees(&parse_request(&data[..end], &limits), &whole, len, end);
        }
        if let Ok(Some(h)) = whole {
            body_agrees(h.framing, &data[h.len..]);
        }
        for to_head in [false, true] {
            let whole = parse_response(data, &limits, to_head);
            let len = whole.as_ref().ok().and_then(|h| h.map(|h| h.len));
            for end in prefixes(data.len()) {
                agrees(
                    &parse_response(&data[..end], &limits, to_head),
                    &whole,
                    len,
                    end,
                );
            }
            if let Ok(Some(h)) = whole {
                body_agrees(h.framing, &data[h.len..]);
            }
        }
    }
    let _ = status_code(data, false);
    let _ = status_code(data, true);
    body_agrees(Framing::Chunked, data);
});
