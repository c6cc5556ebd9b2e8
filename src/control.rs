//! The control socket: Pen's framing (a client connects, sends one command line, reads the reply
//! until the server closes), so `penctl`, `nc` and `quill ctl` all work. Off the data path: one
//! thread runs a mio loop over the listening socket and every client (nonblocking, each with a
//! deadline), so idle or dripping clients cannot starve a legitimate one; commands that may block
//! (`include`, `write`, `reload`, `status`, `log FILE`, `web_stats FILE`, the takeover handshake)
//! run on a short-lived thread of their own, at most `MAX_BLOCKING` at once.
//!
//! Safety rules: the Unix socket is created mode 0600 and only root and Quill's own user may use
//! it (SO_PEERCRED); it may do everything. TCP is bound only to loopback unless `control_acl` is
//! set, and then the ACL is checked for every client; a TCP client has `control_level` (read,
//! operate or admin; default operate) and, with `control_token_file`, must start its line with
//! `auth TOKEN`. Whatever the level, commands that name files, paths or local sockets, move a
//! listener, hand sockets over or exit are refused over TCP. Every reply is followed by an
//! orderly close (write side shut, the client's leftover bytes read and discarded) so that it is
//! never lost to a reset; a descriptor is kept in reserve so EMFILE never leaves it unanswered.
//!
//! Takeover: a new process sends `takeover` over the Unix socket and receives every listening
//! socket (and this control socket) by SCM_RIGHTS; the handshake itself is in `takeover`.

use std::io::{self, Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use serde_json::{json, Value};

use crate::acl::AclId;
use crate::addr::ListenAddr;
use crate::command::{self, Action, Command, Needs, Request as Line, Setting};
use crate::config::ControlLevel;
use crate::state::controller::Controller;
use crate::state::shared::{Report, Request};
use crate::state::Msg;
use crate::status;
use crate::systemd::Inherited;
use crate::takeover;

/// Where `quill ctl` looks when no `--socket` is given (and `QUILL_SOCKET` is unset).
pub(crate) const DEFAULT_SOCKET: &str = "/run/quill/quill.sock";
/// Longest command line accepted.
const MAX_LINE: usize = 4096;
/// How long a client may take to send its line, and to read the reply.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Control connections held at once; at the cap, the one that has waited longest without a
/// complete line is closed to make room, so a client that sends its line at once is served.
const MAX_CONNS: usize = 1024;
/// Blocking commands running at once (each on a thread); more are answered "busy".
const MAX_BLOCKING: usize = 4;
/// After a reply, how long and how much of what the client still sends is read and discarded.
const DRAIN_TIME: Duration = Duration::from_secs(1);
const DRAIN_BYTES: usize = 1 << 20;

/// The control listening socket.
pub(crate) enum ControlSocket {
    Unix(UnixListener, PathBuf),
    Tcp(TcpListener),
}

impl ControlSocket {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            ControlSocket::Unix(l, _) => l.as_fd(),
            ControlSocket::Tcp(l) => l.as_fd(),
        }
    }
}

/// A running control thread.
pub(crate) struct ControlHandle {
    path: Option<PathBuf>,
}

impl ControlHandle {
    /// The socket file, removed at exit unless a new process took it over.
    pub(crate) fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
}

/// Opens the control socket at `addr`, or takes the inherited one named `control` when it is a
/// listening socket at `addr` (one elsewhere is closed and `addr` bound anew: the control socket
/// is always where the configuration says). A file at a Unix path is replaced only when it is a
/// stale socket.
pub(crate) fn open(addr: &ListenAddr, inherited: &mut Vec<Inherited>) -> io::Result<ControlSocket> {
    if let Some(fd) =
        crate::systemd::take_named(inherited, takeover::CONTROL_NAME, addr, "control socket")
    {
        return Ok(match addr {
            ListenAddr::Unix(p) => ControlSocket::Unix(UnixListener::from(fd), p.clone()),
            ListenAddr::Tcp(_) => ControlSocket::Tcp(TcpListener::from(fd)),
        });
    }
    match addr {
        ListenAddr::Tcp(a) => Ok(ControlSocket::Tcp(TcpListener::bind(a)?)),
        ListenAddr::Unix(path) => {
            crate::listener::remove_stale_socket(path).map_err(|e| {
                if e.kind() == io::ErrorKind::AddrInUse {
                    io::Error::new(
                        io::ErrorKind::AddrInUse,
                        "a running process serves it (use --takeover to replace it)",
                    )
                } else {
                    e
                }
            })?;
            // Created 0600 from the start: no window where others could connect.
            let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
            let bound = UnixListener::bind(path);
            rustix::process::umask(old);
            Ok(ControlSocket::Unix(bound?, path.clone()))
        }
    }
}

/// Starts the control thread. With `control_token_file` set, the token is read now: an empty or
/// unreadable file is an error here, before anything is served.
pub(crate) fn spawn(
    socket: ControlSocket,
    controller: Arc<Controller>,
) -> io::Result<ControlHandle> {
    let path = match &socket {
        ControlSocket::Unix(_, p) => Some(p.clone()),
        ControlSocket::Tcp(_) => None,
    };
    match &socket {
        ControlSocket::Unix(l, _) => l.set_nonblocking(true)?,
        ControlSocket::Tcp(l) => l.set_nonblocking(true)?,
    }
    let mut token = TokenFile::default();
    if let Some(file) = controller.config().global.control_token_file.clone() {
        token.load(&file).map_err(io::Error::other)?;
    }
    let poll = Poll::new()?;
    poll.registry().register(
        &mut SourceFd(&socket.fd().as_raw_fd()),
        LISTENING,
        Interest::READABLE,
    )?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
    let ctl = Arc::new(Control {
        socket,
        controller,
        waker,
        blocking: AtomicUsize::new(0),
    });
    let mut event_loop = Loop {
        ctl,
        poll,
        clients: Vec::new(),
        free: Vec::new(),
        count: 0,
        reserve: open_reserve(),
        reserve_held: false,
        accept_again: None,
        token,
        euid: rustix::process::geteuid().as_raw(),
    };
    thread::Builder::new()
        .name("quill-control".into())
        .spawn(move || event_loop.run())?;
    Ok(ControlHandle { path })
}

const LISTENING: Token = Token(0);
/// Wakes the loop after a takeover, so it lets go of the socket at once.
const WAKE: Token = Token(1);
/// Client tokens start here.
const FIRST_CLIENT: usize = 2;

/// What the event loop and the threads running blocking commands share.
struct Control {
    socket: ControlSocket,
    controller: Arc<Controller>,
    waker: Arc<Waker>,
    /// Blocking commands running now, each on a thread of its own (at most `MAX_BLOCKING`).
    blocking: AtomicUsize,
}

/// One control connection on the event loop.
struct Client {
    conn: Conn,
    state: State,
    accepted: Instant,
    /// When the current state ends: no complete line, reply not taken, drain over.
    deadline: Instant,
    /// Accepted with the reserved descriptor: give it back when this one closes.
    reserve: bool,
    /// The reply to `exit` is out: the loop tells the main thread now.
    send_exit: bool,
}

enum State {
    /// Waiting for the command line; what came so far.
    Reading(Vec<u8>),
    /// Sending the reply.
    Writing {
        out: Vec<u8>,
        sent: usize,
        exit: bool,
    },
    /// Reply sent and write side shut: reading and discarding what the client still sends, so
    /// closing does not reset the connection (and lose the reply) while its bytes are unread.
    Draining(usize),
}

/// What answering a line asks the loop to do with the connection.
enum Next {
    Keep,
    /// A blocking command: run it on a thread of its own, which then owns the connection.
    Detach(Line),
}

/// The bearer token TCP clients must present (`control_token_file`), read at start and again
/// whenever the file (or the configured path, after a reload) changes.
#[derive(Default)]
struct TokenFile {
    path: Option<PathBuf>,
    stamp: Option<(u64, Option<std::time::SystemTime>)>,
    token: Option<Vec<u8>>,
}

impl TokenFile {
    fn load(&mut self, path: &Path) -> Result<(), String> {
        let what =
            |e: &dyn std::fmt::Display| format!("control_token_file {}: {e}", path.display());
        let meta = std::fs::metadata(path).map_err(|e| what(&e))?;
        let stamp = Some((meta.len(), meta.modified().ok()));
        if self.path.as_deref() == Some(path) && self.stamp == stamp && self.token.is_some() {
            return Ok(());
        }
        self.path = Some(path.to_path_buf());
        self.stamp = stamp;
        self.token = None;
        let text = std::fs::read_to_string(path).map_err(|e| what(&e))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(what(&"the file is empty"));
        }
        if token.contains(char::is_whitespace) {
            return Err(what(&"the token contains whitespace"));
        }
        self.token = Some(token.as_bytes().to_vec());
        Ok(())
    }

    /// Whether `given` is the token the configuration asks for now; true when none is asked.
    /// A token file that became unreadable or empty denies everyone (and says why in the log).
    fn permits(&mut self, configured: Option<&Path>, given: Option<&str>) -> bool {
        let Some(path) = configured else {
            return true;
        };
        if let Err(e) = self.load(path) {
            tracing::error!("{e}; denying TCP control clients until it is fixed");
            return false;
        }
        match (&self.token, given) {
            (Some(token), Some(given)) => same_secret(token, given.as_bytes()),
            _ => false,
        }
    }
}

/// Compares two secrets in a time that depends on their lengths only, not on where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

/// Splits a leading `auth TOKEN ` from a control line: (token, the rest).
fn split_auth(line: &str) -> (Option<&str>, &str) {
    let trimmed = line.trim_start();
    match trimmed.strip_prefix("auth") {
        Some(rest) if rest.starts_with(char::is_whitespace) => {
            let rest = rest.trim_start();
            match rest.split_once(char::is_whitespace) {
                Some((token, cmd)) => (Some(token), cmd),
                None => (Some(rest), ""),
            }
        }
        _ => (None, line),
    }
}

/// A descriptor kept open so that a full descriptor table (EMFILE) never leaves the control
/// socket unanswered: it is closed to accept one client, and opened again once that one is gone.
fn open_reserve() -> Option<OwnedFd> {
    std::fs::File::open("/dev/null").ok().map(OwnedFd::from)
}

/// The control thread: one mio loop over the listening socket and every client.
struct Loop {
    ctl: Arc<Control>,
    poll: Poll,
    /// Clients by token (index + `FIRST_CLIENT`); `free` lists the empty slots.
    clients: Vec<Option<Client>>,
    free: Vec<usize>,
    count: usize,
    reserve: Option<OwnedFd>,
    /// A client accepted with the reserved descriptor is still open.
    reserve_held: bool,
    /// When to try accepting again after an accept error (the listener is edge-triggered).
    accept_again: Option<Instant>,
    token: TokenFile,
    euid: u32,
}

impl Loop {
    fn run(&mut self) {
        let mut events = Events::with_capacity(256);
        let shared = self.ctl.controller.shared().clone();
        loop {
            if shared.handed_over.load(Ordering::Relaxed) {
                // The new process owns the socket now; closing our copy leaves it working.
                return;
            }
            if let Err(e) = self.poll.poll(&mut events, Some(self.timeout())) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!("control socket: {e}");
                    return;
                }
            }
            for event in events.iter() {
                match event.token() {
                    LISTENING => self.accept_all(),
                    WAKE => {}
                    Token(t) => self.step(t - FIRST_CLIENT),
                }
            }
            let now = Instant::now();
            if self.accept_again.is_some_and(|t| t <= now) {
                self.accept_again = None;
                self.accept_all();
            }
            self.expire(now);
            if self.reserve.is_none() && !self.reserve_held {
                self.reserve = open_reserve();
            }
        }
    }

    /// Until the next deadline, at most 500 ms (the handed-over flag is checked that often).
    fn timeout(&self) -> Duration {
        let now = Instant::now();
        let mut next = now + Duration::from_millis(500);
        if let Some(t) = self.accept_again {
            next = next.min(t);
        }
        for c in self.clients.iter().flatten() {
            next = next.min(c.deadline);
        }
        next.saturating_duration_since(now)
    }

    fn accept_all(&mut self) {
        let shared = self.ctl.controller.shared().clone();
        while !shared.handed_over.load(Ordering::Relaxed) {
            match self.accept() {
                Ok(conn) => self.admit(conn, false),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    let Some(reserve) = self.reserve.take() else {
                        tracing::warn!("control socket accept: {e}; trying again in 100 ms");
                        self.accept_again = Some(Instant::now() + Duration::from_millis(100));
                        return;
                    };
                    drop(reserve);
                    match self.accept() {
                        Ok(conn) => {
                            tracing::warn!(
                                "control socket accept: {e}; serving one client with the reserved descriptor"
                            );
                            self.reserve_held = true;
                            self.admit(conn, true);
                        }
                        Err(e2) => {
                            self.reserve = open_reserve();
                            if e2.kind() == io::ErrorKind::WouldBlock {
                                return;
                            }
                            tracing::warn!("control socket accept: {e2}; trying again in 100 ms");
                            self.accept_again = Some(Instant::now() + Duration::from_millis(100));
                            return;
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!("control socket accept: {e}; trying again in 100 ms");
                    self.accept_again = Some(Instant::now() + Duration::from_millis(100));
                    return;
                }
            }
        }
    }

    fn accept(&self) -> io::Result<Conn> {
        let conn = match &self.ctl.socket {
            ControlSocket::Unix(l, _) => l.accept().map(|(s, _)| Conn::Unix(s))?,
            ControlSocket::Tcp(l) => l.accept().map(|(s, a)| Conn::Tcp(s, a.ip()))?,
        };
        conn.set_nonblocking(true)?;
        Ok(conn)
    }

    /// Takes a new client on the loop: checks who it is, then waits for its line. At the cap,
    /// the client that has waited longest without sending a complete line makes room.
    fn admit(&mut self, conn: Conn, reserve: bool) {
        if self.count >= MAX_CONNS {
            self.evict_oldest();
        }
        let now = Instant::now();
        let refusal = self.refusal(&conn);
        let mut client = Client {
            conn,
            state: State::Reading(Vec::new()),
            accepted: now,
            deadline: now + IO_TIMEOUT,
            reserve,
            send_exit: false,
        };
        if let Some(msg) = refusal {
            client.reply(msg.into_bytes(), false);
        }
        let slot = match self.free.pop() {
            Some(i) => i,
            None => {
                self.clients.push(None);
                self.clients.len() - 1
            }
        };
        let fd = client.conn.raw_fd();
        if let Err(e) = self.poll.registry().register(
            &mut SourceFd(&fd),
            Token(slot + FIRST_CLIENT),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::warn!("control socket: cannot watch a client: {e}");
            self.free.push(slot);
            if reserve {
                self.reserve_held = false;
            }
            return;
        }
        self.clients[slot] = Some(client);
        self.count += 1;
        self.step(slot);
    }

    /// Why a new client may not use this socket at all, as its reply line; None when it may.
    fn refusal(&self, conn: &Conn) -> Option<String> {
        match conn {
            Conn::Tcp(_, ip) => {
                if tcp_client_allowed(*ip, &self.ctl.controller) {
                    return None;
                }
                tracing::info!("control client {ip} denied by control_acl");
                Some("error: denied\n".into())
            }
            Conn::Unix(s) => {
                let uid = match rustix::net::sockopt::socket_peercred(s) {
                    Ok(cred) => cred.uid.as_raw(),
                    Err(e) => {
                        tracing::warn!("control client: cannot tell who it is ({e}); denied");
                        return Some("error: denied (peer credentials unavailable)\n".into());
                    }
                };
                if uid == 0 || uid == self.euid {
                    return None;
                }
                tracing::warn!(
                    "control client with uid {uid} denied: only root and uid {} may use the control socket",
                    self.euid
                );
                Some(format!(
                    "error: denied: uid {uid} may not use this control socket (only root and uid {})\n",
                    self.euid
                ))
            }
        }
    }

    fn evict_oldest(&mut self) {
        let oldest = |reading_only: bool| {
            self.clients
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.as_ref().map(|c| (i, c)))
                .filter(|(_, c)| !reading_only || matches!(c.state, State::Reading(_)))
                .min_by_key(|(_, c)| c.accepted)
                .map(|(i, _)| i)
        };
        if let Some(i) = oldest(true).or_else(|| oldest(false)) {
            tracing::warn!(
                "control socket: {MAX_CONNS} clients connected; closing the one waiting longest"
            );
            self.close(i);
        }
    }

    /// Moves client `i` on as far as its socket allows.
    fn step(&mut self, i: usize) {
        let (open, exit) = match self.clients.get_mut(i).and_then(Option::as_mut) {
            Some(client) => (client.progress(), std::mem::take(&mut client.send_exit)),
            None => return,
        };
        if exit {
            self.ctl.controller.send(Msg::Exit);
        }
        if !open {
            self.close(i);
            return;
        }
        // A complete line: answer it.
        let line = match self.clients.get_mut(i).and_then(Option::as_mut) {
            Some(Client {
                state: State::Reading(buf),
                ..
            }) if line_complete(buf) => std::mem::take(buf),
            _ => return,
        };
        match self.answer(i, line) {
            Next::Keep => self.step(i),
            Next::Detach(req) => self.detach(i, req),
        }
    }

    /// Answers a complete (or ended, or overlong) command line from client `i`.
    fn answer(&mut self, i: usize, line: Vec<u8>) -> Next {
        let Some(client) = self.clients.get_mut(i).and_then(Option::as_mut) else {
            return Next::Keep;
        };
        let local = matches!(client.conn, Conn::Unix(_));
        let line = match parse_line(line) {
            Ok(l) => l,
            Err(e) => {
                client.reply(format!("error: {e}\n").into_bytes(), false);
                return Next::Keep;
            }
        };
        let (token, line) = split_auth(&line);
        if !local {
            let config = self.ctl.controller.config();
            if !self
                .token
                .permits(config.global.control_token_file.as_deref(), token)
            {
                if let Conn::Tcp(_, ip) = &client.conn {
                    tracing::info!("control client {ip} denied: missing or wrong token");
                }
                client.reply(b"error: denied\n".to_vec(), false);
                return Next::Keep;
            }
        }
        let request = command::parse_request(line);
        let reply = match request {
            // A line that does not parse still asked for JSON if its first word says so.
            Err(e) => Reply::Error(e.0, line.split_whitespace().next() == Some("json")),
            Ok(req) => {
                let level = if local {
                    ControlLevel::Admin
                } else {
                    self.ctl.controller.config().global.control_level
                };
                if let Some(refused) = refuse(&req, line, local, level) {
                    let who = match &client.conn {
                        Conn::Tcp(_, ip) => ip.to_string(),
                        Conn::Unix(_) => "on the Unix socket".to_string(),
                    };
                    tracing::info!(
                        "control client {who} refused: {}",
                        refused.render().trim_end()
                    );
                    refused
                } else if is_blocking(&req.action) {
                    return Next::Detach(req);
                } else {
                    let reply = execute(&req, &self.ctl.controller);
                    let exit = req.action == Action::Exit && matches!(reply, Reply::Text(..));
                    client.reply(reply.render().into_bytes(), exit);
                    return Next::Keep;
                }
            }
        };
        client.reply(reply.render().into_bytes(), false);
        Next::Keep
    }

    /// Hands client `i` and its blocking command to a thread of its own, or answers busy.
    fn detach(&mut self, i: usize, req: Line) {
        let ctl = self.ctl.clone();
        if ctl.blocking.fetch_add(1, Ordering::AcqRel) >= MAX_BLOCKING {
            ctl.blocking.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!("control socket: {MAX_BLOCKING} blocking commands running; busy");
            if let Some(client) = self.clients.get_mut(i).and_then(Option::as_mut) {
                client.reply(b"error: busy\n".to_vec(), false);
            }
            self.step(i);
            return;
        }
        let Some(client) = self.remove(i) else {
            ctl.blocking.fetch_sub(1, Ordering::AcqRel);
            return;
        };
        let reserve = client.reserve;
        let ctl2 = ctl.clone();
        let spawned = thread::Builder::new()
            .name("quill-control-cmd".into())
            .spawn(move || {
                if let Err(e) = run_blocking(client.conn, &req, &ctl2) {
                    tracing::debug!("control client: {e}");
                }
                ctl2.blocking.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            ctl.blocking.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!("control socket: cannot start a thread for a command: {e}");
        }
        // The thread owns the descriptor now; the reserve is opened again when one is free.
        if reserve {
            self.reserve_held = false;
        }
    }

    /// Deadlines: a client without a complete line is told so; one that does not take its reply,
    /// or is still sending after it, is closed.
    fn expire(&mut self, now: Instant) {
        for i in 0..self.clients.len() {
            let Some(client) = self.clients[i].as_mut() else {
                continue;
            };
            if client.deadline > now {
                continue;
            }
            if matches!(client.state, State::Reading(_)) {
                let msg = format!("error: no command line within {}s\n", IO_TIMEOUT.as_secs());
                client.reply(msg.into_bytes(), false);
                self.step(i);
            } else {
                self.close(i);
            }
        }
    }

    fn remove(&mut self, i: usize) -> Option<Client> {
        let client = self.clients.get_mut(i)?.take()?;
        let _ = self
            .poll
            .registry()
            .deregister(&mut SourceFd(&client.conn.raw_fd()));
        self.free.push(i);
        self.count -= 1;
        Some(client)
    }

    fn close(&mut self, i: usize) {
        if let Some(client) = self.remove(i) {
            if client.reserve {
                self.reserve_held = false;
            }
        }
    }
}

impl Client {
    /// Queues `out` as the reply (anything not yet read of the line is discarded later).
    fn reply(&mut self, out: Vec<u8>, exit: bool) {
        self.state = State::Writing { out, sent: 0, exit };
        self.deadline = Instant::now() + IO_TIMEOUT;
    }

    /// Reads, writes or drains as far as the socket allows without blocking; false once the
    /// connection is done with (or broken).
    fn progress(&mut self) -> bool {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match &mut self.state {
                State::Reading(line) => {
                    if line_complete(line) {
                        return true;
                    }
                    let room = (MAX_LINE + 1).saturating_sub(line.len()).min(buf.len());
                    match self.conn.stream().read(&mut buf[..room]) {
                        // The client ended its side: what came is the line.
                        Ok(0) => {
                            line.push(b'\n');
                            return true;
                        }
                        Ok(n) => line.extend_from_slice(&buf[..n]),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                        Err(_) => return false,
                    }
                }
                State::Writing { out, sent, exit } => {
                    if *sent == out.len() {
                        // `exit` is acted on once its reply is out: the process may be gone soon.
                        self.send_exit = *exit;
                        let _ = self.conn.shutdown_write();
                        self.state = State::Draining(0);
                        self.deadline = Instant::now() + DRAIN_TIME;
                        continue;
                    }
                    match self.conn.stream().write(&out[*sent..]) {
                        Ok(0) => return false,
                        Ok(n) => *sent += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                        Err(_) => return false,
                    }
                }
                State::Draining(discarded) => match self.conn.stream().read(&mut buf) {
                    Ok(0) => return false,
                    Ok(n) => {
                        *discarded += n;
                        if *discarded > DRAIN_BYTES {
                            return false;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                    Err(_) => return false,
                },
            }
        }
    }
}

/// Whether the line so far is complete: it has its newline, or is already too long.
fn line_complete(buf: &[u8]) -> bool {
    buf.len() > MAX_LINE || buf.contains(&b'\n')
}

/// The command line (without its end) from what a client sent: one command per connection, so
/// bytes after the first newline are ignored.
fn parse_line(mut buf: Vec<u8>) -> Result<String, String> {
    if let Some(end) = buf.iter().position(|&b| b == b'\n') {
        buf.truncate(end);
    }
    if buf.len() > MAX_LINE {
        return Err(format!("command line longer than {MAX_LINE} bytes"));
    }
    String::from_utf8(buf)
        .map(|s| s.trim_end_matches('\r').to_string())
        .map_err(|_| "command is not UTF-8".to_string())
}

/// The one-line refusal for a request this channel may not make; None when it may.
fn refuse(req: &Line, line: &str, local: bool, level: ControlLevel) -> Option<Reply> {
    let shown = line.trim();
    match req.action.needs() {
        Needs::UnixSocket if !local => Some(Reply::Error(
            format!(
                "'{shown}' needs the Unix control socket (it names a file or local socket, moves a listener, hands sockets over or exits)"
            ),
            req.json,
        )),
        Needs::Level(needed) if needed > level => Some(Reply::Error(
            format!(
                "'{shown}' needs control level {} (this connection has {})",
                needed.name(),
                level.name()
            ),
            req.json,
        )),
        _ => None,
    }
}

/// Commands that may wait on a file, a reload or another process: each runs on a thread of its
/// own, so the loop keeps answering everybody else.
fn is_blocking(action: &Action) -> bool {
    matches!(
        action,
        Action::Include(_)
            | Action::Write(_)
            | Action::Reload
            | Action::TlsReload(_)
            | Action::Takeover
            | Action::Status
            | Action::Set(Command::Log(Some(_)) | Command::WebStats(Some(_)))
    )
}

/// Runs a blocking command on its own thread: the reply, then the same orderly close as the loop.
fn run_blocking(conn: Conn, req: &Line, ctl: &Control) -> io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_timeouts(IO_TIMEOUT, IO_TIMEOUT)?;
    if let (Action::Takeover, Conn::Unix(s)) = (&req.action, &conn) {
        return takeover::hand_over(s, ctl.socket.fd(), &ctl.controller, &ctl.waker);
    }
    let mut conn = conn;
    let reply = execute(req, &ctl.controller);
    conn.stream().write_all(reply.render().as_bytes())?;
    conn.shutdown_write()?;
    // Read and discard what the client still sends, so the close does not reset it.
    conn.set_timeouts(DRAIN_TIME, IO_TIMEOUT)?;
    let deadline = Instant::now() + DRAIN_TIME;
    let mut buf = [0u8; 16 * 1024];
    let mut discarded = 0;
    while discarded <= DRAIN_BYTES && Instant::now() < deadline {
        match conn.stream().read(&mut buf) {
            Ok(0) => break,
            Ok(n) => discarded += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    Ok(())
}

enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream, IpAddr),
}

impl Conn {
    fn stream(&mut self) -> &mut dyn ReadWrite {
        match self {
            Conn::Unix(s) => s,
            Conn::Tcp(s, _) => s,
        }
    }

    fn raw_fd(&self) -> std::os::fd::RawFd {
        match self {
            Conn::Unix(s) => s.as_raw_fd(),
            Conn::Tcp(s, _) => s.as_raw_fd(),
        }
    }

    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Conn::Unix(s) => s.set_nonblocking(on),
            Conn::Tcp(s, _) => s.set_nonblocking(on),
        }
    }

    fn shutdown_write(&self) -> io::Result<()> {
        match self {
            Conn::Unix(s) => s.shutdown(std::net::Shutdown::Write),
            Conn::Tcp(s, _) => s.shutdown(std::net::Shutdown::Write),
        }
    }

    fn set_timeouts(&self, read: Duration, write: Duration) -> io::Result<()> {
        match self {
            Conn::Unix(s) => {
                s.set_read_timeout(Some(read))?;
                s.set_write_timeout(Some(write))
            }
            Conn::Tcp(s, _) => {
                s.set_read_timeout(Some(read))?;
                s.set_write_timeout(Some(write))
            }
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// Whether a TCP client may use the control socket: `control_acl` when set, else loopback only.
fn tcp_client_allowed(ip: IpAddr, controller: &Controller) -> bool {
    let config = controller.config();
    match config.global.control_acl {
        Some(n) => config.global.acls.permits(n, ip),
        None => ip.is_loopback(),
    }
}

/// A reply: text for people and penctl, or JSON for scripts.
enum Reply {
    Text(String, Value, bool),
    Error(String, bool),
}

impl Reply {
    fn render(&self) -> String {
        match self {
            Reply::Text(text, _, false) => text.clone(),
            Reply::Text(_, value, true) => format!("{value}\n"),
            Reply::Error(msg, false) => format!("error: {msg}\n"),
            Reply::Error(msg, true) => format!("{}\n", json!({ "error": msg })),
        }
    }
}

fn ok(json: bool, text: String, value: Value) -> Reply {
    Reply::Text(text, value, json)
}

fn execute(req: &Line, controller: &Controller) -> Reply {
    let json = req.json;
    let shared = controller.shared();
    let listener = req.listener.as_deref();
    if let Some(name) = req.pool.as_deref() {
        return execute_pool(req, name, controller);
    }
    match &req.action {
        Action::Set(cmd) => match controller.set(listener, cmd) {
            Ok(note) => {
                after_set(cmd, controller);
                ok(json, String::new(), json!({ "ok": true, "note": note }))
            }
            Err(e) => Reply::Error(e, json),
        },
        Action::Show(setting) => match show(*setting, listener, None, controller) {
            Ok((text, value)) => ok(json, format!("{text}\n"), value),
            Err(e) => Reply::Error(e, json),
        },
        Action::Servers => {
            let snap = status::snapshot(shared);
            let Some(l) = pick_listener(&snap, listener) else {
                return Reply::Error(listener_error(listener, &listener_names(&snap)), json);
            };
            let mut text = String::new();
            for s in &l.servers {
                text += &status::pen_server_line(s);
            }
            ok(
                json,
                text,
                serde_json::to_value(&l.servers).unwrap_or(Value::Null),
            )
        }
        Action::Status => {
            let snap = status::snapshot(shared);
            if let Err(e) = status::write_file(controller) {
                tracing::warn!("{e}");
            }
            let value = serde_json::to_value(&snap).unwrap_or(Value::Null);
            ok(json, status::pen_html(&snap), value)
        }
        Action::Recent(secs) => {
            let now = crate::clock::unix_time();
            let mut seen: Vec<(IpAddr, u64, u64)> = Vec::new();
            for report in shared.ask_all(Request::Report) {
                for (ip, t) in report.recent {
                    if now.saturating_sub(t) > *secs {
                        continue;
                    }
                    match seen.iter_mut().find(|(i, _, _)| *i == ip) {
                        Some(e) => {
                            e.1 += 1;
                            e.2 = e.2.max(t);
                        }
                        None => seen.push((ip, 1, t)),
                    }
                }
            }
            seen.sort_by_key(|e| std::cmp::Reverse(e.2));
            let text: String = seen
                .iter()
                .map(|(ip, n, t)| {
                    format!("{ip} connects {n} last {}s ago\n", now.saturating_sub(*t))
                })
                .collect();
            let value: Vec<Value> = seen
                .iter()
                .map(|(ip, n, t)| json!({ "client": ip.to_string(), "connects": n, "last": t }))
                .collect();
            ok(json, text, Value::Array(value))
        }
        Action::Listeners => {
            let snap = status::snapshot(shared);
            let text: String = snap
                .listeners
                .iter()
                .map(|l| {
                    format!(
                        "{} listen {} protocol {} mode {} servers {}\n",
                        l.name,
                        l.listen,
                        l.protocol,
                        l.mode,
                        l.servers.len()
                    )
                })
                .collect();
            let value: Vec<Value> = snap
                .listeners
                .iter()
                .map(|l| {
                    json!({ "name": l.name, "listen": l.listen, "protocol": l.protocol,
                        "mode": l.mode, "servers": l.servers.len() })
                })
                .collect();
            ok(json, text, Value::Array(value))
        }
        Action::Pools => {
            let snap = status::snapshot(shared);
            let text: String = snap
                .pools
                .iter()
                .map(|p| format!("{} mode {} servers {}\n", p.name, p.mode, p.servers.len()))
                .collect();
            let value: Vec<Value> = snap
                .pools
                .iter()
                .map(|p| json!({ "name": p.name, "mode": p.mode, "servers": p.servers.len() }))
                .collect();
            ok(json, text, Value::Array(value))
        }
        Action::Connections | Action::Connection(_) => {
            if let Some(n) = listener {
                if !shared.listeners.load().iter().any(|l| l.name == n) {
                    return Reply::Error(format!("no listener named '{n}'"), json);
                }
            }
            let mut sessions: Vec<_> = shared
                .ask_all(Request::Report)
                .into_iter()
                .flat_map(|r: Report| r.sessions)
                .filter(|s| listener.is_none_or(|n| s.listener == n))
                .collect();
            sessions.sort_by_key(|s| s.id);
            if let Action::Connection(n) = req.action {
                sessions.retain(|s| s.id == n);
                if sessions.is_empty() {
                    return Reply::Error(format!("no connection {n}"), json);
                }
            }
            let text: String = sessions
                .iter()
                .map(|s| {
                    format!(
                        "{} listener {} client {} server {} age {}s in {} out {} {}\n",
                        s.id,
                        s.listener,
                        s.client,
                        s.server.as_deref().unwrap_or("-"),
                        s.age_ms / 1000,
                        s.bytes_in,
                        s.bytes_out,
                        s.state
                    )
                })
                .collect();
            let value: Vec<Value> = sessions
                .iter()
                .map(|s| {
                    json!({ "id": s.id, "listener": s.listener, "client": s.client,
                        "server": s.server, "age_ms": s.age_ms, "bytes_in": s.bytes_in,
                        "bytes_out": s.bytes_out, "state": s.state })
                })
                .collect();
            ok(json, text, Value::Array(value))
        }
        Action::Close(n) => {
            let n = *n;
            if shared.ask_all(|tx| Request::Close(n, tx)).contains(&true) {
                ok(json, String::new(), json!({ "ok": true }))
            } else {
                Reply::Error(format!("no connection {n}"), json)
            }
        }
        Action::Pid => {
            let pid = std::process::id();
            ok(json, format!("{pid}\n"), json!({ "pid": pid }))
        }
        Action::Exit => {
            if !controller.config().global.allow_exit {
                return Reply::Error("exit is not allowed (start Quill with -X)".into(), json);
            }
            // The caller sends `Msg::Exit` once this reply is written.
            ok(json, String::new(), json!({ "ok": true }))
        }
        Action::Write(path) => {
            let config = controller.config();
            let Some(path) = path.clone().or(config.global.command_file.clone()) else {
                return Reply::Error("write needs a FILE (no -F file to default to)".into(), json);
            };
            match std::fs::write(&path, config.to_commands()) {
                Ok(()) => ok(json, String::new(), json!({ "ok": true, "file": path })),
                Err(e) => Reply::Error(format!("cannot write {}: {e}", path.display()), json),
            }
        }
        Action::Include(path) => match controller.include(path) {
            Ok(note) => ok(json, String::new(), json!({ "ok": true, "note": note })),
            Err(e) => Reply::Error(e, json),
        },
        // Logged as SIGHUP's reload is, so Quill's own log records every change however asked.
        Action::Reload => match controller.reload() {
            Ok(note) => {
                tracing::info!("control reload: reloaded: {note}");
                ok(
                    json,
                    format!("reloaded: {note}\n"),
                    json!({ "ok": true, "note": note }),
                )
            }
            Err(e) => {
                tracing::warn!(
                    "control reload: reload rejected, still running the previous configuration: {e}"
                );
                Reply::Error(format!("reload rejected: {e}"), json)
            }
        },
        Action::Reopen => {
            controller.reopen();
            let logs = controller.access_logs();
            let text = if logs.is_empty() {
                "no access log to reopen\n".into()
            } else {
                let names: Vec<String> = logs.iter().map(|p| p.display().to_string()).collect();
                format!("reopened: {}\n", names.join(", "))
            };
            // `log` (the first file) as before; `logs` every file, per-listener ones included.
            ok(
                json,
                text,
                json!({ "ok": true, "log": logs.first(), "logs": logs }),
            )
        }
        Action::Takeover | Action::TakeoverDone => Reply::Error(
            "takeover is a conversation between Quill processes".into(),
            json,
        ),
        Action::TlsReload(name) => match controller.tls_reload(name.as_deref().or(listener)) {
            Ok(note) => ok(
                json,
                format!("tls reloaded: {note}\n"),
                json!({ "ok": true, "note": note }),
            ),
            Err(e) => Reply::Error(format!("tls reload: {e}"), json),
        },
    }
}

/// A line that starts `pool NAME`: a named pool's settings and servers, as `listener NAME`
/// reaches a listener's pool.
fn execute_pool(req: &Line, name: &str, controller: &Controller) -> Reply {
    let json = req.json;
    match &req.action {
        Action::Set(cmd) => match controller.set_to(None, Some(name), cmd) {
            Ok(note) => ok(json, String::new(), json!({ "ok": true, "note": note })),
            Err(e) => Reply::Error(e, json),
        },
        Action::Show(setting) => match show(*setting, None, Some(name), controller) {
            Ok((text, value)) => ok(json, format!("{text}\n"), value),
            Err(e) => Reply::Error(e, json),
        },
        Action::Servers => {
            let Some(pool) = controller.shared().pool(name) else {
                return Reply::Error(format!("no pool named '{name}'"), json);
            };
            let now = controller.shared().clock.now_ms();
            let servers: Vec<_> = pool
                .servers
                .iter()
                .enumerate()
                .map(|(i, s)| status::server_status(i, s, now))
                .collect();
            let text: String = servers.iter().map(status::pen_server_line).collect();
            ok(
                json,
                text,
                serde_json::to_value(&servers).unwrap_or(Value::Null),
            )
        }
        _ => Reply::Error(
            format!("'pool {name}' takes server commands, pool settings (set or shown) and 'servers' only"),
            json,
        ),
    }
}

/// Commands whose effect is more than a configuration change.
fn after_set(cmd: &Command, controller: &Controller) {
    if let Command::WebStats(Some(_)) = cmd {
        if let Err(e) = status::write_file(controller) {
            tracing::warn!("{e}");
        }
    }
}

fn pick_listener<'a>(
    snap: &'a status::Snapshot,
    name: Option<&str>,
) -> Option<&'a status::ListenerStatus> {
    match name {
        Some(n) => snap.listeners.iter().find(|l| l.name == n),
        None if snap.listeners.len() == 1 => snap.listeners.first(),
        None => None,
    }
}

fn listener_names(snap: &status::Snapshot) -> Vec<&str> {
    snap.listeners.iter().map(|l| l.name.as_str()).collect()
}

/// Why no listener was picked: an unknown name, or several listeners and none named (then
/// their names, so the operator need not open the configuration to find them).
fn listener_error(name: Option<&str>, names: &[&str]) -> String {
    match name {
        Some(n) => format!("no listener named '{n}'"),
        None => format!(
            "there are {} listeners ({}): say which with 'listener NAME' first",
            names.len(),
            names.join(", ")
        ),
    }
}

/// The current value of a setting, as text and JSON.
fn show(
    setting: Setting,
    listener: Option<&str>,
    pool: Option<&str>,
    controller: &Controller,
) -> Result<(String, Value), String> {
    let config = controller.config();
    let g = &config.global;
    let pick = || -> Result<&crate::config::ListenerConfig, String> {
        if let Some(n) = pool {
            return config
                .pools
                .iter()
                .find(|p| p.name == n)
                .ok_or_else(|| format!("no pool named '{n}'"));
        }
        match listener {
            Some(n) => config
                .listeners
                .iter()
                .find(|l| l.name == n)
                .ok_or_else(|| format!("no listener named '{n}'")),
            None if config.listeners.len() == 1 => Ok(&config.listeners[0]),
            None => {
                let names: Vec<&str> = config.listeners.iter().map(|l| l.name.as_str()).collect();
                Err(listener_error(None, &names))
            }
        }
    };
    let dur = |d: Duration| (d.as_secs().to_string(), json!(d.as_secs_f64()));
    let opt_path = |p: &Option<PathBuf>| match p {
        Some(p) => (p.display().to_string(), json!(p)),
        None => ("none".to_string(), Value::Null),
    };
    let opt_num = |n: Option<AclId>| match n {
        Some(n) => (n.to_string(), json!(n)),
        None => ("none".to_string(), Value::Null),
    };
    Ok(match setting {
        Setting::Blacklist => dur(pick()?.tuning.blacklist),
        Setting::Timeout => dur(pick()?.tuning.connect_timeout),
        Setting::Tracking => dur(pick()?.tuning.tracking_time),
        Setting::IdleTimeout => dur(pick()?.tuning.idle_timeout),
        Setting::ClientsMax => {
            let n = pick()?.tuning.clients_max;
            (n.to_string(), json!(n))
        }
        Setting::MaxPerSource => {
            let n = pick()?.tuning.max_per_source;
            (n.to_string(), json!(n))
        }
        Setting::ConnMax => {
            let n = controller.shared().max_sessions.load(Ordering::Relaxed);
            (n.to_string(), json!(n))
        }
        Setting::Source => {
            let s = pick()?.tuning.source.map(|ip| ip.to_string());
            (s.clone().unwrap_or_else(|| "none".into()), json!(s))
        }
        Setting::TcpFastclose => {
            let f = pick()?.tuning.tcp_fastclose.name();
            (f.to_string(), json!(f))
        }
        Setting::ProxyProtocol => {
            let v = crate::config::proxy_protocol_name(pick()?.tuning.proxy_protocol);
            (v.to_string(), json!(v))
        }
        Setting::Mode => {
            // Pen's flags; `http` after them on an HTTP listener, as Pen's `http` sets it.
            let l = pick()?;
            let m = match l.http() {
                Some(_) => format!("{} http", l.mode),
                None => l.mode.to_string(),
            };
            (m.clone(), json!(m))
        }
        Setting::ClientAcl => opt_num(pick()?.client_acl),
        Setting::ControlAcl => opt_num(g.control_acl),
        Setting::Acl(n) => {
            let lines: Vec<String> = g.acls[n].entries.iter().map(|e| e.to_string()).collect();
            (lines.join("\n"), json!(lines))
        }
        Setting::Log => opt_path(&g.log),
        Setting::WebStats => opt_path(&g.status_file),
        Setting::Debug => (g.debug.to_string(), json!(g.debug)),
        Setting::Listen => {
            let l = pick()?.listen.to_string();
            (l.clone(), json!(l))
        }
        Setting::Control => match &g.control {
            Some(a) => (a.to_string(), json!(a.to_string())),
            None => ("none".to_string(), Value::Null),
        },
    })
}

// === quill ctl ===

/// `quill ctl`: sends one command, prints the reply; exit status 1 when the reply is an error or
/// the socket cannot be reached. With a token file (`--token-file`, else `$QUILL_TOKEN_FILE`), a
/// line to a TCP control socket starts with `auth TOKEN` (the Unix socket needs none).
pub(crate) fn client(
    socket: Option<&str>,
    json: bool,
    token_file: Option<&Path>,
    words: &[String],
) -> Result<String, String> {
    if words.is_empty() {
        return Err("quill ctl: no command given (try 'servers')".into());
    }
    let target = socket
        .map(str::to_string)
        .or_else(|| std::env::var("QUILL_SOCKET").ok())
        .unwrap_or_else(|| DEFAULT_SOCKET.to_string());
    let mut line = words.join(" ");
    if json {
        line = format!("json {line}");
    }
    line.push('\n');
    let is_tcp = !target.contains('/')
        && !Path::new(&target).exists()
        && (target.parse::<u16>().is_ok() || target.contains(':'));
    let token_file = token_file
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("QUILL_TOKEN_FILE").map(PathBuf::from));
    if let (true, Some(file)) = (is_tcp, token_file) {
        let mut token = TokenFile::default();
        token.load(&file)?;
        let token = token.token.unwrap_or_default();
        line = format!("auth {} {line}", String::from_utf8_lossy(&token));
    }
    let reply = if !is_tcp {
        let mut s = UnixStream::connect(&target)
            .map_err(|e| format!("cannot reach control socket {target}: {e}"))?;
        exchange(&mut s, &line)
    } else {
        let addr = if target.contains(':') {
            target.clone()
        } else {
            format!("127.0.0.1:{target}")
        };
        let mut s = TcpStream::connect(&addr)
            .map_err(|e| format!("cannot reach control socket {addr}: {e}"))?;
        exchange(&mut s, &line)
    }
    .map_err(|e| format!("control socket {target}: {e}"))?;
    let is_error = reply.starts_with("error: ")
        || (json
            && serde_json::from_str::<Value>(reply.trim()).is_ok_and(|v| v.get("error").is_some()));
    if is_error {
        Err(reply.trim_end().trim_start_matches("error: ").to_string())
    } else {
        Ok(reply)
    }
}

fn exchange(s: &mut (impl Read + Write), line: &str) -> io::Result<String> {
    s.write_all(line.as_bytes())?;
    let mut reply = String::new();
    s.read_to_string(&mut reply)?;
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs(line: &str) -> Needs {
        command::parse_request(line)
            .unwrap_or_else(|e| panic!("{line}: {e}"))
            .action
            .needs()
    }

    #[test]
    fn paths_and_local_sockets_need_the_unix_socket_and_hosts_do_not() {
        for line in [
            "server 0 address /run/app.sock",
            "server 0 address @abstract",
            "server 0 address app.sock/",
            "server 0 address [::1",
            "server 0 address host:80/x",
            "server add /run/app.sock",
            "server add @app",
            "server add ./x:1:2",
            "listen 127.0.0.1:9000",
            "listen /tmp/q.sock",
            "log /tmp/a.log",
            "web_stats /tmp/s.html",
            "include /etc/shadow",
            "write",
            "exit",
            "takeover",
            "takeover_done",
        ] {
            assert_eq!(needs(line), Needs::UnixSocket, "{line}");
        }
        let admin = Needs::Level(ControlLevel::Admin);
        for line in [
            "server 0 address 10.0.0.2",
            "server 0 address ::1",
            "server 0 address [::1]:80",
            "server 0 address backend-1.example.org",
            "server 0 port 81",
            "server 0 acl 1",
            "server 0 weight 2 address 10.0.0.2",
            "server add 10.0.0.3:80:0:0:1",
            "server 1 remove",
            "no log",
            "hash",
            "reload",
            "tls reload",
            "tls reload web",
            "conn_max 5",
        ] {
            assert_eq!(needs(line), admin, "{line}");
        }
        for line in [
            "server 0 drain",
            "server 1 weight 3 max 4 hard 5 prio 1",
            "close 3",
            "reopen",
        ] {
            assert_eq!(needs(line), Needs::Level(ControlLevel::Operate), "{line}");
        }
        for line in [
            "servers",
            "status",
            "listeners",
            "pools",
            "listener web connections",
            "pid",
            "json listener a servers",
            "mode",
            "acl 1",
        ] {
            assert_eq!(needs(line), Needs::Level(ControlLevel::Read), "{line}");
        }
    }

    #[test]
    fn auth_prefix_is_split_off_and_compared_by_value() {
        assert_eq!(split_auth("auth t0k servers"), (Some("t0k"), "servers"));
        assert_eq!(split_auth("auth t0k"), (Some("t0k"), ""));
        assert_eq!(split_auth("servers"), (None, "servers"));
        assert_eq!(split_auth("authx servers"), (None, "authx servers"));
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert!(!same_secret(b"", b"a"));
    }

    #[test]
    fn a_line_is_cut_at_its_newline_and_bounded() {
        assert_eq!(parse_line(b"pid\r\nexit\n".to_vec()), Ok("pid".into()));
        assert!(parse_line(vec![b'x'; MAX_LINE + 1]).is_err());
        assert!(parse_line(b"\xff\n".to_vec()).is_err());
        assert!(line_complete(b"a\n") && !line_complete(b"a"));
    }
}
