//! The bytes read from one side of an HTTP session (the client's requests, or a server's
//! responses) and not yet forwarded: [`Input`] holds them in a pooled buffer with every position
//! into it, and [`Filled`] says what a read gave.

use std::io;

use quill_core::http1;

use crate::net::{Ready, Stream};
use crate::proxy::copy::{Buf, Pools, BUF_SIZE};

/// Bytes read from one side and not yet forwarded: `[start, fwd)` was forwarded or passed over
/// (kept for a replay: a request's head is at `start` while its exchange may still go again; a
/// server's head that its rewrite replaced in place), `[fwd, fed)`
/// belongs to the message and waits to be written, `[fed, end)` is not yet parsed or fed to the
/// body decoder; `[fed, scanned)` was already searched for the end of a head.
///
/// Every position into the buffer lives here, and [`Input::fill`] is the one place that moves
/// bytes (its compaction): it moves every position with them. A position kept anywhere else
/// would point at other bytes after a compaction (the crash of a head straddling the buffer's
/// end, E1 in docs/design.md#positions-move-with-the-buffer), so none is.
#[derive(Debug, Default)]
pub(super) struct Input {
    pub(super) buf: Option<Buf>,
    pub(super) start: u32,
    pub(super) fwd: u32,
    pub(super) fed: u32,
    scanned: u32,
    pub(super) end: u32,
}

/// What a read into an [`Input`] gave.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Filled {
    Data,
    /// Nothing to read now (wait for the next edge).
    Nothing,
    Eof,
    /// The buffer holds a whole unparsed message start: no room to read.
    Full,
}

impl Input {
    pub(super) fn unparsed(&self) -> &[u8] {
        match &self.buf {
            Some(b) => &b[self.fed as usize..self.end as usize],
            None => &[],
        }
    }

    pub(super) fn pending(&self) -> &[u8] {
        match &self.buf {
            Some(b) => &b[self.fwd as usize..self.fed as usize],
            None => &[],
        }
    }

    pub(super) fn has_unparsed(&self) -> bool {
        self.fed < self.end
    }

    /// Forgets the message handled so far (no replay any more); gives the buffer back when
    /// nothing is left in it.
    pub(super) fn settle(&mut self, pools: &mut Pools) {
        self.start = self.fwd;
        if self.fwd == self.end {
            self.start = 0;
            self.fwd = 0;
            self.fed = 0;
            self.scanned = 0;
            self.end = 0;
            if let Some(b) = self.buf.take() {
                pools.give_buffer(b);
            }
        }
    }

    pub(super) fn release(&mut self, pools: &mut Pools) {
        if let Some(b) = self.buf.take() {
            pools.give_buffer(b);
        }
        *self = Input::default();
    }

    /// Reads what the socket has into the free end of the buffer (moving the kept bytes to its
    /// start first when the end is reached). A short read clears the readable flag: the queue
    /// is drained and a new edge comes with new data.
    ///
    /// Half the calls find the socket not readable: that answer is inlined into the caller, the
    /// read itself is not (a call's set-up and return cost about as much as the answer).
    #[inline(always)]
    pub(super) fn fill(
        &mut self,
        src: &Stream,
        sr: &mut Ready,
        pools: &mut Pools,
    ) -> io::Result<Filled> {
        if !sr.readable {
            return Ok(Filled::Nothing);
        }
        self.read_from(src, sr, pools)
    }

    /// [`Input::fill`] of a readable socket.
    #[inline(never)]
    fn read_from(&mut self, src: &Stream, sr: &mut Ready, pools: &mut Pools) -> io::Result<Filled> {
        let buf = self.buf.get_or_insert_with(|| pools.buffer());
        if self.end as usize == BUF_SIZE {
            if self.start == 0 {
                return Ok(Filled::Full);
            }
            let s = self.start as usize;
            buf.copy_within(s..BUF_SIZE, 0);
            self.fwd -= self.start;
            self.fed -= self.start;
            self.scanned = self.scanned.saturating_sub(self.start);
            self.end -= self.start;
            self.start = 0;
        }
        let space = BUF_SIZE - self.end as usize;
        match src.read(&mut buf[self.end as usize..]) {
            Ok(0) => {
                if sr.error {
                    return Err(io::ErrorKind::ConnectionReset.into());
                }
                Ok(Filled::Eof)
            }
            Ok(n) => {
                self.end += n as u32;
                if n < space && !sr.read_closed && !sr.error && !src.ended() {
                    sr.readable = false;
                }
                Ok(Filled::Data)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                sr.readable = false;
                if self.end == 0 {
                    // Nothing held and nothing came: no buffer while waiting (a server that
                    // takes its time to answer, a client that trickles, cost none).
                    if let Some(b) = self.buf.take() {
                        pools.give_buffer(b);
                    }
                }
                Ok(Filled::Nothing)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Filled::Nothing),
            Err(e) => Err(e),
        }
    }

    /// Whether the unparsed bytes hold the end of a head (a blank line), looking only at bytes
    /// that arrived since the last look: a head is parsed once, when whole, however it trickles
    /// in. When one is found the next look starts over at `fed` (past the head once it is
    /// parsed: the next pipelined head may be in the buffer already).
    pub(super) fn head_ends(&mut self) -> bool {
        let Some(b) = &self.buf else { return false };
        let from = self.scanned.max(self.fed).saturating_sub(2).max(self.fed) as usize;
        let bytes = b.get(from..self.end as usize).unwrap_or_default();
        let found = http1::has_blank_line(bytes);
        self.scanned = if found { 0 } else { self.end };
        found
    }

    /// The bytes kept from `start` (a request's head while its exchange may go again).
    pub(super) fn kept(&self) -> &[u8] {
        match &self.buf {
            Some(b) => &b[self.start as usize..self.end as usize],
            None => &[],
        }
    }

    /// Goes back to `start` (a request sent again from its head).
    pub(super) fn rewind(&mut self) {
        self.fwd = self.start;
        self.fed = self.start;
    }
}
