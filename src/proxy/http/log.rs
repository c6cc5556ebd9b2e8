//! The access log of an HTTP session: the request's text kept for its line ([`RequestText`]:
//! request line, Host, Referer, User-Agent, X-Request-ID, bounded, in one reused allocation) and
//! the line written once the request is answered ([`write`], from a [`Line`]), to the file of the
//! site that served it when the site has its own `log`, else to the listener's.

use quill_core::http1::{self, RequestHead};

use super::exchange::Exchange;
use super::request::route_of;
use crate::backend::Pool;
use crate::log::{AccessLog, HttpEntry, Served};
use crate::metrics::{End, Source};
use crate::net::ClientAddr;
use crate::route;

/// The request's text for the access log (request line, Host, Referer, User-Agent, X-Request-ID;
/// their lengths in `lens`), kept by the session to reuse its allocation.
#[derive(Debug, Default)]
pub(super) struct RequestText {
    text: Vec<u8>,
    lens: [u16; 5],
}

/// At most this many bytes of one field go to a log line.
const FIELD_MAX: usize = 2048;

impl RequestText {
    /// For the line of a request refused unread: the first line of `buf` as received (bounded).
    pub(super) fn capture_line(&mut self, buf: &[u8]) {
        let end = buf
            .iter()
            .position(|&b| b == b'\r' || b == b'\n')
            .unwrap_or(buf.len())
            .min(FIELD_MAX);
        self.text.clear();
        self.text.extend_from_slice(&buf[..end]);
        self.lens = [end as u16, 0, 0, 0, 0];
    }

    /// The parts of the request `head` (at the start of `buf`) that its line shows.
    pub(super) fn capture(&mut self, buf: &[u8], head: &RequestHead) {
        self.text.clear();
        let line_end = buf
            .iter()
            .position(|&b| b == b'\r' || b == b'\n')
            .unwrap_or(0);
        let host = head.host.map(|h| h.of(buf)).unwrap_or_default();
        let field = |want: &[u8]| {
            http1::fields(buf, head.len)
                .find(|f| f.name.of(buf).eq_ignore_ascii_case(want))
                .map(|f| f.value.of(buf))
                .unwrap_or_default()
        };
        let parts = [
            &buf[..line_end],
            host,
            field(b"referer"),
            field(b"user-agent"),
            field(b"x-request-id"),
        ];
        for (i, part) in parts.iter().enumerate() {
            // Bounded: a log line never carries more than 2 KiB of one field.
            let n = part.len().min(FIELD_MAX);
            self.text.extend_from_slice(&part[..n]);
            self.lens[i] = n as u16;
        }
    }

    /// The request came over HTTP/2: its line says `HTTP/2.0` (the head the session read is
    /// the HTTP/1.1 form of the stream's request).
    pub(super) fn mark_h2(&mut self) {
        let n = usize::from(self.lens[0]);
        if let Some(line) = self.text.get_mut(..n) {
            if line.ends_with(b" HTTP/1.1") {
                line[n - 3..].copy_from_slice(b"2.0");
            }
        }
    }

    /// Field `i` of the text (0 request line, 1 host, 2 referer, 3 user agent, 4 the client's
    /// X-Request-ID), as the access log reads it.
    fn part(&self, i: usize) -> &[u8] {
        let start: usize = self.lens[..i].iter().map(|&n| usize::from(n)).sum();
        let end = start + usize::from(self.lens[i]);
        self.text.get(start..end).unwrap_or_default()
    }

    /// The client's own X-Request-ID (empty when it sent none).
    pub(super) fn client_request_id(&self) -> &[u8] {
        self.part(4)
    }

    /// The request's Host as received (empty when it had none or was not read).
    pub(super) fn host(&self) -> &[u8] {
        self.part(1)
    }
}

/// What one access-log line says beyond the client and the request's text.
pub(super) struct Line<'a> {
    pub status: u16,
    /// Who made the response.
    pub source: Source,
    /// What a file's 206 served.
    pub range: Option<Served>,
    /// Request bytes to the server, response bytes to the client.
    pub bytes: (u64, u64),
    /// The exchange, once the request reached routing (its server, timings and request id).
    pub ex: Option<&'a Exchange>,
    /// The route the request took when it is not the exchange's (an index into the listener
    /// snapshot's routes).
    pub route: Option<u32>,
    pub end: End,
}

impl Line<'_> {
    /// The route the request took: its own, else its exchange's.
    pub(super) fn route(&self) -> Option<u32> {
        self.route.or_else(|| self.ex.and_then(|ex| ex.route))
    }
}

/// The site of listener snapshot `pool` that served a request (its route's site, else the one
/// its Host named); None, for the listener's file: no site, or a request that took no route and
/// has no Host (refused before it was read, or an HTTP/1.0 request without one).
pub(super) fn site_of(pool: &Pool, route: Option<u32>, text: &RequestText) -> Option<u32> {
    let sites = pool.routes.as_ref()?.sites.as_ref()?;
    let host = Some(text.host()).filter(|h| !h.is_empty());
    if route.is_none() && host.is_none() {
        return None;
    }
    sites.site_of(route.map(|i| i as usize), host.map(route::host_name))
}

/// Writes the request's line: `pool` is the listener's snapshot (the line's route is one of its
/// routes), `cert` the subject of the client's verified certificate, `now_us` the turn's clock.
pub(super) fn write(
    log: &mut AccessLog,
    (client, now_us): (&ClientAddr, u64),
    text: &RequestText,
    cert: Option<&str>,
    pool: &Pool,
    line: Line,
) {
    let route = route_of(pool, line.route()).map(|r| r.name.as_str());
    let Line {
        status,
        source,
        range,
        bytes: (bytes_in, bytes_out),
        ex,
        end,
        ..
    } = line;
    let server = ex.and_then(|ex| ex.connector.server());
    let server_addr = server.map(|s| s.addr() as &dyn std::fmt::Display);
    log.write_http(&HttpEntry {
        client_ip: client,
        unix_time: crate::clock::unix_time(),
        text: &text.text,
        lens: text.lens,
        generated_id: ex.map_or(&[][..], |ex| &ex.request_id[..]),
        status,
        source,
        range,
        bytes_in,
        bytes_out,
        server: server_addr,
        route,
        connect_us: ex.and_then(|ex| ex.connect_us),
        first_byte_us: ex.and_then(|ex| ex.first_byte_us),
        total_us: ex.map_or(0, |ex| now_us.saturating_sub(ex.started_us)),
        end,
        client_cert: cert,
    });
}
