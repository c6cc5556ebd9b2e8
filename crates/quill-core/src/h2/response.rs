//! An HTTP/1.1 response, as Quill's HTTP path writes it to a client, turned into HTTP/2 frames
//! on one stream: the head (and any 1xx before it) becomes HEADERS without the fields that
//! belong to an HTTP/1 connection, a `Content-Length` or close-delimited body becomes DATA as it
//! is, a chunked one is de-chunked into DATA with its trailers as a last HEADERS, all within the
//! stream's flow-control window: bytes the window does not take now are left for the next call.
//! A server's response head comes already as a header block ([`encode_response_head`], written
//! by the stream's session where the HTTP/1 path would write its rewritten head), so it is
//! neither written as HTTP/1.1 text nor read again; Quill's own answers come as HTTP/1.1 text.

use super::conn::Conn;
use super::hpack;
use crate::decimal;
use crate::http1::rewrite::{response_fields, ResponseField, ResponseRewrite};
use crate::http1::{self, Body, FieldIndex, Framing, ResponseHead};

/// Fields of an HTTP/1 connection that an HTTP/2 trailer section must not carry (RFC 9113
/// §8.2.2); a head's are told by the kinds noted with its fields (`FieldIndex::end_to_end`).
fn hop_by_hop(name: &[u8]) -> bool {
    [
        &b"connection"[..],
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"upgrade",
    ]
    .iter()
    .any(|h| name.eq_ignore_ascii_case(h))
}

/// A response head the HTTP path wrote as a header block ([`encode_response_head`]): its status,
/// its body's framing, and the block's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    pub status: u16,
    pub framing: Framing,
    pub block: usize,
}

/// Writes into `out` the header block of the response head `head` (in `buf`, its fields in
/// `index`) as Quill's HTTP path rewrites it with `rw`: `:status`, then the fields the HTTP/1.1
/// rewrite writes but those of an HTTP/1 connection (`http1::rewrite::response_fields`), names
/// lowercased. Its length, or `None` if it does not fit.
pub fn encode_response_head(
    buf: &[u8],
    head: &ResponseHead,
    index: &FieldIndex,
    rw: &ResponseRewrite,
    out: &mut [u8],
) -> Option<usize> {
    let mut block = hpack::Block::new(out);
    hpack::encode_status(&mut block, head.status);
    response_fields(buf, head, index, rw, |f| match f {
        ResponseField::Kept(name, value) | ResponseField::Added(name, value) => {
            hpack::encode_field(&mut block, name, value);
        }
        ResponseField::Length(n) => {
            let mut buf = [0; decimal::MAX_DIGITS];
            hpack::encode_field(&mut block, b"content-length", decimal::digits(n, &mut buf));
        }
        ResponseField::Via(received, name) => {
            hpack::encode_field_parts(&mut block, b"via", &[received, name]);
        }
    });
    block.written()
}

/// A response that cannot be turned into HTTP/2 (a broken head, a 101, a cut body): the stream
/// is reset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Broken;

#[derive(Debug)]
enum State {
    Head,
    Body(Body, Framing),
    Done,
}

/// One stream's response being translated.
#[derive(Debug)]
pub struct Response {
    state: State,
    /// The request was HEAD: the response has no body whatever its fields say.
    to_head: bool,
    /// A chunked body's framing since its last payload byte: at the end, the last chunk and
    /// the trailers.
    framing: Vec<u8>,
}

impl Response {
    pub fn new(to_head: bool) -> Response {
        Response {
            state: State::Head,
            to_head,
            framing: Vec::new(),
        }
    }

    /// Whether the whole response was sent.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// Takes what it can of `input` (the HTTP/1.1 bytes written for the response; `eof`: no more
    /// come) and sends it on `stream`: the bytes used. `(base, written)`: `input` starts at
    /// offset `base` of the response, and the heads written as header blocks, not as HTTP/1.1
    /// text, start at the offsets noted with them (an interim head's and the final one's may
    /// both be in `input`).
    pub fn pump(
        &mut self,
        conn: &mut Conn,
        stream: u32,
        input: &[u8],
        eof: bool,
        (base, written): (u64, &[(u64, Written)]),
    ) -> Result<usize, Broken> {
        let mut at = 0;
        for _ in 0..64 {
            match &mut self.state {
                State::Done => return Ok(input.len()),
                State::Head => {
                    let limits = http1::Limits {
                        max_head: 64 * 1024,
                        ..http1::Limits::default()
                    };
                    let rest = &input[at..];
                    if rest.is_empty() {
                        return if eof { Err(Broken) } else { Ok(at) };
                    }
                    let offset = base + at as u64;
                    if let Some((_, w)) = written.iter().find(|(o, _)| *o == offset) {
                        let Some(block) = rest.get(..w.block) else {
                            return if eof { Err(Broken) } else { Ok(at) };
                        };
                        if w.status == 101 {
                            return Err(Broken);
                        }
                        at += w.block;
                        self.head(w.status, w.framing, |end| {
                            conn.send_block(stream, block, end);
                        });
                        continue;
                    }
                    // The fields are found once, by the parse, not scanned again to be sent.
                    // The head is Quill's own writing (the HTTP path's rewrite of a head its
                    // strict parse accepted, or its own answer): its lines are not classified
                    // byte by byte again. Debug builds (the tests) check the strict parse agrees.
                    let mut index = http1::FieldIndex::empty();
                    let parsed =
                        http1::parse_own_response_indexed(rest, &limits, self.to_head, &mut index);
                    #[cfg(debug_assertions)]
                    if let Ok(Some(own)) = &parsed {
                        let mut strict = http1::FieldIndex::empty();
                        let again =
                            http1::parse_response_indexed(rest, &limits, self.to_head, &mut strict);
                        assert_eq!(again, Ok(Some(*own)), "{:?}", String::from_utf8_lossy(rest));
                        assert!(index.iter(rest).eq(strict.iter(rest)));
                    }
                    let head = match parsed {
                        Ok(Some(h)) => h,
                        Ok(None) if eof => return Err(Broken),
                        Ok(None) => return Ok(at),
                        Err(_) => return Err(Broken),
                    };
                    if head.status == 101 {
                        return Err(Broken);
                    }
                    let fields = index
                        .end_to_end(rest)
                        .map(|f| (f.name.of(rest), f.value.of(rest)));
                    at += head.len;
                    self.head(head.status, head.framing, |end| {
                        conn.send_head(stream, head.status, fields, end);
                    });
                }
                State::Body(body, framing) => {
                    let framing = *framing;
                    let rest = &input[at..];
                    if framing == Framing::Chunked && body.data_left().is_none() {
                        // Framing: byte by byte (a few bytes a chunk), kept for the trailers.
                        if rest.is_empty() {
                            return if eof { Err(Broken) } else { Ok(at) };
                        }
                        let mut used = 0;
                        while used < rest.len() && body.data_left().is_none() && !body.is_done() {
                            let fed = body.feed(&rest[used..used + 1]).map_err(|_| Broken)?;
                            if self.framing.len() < 32 * 1024 {
                                self.framing.push(rest[used]);
                            }
                            used += fed.used;
                        }
                        at += used;
                        if body.is_done() {
                            let framing = std::mem::take(&mut self.framing);
                            let trailers = trailer_section(&framing);
                            if trailers.is_empty() {
                                conn.send_data(stream, &[], true);
                            } else {
                                conn.send_trailers(stream, trailer_fields(trailers));
                            }
                            self.state = State::Done;
                        }
                        continue;
                    }
                    // Payload: as much as the window and the body take.
                    let window = conn.window(stream);
                    if window == 0 && !rest.is_empty() {
                        return Ok(at);
                    }
                    let mut take = rest.len().min(window);
                    if let Some(left) = body.data_left() {
                        take = take.min(left.min(usize::MAX as u64) as usize);
                    }
                    let fed = body.feed(&rest[..take]).map_err(|_| Broken)?;
                    at += fed.used;
                    if framing == Framing::Chunked {
                        self.framing.clear();
                    }
                    let close_end = framing == Framing::Close && eof && at == input.len();
                    let end = fed.done && framing != Framing::Chunked || close_end;
                    if fed.used > 0 || end {
                        conn.send_data(stream, &rest[..fed.used], end);
                    }
                    if end {
                        self.state = State::Done;
                        continue;
                    }
                    if at == input.len() {
                        if eof && framing != Framing::Close {
                            return Err(Broken);
                        }
                        return Ok(at);
                    }
                    if fed.used == 0 {
                        return Ok(at);
                    }
                }
            }
        }
        Ok(at)
    }
}

impl Response {
    /// Sends a head with `send`, which ends the stream when told so (an interim head leaves the
    /// state at `Head`).
    fn head(&mut self, status: u16, framing: Framing, send: impl FnOnce(bool)) {
        if status < 200 {
            send(false);
            return;
        }
        let empty = matches!(framing, Framing::None | Framing::Length(0));
        send(empty);
        self.state = if empty {
            State::Done
        } else {
            State::Body(Body::new(framing), framing)
        };
    }
}

/// The trailer lines of a chunked body's last framing bytes (after the `0` size line, before
/// the final blank line).
fn trailer_section(framing: &[u8]) -> &[u8] {
    // The last size line is the last line that starts with '0' before the trailers: find the
    // first line that starts with a digit and is all zeros up to `;` or CR.
    let mut at = 0;
    while at < framing.len() {
        let end = framing[at..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(framing.len(), |i| at + i + 1);
        let line = &framing[at..end];
        let size: &[u8] = line
            .split(|&b| b == b';' || b == b'\r' || b == b' ' || b == b'\t')
            .next()
            .unwrap_or_default();
        if !size.is_empty() && size.iter().all(|&b| b == b'0') {
            let rest = &framing[end..];
            return rest.strip_suffix(b"\r\n").unwrap_or(rest);
        }
        at = end;
    }
    &[]
}

/// `name: value` lines as fields (the chunk decoder checked their syntax), without the ones a
/// trailer section must not carry.
fn trailer_fields(section: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    section
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let colon = line.iter().position(|&b| b == b':')?;
            Some((&line[..colon], line[colon + 1..].trim_ascii()))
        })
        .filter(|(n, _)| !n.is_empty() && !hop_by_hop(n))
}
