//! Sending a file response (docs/web.md#how-a-file-goes-out): the head, then the body's segments
//! (the file's bytes, whole or by range, and a multipart response's part heads), in as few
//! system calls as the socket allows.
//!
//! - A small file is in memory: head and body leave in one `writev`.
//! - A larger file on a plain socket: the head with `MSG_MORE` (so the kernel sends it in the
//!   same segment as the first file bytes, without `TCP_CORK`'s two extra calls), then
//!   `sendfile` from the cached descriptor: no copy through user space.
//! - Over TLS (no kTLS here): the file is read with `pread` into a pooled buffer and written
//!   through the record layer.

use std::io::{self, IoSlice};
use std::os::fd::AsFd;
use std::sync::Arc;

use quill_core::sys as sysfile;

use super::cache::{Body, Rep};
use crate::net::{Ready, Stream};
use crate::proxy::copy::{Buf, Pools, BUF_SIZE};

/// The most body bytes one call of [`Sending::pump`] sends before it yields the worker to the
/// other sessions (one `sendfile` call takes at most this).
const TURN_BYTES: u64 = 1 << 20;

/// One piece of a body.
#[derive(Debug, Clone, Copy)]
enum Seg {
    /// The representation's bytes `from..to`.
    File { from: u64, to: u64 },
    /// Bytes `from..to` of `extra` (multipart part heads and the closing delimiter).
    Extra { from: u32, to: u32 },
}

/// A response being sent.
#[derive(Debug)]
pub(crate) struct Sending {
    head: Option<Buf>,
    hstart: u32,
    hend: u32,
    rep: Option<Arc<Rep>>,
    segs: Vec<Seg>,
    extra: Vec<u8>,
    /// The segment being sent.
    at: usize,
    /// Bytes written to the client, head included.
    pub sent: u64,
    /// A HEAD request: the body's segments are not sent.
    head_only: bool,
    /// The file range last found in the page cache (or read into it): sends stay inside it,
    /// and a send past it asks the kernel first (`cachestat`).
    warm: (u64, u64),
    /// The range found not cached: the session has it read off the worker
    /// (`web::readahead`) before the send goes on.
    cold: Option<(u64, u64)>,
    /// The next range, not cached, to read ahead without waiting.
    prefetch: Option<(u64, u64)>,
}

/// Where a send is after a pump.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    Complete,
    /// The socket is full: wait until it is writable.
    Blocked,
    /// Stopped on its budget with the socket still writable: drive it again this turn.
    Yielded,
    /// The next file range is not in the page cache: [`Sending::cold_range`] gives it, to be
    /// read off the worker; [`Sending::read_done`] then lets the send go on.
    Cold,
}

impl Sending {
    /// A response whose head is the first `len` bytes of `head`, with no body yet.
    pub(crate) fn new(head: Buf, len: usize) -> Sending {
        Sending {
            head: Some(head),
            hstart: 0,
            hend: len as u32,
            rep: None,
            segs: Vec::new(),
            extra: Vec::new(),
            at: 0,
            sent: 0,
            head_only: false,
            warm: (0, 0),
            cold: None,
            prefetch: None,
        }
    }

    /// The representation whose bytes are sent.
    pub(crate) fn rep(&self) -> Option<&Arc<Rep>> {
        self.rep.as_ref()
    }

    /// The range [`Sent::Cold`] stopped on: (offset, length) in the file.
    pub(crate) fn cold_range(&self) -> Option<(u64, u64)> {
        self.cold
    }

    /// The cold range is read into the page cache: the send may go on through it.
    pub(crate) fn read_done(&mut self) {
        if let Some(range) = self.cold.take() {
            self.warm = (range.0, range.0 + range.1);
        }
    }

    /// Whether the current segment's next bytes must be read into the page cache first: a file
    /// segment starting outside the warm range whose next [`TURN_BYTES`] are not all cached
    /// (`cachestat` counts the pages present) or whose last page is still being read
    /// (`preadv2` with `RWF_NOWAIT` of its last byte: a page under I/O is present but not yet
    /// readable, and `sendfile` would wait for it). A kernel that cannot tell counts as
    /// cached. When the range is warm and the one after it is not all present, that one is
    /// noted for reading ahead ([`Sending::take_prefetch`]).
    fn next_is_cold(&mut self) -> bool {
        let Some(&Seg::File { from, to }) = self.segs.get(self.at) else {
            return false;
        };
        if self.warm.0 <= from && from < self.warm.1 {
            return false;
        }
        let len = (to - from).min(TURN_BYTES);
        let Some(rep) = self.rep.clone() else {
            return false;
        };
        let Body::File(fd) = &rep.body else {
            return false;
        };
        let present = !matches!(sysfile::is_cached(fd.as_fd(), from, len), Ok(Some(false)));
        let mut last = [0u8; 1];
        let readable = present
            && !matches!(
                sysfile::pread_nowait(fd.as_fd(), &mut last, from + len - 1),
                Ok(None)
            );
        if !readable {
            self.cold = Some((from, len));
            return true;
        }
        self.warm = (from, from + len);
        let next = (to - from - len).min(TURN_BYTES);
        if next > 0
            && matches!(
                sysfile::is_cached(fd.as_fd(), from + len, next),
                Ok(Some(false))
            )
        {
            self.prefetch = Some((from + len, next));
        }
        false
    }

    /// The range after the one being sent, found not cached: the session has it read ahead off
    /// the worker, without waiting for it.
    pub(crate) fn take_prefetch(&mut self) -> Option<(u64, u64)> {
        self.prefetch.take()
    }

    /// Sends the head only (a HEAD request): segments added later are left out.
    pub(crate) fn head_only(&mut self) {
        self.head_only = true;
    }

    /// The body comes from this representation.
    pub(crate) fn with_rep(mut self, rep: Arc<Rep>) -> Sending {
        self.rep = Some(rep);
        self
    }

    /// Adds the representation's bytes `from..to` to the body.
    pub(crate) fn file(&mut self, from: u64, to: u64) {
        if from < to && !self.head_only {
            self.segs.push(Seg::File { from, to });
        }
    }

    /// Adds bytes of Quill's own (a part head) to the body.
    pub(crate) fn extra(&mut self, bytes: &[u8]) {
        if self.head_only {
            return;
        }
        let from = self.extra.len() as u32;
        self.extra.extend_from_slice(bytes);
        self.segs.push(Seg::Extra {
            from,
            to: self.extra.len() as u32,
        });
    }

    /// Gives the pooled buffers back.
    pub(crate) fn release(&mut self, pools: &mut Pools) {
        if let Some(b) = self.head.take() {
            pools.give_buffer(b);
        }
    }

    /// Sends as much as the socket takes, up to [`TURN_BYTES`] of body.
    pub(crate) fn pump(
        &mut self,
        dst: &Stream,
        ready: &mut Ready,
        pools: &mut Pools,
    ) -> io::Result<Sent> {
        let budget = self.sent + TURN_BYTES;
        loop {
            if self.hstart == self.hend && self.at == self.segs.len() {
                if !dst.flush_backlog(ready)? {
                    return Ok(Sent::Blocked);
                }
                self.release(pools);
                return Ok(Sent::Complete);
            }
            if !ready.writable {
                return Ok(Sent::Blocked);
            }
            if self.sent >= budget {
                return Ok(Sent::Yielded);
            }
            let r = if self.hstart < self.hend {
                self.send_head(dst)
            } else if self.next_is_cold() {
                return Ok(Sent::Cold);
            } else {
                self.send_seg(dst, pools)
            };
            match r {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready.writable = false;
                    return Ok(Sent::Blocked);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes the rest of the head: with the first segment when it is in memory (one
    /// `writev`), else with `MSG_MORE` ahead of a `sendfile`.
    fn send_head(&mut self, dst: &Stream) -> io::Result<usize> {
        let head = match &self.head {
            Some(b) => &b[self.hstart as usize..self.hend as usize],
            None => &[][..],
        };
        let next = self.segs.get(self.at).copied();
        let mem = next.and_then(|s| self.mem_of(s));
        let head_len = head.len();
        let (n, from_body) = match (mem, next) {
            (Some(body), _) if !body.is_empty() => {
                let n = dst.write_vectored(&[IoSlice::new(head), IoSlice::new(body)])?;
                (n, n.saturating_sub(head_len))
            }
            (_, Some(Seg::File { .. })) if dst.can_splice() => (dst.write_last(head)?, 0),
            _ => (dst.write(head)?, 0),
        };
        if from_body > 0 {
            self.advance_seg(from_body as u64);
        }
        self.hstart += n.min(head_len) as u32;
        self.sent += n as u64;
        Ok(n)
    }

    /// The bytes of a segment when they are in memory.
    fn mem_of(&self, s: Seg) -> Option<&[u8]> {
        match s {
            Seg::Extra { from, to } => Some(&self.extra[from as usize..to as usize]),
            Seg::File { from, to } => match &self.rep.as_deref()?.body {
                Body::Bytes(b) => Some(&b[from as usize..to as usize]),
                Body::File(_) => None,
            },
        }
    }

    /// Moves the current segment on by `n` bytes (to the next one when it is done).
    fn advance_seg(&mut self, n: u64) {
        let Some(seg) = self.segs.get_mut(self.at) else {
            return;
        };
        let done = match seg {
            Seg::File { from, to } => {
                *from += n;
                from >= to
            }
            Seg::Extra { from, to } => {
                *from += n as u32;
                from >= to
            }
        };
        if done {
            self.at += 1;
        }
    }

    /// Writes from the current segment.
    fn send_seg(&mut self, dst: &Stream, pools: &mut Pools) -> io::Result<usize> {
        let seg = self.segs[self.at];
        if let Some(mem) = self.mem_of(seg) {
            let n = dst.write(mem)?;
            self.advance_seg(n as u64);
            self.sent += n as u64;
            return Ok(n);
        }
        let Seg::File { from, to } = seg else {
            return Ok(0);
        };
        let Some(Body::File(fd)) = self.rep.as_deref().map(|r| &r.body) else {
            return Err(io::ErrorKind::InvalidData.into());
        };
        // Within the range known to be cached (`next_is_cold` looked before).
        let warm_left = if self.warm.0 <= from && from < self.warm.1 {
            self.warm.1 - from
        } else {
            TURN_BYTES
        };
        let want = (to - from).min(TURN_BYTES).min(warm_left) as usize;
        let n = if dst.can_splice() {
            let mut offset = from;
            sysfile::sendfile(dst.as_fd(), fd.as_fd(), &mut offset, want)?
        } else {
            // TLS: through a pooled buffer and the record layer.
            let mut buf = pools.buffer();
            let len = want.min(BUF_SIZE);
            let r = sysfile::pread(fd.as_fd(), &mut buf[..len], from).and_then(|got| {
                if got == 0 {
                    Ok(0)
                } else {
                    dst.write(&buf[..got])
                }
            });
            pools.give_buffer(buf);
            r?
        };
        if n == 0 {
            // The file is shorter than when it was opened: the response cannot be completed.
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.advance_seg(n as u64);
        self.sent += n as u64;
        Ok(n)
    }
}
