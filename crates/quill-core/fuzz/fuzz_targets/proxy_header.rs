//! Fuzz target for `quill_core::proxy_header::parse` on arbitrary bytes: never panics, a whole
//! header never claims more bytes than it was given or than `MAX_HEADER`, and a prefix of the
//! input reads as incomplete, or as the same header, or as invalid like the whole.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quill_core::proxy_header::{parse, Parse, MAX_HEADER};

fuzz_target!(|data: &[u8]| {
    let whole = parse(data);
    if let Parse::Done(h) = whole {
        assert!(h.consumed <= data.len() && h.consumed <= MAX_HEADER);
    }
    for end in 0..data.len().min(MAX_HEADER + 1) {
        match (parse(&data[..end]), whole) {
            (Parse::Incomplete, _) => {}
            (Parse::Done(p), Parse::Done(w)) => assert_eq!(p, w),
            (Parse::Invalid(_), Parse::Invalid(_)) => {}
            (p, w) => panic!("prefix {end}: {p:?} but whole {w:?}"),
        }
    }
});
