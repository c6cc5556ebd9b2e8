//! Process-wide settings (`Global`), who may use the control socket (`ControlLevel`), and where
//! and in which format access log lines go (`LogFormat`, `LineKind`, `ListenerLog`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::acl::{AclId, Acls};
use crate::addr::ListenAddr;

use crate::config::settings::{self, define_global, AcceptMode};

crate::config::settings::global_table! {
    define_global
    /// Process-wide settings. The scalar ones come from `settings::global_table`.
    {
        pid_file: Option<PathBuf> = None,
        log: Option<PathBuf> = None,
        user: Option<String> = None,
        chroot: Option<PathBuf> = None,
        /// Access log line format.
        log_format: LogFormat = LogFormat::Text,
        /// The control socket (`-C`): a Unix socket path or a TCP address.
        control: Option<ListenAddr> = None,
        /// ACL checked against control clients over TCP (`control_acl`).
        control_acl: Option<AclId> = None,
        /// What TCP control clients may do (`control_level`); the Unix socket is always `admin`.
        control_level: ControlLevel = ControlLevel::default(),
        /// A file holding the bearer token TCP control clients must present (`control_token_file`).
        control_token_file: Option<PathBuf> = None,
        /// A file holding the bearer token admin HTTP clients must present (`admin_token_file`).
        admin_token_file: Option<PathBuf> = None,
        /// The admin HTTP listener (`--admin`): metrics, status API and page.
        admin: Option<SocketAddr> = None,
        /// Whether the `exit` control command is allowed (`-X`).
        allow_exit: bool = false,
        /// Control commands read at start and on every reload (`-F`).
        command_file: Option<PathBuf> = None,
        /// Pen's HTML status report, written on SIGUSR1 and `status` (`-w`).
        status_file: Option<PathBuf> = None,
        /// Pen's ACL lists 0-9.
        acls: Acls = Default::default(),
        /// Debug level (`-d`, `debug N`).
        debug: u8 = 0,
        /// Exit once no session has been open for this long (socket-proxyd's `--exit-idle-time`).
        exit_idle_time: Option<Duration> = None,
    }
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

impl Global {
    /// Checks every bound of the process-wide settings.
    pub(crate) fn check(&self) -> Result<(), String> {
        GLOBAL.iter().try_for_each(|e| e.check(self))
    }

    /// Whether kept-alive clients gather on fewer workers: `concentrate`, with a second worker
    /// to gather away from (one worker has none).
    pub(crate) fn gathers(&self) -> bool {
        self.concentrate && self.workers > 1
    }
}
