//! HTTP/1.x, pure and strict: request and response heads, body framing and canned replies, for
//! every part of Quill that speaks HTTP (the admin listener, health checks, the demo backends,
//! the load generator, and the HTTP proxy to come).
//!
//! No sockets, no clock, no allocation: functions take the bytes received so far and return
//! offsets into them ([`Span`]), so the caller keeps its buffer and forwards bytes as they are.
//! The parsers follow RFC 9112 with the strict rules of docs/design.md#http-parsing-rules: every
//! way a message could be read two ways (bare CR or LF, obs-fold, a space before a colon,
//! conflicting framing headers, an unknown transfer coding ...) is an [`Error`] of its own kind, so
//! the proxy can answer 400, 431, 501 or 502, count parse errors by kind, and never forward a
//! message it then rejects.
//!
//! - [`head`]: [`parse_request`] and [`parse_response`] read a whole head in one left-to-right
//!   pass (an error is reported as soon as the bytes show it, so a head parsed again as bytes
//!   arrive gives the same answer as one parsed at once); [`fields`] walks its header lines;
//!   [`status_code`] reads just the status of a response (health checks).
//! - [`body`]: [`Framing`] says how a body ends; [`Body`] is fed the bytes after the head and says
//!   how many belong to the message, validating chunk lines and trailers without re-chunking.
//! - `grammar`: the byte classes (token, target, value, `Host`, control) the others share.
//! - [`path`]: request paths in normal form (what routes match); [`referer`]: the host a
//!   `Referer` names (hotlink rules).
//! - [`reply`]: canned replies (`400`, `404`, ... `504`) as static bytes, and reason phrases.

pub mod body;
mod grammar;
pub mod head;
pub mod path;
pub mod referer;
pub mod reply;
pub mod rewrite;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod rewrite_proptests;
#[cfg(test)]
mod tests;

use std::fmt;

pub use body::{Body, Fed, Framing};
pub use head::{
    field_value, fields, has_blank_line, parse_own_response_indexed, parse_request,
    parse_request_indexed, parse_response, parse_response_indexed, status_code, Connection,
    EndToEnd, Field, FieldIndex, Fields, Method, RequestHead, ResponseHead, Target, Version,
};
pub use reply::{canned, reason, Canned};
// The token test, for the FastCGI and CGI field names.
pub(crate) use grammar::is_tchar;

/// A byte range of the buffer a head was parsed from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    /// The bytes of `buf` this span covers (empty if `buf` is not the buffer it came from).
    pub fn of<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        buf.get(self.start..self.end).unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.end.saturating_sub(self.start)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Size limits of a head, and whether a request must name its host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes of a head (start line, fields and the blank line): more is [`Error::HeadTooLarge`].
    pub max_head: usize,
    /// Most bytes of a request line, its CRLF included: more is [`Error::RequestLineTooLong`]
    /// (when below `max_head`; else the head's limit is met first).
    pub max_request_line: usize,
    /// Most header fields: more is [`Error::TooManyHeaders`].
    pub max_headers: usize,
    /// An HTTP/1.1 request without `Host` is [`Error::MissingHost`]. Always on in the proxy; the
    /// admin listener and the demo backends accept one (as they always did).
    pub require_host: bool,
}

impl Default for Limits {
    /// 16 KiB (a head stays in one pooled read buffer), an 8 KiB request line, 100 fields, `Host`
    /// required.
    fn default() -> Limits {
        Limits {
            max_head: 16 * 1024,
            max_request_line: 8 * 1024,
            max_headers: 100,
            require_host: true,
        }
    }
}

/// Why a message is refused. Each rule of docs/design.md#http-parsing-rules has its own kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Error {
    /// The head is longer than [`Limits::max_head`] (431).
    HeadTooLarge,
    /// The request line is longer than [`Limits::max_request_line`] (414).
    RequestLineTooLong,
    /// More header fields than [`Limits::max_headers`] (431).
    TooManyHeaders,
    /// A CR not followed by LF.
    BareCr,
    /// An LF not preceded by CR.
    BareLf,
    /// NUL, DEL or another control character (other than HTAB in a value) in the head.
    ControlChar,
    /// Space or tab between a field name and its colon.
    SpaceBeforeColon,
    /// A line that starts with space or tab (obsolete line folding).
    ObsFold,
    /// The method is not a token.
    InvalidMethod,
    /// A field name is not a token, or a field line has no colon.
    InvalidHeaderName,
    /// A request line that is not `method SP target SP version CRLF`.
    InvalidRequestLine,
    /// The request target has a byte outside the URI grammar, or a form the method does not
    /// allow (`*` is for OPTIONS only, authority-form for CONNECT only).
    InvalidTarget,
    /// Not `HTTP/1.0` or `HTTP/1.1` (HTTP/0.9, HTTP/2's preface and others).
    InvalidVersion,
    /// A status line that is not `HTTP/1.x SP 3DIGIT [SP reason] CRLF` with a status of 100-599.
    InvalidStatusLine,
    /// `Content-Length` is not all digits, or overflows.
    InvalidContentLength,
    /// Several `Content-Length` with different values.
    ConflictingContentLength,
    /// `Content-Length` together with `Transfer-Encoding`.
    ContentLengthWithTransferEncoding,
    /// `Transfer-Encoding` whose last coding is not `chunked` (or that applies it twice).
    TransferEncodingNotChunked,
    /// A transfer coding other than `chunked`, registered or not (501): Quill decodes none, and
    /// a lone `chunked` is the only framing it passes on as understood.
    UnknownTransferCoding,
    /// `Transfer-Encoding` in an HTTP/1.0 message.
    TransferEncodingInHttp10,
    /// An HTTP/1.1 request without `Host` (when [`Limits::require_host`]).
    MissingHost,
    /// Several `Host` fields.
    SeveralHosts,
    /// A `Host` value that is not a host and optional port.
    InvalidHost,
    /// A chunk size that is not hex digits, or overflows.
    BadChunkSize,
    /// A chunk-size line with a bad extension or line ending, or chunk data not followed by CRLF.
    BadChunkLine,
    /// A malformed or oversized trailer section.
    BadTrailer,
    /// The connection closed before the body's end.
    Truncated,
}

impl Error {
    /// Every kind, in declaration order (`ALL[e as usize] == e`): what metrics export by name.
    pub const ALL: [Error; 27] = [
        Error::HeadTooLarge,
        Error::RequestLineTooLong,
        Error::TooManyHeaders,
        Error::BareCr,
        Error::BareLf,
        Error::ControlChar,
        Error::SpaceBeforeColon,
        Error::ObsFold,
        Error::InvalidMethod,
        Error::InvalidHeaderName,
        Error::InvalidRequestLine,
        Error::InvalidTarget,
        Error::InvalidVersion,
        Error::InvalidStatusLine,
        Error::InvalidContentLength,
        Error::ConflictingContentLength,
        Error::ContentLengthWithTransferEncoding,
        Error::TransferEncodingNotChunked,
        Error::UnknownTransferCoding,
        Error::TransferEncodingInHttp10,
        Error::MissingHost,
        Error::SeveralHosts,
        Error::InvalidHost,
        Error::BadChunkSize,
        Error::BadChunkLine,
        Error::BadTrailer,
        Error::Truncated,
    ];

    /// The status Quill answers a client whose *request* has this error: 431 for the size
    /// limits, 414 for a long request line, 501 for a transfer coding other than a lone `chunked`, else 400. A *response* error is always 502.
    pub fn request_status(self) -> u16 {
        match self {
            Error::HeadTooLarge | Error::TooManyHeaders => 431,
            Error::RequestLineTooLong => 414,
            Error::UnknownTransferCoding => 501,
            _ => 400,
        }
    }

    /// A short stable name, for metrics labels and logs (`bare_lf`, `obs_fold`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Error::HeadTooLarge => "head_too_large",
            Error::RequestLineTooLong => "request_line_too_long",
            Error::TooManyHeaders => "too_many_headers",
            Error::BareCr => "bare_cr",
            Error::BareLf => "bare_lf",
            Error::ControlChar => "control_char",
            Error::SpaceBeforeColon => "space_before_colon",
            Error::ObsFold => "obs_fold",
            Error::InvalidMethod => "invalid_method",
            Error::InvalidHeaderName => "invalid_header_name",
            Error::InvalidRequestLine => "invalid_request_line",
            Error::InvalidTarget => "invalid_target",
            Error::InvalidVersion => "invalid_version",
            Error::InvalidStatusLine => "invalid_status_line",
            Error::InvalidContentLength => "invalid_content_length",
            Error::ConflictingContentLength => "conflicting_content_length",
            Error::ContentLengthWithTransferEncoding => "content_length_with_transfer_encoding",
            Error::TransferEncodingNotChunked => "transfer_encoding_not_chunked",
            Error::UnknownTransferCoding => "unknown_transfer_coding",
            Error::TransferEncodingInHttp10 => "transfer_encoding_in_http_1_0",
            Error::MissingHost => "missing_host",
            Error::SeveralHosts => "several_hosts",
            Error::InvalidHost => "invalid_host",
            Error::BadChunkSize => "bad_chunk_size",
            Error::BadChunkLine => "bad_chunk_line",
            Error::BadTrailer => "bad_trailer",
            Error::Truncated => "truncated",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Error::HeadTooLarge => "head too large",
            Error::RequestLineTooLong => "request line too long",
            Error::TooManyHeaders => "too many header fields",
            Error::BareCr => "CR not followed by LF",
            Error::BareLf => "LF not preceded by CR",
            Error::ControlChar => "control character in the head",
            Error::SpaceBeforeColon => "space before a field's colon",
            Error::ObsFold => "folded header line (obs-fold)",
            Error::InvalidMethod => "invalid method",
            Error::InvalidHeaderName => "invalid header field name",
            Error::InvalidRequestLine => "invalid request line",
            Error::InvalidTarget => "invalid request target",
            Error::InvalidVersion => "not HTTP/1.0 or HTTP/1.1",
            Error::InvalidStatusLine => "invalid status line",
            Error::InvalidContentLength => "invalid Content-Length",
            Error::ConflictingContentLength => "several different Content-Length",
            Error::ContentLengthWithTransferEncoding => {
                "Content-Length together with Transfer-Encoding"
            }
            Error::TransferEncodingNotChunked => "Transfer-Encoding does not end with chunked",
            Error::UnknownTransferCoding => "unknown transfer coding",
            Error::TransferEncodingInHttp10 => "Transfer-Encoding in HTTP/1.0",
            Error::MissingHost => "no Host in an HTTP/1.1 request",
            Error::SeveralHosts => "several Host fields",
            Error::InvalidHost => "invalid Host",
            Error::BadChunkSize => "invalid chunk size",
            Error::BadChunkLine => "invalid chunk line",
            Error::BadTrailer => "invalid trailer section",
            Error::Truncated => "connection closed before the end of the body",
        };
        f.write_str(text)
    }
}

impl std::error::Error for Error {}
