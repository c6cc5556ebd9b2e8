//! `quill check`'s explanation: what a configuration does, in plain words.

use crate::addr::{AdminState, ListenAddr};

use super::model::{format_duration, Config};
use super::write::server_limits;

impl Config {
    /// A human explanation of what this configuration does (for `quill check`).
    pub(crate) fn explain(&self) -> String {
        let g = &self.global;
        let mut out = format!(
            "{} listener(s), {} worker(s), max connections {}, backlog {}, drain timeout {}\n",
            self.listeners.len(),
            g.workers,
            g.max_connections
                .map_or("from the open-file limit".to_string(), |n| n.to_string()),
            g.backlog,
            format_duration(g.drain_timeout)
        );
        if let Some(c) = &g.control {
            let level = match c {
                ListenAddr::Unix(_) => "admin (Unix socket)".to_string(),
                ListenAddr::Tcp(_) => format!("control_level {}", g.control_level.name()),
            };
            out += &format!(
                "control socket {c}: {level}{}, {}\n",
                g.control_acl
                    .map_or(String::new(), |n| format!(", control_acl {n}")),
                if g.control_token_file.is_some() {
                    "token required (control_token_file)"
                } else {
                    "no token"
                }
            );
        }
        if let Some(f) = &g.command_file {
            out += &format!(
                "command file {} (applied at start and on every reload)\n",
                f.display()
            );
        }
        if let Some(a) = &g.admin {
            out += &format!(
                "admin listener http://{a}/ (metrics at /metrics), {}\n",
                if g.admin_token_file.is_some() {
                    "token required (admin_token_file)"
                } else {
                    "no token"
                }
            );
        }
        for (n, acl) in g.acls.iter().filter(|(_, a)| !a.entries.is_empty()) {
            let entries: Vec<String> = acl.entries.iter().map(|e| e.to_string()).collect();
            out += &format!("acl {n}: {}\n", entries.join(", "));
        }
        for l in &self.listeners {
            let t = &l.tuning;
            out += &format!(
                "listener '{}' on {}: mode {}; connect timeout {}, blacklist {}, idle timeout {}, fin timeout {}\n",
                l.name,
                l.listen,
                l.mode,
                format_duration(t.connect_timeout),
                format_duration(t.blacklist),
                format_duration(t.idle_timeout),
                format_duration(t.fin_timeout)
            );
            out += &format!(
                "  clients tracked: {}, sessions per client address: {}\n",
                t.clients_max,
                match t.max_per_source {
                    0 => "no limit".to_string(),
                    n => n.to_string(),
                }
            );
            if let Some(h) = &l.http {
                let changed = h.differences();
                out += &if changed.is_empty() {
                    "  HTTP listener (protocol http), every HTTP setting at its default\n"
                        .to_string()
                } else {
                    format!(
                        "  HTTP listener (protocol http), settings that differ from the defaults: {}\n",
                        changed.join("; ")
                    )
                };
            }
            for (i, s) in l.servers.iter().enumerate() {
                let state = match s.state {
                    AdminState::Enabled => String::new(),
                    other => format!(" ({})", other.name()),
                };
                out += &format!("  server {i}: {} {}{state}\n", s.addr, server_limits(s));
            }
            if let Some(e) = &l.emergency {
                out += &format!("  emergency: {e}\n");
            }
            if let Some(h) = &l.health {
                out += &format!("  health check: {h}\n");
            }
            if !l.slow_start.is_zero() {
                out += &format!("  slow start: {}\n", format_duration(l.slow_start));
            }
            if let Some(n) = l.client_acl {
                if g.acls[n].entries.is_empty() {
                    out += &format!("  note: client acl {n} is empty, so it permits everyone\n");
                }
                out += &format!(
                    "  client acl {n}, denied clients go to {}\n",
                    l.abuse
                        .as_ref()
                        .map_or("nowhere (closed)".to_string(), |a| a.to_string())
                );
            }
        }
        out
    }
}
