//! The record layer against a real rustls client, after a real in-memory handshake with a rustls
//! unbuffered server turned into its kernel connection (as `TlsStream` does).

use std::io::{Read, Write};
use std::sync::Arc;

use proptest::prelude::*;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::ConnectionState;
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig};

use super::*;

struct Pki {
    cert: CertificateDer<'static>,
    key: Vec<u8>,
}

fn pki() -> &'static Pki {
    static PKI: std::sync::OnceLock<Pki> = std::sync::OnceLock::new();
    PKI.get_or_init(|| {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("rcgen");
        Pki {
            cert: ck.cert.der().clone(),
            key: ck.signing_key.serialize_der(),
        }
    })
}

fn configs(v13: bool) -> (Arc<ServerConfig>, Arc<ClientConfig>) {
    configs_with(v13, rustls::crypto::aws_lc_rs::default_provider())
}

fn configs_with(
    v13: bool,
    provider: rustls::crypto::CryptoProvider,
) -> (Arc<ServerConfig>, Arc<ClientConfig>) {
    let provider = Arc::new(provider);
    let versions: &[&rustls::SupportedProtocolVersion] = if v13 {
        &[&rustls::version::TLS13]
    } else {
        &[&rustls::version::TLS12]
    };
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki().key.clone()));
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![pki().cert.clone()], key)
        .expect("cert");
    server.enable_secret_extraction = true;
    let mut roots = RootCertStore::empty();
    roots.add(pki().cert.clone()).expect("root");
    let mut client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.enable_secret_extraction = true;
    (Arc::new(server), Arc::new(client))
}

/// A finished handshake: the server's traffic state and the client.
fn pair(v13: bool) -> (Records, ClientConnection) {
    let (secrets, kernel, client) = handshake(configs(v13));
    (Records::new(secrets, kernel).expect("records"), client)
}

/// A finished handshake: the server's secrets and kernel connection, and the client.
fn handshake(
    (scfg, ccfg): (Arc<ServerConfig>, Arc<ClientConfig>),
) -> (
    rustls::ExtractedSecrets,
    KernelConnection<ServerConnectionData>,
    ClientConnection,
) {
    let mut server = UnbufferedServerConnection::new(scfg).expect("server");
    let mut client =
        ClientConnection::new(ccfg, "localhost".try_into().expect("name")).expect("client");
    let mut inb: Vec<u8> = Vec::new();
    let mut done = false;
    for _ in 0..32 {
        while client.wants_write() {
            client.write_tls(&mut inb).expect("client write");
        }
        let mut to_client = Vec::new();
        for _ in 0..64 {
            let st = server.process_tls_records(&mut inb);
            let discard = st.discard;
            let mut stop = false;
            match st.state.expect("server state") {
                ConnectionState::EncodeTlsData(mut e) => {
                    let mut buf = vec![0u8; 32 * 1024];
                    let n = e.encode(&mut buf).expect("encode");
                    to_client.extend_from_slice(&buf[..n]);
                }
                ConnectionState::TransmitTlsData(t) => t.done(),
                ConnectionState::BlockedHandshake => stop = true,
                ConnectionState::WriteTraffic(_) => {
                    done = true;
                    stop = true;
                }
                _ => panic!("unexpected state"),
            }
            inb.drain(..discard);
            if stop {
                break;
            }
        }
        let mut rd = &to_client[..];
        while !rd.is_empty() {
            client.read_tls(&mut rd).expect("client read");
            client.process_new_packets().expect("client process");
        }
        if done && !client.is_handshaking() && !client.wants_write() {
            break;
        }
    }
    assert!(done && inb.is_empty(), "handshake finished");
    let (secrets, kernel) = server.dangerous_into_kernel_connection().expect("kernel");
    (secrets, kernel, client)
}

/// The differential test of the TLS 1.3 sealing done here: for each suite, after a real
/// handshake, the same records sealed by rustls' encrypter (from the same secrets, primed to the
/// same sequence number) and by [`Tls13Sealer`] are the same bytes, for every content type, empty
/// to full plaintexts and plaintexts in several pieces (a record within one piece is sealed
/// from it, one across pieces is copied first); and the client reads them. The handshake's
/// session tickets used the keys' first records, so the sealer starts past record 0 (as
/// Quill's do); one that starts at record 0 (after a key update) seals the same bytes too.
#[test]
fn tls13_records_sealed_here_are_rustls_records_byte_for_byte() {
    use rustls::crypto::aws_lc_rs::cipher_suite::{
        TLS13_AES_128_GCM_SHA256, TLS13_AES_256_GCM_SHA384, TLS13_CHACHA20_POLY1305_SHA256,
    };
    let big: Vec<u8> = (0..MAX_PLAIN).map(|i| (i * 7 % 251) as u8).collect();
    for suite in [
        TLS13_AES_128_GCM_SHA256,
        TLS13_AES_256_GCM_SHA384,
        TLS13_CHACHA20_POLY1305_SHA256,
    ] {
        let provider = rustls::crypto::CryptoProvider {
            cipher_suites: vec![suite],
            ..rustls::crypto::aws_lc_rs::default_provider()
        };
        let (secrets, _kernel, mut client) = handshake(configs_with(true, provider.clone()));
        let (seq, tx) = secrets.tx;
        let (key, iv) = key_iv(tx).expect("key");
        assert!(seq > 0, "the tickets were sealed with the traffic keys");
        let mut own =
            Tls13Sealer::for_suite(suite.suite(), key.as_ref(), iv.as_ref(), seq).expect("own");
        // Both paths seal the same bytes, so the bytes alone would not show AES-GCM falling back
        // to the copy.
        assert_eq!(
            own.seals_out_of_place(),
            suite.suite() != CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
            "{:?}",
            suite.suite()
        );
        // A second connection's keys, sealed from record 0 by both.
        let (zero, _, _) = handshake(configs_with(true, provider));
        let (zero_key, zero_iv) = key_iv(zero.tx.1).expect("key");
        let mut from_zero =
            Tls13Sealer::for_suite(suite.suite(), zero_key.as_ref(), zero_iv.as_ref(), 0)
                .expect("own from record 0");
        let zero_tx = match suite.suite() {
            CipherSuite::TLS13_AES_128_GCM_SHA256 => ConnectionTrafficSecrets::Aes128Gcm {
                key: zero_key,
                iv: zero_iv,
            },
            CipherSuite::TLS13_AES_256_GCM_SHA384 => ConnectionTrafficSecrets::Aes256Gcm {
                key: zero_key,
                iv: zero_iv,
            },
            _ => ConnectionTrafficSecrets::Chacha20Poly1305 {
                key: zero_key,
                iv: zero_iv,
            },
        };
        let mut theirs_zero = encrypter(suite, (0, zero_tx)).expect("rustls encrypter");
        let tx = match suite.suite() {
            CipherSuite::TLS13_AES_128_GCM_SHA256 => {
                ConnectionTrafficSecrets::Aes128Gcm { key, iv }
            }
            CipherSuite::TLS13_AES_256_GCM_SHA384 => {
                ConnectionTrafficSecrets::Aes256Gcm { key, iv }
            }
            _ => ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv },
        };
        let mut theirs = encrypter(suite, (seq, tx)).expect("rustls encrypter");
        let pieces: [&[u8]; 3] = [b"HTTP/1.1 200 OK\r\n", b"", b"\r\nbody"];
        let hello: [&[u8]; 1] = [b"hello"];
        let alert: [&[u8]; 1] = [&[1, 0]];
        let full: [&[u8]; 1] = [&big];
        let cases: [(ContentType, OutboundChunks<'_>); 9] = [
            (ContentType::ApplicationData, OutboundChunks::new(&hello)),
            (ContentType::ApplicationData, OutboundChunks::new_empty()),
            (ContentType::ApplicationData, OutboundChunks::new(&pieces)),
            (
                ContentType::ApplicationData,
                OutboundChunks::new(&pieces).split_at(20).0,
            ),
            (
                ContentType::ApplicationData,
                OutboundChunks::new(&pieces).split_at(10).0,
            ),
            (
                ContentType::ApplicationData,
                OutboundChunks::new(&pieces).split_at(20).1,
            ),
            // From the boundary of the first piece, over the empty one: one slice.
            (
                ContentType::ApplicationData,
                OutboundChunks::new(&pieces).split_at(17).1,
            ),
            (ContentType::ApplicationData, OutboundChunks::new(&full)),
            // close_notify, last: the client reads to the end.
            (ContentType::Alert, OutboundChunks::new(&alert)),
        ];
        let mut wire = Vec::new();
        for (n, (typ, chunks)) in cases.into_iter().enumerate() {
            let seq = seq + n as u64;
            let mut ours = Collect::default();
            own.seal(typ, &chunks, seq, &mut ours).expect("own seal");
            let msg = OutboundPlainMessage {
                typ,
                version: ProtocolVersion::TLSv1_2,
                payload: chunks.clone(),
            };
            let expected = theirs.encrypt(msg, seq).expect("rustls seal").encode();
            assert_eq!(
                ours.bytes(),
                &expected[..],
                "{:?}, record {n}",
                suite.suite()
            );
            wire.extend_from_slice(ours.bytes());
            let mut at_zero = Collect::default();
            from_zero
                .seal(typ, &chunks, n as u64, &mut at_zero)
                .expect("own seal from record 0");
            let msg = OutboundPlainMessage {
                typ,
                version: ProtocolVersion::TLSv1_2,
                payload: chunks,
            };
            let expected = theirs_zero
                .encrypt(msg, n as u64)
                .expect("rustls seal")
                .encode();
            assert_eq!(at_zero.bytes(), &expected[..], "from record 0, record {n}");
        }
        let read = to_client(&mut client, &wire).expect("client reads them");
        let mut want = b"hello".to_vec();
        want.extend_from_slice(b"HTTP/1.1 200 OK\r\n\r\nbody");
        want.extend_from_slice(b"HTTP/1.1 200 OK\r\n\r\nb");
        want.extend_from_slice(b"HTTP/1.1 2");
        want.extend_from_slice(b"ody");
        want.extend_from_slice(b"\r\nbody");
        want.extend_from_slice(&big);
        assert_eq!(read, want);
    }
}

/// What the client sends, as wire bytes.
fn from_client(client: &mut ClientConnection) -> Vec<u8> {
    let mut wire = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut wire).expect("client write");
    }
    wire
}

/// Reads every record of `wire`: the plaintext and the events.
fn read_all(rec: &mut Records, wire: &mut [u8]) -> Result<(Vec<u8>, Vec<Event>), Error> {
    let mut plain = Vec::new();
    let mut events = Vec::new();
    let mut at = 0;
    while let Some((used, ev)) = rec.read(&mut wire[at..])? {
        if let Event::Data(r) = &ev {
            plain.extend_from_slice(&wire[at..][r.clone()]);
        }
        events.push(ev);
        at += used;
    }
    assert_eq!(at, wire.len(), "every record read");
    Ok((plain, events))
}

/// Gives the client `wire`: what it reads, or its error.
fn to_client(client: &mut ClientConnection, wire: &[u8]) -> Result<Vec<u8>, Error> {
    let mut rd = wire;
    while !rd.is_empty() {
        client.read_tls(&mut rd).expect("client read");
        client.process_new_packets()?;
    }
    let mut out = Vec::new();
    match client.reader().read_to_end(&mut out) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Err(e) => panic!("client reader: {e}"),
    }
    Ok(out)
}

fn sealed(f: impl FnOnce(&mut dyn Sink)) -> Vec<u8> {
    let mut out = Collect::default();
    f(&mut out);
    out.into_bytes()
}

#[test]
fn data_goes_both_ways_on_both_versions() {
    for v13 in [true, false] {
        let (mut rec, mut client) = pair(v13);
        assert_eq!(rec.is_tls13(), v13);
        client
            .writer()
            .write_all(b"GET / HTTP/1.1\r\n\r\n")
            .expect("write");
        let mut wire = from_client(&mut client);
        let (plain, _) = read_all(&mut rec, &mut wire).expect("read");
        assert_eq!(plain, b"GET / HTTP/1.1\r\n\r\n");
        // Several slices, one record; then more than a record's worth, cut in two.
        let one = sealed(|e| {
            rec.write(&[b"HTTP/1.1 200 OK\r\n", b"\r\n", b"hi"], e)
                .expect("w")
        });
        assert_eq!(
            usize::from(u16::from_be_bytes([one[3], one[4]])) + 5,
            one.len()
        );
        assert_eq!(
            to_client(&mut client, &one).expect("client"),
            b"HTTP/1.1 200 OK\r\n\r\nhi"
        );
        let big = vec![7u8; MAX_PLAIN + 10];
        let two = sealed(|e| rec.write(&[&big], e).expect("w"));
        assert_eq!(to_client(&mut client, &two).expect("client"), big);
    }
}

#[test]
fn a_partial_record_waits_for_the_rest() {
    let (mut rec, mut client) = pair(true);
    client.writer().write_all(b"abc").expect("write");
    let mut wire = from_client(&mut client);
    let n = wire.len();
    assert_eq!(rec.read(&mut wire[..3]).expect("header"), None);
    assert_eq!(rec.read(&mut wire[..n - 1]).expect("short"), None);
    let (used, ev) = rec.read(&mut wire).expect("read").expect("record");
    assert_eq!(used, n);
    let Event::Data(r) = ev else { panic!("data") };
    assert_eq!(&wire[r], b"abc");
}

#[test]
fn a_key_update_from_the_client_is_followed_and_answered() {
    let (mut rec, mut client) = pair(true);
    // rustls' refresh_traffic_keys asks for an update in return.
    client.refresh_traffic_keys().expect("refresh");
    client.writer().write_all(b"after").expect("write");
    let mut wire = from_client(&mut client);
    let (plain, events) = read_all(&mut rec, &mut wire).expect("read");
    assert_eq!(plain, b"after");
    assert!(events.contains(&Event::Nothing));
    // Our KeyUpdate goes before the data, under the old keys; the data under the new ones.
    let out = sealed(|e| rec.write(&[b"reply"], e).expect("w"));
    assert_eq!(to_client(&mut client, &out).expect("client"), b"reply");
    // And again: both sides' keys moved twice.
    client.refresh_traffic_keys().expect("refresh");
    client.writer().write_all(b"again").expect("write");
    let mut wire = from_client(&mut client);
    assert_eq!(read_all(&mut rec, &mut wire).expect("read").0, b"again");
    let out = sealed(|e| rec.write(&[b"more"], e).expect("w"));
    assert_eq!(to_client(&mut client, &out).expect("client"), b"more");
}

#[test]
fn key_updates_in_a_row_without_data_are_bounded() {
    // 32 in a row are followed; application data starts the count again.
    let (mut rec, mut client) = pair(true);
    for _ in 0..KEY_UPDATES_IN_A_ROW {
        client.refresh_traffic_keys().expect("refresh");
    }
    client.writer().write_all(b"data").expect("write");
    for _ in 0..KEY_UPDATES_IN_A_ROW {
        client.refresh_traffic_keys().expect("refresh");
    }
    client.writer().write_all(b"more").expect("write");
    let mut wire = from_client(&mut client);
    assert_eq!(read_all(&mut rec, &mut wire).expect("read").0, b"datamore");
    // The 33rd in a row is refused with unexpected_message.
    let (mut rec, mut client) = pair(true);
    for _ in 0..=KEY_UPDATES_IN_A_ROW {
        client.refresh_traffic_keys().expect("refresh");
    }
    let mut wire = from_client(&mut client);
    assert!(read_all(&mut rec, &mut wire).is_err());
    assert_eq!(rec.owe_alert, Some(AlertDescription::UnexpectedMessage));
}

#[test]
fn the_write_limit_updates_keys_on_tls13_and_closes_on_tls12() {
    let (mut rec, mut client) = pair(true);
    rec.tx_limit = rec.tx_seq + 1;
    let out = sealed(|e| rec.write(&[b"one"], e).expect("w"));
    assert_eq!(to_client(&mut client, &out).expect("client"), b"one");
    // The limit is reached: a KeyUpdate, then the record under the new keys (sequence 0).
    let out = sealed(|e| rec.write(&[b"two"], e).expect("w"));
    assert_eq!(rec.tx_seq, 1);
    assert_eq!(to_client(&mut client, &out).expect("client"), b"two");

    let (mut rec, mut client) = pair(false);
    rec.tx_limit = rec.tx_seq;
    let mut out = Collect::default();
    let r = rec.write(&[b"x"], &mut out);
    assert!(r.is_err());
    assert!(rec.write_closed());
    to_client(&mut client, out.bytes()).expect("client");
    let mut buf = [0u8; 4];
    assert_eq!(client.reader().read(&mut buf).expect("clean end"), 0);
}

#[test]
fn the_read_sequence_limit_is_an_error() {
    let (mut rec, mut client) = pair(true);
    rec.rx_seq = SEQ_HARD_LIMIT;
    client.writer().write_all(b"x").expect("write");
    let mut wire = from_client(&mut client);
    assert!(rec.read(&mut wire).is_err());
}

#[test]
fn close_notify_ends_both_ways() {
    for v13 in [true, false] {
        let (mut rec, mut client) = pair(v13);
        client.writer().write_all(b"last").expect("write");
        client.send_close_notify();
        let mut wire = from_client(&mut client);
        let (plain, events) = read_all(&mut rec, &mut wire).expect("read");
        assert_eq!(plain, b"last");
        assert_eq!(events.last(), Some(&Event::PeerClosed));
        let out = sealed(|e| rec.close_notify(e));
        assert!(rec.write_closed());
        assert!(rec.write(&[b"late"], &mut Collect::default()).is_err());
        to_client(&mut client, &out).expect("client");
        let mut buf = [0u8; 4];
        assert_eq!(client.reader().read(&mut buf).expect("clean end"), 0);
    }
}

/// The client's view of what the server sent after an error: the alert it received.
fn alert_seen(client: &mut ClientConnection, out: &[u8]) -> Error {
    to_client(client, out).expect_err("an alert")
}

#[test]
fn a_bad_record_is_refused_with_bad_record_mac() {
    for v13 in [true, false] {
        let (mut rec, mut client) = pair(v13);
        client.writer().write_all(b"data").expect("write");
        let mut wire = from_client(&mut client);
        let last = wire.len() - 1;
        wire[last] ^= 1;
        assert!(rec.read(&mut wire).is_err());
        let out = sealed(|e| rec.owed(e));
        assert_eq!(
            alert_seen(&mut client, &out),
            Error::AlertReceived(AlertDescription::BadRecordMac)
        );
        // Nothing more is read or written.
        assert!(rec.read(&mut wire).is_err());
        assert!(rec.write(&[b"x"], &mut Collect::default()).is_err());
    }
}

#[test]
fn oversized_ccs_and_unknown_records_are_refused() {
    let cases: [(&[u8], AlertDescription); 4] = [
        (&[23, 3, 3, 0x41, 0x01], AlertDescription::RecordOverflow),
        (&[20, 3, 3, 0, 1, 1], AlertDescription::UnexpectedMessage),
        (&[99, 3, 3, 0, 1, 1], AlertDescription::UnexpectedMessage),
        (&[23, 9, 9, 0, 1, 1], AlertDescription::DecodeError),
    ];
    for (bytes, alert) in cases {
        let (mut rec, mut client) = pair(true);
        let mut wire = bytes.to_vec();
        assert!(rec.read(&mut wire).is_err(), "{bytes:?}");
        let out = sealed(|e| rec.owed(e));
        assert_eq!(alert_seen(&mut client, &out), Error::AlertReceived(alert));
    }
    // TLS 1.2 allows 2 KiB of expansion, not more.
    let (mut rec, _) = pair(false);
    let mut wire = vec![23, 3, 3, 0x48, 0x01];
    assert!(rec.read(&mut wire).is_err());
}

/// The client's sending keys, taken from it (rustls' secret extraction), to seal records no
/// rustls client would send.
struct Forger {
    enc: Box<dyn MessageEncrypter>,
    seq: u64,
}

impl Forger {
    fn new(v13: bool) -> (Records, Forger) {
        let (rec, client) = pair(v13);
        let suite = client.negotiated_cipher_suite().expect("suite");
        let secrets = client.dangerous_extract_secrets().expect("client secrets");
        let seq = secrets.tx.0;
        let enc = encrypter(suite, secrets.tx).expect("encrypter");
        (rec, Forger { enc, seq })
    }

    fn seal(&mut self, typ: ContentType, payload: &[u8]) -> Vec<u8> {
        let chunks: &[&[u8]] = &[payload];
        let msg = OutboundPlainMessage {
            typ,
            version: ProtocolVersion::TLSv1_2,
            payload: OutboundChunks::new(chunks),
        };
        let out = self.enc.encrypt(msg, self.seq).expect("seal").encode();
        self.seq += 1;
        out
    }
}

#[test]
fn forged_client_records_are_judged_as_rustls_does() {
    use AlertDescription as A;
    // (TLS 1.3?, type, plaintext, Ok(event) or the alert owed; None: no alert, an error)
    type Want = Result<Event, Option<AlertDescription>>;
    let cases: Vec<(bool, ContentType, Vec<u8>, Want)> = vec![
        (
            true,
            ContentType::Handshake,
            vec![24, 0, 0, 1, 0],
            Ok(Event::Nothing),
        ),
        // RFC 8446 4.6.3: a request_update other than 0 or 1 is an illegal_parameter.
        (
            true,
            ContentType::Handshake,
            vec![24, 0, 0, 1, 2],
            Err(Some(A::IllegalParameter)),
        ),
        (
            true,
            ContentType::Handshake,
            vec![24, 0, 0, 2, 0, 0],
            Err(Some(A::DecodeError)),
        ),
        // The start of a message split across records waits for the rest; a KeyUpdate not at
        // the end of its record, or any other message, is refused.
        (
            true,
            ContentType::Handshake,
            vec![24, 0, 0, 1],
            Ok(Event::Nothing),
        ),
        (
            true,
            ContentType::Handshake,
            vec![24, 0],
            Ok(Event::Nothing),
        ),
        (
            true,
            ContentType::Handshake,
            vec![],
            Err(Some(A::DecodeError)),
        ),
        (
            true,
            ContentType::Handshake,
            vec![24, 0, 0, 1, 0, 24, 0, 0, 1, 0],
            Err(Some(A::UnexpectedMessage)),
        ),
        (
            true,
            ContentType::Handshake,
            vec![1, 0, 0, 0],
            Err(Some(A::UnexpectedMessage)),
        ),
        (
            true,
            ContentType::ChangeCipherSpec,
            vec![1],
            Err(Some(A::UnexpectedMessage)),
        ),
        (true, ContentType::Alert, vec![1, 90], Ok(Event::Nothing)),
        (true, ContentType::Alert, vec![1, 0], Ok(Event::PeerClosed)),
        // TLS 1.3 has no warning but user_canceled; an unknown level is an illegal_parameter.
        (
            true,
            ContentType::Alert,
            vec![1, 40],
            Err(Some(A::DecodeError)),
        ),
        (true, ContentType::Alert, vec![2, 40], Err(None)),
        (
            true,
            ContentType::Alert,
            vec![3, 40],
            Err(Some(A::IllegalParameter)),
        ),
        (true, ContentType::Alert, vec![1], Err(Some(A::DecodeError))),
        (
            true,
            ContentType::ApplicationData,
            vec![0; MAX_PLAIN + 1],
            Err(Some(A::RecordOverflow)),
        ),
        (
            true,
            ContentType::ApplicationData,
            vec![],
            Ok(Event::Data(5..5)),
        ),
        // TLS 1.2: every handshake message but a ClientHello (renegotiation, answered with a
        // warning: see below) is refused.
        (
            false,
            ContentType::Handshake,
            vec![24, 0, 0, 1, 0],
            Err(Some(A::UnexpectedMessage)),
        ),
        (
            false,
            ContentType::ChangeCipherSpec,
            vec![1],
            Err(Some(A::UnexpectedMessage)),
        ),
        (false, ContentType::Alert, vec![1, 100], Ok(Event::Nothing)),
        (false, ContentType::Alert, vec![2, 40], Err(None)),
        (false, ContentType::Alert, vec![1, 0], Ok(Event::PeerClosed)),
        (
            false,
            ContentType::ApplicationData,
            vec![0; MAX_PLAIN + 1],
            Err(Some(A::RecordOverflow)),
        ),
    ];
    for (v13, typ, payload, want) in cases {
        let (mut rec, mut forger) = Forger::new(v13);
        let mut wire = forger.seal(typ, &payload);
        let got = rec.read(&mut wire);
        let owed_alert = rec.owe_alert;
        let owed = sealed(|e| rec.owed(e));
        match want {
            Ok(Event::Data(r)) => {
                let (used, Event::Data(got)) = got.expect("read").expect("record") else {
                    panic!("data for {typ:?} {payload:?}")
                };
                assert_eq!(used, wire.len());
                assert_eq!(got.len(), r.len());
            }
            Ok(ev) => {
                let (used, got) = got.expect("read").expect("record");
                assert_eq!((used, got), (wire.len(), ev), "{v13} {typ:?} {payload:?}");
                assert!(owed.is_empty());
            }
            Err(alert) => {
                assert!(got.is_err(), "{v13} {typ:?} {payload:?}");
                assert_eq!(owed_alert, alert, "{v13} {typ:?} {payload:?}");
                assert_eq!(
                    owed.is_empty(),
                    alert.is_none(),
                    "{v13} {typ:?} {payload:?}"
                );
            }
        }
    }
}

#[test]
fn a_key_update_not_requested_is_followed_without_an_answer() {
    let (mut rec, mut forger) = Forger::new(true);
    let mut wire = forger.seal(ContentType::Handshake, &[24, 0, 0, 1, 0]);
    assert_eq!(
        rec.read(&mut wire).expect("read"),
        Some((wire.len(), Event::Nothing))
    );
    assert_eq!(rec.rx_seq, 0);
    assert!(!rec.owe_key_update);
    // The client's old keys no longer open anything.
    let mut wire = forger.seal(ContentType::ApplicationData, b"old keys");
    assert!(rec.read(&mut wire).is_err());
    assert_eq!(rec.owe_alert, Some(AlertDescription::BadRecordMac));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Arbitrary bytes after a real handshake never panic, and every read takes a whole record
    /// or waits.
    #[test]
    fn arbitrary_records_never_panic(v13 in any::<bool>(), data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let (mut rec, _) = pair(v13);
        let mut data = data;
        let mut at = 0;
        for _ in 0..1024 {
            match rec.read(&mut data[at..]) {
                Ok(Some((used, _))) => {
                    prop_assert!(used >= 5 && at + used <= data.len());
                    at += used;
                }
                Ok(None) | Err(_) => break,
            }
        }
        let _ = sealed(|e| rec.owed(e));
    }
}

#[test]
fn a_key_update_fragmented_across_records_is_joined_and_answered() {
    let (mut rec, mut forger) = Forger::new(true);
    // "fragmented keyupdate msg", "two KeyUpdates, first fragmented": a header in one record,
    // the request in the next, then a whole one.
    for part in [&[24u8, 0][..], &[0, 1], &[1]] {
        let mut wire = forger.seal(ContentType::Handshake, part);
        assert_eq!(
            rec.read(&mut wire).expect("fragment"),
            Some((wire.len(), Event::Nothing))
        );
    }
    assert!(rec.owe_key_update);
    assert_eq!(rec.rx_seq, 0, "new receive keys after the joined KeyUpdate");
    let (mut rec2, mut forger2) = Forger::new(true);
    let mut wire = forger2.seal(ContentType::Handshake, &[24, 0, 0, 1]);
    rec2.read(&mut wire).expect("header").expect("record");
    let mut wire = forger2.seal(ContentType::ApplicationData, b"between");
    assert!(rec2.read(&mut wire).is_err(), "data between fragments");
    assert_eq!(rec2.owe_alert, Some(AlertDescription::UnexpectedMessage));
}

#[test]
fn renegotiation_gets_a_no_renegotiation_warning_once() {
    let (mut rec, mut forger) = Forger::new(false);
    // A ClientHello cut in two records: joined, skipped, answered by a warning.
    let mut hello = vec![1u8, 0, 0, 40];
    hello.extend_from_slice(&[7u8; 40]);
    for part in [&hello[..10], &hello[10..]] {
        let mut wire = forger.seal(ContentType::Handshake, part);
        assert_eq!(
            rec.read(&mut wire).expect("hello"),
            Some((wire.len(), Event::Nothing))
        );
    }
    assert_eq!(rec.owe_warning, Some(AlertDescription::NoRenegotiation));
    let owed = sealed(|e| rec.owed(e));
    assert!(!owed.is_empty());
    // The connection goes on.
    let mut wire = forger.seal(ContentType::ApplicationData, b"still here");
    let (_, ev) = rec.read(&mut wire).expect("data").expect("record");
    assert!(matches!(ev, Event::Data(_)));
    // A second attempt ends it.
    let mut wire = forger.seal(ContentType::Handshake, &[1, 0, 0, 0]);
    assert!(rec.read(&mut wire).is_err());
}

#[test]
fn empty_records_and_warning_alerts_are_bounded_as_rustls_bounds_them() {
    for v13 in [true, false] {
        let (mut rec, mut forger) = Forger::new(v13);
        for i in 0..32 {
            let mut wire = forger.seal(ContentType::ApplicationData, &[]);
            assert!(rec.read(&mut wire).is_ok(), "empty record {i}");
        }
        let mut wire = forger.seal(ContentType::ApplicationData, &[]);
        assert!(rec.read(&mut wire).is_err(), "33rd empty record");
        assert_eq!(rec.owe_alert, None);

        let (mut rec, mut forger) = Forger::new(v13);
        // user_canceled is a warning both versions accept.
        for i in 0..4 {
            let mut wire = forger.seal(ContentType::Alert, &[1, 90]);
            assert!(rec.read(&mut wire).is_ok(), "warning {i}");
        }
        let mut wire = forger.seal(ContentType::Alert, &[1, 90]);
        assert!(rec.read(&mut wire).is_err(), "5th warning");
    }
}
