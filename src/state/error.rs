//! [`RunError`]: why Quill could not start or run (exit status 1), one variant per thing that
//! failed, with the error behind it as its source. Its `Display` is the text `quill` prints after
//! `quill: error: `, which tests and operators' scripts read: a variant's text does not change.
//!
//! It lives in the state layer because the controller ([`super::controller::Controller::start`])
//! and the DSR start (`dsr`, a service) build it as well as the start-up (`runtime`).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::addr::ListenAddr;
use crate::state::plan::ApplyError;

/// A failure to start or run (exit status 1).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RunError {
    /// The signal handler could not be installed.
    #[error("cannot handle signals: {0}")]
    Signals(#[source] io::Error),
    /// The sockets of the process taken over could not be had (`--takeover`).
    #[error("takeover: {0}")]
    Takeover(#[source] io::Error),
    /// systemd's sockets (`LISTEN_FDS`) could not be read.
    #[error("socket activation: {0}")]
    Systemd(#[source] io::Error),
    /// The control socket could not be bound (or an inherited one taken).
    #[error("cannot open control socket {addr}: {source}")]
    ControlSocket { addr: ListenAddr, source: io::Error },
    /// The admin listener could not be bound.
    #[error("cannot open admin listener {addr}: {source}")]
    Bind { addr: SocketAddr, source: io::Error },
    /// The controller could not build the running state from the configuration (a listener's
    /// socket, a pool, its routes or TLS): the controller's own message.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// The admin listener's token file (`admin_token_file`) could not be read: its own message.
    #[error("{0}")]
    AdminToken(String),
    /// The pid file (`-p`) could not be written.
    #[error("cannot write pid file {}: {source}", .path.display())]
    PidFile { path: PathBuf, source: io::Error },
    /// An access log file could not be opened.
    #[error("cannot open access log {}: {source}", .path.display())]
    AccessLog { path: PathBuf, source: io::Error },
    /// Dropping privileges (`-j`, `-u`) failed.
    #[error(transparent)]
    Privileges(#[from] PrivilegeError),
    /// A listener with `transparent` on a system that refuses IP_TRANSPARENT.
    #[error("{what}: transparent: {source}")]
    Transparent { what: String, source: io::Error },
    /// A worker's event loop could not be created.
    #[error("cannot create epoll instance: {0}")]
    Epoll(#[source] io::Error),
    /// `accept = "io_uring"` (or `--accept io_uring`) on a kernel that refuses io_uring.
    #[error("accept io_uring: cannot set up an io_uring: {0}")]
    Uring(#[source] io::Error),
    /// A worker's waker could not be created.
    #[error("cannot create waker: {0}")]
    Waker(#[source] io::Error),
    /// A worker's own handles on the access log files could not be made.
    #[error("access log: {0}")]
    LogHandles(#[source] io::Error),
    /// A worker could not be set up.
    #[error("worker {id}: {source}")]
    Worker { id: usize, source: io::Error },
    /// A thread (or the service it runs) could not be started.
    #[error("cannot start {what}: {source}")]
    Thread { what: ThreadKind, source: io::Error },
    /// A DSR listener (`dsr_if`) without the virtual address it answers for.
    #[error("{what}: dsr_if needs a virtual address")]
    DsrAddress { what: String },
    /// A DSR listener's packet socket could not be opened.
    #[error(
        "{what}: dsr_if {ifname}: cannot open a packet socket: {source}{}",
        needs_net_raw(.source)
    )]
    PacketSocket {
        what: String,
        ifname: String,
        source: io::Error,
    },
    /// A DSR listener's receive ring could not be mapped.
    #[error("{what}: dsr_if {ifname}: cannot map a receive ring (TPACKET_V3): {source}")]
    PacketRing {
        what: String,
        ifname: String,
        source: io::Error,
    },
}

/// Why privileges (`-j` chroot, `-u` user) could not be dropped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PrivilegeError {
    #[error("cannot look up user '{user}': {source}")]
    LookUp { user: String, source: io::Error },
    #[error("unknown user '{user}'")]
    UnknownUser { user: String },
    #[error("cannot chroot to {}: {source}", .dir.display())]
    Chroot { dir: PathBuf, source: io::Error },
    #[error("cannot become user '{user}': {source}")]
    BecomeUser { user: String, source: io::Error },
}

/// The threads start-up starts, as named in [`RunError::Thread`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ThreadKind {
    Worker,
    Resolver,
    Control,
    HealthChecker,
    Admin,
    Signals,
    Dsr,
}

impl fmt::Display for ThreadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ThreadKind::Worker => "worker thread",
            ThreadKind::Resolver => "resolver threads",
            ThreadKind::Control => "control thread",
            ThreadKind::HealthChecker => "health checker",
            ThreadKind::Admin => "admin listener",
            ThreadKind::Signals => "signal thread",
            ThreadKind::Dsr => "DSR thread",
        })
    }
}

/// The hint after a packet socket refused for want of privilege.
fn needs_net_raw(e: &io::Error) -> &'static str {
    if e.raw_os_error() == Some(libc::EPERM) {
        " (needs CAP_NET_RAW)"
    } else {
        ""
    }
}

#[cfg(test)]
#[path = "error_tests.rs"]
mod tests;
