//! Entity tags (RFC 9110 §8.8.3): the strong validator Quill gives a file, the two comparisons
//! (§8.8.3.2) and the entity-tag lists of `If-Match` and `If-None-Match` (§13.1.1, §13.1.2).
//!
//! A file's tag is `"<mtime>-<size>"` in lowercase hex, the modification time in nanoseconds since
//! the epoch, plus `-br`, `-zst` or `-gz` for a precompressed variant (a different representation,
//! so a different tag). No inode number: two machines serving the same deployment give the same
//! tag, so a cache in front of both sees one representation.

use super::coding::Coding;
use super::{trim, trim_start};

/// The longest tag [`strong`] makes: two quotes, a sign, 24 hex digits of nanoseconds (an `i64` of
/// seconds times 10⁹ fits in 93 bits), a dash, 16 hex digits of size, and `-zst`.
pub const MAX_LEN: usize = 2 + 1 + 24 + 1 + 16 + 4;

/// A strong entity tag of a file, quotes included (`"18f3a2b4c5d6e7f8-1a2b"`), on the stack.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Etag {
    buf: [u8; MAX_LEN],
    len: u8,
}

impl Etag {
    /// The tag as it goes in an `ETag` field, quotes included.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }

    /// The tag as an [`EntityTag`] (strong), to compare with a client's.
    pub fn tag(&self) -> EntityTag<'_> {
        let b = self.as_bytes();
        EntityTag {
            weak: false,
            opaque: &b[1..b.len() - 1],
        }
    }

    fn push(&mut self, byte: u8) {
        self.buf[usize::from(self.len)] = byte;
        self.len += 1;
    }

    /// Appends `n` in lowercase hex without leading zeros (`0` for zero).
    fn push_hex(&mut self, n: u128) {
        let digits = (128 - n.leading_zeros()).div_ceil(4).max(1);
        for i in (0..digits).rev() {
            self.push(b"0123456789abcdef"[((n >> (i * 4)) & 0xf) as usize]);
        }
    }
}

impl std::fmt::Debug for Etag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Etag({})", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// The strong entity tag of a file modified at `mtime_s` seconds and `mtime_ns` nanoseconds
/// since the epoch (as `stat` gives them), `size` bytes long, stored in `coding` (`None`: the file
/// itself). A time before the epoch is written with a leading `-`; `mtime_ns` past 999,999,999
/// counts as 999,999,999.
pub fn strong(mtime_s: i64, mtime_ns: u32, size: u64, coding: Option<Coding>) -> Etag {
    let mut e = Etag {
        buf: [0; MAX_LEN],
        len: 0,
    };
    let ns = i128::from(mtime_s) * 1_000_000_000 + i128::from(mtime_ns.min(999_999_999));
    e.push(b'"');
    if ns < 0 {
        e.push(b'-');
    }
    e.push_hex(ns.unsigned_abs());
    e.push(b'-');
    e.push_hex(u128::from(size));
    if let Some(c) = coding {
        e.push(b'-');
        let suffix = &c.file_suffix().as_bytes()[1..];
        suffix.iter().for_each(|&b| e.push(b));
    }
    e.push(b'"');
    e
}

/// An entity tag as read from a field: weak or not, and the opaque tag without its quotes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntityTag<'a> {
    /// The tag had the `W/` prefix.
    pub weak: bool,
    /// The characters between the quotes.
    pub opaque: &'a [u8],
}

/// Strong comparison (RFC 9110 §8.8.3.2): neither tag weak and the opaque tags identical.
pub fn strong_eq(a: EntityTag<'_>, b: EntityTag<'_>) -> bool {
    !a.weak && !b.weak && a.opaque == b.opaque
}

/// Weak comparison (RFC 9110 §8.8.3.2): the opaque tags identical, weak or not.
pub fn weak_eq(a: EntityTag<'_>, b: EntityTag<'_>) -> bool {
    a.opaque == b.opaque
}

/// Which comparison a list match uses: `If-Match` strong (§13.1.1), `If-None-Match` weak
/// (§13.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    /// [`strong_eq`].
    Strong,
    /// [`weak_eq`].
    Weak,
}

/// Whether an `If-Match` or `If-None-Match` field value matches the current representation's
/// tag: `*` matches (the file exists), else any member of the comma-separated list that compares
/// equal. A malformed value matches nothing (`If-Match` then fails with 412, `If-None-Match` then
/// lets the request through: both the safe side).
pub fn list_matches(value: &[u8], current: EntityTag<'_>, cmp: Comparison) -> bool {
    if trim(value) == b"*" {
        return true;
    }
    let mut found = false;
    let mut rest = value;
    loop {
        match next_tag(rest) {
            Next::End => return found,
            Next::Malformed => return false,
            Next::Tag(tag, after) => {
                found |= match cmp {
                    Comparison::Strong => strong_eq(tag, current),
                    Comparison::Weak => weak_eq(tag, current),
                };
                rest = after;
            }
        }
    }
}

/// Whether a value is a valid `If-Match`/`If-None-Match` value: `*` or a list of entity tags.
pub fn is_valid_list(value: &[u8]) -> bool {
    if trim(value) == b"*" {
        return true;
    }
    let mut rest = value;
    loop {
        match next_tag(rest) {
            Next::End => return true,
            Next::Malformed => return false,
            Next::Tag(_, after) => rest = after,
        }
    }
}

/// Reads one entity tag as a whole field value (`ETag`, or `If-Range` when it starts with a quote
/// or `W/`): surrounding whitespace allowed, nothing else.
pub fn parse(value: &[u8]) -> Option<EntityTag<'_>> {
    let (tag, after) = read_tag(trim(value))?;
    after.is_empty().then_some(tag)
}

/// The result of reading a list up to its next member.
enum Next<'a> {
    Tag(EntityTag<'a>, &'a [u8]),
    End,
    Malformed,
}

/// Skips empty members and whitespace (`#rule` allows `, ,`), then reads one tag and the comma or
/// end that must follow it.
fn next_tag(list: &[u8]) -> Next<'_> {
    let start = list
        .iter()
        .position(|&b| !matches!(b, b' ' | b'\t' | b','))
        .unwrap_or(list.len());
    if start == list.len() {
        return Next::End;
    }
    let Some((tag, after)) = read_tag(&list[start..]) else {
        return Next::Malformed;
    };
    let after = trim_start(after);
    match after.first() {
        None | Some(b',') => Next::Tag(tag, after),
        Some(_) => Next::Malformed,
    }
}

/// Reads `[W/]"etagc*"` at the start of `s`; returns the tag and what follows.
fn read_tag(s: &[u8]) -> Option<(EntityTag<'_>, &[u8])> {
    let (weak, s) = match s.strip_prefix(b"W/") {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let s = s.strip_prefix(b"\"")?;
    let end = s.iter().position(|&b| b == b'"')?;
    let opaque = &s[..end];
    // etagc = %x21 / %x23-7E / obs-text
    if !opaque
        .iter()
        .all(|&b| b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80)
    {
        return None;
    }
    Some((EntityTag { weak, opaque }, &s[end + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tag(s: &str) -> EntityTag<'_> {
        parse(s.as_bytes()).unwrap()
    }

    #[test]
    fn a_file_tag_is_hex_nanoseconds_and_hex_size() {
        let e = strong(1_700_000_000, 123, 4096, None);
        let ns = 1_700_000_000u128 * 1_000_000_000 + 123;
        assert_eq!(e.as_bytes(), format!("\"{ns:x}-1000\"").as_bytes());
        assert_eq!(strong(0, 0, 0, None).as_bytes(), b"\"0-0\"");
        assert_eq!(strong(-1, 0, 1, None).as_bytes(), b"\"-3b9aca00-1\"");
    }

    #[test]
    fn a_precompressed_variant_has_its_own_tag() {
        let plain = strong(5, 0, 10, None);
        assert_eq!(
            strong(5, 0, 10, Some(Coding::Br)).as_bytes(),
            b"\"12a05f200-a-br\""
        );
        assert_eq!(
            strong(5, 0, 10, Some(Coding::Gzip)).as_bytes(),
            b"\"12a05f200-a-gz\""
        );
        assert_eq!(
            strong(5, 0, 10, Some(Coding::Zstd)).as_bytes(),
            b"\"12a05f200-a-zst\""
        );
        assert_ne!(plain, strong(5, 0, 10, Some(Coding::Br)));
    }

    #[test]
    fn the_longest_tag_fits() {
        let e = strong(i64::MIN, 999_999_999, u64::MAX, Some(Coding::Zstd));
        assert!(e.as_bytes().len() <= MAX_LEN);
        assert_eq!(parse(e.as_bytes()), Some(e.tag()));
        let e = strong(i64::MAX, 999_999_999, u64::MAX, Some(Coding::Zstd));
        assert_eq!(parse(e.as_bytes()), Some(e.tag()));
    }

    /// RFC 9110 §8.8.3.2's table.
    #[test]
    fn comparisons_follow_the_rfc_table() {
        let cases = [
            ("W/\"1\"", "W/\"1\"", false, true),
            ("W/\"1\"", "W/\"2\"", false, false),
            ("W/\"1\"", "\"1\"", false, true),
            ("\"1\"", "\"1\"", true, true),
        ];
        for (a, b, strong, weak) in cases {
            assert_eq!(strong_eq(tag(a), tag(b)), strong, "{a} {b}");
            assert_eq!(weak_eq(tag(a), tag(b)), weak, "{a} {b}");
        }
    }

    #[test]
    fn lists_match_any_member_with_the_chosen_comparison() {
        let cur = tag("\"xyzzy\"");
        let m = |v: &str, c| list_matches(v.as_bytes(), cur, c);
        assert!(m("*", Comparison::Strong));
        assert!(m(" * ", Comparison::Weak));
        assert!(m("\"xyzzy\"", Comparison::Strong));
        assert!(m("\"a\", \"xyzzy\", \"r2d2xxxx\"", Comparison::Strong));
        assert!(!m("W/\"xyzzy\"", Comparison::Strong));
        assert!(m("W/\"xyzzy\"", Comparison::Weak));
        assert!(m("W/\"a\",W/\"xyzzy\"", Comparison::Weak));
        assert!(m(", ,\"xyzzy\" ,", Comparison::Strong));
        assert!(!m("\"a\"", Comparison::Weak));
        assert!(!m("", Comparison::Weak));
    }

    #[test]
    fn a_malformed_list_matches_nothing() {
        let cur = tag("\"xyzzy\"");
        for v in [
            "xyzzy",
            "\"xyzzy\" junk",
            "\"xyzzy\", bad",
            "\"xyzzy",
            "w/\"xyzzy\"",
            "\"xy zzy\"",
            "*, \"xyzzy\"",
            "\"xyzzy\"\"a\"",
        ] {
            assert!(!list_matches(v.as_bytes(), cur, Comparison::Weak), "{v}");
            assert!(!is_valid_list(v.as_bytes()), "{v}");
        }
    }

    #[test]
    fn a_comma_inside_quotes_is_part_of_the_tag() {
        let cur = tag("\"a,b\"");
        assert!(list_matches(b"\"x\", \"a,b\"", cur, Comparison::Strong));
        assert!(!list_matches(b"\"a\"", cur, Comparison::Strong));
    }

    proptest! {
        #[test]
        fn every_file_tag_parses_back_strong(s in any::<i64>(), ns in any::<u32>(), size in any::<u64>(), c in 0usize..4) {
            let coding = Coding::ALL.get(c).copied();
            let e = strong(s, ns, size, coding);
            prop_assert_eq!(parse(e.as_bytes()), Some(e.tag()));
            prop_assert!(list_matches(e.as_bytes(), e.tag(), Comparison::Strong));
        }

        #[test]
        fn different_files_have_different_tags(a in any::<(i64, u32, u64)>(), b in any::<(i64, u32, u64)>()) {
            let ea = strong(a.0, a.1 % 1_000_000_000, a.2, None);
            let eb = strong(b.0, b.1 % 1_000_000_000, b.2, None);
            prop_assert_eq!(ea == eb, (a.0, a.1 % 1_000_000_000, a.2) == (b.0, b.1 % 1_000_000_000, b.2));
        }

        #[test]
        fn arbitrary_lists_never_panic_and_match_only_when_valid(v in proptest::collection::vec(any::<u8>(), 0..64)) {
            let cur = EntityTag { weak: false, opaque: b"a" };
            if list_matches(&v, cur, Comparison::Weak) {
                prop_assert!(is_valid_list(&v));
            }
        }
    }
}
