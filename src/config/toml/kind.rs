//! A `[[listener]]`'s kind read at parse time: `protocol`, `[listener.udp]`, `[listener.http]`,
//! `tls`, `accept_proxy` and the DSR keys become one `ListenerKind`, and a mix no listener can run
//! is refused here, at its line, instead of being built and refused later.

use std::ops::Range;

use super::super::model::{
    parse_dsr_wait, ConfigError, DsrSettings, ListenerKind, StreamKind, StreamProto, UdpSettings,
    NOT_HTTP_OR_TLS,
};
use super::{acl_number, RawListener};
use crate::acl::{self, Net};
use crate::addr::ListenAddr;

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
