//! Body framing: how the end of a message body is found (RFC 9112 §6.3), and a decoder that is
//! fed the bytes after the head and says how many of them belong to the message.
//!
//! The decoder never copies or re-chunks: the caller forwards the bytes it was told belong to the
//! body exactly as they came, chunk-size lines and trailers included. A chunked body is checked
//! on the way (hex sizes of at most [`MAX_CHUNK_SIZE_DIGITS`] digits, extensions, every CRLF,
//! trailer field syntax, bounded line lengths), so a message that could be read two ways is
//! refused before its end is forwarded.

use super::grammar::is_tchar;
use super::Error;

/// How the end of a body is found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body (a request without Content-Length or Transfer-Encoding; a response to HEAD; 1xx,
    /// 204, 304).
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunks, the last one empty, then trailer fields and a blank line.
    Chunked,
    /// Everything until the server closes the connection (responses only).
    Close,
}

/// Longest chunk-size line (size, whitespace, extensions, CRLF): longer is
/// [`Error::BadChunkLine`]. This bounds the extensions, which Quill passes on as they came: 1 KiB
/// is far more than any sender uses and short enough that no server truncates them differently.
pub const MAX_CHUNK_LINE: usize = 1024;
/// Most hex digits of a chunk size, leading zeros included: a size is at most 16 significant
/// digits (it fits in 64 bits) and a few zeros of padding; more is [`Error::BadChunkSize`]
/// (a long zero-padded size is what a server with a shorter field may read differently).
pub const MAX_CHUNK_SIZE_DIGITS: u32 = 20;
/// Longest trailer section (fields and the final CRLF): longer is [`Error::BadTrailer`].
pub const MAX_TRAILERS: usize = 16 * 1024;

/// What one [`Body::feed`] call found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fed {
    /// Bytes of the input that belong to the message (forward them as they are); the rest, if
    /// any, is the next message.
    pub used: usize,
    /// Payload bytes among them (chunk framing and trailers excluded).
    pub payload: u64,
    /// The body is complete.
    pub done: bool,
}

/// A body being received: feed it bytes as they arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Body {
    state: State,
    /// Bytes of the current chunk-size line, or of the trailer section.
    line: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Done,
    Failed(Error),
    /// Bytes left.
    Length(u64),
    Close,
    /// Hex digits of a chunk size (`digits` read so far).
    Size {
        size: u64,
        digits: u32,
    },
    /// Spaces after the size, before a `;`.
    SizeSpace(u64),
    /// A chunk extension, up to the CR.
    Extension(u64),
    /// The CR of the size line passed.
    SizeLf(u64),
    /// Payload bytes left in the chunk.
    Data(u64),
    /// The CR after a chunk's payload.
    DataCr,
    DataLf,
    /// At the start of a trailer line, or of the final blank line.
    TrailerStart,
    TrailerName,
    TrailerValue,
    TrailerLf,
    /// The CR of the final blank line passed.
    FinalLf,
}

impl Body {
    pub fn new(framing: Framing) -> Body {
        let state = match framing {
            Framing::None | Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::Size { size: 0, digits: 0 },
            Framing::Close => State::Close,
        };
        Body { state, line: 0 }
    }

    /// Payload bytes left in the current chunk, when the next byte fed is chunk data (a caller
    /// that keeps the payload alone feeds that many at once, and the framing byte by byte).
    pub fn data_left(&self) -> Option<u64> {
        match self.state {
            State::Data(left) => Some(left),
            _ => None,
        }
    }

    /// Whether the body has ended.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The peer closed the connection: Ok if that ends the body (or it had already ended),
    /// [`Error::Truncated`] if it cuts it short.
    pub fn finish(&self) -> Result<(), Error> {
        match self.state {
            State::Done | State::Close => Ok(()),
            State::Failed(e) => Err(e),
            _ => Err(Error::Truncated),
        }
    }

    /// Takes the bytes of `data` that belong to the body. Once an error is returned, every
    /// later call returns it again.
    pub fn feed(&mut self, data: &[u8]) -> Result<Fed, Error> {
        match self.state {
            State::Failed(e) => Err(e),
            State::Done => Ok(Fed {
                used: 0,
                payload: 0,
                done: true,
            }),
            State::Close => Ok(Fed {
                used: data.len(),
                payload: data.len() as u64,
                done: false,
            }),
            State::Length(left) => {
                let take = left.min(data.len() as u64);
                let left = left - take;
                self.state = if left == 0 {
                    State::Done
                } else {
                    State::Length(left)
                };
                Ok(Fed {
                    used: take as usize,
                    payload: take,
                    done: left == 0,
                })
            }
            _ => self
                .chunked(data)
                .inspect_err(|&e| self.state = State::Failed(e)),
        }
    }

    fn chunked(&mut self, data: &[u8]) -> Result<Fed, Error> {
        let mut i = 0;
        let mut payload = 0u64;
        while i < data.len() {
            if let State::Data(left) = self.state {
                let take = left.min((data.len() - i) as u64);
                payload += take;
                i += take as usize;
                self.state = match left - take {
                    0 => State::DataCr,
                    left => State::Data(left),
                };
                continue;
            }
            let b = data[i];
            i += 1;
            self.state = self.step(b)?;
            if self.state == State::Done {
                break;
            }
        }
        Ok(Fed {
            used: i,
            payload,
            done: self.state == State::Done,
        })
    }

    /// The state after byte `b` (anything but payload).
    fn step(&mut self, b: u8) -> Result<State, Error> {
        let in_size_line = matches!(
            self.state,
            State::Size { .. } | State::SizeSpace(_) | State::Extension(_) | State::SizeLf(_)
        );
        self.line += 1;
        if in_size_line && self.line > MAX_CHUNK_LINE {
            return Err(Error::BadChunkLine);
        }
        if !in_size_line && self.line > MAX_TRAILERS {
            return Err(Error::BadTrailer);
        }
        Ok(match (self.state, b) {
            (State::Size { size, digits }, _) if b.is_ascii_hexdigit() => {
                if size >> 60 != 0 || digits >= MAX_CHUNK_SIZE_DIGITS {
                    return Err(Error::BadChunkSize);
                }
                let d = u64::from((b as char).to_digit(16).unwrap_or(0));
                State::Size {
                    size: size << 4 | d,
                    digits: digits + 1,
                }
            }
            (State::Size { digits: 0, .. }, _) => return Err(Error::BadChunkSize),
            (State::Size { size, .. }, b';') | (State::SizeSpace(size), b';') => {
                State::Extension(size)
            }
            (State::Size { size, .. }, b' ' | b'\t') | (State::SizeSpace(size), b' ' | b'\t') => {
                State::SizeSpace(size)
            }
            (State::Size { size, .. }, b'\r') | (State::Extension(size), b'\r') => {
                State::SizeLf(size)
            }
            (State::Size { .. }, b'\n') => return Err(Error::BadChunkLine),
            (State::Size { .. }, _) => return Err(Error::BadChunkSize),
            (State::SizeSpace(_), _) => return Err(Error::BadChunkLine),
            (State::Extension(size), b'\t' | b' '..=b'~' | 0x80..) => State::Extension(size),
            (State::Extension(_), _) => return Err(Error::BadChunkLine),
            (State::SizeLf(size), b'\n') => {
                self.line = 0;
                match size {
                    0 => State::TrailerStart,
                    n => State::Data(n),
                }
            }
            (State::SizeLf(_), _) => return Err(Error::BadChunkLine),
            (State::DataCr, b'\r') => State::DataLf,
            (State::DataLf, b'\n') => {
                self.line = 0;
                State::Size { size: 0, digits: 0 }
            }
            (State::DataCr | State::DataLf, _) => return Err(Error::BadChunkLine),
            (State::TrailerStart, b'\r') => State::FinalLf,
            (State::TrailerStart | State::TrailerName, _) if is_tchar(b) => State::TrailerName,
            (State::TrailerName, b':') => State::TrailerValue,
            (State::TrailerValue, b'\t' | b' '..=b'~' | 0x80..) => State::TrailerValue,
            (State::TrailerValue, b'\r') => State::TrailerLf,
            (State::TrailerLf, b'\n') => State::TrailerStart,
            (State::FinalLf, b'\n') => State::Done,
            _ => return Err(Error::BadTrailer),
        })
    }
}
