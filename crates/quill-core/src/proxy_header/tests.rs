//! Unit tests of `proxy_header`, one per rule, and property tests: every encoded header reads
//! back as what was encoded (whole, cut, followed by data), and arbitrary bytes never panic.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use proptest::prelude::*;

use super::*;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn done(bytes: &[u8]) -> Header {
    match parse(bytes) {
        Parse::Done(h) => h,
        other => panic!("{other:?} for {bytes:?}"),
    }
}

fn invalid(bytes: &[u8]) -> Invalid {
    match parse(bytes) {
        Parse::Invalid(i) => i,
        other => panic!("{other:?} for {bytes:?}"),
    }
}

fn v2(ver_cmd: u8, fam: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = V2_SIGNATURE.to_vec();
    v.push(ver_cmd);
    v.push(fam);
    v.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    v.extend_from_slice(payload);
    v
}

#[test]
fn v1_tcp4_reads_addresses_and_stops_at_crlf() {
    let h = done(b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\nGET / HTTP/1.1\r\n");
    assert_eq!(h.version, Version::V1);
    assert_eq!(
        h.addrs,
        Some((sa("192.0.2.1:56324"), sa("198.51.100.2:443")))
    );
    assert_eq!(h.consumed, 45);
}

#[test]
fn v1_tcp6_reads_addresses() {
    let h = done(b"PROXY TCP6 2001:db8::1 ::1 1 65535\r\n");
    assert_eq!(h.addrs, Some((sa("[2001:db8::1]:1"), sa("[::1]:65535"))));
}

#[test]
fn v1_unknown_keeps_the_peer_address_and_ignores_the_rest() {
    assert_eq!(done(b"PROXY UNKNOWN\r\n").addrs, None);
    let h = done(b"PROXY UNKNOWN ffff::1 whatever\r\nX");
    assert_eq!((h.addrs, h.consumed), (None, 32));
}

#[test]
fn v1_prefixes_are_incomplete() {
    let whole = b"PROXY TCP4 10.0.0.1 10.0.0.2 1 2\r\n";
    for end in 0..whole.len() {
        assert_eq!(parse(&whole[..end]), Parse::Incomplete, "prefix {end}");
    }
}

#[test]
fn v1_rules() {
    assert_eq!(invalid(b"GET / HTTP/1.1\r\n"), Invalid::NotProxy);
    assert_eq!(invalid(b"PROXX"), Invalid::NotProxy);
    assert_eq!(
        invalid(b"PROXY UDP4 1.1.1.1 1.1.1.1 1 1\r\n"),
        Invalid::V1Protocol
    );
    assert_eq!(
        invalid(b"PROXY TCP4 10.0.0.1 10.0.0.2 1\r\n"),
        Invalid::V1Fields
    );
    assert_eq!(
        invalid(b"PROXY TCP4 10.0.0.1 10.0.0.2 1 2 3\r\n"),
        Invalid::V1Fields
    );
    assert_eq!(
        invalid(b"PROXY TCP4 10.0.0.1  10.0.0.2 1 2\r\n"),
        Invalid::V1Fields
    );
    assert_eq!(
        invalid(b"PROXY TCP4 10.0.0.1 10.0.0.2 1 2\n"),
        Invalid::V1Fields
    );
    assert_eq!(
        invalid(b"PROXY TCP4 10.0.0.1 10.0.0.2 1 2\rX"),
        Invalid::V1Fields
    );
    assert_eq!(
        invalid(b"PROXY TCP4 ::1 10.0.0.2 1 2\r\n"),
        Invalid::V1Address
    );
    assert_eq!(
        invalid(b"PROXY TCP6 10.0.0.1 ::1 1 2\r\n"),
        Invalid::V1Address
    );
    assert_eq!(
        invalid(b"PROXY TCP4 10.0.0.1 10.0.0.2 01 2\r\n"),
        Invalid::V1Port
    );
    assert_eq!(
        invalid(b"PROXY TCP4 10.0.0.1 10.0.0.2 1 65536\r\n"),
        Invalid::V1Port
    );
    assert_eq!(
        invalid(b"PROXY TCP4 10.0.0.1 10.0.0.2 +1 2\r\n"),
        Invalid::V1Port
    );
    assert_eq!(
        done(b"PROXY TCP4 10.0.0.1 10.0.0.2 0 2\r\n")
            .addrs
            .unwrap()
            .0
            .port(),
        0
    );
}

#[test]
fn v1_is_at_most_107_bytes() {
    let longest = encode_v1(
        sa("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"),
        sa("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"),
    );
    // 104 bytes: the spec's 107 leaves room for UNKNOWN with the same fields.
    assert_eq!(longest.as_bytes().len(), 104);
    assert!(matches!(parse(longest.as_bytes()), Parse::Done(h) if h.consumed == 104));
    let mut unknown = b"PROXY UNKNOWN ".to_vec();
    unknown.resize(MAX_V1 - 2, b'x');
    unknown.extend_from_slice(b"\r\n");
    assert!(matches!(parse(&unknown), Parse::Done(h) if h.consumed == MAX_V1));
    let mut long = b"PROXY UNKNOWN ".to_vec();
    long.resize(MAX_V1 - 1, b'x');
    assert_eq!(parse(&long), Parse::Incomplete);
    long.push(b'\r');
    assert_eq!(invalid(&long), Invalid::V1TooLong);
    long.push(b'\n');
    assert_eq!(invalid(&long), Invalid::V1TooLong);
    long.truncate(MAX_V1 - 1);
    long.extend_from_slice(b"xx");
    assert_eq!(invalid(&long), Invalid::V1TooLong);
}

#[test]
fn v2_inet_reads_addresses_and_skips_tlvs() {
    let mut payload = vec![192, 0, 2, 1, 10, 0, 0, 9, 0x1f, 0x90, 0x01, 0xbb];
    payload.extend_from_slice(&[0x04, 0, 2, 7, 7, 0x20, 0, 0]); // two TLVs, one empty
    let mut bytes = v2(0x21, 0x11, &payload);
    bytes.extend_from_slice(b"data");
    let h = done(&bytes);
    assert_eq!(h.version, Version::V2);
    assert_eq!(h.addrs, Some((sa("192.0.2.1:8080"), sa("10.0.0.9:443"))));
    assert_eq!(h.consumed, bytes.len() - 4);
}

#[test]
fn v2_inet6_reads_addresses() {
    let mut payload = Ipv6Addr::LOCALHOST.octets().to_vec();
    payload.extend_from_slice(&"2001:db8::7".parse::<Ipv6Addr>().unwrap().octets());
    payload.extend_from_slice(&[0, 80, 0, 81]);
    let h = done(&v2(0x21, 0x21, &payload));
    assert_eq!(h.addrs, Some((sa("[::1]:80"), sa("[2001:db8::7]:81"))));
}

#[test]
fn v2_local_unspec_and_unix_keep_the_peer_address() {
    assert_eq!(done(&v2(0x20, 0x00, &[])).addrs, None);
    // LOCAL with addresses: they are skipped, not used.
    assert_eq!(done(&v2(0x20, 0x11, &[1; 12])).addrs, None);
    assert_eq!(done(&v2(0x21, 0x00, &[1, 2, 3])).addrs, None);
    assert_eq!(done(&v2(0x21, 0x31, &[0; 216])).addrs, None);
}

#[test]
fn v2_rules() {
    assert_eq!(invalid(&v2(0x11, 0x11, &[0; 12])), Invalid::V2Version(1));
    assert_eq!(invalid(&v2(0x22, 0x11, &[0; 12])), Invalid::V2Command(2));
    assert_eq!(invalid(&v2(0x21, 0x41, &[0; 12])), Invalid::V2Family(0x41));
    assert_eq!(invalid(&v2(0x21, 0x13, &[0; 12])), Invalid::V2Family(0x13));
    assert_eq!(invalid(&v2(0x21, 0x10, &[0; 12])), Invalid::V2Family(0x10));
    assert_eq!(invalid(&v2(0x21, 0x01, &[0; 12])), Invalid::V2Family(0x01));
    assert_eq!(invalid(&v2(0x21, 0x11, &[0; 11])), Invalid::V2Short);
    assert_eq!(invalid(&v2(0x21, 0x21, &[0; 35])), Invalid::V2Short);
    assert_eq!(invalid(&v2(0x21, 0x11, &[0; 14])), Invalid::V2Tlv);
    let mut tlv = vec![0; 12];
    tlv.extend_from_slice(&[1, 0, 5, 1, 2]);
    assert_eq!(invalid(&v2(0x21, 0x11, &tlv)), Invalid::V2Tlv);
    let mut long = v2(0x21, 0x11, &[]);
    long[14..16].copy_from_slice(&((MAX_V2_PAYLOAD + 1) as u16).to_be_bytes());
    assert_eq!(invalid(&long), Invalid::V2TooLong(MAX_V2_PAYLOAD + 1));
    let mut bad_sig = v2(0x21, 0x11, &[0; 12]);
    bad_sig[5] = b'x';
    assert_eq!(invalid(&bad_sig), Invalid::NotProxy);
}

#[test]
fn v2_prefixes_are_incomplete() {
    let whole = encode_v2(Transport::Stream, sa("10.1.2.3:4"), sa("10.9.9.9:5"));
    let whole = whole.as_bytes();
    for end in 0..whole.len() {
        assert_eq!(parse(&whole[..end]), Parse::Incomplete, "prefix {end}");
    }
    assert!(matches!(parse(whole), Parse::Done(_)));
}

#[test]
fn encoders_write_the_documented_bytes() {
    assert_eq!(
        encode_v1(sa("192.0.2.1:56324"), sa("198.51.100.2:443")).as_bytes(),
        b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n"
    );
    assert_eq!(encode_v1_unknown().as_bytes(), b"PROXY UNKNOWN\r\n");
    // Mixed families: the IPv4 side is written as IPv4-mapped IPv6.
    assert_eq!(
        encode_v1(sa("192.0.2.1:1"), sa("[::1]:2")).as_bytes(),
        b"PROXY TCP6 ::ffff:192.0.2.1 ::1 1 2\r\n"
    );
    let d = encode_v2(Transport::Dgram, sa("192.0.2.1:53"), sa("10.0.0.1:5353"));
    assert_eq!(
        d.as_bytes(),
        &v2(0x21, 0x12, &[192, 0, 2, 1, 10, 0, 0, 1, 0, 53, 0x14, 0xe9])[..]
    );
    assert_eq!(v2_transport(d.as_bytes()), Some(Transport::Dgram));
    assert_eq!(encode_local().as_bytes(), &v2(0x20, 0x00, &[])[..]);
    assert_eq!(
        encode_unknown(Version::V2).as_bytes(),
        encode_local().as_bytes()
    );
    assert_eq!(Version::from_name("V2"), Some(Version::V2));
    assert_eq!(Version::from_name("v3"), None);
    assert_eq!(Version::V1.as_str(), "v1");
}

fn addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<u32>(), any::<u16>())
            .prop_map(|(ip, p)| SocketAddr::new(Ipv4Addr::from(ip).into(), p)),
        (any::<u128>(), any::<u16>())
            .prop_map(|(ip, p)| SocketAddr::new(Ipv6Addr::from(ip).into(), p)),
    ]
}

/// What a parsed address should be: v4 stays v4 when both are v4, else both are IPv6 (mapped).
fn expected(src: SocketAddr, dst: SocketAddr) -> (SocketAddr, SocketAddr) {
    same_family(src, dst)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn encoded_headers_read_back(src in addr(), dst in addr(), v2 in any::<bool>(), dgram in any::<bool>(),
                                 tail in proptest::collection::vec(any::<u8>(), 0..32)) {
        let e = if v2 {
            encode_v2(if dgram { Transport::Dgram } else { Transport::Stream }, src, dst)
        } else {
            encode_v1(src, dst)
        };
        let mut bytes = e.as_bytes().to_vec();
        prop_assert!(bytes.len() <= MAX_V1);
        for end in 0..bytes.len() {
            prop_assert_eq!(parse(&bytes[..end]), Parse::Incomplete);
        }
        bytes.extend_from_slice(&tail);
        let h = match parse(&bytes) {
            Parse::Done(h) => h,
            other => return Err(TestCaseError::fail(format!("{other:?}"))),
        };
        prop_assert_eq!(h.consumed, e.as_bytes().len());
        prop_assert_eq!(h.version, if v2 { Version::V2 } else { Version::V1 });
        prop_assert_eq!(h.addrs, Some(expected(src, dst)));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        check_prefixes(&bytes)?;
    }

    #[test]
    fn arbitrary_bytes_after_a_signature_never_panic(v1 in any::<bool>(),
                                                     bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut all = if v1 { b"PROXY ".to_vec() } else { V2_SIGNATURE.to_vec() };
        all.extend_from_slice(&bytes);
        check_prefixes(&all)?;
    }
}

/// A prefix of bytes that read as a header is incomplete (shorter than it), or the same header;
/// a prefix of invalid bytes is incomplete or equally invalid... or invalid earlier for v1,
/// where a cut line cannot fail later than the whole.
fn check_prefixes(bytes: &[u8]) -> Result<(), TestCaseError> {
    let whole = parse(bytes);
    if let Parse::Done(h) = whole {
        prop_assert!(h.consumed <= bytes.len());
        prop_assert!(h.consumed <= MAX_HEADER);
    }
    for end in 0..bytes.len() {
        let part = parse(&bytes[..end]);
        match (part, whole) {
            (Parse::Incomplete, _) => {}
            (Parse::Done(p), Parse::Done(w)) => prop_assert_eq!(p, w),
            (Parse::Invalid(_), Parse::Invalid(_)) => {}
            (p, w) => prop_assert!(false, "prefix {}: {:?} but whole {:?}", end, p, w),
        }
    }
    Ok(())
}
