//! The copy machinery of a session: one [`Direction`] moves bytes read from one socket to the
//! other, through a pooled buffer for small messages or a pooled pipe (splice, zero copy) once the
//! direction proves bulky. A direction copies until EOF (TCP), or until a byte limit (a body of
//! known length: then it reports the message complete and leaves the sockets open; an HTTP
//! session writes a head and the body bytes read with it, then lets a limited direction copy the
//! rest of the body).
//!
//! A direction holds no memory while idle: the buffer or pipe goes back to the worker's pool as
//! soon as it is drained. Never allocates per read; allocates only when a pool is empty.
//!
//! The pool keeps a bounded number of free buffers; the rest of a burst's go back to the C heap,
//! which keeps them (its RSS does not shrink). So once a burst is over, [`Pools::after_turn`]
//! keeps a quarter of the pool and has the heap give its free pages back to the OS: an idle
//! process holds what its idle clients need, not the peak of the last burst of concurrent
//! requests.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use crate::net::{Ready, Stream};
use crate::sys;

/// Size of a copy buffer.
pub(crate) const BUF_SIZE: usize = 16 * 1024;
/// Capacity asked for each splice pipe.
pub(crate) const PIPE_SIZE: usize = 256 * 1024;
/// Buffers dropped beyond the pool (1 MiB) after which the heap is trimmed once quiet.
const TRIM_AFTER_BUFFERS: usize = 64;
/// How long no buffer may have been dropped before that trim: the burst is over, not going on
/// (while it goes on, the freed memory is reused at once; trimming it would only fault it in again).
const TRIM_QUIET_MS: u64 = 1000;
/// Reads one pump may do before yielding to other sessions (at most 256 KiB through buffers or
/// 4 MiB through a pipe): a fast pair of peers must not starve the rest of the worker.
const READS_PER_PUMP: usize = 16;

/// A pooled copy buffer.
pub(crate) type Buf = Box<[u8; BUF_SIZE]>;

/// A kernel pipe used as a splice buffer.
#[derive(Debug)]
pub(crate) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

/// A worker's free buffers and pipes, bounded so a burst does not pin memory for ever. Pipes are
/// bounded in all (pooled or holding data), not only in the pool: their descriptors are counted in
/// the reserve that keeps sessions from starving the control socket and the admin listener.
///
/// Free and lent buffers together are bounded by `max_buffers` plus the most lent at once since
/// the last trim: under load (HTTP/2 streams, each a session holding its request's buffer until
/// the answer comes) the number in use swings by more than a fixed pool, and every buffer dropped
/// at the bottom of a swing would be allocated and zeroed again at the next top (with glibc, a
/// 16 KiB allocation also consolidates the small free chunks of the heap). The peak of memory is
/// what it was with a fixed pool (the most in use, and `max_buffers` free); buffers kept above
/// `max_buffers` arm the trim, which cuts the pool to a quarter of `max_buffers` once the burst
/// is over.
#[derive(Debug)]
pub(crate) struct Pools {
    buffers: Vec<Box<[u8; BUF_SIZE]>>,
    pipes: Vec<Pipe>,
    max_buffers: usize,
    /// Buffers handed out and not given back (a buffer dropped with its session, as on a
    /// contained panic, stays counted until the next trim), and the most lent at once since
    /// the last trim.
    lent: usize,
    peak: usize,
    max_pipes: usize,
    /// Pipes this worker holds, in the pool or in directions.
    pipes_open: usize,
    /// Whether splice is used for bulk directions (false after pipes could not be created).
    pub splice: bool,
    /// Buffers dropped (the pool being full) since the heap was last trimmed, and that count as
    /// the last turn saw it.
    dropped: usize,
    dropped_seen: usize,
    /// When the heap is to be trimmed, if no buffer is dropped until then.
    trim_at: Option<u64>,
}

impl Pools {
    pub(crate) fn new(max_buffers: usize, max_pipes: usize, splice: bool) -> Pools {
        Pools {
            buffers: Vec::new(),
            pipes: Vec::new(),
            max_buffers,
            lent: 0,
            peak: 0,
            max_pipes,
            pipes_open: 0,
            splice,
            dropped: 0,
            dropped_seen: 0,
            trim_at: None,
        }
    }

    pub(crate) fn buffer(&mut self) -> Buf {
        self.lent += 1;
        self.peak = self.peak.max(self.lent);
        self.buffers
            .pop()
            .unwrap_or_else(|| Box::new([0u8; BUF_SIZE]))
    }

    pub(crate) fn give_buffer(&mut self, buf: Buf) {
        self.lent = self.lent.saturating_sub(1);
        // Free and lent together stay within the burst's peak in use and the fixed bound.
        if self.buffers.len() + self.lent < self.max_buffers + self.peak {
            self.buffers.push(buf);
        } else {
            self.dropped += 1;
        }
    }

    /// Called once per worker turn, with the clock. Once a burst is over (no buffer dropped and
    /// at most `max_buffers` lent) for [`TRIM_QUIET_MS`], after it dropped [`TRIM_AFTER_BUFFERS`]
    /// buffers or left more than `max_buffers` free, keeps a quarter of the pool and gives the C
    /// heap's free pages back to the OS ([`sys::trim_heap`]). A trickle of requests, each lending
    /// a buffer or two, does not put the trim off. Before the heap is trimmed the worker's spare
    /// lists are emptied: the TLS pool's, the HTTP/2 pipes' and notes', and the caller's
    /// (`drop_spares`: the exchange boxes). Returns whether it trimmed. A few compares in a turn
    /// without a trim due.
    pub(crate) fn after_turn(&mut self, now: u64, drop_spares: impl FnOnce()) -> bool {
        // TLS record buffers freed and handshakes finished count like dropped copy buffers: a
        // burst of handshakes leaves the heap as full of free memory as a burst of copies.
        self.dropped = self.dropped.saturating_add(crate::net::tls::take_churn());
        let above = self.buffers.len() > self.max_buffers;
        if self.dropped != self.dropped_seen || self.lent > self.max_buffers {
            // The burst goes on: the trim waits for its end.
            self.dropped_seen = self.dropped;
            if self.trim_at.is_some() || self.dropped >= TRIM_AFTER_BUFFERS || above {
                self.trim_at = Some(now + TRIM_QUIET_MS);
            }
            return false;
        }
        if above && self.trim_at.is_none() {
            self.trim_at = Some(now + TRIM_QUIET_MS);
        }
        match self.trim_at {
            Some(at) if now >= at => {
                self.trim_at = None;
                let dropped = std::mem::take(&mut self.dropped);
                self.dropped_seen = 0;
                // The burst is over: the pool need not stay full either (the next burst
                // allocates again; steady traffic never gets here).
                self.buffers.truncate(self.max_buffers / 4);
                self.peak = self.lent;
                crate::net::tls::trim_pool();
                crate::net::h2pipe::trim_spares();
                // The caller's spares (the exchange boxes, which this module cannot name).
                drop_spares();
                let started = std::time::Instant::now();
                let released = sys::trim_heap();
                tracing::debug!(
                    "heap trimmed after {dropped} copy buffers were freed (or TLS handshakes done), in {} µs (memory \
                     released: {released})",
                    started.elapsed().as_micros()
                );
                true
            }
            _ => false,
        }
    }

    #[cfg(test)]
    fn after_turn_alone(&mut self, now: u64) -> bool {
        self.after_turn(now, || {})
    }

    /// When the worker must run a turn for [`Pools::after_turn`] to trim, if a trim is due.
    pub(crate) fn trim_due(&self) -> Option<u64> {
        self.trim_at
    }

    /// A pipe from the pool, or a new one while fewer than `max_pipes` are open; None sends the
    /// direction through a buffer.
    fn pipe(&mut self) -> Option<Pipe> {
        if let Some(p) = self.pipes.pop() {
            return Some(p);
        }
        if self.pipes_open >= self.max_pipes {
            return None;
        }
        match sys::pipe(Some(PIPE_SIZE)) {
            Ok((read, write)) => {
                self.pipes_open += 1;
                Some(Pipe { read, write })
            }
            Err(e) => {
                tracing::debug!("no splice pipe ({e}); copying through buffers");
                None
            }
        }
    }

    /// Returns an empty pipe to the pool (a pipe still holding data must be dropped instead).
    fn give_pipe(&mut self, pipe: Pipe) {
        if self.pipes.len() < self.max_pipes {
            self.pipes.push(pipe);
        } else {
            self.drop_pipe(pipe);
        }
    }

    /// Closes a pipe (one still holding data, or one the pool has no room for).
    fn drop_pipe(&mut self, pipe: Pipe) {
        drop(pipe);
        self.pipes_open -= 1;
    }
}

/// Data read but not yet written.
#[derive(Debug, Default)]
enum Pending {
    #[default]
    Empty,
    Buf {
        buf: Box<[u8; BUF_SIZE]>,
        start: u32,
        end: u32,
    },
    Pipe {
        pipe: Pipe,
        len: u32,
    },
}

/// What a flush achieved.
enum Flushed {
    All,
    Partial,
    DestinationFull,
}

/// Which socket failed, so the session can say who reset.
#[derive(Debug)]
pub(crate) enum Failure {
    Read(io::Error),
    Write(io::Error),
}

/// A read of 0 bytes: EOF, unless the source had reported an error (a reset whose error was
/// already taken, e.g. when it came with the connect): a reset stream never ends cleanly.
fn end_of_data(eof: &mut bool, sr: &Ready) -> io::Result<bool> {
    if sr.error {
        return Err(io::ErrorKind::ConnectionReset.into());
    }
    *eof = true;
    Ok(true)
}

/// No byte limit: copy until EOF.
const UNLIMITED: u64 = u64::MAX;

/// One direction's state.
#[derive(Debug)]
pub(crate) struct Direction {
    pending: Pending,
    /// Bytes the source may still send in this message; [`UNLIMITED`] copies until EOF.
    remaining: u64,
    /// The source sent EOF (all its data is read or pending).
    pub eof: bool,
    /// EOF was passed on to the destination (shutdown of its write side).
    pub shut: bool,
    /// A read filled a whole buffer: further reads splice through a pipe.
    bulk: bool,
    /// Bytes delivered to the destination.
    pub bytes: u64,
    /// The last pump stopped on its budget with the source still readable: the worker must drive
    /// this direction again without waiting for an event (edge-triggered: none would come).
    pub yielded: bool,
    /// After the last pump, the destination still held records it took but could not send (TLS):
    /// the bytes count as pending until they are out.
    backlog: bool,
    /// Bytes at the start of the pending buffer put there by [`Direction::preload`] (a PROXY
    /// header) and not written yet: not the source's bytes, so not counted in `bytes`.
    prefix: u8,
}

impl Default for Direction {
    fn default() -> Direction {
        Direction {
            pending: Pending::Empty,
            remaining: UNLIMITED,
            eof: false,
            shut: false,
            bulk: false,
            bytes: 0,
            yielded: false,
            backlog: false,
            prefix: 0,
        }
    }
}

impl Direction {
    /// A direction that copies one message of `limit` bytes, then reports it complete
    /// ([`Direction::is_complete`]) without reading further or passing EOF on.
    pub(crate) fn limited(limit: u64) -> Direction {
        Direction {
            remaining: limit,
            ..Direction::default()
        }
    }

    /// Puts `bytes` (a PROXY protocol header, at most 255 bytes) before anything read from the
    /// source: the first read appends to them, so they leave with the source's first bytes in
    /// one write when those are already there. Call before the first pump.
    pub(crate) fn preload(&mut self, bytes: &[u8], pools: &mut Pools) {
        debug_assert!(matches!(self.pending, Pending::Empty) && bytes.len() <= 255);
        let mut buf = pools.buffer();
        buf[..bytes.len()].copy_from_slice(bytes);
        self.pending = Pending::Buf {
            buf,
            start: 0,
            end: bytes.len() as u32,
        };
        self.prefix = bytes.len() as u8;
    }

    /// Before the preloaded bytes are written: reads what the source has after them, so both go
    /// in one write. Ok(false) when nothing was appended.
    fn append_to_prefix(&mut self, src: &Stream, sr: &mut Ready) -> io::Result<bool> {
        let Pending::Buf { buf, start: 0, end } = &mut self.pending else {
            return Ok(false);
        };
        if *end != u32::from(self.prefix) || self.eof || !sr.readable || self.remaining == 0 {
            return Ok(false);
        }
        let at = *end as usize;
        let want = (BUF_SIZE - at).min(self.remaining.min(BUF_SIZE as u64) as usize);
        match src.read(&mut buf[at..at + want]) {
            Ok(0) => end_of_data(&mut self.eof, sr).map(|_| false),
            Ok(n) => {
                *end += n as u32;
                self.take_budget(n);
                if n < want && !sr.error {
                    if sr.read_closed || src.ended() {
                        self.eof = true;
                    } else {
                        sr.readable = false;
                    }
                }
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                sr.readable = false;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether this direction is finished: EOF read, everything written, EOF passed on.
    pub(crate) fn is_done(&self) -> bool {
        self.shut
    }

    /// Whether the limited message was copied whole: every byte of it read and written (not EOF:
    /// the source may go on with the next message).
    pub(crate) fn is_complete(&self) -> bool {
        self.remaining == 0 && !self.has_pending()
    }

    /// Whether the direction copies a message of known length (not until EOF).
    pub(crate) fn is_limited(&self) -> bool {
        self.remaining != UNLIMITED
    }

    pub(crate) fn has_pending(&self) -> bool {
        self.backlog || !matches!(self.pending, Pending::Empty)
    }

    /// How many bytes the next read may take, at most `max`.
    fn budget(&self, max: usize) -> usize {
        self.remaining.min(max as u64) as usize
    }

    fn take_budget(&mut self, n: usize) {
        if self.remaining != UNLIMITED {
            self.remaining -= (n as u64).min(self.remaining);
        }
    }

    /// Moves as much as the sockets allow. Returns whether any byte or EOF moved. `other_done`
    /// says the opposite direction has finished: the session closes both sockets as soon as this
    /// one reaches EOF, and close() sends the FIN, so the shutdown() is skipped.
    pub(crate) fn pump(
        &mut self,
        other_done: bool,
        src: &Stream,
        dst: &Stream,
        sr: &mut Ready,
        dr: &mut Ready,
        pools: &mut Pools,
    ) -> Result<bool, Failure> {
        let moved = self.pump_some(other_done, src, dst, sr, dr, pools);
        self.backlog = dst.has_backlog();
        moved
    }

    fn pump_some(
        &mut self,
        other_done: bool,
        src: &Stream,
        dst: &Stream,
        sr: &mut Ready,
        dr: &mut Ready,
        pools: &mut Pools,
    ) -> Result<bool, Failure> {
        let mut progress = false;
        let mut reads = 0;
        self.yielded = false;
        // Splicing moves the socket's bytes: TLS records are not the session's bytes.
        let splice = src.can_splice() && dst.can_splice();
        if self.prefix > 0 {
            match self.append_to_prefix(src, sr) {
                Ok(appended) => progress |= appended,
                Err(e) => return Err(Failure::Read(e)),
            }
        }
        loop {
            if !matches!(self.pending, Pending::Empty) || dst.has_backlog() {
                if !dr.writable {
                    return Ok(progress);
                }
                match self.flush(dst, pools) {
                    Ok(Flushed::All) => progress = true,
                    Ok(Flushed::Partial) => {
                        // Data is still pending: write again (or learn the socket is full)
                        // before anything may be read into this direction.
                        progress = true;
                        continue;
                    }
                    Ok(Flushed::DestinationFull) => {
                        dr.writable = false;
                        return Ok(true);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        dr.writable = false;
                        return Ok(progress);
                    }
                    Err(e) => return Err(Failure::Write(e)),
                }
            }
            if self.eof {
                if !self.shut {
                    if !other_done {
                        // ENOTCONN when the peer is already gone: nothing left to tell it. A TLS
                        // destination sends close_notify first; its FIN waits for the records.
                        if let Err(e) = dst.shutdown_write() {
                            if e.kind() == io::ErrorKind::WouldBlock {
                                dr.writable = false;
                                return Ok(true);
                            }
                        }
                    }
                    self.shut = true;
                    progress = true;
                }
                return Ok(progress);
            }
            if self.remaining == 0 {
                // The message is complete: what the source sends next is not ours to copy.
                return Ok(progress);
            }
            if !sr.readable {
                return Ok(progress);
            }
            if reads == READS_PER_PUMP {
                self.yielded = true;
                return Ok(progress);
            }
            reads += 1;
            match self.fill(src, sr, pools, splice) {
                Ok(true) => progress = true,
                Ok(false) => return Ok(progress),
                Err(e) => return Err(Failure::Read(e)),
            }
        }
    }

    /// Writes pending data, releasing the buffer or pipe once all of it went.
    fn flush(&mut self, dst: &Stream, pools: &mut Pools) -> io::Result<Flushed> {
        match &mut self.pending {
            Pending::Empty if !dst.send_backlog()? => Ok(Flushed::DestinationFull),
            Pending::Empty => Ok(Flushed::All),
            Pending::Buf { buf, start, end } => {
                let bytes = &buf[*start as usize..*end as usize];
                // With EOF already read, a shutdown() or close() always follows the last write.
                let n = if self.eof {
                    dst.write_last(bytes)?
                } else {
                    dst.write(bytes)?
                };
                let preloaded = n.min(usize::from(self.prefix));
                self.prefix -= preloaded as u8;
                self.bytes += (n - preloaded) as u64;
                *start += n as u32;
                if start < end {
                    // A short write means the socket buffer is full: wait for the next edge.
                    return Ok(Flushed::DestinationFull);
                }
                if let Pending::Buf { buf, .. } = std::mem::take(&mut self.pending) {
                    pools.give_buffer(buf);
                }
                if dst.has_backlog() {
                    // TLS took the bytes but the socket did not take all the records.
                    return Ok(Flushed::DestinationFull);
                }
                Ok(Flushed::All)
            }
            Pending::Pipe { pipe, len } => {
                let n = sys::splice(pipe.read.as_fd(), dst.as_fd(), *len as usize)?;
                self.bytes += n as u64;
                *len -= n as u32;
                if *len > 0 {
                    // splice may stop short for reasons other than a full socket: try again.
                    return Ok(Flushed::Partial);
                }
                if let Pending::Pipe { pipe, .. } = std::mem::take(&mut self.pending) {
                    pools.give_pipe(pipe);
                }
                Ok(Flushed::All)
            }
        }
    }

    /// Reads from the source into a buffer or pipe. Ok(true) when data or EOF arrived, Ok(false)
    /// when the source had nothing (its readable flag is then cleared).
    fn fill(
        &mut self,
        src: &Stream,
        sr: &mut Ready,
        pools: &mut Pools,
        splice: bool,
    ) -> io::Result<bool> {
        debug_assert!(
            matches!(self.pending, Pending::Empty),
            "reading over pending data would lose it"
        );
        if self.bulk && splice && pools.splice {
            if let Some(pipe) = pools.pipe() {
                return self.fill_pipe(pipe, src, sr, pools);
            }
        }
        let mut buf = pools.buffer();
        let want = self.budget(buf.len());
        match src.read(&mut buf[..want]) {
            Ok(0) => {
                pools.give_buffer(buf);
                end_of_data(&mut self.eof, sr)
            }
            Ok(n) => {
                self.take_budget(n);
                if n == buf.len() {
                    self.bulk = true;
                } else if self.remaining == 0 {
                    // The message ended inside this read: the readable flag stays, since the
                    // source may hold the next message.
                } else if sr.error {
                    // A reset also reads as "closed": keep reading so the next read reports it
                    // instead of passing a clean EOF on.
                } else if sr.read_closed || src.ended() {
                    // Short read after the peer's FIN (or TLS close_notify): the queue is
                    // drained, EOF is next.
                    self.eof = true;
                } else {
                    // Short read: the queue is empty; new data brings a new edge.
                    sr.readable = false;
                }
                self.pending = Pending::Buf {
                    buf,
                    start: 0,
                    end: n as u32,
                };
                Ok(true)
            }
            Err(e) => {
                pools.give_buffer(buf);
                if e.kind() == io::ErrorKind::WouldBlock {
                    sr.readable = false;
                    Ok(false)
                } else {
                    Err(e)
                }
            }
        }
    }

    fn fill_pipe(
        &mut self,
        pipe: Pipe,
        src: &Stream,
        sr: &mut Ready,
        pools: &mut Pools,
    ) -> io::Result<bool> {
        match sys::splice(src.as_fd(), pipe.write.as_fd(), self.budget(PIPE_SIZE)) {
            Ok(0) => {
                pools.give_pipe(pipe);
                end_of_data(&mut self.eof, sr)
            }
            Ok(n) => {
                self.take_budget(n);
                self.pending = Pending::Pipe {
                    pipe,
                    len: n as u32,
                };
                Ok(true)
            }
            Err(e) => {
                pools.give_pipe(pipe);
                if e.kind() == io::ErrorKind::WouldBlock {
                    sr.readable = false;
                    Ok(false)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Gives a held buffer back on close (a pipe with data in it is closed).
    pub(crate) fn release(&mut self, pools: &mut Pools) {
        match std::mem::take(&mut self.pending) {
            Pending::Buf { buf, .. } => pools.give_buffer(buf),
            Pending::Pipe { pipe, .. } => pools.drop_pipe(pipe),
            Pending::Empty => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::Shutdown;

    use mio::net::UnixStream;

    use super::*;

    /// Two socket pairs around one direction: the test writes into `feed`, the direction reads
    /// `src` and writes `dst`, the test reads `out`.
    struct Rig {
        feed: UnixStream,
        src: Stream,
        dst: Stream,
        out: UnixStream,
        sr: Ready,
        dr: Ready,
    }

    fn rig() -> Rig {
        let (feed, src) = UnixStream::pair().unwrap();
        let (dst, out) = UnixStream::pair().unwrap();
        Rig {
            feed,
            src: Stream::Unix(src),
            dst: Stream::Unix(dst),
            out,
            sr: Ready::default(),
            dr: Ready::default(),
        }
    }

    /// Reads what is there; returns how many bytes came and whether EOF did.
    fn drain(s: &mut UnixStream, into: &mut Vec<u8>) -> (usize, bool) {
        let mut buf = [0u8; 8192];
        let mut n = 0;
        loop {
            match s.read(&mut buf) {
                Ok(0) => return (n, true),
                Ok(k) => {
                    into.extend_from_slice(&buf[..k]);
                    n += k;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return (n, false),
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    impl Rig {
        /// Feeds `input` (then EOF when `close`), pumps and collects the output until nothing
        /// moves; the readiness flags are raised each round as an event would. Returns the output
        /// and whether EOF reached `out`. Bounded in rounds.
        fn run(
            &mut self,
            d: &mut Direction,
            pools: &mut Pools,
            input: &[u8],
            close: bool,
        ) -> (Vec<u8>, bool) {
            let mut fed = 0;
            let mut got = Vec::new();
            let mut eof = false;
            for _ in 0..10_000 {
                while fed < input.len() {
                    match self.feed.write(&input[fed..]) {
                        Ok(k) => fed += k,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => panic!("write: {e}"),
                    }
                }
                if fed == input.len() && close {
                    let _ = self.feed.shutdown(Shutdown::Write);
                }
                self.sr.readable = true;
                self.dr.writable = true;
                let moved = d
                    .pump(
                        false,
                        &self.src,
                        &self.dst,
                        &mut self.sr,
                        &mut self.dr,
                        pools,
                    )
                    .unwrap();
                let (n, end) = drain(&mut self.out, &mut got);
                eof |= end;
                if !moved && n == 0 && fed == input.len() {
                    break;
                }
            }
            (got, eof)
        }
    }

    fn pools(splice: bool) -> Pools {
        Pools::new(4, 4, splice)
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn preloaded_bytes_leave_first_in_one_write_with_the_first_read_and_are_not_counted() {
        let mut r = rig();
        let mut p = pools(false);
        let mut d = Direction::default();
        d.preload(b"HEADER|", &mut p);
        // The client's bytes are already there: one pump appends them to the header.
        r.feed.write_all(b"first").unwrap();
        r.sr.readable = true;
        r.dr.writable = true;
        d.pump(false, &r.src, &r.dst, &mut r.sr, &mut r.dr, &mut p)
            .unwrap();
        let mut got = Vec::new();
        drain(&mut r.out, &mut got);
        assert_eq!(got, b"HEADER|first");
        assert_eq!(d.bytes, 5, "the header is not the client's");
        let (rest, eof) = r.run(&mut d, &mut p, b" and more", true);
        assert_eq!(rest, b" and more");
        assert!(eof);
        assert_eq!(d.bytes, 14);

        // Nothing from the client yet: the header goes alone.
        let mut r = rig();
        let mut d = Direction::default();
        d.preload(b"H", &mut p);
        r.dr.writable = true;
        d.pump(false, &r.src, &r.dst, &mut r.sr, &mut r.dr, &mut p)
            .unwrap();
        let mut got = Vec::new();
        drain(&mut r.out, &mut got);
        assert_eq!((got.as_slice(), d.bytes), (&b"H"[..], 0));
    }

    #[test]
    fn a_burst_of_buffers_trims_the_pool_and_the_heap_once_quiet() {
        let mut p = pools(false);
        let burst: Vec<Buf> = (0..4 + TRIM_AFTER_BUFFERS).map(|_| p.buffer()).collect();
        assert!(!p.after_turn_alone(500), "trimmed in the burst");
        assert_eq!(p.trim_due(), None);
        for b in burst {
            p.give_buffer(b);
        }
        // Given back, they are all kept: free and lent stay within the burst's peak and the bound.
        assert_eq!(p.buffers.len(), 4 + TRIM_AFTER_BUFFERS);
        assert!(
            !p.after_turn_alone(1_000),
            "trimmed in the burst's own turn"
        );
        assert_eq!(p.trim_due(), Some(1_000 + TRIM_QUIET_MS));
        // A trickle (a buffer lent and given back) does not put the trim off.
        let one = p.buffer();
        p.give_buffer(one);
        assert!(!p.after_turn_alone(1_500));
        assert_eq!(p.trim_due(), Some(1_000 + TRIM_QUIET_MS));
        assert!(
            !p.after_turn_alone(1_000 + TRIM_QUIET_MS - 1),
            "trimmed early"
        );
        assert!(
            p.after_turn_alone(1_000 + TRIM_QUIET_MS),
            "no trim once quiet"
        );
        assert_eq!(p.trim_due(), None);
        assert!(!p.after_turn_alone(10_000), "trimmed twice for one burst");
        assert_eq!(p.buffers.len(), 1, "the trim keeps a quarter of the bound");
    }

    #[test]
    fn a_burst_still_lending_more_than_the_bound_puts_the_trim_off() {
        let mut p = pools(false);
        let burst: Vec<Buf> = (0..20).map(|_| p.buffer()).collect();
        let mut burst = burst.into_iter();
        for b in burst.by_ref().take(10) {
            p.give_buffer(b);
        }
        // Ten still lent, more than the bound of four: the burst goes on.
        assert!(!p.after_turn_alone(0));
        assert_eq!(p.trim_due(), Some(TRIM_QUIET_MS));
        assert!(!p.after_turn_alone(TRIM_QUIET_MS));
        assert_eq!(p.trim_due(), Some(2 * TRIM_QUIET_MS));
        for b in burst {
            p.give_buffer(b);
        }
        // Quiet since the last busy turn: trimmed.
        assert!(!p.after_turn_alone(2 * TRIM_QUIET_MS - 1));
        assert!(p.after_turn_alone(2 * TRIM_QUIET_MS));
        assert_eq!(p.buffers.len(), 1);
    }

    #[test]
    fn buffers_lent_in_a_swing_come_back_from_the_pool_not_the_heap() {
        let mut p = Pools::new(64, 4, false);
        let mut lent: Vec<Buf> = (0..300).map(|_| p.buffer()).collect();
        // A hundred come back while two hundred are still out: all kept, beyond the bound.
        for b in lent.drain(..100) {
            p.give_buffer(b);
        }
        assert_eq!(p.buffers.len(), 100);
        // The next hundred lent are those: none allocated.
        let again: Vec<Buf> = (0..100).map(|_| p.buffer()).collect();
        assert!(p.buffers.is_empty());
        // Everything back: kept, as many as the peak in use.
        for b in lent.into_iter().chain(again) {
            p.give_buffer(b);
        }
        assert_eq!(p.buffers.len(), 300);
        // Once quiet, the trim cuts it to a quarter of the bound, and forgets the peak: a
        // smaller burst after it keeps no more than it uses and the bound.
        assert!(!p.after_turn_alone(0));
        assert!(p.after_turn_alone(TRIM_QUIET_MS));
        assert_eq!(p.buffers.len(), 16);
        let small: Vec<Buf> = (0..100).map(|_| p.buffer()).collect();
        for b in small {
            p.give_buffer(b);
        }
        assert_eq!(p.buffers.len(), 100);
        let held: Vec<Buf> = (0..100).map(|_| p.buffer()).collect();
        drop(held);
        assert_eq!(p.buffers.len(), 0);
    }

    #[test]
    fn dropped_buffers_trim_only_once_they_reach_the_threshold() {
        let mut p = pools(false);
        // Buffers dropped (or TLS record buffers freed) one short of the threshold, in a pool
        // within its bound: no trim.
        p.dropped += TRIM_AFTER_BUFFERS - 1;
        assert!(!p.after_turn_alone(0) && !p.after_turn_alone(5 * TRIM_QUIET_MS));
        assert_eq!(p.trim_due(), None, "one buffer short of the threshold");
        // Drops add up across bursts until a trim.
        p.dropped += 1;
        assert!(!p.after_turn_alone(6 * TRIM_QUIET_MS));
        assert_eq!(p.trim_due(), Some(7 * TRIM_QUIET_MS));
        assert!(p.after_turn_alone(7 * TRIM_QUIET_MS));
    }

    #[test]
    fn copies_until_eof_then_passes_the_eof_on() {
        let (mut r, mut p) = (rig(), pools(false));
        let mut d = Direction::default();
        let (got, eof) = r.run(&mut d, &mut p, b"hello", true);
        assert_eq!(got, b"hello");
        assert!(eof, "EOF was not passed on");
        assert!(d.eof && d.is_done() && !d.has_pending());
        assert_eq!(d.bytes, 5);
        assert!(
            !d.is_complete(),
            "an unlimited direction has no message to complete"
        );
    }

    #[test]
    fn half_close_keeps_the_other_direction_open() {
        // client app <-> client socket | server socket <-> server app
        let (mut client_app, client) = UnixStream::pair().unwrap();
        let (server, mut server_app) = UnixStream::pair().unwrap();
        let (client, server) = (Stream::Unix(client), Stream::Unix(server));
        let (mut cr, mut sr) = (Ready::default(), Ready::default());
        let mut p = pools(false);
        let (mut up, mut down) = (Direction::default(), Direction::default());
        client_app.write_all(b"ping").unwrap();
        client_app.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        for _ in 0..100 {
            (cr.readable, sr.writable) = (true, true);
            up.pump(down.is_done(), &client, &server, &mut cr, &mut sr, &mut p)
                .unwrap();
            if up.is_done() {
                break;
            }
        }
        assert!(up.is_done());
        assert_eq!(drain(&mut server_app, &mut got), (4, true));
        assert_eq!(got, b"ping");
        // The server still answers, and the client still gets it.
        server_app.write_all(b"pong").unwrap();
        let mut back = Vec::new();
        for _ in 0..100 {
            (sr.readable, cr.writable) = (true, true);
            down.pump(up.is_done(), &server, &client, &mut sr, &mut cr, &mut p)
                .unwrap();
            if drain(&mut client_app, &mut back).0 > 0 {
                break;
            }
        }
        assert_eq!(back, b"pong");
        assert!(!down.is_done(), "the open direction ended with the other");
        server_app.shutdown(Shutdown::Write).unwrap();
        for _ in 0..100 {
            (sr.readable, cr.writable) = (true, true);
            down.pump(up.is_done(), &server, &client, &mut sr, &mut cr, &mut p)
                .unwrap();
            if down.is_done() {
                break;
            }
        }
        assert!(down.is_done());
    }

    #[test]
    fn byte_limit_stops_after_n_bytes_and_reports_the_message_complete_not_eof() {
        let (mut r, mut p) = (rig(), pools(false));
        let mut d = Direction::limited(4);
        let (got, eof) = r.run(&mut d, &mut p, b"abcdefghij", false);
        assert_eq!(got, b"abcd");
        assert!(d.is_complete());
        assert!(
            !d.eof && !d.is_done() && !eof,
            "a complete message is not EOF"
        );
        // The rest is the next message's, left unread in the source.
        let Stream::Unix(src) = &r.src else {
            unreachable!()
        };
        let mut rest = [0u8; 16];
        let n = (&*src).read(&mut rest).unwrap();
        assert_eq!(&rest[..n], b"efghij");
    }

    #[test]
    fn eof_before_the_byte_limit_is_eof_not_a_complete_message() {
        let (mut r, mut p) = (rig(), pools(false));
        let mut d = Direction::limited(10);
        let (got, eof) = r.run(&mut d, &mut p, b"abc", true);
        assert_eq!(got, b"abc");
        assert!(eof && d.eof && d.is_done());
        assert!(!d.is_complete(), "7 bytes of the message never came");
    }

    #[test]
    fn splice_and_buffers_copy_the_same_bytes() {
        let input = pattern(300 * 1024);
        for splice in [false, true] {
            let (mut r, mut p) = (rig(), pools(splice));
            let mut d = Direction::default();
            let (got, eof) = r.run(&mut d, &mut p, &input, true);
            assert!(
                got == input,
                "splice {splice}: {} bytes of {} came, or differ",
                got.len(),
                input.len()
            );
            assert!(eof && d.is_done());
            assert_eq!(
                p.pipes_open > 0,
                splice,
                "splice {splice}: pipes used {}",
                p.pipes_open
            );
            d.release(&mut p);
        }
    }

    #[test]
    fn byte_limit_holds_through_splice() {
        let input = pattern(300 * 1024);
        let limit = 100_000;
        let (mut r, mut p) = (rig(), pools(true));
        let mut d = Direction::limited(limit as u64);
        let (got, eof) = r.run(&mut d, &mut p, &input, false);
        assert!(p.pipes_open > 0, "the bulk body did not splice");
        assert_eq!(got.len(), limit);
        assert!(got == input[..limit], "bytes differ");
        assert!(d.is_complete() && !eof);
    }
}
