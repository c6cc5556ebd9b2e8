//! Sessions and the contract the worker drives them through. A worker owns sessions and knows
//! nothing of their insides: it feeds each one its events ([`Session::on_ready`]), the resolver's
//! answers ([`Session::on_resolved`]) and its one deadline ([`Session::on_deadline`]), and acts on
//! the [`Step`] it gets back. Choosing and connecting a server is [`connect::Connector`]'s; copying
//! bytes is [`copy::Direction`]'s; a TCP session ([`tcp::TcpSession`]) is one of each plus two
//! directions. An HTTP session ([`http::HttpSession`]) uses a connector per request, server
//! connections from the worker's idle pool ([`crate::state::idle::ServerConns`]) and the same directions for
//! its bodies. On a TCP listener with SNI routes a session starts as a [`peek::PeekSession`],
//! which reads the TLS ClientHello without consuming it and becomes the TCP session of the pool
//! the server name picks.

pub(crate) mod accept_proxy;
pub(crate) mod connect;
pub(crate) mod copy;
pub(crate) mod fault;
pub(crate) mod h2;
pub(crate) mod handshake;
pub(crate) mod http;
pub(crate) mod peek;
pub(crate) mod tcp;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use mio::event::Event;
use mio::{Registry, Token};

use crate::backend::{Pool, Server, ServerLease};
use crate::log::Logs;
use crate::metrics::{Counters, End};
use crate::net::{ClientAddr, Stream};
use crate::route::RateTable;
use crate::state::idle::ServerConns;
use crate::state::shared::Listener;
use crate::state::shared::SessionInfo;
use accept_proxy::ProxyWait;
use copy::Pools;
use h2::{H2Session, Sniff, Sniffed};
use handshake::{Handshaking, Next};
use http::HttpSession;
use peek::{PeekSession, Peeked};
use tcp::TcpSession;

/// No deadline: the session waits for events only.
pub(crate) const NEVER: u64 = u64::MAX;

/// Which of a session's sockets an event is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Client,
    Server,
}

/// What the worker does next for a session.
#[derive(Debug)]
pub(crate) enum Step {
    /// Wait for events, or until the session's deadline (clock ms; [`NEVER`] for none), when the
    /// worker calls [`Session::on_deadline`]. A session may be woken before its deadline: it
    /// then answers with the deadline it has now.
    Wait(u64),
    /// Resolve the server's name off the worker and call [`Session::on_resolved`] with the answer,
    /// or [`Session::on_deadline`] if none came by the deadline.
    Resolve(Arc<Server>, u64),
    /// The session stopped on its budget with work left: call [`Session::resume`] after this
    /// turn's other events, without waiting (edge-triggered: no event would come).
    Again,
    /// The session is over: call [`Session::close`] and drop it.
    Close(End),
    /// A trusted client's PROXY header is read (`accept_proxy`): take its socket
    /// ([`Session::take_proxied`], off epoll already) and admit it as a client from this address.
    Admit(ClientAddr),
}

/// What a session may use while handling one call: the worker's registry and this session's
/// tokens, the clock, the worker's random numbers, counters and buffer pools.
pub(crate) struct Ctx<'a> {
    pub registry: &'a Registry,
    /// The tokens this session's sockets are registered with.
    pub client_token: Token,
    pub server_token: Token,
    /// Clock ms of this turn.
    pub now: u64,
    /// Clock µs of this turn (the same read as `now`): what durations are measured with.
    pub now_us: u64,
    pub rng: &'a mut quill_core::rand::Rng,
    pub counters: &'a Counters,
    pub pools: &'a mut Pools,
    /// The worker's server connections (HTTP sessions).
    pub conns: &'a mut ServerConns,
    /// The access log files (HTTP sessions write a line per request, to their listener's file
    /// or their site's).
    pub log: Logs<'a>,
    /// The worker is draining: HTTP sessions close after their current exchange.
    pub draining: bool,
    /// While draining, the end of the drain grace (clock ms; [`NEVER`] otherwise): an HTTP
    /// client that became idle or connected since the drain began is kept until then for one
    /// more request.
    pub grace_end: u64,
    /// Per-client-address rate limits of HTTP routes, shared by all workers.
    pub rates: &'a RateTable,
    /// The worker's file cache (static roots).
    pub files: &'a mut crate::web::Files,
    /// Where wakes for this worker's requests waiting in a pool's queue are posted.
    pub mailbox: &'a Arc<crate::queue::Mailbox>,
    /// Sessions this call made (an HTTP/2 connection's streams): the worker gives each a slot
    /// and starts it after the call.
    pub spawned: &'a mut Vec<Session>,
}

impl Ctx<'_> {
    /// The next number of the worker's xorshift generator (balancer choices).
    pub(crate) fn rand(&mut self) -> u64 {
        self.rng.next_u64()
    }
}

/// What is left of a session once it is closed: what the counters and the access log need.
#[derive(Debug)]
pub(crate) struct Closing {
    pub client: ClientAddr,
    /// The server the session was counted against, still counted until the lease is dropped.
    pub server: Option<ServerLease>,
    /// Client to server, and server to client.
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Clock ms when the client was accepted.
    pub started_ms: u64,
}

/// One client connection, whatever its protocol.
#[derive(Debug)]
/// Every variant is boxed, so a worker's slot (which holds a `Session` inline for every connection,
/// whatever its kind) stays small: an unboxed TCP session (304 B) made every idle HTTP or TLS
/// connection's slot that size too.
pub(crate) enum Session {
    Tcp(Box<TcpSession>),
    Http(Box<HttpSession>),
    /// A TCP listener's client until its TLS ClientHello names the pool (SNI routes).
    Peek(Box<PeekSession>),
    /// A TLS listener's client during its handshake; becomes `Tcp` or `Http` once done.
    Handshake(Box<Handshaking>),
    /// A client from a trusted upstream proxy (`accept_proxy`) until its PROXY header is read;
    /// the worker then admits it anew with the header's address.
    ProxyHeader(Box<ProxyWait>),
    /// An HTTP/2 client connection; each of its streams is an `Http` session of its own.
    H2(Box<H2Session>),
    /// A client of an `h2c` listener until its first bytes say HTTP/2 or HTTP/1.
    Sniff(Box<Sniff>),
}

impl Session {
    /// A TCP session for a client just accepted on a listener of `pool`; `denied` sends it to
    /// the abuse server. Nothing happens until [`Session::start`].
    pub(crate) fn tcp(
        pool: Arc<Pool>,
        id: u64,
        client: Stream,
        addr: ClientAddr,
        denied: bool,
        now: u64,
    ) -> Session {
        Session::Tcp(Box::new(TcpSession::new(
            pool, id, client, addr, denied, now,
        )))
    }

    /// An HTTP session for a client just accepted on an HTTP listener (first a sniff for the
    /// HTTP/2 preface when the listener takes `h2c`).
    pub(crate) fn http(
        listener: Arc<Listener>,
        id: u64,
        client: Stream,
        addr: ClientAddr,
        now: u64,
    ) -> Session {
        let h2c = listener.load_pool().http().is_some_and(|s| s.h2c);
        if h2c {
            return Session::Sniff(Box::new(Sniff::new(listener, id, client, addr, now)));
        }
        Session::Http(Box::new(HttpSession::new(listener, id, client, addr, now)))
    }

    /// A sniff's outcome: its step, or the session it becomes, started now.
    fn sniffed(&mut self, outcome: Sniffed, cx: &mut Ctx) -> Step {
        match outcome {
            Sniffed::Step(step) => step,
            Sniffed::Http(s, ready) => {
                *self = Session::Http(s);
                match self {
                    Session::Http(s) => s.start_registered(ready, cx),
                    _ => Step::Close(End::Error),
                }
            }
            Sniffed::H2(s, ready) => {
                *self = Session::H2(s);
                match self {
                    Session::H2(s) => s.start_registered(ready, cx),
                    _ => Step::Close(End::Error),
                }
            }
        }
    }

    /// The other end of an HTTP/2 stream's pipe changed it (see `net::h2pipe`).
    pub(crate) fn poke(&mut self, cx: &mut Ctx) -> Step {
        match self {
            Session::Http(s) => s.poke(cx),
            Session::H2(s) => s.poke(cx),
            _ => self.resume(cx),
        }
    }

    /// Whether this is the session of one HTTP/2 stream (its connection's session counts the
    /// client, its bytes and its end).
    pub(crate) fn is_stream(&self) -> bool {
        matches!(self, Session::Http(s) if s.is_stream())
    }

    /// Drops an ended HTTP/2 stream's session, keeping its box for the worker's next stream.
    pub(crate) fn recycle_stream(self) {
        match self {
            Session::Http(s) if s.is_stream() => http::recycle(s),
            other => drop(other),
        }
    }

    /// Gives a spawned stream's session its id.
    pub(crate) fn set_id(&mut self, id: u64) {
        if let Session::Http(s) = self {
            s.set_id(id);
        }
    }

    /// A client of a TCP listener with SNI routes: its TLS ClientHello picks the pool, then it
    /// becomes a TCP session.
    pub(crate) fn peek(
        pool: Arc<Pool>,
        id: u64,
        client: Stream,
        addr: ClientAddr,
        now: u64,
    ) -> Session {
        Session::Peek(Box::new(PeekSession::new(pool, id, client, addr, now)))
    }

    /// A peek's outcome: its step, or the TCP session that takes over from it (the client's
    /// socket registered already), started now.
    fn peeked(&mut self, outcome: Peeked, cx: &mut Ctx) -> Step {
        match outcome {
            Peeked::Step(step) => step,
            Peeked::Routed(tcp, ready) => {
                *self = Session::Tcp(Box::new(tcp));
                match self {
                    Session::Tcp(s) => s.start_registered(ready, cx),
                    _ => Step::Close(End::Error),
                }
            }
        }
    }

    /// A client of a TLS listener: its handshake first. Err gives the client back when the
    /// worker has `max_handshakes` in progress (the caller closes it).
    pub(crate) fn tls(
        listener: Arc<Listener>,
        pool: Arc<Pool>,
        id: u64,
        client: Stream,
        addr: ClientAddr,
        now: u64,
    ) -> Result<Session, Stream> {
        Handshaking::new(listener, pool, id, client, addr, now)
            .map(|h| Session::Handshake(Box::new(h)))
    }

    /// A client of a listener with `accept_proxy`, from one of its trusted networks: its PROXY
    /// header first.
    pub(crate) fn proxy_header(
        listener: Arc<Listener>,
        id: u64,
        client: Stream,
        peer: ClientAddr,
        now: u64,
    ) -> Session {
        Session::ProxyHeader(Box::new(ProxyWait::new(listener, id, client, peer, now)))
    }

    /// After [`Step::Admit`]: the listener and the client's socket, off epoll.
    pub(crate) fn take_proxied(&mut self) -> Option<(Arc<Listener>, Stream)> {
        match self {
            Session::ProxyHeader(w) => w.take(),
            _ => None,
        }
    }

    /// Whether the session can move to another worker: a kept-alive HTTP client between two
    /// requests (see `HttpSession::movable`).
    pub(crate) fn movable(&self) -> bool {
        matches!(self, Session::Http(s) if s.movable())
    }

    /// An HTTP session's listener; None for any other session.
    pub(crate) fn listener(&self) -> Option<&Arc<Listener>> {
        match self {
            Session::Http(s) => Some(s.listener()),
            _ => None,
        }
    }

    /// Takes the session's sockets off the worker's poll, for another worker to take it.
    pub(crate) fn detach(&mut self, registry: &Registry) {
        if let Session::Http(s) = self {
            s.detach(registry);
        }
    }

    /// Carries on a session moved from another worker (see [`Session::movable`]).
    pub(crate) fn attach(&mut self, cx: &mut Ctx) -> Step {
        match self {
            Session::Http(s) => s.attach(cx),
            _ => Step::Close(End::Error),
        }
    }

    /// Whether the session's access log lines are HTTP ones written by the worker at close (a
    /// client still before its PROXY header on an HTTP listener).
    pub(crate) fn logs_http_at_close(&self) -> bool {
        match self {
            Session::ProxyHeader(w) => w.http,
            // A TLS failure or reset on an HTTP listener: a combined (or JSON) line, not Pen's.
            Session::Handshake(h) => h.is_http(),
            Session::Sniff(_) => true,
            _ => false,
        }
    }

    /// Follows the handshake phase: a finished handshake replaces it with the session it leads to.
    fn after_handshake(&mut self, next: Next, cx: &mut Ctx) -> Step {
        match next {
            Next::Step(step) => step,
            Next::Session(session, ready) => {
                *self = *session;
                match self {
                    Session::Tcp(s) => s.start_registered(ready, cx),
                    Session::Http(s) => s.start_registered(ready, cx),
                    Session::H2(s) => s.start_registered(ready, cx),
                    Session::Handshake(_)
                    | Session::Peek(_)
                    | Session::ProxyHeader(_)
                    | Session::Sniff(_) => Step::Close(End::Error),
                }
            }
        }
    }

    /// The worker starts draining. An idle HTTP client (kept alive, or accepted with no request
    /// yet) is not closed now: it is kept for one more request, answered with
    /// `Connection: close`, and closed at `close_at` (kept alive) or `grace_end` (no request yet)
    /// if it stays silent; the new deadline is returned for the worker to arm. A busy HTTP
    /// session closes after its current exchange. TCP sessions carry on until they end or the
    /// drain deadline; so do handshakes and PROXY headers, bounded by their own timeouts (then
    /// an HTTP session is told of the drain by `Ctx::draining`).
    pub(crate) fn drain(&mut self, close_at: u64, grace_end: u64) -> Option<u64> {
        match self {
            Session::Http(s) => s.drain(close_at, grace_end),
            Session::H2(s) => s.drain(grace_end),
            Session::Sniff(_) => None,
            Session::Tcp(_)
            | Session::Peek(_)
            | Session::ProxyHeader(_)
            | Session::Handshake(_) => None,
        }
    }

    /// Registers the client socket and starts looking for a server.
    pub(crate) fn start(&mut self, cx: &mut Ctx) -> Step {
        match self {
            Session::Tcp(s) => s.start(cx),
            Session::Http(s) => s.start(cx),
            Session::Peek(s) => {
                let outcome = s.start(cx);
                self.peeked(outcome, cx)
            }
            Session::Handshake(s) => s.start(cx),
            Session::ProxyHeader(s) => s.start(cx),
            // Made by a sniff or a handshake, registered already.
            Session::H2(s) => s.resume(cx),
            Session::Sniff(s) => {
                let outcome = s.start(cx);
                self.sniffed(outcome, cx)
            }
        }
    }

    /// An event on one of the session's sockets.
    pub(crate) fn on_ready(&mut self, side: Side, ev: &Event, cx: &mut Ctx) -> Step {
        match self {
            Session::Tcp(s) => s.on_ready(side, ev, cx),
            Session::Http(s) => s.on_ready(side, ev, cx),
            Session::Peek(s) => {
                let outcome = s.on_ready(ev);
                self.peeked(outcome, cx)
            }
            Session::Handshake(s) => {
                let next = s.on_ready(side, ev, cx);
                self.after_handshake(next, cx)
            }
            Session::ProxyHeader(s) => s.on_ready(ev, cx),
            Session::H2(s) => s.on_ready(ev, cx),
            Session::Sniff(s) => {
                let outcome = s.on_ready(ev);
                self.sniffed(outcome, cx)
            }
        }
    }

    /// The resolver's answer for the server of the last [`Step::Resolve`].
    pub(crate) fn on_resolved(&mut self, answer: io::Result<SocketAddr>, cx: &mut Ctx) -> Step {
        match self {
            Session::Tcp(s) => s.on_resolved(answer, cx),
            Session::Http(s) => s.on_resolved(answer, cx),
            Session::Peek(s) => s.wait(),
            Session::Handshake(s) => s.on_deadline(cx),
            Session::ProxyHeader(s) => s.wait(),
            Session::H2(s) => s.resume(cx),
            Session::Sniff(s) => {
                let outcome = s.on_deadline(cx);
                self.sniffed(outcome, cx)
            }
        }
    }

    /// The session's deadline passed (or an earlier one the worker still had armed).
    /// A wake posted for this session by another thread: a place came free in the queue its
    /// request waits in, or (`read`) the file range it waits for is in the page cache. The step
    /// it takes, or None when it does not wait for that (the worker passes a queue's wake on).
    pub(crate) fn on_wake(&mut self, read: bool, cx: &mut Ctx) -> Option<Step> {
        match self {
            Session::Http(s) => s.on_wake(read, cx),
            _ => None,
        }
    }

    pub(crate) fn on_deadline(&mut self, cx: &mut Ctx) -> Step {
        match self {
            Session::Tcp(s) => s.on_deadline(cx),
            Session::Http(s) => s.on_deadline(cx),
            Session::Peek(s) => s.on_deadline(cx),
            Session::Handshake(s) => s.on_deadline(cx),
            Session::ProxyHeader(s) => s.on_deadline(cx),
            Session::H2(s) => s.on_deadline(cx),
            Session::Sniff(s) => {
                let outcome = s.on_deadline(cx);
                self.sniffed(outcome, cx)
            }
        }
    }

    /// Goes on after a [`Step::Again`].
    pub(crate) fn resume(&mut self, cx: &mut Ctx) -> Step {
        match self {
            Session::Tcp(s) => s.resume(cx),
            Session::Http(s) => s.resume(cx),
            Session::Peek(s) => s.wait(),
            Session::Handshake(s) => {
                let next = s.drive(cx);
                self.after_handshake(next, cx)
            }
            Session::ProxyHeader(s) => s.wait(),
            Session::H2(s) => s.resume(cx),
            Session::Sniff(s) => {
                let outcome = s.on_deadline(cx);
                self.sniffed(outcome, cx)
            }
        }
    }

    /// Unique in the process (`connection N`, `close N`).
    pub(crate) fn id(&self) -> u64 {
        match self {
            Session::Tcp(s) => s.id(),
            Session::Http(s) => s.id(),
            Session::Peek(s) => s.id(),
            Session::Handshake(s) => s.id(),
            Session::ProxyHeader(s) => s.id(),
            Session::H2(s) => s.id(),
            Session::Sniff(s) => s.id(),
        }
    }

    /// What `connections` shows of the session.
    pub(crate) fn info(&self, now: u64) -> SessionInfo {
        match self {
            Session::Tcp(s) => s.info(now),
            Session::Http(s) => s.info(now),
            Session::Peek(s) => s.info(now),
            Session::Handshake(s) => s.info(now),
            Session::ProxyHeader(s) => s.info(now),
            Session::H2(s) => s.info(now),
            Session::Sniff(s) => s.info(now),
        }
    }

    /// Ends the session for `end`: arms resets where the peers must see a cut stream, gives the
    /// buffers back, and hands over what the counters and the log line need. The sockets close
    /// when the session is dropped.
    pub(crate) fn close(
        &mut self,
        end: End,
        pools: &mut Pools,
        conns: &mut ServerConns,
    ) -> Closing {
        match self {
            Session::Tcp(s) => s.close(end, pools),
            Session::Http(s) => s.close(end, pools, conns),
            Session::Peek(s) => s.close(),
            Session::Handshake(s) => s.close(end),
            Session::ProxyHeader(s) => s.close(),
            Session::H2(s) => s.close(end),
            Session::Sniff(s) => s.close(),
        }
    }
}
