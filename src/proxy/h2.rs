//! An HTTP/2 client connection (docs/http2.md): the socket, `quill_core::h2::Conn` (frames,
//! streams, flow control, flood limits) and one link per open stream. Each stream is an
//! HTTP session of its own in a worker slot (`HttpSession::for_stream`), whose client is the
//! stream's pipe (`net::h2pipe`): it reads the request as a strict HTTP/1.1 head and body and
//! writes the response as HTTP/1.1, so routes, pools, server connection reuse, retries, rates,
//! ACLs, static files, FastCGI and the access log are the HTTP/1 path's, unchanged; this
//! session turns what they write into HEADERS and DATA within the flow-control windows, and
//! writes all the frames of a turn in one send.
//!
//! An idle connection holds its socket, the HPACK decoder's table and this struct: no buffer.
//!
//! [`Sniff`] is the first phase of a client of a listener with `h2c`: it looks at the client's
//! first bytes without taking them and becomes this session (the HTTP/2 preface) or an HTTP/1
//! session (anything else).

use std::io;
use std::sync::Arc;

use mio::event::Event;
use mio::Interest;
use quill_core::h2::{self, BodyForm, Code};
use quill_core::sys::ThreadRc;

use super::http::HttpSession;
use super::{Closing, Ctx, Session, Step, NEVER};
use crate::backend::Pool;
use crate::clock::millis;
use crate::config::HttpSettings;
use crate::metrics::End;
use crate::net::h2pipe::{self, open, H2Stream, SharedPipe};
use crate::net::tls;
use crate::net::{ClientAddr, Ready, Stream};
use crate::state::shared::{Listener, SessionInfo};

/// Past this much output not yet taken by the socket, the client is not read (a client that
/// sends PINGs and never reads their answers waits for its own socket), and the streams' pipes
/// are not taken from (what their servers send waits there, then in the servers' sockets: a
/// server's endless interim heads, which no window holds back, to a client that does not read).
const MAX_OUTPUT: usize = 256 * 1024;
/// Streams of one connection whose sessions may be starting at once (reading their request
/// head into a buffer and connecting, before the head is sent): more wait their turn, so a burst
/// of streams never holds a buffer each (a connection's 100 streams opened at once against a
/// slow server would hold 1.6 MiB).
const MAX_STARTING: usize = 16;
/// Between the two GOAWAY frames of a graceful close.
const GOAWAY_GAP_MS: u64 = 200;

/// One open stream.
#[derive(Debug)]
struct Link {
    id: u32,
    pipe: SharedPipe,
    resp: h2::Response,
    /// The request body goes to the server chunked (the client gave no length).
    chunked: bool,
    /// The stream's session, until it is started (see [`MAX_STARTING`]).
    waiting: Option<Session>,
}

/// The limits of a connection, from the listener's HTTP settings.
fn config(s: &HttpSettings) -> h2::Config {
    h2::Config {
        max_concurrent_streams: s.h2_max_concurrent_streams,
        max_header_list: s.max_header_bytes as usize,
        max_headers: s.max_headers as usize,
        glitch_burst: s.h2_glitches,
        glitch_rate: (s.h2_glitches / 10).max(1),
        control_burst: s.h2_control_frames,
        control_rate: (s.h2_control_frames / 10).max(1),
        max_requests: u64::from(s.keepalive_requests),
        ..h2::Config::default()
    }
}

fn settings(pool: &Pool) -> &HttpSettings {
    static DEFAULT: std::sync::OnceLock<HttpSettings> = std::sync::OnceLock::new();
    pool.http()
        .map(|s| &**s)
        .unwrap_or_else(|| DEFAULT.get_or_init(HttpSettings::default))
}

/// One HTTP/2 client connection.
#[derive(Debug)]
pub(crate) struct H2Session {
    id: u64,
    client: Stream,
    addr: ClientAddr,
    ready: Ready,
    listener: Arc<Listener>,
    pool: Arc<Pool>,
    conn: Box<h2::Conn>,
    links: Vec<Link>,
    /// The read buffer (lent by the worker's TLS record pool while bytes are held or being
    /// read; empty while idle) and how many bytes of it were read and not yet taken as frames.
    rbuf: Box<[u8]>,
    rlen: usize,
    /// The connection's verified client certificate (every stream's `X-Client-Cert-Subject`).
    subject: Option<Box<str>>,
    started_ms: u64,
    /// Since when no stream is open (the keep-alive timeout runs from here).
    idle_since: u64,
    /// Since when a header block is half received.
    block_since: Option<u64>,
    bytes_in: u64,
    bytes_out: u64,
    eof: bool,
    /// The drain: 0 none, 1 the first GOAWAY is due, 2 the second, 3 both sent.
    drain: u8,
    drain_at: u64,
    grace_end: u64,
    /// This session's token (its streams poke it there).
    token: mio::Token,
    /// The connection ended on an error it sent (for the close's reason).
    failed: Option<Code>,
    /// The last pump stopped at [`MAX_OUTPUT`]: it goes on once the socket takes some.
    held: bool,
    /// The TLS server name, shared by the streams' pipes (taken at the first stream).
    sni: Option<ThreadRc<Box<str>>>,
}

impl H2Session {
    /// A connection whose client's first bytes (`read`, taken from its socket already) may be
    /// in; the server preface waits in the output.
    pub(crate) fn new(
        listener: Arc<Listener>,
        id: u64,
        client: Stream,
        addr: ClientAddr,
        now_ms: u64,
    ) -> H2Session {
        let pool = listener.load_pool_full();
        let conn = Box::new(h2::Conn::new(config(settings(&pool))));
        H2Session {
            id,
            client,
            addr,
            ready: Ready::default(),
            listener,
            pool,
            conn,
            links: Vec::new(),
            rbuf: Box::default(),
            rlen: 0,
            subject: None,
            started_ms: now_ms,
            idle_since: now_ms,
            block_since: None,
            bytes_in: 0,
            bytes_out: 0,
            eof: false,
            drain: 0,
            drain_at: NEVER,
            grace_end: NEVER,
            token: mio::Token(usize::MAX),
            failed: None,
            held: false,
            sni: None,
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Goes on with a client registered already (after a TLS handshake, or a sniff).
    pub(crate) fn start_registered(&mut self, ready: Ready, cx: &mut Ctx) -> Step {
        self.ready = ready;
        self.ready.writable = true;
        self.subject = self.client.tls().and_then(|t| t.take_peer_subject());
        cx.counters.h2_connection();
        self.step(cx)
    }

    pub(crate) fn on_ready(&mut self, ev: &Event, cx: &mut Ctx) -> Step {
        self.ready.update(ev);
        self.step(cx)
    }

    /// A stream's session changed its pipe: the pipes whose sessions poked are looked at.
    pub(crate) fn poke(&mut self, cx: &mut Ctx) -> Step {
        self.step_from(cx, false)
    }

    pub(crate) fn resume(&mut self, cx: &mut Ctx) -> Step {
        self.step(cx)
    }

    /// The worker starts draining: a GOAWAY at once (the streams in flight finish), a second
    /// one naming the last stream taken a moment later, then the close once every stream is
    /// over (or at the end of the grace).
    pub(crate) fn drain(&mut self, grace_end: u64) -> Option<u64> {
        if self.drain == 0 {
            self.drain = 1;
            self.drain_at = 0;
            self.grace_end = grace_end;
        }
        Some(0)
    }

    pub(crate) fn on_deadline(&mut self, cx: &mut Ctx) -> Step {
        let now = cx.now;
        if now >= self.grace_end {
            self.conn.abort(Code::NO_ERROR);
            let _ = self.flush();
            return Step::Close(End::Shutdown);
        }
        if self.drain > 0 {
            return self.step(cx);
        }
        let s = settings(&self.pool);
        if self
            .block_since
            .is_some_and(|t| now >= t + millis(s.header_timeout))
        {
            // A header block left half sent.
            self.conn.abort(Code::PROTOCOL_ERROR);
            let _ = self.flush();
            return Step::Close(End::IdleTimeout);
        }
        if self.links.is_empty() && now >= self.idle_deadline(s) {
            self.conn.goaway_graceful(true);
            let _ = self.flush();
            return Step::Close(End::IdleTimeout);
        }
        self.step(cx)
    }

    fn idle_deadline(&self, s: &HttpSettings) -> u64 {
        let keep = millis(s.keepalive_timeout);
        if keep == 0 {
            return self.idle_since;
        }
        self.idle_since.saturating_add(keep)
    }

    fn deadline(&self) -> u64 {
        let s = settings(&self.pool);
        let mut d = self.grace_end;
        if self.drain > 0 && self.drain < 3 {
            d = d.min(self.drain_at);
        }
        if let Some(t) = self.block_since {
            d = d.min(t.saturating_add(millis(s.header_timeout)));
        }
        if self.links.is_empty() {
            d = d.min(self.idle_deadline(s));
        }
        d
    }

    /// Does all the socket and the streams allow now.
    fn step(&mut self, cx: &mut Ctx) -> Step {
        self.step_from(cx, true)
    }

    /// [`H2Session::step`], looking first at every stream's pipe (`all`) or at those whose
    /// sessions poked this one.
    fn step_from(&mut self, cx: &mut Ctx, all: bool) -> Step {
        self.token = cx.client_token;
        if cx.draining && self.drain == 0 {
            self.drain = 1;
            self.drain_at = 0;
            self.grace_end = cx.grace_end;
        }
        if self.drain == 1 && cx.now >= self.drain_at {
            self.conn.goaway_graceful(false);
            self.drain = 2;
            self.drain_at = cx.now + GOAWAY_GAP_MS;
        } else if self.drain == 2 && cx.now >= self.drain_at {
            self.conn.goaway_graceful(true);
            self.drain = 3;
        }
        if self.conn.output_released() {
            if let Some(buf) = h2pipe::spare_output() {
                self.conn.lend_output(buf);
            }
        }
        // The pipes change between steps (the streams' sessions run in steps of their own, and
        // poke this one for the pipes they changed) and by the frames this step takes: past the
        // first pass, every stream is looked at again only after frames (a window opened, a
        // stream reset), not once per pass.
        let mut pump_due = Some(all);
        for _ in 0..16 {
            let mut progress = false;
            if self.ready.error {
                return Step::Close(End::ClientReset);
            }
            if self.ready.readable && !self.eof && self.conn.output().len() < MAX_OUTPUT {
                match self.read() {
                    Ok(n) => progress |= n > 0,
                    Err(e) => {
                        tracing::debug!("{}: h2 read: {e}", self.addr.to_string_with_port());
                        return Step::Close(End::ClientReset);
                    }
                }
            }
            if self.rlen > 0 && self.take_frames(cx) {
                progress = true;
                pump_due = Some(true);
            }
            if let Some(all) = pump_due.take() {
                let (moved, more) = self.pump(cx, all);
                progress |= moved;
                // A response's pump stops after so many steps (a chunked body of many small
                // chunks): what it left is taken in the next pass, not at the next event.
                if more {
                    pump_due = Some(true);
                }
            }
            self.start_waiting(cx);
            if let Err(e) = self.flush() {
                tracing::debug!("{}: h2 write: {e}", self.addr.to_string_with_port());
                return Step::Close(End::ClientReset);
            }
            if self.held && self.conn.output().len() < MAX_OUTPUT {
                // The socket took what held the pump back: the streams go on now.
                self.held = false;
                pump_due = Some(true);
                progress = true;
            }
            if let Some(code) = self.failed {
                // A connection error: its GOAWAY is written (or as much as the socket took).
                return Step::Close(if code == Code::ENHANCE_YOUR_CALM {
                    End::Refused
                } else {
                    End::Error
                });
            }
            if !progress {
                break;
            }
        }
        self.block_since = match (self.conn.in_block(), self.block_since) {
            (true, None) => Some(cx.now),
            (true, s) => s,
            (false, _) => None,
        };
        // Nothing left to send: the output buffer goes back to the worker (the connection may
        // now wait long, on a slow server or a client's half frame, and holds none meanwhile),
        // before an idle connection's shrink would free it.
        if let Some(buf) = self.conn.take_output_buffer() {
            h2pipe::keep_output(buf);
        }
        if self.links.is_empty() {
            if self.conn.is_done() && self.conn.output().is_empty() {
                return Step::Close(End::Done);
            }
            if self.eof {
                return Step::Close(End::Done);
            }
            if self.conn.output().is_empty() && self.rlen == 0 {
                // Idle: no buffer held (it goes back to the worker's pool, for the next
                // connection or the next batch of streams).
                tls::give_back(&mut self.rbuf);
                self.conn.shrink();
            }
        }
        Step::Wait(self.deadline())
    }

    /// Reads what the socket has (bounded by the buffer): the bytes read.
    fn read(&mut self) -> io::Result<usize> {
        if self.rbuf.is_empty() {
            // A pooled TLS record buffer: one whole frame of the largest size a client may send
            // (16 KiB of payload and its header) fits.
            self.rbuf = tls::lend();
        }
        let have = self.rlen;
        let room = self.rbuf.len() - have;
        if room == 0 {
            return Ok(0);
        }
        match self.client.read(&mut self.rbuf[have..]) {
            Ok(0) => {
                self.eof = true;
                Ok(0)
            }
            Ok(n) => {
                self.rlen += n;
                self.bytes_in += n as u64;
                if n < room && !self.ready.read_closed && !self.client.ended() {
                    self.ready.readable = false;
                }
                Ok(n)
            }
            Err(e) => match e.kind() {
                io::ErrorKind::WouldBlock => {
                    self.ready.readable = false;
                    Ok(0)
                }
                io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            },
        }
    }

    /// Writes the connection's output: one send for all the frames of the turn.
    fn flush(&mut self) -> io::Result<()> {
        // A short write is not a full socket (TLS takes a bounded amount a call): go on until
        // the socket says so (EAGAIN) or all is written.
        for _ in 0..64 {
            if !self.client.flush_backlog(&mut self.ready)? {
                return Ok(());
            }
            let out = self.conn.output();
            if out.is_empty() || !self.ready.writable {
                return Ok(());
            }
            match self.client.write(out) {
                Ok(0) => {
                    self.ready.writable = false;
                    return Ok(());
                }
                Ok(n) => {
                    self.bytes_out += n as u64;
                    self.conn.sent(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.ready.writable = false;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Takes the whole frames read: whether any was.
    fn take_frames(&mut self, cx: &mut Ctx) -> bool {
        let buf = std::mem::take(&mut self.rbuf);
        let len = self.rlen;
        let mut at = 0;
        for _ in 0..10_000 {
            let (n, ev) = self.conn.feed(&buf[at..len], cx.now);
            at += n;
            match ev {
                h2::Event::None => {}
                h2::Event::Request { stream, end_stream } => self.request(stream, end_stream, cx),
                h2::Event::Data {
                    stream,
                    data,
                    end_stream,
                } => self.data(stream, data, end_stream),
                h2::Event::Trailers { stream } => self.trailers(stream),
                h2::Event::Reset { stream, code } => {
                    tracing::debug!("h2 stream {stream} reset: {}", code.name());
                    self.drop_link(stream);
                }
                h2::Event::WindowOpened | h2::Event::GoAway => {}
                h2::Event::Error(code) => {
                    tracing::debug!(
                        "{}: h2 connection error {}",
                        self.addr.to_string_with_port(),
                        code.name()
                    );
                    cx.counters.h2_error(code);
                    self.failed = Some(code);
                    at = len;
                    break;
                }
            }
            if n == 0 {
                break;
            }
        }
        let mut buf = buf;
        buf.copy_within(at..len, 0);
        self.rlen = len - at;
        self.rbuf = buf;
        at > 0
    }

    /// A request: its HTTP/1.1 form goes into a new pipe, read by a new HTTP session.
    fn request(&mut self, stream: u32, end_stream: bool, cx: &mut Ctx) {
        let list = self.conn.fields();
        let form = if end_stream {
            BodyForm::None
        } else if list.content_length.is_some() {
            BodyForm::Length
        } else {
            BodyForm::Chunked
        };
        let head = list.method() == b"HEAD";
        // After a reload, the stream and this connection (its timeouts) take the new pool, as an
        // HTTP/1 connection's next request does.
        if let Some(newer) = self.listener.newer_pool(&self.pool) {
            self.pool = newer;
        }
        if self.sni.is_none() {
            self.sni = self
                .client
                .server_name()
                .map(|name| ThreadRc::new(Box::from(name)));
        }
        let sni = self.sni.clone();
        let pipe = h2pipe::new_pipe(self.token, self.client.is_tls(), sni);
        {
            let mut p = open(&pipe);
            p.up.reserve(512);
            h2::write_http1(list, form, &mut p.up);
            p.up_eof = end_stream;
        }
        let stream_end = Stream::H2(H2Stream::new(pipe.clone()));
        let session = HttpSession::for_stream(
            (self.listener.clone(), self.pool.clone()),
            stream_end,
            self.addr,
            self.subject.clone(),
            cx.now,
        );
        let session = Session::Http(super::http::boxed(session));
        // No more streams than that open: no need to count (each count opens every pipe).
        let waiting = if self.links.len() < MAX_STARTING || self.starting() < MAX_STARTING {
            cx.spawned.push(session);
            None
        } else {
            Some(session)
        };
        cx.counters.h2_stream();
        self.links.push(Link {
            id: stream,
            pipe,
            resp: h2::Response::new(head),
            chunked: form == BodyForm::Chunked,
            waiting,
        });
    }

    /// Streams whose sessions started and have not sent their request's head yet.
    fn starting(&self) -> usize {
        self.links
            .iter()
            .filter(|l| {
                l.waiting.is_none() && {
                    let p = open(&l.pipe);
                    !p.head_sent && !p.closed
                }
            })
            .count()
    }

    /// Starts waiting streams' sessions while fewer than [`MAX_STARTING`] are starting.
    fn start_waiting(&mut self, cx: &mut Ctx) {
        if self.links.iter().all(|l| l.waiting.is_none()) {
            return;
        }
        let mut room = MAX_STARTING.saturating_sub(self.starting());
        for link in &mut self.links {
            if room == 0 {
                break;
            }
            if let Some(s) = link.waiting.take() {
                cx.spawned.push(s);
                room -= 1;
            }
        }
    }

    fn data(&mut self, stream: u32, data: &[u8], end_stream: bool) {
        let Some(link) = self.links.iter().find(|l| l.id == stream) else {
            self.conn.release(stream, data.len());
            return;
        };
        let mut p = open(&link.pipe);
        if link.chunked {
            if !data.is_empty() {
                let mut size = [0u8; 16];
                let n = hex(data.len(), &mut size);
                p.up.extend_from_slice(&size[..n]);
                p.up.extend_from_slice(b"\r\n");
                p.up.extend_from_slice(data);
                p.up.extend_from_slice(b"\r\n");
            }
            if end_stream {
                p.up.extend_from_slice(b"0\r\n\r\n");
            }
        } else {
            p.up.extend_from_slice(data);
        }
        p.up_unreleased += data.len();
        p.up_eof |= end_stream;
        p.poke_session();
    }

    fn trailers(&mut self, stream: u32) {
        let Some(link) = self.links.iter().find(|l| l.id == stream) else {
            return;
        };
        let mut p = open(&link.pipe);
        if link.chunked {
            p.up.extend_from_slice(b"0\r\n");
            for (n, v) in self.conn.fields().fields() {
                p.up.extend_from_slice(n);
                p.up.extend_from_slice(b": ");
                p.up.extend_from_slice(v);
                p.up.extend_from_slice(b"\r\n");
            }
            p.up.extend_from_slice(b"\r\n");
        }
        p.up_eof = true;
        p.poke_session();
    }

    /// The stream is over on the client's side (reset): its session is told.
    fn drop_link(&mut self, stream: u32) {
        if let Some(i) = self.links.iter().position(|l| l.id == stream) {
            let link = self.links.swap_remove(i);
            let mut p = open(&link.pipe);
            p.up_reset = true;
            p.poke_session();
        }
        if self.links.is_empty() {
            self.idle_since = self.idle_since.max(self.started_ms);
        }
    }

    /// Moves every stream's response on (`all`), or those of the streams whose sessions poked
    /// this one: what its session wrote becomes frames, within the windows. Whether anything
    /// moved, and whether a stream took some of its bytes and left others that may go on
    /// (another pass may move them).
    fn pump(&mut self, cx: &mut Ctx, all: bool) -> (bool, bool) {
        let mut progress = false;
        let mut more = false;
        let mut i = 0;
        while i < self.links.len() {
            if self.conn.output().len() >= MAX_OUTPUT {
                // The client is not taking what it was sent: the streams not looked at keep
                // their pokes, and the socket's next writable event pumps every stream.
                self.held = true;
                break;
            }
            let link = &mut self.links[i];
            if !link.pipe.take_poked() && !all {
                i += 1;
                continue;
            }
            let mut p = open(&link.pipe);
            let released = p.releasable();
            if released > 0 {
                self.conn.release(link.id, released);
                progress = true;
            }
            let was_full = p.down.len() >= h2pipe::DOWN_CAP;
            let eof = p.down_eof || p.closed;
            // What the stream's session wrote goes out first, even when it then cut the
            // stream (the client sees the head and the bytes that came, then the reset, as an
            // HTTP/1 client would see them before the connection's reset).
            let pipe = &*p;
            let result = match link.resp.pump(
                &mut self.conn,
                link.id,
                &pipe.down,
                eof && !pipe.down_reset,
                (pipe.down_taken, &pipe.written),
            ) {
                Ok(n) if p.down_reset && !link.resp.is_done() => {
                    p.take(n);
                    Err(h2::response::Broken)
                }
                other => other,
            };
            let over = match result {
                Ok(n) => {
                    if n > 0 {
                        p.take(n);
                        progress = true;
                        more |= !p.down.is_empty() && !link.resp.is_done();
                        if was_full || p.down.is_empty() {
                            p.poke_session();
                        }
                    }
                    if link.resp.is_done() {
                        // The response is whole; a request body still coming is not wanted
                        // (the connection reset the stream with NO_ERROR).
                        p.up_eof = true;
                        p.poke_session();
                        true
                    } else if p.closed && p.down.is_empty() {
                        // The stream's session ended before its response did.
                        self.conn.reset(link.id, Code::INTERNAL_ERROR);
                        true
                    } else {
                        false
                    }
                }
                Err(_) => {
                    self.conn.reset(link.id, Code::INTERNAL_ERROR);
                    p.up_reset = true;
                    p.poke_session();
                    true
                }
            };
            drop(p);
            if over {
                let link = self.links.swap_remove(i);
                h2pipe::recycle(&link.pipe);
                progress = true;
                if self.links.is_empty() {
                    self.idle_since = cx.now;
                }
            } else {
                i += 1;
            }
        }
        (progress, more)
    }

    pub(crate) fn info(&self, now_ms: u64) -> SessionInfo {
        SessionInfo {
            id: self.id,
            listener: self.pool.name.clone(),
            client: self.addr.to_string_with_port(),
            server: None,
            age_ms: now_ms.saturating_sub(self.started_ms),
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
            state: if self.links.is_empty() {
                "h2-idle"
            } else {
                "h2-streams"
            },
        }
    }

    /// Ends the connection: every stream's session learns its client is gone.
    pub(crate) fn close(&mut self, end: End) -> Closing {
        for link in self.links.drain(..) {
            let mut p = open(&link.pipe);
            p.up_reset = true;
            p.poke_session();
        }
        if matches!(end, End::Shutdown | End::Panic) {
            self.client.reset_on_close();
        }
        Closing {
            client: self.addr,
            server: None,
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
            started_ms: self.started_ms,
        }
    }
}

/// Writes `n` in lowercase hex: the digits' length.
fn hex(mut n: usize, out: &mut [u8; 16]) -> usize {
    let mut digits = [0u8; 16];
    let mut k = 0;
    loop {
        digits[k] = b"0123456789abcdef"[n % 16];
        k += 1;
        n /= 16;
        if n == 0 {
            break;
        }
    }
    for i in 0..k {
        out[i] = digits[k - 1 - i];
    }
    k
}

/// The first phase of a client of an `h2c` listener: its first bytes, peeked, say whether it
/// speaks HTTP/2 (the 24-byte preface) or HTTP/1.
#[derive(Debug)]
pub(crate) struct Sniff {
    listener: Arc<Listener>,
    id: u64,
    client: Option<Stream>,
    addr: ClientAddr,
    started_ms: u64,
    ready: Ready,
    deadline: u64,
}

/// What a sniff leads to.
pub(crate) enum Sniffed {
    Step(Step),
    Http(Box<HttpSession>, Ready),
    H2(Box<H2Session>, Ready),
}

impl Sniff {
    pub(crate) fn new(
        listener: Arc<Listener>,
        id: u64,
        client: Stream,
        addr: ClientAddr,
        now_ms: u64,
    ) -> Sniff {
        let pool = listener.load_pool();
        let timeout = millis(settings(&pool).header_timeout);
        let defers = pool.defers_accept();
        drop(pool);
        Sniff {
            listener,
            id,
            client: Some(client),
            addr,
            started_ms: now_ms,
            ready: Ready {
                readable: defers,
                ..Ready::default()
            },
            deadline: now_ms.saturating_add(timeout),
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn start(&mut self, cx: &mut Ctx) -> Sniffed {
        let Some(client) = &mut self.client else {
            return Sniffed::Step(Step::Close(End::Error));
        };
        if let Err(e) = cx.registry.register(
            client.source(),
            cx.client_token,
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::warn!("cannot register client socket: {e}");
            return Sniffed::Step(Step::Close(End::Error));
        }
        if self.ready.readable {
            return self.look();
        }
        Sniffed::Step(Step::Wait(self.deadline))
    }

    pub(crate) fn on_ready(&mut self, ev: &Event) -> Sniffed {
        self.ready.update(ev);
        if ev.is_error() {
            return Sniffed::Step(Step::Close(End::ClientReset));
        }
        if !self.ready.readable {
            return Sniffed::Step(Step::Wait(self.deadline));
        }
        self.look()
    }

    pub(crate) fn on_deadline(&mut self, cx: &mut Ctx) -> Sniffed {
        if cx.now >= self.deadline {
            // Nothing (or not enough to tell) in time: the HTTP/1 session answers 408.
            return self.become_http();
        }
        Sniffed::Step(Step::Wait(self.deadline))
    }

    fn look(&mut self) -> Sniffed {
        let Some(client) = &self.client else {
            return Sniffed::Step(Step::Close(End::Error));
        };
        let mut buf = [0u8; 24];
        let n = match rustix::net::recv(client, &mut buf[..], rustix::net::RecvFlags::PEEK) {
            Ok((0, _)) => return Sniffed::Step(Step::Close(End::Done)),
            Ok((n, _)) => n,
            Err(e) if e == rustix::io::Errno::AGAIN => {
                self.ready.readable = false;
                return Sniffed::Step(Step::Wait(self.deadline));
            }
            Err(_) => return Sniffed::Step(Step::Close(End::ClientReset)),
        };
        let preface = &h2::frame::PREFACE[..];
        if buf[..n] != preface[..n] {
            return self.become_http();
        }
        if n < preface.len() {
            // A prefix of the preface: wait for the rest (bytes stay in the socket).
            self.ready.readable = false;
            return Sniffed::Step(Step::Wait(self.deadline));
        }
        let Some(client) = self.client.take() else {
            return Sniffed::Step(Step::Close(End::Error));
        };
        let mut h2 = H2Session::new(
            self.listener.clone(),
            self.id,
            client,
            self.addr,
            self.started_ms,
        );
        h2.ready.readable = true;
        let mut ready = self.ready;
        ready.readable = true;
        Sniffed::H2(Box::new(h2), ready)
    }

    fn become_http(&mut self) -> Sniffed {
        let Some(client) = self.client.take() else {
            return Sniffed::Step(Step::Close(End::Error));
        };
        let http = HttpSession::new(
            self.listener.clone(),
            self.id,
            client,
            self.addr,
            self.started_ms,
        );
        let mut ready = self.ready;
        ready.readable = true;
        Sniffed::Http(Box::new(http), ready)
    }

    pub(crate) fn info(&self, now_ms: u64) -> SessionInfo {
        SessionInfo {
            id: self.id,
            listener: self.listener.name.clone(),
            client: self.addr.to_string_with_port(),
            server: None,
            age_ms: now_ms.saturating_sub(self.started_ms),
            bytes_in: 0,
            bytes_out: 0,
            state: "h2c-sniff",
        }
    }

    pub(crate) fn close(&mut self) -> Closing {
        Closing {
            client: self.addr,
            server: None,
            bytes_in: 0,
            bytes_out: 0,
            started_ms: self.started_ms,
        }
    }
}
