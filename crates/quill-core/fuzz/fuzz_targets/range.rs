//! Fuzz target for `quill_core::files::range` and `multipart`: any Range value against any size
//! never panics; the parts are inside the file, ascending, apart, at most `max` and never more
//! than the file in total; the multipart body's announced length is the length written.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quill_core::files::multipart::{self, Boundary};
use quill_core::files::range::{self, RangeOutcome};

fuzz_target!(|input: (u64, u8, &[u8])| {
    let (size, max, value) = input;
    let max = usize::from(max % 20);
    let RangeOutcome::Partial(r) = range::parse(value, size, max) else {
        return;
    };
    let parts = r.as_slice();
    assert!(!parts.is_empty() && parts.len() <= max.min(range::MAX_PARTS));
    for p in parts {
        assert!(p.start <= p.end && p.end < size);
    }
    for w in parts.windows(2) {
        assert!(w[0].end + 1 < w[1].start);
    }
    assert!(r.total_len() <= size);
    let b = Boundary::from_u64(size);
    let mut heads = Vec::new();
    for (i, &p) in parts.iter().enumerate() {
        multipart::write_part_head(&mut heads, &b, i, b"text/plain", p, size);
    }
    multipart::write_closing(&mut heads, &b);
    let total = multipart::total_len(&r, b"text/plain", size);
    assert_eq!(total, heads.len() as u64 + r.total_len());
});
