//! Fuzz target on Quill's own TLS record layer (`quill_core::tls_records`, the `tls` feature): a
//! real in-memory handshake (a rustls unbuffered server turned into its kernel connection, as
//! Quill's TLS streams do, and a rustls client), then arbitrary bytes read as records from the client, as `Server::traffic_pass` reads them: each whole record taken,
//! what is owed (a key update, an alert) sealed, and writes in between. The first byte picks TLS
//! 1.2 or 1.3; the input may also start with records the client really sealed (its second byte
//! says how many), so the fuzzer reaches past the MAC check. Nothing may panic; an error ends
//! the input as it ends a session.

#![no_main]

use std::io::Write;
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use quill_core::tls_records::{Collect, Event, Records};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::ConnectionState;
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig};

fn configs(v13: bool) -> (Arc<ServerConfig>, Arc<ClientConfig>) {
    static CONFIGS: OnceLock<[(Arc<ServerConfig>, Arc<ClientConfig>); 2]> = OnceLock::new();
    let all = CONFIGS.get_or_init(|| {
        let cert = rcgen::generate_simple_self_signed(vec!["fuzz.example".to_string()])
            .expect("test certificate");
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let make = |version: &'static rustls::SupportedProtocolVersion| {
            let key =
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()));
            let mut server = ServerConfig::builder_with_provider(provider.clone())
                .with_protocol_versions(&[version])
                .expect("versions")
                .with_no_client_auth()
                .with_single_cert(vec![cert.cert.der().clone()], key)
                .expect("certificate");
            server.enable_secret_extraction = true;
            let mut roots = RootCertStore::empty();
            roots.add(cert.cert.der().clone()).expect("root");
            let client = ClientConfig::builder_with_provider(provider.clone())
                .with_protocol_versions(&[version])
                .expect("versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
            (Arc::new(server), Arc::new(client))
        };
        [make(&rustls::version::TLS12), make(&rustls::version::TLS13)]
    });
    all[usize::from(v13)].clone()
}

/// A finished handshake: the server's traffic state and the client.
fn pair(v13: bool) -> Option<(Records, ClientConnection)> {
    let (scfg, ccfg) = configs(v13);
    let mut server = UnbufferedServerConnection::new(scfg).ok()?;
    let mut client = ClientConnection::new(ccfg, "fuzz.example".try_into().ok()?).ok()?;
    let mut inb: Vec<u8> = Vec::new();
    let mut done = false;
    for _ in 0..32 {
        while client.wants_write() {
            client.write_tls(&mut inb).ok()?;
        }
        let mut to_client = Vec::new();
        for _ in 0..64 {
            let st = server.process_tls_records(&mut inb);
            let discard = st.discard;
            let mut stop = false;
            match st.state.ok()? {
                ConnectionState::EncodeTlsData(mut e) => {
                    let mut buf = vec![0u8; 32 * 1024];
                    let n = e.encode(&mut buf).ok()?;
                    to_client.extend_from_slice(&buf[..n]);
                }
                ConnectionState::TransmitTlsData(t) => t.done(),
                ConnectionState::WriteTraffic(_) => {
                    done = true;
                    stop = true;
                }
                _ => stop = true,
            }
            inb.drain(..discard);
            if stop {
                break;
            }
        }
        let mut rd = &to_client[..];
        while !rd.is_empty() {
            client.read_tls(&mut rd).ok()?;
            client.process_new_packets().ok()?;
        }
        if done && !client.is_handshaking() && !client.wants_write() {
            break;
        }
    }
    let (secrets, kernel) = server.dangerous_into_kernel_connection().ok()?;
    Some((Records::new(secrets, kernel).ok()?, client))
}

fuzz_target!(|data: &[u8]| {
    let v13 = data.first().is_some_and(|b| b & 1 == 1);
    let Some((mut rec, mut client)) = pair(v13) else {
        return;
    };
    // Up to 4 genuine records first (a key update among them on TLS 1.3), then the input.
    let genuine = data.get(1).map_or(0, |b| b % 5);
    let mut wire = Vec::new();
    for i in 0..genuine {
        if v13 && i == 1 {
            let _ = client.refresh_traffic_keys();
        }
        let _ = client.writer().write_all(&data[..data.len().min(64)]);
        while client.wants_write() {
            if client.write_tls(&mut wire).is_err() {
                break;
            }
        }
    }
    wire.extend_from_slice(data.get(2..).unwrap_or(&[]));
    let mut out = Collect::default();
    let mut at = 0;
    for _ in 0..=wire.len() / 5 {
        match rec.read(&mut wire[at..]) {
            Ok(Some((used, event))) => {
                assert!(used >= 5 && at + used <= wire.len());
                if let Event::Data(r) = event {
                    assert!(r.end <= used);
                }
                at += used;
                rec.owed(&mut out);
                let _ = rec.write(&[b"HTTP/1.1 200 OK\r\n", b"\r\n"], &mut out);
            }
            Ok(None) => break,
            Err(_) => {
                rec.owed(&mut out);
                break;
            }
        }
    }
    rec.close_notify(&mut out);
    // The client reads all we sealed without a protocol error of ours.
    let mut rd = out.bytes();
    while !rd.is_empty() {
        if client.read_tls(&mut rd).is_err() || client.process_new_packets().is_err() {
            break;
        }
    }
});
