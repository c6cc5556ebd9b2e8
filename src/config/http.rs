//! An HTTP listener's settings beyond their types (`model::HttpSettings`): the bounds every value is
//! held to, a partial set (`HttpSettingsPatch`: what `[http]` or one `[listener.http]` says), the
//! size and header-edit grammars the TOML loader reads, and the settings that differ from the
//! defaults (what `quill check` lists); and the raw `request_headers` / `response_headers` tables
//! that listeners and routes share (`RawEdits`, `edits`). Pure: no files, no sockets.

use std::ops::Range;
use std::time::Duration;

use crate::acl::Net;

use serde::Deserialize;
use toml::Spanned;

use super::model::{
    format_duration, in_range, ConfigError, ErrorPage, ForwardedFor, HeaderEdit, HttpSettings,
    NormalizePath,
};
use quill_core::http1::rewrite::EditOp;

/// The smallest `max_request_line` and `max_header_bytes` (a request line of a few hundred bytes
/// must always fit).
pub(crate) const MIN_HEAD_LIMIT: u64 = 256;
/// The largest `max_request_line` and `max_header_bytes`: 16 KiB, the pooled read buffer a
/// request head is parsed in (a larger limit could never be reached).
pub(crate) const MAX_HEAD_LIMIT: u64 = 16 * 1024;
/// The most header fields a request may be allowed (`max_headers`).
pub(crate) const MAX_HEADERS: u64 = 1000;
/// The most idle kept-alive connections per server per worker (`server_keepalive`).
pub(crate) const MAX_SERVER_KEEPALIVE: u64 = 10_000;
/// The most edits in one `request_headers` or `response_headers` list.
pub(crate) const MAX_HEADER_EDITS: usize = 256;
/// The longest `via` name.
pub(crate) const MAX_VIA: usize = 64;
/// The most `trusted_proxies` entries.
pub(crate) const MAX_TRUSTED_PROXIES: usize = 4096;

/// Fields Quill writes itself (framing and hop-by-hop, RFC 9110 §7.6.1): an edit of one of them
/// could make the two sides disagree on where a message ends, so none may be edited.
const MANAGED: [&str; 8] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];

/// A partial `HttpSettings`: what one table (`[http]`, a `[listener.http]`) sets. Applied key by
/// key over the defaults.
#[derive(Clone, Debug, Default)]
pub(crate) struct HttpSettingsPatch {
    pub header_timeout: Option<Duration>,
    pub keepalive_timeout: Option<Duration>,
    pub body_timeout: Option<Duration>,
    pub response_timeout: Option<Duration>,
    pub tunnel_timeout: Option<Duration>,
    pub server_keepalive: Option<u32>,
    pub server_idle_timeout: Option<Duration>,
    pub max_body: Option<u64>,
    pub max_request_line: Option<u32>,
    pub max_header_bytes: Option<u32>,
    pub max_headers: Option<u32>,
    pub forwarded_for: Option<ForwardedFor>,
    pub trusted_proxies: Option<Vec<Net>>,
    pub x_forwarded_proto: Option<bool>,
    pub x_forwarded_host: Option<bool>,
    pub forwarded: Option<bool>,
    /// Some(None): `via = false`.
    pub via: Option<Option<String>>,
    pub request_id: Option<bool>,
    pub normalize_path: Option<NormalizePath>,
    pub underscores_in_headers: Option<bool>,
    pub request_headers: Option<Vec<HeaderEdit>>,
    pub response_headers: Option<Vec<HeaderEdit>>,
    pub error_pages: Option<Vec<ErrorPage>>,
}

impl HttpSettings {
    /// Sets every key the patch sets (a list replaces the list it overrides).
    pub(crate) fn apply(&mut self, p: &HttpSettingsPatch) {
        fn set<T: Clone>(slot: &mut T, value: &Option<T>) {
            if let Some(v) = value {
                *slot = v.clone();
            }
        }
        set(&mut self.header_timeout, &p.header_timeout);
        set(&mut self.keepalive_timeout, &p.keepalive_timeout);
        set(&mut self.body_timeout, &p.body_timeout);
        set(&mut self.response_timeout, &p.response_timeout);
        set(&mut self.tunnel_timeout, &p.tunnel_timeout);
        set(&mut self.server_keepalive, &p.server_keepalive);
        set(&mut self.server_idle_timeout, &p.server_idle_timeout);
        if let Some(n) = p.max_body {
            self.max_body = Some(n);
        }
        set(&mut self.max_request_line, &p.max_request_line);
        set(&mut self.max_header_bytes, &p.max_header_bytes);
        set(&mut self.max_headers, &p.max_headers);
        set(&mut self.forwarded_for, &p.forwarded_for);
        set(&mut self.trusted_proxies, &p.trusted_proxies);
        set(&mut self.x_forwarded_proto, &p.x_forwarded_proto);
        set(&mut self.x_forwarded_host, &p.x_forwarded_host);
        set(&mut self.forwarded, &p.forwarded);
        set(&mut self.via, &p.via);
        set(&mut self.request_id, &p.request_id);
        set(&mut self.normalize_path, &p.normalize_path);
        set(&mut self.underscores_in_headers, &p.underscores_in_headers);
        set(&mut self.request_headers, &p.request_headers);
        set(&mut self.response_headers, &p.response_headers);
        set(&mut self.error_pages, &p.error_pages);
    }

    /// Checks every bound; the message names the key, the value and the range.
    pub(crate) fn check(&self) -> Result<(), String> {
        for (name, d) in [
            ("header_timeout", self.header_timeout),
            ("keepalive_timeout", self.keepalive_timeout),
            ("body_timeout", self.body_timeout),
            ("response_timeout", self.response_timeout),
            ("tunnel_timeout", self.tunnel_timeout),
            ("server_idle_timeout", self.server_idle_timeout),
        ] {
            check_timeout(name, d)?;
        }
        in_range(
            "server_keepalive",
            self.server_keepalive.into(),
            0..=MAX_SERVER_KEEPALIVE,
        )?;
        in_range(
            "max_request_line",
            self.max_request_line.into(),
            MIN_HEAD_LIMIT..=MAX_HEAD_LIMIT,
        )?;
        in_range(
            "max_header_bytes",
            self.max_header_bytes.into(),
            MIN_HEAD_LIMIT..=MAX_HEAD_LIMIT,
        )?;
        in_range("max_headers", self.max_headers.into(), 1..=MAX_HEADERS)?;
        if self.max_request_line > self.max_header_bytes {
            return Err(format!(
                "max_request_line: {} is more than max_header_bytes {} (the request line is part of the head)",
                self.max_request_line, self.max_header_bytes
            ));
        }
        if self.trusted_proxies.len() > MAX_TRUSTED_PROXIES {
            return Err(format!(
                "trusted_proxies: {} entries (at most {MAX_TRUSTED_PROXIES})",
                self.trusted_proxies.len()
            ));
        }
        if let Some(v) = &self.via {
            check_via(v)?;
        }
        for (key, edits) in [
            ("request_headers", &self.request_headers),
            ("response_headers", &self.response_headers),
        ] {
            if edits.len() > MAX_HEADER_EDITS {
                return Err(format!(
                    "{key}: {} edits (at most {MAX_HEADER_EDITS})",
                    edits.len()
                ));
            }
            for e in edits {
                header_edit(key, e.op, &e.name, &e.value)?;
            }
        }
        Ok(())
    }

    /// The settings that differ from the defaults, each as `key value` (for `quill check`).
    pub(crate) fn differences(&self) -> Vec<String> {
        let d = HttpSettings::default();
        let mut out = Vec::new();
        let mut dur = |name: &str, mine: Duration, default: Duration| {
            if mine != default {
                out.push(format!("{name} {}", format_duration(mine)));
            }
        };
        dur("header_timeout", self.header_timeout, d.header_timeout);
        dur(
            "keepalive_timeout",
            self.keepalive_timeout,
            d.keepalive_timeout,
        );
        dur("body_timeout", self.body_timeout, d.body_timeout);
        dur(
            "response_timeout",
            self.response_timeout,
            d.response_timeout,
        );
        dur("tunnel_timeout", self.tunnel_timeout, d.tunnel_timeout);
        if self.server_keepalive != d.server_keepalive {
            out.push(format!("server_keepalive {}", self.server_keepalive));
        }
        if self.server_idle_timeout != d.server_idle_timeout {
            out.push(format!(
                "server_idle_timeout {}",
                format_duration(self.server_idle_timeout)
            ));
        }
        if let Some(n) = self.max_body {
            out.push(format!("max_body {}", format_size(n)));
        }
        for (name, mine, default) in [
            (
                "max_request_line",
                self.max_request_line,
                d.max_request_line,
            ),
            (
                "max_header_bytes",
                self.max_header_bytes,
                d.max_header_bytes,
            ),
        ] {
            if mine != default {
                out.push(format!("{name} {}", format_size(mine.into())));
            }
        }
        if self.max_headers != d.max_headers {
            out.push(format!("max_headers {}", self.max_headers));
        }
        if self.forwarded_for != d.forwarded_for {
            out.push(format!(
                "forwarded_for {}",
                forwarded_for_name(self.forwarded_for)
            ));
        }
        if !self.trusted_proxies.is_empty() {
            let nets: Vec<String> = self.trusted_proxies.iter().map(|n| n.to_string()).collect();
            out.push(format!("trusted_proxies {}", nets.join(" ")));
        }
        for (name, mine, default) in [
            (
                "x_forwarded_proto",
                self.x_forwarded_proto,
                d.x_forwarded_proto,
            ),
            (
                "x_forwarded_host",
                self.x_forwarded_host,
                d.x_forwarded_host,
            ),
            ("forwarded", self.forwarded, d.forwarded),
            ("request_id", self.request_id, d.request_id),
            (
                "underscores_in_headers",
                self.underscores_in_headers,
                d.underscores_in_headers,
            ),
        ] {
            if mine != default {
                out.push(format!("{name} {mine}"));
            }
        }
        if let Some(v) = &self.via {
            out.push(format!("via \"{v}\""));
        }
        if self.normalize_path != d.normalize_path {
            out.push(format!(
                "normalize_path {} (servers get the path in normal form)",
                normalize_path_name(self.normalize_path)
            ));
        }
        for (name, edits) in [
            ("request_headers", &self.request_headers),
            ("response_headers", &self.response_headers),
        ] {
            if !edits.is_empty() {
                let shown: Vec<String> = edits.iter().map(show_edit).collect();
                out.push(format!("{name} {}", shown.join(", ")));
            }
        }
        if !self.error_pages.is_empty() {
            let shown: Vec<String> = self
                .error_pages
                .iter()
                .map(|p| format!("{} {}", p.status, p.path.display()))
                .collect();
            out.push(format!("error_pages {}", shown.join(", ")));
        }
        out
    }
}

/// A timeout of an HTTP listener: at most 30 days; `header_timeout` and `response_timeout` more
/// than 0 (nothing could ever arrive in no time).
pub(crate) fn check_timeout(name: &str, d: Duration) -> Result<(), String> {
    if d.is_zero() && matches!(name, "header_timeout" | "response_timeout") {
        return Err(format!(
            "{name}: {} must be more than 0",
            format_duration(d)
        ));
    }
    if d > super::model::MAX_DURATION {
        return Err(format!("{name}: {} is more than 30 days", d.as_secs()));
    }
    Ok(())
}

/// The statuses Quill answers itself, which `error_pages` may give a body.
pub(crate) const ERROR_PAGE_STATUSES: [u16; 13] = [
    400, 403, 404, 405, 408, 413, 414, 429, 431, 501, 502, 503, 504,
];
/// The largest error page: it goes out with its head from one 16 KiB buffer.
pub(crate) const MAX_ERROR_PAGE: u64 = 12 * 1024;

/// `append`, `replace` or `off`.
pub(crate) fn parse_forwarded_for(s: &str) -> Option<ForwardedFor> {
    match s {
        "append" => Some(ForwardedFor::Append),
        "replace" => Some(ForwardedFor::Replace),
        "off" => Some(ForwardedFor::Off),
        _ => None,
    }
}

pub(crate) fn forwarded_for_name(f: ForwardedFor) -> &'static str {
    match f {
        ForwardedFor::Append => "append",
        ForwardedFor::Replace => "replace",
        ForwardedFor::Off => "off",
    }
}

/// `match` or `forward`.
pub(crate) fn parse_normalize_path(s: &str) -> Option<NormalizePath> {
    match s {
        "match" => Some(NormalizePath::Match),
        "forward" => Some(NormalizePath::Forward),
        _ => None,
    }
}

pub(crate) fn normalize_path_name(n: NormalizePath) -> &'static str {
    match n {
        NormalizePath::Match => "match",
        NormalizePath::Forward => "forward",
    }
}

/// A size: bytes, or a number with `k`, `m` or `g` (1024-based, either case): `8192`, `16k`,
/// `10m`. Overflow is an error, not a wrap.
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let bad = || {
        format!(
            "invalid size '{}' (expected bytes, or a number with k, m or g such as \"16k\")",
            s.escape_debug()
        )
    };
    let (digits, shift) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 10),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 20),
        Some(b'g' | b'G') => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(1 << shift).ok_or_else(bad)
}

/// A size in the shortest exact form `parse_size` reads back.
pub(crate) fn format_size(n: u64) -> String {
    for (shift, unit) in [(30, "g"), (20, "m"), (10, "k")] {
        if n != 0 && n % (1 << shift) == 0 {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

/// `tchar` of RFC 9110 §5.6.2.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A non-empty token (a header name, a cookie name).
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_tchar)
}

/// A `via` name: what follows `1.1 ` in the `Via` field (a token, or `host[:port]`).
pub(crate) fn check_via(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_VIA
        && name.bytes().all(|b| is_tchar(b) || b":[]".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "via: invalid name '{}' (a token or host:port of at most {MAX_VIA} characters)",
            name.escape_debug()
        ))
    }
}

/// One header edit of list `key`, checked: the name a token that is not a framing or hop-by-hop
/// field, the value visible ASCII, spaces and tabs (no CR, LF or NUL); empty for `remove`.
pub(crate) fn header_edit(
    key: &str,
    op: EditOp,
    name: &str,
    value: &str,
) -> Result<HeaderEdit, String> {
    if name.is_empty() || !name.bytes().all(is_tchar) {
        return Err(format!(
            "{key}: '{}' is not a valid header name (a token: letters, digits and !#$%&'*+-.^_`|~)",
            name.escape_debug()
        ));
    }
    if MANAGED.iter().any(|m| m.eq_ignore_ascii_case(name)) {
        return Err(format!(
            "{key}: {name} cannot be edited (Quill writes the framing and hop-by-hop fields itself)"
        ));
    }
    if let Some(c) = value
        .chars()
        .find(|&c| !(c == ' ' || c == '\t' || c.is_ascii_graphic()))
    {
        return Err(format!(
            "{key}: the value of {name} '{}' holds {} (only visible ASCII, spaces and tabs)",
            value.escape_debug(),
            c.escape_debug()
        ));
    }
    if op == EditOp::Remove && !value.is_empty() {
        return Err(format!("{key}: remove {name} takes no value"));
    }
    Ok(HeaderEdit {
        op,
        name: name.into(),
        value: value.into(),
    })
}

fn show_edit(e: &HeaderEdit) -> String {
    match e.op {
        EditOp::Remove => format!("remove {}", e.name),
        EditOp::Set => format!("set {}: {}", e.name, e.value),
        EditOp::Add => format!("add {}: {}", e.name, e.value),
    }
}

/// `request_headers` / `response_headers`: `{ remove = [NAME...], set = { NAME = VALUE },
/// add = { NAME = VALUE } }`, applied remove, set, add (`set` and `add` each in name order: TOML
/// tables keep no order).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEdits {
    remove: Option<toml::Value>,
    set: Option<toml::Value>,
    add: Option<toml::Value>,
}

/// A TOML value as the user wrote it, for messages (strings quoted, escapes shown).
pub(crate) fn shown(v: &toml::Value) -> String {
    let text: String = v
        .to_string()
        .chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_debug().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect();
    if text.chars().count() > 80 {
        format!("{}...", text.chars().take(77).collect::<String>())
    } else {
        text
    }
}

/// Reads a `request_headers` / `response_headers` table into edits: remove, then set, then add.
pub(crate) fn edits(
    raw: &Option<Spanned<RawEdits>>,
    key: &str,
    at: &dyn Fn(Range<usize>) -> String,
) -> Result<Option<Vec<quill_core::http1::rewrite::HeaderEdit>>, ConfigError> {
    use quill_core::http1::rewrite::EditOp;
    let Some(raw) = raw else { return Ok(None) };
    let fail = |e: String| ConfigError::usage(format!("{}{e}", at(raw.span())));
    let r = raw.get_ref();
    let mut out = Vec::new();
    if let Some(v) = &r.remove {
        let not_list = || {
            fail(format!(
                "{key}: remove = {} is not a list of header names (e.g. [\"X-Debug\"])",
                shown(v)
            ))
        };
        for name in v.as_array().ok_or_else(not_list)? {
            let name = name.as_str().ok_or_else(not_list)?;
            out.push(header_edit(key, EditOp::Remove, name, "").map_err(fail)?);
        }
    }
    for (op, word, table) in [(EditOp::Set, "set", &r.set), (EditOp::Add, "add", &r.add)] {
        let Some(table) = table else { continue };
        let pairs = table.as_table().ok_or_else(|| {
            fail(format!(
                "{key}: {word} = {} is not a table of names and values (e.g. {{ \"X-Env\" = \"prod\" }})",
                shown(table)
            ))
        })?;
        if pairs.len() > MAX_HEADER_EDITS {
            return Err(fail(format!(
                "{key}: {} edits (at most {})",
                pairs.len(),
                MAX_HEADER_EDITS
            )));
        }
        for (name, value) in pairs {
            let value = value.as_str().ok_or_else(|| {
                fail(format!(
                    "{key}: {word} {} = {} is not a string",
                    name.escape_debug(),
                    shown(value)
                ))
            })?;
            out.push(header_edit(key, op, name, value).map_err(fail)?);
        }
    }
    if out.len() > MAX_HEADER_EDITS {
        return Err(fail(format!(
            "{key}: {} edits (at most {})",
            out.len(),
            MAX_HEADER_EDITS
        )));
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8192"), Ok(8192));
        assert_eq!(parse_size("16k"), Ok(16 * 1024));
        assert_eq!(parse_size("10M"), Ok(10 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        for bad in [
            "",
            "k",
            "1.5k",
            "-1",
            "10x",
            "1 k",
            "16kb",
            "99999999999999999999g",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        for n in [0, 1, 1000, 1024, 16 << 10, 10 << 20, 3 << 30, (1 << 20) + 1] {
            assert_eq!(parse_size(&format_size(n)), Ok(n), "{n}");
        }
        assert_eq!(format_size(16 << 10), "16k");
    }

    #[test]
    fn header_edits_are_checked() {
        assert!(header_edit("request_headers", EditOp::Set, "X-Env", "prod a\tb").is_ok());
        assert!(header_edit("request_headers", EditOp::Remove, "X-Debug", "").is_ok());
        for (name, value) in [
            ("X Env", "1"),
            ("", "1"),
            ("X:Env", "1"),
            ("X-Env", "a\r\nInjected: 1"),
            ("X-Env", "a\0"),
            ("X-Env", "caf\u{e9}"),
            ("Content-Length", "0"),
            ("transfer-encoding", "chunked"),
        ] {
            let e = header_edit("request_headers", EditOp::Add, name, value).unwrap_err();
            assert!(e.starts_with("request_headers: "), "{e}");
            assert!(!e.contains('\n') && !e.contains('\r'), "one line: {e:?}");
        }
    }

    #[test]
    fn bounds_name_the_key_and_the_range() {
        let check = |f: &dyn Fn(&mut HttpSettings), needle: &str| {
            let mut h = HttpSettings::default();
            f(&mut h);
            let e = h.check().unwrap_err();
            assert!(e.contains(needle), "{e:?} should contain {needle:?}");
        };
        assert_eq!(HttpSettings::default().check(), Ok(()));
        check(
            &|h| h.header_timeout = Duration::ZERO,
            "header_timeout: 0s must be more than 0",
        );
        check(&|h| h.response_timeout = Duration::ZERO, "response_timeout");
        check(
            &|h| h.max_headers = 0,
            "max_headers: 0 is out of range (1 to 1000)",
        );
        check(&|h| h.max_headers = 1001, "(1 to 1000)");
        check(
            &|h| h.max_request_line = 100,
            "max_request_line: 100 is out of range (256 to 16384)",
        );
        check(&|h| h.max_header_bytes = (16 << 10) + 1, "max_header_bytes");
        check(
            &|h| {
                h.max_header_bytes = 4096;
                h.max_request_line = 4097;
            },
            "more than max_header_bytes",
        );
        check(&|h| h.via = Some("a b".into()), "via");
        let h = HttpSettings {
            keepalive_timeout: Duration::ZERO,
            body_timeout: Duration::ZERO,
            ..HttpSettings::default()
        };
        assert_eq!(h.check(), Ok(()));
    }

    #[test]
    fn a_patch_overrides_key_by_key() {
        let mut h = HttpSettings::default();
        h.apply(&HttpSettingsPatch {
            response_timeout: Some(Duration::from_secs(5)),
            max_body: Some(1 << 20),
            via: Some(Some("edge".into())),
            ..HttpSettingsPatch::default()
        });
        h.apply(&HttpSettingsPatch {
            via: Some(None),
            ..HttpSettingsPatch::default()
        });
        assert_eq!(h.response_timeout, Duration::from_secs(5));
        assert_eq!(h.header_timeout, Duration::from_secs(10));
        assert_eq!(h.max_body, Some(1 << 20));
        assert_eq!(h.via, None);
        assert_eq!(
            h.differences(),
            vec!["response_timeout 5s".to_string(), "max_body 1m".to_string()]
        );
        assert!(HttpSettings::default().differences().is_empty());
    }
}
