//! Loading a TOML configuration file: the file read without ever blocking, deserialized into the
//! `Raw*` structs (every value keeps its span), then checked and built into the model. Every error
//! starts with `FILE:LINE:`.

use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

use crate::acl::{self, AclId};
use crate::addr::{self, AdminState};
use crate::balancer::ModeWord;

use super::http::{
    self as http_settings, HttpSettingsPatch, MAX_HEADERS, MAX_HEAD_LIMIT, MAX_SERVER_KEEPALIVE,
    MIN_HEAD_LIMIT,
};
use super::http::{edits, RawEdits};
use super::model::ErrorPage;
use super::model::{
    in_range, nonzero, parse_status_range, pool_addr, validate_check_path, CheckKind, Config,
    ConfigError, ControlLevel, Global, HealthCheck, HttpSettings, ListenerConfig, LogFormat,
    Member, RouteAction, StreamProto, Tuning, TuningPatch, MAX_SESSIONS, MAX_WEIGHT,
};
use super::routes::RawRoute;
use super::settings::{self, Dur};

mod geoip;
mod global_table;
mod health_table;
mod http_table;
mod kind;
mod servers_table;
mod site_table;
mod tls_table;
mod udp_table;
use global_table::read_global;
use health_table::RawHealth;
use http_table::RawHttp;
use servers_table::RawServers;
pub(crate) use tls_table::check_certificates;
use tls_table::{RawServerTls, RawTls, TlsDefaults};
#[cfg(test)]
mod tls_tests;

/// Loads and validates a TOML configuration file. `cli` patches apply on top of the file's
/// top-level values (command-line options override the file); `all_http` (`-H`) makes every
/// listener an HTTP listener, with the file's `[http]` settings unless it has its own.
pub(crate) fn load_file(
    path: &Path,
    cli: &TuningPatch,
    all_http: bool,
) -> Result<Config, ConfigError> {
    let text = read_config_text(path)?;
    from_toml_with(&path.display().to_string(), &text, cli, all_http)
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
#[cfg(test)]
pub(crate) fn from_toml(
    origin: &str,
    text: &str,
    cli: &TuningPatch,
) -> Result<Config, ConfigError> {
    from_toml_with(origin, text, cli, false)
}

/// `path` as the configuration file `origin` (in directory `dir`) names it: relative paths are
/// the file's directory's. Where that is not what the working directory would have given (what
/// Quill did before for `log`, `control`, `pid_file`, `status_file` and the token files), a
/// warning says which file is used now, so a moved log or socket is not a surprise.
fn relative_to_file(origin: &str, dir: &Path, what: &str, path: &Path) -> PathBuf {
    if path.is_absolute() || dir.as_os_str().is_empty() {
        return path.to_path_buf();
    }
    let now = dir.join(path);
    let same_dir = match (std::fs::canonicalize(dir), std::env::current_dir()) {
        (Ok(d), Ok(cwd)) => std::fs::canonicalize(&cwd).map_or(d == cwd, |c| c == d),
        _ => false,
    };
    if !same_dir {
        tracing::warn!(
            "{origin}: {what} '{}' is relative: it is now taken from the configuration file's directory, {}, not from the working directory as before",
            path.display(),
            now.display()
        );
    }
    now
}

/// Parses TOML text; `origin` names the file in messages; `all_http` as [`load_file`] says.
fn from_toml_with(
    origin: &str,
    text: &str,
    cli: &TuningPatch,
    all_http: bool,
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
    let global = read_global(&raw, origin, &at)?;
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
            pools: Vec::new(),
        }
        .check_control_acl(id)
        .map_err(|e| ConfigError::usage(format!("{}{e}", at(n.span()))))?;
    }
    let default_slow_start = raw.slow_start.map_or(Duration::ZERO, |d| d.0);
    let dir = Path::new(origin)
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let mut http_defaults = HttpSettings::default();
    if let Some(h) = &raw.http {
        http_defaults.apply(&h.get_ref().patch(&at, &dir)?);
        h.get_ref().check(&http_defaults, h.span(), &at)?;
    }
    let mut defaults = Tuning::default();
    defaults.apply(&raw.tuning(&at)?);
    defaults.apply(cli);
    let tls_defaults = RawTls::defaults(raw.tls.as_ref(), &dir, &at)?;
    let file = FileDefaults {
        tuning: &defaults,
        http: &http_defaults,
        tls: &tls_defaults,
        all_http,
        dir: &dir,
    };
    if raw.listener.is_empty() {
        return Err(ConfigError::usage(format!(
            "{origin}:1: no [[listener]] defined"
        )));
    }
    let pools = read_pools(
        &raw,
        &defaults,
        &default_health,
        default_slow_start,
        &dir,
        &at,
    )?;
    let listeners = read_listeners(
        &raw,
        &file,
        &default_health,
        default_slow_start,
        &pools,
        &at,
    )?;
    let config = Config {
        global,
        listeners,
        pools,
    };
    check_whole(&config, &raw, &at)?;
    config.validate()?;
    Ok(config)
}

/// The named pools (`[[pool]]`) of a file, each with the file's defaults.
fn read_pools(
    raw: &RawFile,
    defaults: &Tuning,
    default_health: &Option<HealthCheck>,
    default_slow_start: Duration,
    dir: &Path,
    at: &dyn Fn(Range<usize>) -> String,
) -> Result<Vec<ListenerConfig>, ConfigError> {
    let mut pools: Vec<ListenerConfig> = Vec::new();
    for rp in &raw.pool {
        let mut p = build_pool(rp, defaults, dir, at)?;
        if p.health.is_none() {
            p.health = default_health.clone();
            // A FastCGI server answers no HTTP check: the file-wide one is a connect there.
            if let (true, Some(h)) = (p.fastcgi, &mut p.health) {
                if matches!(h.kind, CheckKind::Http { .. }) {
                    h.kind = CheckKind::Tcp;
                }
            }
        }
        if p.fastcgi && rp.proxy_protocol.is_none() {
            // Nor does it read a PROXY header: the file-wide `proxy_protocol` is for HTTP pools.
            p.tuning.proxy_protocol = None;
        }
        if rp.slow_start.is_none() {
            p.slow_start = default_slow_start;
        }
        if pools.iter().any(|o| o.name == p.name) {
            return Err(ConfigError::usage(format!(
                "{}duplicate pool name '{}'",
                at(rp.name.span()),
                p.name
            )));
        }
        pools.push(p);
    }
    Ok(pools)
}

/// The listeners of a file, each with the file's defaults; a route's pool must be one of `pools`.
fn read_listeners(
    raw: &RawFile,
    file: &FileDefaults,
    default_health: &Option<HealthCheck>,
    default_slow_start: Duration,
    pools: &[ListenerConfig],
    at: &dyn Fn(Range<usize>) -> String,
) -> Result<Vec<ListenerConfig>, ConfigError> {
    let mut listeners: Vec<ListenerConfig> = Vec::new();
    for rl in &raw.listener {
        let mut l = build_listener(rl, file, at)?;
        // The file-wide checks connect over TCP: a UDP listener's servers have no such port.
        if l.health.is_none() && l.udp().is_none() {
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
        for (r, raw_route) in l.routes.iter().zip(&rl.route) {
            let (p, fastcgi) = match &r.action {
                RouteAction::Pool(p) => (p, false),
                RouteAction::Fastcgi(f) => (&f.pool, true),
                _ => continue,
            };
            let fail = |e: String| {
                Err(ConfigError::usage(format!(
                    "{}listener '{}': route '{}': {e}",
                    at(raw_route.span()),
                    l.name,
                    r.name
                )))
            };
            match pools.iter().find(|o| &o.name == p) {
                None => return fail(format!("no pool named '{p}' (define it with [[pool]])")),
                Some(o) if o.fastcgi && !fastcgi => {
                    return fail(format!(
                        "pool '{p}' speaks FastCGI: send to it with fastcgi = {{ pool = \"{p}\", root = ... }}"
                    ))
                }
                Some(o) if !o.fastcgi && fastcgi => {
                    return fail(format!(
                        "fastcgi: pool '{p}' is not a FastCGI pool (give it protocol = \"fastcgi\")"
                    ))
                }
                Some(_) => {}
            }
        }
        listeners.push(l);
    }
    Ok(listeners)
}

/// The checks of a whole file that name a line: a server that is Quill itself, and listeners that
/// would mix kinds of lines in one access log.
fn check_whole(
    config: &Config,
    raw: &RawFile,
    at: &dyn Fn(Range<usize>) -> String,
) -> Result<(), ConfigError> {
    if let Some(found) = config.self_loop() {
        let span = match (raw.listener.get(found.listener), found.member) {
            (Some(rl), Member::Server(i)) => {
                servers_table::listed(&rl.servers).get(i).map(|s| s.span())
            }
            (Some(rl), Member::Emergency) => rl.emergency.as_ref().map(|e| e.span()),
            (Some(rl), Member::Abuse) => rl.abuse.as_ref().map(|e| e.span()),
            (None, member) => raw
                .pool
                .get(found.listener - raw.listener.len())
                .and_then(|rp| match member {
                    Member::Server(i) => {
                        servers_table::listed(&rp.servers).get(i).map(|s| s.span())
                    }
                    Member::Emergency => rp.emergency.as_ref().map(|e| e.span()),
                    Member::Abuse => None,
                }),
        }
        .unwrap_or(0..0);
        return Err(ConfigError::usage(format!(
            "{}{}",
            at(span),
            found.message(config)
        )));
    }
    if let Some((i, why)) = config.log_mix() {
        // The line of the listener's own `log`, else of its name.
        let span = raw.listener.get(i).map_or(0..0, |rl| {
            rl.log.as_ref().map_or_else(|| rl.name.span(), |p| p.span())
        });
        return Err(ConfigError::usage(format!("{}{why}", at(span))));
    }
    Ok(())
}

/// What every listener of a file starts from.
struct FileDefaults<'a> {
    tuning: &'a Tuning,
    /// `[http]`, over the built-in defaults.
    http: &'a HttpSettings,
    /// `[tls]`, over the built-in defaults (every key but the certificates).
    tls: &'a TlsDefaults,
    /// `-H` with `--config`: every listener is an HTTP listener.
    all_http: bool,
    /// The configuration file's directory (relative `error_pages` files).
    dir: &'a Path,
}

fn build_listener(
    rl: &RawListener,
    defaults: &FileDefaults,
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
    let udp = kind::udp(rl, &l.listen, name, at)?;
    l.tuning = defaults.tuning.clone();
    let proto = kind::stream_proto(rl, defaults, &mut l.tuning, name, at)?;
    let is_http = matches!(proto, StreamProto::Http(_));
    l.tuning.apply(&rl.tuning(at)?);
    let tls = rl
        .tls
        .as_ref()
        .map(|t| {
            t.get_ref()
                .build(defaults.tls, t.span(), is_http, defaults.dir, at)
        })
        .transpose()?;
    if let Some(t) = &rl.server_tls {
        l.server_tls = Some(t.get_ref().build(defaults.dir, at)?);
    }
    if let Some(n) = &rl.client_acl {
        l.client_acl = Some(acl_number(*n.get_ref(), &at(n.span()))?);
    }
    let parts = kind::Parts {
        dsr: kind::dsr_keys(rl, at)?,
        accept_proxy: kind::accept_proxy(rl, &l.listen, name, at)?,
        udp,
        proto,
        tls,
    };
    l.kind = kind::assemble(rl, parts, name, at)?;
    // Relative to the file's directory, as the top-level `log` is.
    l.log = rl.log.as_ref().map(|p| defaults.dir.join(p.get_ref()));
    if let Some(f) = &rl.log_format {
        l.log_format = Some(LogFormat::parse(f.get_ref()).ok_or_else(|| {
            ConfigError::usage(format!(
                "{}invalid log_format '{}' (expected text or json)",
                at(f.span()),
                f.get_ref()
            ))
        })?);
    }
    if let Some(e) = &rl.abuse {
        l.abuse = Some(
            addr::parse_backend(e.get_ref())
                .map_err(|err| ConfigError::from_addr(err, &at(e.span())))?,
        );
    }
    l.routes = kind::routes(rl, l.is_http(), name, at, defaults.dir)?;
    site_table::read_sites(rl, &mut l, defaults.dir, at)?;
    if servers_table::none(&rl.servers) && l.routes.is_empty() {
        return Err(ConfigError::usage(format!(
            "{}listener '{name}' has no servers",
            at(rl.name.span())
        )));
    }
    fill_pool(
        &mut l,
        PoolKeys {
            mode: &rl.mode,
            hash_key: &rl.hash_key,
            emergency: &rl.emergency,
            health: &rl.health,
            slow_start: rl.slow_start,
            sticky_cookie: &rl.sticky_cookie,
            servers: &rl.servers,
        },
        at,
    )?;
    l.validate().map_err(|e| ConfigError {
        message: format!("{}{}", at(rl.name.span()), e.message),
        ..e
    })?;
    Ok(l)
}

/// The keys a listener and a `[[pool]]` share.
struct PoolKeys<'a> {
    mode: &'a Option<Spanned<Vec<String>>>,
    hash_key: &'a Option<Spanned<String>>,
    emergency: &'a Option<Spanned<String>>,
    health: &'a Option<Spanned<RawHealth>>,
    slow_start: Option<Dur>,
    sticky_cookie: &'a Option<Spanned<String>>,
    servers: &'a Option<Spanned<RawServers>>,
}

/// Builds a `[[pool]]`: a listener's pool without a socket (see `Config::pools`).
fn build_pool(
    rp: &RawPool,
    tuning: &Tuning,
    dir: &Path,
    at: &dyn Fn(Range<usize>) -> String,
) -> Result<ListenerConfig, ConfigError> {
    let name = rp.name.get_ref().trim();
    if name.is_empty() || name.contains(char::is_whitespace) || name.len() > 64 {
        return Err(ConfigError::usage(format!(
            "{}invalid pool name '{}'",
            at(rp.name.span()),
            name.escape_debug()
        )));
    }
    let mut l = ListenerConfig::new(name, pool_addr());
    l.tuning = tuning.clone();
    // A file-wide `transparent` is for listeners: a named pool's connections may serve many.
    l.tuning.transparent = false;
    l.tuning.apply(&rp.tuning(at)?);
    if let Some(t) = &rp.server_tls {
        l.server_tls = Some(t.get_ref().build(dir, at)?);
    }
    l.fastcgi = pool_protocol(rp, at)?;
    if servers_table::none(&rp.servers) {
        return Err(ConfigError::usage(format!(
            "{}pool '{name}' has no servers",
            at(rp.name.span())
        )));
    }
    fill_pool(
        &mut l,
        PoolKeys {
            mode: &rp.mode,
            hash_key: &rp.hash_key,
            emergency: &rp.emergency,
            health: &rp.health,
            slow_start: rp.slow_start,
            sticky_cookie: &rp.sticky_cookie,
            servers: &rp.servers,
        },
        at,
    )?;
    l.validate().map_err(|e| ConfigError {
        message: format!("{}{}", at(rp.name.span()), e.message),
        ..e
    })?;
    Ok(l)
}

/// A `[[pool]]`'s `protocol`: `http` (the default) or `fastcgi` (true), which takes no
/// `server_tls`, `proxy_protocol` or HTTP health check (a FastCGI server speaks none of them).
fn pool_protocol(rp: &RawPool, at: &dyn Fn(Range<usize>) -> String) -> Result<bool, ConfigError> {
    let Some(p) = &rp.protocol else {
        return Ok(false);
    };
    let fastcgi = match p.get_ref().as_str() {
        "http" => false,
        "fastcgi" => true,
        other => {
            return Err(ConfigError::usage(format!(
                "{}invalid pool protocol '{}' (expected http or fastcgi)",
                at(p.span()),
                other.escape_debug()
            )))
        }
    };
    let refuse = |what: &str| {
        Err(ConfigError::usage(format!(
            "{}pool '{}': protocol = \"fastcgi\" takes no {what} (a FastCGI server speaks none)",
            at(p.span()),
            rp.name.get_ref().trim()
        )))
    };
    if fastcgi && rp.server_tls.is_some() {
        return refuse("server_tls");
    }
    if fastcgi && rp.proxy_protocol.is_some() {
        return refuse("proxy_protocol");
    }
    if let (true, Some(h)) = (fastcgi, &rp.health) {
        let check = h.get_ref().build().unwrap_or_default();
        if matches!(check.kind, CheckKind::Http { .. }) {
            return refuse("HTTP health check");
        }
    }
    Ok(fastcgi)
}

/// Reads the pool keys into `l`: mode, emergency server, health check, slow start, servers.
fn fill_pool(
    l: &mut ListenerConfig,
    k: PoolKeys,
    at: &dyn Fn(Range<usize>) -> String,
) -> Result<(), ConfigError> {
    if let Some(mode) = k.mode {
        for word in mode.get_ref() {
            let w = ModeWord::parse(word).ok_or_else(|| {
                ConfigError::usage(format!(
                    "{}unknown mode '{word}' (expected roundrobin, hash, weight, prio, stubborn, leastconn, p2c, maglev)",
                    at(mode.span())
                ))
            })?;
            l.mode.set(w, true);
        }
    }
    kind::hash_key(l, k.hash_key, at)?;
    if let Some(e) = k.emergency {
        l.emergency = Some(
            addr::parse_backend(e.get_ref())
                .map_err(|err| ConfigError::from_addr(err, &at(e.span())))?,
        );
    }
    if let Some(h) = k.health {
        l.health = Some(
            h.get_ref()
                .build()
                .map_err(|e| ConfigError::usage(format!("{}{e}", at(h.span()))))?,
        );
    }
    if let Some(d) = k.slow_start {
        l.slow_start = d.0;
    }
    if let Some(c) = k.sticky_cookie {
        let name = c.get_ref();
        if !crate::config::http::is_token(name) || name.len() > 64 {
            return Err(ConfigError::usage(format!(
                "{}sticky_cookie: '{}' is not a cookie name (a token of at most 64 characters)",
                at(c.span()),
                name.escape_debug()
            )));
        }
        l.sticky_cookie = Some(name.clone());
    }
    l.discovery = servers_table::discovery(k.servers, at)?;
    for s in servers_table::listed(k.servers) {
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
    Ok(())
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

/// A value in milliseconds as written (`dsr_wait = 2` or `"2ms"`), read by the key's own
/// parser so that its errors name the line.
#[derive(Debug)]
struct MsText(String);

impl<'de> Deserialize<'de> for MsText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MsText, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = MsText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("milliseconds such as 2 or \"2ms\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<MsText, E> {
                Ok(MsText(v.to_string()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<MsText, E> {
                Ok(MsText(v.to_string()))
            }
        }
        d.deserialize_any(V)
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
/// listener (serde cannot combine `flatten` with `deny_unknown_fields`): the keys, their raw types
/// and their reading come from the settings table (`settings::tuning_table`).
macro_rules! with_tuning_keys {
    (
        $(#[$meta:meta])* struct $name:ident { $($(#[$fmeta:meta])* $f:ident : $fty:ty,)* } ;
        $(
            $(#[doc = $doc:literal])*
            $field:ident : $ty:ty = $default:expr,
                $variant:ident, $word:expr, $kty:ident $({ $($kbody:tt)* })?, $scope:ident, $explain:ident,
                $bounds:expr;
        )*
    ) => {
        $(#[$meta])*
        struct $name {
            $($(#[$fmeta])* $f: $fty,)*
            $( $field: Option<<settings::$kty as settings::Kind>::Raw>, )*
        }

        impl $name {
            /// The tuning keys set here; a value out of range is an error naming its line.
            fn tuning(&self, at: &dyn Fn(Range<usize>) -> String) -> Result<TuningPatch, ConfigError> {
                Ok(TuningPatch {
                    $( $field: self
                        .$field
                        .as_ref()
                        .map(|raw| {
                            settings::Kind::read(&settings::$kty $({ $($kbody)* })?, stringify!($field), raw)
                                .map_err(|(e, span)| ConfigError::usage(format!("{}{e}", at(span))))
                        })
                        .transpose()?, )*
                })
            }
        }
    };
}

/// Declares `RawFile` with the process-wide scalar keys of `settings::global_table` first, then
/// the keys given, then (through `with_tuning_keys`) the tuning keys; and reads the scalar keys
/// with their kinds.
macro_rules! with_global_keys {
    (
        $(#[$meta:meta])* struct $name:ident { $($(#[$fmeta:meta])* $f:ident : $fty:ty,)* } ;
        $(
            $(#[doc = $doc:literal])*
            $field:ident : $ty:ty = $default:expr, $kty:ident $({ $($kbody:tt)* })?,
                $explain:ident, $bounds:expr;
        )*
    ) => {
        settings::tuning_table! {
            with_tuning_keys
            $(#[$meta])*
            struct $name {
                $( $field: Option<<settings::$kty as settings::Kind>::Raw>, )*
                $($(#[$fmeta])* $f: $fty,)*
            }
        }

        impl $name {
            /// Sets the process-wide scalar keys given here; a value out of range is an error
            /// naming its line.
            fn global_scalars(
                &self,
                global: &mut Global,
                at: &dyn Fn(Range<usize>) -> String,
            ) -> Result<(), ConfigError> {
                $(
                    if let Some(raw) = &self.$field {
                        global.$field = settings::Kind::read(
                            &settings::$kty $({ $($kbody)* })?,
                            stringify!($field),
                            raw,
                        )
                        .map_err(|(e, span)| ConfigError::usage(format!("{}{e}", at(span))))?;
                    }
                )*
                Ok(())
            }
        }
    };
}

settings::global_table! {
    with_global_keys
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct RawFile {
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
        geoip: Option<Spanned<PathBuf>>,
        #[serde(default)]
        acl: std::collections::BTreeMap<String, Spanned<Vec<String>>>,
        health: Option<Spanned<RawHealth>>,
        slow_start: Option<Dur>,
        http: Option<Spanned<RawHttp>>,
        tls: Option<Spanned<RawTls>>,
        #[serde(default)]
        listener: Vec<RawListener>,
        #[serde(default)]
        pool: Vec<RawPool>,
    }
}

settings::tuning_table! {
    with_tuning_keys
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct RawListener {
        name: Spanned<String>,
        listen: Spanned<String>,
        mode: Option<Spanned<Vec<String>>>,
        hash_key: Option<Spanned<String>>,
        emergency: Option<Spanned<String>>,
        abuse: Option<Spanned<String>>,
        client_acl: Option<Spanned<u8>>,
        dsr_if: Option<String>,
        dsr_ip: Option<Spanned<String>>,
        dsr_wait: Option<Spanned<MsText>>,
        tarpit_acl: Option<Spanned<u8>>,
        health: Option<Spanned<RawHealth>>,
        slow_start: Option<Dur>,
        sticky_cookie: Option<Spanned<String>>,
        protocol: Option<Spanned<String>>,
        udp: Option<Spanned<udp_table::RawUdp>>,
        http: Option<Spanned<RawHttp>>,
        tls: Option<Spanned<RawTls>>,
        server_tls: Option<Spanned<RawServerTls>>,
        accept_proxy: Option<Spanned<Vec<String>>>,
        log: Option<Spanned<PathBuf>>,
        log_format: Option<Spanned<String>>,
        servers: Option<Spanned<RawServers>>,
        unknown_host: Option<Spanned<String>>,
        #[serde(default)]
        route: Vec<Spanned<RawRoute>>,
        #[serde(default)]
        site: Vec<Spanned<super::sites::RawSite>>,
    }
}

settings::tuning_table! {
    with_tuning_keys
    /// A `[[pool]]`: a listener's pool keys, without a socket.
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct RawPool {
        name: Spanned<String>,
        mode: Option<Spanned<Vec<String>>>,
        hash_key: Option<Spanned<String>>,
        emergency: Option<Spanned<String>>,
        health: Option<Spanned<RawHealth>>,
        slow_start: Option<Dur>,
        sticky_cookie: Option<Spanned<String>>,
        server_tls: Option<Spanned<RawServerTls>>,
        protocol: Option<Spanned<String>>,
        servers: Option<Spanned<RawServers>>,
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
mod http_tests {
    use super::*;
    use crate::config::settings::Fastclose;
    use quill_core::http1::rewrite::{EditOp, ForwardedFor};

    const LISTENER: &str =
        "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:8080\"\nservers = [\"127.0.0.1:9001\"]\n";

    fn load(text: &str) -> Result<Config, ConfigError> {
        from_toml("h.toml", text, &TuningPatch::default())
    }

    /// The error for `text`: one line starting with `h.toml:LINE: ` and containing `needle`.
    fn refused(text: &str, line: usize, needle: &str) {
        let e = load(text).expect_err("refused").message;
        assert!(
            e.starts_with(&format!("h.toml:{line}: ")),
            "{e:?} should start with h.toml:{line}:"
        );
        assert!(e.contains(needle), "{e:?} should contain {needle:?}");
        assert!(!e.contains('\n') && !e.contains('\r'), "one line: {e:?}");
    }

    #[test]
    fn the_agreed_example_loads_with_file_defaults_and_listener_overrides() {
        let c = load(
            r#"[http]
header_timeout = "10s"
keepalive_timeout = "60s"
body_timeout = "60s"
response_timeout = "60s"
tunnel_timeout = "1h"
server_keepalive = 64
server_idle_timeout = "4s"
max_body = "10m"
max_request_line = 8192
max_header_bytes = "16k"
max_headers = 100
forwarded_for = "append"
trusted_proxies = ["10.0.0.0/8", "127.0.0.1"]
x_forwarded_proto = true
x_forwarded_host = true
forwarded = false
via = "quill"
request_id = true
normalize_path = "match"
underscores_in_headers = false
request_headers = { remove = ["X-Debug"], set = { "X-Env" = "prod" }, add = { "X-A" = "1" } }
response_headers = { remove = ["Server"] }

[[listener]]
name = "web"
listen = "127.0.0.1:8080"
protocol = "http"
servers = ["127.0.0.1:9001", "127.0.0.1:9002"]
[listener.http]
response_timeout = "5s"

[[listener]]
name = "other"
listen = "127.0.0.1:8081"
protocol = "http"
servers = ["127.0.0.1:9001"]
[listener.http]
via = false
forwarded_for = "replace"
normalize_path = "forward"
underscores_in_headers = true
request_headers = { add = { "X-Other" = "yes" } }

[[listener]]
name = "plain"
listen = "127.0.0.1:8082"
protocol = "tcp"
servers = ["127.0.0.1:9001"]
"#,
        )
        .unwrap();
        let web = c.listeners[0].http().expect("web is HTTP");
        assert_eq!(web.response_timeout, Duration::from_secs(5));
        assert_eq!(web.header_timeout, Duration::from_secs(10));
        assert_eq!(web.tunnel_timeout, Duration::from_secs(3600));
        assert_eq!(web.max_body, Some(10 << 20));
        assert_eq!(web.max_header_bytes, 16 << 10);
        assert_eq!(web.max_request_line, 8192);
        assert_eq!(web.via.as_deref(), Some("quill"));
        assert_eq!(web.trusted_proxies.len(), 2);
        assert!(web.trusted_proxies[1].contains("127.0.0.1".parse().unwrap()));
        assert!(!web.trusted_proxies[1].contains("127.0.0.2".parse().unwrap()));
        assert!(web.trusted_proxies[0].contains("10.9.8.7".parse().unwrap()));
        let ops: Vec<(EditOp, &str, &str)> = web
            .request_headers
            .iter()
            .map(|e| (e.op, &*e.name, &*e.value))
            .collect();
        assert_eq!(
            ops,
            [
                (EditOp::Remove, "X-Debug", ""),
                (EditOp::Set, "X-Env", "prod"),
                (EditOp::Add, "X-A", "1")
            ]
        );
        assert_eq!(web.response_headers.len(), 1);
        let other = c.listeners[1].http().expect("other is HTTP");
        assert_eq!(other.via, None);
        assert_eq!(other.forwarded_for, ForwardedFor::Replace);
        assert_eq!(web.normalize_path, super::super::NormalizePath::Match);
        assert!(!web.underscores_in_headers);
        assert_eq!(other.normalize_path, super::super::NormalizePath::Forward);
        assert!(other.underscores_in_headers);
        let shown = other.differences().join("; ");
        assert!(shown.contains("underscores_in_headers true"), "{shown}");
        assert!(shown.contains("normalize_path forward"), "{shown}");
        assert_eq!(other.response_timeout, Duration::from_secs(60));
        // A list replaces the list it overrides.
        assert_eq!(other.request_headers.len(), 1);
        assert_eq!(other.max_body, Some(10 << 20));
        assert_eq!(c.listeners[2].http(), None);
    }

    #[test]
    fn a_listener_is_tcp_unless_it_says_http() {
        let c = load(&format!("[http]\nmax_body = 5\n{LISTENER}")).unwrap();
        assert_eq!(c.listeners[0].http(), None);
        let c = load(&format!("{LISTENER}protocol = \"http\"\n")).unwrap();
        assert_eq!(c.listeners[0].http(), Some(&HttpSettings::default()));
    }

    #[test]
    fn all_http_makes_every_listener_http_with_the_file_defaults() {
        let text = format!("[http]\nmax_body = \"1k\"\n{LISTENER}protocol = \"tcp\"\n");
        let c = from_toml_with("h.toml", &text, &TuningPatch::default(), true).unwrap();
        assert_eq!(c.listeners[0].http().unwrap().max_body, Some(1024));
    }

    #[test]
    fn listener_http_on_a_tcp_listener_is_refused_at_its_line() {
        refused(
            &format!("{LISTENER}[listener.http]\nresponse_timeout = \"5s\"\n"),
            5,
            "listener 'web': [listener.http] needs protocol = \"http\"",
        );
        refused(
            &format!("{LISTENER}protocol = \"tcp\"\nhttp = {{ max_headers = 5 }}\n"),
            6,
            "[listener.http] needs protocol",
        );
    }

    #[test]
    fn protocols_other_than_tcp_http_and_udp_are_refused() {
        let c = load(&format!("{LISTENER}protocol = \"udp\"\n")).unwrap();
        let udp = c.listeners[0].udp().cloned().unwrap();
        assert_eq!(udp, crate::config::model::UdpSettings::default());
        let c = load(&format!(
            "{LISTENER}protocol = \"udp\"\nudp = {{ flow_timeout = \"5s\", max_flows = 10, flow_responses = 1, max_flows_per_source = 3 }}\n"
        ))
        .unwrap();
        let udp = c.listeners[0].udp().cloned().unwrap();
        assert_eq!(
            (
                udp.flow_timeout,
                udp.max_flows,
                udp.flow_responses,
                udp.max_flows_per_source
            ),
            (std::time::Duration::from_secs(5), Some(10), 1, Some(3))
        );
        refused(
            &format!("{LISTENER}protocol = \"udp\"\nudp = {{ max_flows_per_source = 0 }}\n"),
            6,
            "udp: max_flows_per_source: 0 is out of range",
        );
        refused(
            &format!("{LISTENER}protocol = \"udp\"\nudp = {{ max_flows = 0 }}\n"),
            6,
            "udp: max_flows: 0 is out of range",
        );
        refused(
            &format!("{LISTENER}protocol = \"udp\"\nudp = {{ flow_timeout = \"soon\" }}\n"),
            6,
            "udp: flow_timeout:",
        );
        refused(
            &format!("{LISTENER}udp = {{ max_flows = 5 }}\n"),
            5,
            "[listener.udp] needs protocol = \"udp\"",
        );
        refused(
            &format!("{LISTENER}protocol = \"HTTP/2\"\n"),
            5,
            "invalid protocol 'HTTP/2' (expected tcp, http or udp)",
        );
    }

    #[test]
    fn tcp_fastclose_is_refused_on_an_http_listener_and_not_inherited_by_one() {
        refused(
            &format!("{LISTENER}protocol = \"http\"\ntcp_fastclose = \"both\"\n"),
            6,
            "tcp_fastclose: 'both' does not apply to HTTP listener 'web'",
        );
        let c = load(&format!(
            "tcp_fastclose = \"both\"\n{LISTENER}protocol = \"http\"\n\
             [[listener]]\nname = \"t\"\nlisten = \"127.0.0.1:8081\"\nservers = [\"127.0.0.1:9001\"]\n"
        ))
        .unwrap();
        assert_eq!(c.listeners[0].tuning.tcp_fastclose, Fastclose::Off);
        assert_eq!(c.listeners[1].tuning.tcp_fastclose, Fastclose::Both);
        // A control command cannot turn it on either (`validate` runs after every change).
        let mut l = c.listeners[0].clone();
        l.tuning.tcp_fastclose = Fastclose::Up;
        assert!(l.validate().unwrap_err().message.contains("tcp_fastclose"));
    }

    #[test]
    fn every_bad_value_names_its_key_value_and_line() {
        let http = |body: &str| format!("{LISTENER}protocol = \"http\"\n[listener.http]\n{body}\n");
        for (body, needle) in [
            ("max_body = \"10x\"", "max_body: invalid size '10x'"),
            ("max_body = -1", "max_body: -1 is not a size"),
            // A control character in a value is shown escaped: the message stays one line.
            ("max_body = \"1\\n2\"", "max_body: invalid size '1\\n2'"),
            (
                "body_timeout = \"1\\r2\"",
                "body_timeout: invalid duration '1\\r2'",
            ),
            (
                "trusted_proxies = [\"10.0.0.1\\n\"]",
                "trusted_proxies: '10.0.0.1\\n'",
            ),
            ("max_body = \"99999999999g\"", "max_body: invalid size"),
            (
                "max_header_bytes = true",
                "max_header_bytes: true is not a size",
            ),
            (
                "header_timeout = 0",
                "header_timeout: 0s must be more than 0",
            ),
            (
                "response_timeout = \"0ms\"",
                "response_timeout: 0s must be more than 0",
            ),
            (
                "body_timeout = \"3 days\"",
                "body_timeout: invalid duration '3 days'",
            ),
            (
                "tunnel_timeout = 2592001",
                "tunnel_timeout: 2592001 is not a duration",
            ),
            (
                "max_headers = 0",
                "max_headers: 0 is out of range (1 to 1000)",
            ),
            (
                "max_headers = 1001",
                "max_headers: 1001 is out of range (1 to 1000)",
            ),
            (
                "max_request_line = 255",
                "max_request_line: 255 is out of range (256 to 16384)",
            ),
            (
                "max_header_bytes = \"2m\"",
                "max_header_bytes: 2097152 is out of range (256 to 16384)",
            ),
            (
                "server_keepalive = -1",
                "server_keepalive: -1 is out of range",
            ),
            (
                "forwarded_for = \"add\"",
                "forwarded_for: invalid value \"add\"",
            ),
            (
                "trusted_proxies = [\"10.0.0.0/33\"]",
                "trusted_proxies: '10.0.0.0/33'",
            ),
            (
                "trusted_proxies = [\"example.com\"]",
                "trusted_proxies: 'example.com'",
            ),
            (
                "trusted_proxies = [1]",
                "trusted_proxies: [1] is not a list",
            ),
            ("via = \"two words\"", "via: invalid name 'two words'"),
            ("via = 3", "via: 3 is not a name"),
            (
                "request_id = \"yes\"",
                "request_id: \"yes\" is not true or false",
            ),
            (
                "normalize_path = \"both\"",
                "normalize_path: invalid value \"both\" (expected \"match\" or \"forward\")",
            ),
            (
                "underscores_in_headers = 1",
                "underscores_in_headers: 1 is not true or false",
            ),
            (
                "request_headers = { set = { \"X Y\" = \"1\" } }",
                "request_headers: 'X Y' is not a valid header name",
            ),
            (
                "request_headers = { add = { \"X-Y\" = \"a\\nb\" } }",
                "request_headers: the value of X-Y 'a\\nb' holds \\n",
            ),
            (
                "request_headers = { add = { \"X-Y\" = \"a\\u0000\" } }",
                "holds \\0",
            ),
            (
                "request_headers = { add = { \"X-Y\" = 1 } }",
                "request_headers: add X-Y = 1 is not a string",
            ),
            (
                "response_headers = { remove = \"Server\" }",
                "response_headers: remove = \"Server\" is not a list",
            ),
            (
                "response_headers = { set = { \"Transfer-Encoding\" = \"x\" } }",
                "Transfer-Encoding cannot be edited",
            ),
            (
                "response_headers = { put = { \"X\" = \"1\" } }",
                "unknown field `put`",
            ),
            ("retries = 3", "unknown field `retries`"),
        ] {
            refused(&http(body), 7, needle);
        }
        refused(
            &http("max_request_line = \"12k\"\nmax_header_bytes = \"8k\""),
            7,
            "max_request_line: 12288 is more than max_header_bytes 8192",
        );
        refused(
            &format!("[http]\nmax_header_bytes = \"8k\"\n{LISTENER}protocol = \"http\"\n[listener.http]\nmax_request_line = \"12k\"\n"),
            9,
            "max_request_line: 12288 is more than max_header_bytes 8192",
        );
        refused(
            &format!("[http]\nvia = \"a b\"\n{LISTENER}"),
            2,
            "via: invalid name",
        );
    }
}

#[cfg(test)]
mod robustness {
    use super::*;

    /// Mutated versions of the example file (bytes dropped, duplicated, flipped, lines cut) must
    /// give a configuration or an error naming `file:line`, never a panic.
    #[test]
    fn mutated_files_never_panic() {
        let example = include_str!("../../../examples/quill.toml");
        let mut rng = quill_core::rand::Rng::new(0x2545_f491_4f6c_dd1d);
        let mut next = move || rng.next_u64();
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
