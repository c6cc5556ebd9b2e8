//! Fuzz target on the TLS record path: arbitrary bytes from a client fed to a rustls
//! `UnbufferedServerConnection` the way Quill's TLS streams (src/net/tls/server.rs) feed it: the
//! bytes read so far in one buffer, `process_tls_records` over them, each state handled (records
//! encoded and "sent", plaintext read, close_notify seen), `discard` applied before the next call;
//! after an error only the queued alert is taken, the failed bytes are never processed again. The
//! ClientHello is also read by `quill_core::tls_hello` for its server name, as Quill does. A real
//! certificate made once by rcgen and the provider Quill uses (aws-lc-rs). Nothing may panic; an
//! error ends the input as it ends a session.

#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, InsufficientSizeError};
use rustls::ServerConfig;

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
    let Ok(mut conn) = UnbufferedServerConnection::new(config()) else {
        return;
    };
    // The input arrives in pieces whose sizes its first byte chooses, as reads from a socket.
    let piece = usize::from(data.first().copied().unwrap_or(0)).max(1) * 7;
    let mut inb = vec![0u8; 0x10000 + 4 * 18560];
    let mut used = 0;
    let mut out = vec![0u8; 18560];
    let mut plain = 0usize;
    let mut hello_seen = false;
    for chunk in data.chunks(piece) {
        let take = chunk.len().min(inb.len() - used);
        if take == 0 {
            return;
        }
        inb[used..used + take].copy_from_slice(&chunk[..take]);
        used += take;
        if !hello_seen {
            match quill_core::tls_hello::parse(&inb[..used]) {
                Ok(None) => {}
                Ok(Some(h)) => {
                    hello_seen = true;
                    let _ = h.server_name().map(|n| n.as_bytes().len());
                }
                Err(_) => hello_seen = true,
            }
        }
        for _ in 0..1024 {
            let status = conn.process_tls_records(&mut inb[..used]);
            let mut discard = status.discard;
            let mut failed = false;
            let mut wait = false;
            match status.state {
                Err(_) => failed = true,
                Ok(ConnectionState::ReadTraffic(mut r)) => {
                    while let Some(rec) = r.next_record() {
                        match rec {
                            Ok(rec) => {
                                discard += rec.discard;
                                plain += rec.payload.len();
                            }
                            Err(_) => {
                                failed = true;
                                break;
                            }
                        }
                    }
                }
                Ok(ConnectionState::ReadEarlyData(mut r)) => {
                    while let Some(rec) = r.next_record() {
                        match rec {
                            Ok(rec) => discard += rec.discard,
                            Err(_) => {
                                failed = true;
                                break;
                            }
                        }
                    }
                }
                Ok(ConnectionState::EncodeTlsData(mut e)) => match e.encode(&mut out) {
                    Ok(_) => {}
                    Err(EncodeError::InsufficientSize(InsufficientSizeError { required_size })) => {
                        out.resize(required_size, 0);
                        let _ = e.encode(&mut out);
                    }
                    Err(_) => {}
                },
                Ok(ConnectionState::TransmitTlsData(t)) => t.done(),
                Ok(ConnectionState::WriteTraffic(mut w)) => {
                    // What a session would answer: a few bytes back, then wait for input.
                    let _ = w.encrypt(b"HTTP/1.1 200 OK\r\n\r\n", &mut out);
                    wait = true;
                }
                Ok(ConnectionState::PeerClosed) => {}
                Ok(_) => wait = true,
            }
            let discard = discard.min(used);
            inb.copy_within(discard..used, 0);
            used -= discard;
            if failed {
                // The alert rustls queued, and nothing more from this input.
                for _ in 0..4 {
                    if !conn.wants_write() {
                        break;
                    }
                    match conn.process_tls_records(&mut []).state {
                        Ok(ConnectionState::EncodeTlsData(mut e)) => {
                            let _ = e.encode(&mut out);
                        }
                        _ => break,
                    }
                }
                return;
            }
            if wait {
                break;
            }
        }
    }
    let _ = (conn.is_handshaking(), conn.alpn_protocol(), plain);
});
