//! The admin listener's event loop: one thread, one mio poll, every connection nonblocking.
//!
//! A connection goes through three steps, each with a deadline: read the request head (the whole
//! head within `HEAD_DEADLINE`, however slowly it trickles), send the answer (`SEND_DEADLINE`),
//! then linger: after our FIN, read and discard what the client still sends (bounded in time and
//! bytes), so that closing never turns into a reset that destroys the answer in the client's
//! receive queue.
//!
//! At most `MAX_CONNECTIONS` are open. When full, the connection that has waited longest without a
//! complete head is closed to make room, so a client that sends its request at once (a scrape) is
//! served however many idle or slow connections are held against the listener. One descriptor is
//! kept in reserve (`/dev/null`): when accept fails for lack of descriptors, the reserve is given
//! up to accept the client and answer `503`, then taken back, so the listener never goes silent.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use super::http::{self, HeadError, Request, Response};

/// Connections open at once; when full, the oldest one without a complete head makes room.
pub(crate) const MAX_CONNECTIONS: usize = 1024;
/// How long a client has to send its whole request head.
pub(crate) const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// How long a client has to take our whole answer.
const SEND_DEADLINE: Duration = Duration::from_secs(5);
/// After answering, how long and how much we read and discard before closing.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 256 * 1024;
/// How often deadlines are checked while connections are open (their precision).
const TICK: Duration = Duration::from_millis(100);
/// How often the loop wakes with nothing to do (to notice a takeover).
const IDLE_TICK: Duration = Duration::from_millis(500);
/// Connections accepted per wake-up before the open ones get a turn.
const ACCEPT_BATCH: usize = 256;
/// Accept failures are logged at most this often.
const WARN_EVERY: Duration = Duration::from_secs(10);
const LISTENER: Token = Token(usize::MAX);

/// The loop's state: the listening socket, the open connections and the reserved descriptor.
pub(super) struct Server<A> {
    socket: Arc<TcpListener>,
    poll: Poll,
    /// Indexed by token; `free` lists the empty slots.
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    open: usize,
    /// Given up for one accept when the process is out of descriptors.
    reserve: Option<File>,
    backlog: Backlog,
    last_warning: Option<Instant>,
    answer: A,
}

/// What is known of the listener's queue after accepting.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Backlog {
    /// Drained: the next connection will wake the poll.
    Empty,
    /// The batch ended with connections still queued: accept again at once.
    More,
    /// Accept failed (out of descriptors or memory): try again at the next tick.
    Stalled,
}

struct Conn {
    stream: TcpStream,
    opened: Instant,
    deadline: Instant,
    step: Step,
}

enum Step {
    /// Reading the request head (the bytes so far).
    Head(Vec<u8>),
    Send {
        out: Vec<u8>,
        sent: usize,
    },
    /// Our FIN is sent; discarding what the client still sends.
    Linger {
        drained: usize,
    },
    Done,
}

/// What reading a head gave.
enum HeadRead {
    /// The socket has nothing more for now.
    Wait,
    /// The client closed or reset before a whole head: nothing to answer.
    Closed,
    Request(Request),
    /// An error status to answer with.
    Refused(u16),
}

impl<A: FnMut(&Request) -> Response> Server<A> {
    /// A server accepting on `socket` (already bound and listening) and answering every complete
    /// request with `answer`.
    pub(super) fn new(socket: Arc<TcpListener>, answer: A) -> io::Result<Server<A>> {
        socket.set_nonblocking(true)?;
        let poll = Poll::new()?;
        poll.registry().register(
            &mut SourceFd(&socket.as_raw_fd()),
            LISTENER,
            Interest::READABLE,
        )?;
        Ok(Server {
            socket,
            poll,
            conns: Vec::new(),
            free: Vec::new(),
            open: 0,
            reserve: open_reserve(),
            backlog: Backlog::Empty,
            last_warning: None,
            answer,
        })
    }

    /// Serves until `stop` says so (checked at every wake-up) or the poll fails.
    pub(super) fn run(mut self, stop: impl Fn() -> bool) {
        let mut events = Events::with_capacity(256);
        let mut next_sweep = Instant::now() + TICK;
        while !stop() {
            let timeout = match self.backlog {
                Backlog::More => Duration::ZERO,
                Backlog::Stalled => TICK,
                Backlog::Empty if self.open > 0 => TICK,
                Backlog::Empty => IDLE_TICK,
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!("admin listener: {e}");
                    return;
                }
            }
            let now = Instant::now();
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept_all(now),
                    Token(i) => self.advance(i, now),
                }
            }
            if self.backlog != Backlog::Empty {
                self.accept_all(now);
            }
            if now >= next_sweep {
                self.sweep(now);
                next_sweep = now + TICK;
            }
        }
    }

    fn accept_all(&mut self, now: Instant) {
        self.backlog = Backlog::More;
        for _ in 0..ACCEPT_BATCH {
            match self.socket.accept() {
                Ok((stream, _)) => self.admit(stream, now, false),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.backlog = Backlog::Empty;
                    return;
                }
                Err(e) if is_transient(&e) => {}
                Err(e) if is_out_of_descriptors(&e) => {
                    self.accept_with_reserve(now, &e);
                    self.backlog = Backlog::Stalled;
                    return;
                }
                Err(e) => {
                    self.warn(format_args!("admin listener: accept failed: {e}"));
                    self.backlog = Backlog::Stalled;
                    return;
                }
            }
        }
    }

    /// Out of descriptors: gives up the reserved one to accept a client and answer it `503`.
    fn accept_with_reserve(&mut self, now: Instant, e: &io::Error) {
        if self.reserve.take().is_none() {
            // In use by an earlier client: the next tick tries again.
            return;
        }
        match self.socket.accept() {
            Ok((stream, _)) => {
                self.warn(format_args!(
                    "admin listener: accept failed ({e}); answering 503 with the reserved descriptor"
                ));
                self.admit(stream, now, true);
            }
            Err(_) => self.reserve = open_reserve(),
        }
    }

    /// Takes a new connection in (as `503 busy` when `out_of_descriptors`), making room if full.
    fn admit(&mut self, stream: std::net::TcpStream, now: Instant, out_of_descriptors: bool) {
        if stream.set_nonblocking(true).is_err() {
            return self.restore_reserve();
        }
        let mut stream = TcpStream::from_std(stream);
        let _ = stream.set_nodelay(true);
        if self.open >= MAX_CONNECTIONS && !self.evict_slowest() {
            // Every slot is answering or lingering (each for a bounded time): say so at once.
            let _ = stream.write(&busy().into_bytes(true));
            let _ = stream.shutdown(Shutdown::Write);
            drop(stream);
            return self.restore_reserve();
        }
        let i = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        let interest = Interest::READABLE | Interest::WRITABLE;
        if self
            .poll
            .registry()
            .register(&mut stream, Token(i), interest)
            .is_err()
        {
            self.free.push(i);
            drop(stream);
            return self.restore_reserve();
        }
        let mut conn = Conn {
            stream,
            opened: now,
            deadline: now + HEAD_DEADLINE,
            step: Step::Head(Vec::new()),
        };
        if out_of_descriptors {
            conn.respond(busy(), true, now);
        }
        self.conns[i] = Some(conn);
        self.open += 1;
        // Not advanced here: registering queued its readiness, so the next poll reports it (and
        // advancing it before that poll was seen to leave the client's FIN unreported).
    }

    /// Closes the connection that has waited longest without a complete head; false if none is
    /// still reading one.
    fn evict_slowest(&mut self) -> bool {
        let oldest = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| match c {
                Some(c) if matches!(c.step, Step::Head(_)) => Some((c.opened, i)),
                _ => None,
            })
            .min();
        match oldest {
            Some((_, i)) => {
                self.close(i);
                true
            }
            None => false,
        }
    }

    fn advance(&mut self, i: usize, now: Instant) {
        let Some(conn) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        conn.advance(now, &mut self.answer);
        if matches!(conn.step, Step::Done) {
            self.close(i);
        }
    }

    /// Acts on passed deadlines; takes the reserve back if it could not be at once.
    fn sweep(&mut self, now: Instant) {
        for i in 0..self.conns.len() {
            let Some(conn) = self.conns[i].as_mut() else {
                continue;
            };
            if now < conn.deadline {
                continue;
            }
            if matches!(&conn.step, Step::Head(bytes) if !bytes.is_empty()) {
                // Started but never finished: say why we close.
                conn.respond(Response::error(408), true, now);
                self.advance(i, now);
            } else {
                // Never started, or too slow to take the answer or to close: nothing more to say.
                self.close(i);
            }
        }
        self.restore_reserve();
    }

    fn close(&mut self, i: usize) {
        let Some(mut conn) = self.conns.get_mut(i).and_then(Option::take) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut conn.stream);
        drop(conn);
        self.free.push(i);
        self.open -= 1;
        self.restore_reserve();
    }

    fn restore_reserve(&mut self) {
        if self.reserve.is_none() {
            self.reserve = open_reserve();
        }
    }

    /// Logs an accept problem at most once per `WARN_EVERY` (it repeats while it lasts).
    fn warn(&mut self, what: std::fmt::Arguments<'_>) {
        let now = Instant::now();
        if self
            .last_warning
            .is_some_and(|t| now.duration_since(t) < WARN_EVERY)
        {
            tracing::debug!("{what}");
            return;
        }
        self.last_warning = Some(now);
        tracing::warn!("{what}");
    }
}

impl Conn {
    /// Moves the connection as far as its socket allows now.
    fn advance(&mut self, now: Instant, answer: &mut impl FnMut(&Request) -> Response) {
        loop {
            match &mut self.step {
                Step::Head(buf) => match read_head(&mut self.stream, buf) {
                    HeadRead::Wait => return,
                    HeadRead::Closed => self.step = Step::Done,
                    HeadRead::Request(req) => {
                        let with_body = req.method != "HEAD";
                        self.respond(answer(&req), with_body, now);
                    }
                    HeadRead::Refused(status) => self.respond(Response::error(status), true, now),
                },
                Step::Send { out, sent } => match write_out(&mut self.stream, out, sent) {
                    Ok(false) => return,
                    Ok(true) => {
                        let _ = self.stream.shutdown(Shutdown::Write);
                        self.deadline = now + LINGER;
                        self.step = Step::Linger { drained: 0 };
                    }
                    Err(_) => self.step = Step::Done,
                },
                Step::Linger { drained } => match discard(&mut self.stream, drained) {
                    Ok(false) => return,
                    Ok(true) | Err(_) => self.step = Step::Done,
                },
                Step::Done => return,
            }
        }
    }

    fn respond(&mut self, response: Response, with_body: bool, now: Instant) {
        self.deadline = now + SEND_DEADLINE;
        self.step = Step::Send {
            out: response.into_bytes(with_body),
            sent: 0,
        };
    }
}

/// Reads what the socket has into `buf` (up to `MAX_HEAD`) and parses it.
fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> HeadRead {
    let mut chunk = [0u8; 4096];
    loop {
        let room = (http::MAX_HEAD - buf.len()).min(chunk.len());
        match stream.read(&mut chunk[..room]) {
            Ok(0) => return HeadRead::Closed,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return HeadRead::Wait,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return HeadRead::Closed,
        }
        match http::parse(buf) {
            Ok(Some(req)) => return HeadRead::Request(req),
            Ok(None) if buf.len() >= http::MAX_HEAD => return HeadRead::Refused(431),
            Ok(None) => {}
            Err(HeadError::TooLarge) => return HeadRead::Refused(431),
            Err(HeadError::Malformed) => return HeadRead::Refused(400),
        }
    }
}

/// Writes what is left of `out`: Ok(true) once all is sent, Ok(false) when the socket is full.
fn write_out(stream: &mut TcpStream, out: &[u8], sent: &mut usize) -> io::Result<bool> {
    while *sent < out.len() {
        match stream.write(&out[*sent..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => *sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Reads and drops what the client sends: Ok(true) at its end (or `LINGER_BYTES`), Ok(false) when
/// nothing more is there for now.
fn discard(stream: &mut TcpStream, drained: &mut usize) -> io::Result<bool> {
    let mut sink = [0u8; 4096];
    while *drained < LINGER_BYTES {
        match stream.read(&mut sink) {
            Ok(0) => return Ok(true),
            Ok(n) => *drained += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn busy() -> Response {
    Response::error(503).with_header("Retry-After", "1")
}

/// The reserved descriptor; None while the process has none to spare.
fn open_reserve() -> Option<File> {
    File::open("/dev/null").ok()
}

fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
    )
}

fn is_out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}
