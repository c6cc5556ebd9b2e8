//! What Quill does with a parsed request head, decided without I/O: [`decide`] reads the head,
//! the pool snapshot (its routes, ACLs and servers), the client's address and TLS server name and
//! the rate table, and answers with a [`Decision`]: refuse and close, answer locally ([`Local`]),
//! or forward to a pool ([`Forward`]). Its only effect is the rate table's count of an admitted
//! request of a route with `rate`.
//!
//! The reads of the pool's HTTP parts (`Pool::http`, `Pool::routes`) are kept here, in
//! [`settings`], [`route_of`], [`route_stats`] and [`decide`].

use std::net::IpAddr;
use std::sync::Arc;

use quill_core::http1::{self, FieldIndex, Framing, Limits, Method, RequestHead};
use quill_core::maglev;

use crate::backend::{cookie_value, Pool};
use crate::config::model::HashKey;
use crate::config::HttpSettings;
use crate::metrics::HttpStats;
use crate::proxy::copy::BUF_SIZE;
use crate::route::{self, Action, RateTable, Route};

/// The HTTP settings of a pool snapshot (the defaults for a pool without them).
pub(super) fn settings(pool: &Pool) -> &HttpSettings {
    static DEFAULT: std::sync::OnceLock<HttpSettings> = std::sync::OnceLock::new();
    pool.http()
        .map(|h| &**h)
        .unwrap_or_else(|| DEFAULT.get_or_init(HttpSettings::default))
}

/// The route with this index in the pool snapshot's routes.
pub(super) fn route_of(pool: &Pool, index: Option<u32>) -> Option<&Route<Pool>> {
    pool.routes.as_ref()?.routes.get(index? as usize)
}

/// The request counters of the route with this index (`(no route)`'s for None), when the pool
/// snapshot has routes.
pub(super) fn route_stats(pool: &Pool, index: Option<u32>) -> Option<&HttpStats> {
    pool.routes.as_deref().map(|r| r.stats_of(index))
}

/// The `error_pages` body for `status` of the pool snapshot's settings, if one is configured.
pub(super) fn page_of(pool: &Pool, status: u16) -> Option<route::Page<'_>> {
    settings(pool)
        .error_page(status)
        .map(|p| (p.content_type, &p.body[..]))
}

/// The parser's bounds for a request head under these settings.
pub(super) fn limits(s: &HttpSettings) -> Limits {
    Limits {
        max_head: (s.max_header_bytes as usize).min(BUF_SIZE),
        max_headers: s.max_headers as usize,
        require_host: true,
        max_request_line: s.max_request_line as usize,
    }
}

/// Whether a request with this method may be sent again on a new connection.
pub(super) fn idempotent(m: Method) -> bool {
    matches!(
        m,
        Method::Get | Method::Head | Method::Put | Method::Delete | Method::Options | Method::Trace
    )
}

/// An answer Quill writes itself without a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Local {
    /// A plain status (403, 404, 421, 429).
    Status {
        status: u16,
        /// The seconds of a 429's `Retry-After`.
        retry_after: Option<u64>,
        /// The route whose `client_acl` or `rate` refused the request (None: no route matched).
        route: Option<usize>,
    },
    /// The answer of the route with this index (redirect, respond, deny).
    Route(usize),
}

impl Local {
    /// A plain status of no route.
    fn status(status: u16) -> Local {
        Local::Status {
            status,
            retry_after: None,
            route: None,
        }
    }

    /// The route the answer counts for (None: no route matched).
    pub(super) fn route(self) -> Option<u32> {
        match self {
            Local::Route(i) => Some(i as u32),
            Local::Status { route, .. } => route.map(|i| i as u32),
        }
    }
}

/// Where a request goes.
#[derive(Debug)]
pub(super) struct Forward {
    /// The pool snapshot to pick a server from: a route's named pool, else the listener's own.
    pub pool: Arc<Pool>,
    /// The route the request matched (an index into the listener snapshot's routes).
    pub route: Option<u32>,
    /// The server the request's stickiness cookie names, if its pool has stickiness.
    pub sticky: Option<u32>,
    /// The request's Maglev key, if its pool hashes a header or cookie (`hash_key`) with
    /// `maglev` and the request has it (see [`maglev_key`]); None: the client address's.
    pub key: Option<u64>,
    /// The client asked to upgrade (`Connection: upgrade` and `Upgrade`) and the request has no
    /// body: `Upgrade` is passed on, and a 101 turns the connection into a tunnel.
    pub upgrade: bool,
}

/// What Quill does with a request.
#[derive(Debug)]
pub(super) enum Decision {
    /// Answer this status and close the connection (405, 413; 400 with `parse_error` for a
    /// target whose path has no normal form, counted as that parse error).
    Refuse {
        status: u16,
        parse_error: Option<http1::Error>,
    },
    /// Answer without a server; the connection may stay open.
    Local(Local),
    /// Send it to a server.
    Forward(Forward),
}

/// The request as [`decide`] reads it: its parsed head and fields, in `buf` (the unparsed bytes
/// of the client input, the head at their start).
#[derive(Clone, Copy)]
pub(super) struct Request<'a> {
    pub head: &'a RequestHead,
    pub fields: &'a FieldIndex,
    pub buf: &'a [u8],
}

/// The client as [`decide`] reads it.
#[derive(Clone, Copy, Default)]
pub(super) struct Client<'a> {
    /// None for a client on a Unix socket.
    pub ip: Option<IpAddr>,
    /// The server name of the client's TLS handshake, if it has one.
    pub sni: Option<&'a str>,
}

/// Decides what to do with a request of `pool`'s listener (the listener's current snapshot) at
/// clock ms `now`: its method and length, its host against the TLS server name (421), its route,
/// the route's `client_acl` (403) and `rate` (429), the route's own answer, stickiness and
/// upgrade; 404 when nothing could serve it.
pub(super) fn decide(
    req: Request,
    pool: &Arc<Pool>,
    client: Client,
    rates: &RateTable,
    now: u64,
) -> Decision {
    let Request { head, fields, buf } = req;
    if head.method == Method::Connect {
        return refuse(405);
    }
    if let (Framing::Length(n), Some(max)) = (head.framing, settings(pool).max_body) {
        if n > max {
            return refuse(413);
        }
    }
    // One decision of the request's host (the parser's `authority`: an absolute-form target's,
    // which Host agrees with, else Host) for the 421 check, routing and the Host the server
    // receives.
    let host = head.authority.map(|h| h.of(buf));
    if misdirected(pool, client.sni, host) {
        return Decision::Local(Local::status(421));
    }
    // Routes match the path in normal form; a path that has none is refused (as nginx).
    let Ok(path) = route::normal_path(head.target.of(buf)) else {
        return Decision::Refuse {
            status: 400,
            parse_error: Some(http1::Error::InvalidTarget),
        };
    };
    // Routing: the first route that matches, else the listener's own servers.
    let mut target = None;
    let mut route_index = None;
    if let Some(routes) = &pool.routes {
        let method = head.method_span.of(buf);
        let found = routes.lookup(method, &path, host, |name| fields.value(buf, name));
        drop(path);
        // A site chosen whose routes all missed, or a host no site names (`unknown_host`).
        let found = match found {
            Ok(found) => found,
            Err(status) => return Decision::Local(Local::status(status)),
        };
        if let Some(i) = found {
            let route = &routes.routes[i];
            route_index = Some(i as u32);
            if !routes.permits(route, client.ip) {
                return refused_by_route(403, None, i);
            }
            if let (Some(ip), Some(_)) = (client.ip, &route.rate) {
                if let Err(wait) = rates.admit(route, ip, now) {
                    return refused_by_route(429, Some(wait), i);
                }
            }
            match &route.action {
                Action::Pool(p) | Action::Fastcgi { pool: p, .. } => target = Some(p),
                _ => return Decision::Local(Local::Route(i)),
            }
        }
    }
    if route_index.is_none() && pool.servers.is_empty() && pool.emergency.is_none() {
        return Decision::Local(Local::status(404));
    }
    // The listener's own servers unless a route named a pool.
    let pool = target.unwrap_or(pool).clone();
    // Stickiness by cookie: the server the request's cookie names, if the pool has one.
    let sticky = pool.sticky.as_ref().and_then(|st| {
        st.server_of(
            fields
                .iter(buf)
                .filter(|f| f.name.of(buf).eq_ignore_ascii_case(b"cookie"))
                .map(|f| f.value.of(buf)),
        )
    });
    let key = maglev_key(&pool, fields, buf);
    let upgrade = head.connection.upgrade
        && head.framing == Framing::None
        && fields.value(buf, b"upgrade").is_some();
    Decision::Forward(Forward {
        pool,
        route: route_index,
        sticky,
        key,
        upgrade,
    })
}

/// The Maglev key of a request to `pool` when its mode has `maglev` and its `hash_key` names a
/// header or cookie: [`quill_core::maglev::hash_bytes`] under seed 0 of the value of the first
/// field of that name (any case), or of the first cookie of that name (exact case) in the
/// `Cookie` fields, without the spaces and tabs around it. None (the client address's key) when
/// the request has no such field or cookie, or its value is empty. Hashed from the head's bytes
/// where they lie: nothing is copied or allocated.
pub(super) fn maglev_key(pool: &Pool, fields: &FieldIndex, buf: &[u8]) -> Option<u64> {
    if !pool.mode.maglev {
        return None;
    }
    let value = match &pool.hash_key {
        HashKey::Client => return None,
        HashKey::Header(name) => fields.value(buf, name.as_bytes())?,
        HashKey::Cookie(name) => cookie_value(
            fields
                .iter(buf)
                .filter(|f| f.name.of(buf).eq_ignore_ascii_case(b"cookie"))
                .map(|f| f.value.of(buf)),
            name.as_bytes(),
        )?,
    };
    let value = trim_ows(value);
    (!value.is_empty()).then(|| maglev::hash_bytes(value, 0))
}

/// `value` without the spaces and tabs (HTTP's optional whitespace) at either end.
fn trim_ows(value: &[u8]) -> &[u8] {
    let ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = value.iter().position(|b| !ows(b)).unwrap_or(value.len());
    let end = value.iter().rposition(|b| !ows(b)).map_or(start, |i| i + 1);
    &value[start..end]
}

fn refuse(status: u16) -> Decision {
    Decision::Refuse {
        status,
        parse_error: None,
    }
}

fn refused_by_route(status: u16, retry_after: Option<u64>, route: usize) -> Decision {
    Decision::Local(Local::Status {
        status,
        retry_after,
        route: Some(route),
    })
}

/// A request on a TLS connection whose Host the handshake's server name would not have been
/// served the same certificate for (RFC 9110 §15.5.20: 421): the client reused a connection
/// for another site.
fn misdirected(pool: &Pool, sni: Option<&str>, host: Option<&[u8]>) -> bool {
    let (Some(server), Some(sni), Some(host)) = (pool.tls(), sni, host) else {
        return false;
    };
    let Ok(host) = std::str::from_utf8(route::host_name(host)) else {
        return false;
    };
    // The usual case, Host naming the SNI itself, needs no lookup.
    !sni.eq_ignore_ascii_case(host) && !server.certs.serves_alike(sni, host)
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
