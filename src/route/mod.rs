//! HTTP routes (docs/design.md#http-routes), compiled from `config::RouteConfig`: which route a
//! request takes (first match wins), which route a TLS client's server name takes on a TCP listener
//! ([`Routes::find_sni`]: SNI routing without termination), what the route does with it, the answers Quill writes itself for a route
//! (redirect, fixed response, 403, 404, 429) and the per-client-address rate limits. Each route
//! carries its request counters ([`HttpStats`]), handed on to the route of the same name when the
//! routes are rebuilt (reload, control command).
//!
//! Pure: no sockets, no clock (the time is an argument). Generic over the pool type `P` so that
//! this module needs nothing from `backend` (which holds `Routes<Pool>` in a listener's pool).

// Read by the HTTP session once it routes requests (docs/design.md#http-routes, wired by the
// session's owner); until then only the tests and the controller reach most of it.
#![allow(dead_code)]

use std::borrow::Cow;
use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

pub(crate) mod fastcgi;
mod site;
pub(crate) use site::{Choice, Sites};

use crate::acl::{AclId, Acls};
use crate::config::{
    compile_pattern, CgiAction, HostMatch, PathCase, PathMatch, RateLimit, RefererRule,
    RouteAction, RouteConfig, StaticAction, ValueMatch,
};
use crate::metrics::HttpStats;
use quill_core::http1::path::PathError;
use quill_core::http1::referer::{self, Referer};
use quill_core::http1::rewrite::{HeaderEdit, Overflow};
use quill_core::http1::{self, reason};

/// An HTTP listener's routes, in order.
#[derive(Debug)]
pub(crate) struct Routes<P> {
    pub routes: Vec<Route<P>>,
    /// The process's ACL lists (`client_acl` names one).
    acls: Arc<Acls>,
    /// Requests that matched no route (sent to the listener's own servers, or answered 404),
    /// reported as route [`NO_ROUTE`].
    pub unrouted: Arc<HttpStats>,
    /// The listener's sites (docs/sites.md), when it has any: they choose which routes a
    /// request tries.
    pub sites: Option<Sites>,
}

/// The `route` label of requests that matched no route. A route name has no spaces, so no route
/// can be called that.
pub(crate) const NO_ROUTE: &str = "(no route)";

/// One route: its matchers, its action and the edits on the way.
#[derive(Debug)]
pub(crate) struct Route<P> {
    pub name: String,
    /// Stable across reloads for the same listener and route name: rate limit buckets follow it.
    pub id: u64,
    hosts: Vec<HostMatch>,
    /// TCP listeners: the TLS server names the route takes.
    sni: Vec<HostMatch>,
    path: Option<PathPattern>,
    /// Matches only requests whose `Referer` this rule finds not valid.
    invalid_referer: Option<RefererRule>,
    methods: Vec<Box<[u8]>>,
    headers: Vec<(Box<[u8]>, ValuePattern)>,
    pub client_acl: Option<AclId>,
    pub action: Action<P>,
    /// Applied after the listener's edits (`RequestRewrite::edits[1]`).
    pub request_headers: Vec<HeaderEdit>,
    pub response_headers: Vec<HeaderEdit>,
    /// `(prefix, replace)` for `RequestRewrite::rewrite_path`.
    pub rewrite_path: Option<(String, String)>,
    pub rate: Option<RateLimit>,
    /// Its requests by status class and duration, one block per worker. Shared by the routes
    /// of one listener that have the same name (they count as one), and kept across rebuilds
    /// while a route of that name stays.
    pub stats: Arc<HttpStats>,
}

#[derive(Debug)]
enum PathPattern {
    Prefix(Box<[u8]>),
    /// A prefix compared without ASCII case (`path_case = "insensitive"`).
    PrefixNoCase(Box<[u8]>),
    /// Compiled with `(?i)` when `path_case = "insensitive"`.
    Regex(regex::bytes::Regex),
}

impl PathPattern {
    /// The compiled form of a route's `path` or `path_regex` and its `path_case`.
    fn compile(path: &PathMatch, case: PathCase) -> Result<PathPattern, String> {
        Ok(match (path, case) {
            (PathMatch::Prefix(p), PathCase::Sensitive) => PathPattern::Prefix(p.as_bytes().into()),
            (PathMatch::Prefix(p), PathCase::Insensitive) => {
                PathPattern::PrefixNoCase(p.as_bytes().into())
            }
            (PathMatch::Regex(p), PathCase::Sensitive) => PathPattern::Regex(compile_pattern(p)?),
            (PathMatch::Regex(p), PathCase::Insensitive) => {
                PathPattern::Regex(compile_pattern(&format!("(?i){p}"))?)
            }
        })
    }

    /// Whether `path` (in normal form) matches; no allocation.
    fn matches(&self, path: &[u8]) -> bool {
        match self {
            PathPattern::Prefix(p) => path.starts_with(p),
            PathPattern::PrefixNoCase(p) => path
                .get(..p.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(p)),
            PathPattern::Regex(r) => r.is_match(path),
        }
    }
}

/// Whether `rule` finds the request's `Referer` (`value`, None when it has none) not valid; `host`
/// is the request's own host (without port). No allocation.
fn referer_invalid(rule: &RefererRule, value: Option<&[u8]>, host: Option<&[u8]>) -> bool {
    let valid = match value.map(referer::classify) {
        None => rule.none,
        Some(Referer::Blocked) => rule.blocked,
        Some(Referer::Invalid) => false,
        Some(Referer::Host(h)) => {
            (rule.server_names && host.is_some_and(|own| own.eq_ignore_ascii_case(h)))
                || rule.valid.iter().any(|m| host_matches(m, h))
        }
    };
    !valid
}

#[derive(Debug)]
enum ValuePattern {
    Exact(Box<[u8]>),
    Regex(regex::bytes::Regex),
}

/// What a route does with a request it matches.
#[derive(Debug)]
pub(crate) enum Action<P> {
    /// Proxy to this named pool (shared by every route that names it).
    Pool(Arc<P>),
    /// Answer with a redirect to `to` (plus the request's path and query unless `exact`).
    Redirect {
        to: Box<str>,
        status: u16,
        exact: bool,
    },
    /// Answer with a fixed response.
    Respond {
        status: u16,
        body: Box<str>,
        content_type: Box<str>,
    },
    /// Answer 403.
    Deny,
    /// Serve files from beneath a root (`web`).
    Static(Arc<StaticRoot>),
    /// Run the script a request names under `root` on a server of this FastCGI pool.
    Fastcgi {
        pool: Arc<P>,
        root: Arc<crate::route::fastcgi::FastcgiRoot>,
    },
    /// Run scripts from beneath a root as child processes (`web::cgi`).
    Cgi(Arc<CgiRoot>),
}

/// A `cgi` action's root, open: scripts are looked up beneath its descriptor.
#[derive(Debug)]
pub(crate) struct CgiRoot {
    pub action: CgiAction,
    pub dir: std::os::fd::OwnedFd,
}

impl CgiRoot {
    /// Opens `action.root`; the error names it.
    pub(crate) fn open(action: &CgiAction) -> Result<CgiRoot, String> {
        let root = &action.root;
        let dir =
            std::fs::File::open(root).map_err(|e| format!("cgi: root {}: {e}", root.display()))?;
        if !dir.metadata().map(|m| m.is_dir()).unwrap_or(false) {
            return Err(format!("cgi: root {} is not a directory", root.display()));
        }
        Ok(CgiRoot {
            action: action.clone(),
            dir: dir.into(),
        })
    }
}

/// A `static` action's root, open: the directory's descriptor, from which every file is opened
/// beneath it, and an id that tells this opening from any other (the file caches' key).
#[derive(Debug)]
pub(crate) struct StaticRoot {
    pub action: StaticAction,
    pub dir: std::os::fd::OwnedFd,
    pub id: u64,
}

impl StaticRoot {
    /// Opens `action.root`; the error names it.
    pub(crate) fn open(action: &StaticAction) -> Result<StaticRoot, String> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let dir = std::fs::File::open(&action.root)
            .map_err(|e| format!("static: root {}: {e}", action.root.display()))?;
        if !dir.metadata().map(|m| m.is_dir()).unwrap_or(false) {
            return Err(format!(
                "static: root {} is not a directory",
                action.root.display()
            ));
        }
        Ok(StaticRoot {
            action: action.clone(),
            dir: dir.into(),
            id: NEXT.fetch_add(1, Ordering::Relaxed),
        })
    }
}

/// FNV-1a 64 of `bytes`: a stable hash (the same in every process and release), for route ids
/// and stickiness cookie values.
pub(crate) fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// `r` as 16 lowercase hex digits (request ids, stickiness cookie values).
pub(crate) fn hex16(r: u64) -> [u8; 16] {
    // Eight digits a word: each nibble of 32 bits spread into a byte of its own (the most
    // significant in the highest byte), then 0..=15 mapped to ASCII with a byte's carry from
    // `+ 6` marking the letters (a digit at a time, callgrind put a request's id at 64
    // instructions; with the word check of its value, 208 fewer a request).
    fn digits(x: u64) -> [u8; 8] {
        const ONES: u64 = 0x0101_0101_0101_0101;
        let x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
        let x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
        let x = (x | (x << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
        let letters = ((x + 6 * ONES) >> 4) & ONES;
        (x + u64::from(b'0') * ONES + letters * u64::from(b'a' - b'0' - 10)).to_be_bytes()
    }
    let mut out = [0; 16];
    out[..8].copy_from_slice(&digits(r >> 32));
    out[8..].copy_from_slice(&digits(r & 0xffff_ffff));
    out
}

/// A stable id for a route: FNV-1a over the listener's and the route's names.
fn route_id(listener: &str, route: &str) -> u64 {
    fnv1a(listener.bytes().chain([0u8]).chain(route.bytes()))
}

impl<P> Routes<P> {
    /// Compiles the routes of listener `listener`; `pool` finds a named pool. `old` is the
    /// listener's routes before the change, whose counters the routes of the same name keep;
    /// new counters have room for `workers` workers. Fails (one line) only on what validation
    /// already refuses: a pattern that does not compile, an unknown pool.
    pub(crate) fn build(
        listener: &str,
        config: &[RouteConfig],
        acls: Arc<Acls>,
        pool: impl Fn(&str) -> Option<Arc<P>>,
        old: Option<&Routes<P>>,
        workers: usize,
    ) -> Result<Routes<P>, String> {
        let mut routes: Vec<Route<P>> = Vec::with_capacity(config.len());
        for r in config {
            let id = route_id(listener, &r.name);
            let stats = routes
                .iter()
                .chain(old.into_iter().flat_map(|o| &o.routes))
                .find(|o| o.id == id)
                .map_or_else(|| Arc::new(HttpStats::new(workers)), |o| o.stats.clone());
            let named = |e: String| format!("listener '{listener}': route '{}': {e}", r.name);
            let path = r
                .path
                .as_ref()
                .map(|p| PathPattern::compile(p, r.path_case))
                .transpose()
                .map_err(named)?;
            let mut headers = Vec::with_capacity(r.headers.len());
            for (name, m) in &r.headers {
                let m = match m {
                    ValueMatch::Exact(v) => ValuePattern::Exact(v.as_bytes().into()),
                    ValueMatch::Regex(p) => ValuePattern::Regex(compile_pattern(p).map_err(named)?),
                };
                headers.push((name.as_bytes().into(), m));
            }
            let action = match &r.action {
                RouteAction::Pool(name) => Action::Pool(
                    pool(name).ok_or_else(|| named(format!("no pool named '{name}'")))?,
                ),
                RouteAction::Redirect { to, status, exact } => Action::Redirect {
                    to: to.as_str().into(),
                    status: *status,
                    exact: *exact,
                },
                RouteAction::Respond {
                    status,
                    body,
                    content_type,
                } => Action::Respond {
                    status: *status,
                    body: body.as_str().into(),
                    content_type: content_type.as_str().into(),
                },
                RouteAction::Deny => Action::Deny,
                RouteAction::Static(a) => {
                    Action::Static(Arc::new(StaticRoot::open(a).map_err(named)?))
                }
                RouteAction::Fastcgi(a) => Action::Fastcgi {
                    pool: pool(&a.pool)
                        .ok_or_else(|| named(format!("no pool named '{}'", a.pool)))?,
                    root: Arc::new(crate::route::fastcgi::FastcgiRoot::open(a).map_err(named)?),
                },
                RouteAction::Cgi(a) => Action::Cgi(Arc::new(CgiRoot::open(a).map_err(named)?)),
            };
            routes.push(Route {
                name: r.name.clone(),
                id,
                hosts: r.hosts.clone(),
                sni: r.sni.clone(),
                path,
                invalid_referer: r.invalid_referer.clone(),
                methods: r.methods.iter().map(|m| m.as_bytes().into()).collect(),
                headers,
                client_acl: r.client_acl,
                action,
                request_headers: r.request_headers.clone(),
                response_headers: r.response_headers.clone(),
                rewrite_path: r.rewrite_path.clone(),
                rate: r.rate,
                stats,
            });
        }
        let unrouted =
            old.map_or_else(|| Arc::new(HttpStats::new(workers)), |o| o.unrouted.clone());
        Ok(Routes {
            routes,
            acls,
            unrouted,
            sites: None,
        })
    }

    /// The counters of the route with index `index` in `routes`, or of the requests that matched
    /// none (`None`, or an index past the routes).
    pub(crate) fn stats_of(&self, index: Option<u32>) -> &HttpStats {
        index
            .and_then(|i| self.routes.get(i as usize))
            .map_or(&self.unrouted, |r| &r.stats)
    }

    /// Each route's name and counters once (routes of one name share them), in order, then
    /// [`NO_ROUTE`] and the counters of the requests that matched none.
    pub(crate) fn all_stats(&self) -> Vec<(&str, &HttpStats)> {
        let mut out: Vec<(&str, &HttpStats)> = Vec::with_capacity(self.routes.len() + 1);
        for r in &self.routes {
            if !out.iter().any(|(name, _)| *name == r.name) {
                out.push((&r.name, &r.stats));
            }
        }
        out.push((NO_ROUTE, &self.unrouted));
        out
    }

    /// The first route the request matches. `method` is the method token as sent; `target` the
    /// request target (its path is matched in normal form, see [`normal_path`]; a path without
    /// one matches nothing); `host` the request's host (`RequestHead::authority`: the
    /// absolute-form target's authority, else `Host`); `field` looks a header up by name (lower
    /// case given; compare without case) and gives its value without surrounding spaces (a
    /// route's `headers`, and `referer` for its `invalid_referer`). A route's `client_acl` does
    /// not take part: see [`Routes::permits`].
    pub(crate) fn find<'a, 'b>(
        &'a self,
        method: &[u8],
        target: &[u8],
        host: Option<&'b [u8]>,
        field: impl Fn(&[u8]) -> Option<&'b [u8]>,
    ) -> Option<&'a Route<P>> {
        let path = normal_path(target).ok()?;
        self.find_index(method, &path, host, field)
            .and_then(|i| self.routes.get(i))
    }

    /// As [`Routes::find`] with the path already in normal form ([`normal_path`]), the route's
    /// index in `routes` (for an exchange that keeps its pool snapshot and needs the route again
    /// when the response comes).
    pub(crate) fn find_index<'b>(
        &self,
        method: &[u8],
        path: &[u8],
        host: Option<&'b [u8]>,
        field: impl Fn(&[u8]) -> Option<&'b [u8]>,
    ) -> Option<usize> {
        self.lookup(method, path, host, field).ok().flatten()
    }

    /// As [`Routes::find_index`], with the listener's sites: the site the host names (else the
    /// default site) has its routes tried, and a request none of them matches gets 404
    /// (`Err(404)`); a host no site names gets the routes outside any site (`Ok(None)` when
    /// none matches), or the `unknown_host` status (`Err(404)`, `Err(421)`). No allocation.
    pub(crate) fn lookup<'b>(
        &self,
        method: &[u8],
        path: &[u8],
        host: Option<&'b [u8]>,
        field: impl Fn(&[u8]) -> Option<&'b [u8]>,
    ) -> Result<Option<usize>, u16> {
        let host = host.map(host_name);
        let (site, range) = match &self.sites {
            None => (None, 0..self.routes.len()),
            Some(sites) => match sites.choose(host) {
                Choice::Routes { site, routes } => (site, routes),
                Choice::Status(status) => return Err(status),
            },
        };
        let start = range.start;
        let found = self.routes[range]
            .iter()
            .position(|r| r.matches(method, path, host, &field))
            .map(|i| i + start);
        match (found, site) {
            (None, Some(_)) => Err(404),
            (found, _) => Ok(found),
        }
    }

    /// The first route of a TCP listener whose `sni` names `name`, the server name of a TLS
    /// ClientHello (compared without case; `*.example.com` takes any name under example.com, not
    /// example.com itself).
    pub(crate) fn find_sni(&self, name: &[u8]) -> Option<&Route<P>> {
        self.routes
            .iter()
            .find(|r| r.sni.iter().any(|h| host_matches(h, name)))
    }

    /// Whether the route's `client_acl` lets `client` in (no ACL, or a client on a Unix socket,
    /// always passes, as Pen's `client_acl` does). A client it refuses gets 403.
    pub(crate) fn permits(&self, route: &Route<P>, client: Option<IpAddr>) -> bool {
        match (route.client_acl, client) {
            (Some(n), Some(ip)) => self.acls.permits(n, ip),
            _ => true,
        }
    }
}

impl<P> Route<P> {
    fn matches<'b>(
        &self,
        method: &[u8],
        path: &[u8],
        host: Option<&[u8]>,
        field: &impl Fn(&[u8]) -> Option<&'b [u8]>,
    ) -> bool {
        if !self.methods.is_empty() && !self.methods.iter().any(|m| **m == *method) {
            return false;
        }
        if !self.hosts.is_empty() {
            let Some(host) = host else { return false };
            if !self.hosts.iter().any(|h| host_matches(h, host)) {
                return false;
            }
        }
        if self.path.as_ref().is_some_and(|p| !p.matches(path)) {
            return false;
        }
        if let Some(rule) = &self.invalid_referer {
            if !referer_invalid(rule, field(b"referer"), host) {
                return false;
            }
        }
        self.headers.iter().all(|(name, m)| match field(name) {
            None => false,
            Some(v) => match m {
                ValuePattern::Exact(e) => v == &**e,
                ValuePattern::Regex(r) => r.is_match(v),
            },
        })
    }
}

/// Whether `host` is the matcher's name (without case), or a name under its `*.` suffix.
fn host_matches(h: &HostMatch, host: &[u8]) -> bool {
    match h {
        HostMatch::Exact(name) => host.eq_ignore_ascii_case(name.as_bytes()),
        HostMatch::Suffix(suffix) => {
            let s = suffix.as_bytes();
            host.len() > s.len() && host[host.len() - s.len()..].eq_ignore_ascii_case(s)
        }
    }
}

/// The path of a request target without its query, in the normal form routes match
/// (`quill_core::http1::path`: `//admin`, `/%61dmin`, `/./admin` and `/x/../admin` are all
/// `/admin`). Borrowed when the path is normal already (the usual case: no allocation); an error
/// for a path that has none (`..` above the root, a bad escape: the request gets 400).
pub(crate) fn normal_path(target: &[u8]) -> Result<Cow<'_, [u8]>, PathError> {
    let path = http1::path::target_path(target);
    if http1::path::is_normal(path) {
        return Ok(Cow::Borrowed(path));
    }
    let mut out = vec![0u8; path.len()];
    let n = http1::path::normalize_into(path, &mut out)?;
    out.truncate(n);
    Ok(Cow::Owned(out))
}

/// A `Host` value or authority without userinfo, port and a final dot.
pub(crate) fn host_name(h: &[u8]) -> &[u8] {
    let h = match h.iter().rposition(|&b| b == b'@') {
        Some(i) => &h[i + 1..],
        None => h,
    };
    let h = if h.first() == Some(&b'[') {
        match h.iter().position(|&b| b == b']') {
            Some(i) => &h[..=i],
            None => h,
        }
    } else {
        match h.iter().position(|&b| b == b':') {
            Some(i) => &h[..i],
            None => h,
        }
    };
    h.strip_suffix(b".").unwrap_or(h)
}

/// The path and query of a request target (origin form as is; absolute form after its
/// authority; nothing for `*` and authority form).
fn path_and_query(target: &[u8]) -> &[u8] {
    if target.first() == Some(&b'/') {
        return target;
    }
    let Some(i) = target.windows(3).position(|w| w == b"://") else {
        return b"";
    };
    let rest = &target[i + 3..];
    let end = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(rest.len());
    &rest[end..]
}

// === Answers Quill writes for a route ===

/// Bytes written into a caller's buffer, never past its end.
struct Out<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl Out<'_> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), Overflow> {
        let end = self.len.checked_add(bytes.len()).ok_or(Overflow)?;
        self.buf
            .get_mut(self.len..end)
            .ok_or(Overflow)?
            .copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }

    fn num(&mut self, n: u64) -> Result<(), Overflow> {
        let mut buf = [0; quill_core::decimal::MAX_DIGITS];
        self.put(quill_core::decimal::digits(n, &mut buf))
    }

    /// `HTTP/1.1 STATUS REASON\r\n`.
    fn status(&mut self, status: u16) -> Result<(), Overflow> {
        self.put(b"HTTP/1.1 ")?;
        self.num(status.into())?;
        self.put(b" ")?;
        self.put(reason(status).as_bytes())?;
        self.put(b"\r\n")
    }

    /// `Content-Length`, `Connection`, the blank line, then the body unless `head_only`.
    fn finish(&mut self, body: &[u8], keep_alive: bool, head_only: bool) -> Result<(), Overflow> {
        self.put(b"Content-Length: ")?;
        self.num(body.len() as u64)?;
        self.put(if keep_alive {
            b"\r\nConnection: keep-alive\r\n\r\n"
        } else {
            b"\r\nConnection: close\r\n\r\n"
        })?;
        if !head_only {
            self.put(body)?;
        }
        Ok(())
    }
}

/// Writes into `out` the whole answer of a redirect, respond or deny route to a request for
/// `target` (its path and query follow a redirect's `to`); returns its length. `keep_alive`
/// chooses `Connection: keep-alive` or `close`; `head_only` (a HEAD request) leaves the body out
/// but keeps its `Content-Length`. A pool route writes nothing (`Ok(0)`). No allocation.
pub(crate) fn write_answer<P>(
    action: &Action<P>,
    target: &[u8],
    (keep_alive, head_only): (bool, bool),
    page_403: Option<Page>,
    out: &mut [u8],
) -> Result<usize, Overflow> {
    let mut o = Out { buf: out, len: 0 };
    match action {
        Action::Pool(_) | Action::Static(_) | Action::Fastcgi { .. } | Action::Cgi(_) => {
            return Ok(0)
        }
        Action::Redirect { to, status, exact } => {
            o.status(*status)?;
            o.put(b"Location: ")?;
            o.put(to.as_bytes())?;
            if !exact {
                let tail = path_and_query(target);
                // `https://example.com/` + `/a?b` is `https://example.com/a?b`.
                let tail = if to.ends_with('/') {
                    tail.strip_prefix(b"/").unwrap_or(tail)
                } else {
                    tail
                };
                o.put(tail)?;
            }
            o.put(b"\r\n")?;
            o.finish(b"", keep_alive, head_only)?;
        }
        Action::Respond {
            status,
            body,
            content_type,
        } => {
            o.status(*status)?;
            o.put(b"Content-Type: ")?;
            o.put(content_type.as_bytes())?;
            o.put(b"\r\n")?;
            o.finish(body.as_bytes(), keep_alive, head_only)?;
        }
        Action::Deny => return write_status(403, None, page_403, (keep_alive, head_only), out),
    }
    Ok(o.len)
}

/// Writes a plain-text answer `STATUS REASON\n` (403 for a denied client, 404 when no route
/// matches and the listener has no servers, 429 with `Retry-After: SECONDS` over a rate limit);
/// returns its length. No allocation.
pub(crate) fn write_status(
    status: u16,
    retry_after: Option<u64>,
    page: Option<Page>,
    (keep_alive, head_only): (bool, bool),
    out: &mut [u8],
) -> Result<usize, Overflow> {
    let mut plain = Out {
        buf: &mut [0u8; 64],
        len: 0,
    };
    plain.num(status.into())?;
    plain.put(b" ")?;
    plain.put(reason(status).as_bytes())?;
    plain.put(b"\n")?;
    let plain_len = plain.len;
    let (content_type, body) = match page {
        Some((content_type, body)) => (content_type, body),
        None => ("text/plain; charset=utf-8", &plain.buf[..plain_len]),
    };
    let mut o = Out { buf: out, len: 0 };
    o.status(status)?;
    o.put(b"Content-Type: ")?;
    o.put(content_type.as_bytes())?;
    o.put(b"\r\n")?;
    if let Some(secs) = retry_after {
        o.put(b"Retry-After: ")?;
        o.num(secs)?;
        o.put(b"\r\n")?;
    }
    o.finish(body, keep_alive, head_only)?;
    Ok(o.len)
}

/// An `error_pages` body for an answer: its content type and bytes.
pub(crate) type Page<'a> = (&'a str, &'a [u8]);

// === Rate limits ===

/// Buckets in the table (a power of two): 1 MiB, allocated on first use.
pub(crate) const RATE_SLOTS: usize = 1 << 16;

/// Per-client-address rate limits of every route, shared by all workers without a lock: a fixed
/// table of slots indexed by a keyed hash of (route, client address), each a token bucket kept
/// as one "theoretical arrival time" (GCRA: a request is admitted when it arrives no earlier than
/// `burst` emission intervals before that time, which then moves one interval on).
///
/// Memory is bounded whatever the number of clients. Each (route, address) has two candidate
/// slots; it takes the one it already holds, else one whose bucket is full again (an idle
/// bucket has nothing to remember), else it shares its first slot with whoever holds it. Sharing
/// is only ever stricter: a client may be limited early, never let past its own limit.
#[derive(Debug)]
pub(crate) struct RateTable {
    key: RandomState,
    /// Made by the first request a route with `rate` admits: a process without such a route
    /// never holds the 1 MiB.
    slots: OnceLock<Box<[Slot]>>,
}

#[derive(Debug, Default)]
struct Slot {
    /// The hash of the (route, address) that holds the slot, with its low bit set (0 = free).
    owner: AtomicU64,
    /// The bucket's theoretical arrival time, in µs of the clock; at or before now = full.
    tat: AtomicU64,
}

impl Default for RateTable {
    fn default() -> RateTable {
        RateTable::new()
    }
}

impl RateTable {
    pub(crate) fn new() -> RateTable {
        RateTable {
            key: RandomState::new(),
            slots: OnceLock::new(),
        }
    }

    /// Counts one request of `ip` on `route` at `now_ms` (the clock's milliseconds). `Err` holds
    /// the seconds to send in `Retry-After` (at least 1): the request is refused with 429 and
    /// counts for nothing. A route without `rate` admits everything.
    pub(crate) fn admit<P>(&self, route: &Route<P>, ip: IpAddr, now_ms: u64) -> Result<(), u64> {
        let Some(rate) = route.rate else {
            return Ok(());
        };
        let count = u64::from(rate.count.max(1));
        let period_us = u64::try_from(rate.period.as_micros()).unwrap_or(u64::MAX);
        let interval = (period_us / count).max(1);
        let window = interval.saturating_mul(u64::from(rate.burst.max(1)));
        let now = now_ms.saturating_mul(1000);
        let slot = self.slot(route.id, ip, now);
        let mut tat = slot.tat.load(Ordering::Relaxed);
        loop {
            let next = tat.max(now).saturating_add(interval);
            let ahead = next - now;
            if ahead > window {
                let wait_us = ahead - window;
                return Err(wait_us.div_ceil(1_000_000).max(1));
            }
            match slot
                .tat
                .compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(seen) => tat = seen,
            }
        }
    }

    /// The slot of (route, ip), claimed as the type says.
    fn slot(&self, route: u64, ip: IpAddr, now_us: u64) -> &Slot {
        let h = self.key.hash_one((route, ip.to_canonical()));
        let tag = h | 1;
        let mask = RATE_SLOTS as u64 - 1;
        let slots = self
            .slots
            .get_or_init(|| (0..RATE_SLOTS).map(|_| Slot::default()).collect());
        let (a, b) = (
            &slots[(h & mask) as usize],
            &slots[((h >> 32) & mask) as usize],
        );
        for s in [a, b] {
            if s.owner.load(Ordering::Relaxed) == tag {
                return s;
            }
        }
        for s in [a, b] {
            let owner = s.owner.load(Ordering::Relaxed);
            if (owner == 0 || s.tat.load(Ordering::Relaxed) <= now_us)
                && s.owner
                    .compare_exchange(owner, tag, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                return s;
            }
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{from_toml, TuningPatch};

    fn routes(listener_extra: &str) -> Routes<String> {
        let text = format!(
            "[acl]\n1 = [\"permit 10.0.0.0/8\", \"deny 0.0.0.0/0\"]\n\
             [[pool]]\nname = \"api\"\nservers = [\"127.0.0.1:9001\"]\n\
             [[pool]]\nname = \"web\"\nservers = [\"127.0.0.1:9002\"]\n\
             [[listener]]\nname = \"h\"\nlisten = \"127.0.0.1:8000\"\nprotocol = \"http\"\n\
             servers = [\"127.0.0.1:9003\"]\n{listener_extra}"
        );
        build_routes(&text, None)
    }

    /// The routes of listener `h` of the TOML `text` (each pool name standing for its pool), with
    /// the counters of `old`'s routes of the same names.
    fn build_routes(text: &str, old: Option<&Routes<String>>) -> Routes<String> {
        let c = from_toml("r.toml", text, &TuningPatch::default()).unwrap();
        Routes::build(
            "h",
            &c.listeners[0].routes,
            Arc::new(c.global.acls.clone()),
            |n| Some(Arc::new(n.to_string())),
            old,
            2,
        )
        .unwrap()
    }

    fn find<'a>(
        r: &'a Routes<String>,
        method: &str,
        target: &str,
        host: Option<&'static str>,
        headers: &'static [(&'static str, &'static str)],
    ) -> Option<&'a str> {
        r.find(
            method.as_bytes(),
            target.as_bytes(),
            host.map(str::as_bytes),
            |name| {
                headers
                    .iter()
                    .find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.as_bytes())
            },
        )
        .map(|r| r.name.as_str())
    }

    /// The routes of TCP listener `h` with these `[[listener.route]]` tables.
    fn sni_routes(tables: &str) -> Routes<String> {
        build_routes(
            &format!(
                "[[pool]]\nname = \"a\"\nservers = [\"127.0.0.1:9001\"]\n\
                 [[pool]]\nname = \"b\"\nservers = [\"127.0.0.1:9002\"]\n\
                 [[listener]]\nname = \"h\"\nlisten = \"127.0.0.1:8000\"\n{tables}"
            ),
            None,
        )
    }

    fn pool_of<'a>(r: &'a Routes<String>, name: &str) -> Option<&'a str> {
        r.find_sni(name.as_bytes()).map(|r| match &r.action {
            Action::Pool(p) => p.as_str(),
            _ => "not a pool",
        })
    }

    #[test]
    fn sni_routes_match_exact_names_and_wildcards_first_match_wins() {
        let r = sni_routes(
            "[[listener.route]]\nsni = \"Exact.Example.com\"\npool = \"a\"\n\
             [[listener.route]]\nsni = [\"*.example.com\", \"other.org\"]\npool = \"b\"\n",
        );
        assert_eq!(pool_of(&r, "exact.example.com"), Some("a"));
        assert_eq!(pool_of(&r, "EXACT.example.COM"), Some("a"), "without case");
        assert_eq!(pool_of(&r, "www.example.com"), Some("b"));
        assert_eq!(pool_of(&r, "a.b.example.com"), Some("b"), "any depth");
        assert_eq!(pool_of(&r, "other.org"), Some("b"));
        assert_eq!(
            pool_of(&r, "example.com"),
            None,
            "the wildcard is for subdomains"
        );
        assert_eq!(pool_of(&r, "xexample.com"), None);
        assert_eq!(pool_of(&r, "www.other.org"), None);
    }

    #[test]
    fn hex16_is_sixteen_lowercase_hex_digits() {
        assert_eq!(&hex16(0x0123_4567_89ab_cdef), b"0123456789abcdef");
        assert_eq!(&hex16(0xfedc_ba98_7654_3210), b"fedcba9876543210");
        let mut r = 0x9e37_79b9_7f4a_7c15u64;
        for x in [0, u64::MAX, 0xa, 0x9, 0xf0, 1 << 63]
            .into_iter()
            .chain((0..2000).map(|_| {
                r ^= r << 13;
                r ^= r >> 7;
                r ^= r << 17;
                r
            }))
        {
            assert_eq!(hex16(x), format!("{x:016x}").as_bytes(), "{x:#x}");
        }
    }

    #[test]
    fn first_match_wins_over_host_path_method_and_header() {
        let r = routes(
            "[[listener.route]]\nname = \"beta\"\nheaders = { \"X-Beta\" = \"1\" }\npool = \"api\"\n\
             [[listener.route]]\nname = \"post\"\nmethods = [\"POST\", \"PUT\"]\npath = \"/api/\"\npool = \"api\"\n\
             [[listener.route]]\nname = \"api\"\nhost = \"API.example.com\"\npath = \"/api/\"\npool = \"api\"\n\
             [[listener.route]]\nhost = [\"www.example.com\", \"*.example.org\"]\npool = \"web\"\n",
        );
        assert_eq!(find(&r, "GET", "/", None, &[("x-beta", "1")]), Some("beta"));
        assert_eq!(find(&r, "GET", "/", None, &[("x-beta", "2")]), None);
        assert_eq!(find(&r, "POST", "/api/x", None, &[]), Some("post"));
        assert_eq!(
            find(&r, "post", "/api/x", None, &[]),
            None,
            "methods are case-sensitive"
        );
        assert_eq!(
            find(&r, "GET", "/api/x?q", Some("api.EXAMPLE.com:8080"), &[]),
            Some("api")
        );
        assert_eq!(find(&r, "GET", "/apix", Some("api.example.com"), &[]), None);
        assert_eq!(
            find(&r, "GET", "/", Some("www.example.com."), &[]),
            Some("route-4")
        );
        assert_eq!(
            find(&r, "GET", "/", Some("a.b.example.org"), &[]),
            Some("route-4")
        );
        assert_eq!(
            find(&r, "GET", "/", Some("example.org"), &[]),
            None,
            "subdomains only"
        );
        assert_eq!(find(&r, "GET", "/", Some("badexample.org"), &[]), None);
        // Absolute form: the path after the authority (the host is the caller's decision).
        assert_eq!(
            find(
                &r,
                "GET",
                "http://api.example.com/api/v1",
                Some("api.example.com"),
                &[]
            ),
            Some("api")
        );
        // Paths are matched in normal form.
        for target in ["//api/x", "/%61pi/x", "/./api/x", "/x/../api/x", "/api%2Fx"] {
            assert_eq!(
                find(&r, "GET", target, Some("api.example.com"), &[]),
                Some("api"),
                "{target}"
            );
        }
        assert_eq!(
            find(&r, "GET", "/../api/x", Some("api.example.com"), &[]),
            None
        );
    }

    #[test]
    fn path_regex_and_header_regex_match_anywhere_unless_anchored() {
        let r = routes(
            "[[listener.route]]\npath_regex = \"^/v[0-9]+/\"\npool = \"api\"\n\
             [[listener.route]]\nheaders = { \"user-agent\" = { regex = \"(?i)bot\" } }\ndeny = true\n",
        );
        assert_eq!(find(&r, "GET", "/v2/x", None, &[]), Some("route-1"));
        assert_eq!(find(&r, "GET", "/a/v2/x", None, &[]), None);
        assert_eq!(
            find(&r, "GET", "/", None, &[("User-Agent", "a GoogleBOT b")]),
            Some("route-2")
        );
        assert!(matches!(r.routes[1].action, Action::Deny));
        assert!(matches!(&r.routes[0].action, Action::Pool(p) if **p == "api"));
    }

    #[test]
    fn route_counters_follow_the_route_name_across_rebuilds() {
        let text = |routes: &str| {
            format!(
                "[[pool]]\nname = \"api\"\nservers = [\"127.0.0.1:9001\"]\n\
                 [[listener]]\nname = \"h\"\nlisten = \"127.0.0.1:8000\"\nprotocol = \"http\"\n\
                 servers = [\"127.0.0.1:9003\"]\n{routes}"
            )
        };
        let build = |routes: &str, old: Option<&Routes<String>>| build_routes(&text(routes), old);
        let api = "[[listener.route]]\nname = \"api\"\npath = \"/api/\"\npool = \"api\"\n";
        let old = build(
            &format!("{api}[[listener.route]]\nname = \"gone\"\ndeny = true\n"),
            None,
        );
        let w = crate::metrics::Counters::new(1);
        w.http_request(
            &HttpStats::new(2),
            Some(old.stats_of(Some(0))),
            200,
            Some(5),
        );
        w.http_request(&HttpStats::new(2), Some(old.stats_of(Some(1))), 403, None);
        w.http_request(&HttpStats::new(2), Some(old.stats_of(None)), 404, None);
        // An index past the routes (a snapshot mismatch) counts as no route rather than panic.
        w.http_request(&HttpStats::new(2), Some(old.stats_of(Some(9))), 404, None);
        let names: Vec<&str> = old.all_stats().iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["api", "gone", NO_ROUTE]);
        // Rebuilt with `api` moved second, `gone` gone and a new route first.
        let new = build(
            &format!(
                "[[listener.route]]\nname = \"new\"\nhost = \"a.example\"\npool = \"api\"\n{api}"
            ),
            Some(&old),
        );
        let all = new.all_stats();
        let names: Vec<&str> = all.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["new", "api", NO_ROUTE]);
        assert_eq!(
            all[0].1.totals().classes,
            [0; 6],
            "a new route starts at zero"
        );
        assert_eq!(
            all[1].1.totals().classes,
            [0, 0, 1, 0, 0, 0],
            "api kept its count"
        );
        assert_eq!(all[1].1.totals().sum_us, 5);
        assert_eq!(
            all[2].1.totals().classes,
            [0, 0, 0, 0, 2, 0],
            "no route kept too"
        );
        assert!(Arc::ptr_eq(&new.routes[1].stats, &old.routes[0].stats));
    }

    #[test]
    fn insensitive_paths_match_either_case_sensitive_ones_keep_it() {
        let r = routes(
            "[[listener.route]]\nname = \"admin\"\npath = \"/admin\"\npath_case = \"insensitive\"\ndeny = true\n\
             [[listener.route]]\nname = \"php\"\npath_regex = '\\.php$'\npath_case = \"insensitive\"\ndeny = true\n\
             [[listener.route]]\nname = \"private\"\npath = \"/private\"\ndeny = true\n",
        );
        for target in ["/admin", "/ADMIN/x", "/%41dmin", "/x/../AdMiN", "/adminx"] {
            assert_eq!(
                find(&r, "GET", target, None, &[]),
                Some("admin"),
                "{target}"
            );
        }
        for target in ["/a.php", "/a.PHP", "/b/c.pHp?x", "/a.ph%70"] {
            assert_eq!(find(&r, "GET", target, None, &[]), Some("php"), "{target}");
        }
        assert_eq!(find(&r, "GET", "/a.php.txt", None, &[]), None);
        assert_eq!(
            find(&r, "GET", "/adm", None, &[]),
            None,
            "shorter than the prefix"
        );
        assert_eq!(find(&r, "GET", "/private/x", None, &[]), Some("private"));
        assert_eq!(find(&r, "GET", "/PRIVATE", None, &[]), None, "case kept");
    }

    #[test]
    fn invalid_referer_matches_only_referers_the_rule_does_not_trust() {
        let r = routes(
            "[[listener.route]]\nname = \"all\"\ninvalid_referer = { valid = [\"*.example.com\"], \
             none = true, blocked = true, server_names = true }\ndeny = true\n\
             [[listener.route]]\nname = \"strict\"\ninvalid_referer = { valid = [\"example.com\"] }\n\
             deny = true\n",
        );
        let host = Some("Site.example:8080");
        // Valid for `all`: falls through to `strict`, which trusts example.com only.
        assert_eq!(find(&r, "GET", "/", host, &[]), Some("strict"), "none");
        assert_eq!(
            find(&r, "GET", "/", host, &[("referer", "-")]),
            Some("strict"),
            "blocked"
        );
        assert_eq!(
            find(
                &r,
                "GET",
                "/",
                host,
                &[("referer", "http://site.EXAMPLE./p")]
            ),
            Some("strict"),
            "server_names"
        );
        assert_eq!(
            find(
                &r,
                "GET",
                "/",
                host,
                &[("referer", "https://a.example.com:1/")]
            ),
            Some("strict")
        );
        assert_eq!(
            find(&r, "GET", "/", host, &[("referer", "https://example.com/")]),
            Some("all"),
            "*.example.com is for subdomains only"
        );
        assert_eq!(
            find(
                &r,
                "GET",
                "/",
                host,
                &[("referer", "https://a.example.com/")]
            ),
            Some("strict"),
            "strict trusts example.com itself only"
        );
        let bad: [&'static [(&str, &str)]; 4] = [
            &[("referer", "https://evil.example.com.attacker.net/")],
            &[("referer", "http://example.com@evil.net/")],
            &[("referer", "http://ex%61mple.com/")],
            &[("referer", "https://evil.net/")],
        ];
        for b in bad {
            assert_eq!(find(&r, "GET", "/", host, b), Some("all"), "{b:?}");
        }
        assert_eq!(
            find(&r, "GET", "/", None, &[("referer", "http://site.example/")]),
            Some("all"),
            "no Host: nothing is the own site"
        );
    }

    #[test]
    fn client_acl_is_checked_after_the_match() {
        let r = routes("[[listener.route]]\npath = \"/admin\"\nclient_acl = 1\npool = \"api\"\n");
        let route = &r.routes[0];
        assert!(r.permits(route, Some("10.1.2.3".parse().unwrap())));
        assert!(!r.permits(route, Some("192.0.2.1".parse().unwrap())));
        assert!(
            r.permits(route, None),
            "a Unix-socket client passes, as Pen's client_acl"
        );
    }

    fn answer(action: &Action<String>, target: &str, keep_alive: bool, head_only: bool) -> String {
        let mut buf = [0u8; 512];
        let n = write_answer(
            action,
            target.as_bytes(),
            (keep_alive, head_only),
            None,
            &mut buf,
        )
        .unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn redirects_append_path_and_query_unless_exact() {
        let to = |exact| Action::Redirect {
            to: "https://example.com/".into(),
            status: 308,
            exact,
        };
        assert_eq!(
            answer(&to(false), "/a/b?c=1", true, false),
            "HTTP/1.1 308 Permanent Redirect\r\nLocation: https://example.com/a/b?c=1\r\n\
             Content-Length: 0\r\nConnection: keep-alive\r\n\r\n"
        );
        assert!(answer(&to(true), "/a/b?c=1", false, false)
            .contains("Location: https://example.com/\r\n"));
        assert!(answer(&to(false), "http://h/x?y", false, false)
            .contains("Location: https://example.com/x?y\r\n"));
    }

    #[test]
    fn respond_and_status_answers_are_whole_and_bounded() {
        let a = Action::Respond {
            status: 503,
            body: "down for maintenance\n".into(),
            content_type: "text/plain".into(),
        };
        assert_eq!(
            answer(&a, "/", false, false),
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n\
             Content-Length: 21\r\nConnection: close\r\n\r\ndown for maintenance\n"
        );
        assert!(answer(&a, "/", true, true)
            .ends_with("Content-Length: 21\r\nConnection: keep-alive\r\n\r\n"));
        assert!(answer(&Action::Deny, "/", true, false).starts_with("HTTP/1.1 403 Forbidden\r\n"));
        let mut buf = [0u8; 256];
        let n = write_status(429, Some(3), None, (true, false), &mut buf).unwrap();
        let text = std::str::from_utf8(&buf[..n]).unwrap();
        assert!(text.contains("\r\nRetry-After: 3\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n429 Too Many Requests\n"), "{text}");
        let mut small = [0u8; 20];
        assert_eq!(
            write_answer(&a, b"/", (true, false), None, &mut small),
            Err(Overflow)
        );
    }

    #[test]
    fn the_rate_table_holds_no_slots_until_a_route_with_rate_admits() {
        let t = RateTable::new();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let free = routes("[[listener.route]]\npool = \"api\"\n");
        assert_eq!(t.admit(&free.routes[0], a, 1_000), Ok(()));
        assert!(
            t.slots.get().is_none(),
            "a route without rate made the slots"
        );
        let rated = routes("[[listener.route]]\nrate = \"2/s\"\npool = \"api\"\n");
        assert_eq!(t.admit(&rated.routes[0], a, 1_000), Ok(()));
        assert_eq!(t.slots.get().map(|s| s.len()), Some(RATE_SLOTS));
    }

    #[test]
    fn a_rate_admits_its_burst_then_refuses_with_the_wait() {
        let r = routes("[[listener.route]]\nrate = \"2/s\"\nburst = 3\npool = \"api\"\n");
        let route = &r.routes[0];
        let t = RateTable::new();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let now = 1_000_000;
        for _ in 0..3 {
            assert_eq!(t.admit(route, a, now), Ok(()));
        }
        assert_eq!(
            t.admit(route, a, now),
            Err(1),
            "over the burst: wait a second"
        );
        assert_eq!(
            t.admit(route, b, now),
            Ok(()),
            "another address has its own bucket"
        );
        assert_eq!(
            t.admit(route, "::ffff:192.0.2.1".parse().unwrap(), now),
            Err(1),
            "the mapped form is the same client"
        );
        // Half a second later one token (2/s) is back, not two.
        assert_eq!(t.admit(route, a, now + 500), Ok(()));
        assert!(t.admit(route, a, now + 500).is_err());
        // Same listener and route name: the same buckets (a reload keeps them), so a table of its own.
        let t = RateTable::new();
        let slow = routes("[[listener.route]]\nrate = \"1/m\"\npool = \"api\"\n");
        assert_eq!(t.admit(&slow.routes[0], a, now), Ok(()));
        assert_eq!(t.admit(&slow.routes[0], a, now), Err(60));
        let free = routes("[[listener.route]]\npool = \"api\"\n");
        assert!((0..100).all(|_| t.admit(&free.routes[0], a, now).is_ok()));
    }
}
