//! The status page in a real browser, for `tests/control/status_page.rs` and
//! `tests/http/metrics.rs`: headless Chromium loads a page, its scripts run for some virtual time
//! and `--dump-dom` gives the DOM they left; helpers read that DOM; a `Gate` in front of the admin
//! listener runs traffic through quill just before it answers the page's second poll.
//!
//! Needs Debian's `chromium` at /usr/bin/chromium (`scripts/test` installs it). Without it a test
//! that calls `dump_dom` fails: it never skips.

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::{scratch_dir, set_timeouts, try_read_until_eof, IO_TIMEOUT};

pub const CHROMIUM: &str = "/usr/bin/chromium";
/// A Chromium run that takes longer than this is killed and the test fails.
pub const CHROMIUM_DEADLINE: Duration = Duration::from_secs(90);

// ---------------------------------------------------------------------------------------------
// Chromium
// ---------------------------------------------------------------------------------------------

/// Loads `url` in headless Chromium, lets the page's scripts run for `budget_ms` of virtual time
/// and returns the DOM they left. Chromium runs in a process group of its own, with a fresh
/// profile, and the whole group is killed by its id when done or after `CHROMIUM_DEADLINE`.
pub fn dump_dom(url: &str, budget_ms: u32) -> String {
    assert!(
        Path::new(CHROMIUM).exists(),
        "the status page tests need headless Chromium at {CHROMIUM}, which is missing: \
         install Debian's package with `apt-get install -y chromium` (scripts/test does)"
    );
    let dir = scratch_dir();
    let out = dir.path().join("dom.html");
    let err = dir.path().join("chromium.err");
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
        ])
        .arg(format!(
            "--user-data-dir={}",
            dir.path().join("profile").display()
        ))
        .arg(format!("--virtual-time-budget={budget_ms}"))
        .arg("--dump-dom")
        .arg(url)
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out).unwrap())
        .stderr(fs::File::create(&err).unwrap())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {CHROMIUM}: {e}"));
    let group = child.id();
    let deadline = Instant::now() + CHROMIUM_DEADLINE;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for chromium") {
            break Some(st);
        }
        if Instant::now() >= deadline {
            break None;
        }
        thread::sleep(Duration::from_millis(50));
    };
    // Whatever is left of the group (renderer, zygote) goes too.
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{group}")])
        .stderr(Stdio::null())
        .status();
    let _ = child.wait();
    let stderr = fs::read_to_string(&err).unwrap_or_default();
    let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
    let Some(status) = status else {
        panic!("chromium still running after {CHROMIUM_DEADLINE:?}; stderr tail:\n{tail:#?}");
    };
    let dom = fs::read_to_string(&out).unwrap_or_default();
    assert!(
        status.success() && dom.contains("</html>"),
        "chromium {status} gave no DOM for {url}; stderr tail:\n{tail:#?}"
    );
    dom
}

// ---------------------------------------------------------------------------------------------
// Reading the DOM (as Chromium serializes it: attributes quoted with ", & and " escaped)
// ---------------------------------------------------------------------------------------------

/// The start tag of the first element whose tag contains `needle`.
pub fn tag<'a>(html: &'a str, needle: &str) -> Option<&'a str> {
    let at = html.find(needle)?;
    let start = html[..=at].rfind('<')?;
    let end = at + html[at..].find('>')?;
    Some(&html[start..=end])
}

/// The value of attribute `name` in a start tag, unescaped.
pub fn attr(tag: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let start = tag.find(&key)? + key.len();
    let len = tag[start..].find('"')?;
    Some(
        tag[start..start + len]
            .replace("&quot;", "\"")
            .replace("&amp;", "&"),
    )
}

/// The numbers a chart series drew (its `data-values`).
pub fn series_values(dom: &str, needle: &str) -> Vec<f64> {
    let t = tag(dom, needle).unwrap_or_else(|| panic!("no chart series {needle} in DOM:\n{dom}"));
    let values = attr(t, "data-values").unwrap_or_default();
    values
        .split(',')
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("bad chart value {v:?} in {t}"))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// A gate in front of the admin listener: it forwards the page's requests and runs traffic through
// quill just before answering the page's second poll, so the test knows exactly what the page
// saw change between two of its own samples.
// ---------------------------------------------------------------------------------------------

pub struct Gate {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Requests for the page itself (`/`) the gate forwarded.
    pub pages: Arc<AtomicUsize>,
    /// Requests for `/api/status` the gate forwarded.
    pub polls: Arc<AtomicUsize>,
    /// What went wrong in a gate thread, if anything.
    pub error: Arc<Mutex<Option<String>>>,
}

impl Gate {
    pub fn start(
        admin: SocketAddr,
        traffic: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) -> Gate {
        Gate::start_with(admin, traffic, None)
    }

    /// A gate that adds `script` (JavaScript, run after the page's own) to the page it serves,
    /// so a test can drive the page's drawing and read back what the browser laid out.
    pub fn with_script(admin: SocketAddr, script: &str) -> Gate {
        Gate::start_with(admin, || Ok(()), Some(Arc::new(script.to_string())))
    }

    fn start_with(
        admin: SocketAddr,
        traffic: impl Fn() -> Result<(), String> + Send + Sync + 'static,
        script: Option<Arc<String>>,
    ) -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let gate = Gate {
            addr: listener.local_addr().unwrap(),
            stop: Arc::new(AtomicBool::new(false)),
            pages: Arc::new(AtomicUsize::new(0)),
            polls: Arc::new(AtomicUsize::new(0)),
            error: Arc::new(Mutex::new(None)),
        };
        let (stop, pages, polls, error) = (
            gate.stop.clone(),
            gate.pages.clone(),
            gate.polls.clone(),
            gate.error.clone(),
        );
        let traffic = Arc::new(traffic);
        thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                let Ok((client, _)) = listener.accept() else {
                    thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let (pages, polls, error, traffic, script) = (
                    pages.clone(),
                    polls.clone(),
                    error.clone(),
                    traffic.clone(),
                    script.clone(),
                );
                thread::spawn(move || {
                    let result = forward(client, admin, script.as_deref(), |path| {
                        match path {
                            "/" => {
                                pages.fetch_add(1, Ordering::SeqCst);
                            }
                            "/api/status" if polls.fetch_add(1, Ordering::SeqCst) + 1 == 2 => {
                                traffic()?;
                            }
                            _ => {}
                        }
                        Ok(())
                    });
                    if let Err(e) = result {
                        error.lock().unwrap().get_or_insert(e);
                    }
                });
            }
        });
        gate
    }

    /// The page's address through the gate.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Fails the test with what went wrong in a gate thread, if anything did.
    pub fn check(&self) {
        if let Some(e) = self.error.lock().unwrap().as_ref() {
            panic!("gate: {e}");
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Reads one request head from `client`, calls `before(path)`, sends the head to the admin
/// listener and copies its answer back (the admin listener closes after each answer).
fn forward(
    mut client: TcpStream,
    admin: SocketAddr,
    script: Option<&String>,
    before: impl Fn(&str) -> Result<(), String>,
) -> Result<(), String> {
    client.set_nonblocking(false).map_err(|e| e.to_string())?;
    set_timeouts(&client, IO_TIMEOUT);
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match client.read(&mut byte) {
            // Chromium opens spare connections it may never use.
            Ok(0) | Err(_) if head.is_empty() => return Ok(()),
            Ok(0) | Err(_) => return Err("client went away mid-request".into()),
            Ok(_) => head.push(byte[0]),
        }
        if head.len() > 16 * 1024 {
            return Err("request head over 16 KiB".into());
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let path = text.split(' ').nth(1).unwrap_or("").to_string();
    before(&path)?;
    let mut upstream = TcpStream::connect(admin).map_err(|e| format!("connect admin: {e}"))?;
    set_timeouts(&upstream, IO_TIMEOUT);
    upstream.write_all(&head).map_err(|e| e.to_string())?;
    let (answer, end) = try_read_until_eof(&mut upstream, IO_TIMEOUT, 16 << 20);
    end.map_err(|e| format!("admin answer to {path}: {e}"))?;
    let answer = match script {
        Some(script) if path == "/" => with_script(&answer, script)?,
        _ => answer,
    };
    client.write_all(&answer).map_err(|e| e.to_string())?;
    Ok(())
}

/// The admin listener's answer `page` with `<script>` + `script` added before `</body>`, and its
/// Content-Length set to match.
fn with_script(page: &[u8], script: &str) -> Result<Vec<u8>, String> {
    let text = String::from_utf8_lossy(page);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or("the page's answer has no head end")?;
    let body = body.replacen("</body>", &format!("<script>{script}</script></body>"), 1);
    let head: Vec<String> = head
        .split("\r\n")
        .map(|line| {
            if line.to_ascii_lowercase().starts_with("content-length:") {
                format!("Content-Length: {}", body.len())
            } else {
                line.to_string()
            }
        })
        .collect();
    Ok(format!("{}\r\n\r\n{body}", head.join("\r\n")).into_bytes())
}
