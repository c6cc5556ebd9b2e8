//! Start-up in phases, each returning what the next one takes:
//!
//! 1. [`Limits::derive`]: the open-file limit raised, and the sessions it leaves room for;
//! 2. [`Sockets::gather`]: the sockets taken over from the previous process, passed by systemd,
//!    or bound here (listeners, control socket, admin listener), and the running state on them;
//! 3. [`privileges`]: what needs the privileges start-up has (the pid file, the access logs),
//!    then chroot and user change ([`drop_privileges`]);
//! 4. [`Threads::start`]: the resolver, the workers, the control thread, the health checker, the
//!    admin listener and the signal thread; [`Threads::announce`] then says Quill is ready.
//!
//! What comes after is the main loop's (`runtime::main_loop`).

use std::fs::{File, OpenOptions};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::thread;

use mio::{Poll, Waker};
use signal_hook::iterator::{Handle, Signals};

use super::resolver::{self, Resolver};
use super::worker::{Worker, WAKER};
use super::{panics, PIPES_PER_WORKER};
use crate::addr::{BackendAddr, ListenAddr};
use crate::admin::Token;
use crate::clock::Clock;
use crate::config::settings::AcceptMode;
use crate::config::{Config, Global};
use crate::control::{self, ControlHandle, ControlSocket};
use crate::state::controller::Controller;
use crate::state::shared::Shared;
use crate::state::{Msg, PrivilegeError, Rebuild, RunError, ThreadKind};
use crate::sys::{self, AcceptRing};
use crate::systemd::{self, Inherited};
use crate::takeover::{self, ADMIN_NAME};

/// Descriptors kept back from sessions for the process itself: standard streams, access log and
/// its per-worker copies, status file, pid file, signal pipe, the control socket and the admin
/// listener, the health checker's and the control thread's event loops, resolver threads.
/// Listeners, servers (one health probe each) and workers are added to it by `sessions_for`.
const FD_RESERVE: u64 = 32;
/// Descriptors kept for connections to the control socket and the admin listener (each serves a
/// bounded number at once) and the spare each keeps to refuse clients cleanly on EMFILE: sessions
/// never take these, so running out of descriptors on the data path never starves them.
const FD_CONTROL_ADMIN: u64 = 64;
/// Descriptors the file caches of static roots may hold open, all workers together, taken from
/// the sessions' share when the configuration has a static root at start (`web::cache`).
const FD_FILE_CACHE: u64 = 1024;
/// The open-file limit assumed when it cannot be read or raised.
const NOFILE_UNKNOWN: u64 = 1024;

/// The open-file limit and the sessions it allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Limits {
    /// Descriptors the process may open (`RLIMIT_NOFILE`, raised to its hard limit).
    pub nofile: u64,
    /// Sessions that fit in them (a later `conn_max` or reload cannot go past it either).
    pub fit: u64,
    /// Sessions allowed from the start: `-x` when it fits, else `fit`.
    pub max_sessions: u64,
}

impl Limits {
    /// Raises the open-file limit to its hard limit and derives the sessions `config` may have.
    pub(super) fn derive(config: &Config) -> Limits {
        let nofile = sys::raise_nofile_limit().unwrap_or(NOFILE_UNKNOWN);
        // The file caches' descriptors come out of the sessions' share, so that serving files
        // never takes a descriptor a session was promised (a reload that adds the first static
        // root gets no budget: its large files are opened per request).
        let files = if config.has_static_root() {
            FD_FILE_CACHE.min(nofile / 8)
        } else {
            0
        };
        crate::web::cache::FdBudget::set_limit(files as usize);
        let nofile_for_sessions = nofile - files;
        let servers = config
            .listeners
            .iter()
            .map(|l| l.servers.len() as u64)
            .sum();
        let mut limits = Limits::for_counts(
            nofile_for_sessions,
            config.global.workers as u64,
            config.listeners.len() as u64,
            servers,
            config.global.max_connections,
        );
        limits.nofile = nofile;
        limits
    }

    /// The limits for `nofile` descriptors, this many workers, listeners and servers, and `-x`.
    fn for_counts(
        nofile: u64,
        workers: u64,
        listeners: u64,
        servers: u64,
        asked: Option<u32>,
    ) -> Limits {
        let fit = sessions_for(nofile, workers, listeners, servers);
        Limits {
            nofile,
            fit,
            max_sessions: session_limit(asked, nofile, fit),
        }
    }
}

/// How many sessions fit in `nofile` descriptors: two sockets each, after the reserve (the
/// process, control and admin, one per listener, one per server for its health probe, and per
/// worker its epoll (twice: the idle server connection pools keep a handle to it, see
/// `state::idle`), waker and splice pipes).
fn sessions_for(nofile: u64, workers: u64, listeners: u64, servers: u64) -> u64 {
    let reserve = FD_RESERVE
        + FD_CONTROL_ADMIN
        + listeners
        + servers
        + workers * (3 + 2 * PIPES_PER_WORKER as u64);
    nofile.saturating_sub(reserve) / 2
}

/// The sessions to allow: `-x` when the open-file limit has room for it, else what fits (with a
/// warning naming both numbers; past that the system would refuse descriptors to the control
/// socket and the admin listener too). Without `-x`, what fits.
fn session_limit(asked: Option<u32>, nofile: u64, fit: u64) -> u64 {
    match asked {
        Some(x) if u64::from(x) > fit => {
            tracing::warn!(
                "-x {x} needs more open files than the limit {nofile} allows: at most {fit} sessions (2 descriptors each; {} kept for control, admin, health checks, pipes and logs); raise LimitNOFILE (ulimit -n) or run several processes with --reuseport",
                nofile.saturating_sub(2 * fit)
            );
            fit
        }
        Some(x) => u64::from(x),
        None => fit,
    }
}

/// Every socket Quill serves on, with the running state built on its listeners.
pub(super) struct Sockets {
    /// The running state, every listener bound or inherited.
    pub controller: Controller,
    /// The control socket (`control`), not served yet.
    pub control: Option<ControlSocket>,
    /// The admin listener (`admin`), not served yet.
    pub admin: Option<Admin>,
    /// The connection to the process taken over from (`--takeover`), told to drain once this
    /// one serves.
    pub handover: Option<UnixStream>,
}

/// The admin listener and the token its requests must carry.
pub(super) struct Admin {
    socket: Arc<TcpListener>,
    token: Option<Token>,
}

impl Sockets {
    /// Takes the sockets from the process behind `takeover`, else the `inherited` ones (the
    /// socket-proxyd form), else systemd's; opens the control socket, builds the controller
    /// (binding every listener no inherited socket matches) and opens the admin listener.
    /// Inherited sockets left over are closed with a warning.
    pub(super) fn gather(
        config: Config,
        takeover: Option<&Path>,
        inherited: Option<Vec<Inherited>>,
        limits: &Limits,
    ) -> Result<Sockets, RunError> {
        let (mut inherited, handover) = inherit(&config, takeover, inherited)?;
        if !inherited.is_empty() {
            tracing::info!("inherited {} listening socket(s)", inherited.len());
        }
        let systemd_files = match handover {
            Some(_) => Vec::new(),
            None => socket_files(&inherited),
        };
        let control = match &config.global.control {
            Some(addr) => Some(control::open(addr, &mut inherited).map_err(|source| {
                RunError::ControlSocket {
                    addr: addr.clone(),
                    source,
                }
            })?),
            None => None,
        };
        let admin_at = config.global.admin;
        let token_file = config.global.admin_token_file.clone();
        // Before any pool is built: its servers' counts get a slot per worker.
        crate::per_worker::set_workers(config.global.workers);
        let controller = Controller::start(
            config,
            Clock::default(),
            limits.max_sessions,
            &mut inherited,
        )?;
        let shared = controller.shared();
        // A later `conn_max` or reload cannot take sessions past the open-file limit either.
        shared.fd_sessions.store(limits.fit, Ordering::Relaxed);
        let _ = shared.systemd_files.set(systemd_files);
        let admin = match admin_at {
            Some(addr) => Some(Admin::open(
                addr,
                token_file.as_deref(),
                shared,
                &mut inherited,
            )?),
            None => None,
        };
        for rest in &inherited {
            tracing::warn!(
                "inherited socket {} matches no listener; closing it",
                rest.name.as_deref().unwrap_or("(unnamed)")
            );
        }
        Ok(Sockets {
            controller,
            control,
            admin,
            handover,
        })
    }
}

/// The sockets to start from, and the connection to the process taken over from: that process's
/// sockets (vetted against `config`), the ones already `inherited`, or systemd's.
fn inherit(
    config: &Config,
    takeover: Option<&Path>,
    inherited: Option<Vec<Inherited>>,
) -> Result<(Vec<Inherited>, Option<UnixStream>), RunError> {
    if let Some(path) = takeover {
        let (fds, conn) = takeover::request_takeover(path).map_err(RunError::Takeover)?;
        return Ok((vet_handed_over(fds, config), Some(conn)));
    }
    let fds = match inherited {
        Some(fds) => fds,
        None => systemd::listen_fds().map_err(RunError::Systemd)?,
    };
    Ok((fds, None))
}

impl Admin {
    /// Takes the inherited admin listener at `addr` or binds it, and reads its token file: now,
    /// before privileges are dropped, since the file may be readable by root only.
    fn open(
        addr: SocketAddr,
        token_file: Option<&Path>,
        shared: &Shared,
        inherited: &mut Vec<Inherited>,
    ) -> Result<Admin, RunError> {
        let at = ListenAddr::Tcp(addr);
        let socket = match systemd::take_named(inherited, ADMIN_NAME, &at, "admin listener") {
            Some(fd) => TcpListener::from(fd),
            None => TcpListener::bind(addr).map_err(|source| RunError::Bind { addr, source })?,
        };
        let socket = Arc::new(socket);
        let _ = shared.admin_socket.set(socket.clone());
        let token = match token_file {
            Some(path) => Some(Token::load(path).map_err(RunError::AdminToken)?),
            None => None,
        };
        Ok(Admin { socket, token })
    }
}

/// The files of the Unix sockets systemd passed. systemd owns them: they must outlive this
/// process so that the next client finds the socket and systemd starts Quill again.
fn socket_files(inherited: &[Inherited]) -> Vec<PathBuf> {
    inherited
        .iter()
        .filter_map(|s| {
            let local = socket2::SockRef::from(&s.fd).local_addr().ok()?;
            local.as_pathname().map(Path::to_path_buf)
        })
        .collect()
}

/// Keeps the sockets the previous process handed over that this configuration can serve. A
/// socket named after a listener is kept under its name only when it listens where that listener
/// is configured; at another listener's address it is kept without a name (a renamed listener
/// takes it by address); elsewhere it is closed, and the listener binds its new address itself
/// (the old address is released when the old process, which drains after `done`, exits). A
/// socket that is not a listening stream socket is closed. The control socket and the admin
/// listener are checked where they are opened.
fn vet_handed_over(handed: Vec<Inherited>, config: &Config) -> Vec<Inherited> {
    let mut kept = Vec::new();
    for mut socket in handed {
        let name = socket.name.clone().unwrap_or_default();
        let udp = config
            .listeners
            .iter()
            .find(|l| l.name == name && l.udp().is_some());
        if let Some(l) = udp {
            // One of a UDP listener's sockets: kept when it is bound where the listener is.
            match crate::listener::udp_addr(socket.fd.as_fd()) {
                Ok(at) if ListenAddr::Tcp(at) == l.listen => kept.push(socket),
                Ok(at) => tracing::warn!(
                    "takeover: UDP listener '{name}' moved from {at} to {}: bound anew",
                    l.listen
                ),
                Err(e) => tracing::warn!("takeover: socket '{name}': {e}; closing it"),
            }
            continue;
        }
        let actual = match crate::listener::listening_addr(socket.fd.as_fd()) {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!("takeover: socket '{name}': {e}; closing it");
                continue;
            }
        };
        let Some(named) = config.listeners.iter().find(|l| l.name == name) else {
            kept.push(socket);
            continue;
        };
        if crate::listener::same_address(&actual, &named.listen) {
            kept.push(socket);
            continue;
        }
        tracing::warn!(
            "takeover: listener '{name}' moved from {actual} to {}: bound anew",
            named.listen
        );
        let elsewhere = config
            .listeners
            .iter()
            .any(|l| crate::listener::same_address(&actual, &l.listen));
        if elsewhere {
            socket.name = None;
            kept.push(socket);
        }
    }
    kept
}

/// The access log files (the process-wide one and the listeners' own), opened while privileged;
/// each worker holds its own handles on them.
pub(super) struct LogFiles(Vec<File>);

impl LogFiles {
    /// Opens (appending, created if missing) every file of the shared log plan, in its order.
    fn open(shared: &Shared) -> Result<LogFiles, RunError> {
        let log_plan = shared
            .access_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut files = Vec::new();
        for (path, _) in &log_plan.files {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|source| RunError::AccessLog {
                    path: path.clone(),
                    source,
                })?;
            files.push(file);
        }
        Ok(LogFiles(files))
    }

    /// A worker's own handles on the files.
    fn for_worker(&self) -> Result<Vec<File>, RunError> {
        self.0
            .iter()
            .map(File::try_clone)
            .collect::<Result<Vec<_>, _>>()
            .map_err(RunError::LogHandles)
    }
}

/// Does what needs the privileges Quill started with, then gives them up: writes the pid file,
/// opens the access logs, chroots (`-j`) and changes user (`-u`). Then, as the user that will
/// need it, checks that IP_TRANSPARENT is allowed when a listener asks for it (every server
/// connection sets it: better to find out now than at the first client).
pub(super) fn privileges(sockets: &Sockets, g: &Global) -> Result<LogFiles, RunError> {
    write_pid_file(g)?;
    let logs = LogFiles::open(sockets.controller.shared())?;
    drop_privileges(g)?;
    let transparent = sockets
        .controller
        .config()
        .listeners
        .iter()
        .find(|l| l.tuning.transparent)
        .map(|l| l.what());
    if let Some(what) = transparent {
        crate::net::check_transparent().map_err(|source| RunError::Transparent { what, source })?;
    }
    Ok(logs)
}

/// Writes this process's id to the pid file (`-p`), if there is one.
pub(super) fn write_pid_file(g: &Global) -> Result<(), RunError> {
    if let Some(pid_file) = &g.pid_file {
        std::fs::write(pid_file, format!("{}\n", std::process::id())).map_err(|source| {
            RunError::PidFile {
                path: pid_file.clone(),
                source,
            }
        })?;
    }
    Ok(())
}

/// Chroot (`-j`) then change user (`-u`), after binding and opening files.
pub(super) fn drop_privileges(g: &Global) -> Result<(), RunError> {
    let ids = match &g.user {
        Some(user) => Some(
            sys::lookup_user(user)
                .map_err(|source| PrivilegeError::LookUp {
                    user: user.clone(),
                    source,
                })?
                .ok_or_else(|| PrivilegeError::UnknownUser { user: user.clone() })?,
        ),
        None => None,
    };
    if let Some(dir) = &g.chroot {
        sys::chroot(Path::new(dir)).map_err(|source| PrivilegeError::Chroot {
            dir: dir.clone(),
            source,
        })?;
    }
    if let (Some(ids), Some(user)) = (ids, &g.user) {
        sys::drop_privileges(ids).map_err(|source| PrivilegeError::BecomeUser {
            user: user.clone(),
            source,
        })?;
    }
    Ok(())
}

/// What runs once start-up is over: the threads started, and what the main loop needs of them.
pub(super) struct Threads {
    /// The running state, now sending lifecycle requests to the main loop.
    pub controller: Arc<Controller>,
    /// The control thread, if there is a control socket.
    pub control: Option<ControlHandle>,
    /// Where the workers, the signal thread and the controller send to the main loop.
    pub events: mpsc::Receiver<Msg>,
    /// Closes the signal thread's iterator.
    pub signals: Handle,
    /// The connection to the process taken over from, until [`Threads::announce`].
    handover: Option<UnixStream>,
}

impl Threads {
    /// Starts the resolver (when a server is a name), `g.workers` workers, the control thread,
    /// the health checker, the admin listener and the thread that forwards `signals`.
    pub(super) fn start(
        sockets: Sockets,
        logs: &LogFiles,
        signals: Signals,
        rebuild: Option<Rebuild>,
        g: &Global,
    ) -> Result<Threads, RunError> {
        let Sockets {
            controller,
            control,
            admin,
            handover,
        } = sockets;
        let shared = controller.shared().clone();
        let resolver = if has_server_names(&controller.config()) {
            Some(
                Resolver::start(shared.clone(), g.workers, resolver::THREADS)
                    .map_err(|source| thread_error(ThreadKind::Resolver, source))?,
            )
        } else {
            None
        };
        let (tx, events) = mpsc::channel();
        let wakers = accept_rings(g.accept, g.workers)?
            .into_iter()
            .enumerate()
            .map(|(id, ring)| start_worker(id, ring, &shared, logs, resolver.clone(), tx.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let _ = shared.wakers.set(wakers);
        let controller = Arc::new(controller.with_events(tx.clone()).with_rebuild(rebuild));
        let control = match control {
            Some(socket) => Some(
                control::spawn(socket, controller.clone())
                    .map_err(|source| thread_error(ThreadKind::Control, source))?,
            ),
            None => None,
        };
        crate::health::spawn(controller.clone())
            .map_err(|source| thread_error(ThreadKind::HealthChecker, source))?;
        if let Some(Admin { socket, token }) = admin {
            crate::admin::spawn(socket, shared.clone(), token)
                .map_err(|source| thread_error(ThreadKind::Admin, source))?;
        }
        let signals = forward_signals(signals, tx)?;
        Ok(Threads {
            controller,
            control,
            events,
            signals,
            handover,
        })
    }

    /// Logs what is served, lets the process taken over from drain (this one serves now), and
    /// tells systemd Quill is ready.
    pub(super) fn announce(&mut self, limits: &Limits, workers: usize) {
        let shared = self.controller.shared();
        for l in shared.listeners.load().iter() {
            let shown = l
                .socket
                .local_addr()
                .map_or_else(|| l.addr.to_string(), |a| a.to_string());
            let pool = l.load_pool();
            tracing::info!(
                "ready: listener '{}' on {shown}, {} server(s), mode {}",
                l.name,
                pool.servers.len(),
                pool.mode
            );
        }
        tracing::info!(
            "ready: {workers} worker(s), at most {} sessions, {} open files allowed",
            limits.max_sessions,
            limits.nofile
        );
        if let Some(conn) = self.handover.take() {
            takeover::finish_takeover(conn);
            tracing::info!("took over from the previous process; it is draining");
        }
        systemd::notify("READY=1");
    }
}

/// A thread (or the service on it) that could not be started.
fn thread_error(what: ThreadKind, source: std::io::Error) -> RunError {
    RunError::Thread { what, source }
}

/// Each worker's ring for accepting TCP clients (`accept`): none with `epoll`, nor with `auto`
/// when the kernel refuses io_uring (said once); with `io_uring` that is an error.
fn accept_rings(mode: AcceptMode, workers: usize) -> Result<Vec<Option<AcceptRing>>, RunError> {
    if mode == AcceptMode::Epoll {
        return Ok((0..workers).map(|_| None).collect());
    }
    match (0..workers).map(|_| AcceptRing::new().map(Some)).collect() {
        Ok(rings) => Ok(rings),
        Err(e) if mode == AcceptMode::Auto => {
            tracing::info!("accept: io_uring unavailable ({e}); accepting through epoll");
            Ok((0..workers).map(|_| None).collect())
        }
        Err(e) => Err(RunError::Uring(e)),
    }
}

/// Starts worker `id` on its own thread (telling `done` when it returns); its waker.
fn start_worker(
    id: usize,
    ring: Option<AcceptRing>,
    shared: &Arc<Shared>,
    logs: &LogFiles,
    resolver: Option<Arc<Resolver>>,
    done: mpsc::Sender<Msg>,
) -> Result<Arc<Waker>, RunError> {
    let poll = Poll::new().map_err(RunError::Epoll)?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(RunError::Waker)?);
    let log = logs.for_worker()?;
    panics::install_hook();
    let w = Worker::new(id, poll, ring, shared.clone(), log, resolver, waker.clone())
        .map_err(|source| RunError::Worker { id, source })?;
    thread::Builder::new()
        .name(format!("quill-worker-{id}"))
        .spawn(move || {
            w.run();
            let _ = done.send(Msg::WorkerDone);
        })
        .map_err(|source| thread_error(ThreadKind::Worker, source))?;
    Ok(waker)
}

/// Forwards every signal of `signals` to the main loop through `to`, on a thread of its own;
/// the handle that stops it.
fn forward_signals(mut signals: Signals, to: mpsc::Sender<Msg>) -> Result<Handle, RunError> {
    let handle = signals.handle();
    thread::Builder::new()
        .name("quill-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if to.send(Msg::Signal(sig)).is_err() {
                    return;
                }
            }
        })
        .map_err(|source| thread_error(ThreadKind::Signals, source))?;
    Ok(handle)
}

/// Whether a server is given by a name resolved for each session (socket-proxyd's form): only
/// then are resolver threads needed.
fn has_server_names(config: &Config) -> bool {
    config
        .listeners
        .iter()
        .flat_map(|l| &l.servers)
        .any(|s| matches!(s.addr, BackendAddr::Name { .. }))
}

#[cfg(test)]
#[path = "startup_tests.rs"]
mod tests;
