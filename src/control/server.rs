//! The control socket's server, off the data path: one thread runs a mio loop ([`Loop`]) over the
//! listening socket and every client (nonblocking, each with a deadline), so idle or dripping
//! clients cannot starve a legitimate one; commands that may block (`include`, `write`,
//! `reload`, `status`, `log FILE`, `web_stats FILE`, the takeover handshake) run on a short-lived
//! thread of their own, at most `MAX_BLOCKING` at once. Who may connect and what each may ask is
//! decided by the access rules of [`super`]; what a command does, by [`super::exec`].

use std::io::{self, Read, Write};
use std::net::{IpAddr, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};

use super::exec::{execute, render, Failure};
use super::{refuse, split_auth, tcp_client_allowed, ControlSocket, TokenFile};
use crate::command::{self, Action, Command, Request as Line};
use crate::config::ControlLevel;
use crate::state::controller::Controller;
use crate::state::Msg;
use crate::takeover;

/// Longest command line accepted.
pub(super) const MAX_LINE: usize = 4096;
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
        if let Some(why) = refusal {
            client.refuse(&why);
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

    /// Why a new client may not use this socket at all; None when it may.
    fn refusal(&self, conn: &Conn) -> Option<Refusal> {
        match conn {
            Conn::Tcp(_, ip) => {
                if tcp_client_allowed(*ip, &self.ctl.controller) {
                    return None;
                }
                tracing::info!("control client {ip} denied by control_acl");
                Some(Refusal::Denied)
            }
            Conn::Unix(s) => {
                let uid = match rustix::net::sockopt::socket_peercred(s) {
                    Ok(cred) => cred.uid.as_raw(),
                    Err(e) => {
                        tracing::warn!("control client: cannot tell who it is ({e}); denied");
                        return Some(Refusal::NoCredentials);
                    }
                };
                if uid == 0 || uid == self.euid {
                    return None;
                }
                tracing::warn!(
                    "control client with uid {uid} denied: only root and uid {} may use the control socket",
                    self.euid
                );
                Some(Refusal::Uid {
                    uid,
                    euid: self.euid,
                })
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
                client.refuse(&Refusal::Line(e));
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
                client.refuse(&Refusal::Denied);
                return Next::Keep;
            }
        }
        let request = command::parse_request(line);
        let (answer, json) = match request {
            // A line that does not parse still asked for JSON if its first word says so.
            Err(e) => (
                Err(Failure::from(e)),
                line.split_whitespace().next() == Some("json"),
            ),
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
                    let refused = Err(refused);
                    tracing::info!(
                        "control client {who} refused: {}",
                        render(&refused, req.json).trim_end()
                    );
                    (refused, req.json)
                } else if is_blocking(&req.action) {
                    return Next::Detach(req);
                } else {
                    let answer = execute(&req, &self.ctl.controller);
                    let exit = req.action == Action::Exit && answer.is_ok();
                    client.reply(render(&answer, req.json).into_bytes(), exit);
                    return Next::Keep;
                }
            }
        };
        client.reply(render(&answer, json).into_bytes(), false);
        Next::Keep
    }

    /// Hands client `i` and its blocking command to a thread of its own, or answers busy.
    fn detach(&mut self, i: usize, req: Line) {
        let ctl = self.ctl.clone();
        if ctl.blocking.fetch_add(1, Ordering::AcqRel) >= MAX_BLOCKING {
            ctl.blocking.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!("control socket: {MAX_BLOCKING} blocking commands running; busy");
            if let Some(client) = self.clients.get_mut(i).and_then(Option::as_mut) {
                client.refuse(&Refusal::Busy);
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
                client.refuse(&Refusal::NoLine);
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
    /// Queues `why` as the reply: text, whatever the line asked.
    fn refuse(&mut self, why: &Refusal) {
        self.reply(format!("error: {why}\n").into_bytes(), false);
    }

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
pub(super) fn line_complete(buf: &[u8]) -> bool {
    buf.len() > MAX_LINE || buf.contains(&b'\n')
}

/// The command line (without its end) from what a client sent: one command per connection, so
/// bytes after the first newline are ignored.
pub(super) fn parse_line(mut buf: Vec<u8>) -> Result<String, LineError> {
    if let Some(end) = buf.iter().position(|&b| b == b'\n') {
        buf.truncate(end);
    }
    if buf.len() > MAX_LINE {
        return Err(LineError::TooLong);
    }
    String::from_utf8(buf)
        .map(|s| s.trim_end_matches('\r').to_string())
        .map_err(|_| LineError::NotUtf8)
}

/// Why a client is answered without its command being run.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    /// Not allowed by `control_acl` (or not loopback), or without the token asked for.
    #[error("denied")]
    Denied,
    #[error("denied (peer credentials unavailable)")]
    NoCredentials,
    #[error("denied: uid {uid} may not use this control socket (only root and uid {euid})")]
    Uid { uid: u32, euid: u32 },
    #[error(transparent)]
    Line(#[from] LineError),
    #[error("no command line within {}s", IO_TIMEOUT.as_secs())]
    NoLine,
    /// `MAX_BLOCKING` blocking commands run already.
    #[error("busy")]
    Busy,
}

/// Why what a client sent is no command line (answered as text whatever the line asked).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum LineError {
    #[error("command line longer than {} bytes", MAX_LINE)]
    TooLong,
    #[error("command is not UTF-8")]
    NotUtf8,
}

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
    let answer = execute(req, &ctl.controller);
    conn.stream()
        .write_all(render(&answer, req.json).as_bytes())?;
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
