//! A worker's server connections for HTTP sessions, and its pool of idle kept-alive ones
//! (DESIGN §6.3): each server connection has a slot whose token stays the same for its whole
//! life, busy (lent to a session) or idle (kept for the next request to that server), so lending
//! one out or taking it back costs no syscall.
//!
//! An idle connection stays registered: any readable event on it (the server closed it, or sent
//! bytes no request asked for) closes it at once, so a connection the server gave up is never
//! lent out. Idle connections are kept per server, newest last, at most `server_keepalive` per
//! server, and closed after `server_idle_timeout`. Admission never depends on how many client
//! connections are open.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use mio::event::Event;
use mio::Token;

use crate::backend::Server;
use crate::metrics::ServerConnCounts;
use crate::net::Stream;

/// Server connection slots use tokens from here up (below the listeners' and the waker's).
pub(crate) const CONN_BASE: usize = 1 << 59;
const GEN_MASK: u32 = (1 << 24) - 1;

#[derive(Debug)]
enum State {
    Free,
    /// Lent to the session registered with this (client) token.
    Busy(Token),
    Idle {
        stream: Stream,
        server: Arc<Server>,
        /// Clock ms when it is closed if still idle.
        expires: u64,
    },
}

#[derive(Debug)]
struct Slot {
    gen: u32,
    state: State,
}

/// Where an event on a server connection goes.
pub(crate) enum Owner {
    /// To the session with this client token.
    Session(Token),
    /// Nobody: the connection was idle (and is closed if the event says so) or is gone.
    Nobody,
}

/// A worker's server connections (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct ServerConns {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Idle connection slots per server (keyed by the server's address in memory; the idle
    /// entry holds the `Arc`, so the key stays valid), oldest first.
    idle: HashMap<usize, Vec<u32>>,
    idle_count: usize,
    /// No idle connection expires before this (clock ms; u64::MAX when none is idle).
    next_expiry: Option<u64>,
    /// Server connections opened and reused, for the metrics.
    pub opened: u64,
    pub reused: u64,
}

fn key(server: &Arc<Server>) -> usize {
    Arc::as_ptr(server) as usize
}

impl ServerConns {
    fn token(&self, id: u32) -> Token {
        Token(CONN_BASE | ((self.slots[id as usize].gen as usize) << 32) | id as usize)
    }

    /// The slot and generation a token names, if it is a server connection token.
    fn decode(t: Token) -> Option<(usize, u32)> {
        if t.0 & CONN_BASE == 0 || t.0 >= CONN_BASE << 1 {
            return None;
        }
        let rest = t.0 & !CONN_BASE;
        Some((rest & 0xffff_ffff, (rest >> 32) as u32))
    }

    /// Whether a token is a server connection's.
    pub(crate) fn is_conn_token(t: Token) -> bool {
        Self::decode(t).is_some()
    }

    /// A new slot lent to the session of `owner`, for a connection about to be opened: its id and
    /// the token to register the socket with.
    pub(crate) fn open(&mut self, owner: Token) -> (u32, Token) {
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.slots.push(Slot {
                    gen: 0,
                    state: State::Free,
                });
                (self.slots.len() - 1) as u32
            }
        };
        self.slots[id as usize].state = State::Busy(owner);
        self.opened += 1;
        (id, self.token(id))
    }

    /// The slot is free again: its connection was closed or never opened, or (when it was idle)
    /// is handed back to be dropped, which closes it.
    pub(crate) fn forget(&mut self, id: u32) -> Option<Stream> {
        let slot = self.slots.get_mut(id as usize)?;
        let was = std::mem::replace(&mut slot.state, State::Free);
        slot.gen = (slot.gen + 1) & GEN_MASK;
        self.free.push(id);
        match was {
            State::Idle { stream, server, .. } => {
                self.unlist(&server, id);
                Some(stream)
            }
            _ => None,
        }
    }

    fn unlist(&mut self, server: &Arc<Server>, id: u32) {
        if let Some(list) = self.idle.get_mut(&key(server)) {
            if let Some(i) = list.iter().position(|&x| x == id) {
                list.remove(i);
                self.idle_count -= 1;
            }
            if list.is_empty() {
                self.idle.remove(&key(server));
            }
        }
    }

    /// The newest idle connection to `server`, lent to `owner`.
    pub(crate) fn checkout(&mut self, server: &Arc<Server>, owner: Token) -> Option<(u32, Stream)> {
        let list = self.idle.get_mut(&key(server))?;
        let id = list.pop()?;
        if list.is_empty() {
            self.idle.remove(&key(server));
        }
        self.idle_count -= 1;
        let slot = &mut self.slots[id as usize];
        match std::mem::replace(&mut slot.state, State::Busy(owner)) {
            State::Idle { stream, .. } => {
                self.reused += 1;
                Some((id, stream))
            }
            other => {
                // Not idle after all (cannot happen): put it back as it was.
                slot.state = other;
                None
            }
        }
    }

    /// A session is done with a connection the server may take another request on: kept idle
    /// if `server` has fewer than `max_idle` idle ones, else closed.
    pub(crate) fn checkin(
        &mut self,
        id: u32,
        stream: Stream,
        server: Arc<Server>,
        max_idle: u32,
        expires: u64,
    ) {
        let list = self.idle.entry(key(&server)).or_default();
        if list.len() >= max_idle as usize {
            drop(stream);
            self.forget(id);
            return;
        }
        list.push(id);
        self.idle_count += 1;
        self.next_expiry = Some(self.next_expiry.map_or(expires, |n| n.min(expires)));
        self.slots[id as usize].state = State::Idle {
            stream,
            server,
            expires,
        };
    }

    /// Who an event on a server connection is for. An event on an idle connection that says it
    /// can be read (EOF, a reset, unexpected bytes) closes it.
    pub(crate) fn owner(&mut self, ev: &Event) -> Owner {
        let Some((id, gen)) = Self::decode(ev.token()) else {
            return Owner::Nobody;
        };
        let Some(slot) = self.slots.get(id) else {
            return Owner::Nobody;
        };
        if slot.gen != gen {
            return Owner::Nobody;
        }
        match &slot.state {
            State::Busy(owner) => Owner::Session(*owner),
            State::Idle { stream, .. } => {
                if (ev.is_readable() || ev.is_read_closed() || ev.is_error()) && gone(stream) {
                    drop(self.forget(id as u32));
                }
                Owner::Nobody
            }
            State::Free => Owner::Nobody,
        }
    }

    /// When [`ServerConns::expire`] has something to do.
    pub(crate) fn next_expiry(&self) -> Option<u64> {
        self.next_expiry
    }

    /// Closes the idle connections whose time is up (a walk over the idle ones, only when the
    /// earliest is due).
    pub(crate) fn expire(&mut self, now: u64) {
        if self.next_expiry.is_none_or(|n| n > now) {
            return;
        }
        let mut due = Vec::new();
        let mut next = u64::MAX;
        for list in self.idle.values() {
            for &id in list {
                if let State::Idle { expires, .. } = &self.slots[id as usize].state {
                    if *expires <= now {
                        due.push(id);
                    } else {
                        next = next.min(*expires);
                    }
                }
            }
        }
        for id in due {
            drop(self.forget(id));
        }
        self.next_expiry = (next != u64::MAX).then_some(next);
    }

    /// Idle connections held, for the metrics.
    pub(crate) fn idle(&self) -> usize {
        self.idle_count
    }

    /// Opened, reused and idle, as the worker publishes them for the metrics.
    pub(crate) fn counts(&self) -> ServerConnCounts {
        ServerConnCounts {
            opened: self.opened,
            reused: self.reused,
            idle: self.idle() as u64,
        }
    }

    /// Closes every idle connection (the worker is stopping).
    pub(crate) fn close_idle(&mut self) {
        let ids: Vec<u32> = self.idle.values().flatten().copied().collect();
        for id in ids {
            drop(self.forget(id));
        }
    }
}

/// Whether an idle connection was closed by the server or sent something unasked: one
/// nonblocking read (only on an event, never on the request path).
fn gone(stream: &Stream) -> bool {
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
        Err(e) if e.kind() == io::ErrorKind::Interrupted => false,
        _ => true,
    }
}
