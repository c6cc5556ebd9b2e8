//! Loading a TOML configuration file: the file read without ever blocking, deserialized into the
//! `Raw*` structs (every value keeps its span), then checked and built into the model. Every error
//! starts with `FILE:LINE:`.

use std::fmt;
use std::net::SocketAddr;
use std::ops::{Range, RangeInclusive};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

use crate::acl::{self, AclId};
use crate::addr::{self, AdminState};
use crate::balancer::ModeWord;

use super::model::{
    in_range, nonzero, parse_duration, parse_status_range, validate_check_path, CheckKind, Config,
    ConfigError, ControlLevel, Fastclose, Global, HealthCheck, ListenerConfig, LogFormat, Member,
    Tuning, TuningPatch, MAX_ACCEPT_BATCH, MAX_BACKLOG, MAX_CLIENTS, MAX_DURATION, MAX_SESSIONS,
    MAX_WEIGHT, MAX_WORKERS,
};

/// Loads and validates a TOML configuration file. `cli` patches apply on top of the file's
/// top-level values (command-line options override the file).
pub(crate) fn load_file(path: &Path, cli: &TuningPatch) -> Result<Config, ConfigError> {
    let text = read_config_text(path)?;
    from_toml(&path.display().to_string(), &text, cli)
}

/// The most a configuration file (TOML, `-F`, `include`) may hold.
pub(crate) const MAX_CONFIG_FILE: u64 = 4 << 20;

/// Reads a configuration file as text without ever waiting on it: it is opened nonblocking (a FIFO
/// without a writer does not hang the open), and must be a regular file (not a FIFO, a device such
/// as /dev/zero, a directory) of at most [`MAX_CONFIG_FILE`] bytes, in UTF-8. Errors start with
/// `FILE:` (`FILE:LINE: not valid UTF-8` for the line of the first bad byte).
pub(crate) fn read_config_text(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;

    use rustix::fs::{FileType, Mode, OFlags};
    let fail = |why: &dyn fmt::Display| ConfigError::usage(format!("{}: {why}", path.display()));
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd =
        rustix::fs::open(path, flags, Mode::empty()).map_err(|e| fail(&std::io::Error::from(e)))?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| fail(&std::io::Error::from(e)))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(fail(&"not a regular file"));
    }
    let too_big = || fail(&format!("larger than {} MiB", MAX_CONFIG_FILE >> 20));
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    if size > MAX_CONFIG_FILE {
        return Err(too_big());
    }
    let mut bytes = Vec::with_capacity(size as usize);
    // Bounded again while reading: the file may grow after the fstat.
    std::fs::File::from(fd)
        .take(MAX_CONFIG_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(&e))?;
    if bytes.len() as u64 > MAX_CONFIG_FILE {
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|e| {
        let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
        ConfigError::usage(format!("{}:{line}: not valid UTF-8", path.display()))
    })
}

/// Parses TOML text; `origin` names the file in messages.
pub(crate) fn from_toml(
    origin: &str,
    text: &str,
    cli: &TuningPatch,
) -> Result<Config, ConfigError> {
    let lines = LineIndex::new(text);
    let at = |span: Range<usize>| format!("{origin}:{}: ", lines.line(span.start));
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(1, |s| lines.line(s.start));
        ConfigError::usage(format!(
            "{origin}:{line}: {}",
            e.message().trim().replace('\n', " ")
        ))
    })?;
    let mut global = Global::default();
    let bounded = |v: &Option<Spanned<u32>>, name: &str, range: RangeInclusive<u32>| {
        v.as_ref()
            .map(|v| {
                let n = *v.get_ref();
                in_range(
                    name,
                    n.into(),
                    (*range.start()).into()..=(*range.end()).into(),
                )
                .map(|()| n)
                .map_err(|e| ConfigError::usage(format!("{}{e}", at(v.span()))))
            })
            .transpose()
    };
    if let Some(w) = &raw.workers {
        in_range("workers", *w.get_ref() as u64, 1..=MAX_WORKERS as u64)
            .map_err(|e| ConfigError::usage(format!("{}{e}", at(w.span()))))?;
        global.workers = *w.get_ref();
    }
    global.max_connections = bounded(&raw.max_connections, "max_connections", 1..=MAX_SESSIONS)?
        .or(global.max_connections);
    global.backlog = bounded(&raw.backlog, "backlog", 1..=MAX_BACKLOG)?.unwrap_or(global.backlog);
    global.accept_batch = bounded(&raw.accept_batch, "accept_batch", 1..=MAX_ACCEPT_BATCH)?
        .unwrap_or(global.accept_batch);
    global.drain_timeout = raw.drain_timeout.map_or(global.drain_timeout, |d| d.0);
    global.tfo = raw.tfo.unwrap_or(global.tfo);
    global.reuseport = raw.reuseport.unwrap_or(global.reuseport);
    global.splice = raw.splice.unwrap_or(global.splice);
    global.pid_file = raw.pid_file.clone();
    global.log = raw.log.clone();
    global.user = raw.user.clone();
    global.chroot = raw.chroot.clone();
    if let Some(f) = &raw.log_format {
        global.log_format = LogFormat::parse(f.get_ref()).ok_or_else(|| {
            ConfigError::usage(format!(
                "{}invalid log_format '{}' (expected text or json)",
                at(f.span()),
                f.get_ref()
            ))
        })?;
    }
    if let Some(c) = &raw.control {
        global.control = Some(
            addr::parse_listen(c.get_ref())
                .map_err(|e| ConfigError::from_addr(e, &format!("{}control: ", at(c.span()))))?,
        );
    }
    if let Some(n) = &raw.control_acl {
        global.control_acl = Some(acl_number(*n.get_ref(), &at(n.span()))?);
    }
    if let Some(l) = &raw.control_level {
        global.control_level = ControlLevel::parse(l.get_ref()).ok_or_else(|| {
            ConfigError::usage(format!(
                "{}invalid control_level '{}' (expected read, operate or admin)",
                at(l.span()),
                l.get_ref()
            ))
        })?;
    }
    global.control_token_file = raw.control_token_file.clone();
    global.admin_token_file = raw.admin_token_file.clone();
    if let Some(a) = &raw.admin {
        global.admin = Some(
            parse_admin(a.get_ref())
                .map_err(|e| ConfigError::usage(format!("{}admin: {e}", at(a.span()))))?,
        );
    }
    global.allow_exit = raw.allow_exit.unwrap_or(false);
    // Relative to the file that names it, as `include` is: the file is read at start and on
    // every reload, like `-F`, and `write` without FILE writes there.
    global.command_file = raw
        .command_file
        .as_ref()
        .map(|f| match Path::new(origin).parent() {
            Some(dir) => dir.join(f),
            None => f.clone(),
        });
    global.status_file = raw.status_file.clone();
    for (n, lines) in &raw.acl {
        let prefix = at(lines.span());
        let list =
            acl::parse_list(n).map_err(|e| ConfigError::usage(format!("{prefix}acl: {e}")))?;
        for line in lines.get_ref() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let entry = acl::parse_entry(&words)
                .map_err(|e| ConfigError::usage(format!("{prefix}acl {list} '{line}': {e}")))?;
            global.acls[list].entries.push(entry);
        }
    }
    let default_health = match &raw.health {
        Some(h) => Some(
            h.get_ref()
                .build()
                .map_err(|e| ConfigError::usage(format!("{}{e}", at(h.span()))))?,
        ),
        None => None,
    };
    if let (Some(n), Some(id)) = (&raw.control_acl, global.control_acl) {
        Config {
            global: global.clone(),
            listeners: Vec::new(),
        }
        .check_control_acl(id)
        .map_err(|e| ConfigError::usage(format!("{}{e}", at(n.span()))))?;
    }
    let default_slow_start = raw.slow_start.map_or(Duration::ZERO, |d| d.0);
    let mut defaults = Tuning::default();
    defaults.apply(&raw.tuning(&at)?);
    defaults.apply(cli);
    if raw.listener.is_empty() {
        return Err(ConfigError::usage(format!(
            "{origin}:1: no [[listener]] defined"
        )));
    }
    let mut listeners: Vec<ListenerConfig> = Vec::new();
    for rl in &raw.listener {
        let mut l = build_listener(rl, &defaults, &at)?;
        if l.health.is_none() {
            l.health = default_health.clone();
        }
        if rl.slow_start.is_none() {
            l.slow_start = default_slow_start;
        }
        if let Some(other) = listeners.iter().find(|o| o.name == l.name) {
            return Err(ConfigError::usage(format!(
                "{}duplicate listener name '{}'",
                at(rl.name.span()),
                other.name
            )));
        }
        if let Some(other) = listeners.iter().find(|o| o.listen == l.listen) {
            return Err(ConfigError::usage(format!(
                "{}listener '{}' listens on {} like listener '{}'",
                at(rl.listen.span()),
                l.name,
                l.listen,
                other.name
            )));
        }
        listeners.push(l);
    }
    let config = Config { global, listeners };
    if let Some(found) = config.self_loop() {
        let rl = &raw.listener[found.listener];
        let span = match found.member {
            Member::Server(i) => rl.servers.get(i).map(|s| s.span()),
            Member::Emergency => rl.emergency.as_ref().map(|e| e.span()),
            Member::Abuse => rl.abuse.as_ref().map(|e| e.span()),
        }
        .unwrap_or_else(|| rl.name.span());
        return Err(ConfigError::usage(format!(
            "{}{}",
            at(span),
            found.message(&config)
        )));
    }
    config.validate()?;
    Ok(config)
}

fn build_listener(
    rl: &RawListener,
    defaults: &Tuning,
    at: &dyn Fn(Range<usize>) -> String,
) -> Result<ListenerConfig, ConfigError> {
    let name = rl.name.get_ref().trim();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(ConfigError::usage(format!(
            "{}invalid listener name '{name}'",
            at(rl.name.span())
        )));
    }
    let listen = addr::parse_listen(rl.listen.get_ref())
        .map_err(|e| ConfigError::from_addr(e, &at(rl.listen.span())))?;
    let mut l = ListenerConfig::new(name, listen);
    l.tuning = defaults.clone();
    l.tuning.apply(&rl.tuning(at)?);
    if let Some(mode) = &rl.mode {
        for word in mode.get_ref() {
            let w = ModeWord::parse(word).ok_or_else(|| {
                ConfigError::usage(format!(
                    "{}unknown mode '{word}' (expected roundrobin, hash, weight, prio, stubborn, leastconn, p2c)",
                    at(mode.span())
                ))
            })?;
            l.mode.set(w, true);
        }
    }
    if let Some(e) = &rl.emergency {
        l.emergency = Some(
            addr::parse_backend(e.get_ref())
                .map_err(|err| ConfigError::from_addr(err, &at(e.span())))?,
        );
    }
    if let Some(e) = &rl.abuse {
        l.abuse = Some(
            addr::parse_backend(e.get_ref())
                .map_err(|err| ConfigError::from_addr(err, &at(e.span())))?,
        );
    }
    if let Some(n) = &rl.client_acl {
        l.client_acl = Some(acl_number(*n.get_ref(), &at(n.span()))?);
    }
    if let Some(h) = &rl.health {
        l.health = Some(
            h.get_ref()
                .build()
                .map_err(|e| ConfigError::usage(format!("{}{e}", at(h.span()))))?,
        );
    }
    if let Some(d) = rl.slow_start {
        l.slow_start = d.0;
    }
    if rl.servers.is_empty() {
        return Err(ConfigError::usage(format!(
            "{}listener '{name}' has no servers",
            at(rl.name.span())
        )));
    }
    for s in &rl.servers {
        let prefix = at(s.span());
        let spec = match s.get_ref() {
            RawServer::Spec(text) => addr::parse_server(text, l.listen.port()),
            RawServer::Table(t) => {
                let state = match &t.state {
                    None => AdminState::Enabled,
                    Some(w) => AdminState::parse(w).ok_or_else(|| {
                        ConfigError::usage(format!(
                            "{prefix}invalid state '{w}' (expected enabled, drain, disabled)"
                        ))
                    })?,
                };
                let acl = t.acl.map(|n| acl_number(n, &prefix)).transpose()?;
                for (name, v, most) in [
                    ("max", t.max, MAX_SESSIONS),
                    ("hard", t.hard, MAX_SESSIONS),
                    ("weight", t.weight, MAX_WEIGHT),
                    ("prio", t.prio, MAX_WEIGHT),
                ] {
                    if let Some(v) = v {
                        in_range(name, v.into(), 0..=most.into())
                            .map_err(|e| ConfigError::usage(format!("{prefix}{e}")))?;
                    }
                }
                addr::parse_server(&t.address, l.listen.port()).map(|mut spec| {
                    spec.max = t.max.unwrap_or(spec.max);
                    spec.hard = t.hard.unwrap_or(spec.hard);
                    spec.weight = t.weight.unwrap_or(spec.weight);
                    spec.prio = t.prio.unwrap_or(spec.prio);
                    spec.acl = acl;
                    spec.state = state;
                    spec
                })
            }
        }
        .map_err(|e| ConfigError::from_addr(e, &prefix))?;
        l.servers.push(spec);
    }
    l.validate().map_err(|e| ConfigError {
        message: format!("{}{}", at(rl.name.span()), e.message),
        ..e
    })?;
    Ok(l)
}

fn acl_number(n: u8, prefix: &str) -> Result<AclId, ConfigError> {
    acl::parse_list(&n.to_string()).map_err(|e| ConfigError::usage(format!("{prefix}{e}")))
}

/// Parses the admin listener address: `HOST:PORT` with an IP host, or a bare port (loopback).
pub(crate) fn parse_admin(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse()
        .map_err(|_| format!("invalid address '{s}' (expected IP:PORT, e.g. 127.0.0.1:9100)"))
}

/// Where each line of a text starts, so that turning an offset into a line number is a binary
/// search, not a scan from the start (a file with 40,000 servers names a line for each).
struct LineIndex(Vec<usize>);

impl LineIndex {
    fn new(text: &str) -> LineIndex {
        LineIndex(
            text.bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .map(|(i, _)| i)
                .collect(),
        )
    }

    /// The 1-based line of byte `offset`.
    fn line(&self, offset: usize) -> usize {
        self.0.partition_point(|&nl| nl < offset) + 1
    }
}

/// A duration in a file: integer seconds or a string with a unit.
#[derive(Clone, Copy, Debug)]
struct Dur(Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Dur, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as 30, \"500ms\", \"2s\", \"5m\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                match u64::try_from(v).map(Duration::from_secs) {
                    Ok(d) if d <= MAX_DURATION => Ok(Dur(d)),
                    Ok(_) => Err(E::custom(format!(
                        "invalid duration {v}: at most 30 days (2592000 seconds)"
                    ))),
                    Err(_) => Err(E::custom(format!("invalid duration {v}"))),
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                parse_duration(v).map(Dur).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Fastclose {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Fastclose, D::Error> {
        let s = String::deserialize(d)?;
        Fastclose::parse(&s).ok_or_else(|| {
            de::Error::custom(format!(
                "invalid tcp_fastclose '{s}' (expected off, up, down, both)"
            ))
        })
    }
}

/// A server in a file: a Pen spec string or a table.
#[derive(Debug)]
enum RawServer {
    Spec(String),
    Table(RawServerTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServerTable {
    address: String,
    max: Option<u32>,
    hard: Option<u32>,
    weight: Option<u32>,
    prio: Option<u32>,
    acl: Option<u8>,
    state: Option<String>,
}

/// `[health]` / `[listener.health]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHealth {
    /// "tcp" or "http".
    #[serde(rename = "type")]
    kind: Option<String>,
    path: Option<String>,
    expect: Option<String>,
    interval: Option<Dur>,
    timeout: Option<Dur>,
    rise: Option<u32>,
    fall: Option<u32>,
}

impl RawHealth {
    fn build(&self) -> Result<HealthCheck, String> {
        let mut h = HealthCheck::default();
        let kind = self
            .kind
            .as_deref()
            .unwrap_or(if self.path.is_some() { "http" } else { "tcp" });
        h.kind = match kind {
            "tcp" => {
                if self.path.is_some() || self.expect.is_some() {
                    return Err("health: path and expect need type = \"http\"".into());
                }
                CheckKind::Tcp
            }
            "http" => {
                // An empty path is `/`, as `--check http:` says.
                let path = match self.path.as_deref() {
                    None | Some("") => "/",
                    Some(p) => p,
                };
                validate_check_path(path)?;
                let path = path.to_string();
                let expect = match &self.expect {
                    Some(e) => parse_status_range(e)?,
                    None => (200, 399),
                };
                CheckKind::Http { path, expect }
            }
            other => {
                return Err(format!(
                    "health: unknown type '{other}' (expected tcp or http)"
                ))
            }
        };
        if let Some(d) = self.interval {
            h.interval = nonzero(d.0, "health interval").map_err(|e| e.message)?;
        }
        if let Some(d) = self.timeout {
            h.timeout = nonzero(d.0, "health timeout").map_err(|e| e.message)?;
        }
        for (v, slot, name) in [
            (self.rise, &mut h.rise, "rise"),
            (self.fall, &mut h.fall, "fall"),
        ] {
            if let Some(n) = v {
                if n == 0 {
                    return Err(format!("health: {name} must be at least 1"));
                }
                *slot = n;
            }
        }
        h.check()?;
        Ok(h)
    }
}

impl<'de> Deserialize<'de> for RawServer {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RawServer, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawServer;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a server \"HOST:PORT[:MAXCONN[:HARD[:WEIGHT[:PRIO]]]]\" or a table { address = ... }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawServer, E> {
                Ok(RawServer::Spec(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawServer, A::Error> {
                RawServerTable::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(RawServer::Table)
            }
        }
        d.deserialize_any(V)
    }
}

/// Declares a raw file struct with the tuning keys that may appear both at the top level and in a
/// listener (serde cannot combine `flatten` with `deny_unknown_fields`).
macro_rules! with_tuning_keys {
    ($(#[$meta:meta])* struct $name:ident { $($(#[$fmeta:meta])* $field:ident : $ty:ty,)* }) => {
        $(#[$meta])*
        struct $name {
            $($(#[$fmeta])* $field: $ty,)*
            connect_timeout: Option<Dur>,
            blacklist: Option<Dur>,
            tracking_time: Option<Dur>,
            clients_max: Option<Spanned<u32>>,
            idle_timeout: Option<Dur>,
            fin_timeout: Option<Dur>,
            tcp_nodelay: Option<bool>,
            tcp_fastclose: Option<Fastclose>,
            keepalive: Option<bool>,
            max_per_source: Option<Spanned<u32>>,
        }

        impl $name {
            /// The tuning keys set here; numbers out of range are errors naming their line.
            fn tuning(&self, at: &dyn Fn(Range<usize>) -> String) -> Result<TuningPatch, ConfigError> {
                let bounded = |v: &Option<Spanned<u32>>, name: &str, range: RangeInclusive<u64>| {
                    v.as_ref()
                        .map(|v| {
                            in_range(name, (*v.get_ref()).into(), range)
                                .map(|()| *v.get_ref())
                                .map_err(|e| ConfigError::usage(format!("{}{e}", at(v.span()))))
                        })
                        .transpose()
                };
                Ok(TuningPatch {
                    connect_timeout: self.connect_timeout.map(|d| d.0),
                    blacklist: self.blacklist.map(|d| d.0),
                    tracking_time: self.tracking_time.map(|d| d.0),
                    clients_max: bounded(&self.clients_max, "clients_max", 1..=MAX_CLIENTS.into())?,
                    idle_timeout: self.idle_timeout.map(|d| d.0),
                    fin_timeout: self.fin_timeout.map(|d| d.0),
                    tcp_nodelay: self.tcp_nodelay,
                    tcp_fastclose: self.tcp_fastclose,
                    keepalive: self.keepalive,
                    max_per_source: bounded(&self.max_per_source, "max_per_source", 0..=MAX_SESSIONS.into())?,
                })
            }
        }
    };
}

with_tuning_keys! {
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct RawFile {
        workers: Option<Spanned<usize>>,
        max_connections: Option<Spanned<u32>>,
        backlog: Option<Spanned<u32>>,
        accept_batch: Option<Spanned<u32>>,
        drain_timeout: Option<Dur>,
        tfo: Option<bool>,
        reuseport: Option<bool>,
        splice: Option<bool>,
        pid_file: Option<PathBuf>,
        log: Option<PathBuf>,
        user: Option<String>,
        chroot: Option<PathBuf>,
        log_format: Option<Spanned<String>>,
        control: Option<Spanned<String>>,
        control_acl: Option<Spanned<u8>>,
        control_level: Option<Spanned<String>>,
        control_token_file: Option<PathBuf>,
        admin_token_file: Option<PathBuf>,
        admin: Option<Spanned<String>>,
        allow_exit: Option<bool>,
        command_file: Option<PathBuf>,
        status_file: Option<PathBuf>,
        #[serde(default)]
        acl: std::collections::BTreeMap<String, Spanned<Vec<String>>>,
        health: Option<Spanned<RawHealth>>,
        slow_start: Option<Dur>,
        #[serde(default)]
        listener: Vec<RawListener>,
    }
}

with_tuning_keys! {
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct RawListener {
        name: Spanned<String>,
        listen: Spanned<String>,
        mode: Option<Spanned<Vec<String>>>,
        emergency: Option<Spanned<String>>,
        abuse: Option<Spanned<String>>,
        client_acl: Option<Spanned<u8>>,
        health: Option<Spanned<RawHealth>>,
        slow_start: Option<Dur>,
        #[serde(default)]
        servers: Vec<Spanned<RawServer>>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Config, ConfigError> {
        from_toml("q.toml", text, &TuningPatch::default())
    }

    #[test]
    fn errors_name_file_and_line() {
        let check = |text: &str, expected: &str| {
            let e = load(text).unwrap_err().message;
            assert!(
                e.starts_with(expected),
                "got {e:?}, expected prefix {expected:?}"
            );
        };
        check("workers = 2\nfoo = 1\n", "q.toml:2: unknown field `foo`");
        check(
            "[[listener]]\nname = \"a\"\nlisten = \"8080\"\nservers = [\"127.0.0.1:x\"]\n",
            "q.toml:4: invalid server '127.0.0.1:x'",
        );
        check(
            "connect_timeout = \"3 days\"\n",
            "q.toml:1: invalid duration '3 days'",
        );
        check(
            "[[listener]]\nname = \"a\"\nservers = [\"127.0.0.1:1\"]\n",
            "q.toml:1: missing field `listen`",
        );
        check(
            "[[listener]]\nname = \"a\"\nlisten = \"1\"\nmode = [\"fast\"]\nservers = [\"127.0.0.1:1\"]\n",
            "q.toml:4: unknown mode 'fast'",
        );
    }

    #[test]
    fn listener_overrides_top_level() {
        let c = load(
            "connect_timeout = 5\nidle_timeout = \"1m\"\n[[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:1\"\n\
             connect_timeout = \"1s\"\nmode = [\"roundrobin\", \"weight\"]\n\
             servers = [\"127.0.0.1:2\", { address = \"127.0.0.1:3\", weight = 4 }]\n",
        )
        .unwrap();
        let l = &c.listeners[0];
        assert_eq!(l.tuning.connect_timeout, Duration::from_secs(1));
        assert_eq!(l.tuning.idle_timeout, Duration::from_secs(60));
        assert_eq!(l.servers[1].weight, 4);
        assert_eq!(l.mode.to_string(), "roundrobin weight");
    }
}

#[cfg(test)]
mod robustness {
    use super::*;

    /// Mutated versions of the example file (bytes dropped, duplicated, flipped, lines cut) must
    /// give a configuration or an error naming `file:line`, never a panic.
    #[test]
    fn mutated_files_never_panic() {
        let example = include_str!("../../examples/quill.toml");
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for _ in 0..2_000 {
            let mut bytes = example.as_bytes().to_vec();
            for _ in 0..1 + next() % 4 {
                let at = (next() as usize) % bytes.len().max(1);
                match next() % 4 {
                    0 => {
                        bytes.remove(at);
                    }
                    1 => bytes.insert(at, bytes[at]),
                    2 => bytes[at] = (next() % 128) as u8,
                    _ => bytes.truncate(at),
                }
                if bytes.is_empty() {
                    break;
                }
            }
            let text = String::from_utf8_lossy(&bytes);
            if let Err(e) = from_toml("m.toml", &text, &TuningPatch::default()) {
                assert!(e.message.starts_with("m.toml:"), "{}", e.message);
                assert!(!e.message.contains('\n'), "one line: {:?}", e.message);
            }
        }
    }
}
