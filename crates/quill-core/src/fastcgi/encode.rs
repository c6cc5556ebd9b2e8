//! The records a web server sends, appended to the caller's `Vec<u8>` (no allocation once it has
//! the capacity): `BEGIN_REQUEST`, the `PARAMS` stream, `STDIN`, `ABORT_REQUEST`, `GET_VALUES`.
//! A request goes out as [`begin_request`], a [`Params`] stream ended by [`Params::finish`], then
//! the body as `STDIN` records ([`stdin`] for bytes at hand, [`stdin_header`] and [`padding`]
//! around bytes written from elsewhere) and [`end_stdin`].

use std::fmt;

use super::{header, kind, padding_len, HEADER_LEN, MANAGEMENT_ID, MAX_CONTENT};

/// The role a request asks of the application. Quill asks for [`Role::Responder`] (the role of a
/// CGI script: the request in, a response out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Gets the request and its body, answers with a response.
    Responder = 1,
    /// Decides whether a request is authorised.
    Authorizer = 2,
    /// Responds with a file's data (the `DATA` stream) filtered.
    Filter = 3,
}

/// The `BEGIN_REQUEST` flag asking the application to keep the connection after the request.
const KEEP_CONN: u8 = 1;

/// Most content bytes of a `STDIN` record [`stdin`] writes: a multiple of 8 below
/// [`MAX_CONTENT`], so a full record needs no padding.
pub const STDIN_CHUNK: usize = MAX_CONTENT - 7;

static ZEROS: [u8; 8] = [0; 8];

/// Appends a `BEGIN_REQUEST` for `id` in `role`; with `keep_conn` the application keeps the
/// connection open after `END_REQUEST` (php-fpm honours it), else it closes it.
pub fn begin_request(out: &mut Vec<u8>, id: u16, role: Role, keep_conn: bool) {
    out.extend_from_slice(&header(kind::BEGIN_REQUEST, id, 8, 0));
    let [role_hi, role_lo] = (role as u16).to_be_bytes();
    let flags = if keep_conn { KEEP_CONN } else { 0 };
    out.extend_from_slice(&[role_hi, role_lo, flags, 0, 0, 0, 0, 0]);
}

/// Appends `ABORT_REQUEST` for `id`: the application ends the request (with `END_REQUEST`) as
/// soon as it can, for a client that went away.
pub fn abort_request(out: &mut Vec<u8>, id: u16) {
    out.extend_from_slice(&header(kind::ABORT_REQUEST, id, 0, 0));
}

/// Appends a `GET_VALUES` management record asking for `FCGI_MAX_CONNS`, `FCGI_MAX_REQS` and
/// `FCGI_MPXS_CONNS` (the answer is [`super::Event::GetValuesResult`]).
pub fn get_values(out: &mut Vec<u8>) {
    const NAMES: [&[u8]; 3] = [b"FCGI_MAX_CONNS", b"FCGI_MAX_REQS", b"FCGI_MPXS_CONNS"];
    let content: usize = NAMES.iter().map(|n| 2 + n.len()).sum();
    let pad = padding_len(content);
    // 48 bytes: fits in u16.
    out.extend_from_slice(&header(
        kind::GET_VALUES,
        MANAGEMENT_ID,
        content as u16,
        pad,
    ));
    for name in NAMES {
        push_pair_lengths(out, name.len(), 0);
        out.extend_from_slice(name);
    }
    out.extend_from_slice(padding(content));
}

/// The header of a `STDIN` record of `len` content bytes for `id`, padded to a multiple of 8:
/// send it, the `len` body bytes and [`padding`]`(len)` together (a `writev` of three buffers),
/// so a body streamed in pieces is never copied. A piece over [`MAX_CONTENT`] bytes needs several
/// records; an empty record ends the stream ([`end_stdin`]).
pub fn stdin_header(id: u16, len: u16) -> [u8; HEADER_LEN] {
    header(kind::STDIN, id, len, padding_len(usize::from(len)))
}

/// The zero bytes that follow `content_len` content bytes of a record written with
/// [`stdin_header`] (0 to 7 of them).
pub fn padding(content_len: usize) -> &'static [u8] {
    &ZEROS[..usize::from(padding_len(content_len))]
}

/// Appends `data` as `STDIN` records for `id` (as many as it takes, none for empty `data`): for
/// the body bytes that came with the request head. The stream still needs [`end_stdin`].
pub fn stdin(out: &mut Vec<u8>, id: u16, data: &[u8]) {
    for piece in data.chunks(STDIN_CHUNK) {
        // A chunk is at most STDIN_CHUNK bytes: fits in u16.
        out.extend_from_slice(&stdin_header(id, piece.len() as u16));
        out.extend_from_slice(piece);
        out.extend_from_slice(padding(piece.len()));
    }
}

/// Appends the empty `STDIN` record that ends the request body of `id` (sent even when there is
/// no body: the application waits for it).
pub fn end_stdin(out: &mut Vec<u8>, id: u16) {
    out.extend_from_slice(&header(kind::STDIN, id, 0, 0));
}

/// Why a parameter is not written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRefused {
    /// The request field `Proxy`: as `HTTP_PROXY` a CGI program would take it for its proxy
    /// setting (httpoxy); the field is dropped.
    Proxy,
    /// `Content-Type` or `Content-Length`: they travel as `CONTENT_TYPE` and `CONTENT_LENGTH`.
    OwnName,
    /// A field name that is empty or has a byte outside the token characters of RFC 9110.
    NotToken,
    /// A field name with `_`: `X_Real_IP` would read as `X-Real-IP` once `-` becomes `_`
    /// (docs/design.md#underscored-fields-are-dropped).
    Underscore,
    /// A name and value whose encoded pair does not fit in one `PARAMS` record ([`MAX_CONTENT`]
    /// bytes): php-fpm reads the pairs of each record on its own, so a pair is never split.
    TooLong,
}

impl fmt::Display for NameRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameRefused::Proxy => "the Proxy field is never passed (httpoxy)",
            NameRefused::OwnName => "Content-Type and Content-Length have their own parameters",
            NameRefused::NotToken => "a field name that is not a token",
            NameRefused::Underscore => "a field name with an underscore",
            NameRefused::TooLong => "a parameter longer than a fastcgi record",
        })
    }
}

impl std::error::Error for NameRefused {}

/// Appends the CGI parameter name of request field `field` to `out`: `HTTP_` and the name in
/// upper case with `-` as `_` (`Accept-Encoding` is `HTTP_ACCEPT_ENCODING`). Refuses, writing
/// nothing, `Proxy` (never `HTTP_PROXY`), `Content-Type` and `Content-Length`, a name with `_`,
/// and a name that is not a token. For CGI's environment as well as FastCGI's parameters.
pub fn http_param_name(field: &[u8], out: &mut Vec<u8>) -> Result<(), NameRefused> {
    check_field_name(field)?;
    push_http_name(out, field);
    Ok(())
}

fn check_field_name(field: &[u8]) -> Result<(), NameRefused> {
    if field.is_empty() || !field.iter().all(|&b| crate::http1::is_tchar(b)) {
        Err(NameRefused::NotToken)
    } else if field.contains(&b'_') {
        Err(NameRefused::Underscore)
    } else if field.eq_ignore_ascii_case(b"proxy") {
        Err(NameRefused::Proxy)
    } else if field.eq_ignore_ascii_case(b"content-type")
        || field.eq_ignore_ascii_case(b"content-length")
    {
        Err(NameRefused::OwnName)
    } else {
        Ok(())
    }
}

const HTTP_PREFIX: &[u8] = b"HTTP_";

fn push_http_name(out: &mut Vec<u8>, field: &[u8]) {
    out.extend_from_slice(HTTP_PREFIX);
    out.extend(field.iter().map(|&b| match b {
        b'-' => b'_',
        _ => b.to_ascii_uppercase(),
    }));
}

/// The `PARAMS` stream of one request, written into the caller's buffer: name-value pairs with
/// 1-byte lengths (below 128) or 4-byte ones, packed into records of at most [`MAX_CONTENT`]
/// bytes (a new record starts when the next pair would not fit; a pair is never split across
/// two), each padded to a multiple of 8. [`Params::finish`] closes the last record and appends
/// the empty one that ends the stream; a `Params` dropped without it leaves a record header
/// unwritten in the buffer, which must then not be sent.
#[must_use = "a PARAMS stream is complete only after finish()"]
pub struct Params<'a> {
    out: &'a mut Vec<u8>,
    id: u16,
    /// Where the open record's header goes (its 8 bytes are reserved, written at close).
    record: usize,
}

impl<'a> Params<'a> {
    /// Starts the stream for request `id` at the end of `out`.
    pub fn new(out: &'a mut Vec<u8>, id: u16) -> Params<'a> {
        let record = out.len();
        out.extend_from_slice(&[0; HEADER_LEN]);
        Params { out, id, record }
    }

    /// Adds one parameter (`SCRIPT_FILENAME`, `QUERY_STRING`, ...). Names and values are bytes as
    /// they are: CGI gives them no encoding.
    pub fn add(&mut self, name: &[u8], value: &[u8]) -> Result<(), NameRefused> {
        self.make_room(name.len(), value.len())?;
        push_pair_lengths(self.out, name.len(), value.len());
        self.out.extend_from_slice(name);
        self.out.extend_from_slice(value);
        Ok(())
    }

    /// Adds one parameter whose value is `parts` one after the other (`SCRIPT_FILENAME`: the
    /// root and the script name), without joining them first.
    pub fn add_joined(&mut self, name: &[u8], parts: &[&[u8]]) -> Result<(), NameRefused> {
        let value_len = parts.iter().map(|p| p.len()).sum();
        self.make_room(name.len(), value_len)?;
        push_pair_lengths(self.out, name.len(), value_len);
        self.out.extend_from_slice(name);
        for part in parts {
            self.out.extend_from_slice(part);
        }
        Ok(())
    }

    /// Adds request field `field` as `HTTP_*` (see [`http_param_name`] for the name and what is
    /// refused; a refused field is not written and the stream goes on).
    pub fn add_field(&mut self, field: &[u8], value: &[u8]) -> Result<(), NameRefused> {
        self.add_field_joined(field, std::iter::once(value), b"")
    }

    /// Adds request field `field` as `HTTP_*` with `values` joined by `sep` (a field sent
    /// several times is one parameter).
    pub fn add_field_joined<'v>(
        &mut self,
        field: &[u8],
        values: impl Iterator<Item = &'v [u8]> + Clone,
        sep: &[u8],
    ) -> Result<(), NameRefused> {
        check_field_name(field)?;
        let (count, len) = values
            .clone()
            .fold((0usize, 0usize), |(c, l), v| (c + 1, l + v.len()));
        let value_len = len + sep.len() * count.saturating_sub(1);
        let name_len = HTTP_PREFIX.len() + field.len();
        self.make_room(name_len, value_len)?;
        push_pair_lengths(self.out, name_len, value_len);
        push_http_name(self.out, field);
        for (i, value) in values.enumerate() {
            if i > 0 {
                self.out.extend_from_slice(sep);
            }
            self.out.extend_from_slice(value);
        }
        Ok(())
    }

    /// Closes the last record and appends the empty `PARAMS` record that ends the stream.
    pub fn finish(mut self) {
        if self.content_len() == 0 {
            self.out.truncate(self.record);
        } else {
            self.close_record();
        }
        self.out
            .extend_from_slice(&header(kind::PARAMS, self.id, 0, 0));
    }

    /// Refuses a pair that cannot fit in a record, and closes the open record when it cannot
    /// take the pair.
    fn make_room(&mut self, name_len: usize, value_len: usize) -> Result<(), NameRefused> {
        let pair = pair_len(name_len, value_len).ok_or(NameRefused::TooLong)?;
        if self.content_len() + pair > MAX_CONTENT {
            self.close_record();
            self.record = self.out.len();
            self.out.extend_from_slice(&[0; HEADER_LEN]);
        }
        Ok(())
    }

    fn content_len(&self) -> usize {
        self.out.len() - self.record - HEADER_LEN
    }

    fn close_record(&mut self) {
        let len = self.content_len();
        let pad = padding_len(len);
        // make_room keeps a record's content within MAX_CONTENT: fits in u16.
        let head = header(kind::PARAMS, self.id, len as u16, pad);
        self.out[self.record..self.record + HEADER_LEN].copy_from_slice(&head);
        self.out.extend_from_slice(&ZEROS[..usize::from(pad)]);
    }
}

/// The encoded size of a pair, if it fits in one record.
fn pair_len(name_len: usize, value_len: usize) -> Option<usize> {
    let len = |n: usize| if n < 128 { 1 } else { 4 };
    let total = len(name_len) + len(value_len) + name_len.checked_add(value_len)?;
    (total <= MAX_CONTENT).then_some(total)
}

fn push_pair_lengths(out: &mut Vec<u8>, name_len: usize, value_len: usize) {
    push_length(out, name_len);
    push_length(out, value_len);
}

/// One length of a pair: a byte below 128, else four bytes with the top bit set. Callers keep
/// lengths within a record, far below 2^31.
fn push_length(out: &mut Vec<u8>, n: usize) {
    if n < 128 {
        out.push(n as u8);
    } else {
        out.extend_from_slice(&(n as u32 | 0x8000_0000).to_be_bytes());
    }
}
