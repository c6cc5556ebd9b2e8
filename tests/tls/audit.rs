//! TLS seen from outside (docs/design.md#tls): a second, independent TLS stack (GnuTLS's
//! `gnutls-cli`) talks HTTP through a TLS listener, and `testssl.sh` (Debian's `testssl`) audits
//! a listener with the default settings: no HIGH or CRITICAL finding. The certificate is a proper
//! one (a CA testssl is told to trust, the address and name in subjectAltName, a year of
//! validity, a CRL distribution point), so the audit judges Quill's TLS, not a test shortcut.
//! scripts/test installs `gnutls-bin` and `testssl.sh`.

use crate::http_support;
use crate::support;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use http_support::Backend;
use support::*;

struct Pki {
    ca: PathBuf,
}

/// A CA and a leaf for `localhost` and 127.0.0.1 (valid for a year, with a CRL distribution
/// point), written into `dir` as ca.pem, cert.pem, key.pem.
fn pki(dir: &Path) -> Pki {
    use rcgen::{
        BasicConstraints, CertificateParams, CrlDistributionPoint, DnType, IsCa, Issuer, KeyPair,
        KeyUsagePurpose, SanType,
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.distinguished_name
        .push(DnType::CommonName, "Quill audit CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    leaf.subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    leaf.distinguished_name
        .push(DnType::CommonName, "localhost");
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let day = Duration::from_secs(86_400);
    leaf.not_before = rcgen::date_time_ymd(1970, 1, 1) + (unix - day);
    leaf.not_after = rcgen::date_time_ymd(1970, 1, 1) + (unix + day * 365);
    leaf.crl_distribution_points = vec![CrlDistributionPoint {
        uris: vec!["http://127.0.0.1/quill-audit.crl".to_string()],
    }];
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
    std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
    Pki {
        ca: dir.join("ca.pem"),
    }
}

/// Quill with an HTTP TLS listener (default TLS settings) in front of `backend`.
fn start(backend: &Backend) -> (QuillProcess, Pki) {
    let addr = backend.addr();
    let keep = scratch_dir();
    let p = pki(keep.path());
    let dir = keep.path().to_path_buf();
    let q = Quill::start_with(|qdir, port| {
        let cfg = qdir.join("quill.toml");
        std::fs::write(
            &cfg,
            format!(
                "[[listener]]\nname = \"audit\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nservers = [\"{addr}\"]\n[listener.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
                dir.join("cert.pem").display(),
                dir.join("key.pem").display()
            ),
        )
        .unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    });
    // The PEM files stay for the process's life: leak the directory's guard into the test.
    std::mem::forget(keep);
    (q, p)
}

/// Runs `cmd` at most `within`, killing it by PID past that: its stdout and stderr.
fn run_bounded(mut cmd: Command, within: Duration) -> (String, String) {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let out = wait_child(child, within);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn tls_interoperates_with_gnutls_cli() {
    let backend = Backend::fixed(5);
    let (q, p) = start(&backend);
    let mut child = Command::new("gnutls-cli")
        .arg("--x509cafile")
        .arg(&p.ca)
        .args(["-p", &q.port.to_string(), "localhost"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gnutls-cli (Debian package gnutls-bin; scripts/test installs it)");
    child
        .stdin
        .as_mut()
        .unwrap()
        .write_all(b"GET /gnutls HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    // Quill closes after the response (Connection: close); gnutls-cli then exits.
    let mut out = Vec::new();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline && child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    out.extend(reader.join().unwrap());
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.contains("HTTP/1.1 200") && text.contains("abcde"),
        "gnutls-cli got: {text}"
    );
    let reqs = backend.wait_requests(1, IO_TIMEOUT);
    assert_eq!(reqs[0].header_all("x-forwarded-proto"), vec!["https"]);
}

#[test]
fn tls_testssl_finds_nothing_high_or_critical_with_the_default_settings() {
    let backend = Backend::fixed(5);
    let (q, p) = start(&backend);
    let json = q.path("testssl.json");
    let mut cmd = Command::new("testssl");
    // Protocols, cipher categories, forward secrecy, server preferences, server defaults
    // (certificate, tickets), vulnerabilities and HTTP headers: everything but the client
    // simulations and the per-cipher listing, which judge nothing more and take minutes.
    cmd.args([
        "--quiet", "--color", "0", "--ip", "one", "-p", "-s", "-f", "-P", "-S", "-U", "-h",
    ])
    .arg("--add-ca")
    .arg(&p.ca)
    .arg("--jsonfile")
    .arg(&json)
    .arg(format!("127.0.0.1:{}", q.port));
    let (stdout, stderr) = run_bounded(cmd, Duration::from_secs(300));
    let text = std::fs::read_to_string(&json)
        .unwrap_or_else(|e| panic!("no testssl report ({e}): {stdout}\n{stderr}"));
    let findings: serde_json::Value = serde_json::from_str(&text).expect("testssl JSON");
    let findings = findings.as_array().expect("a list of findings");
    assert!(
        findings.len() > 50,
        "testssl ran its checks ({} findings): {stdout}",
        findings.len()
    );
    let bad: Vec<String> = findings
        .iter()
        .filter(|f| matches!(f["severity"].as_str(), Some("HIGH" | "CRITICAL")))
        .map(|f| format!("{} {}: {}", f["severity"], f["id"], f["finding"]))
        .collect();
    assert!(bad.is_empty(), "testssl findings:\n{}", bad.join("\n"));
    // The audit saw TLS 1.3 and 1.2 only.
    let offered = |id: &str| {
        findings
            .iter()
            .find(|f| f["id"] == id)
            .and_then(|f| f["finding"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        offered("TLS1_3").starts_with("offered"),
        "{}",
        offered("TLS1_3")
    );
    assert!(
        offered("TLS1").starts_with("not offered"),
        "{}",
        offered("TLS1")
    );
}
