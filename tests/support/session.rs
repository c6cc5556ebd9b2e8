//! Whole HTTP sessions, generated, played and checked
//! (docs/design.md#positions-move-with-the-buffer): a sequence of requests (GET, HEAD, bodies with
//! Content-Length, chunked, `Expect: 100-continue`, an upgrade, a request that must be refused)
//! pipelined on one client connection and written in pieces cut at random points, against a
//! scripted server that answers each request as the case says (a
//! `Content-Length`, chunked, close-delimited or empty body, interim 1xx heads first, written in
//! pieces too). Each request names its exchange id in its target (`/s/ID`); the server answers
//! with `X-Id: ID` and a body made from the id, so the client can tell every response is its
//! request's, whole and in order.
//!
//! Self-contained (std and rustls only): `tests/http/sessions.rs` drives it with proptest
//! against the real binary (plain and TLS, or HAProxy as the reference), and the session fuzz
//! target (`fuzz/fuzz_targets/http_session.rs`) with libFuzzer's bytes against Quill started
//! in-process. A case is decoded from bytes ([`Case::from_bytes`]), so both drive the same model.
//! Every loop is bounded in count and time; every thread ends when its connection ends or its
//! deadline passes.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Longest one case may take on either end (a case that takes longer has failed).
pub const CASE_TIMEOUT: Duration = Duration::from_secs(15);
/// The proxy's input buffer: pads and bodies are drawn so that heads straddle its end.
pub const BUF: usize = 16 * 1024;

/// Reads a case's choices from bytes; past their end every choice is 0 (the simplest).
pub struct Choices<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Choices<'a> {
    pub fn new(data: &'a [u8]) -> Choices<'a> {
        Choices { data, pos: 0 }
    }
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    fn u16(&mut self) -> usize {
        usize::from(self.byte()) << 8 | usize::from(self.byte())
    }
    /// A number below `n` (n > 0).
    fn below(&mut self, n: usize) -> usize {
        self.u16() % n
    }
}

/// What a request is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Req {
    Get,
    Head,
    /// POST with a `Content-Length` body of this many bytes.
    Length(usize),
    /// POST with a chunked body of these chunk sizes (a trailer field after the last).
    Chunked(Vec<usize>),
    /// PUT with `Expect: 100-continue` and a `Content-Length` body, sent at once (pipelined).
    Expect(usize),
    /// `Connection: upgrade`, `Upgrade: echo`: answered 101, then an echo tunnel (last).
    Upgrade,
    /// A field name with a space: refused (400) and the connection closed; the request after it
    /// must reach no server (last but that one).
    Refused,
}

/// How a response's body is framed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    Length,
    /// Chunks of at most this many bytes.
    Chunked(usize),
    /// Until the server closes (the last exchange only).
    Close,
    /// 204 No Content.
    Empty,
}

/// One request and what the server answers it with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exchange {
    pub id: u32,
    pub req: Req,
    /// Bytes of an `X-Pad` field in the request (moves heads across the buffer's end).
    pub pad: usize,
    /// Interim `102 Processing` heads before the final one.
    pub interim: usize,
    pub body: Body,
    /// Response body length.
    pub len: usize,
    /// Pieces the server writes the response in (1: one write).
    pub pieces: usize,
}

/// A whole session: exchanges in order, and where the client's bytes are cut.
#[derive(Clone, Debug)]
pub struct Case {
    pub exchanges: Vec<Exchange>,
    /// Offsets (into the client's bytes) where a write ends; sorted, distinct.
    pub cuts: Vec<usize>,
}

static NEXT_ID: AtomicU32 = AtomicU32::new(1);

impl Case {
    /// The case these bytes choose (any bytes give one): 1 to 12 exchanges, ids unique in the
    /// process.
    pub fn from_bytes(data: &[u8]) -> Case {
        let mut c = Choices::new(data);
        let n = 1 + c.below(12);
        let mut exchanges = Vec::with_capacity(n + 1);
        for i in 0..n {
            let last = i + 1 == n;
            let size = |c: &mut Choices<'_>| match c.below(4) {
                0 => c.below(64),
                1 => c.below(2048),
                2 => c.below(BUF + 4096),
                _ => BUF - 512 + c.below(1024),
            };
            let req = match c.below(if last { 9 } else { 7 }) {
                0 | 1 => Req::Get,
                2 => Req::Head,
                3 => Req::Length(size(&mut c)),
                4 => {
                    let k = c.below(5);
                    Req::Chunked((0..k).map(|_| 1 + c.below(6000)).collect())
                }
                5 | 6 => Req::Expect(size(&mut c)),
                7 => Req::Upgrade,
                _ => Req::Refused,
            };
            let pad = match c.below(3) {
                0 => 0,
                1 => c.below(600),
                _ => c.below(6000),
            };
            let body = match c.below(if last { 5 } else { 4 }) {
                0 | 1 => Body::Length,
                2 => Body::Chunked(1 + c.below(5000)),
                3 => Body::Empty,
                _ => Body::Close,
            };
            let len = if body == Body::Empty { 0 } else { size(&mut c) };
            let interim = match c.below(8) {
                0 => 1 + c.below(3),
                1 => 1 + c.below(1000),
                _ => 0,
            };
            let pieces = 1 + c.below(6);
            let refused = req == Req::Refused;
            exchanges.push(Exchange {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                req,
                pad,
                interim,
                body,
                len,
                pieces,
            });
            if refused {
                // A request after the refused one: never answered, never forwarded.
                exchanges.push(Exchange {
                    id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                    req: Req::Get,
                    pad: 0,
                    interim: 0,
                    body: Body::Length,
                    len: 10,
                    pieces: 1,
                });
            }
        }
        let total: usize = exchanges.iter().map(|e| request_bytes(e).len()).sum();
        let mut cuts: Vec<usize> = match c.below(4) {
            0 => Vec::new(),
            // Around the buffer's end.
            1 => (0..1 + c.below(3))
                .map(|_| (BUF - 64 + c.below(128)).min(total))
                .collect(),
            _ => (0..c.below(12)).map(|_| c.below(total.max(1))).collect(),
        };
        cuts.retain(|&x| x > 0 && x < total);
        cuts.sort_unstable();
        cuts.dedup();
        Case { exchanges, cuts }
    }

    /// The client's bytes: every request, in order.
    pub fn client_bytes(&self) -> Vec<u8> {
        self.exchanges.iter().flat_map(request_bytes).collect()
    }
}

/// The body bytes of exchange `id` (request or response): a pattern that names the id.
pub fn pattern(id: u32, len: usize) -> Vec<u8> {
    let tag = format!("<{id}>");
    tag.bytes().cycle().take(len).collect()
}

/// The bytes of a request.
pub fn request_bytes(e: &Exchange) -> Vec<u8> {
    let id = e.id;
    let pad = if e.pad > 0 {
        format!("X-Pad: {}\r\n", "p".repeat(e.pad))
    } else {
        String::new()
    };
    let mut out = match &e.req {
        Req::Get => format!("GET /s/{id} HTTP/1.1\r\nHost: h\r\n{pad}\r\n").into_bytes(),
        Req::Head => format!("HEAD /s/{id} HTTP/1.1\r\nHost: h\r\n{pad}\r\n").into_bytes(),
        Req::Length(n) => {
            let mut v =
                format!("POST /s/{id} HTTP/1.1\r\nHost: h\r\n{pad}Content-Length: {n}\r\n\r\n")
                    .into_bytes();
            v.extend(pattern(id, *n));
            v
        }
        Req::Chunked(sizes) => {
            let mut v = format!(
                "POST /s/{id} HTTP/1.1\r\nHost: h\r\n{pad}Transfer-Encoding: chunked\r\n\r\n"
            )
            .into_bytes();
            for &n in sizes {
                v.extend(format!("{n:x}\r\n").into_bytes());
                v.extend(pattern(id, n));
                v.extend(b"\r\n");
            }
            v.extend(b"0\r\nX-Trailer: t\r\n\r\n");
            v
        }
        Req::Expect(n) => {
            let mut v = format!(
                "PUT /s/{id} HTTP/1.1\r\nHost: h\r\n{pad}Expect: 100-continue\r\nContent-Length: {n}\r\n\r\n"
            )
            .into_bytes();
            v.extend(pattern(id, *n));
            v
        }
        Req::Upgrade => format!(
            "GET /s/{id} HTTP/1.1\r\nHost: h\r\n{pad}Connection: upgrade\r\nUpgrade: echo\r\n\r\n"
        )
        .into_bytes(),
        Req::Refused => {
            format!("GET /s/{id} HTTP/1.1\r\nHost: h\r\n{pad}Bad Name: v\r\n\r\n").into_bytes()
        }
    };
    out.shrink_to_fit();
    out
}

/// One interim head.
const INTERIM: &[u8] = b"HTTP/1.1 102 Processing\r\n\r\n";

/// The response bytes of an exchange (interim heads included), as the server writes them.
pub fn response_bytes(e: &Exchange) -> Vec<u8> {
    let id = e.id;
    let mut out = Vec::new();
    for _ in 0..e.interim {
        out.extend(INTERIM);
    }
    if e.req == Req::Upgrade {
        out.extend(
            format!("HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: echo\r\nX-Id: {id}\r\n\r\n")
                .into_bytes(),
        );
        return out;
    }
    let body = pattern(id, e.len);
    let head_only = e.req == Req::Head;
    match e.body {
        Body::Empty => {
            out.extend(format!("HTTP/1.1 204 No Content\r\nX-Id: {id}\r\n\r\n").into_bytes())
        }
        Body::Length => {
            out.extend(
                format!(
                    "HTTP/1.1 200 OK\r\nX-Id: {id}\r\nContent-Length: {}\r\n\r\n",
                    e.len
                )
                .into_bytes(),
            );
            if !head_only {
                out.extend(&body);
            }
        }
        Body::Chunked(max) => {
            out.extend(
                format!("HTTP/1.1 200 OK\r\nX-Id: {id}\r\nTransfer-Encoding: chunked\r\n\r\n")
                    .into_bytes(),
            );
            if !head_only {
                for chunk in body.chunks(max.max(1)) {
                    out.extend(format!("{:x}\r\n", chunk.len()).into_bytes());
                    out.extend(chunk);
                    out.extend(b"\r\n");
                }
                out.extend(b"0\r\n\r\n");
            }
        }
        Body::Close => {
            out.extend(
                format!("HTTP/1.1 200 OK\r\nX-Id: {id}\r\nConnection: close\r\n\r\n").into_bytes(),
            );
            if !head_only {
                out.extend(&body);
            }
        }
    }
    out
}

/// Whether the server closes its connection after answering `e`.
fn server_closes(e: &Exchange) -> bool {
    e.body == Body::Close
}

/// Whether nothing follows `e` on the client's connection.
pub fn terminal(e: &Exchange) -> bool {
    matches!(e.req, Req::Upgrade | Req::Refused) || (e.body == Body::Close && e.req != Req::Head)
}

// ---------------------------------------------------------------------------------------------
// The scripted server
// ---------------------------------------------------------------------------------------------

/// A server on 127.0.0.1:0 that answers each request as its exchange (found by the id in its
/// target) says. Ids it does not know get a 404; every id it was asked for is noted.
pub struct Server {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    script: Arc<Mutex<HashMap<u32, Exchange>>>,
    seen: Arc<Mutex<Vec<u32>>>,
    accept: Option<thread::JoinHandle<()>>,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(false)
    }

    /// `interim_apart`: interim heads go in writes of their own, at most 50 a write 2 ms apart,
    /// 20 ms before the final response (and 20 ms pass after a `100 Continue`). HAProxy 2.6.12
    /// stalls when more than about 16 KiB of 1xx heads come in one read (528 of 600 passed on,
    /// then nothing), and cuts a final response of over about 16 KiB that comes soon after a 1xx
    /// head (15,169 of 16,348 body bytes, then nothing); the differential mode sends them apart,
    /// as a server that reports progress does.
    pub fn start_with(interim_apart: bool) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the scripted server");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let addr = listener.local_addr().expect("server address");
        let stop = Arc::new(AtomicBool::new(false));
        let script: Arc<Mutex<HashMap<u32, Exchange>>> = Arc::default();
        let seen: Arc<Mutex<Vec<u32>>> = Arc::default();
        let (st, sc, se) = (stop.clone(), script.clone(), seen.clone());
        let accept = thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((s, _)) => {
                        let (st, sc, se) = (st.clone(), sc.clone(), se.clone());
                        // Detached: a connection ends on EOF, on the stop flag or its deadline;
                        // its error, if any, is the client's to see (nothing here reads it).
                        thread::spawn(move || {
                            let _ = serve(s, &st, &sc, &se, interim_apart);
                        });
                    }
                    Err(_) => thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Server {
            addr,
            stop,
            script,
            seen,
            accept: Some(accept),
        }
    }

    /// Makes the server answer these exchanges.
    pub fn load(&self, case: &Case) {
        let mut s = self.script.lock().unwrap_or_else(|p| p.into_inner());
        for e in &case.exchanges {
            s.insert(e.id, e.clone());
        }
    }

    /// Every id the server was asked for.
    pub fn seen(&self) -> Vec<u32> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

/// A head's first line and its fields (names lowercased).
type Head = (String, Vec<(String, String)>);

/// Bytes read on a connection, with more read on demand (bounded by the deadline and stop flag).
struct Reader<'a> {
    s: &'a TcpStream,
    buf: Vec<u8>,
    deadline: Instant,
    stop: Option<&'a AtomicBool>,
}

impl Reader<'_> {
    /// Reads more; Ok(false) at EOF.
    fn more(&mut self) -> io::Result<bool> {
        let mut tmp = [0u8; 16384];
        loop {
            if Instant::now() > self.deadline || self.stop.is_some_and(|s| s.load(Ordering::SeqCst))
            {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline"));
            }
            match (&mut &*self.s).read(&mut tmp) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.buf.extend_from_slice(&tmp[..n]);
                    return Ok(true);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// A line ending in CRLF (without it); None at EOF before one.
    fn line(&mut self) -> io::Result<Option<Vec<u8>>> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = self.buf[..i].to_vec();
                self.buf.drain(..i + 2);
                return Ok(Some(line));
            }
            if !self.more()? {
                return Ok(None);
            }
        }
    }

    fn take(&mut self, n: usize) -> io::Result<Option<Vec<u8>>> {
        while self.buf.len() < n {
            if !self.more()? {
                return Ok(None);
            }
        }
        Ok(Some(self.buf.drain(..n).collect()))
    }

    /// A head: its first line and fields (names lowercased); None at EOF before one.
    fn head(&mut self) -> io::Result<Option<Head>> {
        let Some(first) = self.line()? else {
            return Ok(None);
        };
        let mut fields = Vec::new();
        loop {
            let Some(l) = self.line()? else {
                return Ok(None);
            };
            if l.is_empty() {
                break;
            }
            let l = String::from_utf8_lossy(&l).into_owned();
            let (n, v) = l.split_once(':').unwrap_or((&l, ""));
            fields.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        Ok(Some((String::from_utf8_lossy(&first).into_owned(), fields)))
    }

    /// A chunked body's payload (trailers read and dropped).
    fn chunked(&mut self) -> io::Result<Option<Vec<u8>>> {
        let mut payload = Vec::new();
        loop {
            let Some(line) = self.line()? else {
                return Ok(None);
            };
            let size = String::from_utf8_lossy(&line);
            let size = size.split(';').next().unwrap_or("").trim();
            let n = usize::from_str_radix(size, 16)
                .map_err(|_| io::Error::other(format!("bad chunk size {size:?}")))?;
            if n == 0 {
                loop {
                    match self.line()? {
                        None => return Ok(None),
                        Some(l) if l.is_empty() => return Ok(Some(payload)),
                        Some(_) => {}
                    }
                }
            }
            let Some(data) = self.take(n + 2)? else {
                return Ok(None);
            };
            if &data[n..] != b"\r\n" {
                return Err(io::Error::other("chunk data not followed by CRLF"));
            }
            payload.extend_from_slice(&data[..n]);
        }
    }
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Writes `bytes` in `pieces` writes (a short pause between them, so they arrive apart).
fn write_pieces(mut s: &TcpStream, bytes: &[u8], pieces: usize) -> io::Result<()> {
    let step = bytes.len().div_ceil(pieces.max(1)).max(1);
    for (i, piece) in bytes.chunks(step).enumerate() {
        if i > 0 {
            thread::sleep(Duration::from_micros(300));
        }
        s.write_all(piece)?;
    }
    Ok(())
}

/// Serves one server connection: requests in order, each answered by its exchange.
fn serve(
    s: TcpStream,
    stop: &AtomicBool,
    script: &Mutex<HashMap<u32, Exchange>>,
    seen: &Mutex<Vec<u32>>,
    interim_apart: bool,
) -> io::Result<()> {
    s.set_read_timeout(Some(Duration::from_millis(20)))?;
    s.set_nodelay(true)?;
    let mut r = Reader {
        s: &s,
        buf: Vec::new(),
        deadline: Instant::now() + Duration::from_secs(120),
        stop: Some(stop),
    };
    loop {
        let Some((line, fields)) = r.head()? else {
            return Ok(());
        };
        let id: Option<u32> = line
            .split(' ')
            .nth(1)
            .and_then(|t| t.strip_prefix("/s/"))
            .and_then(|t| t.parse().ok());
        let e = id.and_then(|id| {
            script
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&id)
                .cloned()
        });
        if let Some(id) = id {
            seen.lock().unwrap_or_else(|p| p.into_inner()).push(id);
        }
        if field(&fields, "expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue")) {
            (&s).write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
            if interim_apart {
                thread::sleep(Duration::from_millis(20));
            }
        }
        let body = if field(&fields, "transfer-encoding").is_some() {
            r.chunked()?
        } else {
            let n: usize = field(&fields, "content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            r.take(n)?
        };
        let Some(body) = body else { return Ok(()) };
        let Some(e) = e else {
            (&s).write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")?;
            continue;
        };
        let want = match &e.req {
            Req::Length(n) | Req::Expect(n) => pattern(e.id, *n),
            Req::Chunked(sizes) => sizes.iter().flat_map(|&n| pattern(e.id, n)).collect(),
            _ => Vec::new(),
        };
        if body != want {
            (&s).write_all(
                b"HTTP/1.1 500 Body Differs\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )?;
            return Err(io::Error::other(format!(
                "exchange {}: the request body differs",
                e.id
            )));
        }
        let mut bytes = response_bytes(&e);
        if interim_apart && e.interim > 0 {
            for group in bytes[..INTERIM.len() * e.interim].chunks(INTERIM.len() * 50) {
                (&s).write_all(group)?;
                thread::sleep(Duration::from_millis(2));
            }
            thread::sleep(Duration::from_millis(20));
            bytes.drain(..INTERIM.len() * e.interim);
        }
        write_pieces(&s, &bytes, e.pieces)?;
        if e.req == Req::Upgrade {
            // The echo tunnel, until the client's side ends.
            loop {
                if !r.buf.is_empty() {
                    (&s).write_all(&r.buf)?;
                    r.buf.clear();
                }
                if !r.more()? {
                    return Ok(());
                }
            }
        }
        if server_closes(&e) {
            let _ = s.shutdown(Shutdown::Both);
            return Ok(());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------------------------

/// Plays `case` on `conn` (a connection to the proxy, plain or through [`tls_bridge`]): writes
/// the requests in pieces cut at the case's offsets from a second thread while it reads the
/// responses, and checks each one. `reference`: the proxy is HAProxy (its refusal is a 400 too;
/// it answers Quill's way everywhere this checks). Err says what went wrong, naming the exchange.
pub fn play(case: &Case, conn: TcpStream) -> Result<(), String> {
    conn.set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| e.to_string())?;
    conn.set_nodelay(true).map_err(|e| e.to_string())?;
    let bytes = case.client_bytes();
    let writer = conn.try_clone().map_err(|e| e.to_string())?;
    let cuts = case.cuts.clone();
    let done = Arc::new(AtomicBool::new(false));
    let done_w = done.clone();
    let w = thread::spawn(move || {
        let mut at = 0;
        for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
            if done_w.load(Ordering::SeqCst) {
                return;
            }
            if (&writer).write_all(&bytes[at..cut]).is_err() {
                return;
            }
            at = cut;
            thread::sleep(Duration::from_micros(500));
        }
    });
    let r = check_responses(case, &conn);
    done.store(true, Ordering::SeqCst);
    let _ = conn.shutdown(Shutdown::Both);
    let _ = w.join();
    r
}

fn check_responses(case: &Case, conn: &TcpStream) -> Result<(), String> {
    let mut r = Reader {
        s: conn,
        buf: Vec::new(),
        deadline: Instant::now() + CASE_TIMEOUT,
        stop: None,
    };
    let io = |e: io::Error| e.to_string();
    for e in &case.exchanges {
        let id = e.id;
        let what = |msg: &str| format!("exchange {id} ({:?}, body {:?}): {msg}", e.req, e.body);
        // The final head: interim ones (100, 102) may come first.
        let (status, fields) = loop {
            let Some((line, fields)) = r.head().map_err(|x| what(&io(x)))? else {
                return Err(what("the connection closed before the response"));
            };
            let status: u16 = line
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| what(&format!("bad status line {line:?}")))?;
            if (100..200).contains(&status) && status != 101 {
                continue;
            }
            break (status, fields);
        };
        if e.req == Req::Refused {
            if status != 400 {
                return Err(what(&format!("refused with {status}, not 400")));
            }
            // Closed after its answer: nothing more comes.
            return match r.take(r.buf.len() + 1) {
                Ok(None) | Err(_) => Ok(()),
                Ok(Some(b)) => Err(what(&format!(
                    "bytes after the 400: {:?}",
                    String::from_utf8_lossy(&b)
                ))),
            };
        }
        let expected = match (&e.req, &e.body) {
            (Req::Upgrade, _) => 101,
            (_, Body::Empty) => 204,
            _ => 200,
        };
        if status != expected {
            return Err(what(&format!("status {status}, not {expected}")));
        }
        if field(&fields, "x-id") != Some(&id.to_string()) {
            return Err(what(&format!(
                "X-Id {:?}: another exchange's response",
                field(&fields, "x-id")
            )));
        }
        if e.req == Req::Upgrade {
            let ping = format!("ping {id}");
            (&mut &*conn).write_all(ping.as_bytes()).map_err(io)?;
            let got = r.take(ping.len()).map_err(|x| what(&io(x)))?;
            if got.as_deref() != Some(ping.as_bytes()) {
                return Err(what("the tunnel did not echo"));
            }
            return Ok(());
        }
        let body = if e.req == Req::Head || status == 204 {
            Some(Vec::new())
        } else if field(&fields, "transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
        {
            r.chunked().map_err(|x| what(&io(x)))?
        } else if let Some(n) = field(&fields, "content-length") {
            let n: usize = n.parse().map_err(|_| what("bad Content-Length"))?;
            r.take(n).map_err(|x| what(&io(x)))?
        } else {
            // Until the close.
            while r.more().map_err(|x| what(&io(x)))? {}
            Some(std::mem::take(&mut r.buf))
        };
        let Some(body) = body else {
            return Err(what("the connection closed within the body"));
        };
        let want = if e.req == Req::Head {
            Vec::new()
        } else {
            pattern(id, e.len)
        };
        if body != want {
            let at = body
                .iter()
                .zip(&want)
                .position(|(a, b)| a != b)
                .unwrap_or(body.len().min(want.len()));
            let got = String::from_utf8_lossy(&body[at..body.len().min(at + 60)]).into_owned();
            return Err(what(&format!(
                "body of {} bytes, not the {} expected; differs from byte {at}: {got:?}",
                body.len(),
                want.len()
            )));
        }
        if terminal(e) {
            return Ok(());
        }
    }
    Ok(())
}

/// Checks what the server saw: every exchange before a refused request or the end was asked
/// for, in order, and nothing after a refused request.
pub fn check_server(case: &Case, seen: &[u32]) -> Result<(), String> {
    let mut want = Vec::new();
    let mut after_refusal = Vec::new();
    let mut refused = false;
    for e in &case.exchanges {
        if refused {
            after_refusal.push(e.id);
        } else if e.req == Req::Refused {
            refused = true;
        } else {
            want.push(e.id);
        }
    }
    let ours: Vec<u32> = seen
        .iter()
        .copied()
        .filter(|id| case.exchanges.iter().any(|e| e.id == *id))
        .collect();
    if let Some(id) = ours
        .iter()
        .find(|id| after_refusal.contains(id) || !want.contains(id))
    {
        return Err(format!("the server got request {id}, which it must not"));
    }
    if ours != want {
        return Err(format!("the server got {ours:?}, not {want:?}"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// TLS
// ---------------------------------------------------------------------------------------------

/// Accepts any server certificate: the case checks the session, not the chain.
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A rustls client configuration that trusts any certificate (aws-lc-rs, as Quill).
pub fn tls_client_config() -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map(|b| {
            b.dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
                .with_no_client_auth()
        });
    match config {
        Ok(c) => Arc::new(c),
        Err(e) => panic!("rustls client configuration: {e}"),
    }
}

/// A plain loopback connection whose bytes go to `proxy` over TLS (a rustls client with this
/// `config`, server name `site.test`), so a case plays the same on plain and TLS listeners:
/// each piece the client writes goes in its own records. The bridge thread ends when either
/// side closes or after [`CASE_TIMEOUT`] and a margin.
pub fn tls_bridge(proxy: SocketAddr, config: Arc<rustls::ClientConfig>) -> io::Result<TcpStream> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let near = TcpStream::connect(l.local_addr()?)?;
    let (far, _) = l.accept()?;
    let tls = TcpStream::connect(proxy)?;
    let name = rustls::pki_types::ServerName::try_from("site.test")
        .map_err(io::Error::other)?
        .to_owned();
    let mut conn = rustls::ClientConnection::new(config, name).map_err(io::Error::other)?;
    far.set_nonblocking(true)?;
    tls.set_nonblocking(true)?;
    tls.set_nodelay(true)?;
    thread::spawn(move || {
        let deadline = Instant::now() + CASE_TIMEOUT + Duration::from_secs(5);
        let mut buf = vec![0u8; 32 * 1024];
        let mut plain_open = true;
        while Instant::now() < deadline {
            let mut busy = false;
            if plain_open && !conn.is_handshaking() {
                match (&far).read(&mut buf) {
                    Ok(0) => {
                        plain_open = false;
                        conn.send_close_notify();
                    }
                    Ok(n) => {
                        busy = true;
                        if conn.writer().write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => break,
                }
            }
            while conn.wants_write() {
                match conn.write_tls(&mut &tls) {
                    Ok(_) => busy = true,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_micros(200));
                        if Instant::now() > deadline {
                            break;
                        }
                    }
                    Err(_) => {
                        let _ = far.shutdown(Shutdown::Both);
                        return;
                    }
                }
            }
            match conn.read_tls(&mut &tls) {
                Ok(0) => {
                    let _ = drain_plain(&mut conn, &far, &mut buf);
                    let _ = far.shutdown(Shutdown::Both);
                    return;
                }
                Ok(_) => {
                    busy = true;
                    if conn.process_new_packets().is_err() {
                        break;
                    }
                    if drain_plain(&mut conn, &far, &mut buf).is_err() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => {
                    let _ = drain_plain(&mut conn, &far, &mut buf);
                    break;
                }
            }
            if !busy {
                thread::sleep(Duration::from_micros(300));
            }
        }
        let _ = far.shutdown(Shutdown::Both);
        let _ = tls.shutdown(Shutdown::Both);
    });
    Ok(near)
}

/// Moves what TLS decrypted to the plain side; Err when that side is gone.
fn drain_plain(
    conn: &mut rustls::ClientConnection,
    far: &TcpStream,
    buf: &mut [u8],
) -> io::Result<()> {
    loop {
        match conn.reader().read(buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                let mut at = 0;
                let until = Instant::now() + CASE_TIMEOUT;
                while at < n {
                    match (&mut &*far).write(&buf[at..n]) {
                        Ok(k) => at += k,
                        Err(e)
                            if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < until =>
                        {
                            thread::sleep(Duration::from_micros(200))
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}
