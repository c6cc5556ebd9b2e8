//! The PROXY protocol header (docs/design.md#proxy-protocol), versions 1 (text) and 2 (binary):
//! read from the bytes a trusted upstream load balancer sends first, and written before the first
//! bytes Quill sends to a server, so that the client's address travels with the connection.
//!
//! Pure: no sockets, no clock, no allocation. [`parse`] takes what has arrived so far and answers
//! [`Parse::Incomplete`] until the whole header is there, [`Parse::Invalid`] with the reason as
//! soon as the bytes cannot become a header (so a caller peeking with `MSG_PEEK` can stop early),
//! or [`Parse::Done`] with the addresses and how many bytes the header took: the caller consumes
//! exactly those, and whatever follows is the client's own data. Bounds: a v1 header is at most
//! [`MAX_V1`] bytes (its CRLF included), a v2 header at most [`MAX_V2`] (16 bytes and its
//! payload), so a caller that peeks [`MAX_V2`] bytes always has enough.
//!
//! The encoders ([`encode_v1`], [`encode_v2`], [`encode_local`]) write into an [`Encoded`] on the
//! stack: a header is at most 107 bytes, written with the client's first data in one `writev`.

use std::fmt;
use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

/// The longest v1 header, its CRLF included (the spec's bound; `TCP6` with the longest addresses
/// and ports takes 104).
pub const MAX_V1: usize = 107;
/// The longest v2 payload (addresses and TLVs) accepted, so a whole header fits in 2 KiB;
/// senders put a few small TLVs at most.
pub const MAX_V2_PAYLOAD: usize = 2048 - V2_FIXED;
/// The longest v2 header accepted: the 16 fixed bytes and [`MAX_V2_PAYLOAD`].
pub const MAX_V2: usize = V2_FIXED + MAX_V2_PAYLOAD;
/// The most bytes a caller ever needs to peek to read a whole header of either version.
pub const MAX_HEADER: usize = MAX_V2;

/// The 12 bytes every v2 header starts with.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
const V1_PREFIX: &[u8] = b"PROXY ";
const V2_FIXED: usize = 16;
const V2_VERSION: u8 = 0x20;
const CMD_LOCAL: u8 = 0x0;
const CMD_PROXY: u8 = 0x1;
const AF_UNSPEC: u8 = 0x0;
const AF_INET: u8 = 0x1;
const AF_INET6: u8 = 0x2;
const AF_UNIX: u8 = 0x3;
const INET_LEN: usize = 12;
const INET6_LEN: usize = 36;
const UNIX_LEN: usize = 216;
const TLV_HEADER: usize = 3;

/// Which version a header was, or is to be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    /// The text form, `PROXY TCP4 ...\r\n`.
    V1,
    /// The binary form, starting with [`V2_SIGNATURE`].
    V2,
}

impl Version {
    /// The name used in configuration: `v1` or `v2`.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        }
    }

    /// `v1` or `v2` (case-insensitive), as in configuration.
    pub fn from_name(name: &str) -> Option<Version> {
        if name.eq_ignore_ascii_case("v1") {
            Some(Version::V1)
        } else if name.eq_ignore_ascii_case("v2") {
            Some(Version::V2)
        } else {
            None
        }
    }
}

/// The transport a v2 header declares (v1 is always a stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// TCP (`SOCK_STREAM`).
    Stream,
    /// UDP (`SOCK_DGRAM`).
    Dgram,
}

/// What [`parse`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parse {
    /// The bytes so far are the start of a header: read more.
    Incomplete,
    /// The bytes are not (the start of) a valid header.
    Invalid(Invalid),
    /// A whole header.
    Done(Header),
}

/// A whole header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Its version.
    pub version: Version,
    /// The original client's (`src`) and the address it connected to (`dst`); `None` for a v2
    /// LOCAL header, a v1 `UNKNOWN` one, or a v2 address family without IP addresses (AF_UNSPEC,
    /// AF_UNIX): the connection's own peer address stands.
    pub addrs: Option<(SocketAddr, SocketAddr)>,
    /// How many bytes the header took; what follows is the client's data.
    pub consumed: usize,
}

/// Why bytes are not a valid PROXY header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// The bytes start neither with `PROXY ` nor with the v2 signature.
    NotProxy,
    /// A v1 header with no CRLF within [`MAX_V1`] bytes.
    V1TooLong,
    /// A v1 header whose protocol is not `TCP4`, `TCP6` or `UNKNOWN`.
    V1Protocol,
    /// A v1 header whose fields are not four, separated by single spaces, before the CRLF.
    V1Fields,
    /// A v1 address that is not of the protocol's family.
    V1Address,
    /// A v1 port that is not a decimal number from 0 to 65535 without leading zeros.
    V1Port,
    /// A v2 header whose version nibble is not 2.
    V2Version(u8),
    /// A v2 command other than LOCAL and PROXY.
    V2Command(u8),
    /// A v2 address family or transport that does not exist (the byte).
    V2Family(u8),
    /// A v2 payload longer than [`MAX_V2_PAYLOAD`] (its declared length).
    V2TooLong(usize),
    /// A v2 payload shorter than its address family's addresses.
    V2Short,
    /// A v2 TLV runs past the header's end.
    V2Tlv,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Invalid::NotProxy => f.write_str("not a PROXY protocol header"),
            Invalid::V1TooLong => write!(f, "PROXY v1 header without CRLF in {MAX_V1} bytes"),
            Invalid::V1Protocol => f.write_str("PROXY v1 protocol is not TCP4, TCP6 or UNKNOWN"),
            Invalid::V1Fields => f.write_str("PROXY v1 header fields are malformed"),
            Invalid::V1Address => f.write_str("PROXY v1 address is not of its protocol's family"),
            Invalid::V1Port => f.write_str("PROXY v1 port is not a number from 0 to 65535"),
            Invalid::V2Version(v) => write!(f, "PROXY v2 version nibble is {v}, not 2"),
            Invalid::V2Command(c) => write!(f, "PROXY v2 command {c} is not LOCAL or PROXY"),
            Invalid::V2Family(b) => {
                write!(f, "PROXY v2 family/transport byte 0x{b:02x} is unknown")
            }
            Invalid::V2TooLong(n) => {
                write!(f, "PROXY v2 payload of {n} bytes is over {MAX_V2_PAYLOAD}")
            }
            Invalid::V2Short => f.write_str("PROXY v2 payload is shorter than its addresses"),
            Invalid::V2Tlv => f.write_str("PROXY v2 TLV runs past the header"),
        }
    }
}

/// Reads a PROXY header (either version) from the start of `bytes`.
pub fn parse(bytes: &[u8]) -> Parse {
    let Some(&first) = bytes.first() else {
        return Parse::Incomplete;
    };
    if first == V1_PREFIX[0] {
        parse_v1(bytes)
    } else if first == V2_SIGNATURE[0] {
        parse_v2(bytes)
    } else {
        Parse::Invalid(Invalid::NotProxy)
    }
}

fn parse_v1(bytes: &[u8]) -> Parse {
    let head = &bytes[..bytes.len().min(V1_PREFIX.len())];
    if head != &V1_PREFIX[..head.len()] {
        return Parse::Invalid(Invalid::NotProxy);
    }
    let window = &bytes[..bytes.len().min(MAX_V1)];
    // The line ends at its first CR or LF; a LF without a CR before it
    // cannot be fixed by more bytes.
    let Some(cr) = window.iter().position(|&b| b == b'\r' || b == b'\n') else {
        if window.len() == MAX_V1 {
            return Parse::Invalid(Invalid::V1TooLong);
        }
        return Parse::Incomplete;
    };
    if window[cr] == b'\n' {
        return Parse::Invalid(Invalid::V1Fields);
    }
    match window.get(cr + 1) {
        None if cr + 1 >= MAX_V1 => return Parse::Invalid(Invalid::V1TooLong),
        None => return Parse::Incomplete,
        Some(b'\n') => {}
        Some(_) => return Parse::Invalid(Invalid::V1Fields),
    }
    if cr < V1_PREFIX.len() {
        return Parse::Invalid(Invalid::V1Fields);
    }
    let consumed = cr + 2;
    let line = &bytes[V1_PREFIX.len()..cr];
    let Ok(line) = std::str::from_utf8(line) else {
        return Parse::Invalid(Invalid::V1Fields);
    };
    let (proto, rest) = line.split_once(' ').unwrap_or((line, ""));
    let v6 = match proto {
        // Whatever follows UNKNOWN is ignored (the spec's words).
        "UNKNOWN" => {
            return Parse::Done(Header {
                version: Version::V1,
                addrs: None,
                consumed,
            })
        }
        "TCP4" => false,
        "TCP6" => true,
        _ => return Parse::Invalid(Invalid::V1Protocol),
    };
    let mut fields = rest.split(' ');
    let (Some(src), Some(dst), Some(sport), Some(dport), None) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return Parse::Invalid(Invalid::V1Fields);
    };
    let (Some(src), Some(dst)) = (v1_ip(src, v6), v1_ip(dst, v6)) else {
        return Parse::Invalid(Invalid::V1Address);
    };
    let (Some(sport), Some(dport)) = (v1_port(sport), v1_port(dport)) else {
        return Parse::Invalid(Invalid::V1Port);
    };
    Parse::Done(Header {
        version: Version::V1,
        addrs: Some((SocketAddr::new(src, sport), SocketAddr::new(dst, dport))),
        consumed,
    })
}

fn v1_ip(text: &str, v6: bool) -> Option<IpAddr> {
    if v6 {
        text.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
    } else {
        text.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
    }
}

fn v1_port(text: &str) -> Option<u16> {
    let ok = !text.is_empty()
        && text.len() <= 5
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if ok {
        text.parse().ok()
    } else {
        None
    }
}

fn parse_v2(bytes: &[u8]) -> Parse {
    let sig = &bytes[..bytes.len().min(V2_SIGNATURE.len())];
    if sig != &V2_SIGNATURE[..sig.len()] {
        return Parse::Invalid(Invalid::NotProxy);
    }
    let Some(&ver_cmd) = bytes.get(12) else {
        return Parse::Incomplete;
    };
    if ver_cmd & 0xf0 != V2_VERSION {
        return Parse::Invalid(Invalid::V2Version(ver_cmd >> 4));
    }
    let command = ver_cmd & 0x0f;
    if command != CMD_LOCAL && command != CMD_PROXY {
        return Parse::Invalid(Invalid::V2Command(command));
    }
    let Some(&fam) = bytes.get(13) else {
        return Parse::Incomplete;
    };
    let (family, transport) = (fam >> 4, fam & 0x0f);
    if family > AF_UNIX || transport > 2 || ((family == AF_UNSPEC) != (transport == 0)) {
        // AF_UNSPEC goes with UNSPEC only, and a real family with a real transport.
        return Parse::Invalid(Invalid::V2Family(fam));
    }
    let (Some(&hi), Some(&lo)) = (bytes.get(14), bytes.get(15)) else {
        return Parse::Incomplete;
    };
    let len = usize::from(u16::from_be_bytes([hi, lo]));
    if len > MAX_V2_PAYLOAD {
        return Parse::Invalid(Invalid::V2TooLong(len));
    }
    let addr_len = match family {
        AF_INET => INET_LEN,
        AF_INET6 => INET6_LEN,
        AF_UNIX => UNIX_LEN,
        _ => 0,
    };
    if len < addr_len {
        return Parse::Invalid(Invalid::V2Short);
    }
    let consumed = V2_FIXED + len;
    let Some(payload) = bytes.get(V2_FIXED..consumed) else {
        return Parse::Incomplete;
    };
    // The TLVs after the addresses are skipped, but each must fit (an AF_UNSPEC payload is
    // ignored whole: the spec leaves its contents open).
    let mut tlvs = if family == AF_UNSPEC {
        &[][..]
    } else {
        &payload[addr_len..]
    };
    while !tlvs.is_empty() {
        if tlvs.len() < TLV_HEADER {
            return Parse::Invalid(Invalid::V2Tlv);
        }
        let value = usize::from(u16::from_be_bytes([tlvs[1], tlvs[2]]));
        let Some(rest) = tlvs.get(TLV_HEADER + value..) else {
            return Parse::Invalid(Invalid::V2Tlv);
        };
        tlvs = rest;
    }
    let addrs = if command == CMD_LOCAL {
        None
    } else {
        match family {
            AF_INET => {
                let a = |i: usize| {
                    Ipv4Addr::new(payload[i], payload[i + 1], payload[i + 2], payload[i + 3])
                };
                let port = |i: usize| u16::from_be_bytes([payload[i], payload[i + 1]]);
                Some((
                    SocketAddr::new(a(0).into(), port(8)),
                    SocketAddr::new(a(4).into(), port(10)),
                ))
            }
            AF_INET6 => {
                let a = |i: usize| {
                    let mut o = [0u8; 16];
                    o.copy_from_slice(&payload[i..i + 16]);
                    Ipv6Addr::from(o)
                };
                let port = |i: usize| u16::from_be_bytes([payload[i], payload[i + 1]]);
                Some((
                    SocketAddr::new(a(0).into(), port(32)),
                    SocketAddr::new(a(16).into(), port(34)),
                ))
            }
            _ => None,
        }
    };
    Parse::Done(Header {
        version: Version::V2,
        addrs,
        consumed,
    })
}

/// The family (and transport) byte of a v2 header, for a caller that checks what it read.
pub fn v2_transport(bytes: &[u8]) -> Option<Transport> {
    match bytes.get(13)? & 0x0f {
        1 => Some(Transport::Stream),
        2 => Some(Transport::Dgram),
        _ => None,
    }
}

/// An encoded header, on the stack: at most [`MAX_V1`] bytes (a v2 header with IPv6 addresses
/// and no TLV takes 52).
#[derive(Clone, Copy)]
pub struct Encoded {
    bytes: [u8; MAX_V1],
    len: u8,
}

impl Encoded {
    /// The header's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    fn from_slice(parts: &[&[u8]]) -> Encoded {
        let mut e = Encoded {
            bytes: [0; MAX_V1],
            len: 0,
        };
        for part in parts {
            let at = usize::from(e.len);
            e.bytes[at..at + part.len()].copy_from_slice(part);
            e.len += part.len() as u8;
        }
        e
    }
}

impl fmt::Debug for Encoded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Encoded({:?})", self.as_bytes())
    }
}

/// Both addresses in one family: when one is IPv4 and the other IPv6, the IPv4 one is written as
/// an IPv4-mapped IPv6 address (a dual-stack listener's view of it).
fn same_family(src: SocketAddr, dst: SocketAddr) -> (SocketAddr, SocketAddr) {
    let v6 = |a: SocketAddr| match a {
        SocketAddr::V4(v4) => {
            SocketAddr::V6(SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0))
        }
        v6 => v6,
    };
    match (src, dst) {
        (SocketAddr::V4(_), SocketAddr::V4(_)) => (src, dst),
        _ => (v6(src), v6(dst)),
    }
}

/// A v1 header for a TCP connection from `src` (the client) to `dst` (the address it reached).
pub fn encode_v1(src: SocketAddr, dst: SocketAddr) -> Encoded {
    let (src, dst) = same_family(src, dst);
    let mut e = Encoded {
        bytes: [0; MAX_V1],
        len: 0,
    };
    let mut out: &mut [u8] = &mut e.bytes;
    let proto = if src.is_ipv4() { "TCP4" } else { "TCP6" };
    // The longest form fits in MAX_V1 by construction, so the write cannot run out.
    let ok = write!(
        out,
        "PROXY {proto} {} {} {} {}\r\n",
        src.ip(),
        dst.ip(),
        src.port(),
        dst.port()
    )
    .is_ok();
    debug_assert!(ok);
    e.len = (MAX_V1 - out.len()) as u8;
    e
}

/// A v1 `UNKNOWN` header: a connection Quill makes on its own (a health check).
pub fn encode_v1_unknown() -> Encoded {
    Encoded::from_slice(&[b"PROXY UNKNOWN\r\n"])
}

/// A v2 PROXY header for a connection (`Stream`) or a datagram flow (`Dgram`) from `src` to `dst`.
pub fn encode_v2(transport: Transport, src: SocketAddr, dst: SocketAddr) -> Encoded {
    let (src, dst) = same_family(src, dst);
    let t = match transport {
        Transport::Stream => 1,
        Transport::Dgram => 2,
    };
    let (sp, dp) = (src.port().to_be_bytes(), dst.port().to_be_bytes());
    let ports = [sp[0], sp[1], dp[0], dp[1]];
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Encoded::from_slice(&[
            &V2_SIGNATURE,
            &[V2_VERSION | CMD_PROXY, AF_INET << 4 | t],
            &(INET_LEN as u16).to_be_bytes(),
            &s.octets(),
            &d.octets(),
            &ports,
        ]),
        (IpAddr::V6(s), IpAddr::V6(d)) => Encoded::from_slice(&[
            &V2_SIGNATURE,
            &[V2_VERSION | CMD_PROXY, AF_INET6 << 4 | t],
            &(INET6_LEN as u16).to_be_bytes(),
            &s.octets(),
            &d.octets(),
            &ports,
        ]),
        // same_family made both the same family.
        _ => encode_local(),
    }
}

/// A v2 LOCAL header: a connection Quill makes on its own (a health check); the receiver keeps
/// the connection's own addresses.
pub fn encode_local() -> Encoded {
    Encoded::from_slice(&[&V2_SIGNATURE, &[V2_VERSION | CMD_LOCAL, 0, 0, 0]])
}

/// A header of `version` for a connection from `src` to `dst` (v2: a stream).
pub fn encode(version: Version, src: SocketAddr, dst: SocketAddr) -> Encoded {
    match version {
        Version::V1 => encode_v1(src, dst),
        Version::V2 => encode_v2(Transport::Stream, src, dst),
    }
}

/// A header of `version` for a connection Quill makes on its own (health checks): v1 `UNKNOWN`,
/// v2 LOCAL.
pub fn encode_unknown(version: Version) -> Encoded {
    match version {
        Version::V1 => encode_v1_unknown(),
        Version::V2 => encode_local(),
    }
}

#[cfg(test)]
mod tests;
