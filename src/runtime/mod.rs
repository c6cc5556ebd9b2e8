//! Start-up and the process lifecycle: raise the descriptor limit, bind (or inherit) every
//! listener, write the pid file, drop privileges, start the workers, the control socket, the health
//! checker and the admin listener, then turn signals and control requests into reloads, log reopens,
//! drains and stops.

pub(crate) mod panics;
pub(crate) mod resolver;
mod timers;
pub(crate) mod worker;

use std::fs::OpenOptions;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use mio::{Poll, Waker};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::Signals;

use crate::clock::{millis, Clock};
use crate::config::Config;
use crate::control;
use crate::metrics;
use crate::state::controller::Controller;
use crate::state::shared::{self, Phase, Shared};
use crate::state::{Msg, Rebuild, RunError};
use crate::status;
use crate::sys;
use crate::systemd::{self, Inherited};
use crate::takeover::{self, ADMIN_NAME};
use worker::{Worker, WAKER};

/// Descriptors kept back from sessions for the process itself: standard streams, access log and
/// its per-worker copies, status file, pid file, signal pipe, the control socket and the admin
/// listener, the health checker's and the control thread's event loops, resolver threads.
/// Listeners, servers (one health probe each) and workers are added to it by `sessions_for`.
const FD_RESERVE: u64 = 32;
/// Descriptors kept for connections to the control socket and the admin listener (each serves a
/// bounded number at once) and the spare each keeps to refuse clients cleanly on EMFILE: sessions
/// never take these, so running out of descriptors on the data path never starves them.
const FD_CONTROL_ADMIN: u64 = 64;
/// Splice pipes a worker may keep (two descriptors each).
pub(crate) const PIPES_PER_WORKER: usize = 32;

/// How the process was started, beyond its configuration.
#[derive(Default)]
pub(crate) struct Start {
    /// How to rebuild the configuration on SIGHUP or `reload`; None = keep the running one.
    pub rebuild: Option<Rebuild>,
    /// Take the listening sockets over from the Quill process behind this control socket.
    pub takeover: Option<PathBuf>,
    /// Sockets already taken from systemd (the socket-proxyd form); None = look for them here.
    pub inherited: Option<Vec<Inherited>>,
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

/// Runs Quill with `config` until it has stopped.
pub(crate) fn run(config: Config, start: Start) -> Result<(), RunError> {
    if config.listeners.iter().any(|l| l.dsr().is_some()) {
        // Frames, not sessions: no listening socket, workers or control socket (see `dsr`).
        let opened = crate::dsr::open(&config)?;
        // The packet sockets are open: what follows needs no privilege.
        if let Some(pid_file) = &config.global.pid_file {
            std::fs::write(pid_file, format!("{}\n", std::process::id())).map_err(|e| {
                RunError(format!("cannot write pid file {}: {e}", pid_file.display()))
            })?;
        }
        drop_privileges(&config.global)?;
        return crate::dsr::serve(opened);
    }
    let g = config.global.clone();
    // Before anything can be reached from outside: a SIGHUP that arrives during start-up must
    // queue, not kill the process.
    let mut signals = Signals::new([SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2])
        .map_err(|e| RunError(format!("cannot handle signals: {e}")))?;
    let resolves_names = has_server_names(&config);
    let transparent = config
        .listeners
        .iter()
        .find(|l| l.tuning.transparent)
        .map(|l| l.what());
    let nofile = sys::raise_nofile_limit().unwrap_or(1024);
    let servers = config
        .listeners
        .iter()
        .map(|l| l.servers.len() as u64)
        .sum();
    let fit = sessions_for(
        nofile,
        g.workers as u64,
        config.listeners.len() as u64,
        servers,
    );
    let max_sessions = session_limit(g.max_connections, nofile, fit);

    // Sockets come from the process we take over from, from systemd, or are bound here.
    let mut handover = None;
    let mut inherited: Vec<Inherited> = match &start.takeover {
        Some(path) => {
            let (fds, conn) =
                takeover::request_takeover(path).map_err(|e| RunError(format!("takeover: {e}")))?;
            handover = Some(conn);
            vet_handed_over(fds, &config)
        }
        None => match start.inherited {
            Some(fds) => fds,
            None => {
                systemd::listen_fds().map_err(|e| RunError(format!("socket activation: {e}")))?
            }
        },
    };
    if !inherited.is_empty() {
        tracing::info!("inherited {} listening socket(s)", inherited.len());
    }
    let systemd_files = match &start.takeover {
        Some(_) => Vec::new(),
        None => socket_files(&inherited),
    };
    let control_socket = match &g.control {
        Some(addr) => Some(
            control::open(addr, &mut inherited)
                .map_err(|e| RunError(format!("cannot open control socket {addr}: {e}")))?,
        ),
        None => None,
    };
    let clock = Clock::default();
    let controller = Controller::start(config, clock, max_sessions, &mut inherited)?;
    let shared = controller.shared().clone();
    // A later `conn_max` or reload cannot take sessions past the open-file limit either.
    shared.fd_sessions.store(fit, Ordering::Relaxed);
    let _ = shared.systemd_files.set(systemd_files);
    let admin_socket = match g.admin {
        Some(addr) => {
            let at = crate::addr::ListenAddr::Tcp(addr);
            let socket =
                match systemd::take_named(&mut inherited, ADMIN_NAME, &at, "admin listener") {
                    Some(fd) => std::net::TcpListener::from(fd),
                    None => std::net::TcpListener::bind(addr)
                        .map_err(|e| RunError(format!("cannot open admin listener {addr}: {e}")))?,
                };
            let socket = Arc::new(socket);
            let _ = shared.admin_socket.set(socket.clone());
            Some(socket)
        }
        None => None,
    };
    // Read before privileges are dropped: the token file may be readable by root only.
    let admin_token = match (&admin_socket, &g.admin_token_file) {
        (Some(_), Some(path)) => Some(crate::admin::Token::load(path).map_err(RunError)?),
        _ => None,
    };
    for rest in &inherited {
        tracing::warn!(
            "inherited socket {} matches no listener; closing it",
            rest.name.as_deref().unwrap_or("(unnamed)")
        );
    }
    drop(inherited);

    if let Some(pid_file) = &g.pid_file {
        std::fs::write(pid_file, format!("{}\n", std::process::id()))
            .map_err(|e| RunError(format!("cannot write pid file {}: {e}", pid_file.display())))?;
    }
    // Every access log file (the process-wide one and the listeners' own), opened before
    // privileges are dropped; each worker holds its own handles on them.
    let log_plan = shared
        .access_log
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut log_files = Vec::new();
    for (path, _) in &log_plan.files {
        log_files.push(
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| RunError(format!("cannot open access log {}: {e}", path.display())))?,
        );
    }
    drop_privileges(&g)?;
    if let Some(what) = transparent {
        // Every server connection sets IP_TRANSPARENT: find out now, not at the first client.
        crate::net::check_transparent()
            .map_err(|e| RunError(format!("{what}: transparent: {e}")))?;
    }

    let resolver = if resolves_names {
        Some(
            resolver::Resolver::start(shared.clone(), g.workers, resolver::THREADS)
                .map_err(|e| RunError(format!("cannot start resolver threads: {e}")))?,
        )
    } else {
        None
    };
    let (tx, rx) = mpsc::channel();
    let mut wakers = Vec::new();
    for id in 0..g.workers {
        let poll =
            Poll::new().map_err(|e| RunError(format!("cannot create epoll instance: {e}")))?;
        let waker = Waker::new(poll.registry(), WAKER)
            .map_err(|e| RunError(format!("cannot create waker: {e}")))?;
        let log = log_files
            .iter()
            .map(|f| f.try_clone())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| RunError(format!("access log: {e}")))?;
        panics::install_hook();
        let w = Worker::new(id, poll, shared.clone(), log, resolver.clone())
            .map_err(|e| RunError(format!("worker {id}: {e}")))?;
        let tx = tx.clone();
        thread::Builder::new()
            .name(format!("quill-worker-{id}"))
            .spawn(move || {
                w.run();
                let _ = tx.send(Msg::WorkerDone);
            })
            .map_err(|e| RunError(format!("cannot start worker thread: {e}")))?;
        wakers.push(waker);
    }
    let _ = shared.wakers.set(wakers);
    let controller = Arc::new(
        controller
            .with_events(tx.clone())
            .with_rebuild(start.rebuild),
    );

    let control = match control_socket {
        Some(socket) => Some(
            control::spawn(socket, controller.clone())
                .map_err(|e| RunError(format!("cannot start control thread: {e}")))?,
        ),
        None => None,
    };
    crate::health::spawn(shared.clone())
        .map_err(|e| RunError(format!("cannot start health checker: {e}")))?;
    if let Some(socket) = admin_socket {
        crate::admin::spawn(socket, shared.clone(), admin_token)
            .map_err(|e| RunError(format!("cannot start admin listener: {e}")))?;
    }

    let signal_handle = signals.handle();
    let signal_tx = tx.clone();
    thread::Builder::new()
        .name("quill-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if signal_tx.send(Msg::Signal(sig)).is_err() {
                    return;
                }
            }
        })
        .map_err(|e| RunError(format!("cannot start signal thread: {e}")))?;
    drop(tx);

    for l in shared.listeners.load().iter() {
        let shown = l
            .socket
            .local_addr()
            .map_or_else(|| l.addr.to_string(), |a| a.to_string());
        let pool = l.pool.load();
        tracing::info!(
            "ready: listener '{}' on {shown}, {} server(s), mode {}",
            l.name,
            pool.servers.len(),
            pool.mode
        );
    }
    tracing::info!(
        "ready: {} worker(s), at most {max_sessions} sessions, {nofile} open files allowed",
        g.workers
    );
    if let Some(conn) = handover {
        // We serve now: the old process may drain.
        takeover::finish_takeover(conn);
        tracing::info!("took over from the previous process; it is draining");
    }
    systemd::notify("READY=1");

    let watchdog = systemd::watchdog_interval();
    let exit_idle = g.exit_idle_time;
    let tick = match (watchdog, exit_idle) {
        (Some(w), _) => Some(w.min(Duration::from_secs(1))),
        (None, Some(_)) => Some(Duration::from_millis(250)),
        (None, None) => None,
    };
    let mut next_watchdog = Instant::now();
    // When the workers were last woken to prove they are alive (clock ms).
    let mut poked_ms = 0;
    let mut running = g.workers;
    while running > 0 {
        let msg = match tick {
            Some(t) => match rx.recv_timeout(t) {
                Ok(m) => Some(m),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            },
            None => match rx.recv() {
                Ok(m) => Some(m),
                Err(_) => break,
            },
        };
        if let Some(w) = watchdog {
            if Instant::now() >= next_watchdog {
                // Ping only while every event loop answered the previous wake-up: a stuck worker
                // lets systemd's watchdog fire.
                let stuck = shared
                    .heartbeats
                    .iter()
                    .position(|h| h.load(Ordering::Relaxed) < poked_ms);
                match stuck {
                    None => systemd::notify("WATCHDOG=1"),
                    Some(id) => tracing::warn!(
                        "worker {id} has not answered for {} ms: not pinging the watchdog",
                        shared.clock.now_ms().saturating_sub(poked_ms)
                    ),
                }
                poked_ms = shared.clock.now_ms();
                shared.wake_all();
                next_watchdog = Instant::now() + w;
            }
        }
        if let (Some(limit), Phase::Running) = (exit_idle, shared.phase()) {
            // An open UDP flow is a session too: idle counts from the last tick that saw one.
            if shared
                .listeners
                .load()
                .iter()
                .any(|l| l.flows.load(Ordering::Relaxed) > 0)
            {
                shared
                    .last_busy_ms
                    .store(shared.clock.now_ms(), Ordering::Relaxed);
            }
            let idle_ms = shared
                .clock
                .now_ms()
                .saturating_sub(shared.last_busy_ms.load(Ordering::Relaxed));
            if shared.active.load(Ordering::Relaxed) == 0 && idle_ms >= millis(limit) {
                tracing::info!(
                    "no session for {}: exiting (--exit-idle-time)",
                    crate::config::format_duration(limit)
                );
                drain(&shared, &controller.config().global, false);
            }
        }
        match msg {
            None => {}
            Some(Msg::WorkerDone) => running -= 1,
            Some(Msg::Signal(SIGTERM | SIGINT) | Msg::Exit) if shared.phase() == Phase::Running => {
                drain(&shared, &controller.config().global, false)
            }
            Some(Msg::HandedOver) if shared.phase() == Phase::Running => {
                drain(&shared, &controller.config().global, true)
            }
            Some(Msg::Signal(SIGTERM | SIGINT) | Msg::Exit) => {
                shared.set_phase(Phase::Stopping);
                shared.wake_all();
                tracing::info!("stopping now");
            }
            Some(Msg::HandedOver) => {}
            Some(Msg::Signal(SIGHUP)) => {
                systemd::notify_reloading();
                match controller.reload() {
                    Ok(summary) => tracing::info!("SIGHUP: reloaded: {summary}"),
                    Err(e) => tracing::error!(
                        "SIGHUP: reload rejected, still running the previous configuration: {e}"
                    ),
                }
                systemd::notify("READY=1");
            }
            // Log rotation: reopen the access log, change nothing else.
            Some(Msg::Signal(SIGUSR2)) => {
                controller.reopen();
                tracing::info!("SIGUSR2: access log reopened");
            }
            Some(Msg::Signal(_)) => {
                tracing::info!("{}", metrics::summary(&shared.counters));
                if let Err(e) = status::write_file(&controller) {
                    tracing::warn!("{e}");
                }
            }
        }
    }
    signal_handle.close();
    let handed_over = shared.handed_over.load(Ordering::Relaxed);
    if !handed_over {
        remove_socket_files(&shared);
        if let Some(path) = control.as_ref().and_then(|c| c.path()) {
            if !shared.is_systemd_file(path) {
                crate::listener::remove_socket_file(path);
            }
        }
    }
    if let Some(pid_file) = &g.pid_file {
        // After a takeover the new process may have written its own pid here already.
        let ours = std::fs::read_to_string(pid_file)
            .is_ok_and(|s| s.trim() == std::process::id().to_string());
        if ours {
            if let Err(e) = std::fs::remove_file(pid_file) {
                tracing::warn!("cannot remove pid file {}: {e}", pid_file.display());
            }
        }
    }
    tracing::info!("stopped: {}", metrics::summary(&shared.counters));
    Ok(())
}

/// Whether a server is given by a name resolved for each session (socket-proxyd's form): only
/// then are resolver threads needed.
fn has_server_names(config: &Config) -> bool {
    config
        .listeners
        .iter()
        .flat_map(|l| &l.servers)
        .any(|s| matches!(s.addr, crate::addr::BackendAddr::Name { .. }))
}

/// Stops accepting and lets open sessions finish within the drain timeout (idle HTTP clients
/// within the drain grace, see `Worker::start_drain`). After a handover the sockets live on in
/// the new process: their files stay.
fn drain(shared: &Shared, g: &crate::config::Global, handover: bool) {
    let deadline = shared
        .clock
        .now_ms()
        .saturating_add(millis(g.drain_timeout));
    shared.drain_deadline_ms.store(deadline, Ordering::Relaxed);
    shared.drain_grace_ms.store(
        millis(g.drain_grace.min(g.drain_timeout)),
        Ordering::Relaxed,
    );
    if handover {
        shared.handed_over.store(true, Ordering::Relaxed);
    } else {
        remove_socket_files(shared);
    }
    let drained = shared
        .listeners
        .load()
        .iter()
        .map(|l| shared::DrainedListener {
            name: l.name.clone(),
            addr: l.addr.clone(),
            pool: l.pool.load_full(),
            http: l.http.clone(),
        })
        .collect();
    shared.drained.store(Arc::new(drained));
    shared.set_phase(Phase::Draining);
    systemd::notify("STOPPING=1");
    shared.wake_all();
    shared.listeners.store(Arc::new(Vec::new()));
    tracing::info!(
        "stopping: no new sessions; {} open session(s) may finish within {}s (signal again to stop now)",
        shared.active.load(Ordering::Relaxed),
        g.drain_timeout.as_secs()
    );
}

/// Removes the files of the Unix sockets Quill bound; those systemd bound stay.
fn remove_socket_files(shared: &Shared) {
    for l in shared.listeners.load().iter() {
        if let Some(path) = l.socket.path() {
            if !shared.is_systemd_file(path) {
                crate::listener::remove_socket_file(path);
            }
        }
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
                Ok(at) if crate::addr::ListenAddr::Tcp(at) == l.listen => kept.push(socket),
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

/// Chroot (`-j`) then change user (`-u`), after binding and opening files.
fn drop_privileges(g: &crate::config::Global) -> Result<(), RunError> {
    let ids = match &g.user {
        Some(user) => Some(
            sys::lookup_user(user)
                .map_err(|e| RunError(format!("cannot look up user '{user}': {e}")))?
                .ok_or_else(|| RunError(format!("unknown user '{user}'")))?,
        ),
        None => None,
    };
    if let Some(dir) = &g.chroot {
        sys::chroot(Path::new(dir))
            .map_err(|e| RunError(format!("cannot chroot to {}: {e}", dir.display())))?;
    }
    if let (Some(ids), Some(user)) = (ids, &g.user) {
        sys::drop_privileges(ids)
            .map_err(|e| RunError(format!("cannot become user '{user}': {e}")))?;
    }
    Ok(())
}
