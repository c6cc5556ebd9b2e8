//! TLS termination on the data path (docs/design.md#tls-on-the-same-workers): a TCP listener
//! forwards the clear bytes (half-close included: close_notify both ways), an HTTP listener adds
//! `X-Forwarded-Proto: https`, bulk transfers never splice raw records, slow or silent clients
//! are timed out, handshakes in progress are bounded per worker, garbage never harms the process,
//! and the handshake metrics count what happened. Certificates are made by the test (rcgen).

use crate::admin_support;
use crate::http_support;
use crate::support;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_support::Backend;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use support::*;

/// A CA and a leaf for `localhost` and 127.0.0.1 signed by it, written as PEM into `dir`.
struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn pki(dir: &Path) -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Quill test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.not_after = rcgen::date_time_ymd(2099, 1, 1);
    params
        .subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let cert = params.signed_by(&key, &issuer).unwrap();
    let p = Pki {
        ca: dir.join("ca.pem"),
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    };
    std::fs::write(&p.ca, ca_cert.pem()).unwrap();
    std::fs::write(&p.cert, cert.pem()).unwrap();
    std::fs::write(&p.key, key.serialize_pem()).unwrap();
    p
}

/// A rustls client configuration trusting the test CA.
fn client_config(ca: &Path, alpn: &[&str]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    Arc::new(cfg)
}

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A TLS connection to `port` on 127.0.0.1 with SNI `localhost`, handshake done.
fn tls_connect(port: u16, cfg: &Arc<rustls::ClientConfig>) -> Tls {
    let sock = connect_port(port);
    set_timeouts(&sock, IO_TIMEOUT);
    let conn =
        rustls::ClientConnection::new(cfg.clone(), ServerName::try_from("localhost").unwrap())
            .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock).expect("handshake");
    }
    tls
}

/// `[[listener]]` TOML with TLS on 127.0.0.1:PORT in front of `servers`; `extra` goes into
/// `[listener.tls]`, `global` at the top of the file, `http` makes it an HTTP listener.
fn tls_toml_with(
    port: u16,
    p: &Pki,
    servers: &[SocketAddr],
    http: bool,
    global: &str,
    extra: &str,
) -> String {
    let list: Vec<String> = servers.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "workers = 1\n{global}[[listener]]\nname = \"secure\"\nlisten = \"127.0.0.1:{port}\"\n{}servers = [{}]\n[listener.tls]\ncert = \"{}\"\nkey = \"{}\"\n{extra}\n",
        if http { "protocol = \"http\"\n" } else { "" },
        list.join(", "),
        p.cert.display(),
        p.key.display(),
    )
}

/// A running quill with a TLS listener, its admin address and the test PKI.
struct Started {
    q: QuillProcess,
    admin: SocketAddr,
    pki: Pki,
    _keep: tempfile::TempDir,
}

/// Starts quill with that configuration and `--admin`; the readiness probe (a plain connect,
/// which fails its handshake as `closed`) is closed.
fn start(servers: &[SocketAddr], http: bool, extra: &str) -> Started {
    start_with(servers, http, "", extra)
}

/// [`start`] with `global` lines at the top of the file.
fn start_with(servers: &[SocketAddr], http: bool, global: &str, extra: &str) -> Started {
    let keep = scratch_dir();
    let pki = pki(keep.path());
    let (q, admin) = admin_support::start_with_admin(|dir, port, admin| {
        let cfg = dir.join("quill.toml");
        std::fs::write(
            &cfg,
            tls_toml_with(port, &pki, servers, http, global, extra),
        )
        .unwrap();
        vec![
            "--admin".into(),
            admin.to_string(),
            "--config".into(),
            cfg.display().to_string(),
        ]
    });
    Started {
        q,
        admin,
        pki,
        _keep: keep,
    }
}

#[test]
fn tls_tcp_listener_terminates_and_forwards_the_clear_bytes() {
    let echo = echo();
    let s = start(&[echo.addr()], false, "");
    let (q, p) = (&s.q, &s.pki);
    let cfg = client_config(&p.ca, &[]);
    let mut tls = tls_connect(q.port, &cfg);
    tls.write_all(b"hello through tls\n").unwrap();
    let mut got = [0u8; 18];
    tls.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"hello through tls\n");
    assert_eq!(
        tls.conn.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3)
    );
}

#[test]
fn tls_tcp_half_close_sends_close_notify_both_ways() {
    close_notify_both_ways(None, b"one way", b" and back");
}

/// The backend reads to EOF, then answers with what it read and `suffix` and closes: the client's
/// close_notify must reach it as an EOF, and its FIN must come back as close_notify (a clean
/// end, not a truncation). `v13`: the client offers only TLS 1.3 (true) or 1.2 (false), and the
/// version is checked; None: the client's defaults.
fn close_notify_both_ways(v13: Option<bool>, msg: &'static [u8], suffix: &'static [u8]) {
    let backend = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = backend.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = backend.accept().unwrap();
        set_timeouts(&s, IO_TIMEOUT);
        let mut all = Vec::new();
        s.read_to_end(&mut all).unwrap();
        s.write_all(&all).unwrap();
        s.write_all(suffix).unwrap();
        all
    });
    let s = start(&[addr], false, "");
    let (q, p) = (&s.q, &s.pki);
    let cfg = match v13 {
        None => client_config(&p.ca, &[]),
        Some(v13) => client_config_version(&p.ca, v13),
    };
    let mut tls = tls_connect(q.port, &cfg);
    if let Some(v13) = v13 {
        let want = if v13 {
            rustls::ProtocolVersion::TLSv1_3
        } else {
            rustls::ProtocolVersion::TLSv1_2
        };
        assert_eq!(tls.conn.protocol_version(), Some(want));
    }
    tls.write_all(msg).unwrap();
    tls.conn.send_close_notify();
    tls.flush().unwrap();
    while tls.conn.wants_write() {
        tls.conn.write_tls(&mut tls.sock).unwrap();
    }
    let got = t.join().unwrap();
    assert_eq!(got, msg, "the backend got the bytes, then EOF");
    let mut back = Vec::new();
    // read_to_end fails with UnexpectedEof if the stream ends without close_notify.
    tls.read_to_end(&mut back).expect("a clean TLS end");
    assert_eq!(back, [msg, suffix].concat());
}

/// `openssl s_client` to Quill's port with `args`, asking for "localhost" and trusting `ca`;
/// stdin, stdout and stderr piped.
fn s_client(port: u16, ca: &std::path::Path, args: &[&str]) -> std::process::Child {
    std::process::Command::new("openssl")
        .arg("s_client")
        .args(args)
        .args(["-servername", "localhost", "-connect"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("-CAfile")
        .arg(ca)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("openssl")
}

#[test]
fn tls_http_listener_adds_x_forwarded_proto_https() {
    let backend = Backend::fixed(5);
    let s = start(&[backend.addr()], true, "");
    let (q, p) = (&s.q, &s.pki);
    let cfg = client_config(&p.ca, &["http/1.1"]);
    let mut tls = tls_connect(q.port, &cfg);
    assert_eq!(tls.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    for _ in 0..2 {
        tls.write_all(b"GET /x HTTP/1.1\r\nHost: localhost\r\nX-Forwarded-Proto: gopher\r\n\r\n")
            .unwrap();
        let mut resp = Vec::new();
        let mut buf = [0u8; 4096];
        let deadline = Instant::now() + IO_TIMEOUT;
        while !resp.ends_with(b"abcde") && Instant::now() < deadline {
            let n = tls.read(&mut buf).unwrap();
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&resp));
            resp.extend_from_slice(&buf[..n]);
        }
        assert!(
            resp.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&resp)
        );
    }
    let reqs = backend.wait_requests(2, IO_TIMEOUT);
    for r in &reqs {
        assert_eq!(r.header_all("x-forwarded-proto"), vec!["https"]);
    }
}

#[test]
fn tls_bulk_transfer_never_splices_raw_records() {
    // Several MiB both ways: a direction that fills whole buffers would switch to splice(2) on a
    // plain session; through TLS it must not, or the server would get records instead of bytes
    // (and the client garbage). Byte-exact both ways proves it.
    let echo = echo();
    let s = start(&[echo.addr()], false, "");
    let (q, p) = (&s.q, &s.pki);
    let cfg = client_config(&p.ca, &[]);
    let tls = tls_connect(q.port, &cfg);
    let sent = pattern_bytes(7, 6 * 1024 * 1024);
    let (conn, sock) = (tls.conn, tls.sock);
    let sock2 = sock.try_clone().unwrap();
    let conn = Arc::new(std::sync::Mutex::new(conn));
    let writer = {
        let conn = conn.clone();
        let data = sent.clone();
        std::thread::spawn(move || {
            let mut sock = sock2;
            for chunk in data.chunks(64 * 1024) {
                let mut c = conn.lock().unwrap();
                c.writer().write_all(chunk).unwrap();
                while c.wants_write() {
                    c.write_tls(&mut sock).unwrap();
                }
            }
        })
    };
    let mut got = Vec::with_capacity(sent.len());
    let mut sock = sock;
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut buf = vec![0u8; 64 * 1024];
    while got.len() < sent.len() && Instant::now() < deadline {
        let n = match sock.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => continue,
            Err(e) => panic!("{e}"),
        };
        let mut c = conn.lock().unwrap();
        let mut rd = &buf[..n];
        let mut plain = [0u8; 64 * 1024];
        while !rd.is_empty() {
            c.read_tls(&mut rd).unwrap();
            c.process_new_packets().expect("valid records from quill");
            loop {
                match c.reader().read(&mut plain) {
                    Ok(0) => break,
                    Ok(k) => got.extend_from_slice(&plain[..k]),
                    Err(_) => break,
                }
            }
        }
    }
    writer.join().unwrap();
    assert_eq!(got.len(), sent.len(), "all the bytes came back");
    assert!(got == sent, "byte-exact both ways");
}

/// A sample of `/metrics`.
fn metric(s: &Started, name: &str, labels: &[(&str, &str)]) -> f64 {
    admin_support::metrics(s.admin).value(name, labels)
}

#[test]
fn tls_handshake_timeout_closes_a_silent_client() {
    let echo = echo();
    let s = start(&[echo.addr()], false, "handshake_timeout = \"1s\"");
    let q = &s.q;
    let mut silent = connect_port(q.port);
    let started = Instant::now();
    let (_, how) = wait_closed(&mut silent, Duration::from_secs(10));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900),
        "closed after {took:?}, before the handshake timeout ({how:?})"
    );
    assert!(took < Duration::from_secs(8), "not timed out: {took:?}");
    assert_eq!(
        metric(
            &s,
            "quill_tls_handshake_failures_total",
            &[("reason", "timeout")]
        ),
        1.0
    );
}

#[test]
fn tls_handshakes_in_progress_are_bounded_per_worker_by_evicting_the_least_active() {
    let echo = echo();
    // Accepts not deferred, so that silent clients are Quill's at once (deferred, the kernel
    // holds a silent client for about a second: see `silent_clients_wait_in_the_kernel`).
    let s = start_with(
        &[echo.addr()],
        false,
        "defer_accept = false\n",
        "max_handshakes = 2",
    );
    let (q, p) = (&s.q, &s.pki);
    // Two silent clients hold the two slots; a third (which speaks) makes the oldest go.
    let mut a = connect_port(q.port);
    std::thread::sleep(Duration::from_millis(100));
    let _b = connect_port(q.port);
    std::thread::sleep(Duration::from_millis(200));
    let cfg = client_config(&p.ca, &[]);
    let mut tls = tls_connect(q.port, &cfg);
    tls_echo(&mut tls, b"x");
    let (_, how) = wait_closed(&mut a, Duration::from_secs(5));
    assert_eq!(
        metric(
            &s,
            "quill_tls_handshake_failures_total",
            &[("reason", "evicted")]
        ),
        1.0,
        "the oldest silent client was evicted ({how:?})"
    );
}

#[test]
fn a_client_silent_past_the_first_byte_timeout_is_closed() {
    let echo = echo();
    let s = start(
        &[echo.addr()],
        false,
        "handshake_first_byte_timeout = \"500ms\"\nhandshake_timeout = \"30s\"",
    );
    let q = &s.q;
    let mut silent = connect_port(q.port);
    let started = Instant::now();
    let (_, how) = wait_closed(&mut silent, Duration::from_secs(10));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(5),
        "closed after {took:?} ({how:?})"
    );
    // One that sent its first bytes has the whole handshake_timeout.
    let mut slow = connect_port(q.port);
    slow.write_all(&[22, 3, 1]).unwrap();
    assert!(
        still_open(&mut slow, Duration::from_millis(1500)),
        "a client that spoke is not held to the first-byte timeout"
    );
}

#[test]
fn tls_garbage_and_plain_http_fail_the_handshake_and_the_listener_keeps_serving() {
    let echo = echo();
    let s = start(&[echo.addr()], false, "");
    let (q, p) = (&s.q, &s.pki);
    let mut g = connect_port(q.port);
    g.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let _ = wait_closed(&mut g, Duration::from_secs(5));
    let mut r = connect_port(q.port);
    r.write_all(&pattern_bytes(3, 5000)).unwrap();
    let _ = r.shutdown(Shutdown::Write);
    let _ = wait_closed(&mut r, Duration::from_secs(5));
    assert!(
        metric(
            &s,
            "quill_tls_handshake_failures_total",
            &[("reason", "protocol")]
        ) >= 1.0
    );
    let cfg = client_config(&p.ca, &[]);
    let mut tls = tls_connect(q.port, &cfg);
    tls.write_all(b"still here").unwrap();
    let mut got = [0u8; 10];
    tls.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"still here");
    assert!(
        metric(
            &s,
            "quill_tls_handshakes_total",
            &[("version", "1.3"), ("kind", "full")]
        ) >= 1.0
    );
    assert!(q.stderr().lines().all(|l| !l.contains("panick")));
}

#[test]
fn tls_interoperates_with_openssl_s_client_and_curl() {
    let backend = Backend::fixed(5);
    let s = start(&[backend.addr()], true, "");
    let (q, p) = (&s.q, &s.pki);
    // curl over https, verifying the chain against the test CA.
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(&p.ca)
        .arg(format!("https://localhost:{}/curl", q.port))
        .arg("--resolve")
        .arg(format!("localhost:{}:127.0.0.1", q.port))
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"abcde");
    // openssl s_client, TLS 1.2 then 1.3.
    for v in ["-tls1_2", "-tls1_3"] {
        let mut child = s_client(q.port, &p.ca, &["-quiet", v]);
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"GET /ossl HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .unwrap();
        let out = wait_child(child, Duration::from_secs(10));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.starts_with("HTTP/1.1 200"),
            "openssl {v}: {text} / {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn tls_certificate_expiry_is_in_the_metrics_and_on_the_status_page() {
    let echo = echo();
    let s = start(&[echo.addr()], false, "");
    // 2099-01-01T00:00:00Z, the test certificate's notAfter.
    let not_after = 4_070_908_800_i64;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let cert = s.pki.cert.display().to_string();
    let got = metric(
        &s,
        "quill_tls_certificate_expiry_seconds",
        &[("listener", "secure"), ("cert", &cert)],
    ) as i64;
    assert!(
        (got - (not_after - now)).abs() < 120,
        "expiry {got} s, expected about {}",
        not_after - now
    );
    let dom = admin_support::chromium::dump_dom(&format!("http://{}/", s.admin), 3000);
    let at = dom
        .find(&format!("data-cert=\"{cert}\""))
        .unwrap_or_else(|| panic!("no certificate line on the page: {dom}"));
    let rest = &dom[at..];
    let v = rest
        .split("class=\"tls-expiry\" data-value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or_else(|| panic!("no expiry value: {rest}"));
    assert!((v - (not_after - now)).abs() < 120, "page says {v}");
    assert!(
        rest.contains("localhost"),
        "the certificate's name is shown"
    );
}

/// A rustls client configuration trusting the test CA, for one protocol version.
fn client_config_version(ca: &Path, v13: bool) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let version: &[&rustls::SupportedProtocolVersion] = if v13 {
        &[&rustls::version::TLS13]
    } else {
        &[&rustls::version::TLS12]
    };
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_protocol_versions(version)
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    Arc::new(cfg)
}

/// One echo round trip over TLS.
fn tls_echo(tls: &mut Tls, msg: &[u8]) {
    tls.write_all(msg).unwrap();
    let mut got = vec![0u8; msg.len()];
    tls.read_exact(&mut got).unwrap();
    assert_eq!(got, msg);
}

#[test]
fn tls_client_key_update_keeps_the_connection_serving() {
    let echo = echo();
    let s = start(&[echo.addr()], false, "");
    let (q, p) = (&s.q, &s.pki);
    // rustls' key update asks for one in return: the client's sending keys change (Quill must
    // follow to read), and Quill's must too (rustls, expecting them, would fail to read).
    let cfg = client_config_version(&p.ca, true);
    let mut tls = tls_connect(q.port, &cfg);
    tls_echo(&mut tls, b"before any update\n");
    for round in 0..3 {
        tls.conn.refresh_traffic_keys().unwrap();
        tls_echo(&mut tls, format!("after update {round}\n").as_bytes());
    }
    // A large transfer after the updates: many records under the new keys both ways.
    let big = pattern_bytes(7, 200_000);
    tls.write_all(&big).unwrap();
    let mut got = vec![0u8; big.len()];
    tls.read_exact(&mut got).unwrap();
    assert!(got == big, "the bulk echo came back intact");

    // openssl s_client: "k" updates its keys without asking Quill to, "K" asks. Each command
    // line goes alone, after the echo of the line before it came back.
    let mut child = s_client(q.port, &p.ca, &["-tls1_3"]);
    let mut stdin = child.stdin.take().unwrap();
    // The echoes come on stdout, "KEYUPDATE" (a command taken) on stderr: both collected.
    let seen = Arc::new(std::sync::Mutex::new(String::new()));
    let collect = |mut from: Box<dyn Read + Send>| {
        let seen = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    let readers = [
        collect(Box::new(child.stdout.take().unwrap())),
        collect(Box::new(child.stderr.take().unwrap())),
    ];
    let wait_for = |needle: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if seen.lock().unwrap().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    };
    let mut ok = Vec::new();
    for (cmd, line) in [
        ("", "line-zero"),
        ("k\n", "line-one"),
        ("K\n", "line-two"),
        ("k\n", "line-three"),
    ] {
        if !cmd.is_empty() {
            let before = seen.lock().unwrap().matches("KEYUPDATE").count();
            stdin.write_all(cmd.as_bytes()).unwrap();
            stdin.flush().unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            while seen.lock().unwrap().matches("KEYUPDATE").count() == before
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
        ok.push((line, wait_for(&format!("{line}\n"))));
    }
    // "Q": s_client ends the connection and exits.
    let _ = stdin.write_all(b"Q\n");
    drop(stdin);
    let _ = wait_child(child, Duration::from_secs(10));
    for r in readers {
        r.join().unwrap();
    }
    let text = seen.lock().unwrap().clone();
    for (line, echoed) in ok {
        assert!(echoed, "{line} echoed after the key updates: {text}");
    }
    assert!(
        text.matches("KEYUPDATE").count() >= 3,
        "three key updates sent: {text}"
    );
    // The first connection still serves after all that.
    tls_echo(&mut tls, b"still serving\n");
}

#[test]
fn tls_close_notify_still_ends_the_stream_both_ways() {
    // After the handshake the records are Quill's own: close_notify both ways on each version.
    for v13 in [false, true] {
        close_notify_both_ways(Some(v13), b"to the end", b" returned");
    }
}

#[test]
fn tls_bad_record_after_the_handshake_is_refused_with_an_alert() {
    let echo = echo();
    let s = start(&[echo.addr()], false, "");
    let (q, p) = (&s.q, &s.pki);
    for v13 in [false, true] {
        let cfg = client_config_version(&p.ca, v13);
        let mut tls = tls_connect(q.port, &cfg);
        tls_echo(&mut tls, b"a good record first\n");
        // A record the client sealed, one bit of its tag flipped on the way.
        tls.conn.writer().write_all(b"tampered\n").unwrap();
        let mut wire = Vec::new();
        while tls.conn.wants_write() {
            tls.conn.write_tls(&mut wire).unwrap();
        }
        let last = wire.len() - 1;
        wire[last] ^= 0x01;
        tls.sock.write_all(&wire).unwrap();
        // Quill answers with bad_record_mac and closes.
        let mut err = None;
        let deadline = Instant::now() + Duration::from_secs(10);
        while err.is_none() && Instant::now() < deadline {
            match tls.conn.read_tls(&mut tls.sock) {
                Ok(0) => break,
                Ok(_) => {
                    if let Err(e) = tls.conn.process_new_packets() {
                        err = Some(e);
                    }
                }
                Err(e) => panic!("socket: {e}"),
            }
        }
        assert_eq!(
            err,
            Some(rustls::Error::AlertReceived(
                rustls::AlertDescription::BadRecordMac
            )),
            "TLS 1.{}",
            if v13 { 3 } else { 2 }
        );
        let mut rest = [0u8; 64];
        let n = tls.sock.read(&mut rest).unwrap_or(0);
        assert_eq!(n, 0, "the connection is closed after the alert");
        // Another client is served.
        let mut again = tls_connect(q.port, &cfg);
        tls_echo(&mut again, b"next client\n");
    }
}

#[test]
fn rejected_early_data_from_a_foreign_ticket_does_not_fail_the_handshake() {
    // E12 (docs/design.md#the-record-layer-behaves-as-rustls-does): a client resuming with a ticket
    // another server gave it (one that allows 0-RTT) sends early data Quill cannot decrypt. rustls
    // drops such records after refusing the PSK ("trial decryption", at most 16 KiB); a dropped
    // record that was the last one rustls was shown is not counted as consumed, and Quill showed it
    // again on every pass over the same bytes, so its length counted three times or more before the
    // client's Finished: bad_record_mac and a reset while the client was still handshaking. Shown
    // again only with a new record after it, it counts twice, as with rustls' own server.
    let echo = echo();
    let s = start(&[echo.addr()], false, "");
    let (q, p) = (&s.q, &s.pki);
    let mut cfg = (*client_config(&p.ca, &[])).clone();
    cfg.enable_early_data = true;
    let cfg = Arc::new(cfg);

    // The other server for `localhost` (rustls, same certificate) allows 16 KiB of early data;
    // the client keeps its tickets in `cfg`'s resumption store.
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let other_port = other.local_addr().unwrap().port();
    let mut scfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        CertificateDer::pem_file_iter(&p.cert)
            .unwrap()
            .map(|c| c.unwrap())
            .collect(),
        rustls::pki_types::PrivateKeyDer::from_pem_file(&p.key).unwrap(),
    )
    .unwrap();
    scfg.max_early_data_size = 16384;
    let scfg = Arc::new(scfg);
    let server = std::thread::spawn(move || {
        let (sock, _) = other.accept().unwrap();
        set_timeouts(&sock, IO_TIMEOUT);
        let conn = rustls::ServerConnection::new(scfg).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, sock);
        tls.write_all(b"ticket").unwrap();
        let mut rest = Vec::new();
        let _ = tls.read_to_end(&mut rest);
    });
    let mut first = tls_connect(other_port, &cfg);
    let mut got = [0u8; 6];
    first.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"ticket");
    first.conn.send_close_notify();
    let _ = first.conn.complete_io(&mut first.sock);
    drop(first);
    server.join().unwrap();

    // To Quill: 6000 bytes of 0-RTT data in one record (more than a third of 16 KiB, at most
    // half), in the same write as the ClientHello.
    let sock = connect_port(q.port);
    set_timeouts(&sock, IO_TIMEOUT);
    let mut conn =
        rustls::ClientConnection::new(cfg.clone(), ServerName::try_from("localhost").unwrap())
            .unwrap();
    let early = vec![b'e'; 6000];
    let took = conn
        .early_data()
        .expect("the ticket allows early data")
        .write(&early)
        .unwrap();
    assert_eq!(took, early.len());
    let mut tls = rustls::StreamOwned::new(conn, sock);
    while tls.conn.is_handshaking() {
        tls.conn
            .complete_io(&mut tls.sock)
            .expect("the handshake completes without the early data");
    }
    assert!(!tls.conn.is_early_data_accepted());
    assert_eq!(tls.conn.handshake_kind(), Some(rustls::HandshakeKind::Full));
    // The client sends again what the server did not take.
    tls_echo(&mut tls, &early);
    tls_echo(&mut tls, b"and more\n");
}

/// A client whose handshake is done on its side but whose Finished is not sent yet (it waits in
/// the connection's outgoing records): what comes next leaves in the same write as the Finished.
fn handshake_but_hold_finished(
    port: u16,
    cfg: &Arc<rustls::ClientConfig>,
) -> (rustls::ClientConnection, TcpStream) {
    let mut sock = connect_port(port);
    set_timeouts(&sock, IO_TIMEOUT);
    let mut conn =
        rustls::ClientConnection::new(cfg.clone(), ServerName::try_from("localhost").unwrap())
            .unwrap();
    for _ in 0..64 {
        if !conn.is_handshaking() {
            return (conn, sock);
        }
        while conn.wants_write() {
            conn.write_tls(&mut sock).unwrap();
        }
        if conn.read_tls(&mut sock).unwrap() == 0 {
            panic!("closed during the handshake");
        }
        conn.process_new_packets().unwrap();
    }
    panic!("no handshake");
}

/// Everything the connection has to send, as bytes (for one write).
fn outgoing(conn: &mut rustls::ClientConnection) -> Vec<u8> {
    let mut wire = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut wire).unwrap();
    }
    wire
}

#[test]
fn request_and_close_notify_right_after_finished_are_answered() {
    // S1: data and close_notify in the same write as the client's Finished (what
    // `printf ... | gnutls-cli` does) were lost: Quill took the close_notify for a client that
    // left during its handshake.
    let s = {
        let backend = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = backend.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let mut got = Vec::new();
            for _ in 0..3 {
                let (mut s, _) = backend.accept().unwrap();
                set_timeouts(&s, IO_TIMEOUT);
                let mut all = Vec::new();
                s.read_to_end(&mut all).unwrap();
                s.write_all(b"answer to ").unwrap();
                s.write_all(&all).unwrap();
                got.push(all);
            }
            got
        });
        (start(&[addr], false, ""), t)
    };
    let (started, backend) = s;
    let (q, p) = (&started.q, &started.pki);
    for v13 in [true, false] {
        let cfg = client_config_version(&p.ca, v13);
        let (mut conn, mut sock) = handshake_but_hold_finished(q.port, &cfg);
        conn.writer().write_all(b"request").unwrap();
        conn.send_close_notify();
        let wire = outgoing(&mut conn);
        sock.write_all(&wire).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, sock);
        let mut back = Vec::new();
        tls.read_to_end(&mut back)
            .unwrap_or_else(|e| panic!("TLS 1.{}: {e}", if v13 { 3 } else { 2 }));
        assert_eq!(back, b"answer to request", "v13 {v13}");
    }
    // gnutls-cli with the request on its stdin: at the end of input it sends close_notify and
    // keeps reading.
    let out = gnutls_pipe(q.port, &p.ca, b"request\n");
    assert!(
        out.contains("answer to request"),
        "gnutls-cli got the answer: {out}"
    );
    let got = backend.join().unwrap();
    assert_eq!(got.len(), 3);
}

/// `printf DATA | gnutls-cli` to 127.0.0.1:PORT trusting `ca`: its stdout and stderr.
fn gnutls_pipe(port: u16, ca: &Path, data: &[u8]) -> String {
    let mut child = std::process::Command::new("gnutls-cli")
        .arg("--x509cafile")
        .arg(ca)
        .args([
            "--sni-hostname",
            "localhost",
            "--verify-hostname",
            "localhost",
        ])
        .args(["-p", &port.to_string(), "127.0.0.1"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("gnutls-cli");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(data).unwrap();
    drop(stdin);
    let out = wait_child(child, Duration::from_secs(10));
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn key_iv(
    suite: rustls::SupportedCipherSuite,
    secrets: rustls::ConnectionTrafficSecrets,
) -> (
    &'static dyn rustls::crypto::cipher::Tls13AeadAlgorithm,
    rustls::crypto::cipher::AeadKey,
    rustls::crypto::cipher::Iv,
) {
    let rustls::SupportedCipherSuite::Tls13(s) = suite else {
        panic!("TLS 1.3 only")
    };
    match secrets {
        rustls::ConnectionTrafficSecrets::Aes128Gcm { key, iv }
        | rustls::ConnectionTrafficSecrets::Aes256Gcm { key, iv }
        | rustls::ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (s.aead_alg, key, iv),
        _ => panic!("suite"),
    }
}

/// Seals TLS 1.3 records under a traffic secret rustls handed out.
struct Sealer(Box<dyn rustls::crypto::cipher::MessageEncrypter>, u64);

impl Sealer {
    fn new(
        suite: rustls::SupportedCipherSuite,
        (seq, s): (u64, rustls::ConnectionTrafficSecrets),
    ) -> Sealer {
        let (alg, key, iv) = key_iv(suite, s);
        Sealer(alg.encrypter(key, iv), seq)
    }

    fn seal(&mut self, typ: rustls::ContentType, payload: &[u8]) -> Vec<u8> {
        let chunks: &[&[u8]] = &[payload];
        let msg = rustls::crypto::cipher::OutboundPlainMessage {
            typ,
            version: rustls::ProtocolVersion::TLSv1_2,
            payload: rustls::crypto::cipher::OutboundChunks::new(chunks),
        };
        let out = self.0.encrypt(msg, self.1).unwrap().encode();
        self.1 += 1;
        out
    }
}

/// Opens TLS 1.3 records under a traffic secret rustls handed out.
struct Opener(Box<dyn rustls::crypto::cipher::MessageDecrypter>, u64);

impl Opener {
    fn new(
        suite: rustls::SupportedCipherSuite,
        (seq, s): (u64, rustls::ConnectionTrafficSecrets),
    ) -> Opener {
        let (alg, key, iv) = key_iv(suite, s);
        Opener(alg.decrypter(key, iv), seq)
    }

    /// The next record from `sock` (`pending` holds bytes read past it): its inner type and
    /// plaintext, or the error opening it.
    fn next(
        &mut self,
        sock: &mut TcpStream,
        pending: &mut Vec<u8>,
    ) -> Result<(rustls::ContentType, Vec<u8>), rustls::Error> {
        let deadline = Instant::now() + IO_TIMEOUT;
        loop {
            if pending.len() >= 5 {
                let len = 5 + usize::from(u16::from_be_bytes([pending[3], pending[4]]));
                if pending.len() >= len {
                    let mut record: Vec<u8> = pending.drain(..len).collect();
                    let typ = rustls::ContentType::from(record[0]);
                    let msg = rustls::crypto::cipher::InboundOpaqueMessage::new(
                        typ,
                        rustls::ProtocolVersion::TLSv1_2,
                        &mut record[5..],
                    );
                    let plain = self.0.decrypt(msg, self.1)?;
                    self.1 += 1;
                    return Ok((plain.typ, plain.payload.to_vec()));
                }
            }
            assert!(Instant::now() < deadline, "no whole record came");
            let mut buf = [0u8; 4096];
            let n = sock.read(&mut buf).expect("read a record");
            assert!(n > 0, "closed before a whole record came");
            pending.extend_from_slice(&buf[..n]);
        }
    }
}

/// [`handshake_but_hold_finished`] on rustls' unbuffered client (whose kernel API gives the next
/// traffic secrets of a key update): the connection, its socket and the Finished's bytes.
fn unbuffered_handshake_but_hold_finished(
    port: u16,
    cfg: &Arc<rustls::ClientConfig>,
) -> (
    rustls::client::UnbufferedClientConnection,
    TcpStream,
    Vec<u8>,
) {
    use rustls::unbuffered::ConnectionState;
    let mut sock = connect_port(port);
    set_timeouts(&sock, IO_TIMEOUT);
    let mut conn = rustls::client::UnbufferedClientConnection::new(
        cfg.clone(),
        ServerName::try_from("localhost").unwrap(),
    )
    .unwrap();
    let mut inb: Vec<u8> = Vec::new();
    let mut out: Vec<u8> = Vec::new();
    for _ in 0..256 {
        let st = conn.process_tls_records(&mut inb);
        let discard = st.discard;
        let mut read = false;
        let mut done = false;
        match st.state.expect("client handshake") {
            ConnectionState::EncodeTlsData(mut e) => {
                let mut buf = vec![0u8; 64 * 1024];
                let n = e.encode(&mut buf).unwrap();
                out.extend_from_slice(&buf[..n]);
            }
            ConnectionState::TransmitTlsData(mut t) => {
                // The Finished (the last flight) is held; the ClientHello goes now.
                let last = t.may_encrypt_app_data().is_some();
                t.done();
                if !last {
                    sock.write_all(&out).unwrap();
                    out.clear();
                }
            }
            ConnectionState::WriteTraffic(_) => done = true,
            _ => read = true,
        }
        inb.drain(..discard);
        if done {
            assert!(inb.is_empty(), "records past the server's Finished");
            return (conn, sock, out);
        }
        if read {
            let mut buf = [0u8; 16 * 1024];
            let n = sock.read(&mut buf).unwrap();
            assert!(n > 0, "closed during the handshake");
            inb.extend_from_slice(&buf[..n]);
        }
    }
    panic!("no handshake");
}

#[test]
fn key_update_sent_with_the_finished_keeps_both_sides_in_step() {
    // E8: Finished and KeyUpdate(update_requested) in one write. rustls answered the KeyUpdate
    // inside the handshake and Quill dropped the answer: its next records were under keys the
    // client never learnt.
    let backend = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = backend.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        for _ in 0..2 {
            let (mut s, _) = backend.accept().unwrap();
            set_timeouts(&s, IO_TIMEOUT);
            // A greeting first, so Quill has something to send under its keys at once.
            s.write_all(b"hello\n").unwrap();
            let mut buf = [0u8; 256];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 || s.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    });
    let started = start(&[addr], false, "");
    let (q, p) = (&started.q, &started.pki);
    let mut cfg = (*client_config_version(&p.ca, true)).clone();
    cfg.enable_secret_extraction = true;
    let cfg = Arc::new(cfg);
    for round in 0..2 {
        let (conn, mut sock, mut wire) = unbuffered_handshake_but_hold_finished(q.port, &cfg);
        let suite = conn.negotiated_cipher_suite().unwrap();
        let (secrets, mut kernel) = conn.dangerous_into_kernel_connection().unwrap();
        let mut tx = Sealer::new(suite, secrets.tx);
        let mut rx = Opener::new(suite, secrets.rx);
        wire.extend(tx.seal(rustls::ContentType::Handshake, &[24, 0, 0, 1, 1]));
        tx = Sealer::new(suite, kernel.update_tx_secret().unwrap());
        sock.write_all(&wire).unwrap();
        // Quill's records: session tickets, then its KeyUpdate under its old keys, then the
        // greeting under its new ones.
        let mut pending = Vec::new();
        let mut updated = false;
        for _ in 0..16 {
            let (typ, body) = rx.next(&mut sock, &mut pending).unwrap_or_else(|e| {
                panic!("round {round}: a record Quill sent could not be opened ({e}): its KeyUpdate was lost")
            });
            match (typ, body.first()) {
                (rustls::ContentType::Handshake, Some(4)) => {}
                (rustls::ContentType::Handshake, Some(24)) => {
                    assert_eq!(body, [24, 0, 0, 1, 0], "Quill's KeyUpdate asks for none");
                    rx = Opener::new(suite, kernel.update_rx_secret().unwrap());
                    updated = true;
                }
                (rustls::ContentType::ApplicationData, _) => {
                    assert!(updated, "round {round}: data came before Quill's KeyUpdate");
                    assert_eq!(body, b"hello\n");
                    break;
                }
                other => panic!("round {round}: unexpected record {other:?}"),
            }
        }
        // Both sides on their new keys: an echo round trip.
        sock.write_all(&tx.seal(rustls::ContentType::ApplicationData, b"ping"))
            .unwrap();
        let (typ, body) = rx.next(&mut sock, &mut pending).unwrap();
        assert_eq!(
            (typ, &body[..]),
            (rustls::ContentType::ApplicationData, &b"ping"[..])
        );
    }
    drop(started);
    t.join().unwrap();
}

/// A TCP connection to 127.0.0.1:`port` from `src` (another loopback address).
fn connect_from(src: std::net::Ipv4Addr, port: u16) -> TcpStream {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&SocketAddr::from((src, 0)).into()).unwrap();
    sock.connect(&SocketAddr::from(([127, 0, 0, 1], port)).into())
        .unwrap();
    sock.into()
}

/// Half of a real ClientHello's bytes.
fn half_a_client_hello(cfg: &Arc<rustls::ClientConfig>) -> Vec<u8> {
    let mut conn =
        rustls::ClientConnection::new(cfg.clone(), ServerName::try_from("localhost").unwrap())
            .unwrap();
    let mut hello = outgoing(&mut conn);
    hello.truncate(hello.len() / 2);
    hello
}

/// A full handshake and an echo round trip from 127.0.0.1: whether both succeeded.
fn handshake_and_request(port: u16, cfg: &Arc<rustls::ClientConfig>) -> bool {
    let sock = connect_port(port);
    set_timeouts(&sock, Duration::from_secs(5));
    let conn =
        rustls::ClientConnection::new(cfg.clone(), ServerName::try_from("localhost").unwrap())
            .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let mut one = [0u8; 5];
    tls.write_all(b"hello").is_ok() && tls.read_exact(&mut one).is_ok() && &one == b"hello"
}

/// E3: `held` connections from `sources` loopback addresses (127.0.0.2 and up), each silent or
/// with half a ClientHello, then 10 clients from 127.0.0.1: how many completed a handshake and a
/// request, and the evictions counted.
fn starve(held: usize, sources: u8, half_hello: bool) -> (usize, f64) {
    starve_with(held, sources, half_hello, "")
}

/// [`starve`] with `global` lines in Quill's file.
fn starve_with(held: usize, sources: u8, half_hello: bool, global: &str) -> (usize, f64) {
    let echo = echo();
    // Timeouts far longer than the test: only eviction can make room.
    let s = start_with(
        &[echo.addr()],
        false,
        global,
        "handshake_timeout = \"60s\"\nhandshake_first_byte_timeout = \"60s\"",
    );
    let (q, p) = (&s.q, &s.pki);
    let cfg = client_config(&p.ca, &[]);
    let hello = half_a_client_hello(&cfg);
    let mut hold = Vec::with_capacity(held);
    for i in 0..held {
        let src = std::net::Ipv4Addr::new(127, 0, 0, 2 + (i % usize::from(sources)) as u8);
        let mut c = connect_from(src, q.port);
        if half_hello {
            c.write_all(&hello).unwrap();
        }
        hold.push(c);
    }
    std::thread::sleep(Duration::from_millis(300));
    let served = (0..10)
        .filter(|_| handshake_and_request(q.port, &cfg))
        .count();
    eprintln!(
        "{held} held from {sources} addresses (half hello: {half_hello}): {served}/10 served"
    );
    let evicted = metric(
        &s,
        "quill_tls_handshake_failures_total",
        &[("reason", "evicted")],
    );
    drop(hold);
    (served, evicted)
}

/// Asserts that with [`starve`]'s `held` connections from `sources` addresses (`half_hello`:
/// each sent half a ClientHello) all 10 clients are served (`what`: the hold, for the message)
/// and at least `min_evicted` evictions were counted.
fn assert_handshakes_still_served(
    held: usize,
    sources: u8,
    half_hello: bool,
    what: &str,
    min_evicted: f64,
) {
    let (served, evicted) = starve(held, sources, half_hello);
    assert_eq!(served, 10, "clients served with {what}");
    assert!(evicted >= min_evicted, "evictions counted: {evicted}");
}

#[test]
fn held_silent_connections_cannot_starve_handshakes() {
    // 3,000 silent connections from 100 addresses (30 each: under the per-address bound, so only
    // the worker's eviction of the least active makes room), accepts not deferred (so Quill
    // holds them all at once).
    let (served, evicted) = starve_with(3000, 100, false, "defer_accept = false\n");
    assert_eq!(
        served, 10,
        "clients served with 3,000 silent connections held"
    );
    assert!(evicted >= 1000.0, "evictions counted: {evicted}");
}

/// With accepts deferred (the default), 3,000 silent connections wait in the kernel, not in
/// Quill: the 10 clients that speak are served while they are held.
#[test]
fn silent_clients_wait_in_the_kernel() {
    let (served, _) = starve(3000, 100, false);
    assert_eq!(
        served, 10,
        "clients served with 3,000 silent connections held"
    );
}

#[test]
fn held_half_client_hellos_cannot_starve_handshakes() {
    assert_handshakes_still_served(3000, 100, true, "3,000 half ClientHellos held", 1000.0);
}

#[test]
fn handshakes_held_from_few_addresses_are_bounded_per_address() {
    // 3,000 from two addresses: each is held to its own bound (32), evicting its own oldest;
    // the worker's bound is never reached.
    assert_handshakes_still_served(3000, 2, true, "3,000 held from two addresses", 2900.0);
}
