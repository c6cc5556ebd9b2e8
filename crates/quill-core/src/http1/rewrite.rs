//! Rewriting heads on their way through the proxy: the request head a server receives and the
//! response head a client receives, written into an output buffer from the parsed head and the
//! bytes it was parsed from (docs/design.md#hop-by-hop-fields-and-framing,
//! docs/design.md#http-performance-shape).
//!
//! Pure: no sockets, no clock, no allocation. The input head is never changed; fields are copied
//! or skipped line by line, then the proxy's own fields are appended (but the `Host` of an
//! absolute-form target, which comes first), then the blank line. The caller writes the output
//! and the body bytes after the input head in one `writev` (or, for a response to an HTTP/1
//! client whose output is no longer than the input head, copies it into the input head's place and
//! sends both as one slice).
//!
//! What is always done:
//! - the start line is the proxy's own (`HTTP/1.1`, or `HTTP/1.0` toward a server for an
//!   HTTP/1.0 client, so the server never answers it with chunked);
//! - hop-by-hop fields (RFC 9110 §7.6.1: `Connection`, `Keep-Alive`, `Proxy-Connection`, `TE`,
//!   `Transfer-Encoding`, `Upgrade`, and every field named in `Connection`) are removed, and
//!   `Content-Length`, and exactly one framing field is written for the framing the parser found;
//! - `Upgrade` and `Connection: upgrade` are kept when an upgrade is asked for and allowed.
//!
//! Header edits apply last, in order, to the fields as they would otherwise go out (the copied
//! ones and the proxy's own): `remove` drops every field of the name, `set` is `remove` then
//! `add`, `add` appends. These edits are ignored (the configuration refuses them, and the framing
//! and host the proxy relies on cannot be edited away): one of a framing or hop-by-hop field
//! (`Content-Length`, `Transfer-Encoding`, `Connection`, `Keep-Alive`, `Proxy-Connection`, `TE`,
//! `Upgrade`); an `add` or `remove` of `Host` (a request has one: `set` replaces it with a host
//! and optional port); one whose name is not a token or whose value has a control character.

use std::fmt;
use std::net::IpAddr;

use super::body::Framing;
#[cfg(test)]
use super::grammar::is_framing_lookalike;
use super::grammar::{
    control_bits, is_fixed_hop, is_host_byte, is_space, is_target_byte, is_tchar, same_name,
};
use super::head::{
    trailing_spaces, Connection, Field, FieldIndex, Kind, Name, RequestHead, ResponseHead, Target,
};
use super::{path, Span, Version};

/// How `X-Forwarded-For` is written on requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ForwardedFor {
    /// Kept from a trusted peer with the client's address appended; replaced otherwise.
    #[default]
    Append,
    /// Always replaced by the client's address.
    Replace,
    /// Left as the client sent it (never added).
    Off,
}

/// What a header edit does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EditOp {
    /// Removes every field of the name, then adds one with the value.
    Set,
    /// Adds a field, keeping any of the same name.
    Add,
    /// Removes every field of the name.
    Remove,
}

/// One header edit of a listener or a route (`request_headers`, `response_headers`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderEdit {
    pub op: EditOp,
    /// A token (checked when the configuration is read).
    pub name: Box<str>,
    /// Visible ASCII, spaces and tabs (checked when the configuration is read); empty for Remove.
    pub value: Box<str>,
}

/// The output buffer is too small for the rewritten head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overflow;

/// What the proxy does to a request head.
#[derive(Clone, Copy, Debug)]
pub struct RequestRewrite<'a> {
    /// The client's address; None for a client on a Unix socket (no forwarding fields then).
    pub client: Option<IpAddr>,
    /// Whether the peer is a trusted proxy (its `X-Forwarded-*` and `Forwarded` are kept).
    pub trusted: bool,
    pub forwarded_for: ForwardedFor,
    /// `http` or `https`, for `X-Forwarded-Proto` and `Forwarded: proto=`.
    pub proto: &'a str,
    pub x_forwarded_proto: bool,
    pub x_forwarded_host: bool,
    /// Add an RFC 7239 `Forwarded` field (`for=`, `proto=`, `host=`).
    pub forwarded: bool,
    /// `Via: 1.1 NAME` appended when set.
    pub via: Option<&'a str>,
    /// Added as `X-Request-ID` when the request has none.
    pub request_id: Option<&'a [u8]>,
    /// Listener edits, then route edits, then the proxy's own (a stickiness cookie), applied in
    /// order after the fields above.
    pub edits: [&'a [HeaderEdit]; 3],
    /// Replaces this prefix of the path with the second string (`rewrite_path`). The prefix is
    /// compared with the path in normal form (see the `path` module), as routes match it, and a
    /// rewritten path goes out in normal form.
    pub rewrite_path: Option<(&'a str, &'a str)>,
    /// Send the path in normal form (`normalize_path = "forward"`); else it goes as the client
    /// sent it (unless rewritten).
    pub normalize_path: bool,
    /// Keep header fields whose names have `_` (`underscores_in_headers`). Off, they are dropped:
    /// a server that reads `_` as `-` (CGI, WSGI, PHP) would take `X_Forwarded_For` for
    /// `X-Forwarded-For`. Even kept, the underscore spellings of the fields Quill writes itself
    /// (`X-Forwarded-*` when it writes them, and any an edit removes or sets) are dropped.
    pub underscores: bool,
    /// Keep `Upgrade` and send `Connection: upgrade` (the request asked to upgrade).
    pub upgrade: bool,
}

/// What the proxy does to a response head.
#[derive(Clone, Copy, Debug)]
pub struct ResponseRewrite<'a> {
    /// The client's version decides the framing fields it may get.
    pub client_version: super::Version,
    /// Ask the client to close: `Connection: close`.
    pub close: bool,
    /// An HTTP/1.0 client that asked for keep-alive and keeps it: `Connection: keep-alive`.
    pub keep_alive_10: bool,
    /// `Via: 1.1 NAME` appended when set.
    pub via: Option<&'a str>,
    /// Listener edits, then route edits, then the proxy's own (a stickiness cookie's
    /// `Set-Cookie`).
    pub edits: [&'a [HeaderEdit]; 3],
    /// A 101 answer to an upgrade: keep `Upgrade`, send `Connection: upgrade`.
    pub upgrade: bool,
}

/// Writes the request head the server receives into `out`; returns its length.
///
/// `buf` holds the head that [`parse_request`](super::parse_request) accepted as `head`. An
/// absolute-form target goes out in origin-form, with `Host` replaced by its authority (RFC 9112
/// §3.2.2). A `Host` named in `Connection` is kept (a client cannot strip it that way).
pub fn write_request(
    buf: &[u8],
    head: &RequestHead,
    rw: &RequestRewrite,
    out: &mut [u8],
) -> Result<usize, Overflow> {
    write_request_indexed(buf, head, &FieldIndex::new(buf, head.len), rw, out)
}

/// [`write_request`] with the fields `parse_request_indexed` noted (found again if `index` is
/// not the head's).
pub fn write_request_indexed(
    buf: &[u8],
    head: &RequestHead,
    index: &FieldIndex,
    rw: &RequestRewrite,
    out: &mut [u8],
) -> Result<usize, Overflow> {
    write_request_with(buf, head, index, rw, out, true)
}

/// [`write_request_indexed`], with `at_once` copying the request line as it came and keeping
/// or removing each field by its name alone where it can (the tests compare it with `false`,
/// every line decided alone).
pub(super) fn write_request_with(
    buf: &[u8],
    head: &RequestHead,
    index: &FieldIndex,
    rw: &RequestRewrite,
    out: &mut [u8],
    at_once: bool,
) -> Result<usize, Overflow> {
    let mut found = None;
    let index = checked(index, buf, (head.len, head.fields), &mut found);
    let mut out = Out::new(out);
    let req = Request::new(buf, head, rw, index);
    req.write_lines(&mut out, at_once)?;
    let mut connection = Tokens::default();
    connection.add(head.version == Version::Http10, b"keep-alive");
    connection.add(rw.upgrade, b"upgrade");
    write_framing(&mut out, head.framing, connection)?;
    req.forwarding_fields(&mut out)?;
    if let Some(name) = rw.via.filter(|v| is_value(v.as_bytes())) {
        req.proxy_field(&mut out, b"Via", &[received(head.version), name.as_bytes()])?;
    }
    if let Some(id) = rw.request_id.filter(|id| is_value(id)) {
        if !req.has(Name::XRequestId) {
            req.proxy_field(&mut out, b"X-Request-ID", &[id])?;
        }
    }
    req.edits.write_added(&mut out)?;
    out.put(b"\r\n")?;
    Ok(out.len)
}

/// Writes the response head the client receives into `out`; returns its length.
///
/// `buf` holds the head that [`parse_response`](super::parse_response) accepted as `head`. When
/// the response has no body by its status or request (`Framing::None`), the server's first
/// `Content-Length` is kept for a HEAD or 304 answer (it describes the body a GET would get) and
/// dropped for 1xx and 204.
pub fn write_response(
    buf: &[u8],
    head: &ResponseHead,
    rw: &ResponseRewrite,
    out: &mut [u8],
) -> Result<usize, Overflow> {
    write_response_indexed(buf, head, &FieldIndex::new(buf, head.len), rw, out)
}

/// [`write_response`] with the fields `parse_response_indexed` noted (found again if `index`
/// is not the head's).
pub fn write_response_indexed(
    buf: &[u8],
    head: &ResponseHead,
    index: &FieldIndex,
    rw: &ResponseRewrite,
    out: &mut [u8],
) -> Result<usize, Overflow> {
    write_response_with(buf, head, index, rw, out, true)
}

/// [`write_response_indexed`], with `at_once` copying the status line as it came and keeping
/// or removing each field by its name alone where it can (the tests compare it with `false`,
/// every line decided alone).
pub(super) fn write_response_with(
    buf: &[u8],
    head: &ResponseHead,
    index: &FieldIndex,
    rw: &ResponseRewrite,
    out: &mut [u8],
    at_once: bool,
) -> Result<usize, Overflow> {
    let mut found = None;
    let index = checked(index, buf, (head.len, head.fields), &mut found);
    let mut out = Out::new(out);
    let mut keep = ResponseKeep::new(buf, index, head, rw);
    let mut run = Run::default();
    // `HTTP/1.1 NNN REASON`: the line Quill would write.
    let line_end = head.reason.end + 2;
    let verbatim = head.version == Version::Http11
        && head.reason.start == b"HTTP/1.1 200 ".len()
        && buf.get(head.reason.end..line_end) == Some(b"\r\n");
    if at_once && verbatim {
        run.lines = Some(Span {
            start: 0,
            end: line_end,
        });
    } else {
        out.put(b"HTTP/1.1 ")?;
        out.number(u64::from(head.status))?;
        out.put(b" ")?;
        out.put(head.reason.of(buf))?;
        out.put(b"\r\n")?;
    }
    if at_once && keep.by_name(index) {
        for (line, name) in index.lines() {
            let kept = match name {
                Name::Other => true,
                Name::ContentLength => keep.first_length_kept(),
                _ => false,
            };
            if kept {
                run.add(&mut out, buf, line)?;
            }
        }
    } else {
        for (f, kind) in index.iter_kinds(buf) {
            if keep.keeps(f.name.of(buf), kind) {
                run.add(&mut out, buf, f.line)?;
            }
        }
    }
    run.flush(&mut out, buf)?;
    let mut connection = Tokens::default();
    connection.add(rw.close, b"close");
    connection.add(rw.keep_alive_10 && !rw.close, b"keep-alive");
    connection.add(rw.upgrade, b"upgrade");
    write_framing(&mut out, head.framing, connection)?;
    if let Some(name) = keep.via(rw) {
        out.field(b"Via", &[received(head.version), name.as_bytes()])?;
    }
    keep.edits.write_added(&mut out)?;
    out.put(b"\r\n")?;
    Ok(out.len)
}

/// A field of a rewritten response head, as [`response_fields`] gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseField<'a> {
    /// A server's field the rewrite keeps: its name as the server spelled it, and its value.
    Kept(&'a [u8], &'a [u8]),
    /// `Content-Length` of a body of this length.
    Length(u64),
    /// `Via`: the received-protocol (`1.1 `), then the proxy's name.
    Via(&'a [u8], &'a [u8]),
    /// A field an edit adds.
    Added(&'a [u8], &'a [u8]),
}

/// The fields of the head [`write_response_indexed`] writes, in its order, for a writer of
/// another form than HTTP/1.1 (HTTP/2's HEADERS: `h2::encode_response_head`), without the
/// fields of an HTTP/1 connection (`Connection`, `Transfer-Encoding`, and an `Upgrade` kept for
/// a 101). The two forms share the decisions, so they carry the same fields.
pub fn response_fields<'a>(
    buf: &'a [u8],
    head: &ResponseHead,
    index: &FieldIndex,
    rw: &ResponseRewrite<'a>,
    mut each: impl FnMut(ResponseField<'_>),
) {
    let mut found = None;
    let index = checked(index, buf, (head.len, head.fields), &mut found);
    let mut keep = ResponseKeep::new(buf, index, head, rw);
    for (f, kind) in index.iter_kinds(buf) {
        let name = f.name.of(buf);
        if keep.keeps(name, kind) && kind.name != Name::Upgrade {
            each(ResponseField::Kept(name, f.value.of(buf)));
        }
    }
    if let Framing::Length(n) = head.framing {
        each(ResponseField::Length(n));
    }
    // The values as the HTTP/1.1 head's parse reads them: without the spaces around them (an
    // HTTP/2 field value may neither start nor end with one, RFC 9113 §8.2.1).
    if let Some(name) = keep.via(rw) {
        // `1.1 ` and the name: only the name's end can be spaces (or all of it).
        let name = name.as_bytes();
        let name = &name[..name.len() - trailing_spaces(name)];
        match name {
            b"" => each(ResponseField::Via(b"", trim_spaces(received(head.version)))),
            name => each(ResponseField::Via(received(head.version), name)),
        }
    }
    for e in keep.edits.added() {
        each(ResponseField::Added(
            e.name.as_bytes(),
            trim_spaces(e.value.as_bytes()),
        ));
    }
}

/// `value` without the spaces and tabs around it.
fn trim_spaces(value: &[u8]) -> &[u8] {
    let value = &value[value.iter().take_while(|&&b| is_space(b)).count()..];
    &value[..value.len() - trailing_spaces(value)]
}

/// Which of a response head's fields its rewrite keeps, and whether it adds `Via`: the one
/// place both [`write_response_indexed`] and [`response_fields`] decide it.
struct ResponseKeep<'a> {
    hop: HopByHop<'a>,
    edits: Edits<'a>,
    /// The head's `Content-Length` goes on (a response without a body: HEAD's, 304's).
    keep_length: bool,
    length_kept: bool,
}

impl<'a> ResponseKeep<'a> {
    fn new(
        buf: &'a [u8],
        index: &'a FieldIndex,
        head: &ResponseHead,
        rw: &ResponseRewrite<'a>,
    ) -> ResponseKeep<'a> {
        ResponseKeep {
            hop: HopByHop::new(buf, index, rw.upgrade, head.connection),
            edits: Edits::new(rw.edits),
            keep_length: head.framing == Framing::None && head.status >= 200 && head.status != 204,
            length_kept: false,
        }
    }

    /// Whether the server's field `name` of `kind` goes on (called for each in order).
    #[inline]
    fn keeps(&mut self, name: &[u8], kind: Kind) -> bool {
        if kind.name == Name::ContentLength {
            self.first_length_kept()
        } else {
            !self.hop.removes(name, kind) && !self.edits.removes(name, 0)
        }
    }

    /// A `Content-Length` goes on: the first one, when the head's goes on at all.
    fn first_length_kept(&mut self) -> bool {
        self.keep_length && !std::mem::replace(&mut self.length_kept, true)
    }

    /// Whether each field is kept or removed by its name alone: every field indexed, none but
    /// `Content-Length`, the hop-by-hop ones always removed and those nothing touches, with no
    /// `Connection` naming another field and no name of a length an edit removes.
    fn by_name(&self, index: &FieldIndex) -> bool {
        const KNOWN: [Name; 4] = [
            Name::Other,
            Name::ContentLength,
            Name::Connection,
            Name::Hop,
        ];
        !self.hop.names_others && index.only(&KNOWN, self.edits.removed_lengths)
    }

    /// The proxy's name for `Via`, when it adds one.
    fn via(&self, rw: &ResponseRewrite<'a>) -> Option<&'a str> {
        rw.via
            .filter(|v| is_value(v.as_bytes()) && !self.edits.removes(b"via", 0))
    }
}

/// `index` if it was made for the head of `len` bytes and `fields` fields in `buf`, else one
/// made now (kept in `found`).
fn checked<'i>(
    index: &'i FieldIndex,
    buf: &[u8],
    (len, fields): (usize, usize),
    found: &'i mut Option<FieldIndex>,
) -> &'i FieldIndex {
    if index.is_for(len, fields) {
        index
    } else {
        found.insert(FieldIndex::new(buf, len))
    }
}

/// The received-protocol of a `Via` element (RFC 9110 §7.6.3): the version of the message as the
/// proxy received it.
fn received(version: Version) -> &'static [u8] {
    match version {
        Version::Http10 => b"1.0 ",
        Version::Http11 => b"1.1 ",
    }
}

/// The framing and `Connection` fields the proxy writes: exactly one of `Content-Length` and
/// `Transfer-Encoding: chunked` for a delimited body, and the connection tokens, if any.
fn write_framing(out: &mut Out, framing: Framing, connection: Tokens) -> Result<(), Overflow> {
    if !connection.is_empty() {
        out.put(b"Connection: ")?;
        connection.write(out)?;
        out.put(b"\r\n")?;
    }
    match framing {
        Framing::Length(n) => {
            out.put(b"Content-Length: ")?;
            out.number(n)?;
            out.put(b"\r\n")
        }
        Framing::Chunked => out.put(b"Transfer-Encoding: chunked\r\n"),
        Framing::Close | Framing::None => Ok(()),
    }
}

/// A few connection tokens, written comma-separated.
#[derive(Clone, Copy, Default)]
struct Tokens {
    list: [&'static [u8]; 3],
    len: usize,
}

impl Tokens {
    fn add(&mut self, when: bool, token: &'static [u8]) {
        if let (true, Some(slot)) = (when, self.list.get_mut(self.len)) {
            *slot = token;
            self.len += 1;
        }
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn write(&self, out: &mut Out) -> Result<(), Overflow> {
        for (i, token) in self.list.iter().take(self.len).enumerate() {
            if i > 0 {
                out.put(b", ")?;
            }
            out.put(token)?;
        }
        Ok(())
    }
}

/// What happens to one kind of forwarding field (`X-Forwarded-For`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Forward {
    /// The incoming fields go as they came; none is added.
    Untouched,
    /// The incoming fields are removed; none is added.
    Dropped,
    /// The incoming fields are removed; the proxy's own is written.
    Ours,
    /// The incoming fields are removed; one is written with their values, then the proxy's.
    Joined,
}

impl Forward {
    fn keeps_incoming(self) -> bool {
        self == Forward::Untouched
    }
}

/// The fields a request keeps by their names alone, when [`Request::kept_by_name`] holds.
const KEPT: [Name; 2] = [Name::Other, Name::Host];

/// A request head being rewritten: what is decided before any byte is written.
struct Request<'a, 'b> {
    buf: &'b [u8],
    head: &'b RequestHead,
    rw: &'b RequestRewrite<'a>,
    index: &'b FieldIndex,
    hop: HopByHop<'b>,
    edits: Edits<'a>,
    /// The authority of an absolute-form target, which replaces `Host`.
    authority: Option<&'b [u8]>,
    /// The host the client asked for (`X-Forwarded-Host`, `Forwarded: host=`).
    host: Option<&'b [u8]>,
    client: Option<IpAddr>,
    xff: Forward,
    xfp: Forward,
    xfh: Forward,
    forwarded: Forward,
}

impl<'a, 'b> Request<'a, 'b> {
    fn new(
        buf: &'b [u8],
        head: &'b RequestHead,
        rw: &'b RequestRewrite<'a>,
        index: &'b FieldIndex,
    ) -> Request<'a, 'b> {
        // The parser decided the request's authority once (the absolute-form target's, which
        // `Host` must agree with, else `Host`): what routing and the 421 check used.
        let authority = match head.target_form {
            Target::Absolute => head.authority.map(|a| a.of(buf)),
            _ => None,
        };
        let host = head.authority.map(|a| a.of(buf)).filter(|h| !h.is_empty());
        let mut req = Request {
            buf,
            head,
            rw,
            index,
            hop: HopByHop::new(buf, index, rw.upgrade, head.connection),
            edits: Edits::new(rw.edits),
            authority,
            host,
            client: rw.client.map(|ip| ip.to_canonical()),
            xff: Forward::Untouched,
            xfp: Forward::Untouched,
            xfh: Forward::Untouched,
            forwarded: Forward::Untouched,
        };
        req.decide_forwarding();
        req
    }

    /// What each forwarding field gets, from the settings, the peer's trust and what came in.
    fn decide_forwarding(&mut self) {
        let rw = self.rw;
        let (trusted, client) = (rw.trusted, self.client.is_some());
        // Without a client address (a Unix socket), nothing is added, and only a trusted peer's
        // fields are kept.
        let absent = if trusted {
            Forward::Untouched
        } else {
            Forward::Dropped
        };
        self.xff = match rw.forwarded_for {
            ForwardedFor::Off => Forward::Untouched,
            _ if !client => absent,
            ForwardedFor::Append if trusted => Forward::Joined,
            ForwardedFor::Append | ForwardedFor::Replace => Forward::Ours,
        };
        let proto_ok = !rw.proto.is_empty() && is_value(rw.proto.as_bytes());
        self.xfp = self.kept_or_ours(rw.x_forwarded_proto, proto_ok, Name::XForwardedProto);
        let host_ok = self.host.is_some();
        self.xfh = self.kept_or_ours(rw.x_forwarded_host, host_ok, Name::XForwardedHost);
        self.forwarded = match (rw.forwarded, client, trusted) {
            (false, _, _) => Forward::Untouched,
            (true, false, _) => absent,
            (true, true, true) => Forward::Joined,
            (true, true, false) => Forward::Ours,
        };
    }

    /// `X-Forwarded-Proto` and `-Host`: a trusted peer's kept as is, else replaced by ours (if
    /// there is a value to write).
    fn kept_or_ours(&self, enabled: bool, have_value: bool, name: Name) -> Forward {
        let trusted = self.rw.trusted;
        if !enabled || (trusted && (self.client.is_none() || self.has(name))) {
            Forward::Untouched
        } else if self.client.is_none() || !have_value {
            Forward::Dropped
        } else {
            Forward::Ours
        }
    }

    /// Whether a field of the input survives the rules of the hop (before forwarding and edits).
    fn passes(&self, name: &[u8], kind: Kind) -> bool {
        match kind.name {
            Name::Host => self.authority.is_none(),
            Name::ContentLength => false,
            _ => !self.hop.removes(name, kind),
        }
    }

    /// Whether the input has a field of this name (spelled with dashes) that passes the hop.
    fn has(&self, name: Name) -> bool {
        !self.index.lacks(name) && self.incoming(name).next().is_some()
    }

    /// The input fields of this name (spelled with dashes) that pass the hop.
    fn incoming(&self, want: Name) -> impl Iterator<Item = Field> + '_ {
        self.index
            .named(self.buf, want)
            .filter_map(move |(f, kind)| {
                let name = f.name.of(self.buf);
                (!kind.underscored(name) && self.passes(name, kind)).then_some(f)
            })
    }

    /// The request line as it came, when the rewrite would write it so: an origin-form target
    /// the path settings leave as it is (most requests).
    fn verbatim_line(&self) -> Option<&'b [u8]> {
        let rw = self.rw;
        let kept = self.head.target_form == Target::Origin
            && rw.rewrite_path.is_none()
            && (!rw.normalize_path || path::is_normal(self.origin_path()))
            && self.authority.is_none();
        // method SP target SP HTTP/1.x CRLF: the line ends 11 bytes after the target (taken
        // from the head, not from the index, which may not hold every field).
        let end = self.head.target.end + b" HTTP/1.1\r\n".len();
        kept.then(|| self.buf.get(..end)).flatten()
    }

    /// Whether each field is kept or removed by its name alone: every field indexed, none but
    /// `Host` and those nothing touches, or the hop-by-hop ones always removed (`Connection`,
    /// `Keep-Alive`, ...) when `Connection` names no other field; no `_` in a name and no name
    /// of a length an edit removes. Most requests: a field costs a look at its name.
    fn kept_by_name(&self) -> bool {
        const KNOWN: [Name; 4] = [KEPT[0], KEPT[1], Name::Connection, Name::Hop];
        self.authority.is_none()
            && !self.hop.names_others
            && self.index.only(&KNOWN, self.edits.removed_lengths)
    }

    /// The path of an origin-form target (before any `?`).
    fn origin_path(&self) -> &'b [u8] {
        let target = self.head.target.of(self.buf);
        let end = memchr::memchr(b'?', target).unwrap_or(target.len());
        &target[..end]
    }

    /// The request line, the `Host` of an absolute-form target, and the fields kept; with
    /// `at_once`, the request line and the runs of kept lines copied as they came when
    /// [`Request::verbatim_line`] and [`Request::kept_by_name`] allow (the tests compare the
    /// two ways).
    fn write_lines(&self, out: &mut Out, at_once: bool) -> Result<(), Overflow> {
        let (buf, head) = (self.buf, self.head);
        let mut kept = Run::default();
        match self.verbatim_line().filter(|_| at_once) {
            // The line starts the run of lines copied (one copy with the fields after it).
            Some(line) => {
                kept.lines = Some(Span {
                    start: 0,
                    end: line.len(),
                })
            }
            None => {
                out.put(head.method_span.of(buf))?;
                out.put(b" ")?;
                self.write_target(out)?;
                out.put(match head.version {
                    Version::Http10 => b" HTTP/1.0\r\n",
                    Version::Http11 => b" HTTP/1.1\r\n",
                })?;
                if let Some(authority) = self.authority {
                    self.proxy_field(out, b"Host", &[authority])?;
                }
            }
        }
        let by_name = at_once && self.kept_by_name();
        if by_name && kept.lines.is_some() && self.index.only(&KEPT, 0) {
            // Every line kept (nothing hop-by-hop): the head as it came, but its blank line.
            return out.put(buf.get(..head.len.saturating_sub(2)).unwrap_or_default());
        }
        if by_name {
            for (line, name) in self.index.lines() {
                if KEPT.contains(&name) {
                    kept.add(out, buf, line)?;
                }
            }
        } else {
            for (f, kind) in self.index.iter_kinds(buf) {
                if self.keeps(&f, kind) {
                    kept.add(out, buf, f.line)?;
                }
            }
        }
        kept.flush(out, buf)
    }

    /// Whether an input field is copied.
    fn keeps(&self, f: &Field, kind: Kind) -> bool {
        let name = f.name.of(self.buf);
        if !self.passes(name, kind) || self.edits.removes(name, 0) {
            return false;
        }
        // `X_Forwarded_For` reads as `X-Forwarded-For` to CGI, WSGI and PHP servers (E7).
        if kind.underscored(name) && (!self.rw.underscores || self.edits.removes_spelled(name)) {
            return false;
        }
        let forward = match kind.name {
            Name::XForwardedFor => self.xff,
            Name::XForwardedProto => self.xfp,
            Name::XForwardedHost => self.xfh,
            // `Forwarded` is one word: no `_` spelling of it.
            Name::Forwarded => self.forwarded,
            _ => Forward::Untouched,
        };
        forward.keeps_incoming()
    }

    /// The target in origin-form (or as it came for `*` and CONNECT), its path rewritten.
    fn write_target(&self, out: &mut Out) -> Result<(), Overflow> {
        let target = self.head.target.of(self.buf);
        let path_query = match self.head.target_form {
            Target::Origin => target,
            Target::Absolute => absolute_path_query(target),
            Target::Asterisk | Target::Authority => return out.put(target),
        };
        let split = path_query
            .iter()
            .position(|&b| b == b'?')
            .unwrap_or(path_query.len());
        let (path, query) = path_query.split_at(split);
        // `http://h?q` asks for the path "/".
        let path = if path.is_empty() { &b"/"[..] } else { path };
        if (self.rw.normalize_path || self.rw.rewrite_path.is_some()) && !path::is_normal(path) {
            let start = out.len;
            if out.normalized(path).is_ok() {
                let rewritten = match self.rw.rewrite_path {
                    Some((prefix, with))
                        if out.since(start).starts_with(prefix.as_bytes())
                            && with.bytes().all(is_target_byte) =>
                    {
                        out.splice(start, prefix.len(), with.as_bytes())?;
                        if out.since(start).first() != Some(&b'/') {
                            out.splice(start, 0, b"/")?;
                        }
                        true
                    }
                    _ => false,
                };
                if rewritten || self.rw.normalize_path {
                    return out.put(query);
                }
            }
            // As sent: not rewritten, or no normal form (the proxy refuses those first).
            out.len = start;
        }
        let (first, rest) = match self.rw.rewrite_path {
            Some((prefix, with))
                if path.starts_with(prefix.as_bytes()) && with.bytes().all(is_target_byte) =>
            {
                (with.as_bytes(), &path[prefix.len()..])
            }
            _ => (&b""[..], path),
        };
        if first.first().or(rest.first()) != Some(&b'/') {
            out.put(b"/")?;
        }
        out.put(first)?;
        out.put(rest)?;
        out.put(query)
    }

    /// `X-Forwarded-For`, `-Proto`, `-Host` and `Forwarded`, as decided.
    fn forwarding_fields(&self, out: &mut Out) -> Result<(), Overflow> {
        let Some(client) = self.client else {
            return Ok(());
        };
        let mut ip_buf = [0u8; 48];
        let ip = format_ip(client, &mut ip_buf);
        if matches!(self.xff, Forward::Ours | Forward::Joined) {
            let (name, kind) = (&b"X-Forwarded-For"[..], Name::XForwardedFor);
            self.joined_field(out, name, kind, self.xff, |out| out.put(ip))?;
        }
        if self.xfp == Forward::Ours {
            self.proxy_field(out, b"X-Forwarded-Proto", &[self.rw.proto.as_bytes()])?;
        }
        if let (Forward::Ours, Some(host)) = (self.xfh, self.host) {
            self.proxy_field(out, b"X-Forwarded-Host", &[host])?;
        }
        if matches!(self.forwarded, Forward::Ours | Forward::Joined) {
            self.joined_field(out, b"Forwarded", Name::Forwarded, self.forwarded, |out| {
                self.forwarded_element(out, client, ip)
            })?;
        }
        Ok(())
    }

    /// One field of the proxy's: the incoming values joined with ", " (when `Joined`), then ours.
    fn joined_field(
        &self,
        out: &mut Out,
        name: &[u8],
        kind: Name,
        how: Forward,
        ours: impl FnOnce(&mut Out) -> Result<(), Overflow>,
    ) -> Result<(), Overflow> {
        if self.edits.removes(name, 0) {
            return Ok(());
        }
        out.put(name)?;
        out.put(b": ")?;
        if how == Forward::Joined {
            for f in self.incoming(kind) {
                let value = trim_list(f.value.of(self.buf));
                if !value.is_empty() {
                    out.put(value)?;
                    out.put(b", ")?;
                }
            }
        }
        ours(out)?;
        out.put(b"\r\n")
    }

    /// An RFC 7239 element: `for=ADDR;proto=PROTO;host=HOST`.
    fn forwarded_element(&self, out: &mut Out, client: IpAddr, ip: &[u8]) -> Result<(), Overflow> {
        out.put(b"for=")?;
        match client {
            IpAddr::V4(_) => out.put(ip)?,
            IpAddr::V6(_) => {
                out.put(b"\"[")?;
                out.put(ip)?;
                out.put(b"]\"")?;
            }
        }
        let proto = self.rw.proto.as_bytes();
        if !proto.is_empty() && is_value(proto) {
            out.put(b";proto=")?;
            out.token_or_quoted(proto)?;
        }
        if let Some(host) = self.host {
            out.put(b";host=")?;
            out.token_or_quoted(host)?;
        }
        Ok(())
    }

    /// A field of the proxy's, unless an edit removes it.
    fn proxy_field(&self, out: &mut Out, name: &[u8], value: &[&[u8]]) -> Result<(), Overflow> {
        if self.edits.removes(name, 0) {
            return Ok(());
        }
        out.field(name, value)
    }
}

/// A list value without the empty elements at its ends (`a, b,` is `a, b`).
fn trim_list(value: &[u8]) -> &[u8] {
    let edge = |b: &u8| *b == b',' || *b == b' ' || *b == b'\t';
    let start = value.iter().position(|b| !edge(b)).unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| !edge(b))
        .map_or(start, |i| i + 1);
    value.get(start..end).unwrap_or_default()
}

/// The path and query of an absolute-form target (what follows its authority).
fn absolute_path_query(target: &[u8]) -> &[u8] {
    let after_scheme = target
        .windows(3)
        .position(|w| w == b"://")
        .map_or(target.len(), |i| i + 3);
    let rest = target.get(after_scheme..).unwrap_or_default();
    let end = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(rest.len());
    &rest[end..]
}

/// `ip` in text (an IPv4 address mapped into IPv6 shown as IPv4), in `buf`.
fn format_ip(ip: IpAddr, buf: &mut [u8; 48]) -> &[u8] {
    if let IpAddr::V4(v4) = ip {
        // The common case, without the formatting machinery (a tenth of a request's cost),
        // digit by digit into the buffer (15 bytes at most).
        let mut len = 0;
        let mut push = |b: u8| {
            if let Some(slot) = buf.get_mut(len) {
                *slot = b;
                len += 1;
            }
        };
        for (i, n) in v4.octets().into_iter().enumerate() {
            if i > 0 {
                push(b'.');
            }
            if n >= 100 {
                push(b'0' + n / 100);
            }
            if n >= 10 {
                push(b'0' + n / 10 % 10);
            }
            push(b'0' + n % 10);
        }
        return buf.get(..len).unwrap_or_default();
    }
    let mut w = Out::new(buf);
    // 45 bytes is the longest IPv6 text: this cannot overflow, and an error would give "".
    let len = match fmt::write(&mut w, format_args!("{ip}")) {
        Ok(()) => w.len,
        Err(_) => 0,
    };
    buf.get(..len).unwrap_or_default()
}

/// The hop-by-hop fields of a head: the fixed ones and those its `Connection` fields name.
struct HopByHop<'b> {
    buf: &'b [u8],
    index: &'b FieldIndex,
    /// Keep `Upgrade` (an upgrade is under way).
    upgrade: bool,
    /// Whether a `Connection` field names anything but `close`, `keep-alive` and `upgrade` (the
    /// common case is no: no need to read them again for each field).
    names_others: bool,
}

impl<'b> HopByHop<'b> {
    /// `connection` is what the parser found in the head's `Connection` fields.
    fn new(
        buf: &'b [u8],
        index: &'b FieldIndex,
        upgrade: bool,
        connection: Connection,
    ) -> HopByHop<'b> {
        HopByHop {
            buf,
            index,
            upgrade,
            names_others: connection.names_others,
        }
    }

    fn connection_tokens(&self) -> impl Iterator<Item = &'b [u8]> + '_ {
        let buf = self.buf;
        self.index
            .iter(buf)
            .filter(move |f| f.name.of(buf).eq_ignore_ascii_case(b"connection"))
            .flat_map(move |f| f.value.of(buf).split(|&b| b == b','))
            .map(<[u8]>::trim_ascii)
    }

    /// Whether a field of this name and kind is removed. `Host` is never (a client cannot name
    /// it away).
    #[inline]
    fn removes(&self, name: &[u8], kind: Kind) -> bool {
        match kind.name {
            Name::Upgrade => !self.upgrade,
            Name::Connection | Name::TransferEncoding | Name::Hop | Name::FramingLookalike => true,
            Name::Host => false,
            _ => {
                self.names_others
                    && self
                        .connection_tokens()
                        .any(|t| t.eq_ignore_ascii_case(name))
            }
        }
    }
}

/// Fields no edit touches: the hop-by-hop ones and `Content-Length`.
fn is_protected(name: &[u8]) -> bool {
    is_fixed_hop(name) || name.eq_ignore_ascii_case(b"content-length")
}

/// Visible ASCII, spaces, tabs and obs-text: what a field value may hold.
fn is_value(bytes: &[u8]) -> bool {
    let byte_ok = |&b: &u8| b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80;
    // Eight bytes a word (a request's id is checked on every request): a word with no control
    // byte is all value bytes; one with a control byte or a tab is decided byte by byte.
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let w = u64::from_le_bytes(word.try_into().unwrap_or([0; 8]));
        if control_bits(w) != 0 && !word.iter().all(byte_ok) {
            return false;
        }
    }
    words.remainder().iter().all(byte_ok)
}

/// The listener's, the route's and the proxy's edits, as one ordered list of the usable ones.
#[derive(Clone, Copy)]
struct Edits<'a> {
    lists: [&'a [HeaderEdit]; 3],
    /// The lengths of the names that edits remove or set, a bit each (63: that long or longer):
    /// most fields' names have none of them, and are passed without walking the lists.
    removed_lengths: u64,
    /// Some edit adds or sets a field.
    adds: bool,
}

/// A name length's bit in [`Edits::removed_lengths`].
fn length_bit(len: usize) -> u64 {
    1 << len.min(63)
}

impl<'a> Edits<'a> {
    fn new(lists: [&'a [HeaderEdit]; 3]) -> Edits<'a> {
        let (mut removed_lengths, mut adds) = (0, false);
        for e in lists.iter().flat_map(|l| l.iter()) {
            if matches!(e.op, EditOp::Remove | EditOp::Set) {
                removed_lengths |= length_bit(e.name.len());
            }
            adds |= matches!(e.op, EditOp::Add | EditOp::Set);
        }
        Edits {
            lists,
            removed_lengths,
            adds,
        }
    }

    /// Every edit, in order (usable or not: callers check the name first, which is cheaper).
    fn iter(&self) -> impl Iterator<Item = &'a HeaderEdit> {
        let [first, second, third] = self.lists;
        first.iter().chain(second).chain(third)
    }

    /// Whether a usable edit from number `from` on removes a field of this name. Called for
    /// every field of every request (a client's `X-Client-Cert-Subject` is always removed): the
    /// length is compared first, and the lists walked without an iterator chain.
    #[inline]
    fn removes(&self, name: &[u8], from: usize) -> bool {
        self.removed_lengths & length_bit(name.len()) != 0 && self.listed_removes(name, from)
    }

    fn listed_removes(&self, name: &[u8], from: usize) -> bool {
        let mut number = 0;
        for list in self.lists {
            for e in list {
                if number >= from
                    && e.name.len() == name.len()
                    && matches!(e.op, EditOp::Remove | EditOp::Set)
                    && e.name.as_bytes().eq_ignore_ascii_case(name)
                    && usable(e)
                {
                    return true;
                }
                number += 1;
            }
        }
        false
    }

    /// Whether a usable edit removes (or sets) a field of this name spelled with `-` where it
    /// has `_` (an `X_Client_Cert_Subject` when Quill removes `X-Client-Cert-Subject`).
    fn removes_spelled(&self, name: &[u8]) -> bool {
        self.removed_lengths & length_bit(name.len()) != 0
            && self.iter().any(|e| {
                matches!(e.op, EditOp::Remove | EditOp::Set)
                    && same_name(name, e.name.as_bytes())
                    && usable(e)
            })
    }

    /// The fields the usable edits add that no later edit removes.
    fn write_added(&self, out: &mut Out) -> Result<(), Overflow> {
        if !self.adds {
            return Ok(());
        }
        for e in self.added() {
            out.field(e.name.as_bytes(), &[e.value.as_bytes()])?;
        }
        Ok(())
    }

    /// The edits whose fields are added: usable ones that add or set, and that no later edit
    /// removes.
    fn added(&self) -> impl Iterator<Item = &'a HeaderEdit> + '_ {
        self.iter().enumerate().filter_map(|(i, e)| {
            (matches!(e.op, EditOp::Add | EditOp::Set)
                && usable(e)
                && !self.removes(e.name.as_bytes(), i + 1))
            .then_some(e)
        })
    }
}

/// An edit that can be applied: a token name that is not protected, a field value, and for
/// `Host` only a `set` to a host.
fn usable(e: &HeaderEdit) -> bool {
    let name = e.name.as_bytes();
    !name.is_empty()
        && name.iter().all(|&b| is_tchar(b))
        && !is_protected(name)
        && (e.op == EditOp::Remove || is_value(e.value.as_bytes()))
        && (!name.eq_ignore_ascii_case(b"host")
            || (e.op == EditOp::Set && e.value.bytes().all(is_host_byte)))
}

/// Field lines to copy that lie one after another in the input, copied at once.
#[derive(Default)]
struct Run {
    lines: Option<Span>,
}

impl Run {
    /// Adds `line`, copying the run so far first if `line` does not follow it.
    fn add(&mut self, out: &mut Out, buf: &[u8], line: Span) -> Result<(), Overflow> {
        match &mut self.lines {
            Some(run) if run.end == line.start => run.end = line.end,
            _ => {
                self.flush(out, buf)?;
                self.lines = Some(line);
            }
        }
        Ok(())
    }

    fn flush(&mut self, out: &mut Out, buf: &[u8]) -> Result<(), Overflow> {
        match self.lines.take() {
            Some(run) => out.put(run.of(buf)),
            None => Ok(()),
        }
    }
}

/// The output buffer and how much of it is written.
struct Out<'o> {
    buf: &'o mut [u8],
    len: usize,
}

impl<'o> Out<'o> {
    fn new(buf: &'o mut [u8]) -> Out<'o> {
        Out { buf, len: 0 }
    }

    #[inline]
    fn put(&mut self, bytes: &[u8]) -> Result<(), Overflow> {
        let end = self.len.checked_add(bytes.len()).ok_or(Overflow)?;
        let dst = self.buf.get_mut(self.len..end).ok_or(Overflow)?;
        dst.copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }

    /// The bytes written from `start` on.
    fn since(&self, start: usize) -> &[u8] {
        self.buf.get(start..self.len).unwrap_or_default()
    }

    /// Writes the normal form of `path`.
    fn normalized(&mut self, path: &[u8]) -> Result<(), Overflow> {
        let room = self.buf.get_mut(self.len..).ok_or(Overflow)?;
        let n = path::normalize_into(path, room).map_err(|_| Overflow)?;
        self.len += n;
        Ok(())
    }

    /// Replaces the `old` bytes written at `at` with `with`, moving what follows.
    fn splice(&mut self, at: usize, old: usize, with: &[u8]) -> Result<(), Overflow> {
        let tail = at
            .checked_add(old)
            .filter(|&t| t <= self.len)
            .ok_or(Overflow)?;
        let len = self.len - old + with.len();
        if len > self.buf.len() {
            return Err(Overflow);
        }
        self.buf.copy_within(tail..self.len, at + with.len());
        self.buf[at..at + with.len()].copy_from_slice(with);
        self.len = len;
        Ok(())
    }

    /// `name: value CRLF`, the value in parts.
    fn field(&mut self, name: &[u8], value: &[&[u8]]) -> Result<(), Overflow> {
        self.put(name)?;
        self.put(b": ")?;
        for part in value {
            self.put(part)?;
        }
        self.put(b"\r\n")
    }

    fn number(&mut self, n: u64) -> Result<(), Overflow> {
        let mut buf = [0; crate::decimal::MAX_DIGITS];
        self.put(crate::decimal::digits(n, &mut buf))
    }

    /// A token as is, anything else as a quoted-string (RFC 9110 §5.6.4).
    fn token_or_quoted(&mut self, bytes: &[u8]) -> Result<(), Overflow> {
        if bytes.iter().all(|&b| is_tchar(b)) {
            return self.put(bytes);
        }
        self.put(b"\"")?;
        for &b in bytes {
            if b == b'"' || b == b'\\' {
                self.put(b"\\")?;
            }
            self.put(&[b])?;
        }
        self.put(b"\"")
    }
}

impl fmt::Write for Out<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.put(s.as_bytes()).map_err(|_| fmt::Error)
    }
}

#[cfg(test)]
#[path = "rewrite_tests.rs"]
mod tests;
