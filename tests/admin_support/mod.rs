//! Helpers for the admin listener tests (`tests/control/admin.rs`,
//! `tests/control/status_page.rs`): start quill with `--admin`, speak just enough HTTP to it, send
//! traffic through it, and parse the Prometheus text format strictly (a line that breaks the
//! format fails the test, naming the line).
//! `chromium` drives the status page in headless Chromium.

pub mod chromium;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

/// The request the traffic helpers send through quill (the demo HTTP backend answers and closes).
pub const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: quill-test\r\nConnection: close\r\n\r\n";

/// Starts quill with `build(dir, port)` plus `--admin 127.0.0.1:APORT`, waits until the listener
/// accepts and the admin listener answers `/metrics`; returns the process and the admin address.
/// Retried (bounded) when a picked port turned out to be in use.
pub fn start_with_admin(
    build: impl Fn(&Path, u16, SocketAddr) -> Vec<String>,
) -> (QuillProcess, SocketAddr) {
    let mut last = String::new();
    for _attempt in 0..3 {
        let admin = Cell::new(SocketAddr::from(([127, 0, 0, 1], 0)));
        let mut q = Quill::start_with(|dir, port| {
            let a = SocketAddr::from(([127, 0, 0, 1], free_port()));
            admin.set(a);
            build(dir, port, a)
        });
        match wait_admin(&mut q, admin.get()) {
            Ok(()) => return (q, admin.get()),
            Err(e) if e.contains("in use") => last = e,
            Err(e) => panic!("{e}"),
        }
    }
    panic!("could not start quill with an admin listener: {last}");
}

/// Pen-form quill (`-l DIR/access.log` included) with `--admin`.
pub fn start_pen_with_admin(opts: &[&str], servers: &[String]) -> (QuillProcess, SocketAddr) {
    start_with_admin(|dir, port, admin| {
        let mut args = vec!["--admin".to_string(), admin.to_string()];
        args.extend(pen_args(dir, port, opts, servers));
        args
    })
}

/// Polls `GET /metrics` (bounded) until it answers 200.
pub fn wait_admin(q: &mut QuillProcess, admin: SocketAddr) -> Result<(), String> {
    let deadline = Instant::now() + READY_TIMEOUT;
    for _ in 0..1000 {
        if let Some(st) = q.try_exit() {
            return Err(format!("quill exited ({st}); stderr:\n{}", q.stderr()));
        }
        if let Ok(r) = try_request(admin, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n") {
            if r.status == 200 {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "admin listener {admin} not answering within {READY_TIMEOUT:?}; stderr:\n{}",
                q.stderr()
            ));
        }
        thread::sleep(Duration::from_millis(20));
    }
    Err("admin readiness loop exhausted".into())
}

/// Arguments for quill with two listeners from a config file: `web` on `port` over `b[0]` and
/// `b[1]`, and `odd"name\x` (a name that needs escaping in labels and HTML) over `b[2]` with
/// `b[0]` as its emergency server; the admin listener on `admin`, the access log in `dir`.
pub fn two_listener_config(dir: &Path, port: u16, admin: SocketAddr, b: &[String]) -> Vec<String> {
    let second = free_port();
    let tables = format!(
        r#"[[listener]]
name = "web"
listen = "127.0.0.1:{port}"
mode = ["roundrobin"]
servers = ["{b0}", "{b1}"]

[[listener]]
name = 'odd"name\x'
listen = "127.0.0.1:{second}"
servers = ["{b2}"]
emergency = "{b0}"
"#,
        b0 = b[0],
        b1 = b[1],
        b2 = b[2],
    );
    admin_config(dir, admin, &tables)
}

/// Arguments for quill with a named pool and a UDP listener: `[[pool]] api` over `b[0]` and
/// `b[1]`; `web`, an HTTP listener on `port` over `b[2]` whose route `/api/` goes to `api`; and
/// `dns`, a UDP listener over `udp` (its own log: one format per file); the admin listener on
/// `admin`, the access logs in `dir`.
pub fn pool_and_udp_config(
    dir: &Path,
    port: u16,
    admin: SocketAddr,
    b: &[String],
    udp: SocketAddr,
) -> Vec<String> {
    let dns = free_port();
    let tables = format!(
        r#"[[pool]]
name = "api"
servers = ["{b0}", "{b1}"]

[[listener]]
name = "web"
listen = "127.0.0.1:{port}"
protocol = "http"
servers = ["{b2}"]

[[listener.route]]
name = "api"
path = "/api/"
pool = "api"

[[listener]]
name = "dns"
listen = "127.0.0.1:{dns}"
protocol = "udp"
servers = ["{udp}"]
log = "{udp_log}"
"#,
        udp_log = dir.join("udp.log").display(),
        b0 = b[0],
        b1 = b[1],
        b2 = b[2],
    );
    admin_config(dir, admin, &tables)
}

/// Writes DIR/quill.toml: the admin listener on `admin`, the access log at DIR/access.log, then
/// `tables`; returns the arguments that start quill with it.
fn admin_config(dir: &Path, admin: SocketAddr, tables: &str) -> Vec<String> {
    let toml = format!(
        "admin = \"{admin}\"\nlog = \"{log}\"\n\n{tables}",
        log = dir.join("access.log").display(),
    );
    let path = dir.join("quill.toml");
    fs::write(&path, toml).unwrap();
    vec!["--config".into(), path.display().to_string()]
}

// ---------------------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------------------

/// An HTTP response read to EOF.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// Status line and headers, without the blank line.
    pub head: String,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The value of header `name` (case-insensitive), if present.
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }
}

/// Sends `raw`, reads the response to EOF (bounded) and parses it.
pub fn try_request(addr: SocketAddr, raw: &[u8]) -> io::Result<Reply> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    set_timeouts(&s, IO_TIMEOUT);
    s.write_all(raw)?;
    let (bytes, end) = try_read_until_eof(&mut s, IO_TIMEOUT, 16 << 20);
    end?;
    parse_reply(&bytes)
}

pub fn parse_reply(bytes: &[u8]) -> io::Result<Reply> {
    let bad = |why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{why}: {:?}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            ),
        )
    };
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of head"))?;
    let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status"))?;
    Ok(Reply {
        status,
        head,
        body: bytes[end + 4..].to_vec(),
    })
}

/// Sends `raw` to `addr` and returns the parsed response; panics on any I/O error.
pub fn request(addr: SocketAddr, raw: &[u8]) -> Reply {
    try_request(addr, raw).unwrap_or_else(|e| panic!("request to {addr}: {e}"))
}

/// `GET path` on the admin listener, with the `Host` a browser would send (`Host: ADDR`).
pub fn get(addr: SocketAddr, path: &str) -> Reply {
    request(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes(),
    )
}

/// `GET /metrics`, checked for status and content type, strictly parsed.
pub fn metrics(admin: SocketAddr) -> Metrics {
    let r = get(admin, "/metrics");
    assert_eq!(r.status, 200, "GET /metrics: {}", r.head);
    let ct = r.header("content-type").unwrap_or_default();
    assert!(
        ct.starts_with("text/plain; version=0.0.4"),
        "/metrics content type: {ct:?}"
    );
    parse_metrics(&r.text())
}

/// `GET /api/status` as JSON.
pub fn status_json(admin: SocketAddr) -> serde_json::Value {
    let r = get(admin, "/api/status");
    assert_eq!(r.status, 200, "GET /api/status: {}", r.head);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/json")
    );
    serde_json::from_slice(&r.body)
        .unwrap_or_else(|e| panic!("/api/status is not JSON ({e}): {}", r.text()))
}

/// Sends `n` HTTP requests through quill on `port`, one connection each, each answered 200 by a
/// demo backend and closed.
pub fn http_requests(port: u16, n: usize) {
    for i in 0..n {
        let mut s = connect_port(port);
        write_all(&mut s, REQUEST);
        let got = read_until_eof(&mut s, IO_TIMEOUT);
        let reply = parse_reply(&got).unwrap_or_else(|e| panic!("request {i} through quill: {e}"));
        assert_eq!(
            reply.status, 200,
            "request {i} through quill: {}",
            reply.head
        );
    }
}

/// Reads until `pred` holds for the metrics (bounded); returns them, or panics with the last.
pub fn wait_metrics(admin: SocketAddr, what: &str, pred: impl Fn(&Metrics) -> bool) -> Metrics {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = metrics(admin);
        if pred(&m) {
            return m;
        }
        assert!(
            Instant::now() < deadline,
            "metrics never showed {what} within 10 s:\n{}",
            m.text
        );
        thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------------
// Prometheus text format 0.0.4
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

#[derive(Debug, Clone)]
pub struct Family {
    pub name: String,
    pub help: String,
    pub kind: String,
    pub samples: Vec<Sample>,
}

#[derive(Debug, Clone)]
pub struct Metrics {
    pub families: Vec<Family>,
    pub text: String,
}

/// Parses an exposition, panicking (with the line) on anything the format does not allow: a
/// sample outside its family, a family without HELP and TYPE or seen twice, a bad name, label or
/// value.
pub fn parse_metrics(text: &str) -> Metrics {
    assert!(text.ends_with('\n'), "exposition must end with a newline");
    let mut families: Vec<Family> = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((no, line)) = lines.next() {
        let at = |why: &str| format!("/metrics line {}: {why}: {line:?}", no + 1);
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            assert!(is_metric_name(name), "{}", at("bad name"));
            assert!(
                families.iter().all(|f| f.name != name),
                "{}",
                at("family seen twice")
            );
            let (_, ty) = lines.next().unwrap_or_else(|| panic!("{}", at("no TYPE")));
            let kind = ty
                .strip_prefix(&format!("# TYPE {name} "))
                .unwrap_or_else(|| panic!("{}", at("HELP not followed by its TYPE")));
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{}",
                at("unknown type")
            );
            families.push(Family {
                name: name.to_string(),
                help: help.to_string(),
                kind: kind.to_string(),
                samples: Vec::new(),
            });
            continue;
        }
        assert!(!line.starts_with('#'), "{}", at("stray comment"));
        assert!(!line.is_empty(), "{}", at("empty line"));
        let sample = parse_sample(line).unwrap_or_else(|e| panic!("{}", at(&e)));
        let family = families
            .last_mut()
            .unwrap_or_else(|| panic!("{}", at("sample before any family")));
        let allowed = if family.kind == "histogram" {
            ["_bucket", "_sum", "_count"]
                .iter()
                .any(|s| sample.name == format!("{}{s}", family.name))
        } else {
            sample.name == family.name
        };
        assert!(allowed, "{}", at(&format!("not in family {}", family.name)));
        family.samples.push(sample);
    }
    Metrics {
        families,
        text: text.to_string(),
    }
}

fn is_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("no value after the name")?;
    let name = &line[..name_end];
    if !is_metric_name(name) {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(r) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(r)?;
        labels = parsed;
        rest = after;
    }
    let value = rest.strip_prefix(' ').ok_or("no space before the value")?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().map_err(|_| format!("bad value {v:?}"))?,
    };
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Parses `k="v",...}` and returns the labels and what follows the closing brace.
fn parse_labels(mut s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    loop {
        if let Some(after) = s.strip_prefix('}') {
            return Ok((labels, after));
        }
        let (key, rest) = s.split_once("=\"").ok_or("label without =\"")?;
        if !is_metric_name(key) || key.contains(':') {
            return Err(format!("bad label name {key:?}"));
        }
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("bad escape {other:?} in label {key}")),
                },
                Some((_, '\n')) | None => return Err(format!("unterminated label {key}")),
                Some((_, c)) => value.push(c),
            }
        };
        if labels.insert(key.to_string(), value).is_some() {
            return Err(format!("label {key} twice"));
        }
        s = &rest[end + 1..];
        s = s.strip_prefix(',').unwrap_or(s);
    }
}

impl Metrics {
    pub fn family(&self, name: &str) -> &Family {
        self.families
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("no metric family {name} in:\n{}", self.text))
    }

    /// Samples named `name` whose labels include all of `labels`.
    pub fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.families
            .iter()
            .flat_map(|f| &f.samples)
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The one sample named `name` with `labels` among its labels.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        match self.samples(name, labels).as_slice() {
            [one] => one.value,
            many => panic!(
                "{} samples {name} with {labels:?} (want exactly 1):\n{}",
                many.len(),
                self.text
            ),
        }
    }

    /// Sum of the samples named `name` with `labels` among their labels.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples(name, labels).iter().map(|s| s.value).sum()
    }
}

/// Checks histogram `name`: `le` bounds strictly ascending ending with +Inf, bucket counts
/// cumulative (never decreasing), the +Inf bucket equal to `_count`. Returns `_count`.
pub fn check_histogram(m: &Metrics, name: &str) -> f64 {
    let f = m.family(name);
    assert_eq!(f.kind, "histogram", "{name} type");
    let buckets = m.samples(&format!("{name}_bucket"), &[]);
    assert!(buckets.len() >= 2, "{name}: only {} buckets", buckets.len());
    let les: Vec<f64> = buckets
        .iter()
        .map(|b| {
            let le = b
                .labels
                .get("le")
                .unwrap_or_else(|| panic!("{name} bucket without le"));
            if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse()
                    .unwrap_or_else(|_| panic!("{name}: bad le {le:?}"))
            }
        })
        .collect();
    assert!(
        les.windows(2).all(|w| w[0] < w[1]),
        "{name}: le not ascending: {les:?}"
    );
    assert_eq!(
        les.last(),
        Some(&f64::INFINITY),
        "{name}: last bucket is not +Inf"
    );
    let counts: Vec<f64> = buckets.iter().map(|b| b.value).collect();
    assert!(
        counts.windows(2).all(|w| w[0] <= w[1]),
        "{name}: buckets not cumulative: {counts:?}"
    );
    let count = m.value(&format!("{name}_count"), &[]);
    assert_eq!(counts.last(), Some(&count), "{name}: +Inf bucket != _count");
    let sum = m.value(&format!("{name}_sum"), &[]);
    assert!(sum >= 0.0, "{name}_sum negative: {sum}");
    count
}
