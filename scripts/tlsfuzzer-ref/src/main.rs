//! A plain rustls server for scripts/tlsfuzzer-compare: rustls' buffered `ServerConnection`
//! (its own record layer), TLS 1.2 and 1.3 on aws-lc-rs, stateless tickets (one per TLS 1.3
//! handshake), no session cache, 0-RTT off: Quill's TLS settings. Each connection, on a thread of
//! its own, echoes the application data it reads, as Quill's TCP listener in front of an echo
//! server does, and answers close_notify with close_notify.
//!
//! Usage: tlsfuzzer-ref ADDR CERT.pem KEY.pem

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection};

fn config(cert: &str, key: &str) -> Result<Arc<ServerConfig>, Box<dyn std::error::Error>> {
    let chain = CertificateDer::pem_file_iter(cert)?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(key)?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    cfg.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    cfg.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()?;
    cfg.send_tls13_tickets = 1;
    cfg.max_early_data_size = 0;
    Ok(Arc::new(cfg))
}

/// Serves one client until it or the TLS exchange ends.
fn serve(mut sock: TcpStream, cfg: Arc<ServerConfig>) -> io::Result<()> {
    sock.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut tls = ServerConnection::new(cfg).map_err(io::Error::other)?;
    let mut plain = vec![0u8; 64 * 1024];
    loop {
        while tls.wants_write() {
            tls.write_tls(&mut sock)?;
        }
        if tls.read_tls(&mut sock)? == 0 {
            return Ok(());
        }
        if let Err(e) = tls.process_new_packets() {
            // rustls queued its alert: out it goes, then the connection ends.
            let _ = tls.write_tls(&mut sock);
            return Err(io::Error::other(e));
        }
        loop {
            match tls.reader().read(&mut plain) {
                Ok(0) => {
                    tls.send_close_notify();
                    while tls.wants_write() {
                        tls.write_tls(&mut sock)?;
                    }
                    return Ok(());
                }
                Ok(n) => tls.writer().write_all(&plain[..n])?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, addr, cert, key] = &args[..] else {
        return Err("usage: tlsfuzzer-ref ADDR CERT.pem KEY.pem".into());
    };
    let cfg = config(cert, key)?;
    let listener = TcpListener::bind(addr.as_str())?;
    for sock in listener.incoming() {
        let Ok(sock) = sock else { continue };
        let cfg = cfg.clone();
        std::thread::spawn(move || serve(sock, cfg));
    }
    Ok(())
}
