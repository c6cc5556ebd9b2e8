//! What every test here does: start Quill with an HTTP/2 listener (h2c, or TLS with ALPN h2) in
//! front of a test backend, and run one of the Python scripts beside this file against it, waiting
//! a bounded time and killing the script by its PID past it.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread;
use std::time::{Duration, Instant};

use crate::http_support::{toml_config, Backend};
use crate::support::{Quill, QuillProcess};
use crate::tls_support::{self_signed, toml_path, KeyAlg};

/// Debian's python3, which has python3-h2 (a `python3` earlier on PATH may lack it).
const PYTHON: &str = "/usr/bin/python3";

/// Turns of this binary's tests: the attack tests measure latency and memory, so each runs with
/// no other test of this binary beside it; the conformance cases share theirs.
static TURN: RwLock<()> = RwLock::new(());

/// A conformance case's turn (a test that failed while holding one does not stop the others).
pub fn shared_turn() -> RwLockReadGuard<'static, ()> {
    TURN.read().unwrap_or_else(|e| e.into_inner())
}

/// An attack test's turn: alone.
pub fn exclusive_turn() -> RwLockWriteGuard<'static, ()> {
    TURN.write().unwrap_or_else(|e| e.into_inner())
}

/// How the client reaches Quill's HTTP/2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Cleartext, prior knowledge (`[listener.http] h2c = true`).
    H2c,
    /// TLS with ALPN h2 (offered by default on a TLS HTTP listener).
    Tls,
}

/// Quill with one HTTP listener on 127.0.0.1 in front of `backend`, speaking HTTP/2 over
/// `transport`; `http` is more lines of `[listener.http]`. Its readiness probe is closed at once.
pub fn start_quill(backend: &Backend, transport: Transport, http: &str) -> QuillProcess {
    let servers = vec![backend.addr().to_string()];
    let (quill, probe, _) = Quill::spawn_first(|dir, port| {
        let log = format!("log = \"{}\"\n", toml_path(&dir.join("access.log")));
        let text = match transport {
            Transport::H2c => toml_config(port, &log, &format!("h2c = true\n{http}"), &servers),
            Transport::Tls => {
                let (cert, key) =
                    self_signed("localhost", &["localhost"], KeyAlg::EcdsaP256).write(dir, "site");
                format!(
                    "{}[listener.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
                    toml_config(port, &log, http, &servers),
                    toml_path(&cert),
                    toml_path(&key)
                )
            }
        };
        let cfg = dir.join("quill.toml");
        std::fs::write(&cfg, text).unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    });
    drop(probe);
    quill
}

/// The arguments that point a script at Quill's listener.
pub fn target_args(quill: &QuillProcess, transport: Transport) -> Vec<String> {
    let mut args = vec!["--port".to_string(), quill.port.to_string()];
    if transport == Transport::Tls {
        args.push("--tls".into());
    }
    args
}

/// A script running in the background: its output is read by two threads so that it never
/// blocks on a full pipe.
pub struct Script {
    child: Child,
    name: String,
    out: thread::JoinHandle<String>,
    err: thread::JoinHandle<String>,
}

/// How a script ended.
pub struct Run {
    pub name: String,
    /// Its exit code; None when it was killed at the deadline (or by a signal).
    pub code: Option<i32>,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Script {
    /// Starts `/usr/bin/python3 tests/h2/SCRIPT ARGS`.
    pub fn spawn(script: &str, args: &[String]) -> Script {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/h2")
            .join(script);
        let mut child = Command::new(PYTHON)
            .arg(&path)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "run {PYTHON} {}: {e} (scripts/test installs python3-h2)",
                    path.display()
                )
            });
        let mut stdout = child.stdout.take().expect("stdout was piped above");
        let mut stderr = child.stderr.take().expect("stderr was piped above");
        let out = thread::spawn(move || {
            let mut s = String::new();
            let _ = stdout.read_to_string(&mut s);
            s
        });
        let err = thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        Script {
            child,
            name: format!("{script} {}", args.join(" ")),
            out,
            err,
        }
    }

    /// Waits at most `within` for the script to end, then kills it (SIGKILL, by its PID).
    pub fn wait(mut self, within: Duration) -> Run {
        let deadline = Instant::now() + within;
        let mut status = None;
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.child.try_wait() {
                status = Some(st);
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let timed_out = status.is_none();
        if timed_out {
            let _ = self.child.kill();
            status = self.child.wait().ok();
        }
        Run {
            name: self.name,
            code: status.and_then(|s| s.code()),
            timed_out,
            stdout: self.out.join().unwrap_or_default(),
            stderr: self.err.join().unwrap_or_default(),
        }
    }
}

/// Runs a script to its end, or kills it after `within`.
pub fn run(script: &str, args: &[String], within: Duration) -> Run {
    Script::spawn(script, args).wait(within)
}

impl Run {
    /// Everything about the run, for a failing assertion.
    pub fn describe(&self) -> String {
        format!(
            "{}: {}\n--- stdout ---\n{}--- stderr ---\n{}",
            self.name,
            if self.timed_out {
                "killed at the deadline".to_string()
            } else {
                format!("exit code {:?}", self.code)
            },
            self.stdout,
            self.stderr
        )
    }

    /// The JSON object the script printed (attacks.py prints one).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("no JSON from {} ({e}):\n{}", self.name, self.describe()))
    }
}
