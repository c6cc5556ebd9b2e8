//! A request answered by a CGI script (docs/cgi.md): the session resolves the script beneath
//! the route's root, starts it through the spawner (`web::cgi`), and then moves bytes between
//! three pipes and the client in its own event loop turns: the request body to the script's
//! stdin, its stdout through `quill_core::cgi`'s [`Translator`] to the client, its stderr to
//! Quill's log. The pipes are registered with the session's server token (a CGI exchange has no
//! server connection); any event on it makes the session try all three, each until it would
//! block.
//!
//! The child's process group is killed when the script outlives `timeout` (504 if the client
//! had nothing yet, else the response is cut), when the client leaves, and when the session
//! ends for any other reason; the spawner reaps it.

use std::io::{self, Read, Write};
use std::sync::Arc;

use mio::Interest;
use quill_core::cgi::{BodyFraming, Limits, Translator};
use quill_core::http1::{self, Body, FieldIndex, Framing, Method, Version};

use super::input::Filled;
use super::log;
use super::request::{route_of, route_stats, settings, Local};
use super::HttpSession;
use crate::clock::millis;
use crate::metrics::{End, Source};
use crate::proxy::copy::{Buf, Pools};
use crate::proxy::{Ctx, Step, NEVER};
use crate::route::CgiRoot;
use crate::web::cgi::{self, env, spawn, Pipes};

/// Most stderr lines of one request that go to the log; the rest are read and dropped.
const STDERR_LINES: u32 = 20;
/// Most bytes of one stderr line that go to the log.
const STDERR_LINE_MAX: usize = 512;
/// A chunked request body is buffered (the script is told its length): at most this much when
/// `max_body` is not set.
const CHUNKED_MAX: u64 = 8 << 20;

/// A CGI exchange in flight.
#[derive(Debug)]
pub(super) struct CgiRun {
    root: Arc<CgiRoot>,
    route: u32,
    /// The request's body that still goes to stdin.
    body: ReqBody,
    /// The child's pipes (None while a chunked body is still being collected).
    pipes: Option<Pipes>,
    /// The environment and script, kept until the child is started (a chunked body first).
    pending: Option<Pending>,
    translator: Translator,
    /// Script output read and not yet translated: `[at, len)`.
    from_script: Option<Buf>,
    from_at: usize,
    from_len: usize,
    /// Response bytes not yet written to the client: `[at, len)`.
    to_client: Option<Buf>,
    to_at: usize,
    to_len: usize,
    /// The script's stdout ended and the translator wrote the response's end.
    output_done: bool,
    /// The script's name, for its stderr lines in the log.
    name: String,
    stderr_line: Vec<u8>,
    stderr_lines: u32,
    /// The connection may carry another request after this one.
    keep: bool,
    /// Clock ms when the script was started (its `timeout` runs from it).
    started_ms: u64,
    /// Clock ms of the last progress toward the client (body_timeout once the script is done).
    pub(super) active_ms: u64,
    timeout_ms: u64,
    bytes_in: u64,
    bytes_out: u64,
    started_at: std::time::Instant,
}

/// What is left of the request body.
#[derive(Debug)]
enum ReqBody {
    /// Nothing (more) to send.
    Done,
    /// `Content-Length` bytes still to read from the client and write to stdin.
    Length(u64),
    /// A chunked body being collected (decoded) before the script starts.
    Collecting(Body, Vec<u8>, u64),
    /// A collected body being written: `[at..]` is left.
    Buffered(Vec<u8>, usize),
}

/// The script to start once its body is in.
#[derive(Debug)]
struct Pending {
    program: std::path::PathBuf,
    dir: std::path::PathBuf,
    env: Vec<(Vec<u8>, Vec<u8>)>,
}

impl CgiRun {
    /// Gives the buffers back and kills the child's process group if it may still run.
    pub(super) fn release(&mut self, pools: &mut Pools) {
        if let Some(b) = self.from_script.take() {
            pools.give_buffer(b);
        }
        if let Some(b) = self.to_client.take() {
            pools.give_buffer(b);
        }
        if let Some(p) = &self.pipes {
            if !self.output_done {
                p.child.kill();
            }
        }
        self.pipes = None;
        if self.pending.take().is_some() {
            // Counted, never started (a chunked body that did not come whole).
            spawn::release_unstarted();
        }
    }

    /// When the session gives up on the script: `timeout` after its start while it runs, then
    /// `body_timeout` after the last progress toward the client.
    pub(super) fn deadline(&self, body_timeout: std::time::Duration) -> u64 {
        if !self.output_done {
            return self.started_ms.saturating_add(self.timeout_ms);
        }
        if body_timeout.is_zero() {
            return NEVER;
        }
        self.active_ms.saturating_add(millis(body_timeout))
    }

    /// Whether the client had a byte of the response.
    pub(super) fn is_headed(&self) -> bool {
        self.translator.is_headed() && (self.to_at > 0 || self.bytes_out > 0)
    }
}

/// What one turn of the exchange did.
enum Turn {
    /// Bytes moved: go on.
    Moved,
    /// Nothing could move: wait for an event.
    Blocked,
}

impl HttpSession {
    /// The CGI root of route `i` of the current snapshot, if that route runs scripts.
    pub(super) fn cgi_root(&self, i: usize) -> Option<&Arc<CgiRoot>> {
        match &route_of(&self.pool, Some(i as u32))?.action {
            crate::route::Action::Cgi(root) => Some(root),
            _ => None,
        }
    }

    /// Answers the request whose head is parsed in the input with a script beneath `root`
    /// (route `route`).
    pub(super) fn serve_cgi(
        &mut self,
        head: &http1::RequestHead,
        fields: &FieldIndex,
        root: Arc<CgiRoot>,
        route: usize,
        cx: &mut Ctx,
    ) -> Result<(), Step> {
        let buf = self.input.unparsed();
        let script = match cgi::resolve(&root, head.target.of(buf)) {
            Ok(s) => s,
            Err(status) => return self.cgi_refuse(head, status, route, cx),
        };
        if !spawn::admit(root.action.max_children) {
            // obs: a refused start could be counted here.
            return self.cgi_refuse(head, 503, route, cx);
        }
        let (body, content_length) = match head.framing {
            Framing::Length(0) => (ReqBody::Done, Some(0)),
            Framing::Length(n) => (ReqBody::Length(n), Some(n)),
            Framing::Chunked => {
                let max = settings(&self.pool).max_body.unwrap_or(CHUNKED_MAX);
                let body = Body::new(Framing::Chunked);
                (ReqBody::Collecting(body, Vec::new(), max), None)
            }
            _ => (ReqBody::Done, None),
        };
        let pending = self.cgi_pending(head, fields, &root, &script, content_length);
        let keep = self.keeps_after_cgi(head, cx);
        let name = String::from_utf8_lossy(&script.name).into_owned();
        let mut translator = Translator::new(Limits::default());
        let unknown = if keep {
            BodyFraming::Chunked
        } else {
            BodyFraming::Close
        };
        translator.start(head.method == Method::Head, unknown);
        if !keep {
            translator.close_after();
        }
        // Past the request head: the body (if any) is what follows.
        self.input.fed += head.len as u32;
        self.input.fwd = self.input.fed;
        self.cgi = Some(Box::new(CgiRun {
            root,
            route: route as u32,
            body,
            pipes: None,
            pending: Some(pending),
            translator,
            from_script: None,
            from_at: 0,
            from_len: 0,
            to_client: None,
            to_at: 0,
            to_len: 0,
            output_done: false,
            name,
            stderr_line: Vec::new(),
            stderr_lines: 0,
            keep,
            started_ms: cx.now,
            active_ms: cx.now,
            timeout_ms: 0,
            bytes_in: 0,
            bytes_out: 0,
            started_at: std::time::Instant::now(),
        }));
        if let Some(run) = self.cgi.as_mut() {
            run.timeout_ms = millis(run.root.action.timeout);
            if !matches!(run.body, ReqBody::Collecting(..)) {
                if let Err(status) = start_child(run, cx) {
                    return Err(self.cgi_fault(status, cx));
                }
            }
        }
        self.drive_cgi(cx).map(|_| ())
    }

    /// The script's environment and where it runs.
    fn cgi_pending(
        &self,
        head: &http1::RequestHead,
        fields: &FieldIndex,
        root: &CgiRoot,
        script: &cgi::Script,
        content_length: Option<u64>,
    ) -> Pending {
        let buf = self.input.unparsed();
        let pairs: Vec<(&[u8], &[u8])> = fields
            .iter(buf)
            .map(|f| (f.name.of(buf), f.value.of(buf)))
            .collect();
        let host = head.host.map(|h| crate::route::host_name(h.of(buf)));
        let local = self.pool.local.or_else(|| {
            socket2::SockRef::from(&self.client)
                .local_addr()
                .ok()?
                .as_socket()
        });
        let root_dir = root.action.root.as_os_str().as_encoded_bytes();
        let req = env::Request {
            method: head.method_span.of(buf),
            protocol: match head.version {
                Version::Http10 => "HTTP/1.0",
                _ => "HTTP/1.1",
            },
            target: head.target.of(buf),
            script_name: &script.name,
            path_info: &script.path_info,
            root: root_dir,
            client: match self.addr {
                crate::net::ClientAddr::Ip(a) => Some(a),
                crate::net::ClientAddr::Unix => None,
            },
            local,
            host,
            https: self.client.is_tls(),
            content_length,
            fields: &pairs,
        };
        let rel = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&script.name[1..]);
        let program = root.action.root.join(rel);
        let dir = program
            .parent()
            .map_or_else(|| root.action.root.clone(), |d| d.to_path_buf());
        Pending {
            program,
            dir,
            env: env::environment(&req),
        }
    }

    /// Whether the connection may carry another request after the script's answer: HTTP/1.1
    /// kept alive, and nothing closes it (the body is read to its end either way).
    fn keeps_after_cgi(&self, head: &http1::RequestHead, cx: &Ctx) -> bool {
        let s = settings(&self.pool);
        head.keep_alive()
            && head.version != Version::Http10
            && !self.draining
            && !cx.draining
            && !s.keepalive_timeout.is_zero()
            && !self.is_last_request(s)
    }

    /// Quill's own answer to a script request it does not run (404, 403, 503).
    fn cgi_refuse(
        &mut self,
        head: &http1::RequestHead,
        status: u16,
        route: usize,
        cx: &mut Ctx,
    ) -> Result<(), Step> {
        let what = Local::Status {
            status,
            retry_after: None,
            route: Some(route),
        };
        self.answer_locally(head, what, cx)
    }

    /// Moves the exchange on. Ok(true) when it ended and the next request may be read.
    pub(super) fn drive_cgi(&mut self, cx: &mut Ctx) -> Result<bool, Step> {
        for _ in 0..16 {
            let moved = self.cgi_turn(cx)?;
            if self.cgi.as_ref().is_some_and(|r| r.finished()) {
                return self.end_cgi_done(cx);
            }
            if let Turn::Blocked = moved {
                return Ok(false);
            }
        }
        Err(Step::Again)
    }

    /// One pass over the client and the three pipes.
    fn cgi_turn(&mut self, cx: &mut Ctx) -> Result<Turn, Step> {
        if self.client_ready.error || self.client_ready.read_closed {
            // The client left (or half-closed: a CGI exchange takes that for leaving).
            return Err(self.cgi_close(End::ClientReset, cx));
        }
        let Some(run) = self.cgi.as_mut() else {
            return Ok(Turn::Blocked);
        };
        let mut moved = match collect(run, &mut self.input) {
            Ok(m) => m,
            Err(status) => return Err(self.cgi_fault(status, cx)),
        };
        if run.pending.is_some() && !matches!(run.body, ReqBody::Collecting(..)) {
            // A chunked body is all in: the script starts.
            if let Err(status) = start_child(run, cx) {
                return Err(self.cgi_fault(status, cx));
            }
            moved = true;
        }
        if run.pipes.is_some() {
            moved |= body_to_stdin(run, &mut self.input);
            moved |= drain_stderr(run);
            match stdout_to_client(run, &self.client, cx.pools) {
                Ok(m) => moved |= m,
                Err(Failure::Client) => return Err(self.cgi_close(End::ClientReset, cx)),
                Err(Failure::Script(e)) => {
                    tracing::warn!("cgi: {}: {e}", run.name);
                    return Err(self.cgi_fault(502, cx));
                }
            }
        }
        match self.cgi_read_client(cx) {
            Ok(m) => moved |= m,
            Err(()) => return Err(self.cgi_close(End::ClientReset, cx)),
        }
        if let Some(run) = self.cgi.as_mut() {
            if moved {
                run.active_ms = cx.now;
            }
        }
        Ok(if moved { Turn::Moved } else { Turn::Blocked })
    }

    /// Reads from the client when the request body wants bytes and the input has none left.
    /// Err: the client left or failed before its body was all in.
    fn cgi_read_client(&mut self, cx: &mut Ctx) -> Result<bool, ()> {
        let Some(run) = self.cgi.as_ref() else {
            return Ok(false);
        };
        let wants = matches!(run.body, ReqBody::Length(_) | ReqBody::Collecting(..));
        if !wants || self.input.has_unparsed() {
            return Ok(false);
        }
        self.input.settle(cx.pools);
        match self
            .input
            .fill(&self.client, &mut self.client_ready, cx.pools)
        {
            Ok(Filled::Data) => Ok(true),
            Ok(Filled::Nothing) => Ok(false),
            Ok(Filled::Eof | Filled::Full) | Err(_) => Err(()),
        }
    }

    /// The script failed (or the body did): 502 / 504 / 400 if the client has nothing yet,
    /// else the response is cut.
    fn cgi_fault(&mut self, status: u16, cx: &mut Ctx) -> Step {
        let headed = self.cgi.as_ref().is_some_and(|r| r.is_headed());
        if let Some(mut run) = self.cgi.take() {
            if let Some(e) = run.pipes.as_ref().and_then(|p| p.child.spawn_error()) {
                tracing::warn!("cgi: cannot start {e}");
            }
            run.release(cx.pools);
        }
        if headed {
            self.client.reset_on_close();
            return Step::Close(End::ServerReset);
        }
        self.refuse(status, cx)
    }

    /// Ends the session in the middle of a CGI exchange (the child killed; the log says how).
    fn cgi_close(&mut self, end: End, cx: &mut Ctx) -> Step {
        self.end_cgi(end, cx);
        if end != End::Done {
            self.client.reset_on_close();
        }
        Step::Close(end)
    }

    /// The script's response is all written: counted, logged; the next request may come.
    fn end_cgi_done(&mut self, cx: &mut Ctx) -> Result<bool, Step> {
        let keep = self.cgi.as_ref().is_some_and(|r| r.keep);
        self.end_cgi(End::Done, cx);
        if keep {
            Ok(true)
        } else {
            let _ = self.client.shutdown_write();
            Err(Step::Close(End::Done))
        }
    }

    /// The exchange is over (done, or cut by `end`): counted, logged, buffers given back, the
    /// child's process group killed if it may still run.
    pub(super) fn end_cgi(&mut self, end: End, cx: &mut Ctx) {
        let Some(mut run) = self.cgi.take() else {
            return;
        };
        if let Some(p) = run.pipes.as_mut() {
            deregister(p, cx);
        }
        run.release(cx.pools);
        self.bytes_in += run.bytes_in;
        self.bytes_out += run.bytes_out;
        self.requests += 1;
        let route = Some(run.route);
        let status = run.translator.status();
        let us = run.started_at.elapsed().as_micros() as u64;
        cx.counters.http_request(
            &self.listener.http,
            route_stats(&self.pool, route),
            status,
            Some(us),
        );
        self.record(
            log::Line {
                status,
                source: Source::Cgi,
                range: None,
                bytes: (run.bytes_in, run.bytes_out),
                ex: None,
                route,
                end,
            },
            cx,
        );
        self.input.fwd = self.input.fed;
        self.input.settle(cx.pools);
        self.idle_since = cx.now;
    }
}

impl CgiRun {
    /// The response is complete and written, and the body is read to its end.
    fn finished(&self) -> bool {
        self.output_done
            && self.translator.is_finished()
            && self.to_at == self.to_len
            && matches!(self.body, ReqBody::Done)
    }
}

/// Why a CGI exchange cannot go on.
enum Failure {
    /// The client's socket failed.
    Client,
    /// The script's output is not a response (or ended early).
    Script(quill_core::cgi::translate::Error),
}

/// Starts the script (its environment is in `run.pending`) and registers its pipes; Err: 500
/// when the pipes cannot be made or registered.
fn start_child(run: &mut CgiRun, cx: &mut Ctx) -> Result<(), u16> {
    let Some(p) = run.pending.take() else {
        return Ok(());
    };
    let mut pipes = match cgi::start(p.program, p.dir, p.env) {
        Ok(pipes) => pipes,
        Err(e) => {
            tracing::warn!("cgi: {}: cannot make pipes: {e}", run.name);
            spawn::release_unstarted();
            return Err(500);
        }
    };
    run.started_ms = cx.now;
    let token = cx.server_token;
    let registered = (|| -> io::Result<()> {
        if let Some(s) = pipes.stdin.as_mut() {
            cx.registry.register(s, token, Interest::WRITABLE)?;
        }
        if let Some(s) = pipes.stdout.as_mut() {
            cx.registry.register(s, token, Interest::READABLE)?;
        }
        if let Some(s) = pipes.stderr.as_mut() {
            cx.registry.register(s, token, Interest::READABLE)?;
        }
        Ok(())
    })();
    if matches!(run.body, ReqBody::Done) {
        // No body: the script reads EOF at once.
        pipes.stdin = None;
    }
    run.pipes = Some(pipes);
    if let Err(e) = registered {
        tracing::warn!("cgi: {}: cannot register pipes: {e}", run.name);
        return Err(500);
    }
    Ok(())
}

/// Decodes chunked body bytes from the client input into the body's buffer (413 beyond its
/// bound, 400 when malformed); once the body is in, it becomes the buffer stdin is written from
/// and its length the script's `CONTENT_LENGTH`.
fn collect(run: &mut CgiRun, input: &mut super::input::Input) -> Result<bool, u16> {
    let ReqBody::Collecting(body, data, max) = &mut run.body else {
        return Ok(false);
    };
    let bytes = input.unparsed();
    let mut at = 0;
    while at < bytes.len() && !body.is_done() {
        // The payload of a chunk at once, its framing byte by byte.
        let step = match body.data_left() {
            Some(left) => usize::try_from(left)
                .unwrap_or(usize::MAX)
                .min(bytes.len() - at),
            None => 1,
        };
        let fed = body.feed(&bytes[at..at + step]).map_err(|_| 400u16)?;
        if fed.payload > 0 {
            data.extend_from_slice(&bytes[at..at + fed.used]);
        }
        at += fed.used;
        if data.len() as u64 > *max {
            return Err(413);
        }
    }
    run.bytes_in += at as u64;
    input.fed += at as u32;
    input.fwd = input.fed;
    if body.is_done() {
        let data = std::mem::take(data);
        if let Some(p) = run.pending.as_mut() {
            p.env.push((
                b"CONTENT_LENGTH".to_vec(),
                data.len().to_string().into_bytes(),
            ));
        }
        run.body = ReqBody::Buffered(data, 0);
    }
    Ok(at > 0)
}

/// Writes request body bytes to the script's stdin until it would block: a `Content-Length`
/// body's from the client input, a collected one's from its buffer. A script that closed its
/// stdin (or exited) has the rest of a `Content-Length` body read and dropped; stdin is closed
/// once the body is all written.
fn body_to_stdin(run: &mut CgiRun, input: &mut super::input::Input) -> bool {
    let Some(pipes) = run.pipes.as_mut() else {
        return false;
    };
    let mut moved = false;
    loop {
        let (bytes, left): (&[u8], u64) = match &run.body {
            ReqBody::Length(left) => {
                let b = input.unparsed();
                let n = usize::try_from(*left).unwrap_or(usize::MAX).min(b.len());
                (&b[..n], *left)
            }
            ReqBody::Buffered(data, at) => (&data[*at..], (data.len() - at) as u64),
            _ => return moved,
        };
        if left == 0 {
            run.body = ReqBody::Done;
            pipes.stdin = None;
            return true;
        }
        if bytes.is_empty() {
            return moved;
        }
        let wrote = match pipes.stdin.as_mut() {
            // Nobody reads it any more: dropped.
            None => bytes.len(),
            Some(stdin) => match stdin.write(bytes) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return moved,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    pipes.stdin = None;
                    continue;
                }
            },
        };
        moved = true;
        match &mut run.body {
            ReqBody::Length(left) => {
                *left -= wrote as u64;
                input.fed += wrote as u32;
                input.fwd = input.fed;
                run.bytes_in += wrote as u64;
            }
            ReqBody::Buffered(_, at) => *at += wrote,
            _ => {}
        }
    }
}

/// Reads what the script wrote to stderr and logs it line by line ([`STDERR_LINES`] lines of
/// at most [`STDERR_LINE_MAX`] bytes per request; the rest is read and dropped, so that a
/// script never blocks on it).
fn drain_stderr(run: &mut CgiRun) -> bool {
    let Some(pipes) = run.pipes.as_mut() else {
        return false;
    };
    let mut moved = false;
    let mut buf = [0u8; 4096];
    for _ in 0..64 {
        let Some(stderr) = pipes.stderr.as_mut() else {
            break;
        };
        let n = match stderr.read(&mut buf) {
            Ok(0) => {
                pipes.stderr = None;
                flush_line(&run.name, &mut run.stderr_line, &mut run.stderr_lines);
                return true;
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(_) => {
                pipes.stderr = None;
                return true;
            }
        };
        moved = true;
        for piece in buf[..n].split_inclusive(|&b| b == b'\n') {
            let room = STDERR_LINE_MAX.saturating_sub(run.stderr_line.len());
            let text = piece.strip_suffix(b"\n").unwrap_or(piece);
            run.stderr_line
                .extend_from_slice(&text[..text.len().min(room)]);
            if piece.ends_with(b"\n") {
                flush_line(&run.name, &mut run.stderr_line, &mut run.stderr_lines);
            }
        }
    }
    moved
}

/// Logs one stderr line (if the request's allowance is not spent) and empties it.
fn flush_line(name: &str, line: &mut Vec<u8>, logged: &mut u32) {
    if line.is_empty() {
        return;
    }
    if *logged < STDERR_LINES {
        let text = String::from_utf8_lossy(line);
        tracing::warn!("cgi {name}: {}", text.escape_debug());
    } else if *logged == STDERR_LINES {
        tracing::warn!("cgi {name}: more stderr lines, not logged");
    }
    *logged = logged.saturating_add(1);
    line.clear();
}

/// Moves the script's output to the client until one of them would block: stdout read into one
/// buffer, translated into the other, written to the client. At stdout's EOF the translator ends
/// the response (Err when the output was not a whole one).
fn stdout_to_client(
    run: &mut CgiRun,
    client: &crate::net::Stream,
    pools: &mut Pools,
) -> Result<bool, Failure> {
    let Some(pipes) = run.pipes.as_mut() else {
        return Ok(false);
    };
    let from = run.from_script.get_or_insert_with(|| pools.buffer());
    let to = run.to_client.get_or_insert_with(|| pools.buffer());
    let mut moved = false;
    for _ in 0..64 {
        if run.to_at < run.to_len {
            match client.write(&to[run.to_at..run.to_len]) {
                Ok(n) => {
                    run.to_at += n;
                    run.bytes_out += n as u64;
                    moved = true;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(moved),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Err(Failure::Client),
            }
        }
        (run.to_at, run.to_len) = (0, 0);
        if run.output_done {
            return Ok(moved);
        }
        if run.from_at < run.from_len {
            let (used, wrote) = run
                .translator
                .feed(&from[run.from_at..run.from_len], &mut to[..])
                .map_err(Failure::Script)?;
            run.from_at += used;
            run.to_len = wrote;
            moved |= used > 0 || wrote > 0;
            continue;
        }
        (run.from_at, run.from_len) = (0, 0);
        let Some(stdout) = pipes.stdout.as_mut() else {
            // EOF was read: the response's end.
            run.to_len = run
                .translator
                .finish(&mut to[..])
                .map_err(Failure::Script)?;
            run.output_done = run.translator.is_finished();
            moved = true;
            continue;
        };
        match stdout.read(&mut from[..]) {
            Ok(0) => pipes.stdout = None,
            Ok(n) => run.from_len = n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(moved),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => pipes.stdout = None,
        }
        moved = true;
    }
    Ok(moved)
}

/// Takes the pipes out of the worker's event loop (they are closed with them anyway).
fn deregister(pipes: &mut Pipes, cx: &mut Ctx) {
    if let Some(s) = pipes.stdin.as_mut() {
        let _ = cx.registry.deregister(s);
    }
    if let Some(s) = pipes.stdout.as_mut() {
        let _ = cx.registry.deregister(s);
    }
    if let Some(s) = pipes.stderr.as_mut() {
        let _ = cx.registry.deregister(s);
    }
}

impl HttpSession {
    /// The CGI exchange's deadline passed: a script still running after `timeout` is killed
    /// (504 if the client had nothing yet, else the response is cut); a client that took
    /// nothing of a finished script's response for `body_timeout` is cut.
    pub(super) fn cgi_timed_out(&mut self, cx: &mut Ctx) -> Step {
        let Some(run) = self.cgi.as_ref() else {
            return self.wait();
        };
        if run.output_done {
            return self.cgi_close(End::IdleTimeout, cx);
        }
        tracing::warn!(
            "cgi {}: still running after {:?}: killed",
            run.name,
            run.root.action.timeout
        );
        self.cgi_fault(504, cx)
    }
}
