//! A FastCGI connection seen as an HTTP/1.1 server: [`Gateway::write`] takes the bytes of an
//! HTTP/1.1 request (head, then body as its framing says) and makes the records of a FastCGI
//! request of them (`BEGIN_REQUEST` with keep-conn, `PARAMS`, `STDIN`); [`Gateway::read`] takes
//! the records the application answers with and gives the bytes of an HTTP/1.1 response (the CGI
//! head of `STDOUT` as a status line and fields, the body framed by its `Content-Length` or
//! chunked, ended at `END_REQUEST`). So the proxy's HTTP path (its parser, framing, timeouts,
//! retries, idle connection pools, access log) serves a FastCGI pool unchanged, and this module,
//! pure, is where FastCGI is spoken.
//!
//! Per request, the web server's knowledge of it (the client's address, the script, TLS) comes
//! with [`Gateway::begin`]; the parameters are nginx's `fastcgi_params` ([`super::write_params`]).
//! A body with `Content-Length` streams as `STDIN` records as it comes; a chunked one is collected
//! (up to the context's `max_body`) and sent once whole, because PHP reads `CONTENT_LENGTH`
//! bytes and nothing without it. `STDERR` goes to [`Gateway::stderr_lines`], line by line,
//! bounded.

use std::net::SocketAddr;

use super::decode::{Decoder, Event, ProtocolStatus};
use super::encode::{begin_request, end_stdin, stdin, NameRefused, Params, Role, STDIN_CHUNK};
use super::request::{write_params, Request};
use super::REQUEST_ID;
use crate::cgi::{is_hop_by_hop, BodyFraming, Limits as CgiLimits, Translator};
use crate::http1::{self, Framing, Method, Version};

/// What the web server knows of a request beyond its head.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    /// The client (the PROXY protocol's, when one was read).
    pub remote: SocketAddr,
    /// Where the client connected (None on a Unix socket).
    pub local: Option<SocketAddr>,
    /// The client came over TLS.
    pub https: bool,
    /// The route's root, without a trailing `/`.
    pub document_root: &'a [u8],
    /// The normal path the route matched (`DOCUMENT_URI`).
    pub document_uri: &'a [u8],
    /// The script, from the root (`/index.php`).
    pub script_name: &'a [u8],
    /// The path after the script (may be empty).
    pub path_info: &'a [u8],
    /// `SERVER_SOFTWARE`.
    pub server_software: &'a [u8],
    /// Most bytes of a chunked body collected before it goes out.
    pub max_body: u64,
}

/// Why the gateway stops (the connection is closed; the caller answers 502 when no byte of the
/// response went out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Request bytes before [`Gateway::begin`] or after the request's end.
    Unexpected,
    /// The request head did not parse (it came from Quill's own writer: a local error).
    Head(http1::Error),
    /// The request head is longer than [`MAX_HEAD`].
    HeadTooLarge,
    /// A parameter does not fit in a record.
    Params(NameRefused),
    /// A chunked body longer than the context's `max_body`.
    BodyTooLarge,
    /// The application's records are malformed.
    Records(super::Error),
    /// The application's output is not a response.
    Response(crate::cgi::translate::Error),
    /// The application ended the request without completing it.
    Refused(ProtocolStatus),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Unexpected => f.write_str("fastcgi: request bytes outside a request"),
            Error::Head(e) => write!(f, "fastcgi: request head: {e:?}"),
            Error::HeadTooLarge => f.write_str("fastcgi: request head too large"),
            Error::Params(e) => write!(f, "fastcgi: parameters: {e}"),
            Error::BodyTooLarge => f.write_str("fastcgi: chunked request body over max_body"),
            Error::Records(e) => write!(f, "fastcgi: {e}"),
            Error::Response(e) => write!(f, "fastcgi: {e}"),
            Error::Refused(s) => write!(f, "fastcgi: the application refused the request ({s:?})"),
        }
    }
}

impl std::error::Error for Error {}

/// Most bytes of a request head the gateway takes (Quill's heads stay in one 16 KiB buffer, plus
/// the fields the proxy adds).
pub const MAX_HEAD: usize = 64 * 1024;

/// Most `STDERR` bytes kept for one line; a longer line is given cut.
const STDERR_LINE: usize = 2048;

/// Most `STDERR` lines given per request; the rest are counted ([`Gateway::stderr_dropped`]).
const STDERR_LINES: u32 = 64;

/// Where the request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Up {
    /// No request begun: bytes are unexpected.
    Idle,
    /// Collecting the head.
    Head,
    /// `left` body bytes to pass on as `STDIN`.
    Length { left: u64 },
    /// Collecting a chunked body.
    Chunked,
    /// All of the request went into records.
    Sent,
}

/// Reads a chunked body's payload out of its framing (the proxy checked the framing already: this
/// only finds the payload and the end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dechunk {
    Size(u64),
    /// After the size: an extension or the CR, up to the LF.
    SizeLine(u64),
    Data(u64),
    /// After a chunk's payload: its CRLF.
    DataEnd,
    /// A trailer line (`len` bytes of it, CR aside).
    Trailer {
        len: u32,
    },
    Done,
}

/// One FastCGI connection's translator (see the module's text); reused request after request.
#[derive(Debug)]
pub struct Gateway {
    up: Up,
    head: Vec<u8>,
    head_len: usize,
    /// The context of [`Gateway::begin`], owned: its byte strings one after the other.
    names: Vec<u8>,
    lens: [usize; 5],
    remote: SocketAddr,
    local: Option<SocketAddr>,
    https: bool,
    max_body: u64,
    /// Records to send, from `out_at`.
    out: Vec<u8>,
    out_at: usize,
    /// A chunked body's payload, until its end.
    body: Vec<u8>,
    dechunk: Dechunk,
    decoder: Decoder,
    translator: Translator,
    /// `STDOUT` bytes the decoder passed that the translator has not taken yet (they lead the
    /// next input).
    owed: usize,
    ended: bool,
    stderr: Vec<u8>,
    stderr_lines: u32,
    stderr_dropped: u32,
    /// Ask the application to keep the connection after each request (`FCGI_KEEP_CONN`).
    keep_conn: bool,
}

impl Default for Gateway {
    fn default() -> Gateway {
        Gateway::new()
    }
}

impl Gateway {
    pub fn new() -> Gateway {
        Gateway {
            up: Up::Idle,
            head: Vec::new(),
            head_len: 0,
            names: Vec::new(),
            lens: [0; 5],
            remote: SocketAddr::from(([0, 0, 0, 0], 0)),
            local: None,
            https: false,
            max_body: 0,
            out: Vec::new(),
            out_at: 0,
            body: Vec::new(),
            dechunk: Dechunk::Size(0),
            decoder: Decoder::new(REQUEST_ID),
            translator: Translator::new(CgiLimits::default()),
            owed: 0,
            ended: true,
            stderr: Vec::new(),
            stderr_lines: 0,
            stderr_dropped: 0,
            keep_conn: true,
        }
    }

    /// Whether requests ask the application to keep the connection (`FCGI_KEEP_CONN`; the
    /// default). Without it the application closes the connection after each request, and each
    /// response head says `Connection: close`, so the connection is not used again.
    pub fn keep_conn(&mut self, keep: bool) {
        self.keep_conn = keep;
    }

    /// Begins a request: the HTTP/1.1 request written next is this context's.
    pub fn begin(&mut self, cx: &Context) {
        self.up = Up::Head;
        self.head.clear();
        self.head_len = 0;
        self.names.clear();
        let parts = [
            cx.document_root,
            cx.document_uri,
            cx.script_name,
            cx.path_info,
            cx.server_software,
        ];
        for (i, p) in parts.iter().enumerate() {
            self.names.extend_from_slice(p);
            self.lens[i] = p.len();
        }
        self.remote = cx.remote;
        self.local = cx.local;
        self.https = cx.https;
        self.max_body = cx.max_body;
        self.body.clear();
        self.dechunk = Dechunk::Size(0);
        self.decoder = Decoder::new(REQUEST_ID);
        self.owed = 0;
        self.ended = false;
        self.stderr.clear();
        self.stderr_lines = 0;
        self.stderr_dropped = 0;
    }

    /// Part `i` of the owned context (0 root, 1 document URI, 2 script, 3 path info, 4 software).
    fn name(&self, i: usize) -> &[u8] {
        let start: usize = self.lens[..i].iter().sum();
        &self.names[start..start + self.lens[i]]
    }

    /// Records waiting to be sent.
    pub fn output(&self) -> &[u8] {
        &self.out[self.out_at..]
    }

    /// `n` bytes of [`Gateway::output`] were sent.
    pub fn sent(&mut self, n: usize) {
        self.out_at += n;
        if self.out_at >= self.out.len() {
            self.out.clear();
            self.out_at = 0;
        }
    }

    /// Whether the response is complete (`END_REQUEST` read and all of the response given): the
    /// connection may carry the next request.
    pub fn is_complete(&self) -> bool {
        self.ended && self.translator.is_finished()
    }

    /// Whether the response head was given (a failure now cuts the response).
    pub fn is_headed(&self) -> bool {
        self.translator.is_headed()
    }

    /// Takes the bytes of an HTTP/1.1 request (all of `input` is taken: the records wait in
    /// [`Gateway::output`]). Returns `input.len()`.
    pub fn write(&mut self, input: &[u8]) -> Result<usize, Error> {
        let mut at = 0;
        while at < input.len() {
            let rest = &input[at..];
            at += match self.up {
                Up::Idle | Up::Sent => return Err(Error::Unexpected),
                Up::Head => self.take_head(rest)?,
                Up::Length { left } => {
                    let n = rest.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    for piece in rest[..n].chunks(STDIN_CHUNK) {
                        stdin(&mut self.out, REQUEST_ID, piece);
                    }
                    let left = left - n as u64;
                    self.up = Up::Length { left };
                    if left == 0 {
                        end_stdin(&mut self.out, REQUEST_ID);
                        self.up = Up::Sent;
                    }
                    n
                }
                Up::Chunked => self.take_chunked(rest)?,
            };
        }
        Ok(input.len())
    }

    /// Collects head bytes; once the head is whole, begins the request. Returns the bytes of
    /// `rest` that were head.
    fn take_head(&mut self, rest: &[u8]) -> Result<usize, Error> {
        let before = self.head.len();
        let take = rest.len().min(MAX_HEAD + 1 - before);
        self.head.extend_from_slice(&rest[..take]);
        let limits = http1::Limits {
            max_head: MAX_HEAD,
            max_request_line: MAX_HEAD,
            max_headers: 1000,
            require_host: false,
        };
        let head = match http1::parse_request(&self.head, &limits) {
            Ok(Some(h)) => h,
            Ok(None) if self.head.len() > MAX_HEAD => return Err(Error::HeadTooLarge),
            Ok(None) => return Ok(take),
            Err(e) => return Err(Error::Head(e)),
        };
        let used = head.len - before;
        self.head.truncate(head.len);
        self.head_len = head.len;
        // An HTTP/1.0 request's response cannot be chunked: it ends with the connection, which
        // the application closes (no keep-conn) once the request is done.
        let http10 = head.version == Version::Http10;
        let unknown = if http10 {
            BodyFraming::Close
        } else {
            BodyFraming::Chunked
        };
        self.translator.start(head.method == Method::Head, unknown);
        if !self.keep_conn && !http10 {
            self.translator.close_after();
        }
        begin_request(
            &mut self.out,
            REQUEST_ID,
            Role::Responder,
            self.keep_conn && !http10,
        );
        match head.framing {
            Framing::Chunked => self.up = Up::Chunked,
            Framing::Length(n) if n > 0 => {
                self.write_params(Some(n))?;
                self.up = Up::Length { left: n };
            }
            _ => {
                self.write_params(None)?;
                end_stdin(&mut self.out, REQUEST_ID);
                self.up = Up::Sent;
            }
        }
        Ok(used)
    }

    /// Takes bytes of a chunked body: the payload is collected; at its end the parameters (with
    /// its length) and the payload go out.
    fn take_chunked(&mut self, rest: &[u8]) -> Result<usize, Error> {
        let mut at = 0;
        while at < rest.len() && self.dechunk != Dechunk::Done {
            let b = rest[at];
            self.dechunk = match self.dechunk {
                Dechunk::Size(n) => match (b as char).to_digit(16) {
                    Some(d) => Dechunk::Size(n.saturating_mul(16).saturating_add(u64::from(d))),
                    None if b == b'\n' => after_size(n),
                    None => Dechunk::SizeLine(n),
                },
                Dechunk::SizeLine(n) if b == b'\n' => after_size(n),
                Dechunk::SizeLine(n) => Dechunk::SizeLine(n),
                Dechunk::Data(left) => {
                    let n = (rest.len() - at).min(usize::try_from(left).unwrap_or(usize::MAX));
                    if self.body.len() as u64 + n as u64 > self.max_body {
                        return Err(Error::BodyTooLarge);
                    }
                    self.body.extend_from_slice(&rest[at..at + n]);
                    at += n;
                    let left = left - n as u64;
                    self.dechunk = if left == 0 {
                        Dechunk::DataEnd
                    } else {
                        Dechunk::Data(left)
                    };
                    continue;
                }
                Dechunk::DataEnd if b == b'\n' => Dechunk::Size(0),
                Dechunk::DataEnd => Dechunk::DataEnd,
                Dechunk::Trailer { len: 0 } if b == b'\n' => Dechunk::Done,
                Dechunk::Trailer { .. } if b == b'\n' => Dechunk::Trailer { len: 0 },
                Dechunk::Trailer { len } if b == b'\r' => Dechunk::Trailer { len },
                Dechunk::Trailer { len } => Dechunk::Trailer { len: len + 1 },
                Dechunk::Done => Dechunk::Done,
            };
            at += 1;
        }
        if self.dechunk == Dechunk::Done {
            let body = std::mem::take(&mut self.body);
            self.write_params(Some(body.len() as u64))?;
            for piece in body.chunks(STDIN_CHUNK) {
                stdin(&mut self.out, REQUEST_ID, piece);
            }
            end_stdin(&mut self.out, REQUEST_ID);
            self.body = body;
            self.body.clear();
            self.up = Up::Sent;
        }
        Ok(at)
    }

    /// Writes the `PARAMS` stream of the request whose head is in `head`.
    fn write_params(&mut self, content_length: Option<u64>) -> Result<(), Error> {
        let mut out = std::mem::take(&mut self.out);
        let r = self.params_into(content_length, &mut out);
        self.out = out;
        r
    }

    fn params_into(&self, content_length: Option<u64>, out: &mut Vec<u8>) -> Result<(), Error> {
        let buf = &self.head[..self.head_len];
        // Parsed once already: it parses again.
        let limits = http1::Limits {
            max_head: MAX_HEAD,
            max_request_line: MAX_HEAD,
            max_headers: 1000,
            require_host: false,
        };
        let head = http1::parse_request(buf, &limits)
            .map_err(Error::Head)?
            .ok_or(Error::Head(http1::Error::Truncated))?;
        let target = head.target.of(buf);
        let query = target
            .iter()
            .position(|&b| b == b'?')
            .map_or(&[][..], |q| &target[q + 1..]);
        let fields = http1::fields(buf, head.len)
            .map(|f| (f.name.of(buf), f.value.of(buf)))
            .filter(|(n, _)| !is_hop_by_hop(n));
        let content_type = fields
            .clone()
            .find(|(n, _)| n.eq_ignore_ascii_case(b"content-type"))
            .map_or(&[][..], |(_, v)| v);
        let host = head.authority.map_or(&[][..], |a| a.of(buf));
        let req = Request {
            method: head.method_span.of(buf),
            request_uri: target,
            document_uri: self.name(1),
            query,
            script_name: self.name(2),
            path_info: self.name(3),
            document_root: self.name(0),
            protocol: match head.version {
                Version::Http10 => b"HTTP/1.0",
                _ => b"HTTP/1.1",
            },
            https: self.https,
            content_type,
            content_length,
            server_name: host_name(host),
            server_software: self.name(4),
            remote: self.remote,
            local: self.local,
        };
        let mut params = Params::new(out, REQUEST_ID);
        let r = write_params(&req, fields, &mut params);
        params.finish();
        r.map(|_| ()).map_err(Error::Params)
    }

    /// Takes records the application sent (`input`) and writes response bytes into `out`:
    /// returns (bytes of `input` consumed, bytes written). Stops when `out` is full; the bytes
    /// not consumed must be given again, first, with what comes after them.
    pub fn read(&mut self, input: &[u8], out: &mut [u8]) -> Result<(usize, usize), Error> {
        let mut used = 0;
        let mut wrote = 0;
        loop {
            if self.owed > 0 {
                let n = self.owed.min(input.len() - used);
                let (u, w) = self
                    .translator
                    .feed(&input[used..used + n], &mut out[wrote..])
                    .map_err(Error::Response)?;
                used += u;
                wrote += w;
                self.owed -= u;
                if self.owed > 0 {
                    return Ok((used, wrote));
                }
            }
            if self.ended {
                if used < input.len() {
                    return Err(Error::Records(super::Error::AfterEnd));
                }
                wrote += self
                    .translator
                    .finish(&mut out[wrote..])
                    .map_err(Error::Response)?;
                return Ok((used, wrote));
            }
            // What the translator holds back (a head, a chunk's framing) goes first.
            let (_, w) = self
                .translator
                .feed(&[], &mut out[wrote..])
                .map_err(Error::Response)?;
            wrote += w;
            if used == input.len() || wrote == out.len() {
                return Ok((used, wrote));
            }
            let (u, event) = self.decoder.feed(&input[used..]).map_err(Error::Records)?;
            match event {
                Some(Event::Stdout(r)) => {
                    let (start, end) = (used + r.start, used + r.end);
                    let (c, w) = self
                        .translator
                        .feed(&input[start..end], &mut out[wrote..])
                        .map_err(Error::Response)?;
                    wrote += w;
                    used = start + c;
                    self.owed = end - used;
                }
                Some(Event::Stderr(r)) => {
                    self.take_stderr(&input[used + r.start..used + r.end]);
                    used += u;
                }
                Some(Event::End {
                    protocol_status, ..
                }) => {
                    used += u;
                    if protocol_status != ProtocolStatus::RequestComplete
                        && !self.translator.is_headed()
                    {
                        return Err(Error::Refused(protocol_status));
                    }
                    self.ended = true;
                }
                Some(Event::GetValuesResult(_)) | None => used += u,
            }
        }
    }

    fn take_stderr(&mut self, bytes: &[u8]) {
        let room = STDERR_LINE * 4 - self.stderr.len().min(STDERR_LINE * 4);
        let n = bytes.len().min(room);
        self.stderr.extend_from_slice(&bytes[..n]);
    }

    /// Gives the complete `STDERR` lines read so far to `log` (each at most 2 KiB, at most 64 per
    /// request: the rest are counted); at the response's end, the last partial line too.
    pub fn stderr_lines(&mut self, mut log: impl FnMut(&[u8])) {
        let mut start = 0;
        loop {
            let rest = &self.stderr[start..];
            let end = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => i,
                None if rest.len() >= STDERR_LINE || (self.ended && !rest.is_empty()) => rest.len(),
                None => break,
            };
            let line = &rest[..end.min(STDERR_LINE)];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if self.stderr_lines < STDERR_LINES {
                log(line);
                self.stderr_lines += 1;
            } else {
                self.stderr_dropped += 1;
            }
            start += (end + 1).min(rest.len());
        }
        self.stderr.drain(..start);
    }

    /// `STDERR` lines of this request that were over the per-request bound, not given.
    pub fn stderr_dropped(&self) -> u32 {
        self.stderr_dropped
    }
}

/// After a chunk's size line: its data, or the trailer section after the last chunk.
fn after_size(n: u64) -> Dechunk {
    if n == 0 {
        Dechunk::Trailer { len: 0 }
    } else {
        Dechunk::Data(n)
    }
}

/// A host without its port (`example.com:8080` → `example.com`, `[::1]:80` → `[::1]`).
fn host_name(host: &[u8]) -> &[u8] {
    if host.first() == Some(&b'[') {
        return match host.iter().position(|&b| b == b']') {
            Some(i) => &host[..=i],
            None => host,
        };
    }
    match host.iter().rposition(|&b| b == b':') {
        Some(i) => &host[..i],
        None => host,
    }
}

#[cfg(test)]
#[path = "gateway_tests.rs"]
mod tests;
