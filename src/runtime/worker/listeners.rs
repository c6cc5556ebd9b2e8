//! The listeners a worker watches: registered as they appear in the shared list, let go as they
//! leave it. A TCP listener is watched by the worker's epoll instance (exclusive wake-ups, then
//! `accept4`) or, with `accept` io_uring, by a multishot accept in the worker's ring, whose
//! completions ([`Worker::reap`]) are opened as `accept4`'s clients are. A listener with one
//! socket per worker (`listen_per_worker`) is watched on this worker's share of its sockets.

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use super::admit::EMFILE_PAUSE_MS;
use super::{Worker, WorkerListener, LISTENER_BASE};
use crate::listener::ListenSocket;
use crate::net::{ClientAddr, Stream};
use crate::sys;

/// A ring accept's key: the listener's id, and in the top bits which of its sockets.
fn ring_key(id: u64, shard: usize) -> u64 {
    id | (shard as u64) << SHARD_SHIFT
}

/// Where a ring key's socket index starts (listener ids stay far below).
const SHARD_SHIFT: u32 = 48;

impl Worker {
    /// Watches this worker's share of listener `i`'s sockets.
    pub(super) fn register_listener(&mut self, i: usize) -> io::Result<()> {
        for k in 0..self.listeners[i].share.len() {
            let shard = self.listeners[i].share[k];
            self.register_shard(i, shard)?;
        }
        Ok(())
    }

    fn register_shard(&mut self, i: usize, shard: usize) -> io::Result<()> {
        let w = &mut self.listeners[i];
        let l = &w.listener;
        let Some(fd) = l.socket.shard_fd(shard) else {
            return Ok(());
        };
        if let (Some(ring), ListenSocket::Tcp(_) | ListenSocket::TcpShards(_)) =
            (&mut self.ring, &l.socket)
        {
            ring.accept(fd, ring_key(l.id, shard))?;
            w.armed = true;
            return Ok(());
        }
        sys::epoll_add_exclusive(
            self.poll.as_raw_fd(),
            fd,
            (LISTENER_BASE + l.id as usize) as u64,
        )
    }

    /// Whether this worker accepts on listener `i` now: while it accepts clients (`concentrate`),
    /// or always when the listener's clients cannot move to another worker later, or when the
    /// sockets it watches are its own (nobody else would accept their clients).
    pub(super) fn takes(&self, i: usize) -> bool {
        self.accepting || self.listeners[i].pinned || self.listeners[i].own
    }

    /// Stops watching listener `i`. A multishot accept is cancelled before this returns; the
    /// clients it accepted until then wait in the ring for [`Worker::reap`].
    pub(super) fn deregister_listener(&mut self, i: usize) {
        let w = &mut self.listeners[i];
        let l = &w.listener;
        if let (Some(ring), ListenSocket::Tcp(_) | ListenSocket::TcpShards(_)) =
            (&mut self.ring, &l.socket)
        {
            w.armed = false;
            for &shard in &w.share {
                if let Err(e) = ring.cancel(ring_key(l.id, shard)) {
                    tracing::warn!("worker {}: cannot cancel an accept: {e}", self.id);
                }
            }
            return;
        }
        for &shard in &w.share {
            if let Some(fd) = l.socket.shard_fd(shard) {
                let _ = sys::epoll_del(self.poll.as_raw_fd(), fd);
            }
        }
    }

    /// Opens the clients the ring accepted, and arms again an accept the kernel ended while this
    /// worker still wants it (not one it cancelled, nor one whose listener now rests).
    pub(super) fn reap(&mut self, now: u64) {
        let Some(ring) = self.ring.as_mut() else {
            return;
        };
        let mut accepted = std::mem::take(&mut self.accepted);
        if let Err(e) = ring.take(&mut accepted) {
            tracing::warn!("worker {}: cannot read accepted clients: {e}", self.id);
        }
        for a in accepted.drain(..) {
            let (id, shard) = (
                a.key & ((1 << SHARD_SHIFT) - 1),
                (a.key >> SHARD_SHIFT) as usize,
            );
            let Some(li) = self.listeners.iter().position(|l| l.listener.id == id) else {
                // Its listener left before the accept was cancelled: the client is closed.
                continue;
            };
            let listener = self.listeners[li].listener.clone();
            let cancelled =
                matches!(&a.result, Err(e) if e.raw_os_error() == Some(libc::ECANCELED));
            let client = a.result.and_then(|fd| {
                let s = TcpStream::from(fd);
                let peer = s.peer_addr()?;
                Ok((
                    Stream::Tcp(mio::net::TcpStream::from_std(s)),
                    ClientAddr::Ip(peer),
                ))
            });
            let failed = client.is_err();
            let open = cancelled || self.accepted(li, &listener, client, now);
            if !a.armed && !cancelled && open && self.listeners[li].armed {
                // The kernel ended the accept. After an error it is armed again only once the
                // listener has rested (`paused_until`): an error that repeats does not spin.
                let again = if failed {
                    Err(io::Error::other("the accept ended with an error"))
                } else {
                    self.register_shard(li, shard)
                };
                if let Err(e) = again {
                    tracing::debug!(
                        "worker {}: accepting again in {EMFILE_PAUSE_MS} ms: {e}",
                        self.id
                    );
                    // The listener rests as a whole: the accepts on its other sockets of this
                    // worker are cancelled too (resting, it is not cancelled again when it
                    // leaves or the worker drains), and all are armed again when it resumes.
                    self.deregister_listener(li);
                    self.listeners[li].paused_until = now + EMFILE_PAUSE_MS;
                }
            }
        }
        self.accepted = accepted;
    }

    /// Registers listeners that appeared in the shared list and lets go of those that left it.
    /// Sessions of a removed listener carry on: they hold their pool, not the listener.
    pub(super) fn sync_listeners(&mut self, now: u64) -> io::Result<()> {
        let current = self.shared.listeners.load_full();
        let seen = Arc::as_ptr(&current) as usize;
        if seen == self.listeners_seen || self.draining {
            return Ok(());
        }
        self.listeners_seen = seen;
        self.udp.sync(&current, self.poll.as_raw_fd());
        let mut i = 0;
        while i < self.listeners.len() {
            let id = self.listeners[i].listener.id;
            if current.iter().any(|l| l.id == id) {
                i += 1;
                continue;
            }
            if self.listeners[i].paused_until == 0 {
                self.deregister_listener(i);
                // What its accept took before it was cancelled is served.
                self.reap(now);
            }
            self.listeners.swap_remove(i);
        }
        for l in current.iter() {
            if self.listeners.iter().any(|w| w.listener.id == l.id) || l.socket.udp().is_some() {
                continue;
            }
            self.listeners.push(WorkerListener {
                listener: l.clone(),
                paused_until: 0,
                pinned: l.clients_pinned(),
                armed: false,
                share: l.socket.share(self.id, self.shared.loads.len()),
                own: l.socket.is_sharded(),
            });
            if self.takes(self.listeners.len() - 1) {
                self.register_listener(self.listeners.len() - 1)?;
            }
        }
        Ok(())
    }
}
