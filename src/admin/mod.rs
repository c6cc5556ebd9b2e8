//! The admin HTTP listener (`--admin ADDR`): `/metrics` (Prometheus text format), `/api/status`
//! (the status snapshot as JSON) and `/` (a live status page that polls `/api/status`).
//!
//! It lives off the data path: its own threads read the shared counters and pool snapshots
//! through `status::snapshot` and never talk to a worker. It serves one request per connection,
//! reads at most `http::MAX_HEAD` bytes of head within `HEAD_DEADLINE`, and handles at most
//! `MAX_CONNECTIONS` connections at once (more are answered 503 at once), so slow or hostile
//! clients cost a bounded number of threads for a bounded time. Bad input gets a 4xx, never a
//! panic.

mod http;
mod prometheus;

use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use crate::runtime::shared::Shared;
use crate::status;
use http::{ReadError, Request, Response};

/// Connections served at once; each has its own short-lived thread.
pub const MAX_CONNECTIONS: usize = 32;
/// How long a client has to send its whole request head.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// Bounds each write of a response (a client that does not read cannot hold a thread longer).
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// The connection threads only parse a head and render text: a small stack is plenty.
const STACK_SIZE: usize = 256 * 1024;

/// The status page: self-contained (inline CSS and script, no external resource).
const PAGE: &str = include_str!("page.html");
/// The page may run its own inline script and style and fetch from us, nothing else.
const PAGE_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'";

/// Starts serving on `socket` (already bound) on a thread of its own. The thread stops, leaving
/// the socket to its new owner, once the process has handed its sockets over (`--takeover`).
pub fn spawn(socket: Arc<TcpListener>, shared: Arc<Shared>) -> io::Result<()> {
    let local = socket.local_addr()?;
    socket.set_nonblocking(true)?;
    let poll = Poll::new()?;
    poll.registry().register(
        &mut SourceFd(&socket.as_raw_fd()),
        Token(0),
        Interest::READABLE,
    )?;
    thread::Builder::new()
        .name("quill-admin".into())
        .spawn(move || accept_loop(&socket, poll, &shared))?;
    tracing::info!("admin listener on http://{local}/ (/metrics, /api/status)");
    Ok(())
}

fn accept_loop(socket: &TcpListener, mut poll: Poll, shared: &Arc<Shared>) {
    let busy = Arc::new(AtomicUsize::new(0));
    let mut events = Events::with_capacity(4);
    loop {
        if shared.handed_over.load(Ordering::Relaxed) {
            return;
        }
        if let Err(e) = poll.poll(&mut events, Some(Duration::from_millis(500))) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::error!("admin listener: {e}");
                return;
            }
        }
        loop {
            match socket.accept() {
                // Accepted sockets do not inherit O_NONBLOCK: connection threads block, with timeouts.
                Ok((stream, _)) => dispatch(stream, shared, &busy),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if is_transient(&e) => {}
                Err(e) => {
                    // Out of descriptors, most likely: wait instead of spinning.
                    tracing::debug!("admin listener: accept failed: {e}");
                    thread::sleep(Duration::from_millis(100));
                    break;
                }
            }
        }
    }
}

fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
    )
}

/// Gives `stream` a thread of its own, or answers 503 when `MAX_CONNECTIONS` are being served.
fn dispatch(stream: TcpStream, shared: &Arc<Shared>, busy: &Arc<AtomicUsize>) {
    if busy.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
        busy.fetch_sub(1, Ordering::AcqRel);
        refuse(stream);
        return;
    }
    let slot = Slot(busy.clone());
    let shared = shared.clone();
    let started = thread::Builder::new()
        .name("quill-admin-conn".into())
        .stack_size(STACK_SIZE)
        .spawn(move || {
            let _slot = slot;
            serve(stream, &shared);
        });
    if let Err(e) = started {
        // The closure (stream and slot) was dropped: the connection is closed, the slot freed.
        tracing::warn!("admin listener: cannot start a connection thread: {e}");
    }
}

/// One of the `MAX_CONNECTIONS`, given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Answers 503 without waiting for anything: the accept thread must never block on a client.
fn refuse(mut stream: TcpStream) {
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let busy = Response::error(503).with_header("Retry-After", "1");
    let _ = busy.write_to(&mut stream, true);
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

/// Reads one request, answers it, closes.
fn serve(mut stream: TcpStream, shared: &Shared) {
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let _ = stream.set_nodelay(true);
    let (response, with_body) =
        match http::read_request(&mut stream, Instant::now() + HEAD_DEADLINE) {
            Ok(req) => (route(&req, shared), req.method != "HEAD"),
            Err(ReadError::Closed | ReadError::TimedOut { started: false }) => return,
            Err(ReadError::TimedOut { started: true }) => (Response::error(408), true),
            Err(ReadError::TooLarge) => (Response::error(431), true),
            Err(ReadError::Malformed) => (Response::error(400), true),
        };
    if response.write_to(&mut stream, with_body).is_ok() {
        http::linger_close(stream);
    }
}

/// The paths we serve; anything else is 404, whatever the method.
const ROUTES: [&str; 3] = ["/", "/metrics", "/api/status"];

/// Picks the answer for a request.
fn route(req: &Request, shared: &Shared) -> Response {
    if !ROUTES.contains(&req.path.as_str()) {
        return Response::error(404);
    }
    if req.method != "GET" && req.method != "HEAD" {
        return Response::error(405).with_header("Allow", "GET, HEAD");
    }
    match req.path.as_str() {
        "/metrics" => Response::ok(
            prometheus::CONTENT_TYPE,
            prometheus::render(&status::snapshot(shared)),
        ),
        "/api/status" => match serde_json::to_vec(&status::snapshot(shared)) {
            Ok(body) => Response::ok("application/json", body),
            Err(e) => {
                tracing::warn!("admin listener: cannot encode the status: {e}");
                Response::error(500)
            }
        },
        _ => Response::ok("text/html; charset=utf-8", PAGE)
            .with_header("Content-Security-Policy", PAGE_POLICY),
    }
}
