//! Start-up and the process lifecycle. [`run`] starts Quill in phases ([`startup`]: the
//! descriptor limit, the sockets taken over, inherited or bound, the pid file, access logs and
//! privileges, the threads), then hands over to [`main_loop`], which turns signals and control
//! requests into reloads, log reopens, drains and stops. A DSR process starts its own way
//! ([`dsr`]).

mod balance;
mod dsr;
mod main_loop;
pub(crate) mod panics;
pub(crate) mod resolver;
mod startup;
mod timers;
pub(crate) mod worker;

use std::path::PathBuf;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::Signals;

use crate::config::Config;
use crate::state::{Rebuild, RunError};
use crate::systemd::Inherited;
use main_loop::MainLoop;
use startup::{Limits, Sockets, Threads};

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

/// Runs Quill with `config` until it has stopped: start-up in phases (see [`startup`]), then the
/// main loop until the last worker is done. A DSR configuration starts its own way ([`dsr`]).
pub(crate) fn run(config: Config, start: Start) -> Result<(), RunError> {
    if config.listeners.iter().any(|l| l.dsr().is_some()) {
        // Frames, not sessions: no listening socket, workers or control socket (see `dsr`).
        return dsr::run(&config);
    }
    // Before anything can be reached from outside: a SIGHUP that arrives during start-up must
    // queue, not kill the process.
    let signals =
        Signals::new([SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2]).map_err(RunError::Signals)?;
    let g = config.global.clone();
    let limits = Limits::derive(&config);
    let Start {
        rebuild,
        takeover,
        inherited,
    } = start;
    let sockets = Sockets::gather(config, takeover.as_deref(), inherited, &limits)?;
    let logs = startup::privileges(&sockets, &g)?;
    let mut threads = Threads::start(sockets, &logs, signals, rebuild, &g)?;
    threads.announce(&limits, g.workers);
    MainLoop::new(threads, &g).run();
    Ok(())
}
