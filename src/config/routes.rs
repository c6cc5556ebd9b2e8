//! Reading `[[listener.route]]` tables (docs/design.md#http-routes) into `model::RouteConfig`:
//! matchers, exactly one action, header edits, path rewrite and rate limit, each checked with the
//! line of its key. Whether a `pool` action names a pool that exists is checked by the loader,
//! which knows them.

use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::acl;

use super::http::{edits, shown, RawEdits};
use super::model::{
    compile_pattern, parse_rate, ConfigError, HostMatch, PathCase, PathMatch, RateLimit,
    RefererRule, RouteAction, RouteConfig, ValueMatch, MAX_RATE, MAX_RESPOND_BODY,
};
use super::web::{RawCgi, RawFastcgi, RawStatic};

/// The longest host, path prefix, redirect target or content type a route may name.
const MAX_ROUTE_TEXT: usize = 2048;
/// The most hosts, methods or header matchers in one route.
const MAX_MATCHERS: usize = 256;

/// One `[[listener.route]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    name: Option<Spanned<String>>,
    host: Option<Spanned<toml::Value>>,
    sni: Option<Spanned<toml::Value>>,
    path: Option<Spanned<String>>,
    path_regex: Option<Spanned<String>>,
    path_case: Option<Spanned<String>>,
    invalid_referer: Option<Spanned<RawReferer>>,
    methods: Option<Spanned<Vec<String>>>,
    headers: Option<Spanned<toml::Table>>,
    client_acl: Option<Spanned<u8>>,
    pool: Option<Spanned<String>>,
    redirect: Option<Spanned<RawRedirect>>,
    respond: Option<Spanned<RawRespond>>,
    deny: Option<Spanned<bool>>,
    #[serde(rename = "static")]
    static_files: Option<Spanned<RawStatic>>,
    fastcgi: Option<Spanned<RawFastcgi>>,
    cgi: Option<Spanned<RawCgi>>,
    request_headers: Option<Spanned<RawEdits>>,
    response_headers: Option<Spanned<RawEdits>>,
    rewrite_path: Option<Spanned<RawRewrite>>,
    rate: Option<Spanned<String>>,
    burst: Option<Spanned<u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRedirect {
    to: String,
    status: Option<u16>,
    exact: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRespond {
    status: Option<u16>,
    body: Option<String>,
    content_type: Option<String>,
}

/// `invalid_referer = { valid, none, blocked, server_names }` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReferer {
    valid: Option<Vec<toml::Value>>,
    none: Option<bool>,
    blocked: Option<bool>,
    server_names: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRewrite {
    prefix: String,
    replace: String,
}

/// Visible ASCII only (no space, no control byte): what may go into a request line or a field.
fn visible(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_graphic())
}

/// Checks a text a route sends or compares: not empty, at most [`MAX_ROUTE_TEXT`] bytes.
fn sized(what: &str, s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err(format!("{what}: must not be empty"));
    }
    if s.len() > MAX_ROUTE_TEXT {
        return Err(format!("{what}: longer than {MAX_ROUTE_TEXT} bytes"));
    }
    Ok(())
}

fn host(v: &toml::Value) -> Result<HostMatch, String> {
    let Some(h) = v.as_str() else {
        return Err(format!("host: {} is not a host name", shown(v)));
    };
    sized("host", h)?;
    let bad = || {
        format!(
            "host: '{}' is not a host name or *.suffix (no port, scheme or path)",
            h.escape_debug()
        )
    };
    let h = h.to_ascii_lowercase();
    let (suffix, name) = match h.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, h.as_str()),
    };
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    // An IPv6 literal in brackets is a host too (exact only).
    let ipv6 = !suffix
        && name.starts_with('[')
        && name.ends_with(']')
        && name[1..name.len() - 1]
            .parse::<std::net::Ipv6Addr>()
            .is_ok();
    match (ok || ipv6, suffix) {
        (false, _) => Err(bad()),
        (true, true) => Ok(HostMatch::Suffix(format!(".{name}"))),
        (true, false) => Ok(HostMatch::Exact(name.to_string())),
    }
}

/// Turns a key's span and reason into the load's error; the route's ones start `route 'NAME': `.
type Fail<'a> = &'a dyn Fn(Range<usize>, String) -> ConfigError;

/// One key given as a single value or as a list of them.
fn one_or_list(v: &toml::Value) -> Vec<toml::Value> {
    match v {
        toml::Value::Array(a) => a.clone(),
        one => vec![one.clone()],
    }
}

/// A `path` prefix: sized, starts with `/`, visible, no `?`, in normal form.
fn path_prefix(prefix: &str) -> Result<(), String> {
    sized("path", prefix)?;
    if prefix.starts_with('/') && visible(prefix) && !prefix.contains('?') {
        normal_prefix("path", prefix)
    } else {
        Err(format!(
            "path: '{}' is not a path prefix (starts with /, no space or ?)",
            prefix.escape_debug()
        ))
    }
}

/// One word of `methods`: a token of at most 32 bytes, in upper case.
fn method(word: &str) -> Result<(), String> {
    if word.is_empty()
        || word.len() > 32
        || !word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(format!(
            "methods: '{}' is not a method",
            word.escape_debug()
        ));
    }
    // Methods are case-sensitive (RFC 9110 §9.1): `get` is not GET, and is most likely a typo.
    if word.bytes().any(|b| b.is_ascii_lowercase()) {
        return Err(format!(
            "methods: '{word}' (methods are case-sensitive: write {})",
            word.to_ascii_uppercase()
        ));
    }
    Ok(())
}

/// One entry of `headers`: a field name and an exact value or `{ regex = "..." }`; the error
/// is what follows `headers: `.
fn header_match(field: &str, v: &toml::Value) -> Result<ValueMatch, String> {
    if field.is_empty()
        || !field
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    {
        return Err(format!("'{}' is not a header name", field.escape_debug()));
    }
    match v {
        toml::Value::String(s) => {
            if s.len() > MAX_ROUTE_TEXT {
                return Err(format!("{field}: longer than {MAX_ROUTE_TEXT} bytes"));
            }
            Ok(ValueMatch::Exact(s.clone()))
        }
        toml::Value::Table(r) if r.len() == 1 && r.contains_key("regex") => {
            let Some(p) = r.get("regex").and_then(|p| p.as_str()) else {
                return Err(format!("{field}: regex must be a string"));
            };
            sized(field, p)
                .and_then(|()| compile_pattern(p).map(drop))
                .map_err(|e| format!("{field}: {e}"))?;
            Ok(ValueMatch::Regex(p.to_string()))
        }
        other => Err(format!(
            "{field} = {} (expected a value or {{ regex = \"...\" }})",
            shown(other)
        )),
    }
}

/// `redirect = { to, status, exact }`; the error is what follows `redirect: `.
fn redirect(r: &RawRedirect) -> Result<RouteAction, String> {
    let RawRedirect { to, status, exact } = r;
    sized("to", to)?;
    if !visible(to) {
        return Err(format!(
            "to '{}' holds a space or control character",
            to.escape_debug()
        ));
    }
    let status = status.unwrap_or(302);
    if ![301, 302, 303, 307, 308].contains(&status) {
        return Err(format!(
            "status {status} is not a redirect (expected 301, 302, 303, 307 or 308)"
        ));
    }
    Ok(RouteAction::Redirect {
        to: to.clone(),
        status,
        exact: exact.unwrap_or(false),
    })
}

/// `respond = { status, body, content_type }`; the error is what follows `respond: `.
fn respond(r: &RawRespond) -> Result<RouteAction, String> {
    let RawRespond {
        status,
        body,
        content_type,
    } = r;
    let status = status.unwrap_or(200);
    // A 1xx is not a final answer: the client would wait for another.
    if !(200..=599).contains(&status) {
        return Err(format!("status {status} is out of range (200 to 599)"));
    }
    let body = body.clone().unwrap_or_default();
    if body.len() > MAX_RESPOND_BODY {
        return Err(format!("body: longer than {MAX_RESPOND_BODY} bytes"));
    }
    if matches!(status, 204 | 304) && !body.is_empty() {
        return Err(format!("status {status} has no body"));
    }
    let content_type = content_type
        .clone()
        .unwrap_or_else(|| "text/plain; charset=utf-8".into());
    sized("content_type", &content_type)?;
    if !content_type
        .bytes()
        .all(|b| b == b' ' || b.is_ascii_graphic())
    {
        return Err(format!(
            "content_type '{}' holds a control character",
            content_type.escape_debug()
        ));
    }
    Ok(RouteAction::Respond {
        status,
        body,
        content_type,
    })
}

impl RawRoute {
    /// The route numbered `n` (from 1) of a listener, checked; errors start with `FILE:LINE:`.
    /// Keys are checked in a fixed order (name, matchers, action, edits, rewrite, rate, sni), so
    /// a route with several faults always reports the same one.
    pub(super) fn build(
        &self,
        n: usize,
        span: Range<usize>,
        at: &dyn Fn(Range<usize>) -> String,
        dir: &Path,
    ) -> Result<RouteConfig, ConfigError> {
        let name = self.name_of(n, at)?;
        let fail = |span: Range<usize>, e: String| {
            ConfigError::usage(format!("{}route '{name}': {e}", at(span)))
        };
        let hosts = self.hosts_of(&fail)?;
        let path = self.path_of(&fail)?;
        let path_case = self.path_case_of(&fail)?;
        let invalid_referer = self.referer_of(&fail)?;
        let methods = self.methods_of(&fail)?;
        let headers = self.headers_of(&fail)?;
        let client_acl = self.client_acl_of(&fail)?;
        let action = self.action(&span, dir, &fail)?;
        let request_headers =
            edits(&self.request_headers, "request_headers", at)?.unwrap_or_default();
        let response_headers =
            edits(&self.response_headers, "response_headers", at)?.unwrap_or_default();
        let rewrite_path = self.rewrite_of(&action, &fail)?;
        let rate = self.rate_of(&fail)?;
        let sni = self.sni_of(&fail)?;
        Ok(RouteConfig {
            sni,
            name,
            hosts,
            path,
            path_case,
            invalid_referer,
            methods,
            headers,
            client_acl,
            action,
            request_headers,
            response_headers,
            rewrite_path,
            rate,
        })
    }

    /// `name`, trimmed: 1 to 64 visible characters; `route-N` when not given.
    fn name_of(
        &self,
        n: usize,
        at: &dyn Fn(Range<usize>) -> String,
    ) -> Result<String, ConfigError> {
        let Some(v) = &self.name else {
            return Ok(format!("route-{n}"));
        };
        let name = v.get_ref().trim();
        if name.is_empty() || name.len() > 64 || !visible(name) {
            return Err(ConfigError::usage(format!(
                "{}route name '{}': 1 to 64 visible characters, no spaces",
                at(v.span()),
                name.escape_debug()
            )));
        }
        Ok(name.to_string())
    }

    /// `host = "name"` or a list of names and `*.suffix` wildcards.
    fn hosts_of(&self, fail: Fail) -> Result<Vec<HostMatch>, ConfigError> {
        let Some(v) = &self.host else {
            return Ok(Vec::new());
        };
        let list = one_or_list(v.get_ref());
        if list.is_empty() || list.len() > MAX_MATCHERS {
            return Err(fail(v.span(), format!("host: 1 to {MAX_MATCHERS} hosts")));
        }
        list.iter()
            .map(|h| host(h).map_err(|e| fail(v.span(), e)))
            .collect()
    }

    /// `path` (a prefix) or `path_regex`, not both.
    fn path_of(&self, fail: Fail) -> Result<Option<PathMatch>, ConfigError> {
        match (&self.path, &self.path_regex) {
            (Some(_), Some(r)) => Err(fail(
                r.span(),
                "path and path_regex: give one or the other".into(),
            )),
            (Some(p), None) => {
                path_prefix(p.get_ref()).map_err(|e| fail(p.span(), e))?;
                Ok(Some(PathMatch::Prefix(p.get_ref().clone())))
            }
            (None, Some(r)) => {
                sized("path_regex", r.get_ref())
                    .and_then(|()| compile_pattern(r.get_ref()).map(drop))
                    .map_err(|e| fail(r.span(), format!("path_regex: {e}")))?;
                Ok(Some(PathMatch::Regex(r.get_ref().clone())))
            }
            (None, None) => Ok(None),
        }
    }

    /// `path_case = "sensitive" | "insensitive"`, with a `path` or `path_regex` to apply to.
    fn path_case_of(&self, fail: Fail) -> Result<PathCase, ConfigError> {
        let Some(c) = &self.path_case else {
            return Ok(PathCase::default());
        };
        let case = match c.get_ref().as_str() {
            "sensitive" => PathCase::Sensitive,
            "insensitive" => PathCase::Insensitive,
            other => {
                return Err(fail(
                    c.span(),
                    format!(
                        "path_case: '{}' (expected \"sensitive\" or \"insensitive\")",
                        other.escape_debug()
                    ),
                ))
            }
        };
        if self.path.is_none() && self.path_regex.is_none() {
            return Err(fail(
                c.span(),
                "path_case: no path or path_regex to apply to".into(),
            ));
        }
        Ok(case)
    }

    /// `invalid_referer = { valid, none, blocked, server_names }`: at least one thing valid.
    fn referer_of(&self, fail: Fail) -> Result<Option<RefererRule>, ConfigError> {
        let Some(r) = &self.invalid_referer else {
            return Ok(None);
        };
        let f = |e: String| fail(r.span(), format!("invalid_referer: {e}"));
        let RawReferer {
            valid,
            none,
            blocked,
            server_names,
        } = r.get_ref();
        let valid = valid.as_deref().unwrap_or_default();
        if valid.len() > MAX_MATCHERS {
            return Err(f(format!("valid: at most {MAX_MATCHERS} hosts")));
        }
        let rule = RefererRule {
            valid: valid
                .iter()
                .map(|h| {
                    host(h).map_err(|e| f(format!("valid: {}", e.trim_start_matches("host: "))))
                })
                .collect::<Result<_, _>>()?,
            none: none.unwrap_or(false),
            blocked: blocked.unwrap_or(false),
            server_names: server_names.unwrap_or(false),
        };
        if rule == RefererRule::default() {
            return Err(f(
                "nothing is valid, so every request would match (give valid hosts, or none, \
                 blocked or server_names = true)"
                    .into(),
            ));
        }
        Ok(Some(rule))
    }

    /// `methods = [...]`: 1 to [`MAX_MATCHERS`] methods.
    fn methods_of(&self, fail: Fail) -> Result<Vec<String>, ConfigError> {
        let Some(m) = &self.methods else {
            return Ok(Vec::new());
        };
        if m.get_ref().is_empty() || m.get_ref().len() > MAX_MATCHERS {
            return Err(fail(
                m.span(),
                format!("methods: 1 to {MAX_MATCHERS} methods"),
            ));
        }
        for word in m.get_ref() {
            method(word).map_err(|e| fail(m.span(), e))?;
        }
        Ok(m.get_ref().clone())
    }

    /// `headers = { field = "value", other = { regex = "..." } }`, field names lower-cased.
    fn headers_of(&self, fail: Fail) -> Result<Vec<(String, ValueMatch)>, ConfigError> {
        let Some(t) = &self.headers else {
            return Ok(Vec::new());
        };
        let f = |e: String| fail(t.span(), format!("headers: {e}"));
        if t.get_ref().is_empty() || t.get_ref().len() > MAX_MATCHERS {
            return Err(f(format!("1 to {MAX_MATCHERS} header matchers")));
        }
        t.get_ref()
            .iter()
            .map(|(field, v)| {
                Ok((
                    field.to_ascii_lowercase(),
                    header_match(field, v).map_err(f)?,
                ))
            })
            .collect()
    }

    /// `client_acl = N`: the ACL a client's address must pass.
    fn client_acl_of(&self, fail: Fail) -> Result<Option<acl::AclId>, ConfigError> {
        self.client_acl
            .as_ref()
            .map(|n| {
                acl::parse_list(&n.get_ref().to_string())
                    .map_err(|e| fail(n.span(), format!("client_acl: {e}")))
            })
            .transpose()
    }

    /// `rewrite_path = { prefix, replace }`, on a route to a pool only.
    fn rewrite_of(
        &self,
        action: &RouteAction,
        fail: Fail,
    ) -> Result<Option<(String, String)>, ConfigError> {
        let Some(r) = &self.rewrite_path else {
            return Ok(None);
        };
        let RawRewrite { prefix, replace } = r.get_ref();
        let ok = |s: &str| s.starts_with('/') && visible(s) && s.len() <= MAX_ROUTE_TEXT;
        if !ok(prefix) || !ok(replace) || prefix.contains('?') || replace.contains('?') {
            return Err(fail(
                r.span(),
                "rewrite_path: prefix and replace must be paths (start with /, no space or ?)"
                    .into(),
            ));
        }
        if !matches!(action, RouteAction::Pool(_)) {
            return Err(fail(
                r.span(),
                "rewrite_path: only a route to a pool sends a path on".into(),
            ));
        }
        normal_prefix("rewrite_path: prefix", prefix).map_err(|e| fail(r.span(), e))?;
        Ok(Some((prefix.clone(), replace.clone())))
    }

    /// `rate = "N/period"` with an optional `burst` (by default one period's allowance).
    fn rate_of(&self, fail: Fail) -> Result<Option<RateLimit>, ConfigError> {
        let r = match (&self.rate, &self.burst) {
            (None, None) => return Ok(None),
            (None, Some(b)) => return Err(fail(b.span(), "burst needs a rate".into())),
            (Some(r), _) => r,
        };
        let (count, period) = parse_rate(r.get_ref()).map_err(|e| fail(r.span(), e))?;
        let burst = match &self.burst {
            Some(b) if *b.get_ref() == 0 || *b.get_ref() > MAX_RATE => {
                return Err(fail(
                    b.span(),
                    format!("burst: {} is out of range (1 to {MAX_RATE})", b.get_ref()),
                ))
            }
            Some(b) => *b.get_ref(),
            // By default a client may spend one period's allowance at once.
            None => count,
        };
        Ok(Some(RateLimit {
            count,
            period,
            burst,
        }))
    }

    /// `sni = "name"` or a list of names and `*.suffix` wildcards (TCP listeners: the TLS
    /// ClientHello's server name), lower-cased.
    fn sni_of(&self, fail: Fail) -> Result<Vec<HostMatch>, ConfigError> {
        let Some(v) = &self.sni else {
            return Ok(Vec::new());
        };
        let list = one_or_list(v.get_ref());
        if list.is_empty() || list.len() > MAX_MATCHERS {
            return Err(fail(v.span(), format!("sni: 1 to {MAX_MATCHERS} names")));
        }
        let mut names = Vec::with_capacity(list.len());
        for item in &list {
            let name = item
                .as_str()
                .map(str::to_ascii_lowercase)
                .unwrap_or_default();
            let (wild, bare) = match name.strip_prefix("*.") {
                Some(rest) => (true, rest),
                None => (false, name.as_str()),
            };
            let labels_ok = bare.len() <= 253
                && bare.split('.').all(|l| {
                    !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                });
            if !labels_ok {
                return Err(fail(
                    v.span(),
                    format!(
                        "sni: {} is not a host name or *.suffix (letters, digits, - and .)",
                        shown(item)
                    ),
                ));
            }
            names.push(if wild {
                HostMatch::Suffix(format!(".{bare}"))
            } else {
                HostMatch::Exact(bare.to_string())
            });
        }
        Ok(names)
    }

    /// The one action the route gives: exactly one of `pool`, `redirect`, `respond`, `deny`,
    /// `static`, `fastcgi`, `cgi`; the web actions' roots are taken from `dir` when relative.
    fn action(
        &self,
        span: &Range<usize>,
        dir: &Path,
        fail: Fail,
    ) -> Result<RouteAction, ConfigError> {
        self.one_action(span, fail)?;
        if let Some(s) = &self.static_files {
            return s
                .get_ref()
                .build(dir)
                .map(|a| RouteAction::Static(Box::new(a)))
                .map_err(|e| fail(s.span(), format!("static: {e}")));
        }
        if let Some(f) = &self.fastcgi {
            return f
                .get_ref()
                .build(dir)
                .map(|a| RouteAction::Fastcgi(Box::new(a)))
                .map_err(|e| fail(f.span(), format!("fastcgi: {e}")));
        }
        if let Some(c) = &self.cgi {
            return c
                .get_ref()
                .build(dir)
                .map(|a| RouteAction::Cgi(Box::new(a)))
                .map_err(|e| fail(c.span(), format!("cgi: {e}")));
        }
        if let Some(p) = &self.pool {
            let name = p.get_ref().trim();
            if name.is_empty() {
                return Err(fail(p.span(), "pool: no name given".into()));
            }
            return Ok(RouteAction::Pool(name.to_string()));
        }
        if let Some(r) = &self.redirect {
            return redirect(r.get_ref()).map_err(|e| fail(r.span(), format!("redirect: {e}")));
        }
        if let Some(r) = &self.respond {
            return respond(r.get_ref()).map_err(|e| fail(r.span(), format!("respond: {e}")));
        }
        match &self.deny {
            Some(d) if *d.get_ref() => Ok(RouteAction::Deny),
            Some(d) => Err(fail(
                d.span(),
                "deny = false is not an action (leave it out, or give another)".into(),
            )),
            None => Err(fail(span.clone(), "no action".into())),
        }
    }

    /// Refuses a route with no action key or with two (named at the second one's line).
    fn one_action(&self, span: &Range<usize>, fail: Fail) -> Result<(), ConfigError> {
        let given: Vec<(&str, Range<usize>)> = [
            ("pool", self.pool.as_ref().map(|v| v.span())),
            ("redirect", self.redirect.as_ref().map(|v| v.span())),
            ("respond", self.respond.as_ref().map(|v| v.span())),
            ("deny", self.deny.as_ref().map(|v| v.span())),
            ("static", self.static_files.as_ref().map(|v| v.span())),
            ("fastcgi", self.fastcgi.as_ref().map(|v| v.span())),
            ("cgi", self.cgi.as_ref().map(|v| v.span())),
        ]
        .into_iter()
        .filter_map(|(k, s)| s.map(|s| (k, s)))
        .collect();
        match given.as_slice() {
            [] => Err(fail(
                span.clone(),
                "no action (give one of pool, redirect, respond, deny, static, fastcgi, cgi)"
                    .into(),
            )),
            [_] => Ok(()),
            [(a, _), (b, s), ..] => Err(fail(
                s.clone(),
                format!("{a} and {b}: a route has exactly one action"),
            )),
        }
    }
}

/// A path prefix that a request's path in normal form can start with: requests are matched with
/// their path normalised (`quill_core::http1::path`), so `/a//b` or `/%61` would never match.
fn normal_prefix(key: &str, prefix: &str) -> Result<(), String> {
    use quill_core::http1::path;
    let p = prefix.as_bytes();
    if path::is_normal(p) {
        return Ok(());
    }
    let mut out = vec![0u8; p.len()];
    match path::normalize_into(p, &mut out) {
        Ok(n) => Err(format!(
            "{key}: '{}' never matches: request paths are matched in normal form (write '{}')",
            prefix.escape_debug(),
            String::from_utf8_lossy(&out[..n]).escape_debug()
        )),
        Err(_) => Err(format!(
            "{key}: '{}' never matches: it has no normal form (a '..' above the root or a bad %-escape)",
            prefix.escape_debug()
        )),
    }
}

#[cfg(test)]
#[path = "routes_tests.rs"]
mod tests;
