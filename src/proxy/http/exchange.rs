//! One request and its response ([`Exchange`]): the request head rewritten and sent with the body
//! bytes read with it, the request's body and the response moved on as the sockets allow, the
//! response head read and rewritten, a retry on a new connection, and what is left once it is
//! over. Its methods take what they need of the session as arguments and answer with an outcome
//! ([`UpOutcome`], [`DownOutcome`], [`Unsent`], [`Settled`]); the session acts on it.
//!
//! Where an exchange is lives in phase enums, so that impossible combinations cannot be written:
//! [`Up`] (the request: waiting for a server, being sent, sent), [`Answer`] (the response's
//! phase), [`Reply`] (how far the response got: nothing yet, from the server, to the client),
//! [`Replay`] (whether the request may go again) and [`Reuse`] (what becomes of the server
//! connection).

use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::Arc;

use quill_core::fastcgi;
use quill_core::h2;
use quill_core::http1::rewrite::{self, HeaderEdit, RequestRewrite, ResponseRewrite};
use quill_core::http1::{self, Body, FieldIndex, Framing, Limits, Method, Version};

use super::input::{Filled, Input};
use super::leg::{BodyRest, Leg, LegError, LegState};
use super::request::{idempotent, Forward};
use crate::backend::Pool;
use crate::config::{HttpSettings, NormalizePath};
use crate::metrics::Source;
use crate::net::{ClientAddr, Ready, Stream};
use crate::proxy::connect::{self, Connector, PrivateConn};
use crate::proxy::copy::{Direction, Pools, BUF_SIZE};
use crate::proxy::Ctx;
use crate::route::fastcgi::Script;
use crate::route::{Action, Route};
use crate::state::shared::Listener;

/// Where the request is.
#[derive(Debug)]
pub(super) enum Up {
    /// No server connection yet (connecting, or again after a failed reused one).
    Waiting,
    /// Being written to the server.
    Sending(Leg),
    /// All written, or the server stopped taking it (its answer, if any, is read next).
    Sent(Leg),
}

impl Up {
    fn leg(&self) -> Option<&Leg> {
        match self {
            Up::Waiting => None,
            Up::Sending(leg) | Up::Sent(leg) => Some(leg),
        }
    }

    fn is_sent(&self) -> bool {
        matches!(self, Up::Sent(_))
    }

    /// The request's bytes written to the server.
    fn bytes(&self) -> u64 {
        self.leg().map_or(0, |l| l.bytes)
    }

    /// Sending becomes sent.
    fn sent(&mut self) {
        if let Up::Sending(leg) = std::mem::replace(self, Up::Waiting) {
            *self = Up::Sent(leg);
        }
    }

    fn release(&mut self, pools: &mut Pools) {
        if let Up::Sending(mut leg) | Up::Sent(mut leg) = std::mem::replace(self, Up::Waiting) {
            leg.release(pools);
        }
    }
}

/// Where the response is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answer {
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

/// How far the response got, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Reply {
    /// No byte of it came from the server.
    Awaited,
    /// Some bytes came from the server; none went to the client.
    Answered,
    /// Some bytes went to the client: a failure now cuts the client connection.
    Replied,
}

/// Whether the request may be sent again on a new connection (docs/design.md#http-behaviour).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replay {
    /// Not idempotent, or its body was not all read with the head.
    No,
    /// It may go again, once.
    Once,
    /// It went again already.
    Spent,
}

/// What becomes of the server connection once the exchange is over, as the response said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reuse {
    /// Back to the worker's idle pool.
    Pool,
    /// It began with a PROXY header naming this client (`proxy_protocol`): it serves no other
    /// client, so it stays with the session (its next request to the same server takes it).
    Private,
    /// Closed.
    Close,
}

/// One request and its response.
#[derive(Debug)]
pub(super) struct Exchange {
    pub(super) connector: Connector,
    /// The route the request matched (an index into the routes of the session's pool snapshot).
    pub(super) route: Option<u32>,
    /// The server the request's stickiness cookie named (see `backend::Sticky`).
    sticky: Option<u32>,
    /// The request's Maglev key (see [`Forward::key`]), kept for a retry's new connector.
    key: Option<u64>,
    /// The request head, parsed at the client input's `start` (where it stays until the
    /// exchange is over, for a retry).
    pub(super) head: http1::RequestHead,
    /// The request head's fields, noted by the parser (for routing and the rewrite).
    fields: FieldIndex,
    up: Up,
    replay: Replay,
    /// The client asked to upgrade (see [`Forward::upgrade`]): a fact of the request, not a
    /// phase.
    upgrade: bool,
    pub(super) answer: Answer,
    pub(super) reply: Reply,
    down: Option<Leg>,
    /// The server's bytes.
    sinput: Input,
    /// Status of the final response; 0 before.
    status: u16,
    /// Close the client after this response (once set, it stays).
    close: bool,
    reuse: Reuse,
    /// Clock ms: the request was all sent; the last progress either way.
    sent_ms: u64,
    active_ms: u64,
    /// Clock µs of the turn the exchange began in.
    pub(super) started_us: u64,
    pub(super) connect_us: Option<u64>,
    pub(super) first_byte_us: Option<u64>,
    /// The request id Quill made for this request (16 hex digits), sent if it had none.
    pub(super) request_id: [u8; 16],
    /// For a `fastcgi` route: the script the request runs (found before the server was asked).
    pub(super) script: Option<Box<Script>>,
    /// Who answers, for the access log and the response counts: `Server`, or `Fastcgi` when
    /// the pool's servers speak FastCGI.
    pub(super) source: Source,
    /// The client is an HTTP/2 stream: a server's response head goes as a header block (see
    /// `Stream::note_head`).
    pub(super) notes_heads: bool,
}

/// What the request side of a drive asks for.
pub(super) enum UpOutcome {
    Fine,
    Again,
    ClientGone,
    Refuse(u16),
}

/// What the response side of a drive asks for.
pub(super) enum DownOutcome {
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

/// Why a request head could not be sent.
pub(super) enum Unsent {
    /// The request's head is not in the input any more (a local error: the session closes).
    Lost,
    /// The rewritten head does not fit (431, as a server failure would be answered).
    Fault(u16),
    /// The chunked body read with the head is malformed (counted; its status).
    Refuse(u16),
}

/// What an exchange leaves once it is over.
pub(super) struct Settled {
    /// The server connection goes back to the worker's idle pool.
    pub keep: bool,
    /// The server connection stays with the session (see [`Reuse::Private`]).
    pub private: Option<PrivateConn>,
    /// Request bytes to the server, response bytes to the client.
    pub up_bytes: u64,
    pub down_bytes: u64,
    /// Close the client connection.
    pub close: bool,
}

/// The client side of an exchange, as its steps read it.
pub(super) struct Client<'a> {
    pub addr: &'a ClientAddr,
    pub stream: &'a Stream,
    /// The edit of `X-Client-Cert-Subject` every request of the connection gets.
    pub cert_edit: &'a [HeaderEdit],
    /// The listener's address, when it is one IP's (for the PROXY header).
    pub local: Option<SocketAddr>,
}

/// The client socket and its readiness, for the legs to and from it.
pub(super) struct Peer<'a> {
    pub stream: &'a Stream,
    pub ready: &'a mut Ready,
}

thread_local! {
    /// The boxes of this worker's finished exchanges (buffers and server connection already let
    /// go), for its next requests: the steady state allocates nothing per request
    /// (docs/design.md#http-performance-shape). What a spare box still holds (its pool snapshot) is
    /// dropped when it is used again.
    #[expect(clippy::vec_box, reason = "the boxes are what is kept: one moves into a session's `ex`")]
    static SPARE: RefCell<Vec<Box<Exchange>>> = const { RefCell::new(Vec::new()) };
    /// The index of the response head being parsed, reused from response to response: a fresh
    /// one is 400 bytes to zero each time (a parse resets what it reads of it first).
    static RESPONSE_FIELDS: RefCell<FieldIndex> = RefCell::new(FieldIndex::empty());
}

/// Most bytes of a chunked request body collected for a FastCGI server (which needs its length
/// first) when the listener sets no `max_body`.
pub(super) const FASTCGI_BODY_MAX: u64 = 8 << 20;

/// At most this many spare exchange boxes per worker (about 1 KiB each): as many as a burst of
/// HTTP/2 streams keeps in flight on a worker (50 connections of 10 streams over two workers
/// hold 250), so that the boxes come back for the next requests instead of half being freed
/// and allocated again; all are dropped at the heap trim after a burst (`trim_spares`).
const SPARE_MAX: usize = 256;

/// Keeps the box of a finished exchange for the next request (see `SPARE`).
pub(super) fn recycle(ex: Box<Exchange>) {
    SPARE.with_borrow_mut(|spare| {
        if spare.len() < SPARE_MAX {
            spare.push(ex);
        }
    });
}

/// Drops this worker's spare exchange boxes (the heap trim after a burst).
pub(crate) fn trim_spares() {
    SPARE.with_borrow_mut(|spare| {
        spare.clear();
        spare.shrink_to_fit();
    });
}

/// A spare exchange box taken before a request's head is parsed, so that the parse notes its
/// fields straight into the box's index ([`Spare::index`]) and the exchange is then made in
/// place ([`Spare::reuse`]). Not reused (a request answered without a server), the box goes
/// back to the spares when this is dropped.
pub(super) struct Spare(Option<Box<Exchange>>);

impl Spare {
    pub(super) fn take() -> Spare {
        Spare(SPARE.with_borrow_mut(Vec::pop))
    }

    /// The spare's field index, to parse into (None: no spare box).
    pub(super) fn index(&mut self) -> Option<&mut FieldIndex> {
        self.0.as_deref_mut().map(|ex| &mut ex.fields)
    }

    /// The exchange of a request `forward`ed, made in the spare box over the previous one,
    /// keeping the index the request was parsed into (None: no spare box).
    pub(super) fn reuse(
        &mut self,
        forward: Forward,
        head: http1::RequestHead,
        listener: &Arc<Listener>,
        now: (u64, u64),
        request_id: [u8; 16],
    ) -> Option<Box<Exchange>> {
        let mut ex = self.0.take()?;
        ex.renew(forward, head, listener, now, request_id);
        Some(ex)
    }
}

impl Drop for Spare {
    fn drop(&mut self) {
        if let Some(ex) = self.0.take() {
            recycle(ex);
        }
    }
}

impl Exchange {
    /// This exchange made over for a new request, field by field (each old value dropped, as
    /// assigning a whole new exchange would), except the field index, which the new request's
    /// parse has already filled. The pattern names every field: one added to `Exchange` must
    /// be given its start here too, or this does not compile.
    fn renew(
        &mut self,
        forward: Forward,
        new_head: http1::RequestHead,
        listener: &Arc<Listener>,
        (now, now_us): (u64, u64),
        new_request_id: [u8; 16],
    ) {
        let Forward {
            pool,
            route: new_route,
            sticky: new_sticky,
            key: new_key,
            upgrade: new_upgrade,
        } = forward;
        let new_source = if pool.fastcgi {
            Source::Fastcgi
        } else {
            Source::Server
        };
        let Exchange {
            connector,
            sticky,
            key,
            route,
            head,
            fields: _,
            up,
            replay,
            upgrade,
            answer,
            reply,
            down,
            sinput,
            status,
            close,
            reuse,
            sent_ms,
            active_ms,
            started_us,
            connect_us,
            first_byte_us,
            request_id,
            script,
            source,
            notes_heads,
        } = self;
        *connector = Connector::for_http(pool, false, new_sticky, new_key).via(listener);
        *sticky = new_sticky;
        *key = new_key;
        *route = new_route;
        *head = new_head;
        *up = Up::Waiting;
        *replay = if idempotent(new_head.method) {
            Replay::Once
        } else {
            Replay::No
        };
        *upgrade = new_upgrade;
        *answer = Answer::Head;
        *reply = Reply::Awaited;
        *down = None;
        *sinput = Input::default();
        *status = 0;
        *close = false;
        *reuse = Reuse::Close;
        *sent_ms = now;
        *active_ms = now;
        *started_us = now_us;
        *connect_us = None;
        *first_byte_us = None;
        *request_id = new_request_id;
        *script = None;
        *source = new_source;
        *notes_heads = false;
    }

    /// The exchange of a request `forward`ed, in a new box (the worker had no spare one: see
    /// [`Spare`], which makes the same exchange over a spare one's).
    pub(super) fn boxed(
        forward: Forward,
        (head, fields): (http1::RequestHead, FieldIndex),
        listener: &Arc<Listener>,
        (now, now_us): (u64, u64),
        request_id: [u8; 16],
    ) -> Box<Exchange> {
        let Forward {
            pool,
            route,
            sticky,
            key,
            upgrade,
        } = forward;
        let source = if pool.fastcgi {
            Source::Fastcgi
        } else {
            Source::Server
        };
        Box::new(Exchange {
            connector: Connector::for_http(pool, false, sticky, key).via(listener),
            sticky,
            key,
            route,
            head,
            fields,
            up: Up::Waiting,
            replay: if idempotent(head.method) {
                Replay::Once
            } else {
                Replay::No
            },
            upgrade,
            answer: Answer::Head,
            reply: Reply::Awaited,
            down: None,
            sinput: Input::default(),
            status: 0,
            close: false,
            reuse: Reuse::Close,
            sent_ms: now,
            active_ms: now,
            started_us: now_us,
            connect_us: None,
            first_byte_us: None,
            request_id,
            script: None,
            source,
            notes_heads: false,
        })
    }

    /// The request was all sent (or the server stopped taking it) and no byte of the response
    /// came yet: the response timeout runs, from [`Exchange::sent_ms`].
    pub(super) fn awaits_response(&self) -> bool {
        self.up.is_sent() && self.reply == Reply::Awaited
    }

    pub(super) fn sent_ms(&self) -> u64 {
        self.sent_ms
    }

    /// Clock ms of the last progress either way.
    pub(super) fn active_ms(&self) -> u64 {
        self.active_ms
    }

    /// The server connected: how long it took.
    pub(super) fn connected(&mut self, us: u64) {
        self.connect_us = Some(us);
    }

    /// Lets go of the buffers (the server connection is left to the caller).
    pub(super) fn release_buffers(&mut self, pools: &mut Pools) {
        self.up.release(pools);
        if let Some(mut leg) = self.down.take() {
            leg.release(pools);
        }
        self.sinput.release(pools);
    }

    /// A server is connected: rewrite the request head (at `input`'s `start`) and set up its leg
    /// with the body bytes read with it.
    pub(super) fn send_request(
        &mut self,
        input: &mut Input,
        client: &Client,
        s: &HttpSettings,
        route: Option<&Route<Pool>>,
        cx: &mut Ctx,
    ) -> Result<(), Unsent> {
        self.begin_fastcgi(client, s, route);
        let Some(buf) = input.buf.as_deref() else {
            return Err(Unsent::Lost);
        };
        let head = self.head;
        let start = input.start as usize;
        let msg = input.kept();
        crate::proxy::fault::inject(head.target.of(msg));
        let client_ip = client.addr.ip();
        let trusted = client_ip.is_some_and(|ip| s.trusted_proxies.iter().any(|n| n.contains(ip)));
        let rw = RequestRewrite {
            client: client_ip,
            trusted,
            forwarded_for: s.forwarded_for,
            proto: if client.stream.is_tls() {
                "https"
            } else {
                "http"
            },
            x_forwarded_proto: s.x_forwarded_proto,
            x_forwarded_host: s.x_forwarded_host,
            forwarded: s.forwarded,
            via: s.via.as_deref(),
            request_id: s.request_id.then_some(&self.request_id[..]),
            edits: [
                &s.request_headers,
                route.map_or(&[][..], |r| &r.request_headers),
                client.cert_edit,
            ],
            rewrite_path: route
                .and_then(|r| r.rewrite_path.as_ref())
                .map(|(a, b)| (a.as_str(), b.as_str())),
            normalize_path: s.normalize_path == NormalizePath::Forward,
            underscores: s.underscores_in_headers,
            upgrade: self.upgrade,
        };
        let mut out = cx.pools.buffer();
        let at = self.write_preface(client, &mut out[..]);
        let n = match rewrite::write_request_indexed(msg, &head, &self.fields, &rw, &mut out[at..])
        {
            Ok(n) => n + at,
            Err(rewrite::Overflow) => {
                cx.pools.give_buffer(out);
                return Err(Unsent::Fault(431));
            }
        };
        // The body bytes read with the head.
        let body_start = start + head.len;
        let after_head = &buf[body_start..input.end as usize];
        let (taken, rest, whole, payload) = match request_body(head.framing, after_head) {
            Ok(body) => body,
            Err(e) => {
                cx.pools.give_buffer(out);
                cx.counters.http_parse_error(e);
                return Err(Unsent::Refuse(e.request_status()));
            }
        };
        // A chunked body read with its head counts against `max_body` too (a `Content-Length`
        // one was checked with the head).
        if matches!(rest, BodyRest::Chunked(_)) && s.max_body.is_some_and(|max| payload > max) {
            cx.pools.give_buffer(out);
            return Err(Unsent::Refuse(413));
        }
        if !whole {
            self.replay = Replay::No;
        }
        input.fwd = body_start as u32;
        input.fed = (body_start + taken) as u32;
        let mut leg = Leg::new(out, n, rest);
        if matches!(leg.rest, BodyRest::Chunked(_)) {
            leg.payload = payload;
        }
        self.up = Up::Sending(leg);
        self.sent_ms = cx.now;
        self.active_ms = cx.now;
        Ok(())
    }

    /// On a FastCGI server's connection, the request written next is the script's: what the
    /// application is told beyond the request head (the client, the script, TLS).
    fn begin_fastcgi(&mut self, client: &Client, s: &HttpSettings, route: Option<&Route<Pool>>) {
        let (Some(script), Some(Action::Fastcgi { root, .. })) =
            (&self.script, route.map(|r| &r.action))
        else {
            return;
        };
        let Some((Stream::Fcgi(f), _)) = self.connector.server_side() else {
            return;
        };
        let remote = match client.addr {
            ClientAddr::Ip(a) => *a,
            ClientAddr::Unix => SocketAddr::from(([0, 0, 0, 0], 0)),
        };
        // The listener's own address when it is one IP's; else the client socket's end.
        let local = client.local.or_else(|| match client.stream {
            Stream::Tcp(t) => t.local_addr().ok(),
            Stream::Tls(t) => match t.sock() {
                Stream::Tcp(t) => t.local_addr().ok(),
                _ => None,
            },
            _ => None,
        });
        f.begin(&fastcgi::Context {
            remote,
            local,
            https: client.stream.is_tls(),
            document_root: &root.document_root,
            document_uri: script.document_uri(),
            script_name: script.name(),
            path_info: script.path_info(),
            server_software: b"quill",
            max_body: s.max_body.unwrap_or(FASTCGI_BODY_MAX),
        });
    }

    /// A new connection to a pool with `proxy_protocol` starts with the header, in the same
    /// write as the head: written at the start of `out`, its length returned (0: none). Never on
    /// a shared idle connection (the connector takes none for such a pool), nor on the session's
    /// private one (it carried this client's header already), nor with `server_tls` (the header
    /// went before the TLS handshake, `Progress::Preface`).
    fn write_preface(&self, client: &Client, out: &mut [u8]) -> usize {
        let pool = self.connector.pool();
        let Some(version) = pool.tuning.proxy_protocol else {
            return 0;
        };
        if self.connector.is_reused() || pool.server_tls.is_some() {
            return 0;
        }
        let header = connect::proxy_header(version, client.addr, client.stream, client.local);
        let at = header.as_bytes().len();
        out[..at].copy_from_slice(header.as_bytes());
        at
    }

    /// After a 101: the client's side of the tunnel starts with what it sent after its request.
    /// Err when the request was not all sent (the session closes).
    pub(super) fn open_tunnel(&mut self, input: &mut Input) -> Result<(), ()> {
        if self.answer != Answer::Tunnel || self.up.leg().is_some_and(|l| l.is_raw()) {
            return Ok(());
        }
        if !self.up.is_sent() {
            return Err(());
        }
        let sent = self.up.bytes();
        input.fwd = input.fed;
        input.fed = input.end;
        let mut leg = Leg::tunnel();
        leg.bytes = sent;
        self.up = Up::Sending(leg);
        Ok(())
    }

    /// Moves the request on: from the client's `input` to the server.
    pub(super) fn drive_up(
        &mut self,
        input: &mut Input,
        client: Peer,
        max_body: Option<u64>,
        cx: &mut Ctx,
    ) -> UpOutcome {
        if client.ready.error && self.reply != Reply::Replied {
            return UpOutcome::ClientGone;
        }
        let (Up::Sending(leg), Some((server, sready))) =
            (&mut self.up, self.connector.server_side())
        else {
            return UpOutcome::Fine;
        };
        let before = leg.bytes;
        let r = leg.pump(input, client.stream, client.ready, server, sready, cx.pools);
        if leg.bytes != before {
            self.active_ms = cx.now;
        }
        if let (Some(max), BodyRest::Chunked(_)) = (max_body, &leg.rest) {
            if leg.payload > max {
                return UpOutcome::Refuse(413);
            }
        }
        match r {
            Ok(LegState::Complete) => {
                self.up.sent();
                self.sent_ms = cx.now;
                UpOutcome::Fine
            }
            Ok(LegState::Blocked) => {
                // Waiting for more of a body that will not be replayed: the head need not be
                // kept, and the buffer goes back once all it holds is written (a client that
                // trickles its body, or never sends it, holds no buffer meanwhile).
                if self.replay == Replay::No {
                    input.settle(cx.pools);
                }
                UpOutcome::Fine
            }
            Ok(LegState::Yielded) => UpOutcome::Again,
            // The client went away mid-body.
            Err(LegError::Read(e)) => {
                tracing::debug!("request body: client read: {e}");
                UpOutcome::ClientGone
            }
            Err(LegError::Truncated) => UpOutcome::ClientGone,
            Err(LegError::Write(e)) => {
                // The server went away while taking the request: its answer, if any, is read
                // next; else a retry or a 502. The connection is not reused.
                tracing::debug!("request: server write: {e}");
                self.up.sent();
                self.sent_ms = cx.now;
                self.reuse = Reuse::Close;
                UpOutcome::Fine
            }
            Err(LegError::Body(e)) => {
                cx.counters.http_parse_error(e);
                UpOutcome::Refuse(e.request_status())
            }
        }
    }

    /// Moves the response on: from the server to the client. `closing`: the client connection
    /// closes after this response (a drain, or the client's EOF); the bytes of interim responses
    /// passed on are added to `bytes_out`.
    pub(super) fn drive_down(
        &mut self,
        client: Peer,
        s: &HttpSettings,
        route_edits: &[HeaderEdit],
        closing: bool,
        bytes_out: &mut u64,
        cx: &mut Ctx,
    ) -> DownOutcome {
        if self.answer == Answer::Head {
            return self.read_response_head(s, route_edits, closing, cx);
        }
        let Some((server, sready)) = self.connector.server_side() else {
            return DownOutcome::Wait;
        };
        let Some(leg) = self.down.as_mut() else {
            return DownOutcome::Fault(502);
        };
        let before = leg.bytes;
        let r = leg.pump(
            &mut self.sinput,
            server,
            sready,
            client.stream,
            client.ready,
            cx.pools,
        );
        if leg.bytes != before {
            self.reply = Reply::Replied;
            self.active_ms = cx.now;
        }
        match r {
            Ok(LegState::Complete) => self.response_sent(bytes_out, cx.pools),
            Ok(LegState::Blocked) => DownOutcome::Wait,
            Ok(LegState::Yielded) => DownOutcome::Again,
            Err(LegError::Write(e)) => {
                tracing::debug!("response: client write: {e}");
                DownOutcome::ClientGone
            }
            Err(LegError::Read(e)) => {
                tracing::debug!("response: server read: {e}");
                DownOutcome::Cut
            }
            Err(LegError::Truncated) => DownOutcome::Cut,
            Err(LegError::Body(e)) => {
                cx.counters.http_parse_error(e);
                DownOutcome::Cut
            }
        }
    }

    /// The response's leg is complete: an interim one is over (read the next head), a final one
    /// finishes the exchange.
    fn response_sent(&mut self, bytes_out: &mut u64, pools: &mut Pools) -> DownOutcome {
        if self.answer == Answer::Interim {
            if let Some(mut leg) = self.down.take() {
                *bytes_out += leg.bytes;
                leg.release(pools);
            }
            // The interim head is passed on: its bytes are not kept (the buffer makes room for
            // the next head, however many interim ones come).
            self.sinput.settle(pools);
            self.answer = Answer::Head;
            return DownOutcome::Interim;
        }
        if self.answer == Answer::Tunnel && !self.up.is_sent() {
            // The server closed its side; the client's may still be open.
            return DownOutcome::Wait;
        }
        if !self.up.is_sent() {
            // The answer came before the whole request (a server refusing a body): the rest of
            // the request cannot be told from a next one.
            self.close = true;
            self.reuse = Reuse::Close;
        }
        DownOutcome::Finished
    }

    /// Reads the response head and sets up its leg.
    fn read_response_head(
        &mut self,
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
            if self.sinput.has_unparsed() {
                let to_head = self.head.method == Method::Head;
                // Nothing below parses another response on this thread while the index is
                // borrowed.
                let done = RESPONSE_FIELDS.with_borrow_mut(|fields| {
                    let unparsed = self.sinput.unparsed();
                    match http1::parse_response_indexed(unparsed, &limits, to_head, fields) {
                        Ok(Some(head)) => {
                            Some(self.start_response((head, fields), s, route_edits, closing, cx))
                        }
                        Ok(None) => None,
                        Err(e) => {
                            cx.counters.http_parse_error(e);
                            Some(DownOutcome::Fault(502))
                        }
                    }
                });
                if let Some(outcome) = done {
                    return outcome;
                }
            }
            let Some((server, sready)) = self.connector.server_side() else {
                return DownOutcome::Wait;
            };
            match self.sinput.fill(server, sready, cx.pools) {
                Ok(Filled::Data) => {
                    self.reply = self.reply.max(Reply::Answered);
                    self.active_ms = cx.now;
                }
                Ok(Filled::Nothing) => return DownOutcome::Wait,
                Ok(Filled::Full) => return DownOutcome::Fault(502),
                Ok(Filled::Eof) | Err(_) => {
                    // Closed (or reset) before a whole head: a kept-alive connection the server
                    // gave up just as the request went out is retried once
                    // (docs/design.md#retries).
                    if self.reply == Reply::Awaited
                        && self.connector.is_reused()
                        && self.replay == Replay::Once
                    {
                        return DownOutcome::Retry;
                    }
                    return DownOutcome::Fault(502);
                }
            }
        }
    }

    /// A response head was parsed: rewrite it and set up its leg.
    fn start_response(
        &mut self,
        (head, fields): (http1::ResponseHead, &FieldIndex),
        s: &HttpSettings,
        route_edits: &[HeaderEdit],
        closing: bool,
        cx: &mut Ctx,
    ) -> DownOutcome {
        let status = head.status;
        let tunnel = status == 101;
        if tunnel && !self.upgrade {
            // A switch nobody asked for.
            return DownOutcome::Fault(502);
        }
        let interim = status < 200 && !tunnel;
        if head.framing == Framing::Chunked && self.head.version == Version::Http10 {
            // The request went as HTTP/1.0: a server may not answer it chunked, and an
            // HTTP/1.0 client could not read it.
            return DownOutcome::Fault(502);
        }
        let Some(buf) = self.sinput.buf.as_deref() else {
            return DownOutcome::Fault(502);
        };
        let base = self.sinput.fed as usize;
        let end = self.sinput.end as usize;
        let msg = &buf[base..end];
        let sent = self.up.is_sent();
        if !interim {
            self.close |=
                !self.head.keep_alive() || closing || head.framing == Framing::Close || !sent;
        }
        let cookie = if interim {
            &[][..]
        } else {
            self.sticky_cookie()
        };
        let rw = ResponseRewrite {
            client_version: self.head.version,
            close: !interim && self.close,
            keep_alive_10: !interim && !self.close && self.head.version == Version::Http10,
            via: s.via.as_deref(),
            edits: [&s.response_headers, route_edits, cookie],
            upgrade: tunnel,
        };
        let mut out = cx.pools.buffer();
        // An HTTP/2 stream's head goes as the header block its connection sends as it is.
        let wrote = if self.notes_heads {
            h2::encode_response_head(msg, &head, fields, &rw, &mut out[..]).ok_or(())
        } else {
            rewrite::write_response_indexed(msg, &head, fields, &rw, &mut out[..]).map_err(|_| ())
        };
        let n = match wrote {
            Ok(n) => n,
            Err(_) => {
                cx.pools.give_buffer(out);
                return DownOutcome::Fault(502);
            }
        };
        let written = self.notes_heads.then_some(h2::Written {
            status,
            framing: head.framing,
            block: n,
        });
        let body_start = base + head.len;
        let (taken, rest) = match response_body(head.framing, tunnel, &buf[body_start..end]) {
            Ok(body) => body,
            Err(e) => {
                cx.pools.give_buffer(out);
                cx.counters.http_parse_error(e);
                return DownOutcome::Fault(502);
            }
        };
        // A rewritten head no longer than the server's (the usual case: hop-by-hop fields go,
        // nothing is added) takes the server's head's place, just before the body bytes read
        // with it: head and body go out in one `send`, not a `writev` of two pieces.
        let out = match self.sinput.buf.as_deref_mut() {
            Some(b) if written.is_none() && n <= head.len => {
                b[body_start - n..body_start].copy_from_slice(&out[..n]);
                cx.pools.give_buffer(out);
                self.sinput.fwd = (body_start - n) as u32;
                None
            }
            _ => {
                self.sinput.fwd = body_start as u32;
                Some(out)
            }
        };
        self.sinput.fed = (body_start + taken) as u32;
        if !interim {
            self.status = status;
            self.reuse = match (head.keep_alive() && sent, self.connector.names_client()) {
                (false, _) => Reuse::Close,
                (true, false) => Reuse::Pool,
                (true, true) => Reuse::Private,
            };
            self.first_byte_us = Some(cx.now_us.saturating_sub(self.started_us));
        }
        let leg = match out {
            Some(out) => Leg::new(out, n, rest).noting(written),
            None => Leg::in_input(rest),
        };
        self.down = Some(leg);
        self.answer = if interim {
            Answer::Interim
        } else if tunnel {
            self.close = true;
            self.reuse = Reuse::Close;
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

    /// The `Set-Cookie` edit of a final response: a sticky pool's server gives the client its
    /// cookie unless the client has it already.
    fn sticky_cookie(&self) -> &[HeaderEdit] {
        match (
            self.connector.pool().sticky.as_ref(),
            self.connector.current(),
        ) {
            (Some(st), Some(i)) if self.sticky != Some(i) => {
                st.set_cookie.get(i as usize).map_or(&[], |e| &e[..])
            }
            _ => &[],
        }
    }

    /// A reused connection failed before any byte of the response: the request goes again,
    /// once, on a new connection (docs/design.md#retries), from its head, still in the client's
    /// `input`. The caller connects the new connector.
    pub(super) fn restart(&mut self, listener: &Arc<Listener>, input: &mut Input, cx: &mut Ctx) {
        tracing::debug!(
            "a reused server connection failed; sending the request again on a new one"
        );
        self.up.release(cx.pools);
        self.sinput.release(cx.pools);
        self.connector.release(false, 0, 0, cx);
        self.replay = Replay::Spent;
        self.answer = Answer::Head;
        self.connector =
            Connector::for_http(self.connector.pool().clone(), true, self.sticky, self.key)
                .via(listener);
        input.rewind();
    }

    /// The exchange is over for `end`: what becomes of the server connection (given back to the
    /// idle pool only when the response said so, the request was all sent and the connection
    /// holds nothing more; kept by the session when private, unless the client closes), the
    /// buffers let go, the server's byte counts.
    pub(super) fn settle(
        &mut self,
        done: bool,
        s: &HttpSettings,
        draining: bool,
        pools: &mut Pools,
    ) -> Settled {
        let reusable = done
            && !s.server_idle_timeout.is_zero()
            && s.server_keepalive > 0
            && self.up.is_sent()
            && !self.sinput.has_unparsed()
            && self.sinput.pending().is_empty();
        let (keep, private) = match (reusable, self.reuse) {
            (true, Reuse::Pool) => (true, None),
            (true, Reuse::Private) if !self.close && !draining => {
                (false, self.connector.keep_private())
            }
            _ => (false, None),
        };
        let up_bytes = self.up.bytes();
        let down_bytes = self.down.as_ref().map_or(0, |l| l.bytes);
        self.release_buffers(pools);
        if let Some(sv) = self.connector.server() {
            sv.count_bytes(up_bytes, down_bytes);
        }
        Settled {
            keep,
            private,
            up_bytes,
            down_bytes,
            close: self.close,
        }
    }

    /// Status of the final response; 0 before.
    pub(super) fn status(&self) -> u16 {
        self.status
    }
}

/// The part of a request body read with its head that goes with it (`after_head`: the bytes read
/// after the head), what is left of the body, and whether the body is all there (a replay needs
/// it whole). Err: a malformed chunked body.
fn request_body(
    framing: Framing,
    after_head: &[u8],
) -> Result<(usize, BodyRest, bool, u64), http1::Error> {
    Ok(match framing {
        Framing::None | Framing::Close => (0, BodyRest::Done, true, 0),
        Framing::Length(len) => {
            let k = len.min(after_head.len() as u64) as usize;
            let rest = len - k as u64;
            if rest == 0 {
                (k, BodyRest::Done, true, k as u64)
            } else {
                (k, BodyRest::Raw(Direction::limited(rest)), false, k as u64)
            }
        }
        Framing::Chunked => {
            let mut body = Body::new(Framing::Chunked);
            let f = body.feed(after_head)?;
            (f.used, BodyRest::Chunked(body), f.done, f.payload)
        }
    })
}

/// The part of a response body read with its head that goes with it, and what is left of the
/// body; after a 101 (`tunnel`) everything the server sends is the new protocol's, to its end.
/// Err: a malformed chunked body.
fn response_body(
    framing: Framing,
    tunnel: bool,
    after_head: &[u8],
) -> Result<(usize, BodyRest), http1::Error> {
    let avail = after_head.len();
    Ok(match framing {
        _ if tunnel => (avail, BodyRest::Raw(Direction::default())),
        Framing::None => (0, BodyRest::Done),
        Framing::Length(len) => {
            let k = len.min(avail as u64) as usize;
            let rest = len - k as u64;
            if rest == 0 {
                (k, BodyRest::Done)
            } else {
                (k, BodyRest::Raw(Direction::limited(rest)))
            }
        }
        Framing::Close => (avail, BodyRest::Raw(Direction::default())),
        Framing::Chunked => {
            let mut body = Body::new(Framing::Chunked);
            let f = body.feed(after_head)?;
            (f.used, BodyRest::Chunked(body))
        }
    })
}
