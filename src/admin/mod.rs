//! The admin HTTP listener (`--admin ADDR`): `/metrics` (Prometheus text format), `/api/status`
//! (the status snapshot as JSON) and `/` (a live status page that polls `/api/status`).
//!
//! It lives off the data path: one thread of its own (`server`, an event loop) reads the shared
//! counters and pool snapshots through `status::snapshot` and never talks to a worker. It serves
//! one request per connection; slow, idle or hostile clients cost a bounded slot for a bounded
//! time and never keep a prompt client waiting. Who may ask is checked before anything is
//! answered (`auth`): the `Host` must be an address or `localhost` (a DNS-rebinding page sends its
//! own name), and with `admin_token_file` every request must carry the token. Bad input gets a
//! 4xx, never a panic.

mod auth;
mod http;
mod prometheus;
mod server;

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;

use crate::state::shared::Shared;
use crate::status;
pub(crate) use auth::Token;
use http::{Request, Response};

/// The status page: self-contained (inline CSS and script, no external resource).
const PAGE: &str = include_str!("page.html");
/// The page may run its own inline script and style and fetch from us, nothing else.
const PAGE_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'";

/// Starts serving on `socket` (already bound) on a thread of its own; with `token`, every
/// request must carry it. The thread stops, leaving the socket to its new owner, once the process
/// has handed its sockets over (`--takeover`).
pub(crate) fn spawn(
    socket: Arc<TcpListener>,
    shared: Arc<Shared>,
    token: Option<Token>,
) -> io::Result<()> {
    let local = socket.local_addr()?;
    let token_path = token.as_ref().map(|t| t.path.clone());
    let stop = {
        let shared = shared.clone();
        move || shared.handed_over.load(Ordering::Relaxed)
    };
    let mut gate = Gate::new(shared.clone(), token);
    let server = server::Server::new(socket, move |req: &Request| gate.answer(req))?;
    thread::Builder::new()
        .name("quill-admin".into())
        .spawn(move || server.run(stop))?;
    tracing::info!("admin listener on http://{local}/ (/metrics, /api/status)");
    if !local.ip().to_canonical().is_loopback() {
        warn_exposed(local, token_path.as_deref());
    }
    Ok(())
}

/// Says that the admin listener is reachable from other hosts, and what protects it.
fn warn_exposed(local: SocketAddr, token: Option<&Path>) {
    match token {
        None => tracing::warn!(
            "admin listener {local} is reachable beyond this host and has no authentication: \
             anyone who can reach it can read the status and metrics (listeners, servers, \
             counters); set admin_token_file to require a token, or bind it to 127.0.0.1"
        ),
        Some(path) => tracing::warn!(
            "admin listener {local} is reachable beyond this host; the token of admin_token_file \
             ({}) protects it, but plain HTTP carries it unencrypted: expose it only on a \
             trusted network",
            path.display()
        ),
    }
}

/// Checks who asks, then routes; re-reads the token file when the process reloads.
struct Gate {
    shared: Arc<Shared>,
    token: Option<Token>,
    /// `Shared::log_generation` when the token was read: every reload (SIGHUP, `reload`) bumps it.
    generation: u64,
}

impl Gate {
    fn new(shared: Arc<Shared>, token: Option<Token>) -> Gate {
        let generation = shared.log_generation.load(Ordering::Relaxed);
        Gate {
            shared,
            token,
            generation,
        }
    }

    fn answer(&mut self, req: &Request) -> Response {
        self.reread_token();
        match self.refusal(req) {
            Some(refused) => refused,
            None => route(req, &self.shared),
        }
    }

    /// Why `req` may not be answered, if it may not. The right token admits any `Host` (a
    /// rebinding page cannot know it); without it, a foreign `Host` is refused first, so that such
    /// a page never makes the browser prompt for credentials.
    fn refusal(&self, req: &Request) -> Option<Response> {
        let admitted = self
            .token
            .as_ref()
            .map(|t| t.admits(req.authorization.as_deref()));
        if admitted == Some(true) {
            return None;
        }
        if req.host.as_deref().is_some_and(|h| !auth::is_local_host(h)) {
            return Some(Response::error_because(
                421,
                "the admin listener answers only for an IP address or localhost (Host header)",
            ));
        }
        if admitted == Some(false) {
            return Some(
                Response::error_because(401, "a token is required (Bearer, or the Basic password)")
                    .with_header("WWW-Authenticate", "Basic realm=\"quill\""),
            );
        }
        None
    }

    fn reread_token(&mut self) {
        let generation = self.shared.log_generation.load(Ordering::Relaxed);
        if generation == self.generation {
            return;
        }
        self.generation = generation;
        let Some(token) = &self.token else {
            return;
        };
        match token.reload() {
            Ok(fresh) => self.token = Some(fresh),
            Err(e) => tracing::warn!("admin listener: {e}; keeping the token read before"),
        }
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
