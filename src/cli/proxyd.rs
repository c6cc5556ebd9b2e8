//! systemd-socket-proxyd's form: sockets passed by systemd and one positional argument, the
//! server they all forward to.

use std::time::Duration;

use super::{addr_error, Cli};
use crate::addr;
use crate::command::ModeWord;
use crate::config::{self, Config, ConfigError, ErrorKind, Global, ListenerConfig, ListenerKind};

/// socket-proxyd's form: sockets passed by systemd, exactly one positional argument (the server),
/// neither `-F` nor `--config`.
pub(super) fn is_proxyd_form(cli: &Cli) -> bool {
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
pub(super) fn proxyd_config(
    cli: &Cli,
) -> Result<(Config, Vec<crate::systemd::Inherited>), ConfigError> {
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
