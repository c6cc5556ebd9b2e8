//! The byte classes of HTTP/1's grammar (RFC 9110 and 9112): token characters, request-target
//! bytes, field-value bytes, whitespace, `Host` bytes (and a whole `host[:port]`) and controls,
//! each a table lookup (one load per byte on the hot loops), and a test of eight value bytes at
//! once. Shared by the head parser, the body's trailer reader and the rewriter; it imports
//! nothing of theirs.

/// Whether one of the eight bytes of `word` is below 0x20 (HTAB included) or is 0x7f: every
/// other byte is a value byte. Exact: a borrow can only spread from a byte that is itself one.
pub(super) fn has_control(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below_space = word.wrapping_sub(0x20 * ONES) & !word;
    let del = word ^ (0x7f * ONES);
    let is_del = del.wrapping_sub(ONES) & !del;
    (below_space | is_del) & HIGH != 0
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

/// A byte of a `Host` value: reg-name, IP literal and port characters (RFC 3986).
pub(super) fn is_host_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=%:[]".contains(&b)
}

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
    let reg_name = |h: &[u8]| {
        !h.is_empty()
            && h.iter()
                .all(|&b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b))
    };
    (host.first() == Some(&b'[') || reg_name(host))
        && match port.split_first() {
            None => true,
            Some((b':', digits)) => digits.len() <= 5 && digits.iter().all(u8::is_ascii_digit),
            Some(_) => false,
        }
}

#[cfg(test)]
mod tests {
    use super::{has_control, is_value_byte};

    #[test]
    fn has_control_finds_exactly_the_bytes_that_are_not_value_bytes_or_are_htab() {
        for b in 0..=255u8 {
            for at in 0..8 {
                for fill in [b'a', 0x80, 0xff, b' ', b'~'] {
                    let mut word = [fill; 8];
                    word[at] = b;
                    let want = !is_value_byte(b) || b == b'\t';
                    assert_eq!(
                        has_control(u64::from_le_bytes(word)),
                        want,
                        "{b:#x} at {at}"
                    );
                }
            }
        }
    }
}
