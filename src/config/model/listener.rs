//! One listener and its pool (`ListenerConfig`), a UDP listener's flow settings (`UdpSettings`),
//! and the checks that need the whole listener (DSR, `transparent`/`source`, TLS bounds).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::acl::AclId;
use crate::addr::{BackendAddr, ListenAddr, ServerSpec};
use crate::balancer::Mode;

use super::bounds::{
    check_duration, in_range, MAX_CERTS, MAX_HANDSHAKES, MAX_HANDSHAKE_TIMEOUT, MAX_ROUTES,
    MAX_SESSIONS, MAX_WEIGHT,
};
use super::health::{CheckKind, HealthCheck};
use super::http::RouteConfig;
use super::kind::{ListenerKind, DEFAULT_DSR_WAIT};
use super::site::{SiteConfig, UnknownHost};
use super::{pool_addr, ConfigError, LogFormat};
use crate::config::settings::{Fastclose, ProxyVersion, Tuning};

/// One listener and its pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ListenerConfig {
    pub name: String,
    pub listen: ListenAddr,
    pub mode: Mode,
    pub servers: Vec<ServerSpec>,
    /// Its servers come from DNS (`servers = { srv = ... }`); `servers` then holds the last set
    /// found, which `crate::discovery` replaces.
    pub discovery: Option<super::Discovery>,
    pub emergency: Option<BackendAddr>,
    pub tuning: Tuning,
    /// Servers blacklisted at start by `server N blacklist T`, with how long.
    pub initial_blacklist: Vec<(usize, Duration)>,
    /// Active health checks; None = passive only (failed connects blacklist).
    pub health: Option<HealthCheck>,
    /// A server coming back up ramps its share from nothing to full over this time.
    pub slow_start: Duration,
    /// ACL checked against clients before any work (`client_acl`).
    pub client_acl: Option<AclId>,
    /// Where clients denied by `client_acl` go (`-B`); None = closed.
    pub abuse: Option<BackendAddr>,
    /// What it accepts and how: TCP or HTTP (with TLS and PROXY acceptance), UDP or DSR.
    pub kind: ListenerKind,
    /// HTTP: stick clients to servers by this cookie, inserted by Quill (`sticky_cookie`).
    pub sticky_cookie: Option<String>,
    /// What its Maglev key is made of (`hash_key`): the client address, or on HTTP a request's
    /// header or cookie.
    pub hash_key: HashKey,
    /// An HTTP listener's routes (`[[listener.route]]`), first match wins; a request no route
    /// matches goes to the listener's own servers (404 when it has none).
    pub routes: Vec<RouteConfig>,
    /// Its virtual hosts (`[[listener.site]]`, docs/sites.md); their routes are in `routes`.
    pub sites: Vec<SiteConfig>,
    /// What a request whose Host no site names gets (`unknown_host`).
    pub unknown_host: UnknownHost,
    /// TLS to this pool's servers (`server_tls = { ... }`).
    pub server_tls: Option<crate::tls::ClientSettings>,
    /// Its servers speak FastCGI, not HTTP (a `[[pool]]`'s `protocol = "fastcgi"`): only a
    /// route's `fastcgi` action sends to it (docs/fastcgi.md).
    pub fastcgi: bool,
    /// Its own access log file (`log = "FILE"` in its `[[listener]]`, `listener NAME log FILE`);
    /// None: the process-wide `log`.
    pub log: Option<PathBuf>,
    /// Its own access log format (`log_format` in its `[[listener]]`); None: the process-wide
    /// `log_format`.
    pub log_format: Option<LogFormat>,
}

/// A UDP listener's flows (`udp = { ... }`): a flow is one client address and port, relayed to one
/// server through a connected socket of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UdpSettings {
    /// A flow with no datagram either way for this long ends (`flow_timeout`).
    pub flow_timeout: Duration,
    /// Flows open at once in this process for this listener (`max_flows`); a new client past it
    /// evicts the flow idle for longest. None: what the open-file limit leaves for flows (see
    /// `udp::flow_budget`), which caps an explicit value too.
    pub max_flows: Option<u32>,
    /// Flows one source may hold on this listener (`max_flows_per_source`; an IPv4 address, or
    /// an IPv6 /64): a new flow past it is refused, no other client's flow is evicted for it.
    /// None: a quarter of the listener's `max_flows` (at least 1).
    pub max_flows_per_source: Option<u32>,
    /// A flow ends after this many replies from its server (`flow_responses`; 0 = never).
    pub flow_responses: u32,
}

/// What a pool's Maglev key is made of (`hash_key`; read by `config::http::parse_hash_key`): the
/// client address (Pen's key, and the only one outside HTTP), or an HTTP request's header or
/// cookie, whose absence falls back to the address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum HashKey {
    #[default]
    Client,
    /// The first field of this name (any case).
    Header(Box<str>),
    /// The first cookie of this name (exact case) in the `Cookie` fields.
    Cookie(Box<str>),
}

impl std::fmt::Display for HashKey {
    /// The configuration's words: `client`, `header NAME`, `cookie NAME`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HashKey::Client => f.write_str("client"),
            HashKey::Header(n) => write!(f, "header {n}"),
            HashKey::Cookie(n) => write!(f, "cookie {n}"),
        }
    }
}

impl Default for UdpSettings {
    fn default() -> Self {
        UdpSettings {
            flow_timeout: Duration::from_secs(30),
            max_flows: None,
            max_flows_per_source: None,
            flow_responses: 0,
        }
    }
}

impl ListenerConfig {
    /// What its Maglev tables are built from: each server's identity (its address as written, or a
    /// discovered SRV record's `TARGET:PORT`),
    /// weight and priority, in the listed order (which the tables do not depend on).
    pub(crate) fn maglev_servers(&self) -> Vec<(String, u32, u32)> {
        self.servers
            .iter()
            .map(|s| {
                let id = s.identity.clone().unwrap_or_else(|| s.addr.to_string());
                (id, s.weight, s.prio)
            })
            .collect()
    }

    /// A listener with default tuning and mode; servers are added by the caller.
    pub(crate) fn new(name: &str, listen: ListenAddr) -> ListenerConfig {
        ListenerConfig {
            name: name.to_string(),
            listen,
            mode: Mode::default(),
            servers: Vec::new(),
            discovery: None,
            emergency: None,
            tuning: Tuning::default(),
            initial_blacklist: Vec::new(),
            health: None,
            slow_start: Duration::ZERO,
            client_acl: None,
            abuse: None,
            kind: ListenerKind::default(),
            sticky_cookie: None,
            hash_key: HashKey::Client,
            routes: Vec::new(),
            sites: Vec::new(),
            unknown_host: UnknownHost::default(),
            server_tls: None,
            fastcgi: false,
            log: None,
            log_format: None,
        }
    }
    /// Whether this is a named pool (`[[pool]]`) rather than a listener.
    pub(crate) fn is_pool(&self) -> bool {
        self.listen == pool_addr()
    }

    /// `listener 'NAME'` or `pool 'NAME'`, for messages.
    pub(crate) fn what(&self) -> String {
        let kind = if self.is_pool() { "pool" } else { "listener" };
        format!("{kind} '{}'", self.name)
    }

    /// Checks what can only be checked on the whole listener (or named pool).
    /// The virtual address and port of a DSR listener (`dsr_if`), None for any other.
    pub(crate) fn dsr_vip(&self) -> Option<(std::net::Ipv4Addr, u16)> {
        let dsr = self.dsr()?;
        let (ip, port) = match &self.listen {
            ListenAddr::Tcp(a) => (a.ip(), a.port()),
            _ => return None,
        };
        match (dsr.ip, ip) {
            (Some(vip), _) => Some((vip, port)),
            (None, IpAddr::V4(v4)) if !v4.is_unspecified() => Some((v4, port)),
            _ => None,
        }
    }

    /// How long a DSR listener's lone frame may wait in the receive ring (`dsr_wait`), in ms.
    pub(crate) fn dsr_wait_ms(&self) -> u32 {
        let d = self.dsr().and_then(|d| d.wait).unwrap_or(DEFAULT_DSR_WAIT);
        u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
    }

    /// `dsr_if`, `dsr_ip` and `tarpit_acl`: a DSR listener forwards frames to IPv4 servers on
    /// the interface's network, by address.
    fn check_dsr(&self) -> Result<(), String> {
        let ListenerKind::Dsr(dsr) = &self.kind else {
            return Ok(());
        };
        let Some(ifname) = &dsr.interface else {
            return Err(dsr.needs_if().into());
        };
        if ifname.is_empty() || ifname.len() > 15 || ifname.contains(['/', ' ', '\0']) {
            return Err(format!("dsr_if '{ifname}': not an interface name"));
        }
        if self.is_pool() {
            return Err(NOT_HTTP_OR_TLS.into());
        }
        if self.dsr_vip().is_none() {
            return Err("dsr_if: needs an IPv4 virtual address (dsr_ip, or an IPv4 listen address that is not 0.0.0.0)".into());
        }
        for (i, s) in self.servers.iter().enumerate() {
            if !matches!(&s.addr, BackendAddr::Tcp(a) if a.is_ipv4()) {
                return Err(format!(
                    "dsr_if: server {i} ({}) is not an IPv4 address (DSR finds servers on the interface by ARP)",
                    s.addr
                ));
            }
        }
        Ok(())
    }

    /// What the listener's kind and its health check and routes must agree on.
    fn check_kind(&self) -> Result<(), String> {
        let udp_check = matches!(
            self.health.as_ref().map(|h| &h.kind),
            Some(CheckKind::Udp { .. })
        );
        if self.udp().is_some() && self.health.is_some() && !udp_check {
            return Err(
                "a UDP listener's health check must be type udp (a datagram sent, an answer expected)".into(),
            );
        }
        if self.udp().is_none() && udp_check {
            return Err("a udp health check needs a UDP listener (protocol = \"udp\")".into());
        }
        // A TCP listener's routes pick a pool by TLS server name (`sni`), and only that.
        if !self.is_http() && self.routes.iter().any(|r| r.sni.is_empty()) {
            return Err("routes need an HTTP listener (protocol = \"http\") or sni".into());
        }
        // SNI routes forward TLS untouched: this listener would have to terminate it.
        if self.tls().is_some() && self.routes.iter().any(|r| !r.sni.is_empty()) {
            return Err(
                "sni routes forward TLS untouched, so the listener cannot also terminate it (tls)"
                    .into(),
            );
        }
        if self.routes.len() > MAX_ROUTES {
            return Err(format!(
                "{} routes (at most {MAX_ROUTES})",
                self.routes.len()
            ));
        }
        Ok(())
    }

    /// `transparent` and `source`: where they apply, and a source address of every literal
    /// server's family.
    fn check_source(&self) -> Result<(), String> {
        let t = &self.tuning;
        if t.transparent && (self.is_http() || self.is_pool()) {
            return Err("transparent: applies to a TCP listener only (an HTTP server connection serves many clients)".into());
        }
        if let (true, Some(ip)) = (t.transparent, t.source) {
            return Err(format!(
                "source {ip}: not with transparent (server connections leave from the client's address)"
            ));
        }
        if let Some(ip) = t.source {
            if ip.is_unspecified() || ip.is_multicast() {
                return Err(format!("source {ip}: not a unicast address"));
            }
            for (i, s) in self.servers.iter().enumerate() {
                if let BackendAddr::Tcp(a) = &s.addr {
                    if a.is_ipv4() != ip.is_ipv4() {
                        return Err(format!(
                            "source {ip}: server {i} ({a}) is of the other address family"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        // An HTTP listener with routes may leave the rest to them: unmatched requests get 404.
        if let Some(d) = &self.discovery {
            d.check()
                .map_err(|e| ConfigError::usage(format!("{}: servers: {e}", self.what())))?;
            if self.dsr().is_some() {
                return Err(ConfigError::usage(format!(
                    "{}: a DSR listener's servers are fixed at start: list them (DNS discovery needs a proxy or UDP listener)",
                    self.what()
                )));
            }
        }
        if self.servers.is_empty()
            && self.discovery.is_none()
            && self.emergency.is_none()
            && self.routes.is_empty()
        {
            return Err(ConfigError::usage(format!("{}: no servers", self.what())));
        }
        if self.servers.len() > crate::balancer::MAX_SERVERS {
            return Err(ConfigError::usage(format!(
                "{}: {} servers (at most {})",
                self.what(),
                self.servers.len(),
                crate::balancer::MAX_SERVERS
            )));
        }
        let named = |e: String| ConfigError::usage(format!("{}: {e}", self.what()));
        self.check_kind().map_err(named)?;
        self.tuning.check().map_err(named)?;
        if let Some(v) = self.tuning.proxy_protocol {
            // (With `server_tls` the header goes in plaintext before the TLS handshake.)
            // v1 is text for a stream: a datagram has only v2's DGRAM form.
            if self.udp().is_some() && v == ProxyVersion::V1 {
                return Err(named(
                    "proxy_protocol v1 has no datagram form: a UDP listener takes v2".into(),
                ));
            }
        }
        check_duration("slow_start", self.slow_start).map_err(named)?;
        for (i, d) in &self.initial_blacklist {
            check_duration(&format!("server {i} blacklist"), *d).map_err(named)?;
        }
        if let Some(h) = &self.health {
            h.check().map_err(named)?;
        }
        if let Some(h) = self.http() {
            h.check().map_err(named)?;
            if self.tuning.tcp_fastclose != Fastclose::Off {
                return Err(named(format!(
                    "tcp_fastclose {}: does not apply to an HTTP listener (HTTP framing decides when an exchange ends)",
                    self.tuning.tcp_fastclose.name()
                )));
            }
        }
        if self.hash_key != HashKey::Client && !self.is_http() && !self.is_pool() {
            return Err(named(format!(
                "hash_key {}: needs an HTTP listener (protocol = \"http\", -H) or a [[pool]]; other listeners hash the client address",
                self.hash_key
            )));
        }
        self.check_source().map_err(named)?;
        self.check_dsr().map_err(named)?;
        for (i, s) in self.servers.iter().enumerate() {
            for (name, v, most) in [
                ("max", s.max, MAX_SESSIONS),
                ("hard", s.hard, MAX_SESSIONS),
                ("weight", s.weight, MAX_WEIGHT),
                ("prio", s.prio, MAX_WEIGHT),
            ] {
                in_range(&format!("server {i} {name}"), v.into(), 0..=most.into())
                    .map_err(named)?;
            }
        }
        if let Some(t) = self.tls() {
            check_tls_bounds(t).map_err(|e| named(format!("tls: {e}")))?;
            if self.is_pool() {
                return Err(named(
                    "tls: a pool has no clients of its own (set tls on the listener)".into(),
                ));
            }
        }
        Ok(())
    }

    /// Builds the listener's TLS as its pool will (certificates against their keys, suites,
    /// client CAs), so that a bad file or cipher fails the command or the load that brought it
    /// rather than the first handshake. The error is one line naming the file at fault.
    pub(crate) fn check_tls(&self) -> Result<(), String> {
        let Some(settings) = self.tls() else {
            return Ok(());
        };
        crate::tls::build_server(
            settings,
            self.is_http(),
            &crate::tls::tickets::shared_keys(),
        )
        .map(|_| ())
        .map_err(|e| {
            let text = e.to_string();
            match text.strip_prefix("tls: ") {
                Some(rest) => rest.to_string(),
                None => text,
            }
        })
    }
}

/// Why a listener cannot be both DSR and a stream listener with HTTP or TLS (or a named pool).
pub(crate) const NOT_HTTP_OR_TLS: &str =
    "dsr_if: direct server return forwards frames, not HTTP or TLS";

/// The bounds of a listener's TLS settings (what `build_server` does not check itself).
fn check_tls_bounds(t: &crate::tls::TlsSettings) -> Result<(), String> {
    if t.certs.is_empty() {
        return Err("no certificate".into());
    }
    if t.certs.len() > MAX_CERTS {
        return Err(format!(
            "{} certificates (at most {MAX_CERTS})",
            t.certs.len()
        ));
    }
    if t.handshake_timeout.is_zero() || t.handshake_timeout > MAX_HANDSHAKE_TIMEOUT {
        return Err("handshake_timeout: must be more than 0 and at most 5m".into());
    }
    let first = t.handshake_first_byte_timeout;
    if first.is_zero() || first > MAX_HANDSHAKE_TIMEOUT {
        return Err("handshake_first_byte_timeout: must be more than 0 and at most 5m".into());
    }
    if !(1..=MAX_HANDSHAKES).contains(&t.max_handshakes_per_source) {
        return Err(format!(
            "max_handshakes_per_source: {} is out of range (1 to {MAX_HANDSHAKES})",
            t.max_handshakes_per_source
        ));
    }
    if !(1..=MAX_HANDSHAKES).contains(&t.max_handshakes) {
        return Err(format!(
            "max_handshakes: {} is out of range (1 to {MAX_HANDSHAKES})",
            t.max_handshakes
        ));
    }
    Ok(())
}
