//! Just enough HTTP/1.1 for the admin listener: read one bounded request head within a deadline
//! (parsed by `httparse`), write one response, close. No keep-alive, no request bodies, no chunked
//! encoding: the admin endpoints are small GETs, and one request per connection keeps every
//! connection's life short and its cost bounded.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// Largest request head accepted (request line and headers); larger gets 431.
pub const MAX_HEAD: usize = 8 * 1024;
/// Most header fields accepted; more gets 431.
const MAX_HEADERS: usize = 32;
/// After answering, how long and how much we read and discard before closing, so that a client
/// still sending (an oversized head, a body) gets our answer instead of a reset.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 256 * 1024;

/// The parts of a request the routes look at.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// The path without the query string.
    pub path: String,
}

/// Why no request could be read.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The client closed or reset before sending a whole head: nothing to answer.
    Closed,
    /// The deadline passed; `started` says whether any byte had arrived.
    TimedOut { started: bool },
    /// The head is over `MAX_HEAD` bytes or `MAX_HEADERS` fields.
    TooLarge,
    /// Not HTTP/1.x.
    Malformed,
}

/// Reads one request head from `stream`, giving up at `deadline` (a slow client cannot hold the
/// connection longer, however it trickles its bytes).
pub fn read_request(stream: &mut TcpStream, deadline: Instant) -> Result<Request, ReadError> {
    let mut buf = vec![0u8; MAX_HEAD];
    let mut len = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ReadError::TimedOut { started: len > 0 });
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|_| ReadError::Closed)?;
        match stream.read(&mut buf[len..]) {
            Ok(0) => return Err(ReadError::Closed),
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if is_timeout(&e) => return Err(ReadError::TimedOut { started: len > 0 }),
            Err(_) => return Err(ReadError::Closed),
        }
        if let Some(req) = parse(&buf[..len])? {
            return Ok(req);
        }
        if len == MAX_HEAD {
            return Err(ReadError::TooLarge);
        }
    }
}

/// Parses a request head: `Ok(None)` while incomplete.
pub fn parse(bytes: &[u8]) -> Result<Option<Request>, ReadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(bytes) {
        Ok(httparse::Status::Partial) => Ok(None),
        Ok(httparse::Status::Complete(_)) => {
            let target = req.path.unwrap_or("/");
            let path = target.split(['?', '#']).next().unwrap_or("/");
            Ok(Some(Request {
                method: req.method.unwrap_or("").to_string(),
                path: path.to_string(),
            }))
        }
        Err(httparse::Error::TooManyHeaders) => Err(ReadError::TooLarge),
        Err(_) => Err(ReadError::Malformed),
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// One response, always sent with `Content-Length` and `Connection: close`.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn ok(content_type: &'static str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status: 200,
            content_type,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    /// A plain-text error page: the status line's reason, and a newline.
    pub fn error(status: u16) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            headers: Vec::new(),
            body: format!("{status} {}\n", reason(status)).into_bytes(),
        }
    }

    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Response {
        self.headers.push((name, value.into()));
        self
    }

    /// The status line and headers.
    pub fn head(&self) -> String {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        );
        for (name, value) in &self.headers {
            out += &format!("{name}: {value}\r\n");
        }
        out += "\r\n";
        out
    }

    /// Writes the response (without the body for `HEAD`); the stream's write timeout bounds it.
    pub fn write_to(&self, stream: &mut TcpStream, with_body: bool) -> io::Result<()> {
        let mut out = self.head().into_bytes();
        if with_body {
            out.extend_from_slice(&self.body);
        }
        stream.write_all(&out)
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// Closes after a response: sends our FIN, then reads and discards what the client still sends
/// (bounded in time and bytes) so the close does not turn into a reset that destroys the answer
/// in the client's receive queue.
pub fn linger_close(mut stream: TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
    let deadline = Instant::now() + LINGER;
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    while drained < LINGER_BYTES {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut sink) {
            Ok(0) => return,
            Ok(n) => drained += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, want: Result<Option<(&str, &str)>, ReadError>) {
        let got = parse(input.as_bytes());
        let want = want.map(|o| {
            o.map(|(m, p)| Request {
                method: m.into(),
                path: p.into(),
            })
        });
        assert_eq!(got, want, "input {input:?}");
    }

    #[test]
    fn parse_reads_method_and_path_and_drops_the_query() {
        check("GET / HTTP/1.1\r\n\r\n", Ok(Some(("GET", "/"))));
        check(
            "GET /metrics?x=1 HTTP/1.0\r\nHost: a\r\n\r\n",
            Ok(Some(("GET", "/metrics"))),
        );
        check(
            "POST /api/status HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            Ok(Some(("POST", "/api/status"))),
        );
    }

    #[test]
    fn parse_waits_for_the_end_of_the_head() {
        check("GET / HTTP/1.1\r\nHost: a\r\n", Ok(None));
        check("GE", Ok(None));
    }

    #[test]
    fn parse_rejects_what_is_not_http() {
        check(
            "\x16\x03\x01\x02\x00\x01\x00\x01\x7f\x03\x03",
            Err(ReadError::Malformed),
        );
        check("GET / SPDY/3\r\n\r\n", Err(ReadError::Malformed));
        check(
            "GET / HTTP/1.1\r\nBad Header\r\n\r\n",
            Err(ReadError::Malformed),
        );
    }

    #[test]
    fn parse_refuses_too_many_headers() {
        let mut req = String::from("GET / HTTP/1.1\r\n");
        for i in 0..=MAX_HEADERS {
            req += &format!("X-{i}: v\r\n");
        }
        req += "\r\n";
        check(&req, Err(ReadError::TooLarge));
    }

    #[test]
    fn response_head_has_length_and_close() {
        let r = Response::error(404).with_header("Allow", "GET");
        let head = r.head();
        assert!(head.starts_with("HTTP/1.1 404 Not Found\r\n"), "{head}");
        assert!(head.contains("Content-Length: 14\r\n"), "{head}");
        assert!(head.contains("Connection: close\r\n"), "{head}");
        assert!(head.ends_with("Allow: GET\r\n\r\n"), "{head}");
    }
}
