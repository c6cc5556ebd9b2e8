//! TLS certificates end to end: which certificate a listener serves (SNI exact names, wildcards,
//! the default one, strict SNI, ECDSA or RSA for one name, Pen's `ssl_sni_path` layout), client
//! certificates (required, optional, revoked) and a key that does not match its certificate.
//! Quill terminates TLS on a TCP listener in front of an echo server; the clients are rustls (the
//! certificate received compared byte for byte) and `openssl s_client`. Every certificate is
//! made by the test run (tests/support/tls.rs).

use crate::support;
use crate::tls_support;

use std::net::SocketAddr;
use std::path::Path;

use support::*;
use tls_support::*;

/// Quill with one TLS listener in front of an echo server.
struct Tls {
    q: QuillProcess,
    addr: SocketAddr,
    _echo: DemoServer,
}

/// Starts Quill with a TCP listener whose `[listener.tls]` table is `tls(dir)`; `files(dir)`
/// first writes the certificates into Quill's scratch directory.
fn start_tls(files: impl Fn(&Path), tls: impl Fn(&Path) -> String) -> Tls {
    let echo = echo();
    let backend = echo.addr();
    let q = Quill::start_with(|dir, port| {
        files(dir);
        let text = format!(
            "[[listener]]\nname = \"tls\"\nlisten = \"127.0.0.1:{port}\"\nservers = [\"{backend}\"]\n\
             [listener.tls]\n{}\n",
            tls(dir)
        );
        let cfg = write(dir, "quill.toml", &text);
        vec!["--config".into(), cfg.display().to_string()]
    });
    let addr = q.addr();
    Tls {
        q,
        addr,
        _echo: echo,
    }
}

/// `certs = [ { cert = "DIR/STEM.crt", key = "DIR/STEM.key"EXTRA }, ... ]` for `(stem, extra)`.
fn certs_list(dir: &Path, certs: &[(&str, &str)]) -> String {
    let items: Vec<String> = certs
        .iter()
        .map(|(stem, extra)| {
            format!(
                "{{ cert = \"{}\", key = \"{}\"{extra} }}",
                toml_path(&dir.join(format!("{stem}.crt"))),
                toml_path(&dir.join(format!("{stem}.key")))
            )
        })
        .collect();
    format!("certs = [{}]", items.join(", "))
}

/// The certificate Quill sends for `sni` (rustls client, every signature scheme offered),
/// after checking that the session carries bytes to the echo server and back.
fn served_for(
    t: &Tls,
    sni: Option<&str>,
) -> Result<rustls::pki_types::CertificateDer<'static>, String> {
    let opts = ClientOpts {
        sni,
        ..ClientOpts::default()
    };
    let mut c = TlsClient::connect(t.addr, &opts)?;
    assert_eq!(c.echo(b"ping\n")?, b"ping\n");
    Ok(c.peer_cert())
}

fn assert_served(t: &Tls, sni: Option<&str>, want: &Cert, certs: &[(&str, &Cert)]) {
    let got = served_for(t, sni)
        .unwrap_or_else(|e| panic!("SNI {sni:?}: {e}\nquill stderr:\n{}", t.q.stderr()));
    assert!(
        got == want.der,
        "SNI {sni:?} got {}, want {}",
        cn_of(&got, certs),
        cn_of(&want.der, certs)
    );
}

#[test]
fn tls_sni_picks_the_certificate_by_exact_name() {
    let ca = Ca::new("test CA");
    let a = ca.server("a", &["a.example"], KeyAlg::EcdsaP256);
    let b = ca.server("b", &["b.example", "also-b.example"], KeyAlg::EcdsaP256);
    let t = start_tls(
        |dir| {
            a.write(dir, "a");
            b.write(dir, "b");
        },
        |dir| certs_list(dir, &[("a", ""), ("b", "")]),
    );
    let all = [("a", &a), ("b", &b)];
    assert_served(&t, Some("b.example"), &b, &all);
    assert_served(&t, Some("also-b.example"), &b, &all);
    assert_served(&t, Some("a.example"), &a, &all);
    // Server names are not case-sensitive.
    assert_served(&t, Some("B.Example"), &b, &all);
}

#[test]
fn tls_sni_picks_the_certificate_by_wildcard() {
    let ca = Ca::new("test CA");
    let a = ca.server("a", &["a.example"], KeyAlg::EcdsaP256);
    let w = ca.server("wild", &["*.w.example"], KeyAlg::EcdsaP256);
    let exact = ca.server("exact", &["www.w.example"], KeyAlg::EcdsaP256);
    let t = start_tls(
        |dir| {
            a.write(dir, "a");
            w.write(dir, "w");
            exact.write(dir, "exact");
        },
        |dir| certs_list(dir, &[("a", ""), ("w", ""), ("exact", "")]),
    );
    let all = [("a", &a), ("wild", &w), ("exact", &exact)];
    assert_served(&t, Some("api.w.example"), &w, &all);
    // An exact name wins over the wildcard; the wildcard covers one label only.
    assert_served(&t, Some("www.w.example"), &exact, &all);
    assert_served(&t, Some("w.example"), &a, &all);
    assert_served(&t, Some("a.b.w.example"), &a, &all);
}

#[test]
fn tls_unknown_sni_gets_the_default_certificate() {
    let ca = Ca::new("test CA");
    let a = ca.server("a", &["a.example"], KeyAlg::EcdsaP256);
    let b = ca.server("b", &["b.example"], KeyAlg::EcdsaP256);
    let t = start_tls(
        |dir| {
            a.write(dir, "a");
            b.write(dir, "b");
        },
        |dir| certs_list(dir, &[("a", ""), ("b", ", default = true")]),
    );
    let all = [("a", &a), ("b", &b)];
    assert_served(&t, Some("unknown.example"), &b, &all);
    assert_served(&t, None, &b, &all);
    assert_served(&t, Some("a.example"), &a, &all);
    // openssl s_client sees the same.
    let s = SClient::run(t.addr, Some("unknown.example"), &[]);
    assert_eq!(s.subject(), Some("O = Quill tests, CN = b"), "{}", s.out);
}

#[test]
fn tls_strict_sni_refuses_an_unknown_name() {
    let ca = Ca::new("test CA");
    let a = ca.server("a", &["a.example"], KeyAlg::EcdsaP256);
    let t = start_tls(
        |dir| {
            a.write(dir, "a");
        },
        |dir| format!("{}\nstrict_sni = true", certs_list(dir, &[("a", "")])),
    );
    assert_served(&t, Some("a.example"), &a, &[("a", &a)]);
    let err = served_for(&t, Some("unknown.example")).expect_err("unknown name refused");
    assert!(err.to_lowercase().contains("alert"), "{err}");
    served_for(&t, None).expect_err("no server name refused");
    let s = SClient::run(t.addr, Some("unknown.example"), &[]);
    assert!(!s.ok, "s_client got a certificate:\n{}", s.out);
    // Quill goes on serving the known name.
    assert_served(&t, Some("a.example"), &a, &[("a", &a)]);
}

#[test]
fn tls_serves_ecdsa_or_rsa_for_one_name_by_what_the_client_offers() {
    let ca = Ca::new("test CA");
    let rsa = ca.server("both-rsa", &["both.example"], KeyAlg::Rsa2048);
    let ec = ca.server("both-ecdsa", &["both.example"], KeyAlg::EcdsaP256);
    let t = start_tls(
        |dir| {
            rsa.write(dir, "rsa");
            ec.write(dir, "ec");
        },
        // RSA first: ECDSA is preferred for a client that can verify it all the same.
        |dir| certs_list(dir, &[("rsa", ""), ("ec", "")]),
    );
    let default = SClient::run(t.addr, Some("both.example"), &[]);
    assert_eq!(
        default.key_type(),
        Some("id-ecPublicKey"),
        "{}",
        default.out
    );
    assert_eq!(default.subject(), Some("O = Quill tests, CN = both-ecdsa"));
    assert_eq!(default.field("Peer signature type:"), Some("ECDSA"));
    let rsa_only = SClient::run(
        t.addr,
        Some("both.example"),
        &["-sigalgs", "rsa_pss_rsae_sha256:rsa_pkcs1_sha256"],
    );
    assert_eq!(
        rsa_only.key_type(),
        Some("rsaEncryption"),
        "{}",
        rsa_only.out
    );
    assert_eq!(rsa_only.subject(), Some("O = Quill tests, CN = both-rsa"));
    assert_eq!(rsa_only.field("Peer signature type:"), Some("RSA-PSS"));
    // TLS 1.2 with ECDHE-RSA suites only: RSA too.
    let rsa12 = SClient::run(
        t.addr,
        Some("both.example"),
        &["-tls1_2", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256"],
    );
    assert_eq!(rsa12.key_type(), Some("rsaEncryption"), "{}", rsa12.out);
}

#[test]
fn tls_sni_path_directory_layout_serves_each_name() {
    let ca = Ca::new("test CA");
    let a = ca.server("a", &["a.example"], KeyAlg::EcdsaP256);
    let b = ca.server("b", &["b.example"], KeyAlg::Rsa2048);
    let w = ca.server("wild", &["*.w.example"], KeyAlg::EcdsaP256);
    let t = start_tls(
        |dir| {
            let sni = dir.join("sni");
            std::fs::create_dir_all(&sni).unwrap();
            a.write(&sni, "a.example");
            b.write(&sni, "b.example");
            write(&sni, "b.example.ca", &ca.cert_pem);
            // A stem that is no server name: the certificate's own names are served.
            w.write(&sni, "_wildcard");
        },
        |dir| format!("sni_path = \"{}\"", toml_path(&dir.join("sni"))),
    );
    let all = [("a", &a), ("b", &b), ("wild", &w)];
    assert_served(&t, Some("a.example"), &a, &all);
    assert_served(&t, Some("b.example"), &b, &all);
    assert_served(&t, Some("x.w.example"), &w, &all);
    // b.example.ca is sent after b's certificate.
    let c = TlsClient::connect(
        t.addr,
        &ClientOpts {
            sni: Some("b.example"),
            ..ClientOpts::default()
        },
    )
    .unwrap();
    let chain = c.stream.conn.peer_certificates().unwrap();
    assert_eq!(chain.len(), 2);
    assert!(
        chain[1] == ca.der,
        "the chain's second certificate is the CA"
    );
}

/// Quill with a TLS listener asking for client certificates of `ca` (`verify`, and
/// `client_crl` when `crl` is given).
fn start_mtls(server: &Cert, ca: &Ca, verify: &str, crl: Option<String>) -> Tls {
    start_tls(
        |dir| {
            server.write(dir, "server");
            write(dir, "ca.pem", &ca.cert_pem);
            if let Some(crl) = &crl {
                write(dir, "crl.pem", crl);
            }
        },
        |dir| {
            let mut t = format!(
                "{}\nclient_ca = \"{}\"\nclient_verify = \"{verify}\"",
                certs_list(dir, &[("server", "")]),
                toml_path(&dir.join("ca.pem"))
            );
            if crl.is_some() {
                t += &format!("\nclient_crl = [\"{}\"]", toml_path(&dir.join("crl.pem")));
            }
            t
        },
    )
}

/// A session with this client certificate (or none) carries bytes both ways.
fn session_with(t: &Tls, cert: Option<&Cert>) -> Result<(), String> {
    let opts = ClientOpts {
        sni: Some("mtls.example"),
        cert,
        ..ClientOpts::default()
    };
    // TLS 1.3: the client's handshake is done before the server has checked its certificate;
    // a refusal arrives as an alert on the first read.
    let mut c = TlsClient::connect(t.addr, &opts)?;
    let got = c.echo(b"hello\n")?;
    (got == b"hello\n")
        .then_some(())
        .ok_or_else(|| "wrong echo".into())
}

#[test]
fn tls_client_certificate_required_refuses_a_client_without_one() {
    let ca = Ca::new("client CA");
    let server = ca.server("server", &["mtls.example"], KeyAlg::EcdsaP256);
    let alice = ca.client("alice");
    let t = start_mtls(&server, &ca, "required", None);
    session_with(&t, Some(&alice)).unwrap_or_else(|e| panic!("alice refused: {e}"));
    let err = session_with(&t, None).expect_err("no certificate refused");
    assert!(
        err.to_lowercase().contains("certificaterequired") || err.contains("alert"),
        "{err}"
    );
    // A certificate of another CA is refused too.
    let stranger = Ca::new("other CA").client("mallory");
    session_with(&t, Some(&stranger)).expect_err("foreign certificate refused");
    session_with(&t, Some(&alice)).unwrap();
}

#[test]
fn tls_client_certificate_optional_lets_a_client_without_one_in() {
    let ca = Ca::new("client CA");
    let server = ca.server("server", &["mtls.example"], KeyAlg::EcdsaP256);
    let alice = ca.client("alice");
    let t = start_mtls(&server, &ca, "optional", None);
    session_with(&t, None).unwrap_or_else(|e| panic!("anonymous client refused: {e}"));
    session_with(&t, Some(&alice)).unwrap_or_else(|e| panic!("alice refused: {e}"));
    // Optional still verifies a certificate that is presented.
    let stranger = Ca::new("other CA").client("mallory");
    session_with(&t, Some(&stranger)).expect_err("foreign certificate refused");
}

#[test]
fn tls_revoked_client_certificate_is_refused() {
    let ca = Ca::new("client CA");
    let server = ca.server("server", &["mtls.example"], KeyAlg::EcdsaP256);
    let alice = ca.client("alice");
    let bob = ca.client("bob");
    let crl = ca.crl(&[&bob]);
    let t = start_mtls(&server, &ca, "required", Some(crl));
    session_with(&t, Some(&alice)).unwrap_or_else(|e| panic!("alice refused: {e}"));
    let err = session_with(&t, Some(&bob)).expect_err("bob's revoked certificate refused");
    assert!(
        err.to_lowercase().contains("revoked") || err.contains("alert"),
        "{err}"
    );
}

#[test]
fn tls_a_key_that_does_not_match_its_certificate_is_refused_naming_the_file() {
    let a = self_signed("a", &["a.example"], KeyAlg::EcdsaP256);
    let b = self_signed("b", &["b.example"], KeyAlg::EcdsaP256);
    let dir = scratch_dir();
    write(dir.path(), "a.crt", &a.cert_pem);
    let key = write(dir.path(), "wrong.key", &b.key_pem);
    let cfg = write(
        dir.path(),
        "quill.toml",
        &format!(
            "[[listener]]\nname = \"tls\"\nlisten = \"127.0.0.1:{}\"\nservers = [\"127.0.0.1:9\"]\n\
             [listener.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
            free_port(),
            toml_path(&dir.path().join("a.crt")),
            toml_path(&key)
        ),
    );
    let (code, out, err) = run_quill_output(&["check", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 2, "stdout:\n{out}\nstderr:\n{err}");
    let line = err
        .lines()
        .find(|l| l.contains("wrong.key"))
        .unwrap_or_else(|| panic!("no line names wrong.key:\n{err}"));
    assert!(line.contains("does not match"), "{line}");
}
