//! Unit tests of `tls = { ... }`, `[tls]` and `server_tls`: every key read, and every error one
//! line naming the file, the line and the key. Certificates are made here with rcgen.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;
use crate::tls::TlsVersion;

/// A directory with `site.pem`/`site.key` (a.example), `both.pem` (certificate then key),
/// `other.key` (another key), `ca.pem`, `cadir/` (two CA files and a README), `sni/` (Pen's
/// layout for b.example and c.example), `crl.pem`, `a.ocsp`, `keys.txt`.
struct Fixture {
    dir: tempfile::TempDir,
}

fn self_signed(names: &[&str]) -> (String, String) {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let ck = rcgen::generate_simple_self_signed(names).expect("rcgen");
    (ck.cert.pem(), ck.signing_key.serialize_pem())
}

/// A CRL revoking nothing, signed by a CA of its own (PEM).
fn empty_crl() -> String {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let issuer = rcgen::Issuer::new(params, key);
    rcgen::CertificateRevocationListParams {
        this_update: rcgen::date_time_ymd(2020, 1, 1),
        next_update: rcgen::date_time_ymd(2099, 1, 1),
        crl_number: rcgen::SerialNumber::from(1u64),
        issuing_distribution_point: None,
        revoked_certs: Vec::new(),
        key_identifier_method: rcgen::KeyIdMethod::Sha256,
    }
    .signed_by(&issuer)
    .expect("crl")
    .pem()
    .expect("pem")
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path();
        let (cert, key) = self_signed(&["a.example"]);
        std::fs::write(p.join("site.pem"), &cert).unwrap();
        std::fs::write(p.join("site.key"), &key).unwrap();
        std::fs::write(p.join("both.pem"), format!("{cert}{key}")).unwrap();
        std::fs::write(p.join("other.key"), self_signed(&["x.example"]).1).unwrap();
        std::fs::write(p.join("ca.pem"), self_signed(&["ca.example"]).0).unwrap();
        std::fs::create_dir(p.join("cadir")).unwrap();
        std::fs::write(p.join("cadir/one.pem"), self_signed(&["one.ca"]).0).unwrap();
        std::fs::write(p.join("cadir/two.0"), self_signed(&["two.ca"]).0).unwrap();
        std::fs::write(p.join("cadir/README"), "not a certificate\n").unwrap();
        std::fs::create_dir(p.join("sni")).unwrap();
        for name in ["b.example", "c.example"] {
            let (c, k) = self_signed(&[name]);
            std::fs::write(p.join(format!("sni/{name}.crt")), c).unwrap();
            std::fs::write(p.join(format!("sni/{name}.key")), k).unwrap();
        }
        std::fs::write(p.join("sni/b.example.ca"), self_signed(&["ca.b"]).0).unwrap();
        std::fs::write(p.join("crl.pem"), empty_crl()).unwrap();
        std::fs::write(p.join("a.ocsp"), [0x30u8, 0x03, 0x0a, 0x01, 0x00]).unwrap();
        std::fs::write(p.join("keys.txt"), "x\n").unwrap();
        Fixture { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The configuration file's name: relative files are read beside it.
    fn origin(&self) -> String {
        self.path("q.toml").display().to_string()
    }

    fn load(&self, text: &str) -> Result<Config, ConfigError> {
        from_toml(&self.origin(), text, &TuningPatch::default())
    }

    /// A TCP listener (or HTTP with `http`) with `tls` as its table's body.
    fn listener(&self, tls: &str) -> Result<Config, ConfigError> {
        self.load(&format!("{LISTENER}[listener.tls]\n{tls}"))
    }

    fn tls(&self, tls: &str) -> crate::tls::TlsSettings {
        match self.listener(tls) {
            Ok(c) => c.listeners[0].tls().cloned().expect("tls"),
            Err(e) => panic!("{tls}: {}", e.message),
        }
    }

    /// The error for `text`: one line, `q.toml:LINE: ` then containing every needle.
    fn refused(&self, text: &str, line: usize, needles: &[&str]) {
        let e = self.load(text).expect_err("refused").message;
        let prefix = format!("{}:{line}: ", self.origin());
        assert!(e.starts_with(&prefix), "{e:?} should start with {prefix:?}");
        for n in needles {
            assert!(e.contains(n), "{e:?} should contain {n:?}");
        }
        assert!(!e.contains('\n'), "one line: {e:?}");
    }
}

/// Lines 1 to 5; a `[listener.tls]` header is line 6, its first key line 7.
const LISTENER: &str = "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:8443\"\n\
                        protocol = \"http\"\nservers = [\"127.0.0.1:8080\"]\n";

fn file_of(s: &crate::tls::FileData) -> &Path {
    &s.path
}

#[test]
fn cert_and_key_are_read_relative_to_the_file_with_every_default() {
    let f = Fixture::new();
    let s = f.tls("cert = \"site.pem\"\nkey = \"site.key\"\n");
    assert_eq!(s.certs.len(), 1);
    assert_eq!(file_of(&s.certs[0].cert), f.path("site.pem"));
    assert_eq!(file_of(&s.certs[0].key), f.path("site.key"));
    assert_eq!(
        &*s.certs[0].cert.bytes,
        std::fs::read(f.path("site.pem")).unwrap().as_slice()
    );
    let defaults = crate::tls::TlsSettings::new(s.certs.clone());
    assert_eq!(s, defaults);
    // The inline form is the same table.
    let inline = f
        .load(&format!(
            "{LISTENER}tls = {{ cert = \"site.pem\", key = \"site.key\" }}\n"
        ))
        .unwrap();
    assert_eq!(inline.listeners[0].tls(), Some(&s));
}

#[test]
fn the_key_defaults_to_the_certificate_file() {
    let f = Fixture::new();
    let s = f.tls("cert = \"both.pem\"\n");
    assert_eq!(file_of(&s.certs[0].key), f.path("both.pem"));
}

#[test]
fn every_setting_key_is_read() {
    let f = Fixture::new();
    let s = f.tls(
        "cert = \"site.pem\"\nkey = \"site.key\"\nmin_version = \"1.3\"\n\
         ciphers = [\"TLS_AES_256_GCM_SHA384\", \"TLS13_AES_128_GCM_SHA256\"]\n\
         server_cipher_order = true\nalpn = [\"h2x\", \"http/1.1\"]\nstrict_sni = true\n\
         handshake_timeout = \"4s\"\nmax_handshakes = 7\ntickets = false\n",
    );
    assert_eq!(s.min_version, TlsVersion::V1_3);
    assert_eq!(
        s.ciphers,
        ["TLS13_AES_256_GCM_SHA384", "TLS13_AES_128_GCM_SHA256"]
    );
    assert!(s.server_cipher_order);
    assert_eq!(
        s.alpn,
        Some(vec!["h2x".to_string(), "http/1.1".to_string()])
    );
    assert!(s.strict_sni);
    assert_eq!(s.handshake_timeout, Duration::from_secs(4));
    assert_eq!(s.max_handshakes, 7);
    assert!(!s.tickets);
    let s = f.tls("cert = \"both.pem\"\nhandshake_timeout = 300\nmax_handshakes = 65536\n");
    assert_eq!(s.handshake_timeout, Duration::from_secs(300));
    assert_eq!(s.max_handshakes, 65536);
}

#[test]
fn openssl_suite_names_are_kept_as_rustls_names() {
    let f = Fixture::new();
    let s = f.tls(
        "cert = \"both.pem\"\nciphers = [\"ECDHE-ECDSA-AES128-GCM-SHA256\", \
         \"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256\", \"TLS13_CHACHA20_POLY1305_SHA256\"]\n",
    );
    assert_eq!(
        s.ciphers,
        [
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            "TLS13_CHACHA20_POLY1305_SHA256"
        ]
    );
}

#[test]
fn a_list_of_certificates_with_names_ocsp_and_a_default() {
    let f = Fixture::new();
    let s = f.tls(
        "certs = [ { cert = \"site.pem\", key = \"site.key\", ocsp = \"a.ocsp\", names = [\"A.example\", \"*.a.example\"] },\n\
         { cert = \"both.pem\", default = true } ]\n",
    );
    assert_eq!(s.certs.len(), 2);
    assert_eq!(s.certs[0].names, ["a.example", "*.a.example"]);
    assert_eq!(
        s.certs[0].ocsp.as_ref().map(file_of),
        Some(f.path("a.ocsp").as_path())
    );
    assert!(!s.certs[0].default);
    assert!(s.certs[1].default);
    assert_eq!(file_of(&s.certs[1].key), f.path("both.pem"));
}

#[test]
fn sni_path_reads_pens_layout_after_the_listed_certificates() {
    let f = Fixture::new();
    let s = f.tls("cert = \"both.pem\"\nsni_path = \"sni\"\n");
    assert_eq!(s.sni_path, Some(f.path("sni")));
    let names: Vec<_> = s.certs.iter().map(|c| c.names.clone()).collect();
    assert_eq!(
        names,
        [
            vec![],
            vec!["b.example".to_string()],
            vec!["c.example".to_string()]
        ]
    );
    // b.example.ca is appended to b.example.crt as its chain.
    let b = String::from_utf8_lossy(&s.certs[1].cert.bytes).to_string();
    assert_eq!(b.matches("BEGIN CERTIFICATE").count(), 2);
    // sni_path alone is enough.
    assert_eq!(f.tls("sni_path = \"sni\"\n").certs.len(), 2);
}

#[test]
fn client_certificates_from_a_ca_file_a_directory_and_crls() {
    let f = Fixture::new();
    let base = "cert = \"both.pem\"\n";
    // A CA without client_verify asks for certificates without requiring them (Pen's -G).
    let s = f.tls(&format!("{base}client_ca = \"ca.pem\"\n"));
    let auth = s.client_auth.expect("client auth");
    assert!(!auth.required);
    assert_eq!(auth.ca.len(), 1);
    let s = f.tls(&format!(
        "{base}client_ca = \"ca.pem\"\nclient_ca_dir = \"cadir\"\nclient_crl = [\"crl.pem\"]\n\
         client_verify = \"required\"\n"
    ));
    let auth = s.client_auth.expect("client auth");
    assert!(auth.required);
    // The CA file, then the directory's two certificate files (the README is left out).
    assert_eq!(auth.ca.len(), 3);
    assert_eq!(auth.crls.len(), 1);
    let s = f.tls(&format!(
        "{base}client_ca = \"ca.pem\"\nclient_verify = \"none\"\n"
    ));
    assert_eq!(s.client_auth, None);
}

#[test]
fn ticket_keys_name_a_file_read_at_load() {
    let f = Fixture::new();
    // The file is read and handed to the ticket builder, whose error names it.
    let e = f
        .listener("cert = \"both.pem\"\nticket_keys = \"keys.txt\"\n")
        .map(|c| c.listeners[0].tls().cloned())
        .map_err(|e| e.message);
    match e {
        Ok(Some(s)) => assert_eq!(s.ticket_keys.map(|k| k.path), Some(f.path("keys.txt"))),
        Ok(None) => panic!("no tls"),
        Err(e) => assert!(e.contains("keys.txt"), "{e}"),
    }
}

#[test]
fn the_tls_section_gives_defaults_that_a_listener_overrides() {
    let f = Fixture::new();
    let c = f
        .load(&format!(
            "[tls]\nmin_version = \"1.3\"\nhandshake_timeout = \"3s\"\nclient_ca = \"ca.pem\"\n\
             {LISTENER}tls = {{ cert = \"both.pem\", handshake_timeout = \"5s\" }}\n\
             [[listener]]\nname = \"b\"\nlisten = \"127.0.0.1:8444\"\nservers = [\"127.0.0.1:1\"]\n\
             tls = {{ cert = \"both.pem\", client_verify = \"none\" }}\n\
             [[listener]]\nname = \"plain\"\nlisten = \"127.0.0.1:8445\"\nservers = [\"127.0.0.1:1\"]\n"
        ))
        .unwrap();
    let web = c.listeners[0].tls().unwrap();
    assert_eq!(web.min_version, TlsVersion::V1_3);
    assert_eq!(web.handshake_timeout, Duration::from_secs(5));
    assert!(web.client_auth.is_some());
    let b = c.listeners[1].tls().unwrap();
    assert_eq!(b.handshake_timeout, Duration::from_secs(3));
    assert_eq!(b.client_auth, None);
    // [tls] alone turns TLS on nowhere.
    assert_eq!(c.listeners[2].tls(), None);
}

#[test]
fn server_tls_on_a_pool_and_a_listener() {
    let f = Fixture::new();
    let c = f
        .load(&format!(
            "{LISTENER}server_tls = {{ verify = false }}\n\
             [[pool]]\nname = \"secure\"\nservers = [\"127.0.0.1:9443\"]\n\
             server_tls = {{ verify = true, ca = \"ca.pem\", sni = \"Backend.example\", cert = \"site.pem\", key = \"site.key\", alpn = [\"http/1.1\"] }}\n\
             [[pool]]\nname = \"one\"\nservers = [\"127.0.0.1:9444\"]\nserver_tls = {{ cert = \"both.pem\" }}\n"
        ))
        .unwrap();
    let l = c.listeners[0].server_tls.as_ref().unwrap();
    assert!(!l.verify);
    assert_eq!(l.ca, None);
    let p = c.pools[0].server_tls.as_ref().unwrap();
    assert!(p.verify);
    assert_eq!(p.ca.as_ref().map(file_of), Some(f.path("ca.pem").as_path()));
    assert_eq!(p.sni.as_deref(), Some("backend.example"));
    assert_eq!(p.alpn, ["http/1.1"]);
    assert_eq!(
        p.cert.as_ref().map(|c| c.key.path.clone()),
        Some(f.path("site.key"))
    );
    let one = c.pools[1].server_tls.as_ref().unwrap();
    assert_eq!(
        one.cert.as_ref().map(|c| c.key.path.clone()),
        Some(f.path("both.pem"))
    );
    assert!(one.verify, "verification is on by default");
}

#[test]
fn every_bad_tls_value_names_its_file_line_and_key() {
    let f = Fixture::new();
    let with = |tls: &str| format!("{LISTENER}[listener.tls]\n{tls}");
    let cases: &[(&str, usize, &[&str])] = &[
        ("cert = \"missing.pem\"\n", 7, &["tls: cert: ", "missing.pem", "cannot read"]),
        ("cert = \"site.pem\"\nkey = \"nope.key\"\n", 8, &["tls: key: ", "nope.key"]),
        ("cert = \"site.pem\"\nkey = \"other.key\"\n", 6, &["tls: ", "other.key", "does not match"]),
        ("cert = \"ca.pem\"\n", 6, &["tls: ", "ca.pem", "private key"]),
        ("key = \"site.key\"\n", 7, &["tls: key: needs cert"]),
        ("cert = \"both.pem\"\ncerts = [{ cert = \"both.pem\" }]\n", 8, &["tls: certs: give cert"]),
        ("certs = [{ key = \"site.key\" }]\n", 7, &["tls: certs[0]: needs cert"]),
        ("certs = [{ cert = \"both.pem\", colour = 1 }]\n", 7, &["tls: certs[0]: unknown key `colour`"]),
        ("certs = [{ cert = \"both.pem\", default = true }, { cert = \"both.pem\", default = true }]\n", 7, &["more than one"]),
        ("certs = [{ cert = \"both.pem\", names = [\"a b\"] }]\n", 7, &["names", "'a b' is not a server name"]),
        ("certs = \"both.pem\"\n", 7, &["tls: certs: expected a list of tables"]),
        ("min_version = \"1.3\"\n", 6, &["tls: no certificate"]),
        ("sni_path = \"nowhere\"\n", 7, &["tls: sni_path: ", "nowhere"]),
        ("cert = \"both.pem\"\nmin_version = \"1.1\"\n", 8, &["tls: min_version: '1.1' is not supported: rustls speaks TLS 1.2 and 1.3"]),
        ("cert = \"both.pem\"\nmin_version = \"2\"\n", 8, &["tls: min_version: '2' is not \"1.2\" or \"1.3\""]),
        ("cert = \"both.pem\"\nciphers = [\"RC4-MD5\"]\n", 8, &["tls: ciphers: unknown cipher suite 'RC4-MD5'"]),
        ("cert = \"both.pem\"\nciphers = \"HIGH:!aNULL\"\n", 8, &["tls: ciphers: 'HIGH:!aNULL' is an OpenSSL cipher string: list suite names instead"]),
        ("cert = \"both.pem\"\nciphers = [\"HIGH:!aNULL\"]\n", 8, &["OpenSSL cipher string"]),
        ("cert = \"both.pem\"\nciphers = []\n", 8, &["tls: ciphers: an empty list"]),
        ("cert = \"both.pem\"\nmin_version = \"1.3\"\nciphers = [\"ECDHE-RSA-AES128-GCM-SHA256\"]\n", 6, &["no TLS 1.3 suite"]),
        ("cert = \"both.pem\"\nserver_cipher_order = \"yes\"\n", 8, &["tls: server_cipher_order: \"yes\" is not true or false"]),
        ("cert = \"both.pem\"\nalpn = \"http/1.1\"\n", 8, &["tls: alpn: \"http/1.1\" is not a list"]),
        ("cert = \"both.pem\"\nstrict_sni = 1\n", 8, &["tls: strict_sni: 1 is not true or false"]),
        ("cert = \"both.pem\"\nhandshake_timeout = \"0s\"\n", 8, &["tls: handshake_timeout: must be more than 0 and at most 5m"]),
        ("cert = \"both.pem\"\nhandshake_timeout = \"6m\"\n", 8, &["at most 5m"]),
        ("cert = \"both.pem\"\nhandshake_timeout = \"soon\"\n", 8, &["tls: handshake_timeout: ", "soon"]),
        ("cert = \"both.pem\"\nmax_handshakes = 0\n", 8, &["tls: max_handshakes: 0 is out of range (1 to 65536)"]),
        ("cert = \"both.pem\"\nmax_handshakes = 65537\n", 8, &["65537 is out of range"]),
        ("cert = \"both.pem\"\nmax_handshakes_per_source = 0\n", 8, &["tls: max_handshakes_per_source: 0 is out of range (1 to 65536)"]),
        ("cert = \"both.pem\"\nclient_ca = \"site.key\"\n", 8, &["tls: client_ca: ", "site.key", "no PEM certificate"]),
        ("cert = \"both.pem\"\nclient_ca_dir = \"sni/b.example.key\"\n", 8, &["tls: client_ca_dir: ", "cannot read"]),
        ("cert = \"both.pem\"\nclient_crl = [\"gone.pem\"]\n", 8, &["tls: client_crl: ", "gone.pem"]),
        ("cert = \"both.pem\"\nclient_verify = \"always\"\n", 8, &["tls: client_verify: 'always' is not none, optional or required"]),
        ("cert = \"both.pem\"\nclient_verify = \"required\"\n", 8, &["tls: client_verify: needs client_ca or client_ca_dir"]),
        ("cert = \"both.pem\"\nticket_keys = \"gone.txt\"\n", 8, &["tls: ticket_keys: ", "gone.txt"]),
        ("cert = \"both.pem\"\ntickets = \"no\"\n", 8, &["tls: tickets: "]),
        ("cert = \"both.pem\"\ncolour = \"blue\"\n", 8, &["unknown field `colour`"]),
    ];
    for (tls, line, needles) in cases {
        f.refused(&with(tls), *line, needles);
    }
    // [tls] holds no certificates.
    f.refused(
        &format!("[tls]\ncert = \"both.pem\"\n{LISTENER}"),
        2,
        &["tls: cert: certificates go in a listener's tls table"],
    );
    f.refused(
        &format!("[tls]\nmax_handshakes = -1\n{LISTENER}"),
        2,
        &["tls: max_handshakes"],
    );
    // A pool has no tls of its own: only server_tls.
    f.refused(
        &format!("{LISTENER}[[pool]]\nname = \"p\"\nservers = [\"127.0.0.1:1\"]\ntls = {{ cert = \"both.pem\" }}\n"),
        9,
        &["unknown field `tls`"],
    );
}

#[test]
fn every_bad_server_tls_value_names_its_file_line_and_key() {
    let f = Fixture::new();
    let with = |t: &str| format!("{LISTENER}server_tls = {{ {t} }}\n");
    let cases: &[(&str, &[&str])] = &[
        (
            "verify = \"yes\"",
            &["server_tls: verify: \"yes\" is not true or false"],
        ),
        (
            "ca = \"gone.pem\"",
            &["server_tls: ca: ", "gone.pem", "cannot read"],
        ),
        (
            "ca = \"site.key\"",
            &["server_tls: ca: ", "site.key", "no PEM certificate"],
        ),
        (
            "sni = \"a b\"",
            &["server_tls: sni: 'a b' is not a server name"],
        ),
        ("sni = \"*.a.example\"", &["server_tls: sni: "]),
        ("key = \"site.key\"", &["server_tls: key: needs cert"]),
        (
            "cert = \"site.pem\"",
            &["server_tls: key: ", "site.pem", "no usable private key"],
        ),
        (
            "cert = \"site.key\", key = \"site.key\"",
            &["server_tls: cert: ", "no PEM certificate"],
        ),
        ("alpn = [1]", &["server_tls: alpn: "]),
        ("colour = 1", &["unknown field `colour`"]),
    ];
    for (t, needles) in cases {
        f.refused(&with(t), 6, needles);
    }
}

/// A control line parsed and applied to the only listener.
fn apply_line(c: &mut Config, line: &str) -> Result<(), String> {
    let cmd = crate::command::parse(line).map_err(|e| e.0)?;
    c.apply(None, &cmd).map_err(|e| e.message)
}

#[test]
fn pens_ssl_commands_change_the_listeners_tls() {
    use crate::command::{parse_request, Action, Command, Needs, SslCommand};
    let f = Fixture::new();
    let mut c = f
        .listener("cert = \"site.pem\"\nkey = \"site.key\"\n")
        .unwrap();
    apply_line(
        &mut c,
        "ssl_ciphers TLS_AES_128_GCM_SHA256:ECDHE-ECDSA-AES128-GCM-SHA256",
    )
    .unwrap();
    apply_line(&mut c, "ssl_option cipher_server_preference").unwrap();
    for already in ["no_sslv2", "no_sslv3", "no_tlsv1", "no_tlsv1.1"] {
        apply_line(&mut c, &format!("ssl_option {already}")).unwrap();
    }
    apply_line(&mut c, "ssl_client_renegotiation_interval 60").unwrap();
    let before = c.clone();
    // Only a TLS 1.2 suite and TLS 1.3 only: nothing left to offer, refused, nothing changed.
    apply_line(&mut c, "ssl_ciphers ECDHE-ECDSA-AES128-GCM-SHA256").unwrap();
    let e = apply_line(&mut c, "ssl_option no_tlsv1.2").unwrap_err();
    assert!(e.contains("no TLS 1.3 suite"), "{e}");
    c = before;
    apply_line(&mut c, "ssl_option no_tlsv1.2").unwrap();
    let sni = f.path("sni").display().to_string();
    apply_line(&mut c, &format!("ssl_sni_path {sni}")).unwrap();
    // Twice (a command file on every reload): the directory's certificates are there once.
    apply_line(&mut c, &format!("ssl_sni_path {sni}")).unwrap();
    apply_line(
        &mut c,
        &format!("ssl_ocsp_response {}", f.path("a.ocsp").display()),
    )
    .unwrap();
    let t = c.listeners[0].tls().unwrap();
    assert_eq!(
        t.ciphers,
        [
            "TLS13_AES_128_GCM_SHA256",
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
        ]
    );
    assert!(t.server_cipher_order);
    assert_eq!(t.min_version, TlsVersion::V1_3);
    assert_eq!(t.certs.len(), 3);
    assert_eq!(t.sni_path, Some(f.path("sni")));
    assert_eq!(
        t.certs[0].ocsp.as_ref().map(file_of),
        Some(f.path("a.ocsp").as_path())
    );
    // Files stay on the Unix socket; the others need admin.
    for (line, unix) in [
        ("ssl_sni_path /x", true),
        ("ssl_ocsp_response /x", true),
        ("ssl_ciphers TLS13_AES_128_GCM_SHA256", false),
    ] {
        let Action::Set(cmd) = parse_request(line).unwrap().action else {
            panic!("{line}")
        };
        assert_eq!(cmd.needs() == Needs::UnixSocket, unix, "{line}");
    }
    assert_eq!(
        crate::command::parse("ssl_option no_tlsv1.2").unwrap(),
        Command::Ssl(SslCommand::NoTls12)
    );
}

#[test]
fn bad_ssl_commands_are_refused_in_one_line() {
    let f = Fixture::new();
    let mut c = f.listener("cert = \"both.pem\"\n").unwrap();
    let cases = [
        ("ssl_ciphers HIGH:!aNULL", "OpenSSL cipher string"),
        ("ssl_ciphers RC4-MD5", "unknown cipher suite 'RC4-MD5'"),
        ("ssl_ciphers", "ssl_ciphers needs a value"),
        (
            "ssl_option no_compression",
            "ssl_option: 'no_compression' is not one Quill knows",
        ),
        ("ssl_sni_path /nonexistent/dir", "/nonexistent/dir"),
        (
            "ssl_ocsp_response /nonexistent/a.ocsp",
            "/nonexistent/a.ocsp",
        ),
        ("ssl_client_renegotiation_interval soon", "is not a number"),
    ];
    for (line, needle) in cases {
        let e = apply_line(&mut c, line).unwrap_err();
        assert!(e.contains(needle), "{line}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
    let mut plain = from_toml("q.toml", LISTENER, &TuningPatch::default()).unwrap();
    let e = apply_line(&mut plain, "ssl_option no_tlsv1.2").unwrap_err();
    assert!(
        e.starts_with("ssl_option: listener 'web': no TLS termination here"),
        "{e}"
    );
}

/// `write`'s commands, applied over the same TOML file (what a restart or a reload does),
/// give back the running configuration, TLS settings changed at run time included.
#[test]
fn written_commands_keep_the_tls_settings_changed_at_run_time() {
    let f = Fixture::new();
    let text = format!(
        "{LISTENER}[listener.tls]\ncerts = [{{ cert = \"site.pem\", key = \"site.key\", default = true }}]\n\
         [[listener]]\nname = \"tcp\"\nlisten = \"127.0.0.1:8444\"\nservers = [\"127.0.0.1:1\"]\n\
         tls = {{ cert = \"both.pem\", ciphers = [\"TLS13_AES_256_GCM_SHA384\"] }}\n"
    );
    let mut running = f.load(&text).unwrap();
    let sni = f.path("sni").display().to_string();
    let ocsp = f.path("a.ocsp").display().to_string();
    for line in [
        "ssl_ciphers TLS_AES_128_GCM_SHA256:ECDHE-ECDSA-AES128-GCM-SHA256".to_string(),
        "ssl_option no_tlsv1.2".into(),
        "ssl_option cipher_server_preference".into(),
        format!("ssl_sni_path {sni}"),
        format!("ssl_ocsp_response {ocsp}"),
    ] {
        let cmd = crate::command::parse(&line).unwrap();
        running.apply(Some("web"), &cmd).unwrap();
    }
    let written = running.to_commands();
    assert!(written.contains("# listener web: TLS"), "{written}");
    assert!(
        written.contains(
            "listener web ssl_ciphers TLS13_AES_128_GCM_SHA256:TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256\n"
        ),
        "{written}"
    );
    assert!(
        written.contains("listener tcp ssl_ciphers TLS13_AES_256_GCM_SHA384\n"),
        "{written}"
    );
    let file = f.path("saved.cmds");
    std::fs::write(&file, &written).unwrap();
    // Twice: a reload applies the file again over the same source.
    for _ in 0..2 {
        let mut restarted = f.load(&text).unwrap();
        restarted.apply_file(&file, 0).unwrap();
        restarted.validate().unwrap();
        assert_eq!(restarted, running, "{written}");
    }
}
