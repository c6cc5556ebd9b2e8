//! Start-up and the process lifecycle: raise the descriptor limit, bind every listener, write the pid
//! file, drop privileges, start the workers, then turn signals into drain, stop and log reopening.

pub mod shared;
pub mod worker;

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::thread;

use arc_swap::ArcSwap;
use mio::{Poll, Waker};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
use signal_hook::iterator::Signals;

use crate::backend::Pool;
use crate::clock::{millis, Clock};
use crate::config::Config;
use crate::listener::{self, BindOptions, ListenSocket};
use crate::metrics;
use crate::sys;
use shared::{Phase, Shared};
use worker::{Worker, WAKER};

/// Descriptors kept back from sessions: listeners, epoll and waker per worker, logs, splice pipes.
const FD_RESERVE: u64 = 64;
/// Splice pipes a worker may keep (two descriptors each).
pub(crate) const PIPES_PER_WORKER: usize = 32;

/// A failure to start or run (exit status 1).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RunError(pub String);

enum Msg {
    Signal(i32),
    WorkerDone,
}

/// How many sessions fit in `nofile` descriptors: two sockets each, after the reserve.
fn sessions_for(nofile: u64, workers: u64, listeners: u64) -> u64 {
    let reserve = FD_RESERVE + listeners + workers * (2 + 2 * PIPES_PER_WORKER as u64);
    nofile.saturating_sub(reserve) / 2
}

/// Runs Quill with `config` until a stop signal has been handled.
pub fn run(config: Config) -> Result<(), RunError> {
    let g = &config.global;
    let nofile = sys::raise_nofile_limit().unwrap_or(1024);
    let fit = sessions_for(nofile, g.workers as u64, config.listeners.len() as u64);
    let max_sessions = match g.max_connections {
        Some(x) if u64::from(x) > fit => {
            tracing::warn!(
                "-x {x} needs about {} open files but the limit is {nofile}: sessions past {fit} will be refused by the system (raise LimitNOFILE or run several processes with --reuseport)",
                2 * u64::from(x) + (nofile - 2 * fit)
            );
            u64::from(x)
        }
        Some(x) => u64::from(x),
        None => fit,
    };
    let mut sockets = Vec::new();
    for l in &config.listeners {
        let opts = BindOptions {
            backlog: g.backlog,
            reuseport: g.reuseport,
            tfo: g.tfo,
            nodelay: l.tuning.tcp_nodelay,
            keepalive: l.tuning.keepalive,
        };
        let socket = listener::bind(&l.listen, &opts)
            .map_err(|e| RunError(format!("cannot listen on {}: {e}", l.listen)))?;
        sockets.push(Arc::new(socket));
    }
    if let Some(pid_file) = &g.pid_file {
        std::fs::write(pid_file, format!("{}\n", std::process::id()))
            .map_err(|e| RunError(format!("cannot write pid file {}: {e}", pid_file.display())))?;
    }
    let log_file = match &g.log {
        Some(path) => Some(
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| RunError(format!("cannot open access log {}: {e}", path.display())))?,
        ),
        None => None,
    };
    drop_privileges(&config)?;
    let clock = Clock::default();
    let now = clock.now_ms();
    let pools = config
        .listeners
        .iter()
        .map(|l| ArcSwap::from_pointee(Pool::from_config(l, now)))
        .collect();
    let shared = Arc::new(Shared::new(clock, pools, max_sessions, g));

    let (tx, rx) = mpsc::channel();
    let mut wakers = Vec::new();
    for id in 0..g.workers {
        let poll =
            Poll::new().map_err(|e| RunError(format!("cannot create epoll instance: {e}")))?;
        let waker = Waker::new(poll.registry(), WAKER)
            .map_err(|e| RunError(format!("cannot create waker: {e}")))?;
        let log = log_file
            .as_ref()
            .map(|f| f.try_clone())
            .transpose()
            .map_err(|e| RunError(format!("access log: {e}")))?;
        let w = Worker::new(id, poll, shared.clone(), &sockets, log)
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
    let mut signals = Signals::new([SIGTERM, SIGINT, SIGHUP, SIGUSR1])
        .map_err(|e| RunError(format!("cannot handle signals: {e}")))?;
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
    for (l, s) in config.listeners.iter().zip(&sockets) {
        let shown = s
            .local_addr()
            .map_or_else(|| l.listen.to_string(), |a| a.to_string());
        tracing::info!(
            "ready: listener '{}' on {shown}, {} server(s), mode {}",
            l.name,
            l.servers.len(),
            l.mode
        );
    }
    tracing::info!(
        "ready: {} worker(s), at most {max_sessions} sessions, {nofile} open files allowed",
        g.workers
    );

    let wake_all = || {
        for w in &wakers {
            let _ = w.wake();
        }
    };
    let mut sockets = Some(sockets);
    let mut running = g.workers;
    while running > 0 {
        match rx.recv() {
            Ok(Msg::WorkerDone) => running -= 1,
            Ok(Msg::Signal(SIGTERM | SIGINT)) if shared.phase() == Phase::Running => {
                let deadline = shared
                    .clock
                    .now_ms()
                    .saturating_add(millis(g.drain_timeout));
                shared.drain_deadline_ms.store(deadline, Ordering::Relaxed);
                shared.set_phase(Phase::Draining);
                wake_all();
                if let Some(sockets) = sockets.take() {
                    remove_socket_files(&sockets);
                }
                tracing::info!(
                    "stopping: no new sessions; {} open session(s) may finish within {}s (signal again to stop now)",
                    shared.active.load(Ordering::Relaxed),
                    g.drain_timeout.as_secs()
                );
            }
            Ok(Msg::Signal(SIGTERM | SIGINT)) => {
                shared.set_phase(Phase::Stopping);
                wake_all();
                tracing::info!("stopping now");
            }
            Ok(Msg::Signal(SIGHUP)) => {
                shared.log_generation.fetch_add(1, Ordering::Relaxed);
                wake_all();
                tracing::info!("SIGHUP: reopening logs");
            }
            Ok(Msg::Signal(_)) => tracing::info!("{}", metrics::summary(&shared.counters)),
            Err(_) => break,
        }
    }
    signal_handle.close();
    if let Some(sockets) = sockets.take() {
        remove_socket_files(&sockets);
    }
    if let Some(pid_file) = &g.pid_file {
        if let Err(e) = std::fs::remove_file(pid_file) {
            tracing::warn!("cannot remove pid file {}: {e}", pid_file.display());
        }
    }
    tracing::info!("stopped: {}", metrics::summary(&shared.counters));
    Ok(())
}

fn remove_socket_files(sockets: &[Arc<ListenSocket>]) {
    for path in sockets.iter().filter_map(|s| s.path()) {
        let _ = std::fs::remove_file(path);
    }
}

/// Chroot (`-j`) then change user (`-u`), after binding and opening files.
fn drop_privileges(config: &Config) -> Result<(), RunError> {
    let g = &config.global;
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
