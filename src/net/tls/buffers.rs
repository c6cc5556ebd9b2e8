//! The record buffers of a worker's TLS connections: a thread-local pool each connection lends
//! from only while a buffer holds bytes (so an idle connection owns none), and [`Span`], bytes
//! held in one lent buffer. The churn count (buffers freed, handshakes finished) tells the
//! worker when a burst is over and its heap worth trimming.

use std::cell::{Cell, RefCell};
use std::io;

use super::super::Stream;

/// Size of a pooled record buffer: one record of the largest size on the wire (16 KiB of
/// plaintext, 2 KiB of expansion TLS 1.2 allows, the header) fits.
pub(super) const TLS_BUF: usize = 16 * 1024 + 2048 + 5 + 123;
/// Free record buffers a worker keeps (the rest of a burst's go back to the heap).
const POOL_MAX: usize = 64;
/// Free record buffers a worker keeps once a burst is over.
const POOL_KEEP: usize = 4;

thread_local! {
    /// This worker's free record buffers, each `TLS_BUF` long.
    static POOL: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
    /// Buffers freed because the pool was full, plus handshakes finished, since the worker's
    /// pools last looked ([`take_churn`]): a burst of either leaves free memory in the heap for
    /// the worker's trim.
    static CHURN: Cell<usize> = const { Cell::new(0) };
}

/// A record buffer from this worker's pool (or a new one).
pub(crate) fn lend() -> Box<[u8]> {
    POOL.with_borrow_mut(Vec::pop)
        .unwrap_or_else(|| vec![0u8; TLS_BUF].into_boxed_slice())
}

/// `buf` made `len` long, its first `keep` bytes kept (for the rare record or handshake message
/// larger than a pooled buffer).
pub(super) fn grow(buf: &mut Box<[u8]>, keep: usize, len: usize) {
    let mut bigger = vec![0u8; len].into_boxed_slice();
    bigger[..keep].copy_from_slice(&buf[..keep]);
    let mut old = std::mem::replace(buf, bigger);
    give_back(&mut old);
}

/// Gives `buf` back (when it is the pool's size: one grown for a large handshake message is
/// freed). `buf` is left empty, holding no memory.
pub(crate) fn give_back(buf: &mut Box<[u8]>) {
    let buf = std::mem::take(buf);
    if buf.len() != TLS_BUF {
        if !buf.is_empty() {
            churn(1);
        }
        return;
    }
    POOL.with_borrow_mut(|pool| {
        if pool.len() < POOL_MAX {
            pool.push(buf);
        } else {
            churn(1);
        }
    });
}

/// Counts `n` buffers freed or handshakes finished (see [`take_churn`]).
pub(super) fn churn(n: usize) {
    CHURN.with(|c| c.set(c.get().saturating_add(n)));
}

/// Record buffers freed and handshakes finished on this worker since the last call (for
/// `Pools::after_turn`, which trims the heap once such a burst is over).
pub(crate) fn take_churn() -> usize {
    CHURN.with(|c| c.replace(0))
}

/// Keeps a few of this worker's free record buffers (after a burst: each connection that
/// becomes busy again takes one only while it holds bytes).
pub(crate) fn trim_pool() {
    POOL.with_borrow_mut(|pool| {
        pool.truncate(POOL_KEEP);
        pool.shrink_to_fit();
    });
}

/// Bytes held in a pooled buffer: `buf[start..end]`. Holds no memory while empty (once
/// released).
#[derive(Default)]
pub(super) struct Span {
    buf: Box<[u8]>,
    pub(super) start: usize,
    pub(super) end: usize,
}

impl Span {
    pub(super) fn len(&self) -> usize {
        self.end - self.start
    }

    pub(super) fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Room for `need` more bytes after the held ones (lent, moved down or grown as needed).
    pub(super) fn room(&mut self, need: usize) -> &mut [u8] {
        if self.buf.is_empty() {
            self.buf = lend();
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        if self.buf.len() - self.end < need && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() - self.end < need {
            grow(&mut self.buf, self.end, self.end + need);
        }
        &mut self.buf[self.end..]
    }

    pub(super) fn push(&mut self, bytes: &[u8]) {
        self.room(bytes.len())[..bytes.len()].copy_from_slice(bytes);
        self.end += bytes.len();
    }

    /// Copies held bytes into `out`: how many.
    pub(super) fn take(&mut self, out: &mut [u8]) -> usize {
        let n = out.len().min(self.len());
        out[..n].copy_from_slice(&self.buf[self.start..self.start + n]);
        self.start += n;
        self.release();
        n
    }

    /// Gives the buffer back when it holds nothing.
    pub(super) fn release(&mut self) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            if !self.buf.is_empty() {
                give_back(&mut self.buf);
            }
        }
    }

    /// Writes the held bytes to `sock` as far as it takes them: Ok(true) when none is left.
    pub(super) fn send(&mut self, sock: &Stream) -> io::Result<bool> {
        while self.start < self.end {
            match sock.write(self.bytes()) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.start += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.release();
        Ok(true)
    }
}

/// Records are sealed at the end of the held bytes (from the caller's plaintext, or copied in and
/// encrypted there).
impl quill_core::tls_records::Sink for Span {
    fn room(&mut self, n: usize) -> &mut [u8] {
        Span::room(self, n)
    }

    fn filled(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }
}
