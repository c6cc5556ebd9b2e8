//! An HTTP listener's model: its settings (`HttpSettings`), its routes (`RouteConfig`) with their
//! matchers and actions, rate limits and error pages.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::acl::{AclId, Net};
use crate::config::settings::define_http_settings;

/// One `[[listener.route]]` (docs/design.md#http-routes): what a request must match (every matcher
/// given), what happens to it, and the edits made on the way. Patterns are kept as text here (the
/// model is compared and written back); `route::Routes` compiles them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RouteConfig {
    /// `route-N` (N from 1, the route's place in the listener) unless named.
    pub name: String,
    /// Any of these hosts (lower case, port ignored); empty = any host.
    pub hosts: Vec<HostMatch>,
    /// TCP listeners: any of these TLS server names (the ClientHello's SNI, lower case), read
    /// without decrypting; the only matcher a TCP listener's route has.
    pub sni: Vec<HostMatch>,
    pub path: Option<PathMatch>,
    /// `path_case`: whether `path` and `path_regex` compare letters without case.
    pub path_case: PathCase,
    /// `invalid_referer`: the route takes only requests whose `Referer` is not valid
    /// (hotlinking).
    pub invalid_referer: Option<RefererRule>,
    /// Any of these methods (case-sensitive tokens); empty = any method.
    pub methods: Vec<String>,
    /// Every one of these fields (names in lower case) with a matching value.
    pub headers: Vec<(String, ValueMatch)>,
    /// Pen's ACL list the client's address must pass.
    pub client_acl: Option<AclId>,
    pub action: RouteAction,
    pub request_headers: Vec<HeaderEdit>,
    pub response_headers: Vec<HeaderEdit>,
    /// `rewrite_path = { prefix, replace }`: the path's prefix replaced before it is sent.
    pub rewrite_path: Option<(String, String)>,
    pub rate: Option<RateLimit>,
    /// The site it belongs to (its index in `ListenerConfig::sites`); None: outside any site.
    /// A site's routes follow the routes outside any site, grouped by site in order.
    pub site: Option<u32>,
}

impl RouteConfig {
    /// A route called `name` that matches every request and answers 404 (its action is
    /// meant to be set by the caller).
    pub(crate) fn any(name: String) -> RouteConfig {
        RouteConfig::new(
            &name,
            RouteAction::Respond {
                status: 404,
                body: String::new(),
                content_type: "text/plain; charset=utf-8".into(),
            },
        )
    }

    /// A route named `name` that matches every request and does `action`.
    pub(crate) fn new(name: &str, action: RouteAction) -> RouteConfig {
        RouteConfig {
            name: name.into(),
            hosts: Vec::new(),
            sni: Vec::new(),
            path: None,
            path_case: PathCase::Sensitive,
            invalid_referer: None,
            methods: Vec::new(),
            headers: Vec::new(),
            client_acl: None,
            action,
            request_headers: Vec::new(),
            response_headers: Vec::new(),
            rewrite_path: None,
            rate: None,
            site: None,
        }
    }
}

/// A `host` matcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HostMatch {
    /// `example.com`: this host only.
    Exact(String),
    /// `*.example.com`, kept as `.example.com`: any subdomain, not the domain itself.
    Suffix(String),
}

impl fmt::Display for HostMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostMatch::Exact(h) => f.write_str(h),
            HostMatch::Suffix(s) => write!(f, "*{s}"),
        }
    }
}

/// A `path` (prefix) or `path_regex` matcher, on the path as sent (before `?`, not decoded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PathMatch {
    Prefix(String),
    Regex(String),
}

/// `path_case`: how a route's `path` or `path_regex` compares letters with the request's path
/// (nginx's `location ~` and `location ~*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum PathCase {
    /// `/ADMIN` is another path than `/admin` (the default).
    #[default]
    Sensitive,
    /// ASCII letters match either case: a rule on `/admin` takes `/ADMIN` and `/%41dmin`.
    Insensitive,
}

impl fmt::Display for PathCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PathCase::Sensitive => "sensitive",
            PathCase::Insensitive => "insensitive",
        })
    }
}

/// `invalid_referer = { valid, none, blocked, server_names }` (nginx's `valid_referers`): which
/// `Referer` values are valid; the route matches the requests whose value is not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RefererRule {
    /// Hosts (`*.example.com`: subdomains) whose pages may link here.
    pub valid: Vec<HostMatch>,
    /// A request without `Referer` is valid.
    pub none: bool,
    /// A `Referer` that is not an `http://` or `https://` URL (blanked by a proxy) is valid.
    pub blocked: bool,
    /// A `Referer` naming the request's own host is valid.
    pub server_names: bool,
}

impl fmt::Display for RefererRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut valid: Vec<String> = [
            (self.none, "none"),
            (self.blocked, "blocked"),
            (self.server_names, "server_names"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, w)| (*w).to_string())
        .collect();
        valid.extend(self.valid.iter().map(ToString::to_string));
        write!(f, "Referer not one of [{}]", valid.join(", "))
    }
}

/// A header matcher's value: exact, or a regex found anywhere in the value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ValueMatch {
    Exact(String),
    Regex(String),
}

/// What a route does with a request it matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RouteAction {
    /// To the named `[[pool]]`.
    Pool(String),
    /// `redirect`: `to` (with the request's path and query appended unless `exact`).
    Redirect {
        to: String,
        status: u16,
        exact: bool,
    },
    /// `respond`: a fixed answer, no server involved.
    Respond {
        status: u16,
        body: String,
        content_type: String,
    },
    /// `deny = true`: 403.
    Deny,
    /// `static = { root, ... }`: files from beneath a root.
    Static(Box<super::StaticAction>),
    /// `fastcgi = { pool, root, ... }`: a script run by a FastCGI pool.
    Fastcgi(Box<super::FastcgiAction>),
    /// `cgi = { root, ... }`: a script run as a child process.
    Cgi(Box<super::CgiAction>),
}

impl fmt::Display for RouteAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteAction::Pool(p) => write!(f, "pool {p}"),
            RouteAction::Redirect { to, status, exact } => {
                write!(f, "redirect {status} to {to}")?;
                if !exact {
                    f.write_str(" + path and query")?;
                }
                Ok(())
            }
            RouteAction::Respond {
                status,
                body,
                content_type,
            } => write!(
                f,
                "respond {status} ({} bytes of {content_type})",
                body.len()
            ),
            RouteAction::Deny => f.write_str("deny (403)"),
            RouteAction::Static(s) => write!(f, "{s}"),
            RouteAction::Fastcgi(a) => {
                write!(
                    f,
                    "FastCGI scripts from {} by pool {} (split at {}, index {}",
                    a.root.display(),
                    a.pool,
                    a.split_path,
                    a.index
                )?;
                match &a.fallback {
                    Some(s) => write!(f, ", else {s})"),
                    None => f.write_str(")"),
                }
            }
            RouteAction::Cgi(a) => write!(f, "CGI scripts from {}", a.root.display()),
        }
    }
}

/// `rate = "N/s"` (or `/m`, `/h`) with `burst`: a token bucket per client address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RateLimit {
    /// Requests per `period` in the long run.
    pub count: u32,
    pub period: Duration,
    /// Requests a client may make at once after being idle (at least 1).
    pub burst: u32,
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.period.as_secs() {
            60 => "m",
            3600 => "h",
            _ => "s",
        };
        write!(f, "{}/{unit} burst {}", self.count, self.burst)
    }
}

/// How `X-Forwarded-For` is written (docs/design.md#forwarding-fields).
pub(crate) use quill_core::http1::rewrite::ForwardedFor;
/// A request or response header edit (`set`, `add`, `remove`).
pub(crate) use quill_core::http1::rewrite::HeaderEdit;

/// What the normal form of a request path is used for (`normalize_path`): routes always match
/// it; with `Forward` servers receive it too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum NormalizePath {
    #[default]
    Match,
    Forward,
}

/// The body Quill sends with one of its own answers instead of its built-in one (`error_pages`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ErrorPage {
    pub status: u16,
    /// The file it was read from (read when the configuration is loaded or reloaded).
    pub path: PathBuf,
    /// `text/html; charset=utf-8` for a `.html`/`.htm` file, else `text/plain; charset=utf-8`.
    pub content_type: &'static str,
    pub body: std::sync::Arc<[u8]>,
}

crate::config::settings::http_table! {
    define_http_settings
    /// An HTTP listener's settings (`[http]` defaults, `[listener.http]`;
    /// docs/design.md#http-settings-and-timeouts). Timeouts replace `idle_timeout` and
    /// `fin_timeout` on an HTTP listener (they keep their meaning for tunnels after an Upgrade).
    /// The scalar settings come from `settings::http_table`.
    {
        /// Edits applied to every request and response of the listener.
        request_headers: Vec<HeaderEdit> = Vec::new(),
        response_headers: Vec<HeaderEdit> = Vec::new(),
        /// Bodies of Quill's own answers by status (`error_pages = { 503 = "file.html" }`).
        error_pages: Vec<ErrorPage> = Vec::new(),
    }
}

impl HttpSettings {
    /// The page configured for `status`, if any.
    pub(crate) fn error_page(&self, status: u16) -> Option<&ErrorPage> {
        self.error_pages.iter().find(|p| p.status == status)
    }
}
