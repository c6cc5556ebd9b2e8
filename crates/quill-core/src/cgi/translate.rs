//! A program's output turned into an HTTP/1.1 response, byte stream to byte stream: the CGI head
//! ([`super::parse_head`]) becomes a status line and fields ([`super::write_response_head`]), the
//! body is framed by the program's `Content-Length` when it gave one, else chunked (or, for a
//! client that cannot take chunks, delimited by the close). FastCGI's `STDOUT` and a CGI child's
//! standard output go through the same [`Translator`], so both answer alike.
//!
//! Pure and incremental: [`Translator::feed`] takes whatever was read, in pieces cut anywhere,
//! and writes into the caller's buffer; what does not fit waits inside (at most a head and a
//! chunk's framing). One translator serves a connection's requests one after the other, its two
//! small buffers reused.

use std::io::Write as _;

use super::{parse_head, write_response_head, Connection, Framing, Limits};

/// How a body whose length the program did not give is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    /// `Transfer-Encoding: chunked` (an HTTP/1.1 consumer).
    Chunked,
    /// No framing field and `Connection: close`: the body ends with the connection.
    Close,
}

/// Why a program's output cannot be a response (the caller answers 502 if nothing was sent yet,
/// else cuts the client).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The head is refused.
    Head(super::Error),
    /// The output ended before the head did.
    NoHead,
    /// The output ended before the `Content-Length` the program gave: `missing` bytes short.
    ShortBody { missing: u64 },
    /// Output after the response was finished.
    AfterEnd,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Head(e) => e.fmt(f),
            Error::NoHead => f.write_str("the program's output ended before its response head"),
            Error::ShortBody { missing } => write!(
                f,
                "the program's output ended {missing} bytes short of its Content-Length"
            ),
            Error::AfterEnd => f.write_str("program output after the end of its response"),
        }
    }
}

impl std::error::Error for Error {}

/// Where the response is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Collecting the program's head.
    Head,
    /// `left` body bytes to pass on, as they come (the program's `Content-Length`).
    Length { left: u64 },
    /// Passing the body on in chunks.
    Chunked,
    /// Passing the body on until the output ends.
    Close,
    /// No body goes out (a HEAD request, a 204 or 304): the program's bytes are dropped.
    Discard,
    /// The end was written (or is in `pending`): nothing more is taken.
    Finished,
}

/// Most body bytes one chunk carries when it has to wait in `pending` (a nearly full buffer).
const SPILL_CHUNK: usize = 4096;

/// Room a chunk's framing needs around its data: up to 16 hex digits, CRLF, and CRLF after.
const CHUNK_FRAMING: usize = 20;

/// Turns one program's output after another into HTTP/1.1 responses (see the module's text).
#[derive(Debug)]
pub struct Translator {
    limits: Limits,
    state: State,
    head_only: bool,
    unknown: BodyFraming,
    /// The program's head, collected until its blank line.
    head: Vec<u8>,
    /// Bytes owed to the consumer before any more (the HTTP head, a spilled chunk, the last
    /// chunk), from `pending_at`.
    pending: Vec<u8>,
    pending_at: usize,
    status: u16,
    headed: bool,
    /// Body bytes past the program's `Content-Length`, dropped.
    excess: u64,
    /// The consumer closes the connection after this response: the head says so.
    close: bool,
}

impl Translator {
    /// A translator whose heads are bounded by `limits`; [`Translator::start`] begins a response.
    pub fn new(limits: Limits) -> Translator {
        Translator {
            limits,
            state: State::Finished,
            head_only: false,
            unknown: BodyFraming::Chunked,
            head: Vec::new(),
            pending: Vec::new(),
            pending_at: 0,
            status: 0,
            headed: false,
            excess: 0,
            close: false,
        }
    }

    /// Begins the next response: `head_only` for a HEAD request (no body is written, whatever the
    /// program sends); `unknown` frames a body whose length the program did not give.
    pub fn start(&mut self, head_only: bool, unknown: BodyFraming) {
        self.state = State::Head;
        self.head_only = head_only;
        self.unknown = unknown;
        self.head.clear();
        self.pending.clear();
        self.pending_at = 0;
        self.status = 0;
        self.headed = false;
        self.excess = 0;
        self.close = unknown == BodyFraming::Close;
    }

    /// The response's head says `Connection: close` whatever its framing (the consumer closes
    /// the connection after it). [`BodyFraming::Close`] implies it.
    pub fn close_after(&mut self) {
        self.close = true;
    }

    /// Whether the HTTP head has been produced (the response has begun: a failure now cuts it).
    pub fn is_headed(&self) -> bool {
        self.headed
    }

    /// Whether the response is complete and all of it was written out.
    pub fn is_finished(&self) -> bool {
        self.state == State::Finished && self.pending_at == self.pending.len()
    }

    /// The response's status, once headed (0 before).
    pub fn status(&self) -> u16 {
        self.status
    }

    /// Body bytes the program sent past its own `Content-Length` (dropped, never passed on).
    pub fn excess(&self) -> u64 {
        self.excess
    }

    /// Feeds program output: writes response bytes into `out` and returns (bytes of `input`
    /// consumed, bytes written). It stops when `out` is full: call again with the rest. All of
    /// `input` is consumed unless `out` filled up.
    pub fn feed(&mut self, input: &[u8], out: &mut [u8]) -> Result<(usize, usize), Error> {
        let mut used = 0;
        let mut wrote = 0;
        loop {
            wrote += self.drain(&mut out[wrote..]);
            if self.pending_at < self.pending.len() || used == input.len() {
                return Ok((used, wrote));
            }
            let rest = &input[used..];
            match self.state {
                State::Head => used += self.take_head(rest)?,
                State::Length { left } => {
                    let n = rest.len().min(out.len() - wrote);
                    let n = n.min(usize::try_from(left).unwrap_or(usize::MAX));
                    if left == 0 {
                        self.excess += rest.len() as u64;
                        used = input.len();
                        continue;
                    }
                    if n == 0 {
                        return Ok((used, wrote));
                    }
                    out[wrote..wrote + n].copy_from_slice(&rest[..n]);
                    self.state = State::Length {
                        left: left - n as u64,
                    };
                    used += n;
                    wrote += n;
                }
                State::Chunked => {
                    let (u, w) = self.chunk(rest, &mut out[wrote..]);
                    used += u;
                    wrote += w;
                }
                State::Close => {
                    let n = rest.len().min(out.len() - wrote);
                    if n == 0 {
                        return Ok((used, wrote));
                    }
                    out[wrote..wrote + n].copy_from_slice(&rest[..n]);
                    used += n;
                    wrote += n;
                }
                State::Discard => used = input.len(),
                State::Finished => return Err(Error::AfterEnd),
            }
        }
    }

    /// The program's output has ended: writes what ends the response into `out` (the last chunk)
    /// and returns the bytes written; call again while [`Translator::is_finished`] is false (a
    /// full `out`). Err when the output ended early.
    pub fn finish(&mut self, out: &mut [u8]) -> Result<usize, Error> {
        match self.state {
            State::Head => return Err(Error::NoHead),
            State::Length { left } if left > 0 => {
                return Err(Error::ShortBody { missing: left });
            }
            State::Chunked => self.pending.extend_from_slice(b"0\r\n\r\n"),
            _ => {}
        }
        self.state = State::Finished;
        Ok(self.drain(out))
    }

    /// Copies pending bytes into `out`; returns how many.
    fn drain(&mut self, out: &mut [u8]) -> usize {
        let left = &self.pending[self.pending_at..];
        let n = left.len().min(out.len());
        out[..n].copy_from_slice(&left[..n]);
        self.pending_at += n;
        if self.pending_at == self.pending.len() {
            self.pending.clear();
            self.pending_at = 0;
        }
        n
    }

    /// Collects head bytes from `rest`; once the blank line is in, writes the HTTP head into
    /// `pending` and chooses the body's state. Returns the bytes of `rest` that were head.
    fn take_head(&mut self, rest: &[u8]) -> Result<usize, Error> {
        let before = self.head.len();
        // At most one byte past the limit is kept: enough to know the head is too long.
        let room = (self.limits.max_head + 1).saturating_sub(before);
        let take = rest.len().min(room.max(1));
        self.head.extend_from_slice(&rest[..take]);
        let Some((head, len)) = parse_head(&self.head, &self.limits).map_err(Error::Head)? else {
            return Ok(take);
        };
        // The head ends within what this call added: the bytes after it are body.
        let used = len - before;
        let no_body = self.head_only || matches!(head.status_code(), 204 | 304);
        let framing = match (head.content_length, no_body) {
            (_, true) if matches!(head.status_code(), 204 | 304) => Framing::Close,
            (Some(n), _) => Framing::Length(n),
            // A HEAD response says what the GET's would.
            (None, _) if self.unknown == BodyFraming::Chunked => Framing::Chunked,
            (None, _) => Framing::Close,
        };
        let connection = if self.close {
            Connection::Close
        } else {
            Connection::Omit
        };
        self.head.truncate(len);
        write_response_head(&head, &self.head, framing, connection, &mut self.pending);
        self.status = head.status_code();
        self.headed = true;
        self.state = match framing {
            _ if no_body => State::Discard,
            Framing::Length(n) => State::Length { left: n },
            Framing::Chunked => State::Chunked,
            Framing::Close => State::Close,
        };
        Ok(used)
    }

    /// Frames bytes of `rest` as one chunk into `out` (or into `pending` when `out` has too little
    /// room for the framing). Returns (consumed, written).
    fn chunk(&mut self, rest: &[u8], out: &mut [u8]) -> (usize, usize) {
        if out.len() > CHUNK_FRAMING {
            let n = rest.len().min(out.len() - CHUNK_FRAMING);
            let mut cursor = std::io::Cursor::new(&mut out[..]);
            // The framing fits: the room was checked above.
            let _ = write!(cursor, "{n:x}\r\n");
            let at = cursor.position() as usize;
            out[at..at + n].copy_from_slice(&rest[..n]);
            out[at + n..at + n + 2].copy_from_slice(b"\r\n");
            return (n, at + n + 2);
        }
        let n = rest.len().min(SPILL_CHUNK);
        let _ = write!(self.pending, "{n:x}\r\n");
        self.pending.extend_from_slice(&rest[..n]);
        self.pending.extend_from_slice(b"\r\n");
        (n, 0)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Feeds `input` in pieces of `cut` bytes through buffers of `room` bytes, then finishes.
    fn run(
        input: &[u8],
        head_only: bool,
        unknown: BodyFraming,
        cut: usize,
        room: usize,
    ) -> Result<Vec<u8>, Error> {
        let mut t = Translator::new(Limits::default());
        t.start(head_only, unknown);
        let mut all = Vec::new();
        let mut buf = vec![0; room];
        for piece in input.chunks(cut.max(1)) {
            let mut at = 0;
            for _ in 0..100_000 {
                let (u, w) = t.feed(&piece[at..], &mut buf)?;
                all.extend_from_slice(&buf[..w]);
                at += u;
                if at == piece.len() && w < buf.len() {
                    break;
                }
            }
            assert_eq!(at, piece.len(), "the piece was all consumed");
        }
        let mut n = t.finish(&mut buf)?;
        all.extend_from_slice(&buf[..n]);
        for _ in 0..100_000 {
            if t.is_finished() {
                break;
            }
            n = t.finish(&mut buf)?;
            all.extend_from_slice(&buf[..n]);
        }
        assert!(t.is_finished());
        Ok(all)
    }

    fn text(b: &[u8]) -> String {
        String::from_utf8_lossy(b).into_owned()
    }

    #[test]
    fn a_body_without_length_is_chunked_and_ends_with_the_last_chunk() {
        let out = run(
            b"Content-Type: text/plain\n\nhello",
            false,
            BodyFraming::Chunked,
            1000,
            4096,
        )
        .unwrap();
        assert_eq!(
            text(&out),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        );
    }

    #[test]
    fn a_program_content_length_frames_the_body_and_excess_is_dropped() {
        let mut t = Translator::new(Limits::default());
        t.start(false, BodyFraming::Chunked);
        let mut buf = [0u8; 256];
        let (u, w) = t
            .feed(
                b"Status: 404 Gone\r\nContent-Length: 3\r\n\r\nabcdef",
                &mut buf,
            )
            .unwrap();
        assert_eq!(u, 45);
        assert_eq!(
            text(&buf[..w]),
            "HTTP/1.1 404 Gone\r\nContent-Length: 3\r\n\r\nabc"
        );
        assert_eq!(t.excess(), 3);
        assert_eq!(t.finish(&mut buf).unwrap(), 0);
        assert!(t.is_finished());
        assert_eq!(t.status(), 404);
    }

    #[test]
    fn a_short_body_is_an_error_at_the_end() {
        let e = run(
            b"Content-Length: 10\n\nabc",
            false,
            BodyFraming::Chunked,
            100,
            100,
        )
        .unwrap_err();
        assert_eq!(e, Error::ShortBody { missing: 7 });
    }

    #[test]
    fn output_ending_inside_the_head_is_no_head() {
        let e = run(
            b"Content-Type: text/plain\n",
            false,
            BodyFraming::Chunked,
            100,
            100,
        )
        .unwrap_err();
        assert_eq!(e, Error::NoHead);
    }

    #[test]
    fn a_head_request_gets_no_body_bytes() {
        let out = run(
            b"Content-Type: text/html\n\n<html>",
            true,
            BodyFraming::Chunked,
            100,
            100,
        )
        .unwrap();
        assert_eq!(
            text(&out),
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
    }

    #[test]
    fn a_304_has_no_framing_and_no_body() {
        let out = run(
            b"Status: 304\nETag: \"x\"\n\nzzz",
            false,
            BodyFraming::Chunked,
            100,
            100,
        )
        .unwrap();
        assert_eq!(
            text(&out),
            "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n"
        );
    }

    #[test]
    fn close_framing_says_connection_close_and_passes_bytes_as_they_are() {
        let out = run(b"Content-Type: a/b\n\nxyz", false, BodyFraming::Close, 2, 7).unwrap();
        assert_eq!(
            text(&out),
            "HTTP/1.1 200 OK\r\nContent-Type: a/b\r\nConnection: close\r\n\r\nxyz"
        );
    }

    #[test]
    fn close_after_says_connection_close_with_a_length_too() {
        let mut t = Translator::new(Limits::default());
        t.start(false, BodyFraming::Chunked);
        t.close_after();
        let mut buf = [0u8; 256];
        let (_, w) = t.feed(b"Content-Length: 2\n\nok", &mut buf).unwrap();
        assert_eq!(
            text(&buf[..w]),
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
        );
    }

    #[test]
    fn a_refused_head_is_an_error() {
        let e = run(b"Bad Name: x\n\n", false, BodyFraming::Chunked, 100, 100).unwrap_err();
        assert!(matches!(e, Error::Head(_)), "{e:?}");
        let big = vec![b'a'; 20_000];
        let e = run(&big, false, BodyFraming::Chunked, 1000, 100).unwrap_err();
        assert_eq!(e, Error::Head(crate::cgi::Error::HeadTooLarge));
    }

    #[test]
    fn output_after_the_end_is_refused() {
        let mut t = Translator::new(Limits::default());
        t.start(false, BodyFraming::Chunked);
        let mut buf = [0u8; 128];
        t.feed(b"A: b\n\n", &mut buf).unwrap();
        t.finish(&mut buf).unwrap();
        assert_eq!(t.feed(b"x", &mut buf), Err(Error::AfterEnd));
    }

    /// Decodes a chunked body (for the property below, and the FastCGI gateway's).
    pub(crate) fn dechunk(mut b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let line = b.iter().position(|&c| c == b'\r').unwrap();
            let n = usize::from_str_radix(std::str::from_utf8(&b[..line]).unwrap(), 16).unwrap();
            b = &b[line + 2..];
            if n == 0 {
                assert_eq!(b, b"\r\n");
                return out;
            }
            out.extend_from_slice(&b[..n]);
            assert_eq!(&b[n..n + 2], b"\r\n");
            b = &b[n + 2..];
        }
    }

    proptest! {
        /// Cut anywhere, read through any buffer size, the response carries the same head and,
        /// once de-chunked, the program's body byte for byte.
        #[test]
        fn any_cuts_and_buffer_sizes_give_the_same_response(
            body in proptest::collection::vec(any::<u8>(), 0..5000),
            cut in 1usize..700,
            room in 1usize..3000,
            length in any::<bool>(),
        ) {
            let mut input = b"Content-Type: application/octet-stream\r\n".to_vec();
            if length {
                input.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
            }
            input.extend_from_slice(b"\r\n");
            input.extend_from_slice(&body);
            let out = run(&input, false, BodyFraming::Chunked, cut, room).unwrap();
            let whole = run(&input, false, BodyFraming::Chunked, input.len(), 1 << 16).unwrap();
            let end = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            let wend = whole.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            prop_assert_eq!(&out[..end], &whole[..wend]);
            let got = if length { out[end..].to_vec() } else { dechunk(&out[end..]) };
            prop_assert_eq!(got, body);
        }
    }
}
