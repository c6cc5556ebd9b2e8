//! Pen's control language (penctl): one command per line, parsed into a [`Command`]. Used by `-O`/`-o`
//! at start-up now, and by the control socket and `-F` files later. Parsing is pure; applying a
//! command to a configuration lives in `apply`.

mod apply;

use std::path::PathBuf;
use std::time::Duration;

use crate::acl::{self, AclId};
// `ModeWord` lives beside `Mode`; its old path `command::ModeWord` still works.
use crate::addr::AdminState;
pub(crate) use crate::balancer::ModeWord;
use crate::config::model::{parse_duration, ControlLevel, MAX_DURATION, MAX_SESSIONS, MAX_WEIGHT};
pub(crate) use crate::config::settings::CommandError;
use crate::config::settings::{bounded_arg, no_args, number_arg, one_arg, Parsed, Tune};
pub(crate) use apply::{CommandFile, Quoting};

/// Changes to one server (`server N ...`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ServerChange {
    pub address: Option<String>,
    pub port: Option<u16>,
    pub max: Option<u32>,
    pub hard: Option<u32>,
    pub weight: Option<u32>,
    pub prio: Option<u32>,
    pub blacklist: Option<Duration>,
    /// `acl A`: Some(Some(a)); `acl none`: Some(None).
    pub acl: Option<Option<AclId>>,
    /// `drain`, `enable`, `disable`.
    pub state: Option<AdminState>,
}

/// One parsed setting command: it changes the configuration (of a listener or of the process).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Command {
    Mode(ModeWord, bool),
    /// A tuning setting of the listener (`timeout 5`, `no keepalive`, `source IP`...): the
    /// words and values of `config::settings`'s table.
    Tune(Tune),
    ConnMax(u32),
    /// `dsr_if IF` / `no dsr_if`: direct server return on interface IF.
    DsrIf(Option<String>),
    /// `dsr_ip IP` / `no dsr_ip`: the DSR virtual address.
    DsrIp(Option<std::net::Ipv4Addr>),
    /// `dsr_wait MS` / `no dsr_wait`: how long a ring block that does not fill waits (DSR).
    DsrWait(Option<Duration>),
    /// `tarpit_acl N` / `no tarpit_acl`.
    TarpitAcl(Option<AclId>),
    Server(usize, ServerChange),
    /// `server add SPEC`: a new server at the end of the list.
    ServerAdd(String),
    /// `server N remove`: open sessions finish; later servers move down one number.
    ServerRemove(usize),
    /// `acl N permit|deny ...` appends an entry.
    Acl(AclId, acl::Entry),
    /// `no acl N` empties list N.
    NoAcl(AclId),
    ClientAcl(Option<AclId>),
    ControlAcl(Option<AclId>),
    /// `log FILE` / `no log`.
    Log(Option<PathBuf>),
    /// `web_stats FILE` / `no web_stats`.
    WebStats(Option<PathBuf>),
    Debug(u8),
    /// `listen [HOST:]PORT|PATH`: move the listener.
    Listen(String),
    /// `http` / `no http` (Pen's HTTP mode): the listener serves new connections as an HTTP
    /// reverse proxy (default HTTP settings, `X-Forwarded-For` added, as `-H` does), or as a
    /// plain TCP forwarder again. Open connections keep the mode they started in.
    Http(bool),
    /// Pen's `ssl_*` commands: the listener's TLS termination.
    Ssl(SslCommand),
}

/// Pen's TLS commands (`ssl_ciphers`, `ssl_option`, ...), each changing a listener's TLS
/// termination; a listener without TLS refuses them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SslCommand {
    /// `ssl_ciphers A:B:C`: the suites offered, in this order, by rustls name (OpenSSL names
    /// are turned into rustls names when parsed).
    Ciphers(Vec<String>),
    /// `ssl_option no_tlsv1.2`: TLS 1.3 only.
    NoTls12,
    /// `ssl_option cipher_server_preference`: the listener's suite order wins.
    ServerPreference,
    /// `ssl_option client_cipher_preference` (Quill's; Pen has no way back): the client's suite
    /// order wins, as `server_cipher_order = false`.
    ClientPreference,
    /// `ssl_option no_sslv2`, `no_sslv3`, `no_tlsv1`, `no_tlsv1.1`: accepted, always so (rustls
    /// speaks TLS 1.2 and 1.3 only).
    AlwaysOff(String),
    /// `ssl_sni_path DIR`: Pen's layout (`DIR/NAME.crt`, `NAME.key`, `NAME.ca`) read now.
    SniPath(PathBuf),
    /// `ssl_ocsp_response FILE`: a DER OCSP response stapled for the default certificate.
    OcspResponse(PathBuf),
    /// `ssl_client_renegotiation_interval N`: accepted, changes nothing (rustls never
    /// renegotiates, so there is nothing to limit).
    RenegotiationInterval(u64),
}

impl SslCommand {
    /// The command's word, for messages.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            SslCommand::Ciphers(_) => "ssl_ciphers",
            SslCommand::NoTls12
            | SslCommand::ServerPreference
            | SslCommand::ClientPreference
            | SslCommand::AlwaysOff(_) => "ssl_option",
            SslCommand::SniPath(_) => "ssl_sni_path",
            SslCommand::OcspResponse(_) => "ssl_ocsp_response",
            SslCommand::RenegotiationInterval(_) => "ssl_client_renegotiation_interval",
        }
    }
}

/// `ssl_*` with its arguments; None when `name` is not an `ssl_` command.
fn parse_ssl(name: &str, args: &[&str]) -> Option<Result<SslCommand, CommandError>> {
    let parsed = match name {
        "ssl_ciphers" => one_arg(name, args).and_then(|list| {
            let mut names: Vec<String> = Vec::new();
            for part in list.split(':').filter(|p| !p.is_empty()) {
                let found = crate::tls::policy::suite_name_of(part)
                    .map_err(|e| CommandError(format!("ssl_ciphers: {e}")))?;
                if !names.iter().any(|n| n == found) {
                    names.push(found.to_string());
                }
            }
            if names.is_empty() {
                return err("ssl_ciphers needs suite names separated by ':'");
            }
            Ok(SslCommand::Ciphers(names))
        }),
        "ssl_option" => one_arg(name, args).and_then(|option| match option {
            "no_tlsv1.2" => Ok(SslCommand::NoTls12),
            "cipher_server_preference" => Ok(SslCommand::ServerPreference),
            "client_cipher_preference" => Ok(SslCommand::ClientPreference),
            "no_sslv2" | "no_sslv3" | "no_tlsv1" | "no_tlsv1.1" => {
                Ok(SslCommand::AlwaysOff(option.to_string()))
            }
            other => err(format!(
                "ssl_option: '{}' is not one Quill knows (no_sslv2, no_sslv3, no_tlsv1, no_tlsv1.1, no_tlsv1.2, cipher_server_preference, client_cipher_preference)",
                other.escape_debug()
            )),
        }),
        "ssl_sni_path" => one_arg(name, args).map(|dir| SslCommand::SniPath(PathBuf::from(dir))),
        "ssl_ocsp_response" => {
            one_arg(name, args).map(|file| SslCommand::OcspResponse(PathBuf::from(file)))
        }
        "ssl_client_renegotiation_interval" => {
            number_arg(name, args).map(SslCommand::RenegotiationInterval)
        }
        _ => return None,
    };
    Some(parsed)
}

impl Command {
    /// Whether the command changes process-wide settings rather than one listener's.
    pub(crate) fn is_global(&self) -> bool {
        matches!(
            self,
            Command::ConnMax(_)
                | Command::Acl(..)
                | Command::NoAcl(_)
                | Command::ControlAcl(_)
                | Command::Log(_)
                | Command::WebStats(_)
                | Command::Debug(_)
        )
    }

    /// What the command needs from the control channel it arrives on. Files, paths, Unix and
    /// abstract sockets and moving a listener stay on the Unix socket; draining and weighing the
    /// configured servers is `operate`; everything else (including commands added later that are
    /// not listed here, and `http`, which changes what every server is sent) is `admin`.
    pub(crate) fn needs(&self) -> Needs {
        let admin = Needs::Level(ControlLevel::Admin);
        match self {
            Command::Log(Some(_)) | Command::WebStats(Some(_)) | Command::Listen(_) => {
                Needs::UnixSocket
            }
            Command::ServerAdd(spec) if !is_network_spec(spec) => Needs::UnixSocket,
            Command::Ssl(SslCommand::SniPath(_) | SslCommand::OcspResponse(_)) => Needs::UnixSocket,
            Command::Server(_, change) => {
                if change
                    .address
                    .as_deref()
                    .is_some_and(|a| !is_network_spec(a))
                {
                    return Needs::UnixSocket;
                }
                // Operate may touch only these fields; any other (now or added later) is admin.
                let rest = ServerChange {
                    max: None,
                    hard: None,
                    weight: None,
                    prio: None,
                    blacklist: None,
                    state: None,
                    ..change.clone()
                };
                if rest == ServerChange::default() {
                    Needs::Level(ControlLevel::Operate)
                } else {
                    admin
                }
            }
            _ => admin,
        }
    }
}

/// What a control line needs from the channel it arrives on, as HAProxy's runtime API levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Needs {
    /// A level a TCP client may be granted with `control_level` (the Unix socket has them all).
    Level(ControlLevel),
    /// Names a file, a path, a Unix or abstract socket, moves a listener, hands sockets over or
    /// ends the process: only the Unix control socket (and `-F`, `-O`, the configuration file).
    UnixSocket,
}

/// Whether a server address or spec names a network host: an IP address (bare, or IPv6 in
/// brackets) or a host name, optionally followed by `:`-separated numbers. Anything else (a path,
/// an `@abstract` name, stray characters) is treated as naming a local socket.
fn is_network_spec(spec: &str) -> bool {
    let (host, rest) = match spec.strip_prefix('[') {
        Some(inner) => match inner.split_once(']') {
            Some((h, r)) => (h, r),
            None => return false,
        },
        None if spec.parse::<std::net::Ipv6Addr>().is_ok() => (spec, ""),
        None => spec.split_at(spec.find(':').unwrap_or(spec.len())),
    };
    let host_ok = host.parse::<std::net::IpAddr>().is_ok()
        || (!host.is_empty()
            && host.len() <= 253
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')));
    host_ok && rest.bytes().all(|b| b.is_ascii_digit() || b == b':')
}

/// A setting that a bare word shows (`blacklist`, `timeout`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Setting {
    Blacklist,
    Timeout,
    Tracking,
    ClientsMax,
    ConnMax,
    MaxPerSource,
    IdleTimeout,
    TcpFastclose,
    Source,
    ProxyProtocol,
    Mode,
    ClientAcl,
    ControlAcl,
    Acl(AclId),
    Log,
    WebStats,
    Debug,
    Listen,
    Control,
}

/// What one control line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Set(Command),
    Show(Setting),
    Servers,
    /// `hash table`: the Maglev tables of a listener's or named pool's pool (mode `maglev`):
    /// each priority level's size and fingerprint (Quill's addition; bare `hash` is Pen's mode
    /// word).
    Hash,
    /// Pen's HTML status report (also written to the `-w` file).
    Status,
    /// Clients seen in the last N seconds.
    Recent(u64),
    /// Open sessions, one line each (Quill's addition); with `listener NAME`, that listener's.
    Connections,
    /// The listeners: name, address, protocol, mode and servers (Quill's addition).
    Listeners,
    /// The named pools (`[[pool]]`): name, mode and servers (Quill's addition).
    Pools,
    Connection(u64),
    Close(u64),
    Pid,
    Exit,
    /// Save the running settings as commands (`-F` reads them back).
    Write(Option<PathBuf>),
    Include(PathBuf),
    Reload,
    /// Reopen the access log at its path, for log rotation (no reload).
    Reopen,
    /// A new process asks for the listening sockets (`--takeover`); Unix socket only.
    Takeover,
    /// The new process serves; the old one drains and exits. Unix socket only.
    TakeoverDone,
    /// `tls reload [NAME]`: re-read the TLS files of listener NAME (or of every TLS listener).
    TlsReload(Option<String>),
}

impl Action {
    /// What the action needs from the control channel: showing state is `read`, closing a
    /// session and reopening the logs `operate`, files, takeover and exit the Unix socket, the
    /// rest (`reload`, and any action added later that is not listed here) `admin`.
    pub(crate) fn needs(&self) -> Needs {
        match self {
            Action::Set(c) => c.needs(),
            Action::Show(_)
            | Action::Servers
            | Action::Hash
            | Action::Status
            | Action::Recent(_)
            | Action::Connections
            | Action::Listeners
            | Action::Pools
            | Action::Connection(_)
            | Action::Pid => Needs::Level(ControlLevel::Read),
            Action::Close(_) | Action::Reopen => Needs::Level(ControlLevel::Operate),
            Action::Exit
            | Action::Write(_)
            | Action::Include(_)
            | Action::Takeover
            | Action::TakeoverDone => Needs::UnixSocket,
            _ => Needs::Level(ControlLevel::Admin),
        }
    }
}

/// One control line: an optional `json` word and `listener NAME` or `pool NAME` prefix, then
/// the action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    pub json: bool,
    pub listener: Option<String>,
    /// `pool NAME`: a named pool (`[[pool]]`), where `listener NAME` names a listener's pool.
    pub pool: Option<String>,
    pub action: Action,
}

fn err<T>(msg: impl Into<String>) -> Result<T, CommandError> {
    Err(CommandError(msg.into()))
}

/// Parses one setting command (`hash`, `no weight`, `server 1 weight 3`, ...), as `-O` takes them.
pub(crate) fn parse(line: &str) -> Result<Command, CommandError> {
    match parse_request(line)? {
        Request {
            action: Action::Set(cmd),
            json: false,
            listener: None,
            pool: None,
        } => Ok(cmd),
        _ => err(format!("'{}' does not change a setting", line.trim())),
    }
}

/// Parses a control line: `[json] [listener NAME | pool NAME] COMMAND [ARGS...]`.
pub(crate) fn parse_request(line: &str) -> Result<Request, CommandError> {
    let mut words: Vec<&str> = line.split_whitespace().collect();
    let mut json = false;
    let mut listener = None;
    let mut pool = None;
    loop {
        match words.as_slice() {
            ["json", ..] => {
                json = true;
                words.remove(0);
            }
            ["listener", name, ..] => {
                listener = Some(name.to_string());
                words.drain(..2);
            }
            ["listener"] => return err("listener needs a name"),
            ["pool", name, ..] => {
                pool = Some(name.to_string());
                words.drain(..2);
            }
            ["pool"] => return err("pool needs a name"),
            _ => break,
        }
    }
    if listener.is_some() && pool.is_some() {
        return err("give 'listener NAME' or 'pool NAME', not both");
    }
    let action = parse_action(&words)?;
    Ok(Request {
        json,
        listener,
        pool,
        action,
    })
}

fn parse_action(words: &[&str]) -> Result<Action, CommandError> {
    let Some((&first, rest)) = words.split_first() else {
        return err("empty command");
    };
    let (negated, name, args) = if first == "no" {
        match rest.split_first() {
            Some((&name, args)) => (true, name, args),
            None => return err("'no' needs a command"),
        }
    } else {
        (false, first, rest)
    };
    if (negated, name, args) == (false, "hash", &["table"][..]) {
        // Not Pen's mode word `hash` (which takes no argument): the Maglev tables.
        return Ok(Action::Hash);
    }
    if let Some(word) = ModeWord::parse(name) {
        no_args(name, args)?;
        return Ok(Action::Set(Command::Mode(word, !negated)));
    }
    if let (false, Some(parsed)) = (negated, parse_ssl(name, args)) {
        return parsed.map(|c| Action::Set(Command::Ssl(c)));
    }
    let show = |s: Setting| Ok(Action::Show(s));
    let set = |c: Command| Ok(Action::Set(c));
    if let Some(parsed) = Tune::parse(name, negated, args) {
        return match parsed? {
            Parsed::Set(tune) => set(Command::Tune(tune)),
            Parsed::Show => {
                show_tuning(name).map_or_else(|| err(format!("{name} needs a value")), show)
            }
        };
    }
    match (name, negated, args) {
        ("http", _, _) => no_args(name, args).and(set(Command::Http(!negated))),
        ("dsr_if", false, [ifname]) => set(Command::DsrIf(Some(ifname.to_string()))),
        ("dsr_if", true, []) => set(Command::DsrIf(None)),
        ("dsr_if", _, _) => err("dsr_if needs one interface name"),
        ("dsr_ip", false, [ip]) => {
            set(Command::DsrIp(Some(ip.parse().map_err(|_| {
                CommandError(format!("dsr_ip: '{ip}' is not an IPv4 address"))
            })?)))
        }
        ("dsr_ip", true, []) => set(Command::DsrIp(None)),
        ("dsr_ip", _, _) => err("dsr_ip needs one IPv4 address"),
        ("dsr_wait", false, [ms]) => set(Command::DsrWait(Some(
            crate::config::model::parse_dsr_wait(ms).map_err(CommandError)?,
        ))),
        ("dsr_wait", true, []) => set(Command::DsrWait(None)),
        ("dsr_wait", _, _) => err("dsr_wait needs one number of milliseconds (1 to 1000)"),
        ("tarpit_acl", false, [n]) => set(Command::TarpitAcl(Some(list_arg(n)?))),
        ("tarpit_acl", true, []) => set(Command::TarpitAcl(None)),
        ("tarpit_acl", _, _) => err("tarpit_acl needs an ACL number"),
        ("conn_max", false, []) => show(Setting::ConnMax),
        ("conn_max", false, _) => set(Command::ConnMax(bounded_arg(
            name,
            args,
            1..=MAX_SESSIONS.into(),
        )?)),
        ("mode", false, []) => show(Setting::Mode),
        ("server", false, ["add", spec]) => set(Command::ServerAdd(spec.to_string())),
        ("server", false, ["add", ..]) => {
            err("server add needs one HOST[:PORT[:MAXCONN[:HARD[:WEIGHT[:PRIO]]]]]")
        }
        ("server", false, [n, "remove"]) => set(Command::ServerRemove(server_number(n)?)),
        ("server", false, _) => parse_server(args).map(Action::Set),
        ("servers", false, []) => Ok(Action::Servers),
        ("acl", false, [n]) => show(Setting::Acl(list_arg(n)?)),
        ("acl", false, [n, entry @ ..]) => {
            let n = list_arg(n)?;
            let e = acl::parse_entry(entry).map_err(|e| CommandError(format!("acl {n}: {e}")))?;
            set(Command::Acl(n, e))
        }
        ("acl", true, [n]) => set(Command::NoAcl(list_arg(n)?)),
        ("client_acl", false, []) => show(Setting::ClientAcl),
        ("client_acl", false, [n]) => set(Command::ClientAcl(Some(list_arg(n)?))),
        ("client_acl", true, []) => set(Command::ClientAcl(None)),
        ("control_acl", false, []) => show(Setting::ControlAcl),
        ("control_acl", false, [n]) => set(Command::ControlAcl(Some(list_arg(n)?))),
        ("control_acl", true, []) => set(Command::ControlAcl(None)),
        ("log", false, []) => show(Setting::Log),
        ("log", false, [file]) => set(Command::Log(Some(PathBuf::from(file)))),
        ("log", true, []) => set(Command::Log(None)),
        ("web_stats", false, []) => show(Setting::WebStats),
        ("web_stats", false, [file]) => set(Command::WebStats(Some(PathBuf::from(file)))),
        ("web_stats", true, []) => set(Command::WebStats(None)),
        ("debug", false, []) => show(Setting::Debug),
        ("debug", false, _) => set(Command::Debug(number_arg(name, args)?)),
        ("listen", false, []) => show(Setting::Listen),
        ("listen", false, [addr]) => set(Command::Listen(addr.to_string())),
        ("control", false, []) => show(Setting::Control),
        _ => parse_query(name, negated, args),
    }
}

/// The actions that change no setting (`status`, `write`, `reload`...), and the refusals of
/// words that take no argument or no `no`; after [`parse_action`]'s settings.
fn parse_query(name: &str, negated: bool, args: &[&str]) -> Result<Action, CommandError> {
    match (name, negated, args) {
        ("status", false, []) => Ok(Action::Status),
        ("recent", false, []) => Ok(Action::Recent(300)),
        ("recent", false, _) => Ok(Action::Recent(bounded_arg(
            name,
            args,
            0..=MAX_DURATION.as_secs(),
        )?)),
        ("connections", false, []) => Ok(Action::Connections),
        ("listeners", false, []) => Ok(Action::Listeners),
        ("pools", false, []) => Ok(Action::Pools),
        ("connection", false, _) => Ok(Action::Connection(number_arg(name, args)?)),
        ("close", false, _) => Ok(Action::Close(number_arg(name, args)?)),
        ("pid", false, []) => Ok(Action::Pid),
        ("exit", false, []) => Ok(Action::Exit),
        ("write", false, []) => Ok(Action::Write(None)),
        ("write", false, [file]) => Ok(Action::Write(Some(PathBuf::from(file)))),
        ("include", false, [file]) => Ok(Action::Include(PathBuf::from(file))),
        ("include", false, _) => err("include needs one FILE"),
        ("reload", false, []) => Ok(Action::Reload),
        ("reopen", false, []) => Ok(Action::Reopen),
        ("takeover", false, []) => Ok(Action::Takeover),
        ("takeover_done", false, []) => Ok(Action::TakeoverDone),
        ("tls", false, ["reload"]) => Ok(Action::TlsReload(None)),
        ("tls", false, ["reload", name]) => Ok(Action::TlsReload(Some(name.to_string()))),
        ("tls", false, _) => err("tls: the command is 'tls reload [LISTENER]'"),
        (
            "mode" | "servers" | "client_acl" | "control_acl" | "log" | "web_stats" | "listen"
            | "control" | "status" | "connections" | "listeners" | "pools" | "pid" | "exit"
            | "write" | "reload" | "reopen" | "takeover" | "takeover_done",
            false,
            [_, extra, ..] | [extra],
        ) => err(format!("{name}: unexpected argument '{extra}'")),
        _ if negated => err(format!("'no {name}' is not a command")),
        _ => err(format!("unknown command '{name}'")),
    }
}

/// The setting a bare tuning word shows (`timeout`, `source`...); None for those it never did.
fn show_tuning(word: &str) -> Option<Setting> {
    Some(match word {
        "blacklist" => Setting::Blacklist,
        "timeout" => Setting::Timeout,
        "tracking" => Setting::Tracking,
        "idle_timeout" => Setting::IdleTimeout,
        "clients_max" => Setting::ClientsMax,
        "max_per_source" => Setting::MaxPerSource,
        "tcp_fastclose" => Setting::TcpFastclose,
        "proxy_protocol" => Setting::ProxyProtocol,
        "source" => Setting::Source,
        _ => return None,
    })
}

fn list_arg(n: &str) -> Result<AclId, CommandError> {
    acl::parse_list(n).map_err(|e| CommandError(format!("acl: {e}")))
}

fn server_number(n: &str) -> Result<usize, CommandError> {
    n.parse()
        .map_err(|_| CommandError(format!("server: '{n}' is not a server number")))
}

fn parse_server(args: &[&str]) -> Result<Command, CommandError> {
    let Some((&index, mut rest)) = args.split_first() else {
        return err("server needs a server number");
    };
    let index = server_number(index)?;
    let mut change = ServerChange::default();
    while let Some((&key, tail)) = rest.split_first() {
        if let Some(state) = AdminState::parse(key) {
            change.state = Some(state);
            rest = tail;
            continue;
        }
        let Some((&value, tail)) = tail.split_first() else {
            return err(format!("server {index}: '{key}' needs a value"));
        };
        let num = |v: &str| -> Result<u32, CommandError> {
            let most = if matches!(key, "weight" | "prio") {
                MAX_WEIGHT
            } else {
                MAX_SESSIONS
            };
            match v.parse::<u32>() {
                Ok(n) if n <= most => Ok(n),
                Ok(_) => err(format!(
                    "server {index}: {key} '{v}' is out of range (0 to {most})"
                )),
                Err(_) => err(format!("server {index}: {key} '{v}' is not a number")),
            }
        };
        match key {
            "address" => change.address = Some(value.to_string()),
            "port" => {
                change.port = Some(value.parse().ok().filter(|p| *p > 0).ok_or_else(|| {
                    CommandError(format!("server {index}: port '{value}' is not a port"))
                })?)
            }
            "max" => change.max = Some(num(value)?),
            "hard" => change.hard = Some(num(value)?),
            "weight" => change.weight = Some(num(value)?),
            "prio" => change.prio = Some(num(value)?),
            "acl" if value == "none" => change.acl = Some(None),
            "acl" => change.acl = Some(Some(list_arg(value)?)),
            "blacklist" => {
                change.blacklist = Some(
                    parse_duration(value)
                        .map_err(|e| CommandError(format!("server {index}: blacklist: {e}")))?,
                )
            }
            _ => return err(format!("server {index}: unknown setting '{key}'")),
        }
        rest = tail;
    }
    Ok(Command::Server(index, change))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::model::Fastclose;

    #[test]
    fn hash_alone_is_the_mode_word_and_hash_table_shows_the_maglev_tables() {
        let action = |line: &str| parse_request(line).map(|r| r.action);
        assert!(matches!(
            action("hash"),
            Ok(Action::Set(Command::Mode(ModeWord::Hash, true)))
        ));
        assert!(matches!(
            action("maglev"),
            Ok(Action::Set(Command::Mode(ModeWord::Maglev, true)))
        ));
        assert!(matches!(action("hash table"), Ok(Action::Hash)));
        let pooled = parse_request("pool php hash table").unwrap();
        assert_eq!(pooled.pool.as_deref(), Some("php"));
        assert!(matches!(pooled.action, Action::Hash));
        assert!(action("hash tables").is_err());
        assert!(action("no hash table").is_err());
    }

    #[test]
    fn parses_pen_commands() {
        let check =
            |line: &str, expected: Command| assert_eq!(parse(line).unwrap(), expected, "{line}");
        check("hash", Command::Mode(ModeWord::Hash, true));
        check("no  roundrobin", Command::Mode(ModeWord::RoundRobin, false));
        check(
            "blacklist 10",
            Command::Tune(Tune::Blacklist(Duration::from_secs(10))),
        );
        check(
            "timeout 500ms",
            Command::Tune(Tune::ConnectTimeout(Duration::from_millis(500))),
        );
        check(
            "tcp_fastclose both",
            Command::Tune(Tune::TcpFastclose(Fastclose::Both)),
        );
        check(
            "proxy_protocol v2",
            Command::Tune(Tune::ProxyProtocol(Some(
                crate::config::model::ProxyVersion::V2,
            ))),
        );
        check(
            "proxy_protocol off",
            Command::Tune(Tune::ProxyProtocol(None)),
        );
        check("no tcp_nodelay", Command::Tune(Tune::TcpNodelay(false)));
        check("transparent", Command::Tune(Tune::Transparent(true)));
        check("no transparent", Command::Tune(Tune::Transparent(false)));
        check(
            "source 10.0.0.1",
            Command::Tune(Tune::Source(Some("10.0.0.1".parse().unwrap()))),
        );
        check("no source", Command::Tune(Tune::Source(None)));
        check("max_per_source 10", Command::Tune(Tune::MaxPerSource(10)));
        check(
            "clients_max 1000000",
            Command::Tune(Tune::ClientsMax(1_000_000)),
        );
        check("http", Command::Http(true));
        check("no  http", Command::Http(false));
        check(
            "server 1 address 10.0.0.2 port 81 weight 3",
            Command::Server(
                1,
                ServerChange {
                    address: Some("10.0.0.2".into()),
                    port: Some(81),
                    weight: Some(3),
                    ..Default::default()
                },
            ),
        );
    }

    #[test]
    fn http_is_a_listener_setting_for_admin_with_a_listener_prefix() {
        let r = parse_request("listener web no http").unwrap();
        assert_eq!(r.listener.as_deref(), Some("web"));
        assert_eq!(r.action, Action::Set(Command::Http(false)));
        assert!(!Command::Http(true).is_global());
        assert_eq!(
            Action::Set(Command::Http(true)).needs(),
            Needs::Level(ControlLevel::Admin)
        );
    }

    #[test]
    fn tls_reload_takes_an_optional_listener_name_and_is_admin() {
        let action = |line: &str| parse_request(line).map(|r| r.action);
        assert_eq!(action("tls reload"), Ok(Action::TlsReload(None)));
        assert_eq!(
            action("tls reload web"),
            Ok(Action::TlsReload(Some("web".into())))
        );
        assert_eq!(
            action("tls reload a b").unwrap_err().0,
            "tls: the command is 'tls reload [LISTENER]'"
        );
        assert!(action("tls").is_err());
        assert_eq!(
            Action::TlsReload(None).needs(),
            Needs::Level(ControlLevel::Admin)
        );
    }

    #[test]
    fn rejects_with_the_offending_word() {
        for (line, word) in [
            ("frobnicate", "frobnicate"),
            ("hash now", "now"),
            ("blacklist soon", "soon"),
            ("server x", "x"),
            ("server 1 colour red", "colour"),
            ("tcp_fastclose sideways", "sideways"),
            ("proxy_protocol v3", "v3"),
            ("no blacklist", "blacklist"),
            ("clients_max 4294967295", "4294967295"),
            ("conn_max 0", "conn_max"),
            ("timeout 18446744073709551", "18446744073709551"),
            ("tracking 4294967296", "4294967296"),
            ("server 0 weight 4294967295", "4294967295"),
            ("server 0 max 2000000", "2000000"),
            ("max_per_source -1", "-1"),
            ("max_per_source 1000001", "1000001"),
            ("recent 99999999999", "99999999999"),
            ("http on", "on"),
            ("no http 1", "1"),
        ] {
            let e = parse(line).unwrap_err().to_string();
            assert!(e.contains(word), "{line}: {e}");
        }
    }
}

#[cfg(test)]
mod robustness {
    /// Any sequence of known and unknown words parses or fails with a message, never panics.
    #[test]
    fn word_salad_never_panics() {
        let words = [
            "server",
            "no",
            "hash",
            "0",
            "1",
            "-1",
            "99999999999999999999",
            "address",
            "port",
            "max",
            "weight",
            "blacklist",
            "tcp_fastclose",
            "up",
            "timeout",
            "5ms",
            "",
            "\u{0}",
            "é",
        ];
        let mut gen = quill_core::rand::Rng::new(0x9e37_79b9_7f4a_7c15);
        for _ in 0..5_000 {
            let rng = gen.next_u64();
            let n = (rng % 7) as usize;
            let line: Vec<&str> = (0..n)
                .map(|k| words[((rng >> (k * 5)) % words.len() as u64) as usize])
                .collect();
            let _ = super::parse(&line.join(" "));
        }
    }
}
