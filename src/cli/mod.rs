//! The command line: Pen's form (`quill [OPTIONS] [HOST:]PORT SERVER...`), `--config`, and the
//! subcommands. Turns arguments into a validated `Config` and runs it; maps failures to exit
//! statuses (2 usage or configuration, 1 runtime).
//!
//! Here: the clap definitions ([`Cli`] and the subcommands) and [`main`]. Beside it: `pen`
//! (a `Config` from Pen's form or `--config`), `proxyd` (systemd-socket-proxyd's form), `check`
//! (`quill check`) and `demo` (`quill demo`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgAction, Parser, Subcommand};

use crate::addr;
use crate::config::{self, Config, ConfigError, ErrorKind};
use crate::runtime::{self, Start};
use crate::state::Rebuild;

mod check;
mod demo;
mod pen;
mod proxyd;
mod serve;

use check::{check, check_command_line};
use demo::demo;
use pen::{build_config, PenTls};
use proxyd::{is_proxyd_form, proxyd_config};
use serve::{serve, ServeArgs};

fn duration(s: &str) -> Result<Duration, String> {
    config::parse_duration(s)
}

/// `--accept`: epoll, io_uring or auto.
fn accept_mode(s: &str) -> Result<config::settings::AcceptMode, String> {
    config::settings::AcceptMode::parse(s)
        .ok_or_else(|| format!("'{s}' is not epoll, io_uring or auto"))
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
for a Unix socket), or the one server argument srv:NAME[@RESOLVER] (SRV records, as Consul and
Kubernetes publish) or dns:NAME:PORT[@RESOLVER] (A/AAAA records): the pool follows DNS. Durations are seconds, or a number with ms, s, m or h (500ms, 2s, 5m).

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
    /// Maglev consistent hashing of the client address (with -r: address and port): every Quill
    /// with the same servers picks the same one, whatever order they are listed in
    #[arg(long)]
    maglev: bool,
    /// With --maglev on HTTP (-H): hash each request's `header NAME` or `cookie NAME` instead of
    /// the client address (a request without it: the address) [default: client]
    #[arg(long, value_name = "KEY")]
    hash_key: Option<String>,
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
    /// One listening socket per worker for each TCP listener (SO_REUSEPORT) instead of one shared
    #[arg(long)]
    listen_per_worker: bool,
    /// Copy bulk flows through buffers instead of splice pipes (for measurement)
    #[arg(long)]
    no_splice: bool,
    /// Keep every worker accepting even while other processes leave no core idle
    #[arg(long)]
    no_concentrate: bool,
    /// How workers accept TCP clients: epoll, io_uring or auto [default: epoll]
    #[arg(long, value_name = "MODE", value_parser = accept_mode)]
    accept: Option<config::settings::AcceptMode>,

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
    /// Serve the files of a directory over HTTP (HTTPS with -E and -K)
    #[command(
        after_help = "Examples:\n  quill serve                                   the current directory on 127.0.0.1:8080\n  quill serve /srv/www --listen 0.0.0.0:80 --listing\n  quill serve site --listen 443 -E site.pem -K site.key --log access.log\n\nA file's configuration does the same with a route: static = { root = \"DIR\" } (docs/web.md)."
    )]
    Serve {
        #[command(flatten)]
        help: SubHelp,
        #[command(flatten)]
        args: Box<ServeArgs>,
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
        Some(Sub::Serve { ref args, .. }) => return serve(args),
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
