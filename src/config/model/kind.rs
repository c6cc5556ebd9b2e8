//! A listener's kind (`ListenerKind`): a stream listener (TCP or HTTP, with TLS termination and
//! PROXY acceptance where asked), a UDP listener or a DSR listener. Each kind holds the settings
//! only it has, so a mix no listener can run (HTTP over UDP, TLS on a DSR listener) cannot be
//! written. The accessors on `ListenerConfig` answer the common questions ("is it HTTP?").

use std::net::Ipv4Addr;
use std::time::Duration;

use crate::acl::{AclId, Net};
use crate::tls::TlsSettings;

use super::http::HttpSettings;
use super::listener::{ListenerConfig, UdpSettings, NOT_HTTP_OR_TLS};

/// What a listener accepts and how it serves it.
#[derive(Clone, Debug, PartialEq, Eq)]
// A configuration is built once per load or change, and a stream listener is the usual kind:
// boxing its settings would cost every reader a hop for nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum ListenerKind {
    /// Connections over TCP (or a Unix socket): proxied as TCP or as HTTP.
    Stream(StreamKind),
    /// Datagrams relayed per flow (`-U`, `protocol = "udp"`).
    Udp(UdpSettings),
    /// Direct server return (`dsr_if`): frames forwarded on an interface (see `crate::dsr`).
    Dsr(DsrSettings),
}

impl Default for ListenerKind {
    fn default() -> ListenerKind {
        ListenerKind::Stream(StreamKind::default())
    }
}

/// A stream listener: what its clients speak, and what is read before it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct StreamKind {
    /// TLS termination (`tls = { ... }`, Pen's `-E`/`-K`): clients speak TLS to this listener.
    pub tls: Option<TlsSettings>,
    /// Trusted upstream proxies (`accept_proxy = ["CIDR", ...]`): a client from one of these
    /// networks must start with a PROXY header, whose address then stands for the client; any
    /// other client is closed at accept. Empty: no PROXY header is read.
    pub accept_proxy: Vec<Net>,
    pub proto: StreamProto,
}

/// What a stream listener's clients speak (inside TLS when it terminates TLS).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // As `ListenerKind`: built once per load, read often.
pub(crate) enum StreamProto {
    /// Bytes relayed both ways to one server.
    #[default]
    Tcp,
    /// HTTP/1.x (`-H`, `protocol = "http"`): its HTTP settings.
    Http(HttpSettings),
}

/// A DSR listener's settings (Pen's `dsr_if`, `dsr_ip`, `dsr_wait`, `tarpit_acl`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DsrSettings {
    /// `dsr_if`: the interface frames arrive on and leave by. None only while control commands
    /// are applied one by one (`dsr_wait 5` before `dsr_if eth0`, as Pen takes them):
    /// `validate` refuses a listener still without one.
    pub interface: Option<String>,
    /// `dsr_ip`: the virtual address (default: the listen address).
    pub ip: Option<Ipv4Addr>,
    /// `dsr_wait MS`: how long the kernel holds a receive-ring block that does not fill before
    /// handing it to Quill (None: [`DEFAULT_DSR_WAIT`]); see `parse_dsr_wait`.
    pub wait: Option<Duration>,
    /// `tarpit_acl N`: clients that ACL N denies get a tarpit instead of a server.
    pub tarpit_acl: Option<AclId>,
}

impl DsrSettings {
    /// A DSR listener on `interface` with every other setting at its default.
    pub(crate) fn on(interface: Option<String>) -> DsrSettings {
        DsrSettings {
            interface,
            ip: None,
            wait: None,
            tarpit_acl: None,
        }
    }

    /// The interface's name (empty while none is named).
    pub(crate) fn ifname(&self) -> &str {
        self.interface.as_deref().unwrap_or_default()
    }

    /// Why settings without an interface are refused.
    pub(crate) fn needs_if(&self) -> &'static str {
        if self.ip.is_some() || self.tarpit_acl.is_some() {
            DSR_IP_NEEDS_IF
        } else {
            DSR_WAIT_NEEDS_IF
        }
    }

    /// Whether nothing DSR is set any more (`no dsr_if` and the others given back).
    fn is_empty(&self) -> bool {
        self.interface.is_none()
            && self.ip.is_none()
            && self.wait.is_none()
            && self.tarpit_acl.is_none()
    }
}

/// `dsr_wait`'s default: measured in `bench/dsr.sh` (docs/benchmarks.md#direct-server-return), 2 ms
/// kept Quill's CPU per GiB at about a tenth of TCP mode's; 1 ms cost half as much again, 4 ms
/// slowed downloads.
pub(crate) const DEFAULT_DSR_WAIT: Duration = Duration::from_millis(2);

/// The flows a DSR listener on a Maglev table tracks (`quill_core::conntrack`, 32 bytes each: 2
/// MiB), ...
pub(crate) const DSR_FLOWS: usize = 65_536;
/// ... each until it has sent no frame for this long (then it takes the table's answer again: the
/// same server unless the available servers changed meanwhile).
pub(crate) const DSR_FLOW_IDLE: Duration = Duration::from_secs(120);

impl ListenerKind {
    /// A stream listener speaking HTTP with `settings`, without TLS.
    pub(crate) fn http(settings: HttpSettings) -> ListenerKind {
        ListenerKind::Stream(StreamKind {
            proto: StreamProto::Http(settings),
            ..StreamKind::default()
        })
    }
}

impl ListenerConfig {
    /// Whether its clients speak first: HTTP, TLS, a PROXY header, or a TLS ClientHello that
    /// SNI routes read. A plain TCP listener's server may speak first (SMTP, MySQL).
    pub(crate) fn client_speaks_first(&self) -> bool {
        self.stream().is_some_and(|s| {
            s.tls.is_some()
                || !s.accept_proxy.is_empty()
                || matches!(s.proto, StreamProto::Http(_))
                || !self.routes.is_empty()
        })
    }

    /// Whether its socket accepts a client only once the client's first bytes are in
    /// (TCP_DEFER_ACCEPT): `defer_accept` (on by default) where clients speak first. A client
    /// is then read at accept, with no wake-up of its own; one that sends nothing is accepted
    /// after about a second all the same.
    pub(crate) fn defers_accept(&self) -> bool {
        self.tuning.defer_accept && self.client_speaks_first()
    }

    /// The stream listener's settings; None for UDP and DSR.
    pub(crate) fn stream(&self) -> Option<&StreamKind> {
        match &self.kind {
            ListenerKind::Stream(s) => Some(s),
            _ => None,
        }
    }

    /// The stream listener's settings to change; None for UDP and DSR.
    pub(crate) fn stream_mut(&mut self) -> Option<&mut StreamKind> {
        match &mut self.kind {
            ListenerKind::Stream(s) => Some(s),
            _ => None,
        }
    }

    /// An HTTP listener's settings; None for any other kind.
    pub(crate) fn http(&self) -> Option<&HttpSettings> {
        match self.stream()?.proto {
            StreamProto::Http(ref h) => Some(h),
            StreamProto::Tcp => None,
        }
    }

    /// Whether this is an HTTP listener.
    pub(crate) fn is_http(&self) -> bool {
        self.http().is_some()
    }

    /// A stream listener's TLS termination; None when its clients speak in clear, or for UDP
    /// and DSR.
    pub(crate) fn tls(&self) -> Option<&TlsSettings> {
        self.stream()?.tls.as_ref()
    }

    /// Sets a stream listener's TLS termination (Pen's `-E`); a listener of another kind has
    /// none to set, and is left as it is.
    pub(crate) fn set_tls(&mut self, tls: Option<TlsSettings>) {
        if let Some(s) = self.stream_mut() {
            s.tls = tls;
        }
    }

    /// A UDP listener's flow settings; None for any other kind.
    pub(crate) fn udp(&self) -> Option<&UdpSettings> {
        match &self.kind {
            ListenerKind::Udp(u) => Some(u),
            _ => None,
        }
    }

    /// A DSR listener's settings (its interface named); None for any other kind.
    pub(crate) fn dsr(&self) -> Option<&DsrSettings> {
        match &self.kind {
            ListenerKind::Dsr(d) if d.interface.is_some() => Some(d),
            _ => None,
        }
    }
}

/// Why `dsr_ip` or `tarpit_acl` cannot be set: the listener is not a DSR listener.
pub(crate) const DSR_IP_NEEDS_IF: &str = "dsr_ip and tarpit_acl need dsr_if";
/// Why `dsr_wait` cannot be set: the listener is not a DSR listener.
pub(crate) const DSR_WAIT_NEEDS_IF: &str = "dsr_wait needs dsr_if";

/// The changes of kind the control language makes (`http`, `no http`, `dsr_if`, `dsr_ip`,
/// `dsr_wait`, `tarpit_acl`). A change that would mix two kinds is refused with the reason,
/// in the words `validate` uses, and changes nothing.
impl ListenerConfig {
    /// `http`: a TCP listener becomes an HTTP listener with the default settings (its TLS
    /// kept); an HTTP listener stays as it is.
    pub(crate) fn make_http(&mut self) -> Result<(), String> {
        match &mut self.kind {
            ListenerKind::Stream(s) => {
                if let StreamProto::Tcp = s.proto {
                    s.proto = StreamProto::Http(HttpSettings::default());
                }
                Ok(())
            }
            // Settings given before their `dsr_if`: what is missing is said first, as
            // `validate` would.
            ListenerKind::Dsr(d) if d.interface.is_none() => Err(d.needs_if().into()),
            ListenerKind::Dsr(_) => Err(NOT_HTTP_OR_TLS.into()),
            ListenerKind::Udp(_) => Err("http: a UDP listener relays datagrams, not HTTP".into()),
        }
    }

    /// `no http`: an HTTP listener becomes a TCP listener (its TLS kept); any other is left
    /// as it is.
    pub(crate) fn make_tcp(&mut self) {
        if let Some(s) = self.stream_mut() {
            s.proto = StreamProto::Tcp;
        }
    }

    /// `dsr_if NAME` and `no dsr_if` (see [`ListenerConfig::set_dsr`]).
    pub(crate) fn set_dsr_if(&mut self, interface: Option<String>) -> Result<(), String> {
        let setting = interface.is_some();
        self.set_dsr(setting, NOT_HTTP_OR_TLS, |d| d.interface = interface)
    }

    /// A DSR setting changed by `change` (`dsr_if`, `dsr_ip`, `dsr_wait`, `tarpit_acl`). A
    /// plain TCP listener given one becomes a DSR listener (Pen takes them in any order, the
    /// interface last if need be); a DSR listener left with none becomes a TCP listener again.
    /// A listener of another kind has none to take away, and `needs` says why it cannot take
    /// one.
    pub(crate) fn set_dsr(
        &mut self,
        setting: bool,
        needs: &str,
        change: impl FnOnce(&mut DsrSettings),
    ) -> Result<(), String> {
        let plain = !self.is_pool()
            && matches!(&self.kind, ListenerKind::Stream(s) if *s == StreamKind::default());
        match &mut self.kind {
            ListenerKind::Dsr(d) => change(d),
            _ if !setting => return Ok(()),
            _ if plain => {
                let mut d = DsrSettings::on(None);
                change(&mut d);
                self.kind = ListenerKind::Dsr(d);
            }
            ListenerKind::Stream(s) if !s.accept_proxy.is_empty() && needs == NOT_HTTP_OR_TLS => {
                return Err(
                    "dsr_if: direct server return forwards frames, it reads no PROXY header (accept_proxy)".into(),
                )
            }
            ListenerKind::Udp(_) if needs == NOT_HTTP_OR_TLS => {
                return Err("dsr_if: a UDP listener relays datagrams, not frames".into())
            }
            _ => return Err(needs.into()),
        }
        if let ListenerKind::Dsr(d) = &self.kind {
            if d.is_empty() {
                self.kind = ListenerKind::default();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "kind_tests.rs"]
mod tests;
