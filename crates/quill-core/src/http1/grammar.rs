//! The byte classes of HTTP/1's grammar (RFC 9110 and 9112): token characters, request-target
//! bytes, field-value bytes, whitespace, `Host` bytes (and a whole `host[:port]`) and controls,
//! each a table lookup (one load per byte on the hot loops), and a test of eight value bytes at
//! once. Shared by the head parser, the body's trailer reader and the rewriter; it imports
//! nothing of theirs.

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The bytes of `word` (little-endian: the first byte lowest) that are below 0x20 (HTAB
/// included) or are 0x7f, each as its high bit. The lowest bit set is exact: a borrow can only
/// spread from a byte that is itself one, towards the later bytes.
pub(super) fn control_bits(word: u64) -> u64 {
    let below_space = word.wrapping_sub(0x20 * ONES) & !word;
    let del = word ^ (0x7f * ONES);
    let is_del = del.wrapping_sub(ONES) & !del;
    (below_space | is_del) & HIGH
}

/// The bytes of `word` (little-endian) that are not an ASCII letter, digit or `-`, the bytes of
/// almost every field name, each as its high bit. Exact for every byte: each test works within
/// a byte's seven low bits, where no sum carries into the next byte.
pub(super) fn not_name_bits(word: u64) -> u64 {
    let low = word & !HIGH;
    // Each byte's high bit: set when the byte (its low seven bits) is at least `lo`, or above `hi`.
    let at_least = |w: u64, lo: u8| (w + u64::from(0x80 - lo) * ONES) & HIGH;
    let above = |w: u64, hi: u8| (w + u64::from(0x7f - hi) * ONES) & HIGH;
    // Upper case folded to lower: only the letters land in `a..=z`.
    let folded = low | (0x20 * ONES);
    let letter = at_least(folded, b'a') & !above(folded, b'z');
    let digit = at_least(low, b'0') & !above(low, b'9');
    let dash = !((low ^ (u64::from(b'-') * ONES)) + 0x7f * ONES) & HIGH;
    (!(letter | digit | dash) & HIGH) | (word & HIGH)
}

pub(super) fn is_control(b: u8) -> bool {
    b < 0x20 || b == 0x7f
}

/// A table of the bytes of a class, for one load per byte on the hot loops.
macro_rules! table {
    ($class:ident) => {{
        let mut t = [false; 256];
        let mut i = 0;
        while i < 256 {
            t[i] = $class(i as u8);
            i += 1;
        }
        t
    }};
}

const fn tchar(b: u8) -> bool {
    matches!(b, b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' | b'!' | b'#' | b'$' | b'%' | b'&'
        | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~')
}

/// A byte of a request target: visible ASCII but `#` (a fragment is never sent), and `"`, `<`,
/// `>`, `\\` and backquote, which no client sends unescaped and some servers read differently.
const fn target_byte(b: u8) -> bool {
    matches!(b, 0x21..=0x7e) && !matches!(b, b'#' | b'"' | b'<' | b'>' | b'\\' | b'`')
}

/// A byte of a field value or reason phrase: HTAB, SP, visible ASCII, obs-text.
const fn value_byte(b: u8) -> bool {
    matches!(b, b'\t' | b' '..=b'~' | 0x80..=0xff)
}

static TCHAR: [bool; 256] = table!(tchar);
static TARGET: [bool; 256] = table!(target_byte);
static VALUE: [bool; 256] = table!(value_byte);

/// `tchar` of RFC 9110 §5.6.2.
pub(crate) fn is_tchar(b: u8) -> bool {
    TCHAR[usize::from(b)]
}

pub(super) fn is_target_byte(b: u8) -> bool {
    TARGET[usize::from(b)]
}

pub(super) fn is_value_byte(b: u8) -> bool {
    VALUE[usize::from(b)]
}

pub(super) fn is_space(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// RFC 9110 §7.6.1's hop-by-hop fields.
pub(super) fn is_fixed_hop(name: &[u8]) -> bool {
    // Most names are none of these: their length says so at once.
    if !matches!(name.len(), 2 | 7 | 10 | 16 | 17) {
        return false;
    }
    [
        &b"connection"[..],
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"transfer-encoding",
        b"upgrade",
    ]
    .iter()
    .any(|h| name.eq_ignore_ascii_case(h))
}

/// A field that is not `Content-Length` or `Transfer-Encoding` but reads as one to a server
/// that folds `_` into `-` or ignores them (`Content_Length`, `Transfer---Encoding`): never
/// passed on, so no server behind Quill can frame a message differently from Quill (the
/// desync corpus's Ambiguous cases).
pub(super) fn is_framing_lookalike(name: &[u8]) -> bool {
    // 13 letters at least, and a name that starts with a letter starts with `c` or `t`.
    let first = name.first().map(u8::to_ascii_lowercase);
    if name.len() < 13 || !matches!(first, Some(b'c' | b't' | b'-' | b'_')) {
        return false;
    }
    if name.eq_ignore_ascii_case(b"content-length")
        || name.eq_ignore_ascii_case(b"transfer-encoding")
    {
        return false;
    }
    let same_letters = |word: &[u8]| {
        let mut letters = name.iter().filter(|&&b| b != b'-' && b != b'_');
        word.iter()
            .all(|w| letters.next().is_some_and(|b| b.eq_ignore_ascii_case(w)))
            && letters.next().is_none()
    };
    same_letters(b"contentlength") || same_letters(b"transferencoding")
}

/// Whether field name `name` is `other` without case, an `_` of either standing for a `-`
/// (as CGI, WSGI and PHP servers read names).
pub(super) fn same_name(name: &[u8], other: &[u8]) -> bool {
    let fold = |b: u8| {
        if b == b'_' {
            b'-'
        } else {
            b.to_ascii_lowercase()
        }
    };
    name.len() == other.len() && name.iter().zip(other).all(|(&a, &b)| fold(a) == fold(b))
}

/// A byte of a `Host` value: reg-name, IP literal and port characters (RFC 3986).
pub(super) fn is_host_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=%:[]".contains(&b)
}

/// The bytes of a reg-name (RFC 3986 §3.2.2: unreserved and sub-delims; percent signs are not
/// taken), looked up instead of compared one by one.
const REG_NAME: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let extra = b"-._~!$&'()*+,;=";
    let mut i = 0;
    while i < extra.len() {
        table[extra[i] as usize] = true;
        i += 1;
    }
    table
};

/// `host [":" port]` (RFC 3986 §3.2.2-3): a non-empty reg-name of unreserved and sub-delims
/// bytes (no percent-encoding: a name that could be read two ways), or an IP literal in
/// brackets; a port of at most 5 digits (possibly none). No userinfo.
pub(super) fn is_host_and_port(a: &[u8]) -> bool {
    let (host, port) = if a.first() == Some(&b'[') {
        let Some(close) = a.iter().position(|&b| b == b']') else {
            return false;
        };
        let inner = &a[1..close];
        let ok = !inner.is_empty()
            && inner
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || b":.-_~!$&'()*+,;=".contains(&b));
        if !ok {
            return false;
        }
        (&a[..=close], &a[close + 1..])
    } else {
        let end = a.iter().position(|&b| b == b':').unwrap_or(a.len());
        (&a[..end], &a[end..])
    };
    let reg_name = |h: &[u8]| !h.is_empty() && h.iter().all(|&b| REG_NAME[usize::from(b)]);
    (host.first() == Some(&b'[') || reg_name(host))
        && match port.split_first() {
            None => true,
            Some((b':', digits)) => digits.len() <= 5 && digits.iter().all(u8::is_ascii_digit),
            Some(_) => false,
        }
}

#[cfg(test)]
mod tests {
    use super::{control_bits, is_tchar, is_value_byte, not_name_bits};

    #[test]
    fn control_bits_find_exactly_the_bytes_that_are_not_value_bytes_or_are_htab() {
        for b in 0..=255u8 {
            for at in 0..8 {
                for fill in [b'a', 0x80, 0xff, b' ', b'~'] {
                    let mut word = [fill; 8];
                    word[at] = b;
                    let want = !is_value_byte(b) || b == b'\t';
                    assert_eq!(
                        control_bits(u64::from_le_bytes(word)) != 0,
                        want,
                        "{b:#x} at {at}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_lowest_control_bit_is_the_first_byte_that_is_not_a_value_byte_or_is_htab() {
        let stops = |b: u8| !is_value_byte(b) || b == b'\t';
        for b in 0..=255u8 {
            for c in [0u8, b'\t', 0x1f, 0x7f, b'a', 0x80, 0xff] {
                for at in 0..8 {
                    for later in at + 1..8 {
                        let mut word = [b' '; 8];
                        word[at] = b;
                        word[later] = c;
                        let first = word.iter().position(|&x| stops(x)).map_or(8, |i| i as u32);
                        let bits = control_bits(u64::from_le_bytes(word));
                        assert_eq!(bits.trailing_zeros() / 8, first, "{b:#x} at {at}, {c:#x}");
                    }
                }
            }
        }
    }

    #[test]
    fn name_bits_mark_exactly_the_bytes_other_than_letters_digits_and_dashes() {
        for b in 0..=255u8 {
            for at in 0..8 {
                for fill in [b'a', b'Z', b'0', b'-', b'_', 0x80, 0xff, b':'] {
                    let mut word = [fill; 8];
                    word[at] = b;
                    let bits = not_name_bits(u64::from_le_bytes(word));
                    for (i, &x) in word.iter().enumerate() {
                        let common = x.is_ascii_alphanumeric() || x == b'-';
                        assert_eq!(bits >> (i * 8 + 7) & 1 == 0, common, "{x:#x} at {i}");
                        // Every byte of the class is a token byte.
                        assert!(!common || is_tchar(x));
                    }
                }
            }
        }
    }

    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[test]
    fn sixteen_byte_masks_agree_with_the_byte_classes() {
        use crate::sys::simd as wide;
        for b in 0..=255u8 {
            for at in 0..16 {
                for fill in [b'a', b'Z', b'0', b'-', b'_', b' ', b'\t', 0x80, 0xff, b':'] {
                    let mut bytes = [fill; 17];
                    bytes[at + 1] = b;
                    let control = wide::control_bits(&bytes, 1).unwrap();
                    let not_name = wide::not_name_bits(&bytes, 1).unwrap();
                    for (i, &x) in bytes[1..].iter().enumerate() {
                        let stops = !is_value_byte(x) || x == b'\t';
                        assert_eq!(control >> i & 1 == 1, stops, "{x:#x} at {i}");
                        let common = x.is_ascii_alphanumeric() || x == b'-';
                        assert_eq!(not_name >> i & 1 == 0, common, "{x:#x} at {i}");
                    }
                }
            }
        }
        assert_eq!(wide::control_bits(&[b'a'; 16], 1), None);
    }
}
