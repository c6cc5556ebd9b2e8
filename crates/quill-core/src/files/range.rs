//! `Range: bytes=…` against a file of known size (RFC 9110 §14.1, §14.2), and the
//! `Content-Range` values of the answer (§14.4).
//!
//! What Quill does with a Range field, in order:
//! - a unit other than `bytes`, or a syntax error anywhere: the field is ignored (200, §14.2);
//! - more satisfiable ranges than the configured maximum (0 turns ranges off): ignored (200);
//! - no satisfiable range (every first byte past the end, a zero suffix, an empty file): 416
//!   with `Content-Range: bytes */SIZE`;
//! - else the satisfiable ranges, sorted and with overlapping or adjacent ones merged (§14.2
//!   allows coalescing). The parts then never overlap, so their sum never exceeds the file's
//!   size: a request for the same bytes many times over (CVE-2011-3192, "Apache Killer") costs
//!   no more than the file.

/// The most ranges Quill ever serves in one response (`max_ranges` is clamped to it).
pub const MAX_PARTS: usize = 16;

/// A satisfiable range of bytes, both ends included (`start <= end < size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// The first byte's offset.
    pub start: u64,
    /// The last byte's offset (included).
    pub end: u64,
}

impl ByteRange {
    /// The number of bytes in the range.
    pub fn len(&self) -> u64 {
        self.end - self.start + 1
    }

    /// Never true (a range holds at least one byte); for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// Up to [`MAX_PARTS`] ranges, sorted, non-overlapping and non-adjacent, on the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ranges {
    parts: [ByteRange; MAX_PARTS],
    len: u8,
}

impl Ranges {
    /// The ranges, in ascending order.
    pub fn as_slice(&self) -> &[ByteRange] {
        &self.parts[..usize::from(self.len)]
    }

    /// The sum of the ranges' lengths (at most the file's size).
    pub fn total_len(&self) -> u64 {
        self.as_slice().iter().map(ByteRange::len).sum()
    }

    fn push(&mut self, r: ByteRange) {
        self.parts[usize::from(self.len)] = r;
        self.len += 1;
    }

    /// Sorts by start (insertion sort: at most 16 parts) and merges overlapping or adjacent
    /// ranges.
    fn coalesce(&mut self) {
        let n = usize::from(self.len);
        let parts = &mut self.parts[..n];
        for i in 1..n {
            let mut j = i;
            while j > 0 && parts[j - 1].start > parts[j].start {
                parts.swap(j - 1, j);
                j -= 1;
            }
        }
        let mut out = 0;
        for i in 1..n {
            let r = parts[i];
            if r.start <= parts[out].end.saturating_add(1) {
                parts[out].end = parts[out].end.max(r.end);
            } else {
                out += 1;
                parts[out] = r;
            }
        }
        self.len = if n == 0 { 0 } else { out as u8 + 1 };
    }
}

/// What to do with a request's Range field.
// The ranges live on the stack by design (no allocation per request); the value is made once
// per request and moved once, so its 272 bytes cost nothing a Box would save.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeOutcome {
    /// Serve the whole file (200): the field is invalid, of another unit, asks for too many
    /// ranges, or ranges are off.
    Full,
    /// Serve these parts (206): one as a single body, several as `multipart/byteranges`.
    Partial(Ranges),
    /// 416 Range Not Satisfiable, with [`unsatisfied`]'s `Content-Range`.
    Unsatisfiable,
}

/// Reads a Range field value against a file of `size` bytes, allowing at most `max_ranges`
/// satisfiable ranges (clamped to [`MAX_PARTS`]; 0: ranges off).
pub fn parse(value: &[u8], size: u64, max_ranges: usize) -> RangeOutcome {
    let max = max_ranges.min(MAX_PARTS);
    if max == 0 {
        return RangeOutcome::Full;
    }
    let Some(set) = strip_unit(value) else {
        return RangeOutcome::Full;
    };
    let mut ranges = Ranges {
        parts: [ByteRange { start: 0, end: 0 }; MAX_PARTS],
        len: 0,
    };
    let mut specs = 0usize;
    for member in set.split(|&b| b == b',') {
        let member = super::trim(member);
        if member.is_empty() {
            continue; // `#rule`: empty list members are allowed
        }
        specs += 1;
        let Some(spec) = read_spec(member) else {
            return RangeOutcome::Full;
        };
        if let Some(r) = resolve(spec, size) {
            if usize::from(ranges.len) == max {
                return RangeOutcome::Full;
            }
            ranges.push(r);
        }
    }
    match (specs, ranges.len) {
        (0, _) => RangeOutcome::Full, // `bytes=` with no range: invalid
        (_, 0) => RangeOutcome::Unsatisfiable,
        _ => {
            ranges.coalesce();
            RangeOutcome::Partial(ranges)
        }
    }
}

/// `bytes=` (the unit case-insensitive, §14.1) stripped from the value, or `None`.
fn strip_unit(value: &[u8]) -> Option<&[u8]> {
    let v = super::trim(value);
    let (unit, rest) = v.split_at(v.iter().position(|&b| b == b'=')?);
    unit.eq_ignore_ascii_case(b"bytes").then_some(&rest[1..])
}

/// One range-spec as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spec {
    /// `first-` or `first-last`.
    From(u64, Option<u64>),
    /// `-suffix`: the last `suffix` bytes.
    Suffix(u64),
}

/// Reads `first-[last]` or `-suffix`; `None` if invalid (including `last < first`, §14.1.1).
/// Numbers too large for a u64 saturate (a first byte past any file, a last byte at its end).
fn read_spec(s: &[u8]) -> Option<Spec> {
    let dash = s.iter().position(|&b| b == b'-')?;
    let (first, last) = (&s[..dash], &s[dash + 1..]);
    match (first.is_empty(), last.is_empty()) {
        (true, true) => None,
        (true, false) => Some(Spec::Suffix(digits(last)?)),
        (false, true) => Some(Spec::From(digits(first)?, None)),
        (false, false) => {
            let (f, l) = (digits(first)?, digits(last)?);
            (l >= f).then_some(Spec::From(f, Some(l)))
        }
    }
}

/// `1*DIGIT`, saturating at `u64::MAX`.
fn digits(d: &[u8]) -> Option<u64> {
    if d.is_empty() {
        return None;
    }
    d.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit()
            .then(|| n.saturating_mul(10).saturating_add(u64::from(b - b'0')))
    })
}

/// The bytes a spec selects of a file of `size` bytes, or `None` if it selects none (§14.1.1:
/// a first byte at or past the end, or a suffix of zero).
fn resolve(spec: Spec, size: u64) -> Option<ByteRange> {
    let last = size.checked_sub(1)?;
    match spec {
        Spec::From(first, _) if first > last => None,
        Spec::From(first, end) => Some(ByteRange {
            start: first,
            end: end.map_or(last, |e| e.min(last)),
        }),
        Spec::Suffix(0) => None,
        Spec::Suffix(n) => Some(ByteRange {
            start: size.saturating_sub(n),
            end: last,
        }),
    }
}

/// The longest `Content-Range` value: `bytes ` and three 20-digit numbers with `-` and `/`.
pub const CONTENT_RANGE_MAX: usize = 6 + 20 + 1 + 20 + 1 + 20;

/// A `Content-Range` field value on the stack.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ContentRange {
    buf: [u8; CONTENT_RANGE_MAX],
    len: u8,
}

impl ContentRange {
    /// The value's bytes (`bytes 0-499/1234`).
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }

    fn push(&mut self, s: &[u8]) {
        let at = usize::from(self.len);
        self.buf[at..at + s.len()].copy_from_slice(s);
        self.len += s.len() as u8;
    }

    fn push_u64(&mut self, n: u64) {
        let mut buf = [0; crate::decimal::MAX_DIGITS];
        self.push(crate::decimal::digits(n, &mut buf));
    }

    fn new() -> Self {
        let mut c = ContentRange {
            buf: [0; CONTENT_RANGE_MAX],
            len: 0,
        };
        c.push(b"bytes ");
        c
    }
}

impl std::fmt::Debug for ContentRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// `bytes START-END/SIZE`, the `Content-Range` of a 206 part (§14.4).
pub fn content_range(r: ByteRange, size: u64) -> ContentRange {
    let mut c = ContentRange::new();
    c.push_u64(r.start);
    c.push(b"-");
    c.push_u64(r.end);
    c.push(b"/");
    c.push_u64(size);
    c
}

/// `bytes */SIZE`, the `Content-Range` of a 416 (§14.4, §15.5.17).
pub fn unsatisfied(size: u64) -> ContentRange {
    let mut c = ContentRange::new();
    c.push(b"*/");
    c.push_u64(size);
    c
}

#[cfg(test)]
#[path = "range_tests.rs"]
mod tests;
