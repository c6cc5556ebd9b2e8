//! Direct server return, the pure part: reading Ethernet frames (ARP, IPv4, IPv6 with TCP or UDP),
//! the flow key and its hash, the server choice by that hash, and writing the frames Quill sends
//! (ARP replies, requests and the gratuitous ARP, the destination MAC rewrite, a tarpit's
//! SYN-ACK). No sockets here: `sys` has the packet socket, `quill::dsr` the loop. Fuzzed by
//! `fuzz_targets/dsr_frame.rs`.
//!
//! Only the first 802.1Q tag is looked through; IPv6 extension headers are not walked (a packet
//! whose next header is not TCP or UDP keys on its addresses alone, and so still stays on one
//! server). A fragment of an IPv4 datagram keys on its addresses and protocol only (its ports are
//! in the first fragment alone), and so does every fragment of it, the first included.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub type Mac = [u8; 6];

pub const BROADCAST: Mac = [0xff; 6];
pub const ETH_ARP: u16 = 0x0806;
pub const ETH_IPV4: u16 = 0x0800;
pub const ETH_IPV6: u16 = 0x86dd;
const ETH_VLAN: u16 = 0x8100;
pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;
pub const ARP_REQUEST: u16 = 1;
pub const ARP_REPLY: u16 = 2;
/// The length of an ARP frame over Ethernet, padding excluded (14 + 28).
pub const ARP_FRAME_LEN: usize = 42;

/// What a frame holds, as far as DSR cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload {
    Arp(Arp),
    Ip(Flow),
    /// Another ethertype, or a packet too short or malformed to key.
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    pub dst: Mac,
    pub src: Mac,
    pub payload: Payload,
}

/// An Ethernet/IPv4 ARP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arp {
    pub op: u16,
    pub sender_mac: Mac,
    pub sender_ip: Ipv4Addr,
    pub target_mac: Mac,
    pub target_ip: Ipv4Addr,
}

/// A packet's flow: what keeps all of a connection's (or a UDP exchange's) packets on one server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    /// 0 when the packet carries none (fragment, other protocol).
    pub src_port: u16,
    pub dst_port: u16,
    /// TCP flags (0 otherwise).
    pub tcp_flags: u8,
    /// TCP sequence number (0 otherwise): a tarpit's SYN-ACK acknowledges it.
    pub tcp_seq: u32,
}

pub const TCP_SYN: u8 = 0x02;
pub const TCP_ACK: u8 = 0x10;
pub const TCP_RST: u8 = 0x04;

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn mac_at(b: &[u8], at: usize) -> Option<Mac> {
    b.get(at..at + 6)?.try_into().ok()
}

fn v4_at(b: &[u8], at: usize) -> Option<Ipv4Addr> {
    let o: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(Ipv4Addr::from(o))
}

/// Reads a frame; None when it is shorter than an Ethernet header (and its 802.1Q tag).
pub fn parse(frame: &[u8]) -> Option<Frame> {
    let dst = mac_at(frame, 0)?;
    let src = mac_at(frame, 6)?;
    let mut ethertype = be16(frame, 12)?;
    let mut l3 = 14;
    if ethertype == ETH_VLAN {
        ethertype = be16(frame, 16)?;
        l3 = 18;
    }
    let body = &frame[l3.min(frame.len())..];
    let payload = match ethertype {
        ETH_ARP => parse_arp(body).map(Payload::Arp),
        ETH_IPV4 => parse_v4(body).map(Payload::Ip),
        ETH_IPV6 => parse_v6(body).map(Payload::Ip),
        _ => None,
    }
    .unwrap_or(Payload::Other);
    Some(Frame { dst, src, payload })
}

fn parse_arp(b: &[u8]) -> Option<Arp> {
    // Ethernet hardware (1), IPv4 protocol, 6-byte and 4-byte addresses.
    if be16(b, 0)? != 1 || be16(b, 2)? != ETH_IPV4 || *b.get(4)? != 6 || *b.get(5)? != 4 {
        return None;
    }
    Some(Arp {
        op: be16(b, 6)?,
        sender_mac: mac_at(b, 8)?,
        sender_ip: v4_at(b, 14)?,
        target_mac: mac_at(b, 18)?,
        target_ip: v4_at(b, 24)?,
    })
}

fn ports(l4: &[u8], proto: u8) -> (u16, u16, u8, u32) {
    match proto {
        PROTO_TCP if l4.len() >= 20 => (
            be16(l4, 0).unwrap_or(0),
            be16(l4, 2).unwrap_or(0),
            l4[13],
            u32::from_be_bytes([l4[4], l4[5], l4[6], l4[7]]),
        ),
        PROTO_UDP if l4.len() >= 8 => (be16(l4, 0).unwrap_or(0), be16(l4, 2).unwrap_or(0), 0, 0),
        _ => (0, 0, 0, 0),
    }
}

fn parse_v4(b: &[u8]) -> Option<Flow> {
    let first = *b.first()?;
    let ihl = usize::from(first & 0x0f) * 4;
    if first >> 4 != 4 || ihl < 20 || b.len() < ihl {
        return None;
    }
    let proto = b[9];
    let frag = be16(b, 6)?;
    // More fragments, or an offset: the ports are not in every fragment, so none key it.
    let fragmented = frag & 0x3fff != 0;
    let (src_port, dst_port, tcp_flags, tcp_seq) = if fragmented {
        (0, 0, 0, 0)
    } else {
        ports(&b[ihl..], proto)
    };
    Some(Flow {
        src: IpAddr::V4(v4_at(b, 12)?),
        dst: IpAddr::V4(v4_at(b, 16)?),
        proto,
        src_port,
        dst_port,
        tcp_flags,
        tcp_seq,
    })
}

fn parse_v6(b: &[u8]) -> Option<Flow> {
    if b.len() < 40 || b[0] >> 4 != 6 {
        return None;
    }
    let proto = b[6];
    let v6 = |at: usize| -> Option<Ipv6Addr> {
        let o: [u8; 16] = b.get(at..at + 16)?.try_into().ok()?;
        Some(Ipv6Addr::from(o))
    };
    let (src_port, dst_port, tcp_flags, tcp_seq) = ports(&b[40..], proto);
    Some(Flow {
        src: IpAddr::V6(v6(8)?),
        dst: IpAddr::V6(v6(24)?),
        proto,
        src_port,
        dst_port,
        tcp_flags,
        tcp_seq,
    })
}

/// One 64-bit mixing step (the splitmix64 finaliser).
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn ip_bits(ip: IpAddr) -> u64 {
    match ip {
        IpAddr::V4(a) => u64::from(u32::from(a)),
        IpAddr::V6(a) => {
            let v = u128::from(a);
            (v as u64) ^ mix((v >> 64) as u64)
        }
    }
}

/// The flow's hash under `key` (chosen at start, so clients cannot aim at one server): source
/// address, source port, destination port and protocol. The destination address is left out:
/// it is the virtual address, the same for every flow.
pub fn flow_hash(flow: &Flow, key: u64) -> u64 {
    let ports = (u64::from(flow.src_port) << 32) | (u64::from(flow.dst_port) << 16);
    mix(mix(ip_bits(flow.src) ^ key) ^ ports ^ u64::from(flow.proto))
}

/// The flow's key in a Maglev table ([`crate::maglev::Table::lookup`]): the same in every
/// process and on every machine (no secret, the seed fixed at 0), so that every Quill in front
/// of the same servers sends a flow to the same server. [`crate::maglev::hash_bytes`] under seed
/// 0 of the source address, the destination address (4 bytes each for IPv4, 16 for IPv6), the
/// protocol number, then the source and destination ports (2 bytes each, big-endian): the 5-tuple
/// for TCP and UDP, the addresses and protocol for anything else and for IPv4 fragments (whose
/// ports read as 0, see [`parse`]).
pub fn maglev_key(flow: &Flow) -> u64 {
    let mut bytes = [0u8; 37];
    let mut len = 0;
    for ip in [flow.src, flow.dst] {
        match ip {
            IpAddr::V4(a) => {
                bytes[len..len + 4].copy_from_slice(&a.octets());
                len += 4;
            }
            IpAddr::V6(a) => {
                bytes[len..len + 16].copy_from_slice(&a.octets());
                len += 16;
            }
        }
    }
    bytes[len] = flow.proto;
    bytes[len + 1..len + 3].copy_from_slice(&flow.src_port.to_be_bytes());
    bytes[len + 3..len + 5].copy_from_slice(&flow.dst_port.to_be_bytes());
    crate::maglev::hash_bytes(&bytes[..len + 5], 0)
}

/// The flow's identity in the connection tracking ([`crate::conntrack`]): for IPv4 the 5-tuple
/// itself (source and destination addresses, ports, protocol: two flows never share it); for
/// IPv6, which does not fit in 128 bits, two independent 64-bit hashes of the same fields.
pub fn flow_id(flow: &Flow) -> u128 {
    let ports = (u128::from(flow.src_port) << 16) | u128::from(flow.dst_port);
    match (flow.src, flow.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            (u128::from(u32::from(s)) << 96)
                | (u128::from(u32::from(d)) << 64)
                | (u128::from(flow.proto) << 32)
                | ports
        }
        _ => {
            let a = maglev_key(flow);
            let b = mix(a ^ mix(ip_bits(flow.src) ^ 0x1d5e_c0de) ^ ip_bits(flow.dst));
            (1 << 127) | (u128::from(a) << 64) | u128::from(b)
        }
    }
}

/// The server for a flow hash among `candidates` (server number, weight; weight 0 is never
/// chosen): weighted rendezvous hashing, so adding or losing a server moves only the flows that
/// were or will be its own. None when no candidate has a weight.
pub fn choose(hash: u64, candidates: impl Iterator<Item = (usize, u32)>) -> Option<usize> {
    let mut best: Option<(f64, usize)> = None;
    for (i, weight) in candidates {
        if weight == 0 {
            continue;
        }
        let h = mix(hash ^ mix(i as u64 + 1));
        // A uniform draw in (0, 1]; -w / ln(u) is the weighted rendezvous score.
        let u = ((h >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        let score = -f64::from(weight) / u.ln();
        if best.is_none_or(|(s, _)| score > s) {
            best = Some((score, i));
        }
    }
    best.map(|(_, i)| i)
}

/// Makes `frame` go to `dst` from `src` (the rest is sent as it came).
pub fn rewrite_macs(frame: &mut [u8], dst: Mac, src: Mac) {
    if frame.len() >= 12 {
        frame[0..6].copy_from_slice(&dst);
        frame[6..12].copy_from_slice(&src);
    }
}

/// An ARP packet in an Ethernet frame.
pub fn write_arp(out: &mut [u8; ARP_FRAME_LEN], eth_dst: Mac, eth_src: Mac, arp: &Arp) {
    out[0..6].copy_from_slice(&eth_dst);
    out[6..12].copy_from_slice(&eth_src);
    out[12..14].copy_from_slice(&ETH_ARP.to_be_bytes());
    out[14..16].copy_from_slice(&1u16.to_be_bytes());
    out[16..18].copy_from_slice(&ETH_IPV4.to_be_bytes());
    out[18] = 6;
    out[19] = 4;
    out[20..22].copy_from_slice(&arp.op.to_be_bytes());
    out[22..28].copy_from_slice(&arp.sender_mac);
    out[28..32].copy_from_slice(&arp.sender_ip.octets());
    out[32..38].copy_from_slice(&arp.target_mac);
    out[38..42].copy_from_slice(&arp.target_ip.octets());
}

/// The reply to `request` when it asks for `vip`: "`vip` is at `mac`". None for anything else.
pub fn arp_reply(request: &Arp, vip: Ipv4Addr, mac: Mac) -> Option<[u8; ARP_FRAME_LEN]> {
    if request.op != ARP_REQUEST || request.target_ip != vip {
        return None;
    }
    let mut out = [0u8; ARP_FRAME_LEN];
    let arp = Arp {
        op: ARP_REPLY,
        sender_mac: mac,
        sender_ip: vip,
        target_mac: request.sender_mac,
        target_ip: request.sender_ip,
    };
    write_arp(&mut out, request.sender_mac, mac, &arp);
    Some(out)
}

/// A gratuitous ARP (a broadcast request for `vip` from `vip`): neighbours update their caches.
pub fn gratuitous_arp(vip: Ipv4Addr, mac: Mac) -> [u8; ARP_FRAME_LEN] {
    let mut out = [0u8; ARP_FRAME_LEN];
    let arp = Arp {
        op: ARP_REQUEST,
        sender_mac: mac,
        sender_ip: vip,
        target_mac: [0; 6],
        target_ip: vip,
    };
    write_arp(&mut out, BROADCAST, mac, &arp);
    out
}

/// An ARP probe for `target` (sender address 0.0.0.0, RFC 5227): the owner answers to `mac`
/// without putting the sender in its cache.
pub fn arp_probe(target: Ipv4Addr, mac: Mac) -> [u8; ARP_FRAME_LEN] {
    let mut out = [0u8; ARP_FRAME_LEN];
    let arp = Arp {
        op: ARP_REQUEST,
        sender_mac: mac,
        sender_ip: Ipv4Addr::UNSPECIFIED,
        target_mac: [0; 6],
        target_ip: target,
    };
    write_arp(&mut out, BROADCAST, mac, &arp);
    out
}

/// The length of a tarpit's SYN-ACK frame (Ethernet 14, IPv4 20, TCP 20).
pub const SYNACK_LEN: usize = 54;

fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum: u32 = 0;
    for part in parts {
        let mut chunks = part.chunks_exact(2);
        for c in &mut chunks {
            sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
        if let [last] = chunks.remainder() {
            sum += u32::from(*last) << 8;
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The tarpit's answer to an IPv4 TCP SYN: a SYN-ACK with a zero window from the virtual
/// address, so the client's connection opens and then can send nothing (Pen's tarpit: the
/// handshake is answered and never anything more). None for anything but a bare IPv4 SYN.
pub fn tarpit_synack(syn: &Flow, client_mac: Mac, mac: Mac, isn: u32) -> Option<[u8; SYNACK_LEN]> {
    let (IpAddr::V4(client), IpAddr::V4(vip)) = (syn.src, syn.dst) else {
        return None;
    };
    if syn.proto != PROTO_TCP || syn.tcp_flags & (TCP_SYN | TCP_ACK | TCP_RST) != TCP_SYN {
        return None;
    }
    let mut f = [0u8; SYNACK_LEN];
    f[0..6].copy_from_slice(&client_mac);
    f[6..12].copy_from_slice(&mac);
    f[12..14].copy_from_slice(&ETH_IPV4.to_be_bytes());
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&40u16.to_be_bytes());
    ip[6] = 0x40; // don't fragment
    ip[8] = 64;
    ip[9] = PROTO_TCP;
    ip[12..16].copy_from_slice(&vip.octets());
    ip[16..20].copy_from_slice(&client.octets());
    let sum = checksum(&[ip]);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    let tcp = &mut f[34..54];
    tcp[0..2].copy_from_slice(&syn.dst_port.to_be_bytes());
    tcp[2..4].copy_from_slice(&syn.src_port.to_be_bytes());
    tcp[4..8].copy_from_slice(&isn.to_be_bytes());
    tcp[8..12].copy_from_slice(&syn.tcp_seq.wrapping_add(1).to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = TCP_SYN | TCP_ACK;
    // Window 0: the client may not send a byte.
    let mut pseudo = [0u8; 12];
    pseudo[0..4].copy_from_slice(&vip.octets());
    pseudo[4..8].copy_from_slice(&client.octets());
    pseudo[9] = PROTO_TCP;
    pseudo[10..12].copy_from_slice(&20u16.to_be_bytes());
    let sum = checksum(&[&pseudo, tcp]);
    tcp[16..18].copy_from_slice(&sum.to_be_bytes());
    Some(f)
}

/// Computes the TCP or UDP checksum of an IP packet in `frame` whose checksum was left to
/// hardware (a frame read from a virtual or local interface: the packet socket says so), so the
/// frame can be sent on as it is. Anything else is left alone. Returns whether it wrote one.
pub fn fill_checksum(frame: &mut [u8]) -> bool {
    let (ethertype, l3) = match be16(frame, 12) {
        Some(ETH_VLAN) => (be16(frame, 16), 18),
        t => (t, 14),
    };
    let Some(ip) = frame.get_mut(l3..) else {
        return false;
    };
    let (proto, l4_start, l4_len, pseudo_addrs) = match ethertype {
        Some(ETH_IPV4) if ip.len() >= 20 && ip[0] >> 4 == 4 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            let fragmented = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0;
            if ihl < 20 || total < ihl || total > ip.len() || fragmented {
                return false;
            }
            (ip[9], ihl, total - ihl, 12..20)
        }
        Some(ETH_IPV6) if ip.len() >= 40 && ip[0] >> 4 == 6 => {
            let payload = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            if 40 + payload > ip.len() {
                return false;
            }
            (ip[6], 40, payload, 8..40)
        }
        _ => return false,
    };
    let at = match proto {
        PROTO_TCP if l4_len >= 20 => 16,
        PROTO_UDP if l4_len >= 8 => 6,
        _ => return false,
    };
    ip[l4_start + at] = 0;
    ip[l4_start + at + 1] = 0;
    let mut pseudo_tail = [0u8; 8];
    pseudo_tail[0..4].copy_from_slice(&(l4_len as u32).to_be_bytes());
    pseudo_tail[7] = proto;
    let sum = checksum(&[
        &ip[pseudo_addrs],
        &pseudo_tail,
        &ip[l4_start..l4_start + l4_len],
    ]);
    let sum = if proto == PROTO_UDP && sum == 0 {
        0xffff
    } else {
        sum
    };
    ip[l4_start + at..l4_start + at + 2].copy_from_slice(&sum.to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: Mac = [2, 0, 0, 0, 0, 1];
    const C: Mac = [2, 0, 0, 0, 0, 2];

    fn v4_frame(proto: u8, src_port: u16, frag: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20];
        rewrite_macs(&mut f, Q, C);
        f[12..14].copy_from_slice(&ETH_IPV4.to_be_bytes());
        f[14] = 0x45;
        f[20..22].copy_from_slice(&frag.to_be_bytes());
        f[23] = proto;
        f[26..30].copy_from_slice(&[10, 0, 0, 2]);
        f[30..34].copy_from_slice(&[10, 0, 0, 100]);
        f[34..36].copy_from_slice(&src_port.to_be_bytes());
        f[36..38].copy_from_slice(&80u16.to_be_bytes());
        f[38..42].copy_from_slice(&7u32.to_be_bytes());
        f[47] = TCP_SYN;
        f
    }

    #[test]
    fn a_tcp_frame_gives_its_flow() {
        let f = parse(&v4_frame(PROTO_TCP, 40000, 0)).unwrap();
        assert_eq!((f.dst, f.src), (Q, C));
        let Payload::Ip(flow) = f.payload else {
            panic!("{f:?}")
        };
        assert_eq!(flow.src, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
        assert_eq!(flow.dst, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100)));
        assert_eq!(
            (flow.src_port, flow.dst_port, flow.proto),
            (40000, 80, PROTO_TCP)
        );
        assert_eq!((flow.tcp_flags, flow.tcp_seq), (TCP_SYN, 7));
    }

    #[test]
    fn fragments_key_without_ports() {
        for frag in [0x2000, 0x0010] {
            let Payload::Ip(flow) = parse(&v4_frame(PROTO_UDP, 5353, frag)).unwrap().payload else {
                panic!()
            };
            assert_eq!((flow.src_port, flow.dst_port), (0, 0));
        }
    }

    #[test]
    fn arp_request_for_the_vip_is_answered_and_others_are_not() {
        let vip = Ipv4Addr::new(10, 0, 0, 100);
        let ask = Arp {
            op: ARP_REQUEST,
            sender_mac: C,
            sender_ip: Ipv4Addr::new(10, 0, 0, 2),
            target_mac: [0; 6],
            target_ip: vip,
        };
        let mut frame = [0u8; ARP_FRAME_LEN];
        write_arp(&mut frame, BROADCAST, C, &ask);
        let Payload::Arp(parsed) = parse(&frame).unwrap().payload else {
            panic!()
        };
        assert_eq!(parsed, ask);
        let reply = arp_reply(&parsed, vip, Q).unwrap();
        let r = parse(&reply).unwrap();
        assert_eq!((r.dst, r.src), (C, Q));
        let Payload::Arp(a) = r.payload else { panic!() };
        assert_eq!((a.op, a.sender_mac, a.sender_ip), (ARP_REPLY, Q, vip));
        assert_eq!((a.target_mac, a.target_ip), (C, ask.sender_ip));
        let other = Arp {
            target_ip: Ipv4Addr::new(10, 0, 0, 7),
            ..ask
        };
        assert!(arp_reply(&other, vip, Q).is_none());
        let g = parse(&gratuitous_arp(vip, Q)).unwrap();
        assert_eq!(g.dst, BROADCAST);
        let Payload::Arp(a) = g.payload else { panic!() };
        assert_eq!((a.sender_ip, a.target_ip, a.op), (vip, vip, ARP_REQUEST));
    }

    #[test]
    fn a_flow_always_gets_one_server_and_flows_spread() {
        let mut counts = [0usize; 3];
        for port in 1000..4000u16 {
            let Payload::Ip(flow) = parse(&v4_frame(PROTO_TCP, port, 0)).unwrap().payload else {
                panic!()
            };
            let h = flow_hash(&flow, 42);
            let pick = choose(h, [(0, 1), (1, 1), (2, 2)].into_iter()).unwrap();
            assert_eq!(Some(pick), choose(h, [(0, 1), (1, 1), (2, 2)].into_iter()));
            counts[pick] += 1;
            // Losing server 1 moves only server 1's flows.
            let without = choose(h, [(0, 1), (2, 2)].into_iter()).unwrap();
            if pick != 1 {
                assert_eq!(without, pick);
            }
        }
        // Weights 1:1:2 of 3000 flows: 750, 750, 1500, within a margin.
        assert!(
            counts[0] > 600 && counts[1] > 600 && counts[2] > 1300,
            "{counts:?}"
        );
        assert_eq!(choose(1, [(0, 0)].into_iter()), None);
    }

    #[test]
    fn the_maglev_key_is_the_fixed_hash_of_the_5_tuple() {
        let Payload::Ip(flow) = parse(&v4_frame(PROTO_TCP, 40000, 0)).unwrap().payload else {
            panic!()
        };
        // src 10.0.0.2, dst 10.0.0.100, protocol 6, ports 40000 and 80: documented, so that
        // every Quill (and every version) computes it alike.
        let mut bytes = vec![10, 0, 0, 2, 10, 0, 0, 100, PROTO_TCP];
        bytes.extend_from_slice(&40000u16.to_be_bytes());
        bytes.extend_from_slice(&80u16.to_be_bytes());
        assert_eq!(maglev_key(&flow), crate::maglev::hash_bytes(&bytes, 0));
        // Every field counts.
        let other_port = Flow {
            src_port: 40001,
            ..flow
        };
        let other_dst = Flow {
            dst_port: 81,
            ..flow
        };
        let other_proto = Flow {
            proto: PROTO_UDP,
            ..flow
        };
        for f in [other_port, other_dst, other_proto] {
            assert_ne!(maglev_key(&f), maglev_key(&flow));
            assert_ne!(flow_id(&f), flow_id(&flow));
        }
        // A fragment keys on the addresses and protocol: every fragment alike.
        let Payload::Ip(frag) = parse(&v4_frame(PROTO_UDP, 5353, 0x2000)).unwrap().payload else {
            panic!()
        };
        let Payload::Ip(later) = parse(&v4_frame(PROTO_UDP, 999, 0x0010)).unwrap().payload else {
            panic!()
        };
        assert_eq!(maglev_key(&frag), maglev_key(&later));
        // The IPv4 identity is the 5-tuple itself.
        assert_eq!(
            flow_id(&flow),
            (0x0a00_0002u128 << 96)
                | (0x0a00_0064u128 << 64)
                | (6u128 << 32)
                | (40000u128 << 16)
                | 80
        );
    }

    #[test]
    fn the_tarpit_answers_a_syn_with_a_valid_zero_window_synack() {
        let Payload::Ip(syn) = parse(&v4_frame(PROTO_TCP, 40000, 0)).unwrap().payload else {
            panic!()
        };
        let f = tarpit_synack(&syn, C, Q, 99).unwrap();
        assert_eq!(checksum(&[&f[14..34]]), 0, "IP header checksum");
        let mut pseudo = [0u8; 12];
        pseudo[0..4].copy_from_slice(&f[26..30]);
        pseudo[4..8].copy_from_slice(&f[30..34]);
        pseudo[9] = PROTO_TCP;
        pseudo[11] = 20;
        assert_eq!(checksum(&[&pseudo, &f[34..54]]), 0, "TCP checksum");
        let Payload::Ip(back) = parse(&f).unwrap().payload else {
            panic!()
        };
        assert_eq!((back.src_port, back.dst_port), (80, 40000));
        assert_eq!(back.tcp_flags, TCP_SYN | TCP_ACK);
        assert_eq!(u32::from_be_bytes(f[42..46].try_into().unwrap()), 8);
        let ack = Flow {
            tcp_flags: TCP_ACK,
            ..syn
        };
        assert!(tarpit_synack(&ack, C, Q, 1).is_none());
    }

    #[test]
    fn fill_checksum_writes_the_tcp_checksum_a_synack_has() {
        let Payload::Ip(syn) = parse(&v4_frame(PROTO_TCP, 40000, 0)).unwrap().payload else {
            panic!()
        };
        let good = tarpit_synack(&syn, C, Q, 99).unwrap();
        let mut f = good;
        f[50] ^= 0x5a;
        assert!(fill_checksum(&mut f));
        assert_eq!(f, good);
        assert!(!fill_checksum(&mut f[..30]));
    }

    #[test]
    fn short_and_odd_frames_never_panic() {
        let base = v4_frame(PROTO_TCP, 1, 0);
        for n in 0..base.len() {
            let _ = parse(&base[..n]);
        }
        assert!(parse(&[0u8; 13]).is_none());
        let mut vlan = vec![0u8; 18];
        vlan[12..14].copy_from_slice(&ETH_VLAN.to_be_bytes());
        assert_eq!(parse(&vlan).unwrap().payload, Payload::Other);
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        const MAC: Mac = [2, 0, 0, 0, 0, 1];

        /// Frames that are mostly well-formed: an Ethernet header with one of the ethertypes
        /// DSR reads, then arbitrary bytes.
        fn frames() -> impl Strategy<Value = Vec<u8>> {
            (
                prop_oneof![
                    Just(ETH_ARP),
                    Just(ETH_IPV4),
                    Just(ETH_IPV6),
                    Just(ETH_VLAN),
                    any::<u16>()
                ],
                proptest::collection::vec(any::<u8>(), 0..120),
                any::<u8>(),
            )
                .prop_map(|(ethertype, body, first)| {
                    let mut f = vec![0u8; 12];
                    f.extend_from_slice(&ethertype.to_be_bytes());
                    let mut body = body;
                    if let Some(b) = body.first_mut() {
                        // Often a plausible IPv4/IPv6 version and header length.
                        *b = match first % 3 {
                            0 => 0x45,
                            1 => 0x60,
                            _ => *b,
                        };
                    }
                    f.extend_from_slice(&body);
                    f
                })
        }

        proptest! {
            /// The fuzz target's invariants (fuzz_targets/dsr_frame.rs), for a bounded time on
            /// stable.
            #[test]
            fn frames_never_panic_and_answers_parse_back(data in frames()) {
                let Some(frame) = parse(&data) else {
                    prop_assert!(data.len() < 18);
                    return Ok(());
                };
                match frame.payload {
                    Payload::Arp(arp) => {
                        let vip = Ipv4Addr::new(10, 0, 0, 100);
                        if let Some(reply) = arp_reply(&arp, vip, MAC) {
                            let Some(Payload::Arp(r)) = parse(&reply).map(|f| f.payload) else {
                                panic!("reply is not ARP")
                            };
                            prop_assert_eq!((r.sender_ip, r.target_ip), (vip, arp.sender_ip));
                        }
                    }
                    Payload::Ip(flow) => {
                        let h = flow_hash(&flow, 7);
                        prop_assert_eq!(h, flow_hash(&flow, 7));
                        let servers = [(0, 1), (1, 3), (2, 0)];
                        let a = choose(h, servers.into_iter());
                        prop_assert_eq!(a, choose(h, servers.into_iter()));
                        prop_assert_ne!(a, Some(2));
                        if let Some(f) = tarpit_synack(&flow, frame.src, MAC, 1) {
                            let Some(Payload::Ip(back)) = parse(&f).map(|f| f.payload) else {
                                panic!("SYN-ACK does not parse")
                            };
                            prop_assert_eq!((back.src, back.dst), (flow.dst, flow.src));
                        }
                    }
                    Payload::Other => {}
                }
                let mut copy = data.clone();
                rewrite_macs(&mut copy, MAC, MAC);
                prop_assert_eq!(&copy[12..], &data[12..]);
                if fill_checksum(&mut copy) {
                    let once = copy.clone();
                    prop_assert!(fill_checksum(&mut copy));
                    prop_assert_eq!(copy, once);
                }
            }
        }
    }
}
