//! What the HTTP/2 tests share: Quill started with an h2c or TLS HTTP listener in front of a
//! backend, and `client.py` (python3-h2) run against it, its answer read line by line.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::http_support::Backend;
use crate::support::{Quill, QuillProcess};
use crate::tls_support::{self_signed, toml_path, KeyAlg};

/// The Python with Debian's python3-h2 (the `python3` on PATH may be another).
pub const PYTHON: &str = "/usr/bin/python3";

pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/h2")
        .join(name)
}

/// Quill with one HTTP listener taking h2c, in front of `backend`, with an access log and a
/// control socket (`c.sock` in its directory); `extra` are more lines of `[listener.http]`, `top`
/// lines before the listener.
pub fn start_h2c(backend: &Backend, extra: &str, top: &str) -> QuillProcess {
    let addr = backend.addr();
    Quill::start_with(|dir, port| {
        let cfg = dir.join("quill.toml");
        let text = format!(
            "log = \"{}\"\n{top}\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nservers = [\"{addr}\"]\n[listener.http]\nh2c = true\n{extra}\n",
            toml_path(&dir.join("access.log")),
        );
        std::fs::write(&cfg, text).unwrap();
        vec![
            "--config".into(),
            cfg.display().to_string(),
            "-C".into(),
            dir.join("c.sock").display().to_string(),
        ]
    })
}

/// Quill with one TLS HTTP listener (a self-signed ECDSA certificate for `localhost`) in front
/// of `backend`; `tls` are more lines of `[listener.tls]`, `http` of `[listener.http]`.
pub fn start_tls(backend: &Backend, tls: &str, http: &str) -> QuillProcess {
    let addr = backend.addr();
    let cert = self_signed("localhost", &["localhost"], KeyAlg::EcdsaP256);
    Quill::start_with(|dir, port| {
        let (c, k) = cert.write(dir, "site");
        let cfg = dir.join("quill.toml");
        let text = format!(
            "log = \"{}\"\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nservers = [\"{addr}\"]\n[listener.http]\n{http}\n[listener.tls]\ncert = \"{}\"\nkey = \"{}\"\n{tls}\n",
            toml_path(&dir.join("access.log")),
            toml_path(&c),
            toml_path(&k),
        );
        std::fs::write(&cfg, text).unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    })
}

/// Runs a program (bounded: killed after `within`), its stdout and stderr and whether it
/// exited 0.
pub fn run(cmd: &mut Command, within: Duration) -> (String, String, bool) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + within;
    let mut ok = false;
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                ok = st.success();
                break;
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
        }
    }
    (t_out.join().unwrap(), t_err.join().unwrap(), ok)
}

/// What `client.py` saw.
#[derive(Debug, Default)]
pub struct Reply {
    pub lines: Vec<String>,
    pub stderr: String,
}

impl Reply {
    fn of(&self, sid: u32, what: &str) -> Vec<&str> {
        let prefix = format!("stream {sid} {what}");
        self.lines
            .iter()
            .filter_map(|l| l.strip_prefix(&prefix))
            .map(|r| r.trim_start())
            .collect()
    }

    pub fn status(&self, sid: u32) -> Option<u16> {
        self.of(sid, "status").first().and_then(|s| s.parse().ok())
    }

    pub fn interim(&self, sid: u32) -> Vec<u16> {
        self.of(sid, "interim")
            .iter()
            .filter_map(|s| s.parse().ok())
            .collect()
    }

    pub fn headers(&self, sid: u32) -> HashMap<String, String> {
        self.of(sid, "header ")
            .iter()
            .filter_map(|l| l.split_once(": "))
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    pub fn header(&self, sid: u32, name: &str) -> Option<String> {
        self.headers(sid).get(name).cloned()
    }

    pub fn body_len(&self, sid: u32) -> usize {
        self.of(sid, "body_len")
            .first()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    pub fn body_sha(&self, sid: u32) -> Option<String> {
        self.of(sid, "body_sha256").first().map(|s| s.to_string())
    }

    /// Whether the body of `sid` is `want`, every byte (its SHA-256, as the client computed it).
    pub fn body_is(&self, sid: u32, want: &[u8]) -> bool {
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, want);
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        self.body_len(sid) == want.len() && self.body_sha(sid) == Some(hex)
    }

    /// The first 4 KiB of the body.
    pub fn body(&self, sid: u32) -> Vec<u8> {
        let hex = self.of(sid, "body_hex").first().copied().unwrap_or("");
        (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect()
    }

    pub fn body_text(&self, sid: u32) -> String {
        String::from_utf8_lossy(&self.body(sid)).into_owned()
    }

    pub fn trailers(&self, sid: u32) -> HashMap<String, String> {
        self.of(sid, "trailer ")
            .iter()
            .filter_map(|l| l.split_once(": "))
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    pub fn reset(&self, sid: u32) -> Option<u32> {
        self.of(sid, "reset").first().and_then(|s| s.parse().ok())
    }

    pub fn ended(&self, sid: u32) -> bool {
        self.lines
            .iter()
            .any(|l| *l == format!("stream {sid} ended"))
    }

    /// The GOAWAY received: (code, last stream).
    pub fn goaway(&self) -> Option<(u32, u32)> {
        let l = self.lines.iter().find_map(|l| l.strip_prefix("goaway "))?;
        let (c, s) = l.split_once(' ')?;
        Some((c.parse().ok()?, s.parse().ok()?))
    }

    pub fn closed(&self) -> bool {
        self.lines.iter().any(|l| l == "closed")
    }
}

/// Runs `client.py --port PORT ARGS...` (bounded by 30 s).
pub fn client(port: u16, args: &[&str]) -> Reply {
    let mut cmd = Command::new(PYTHON);
    cmd.arg(script("client.py"))
        .arg("--port")
        .arg(port.to_string())
        .args(args);
    let (out, err, _) = run(&mut cmd, Duration::from_secs(30));
    Reply {
        lines: out.lines().map(str::to_string).collect(),
        stderr: err,
    }
}

/// The body of a response's head, as `curl` printed it with `-i` (bounded by 20 s): (stdout,
/// stderr, exit 0).
pub fn curl(args: &[&str]) -> (String, String, bool) {
    run(Command::new("curl").args(args), Duration::from_secs(20))
}
