//! Helpers of tests/tls/resume.rs and tests/tls/reload.rs: test certificates made with rcgen at
//! test time, a TLS TCP listener's TOML, Quill started on it with a control socket, and
//! `openssl s_client` sessions (an implementation other than ours on the client side) that
//! send a line through the listener's echo server and report whether the session was resumed.
//! A module of the tls test binary (tests/tls/main.rs), next to `support`.

use std::fs;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SerialNumber};

use crate::support::*;

/// How long one `openssl s_client` exchange may take (it takes milliseconds; this only bounds a
/// broken test).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// A self-signed ECDSA certificate for `localhost` with subject CN `cn` and serial `serial`,
/// written to DIR/STEM.pem and DIR/STEM.key; returns both paths.
pub fn write_cert(dir: &Path, stem: &str, cn: &str, serial: u64) -> (PathBuf, PathBuf) {
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.serial_number = Some(SerialNumber::from(serial));
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let (c, k) = (
        dir.join(format!("{stem}.pem")),
        dir.join(format!("{stem}.key")),
    );
    replace_file(&c, cert.pem().as_bytes());
    replace_file(&k, key.serialize_pem().as_bytes());
    (c, k)
}

/// A CA certificate written to DIR/STEM.pem (for `client_ca`).
pub fn write_ca(dir: &Path, stem: &str) -> PathBuf {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "quill test CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let path = dir.join(format!("{stem}.pem"));
    replace_file(&path, cert.pem().as_bytes());
    path
}

/// Writes `bytes` to `path` through a temporary file and a rename, as an operator's deploy
/// does: a reader sees the old file or the new one, never half of one.
pub fn replace_file(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp-new");
    fs::write(&tmp, bytes).unwrap();
    fs::rename(&tmp, path).unwrap();
}

/// A random ticket key line of `len` bytes (48 or 80), base64, as HAProxy's file holds them.
pub fn key_line(len: usize) -> String {
    use base64::Engine as _;
    let mut bytes = vec![0u8; len];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .unwrap();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A TCP listener NAME on 127.0.0.1:PORT to `server`, terminating TLS with `cert` and `key`;
/// `extra` lines go into its `[listener.tls]` table.
pub fn tls_listener(
    name: &str,
    port: u16,
    server: SocketAddr,
    cert: &Path,
    key: &Path,
    extra: &str,
) -> String {
    format!(
        "[[listener]]\nname = \"{name}\"\nlisten = \"127.0.0.1:{port}\"\nservers = [\"{server}\"]\n\
         [listener.tls]\ncert = \"{}\"\nkey = \"{}\"\n{extra}",
        cert.display(),
        key.display()
    )
}

/// Starts `quill --config DIR/q.toml -C DIR/c.sock --workers 2` with the configuration
/// `body(dir, port)` writes (its first listener on `port`), and waits until every listener is
/// bound.
pub fn start_tls(body: impl Fn(&Path, u16) -> String) -> QuillProcess {
    let (q, probe, _) = Quill::spawn_first(|dir, port| {
        fs::write(dir.join("q.toml"), body(dir, port)).unwrap();
        quill_args(dir)
    });
    drop(probe);
    assert!(
        q.wait_stderr_contains("worker(s), at most", Duration::from_secs(10)),
        "{}",
        q.stderr()
    );
    q
}

/// The arguments [`start_tls`] starts Quill with.
pub fn quill_args(dir: &Path) -> Vec<String> {
    vec![
        "--config".into(),
        dir.join("q.toml").display().to_string(),
        "-C".into(),
        dir.join("c.sock").display().to_string(),
        "--workers".into(),
        "2".into(),
    ]
}

/// `quill ctl --socket DIR/c.sock WORDS...`: (success, stdout and stderr).
pub fn ctl(q: &QuillProcess, words: &[&str]) -> (bool, String) {
    let sock = q.path("c.sock").display().to_string();
    let mut all = vec!["ctl", "--socket", sock.as_str()];
    all.extend_from_slice(words);
    let (code, out, err) = run_quill_output(&all);
    (code == 0, format!("{out}{err}"))
}

/// An `openssl s_client` connected to 127.0.0.1:PORT (SNI `localhost`), its output collected.
pub struct SClient {
    child: Child,
    stdin: Option<ChildStdin>,
    out: Arc<Mutex<Vec<u8>>>,
    readers: Vec<thread::JoinHandle<()>>,
}

impl SClient {
    pub fn start(port: u16, args: &[&str]) -> SClient {
        let connect = format!("127.0.0.1:{port}");
        let mut child = Command::new("openssl")
            .args(["s_client", "-connect", &connect, "-servername", "localhost"])
            .arg("-nocommands")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("openssl s_client (the openssl package)");
        let out = Arc::new(Mutex::new(Vec::new()));
        let mut readers = Vec::new();
        let streams: [Box<dyn Read + Send>; 2] = [
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ];
        for mut stream in streams {
            let out = out.clone();
            readers.push(thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    out.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            }));
        }
        SClient {
            stdin: child.stdin.take(),
            child,
            out,
            readers,
        }
    }

    pub fn output(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap()).into_owned()
    }

    /// Sends `line` through the session and waits (bounded) for the echo server's copy.
    pub fn echo(&mut self, line: &str) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("stdin closed")?;
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .map_err(|e| format!("write to s_client: {e}\n{}", self.output()))?;
        let deadline = Instant::now() + CLIENT_TIMEOUT;
        while Instant::now() < deadline {
            if self.output().lines().any(|l| l.trim() == line) {
                return Ok(());
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                thread::sleep(Duration::from_millis(50));
                return Err(format!("s_client exited ({st}) first:\n{}", self.output()));
            }
            thread::sleep(Duration::from_millis(5));
        }
        Err(format!(
            "no echo of {line:?} within {CLIENT_TIMEOUT:?}:\n{}",
            self.output()
        ))
    }

    /// Closes the session (stdin's end makes s_client send close_notify and exit), waits
    /// (bounded) for the exit, kills it by its pid otherwise; the whole output.
    pub fn finish(mut self) -> String {
        drop(self.stdin.take());
        let deadline = Instant::now() + CLIENT_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        self.output()
    }
}

/// One session: handshake, a line echoed through it, close. Ok(s_client's output), or Err with
/// what went wrong and the output.
pub fn session(port: u16, args: &[&str], line: &str) -> Result<String, String> {
    let mut c = SClient::start(port, args);
    let echoed = c.echo(line);
    let out = c.finish();
    echoed.map(|()| out)
}

/// Whether s_client says the session was resumed (`Reused, TLSv1.x`).
pub fn resumed(output: &str) -> bool {
    output.contains("Reused, TLSv1.")
}

/// Whether s_client says the session was a full handshake (`New, TLSv1.x`).
pub fn full(output: &str) -> bool {
    output.contains("New, TLSv1.")
}
