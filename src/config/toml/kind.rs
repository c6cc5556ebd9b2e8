//! A `[[listener]]`'s kind read at parse time: `protocol`, `[listener.udp]`, `[listener.http]`,
//! `tls`, `accept_proxy` and the DSR keys become one `ListenerKind`, and a mix no listener can run
//! is refused here, at its line, instead of being built and refused later; its routes are read
//! here too, each checked against the kind (`sni` routes for TCP, request routes for HTTP).

use std::ops::Range;

use super::super::model::{
    parse_dsr_wait, ConfigError, DsrSettings, Fastclose, HashKey, ListenerConfig, ListenerKind,
    RouteAction, RouteConfig, StreamKind, StreamProto, Tuning, UdpSettings, NOT_HTTP_OR_TLS,
};
use super::{acl_number, FileDefaults, RawListener};
use crate::acl::{self, Net};
use crate::addr::ListenAddr;
use toml::Spanned;

type At<'a> = &'a dyn Fn(Range<usize>) -> String;

/// A UDP listener's flow settings (`protocol = "udp"`, `[listener.udp]`), None for any other.
pub(super) fn udp(
    rl: &RawListener,
    listen: &ListenAddr,
    name: &str,
    at: At,
) -> Result<Option<UdpSettings>, ConfigError> {
    let is_udp = rl
        .protocol
        .as_ref()
        .is_some_and(|p| p.get_ref().as_str() == "udp");
    if !is_udp {
        if let Some(u) = &rl.udp {
            return Err(ConfigError::usage(format!(
                "{}listener '{name}': [listener.udp] needs protocol = \"udp\"",
                at(u.span())
            )));
        }
        return Ok(None);
    }
    if let Some(e) = udp_misfit(rl) {
        return Err(ConfigError::usage(format!(
            "{}listener '{name}': {e} (not with protocol = \"udp\")",
            at(rl.name.span())
        )));
    }
    if let ListenAddr::Unix(_) = listen {
        return Err(ConfigError::usage(format!(
            "{}protocol 'udp' needs an IP address and port, not a Unix socket path",
            at(rl.listen.span())
        )));
    }
    Ok(Some(match &rl.udp {
        Some(u) => u.get_ref().build(at)?,
        None => UdpSettings::default(),
    }))
}

/// `hash_key` of a listener (its kind already read) or named pool (its mode already read): a
/// header or cookie needs HTTP requests (an HTTP listener, or a `[[pool]]` routes send them to)
/// and `maglev`, whose key it is. Errors name the key's line.
pub(super) fn hash_key(
    l: &mut ListenerConfig,
    raw: &Option<Spanned<String>>,
    at: At,
) -> Result<(), ConfigError> {
    let Some(raw) = raw else {
        return Ok(());
    };
    let err = |e: String| ConfigError::usage(format!("{}{e}", at(raw.span())));
    let key = super::super::http::parse_hash_key(raw.get_ref()).map_err(err)?;
    if key != HashKey::Client && !l.is_http() && !l.is_pool() {
        return Err(err(format!(
            "hash_key {key}: needs an HTTP listener (protocol = \"http\") or a [[pool]]; other listeners hash the client address"
        )));
    }
    if key != HashKey::Client && !l.mode.maglev {
        return Err(err(format!(
            "hash_key {key}: the key of Maglev hashing, which this mode does not use (add \"maglev\" to mode)"
        )));
    }
    l.hash_key = key;
    Ok(())
}

/// What a UDP listener cannot have: TLS, HTTP, routes and DSR are about streams.
fn udp_misfit(rl: &RawListener) -> Option<&'static str> {
    if rl.tls.is_some() {
        return Some("tls");
    }
    if rl.server_tls.is_some() {
        return Some("server_tls");
    }
    if rl.http.is_some() {
        return Some("[listener.http]");
    }
    if !rl.route.is_empty() {
        return Some("[[listener.route]]");
    }
    if rl.sticky_cookie.is_some() {
        return Some("sticky_cookie");
    }
    if rl.dsr_if.is_some() {
        return Some("dsr_if");
    }
    None
}

/// What a stream listener's clients speak (`protocol`, `-H` with `--config`), with its
/// `[listener.http]` over the file's `[http]`; an HTTP listener does not take the file-wide
/// `tcp_fastclose` and `transparent` into `tuning`. UDP reads as TCP here ([`udp`] says more).
pub(super) fn stream_proto(
    rl: &RawListener,
    defaults: &FileDefaults,
    tuning: &mut Tuning,
    name: &str,
    at: At,
) -> Result<StreamProto, ConfigError> {
    let is_http = match &rl.protocol {
        None => defaults.all_http,
        Some(p) => match p.get_ref().as_str() {
            "tcp" => defaults.all_http,
            "http" => true,
            "udp" => false,
            other => {
                return Err(ConfigError::usage(format!(
                    "{}invalid protocol '{}' (expected tcp, http or udp)",
                    at(p.span()),
                    other.escape_debug()
                )))
            }
        },
    };
    let proto = if is_http {
        // A file-wide `tcp_fastclose` is the default of its TCP listeners only.
        tuning.tcp_fastclose = Fastclose::Off;
        // So is a file-wide `transparent` (an HTTP server connection serves many clients).
        tuning.transparent = false;
        if let Some(f) = &rl.tcp_fastclose {
            return Err(ConfigError::usage(format!(
                "{}tcp_fastclose: '{}' does not apply to HTTP listener '{name}' \
                 (HTTP framing decides when an exchange ends)",
                at(f.span()),
                f.get_ref().name()
            )));
        }
        let mut settings = defaults.http.clone();
        if let Some(h) = &rl.http {
            settings.apply(&h.get_ref().patch(at, defaults.dir)?);
            h.get_ref().check(&settings, h.span(), at)?;
        }
        StreamProto::Http(settings)
    } else if let Some(h) = &rl.http {
        return Err(ConfigError::usage(format!(
            "{}listener '{name}': [listener.http] needs protocol = \"http\"",
            at(h.span())
        )));
    } else {
        StreamProto::Tcp
    };
    Ok(proto)
}

/// A listener's routes (`[[listener.route]]`), each fitting its kind: an HTTP listener's
/// match requests, a TCP listener's pick a pool by TLS server name.
pub(super) fn routes(
    rl: &RawListener,
    http: bool,
    name: &str,
    at: At,
    dir: &std::path::Path,
) -> Result<Vec<RouteConfig>, ConfigError> {
    let mut routes: Vec<RouteConfig> = Vec::with_capacity(rl.route.len());
    for (i, r) in rl.route.iter().enumerate() {
        let route = r.get_ref().build(i + 1, r.span(), at, dir)?;
        if let Some(e) = route_misfit(&route, http) {
            return Err(ConfigError::usage(format!(
                "{}listener '{name}': route '{}': {e}",
                at(r.span()),
                route.name
            )));
        }
        if let Some(other) = routes.iter().find(|o| o.name == route.name) {
            return Err(ConfigError::usage(format!(
                "{}listener '{name}': two routes are named '{}'",
                at(r.span()),
                other.name
            )));
        }
        routes.push(route);
    }
    Ok(routes)
}

/// Why a route does not fit its listener: a TCP listener's routes pick a pool by TLS server name
/// (`sni` and `pool` only); an HTTP listener's match requests, not `sni`.
fn route_misfit(r: &RouteConfig, http: bool) -> Option<&'static str> {
    if http {
        return (!r.sni.is_empty())
            .then_some("sni is for TCP listeners (an HTTP listener's routes match host)");
    }
    let http_only = !r.hosts.is_empty()
        || r.path.is_some()
        || !r.methods.is_empty()
        || !r.headers.is_empty()
        || r.client_acl.is_some()
        || !r.request_headers.is_empty()
        || !r.response_headers.is_empty()
        || r.rewrite_path.is_some()
        || r.rate.is_some();
    if r.sni.is_empty() || http_only || !matches!(r.action, RouteAction::Pool(_)) {
        return Some(
            "a TCP listener's route takes sni and pool only (any other matcher or action needs protocol = \"http\")",
        );
    }
    None
}

/// The DSR keys as written: `dsr_if` and the settings that need it.
pub(super) struct DsrKeys {
    interface: Option<String>,
    settings: DsrSettings,
}

/// Reads `dsr_if`, `dsr_ip`, `dsr_wait` and `tarpit_acl`.
pub(super) fn dsr_keys(rl: &RawListener, at: At) -> Result<DsrKeys, ConfigError> {
    let mut settings = DsrSettings::on(None);
    if let Some(ip) = &rl.dsr_ip {
        settings.ip = Some(ip.get_ref().parse().map_err(|_| {
            ConfigError::usage(format!(
                "{}dsr_ip: '{}' is not an IPv4 address",
                at(ip.span()),
                ip.get_ref().escape_debug()
            ))
        })?);
    }
    if let Some(w) = &rl.dsr_wait {
        settings.wait = Some(
            parse_dsr_wait(&w.get_ref().0)
                .map_err(|e| ConfigError::usage(format!("{}{e}", at(w.span()))))?,
        );
    }
    if let Some(n) = &rl.tarpit_acl {
        settings.tarpit_acl = Some(acl_number(*n.get_ref(), &at(n.span()))?);
    }
    Ok(DsrKeys {
        interface: rl.dsr_if.clone(),
        settings,
    })
}

/// Reads `accept_proxy`: trusted networks, on a TCP listener only.
pub(super) fn accept_proxy(
    rl: &RawListener,
    listen: &ListenAddr,
    name: &str,
    at: At,
) -> Result<Vec<Net>, ConfigError> {
    let Some(list) = &rl.accept_proxy else {
        return Ok(Vec::new());
    };
    if !matches!(listen, ListenAddr::Tcp(_)) {
        return Err(not_tcp(rl, name, at));
    }
    if list.get_ref().is_empty() {
        return Err(ConfigError::usage(format!(
            "{}accept_proxy: empty (list the trusted networks, or leave the key out)",
            at(list.span())
        )));
    }
    let mut nets = Vec::with_capacity(list.get_ref().len());
    for cidr in list.get_ref() {
        nets.push(
            acl::parse_net(cidr.trim(), None)
                .map_err(|e| ConfigError::usage(format!("{}accept_proxy: {e}", at(list.span()))))?,
        );
    }
    Ok(nets)
}

/// `accept_proxy` on a listener that reads no stream of its own (a Unix socket, UDP, DSR).
fn not_tcp(rl: &RawListener, name: &str, at: At) -> ConfigError {
    let span = rl.accept_proxy.as_ref().map_or(0..0, |l| l.span());
    ConfigError::usage(format!(
        "{}accept_proxy: listener '{name}' is not a TCP listener",
        at(span)
    ))
}

/// What a listener reads, put together into its kind.
pub(super) struct Parts {
    pub udp: Option<UdpSettings>,
    pub proto: StreamProto,
    pub tls: Option<crate::tls::TlsSettings>,
    pub accept_proxy: Vec<Net>,
    pub dsr: DsrKeys,
}

/// The listener's kind, or why its keys cannot make one (named as `validate` names it).
pub(super) fn assemble(
    rl: &RawListener,
    parts: Parts,
    name: &str,
    at: At,
) -> Result<ListenerKind, ConfigError> {
    let named =
        |why: &str| ConfigError::usage(format!("{}listener '{name}': {why}", at(rl.name.span())));
    let Parts {
        udp,
        proto,
        tls,
        accept_proxy,
        dsr,
    } = parts;
    let Some(interface) = dsr.interface.clone() else {
        let d = &dsr.settings;
        if d.ip.is_some() || d.tarpit_acl.is_some() {
            return Err(named("dsr_ip and tarpit_acl need dsr_if"));
        }
        if d.wait.is_some() {
            return Err(named("dsr_wait needs dsr_if"));
        }
        if let Some(u) = udp {
            if !accept_proxy.is_empty() {
                return Err(not_tcp(rl, name, at));
            }
            return Ok(ListenerKind::Udp(u));
        }
        return Ok(ListenerKind::Stream(StreamKind {
            tls,
            accept_proxy,
            proto,
        }));
    };
    if matches!(proto, StreamProto::Http(_)) || tls.is_some() {
        return Err(named(NOT_HTTP_OR_TLS));
    }
    if !accept_proxy.is_empty() {
        return Err(not_tcp(rl, name, at));
    }
    Ok(ListenerKind::Dsr(DsrSettings {
        interface: Some(interface),
        ..dsr.settings
    }))
}
