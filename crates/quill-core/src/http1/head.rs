//! Request and response heads: one left-to-right pass over the bytes received so far, with the
//! strict rules of docs/design.md#http-parsing-rules.
//!
//! A syntax error is reported at the byte that shows it, looking ahead only as far as the rule
//! needs (a CR's LF, the colon after a space), and "incomplete" is returned whenever the bytes
//! run out first. So parsing a head again as more bytes arrive gives what parsing it once whole
//! gives: incomplete until then, or the same error. Rules that need the whole head (framing
//! headers, `Host`) are checked at its end.

use super::body::Framing;
use super::grammar::{
    control_bits, is_control, is_fixed_hop, is_framing_lookalike, is_host_and_port, is_host_byte,
    is_space, is_target_byte, is_tchar, is_value_byte, not_name_bits, same_name,
};
use super::{Error, Limits, Span};
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use crate::sys::simd as wide;

/// The protocol version of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

/// A request method; `Other` is any other token (see [`RequestHead::method_span`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Connect,
    Options,
    Trace,
    Patch,
    Other,
}

impl Method {
    fn of(bytes: &[u8]) -> Method {
        match bytes {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"POST" => Method::Post,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"CONNECT" => Method::Connect,
            b"OPTIONS" => Method::Options,
            b"TRACE" => Method::Trace,
            b"PATCH" => Method::Patch,
            _ => Method::Other,
        }
    }
}

/// The form of a request target (RFC 9112 §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// `/path?query`.
    Origin,
    /// `http://host/path` (to a proxy).
    Absolute,
    /// `host:port`, for CONNECT only.
    Authority,
    /// `*`, for OPTIONS only.
    Asterisk,
}

/// The tokens of the `Connection` fields that change how a connection is used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Connection {
    pub close: bool,
    pub keep_alive: bool,
    pub upgrade: bool,
    /// A token names another field to drop as hop-by-hop (one that is not `close` or a field
    /// dropped anyway): the rewriter reads the tokens again only then.
    pub names_others: bool,
}

impl Connection {
    /// Whether the connection stays open after this message (RFC 9112 §9.3).
    pub fn persists(self, version: Version) -> bool {
        !self.close && (version == Version::Http11 || self.keep_alive)
    }
}

/// A parsed request head. Spans point into the buffer given to [`parse_request`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHead {
    /// Bytes of the head, up to and including the blank line: the body starts here.
    pub len: usize,
    pub method: Method,
    pub method_span: Span,
    pub target: Span,
    pub target_form: Target,
    pub version: Version,
    /// The `Host` value, trimmed (at most one is accepted).
    pub host: Option<Span>,
    /// The host (and port) the request is for, decided once: an absolute-form target's authority
    /// (refused when empty, with userinfo or not a host; and a `Host` that names another host or
    /// port is refused), else the `Host` value. Routing, the 421 check and the `Host` a server
    /// receives all use this one.
    pub authority: Option<Span>,
    pub framing: Framing,
    pub connection: Connection,
    /// Number of header fields.
    pub fields: usize,
}

impl RequestHead {
    /// Whether the client allows another request on this connection.
    pub fn keep_alive(&self) -> bool {
        self.connection.persists(self.version)
    }
}

/// A parsed response head. Spans point into the buffer given to [`parse_response`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseHead {
    /// Bytes of the head, up to and including the blank line: the body starts here.
    pub len: usize,
    pub version: Version,
    /// 100-599. A 1xx head is followed by another response to the same request.
    pub status: u16,
    pub reason: Span,
    /// RFC 9112 §6.3: `None` after HEAD and for 1xx, 204 and 304; else `Chunked`, `Length` or
    /// `Close`. (A 2xx answer to CONNECT turns the connection into a tunnel: the caller's case.)
    pub framing: Framing,
    pub connection: Connection,
    /// Number of header fields.
    pub fields: usize,
}

impl ResponseHead {
    /// Whether the server allows another request on this connection (its body being delimited).
    pub fn keep_alive(&self) -> bool {
        self.connection.persists(self.version) && self.framing != Framing::Close
    }
}

/// Parses the request head at the start of `buf`: `Ok(None)` while it is incomplete.
pub fn parse_request(buf: &[u8], limits: &Limits) -> Result<Option<RequestHead>, Error> {
    finish(request(buf, limits, None))
}

/// [`parse_request`], and the head's fields noted in `index` on the way (for the rewrite).
pub fn parse_request_indexed(
    buf: &[u8],
    limits: &Limits,
    index: &mut FieldIndex,
) -> Result<Option<RequestHead>, Error> {
    finish(request(buf, limits, Some(index)))
}

/// [`parse_response`], and the head's fields noted in `index` on the way (for the rewrite).
pub fn parse_response_indexed(
    buf: &[u8],
    limits: &Limits,
    to_head: bool,
    index: &mut FieldIndex,
) -> Result<Option<ResponseHead>, Error> {
    finish(response(buf, limits, to_head, Some(index)))
}

/// [`parse_response_indexed`] for a head Quill's own writer produced from one that parse
/// accepted (the HTTP/2 side turning a stream's HTTP/1.1 response into frames): the lines, the
/// status, the framing fields and the head's end are read as strictly, but field names and values
/// are not checked byte by byte again. Gives the same head and index as
/// [`parse_response_indexed`] for every head that accepts (the property test
/// `own_heads_parse_as_strict_heads_do` checks it).
pub fn parse_own_response_indexed(
    buf: &[u8],
    limits: &Limits,
    to_head: bool,
    index: &mut FieldIndex,
) -> Result<Option<ResponseHead>, Error> {
    finish(response_with(
        buf,
        limits,
        to_head,
        Some(index),
        own_field_line,
    ))
}

/// Parses the response head at the start of `buf`: `Ok(None)` while it is incomplete.
/// `to_head`: the request was HEAD, so the response has no body whatever its fields say.
pub fn parse_response(
    buf: &[u8],
    limits: &Limits,
    to_head: bool,
) -> Result<Option<ResponseHead>, Error> {
    finish(response(buf, limits, to_head, None))
}

/// The status code of a response starting with `buf`, as soon as the bytes show it (the code and
/// the byte after it, or the end of the stream): for callers that need nothing else (health
/// checks). Rejects as soon as the bytes cannot begin a status line. `eof`: no more bytes come.
/// Lenient where a full parse is not: what follows the code is not read.
pub fn status_code(buf: &[u8], eof: bool) -> Result<Option<u16>, Error> {
    let mut c = Cursor::new(buf, usize::MAX);
    let code = match status_prefix(&mut c) {
        Ok((_, code)) => code,
        Err(Stop::Partial) if eof => return Err(Error::InvalidStatusLine),
        Err(e) => return finish(Err(e)),
    };
    match c.peek() {
        Ok(b' ' | b'\r' | b'\n') => Ok(Some(code)),
        Ok(_) => Err(Error::InvalidStatusLine),
        Err(_) if eof => Ok(Some(code)),
        Err(_) => Ok(None),
    }
}

/// One header field line of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// The whole line, CRLF included (what to skip to remove the field).
    pub line: Span,
    pub name: Span,
    /// The value without surrounding spaces and tabs.
    pub value: Span,
}

/// Whether `bytes` hold a blank line (`LF LF` or `LF CR LF`): where a head may end, for a
/// caller that parses a head only once it is whole. Looks only at the line feeds (memchr), so a
/// body read with the head costs nothing to pass over; a read that ends with its head (the
/// common request, one to a packet) is answered from its last three bytes without a search.
pub fn has_blank_line(bytes: &[u8]) -> bool {
    if bytes.ends_with(b"\n\r\n") || bytes.ends_with(b"\n\n") {
        return true;
    }
    memchr::memchr_iter(b'\n', bytes).any(|i| match bytes.get(i + 1) {
        Some(b'\n') => true,
        Some(b'\r') => bytes.get(i + 2) == Some(&b'\n'),
        _ => false,
    })
}

/// The header fields of a head that [`parse_request`] or [`parse_response`] accepted, in order.
pub fn fields(buf: &[u8], head_len: usize) -> Fields<'_> {
    let head = buf.get(..head_len).unwrap_or(buf);
    let first = head
        .iter()
        .position(|&b| b == b'\n')
        .map_or(head.len(), |i| i + 1);
    Fields { head, pos: first }
}

/// The value of the first field named `name` (case-insensitive) of a head that [`parse_request`]
/// or [`parse_response`] accepted, without surrounding spaces and tabs.
pub fn field_value<'a>(buf: &'a [u8], head_len: usize, name: &[u8]) -> Option<&'a [u8]> {
    fields(buf, head_len)
        .find(|f| f.name.of(buf).eq_ignore_ascii_case(name))
        .map(|f| f.value.of(buf))
}

/// Iterator over the fields of a head (see [`fields`]).
#[derive(Clone, Debug)]
pub struct Fields<'a> {
    head: &'a [u8],
    pos: usize,
}

impl Iterator for Fields<'_> {
    type Item = Field;

    fn next(&mut self) -> Option<Field> {
        let rest = self.head.get(self.pos..)?;
        let end = memchr::memchr(b'\n', rest)?;
        let start = self.pos;
        let line = &rest[..end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = memchr::memchr(b':', line)?;
        self.pos = start + end + 1;
        let value = &line[colon + 1..];
        let lead = value.len() - value.trim_ascii_start().len();
        let trimmed = value.trim_ascii().len();
        let value_start = start + colon + 1 + lead;
        Some(Field {
            line: Span {
                start,
                end: self.pos,
            },
            name: Span {
                start,
                end: start + colon,
            },
            value: Span {
                start: value_start,
                end: value_start + trimmed,
            },
        })
    }
}

/// A field name as the proxy's rules read it, found once by the parser so that the passes after
/// it (the rewrite) compare no names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Name {
    #[default]
    Other,
    ContentLength,
    TransferEncoding,
    Host,
    Connection,
    /// `Keep-Alive`, `Proxy-Connection` and `TE`: hop-by-hop, as `Connection` and
    /// `Transfer-Encoding` are.
    Hop,
    Upgrade,
    /// Not `Content-Length` or `Transfer-Encoding`, but one of them to a server that folds `_`
    /// into `-` or ignores dashes.
    FramingLookalike,
    /// The three `X-Forwarded-` fields, also when spelled with `_` for `-` (as CGI, WSGI and PHP
    /// servers read them).
    XForwardedFor,
    XForwardedProto,
    XForwardedHost,
    Forwarded,
    XRequestId,
}

/// What a field's name is ([`Name`]), and whether it is known to be letters, digits and dashes
/// only (so holds no `_`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Kind {
    pub(super) name: Name,
    plain: bool,
}

impl Kind {
    /// The kind of field name `name`; `plain`: the name is known to hold only letters, digits
    /// and dashes (false when not known).
    #[inline(always)]
    pub(super) fn of(name: &[u8], plain: bool) -> Kind {
        let first = name.first().map_or(0, u8::to_ascii_lowercase);
        let is = |known: &[u8]| eq_lowercase(name, known);
        // The first letter and the length pick the one name to compare with.
        let name = match (first, name.len()) {
            (b'c', 14) if is(b"content-length") => Name::ContentLength,
            (b't', 17) if is(b"transfer-encoding") => Name::TransferEncoding,
            (b'h', 4) if is(b"host") => Name::Host,
            (b'c', 10) if is(b"connection") => Name::Connection,
            (b'k', 10) if is(b"keep-alive") => Name::Hop,
            (b'p', 16) if is(b"proxy-connection") => Name::Hop,
            (b't', 2) if is(b"te") => Name::Hop,
            (b'u', 7) if is(b"upgrade") => Name::Upgrade,
            (b'f', 9) if is(b"forwarded") => Name::Forwarded,
            (b'x', 12) if is(b"x-request-id") => Name::XRequestId,
            (b'x', 15) if same_name(name, b"x-forwarded-for") => Name::XForwardedFor,
            (b'x', 17) if same_name(name, b"x-forwarded-proto") => Name::XForwardedProto,
            (b'x', 16) if same_name(name, b"x-forwarded-host") => Name::XForwardedHost,
            (b'c' | b't' | b'-' | b'_', 13..) if is_framing_lookalike(name) => {
                Name::FramingLookalike
            }
            _ => Name::Other,
        };
        Kind { name, plain }
    }

    /// Whether field name `name`, of this kind, holds an `_`.
    pub(super) fn underscored(self, name: &[u8]) -> bool {
        !self.plain && memchr::memchr(b'_', name).is_some()
    }
}

/// Whether `name` is `known` (lowercase letters and dashes) in any case, eight bytes at a time:
/// a word of `name` with the 0x20 bit set where `known` has a letter must be `known`'s word, which
/// holds for a letter in either case and only for it, and for a dash only for a dash.
#[inline]
fn eq_lowercase(name: &[u8], known: &[u8]) -> bool {
    const LETTER_BIT: u64 = 0x4040_4040_4040_4040;
    let same = |at: usize| match (word_at(name, at), word_at(known, at)) {
        (Some(a), Some(k)) => a | ((k & LETTER_BIT) >> 1) == k,
        _ => false,
    };
    match known.len() {
        len if len != name.len() => false,
        // The words at 0, 8, ... and the last one, which may overlap the one before.
        len @ 8.. => (0..len - 7).step_by(8).all(same) && same(len - 8),
        _ => name.eq_ignore_ascii_case(known),
    }
}

/// How many fields a [`FieldIndex`] holds; a head with more is read line by line each time.
const INDEXED: usize = 32;

/// The fields of an accepted head, found once, for code that reads them several times (the head
/// rewrite): each later pass is a walk over a small array instead of a scan of the bytes. Offsets
/// are `u16`: heads are at most 16 KiB (a longer one is not indexed).
#[derive(Clone, Debug)]
pub struct FieldIndex {
    /// Line start, name end, value start, value end, line end.
    at: [[u16; 5]; INDEXED],
    kinds: [Kind; INDEXED],
    len: usize,
    /// A bit for each [`Name`] in `kinds` (`1 << name as u32`): which the head has, without a
    /// walk over the fields.
    names: u32,
    /// A bit for each field name's length (63: that long or longer), to tell at once that no
    /// name has a length an edit removes.
    name_lengths: u64,
    /// Every name is letters, digits and dashes only (no `_`).
    plain: bool,
    /// Every field is in `at`.
    complete: bool,
    head_len: usize,
}

impl FieldIndex {
    /// The fields of the head of `head_len` bytes at the start of `buf` (as [`fields`] reads them),
    /// for a head the parser did not index.
    pub fn new(buf: &[u8], head_len: usize) -> FieldIndex {
        let mut index = FieldIndex::empty();
        index.begin();
        for f in fields(buf, head_len) {
            let kind = Kind::of(f.name.of(buf), false);
            index.push(f.line.start, f.name.end, f.value, f.line.end, kind);
        }
        index.head_len = head_len;
        index
    }

    /// An index of no head yet (to be filled by [`parse_request_indexed`] or
    /// [`parse_response_indexed`]).
    pub fn empty() -> FieldIndex {
        FieldIndex {
            at: [[0; 5]; INDEXED],
            kinds: [Kind::default(); INDEXED],
            len: 0,
            names: 0,
            name_lengths: 0,
            plain: true,
            complete: false,
            head_len: usize::MAX,
        }
    }

    /// Whether the index was made for a head of `head_len` bytes and `fields` fields: a cheap
    /// guard against an index of another head (callers pass the index the parse just filled).
    pub fn is_for(&self, head_len: usize, fields: usize) -> bool {
        self.head_len == head_len && (!self.complete || self.len == fields)
    }

    /// The value of the first field named `name` (case-insensitive) of the head in `buf`, as
    /// [`field_value`] finds it.
    pub fn value<'a>(&self, buf: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
        self.iter(buf)
            .find(|f| f.name.of(buf).eq_ignore_ascii_case(name))
            .map(|f| f.value.of(buf))
    }

    /// The length of the head the index was made for.
    pub fn head_len(&self) -> usize {
        self.head_len
    }

    /// A parse begins: no fields, no head.
    pub(super) fn begin(&mut self) {
        self.len = 0;
        self.names = 0;
        self.name_lengths = 0;
        self.plain = true;
        self.complete = true;
        self.head_len = usize::MAX;
    }

    /// The parser accepted a field line.
    pub(super) fn push(
        &mut self,
        line_start: usize,
        name_end: usize,
        value: Span,
        line_end: usize,
        kind: Kind,
    ) {
        let fits = line_end <= usize::from(u16::MAX);
        match (self.at.get_mut(self.len), self.kinds.get_mut(self.len)) {
            (Some(slot), Some(kind_slot)) if self.complete && fits => {
                *kind_slot = kind;
                self.names |= 1 << kind.name as u32;
                self.name_lengths |= 1 << (name_end - line_start).min(63);
                self.plain &= kind.plain;
                *slot = [
                    line_start as u16,
                    name_end as u16,
                    value.start as u16,
                    value.end as u16,
                    line_end as u16,
                ];
                self.len += 1;
            }
            _ => self.complete = false,
        }
    }

    /// The fields, in order, of the same `buf` the index was made from, with their kinds.
    pub(super) fn iter_kinds<'a>(
        &'a self,
        buf: &'a [u8],
    ) -> impl Iterator<Item = (Field, Kind)> + 'a {
        let kinds = self.kinds.get(..self.len).unwrap_or_default();
        let mut kinds = kinds.iter().filter(|_| self.complete);
        self.iter(buf).map(move |f| {
            let kind = kinds
                .next()
                .copied()
                .unwrap_or_else(|| Kind::of(f.name.of(buf), false));
            (f, kind)
        })
    }

    /// Whether the index holds every field, none named other than `allowed` (a bit per
    /// [`Name`]), every name letters, digits and dashes only, and none of a length in
    /// `lengths` (a bit per length, as [`FieldIndex::name_lengths`] has them).
    pub(super) fn only(&self, allowed: &[Name], lengths: u64) -> bool {
        let allowed = allowed.iter().fold(0u32, |bits, &n| bits | 1 << n as u32);
        self.complete
            && self.names & !allowed == 0
            && self.plain
            && self.name_lengths & lengths == 0
    }

    /// Each field's line (CRLF included) and name, straight from the index (for a complete
    /// one: see [`FieldIndex::only`]; an incomplete one gives the fields it holds).
    pub(super) fn lines(&self) -> impl Iterator<Item = (Span, Name)> + '_ {
        let at = self.at.get(..self.len).unwrap_or_default();
        let kinds = self.kinds.get(..self.len).unwrap_or_default();
        at.iter().zip(kinds).map(|(at, kind)| {
            let line = Span {
                start: usize::from(at[0]),
                end: usize::from(at[4]),
            };
            (line, kind.name)
        })
    }

    /// Whether the head surely has no field named `want` (a complete index without one).
    pub(super) fn lacks(&self, want: Name) -> bool {
        self.complete && self.names & (1 << want as u32) == 0
    }

    /// The fields named `want`, in order, with their kinds (one byte compared per field).
    pub(super) fn named<'a>(
        &'a self,
        buf: &'a [u8],
        want: Name,
    ) -> impl Iterator<Item = (Field, Kind)> + 'a {
        let indexed = (self.complete && !self.lacks(want)).then(|| {
            let kinds = self.kinds.get(..self.len).unwrap_or_default();
            let at = self.at.get(..self.len).unwrap_or_default();
            kinds
                .iter()
                .zip(at)
                .filter(move |(kind, _)| kind.name == want)
                .map(|(&kind, &at)| (field_at(at), kind))
        });
        let scanned = (!self.complete).then(|| {
            self.iter_kinds(buf)
                .filter(move |(_, kind)| kind.name == want)
        });
        indexed
            .into_iter()
            .flatten()
            .chain(scanned.into_iter().flatten())
    }

    /// The fields, in order, that an HTTP/2 message may carry: all but `Connection`,
    /// `Keep-Alive`, `Proxy-Connection`, `TE`, `Transfer-Encoding` and `Upgrade` (RFC 9113
    /// §8.2.2), told apart by the kinds noted with them instead of by comparing names.
    pub fn end_to_end<'a>(&'a self, buf: &'a [u8]) -> EndToEnd<'a> {
        EndToEnd {
            index: self,
            buf,
            next: 0,
            scan: (!self.complete).then(|| fields(buf, self.head_len)),
        }
    }

    /// The fields, in order, of the same `buf` the index was made from.
    pub fn iter<'a>(&'a self, buf: &'a [u8]) -> IndexedFields<'a> {
        if self.complete {
            IndexedFields::Indexed(self.at[..self.len].iter())
        } else {
            IndexedFields::Scan(fields(buf, self.head_len))
        }
    }
}

/// The fields of a [`FieldIndex`] (see [`FieldIndex::iter`]).
#[derive(Clone, Debug)]
pub enum IndexedFields<'a> {
    Indexed(std::slice::Iter<'a, [u16; 5]>),
    Scan(Fields<'a>),
}

impl Iterator for IndexedFields<'_> {
    type Item = Field;

    fn next(&mut self) -> Option<Field> {
        match self {
            IndexedFields::Indexed(it) => it.next().map(|&at| field_at(at)),
            IndexedFields::Scan(it) => it.next(),
        }
    }
}

/// The fields of a [`FieldIndex`] that an HTTP/2 message may carry (see
/// [`FieldIndex::end_to_end`]): a walk over the index's two arrays, or a scan of the head when it
/// has more fields than the index holds.
#[derive(Clone, Debug)]
pub struct EndToEnd<'a> {
    index: &'a FieldIndex,
    buf: &'a [u8],
    next: usize,
    scan: Option<Fields<'a>>,
}

impl Iterator for EndToEnd<'_> {
    type Item = Field;

    fn next(&mut self) -> Option<Field> {
        let hop = |kind: Kind| {
            matches!(
                kind.name,
                Name::Connection | Name::TransferEncoding | Name::Hop | Name::Upgrade
            )
        };
        if let Some(scan) = &mut self.scan {
            return scan.find(|f| !hop(Kind::of(f.name.of(self.buf), false)));
        }
        while self.next < self.index.len {
            let i = self.next;
            self.next += 1;
            if !hop(*self.index.kinds.get(i)?) {
                return self.index.at.get(i).map(|&at| field_at(at));
            }
        }
        None
    }
}

/// The field of an index entry: line start, name end, value start, value end, line end.
fn field_at(at: [u16; 5]) -> Field {
    let [start, name_end, value_start, value_end, end] = at.map(usize::from);
    Field {
        line: Span { start, end },
        name: Span {
            start,
            end: name_end,
        },
        value: Span {
            start: value_start,
            end: value_end,
        },
    }
}

/// Why a pass stopped before the end of a head.
enum Stop {
    /// The bytes ran out (and the size limit was not reached).
    Partial,
    Bad(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Bad(e)
    }
}

fn finish<T>(r: Result<T, Stop>) -> Result<Option<T>, Error> {
    match r {
        Ok(t) => Ok(Some(t)),
        Err(Stop::Partial) => Ok(None),
        Err(Stop::Bad(e)) => Err(e),
    }
}

/// A read position in the head, which may not pass `limit` bytes (else the error `over`).
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    limit: usize,
    over: Error,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8], limit: usize) -> Cursor<'a> {
        Cursor {
            buf,
            pos: 0,
            limit,
            over: Error::HeadTooLarge,
        }
    }

    /// The byte at the read position.
    fn peek(&self) -> Result<u8, Stop> {
        if self.pos >= self.limit {
            return Err(Stop::Bad(self.over));
        }
        self.buf.get(self.pos).copied().ok_or(Stop::Partial)
    }

    /// The byte at the read position, which is then passed.
    fn next(&mut self) -> Result<u8, Stop> {
        let b = self.peek()?;
        self.pos += 1;
        Ok(b)
    }

    /// Passes the bytes for which `keep` holds, stopping at the first other byte, the end of the
    /// bytes or the size limit (which the next `peek` reports).
    fn skip_while(&mut self, keep: impl Fn(u8) -> bool) {
        let end = self.buf.len().min(self.limit);
        let rest = self.buf.get(self.pos..end).unwrap_or_default();
        self.pos += rest.iter().position(|&b| !keep(b)).unwrap_or(rest.len());
    }

    /// [`Cursor::skip_while`] for value bytes, many at a time ([`value_len`]).
    fn skip_value(&mut self) {
        let end = self.buf.len().min(self.limit);
        let rest = self.buf.get(self.pos..end).unwrap_or_default();
        self.pos += value_len(rest);
    }

    /// [`Cursor::skip_while`] for token bytes, many at a time while they are letters, digits
    /// and dashes ([`name_len`]). Returns whether every byte passed was one of those.
    fn skip_name(&mut self) -> bool {
        let end = self.buf.len().min(self.limit);
        let rest = self.buf.get(self.pos..end).unwrap_or_default();
        let (len, plain) = name_len(rest);
        self.pos += len;
        plain
    }

    /// Expects `b` next; `else_err` otherwise (with CR, LF and controls told apart).
    fn expect(&mut self, want: u8, else_err: Error) -> Result<(), Stop> {
        match self.next()? {
            b if b == want => Ok(()),
            b => Err(classify(b, else_err).into()),
        }
    }

    /// After a CR just passed: the LF that must follow.
    fn lf(&mut self) -> Result<(), Stop> {
        match self.next()? {
            b'\n' => Ok(()),
            _ => Err(Error::BareCr.into()),
        }
    }
}

/// The error for an unexpected byte `b` where `otherwise` is the rule broken: line ends and
/// control characters are errors of their own.
fn classify(b: u8, otherwise: Error) -> Error {
    match b {
        b'\n' => Error::BareLf,
        b'\r' => otherwise,
        b if is_control(b) => Error::ControlChar,
        _ => otherwise,
    }
}

/// How many value bytes `bytes` starts with: sixteen (SSE2) or eight at a time, the first byte
/// that is a control or HTAB found from the mask's lowest bit (most of a head is field values).
fn value_len(bytes: &[u8]) -> usize {
    let mut at = 0;
    loop {
        match first_marked(bytes, at, WIDE_CONTROL, control_bits) {
            Ok(i) if bytes.get(i) == Some(&b'\t') => at = i + 1,
            Ok(i) => return i,
            Err(i) => {
                let tail = bytes.get(i..).unwrap_or_default();
                return i + tail
                    .iter()
                    .position(|&b| !is_value_byte(b))
                    .unwrap_or(tail.len());
            }
        }
    }
}

/// How many token bytes `bytes` starts with, sixteen (SSE2) or eight at a time while they are
/// letters, digits and dashes (field names), then one at a time; and whether all were letters,
/// digits and dashes.
fn name_len(bytes: &[u8]) -> (usize, bool) {
    let (Ok(at) | Err(at)) = first_marked(bytes, 0, WIDE_NOT_NAME, not_name_bits);
    // Nearly always the colon, which is no token byte: no table to look it up in.
    if bytes.get(at) == Some(&b':') {
        return (at, true);
    }
    let rest = bytes.get(at..).unwrap_or_default();
    let more = rest
        .iter()
        .position(|&b| !is_tchar(b))
        .unwrap_or(rest.len());
    (at + more, more == 0)
}

/// The first byte from `at` on that a byte class's masks mark, sixteen bytes at a time (`wide`:
/// a bit a byte, `None` when fewer are left) then eight (`narrow`: a word's high bits): `Ok` with
/// its position, or `Err` with where fewer than eight bytes were left to look at.
#[inline(always)]
fn first_marked(
    bytes: &[u8],
    mut at: usize,
    wide: fn(&[u8], usize) -> Option<u32>,
    narrow: fn(u64) -> u64,
) -> Result<usize, usize> {
    while let Some(bits) = wide(bytes, at) {
        if bits != 0 {
            return Ok(at + bits.trailing_zeros() as usize);
        }
        at += 16;
    }
    while let Some(word) = word_at(bytes, at) {
        let bits = narrow(word);
        if bits != 0 {
            return Ok(at + (bits.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    Err(at)
}

/// The sixteen-byte masks where SSE2 is there, none elsewhere (the words and bytes then do all).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
const WIDE_CONTROL: fn(&[u8], usize) -> Option<u32> = wide::control_bits;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
const WIDE_NOT_NAME: fn(&[u8], usize) -> Option<u32> = wide::not_name_bits;
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
const WIDE_CONTROL: fn(&[u8], usize) -> Option<u32> = |_, _| None;
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
const WIDE_NOT_NAME: fn(&[u8], usize) -> Option<u32> = |_, _| None;

/// The eight bytes at `at` of `bytes` as a little-endian word, if there are eight.
fn word_at(bytes: &[u8], at: usize) -> Option<u64> {
    let eight: [u8; 8] = bytes.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_le_bytes(eight))
}

fn request(
    buf: &[u8],
    limits: &Limits,
    index: Option<&mut FieldIndex>,
) -> Result<RequestHead, Stop> {
    // The request line has the lower of the two limits, and the error of the one that is lower.
    let mut c = Cursor::new(buf, limits.max_head.min(limits.max_request_line));
    if limits.max_request_line < limits.max_head {
        c.over = Error::RequestLineTooLong;
    }
    // method SP
    let start = c.pos;
    c.skip_while(is_tchar);
    match c.next()? {
        b' ' if c.pos - 1 > start => {}
        b => return Err(classify(b, Error::InvalidMethod).into()),
    }
    let method_span = Span {
        start,
        end: c.pos - 1,
    };
    let method = Method::of(method_span.of(buf));
    // request-target SP
    let start = c.pos;
    c.skip_while(is_target_byte);
    match c.next()? {
        b' ' if c.pos - 1 > start => {}
        b'\r' => return Err(Error::InvalidRequestLine.into()),
        b => return Err(classify(b, Error::InvalidTarget).into()),
    }
    let target = Span {
        start,
        end: c.pos - 1,
    };
    let target_form = target_form(method, target.of(buf))?;
    // HTTP-version CRLF: nearly always whole within the bytes and the limit, read at once;
    // anything else byte by byte, which reports what is wrong where.
    let version = match (c.pos + 10 <= c.limit, c.buf.get(c.pos..c.pos + 10)) {
        (true, Some(b"HTTP/1.1\r\n")) => Some(Version::Http11),
        (true, Some(b"HTTP/1.0\r\n")) => Some(Version::Http10),
        _ => None,
    };
    let version = match version {
        Some(v) => {
            c.pos += 10;
            v
        }
        None => {
            for &want in b"HTTP/1." {
                c.expect(want, Error::InvalidVersion)?;
            }
            let version = match c.next()? {
                b'0' => Version::Http10,
                b'1' => Version::Http11,
                b => return Err(classify(b, Error::InvalidVersion).into()),
            };
            c.expect(b'\r', Error::InvalidVersion)?;
            c.lf()?;
            version
        }
    };
    c.limit = limits.max_head;
    c.over = Error::HeadTooLarge;
    let seen = field_lines(&mut c, limits, index)?;
    let te = seen.transfer_encoding(version)?;
    let framing = match (te, seen.length) {
        (true, _) => Framing::Chunked,
        (false, Some(n)) => Framing::Length(n),
        (false, None) => Framing::None,
    };
    let host = match seen.hosts {
        0 if version == Version::Http11 && limits.require_host => {
            return Err(Error::MissingHost.into())
        }
        0 => None,
        1 => Some(seen.host),
        _ => return Err(Error::SeveralHosts.into()),
    };
    if !host.is_none_or(|h| h.is_empty() || is_host_and_port(h.of(buf))) {
        return Err(Error::InvalidHost.into());
    }
    let authority = match target_form {
        Target::Absolute => {
            let (https, authority) = absolute_authority(buf, target);
            if !is_host_and_port(authority.of(buf)) {
                return Err(Error::InvalidTarget.into());
            }
            if host.is_some_and(|h| !same_authority(authority.of(buf), h.of(buf), https)) {
                return Err(Error::InvalidHost.into());
            }
            Some(authority)
        }
        _ => host,
    };
    Ok(RequestHead {
        len: c.pos,
        method,
        method_span,
        target,
        target_form,
        version,
        host,
        authority,
        framing,
        connection: seen.connection,
        fields: seen.fields,
    })
}

/// Whether an absolute-form target is `https`, and its authority: from after `://` to the first
/// `/` or `?` (`#` is not a target byte).
fn absolute_authority(buf: &[u8], target: Span) -> (bool, Span) {
    let t = target.of(buf);
    let after = t
        .windows(3)
        .position(|w| w == b"://")
        .map_or(t.len(), |i| i + 3);
    let https = after == 8;
    let len = t[after..]
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(t.len() - after);
    let start = target.start + after;
    (
        https,
        Span {
            start,
            end: start + len,
        },
    )
}

/// Whether two authorities name the same host (without case) and port (none, or an empty one,
/// is the scheme's default).
fn same_authority(a: &[u8], b: &[u8], https: bool) -> bool {
    let split = |x: &[u8]| -> (usize, u32) {
        let from = x.iter().position(|&b| b == b']').unwrap_or(0);
        let colon = x[from..].iter().position(|&b| b == b':').map(|i| from + i);
        let default = if https { 443 } else { 80 };
        let port = colon.map_or(default, |c| {
            let digits = &x[c + 1..];
            if digits.is_empty() {
                default
            } else {
                digits
                    .iter()
                    .fold(0, |n, &d| n * 10 + u32::from(d.wrapping_sub(b'0')))
            }
        });
        (colon.unwrap_or(x.len()), port)
    };
    let ((ae, ap), (be, bp)) = (split(a), split(b));
    a[..ae].eq_ignore_ascii_case(&b[..be]) && ap == bp
}

/// The form of `target` (RFC 9112 §3.2), and whether `method` allows it.
fn target_form(method: Method, target: &[u8]) -> Result<Target, Error> {
    let form = if target == b"*" {
        Target::Asterisk
    } else if target.starts_with(b"/") {
        Target::Origin
    } else if has_http_scheme(target) {
        Target::Absolute
    } else if method == Method::Connect && is_authority(target) {
        Target::Authority
    } else {
        return Err(Error::InvalidTarget);
    };
    let allowed = match form {
        Target::Asterisk => method == Method::Options,
        Target::Authority => true,
        Target::Origin | Target::Absolute => method != Method::Connect,
    };
    if allowed {
        Ok(form)
    } else {
        Err(Error::InvalidTarget)
    }
}

/// `http://` or `https://` followed by a host.
fn has_http_scheme(target: &[u8]) -> bool {
    let rest = [&b"http://"[..], b"https://"].iter().find_map(|scheme| {
        let head = target.get(..scheme.len())?;
        head.eq_ignore_ascii_case(scheme)
            .then(|| &target[scheme.len()..])
    });
    rest.is_some_and(|r| {
        r.first()
            .is_some_and(|&b| b != b'/' && b != b'?' && b != b'@')
    })
}

/// `host:port` with a non-empty host and a decimal port, and nothing else.
fn is_authority(target: &[u8]) -> bool {
    let Some(colon) = target.iter().rposition(|&b| b == b':') else {
        return false;
    };
    let (host, port) = (&target[..colon], &target[colon + 1..]);
    !host.is_empty()
        && host.iter().all(|&b| is_host_byte(b))
        && !port.is_empty()
        && port.len() <= 5
        && port.iter().all(u8::is_ascii_digit)
}

fn response(
    buf: &[u8],
    limits: &Limits,
    to_head: bool,
    index: Option<&mut FieldIndex>,
) -> Result<ResponseHead, Stop> {
    response_with(buf, limits, to_head, index, field_line)
}

/// A field line reader: the name, the value without surrounding whitespace, and whether the name
/// is known to be letters, digits and dashes only.
type LineReader = fn(&mut Cursor<'_>) -> Result<(Span, Span, bool), Stop>;

#[inline(always)]
fn response_with(
    buf: &[u8],
    limits: &Limits,
    to_head: bool,
    index: Option<&mut FieldIndex>,
    line: LineReader,
) -> Result<ResponseHead, Stop> {
    let mut c = Cursor::new(buf, limits.max_head);
    let (minor, status) = status_prefix(&mut c)?;
    let version = match minor {
        b'0' => Version::Http10,
        b'1' => Version::Http11,
        _ => return Err(Error::InvalidVersion.into()),
    };
    // [SP reason-phrase] CRLF (a missing SP before an empty reason is common, and harmless).
    let mut reason = Span {
        start: c.pos,
        end: c.pos,
    };
    match c.next()? {
        b' ' => {
            let start = c.pos;
            c.skip_value();
            match c.next()? {
                b'\r' => {}
                b => return Err(classify(b, Error::InvalidStatusLine).into()),
            }
            reason = Span {
                start,
                end: c.pos - 1,
            };
        }
        b'\r' => {}
        b => return Err(classify(b, Error::InvalidStatusLine).into()),
    }
    c.lf()?;
    let seen = field_lines_with(&mut c, limits, index, line)?;
    let te = seen.transfer_encoding(version)?;
    let framing = if to_head || status < 200 || status == 204 || status == 304 {
        Framing::None
    } else {
        match (te, seen.length) {
            (true, _) => Framing::Chunked,
            (false, Some(n)) => Framing::Length(n),
            (false, None) => Framing::Close,
        }
    };
    Ok(ResponseHead {
        len: c.pos,
        version,
        status,
        reason,
        framing,
        connection: seen.connection,
        fields: seen.fields,
    })
}

/// `HTTP/1.` DIGIT SP 3DIGIT, with the status in 100-599: the minor version byte and the status.
fn status_prefix(c: &mut Cursor<'_>) -> Result<(u8, u16), Stop> {
    // Nearly every status line: `HTTP/1.1 200` whole within the bytes and the limit, read at
    // once; anything else byte by byte below, which reports what is wrong where.
    let fits = c.pos + 12 <= c.limit;
    if let (true, Some(&[b'H', b'T', b'T', b'P', b'/', b'1', b'.', minor, b' ', h, t, u])) =
        (fits, c.buf.get(c.pos..c.pos + 12))
    {
        if minor.is_ascii_digit()
            && (b'1'..=b'5').contains(&h)
            && t.is_ascii_digit()
            && u.is_ascii_digit()
        {
            c.pos += 12;
            let status = u16::from(h - b'0') * 100 + u16::from(t - b'0') * 10 + u16::from(u - b'0');
            return Ok((minor, status));
        }
    }
    for &want in b"HTTP/1." {
        c.expect(want, Error::InvalidStatusLine)?;
    }
    let minor = match c.next()? {
        b if b.is_ascii_digit() => b,
        b => return Err(classify(b, Error::InvalidStatusLine).into()),
    };
    c.expect(b' ', Error::InvalidStatusLine)?;
    let mut status = 0u16;
    for _ in 0..3 {
        match c.next()? {
            b if b.is_ascii_digit() => status = status * 10 + u16::from(b - b'0'),
            b => return Err(classify(b, Error::InvalidStatusLine).into()),
        }
    }
    if !(100..=599).contains(&status) {
        return Err(Error::InvalidStatusLine.into());
    }
    Ok((minor, status))
}

/// What the field lines said about framing, `Host` and the connection.
#[derive(Default)]
struct Seen {
    fields: usize,
    length: Option<u64>,
    length_error: Option<Error>,
    te: Codings,
    hosts: u32,
    host: Span,
    connection: Connection,
}

/// The transfer codings named so far, in order.
#[derive(Default)]
struct Codings {
    present: bool,
    /// `chunked` appeared this many times, and was the last coding.
    chunked: u32,
    last_chunked: bool,
    unknown: bool,
    /// A coding other than `chunked` (gzip, ...): Quill decodes none, so it passes none on.
    other: bool,
    /// An element that is not a coding token, or `chunked` with parameters.
    malformed: bool,
}

impl Seen {
    /// Checks the framing fields together: Ok(true) for a chunked body.
    fn transfer_encoding(&self, version: Version) -> Result<bool, Error> {
        if let Some(e) = self.length_error {
            return Err(e);
        }
        let te = &self.te;
        if !te.present {
            return Ok(false);
        }
        if version == Version::Http10 {
            return Err(Error::TransferEncodingInHttp10);
        }
        if self.length.is_some() {
            return Err(Error::ContentLengthWithTransferEncoding);
        }
        if te.unknown {
            return Err(Error::UnknownTransferCoding);
        }
        if te.malformed || te.chunked != 1 || !te.last_chunked {
            return Err(Error::TransferEncodingNotChunked);
        }
        // `gzip, chunked`: the framing is understood, the coding under it is not, and servers
        // differ on what to do with it (RFC 9112 §6.1: 501 for a coding not understood).
        if te.other {
            return Err(Error::UnknownTransferCoding);
        }
        Ok(true)
    }

    fn content_length(&mut self, value: &[u8]) {
        let n = if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
            None
        } else if value.len() <= 19 {
            // 19 digits are under 2^64: no overflow to check.
            Some(
                value
                    .iter()
                    .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')),
            )
        } else {
            value.iter().try_fold(0u64, |n, &d| {
                n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
            })
        };
        match (n, self.length) {
            (None, _) => {
                self.length_error.get_or_insert(Error::InvalidContentLength);
            }
            (Some(n), Some(before)) if n != before => {
                self.length_error
                    .get_or_insert(Error::ConflictingContentLength);
            }
            (Some(n), _) => self.length = Some(n),
        }
    }

    fn transfer_codings(&mut self, value: &[u8]) {
        let te = &mut self.te;
        te.present = true;
        for element in value.split(|&b| b == b',') {
            let element = element.trim_ascii();
            if element.is_empty() {
                continue;
            }
            let (name, params) = match element.iter().position(|&b| b == b';') {
                Some(i) => (element[..i].trim_ascii(), true),
                None => (element, false),
            };
            let chunked = name.eq_ignore_ascii_case(b"chunked");
            if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) || (chunked && params) {
                te.malformed = true;
            } else if chunked {
                te.chunked += 1;
            } else if !is_known_coding(name) {
                te.unknown = true;
            } else {
                te.other = true;
            }
            te.last_chunked = chunked;
        }
    }

    fn connection_tokens(&mut self, value: &[u8]) {
        // One token, the usual value.
        if value.eq_ignore_ascii_case(b"keep-alive") {
            self.connection.keep_alive = true;
            return;
        }
        if value.eq_ignore_ascii_case(b"close") {
            self.connection.close = true;
            return;
        }
        for token in value.split(|&b| b == b',') {
            let token = token.trim_ascii();
            if token.eq_ignore_ascii_case(b"close") {
                self.connection.close = true;
            } else if token.eq_ignore_ascii_case(b"keep-alive") {
                self.connection.keep_alive = true;
            } else if token.eq_ignore_ascii_case(b"upgrade") {
                self.connection.upgrade = true;
            } else if !token.is_empty() && !is_fixed_hop(token) {
                self.connection.names_others = true;
            }
        }
    }
}

/// The registered transfer codings other than chunked (RFC 9112 §7). `identity` is obsolete.
fn is_known_coding(name: &[u8]) -> bool {
    [
        &b"gzip"[..],
        b"deflate",
        b"compress",
        b"x-gzip",
        b"x-compress",
    ]
    .iter()
    .any(|k| name.eq_ignore_ascii_case(k))
}

/// The field lines and the blank line that ends the head.
fn field_lines(
    c: &mut Cursor<'_>,
    limits: &Limits,
    index: Option<&mut FieldIndex>,
) -> Result<Seen, Stop> {
    field_lines_with(c, limits, index, field_line)
}

#[inline(always)]
fn field_lines_with(
    c: &mut Cursor<'_>,
    limits: &Limits,
    mut index: Option<&mut FieldIndex>,
    field_line: LineReader,
) -> Result<Seen, Stop> {
    let mut seen = Seen::default();
    if let Some(ix) = index.as_deref_mut() {
        ix.begin();
    }
    loop {
        match c.peek()? {
            b'\r' => {
                c.pos += 1;
                c.lf()?;
                if let Some(ix) = index {
                    ix.head_len = c.pos;
                }
                return Ok(seen);
            }
            b'\n' => return Err(Error::BareLf.into()),
            b' ' | b'\t' => return Err(Error::ObsFold.into()),
            _ => {}
        }
        seen.fields += 1;
        if seen.fields > limits.max_headers {
            return Err(Error::TooManyHeaders.into());
        }
        let line_start = c.pos;
        let (name_span, value_span, plain) = field_line(c)?;
        let kind = Kind::of(name_span.of(c.buf), plain);
        if let Some(ix) = index.as_deref_mut() {
            ix.push(line_start, name_span.end, value_span, c.pos, kind);
        }
        // Only these fields' values say something to the parser: the others' are not sliced.
        match kind.name {
            Name::ContentLength => seen.content_length(value_span.of(c.buf)),
            Name::TransferEncoding => seen.transfer_codings(value_span.of(c.buf)),
            Name::Host => {
                seen.hosts += 1;
                seen.host = value_span;
            }
            Name::Connection => seen.connection_tokens(value_span.of(c.buf)),
            _ => {}
        }
    }
}

/// [`field_line`] for a line Quill wrote: the line's end and the colon found by `memchr`, the
/// bytes between not classified again.
fn own_field_line(c: &mut Cursor<'_>) -> Result<(Span, Span, bool), Stop> {
    let start = c.pos;
    let end = c.buf.len().min(c.limit);
    let rest = c.buf.get(start..end).unwrap_or_default();
    let Some(lf) = memchr::memchr(b'\n', rest) else {
        return Err(if c.buf.len() > c.limit {
            Stop::Bad(c.over)
        } else {
            Stop::Partial
        });
    };
    let Some(line) = rest[..lf].strip_suffix(b"\r") else {
        return Err(Error::BareLf.into());
    };
    let colon = match memchr::memchr(b':', line) {
        Some(0) | None => return Err(Error::InvalidHeaderName.into()),
        Some(i) => i,
    };
    c.pos = start + lf + 1;
    Ok((
        Span {
            start,
            end: start + colon,
        },
        value_after(start, line, colon),
        false,
    ))
}

/// The value of the field `line` (without its CRLF, at `at` in the head) whose colon is at
/// `colon`: without the spaces and tabs around it.
fn value_after(at: usize, line: &[u8], colon: usize) -> Span {
    let value = &line[colon + 1..];
    let lead = value.iter().take_while(|&&b| is_space(b)).count();
    let trail = trailing_spaces(&value[lead..]);
    Span {
        start: at + colon + 1 + lead,
        end: at + colon + 1 + value.len() - trail,
    }
}

/// How many spaces and tabs `bytes` ends with (the last byte looked at first: most values end
/// with none).
pub(super) fn trailing_spaces(bytes: &[u8]) -> usize {
    match bytes.last() {
        Some(&b) if is_space(b) => bytes.iter().rev().take_while(|&&b| is_space(b)).count(),
        _ => 0,
    }
}

/// One `name: value CRLF` line: the name, the value without surrounding whitespace, and whether
/// the name is letters, digits and dashes only. Inlined into the loop over a head's lines (a call
/// a line, and its result through memory, cost more than the quick reader's own work on a short
/// line); the checked reader stays out of line.
#[inline(always)]
fn field_line(c: &mut Cursor<'_>) -> Result<(Span, Span, bool), Stop> {
    match whole_field_line(c) {
        Some(line) => Ok(line),
        None => checked_field_line(c),
    }
}

/// [`field_line`] for a line that is whole and well formed within the bytes and the size limit
/// (nearly every line), read without the cursor's checks byte by byte: `None` for any other,
/// which [`checked_field_line`] then reads, error or incomplete.
#[inline(always)]
fn whole_field_line(c: &mut Cursor<'_>) -> Option<(Span, Span, bool)> {
    let start = c.pos;
    let rest = c.buf.get(start..c.buf.len().min(c.limit))?;
    let (name_end, plain) = name_len(rest);
    if name_end == 0 || rest.get(name_end) != Some(&b':') {
        return None;
    }
    let mut value_start = name_end + 1;
    while rest.get(value_start).is_some_and(|&b| is_space(b)) {
        value_start += 1;
    }
    let value_end = value_start + value_len(rest.get(value_start..)?);
    if rest.get(value_end..value_end + 2)? != b"\r\n" {
        return None;
    }
    let trailing = trailing_spaces(&rest[value_start..value_end]);
    c.pos = start + value_end + 2;
    Some((
        Span {
            start,
            end: start + name_end,
        },
        Span {
            start: start + value_start,
            end: start + value_end - trailing,
        },
        plain,
    ))
}

/// [`field_line`] a byte at a time, with every check: what reports a line's error, or that the
/// bytes ran out.
#[cold]
#[inline(never)]
fn checked_field_line(c: &mut Cursor<'_>) -> Result<(Span, Span, bool), Stop> {
    let start = c.pos;
    let plain = c.skip_name();
    match c.next()? {
        b':' if c.pos - 1 > start => {}
        b' ' | b'\t' if c.pos - 1 > start => {
            // Spaces, then a colon: the smuggling classic; anything else: no field name.
            c.skip_while(is_space);
            return Err(match c.next()? {
                b':' => Error::SpaceBeforeColon,
                b => classify(b, Error::InvalidHeaderName),
            }
            .into());
        }
        b => return Err(classify(b, Error::InvalidHeaderName).into()),
    }
    let name = Span {
        start,
        end: c.pos - 1,
    };
    c.skip_while(is_space);
    let start = c.pos;
    c.skip_value();
    match c.next()? {
        b'\r' => {}
        b => return Err(classify(b, Error::ControlChar).into()),
    }
    let value = &c.buf[start..c.pos - 1];
    let end = start + value.len() - trailing_spaces(value);
    c.lf()?;
    Ok((name, Span { start, end }, plain))
}

#[cfg(test)]
mod skip_tests {
    use proptest::prelude::*;

    use super::super::grammar::{is_tchar, is_value_byte};
    use super::Cursor;

    /// Bytes drawn mostly from those a head holds, so runs of name and value bytes are long.
    fn head_bytes() -> impl Strategy<Value = Vec<u8>> {
        let byte = prop_oneof![
            6 => prop::sample::select(&b"abcXYZ09-"[..]),
            2 => prop::sample::select(&b" \t_.:;/\"\r\n"[..]),
            1 => any::<u8>(),
        ];
        prop::collection::vec(byte, 0..40)
    }

    /// The quick reader takes ordinary lines (so the property below compares something) and
    /// leaves the unusual ones to the checked reader.
    #[test]
    fn ordinary_lines_are_read_whole_and_unusual_ones_are_not() {
        let whole = |line: &[u8]| super::whole_field_line(&mut Cursor::new(line, 1024));
        let long = b"User-Agent: Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/128.0 \r\n";
        for line in [&b"Host: a\r\n"[..], b"Content-Type:text/html\r\n", long] {
            assert!(whole(line).is_some(), "{:?}", String::from_utf8_lossy(line));
        }
        for line in [
            &b"Host : a\r\n"[..],
            b"X: a\x01\r\n",
            b"X: a\n",
            b"X: a\r\n"[..5].as_ref(),
        ] {
            assert!(whole(line).is_none(), "{:?}", String::from_utf8_lossy(line));
        }
        let (name, value, plain) = whole(long).unwrap();
        assert_eq!((name.of(long), plain), (&b"User-Agent"[..], true));
        assert!(value.of(long).ends_with(b"Firefox/128.0"));
    }

    /// The names [`super::Kind::of`] compares with (lowercase letters and dashes).
    const KNOWN: [&[u8]; 10] = [
        b"content-length",
        b"transfer-encoding",
        b"host",
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"upgrade",
        b"forwarded",
        b"x-request-id",
    ];

    proptest! {
        #![proptest_config(super::super::proptests::config(2000))]

        /// The word-at-a-time name comparison says what `eq_ignore_ascii_case` says, for names
        /// that are a known one with some bytes' case flipped or replaced by any byte, one
        /// byte shorter or longer.
        #[test]
        fn known_names_compare_as_case_insensitive_equality_does(
            which in 0usize..KNOWN.len(),
            edits in prop::collection::vec((0usize..20, any::<u8>(), any::<bool>()), 0..4),
            cut in 0usize..20,
            longer in any::<Option<u8>>(),
        ) {
            let known = KNOWN[which];
            let mut name = known.to_vec();
            for (at, byte, flip) in edits {
                if let Some(b) = name.get_mut(at) {
                    *b = if flip { *b ^ 0x20 } else { byte };
                }
            }
            name.truncate(cut.max(known.len().saturating_sub(1)));
            name.extend(longer);
            prop_assert_eq!(
                super::eq_lowercase(&name, known),
                name.eq_ignore_ascii_case(known),
                "{:?}", String::from_utf8_lossy(&name)
            );
        }

        /// The word-at-a-time skips stop where the byte-at-a-time one does, for every start and
        /// size limit.
        #[test]
        fn word_skips_stop_where_byte_skips_do(
            bytes in head_bytes(),
            from in 0usize..40,
            limit in 0usize..48,
        ) {
            let start = from.min(bytes.len());
            let cursor = |pos| Cursor { pos, ..Cursor::new(&bytes, limit) };
            let (mut byte, mut word) = (cursor(start), cursor(start));
            byte.skip_while(is_value_byte);
            word.skip_value();
            prop_assert_eq!(byte.pos, word.pos, "value from {}", start);
            let (mut byte, mut word) = (cursor(start), cursor(start));
            byte.skip_while(is_tchar);
            word.skip_name();
            prop_assert_eq!(byte.pos, word.pos, "name from {}", start);
        }

        /// A line the quick reader takes, the checked reader reads the same (the checked one
        /// reads every other line, so the two agree on all).
        #[test]
        fn a_line_read_whole_reads_the_same_byte_by_byte(
            name in head_bytes(),
            value in head_bytes(),
            ending in prop::sample::select(&["\r\n", "\n", "\r", "", "\r\nX"][..]),
            limit in 0usize..100,
        ) {
            let mut line = name;
            line.push(b':');
            line.extend(value);
            line.extend(ending.as_bytes());
            let mut quick = Cursor::new(&line, limit);
            if let Some(read) = super::whole_field_line(&mut quick) {
                let mut checked = Cursor::new(&line, limit);
                let again = super::checked_field_line(&mut checked);
                prop_assert!(matches!(again, Ok(r) if r == read), "{:?}", line);
                prop_assert_eq!(quick.pos, checked.pos);
            }
        }
    }
}
