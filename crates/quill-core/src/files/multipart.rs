//! `multipart/byteranges` (RFC 9110 §14.6, the delimiters of RFC 2046 §5.1.1): the body of a 206
//! with several ranges. The boundary comes from a random number the caller draws per response, so
//! a file cannot be made to contain it in advance; the body's length is known before a byte is
//! sent, so the response carries a Content-Length.
//!
//! The body is, for parts 0..n: [`write_part_head`] then the part's bytes; then
//! [`write_closing`]. A part head after the first starts with the CRLF that ends the previous
//! part's bytes. A single range is not multipart: it is a 206 with [`super::range::content_range`].

use super::range::{content_range, ByteRange, Ranges};

/// The boundary's length: 16 lowercase hex digits.
pub const BOUNDARY_LEN: usize = 16;

const CONTENT_TYPE_PREFIX: &[u8] = b"multipart/byteranges; boundary=";

/// The length of [`Boundary::content_type`].
pub const CONTENT_TYPE_LEN: usize = CONTENT_TYPE_PREFIX.len() + BOUNDARY_LEN;

/// A multipart boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Boundary([u8; BOUNDARY_LEN]);

impl Boundary {
    /// The boundary written from a number (the caller passes a random one).
    pub fn from_u64(n: u64) -> Boundary {
        let mut b = [0u8; BOUNDARY_LEN];
        for (i, d) in b.iter_mut().enumerate() {
            *d = b"0123456789abcdef"[(n >> (60 - 4 * i) & 0xf) as usize];
        }
        Boundary(b)
    }

    /// The boundary's characters.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The response's `Content-Type`: `multipart/byteranges; boundary=B`.
    pub fn content_type(&self) -> [u8; CONTENT_TYPE_LEN] {
        let mut out = [0u8; CONTENT_TYPE_LEN];
        out[..CONTENT_TYPE_PREFIX.len()].copy_from_slice(CONTENT_TYPE_PREFIX);
        out[CONTENT_TYPE_PREFIX.len()..].copy_from_slice(&self.0);
        out
    }
}

/// Appends the head of part `index` to `out`: (`\r\n` after the first part) `--B\r\n`,
/// `Content-Type: T\r\n`, `Content-Range: bytes a-b/n\r\n`, `\r\n`. `content_type` is the file's
/// own type (as [`super::mime`] gives it).
pub fn write_part_head(
    out: &mut Vec<u8>,
    boundary: &Boundary,
    index: usize,
    content_type: &[u8],
    part: ByteRange,
    size: u64,
) {
    if index > 0 {
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"--");
    out.extend_from_slice(boundary.as_bytes());
    out.extend_from_slice(b"\r\nContent-Type: ");
    out.extend_from_slice(content_type);
    out.extend_from_slice(b"\r\nContent-Range: ");
    out.extend_from_slice(content_range(part, size).as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
}

/// Appends the closing delimiter: `\r\n--B--\r\n`.
pub fn write_closing(out: &mut Vec<u8>, boundary: &Boundary) {
    out.extend_from_slice(b"\r\n--");
    out.extend_from_slice(boundary.as_bytes());
    out.extend_from_slice(b"--\r\n");
}

/// The length of [`write_part_head`]'s output.
pub fn part_head_len(index: usize, content_type: &[u8], part: ByteRange, size: u64) -> u64 {
    let crlf = if index > 0 { 2 } else { 0 };
    let fixed = crlf + 2 + BOUNDARY_LEN + 16 + 17 + 4;
    (fixed + content_type.len() + content_range(part, size).as_bytes().len()) as u64
}

/// The length of [`write_closing`]'s output.
pub const CLOSING_LEN: u64 = 2 + 2 + BOUNDARY_LEN as u64 + 4;

/// The whole multipart body's length for these ranges: its `Content-Length`.
pub fn total_len(ranges: &Ranges, content_type: &[u8], size: u64) -> u64 {
    let parts = ranges.as_slice().iter().enumerate();
    parts
        .map(|(i, &p)| part_head_len(i, content_type, p, size) + p.len())
        .sum::<u64>()
        + CLOSING_LEN
}

#[cfg(test)]
mod tests {
    use super::super::range::{self, RangeOutcome};
    use super::*;
    use proptest::prelude::*;

    fn ranges(value: &str, size: u64) -> Ranges {
        match range::parse(value.as_bytes(), size, 16) {
            RangeOutcome::Partial(r) => r,
            other => panic!("{other:?}"),
        }
    }

    /// The body built from the writers and the file's bytes.
    fn body(r: &Ranges, b: &Boundary, ty: &[u8], file: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, &p) in r.as_slice().iter().enumerate() {
            write_part_head(&mut out, b, i, ty, p, file.len() as u64);
            out.extend_from_slice(&file[p.start as usize..=p.end as usize]);
        }
        write_closing(&mut out, b);
        out
    }

    #[test]
    fn a_two_part_body_is_written_as_the_rfc_shows() {
        let file: Vec<u8> = (0..100u8).map(|i| b'a' + i % 26).collect();
        let b = Boundary::from_u64(0x0123_4567_89ab_cdef);
        assert_eq!(
            &b.content_type()[..],
            b"multipart/byteranges; boundary=0123456789abcdef"
        );
        let r = ranges("bytes=0-2,-3", 100);
        let out = body(&r, &b, b"text/plain", &file);
        let expect = "--0123456789abcdef\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-2/100\r\n\r\nabc\
            \r\n--0123456789abcdef\r\nContent-Type: text/plain\r\nContent-Range: bytes 97-99/100\r\n\r\ntuv\
            \r\n--0123456789abcdef--\r\n";
        assert_eq!(String::from_utf8(out.clone()).unwrap(), expect);
        assert_eq!(total_len(&r, b"text/plain", 100), out.len() as u64);
    }

    #[test]
    fn boundaries_are_sixteen_hex_digits() {
        assert_eq!(Boundary::from_u64(0).as_bytes(), b"0000000000000000");
        assert_eq!(Boundary::from_u64(u64::MAX).as_bytes(), b"ffffffffffffffff");
    }

    proptest! {
        #[test]
        fn the_announced_length_is_the_written_length(
            specs in proptest::collection::vec((0u64..300, 0u64..300), 1..16),
            size in 1u64..300,
            seed in any::<u64>(),
            ty in "[a-z/;=+ -]{0,40}",
        ) {
            let value = format!("bytes={}", specs.iter()
                .map(|&(a, b)| format!("{}-{}", a.min(b), a.max(b)))
                .collect::<Vec<_>>().join(","));
            if let RangeOutcome::Partial(r) = range::parse(value.as_bytes(), size, 16) {
                let file = vec![b'x'; size as usize];
                let b = Boundary::from_u64(seed);
                let out = body(&r, &b, ty.as_bytes(), &file);
                prop_assert_eq!(total_len(&r, ty.as_bytes(), size), out.len() as u64);
            }
        }
    }
}
