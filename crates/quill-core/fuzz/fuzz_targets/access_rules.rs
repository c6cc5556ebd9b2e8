//! Fuzz target for what access rules read: `quill_core::http1::path` (the normal form routes
//! match) and `quill_core::http1::referer` (the host a `Referer` names). For arbitrary bytes:
//! a normal form is never longer, is normal, normalises to itself, and a path said to be normal is
//! its own normal form; a `Referer` host is a non-empty piece of the value made of host bytes
//! only (the invariants of the modules' property tests, for longer runs).

#![no_main]

use libfuzzer_sys::fuzz_target;
use quill_core::http1::path::{is_normal, normalize_into};
use quill_core::http1::referer::{classify, Referer};

fn check_path(path: &[u8]) {
    let mut out = vec![0u8; path.len()];
    let Ok(n) = normalize_into(path, &mut out) else {
        assert!(!is_normal(path));
        return;
    };
    let normal = &out[..n];
    assert!(normal.len() <= path.len());
    assert!(is_normal(normal));
    let mut again = vec![0u8; normal.len()];
    let m = normalize_into(normal, &mut again).expect("a normal form normalises");
    assert_eq!(&again[..m], normal);
    if is_normal(path) {
        assert_eq!(normal, path);
    }
}

fn check_referer(value: &[u8]) {
    if let Referer::Host(h) = classify(value) {
        assert!(!h.is_empty());
        let bracketed = h.first() == Some(&b'[') && h.last() == Some(&b']');
        assert!(
            bracketed
                || h
                    .iter()
                    .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        );
        assert!(value.windows(h.len()).any(|w| w == h));
    }
}

fuzz_target!(|data: &[u8]| {
    check_path(data);
    check_referer(data);
});
