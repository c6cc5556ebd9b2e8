//! HTTP mode property tests over arbitrary bytes (docs/design.md#http-parsing-rules), at the proxy
//! level: one Quill HTTP listener with short timeouts in front of a recording backend, both started
//! once per property; each case on a fresh client connection.
//!
//! - Request path: arbitrary bytes, valid requests (GET, POST with Content-Length, chunked with
//!   trailers, pipelined pairs, HTTP/1.0, HEAD, hop-by-hop fields, `Expect`, `Upgrade`) and
//!   generated ones, mutated by bit flips, inserted and deleted bytes, grammar bytes and splices
//!   of other requests, sent whole or in pieces, half-closed or not. The client gets well-formed
//!   responses (no more than one per request it sent, plus one) and a close within a bound;
//!   every byte the backend received, read whole per connection, is a sequence of complete strict
//!   requests (`parse_request` with `Host` required, `Body` for each body) without a hop-by-hop
//!   field, a framing lookalike or a field the client's `Connection` named, and with exactly one
//!   framing field when there is a body. The last request of a connection may have its body cut
//!   (bodies stream): that server connection is then closed, never used again.
//! - Response path: the backend answers a valid request with arbitrary bytes, a generated
//!   response or a mutated valid one (every framing, 1xx, 101, 204, 304, answers to HEAD, two
//!   answers at once), whole or in pieces, then closes. The client gets one well-formed response
//!   (1xx heads may come first, a 101 never does since no request asks to upgrade), possibly a
//!   502, or its connection is cut after a well-formed head and a valid part of its body; never
//!   bytes that do not parse, never a chunked body to an HTTP/1.0 client, never bytes after the
//!   response.
//!
//! After every case the Quill process is alive (its PID answers `kill -0` and is no zombie) and
//! its stderr shows no panic. `PROPTEST_CASES=N` runs N cases of each property instead of the
//! default 128, for long searches (`--release`); a failure prints the shrunk input, escaped.
//!
//! The backend is this file's own, not the kit's `Backend` (which stops accepting after five
//! minutes): it lives as long as its property, however many cases that runs, and stops on drop.

use crate::http_support;

use std::cell::{Cell, RefCell};
use std::fmt;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use quill_core::http1::{self, Body, Framing, Limits};

use http_support::{show, start_proxy, Proxy};

/// Short timeouts, so that a case that waits on one ends soon: a head, a body or a response
/// that stalls, and an idle kept-alive client.
const SETTINGS: &str = "header_timeout = \"1s\"\nkeepalive_timeout = \"1s\"\nbody_timeout = \"1s\"\nresponse_timeout = \"1s\"\n";
/// Longest a client waits for Quill to answer or close (every timeout above, several times).
const BOUND: Duration = Duration::from_secs(10);
/// How long a backend connection whose last request is incomplete may take to complete or end.
const SETTLE: Duration = Duration::from_secs(3);
/// Longest the backend lives (a property that runs longer is stopped by its case count first).
const BACKEND_LIFETIME: Duration = Duration::from_secs(4 * 3600);
/// Read timeout of one backend read: how often a backend thread looks at its stop flag.
const TICK: Duration = Duration::from_millis(20);

/// Default case count: the whole file stays well under 60 s on two busy cores.
const DEFAULT_CASES: u32 = 128;

fn config() -> Config {
    Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(DEFAULT_CASES),
        failure_persistence: None,
        // A failing case may wait out a timeout: shrinking is bounded in count and time.
        max_shrink_iters: 400,
        max_shrink_time: 300_000,
        ..Config::default()
    }
}

/// Large limits for reading what Quill sent (it adds fields to heads of up to 16 KiB).
fn strict(require_host: bool) -> Limits {
    Limits {
        max_head: 256 * 1024,
        max_request_line: 256 * 1024,
        max_headers: 10_000,
        require_host,
    }
}

// ---------------------------------------------------------------------------------------------
// The recording backend
// ---------------------------------------------------------------------------------------------

/// Every byte one backend connection received, and whether it has ended.
#[derive(Default)]
struct ConnRecord {
    bytes: Mutex<Vec<u8>>,
    ended: AtomicBool,
}

/// What the backend answers each complete request with.
#[derive(Clone)]
enum Answer {
    /// 200 with a short Content-Length body (none to HEAD); keeps the connection unless the
    /// request closes it.
    Echo,
    /// These bytes (the current case's), in pieces cut at these offsets, then a close.
    Script(Arc<Mutex<(Vec<u8>, Vec<usize>)>>),
}

/// A backend on 127.0.0.1:0 that records every byte per connection. Stops on drop.
struct Recorder {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<Arc<ConnRecord>>>>,
    accept: Option<thread::JoinHandle<()>>,
}

impl Recorder {
    fn start(answer: Answer) -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<Arc<ConnRecord>>>> = Arc::default();
        let (stop2, conns2) = (stop.clone(), conns.clone());
        let accept = thread::spawn(move || {
            let born = Instant::now();
            let mut threads = Vec::new();
            while !stop2.load(Ordering::SeqCst) && born.elapsed() < BACKEND_LIFETIME {
                match listener.accept() {
                    Ok((s, _)) => {
                        let rec = Arc::new(ConnRecord::default());
                        conns2.lock().unwrap().push(rec.clone());
                        let (stop3, answer) = (stop2.clone(), answer.clone());
                        threads.push(thread::spawn(move || {
                            serve(s, &rec, &stop3, &answer);
                            rec.ended.store(true, Ordering::SeqCst);
                        }));
                        // Reap the threads of ended connections (a long run makes thousands).
                        threads.retain(|t| !t.is_finished());
                    }
                    Err(_) => thread::sleep(Duration::from_millis(2)),
                }
            }
            drop(listener);
            for t in threads {
                let _ = t.join();
            }
        });
        Recorder {
            addr,
            stop,
            conns,
            accept: Some(accept),
        }
    }

    /// The connections from the `from`th on.
    fn conns_from(&self, from: usize) -> Vec<Arc<ConnRecord>> {
        let all = self.conns.lock().unwrap();
        all.get(from..).unwrap_or_default().to_vec()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

/// Serves one backend connection: records what arrives, answers each complete request (read
/// leniently: the strict checks are the test's, on the recorded bytes).
fn serve(mut s: TcpStream, rec: &ConnRecord, stop: &AtomicBool, answer: &Answer) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(TICK));
    let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
    let born = Instant::now();
    let mut buf = Vec::new();
    let mut tmp = vec![0u8; 64 * 1024];
    while !stop.load(Ordering::SeqCst) && born.elapsed() < BACKEND_LIFETIME {
        match s.read(&mut tmp) {
            Ok(0) => return,
            Ok(n) => {
                rec.bytes.lock().unwrap().extend_from_slice(&tmp[..n]);
                buf.extend_from_slice(&tmp[..n]);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(_) => return,
        }
        // Every complete request in the buffer, in order (bounded by the buffer's length).
        for _ in 0..buf.len() + 1 {
            let Ok(Some(h)) = http1::parse_request(&buf, &strict(false)) else {
                if http1::parse_request(&buf, &strict(false)).is_err() {
                    return;
                }
                break;
            };
            let mut body = Body::new(h.framing);
            let fed = match body.feed(&buf[h.len..]) {
                Ok(f) => f,
                Err(_) => return,
            };
            if !fed.done {
                break;
            }
            let head_only = h.method == http1::Method::Head;
            buf.drain(..h.len + fed.used);
            match answer {
                Answer::Echo => {
                    let text = format!("got {} payload bytes\n", fed.payload);
                    let close = !h.keep_alive();
                    let mut out = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{}\r\n",
                        text.len(),
                        if close { "Connection: close\r\n" } else { "" }
                    )
                    .into_bytes();
                    if !head_only {
                        out.extend_from_slice(text.as_bytes());
                    }
                    if s.write_all(&out).is_err() || close {
                        let _ = s.shutdown(Shutdown::Write);
                        drain_until_closed(&mut s, rec, stop);
                        return;
                    }
                }
                Answer::Script(script) => {
                    let (out, cuts) = script.lock().unwrap().clone();
                    let mut from = 0;
                    for &to in cuts.iter().chain([out.len()].iter()) {
                        if s.write_all(&out[from..to]).is_err() {
                            break;
                        }
                        from = to;
                        if to < out.len() {
                            thread::sleep(Duration::from_millis(2));
                        }
                    }
                    let _ = s.shutdown(Shutdown::Both);
                    return;
                }
            }
        }
    }
}

/// After the backend's half-close: records what still comes until the peer closes (bounded).
fn drain_until_closed(s: &mut TcpStream, rec: &ConnRecord, stop: &AtomicBool) {
    let mut tmp = vec![0u8; 16 * 1024];
    let started = Instant::now();
    while !stop.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(5) {
        match s.read(&mut tmp) {
            Ok(0) => return,
            Ok(n) => rec.bytes.lock().unwrap().extend_from_slice(&tmp[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// What the backend received, checked
// ---------------------------------------------------------------------------------------------

/// How far each backend connection has been checked.
#[derive(Default)]
struct Audit {
    /// Bytes of each connection read as complete requests so far.
    checked: Vec<usize>,
    /// Connections that ended and were read to their end (nothing more to read).
    finished: Vec<bool>,
    /// Every connection before this one is finished (a long run makes thousands).
    low: usize,
}

/// The end of what one connection holds past its checked requests.
#[derive(Debug, PartialEq)]
enum Tail {
    Empty,
    /// Part of a head: it must complete (Quill writes a head whole) or is a bug.
    PartHead,
    /// A whole head and part of its body (bodies stream): the connection must then end.
    CutBody,
}

/// The field names (lowercase) and values of a head.
fn field_list(buf: &[u8], len: usize) -> Vec<(String, String)> {
    http1::fields(buf, len)
        .map(|f| {
            (
                String::from_utf8_lossy(f.name.of(buf)).to_ascii_lowercase(),
                String::from_utf8_lossy(f.value.of(buf)).trim().to_string(),
            )
        })
        .collect()
}

/// The tokens of every `Connection` field, lowercase.
fn connection_tokens(fields: &[(String, String)]) -> Vec<String> {
    fields
        .iter()
        .filter(|(n, _)| n == "connection")
        .flat_map(|(_, v)| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect()
}

/// A name that reads as `Content-Length` or `Transfer-Encoding` once `-` and `_` are dropped,
/// without being one.
fn framing_lookalike(name: &str) -> bool {
    let squashed: String = name.chars().filter(|c| *c != '-' && *c != '_').collect();
    (squashed == "contentlength" || squashed == "transferencoding")
        && name != "content-length"
        && name != "transfer-encoding"
}

/// The rules on one request head a server received (fields lowercase).
fn check_forwarded_head(fields: &[(String, String)], framing: Framing) -> Result<(), String> {
    let tokens = connection_tokens(fields);
    if let Some(t) = tokens
        .iter()
        .find(|t| !matches!(t.as_str(), "close" | "keep-alive" | "upgrade"))
    {
        return Err(format!("the server got a Connection naming {t:?}"));
    }
    for (name, _) in fields {
        if matches!(name.as_str(), "keep-alive" | "proxy-connection" | "te") {
            return Err(format!("the server got the hop-by-hop field {name}"));
        }
        if name == "upgrade" && !tokens.iter().any(|t| t == "upgrade") {
            return Err("the server got Upgrade without Connection: upgrade".into());
        }
        if framing_lookalike(name) {
            return Err(format!("the server got the framing lookalike {name}"));
        }
    }
    let framing_fields = fields
        .iter()
        .filter(|(n, _)| n == "content-length" || n == "transfer-encoding")
        .count();
    let want = usize::from(framing != Framing::None);
    if framing_fields != want {
        return Err(format!(
            "the server got {framing_fields} framing fields for {framing:?}"
        ));
    }
    Ok(())
}

/// The header fields of one request (names lowercase).
type Fields = Vec<(String, String)>;

/// Reads the bytes of one connection from `from`: the complete requests (their end and their
/// fields), then what is left.
fn read_requests(bytes: &[u8], from: usize) -> Result<(usize, Vec<Fields>, Tail), String> {
    let mut at = from;
    let mut heads = Vec::new();
    for _ in 0..bytes.len() + 1 {
        let rest = &bytes[at..];
        if rest.is_empty() {
            return Ok((at, heads, Tail::Empty));
        }
        let h = match http1::parse_request(rest, &strict(true)) {
            Ok(Some(h)) => h,
            Ok(None) => return Ok((at, heads, Tail::PartHead)),
            Err(e) => {
                return Err(format!(
                    "the server got a request that is not strict: {e:?}"
                ))
            }
        };
        let fields = field_list(rest, h.len);
        check_forwarded_head(&fields, h.framing)?;
        let fed = Body::new(h.framing)
            .feed(&rest[h.len..])
            .map_err(|e| format!("the server got a body that is not strict: {e:?}"))?;
        if !fed.done {
            return Ok((at, heads, Tail::CutBody));
        }
        heads.push(fields);
        at += h.len + fed.used;
    }
    Err("read_requests: too many requests".into())
}

impl Audit {
    /// Checks what each connection received since the last audit; returns the fields of the
    /// requests that completed. A connection whose tail is a part of a head or a cut body is
    /// waited for (bounded): the head must complete, a cut body's connection must end.
    fn check(&mut self, rec: &Recorder) -> Result<Vec<Fields>, String> {
        let conns = rec.conns_from(self.low);
        self.checked.resize(self.low + conns.len(), 0);
        self.finished.resize(self.low + conns.len(), false);
        let mut done = Vec::new();
        for (k, c) in conns.iter().enumerate() {
            let i = self.low + k;
            if self.finished[i] {
                continue;
            }
            let deadline = Instant::now() + SETTLE;
            loop {
                // Whether it ended is read first: then every byte it got is in `bytes`.
                let ended = c.ended.load(Ordering::SeqCst);
                let from = self.checked[i];
                let bytes = c.bytes.lock().unwrap()[from..].to_vec();
                let (at, heads, tail) = read_requests(&bytes, 0)
                    .map_err(|e| format!("{e}; backend connection {i} got {}", show(&bytes)))?;
                self.checked[i] = from + at;
                done.extend(heads);
                let settled = match tail {
                    Tail::Empty | Tail::CutBody if ended => {
                        self.finished[i] = true;
                        true
                    }
                    Tail::Empty => true,
                    Tail::PartHead if ended => {
                        return Err(format!(
                            "backend connection {i} ended inside a head: {}",
                            show(&bytes[at..])
                        ))
                    }
                    _ => false,
                };
                if settled {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(format!(
                        "backend connection {i} still open {SETTLE:?} after the case with {tail:?}: {}",
                        show(&bytes[at..])
                    ));
                }
                thread::sleep(Duration::from_millis(10));
            }
        }
        while self.finished.get(self.low) == Some(&true) {
            self.low += 1;
        }
        Ok(done)
    }
}

// ---------------------------------------------------------------------------------------------
// Quill itself
// ---------------------------------------------------------------------------------------------

/// The Quill under test and how much of its stderr was looked at.
struct Rig {
    proxy: Proxy,
    stderr_seen: u64,
}

impl Rig {
    fn start(servers: &[SocketAddr]) -> Rig {
        Rig {
            proxy: start_proxy(SETTINGS, servers),
            stderr_seen: 0,
        }
    }

    /// The process is alive (no exit status, not a zombie, answers `kill -0`) and has written
    /// no panic to stderr since the last look.
    fn alive(&mut self) -> Result<(), String> {
        let pid = self.proxy.pid();
        if let Some(q) = self.proxy.quill.as_mut() {
            if let Some(st) = q.try_exit() {
                return Err(format!("quill (pid {pid}) exited: {st}"));
            }
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_err(|e| format!("quill (pid {pid}): /proc/{pid}/stat: {e}"))?;
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or("?");
        if state == "Z" || state == "X" {
            return Err(format!("quill (pid {pid}) is a zombie ({state})"));
        }
        let st = Command::new("kill")
            .arg("-0")
            .arg(pid.to_string())
            .status()
            .map_err(|e| format!("kill -0 {pid}: {e}"))?;
        if !st.success() {
            return Err(format!("kill -0 {pid} failed: quill is gone"));
        }
        if let Some(q) = &self.proxy.quill {
            let mut f = std::fs::File::open(&q.stderr_path).map_err(|e| e.to_string())?;
            f.seek(SeekFrom::Start(self.stderr_seen))
                .map_err(|e| e.to_string())?;
            let mut new = Vec::new();
            f.read_to_end(&mut new).map_err(|e| e.to_string())?;
            // Only whole lines count as seen (a line being written is read again next time).
            let whole = new.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
            let text = String::from_utf8_lossy(&new[..whole]);
            if let Some(line) = text.lines().find(|l| l.contains("panicked")) {
                return Err(format!("quill panicked: {line}"));
            }
            self.stderr_seen += whole as u64;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------

/// Bytes printed escaped (the shrunk input of a failure is copied from here).
#[derive(Clone)]
struct Bytes(Vec<u8>);

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b\"{}\" ({} bytes)", self.0.escape_ascii(), self.0.len())
    }
}

/// Valid requests to mutate (each a whole message, or two).
const REQUESTS: &[&[u8]] = &[
    b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
    b"GET /p?q=1 HTTP/1.1\r\nHost: a.test\r\nAccept: */*\r\nConnection: X-Hop, keep-alive\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\nProxy-Connection: keep-alive\r\n\r\n",
    b"POST /form HTTP/1.1\r\nHost: a.test\r\nContent-Length: 11\r\nContent-Type: text/plain\r\n\r\nhello world",
    b"PUT /up HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 42\r\n\r\n",
    b"GET /1 HTTP/1.1\r\nHost: a.test\r\n\r\nPOST /2 HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\n\r\nabc",
    b"POST /c HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /after HTTP/1.1\r\nHost: a.test\r\n\r\n",
    b"GET /old HTTP/1.0\r\n\r\n",
    b"POST /old HTTP/1.0\r\nHost: a.test\r\nConnection: keep-alive\r\nContent-Length: 4\r\n\r\nbody",
    b"HEAD /h HTTP/1.1\r\nHost: a.test\r\n\r\nGET /g HTTP/1.1\r\nHost: a.test\r\n\r\n",
    b"POST /e HTTP/1.1\r\nHost: a.test\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
    b"GET http://a.test/abs HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: a.test\r\n\r\n",
    b"GET /u HTTP/1.1\r\nHost: a.test\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
];

/// Valid responses to mutate.
const RESPONSES: &[&[u8]] = &[
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n4;x=y\r\nwiki\r\n5\r\npedia\r\n0\r\nX-Sum: 9\r\n\r\n",
    b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the close",
    b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nclose-delimited",
    b"HTTP/1.1 204 No Content\r\nServer: t\r\n\r\n",
    b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nContent-Length: 10\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n",
    b"HTTP/1.1 500 Internal Server Error\r\nConnection: X-Hop, keep-alive\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nContent-Length: 3\r\n\r\nbad",
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
    b"HTTP/1.1 301 Moved Permanently\r\nLocation: /x\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
];

/// The requests a client sends in the response property, and whether each is HEAD / HTTP/1.0.
const CLIENT_REQUESTS: &[&[u8]] = &[
    b"GET /r HTTP/1.1\r\nHost: a.test\r\n\r\n",
    b"HEAD /r HTTP/1.1\r\nHost: a.test\r\n\r\n",
    b"POST /r HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\n\r\nabc",
    b"GET /r HTTP/1.0\r\n\r\n",
    b"PUT /r HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
];

/// One edit: (kind, position, another seed and offset for a splice, byte).
type Edit = (u8, usize, usize, u8);

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    prop::collection::vec((0u8..5, any::<usize>(), any::<usize>(), any::<u8>()), 0..4)
}

/// Applies the edits: flip a bit, insert a byte, delete a byte, put in a byte that matters to
/// the grammar, or splice in up to 32 bytes of another seed of `pool`.
fn mutate(seed: &[u8], edits: &[Edit], pool: &[&[u8]]) -> Vec<u8> {
    const SPECIAL: &[u8] = b"\r\n \t:,;\0";
    let mut out = seed.to_vec();
    for &(kind, at, other, byte) in edits {
        let at = at % (out.len() + 1);
        match kind {
            0 if at < out.len() => out[at] ^= 1 << (byte % 8),
            1 => out.insert(at, byte),
            2 if at < out.len() => {
                out.remove(at);
            }
            3 => out.insert(at, SPECIAL[byte as usize % SPECIAL.len()]),
            _ => {
                let src = pool[other % pool.len()];
                let from = (other / pool.len()) % src.len();
                let to = (from + 1 + byte as usize % 32).min(src.len());
                out.splice(at..at, src[from..to].iter().copied());
            }
        }
    }
    out
}

/// A short word from a small alphabet that includes the grammar's separators.
fn word(alphabet: &'static [u8], len: std::ops::Range<usize>) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(alphabet), len)
        .prop_map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// A field line (without its CRLF): framing, host and hop-by-hop fields in usual and unusual
/// spellings, or any name and value.
fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(
            &[
                "Host: a.test",
                "Host: [::1]:80",
                "Connection: close",
                "Connection: keep-alive",
                "Connection: X-Hop",
                "Connection: upgrade",
                "Upgrade: h2c",
                "X-Hop: v",
                "Keep-Alive: timeout=1",
                "TE: trailers",
                "Proxy-Connection: close",
                "Transfer-Encoding: chunked",
                "Transfer-Encoding: gzip, chunked",
                "Content_Length: 3",
                "Expect: 100-continue",
                "Trailer: X-T",
                "X-Forwarded-For: 10.0.0.1",
            ][..]
        )
        .prop_map(String::from),
        (0u64..40).prop_map(|n| format!("Content-Length: {n}")),
        (word(b"aZ-_9", 1..6), word(b"a ;=,\t\"9", 0..8)).prop_map(|(n, v)| format!("{n}: {v}")),
    ]
}

/// A chunked body: chunks with and without extensions, the last chunk, trailers.
fn chunked_body() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec((1usize..20, word(b"a=;\" ", 0..4)), 0..4),
        prop::collection::vec((word(b"aT-", 1..4), word(b"v ", 0..4)), 0..2),
    )
        .prop_map(|(chunks, trailers)| {
            let mut out = Vec::new();
            for (size, ext) in chunks {
                let ext = if ext.is_empty() {
                    ext
                } else {
                    format!(";{ext}")
                };
                out.extend(format!("{size:x}{ext}\r\n").as_bytes());
                out.extend(std::iter::repeat_n(b'd', size));
                out.extend(b"\r\n");
            }
            out.extend(b"0\r\n");
            for (name, value) in trailers {
                out.extend(format!("{name}: {value}\r\n").as_bytes());
            }
            out.extend(b"\r\n");
            out
        })
}

/// A whole message from a start line, fields, and a chunked body or a few bytes.
fn message(starts: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(starts),
        prop::collection::vec(field(), 0..6),
        prop_oneof![chunked_body(), prop::collection::vec(any::<u8>(), 0..30)],
    )
        .prop_map(|(start, fields, body)| {
            let mut out = format!("{start}\r\n").into_bytes();
            for f in fields {
                out.extend(format!("{f}\r\n").as_bytes());
            }
            out.extend(b"\r\n");
            out.extend(body);
            out
        })
}

const REQUEST_LINES: &[&str] = &[
    "GET / HTTP/1.1",
    "POST /a?b=c HTTP/1.1",
    "PUT http://a.test/x HTTP/1.1",
    "DELETE /d HTTP/1.0",
    "HEAD /h HTTP/1.1",
    "OPTIONS * HTTP/1.1",
    "PATCH /p HTTP/1.0",
];

const STATUS_LINES: &[&str] = &[
    "HTTP/1.1 200 OK",
    "HTTP/1.0 200 OK",
    "HTTP/1.1 201",
    "HTTP/1.1 204 No Content",
    "HTTP/1.1 304 Not Modified",
    "HTTP/1.1 100 Continue",
    "HTTP/1.1 101 Switching Protocols",
    "HTTP/1.1 404 Not Found",
    "HTTP/1.1 503 Service Unavailable",
];

/// Bytes to send: arbitrary, a mutated seed, a mutated generated message, or two seeds mutated.
fn input(
    seeds: &'static [&'static [u8]],
    starts: &'static [&'static str],
) -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..300),
        3 => (prop::sample::select(seeds), edits()).prop_map(move |(s, e)| mutate(s, &e, seeds)),
        2 => (message(starts), edits()).prop_map(move |(m, e)| mutate(&m, &e, seeds)),
        1 => (prop::sample::select(seeds), prop::sample::select(seeds), edits()).prop_map(
            move |(a, b, e)| mutate(&[a, b].concat(), &e, seeds)
        ),
    ]
    .boxed()
}

/// A request-path case: the bytes, where they are cut into pieces, and whether the client
/// half-closes after sending.
#[derive(Clone)]
struct RequestCase {
    bytes: Bytes,
    cuts: Vec<usize>,
    half_close: bool,
}

impl fmt::Debug for RequestCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "request {:?} in pieces at {:?}, half-close {}",
            self.bytes, self.cuts, self.half_close
        )
    }
}

fn request_case() -> impl Strategy<Value = RequestCase> {
    (
        input(REQUESTS, REQUEST_LINES),
        prop::collection::vec(any::<usize>(), 0..4),
        prop::bool::weighted(0.8),
    )
        .prop_map(|(bytes, cuts, half_close)| RequestCase {
            cuts: pieces(&cuts, bytes.len()),
            bytes: Bytes(bytes),
            half_close,
        })
}

/// Cut offsets in `0..=len`, sorted, each once.
fn pieces(cuts: &[usize], len: usize) -> Vec<usize> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (len + 1)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// A response-path case: what the client asks, and what the backend answers before closing.
#[derive(Clone)]
struct ResponseCase {
    request: usize,
    answer: Bytes,
    /// Where the backend cuts its answer into pieces.
    cuts: Vec<usize>,
}

impl fmt::Debug for ResponseCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "client sends {:?}, the backend answers {:?} in pieces at {:?} and closes",
            Bytes(CLIENT_REQUESTS[self.request].to_vec()),
            self.answer,
            self.cuts
        )
    }
}

fn response_case() -> impl Strategy<Value = ResponseCase> {
    (
        0..CLIENT_REQUESTS.len(),
        input(RESPONSES, STATUS_LINES),
        prop::collection::vec(any::<usize>(), 0..3),
    )
        .prop_map(|(request, answer, cuts)| ResponseCase {
            request,
            cuts: pieces(&cuts, answer.len()),
            answer: Bytes(answer),
        })
}

// ---------------------------------------------------------------------------------------------
// The client side
// ---------------------------------------------------------------------------------------------

/// How the client's reading ended.
#[derive(Clone, Copy, Debug, PartialEq)]
enum End {
    /// Orderly close.
    Eof,
    /// Reset (bytes Quill sent before it may be lost).
    Reset,
}

/// Reads until the connection ends, or `stop` says the bytes are enough; Err if it stays open
/// past `BOUND`.
fn read_all(
    s: &mut TcpStream,
    got: &mut Vec<u8>,
    mut stop: impl FnMut(&[u8]) -> bool,
) -> Result<Option<End>, String> {
    let deadline = Instant::now() + BOUND;
    let mut tmp = vec![0u8; 64 * 1024];
    for _ in 0..1_000_000 {
        if stop(got) {
            return Ok(None);
        }
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        s.set_read_timeout(Some(deadline - now)).unwrap();
        match s.read(&mut tmp) {
            Ok(0) => return Ok(Some(End::Eof)),
            Ok(n) => got.extend_from_slice(&tmp[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                break
            }
            Err(_) => return Ok(Some(End::Reset)),
        }
    }
    Err(format!(
        "quill neither answered nor closed within {BOUND:?}; the client got {}",
        show(got)
    ))
}

/// Whether each request the client sent is HEAD, in order, as far as they parse strictly.
fn sent_heads(sent: &[u8]) -> Vec<bool> {
    let mut out = Vec::new();
    let mut at = 0;
    for _ in 0..sent.len() + 1 {
        let rest = &sent[at..];
        let Ok(Some(h)) = http1::parse_request(rest, &Limits::default()) else {
            break;
        };
        out.push(h.method == http1::Method::Head);
        match Body::new(h.framing).feed(&rest[h.len..]) {
            Ok(f) if f.done => at += h.len + f.used,
            _ => break,
        }
    }
    out
}

/// Names the client asked to be removed (named in a request's `Connection`, and in no request
/// of the case as a field it did not name), minus those the proxy writes itself.
fn hop_names(sent: &[u8]) -> Vec<String> {
    let mut named = Vec::new();
    let mut kept = Vec::new();
    let mut at = 0;
    for _ in 0..sent.len() + 1 {
        let rest = &sent[at..];
        let Ok(Some(h)) = http1::parse_request(rest, &Limits::default()) else {
            break;
        };
        let fields = field_list(rest, h.len);
        let tokens = connection_tokens(&fields);
        for (n, _) in &fields {
            if !tokens.contains(n) {
                kept.push(n.clone());
            }
        }
        named.extend(tokens);
        match Body::new(h.framing).feed(&rest[h.len..]) {
            Ok(f) if f.done => at += h.len + f.used,
            _ => break,
        }
    }
    const OWN: &[&str] = &[
        "close",
        "keep-alive",
        "upgrade",
        "host",
        "content-length",
        "transfer-encoding",
        "x-forwarded-for",
        "x-forwarded-proto",
        "x-forwarded-host",
        "x-request-id",
        "forwarded",
        "via",
    ];
    named.retain(|n| !kept.contains(n) && !OWN.contains(&n.as_str()));
    named
}

/// What the client got on the request path: a sequence of whole well-formed responses (at most
/// one per request that parsed, plus one for the request that did not), the last one cut only
/// by a reset, or close-delimited.
fn check_responses(got: &[u8], heads: &[bool], end: End) -> Result<(), String> {
    let mut at = 0;
    let mut finals = 0;
    for _ in 0..got.len() + 1 {
        if at == got.len() {
            return Ok(());
        }
        let rest = &got[at..];
        let to_head = heads.get(finals).copied().unwrap_or(false);
        let h = match http1::parse_response(rest, &strict(false), to_head) {
            Ok(Some(h)) => h,
            Ok(None) if end == End::Reset => return Ok(()),
            Ok(None) => return Err(format!("a response head cut by a close: {}", show(rest))),
            Err(e) => {
                return Err(format!(
                    "a response that does not parse ({e:?}): {}",
                    show(rest)
                ))
            }
        };
        if h.status >= 200 {
            finals += 1;
            if finals > heads.len() + 1 {
                return Err(format!(
                    "{finals} responses to {} requests: {}",
                    heads.len(),
                    show(got)
                ));
            }
        }
        let mut body = Body::new(h.framing);
        let fed = body.feed(&rest[h.len..]).map_err(|e| {
            format!(
                "a response body that does not parse ({e:?}): {}",
                show(rest)
            )
        })?;
        if !fed.done {
            if end == End::Reset || (h.framing == Framing::Close && body.finish().is_ok()) {
                return Ok(());
            }
            return Err(format!("a response body cut by a close: {}", show(rest)));
        }
        at += h.len + fed.used;
    }
    Err("check_responses: too many responses".into())
}

/// Where reading a response-path answer stands.
#[derive(Debug, PartialEq)]
enum Answered {
    /// Not yet a whole final head.
    Partial,
    /// A final head (its status and framing) and whether its body is complete.
    Final {
        status: u16,
        framing: Framing,
        complete: bool,
        end: usize,
    },
}

/// Reads 1xx heads, then the final head and its body, from what the client got so far.
fn answered(got: &[u8], to_head: bool) -> Result<Answered, String> {
    let mut at = 0;
    for _ in 0..got.len() + 1 {
        let rest = &got[at..];
        let h = match http1::parse_response(rest, &strict(false), to_head) {
            Ok(Some(h)) => h,
            Ok(None) => return Ok(Answered::Partial),
            Err(e) => {
                return Err(format!(
                    "a response that does not parse ({e:?}): {}",
                    show(got)
                ))
            }
        };
        if h.status == 101 {
            return Err(format!(
                "a 101 to a request that asked no upgrade: {}",
                show(got)
            ));
        }
        if h.status < 200 {
            at += h.len;
            continue;
        }
        let mut body = Body::new(h.framing);
        let fed = body
            .feed(&rest[h.len..])
            .map_err(|e| format!("a response body that does not parse ({e:?}): {}", show(got)))?;
        return Ok(Answered::Final {
            status: h.status,
            framing: h.framing,
            complete: fed.done,
            end: at + h.len + fed.used,
        });
    }
    Err("answered: too many interim responses".into())
}

// ---------------------------------------------------------------------------------------------
// The properties
// ---------------------------------------------------------------------------------------------

/// What the cases did, printed after a property (to see that inputs reach every outcome).
#[derive(Debug, Default)]
struct Stats {
    /// Cases by the first status the client got (0: none).
    first_status: std::collections::BTreeMap<u16, u64>,
    /// Requests the backend completed.
    forwarded: u64,
}

impl Stats {
    fn count(&mut self, got: &[u8], forwarded: usize) {
        let status = http1::status_code(got, true).ok().flatten().unwrap_or(0);
        *self.first_status.entry(status).or_default() += 1;
        self.forwarded += forwarded as u64;
    }
}

/// Runs `test` over `strategy` with the file's config; panics with the shrunk input on failure.
fn run<S: Strategy>(name: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), String>)
where
    S::Value: fmt::Debug,
{
    let config = config();
    let cases = config.cases;
    let mut runner = TestRunner::new(config);
    let runs = Cell::new(0u64);
    let started = Instant::now();
    let result = runner.run(&strategy, |v| {
        runs.set(runs.get() + 1);
        test(v).map_err(TestCaseError::fail)
    });
    eprintln!(
        "{name}: {} runs ({cases} cases asked) in {:.1?}: {}",
        runs.get(),
        started.elapsed(),
        if result.is_ok() { "passed" } else { "FAILED" }
    );
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
}

#[test]
fn http_arbitrary_and_mutated_requests_get_well_formed_answers_and_reach_servers_strict() {
    let backend = Recorder::start(Answer::Echo);
    let rig = RefCell::new(Rig::start(&[backend.addr]));
    let audit = RefCell::new(Audit::default());
    audit.borrow_mut().check(&backend).unwrap();
    let addr = rig.borrow().proxy.addr();
    let stats = RefCell::new(Stats::default());
    run("request path", request_case(), |case| {
        let sent = &case.bytes.0;
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .map_err(|e| format!("connect to quill: {e}"))?;
        let _ = s.set_nodelay(true);
        s.set_write_timeout(Some(BOUND)).unwrap();
        let mut from = 0;
        for &to in case.cuts.iter().chain([sent.len()].iter()) {
            if s.write_all(&sent[from..to]).is_err() {
                break;
            }
            from = to;
            if to < sent.len() {
                thread::sleep(Duration::from_millis(2));
            }
        }
        if case.half_close {
            let _ = s.shutdown(Shutdown::Write);
        }
        let mut got = Vec::new();
        let end = read_all(&mut s, &mut got, |_| false)?.unwrap_or(End::Eof);
        drop(s);
        check_responses(&got, &sent_heads(sent), end)?;
        rig.borrow_mut().alive()?;
        let forwarded = audit.borrow_mut().check(&backend)?;
        stats.borrow_mut().count(&got, forwarded.len());
        let hops = hop_names(sent);
        for fields in &forwarded {
            if let Some((n, _)) = fields.iter().find(|(n, _)| hops.contains(n)) {
                return Err(format!(
                    "the server got {n}, which the client's Connection named"
                ));
            }
        }
        Ok(())
    });
    eprintln!("request path: {:?}", stats.borrow());
    rig.borrow_mut().alive().unwrap();
}

#[test]
fn http_arbitrary_and_mutated_responses_reach_clients_well_formed_or_as_502() {
    let script = Arc::new(Mutex::new((Vec::new(), Vec::new())));
    let backend = Recorder::start(Answer::Script(script.clone()));
    let rig = RefCell::new(Rig::start(&[backend.addr]));
    let audit = RefCell::new(Audit::default());
    let addr = rig.borrow().proxy.addr();
    let stats = RefCell::new(Stats::default());
    run("response path", response_case(), |case| {
        *script.lock().unwrap() = (case.answer.0.clone(), case.cuts.clone());
        let request = CLIENT_REQUESTS[case.request];
        let to_head = request.starts_with(b"HEAD ");
        let http10 = request.windows(8).any(|w| w == b"HTTP/1.0");
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .map_err(|e| format!("connect to quill: {e}"))?;
        let _ = s.set_nodelay(true);
        s.set_write_timeout(Some(BOUND)).unwrap();
        s.write_all(request)
            .map_err(|e| format!("sending the request: {e}"))?;
        let mut got = Vec::new();
        let mut bad = None;
        let end = read_all(&mut s, &mut got, |g| match answered(g, to_head) {
            Ok(Answered::Final { complete, .. }) => complete,
            Ok(Answered::Partial) => false,
            Err(e) => {
                bad = Some(e);
                true
            }
        })?;
        if let Some(e) = bad {
            return Err(e);
        }
        let state = answered(&got, to_head)?;
        match (&state, end) {
            (
                Answered::Final {
                    complete: true,
                    end: at,
                    ..
                },
                None,
            ) => {
                // Nothing may follow the one response (the client asked one thing).
                let mut more = [0u8; 1024];
                s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                if let Ok(n @ 1..) = s.read(&mut more) {
                    return Err(format!(
                        "bytes after the response: {} then {}",
                        show(&got[..*at]),
                        show(&more[..n])
                    ));
                }
                if got.len() > *at {
                    return Err(format!("bytes after the response: {}", show(&got)));
                }
            }
            (Answered::Final { framing, .. }, Some(_)) => {
                // A body cut (or close-delimited): the head and what came of the body are valid.
                let _ = framing;
            }
            (Answered::Partial, Some(End::Reset)) => {}
            (Answered::Partial, Some(End::Eof)) => {
                return Err(format!(
                    "the client's connection closed before a whole response: {}",
                    show(&got)
                ))
            }
            (_, None) => return Err(format!("read_all stopped early: {}", show(&got))),
        }
        if let Answered::Final {
            framing: Framing::Chunked,
            status,
            ..
        } = state
        {
            if http10 {
                return Err(format!(
                    "a chunked {status} to an HTTP/1.0 client: {}",
                    show(&got)
                ));
            }
        }
        drop(s);
        rig.borrow_mut().alive()?;
        let forwarded = audit.borrow_mut().check(&backend)?;
        stats.borrow_mut().count(&got, forwarded.len());
        Ok(())
    });
    eprintln!("response path: {:?}", stats.borrow());
    rig.borrow_mut().alive().unwrap();
}

#[test]
fn http_property_checks_catch_what_they_look_for() {
    // The request checks.
    let ok = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n\r\nPOST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi";
    assert_eq!(read_requests(ok, 0).unwrap().2, Tail::Empty);
    assert_eq!(read_requests(&ok[..10], 0).unwrap().2, Tail::PartHead);
    assert_eq!(
        read_requests(&ok[..ok.len() - 1], 0).unwrap().2,
        Tail::CutBody
    );
    for bad in [
        &b"GET / HTTP/1.1\r\nHost: a\r\nKeep-Alive: 1\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: X-Hop\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nContent_Length: 2\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ] {
        assert!(read_requests(bad, 0).is_err(), "{}", show(bad));
    }
    assert_eq!(
        hop_names(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: X-A, close\r\nX-A: 1\r\n\r\n"),
        ["x-a"]
    );
    assert!(hop_names(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: X-A\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n\r\n").is_empty());
    // The response checks.
    let two =
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    assert!(check_responses(two, &[false, false], End::Eof).is_ok());
    assert!(check_responses(two, &[], End::Eof).is_err());
    assert!(check_responses(&two[..30], &[false], End::Eof).is_err());
    assert!(check_responses(&two[..30], &[false], End::Reset).is_ok());
    assert!(check_responses(b"HTTP/1.1 200 OK\r\n\r\nuntil close", &[false], End::Eof).is_ok());
    assert!(check_responses(
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n",
        &[true],
        End::Eof
    )
    .is_ok());
    assert!(check_responses(
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n",
        &[false],
        End::Eof
    )
    .is_err());
    assert!(check_responses(b"junk", &[false], End::Reset).is_err());
    assert!(answered(b"HTTP/1.1 101 Switching Protocols\r\n\r\n", false).is_err());
    assert_eq!(
        answered(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n",
            false
        )
        .unwrap(),
        Answered::Final {
            status: 502,
            framing: Framing::Length(0),
            complete: true,
            end: 72
        }
    );
    assert_eq!(
        sent_heads(b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\nxx"),
        [true, false]
    );
    for seed in REQUESTS {
        assert!(!sent_heads(seed).is_empty(), "{}", show(seed));
    }
}
