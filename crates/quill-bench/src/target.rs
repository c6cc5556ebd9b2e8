//! What `quill bench` loads (`http://`, `tcp://` or `udp://` URLs) and from where (`--sources A-B`).
//! Names are resolved here, once, before the run.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};

/// A resolved target and the protocol spoken to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The URL as given (for reports).
    pub url: String,
    pub addr: SocketAddr,
    pub proto: Proto,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proto {
    /// HTTP/1.1 GET of `path` with `Host: host`.
    Http { host: String, path: String },
    /// Send a line, read a line.
    Tcp,
    /// Send a datagram, wait for the same datagram back (see `engine::udp`).
    Udp,
}

/// The line sent in tcp mode.
pub(crate) const TCP_LINE: &[u8] = b"quill-bench\n";

impl Target {
    /// The bytes of one request, built once per run and reused for every request.
    pub fn request(&self, keepalive: bool) -> Vec<u8> {
        match &self.proto {
            Proto::Http { host, path } => {
                // As small as HTTP/1.1 allows (keep-alive is its default), so the server under
                // test spends as little as possible on parsing and the figures compare with wrk's.
                let connection = if keepalive {
                    ""
                } else {
                    "Connection: close\r\n"
                };
                format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{connection}\r\n").into_bytes()
            }
            // UDP builds its own datagram (`--size`); the line is never sent.
            Proto::Tcp | Proto::Udp => TCP_LINE.to_vec(),
        }
    }

    pub fn is_http(&self) -> bool {
        matches!(self.proto, Proto::Http { .. })
    }

    pub fn is_udp(&self) -> bool {
        self.proto == Proto::Udp
    }
}

/// Parses and resolves `http://HOST[:PORT][/PATH]`, `tcp://HOST:PORT` or `udp://HOST:PORT`.
pub(crate) fn parse_target(s: &str) -> Result<Target, String> {
    let bad = |why: &str| format!("invalid target '{s}': {why}");
    let (scheme, rest) = s
        .split_once("://")
        .ok_or_else(|| bad("expected http://HOST:PORT/PATH, tcp://HOST:PORT or udp://HOST:PORT"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return Err(bad("no host"));
    }
    let default_port = match scheme {
        "http" => Some(80),
        "tcp" | "udp" => None,
        "https" => return Err(bad("https is not supported")),
        _ => return Err(bad("the scheme must be http, tcp or udp")),
    };
    let with_port = if has_port(authority) {
        authority.to_string()
    } else {
        let port = default_port.ok_or_else(|| bad(&format!("{scheme}:// needs a port")))?;
        format!("{authority}:{port}")
    };
    let addr = with_port
        .to_socket_addrs()
        .map_err(|e| bad(&e.to_string()))?
        .next()
        .ok_or_else(|| bad("the name has no address"))?;
    if path
        .bytes()
        .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
    {
        return Err(bad("the path contains spaces or control characters"));
    }
    let proto = match scheme {
        "http" => Proto::Http {
            host: authority.to_string(),
            path: path.to_string(),
        },
        _ if path != "/" => return Err(bad(&format!("{scheme}:// takes no path"))),
        "udp" => Proto::Udp,
        _ => Proto::Tcp,
    };
    Ok(Target {
        url: s.to_string(),
        addr,
        proto,
    })
}

/// `host:port` or `[v6]:port` (a bare IPv6 address without brackets has no port).
fn has_port(authority: &str) -> bool {
    match authority.rfind(']') {
        Some(close) => authority[close..].contains(':'),
        None => authority.matches(':').count() == 1,
    }
}

/// An inclusive range of IPv4 source addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sources {
    pub first: Ipv4Addr,
    pub last: Ipv4Addr,
}

/// Most addresses a range may hold (a /16).
const MAX_SOURCES: u32 = 65_536;

impl Sources {
    pub fn addresses(&self) -> Vec<IpAddr> {
        (u32::from(self.first)..=u32::from(self.last))
            .map(|a| IpAddr::V4(Ipv4Addr::from(a)))
            .collect()
    }
}

/// Parses `A-B` (or a single address `A`), IPv4, A ≤ B.
pub(crate) fn parse_sources(s: &str) -> Result<Sources, String> {
    let bad = |why: &str| format!("invalid source range '{s}': {why}");
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let first: Ipv4Addr = a
        .trim()
        .parse()
        .map_err(|_| bad("expected A-B, e.g. 127.0.0.1-127.0.0.50"))?;
    let last: Ipv4Addr = b
        .trim()
        .parse()
        .map_err(|_| bad("expected A-B, e.g. 127.0.0.1-127.0.0.50"))?;
    let (lo, hi) = (u32::from(first), u32::from(last));
    if lo > hi {
        return Err(bad("the first address is above the last"));
    }
    if hi - lo >= MAX_SOURCES {
        return Err(bad("more than 65536 addresses"));
    }
    Ok(Sources { first, last })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_target_defaults_port_80_and_path_slash() {
        let t = parse_target("http://127.0.0.1").unwrap();
        assert_eq!(t.addr, "127.0.0.1:80".parse().unwrap());
        let req = String::from_utf8(t.request(false)).unwrap();
        assert!(
            req.starts_with("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"),
            "{req}"
        );
        assert!(req.ends_with("Connection: close\r\n\r\n"));
    }

    #[test]
    fn http_target_keeps_path_and_port() {
        let t = parse_target("http://127.0.0.1:8080/a/b?c=1").unwrap();
        assert_eq!(t.addr.port(), 8080);
        assert_eq!(
            t.proto,
            Proto::Http {
                host: "127.0.0.1:8080".into(),
                path: "/a/b?c=1".into()
            }
        );
    }

    #[test]
    fn bad_targets_name_the_value() {
        for s in [
            "127.0.0.1:80",
            "ftp://x:1",
            "tcp://127.0.0.1",
            "tcp://127.0.0.1:1/x",
            "udp://127.0.0.1",
            "udp://127.0.0.1:1/x",
            "http://",
        ] {
            let e = parse_target(s).unwrap_err();
            assert!(e.contains(s), "{e}");
        }
    }

    #[test]
    fn tcp_and_ipv6_targets() {
        assert_eq!(parse_target("tcp://127.0.0.1:9").unwrap().proto, Proto::Tcp);
        let udp = parse_target("udp://127.0.0.1:53").unwrap();
        assert!(udp.is_udp() && !udp.is_http());
        assert_eq!(udp.addr, "127.0.0.1:53".parse().unwrap());
        assert_eq!(
            parse_target("tcp://[::1]:9").unwrap().addr,
            "[::1]:9".parse().unwrap()
        );
    }

    #[test]
    fn source_ranges() {
        let s = parse_sources("127.0.0.1-127.0.0.3").unwrap();
        assert_eq!(s.addresses().len(), 3);
        assert_eq!(parse_sources("127.0.0.9").unwrap().addresses().len(), 1);
        assert!(parse_sources("127.0.0.3-127.0.0.1").is_err());
        assert!(parse_sources("10.0.0.0-10.2.0.0").is_err());
        assert!(parse_sources("x-y").unwrap_err().contains("x-y"));
    }
}
