//! Fuzz target for `quill_core::files::precondition`, `etag`, `date` and `coding`: arbitrary
//! conditional fields, Range values and Accept-Encoding values never panic; a 304 is given only
//! to GET and HEAD, a 206 or 416 only to GET with a Range; a formatted date reads back.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quill_core::files::coding::{self, Coding};
use quill_core::files::precondition::{evaluate, Conditions, Method, Representation, Verdict};
use quill_core::files::{date, etag};

/// Splits the input at NUL bytes into the six fields (an empty piece is an absent field).
fn fields(data: &[u8]) -> [Option<&[u8]>; 6] {
    let mut out = [None; 6];
    for (slot, piece) in out.iter_mut().zip(data.split(|&b| b == 0)) {
        *slot = (!piece.is_empty()).then_some(piece);
    }
    out
}

fuzz_target!(|input: (i64, u64, u8, &[u8])| {
    let (mtime, size, m, data) = input;
    let f = fields(data);
    let method = [Method::Get, Method::Head, Method::Other][usize::from(m % 3)];
    let now = mtime.clamp(date::MIN, date::MAX);
    let rep = Representation {
        etag: etag::strong(mtime, 0, size, None),
        last_modified_s: mtime,
        size,
    };
    let c = Conditions {
        if_match: f[0],
        if_none_match: f[1],
        if_modified_since: f[2],
        if_unmodified_since: f[3],
        if_range: f[4],
        range: f[5],
        max_ranges: usize::from(m % 17),
        now_s: now,
    };
    match evaluate(&c, &rep, method) {
        Verdict::NotModified => assert!(method != Method::Other),
        Verdict::Partial(_) | Verdict::RangeNotSatisfiable => {
            assert!(method == Method::Get && c.range.is_some())
        }
        Verdict::Full | Verdict::PreconditionFailed => {}
    }
    assert_eq!(date::parse(&date::format(now), now), Some(now));
    if let Some(chosen) = coding::choose(data, &Coding::ALL) {
        assert!(coding::accepts(data, chosen.token().as_bytes()));
    }
});
