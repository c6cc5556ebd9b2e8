//! Fuzz target for `quill_core::cgi::parse_head` on arbitrary bytes: never panics, a head never
//! claims more than it was given or than the limit, a prefix reads as incomplete, as the same
//! head or as refused like the whole, and the HTTP/1.1 head written from an accepted one is one
//! Quill's own HTTP parser accepts.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quill_core::cgi::{parse_head, write_response_head, Connection, Framing, Limits};
use quill_core::http1;

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_head: 1024, max_fields: 16 };
    let whole = parse_head(data, &limits);
    if let Ok(Some((head, len))) = whole {
        assert!(len <= data.len() && len <= limits.max_head && head.len == len);
        let mut out = Vec::new();
        write_response_head(&head, data, Framing::Chunked, Connection::Omit, &mut out);
        let parsed = http1::parse_response(&out, &http1::Limits::default(), false);
        assert!(matches!(parsed, Ok(Some(_))), "{out:?} gave {parsed:?}");
    }
    for end in 0..data.len().min(limits.max_head + 1) {
        match (parse_head(&data[..end], &limits), whole) {
            (Ok(None), _) => {}
            (Ok(Some(p)), Ok(Some(w))) => assert_eq!(p, w),
            (Err(_), Err(_)) => {}
            (p, w) => panic!("prefix {end}: {p:?} but whole {w:?}"),
        }
    }
});
