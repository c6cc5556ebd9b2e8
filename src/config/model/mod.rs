//! The configuration model: what every listener accepts on, its pool, its selection mode and its
//! timeouts, plus process-wide settings; the bounds every number is held to, and `validate`, which
//! checks a whole configuration. Pure data and checks: the loaders (`toml`, `apply`) build it, the
//! writers (`write`, `explain`) read it, and none of them is needed to use it.
//!
//! One file per part: `bounds` (every `MAX_*` and the range checks), `global` (process-wide
//! settings, control levels, access log formats), `listener` (`ListenerConfig`, `UdpSettings`,
//! per-listener checks), `health` (`HealthCheck`), `http`
//! (`HttpSettings`, `RouteConfig` and its matchers), `site` (`SiteConfig`, `UnknownHost`), `grammar` (the `parse_*` helpers of setting
//! values) and `self_loop`; `Config`, its errors and `validate` are here. Everything is
//! re-exported here, so `model::X` names any of it, with `Tuning` and `TuningPatch`, which
//! `settings` generates from its table.

mod bounds;
mod discovery;
mod global;
mod grammar;
mod health;
mod http;
mod kind;
mod listener;
mod self_loop;
mod site;
#[cfg(test)]
mod tests;
mod web;

pub(crate) use crate::config::settings::{
    proxy_protocol_name, Fastclose, ProxyVersion, Tuning, TuningPatch,
};
pub(crate) use bounds::*;
pub(crate) use discovery::*;
pub(crate) use global::*;
pub(crate) use grammar::*;
pub(crate) use health::*;
pub(crate) use http::*;
pub(crate) use kind::*;
pub(crate) use listener::*;
pub(crate) use self_loop::*;
pub(crate) use site::*;
pub(crate) use web::*;

use std::path::PathBuf;

use crate::acl::AclId;
use crate::addr::{AddrError, ListenAddr};

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

impl Config {
    /// Whether a listener has a route serving static files.
    pub(crate) fn has_static_root(&self) -> bool {
        self.listeners
            .iter()
            .flat_map(|l| &l.routes)
            .any(|r| matches!(r.action, RouteAction::Static(_)))
    }

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
        let dsr = self.listeners.iter().filter(|l| l.dsr().is_some()).count();
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
                let (name, fastcgi) = match &r.action {
                    RouteAction::Pool(name) => (name, false),
                    RouteAction::Fastcgi(f) => (&f.pool, true),
                    _ => continue,
                };
                let why = match self.pools.iter().find(|p| &p.name == name) {
                    None => format!("no pool named '{name}'"),
                    Some(p) if p.fastcgi && !fastcgi => {
                        format!("pool '{name}' speaks FastCGI: send to it with a fastcgi action")
                    }
                    Some(p) if !p.fastcgi && fastcgi => {
                        format!("fastcgi: pool '{name}' is not a FastCGI pool")
                    }
                    Some(_) => continue,
                };
                return Err(ConfigError::usage(format!(
                    "listener '{}': route '{}': {why}",
                    l.name, r.name
                )));
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
        let (format, kind) = self.log_kind(l);
        Some(ListenerLog {
            path: path.clone(),
            format,
            kind,
            own: l.log.is_some(),
        })
    }

    /// Where the lines of site `site` of listener `l` go when it has its own `log`: that file,
    /// in the listener's format (None: the site has no file of its own).
    pub(crate) fn site_log(&self, l: &ListenerConfig, site: &SiteConfig) -> Option<ListenerLog> {
        let (format, kind) = self.log_kind(l);
        Some(ListenerLog {
            path: site.log.clone()?,
            format,
            kind,
            own: true,
        })
    }

    /// The format listener `l` logs in (its own, else the process-wide one) and its lines'
    /// kind.
    fn log_kind(&self, l: &ListenerConfig) -> (LogFormat, LineKind) {
        let format = l.log_format.unwrap_or(self.global.log_format);
        let kind = match (format, l.http().is_some()) {
            (LogFormat::Json, _) => LineKind::Json,
            (LogFormat::Text, true) => LineKind::Combined,
            (LogFormat::Text, false) => LineKind::Pen,
        };
        (format, kind)
    }

    /// [`Config::log_mix`] for the sites' own files (`logs`: each listener's file): a site's file
    /// that another listener or site writes another kind of line into.
    fn site_log_mix(&self, logs: &[Option<ListenerLog>]) -> Option<(usize, String)> {
        let mut sites: Vec<(String, ListenerLog)> = Vec::new();
        for (i, l) in self.listeners.iter().enumerate() {
            for site in &l.sites {
                let Some(mine) = self.site_log(l, site) else {
                    continue;
                };
                let listeners =
                    self.listeners.iter().zip(logs).filter_map(|(o, log)| {
                        Some((format!("listener '{}'", o.name), log.as_ref()?))
                    });
                let earlier = sites.iter().map(|(who, log)| (who.clone(), log));
                for (who, theirs) in listeners.chain(earlier) {
                    if mine.kind != theirs.kind && same_log_file(&mine.path, &theirs.path) {
                        return Some((
                            i,
                            format!(
                                "site '{}' of listener '{}' would write {} into access log {}, where {who} writes {}: one file holds one format: give the site another file",
                                site.name,
                                l.name,
                                mine.kind.describe(),
                                mine.path.display(),
                                theirs.kind.describe(),
                            ),
                        ));
                    }
                }
                sites.push((
                    format!("site '{}' of listener '{}'", site.name, l.name),
                    mine,
                ));
            }
        }
        None
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
        self.site_log_mix(&logs)
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
}
