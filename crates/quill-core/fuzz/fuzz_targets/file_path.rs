//! Fuzz target for `quill_core::http1::path::file_path`: any bytes either are refused or give a
//! file form that starts with `/`, holds no NUL, no empty, `.` or `..` segment, is never longer
//! than the input, and reads back as itself once its `%` are written `%25` (the invariants of
//! the property tests in src/http1/path.rs, for longer runs).

#![no_main]

use libfuzzer_sys::fuzz_target;
use quill_core::http1::path::{file_path, hidden_segment};

fuzz_target!(|data: &[u8]| {
    let mut out = vec![0u8; data.len()];
    let Ok(n) = file_path(data, &mut out) else {
        return;
    };
    let form = &out[..n];
    assert!(n <= data.len());
    assert!(form.starts_with(b"/"));
    assert!(!form.contains(&0));
    let inner = &form[1..form.len() - usize::from(form.len() > 1 && form.ends_with(b"/"))];
    if !inner.is_empty() {
        for segment in inner.split(|&b| b == b'/') {
            assert!(!matches!(segment, b"" | b"." | b".."), "{form:?}");
        }
    }
    let _ = hidden_segment(form);
    let mut again: Vec<u8> = Vec::with_capacity(n * 3);
    for &b in form {
        if b == b'%' {
            again.extend_from_slice(b"%25");
        } else {
            again.push(b);
        }
    }
    let mut out2 = vec![0u8; again.len()];
    let m = file_path(&again, &mut out2).expect("a file form reads back");
    assert_eq!(&out2[..m], form);
});
