//! Fuzz target on the TLS record path: arbitrary bytes from a client fed to a rustls
//! `ServerConnection` the way Quill's sessions feed it (`read_tls`, `process_new_packets`, the
//! plaintext `reader`, and `write_tls` for what it answers), with a real certificate made once by
//! rcgen and the provider Quill uses (aws-lc-rs). Nothing may panic; an error ends the input as
//! it ends a session.

#![no_main]

use std::io::{self, Read};
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ServerConfig, ServerConnection};

fn config() -> Arc<ServerConfig> {
    static CONFIG: OnceLock<Arc<ServerConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let cert = rcgen::generate_simple_self_signed(vec!["fuzz.example".to_string()])
                .expect("test certificate");
            let key =
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()));
            let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
            let mut config = ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("versions")
                .with_no_client_auth()
                .with_single_cert(vec![cert.cert.der().clone()], key)
                .expect("certificate");
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Arc::new(config)
        })
        .clone()
}

fuzz_target!(|data: &[u8]| {
    let Ok(mut conn) = ServerConnection::new(config()) else {
        return;
    };
    // The input arrives in pieces whose sizes its first byte chooses, as reads from a socket.
    let piece = usize::from(data.first().copied().unwrap_or(0)).max(1) * 7;
    let mut plain = [0u8; 4096];
    let mut out = Vec::new();
    for chunk in data.chunks(piece) {
        let mut rd = chunk;
        while !rd.is_empty() {
            match conn.read_tls(&mut rd) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if conn.process_new_packets().is_err() {
                // What a session does on a TLS error: send the alert, then close.
                let _ = conn.write_tls(&mut out);
                return;
            }
            loop {
                match conn.reader().read(&mut plain) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => return,
                }
            }
            while conn.wants_write() {
                out.clear();
                if conn.write_tls(&mut out).is_err() {
                    return;
                }
            }
        }
    }
    let _ = (
        conn.is_handshaking(),
        conn.server_name(),
        conn.alpn_protocol(),
    );
});
