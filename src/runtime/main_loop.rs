//! The main thread once Quill serves: [`MainLoop`] waits for messages (a worker done, a signal,
//! `exit` or a handover from the control socket) and ticks (systemd's watchdog, the idle exit,
//! how many workers accept: [`balance`](super::balance)), turns them into reloads, log reopens, drains and stops, and cleans up when the last worker has
//! finished.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR2};
use signal_hook::iterator::Handle;

use super::balance::{self, Balancer};
use super::startup::Threads;
use crate::clock::millis;
use crate::config::Global;
use crate::control::ControlHandle;
use crate::metrics;
use crate::state::controller::Controller;
use crate::state::shared::{self, Phase, Shared};
use crate::state::Msg;
use crate::status;
use crate::systemd;

/// How often the idle exit (`--exit-idle-time`) is checked without a watchdog.
const IDLE_TICK: Duration = Duration::from_millis(250);
/// The longest wait between watchdog checks.
const WATCHDOG_TICK: Duration = Duration::from_secs(1);

/// The main thread's state while Quill serves.
pub(super) struct MainLoop {
    controller: Arc<Controller>,
    shared: Arc<Shared>,
    events: mpsc::Receiver<Msg>,
    signals: Handle,
    control: Option<ControlHandle>,
    /// The pid file written at start (`-p`), removed at the end while it holds this process's id.
    pid_file: Option<PathBuf>,
    /// systemd's watchdog interval (`WATCHDOG_USEC`), if it watches this process.
    watchdog: Option<Duration>,
    /// `--exit-idle-time`: exit after this long without a session.
    exit_idle: Option<Duration>,
    next_watchdog: Instant,
    /// When the workers were last woken to prove they are alive (clock ms).
    poked_ms: u64,
    /// Workers still running.
    running: usize,
    /// Decides how many workers accept clients (`concentrate`, with two workers or more).
    balancer: Option<Balancer>,
}

impl MainLoop {
    /// The loop over what start-up started, with the global settings it started with.
    pub(super) fn new(threads: Threads, g: &Global) -> MainLoop {
        let Threads {
            controller,
            control,
            events,
            signals,
            ..
        } = threads;
        let shared = controller.shared().clone();
        MainLoop {
            controller,
            shared,
            events,
            signals,
            control,
            pid_file: g.pid_file.clone(),
            watchdog: systemd::watchdog_interval(),
            exit_idle: g.exit_idle_time,
            next_watchdog: Instant::now(),
            poked_ms: 0,
            running: g.workers,
            balancer: g.gathers().then(Balancer::new),
        }
    }

    /// Runs until every worker has finished (or nothing can send any more), then cleans up.
    pub(super) fn run(mut self) {
        let mut tick = tick(self.watchdog, self.exit_idle);
        if self.balancer.is_some() {
            tick = Some(tick.map_or(balance::PERIOD, |t| t.min(balance::PERIOD)));
        }
        while self.running > 0 {
            let msg = match tick {
                Some(t) => match self.events.recv_timeout(t) {
                    Ok(m) => Some(m),
                    Err(mpsc::RecvTimeoutError::Timeout) => None,
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                },
                None => match self.events.recv() {
                    Ok(m) => Some(m),
                    Err(_) => break,
                },
            };
            self.on_tick();
            if let Some(msg) = msg {
                self.on_msg(msg);
            }
        }
        self.shut_down();
    }

    /// After every wake-up, with a message or not: the watchdog ping and the idle exit, when due.
    fn on_tick(&mut self) {
        self.ping_watchdog();
        self.exit_if_idle();
        self.balance();
    }

    /// Sets how many workers accept clients, when a sample of the CPUs calls for a change, and
    /// wakes the workers to follow it.
    fn balance(&mut self) {
        let Some(b) = self.balancer.as_mut() else {
            return;
        };
        if !matches!(self.shared.phase(), Phase::Running) {
            return;
        }
        let accepting = &self.shared.accepting.0;
        let workers = self.shared.loads.len();
        let sessions = self.shared.loads.iter().map(|l| l.get()).sum();
        if let Some(n) = b.tick(accepting.load(Ordering::Relaxed), workers, sessions) {
            accepting.store(n, Ordering::Relaxed);
            self.shared.wake_all();
        }
    }

    /// Pings systemd's watchdog when due, only while every event loop answered the previous
    /// wake-up (a stuck worker lets the watchdog fire), then wakes the workers again.
    fn ping_watchdog(&mut self) {
        let Some(w) = self.watchdog else {
            return;
        };
        if Instant::now() < self.next_watchdog {
            return;
        }
        let shared = &self.shared;
        let stuck = shared
            .heartbeats
            .iter()
            .position(|h| h.load(Ordering::Relaxed) < self.poked_ms);
        match stuck {
            None => systemd::notify("WATCHDOG=1"),
            Some(id) => tracing::warn!(
                "worker {id} has not answered for {} ms: not pinging the watchdog",
                shared.clock.now_ms().saturating_sub(self.poked_ms)
            ),
        }
        self.poked_ms = shared.clock.now_ms();
        shared.wake_all();
        self.next_watchdog = Instant::now() + w;
    }

    /// Drains once no session has been open for `--exit-idle-time` (while running).
    fn exit_if_idle(&self) {
        let (Some(limit), Phase::Running) = (self.exit_idle, self.shared.phase()) else {
            return;
        };
        let shared = &self.shared;
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
            drain(shared, &self.controller.config().global, false);
        }
    }

    /// One message from a worker, the signal thread or the controller.
    fn on_msg(&mut self, msg: Msg) {
        match msg {
            Msg::WorkerDone => self.running -= 1,
            Msg::Signal(sig) => self.on_signal(sig),
            Msg::Exit => self.stop(),
            // A new process has the sockets: drain, leaving their files to it.
            Msg::HandedOver => {
                if self.shared.phase() == Phase::Running {
                    drain(&self.shared, &self.controller.config().global, true);
                }
            }
        }
    }

    /// SIGTERM and SIGINT stop, SIGHUP reloads, SIGUSR2 reopens the access logs, and any other
    /// (SIGUSR1) logs the counters and writes the status file.
    fn on_signal(&mut self, sig: i32) {
        match sig {
            SIGTERM | SIGINT => self.stop(),
            SIGHUP => {
                systemd::notify_reloading();
                match self.controller.reload() {
                    Ok(summary) => tracing::info!("SIGHUP: reloaded: {summary}"),
                    Err(e) => tracing::error!(
                        "SIGHUP: reload rejected, still running the previous configuration: {e}"
                    ),
                }
                systemd::notify("READY=1");
            }
            // Log rotation: reopen the access log, change nothing else.
            SIGUSR2 => {
                self.controller.reopen();
                tracing::info!("SIGUSR2: access log reopened");
            }
            _ => {
                tracing::info!("{}", metrics::summary(&self.shared.counters));
                if let Err(e) = status::write_file(&self.controller) {
                    tracing::warn!("{e}");
                }
            }
        }
    }

    /// A stop request (SIGTERM, SIGINT, `exit`): the first drains, one while draining stops now.
    fn stop(&self) {
        let shared = &self.shared;
        if shared.phase() == Phase::Running {
            drain(shared, &self.controller.config().global, false);
            return;
        }
        shared.set_phase(Phase::Stopping);
        shared.wake_all();
        tracing::info!("stopping now");
    }

    /// Once the workers are done: stops the signal thread, removes the socket files Quill bound
    /// (unless a new process took them over) and the pid file (while it is still this
    /// process's), and logs the totals.
    fn shut_down(self) {
        self.signals.close();
        let shared = &self.shared;
        let handed_over = shared.handed_over.load(Ordering::Relaxed);
        if !handed_over {
            remove_socket_files(shared);
            if let Some(path) = self.control.as_ref().and_then(|c| c.path()) {
                if !shared.is_systemd_file(path) {
                    crate::listener::remove_socket_file(path);
                }
            }
        }
        if let Some(pid_file) = &self.pid_file {
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
    }
}

/// How long the main loop waits for a message at most, with systemd's `watchdog` interval and
/// `--exit-idle-time`: None when nothing needs a tick.
fn tick(watchdog: Option<Duration>, exit_idle: Option<Duration>) -> Option<Duration> {
    match (watchdog, exit_idle) {
        (Some(w), _) => Some(w.min(WATCHDOG_TICK)),
        (None, Some(_)) => Some(IDLE_TICK),
        (None, None) => None,
    }
}

/// Stops accepting and lets open sessions finish within the drain timeout (idle HTTP clients
/// within the drain grace, see `Worker::start_drain`). After a handover the sockets live on in
/// the new process: their files stay.
fn drain(shared: &Shared, g: &Global, handover: bool) {
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
            pool: l.load_pool_full(),
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

#[cfg(test)]
#[path = "main_loop_tests.rs"]
mod tests;
