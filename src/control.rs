//! The control socket: Pen's framing (a client connects, sends one command line, reads the reply
//! until the server closes), so `penctl`, `nc` and `quill ctl` all work. Off the data path: one
//! thread accepts, and each connection is served on a thread of its own (at most `MAX_CLIENTS`)
//! with blocking I/O under short timeouts, so a silent client delays nobody else.
//!
//! Safety rules: the Unix socket is created mode 0600; TCP is bound only to loopback unless
//! `control_acl` is set, and then the ACL is checked for every client; commands that name files
//! and the takeover handshake are refused over TCP.
//!
//! Takeover: a new process sends `takeover` over the Unix socket and receives every listening
//! socket (and this control socket) by SCM_RIGHTS, with their names as a JSON line. Once it serves,
//! it writes `done` on the same connection and this process drains; if the connection closes
//! first, nothing changes here.

use std::io::{self, BufRead, BufReader, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
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
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde_json::{json, Value};

use crate::addr::ListenAddr;
use crate::command::{self, Action, Command, Request as Line, Setting};
use crate::runtime::controller::Controller;
use crate::runtime::shared::{Report, Request};
use crate::runtime::Msg;
use crate::status;
use crate::systemd::Inherited;

/// Where `quill ctl` looks when no `--socket` is given (and `QUILL_SOCKET` is unset).
pub const DEFAULT_SOCKET: &str = "/run/quill/quill.sock";
/// The name the control socket has among handed-over sockets.
const CONTROL_NAME: &str = "control";
/// Longest command line accepted.
const MAX_LINE: usize = 4096;
/// How long a client may take to send its line, and to read the reply.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Control connections served at once; more are answered "busy". Each has a thread of its own
/// for about `IO_TIMEOUT` to read the line plus the time to answer (a takeover: up to
/// `TAKEOVER_TIMEOUT`).
const MAX_CLIENTS: usize = 16;
/// How long the old process waits for the new one to say it serves.
const TAKEOVER_TIMEOUT: Duration = Duration::from_secs(60);
/// Most sockets one takeover hands over.
const MAX_FDS: usize = 64;

/// The control listening socket.
pub enum ControlSocket {
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
pub struct ControlHandle {
    path: Option<PathBuf>,
}

impl ControlHandle {
    /// The socket file, removed at exit unless a new process took it over.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
}

/// Opens the control socket at `addr`, or takes the inherited one named `control` when it is a
/// listening socket at `addr` (one elsewhere is closed and `addr` bound anew: the control socket
/// is always where the configuration says). A file at a Unix path is replaced only when it is a
/// stale socket.
pub fn open(addr: &ListenAddr, inherited: &mut Vec<Inherited>) -> io::Result<ControlSocket> {
    if let Some(fd) = crate::systemd::take_named(inherited, CONTROL_NAME, addr, "control socket") {
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

/// Starts the control thread.
pub fn spawn(socket: ControlSocket, controller: Arc<Controller>) -> io::Result<ControlHandle> {
    let path = match &socket {
        ControlSocket::Unix(_, p) => Some(p.clone()),
        ControlSocket::Tcp(_) => None,
    };
    match &socket {
        ControlSocket::Unix(l, _) => l.set_nonblocking(true)?,
        ControlSocket::Tcp(l) => l.set_nonblocking(true)?,
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
        clients: AtomicUsize::new(0),
    });
    thread::Builder::new()
        .name("quill-control".into())
        .spawn(move || serve(ctl, poll))?;
    Ok(ControlHandle { path })
}

const LISTENING: Token = Token(0);
/// Wakes the accept loop after a takeover, so it lets go of the socket at once.
const WAKE: Token = Token(1);

/// What the accept loop and every connection thread share.
struct Control {
    socket: ControlSocket,
    controller: Arc<Controller>,
    waker: Arc<Waker>,
    /// Connections being served now (at most `MAX_CLIENTS`).
    clients: AtomicUsize,
}

/// Accepts control clients and serves each on its own short-lived thread, so a client that is
/// slow to send its line (or never does) holds up nobody else.
fn serve(ctl: Arc<Control>, mut poll: Poll) {
    let mut events = Events::with_capacity(8);
    let shared = ctl.controller.shared().clone();
    loop {
        if shared.handed_over.load(Ordering::Relaxed) {
            // The new process owns the socket now; closing our copy leaves it working.
            return;
        }
        if let Err(e) = poll.poll(&mut events, Some(Duration::from_millis(500))) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::error!("control socket: {e}");
                return;
            }
        }
        while !shared.handed_over.load(Ordering::Relaxed) {
            let accepted = match &ctl.socket {
                ControlSocket::Unix(l, _) => l.accept().map(|(s, _)| Conn::Unix(s)),
                ControlSocket::Tcp(l) => l.accept().map(|(s, a)| Conn::Tcp(s, a.ip())),
            };
            match accepted {
                Ok(conn) => dispatch(conn, &ctl),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::warn!("control socket accept: {e}");
                    thread::sleep(Duration::from_millis(100));
                    break;
                }
            }
        }
    }
}

/// Serves `conn` on a thread of its own, or tells it the socket is busy.
fn dispatch(mut conn: Conn, ctl: &Arc<Control>) {
    if ctl.clients.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
        ctl.clients.fetch_sub(1, Ordering::AcqRel);
        tracing::warn!("control socket: {MAX_CLIENTS} clients already connected; refusing one");
        let _ = conn.set_nonblocking(true);
        let _ = conn.stream().write_all(b"error: busy\n");
        return;
    }
    let ctl2 = ctl.clone();
    let spawned = thread::Builder::new()
        .name("quill-control-client".into())
        .spawn(move || {
            if let Err(e) = handle(conn, &ctl2) {
                tracing::debug!("control client: {e}");
            }
            ctl2.clients.fetch_sub(1, Ordering::AcqRel);
        });
    if let Err(e) = spawned {
        ctl.clients.fetch_sub(1, Ordering::AcqRel);
        tracing::warn!("control socket: cannot start a client thread: {e}");
    }
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

    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Conn::Unix(s) => s.set_nonblocking(on),
            Conn::Tcp(s, _) => s.set_nonblocking(on),
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

    /// Reads the command line: at most `MAX_LINE` bytes, all of them within `IO_TIMEOUT` (a
    /// client that drips its bytes gets no longer than a silent one). Bytes after the first
    /// newline are ignored: one command per connection.
    fn read_request(&mut self) -> io::Result<String> {
        let deadline = Instant::now() + IO_TIMEOUT;
        let mut line = Vec::new();
        let mut buf = [0u8; 1024];
        while !line.contains(&b'\n') && line.len() <= MAX_LINE {
            let left = deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no command line within {}s", IO_TIMEOUT.as_secs()),
                    )
                })?;
            self.set_timeouts(left, IO_TIMEOUT)?;
            let n = match self.stream().read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            };
            line.extend_from_slice(&buf[..n]);
        }
        if let Some(end) = line.iter().position(|&b| b == b'\n') {
            line.truncate(end);
        }
        if line.len() > MAX_LINE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("command line longer than {MAX_LINE} bytes"),
            ));
        }
        String::from_utf8(line)
            .map(|s| s.trim_end_matches('\r').to_string())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "command is not UTF-8"))
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// Reads one line (without its end), at most `MAX_LINE` bytes.
fn read_line(r: &mut dyn Read) -> io::Result<String> {
    let mut reader = BufReader::new(r.take(MAX_LINE as u64 + 1));
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line)?;
    if line.len() > MAX_LINE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "command line too long",
        ));
    }
    String::from_utf8(line)
        .map(|s| s.trim_end_matches(['\n', '\r']).to_string())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "command is not UTF-8"))
}

/// Whether a TCP client may use the control socket: `control_acl` when set, else loopback only.
fn tcp_client_allowed(ip: IpAddr, controller: &Controller) -> bool {
    let config = controller.config();
    match config.global.control_acl {
        Some(n) => config.global.acls[n as usize].permits(ip),
        None => ip.is_loopback(),
    }
}

fn handle(mut conn: Conn, ctl: &Control) -> io::Result<()> {
    conn.set_nonblocking(false)?;
    let controller = &ctl.controller;
    // The line is read even from a client about to be denied: closing a socket with unread
    // bytes resets the connection, and the client would never see why.
    let line = conn.read_request();
    if let Conn::Tcp(_, ip) = &conn {
        if !tcp_client_allowed(*ip, controller) {
            tracing::info!("control client {ip} denied by control_acl");
            return conn.stream().write_all(b"error: denied\n");
        }
    }
    let line = match line {
        Ok(l) => l,
        Err(e) => {
            let _ = conn.stream().write_all(format!("error: {e}\n").as_bytes());
            return Err(e);
        }
    };
    let local = matches!(conn, Conn::Unix(_));
    let request = command::parse_request(&line);
    let reply = match &request {
        // A line that does not parse still asked for JSON if its first word says so.
        Err(e) => Reply::Error(e.0.clone(), line.split_whitespace().next() == Some("json")),
        Ok(req) if req.action.local_only() && !local => Reply::Error(
            format!("'{line}' is accepted only over the Unix control socket"),
            req.json,
        ),
        Ok(Line {
            action: Action::Takeover,
            ..
        }) => {
            if let Conn::Unix(s) = &conn {
                return hand_over(s, ctl);
            }
            Reply::Error("takeover needs the Unix control socket".into(), false)
        }
        Ok(req) => execute(req, controller),
    };
    conn.stream().write_all(reply.render().as_bytes())?;
    // `exit` is acted on once its reply is out: the process may be gone a moment later.
    if let (Ok(req), Reply::Text(..)) = (&request, &reply) {
        if req.action == Action::Exit {
            controller.send(Msg::Exit);
        }
    }
    Ok(())
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
    match &req.action {
        Action::Set(cmd) => match controller.set(listener, cmd) {
            Ok(note) => {
                after_set(cmd, controller);
                ok(json, String::new(), json!({ "ok": true, "note": note }))
            }
            Err(e) => Reply::Error(e, json),
        },
        Action::Show(setting) => match show(*setting, listener, controller) {
            Ok((text, value)) => ok(json, format!("{text}\n"), value),
            Err(e) => Reply::Error(e, json),
        },
        Action::Servers => {
            let snap = status::snapshot(shared);
            let Some(l) = pick_listener(&snap, listener) else {
                return Reply::Error(listener_error(listener, snap.listeners.len()), json);
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
            if let Err(e) = controller.write_status_file() {
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
        Action::Connections | Action::Connection(_) => {
            let mut sessions: Vec<_> = shared
                .ask_all(Request::Report)
                .into_iter()
                .flat_map(|r: Report| r.sessions)
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
        Action::Reload => match controller.reload() {
            Ok(note) => ok(
                json,
                format!("reloaded: {note}\n"),
                json!({ "ok": true, "note": note }),
            ),
            Err(e) => Reply::Error(format!("reload rejected: {e}"), json),
        },
        Action::Takeover | Action::TakeoverDone => Reply::Error(
            "takeover is a conversation between Quill processes".into(),
            json,
        ),
    }
}

/// Commands whose effect is more than a configuration change.
fn after_set(cmd: &Command, controller: &Controller) {
    if let Command::WebStats(Some(_)) = cmd {
        if let Err(e) = controller.write_status_file() {
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

fn listener_error(name: Option<&str>, count: usize) -> String {
    match name {
        Some(n) => format!("no listener named '{n}'"),
        None => format!("there are {count} listeners: say which with 'listener NAME' first"),
    }
}

/// The current value of a setting, as text and JSON.
fn show(
    setting: Setting,
    listener: Option<&str>,
    controller: &Controller,
) -> Result<(String, Value), String> {
    let config = controller.config();
    let g = &config.global;
    let pick = || -> Result<&crate::config::ListenerConfig, String> {
        match listener {
            Some(n) => config
                .listeners
                .iter()
                .find(|l| l.name == n)
                .ok_or_else(|| format!("no listener named '{n}'")),
            None if config.listeners.len() == 1 => Ok(&config.listeners[0]),
            None => Err(listener_error(None, config.listeners.len())),
        }
    };
    let dur = |d: Duration| (d.as_secs().to_string(), json!(d.as_secs_f64()));
    let opt_path = |p: &Option<PathBuf>| match p {
        Some(p) => (p.display().to_string(), json!(p)),
        None => ("none".to_string(), Value::Null),
    };
    let opt_num = |n: Option<u8>| match n {
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
        Setting::TcpFastclose => {
            let f = pick()?.tuning.tcp_fastclose.name();
            (f.to_string(), json!(f))
        }
        Setting::Mode => {
            let m = pick()?.mode.to_string();
            (m.clone(), json!(m))
        }
        Setting::ClientAcl => opt_num(pick()?.client_acl),
        Setting::ControlAcl => opt_num(g.control_acl),
        Setting::Acl(n) => {
            let lines: Vec<String> = g.acls[n as usize]
                .entries
                .iter()
                .map(|e| e.to_string())
                .collect();
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

/// Old process: hands every listening socket and the control socket to the new process, then
/// waits for it to say it serves.
fn hand_over(conn: &UnixStream, ctl: &Control) -> io::Result<()> {
    let (socket, controller) = (&ctl.socket, &ctl.controller);
    let listeners = controller.shared().listeners.load_full();
    let mut names: Vec<String> = listeners.iter().map(|l| l.name.clone()).collect();
    let mut fds: Vec<BorrowedFd<'_>> = listeners.iter().map(|l| l.socket.as_fd()).collect();
    names.push(CONTROL_NAME.to_string());
    fds.push(socket.fd());
    if let Some(admin) = controller.shared().admin_socket.get() {
        names.push(crate::runtime::ADMIN_NAME.to_string());
        fds.push(admin.as_fd());
    }
    if fds.len() > MAX_FDS {
        let mut c = conn;
        return c.write_all(
            format!("error: too many sockets to hand over ({})\n", fds.len()).as_bytes(),
        );
    }
    let payload = format!("{}\n", json!({ "names": names }));
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other("ancillary buffer too small"));
    }
    rustix::net::sendmsg(
        conn,
        &[IoSlice::new(payload.as_bytes())],
        &mut control,
        SendFlags::empty(),
    )?;
    tracing::info!(
        "takeover: handed {} socket(s) to a new process; waiting for it to serve",
        fds.len()
    );
    conn.set_read_timeout(Some(TAKEOVER_TIMEOUT))?;
    let mut reader = conn;
    match read_line(&mut reader) {
        Ok(line) if line.trim() == "done" => {
            let _ = (&*conn).write_all(b"ok\n");
            controller
                .shared()
                .handed_over
                .store(true, Ordering::Relaxed);
            let _ = ctl.waker.wake();
            controller.send(Msg::HandedOver);
            Ok(())
        }
        Ok(line) => {
            tracing::warn!("takeover: the new process said {line:?}; carrying on");
            Ok(())
        }
        Err(e) => {
            tracing::warn!("takeover: the new process did not confirm ({e}); carrying on");
            Ok(())
        }
    }
}

/// New process: asks the Quill behind `path` for its sockets. Keep the returned stream and pass
/// it to [`finish_takeover`] once serving. Every error names `path`; one that does not answer
/// within `IO_TIMEOUT` is said to be silent.
pub fn request_takeover(path: &Path) -> io::Result<(Vec<Inherited>, UnixStream)> {
    let shown = path.display();
    let mut conn = UnixStream::connect(path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot connect to {shown}: {e}")))?;
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    conn.set_write_timeout(Some(IO_TIMEOUT))?;
    conn.write_all(b"takeover\n")
        .map_err(|e| io::Error::new(e.kind(), format!("cannot ask {shown}: {e}")))?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match rustix::net::recvmsg(
            &conn,
            &mut [IoSliceMut::new(&mut buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the process behind {shown} did not answer within {} s",
                        IO_TIMEOUT.as_secs()
                    ),
                ))
            }
            Err(e) => {
                let e = io::Error::from(e);
                return Err(io::Error::new(e.kind(), format!("{shown}: {e}")));
            }
            Ok(got) => break got,
        }
    };
    if got.bytes == 0 {
        return Err(io::Error::other(format!(
            "the process behind {shown} closed the connection without answering"
        )));
    }
    let mut fds: Vec<OwnedFd> = Vec::new();
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = msg {
            fds.extend(received);
        }
    }
    let text = String::from_utf8_lossy(&buf[..got.bytes]);
    if let Some(msg) = text.strip_prefix("error: ") {
        return Err(io::Error::other(format!("{shown}: {}", msg.trim())));
    }
    let value: Value = serde_json::from_str(text.trim()).map_err(|e| {
        io::Error::other(format!("{shown}: unexpected answer {:?}: {e}", text.trim()))
    })?;
    let names: Vec<String> = value["names"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if fds.is_empty() || fds.len() != names.len() {
        return Err(io::Error::other(format!(
            "{shown}: received {} socket(s) for {} name(s)",
            fds.len(),
            names.len()
        )));
    }
    let inherited = names
        .into_iter()
        .zip(fds)
        .map(|(name, fd)| Inherited {
            name: Some(name),
            fd,
        })
        .collect();
    Ok((inherited, conn))
}

/// New process: tells the old one it serves now, so it drains.
pub fn finish_takeover(mut conn: UnixStream) {
    if let Err(e) = conn.write_all(b"done\n") {
        tracing::warn!("takeover: cannot tell the old process to drain: {e}");
        return;
    }
    let _ = read_line(&mut conn);
}

// === quill ctl ===

/// `quill ctl`: sends one command, prints the reply; exit status 1 when the reply is an error or
/// the socket cannot be reached.
pub fn client(socket: Option<&str>, json: bool, words: &[String]) -> Result<String, String> {
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
