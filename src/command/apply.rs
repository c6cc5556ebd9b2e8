//! Applying control commands to the model: one `Command` (from `-O`, a `-F` command file or the
//! control socket) changes a listener or the process-wide settings, and a command file (with the
//! files it includes) is read and parsed apart from being applied, since reading may be slow and
//! applying happens under the controller's lock.

use std::path::Path;

use crate::acl::Acl;
use crate::addr::{self, BackendAddr, ServerSpec};
use crate::config::model::{
    in_range, Config, ConfigError, Global, ListenerConfig, DSR_IP_NEEDS_IF, DSR_WAIT_NEEDS_IF,
    MAX_SESSIONS, MAX_WEIGHT,
};
use crate::config::read_config_text;
use crate::tls::{FileData, TlsVersion};

use super::{Command, SslCommand};

impl ListenerConfig {
    /// Applies one control command (from `-O`, a command file or the control socket).
    pub(crate) fn apply(&mut self, cmd: &Command, global: &mut Global) -> Result<(), ConfigError> {
        let t = &mut self.tuning;
        match cmd {
            Command::Mode(word, on) => self.mode.set(*word, *on),
            Command::Tune(tune) => tune.apply(t).map_err(ConfigError::usage)?,
            Command::ConnMax(0) => {
                return Err(ConfigError::usage(
                    "conn_max: must be at least 1 (0 would refuse every client)",
                ))
            }
            Command::ConnMax(n) => {
                in_range("conn_max", (*n).into(), 1..=MAX_SESSIONS.into())
                    .map_err(ConfigError::usage)?;
                global.max_connections = Some(*n)
            }
            Command::DsrIf(_)
            | Command::DsrIp(_)
            | Command::DsrWait(_)
            | Command::TarpitAcl(_)
            | Command::Http(_) => self.apply_kind(cmd)?,
            Command::Server(index, change) => self.change_server(*index, change)?,
            Command::ServerAdd(spec) => {
                let spec = addr::parse_server(spec, self.listen.port())
                    .map_err(|e| ConfigError::from_addr(e, "server add: "))?;
                self.servers.push(spec);
            }
            Command::ServerRemove(index) => {
                if *index >= self.servers.len() {
                    return Err(self.no_such_server(*index));
                }
                self.servers.remove(*index);
                self.initial_blacklist.retain(|(i, _)| i != index);
                for (i, _) in &mut self.initial_blacklist {
                    if *i > *index {
                        *i -= 1;
                    }
                }
            }
            Command::Acl(n, entry) => global.acls[*n].entries.push(*entry),
            Command::NoAcl(n) => global.acls[*n] = Acl::default(),
            Command::ClientAcl(n) => self.client_acl = *n,
            Command::ControlAcl(n) => global.control_acl = *n,
            Command::Log(path) => global.log = path.clone(),
            Command::WebStats(path) => global.status_file = path.clone(),
            Command::Debug(n) => global.debug = *n,
            Command::Listen(text) => {
                self.listen =
                    addr::parse_listen(text).map_err(|e| ConfigError::from_addr(e, "listen: "))?;
            }
            Command::Ssl(ssl) => self.apply_ssl(ssl)?,
        }
        Ok(())
    }

    /// The commands that change the listener's kind (see `ListenerConfig::make_http` and
    /// `set_dsr_if`): a change that would mix two kinds is refused, naming the listener.
    fn apply_kind(&mut self, cmd: &Command) -> Result<(), ConfigError> {
        let changed = match cmd {
            // An HTTP listener stays as it is, with its settings (`http` twice changes nothing).
            Command::Http(true) => self.make_http(),
            Command::Http(false) => return self.no_http(),
            Command::DsrIf(name) => self.set_dsr_if(name.clone()),
            Command::DsrIp(ip) => self.set_dsr(ip.is_some(), DSR_IP_NEEDS_IF, |d| d.ip = *ip),
            Command::TarpitAcl(n) => {
                self.set_dsr(n.is_some(), DSR_IP_NEEDS_IF, |d| d.tarpit_acl = *n)
            }
            Command::DsrWait(w) => self.set_dsr(w.is_some(), DSR_WAIT_NEEDS_IF, |d| d.wait = *w),
            _ => Ok(()),
        };
        changed.map_err(|why| ConfigError::usage(format!("{}: {why}", self.what())))
    }

    /// `no http`: back to TCP, unless the listener has routes (only HTTP can route).
    fn no_http(&mut self) -> Result<(), ConfigError> {
        if !self.routes.is_empty() {
            return Err(ConfigError::usage(format!(
                "no http: listener '{}' has routes, which need HTTP (remove them from its configuration first)",
                self.name
            )));
        }
        self.make_tcp();
        Ok(())
    }

    fn no_such_server(&self, index: usize) -> ConfigError {
        ConfigError::usage(format!(
            "server {index}: no such server (servers are numbered 0 to {})",
            self.servers.len().saturating_sub(1)
        ))
    }

    fn change_server(
        &mut self,
        index: usize,
        change: &crate::command::ServerChange,
    ) -> Result<(), ConfigError> {
        if index > self.servers.len() {
            return Err(ConfigError::usage(format!(
                "server {index}: no such server (there are {}; a new one must be number {})",
                self.servers.len(),
                self.servers.len()
            )));
        }
        let default_port = self.listen.port();
        if index == self.servers.len() {
            let Some(address) = &change.address else {
                return Err(ConfigError::usage(format!(
                    "server {index}: a new server needs an address"
                )));
            };
            let addr =
                addr::parse_server_address(&bracket_ipv6(address), change.port.or(default_port))
                    .map_err(|e| ConfigError::from_addr(e, &format!("server {index}: ")))?;
            self.servers.push(ServerSpec::new(addr));
        } else if let Some(address) = &change.address {
            let port = change.port.or(match self.servers[index].addr {
                BackendAddr::Tcp(a) => Some(a.port()),
                _ => default_port,
            });
            self.servers[index].addr = addr::parse_server_address(&bracket_ipv6(address), port)
                .map_err(|e| ConfigError::from_addr(e, &format!("server {index}: ")))?;
        } else if let Some(port) = change.port {
            if let BackendAddr::Tcp(a) = &mut self.servers[index].addr {
                a.set_port(port);
            }
        }
        for (name, v, most) in [
            ("max", change.max, MAX_SESSIONS),
            ("hard", change.hard, MAX_SESSIONS),
            ("weight", change.weight, MAX_WEIGHT),
            ("prio", change.prio, MAX_WEIGHT),
        ] {
            if let Some(v) = v {
                in_range(&format!("server {index} {name}"), v.into(), 0..=most.into())
                    .map_err(ConfigError::usage)?;
            }
        }
        let s = &mut self.servers[index];
        s.max = change.max.unwrap_or(s.max);
        s.hard = change.hard.unwrap_or(s.hard);
        s.weight = change.weight.unwrap_or(s.weight);
        s.prio = change.prio.unwrap_or(s.prio);
        s.acl = change.acl.unwrap_or(s.acl);
        s.state = change.state.unwrap_or(s.state);
        if let Some(d) = change.blacklist {
            self.initial_blacklist.push((index, d));
        }
        Ok(())
    }
}

/// `server N address ::1` names a bare IPv6 address (as Pen and `write` do); the server syntax
/// needs it in brackets to tell it from `HOST:PORT`.
fn bracket_ipv6(address: &str) -> String {
    if address.parse::<std::net::Ipv6Addr>().is_ok() {
        format!("[{address}]")
    } else {
        address.to_string()
    }
}

impl Config {
    /// Applies one setting command. `listener` names the pool for pool settings; it may be left
    /// out when there is only one listener.
    pub(crate) fn apply(
        &mut self,
        listener: Option<&str>,
        cmd: &Command,
    ) -> Result<(), ConfigError> {
        let index = match listener {
            Some(name) => self
                .listeners
                .iter()
                .position(|l| l.name == name)
                .ok_or_else(|| ConfigError::usage(format!("no listener named '{name}'")))?,
            None if self.listeners.len() == 1 || cmd.is_global() => 0,
            None => {
                return Err(ConfigError::usage(format!(
                    "there are {} listeners: say which with 'listener NAME' first",
                    self.listeners.len()
                )))
            }
        };
        let Some(l) = self.listeners.get_mut(index) else {
            return Err(ConfigError::usage("no listener to apply the command to"));
        };
        if let (Some(_), Command::Log(path)) = (listener, cmd) {
            // `listener NAME log FILE`: that listener's own file; `listener NAME no log`: back
            // to the process-wide one.
            l.log = path.clone();
            return Ok(());
        }
        l.apply(cmd, &mut self.global)
    }

    /// Applies one pool command to the named pool `name` (`pool NAME server 1 drain`): what a
    /// listener's pool takes, less the process-wide settings, `listen`, `client_acl` (the
    /// listener's, or a route's, checks the client) and `http` (the listener's decides).
    pub(crate) fn apply_pool(&mut self, name: &str, cmd: &Command) -> Result<(), ConfigError> {
        if cmd.is_global()
            || matches!(
                cmd,
                Command::Listen(_) | Command::ClientAcl(_) | Command::Http(_)
            )
        {
            return Err(ConfigError::usage(format!(
                "pool '{name}': that is not a pool setting"
            )));
        }
        let Some(p) = self.pools.iter_mut().find(|p| p.name == name) else {
            return Err(ConfigError::usage(format!("no pool named '{name}'")));
        };
        p.apply(cmd, &mut self.global)
    }

    /// Applies a command to a listener (`listener NAME`, or the only one) or a named pool.
    pub(crate) fn apply_to(
        &mut self,
        listener: Option<&str>,
        pool: Option<&str>,
        cmd: &Command,
    ) -> Result<(), ConfigError> {
        match pool {
            Some(name) => self.apply_pool(name, cmd),
            None => self.apply(listener, cmd),
        }
    }

    /// Reads control commands from a file (`-F`, and `include` lines in it): one per line, `#`
    /// starts a comment. Lines may start with `listener NAME` or `pool NAME`. Errors name `FILE:LINE` and the
    /// offending word: this is the operator's own file. `depth` counts the includes above it.
    pub(crate) fn apply_file(&mut self, path: &Path, depth: u32) -> Result<(), ConfigError> {
        let file = CommandFile::read_at(path, Quoting::Words, depth)?;
        self.apply_commands(&file)
    }

    /// Applies the commands of a file read beforehand (see [`CommandFile::read`]), in order. On an
    /// error part of them may be applied: callers apply to a copy and drop it.
    pub(crate) fn apply_commands(&mut self, file: &CommandFile) -> Result<(), ConfigError> {
        for c in &file.commands {
            self.apply_to(c.listener.as_deref(), c.pool.as_deref(), &c.command)
                .map_err(|e| file.error(&c.at, e.message, "the command was refused"))?;
        }
        Ok(())
    }
}

/// Whether errors about a command file may quote its lines. The operator's own files (`-F`)
/// may: the message names the offending word. A file named at runtime (`include` over the control
/// socket) may not: it can be any file Quill can read (/etc/shadow), and its content must never
/// come back in a reply. Its errors say only `FILE:LINE:` and what kind of line it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Quoting {
    Words,
    Never,
}

/// The setting commands of a command file and of the files it includes, read and parsed but not
/// applied yet: reading (which may be slow) and applying (under the controller's lock) are apart.
#[derive(Debug)]
pub(crate) struct CommandFile {
    commands: Vec<FileCommand>,
    quoting: Quoting,
}

#[derive(Debug)]
struct FileCommand {
    /// `FILE:LINE`, for messages.
    at: String,
    listener: Option<String>,
    pool: Option<String>,
    command: Command,
}

/// How deep `include` lines may nest.
const MAX_INCLUDE_DEPTH: u32 = 8;

impl CommandFile {
    /// Reads and parses the file at `path` and every file it includes (relative to its directory).
    /// Each file is read as [`read_config_text`] reads it.
    pub(crate) fn read(path: &Path, quoting: Quoting) -> Result<CommandFile, ConfigError> {
        CommandFile::read_at(path, quoting, 0)
    }

    fn read_at(path: &Path, quoting: Quoting, depth: u32) -> Result<CommandFile, ConfigError> {
        let mut file = CommandFile {
            commands: Vec::new(),
            quoting,
        };
        file.read_lines(path, depth)?;
        Ok(file)
    }

    fn read_lines(&mut self, path: &Path, depth: u32) -> Result<(), ConfigError> {
        use crate::command::{parse_request, Action};
        if depth > MAX_INCLUDE_DEPTH {
            return Err(ConfigError::usage(format!(
                "{}: includes nested too deep",
                path.display()
            )));
        }
        let text = read_config_text(path)?;
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let at = format!("{}:{}", path.display(), n + 1);
            let req =
                parse_request(line).map_err(|e| self.error(&at, e.0, "not a control command"))?;
            match req.action {
                Action::Set(command) => self.commands.push(FileCommand {
                    at,
                    listener: req.listener,
                    pool: req.pool,
                    command,
                }),
                Action::Include(file) => {
                    let file = path.parent().map_or(file.clone(), |dir| dir.join(&file));
                    // The name comes from this file: in its place say only where it failed.
                    self.read_lines(&file, depth + 1)
                        .map_err(|e| match self.quoting {
                            Quoting::Words => e,
                            Quoting::Never => ConfigError::usage(format!(
                                "{at}: the file it includes was refused"
                            )),
                        })?;
                }
                _ => {
                    let why = format!("'{line}' is not a setting");
                    return Err(self.error(&at, why, "not a setting"));
                }
            }
        }
        Ok(())
    }

    /// An error at `at` (`FILE:LINE`): `detail` when the file may be quoted, else `plain`.
    fn error(&self, at: &str, detail: String, plain: &str) -> ConfigError {
        ConfigError::usage(match self.quoting {
            Quoting::Words => format!("{at}: {detail}"),
            Quoting::Never => format!("{at}: {plain}"),
        })
    }
}

impl ListenerConfig {
    /// Pen's `ssl_*` commands: the listener's TLS termination changed, then built as its pool
    /// will build it, so a bad file or a suite list that leaves no usable suite is refused here
    /// and the listener keeps what it had. Files are read now (they are small and bounded).
    fn apply_ssl(&mut self, cmd: &SslCommand) -> Result<(), ConfigError> {
        let what = self.what();
        let http = self.is_http();
        let refused = |why: String| ConfigError::usage(format!("{}: {what}: {why}", cmd.name()));
        let Some(tls) = self.stream_mut().and_then(|s| s.tls.as_mut()) else {
            return Err(refused(
                "no TLS termination here (start it with -E CERTFILE, or give it tls = { ... })"
                    .into(),
            ));
        };
        let mut next = tls.clone();
        match cmd {
            SslCommand::Ciphers(list) => next.ciphers = list.clone(),
            SslCommand::NoTls12 => next.min_version = TlsVersion::V1_3,
            SslCommand::ServerPreference => next.server_cipher_order = true,
            SslCommand::ClientPreference => next.server_cipher_order = false,
            SslCommand::AlwaysOff(_) | SslCommand::RenegotiationInterval(_) => return Ok(()),
            SslCommand::SniPath(dir) => {
                // Again with the same directory (a command file applied on every reload) reads
                // it afresh instead of adding its certificates twice.
                if let Some(old) = &next.sni_path {
                    next.certs.retain(|c| !c.cert.path.starts_with(old));
                }
                let found =
                    crate::tls::certs::read_sni_dir(dir).map_err(|e| refused(e.to_string()))?;
                next.certs.extend(found);
                next.sni_path = Some(dir.clone());
            }
            SslCommand::OcspResponse(path) => {
                let staple = FileData::read(path).map_err(|e| refused(e.to_string()))?;
                let default = next.certs.iter().position(|c| c.default).unwrap_or(0);
                let Some(cert) = next.certs.get_mut(default) else {
                    return Err(refused("no certificate".into()));
                };
                cert.ocsp = Some(staple);
            }
        }
        crate::tls::build_server(&next, http, &crate::tls::tickets::shared_keys())
            .map_err(|e| refused(e.to_string().trim_start_matches("tls: ").to_string()))?;
        *tls = next;
        Ok(())
    }
}
