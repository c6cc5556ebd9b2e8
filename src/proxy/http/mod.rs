//! An HTTP/1.x session (docs/design.md#http-mode): a client connection carrying requests one after
//! the other (kept alive, pipelined requests answered in order), each one an [`Exchange`] with a
//! server connection that a [`Connector`](connect::Connector) picks per request (Pen's selection,
//! failover, blacklisting and emergency server) and takes from the worker's idle pool when it can.
//!
//! The data path is the TCP session's: heads are parsed in place in a pooled read buffer by the
//! strict parser of `quill_core::http1`, rewritten into a second pooled buffer, and written
//! together with the body bytes read with them in one `writev` (a response head no longer than
//! the server's is first copied into its place, before those bytes: one `send`); a `Content-Length` or
//! close-delimited body then flows through a [`Direction`](super::copy::Direction) (pooled buffers, splice once bulky),
//! and a chunked body through the read buffer and the validating chunk decoder, never re-chunked.
//! An idle kept-alive client holds no buffer and no server connection.
//!
//! Errors before the client got a byte of the response are answered here (400, 408, 413, 414,
//! 431, 501, 502, 503, 504) and the client connection is closed; after that, a failure cuts the
//! client connection, as a direct connection would show it.

//! The session is the one type that orchestrates; the parts are rooms of their own: the client
//! input ([`input`]), one direction of bytes ([`leg`]), the decision on a request head without
//! I/O ([`request`]), the exchange with a server ([`exchange`]), the access-log line ([`log`]) and
//! the session's deadline ([`timing`]).

mod cgi;
mod exchange;
mod files;
mod input;
mod leg;
mod log;
mod request;
mod timing;

use std::cell::RefCell;
use std::io;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::sync::Arc;

use mio::event::Event;
use mio::Interest;
use quill_core::http1::rewrite::{self, HeaderEdit};
use quill_core::http1::{self, FieldIndex, Framing, Method};
use quill_core::sys;

use super::connect::{self, PrivateConn, Progress};
use super::copy::{Pools, BUF_SIZE};
use super::{Closing, Ctx, Side, Step, NEVER};
use crate::backend::{Pool, ServerLease};
use crate::clock::millis;
use crate::metrics::{End, Source};
use crate::net::{ClientAddr, Ready, Stream};
use crate::route::fastcgi::Script;
use crate::route::{self, Action};
use crate::state::idle::ServerConns;
use crate::state::shared::{Listener, SessionInfo};
use exchange::{Answer, DownOutcome, Exchange, Peer, Reply, Unsent, UpOutcome};
use input::{Filled, Input};
use leg::{BodyRest, Leg};
use request::{page_of, route_of, route_stats, settings, Decision, Local};

/// One HTTP client connection.
#[derive(Debug)]
pub(crate) struct HttpSession {
    id: u64,
    client: Stream,
    addr: ClientAddr,
    client_ready: Ready,
    /// The listener: each request takes its pool's current snapshot (a reload applies to the
    /// next request of a kept-alive connection).
    listener: Arc<Listener>,
    /// The snapshot of the current (or last) request.
    pool: Arc<Pool>,
    input: Input,
    ex: Option<Box<Exchange>>,
    /// A response from a static root in flight.
    file: Option<Box<files::FileOut>>,
    /// A CGI script's exchange in flight.
    cgi: Option<Box<cgi::CgiRun>>,
    started_ms: u64,
    /// Clock ms since when the client has been idle (no request in flight, none begun).
    idle_since: u64,
    /// First byte of the request head being read (header_timeout), if any.
    head_since: Option<u64>,
    requests: u64,
    bytes_in: u64,
    bytes_out: u64,
    /// The client sent EOF: no more requests.
    client_eof: bool,
    /// Draining: close when the current exchange is over, and say so on its response.
    draining: bool,
    /// Draining: when the client, idle (no request begun), is closed (clock ms; [`NEVER`]
    /// before the drain).
    drain_close_ms: u64,
    /// The request's text for the access log, kept to reuse its allocation.
    log_text: log::RequestText,
    /// What few sessions have (a client certificate, a private server connection), in one box:
    /// an idle session stays small (one pointer for both; a second pointer cost 32 bytes per
    /// idle TLS connection in `bench/tls.sh`), and only the sessions that have them pay.
    rare: Option<Box<Rare>>,
}

/// The rarely used parts of an [`HttpSession`].
#[derive(Debug, Default)]
struct Rare {
    /// TLS with a verified client certificate: `X-Client-Cert-Subject: SUBJECT`, the edit every
    /// request of the connection gets (None: the field is only removed).
    cert_edit: Option<[HeaderEdit; 1]>,
    /// Between requests: the server connection that carried this client's PROXY header
    /// (`proxy_protocol`), private to this session; closed with it, or when the server closes
    /// it, or when a request goes to another server.
    private: Option<PrivateConn>,
}

/// The `X-Client-Cert-Subject` edit of a connection's requests: the verified client
/// certificate's subject, else the removal of what the client sent.
fn cert_edit(rare: Option<&Rare>) -> &[HeaderEdit] {
    match rare.and_then(|r| r.cert_edit.as_ref()) {
        Some(e) => e,
        None => strip_cert_subject(),
    }
}

/// The edit that removes a client-sent `X-Client-Cert-Subject` (always: only Quill says which
/// certificate a client showed).
fn strip_cert_subject() -> &'static [HeaderEdit] {
    static STRIP: std::sync::OnceLock<[HeaderEdit; 1]> = std::sync::OnceLock::new();
    STRIP.get_or_init(|| {
        [HeaderEdit {
            op: rewrite::EditOp::Remove,
            name: CERT_SUBJECT.into(),
            value: "".into(),
        }]
    })
}

const CERT_SUBJECT: &str = "X-Client-Cert-Subject";

thread_local! {
    /// Emptied boxes of this worker's ended HTTP/2 stream sessions, for its next streams: a
    /// stream's session costs no allocation (the allocator's per-size caches hold seven blocks,
    /// and a burst of hundreds of streams ending at once went to its slower paths).
    #[expect(clippy::vec_box, reason = "the boxes are what is kept: one becomes a session's")]
    static SPARE: RefCell<Vec<Box<MaybeUninit<HttpSession>>>> = const { RefCell::new(Vec::new()) };
}

/// At most this many spare session boxes per worker (256 bytes each), as many as the spare
/// exchange boxes.
const SPARE_MAX: usize = 256;

/// `session` in a spare box of this worker's, or a new one.
pub(crate) fn boxed(session: HttpSession) -> Box<HttpSession> {
    match SPARE.with_borrow_mut(Vec::pop) {
        Some(spare) => Box::write(spare, session),
        None => Box::new(session),
    }
}

/// Drops an ended stream's session and keeps its box for the next stream's (see `SPARE`).
pub(crate) fn recycle(session: Box<HttpSession>) {
    // Dropped before the spares are borrowed: nothing a session holds may reach them.
    let empty = sys::vacate(session);
    SPARE.with_borrow_mut(|spare| {
        if spare.len() < SPARE_MAX {
            spare.push(empty);
        }
    });
}

/// Drops this worker's spare exchange and session boxes (the heap trim after a burst).
pub(crate) fn trim_spares() {
    exchange::trim_spares();
    SPARE.with_borrow_mut(|spare| {
        spare.clear();
        spare.shrink_to_fit();
    });
}

impl HttpSession {
    pub(crate) fn new(
        listener: Arc<Listener>,
        id: u64,
        client: Stream,
        addr: ClientAddr,
        now_ms: u64,
    ) -> HttpSession {
        let pool = listener.load_pool_full();
        HttpSession::with_pool(listener, pool, id, client, addr, now_ms)
    }

    /// [`new`](Self::new) with the listener's pool at hand.
    fn with_pool(
        listener: Arc<Listener>,
        pool: Arc<Pool>,
        id: u64,
        client: Stream,
        addr: ClientAddr,
        now_ms: u64,
    ) -> HttpSession {
        HttpSession {
            id,
            client,
            addr,
            // A deferred accept has the request in already: read it at start.
            client_ready: if pool.defers_accept() {
                Ready {
                    readable: true,
                    writable: true,
                    ..Ready::default()
                }
            } else {
                Ready::default()
            },
            listener,
            pool,
            input: Input::default(),
            ex: None,
            file: None,
            cgi: None,
            started_ms: now_ms,
            idle_since: now_ms,
            head_since: None,
            requests: 0,
            bytes_in: 0,
            bytes_out: 0,
            client_eof: false,
            draining: false,
            drain_close_ms: NEVER,
            log_text: log::RequestText::default(),
            rare: None,
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The session of one HTTP/2 stream (its client is the stream's pipe; `subject`: the
    /// connection's verified client certificate).
    pub(crate) fn for_stream(
        (listener, pool): (Arc<Listener>, Arc<Pool>),
        client: Stream,
        addr: ClientAddr,
        subject: Option<Box<str>>,
        now_ms: u64,
    ) -> HttpSession {
        let mut s = HttpSession::with_pool(listener, pool, 0, client, addr, now_ms);
        if let Some(s2) = subject {
            s.rare.get_or_insert_default().cert_edit = Some([HeaderEdit {
                op: rewrite::EditOp::Set,
                name: CERT_SUBJECT.into(),
                value: s2,
            }]);
        }
        s
    }

    /// Whether this is the session of an HTTP/2 stream.
    pub(crate) fn is_stream(&self) -> bool {
        self.client.h2().is_some()
    }

    pub(crate) fn set_id(&mut self, id: u64) {
        self.id = id;
    }

    /// The other side of the stream's pipe changed it: read and write again.
    pub(crate) fn poke(&mut self, cx: &mut Ctx) -> Step {
        self.client_ready.readable = true;
        self.client_ready.writable = true;
        self.step(cx)
    }

    pub(crate) fn start(&mut self, cx: &mut Ctx) -> Step {
        if let Some(h) = self.client.h2() {
            // A stream: no socket to register; the connection pokes it.
            h.started(cx.client_token);
            return self.poke(cx);
        }
        if let Err(e) = cx.registry.register(
            self.client.source(),
            cx.client_token,
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::warn!("cannot register client socket: {e}");
            return Step::Close(End::Error);
        }
        self.step(cx)
    }

    /// Whether the session can move to another worker: a plain (not TLS) client between two
    /// requests, with nothing of the next one read, no buffer held and nothing rare.
    pub(crate) fn movable(&self) -> bool {
        self.ex.is_none()
            && self.file.is_none()
            && self.cgi.is_none()
            && self.input.buf.is_none()
            && self.head_since.is_none()
            && self.rare.is_none()
            && !self.client_eof
            && !self.draining
            && !self.client_ready.read_closed
            && !self.client_ready.error
            && matches!(self.client, Stream::Tcp(_) | Stream::Unix(_))
    }

    /// Takes the client socket off the worker's poll (the session is moving).
    pub(crate) fn detach(&mut self, registry: &mio::Registry) {
        if let Err(e) = registry.deregister(self.client.source()) {
            tracing::debug!("session {}: deregistering the client: {e}", self.id);
        }
    }

    /// Carries on a session moved from another worker: its socket is registered with this
    /// worker's poll, and read at once (its next request may be in).
    pub(crate) fn attach(&mut self, cx: &mut Ctx) -> Step {
        self.client_ready.readable = true;
        self.start(cx)
    }

    pub(crate) fn listener(&self) -> &Arc<Listener> {
        &self.listener
    }

    /// The private server connection, taken (see [`Rare::private`]).
    fn take_private(&mut self) -> Option<PrivateConn> {
        self.rare.as_mut().and_then(|r| r.private.take())
    }

    /// Starts reading requests from a client whose socket is registered already, with the
    /// readiness known of it (after a TLS handshake: request bytes may have come with it).
    pub(crate) fn start_registered(&mut self, ready: Ready, cx: &mut Ctx) -> Step {
        self.client_ready = ready;
        let subject = self.client.tls().and_then(|t| t.take_peer_subject());
        if let Some(s) = subject {
            self.rare.get_or_insert_default().cert_edit = Some([HeaderEdit {
                op: rewrite::EditOp::Set,
                name: CERT_SUBJECT.into(),
                value: s,
            }]);
        }
        self.step(cx)
    }

    pub(crate) fn on_ready(&mut self, side: Side, ev: &Event, cx: &mut Ctx) -> Step {
        match side {
            Side::Client => self.client_ready.update(ev),
            // A CGI child's pipes: the turn tries all three.
            Side::Server if self.cgi.is_some() => {}
            Side::Server => {
                if let Some(ex) = &mut self.ex {
                    let connecting = !ex.connector.is_connected();
                    let progress = ex.connector.on_ready(ev, &self.addr, cx);
                    if connecting {
                        if let Some(step) = self.follow(progress, cx) {
                            return step;
                        }
                    }
                } else if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                    // The private server connection, idle: EOF, a reset or bytes nobody asked
                    // for end it (as an idle pooled connection).
                    if let Some(p) = self.take_private() {
                        p.close(cx.conns);
                    }
                }
            }
        }
        self.step(cx)
    }

    pub(crate) fn on_resolved(&mut self, answer: io::Result<SocketAddr>, cx: &mut Ctx) -> Step {
        if let Some(ex) = &mut self.ex {
            if !ex.connector.is_connected() {
                let progress = ex.connector.on_resolved(answer, &self.addr, cx);
                if let Some(step) = self.follow(progress, cx) {
                    return step;
                }
            }
        }
        self.step(cx)
    }

    /// A wake posted for this session: the file range it waited for is read (`read`), or a
    /// place came free on the pool its request waits for (see `queue`). None when it
    /// does not wait for that.
    pub(crate) fn on_wake(&mut self, read: bool, cx: &mut Ctx) -> Option<Step> {
        if read {
            if !self.file.as_mut()?.read_done() {
                return None;
            }
            return Some(self.step(cx));
        }
        let ex = self.ex.as_mut()?;
        let progress = ex.connector.on_wake(&self.addr, cx)?;
        Some(match self.follow(progress, cx) {
            Some(step) => step,
            None => self.step(cx),
        })
    }

    pub(crate) fn on_deadline(&mut self, cx: &mut Ctx) -> Step {
        let now = cx.now;
        if now < self.deadline() {
            return self.wait();
        }
        if self.cgi.is_some() {
            return self.cgi_timed_out(cx);
        }
        if self.file.is_some() {
            // The client took nothing of the file for body_timeout.
            self.end_file(End::IdleTimeout, cx);
            self.client.reset_on_close();
            return Step::Close(End::IdleTimeout);
        }
        let Some(ex) = &mut self.ex else {
            if self.head_since.is_some() {
                return self.refuse(408, cx);
            }
            if self.draining && now >= self.drain_close_ms {
                return self.close_drained(cx);
            }
            return Step::Close(End::IdleTimeout);
        };
        if !ex.connector.is_connected() {
            let progress = ex.connector.on_deadline(&self.addr, cx);
            return match self.follow(progress, cx) {
                Some(step) => step,
                None => self.step(cx),
            };
        }
        if ex.answer == Answer::Tunnel {
            return self.close_exchange(End::IdleTimeout, cx);
        }
        if ex.awaits_response() {
            return self.fault(504, cx);
        }
        // No body progress either way for body_timeout.
        if ex.reply == Reply::Replied {
            self.client.reset_on_close();
            return self.close_exchange(End::IdleTimeout, cx);
        }
        let status = if ex.reply == Reply::Answered {
            504
        } else {
            408
        };
        self.fault(status, cx)
    }

    pub(crate) fn resume(&mut self, cx: &mut Ctx) -> Step {
        self.step(cx)
    }

    /// Acts on the connector's answer: None when a server is connected and the request is on
    /// its way (drive the session on), else the step to take.
    fn follow(&mut self, progress: Progress, cx: &mut Ctx) -> Option<Step> {
        match progress {
            Progress::Waiting(deadline) => Some(Step::Wait(deadline)),
            Progress::Resolve(server, deadline) => Some(Step::Resolve(server, deadline)),
            Progress::Failed(_) => Some(self.fault(503, cx)),
            Progress::Preface => {
                let ex = self.ex.as_mut()?;
                let Some(version) = ex.connector.pool().tuning.proxy_protocol else {
                    return Some(Step::Close(End::Error));
                };
                let header =
                    connect::proxy_header(version, &self.addr, &self.client, self.pool.local);
                let progress = ex.connector.send_preface(header.as_bytes(), &self.addr, cx);
                self.follow(progress, cx)
            }
            Progress::Connected => {
                if let Some(ex) = &mut self.ex {
                    let us = cx.now_us.saturating_sub(ex.started_us);
                    ex.connected(us);
                    if !ex.connector.is_reused() {
                        cx.counters.connected(us);
                    }
                }
                self.send_request(cx).err()
            }
        }
    }

    /// Does all that the sockets allow now, and says what the worker does next.
    fn step(&mut self, cx: &mut Ctx) -> Step {
        if cx.draining && !self.draining {
            // Began (a handshake or a PROXY header finished, a client handed over) after the
            // worker's drain started: the rest of the grace for its request.
            self.draining = true;
            self.drain_close_ms = cx.grace_end;
        }
        for _ in 0..64 {
            let r = if self.cgi.is_some() {
                self.drive_cgi(cx)
            } else if self.file.is_some() {
                self.drive_file(cx)
            } else if self.ex.is_none() {
                self.read_head(cx)
            } else {
                self.drive(cx)
            };
            match r {
                Ok(true) => continue,
                Ok(false) => return self.wait(),
                Err(step) => return step,
            }
        }
        Step::Again
    }

    // === the request head ===

    /// Reads and parses the next request head. Ok(true) when an exchange began.
    fn read_head(&mut self, cx: &mut Ctx) -> Result<bool, Step> {
        if self.client_ready.error {
            return Err(Step::Close(End::ClientReset));
        }
        loop {
            if self.input.has_unparsed() {
                if self.head_since.is_none() {
                    self.head_since = Some(cx.now);
                }
                if self.input.head_ends() {
                    return self.begin(cx).map(|()| true);
                }
            }
            if self.client_eof {
                return Err(Step::Close(End::Done));
            }
            match self
                .input
                .fill(&self.client, &mut self.client_ready, cx.pools)
            {
                Ok(Filled::Data) => {}
                Ok(Filled::Nothing) => {
                    if !self.input.has_unparsed() {
                        // Idle between requests: no buffer held.
                        self.input.settle(cx.pools);
                    }
                    return Ok(false);
                }
                Ok(Filled::Eof) => {
                    // Between requests, a clean end; within a head, a request cut short:
                    // nothing to answer either way.
                    self.client_eof = true;
                    return Err(Step::Close(End::Done));
                }
                Ok(Filled::Full) => {
                    return self.begin(cx).map(|()| true);
                }
                Err(e) => {
                    tracing::debug!("{}: client read: {e}", self.addr.to_string_with_port());
                    return Err(Step::Close(End::ClientReset));
                }
            }
        }
    }

    /// A head is in the input (or the buffer is full): parse it, decide what to do with it, and
    /// start its exchange when it goes to a server.
    fn begin(&mut self, cx: &mut Ctx) -> Result<(), Step> {
        // The snapshot is shared by every worker: taken again only when a reload made a new one.
        if let Some(newer) = self.listener.newer_pool(&self.pool) {
            self.pool = newer;
        }
        let limits = request::limits(settings(&self.pool));
        // The head's fields are noted straight into a spare exchange's index, which the
        // exchange then keeps: no index to zero, and no 1 KiB exchange moved into its box.
        let mut spare = exchange::Spare::take();
        let mut own = None;
        let fields = match spare.index() {
            Some(index) => index,
            None => own.insert(FieldIndex::empty()),
        };
        let head = match http1::parse_request_indexed(self.input.unparsed(), &limits, fields) {
            Ok(Some(h)) => h,
            // The buffer is full and holds no whole head.
            Ok(None) => {
                self.capture_request_line(cx);
                return Err(self.refuse(431, cx));
            }
            Err(e) => {
                cx.counters.http_parse_error(e);
                self.capture_request_line(cx);
                return Err(self.refuse(e.request_status(), cx));
            }
        };
        self.head_since = None;
        if cx.log.is_on() {
            self.log_text.capture(self.input.unparsed(), &head);
            if self.client.h2().is_some() {
                self.log_text.mark_h2();
            }
        }
        let req = request::Request {
            head: &head,
            fields,
            buf: self.input.unparsed(),
        };
        let client = request::Client {
            ip: self.addr.ip(),
            sni: self.client.server_name(),
        };
        let decision = request::decide(req, &self.pool, client, cx.rates, cx.now);
        if !matches!(decision, Decision::Forward(_)) {
            // Answered here (a file, a script, Quill's own answer): an HTTP/2 stream's
            // connection may start its next stream.
            if let Some(h) = self.client.h2() {
                h.head_sent();
            }
        }
        let forward = match decision {
            Decision::Forward(forward) => forward,
            Decision::Local(Local::Route(i)) if self.static_root(i).is_some() => {
                let root = self.static_root(i).cloned();
                let keep = self.keeps_after(&head, cx);
                return match root {
                    Some(root) => self.serve_static(&head, fields, &root, i, keep, cx),
                    None => Err(Step::Close(End::Error)),
                };
            }
            Decision::Local(Local::Route(i)) if self.cgi_root(i).is_some() => {
                return match self.cgi_root(i).cloned() {
                    Some(root) => self.serve_cgi(&head, fields, root, i, cx),
                    None => Err(Step::Close(End::Error)),
                };
            }
            Decision::Local(what) => return self.answer_locally(&head, what, cx),
            Decision::Refuse {
                status,
                parse_error,
            } => {
                if let Some(e) = parse_error {
                    cx.counters.http_parse_error(e);
                }
                return Err(self.refuse(status, cx));
            }
        };
        // A FastCGI script must be there before its server is asked (else 404, counted for the
        // route).
        let script = match self.fastcgi_script(&head, forward.route, cx.now) {
            Ok(script) => script,
            Err(status) => {
                let what = Local::Status {
                    status,
                    retry_after: None,
                    route: forward.route.map(|i| i as usize),
                };
                return self.answer_locally(&head, what, cx);
            }
        };
        self.input.start = self.input.fed;
        // The request id is made with the exchange, so Quill's own answer to it (503 when no
        // server can be reached) logs and sends a real id, as a forwarded request does.
        let id = route::hex16(cx.rand());
        let now = (cx.now, cx.now_us);
        let mut ex = match own {
            Some(fields) => Exchange::boxed(forward, (head, fields), &self.listener, now, id),
            None => match spare.reuse(forward, head, &self.listener, now, id) {
                Some(ex) => ex,
                None => return Err(Step::Close(End::Error)),
            },
        };
        ex.script = script;
        ex.notes_heads = self.client.is_h2();
        self.ex = Some(ex);
        self.connect(cx)
    }

    /// Quill answers a request itself without a server (a route's redirect, respond or deny, a
    /// refused client, a rate limit, no route): the connection stays open for the next request
    /// when the request has no body and the client keeps it.
    fn answer_locally(
        &mut self,
        head: &http1::RequestHead,
        what: Local,
        cx: &mut Ctx,
    ) -> Result<(), Step> {
        let keep = self.keeps_after(head, cx);
        let head_only = head.method == Method::Head;
        let what_route = what.route();
        let mut out = cx.pools.buffer();
        let written = match what {
            Local::Status {
                status,
                retry_after,
                ..
            } => {
                let page = page_of(&self.pool, status);
                route::write_status(status, retry_after, page, (keep, head_only), &mut out[..])
                    .map(|n| (status, n))
            }
            Local::Route(i) => {
                let Some(route) = route_of(&self.pool, Some(i as u32)) else {
                    cx.pools.give_buffer(out);
                    return Err(Step::Close(End::Error));
                };
                let status = match &route.action {
                    Action::Redirect { status, .. } | Action::Respond { status, .. } => *status,
                    _ => 403,
                };
                let target = head.target.of(self.input.unparsed());
                let page = page_of(&self.pool, 403);
                route::write_answer(&route.action, target, (keep, head_only), page, &mut out[..])
                    .map(|n| (status, n))
            }
        };
        let Ok((status, n)) = written else {
            cx.pools.give_buffer(out);
            return Err(self.refuse(500, cx));
        };
        // Past the request head: what follows is the next request.
        self.input.fed += head.len as u32;
        self.input.fwd = self.input.fed;
        let mut leg = Leg::new(out, n, BodyRest::Done);
        let mut empty = Input::default();
        let flushed = leg.flush(&mut empty, &self.client, &mut self.client_ready, cx.pools);
        let sent = leg.bytes;
        leg.release(cx.pools);
        self.bytes_out += sent;
        self.requests += 1;
        // Per route: the route's own answer or refusal, or `(no route)`.
        let route_stats = route_stats(&self.pool, what_route);
        cx.counters
            .http_request(&self.listener.http, route_stats, status, None);
        self.record(
            log::Line {
                status,
                source: Source::Quill,
                range: None,
                bytes: (0, sent),
                ex: None,
                route: what_route,
                end: End::Done,
            },
            cx,
        );
        self.input.settle(cx.pools);
        self.idle_since = cx.now;
        match flushed {
            // The whole answer went: read the next request.
            Ok(true) if keep => Ok(()),
            Ok(_) => Err(Step::Close(End::Done)),
            Err(_) => Err(Step::Close(End::ClientReset)),
        }
    }

    /// Whether the connection may carry another request after Quill's own answer to this one:
    /// the request has no body, the client keeps the connection, and nothing closes it.
    fn keeps_after(&self, head: &http1::RequestHead, cx: &Ctx) -> bool {
        head.keep_alive()
            && head.framing == Framing::None
            && !self.draining
            && !cx.draining
            && !settings(&self.pool).keepalive_timeout.is_zero()
            && !self.is_last_request(settings(&self.pool))
    }

    /// The static root of route `i` of the current snapshot, if that route serves files.
    fn static_root(&self, i: usize) -> Option<&Arc<route::StaticRoot>> {
        match &route_of(&self.pool, Some(i as u32))?.action {
            Action::Static(root) => Some(root),
            _ => None,
        }
    }

    /// The script of a request to route `i` when that route runs FastCGI scripts (None for any
    /// other route); Err: the status to answer instead (no such script).
    fn fastcgi_script(
        &self,
        head: &http1::RequestHead,
        i: Option<u32>,
        now_ms: u64,
    ) -> Result<Option<Box<Script>>, u16> {
        let Some(Action::Fastcgi { root, .. }) = route_of(&self.pool, i).map(|r| &r.action) else {
            return Ok(None);
        };
        let mut script = Box::default();
        root.resolve(head.target.of(self.input.unparsed()), &mut script, now_ms)?;
        Ok(Some(script))
    }

    /// Looks for a server for the exchange (an idle connection or a new one).
    fn connect(&mut self, cx: &mut Ctx) -> Result<(), Step> {
        let Some(ex) = &mut self.ex else {
            return Ok(());
        };
        let progress = match self.rare.as_mut().and_then(|r| r.private.take()) {
            Some(p) => ex.connector.connect_private(p, &self.addr, cx),
            None => ex.connector.connect_next(&self.addr, cx),
        };
        match self.follow(progress, cx) {
            None | Some(Step::Wait(_)) => Ok(()),
            Some(other) => Err(other),
        }
    }

    /// For the log line of a request refused unread: its first line as received (bounded).
    fn capture_request_line(&mut self, cx: &Ctx) {
        if cx.log.is_on() {
            self.log_text.capture_line(self.input.unparsed());
        }
    }

    /// Quill answers the request itself and closes: a malformed or refused request (nothing of
    /// it went to a server), or a server that failed before the client had a byte.
    fn refuse(&mut self, status: u16, cx: &mut Ctx) -> Step {
        let Some(canned) = http1::canned(status) else {
            return Step::Close(End::Error);
        };
        let head_only = self
            .ex
            .as_ref()
            .is_some_and(|ex| ex.head.method == Method::Head);
        let bytes = if head_only {
            canned.head()
        } else {
            canned.bytes
        };
        // What the client sent and Quill did not read would turn the close into a reset that
        // can destroy the reply in flight: read (and drop) what is already there first.
        let mut scratch = cx.pools.buffer();
        for _ in 0..8 {
            match self.client.read(&mut scratch[..]) {
                Ok(n) if n == BUF_SIZE => continue,
                _ => break,
            }
        }
        // The configured page for this status if there is one (it fits: at most 12 KiB), else
        // the built-in answer.
        let page = page_of(&self.pool, status).and_then(|p| {
            route::write_status(status, None, Some(p), (false, head_only), &mut scratch[..]).ok()
        });
        let n = match page {
            Some(n) => n,
            None => {
                let n = bytes.len().min(BUF_SIZE);
                scratch[..n].copy_from_slice(&bytes[..n]);
                n
            }
        };
        // An answer to a request that reached routing (a server could not be reached or failed)
        // says which request it was, as the log line does: the client's X-Request-ID, else the
        // one Quill made for it.
        let n = match self.ex.as_deref() {
            Some(ex) if settings(&self.pool).request_id => {
                let theirs = self.log_text.client_request_id();
                let id = if theirs.is_empty() || theirs.len() > 128 {
                    &ex.request_id[..]
                } else {
                    theirs
                };
                with_request_id(&mut scratch[..], n, id)
            }
            _ => n,
        };
        let mut leg = Leg::new(scratch, n, BodyRest::Done);
        let mut empty = Input::default();
        self.client_ready.writable = true;
        let written = leg.flush(&mut empty, &self.client, &mut self.client_ready, cx.pools);
        leg.release(cx.pools);
        self.bytes_out += leg.bytes;
        let _ = self.client.shutdown_write();
        // Per route once the request was routed (an exchange exists), else on the listener only.
        let route_stats = self
            .ex
            .as_ref()
            .and_then(|ex| route_stats(&self.pool, ex.route));
        cx.counters
            .http_request(&self.listener.http, route_stats, status, None);
        let ex = self.ex.take();
        self.record(
            log::Line {
                status,
                source: Source::Quill,
                range: None,
                bytes: (0, leg.bytes),
                ex: ex.as_deref(),
                route: None,
                end: End::Done,
            },
            cx,
        );
        if let Some(mut ex) = ex {
            // Its buffers and server connection let go (not reused).
            ex.release_buffers(cx.pools);
            ex.connector.release(false, 0, 0, cx);
        }
        match written {
            // A reply the socket would not take at once is not waited for: the client is
            // being closed for an error anyway.
            Ok(_) => Step::Close(End::Done),
            Err(_) => Step::Close(End::ClientReset),
        }
    }

    // === the exchange ===

    /// A server is connected: rewrite the request head and send it with the body bytes read
    /// with it.
    fn send_request(&mut self, cx: &mut Ctx) -> Result<(), Step> {
        let s = settings(&self.pool);
        let client = exchange::Client {
            addr: &self.addr,
            stream: &self.client,
            cert_edit: cert_edit(self.rare.as_deref()),
            local: self.pool.local,
        };
        let Some(ex) = self.ex.as_mut() else {
            return Ok(());
        };
        let route = route_of(&self.pool, ex.route);
        match ex.send_request(&mut self.input, &client, s, route, cx) {
            Ok(()) => {
                if let Some(h) = self.client.h2() {
                    h.head_sent();
                }
                Ok(())
            }
            Err(Unsent::Lost) => Err(Step::Close(End::Error)),
            Err(Unsent::Fault(status)) => Err(self.fault(status, cx)),
            Err(Unsent::Refuse(status)) => Err(self.refuse(status, cx)),
        }
    }

    /// Moves the exchange on. Ok(true) when it ended and the next request may be read.
    fn drive(&mut self, cx: &mut Ctx) -> Result<bool, Step> {
        let max_body = settings(&self.pool).max_body;
        let Some(ex) = self.ex.as_mut() else {
            return Ok(true);
        };
        let client = Peer {
            stream: &self.client,
            ready: &mut self.client_ready,
        };
        match ex.drive_up(&mut self.input, client, max_body, cx) {
            UpOutcome::Fine => {}
            UpOutcome::Again => return Err(Step::Again),
            UpOutcome::ClientGone => return Err(self.close_exchange(End::ClientReset, cx)),
            UpOutcome::Refuse(status) => return Err(self.fault(status, cx)),
        }
        for _ in 0..8 {
            match self.drive_down(cx) {
                DownOutcome::Wait => {
                    // Once the server has answered, the request will not go again: its head
                    // need not be kept, and a drained input holds no buffer while the response
                    // takes its time (an HTTP/2 stream's response held back by the client's
                    // window among them).
                    if self
                        .ex
                        .as_ref()
                        .is_some_and(|ex| ex.reply != Reply::Awaited)
                    {
                        self.input.settle(cx.pools);
                    }
                    return Ok(false);
                }
                DownOutcome::Again => return Err(Step::Again),
                DownOutcome::Finished => return self.finish(End::Done, cx).map(|()| true),
                DownOutcome::Headed => {
                    self.open_tunnel()?;
                    continue;
                }
                DownOutcome::Interim => continue,
                DownOutcome::Fault(status) => return Err(self.fault(status, cx)),
                DownOutcome::Retry => return self.retry(cx).map(|()| false),
                DownOutcome::Cut => {
                    self.client.reset_on_close();
                    return Err(self.close_exchange(End::ServerReset, cx));
                }
                DownOutcome::ClientGone => return Err(self.close_exchange(End::ClientReset, cx)),
            }
        }
        Err(Step::Again)
    }

    /// Whether the request being answered is the last this connection may carry
    /// (`keepalive_requests`; 0 = no limit): its response says `Connection: close`.
    fn is_last_request(&self, s: &crate::config::HttpSettings) -> bool {
        s.keepalive_requests != 0 && self.requests + 1 >= u64::from(s.keepalive_requests)
    }

    /// Moves the response on.
    fn drive_down(&mut self, cx: &mut Ctx) -> DownOutcome {
        let s = settings(&self.pool);
        let closing = self.draining || cx.draining || self.client_eof || self.is_last_request(s);
        let Some(ex) = self.ex.as_mut() else {
            return DownOutcome::Finished;
        };
        let edits = route_of(&self.pool, ex.route).map_or(&[][..], |r| &r.response_headers);
        let client = Peer {
            stream: &self.client,
            ready: &mut self.client_ready,
        };
        ex.drive_down(client, s, edits, closing, &mut self.bytes_out, cx)
    }

    /// After a 101: the client's side of the tunnel starts with what it sent after its request.
    fn open_tunnel(&mut self) -> Result<(), Step> {
        match self.ex.as_mut() {
            Some(ex) => ex
                .open_tunnel(&mut self.input)
                .map_err(|()| Step::Close(End::ServerReset)),
            None => Ok(()),
        }
    }

    /// A reused connection failed before any byte of the response: the request goes again,
    /// once, on a new connection (docs/design.md#retries).
    fn retry(&mut self, cx: &mut Ctx) -> Result<(), Step> {
        let Some(ex) = self.ex.as_mut() else {
            return Ok(());
        };
        ex.restart(&self.listener, &mut self.input, cx);
        self.connect(cx)
    }

    /// The server failed (or the request body did): Quill answers `status` if the client has
    /// not had a byte of the response yet, else cuts the client connection.
    fn fault(&mut self, status: u16, cx: &mut Ctx) -> Step {
        if self
            .ex
            .as_ref()
            .is_some_and(|ex| ex.reply == Reply::Replied)
        {
            self.client.reset_on_close();
            return self.close_exchange(End::ServerReset, cx);
        }
        self.refuse(status, cx)
    }

    /// Ends the session in the middle of an exchange (its log line says how).
    fn close_exchange(&mut self, end: End, cx: &mut Ctx) -> Step {
        if let Err(step) = self.finish(end, cx) {
            return step;
        }
        Step::Close(end)
    }

    /// The exchange is over: the server connection goes back to the idle pool if it may take
    /// another request, the log line is written, and the session reads the next request (or
    /// closes).
    fn finish(&mut self, end: End, cx: &mut Ctx) -> Result<(), Step> {
        let Some(mut ex) = self.ex.take() else {
            return Ok(());
        };
        let s = settings(&self.pool);
        let draining = self.draining || cx.draining;
        let settled = ex.settle(end == End::Done, s, draining, cx.pools);
        if let Some(p) = settled.private {
            self.rare.get_or_insert_default().private = Some(p);
        }
        let (up_bytes, down_bytes) = (settled.up_bytes, settled.down_bytes);
        self.requests += 1;
        self.bytes_in += up_bytes;
        self.bytes_out += down_bytes;
        let us = cx.now_us.saturating_sub(ex.started_us);
        let route_stats = route_stats(&self.pool, ex.route);
        let status = ex.status();
        cx.counters
            .http_request(&self.listener.http, route_stats, status, Some(us));
        self.record(
            log::Line {
                status,
                source: ex.source,
                range: None,
                bytes: (up_bytes, down_bytes),
                ex: Some(&ex),
                route: None,
                end,
            },
            cx,
        );
        let expires = cx.now.saturating_add(millis(s.server_idle_timeout));
        ex.connector
            .release(settled.keep, expires, s.server_keepalive, cx);
        exchange::recycle(ex);
        // Past the request: what follows in the input is the next one.
        self.input.fwd = self.input.fed;
        self.input.settle(cx.pools);
        self.idle_since = cx.now;
        if settled.close || end != End::Done {
            return Err(Step::Close(end));
        }
        Ok(())
    }

    /// The request was answered (or cut): counts the response by its source and writes its
    /// access-log line, to its site's file when the site has one, else the listener's (if the
    /// log is on).
    fn record(&self, line: log::Line, cx: &mut Ctx) {
        cx.counters.http_response(line.source, line.status);
        if !cx.log.is_on() {
            return;
        }
        let site = match cx.log.plan.sites.is_empty() {
            true => None,
            false => log::site_of(&self.pool, line.route(), &self.log_text),
        };
        let Some(access) = cx.log.for_request(&self.listener.name, site) else {
            return;
        };
        let cert = self
            .rare
            .as_ref()
            .and_then(|r| r.cert_edit.as_ref())
            .map(|e| &*e[0].value);
        log::write(
            access,
            (&self.addr, cx.now_us),
            &self.log_text,
            cert,
            &self.pool,
            line,
        );
    }

    pub(crate) fn info(&self, now_ms: u64) -> SessionInfo {
        let ex = self.ex.as_deref();
        SessionInfo {
            id: self.id,
            listener: self.pool.name.clone(),
            client: self.addr.to_string_with_port(),
            server: ex
                .and_then(|ex| ex.connector.server())
                .map(|sv| sv.addr().to_string()),
            age_ms: now_ms.saturating_sub(self.started_ms),
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
            state: match ex {
                None if self.file.is_some() => "http-file",
                None if self.cgi.is_some() => "http-cgi",
                None => "http-idle",
                Some(ex) if !ex.connector.is_connected() => "connecting",
                Some(ex) if ex.answer == Answer::Tunnel => "tunnel",
                Some(_) => "http-request",
            },
        }
    }

    /// Ends the session for `end`: buffers back to the pool, the server connection closed (a
    /// reset when the session was cut), and what the counters and the log need.
    pub(crate) fn close(
        &mut self,
        end: End,
        pools: &mut Pools,
        conns: &mut ServerConns,
    ) -> Closing {
        let mut lease: Option<ServerLease> = None;
        if let Some(mut ex) = self.ex.take() {
            ex.release_buffers(pools);
            if matches!(
                end,
                End::Shutdown | End::ClientReset | End::Closed | End::Panic
            ) {
                ex.connector.reset_on_close();
                if ex.reply == Reply::Replied {
                    self.client.reset_on_close();
                }
            }
            lease = ex.connector.take_lease();
            ex.connector.forget_conn(conns);
        }
        if let Some(p) = self.take_private() {
            p.close(conns);
        }
        if let Some(mut f) = self.file.take() {
            f.release(pools);
            self.client.reset_on_close();
        }
        if let Some(mut run) = self.cgi.take() {
            // The child's process group is killed; the client must not take a cut response
            // for a whole one.
            run.release(pools);
            self.client.reset_on_close();
        }
        if end == End::Panic {
            self.client.reset_on_close();
        }
        self.input.release(pools);
        Closing {
            client: self.addr,
            server: lease,
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
            started_ms: self.started_ms,
        }
    }
}

/// Adds `X-Request-ID: id` after the status line of the `n`-byte answer in `buf`; returns the new
/// length (`n` unchanged when the id is not a plain visible-ASCII value or does not fit).
fn with_request_id(buf: &mut [u8], n: usize, id: &[u8]) -> usize {
    let field_len = b"X-Request-ID: ".len() + id.len() + 2;
    let Some(line_end) = buf[..n].windows(2).position(|w| w == b"\r\n") else {
        return n;
    };
    if id.is_empty() || !id.iter().all(|b| (0x21..0x7f).contains(b)) || n + field_len > buf.len() {
        return n;
    }
    let at = line_end + 2;
    buf.copy_within(at..n, at + field_len);
    let mut field = Vec::with_capacity(field_len);
    field.extend_from_slice(b"X-Request-ID: ");
    field.extend_from_slice(id);
    field.extend_from_slice(b"\r\n");
    buf[at..at + field_len].copy_from_slice(&field);
    n + field_len
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An idle kept-alive client costs its socket, the `Session` slot and this box: well under the
    /// 1 KiB per idle client of docs/design.md#idle-connections-cost-almost-nothing (no buffer, no
    /// exchange, no server connection).
    #[test]
    fn idle_http_session_is_small() {
        let size = std::mem::size_of::<HttpSession>();
        println!(
            "HttpSession is {size} bytes, Exchange {}",
            std::mem::size_of::<Exchange>()
        );
        assert!(size <= 256, "HttpSession is {size} bytes");
    }
}
