//! An HTTP/1.x session (DESIGN §6): a client connection carrying requests one after the other
//! (kept alive, pipelined requests answered in order), each one an [`Exchange`] with a server
//! connection that a [`Connector`] picks per request (Pen's selection, failover, blacklisting and
//! emergency server) and takes from the worker's idle pool when it can.
//!
//! The data path is the TCP session's: heads are parsed in place in a pooled read buffer by the
//! strict parser of `quill_core::http1`, rewritten into a second pooled buffer, and written
//! together with the body bytes read with them in one `writev`; a `Content-Length` or
//! close-delimited body then flows through a [`Direction`] (pooled buffers, splice once bulky),
//! and a chunked body through the read buffer and the validating chunk decoder, never re-chunked.
//! An idle kept-alive client holds no buffer and no server connection.
//!
//! Errors before the client got a byte of the response are answered here (400, 408, 413, 414,
//! 431, 501, 502, 503, 504) and the client connection is closed; after that, a failure cuts the
//! client connection, as a direct connection would show it.

use std::cell::RefCell;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use mio::event::Event;
use mio::Interest;
use quill_core::http1::rewrite::{self, HeaderEdit, RequestRewrite, ResponseRewrite};
use quill_core::http1::{self, Body, FieldIndex, Framing, Limits, Method, Version};

use super::connect::{Connector, PrivateConn, Progress};
use super::copy::{Buf, Direction, Failure, Pools, BUF_SIZE};
use super::{Closing, Ctx, Side, Step, NEVER};
use crate::backend::{Pool, ServerLease};
use crate::clock::millis;
use crate::config::{HttpSettings, NormalizePath};
use crate::log::HttpEntry;
use crate::metrics::End;
use crate::net::{ClientAddr, Ready, Stream};
use crate::route::{self, Action, Route};
use crate::state::idle::ServerConns;
use crate::state::shared::{Listener, SessionInfo};

/// Bytes read from one side and not yet forwarded: `[start, fwd)` was forwarded (kept for a
/// replay: a request's head is at `start` while its exchange may still go again), `[fwd, fed)`
/// belongs to the message and waits to be written, `[fed, end)` is not yet parsed or fed to the
/// body decoder; `[fed, scanned)` was already searched for the end of a head.
///
/// Every position into the buffer lives here, and [`Input::fill`] is the one place that moves
/// bytes (its compaction): it moves every position with them. A position kept anywhere else
/// would point at other bytes after a compaction (the crash of a head straddling the buffer's
/// end, issue 22 E1), so none is.
#[derive(Debug, Default)]
struct Input {
    buf: Option<Buf>,
    start: u32,
    fwd: u32,
    fed: u32,
    scanned: u32,
    end: u32,
}

/// What a read into an [`Input`] gave.
#[derive(Debug, PartialEq, Eq)]
enum Filled {
    Data,
    /// Nothing to read now (wait for the next edge).
    Nothing,
    Eof,
    /// The buffer holds a whole unparsed message start: no room to read.
    Full,
}

impl Input {
    fn unparsed(&self) -> &[u8] {
        match &self.buf {
            Some(b) => &b[self.fed as usize..self.end as usize],
            None => &[],
        }
    }

    fn pending(&self) -> &[u8] {
        match &self.buf {
            Some(b) => &b[self.fwd as usize..self.fed as usize],
            None => &[],
        }
    }

    fn has_unparsed(&self) -> bool {
        self.fed < self.end
    }

    /// Forgets the message handled so far (no replay any more); gives the buffer back when
    /// nothing is left in it.
    fn settle(&mut self, pools: &mut Pools) {
        self.start = self.fwd;
        if self.fwd == self.end {
            self.start = 0;
            self.fwd = 0;
            self.fed = 0;
            self.scanned = 0;
            self.end = 0;
            if let Some(b) = self.buf.take() {
                pools.give_buffer(b);
            }
        }
    }

    fn release(&mut self, pools: &mut Pools) {
        if let Some(b) = self.buf.take() {
            pools.give_buffer(b);
        }
        *self = Input::default();
    }

    /// Reads what the socket has into the free end of the buffer (moving the kept bytes to its
    /// start first when the end is reached). A short read clears the readable flag: the queue
    /// is drained and a new edge comes with new data.
    fn fill(&mut self, src: &Stream, sr: &mut Ready, pools: &mut Pools) -> io::Result<Filled> {
        if !sr.readable {
            return Ok(Filled::Nothing);
        }
        let buf = self.buf.get_or_insert_with(|| pools.buffer());
        if self.end as usize == BUF_SIZE {
            if self.start == 0 {
                return Ok(Filled::Full);
            }
            let s = self.start as usize;
            buf.copy_within(s..BUF_SIZE, 0);
            self.fwd -= self.start;
            self.fed -= self.start;
            self.scanned = self.scanned.saturating_sub(self.start);
            self.end -= self.start;
            self.start = 0;
        }
        let space = BUF_SIZE - self.end as usize;
        match src.read(&mut buf[self.end as usize..]) {
            Ok(0) => {
                if sr.error {
                    return Err(io::ErrorKind::ConnectionReset.into());
                }
                Ok(Filled::Eof)
            }
            Ok(n) => {
                self.end += n as u32;
                if n < space && !sr.read_closed && !sr.error && !src.ended() {
                    sr.readable = false;
                }
                Ok(Filled::Data)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                sr.readable = false;
                Ok(Filled::Nothing)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Filled::Nothing),
            Err(e) => Err(e),
        }
    }

    /// Whether the unparsed bytes hold the end of a head (a blank line), looking only at bytes
    /// that arrived since the last look: a head is parsed once, when whole, however it trickles
    /// in. When one is found the next look starts over at `fed` (past the head once it is
    /// parsed: the next pipelined head may be in the buffer already).
    fn head_ends(&mut self) -> bool {
        let Some(b) = &self.buf else { return false };
        let from = self.scanned.max(self.fed).saturating_sub(2).max(self.fed) as usize;
        let bytes = b.get(from..self.end as usize).unwrap_or_default();
        let found =
            bytes.windows(2).any(|w| w == b"\n\n") || bytes.windows(3).any(|w| w == b"\n\r\n");
        self.scanned = if found { 0 } else { self.end };
        found
    }

    /// The bytes kept from `start` (a request's head while its exchange may go again).
    fn kept(&self) -> &[u8] {
        match &self.buf {
            Some(b) => &b[self.start as usize..self.end as usize],
            None => &[],
        }
    }

    /// Goes back to `start` (a request sent again from its head).
    fn rewind(&mut self) {
        self.fwd = self.start;
        self.fed = self.start;
    }
}

/// How the rest of a body flows once the head and the bytes read with it are written.
#[derive(Debug)]
enum Flow {
    /// Nothing more: the message is complete once written.
    Done,
    /// Bytes straight from the socket (a `Content-Length` rest, or until EOF).
    Raw(Direction),
    /// Chunked: read into the source's [`Input`], checked by the decoder, written as they came.
    Chunked(Body),
}

/// One direction of an exchange: a rewritten head (or a canned reply) to write first, then the
/// body bytes waiting in the source's input, then the [`Flow`].
#[derive(Debug)]
struct Leg {
    out: Option<Buf>,
    ostart: u32,
    oend: u32,
    flow: Flow,
    /// Bytes written to the destination.
    bytes: u64,
    /// Payload bytes of a chunked body (for `max_body`).
    payload: u64,
}

/// Where a leg is after a pump.
#[derive(Debug, PartialEq, Eq)]
enum LegState {
    Complete,
    Blocked,
    /// Stopped on its budget with the source still readable.
    Yielded,
}

/// Why a leg stopped for good.
#[derive(Debug)]
enum LegError {
    Read(#[expect(dead_code, reason = "kept for Debug output")] io::Error),
    Write(#[expect(dead_code, reason = "kept for Debug output")] io::Error),
    /// The body was malformed (a chunk line, a trailer).
    Body(http1::Error),
    /// The source closed before the end of the body.
    Truncated,
}

impl Leg {
    /// One side of a tunnel: everything the source sends, until it closes.
    fn tunnel() -> Leg {
        Leg {
            out: None,
            ostart: 0,
            oend: 0,
            flow: Flow::Raw(Direction::default()),
            bytes: 0,
            payload: 0,
        }
    }

    fn is_raw(&self) -> bool {
        matches!(self.flow, Flow::Raw(_))
    }

    fn new(out: Buf, len: usize, flow: Flow) -> Leg {
        Leg {
            out: Some(out),
            ostart: 0,
            oend: len as u32,
            flow,
            bytes: 0,
            payload: 0,
        }
    }

    fn release(&mut self, pools: &mut Pools) {
        if let Some(b) = self.out.take() {
            pools.give_buffer(b);
        }
        if let Flow::Raw(d) = &mut self.flow {
            d.release(pools);
        }
    }

    /// Writes the head and the input's pending bytes, in one `writev` when both are there.
    /// Ok(true) when all is written.
    fn flush(
        &mut self,
        input: &mut Input,
        dst: &Stream,
        dr: &mut Ready,
        pools: &mut Pools,
    ) -> io::Result<bool> {
        loop {
            let head = match &self.out {
                Some(b) => &b[self.ostart as usize..self.oend as usize],
                None => &[][..],
            };
            let body = input.pending();
            if head.is_empty() && body.is_empty() {
                // TLS: what the stream took counts as written once its records are out.
                if !dst.flush_backlog(dr)? {
                    return Ok(false);
                }
                if let Some(b) = self.out.take() {
                    pools.give_buffer(b);
                }
                return Ok(true);
            }
            if !dr.writable {
                return Ok(false);
            }
            let want = head.len() + body.len();
            // One slice alone goes by `send`: `writev` costs the kernel an iovec import and
            // the VFS layer on every request whose head carries no body.
            let wrote = if body.is_empty() {
                dst.write(head)
            } else if head.is_empty() {
                dst.write(body)
            } else {
                dst.write_vectored(&[IoSlice::new(head), IoSlice::new(body)])
            };
            let n = match wrote {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    dr.writable = false;
                    return Ok(false);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.bytes += n as u64;
            let from_head = n.min(head.len());
            self.ostart += from_head as u32;
            input.fwd += (n - from_head) as u32;
            if n < want {
                dr.writable = false;
                return Ok(false);
            }
        }
    }

    /// Moves the leg on as far as the sockets allow.
    fn pump(
        &mut self,
        input: &mut Input,
        src: &Stream,
        sr: &mut Ready,
        dst: &Stream,
        dr: &mut Ready,
        pools: &mut Pools,
    ) -> Result<LegState, LegError> {
        for _ in 0..64 {
            if !self.flush(input, dst, dr, pools).map_err(LegError::Write)? {
                return Ok(LegState::Blocked);
            }
            match &mut self.flow {
                Flow::Done => return Ok(LegState::Complete),
                Flow::Raw(d) => {
                    let before = d.bytes;
                    let r = d.pump(false, src, dst, sr, dr, pools);
                    self.bytes += d.bytes - before;
                    match r {
                        Ok(_) => {}
                        Err(Failure::Read(e)) => return Err(LegError::Read(e)),
                        Err(Failure::Write(e)) => return Err(LegError::Write(e)),
                    }
                    if d.is_complete() {
                        d.release(pools);
                        self.flow = Flow::Done;
                        return Ok(LegState::Complete);
                    }
                    if d.is_done() {
                        // EOF: the end of a close-delimited body, or a cut one.
                        let limited = d.is_limited();
                        d.release(pools);
                        self.flow = Flow::Done;
                        return if limited {
                            Err(LegError::Truncated)
                        } else {
                            Ok(LegState::Complete)
                        };
                    }
                    return Ok(if d.yielded {
                        LegState::Yielded
                    } else {
                        LegState::Blocked
                    });
                }
                Flow::Chunked(body) => {
                    if body.is_done() {
                        self.flow = Flow::Done;
                        continue;
                    }
                    if input.has_unparsed() {
                        let fed = body.feed(input.unparsed()).map_err(LegError::Body)?;
                        input.fed += fed.used as u32;
                        self.payload += fed.payload;
                        continue;
                    }
                    // Everything read was written: the buffer can start over.
                    input.settle(pools);
                    match input.fill(src, sr, pools).map_err(LegError::Read)? {
                        Filled::Data => {}
                        Filled::Nothing => return Ok(LegState::Blocked),
                        Filled::Eof => return Err(LegError::Truncated),
                        Filled::Full => return Err(LegError::Body(http1::Error::BadChunkLine)),
                    }
                }
            }
        }
        Ok(LegState::Yielded)
    }
}

/// Where the response is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Waiting for (the rest of) a response head.
    Head,
    /// A 1xx head is being passed on; another head follows.
    Interim,
    /// The final response is flowing to the client.
    Body,
    /// After a `101 Switching Protocols`: bytes flow both ways until both ends closed, on the
    /// TCP data path (splice once bulky), with `tunnel_timeout`.
    Tunnel,
}

/// One request and its response.
#[derive(Debug)]
struct Exchange {
    connector: Connector,
    /// The route the request matched (an index into the routes of the session's pool snapshot).
    route: Option<u32>,
    /// The server the request's stickiness cookie named (see `backend::Sticky`).
    sticky: Option<u32>,
    /// The request head, parsed at the client input's `start` (where it stays until the
    /// exchange is over, for a retry).
    head: http1::RequestHead,
    /// The request head's fields, noted by the parser (for routing and the rewrite).
    fields: FieldIndex,
    /// The request, once a server is connected; None while connecting.
    up: Option<Leg>,
    up_done: bool,
    /// The request can be sent again on a new connection: the method is idempotent and the
    /// body, if any, was all read with the head (DESIGN §6.3).
    replayable: bool,
    retried: bool,
    /// The client asked to upgrade (`Connection: upgrade` and `Upgrade`), and the request has
    /// no body: `Upgrade` is passed on, and a 101 turns the connection into a tunnel.
    upgrade: bool,
    answer: Answer,
    down: Option<Leg>,
    /// The server's bytes.
    sinput: Input,
    /// Status of the final response; 0 before.
    status: u16,
    /// Close the client after this response.
    close: bool,
    /// The server connection may take another request once this exchange is over.
    server_keeps: bool,
    /// The server connection began with a PROXY header naming this client (`proxy_protocol`):
    /// it serves no other client, so after the exchange it stays with the session (its next
    /// request to the same server takes it) instead of joining the worker's idle pool.
    proxied: bool,
    /// Some response byte came from the server.
    answered: bool,
    /// Some response byte went to the client.
    replied: bool,
    /// Clock ms: the request was all sent; the last progress either way.
    sent_ms: u64,
    active_ms: u64,
    started_at: Instant,
    connect_us: Option<u64>,
    first_byte_us: Option<u64>,
    /// The request id Quill made for this request (16 hex digits), sent if it had none.
    request_id: [u8; 16],
}

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
    /// The request's text for the access log (request line, Host, Referer, User-Agent,
    /// X-Request-ID; lengths in `log_lens`), kept to reuse its allocation.
    log_text: Vec<u8>,
    log_lens: [u16; 5],
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

fn settings(pool: &Pool) -> &HttpSettings {
    static DEFAULT: std::sync::OnceLock<HttpSettings> = std::sync::OnceLock::new();
    pool.http()
        .map(|h| &**h)
        .unwrap_or_else(|| DEFAULT.get_or_init(HttpSettings::default))
}

thread_local! {
    /// The boxes of this worker's finished exchanges (buffers and server connection already let
    /// go), for its next requests: the steady state allocates nothing per request (DESIGN §6.5).
    /// What a spare box still holds (its pool snapshot) is dropped when it is used again.
    #[expect(clippy::vec_box, reason = "the boxes are what is kept: one moves into a session's `ex`")]
    static SPARE: RefCell<Vec<Box<Exchange>>> = const { RefCell::new(Vec::new()) };
}

/// At most this many spare exchange boxes per worker (a burst's surplus is freed).
const SPARE_MAX: usize = 64;

/// `ex` in a spare box of this worker's, or a new one.
fn boxed(ex: Exchange) -> Box<Exchange> {
    match SPARE.with_borrow_mut(Vec::pop) {
        Some(mut b) => {
            *b = ex;
            b
        }
        None => Box::new(ex),
    }
}

/// Keeps the box of a finished exchange for the next request (see `SPARE`).
fn recycle(ex: Box<Exchange>) {
    SPARE.with_borrow_mut(|spare| {
        if spare.len() < SPARE_MAX {
            spare.push(ex);
        }
    });
}

/// The `error_pages` body for `status` of the pool snapshot's settings, if one is configured.
fn page_of(pool: &Pool, status: u16) -> Option<route::Page<'_>> {
    settings(pool)
        .error_page(status)
        .map(|p| (p.content_type, &p.body[..]))
}

/// The route with this index in the pool snapshot's routes.
fn route_of(pool: &Pool, index: Option<u32>) -> Option<&Route<Pool>> {
    pool.routes.as_ref()?.routes.get(index? as usize)
}

fn idempotent(m: Method) -> bool {
    matches!(
        m,
        Method::Get | Method::Head | Method::Put | Method::Delete | Method::Options | Method::Trace
    )
}

/// An answer Quill writes itself without a server.
enum Local {
    /// A plain status (403, 404, 429 with its `Retry-After` seconds), and the route whose
    /// `client_acl` or `rate` refused the request (None: no route matched).
    Status(u16, Option<u64>, Option<usize>),
    /// The answer of the route with this index (redirect, respond, deny).
    Route(usize),
}

/// What the request side of a drive asks for.
enum UpOutcome {
    Fine,
    Again,
    ClientGone,
    Refuse(u16),
}

/// What the response side of a drive asks for.
enum DownOutcome {
    /// Blocked: wait for an event.
    Wait,
    Again,
    /// The exchange is over.
    Finished,
    /// The response head is parsed: its leg is set up.
    Headed,
    /// An interim response was passed on: read the next head.
    Interim,
    Fault(u16),
    Retry,
    /// The server cut the response after the client had a part of it.
    Cut,
    ClientGone,
}

impl HttpSession {
    pub(crate) fn new(
        listener: Arc<Listener>,
        id: u64,
        client: Stream,
        addr: ClientAddr,
        now_ms: u64,
    ) -> HttpSession {
        let pool = listener.pool.load_full();
        HttpSession {
            id,
            client,
            addr,
            client_ready: Ready::default(),
            listener,
            pool,
            input: Input::default(),
            ex: None,
            started_ms: now_ms,
            idle_since: now_ms,
            head_since: None,
            requests: 0,
            bytes_in: 0,
            bytes_out: 0,
            client_eof: false,
            draining: false,
            drain_close_ms: NEVER,
            log_text: Vec::new(),
            log_lens: [0; 5],
            rare: None,
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn start(&mut self, cx: &mut Ctx) -> Step {
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

    /// A request on a TLS connection whose Host the handshake's server name would not have been
    /// served the same certificate for (RFC 9110 §15.5.20: 421): the client reused a connection
    /// for another site.
    fn misdirected(&self, pool: &Pool, host: Option<&[u8]>) -> bool {
        let (Some(tls), Some(server), Some(host)) = (self.client.tls(), pool.tls(), host) else {
            return false;
        };
        let sni = tls.server_name();
        let (Some(sni), Ok(host)) = (sni, std::str::from_utf8(route::host_name(host))) else {
            return false;
        };
        // The usual case, Host naming the SNI itself, needs no lookup.
        !sni.eq_ignore_ascii_case(host) && !server.certs.serves_alike(sni, host)
    }

    /// Starts reading requests from a client whose socket is registered already, with the
    /// readiness known of it (after a TLS handshake: request bytes may have come with it).
    /// The private server connection, taken (see [`Rare::private`]).
    fn take_private(&mut self) -> Option<PrivateConn> {
        self.rare.as_mut().and_then(|r| r.private.take())
    }

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

    pub(crate) fn on_deadline(&mut self, cx: &mut Ctx) -> Step {
        let now = cx.now;
        if now < self.deadline() {
            return self.wait();
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
        if ex.up_done && !ex.answered {
            return self.fault(504, cx);
        }
        // No body progress either way for body_timeout.
        if ex.replied {
            self.client.reset_on_close();
            return self.close_exchange(End::IdleTimeout, cx);
        }
        let status = if ex.answered { 504 } else { 408 };
        self.fault(status, cx)
    }

    pub(crate) fn resume(&mut self, cx: &mut Ctx) -> Step {
        self.step(cx)
    }

    /// The worker drains (see [`super::Session::drain`]): a busy client gets `Connection: close`
    /// on its current response and is closed after it; an idle one is kept for one more request
    /// until `close_at` (kept alive) or `grace_end` (no request yet), and the new deadline is
    /// returned.
    pub(crate) fn drain(&mut self, close_at: u64, grace_end: u64) -> Option<u64> {
        self.draining = true;
        let idle = self.ex.is_none() && self.head_since.is_none() && !self.input.has_unparsed();
        // A busy client that is not told to close (its response began before the drain) gets
        // the whole grace for its next request, as does a client that has not sent one yet.
        self.drain_close_ms = if idle && self.requests > 0 {
            close_at
        } else {
            grace_end
        };
        idle.then(|| self.deadline())
    }

    /// A drain's grace for this idle client is over. A last read first: a request that came in
    /// just now is answered (with `Connection: close`) rather than lost with the connection;
    /// otherwise it is closed (nothing begun, nothing lost).
    fn close_drained(&mut self, cx: &mut Ctx) -> Step {
        self.drain_close_ms = NEVER;
        self.client_ready.readable = true;
        match self.step(cx) {
            Step::Wait(_) if self.ex.is_none() && !self.input.has_unparsed() => {
                Step::Close(End::Done)
            }
            step => step,
        }
    }

    /// The session's one deadline.
    fn deadline(&self) -> u64 {
        let s = settings(&self.pool);
        let Some(ex) = &self.ex else {
            if let Some(since) = self.head_since {
                return since.saturating_add(millis(s.header_timeout));
            }
            let limit = if self.requests == 0 {
                s.header_timeout
            } else {
                s.keepalive_timeout
            };
            return self
                .idle_since
                .saturating_add(millis(limit))
                .min(self.drain_close_ms);
        };
        if !ex.connector.is_connected() {
            return ex.connector.deadline();
        }
        if ex.answer == Answer::Tunnel {
            if s.tunnel_timeout.is_zero() {
                return NEVER;
            }
            return ex.active_ms.saturating_add(millis(s.tunnel_timeout));
        }
        if ex.up_done && !ex.answered {
            return ex.sent_ms.saturating_add(millis(s.response_timeout));
        }
        if s.body_timeout.is_zero() {
            return NEVER;
        }
        ex.active_ms.saturating_add(millis(s.body_timeout))
    }

    fn wait(&self) -> Step {
        Step::Wait(self.deadline())
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
                    super::proxy_header(version, &self.addr, &self.client, self.pool.local);
                let progress = ex.connector.send_preface(header.as_bytes(), &self.addr, cx);
                self.follow(progress, cx)
            }
            Progress::Connected => {
                if let Some(ex) = &mut self.ex {
                    let us = ex.started_at.elapsed().as_micros() as u64;
                    ex.connect_us = Some(us);
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
            let r = if self.ex.is_none() {
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

    /// A head is in the input (or the buffer is full): parse it and start its exchange.
    fn begin(&mut self, cx: &mut Ctx) -> Result<(), Step> {
        // The snapshot is shared by every worker: its count is changed only when a reload made a
        // new one (a count changed per request moves its cache line between cores).
        let current = self.listener.pool.load();
        if !Arc::ptr_eq(&current, &self.pool) {
            self.pool = arc_swap::Guard::into_inner(current);
        } else {
            drop(current);
        }
        let pool = self.pool.clone();
        let s = settings(&pool);
        let limits = Limits {
            max_head: (s.max_header_bytes as usize).min(BUF_SIZE),
            max_headers: s.max_headers as usize,
            require_host: true,
            max_request_line: s.max_request_line as usize,
        };
        let mut fields = FieldIndex::empty();
        let head = match http1::parse_request_indexed(self.input.unparsed(), &limits, &mut fields) {
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
        if cx.log.is_some() {
            self.capture_log(&head);
        }
        if head.method == Method::Connect {
            return Err(self.refuse(405, cx));
        }
        if let (Framing::Length(n), Some(max)) = (head.framing, s.max_body) {
            if n > max {
                return Err(self.refuse(413, cx));
            }
        }
        // One decision of the request's host (the parser's `authority`: an absolute-form
        // target's, which Host agrees with, else Host) for the 421 check, routing and the Host
        // the server receives.
        if self.misdirected(&pool, head.authority.map(|h| h.of(self.input.unparsed()))) {
            return self.answer_locally(&head, Local::Status(421, None, None), cx);
        }
        // Routes match the path in normal form; a path that has none is refused (as nginx).
        let path = match route::normal_path(head.target.of(self.input.unparsed())) {
            Ok(path) => path,
            Err(_) => {
                cx.counters.http_parse_error(http1::Error::InvalidTarget);
                return Err(self.refuse(400, cx));
            }
        };
        // Routing: the first route that matches, else the listener's own servers.
        let client_ip = self.addr.ip();
        let mut route_pool = None;
        let mut route_index = None;
        if let Some(routes) = &pool.routes {
            let buf = self.input.unparsed();
            let found = routes.find_index(
                head.method_span.of(buf),
                &path,
                head.authority.map(|h| h.of(buf)),
                |name| fields.value(buf, name),
            );
            drop(path);
            if let Some(i) = found {
                let route = &routes.routes[i];
                route_index = Some(i as u32);
                if !routes.permits(route, client_ip) {
                    return self.answer_locally(&head, Local::Status(403, None, Some(i)), cx);
                }
                if let (Some(ip), Some(_)) = (client_ip, &route.rate) {
                    if let Err(wait) = cx.rates.admit(route, ip, cx.now) {
                        return self.answer_locally(
                            &head,
                            Local::Status(429, Some(wait), Some(i)),
                            cx,
                        );
                    }
                }
                match &route.action {
                    Action::Pool(p) => route_pool = Some(p.clone()),
                    _ => return self.answer_locally(&head, Local::Route(i), cx),
                }
            }
        }
        if route_index.is_none() && pool.servers.is_empty() && pool.emergency.is_none() {
            return self.answer_locally(&head, Local::Status(404, None, None), cx);
        }
        // The listener's own servers unless a route named a pool.
        let target_pool = route_pool.unwrap_or(pool);
        // Stickiness by cookie: the server the request's cookie names, if the pool has one.
        let sticky = target_pool.sticky.as_ref().and_then(|st| {
            let buf = self.input.unparsed();
            st.server_of(
                fields
                    .iter(buf)
                    .filter(|f| f.name.of(buf).eq_ignore_ascii_case(b"cookie"))
                    .map(|f| f.value.of(buf)),
            )
        });
        let upgrade_asked = head.connection.upgrade
            && head.framing == Framing::None
            && fields.value(self.input.unparsed(), b"upgrade").is_some();
        self.input.start = self.input.fed;
        self.ex = Some(boxed(Exchange {
            connector: Connector::for_http(target_pool, false, sticky).via(&self.listener),
            sticky,
            route: route_index,
            head,
            fields,
            up: None,
            up_done: false,
            replayable: idempotent(head.method),
            retried: false,
            upgrade: upgrade_asked,
            answer: Answer::Head,
            down: None,
            sinput: Input::default(),
            status: 0,
            close: false,
            server_keeps: false,
            proxied: false,
            answered: false,
            replied: false,
            sent_ms: cx.now,
            active_ms: cx.now,
            started_at: Instant::now(),
            connect_us: None,
            first_byte_us: None,
            // Made with the exchange, so Quill's own answer to it (503 when no server can be
            // reached) logs and sends a real id, as a forwarded request does.
            request_id: route::hex16(cx.rand()),
        }));
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
        let keep = head.keep_alive()
            && head.framing == Framing::None
            && !self.draining
            && !cx.draining
            && !settings(&self.pool).keepalive_timeout.is_zero();
        let head_only = head.method == Method::Head;
        let what_route = match what {
            Local::Route(i) => Some(i as u32),
            Local::Status(_, _, route) => route.map(|i| i as u32),
        };
        let mut out = cx.pools.buffer();
        let written = match what {
            Local::Status(status, wait, _) => {
                let page = page_of(&self.pool, status);
                route::write_status(status, wait, page, (keep, head_only), &mut out[..])
                    .map(|n| (status, n))
            }
            Local::Route(i) => {
                let Some(route) = self.pool.routes.as_ref().and_then(|r| r.routes.get(i)) else {
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
        let mut leg = Leg::new(out, n, Flow::Done);
        let mut empty = Input::default();
        let flushed = leg.flush(&mut empty, &self.client, &mut self.client_ready, cx.pools);
        let sent = leg.bytes;
        leg.release(cx.pools);
        self.bytes_out += sent;
        self.requests += 1;
        // Per route: the route's own answer or refusal, or `(no route)`.
        let route_stats = self.pool.routes.as_deref().map(|r| r.stats_of(what_route));
        cx.counters
            .http_request(&self.listener.http, route_stats, status, None);
        let route_name = route_of(&self.pool, what_route).map(|r| r.name.as_str());
        self.log(status, true, (0, sent), None, route_name, End::Done, cx);
        self.input.settle(cx.pools);
        self.idle_since = cx.now;
        match flushed {
            // The whole answer went: read the next request.
            Ok(true) if keep => Ok(()),
            Ok(_) => Err(Step::Close(End::Done)),
            Err(_) => Err(Step::Close(End::ClientReset)),
        }
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
        if cx.log.is_none() {
            return;
        }
        let buf = self.input.unparsed();
        let end = buf
            .iter()
            .position(|&b| b == b'\r' || b == b'\n')
            .unwrap_or(buf.len())
            .min(2048);
        self.log_text.clear();
        self.log_text.extend_from_slice(&buf[..end]);
        self.log_lens = [end as u16, 0, 0, 0, 0];
    }

    fn capture_log(&mut self, head: &http1::RequestHead) {
        let buf = self.input.unparsed();
        self.log_text.clear();
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
            let n = part.len().min(2048);
            self.log_text.extend_from_slice(&part[..n]);
            self.log_lens[i] = n as u16;
        }
    }

    /// Field `i` of the request's log text (0 request line, 1 host, 2 referer, 3 user agent,
    /// 4 the client's X-Request-ID), as the access log reads it.
    fn log_part(&self, i: usize) -> &[u8] {
        let start: usize = self.log_lens[..i].iter().map(|&n| usize::from(n)).sum();
        let end = start + usize::from(self.log_lens[i]);
        self.log_text.get(start..end).unwrap_or_default()
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
                let theirs = self.log_part(4);
                let id = if theirs.is_empty() || theirs.len() > 128 {
                    &ex.request_id[..]
                } else {
                    theirs
                };
                with_request_id(&mut scratch[..], n, id)
            }
            _ => n,
        };
        let mut leg = Leg::new(scratch, n, Flow::Done);
        let mut empty = Input::default();
        self.client_ready.writable = true;
        let written = leg.flush(&mut empty, &self.client, &mut self.client_ready, cx.pools);
        leg.release(cx.pools);
        self.bytes_out += leg.bytes;
        let _ = self.client.shutdown_write();
        // Per route once the request was routed (an exchange exists), else on the listener only.
        let route_stats = self.ex.as_ref().and_then(|ex| {
            let routes = self.pool.routes.as_deref()?;
            Some(routes.stats_of(ex.route))
        });
        cx.counters
            .http_request(&self.listener.http, route_stats, status, None);
        let ex = self.ex.take();
        self.log(
            status,
            true,
            (0, leg.bytes),
            ex.as_deref(),
            None,
            End::Done,
            cx,
        );
        if let Some(mut ex) = ex {
            self.drop_exchange(&mut ex, cx);
        }
        match written {
            // A reply the socket would not take at once is not waited for: the client is
            // being closed for an error anyway.
            Ok(_) => Step::Close(End::Done),
            Err(_) => Step::Close(End::ClientReset),
        }
    }

    /// Lets go of an exchange's buffers and server connection (not reused).
    fn drop_exchange(&mut self, ex: &mut Exchange, cx: &mut Ctx) {
        if let Some(mut leg) = ex.up.take() {
            leg.release(cx.pools);
        }
        if let Some(mut leg) = ex.down.take() {
            leg.release(cx.pools);
        }
        ex.sinput.release(cx.pools);
        ex.connector.release(false, 0, 0, cx);
    }

    // === the exchange ===

    /// A server is connected: rewrite the request head and send it with the body bytes read
    /// with it.
    fn send_request(&mut self, cx: &mut Ctx) -> Result<(), Step> {
        let s = settings(&self.pool);
        let Some(ex) = self.ex.as_mut() else {
            return Ok(());
        };
        let route = route_of(&self.pool, ex.route);
        let Some(buf) = self.input.buf.as_deref() else {
            return Err(Step::Close(End::Error));
        };
        let head = ex.head;
        let start = self.input.start as usize;
        let msg = self.input.kept();
        super::fault::inject(head.target.of(msg));
        let client_ip = self.addr.ip();
        let trusted = client_ip.is_some_and(|ip| s.trusted_proxies.iter().any(|n| n.contains(ip)));
        let rw = RequestRewrite {
            client: client_ip,
            trusted,
            forwarded_for: s.forwarded_for,
            proto: if self.client.tls().is_some() {
                "https"
            } else {
                "http"
            },
            x_forwarded_proto: s.x_forwarded_proto,
            x_forwarded_host: s.x_forwarded_host,
            forwarded: s.forwarded,
            via: s.via.as_deref(),
            request_id: s.request_id.then_some(&ex.request_id[..]),
            edits: [
                &s.request_headers,
                route.map_or(&[][..], |r| &r.request_headers),
                match self.rare.as_ref().and_then(|r| r.cert_edit.as_ref()) {
                    Some(e) => e,
                    None => strip_cert_subject(),
                },
            ],
            rewrite_path: route
                .and_then(|r| r.rewrite_path.as_ref())
                .map(|(a, b)| (a.as_str(), b.as_str())),
            normalize_path: s.normalize_path == NormalizePath::Forward,
            underscores: s.underscores_in_headers,
            upgrade: ex.upgrade,
        };
        let mut out = cx.pools.buffer();
        // A new connection to a pool with `proxy_protocol` starts with the header, in the same
        // write as the head (never a shared idle one: the connector takes none for such a pool;
        // the session's private one carried this client's header already).
        let mut at = 0;
        ex.proxied = ex.connector.is_private();
        if let Some(version) = ex.connector.pool().tuning.proxy_protocol {
            if !ex.connector.is_reused() && ex.connector.pool().server_tls.is_some() {
                // With `server_tls` the header went before the TLS handshake (`Preface`).
                ex.proxied = true;
            } else if !ex.connector.is_reused() {
                let local = self.pool.local;
                let header = super::proxy_header(version, &self.addr, &self.client, local);
                at = header.as_bytes().len();
                out[..at].copy_from_slice(header.as_bytes());
                ex.proxied = true;
            }
        }
        let n = match rewrite::write_request_indexed(msg, &head, &ex.fields, &rw, &mut out[at..]) {
            Ok(n) => n + at,
            Err(rewrite::Overflow) => {
                cx.pools.give_buffer(out);
                return Err(self.fault(431, cx));
            }
        };
        // The body bytes read with the head.
        let body_start = start + head.len;
        let avail = self.input.end as usize - body_start;
        let (taken, flow, whole) = match head.framing {
            Framing::None | Framing::Close => (0, Flow::Done, true),
            Framing::Length(len) => {
                let k = len.min(avail as u64) as usize;
                let rest = len - k as u64;
                if rest == 0 {
                    (k, Flow::Done, true)
                } else {
                    (k, Flow::Raw(Direction::limited(rest)), false)
                }
            }
            Framing::Chunked => {
                let mut body = Body::new(Framing::Chunked);
                match body.feed(&buf[body_start..self.input.end as usize]) {
                    Ok(f) => (f.used, Flow::Chunked(body), f.done),
                    Err(e) => {
                        cx.pools.give_buffer(out);
                        cx.counters.http_parse_error(e);
                        return Err(self.refuse(e.request_status(), cx));
                    }
                }
            }
        };
        ex.replayable &= whole;
        self.input.fwd = body_start as u32;
        self.input.fed = (body_start + taken) as u32;
        ex.up = Some(Leg::new(out, n, flow));
        ex.up_done = false;
        ex.sent_ms = cx.now;
        ex.active_ms = cx.now;
        Ok(())
    }

    /// Moves the exchange on. Ok(true) when it ended and the next request may be read.
    fn drive(&mut self, cx: &mut Ctx) -> Result<bool, Step> {
        match self.drive_up(cx) {
            UpOutcome::Fine => {}
            UpOutcome::Again => return Err(Step::Again),
            UpOutcome::ClientGone => return Err(self.close_exchange(End::ClientReset, cx)),
            UpOutcome::Refuse(status) => return Err(self.fault(status, cx)),
        }
        for _ in 0..8 {
            match self.drive_down(cx) {
                DownOutcome::Wait => return Ok(false),
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

    /// After a 101: the client's side of the tunnel starts with what it sent after its request.
    fn open_tunnel(&mut self) -> Result<(), Step> {
        let Some(ex) = self.ex.as_mut() else {
            return Ok(());
        };
        if ex.answer != Answer::Tunnel || ex.up.as_ref().is_some_and(|l| l.is_raw()) {
            return Ok(());
        }
        if !ex.up_done {
            return Err(Step::Close(End::ServerReset));
        }
        let sent = ex.up.as_ref().map_or(0, |l| l.bytes);
        self.input.fwd = self.input.fed;
        self.input.fed = self.input.end;
        let mut leg = Leg::tunnel();
        leg.bytes = sent;
        ex.up = Some(leg);
        ex.up_done = false;
        Ok(())
    }

    /// Moves the request on.
    fn drive_up(&mut self, cx: &mut Ctx) -> UpOutcome {
        let max_body = settings(&self.pool).max_body;
        let Some(ex) = self.ex.as_mut() else {
            return UpOutcome::Fine;
        };
        if self.client_ready.error && !ex.replied {
            return UpOutcome::ClientGone;
        }
        if ex.up_done {
            return UpOutcome::Fine;
        }
        let (Some(leg), Some((server, sready))) = (ex.up.as_mut(), ex.connector.server_side())
        else {
            return UpOutcome::Fine;
        };
        let before = leg.bytes;
        let r = leg.pump(
            &mut self.input,
            &self.client,
            &mut self.client_ready,
            server,
            sready,
            cx.pools,
        );
        if leg.bytes != before {
            ex.active_ms = cx.now;
        }
        if let (Some(max), Flow::Chunked(_)) = (max_body, &leg.flow) {
            if leg.payload > max {
                return UpOutcome::Refuse(413);
            }
        }
        match r {
            Ok(LegState::Complete) => {
                ex.up_done = true;
                ex.sent_ms = cx.now;
                UpOutcome::Fine
            }
            Ok(LegState::Blocked) => UpOutcome::Fine,
            Ok(LegState::Yielded) => UpOutcome::Again,
            // The client went away mid-body.
            Err(LegError::Read(_)) | Err(LegError::Truncated) => UpOutcome::ClientGone,
            Err(LegError::Write(_)) => {
                // The server went away while taking the request: its answer, if any, is read
                // next; else a retry or a 502. The connection is not reused.
                ex.up_done = true;
                ex.sent_ms = cx.now;
                ex.server_keeps = false;
                UpOutcome::Fine
            }
            Err(LegError::Body(e)) => {
                cx.counters.http_parse_error(e);
                UpOutcome::Refuse(e.request_status())
            }
        }
    }

    /// Moves the response on.
    fn drive_down(&mut self, cx: &mut Ctx) -> DownOutcome {
        let draining = self.draining || cx.draining;
        let client_eof = self.client_eof;
        let s = settings(&self.pool);
        let Some(ex) = self.ex.as_mut() else {
            return DownOutcome::Finished;
        };
        if ex.answer == Answer::Head {
            let edits = route_of(&self.pool, ex.route).map_or(&[][..], |r| &r.response_headers);
            return Self::read_response_head(ex, s, edits, draining || client_eof, cx);
        }
        let Some((server, sready)) = ex.connector.server_side() else {
            return DownOutcome::Wait;
        };
        let Some(leg) = ex.down.as_mut() else {
            return DownOutcome::Fault(502);
        };
        let before = leg.bytes;
        let r = leg.pump(
            &mut ex.sinput,
            server,
            sready,
            &self.client,
            &mut self.client_ready,
            cx.pools,
        );
        if leg.bytes != before {
            ex.replied = true;
            ex.active_ms = cx.now;
        }
        match r {
            Ok(LegState::Complete) => {
                if ex.answer == Answer::Interim {
                    if let Some(mut leg) = ex.down.take() {
                        self.bytes_out += leg.bytes;
                        leg.release(cx.pools);
                    }
                    // The interim head is passed on: its bytes are not kept (the buffer makes
                    // room for the next head, however many interim ones come).
                    ex.sinput.settle(cx.pools);
                    ex.answer = Answer::Head;
                    return DownOutcome::Interim;
                }
                if ex.answer == Answer::Tunnel && !ex.up_done {
                    // The server closed its side; the client's may still be open.
                    return DownOutcome::Wait;
                }
                if !ex.up_done {
                    // The answer came before the whole request (a server refusing a body): the
                    // rest of the request cannot be told from a next one.
                    ex.close = true;
                    ex.server_keeps = false;
                }
                DownOutcome::Finished
            }
            Ok(LegState::Blocked) => DownOutcome::Wait,
            Ok(LegState::Yielded) => DownOutcome::Again,
            Err(LegError::Write(_)) => DownOutcome::ClientGone,
            Err(LegError::Read(_)) | Err(LegError::Truncated) => DownOutcome::Cut,
            Err(LegError::Body(e)) => {
                cx.counters.http_parse_error(e);
                DownOutcome::Cut
            }
        }
    }

    /// Reads the response head and sets up its leg.
    fn read_response_head(
        ex: &mut Exchange,
        s: &HttpSettings,
        route_edits: &[HeaderEdit],
        closing: bool,
        cx: &mut Ctx,
    ) -> DownOutcome {
        let limits = Limits {
            max_head: BUF_SIZE,
            max_headers: 1000,
            require_host: false,
            max_request_line: BUF_SIZE,
        };
        loop {
            if ex.sinput.has_unparsed() {
                let to_head = ex.head.method == Method::Head;
                let mut fields = FieldIndex::empty();
                let unparsed = ex.sinput.unparsed();
                match http1::parse_response_indexed(unparsed, &limits, to_head, &mut fields) {
                    Ok(Some(head)) => {
                        let head = (head, &fields);
                        return Self::start_response(ex, head, s, route_edits, closing, cx);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        cx.counters.http_parse_error(e);
                        return DownOutcome::Fault(502);
                    }
                }
            }
            let Some((server, sready)) = ex.connector.server_side() else {
                return DownOutcome::Wait;
            };
            match ex.sinput.fill(server, sready, cx.pools) {
                Ok(Filled::Data) => {
                    ex.answered = true;
                    ex.active_ms = cx.now;
                }
                Ok(Filled::Nothing) => return DownOutcome::Wait,
                Ok(Filled::Full) => return DownOutcome::Fault(502),
                Ok(Filled::Eof) | Err(_) => {
                    // Closed (or reset) before a whole head: a kept-alive connection the server
                    // gave up just as the request went out is retried once (DESIGN §6.3).
                    if !ex.answered && ex.connector.is_reused() && ex.replayable && !ex.retried {
                        return DownOutcome::Retry;
                    }
                    return DownOutcome::Fault(502);
                }
            }
        }
    }

    /// A response head was parsed: rewrite it and set up its leg.
    fn start_response(
        ex: &mut Exchange,
        (head, fields): (http1::ResponseHead, &FieldIndex),
        s: &HttpSettings,
        route_edits: &[HeaderEdit],
        closing: bool,
        cx: &mut Ctx,
    ) -> DownOutcome {
        let status = head.status;
        let tunnel = status == 101;
        if tunnel && !ex.upgrade {
            // A switch nobody asked for.
            return DownOutcome::Fault(502);
        }
        let interim = status < 200 && !tunnel;
        if head.framing == Framing::Chunked && ex.head.version == Version::Http10 {
            // The request went as HTTP/1.0: a server may not answer it chunked, and an
            // HTTP/1.0 client could not read it.
            return DownOutcome::Fault(502);
        }
        let Some(buf) = ex.sinput.buf.as_deref() else {
            return DownOutcome::Fault(502);
        };
        let base = ex.sinput.fed as usize;
        let end = ex.sinput.end as usize;
        let msg = &buf[base..end];
        if !interim {
            ex.close |=
                !ex.head.keep_alive() || closing || head.framing == Framing::Close || !ex.up_done;
        }
        // A sticky pool's server gives the client its cookie unless the client has it already.
        let pool = ex
            .connector
            .pool()
            .sticky
            .is_some()
            .then(|| ex.connector.pool().clone());
        let cookie: &[HeaderEdit] = match (
            pool.as_ref().and_then(|p| p.sticky.as_ref()),
            ex.connector.current(),
        ) {
            (Some(st), Some(i)) if !interim && ex.sticky != Some(i) => {
                st.set_cookie.get(i as usize).map_or(&[], |e| &e[..])
            }
            _ => &[],
        };
        let rw = ResponseRewrite {
            client_version: ex.head.version,
            close: !interim && ex.close,
            keep_alive_10: !interim && !ex.close && ex.head.version == Version::Http10,
            via: s.via.as_deref(),
            edits: [&s.response_headers, route_edits, cookie],
            upgrade: tunnel,
        };
        let mut out = cx.pools.buffer();
        let n = match rewrite::write_response_indexed(msg, &head, fields, &rw, &mut out[..]) {
            Ok(n) => n,
            Err(_) => {
                cx.pools.give_buffer(out);
                return DownOutcome::Fault(502);
            }
        };
        let body_start = base + head.len;
        let avail = end - body_start;
        let (taken, flow) = match head.framing {
            // After a 101 everything the server sends is the new protocol's, to its end.
            _ if tunnel => (avail, Flow::Raw(Direction::default())),
            Framing::None => (0, Flow::Done),
            Framing::Length(len) => {
                let k = len.min(avail as u64) as usize;
                let rest = len - k as u64;
                if rest == 0 {
                    (k, Flow::Done)
                } else {
                    (k, Flow::Raw(Direction::limited(rest)))
                }
            }
            Framing::Close => (avail, Flow::Raw(Direction::default())),
            Framing::Chunked => {
                let mut body = Body::new(Framing::Chunked);
                match body.feed(&buf[body_start..end]) {
                    Ok(f) => (f.used, Flow::Chunked(body)),
                    Err(e) => {
                        cx.pools.give_buffer(out);
                        cx.counters.http_parse_error(e);
                        return DownOutcome::Fault(502);
                    }
                }
            }
        };
        ex.sinput.fwd = body_start as u32;
        ex.sinput.fed = (body_start + taken) as u32;
        if !interim {
            ex.status = status;
            ex.server_keeps = head.keep_alive() && ex.up_done;
            ex.first_byte_us = Some(ex.started_at.elapsed().as_micros() as u64);
        }
        ex.down = Some(Leg::new(out, n, flow));
        ex.answer = if interim {
            Answer::Interim
        } else if tunnel {
            ex.close = true;
            ex.server_keeps = false;
            Answer::Tunnel
        } else {
            Answer::Body
        };
        if interim {
            DownOutcome::Interim
        } else {
            DownOutcome::Headed
        }
    }

    /// A reused connection failed before any byte of the response: the request goes again,
    /// once, on a new connection (DESIGN §6.3).
    fn retry(&mut self, cx: &mut Ctx) -> Result<(), Step> {
        let Some(ex) = self.ex.as_mut() else {
            return Ok(());
        };
        tracing::debug!(
            "a reused server connection failed; sending the request again on a new one"
        );
        if let Some(mut leg) = ex.up.take() {
            leg.release(cx.pools);
        }
        ex.sinput.release(cx.pools);
        ex.connector.release(false, 0, 0, cx);
        ex.retried = true;
        ex.up_done = false;
        ex.answer = Answer::Head;
        ex.connector =
            Connector::for_http(ex.connector.pool().clone(), true, ex.sticky).via(&self.listener);
        // The request goes again from its head, still in the input.
        self.input.rewind();
        self.connect(cx)
    }

    /// The server failed (or the request body did): Quill answers `status` if the client has
    /// not had a byte of the response yet, else cuts the client connection.
    fn fault(&mut self, status: u16, cx: &mut Ctx) -> Step {
        if self.ex.as_ref().is_some_and(|ex| ex.replied) {
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
        let reusable = end == End::Done
            && !s.server_idle_timeout.is_zero()
            && s.server_keepalive > 0
            && ex.server_keeps
            && ex.up_done
            && !ex.sinput.has_unparsed()
            && ex.sinput.pending().is_empty();
        // A connection that carried this client's PROXY header stays with this session (for
        // its next request) and never joins the shared idle pool.
        let keep = reusable && !ex.proxied;
        if ex.proxied && reusable && !ex.close && !self.draining && !cx.draining {
            if let Some(p) = ex.connector.keep_private() {
                self.rare.get_or_insert_default().private = Some(p);
            }
        }
        let up_bytes = ex.up.as_ref().map_or(0, |l| l.bytes);
        let down_bytes = ex.down.as_ref().map_or(0, |l| l.bytes);
        if let Some(mut leg) = ex.up.take() {
            leg.release(cx.pools);
        }
        if let Some(mut leg) = ex.down.take() {
            leg.release(cx.pools);
        }
        ex.sinput.release(cx.pools);
        if let Some(sv) = ex.connector.server() {
            sv.count_bytes(up_bytes, down_bytes);
        }
        self.requests += 1;
        self.bytes_in += up_bytes;
        self.bytes_out += down_bytes;
        let us = ex.started_at.elapsed().as_micros() as u64;
        let route_stats = self.pool.routes.as_deref().map(|r| r.stats_of(ex.route));
        cx.counters
            .http_request(&self.listener.http, route_stats, ex.status, Some(us));
        self.log(
            ex.status,
            false,
            (up_bytes, down_bytes),
            Some(&ex),
            None,
            end,
            cx,
        );
        let expires = cx.now.saturating_add(millis(s.server_idle_timeout));
        ex.connector.release(keep, expires, s.server_keepalive, cx);
        let close = ex.close;
        recycle(ex);
        // Past the request: what follows in the input is the next one.
        self.input.fwd = self.input.fed;
        self.input.settle(cx.pools);
        self.idle_since = cx.now;
        if close || end != End::Done {
            return Err(Step::Close(end));
        }
        Ok(())
    }

    /// Writes the request's access log line (if the log is on).
    #[expect(clippy::too_many_arguments, reason = "one log line's fields")]
    fn log(
        &self,
        status: u16,
        own: bool,
        (bytes_in, bytes_out): (u64, u64),
        ex: Option<&Exchange>,
        route: Option<&str>,
        end: End,
        cx: &mut Ctx,
    ) {
        let Some(log) = cx.log.as_deref_mut() else {
            return;
        };
        let route = route.or_else(|| {
            ex.and_then(|ex| route_of(&self.pool, ex.route))
                .map(|r| r.name.as_str())
        });
        let server = ex.and_then(|ex| ex.connector.server());
        let server_addr = server.map(|s| s.addr() as &dyn std::fmt::Display);
        log.write_http(&HttpEntry {
            client_ip: &self.addr,
            unix_time: crate::clock::unix_time(),
            text: &self.log_text,
            lens: self.log_lens,
            generated_id: ex.map_or(&[][..], |ex| &ex.request_id[..]),
            status,
            own,
            bytes_in,
            bytes_out,
            server: server_addr,
            route,
            connect_us: ex.and_then(|ex| ex.connect_us),
            first_byte_us: ex.and_then(|ex| ex.first_byte_us),
            total_us: ex.map_or(0, |ex| ex.started_at.elapsed().as_micros() as u64),
            end,
            client_cert: self
                .rare
                .as_ref()
                .and_then(|r| r.cert_edit.as_ref())
                .map(|e| &*e[0].value),
        });
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
            if let Some(mut leg) = ex.up.take() {
                leg.release(pools);
            }
            if let Some(mut leg) = ex.down.take() {
                leg.release(pools);
            }
            ex.sinput.release(pools);
            if matches!(
                end,
                End::Shutdown | End::ClientReset | End::Closed | End::Panic
            ) {
                ex.connector.reset_on_close();
                if ex.replied {
                    self.client.reset_on_close();
                }
            }
            lease = ex.connector.take_lease();
            ex.connector.forget_conn(conns);
        }
        if let Some(p) = self.take_private() {
            p.close(conns);
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
    /// 1 KiB per idle client of issue 11 (no buffer, no exchange, no server connection).
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
