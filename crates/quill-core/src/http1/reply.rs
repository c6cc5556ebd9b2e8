//! Canned replies: the small answers Quill writes itself (400, 404, 503 ...), as static bytes
//! with `Content-Length` and `Connection: close`, and the reason phrases of the statuses Quill
//! uses. Nothing is formatted or allocated when one is sent.

/// A canned reply: a status line, `Content-Type`, `Content-Length`, `Connection: close`, and a
/// one-line plain-text body (`404 Not Found\n`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Canned {
    pub status: u16,
    /// The whole reply.
    pub bytes: &'static [u8],
    /// Bytes of the head: `&bytes[..head_len]` is the answer to a HEAD request.
    pub head_len: usize,
}

impl Canned {
    /// The head only (for a HEAD request).
    pub fn head(&self) -> &'static [u8] {
        self.bytes.get(..self.head_len).unwrap_or(self.bytes)
    }
}

/// The canned reply for `status`, if it has one: 400, 403, 404, 405, 408, 413, 414, 421, 429,
/// 431, 500, 501, 502, 503, 504, 505.
pub fn canned(status: u16) -> Option<Canned> {
    let bytes: &'static [u8] = match status {
        400 => b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 16\r\nConnection: close\r\n\r\n400 Bad Request\n",
        403 => b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 14\r\nConnection: close\r\n\r\n403 Forbidden\n",
        404 => b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 14\r\nConnection: close\r\n\r\n404 Not Found\n",
        405 => b"HTTP/1.1 405 Method Not Allowed\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 23\r\nConnection: close\r\n\r\n405 Method Not Allowed\n",
        408 => b"HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 20\r\nConnection: close\r\n\r\n408 Request Timeout\n",
        413 => b"HTTP/1.1 413 Content Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 22\r\nConnection: close\r\n\r\n413 Content Too Large\n",
        414 => b"HTTP/1.1 414 URI Too Long\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 17\r\nConnection: close\r\n\r\n414 URI Too Long\n",
        421 => b"HTTP/1.1 421 Misdirected Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 24\r\nConnection: close\r\n\r\n421 Misdirected Request\n",
        429 => b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 22\r\nConnection: close\r\n\r\n429 Too Many Requests\n",
        431 => b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 36\r\nConnection: close\r\n\r\n431 Request Header Fields Too Large\n",
        500 => b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 26\r\nConnection: close\r\n\r\n500 Internal Server Error\n",
        501 => b"HTTP/1.1 501 Not Implemented\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 20\r\nConnection: close\r\n\r\n501 Not Implemented\n",
        502 => b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 16\r\nConnection: close\r\n\r\n502 Bad Gateway\n",
        503 => b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 24\r\nConnection: close\r\n\r\n503 Service Unavailable\n",
        504 => b"HTTP/1.1 504 Gateway Timeout\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 20\r\nConnection: close\r\n\r\n504 Gateway Timeout\n",
        505 => b"HTTP/1.1 505 HTTP Version Not Supported\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 31\r\nConnection: close\r\n\r\n505 HTTP Version Not Supported\n",
        _ => return None,
    };
    let head_len = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(bytes.len(), |i| i + 4);
    Some(Canned {
        status,
        bytes,
        head_len,
    })
}

/// The reason phrase of a status Quill sends or reports ("Unknown" for others).
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        414 => "URI Too Long",
        421 => "Misdirected Request",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}
