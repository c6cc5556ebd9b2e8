//! Reading `[[listener.route]]` tables (DESIGN §6.2) into `model::RouteConfig`: matchers, exactly
//! one action, header edits, path rewrite and rate limit, each checked with the line of its key.
//! Whether a `pool` action names a pool that exists is checked by the loader, which knows them.

use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use crate::acl;

use super::http::{edits, shown, RawEdits};
use super::model::{
    compile_pattern, parse_rate, ConfigError, HostMatch, PathMatch, RateLimit, RouteAction,
    RouteConfig, ValueMatch, MAX_RATE, MAX_RESPOND_BODY,
};

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
    methods: Option<Spanned<Vec<String>>>,
    headers: Option<Spanned<toml::Table>>,
    client_acl: Option<Spanned<u8>>,
    pool: Option<Spanned<String>>,
    redirect: Option<Spanned<RawRedirect>>,
    respond: Option<Spanned<RawRespond>>,
    deny: Option<Spanned<bool>>,
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

impl RawRoute {
    /// The route numbered `n` (from 1) of a listener, checked; errors start with `FILE:LINE:`.
    pub(super) fn build(
        &self,
        n: usize,
        span: Range<usize>,
        at: &dyn Fn(Range<usize>) -> String,
    ) -> Result<RouteConfig, ConfigError> {
        let fail = |span: Range<usize>, e: String| ConfigError::usage(format!("{}{e}", at(span)));
        let name = match &self.name {
            Some(v) => {
                let name = v.get_ref().trim();
                if name.is_empty() || name.len() > 64 || !visible(name) {
                    return Err(fail(
                        v.span(),
                        format!(
                            "route name '{}': 1 to 64 visible characters, no spaces",
                            name.escape_debug()
                        ),
                    ));
                }
                name.to_string()
            }
            None => format!("route-{n}"),
        };
        let named = |e: String| format!("route '{name}': {e}");
        let mut hosts = Vec::new();
        if let Some(v) = &self.host {
            let list = match v.get_ref() {
                toml::Value::Array(a) => a.clone(),
                one => vec![one.clone()],
            };
            if list.is_empty() || list.len() > MAX_MATCHERS {
                return Err(fail(
                    v.span(),
                    named(format!("host: 1 to {MAX_MATCHERS} hosts")),
                ));
            }
            for h in &list {
                hosts.push(host(h).map_err(|e| fail(v.span(), named(e)))?);
            }
        }
        let path = match (&self.path, &self.path_regex) {
            (Some(_), Some(r)) => {
                return Err(fail(
                    r.span(),
                    named("path and path_regex: give one or the other".into()),
                ))
            }
            (Some(p), None) => {
                let prefix = p.get_ref();
                sized("path", prefix)
                    .and_then(|()| {
                        if prefix.starts_with('/') && visible(prefix) && !prefix.contains('?') {
                            normal_prefix("path", prefix)
                        } else {
                            Err(format!(
                                "path: '{}' is not a path prefix (starts with /, no space or ?)",
                                prefix.escape_debug()
                            ))
                        }
                    })
                    .map_err(|e| fail(p.span(), named(e)))?;
                Some(PathMatch::Prefix(prefix.clone()))
            }
            (None, Some(r)) => {
                sized("path_regex", r.get_ref())
                    .and_then(|()| compile_pattern(r.get_ref()).map(drop))
                    .map_err(|e| fail(r.span(), named(format!("path_regex: {e}"))))?;
                Some(PathMatch::Regex(r.get_ref().clone()))
            }
            (None, None) => None,
        };
        let mut methods = Vec::new();
        if let Some(m) = &self.methods {
            if m.get_ref().is_empty() || m.get_ref().len() > MAX_MATCHERS {
                return Err(fail(
                    m.span(),
                    named(format!("methods: 1 to {MAX_MATCHERS} methods")),
                ));
            }
            for word in m.get_ref() {
                if word.is_empty()
                    || word.len() > 32
                    || !word
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                {
                    return Err(fail(
                        m.span(),
                        named(format!(
                            "methods: '{}' is not a method",
                            word.escape_debug()
                        )),
                    ));
                }
                // Methods are case-sensitive (RFC 9110 §9.1): `get` is not GET, and is most
                // likely a typo.
                if word.bytes().any(|b| b.is_ascii_lowercase()) {
                    return Err(fail(
                        m.span(),
                        named(format!(
                            "methods: '{word}' (methods are case-sensitive: write {})",
                            word.to_ascii_uppercase()
                        )),
                    ));
                }
                methods.push(word.clone());
            }
        }
        let mut headers = Vec::new();
        if let Some(t) = &self.headers {
            let f = |e: String| fail(t.span(), named(format!("headers: {e}")));
            if t.get_ref().is_empty() || t.get_ref().len() > MAX_MATCHERS {
                return Err(f(format!("1 to {MAX_MATCHERS} header matchers")));
            }
            for (field, v) in t.get_ref() {
                if field.is_empty()
                    || !field
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
                {
                    return Err(f(format!(
                        "'{}' is not a header name",
                        field.escape_debug()
                    )));
                }
                let m = match v {
                    toml::Value::String(s) => {
                        if s.len() > MAX_ROUTE_TEXT {
                            return Err(f(format!("{field}: longer than {MAX_ROUTE_TEXT} bytes")));
                        }
                        ValueMatch::Exact(s.clone())
                    }
                    toml::Value::Table(r) if r.len() == 1 && r.contains_key("regex") => {
                        let Some(p) = r.get("regex").and_then(|p| p.as_str()) else {
                            return Err(f(format!("{field}: regex must be a string")));
                        };
                        sized(field, p)
                            .and_then(|()| compile_pattern(p).map(drop))
                            .map_err(|e| f(format!("{field}: {e}")))?;
                        ValueMatch::Regex(p.to_string())
                    }
                    other => {
                        return Err(f(format!(
                            "{field} = {} (expected a value or {{ regex = \"...\" }})",
                            shown(other)
                        )))
                    }
                };
                headers.push((field.to_ascii_lowercase(), m));
            }
        }
        let client_acl = match &self.client_acl {
            Some(n) => Some(
                acl::parse_list(&n.get_ref().to_string())
                    .map_err(|e| fail(n.span(), named(format!("client_acl: {e}"))))?,
            ),
            None => None,
        };
        let action = self.action(&span, &named, &fail)?;
        let request_headers =
            edits(&self.request_headers, "request_headers", at)?.unwrap_or_default();
        let response_headers =
            edits(&self.response_headers, "response_headers", at)?.unwrap_or_default();
        let rewrite_path = match &self.rewrite_path {
            Some(r) => {
                let RawRewrite { prefix, replace } = r.get_ref();
                let ok = |s: &str| s.starts_with('/') && visible(s) && s.len() <= MAX_ROUTE_TEXT;
                if !ok(prefix) || !ok(replace) || prefix.contains('?') || replace.contains('?') {
                    return Err(fail(
                        r.span(),
                        named(
                            "rewrite_path: prefix and replace must be paths (start with /, no space or ?)"
                                .into(),
                        ),
                    ));
                }
                if !matches!(action, RouteAction::Pool(_)) {
                    return Err(fail(
                        r.span(),
                        named("rewrite_path: only a route to a pool sends a path on".into()),
                    ));
                }
                normal_prefix("rewrite_path: prefix", prefix)
                    .map_err(|e| fail(r.span(), named(e)))?;
                Some((prefix.clone(), replace.clone()))
            }
            None => None,
        };
        let rate = match (&self.rate, &self.burst) {
            (None, None) => None,
            (None, Some(b)) => {
                return Err(fail(b.span(), named("burst needs a rate".into())));
            }
            (Some(r), burst) => {
                let (count, period) =
                    parse_rate(r.get_ref()).map_err(|e| fail(r.span(), named(e)))?;
                let burst = match burst {
                    Some(b) if *b.get_ref() == 0 || *b.get_ref() > MAX_RATE => {
                        return Err(fail(
                            b.span(),
                            named(format!(
                                "burst: {} is out of range (1 to {MAX_RATE})",
                                b.get_ref()
                            )),
                        ))
                    }
                    Some(b) => *b.get_ref(),
                    // By default a client may spend one period's allowance at once.
                    None => count,
                };
                Some(RateLimit {
                    count,
                    period,
                    burst,
                })
            }
        };
        Ok(RouteConfig {
            sni: self.sni_of(&|s, e| fail(s, named(e)))?,
            name,
            hosts,
            path,
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

    /// `sni = "name"` or a list of names and `*.suffix` wildcards (TCP listeners: the TLS
    /// ClientHello's server name), lower-cased.
    fn sni_of(
        &self,
        fail: &dyn Fn(Range<usize>, String) -> ConfigError,
    ) -> Result<Vec<HostMatch>, ConfigError> {
        let Some(v) = &self.sni else {
            return Ok(Vec::new());
        };
        let list = match v.get_ref() {
            toml::Value::Array(a) => a.clone(),
            one => vec![one.clone()],
        };
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

    /// The one action the route gives.
    fn action(
        &self,
        span: &Range<usize>,
        named: &dyn Fn(String) -> String,
        fail: &dyn Fn(Range<usize>, String) -> ConfigError,
    ) -> Result<RouteAction, ConfigError> {
        let given: Vec<(&str, Range<usize>)> = [
            ("pool", self.pool.as_ref().map(|v| v.span())),
            ("redirect", self.redirect.as_ref().map(|v| v.span())),
            ("respond", self.respond.as_ref().map(|v| v.span())),
            ("deny", self.deny.as_ref().map(|v| v.span())),
        ]
        .into_iter()
        .filter_map(|(k, s)| s.map(|s| (k, s)))
        .collect();
        match given.as_slice() {
            [] => {
                return Err(fail(
                    span.clone(),
                    named("no action (give one of pool, redirect, respond, deny)".into()),
                ))
            }
            [_] => {}
            [(a, _), (b, s), ..] => {
                return Err(fail(
                    s.clone(),
                    named(format!("{a} and {b}: a route has exactly one action")),
                ))
            }
        }
        if let Some(p) = &self.pool {
            let name = p.get_ref().trim();
            if name.is_empty() {
                return Err(fail(p.span(), named("pool: no name given".into())));
            }
            return Ok(RouteAction::Pool(name.to_string()));
        }
        if let Some(r) = &self.redirect {
            let RawRedirect { to, status, exact } = r.get_ref();
            let f = |e: String| fail(r.span(), named(format!("redirect: {e}")));
            sized("to", to).map_err(f)?;
            if !visible(to) {
                return Err(f(format!(
                    "to '{}' holds a space or control character",
                    to.escape_debug()
                )));
            }
            let status = status.unwrap_or(302);
            if ![301, 302, 303, 307, 308].contains(&status) {
                return Err(f(format!(
                    "status {status} is not a redirect (expected 301, 302, 303, 307 or 308)"
                )));
            }
            return Ok(RouteAction::Redirect {
                to: to.clone(),
                status,
                exact: exact.unwrap_or(false),
            });
        }
        if let Some(r) = &self.respond {
            let RawRespond {
                status,
                body,
                content_type,
            } = r.get_ref();
            let f = |e: String| fail(r.span(), named(format!("respond: {e}")));
            let status = status.unwrap_or(200);
            // A 1xx is not a final answer: the client would wait for another.
            if !(200..=599).contains(&status) {
                return Err(f(format!("status {status} is out of range (200 to 599)")));
            }
            let body = body.clone().unwrap_or_default();
            if body.len() > MAX_RESPOND_BODY {
                return Err(f(format!("body: longer than {MAX_RESPOND_BODY} bytes")));
            }
            if matches!(status, 204 | 304) && !body.is_empty() {
                return Err(f(format!("status {status} has no body")));
            }
            let content_type = content_type
                .clone()
                .unwrap_or_else(|| "text/plain; charset=utf-8".into());
            sized("content_type", &content_type).map_err(f)?;
            if !content_type
                .bytes()
                .all(|b| b == b' ' || b.is_ascii_graphic())
            {
                return Err(f(format!(
                    "content_type '{}' holds a control character",
                    content_type.escape_debug()
                )));
            }
            return Ok(RouteAction::Respond {
                status,
                body,
                content_type,
            });
        }
        match &self.deny {
            Some(d) if *d.get_ref() => Ok(RouteAction::Deny),
            Some(d) => Err(fail(
                d.span(),
                named("deny = false is not an action (leave it out, or give another)".into()),
            )),
            None => Err(fail(span.clone(), named("no action".into()))),
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
