//! A setting's current value (`mode`, `timeout`, `pool NAME blacklist`, ...), as text and JSON.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{json, Value};

use super::{Answer, Failure, Reply};
use crate::acl::AclId;
use crate::command::Setting;
use crate::config::{Config, ListenerConfig};
use crate::state::controller::Controller;

/// Whose setting is shown.
#[derive(Clone, Copy)]
pub(super) enum Target<'a> {
    /// A listener by name, or the only one.
    Listener(Option<&'a str>),
    /// A named pool.
    Pool(&'a str),
}

/// The listener (or named pool) `target` names in `config`.
fn pick<'a>(config: &'a Config, target: Target<'_>) -> Result<&'a ListenerConfig, Failure> {
    match target {
        Target::Pool(n) => config
            .pools
            .iter()
            .find(|p| p.name == n)
            .ok_or_else(|| Failure::NoPool(n.to_string())),
        Target::Listener(Some(n)) => config
            .listeners
            .iter()
            .find(|l| l.name == n)
            .ok_or_else(|| Failure::NoListener(n.to_string())),
        Target::Listener(None) => match config.listeners.as_slice() {
            [only] => Ok(only),
            all => Err(Failure::listener(
                None,
                all.iter().map(|l| l.name.clone()).collect(),
            )),
        },
    }
}

/// The current value of `setting`, as text (one line, or one per ACL entry) and JSON.
pub(super) fn show(setting: Setting, target: Target<'_>, controller: &Controller) -> Answer {
    let config = controller.config();
    let (text, value) = match setting {
        Setting::ConnMax => {
            let n = controller.shared().max_sessions.load(Ordering::Relaxed);
            (n.to_string(), json!(n))
        }
        Setting::ControlAcl => opt_num(config.global.control_acl),
        Setting::Acl(n) => {
            let lines: Vec<String> = config.global.acls[n]
                .entries
                .iter()
                .map(|e| e.to_string())
                .collect();
            (lines.join("\n"), json!(lines))
        }
        Setting::Log => opt_path(&config.global.log),
        Setting::WebStats => opt_path(&config.global.status_file),
        Setting::Debug => (config.global.debug.to_string(), json!(config.global.debug)),
        Setting::Control => match &config.global.control {
            Some(a) => (a.to_string(), json!(a.to_string())),
            None => ("none".to_string(), Value::Null),
        },
        _ => of_listener(setting, pick(&config, target)?),
    };
    Ok(Reply::new(format!("{text}\n"), value))
}

/// A setting of listener (or named pool) `l`.
fn of_listener(setting: Setting, l: &ListenerConfig) -> (String, Value) {
    let t = &l.tuning;
    match setting {
        Setting::Blacklist => dur(t.blacklist),
        Setting::Timeout => dur(t.connect_timeout),
        Setting::Tracking => dur(t.tracking_time),
        Setting::IdleTimeout => dur(t.idle_timeout),
        Setting::ClientsMax => (t.clients_max.to_string(), json!(t.clients_max)),
        Setting::MaxPerSource => (t.max_per_source.to_string(), json!(t.max_per_source)),
        Setting::Source => {
            let s = t.source.map(|ip| ip.to_string());
            (s.clone().unwrap_or_else(|| "none".into()), json!(s))
        }
        Setting::TcpFastclose => {
            let f = t.tcp_fastclose.name();
            (f.to_string(), json!(f))
        }
        Setting::ProxyProtocol => {
            let v = crate::config::proxy_protocol_name(t.proxy_protocol);
            (v.to_string(), json!(v))
        }
        Setting::Mode => {
            // Pen's flags; `http` after them on an HTTP listener, as Pen's `http` sets it.
            let m = match l.http() {
                Some(_) => format!("{} http", l.mode),
                None => l.mode.to_string(),
            };
            (m.clone(), json!(m))
        }
        Setting::ClientAcl => opt_num(l.client_acl),
        Setting::Listen => {
            let a = l.listen.to_string();
            (a.clone(), json!(a))
        }
        // Process-wide: answered by `show` before a listener is picked.
        Setting::ConnMax
        | Setting::ControlAcl
        | Setting::Acl(_)
        | Setting::Log
        | Setting::WebStats
        | Setting::Debug
        | Setting::Control => ("none".to_string(), Value::Null),
    }
}

fn dur(d: Duration) -> (String, Value) {
    (d.as_secs().to_string(), json!(d.as_secs_f64()))
}

fn opt_path(p: &Option<PathBuf>) -> (String, Value) {
    match p {
        Some(p) => (p.display().to_string(), json!(p)),
        None => ("none".to_string(), Value::Null),
    }
}

fn opt_num(n: Option<AclId>) -> (String, Value) {
    match n {
        Some(n) => (n.to_string(), json!(n)),
        None => ("none".to_string(), Value::Null),
    }
}
