//! A request's header list as a server must check it (RFC 9113 §8.1–§8.3), collected as the
//! HPACK decoder hands the fields over: pseudo-headers first and each once, lowercase names of
//! token characters, no connection-specific field, no NUL, CR or LF in a value and none starting
//! or ending with whitespace, `te` only as `trailers`, one `content-length` value. What breaks a
//! rule makes the request malformed (a stream error); what is over the size limits is kept
//! apart (the server answers 431). The list is kept in one buffer reused from request to
//! request.

use std::ops::Range;

/// Why a header list is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Malformed {
    /// An empty name, a character outside the token set, or an uppercase letter.
    BadName,
    /// NUL, CR or LF in a value, or a value starting or ending with a space or tab.
    BadValue,
    /// A pseudo-header after a regular field, twice, unknown, or a response's.
    BadPseudo,
    /// `connection`, `keep-alive`, `proxy-connection`, `transfer-encoding`, `upgrade`, or `te`
    /// other than `trailers`.
    ConnectionSpecific,
    /// A request without `:method`, `:scheme` or `:path`, or with an empty `:path`.
    MissingPseudo,
    /// `content-length` not a number, or several that differ.
    BadContentLength,
    /// `:authority` and `host` name different hosts.
    HostMismatch,
    /// A pseudo-header in trailers.
    PseudoInTrailers,
    /// Extended CONNECT (`:protocol`), which Quill does not offer.
    Protocol,
}

/// The fields of one header block.
#[derive(Debug, Default)]
pub struct FieldList {
    buf: Vec<u8>,
    /// Regular fields: name and value ranges in `buf`.
    fields: Vec<(Range<u32>, Range<u32>)>,
    pub method: Option<Range<u32>>,
    pub scheme: Option<Range<u32>>,
    pub authority: Option<Range<u32>>,
    pub path: Option<Range<u32>>,
    pub content_length: Option<u64>,
    /// The list's size as SETTINGS_MAX_HEADER_LIST_SIZE counts it (name, value and 32 per
    /// field) and its number of fields.
    pub size: usize,
    pub count: usize,
    /// Over the limits: the fields past them were not kept.
    pub too_large: bool,
    pub malformed: Option<Malformed>,
    /// Whether a regular field came (pseudo-headers must come first).
    regular_seen: bool,
    trailers: bool,
    max_size: usize,
    max_count: usize,
}

/// A field a request must not carry (RFC 9113 §8.2.2).
fn connection_specific(name: &[u8]) -> bool {
    matches!(
        name,
        b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade"
    )
}

fn name_ok(name: &[u8]) -> bool {
    !name.is_empty()
        && name.iter().all(|&b| {
            matches!(b,
                b'a'..=b'z' | b'0'..=b'9' | b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+'
                | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~')
        })
}

fn value_ok(value: &[u8]) -> bool {
    !value.iter().any(|&b| matches!(b, 0 | b'\r' | b'\n'))
        && !value.first().is_some_and(|&b| b == b' ' || b == b'\t')
        && !value.last().is_some_and(|&b| b == b' ' || b == b'\t')
}

impl FieldList {
    /// Empties the list for a new block of a request (`trailers`: a trailer section) with
    /// these limits.
    pub fn begin(&mut self, trailers: bool, max_size: usize, max_count: usize) {
        self.buf.clear();
        self.fields.clear();
        self.method = None;
        self.scheme = None;
        self.authority = None;
        self.path = None;
        self.content_length = None;
        self.size = 0;
        self.count = 0;
        self.too_large = false;
        self.malformed = None;
        self.regular_seen = false;
        self.trailers = trailers;
        self.max_size = max_size;
        self.max_count = max_count;
    }

    /// Gives the buffers back when they grew past what an ordinary request needs (a connection
    /// keeps them between requests).
    pub fn shrink(&mut self) {
        if self.buf.capacity() > 4096 {
            self.buf = Vec::new();
        }
        if self.fields.capacity() > 64 {
            self.fields = Vec::new();
        }
    }

    fn fail(&mut self, why: Malformed) {
        if self.malformed.is_none() {
            self.malformed = Some(why);
        }
    }

    fn keep(&mut self, b: &[u8]) -> Range<u32> {
        let start = self.buf.len() as u32;
        self.buf.extend_from_slice(b);
        start..self.buf.len() as u32
    }

    /// Takes the next decoded field.
    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        self.size += name.len() + value.len() + 32;
        self.count += 1;
        if self.size > self.max_size || self.count > self.max_count {
            // Counted, never kept: an HPACK bomb costs its decoding and nothing more.
            self.too_large = true;
            return;
        }
        if self.malformed.is_some() {
            return;
        }
        if !value_ok(value) {
            return self.fail(Malformed::BadValue);
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            if self.trailers {
                return self.fail(Malformed::PseudoInTrailers);
            }
            if self.regular_seen {
                return self.fail(Malformed::BadPseudo);
            }
            let range = self.keep(value);
            let slot = match pseudo {
                b"method" => &mut self.method,
                b"scheme" => &mut self.scheme,
                b"authority" => &mut self.authority,
                b"path" => &mut self.path,
                b"protocol" => return self.fail(Malformed::Protocol),
                _ => return self.fail(Malformed::BadPseudo),
            };
            if slot.is_some() {
                return self.fail(Malformed::BadPseudo);
            }
            *slot = Some(range);
            return;
        }
        self.regular_seen = true;
        if !name_ok(name) {
            return self.fail(Malformed::BadName);
        }
        if connection_specific(name) || (name == b"te" && value != b"trailers") {
            return self.fail(Malformed::ConnectionSpecific);
        }
        if name == b"content-length" && !self.trailers {
            let n = match std::str::from_utf8(value).ok().and_then(|s| {
                (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| s.parse::<u64>().ok())
                    .flatten()
            }) {
                Some(n) => n,
                None => return self.fail(Malformed::BadContentLength),
            };
            if self.content_length.is_some_and(|m| m != n) {
                return self.fail(Malformed::BadContentLength);
            }
            self.content_length = Some(n);
        }
        let n = self.keep(name);
        let v = self.keep(value);
        self.fields.push((n, v));
    }

    /// The block is complete: checks what the whole request must have.
    pub fn finish(&mut self) {
        if self.malformed.is_some() || self.trailers {
            return;
        }
        let connect = self
            .method
            .as_ref()
            .is_some_and(|m| self.of(m) == b"CONNECT");
        if self.method.is_none()
            || (!connect && (self.scheme.is_none() || self.path.is_none()))
            || self.path.as_ref().is_some_and(|p| p.is_empty())
        {
            return self.fail(Malformed::MissingPseudo);
        }
        if let Some(a) = self.authority.clone() {
            let authority = self.of(&a);
            let differs = self
                .fields()
                .any(|(n, v)| n == b"host" && !v.eq_ignore_ascii_case(authority));
            if differs {
                self.fail(Malformed::HostMismatch);
            }
        }
    }

    /// The bytes of a range of the list.
    pub fn of(&self, r: &Range<u32>) -> &[u8] {
        &self.buf[r.start as usize..r.end as usize]
    }

    /// The regular fields in order.
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.fields.iter().map(|(n, v)| (self.of(n), self.of(v)))
    }

    pub fn method(&self) -> &[u8] {
        self.method.as_ref().map_or(&b""[..], |r| self.of(r))
    }

    pub fn path(&self) -> &[u8] {
        self.path.as_ref().map_or(&b""[..], |r| self.of(r))
    }

    /// `:authority`, else the `host` field.
    pub fn host(&self) -> Option<&[u8]> {
        match &self.authority {
            Some(a) => Some(self.of(a)),
            None => self.fields().find(|(n, _)| *n == b"host").map(|(_, v)| v),
        }
    }
}

/// How the HTTP/1.1 request carries its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyForm {
    /// The request ended with its headers.
    None,
    /// `Content-Length` as the client sent it.
    Length,
    /// The client gave no length: `Transfer-Encoding: chunked`, each DATA frame a chunk.
    Chunked,
}

/// Writes the HTTP/1.1 request head of a checked list: `METHOD PATH HTTP/1.1`, `Host` from
/// `:authority` (or the client's `host`), the fields in order with the `cookie` crumbs joined in
/// one field (RFC 9113 §8.2.3) and `te` left out (hop-by-hop), then the body's framing.
/// The strict HTTP/1 parser reads it next, as it reads any client's.
pub fn write_http1(list: &FieldList, body: BodyForm, out: &mut Vec<u8>) {
    out.extend_from_slice(list.method());
    out.push(b' ');
    if list.method() == b"CONNECT" {
        out.extend_from_slice(list.host().unwrap_or_default());
    } else {
        out.extend_from_slice(list.path());
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(host) = list.host() {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(host);
        out.extend_from_slice(b"\r\n");
    }
    let mut cookies = 0;
    for (name, value) in list.fields() {
        match name {
            b"host" | b"te" => continue,
            b"cookie" => {
                cookies += 1;
                continue;
            }
            _ => {}
        }
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    if cookies > 0 {
        out.extend_from_slice(b"cookie: ");
        let mut first = true;
        for (_, value) in list.fields().filter(|(n, _)| *n == b"cookie") {
            if !first {
                out.extend_from_slice(b"; ");
            }
            first = false;
            out.extend_from_slice(value);
        }
        out.extend_from_slice(b"\r\n");
    }
    if body == BodyForm::Chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    out.extend_from_slice(b"\r\n");
}
