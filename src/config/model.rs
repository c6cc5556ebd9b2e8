//! The configuration model: what every listener accepts on, its pool, its selection mode and its
//! timeouts, plus process-wide settings; the bounds every number is held to, and `validate`, which
//! checks a whole configuration. Pure data and checks: the loaders (`toml`, `apply`) build it, the
//! writers (`write`, `explain`) read it, and none of them is needed to use it.

use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

use crate::acl::{AclId, Acls, Net};
use crate::addr::{AddrError, BackendAddr, ListenAddr, ServerSpec};
use crate::balancer::Mode;

// === Bounds ===
//
// Every number Quill takes has a bound, checked where it is parsed (command line, TOML, control
// language) and again by `Config::validate`, so no input can make Quill allocate without limit,
// wait for ever or wrap a counter.

pub(crate) use crate::balancer::MAX_CLIENTS;
pub(crate) use quill_core::duration::{format_duration, parse_duration, MAX_DURATION};
/// The most worker threads.
pub(crate) const MAX_WORKERS: usize = 1024;
/// The largest listen backlog (the kernel caps it at `net.core.somaxconn` anyway).
pub(crate) const MAX_BACKLOG: u32 = 65_535;
/// The most accepts per wake-up (`-m`).
pub(crate) const MAX_ACCEPT_BATCH: u32 = 10_000;
/// The largest health-check `rise` and `fall`.
pub(crate) const MAX_RISE_FALL: u32 = 1_000;
pub(crate) use crate::addr::{MAX_SESSIONS, MAX_WEIGHT};
pub(crate) use super::settings::{
    in_range, proxy_protocol_name, Fastclose, ProxyVersion, Tuning, TuningPatch,
};
use super::settings::check_duration;

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

/// An active health check for the servers of a pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HealthCheck {
    pub kind: CheckKind,
    /// Time between two checks of one server.
    pub interval: Duration,
    /// How long one check may take.
    pub timeout: Duration,
    /// Successes in a row that bring a down server up.
    pub rise: u32,
    /// Failures in a row that take an up server down.
    pub fall: u32,
    /// The `Host` an HTTP check sends (`host`); None: the server's address.
    pub host: Option<String>,
}

/// What a check does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CheckKind {
    /// The connect succeeds.
    Tcp,
    /// `GET path HTTP/1.0` answers with a status in `expect` (inclusive).
    Http { path: String, expect: (u16, u16) },
    /// UDP servers: the datagram `send` draws an answer containing `expect` (any answer when empty).
    Udp { send: String, expect: String },
}

impl HealthCheck {
    /// Checks every bound: interval and timeout more than 0 and at most 30 days, rise and fall 1
    /// to `MAX_RISE_FALL`.
    pub(crate) fn check(&self) -> Result<(), String> {
        for (name, d) in [
            ("health interval", self.interval),
            ("health timeout", self.timeout),
        ] {
            if d.is_zero() {
                return Err(format!("{name}: must be more than 0"));
            }
            check_duration(name, d)?;
        }
        in_range("health rise", self.rise.into(), 1..=MAX_RISE_FALL.into())?;
        in_range("health fall", self.fall.into(), 1..=MAX_RISE_FALL.into())
    }
}

impl Default for HealthCheck {
    fn default() -> HealthCheck {
        HealthCheck {
            kind: CheckKind::Tcp,
            interval: Duration::from_secs(2),
            timeout: Duration::from_secs(1),
            rise: 2,
            fall: 3,
            host: None,
        }
    }
}

impl fmt::Display for HealthCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            CheckKind::Tcp => f.write_str("tcp")?,
            CheckKind::Udp { send, expect } => {
                write!(f, "udp sending {send:?}")?;
                if !expect.is_empty() {
                    write!(f, " expecting {expect:?}")?;
                }
            }
            CheckKind::Http { path, expect } => {
                write!(f, "http GET {path} expecting {}-{}", expect.0, expect.1)?;
                if let Some(host) = &self.host {
                    write!(f, " with Host {host}")?;
                }
            }
        }
        write!(
            f,
            " every {}, timeout {}, rise {}, fall {}",
            format_duration(self.interval),
            format_duration(self.timeout),
            self.rise,
            self.fall
        )
    }
}

/// Parses `tcp` or `http:/path` (the `--check` option and the `check` command).
pub(crate) fn parse_check_kind(s: &str) -> Result<CheckKind, String> {
    match s {
        "tcp" => Ok(CheckKind::Tcp),
        "udp" => Ok(CheckKind::Udp {
            send: String::new(),
            expect: String::new(),
        }),
        _ if s.starts_with("udp:") => Ok(CheckKind::Udp {
            send: s["udp:".len()..].to_string(),
            expect: String::new(),
        }),
        _ => match s.strip_prefix("http:").or(s.strip_prefix("http")) {
            Some(path) => {
                let path = if path.is_empty() { "/" } else { path };
                validate_check_path(path)?;
                Ok(CheckKind::Http {
                    path: path.to_string(),
                    expect: (200, 399),
                })
            }
            None => Err(format!(
                "invalid check '{s}' (expected tcp, http:/path or udp:DATAGRAM)"
            )),
        },
    }
}

/// Checks an HTTP health check's path: it starts with `/` and holds no space or control byte
/// (it is sent as is in the request line).
pub(crate) fn validate_check_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(format!("invalid check path '{path}' (expected /path)"));
    }
    Ok(())
}

/// Parses a status range `200-399` or a single status `200`.
pub(crate) fn parse_status_range(s: &str) -> Result<(u16, u16), String> {
    let bad = || format!("invalid status range '{s}' (expected e.g. 200-399)");
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let a: u16 = a.trim().parse().map_err(|_| bad())?;
    let b: u16 = b.trim().parse().map_err(|_| bad())?;
    if !(100..=599).contains(&a) || !(a..=599).contains(&b) {
        return Err(bad());
    }
    Ok((a, b))
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

/// One listener and its pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ListenerConfig {
    pub name: String,
    pub listen: ListenAddr,
    pub mode: Mode,
    pub servers: Vec<ServerSpec>,
    pub emergency: Option<BackendAddr>,
    pub tuning: Tuning,
    /// Servers blacklisted at start by `server N blacklist T`, with how long.
    pub initial_blacklist: Vec<(usize, Duration)>,
    /// Active health checks; None = passive only (failed connects blacklist).
    pub health: Option<HealthCheck>,
    /// A server coming back up ramps its share from nothing to full over this time.
    pub slow_start: Duration,
    /// ACL checked against clients before any work (`client_acl`).
    pub client_acl: Option<AclId>,
    /// Where clients denied by `client_acl` go (`-B`); None = closed.
    pub abuse: Option<BackendAddr>,
    /// Some for an HTTP listener (`-H`, `protocol = "http"`): its HTTP settings.
    pub http: Option<HttpSettings>,
    /// HTTP: stick clients to servers by this cookie, inserted by Quill (`sticky_cookie`).
    pub sticky_cookie: Option<String>,
    /// An HTTP listener's routes (`[[listener.route]]`), first match wins; a request no route
    /// matches goes to the listener's own servers (404 when it has none).
    pub routes: Vec<RouteConfig>,
    /// TLS termination (`tls = { ... }`, Pen's `-E`/`-K`): clients speak TLS to this listener.
    pub tls: Option<crate::tls::TlsSettings>,
    /// TLS to this pool's servers (`server_tls = { ... }`).
    pub server_tls: Option<crate::tls::ClientSettings>,
    /// Trusted upstream proxies (`accept_proxy = ["CIDR", ...]`): a client from one of these
    /// networks must start with a PROXY header, whose address then stands for the client; any
    /// other client is closed at accept. Empty: no PROXY header is read.
    pub accept_proxy: Vec<crate::acl::Net>,
    /// Pen's `dsr_if`: direct server return on this interface (see `crate::dsr`).
    pub dsr_if: Option<String>,
    /// Pen's `dsr_ip`: the virtual address (default: the listen address).
    pub dsr_ip: Option<std::net::Ipv4Addr>,
    /// `dsr_wait MS`: how long the kernel holds a receive-ring block that does not fill before
    /// handing it to Quill (None: [`DEFAULT_DSR_WAIT`]); see [`parse_dsr_wait`].
    pub dsr_wait: Option<Duration>,
    /// Pen's `tarpit_acl N` (DSR): clients that ACL N denies get a tarpit instead of a server.
    pub tarpit_acl: Option<AclId>,
    /// Some for a UDP listener (`-U`, `protocol = "udp"`): its flow settings.
    pub udp: Option<UdpSettings>,
    /// Its own access log file (`log = "FILE"` in its `[[listener]]`, `listener NAME log FILE`);
    /// None: the process-wide `log`.
    pub log: Option<PathBuf>,
    /// Its own access log format (`log_format` in its `[[listener]]`); None: the process-wide
    /// `log_format`.
    pub log_format: Option<LogFormat>,
}

/// A UDP listener's flows (`udp = { ... }`): a flow is one client address and port, relayed to one
/// server through a connected socket of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UdpSettings {
    /// A flow with no datagram either way for this long ends (`flow_timeout`).
    pub flow_timeout: Duration,
    /// Flows open at once in this process for this listener (`max_flows`); a new client past it
    /// evicts the flow idle for longest. None: what the open-file limit leaves for flows (see
    /// `udp::flow_budget`), which caps an explicit value too.
    pub max_flows: Option<u32>,
    /// Flows one source may hold on this listener (`max_flows_per_source`; an IPv4 address, or
    /// an IPv6 /64): a new flow past it is refused, no other client's flow is evicted for it.
    /// None: a quarter of the listener's `max_flows` (at least 1).
    pub max_flows_per_source: Option<u32>,
    /// A flow ends after this many replies from its server (`flow_responses`; 0 = never).
    pub flow_responses: u32,
}

/// `dsr_wait`'s default: measured in `bench/dsr.sh` (README, DSR), 2 ms kept Quill's CPU per
/// GiB at about a tenth of TCP mode's; 1 ms cost half as much again, 4 ms slowed downloads.
pub(crate) const DEFAULT_DSR_WAIT: Duration = Duration::from_millis(2);
/// `dsr_wait`'s bounds, in ms: the kernel takes whole milliseconds, and past a second a lone
/// frame would wait longer than a client's TCP retransmission.
pub(crate) const DSR_WAIT_MS: RangeInclusive<u64> = 1..=1000;

/// Parses `dsr_wait`'s value: a bare number is milliseconds (Pen-style `dsr_wait MS`), or a
/// duration with a unit (`2ms`, `1s`); whole milliseconds within [`DSR_WAIT_MS`].
pub(crate) fn parse_dsr_wait(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let d = if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        t.parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| format!("dsr_wait: '{t}' is not a number of milliseconds"))?
    } else {
        parse_duration(t).map_err(|_| {
            format!("dsr_wait: '{t}' is not a number of milliseconds (e.g. 2 or 2ms)")
        })?
    };
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if !DSR_WAIT_MS.contains(&ms) {
        return Err(format!(
            "dsr_wait: '{t}' is out of range ({} to {} ms)",
            DSR_WAIT_MS.start(),
            DSR_WAIT_MS.end()
        ));
    }
    Ok(d)
}

/// The most `max_flows` one listener may ask for.
pub(crate) const MAX_FLOWS: u32 = 16_777_216;

impl Default for UdpSettings {
    fn default() -> Self {
        UdpSettings {
            flow_timeout: Duration::from_secs(30),
            max_flows: None,
            max_flows_per_source: None,
            flow_responses: 0,
        }
    }
}

/// The most routes one listener may have.
pub(crate) const MAX_ROUTES: usize = 1024;
/// The longest TLS `handshake_timeout`.
pub(crate) const MAX_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(300);
/// The most TLS `max_handshakes` (per worker).
pub(crate) const MAX_HANDSHAKES: u32 = 65_536;
/// The most certificates one listener may have (a list, or an `sni_path` directory).
pub(crate) const MAX_CERTS: usize = 10_000;
/// The most named pools.
pub(crate) const MAX_POOLS: usize = 1024;
/// The longest body a `respond` route may hold (its whole answer fits one 16 KiB buffer).
pub(crate) const MAX_RESPOND_BODY: usize = 8 * 1024;
/// The most requests a `rate` may allow per period, and the largest `burst`.
pub(crate) const MAX_RATE: u32 = 1_000_000;

/// One `[[listener.route]]` (DESIGN §6.2): what a request must match (every matcher given), what
/// happens to it, and the edits made on the way. Patterns are kept as text here (the model is
/// compared and written back); `route::Routes` compiles them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RouteConfig {
    /// `route-N` (N from 1, the route's place in the listener) unless named.
    pub name: String,
    /// Any of these hosts (lower case, port ignored); empty = any host.
    pub hosts: Vec<HostMatch>,
    /// TCP listeners: any of these TLS server names (the ClientHello's SNI, lower case), read
    /// without decrypting; the only matcher a TCP listener's route has.
    pub sni: Vec<HostMatch>,
    pub path: Option<PathMatch>,
    /// Any of these methods (case-sensitive tokens); empty = any method.
    pub methods: Vec<String>,
    /// Every one of these fields (names in lower case) with a matching value.
    pub headers: Vec<(String, ValueMatch)>,
    /// Pen's ACL list the client's address must pass.
    pub client_acl: Option<AclId>,
    pub action: RouteAction,
    pub request_headers: Vec<HeaderEdit>,
    pub response_headers: Vec<HeaderEdit>,
    /// `rewrite_path = { prefix, replace }`: the path's prefix replaced before it is sent.
    pub rewrite_path: Option<(String, String)>,
    pub rate: Option<RateLimit>,
}

/// A `host` matcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HostMatch {
    /// `example.com`: this host only.
    Exact(String),
    /// `*.example.com`, kept as `.example.com`: any subdomain, not the domain itself.
    Suffix(String),
}

impl fmt::Display for HostMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostMatch::Exact(h) => f.write_str(h),
            HostMatch::Suffix(s) => write!(f, "*{s}"),
        }
    }
}

/// A `path` (prefix) or `path_regex` matcher, on the path as sent (before `?`, not decoded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PathMatch {
    Prefix(String),
    Regex(String),
}

/// A header matcher's value: exact, or a regex found anywhere in the value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ValueMatch {
    Exact(String),
    Regex(String),
}

/// What a route does with a request it matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RouteAction {
    /// To the named `[[pool]]`.
    Pool(String),
    /// `redirect`: `to` (with the request's path and query appended unless `exact`).
    Redirect {
        to: String,
        status: u16,
        exact: bool,
    },
    /// `respond`: a fixed answer, no server involved.
    Respond {
        status: u16,
        body: String,
        content_type: String,
    },
    /// `deny = true`: 403.
    Deny,
}

impl fmt::Display for RouteAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteAction::Pool(p) => write!(f, "pool {p}"),
            RouteAction::Redirect { to, status, exact } => {
                write!(f, "redirect {status} to {to}")?;
                if !exact {
                    f.write_str(" + path and query")?;
                }
                Ok(())
            }
            RouteAction::Respond {
                status,
                body,
                content_type,
            } => write!(
                f,
                "respond {status} ({} bytes of {content_type})",
                body.len()
            ),
            RouteAction::Deny => f.write_str("deny (403)"),
        }
    }
}

/// `rate = "N/s"` (or `/m`, `/h`) with `burst`: a token bucket per client address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RateLimit {
    /// Requests per `period` in the long run.
    pub count: u32,
    pub period: Duration,
    /// Requests a client may make at once after being idle (at least 1).
    pub burst: u32,
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.period.as_secs() {
            60 => "m",
            3600 => "h",
            _ => "s",
        };
        write!(f, "{}/{unit} burst {}", self.count, self.burst)
    }
}

/// The largest compiled size of one route pattern (regex's own measure), so that no pattern can
/// make a reload allocate without limit.
const MAX_PATTERN_SIZE: usize = 1 << 20;

/// Compiles a `path_regex` or header `regex` as routes use it: on bytes, without Unicode classes
/// (`.` is any byte, `(?i)` folds ASCII), found anywhere unless anchored with `^` / `$`. Linear
/// time in the input whatever the pattern (no backtracking).
pub(crate) fn compile_pattern(p: &str) -> Result<regex::bytes::Regex, String> {
    regex::bytes::RegexBuilder::new(p)
        .unicode(false)
        .size_limit(MAX_PATTERN_SIZE)
        .build()
        .map_err(|e| {
            let why = e.to_string();
            // regex's messages span lines (the pattern with a caret under it): keep the last.
            let last = why
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            format!(
                "invalid regex '{}': {}",
                p.escape_debug(),
                last.trim().trim_start_matches("error: ")
            )
        })
}

/// Parses `N/s`, `N/m` or `N/h` (also `N/sec`, `N/min`, `N/hour`, `N/second`, `N/minute`).
pub(crate) fn parse_rate(s: &str) -> Result<(u32, Duration), String> {
    let bad = || {
        format!(
            "invalid rate '{}' (expected e.g. \"100/s\", \"30/m\", \"500/h\")",
            s.escape_debug()
        )
    };
    let (n, unit) = s.split_once('/').ok_or_else(bad)?;
    let n: u32 = n.trim().parse().map_err(|_| bad())?;
    let period = match unit.trim() {
        "s" | "sec" | "second" => Duration::from_secs(1),
        "m" | "min" | "minute" => Duration::from_secs(60),
        "h" | "hour" => Duration::from_secs(3600),
        _ => return Err(bad()),
    };
    if n == 0 || n > MAX_RATE {
        return Err(format!("rate '{s}': the count must be 1 to {MAX_RATE}"));
    }
    Ok((n, period))
}

/// How `X-Forwarded-For` is written (DESIGN §6.3).
pub(crate) use quill_core::http1::rewrite::ForwardedFor;
/// A request or response header edit (`set`, `add`, `remove`).
pub(crate) use quill_core::http1::rewrite::HeaderEdit;

/// What the normal form of a request path is used for (`normalize_path`): routes always match
/// it; with `Forward` servers receive it too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum NormalizePath {
    #[default]
    Match,
    Forward,
}

/// The body Quill sends with one of its own answers instead of its built-in one (`error_pages`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ErrorPage {
    pub status: u16,
    /// The file it was read from (read when the configuration is loaded or reloaded).
    pub path: PathBuf,
    /// `text/html; charset=utf-8` for a `.html`/`.htm` file, else `text/plain; charset=utf-8`.
    pub content_type: &'static str,
    pub body: std::sync::Arc<[u8]>,
}

/// An HTTP listener's settings (`[http]` defaults, `[listener.http]`; DESIGN §6.3). Timeouts
/// replace `idle_timeout` and `fin_timeout` on an HTTP listener (they keep their meaning for
/// tunnels after an Upgrade).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HttpSettings {
    /// A request head must be complete this long after its first byte (408 if not; slowloris).
    pub header_timeout: Duration,
    /// A kept-alive client may stay idle this long between requests.
    pub keepalive_timeout: Duration,
    /// No body progress either way for this long ends the exchange.
    pub body_timeout: Duration,
    /// The server must send its first response byte this long after the request (504 if not).
    pub response_timeout: Duration,
    /// An upgraded connection (WebSocket) may stay idle this long.
    pub tunnel_timeout: Duration,
    /// Idle kept-alive connections a worker keeps per server.
    pub server_keepalive: u32,
    /// An idle server connection is closed after this long (below usual server timeouts).
    pub server_idle_timeout: Duration,
    /// Largest request body accepted (413 over it); None = unlimited.
    pub max_body: Option<u64>,
    /// Longest request line (414 over it).
    pub max_request_line: u32,
    /// Largest request head (431 over it).
    pub max_header_bytes: u32,
    /// Most request header fields (431 over it).
    pub max_headers: u32,
    pub forwarded_for: ForwardedFor,
    /// Peers whose `X-Forwarded-For` (and `Forwarded`) is kept; from anyone else it is replaced.
    pub trusted_proxies: Vec<Net>,
    pub x_forwarded_proto: bool,
    pub x_forwarded_host: bool,
    /// Add an RFC 7239 `Forwarded` field.
    pub forwarded: bool,
    /// Add `Via: 1.1 NAME` to requests and responses; None = no Via.
    pub via: Option<String>,
    /// Add `X-Request-ID` to requests that have none (and log it).
    pub request_id: bool,
    /// Whether servers get the path in normal form too (`Forward`), or as the client sent it
    /// (`Match`, the default); routes always match it normalised.
    pub normalize_path: NormalizePath,
    /// Keep request header fields whose names have `_` (nginx's `underscores_in_headers`);
    /// dropped by default, so `X_Forwarded_For` cannot pass for `X-Forwarded-For`.
    pub underscores_in_headers: bool,
    /// Edits applied to every request and response of the listener.
    pub request_headers: Vec<HeaderEdit>,
    pub response_headers: Vec<HeaderEdit>,
    /// Bodies of Quill's own answers by status (`error_pages = { 503 = "file.html" }`).
    pub error_pages: Vec<ErrorPage>,
}

impl Default for HttpSettings {
    fn default() -> HttpSettings {
        HttpSettings {
            header_timeout: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(60),
            response_timeout: Duration::from_secs(60),
            tunnel_timeout: Duration::from_secs(3600),
            server_keepalive: 64,
            server_idle_timeout: Duration::from_secs(4),
            max_body: None,
            max_request_line: 8 * 1024,
            max_header_bytes: 16 * 1024,
            max_headers: 100,
            forwarded_for: ForwardedFor::Append,
            trusted_proxies: Vec::new(),
            x_forwarded_proto: true,
            x_forwarded_host: true,
            forwarded: false,
            via: None,
            request_id: true,
            normalize_path: NormalizePath::Match,
            underscores_in_headers: false,
            request_headers: Vec::new(),
            response_headers: Vec::new(),
            error_pages: Vec::new(),
        }
    }
}

impl HttpSettings {
    /// The page configured for `status`, if any.
    pub(crate) fn error_page(&self, status: u16) -> Option<&ErrorPage> {
        self.error_pages.iter().find(|p| p.status == status)
    }
}

/// A whole configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Config {
    pub global: Global,
    pub listeners: Vec<ListenerConfig>,
    /// Named pools (`[[pool]]`) that routes send requests to. Each is held in the shape of a
    /// listener (a pool is what a listener has besides its socket), so building, changing,
    /// merging and checking a pool is the same code for both; its `listen` is [`pool_addr`],
    /// never bound (a pool's servers name their ports), and it has no routes of its own.
    pub pools: Vec<ListenerConfig>,
}

/// The `listen` field of a named pool: an empty path, which no listener can have.
pub(crate) fn pool_addr() -> ListenAddr {
    ListenAddr::Unix(PathBuf::new())
}

/// Whether an error is the user's input (exit 2) or the environment's (exit 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    Usage,
    Runtime,
}

/// A configuration error: one line naming the offending value.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct ConfigError {
    pub message: String,
    pub kind: ErrorKind,
}

impl ConfigError {
    pub(crate) fn usage(message: impl Into<String>) -> ConfigError {
        ConfigError {
            message: message.into(),
            kind: ErrorKind::Usage,
        }
    }

    pub(crate) fn from_addr(e: AddrError, prefix: &str) -> ConfigError {
        let kind = match e {
            AddrError::Resolve(_) => ErrorKind::Runtime,
            AddrError::Syntax { .. } => ErrorKind::Usage,
        };
        ConfigError {
            message: format!("{prefix}{e}"),
            kind,
        }
    }
}

impl ListenerConfig {
    /// A listener with default tuning and mode; servers are added by the caller.
    pub(crate) fn new(name: &str, listen: ListenAddr) -> ListenerConfig {
        ListenerConfig {
            name: name.to_string(),
            listen,
            mode: Mode::default(),
            servers: Vec::new(),
            emergency: None,
            tuning: Tuning::default(),
            initial_blacklist: Vec::new(),
            health: None,
            slow_start: Duration::ZERO,
            client_acl: None,
            abuse: None,
            http: None,
            sticky_cookie: None,
            routes: Vec::new(),
            tls: None,
            server_tls: None,
            dsr_if: None,
            dsr_ip: None,
            dsr_wait: None,
            tarpit_acl: None,
            udp: None,
            accept_proxy: Vec::new(),
            log: None,
            log_format: None,
        }
    }
    /// Whether this is a named pool (`[[pool]]`) rather than a listener.
    pub(crate) fn is_pool(&self) -> bool {
        self.listen == pool_addr()
    }

    /// `listener 'NAME'` or `pool 'NAME'`, for messages.
    pub(crate) fn what(&self) -> String {
        let kind = if self.is_pool() { "pool" } else { "listener" };
        format!("{kind} '{}'", self.name)
    }

    /// Checks what can only be checked on the whole listener (or named pool).
    /// The virtual address and port of a DSR listener (`dsr_if`), None for any other.
    pub(crate) fn dsr_vip(&self) -> Option<(std::net::Ipv4Addr, u16)> {
        self.dsr_if.as_ref()?;
        let (ip, port) = match &self.listen {
            ListenAddr::Tcp(a) => (a.ip(), a.port()),
            _ => return None,
        };
        match (self.dsr_ip, ip) {
            (Some(vip), _) => Some((vip, port)),
            (None, IpAddr::V4(v4)) if !v4.is_unspecified() => Some((v4, port)),
            _ => None,
        }
    }

    /// How long a DSR listener's lone frame may wait in the receive ring (`dsr_wait`), in ms.
    pub(crate) fn dsr_wait_ms(&self) -> u32 {
        let d = self.dsr_wait.unwrap_or(DEFAULT_DSR_WAIT);
        u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
    }

    /// `dsr_if`, `dsr_ip` and `tarpit_acl`: a DSR listener forwards frames to IPv4 servers on
    /// the interface's network, by address.
    fn check_dsr(&self) -> Result<(), String> {
        let Some(ifname) = &self.dsr_if else {
            if self.dsr_ip.is_some() || self.tarpit_acl.is_some() {
                return Err("dsr_ip and tarpit_acl need dsr_if".into());
            }
            if self.dsr_wait.is_some() {
                return Err("dsr_wait needs dsr_if".into());
            }
            return Ok(());
        };
        if ifname.is_empty() || ifname.len() > 15 || ifname.contains(['/', ' ', '\0']) {
            return Err(format!("dsr_if '{ifname}': not an interface name"));
        }
        if self.http.is_some() || self.tls.is_some() || self.is_pool() {
            return Err("dsr_if: direct server return forwards frames, not HTTP or TLS".into());
        }
        if self.dsr_vip().is_none() {
            return Err("dsr_if: needs an IPv4 virtual address (dsr_ip, or an IPv4 listen address that is not 0.0.0.0)".into());
        }
        for (i, s) in self.servers.iter().enumerate() {
            if !matches!(&s.addr, BackendAddr::Tcp(a) if a.is_ipv4()) {
                return Err(format!(
                    "dsr_if: server {i} ({}) is not an IPv4 address (DSR finds servers on the interface by ARP)",
                    s.addr
                ));
            }
        }
        Ok(())
    }

    /// `transparent` and `source`: where they apply, and a source address of every literal
    /// server's family.
    fn check_source(&self) -> Result<(), String> {
        let t = &self.tuning;
        if t.transparent && (self.http.is_some() || self.is_pool()) {
            return Err("transparent: applies to a TCP listener only (an HTTP server connection serves many clients)".into());
        }
        if let (true, Some(ip)) = (t.transparent, t.source) {
            return Err(format!(
                "source {ip}: not with transparent (server connections leave from the client's address)"
            ));
        }
        if let Some(ip) = t.source {
            if ip.is_unspecified() || ip.is_multicast() {
                return Err(format!("source {ip}: not a unicast address"));
            }
            for (i, s) in self.servers.iter().enumerate() {
                if let BackendAddr::Tcp(a) = &s.addr {
                    if a.is_ipv4() != ip.is_ipv4() {
                        return Err(format!(
                            "source {ip}: server {i} ({a}) is of the other address family"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        // An HTTP listener with routes may leave the rest to them: unmatched requests get 404.
        if self.servers.is_empty() && self.emergency.is_none() && self.routes.is_empty() {
            return Err(ConfigError::usage(format!("{}: no servers", self.what())));
        }
        if self.servers.len() > crate::balancer::MAX_SERVERS {
            return Err(ConfigError::usage(format!(
                "{}: {} servers (at most {})",
                self.what(),
                self.servers.len(),
                crate::balancer::MAX_SERVERS
            )));
        }
        let named = |e: String| ConfigError::usage(format!("{}: {e}", self.what()));
        let udp_check = matches!(
            self.health.as_ref().map(|h| &h.kind),
            Some(CheckKind::Udp { .. })
        );
        if self.udp.is_some() && self.health.is_some() && !udp_check {
            return Err(named(
                "a UDP listener's health check must be type udp (a datagram sent, an answer expected)".into(),
            ));
        }
        if self.udp.is_none() && udp_check {
            return Err(named(
                "a udp health check needs a UDP listener (protocol = \"udp\")".into(),
            ));
        }
        // A TCP listener's routes pick a pool by TLS server name (`sni`), and only that.
        if self.http.is_none() && self.routes.iter().any(|r| r.sni.is_empty()) {
            return Err(named(
                "routes need an HTTP listener (protocol = \"http\") or sni".into(),
            ));
        }
        // SNI routes forward TLS untouched: this listener would have to terminate it.
        if self.tls.is_some() && self.routes.iter().any(|r| !r.sni.is_empty()) {
            return Err(named(
                "sni routes forward TLS untouched, so the listener cannot also terminate it (tls)"
                    .into(),
            ));
        }
        if self.routes.len() > MAX_ROUTES {
            return Err(named(format!(
                "{} routes (at most {MAX_ROUTES})",
                self.routes.len()
            )));
        }
        self.tuning.check().map_err(named)?;
        if let Some(v) = self.tuning.proxy_protocol {
            // (With `server_tls` the header goes in plaintext before the TLS handshake.)
            // v1 is text for a stream: a datagram has only v2's DGRAM form.
            if self.udp.is_some() && v == ProxyVersion::V1 {
                return Err(named(
                    "proxy_protocol v1 has no datagram form: a UDP listener takes v2".into(),
                ));
            }
        }
        check_duration("slow_start", self.slow_start).map_err(named)?;
        for (i, d) in &self.initial_blacklist {
            check_duration(&format!("server {i} blacklist"), *d).map_err(named)?;
        }
        if let Some(h) = &self.health {
            h.check().map_err(named)?;
        }
        if let Some(h) = &self.http {
            h.check().map_err(named)?;
            if self.tuning.tcp_fastclose != Fastclose::Off {
                return Err(named(format!(
                    "tcp_fastclose {}: does not apply to an HTTP listener (HTTP framing decides when an exchange ends)",
                    self.tuning.tcp_fastclose.name()
                )));
            }
        }
        self.check_source().map_err(named)?;
        self.check_dsr().map_err(named)?;
        for (i, s) in self.servers.iter().enumerate() {
            for (name, v, most) in [
                ("max", s.max, MAX_SESSIONS),
                ("hard", s.hard, MAX_SESSIONS),
                ("weight", s.weight, MAX_WEIGHT),
                ("prio", s.prio, MAX_WEIGHT),
            ] {
                in_range(&format!("server {i} {name}"), v.into(), 0..=most.into())
                    .map_err(named)?;
            }
        }
        if let Some(t) = &self.tls {
            check_tls_bounds(t).map_err(|e| named(format!("tls: {e}")))?;
            if self.is_pool() {
                return Err(named(
                    "tls: a pool has no clients of its own (set tls on the listener)".into(),
                ));
            }
        }
        Ok(())
    }

    /// Builds the listener's TLS as its pool will (certificates against their keys, suites,
    /// client CAs), so that a bad file or cipher fails the command or the load that brought it
    /// rather than the first handshake. The error is one line naming the file at fault.
    pub(crate) fn check_tls(&self) -> Result<(), String> {
        let Some(settings) = &self.tls else {
            return Ok(());
        };
        crate::tls::build_server(
            settings,
            self.http.is_some(),
            &crate::tls::tickets::shared_keys(),
        )
        .map(|_| ())
        .map_err(|e| {
            let text = e.to_string();
            match text.strip_prefix("tls: ") {
                Some(rest) => rest.to_string(),
                None => text,
            }
        })
    }
}

/// The bounds of a listener's TLS settings (what `build_server` does not check itself).
fn check_tls_bounds(t: &crate::tls::TlsSettings) -> Result<(), String> {
    if t.certs.is_empty() {
        return Err("no certificate".into());
    }
    if t.certs.len() > MAX_CERTS {
        return Err(format!(
            "{} certificates (at most {MAX_CERTS})",
            t.certs.len()
        ));
    }
    if t.handshake_timeout.is_zero() || t.handshake_timeout > MAX_HANDSHAKE_TIMEOUT {
        return Err("handshake_timeout: must be more than 0 and at most 5m".into());
    }
    let first = t.handshake_first_byte_timeout;
    if first.is_zero() || first > MAX_HANDSHAKE_TIMEOUT {
        return Err("handshake_first_byte_timeout: must be more than 0 and at most 5m".into());
    }
    if !(1..=MAX_HANDSHAKES).contains(&t.max_handshakes_per_source) {
        return Err(format!(
            "max_handshakes_per_source: {} is out of range (1 to {MAX_HANDSHAKES})",
            t.max_handshakes_per_source
        ));
    }
    if !(1..=MAX_HANDSHAKES).contains(&t.max_handshakes) {
        return Err(format!(
            "max_handshakes: {} is out of range (1 to {MAX_HANDSHAKES})",
            t.max_handshakes
        ));
    }
    Ok(())
}

/// Which backend of a listener `Config::self_loop` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Member {
    Server(usize),
    Emergency,
    Abuse,
}

/// A backend that is one of Quill's own listen addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SelfLoop {
    /// Which listener, or named pool: the pools are numbered after the listeners.
    pub listener: usize,
    pub member: Member,
}

impl SelfLoop {
    /// One line naming the listener (or pool), the backend and its address.
    pub(crate) fn message(&self, config: &Config) -> String {
        let Some(l) = config
            .listeners
            .iter()
            .chain(&config.pools)
            .nth(self.listener)
        else {
            return "a server is one of Quill's own listen addresses".into();
        };
        let (what, addr) = match self.member {
            Member::Server(i) => (format!("server {i}"), l.servers[i].addr.to_string()),
            Member::Emergency => (
                "emergency server".to_string(),
                l.emergency
                    .as_ref()
                    .map_or(String::new(), |a| a.to_string()),
            ),
            Member::Abuse => (
                "abuse server".to_string(),
                l.abuse.as_ref().map_or(String::new(), |a| a.to_string()),
            ),
        };
        format!(
            "{}: {what} {addr} is one of Quill's own listen addresses \
             (every session would loop back into Quill)",
            l.what()
        )
    }
}

/// An IPv4-mapped IPv6 address as IPv4, as clients and listeners see it.
fn canonical(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(a, |v4| SocketAddr::new(IpAddr::V4(v4), a.port())),
        IpAddr::V4(_) => a,
    }
}

/// Whether `ip` is this host's: loopback, or an address a socket can be bound to (a cheap
/// question to the kernel, asked only for a server on a wildcard listener's port).
fn is_local_ip(ip: IpAddr) -> bool {
    ip.is_loopback() || std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
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

pub(crate) fn nonzero(d: Duration, what: &str) -> Result<Duration, ConfigError> {
    if d.is_zero() {
        Err(ConfigError::usage(format!("{what}: must be more than 0")))
    } else {
        Ok(d)
    }
}

impl Config {
    /// Builds every listener's TLS ([`ListenerConfig::check_tls`]); the error names the listener.
    pub(crate) fn check_tls(&self) -> Result<(), ConfigError> {
        for l in &self.listeners {
            l.check_tls()
                .map_err(|e| ConfigError::usage(format!("{}: tls: {e}", l.what())))?;
        }
        Ok(())
    }

    /// Validates the whole configuration.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        self.global.check().map_err(ConfigError::usage)?;
        let dsr = self.listeners.iter().filter(|l| l.dsr_if.is_some()).count();
        if dsr > 0 && dsr < self.listeners.len() {
            return Err(ConfigError::usage(
                "dsr_if: a process doing direct server return runs DSR listeners only",
            ));
        }
        if dsr > 0 && (self.global.control.is_some() || self.global.admin.is_some()) {
            return Err(ConfigError::usage(
                "dsr_if: the control socket and the admin listener are not supported yet in a DSR process",
            ));
        }
        if let (Some(n), None) = (self.global.acls.with_country(), &self.global.acls.geo) {
            return Err(ConfigError::usage(format!(
                "acl {n}: country entries need a GeoIP database (geoip = \"FILE.mmdb\" in the configuration file)"
            )));
        }
        if let Some(ListenAddr::Tcp(a)) = &self.global.control {
            if !a.ip().is_loopback() && self.global.control_acl.is_none() {
                return Err(ConfigError::usage(format!(
                    "control address {a} is not a loopback address: set control_acl to say who may use it"
                )));
            }
        }
        if let Some(n) = self.global.control_acl {
            self.check_control_acl(n).map_err(ConfigError::usage)?;
        }
        let mut seen: std::collections::HashMap<String, &str> = Default::default();
        if self.pools.len() > MAX_POOLS {
            return Err(ConfigError::usage(format!(
                "{} named pools (at most {MAX_POOLS})",
                self.pools.len()
            )));
        }
        for (i, p) in self.pools.iter().enumerate() {
            p.validate()?;
            if self.pools[..i].iter().any(|o| o.name == p.name) {
                return Err(ConfigError::usage(format!(
                    "two pools are named '{}'",
                    p.name
                )));
            }
        }
        for l in &self.listeners {
            for r in &l.routes {
                if let RouteAction::Pool(name) = &r.action {
                    if !self.pools.iter().any(|p| &p.name == name) {
                        return Err(ConfigError::usage(format!(
                            "listener '{}': route '{}': no pool named '{name}'",
                            l.name, r.name
                        )));
                    }
                }
            }
        }
        for l in &self.listeners {
            l.validate()?;
            if let Some(other) = seen.insert(l.listen.to_string(), &l.name) {
                return Err(ConfigError::usage(format!(
                    "listeners '{other}' and '{}' both listen on {}",
                    l.name, l.listen
                )));
            }
        }
        if let Some(found) = self.self_loop() {
            return Err(ConfigError::usage(found.message(self)));
        }
        if let Some((_, why)) = self.log_mix() {
            return Err(ConfigError::usage(why));
        }
        Ok(())
    }

    /// Where listener `l`'s access log lines go: its own `log`, else the process-wide one
    /// (None: not logged); in its own `log_format`, else the process-wide one.
    pub(crate) fn listener_log(&self, l: &ListenerConfig) -> Option<ListenerLog> {
        let path = l.log.as_ref().or(self.global.log.as_ref())?;
        let format = l.log_format.unwrap_or(self.global.log_format);
        let kind = match (format, l.http.is_some()) {
            (LogFormat::Json, _) => LineKind::Json,
            (LogFormat::Text, true) => LineKind::Combined,
            (LogFormat::Text, false) => LineKind::Pen,
        };
        Some(ListenerLog {
            path: path.clone(),
            format,
            kind,
            own: l.log.is_some(),
        })
    }

    /// The first listener whose access log lines would share a file with another listener's of
    /// another kind (an HTTP listener's combined lines and a TCP listener's Pen lines, or text
    /// and JSON): its index and why, in words that say how to fix it.
    pub(crate) fn log_mix(&self) -> Option<(usize, String)> {
        let logs: Vec<Option<ListenerLog>> = self
            .listeners
            .iter()
            .map(|l| self.listener_log(l))
            .collect();
        let fix = |l: &ListenerConfig, other: &ListenerConfig| {
            // The one on the process-wide file, else the later one.
            let whose = if l.log.is_some() && other.log.is_none() {
                other
            } else {
                l
            };
            format!(
                "one file holds one format: give listener '{}' its own file (log = \"FILE\" in its [[listener]])",
                whose.name
            )
        };
        for (i, l) in self.listeners.iter().enumerate() {
            let Some(mine) = &logs[i] else { continue };
            for (j, other) in self.listeners[..i].iter().enumerate() {
                let Some(theirs) = &logs[j] else { continue };
                if mine.kind != theirs.kind && same_log_file(&mine.path, &theirs.path) {
                    return Some((
                        i,
                        format!(
                            "listener '{}' would write {} into access log {}, where listener '{}' writes {}: {}",
                            l.name,
                            mine.kind.describe(),
                            mine.path.display(),
                            other.name,
                            theirs.kind.describe(),
                            fix(l, other)
                        ),
                    ));
                }
            }
        }
        None
    }

    /// `control_acl N` must name a list with entries: an empty list permits everyone (Pen's
    /// rule), which would silently open a control address the ACL was meant to guard.
    pub(crate) fn check_control_acl(&self, n: AclId) -> Result<(), String> {
        match &self.global.acls[n] {
            list if !list.entries.is_empty() => Ok(()),
            _ => Err(format!(
                "control_acl {n}: ACL list {n} is empty and an empty list permits everyone \
                 (add entries with 'acl {n} permit|deny ADDR' first)"
            )),
        }
    }

    /// The first server (or emergency or abuse server) that is one of Quill's own listen
    /// addresses: every session sent there would come back and open another, without end. Exact
    /// matches count, and so does any local address on the port of a wildcard listener
    /// (`0.0.0.0:P`, `[::]:P`). Linear in the number of servers.
    pub(crate) fn self_loop(&self) -> Option<SelfLoop> {
        let mut exact = HashSet::new();
        let mut wildcard_ports = HashSet::new();
        let mut paths = HashSet::new();
        for l in &self.listeners {
            match &l.listen {
                ListenAddr::Tcp(a) if a.ip().is_unspecified() => {
                    wildcard_ports.insert(a.port());
                }
                ListenAddr::Tcp(a) => {
                    exact.insert(canonical(*a));
                }
                ListenAddr::Unix(p) => {
                    paths.insert(p.as_path());
                }
            }
        }
        // One question to the kernel per distinct address, however many servers share it.
        let mut local: std::collections::HashMap<IpAddr, bool> = Default::default();
        let mut mine = |addr: &BackendAddr| match addr {
            BackendAddr::Tcp(a) => {
                let a = canonical(*a);
                exact.contains(&a)
                    || (wildcard_ports.contains(&a.port())
                        && *local.entry(a.ip()).or_insert_with(|| is_local_ip(a.ip())))
            }
            BackendAddr::Unix(p) => paths.contains(p.as_path()),
            _ => false,
        };
        for (li, l) in self.listeners.iter().chain(&self.pools).enumerate() {
            if let Some(i) = l.servers.iter().position(|s| mine(&s.addr)) {
                return Some(SelfLoop {
                    listener: li,
                    member: Member::Server(i),
                });
            }
            if l.emergency.as_ref().is_some_and(&mut mine) {
                return Some(SelfLoop {
                    listener: li,
                    member: Member::Emergency,
                });
            }
            if l.abuse.as_ref().is_some_and(&mut mine) {
                return Some(SelfLoop {
                    listener: li,
                    member: Member::Abuse,
                });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let check =
            |s: &str, ms: u64| assert_eq!(parse_duration(s), Ok(Duration::from_millis(ms)), "{s}");
        check("30", 30_000);
        check("500ms", 500);
        check("2s", 2_000);
        check("5m", 300_000);
        check("1h", 3_600_000);
        for bad in ["", "s", "1.5s", "-1", "3d", "1 s", "99999999999999999999"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}

#[cfg(test)]
mod bounds {
    use super::*;
    use crate::command::parse;
    use crate::config::from_toml;

    fn toml(extra_top: &str, extra_listener: &str) -> Result<Config, ConfigError> {
        from_toml(
            "b.toml",
            &format!(
                "{extra_top}\n[[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:7000\"\n{extra_listener}\n\
                 servers = [\"127.0.0.1:7001\"]\n"
            ),
            &TuningPatch::default(),
        )
    }

    fn refused<T: fmt::Debug>(r: Result<T, ConfigError>, needle: &str) {
        let e = r.expect_err("refused").message;
        assert!(e.contains(needle), "{e:?} should name {needle:?}");
        assert!(!e.contains('\n'), "one line: {e:?}");
    }

    fn one() -> Config {
        toml("", "").unwrap()
    }

    fn apply(c: &mut Config, line: &str) -> Result<(), ConfigError> {
        // As the controller does: a change that does not validate changes nothing.
        let cmd = parse(line).map_err(|e| ConfigError::usage(e.0))?;
        let mut next = c.clone();
        next.apply(None, &cmd)?;
        next.validate()?;
        *c = next;
        Ok(())
    }

    #[test]
    fn clients_max_of_four_billion_is_refused_not_an_abort() {
        refused(
            toml("clients_max = 4294967295", ""),
            "b.toml:1: clients_max",
        );
        refused(toml("", "clients_max = 1000001"), "b.toml:5: clients_max");
        refused(apply(&mut one(), "clients_max 4294967295"), "4294967295");
        assert!(toml("clients_max = 1000000", "").is_ok());
    }

    #[test]
    fn timeout_of_eighteen_quintillion_seconds_is_refused() {
        refused(toml("connect_timeout = 18446744073709551", ""), "30 days");
        refused(toml("", "idle_timeout = \"2592001s\""), "30 days");
        refused(apply(&mut one(), "timeout 18446744073709551"), "30 days");
        assert!(parse_duration("720h").is_ok());
        assert!(parse_duration("721h").unwrap_err().contains("30 days"));
    }

    #[test]
    fn tracking_of_two_to_the_32_does_not_wrap() {
        refused(apply(&mut one(), "tracking 4294967296"), "4294967296");
        refused(toml("tracking_time = 4294967296", ""), "b.toml:1:");
        let mut c = one();
        apply(&mut c, "tracking 30d").unwrap_err();
        apply(&mut c, "tracking 720h").unwrap();
        assert_eq!(
            c.listeners[0].tuning.tracking_time.as_secs() as u32 as u64,
            2_592_000
        );
    }

    #[test]
    fn every_other_number_has_a_bound() {
        refused(toml("workers = 1025", ""), "b.toml:1: workers");
        refused(toml("max_connections = 0", ""), "max_connections");
        refused(toml("max_connections = 1000001", ""), "max_connections");
        refused(toml("backlog = 70000", ""), "backlog");
        refused(toml("accept_batch = 0", ""), "accept_batch");
        refused(toml("max_per_source = 1000001", ""), "max_per_source");
        refused(toml("[health]\nrise = 1001", ""), "rise");
        refused(
            from_toml(
                "b.toml",
                "[[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:7000\"\n\
                 servers = [{ address = \"127.0.0.1:7001\", weight = 4000000000 }]\n",
                &TuningPatch::default(),
            ),
            "b.toml:4: weight",
        );
        let mut c = one();
        refused(apply(&mut c, "conn_max 4294967295"), "conn_max");
        refused(apply(&mut c, "server 0 weight 4294967295"), "weight");
        refused(apply(&mut c, "max_per_source 1000001"), "max_per_source");
        apply(&mut c, "max_per_source 5").unwrap();
        assert_eq!(c.listeners[0].tuning.max_per_source, 5);
        assert!(c.to_commands().contains("max_per_source 5\n"));
        assert!(c.explain().contains("sessions per client address: 5"));
    }

    #[test]
    fn server_address_with_trailing_junk_is_refused() {
        let mut c = one();
        refused(
            apply(&mut c, "server 0 address 127.0.0.1:1:2:3"),
            "127.0.0.1:1:2:3",
        );
        assert_eq!(c.listeners[0].servers[0].addr.to_string(), "127.0.0.1:7001");
        apply(&mut c, "server 0 address 127.0.0.2:9").unwrap();
        apply(&mut c, "server 0 address ::1").unwrap();
        assert_eq!(c.listeners[0].servers[0].addr.to_string(), "[::1]:9");
        refused(
            apply(&mut c, "server 1 address 127.0.0.1:1:2"),
            "127.0.0.1:1:2",
        );
    }

    #[test]
    fn server_address_0_0_0_0_is_refused() {
        for bad in [
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::",
            "::ffff:0.0.0.0",
            "ff02::1",
        ] {
            let mut c = one();
            refused(
                apply(&mut c, &format!("server 0 address {bad}")),
                "is not a server address",
            );
            refused(
                apply(&mut c, &format!("server add [{bad}]:80")),
                "is not a server address",
            );
        }
        refused(toml("", "emergency = \"0.0.0.0:80\""), "b.toml:5:");
    }

    #[test]
    fn control_acl_naming_an_empty_list_is_refused() {
        refused(toml("control_acl = 5", ""), "b.toml:1: control_acl 5");
        refused(
            toml(
                "control = \"0.0.0.0:10080\"\ncontrol_acl = 5\n[acl]\n4 = [\"permit 10.0.0.1\"]",
                "",
            ),
            "ACL list 5 is empty",
        );
        let ok = toml("control_acl = 5\n[acl]\n5 = [\"permit 10.0.0.1\"]", "").unwrap();
        let mut c = one();
        refused(apply(&mut c, "control_acl 5"), "empty");
        let mut c = ok;
        refused(apply(&mut c, "no acl 5"), "control_acl 5");
        apply(&mut c, "no control_acl").unwrap();
        apply(&mut c, "no acl 5").unwrap();
    }

    #[test]
    fn server_that_is_quills_own_listener_is_refused() {
        refused(
            from_toml(
                "b.toml",
                "[[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:7000\"\n\
                 servers = [\"127.0.0.1:7001\",\n \"127.0.0.1:7000\"]\n",
                &TuningPatch::default(),
            ),
            "b.toml:5: listener 'a': server 1 127.0.0.1:7000 is one of Quill's own listen addresses",
        );
        let mut c = one();
        refused(apply(&mut c, "server 0 port 7000"), "own listen");
        refused(apply(&mut c, "server add 127.0.0.1:7000"), "own listen");
        refused(
            apply(&mut c, "server 0 address [::ffff:127.0.0.1]:7000"),
            "own listen",
        );
        assert_eq!(c.listeners[0].servers.len(), 1);
        // A wildcard listener: any local address on its port loops.
        let w = from_toml(
            "w.toml",
            "[[listener]]\nname = \"w\"\nlisten = \"7100\"\nservers = [\"127.0.0.1:7001\"]\n",
            &TuningPatch::default(),
        )
        .unwrap();
        for (line, loops) in [
            ("server 0 address 127.0.0.1:7100", true),
            ("server 0 address 127.0.0.5:7100", true),
            ("server 0 address [::1]:7100", true),
            ("server 0 address 192.0.2.1:7100", false),
            ("server 0 address 127.0.0.1:7101", false),
        ] {
            assert_eq!(apply(&mut w.clone(), line).is_err(), loops, "{line}");
        }
        refused(toml("", "abuse = \"127.0.0.1:7000\""), "abuse server");
        // Another listener of the same process counts too.
        refused(
            from_toml(
                "b.toml",
                "[[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:7000\"\nservers = [\"127.0.0.1:7201\"]\n\
                 [[listener]]\nname = \"b\"\nlisten = \"127.0.0.1:7201\"\nservers = [\"127.0.0.1:7001\"]\n",
                &TuningPatch::default(),
            ),
            "b.toml:4: listener 'a': server 0",
        );
    }

    #[test]
    fn forty_thousand_servers_check_in_under_a_second() {
        let mut text = String::from(
            "[[listener]]\nname = \"big\"\nlisten = \"127.0.0.1:7000\"\nservers = [\n",
        );
        for i in 0..40_000u32 {
            text += &format!("  \"10.{}.{}.{}:80\",\n", i >> 16, (i >> 8) & 255, i & 255);
        }
        text += "]\n";
        let started = std::time::Instant::now();
        let c = from_toml("big.toml", &text, &TuningPatch::default()).unwrap();
        let _ = c.explain();
        let pool = crate::backend::Pool::build(&c.listeners[0], Default::default(), None, 0);
        let again =
            crate::backend::Pool::build(&c.listeners[0], Default::default(), Some(&pool), 0);
        assert!(std::sync::Arc::ptr_eq(
            &pool.servers[39_999],
            &again.servers[39_999]
        ));
        // Unoptimised test build on a busy machine: the old code took minutes here.
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }

    /// `dsr_wait`: a bare number is milliseconds, a unit is read as any duration; whole
    /// milliseconds from 1 to 1000 only; a listener without `dsr_if` refuses it.
    #[test]
    fn dsr_wait_takes_milliseconds_within_range_and_needs_dsr_if() {
        for (text, ms) in [
            ("1", 1),
            ("2", 2),
            ("50ms", 50),
            ("1s", 1000),
            (" 1000 ", 1000),
        ] {
            assert_eq!(
                parse_dsr_wait(text),
                Ok(Duration::from_millis(ms)),
                "{text}"
            );
        }
        for bad in [
            "0",
            "1001",
            "2s",
            "0ms",
            "",
            "ms",
            "-1",
            "1.5",
            "99999999999999999999999",
        ] {
            let e = parse_dsr_wait(bad).expect_err(bad);
            assert!(e.starts_with("dsr_wait: "), "{bad}: {e}");
        }
        let mut c = toml("", "dsr_if = \"eth0\"\ndsr_wait = 9").unwrap();
        assert_eq!(c.listeners[0].dsr_wait_ms(), 9);
        apply(&mut c, "no dsr_wait").unwrap();
        assert_eq!(c.listeners[0].dsr_wait_ms(), 2);
        apply(&mut c, "dsr_wait 40").unwrap();
        assert_eq!(c.listeners[0].dsr_wait, Some(Duration::from_millis(40)));
        refused(apply(&mut c, "dsr_wait 0"), "out of range");
        assert_eq!(c.listeners[0].dsr_wait_ms(), 40);
        refused(toml("", "dsr_wait = 9"), "dsr_wait needs dsr_if");
        let mut plain = one();
        assert!(apply(&mut plain, "dsr_wait 9").is_err());
        assert_eq!(plain.listeners[0].dsr_wait, None);
    }
}
