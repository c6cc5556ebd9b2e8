//! Starting and reaping CGI children off the workers: one spawner thread per process, started
//! with the first script, runs `std::process::Command` (a fork and exec can take a millisecond: a
//! worker must not wait for it) and waits for every child it started.
//!
//! The worker makes the three pipes itself and keeps its ends (nonblocking, in its event loop);
//! the spawner gets the child's ends in a [`Job`]. When the spawn fails, the child's ends are
//! dropped with the job and the worker sees EOF on the script's stdout: the [`Child`] it shares
//! with the spawner then says why. Each child leads a process group of its own
//! (`process_group(0)`), which [`Child::kill`] ends whole (a script's own children included).
//!
//! Reaping: the spawner polls its children with `try_wait` every [`REAP_EVERY`] while it has any,
//! and blocks on its queue when it has none; the process-wide count of running children
//! ([`running`]) goes down when a child is reaped, so `max_children` bounds processes, not
//! requests.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// How often the spawner looks for children that exited, while it has any.
const REAP_EVERY: Duration = Duration::from_millis(10);

/// Children running in the whole process (started and not yet reaped, or about to start).
static RUNNING: AtomicU32 = AtomicU32::new(0);

/// The spawner's queue (the thread starts with the first job).
static SPAWNER: OnceLock<Mutex<Sender<Job>>> = OnceLock::new();

/// Counts a child about to be started, unless `max` are running already (the request gets 503).
pub(crate) fn admit(max: u32) -> bool {
    RUNNING
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .is_ok()
}

/// Uncounts a child counted by [`admit`] that will not be started after all (its request
/// failed before it was handed to the spawner).
pub(crate) fn release_unstarted() {
    RUNNING.fetch_sub(1, Ordering::AcqRel);
}

/// A child started for a request, as the worker and the spawner share it.
#[derive(Debug, Default)]
pub(crate) struct Child {
    state: Mutex<ChildState>,
}

#[derive(Debug, Default)]
struct ChildState {
    /// The process id (and process group id) once started.
    pid: Option<u32>,
    /// The spawner waited for it: its id may name another process now.
    reaped: bool,
    /// The worker gave up on it before it started: the spawner kills it at once.
    cancelled: bool,
    /// Why it could not be started.
    error: Option<String>,
}

impl Child {
    /// Kills the child's process group (SIGKILL), now or, if it is not started yet, as soon as
    /// it is. A child already reaped is left alone (its id may be another process's now).
    pub(crate) fn kill(&self) {
        let mut s = lock(&self.state);
        s.cancelled = true;
        if let (Some(pid), false) = (s.pid, s.reaped) {
            kill_group(pid);
        }
    }

    /// Why the child could not be started, if it could not.
    pub(crate) fn spawn_error(&self) -> Option<String> {
        lock(&self.state).error.clone()
    }
}

/// Locks a mutex whatever a panic elsewhere left in it (the state is a few flags).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// SIGKILL to the process group `pid` leads.
fn kill_group(pid: u32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// What the spawner starts: the script, its environment and directory, the child's ends of the
/// pipes, and the [`Child`] to tell the worker about.
#[derive(Debug)]
pub(crate) struct Job {
    pub program: PathBuf,
    pub dir: PathBuf,
    pub env: Vec<(Vec<u8>, Vec<u8>)>,
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    pub child: Arc<Child>,
}

/// Hands `job` to the spawner (starting its thread the first time). The caller counted the
/// child with [`admit`]; a job that cannot be handed over is uncounted here and its pipes
/// dropped (the worker sees EOF and the child's error).
pub(crate) fn spawn(job: Job) {
    let queue = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel();
        let started = std::thread::Builder::new()
            .name("quill-cgi".into())
            .spawn(move || spawner(rx));
        if let Err(e) = started {
            tracing::error!("cannot start the CGI spawner thread: {e}");
        }
        Mutex::new(tx)
    });
    if let Err(mpsc::SendError(job)) = lock(queue).send(job) {
        lock(&job.child.state).error = Some("the CGI spawner is not running".into());
        RUNNING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The spawner thread: starts the jobs it is sent and reaps the children it started.
fn spawner(jobs: Receiver<Job>) {
    let mut children: Vec<(std::process::Child, Arc<Child>)> = Vec::new();
    loop {
        let job = if children.is_empty() {
            jobs.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            jobs.recv_timeout(REAP_EVERY)
        };
        match job {
            Ok(job) => start(job, &mut children),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) if children.is_empty() => return,
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(REAP_EVERY),
        }
        reap(&mut children);
    }
}

/// Starts one job's child (or records why it could not start).
fn start(job: Job, children: &mut Vec<(std::process::Child, Arc<Child>)>) {
    let mut cmd = Command::new(&job.program);
    cmd.env_clear()
        .envs(
            job.env
                .iter()
                .map(|(n, v)| (OsStr::from_bytes(n), OsStr::from_bytes(v))),
        )
        .current_dir(&job.dir)
        .stdin(Stdio::from(job.stdin))
        .stdout(Stdio::from(job.stdout))
        .stderr(Stdio::from(job.stderr))
        .process_group(0);
    let spawned = cmd.spawn();
    // `cmd` holds the child's ends of the pipes: they go now, so that the worker sees EOF
    // when the child exits (or at once if it never started).
    drop(cmd);
    let mut s = lock(&job.child.state);
    match spawned {
        Ok(child) => {
            crate::metrics::cgi_started();
            s.pid = Some(child.id());
            if s.cancelled {
                kill_group(child.id());
            }
            drop(s);
            children.push((child, job.child));
        }
        Err(e) => {
            s.error = Some(format!("{}: {e}", job.program.display()));
            RUNNING.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Waits for the children that exited (their ids are marked reaped under the lock the killer
/// takes: a process group is never signalled after its id could be reused).
fn reap(children: &mut Vec<(std::process::Child, Arc<Child>)>) {
    children.retain_mut(|(process, shared)| {
        let mut s = lock(&shared.state);
        match process.try_wait() {
            Ok(None) => true,
            Ok(Some(_)) | Err(_) => {
                s.reaped = true;
                RUNNING.fetch_sub(1, Ordering::AcqRel);
                crate::metrics::cgi_ended();
                false
            }
        }
    });
}
