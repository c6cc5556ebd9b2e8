//! The response head of a CGI program (RFC 3875 §6), as FastCGI applications and CGI scripts
//! write it on their standard output, and the HTTP/1.1 head Quill writes from it.
//!
//! Pure: no sockets, no allocation. [`parse_head`] takes the output read so far and answers
//! `Ok(None)` until the blank line that ends the head has arrived; lines end in LF or CRLF
//! (scripts write bare LF). `Status`, `Location`, `Content-Type` and `Content-Length` are read
//! into a [`CgiHead`]; the other fields stay in the buffer, in their order, for [`CgiHead::fields`]
//! and [`write_response_head`], which drop the hop-by-hop ones (the caller frames the response).
//!
//! What is refused, so that a response is never read two ways: obs-fold, a CR that does not end a
//! line, NUL and other controls in a value, a field name that is not a token, a head over
//! [`Limits::max_head`] or with more than [`Limits::max_fields`] fields, a head with no field at
//! all, a `Status` that is not three digits with an optional reason or whose code is outside
//! 200-599 (a CGI program gives one final status: a 1xx would leave the client waiting for
//! another), `Content-Length` that is not digits or that differs when repeated, and `Status`,
//! `Location` or `Content-Type` given twice.
//!
//! A document response needs `Content-Type` (RFC 3875 §6.3.1), but HTTP lets a response go
//! without one (RFC 9110 §8.3), a `204` or `304` has none, and nginx passes such responses on:
//! Quill does the same, adding no type of its own.

#[cfg(test)]
mod tests;
pub mod translate;

pub use translate::{BodyFraming, Translator};

use std::fmt;
use std::io::Write as _;

use crate::http1::{is_tchar, reason, Span};

/// Size limits of a CGI response head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes of a head, its blank line included: more is [`Error::HeadTooLarge`].
    pub max_head: usize,
    /// Most header fields: more is [`Error::TooManyFields`].
    pub max_fields: usize,
}

impl Default for Limits {
    /// 16 KiB and 100 fields, as for the heads of HTTP servers.
    fn default() -> Limits {
        Limits {
            max_head: 16 * 1024,
            max_fields: 100,
        }
    }
}

/// Why a CGI response head is refused (the caller answers 502).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Error {
    /// The head is longer than [`Limits::max_head`].
    HeadTooLarge,
    /// More fields than [`Limits::max_fields`].
    TooManyFields,
    /// The head ends before any field: a CGI response has at least one.
    NoFields,
    /// A CR that does not end a line.
    BareCr,
    /// NUL, DEL or another control character (but HTAB) in a value.
    ControlChar,
    /// A line that starts with space or tab (obsolete line folding).
    ObsFold,
    /// A line without a colon, or a name that is not a token (white space before the colon
    /// included).
    InvalidFieldName,
    /// `Status` is not `3DIGIT [SP reason]`, or its code is outside 200-599.
    InvalidStatus,
    /// `Location` is empty.
    InvalidLocation,
    /// `Content-Length` is not all digits, or overflows.
    InvalidContentLength,
    /// Several `Content-Length` with different values.
    ConflictingContentLength,
    /// `Status`, `Location` or `Content-Type` given twice.
    DuplicateField,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::HeadTooLarge => "cgi response head too large",
            Error::TooManyFields => "cgi response head with too many fields",
            Error::NoFields => "cgi response head without fields",
            Error::BareCr => "cgi response head with a CR not ending a line",
            Error::ControlChar => "cgi response field value with a control character",
            Error::ObsFold => "cgi response head with a folded line",
            Error::InvalidFieldName => "cgi response field name not a token",
            Error::InvalidStatus => "cgi Status not a code of 200-599 with a reason",
            Error::InvalidLocation => "cgi Location empty",
            Error::InvalidContentLength => "cgi Content-Length not a number",
            Error::ConflictingContentLength => "cgi Content-Length given twice, differently",
            Error::DuplicateField => "cgi Status, Location or Content-Type given twice",
        })
    }
}

impl std::error::Error for Error {}

/// The status a CGI program gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    /// 200-599.
    pub code: u16,
    /// The reason phrase after the code (may be empty).
    pub reason: Span,
}

/// What kind of response a head is (RFC 3875 §6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A document (or a status and fields without `Location`).
    Document,
    /// `Location` with a local path (`/...`, not `//...`) and no `Status`: the server may serve
    /// that path instead (the caller decides; answered as a `302` otherwise).
    LocalRedirect(Span),
    /// `Location` with anything else, or with a `Status`: passed to the client, `302` unless the
    /// program gave a status.
    ClientRedirect,
}

/// A parsed CGI response head: spans are of the buffer it was parsed from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgiHead {
    /// Bytes of the head, its blank line included: the body starts there.
    pub len: usize,
    /// `Status`, if given.
    pub status: Option<Status>,
    /// The value of `Location`, if given.
    pub location: Option<Span>,
    /// The value of `Content-Type`, if given.
    pub content_type: Option<Span>,
    /// `Content-Length`, if given (the caller frames with it, and checks the body against it).
    pub content_length: Option<u64>,
}

impl CgiHead {
    /// The kind of response (`buf` is the buffer the head was parsed from).
    pub fn kind(&self, buf: &[u8]) -> Kind {
        match (self.location, self.status) {
            (None, _) => Kind::Document,
            (Some(at), None) if is_local_path(at.of(buf)) => Kind::LocalRedirect(at),
            (Some(_), _) => Kind::ClientRedirect,
        }
    }

    /// The status to answer: the program's, else `302` with a `Location`, else `200`.
    pub fn status_code(&self) -> u16 {
        match (self.status, self.location) {
            (Some(s), _) => s.code,
            (None, Some(_)) => 302,
            (None, None) => 200,
        }
    }

    /// The fields to pass to the client, in order (`Location` and `Content-Type` included):
    /// all but `Status`, `Content-Length` and the hop-by-hop fields (`Connection`,
    /// `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`).
    pub fn fields<'a>(&self, buf: &'a [u8]) -> Fields<'a> {
        Fields {
            head: buf.get(..self.len).unwrap_or_default(),
            at: 0,
        }
    }
}

/// A path the server can serve itself: `/` and not `//` (a network-path reference names a host).
fn is_local_path(location: &[u8]) -> bool {
    location.first() == Some(&b'/') && location.get(1) != Some(&b'/')
}

/// The fields of a head passed on (see [`CgiHead::fields`]): `(name, value)` as the program
/// wrote them, the value without surrounding white space.
#[derive(Clone, Debug)]
pub struct Fields<'a> {
    head: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Fields<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let rest = self.head.get(self.at..)?;
            let lf = memchr::memchr(b'\n', rest)?;
            self.at += lf + 1;
            let line = strip_cr(&rest[..lf]);
            // The head was checked: every line up to the blank one has a colon.
            let (name, value) = split_field(line)?;
            if !is_dropped(name) {
                return Some((name, value));
            }
        }
    }
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// A line's name and its value without surrounding white space.
fn split_field(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = memchr::memchr(b':', line)?;
    Some((&line[..colon], line[colon + 1..].trim_ascii()))
}

/// Fields the program may not decide: the status and length (read into the head) and what
/// belongs to one connection.
fn is_dropped(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"status")
        || name.eq_ignore_ascii_case(b"content-length")
        || is_hop_by_hop(name)
}

/// The fields of one connection, not of the message (a gateway passes none of them on, in
/// either direction).
pub(crate) fn is_hop_by_hop(name: &[u8]) -> bool {
    const HOP: [&[u8]; 7] = [
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    ];
    HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
}

/// Reads a CGI response head from the start of `buf`: `Ok(None)` while its blank line has not
/// arrived (and `buf` is within [`Limits::max_head`]), else the head and its length. A prefix of
/// a head that is refused is never read as a different head: it is incomplete or refused too.
pub fn parse_head(buf: &[u8], limits: &Limits) -> Result<Option<(CgiHead, usize)>, Error> {
    let mut head = CgiHead::default();
    let mut fields = 0;
    let mut at = 0;
    loop {
        let Some(lf) = memchr::memchr(b'\n', &buf[at..]) else {
            return if buf.len() > limits.max_head {
                Err(Error::HeadTooLarge)
            } else {
                Ok(None)
            };
        };
        let end = at + lf + 1;
        if end > limits.max_head {
            return Err(Error::HeadTooLarge);
        }
        let line_start = at;
        let line = strip_cr(&buf[at..at + lf]);
        at = end;
        if line.is_empty() {
            if fields == 0 {
                return Err(Error::NoFields);
            }
            head.len = end;
            return Ok(Some((head, end)));
        }
        fields += 1;
        if fields > limits.max_fields {
            return Err(Error::TooManyFields);
        }
        read_field(&mut head, line, line_start)?;
    }
}

/// Checks one field line (starting at `start` in the buffer) and reads it into `head` if it is
/// one of the four CGI fields.
fn read_field(head: &mut CgiHead, line: &[u8], start: usize) -> Result<(), Error> {
    if matches!(line[0], b' ' | b'\t') {
        return Err(Error::ObsFold);
    }
    let colon = memchr::memchr(b':', line).ok_or(Error::InvalidFieldName)?;
    let name = &line[..colon];
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(Error::InvalidFieldName);
    }
    if line.contains(&b'\r') {
        // A CR inside the line (the one ending it was stripped): others read it as a line end.
        return Err(Error::BareCr);
    }
    let raw = &line[colon + 1..];
    if raw.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err(Error::ControlChar);
    }
    let value = raw.trim_ascii();
    let lead = raw.len() - raw.trim_ascii_start().len();
    let value_start = start + colon + 1 + lead;
    let span = Span {
        start: value_start,
        end: value_start + value.len(),
    };
    match name {
        n if n.eq_ignore_ascii_case(b"status") => set_once(&mut head.status, status(value, span)?),
        n if n.eq_ignore_ascii_case(b"location") => match value.is_empty() {
            true => Err(Error::InvalidLocation),
            false => set_once(&mut head.location, span),
        },
        n if n.eq_ignore_ascii_case(b"content-type") => set_once(&mut head.content_type, span),
        n if n.eq_ignore_ascii_case(b"content-length") => content_length(head, value),
        _ => Ok(()),
    }
}

fn set_once<T>(slot: &mut Option<T>, value: T) -> Result<(), Error> {
    match slot {
        Some(_) => Err(Error::DuplicateField),
        None => {
            *slot = Some(value);
            Ok(())
        }
    }
}

/// `3DIGIT [SP reason]`, the code within 200-599; `span` is the value's place in the buffer.
fn status(value: &[u8], span: Span) -> Result<Status, Error> {
    let (digits, rest) = value.split_at(value.len().min(3));
    if digits.len() != 3 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(Error::InvalidStatus);
    }
    if !rest.is_empty() && !matches!(rest[0], b' ' | b'\t') {
        return Err(Error::InvalidStatus);
    }
    let code = digits
        .iter()
        .fold(0u16, |n, &d| n * 10 + u16::from(d - b'0'));
    if !(200..=599).contains(&code) {
        return Err(Error::InvalidStatus);
    }
    let reason = rest.trim_ascii_start();
    let reason_start = span.end - reason.len();
    Ok(Status {
        code,
        reason: Span {
            start: reason_start,
            end: span.end,
        },
    })
}

fn content_length(head: &mut CgiHead, value: &[u8]) -> Result<(), Error> {
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return Err(Error::InvalidContentLength);
    }
    let n = value
        .iter()
        .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    match head.content_length {
        Some(m) if m != n => Err(Error::ConflictingContentLength),
        _ => {
            head.content_length = Some(n);
            Ok(())
        }
    }
}

/// How the caller frames the body it sends after the head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length: N`.
    Length(u64),
    /// `Transfer-Encoding: chunked` (HTTP/1.1 clients).
    Chunked,
    /// No framing field: the body ends when the connection closes (HTTP/1.0 clients).
    Close,
}

/// The `Connection` field the caller asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Connection {
    /// No field (HTTP/1.1's default: kept alive).
    Omit,
    /// `Connection: keep-alive` (an HTTP/1.0 client that asked for it).
    KeepAlive,
    /// `Connection: close`.
    Close,
}

/// Appends to `out` the HTTP/1.1 response head for `head` (parsed from `buf`): the status line
/// (the program's reason, else the standard one), the fields passed on ([`CgiHead::fields`]),
/// the framing field and the `Connection` field asked for, and the blank line. Returns the
/// bytes written.
pub fn write_response_head(
    head: &CgiHead,
    buf: &[u8],
    framing: Framing,
    connection: Connection,
    out: &mut Vec<u8>,
) -> usize {
    let before = out.len();
    let code = head.status_code();
    let given = head.status.map(|s| s.reason.of(buf)).unwrap_or_default();
    let phrase = if given.is_empty() {
        reason(code).as_bytes()
    } else {
        given
    };
    // Writing to a Vec cannot fail.
    let _ = write!(out, "HTTP/1.1 {code} ");
    out.extend_from_slice(phrase);
    out.extend_from_slice(b"\r\n");
    for (name, value) in head.fields(buf) {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    match framing {
        Framing::Length(n) => {
            let _ = write!(out, "Content-Length: {n}\r\n");
        }
        Framing::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        Framing::Close => {}
    }
    out.extend_from_slice(match connection {
        Connection::Omit => b"",
        Connection::KeepAlive => b"Connection: keep-alive\r\n",
        Connection::Close => b"Connection: close\r\n",
    });
    out.extend_from_slice(b"\r\n");
    out.len() - before
}
