//! A TLS ClientHello read without decrypting anything
//! (docs/design.md#sni-routing-without-termination: SNI routing without termination): the server
//! name, the ALPN protocols and the versions a client offers, from the bytes a client sends first,
//! so that a TCP listener can pick a pool by name and forward the TLS bytes untouched.
//!
//! Pure: no sockets, no clock, no allocation. [`parse`] takes what has arrived so far and answers
//! `Ok(None)` until the whole ClientHello is there. The message may span several handshake
//! records (fragmentation, RFC 8446 §5.1): fields are read through a cursor that steps over the
//! record headers, so a field cut by a record boundary reads like any other. Bounds: the message
//! is at most [`MAX_HELLO`] bytes in at most [`MAX_RECORDS`] records, so a caller that peeks
//! [`MAX_WIRE`] bytes always has enough. Every malformation has its own [`HelloError`].

use std::fmt;

/// The largest ClientHello accepted, its 4-byte handshake header included (a record's plaintext
/// limit; real hellos, post-quantum key shares included, stay under 2 KiB).
pub const MAX_HELLO: usize = 16 * 1024;
/// The most records a ClientHello may be split into.
pub const MAX_RECORDS: usize = 32;
/// The most bytes a whole ClientHello can take on the wire: the message and its record headers.
pub const MAX_WIRE: usize = MAX_HELLO + MAX_RECORDS * RECORD_HEADER;
/// The longest host name (RFC 6066 §3, and DNS).
pub const MAX_NAME: usize = 255;

const RECORD_HEADER: usize = 5;
/// A TLS record's plaintext limit (RFC 8446 §5.1).
const MAX_RECORD: usize = 1 << 14;
const CONTENT_HANDSHAKE: u8 = 22;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u16 = 0;
const EXT_ALPN: u16 = 16;
const EXT_SUPPORTED_VERSIONS: u16 = 43;
const NAME_TYPE_HOST: u8 = 0;

/// Why bytes are not a well-formed ClientHello.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelloError {
    /// The first byte is not a handshake record's: not TLS at all (or SSL 2).
    NotTls,
    /// A record's version is not 3.x.
    RecordVersion(u16),
    /// A handshake record with no bytes (forbidden: RFC 8446 §5.1).
    EmptyRecord,
    /// A record longer than 2^14 bytes.
    RecordTooLong(usize),
    /// A record of another content type came before the ClientHello ended.
    Interleaved(u8),
    /// The first handshake message is not a ClientHello (its type).
    NotClientHello(u8),
    /// The ClientHello is longer than [`MAX_HELLO`] (its declared length).
    TooLarge(usize),
    /// The ClientHello is split into more than [`MAX_RECORDS`] records.
    TooManyRecords,
    /// The ClientHello's own (legacy) version is not 3.x.
    LegacyVersion(u16),
    /// The session id is longer than 32 bytes or runs past the message.
    SessionId,
    /// The cipher suite list is empty, odd or runs past the message.
    CipherSuites,
    /// The compression method list is empty or runs past the message.
    Compression,
    /// The extensions block runs past the message, or bytes follow it.
    Extensions,
    /// An extension runs past the extensions block.
    Extension,
    /// An extension read here appears twice (its type).
    Duplicate(u16),
    /// The server_name extension is malformed (list length, name type, name length).
    ServerName,
    /// Two host names in one server_name extension.
    TwoHostNames,
    /// The host name is empty, longer than 255 bytes, or not letters, digits, `-` and `.` in
    /// non-empty labels.
    HostName,
    /// The ALPN extension is malformed (empty list, lengths past its end).
    Alpn,
    /// An ALPN protocol name is empty.
    EmptyProtocol,
    /// The supported_versions extension is empty, odd or runs past its end.
    SupportedVersions,
}

impl fmt::Display for HelloError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HelloError::NotTls => f.write_str("not a TLS handshake record"),
            HelloError::RecordVersion(v) => write!(f, "record version {v:#06x} is not TLS"),
            HelloError::EmptyRecord => f.write_str("empty handshake record"),
            HelloError::RecordTooLong(n) => write!(f, "record of {n} bytes (at most 16384)"),
            HelloError::Interleaved(t) => {
                write!(f, "record of type {t} inside the ClientHello")
            }
            HelloError::NotClientHello(t) => {
                write!(f, "handshake message of type {t} instead of a ClientHello")
            }
            HelloError::TooLarge(n) => {
                write!(f, "ClientHello of {n} bytes (at most {MAX_HELLO})")
            }
            HelloError::TooManyRecords => {
                write!(f, "ClientHello split into more than {MAX_RECORDS} records")
            }
            HelloError::LegacyVersion(v) => write!(f, "ClientHello version {v:#06x} is not TLS"),
            HelloError::SessionId => f.write_str("malformed session id"),
            HelloError::CipherSuites => f.write_str("malformed cipher suite list"),
            HelloError::Compression => f.write_str("malformed compression method list"),
            HelloError::Extensions => f.write_str("malformed extensions block"),
            HelloError::Extension => f.write_str("extension longer than the extensions block"),
            HelloError::Duplicate(t) => write!(f, "extension {t} given twice"),
            HelloError::ServerName => f.write_str("malformed server_name extension"),
            HelloError::TwoHostNames => f.write_str("two host names in server_name"),
            HelloError::HostName => f.write_str("server name is not a valid host name"),
            HelloError::Alpn => f.write_str("malformed ALPN extension"),
            HelloError::EmptyProtocol => f.write_str("empty ALPN protocol name"),
            HelloError::SupportedVersions => f.write_str("malformed supported_versions extension"),
        }
    }
}

impl std::error::Error for HelloError {}

/// What a ClientHello says, borrowed from the bytes given to [`parse`].
#[derive(Clone, Copy, Debug)]
pub struct Hello<'a> {
    /// The version of the first record (0x0301 from most clients, whatever they offer).
    pub record_version: u16,
    /// The ClientHello's own version field (0x0303 from TLS 1.3 clients: see
    /// [`Hello::supported_versions`]).
    pub legacy_version: u16,
    /// How many bytes of the input the ClientHello took, record headers included.
    pub len: usize,
    server_name: Option<Bytes<'a>>,
    alpn: Option<Bytes<'a>>,
    versions: Option<Bytes<'a>>,
}

impl<'a> Hello<'a> {
    /// The host name the client asked for (server_name, RFC 6066), as sent (compare it without
    /// case); None when the client sent none.
    pub fn server_name(&self) -> Option<Name> {
        self.server_name.map(Name::from_bytes)
    }

    /// The protocols the client offers (ALPN, RFC 7301), in its order; empty without ALPN.
    pub fn alpn(&self) -> Protocols<'a> {
        Protocols {
            rest: self.alpn.unwrap_or_default(),
        }
    }

    /// Whether the client sent the ALPN extension.
    pub fn has_alpn(&self) -> bool {
        self.alpn.is_some()
    }

    /// The versions of the supported_versions extension (TLS 1.3 clients), in the client's
    /// order; empty when it sent none (then [`Hello::legacy_version`] is its highest).
    pub fn supported_versions(&self) -> Versions<'a> {
        Versions {
            rest: self.versions.unwrap_or_default(),
        }
    }

    /// The highest version the client offers (GREASE values, `0x?a?a`, left out).
    pub fn max_version(&self) -> u16 {
        match self.versions {
            Some(_) => self
                .supported_versions()
                .filter(|v| v & 0x0f0f != 0x0a0a)
                .max()
                .unwrap_or(self.legacy_version),
            None => self.legacy_version,
        }
    }
}

/// A host name or ALPN protocol copied out of the hello (at most 255 bytes, so a field split by a
/// record boundary reads whole without allocating).
#[derive(Clone, Copy)]
pub struct Name {
    bytes: [u8; MAX_NAME],
    len: u8,
}

impl Name {
    fn from_bytes(b: Bytes<'_>) -> Name {
        let mut name = Name {
            bytes: [0; MAX_NAME],
            len: 0,
        };
        for (slot, byte) in name.bytes.iter_mut().zip(b) {
            *slot = byte;
            name.len += 1;
        }
        name
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or_default()
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_bytes().escape_ascii().to_string())
    }
}

impl PartialEq<[u8]> for Name {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_bytes() == other
    }
}

/// The ALPN protocols of a hello (see [`Hello::alpn`]).
#[derive(Clone, Copy, Debug)]
pub struct Protocols<'a> {
    rest: Bytes<'a>,
}

impl Iterator for Protocols<'_> {
    type Item = Name;

    fn next(&mut self) -> Option<Name> {
        let n = self.rest.u8().ok()?;
        let name = self.rest.cut(usize::from(n)).ok()?;
        Some(Name::from_bytes(name))
    }
}

/// The versions of a hello's supported_versions (see [`Hello::supported_versions`]).
#[derive(Clone, Copy, Debug)]
pub struct Versions<'a> {
    rest: Bytes<'a>,
}

impl Iterator for Versions<'_> {
    type Item = u16;

    fn next(&mut self) -> Option<u16> {
        self.rest.u16().ok()
    }
}

/// Reads the ClientHello at the start of `buf`: `Ok(None)` while it is incomplete, the hello once
/// whole (bytes after it are left alone), or why the bytes cannot be one. Never panics, never
/// allocates; a prefix of a valid hello is `Ok(None)`, and an error found in a prefix stays.
pub fn parse(buf: &[u8]) -> Result<Option<Hello<'_>>, HelloError> {
    let Some(message) = message(buf)? else {
        return Ok(None);
    };
    let record_version = be16(buf, 1).unwrap_or(0);
    let mut hello = Bytes {
        wire: buf,
        pos: message.pos,
        in_record: message.in_record,
        left: message.len,
    };
    let body = body(&mut hello, record_version)?;
    Ok(Some(Hello {
        len: message.end,
        ..body
    }))
}

/// Where the ClientHello's body is (after its 4-byte header) and where its last byte ends.
struct Message {
    /// Wire position of the body's first byte, and the bytes left in its record from there.
    pos: usize,
    in_record: usize,
    /// The body's length.
    len: usize,
    /// Wire position just past the message.
    end: usize,
}

/// Walks the records until the whole message has arrived; checks every record header on the way.
fn message(buf: &[u8]) -> Result<Option<Message>, HelloError> {
    let mut pos = 0usize;
    let mut header = [0u8; 4];
    // Message bytes in the records before this one, and header bytes seen.
    let mut before = 0usize;
    let mut seen = 0usize;
    let mut body: Option<(usize, usize, usize)> = None;
    for n in 0..MAX_RECORDS {
        let Some(len) = record(buf, pos, n == 0)? else {
            return Ok(None);
        };
        let data = pos + RECORD_HEADER;
        let avail = len.min(buf.len().saturating_sub(data));
        for (i, &b) in buf.iter().skip(data).take(avail).enumerate() {
            if seen == 4 {
                break;
            }
            header[seen] = b;
            seen += 1;
            if header[0] != HANDSHAKE_CLIENT_HELLO {
                return Err(HelloError::NotClientHello(header[0]));
            }
            if seen == 4 {
                let size = usize::from(header[1]) << 16
                    | usize::from(header[2]) << 8
                    | usize::from(header[3]);
                if size + 4 > MAX_HELLO {
                    return Err(HelloError::TooLarge(size + 4));
                }
                body = Some((data + i + 1, len - i - 1, size));
            }
        }
        if let Some((start, in_record, size)) = body {
            let total = 4 + size;
            if before + avail >= total {
                return Ok(Some(Message {
                    pos: start,
                    in_record,
                    len: size,
                    end: data + (total - before),
                }));
            }
        }
        if avail < len {
            return Ok(None);
        }
        before += len;
        pos = data + len;
    }
    Err(HelloError::TooManyRecords)
}

/// Checks the record header at `pos` (the first of the hello when `first`): its length, or None
/// when the header has not all arrived.
fn record(buf: &[u8], pos: usize, first: bool) -> Result<Option<usize>, HelloError> {
    let Some(&kind) = buf.get(pos) else {
        return Ok(None);
    };
    if kind != CONTENT_HANDSHAKE {
        return Err(if first {
            HelloError::NotTls
        } else {
            HelloError::Interleaved(kind)
        });
    }
    // Both version bytes before judging: the error names the version whatever the cut.
    let Some(version) = be16(buf, pos + 1) else {
        return Ok(None);
    };
    if version >> 8 != 3 {
        return Err(HelloError::RecordVersion(version));
    }
    let Some(len) = be16(buf, pos + 3) else {
        return Ok(None);
    };
    let len = usize::from(len);
    if len == 0 {
        return Err(HelloError::EmptyRecord);
    }
    if len > MAX_RECORD {
        return Err(HelloError::RecordTooLong(len));
    }
    Ok(Some(len))
}

fn be16(buf: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*buf.get(at)?, *buf.get(at + 1)?]))
}

/// A run of message bytes that may cross record boundaries: `left` bytes from wire position
/// `pos`, with `in_record` bytes left in the current record (the next record's header follows).
/// Record headers were checked by [`message`] before any read.
#[derive(Clone, Copy, Debug, Default)]
struct Bytes<'a> {
    wire: &'a [u8],
    pos: usize,
    in_record: usize,
    left: usize,
}

/// A read past the end of a field: which error it is depends on the field.
struct Short;

impl<'a> Bytes<'a> {
    fn is_empty(&self) -> bool {
        self.left == 0
    }

    /// The next `n` bytes as their own run; this one moves past them.
    fn cut(&mut self, n: usize) -> Result<Bytes<'a>, Short> {
        if n > self.left {
            return Err(Short);
        }
        self.step_into_record();
        let taken = Bytes { left: n, ..*self };
        let mut n_left = n;
        while n_left > 0 {
            self.step_into_record();
            if self.in_record == 0 {
                return Err(Short);
            }
            let step = n_left.min(self.in_record);
            self.pos += step;
            self.in_record -= step;
            n_left -= step;
        }
        self.left -= n;
        Ok(taken)
    }

    /// At a record's end with bytes left: moves past the next record's header.
    fn step_into_record(&mut self) {
        if self.in_record == 0 && self.left > 0 {
            self.in_record = be16(self.wire, self.pos + 3).map_or(0, usize::from);
            self.pos += RECORD_HEADER;
        }
    }

    fn u8(&mut self) -> Result<u8, Short> {
        if self.left == 0 {
            return Err(Short);
        }
        self.step_into_record();
        let b = *self.wire.get(self.pos).ok_or(Short)?;
        if self.in_record == 0 {
            return Err(Short);
        }
        self.pos += 1;
        self.in_record -= 1;
        self.left -= 1;
        Ok(b)
    }

    fn u16(&mut self) -> Result<u16, Short> {
        Ok(u16::from_be_bytes([self.u8()?, self.u8()?]))
    }

    /// A field with a one-byte length before it.
    fn vec8(&mut self) -> Result<Bytes<'a>, Short> {
        let n = self.u8()?;
        self.cut(usize::from(n))
    }

    /// A field with a two-byte length before it.
    fn vec16(&mut self) -> Result<Bytes<'a>, Short> {
        let n = self.u16()?;
        self.cut(usize::from(n))
    }
}

impl Iterator for Bytes<'_> {
    type Item = u8;

    fn next(&mut self) -> Option<u8> {
        self.u8().ok()
    }
}

/// The ClientHello's body: versions, the fields skipped, then the extensions read here.
fn body<'a>(m: &mut Bytes<'a>, record_version: u16) -> Result<Hello<'a>, HelloError> {
    let legacy_version = m.u16().map_err(|Short| HelloError::LegacyVersion(0))?;
    if legacy_version >> 8 != 3 {
        return Err(HelloError::LegacyVersion(legacy_version));
    }
    m.cut(32).map_err(|Short| HelloError::SessionId)?; // random
    let session = m.vec8().map_err(|Short| HelloError::SessionId)?;
    if session.left > 32 {
        return Err(HelloError::SessionId);
    }
    let suites = m.vec16().map_err(|Short| HelloError::CipherSuites)?;
    if suites.left == 0 || suites.left % 2 != 0 {
        return Err(HelloError::CipherSuites);
    }
    let compression = m.vec8().map_err(|Short| HelloError::Compression)?;
    if compression.is_empty() {
        return Err(HelloError::Compression);
    }
    let mut hello = Hello {
        record_version,
        legacy_version,
        len: 0,
        server_name: None,
        alpn: None,
        versions: None,
    };
    if m.is_empty() {
        // A hello from before extensions (SSL 3, early TLS 1.0): no name to route by.
        return Ok(hello);
    }
    let mut exts = m.vec16().map_err(|Short| HelloError::Extensions)?;
    if !m.is_empty() {
        return Err(HelloError::Extensions);
    }
    while !exts.is_empty() {
        let kind = exts.u16().map_err(|Short| HelloError::Extension)?;
        let data = exts.vec16().map_err(|Short| HelloError::Extension)?;
        let slot = match kind {
            EXT_SERVER_NAME => &mut hello.server_name,
            EXT_ALPN => &mut hello.alpn,
            EXT_SUPPORTED_VERSIONS => &mut hello.versions,
            _ => continue,
        };
        if slot.is_some() {
            return Err(HelloError::Duplicate(kind));
        }
        *slot = Some(match kind {
            EXT_SERVER_NAME => server_name(data)?,
            EXT_ALPN => alpn(data)?,
            _ => supported_versions(data)?,
        });
    }
    Ok(hello)
}

/// Checks a server_name extension (RFC 6066 §3) and gives its host name. An empty extension (a
/// server's answer) is malformed from a client.
fn server_name(mut data: Bytes<'_>) -> Result<Bytes<'_>, HelloError> {
    let mut names = data.vec16().map_err(|Short| HelloError::ServerName)?;
    if !data.is_empty() || names.is_empty() {
        return Err(HelloError::ServerName);
    }
    let mut host = None;
    while !names.is_empty() {
        let kind = names.u8().map_err(|Short| HelloError::ServerName)?;
        let name = names.vec16().map_err(|Short| HelloError::ServerName)?;
        if kind != NAME_TYPE_HOST {
            continue;
        }
        if host.is_some() {
            return Err(HelloError::TwoHostNames);
        }
        host_name(name)?;
        host = Some(name);
    }
    host.ok_or(HelloError::ServerName)
}

/// A host name: 1 to 255 letters, digits, `-` and `.`, no empty label (no trailing dot).
fn host_name(name: Bytes<'_>) -> Result<(), HelloError> {
    if name.left == 0 || name.left > MAX_NAME {
        return Err(HelloError::HostName);
    }
    let mut previous = b'.';
    for b in name {
        let ok = b.is_ascii_alphanumeric() || b == b'-' || (b == b'.' && previous != b'.');
        if !ok {
            return Err(HelloError::HostName);
        }
        previous = b;
    }
    if previous == b'.' {
        return Err(HelloError::HostName);
    }
    Ok(())
}

/// Checks an ALPN extension (RFC 7301 §3.1), a non-empty list of non-empty names, and gives the
/// list.
fn alpn(mut data: Bytes<'_>) -> Result<Bytes<'_>, HelloError> {
    let mut names = data.vec16().map_err(|Short| HelloError::Alpn)?;
    if !data.is_empty() || names.is_empty() {
        return Err(HelloError::Alpn);
    }
    let list = names;
    while !names.is_empty() {
        let name = names.vec8().map_err(|Short| HelloError::Alpn)?;
        if name.is_empty() {
            return Err(HelloError::EmptyProtocol);
        }
    }
    Ok(list)
}

/// Checks a ClientHello's supported_versions (RFC 8446 §4.2.1), a one-byte length then 1 to 127
/// versions, and gives the versions.
fn supported_versions(mut data: Bytes<'_>) -> Result<Bytes<'_>, HelloError> {
    let versions = data.vec8().map_err(|Short| HelloError::SupportedVersions)?;
    if !data.is_empty() || versions.is_empty() || versions.left % 2 != 0 {
        return Err(HelloError::SupportedVersions);
    }
    Ok(versions)
}

#[cfg(test)]
mod tests;
