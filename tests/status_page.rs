//! The live status page (`/` on the admin listener) in a real browser: headless Chromium loads
//! it, its script runs (`--virtual-time-budget` lets it poll several times in a second or two of
//! real time), and `--dump-dom` gives the DOM the script built. The page must show every listener
//! and server, and its numbers must move when traffic flows, without a reload.
//!
//! Needs Debian's `chromium` at /usr/bin/chromium (`scripts/test` installs it). Without it these
//! tests fail: they never skip.

mod admin_support;
mod support;

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

use admin_support::*;
use support::*;

const CHROMIUM: &str = "/usr/bin/chromium";
/// A Chromium run that takes longer than this is killed and the test fails.
const CHROMIUM_DEADLINE: Duration = Duration::from_secs(90);

// ---------------------------------------------------------------------------------------------
// Chromium
// ---------------------------------------------------------------------------------------------

/// Loads `url` in headless Chromium, lets the page's scripts run for `budget_ms` of virtual time
/// and returns the DOM they left. Chromium runs in a process group of its own, with a fresh
/// profile, and the whole group is killed by its id when done or after `CHROMIUM_DEADLINE`.
fn dump_dom(url: &str, budget_ms: u32) -> String {
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
fn tag<'a>(html: &'a str, needle: &str) -> Option<&'a str> {
    let at = html.find(needle)?;
    let start = html[..=at].rfind('<')?;
    let end = at + html[at..].find('>')?;
    Some(&html[start..=end])
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let start = tag.find(&key)? + key.len();
    let len = tag[start..].find('"')?;
    Some(
        tag[start..start + len]
            .replace("&quot;", "\"")
            .replace("&amp;", "&"),
    )
}

/// An attribute value as it appears in serialized HTML.
fn html_attr(v: &str) -> String {
    v.replace('&', "&amp;").replace('"', "&quot;")
}

/// The `data-value` of the element with `id`.
fn id_value(dom: &str, id: &str) -> f64 {
    let t = tag(dom, &format!(" id=\"{id}\"")).unwrap_or_else(|| panic!("no #{id} in DOM:\n{dom}"));
    attr(t, "data-value")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("#{id} has no numeric data-value: {t}"))
}

/// The `<tr>` of server `key` ("LISTENER/INDEX"), up to its `</tr>`.
fn server_row<'a>(dom: &'a str, key: &str) -> &'a str {
    let needle = format!(" data-server=\"{}\"", html_attr(key));
    let at = dom
        .find(&needle)
        .unwrap_or_else(|| panic!("no row for server {key} in DOM:\n{dom}"));
    let start = dom[..at].rfind("<tr").unwrap();
    let end = at + dom[at..].find("</tr>").expect("row end");
    &dom[start..end]
}

/// The `data-value` of the cell with class `class` in a server row.
fn cell_value(row: &str, class: &str) -> u64 {
    let t =
        tag(row, &format!(" class=\"{class}\"")).unwrap_or_else(|| panic!("no .{class} in {row}"));
    attr(t, "data-value")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!(".{class} has no numeric data-value: {t}"))
}

/// The text inside the element with class `class` in a server row.
fn cell_text<'a>(row: &'a str, class: &str) -> &'a str {
    let t =
        tag(row, &format!(" class=\"{class}\"")).unwrap_or_else(|| panic!("no .{class} in {row}"));
    let start = row.find(t).unwrap() + t.len();
    &row[start..start + row[start..].find('<').unwrap()]
}

/// The numbers a chart series drew (its `data-values`).
fn series_values(dom: &str, needle: &str) -> Vec<f64> {
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

struct Gate {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Requests the gate forwarded, by path.
    pages: Arc<AtomicUsize>,
    polls: Arc<AtomicUsize>,
    /// What went wrong in a gate thread, if anything.
    error: Arc<Mutex<Option<String>>>,
}

impl Gate {
    fn start(
        admin: SocketAddr,
        traffic: impl Fn() -> Result<(), String> + Send + Sync + 'static,
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
                let (pages, polls, error, traffic) =
                    (pages.clone(), polls.clone(), error.clone(), traffic.clone());
                thread::spawn(move || {
                    let result = forward(client, admin, |path| {
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

    fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    fn check(&self) {
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
    client.write_all(&answer).map_err(|e| e.to_string())?;
    Ok(())
}

/// Sends `n` requests through quill, one connection each; any failure is returned.
fn try_http_requests(quill: SocketAddr, n: usize) -> Result<(), String> {
    for i in 0..n {
        let r = try_request(quill, REQUEST).map_err(|e| format!("request {i}: {e}"))?;
        if r.status != 200 {
            return Err(format!("request {i}: {}", r.head));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn status_page_shows_every_listener_and_server() {
    let backends: Vec<DemoServer> = ["a", "b", "c"].iter().map(|n| http(n)).collect();
    let servers: Vec<String> = backends.iter().map(|b| spec(b.addr())).collect();
    let (q, admin) =
        start_with_admin(|dir, port, admin| two_listener_config(dir, port, admin, &servers));
    http_requests(q.port, 3);
    let accepted = status_json(admin)["totals"]["accepted"].as_u64().unwrap();

    let dom = dump_dom(&format!("http://{admin}/"), 3000);

    assert!(
        id_value(&dom, "samples") >= 2.0,
        "the page polled only once:\n{dom}"
    );
    let conn = tag(&dom, " id=\"conn\"").unwrap();
    assert!(
        attr(conn, "class").unwrap().contains("live"),
        "connection badge: {conn}"
    );
    assert_eq!(
        id_value(&dom, "accepted"),
        accepted as f64,
        "accepted shown"
    );
    assert!(
        dom.contains(&format!(">{}</span>", env!("CARGO_PKG_VERSION"))),
        "version shown"
    );
    let odd = "odd\"name\\x";
    for listener in ["web", odd] {
        let needle = format!(" data-listener=\"{}\"", html_attr(listener));
        assert!(
            tag(&dom, &needle).is_some(),
            "no section for listener {listener}:\n{dom}"
        );
    }
    for (key, addr) in [
        ("web/0", &servers[0]),
        ("web/1", &servers[1]),
        (&format!("{odd}/0") as &str, &servers[2]),
        (&format!("{odd}/emergency"), &servers[0]),
    ] {
        let row = server_row(&dom, key);
        assert_eq!(cell_text(row, "address"), addr.as_str(), "address of {key}");
        assert_eq!(
            attr(tag(row, "<tr").unwrap(), "data-state").as_deref(),
            Some("up"),
            "{row}"
        );
        assert!(
            row.contains("class=\"badge state-up\""),
            "state badge of {key}: {row}"
        );
    }
    let web_total = cell_value(server_row(&dom, "web/0"), "total")
        + cell_value(server_row(&dom, "web/1"), "total");
    assert!(web_total >= 3, "web servers' totals shown: {web_total}");
    // A listener name is text on the page, never markup.
    assert!(
        dom.contains("odd\"name\\x</span>"),
        "listener name as text:\n{dom}"
    );
}

#[test]
fn status_page_numbers_move_with_traffic_without_a_reload() {
    const N: usize = 12;
    let backends: Vec<DemoServer> = ["a", "b"].iter().map(|n| http(n)).collect();
    let servers: Vec<String> = backends.iter().map(|b| spec(b.addr())).collect();
    let (q, admin) = start_pen_with_admin(&["-r"], &servers);
    let before = metrics(admin);
    let accepted = before.value("quill_sessions_accepted_total", &[]);
    let totals = before.sum("quill_server_sessions_total", &[]);
    let quill = q.addr();
    let gate = Gate::start(admin, move || try_http_requests(quill, N));

    let dom = dump_dom(&gate.url(), 6000);
    gate.check();

    let polls = gate.polls.load(Ordering::SeqCst);
    assert!(polls >= 3, "the page polled {polls} times");
    assert_eq!(
        gate.pages.load(Ordering::SeqCst),
        1,
        "the page was loaded once, never reloaded"
    );
    let n = N as f64;
    assert_eq!(
        id_value(&dom, "accepted"),
        accepted + n,
        "accepted after the traffic"
    );
    let shown: u64 = (0..servers.len())
        .map(|i| cell_value(server_row(&dom, &format!("default/{i}")), "total"))
        .sum();
    assert_eq!(
        shown as f64,
        totals + n,
        "servers' totals after the traffic"
    );
    // The chart's rates come from differences between the page's own samples: a positive one
    // means the page saw the counters move while it stayed loaded.
    for needle in [
        " data-series=\"accepted\"",
        " data-series=\"listener\" data-listener=\"default\"",
    ] {
        let values = series_values(&dom, needle);
        assert!(values.len() >= 2, "chart {needle}: {values:?}");
        assert!(
            values.iter().any(|&v| v > 0.0),
            "chart {needle} never moved: {values:?}"
        );
    }
}
