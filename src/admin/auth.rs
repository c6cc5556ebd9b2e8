//! Who may ask the admin listener: the `Host` check against DNS rebinding and the optional token
//! (`admin_token_file`), presented as `Authorization: Bearer TOKEN` or as the password of HTTP
//! Basic (so a browser can open the live page: it prompts once, then its `fetch()` calls carry
//! the credentials).
//!
//! Pure functions over header values, plus the reading of the token file. The token is compared
//! in time that depends only on the length of what the client sent, never on where it differs.

use std::fs::File;
use std::io::Read;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Longest token file read (a token is a line; anything longer is a mistake, not a token).
const MAX_TOKEN_FILE: u64 = 4096;

/// The secret requests must carry, and the file it came from (re-read on reload).
#[derive(Clone)]
pub(crate) struct Token {
    pub path: PathBuf,
    secret: Vec<u8>,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token({})", self.path.display())
    }
}

impl Token {
    /// Reads the token from `path`: the file's content with surrounding whitespace trimmed. An
    /// unreadable, empty or oversized file, or a token with spaces or control characters, is an
    /// error naming the file. The file is opened without blocking (a FIFO is refused, never
    /// waited on).
    pub(crate) fn load(path: &Path) -> Result<Token, String> {
        let fail = |why: String| format!("admin_token_file {}: {why}", path.display());
        let secret = read_token(path).map_err(fail)?;
        Ok(Token {
            path: path.to_path_buf(),
            secret,
        })
    }

    /// The same file read again (on reload); the token it holds now.
    pub(crate) fn reload(&self) -> Result<Token, String> {
        Token::load(&self.path)
    }

    /// Whether an `Authorization` header value carries this token, as `Bearer TOKEN` or as the
    /// password of `Basic` (any user name). Scheme names are case-insensitive.
    pub(crate) fn admits(&self, authorization: Option<&str>) -> bool {
        let Some(value) = authorization else {
            return false;
        };
        let Some((scheme, rest)) = value.trim().split_once(' ') else {
            return false;
        };
        let rest = rest.trim();
        if scheme.eq_ignore_ascii_case("bearer") {
            same(rest.as_bytes(), &self.secret)
        } else if scheme.eq_ignore_ascii_case("basic") {
            let Some(pair) = base64_decode(rest) else {
                return false;
            };
            let Some(colon) = pair.iter().position(|&b| b == b':') else {
                return false;
            };
            same(&pair[colon + 1..], &self.secret)
        } else {
            false
        }
    }
}

fn read_token(path: &Path) -> Result<Vec<u8>, String> {
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot read it: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read it: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mut bytes = Vec::new();
    file.take(MAX_TOKEN_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() as u64 > MAX_TOKEN_FILE {
        return Err(format!("longer than {MAX_TOKEN_FILE} bytes"));
    }
    let token = bytes.trim_ascii();
    if token.is_empty() {
        return Err("the file is empty (it must hold the token)".into());
    }
    if !token.iter().all(|b| b.is_ascii_graphic()) {
        return Err("the token must be printable ASCII without spaces".into());
    }
    Ok(token.to_vec())
}

/// Compares `given` with `secret` in time that depends on `given.len()` only.
fn same(given: &[u8], secret: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != secret.len());
    for (i, b) in given.iter().enumerate() {
        diff |= b ^ secret.get(i).copied().unwrap_or(!b);
        diff = std::hint::black_box(diff);
    }
    diff == 0
}

/// Decodes standard base64 (padding optional); None when it is not base64.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    // Six bits left over cannot come from any byte string.
    (bits < 6).then_some(out)
}

/// Whether a `Host` header value names this machine in a way no DNS rebinding can produce: an
/// IPv4 literal, a bracketed IPv6 literal or `localhost`, each with or without a port. A page
/// served under a domain name always sends that name, so it is refused.
pub(super) fn is_local_host(host: &str) -> bool {
    let (name_ok, rest) = match host.strip_prefix('[') {
        Some(inner) => match inner.split_once(']') {
            Some((v6, rest)) => (v6.parse::<Ipv6Addr>().is_ok(), rest),
            None => return false,
        },
        None => {
            let end = host.find(':').unwrap_or(host.len());
            let name = &host[..end];
            let ok = name.parse::<Ipv4Addr>().is_ok() || name.eq_ignore_ascii_case("localhost");
            (ok, &host[end..])
        }
    };
    let port_ok = match rest.strip_prefix(':') {
        Some(port) => port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit()),
        None => rest.is_empty(),
    };
    name_ok && port_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(secret: &str) -> Token {
        Token {
            path: PathBuf::from("t"),
            secret: secret.as_bytes().to_vec(),
        }
    }

    #[test]
    fn hosts_that_name_this_machine_are_local() {
        for host in [
            "127.0.0.1",
            "127.0.0.1:9100",
            "10.1.2.3:80",
            "[::1]",
            "[::1]:9100",
            "[fe80::1]:1",
            "localhost",
            "LocalHost:9100",
            "localhost:",
        ] {
            assert!(is_local_host(host), "{host}");
        }
    }

    #[test]
    fn names_and_odd_forms_are_not_local() {
        for host in [
            "attacker.example",
            "attacker.example:9100",
            "localhost.attacker.example",
            "localhost.",
            "127.0.0.1.nip.io",
            "127.1",
            "::1",
            "[::1",
            "[::1]x",
            "[nope]:1",
            "127.0.0.1:port",
            "127.0.0.1:123456",
            "127.0.0.1:1:2",
            "",
            "t",
        ] {
            assert!(!is_local_host(host), "{host}");
        }
    }

    #[test]
    fn token_is_accepted_as_bearer_or_basic_password_only() {
        let t = token("s3cret:x");
        assert!(t.admits(Some("Bearer s3cret:x")));
        assert!(t.admits(Some("bearer   s3cret:x ")));
        // "user:s3cret:x" and ":s3cret:x"
        assert!(t.admits(Some("Basic dXNlcjpzM2NyZXQ6eA==")));
        assert!(t.admits(Some("basic OnMzY3JldDp4")));
        for wrong in [
            None,
            Some(""),
            Some("Bearer"),
            Some("Bearer s3cret"),
            Some("Bearer s3cret:xx"),
            Some("Bearer S3CRET:X"),
            Some("s3cret:x"),
            Some("Token s3cret:x"),
            Some("Basic czNjcmV0Ong="), // "s3cret:x": user s3cret, password x
            Some("Basic !!!!"),
            Some("Basic dXNlcg=="), // "user", no colon
        ] {
            assert!(!t.admits(wrong), "{wrong:?}");
        }
    }

    #[test]
    fn base64_decodes_with_and_without_padding_and_rejects_junk() {
        assert_eq!(base64_decode("YQ==").as_deref(), Some(&b"a"[..]));
        assert_eq!(base64_decode("YWI").as_deref(), Some(&b"ab"[..]));
        assert_eq!(base64_decode("YWJj").as_deref(), Some(&b"abc"[..]));
        assert_eq!(base64_decode("").as_deref(), Some(&b""[..]));
        assert_eq!(base64_decode("Y"), None);
        assert_eq!(base64_decode("YW J"), None);
    }

    #[test]
    fn same_compares_whole_values() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"ab", b"abc"));
        assert!(!same(b"abc", b"ab"));
        assert!(!same(b"", b"a"));
        assert!(!same(b"\xff", b""));
    }

    #[test]
    fn token_files_that_hold_no_usable_token_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, body: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, body).unwrap();
            p
        };
        let good = Token::load(&write("good", b"  abc-123\n")).unwrap();
        assert!(good.admits(Some("Bearer abc-123")));
        for (name, body, why) in [
            ("empty", &b" \n"[..], "empty"),
            ("spaced", &b"two words\n"[..], "printable ASCII"),
            ("big", &[b'a'; 5000][..], "longer than"),
        ] {
            let err = Token::load(&write(name, body)).unwrap_err();
            assert!(err.contains(why) && err.contains(name), "{err}");
        }
        let err = Token::load(&dir.path().join("missing")).unwrap_err();
        assert!(err.contains("cannot read it"), "{err}");
        let err = Token::load(dir.path()).unwrap_err();
        assert!(err.contains("not a regular file"), "{err}");
    }
}
