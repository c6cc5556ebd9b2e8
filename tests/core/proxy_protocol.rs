//! PROXY protocol (docs/design.md#proxy-protocol): headers sent to servers per pool
//! (`proxy_protocol = "v1" | "v2"`, the `proxy_protocol` control command, health checks) and the
//! configuration errors around it. The servers here are real TCP servers written for the test: each
//! reads the header its own way (not with Quill's parser: a v1 line up to its CRLF, or the v2 fixed
//! part and the length it gives), records it, and echoes what follows.

use crate::ctl;
use crate::http_support;
use crate::support;
use crate::tls_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use ctl::*;
use support::*;

const T: Duration = Duration::from_secs(10);

/// What a PROXY-aware server saw on each connection: the header bytes exactly as they came.
struct ProxyServer {
    addr: SocketAddr,
    headers: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Connections that ended (the peer closed, or an error).
    closed: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

/// Reads one PROXY header (v1 or v2) from `s`, byte-exact; None if the bytes are not one.
fn read_header(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut first = [0u8; 16];
    s.read_exact(&mut first[..5]).ok()?;
    if &first[..5] == b"PROXY" {
        // v1: up to CRLF, 107 bytes at most.
        let mut line = first[..5].to_vec();
        let mut b = [0u8; 1];
        while !line.ends_with(b"\r\n") && line.len() < 107 {
            s.read_exact(&mut b).ok()?;
            line.push(b[0]);
        }
        return line.ends_with(b"\r\n").then_some(line);
    }
    s.read_exact(&mut first[5..]).ok()?;
    if &first[..12] != b"\r\n\r\n\0\r\nQUIT\n" {
        return None;
    }
    let len = u16::from_be_bytes([first[14], first[15]]) as usize;
    let mut all = first.to_vec();
    let mut rest = vec![0u8; len];
    s.read_exact(&mut rest).ok()?;
    all.extend_from_slice(&rest);
    Some(all)
}

/// After the header: every byte back (`Echo`), or HTTP/1.1 answers to GET requests, kept alive,
/// each with the connection's header as its body (`Http`).
#[derive(Clone, Copy)]
enum Serve {
    Echo,
    Http,
    /// Like `Http`, but the connection is closed after the first answer (which does not say so).
    HttpOnce,
}

fn serve<S: Read + Write>(mut s: S, header: &[u8], how: Serve) {
    let mut buf = [0u8; 4096];
    match how {
        Serve::Echo => {
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 || s.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
        Serve::Http | Serve::HttpOnce => {
            let mut pending: Vec<u8> = Vec::new();
            for _ in 0..1000 {
                while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                    pending.drain(..end + 4);
                    let mut answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                        header.len()
                    )
                    .into_bytes();
                    answer.extend_from_slice(header);
                    if s.write_all(&answer).is_err() || matches!(how, Serve::HttpOnce) {
                        return;
                    }
                }
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => pending.extend_from_slice(&buf[..n]),
                }
            }
        }
    }
}

impl ProxyServer {
    fn start() -> ProxyServer {
        ProxyServer::start_serving(Serve::Echo)
    }

    fn start_serving(how: Serve) -> ProxyServer {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let headers = Arc::new(Mutex::new(Vec::new()));
        let closed = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, cl, st) = (headers.clone(), closed.clone(), stop.clone());
        thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((mut s, _)) => {
                        let (h, cl) = (h.clone(), cl.clone());
                        thread::spawn(move || {
                            s.set_nonblocking(false).unwrap();
                            set_timeouts(&s, T);
                            let Some(header) = read_header(&mut s) else {
                                h.lock().unwrap().push(b"<not a PROXY header>".to_vec());
                                cl.fetch_add(1, Ordering::Relaxed);
                                return;
                            };
                            h.lock().unwrap().push(header.clone());
                            serve(s, &header, how);
                            cl.fetch_add(1, Ordering::Relaxed);
                        });
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        ProxyServer {
            addr,
            headers,
            closed,
            stop,
        }
    }

    fn closed(&self) -> usize {
        self.closed.load(Ordering::Relaxed)
    }

    fn headers(&self) -> Vec<Vec<u8>> {
        self.headers.lock().unwrap().clone()
    }

    /// Waits until `n` headers came; returns them.
    fn wait_headers(&self, n: usize) -> Vec<Vec<u8>> {
        assert!(
            wait_until(T, || self.headers().len() >= n),
            "expected {n} headers, got {:?}",
            self.headers()
        );
        self.headers()
    }
}

impl Drop for ProxyServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + within;
    while std::time::Instant::now() < end {
        if cond() {
            return true;
        }
        thread::sleep(Duration::from_millis(10));
    }
    cond()
}

/// Starts quill from a TOML file whose `[[listener]]` (named "l", on the port quill picks) gets
/// `listener_keys`; `top` goes before it. Returns quill and the config path.
/// An HTTP listener logs to `http.log` instead (combined format, which the support code's
/// access-log reader does not take).
fn start_toml(top: &str, listener_keys: &str) -> (QuillProcess, PathBuf) {
    start_toml_on("127.0.0.1", top, listener_keys)
}

/// Like [`start_toml`] with the listener bound to `ip` (readiness is still polled on 127.0.0.1).
fn start_toml_on(ip: &str, top: &str, listener_keys: &str) -> (QuillProcess, PathBuf) {
    let log = if listener_keys.contains("protocol = \"http\"") {
        "http.log"
    } else {
        "access.log"
    };
    let path = Arc::new(Mutex::new(PathBuf::new()));
    let q = Quill::start_with(|dir: &Path, port| {
        let cfg = dir.join("quill.toml");
        std::fs::write(
            &cfg,
            format!(
                "log = \"{}\"\ncontrol = \"{}\"\n{top}\n[[listener]]\nname = \"l\"\nlisten = \"{ip}:{port}\"\n{listener_keys}\n",
                dir.join(log).display(),
                dir.join("ctl.sock").display(),
            ),
        )
        .unwrap();
        *path.lock().unwrap() = cfg.clone();
        vec!["--config".into(), cfg.display().to_string()]
    });
    let p = path.lock().unwrap().clone();
    (q, p)
}

/// One echo exchange through quill; returns the client's own address.
fn exchange(q: &QuillProcess, msg: &[u8]) -> SocketAddr {
    let mut c = connect(q.addr());
    echo_roundtrip(&mut c, msg);
    c.local_addr().unwrap()
}

fn v2_inet(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let (SocketAddr::V4(s), SocketAddr::V4(d)) = (src, dst) else {
        panic!("IPv4 only here")
    };
    let mut v = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    v.extend_from_slice(&[0x21, 0x11, 0, 12]);
    v.extend_from_slice(&s.ip().octets());
    v.extend_from_slice(&d.ip().octets());
    v.extend_from_slice(&s.port().to_be_bytes());
    v.extend_from_slice(&d.port().to_be_bytes());
    v
}

#[test]
fn proxy_protocol_v1_header_reaches_tcp_server() {
    let srv = ProxyServer::start();
    let (q, _) = start_toml(
        "",
        &format!("servers = [\"{}\"]\nproxy_protocol = \"v1\"", srv.addr),
    );
    let base = srv.headers().len(); // the readiness probe's connection may have come first
    let client = exchange(&q, b"hello through v1");
    let headers = srv.wait_headers(base + 1);
    let want = format!(
        "PROXY TCP4 127.0.0.1 127.0.0.1 {} {}\r\n",
        client.port(),
        q.addr().port()
    );
    assert_eq!(
        String::from_utf8_lossy(&headers[base]),
        want,
        "all: {headers:?}"
    );
    // The access log counts the client's bytes only, not the header's.
    // (The readiness probe's session is logged too, with no bytes.)
    let lines = q.wait_log_lines(2, T);
    assert!(lines.iter().any(|l| l.bytes_in == 16), "{lines:#?}");
    assert!(lines.iter().all(|l| l.bytes_in <= 16), "{lines:#?}");
}

#[test]
fn proxy_protocol_v2_header_reaches_tcp_server() {
    let srv = ProxyServer::start();
    let (q, _) = start_toml(
        "",
        &format!("servers = [\"{}\"]\nproxy_protocol = \"v2\"", srv.addr),
    );
    let base = srv.headers().len();
    let client = exchange(&q, b"hello through v2");
    let headers = srv.wait_headers(base + 1);
    assert_eq!(headers[base], v2_inet(client, q.addr()));
}

#[test]
fn proxy_protocol_header_names_the_address_reached_on_a_wildcard_listener() {
    // Bound to 0.0.0.0: the address the client reached comes from its socket.
    let srv = ProxyServer::start();
    let (q, _) = start_toml_on(
        "0.0.0.0",
        "",
        &format!("servers = [\"{}\"]\nproxy_protocol = \"v1\"", srv.addr),
    );
    let base = srv.headers().len();
    let dst: SocketAddr = format!("127.0.0.3:{}", q.addr().port()).parse().unwrap();
    let mut c = connect(dst);
    echo_roundtrip(&mut c, b"via 127.0.0.3");
    let headers = srv.wait_headers(base + 1);
    let want = format!(
        "PROXY TCP4 127.0.0.1 127.0.0.3 {} {}\r\n",
        c.local_addr().unwrap().port(),
        q.addr().port()
    );
    assert_eq!(String::from_utf8_lossy(&headers[base]), want);
}

#[test]
fn proxy_protocol_header_goes_out_when_the_server_speaks_first() {
    // The client sends nothing until the server's bytes arrive: the header alone must go.
    let srv = ProxyServer::start();
    let (q, _) = start_toml(
        "",
        &format!("servers = [\"{}\"]\nproxy_protocol = \"v2\"", srv.addr),
    );
    let base = srv.headers().len();
    let c = connect(q.addr());
    let headers = srv.wait_headers(base + 1);
    assert_eq!(headers[base], v2_inet(c.local_addr().unwrap(), q.addr()));
}

#[test]
fn proxy_protocol_control_command_sets_and_write_saves_it() {
    let srv = ProxyServer::start();
    let (q, _) = start_toml("", &format!("servers = [\"{}\"]", srv.addr));
    let sock = q.path("ctl.sock");
    assert_eq!(ctl(&sock, "proxy_protocol").trim(), "off");
    ctl_ok(&sock, "proxy_protocol v1");
    assert_eq!(ctl(&sock, "proxy_protocol").trim(), "v1");
    let base = srv.headers().len();
    let client = exchange(&q, b"after the command");
    let headers = srv.wait_headers(base + 1);
    assert!(
        headers[base]
            .starts_with(format!("PROXY TCP4 127.0.0.1 127.0.0.1 {} ", client.port()).as_bytes()),
        "{:?}",
        String::from_utf8_lossy(&headers[base])
    );
    ctl_err(&sock, "proxy_protocol v3", "v3");
    let saved = q.path("saved.cfg");
    ctl_ok(&sock, &format!("write {}", saved.display()));
    let text = std::fs::read_to_string(&saved).unwrap();
    assert!(text.contains("proxy_protocol v1"), "{text}");
}

#[test]
fn health_check_sends_proxy_header() {
    let srv = ProxyServer::start();
    let (_q, _) = start_toml(
        "",
        &format!(
            "servers = [\"{}\"]\nproxy_protocol = \"v2\"\n[listener.health]\ntype = \"tcp\"\ninterval = \"100ms\"\ntimeout = \"500ms\"\n",
            srv.addr
        ),
    );
    // Checks are connections of Quill's own: a v2 LOCAL header, no addresses.
    let local = b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00".to_vec();
    assert!(
        wait_until(T, || srv.headers().iter().filter(|h| **h == local).count()
            >= 2),
        "{:?}",
        srv.headers()
    );
}

#[test]
fn health_check_sends_proxy_v1_unknown_before_its_http_request() {
    let srv = ProxyServer::start();
    let (_q, _) = start_toml(
        "",
        &format!(
            "servers = [\"{}\"]\nproxy_protocol = \"v1\"\n[listener.health]\ntype = \"http\"\npath = \"/\"\ninterval = \"100ms\"\ntimeout = \"500ms\"\n",
            srv.addr
        ),
    );
    assert!(
        wait_until(T, || srv
            .headers()
            .iter()
            .any(|h| h == b"PROXY UNKNOWN\r\n")),
        "{:?}",
        srv.headers()
    );
}

#[test]
fn http_server_connection_with_proxy_header_is_not_shared() {
    // Each answer's body is the PROXY header its server connection began with: it must name
    // the client that asked, request after request, client after client.
    let srv = ProxyServer::start_serving(Serve::Http);
    let (q, _) = start_toml(
        "",
        &format!(
            "protocol = \"http\"\nservers = [\"{}\"]\nproxy_protocol = \"v1\"",
            srv.addr
        ),
    );
    for src in ["127.0.0.1", "127.0.0.2", "127.0.0.1"] {
        let mut c = connect_from(src.parse().unwrap(), q.addr()).unwrap();
        let me = c.local_addr().unwrap();
        let want = format!(
            "PROXY TCP4 {src} 127.0.0.1 {} {}\r\n",
            me.port(),
            q.addr().port()
        );
        for _ in 0..2 {
            c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
            let head = "HTTP/1.1 200 OK\r\n";
            let mut got = Vec::new();
            let mut b = [0u8; 1];
            while !got.ends_with(want.as_bytes()) && got.len() < 4096 {
                if c.read(&mut b).unwrap_or(0) == 0 {
                    break;
                }
                got.push(b[0]);
            }
            let text = String::from_utf8_lossy(&got);
            assert!(text.starts_with(head), "{text}");
            assert!(text.ends_with(&want), "answer to {me}: {text}");
        }
    }
    // Never shared: a server connection per client connection (three), each kept for its
    // client's second request.
    assert_eq!(
        srv.headers()
            .iter()
            .filter(|h| h.starts_with(b"PROXY TCP4"))
            .count(),
        3
    );
}

/// One `GET /` on the kept-alive client connection `c`; returns the answer's body (with
/// `Serve::Http`: the PROXY header the server connection that answered began with).
fn get_body(c: &mut TcpStream) -> Vec<u8> {
    c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 4096 {
        if c.read(&mut b).unwrap_or(0) == 0 {
            break;
        }
        head.push(b[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    let len: usize = text
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or_else(|| panic!("no Content-Length in {text}"));
    let mut body = vec![0u8; len];
    c.read_exact(&mut body).unwrap();
    body
}

fn http_client(from: &str, q: &QuillProcess) -> TcpStream {
    let c = connect_from(from.parse().unwrap(), q.addr()).unwrap();
    set_timeouts(&c, T);
    c
}

#[test]
fn http_proxy_protocol_server_connection_serves_the_next_request_of_the_same_client() {
    let srv = ProxyServer::start_serving(Serve::Http);
    let (q, _) = start_toml(
        "",
        &format!(
            "protocol = \"http\"\nservers = [\"{}\"]\nproxy_protocol = \"v1\"",
            srv.addr
        ),
    );
    let base = srv.headers().len();
    let mut c = http_client("127.0.0.1", &q);
    let want = format!(
        "PROXY TCP4 127.0.0.1 127.0.0.1 {} {}\r\n",
        c.local_addr().unwrap().port(),
        q.addr().port()
    );
    for i in 0..3 {
        let body = get_body(&mut c);
        assert_eq!(String::from_utf8_lossy(&body), want, "request {i}");
    }
    // Three requests, one server connection: one header, and it is still open.
    let headers = srv.headers();
    assert_eq!(headers.len() - base, 1, "{headers:?}");
    let closed = srv.closed();
    assert_eq!(closed, base, "the private connection closed early");
    // It ends with the client session.
    drop(c);
    assert!(
        wait_until(T, || srv.closed() == base + 1),
        "the server connection outlived its client ({} closed)",
        srv.closed()
    );
}

#[test]
fn http_proxy_protocol_server_connection_is_never_given_to_another_client() {
    // One worker, so that a connection put in the shared idle pool would be the one the next
    // client gets.
    let srv = ProxyServer::start_serving(Serve::Http);
    let (q, _) = start_toml(
        "workers = 1",
        &format!(
            "protocol = \"http\"\nservers = [\"{}\"]\nproxy_protocol = \"v2\"",
            srv.addr
        ),
    );
    let base = srv.headers().len();
    let mut a = http_client("127.0.0.1", &q);
    let mut b = http_client("127.0.0.2", &q);
    let want_a = v2_inet(a.local_addr().unwrap(), q.addr());
    let want_b = v2_inet(b.local_addr().unwrap(), q.addr());
    // In turn: a, then b while a's connection is idle, then a again, then b again.
    assert_eq!(get_body(&mut a), want_a);
    assert_eq!(
        get_body(&mut b),
        want_b,
        "b was given a's server connection"
    );
    assert_eq!(
        get_body(&mut a),
        want_a,
        "a was given b's server connection"
    );
    assert_eq!(get_body(&mut b), want_b);
    let headers = srv.headers();
    assert_eq!(headers.len() - base, 2, "{headers:?}");
    assert!(headers[base..].contains(&want_a), "{headers:?}");
    assert!(headers[base..].contains(&want_b), "{headers:?}");
    // A third client after the first two left: a connection of its own again.
    drop(a);
    drop(b);
    assert!(
        wait_until(T, || srv.closed() == base + 2),
        "{}",
        srv.closed()
    );
    let mut c = http_client("127.0.0.3", &q);
    let want_c = v2_inet(c.local_addr().unwrap(), q.addr());
    assert_eq!(get_body(&mut c), want_c);
    assert_eq!(srv.headers().len() - base, 3);
}

#[test]
fn http_proxy_protocol_private_connection_closed_by_the_server_is_not_reused() {
    // The server closes each connection after one answer: the client's next request, made once
    // that close reached Quill, goes on a new connection with a new header.
    let srv = ProxyServer::start_serving(Serve::HttpOnce);
    let (q, _) = start_toml(
        "",
        &format!(
            "protocol = \"http\"\nservers = [\"{}\"]\nproxy_protocol = \"v1\"",
            srv.addr
        ),
    );
    let (base, closed) = (srv.headers().len(), srv.closed());
    let mut c = http_client("127.0.0.1", &q);
    let want = format!(
        "PROXY TCP4 127.0.0.1 127.0.0.1 {} {}\r\n",
        c.local_addr().unwrap().port(),
        q.addr().port()
    );
    for i in 0..3 {
        assert_eq!(
            String::from_utf8_lossy(&get_body(&mut c)),
            want,
            "request {i}"
        );
        assert!(wait_until(T, || srv.closed() == closed + i + 1));
        thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(srv.headers().len() - base, 3, "{:?}", srv.headers());
}

#[test]
fn http_proxy_protocol_private_connection_is_closed_when_a_request_goes_to_another_server() {
    // Round robin over two servers: each request of the one client goes to the other server,
    // so its private connection is closed and a new one (with the header) opened each time.
    let one = ProxyServer::start_serving(Serve::Http);
    let two = ProxyServer::start_serving(Serve::Http);
    let (q, _) = start_toml(
        "workers = 1",
        &format!(
            "protocol = \"http\"\nmode = [\"roundrobin\"]\nservers = [\"{}\", \"{}\"]\nproxy_protocol = \"v1\"",
            one.addr, two.addr
        ),
    );
    let (base1, base2) = (one.headers().len(), two.headers().len());
    let (closed1, closed2) = (one.closed(), two.closed());
    let mut c = http_client("127.0.0.1", &q);
    let want = format!(
        "PROXY TCP4 127.0.0.1 127.0.0.1 {} {}\r\n",
        c.local_addr().unwrap().port(),
        q.addr().port()
    );
    for i in 0..4 {
        assert_eq!(
            String::from_utf8_lossy(&get_body(&mut c)),
            want,
            "request {i}"
        );
    }
    assert_eq!(one.headers().len() - base1, 2, "{:?}", one.headers());
    assert_eq!(two.headers().len() - base2, 2, "{:?}", two.headers());
    // Every connection but the last one is closed while the client stays.
    assert!(
        wait_until(T, || one.closed() - closed1 + two.closed() - closed2 == 3),
        "{} + {} closed",
        one.closed() - closed1,
        two.closed() - closed2
    );
    drop(c);
    assert!(wait_until(T, || one.closed() - closed1 + two.closed()
        - closed2
        == 4));
}

/// A PROXY-aware TLS server: on each connection it reads the PROXY header in plaintext first
/// (as nginx's `listen ... ssl proxy_protocol` and HAProxy's `accept-proxy ssl` do), then does
/// the TLS handshake (rustls) on the same connection, then serves like [`ProxyServer`].
struct TlsProxyServer {
    addr: SocketAddr,
    /// Per connection: the header, or `<not a PROXY header>` when the first bytes were not one
    /// (a TLS ClientHello sent first, or the header sent inside TLS).
    headers: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Handshakes completed after a header.
    handshakes: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl TlsProxyServer {
    fn start(how: Serve) -> TlsProxyServer {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let ca = tls_support::Ca::new("backend CA");
        let cert = ca.server("backend", &["backend.test"], tls_support::KeyAlg::EcdsaP256);
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
                .map(|c| c.unwrap())
                .collect();
        let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        let cfg = Arc::new(cfg);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let headers = Arc::new(Mutex::new(Vec::new()));
        let handshakes = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, hs, st) = (headers.clone(), handshakes.clone(), stop.clone());
        thread::spawn(move || {
            let end = std::time::Instant::now() + Duration::from_secs(120);
            while !st.load(Ordering::Relaxed) && std::time::Instant::now() < end {
                match l.accept() {
                    Ok((mut s, _)) => {
                        let (h, hs, cfg) = (h.clone(), hs.clone(), cfg.clone());
                        thread::spawn(move || {
                            s.set_nonblocking(false).unwrap();
                            set_timeouts(&s, T);
                            let Some(header) = read_header(&mut s) else {
                                h.lock().unwrap().push(b"<not a PROXY header>".to_vec());
                                return;
                            };
                            h.lock().unwrap().push(header.clone());
                            let conn = rustls::ServerConnection::new(cfg).unwrap();
                            let mut tls = rustls::StreamOwned::new(conn, s);
                            while tls.conn.is_handshaking() {
                                if tls.conn.complete_io(&mut tls.sock).is_err() {
                                    return;
                                }
                            }
                            hs.fetch_add(1, Ordering::Relaxed);
                            serve(tls, &header, how);
                        });
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        TlsProxyServer {
            addr,
            headers,
            handshakes,
            stop,
        }
    }

    fn headers(&self) -> Vec<Vec<u8>> {
        self.headers.lock().unwrap().clone()
    }

    fn handshakes(&self) -> usize {
        self.handshakes.load(Ordering::Relaxed)
    }
}

impl Drop for TlsProxyServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[test]
fn proxy_protocol_header_precedes_the_tls_handshake_to_the_server() {
    // TCP mode, v2: the header in plaintext, then TLS, then the client's bytes inside it.
    let srv = TlsProxyServer::start(Serve::Echo);
    let (q, _) = start_toml(
        "",
        &format!(
            "servers = [\"{}\"]\nproxy_protocol = \"v2\"\nserver_tls = {{ verify = false }}",
            srv.addr
        ),
    );
    let base = srv.headers().len();
    let client = exchange(&q, b"hello over TLS after the header");
    assert!(wait_until(T, || srv.headers().len() > base));
    let headers = srv.headers();
    assert_eq!(headers[base], v2_inet(client, q.addr()), "{headers:?}");
    assert!(srv.handshakes() >= 1);
    drop(q);

    // HTTP mode, v1: the same, and the connection (private to its client) takes the client's
    // second request inside the same TLS session: one header, one handshake.
    let srv = TlsProxyServer::start(Serve::Http);
    let (q, _) = start_toml(
        "",
        &format!(
            "protocol = \"http\"\nservers = [\"{}\"]\nproxy_protocol = \"v1\"\nserver_tls = {{ verify = false }}",
            srv.addr
        ),
    );
    let base = srv.headers().len();
    let hs = srv.handshakes();
    let mut c = http_client("127.0.0.1", &q);
    let want = format!(
        "PROXY TCP4 127.0.0.1 127.0.0.1 {} {}\r\n",
        c.local_addr().unwrap().port(),
        q.addr().port()
    );
    for i in 0..2 {
        assert_eq!(
            String::from_utf8_lossy(&get_body(&mut c)),
            want,
            "request {i}"
        );
    }
    let headers = srv.headers();
    assert_eq!(headers.len() - base, 1, "{headers:?}");
    assert_eq!(String::from_utf8_lossy(&headers[base]), want);
    assert_eq!(srv.handshakes() - hs, 1);
}

#[test]
fn health_check_sends_proxy_header_before_the_tls_handshake() {
    let srv = TlsProxyServer::start(Serve::Echo);
    let (_q, _) = start_toml(
        "",
        &format!(
            "servers = [\"{}\"]\nproxy_protocol = \"v2\"\nserver_tls = {{ verify = false }}\n[listener.health]\ntype = \"tcp\"\ninterval = \"100ms\"\ntimeout = \"1s\"\n",
            srv.addr
        ),
    );
    // A v2 LOCAL header in plaintext, then a TLS handshake that completes (a TCP check over
    // TLS passes once its handshake does).
    let local = b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00".to_vec();
    assert!(
        wait_until(T, || srv.headers().iter().filter(|h| **h == local).count()
            >= 2
            && srv.handshakes() >= 2),
        "{:?}, {} handshakes",
        srv.headers(),
        srv.handshakes()
    );
    // (The readiness probe's client session came with a header naming it.)
    assert!(
        srv.headers().iter().all(|h| h != b"<not a PROXY header>"),
        "{:?}",
        srv.headers()
    );
}

fn check_refused(keys: &str, needle: &str) {
    let dir = scratch_dir();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        format!("[[listener]]\nname = \"l\"\nlisten = \"127.0.0.1:1\"\nservers = [\"127.0.0.1:2\"]\n{keys}\n"),
    )
    .unwrap();
    let (code, _out, err) = run_quill_output(&["check", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(needle), "{needle:?} not in {err}");
}

#[test]
fn proxy_protocol_config_errors_name_the_line() {
    check_refused(
        "proxy_protocol = \"v3\"",
        "bad.toml:5: invalid proxy_protocol 'v3'",
    );
}

// ---------------------------------------------------------------------------------------------
// accept_proxy: reading headers from trusted upstream proxies
// ---------------------------------------------------------------------------------------------

/// The second loopback address: the "upstream load balancer" the tests trust.
const TRUSTED: &str = "127.0.0.2";

fn trusted() -> std::net::IpAddr {
    TRUSTED.parse().unwrap()
}

/// A v1 header claiming `src` connected to quill.
fn v1_from(src: &str, sport: u16, q: &QuillProcess) -> Vec<u8> {
    format!("PROXY TCP4 {src} 127.0.0.1 {sport} {}\r\n", q.addr().port()).into_bytes()
}

/// Waits for an access log line whose end is `end`; returns it.
fn wait_end(q: &QuillProcess, end: &str) -> LogLine {
    let mut found = None;
    assert!(
        wait_until(T, || {
            found = q.log_lines().into_iter().find(|l| l.end == end);
            found.is_some()
        }),
        "no '{end}' line: {:#?}\nstderr:\n{}",
        q.log_lines(),
        q.stderr()
    );
    found.unwrap()
}

#[test]
fn accept_proxy_from_untrusted_source_is_closed_at_accept() {
    let srv = ProxyServer::start();
    let (q, _) = start_toml(
        "",
        &format!(
            "servers = [\"{}\"]\nproxy_protocol = \"v1\"\naccept_proxy = [\"{TRUSTED}/32\"]",
            srv.addr
        ),
    );
    let base = srv.headers().len();
    // 127.0.0.1 is not trusted: even with a well-formed header it is closed, unread.
    let mut c = connect(q.addr());
    let _ = c.write_all(&v1_from("192.0.2.1", 1000, &q));
    let (got, _) = wait_closed(&mut c, T);
    assert!(got.is_empty(), "{got:?}");
    let line = wait_end(&q, "proxy_untrusted");
    assert_eq!(line.client, "127.0.0.1");
    thread::sleep(Duration::from_millis(100));
    assert_eq!(srv.headers().len(), base, "nothing reached the server");
}

#[test]
fn accept_proxy_bad_header_closes_connection() {
    let srv = ProxyServer::start();
    let (q, _) = start_toml(
        "",
        &format!(
            "servers = [\"{}\"]\naccept_proxy = [\"{TRUSTED}/32\"]\nconnect_timeout = \"500ms\"",
            srv.addr
        ),
    );
    let base = srv.headers().len();
    let mut c = connect_from(trusted(), q.addr()).unwrap();
    c.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let (got, _) = wait_closed(&mut c, T);
    assert!(got.is_empty(), "{got:?}");
    let line = wait_end(&q, "proxy_invalid");
    assert_eq!(line.client, TRUSTED);
    assert!(
        q.wait_stderr_contains("not a PROXY protocol header", T),
        "{}",
        q.stderr()
    );
    // A trusted client that sends nothing is closed at the deadline (the connect timeout).
    let mut slow = connect_from(trusted(), q.addr()).unwrap();
    slow.write_all(b"PROXY TCP4 ").unwrap();
    let (got, _) = wait_closed(&mut slow, T);
    assert!(got.is_empty());
    assert!(q.wait_stderr_contains("no whole PROXY header in time", T));
    assert_eq!(srv.headers().len(), base, "nothing reached the server");
}

#[test]
fn accept_proxy_address_is_passed_on_in_the_proxy_header_sent_to_servers() {
    // Quill between two PROXY-speaking hops: what it got from the upstream proxy is what its
    // server gets, the client's own address; the data follows untouched.
    let srv = ProxyServer::start();
    let (q, _) = start_toml(
        "",
        &format!(
            "servers = [\"{}\"]\nproxy_protocol = \"v1\"\naccept_proxy = [\"{TRUSTED}/32\", \"::1/128\"]",
            srv.addr
        ),
    );
    let base = srv.headers().len();
    let mut c = connect_from(trusted(), q.addr()).unwrap();
    let mut first = v1_from("198.51.100.7", 40000, &q);
    first.extend_from_slice(b"payload after the header");
    c.write_all(&first).unwrap();
    let echoed = read_exact_within(&mut c, 24, T);
    assert_eq!(echoed, b"payload after the header");
    let headers = srv.wait_headers(base + 1);
    let h = String::from_utf8_lossy(&headers[base]).to_string();
    assert!(
        h.starts_with("PROXY TCP4 198.51.100.7 127.0.0.1 40000 "),
        "{h:?}"
    );
    drop(c);
    let line = wait_end(&q, "done");
    assert_eq!(line.client, "198.51.100.7");

    // v2 LOCAL (a health check of the upstream proxy's own): the real peer address stands.
    let mut c = connect_from(trusted(), q.addr()).unwrap();
    let mut local = b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00".to_vec();
    local.extend_from_slice(b"ping");
    c.write_all(&local).unwrap();
    assert_eq!(read_exact_within(&mut c, 4, T), b"ping");
    let headers = srv.wait_headers(base + 2);
    let h = String::from_utf8_lossy(&headers[base + 1]).to_string();
    assert!(h.starts_with("PROXY TCP4 127.0.0.2 127.0.0.1 "), "{h:?}");
}

#[test]
fn accept_proxy_address_is_used_for_acl_tracking_log_and_xff() {
    let backend = http_support::Backend::echo();
    let (q, _) = start_toml(
        "[acl]\n1 = [\"deny 192.0.2.66\", \"permit 0.0.0.0/0\"]",
        &format!(
            "protocol = \"http\"\nservers = [\"{}\"]\nclient_acl = 1\nmax_per_source = 1\naccept_proxy = [\"{TRUSTED}/32\"]",
            backend.addr()
        ),
    );
    let get = |src: &str, port: u16| {
        let mut c = connect_from(trusted(), q.addr()).unwrap();
        let mut req = v1_from(src, port, &q);
        req.extend_from_slice(b"GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        c.write_all(&req).unwrap();
        // A denied client is closed unanswered (a reset: its request was never read).
        String::from_utf8_lossy(&wait_closed(&mut c, T).0).to_string()
    };
    let ok = get("198.51.100.7", 1234);
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    let reqs = backend.wait_requests(1, T);
    let xff: Vec<&str> = reqs[0].header_all("x-forwarded-for");
    assert_eq!(xff, ["198.51.100.7"], "{:?}", reqs[0]);
    // The ACL sees the carried address (the upstream proxy itself is permitted): closed at
    // once, as a denied client accepted directly is.
    let denied = get("192.0.2.66", 1235);
    assert!(denied.is_empty(), "{denied}");
    assert_eq!(backend.requests().len(), 1);
    // The access log names the carried addresses.
    // (HTTP listeners log one combined-format line per request, client first.)
    let log = || std::fs::read_to_string(q.path("http.log")).unwrap_or_default();
    assert!(
        wait_until(T, || log().lines().any(
            |l| l.starts_with("198.51.100.7 ") && l.contains("\"GET /x HTTP/1.1\" 200")
        )),
        "{}",
        log()
    );
    assert!(
        wait_until(T, || log()
            .lines()
            .any(|l| l.starts_with("192.0.2.66 ") && l.contains(" denied "))),
        "{}",
        log()
    );
    // max_per_source counts the carried address: a second open connection from the same
    // carried client is refused, one from another carried client is not.
    let mut held = connect_from(trusted(), q.addr()).unwrap();
    held.write_all(&v1_from("203.0.113.5", 1, &q)).unwrap();
    thread::sleep(Duration::from_millis(200));
    let mut second = connect_from(trusted(), q.addr()).unwrap();
    second.write_all(&v1_from("203.0.113.5", 2, &q)).unwrap();
    let (got, _) = wait_closed(&mut second, T);
    assert!(got.is_empty(), "{got:?}");
    assert!(
        wait_until(T, || log()
            .lines()
            .any(|l| l.starts_with("203.0.113.5 ") && l.contains(" refused "))),
        "{}",
        log()
    );
    let other = get("203.0.113.6", 3);
    assert!(other.starts_with("HTTP/1.1 200"), "{other}");
    drop(held);
}

#[test]
fn accept_proxy_before_tls() {
    let srv = ProxyServer::start();
    let ca = tls_support::Ca::new("test CA");
    let cert = ca.server("quill", &["quill.test"], tls_support::KeyAlg::EcdsaP256);
    let dir = scratch_dir();
    let (crt, key) = cert.write(dir.path(), "srv");
    let (q, _) = start_toml(
        "",
        &format!(
            "servers = [\"{}\"]\nproxy_protocol = \"v2\"\naccept_proxy = [\"{TRUSTED}/32\"]\n[listener.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
            srv.addr,
            crt.display(),
            key.display()
        ),
    );
    let base = srv.headers().len();
    let mut c = connect_from(trusted(), q.addr()).unwrap();
    c.write_all(&v1_from("198.51.100.9", 4321, &q)).unwrap();
    let opts = tls_support::ClientOpts {
        sni: Some("quill.test"),
        ..Default::default()
    };
    let mut tls = tls_support::TlsClient::over(c, &opts).expect("handshake after the header");
    assert_eq!(tls.echo(b"secret").unwrap(), b"secret");
    let headers = srv.wait_headers(base + 1);
    // v2 to the server, carrying the address of the v1 header read before TLS.
    assert_eq!(
        &headers[base][16..20],
        &[198, 51, 100, 9],
        "{:?}",
        headers[base]
    );
    assert_eq!(&headers[base][24..26], &4321u16.to_be_bytes());
}

#[test]
fn accept_proxy_config_errors_name_the_line() {
    check_refused(
        "accept_proxy = [\"10.0.0.0/33\"]",
        "bad.toml:5: accept_proxy: '/33' is not a prefix length",
    );
    check_refused("accept_proxy = []", "bad.toml:5: accept_proxy: empty");
}
