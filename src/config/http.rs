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
    format_duration, in_range, ConfigError, ErrorPage, ForwardedFor, HashKey, HeaderEdit,
    HttpSettings, NormalizePath,
};
use super::settings::{http_table, About, Entry, Explain, Field, Kind, Scope, HTTP_EXPLAIN_ORDER};
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

impl HttpSettings {
    /// Checks every bound; the message names the key, the value and the range.
    pub(crate) fn check(&self) -> Result<(), String> {
        HTTP.iter().try_for_each(|e| e.check(self))?;
        if self.max_request_line > self.max_header_bytes {
            return Err(format!(
                "max_request_line: {} is more than max_header_bytes {} (the request line is part of the head)",
                self.max_request_line, self.max_header_bytes
            ));
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

    /// The settings that differ from the defaults, each as `key value` (for `quill check`), in
    /// [`HTTP_EXPLAIN_ORDER`].
    pub(crate) fn differences(&self) -> Vec<String> {
        let d = HttpSettings::default();
        let mut out = Vec::new();
        for key in HTTP_EXPLAIN_ORDER {
            if let Some(e) = HTTP.iter().find(|e| e.about().key == *key) {
                if !e.is_default(self, &d) {
                    out.push(format!("{key} {}", e.shown(self)));
                }
                continue;
            }
            let shown: Vec<String> = match *key {
                "request_headers" => self.request_headers.iter().map(show_edit).collect(),
                "response_headers" => self.response_headers.iter().map(show_edit).collect(),
                "error_pages" => self
                    .error_pages
                    .iter()
                    .map(|p| format!("{} {}", p.status, p.path.display()))
                    .collect(),
                _ => Vec::new(),
            };
            if !shown.is_empty() {
                out.push(format!("{key} {}", shown.join(", ")));
            }
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
        if n != 0 && n.is_multiple_of(1 << shift) {
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

/// A `hash_key` (`--hash-key`): `client`, `header NAME` (a field name) or `cookie NAME`, each name
/// a token of at most 64 characters. The error names the value and what was expected.
pub(crate) fn parse_hash_key(text: &str) -> Result<HashKey, String> {
    let mut words = text.split_ascii_whitespace();
    let (key, name) = match (words.next(), words.next(), words.next()) {
        (Some("client"), None, _) => return Ok(HashKey::Client),
        (Some("header"), Some(name), None) => (HashKey::Header(name.into()), name),
        (Some("cookie"), Some(name), None) => (HashKey::Cookie(name.into()), name),
        _ => {
            return Err(format!(
                "hash_key '{}': expected client, header NAME or cookie NAME",
                text.escape_debug()
            ))
        }
    };
    if !is_token(name) || name.len() > 64 {
        return Err(format!(
            "hash_key '{}': '{}' is not a field or cookie name (a token of at most 64 characters)",
            text.escape_debug(),
            name.escape_debug()
        ));
    }
    Ok(key)
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

// === The grammars of the [http] settings (`settings::http_table`'s kinds) ===

/// Reads a file value with `parse`; the error names the key (its line is the value's).
fn read_value<T>(
    key: &str,
    raw: &Spanned<toml::Value>,
    parse: impl FnOnce(&toml::Value) -> Result<T, String>,
) -> Result<T, (String, Range<usize>)> {
    parse(raw.get_ref()).map_err(|e| (format!("{key}: {e}"), raw.span()))
}

/// Drops a message's `key: ` prefix (the reader adds it back with the line).
fn reason(key: &str, e: String) -> String {
    e.trim_start_matches(key)
        .trim_start_matches(": ")
        .to_string()
}

/// A size in a file: bytes, or a string with k, m or g.
fn size(v: &toml::Value) -> Result<u64, String> {
    match v {
        toml::Value::Integer(n) => {
            u64::try_from(*n).map_err(|_| format!("{n} is not a size (bytes, 0 or more)"))
        }
        toml::Value::String(s) => parse_size(s),
        other => Err(format!(
            "{} is not a size (expected bytes, or a number with k, m or g such as \"16k\")",
            shown(other)
        )),
    }
}

/// A timeout of an HTTP listener ([`check_timeout`]).
pub(crate) struct HttpSecs;

impl Kind for HttpSecs {
    type Value = Duration;
    const TYPE: &'static str = "duration";
    type Raw = Spanned<toml::Value>;
    fn read(&self, key: &str, raw: &Self::Raw) -> Result<Duration, (String, Range<usize>)> {
        read_value(key, raw, |v| {
            let d = match v {
                toml::Value::Integer(n) => match u64::try_from(*n) {
                    Ok(s) if s <= super::model::MAX_DURATION.as_secs() => Duration::from_secs(s),
                    _ => return Err(format!("{n} is not a duration of 0 to 30 days")),
                },
                // Never a control character in a message: it must stay one line.
                toml::Value::String(s) if s.chars().any(char::is_control) => {
                    return Err(format!(
                        "invalid duration '{}' (expected e.g. 30, 500ms, 2s, 5m, 1h)",
                        s.escape_debug()
                    ))
                }
                toml::Value::String(s) => super::model::parse_duration(s)?,
                other => {
                    return Err(format!(
                        "{} is not a duration (expected e.g. 30, \"500ms\", \"2s\", \"5m\")",
                        shown(other)
                    ))
                }
            };
            // The range check names the key itself: keep only its reason.
            check_timeout(key, d)
                .map(|()| d)
                .map_err(|e| reason(key, e))
        })
    }
    fn check(&self, name: &str, v: &Duration) -> Result<(), String> {
        check_timeout(name, *v)
    }
    fn shown(&self, v: &Duration) -> String {
        format_duration(*v)
    }
}

/// `max_body`: a size, or none (unlimited).
pub(crate) struct Size;

impl Kind for Size {
    type Value = Option<u64>;
    const TYPE: &'static str = "size";
    type Raw = Spanned<toml::Value>;
    fn read(&self, key: &str, raw: &Self::Raw) -> Result<Option<u64>, (String, Range<usize>)> {
        read_value(key, raw, size).map(Some)
    }
    fn shown(&self, v: &Option<u64>) -> String {
        v.map_or_else(|| "none".to_string(), format_size)
    }
}

/// A number within `range`; `sized`: written as a size (`16k`).
pub(crate) struct Ranged {
    pub range: std::ops::RangeInclusive<u64>,
    pub sized: bool,
}

impl Kind for Ranged {
    type Value = u32;
    const TYPE: &'static str = "integer";
    type Raw = Spanned<toml::Value>;
    fn read(&self, key: &str, raw: &Self::Raw) -> Result<u32, (String, Range<usize>)> {
        read_value(key, raw, |v| {
            let range = self.range.clone();
            let n = if self.sized {
                size(v)?
            } else {
                match v {
                    toml::Value::Integer(n) => u64::try_from(*n).map_err(|_| {
                        format!("{n} is out of range ({} to {})", range.start(), range.end())
                    })?,
                    other => return Err(format!("{} is not an integer", shown(other))),
                }
            };
            in_range(key, n, range).map_err(|e| reason(key, e))?;
            u32::try_from(n).map_err(|_| format!("{n} is too large"))
        })
    }
    fn check(&self, name: &str, v: &u32) -> Result<(), String> {
        in_range(name, (*v).into(), self.range.clone())
    }
    fn type_name(&self) -> &'static str {
        if self.sized {
            "size"
        } else {
            Self::TYPE
        }
    }
    fn shown(&self, v: &u32) -> String {
        if self.sized {
            format_size((*v).into())
        } else {
            v.to_string()
        }
    }
}

/// `true` or `false`.
pub(crate) struct HttpBool;

impl Kind for HttpBool {
    type Value = bool;
    const TYPE: &'static str = "bool";
    type Raw = Spanned<toml::Value>;
    fn read(&self, key: &str, raw: &Self::Raw) -> Result<bool, (String, Range<usize>)> {
        read_value(key, raw, |v| match v {
            toml::Value::Boolean(b) => Ok(*b),
            other => Err(format!("{} is not true or false", shown(other))),
        })
    }
    fn shown(&self, v: &bool) -> String {
        v.to_string()
    }
}

/// `forwarded_for`: append, replace or off.
pub(crate) struct ForwardedForWord;

impl Kind for ForwardedForWord {
    type Value = ForwardedFor;
    const TYPE: &'static str = "string";
    type Raw = Spanned<toml::Value>;
    fn read(&self, key: &str, raw: &Self::Raw) -> Result<ForwardedFor, (String, Range<usize>)> {
        read_value(key, raw, |v| {
            v.as_str().and_then(parse_forwarded_for).ok_or_else(|| {
                format!(
                    "invalid value {} (expected \"append\", \"replace\" or \"off\")",
                    shown(v)
                )
            })
        })
    }
    fn shown(&self, v: &ForwardedFor) -> String {
        forwarded_for_name(*v).to_string()
    }
}

/// `trusted_proxies`: a list of addresses or networks.
pub(crate) struct Proxies;

impl Kind for Proxies {
    type Value = Vec<Net>;
    const TYPE: &'static str = "array";
    type Raw = Spanned<toml::Value>;
    fn read(&self, key: &str, raw: &Self::Raw) -> Result<Vec<Net>, (String, Range<usize>)> {
        read_value(key, raw, |v| {
            let not_list = || {
                format!(
                    "{} is not a list of addresses or networks (e.g. [\"10.0.0.0/8\", \"127.0.0.1\"])",
                    shown(v)
                )
            };
            let list = v.as_array().ok_or_else(not_list)?;
            if list.len() > MAX_TRUSTED_PROXIES {
                return Err(format!(
                    "{} entries (at most {})",
                    list.len(),
                    MAX_TRUSTED_PROXIES
                ));
            }
            list.iter()
                .map(|e| {
                    let text = e.as_str().ok_or_else(not_list)?;
                    if text.chars().any(char::is_control) {
                        return Err(format!(
                            "'{}' is not an address or network",
                            text.escape_debug()
                        ));
                    }
                    crate::acl::parse_net(text, None)
                        .map_err(|why| format!("'{}': {why}", text.escape_debug()))
                })
                .collect()
        })
    }
    fn check(&self, name: &str, v: &Vec<Net>) -> Result<(), String> {
        if v.len() > MAX_TRUSTED_PROXIES {
            return Err(format!(
                "{name}: {} entries (at most {MAX_TRUSTED_PROXIES})",
                v.len()
            ));
        }
        Ok(())
    }
    fn shown(&self, v: &Vec<Net>) -> String {
        let nets: Vec<String> = v.iter().map(|n| n.to_string()).collect();
        nets.join(" ")
    }
}

/// `via`: true (`quill`), false (none) or a name.
pub(crate) struct ViaWord;

impl Kind for ViaWord {
    type Value = Option<String>;
    const TYPE: &'static str = "string";
    type Raw = Spanned<toml::Value>;
    fn read(&self, key: &str, raw: &Self::Raw) -> Result<Option<String>, (String, Range<usize>)> {
        read_value(key, raw, |v| match v {
            toml::Value::Boolean(true) => Ok(Some("quill".to_string())),
            toml::Value::Boolean(false) => Ok(None),
            toml::Value::String(name) => check_via(name)
                .map(|()| Some(name.clone()))
                .map_err(|e| e.trim_start_matches("via: ").to_string()),
            other => Err(format!("{} is not a name or true or false", shown(other))),
        })
    }
    fn check(&self, _name: &str, v: &Option<String>) -> Result<(), String> {
        v.as_deref().map_or(Ok(()), check_via)
    }
    fn shown(&self, v: &Option<String>) -> String {
        v.as_ref()
            .map_or_else(|| "none".to_string(), |v| format!("\"{v}\""))
    }
}

/// `normalize_path`: match or forward.
pub(crate) struct NormalizeWord;

impl Kind for NormalizeWord {
    type Value = NormalizePath;
    const TYPE: &'static str = "string";
    type Raw = Spanned<toml::Value>;
    fn read(&self, key: &str, raw: &Self::Raw) -> Result<NormalizePath, (String, Range<usize>)> {
        read_value(key, raw, |v| {
            v.as_str().and_then(parse_normalize_path).ok_or_else(|| {
                format!(
                    "invalid value {} (expected \"match\" or \"forward\")",
                    shown(v)
                )
            })
        })
    }
    fn shown(&self, v: &NormalizePath) -> String {
        match v {
            NormalizePath::Match => "match".to_string(),
            NormalizePath::Forward => format!(
                "{} (servers get the path in normal form)",
                normalize_path_name(*v)
            ),
        }
    }
}

/// Generates `HttpSettingsPatch` (what one `[http]` or `[listener.http]` table sets), its
/// application and the descriptors `HTTP` from the table, with the structured keys given
/// before the `;`.
macro_rules! define_http_patch {
    (
        { $( $xfield:ident : $xty:ty, )* } ;
        $(
            $(#[doc = $doc:literal])*
            $field:ident : $ty:ty = $default:expr, $kty:ident $({ $($kbody:tt)* })?, $bounds:expr;
        )*
    ) => {
        /// A partial `HttpSettings`: what one table (`[http]`, a `[listener.http]`) sets.
        /// Applied key by key over the defaults.
        #[derive(Clone, Debug, Default)]
        pub(crate) struct HttpSettingsPatch {
            $( pub $field: Option<$ty>, )*
            $( pub $xfield: Option<$xty>, )*
        }

        impl HttpSettings {
            /// Sets every key the patch sets (a list replaces the list it overrides).
            pub(crate) fn apply(&mut self, p: &HttpSettingsPatch) {
                $( if let Some(v) = &p.$field { self.$field = v.clone(); } )*
                $( if let Some(v) = &p.$xfield { self.$xfield = v.clone(); } )*
            }
        }

        /// The descriptors of the `[http]` settings, in the table's order.
        pub(crate) static HTTP: &[&dyn Entry<HttpSettings>] = &[
            $( &Field::<HttpSettings, _> {
                about: About {
                    key: stringify!($field),
                    word: None,
                    bounds: $bounds,
                    doc: concat!($($doc, )*),
                    scope: Scope::All,
                    explain: Explain::Listed,
                },
                kind: $kty $({ $($kbody)* })?,
                get: |h: &HttpSettings| &h.$field,
                get_mut: |h: &mut HttpSettings| &mut h.$field,
            }, )*
        ];
    };
}

http_table! {
    define_http_patch
    {
        request_headers: Vec<HeaderEdit>,
        response_headers: Vec<HeaderEdit>,
        error_pages: Vec<ErrorPage>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_keys() {
        assert_eq!(parse_hash_key("client"), Ok(HashKey::Client));
        assert_eq!(
            parse_hash_key(" header  X-User "),
            Ok(HashKey::Header("X-User".into()))
        );
        assert_eq!(
            parse_hash_key("cookie session"),
            Ok(HashKey::Cookie("session".into()))
        );
        for bad in [
            "",
            "header",
            "cookie",
            "client x",
            "header a b",
            "query q",
            "Header X",
        ] {
            let e = parse_hash_key(bad).unwrap_err();
            assert!(
                e.contains("expected client, header NAME or cookie NAME"),
                "{bad}: {e}"
            );
        }
        for bad in ["header X:User", "cookie a=b", "cookie \"s\""] {
            let e = parse_hash_key(bad).unwrap_err();
            assert!(e.contains("is not a field or cookie name"), "{bad}: {e}");
        }
        let long = format!("header {}", "x".repeat(65));
        assert!(parse_hash_key(&long).is_err());
        // What `quill check` prints reads back as the same key.
        for key in ["client", "header X-User", "cookie session"] {
            assert_eq!(parse_hash_key(key).unwrap().to_string(), key);
        }
    }

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
            max_body: Some(Some(1 << 20)),
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
