//! What a change to the running configuration does, decided before anything is touched.
//! [`Plan::between`] compares the running configuration with the next one (from a control
//! command, an `include`, a reload or `tls reload`) and the listeners that run now, and says:
//! which listeners keep their socket (and whether its options change), which need a new one,
//! which go (and whether their socket file is removed), which settings only a restart applies,
//! whether the access logs, `conn_max` or the debug level change, and the notes the operator
//! reads in the reply. Pure: no sockets, no clock; the controller binds what the plan asks for,
//! then swaps (`Controller::apply`).
//!
//! Every pool (each listener's and each named one) is built again on every change, from the old
//! pool of its name so that its servers keep their state: what the plan says of a pool is what
//! the operator is told changed. The errors of the whole change ([`ApplyError`]) and its result
//! ([`Applied`]) are here too, with the text the control socket and the log show.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::addr::{BackendAddr, ListenAddr};
use crate::balancer::Mode;
use crate::config::{Config, ConfigError, ListenerConfig};
use crate::log::LogPlan;
use crate::tls::TlsError;

/// A running listener as the plan sees it: what decides whether it stays, without its socket.
#[derive(Clone, Debug)]
pub(crate) struct Running<'a> {
    pub name: &'a str,
    pub addr: &'a ListenAddr,
    /// Bound as UDP sockets (a UDP listener), not a stream listener.
    pub udp: bool,
    /// The options its accepted clients get now.
    pub options: SocketOptions,
    /// Its socket file when it goes: a Unix socket Quill bound (not one systemd owns).
    pub file: Option<&'a Path>,
}

/// The options a listening socket passes to the clients it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SocketOptions {
    pub nodelay: bool,
    pub keepalive: bool,
    /// Accepts wait for the client's first bytes (TCP_DEFER_ACCEPT).
    pub defer: bool,
}

impl SocketOptions {
    fn of(l: &ListenerConfig) -> SocketOptions {
        SocketOptions {
            nodelay: l.tuning.tcp_nodelay,
            keepalive: l.tuning.keepalive,
            defer: l.defers_accept(),
        }
    }
}

/// Where a listener of the next configuration gets its socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Socket {
    /// The running listener at this index stays (same name, address and kind); with options,
    /// they are set on its socket.
    Keep {
        running: usize,
        options: Option<SocketOptions>,
    },
    /// A new socket is bound (or the listener moved): before anything changes.
    Bind,
}

/// One listener of the next configuration, in its order.
#[derive(Debug)]
pub(crate) struct Step {
    pub socket: Socket,
    /// How its pool changed, and `added` for a new socket.
    pub notes: Vec<Note>,
}

/// A running listener that goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Removal {
    pub running: usize,
    /// The socket file to remove: none when another listener takes the same address.
    pub unlink: Option<PathBuf>,
}

/// What a change does, in the order it is done.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// Access log files the change names that are not open now: each is opened first, so one
    /// that cannot be opened changes nothing.
    pub new_logs: Vec<PathBuf>,
    /// Restart-only settings changed, then the named pools' changes.
    pub before: Vec<Note>,
    /// One step per listener of the next configuration.
    pub listeners: Vec<Step>,
    pub removed: Vec<Removal>,
    /// The removed listeners, `conn_max` and the debug level.
    pub after: Vec<Note>,
    /// The new `conn_max`, when it changed to a number.
    pub conn_max: Option<u32>,
    /// The new access log plan, when it changed.
    pub logs: Option<LogPlan>,
    /// The new debug level, when it changed.
    pub debug: Option<u8>,
}

/// Settings the running process cannot change: a change is noted, and applied at the next start.
const RESTART_ONLY: &[&str] = &[
    "workers",
    "backlog",
    "tfo",
    "reuseport",
    "listen_per_worker",
    "splice",
    "concentrate",
    "user",
    "chroot",
    "pid_file",
    "control",
    "admin",
    "accept_batch",
    "accept",
];

impl Plan {
    /// What changing `old` (the running configuration, served by `running`) into `new` does.
    /// Refuses only what a running process can never do (start direct server return).
    pub(crate) fn between(
        old: &Config,
        new: &Config,
        running: &[Running<'_>],
    ) -> Result<Plan, ApplyError> {
        if let Some(l) = new.listeners.iter().find(|l| l.dsr().is_some()) {
            return Err(ApplyError::DsrAtRuntime { what: l.what() });
        }
        let (old_logs, new_logs) = (LogPlan::new(old), LogPlan::new(new));
        let mut plan = Plan {
            new_logs: new_logs
                .files
                .iter()
                .filter(|(path, _)| !old_logs.files.iter().any(|(p, _)| p == path))
                .map(|(path, _)| path.clone())
                .collect(),
            ..Plan::default()
        };
        plan.before = restart_only(old, new)
            .into_iter()
            .map(Note::RestartOnly)
            .collect();
        named_pool_notes(old, new, &mut plan.before);
        plan.listeners = new
            .listeners
            .iter()
            .map(|l| step(old, l, running))
            .collect();
        plan.removed = removals(new, running, &plan.listeners);
        for r in &plan.removed {
            let c = &running[r.running];
            plan.after.push(Note::ListenerRemoved {
                name: c.name.to_string(),
                addr: c.addr.clone(),
            });
        }
        let (a, b) = (&old.global, &new.global);
        if a.max_connections != b.max_connections {
            plan.conn_max = b.max_connections;
            plan.after.extend(b.max_connections.map(Note::ConnMax));
        }
        if old_logs != new_logs {
            plan.logs = Some(new_logs);
        }
        if a.debug != b.debug {
            plan.debug = Some(b.debug);
            plan.after.push(Note::Debug(b.debug));
        }
        Ok(plan)
    }

    /// Whether listeners are added or removed (the running list is replaced).
    pub(crate) fn listeners_change(&self) -> bool {
        !self.removed.is_empty() || self.listeners.iter().any(|s| s.socket == Socket::Bind)
    }
}

/// The restart-only settings that differ.
fn restart_only(old: &Config, new: &Config) -> Vec<&'static str> {
    let (a, b) = (&old.global, &new.global);
    let changed = [
        a.workers != b.workers,
        a.backlog != b.backlog,
        a.tfo != b.tfo,
        a.reuseport != b.reuseport,
        a.listen_per_worker != b.listen_per_worker,
        a.splice != b.splice,
        a.concentrate != b.concentrate,
        a.user != b.user,
        a.chroot != b.chroot,
        a.pid_file != b.pid_file,
        a.control != b.control,
        a.admin != b.admin,
        a.accept_batch != b.accept_batch,
        a.accept != b.accept,
    ];
    RESTART_ONLY
        .iter()
        .zip(changed)
        .filter(|(_, changed)| *changed)
        .map(|(what, _)| *what)
        .collect()
}

/// The named pools added, changed and removed.
fn named_pool_notes(old: &Config, new: &Config, notes: &mut Vec<Note>) {
    for p in &new.pools {
        match old.pools.iter().find(|o| o.name == p.name) {
            Some(was) => pool_notes(was, p, notes),
            None => notes.push(Note::PoolAdded(p.name.clone())),
        }
    }
    for o in &old.pools {
        if !new.pools.iter().any(|p| p.name == o.name) {
            notes.push(Note::PoolRemoved(o.name.clone()));
        }
    }
}

/// Listener `l` of the next configuration: its socket, and what is said of it.
fn step(old: &Config, l: &ListenerConfig, running: &[Running<'_>]) -> Step {
    let mut notes = Vec::new();
    if let Some(was) = old.listeners.iter().find(|o| o.name == l.name) {
        pool_notes(was, l, &mut notes);
    }
    let kept = running
        .iter()
        .position(|c| c.name == l.name && *c.addr == l.listen && c.udp == l.udp().is_some());
    let socket = match kept {
        Some(i) => {
            let options = SocketOptions::of(l);
            Socket::Keep {
                running: i,
                options: (running[i].options != options).then_some(options),
            }
        }
        None => {
            notes.push(Note::ListenerAdded {
                name: l.name.clone(),
                addr: l.listen.clone(),
            });
            Socket::Bind
        }
    };
    Step { socket, notes }
}

/// The running listeners no step keeps; a socket file goes with its listener unless a listener
/// of the next configuration has the same address.
fn removals(new: &Config, running: &[Running<'_>], steps: &[Step]) -> Vec<Removal> {
    let kept = |i: usize| {
        steps
            .iter()
            .any(|s| matches!(s.socket, Socket::Keep { running, .. } if running == i))
    };
    running
        .iter()
        .enumerate()
        .filter(|(i, _)| !kept(*i))
        .map(|(i, c)| Removal {
            running: i,
            unlink: c
                .file
                .filter(|_| !new.listeners.iter().any(|l| l.listen == *c.addr))
                .map(Path::to_path_buf),
        })
        .collect()
}

/// How a listener's (or named pool's) pool changed, in words.
fn pool_notes(was: &ListenerConfig, now: &ListenerConfig, notes: &mut Vec<Note>) {
    // Maps by address: linear, so a pool of 40,000 servers costs no more than its length.
    let before: std::collections::HashMap<_, _> =
        was.servers.iter().rev().map(|o| (&o.addr, o)).collect();
    let after: std::collections::HashSet<_> = now.servers.iter().map(|s| &s.addr).collect();
    let server = |change, addr: &BackendAddr| Note::Server {
        pool: now.name.clone(),
        addr: addr.clone(),
        change,
    };
    for s in &now.servers {
        match before.get(&s.addr) {
            None => notes.push(server(ServerChange::Added, &s.addr)),
            Some(o) if *o != s => notes.push(server(ServerChange::Changed, &s.addr)),
            Some(_) => {}
        }
    }
    for o in &was.servers {
        if !after.contains(&o.addr) {
            notes.push(server(ServerChange::Removed, &o.addr));
        }
    }
    if was.mode != now.mode {
        notes.push(Note::Mode {
            pool: now.name.clone(),
            mode: now.mode,
        });
    }
    if was.tuning != now.tuning
        || was.emergency != now.emergency
        || was.abuse != now.abuse
        || was.client_acl != now.client_acl
        || was.health != now.health
        || was.slow_start != now.slow_start
    {
        notes.push(Note::Settings(now.name.clone()));
    }
}

/// What happened to a server of a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ServerChange {
    Added,
    Changed,
    Removed,
}

/// One thing a change did, for the reply and the log.
#[derive(Debug)]
pub(crate) enum Note {
    /// A setting only a restart applies.
    RestartOnly(&'static str),
    PoolAdded(String),
    PoolRemoved(String),
    Server {
        pool: String,
        addr: BackendAddr,
        change: ServerChange,
    },
    Mode {
        pool: String,
        mode: Mode,
    },
    /// A pool's other settings (tuning, emergency or abuse server, ACL, health, slow start).
    Settings(String),
    /// A kept listener's socket options could not be set (the change applies all the same).
    SocketOptions {
        listener: String,
        error: io::Error,
    },
    ListenerAdded {
        name: String,
        addr: ListenAddr,
    },
    ListenerRemoved {
        name: String,
        addr: ListenAddr,
    },
    ConnMax(u32),
    Debug(u8),
    /// `tls reload`: the listeners whose files were read again.
    Reread(Vec<String>),
    /// `tls reload` without a listener that terminates TLS.
    NoTlsListener,
    /// `reload` without sources to reload from.
    NothingToReload,
    /// Nothing else to say, and the configuration changed.
    Applied,
    /// Nothing else to say, and the configuration is the same.
    NoChange,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::RestartOnly(what) => {
                write!(f, "{what} changed: takes effect at the next restart")
            }
            Note::PoolAdded(name) => write!(f, "pool '{name}' added"),
            Note::PoolRemoved(name) => write!(f, "pool '{name}' removed"),
            Note::Server { pool, addr, change } => {
                let change = match change {
                    ServerChange::Added => "added",
                    ServerChange::Changed => "changed",
                    ServerChange::Removed => "removed",
                };
                write!(f, "'{pool}': server {addr} {change}")
            }
            Note::Mode { pool, mode } => write!(f, "'{pool}': mode {mode}"),
            Note::Settings(pool) => write!(f, "'{pool}': settings changed"),
            Note::SocketOptions { listener, error } => {
                write!(f, "listener '{listener}': socket options: {error}")
            }
            Note::ListenerAdded { name, addr } => write!(f, "listener '{name}' on {addr} added"),
            Note::ListenerRemoved { name, addr } => {
                write!(f, "listener '{name}' on {addr} removed")
            }
            Note::ConnMax(n) => write!(f, "conn_max {n}"),
            Note::Debug(level) => write!(f, "debug level {level}"),
            Note::Reread(names) => {
                f.write_str("files re-read for listener ")?;
                for (i, name) in names.iter().enumerate() {
                    let comma = if i > 0 { ", " } else { "" };
                    write!(f, "{comma}'{name}'")?;
                }
                Ok(())
            }
            Note::NoTlsListener => f.write_str("no listener terminates TLS"),
            Note::NothingToReload => f.write_str("nothing to reload from; logs reopened"),
            Note::Applied => f.write_str("applied"),
            Note::NoChange => f.write_str("no change"),
        }
    }
}

/// What an applied change did: never empty (at least `applied` or `no change`). Shown as its
/// notes joined by `; `.
#[derive(Debug)]
pub(crate) struct Applied {
    pub notes: Vec<Note>,
}

impl Applied {
    /// `notes`, or when there are none whether the configuration `changed`.
    pub(crate) fn new(mut notes: Vec<Note>, changed: bool) -> Applied {
        if notes.is_empty() {
            notes.push(if changed {
                Note::Applied
            } else {
                Note::NoChange
            });
        }
        Applied { notes }
    }
}

impl fmt::Display for Applied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, note) in self.notes.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{note}")?;
        }
        Ok(())
    }
}

/// Why a change was refused; the running configuration is as it was.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApplyError {
    /// The configuration the change makes (or the sources a reload reads) is not valid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The process is draining: its listener list is empty for good.
    #[error("stopping: the configuration no longer changes")]
    Stopping,
    #[error("{what}: dsr_if: direct server return starts with the process, not in a running proxy (restart Quill)")]
    DsrAtRuntime { what: String },
    #[error("cannot open access log {}: {source}", path.display())]
    AccessLog { path: PathBuf, source: io::Error },
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: ListenAddr, source: io::Error },
    #[error("cannot bind UDP {addr}: {source}")]
    BindUdp { addr: ListenAddr, source: io::Error },
    /// A descriptor handed over (by systemd or the previous process) could not be duplicated.
    #[error("listener '{name}': {source}")]
    Duplicate { name: String, source: io::Error },
    /// The descriptor handed over under a listener's name is not a listening socket.
    #[error("inherited socket '{name}': {source}")]
    Inherited { name: String, source: io::Error },
    /// A listener's or pool's TLS (to its clients or to its servers) cannot be built.
    #[error("{what}: {source}")]
    Tls { what: String, source: TlsError },
    /// A listener's routes cannot be compiled (one line from the route compiler).
    #[error("{0}")]
    Routes(String),
    #[error("no listener named '{0}'")]
    NoListener(String),
    #[error("listener '{0}' does not terminate TLS")]
    NotTls(String),
    /// `tls reload`: a file cannot be read again, or what was read cannot be used.
    #[error(transparent)]
    TlsFiles(TlsError),
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
