//! Request paths in normal form, in two readings that share one resolution of dot segments:
//! the *route* form, for matching routes the way a server that resolves the path would read it
//! (E13, docs/design.md#routes-match-normal-paths), and the *file* form, the name a static root
//! opens ([`file_path`]).
//!
//! The route form, as nginx matches `location` (`//admin`, `/%61dmin`, `/./admin` and
//! `/x/../admin` are all `/admin`): percent-encoded unreserved bytes (RFC 3986 §2.3: letters,
//! digits, `-._~`) and `%2F` (a slash, as nginx reads it; so `/x%2F..%2Fadmin` is `/admin`) are
//! decoded, every other percent-encoding is kept as sent (`%20`, `%3B`, `%C3`); empty segments
//! (`//`) are dropped; `.` segments are removed and `..` segments remove the segment before them
//! (RFC 3986 §5.2.4); a path that ends in a removed `.` or `..` segment, or in `/`, keeps its
//! final `/`. A `..` above the root, a `%` that is not followed by two hex digits and `%00` are
//! refused ([`PathError`]: Quill answers 400, as nginx does; so every `%` of a normal path starts
//! an escape that stays, and normalising twice changes nothing). Case is kept (`/ADMIN` is not
//! `/admin`), and so is every other byte (`;` has no meaning here).
//!
//! The file form decodes every escape exactly once (`%252e` is the three bytes `%2e`, a name,
//! never `.`), then resolves segments the same way; a NUL, raw or `%00`, and an encoded slash
//! are refused (a file name cannot hold either), and a backslash is an ordinary byte.
//!
//! Pure and without allocation: [`is_normal`] says in one pass whether a path is normal already
//! (the usual case, matched as it is), and [`normalize_into`] and [`file_path`] write their form
//! into a buffer the caller owns; it is never longer than the path.

/// Why a path has no normal form (the request is refused with 400, as nginx does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathError {
    /// A `..` segment climbs above the root (`/../x`, `/a/../../x`).
    AboveRoot,
    /// A `%` not followed by two hex digits, `%00`, or an escaped overlong UTF-8 form.
    BadEscape,
    /// The output buffer is shorter than the path.
    NoRoom,
    /// An encoded slash (`%2F`, `%2f`) in a file path: a `/` inside a name cannot exist.
    EncodedSlash,
    /// A NUL byte in a file path, raw or `%00`: file names end there.
    Nul,
    /// A file path that does not start with `/` (`*`, an authority, nothing).
    NotAbsolute,
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
    let len = decode_into(path, out, Decoding::Route)?;
    resolve_segments(out, len)
}

/// Writes the file form of `path` (a request target's path without its query, as
/// [`target_path`] gives it) into `out` and returns its length (at most `path.len()`): every
/// `%XY` decoded exactly once, empty segments dropped, `.` and `..` resolved, a trailing `/` kept
/// (a directory named without its slash is redirected). The result starts with `/`; without it,
/// it is the relative name to open under the root (`sys::open_beneath`). Refused: a `..` above the
/// root, a bad escape, a NUL (raw or `%00`), an encoded slash, a path not starting with `/`.
pub fn file_path(path: &[u8], out: &mut [u8]) -> Result<usize, PathError> {
    let out = out.get_mut(..path.len()).ok_or(PathError::NoRoom)?;
    if path.first() != Some(&b'/') {
        return Err(PathError::NotAbsolute);
    }
    let len = decode_into(path, out, Decoding::File)?;
    resolve_segments(out, len)
}

/// Whether a file path (the output of [`file_path`]) has a segment starting with `.` (`/.git/`,
/// `/a/.env`): a hidden name, which a static root does not serve unless told to. The first
/// segment `.well-known` is not hidden (RFC 8615; ACME challenges live there), though a hidden
/// name below it is.
pub fn hidden_segment(path: &[u8]) -> bool {
    let mut segments = path
        .split(|&b| b == b'/')
        .filter(|s| !s.is_empty())
        .peekable();
    if segments.peek() == Some(&&b".well-known"[..]) {
        segments.next();
    }
    segments.any(|s| s.first() == Some(&b'.'))
}

/// Which escapes a reading decodes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Decoding {
    /// The route form: unreserved bytes and `/`; the others stay encoded; `%00` refused.
    Route,
    /// The file form: every escape; `%00`, a raw NUL and an encoded `/` refused.
    File,
}

/// Step 1 of both forms: copies `path` into `out` (as long as `path`), decoding the escapes
/// `decoding` decodes (never longer), and returns the length written.
fn decode_into(path: &[u8], out: &mut [u8], decoding: Decoding) -> Result<usize, PathError> {
    let mut len = 0;
    let mut i = 0;
    while i < path.len() {
        let b = path[i];
        if b == 0 && decoding == Decoding::File {
            return Err(PathError::Nul);
        }
        if b == b'%' {
            let escape = path.get(i + 1).zip(path.get(i + 2));
            match (escape.and_then(|(&h, &l)| decoded(h, l)), decoding) {
                (None, _) | (Some(0), Decoding::Route) => return Err(PathError::BadEscape),
                (Some(d), Decoding::Route) if overlong(path, i, d) => {
                    return Err(PathError::BadEscape)
                }
                (Some(0), Decoding::File) => return Err(PathError::Nul),
                (Some(b'/'), Decoding::File) => return Err(PathError::EncodedSlash),
                (Some(d), Decoding::File) => {
                    out[len] = d;
                    len += 1;
                    i += 3;
                    continue;
                }
                (Some(d), Decoding::Route) if decodes(d) => {
                    out[len] = d;
                    len += 1;
                    i += 3;
                    continue;
                }
                (Some(_), Decoding::Route) => {}
            }
        }
        out[len] = b;
        len += 1;
        i += 1;
    }
    Ok(len)
}

/// Step 2 of both forms, in place over `out[..len]` (decoded, starting with `/`): drops empty
/// segments, removes `.` and resolves `..`, keeps a final `/` (or one after a final `.` or `..`);
/// returns the new length. `w` is the end of the output, never past the segment being read.
fn resolve_segments(out: &mut [u8], len: usize) -> Result<usize, PathError> {
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

    fn file(path: &[u8]) -> Result<Vec<u8>, PathError> {
        let mut out = vec![0u8; path.len()];
        let n = file_path(path, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    #[test]
    fn file_forms_decode_every_escape_once_and_resolve_dots() {
        for (path, want) in [
            (&b"/a/b"[..], &b"/a/b"[..]),
            (b"/%61", b"/a"),
            (b"/a%20b", b"/a b"),
            (b"/%252e", b"/%2e"),
            (b"/%252e%252e/x", b"/%2e%2e/x"),
            (b"/a/%2e%2e/b", b"/b"),
            (b"/a/%2E%2e/", b"/"),
            (b"/a/.%2e", b"/"),
            (b"/%c0%ae%c0%ae/x", b"/\xc0\xae\xc0\xae/x"),
            (b"/a\\..\\b", b"/a\\..\\b"),
            (b"/%5c..%5cb", b"/\\..\\b"),
            (b"//etc/passwd", b"/etc/passwd"),
            (b"/dir/", b"/dir/"),
            (b"/dir//", b"/dir/"),
            (b"/dir/.", b"/dir/"),
            (b"/dir/sub/..", b"/dir/"),
            (b"/%3F%23", b"/?#"),
            (b"/%ff", b"/\xff"),
            (b"/", b"/"),
            (b"/.", b"/"),
            (b"/.git/config", b"/.git/config"),
        ] {
            let shown = String::from_utf8_lossy(path);
            assert_eq!(file(path).as_deref(), Ok(want), "{shown}");
        }
    }

    #[test]
    fn file_forms_refuse_what_no_name_can_hold() {
        for (path, want) in [
            (&b"/.."[..], PathError::AboveRoot),
            (b"/%2e%2e", PathError::AboveRoot),
            (b"/%2E%2e/", PathError::AboveRoot),
            (b"/a/../../x", PathError::AboveRoot),
            (b"/%2f", PathError::EncodedSlash),
            (b"/a%2Fb", PathError::EncodedSlash),
            (b"/a%2F..%2F..%2Fx", PathError::EncodedSlash),
            (b"/%00", PathError::Nul),
            (b"/a\0b", PathError::Nul),
            (b"/a%zz", PathError::BadEscape),
            (b"/a%2", PathError::BadEscape),
            (b"*", PathError::NotAbsolute),
            (b"", PathError::NotAbsolute),
            (b"a/b", PathError::NotAbsolute),
        ] {
            let shown = String::from_utf8_lossy(path);
            assert_eq!(file(path), Err(want), "{shown}");
        }
        assert_eq!(file_path(b"/a/b", &mut [0u8; 3]), Err(PathError::NoRoom));
    }

    #[test]
    fn hidden_segments_are_dot_names_but_not_the_well_known_folder() {
        for (path, hidden) in [
            (&b"/.git/config"[..], true),
            (b"/a/.env", true),
            (b"/a/.b/c", true),
            (b"/.well-known/acme-challenge/x", false),
            (b"/.well-known/", false),
            (b"/.well-known", false),
            (b"/.well-known/.secret", true),
            (b"/.well-knownx/a", true),
            (b"/a/.well-known/x", true),
            (b"/a/b.c/d.", false),
            (b"/", false),
        ] {
            let shown = String::from_utf8_lossy(path);
            assert_eq!(hidden_segment(path), hidden, "{shown}");
        }
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

    /// Paths for the file form: the route pieces plus escapes it decodes differently (`%25`
    /// followed by `2e`, an overlong dot, a backslash, a high byte) and a raw NUL.
    fn file_path_input() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop::sample::select(
            &[
                "/", "/", "/", ".", "..", "a", "~", "%2e", "%2E", "%2F", "%61", "%20", "%25",
                "%252e", "2e", "%c0%ae", "\\", "%5C", "%ff", "%3F", "%", "%2", "%00", "\0", "A",
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

    fn file_form(p: &[u8]) -> Result<Vec<u8>, PathError> {
        let mut out = vec![0u8; p.len()];
        let n = file_path(p, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    /// A second, naive reading: split on `/` first, decode each segment on its own (an encoded
    /// slash or a NUL is refused), then walk a stack of names where `..` pops and may not pop the
    /// root. Splitting before decoding is what an encoded slash's refusal makes equal.
    fn model(p: &[u8]) -> Option<Vec<u8>> {
        let mut stack: Vec<Vec<u8>> = Vec::new();
        let mut trailing = true;
        for raw in p[1..].split(|&b| b == b'/') {
            let seg = decode_segment(raw)?;
            trailing = matches!(&seg[..], b"" | b"." | b"..");
            match &seg[..] {
                b"" | b"." => {}
                b".." => {
                    stack.pop()?;
                }
                _ => stack.push(seg),
            }
        }
        let mut out = Vec::new();
        for seg in &stack {
            out.push(b'/');
            out.extend_from_slice(seg);
        }
        if stack.is_empty() || trailing {
            out.push(b'/');
        }
        Some(out)
    }

    fn decode_segment(raw: &[u8]) -> Option<Vec<u8>> {
        let mut seg = Vec::new();
        let mut i = 0;
        while i < raw.len() {
            let b = if raw[i] == b'%' {
                let hex = std::str::from_utf8(raw.get(i + 1..i + 3)?).ok()?;
                i += 3;
                u8::from_str_radix(hex, 16)
                    .ok()
                    .filter(|_| hex.bytes().all(|h| h.is_ascii_hexdigit()))?
            } else {
                i += 1;
                raw[i - 1]
            };
            if b == 0 || b == b'/' {
                return None;
            }
            seg.push(b);
        }
        Some(seg)
    }

    /// `%` as `%25`: the file form written back as a path that decodes to it.
    fn reencoded(form: &[u8]) -> Vec<u8> {
        let mut p = Vec::new();
        for &b in form {
            if b == b'%' {
                p.extend_from_slice(b"%25");
            } else {
                p.push(b);
            }
        }
        p
    }

    proptest! {
        #![proptest_config(crate::http1::proptests::config(4000))]

        #[test]
        fn file_form_has_no_dot_empty_or_nul_segment_and_is_stable(p in file_path_input()) {
            let Ok(n) = file_form(&p) else { return Ok(()) };
            let shown = String::from_utf8_lossy(&n).into_owned();
            prop_assert!(n.len() <= p.len());
            prop_assert!(n.starts_with(b"/"), "{}", shown);
            prop_assert!(!n.contains(&0), "{}", shown);
            prop_assert!(!n.windows(2).any(|w| w == b"//"), "{}", shown);
            prop_assert!(!has_dot_segment(&n), "{}", shown);
            prop_assert_eq!(file_form(&reencoded(&n)), Ok(n.clone()));
        }

        #[test]
        fn file_form_is_what_a_segment_stack_under_the_root_resolves(p in file_path_input()) {
            prop_assert_eq!(file_form(&p).ok(), model(&p));
        }

        #[test]
        fn file_form_and_route_form_agree_without_escapes(p in path()) {
            let p: Vec<u8> = p.into_iter().filter(|&b| b != b'%' && b != 0).collect();
            prop_assert_eq!(file_form(&p), normalized(&p));
        }
    }
}
