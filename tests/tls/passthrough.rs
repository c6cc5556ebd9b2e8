//! SNI routing without termination (docs/design.md#sni-routing-without-termination): a TCP listener
//! whose
//! `[[listener.route]]` tables name TLS server names (`sni = [...]`, `pool = "NAME"`) reads the
//! client's ClientHello without consuming or decrypting it, picks the pool by the name, and
//! forwards the TLS bytes untouched. The servers here are real TLS servers (rustls, each with
//! its own certificate from a test CA made with rcgen); the client verifies the certificate it
//! gets, so a completed handshake with the right certificate proves the bytes went through as
//! sent. Also: unknown names go to the listener's own servers or are closed when it has none,
//! non-TLS bytes and slow ClientHellos are closed, several MiB go both ways byte-exact, and the
//! configuration is checked at its line.

use crate::support;

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, StreamOwned};

use support::*;

const T: Duration = Duration::from_secs(10);

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A test certificate authority: every backend's certificate is issued by it, and the client
/// trusts it alone.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new() -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        Ca {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    /// A certificate for `names` and its key.
    fn issue(&self, names: &[&str]) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        (cert.der().clone(), key)
    }

    fn client_config(&self) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(self.issuer.der().clone()).unwrap();
        Arc::new(
            ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    }
}

/// A TLS echo server on 127.0.0.1 with its own certificate: each connection's handshake, then
/// every byte back until the client's EOF (then close_notify). Records the server names its
/// clients asked for. Stops accepting when dropped.
struct TlsBackend {
    addr: SocketAddr,
    cert: CertificateDer<'static>,
    accepted: Arc<AtomicUsize>,
    names: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TlsBackend {
    fn start(ca: &Ca, names: &[&str]) -> TlsBackend {
        let (cert, key) = ca.issue(names);
        let config = Arc::new(
            ServerConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(vec![cert.clone()], key)
                .unwrap(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (accepted, seen, stop) = (accepted.clone(), seen.clone(), stop.clone());
            std::thread::spawn(move || {
                let until = Instant::now() + Duration::from_secs(300);
                while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                    match listener.accept() {
                        Ok((s, _)) => {
                            accepted.fetch_add(1, Ordering::SeqCst);
                            let (config, seen) = (config.clone(), seen.clone());
                            std::thread::spawn(move || echo(s, config, seen));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        TlsBackend {
            addr,
            cert,
            accepted,
            names: seen,
            stop,
            thread: Some(thread),
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn names(&self) -> Vec<String> {
        self.names.lock().unwrap().clone()
    }
}

impl Drop for TlsBackend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One TLS connection of a [`TlsBackend`]: handshake, then echo until EOF.
fn echo(s: TcpStream, config: Arc<ServerConfig>, seen: Arc<Mutex<Vec<String>>>) {
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    s.set_write_timeout(Some(T)).unwrap();
    let conn = rustls::ServerConnection::new(config).unwrap();
    let mut tls = StreamOwned::new(conn, s);
    if tls.conn.complete_io(&mut tls.sock).is_err() {
        return;
    }
    let name = tls.conn.server_name().unwrap_or("").to_string();
    seen.lock().unwrap().push(name);
    let mut buf = vec![0u8; 64 * 1024];
    for _ in 0..1_000_000 {
        match tls.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if tls.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
    tls.conn.send_close_notify();
    let _ = tls.flush();
}

type TlsClient = StreamOwned<ClientConnection, TcpStream>;

/// A TLS client of `addr` asking for `name`, handshake done (the certificate verified against
/// the CA for `name`).
fn tls_connect(addr: SocketAddr, name: &str, ca: &Ca) -> io::Result<TlsClient> {
    let s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(T))?;
    s.set_write_timeout(Some(T))?;
    let server = ServerName::try_from(name.to_string()).unwrap();
    let conn = ClientConnection::new(ca.client_config(), server).unwrap();
    let mut tls = StreamOwned::new(conn, s);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock)?;
    }
    Ok(tls)
}

/// The certificate the server presented.
fn peer_cert(tls: &TlsClient) -> CertificateDer<'static> {
    tls.conn.peer_certificates().unwrap()[0]
        .clone()
        .into_owned()
}

/// Sends `msg` and reads it back.
fn echo_roundtrip_tls(tls: &mut TlsClient, msg: &[u8]) {
    tls.write_all(msg).unwrap();
    tls.flush().unwrap();
    let mut back = vec![0u8; msg.len()];
    tls.read_exact(&mut back).unwrap();
    assert_eq!(back, msg);
}

/// Connects to `backend` through quill with `name`, checks it got that backend's certificate
/// and that bytes go both ways.
fn reaches(q: &QuillProcess, name: &str, ca: &Ca, backend: &TlsBackend) {
    let mut tls = tls_connect(q.addr(), name, ca)
        .unwrap_or_else(|e| panic!("TLS to {name} through quill: {e}\n{}", q.stderr()));
    assert!(
        peer_cert(&tls) == backend.cert,
        "{name}: the certificate is not its backend's"
    );
    echo_roundtrip_tls(&mut tls, format!("hello {name}").as_bytes());
    // A clean close: close_notify and FIN, then the backend's close_notify and FIN read to the
    // end. Dropping the socket at once would have its kernel answer the backend's close_notify
    // with a reset (the session then ends `client_reset`, which is right, but not this test's).
    tls.conn.send_close_notify();
    let _ = tls.flush();
    let _ = tls.sock.shutdown(std::net::Shutdown::Write);
    let mut rest = [0u8; 256];
    for _ in 0..64 {
        match tls.read(&mut rest) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
}

/// `[[pool]] NAME` over `server`.
fn pool(name: &str, server: SocketAddr) -> String {
    format!("[[pool]]\nname = \"{name}\"\nservers = [\"{server}\"]\n")
}

/// Quill from TOML: an access log, one worker, the `pools`, then a TCP listener on its port with
/// the `listener` lines (servers, routes, ...). Ready, its readiness probe closed.
fn start(pools: &str, listener: &str) -> QuillProcess {
    let (q, probe, _) = Quill::spawn_first(|dir: &Path, port| {
        let cfg = dir.join("quill.toml");
        let text = format!(
            "log = \"{}\"\nworkers = 1\n{pools}[[listener]]\nname = \"tls\"\n\
             listen = \"127.0.0.1:{port}\"\n{listener}",
            dir.join("access.log").display()
        );
        std::fs::write(&cfg, text).unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    });
    drop(probe);
    q
}

/// The first access log line that ended `end`.
fn ended(q: &QuillProcess, end: &str) -> LogLine {
    wait_log_line(&q.log_path(), T, |l| l.end == end)
}

/// A client that sent `bytes` is closed by quill (EOF or reset) with nothing sent back.
fn closed_after(q: &QuillProcess, bytes: &[u8]) {
    let mut s = connect(q.addr());
    write_all(&mut s, bytes);
    let (got, _) = wait_closed(&mut s, T);
    assert!(got.is_empty(), "quill answered {got:?}");
}

/// The first bytes a TLS client sends asking for `name` (a real rustls ClientHello).
fn client_hello(name: &str, ca: &Ca) -> Vec<u8> {
    let server = ServerName::try_from(name.to_string()).unwrap();
    let mut conn = ClientConnection::new(ca.client_config(), server).unwrap();
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    out
}

// ---------------------------------------------------------------------------------------------

#[test]
fn tls_passthrough_routes_by_sni_without_decrypting() {
    let ca = Ca::new();
    let a = TlsBackend::start(&ca, &["a.example"]);
    let b = TlsBackend::start(&ca, &["b.example"]);
    let q = start(
        &(pool("a", a.addr) + &pool("b", b.addr)),
        "[[listener.route]]\nsni = \"a.example\"\npool = \"a\"\n\
         [[listener.route]]\nname = \"bee\"\nsni = [\"B.example\"]\npool = \"b\"\n",
    );
    for _ in 0..2 {
        reaches(&q, "a.example", &ca, &a);
        reaches(&q, "b.example", &ca, &b);
    }
    assert_eq!(a.names(), ["a.example", "a.example"]);
    assert_eq!(b.names(), ["b.example", "b.example"]);
    // The session lines name the server each client reached.
    let line = wait_log_line(&q.log_path(), T, |l| l.server == b.addr.to_string());
    assert_eq!(line.end, "done");
    assert!(
        line.bytes_in > 200,
        "the ClientHello went to the server: {line:?}"
    );
}

#[test]
fn tls_passthrough_wildcard_route_matches_subdomains() {
    let ca = Ca::new();
    let w = TlsBackend::start(&ca, &["*.w.example", "w.example"]);
    let exact = TlsBackend::start(&ca, &["api.w.example"]);
    let q = start(
        &(pool("exact", exact.addr) + &pool("w", w.addr)),
        "[[listener.route]]\nsni = \"api.w.example\"\npool = \"exact\"\n\
         [[listener.route]]\nsni = \"*.w.example\"\npool = \"w\"\n",
    );
    reaches(&q, "www.w.example", &ca, &w);
    reaches(&q, "Other.W.Example", &ca, &w);
    reaches(&q, "api.w.example", &ca, &exact);
    // The wildcard is for names under w.example, not w.example itself: no route, no servers.
    assert!(tls_connect(q.addr(), "w.example", &ca).is_err());
    assert_eq!(w.accepted(), 2);
    assert_eq!(exact.accepted(), 1);
}

#[test]
fn tls_passthrough_unknown_name_goes_to_the_listeners_own_servers() {
    let ca = Ca::new();
    let a = TlsBackend::start(&ca, &["a.example"]);
    let own = TlsBackend::start(&ca, &["other.example", "127.0.0.1"]);
    let q = start(
        &pool("a", a.addr),
        &format!(
            "servers = [\"{}\"]\n[[listener.route]]\nsni = \"a.example\"\npool = \"a\"\n",
            own.addr
        ),
    );
    reaches(&q, "other.example", &ca, &own);
    reaches(&q, "a.example", &ca, &a);
    // A client that sends no name at all (an IP address) goes there too.
    reaches(&q, "127.0.0.1", &ca, &own);
    assert_eq!(own.names(), ["other.example", ""]);
}

#[test]
fn tls_passthrough_unknown_name_without_default_servers_is_closed() {
    let ca = Ca::new();
    let a = TlsBackend::start(&ca, &["a.example"]);
    let q = start(
        &pool("a", a.addr),
        "[[listener.route]]\nsni = \"a.example\"\npool = \"a\"\n",
    );
    closed_after(&q, &client_hello("unknown.example", &ca));
    assert!(tls_connect(q.addr(), "b.example", &ca).is_err());
    assert_eq!(ended(&q, "no_server").server, "-");
    reaches(&q, "a.example", &ca, &a);
    assert_eq!(a.accepted(), 1, "only the named client reached a server");
}

#[test]
fn tls_passthrough_non_tls_bytes_are_closed() {
    let ca = Ca::new();
    let own = TlsBackend::start(&ca, &["other.example"]);
    let q = start(
        &pool("own", own.addr),
        &format!(
            "servers = [\"{}\"]\n[[listener.route]]\nsni = \"a.example\"\npool = \"own\"\n",
            own.addr
        ),
    );
    closed_after(&q, b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n");
    assert_eq!(ended(&q, "tls_failed").server, "-");
    // A handshake record that is not a ClientHello, and a malformed one.
    closed_after(&q, &[22, 3, 1, 0, 4, 2, 0, 0, 0]);
    let mut bad = client_hello("a.example", &ca);
    bad[9] = 0x02; // the hello's own version: 0x0203
    closed_after(&q, &bad);
    assert_eq!(own.accepted(), 0, "nothing reached the servers");
    reaches(&q, "other.example", &ca, &own);
}

#[test]
fn tls_passthrough_slow_client_hello_is_timed_out() {
    let ca = Ca::new();
    let a = TlsBackend::start(&ca, &["a.example"]);
    let q = start(
        &pool("a", a.addr),
        &format!(
            "servers = [\"{}\"]\nconnect_timeout = \"1s\"\n\
             [[listener.route]]\nsni = \"a.example\"\npool = \"a\"\n",
            a.addr
        ),
    );
    let hello = client_hello("a.example", &ca);
    let mut s = connect(q.addr());
    // Half the hello, then nothing: quill waits for the rest, then gives up.
    write_all(&mut s, &hello[..hello.len() / 2]);
    assert!(
        still_open(&mut s, Duration::from_millis(100)),
        "closed before the timeout"
    );
    let (got, _) = wait_closed(&mut s, T);
    assert!(got.is_empty());
    assert_eq!(ended(&q, "tls_timeout").server, "-");
    assert_eq!(a.accepted(), 0);
    // A hello sent in pieces in time is routed.
    let mut s = connect(q.addr());
    for piece in hello.chunks(hello.len() / 3 + 1) {
        write_all(&mut s, piece);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        a.wait_accepted(1, T),
        "the trickled hello reached its server"
    );
}

#[test]
fn tls_passthrough_large_transfer_is_byte_exact() {
    let ca = Ca::new();
    let a = TlsBackend::start(&ca, &["a.example"]);
    let q = start(
        &pool("a", a.addr),
        "[[listener.route]]\nsni = \"a.example\"\npool = \"a\"\n",
    );
    let mut tls = tls_connect(q.addr(), "a.example", &ca).unwrap();
    assert!(peer_cert(&tls) == a.cert);
    // 6 MiB up and the same back (the server echoes), 64 KiB at a time: bulky enough that the
    // session's reads fill whole buffers and it splices.
    let data = pattern_bytes(7, 6 << 20);
    let mut back = vec![0u8; 64 * 1024];
    for chunk in data.chunks(64 * 1024) {
        tls.write_all(chunk).unwrap();
        tls.flush().unwrap();
        tls.read_exact(&mut back[..chunk.len()]).unwrap();
        assert!(back[..chunk.len()] == *chunk, "bytes changed on the way");
    }
    tls.conn.send_close_notify();
    tls.flush().unwrap();
    tls.sock.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    let _ = tls.read_to_end(&mut rest);
    assert!(rest.is_empty());
    let line = wait_log_line(&q.log_path(), T, |l| l.server == a.addr.to_string());
    assert_eq!(line.end, "done");
    assert!(
        line.bytes_in >= 6 << 20 && line.bytes_out >= 6 << 20,
        "{line:?}"
    );
}

#[test]
fn tls_passthrough_routes_are_checked_at_their_line() {
    let refused = |text: &str, line: usize, needle: &str| {
        let dir = scratch_dir();
        let path = dir.path().join("q.toml");
        std::fs::write(&path, text).unwrap();
        let (code, _, err) = run_quill_output(&["check", "--config", path.to_str().unwrap()]);
        let err = strip_ansi(&err);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&format!("q.toml:{line}: ")),
            "line {line}: {err}"
        );
        assert!(err.contains(needle), "{needle}: {err}");
    };
    let head = "[[pool]]\nname = \"a\"\nservers = [\"127.0.0.1:9001\"]\n\
                [[listener]]\nname = \"t\"\nlisten = \"127.0.0.1:18443\"\n";
    refused(
        &format!(
            "{head}[[listener.route]]\nsni = \"a.example\"\nhost = \"a.example\"\npool = \"a\"\n"
        ),
        7,
        "takes sni and pool only",
    );
    refused(
        &format!("{head}[[listener.route]]\nsni = [\"a..example\"]\npool = \"a\"\n"),
        8,
        "sni: \"a..example\" is not a host name",
    );
    refused(
        &format!(
            "{head}protocol = \"http\"\n[[listener.route]]\nsni = \"a.example\"\npool = \"a\"\n"
        ),
        8,
        "sni is for TCP listeners",
    );
    // Passthrough and termination on one listener cannot both happen.
    let dir = scratch_dir();
    let cert = rcgen::generate_simple_self_signed(vec!["a.example".to_string()]).unwrap();
    std::fs::write(dir.path().join("a.pem"), cert.cert.pem()).unwrap();
    std::fs::write(dir.path().join("a.key"), cert.signing_key.serialize_pem()).unwrap();
    let path = dir.path().join("q.toml");
    std::fs::write(
        &path,
        format!(
            "{head}tls = {{ cert = \"a.pem\", key = \"a.key\" }}\n\
             [[listener.route]]\nsni = \"a.example\"\npool = \"a\"\n"
        ),
    )
    .unwrap();
    let (code, _, err) = run_quill_output(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot also terminate it"), "{err}");
    assert_eq!(strip_ansi(&err).trim_end().lines().count(), 1, "{err}");
    std::fs::write(
        &path,
        format!("{head}[[listener.route]]\nsni = [\"a.example\", \"*.b.example\"]\npool = \"a\"\n"),
    )
    .unwrap();
    let (code, out, err) = run_quill_output(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("TLS server name a.example or *.b.example -> pool a"),
        "{out}"
    );
    assert!(out.contains("no route matched: closed"), "{out}");
}

impl TlsBackend {
    /// Waits (bounded) until the backend has accepted `n` connections.
    fn wait_accepted(&self, n: usize, within: Duration) -> bool {
        let until = Instant::now() + within;
        while Instant::now() < until {
            if self.accepted() >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}
