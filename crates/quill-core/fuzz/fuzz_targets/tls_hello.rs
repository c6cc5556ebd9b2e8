//! Fuzz target for `quill_core::tls_hello::parse` on arbitrary bytes: never panics, and a prefix
//! of the input reads as incomplete, or fails the same way as the whole, or (once it holds the
//! whole ClientHello) gives the same hello.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quill_core::tls_hello::parse;

fuzz_target!(|data: &[u8]| {
    let whole = parse(data);
    let hello_len = match &whole {
        Ok(Some(hello)) => {
            let _ = (hello.server_name(), hello.max_version(), hello.has_alpn());
            assert!(hello.alpn().count() <= hello.len);
            assert!(hello.supported_versions().count() <= hello.len);
            assert!(hello.len <= data.len());
            Some(hello.len)
        }
        _ => None,
    };
    let step = (data.len() / 64).max(1);
    for end in (0..data.len()).step_by(step) {
        let part = parse(&data[..end]);
        match (&part, &whole, hello_len) {
            (Ok(None), _, Some(len)) => assert!(end < len, "prefix {end} of a {len}-byte hello"),
            (Ok(None), _, None) => {}
            (Ok(Some(h)), Ok(Some(w)), _) => {
                assert_eq!(h.len, w.len);
                assert_eq!(
                    h.server_name().map(|n| n.as_bytes().to_vec()),
                    w.server_name().map(|n| n.as_bytes().to_vec())
                );
            }
            (Err(e), Err(w), _) => assert_eq!(e, w),
            _ => panic!(
                "prefix {end}: {:?} but whole {:?}",
                part.map(|h| h.map(|h| h.len)),
                whole.map(|h| h.map(|h| h.len))
            ),
        }
    }
});
