//! Just enough HTTP/1.1 for the admin listener: one bounded request head, read by the shared
//! strict parser (`quill_core::http1`), and one response rendered. No keep-alive, no request
//! bodies: the admin endpoints are small GETs, and one request per connection keeps every
//! connection's life short and its cost bounded. The socket side (deadlines, nonblocking reads and
//! writes) is in `server`.

use quill_core::http1::{self, Limits};

/// Largest request head accepted (request line and headers); larger gets 431.
pub(super) const MAX_HEAD: usize = 8 * 1024;
/// Most header fields accepted; more gets 431.
const MAX_HEADERS: usize = 32;
/// `Host` is optional here: a scrape without one is still answered (and one that sends one is
/// checked against the local names, see `auth`).
const LIMITS: Limits = Limits {
    max_head: MAX_HEAD,
    max_request_line: MAX_HEAD,
    max_headers: MAX_HEADERS,
    require_host: false,
};

/// The parts of a request the routes look at.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Request {
    pub method: String,
    /// The path without the query string.
    pub path: String,
    /// The `Host` header, if sent.
    pub host: Option<String>,
    /// The `Authorization` header, if sent.
    pub authorization: Option<String>,
}

/// Why a request head is refused.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum HeadError {
    /// The head is over `MAX_HEAD` bytes or `MAX_HEADERS` fields.
    TooLarge,
    /// Not HTTP/1.x, or broken by one of the strict rules of `http1`.
    Malformed,
}

/// Parses a request head: `Ok(None)` while incomplete. Two `Host` or two `Authorization` headers
/// are malformed (which one would count is exactly what a smuggling attempt plays on).
pub(super) fn parse(bytes: &[u8]) -> Result<Option<Request>, HeadError> {
    let head = match http1::parse_request(bytes, &LIMITS) {
        Ok(Some(head)) => head,
        Ok(None) => return Ok(None),
        Err(e) if e.request_status() == 431 => return Err(HeadError::TooLarge),
        Err(_) => return Err(HeadError::Malformed),
    };
    let text = |span: http1::Span| String::from_utf8_lossy(span.of(bytes)).into_owned();
    let target = head.target.of(bytes);
    let path = target.split(|&b| b == b'?').next().unwrap_or(b"/");
    let mut authorization = http1::fields(bytes, head.len)
        .filter(|f| f.name.of(bytes).eq_ignore_ascii_case(b"authorization"));
    let first = authorization.next();
    if authorization.next().is_some() {
        return Err(HeadError::Malformed);
    }
    Ok(Some(Request {
        method: text(head.method_span),
        path: String::from_utf8_lossy(path).into_owned(),
        host: head.host.map(text),
        authorization: first.map(|f| text(f.value)),
    }))
}

/// One response, always sent with `Content-Length` and `Connection: close`.
#[derive(Debug)]
pub(super) struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub(super) fn ok(content_type: &'static str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status: 200,
            content_type,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    /// A plain-text error page: the status line's reason, and a newline.
    pub(super) fn error(status: u16) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            headers: Vec::new(),
            body: format!("{status} {}\n", http1::reason(status)).into_bytes(),
        }
    }

    /// An error page that says why, after the status line's reason.
    pub(super) fn error_because(status: u16, why: &str) -> Response {
        Response {
            body: format!("{status} {}: {why}\n", http1::reason(status)).into_bytes(),
            ..Response::error(status)
        }
    }

    pub(super) fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Response {
        self.headers.push((name, value.into()));
        self
    }

    /// The status line and headers.
    pub(super) fn head(&self) -> String {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n",
            self.status,
            http1::reason(self.status),
            self.content_type,
            self.body.len()
        );
        for (name, value) in &self.headers {
            out += &format!("{name}: {value}\r\n");
        }
        out += "\r\n";
        out
    }

    /// The bytes to send: head and body (without the body for `HEAD`).
    pub(super) fn into_bytes(self, with_body: bool) -> Vec<u8> {
        let mut out = self.head().into_bytes();
        if with_body {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, want: Result<Option<(&str, &str)>, HeadError>) {
        let got = parse(input.as_bytes());
        let want = want.map(|o| {
            o.map(|(m, p)| Request {
                method: m.into(),
                path: p.into(),
                host: None,
                authorization: None,
            })
        });
        assert_eq!(got, want, "input {input:?}");
    }

    #[test]
    fn parse_reads_method_and_path_and_drops_the_query() {
        check("GET / HTTP/1.1\r\n\r\n", Ok(Some(("GET", "/"))));
        check(
            "POST /api/status HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            Ok(Some(("POST", "/api/status"))),
        );
    }

    #[test]
    fn parse_keeps_host_and_authorization_and_refuses_them_twice() {
        let got =
            parse(b"GET /metrics?x=1 HTTP/1.0\r\nhOST:  a:1 \r\nAuthorization: Bearer x\r\n\r\n");
        let want = Request {
            method: "GET".into(),
            path: "/metrics".into(),
            host: Some("a:1".into()),
            authorization: Some("Bearer x".into()),
        };
        assert_eq!(got, Ok(Some(want)));
        for twice in [
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            "GET / HTTP/1.1\r\nAuthorization: a\r\nauthorization: b\r\n\r\n",
        ] {
            check(twice, Err(HeadError::Malformed));
        }
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
            Err(HeadError::Malformed),
        );
        check("GET / SPDY/3\r\n\r\n", Err(HeadError::Malformed));
        check(
            "GET / HTTP/1.1\r\nBad Header\r\n\r\n",
            Err(HeadError::Malformed),
        );
    }

    #[test]
    fn parse_refuses_too_many_headers() {
        let mut req = String::from("GET / HTTP/1.1\r\n");
        for i in 0..=MAX_HEADERS {
            req += &format!("X-{i}: v\r\n");
        }
        req += "\r\n";
        check(&req, Err(HeadError::TooLarge));
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
