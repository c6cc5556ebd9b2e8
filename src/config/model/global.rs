//! Process-wide settings (`Global`), who may use the control socket (`ControlLevel`), and where
//! and in which format access log lines go (`LogFormat`, `LineKind`, `ListenerLog`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::acl::{AclId, Acls};
use crate::addr::ListenAddr;

use super::bounds::{
    check_duration, in_range, MAX_ACCEPT_BATCH, MAX_BACKLOG, MAX_SESSIONS, MAX_WORKERS,
};

/// Process-wide settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Global {
    pub workers: usize,
    /// Sessions per process (`-x`); None = what the open-file limit allows.
    pub max_connections: Option<u32>,
    pub backlog: u32,
    pub accept_batch: u32,
    pub drain_timeout: Duration,
    /// How long a drain keeps idle HTTP clients (kept alive, or accepted with no request yet)
    /// open for one more request, answered with `Connection: close`; capped by `drain_timeout`.
    pub drain_grace: Duration,
    pub tfo: bool,
    pub reuseport: bool,
    /// Bulk flows move through splice pipes (zero copy); false copies everything through buffers.
    pub splice: bool,
    pub pid_file: Option<PathBuf>,
    pub log: Option<PathBuf>,
    pub user: Option<String>,
    pub chroot: Option<PathBuf>,
    /// Access log line format.
    pub log_format: LogFormat,
    /// The control socket (`-C`): a Unix socket path or a TCP address.
    pub control: Option<ListenAddr>,
    /// ACL checked against control clients over TCP (`control_acl`).
    pub control_acl: Option<AclId>,
    /// What TCP control clients may do (`control_level`); the Unix socket is always `admin`.
    pub control_level: ControlLevel,
    /// A file holding the bearer token TCP control clients must present (`control_token_file`).
    pub control_token_file: Option<PathBuf>,
    /// A file holding the bearer token admin HTTP clients must present (`admin_token_file`).
    pub admin_token_file: Option<PathBuf>,
    /// The admin HTTP listener (`--admin`): metrics, status API and page.
    pub admin: Option<SocketAddr>,
    /// Whether the `exit` control command is allowed (`-X`).
    pub allow_exit: bool,
    /// Control commands read at start and on every reload (`-F`).
    pub command_file: Option<PathBuf>,
    /// Pen's HTML status report, written on SIGUSR1 and `status` (`-w`).
    pub status_file: Option<PathBuf>,
    /// Pen's ACL lists 0-9.
    pub acls: Acls,
    /// Debug level (`-d`, `debug N`).
    pub debug: u8,
    /// Exit once no session has been open for this long (socket-proxyd's `--exit-idle-time`).
    pub exit_idle_time: Option<Duration>,
}

/// What a control client may do, as HAProxy's runtime API levels. Each level includes the ones
/// before it. The Unix socket (0600, owner checked) is always `Admin`; TCP clients get
/// `control_level` (default `Operate`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum ControlLevel {
    /// Read state only: `servers`, `status`, settings shown, `connections`, `pid`.
    Read,
    /// Also change how traffic flows among the configured servers: drain, enable, disable; a
    /// server's weight, max, hard, prio and blacklist; closing a connection (`close N`).
    #[default]
    Operate,
    /// Everything a configuration file can do except what names files, Unix sockets or moves a
    /// listener to a path (those stay on the Unix socket whatever the level).
    Admin,
}

impl ControlLevel {
    pub(crate) fn parse(s: &str) -> Option<ControlLevel> {
        match s {
            "read" => Some(ControlLevel::Read),
            "operate" => Some(ControlLevel::Operate),
            "admin" => Some(ControlLevel::Admin),
            _ => None,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            ControlLevel::Read => "read",
            ControlLevel::Operate => "operate",
            ControlLevel::Admin => "admin",
        }
    }
}

/// How access log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum LogFormat {
    /// `CLIENT_IP UNIX_TIME SERVER BYTES_IN BYTES_OUT DURATION END`, space separated.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    pub(crate) fn parse(s: &str) -> Option<LogFormat> {
        match s {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }
}

/// The kind of line a listener writes into its access log file: what a reader of the file must
/// parse. An HTTP listener's text lines are Apache's combined format (and Quill's fields after
/// it), a TCP or UDP listener's are Pen's session lines. JSON is one kind: every line is one JSON
/// object whatever the listener (HTTP lines have more fields, `status` and `request` among
/// them), so a JSON-lines reader (jq, a log shipper) reads every line of a shared file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LineKind {
    Combined,
    Pen,
    Json,
}

impl LineKind {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            LineKind::Combined => "Apache combined lines (HTTP, log_format text)",
            LineKind::Pen => "Pen's session lines (TCP or UDP, log_format text)",
            LineKind::Json => "JSON lines",
        }
    }
}

/// Where one listener's access log lines go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ListenerLog {
    pub path: PathBuf,
    pub format: LogFormat,
    pub kind: LineKind,
    /// The listener names its own file (else it is the process-wide one).
    pub own: bool,
}

/// Whether `a` and `b` name one file: the same path once `.` components and repeated slashes
/// are dropped, or the same inode when both exist (a symbolic link, `../logs/x` for `x`).
pub(crate) fn same_log_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if a.components().eq(b.components()) {
        return true;
    }
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

impl Default for Global {
    fn default() -> Global {
        Global {
            workers: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            max_connections: None,
            backlog: 1024,
            accept_batch: 100,
            drain_timeout: Duration::from_secs(30),
            drain_grace: Duration::from_secs(2),
            tfo: true,
            reuseport: false,
            splice: true,
            pid_file: None,
            log: None,
            user: None,
            chroot: None,
            log_format: LogFormat::Text,
            control: None,
            control_acl: None,
            control_level: ControlLevel::default(),
            control_token_file: None,
            admin_token_file: None,
            admin: None,
            allow_exit: false,
            command_file: None,
            status_file: None,
            acls: Default::default(),
            debug: 0,
            exit_idle_time: None,
        }
    }
}

impl Global {
    /// Checks every bound of the process-wide settings.
    pub(crate) fn check(&self) -> Result<(), String> {
        in_range("workers", self.workers as u64, 1..=MAX_WORKERS as u64)?;
        if let Some(n) = self.max_connections {
            in_range("max_connections", n.into(), 1..=MAX_SESSIONS.into())?;
        }
        in_range("backlog", self.backlog.into(), 1..=MAX_BACKLOG.into())?;
        in_range(
            "accept_batch",
            self.accept_batch.into(),
            1..=MAX_ACCEPT_BATCH.into(),
        )?;
        check_duration("drain_timeout", self.drain_timeout)?;
        check_duration("drain_grace", self.drain_grace)
    }
}
