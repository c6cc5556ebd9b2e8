//! `quill check`'s explanation: what a configuration does, in plain words.

use crate::addr::{AdminState, ListenAddr};

use super::model::{format_duration, Config, ListenerConfig, PathMatch, RouteConfig, ValueMatch};
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
        for p in &self.pools {
            out += &format!("pool '{}': mode {}\n", p.name, p.mode);
            explain_pool(p, &mut out);
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
            for r in &l.routes {
                out += &format!("  {}\n", explain_route(r));
            }
            if !l.routes.is_empty() {
                out += &if l.servers.is_empty() && l.emergency.is_none() && l.http.is_none() {
                    "  no route matched: closed (the listener has no servers)\n".to_string()
                } else if l.servers.is_empty() && l.emergency.is_none() {
                    "  no route matched: 404 (the listener has no servers)\n".to_string()
                } else {
                    "  no route matched: the listener's own servers\n".to_string()
                };
            }
            explain_pool(l, &mut out);
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

/// The servers, emergency server, health check and slow start of a listener or named pool.
fn explain_pool(l: &ListenerConfig, out: &mut String) {
    for (i, s) in l.servers.iter().enumerate() {
        let state = match s.state {
            AdminState::Enabled => String::new(),
            other => format!(" ({})", other.name()),
        };
        *out += &format!("  server {i}: {} {}{state}\n", s.addr, server_limits(s));
    }
    if let Some(e) = &l.emergency {
        *out += &format!("  emergency: {e}\n");
    }
    if let Some(h) = &l.health {
        *out += &format!("  health check: {h}\n");
    }
    if !l.slow_start.is_zero() {
        *out += &format!("  slow start: {}\n", format_duration(l.slow_start));
    }
}

/// One line for a route: `route 'NAME': MATCHERS -> ACTION [; extras]`.
fn explain_route(r: &RouteConfig) -> String {
    let mut when = Vec::new();
    if !r.sni.is_empty() {
        let names: Vec<String> = r.sni.iter().map(|h| h.to_string()).collect();
        when.push(format!("TLS server name {}", names.join(" or ")));
    }
    if !r.hosts.is_empty() {
        let hosts: Vec<String> = r.hosts.iter().map(|h| h.to_string()).collect();
        when.push(format!("host {}", hosts.join(" or ")));
    }
    match &r.path {
        Some(PathMatch::Prefix(p)) => when.push(format!("path {p}*")),
        Some(PathMatch::Regex(p)) => when.push(format!("path ~ {}", p.escape_debug())),
        None => {}
    }
    if !r.methods.is_empty() {
        when.push(format!("method {}", r.methods.join(" or ")));
    }
    for (name, m) in &r.headers {
        when.push(match m {
            ValueMatch::Exact(v) => format!("{name} = {}", v.escape_debug()),
            ValueMatch::Regex(p) => format!("{name} ~ {}", p.escape_debug()),
        });
    }
    let when = if when.is_empty() {
        "any request".to_string()
    } else {
        when.join(", ")
    };
    let mut line = format!("route '{}': {when} -> {}", r.name, r.action);
    if let Some(n) = r.client_acl {
        line += &format!("; clients outside acl {n} get 403");
    }
    if let Some((prefix, replace)) = &r.rewrite_path {
        line += &format!("; path {prefix} rewritten to {replace}");
    }
    if !r.request_headers.is_empty() || !r.response_headers.is_empty() {
        line += &format!(
            "; {} request and {} response header edits",
            r.request_headers.len(),
            r.response_headers.len()
        );
    }
    if let Some(rate) = &r.rate {
        line += &format!("; rate {rate} per client address (429 over it)");
    }
    line
}
