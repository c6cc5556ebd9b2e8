//! One direction of an HTTP exchange ([`Leg`]): a rewritten head (or Quill's own answer) to
//! write first, then the body bytes waiting in the source's [`Input`], then the rest of the body
//! ([`BodyRest`]) straight from the socket or through the chunk decoder.

use std::io::{self, IoSlice};

use quill_core::h2::Written;
use quill_core::http1::{self, Body};

use super::input::{Filled, Input};
use crate::net::{Ready, Stream};
use crate::proxy::copy::{Buf, Direction, Failure, Pools};

/// What is left of a message's body once the head and the bytes read with it are written.
#[derive(Debug)]
pub(super) enum BodyRest {
    /// Nothing more: the message is complete once written.
    Done,
    /// Bytes straight from the socket (a `Content-Length` rest, or until EOF).
    Raw(Direction),
    /// Chunked: read into the source's [`Input`], checked by the decoder, written as they came.
    Chunked(Body),
}

/// One direction of an exchange: a rewritten head (or a canned reply) to write first, then the
/// body bytes waiting in the source's input, then the [`BodyRest`].
#[derive(Debug)]
pub(super) struct Leg {
    out: Option<Buf>,
    ostart: u32,
    oend: u32,
    /// The head in `out` is a header block, for an HTTP/2 stream (see [`Stream::note_head`]),
    /// until its first byte is written.
    written: Option<Written>,
    pub(super) rest: BodyRest,
    /// Bytes written to the destination.
    pub(super) bytes: u64,
    /// Payload bytes of a chunked body (for `max_body`).
    pub(super) payload: u64,
}

/// Where a leg is after a pump.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum LegState {
    Complete,
    Blocked,
    /// Stopped on its budget with the source still readable.
    Yielded,
}

/// Why a leg stopped for good.
#[derive(Debug)]
pub(super) enum LegError {
    /// Reading the source failed (logged at debug where the leg's owner drops it).
    Read(io::Error),
    /// Writing the destination failed (logged at debug where the leg's owner drops it).
    Write(io::Error),
    /// The body was malformed (a chunk line, a trailer).
    Body(http1::Error),
    /// The source closed before the end of the body.
    Truncated,
}

impl Leg {
    /// One side of a tunnel: everything the source sends, until it closes.
    pub(super) fn tunnel() -> Leg {
        Leg::in_input(BodyRest::Raw(Direction::default()))
    }

    /// A message with nothing of its own to write first: its head, if any, waits in the
    /// source's input with the body bytes read after it.
    pub(super) fn in_input(rest: BodyRest) -> Leg {
        Leg {
            out: None,
            ostart: 0,
            oend: 0,
            written: None,
            rest,
            bytes: 0,
            payload: 0,
        }
    }

    pub(super) fn is_raw(&self) -> bool {
        matches!(self.rest, BodyRest::Raw(_))
    }

    pub(super) fn new(out: Buf, len: usize, rest: BodyRest) -> Leg {
        Leg {
            out: Some(out),
            ostart: 0,
            oend: len as u32,
            written: None,
            rest,
            bytes: 0,
            payload: 0,
        }
    }

    /// The head in `out` is the header block `written` describes.
    pub(super) fn noting(mut self, written: Option<Written>) -> Leg {
        self.written = written;
        self
    }

    #[inline]
    pub(super) fn release(&mut self, pools: &mut Pools) {
        if let Some(b) = self.out.take() {
            pools.give_buffer(b);
        }
        if let BodyRest::Raw(d) = &mut self.rest {
            d.release(pools);
        }
    }

    /// Writes the head and the input's pending bytes, in one `writev` when both are there (a
    /// response head that fit in its server's head's place is among the pending bytes).
    /// Ok(true) when all is written.
    pub(super) fn flush(
        &mut self,
        input: &mut Input,
        dst: &Stream,
        dr: &mut Ready,
        pools: &mut Pools,
    ) -> io::Result<bool> {
        loop {
            let head = match &self.out {
                Some(b) => &b[self.ostart as usize..self.oend as usize],
                None => &[][..],
            };
            let body = input.pending();
            if head.is_empty() && body.is_empty() {
                return self.finish_write(dst, dr, pools);
            }
            if !dr.writable {
                return Ok(false);
            }
            if let Some(w) = self.written.take().filter(|_| self.ostart == 0) {
                dst.note_head(w);
            }
            let want = head.len() + body.len();
            // One slice alone goes by `send`: `writev` costs the kernel an iovec import and
            // the VFS layer on every request whose head carries no body.
            let wrote = if body.is_empty() {
                dst.write(head)
            } else if head.is_empty() {
                dst.write(body)
            } else {
                dst.write_vectored(&[IoSlice::new(head), IoSlice::new(body)])
            };
            let n = match wrote {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    dr.writable = false;
                    return Ok(false);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.bytes += n as u64;
            let from_head = n.min(head.len());
            self.ostart += from_head as u32;
            input.fwd += (n - from_head) as u32;
            if n < want {
                dr.writable = false;
                return Ok(false);
            }
            // All of it went (nearly always in one call): done without looking again.
            return self.finish_write(dst, dr, pools);
        }
    }

    /// The head and the pending bytes are all written: Ok(true) once a TLS stream's records of
    /// them are out too (what the stream took counts as written only then); the head's buffer
    /// goes back to the pool.
    #[inline(always)]
    fn finish_write(
        &mut self,
        dst: &Stream,
        dr: &mut Ready,
        pools: &mut Pools,
    ) -> io::Result<bool> {
        if !dst.flush_backlog(dr)? {
            return Ok(false);
        }
        if let Some(b) = self.out.take() {
            pools.give_buffer(b);
        }
        Ok(true)
    }

    /// Moves the leg on as far as the sockets allow.
    pub(super) fn pump(
        &mut self,
        input: &mut Input,
        src: &Stream,
        sr: &mut Ready,
        dst: &Stream,
        dr: &mut Ready,
        pools: &mut Pools,
    ) -> Result<LegState, LegError> {
        for _ in 0..64 {
            if !self.flush(input, dst, dr, pools).map_err(LegError::Write)? {
                return Ok(LegState::Blocked);
            }
            match &mut self.rest {
                BodyRest::Done => return Ok(LegState::Complete),
                BodyRest::Raw(d) => {
                    let before = d.bytes;
                    let r = d.pump(false, src, dst, sr, dr, pools);
                    self.bytes += d.bytes - before;
                    match r {
                        Ok(_) => {}
                        Err(Failure::Read(e)) => return Err(LegError::Read(e)),
                        Err(Failure::Write(e)) => return Err(LegError::Write(e)),
                    }
                    if d.is_complete() {
                        d.release(pools);
                        self.rest = BodyRest::Done;
                        return Ok(LegState::Complete);
                    }
                    if d.is_done() {
                        // EOF: the end of a close-delimited body, or a cut one.
                        let limited = d.is_limited();
                        d.release(pools);
                        self.rest = BodyRest::Done;
                        return if limited {
                            Err(LegError::Truncated)
                        } else {
                            Ok(LegState::Complete)
                        };
                    }
                    return Ok(if d.yielded {
                        LegState::Yielded
                    } else {
                        LegState::Blocked
                    });
                }
                BodyRest::Chunked(body) => {
                    if body.is_done() {
                        self.rest = BodyRest::Done;
                        continue;
                    }
                    if input.has_unparsed() {
                        let fed = body.feed(input.unparsed()).map_err(LegError::Body)?;
                        input.fed += fed.used as u32;
                        self.payload += fed.payload;
                        continue;
                    }
                    // Everything read was written: the buffer can start over.
                    input.settle(pools);
                    match input.fill(src, sr, pools).map_err(LegError::Read)? {
                        Filled::Data => {}
                        Filled::Nothing => return Ok(LegState::Blocked),
                        Filled::Eof => return Err(LegError::Truncated),
                        Filled::Full => return Err(LegError::Body(http1::Error::BadChunkLine)),
                    }
                }
            }
        }
        Ok(LegState::Yielded)
    }
}
