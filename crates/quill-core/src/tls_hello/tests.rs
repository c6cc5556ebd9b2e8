//! Unit tests of `tls_hello`: one per rule, on ClientHellos built field by field, and property
//! tests over arbitrary bytes and real ClientHellos from rustls (whole, cut, split into records,
//! mutated).

use std::sync::Arc;

use proptest::prelude::*;

use super::*;

/// A ClientHello's fields, to be encoded by [`Parts::message`].
#[derive(Clone)]
struct Parts {
    version: u16,
    session: Vec<u8>,
    suites: Vec<u8>,
    compression: Vec<u8>,
    /// None: no extensions block at all.
    extensions: Option<Vec<(u16, Vec<u8>)>>,
}

impl Default for Parts {
    fn default() -> Parts {
        Parts {
            version: 0x0303,
            session: vec![7; 32],
            suites: vec![0x13, 0x01, 0xc0, 0x2b],
            compression: vec![0],
            extensions: Some(vec![]),
        }
    }
}

fn u16b(n: usize) -> [u8; 2] {
    (n as u16).to_be_bytes()
}

fn vec8(b: &[u8]) -> Vec<u8> {
    let mut v = vec![b.len() as u8];
    v.extend_from_slice(b);
    v
}

fn vec16(b: &[u8]) -> Vec<u8> {
    let mut v = u16b(b.len()).to_vec();
    v.extend_from_slice(b);
    v
}

/// A server_name extension's data with these (type, name) entries.
fn sni_data(names: &[(u8, &[u8])]) -> Vec<u8> {
    let mut list = Vec::new();
    for (kind, name) in names {
        list.push(*kind);
        list.extend(vec16(name));
    }
    vec16(&list)
}

fn sni(name: &str) -> (u16, Vec<u8>) {
    (0, sni_data(&[(0, name.as_bytes())]))
}

fn alpn_data(protocols: &[&[u8]]) -> Vec<u8> {
    let list: Vec<u8> = protocols.iter().flat_map(|p| vec8(p)).collect();
    vec16(&list)
}

fn versions_data(versions: &[u16]) -> Vec<u8> {
    let list: Vec<u8> = versions.iter().flat_map(|v| v.to_be_bytes()).collect();
    vec8(&list)
}

impl Parts {
    fn with(extensions: Vec<(u16, Vec<u8>)>) -> Parts {
        Parts {
            extensions: Some(extensions),
            ..Parts::default()
        }
    }

    /// The handshake message: type, 3-byte length, body.
    fn message(&self) -> Vec<u8> {
        let mut body = self.version.to_be_bytes().to_vec();
        body.extend([1u8; 32]);
        body.extend(vec8(&self.session));
        body.extend(vec16(&self.suites));
        body.extend(vec8(&self.compression));
        if let Some(exts) = &self.extensions {
            let mut block = Vec::new();
            for (kind, data) in exts {
                block.extend(kind.to_be_bytes());
                block.extend(vec16(data));
            }
            body.extend(vec16(&block));
        }
        let mut m = vec![1u8];
        m.extend(&(body.len() as u32).to_be_bytes()[1..]);
        m.extend(body);
        m
    }

    /// In one record.
    fn wire(&self) -> Vec<u8> {
        records(&self.message(), &[])
    }
}

/// `message` in handshake records, cut after each length of `cuts` (the rest in a last record).
fn records(message: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = message;
    for &n in cuts.iter().chain(std::iter::once(&usize::MAX)) {
        if rest.is_empty() {
            break;
        }
        let (this, next) = rest.split_at(n.min(rest.len()));
        out.extend([22, 3, 1]);
        out.extend(u16b(this.len()));
        out.extend(this);
        rest = next;
    }
    out
}

fn name_of(buf: &[u8]) -> Option<Vec<u8>> {
    parse(buf)
        .expect("valid")
        .expect("whole")
        .server_name()
        .map(|n| n.as_bytes().to_vec())
}

// === what a hello says ===

#[test]
fn reads_the_server_name_alpn_and_versions() {
    let wire = Parts::with(vec![
        (0x000a, vec![0, 2, 0, 0x1d]),
        sni("Www.Example.com"),
        (16, alpn_data(&[b"h2", b"http/1.1"])),
        (43, versions_data(&[0x3a3a, 0x0304, 0x0303])),
    ])
    .wire();
    let hello = parse(&wire).unwrap().unwrap();
    assert_eq!(hello.server_name().unwrap().as_bytes(), b"Www.Example.com");
    let alpn: Vec<Vec<u8>> = hello.alpn().map(|p| p.as_bytes().to_vec()).collect();
    assert_eq!(alpn, [b"h2".to_vec(), b"http/1.1".to_vec()]);
    assert!(hello.has_alpn());
    assert_eq!(
        hello.supported_versions().collect::<Vec<_>>(),
        [0x3a3a, 0x0304, 0x0303]
    );
    assert_eq!(hello.max_version(), 0x0304, "GREASE is left out");
    assert_eq!(hello.legacy_version, 0x0303);
    assert_eq!(hello.record_version, 0x0301);
    assert_eq!(hello.len, wire.len());
}

#[test]
fn a_hello_without_extensions_has_no_name() {
    let wire = Parts {
        extensions: None,
        version: 0x0301,
        ..Parts::default()
    }
    .wire();
    let hello = parse(&wire).unwrap().unwrap();
    assert!(hello.server_name().is_none());
    assert!(!hello.has_alpn());
    assert_eq!(hello.alpn().count(), 0);
    assert_eq!(hello.max_version(), 0x0301);
}

#[test]
fn unknown_extensions_are_skipped() {
    let wire = Parts::with(vec![
        (0xfe0d, vec![1, 2, 3]),
        sni("a.b"),
        (0x0015, vec![0; 300]),
    ])
    .wire();
    assert_eq!(name_of(&wire).unwrap(), b"a.b");
}

#[test]
fn bytes_after_the_hello_are_left_alone() {
    let mut wire = Parts::with(vec![sni("a.b")]).wire();
    let len = wire.len();
    wire.extend([23, 3, 3, 0, 1, 0xff]);
    let hello = parse(&wire).unwrap().unwrap();
    assert_eq!(hello.len, len);
}

#[test]
fn every_prefix_of_a_hello_is_incomplete() {
    let wire = Parts::with(vec![sni("example.com"), (16, alpn_data(&[b"h2"]))]).wire();
    for end in 0..wire.len() {
        assert!(parse(&wire[..end]).unwrap().is_none(), "prefix {end}");
    }
    assert!(parse(&wire).unwrap().is_some());
}

#[test]
fn a_hello_split_into_records_reads_the_same_at_every_cut() {
    let message = Parts::with(vec![
        sni("split.example.com"),
        (16, alpn_data(&[b"http/1.1"])),
    ])
    .message();
    for cut in 1..message.len() {
        let wire = records(&message, &[cut]);
        assert_eq!(
            name_of(&wire).unwrap(),
            b"split.example.com",
            "cut at {cut}"
        );
        let hello = parse(&wire).unwrap().unwrap();
        assert_eq!(hello.len, wire.len());
        assert_eq!(hello.alpn().next().unwrap().as_bytes(), b"http/1.1");
        for end in 0..wire.len() {
            assert!(
                parse(&wire[..end]).unwrap().is_none(),
                "cut {cut}, prefix {end}"
            );
        }
    }
}

#[test]
fn a_hello_in_one_byte_records_up_to_the_limit_is_read() {
    // 31 one-byte records, then the rest in the 32nd.
    let message = Parts {
        session: vec![],
        suites: vec![0, 1],
        extensions: None,
        ..Parts::default()
    }
    .message();
    let cuts = vec![1; MAX_RECORDS - 1];
    let wire = records(&message, &cuts);
    assert!(parse(&wire).unwrap().is_some());
}

#[test]
fn the_largest_hello_fits_the_peek_bound() {
    let pad = MAX_HELLO - Parts::with(vec![(0x15, vec![])]).message().len();
    let message = Parts::with(vec![(0x15, vec![0; pad])]).message();
    assert_eq!(message.len(), MAX_HELLO);
    let cuts = vec![MAX_HELLO / MAX_RECORDS + 1; MAX_RECORDS - 1];
    let wire = records(&message, &cuts);
    assert!(wire.len() <= MAX_WIRE);
    assert!(parse(&wire).unwrap().is_some());
    assert!(parse(&records(&message, &[])[..MAX_RECORD])
        .unwrap()
        .is_none());
}

// === each malformation ===

fn error_of(wire: &[u8]) -> HelloError {
    parse(wire).expect_err("malformed")
}

#[test]
fn bytes_that_are_not_a_handshake_record_are_not_tls() {
    assert_eq!(error_of(b"GET / HTTP/1.1\r\n"), HelloError::NotTls);
    assert_eq!(error_of(&[0x80, 0x2e, 0x01]), HelloError::NotTls, "SSL 2");
    assert_eq!(error_of(&[23]), HelloError::NotTls);
}

#[test]
fn a_record_version_that_is_not_3_x_is_refused() {
    assert_eq!(error_of(&[22, 2, 0]), HelloError::RecordVersion(0x0200));
    // Found by the fuzz target: the error waits for both bytes, so every prefix agrees.
    assert!(parse(&[22, 2]).unwrap().is_none());
    assert_eq!(error_of(&[22, 2, 0x3d]), HelloError::RecordVersion(0x023d));
    let mut wire = Parts::default().wire();
    wire[1] = 4;
    assert_eq!(error_of(&wire), HelloError::RecordVersion(0x0401));
}

#[test]
fn an_empty_record_is_refused() {
    assert_eq!(error_of(&[22, 3, 1, 0, 0]), HelloError::EmptyRecord);
}

#[test]
fn a_record_longer_than_16_kib_is_refused() {
    assert_eq!(
        error_of(&[22, 3, 1, 0x40, 0x01]),
        HelloError::RecordTooLong(16385)
    );
}

#[test]
fn another_record_type_inside_the_hello_is_refused() {
    let message = Parts::with(vec![sni("a.b")]).message();
    let mut wire = records(&message[..10], &[]);
    wire.extend([21, 3, 3, 0, 2, 2, 40]);
    assert_eq!(error_of(&wire), HelloError::Interleaved(21));
}

#[test]
fn a_first_message_that_is_not_a_client_hello_is_refused() {
    assert_eq!(
        error_of(&[22, 3, 3, 0, 4, 2]),
        HelloError::NotClientHello(2)
    );
}

#[test]
fn a_hello_over_16_kib_is_refused_from_its_header() {
    let n = MAX_HELLO - 3;
    let wire = [22, 3, 1, 0, 4, 1, (n >> 16) as u8, (n >> 8) as u8, n as u8];
    assert_eq!(error_of(&wire), HelloError::TooLarge(MAX_HELLO + 1));
}

#[test]
fn a_hello_in_more_than_32_records_is_refused() {
    let message = Parts::default().message();
    let wire = records(&message, &[1; MAX_RECORDS]);
    assert_eq!(error_of(&wire), HelloError::TooManyRecords);
}

#[test]
fn a_legacy_version_that_is_not_3_x_is_refused() {
    let wire = Parts {
        version: 0x0200,
        ..Parts::default()
    }
    .wire();
    assert_eq!(error_of(&wire), HelloError::LegacyVersion(0x0200));
}

#[test]
fn a_session_id_over_32_bytes_is_refused() {
    let wire = Parts {
        session: vec![0; 33],
        ..Parts::default()
    }
    .wire();
    assert_eq!(error_of(&wire), HelloError::SessionId);
}

#[test]
fn an_empty_or_odd_cipher_suite_list_is_refused() {
    for suites in [vec![], vec![0x13, 0x01, 0xc0]] {
        let wire = Parts {
            suites,
            ..Parts::default()
        }
        .wire();
        assert_eq!(error_of(&wire), HelloError::CipherSuites);
    }
}

#[test]
fn an_empty_compression_list_is_refused() {
    let wire = Parts {
        compression: vec![],
        ..Parts::default()
    }
    .wire();
    assert_eq!(error_of(&wire), HelloError::Compression);
}

#[test]
fn bytes_after_the_extensions_block_are_refused() {
    let mut message = Parts::with(vec![sni("a.b")]).message();
    message.push(0);
    message[3] += 1;
    assert_eq!(error_of(&records(&message, &[])), HelloError::Extensions);
}

#[test]
fn an_extensions_block_longer_than_the_message_is_refused() {
    let mut message = Parts::with(vec![sni("a.b")]).message();
    let at = message.len() - (4 + sni("a.b").1.len()) - 2;
    message[at + 1] += 1;
    assert_eq!(error_of(&records(&message, &[])), HelloError::Extensions);
}

#[test]
fn an_extension_longer_than_the_block_is_refused() {
    let mut message = Parts::with(vec![(0x15, vec![0; 4])]).message();
    let at = message.len() - 4 - 2;
    message[at + 1] = 5;
    assert_eq!(error_of(&records(&message, &[])), HelloError::Extension);
}

#[test]
fn the_same_extension_twice_is_refused() {
    let wire = Parts::with(vec![sni("a.b"), sni("c.d")]).wire();
    assert_eq!(error_of(&wire), HelloError::Duplicate(0));
    let alpn = (16, alpn_data(&[b"h2"]));
    let wire = Parts::with(vec![alpn.clone(), alpn]).wire();
    assert_eq!(error_of(&wire), HelloError::Duplicate(16));
}

#[test]
fn a_malformed_server_name_list_is_refused() {
    for data in [
        vec![],
        vec![0, 0],
        vec![0, 5, 0, 0, 3, b'a'],
        sni_data(&[(0, b"a.b")]).into_iter().chain([0]).collect(),
        sni_data(&[(1, b"other")]),
    ] {
        let wire = Parts::with(vec![(0, data.clone())]).wire();
        assert_eq!(error_of(&wire), HelloError::ServerName, "{data:?}");
    }
}

#[test]
fn two_host_names_are_refused() {
    let wire = Parts::with(vec![(0, sni_data(&[(0, b"a.b"), (0, b"c.d")]))]).wire();
    assert_eq!(error_of(&wire), HelloError::TwoHostNames);
}

#[test]
fn another_name_type_beside_the_host_name_is_skipped() {
    let wire = Parts::with(vec![(0, sni_data(&[(9, b"x y"), (0, b"c.d")]))]).wire();
    assert_eq!(name_of(&wire).unwrap(), b"c.d");
}

#[test]
fn an_invalid_host_name_is_refused() {
    let long = "a".repeat(256);
    for name in [
        "",
        "a..b",
        ".a",
        "a.",
        "a_b",
        "a b",
        "é.fr",
        "a:443",
        long.as_str(),
    ] {
        let wire = Parts::with(vec![sni(name)]).wire();
        assert_eq!(error_of(&wire), HelloError::HostName, "{name:?}");
    }
    let ok = format!(
        "{}.{}.{}.{}",
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(63)
    );
    assert_eq!(ok.len(), 255);
    assert_eq!(
        name_of(&Parts::with(vec![sni(&ok)]).wire()).unwrap(),
        ok.as_bytes()
    );
    assert_eq!(
        name_of(&Parts::with(vec![sni("xn--b-0ga.Fr-1")]).wire()).unwrap(),
        b"xn--b-0ga.Fr-1"
    );
}

#[test]
fn a_malformed_alpn_list_is_refused() {
    for data in [
        vec![],
        vec![0, 0],
        vec![0, 3, 2, b'h'],
        alpn_data(&[b"h2"]).into_iter().chain([1]).collect(),
    ] {
        let wire = Parts::with(vec![(16, data.clone())]).wire();
        assert_eq!(error_of(&wire), HelloError::Alpn, "{data:?}");
    }
}

#[test]
fn an_empty_alpn_protocol_is_refused() {
    let wire = Parts::with(vec![(16, alpn_data(&[b"h2", b""]))]).wire();
    assert_eq!(error_of(&wire), HelloError::EmptyProtocol);
}

#[test]
fn malformed_supported_versions_are_refused() {
    for data in [
        vec![],
        vec![0],
        vec![3, 3, 4, 3],
        vec![2, 3, 4, 0],
        vec![1, 3],
    ] {
        let wire = Parts::with(vec![(43, data.clone())]).wire();
        assert_eq!(error_of(&wire), HelloError::SupportedVersions, "{data:?}");
    }
}

#[test]
fn every_error_has_a_one_line_message() {
    let all = [
        HelloError::NotTls,
        HelloError::RecordVersion(0x0200),
        HelloError::EmptyRecord,
        HelloError::RecordTooLong(20000),
        HelloError::Interleaved(21),
        HelloError::NotClientHello(2),
        HelloError::TooLarge(20000),
        HelloError::TooManyRecords,
        HelloError::LegacyVersion(2),
        HelloError::SessionId,
        HelloError::CipherSuites,
        HelloError::Compression,
        HelloError::Extensions,
        HelloError::Extension,
        HelloError::Duplicate(0),
        HelloError::ServerName,
        HelloError::TwoHostNames,
        HelloError::HostName,
        HelloError::Alpn,
        HelloError::EmptyProtocol,
        HelloError::SupportedVersions,
    ];
    for e in all {
        let text = e.to_string();
        assert!(!text.is_empty() && !text.contains('\n'), "{e:?}");
    }
}

// === real ClientHellos (rustls) ===

/// The first bytes a rustls client sends to `name` offering `alpn`.
fn rustls_hello(name: &str, alpn: &[&[u8]]) -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let server = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), server).unwrap();
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    out
}

#[test]
fn a_rustls_hello_gives_its_name_alpn_and_tls_1_3() {
    let wire = rustls_hello("backend.example.com", &[b"h2", b"http/1.1"]);
    let hello = parse(&wire).unwrap().unwrap();
    assert_eq!(hello.len, wire.len());
    assert_eq!(
        hello.server_name().unwrap().as_bytes(),
        b"backend.example.com"
    );
    let alpn: Vec<Vec<u8>> = hello.alpn().map(|p| p.as_bytes().to_vec()).collect();
    assert_eq!(alpn, [b"h2".to_vec(), b"http/1.1".to_vec()]);
    assert_eq!(hello.max_version(), 0x0304);
}

#[test]
fn a_rustls_hello_to_an_ip_address_has_no_name() {
    let wire = rustls_hello("127.0.0.1", &[]);
    let hello = parse(&wire).unwrap().unwrap();
    assert!(hello.server_name().is_none());
    assert!(!hello.has_alpn());
}

/// `default` cases (`PROPTEST_CASES=N` for longer searches), no regression files written.
fn config(default: u32) -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(default),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Label-ish names: what rustls accepts and SNI allows.
fn host_names() -> impl Strategy<Value = String> {
    proptest::collection::vec("[a-z]([a-z0-9-]{0,10}[a-z0-9])?", 1..5).prop_map(|l| l.join("."))
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = parse(&bytes);
    }

    #[test]
    fn arbitrary_bytes_after_a_record_header_never_panic(
        kind in prop_oneof![Just(1u8), any::<u8>()],
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut wire = vec![22, 3, 1, 0, 0, kind, 0, 0, 0];
        let len = bytes.len() + 4;
        wire[3..5].copy_from_slice(&u16b(len));
        wire[6..9].copy_from_slice(&(bytes.len() as u32).to_be_bytes()[1..]);
        wire.extend(&bytes);
        if let Ok(Some(hello)) = parse(&wire) {
            let _ = (hello.server_name(), hello.alpn().count(), hello.max_version());
        }
    }

    #[test]
    fn real_hellos_read_the_same_whole_cut_and_split(
        name in host_names(),
        cuts in proptest::collection::vec(1usize..400, 0..6),
    ) {
        let wire = rustls_hello(&name, &[b"http/1.1"]);
        let message = &wire[5..];
        let split = records(message, &cuts);
        let hello = parse(&split).unwrap().unwrap();
        let got = hello.server_name().unwrap();
        prop_assert_eq!(got.as_bytes(), name.as_bytes());
        let first = hello.alpn().next().unwrap();
        prop_assert_eq!(first.as_bytes(), b"http/1.1");
        prop_assert_eq!(hello.len, split.len());
        for end in (0..split.len()).step_by(7) {
            prop_assert!(parse(&split[..end]).unwrap().is_none());
        }
    }

    #[test]
    fn mutated_real_hellos_never_panic_and_errors_stay(
        name in host_names(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cuts in proptest::collection::vec(1usize..400, 0..4),
    ) {
        let wire = rustls_hello(&name, &[b"h2", b"http/1.1"]);
        let mut split = records(&wire[5..], &cuts);
        for (at, byte) in flips {
            let i = at.index(split.len());
            split[i] = byte;
        }
        let whole = parse(&split);
        if let Ok(Some(hello)) = &whole {
            let _ = (hello.server_name(), hello.alpn().count(), hello.max_version());
            prop_assert!(hello.len <= split.len());
        }
        // A prefix is incomplete, already wrong the same way, or (when a
        // flipped length ends the hello early) already holds the same hello.
        for end in (0..split.len()).step_by(13) {
            match (parse(&split[..end]), &whole) {
                (Ok(None), _) => {}
                (Err(e), Err(w)) => prop_assert_eq!(e, *w),
                (Ok(Some(p)), Ok(Some(w))) if p.len == w.len && p.len <= end => {}
                (part, _) => prop_assert!(false, "prefix {}: {:?}, whole {:?}", end, part.map(|h| h.map(|h| h.len)), whole.map(|h| h.map(|h| h.len))),
            }
        }
    }
}
