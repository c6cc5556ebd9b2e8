//! The listeners a worker watches: registered (exclusive wake-ups) as they appear in the shared
//! list, let go as they leave it.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;

use super::{Worker, WorkerListener, LISTENER_BASE};
use crate::sys;

impl Worker {
    pub(super) fn register_listener(&self, i: usize) -> io::Result<()> {
        let l = &self.listeners[i].listener;
        sys::epoll_add_exclusive(
            self.poll.as_raw_fd(),
            l.socket.as_fd(),
            (LISTENER_BASE + l.id as usize) as u64,
        )
    }

    /// Whether this worker accepts on listener `i` now: while it accepts clients (`concentrate`),
    /// or always when the listener's clients cannot move to another worker later.
    pub(super) fn takes(&self, i: usize) -> bool {
        self.accepting || self.listeners[i].pinned
    }

    pub(super) fn deregister_listener(&self, i: usize) {
        let _ = sys::epoll_del(
            self.poll.as_raw_fd(),
            self.listeners[i].listener.socket.as_fd(),
        );
    }

    /// Registers listeners that appeared in the shared list and lets go of those that left it.
    /// Sessions of a removed listener carry on: they hold their pool, not the listener.
    pub(super) fn sync_listeners(&mut self) -> io::Result<()> {
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
            });
            if self.takes(self.listeners.len() - 1) {
                self.register_listener(self.listeners.len() - 1)?;
            }
        }
        Ok(())
    }
}
