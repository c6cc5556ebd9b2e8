//! What all workers share: the listeners and their pools (swapped atomically), the session count
//! against `-x`, the process phase, the log settings and the counters. Atomics only on the data
//! path; the control thread talks to a worker through its inbox and waker.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;
use mio::Waker;

use crate::addr::ListenAddr;
use crate::backend::Pool;
use crate::clock::Clock;
use crate::config::{Global, LogFormat};
use crate::listener::ListenSocket;
use crate::metrics::Counters;

/// Where the process is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Running,
    /// Not accepting; open sessions finish until the drain deadline.
    Draining,
    /// Closing everything now.
    Stopping,
}

/// A listening socket and the pool behind it.
#[derive(Debug)]
pub struct Listener {
    /// Unique for the life of the process (workers key their registrations on it).
    pub id: u64,
    pub name: String,
    pub addr: ListenAddr,
    pub socket: ListenSocket,
    pub pool: ArcSwap<Pool>,
}

/// One open session, as `connections` and `connection N` show it.
#[derive(Clone, Debug)]
pub struct SessionInfo {
    pub id: u64,
    pub listener: String,
    pub client: String,
    pub server: Option<String>,
    pub age_ms: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// resolving, connecting, open, half-closed
    pub state: &'static str,
}

/// What a worker reports when asked.
#[derive(Debug, Default)]
pub struct Report {
    pub sessions: Vec<SessionInfo>,
    /// Recently accepted clients: address and Unix time.
    pub recent: Vec<(IpAddr, u64)>,
}

/// A question or order for one worker, answered on the channel it carries.
#[derive(Debug)]
pub enum Request {
    Report(mpsc::Sender<Report>),
    /// Close session `id` if this worker has it; answers whether it did.
    Close(u64, mpsc::Sender<bool>),
}

pub struct Shared {
    pub clock: Clock,
    /// The listeners, in configuration order. Replaced whole when one is added or removed.
    pub listeners: ArcSwap<Vec<Arc<Listener>>>,
    /// Sessions allowed at once (`-x`, `conn_max`).
    pub max_sessions: AtomicU64,
    pub active: AtomicU64,
    pub accept_batch: u32,
    /// Whether bulk flows use splice pipes.
    pub splice: bool,
    phase: AtomicU8,
    pub drain_deadline_ms: AtomicU64,
    /// Bumped when the access log must be reopened (SIGHUP, `log FILE`, reload).
    pub log_generation: AtomicU64,
    /// The access log's path and format, read by workers when the generation moves.
    pub access_log: Mutex<(Option<PathBuf>, LogFormat)>,
    /// One per worker.
    pub counters: Vec<Counters>,
    /// One per worker: requests from the control thread; None once the worker has stopped.
    pub inboxes: Vec<Mutex<Option<Vec<Request>>>>,
    /// One per worker, set once the workers exist.
    pub wakers: OnceLock<Vec<Waker>>,
    /// Set when a new process took the sockets over: the socket files belong to it now.
    pub handed_over: AtomicBool,
    /// Clock ms when the last session ended or the process started (for `--exit-idle-time`).
    pub last_busy_ms: AtomicU64,
    /// Unix time the process started.
    pub started_unix: u64,
    /// One per worker: clock ms when it last answered a wake-up (u64::MAX once it has stopped).
    /// The watchdog pings systemd only while every worker answers.
    pub heartbeats: Vec<AtomicU64>,
    /// Files of the Unix sockets systemd passed: they belong to the socket unit, never removed.
    pub systemd_files: OnceLock<Vec<PathBuf>>,
    /// The admin listener, kept here so a takeover can hand it over.
    pub admin_socket: OnceLock<Arc<std::net::TcpListener>>,
    /// What the listeners were when the drain began: status keeps showing the pools while their
    /// sessions finish (the listener list itself is emptied so the sockets close).
    pub drained: ArcSwap<Vec<DrainedListener>>,
}

/// A listener that no longer accepts, as status reports show it during a drain.
#[derive(Debug)]
pub struct DrainedListener {
    pub name: String,
    pub addr: ListenAddr,
    pub pool: Arc<Pool>,
}

impl Shared {
    /// Shared state for `g.workers` workers over `listeners`.
    pub fn new(
        clock: Clock,
        listeners: Vec<Arc<Listener>>,
        max_sessions: u64,
        g: &Global,
    ) -> Shared {
        Shared {
            clock,
            listeners: ArcSwap::from_pointee(listeners),
            max_sessions: AtomicU64::new(max_sessions),
            active: AtomicU64::new(0),
            accept_batch: g.accept_batch.max(1),
            splice: g.splice,
            phase: AtomicU8::new(0),
            drain_deadline_ms: AtomicU64::new(u64::MAX),
            log_generation: AtomicU64::new(0),
            access_log: Mutex::new((g.log.clone(), g.log_format)),
            counters: (0..g.workers).map(|_| Counters::default()).collect(),
            inboxes: (0..g.workers)
                .map(|_| Mutex::new(Some(Vec::new())))
                .collect(),
            wakers: OnceLock::new(),
            handed_over: AtomicBool::new(false),
            last_busy_ms: AtomicU64::new(clock.now_ms()),
            started_unix: crate::clock::unix_time(),
            heartbeats: (0..g.workers).map(|_| AtomicU64::new(0)).collect(),
            systemd_files: OnceLock::new(),
            admin_socket: OnceLock::new(),
            drained: ArcSwap::from_pointee(Vec::new()),
        }
    }

    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Acquire) {
            0 => Phase::Running,
            1 => Phase::Draining,
            _ => Phase::Stopping,
        }
    }

    pub fn set_phase(&self, phase: Phase) {
        let v = match phase {
            Phase::Running => 0,
            Phase::Draining => 1,
            Phase::Stopping => 2,
        };
        self.phase.store(v, Ordering::Release);
    }

    /// Wakes every worker (to look at the phase, the listeners, the log or its inbox).
    pub fn wake_all(&self) {
        for w in self.wakers.get().into_iter().flatten() {
            let _ = w.wake();
        }
    }

    /// Sends `make(reply)` to every worker and collects the answers (workers that have stopped
    /// answer nothing).
    pub fn ask_all<T>(&self, make: impl Fn(mpsc::Sender<T>) -> Request) -> Vec<T> {
        let (tx, rx) = mpsc::channel();
        for inbox in &self.inboxes {
            if let Some(queue) = inbox.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                queue.push(make(tx.clone()));
            }
        }
        drop(tx);
        self.wake_all();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut out = Vec::new();
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match rx.recv_timeout(left) {
                Ok(v) => out.push(v),
                Err(_) => break,
            }
        }
        out
    }

    /// The listener named `name`.
    pub fn listener(&self, name: &str) -> Option<Arc<Listener>> {
        self.listeners
            .load()
            .iter()
            .find(|l| l.name == name)
            .cloned()
    }
}

impl Shared {
    /// Whether `path` is the file of a socket systemd passed (never removed by Quill).
    pub fn is_systemd_file(&self, path: &std::path::Path) -> bool {
        self.systemd_files
            .get()
            .is_some_and(|files| files.iter().any(|f| f == path))
    }
}
