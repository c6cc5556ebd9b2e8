//! Certificates reloaded without loss (docs/design.md#tls-on-the-same-workers): SIGHUP, `quill ctl
//! reload` and
//! `quill ctl tls reload [NAME]` re-read a TLS listener's files; new handshakes get the new
//! certificate, connections opened before keep working, a bad file keeps the old certificate and
//! the answer names the file, and no handshake fails while reloads happen.

use crate::support;
use crate::tls_local;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use support::*;
use tls_local::*;

/// The subject CN the certificate of a new handshake with 127.0.0.1:PORT has: `one` or `two`.
fn served_cn(port: u16) -> String {
    let out = session(port, &[], "which").unwrap();
    let line = out
        .lines()
        .find(|l| l.starts_with("subject="))
        .unwrap_or_else(|| panic!("no subject in:\n{out}"));
    line.rsplit('=').next().unwrap_or("").trim().to_string()
}

/// Waits (bounded) until new handshakes with PORT get the certificate of CN `cn`.
fn wait_served(q: &QuillProcess, port: u16, cn: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = served_cn(port);
        if now == cn {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "port {port} still serves {now}, not {cn}:\n{}",
            q.stderr()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// Listener NAME on PORT with the certificate DIR/NAME.pem (CN `one`) and key DIR/NAME.key.
fn listener(dir: &Path, name: &str, port: u16, server: SocketAddr) -> String {
    let (cert, key) = write_cert(dir, name, "one", 1);
    tls_listener(name, port, server, &cert, &key, "")
}

/// Replaces DIR/NAME.pem and NAME.key with a certificate of CN `cn`.
fn new_cert(q: &QuillProcess, name: &str, cn: &str, serial: u64) {
    write_cert(q.dir.path(), name, cn, serial);
}

#[test]
fn tls_sighup_serves_the_new_certificate_to_new_connections() {
    let e = echo();
    let q = start_tls(|dir, port| listener(dir, "web", port, e.addr()));
    assert_eq!(served_cn(q.port), "one");
    let mut before = SClient::start(q.port, &[]);
    before.echo("before the reload").unwrap();

    new_cert(&q, "web", "two", 2);
    q.signal("HUP");
    wait_served(&q, q.port, "two");
    // The serial of the new certificate too, as s_client shows it.
    let out = session(q.port, &["-showcerts"], "serial").unwrap();
    assert!(out.contains("CN = two"), "{out}");

    // The connection opened before the reload still carries bytes both ways.
    before.echo("after the reload").unwrap();
    let out = before.finish();
    assert!(out.contains("subject=CN = one"), "{out}");

    // `quill ctl reload` re-reads the files as well.
    new_cert(&q, "web", "three", 3);
    let (ok, reply) = ctl(&q, &["reload"]);
    assert!(ok, "{reply}");
    assert_eq!(served_cn(q.port), "three");
}

#[test]
fn tls_ctl_tls_reload_rereads_one_listeners_files() {
    let e = echo();
    let b_port = free_port();
    let q = start_tls(|dir, port| {
        listener(dir, "a", port, e.addr()) + &listener(dir, "b", b_port, e.addr())
    });
    new_cert(&q, "a", "two", 2);
    new_cert(&q, "b", "two", 2);
    let (ok, reply) = ctl(&q, &["tls", "reload", "a"]);
    assert!(ok, "{reply}");
    assert!(reply.contains("tls reloaded"), "{reply}");
    assert_eq!(served_cn(q.port), "two");
    assert_eq!(served_cn(b_port), "one", "b was not named");
    // Without a name: every TLS listener.
    let (ok, reply) = ctl(&q, &["tls", "reload"]);
    assert!(ok, "{reply}");
    assert_eq!(served_cn(b_port), "two");
    // Names that are not TLS listeners are refused.
    let (ok, reply) = ctl(&q, &["tls", "reload", "nosuch"]);
    assert!(
        !ok && reply.contains("no listener named 'nosuch'"),
        "{reply}"
    );
}

#[test]
fn tls_reload_with_a_bad_key_keeps_the_old_certificate_and_names_the_file() {
    let e = echo();
    let q = start_tls(|dir, port| listener(dir, "web", port, e.addr()));
    let key = q.path("web.key");
    let shown = key.display().to_string();
    // A new certificate, but a key file that holds no key.
    write_cert(q.dir.path(), "web", "two", 2);
    replace_file(
        &key,
        b"-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n",
    );
    let (ok, reply) = ctl(&q, &["tls", "reload", "web"]);
    assert!(!ok, "{reply}");
    assert!(reply.contains(&format!("tls reload: {shown}")), "{reply}");
    assert_eq!(reply.trim().lines().count(), 1, "{reply}");
    assert_eq!(served_cn(q.port), "one");
    // A reload refuses it the same way and names the file.
    let (ok, reply) = ctl(&q, &["reload"]);
    assert!(!ok && reply.contains(&shown), "{reply}");
    assert_eq!(served_cn(q.port), "one");
    // SIGHUP too: the process says why and keeps serving the old certificate.
    q.signal("HUP");
    assert!(
        q.wait_stderr_contains("SIGHUP: reload rejected", Duration::from_secs(10)),
        "{}",
        q.stderr()
    );
    let said = q.stderr();
    let line = said.lines().find(|l| l.contains("SIGHUP: reload rejected"));
    assert!(line.is_some_and(|l| l.contains(&shown)), "{said}");
    assert_eq!(served_cn(q.port), "one");
}

#[test]
fn tls_handshakes_during_a_reload_all_succeed() {
    let e = echo();
    let q = start_tls(|dir, port| listener(dir, "web", port, e.addr()));
    let stop = Arc::new(AtomicBool::new(false));
    let port = q.port;
    let clients: Vec<_> = (0..2)
        .map(|t| {
            let stop = stop.clone();
            thread::spawn(move || {
                let (mut ok, mut failures) = (0, Vec::new());
                // Bounded: at most 200 handshakes per thread, each bounded by CLIENT_TIMEOUT.
                for i in 0..200 {
                    if stop.load(Ordering::Relaxed) && i >= 10 {
                        break;
                    }
                    match session(port, &[], &format!("t{t}-{i}")) {
                        Ok(_) => ok += 1,
                        Err(e) => failures.push(e),
                    }
                }
                (ok, failures)
            })
        })
        .collect();
    for (round, cn) in ["two", "three", "four"].iter().enumerate() {
        thread::sleep(Duration::from_millis(200));
        new_cert(&q, "web", cn, round as u64 + 2);
        if round == 1 {
            q.signal("HUP");
            wait_served(&q, port, cn);
        } else {
            let (ok, reply) = ctl(&q, &["tls", "reload"]);
            assert!(ok, "{reply}");
        }
    }
    thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for c in clients {
        let (ok, failures) = c.join().unwrap();
        assert!(
            failures.is_empty(),
            "{} failed: {failures:?}",
            failures.len()
        );
        total += ok;
    }
    assert!(total >= 20, "only {total} handshakes");
    assert_eq!(served_cn(port), "four");
}

/// A CA (CN `cn`) written to DIR/STEM.pem, and a client certificate it signs written to
/// DIR/STEM-client.pem and .key; returns the client's two paths.
fn ca_with_client(dir: &Path, stem: &str, cn: &str) -> (String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, cn);
    replace_file(
        &dir.join(format!("{stem}.pem")),
        ca.self_signed(&ca_key).unwrap().pem().as_bytes(),
    );
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(Vec::<String>::new()).unwrap();
    leaf.distinguished_name.push(DnType::CommonName, "client");
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    let (c, k) = (
        dir.join(format!("{stem}-client.pem")),
        dir.join(format!("{stem}-client.key")),
    );
    replace_file(&c, cert.pem().as_bytes());
    replace_file(&k, key.serialize_pem().as_bytes());
    (c.display().to_string(), k.display().to_string())
}

#[test]
fn tls_reload_takes_a_ca_added_to_the_client_ca_dir() {
    let e = echo();
    let q = start_tls(|dir, port| {
        let cas = dir.join("cas");
        fs_create(&cas);
        ca_with_client(&cas, "first", "first CA");
        let (cert, key) = write_cert(dir, "web", "one", 1);
        tls_listener(
            "web",
            port,
            e.addr(),
            &cert,
            &key,
            &format!(
                "client_ca_dir = \"{}\"\nclient_verify = \"required\"\n",
                cas.display()
            ),
        )
    });
    // A client certificate of a CA that is not in the directory yet: refused. Its files are
    // kept beside the directory until the CA is added.
    let (cert, key) = ca_with_client(q.dir.path(), "second", "second CA");
    let with_cert = ["-cert", cert.as_str(), "-key", key.as_str()];
    assert!(session(q.port, &with_cert, "before").is_err());
    let (first_cert, first_key) = (
        q.path("cas/first-client.pem").display().to_string(),
        q.path("cas/first-client.key").display().to_string(),
    );
    let first = ["-cert", first_cert.as_str(), "-key", first_key.as_str()];
    session(q.port, &first, "first CA").unwrap();
    // The operator adds the second CA to the directory; `tls reload` lists it again.
    std::fs::copy(q.path("second.pem"), q.path("cas/second.pem")).unwrap();
    let (ok, reply) = ctl(&q, &["tls", "reload", "web"]);
    assert!(ok, "{reply}");
    session(q.port, &with_cert, "after").unwrap();
    session(q.port, &first, "first CA still").unwrap();
    // And a CA removed from it is no longer trusted after the next one.
    std::fs::remove_file(q.path("cas/second.pem")).unwrap();
    let (ok, reply) = ctl(&q, &["tls", "reload", "web"]);
    assert!(ok, "{reply}");
    assert!(session(q.port, &with_cert, "removed").is_err());
}

fn fs_create(dir: &Path) {
    if !dir.exists() {
        std::fs::create_dir(dir).unwrap();
    }
}
