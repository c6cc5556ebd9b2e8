//! TLS on HTTP listeners (docs/design.md#tls): a verified client certificate's subject goes
//! to servers as `X-Client-Cert-Subject` and into the access log, a client-sent field of that
//! name never reaches a server, and a request whose Host names another certificate's site than
//! the handshake's server name is answered 421. And the 1 KiB keep-alive target's path: a kept-alive
//! request reads the client's socket once (no read spent on EAGAIN).

use crate::http_support;
use crate::support;
use crate::tls_support;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use http_support::Backend;
use support::*;
use tls_support::{self_signed, toml_path, write, Ca, Cert, ClientOpts, KeyAlg, TlsClient};

/// Reads one response with a Content-Length body (bounded).
fn response(c: &mut TlsClient) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + IO_TIMEOUT;
    while Instant::now() < deadline {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if got.len() >= end + 4 + len {
                break;
            }
        }
        let n = c.stream.read(&mut buf).unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn get(c: &mut TlsClient, host: &str, extra: &str) -> String {
    write!(c.stream, "GET / HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n").unwrap();
    c.stream.flush().unwrap();
    response(c)
}

/// Quill with an HTTP listener whose TLS is `tls` (lines of `[listener.tls]`), in front of
/// `backend`, with an access log.
fn start(backend: &Backend, tls: impl Fn(&Path) -> String) -> QuillProcess {
    let addr = backend.addr();
    Quill::start_with(|dir, port| {
        let cfg = dir.join("quill.toml");
        let text = format!(
            "log = \"{}\"\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nservers = [\"{addr}\"]\n[listener.tls]\n{}\n",
            toml_path(&dir.join("access.log")),
            tls(dir)
        );
        std::fs::write(&cfg, text).unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    })
}

/// Quill (as [`start`]) serving `site.test` with a certificate of "Site CA" and asking for an
/// optional client certificate of "Client CA": (quill, alice's certificate of that CA).
fn start_optional_mtls(backend: &Backend) -> (QuillProcess, Cert) {
    let ca = Ca::new("Site CA");
    let server = ca.server("site", &["site.test"], KeyAlg::EcdsaP256);
    let clients = Ca::new("Client CA");
    let alice = clients.client("alice");
    let q = start(backend, |dir| {
        let (c, k) = server.write(dir, "site");
        let ca_file = write(dir, "clients.pem", &clients.cert_pem);
        format!(
            "cert = \"{}\"\nkey = \"{}\"\nclient_ca = \"{}\"\nclient_verify = \"optional\"",
            toml_path(&c),
            toml_path(&k),
            toml_path(&ca_file)
        )
    });
    (q, alice)
}

#[test]
fn tls_client_certificate_subject_goes_to_servers_and_a_client_sent_one_is_removed() {
    let backend = Backend::fixed(2);
    let (q, alice) = start_optional_mtls(&backend);
    let addr = q.addr();
    let with = ClientOpts {
        sni: Some("site.test"),
        cert: Some(&alice),
        ..ClientOpts::default()
    };
    let mut a = TlsClient::connect(addr, &with).unwrap();
    let r = get(&mut a, "site.test", "X-Client-Cert-Subject: CN=mallory\r\n");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let without = ClientOpts {
        sni: Some("site.test"),
        ..ClientOpts::default()
    };
    let mut b = TlsClient::connect(addr, &without).unwrap();
    let r = get(&mut b, "site.test", "X-Client-Cert-Subject: CN=mallory\r\n");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let reqs = backend.wait_requests(2, IO_TIMEOUT);
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[0].header_all("x-client-cert-subject"),
        vec!["CN=alice,O=Quill tests"],
        "the verified subject, and only it"
    );
    assert!(
        !reqs[1].has("x-client-cert-subject"),
        "a client without a certificate cannot claim one"
    );
    // The access log names the subject on the first request's line.
    let deadline = Instant::now() + IO_TIMEOUT;
    let log = loop {
        let text = std::fs::read_to_string(q.path("access.log")).unwrap_or_default();
        if text.lines().count() >= 2 || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        log.lines()
            .any(|l| l.ends_with("\"CN=alice,O=Quill tests\"")),
        "the subject in the access log: {log}"
    );
}

#[test]
fn tls_plain_http_listener_removes_a_client_sent_certificate_subject() {
    let backend = Backend::fixed(2);
    let addr = backend.addr();
    let q = Quill::start_with(|dir, port| {
        let cfg = dir.join("quill.toml");
        std::fs::write(
            &cfg,
            format!("[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nservers = [\"{addr}\"]\n"),
        )
        .unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    });
    let mut c = connect_port(q.port);
    set_timeouts(&c, IO_TIMEOUT);
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Client-Cert-Subject: CN=admin\r\nConnection: close\r\n\r\n")
        .unwrap();
    let got = read_until_eof(&mut c, IO_TIMEOUT);
    assert!(got.starts_with(b"HTTP/1.1 200"));
    let reqs = backend.wait_requests(1, IO_TIMEOUT);
    assert!(!reqs[0].has("x-client-cert-subject"));
}

/// Quill (as [`start`]) with two certificates of "Site CA": site "a" for `a.test` and site "b"
/// for `b_names`.
fn start_two_sites(backend: &Backend, b_names: &[&str]) -> QuillProcess {
    let ca = Ca::new("Site CA");
    let a = ca.server("a", &["a.test"], KeyAlg::EcdsaP256);
    let b = ca.server("b", b_names, KeyAlg::EcdsaP256);
    let q = start(backend, |dir| {
        let (ac, ak) = a.write(dir, "a");
        let (bc, bk) = b.write(dir, "b");
        format!(
            "certs = [ {{ cert = \"{}\", key = \"{}\" }}, {{ cert = \"{}\", key = \"{}\" }} ]",
            toml_path(&ac),
            toml_path(&ak),
            toml_path(&bc),
            toml_path(&bk)
        )
    });
    q
}

#[test]
fn tls_host_naming_another_certificates_site_than_the_sni_gets_421() {
    let backend = Backend::fixed(2);
    let q = start_two_sites(&backend, &["b.test", "*.b.test"]);
    let opts = ClientOpts {
        sni: Some("b.test"),
        ..ClientOpts::default()
    };
    let mut c = TlsClient::connect(q.addr(), &opts).unwrap();
    // Same certificate (the wildcard covers it, a port does not matter): served.
    let r = get(&mut c, "www.b.test:443", "");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let r = get(&mut c, "B.TEST", "");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    // Another certificate's site on this connection: misdirected.
    let r = get(&mut c, "a.test", "");
    assert!(r.starts_with("HTTP/1.1 421"), "{r}");
    assert_eq!(
        backend.wait_requests(2, IO_TIMEOUT).len(),
        2,
        "the 421 reached no server"
    );
}

#[test]
fn tls_keep_alive_request_reads_the_client_socket_once() {
    // A TLS read ends at a socket read that took less than it was offered (the socket is
    // drained) instead of reading again for EAGAIN: per kept-alive request, one recvfrom on the
    // client's socket and one on the server's. strace counts them in the running binary.
    const N: usize = 100;
    let backend = Backend::fixed(1024);
    let cert = self_signed("site", &["site.test"], KeyAlg::EcdsaP256);
    let q = start(&backend, |dir| {
        let (c, k) = cert.write(dir, "site");
        format!("cert = \"{}\"\nkey = \"{}\"", toml_path(&c), toml_path(&k))
    });
    let opts = ClientOpts {
        sni: Some("site.test"),
        ..ClientOpts::default()
    };
    let mut c = TlsClient::connect(q.addr(), &opts).unwrap();
    // The first request opens the server connection; the counted ones reuse it.
    assert!(get(&mut c, "site.test", "").starts_with("HTTP/1.1 200"));
    let test = "tls_keep_alive_request_reads_the_client_socket_once";
    let Some(st) = Strace::attach(test, q.pid, "recvfrom,read,recvmsg", &q.path("strace.txt"))
    else {
        return;
    };
    std::thread::sleep(Duration::from_millis(500));
    // One write per request: one record in one segment (`write!` would send a record per piece).
    let request = b"GET / HTTP/1.1\r\nHost: site.test\r\n\r\n";
    for i in 0..N {
        c.stream.write_all(request).unwrap();
        c.stream.flush().unwrap();
        let r = response(&mut c);
        assert!(r.starts_with("HTTP/1.1 200"), "request {i}: {r}");
    }
    let (calls, text) = st.counts();
    let reads: usize = ["recvfrom", "read", "recvmsg"]
        .iter()
        .map(|name| calls.get(*name).copied().unwrap_or(0))
        .sum();
    assert!(
        (2 * N..=2 * N + N / 10).contains(&reads),
        "{reads} reads for {N} kept-alive TLS requests (2 per request: the client's record, the \
         server's response):\n{text}"
    );
}

/// Sends `raw` on a new TLS connection with server name `sni` and returns the response.
fn send_tls(q: &QuillProcess, sni: &str, raw: &str) -> String {
    let opts = ClientOpts {
        sni: Some(sni),
        ..ClientOpts::default()
    };
    let mut c = TlsClient::connect(q.addr(), &opts).unwrap();
    c.stream.write_all(raw.as_bytes()).unwrap();
    c.stream.flush().unwrap();
    response(&mut c)
}

#[test]
fn absolute_form_authority_decides_the_421_check() {
    // E9: the 421 check read Host only while the server got the absolute-form authority, so
    // `GET https://b.test/` with `Host: a.test` on an a.test connection reached b.test's site.
    let backend = Backend::fixed(2);
    let q = start_two_sites(&backend, &["b.test"]);
    // Host and authority disagree: refused, whichever the check would read.
    let r = send_tls(
        &q,
        "a.test",
        "GET https://b.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
    );
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    // No Host (HTTP/1.0): the authority alone is the host, and it is another site's.
    let r = send_tls(&q, "a.test", "GET https://b.test/ HTTP/1.0\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 421"), "{r}");
    let r = send_tls(
        &q,
        "a.test",
        "GET https://b.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n",
    );
    assert!(r.starts_with("HTTP/1.1 421"), "{r}");
    // The connection's own site, in absolute form: served, with that Host.
    let r = send_tls(
        &q,
        "a.test",
        "GET https://a.test/x HTTP/1.1\r\nHost: a.test\r\n\r\n",
    );
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let reqs = backend.wait_requests(1, IO_TIMEOUT);
    assert_eq!(reqs.len(), 1, "only the last request reached a server");
    assert_eq!(reqs[0].header_all("host"), vec!["a.test"]);
}

#[test]
fn underscore_identity_headers_never_reach_the_server_over_mtls() {
    // E7: `X_Client_Cert_Subject: CN=admin` reached a WSGI server as HTTP_X_CLIENT_CERT_SUBJECT
    // from a client without a certificate (and beside the real subject from one with).
    let backend = Backend::fixed(2);
    let (q, alice) = start_optional_mtls(&backend);
    let forged = "X_Client_Cert_Subject: CN=admin\r\nX-Client-Cert_Subject: CN=admin\r\n\
                  X_Forwarded_For: 6.6.6.6\r\n";
    for cert in [None, Some(&alice)] {
        let opts = ClientOpts {
            sni: Some("site.test"),
            cert,
            ..ClientOpts::default()
        };
        let mut c = TlsClient::connect(q.addr(), &opts).unwrap();
        let r = get(&mut c, "site.test", forged);
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    }
    let reqs = backend.wait_requests(2, IO_TIMEOUT);
    assert_eq!(reqs.len(), 2);
    for r in &reqs {
        assert!(
            r.headers.iter().all(|(n, _)| !n.contains('_')),
            "{:?}",
            r.headers
        );
        assert_eq!(r.header_all("x-forwarded-for"), vec!["127.0.0.1"]);
    }
    assert!(!reqs[0].has("x-client-cert-subject"));
    assert_eq!(
        reqs[1].header_all("x-client-cert-subject"),
        vec!["CN=alice,O=Quill tests"]
    );
}

#[test]
fn request_and_close_notify_right_after_finished_are_answered() {
    // S1 on an HTTP listener: `printf 'GET ...' | gnutls-cli` sends the request and then
    // close_notify as soon as the handshake is done, often in the same read as its Finished.
    let backend = Backend::fixed(5);
    let ca = Ca::new("Site CA");
    let server = ca.server("site", &["site.test"], KeyAlg::EcdsaP256);
    let q = start(&backend, |dir| {
        let (c, k) = server.write(dir, "site");
        format!("cert = \"{}\"\nkey = \"{}\"", toml_path(&c), toml_path(&k))
    });
    let dir = tempfile::tempdir().unwrap();
    let ca_file = write(dir.path(), "ca.pem", &ca.cert_pem);
    let mut answered = 0;
    for _ in 0..5 {
        let mut child = Command::new("gnutls-cli")
            .arg("--x509cafile")
            .arg(&ca_file)
            .args([
                "--sni-hostname",
                "site.test",
                "--verify-hostname",
                "site.test",
            ])
            .args(["-p", &q.addr().port().to_string(), "127.0.0.1"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("gnutls-cli");
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(b"GET / HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n")
            .unwrap();
        drop(stdin);
        let out = wait_child(child, Duration::from_secs(10));
        if String::from_utf8_lossy(&out.stdout).contains("HTTP/1.1 200") {
            answered += 1;
        }
    }
    assert_eq!(answered, 5, "gnutls-cli answered");
}
