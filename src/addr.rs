//! Addresses in Pen's syntax: the listen address (`[HOST:]PORT`, `[v6]:PORT` or `/path.sock`) and
//! server specs (`HOST[:PORT[:MAXCONN[:HARD[:WEIGHT[:PRIO]]]]]`, a host containing `/` being a Unix
//! socket path). Parsing is pure; name resolution happens once, at start-up or reload, never on a
//! worker. The one exception is socket-proxyd's form, whose server name stays a `BackendAddr::Name`
//! and is resolved again for every session, on the runtime's resolver threads.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use crate::acl::AclId;

/// Where a listener accepts clients.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// Where a backend is reached.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum BackendAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
    /// A Linux abstract Unix socket (`@name`).
    Abstract(String),
    /// A host name resolved again for each session, as systemd-socket-proxyd does (so a server
    /// that moves is followed without a restart). Only socket-proxyd's form makes these.
    Name {
        host: String,
        port: u16,
    },
}

/// The largest MAXCONN or HARD a server may have (and any session limit Quill takes): more sessions
/// than a process can hold descriptors for (two per session) is a typo.
pub(crate) const MAX_SESSIONS: u32 = 1_000_000;
/// The largest WEIGHT or PRIO a server may have.
pub(crate) const MAX_WEIGHT: u32 = 1_000_000;

/// One server as given on the command line or in a config file, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ServerSpec {
    pub addr: BackendAddr,
    /// Soft limit on sessions; 0 = none.
    pub max: u32,
    /// Higher limit that only tracked (returning) clients may use; 0 = none.
    pub hard: u32,
    /// Used by weighted selection; 0 = never chosen there.
    pub weight: u32,
    /// Used by prio selection; lowest wins.
    pub prio: u32,
    /// Pen's per-server ACL: only clients it permits may use this server.
    pub acl: Option<AclId>,
    /// What the operator asked of this server (`server N drain|disable|enable`).
    pub state: AdminState,
    /// What identifies it to Maglev tables when not its address: a discovered SRV record's
    /// `TARGET:PORT`.
    pub identity: Option<String>,
}

/// The operator's say over a server, kept apart from what health checks and failures decide.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) enum AdminState {
    #[default]
    Enabled,
    /// No new sessions; open ones finish.
    Drain,
    /// No new sessions (open ones also finish: a session is never cut by a state change).
    Disabled,
}

impl AdminState {
    pub(crate) fn name(self) -> &'static str {
        match self {
            AdminState::Enabled => "enabled",
            AdminState::Drain => "drain",
            AdminState::Disabled => "disabled",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<AdminState> {
        Some(match s {
            "enabled" | "enable" => AdminState::Enabled,
            "drain" => AdminState::Drain,
            "disabled" | "disable" => AdminState::Disabled,
            _ => return None,
        })
    }
}

impl ServerSpec {
    /// A server at `addr` with Pen's defaults (no limits, weight 1, prio 0).
    pub(crate) fn new(addr: BackendAddr) -> ServerSpec {
        ServerSpec {
            addr,
            max: 0,
            hard: 0,
            weight: 1,
            prio: 0,
            acl: None,
            state: AdminState::Enabled,
            identity: None,
        }
    }
}

/// Why an address or server spec was rejected. `Resolve` is a runtime failure (exit 1), the other
/// kinds are usage errors (exit 2).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum AddrError {
    #[error("invalid {what} '{value}': {why}")]
    Syntax {
        what: &'static str,
        value: String,
        why: String,
    },
    #[error("cannot resolve '{0}'")]
    Resolve(String),
}

impl AddrError {
    fn syntax(what: &'static str, value: &str, why: impl Into<String>) -> AddrError {
        AddrError::Syntax {
            what,
            value: value.to_string(),
            why: why.into(),
        }
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Tcp(a) => write!(f, "{a}"),
            ListenAddr::Unix(p) => write!(f, "{}", p.display()),
        }
    }
}

impl fmt::Display for BackendAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendAddr::Tcp(a) => write!(f, "{a}"),
            BackendAddr::Unix(p) => write!(f, "{}", p.display()),
            BackendAddr::Abstract(name) => write!(f, "@{name}"),
            BackendAddr::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

impl ListenAddr {
    /// The TCP port, used as the default port of servers that name none.
    pub(crate) fn port(&self) -> Option<u16> {
        match self {
            ListenAddr::Tcp(a) => Some(a.port()),
            ListenAddr::Unix(_) => None,
        }
    }
}

/// Parses `[HOST:]PORT`, `[v6]:PORT` or a path containing `/`. A bare port listens on all IPv4
/// addresses, as Pen does.
pub(crate) fn parse_listen(value: &str) -> Result<ListenAddr, AddrError> {
    if value.contains('/') {
        return Ok(ListenAddr::Unix(PathBuf::from(value)));
    }
    let (host, port) = split_host_port(value, "listen address")?;
    let Some(port) = port else {
        let port = parse_port(host, "listen address", value)?;
        return Ok(ListenAddr::Tcp(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port,
        )));
    };
    let port = parse_port(port, "listen address", value)?;
    if host.is_empty() {
        return Ok(ListenAddr::Tcp(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port,
        )));
    }
    resolve(host, port).map(ListenAddr::Tcp)
}

/// Parses a Pen server spec; `default_port` is the listen port (None for a Unix listener).
pub(crate) fn parse_server(
    value: &str,
    default_port: Option<u16>,
) -> Result<ServerSpec, AddrError> {
    const WHAT: &str = "server";
    let (host, rest) = split_host_rest(value)?;
    let fields: Vec<&str> = match rest {
        Some(rest) => rest.split(':').collect(),
        None => Vec::new(),
    };
    if fields.len() > 5 {
        return Err(AddrError::syntax(
            WHAT,
            value,
            "too many fields (HOST:PORT:MAXCONN:HARD:WEIGHT:PRIO)",
        ));
    }
    let number = |i: usize, name: &str, default: u32, most: u32| -> Result<u32, AddrError> {
        match fields.get(i) {
            None | Some(&"") => Ok(default),
            Some(s) => match s.parse::<u32>() {
                Ok(n) if n <= most => Ok(n),
                Ok(_) => Err(AddrError::syntax(
                    WHAT,
                    value,
                    format!("{name} '{s}' is more than {most}"),
                )),
                Err(_) => Err(AddrError::syntax(
                    WHAT,
                    value,
                    format!("{name} '{s}' is not a number"),
                )),
            },
        }
    };
    let (max, hard, weight, prio) = (
        number(1, "MAXCONN", 0, MAX_SESSIONS)?,
        number(2, "HARD", 0, MAX_SESSIONS)?,
        number(3, "WEIGHT", 1, MAX_WEIGHT)?,
        number(4, "PRIO", 0, MAX_WEIGHT)?,
    );
    if host.is_empty() {
        return Err(AddrError::syntax(WHAT, value, "empty host"));
    }
    let addr = if host.contains('/') {
        BackendAddr::Unix(PathBuf::from(host))
    } else {
        let port = match fields.first() {
            Some(p) if !p.is_empty() => parse_port(p, WHAT, value)?,
            _ => default_port.ok_or_else(|| {
                AddrError::syntax(WHAT, value, "no port (the listener has none to lend)")
            })?,
        };
        BackendAddr::Tcp(server_ip(resolve(host, port)?, value)?)
    };
    Ok(ServerSpec {
        max,
        hard,
        weight,
        prio,
        ..ServerSpec::new(addr)
    })
}

/// Parses socket-proxyd's server argument: `HOST[:PORT]` (port 80 when none is given), a path
/// (`/run/app.sock`) or an abstract socket (`@name`). An IP literal is used as it is; a host name is
/// kept as a `Name` and never resolved here (socket-proxyd resolves it for each connection).
pub(crate) fn parse_proxyd_target(value: &str) -> Result<ServerSpec, AddrError> {
    const WHAT: &str = "server";
    if let Some(name) = value.strip_prefix('@') {
        if name.is_empty() {
            return Err(AddrError::syntax(WHAT, value, "empty abstract socket name"));
        }
        return Ok(ServerSpec::new(BackendAddr::Abstract(name.to_string())));
    }
    if value.starts_with('/') {
        return Ok(ServerSpec::new(BackendAddr::Unix(PathBuf::from(value))));
    }
    let (host, port) = split_host_port(value, WHAT)?;
    let port = match port {
        Some(p) => parse_port(p, WHAT, value)?,
        None => 80,
    };
    if let Ok(ip) = host.parse::<IpAddr>() {
        let addr = server_ip(SocketAddr::new(ip, port), value)?;
        return Ok(ServerSpec::new(BackendAddr::Tcp(addr)));
    }
    if !is_host_name(host) {
        return Err(AddrError::syntax(
            WHAT,
            value,
            "expected HOST[:PORT], [v6addr]:PORT, /path or @abstract",
        ));
    }
    Ok(ServerSpec::new(BackendAddr::Name {
        host: host.to_string(),
        port,
    }))
}

/// Whether `host` can be a DNS or /etc/hosts name: dot-separated labels of letters, digits,
/// `-` and `_`, at most 253 bytes. Anything else is a typo, refused before it reaches a resolver.
fn is_host_name(host: &str) -> bool {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    !host.is_empty() && host.len() <= 253 && host.trim_end_matches('.').split('.').all(label_ok)
}

/// Parses a plain `HOST:PORT` or path (the emergency and abuse servers).
pub(crate) fn parse_backend(value: &str) -> Result<BackendAddr, AddrError> {
    if value.contains('/') {
        return Ok(BackendAddr::Unix(PathBuf::from(value)));
    }
    let (host, port) = split_host_port(value, "server address")?;
    let port =
        port.ok_or_else(|| AddrError::syntax("server address", value, "expected HOST:PORT"))?;
    let port = parse_port(port, "server address", value)?;
    server_ip(resolve(host, port)?, value).map(BackendAddr::Tcp)
}

/// Parses the address alone of an existing server (`server N address X`): `HOST`, `HOST:PORT`,
/// `[v6]`, `[v6]:PORT` or a path. Anything after the port (`1.2.3.4:1:2:3`) is refused, not
/// dropped: limits are set with their own words (`max`, `hard`, `weight`, `prio`).
pub(crate) fn parse_server_address(
    value: &str,
    default_port: Option<u16>,
) -> Result<BackendAddr, AddrError> {
    if !value.contains('/') {
        if let (_, Some(rest)) = split_host_rest(value)? {
            if rest.contains(':') {
                return Err(AddrError::syntax(
                    "server address",
                    value,
                    "expected HOST[:PORT] (set limits with max, hard, weight, prio)",
                ));
            }
        }
    }
    parse_server(value, default_port).map(|spec| spec.addr)
}

/// Refuses an address no server can have: unspecified (`0.0.0.0`, `::`: the kernel would connect
/// to this host), broadcast or multicast. IPv4-mapped IPv6 forms are judged as IPv4.
fn server_ip(addr: SocketAddr, value: &str) -> Result<SocketAddr, AddrError> {
    let ip = match addr.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr.ip(), IpAddr::V4),
        v4 => v4,
    };
    let why = if ip.is_unspecified() {
        "it is the unspecified address"
    } else if ip.is_multicast() {
        "it is multicast"
    } else if ip == IpAddr::V4(Ipv4Addr::BROADCAST) {
        "it is the broadcast address"
    } else {
        return Ok(addr);
    };
    Err(AddrError::syntax(
        "server",
        value,
        format!("{ip} is not a server address ({why})"),
    ))
}

/// Splits `host:port`, `[v6]:port`, or a lone token (returned as host, port None).
fn split_host_port<'a>(
    value: &'a str,
    what: &'static str,
) -> Result<(&'a str, Option<&'a str>), AddrError> {
    let (host, rest) = split_host_rest(value)?;
    match rest {
        None => Ok((host, None)),
        Some(rest) if rest.contains(':') => {
            Err(AddrError::syntax(what, value, "expected HOST:PORT"))
        }
        Some(rest) => Ok((host, Some(rest))),
    }
}

/// Splits the host (bracketed IPv6 allowed) from everything after the first colon that follows it.
fn split_host_rest(value: &str) -> Result<(&str, Option<&str>), AddrError> {
    if let Some(inner) = value.strip_prefix('[') {
        let Some(end) = inner.find(']') else {
            return Err(AddrError::syntax("address", value, "missing ']'"));
        };
        let host = &inner[..end];
        let after = &inner[end + 1..];
        return match after.strip_prefix(':') {
            Some(rest) => Ok((host, Some(rest))),
            None if after.is_empty() => Ok((host, None)),
            None => Err(AddrError::syntax(
                "address",
                value,
                "unexpected text after ']'",
            )),
        };
    }
    Ok(match value.split_once(':') {
        Some((host, rest)) => (host, Some(rest)),
        None => (value, None),
    })
}

fn parse_port(port: &str, what: &'static str, value: &str) -> Result<u16, AddrError> {
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(AddrError::syntax(
            what,
            value,
            format!("'{port}' is not a port (1-65535)"),
        )),
    }
}

/// Resolves a host name or literal; the first address wins, as Pen does.
fn resolve(host: &str, port: u16) -> Result<SocketAddr, AddrError> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(AddrError::syntax("host", host, "empty or contains spaces"));
    }
    if cfg!(test) {
        // Unit tests never send traffic off the machine, not even a DNS query.
        return Err(AddrError::Resolve(host.to_string()));
    }
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| AddrError::Resolve(host.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(s: &str) -> BackendAddr {
        BackendAddr::Tcp(s.parse().unwrap())
    }

    #[test]
    fn server_specs_parse_like_pen() {
        let check = |input: &str, addr: BackendAddr, fields: [u32; 4]| {
            let spec = parse_server(input, Some(8080)).unwrap();
            assert_eq!(spec.addr, addr, "{input}");
            assert_eq!(
                [spec.max, spec.hard, spec.weight, spec.prio],
                fields,
                "{input}"
            );
        };
        check("10.0.0.1", tcp("10.0.0.1:8080"), [0, 0, 1, 0]);
        check("10.0.0.1:81", tcp("10.0.0.1:81"), [0, 0, 1, 0]);
        check("10.0.0.1:81:10:20:3:1", tcp("10.0.0.1:81"), [10, 20, 3, 1]);
        check("10.0.0.1::5", tcp("10.0.0.1:8080"), [5, 0, 1, 0]);
        check("[::1]:81:0:0:2", tcp("[::1]:81"), [0, 0, 2, 0]);
        check(
            "/run/app.sock",
            BackendAddr::Unix("/run/app.sock".into()),
            [0, 0, 1, 0],
        );
    }

    #[test]
    fn bad_server_specs_name_the_value() {
        for bad in [
            "10.0.0.1:http",
            "10.0.0.1:0",
            "10.0.0.1:1:x",
            "[::1",
            "10.0.0.1:1:1:1:1:1:1",
            ":80",
        ] {
            let err = parse_server(bad, Some(80)).unwrap_err().to_string();
            assert!(err.contains(bad), "{err}");
        }
    }

    #[test]
    fn addresses_no_server_can_have_and_oversized_fields_are_refused() {
        for bad in [
            "0.0.0.0:80",
            "[::]:80",
            "[::ffff:0.0.0.0]:80",
            "255.255.255.255:80",
            "224.0.0.1:80",
            "[ff02::1]:80",
            "10.0.0.1:80:1000001",
            "10.0.0.1:80:0:0:4294967295",
            "10.0.0.1:80:0:0:1:1000001",
        ] {
            let err = parse_server(bad, Some(80)).unwrap_err().to_string();
            assert!(err.contains(bad), "{err}");
        }
        assert!(parse_backend("0.0.0.0:80").is_err());
        assert!(parse_proxyd_target("255.255.255.255").is_err());
        assert_eq!(
            parse_server_address("127.0.0.1:81", Some(80)).unwrap(),
            tcp("127.0.0.1:81")
        );
        assert_eq!(
            parse_server_address("[::1]", Some(80)).unwrap(),
            tcp("[::1]:80")
        );
        for junk in ["127.0.0.1:1:2:3", "127.0.0.1:1:", "[::1]:1:2"] {
            let err = parse_server_address(junk, Some(80))
                .unwrap_err()
                .to_string();
            assert!(err.contains(junk), "{err}");
        }
    }

    #[test]
    fn proxyd_targets_parse_like_socket_proxyd() {
        let check = |input: &str, addr: BackendAddr| {
            assert_eq!(parse_proxyd_target(input).unwrap().addr, addr, "{input}");
        };
        check("10.0.0.1", tcp("10.0.0.1:80"));
        check("10.0.0.1:8080", tcp("10.0.0.1:8080"));
        check("[::1]", tcp("[::1]:80"));
        check("[::1]:81", tcp("[::1]:81"));
        check("/run/app.sock", BackendAddr::Unix("/run/app.sock".into()));
        check("@app", BackendAddr::Abstract("app".into()));
        let name = |host: &str, port| BackendAddr::Name {
            host: host.into(),
            port,
        };
        check("localhost", name("localhost", 80));
        check("app.internal:8080", name("app.internal", 8080));
        check("my_host.example.", name("my_host.example.", 80));
        assert_eq!(name("app", 81).to_string(), "app:81");
    }

    #[test]
    fn bad_proxyd_targets_name_the_value() {
        for bad in [
            "@",
            "host:0",
            "host:http",
            "host:80:5",
            "a b",
            "",
            "::1",
            "relative/path",
            "bad..name",
            "[::1",
        ] {
            let err = parse_proxyd_target(bad).unwrap_err();
            assert!(matches!(err, AddrError::Syntax { .. }), "{bad}: {err}");
            assert!(err.to_string().contains(&format!("'{bad}'")), "{err}");
        }
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen("8080").unwrap(),
            ListenAddr::Tcp("0.0.0.0:8080".parse().unwrap())
        );
        assert_eq!(
            parse_listen("127.0.0.1:80").unwrap(),
            ListenAddr::Tcp("127.0.0.1:80".parse().unwrap())
        );
        assert_eq!(
            parse_listen("[::1]:80").unwrap(),
            ListenAddr::Tcp("[::1]:80".parse().unwrap())
        );
        assert_eq!(
            parse_listen("/tmp/q.sock").unwrap(),
            ListenAddr::Unix("/tmp/q.sock".into())
        );
        assert!(parse_listen("99999").is_err());
        assert!(parse_listen("abc").is_err());
    }
}
