//! What a `Referer` field value (RFC 9110 §10.1.3) says about the page that linked to a request,
//! for hotlink rules (docs/design.md#referer-rules-read-the-host-a-browser-would): the host of an
//! `http://` or `https://` URL, compared by the caller with the names it trusts, or why there is
//! none.
//!
//! The host is read as a browser would have written it: after the scheme, up to the first `/`,
//! `?`, `#` or `\`; after the last `@` of that (userinfo is not the host:
//! `http://example.com@evil.net/` names evil.net); without its port (digits only) and a final
//! dot. A host with any other byte than letters, digits, `-`, `.` and `_` (or a bracketed IPv6
//! literal) is [`Referer::Invalid`]: a browser never sends one (it writes the URL in normal
//! form), so such a value matches no name rather than being read one way here and another way
//! elsewhere.
//!
//! Pure and without allocation: the host is a slice of the value.

/// The reading of one `Referer` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Referer<'a> {
    /// Not an `http://` or `https://` URL (what a proxy or firewall that blanks the field
    /// leaves: empty, `-`, a bare word, another scheme).
    Blocked,
    /// The host of an `http` or `https` URL, as sent (compare without case).
    Host(&'a [u8]),
    /// An `http` or `https` URL whose host is empty or holds a byte no host has.
    Invalid,
}

/// Reads a `Referer` value (surrounding spaces already removed).
pub fn classify(value: &[u8]) -> Referer<'_> {
    let Some(rest) = strip_scheme(value) else {
        return Referer::Blocked;
    };
    let end = rest
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#' | b'\\'))
        .unwrap_or(rest.len());
    let authority = &rest[..end];
    let hostport = match authority.iter().rposition(|&b| b == b'@') {
        Some(i) => &authority[i + 1..],
        None => authority,
    };
    match host_of(hostport) {
        Some(h) if !h.is_empty() => Referer::Host(h),
        _ => Referer::Invalid,
    }
}

/// The value after `http://` or `https://` (scheme without case), or None.
fn strip_scheme(value: &[u8]) -> Option<&[u8]> {
    for scheme in [&b"http://"[..], b"https://"] {
        if value.len() >= scheme.len() && value[..scheme.len()].eq_ignore_ascii_case(scheme) {
            return Some(&value[scheme.len()..]);
        }
    }
    None
}

/// `host[:port]` without the port and a final dot, if the host's bytes are a host's and the
/// port is digits.
fn host_of(hostport: &[u8]) -> Option<&[u8]> {
    let (host, port) = if hostport.first() == Some(&b'[') {
        let close = hostport.iter().position(|&b| b == b']')?;
        let host = &hostport[..=close];
        let inner = &host[1..close];
        let ipv6 = !inner.is_empty()
            && inner
                .iter()
                .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
        if !ipv6 {
            return None;
        }
        (host, &hostport[close + 1..])
    } else {
        let colon = hostport
            .iter()
            .position(|&b| b == b':')
            .unwrap_or(hostport.len());
        let host = &hostport[..colon];
        let host = host.strip_suffix(b".").unwrap_or(host);
        let named = host
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        if !named {
            return None;
        }
        (host, &hostport[colon..])
    };
    match port {
        [] => Some(host),
        [b':', digits @ ..] if digits.len() <= 5 && digits.iter().all(u8::is_ascii_digit) => {
            Some(host)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(v: &str) -> Referer<'_> {
        classify(v.as_bytes())
    }

    #[test]
    fn the_host_is_read_as_a_browser_wrote_it() {
        for (value, want) in [
            ("http://example.com/a.png", "example.com"),
            ("https://Example.COM", "Example.COM"),
            ("HTTPS://example.com:8443/x", "example.com"),
            ("http://example.com.:80/", "example.com"),
            ("http://user:pw@example.com/", "example.com"),
            ("http://example.com@evil.net/", "evil.net"),
            ("http://evil.net/@example.com", "evil.net"),
            ("http://evil.net?@example.com", "evil.net"),
            ("http://evil.net#@example.com", "evil.net"),
            ("http://evil.net\\@example.com/", "evil.net"),
            (
                "https://evil.example.com.attacker.net/",
                "evil.example.com.attacker.net",
            ),
            ("http://[::1]:8080/", "[::1]"),
            ("http://127.0.0.1/", "127.0.0.1"),
        ] {
            assert_eq!(host(value), Referer::Host(want.as_bytes()), "{value}");
        }
    }

    #[test]
    fn values_without_an_http_scheme_are_blocked() {
        for value in [
            "",
            "-",
            "example.com",
            "ftp://example.com/",
            "http:/x",
            "//example.com/",
        ] {
            assert_eq!(host(value), Referer::Blocked, "{value:?}");
        }
    }

    #[test]
    fn hosts_no_browser_sends_are_invalid() {
        for value in [
            "http://",
            "http:///x",
            "http://:80/",
            "http://ex%61mple.com/",
            "http://example.com:evil.net/",
            "http://example.com:123456/",
            "http://exa mple.com/",
            "http://[zz]/",
            "http://[::1/",
            "http://[::1]x/",
            "http://user@/",
        ] {
            assert_eq!(host(value), Referer::Invalid, "{value:?}");
        }
    }
}

#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(crate::http1::proptests::config(2000))]

        /// Any value: a host is a non-empty slice of the value holding only host bytes; a value
        /// is blocked exactly when it does not start with an http scheme.
        #[test]
        fn a_host_is_a_clean_slice_of_the_value(
            prefix in prop::sample::select(&["http://", "HTTPS://", "ftp://", ""][..]),
            rest in "[a-zA-Z0-9@:/?#\\\\.\\[\\]%_ -]{0,40}",
        ) {
            let value = format!("{prefix}{rest}");
            let http = strip_scheme(value.as_bytes()).is_some();
            match classify(value.as_bytes()) {
                Referer::Host(h) => {
                    prop_assert!(http);
                    prop_assert!(!h.is_empty());
                    match h.strip_prefix(b"[").and_then(|h| h.strip_suffix(b"]")) {
                        Some(ip) => prop_assert!(ip
                            .iter()
                            .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.')),
                        None => prop_assert!(h
                            .iter()
                            .all(|&b| b.is_ascii_alphanumeric() || b"-._".contains(&b))),
                    }
                    prop_assert!(value.as_bytes().windows(h.len()).any(|w| w == h));
                }
                Referer::Blocked => prop_assert!(!http),
                Referer::Invalid => prop_assert!(http),
            }
        }
    }
}
