//! The HTTP semantics of serving a file (RFC 9110), pure: no I/O, no allocation. The file server
//! gives these modules what it knows of a file (modification time, size, extension, the
//! precompressed variants it has) and the request's raw field values; it gets back the bytes of
//! response fields and the decision to take (200, 206, 304, 412, 416).
//!
//! - [`mime`]: extension → `Content-Type`.
//! - [`etag`]: the strong validator of a file, entity-tag lists and their comparisons
//!   (RFC 9110 §8.8.3).
//! - [`date`]: HTTP-date, written and read (RFC 9110 §5.6.7).
//! - [`coding`]: the content codings a file may be stored in (`br`, `zstd`, `gzip`) and the
//!   choice by `Accept-Encoding` (RFC 9110 §12.5.3).
//! - [`precondition`]: If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since, If-Range
//!   and Range, in RFC 9110 §13.2.2's order, into one [`precondition::Verdict`].
//! - [`range`]: `Range: bytes=…` against a size, bounded (RFC 9110 §14.1–§14.4).
//! - [`multipart`]: the `multipart/byteranges` body of several ranges (RFC 9110 §14.6).

pub mod coding;
pub mod date;
pub mod etag;
pub mod mime;
pub mod multipart;
pub mod precondition;
pub mod range;

/// `s` without leading spaces and tabs.
fn trim_start(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&b| b == b' ' || b == b'\t').count();
    &s[n..]
}

/// `s` without leading and trailing spaces and tabs (OWS), as every field reader here takes it.
pub(crate) fn trim(s: &[u8]) -> &[u8] {
    let s = trim_start(s);
    let n = s
        .iter()
        .rev()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count();
    &s[..s.len() - n]
}
