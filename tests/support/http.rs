//! HTTP test kit for the HTTP-mode integration tests: a scripted HTTP/1.1 backend that records
//! every byte it receives, a small client that reads one response by its framing, and starting
//! the proxy under test (Quill, or HAProxy in `mode http` as a reference when
//! `QUILL_HTTP_REFERENCE=haproxy` is set, to see that a test passes on a correct proxy).
//!
//! Declared once per test binary, in its main.rs, as `http_support` next to `support`.
//! Everything is std threads and blocking sockets with timeouts: every loop is bounded in count
//! and time, every thread stops when its owner is dropped, every process is stopped by its PID.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use quill_core::http1::{self, Body, Framing, Limits};

use crate::support::{pen_args, Quill, QuillProcess};

/// Longest a backend connection lives (a test that runs longer has failed anyway).
const CONN_LIFETIME: Duration = Duration::from_secs(60);
/// Read timeout of one backend read: how often a backend connection looks at its stop flag.
const TICK: Duration = Duration::from_millis(50);
/// Default deadline of a client read.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// Requests as the backend saw them
// ---------------------------------------------------------------------------------------------

/// One request the backend received and parsed.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// Index of the backend connection it came on (0 = first accepted).
    pub conn: usize,
    /// Index of the request on that connection.
    pub index: usize,
    pub method: String,
    pub target: String,
    pub version: String,
    /// Header fields in order, names as received.
    pub headers: Vec<(String, String)>,
    /// The head exactly as received.
    pub raw_head: Vec<u8>,
    /// The body as received (chunk framing included).
    pub raw_body: Vec<u8>,
    /// The payload (chunks decoded).
    pub body: Vec<u8>,
    /// Trailer fields of a chunked body.
    pub trailers: Vec<(String, String)>,
}

impl Request {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of header `name`, in order.
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn has(&self, name: &str) -> bool {
        self.header(name).is_some()
    }

    pub fn expects_continue(&self) -> bool {
        self.header("expect")
            .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    }
}

/// Header fields of a head that `quill_core::http1` accepted.
fn head_fields(buf: &[u8], len: usize) -> Vec<(String, String)> {
    http1::fields(buf, len)
        .map(|f| {
            (
                String::from_utf8_lossy(f.name.of(buf)).into_owned(),
                String::from_utf8_lossy(f.value.of(buf)).into_owned(),
            )
        })
        .collect()
}

/// Decodes a complete chunked body (as `Body` accepted it): (payload, trailer fields).
pub fn dechunk(raw: &[u8]) -> (Vec<u8>, Vec<(String, String)>) {
    let mut out = Vec::new();
    let mut pos = 0;
    for _ in 0..raw.len() + 1 {
        let Some(eol) = raw[pos..].windows(2).position(|w| w == b"\r\n") else {
            break;
        };
        let line = &raw[pos..pos + eol];
        let size_text = line.split(|&b| b == b';').next().unwrap_or_default();
        let size_text = String::from_utf8_lossy(size_text);
        let size = usize::from_str_radix(size_text.trim(), 16).unwrap_or(0);
        pos += eol + 2;
        if size == 0 {
            break;
        }
        let end = (pos + size).min(raw.len());
        out.extend_from_slice(&raw[pos..end]);
        pos = end + 2;
        if pos > raw.len() {
            break;
        }
    }
    let mut trailers = Vec::new();
    for line in raw.get(pos..).unwrap_or_default().split(|&b| b == b'\n') {
        let line = String::from_utf8_lossy(line);
        let line = line.trim_end_matches('\r');
        if let Some((n, v)) = line.split_once(':') {
            trailers.push((n.to_string(), v.trim().to_string()));
        }
    }
    (out, trailers)
}

// ---------------------------------------------------------------------------------------------
// The scripted backend
// ---------------------------------------------------------------------------------------------

/// A permit counter a test uses to pace a backend (SSE events, a response held back).
#[derive(Clone, Default)]
pub struct Gate(Arc<(Mutex<u32>, Condvar)>);

impl Gate {
    pub fn new() -> Gate {
        Gate::default()
    }

    /// Lets one waiter through.
    pub fn open_once(&self) {
        let (m, cv) = &*self.0;
        *m.lock().unwrap() += 1;
        cv.notify_all();
    }

    /// Waits (at most `within`) for a permit and takes it; false on timeout.
    pub fn pass(&self, within: Duration) -> bool {
        let (m, cv) = &*self.0;
        let deadline = Instant::now() + within;
        let mut n = m.lock().unwrap();
        while *n == 0 {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            n = cv.wait_timeout(n, deadline - now).unwrap().0;
        }
        *n -= 1;
        true
    }
}

/// One thing a backend does in answer to a request.
#[derive(Clone)]
pub enum Step {
    /// Writes these bytes.
    Send(Vec<u8>),
    Sleep(Duration),
    /// Waits (at most 10 s) for the test to open the gate once.
    Wait(Gate),
    /// Aborts the connection: SO_LINGER 0, then close (the peer sees a reset).
    Reset,
    /// Closes the connection (orderly).
    Close,
    /// Never answers: keeps reading (and recording) until the peer closes or the backend stops.
    Hang,
}

/// What a backend answers: called with each request once its body has been read.
pub type Handler = Arc<dyn Fn(&Request) -> Vec<Step> + Send + Sync>;

/// Backend options besides the handler.
#[derive(Clone, Default)]
pub struct BackendOptions {
    /// Answer `Expect: 100-continue` with `100 Continue` before reading the body (as servers do).
    /// Off: the backend waits for the body without an interim answer.
    pub no_auto_continue: bool,
    /// Close a kept-alive connection that stays idle this long after a response.
    pub idle_close: Option<Duration>,
}

struct Shared {
    stop: AtomicBool,
    accepted: AtomicUsize,
    /// Bytes received, one entry per accepted connection.
    received: Mutex<Vec<Arc<Mutex<Vec<u8>>>>>,
    requests: Mutex<Vec<Request>>,
    /// Parse errors the backend saw (a proxy should never forward a malformed request).
    errors: Mutex<Vec<String>>,
    /// Connections that ended, by index, and whether the peer closed them (vs. the backend).
    ended: Mutex<Vec<usize>>,
}

/// A scripted HTTP/1.1 backend on 127.0.0.1:0. Stops (and its threads end) on drop.
pub struct Backend {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept_thread: Option<thread::JoinHandle<()>>,
}

impl Backend {
    /// A backend that answers every request with `handler`'s steps.
    pub fn start(handler: impl Fn(&Request) -> Vec<Step> + Send + Sync + 'static) -> Backend {
        Backend::start_with(BackendOptions::default(), handler)
    }

    pub fn start_with(
        opts: BackendOptions,
        handler: impl Fn(&Request) -> Vec<Step> + Send + Sync + 'static,
    ) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind backend");
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            accepted: AtomicUsize::new(0),
            received: Mutex::new(Vec::new()),
            requests: Mutex::new(Vec::new()),
            errors: Mutex::new(Vec::new()),
            ended: Mutex::new(Vec::new()),
        });
        let handler: Handler = Arc::new(handler);
        let sh = shared.clone();
        let accept_thread = thread::spawn(move || {
            let born = Instant::now();
            let mut conns = Vec::new();
            while !sh.stop.load(Ordering::SeqCst) && born.elapsed() < Duration::from_secs(300) {
                match listener.accept() {
                    Ok((s, _)) => {
                        let index = sh.accepted.fetch_add(1, Ordering::SeqCst);
                        let rec = Arc::new(Mutex::new(Vec::new()));
                        sh.received.lock().unwrap().push(rec.clone());
                        let (sh2, h2, o2) = (sh.clone(), handler.clone(), opts.clone());
                        conns.push(thread::spawn(move || {
                            serve(s, index, rec, &sh2, &h2, &o2);
                            sh2.ended.lock().unwrap().push(index);
                        }));
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_millis(5))
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
            drop(listener);
            for c in conns {
                let _ = c.join();
            }
        });
        Backend {
            addr,
            shared,
            accept_thread: Some(accept_thread),
        }
    }

    /// Echo: 200 with a text body listing the request line, each header and the body length.
    pub fn echo() -> Backend {
        Backend::start(|r| vec![Step::Send(echo_response(r))])
    }

    /// 200 with a Content-Length body of `n` pattern bytes (no body to HEAD).
    pub fn fixed(n: usize) -> Backend {
        Backend::start(move |r| vec![Step::Send(fixed_response(r, n))])
    }

    /// Echo, each response with `Connection: close`, then the connection closed.
    pub fn closing() -> Backend {
        Backend::start(|r| {
            let body = echo_text(r);
            vec![
                Step::Send(response(200, "Connection: close\r\n", body.as_bytes())),
                Step::Close,
            ]
        })
    }

    /// Accepts and never answers.
    pub fn silent() -> Backend {
        Backend::start(|_| vec![Step::Hang])
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Waits (bounded) until at least `n` connections were accepted.
    pub fn wait_accepted(&self, n: usize, within: Duration) -> bool {
        wait_until(within, || self.accepted() >= n)
    }

    /// Every byte received, per connection.
    pub fn received(&self) -> Vec<Vec<u8>> {
        self.shared
            .received
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.lock().unwrap().clone())
            .collect()
    }

    /// Total bytes received over all connections.
    pub fn received_total(&self) -> usize {
        self.received().iter().map(Vec::len).sum()
    }

    /// Requests parsed so far, in the order they completed.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Waits (bounded) for at least `n` complete requests; returns them.
    pub fn wait_requests(&self, n: usize, within: Duration) -> Vec<Request> {
        wait_until(within, || self.requests().len() >= n);
        let got = self.requests();
        assert!(
            got.len() >= n,
            "backend got {} requests, want {n}; bytes received: {:?}; errors: {:?}",
            got.len(),
            self.received().iter().map(|b| show(b)).collect::<Vec<_>>(),
            self.errors()
        );
        got
    }

    /// Connections on which at least one request arrived.
    pub fn conns_with_requests(&self) -> usize {
        let mut c: Vec<usize> = self.requests().iter().map(|r| r.conn).collect();
        c.sort_unstable();
        c.dedup();
        c.len()
    }

    /// What the backend could not parse.
    pub fn errors(&self) -> Vec<String> {
        self.shared.errors.lock().unwrap().clone()
    }

    /// Indexes of the connections that have ended.
    pub fn ended(&self) -> Vec<usize> {
        self.shared.ended.lock().unwrap().clone()
    }

    /// Asserts that not one byte reached the backend.
    pub fn assert_nothing_received(&self, what: &str) {
        let got = self.received();
        let total: usize = got.iter().map(Vec::len).sum();
        assert!(
            total == 0,
            "{what}: the backend received {total} bytes over {} connections: {:?}",
            got.len(),
            got.iter().map(|b| show(b)).collect::<Vec<_>>()
        );
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept_thread.take() {
            let _ = t.join();
        }
    }
}

/// At most 400 characters of `raw`, quoted, for messages (bodies can be megabytes).
pub fn show(raw: &[u8]) -> String {
    let s = String::from_utf8_lossy(raw);
    let mut t: String = s.chars().take(400).collect();
    if t.len() < s.len() {
        t.push_str(&format!("... ({} bytes)", raw.len()));
    }
    format!("{t:?}")
}

/// Polls `cond` every 10 ms until it holds or `within` passes; returns whether it held.
pub fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// How reading more bytes on a backend connection ended.
enum More {
    Got,
    Eof,
    Stop,
}

struct Conn {
    s: TcpStream,
    rec: Arc<Mutex<Vec<u8>>>,
    buf: Vec<u8>,
    born: Instant,
}

impl Conn {
    /// Reads once more into `buf` (waiting at most `idle` for bytes when given).
    fn more(&mut self, sh: &Shared, idle: Option<Duration>) -> More {
        let started = Instant::now();
        let mut tmp = vec![0u8; 64 * 1024];
        loop {
            if sh.stop.load(Ordering::SeqCst) || self.born.elapsed() > CONN_LIFETIME {
                return More::Stop;
            }
            if idle.is_some_and(|d| started.elapsed() >= d) {
                return More::Stop;
            }
            match self.s.read(&mut tmp) {
                Ok(0) => return More::Eof,
                Ok(k) => {
                    self.rec.lock().unwrap().extend_from_slice(&tmp[..k]);
                    self.buf.extend_from_slice(&tmp[..k]);
                    return More::Got;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return More::Eof,
            }
        }
    }

    fn write(&mut self, data: &[u8]) -> bool {
        self.s.write_all(data).is_ok()
    }
}

/// Serves one backend connection: requests in order, each answered by the handler's steps.
fn serve(
    s: TcpStream,
    index: usize,
    rec: Arc<Mutex<Vec<u8>>>,
    sh: &Shared,
    handler: &Handler,
    opts: &BackendOptions,
) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(TICK));
    let _ = s.set_write_timeout(Some(Duration::from_secs(10)));
    let mut c = Conn {
        s,
        rec,
        buf: Vec::new(),
        born: Instant::now(),
    };
    let limits = Limits {
        max_head: 256 * 1024,
        max_headers: 10_000,
        require_host: false,
        max_request_line: 256 * 1024,
    };
    for req_index in 0..100_000 {
        // The head.
        let head = loop {
            match http1::parse_request(&c.buf, &limits) {
                Ok(Some(h)) => break h,
                Ok(None) => {}
                Err(e) => {
                    sh.errors.lock().unwrap().push(format!(
                        "conn {index} request {req_index}: {e:?} in {}",
                        show(&c.buf)
                    ));
                    let _ = c.s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                    return;
                }
            }
            let idle = if c.buf.is_empty() && req_index > 0 {
                opts.idle_close
            } else {
                None
            };
            match c.more(sh, idle) {
                More::Got => {}
                More::Eof | More::Stop => {
                    if !c.buf.is_empty() {
                        sh.errors.lock().unwrap().push(format!(
                            "conn {index}: incomplete head at EOF: {}",
                            show(&c.buf)
                        ));
                    }
                    return;
                }
            }
        };
        let buf = c.buf.clone();
        let mut req = Request {
            conn: index,
            index: req_index,
            method: String::from_utf8_lossy(head.method_span.of(&buf)).into_owned(),
            target: String::from_utf8_lossy(head.target.of(&buf)).into_owned(),
            version: match head.version {
                http1::Version::Http10 => "HTTP/1.0".into(),
                http1::Version::Http11 => "HTTP/1.1".into(),
            },
            headers: head_fields(&buf, head.len),
            raw_head: buf[..head.len].to_vec(),
            ..Request::default()
        };
        c.buf.drain(..head.len);
        let interim = req.expects_continue() && !opts.no_auto_continue;
        if interim && head.framing != Framing::None && !c.write(b"HTTP/1.1 100 Continue\r\n\r\n") {
            return;
        }
        // The body.
        let mut body = Body::new(head.framing);
        let mut raw = Vec::new();
        let mut fed_all = false;
        for _ in 0..1_000_000 {
            if body.is_done() {
                fed_all = true;
                break;
            }
            match body.feed(&c.buf) {
                Ok(f) => {
                    raw.extend_from_slice(&c.buf[..f.used]);
                    c.buf.drain(..f.used);
                    if f.done {
                        fed_all = true;
                        break;
                    }
                }
                Err(e) => {
                    sh.errors
                        .lock()
                        .unwrap()
                        .push(format!("conn {index} request {req_index}: body {e:?}"));
                    return;
                }
            }
            match c.more(sh, None) {
                More::Got => {}
                More::Eof | More::Stop => break,
            }
        }
        if !fed_all {
            sh.errors.lock().unwrap().push(format!(
                "conn {index} request {req_index}: body cut after {} bytes",
                raw.len()
            ));
            return;
        }
        if head.framing == Framing::Chunked {
            let (payload, trailers) = dechunk(&raw);
            req.body = payload;
            req.trailers = trailers;
        } else {
            req.body = raw.clone();
        }
        req.raw_body = raw;
        sh.requests.lock().unwrap().push(req.clone());
        // The answer.
        for step in handler(&req) {
            match step {
                Step::Send(b) => {
                    if !c.write(&b) {
                        return;
                    }
                }
                Step::Sleep(d) => thread::sleep(d),
                Step::Wait(g) => {
                    // At most 10 s, looking at the stop flag every tick.
                    let mut passed = false;
                    for _ in 0..200 {
                        if sh.stop.load(Ordering::SeqCst) {
                            return;
                        }
                        if g.pass(TICK) {
                            passed = true;
                            break;
                        }
                    }
                    if !passed {
                        return;
                    }
                }
                Step::Reset => {
                    let _ = socket2::SockRef::from(&c.s).set_linger(Some(Duration::ZERO));
                    return;
                }
                Step::Close => {
                    let _ = c.s.shutdown(Shutdown::Both);
                    return;
                }
                Step::Hang => {
                    for _ in 0..100_000 {
                        match c.more(sh, None) {
                            More::Got => c.buf.clear(),
                            More::Eof | More::Stop => return,
                        }
                    }
                    return;
                }
            }
        }
        if !head.keep_alive() {
            let _ = c.s.shutdown(Shutdown::Write);
            // Drain until the peer closes (bounded), recording what still comes.
            for _ in 0..1000 {
                match c.more(sh, Some(Duration::from_secs(2))) {
                    More::Got => c.buf.clear(),
                    More::Eof | More::Stop => return,
                }
            }
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Response builders for handlers
// ---------------------------------------------------------------------------------------------

/// `n` bytes of a pattern that starts over every 251 bytes (a prime, so shifts show).
pub fn body_pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| b'a' + (i % 251 % 26) as u8).collect()
}

/// A 200 response with a Content-Length body and `extra` header lines (each ending in CRLF).
pub fn response(status: u16, extra: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Length: {}\r\n{extra}\r\n",
        http1::reason(status),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// The text the echo backend answers with: the request line, each header line, and the body
/// length.
pub fn echo_text(r: &Request) -> String {
    let mut t = format!("{} {} {}\n", r.method, r.target, r.version);
    for (n, v) in &r.headers {
        let _ = writeln!(t, "{n}: {v}");
    }
    let _ = writeln!(t, "body-length: {}", r.body.len());
    t
}

pub fn echo_response(r: &Request) -> Vec<u8> {
    let body = echo_text(r);
    if r.method == "HEAD" {
        return format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
    }
    response(200, "Content-Type: text/plain\r\n", body.as_bytes())
}

/// 200 with `n` pattern bytes; the head alone to HEAD (with the Content-Length of the GET).
pub fn fixed_response(r: &Request, n: usize) -> Vec<u8> {
    if r.method == "HEAD" {
        return format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n").into_bytes();
    }
    response(200, "", &body_pattern(n))
}

/// A chunked 200: the given chunks, then the trailers.
pub fn chunked_response(chunks: &[&[u8]], trailers: &[(&str, &str)]) -> Vec<u8> {
    let mut out =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n".to_vec();
    out.extend_from_slice(&chunked_body(chunks, trailers));
    out
}

/// A chunked body: each chunk as `SIZE CRLF data CRLF`, the last chunk, trailers, blank line.
pub fn chunked_body(chunks: &[&[u8]], trailers: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for ch in chunks {
        out.extend_from_slice(format!("{:x}\r\n", ch.len()).as_bytes());
        out.extend_from_slice(ch);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n");
    for (n, v) in trailers {
        out.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out
}

// ---------------------------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------------------------

/// One response as the client read it.
#[derive(Clone, Debug, Default)]
pub struct Response {
    pub status: u16,
    pub version: String,
    pub headers: Vec<(String, String)>,
    pub raw_head: Vec<u8>,
    /// The payload (chunks decoded).
    pub body: Vec<u8>,
    pub raw_body: Vec<u8>,
    pub trailers: Vec<(String, String)>,
    /// The body ended with the connection (close-delimited).
    pub close_delimited: bool,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// Whether the response says the connection closes (`Connection: close`, or HTTP/1.0
    /// without keep-alive).
    pub fn says_close(&self) -> bool {
        let tokens: Vec<String> = self
            .header_all("connection")
            .iter()
            .flat_map(|v| v.split(','))
            .map(|t| t.trim().to_ascii_lowercase())
            .collect();
        tokens.iter().any(|t| t == "close")
            || (self.version == "HTTP/1.0" && !tokens.iter().any(|t| t == "keep-alive"))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A client connection with a read buffer (bytes past one response stay for the next).
pub struct Client {
    pub s: TcpStream,
    buf: VecDeque<u8>,
    eof: bool,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
        Client::from_stream(s)
    }

    pub fn from_stream(s: TcpStream) -> Client {
        let _ = s.set_nodelay(true);
        s.set_write_timeout(Some(CLIENT_TIMEOUT)).unwrap();
        Client {
            s,
            buf: VecDeque::new(),
            eof: false,
        }
    }

    /// Writes raw bytes.
    pub fn send(&mut self, data: &[u8]) {
        self.s
            .write_all(data)
            .unwrap_or_else(|e| panic!("client write of {} bytes: {e}", data.len()));
    }

    /// Writes raw bytes; false if the connection refused them (closed or reset).
    pub fn try_send(&mut self, data: &[u8]) -> bool {
        self.s.write_all(data).is_ok()
    }

    /// Reads more bytes into the buffer within `deadline`: Ok(true) on bytes, Ok(false) on EOF.
    fn fill(&mut self, deadline: Instant) -> io::Result<bool> {
        if self.eof {
            return Ok(false);
        }
        let mut tmp = vec![0u8; 256 * 1024];
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "client deadline"));
            }
            self.s.set_read_timeout(Some(deadline - now)).unwrap();
            match self.s.read(&mut tmp) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(k) => {
                    self.buf.extend(&tmp[..k]);
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "client deadline"))
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads one response (a 1xx included, as its own response). `to_head`: the request was
    /// HEAD. Errors on a deadline, a reset, EOF before a whole response, or a malformed one.
    pub fn try_read_response(&mut self, to_head: bool, within: Duration) -> io::Result<Response> {
        let deadline = Instant::now() + within;
        let limits = Limits {
            max_head: 1 << 20,
            max_headers: 10_000,
            require_host: false,
            max_request_line: 1 << 20,
        };
        let head = loop {
            let bytes = self.buf.make_contiguous().to_vec();
            match http1::parse_response(&bytes, &limits, to_head) {
                Ok(Some(h)) => break h,
                Ok(None) => {}
                Err(e) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("bad response {e:?}: {}", show(&bytes)),
                    ))
                }
            }
            if !self.fill(deadline)? {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("EOF before a whole response head: {}", show(&bytes)),
                ));
            }
        };
        let bytes: Vec<u8> = self.buf.drain(..head.len).collect();
        let mut r = Response {
            status: head.status,
            version: match head.version {
                http1::Version::Http10 => "HTTP/1.0".into(),
                http1::Version::Http11 => "HTTP/1.1".into(),
            },
            headers: head_fields(&bytes, head.len),
            raw_head: bytes,
            ..Response::default()
        };
        let mut body = Body::new(head.framing);
        let mut raw = Vec::new();
        for _ in 0..10_000_000 {
            if body.is_done() {
                break;
            }
            let avail = self.buf.make_contiguous().to_vec();
            let f = body.feed(&avail).map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidData, format!("bad body: {e:?}"))
            })?;
            raw.extend_from_slice(&avail[..f.used]);
            self.buf.drain(..f.used);
            if f.done {
                break;
            }
            if !self.fill(deadline)? {
                body.finish().map_err(|e| {
                    io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("body cut after {} bytes: {e:?}", raw.len()),
                    )
                })?;
                r.close_delimited = true;
                break;
            }
        }
        if head.framing == Framing::Chunked {
            let (p, t) = dechunk(&raw);
            r.body = p;
            r.trailers = t;
        } else {
            r.body = raw.clone();
        }
        r.raw_body = raw;
        Ok(r)
    }

    /// Reads one response; panics on failure.
    pub fn read_response(&mut self) -> Response {
        self.try_read_response(false, CLIENT_TIMEOUT)
            .unwrap_or_else(|e| panic!("reading a response: {e}"))
    }

    /// Reads one response to HEAD.
    pub fn read_head_response(&mut self) -> Response {
        self.try_read_response(true, CLIENT_TIMEOUT)
            .unwrap_or_else(|e| panic!("reading a response to HEAD: {e}"))
    }

    /// Sends a request and reads its response.
    pub fn roundtrip(&mut self, req: &[u8]) -> Response {
        self.send(req);
        self.read_response()
    }

    /// Bytes already read past the last response.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Reads exactly `n` raw bytes (within `within`), from the buffer first.
    pub fn read_raw(&mut self, n: usize, within: Duration) -> Vec<u8> {
        let deadline = Instant::now() + within;
        while self.buf.len() < n {
            match self.fill(deadline) {
                Ok(true) => {}
                Ok(false) => panic!("EOF after {} of {n} raw bytes", self.buf.len()),
                Err(e) => panic!("{e} after {} of {n} raw bytes", self.buf.len()),
            }
        }
        self.buf.drain(..n).collect()
    }

    /// Reads (bounded) until the bytes received since the last response contain `needle`;
    /// returns them (they stay unconsumed). Panics on EOF, reset or the deadline.
    pub fn read_until(&mut self, needle: &[u8], within: Duration) -> Vec<u8> {
        let deadline = Instant::now() + within;
        for _ in 0..1_000_000 {
            let have = self.buf.make_contiguous().to_vec();
            if have.windows(needle.len()).any(|w| w == needle) {
                return have;
            }
            match self.fill(deadline) {
                Ok(true) => {}
                Ok(false) => panic!(
                    "EOF before {:?}; got {:?}",
                    String::from_utf8_lossy(needle),
                    String::from_utf8_lossy(&have)
                ),
                Err(e) => panic!(
                    "{e} before {:?}; got {:?}",
                    String::from_utf8_lossy(needle),
                    String::from_utf8_lossy(&have)
                ),
            }
        }
        panic!("read_until: too many reads");
    }

    /// Waits (bounded) for the connection to end: Ok(bytes read before EOF) on an orderly close,
    /// Err(bytes) on a reset; panics if it is still open after `within`.
    pub fn expect_closed(&mut self, within: Duration) -> Result<Vec<u8>, Vec<u8>> {
        let deadline = Instant::now() + within;
        for _ in 0..100_000 {
            match self.fill(deadline) {
                Ok(true) => {}
                Ok(false) => return Ok(self.buf.drain(..).collect()),
                Err(e) if e.kind() == io::ErrorKind::TimedOut => panic!(
                    "connection still open after {within:?} (read {:?})",
                    String::from_utf8_lossy(self.buf.make_contiguous())
                ),
                Err(_) => return Err(self.buf.drain(..).collect()),
            }
        }
        panic!("expect_closed: too many reads");
    }

    /// True if nothing arrives and the connection stays open for `probe`.
    pub fn stays_open(&mut self, probe: Duration) -> bool {
        if !self.buf.is_empty() || self.eof {
            return false;
        }
        matches!(self.fill(Instant::now() + probe), Err(e) if e.kind() == io::ErrorKind::TimedOut)
    }
}

/// A GET request with Host.
pub fn get(target: &str) -> Vec<u8> {
    format!("GET {target} HTTP/1.1\r\nHost: example.test\r\n\r\n").into_bytes()
}

/// A request with the given method, target, extra header lines and a Content-Length body.
pub fn request(method: &str, target: &str, extra: &str, body: &[u8]) -> Vec<u8> {
    let mut out =
        format!("{method} {target} HTTP/1.1\r\nHost: example.test\r\n{extra}").into_bytes();
    if !body.is_empty() || method == "POST" || method == "PUT" {
        out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

// ---------------------------------------------------------------------------------------------
// The proxy under test
// ---------------------------------------------------------------------------------------------

/// Which proxy the tests drive: Quill, or HAProxy as a reference (`QUILL_HTTP_REFERENCE=haproxy`).
pub fn reference_haproxy() -> bool {
    std::env::var("QUILL_HTTP_REFERENCE").is_ok_and(|v| v == "haproxy")
}

/// A running proxy: Quill (its process guard) or HAProxy (killed by PID on drop).
pub struct Proxy {
    pub quill: Option<QuillProcess>,
    haproxy: Option<Child>,
    _dir: Option<tempfile::TempDir>,
    pub port: u16,
}

impl Proxy {
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn client(&self) -> Client {
        Client::connect(self.addr())
    }

    pub fn pid(&self) -> u32 {
        match (&self.quill, &self.haproxy) {
            (Some(q), _) => q.pid,
            (_, Some(h)) => h.id(),
            _ => 0,
        }
    }

    /// Sends a signal by PID ("TERM", ...). HAProxy's graceful stop is SIGUSR1, so TERM is sent
    /// to it as USR1.
    pub fn signal(&self, sig: &str) {
        let sig = if self.haproxy.is_some() && sig == "TERM" {
            "USR1"
        } else {
            sig
        };
        let st = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(st.success(), "kill -{sig} {} failed", self.pid());
    }

    /// Waits (bounded) for the proxy process to exit; whether it did.
    pub fn wait_exit(&mut self, within: Duration) -> bool {
        if let Some(q) = &mut self.quill {
            return q.wait_exit(within).is_some();
        }
        if let Some(h) = &mut self.haproxy {
            return wait_until(within, || h.try_wait().ok().flatten().is_some());
        }
        true
    }

    pub fn stderr(&self) -> String {
        self.quill.as_ref().map(|q| q.stderr()).unwrap_or_default()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(h) = &mut self.haproxy {
            let _ = h.kill();
            let _ = h.wait();
        }
    }
}

/// `quill -H 127.0.0.1:PORT SERVERS...` (the Pen form), ready (its probe connection closed).
pub fn start_pen(servers: &[SocketAddr]) -> Proxy {
    start_pen_with(&[], servers)
}

/// `quill -H OPTS 127.0.0.1:PORT SERVERS...`.
pub fn start_pen_with(opts: &[&str], servers: &[SocketAddr]) -> Proxy {
    if reference_haproxy() {
        return start_haproxy("", servers);
    }
    let servers: Vec<String> = servers.iter().map(|a| a.to_string()).collect();
    let mut all = vec!["-H"];
    all.extend_from_slice(opts);
    let (q, probe, _) = Quill::spawn_first(|dir, port| {
        let mut a = pen_args(dir, port, &all, &servers);
        // No access log: an HTTP listener logs requests, and the readiness probe makes none.
        if let Some(l) = a.iter().position(|x| x == "-l") {
            a.drain(l..l + 2);
        }
        a
    });
    drop(probe);
    let port = q.port;
    Proxy {
        quill: Some(q),
        haproxy: None,
        _dir: None,
        port,
    }
}

/// An HTTP listener with `[listener.http]` settings `http` (TOML lines, as docs/toml11 says), on
/// `servers`; Quill from a config file, or HAProxy with the settings it has an equivalent of.
pub fn start_proxy(http: &str, servers: &[SocketAddr]) -> Proxy {
    start_proxy_global("", http, servers)
}

/// Like [`start_proxy`] with top-level TOML lines `global` too (`workers = 1`, `drain_timeout`).
pub fn start_proxy_global(global: &str, http: &str, servers: &[SocketAddr]) -> Proxy {
    if reference_haproxy() {
        return start_haproxy(http, servers);
    }
    let servers: Vec<String> = servers.iter().map(|a| a.to_string()).collect();
    let (q, probe, _) = Quill::spawn_first(|dir, port| {
        let cfg = dir.join("quill.toml");
        std::fs::write(&cfg, toml_config(port, global, http, &servers)).unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    });
    drop(probe);
    let port = q.port;
    Proxy {
        quill: Some(q),
        haproxy: None,
        _dir: None,
        port,
    }
}

/// The config file of [`start_proxy`].
pub fn toml_config(port: u16, global: &str, http: &str, servers: &[String]) -> String {
    let list: Vec<String> = servers.iter().map(|s| format!("\"{s}\"")).collect();
    format!(
        "{global}\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nservers = [{}]\n\n[listener.http]\n{http}\n",
        list.join(", ")
    )
}

/// The HAProxy 2.6 lines (frontend section) that do what the `[listener.http]` settings `http`
/// ask, where HAProxy has an equivalent; settings it has none of are left out (and the tests
/// that need them fail on HAProxy).
fn haproxy_rules(http: &str) -> (String, String) {
    let t: toml::Table = toml::from_str(http).unwrap_or_else(|e| panic!("{http}: {e}"));
    let text = |k: &str| t.get(k).and_then(|v| v.as_str()).map(str::to_string);
    let flag = |k: &str, d: bool| t.get(k).and_then(|v| v.as_bool()).unwrap_or(d);
    let mut defaults = String::new();
    let mut rules = String::new();
    let timeout = |k: &str, d: &str| text(k).unwrap_or_else(|| d.to_string());
    let _ = writeln!(
        defaults,
        "  timeout client {}",
        timeout("keepalive_timeout", "60s")
    );
    let _ = writeln!(
        defaults,
        "  timeout http-keep-alive {}",
        timeout("keepalive_timeout", "60s")
    );
    let _ = writeln!(
        defaults,
        "  timeout http-request {}",
        timeout("header_timeout", "10s")
    );
    let _ = writeln!(
        defaults,
        "  timeout server {}",
        timeout("response_timeout", "60s")
    );
    let trusted: Vec<String> = t
        .get("trusted_proxies")
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    match text("forwarded_for").as_deref().unwrap_or("append") {
        "off" => {}
        "replace" => {
            rules.push_str("  http-request del-header x-forwarded-for\n  option forwardfor\n");
        }
        _ => {
            if trusted.is_empty() {
                rules.push_str("  http-request del-header x-forwarded-for\n");
            } else {
                let _ = writeln!(
                    rules,
                    "  http-request del-header x-forwarded-for unless {{ src {} }}",
                    trusted.join(" ")
                );
            }
            rules.push_str("  option forwardfor\n");
        }
    }
    if flag("x_forwarded_proto", true) {
        rules.push_str("  http-request set-header X-Forwarded-Proto http\n");
    }
    if flag("x_forwarded_host", true) {
        rules.push_str("  http-request set-header X-Forwarded-Host %[req.hdr(host)]\n");
    }
    if flag("forwarded", false) {
        rules.push_str(
            "  http-request set-header Forwarded for=%[src];proto=http;host=%[req.hdr(host)]\n",
        );
    }
    let via = match t.get("via") {
        Some(toml::Value::String(name)) => Some(name.clone()),
        Some(toml::Value::Boolean(true)) => Some("quill".to_string()),
        _ => None,
    };
    if let Some(name) = via {
        let _ = writeln!(rules, "  http-request add-header Via \"1.1 {name}\"");
        let _ = writeln!(rules, "  http-response add-header Via \"1.1 {name}\"");
    }
    if flag("request_id", true) {
        rules.push_str(
            "  http-request set-header X-Request-ID %[uuid] unless { req.hdr(x-request-id) -m found }\n",
        );
    }
    if let Some(max) = text("max_body") {
        let bytes: u64 = match max.strip_suffix('k') {
            Some(k) => k.parse::<u64>().unwrap() * 1024,
            None => max.parse().unwrap(),
        };
        let _ = writeln!(
            rules,
            "  http-request deny deny_status 413 if {{ req.hdr_val(content-length) gt {bytes} }}"
        );
    }
    for (key, dir) in [
        ("request_headers", "http-request"),
        ("response_headers", "http-response"),
    ] {
        let Some(edits) = t.get(key).and_then(|v| v.as_table()) else {
            continue;
        };
        let list = |k: &str| {
            edits
                .get(k)
                .and_then(|v| v.as_array())
                .cloned()
                .unwrap_or_default()
        };
        for name in list("remove") {
            let _ = writeln!(rules, "  {dir} del-header {}", name.as_str().unwrap());
        }
        for (op, verb) in [("set", "set-header"), ("add", "add-header")] {
            if let Some(m) = edits.get(op).and_then(|v| v.as_table()) {
                for (n, v) in m {
                    let _ = writeln!(rules, "  {dir} {verb} {n} \"{}\"", v.as_str().unwrap());
                }
            }
        }
    }
    (defaults, rules)
}

/// HAProxy 2.6 in `mode http` with the equivalent of what it can express of `http`.
fn start_haproxy(http: &str, servers: &[SocketAddr]) -> Proxy {
    let dir = crate::support::scratch_dir();
    let mut last = String::new();
    for _ in 0..5 {
        let port = crate::support::free_port();
        let (defaults, rules) = haproxy_rules(http);
        let cfg_head = "global\n  nbthread 2\n  hard-stop-after 3s\ndefaults\n  mode http\n  http-reuse always\n  retries 2\n  option redispatch 1\n  timeout connect 2s\n";
        let mut cfg = format!("{cfg_head}{defaults}");
        let _ = writeln!(
            cfg,
            "frontend f\n  bind 127.0.0.1:{port}\n{rules}  default_backend b\nbackend b\n  balance first"
        );
        for (i, s) in servers.iter().enumerate() {
            let _ = writeln!(cfg, "  server s{i} {s}");
        }
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(&path, &cfg).unwrap();
        let mut child = Command::new("/usr/sbin/haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn haproxy");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let up = wait_until(Duration::from_secs(5), || {
            child.try_wait().ok().flatten().is_some() || TcpStream::connect(addr).is_ok()
        });
        if up && child.try_wait().ok().flatten().is_none() {
            return Proxy {
                quill: None,
                haproxy: Some(child),
                _dir: Some(dir),
                port,
            };
        }
        let _ = child.kill();
        let _ = child.wait();
        last = format!("haproxy did not start on {port}");
    }
    panic!("{last}");
}
