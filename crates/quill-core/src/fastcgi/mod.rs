//! FastCGI records (the 1996 Open Market specification), as Quill speaks them to a FastCGI server
//! (php-fpm, fcgiwrap): the writers of the records a web server sends ([`encode`]) and an
//! incremental reader of the records it gets back ([`Decoder`]).
//!
//! Pure: no sockets, no clock. Every record is an 8-byte header (version 1, type, request id,
//! content length, padding length, a reserved byte), at most [`MAX_CONTENT`] content bytes and
//! up to 255 padding bytes; Quill pads to a multiple of 8 as the specification recommends. Quill
//! runs one request at a time on a connection with request id [`REQUEST_ID`] (php-fpm answers
//! `FCGI_MPXS_CONNS` 0) and keeps the connection with `FCGI_KEEP_CONN` between requests.
//!
//! - [`encode`]: `BEGIN_REQUEST`, the `PARAMS` stream ([`Params`], with the `HTTP_*` names of
//!   request fields from [`http_param_name`], which refuses `Proxy`: httpoxy), `STDIN` headers for
//!   a body that goes out in a `writev` beside them ([`stdin_header`], [`padding`]), whole `STDIN`
//!   records for bytes at hand, `ABORT_REQUEST` and `GET_VALUES`. Writers append to the caller's
//!   `Vec<u8>`: no allocation once it has the capacity.
//! - [`decode`]: [`Decoder::feed`] takes the bytes read so far and yields [`Event`]s whose
//!   `STDOUT` and `STDERR` content are ranges of those bytes (no copy), whatever the boundaries
//!   the bytes arrived in.
//! - [`split_script`]: a request path cut into the script and `PATH_INFO`; [`request`]: the
//!   parameters of a request as nginx's `fastcgi_params` names them ([`write_params`]).

pub mod decode;
pub mod encode;
pub mod gateway;
pub mod request;

#[cfg(test)]
pub(crate) mod tests;

use std::fmt;

pub use decode::{Decoder, Event, ProtocolStatus, Values};
pub use encode::{
    abort_request, begin_request, end_stdin, get_values, http_param_name, padding, stdin,
    stdin_header, NameRefused, Params, Role,
};
pub use gateway::{Context, Gateway};
pub use request::{write_params, Request};

/// The only protocol version there is.
pub const VERSION: u8 = 1;
/// The bytes of a record header.
pub const HEADER_LEN: usize = 8;
/// Most content bytes in one record (a 16-bit length).
pub const MAX_CONTENT: usize = 65_535;
/// The request id Quill uses: one request at a time per connection, no multiplexing.
pub const REQUEST_ID: u16 = 1;
/// The request id of management records (`GET_VALUES`, `GET_VALUES_RESULT`, `UNKNOWN_TYPE`).
pub const MANAGEMENT_ID: u16 = 0;

/// Record types (the specification's `FCGI_*` values).
pub mod kind {
    pub const BEGIN_REQUEST: u8 = 1;
    pub const ABORT_REQUEST: u8 = 2;
    pub const END_REQUEST: u8 = 3;
    pub const PARAMS: u8 = 4;
    pub const STDIN: u8 = 5;
    pub const STDOUT: u8 = 6;
    pub const STDERR: u8 = 7;
    pub const DATA: u8 = 8;
    pub const GET_VALUES: u8 = 9;
    pub const GET_VALUES_RESULT: u8 = 10;
    pub const UNKNOWN_TYPE: u8 = 11;
}

/// Why the bytes from a FastCGI server cannot be read as records for this request. Any of these
/// means the connection's framing is in doubt: the caller answers 502 (before the response head)
/// or cuts the client (after it), and never reuses the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// A record header whose version byte is not 1.
    Version(u8),
    /// A request record for another request id, or a management record with an id other than 0.
    RequestId {
        /// The record's type.
        kind: u8,
        /// The id it carried.
        id: u16,
    },
    /// A type a server never sends to a web server (`BEGIN_REQUEST`, `PARAMS`, `STDIN`, ...), an
    /// `UNKNOWN_TYPE` answer (Quill sends only types the specification defines), or a type the
    /// specification does not define.
    UnexpectedType(u8),
    /// An `END_REQUEST` whose content is not the 8 bytes the specification gives it.
    EndLength(u16),
    /// A `GET_VALUES_RESULT` longer than [`decode::MAX_VALUES`] bytes, or whose name-value pairs
    /// do not fill its content exactly.
    Values,
    /// A byte after this request's `END_REQUEST`.
    AfterEnd,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Version(v) => write!(f, "fastcgi record of version {v}, not 1"),
            Error::RequestId { kind, id } => {
                write!(f, "fastcgi record of type {kind} for request id {id}")
            }
            Error::UnexpectedType(t) => {
                write!(
                    f,
                    "fastcgi record of type {t}, which a server does not send"
                )
            }
            Error::EndLength(n) => {
                write!(f, "fastcgi END_REQUEST with {n} content bytes, not 8")
            }
            Error::Values => f.write_str("fastcgi GET_VALUES_RESULT malformed or too long"),
            Error::AfterEnd => f.write_str("fastcgi bytes after the request's END_REQUEST"),
        }
    }
}

impl std::error::Error for Error {}

/// Splits a normal request path (no dot segments, no `//`) into the script and `PATH_INFO` at
/// the first segment that ends with `split` (`.php`): `/a.php/b/c` is `/a.php` and `/b/c`,
/// `/a.php` is `/a.php` and nothing. None when no segment ends so (`/a.php.jpg`, `/dir/`): the
/// caller tries the directory's index or answers 404. The caller must still find the script as a
/// regular file beneath its root before contacting the server: `/uploads/evil.jpg/x.php` names
/// the script `/uploads/evil.jpg/x.php`, which does not exist (a file is no directory), and is
/// refused there, never handed to an application that would look for a shorter script itself.
pub fn split_script<'a>(path: &'a [u8], split: &[u8]) -> Option<(&'a [u8], &'a [u8])> {
    if split.is_empty() {
        return None;
    }
    let mut from = 0;
    while let Some(at) = memchr::memmem::find(&path[from..], split) {
        let end = from + at + split.len();
        // The match must end a segment and not be the whole segment (`/.php` is a dotfile).
        let ends_segment = end == path.len() || path[end] == b'/';
        let has_stem = from + at > 0 && path[from + at - 1] != b'/';
        if ends_segment && has_stem {
            return Some(path.split_at(end));
        }
        from += at + 1;
    }
    None
}

/// The padding that brings `content_len` to a multiple of 8.
pub(crate) fn padding_len(content_len: usize) -> u8 {
    // At most 7: fits.
    ((8 - content_len % 8) % 8) as u8
}

/// A record header.
pub(crate) fn header(kind: u8, id: u16, content_len: u16, padding: u8) -> [u8; HEADER_LEN] {
    let [id_hi, id_lo] = id.to_be_bytes();
    let [len_hi, len_lo] = content_len.to_be_bytes();
    [VERSION, kind, id_hi, id_lo, len_hi, len_lo, padding, 0]
}
