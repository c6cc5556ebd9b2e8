//! Pen's form (`quill [OPTIONS] [HOST:]PORT SERVER...`) and `--config` turned into a `Config`:
//! the TLS flags (`-E`, `-K`, `-G`, `-A`, `-R`, `-L`), the command-line values patched over the
//! global settings and each listener (health checks, `-O` commands), and `build_config`.

use std::path::PathBuf;

use super::{addr_error, Cli};
use crate::addr;
use crate::command::{self, ModeWord};
use crate::config::model::HashKey;
use crate::config::{self, Config, ConfigError, Global, ListenerConfig, ListenerKind, TuningPatch};
use crate::tls::{CertFiles, ClientAuth, FileData, TlsSettings, TlsVersion};

/// Pen's TLS options: termination on the listener of the command line.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct PenTls {
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
    pub(super) compat: bool,
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
    pub(super) fn settings(&self) -> Result<Option<TlsSettings>, ConfigError> {
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

impl Cli {
    pub(super) fn tuning_patch(&self) -> TuningPatch {
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
    pub(super) fn patch_global(&self, g: &mut Global) {
        if let Some(n) = self.workers {
            g.workers = n;
        }
        g.max_connections = self.max_connections.or(g.max_connections);
        g.backlog = self.backlog.unwrap_or(g.backlog);
        g.accept_batch = self.accept_batch.unwrap_or(g.accept_batch).max(1);
        g.drain_timeout = self.drain_timeout.unwrap_or(g.drain_timeout);
        g.tfo &= !self.no_tfo;
        g.reuseport |= self.reuseport;
        g.listen_per_worker |= self.listen_per_worker;
        g.splice &= !self.no_splice;
        g.concentrate &= !self.no_concentrate;
        g.accept = self.accept.unwrap_or(g.accept);
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
    pub(super) fn patch_global_checked(&self, g: &mut Global) -> Result<(), ConfigError> {
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
            (self.maglev, ModeWord::Maglev),
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
        self.patch_hash_key(l)
    }

    /// `--hash-key`, after the mode words and `-O` commands (`-O maglev` counts): a header or
    /// cookie is Maglev's key, so it needs `maglev`; the listener's kind is checked with the
    /// rest of the listener (it needs HTTP).
    fn patch_hash_key(&self, l: &mut ListenerConfig) -> Result<(), ConfigError> {
        let Some(text) = &self.hash_key else {
            return Ok(());
        };
        let key = config::http::parse_hash_key(text)
            .map_err(|e| ConfigError::usage(format!("--hash-key: {e}")))?;
        if key != HashKey::Client && !l.mode.maglev {
            return Err(ConfigError::usage(format!(
                "--hash-key {key}: the key of Maglev hashing: add --maglev"
            )));
        }
        l.hash_key = key;
        Ok(())
    }
}

/// Builds the configuration from `--config` or the Pen form.
pub(super) fn build_config(cli: &Cli) -> Result<Config, ConfigError> {
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
                // `srv:NAME[@RESOLVER]` and `dns:NAME:PORT[@RESOLVER]`: the pool follows DNS, and
                // is then its only server argument.
                if let Some(d) = config::model::parse_discovery_arg(s) {
                    let d = d.map_err(|e| ConfigError::usage(format!("server '{s}': {e}")))?;
                    if cli.servers.len() > 1 {
                        return Err(ConfigError::usage(format!(
                            "server '{s}': a pool found in DNS takes no other server arguments"
                        )));
                    }
                    l.discovery = Some(d);
                    continue;
                }
                l.servers.push(addr::parse_server(s, l.listen.port()).map_err(|e| addr_error(e, ""))?);
            }
            let mut global = Global::default();
            cli.patch_listener(&mut l, &mut global)?;
            if l.servers.is_empty() && l.discovery.is_none() && l.emergency.is_none() && cli.command_file.is_none() {
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
