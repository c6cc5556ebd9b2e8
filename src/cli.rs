//! The command line: Pen's form (`quill [OPTIONS] [HOST:]PORT SERVER...`), `--config`, and the
//! subcommands. Turns arguments into a validated `Config` and runs it; maps failures to exit
//! statuses (2 usage or configuration, 1 runtime).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgAction, Parser, Subcommand};

use crate::addr;
use crate::command::{self, ModeWord};
use crate::config::{
    self, Config, ConfigError, ErrorKind, Global, ListenerConfig, ListenerKind, TuningPatch,
};
use crate::demo::{Behaviour, DemoServer};
use crate::runtime::{self, Start};
use crate::state::Rebuild;
use crate::tls::{CertFiles, ClientAuth, FileData, TlsSettings, TlsVersion};

fn duration(s: &str) -> Result<Duration, String> {
    config::parse_duration(s)
}

/// A clap parser for a `u32` (or `usize`) within `lo..=hi`: out of range is a usage error (exit 2)
/// naming the value and the bounds, before anything is allocated from it.
fn ranged<T>(lo: u64, hi: u64) -> clap::builder::RangedU64ValueParser<T>
where
    T: TryFrom<u64> + Clone + Send + Sync + 'static,
    <T as TryFrom<u64>>::Error: std::fmt::Display + Send + Sync + 'static,
{
    clap::builder::RangedU64ValueParser::<T>::new().range(lo..=hi)
}

const AFTER_HELP: &str = "\
SERVER is HOST[:PORT[:MAXCONN[:HARD[:WEIGHT[:PRIO]]]]] as in Pen ([v6addr]:port for IPv6, a path
for a Unix socket). Durations are seconds, or a number with ms, s, m or h (500ms, 2s, 5m).

Examples:
  quill 8080 10.0.0.1:80 10.0.0.2:80           balance port 8080 over two servers
  quill -r -x 9000 127.0.0.1:8080 a:80 b:80:0:0:3
                                               round robin, at most 9000 sessions
  quill -H -E site.pem -K site.key 443 10.0.0.1:80 10.0.0.2:80
                                               HTTPS in front of two HTTP servers (TLS 1.2/1.3)
  quill -C /run/quill/quill.sock --check http:/health --admin 9100 8080 a:80 b:80
                                               control socket, health checks, metrics and page
  quill ctl --socket /run/quill/quill.sock servers      the pool, in Pen's format
  quill --config /etc/quill/quill.toml         several listeners from a file (SIGHUP reloads it)
  quill --config q.toml -C S --takeover S      replace the Quill behind control socket S, no loss
  quill --exit-idle-time 5min 127.0.0.1:8081   as systemd-socket-proxyd (sockets from systemd)
  quill demo                                   try it with built-in demo backends";

/// Quill: a Pen-compatible TCP load balancer for Linux.
#[derive(Debug, Parser)]
#[command(
    name = "quill",
    version,
    disable_help_flag = true,
    args_conflicts_with_subcommands = true,
    after_help = AFTER_HELP
)]
pub struct Cli {
    /// Print help
    #[arg(long, action = ArgAction::Help)]
    help: Option<bool>,

    /// Round robin without client tracking
    #[arg(short = 'r', long)]
    roundrobin: bool,
    /// Pick the server by a hash of the client address (with -r: address and port)
    #[arg(short = 'h', long)]
    hash: bool,
    /// Weighted least connections (sessions/WEIGHT)
    #[arg(short = 'W', long)]
    weight: bool,
    /// No failover: close the client if its first server fails
    #[arg(short = 's', long)]
    stubborn: bool,
    /// How long a failed server is skipped [default: 30s]
    #[arg(short = 'b', long, value_name = "DUR", value_parser = duration)]
    blacklist: Option<Duration>,
    /// Backend connect timeout [default: 3s]
    #[arg(short = 't', long, value_name = "DUR", value_parser = duration)]
    connect_timeout: Option<Duration>,
    /// Client tracking expiry, 0 = never [default: 0]
    #[arg(short = 'T', long, value_name = "DUR", value_parser = duration)]
    tracking_time: Option<Duration>,
    /// Client tracking table size [default: 2048]
    #[arg(short = 'c', long, value_name = "N", value_parser = ranged::<u32>(1, config::MAX_CLIENTS.into()))]
    clients_max: Option<u32>,
    /// Sessions per process [default: what the open-file limit allows]
    #[arg(short = 'x', long, visible_alias = "connections-max", value_name = "N", value_parser = ranged::<u32>(1, config::MAX_SESSIONS.into()))]
    max_connections: Option<u32>,
    /// Server used when no other is available
    #[arg(short = 'e', long, value_name = "HOST:PORT")]
    emergency: Option<String>,
    /// Control command run at start (repeatable), e.g. -O leastconn, -O "server 1 weight 3"
    #[arg(short = 'O', long = "command", short_alias = 'o', value_name = "CMD")]
    commands: Vec<String>,
    /// Write the process id here; removed at exit
    #[arg(short = 'p', long, value_name = "FILE")]
    pid_file: Option<PathBuf>,
    /// Listen backlog [default: 1024]
    #[arg(short = 'q', long, value_name = "N", value_parser = ranged::<u32>(1, config::MAX_BACKLOG.into()))]
    backlog: Option<u32>,
    /// Accepts per wake-up [default: 100]
    #[arg(short = 'm', long, value_name = "N", value_parser = ranged::<u32>(1, config::MAX_ACCEPT_BATCH.into()))]
    accept_batch: Option<u32>,
    /// Access log, one line per session; reopened on SIGUSR2 and `quill ctl reopen` (log rotation)
    #[arg(short = 'l', long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Run as this user after binding
    #[arg(short = 'u', long, value_name = "USER")]
    user: Option<String>,
    /// Chroot to this directory after binding
    #[arg(short = 'j', long, value_name = "DIR")]
    chroot: Option<PathBuf>,
    /// More logging (repeat for more)
    #[arg(short = 'd', long, action = ArgAction::Count)]
    debug: u8,
    /// Stay in the foreground (always: accepted for Pen compatibility)
    #[arg(short = 'f', long)]
    foreground: bool,
    /// HTTP mode: an HTTP/1.1 reverse proxy (X-Forwarded-For on every request, keep-alive both
    /// ways); with --config, every listener (settings from the file's [http] table)
    #[arg(short = 'H', long)]
    http: bool,

    /// TOML configuration file (several listeners); not with positional arguments
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Worker threads [default: number of cores]
    #[arg(long, value_name = "N", value_parser = ranged::<usize>(1, config::MAX_WORKERS as u64))]
    workers: Option<usize>,
    /// Close sessions with no traffic for this long, 0 = never [default: 0]
    #[arg(long, value_name = "DUR", value_parser = duration)]
    idle_timeout: Option<Duration>,
    /// Close a half-closed session that makes no progress for this long [default: 60s]
    #[arg(long, value_name = "DUR", value_parser = duration)]
    fin_timeout: Option<Duration>,
    /// On SIGTERM/SIGINT, how long open sessions may take to finish [default: 30s]
    #[arg(long, value_name = "DUR", value_parser = duration)]
    drain_timeout: Option<Duration>,
    /// Do not enable TCP Fast Open on listeners
    #[arg(long)]
    no_tfo: bool,
    /// Share the port with other Quill processes (SO_REUSEPORT)
    #[arg(long)]
    reuseport: bool,
    /// Copy bulk flows through buffers instead of splice pipes (for measurement)
    #[arg(long)]
    no_splice: bool,

    /// Where clients denied by the client ACL go [default: they are closed]
    #[arg(short = 'B', long, value_name = "HOST:PORT")]
    abuse: Option<String>,
    /// Control socket: a Unix socket path (mode 0600) or a loopback HOST:PORT
    #[arg(short = 'C', long, value_name = "ADDR")]
    control: Option<String>,
    /// Allow the `exit` control command
    #[arg(short = 'X', long)]
    allow_exit: bool,
    /// Control commands read after the command line, and again on every reload
    #[arg(short = 'F', long, value_name = "FILE")]
    command_file: Option<PathBuf>,
    /// Pen's HTML status report, written on SIGUSR1 and by the `status` command
    #[arg(short = 'w', long, value_name = "FILE")]
    status_file: Option<PathBuf>,
    /// Access log format: text or json [default: text]
    #[arg(long, value_name = "FORMAT")]
    log_format: Option<String>,
    /// Admin HTTP listener: /metrics, /api/status and a live status page (e.g. 127.0.0.1:9100)
    #[arg(long, value_name = "ADDR")]
    admin: Option<String>,
    /// A file holding the token every admin HTTP request must carry (Bearer, or Basic password)
    #[arg(long, value_name = "FILE")]
    admin_token_file: Option<PathBuf>,
    /// Take the listening sockets over from the Quill behind this control socket, then let it drain
    #[arg(long, value_name = "SOCKET")]
    takeover: Option<PathBuf>,
    /// Active health check: tcp (connect) or http:/PATH (GET, status 200-399)
    #[arg(long, value_name = "CHECK")]
    check: Option<String>,
    /// Time between checks of one server [default: 2s]
    #[arg(long, value_name = "DUR", value_parser = duration)]
    check_interval: Option<Duration>,
    /// How long a check may take [default: 1s]
    #[arg(long, value_name = "DUR", value_parser = duration)]
    check_timeout: Option<Duration>,
    /// HTTP statuses that pass the check, e.g. 200-299 [default: 200-399]
    #[arg(long, value_name = "RANGE")]
    check_expect: Option<String>,
    /// Successful checks in a row that bring a server up [default: 2]
    #[arg(long, value_name = "N", value_parser = ranged::<u32>(1, config::MAX_RISE_FALL.into()))]
    rise: Option<u32>,
    /// Failed checks in a row that take a server down [default: 3]
    #[arg(long, value_name = "N", value_parser = ranged::<u32>(1, config::MAX_RISE_FALL.into()))]
    fall: Option<u32>,
    /// A server coming back ramps its share up over this time [default: 0 = at once]
    #[arg(long, value_name = "DUR", value_parser = duration)]
    slow_start: Option<Duration>,
    /// Exit once no session (nor UDP flow) has been open for this long (with socket activation); also systemd
    /// time spans ("5min", "1h 30s", "infinity")
    #[arg(long, value_name = "DUR", value_parser = crate::systemd::parse_timespan)]
    exit_idle_time: Option<Duration>,
    /// Send a PROXY protocol v1 header to the servers before the client's bytes (as
    /// systemd-socket-proxyd's --proxy-protocol; `proxy_protocol` in TOML also takes v2)
    #[arg(long)]
    proxy_protocol: bool,

    #[command(flatten)]
    tls: PenTls,

    #[command(flatten)]
    later: Later,

    /// [HOST:]PORT or /path.sock to listen on
    #[arg(value_name = "LISTEN")]
    listen: Option<String>,
    /// Servers: HOST[:PORT[:MAXCONN[:HARD[:WEIGHT[:PRIO]]]]]
    #[arg(value_name = "SERVER")]
    servers: Vec<String>,

    #[command(subcommand)]
    sub: Option<Sub>,
}

/// Pen's TLS options: termination on the listener of the command line.
#[derive(Debug, clap::Args)]
struct PenTls {
    /// TLS: the listener's certificate (PEM, the leaf then its chain); clients speak TLS
    #[arg(short = 'E', value_name = "CERTFILE")]
    cert: Option<PathBuf>,
    /// TLS: the certificate's private key (PEM) [default: in the -E file]
    #[arg(short = 'K', value_name = "KEYFILE")]
    key: Option<PathBuf>,
    /// TLS: CA certificates client certificates must chain to (asked for; required with -R)
    #[arg(short = 'G', value_name = "CACERT")]
    ca_file: Option<PathBuf>,
    /// TLS: a directory of CA certificate files, as -G
    #[arg(short = 'A', value_name = "CADIR")]
    ca_dir: Option<PathBuf>,
    /// TLS: require a client certificate (with -G or -A)
    #[arg(short = 'R')]
    require: bool,
    /// TLS: the lowest protocol: ssl23 or tls1.2 (TLS 1.2 and 1.3), tls1.3
    #[arg(short = 'L', value_name = "PROTO")]
    proto: Option<String>,
    /// TLS: accepted for Pen compatibility; changes nothing
    #[arg(short = 'Z')]
    compat: bool,
}

impl PenTls {
    /// Whether an option other than `-Z` is given.
    fn any(&self) -> bool {
        self.cert.is_some()
            || self.key.is_some()
            || self.ca_file.is_some()
            || self.ca_dir.is_some()
            || self.require
            || self.proto.is_some()
    }

    /// The listener's TLS termination: None without `-E`. Files are read now (and again on
    /// every reload, which builds the configuration again).
    fn settings(&self) -> Result<Option<TlsSettings>, ConfigError> {
        let Some(cert_path) = &self.cert else {
            let given = [
                (self.key.is_some(), "-K"),
                (self.ca_file.is_some(), "-G"),
                (self.ca_dir.is_some(), "-A"),
                (self.require, "-R"),
                (self.proto.is_some(), "-L"),
            ];
            return match given.iter().find(|(on, _)| *on) {
                Some((_, flag)) => Err(ConfigError::usage(format!(
                    "{flag} needs -E CERTFILE (TLS termination on the listener)"
                ))),
                None => Ok(None),
            };
        };
        let read = |flag: &str, path: &std::path::Path| {
            FileData::read(path).map_err(|e| ConfigError::usage(format!("{flag}: {e}")))
        };
        let cert = read("-E", cert_path)?;
        let key = match &self.key {
            Some(path) => read("-K", path)?,
            None => cert.clone(),
        };
        let mut settings = TlsSettings::new(vec![CertFiles {
            cert,
            key,
            ocsp: None,
            names: Vec::new(),
            default: false,
        }]);
        if let Some(proto) = &self.proto {
            settings.min_version = pen_protocol(proto)?;
        }
        let mut ca = Vec::new();
        if let Some(path) = &self.ca_file {
            let file = read("-G", path)?;
            config::check_certificates(&file)
                .map_err(|e| ConfigError::usage(format!("-G: {e}")))?;
            ca.push(file);
        }
        if let Some(dir) = &self.ca_dir {
            ca.extend(
                crate::tls::certs::read_ca_dir(dir)
                    .map_err(|e| ConfigError::usage(format!("-A: {e}")))?,
            );
        }
        if self.require && ca.is_empty() {
            return Err(ConfigError::usage(
                "-R needs -G CACERT or -A CADIR (the CAs client certificates must chain to)",
            ));
        }
        if !ca.is_empty() {
            settings.client_auth = Some(ClientAuth {
                ca,
                crls: Vec::new(),
                ca_dir: self.ca_dir.clone(),
                required: self.require,
            });
        }
        Ok(Some(settings))
    }
}

/// Pen's `-L`: `ssl23` negotiates the highest version both sides have, as rustls does.
fn pen_protocol(proto: &str) -> Result<TlsVersion, ConfigError> {
    match proto.to_ascii_lowercase().as_str() {
        "ssl23" | "tls" | "tls1.2" | "tlsv1.2" => Ok(TlsVersion::V1_2),
        "tls1.3" | "tlsv1.3" => Ok(TlsVersion::V1_3),
        "ssl2" | "ssl3" | "tls1" | "tls1.0" | "tlsv1" | "tls1.1" | "tlsv1.1" => Err(
            ConfigError::usage(format!(
                "-L {proto}: not supported: rustls speaks TLS 1.2 and 1.3 (use ssl23, tls1.2 or tls1.3)"
            )),
        ),
        _ => Err(ConfigError::usage(format!(
            "-L '{}': unknown protocol (expected ssl23, tls1.2 or tls1.3)",
            proto.escape_debug()
        ))),
    }
}

/// Pen options that later issues implement, and obsolete ones: parsed so the message is precise.
#[derive(Debug, clap::Args)]
struct Later {
    /// UDP: balance datagrams per client flow (Pen's -U)
    #[arg(short = 'U')]
    udp: bool,
    #[arg(short = 'D', hide = true)]
    obsolete_delayed_forward: bool,
    #[arg(short = 'n', hide = true)]
    obsolete_nonblocking: bool,
    #[arg(short = 'Q', hide = true)]
    obsolete_kqueue: bool,
    #[arg(short = 'P', hide = true)]
    obsolete_poll: bool,
    #[arg(short = 'a', hide = true)]
    obsolete_ascii: bool,
    #[arg(short = 'S', hide = true)]
    obsolete_servers: Option<String>,
}

impl Later {
    fn obsolete(&self) -> Vec<&'static str> {
        let set = [
            (self.obsolete_delayed_forward, "-D"),
            (self.obsolete_nonblocking, "-n"),
            (self.obsolete_kqueue, "-Q"),
            (self.obsolete_poll, "-P"),
            (self.obsolete_ascii, "-a"),
            (self.obsolete_servers.is_some(), "-S"),
        ];
        set.into_iter()
            .filter(|(given, _)| *given)
            .map(|(_, name)| name)
            .collect()
    }
}

/// `-h` and `--help` on a subcommand. The top level has only `--help` (`-h` is Pen's hash there),
/// and clap carries that choice down to the subcommands, so they declare theirs here. For `ctl`
/// they count only before the command: `quill ctl --socket S --help` prints help and sends nothing.
#[derive(Debug, clap::Args)]
struct SubHelp {
    /// Print help
    #[arg(short = 'h', long, action = ArgAction::Help)]
    help: Option<bool>,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// Run Quill over built-in demo HTTP backends and print what to try
    Demo {
        #[command(flatten)]
        help: SubHelp,
        /// Where Quill listens
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: String,
        /// How many demo backends to start
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=64))]
        backends: u16,
    },
    /// Validate a configuration file, or a command line, and explain what it does
    #[command(
        after_help = "Examples:\n  quill check --config /etc/quill/quill.toml\n  quill check -H -r 8080 10.0.0.1:80 10.0.0.2:80    a command line, checked without starting\n  quill check --config quill.toml -H                 the file as `quill --config quill.toml -H` reads it\n\nIn a checked command line -h is this help: write --hash for Pen's -h."
    )]
    Check {
        #[command(flatten)]
        help: SubHelp,
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Quill's options, listen address and servers, checked as `quill ARGS` would start
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        args: Vec<String>,
    },
    /// Send a control command to a running Quill (Pen's penctl language) and print the reply
    #[command(
        after_help = "Examples:\n  quill ctl servers\n  quill ctl --socket 127.0.0.1:10080 server 1 drain\n  quill ctl --json servers\n  quill ctl listener web weight\n  quill ctl reopen                      reopen the access log after logrotate moved it\n  quill ctl --socket 127.0.0.1:10080 --token-file /etc/quill/control.token servers\n\nWithout --socket: $QUILL_SOCKET, else /run/quill/quill.sock."
    )]
    Ctl {
        #[command(flatten)]
        help: SubHelp,
        /// Control socket: a Unix socket path or HOST:PORT (a bare number is a loopback port)
        #[arg(long, value_name = "ADDR")]
        socket: Option<String>,
        /// Ask for the reply in JSON
        #[arg(long)]
        json: bool,
        /// A file holding the control token (`control_token_file`): a TCP command is sent as
        /// `auth TOKEN COMMAND` [env: QUILL_TOKEN_FILE]
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// The command and its arguments
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "COMMAND"
        )]
        command: Vec<String>,
    },
    /// Load generator: idle and active connections, latency, and the CPU and memory of watched
    /// processes (the seed's table)
    #[cfg(feature = "bench")]
    Bench(Box<quill_bench::BenchArgs>),
    /// Write the man pages or print shell completions (for packagers)
    Generate(crate::generate::GenerateArgs),
}

/// Parses the process arguments and runs; the return value is the exit status.
pub fn main() -> ExitCode {
    main_with(std::env::args_os())
}

/// Like [`main`] with these arguments (the program name first): how the session fuzz target
/// (`fuzz/fuzz_targets/http_session.rs`) runs Quill in its own process, its workers' code
/// instrumented with the target's.
pub fn main_with(args: impl IntoIterator<Item = std::ffi::OsString>) -> ExitCode {
    let cli = Cli::parse_from(args);
    crate::log::init(cli.debug);
    match cli.sub {
        Some(Sub::Demo {
            ref listen,
            backends,
            ..
        }) => return demo(listen, backends, cli.debug),
        Some(Sub::Check {
            ref config,
            ref args,
            ..
        }) => {
            return match (config, args.is_empty()) {
                (Some(path), true) => check(path),
                (None, true) => fail(
                    ErrorKind::Usage,
                    "check needs --config FILE or a command line (quill check [OPTIONS] [HOST:]PORT SERVER...)",
                ),
                (config, false) => check_command_line(config.as_deref(), args),
            }
        }
        Some(Sub::Ctl {
            ref socket,
            json,
            ref token_file,
            ref command,
            ..
        }) => {
            return match crate::control::client(
                socket.as_deref(),
                json,
                token_file.as_deref(),
                command,
            ) {
                Ok(reply) => {
                    print!("{reply}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(ErrorKind::Runtime, &e.to_string()),
            }
        }
        #[cfg(feature = "bench")]
        Some(Sub::Bench(ref args)) => return quill_bench::run(args),
        Some(Sub::Generate(ref args)) => {
            return crate::generate::run(args, <Cli as clap::CommandFactory>::command())
        }
        None => {}
    }
    for name in cli.later.obsolete() {
        eprintln!("quill: notice: option {name} is obsolete in Pen and has no effect");
    }
    if cli.tls.compat {
        eprintln!("quill: notice: option -Z (SSL compatibility workarounds) changes nothing: rustls needs none");
    }
    if is_proxyd_form(&cli) {
        return match proxyd_config(&cli) {
            Ok((config, inherited)) => run(
                config,
                Start {
                    inherited: Some(inherited),
                    ..Start::default()
                },
            ),
            Err(e) => fail(e.kind, &e.message),
        };
    }
    match build_config(&cli) {
        Ok(config) => {
            let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
            let rebuild: Rebuild = Box::new(move || {
                let cli = Cli::try_parse_from(&args)
                    .map_err(|e| ConfigError::usage(e.to_string().trim().to_string()))?;
                build_config(&cli)
            });
            run(
                config,
                Start {
                    rebuild: Some(rebuild),
                    takeover: cli.takeover.clone(),
                    ..Start::default()
                },
            )
        }
        Err(e) => fail(e.kind, &e.message),
    }
}

fn fail(kind: ErrorKind, message: &str) -> ExitCode {
    eprintln!("quill: error: {message}");
    match kind {
        ErrorKind::Usage => ExitCode::from(2),
        ErrorKind::Runtime => ExitCode::from(1),
    }
}

fn run(config: Config, start: Start) -> ExitCode {
    match runtime::run(config, start) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(ErrorKind::Runtime, &e.to_string()),
    }
}

impl Cli {
    fn tuning_patch(&self) -> TuningPatch {
        TuningPatch {
            connect_timeout: self.connect_timeout,
            blacklist: self.blacklist,
            tracking_time: self.tracking_time,
            clients_max: self.clients_max,
            idle_timeout: self.idle_timeout,
            fin_timeout: self.fin_timeout,
            proxy_protocol: self
                .proxy_protocol
                .then_some(Some(config::ProxyVersion::V1)),
            ..TuningPatch::default()
        }
    }

    /// Command-line values that override the global settings.
    fn patch_global(&self, g: &mut Global) {
        if let Some(n) = self.workers {
            g.workers = n;
        }
        g.max_connections = self.max_connections.or(g.max_connections);
        g.backlog = self.backlog.unwrap_or(g.backlog);
        g.accept_batch = self.accept_batch.unwrap_or(g.accept_batch).max(1);
        g.drain_timeout = self.drain_timeout.unwrap_or(g.drain_timeout);
        g.tfo &= !self.no_tfo;
        g.reuseport |= self.reuseport;
        g.splice &= !self.no_splice;
        g.pid_file = self.pid_file.clone().or(g.pid_file.take());
        g.log = self.log.clone().or(g.log.take());
        g.user = self.user.clone().or(g.user.take());
        g.chroot = self.chroot.clone().or(g.chroot.take());
        g.allow_exit |= self.allow_exit;
        g.command_file = self.command_file.clone().or(g.command_file.take());
        g.status_file = self.status_file.clone().or(g.status_file.take());
        g.debug = g.debug.max(self.debug);
        g.exit_idle_time = self.exit_idle_time.or(g.exit_idle_time);
    }

    /// Options that need checking: control, admin, log format.
    fn patch_global_checked(&self, g: &mut Global) -> Result<(), ConfigError> {
        if let Some(c) = &self.control {
            // Pen's `-C PORT` means a TCP port; here it is bound to loopback.
            let text = if c.parse::<u16>().is_ok() {
                format!("127.0.0.1:{c}")
            } else {
                c.clone()
            };
            g.control = Some(addr::parse_listen(&text).map_err(|e| addr_error(e, "-C: "))?);
        }
        if let Some(a) = &self.admin {
            g.admin = Some(
                config::parse_admin(a).map_err(|e| ConfigError::usage(format!("--admin: {e}")))?,
            );
        }
        if let Some(f) = &self.admin_token_file {
            g.admin_token_file = Some(f.clone());
        }
        if let Some(f) = &self.log_format {
            g.log_format = config::LogFormat::parse(f).ok_or_else(|| {
                ConfigError::usage(format!("--log-format: '{f}' is not text or json"))
            })?;
        }
        Ok(())
    }

    /// The health check options, applied over what the listener has.
    fn patch_health(&self, l: &mut ListenerConfig) -> Result<(), ConfigError> {
        let any = self.check.is_some()
            || self.check_interval.is_some()
            || self.check_timeout.is_some()
            || self.check_expect.is_some()
            || self.rise.is_some()
            || self.fall.is_some();
        if !any {
            return Ok(());
        }
        let mut h = l.health.clone().unwrap_or_default();
        if let Some(c) = &self.check {
            h.kind = config::parse_check_kind(c)
                .map_err(|e| ConfigError::usage(format!("--check: {e}")))?;
        } else if l.health.is_none() {
            return Err(ConfigError::usage(
                "--check-interval, --check-timeout, --check-expect, --rise and --fall need --check",
            ));
        }
        if let Some(e) = &self.check_expect {
            match &mut h.kind {
                // A UDP check expects text in the answer (`--check udp:PING --check-expect PONG`).
                config::CheckKind::Udp { expect, .. } => *expect = e.clone(),
                config::CheckKind::Http { expect, .. } => {
                    *expect = config::parse_status_range(e)
                        .map_err(|e| ConfigError::usage(format!("--check-expect: {e}")))?
                }
                config::CheckKind::Tcp => {
                    return Err(ConfigError::usage(
                        "--check-expect: needs --check http:/PATH or udp:DATAGRAM",
                    ))
                }
            }
        }
        for (d, slot, name) in [
            (self.check_interval, &mut h.interval, "--check-interval"),
            (self.check_timeout, &mut h.timeout, "--check-timeout"),
        ] {
            if let Some(d) = d {
                if d.is_zero() {
                    return Err(ConfigError::usage(format!("{name}: must be more than 0")));
                }
                *slot = d;
            }
        }
        for (n, slot, name) in [
            (self.rise, &mut h.rise, "--rise"),
            (self.fall, &mut h.fall, "--fall"),
        ] {
            if let Some(n) = n {
                if n == 0 {
                    return Err(ConfigError::usage(format!("{name}: must be at least 1")));
                }
                *slot = n;
            }
        }
        l.health = Some(h);
        Ok(())
    }

    /// Pen flags and `-O` commands, applied to one listener.
    fn patch_listener(&self, l: &mut ListenerConfig, g: &mut Global) -> Result<(), ConfigError> {
        for (on, word) in [
            (self.roundrobin, ModeWord::RoundRobin),
            (self.hash, ModeWord::Hash),
            (self.weight, ModeWord::Weight),
            (self.stubborn, ModeWord::Stubborn),
        ] {
            if on {
                l.mode.set(word, true);
            }
        }
        if let Some(e) = &self.emergency {
            l.emergency = Some(addr::parse_backend(e).map_err(|e| addr_error(e, "-e: "))?);
        }
        if let Some(b) = &self.abuse {
            l.abuse = Some(addr::parse_backend(b).map_err(|e| addr_error(e, "-B: "))?);
        }
        if let Some(d) = self.slow_start {
            l.slow_start = d;
        }
        self.patch_health(l)?;
        for line in &self.commands {
            let cmd = command::parse(line)
                .map_err(|e| ConfigError::usage(format!("-O '{line}': {e}")))?;
            l.apply(&cmd, g).map_err(|e| ConfigError {
                message: format!("-O '{line}': {}", e.message),
                ..e
            })?;
        }
        Ok(())
    }
}

fn addr_error(e: addr::AddrError, prefix: &str) -> ConfigError {
    let kind = match e {
        addr::AddrError::Resolve(_) => ErrorKind::Runtime,
        addr::AddrError::Syntax { .. } => ErrorKind::Usage,
    };
    ConfigError {
        message: format!("{prefix}{e}"),
        kind,
    }
}

/// Builds the configuration from `--config` or the Pen form.
fn build_config(cli: &Cli) -> Result<Config, ConfigError> {
    let mut config = match (&cli.config, &cli.listen) {
        (Some(_), Some(arg)) => {
            return Err(ConfigError::usage(format!("'{arg}': --config cannot be combined with a listen address and servers")));
        }
        (Some(_), None) if cli.tls.any() => {
            return Err(ConfigError::usage(
                "-E, -K, -G, -A, -R and -L are for the Pen command line: with --config, give the listener tls = { cert = ..., key = ... } in the file",
            ));
        }
        (Some(_), None) if cli.later.udp => {
            return Err(ConfigError::usage(
                "-U is for the Pen command line: with --config, give the listener protocol = \"udp\" in the file",
            ));
        }
        (Some(path), None) => {
            let mut config = config::load_file(path, &cli.tuning_patch(), cli.http)?;
            let mut global = config.global.clone();
            for l in &mut config.listeners {
                cli.patch_listener(l, &mut global)?;
            }
            config.global = global;
            config
        }
        (None, Some(listen)) => {
            let listen = addr::parse_listen(listen).map_err(|e| addr_error(e, "listen address: "))?;
            let mut l = ListenerConfig::new("default", listen);
            l.tuning.apply(&cli.tuning_patch());
            if cli.http {
                l.kind = ListenerKind::http(config::HttpSettings::default());
            }
            l.set_tls(cli.tls.settings()?);
            if cli.later.udp {
                if cli.http || l.tls().is_some() {
                    return Err(ConfigError::usage("-U (UDP) cannot be combined with -H or TLS (-E, -K)"));
                }
                if let addr::ListenAddr::Unix(_) = l.listen {
                    return Err(ConfigError::usage("-U (UDP) needs an IP address and port, not a Unix socket path"));
                }
                l.kind = ListenerKind::Udp(config::model::UdpSettings::default());
            }
            for s in &cli.servers {
                l.servers.push(addr::parse_server(s, l.listen.port()).map_err(|e| addr_error(e, ""))?);
            }
            let mut global = Global::default();
            cli.patch_listener(&mut l, &mut global)?;
            if l.servers.is_empty() && l.emergency.is_none() && cli.command_file.is_none() {
                return Err(ConfigError::usage("no servers given (usage: quill [OPTIONS] [HOST:]PORT SERVER...)"));
            }
            Config { global, listeners: vec![l], pools: Vec::new() }
        }
        (None, None) => {
            return Err(ConfigError::usage(
                "missing listen address and servers (usage: quill [OPTIONS] [HOST:]PORT SERVER..., or --config FILE; see --help)",
            ))
        }
    };
    cli.patch_global(&mut config.global);
    cli.patch_global_checked(&mut config.global)?;
    // `-F FILE`, else the TOML file's `command_file`: applied here, so at start and on every
    // reload (the rebuild runs this again).
    if let Some(file) = config.global.command_file.clone() {
        config.apply_file(&file, 0)?;
    }
    config.validate()?;
    // Every listener's TLS built as its pool will build it: a certificate that does not match
    // its key, or a cipher rustls lacks, stops the start (or the reload) here.
    config.check_tls()?;
    Ok(config)
}

/// socket-proxyd's form: sockets passed by systemd, exactly one positional argument (the server),
/// neither `-F` nor `--config`.
fn is_proxyd_form(cli: &Cli) -> bool {
    std::env::var_os("LISTEN_FDS").is_some()
        && cli.listen.is_some()
        && cli.servers.is_empty()
        && cli.command_file.is_none()
        && cli.config.is_none()
}

/// Builds the configuration of the socket-proxyd form: one listener per inherited socket, all
/// forwarding to the one server (port 80 when none is given; a host name is resolved again for
/// each session), at most `--connections-max` sessions (256, socket-proxyd's default). As in
/// socket-proxyd, every session tries the server (no blacklist unless `-b` asks for one) and `-c N`
/// is the connection limit: Pen's meaning of `-c` (the tracking table) has no use here, where
/// clients are not tracked.
fn proxyd_config(cli: &Cli) -> Result<(Config, Vec<crate::systemd::Inherited>), ConfigError> {
    let target = cli.listen.as_deref().unwrap_or_default();
    let server = addr::parse_proxyd_target(target).map_err(|e| addr_error(e, ""))?;
    let inherited = crate::systemd::listen_fds().map_err(|e| ConfigError {
        message: format!("socket activation: {e}"),
        kind: ErrorKind::Runtime,
    })?;
    if inherited.is_empty() {
        return Err(ConfigError {
            message:
                "socket activation: LISTEN_FDS is set but no socket was passed to this process"
                    .into(),
            kind: ErrorKind::Runtime,
        });
    }
    let mut listeners = Vec::new();
    let mut named = Vec::new();
    for (i, socket) in inherited.into_iter().enumerate() {
        let fd = socket.fd.try_clone().map_err(|e| ConfigError {
            message: format!("socket activation: {e}"),
            kind: ErrorKind::Runtime,
        })?;
        let (_, listen) = crate::listener::from_fd(fd).map_err(|e| ConfigError {
            message: format!("socket activation: descriptor {}: {e}", 3 + i),
            kind: ErrorKind::Runtime,
        })?;
        let name = format!("socket{i}");
        let mut l = ListenerConfig::new(&name, listen);
        l.mode.set(ModeWord::RoundRobin, true);
        l.servers.push(server.clone());
        l.tuning.blacklist = Duration::ZERO;
        l.tuning.apply(&cli.tuning_patch());
        if cli.http {
            l.kind = ListenerKind::http(config::HttpSettings::default());
        }
        l.set_tls(cli.tls.settings()?);
        listeners.push(l);
        named.push(crate::systemd::Inherited {
            name: Some(name),
            fd: socket.fd,
        });
    }
    let mut global = Global {
        max_connections: Some(256),
        ..Global::default()
    };
    cli.patch_global(&mut global);
    if let (None, Some(n)) = (cli.max_connections, cli.clients_max) {
        global.max_connections = Some(n);
    }
    cli.patch_global_checked(&mut global)?;
    let config = Config {
        global,
        listeners,
        pools: Vec::new(),
    };
    config.validate()?;
    config.check_tls()?;
    Ok((config, named))
}

/// `quill check ARGS`: the configuration `quill ARGS` would start (with `--config FILE` when
/// given), built and explained without binding anything.
fn check_command_line(config: Option<&std::path::Path>, args: &[String]) -> ExitCode {
    let mut argv = vec![std::ffi::OsString::from("quill")];
    if let Some(path) = config {
        argv.push("--config".into());
        argv.push(path.into());
    }
    argv.extend(args.iter().map(std::ffi::OsString::from));
    let cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    if cli.sub.is_some() {
        return fail(
            ErrorKind::Usage,
            "check: a subcommand is not a command line to check",
        );
    }
    match build_config(&cli) {
        Ok(config) => {
            print!("command line: OK\n{}", config.explain());
            ExitCode::SUCCESS
        }
        Err(e) => fail(e.kind, &e.message),
    }
}

fn check(path: &std::path::Path) -> ExitCode {
    let loaded = config::load_file(path, &TuningPatch::default(), false).and_then(|mut config| {
        // The command file is part of what starts: check it too.
        if let Some(file) = config.global.command_file.clone() {
            config.apply_file(&file, 0)?;
            config.validate()?;
        }
        Ok(config)
    });
    match loaded {
        Ok(config) => {
            print!("{}: OK\n{}", path.display(), config.explain());
            ExitCode::SUCCESS
        }
        Err(e) => fail(ErrorKind::Usage, &e.message),
    }
}

/// The demo's HTTP listener: the port after the TCP listener's when it is free now, else any
/// free port (none for a Unix socket). The demo is for trying things: a tiny race is acceptable.
fn listen_addr_for_http(listen: &str) -> addr::ListenAddr {
    let Ok(addr::ListenAddr::Tcp(mut a)) = addr::parse_listen(listen) else {
        return config::model::pool_addr();
    };
    let next = a.port().checked_add(1);
    a.set_port(next.unwrap_or(0));
    if next.is_none() || std::net::TcpListener::bind(a).is_err() {
        a.set_port(0);
        match std::net::TcpListener::bind(a).and_then(|l| l.local_addr()) {
            Ok(free) => a = free,
            Err(_) => return config::model::pool_addr(),
        }
    }
    addr::ListenAddr::Tcp(a)
}

fn demo(listen: &str, backends: u16, debug: u8) -> ExitCode {
    let listen_addr = match addr::parse_listen(listen) {
        Ok(a) => a,
        Err(e) => return fail(ErrorKind::Usage, &format!("--listen: {e}")),
    };
    let mut servers = Vec::new();
    let mut l = ListenerConfig::new("demo", listen_addr);
    l.mode.set(ModeWord::RoundRobin, true);
    // The backends queue connects as deeply as Quill's listener does: the suggested
    // `quill bench --idle 1000` opens about 1000 / N backend connections in a burst.
    let backlog = Global::default().backlog;
    for i in 1..=backends {
        match DemoServer::start_with_backlog(
            "127.0.0.1:0",
            Behaviour::Http {
                name: format!("demo-{i}"),
            },
            backlog,
        ) {
            Ok(s) => {
                l.servers
                    .push(addr::ServerSpec::new(addr::BackendAddr::Tcp(s.addr())));
                servers.push(s);
            }
            Err(e) => {
                return fail(
                    ErrorKind::Runtime,
                    &format!("cannot start demo backend: {e}"),
                )
            }
        }
    }
    // Show the operations side too: a health check, a control socket and the status page.
    l.health = Some(config::HealthCheck {
        kind: config::CheckKind::Http {
            path: "/".into(),
            expect: (200, 399),
        },
        ..config::HealthCheck::default()
    });
    let control = std::env::temp_dir().join(format!("quill-demo-{}.sock", std::process::id()));
    // An admin port free now (the demo is for trying things, a tiny race is acceptable).
    let admin = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .ok();
    let mut global = Global {
        control: Some(addr::ListenAddr::Unix(control.clone())),
        admin,
        ..Global::default()
    };
    global.debug = debug;
    // An HTTP listener on the next port: `/api/` to its own pool, everything else to the demo
    // backends above, each request balanced on its own over kept-alive server connections.
    let mut listeners = vec![l];
    let mut pools = Vec::new();
    let mut http_lines = String::new();
    if let addr::ListenAddr::Tcp(a) = listen_addr_for_http(listen) {
        let api = match DemoServer::start_with_backlog(
            "127.0.0.1:0",
            Behaviour::Http {
                name: "api-1".into(),
            },
            backlog,
        ) {
            Ok(s) => s,
            Err(e) => {
                return fail(
                    ErrorKind::Runtime,
                    &format!("cannot start demo backend: {e}"),
                )
            }
        };
        let mut pool = ListenerConfig::new("api", config::model::pool_addr());
        pool.mode.set(ModeWord::RoundRobin, true);
        pool.servers
            .push(addr::ServerSpec::new(addr::BackendAddr::Tcp(api.addr())));
        pools.push(pool);
        let mut h = listeners[0].clone();
        h.name = "demo-http".into();
        h.listen = addr::ListenAddr::Tcp(a);
        h.kind = ListenerKind::http(config::HttpSettings::default());
        h.routes = vec![config::RouteConfig {
            name: "api".into(),
            hosts: Vec::new(),
            sni: Vec::new(),
            path: Some(config::PathMatch::Prefix("/api/".into())),
            methods: Vec::new(),
            headers: Vec::new(),
            client_acl: None,
            action: config::RouteAction::Pool("api".into()),
            request_headers: Vec::new(),
            response_headers: Vec::new(),
            rewrite_path: None,
            rate: None,
        }];
        listeners.push(h);
        servers.push(api);
        let metrics = admin.map_or(String::new(), |m| {
            format!(
                "\x20 curl -s http://{m}/metrics | grep server_connections    # opened vs reused server connections\n"
            )
        });
        http_lines = format!(
            "And HTTP mode (a reverse proxy with routes) on http://{a}/:\n\
             \x20 curl http://{a}/api/users       # route /api/ -> pool api (api-1)\n\
             \x20 curl http://{a}/                # no route matches -> the demo backends, round robin\n\
             \x20 curl http://{a}/headers         # what the backend received: X-Forwarded-For, X-Request-ID, ...\n\
             \x20 curl -sv http://{a}/ http://{a}/ 2>&1 | grep -i 're-using'   # two requests, one kept-alive connection\n\
             {metrics}"
        );
    }
    let config = Config {
        global,
        listeners,
        pools,
    };
    let backends_list: Vec<String> = servers
        .iter()
        .take(usize::from(backends))
        .map(|s| s.addr().to_string())
        .collect();
    let ctl = format!("quill ctl --socket {}", control.display());
    let page = admin.map_or(String::new(), |a| {
        format!(
            "\x20 xdg-open http://{a}/              # live status page, in a browser (metrics: http://{a}/metrics)\n"
        )
    });
    println!(
        "Quill demo: balancing http://{listen}/ round robin over {} demo backends ({}), with HTTP health checks.\n\
         Try:\n\
         \x20 curl http://{listen}/            # run it a few times: demo-1, demo-2, demo-3, ...\n\
         \x20 curl -s http://{listen}/bytes/1000000 | wc -c    # a 1 MB response through the proxy\n\
         \x20 quill bench --idle 1000 --active 50 --duration 5s http://{listen}/    # load, 1,000 idle held\n\
         {page}\
         \x20 {ctl} listener demo servers          # the pool in Pen's format, with state and health\n\
         \x20 {ctl} listener demo server 1 drain   # take demo-2 out gently; 'server 1 enable' brings it back\n\
         {http_lines}\
         Stop with Ctrl-C (a second Ctrl-C stops at once).",
        backends,
        backends_list.join(", ")
    );
    run(config, Start::default())
}
