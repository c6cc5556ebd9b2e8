//! Unit tests of the certificate store: certificates made by rcgen in the test (RSA keys by
//! `openssl genpkey`: rcgen here cannot generate RSA), handshakes run in memory between a rustls
//! client and a `ServerConfig` over this store, bytes passed through `Vec`s (no sockets).

use std::path::Path;
use std::sync::{Arc, OnceLock};

use rcgen::{CertificateParams, DnType, Issuer, KeyPair};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, ServerConfig, ServerConnection,
};

use super::*;
use crate::tls::{CertFiles, FileData, TlsSettings};

/// A key type for a test certificate.
#[derive(Clone, Copy)]
enum Alg {
    P256,
    Ed25519,
    Rsa,
}

fn rsa_pem() -> &'static str {
    static KEY: OnceLock<String> = OnceLock::new();
    KEY.get_or_init(|| {
        let out = std::process::Command::new("openssl")
            .args([
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
            ])
            .output()
            .expect("openssl genpkey");
        assert!(out.status.success(), "openssl genpkey failed");
        String::from_utf8(out.stdout).expect("PEM")
    })
}

fn key_pair(alg: Alg) -> KeyPair {
    match alg {
        Alg::P256 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap(),
        Alg::Ed25519 => KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap(),
        Alg::Rsa => KeyPair::from_pem(rsa_pem()).unwrap(),
    }
}

/// A self-signed certificate for `names` (SANs), its PEM files in memory.
struct Made {
    cert_pem: String,
    key_pem: String,
    der: CertificateDer<'static>,
}

fn make(names: &[&str], alg: Alg) -> Made {
    make_with(
        CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap(),
        alg,
    )
}

fn make_with(params: CertificateParams, alg: Alg) -> Made {
    let key = key_pair(alg);
    let cert = params.self_signed(&key).unwrap();
    Made {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        der: cert.der().clone(),
    }
}

fn data(path: &str, text: &str) -> FileData {
    FileData {
        path: path.into(),
        bytes: text.as_bytes().into(),
    }
}

fn files(m: &Made, tag: &str) -> CertFiles {
    CertFiles {
        cert: data(&format!("{tag}.crt"), &m.cert_pem),
        key: data(&format!("{tag}.key"), &m.key_pem),
        ocsp: None,
        names: Vec::new(),
        default: false,
    }
}

fn store(certs: Vec<CertFiles>, strict: bool) -> Arc<CertStore> {
    let mut settings = TlsSettings::new(certs);
    settings.strict_sni = strict;
    Arc::new(CertStore::build(&settings).unwrap())
}

/// Accepts any server certificate; offers the signature schemes it is given.
#[derive(Debug)]
struct AnyCert(Vec<rustls::SignatureScheme>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.clone()
    }
}

const ALL_SCHEMES: &[rustls::SignatureScheme] = &SCHEMES;
const RSA_ONLY: &[rustls::SignatureScheme] = &[
    rustls::SignatureScheme::RSA_PSS_SHA256,
    rustls::SignatureScheme::RSA_PKCS1_SHA256,
];

/// Runs a handshake in memory: the certificate the server sent, or the error.
fn handshake(
    store: &Arc<CertStore>,
    sni: Option<&str>,
    schemes: &[rustls::SignatureScheme],
) -> Result<CertificateDer<'static>, String> {
    handshake_with(store, None, sni, schemes, None)
}

/// [`handshake`] with a client-certificate verifier on the server and a client certificate
/// (certificate PEM, key PEM) on the client. Ends with one record of application data from the
/// client: a TLS 1.3 server refuses a client certificate after the client's handshake is done.
fn handshake_with(
    store: &Arc<CertStore>,
    verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    sni: Option<&str>,
    schemes: &[rustls::SignatureScheme],
    client_cert: Option<&Made>,
) -> Result<CertificateDer<'static>, String> {
    let provider = Arc::new(crate::tls::provider());
    let server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let server = match verifier {
        Some(v) => server.with_client_cert_verifier(v),
        None => server.with_no_client_auth(),
    }
    .with_cert_resolver(store.clone());
    let client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(schemes.to_vec())));
    let mut client = match client_cert {
        Some(m) => {
            let key =
                rustls::pki_types::PrivateKeyDer::from_pem_slice(m.key_pem.as_bytes()).unwrap();
            client
                .with_client_auth_cert(vec![m.der.clone()], key)
                .unwrap()
        }
        None => client.with_no_client_auth(),
    };
    client.enable_sni = sni.is_some();
    let name = ServerName::try_from(sni.unwrap_or("unused.invalid").to_owned()).unwrap();
    let mut c = ClientConnection::new(Arc::new(client), name).unwrap();
    let mut s = ServerConnection::new(Arc::new(server)).unwrap();
    for _ in 0..10 {
        pass(&mut c, &mut s).map_err(|e| format!("server: {e}"))?;
        pass(&mut s, &mut c).map_err(|e| format!("client: {e}"))?;
        if !c.is_handshaking() && !s.is_handshaking() {
            use std::io::Write as _;
            c.writer().write_all(b"ping").unwrap();
            pass(&mut c, &mut s).map_err(|e| format!("server: {e}"))?;
            return Ok(c.peer_certificates().unwrap()[0].clone().into_owned());
        }
    }
    Err("handshake did not finish".into())
}

/// Moves every pending TLS byte from `from` to `to` and has `to` process them.
fn pass<A, B, DA, DB>(from: &mut A, to: &mut B) -> Result<(), rustls::Error>
where
    A: std::ops::DerefMut<Target = rustls::ConnectionCommon<DA>>,
    B: std::ops::DerefMut<Target = rustls::ConnectionCommon<DB>>,
{
    let mut buf = Vec::new();
    while from.wants_write() {
        from.write_tls(&mut buf).unwrap();
    }
    let mut rd = &buf[..];
    while !rd.is_empty() {
        to.read_tls(&mut rd).unwrap();
        to.process_new_packets()?;
    }
    Ok(())
}

#[test]
fn an_exact_name_picks_its_certificate() {
    let a = make(&["a.example"], Alg::P256);
    let b = make(&["b.example"], Alg::P256);
    let s = store(vec![files(&a, "a"), files(&b, "b")], false);
    assert_eq!(
        handshake(&s, Some("b.example"), ALL_SCHEMES).unwrap(),
        b.der
    );
    assert_eq!(
        handshake(&s, Some("a.example"), ALL_SCHEMES).unwrap(),
        a.der
    );
}

#[test]
fn a_wildcard_answers_one_label_below_only() {
    let a = make(&["a.example"], Alg::P256);
    let w = make(&["*.w.example"], Alg::P256);
    let s = store(vec![files(&a, "a"), files(&w, "w")], false);
    assert_eq!(
        handshake(&s, Some("www.w.example"), ALL_SCHEMES).unwrap(),
        w.der
    );
    // Neither the bare domain nor two labels below: the default (the first) answers.
    assert_eq!(
        handshake(&s, Some("w.example"), ALL_SCHEMES).unwrap(),
        a.der
    );
    assert_eq!(
        handshake(&s, Some("a.b.w.example"), ALL_SCHEMES).unwrap(),
        a.der
    );
}

#[test]
fn an_exact_name_wins_over_a_wildcard() {
    let w = make(&["*.example.org"], Alg::P256);
    let e = make(&["www.example.org"], Alg::P256);
    let s = store(vec![files(&w, "w"), files(&e, "e")], false);
    assert_eq!(
        handshake(&s, Some("www.example.org"), ALL_SCHEMES).unwrap(),
        e.der
    );
    assert_eq!(
        handshake(&s, Some("api.example.org"), ALL_SCHEMES).unwrap(),
        w.der
    );
}

#[test]
fn an_unknown_name_or_no_name_gets_the_default() {
    let a = make(&["a.example"], Alg::P256);
    let b = make(&["b.example"], Alg::P256);
    let s = store(vec![files(&a, "a"), files(&b, "b")], false);
    assert_eq!(
        handshake(&s, Some("other.example"), ALL_SCHEMES).unwrap(),
        a.der
    );
    assert_eq!(handshake(&s, None, ALL_SCHEMES).unwrap(), a.der);
    let mut marked = files(&b, "b");
    marked.default = true;
    let s = store(vec![files(&a, "a"), marked], false);
    assert_eq!(
        handshake(&s, Some("other.example"), ALL_SCHEMES).unwrap(),
        b.der
    );
    assert_eq!(handshake(&s, None, ALL_SCHEMES).unwrap(), b.der);
}

#[test]
fn strict_sni_refuses_an_unknown_name_and_no_name() {
    let a = make(&["a.example"], Alg::P256);
    let s = store(vec![files(&a, "a")], true);
    assert_eq!(
        handshake(&s, Some("a.example"), ALL_SCHEMES).unwrap(),
        a.der
    );
    let err = handshake(&s, Some("other.example"), ALL_SCHEMES).unwrap_err();
    assert!(err.starts_with("server:"), "{err}");
    assert!(handshake(&s, None, ALL_SCHEMES).is_err());
}

#[test]
fn names_match_whatever_their_case_and_a_trailing_dot() {
    let a = make(&["A.Example"], Alg::P256);
    let w = make(&["*.W.example"], Alg::P256);
    let s = store(vec![files(&a, "a"), files(&w, "w")], true);
    assert_eq!(
        handshake(&s, Some("a.EXAMPLE"), ALL_SCHEMES).unwrap(),
        a.der
    );
    assert_eq!(s.lookup("A.EXAMPLE."), Some(&[0][..]));
    assert_eq!(s.lookup("X.w.EXAMPLE."), Some(&[1][..]));
    assert_eq!(s.lookup("w.example"), None);
    assert_eq!(s.lookup(&"a".repeat(300)), None);
    assert_eq!(s.served()[0].names, ["a.example"]);
}

#[test]
fn ecdsa_or_rsa_for_one_name_by_the_schemes_the_client_offers() {
    let rsa = make(&["both.example"], Alg::Rsa);
    let ec = make(&["both.example"], Alg::P256);
    // RSA first in the configuration: ECDSA is preferred all the same.
    let s = store(vec![files(&rsa, "rsa"), files(&ec, "ec")], false);
    assert_eq!(
        handshake(&s, Some("both.example"), ALL_SCHEMES).unwrap(),
        ec.der
    );
    assert_eq!(
        handshake(&s, Some("both.example"), RSA_ONLY).unwrap(),
        rsa.der
    );
    // Also as the default group (no SNI), the two sharing their names.
    assert_eq!(handshake(&s, None, RSA_ONLY).unwrap(), rsa.der);
    assert_eq!(handshake(&s, None, ALL_SCHEMES).unwrap(), ec.der);
    assert_eq!(s.served()[0].kind, KeyKind::Rsa);
    assert_eq!(s.served()[1].kind, KeyKind::Ecdsa);
}

#[test]
fn ed25519_is_served_to_a_client_that_offers_it() {
    let ed = make(&["ed.example"], Alg::Ed25519);
    let rsa = make(&["ed.example"], Alg::Rsa);
    let s = store(vec![files(&rsa, "rsa"), files(&ed, "ed")], false);
    let ed_only = [rustls::SignatureScheme::ED25519];
    assert_eq!(handshake(&s, Some("ed.example"), &ed_only).unwrap(), ed.der);
    assert_eq!(
        handshake(&s, Some("ed.example"), RSA_ONLY).unwrap(),
        rsa.der
    );
}

#[test]
fn configured_names_replace_the_certificates_own() {
    let a = make(&["a.example"], Alg::P256);
    let mut f = files(&a, "a");
    f.names = vec!["Served.Example.".into(), "*.x.example".into()];
    let s = store(vec![f], true);
    assert_eq!(s.served()[0].names, ["served.example", "*.x.example"]);
    assert!(handshake(&s, Some("a.example"), ALL_SCHEMES).is_err());
    assert_eq!(
        handshake(&s, Some("y.x.example"), ALL_SCHEMES).unwrap(),
        a.der
    );
    let mut bad = files(&a, "a");
    bad.names = vec!["a b".into()];
    let err = CertStore::build(&TlsSettings::new(vec![bad])).unwrap_err();
    assert_eq!(err.path.as_deref(), Some(Path::new("a.crt")));
}

#[test]
fn the_subject_cn_names_a_certificate_without_dns_names() {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "cn.example");
    let m = make_with(params, Alg::P256);
    let s = store(vec![files(&m, "cn")], false);
    assert_eq!(s.served()[0].names, ["cn.example"]);
}

#[test]
fn a_key_that_does_not_match_names_the_key_file() {
    let a = make(&["a.example"], Alg::P256);
    let b = make(&["b.example"], Alg::P256);
    let mut f = files(&a, "a");
    f.key = data("other.key", &b.key_pem);
    let err = CertStore::build(&TlsSettings::new(vec![f])).unwrap_err();
    assert_eq!(err.path.as_deref(), Some(Path::new("other.key")));
    assert!(err.message.contains("does not match"), "{err}");
    assert!(err.to_string().starts_with("other.key: "), "{err}");
    assert!(!err.to_string().contains('\n'));
}

#[test]
fn bad_files_are_named() {
    let a = make(&["a.example"], Alg::P256);
    let mut f = files(&a, "a");
    f.key = data("a.key", "not a key");
    let err = CertStore::build(&TlsSettings::new(vec![f])).unwrap_err();
    assert_eq!(err.path.as_deref(), Some(Path::new("a.key")), "{err}");
    let mut f = files(&a, "a");
    f.cert = data("a.crt", "");
    let err = CertStore::build(&TlsSettings::new(vec![f])).unwrap_err();
    assert_eq!(err.path.as_deref(), Some(Path::new("a.crt")), "{err}");
    let mut f = files(&a, "a");
    f.key = data(
        "a.key",
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
    );
    let err = CertStore::build(&TlsSettings::new(vec![f])).unwrap_err();
    assert!(err.message.contains("encrypted"), "{err}");
    let mut f = files(&a, "a");
    f.ocsp = Some(data("a.ocsp", "-----BEGIN"));
    let err = CertStore::build(&TlsSettings::new(vec![f])).unwrap_err();
    assert_eq!(err.path.as_deref(), Some(Path::new("a.ocsp")), "{err}");
    let err = CertStore::build(&TlsSettings::new(vec![])).unwrap_err();
    assert_eq!(err.to_string(), "tls: no certificate");
}

#[test]
fn the_key_may_share_the_certificate_file_in_any_pem_form() {
    let rsa = make(&["r.example"], Alg::Rsa);
    let ec = make(&["e.example"], Alg::P256);
    for (m, form) in [
        (&rsa, "-traditional"),
        (&ec, "-traditional"),
        (&ec, "-text"),
    ] {
        // -traditional writes PKCS#1 (RSA) or SEC1 (EC); -text keeps PKCS#8 with text around.
        let out = std::process::Command::new("openssl")
            .args(["pkey", form])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write as _;
                child
                    .stdin
                    .take()
                    .unwrap()
                    .write_all(m.key_pem.as_bytes())?;
                child.wait_with_output()
            })
            .unwrap();
        let key = String::from_utf8(out.stdout).unwrap();
        let both = format!("{}{}", m.cert_pem, key);
        let f = CertFiles {
            cert: data("both.pem", &both),
            key: data("both.pem", &both),
            ocsp: None,
            names: Vec::new(),
            default: false,
        };
        let s = store(vec![f], false);
        assert_eq!(s.served()[0].key.cert[0], m.der);
    }
}

#[test]
fn an_expired_certificate_loads_and_reports_its_expiry() {
    let mut params = CertificateParams::new(vec!["old.example".to_string()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2001, 1, 1);
    params.not_after = rcgen::date_time_ymd(2002, 1, 1);
    let m = make_with(params, Alg::P256);
    let s = store(vec![files(&m, "old")], false);
    let served = &s.served()[0];
    assert_eq!(served.not_after_unix, 1_009_843_200); // 2002-01-01T00:00:00Z
    assert_eq!(served.path, Path::new("old.crt"));
    assert_eq!(
        handshake(&s, Some("old.example"), ALL_SCHEMES).unwrap(),
        m.der
    );
}

#[test]
fn an_ocsp_response_is_stapled() {
    let a = make(&["a.example"], Alg::P256);
    let mut f = files(&a, "a");
    f.ocsp = Some(FileData {
        path: "a.ocsp".into(),
        bytes: vec![0x30, 0x03, 0x0a, 0x01, 0x00].into(),
    });
    let s = store(vec![f], false);
    assert_eq!(
        s.served()[0].key.ocsp.as_deref(),
        Some(&[0x30, 3, 10, 1, 0][..])
    );
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

#[test]
fn the_sni_dir_layout_serves_each_name() {
    let dir = tempfile::tempdir().unwrap();
    let a = make(&["ignored.example"], Alg::P256);
    let w = make(&["*.w.example"], Alg::P256);
    let ca = make(&["ca.example"], Alg::P256);
    write(dir.path(), "a.example.crt", &a.cert_pem);
    write(dir.path(), "a.example.key", &a.key_pem);
    write(dir.path(), "a.example.ca", &ca.cert_pem);
    write(dir.path(), "_wildcard.crt", &w.cert_pem);
    write(dir.path(), "_wildcard.key", &w.key_pem);
    write(dir.path(), "README", "not a certificate");
    std::fs::create_dir(dir.path().join("sub.crt")).unwrap();
    let certs = read_sni_dir(dir.path()).unwrap();
    assert_eq!(certs.len(), 2);
    assert_eq!(certs[0].cert.path, dir.path().join("_wildcard.crt"));
    assert!(certs[0].names.is_empty());
    assert_eq!(certs[1].names, ["a.example"]);
    let s = store(certs, true);
    assert_eq!(s.served()[0].names, ["*.w.example"]);
    assert_eq!(
        handshake(&s, Some("x.w.example"), ALL_SCHEMES).unwrap(),
        w.der
    );
    assert_eq!(
        handshake(&s, Some("a.example"), ALL_SCHEMES).unwrap(),
        a.der
    );
    assert!(handshake(&s, Some("ignored.example"), ALL_SCHEMES).is_err());
    // NAME.ca is the chain after the leaf.
    assert_eq!(s.served()[1].key.cert.len(), 2);
    assert_eq!(s.served()[1].key.cert[1], ca.der);
}

#[test]
fn the_sni_dir_needs_a_key_for_every_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let a = make(&["a.example"], Alg::P256);
    write(dir.path(), "a.example.crt", &a.cert_pem);
    let err = read_sni_dir(dir.path()).unwrap_err();
    assert_eq!(err.path, Some(dir.path().join("a.example.crt")));
    assert!(err.message.contains("a.example.key"), "{err}");
    let mut settings = TlsSettings::new(Vec::new());
    settings.sni_path = Some(dir.path().to_path_buf());
    let err = CertStore::build(&settings).unwrap_err();
    assert_eq!(err.path.as_deref(), Some(dir.path()));
}

#[test]
fn the_ca_dir_keeps_files_holding_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let a = make(&["a.example"], Alg::P256);
    let b = make(&["b.example"], Alg::P256);
    write(
        dir.path(),
        "one.pem",
        &format!("{}{}", a.cert_pem, b.cert_pem),
    );
    write(dir.path(), "notes.txt", "hello");
    let cas = read_ca_dir(dir.path()).unwrap();
    assert_eq!(cas.len(), 1);
    assert_eq!(cas[0].path, dir.path().join("one.pem"));
    let auth = crate::tls::ClientAuth {
        ca: cas,
        crls: Vec::new(),
        required: true,
        ca_dir: None,
    };
    assert!(client_verifier(&auth).is_ok());
    let empty = tempfile::tempdir().unwrap();
    assert!(read_ca_dir(empty.path()).is_err());
}

#[test]
fn crls_are_read_as_pem_or_der_and_bad_ones_named() {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let key = key_pair(Alg::P256);
    let ca = params.self_signed(&key).unwrap();
    let issuer = Issuer::new(params, key);
    let crl = rcgen::CertificateRevocationListParams {
        this_update: rcgen::date_time_ymd(2020, 1, 1),
        next_update: rcgen::date_time_ymd(2030, 1, 1),
        crl_number: rcgen::SerialNumber::from(1u64),
        issuing_distribution_point: None,
        revoked_certs: Vec::new(),
        key_identifier_method: rcgen::KeyIdMethod::Sha256,
    }
    .signed_by(&issuer)
    .unwrap();
    let ca_file = data("ca.pem", &ca.pem());
    let der = FileData {
        path: "crl.der".into(),
        bytes: crl.der().to_vec().into(),
    };
    for crl_file in [data("crl.pem", &crl.pem().unwrap()), der] {
        let auth = crate::tls::ClientAuth {
            ca: vec![ca_file.clone()],
            crls: vec![crl_file],
            required: false,
            ca_dir: None,
        };
        assert!(client_verifier(&auth).is_ok());
    }
    let auth = crate::tls::ClientAuth {
        ca: vec![ca_file],
        crls: vec![data("bad.crl", "garbage")],
        required: false,
        ca_dir: None,
    };
    let err = client_verifier(&auth).err().unwrap();
    assert_eq!(err.path.as_deref(), Some(Path::new("bad.crl")));
}

#[test]
fn subject_of_writes_rfc4514_most_specific_first() {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CountryName, "FR");
    params
        .distinguished_name
        .push(DnType::OrganizationName, "Example");
    params.distinguished_name.push(DnType::CommonName, "alice");
    let m = make_with(params, Alg::P256);
    assert_eq!(
        subject_of(&m.der).as_deref(),
        Some("CN=alice,O=Example,C=FR")
    );
    assert_eq!(subject_of(b"not a certificate"), None);
}

#[test]
fn subject_of_escapes_specials_and_control_bytes() {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "evil\r\nX-Admin: 1, #+\"; é\u{7f}\0 ");
    let m = make_with(params, Alg::P256);
    let subject = subject_of(&m.der).unwrap();
    assert_eq!(
        subject,
        "CN=evil\\0D\\0AX-Admin: 1\\, #\\+\\\"\\; \\C3\\A9\\7F\\00\\ "
    );
    assert!(subject.bytes().all(|b| (0x20..0x7f).contains(&b)));
    // A leading '#' or space is escaped too.
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, "#x");
    let m = make_with(params, Alg::P256);
    assert_eq!(subject_of(&m.der).as_deref(), Some("CN=\\#x"));
}

#[test]
fn names_are_normalized_or_refused() {
    assert_eq!(
        normalize_name("WWW.Example.COM.").as_deref(),
        Some("www.example.com")
    );
    assert_eq!(
        normalize_name("*.example.com").as_deref(),
        Some("*.example.com")
    );
    for bad in [
        "",
        ".",
        "a..b",
        "*",
        "a.*.b",
        "**.b",
        "a b",
        "é.example",
        "*.",
        "a/b",
        "_wildcard",
    ] {
        assert_eq!(normalize_name(bad), None, "{bad:?}");
    }
}

/// A CA for client certificates: its certificate (PEM) and its issuer.
fn client_ca() -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let key = key_pair(Alg::P256);
    let ca = params.self_signed(&key).unwrap();
    (ca.pem(), Issuer::new(params, key))
}

fn client_cert(issuer: &Issuer<'static, KeyPair>, cn: &str, serial: u64) -> Made {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.serial_number = Some(rcgen::SerialNumber::from(serial));
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let key = key_pair(Alg::P256);
    let cert = params.signed_by(&key, issuer).unwrap();
    Made {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        der: cert.der().clone(),
    }
}

fn crl_revoking(issuer: &Issuer<'static, KeyPair>, serials: &[u64]) -> String {
    rcgen::CertificateRevocationListParams {
        this_update: rcgen::date_time_ymd(2020, 1, 1),
        next_update: rcgen::date_time_ymd(2099, 1, 1),
        crl_number: rcgen::SerialNumber::from(1u64),
        issuing_distribution_point: None,
        revoked_certs: serials
            .iter()
            .map(|&n| rcgen::RevokedCertParams {
                serial_number: rcgen::SerialNumber::from(n),
                revocation_time: rcgen::date_time_ymd(2021, 1, 1),
                reason_code: None,
                invalidity_date: None,
            })
            .collect(),
        key_identifier_method: rcgen::KeyIdMethod::Sha256,
    }
    .signed_by(issuer)
    .unwrap()
    .pem()
    .unwrap()
}

#[test]
fn client_certificates_required_optional_and_revoked() {
    let server = make(&["m.example"], Alg::P256);
    let s = store(vec![files(&server, "m")], false);
    let (ca_pem, issuer) = client_ca();
    let alice = client_cert(&issuer, "alice", 10);
    let bob = client_cert(&issuer, "bob", 11);
    let (_, other) = client_ca();
    let mallory = client_cert(&other, "mallory", 10);
    let verifier = |required: bool, crls: Vec<FileData>| {
        Some(
            client_verifier(&crate::tls::ClientAuth {
                ca: vec![data("ca.pem", &ca_pem)],
                crls,
                ca_dir: None,
                required,
            })
            .unwrap(),
        )
    };
    let run = |v, cert| handshake_with(&s, v, Some("m.example"), ALL_SCHEMES, cert);
    // Required: a certificate of the CA only.
    assert!(run(verifier(true, vec![]), Some(&alice)).is_ok());
    let err = run(verifier(true, vec![]), None).unwrap_err();
    assert!(err.starts_with("server:"), "{err}");
    assert!(run(verifier(true, vec![]), Some(&mallory)).is_err());
    // Optional: none, or one of the CA; a foreign one is still refused.
    assert!(run(verifier(false, vec![]), None).is_ok());
    assert!(run(verifier(false, vec![]), Some(&alice)).is_ok());
    assert!(run(verifier(false, vec![]), Some(&mallory)).is_err());
    // Revoked by the CRL.
    let crl = vec![data("crl.pem", &crl_revoking(&issuer, &[11]))];
    assert!(run(verifier(true, crl.clone()), Some(&alice)).is_ok());
    let err = run(verifier(true, crl), Some(&bob)).unwrap_err();
    assert!(err.to_lowercase().contains("revoked"), "{err}");
    assert_eq!(subject_of(&alice.der).as_deref(), Some("CN=alice"));
}
