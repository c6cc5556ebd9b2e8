//! `quill check`'s explanation: what a configuration does, in plain words.

use crate::addr::{AdminState, ListenAddr};

use super::model::{
    format_duration, Config, HashKey, ListenerConfig, PathCase, PathMatch, RouteConfig, ValueMatch,
};
use super::write::server_limits;
use crate::tls::{CertFiles, TlsSettings, TlsVersion};

impl Config {
    /// A human explanation of what this configuration does (for `quill check`).
    pub(crate) fn explain(&self) -> String {
        let g = &self.global;
        let mut out = self.explain_global();
        for p in &self.pools {
            out += &format!("pool '{}': mode {}\n", p.name, p.mode);
            explain_pool(p, true, &mut out);
            explain_server_tls(p, &mut out);
        }
        for l in &self.listeners {
            self.explain_tuning(l, &mut out);
            if let (Some(dsr), Some((vip, port))) = (l.dsr(), l.dsr_vip()) {
                let ifname = dsr.ifname();
                out += &format!(
                    "  direct server return on {ifname}: frames for {vip}:{port} go to the servers, replies bypass Quill{}\n",
                    match dsr.tarpit_acl {
                        Some(n) => format!("; clients ACL {n} denies are tarpitted"),
                        None => String::new(),
                    }
                );
                out += &if l.mode.maglev {
                    format!(
                        "  a flow's server: the Maglev table below, keyed by the flow's 5-tuple (the same on every Quill: several behind ECMP agree), past servers whose MAC is unknown; this Quill keeps a flow it forwards on its server while that server stays up (up to {} flows, each until {} idle)\n",
                        super::model::DSR_FLOWS,
                        format_duration(super::model::DSR_FLOW_IDLE)
                    )
                } else {
                    "  a flow's server: weighted rendezvous hashing under a key random per process (with mode maglev: a table every Quill shares)\n".to_string()
                };
                out += &format!(
                    "  a frame waits up to {} ms in Quill's receive ring when traffic is light (dsr_wait{})\n",
                    l.dsr_wait_ms(),
                    if dsr.wait.is_some() { "" } else { ", default" }
                );
            }
            if let Some(h) = l.http() {
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
            if let Some(u) = l.udp() {
                out += &format!(
                    "  UDP listener (protocol udp): a flow per client address and port; flow_timeout {}, max_flows {}, max_flows_per_source {}, flow_responses {}\n",
                    crate::config::format_duration(u.flow_timeout),
                    u.max_flows.map_or_else(
                        || "from the open-file limit (one descriptor per flow; all UDP flows together take at most half of the descriptors left after the reserve, the other half is kept for TCP sessions)".to_string(),
                        |n| format!("{n} (and no more than the open-file limit leaves for flows)"),
                    ),
                    u.max_flows_per_source.map_or_else(
                        || "a quarter of max_flows (an IPv4 address or an IPv6 /64; past it new flows from that source are refused)".to_string(),
                        |n| format!("{n} (an IPv4 address or an IPv6 /64; past it new flows from that source are refused)"),
                    ),
                    match u.flow_responses {
                        0 => "never".to_string(),
                        n => n.to_string(),
                    }
                );
                out += "  UDP datagrams from Quill's own listening addresses or from a server of the pool are dropped (they would loop); an ICMP error takes a server out only when it comes from that server and quotes a datagram the flow sent (two of them, or one and a datagram unanswered for 1s)\n";
            }
            if let Some(t) = l.tls() {
                explain_tls(t, l.http().is_some(), &mut out);
            }
            for r in l.routes.iter().filter(|r| r.site.is_none()) {
                out += &format!("  {}\n", explain_route(r));
            }
            explain_sites(l, &mut out);
            if !l.routes.is_empty() {
                out += &if l.servers.is_empty() && l.emergency.is_none() && l.http().is_none() {
                    "  no route matched: closed (the listener has no servers)\n".to_string()
                } else if l.servers.is_empty() && l.emergency.is_none() {
                    "  no route matched: 404 (the listener has no servers)\n".to_string()
                } else {
                    "  no route matched: the listener's own servers\n".to_string()
                };
            }
            explain_pool(l, l.is_http(), &mut out);
            explain_server_tls(l, &mut out);
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

    /// The first lines of [`Config::explain`]: the process-wide settings, the control socket,
    /// the admin listener, geoip and the ACLs.
    fn explain_global(&self) -> String {
        let g = &self.global;
        let mut out = format!(
        "{} listener(s), {} worker(s), max connections {}, backlog {}, drain timeout {}, drain grace {}\n",
        self.listeners.len(),
        g.workers,
        g.max_connections
            .map_or("from the open-file limit".to_string(), |n| n.to_string()),
        g.backlog,
        format_duration(g.drain_timeout),
        format_duration(g.drain_grace.min(g.drain_timeout))
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
        if let Some(geo) = &g.acls.geo {
            out += &format!(
                "geoip: {} ({}), for country entries\n",
                geo.path.display(),
                geo.db.database_type()
            );
        }
        for (n, acl) in g.acls.iter().filter(|(_, a)| !a.entries.is_empty()) {
            let entries: Vec<String> = acl.entries.iter().map(|e| e.to_string()).collect();
            out += &format!("acl {n}: {}\n", entries.join(", "));
        }
        out
    }

    /// A listener's first lines: its address, mode and tuning settings, its access log and where
    /// its server connections leave from.
    fn explain_tuning(&self, l: &ListenerConfig, out: &mut String) {
        let t = &l.tuning;
        *out += &format!(
            "listener '{}' on {}: mode {}; connect timeout {}, blacklist {}, idle timeout {}, fin timeout {}\n",
            l.name,
            l.listen,
            l.mode,
            format_duration(t.connect_timeout),
            format_duration(t.blacklist),
            format_duration(t.idle_timeout),
            format_duration(t.fin_timeout)
        );
        *out += &format!(
            "  clients tracked: {}, sessions per client address: {}\n",
            t.clients_max,
            match t.max_per_source {
                0 => "no limit".to_string(),
                n => n.to_string(),
            }
        );
        let listed = t.listed_differences();
        if !listed.is_empty() {
            *out += &format!(
                "  other settings that differ from the defaults: {}\n",
                listed.join("; ")
            );
        }
        if let Some(log) = self.listener_log(l) {
            *out += &format!(
                "  access log {}: {}, {}\n",
                log.path.display(),
                log.kind.describe(),
                if log.own {
                    "its own file (log)"
                } else {
                    "the process-wide file"
                }
            );
        }
        if t.transparent {
            *out += "  transparent: server connections leave from the client's address\n";
        }
        if let Some(ip) = t.source {
            *out += &format!("  server connections leave from {ip} (source)\n");
        }
    }
}

/// The servers, emergency server, health check and slow start of a listener or named pool;
/// `http`: HTTP requests reach it (a named pool, an HTTP listener), so the queue applies.
fn explain_pool(l: &ListenerConfig, http: bool, out: &mut String) {
    if let Some(d) = &l.discovery {
        *out += &format!(
            "  servers from DNS: {} (re-asked at the records' TTL, 1 s to 5 min; found at run time, never emptied by a failed answer)\n",
            d.describe()
        );
    }
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
    if l.mode.maglev {
        let tables = crate::balancer::MaglevSet::build(l.maglev_servers(), l.mode.prio);
        for (prio, size, fingerprint) in tables.fingerprints() {
            *out += &format!(
                "  maglev table: prio {prio}, {size} slots, fingerprint {fingerprint:016x} (the same on every Quill with these servers, weights and priorities)\n"
            );
        }
        *out += &match &l.hash_key {
            HashKey::Client => "  maglev key: the client address (hash_key client)\n".to_string(),
            HashKey::Header(name) => format!(
                "  maglev key: each request's {name} header (hash_key header {name}; the first such field, trimmed), else the client address\n"
            ),
            HashKey::Cookie(name) => format!(
                "  maglev key: each request's {name} cookie (hash_key cookie {name}; the first such cookie, trimmed), else the client address\n"
            ),
        };
    }
    if l.fastcgi {
        let kept = l.servers.iter().filter(|s| s.max > 0).count();
        *out += &format!(
            "  FastCGI: connections kept between requests to the servers with a max ({kept} of {}); to the others, one connection per request\n",
            l.servers.len()
        );
    }
    if http && l.servers.iter().any(|s| s.max > 0) {
        *out += &match l.tuning.queue_timeout {
            d if d.is_zero() => "  HTTP requests over every server's max: refused at once (queue_timeout 0)\n".to_string(),
            d => format!(
                "  HTTP requests over every server's max wait up to {} in the queue (queue_timeout), then 503\n",
                format_duration(d)
            ),
        };
    }
    if let Some(h) = &l.health {
        *out += &format!("  health check: {h}\n");
    }
    if !l.slow_start.is_zero() {
        *out += &format!("  slow start: {}\n", format_duration(l.slow_start));
    }
    if let Some(v) = l.tuning.proxy_protocol {
        *out += &format!(
            "  PROXY protocol {} header sent to servers first\n",
            v.as_str()
        );
    }
}

/// A listener's TLS termination: its certificates (file, names, expiry), versions, suites,
/// ALPN, client certificates, tickets and handshake limits.
fn explain_tls(t: &TlsSettings, http: bool, out: &mut String) {
    let versions = match t.min_version {
        TlsVersion::V1_2 => "TLS 1.2 and 1.3",
        TlsVersion::V1_3 => "TLS 1.3 only",
    };
    let ciphers = if t.ciphers.is_empty() {
        "the default suites (AES-128-GCM, AES-256-GCM, ChaCha20)".to_string()
    } else {
        format!("suites {}", t.ciphers.join(", "))
    };
    *out += &format!(
        "  TLS: {versions}; {ciphers}{}\n",
        if t.server_cipher_order {
            " (the listener's order wins)"
        } else {
            ""
        }
    );
    let default = t.certs.iter().position(|c| c.default).unwrap_or(0);
    for (i, c) in t.certs.iter().enumerate() {
        let (names, expiry) = certificate_names(c);
        let key = if c.key.path == c.cert.path {
            String::new()
        } else {
            format!(", key {}", c.key.path.display())
        };
        *out += &format!(
            "  certificate {}{key}: {}{}{}{}\n",
            c.cert.path.display(),
            if names.is_empty() {
                "no server name".to_string()
            } else {
                names.join(" ")
            },
            expiry.map_or(String::new(), |e| format!(", expires {e}")),
            c.ocsp.as_ref().map_or(String::new(), |o| format!(
                ", OCSP staple {}",
                o.path.display()
            )),
            if i == default && !t.strict_sni {
                " (default)"
            } else {
                ""
            }
        );
    }
    if let Some(dir) = &t.sni_path {
        *out += &format!("  certificates by server name from {}\n", dir.display());
    }
    let alpn = match &t.alpn {
        Some(list) if list.is_empty() => "none".to_string(),
        Some(list) => list.join(", "),
        None if http => "h2, http/1.1".to_string(),
        None => "none".to_string(),
    };
    let client = match &t.client_auth {
        None => "not asked for".to_string(),
        Some(auth) => {
            let cas: Vec<String> = auth
                .ca
                .iter()
                .map(|f| f.path.display().to_string())
                .collect();
            format!(
                "{} (CAs {}{})",
                if auth.required {
                    "required"
                } else {
                    "optional"
                },
                cas.join(", "),
                if auth.crls.is_empty() {
                    String::new()
                } else {
                    format!("; {} CRL file(s)", auth.crls.len())
                }
            )
        }
    };
    let tickets = match (&t.client_auth, t.tickets, &t.ticket_keys) {
        (Some(_), _, _) | (None, false, _) => "off".to_string(),
        (None, true, Some(k)) => format!("on, keys from {}", k.path.display()),
        (None, true, None) => "on, keys generated and shared by the workers".to_string(),
    };
    *out += &format!(
        "  TLS: ALPN {alpn}; client certificates {client}; session tickets {tickets}{}\n",
        if t.strict_sni {
            "; strict SNI (no default certificate)"
        } else {
            ""
        }
    );
    *out += &format!(
        "  TLS: handshake timeout {} (first byte within {}), at most {} handshakes in progress per worker ({} per client address)\n",
        format_duration(t.handshake_timeout),
        format_duration(t.handshake_first_byte_timeout),
        t.max_handshakes,
        t.max_handshakes_per_source
    );
}

/// The server names a certificate answers for (the configured ones, else its subjectAltName DNS
/// names, else its subject's CN) and its `notAfter`, read from the first certificate of its file.
fn certificate_names(c: &CertFiles) -> (Vec<String>, Option<String>) {
    let parsed = x509_parser::pem::parse_x509_pem(&c.cert.bytes)
        .ok()
        .map(|(_, pem)| pem);
    let cert = parsed.as_ref().and_then(|p| p.parse_x509().ok());
    let expiry = cert.as_ref().map(|x| x.validity().not_after.to_string());
    if !c.names.is_empty() {
        return (c.names.clone(), expiry);
    }
    let Some(cert) = cert else {
        return (Vec::new(), expiry);
    };
    let mut names: Vec<String> = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                names.push(dns.to_string());
            }
        }
    }
    if names.is_empty() {
        if let Some(cn) = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
        {
            names.push(cn.to_string());
        }
    }
    (names, expiry)
}

/// A pool's TLS to its servers.
fn explain_server_tls(l: &ListenerConfig, out: &mut String) {
    let Some(s) = &l.server_tls else {
        return;
    };
    let verify = match (s.verify, &s.ca) {
        (false, _) => "not verified (verify = false)".to_string(),
        (true, Some(ca)) => format!("verified against {}", ca.path.display()),
        (true, None) => "verified against the system's roots".to_string(),
    };
    *out += &format!(
        "  TLS to servers: certificates {verify}; SNI {}{}{}\n",
        s.sni.as_deref().unwrap_or("the server's host name"),
        s.cert.as_ref().map_or(String::new(), |c| format!(
            "; client certificate {}",
            c.cert.path.display()
        )),
        if s.alpn.is_empty() {
            String::new()
        } else {
            format!("; ALPN {}", s.alpn.join(", "))
        }
    );
}

/// A listener's sites (docs/sites.md): each with its names, certificates, access log and routes, then
/// what a host no site names gets.
fn explain_sites(l: &ListenerConfig, out: &mut String) {
    if l.sites.is_empty() {
        return;
    }
    for (i, site) in l.sites.iter().enumerate() {
        *out += &format!("  {site}\n");
        for c in &site.certs {
            *out += &format!("    certificate {} (chosen by SNI)\n", c.display());
        }
        if let Some(log) = &site.log {
            *out += &format!("    access log {} (its requests' lines)\n", log.display());
        }
        for r in l.routes.iter().filter(|r| r.site == Some(i as u32)) {
            *out += &format!("    {}\n", explain_route(r));
        }
        *out += "    no route of the site matched: 404\n";
    }
    let default = l.sites.iter().find(|s| s.default);
    *out += &match (default, l.unknown_host.status()) {
        (Some(d), _) => format!("  a host no site names: site '{}'\n", d.name),
        (None, Some(status)) => format!("  a host no site names: {status}\n"),
        (None, None) => "  a host no site names: the routes outside any site\n".to_string(),
    };
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
    // `~*` and "without case", as nginx writes a case-insensitive location.
    let nocase = r.path_case == PathCase::Insensitive;
    match (&r.path, nocase) {
        (Some(PathMatch::Prefix(p)), false) => when.push(format!("path {p}*")),
        (Some(PathMatch::Prefix(p)), true) => when.push(format!("path {p}* without case")),
        (Some(PathMatch::Regex(p)), false) => when.push(format!("path ~ {}", p.escape_debug())),
        (Some(PathMatch::Regex(p)), true) => when.push(format!("path ~* {}", p.escape_debug())),
        (None, _) => {}
    }
    if let Some(rule) = &r.invalid_referer {
        when.push(rule.to_string());
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
