//! One HTTP/2 stream as its HTTP session sees it: a [`Stream`](super::Stream) that reads the
//! request as HTTP/1.1 bytes and takes the response as HTTP/1.1 bytes (a server's response head
//! as the header block of its HEADERS, with a note: [`Pipe::written`]), so every stream is an
//! exchange of the HTTP path that exists (routes, pools, retries, rates, ACLs, static files,
//! FastCGI, the access log). The connection's session (`proxy::h2`) writes the request into the
//! [`Pipe`] and turns what the stream's session writes into frames.
//!
//! The two sessions live in separate worker slots and never call each other: each side, after
//! changing the pipe, *pokes* the other (its token goes on this thread's poke list, which the
//! worker drains after each turn's events), and the poked session looks at the pipe.
//!
//! Both sessions run on one worker thread (a stream's session is never moved: see
//! `HttpSession::movable`), so a pipe is a [`ThreadRc`] (an `Rc` usable on its worker's thread
//! only, so sessions stay `Send`) and a `RefCell`: a stream costs
//! no atomic operation to share or to look at (with an `Arc<Mutex<_>>`, a multiplexed request
//! took about 30 atomic operations on its pipe, each some 6 ns here).

use std::cell::{Cell, RefCell, RefMut};
use std::io;

use mio::Token;
use quill_core::h2::Written;
use quill_core::sys::ThreadRc;

/// Most response bytes a stream's session may write ahead of the frames that carry them:
/// beyond it, its writes would block (the client's flow-control window holds the rest back in
/// the server's socket).
pub(crate) const DOWN_CAP: usize = 64 * 1024;

thread_local! {
    /// Sessions of this worker to look at their pipes again.
    static POKES: RefCell<Vec<Token>> = const { RefCell::new(Vec::new()) };
    /// Pipes of this worker's ended streams, with their buffers, for its next streams.
    static SPARE: RefCell<Vec<SharedPipe>> = const { RefCell::new(Vec::new()) };
    /// Output buffers of this worker's HTTP/2 connections gone idle, for the next that write.
    static SPARE_OUT: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// Most spare output buffers a worker keeps, and the most capacity each may have (at most 1 MiB
/// in all, given back at the heap trim after a burst).
const SPARE_OUT_MAX: usize = 32;
const SPARE_OUT_CAPACITY: usize = 32 * 1024;

/// An empty output buffer for an HTTP/2 connection about to write frames, if this worker kept
/// one (see [`keep_output`]).
pub(crate) fn spare_output() -> Option<Vec<u8>> {
    SPARE_OUT.with_borrow_mut(Vec::pop)
}

/// An idle HTTP/2 connection's empty output buffer, kept (if not too big) for the next
/// connection that writes: the frames of a turn then go into a buffer already grown, instead of
/// one allocated and grown again (copied at each step) per burst of streams.
pub(crate) fn keep_output(buf: Vec<u8>) {
    if buf.capacity() > SPARE_OUT_CAPACITY {
        return;
    }
    SPARE_OUT.with_borrow_mut(|spare| {
        if spare.len() < SPARE_OUT_MAX {
            spare.push(buf);
        }
    });
}

/// Most spare pipes a worker keeps (as many as a burst keeps in flight on a worker: see the
/// exchange boxes' `SPARE_MAX`), and the most capacity each of a kept pipe's two buffers may hold
/// (at most about 2 MiB in all, given back at the heap trim after a burst).
const SPARE_MAX: usize = 256;
const SPARE_CAPACITY: usize = 4 * 1024;
/// Most notes of header blocks a spare pipe keeps room for (a response's interim heads and its
/// final one: a few).
const SPARE_NOTES: usize = 8;

/// A pipe for a new stream of the connection `conn` (`tls`: its scheme is `https`; `sni`: the
/// TLS server name it asked for): one of the worker's spares when it has one, so a stream costs
/// no allocation for its pipe and its buffers.
pub(crate) fn new_pipe(conn: Token, tls: bool, sni: Option<ThreadRc<Box<str>>>) -> SharedPipe {
    let spare = SPARE.with_borrow_mut(Vec::pop);
    if let Some(mut pipe) = spare {
        // A spare is held by nothing else (`recycle`).
        if let Some(shared) = ThreadRc::get_mut(&mut pipe) {
            shared.pipe.get_mut().reset(conn);
            shared.poked.set(false);
            shared.noted.set(None);
            shared.tls = tls;
            shared.sni = sni;
            return pipe;
        }
    }
    ThreadRc::new(Shared::new(conn, tls, sni))
}

/// `pipe` is let go of: kept as a spare if this was the last hold on it (the connection's
/// session and the stream's session let go in either order) and its buffers are small.
pub(crate) fn recycle(pipe: &SharedPipe) {
    if ThreadRc::holders(pipe) != 1 {
        return;
    }
    {
        let p = open(pipe);
        // (A server that sent many interim heads at once grew the list of their notes.)
        if p.up.capacity() > SPARE_CAPACITY
            || p.down.capacity() > SPARE_CAPACITY
            || p.written.capacity() > SPARE_NOTES
        {
            return;
        }
    }
    SPARE.with_borrow_mut(|spare| {
        if spare.len() < SPARE_MAX {
            spare.push(pipe.clone());
        }
    });
}

/// Drops this worker's spare pipes and output buffers (the heap trim after a burst).
pub(crate) fn trim_spares() {
    SPARE.with_borrow_mut(|spare| {
        spare.clear();
        spare.shrink_to_fit();
    });
    SPARE_OUT.with_borrow_mut(|spare| {
        spare.clear();
        spare.shrink_to_fit();
    });
}

/// Asks the worker to poke the session of `token` after this turn's events.
pub(crate) fn poke(token: Token) {
    POKES.with(|p| p.borrow_mut().push(token));
}

/// Moves the pending pokes into `into`.
pub(crate) fn take_pokes(into: &mut Vec<Token>) {
    POKES.with(|p| into.append(&mut p.borrow_mut()));
}

/// Whether pokes wait.
pub(crate) fn has_pokes() -> bool {
    POKES.with(|p| !p.borrow().is_empty())
}

/// What the two sessions of a stream share.
#[derive(Debug)]
pub(crate) struct Pipe {
    /// The request as HTTP/1.1 bytes; `up[up_at..]` not yet read by the stream's session.
    pub up: Vec<u8>,
    pub up_at: usize,
    /// The request ended (reads give EOF once `up` is read).
    pub up_eof: bool,
    /// The client reset the stream, or its connection is gone: reads and writes fail.
    pub up_reset: bool,
    /// Body payload bytes in `up` whose flow-control window is not given back yet.
    pub up_unreleased: usize,
    /// The response as HTTP/1.1 bytes, not yet turned into frames.
    pub down: Vec<u8>,
    /// Bytes of the response already turned into frames (`down[0]`'s offset in the response).
    pub down_taken: u64,
    /// The heads the stream's session wrote as header blocks, at these offsets of the response
    /// (the connection's session sends them as they are): an interim head's and the final one's
    /// may both wait here.
    pub written: Vec<(u64, Written)>,
    /// The stream's session shut its writing down (the response is complete, or ends here).
    pub down_eof: bool,
    /// The stream's session ended abnormally (a reset was armed): the stream is reset.
    pub down_reset: bool,
    /// The stream's session is gone.
    pub closed: bool,
    /// The connection's session, and the stream's once it started.
    pub conn: Token,
    pub session: Option<Token>,
    /// The stream's session sent the request's head to a server (or answered it itself): it no
    /// longer holds the buffer it read the head into, unless to replay it.
    pub head_sent: bool,
}

impl Pipe {
    pub(crate) fn new(conn: Token) -> Pipe {
        Pipe {
            up: Vec::new(),
            up_at: 0,
            up_eof: false,
            up_reset: false,
            up_unreleased: 0,
            down: Vec::new(),
            down_taken: 0,
            written: Vec::new(),
            down_eof: false,
            down_reset: false,
            closed: false,
            conn,
            session: None,
            head_sent: false,
        }
    }

    /// A spare pipe made new for a stream of `conn`, its buffers' capacity kept.
    fn reset(&mut self, conn: Token) {
        let mut up = std::mem::take(&mut self.up);
        let mut down = std::mem::take(&mut self.down);
        let mut written = std::mem::take(&mut self.written);
        up.clear();
        down.clear();
        written.clear();
        *self = Pipe {
            up,
            down,
            written,
            ..Pipe::new(conn)
        };
    }

    /// Pokes the stream's session, if it started.
    pub(crate) fn poke_session(&self) {
        if let Some(t) = self.session {
            poke(t);
        }
    }

    /// The first `n` bytes of `down` became frames.
    pub(crate) fn take(&mut self, n: usize) {
        self.down.drain(..n);
        self.down_taken += n as u64;
        let taken = self.down_taken;
        self.written.retain(|(at, _)| *at >= taken);
    }

    /// Payload bytes whose window may be given back: those no longer in `up`.
    pub(crate) fn releasable(&mut self) -> usize {
        let left = self.up.len() - self.up_at;
        let n = self.up_unreleased.saturating_sub(left);
        self.up_unreleased -= n;
        n
    }
}

/// A pipe, whether its connection's session was poked for it since it last looked (outside the
/// pipe's cell, so the connection's session passes over the pipes of streams that did nothing
/// without opening them), and what the stream's session asks of its client connection.
#[derive(Debug)]
pub(crate) struct Shared {
    poked: Cell<bool>,
    /// The note of the head the stream's next write starts (see [`H2Stream::note_head`]),
    /// handed to the pipe by that write.
    noted: Cell<Option<Written>>,
    /// The connection is TLS (the request's scheme is `https`).
    tls: bool,
    /// The TLS server name of the connection.
    sni: Option<ThreadRc<Box<str>>>,
    pipe: RefCell<Pipe>,
}

impl Shared {
    fn new(conn: Token, tls: bool, sni: Option<ThreadRc<Box<str>>>) -> Shared {
        Shared {
            poked: Cell::new(false),
            noted: Cell::new(None),
            tls,
            sni,
            pipe: RefCell::new(Pipe::new(conn)),
        }
    }

    /// Pokes the connection's session `conn` for this pipe, unless a poke is on its way.
    fn poke_conn(&self, conn: Token) {
        if !self.poked.replace(true) {
            poke(conn);
        }
    }

    /// Whether the stream's session poked the connection's session since the last call.
    pub(crate) fn take_poked(&self) -> bool {
        self.poked.replace(false)
    }
}

/// A shared pipe.
pub(crate) type SharedPipe = ThreadRc<Shared>;

/// The pipe of `p`, to read or change. No caller holds it across a call into the other
/// session (each side only pokes the other), so it is never open twice.
pub(crate) fn open(p: &SharedPipe) -> RefMut<'_, Pipe> {
    p.pipe.borrow_mut()
}

/// The stream's session's end of a pipe: a pointer, so a [`Stream`](super::Stream) holds it
/// without a box of its own.
#[derive(Debug)]
pub(crate) struct H2Stream {
    pipe: SharedPipe,
    /// What `Stream::source` lends (a stream is never registered).
    pub no_source: NoSource,
}

/// A [`mio::event::Source`] that refuses to be registered.
#[derive(Debug, Default)]
pub(crate) struct NoSource;

impl mio::event::Source for NoSource {
    fn register(&mut self, _: &mio::Registry, _: Token, _: mio::Interest) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }
    fn reregister(&mut self, _: &mio::Registry, _: Token, _: mio::Interest) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }
    fn deregister(&mut self, _: &mio::Registry) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }
}

impl H2Stream {
    pub(crate) fn new(pipe: SharedPipe) -> H2Stream {
        H2Stream {
            pipe,
            no_source: NoSource,
        }
    }

    /// Whether the connection is TLS (the request's scheme is `https`).
    pub(crate) fn tls(&self) -> bool {
        self.pipe.tls
    }

    /// The TLS server name of the connection.
    pub(crate) fn sni(&self) -> Option<&str> {
        self.pipe.sni.as_deref().map(|name| &**name)
    }

    /// The stream's session started as `token`: the connection pokes it there.
    pub(crate) fn started(&self, token: Token) {
        open(&self.pipe).session = Some(token);
    }

    pub(crate) fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut p = open(&self.pipe);
        if p.up_reset {
            return Err(io::ErrorKind::ConnectionReset.into());
        }
        let left = p.up.len() - p.up_at;
        if left == 0 {
            if p.up_eof {
                return Ok(0);
            }
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = left.min(buf.len());
        buf[..n].copy_from_slice(&p.up[p.up_at..p.up_at + n]);
        p.up_at += n;
        if p.up_at == p.up.len() {
            p.up.clear();
            p.up_at = 0;
        }
        if p.up_unreleased > 0 {
            // Window to give back.
            self.pipe.poke_conn(p.conn);
        }
        Ok(n)
    }

    pub(crate) fn write(&self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[io::IoSlice::new(buf)])
    }

    pub(crate) fn write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let mut p = open(&self.pipe);
        if p.up_reset {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let room = DOWN_CAP.saturating_sub(p.down.len());
        if room == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if let Some(written) = self.pipe.noted.take() {
            let at = p.down_taken + p.down.len() as u64;
            p.written.push((at, written));
        }
        if p.down.capacity() == 0 {
            // One allocation for most responses (a head and a small body).
            let want: usize = bufs.iter().map(|b| b.len()).sum();
            p.down.reserve(want.clamp(2048, DOWN_CAP));
        }
        let mut n = 0;
        for b in bufs {
            let take = b.len().min(room - n);
            p.down.extend_from_slice(&b[..take]);
            n += take;
            if n == room {
                break;
            }
        }
        if n > 0 {
            self.pipe.poke_conn(p.conn);
        }
        Ok(n)
    }

    pub(crate) fn shutdown_write(&self) -> io::Result<()> {
        let mut p = open(&self.pipe);
        p.down_eof = true;
        self.pipe.poke_conn(p.conn);
        Ok(())
    }

    /// The next bytes written are the head `written` describes (see [`Pipe::written`]): kept
    /// until that write, which hands it to the pipe.
    pub(crate) fn note_head(&self, written: Written) {
        self.pipe.noted.set(Some(written));
    }

    /// The request's head went to a server (see [`Pipe::head_sent`]).
    pub(crate) fn head_sent(&self) {
        let mut p = open(&self.pipe);
        p.head_sent = true;
        self.pipe.poke_conn(p.conn);
    }

    /// The stream is cut, not ended.
    pub(crate) fn reset_on_close(&self) {
        open(&self.pipe).down_reset = true;
    }

    /// Whether the connection has bytes of the request the session has not read (as a
    /// socket's receive queue: its session reads them without waiting for an event).
    pub(crate) fn ended(&self) -> bool {
        let p = open(&self.pipe);
        p.up_eof || p.up_reset
    }
}

impl Drop for H2Stream {
    fn drop(&mut self) {
        if !self.pipe.is_here() {
            // Off its worker (never: a stream's session does not move) the pipe is leaked, not
            // opened: opening it there would panic, and a drop may run while a panic unwinds.
            return;
        }
        {
            let mut p = open(&self.pipe);
            p.closed = true;
            self.pipe.poke_conn(p.conn);
        }
        recycle(&self.pipe);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spares() -> usize {
        SPARE.with_borrow(Vec::len)
    }

    #[test]
    fn a_pipe_both_sessions_let_go_of_serves_the_next_stream_with_its_buffers() {
        trim_spares();
        let pipe = new_pipe(Token(1), false, None);
        open(&pipe).up.reserve(512);
        open(&pipe)
            .down
            .extend_from_slice(b"HTTP/1.1 200 OK\r\n\r\n");
        open(&pipe).down_eof = true;
        let stream = H2Stream::new(pipe.clone());
        // The connection lets go first: the stream's session still holds the pipe.
        recycle(&pipe);
        drop(pipe);
        assert_eq!(spares(), 0);
        // Then the stream's session: the pipe is kept, and is the next stream's.
        drop(stream);
        assert_eq!(spares(), 1);
        let again = new_pipe(Token(2), false, None);
        assert_eq!(spares(), 0);
        let p = open(&again);
        assert!(p.up.capacity() >= 512, "the buffers are kept");
        assert!(p.down.is_empty() && p.up.is_empty());
        assert!(!p.down_eof && !p.closed && p.written.is_empty());
        assert_eq!((p.conn, p.down_taken), (Token(2), 0));
    }

    /// A stream's end never leaves its worker; if one did, dropping it there would leak the pipe
    /// instead of panicking (a drop may run while a panic unwinds, which would abort).
    #[test]
    fn a_stream_dropped_off_its_thread_leaks_its_pipe_without_a_panic() {
        let pipe = new_pipe(Token(1), false, None);
        let stream = H2Stream::new(pipe.clone());
        let dropped = std::thread::spawn(move || drop(stream)).join();
        assert!(dropped.is_ok(), "no panic");
        assert_eq!(ThreadRc::holders(&pipe), 2, "leaked there, not let go of");
        assert!(!open(&pipe).closed, "its drop did not run");
    }

    #[test]
    fn a_pipe_with_big_buffers_or_still_held_is_not_kept() {
        trim_spares();
        let big = new_pipe(Token(1), false, None);
        open(&big).down.reserve(SPARE_CAPACITY + 1);
        recycle(&big);
        assert_eq!(spares(), 0);
        let many_notes = new_pipe(Token(1), false, None);
        open(&many_notes).written.reserve(SPARE_NOTES + 1);
        recycle(&many_notes);
        assert_eq!(spares(), 0, "a pipe with room for many notes is not kept");
        let held = new_pipe(Token(1), false, None);
        let other = held.clone();
        recycle(&held);
        assert_eq!(spares(), 0);
        drop(held);
        recycle(&other);
        assert_eq!(spares(), 1);
        trim_spares();
        assert_eq!(spares(), 0);
    }
}
