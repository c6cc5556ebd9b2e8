//! HTTP requests waiting for a server of a full pool (docs/design.md#the-server-queue).
//!
//! When every usable server of a pool is at its `max` (MAXCONN), an HTTP request waits in the
//! pool's [`Queue`] for up to the pool's `queue_timeout` instead of being refused: HAProxy's server
//! queue. A FastCGI server needs it most: a php-fpm child serves one connection until it is closed,
//! so a server's `max` is its `pm.max_children` and a request over it must wait for a child, not
//! open a connection no child will accept.
//!
//! A waiter is its session's client token and its worker's [`Mailbox`]. Whenever a request's
//! claim on a server of the pool ends ([`crate::backend::ServerLease`] dropped, in any worker),
//! the oldest waiter is taken from the queue and posted to its worker's mailbox, and that
//! worker woken: one wake per freed place, so a freed place is offered to the oldest request in
//! line first. Requests that arrive while others wait join the line behind them. A woken waiter
//! that finds the place taken meanwhile goes back to the head of the line; one that is gone (its
//! client closed) passes the wake on. Queued requests also look again every [`RECHECK_MS`], so a
//! place freed in a way that posts nothing (a control command raising `max`) is found.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use mio::{Token, Waker};

/// How often a queued request looks for a free server without being woken (clock ms).
pub(crate) const RECHECK_MS: u64 = 100;

/// A pool's line of waiting requests, shared by all workers and kept across the pool's rebuilds
/// (reloads, control changes), like its round-robin cursor.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    waiters: Mutex<VecDeque<Waiter>>,
    /// How many wait now (written under the lock; read without it on the data path).
    len: AtomicUsize,
    /// Requests that ever waited, and those given up at `queue_timeout` (the metrics).
    pub queued: AtomicU64,
    pub timed_out: AtomicU64,
}

#[derive(Debug)]
struct Waiter {
    token: Token,
    mailbox: Arc<Mailbox>,
}

/// Why a session is woken through its worker's [`Mailbox`].
#[derive(Debug)]
pub(crate) enum Wake {
    /// A place came free in this queue (passed on when the session no longer waits there).
    Queue(Arc<Queue>),
    /// The file range it waited for is read into the page cache (`web::readahead`).
    Read,
}

/// A worker's share of the wakes posted by other threads (a freed place in a pool's queue, a
/// file range read), and its waker.
#[derive(Debug)]
pub(crate) struct Mailbox {
    woken: Mutex<Vec<(Token, Wake)>>,
    /// Something was posted since the worker last took its wakes (read without the lock at the
    /// end of each of its turns).
    pending: AtomicBool,
    waker: Arc<Waker>,
}

thread_local! {
    /// The address of the mailbox of the worker running on this thread (0 elsewhere): a wake
    /// posted from the worker's own turn needs no `eventfd` write, the turn's end takes it.
    static OWN: Cell<usize> = const { Cell::new(0) };
}

impl Mailbox {
    pub(crate) fn new(waker: Arc<Waker>) -> Mailbox {
        Mailbox {
            woken: Mutex::new(Vec::new()),
            pending: AtomicBool::new(false),
            waker,
        }
    }

    /// Marks this mailbox as the one of the worker running on the calling thread.
    pub(crate) fn own(self: &Arc<Self>) {
        OWN.with(|o| o.set(Arc::as_ptr(self) as usize));
    }

    /// Whether wakes were posted since the last [`Mailbox::take`] (no lock).
    pub(crate) fn is_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Moves the posted wakes into `out` (the worker's reused list).
    pub(crate) fn take(&self, out: &mut Vec<(Token, Wake)>) {
        let mut woken = lock(&self.woken);
        self.pending.store(false, Ordering::Release);
        out.append(&mut woken);
    }

    /// Posts a wake; the worker is woken unless this is its own thread (its turn's end takes
    /// the wake). Err when the worker has stopped.
    fn post(&self, token: Token, wake: Wake) -> std::io::Result<()> {
        lock(&self.woken).push((token, wake));
        self.pending.store(true, Ordering::Release);
        if OWN.with(Cell::get) == self as *const Mailbox as usize {
            return Ok(());
        }
        self.waker.wake()
    }

    /// Posts that the file range session `token` waited for is read, and wakes the worker.
    pub(crate) fn post_read(&self, token: Token) {
        // A worker that cannot be woken has stopped, and its sessions with it.
        let _ = self.post(token, Wake::Read);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Queue {
    /// How many requests wait now.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Puts the session with client token `token` in line: at the back when it arrives, at the
    /// front when it was woken and lost the place (`front`).
    pub(crate) fn wait(&self, token: Token, mailbox: &Arc<Mailbox>, front: bool) {
        let mut w = lock(&self.waiters);
        let waiter = Waiter {
            token,
            mailbox: mailbox.clone(),
        };
        if front {
            w.push_front(waiter);
        } else {
            w.push_back(waiter);
            self.queued.fetch_add(1, Ordering::Relaxed);
        }
        self.len.store(w.len(), Ordering::Relaxed);
    }

    /// Takes the session out of line (it got a server on its own look, timed out or closed).
    /// True if it was in line.
    pub(crate) fn leave(&self, token: Token) -> bool {
        let mut w = lock(&self.waiters);
        let Some(at) = w.iter().position(|x| x.token == token) else {
            return false;
        };
        w.remove(at);
        self.len.store(w.len(), Ordering::Relaxed);
        true
    }

    /// A place on one of the pool's servers was freed: the oldest waiter is posted to its
    /// worker, which is woken. Nothing when no one waits (the usual case, inlined: a lease's end
    /// pays no call for it).
    #[inline(always)]
    pub(crate) fn wake_one(self: &Arc<Self>) {
        if self.len() != 0 {
            self.wake_waiter();
        }
    }

    #[inline(never)]
    fn wake_waiter(self: &Arc<Self>) {
        let waiter = {
            let mut w = lock(&self.waiters);
            let waiter = w.pop_front();
            self.len.store(w.len(), Ordering::Relaxed);
            waiter
        };
        let Some(Waiter { token, mailbox }) = waiter else {
            return;
        };
        // A worker that cannot be woken has stopped: its sessions are gone, so pass the wake on.
        if mailbox.post(token, Wake::Queue(self.clone())).is_err() {
            lock(&mailbox.woken).retain(|(t, _)| *t != token);
            self.wake_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use mio::{Events, Poll, Token, Waker};

    use super::{Mailbox, Queue};

    const WAKE: Token = Token(7);

    fn mailbox() -> (Poll, Arc<Mailbox>) {
        let poll = Poll::new().unwrap();
        let waker = Arc::new(Waker::new(poll.registry(), WAKE).unwrap());
        (poll, Arc::new(Mailbox::new(waker)))
    }

    fn woken(m: &Mailbox) -> Vec<Token> {
        let mut out = Vec::new();
        m.take(&mut out);
        out.into_iter().map(|(t, _)| t).collect()
    }

    #[test]
    fn a_freed_place_goes_to_the_oldest_waiter_and_wakes_its_worker() {
        let (mut poll, m) = mailbox();
        let q = Arc::new(Queue::default());
        q.wait(Token(1), &m, false);
        q.wait(Token(2), &m, false);
        assert_eq!(q.len(), 2);
        q.wake_one();
        assert_eq!(q.len(), 1);
        let mut events = Events::with_capacity(4);
        poll.poll(&mut events, Some(Duration::from_secs(5)))
            .unwrap();
        assert!(events.iter().any(|e| e.token() == WAKE));
        assert_eq!(woken(&m), [Token(1)]);
        q.wake_one();
        assert_eq!(woken(&m), [Token(2)]);
        assert_eq!(q.len(), 0);
        assert_eq!(q.queued.load(std::sync::atomic::Ordering::Relaxed), 2);
    }

    #[test]
    fn a_waiter_that_lost_its_place_goes_back_to_the_head_of_the_line() {
        let (_poll, m) = mailbox();
        let q = Arc::new(Queue::default());
        q.wait(Token(1), &m, false);
        q.wait(Token(2), &m, true);
        q.wake_one();
        assert_eq!(woken(&m), [Token(2)]);
        // Going back to the head is no new arrival for the count.
        assert_eq!(q.queued.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[test]
    fn a_waiter_that_leaves_is_never_woken() {
        let (_poll, m) = mailbox();
        let q = Arc::new(Queue::default());
        q.wait(Token(1), &m, false);
        q.wait(Token(2), &m, false);
        assert!(q.leave(Token(1)));
        assert!(!q.leave(Token(1)));
        q.wake_one();
        q.wake_one();
        assert_eq!(woken(&m), [Token(2)]);
    }

    #[test]
    fn wakes_go_to_each_waiters_own_worker() {
        let (_p1, a) = mailbox();
        let (_p2, b) = mailbox();
        let q = Arc::new(Queue::default());
        q.wait(Token(1), &a, false);
        q.wait(Token(2), &b, false);
        q.wake_one();
        q.wake_one();
        assert_eq!(woken(&a), [Token(1)]);
        assert_eq!(woken(&b), [Token(2)]);
    }

    #[test]
    fn a_place_freed_with_no_one_waiting_posts_nothing() {
        let (_poll, m) = mailbox();
        let q = Arc::new(Queue::default());
        q.wake_one();
        assert!(woken(&m).is_empty());
    }
}
