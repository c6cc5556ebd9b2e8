//! Configuring TLS (docs/design.md#tls): `tls = { ... }` in TOML and what `quill check` says of it,
//! the errors for a missing file or an unknown cipher (one line, FILE:LINE, the key and the file),
//! Pen's `-E`/`-K`/`-G`/`-A`/`-R`/`-L`/`-Z` on the command line, Pen's `ssl_*` commands over the
//! control socket and `write` saving them, and the versions and suites actually offered, seen by
//! `openssl s_client`. Certificates are made by the test (rcgen) into a temporary directory.

use crate::ctl;
use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ctl::*;
use support::*;

/// A CA, a leaf for `localhost` (ECDSA P-256) signed by it, and a second self-signed leaf for
/// `other.example`, written as PEM into a temporary directory.
struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    fn new() -> Certs {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let dir = scratch_dir();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "tls_config test CA");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let other = rcgen::generate_simple_self_signed(vec!["other.example".to_string()]).unwrap();
        let p = dir.path();
        std::fs::write(p.join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(p.join("cert.pem"), leaf.pem()).unwrap();
        std::fs::write(p.join("key.pem"), key.serialize_pem()).unwrap();
        std::fs::write(p.join("other.pem"), other.cert.pem()).unwrap();
        std::fs::write(p.join("other.key"), other.signing_key.serialize_pem()).unwrap();
        std::fs::create_dir(p.join("sni")).unwrap();
        std::fs::write(p.join("sni/other.example.crt"), other.cert.pem()).unwrap();
        std::fs::write(
            p.join("sni/other.example.key"),
            other.signing_key.serialize_pem(),
        )
        .unwrap();
        Certs { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn arg(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    /// Writes a configuration file beside the certificates (relative names work) and returns it.
    fn config(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

/// `quill check --config PATH`: (exit code, stdout, stderr).
fn check(path: &Path) -> (i32, String, String) {
    run_quill_output(&["check", "--config", path.to_str().unwrap()])
}

/// The 1-based line of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .expect("needle in the text")
        + 1
}

/// A backend that answers each connection's first line with `got LINE` and closes; it keeps
/// the lines it saw. Stops accepting after 30 s.
struct LineBackend {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
}

impl LineBackend {
    fn start() -> LineBackend {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                let Ok((conn, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                conn.set_nonblocking(false).unwrap();
                conn.set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                let mut line = String::new();
                let mut r = BufReader::new(&conn);
                if r.read_line(&mut line).is_ok() && !line.is_empty() {
                    let line = line.trim_end().to_string();
                    let _ = (&conn).write_all(format!("got {line}\n").as_bytes());
                    seen2.lock().unwrap().push(line);
                }
            }
        });
        LineBackend { addr, seen }
    }
}

/// `openssl s_client -connect 127.0.0.1:PORT ARGS`, sending `input` then EOF: (handshake and
/// exchange succeeded, stdout and stderr).
fn s_client(port: u16, args: &[&str], input: &[u8]) -> (bool, String) {
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .args(["-servername", "localhost"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl");
    let _ = child.stdin.take().unwrap().write_all(input);
    let out = wait_child(child, Duration::from_secs(15));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The negotiated suite as `s_client` prints it (`Cipher is NAME`).
fn cipher_of(text: &str) -> Option<String> {
    let at = text.find("Cipher is ")? + "Cipher is ".len();
    Some(text[at..].split_whitespace().next()?.to_string())
}

/// A TOML TCP listener named `secure` on PORT with TLS `tls` (the table's body) over `server`.
fn tls_listener(port: u16, server: SocketAddr, tls: &str) -> String {
    format!(
        "workers = 1\n[[listener]]\nname = \"secure\"\nlisten = \"127.0.0.1:{port}\"\n\
         servers = [\"{server}\"]\n[listener.tls]\ncert = \"cert.pem\"\nkey = \"key.pem\"\n{tls}"
    )
}

/// Starts quill over that TOML (written beside the certificates) with a control socket.
fn start_tls(c: &Certs, server: SocketAddr, tls: &str) -> (QuillProcess, PathBuf) {
    let q = Quill::start_with(|dir, port| {
        let cfg = c.config("q.toml", &tls_listener(port, server, tls));
        vec![
            "--config".into(),
            cfg.display().to_string(),
            "-C".into(),
            dir.join("ctl.sock").display().to_string(),
        ]
    });
    let sock = q.path("ctl.sock");
    wait_ctl(&q, &sock);
    (q, sock)
}

#[test]
fn tls_check_lists_certificates_and_settings() {
    let c = Certs::new();
    let text = "[tls]\nhandshake_timeout = \"4s\"\n\
        [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:8443\"\nprotocol = \"http\"\n\
        servers = [\"127.0.0.1:8080\"]\n\
        [listener.tls]\n\
        certs = [ { cert = \"cert.pem\", key = \"key.pem\", default = true },\n\
                  { cert = \"other.pem\", key = \"other.key\", names = [\"*.other.example\"] } ]\n\
        sni_path = \"sni\"\nmin_version = \"1.3\"\n\
        ciphers = [\"TLS_AES_256_GCM_SHA384\"]\nalpn = [\"http/1.1\"]\n\
        client_ca = \"ca.pem\"\nclient_verify = \"required\"\nmax_handshakes = 64\n\
        [[pool]]\nname = \"secure\"\nservers = [\"127.0.0.1:9443\"]\n\
        server_tls = { ca = \"ca.pem\", sni = \"backend.example\" }\n";
    let path = c.config("q.toml", text);
    let (code, out, err) = check(&path);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let dir = c.dir.path().display().to_string();
    for want in [
        "  TLS: TLS 1.3 only; suites TLS13_AES_256_GCM_SHA384 (the listener's order wins)\n"
            .to_string(),
        format!("  certificate {dir}/cert.pem, key {dir}/key.pem: localhost, expires "),
        " (default)\n".into(),
        format!("  certificate {dir}/other.pem, key {dir}/other.key: *.other.example, expires "),
        format!("  certificate {dir}/sni/other.example.crt, key {dir}/sni/other.example.key: other.example, expires "),
        format!("  certificates by server name from {dir}/sni\n"),
        format!("  TLS: ALPN http/1.1; client certificates required (CAs {dir}/ca.pem); session tickets off\n"),
        "  TLS: handshake timeout 4s (first byte within 3s), at most 64 handshakes in progress per worker (32 per client address)\n".into(),
        format!("  TLS to servers: certificates verified against {dir}/ca.pem; SNI backend.example\n"),
    ] {
        assert!(out.contains(&want), "missing {want:?} in:\n{out}");
    }
}

#[test]
fn tls_missing_certificate_file_is_refused_with_file_and_line() {
    let c = Certs::new();
    let text = "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:8443\"\n\
                servers = [\"127.0.0.1:8080\"]\ntls = { cert = \"cert.pem\", key = \"gone.key\" }\n";
    let path = c.config("q.toml", text);
    let want = format!(
        "quill: error: {}:{}: tls: key: {}: cannot read",
        path.display(),
        line_of(text, "gone.key"),
        c.path("gone.key").display()
    );
    // `quill check` and a start refuse it alike: exit 2, one line.
    let (code, out, err) = check(&path);
    assert_eq!(code, 2, "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with(&want), "{err:?} should start with {want:?}");
    let (code, err) = run_quill_expect_exit(&["--config", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.starts_with(&want), "{err:?} should start with {want:?}");
    // A key that is not the certificate's names both files.
    let text = text.replace("gone.key", "other.key");
    let path = c.config("q.toml", &text);
    let (code, _, err) = check(&path);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&c.arg("other.key")), "{err}");
    assert!(err.contains("does not match"), "{err}");
    assert!(err.contains(&c.arg("cert.pem")), "{err}");
}

#[test]
fn tls_unknown_cipher_is_refused_with_a_one_line_message() {
    let c = Certs::new();
    for (ciphers, says) in [
        (
            "[\"HIGH:!aNULL\"]",
            "tls: ciphers: 'HIGH:!aNULL' is an OpenSSL cipher string: list suite names instead",
        ),
        (
            "\"HIGH:!aNULL\"",
            "tls: ciphers: 'HIGH:!aNULL' is an OpenSSL cipher string",
        ),
        (
            "[\"TLS13_AES_128_GCM_SHA256\", \"RC4-MD5\"]",
            "tls: ciphers: unknown cipher suite 'RC4-MD5'",
        ),
    ] {
        let text = format!(
            "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:8443\"\nservers = [\"127.0.0.1:8080\"]\n\
             [listener.tls]\ncert = \"cert.pem\"\nkey = \"key.pem\"\nciphers = {ciphers}\n"
        );
        let path = c.config("q.toml", &text);
        let (code, out, err) = check(&path);
        assert_eq!(code, 2, "stdout:\n{out}\nstderr:\n{err}");
        assert_eq!(err.lines().count(), 1, "one line: {err:?}");
        let want = format!("quill: error: {}:8: {says}", path.display());
        assert!(err.starts_with(&want), "{err:?} should start with {want:?}");
    }
    // Pen's ssl_ciphers on the command line, the same way.
    let (code, err) = run_quill_expect_exit(&[
        "-E",
        &c.arg("cert.pem"),
        "-K",
        &c.arg("key.pem"),
        "-O",
        "ssl_ciphers HIGH:!aNULL",
        "127.0.0.1:1",
        "127.0.0.1:2",
    ]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.contains("OpenSSL cipher string"), "{err}");
}

#[test]
fn tls_pen_flags_minus_l_and_z_are_accepted_or_refused_clearly() {
    let c = Certs::new();
    let (cert, key) = (c.arg("cert.pem"), c.arg("key.pem"));
    let pen = |extra: &[&str]| {
        let mut a = vec!["check", "-E", &cert, "-K", &key];
        a.extend_from_slice(extra);
        a.extend_from_slice(&["127.0.0.1:8443", "127.0.0.1:8080"]);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let run = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_quill_output(&args)
    };
    for (l, versions) in [
        ("ssl23", "TLS 1.2 and 1.3"),
        ("tls1.2", "TLS 1.2 and 1.3"),
        ("tls1.3", "TLS 1.3 only"),
    ] {
        let (code, out, err) = run(pen(&["-L", l]));
        assert_eq!(code, 0, "-L {l}: {out}{err}");
        assert!(
            out.contains(&format!("  TLS: {versions};")),
            "-L {l}: {out}"
        );
    }
    for old in ["ssl2", "ssl3", "tls1"] {
        let (code, _, err) = run(pen(&["-L", old]));
        assert_eq!(code, 2, "-L {old}: {err}");
        assert!(
            err.contains(&format!(
                "-L {old}: not supported: rustls speaks TLS 1.2 and 1.3"
            )),
            "{err}"
        );
    }
    let (code, _, err) = run(pen(&["-L", "quic"]));
    assert_eq!(code, 2);
    assert!(err.contains("-L 'quic': unknown protocol"), "{err}");
    // -G asks for client certificates, -R requires them, -A reads a directory of CAs.
    let (ca, sni) = (c.arg("ca.pem"), c.arg("sni"));
    let (code, out, err) = run(pen(&["-G", &ca]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("client certificates optional"), "{out}");
    let (code, out, err) = run(pen(&["-A", &sni, "-R"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("client certificates required"), "{out}");
    // -E with -H: an HTTP listener with TLS (ALPN h2, http/1.1).
    let (code, out, err) = run(pen(&["-H"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("  HTTP listener (protocol http)"), "{out}");
    assert!(out.contains("  TLS: ALPN h2, http/1.1;"), "{out}");
    let (code, _, err) = run(pen(&["-R"]));
    assert_eq!(code, 2);
    assert!(err.contains("-R needs -G CACERT or -A CADIR"), "{err}");
    // TLS options without -E, and a missing -E file, are usage errors naming the flag.
    let (code, err) = run_quill_expect_exit(&["-K", &key, "127.0.0.1:1", "127.0.0.1:2"]);
    assert_eq!(code, 2);
    assert!(err.contains("-K needs -E CERTFILE"), "{err}");
    let gone = c.arg("gone.pem");
    let (code, err) = run_quill_expect_exit(&["-E", &gone, "127.0.0.1:1", "127.0.0.1:2"]);
    assert_eq!(code, 2);
    assert!(err.contains(&format!("-E: {gone}: cannot read")), "{err}");
    // -Z starts, with a one-line notice that it changes nothing.
    let backend = LineBackend::start();
    let server = backend.addr.to_string();
    let q = Quill::start_with(|dir, port| {
        pen_args(
            dir,
            port,
            &["-E", &cert, "-K", &key, "-Z", "-L", "ssl23"],
            std::slice::from_ref(&server),
        )
    });
    assert!(
        q.wait_stderr_contains("-Z", Duration::from_secs(5)),
        "{}",
        q.stderr()
    );
    let notice: Vec<String> = q
        .stderr()
        .lines()
        .filter(|l| l.contains("-Z"))
        .map(String::from)
        .collect();
    assert_eq!(notice.len(), 1, "{notice:?}");
    assert!(notice[0].contains("changes nothing"), "{notice:?}");
}

#[test]
fn tls_write_saves_the_tls_settings_so_they_reload_equal() {
    let c = Certs::new();
    let backend = LineBackend::start();
    let (q, sock) = start_tls(&c, backend.addr, "");
    ctl_ok(
        &sock,
        "ssl_ciphers TLS_AES_256_GCM_SHA384:ECDHE-ECDSA-AES128-GCM-SHA256",
    );
    ctl_ok(&sock, "ssl_option cipher_server_preference");
    ctl_ok(&sock, "ssl_option no_tlsv1.2");
    ctl_ok(&sock, &format!("ssl_sni_path {}", c.arg("sni")));
    ctl_err(&sock, "ssl_ciphers HIGH:!aNULL", "OpenSSL cipher string");
    let saved = c.path("saved.cmds");
    ctl_ok(&sock, &format!("write {}", saved.display()));
    let written = std::fs::read_to_string(&saved).unwrap();
    assert!(written.contains("# listener secure: TLS"), "{written}");
    // What a restart loads: the same file, then the written commands.
    let again = format!(
        "command_file = \"{}\"\n{}",
        saved.display(),
        tls_listener(q.port, backend.addr, "")
    );
    let path = c.config("again.toml", &again);
    let (code, out, err) = check(&path);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    for want in [
        "  TLS: TLS 1.3 only; suites TLS13_AES_256_GCM_SHA384, TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 (the listener's order wins)\n".to_string(),
        format!("  certificates by server name from {}\n", c.arg("sni")),
        "other.example, expires".into(),
    ] {
        assert!(out.contains(&want), "missing {want:?} in:\n{out}");
    }
    // A reload of the running process from its file keeps them too (the file has none: the
    // changes were made at run time and are kept).
    ctl_ok(&sock, "reload");
    let (ok, text) = s_client(q.port, &["-tls1_2"], b"");
    assert!(
        !ok,
        "TLS 1.2 after ssl_option no_tlsv1.2 and a reload: {text}"
    );
}

#[test]
fn tls_ssl_option_over_the_control_socket_changes_the_running_listener() {
    let c = Certs::new();
    let backend = LineBackend::start();
    let (q, sock) = start_tls(&c, backend.addr, "");
    let (ok, text) = s_client(q.port, &["-tls1_2"], b"");
    assert!(ok, "TLS 1.2 before: {text}");
    ctl_ok(&sock, "ssl_option no_tlsv1.2");
    let (ok, text) = s_client(q.port, &["-tls1_2"], b"");
    assert!(!ok, "TLS 1.2 after ssl_option no_tlsv1.2: {text}");
    let (ok, text) = s_client(q.port, &["-tls1_3"], b"");
    assert!(ok, "TLS 1.3 after: {text}");
    // A file that cannot be read is refused, naming it, and changes nothing.
    ctl_err(&sock, "ssl_ocsp_response /nonexistent", "/nonexistent");
}

#[test]
fn tls_pen_command_line_minus_e_minus_k_terminates_tls() {
    let c = Certs::new();
    let backend = LineBackend::start();
    let server = backend.addr.to_string();
    let (cert, key) = (c.arg("cert.pem"), c.arg("key.pem"));
    let q = Quill::start_with(|dir, port| {
        pen_args(
            dir,
            port,
            &["-E", &cert, "-K", &key],
            std::slice::from_ref(&server),
        )
    });
    let ca = c.arg("ca.pem");
    let (ok, text) = s_client(
        q.port,
        &["-quiet", "-verify_return_error", "-CAfile", &ca],
        b"hello over tls\n",
    );
    assert!(ok, "{text}");
    assert!(text.contains("got hello over tls"), "{text}");
    assert_eq!(
        backend.seen.lock().unwrap().as_slice(),
        ["hello over tls".to_string()]
    );
    // -E alone: the key is read from the certificate file when it holds both.
    let both = c.path("both.pem");
    std::fs::write(
        &both,
        format!(
            "{}{}",
            std::fs::read_to_string(c.path("cert.pem")).unwrap(),
            std::fs::read_to_string(c.path("key.pem")).unwrap()
        ),
    )
    .unwrap();
    let both = both.display().to_string();
    let q2 = Quill::start_with(|dir, port| {
        pen_args(dir, port, &["-E", &both], std::slice::from_ref(&server))
    });
    let (ok, text) = s_client(
        q2.port,
        &["-quiet", "-verify_return_error", "-CAfile", &ca],
        b"second\n",
    );
    assert!(ok && text.contains("got second"), "{text}");
}

#[test]
fn tls_min_version_1_3_refuses_a_tls_1_2_client() {
    let c = Certs::new();
    let backend = LineBackend::start();
    let (q, _sock) = start_tls(&c, backend.addr, "min_version = \"1.3\"\n");
    let (ok, text) = s_client(q.port, &["-tls1_2"], b"");
    assert!(!ok, "a TLS 1.2 client got through: {text}");
    let (ok, text) = s_client(q.port, &["-tls1_3"], b"");
    assert!(ok, "TLS 1.3: {text}");
    assert!(text.contains("TLSv1.3"), "{text}");
}

#[test]
fn tls_configured_ciphers_are_the_only_ones_offered() {
    let c = Certs::new();
    let backend = LineBackend::start();
    let (q, _sock) = start_tls(
        &c,
        backend.addr,
        "ciphers = [\"ECDHE-ECDSA-AES128-GCM-SHA256\", \"TLS13_AES_256_GCM_SHA384\"]\n",
    );
    for (args, expect) in [
        (
            ["-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"],
            Some("ECDHE-ECDSA-AES128-GCM-SHA256"),
        ),
        (
            ["-tls1_2", "-cipher", "ECDHE-ECDSA-AES256-GCM-SHA384"],
            None,
        ),
        (
            ["-tls1_2", "-cipher", "ECDHE-ECDSA-CHACHA20-POLY1305"],
            None,
        ),
        (
            ["-tls1_3", "-ciphersuites", "TLS_AES_256_GCM_SHA384"],
            Some("TLS_AES_256_GCM_SHA384"),
        ),
        (["-tls1_3", "-ciphersuites", "TLS_AES_128_GCM_SHA256"], None),
        (
            ["-tls1_3", "-ciphersuites", "TLS_CHACHA20_POLY1305_SHA256"],
            None,
        ),
    ] {
        let (ok, text) = s_client(q.port, &args, b"");
        match expect {
            Some(name) => {
                assert!(ok, "{args:?}: {text}");
                assert_eq!(cipher_of(&text).as_deref(), Some(name), "{args:?}: {text}");
            }
            None => assert!(!ok, "{args:?} was accepted: {text}"),
        }
    }
}

#[test]
fn tls_write_saves_the_client_cipher_order_so_it_reloads_equal() {
    let c = Certs::new();
    let backend = LineBackend::start();
    let (q, sock) = start_tls(&c, backend.addr, "");
    ctl_ok(&sock, "ssl_option client_cipher_preference");
    let saved = c.path("order.cmds");
    ctl_ok(&sock, &format!("write {}", saved.display()));
    let written = std::fs::read_to_string(&saved).unwrap();
    assert!(
        written.contains("ssl_option client_cipher_preference"),
        "{written}"
    );
    // What a restart loads: the file (server order on by default), then the written commands.
    let again = format!(
        "command_file = \"{}\"\n{}",
        saved.display(),
        tls_listener(q.port, backend.addr, "")
    );
    let (code, out, err) = check(&c.config("again.toml", &again));
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(!out.contains("the listener's order wins"), "{out}");
    // And back: the opposite command is saved as such.
    ctl_ok(&sock, "ssl_option cipher_server_preference");
    ctl_ok(&sock, &format!("write {}", saved.display()));
    let written = std::fs::read_to_string(&saved).unwrap();
    assert!(
        written.contains("ssl_option cipher_server_preference"),
        "{written}"
    );
    let (code, out, err) = check(&c.config("again.toml", &again));
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("the listener's order wins"), "{out}");
}
