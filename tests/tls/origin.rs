//! TLS to servers (docs/design.md#tls): `server_tls = { verify, ca, sni, cert, key }` on a pool.
//! The servers here are real TLS servers (rustls, in test threads) with certificates made by the
//! test; they record what each handshake said (server name, client certificate) and serve an
//! echo (TCP) or a small HTTP answer.

use crate::admin_support;
use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use support::*;

/// A CA able to sign leaves.
struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pem: String,
}

fn new_ca(name: &str) -> Ca {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(rcgen::DnType::CommonName, name);
    let cert = p.self_signed(&key).unwrap();
    Ca {
        issuer: rcgen::Issuer::new(p, key),
        pem: cert.pem(),
    }
}

/// A leaf for `names` (and 127.0.0.1) signed by `ca`: (cert PEM, key PEM).
fn leaf(ca: &Ca, names: &[&str], cn: &str) -> (String, String) {
    use rcgen::{CertificateParams, KeyPair, SanType};
    let key = KeyPair::generate().unwrap();
    let mut p =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    p.subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    let cert = p.signed_by(&key, &ca.issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// What a TLS server saw.
#[derive(Default)]
struct Seen {
    handshakes: AtomicUsize,
    sni: Mutex<Vec<Option<String>>>,
    client_certs: AtomicUsize,
}

/// A TLS server on 127.0.0.1 in test threads: echo, or one HTTP answer per request (`http`).
struct TlsServer {
    addr: SocketAddr,
    seen: Arc<Seen>,
    stop: Arc<AtomicBool>,
}

impl TlsServer {
    fn start(cert: &str, key: &str, client_ca: Option<&str>, http: bool) -> TlsServer {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
            .map(|c| c.unwrap())
            .collect();
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = match client_ca {
            Some(pem) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                    roots.add(c.unwrap()).unwrap();
                }
                builder.with_client_cert_verifier(
                    rustls::server::WebPkiClientVerifier::builder_with_provider(
                        Arc::new(roots),
                        provider,
                    )
                    .build()
                    .unwrap(),
                )
            }
            None => builder.with_no_client_auth(),
        };
        let mut cfg = builder.with_single_cert(chain, key).unwrap();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let cfg = Arc::new(cfg);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            while !stop2.load(Ordering::Relaxed) && Instant::now() < deadline {
                let (sock, _) = match listener.accept() {
                    Ok(c) => c,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                };
                let (cfg, seen) = (cfg.clone(), seen2.clone());
                std::thread::spawn(move || serve(sock, cfg, seen, http));
            }
        });
        TlsServer { addr, seen, stop }
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(sock: TcpStream, cfg: Arc<rustls::ServerConfig>, seen: Arc<Seen>, http: bool) {
    sock.set_nonblocking(false).unwrap();
    set_timeouts(&sock, IO_TIMEOUT);
    let conn = rustls::ServerConnection::new(cfg).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    while tls.conn.is_handshaking() {
        if tls.conn.complete_io(&mut tls.sock).is_err() {
            return;
        }
    }
    seen.handshakes.fetch_add(1, Ordering::Relaxed);
    seen.sni
        .lock()
        .unwrap()
        .push(tls.conn.server_name().map(str::to_string));
    if tls.conn.peer_certificates().is_some_and(|c| !c.is_empty()) {
        seen.client_certs.fetch_add(1, Ordering::Relaxed);
    }
    let mut buf = [0u8; 16384];
    let mut pending = Vec::new();
    loop {
        let n = match tls.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if !http {
            if tls.write_all(&buf[..n]).is_err() {
                return;
            }
            continue;
        }
        pending.extend_from_slice(&buf[..n]);
        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            pending.drain(..end + 4);
            let _ = tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecure");
        }
    }
}

/// Starts quill with `text(dir, port)` as its TOML config (PEM files written in `dir`).
fn start(text: impl Fn(&Path, u16) -> String) -> (QuillProcess, SocketAddr) {
    admin_support::start_with_admin(|dir, port, admin| {
        let cfg = dir.join("quill.toml");
        std::fs::write(&cfg, text(dir, port)).unwrap();
        vec![
            "--admin".into(),
            admin.to_string(),
            "--config".into(),
            cfg.display().to_string(),
        ]
    })
}

fn echo_through(port: u16, msg: &[u8]) -> Vec<u8> {
    let mut c = connect_port(port);
    set_timeouts(&c, IO_TIMEOUT);
    c.write_all(msg).unwrap();
    read_exact_within(&mut c, msg.len(), IO_TIMEOUT)
}

#[test]
fn tls_to_servers_verifies_the_server_and_forwards_tcp() {
    let ca = new_ca("Backend CA");
    let (cert, key) = leaf(&ca, &["backend.test"], "backend");
    let server = TlsServer::start(&cert, &key, None, false);
    let addr = server.addr;
    let (q, _admin) = start(|dir, port| {
        let ca_file = write(dir, "ca.pem", &ca.pem);
        format!(
            "[[listener]]\nname = \"l\"\nlisten = \"127.0.0.1:{port}\"\nservers = [\"{addr}\"]\nserver_tls = {{ ca = \"{}\" }}\n",
            ca_file.display()
        )
    });
    assert_eq!(
        echo_through(q.port, b"over tls to the server"),
        b"over tls to the server"
    );
    assert!(server.seen.handshakes.load(Ordering::Relaxed) >= 1);
    // No SNI for a server given by address.
    assert_eq!(server.seen.sni.lock().unwrap().last().cloned(), Some(None));
}

#[test]
fn tls_to_servers_a_certificate_that_does_not_verify_fails_over_to_the_next_server() {
    let good_ca = new_ca("Good CA");
    let bad_ca = new_ca("Other CA");
    let (gc, gk) = leaf(&good_ca, &["backend.test"], "good");
    let (bc, bk) = leaf(&bad_ca, &["backend.test"], "bad");
    let bad = TlsServer::start(&bc, &bk, None, false);
    let good = TlsServer::start(&gc, &gk, None, false);
    let (b, g) = (bad.addr, good.addr);
    let (q, admin) = start(|dir, port| {
        let ca_file = write(dir, "ca.pem", &good_ca.pem);
        format!(
            "workers = 1\n[[listener]]\nname = \"l\"\nlisten = \"127.0.0.1:{port}\"\nmode = [\"roundrobin\"]\nservers = [\"{b}\", \"{g}\"]\nserver_tls = {{ ca = \"{}\" }}\n",
            ca_file.display()
        )
    });
    // The readiness probe was a session too: count from here.
    let before = good.seen.handshakes.load(Ordering::Relaxed);
    for i in 0..4u8 {
        let msg = [b'a' + i; 8];
        assert_eq!(echo_through(q.port, &msg), msg, "session {i} was served");
    }
    assert_eq!(
        good.seen.handshakes.load(Ordering::Relaxed) - before,
        4,
        "the good server served every session"
    );
    let m = admin_support::metrics(admin);
    assert!(
        m.value(
            "quill_server_connect_failures_total",
            &[("address", &b.to_string())]
        ) >= 1.0,
        "the bad server's failed handshake counts as a failed connect"
    );
    assert!(
        q.stderr().contains("TLS handshake"),
        "the failure names the TLS handshake: {}",
        q.stderr()
    );
}

#[test]
fn tls_to_servers_verify_false_accepts_any_certificate() {
    let ca = new_ca("Unknown CA");
    let (cert, key) = leaf(&ca, &["whatever.test"], "any");
    let server = TlsServer::start(&cert, &key, None, false);
    let addr = server.addr;
    let (q, _admin) = start(|_dir, port| {
        format!(
            "[[listener]]\nname = \"l\"\nlisten = \"127.0.0.1:{port}\"\nservers = [\"{addr}\"]\nserver_tls = {{ verify = false }}\n"
        )
    });
    assert_eq!(echo_through(q.port, b"unverified"), b"unverified");
}

#[test]
fn tls_to_servers_sends_the_configured_sni_and_a_client_certificate() {
    let ca = new_ca("Backend CA");
    let (cert, key) = leaf(&ca, &["backend.test"], "backend");
    let client_ca = new_ca("Client CA");
    let (ccert, ckey) = leaf(&client_ca, &["quill.test"], "quill");
    let server = TlsServer::start(&cert, &key, Some(&client_ca.pem), false);
    let addr = server.addr;
    let (q, _admin) = start(|dir, port| {
        let ca_file = write(dir, "ca.pem", &ca.pem);
        let c = write(dir, "client.pem", &ccert);
        let k = write(dir, "client.key", &ckey);
        format!(
            "[[listener]]\nname = \"l\"\nlisten = \"127.0.0.1:{port}\"\nservers = [\"{addr}\"]\nserver_tls = {{ ca = \"{}\", sni = \"backend.test\", cert = \"{}\", key = \"{}\" }}\n",
            ca_file.display(),
            c.display(),
            k.display()
        )
    });
    assert_eq!(echo_through(q.port, b"mutual"), b"mutual");
    assert_eq!(
        server.seen.sni.lock().unwrap().last().cloned(),
        Some(Some("backend.test".to_string()))
    );
    // Every handshake (the readiness probe's session's too) showed the client certificate.
    let seen = &server.seen;
    assert_eq!(
        seen.client_certs.load(Ordering::Relaxed),
        seen.handshakes.load(Ordering::Relaxed)
    );
}

#[test]
fn tls_to_servers_http_mode_reuses_tls_server_connections() {
    let ca = new_ca("Backend CA");
    let (cert, key) = leaf(&ca, &["backend.test"], "backend");
    let server = TlsServer::start(&cert, &key, None, true);
    let addr = server.addr;
    let (q, _admin) = start(|dir, port| {
        let ca_file = write(dir, "ca.pem", &ca.pem);
        format!(
            "workers = 1\n[[listener]]\nname = \"l\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nservers = [\"{addr}\"]\nserver_tls = {{ ca = \"{}\", sni = \"backend.test\" }}\n",
            ca_file.display()
        )
    });
    for i in 0..5 {
        let mut c = connect_port(q.port);
        set_timeouts(&c, IO_TIMEOUT);
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let got = read_until_eof(&mut c, IO_TIMEOUT);
        let text = String::from_utf8_lossy(&got);
        assert!(
            text.starts_with("HTTP/1.1 200") && text.ends_with("secure"),
            "request {i}: {text}"
        );
    }
    assert_eq!(
        server.seen.handshakes.load(Ordering::Relaxed),
        1,
        "one TLS connection to the server served the five requests"
    );
}

#[test]
fn tls_health_checks_speak_tls_and_mark_a_server_with_a_bad_certificate_down() {
    let good_ca = new_ca("Good CA");
    let bad_ca = new_ca("Other CA");
    let (gc, gk) = leaf(&good_ca, &["backend.test"], "good");
    let (bc, bk) = leaf(&bad_ca, &["backend.test"], "bad");
    let bad = TlsServer::start(&bc, &bk, None, true);
    let good = TlsServer::start(&gc, &gk, None, true);
    let (b, g) = (bad.addr, good.addr);
    let (_q, admin) = start(|dir, port| {
        let ca_file = write(dir, "ca.pem", &good_ca.pem);
        format!(
            "[[listener]]\nname = \"l\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nservers = [\"{b}\", \"{g}\"]\nserver_tls = {{ ca = \"{}\" }}\nhealth = {{ type = \"http\", path = \"/health\", interval = \"200ms\", timeout = \"1s\", fall = 1, rise = 1 }}\n",
            ca_file.display()
        )
    });
    let m = admin_support::wait_metrics(admin, "the bad server down, the good up", |m| {
        m.value("quill_server_up", &[("address", &b.to_string())]) == 0.0
            && m.value("quill_server_up", &[("address", &g.to_string())]) == 1.0
    });
    drop(m);
    assert!(good.seen.handshakes.load(Ordering::Relaxed) >= 1);
}
