//! Request paths in normal form, for matching routes the way a server that resolves the path
//! would read it (E13, docs/design.md#routes-match-normal-paths): `//admin`, `/%61dmin`, `/./admin`
//! and `/x/../admin` are all
//! `/admin`.
//!
//! The normal form, as nginx matches `location`: percent-encoded unreserved bytes (RFC 3986
//! §2.3: letters, digits, `-._~`) and `%2F` (a slash, as nginx reads it; so `/x%2F..%2Fadmin`
//! is `/admin`) are decoded, every other percent-encoding is kept as sent (`%20`, `%3B`, `%C3`);
//! empty segments (`//`) are dropped; `.` segments are removed and `..` segments remove the
//! segment before them (RFC 3986 §5.2.4); a path that ends in a removed `.` or `..` segment, or
//! in `/`, keeps its final `/`. A `..` above the root, a `%` that is not followed by two hex
//! digits and `%00` are refused ([`PathError`]: Quill answers 400, as nginx does; so every `%`
//! of a normal path starts an escape that stays, and normalising twice changes nothing). Case is kept (`/ADMIN` is not `/admin`), and so is every other byte
//! (`;` has no meaning here).
//!
//! Pure and without allocation: [`is_normal`] says in one pass whether a path is normal already
//! (the usual case, matched as it is), and [`normalize_into`] writes the normal form into a
//! buffer the caller owns; it is never longer than the path.

/// Why a path has no normal form (the request is refused with 400, as nginx does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathError {
    /// A `..` segment climbs above the root (`/../x`, `/a/../../x`).
    AboveRoot,
    /// A `%` not followed by two hex digits, `%00`, or an escaped overlong UTF-8 form.
    BadEscape,
    /// The output buffer is shorter than the path.
    NoRoom,
}

/// The path of a request target without its query: an origin-form target up to `?`; the part
/// after an absolute-form target's authority (`/` when it has none); empty for `*` and for an
/// authority-form target.
pub fn target_path(target: &[u8]) -> &[u8] {
    let before_query = |t: &[u8]| t.iter().position(|&b| b == b'?').unwrap_or(t.len());
    if target.first() == Some(&b'/') {
        return &target[..before_query(target)];
    }
    let Some(i) = target.windows(3).position(|w| w == b"://") else {
        return b"";
    };
    let rest = &target[i + 3..];
    let start = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(rest.len());
    let tail = &rest[start..];
    let path = &tail[..before_query(tail)];
    if path.is_empty() {
        b"/"
    } else {
        path
    }
}

/// The byte a `%XY` escape stands for, if `XY` are two hex digits.
fn decoded(hi: u8, lo: u8) -> Option<u8> {
    let hex = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    };
    Some(hex(hi)? << 4 | hex(lo)?)
}

/// A byte that a percent-encoding of is decoded: unreserved (RFC 3986 §2.3), or `/`.
fn decodes(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/')
}

/// Whether the escape at `path[i]`, which decodes to `lead`, starts an overlong (or out of range)
/// UTF-8 form: `lead` and the escaped continuation byte after it together spell nothing valid
/// UTF-8 allows (RFC 3629 §3), only another way to write a shorter sequence (`%C0%AF` is `/`).
/// A lone high escape (`%C0`, a Latin-1 `À`) is not one.
fn overlong(path: &[u8], i: usize, lead: u8) -> bool {
    let next = match path.get(i + 3..i + 6) {
        Some([b'%', h, l]) => decoded(*h, *l),
        _ => None,
    };
    let Some(next) = next else { return false };
    match lead {
        0xc0 | 0xc1 | 0xf5..=0xff => (0x80..=0xbf).contains(&next),
        0xe0 => (0x80..=0x9f).contains(&next),
        0xf0 => (0x80..=0x8f).contains(&next),
        _ => false,
    }
}

/// Whether `path` is in normal form already: nothing to decode, no empty segment, no `.` or
/// `..` segment. A path that does not start with `/` (`*`, an authority) is left as it is, so
/// it counts as normal.
pub fn is_normal(path: &[u8]) -> bool {
    if path.first() != Some(&b'/') {
        return true;
    }
    let mut i = 0;
    while i < path.len() {
        match path[i] {
            b'%' => {
                let escape = path.get(i + 1).zip(path.get(i + 2));
                match escape.and_then(|(&h, &l)| decoded(h, l)) {
                    Some(d) if d != 0 && !decodes(d) && !overlong(path, i, d) => i += 2,
                    _ => return false,
                }
            }
            b'/' => {
                // The segment that starts here: empty, `.` or `..`?
                let seg = &path[i + 1..];
                let end = seg.iter().position(|&b| b == b'/').unwrap_or(seg.len());
                let seg = &seg[..end];
                let last = i + 1 + end == path.len();
                if (seg.is_empty() && !last) || seg == b"." || seg == b".." {
                    return false;
                }
            }
            _ => {}
        }
        i += 1;
    }
    true
}

/// Writes the normal form of `path` into `out` and returns its length (at most `path.len()`;
/// `out` must have that room). A path that does not start with `/` is copied as it is.
pub fn normalize_into(path: &[u8], out: &mut [u8]) -> Result<usize, PathError> {
    let out = out.get_mut(..path.len()).ok_or(PathError::NoRoom)?;
    if path.first() != Some(&b'/') {
        out.copy_from_slice(path);
        return Ok(path.len());
    }
    // 1. Decode the escapes of unreserved bytes and `/` (never longer).
    let mut len = 0;
    let mut i = 0;
    while i < path.len() {
        let b = path[i];
        if b == b'%' {
            let escape = path.get(i + 1).zip(path.get(i + 2));
            match escape.and_then(|(&h, &l)| decoded(h, l)) {
                None | Some(0) => return Err(PathError::BadEscape),
                Some(d) if overlong(path, i, d) => return Err(PathError::BadEscape),
                Some(d) if decodes(d) => {
                    out[len] = d;
                    len += 1;
                    i += 3;
                    continue;
                }
                Some(_) => {}
            }
        }
        out[len] = b;
        len += 1;
        i += 1;
    }
    // 2. Segments, in place: `w` is the end of the output, never past the segment being read.
    let mut w = 0;
    let mut r = 1;
    let mut trailing = false;
    while r <= len {
        let end = out[r..len]
            .iter()
            .position(|&b| b == b'/')
            .map_or(len, |e| r + e);
        let last = end == len;
        match &out[r..end] {
            b"" | b"." => trailing = last,
            b".." => {
                // Drop the output's last segment.
                if w == 0 {
                    return Err(PathError::AboveRoot);
                }
                w = out[..w].iter().rposition(|&b| b == b'/').unwrap_or(0);
                trailing = last;
            }
            _ => {
                out[w] = b'/';
                out.copy_within(r..end, w + 1);
                w += 1 + (end - r);
                trailing = false;
            }
        }
        r = end + 1;
    }
    if w == 0 || trailing {
        out[w] = b'/';
        w += 1;
    }
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normal(path: &str) -> Result<String, PathError> {
        let mut out = vec![0u8; path.len()];
        let n = normalize_into(path.as_bytes(), &mut out)?;
        Ok(String::from_utf8(out[..n].to_vec()).unwrap())
    }

    #[test]
    fn normal_forms_as_nginx_matches_them() {
        for (path, want) in [
            ("/admin", "/admin"),
            ("//admin", "/admin"),
            ("/%61dmin", "/admin"),
            ("/./admin", "/admin"),
            ("/x/../admin", "/admin"),
            ("/%2Fadmin", "/admin"),
            ("/x%2F..%2Fadmin", "/admin"),
            ("/x/%2e%2e/admin", "/admin"),
            ("/admin%2Fx", "/admin/x"),
            ("/a%2fb", "/a/b"),
            ("/a%20b", "/a%20b"),
            ("/a%41b", "/aAb"),
            ("/a%2Fb/../c", "/a/c"),
            ("/x/..", "/"),
            ("/x/./", "/x/"),
            ("/.", "/"),
            ("/%2e", "/"),
            ("/x%2F.", "/x/"),
            ("/", "/"),
            ("//", "/"),
            ("/x/", "/x/"),
            ("/x//", "/x/"),
            ("/x/y/..", "/x/"),
            ("/ADMIN", "/ADMIN"),
            ("/;/admin", "/;/admin"),
            ("/%25%32%46", "/%252F"),
            ("/.git/config", "/.git/config"),
            ("/%C0", "/%C0"),
            ("/%C3%A9t%C3%A9", "/%C3%A9t%C3%A9"),
            ("/%E0%A0%80", "/%E0%A0%80"),
            ("/%FCber", "/%FCber"),
            ("/...", "/..."),
            ("/a.", "/a."),
            ("*", "*"),
        ] {
            assert_eq!(normal(path), Ok(want.to_string()), "{path}");
            assert_eq!(
                is_normal(path.as_bytes()),
                path == want,
                "is_normal({path})"
            );
        }
    }

    #[test]
    fn dot_dot_above_the_root_is_refused() {
        for path in [
            "/..",
            "/../admin",
            "/x/../../admin",
            "/%2e%2e/admin",
            "/x/..%2F..%2Fadmin",
            "//..",
        ] {
            assert_eq!(normal(path), Err(PathError::AboveRoot), "{path}");
        }
        for path in ["/a%zz", "/a%2", "/a%", "/a%%36%31", "/%00x", "/a%2x"] {
            assert_eq!(normal(path), Err(PathError::BadEscape), "{path}");
            assert!(!is_normal(path.as_bytes()), "{path}");
        }
    }

    #[test]
    fn escaped_overlong_utf8_forms_are_refused_but_lone_high_escapes_stay() {
        for path in [
            "/%C0%AE%C0%AE/private",
            "/%c0%afprivate",
            "/%C1%9C",
            "/%E0%80%AF",
            "/x%F0%80%80%AFy",
            "/%F8%80%80%80%AF",
            "/%FC%80%80%80%80%AF",
        ] {
            assert_eq!(normal(path), Err(PathError::BadEscape), "{path}");
            assert!(!is_normal(path.as_bytes()), "{path}");
        }
    }

    #[test]
    fn too_small_an_output_is_an_error_not_a_panic() {
        assert_eq!(
            normalize_into(b"/a/b", &mut [0u8; 3]),
            Err(PathError::NoRoom)
        );
    }

    #[test]
    fn target_path_is_the_path_without_query() {
        assert_eq!(target_path(b"/a/b?c=/d"), b"/a/b");
        assert_eq!(target_path(b"http://h/x/../y?q"), b"/x/../y");
        assert_eq!(target_path(b"http://h?q"), b"/");
        assert_eq!(target_path(b"http://h"), b"/");
        assert_eq!(target_path(b"*"), b"");
        assert_eq!(target_path(b"h:443"), b"");
    }
}

#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;

    /// Paths made of the pieces that normalisation is about (slashes, dots, escapes decoded and
    /// kept, broken escapes) and plain bytes.
    fn path() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop::sample::select(
            &[
                "/", "/", "/", ".", "..", "a", "b", "~", "%2e", "%2E", "%2F", "%2f", "%61", "%20",
                "%3B", "%25", "%", "%2", "%00", "%zz", "?", ";", "A", "%C0", "%E0", "%AE", "%80",
            ][..],
        );
        prop::collection::vec(piece, 0..24).prop_map(|pieces| {
            let mut p = b"/".to_vec();
            for piece in pieces {
                p.extend_from_slice(piece.as_bytes());
            }
            p
        })
    }

    fn normalized(p: &[u8]) -> Result<Vec<u8>, PathError> {
        let mut out = vec![0u8; p.len()];
        let n = normalize_into(p, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    /// A segment of `p` that is `.` or `..`.
    fn has_dot_segment(p: &[u8]) -> bool {
        p.split(|&b| b == b'/').any(|s| s == b"." || s == b"..")
    }

    proptest! {
        #![proptest_config(crate::http1::proptests::config(4000))]

        #[test]
        fn normal_form_is_idempotent_never_longer_and_has_no_empty_or_dot_segment(p in path()) {
            match normalized(&p) {
                Ok(n) => {
                    prop_assert!(n.len() <= p.len());
                    prop_assert!(n.starts_with(b"/"));
                    prop_assert!(!n.windows(2).any(|w| w == b"//"), "{:?}", String::from_utf8_lossy(&n));
                    prop_assert!(!has_dot_segment(&n), "{:?}", String::from_utf8_lossy(&n));
                    prop_assert!(is_normal(&n), "{:?}", String::from_utf8_lossy(&n));
                    prop_assert_eq!(normalized(&n), Ok(n.clone()));
                    // A path said to be normal is matched as it is: normalising keeps it.
                    if is_normal(&p) {
                        prop_assert_eq!(&n, &p);
                    }
                }
                Err(_) => prop_assert!(!is_normal(&p)),
            }
        }
    }
}
