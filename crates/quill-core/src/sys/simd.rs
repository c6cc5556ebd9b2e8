//! Two byte classes of HTTP/1's grammar sixteen bytes at a time, with SSE2, for the head
//! parser's hot loops (`http1::head`): the bytes that end a field value, and the bytes other than
//! those of nearly every field name. Each answer is a bit mask, bit `i` for byte `i`, exact for
//! every byte; the unit tests in `http1::grammar` check them against the byte-at-a-time classes.
//!
//! The intrinsics are `unsafe` to call only because they need SSE2, which is part of x86-64
//! itself: every x86-64 processor has it, and the compiler assumes it for the target.
#![allow(unsafe_code)]

use std::arch::x86_64::{
    __m128i, _mm_cmpeq_epi8, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    _mm_set_epi64x, _mm_sub_epi8,
};

/// The bytes at `at` of `bytes` that are below 0x20 (HTAB included) or are 0x7f: what stops a
/// field value (HTAB only for a second look). `None` if fewer than sixteen bytes are left.
pub fn control_bits(bytes: &[u8], at: usize) -> Option<u32> {
    let [low, high] = halves(bytes, at)?;
    // SAFETY: SSE2 is part of the x86-64 baseline (see the module's note); the function reads
    // nothing but its two arguments.
    Some(unsafe { control_sse2(low, high) })
}

/// The bytes at `at` of `bytes` that are not an ASCII letter, digit or `-`. `None` if fewer than
/// sixteen bytes are left.
pub fn not_name_bits(bytes: &[u8], at: usize) -> Option<u32> {
    let [low, high] = halves(bytes, at)?;
    // SAFETY: SSE2 is part of the x86-64 baseline (see the module's note); the function reads
    // nothing but its two arguments.
    Some(unsafe { not_name_sse2(low, high) })
}

/// The sixteen bytes at `at`, as two little-endian words.
fn halves(bytes: &[u8], at: usize) -> Option<[i64; 2]> {
    let sixteen: &[u8; 16] = bytes.get(at..at.checked_add(16)?)?.try_into().ok()?;
    let (low, high) = sixteen.split_at(8);
    Some([
        i64::from_le_bytes(low.try_into().ok()?),
        i64::from_le_bytes(high.try_into().ok()?),
    ])
}

/// Each byte: all ones when it is in `lo..=lo + span` (unsigned), else zero.
#[target_feature(enable = "sse2")]
fn in_range(v: __m128i, lo: u8, span: u8) -> __m128i {
    let d = _mm_sub_epi8(v, _mm_set1_epi8(lo as i8));
    _mm_cmpeq_epi8(_mm_min_epu8(d, _mm_set1_epi8(span as i8)), d)
}

#[target_feature(enable = "sse2")]
fn control_sse2(low: i64, high: i64) -> u32 {
    let v = _mm_set_epi64x(high, low);
    let below_space = in_range(v, 0, 0x1f);
    let del = _mm_cmpeq_epi8(v, _mm_set1_epi8(0x7f));
    _mm_movemask_epi8(_mm_or_si128(below_space, del)) as u32
}

#[target_feature(enable = "sse2")]
fn not_name_sse2(low: i64, high: i64) -> u32 {
    let v = _mm_set_epi64x(high, low);
    // Upper case folded to lower: only the letters land in `a..=z`.
    let letter = in_range(_mm_or_si128(v, _mm_set1_epi8(0x20)), b'a', 25);
    let digit = in_range(v, b'0', 9);
    let dash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'-' as i8));
    let name = _mm_or_si128(_mm_or_si128(letter, digit), dash);
    !(_mm_movemask_epi8(name) as u32) & 0xffff
}
