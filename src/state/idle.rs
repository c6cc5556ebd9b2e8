//! Server connections of HTTP sessions, and the pools of idle kept-alive ones
//! (docs/design.md#keep-alive-and-the-idle-pool).
//!
//! Each worker numbers the server connections it holds ([`ServerConns`]): a connection has a slot
//! whose token stays the same while the worker holds it, busy (lent to a session) or idle (kept
//! for the next request to that server), so lending one out or taking it back costs no syscall.
//!
//! Idle connections wait in their worker's pool, one pool per worker ([`IdlePools`], shared by
//! the workers), per server, newest last, at most `server_keepalive` per server in each pool, and
//! are closed after `server_idle_timeout`. A worker with no idle connection to the chosen server
//! takes one from another worker's pool before it opens a new one: it deregisters it from the
//! owner's epoll and registers it in its own under a slot of its own (two epoll_ctl, cheaper than a
//! connect). The connections opened then follow how many are busy at once in all workers, not the
//! sum of each worker's own peak. Taking one counts as a reuse.
//!
//! An idle connection stays registered in its owner's epoll: any readable event on it (the server
//! closed it, or sent bytes no request asked for) closes it at once, so a connection the server
//! gave up is never lent out. On such an event the owner looks the connection up in its pool under
//! the pool's lock: one another worker took is no longer there, and the event is ignored. The
//! taker leaves the slot's number in the pool (`taken`); the owner frees those slots whenever it
//! holds its lock, which changes their tokens' generation, so an event fetched before the taker
//! deregistered the connection is stale and harmless. A pool's lock is held for a few moves in a
//! short list (the only syscall under it is the one read that tells whether an idle connection
//! was closed, on an event); its owner takes it uncontended unless another worker is taking.
//!
//! Connections are kept per server by the server's address in memory: an idle entry holds its
//! server's `Arc`, so no other server can have that address while the entry waits, and a
//! connection to a server a reload removed is never lent out for another. Admission never depends
//! on how many client connections are open.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use mio::event::Event;
use mio::{Interest, Registry, Token};

use crate::backend::Server;
use crate::metrics::ServerConnCounts;
use crate::net::Stream;

/// Server connection slots use tokens from here up (below the listeners' and the waker's).
pub(crate) const CONN_BASE: usize = 1 << 59;
const GEN_MASK: u32 = (1 << 24) - 1;

/// The idle connection pools of all workers, one per worker (see the module doc).
#[derive(Debug)]
pub(crate) struct IdlePools {
    pools: Box<[Pool]>,
}

/// One worker's idle connections.
#[derive(Debug, Default)]
struct Pool {
    lists: Mutex<Lists>,
    /// How many connections `lists` holds (written under the lock; read without it for the
    /// metrics and by takers to skip an empty pool).
    idle: AtomicUsize,
    /// The owner's epoll (a clone of its registry), for a taker to deregister what it takes.
    registry: OnceLock<Registry>,
}

/// A hasher for keys that are addresses of `Arc`s: distinct already, so a multiply spreads them
/// (SipHash, the default, was a tenth of the pool's cost per request).
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64 >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

#[derive(Debug, Default)]
struct Lists {
    /// Idle connections per server (keyed by the server's address in memory), oldest first.
    by_server: HashMap<usize, Vec<Entry>, BuildHasherDefault<AddressHasher>>,
    /// Slots of the owner whose connection another worker took: the owner frees them.
    taken: Vec<u32>,
}

#[derive(Debug)]
struct Entry {
    /// The owner's slot.
    id: u32,
    stream: Stream,
    /// Held so that no other server gets this address in memory (the key) while the entry waits;
    /// kept in the slot of the connection while it is lent, and back here with it after.
    server: Arc<Server>,
    /// Clock ms when it is closed if still idle.
    expires: u64,
}

impl Lists {
    /// Takes the newest idle connection to the server keyed `k`.
    fn pop(&mut self, k: usize) -> Option<Entry> {
        // An emptied list stays (no allocation per request); `expire` drops empty ones.
        self.by_server.get_mut(&k)?.pop()
    }

    /// Takes the idle connection of slot `id` to the server keyed `k`, if it is there and
    /// `close` says so.
    fn remove_if(&mut self, k: usize, id: u32, close: impl Fn(&Entry) -> bool) -> Option<Entry> {
        let list = self.by_server.get_mut(&k)?;
        let i = list.iter().position(|e| e.id == id)?;
        if !close(&list[i]) {
            return None;
        }
        Some(list.remove(i))
    }
}

impl IdlePools {
    /// Empty pools for `workers` workers.
    pub(crate) fn new(workers: usize) -> IdlePools {
        IdlePools {
            pools: (0..workers.max(1)).map(|_| Pool::default()).collect(),
        }
    }
}

impl IdlePools {
    /// Idle connections in all pools now, for the metrics.
    pub(crate) fn idle(&self) -> usize {
        self.pools
            .iter()
            .map(|p| p.idle.load(Ordering::Relaxed))
            .sum()
    }
}

impl Pool {
    fn lock(&self) -> MutexGuard<'_, Lists> {
        self.lists.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `n` to, or takes `-n` from, the idle count (under the lock: the only writers).
    fn count(&self, n: isize) {
        let was = self.idle.load(Ordering::Relaxed);
        self.idle
            .store(was.saturating_add_signed(n), Ordering::Relaxed);
    }
}

#[derive(Debug)]
enum State {
    Free,
    /// Lent to the session registered with this (client) token; with the reference to its
    /// server that its idle entry held, when it came out of a pool (to go back in with it:
    /// [`ServerConns::checkin`]).
    Busy(Token, Option<Arc<Server>>),
    /// In the worker's pool, under the server keyed so (unless another worker took it).
    Idle(usize),
}

#[derive(Debug)]
struct Slot {
    gen: u32,
    state: State,
}

/// A worker's slots.
#[derive(Debug, Default)]
struct Slots {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

impl Slots {
    fn token(&self, id: u32) -> Token {
        Token(CONN_BASE | ((self.slots[id as usize].gen as usize) << 32) | id as usize)
    }

    /// A new slot in state `state`.
    fn alloc(&mut self, state: State) -> (u32, Token) {
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
        self.slots[id as usize].state = state;
        (id, self.token(id))
    }

    fn set(&mut self, id: u32, state: State) {
        if let Some(slot) = self.slots.get_mut(id as usize) {
            slot.state = state;
        }
    }

    /// The reference to its server that a lent connection brought out of a pool, if any.
    fn take_server(&mut self, id: u32) -> Option<Arc<Server>> {
        match self.slots.get_mut(id as usize).map(|s| &mut s.state) {
            Some(State::Busy(_, server)) => server.take(),
            _ => None,
        }
    }

    /// The slot is free again, under a new generation.
    fn release(&mut self, id: u32) {
        let Some(slot) = self.slots.get_mut(id as usize) else {
            return;
        };
        if matches!(slot.state, State::Free) {
            return;
        }
        slot.state = State::Free;
        slot.gen = (slot.gen + 1) & GEN_MASK;
        self.free.push(id);
    }

    /// Frees the slots whose idle connection another worker took. Inlined: nearly always none
    /// was, and then the call alone cost more than the look.
    #[inline(always)]
    fn reclaim(&mut self, taken: &mut Vec<u32>) {
        if !taken.is_empty() {
            self.reclaim_taken(taken);
        }
    }

    #[inline(never)]
    fn reclaim_taken(&mut self, taken: &mut Vec<u32>) {
        for id in taken.drain(..) {
            self.release(id);
        }
    }
}

/// Where an event on a server connection goes.
pub(crate) enum Owner {
    /// To the session with this client token.
    Session(Token),
    /// Nobody: the connection was idle (and is closed if the event says so) or is gone.
    Nobody,
}

/// A worker's server connections (see the module doc).
#[derive(Debug)]
pub(crate) struct ServerConns {
    slots: Slots,
    pools: Arc<IdlePools>,
    /// This worker's pool in `pools`.
    me: usize,
    /// No idle connection of this worker expires before this (clock ms; None when none is idle).
    next_expiry: Option<u64>,
    /// Server connections opened and reused (taken from another worker's pool included), for
    /// the metrics.
    pub opened: u64,
    pub reused: u64,
}

fn key(server: &Arc<Server>) -> usize {
    Arc::as_ptr(server) as usize
}

impl ServerConns {
    /// Worker `me`'s server connections, its idle ones kept in `pools`; `registry` is its epoll,
    /// which other workers deregister from what they take.
    pub(crate) fn new(
        pools: Arc<IdlePools>,
        me: usize,
        registry: &Registry,
    ) -> io::Result<ServerConns> {
        let me = me.min(pools.pools.len() - 1);
        // Set once per worker; a second worker on the same index would not be registered for
        // takers, who then leave the connection in the owner's epoll (events for it are stale).
        let _ = pools.pools[me].registry.set(registry.try_clone()?);
        Ok(ServerConns {
            slots: Slots::default(),
            pools,
            me,
            next_expiry: None,
            opened: 0,
            reused: 0,
        })
    }

    #[cfg(test)]
    fn pool(&self) -> &Pool {
        &self.pools.pools[self.me]
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
        self.opened += 1;
        self.slots.alloc(State::Busy(owner, None))
    }

    /// The slot of a busy connection is free again: its connection was closed or never opened
    /// (the caller closes the socket).
    pub(crate) fn forget(&mut self, id: u32) {
        let busy = self
            .slots
            .slots
            .get(id as usize)
            .is_some_and(|s| matches!(s.state, State::Busy(..)));
        if busy {
            self.slots.release(id);
        }
    }

    /// Frees every slot still lent to `owner` (a session that panicked: its sockets are closed
    /// with it). A scan of the slots, for a rare event.
    pub(crate) fn forget_owned_by(&mut self, owner: Token) {
        let ids: Vec<u32> = (0..self.slots.slots.len() as u32)
            .filter(
                |&id| matches!(self.slots.slots[id as usize].state, State::Busy(t, _) if t == owner),
            )
            .collect();
        for id in ids {
            self.slots.release(id);
        }
    }

    /// An idle connection to `server`, lent to `owner`: the newest in this worker's pool, else
    /// one taken from another worker's pool and registered in `registry` (this worker's epoll).
    /// The reference to `server` its entry held stays with its slot, to go back in with it
    /// ([`ServerConns::checkin`]): no reference count changes on the way out or back.
    pub(crate) fn checkout(
        &mut self,
        server: &Arc<Server>,
        owner: Token,
        registry: &Registry,
    ) -> Option<(u32, Stream)> {
        let k = key(server);
        let pool = &self.pools.pools[self.me];
        if pool.idle.load(Ordering::Relaxed) > 0 {
            let mut lists = pool.lock();
            self.slots.reclaim(&mut lists.taken);
            if let Some(e) = lists.pop(k) {
                pool.count(-1);
                drop(lists);
                self.slots.set(e.id, State::Busy(owner, Some(e.server)));
                self.reused += 1;
                return Some((e.id, e.stream));
            }
        }
        self.take(k, owner, registry)
    }

    /// Takes an idle connection to the server keyed `k` from another worker's pool.
    fn take(&mut self, k: usize, owner: Token, registry: &Registry) -> Option<(u32, Stream)> {
        let n = self.pools.pools.len();
        for step in 1..n {
            let other = &self.pools.pools[(self.me + step) % n];
            if other.idle.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let taken = {
                let mut lists = other.lock();
                let e = lists.pop(k);
                if let Some(e) = &e {
                    lists.taken.push(e.id);
                    other.count(-1);
                }
                e
            };
            let Some(Entry {
                mut stream, server, ..
            }) = taken
            else {
                continue;
            };
            if let Some(theirs) = other.registry.get() {
                if let Err(e) = theirs.deregister(stream.source()) {
                    tracing::debug!("cannot deregister a taken server connection: {e}");
                }
            }
            let (id, token) = self.slots.alloc(State::Busy(owner, Some(server)));
            if let Err(e) = registry.register(
                stream.source(),
                token,
                Interest::READABLE | Interest::WRITABLE,
            ) {
                tracing::warn!("cannot register a taken server connection: {e}");
                self.slots.release(id);
                return None;
            }
            self.reused += 1;
            return Some((id, stream));
        }
        None
    }

    /// A session is done with a connection the server may take another request on: kept idle
    /// if this worker's pool has fewer than `max_idle` idle ones to `server`, else closed.
    pub(crate) fn checkin(
        &mut self,
        id: u32,
        stream: Stream,
        server: &Arc<Server>,
        max_idle: u32,
        expires: u64,
    ) {
        let k = key(server);
        // The reference the connection brought out of a pool (always to `server`: the
        // check-out was keyed by it), else a new one (a connection opened for this request).
        let server = match self.slots.take_server(id) {
            Some(held) if Arc::ptr_eq(&held, server) => held,
            _ => server.clone(),
        };
        let pool = &self.pools.pools[self.me];
        let mut lists = pool.lock();
        self.slots.reclaim(&mut lists.taken);
        let list = lists.by_server.entry(k).or_default();
        if list.len() >= max_idle as usize {
            if list.is_empty() {
                lists.by_server.remove(&k);
            }
            drop(lists);
            drop(stream);
            self.slots.release(id);
            return;
        }
        self.slots.set(id, State::Idle(k));
        list.push(Entry {
            id,
            stream,
            server,
            expires,
        });
        pool.count(1);
        drop(lists);
        self.next_expiry = Some(self.next_expiry.map_or(expires, |n| n.min(expires)));
    }

    /// Who an event on a server connection is for. An event on an idle connection that says it
    /// can be read (EOF, a reset, unexpected bytes) closes it.
    pub(crate) fn owner(&mut self, ev: &Event) -> Owner {
        let Some((id, gen)) = Self::decode(ev.token()) else {
            return Owner::Nobody;
        };
        let Some(slot) = self.slots.slots.get(id) else {
            return Owner::Nobody;
        };
        if slot.gen != gen {
            return Owner::Nobody;
        }
        let k = match slot.state {
            State::Busy(owner, _) => return Owner::Session(owner),
            State::Free => return Owner::Nobody,
            State::Idle(k) => k,
        };
        if !(ev.is_readable() || ev.is_read_closed() || ev.is_error()) {
            return Owner::Nobody;
        }
        let pool = &self.pools.pools[self.me];
        let mut lists = pool.lock();
        self.slots.reclaim(&mut lists.taken);
        if self.slots.slots[id].gen != gen {
            // Another worker took it.
            return Owner::Nobody;
        }
        let closed = lists.remove_if(k, id as u32, |e| gone(&e.stream));
        if closed.is_some() {
            pool.count(-1);
        }
        drop(lists);
        if closed.is_some() {
            self.slots.release(id as u32);
        }
        drop(closed);
        Owner::Nobody
    }

    /// When [`ServerConns::expire`] has something to do.
    pub(crate) fn next_expiry(&self) -> Option<u64> {
        self.next_expiry
    }

    /// Closes the idle connections whose time is up (a walk over the worker's idle ones, only
    /// when the earliest is due).
    pub(crate) fn expire(&mut self, now: u64) {
        if self.next_expiry.is_none_or(|n| n > now) {
            return;
        }
        let mut due = Vec::new();
        let mut next = u64::MAX;
        let pool = &self.pools.pools[self.me];
        let mut lists = pool.lock();
        self.slots.reclaim(&mut lists.taken);
        for list in lists.by_server.values_mut() {
            let mut i = 0;
            while i < list.len() {
                if list[i].expires <= now {
                    due.push(list.remove(i));
                } else {
                    next = next.min(list[i].expires);
                    i += 1;
                }
            }
        }
        lists.by_server.retain(|_, list| !list.is_empty());
        pool.count(-(due.len() as isize));
        drop(lists);
        for e in due {
            self.slots.release(e.id);
        }
        self.next_expiry = (next != u64::MAX).then_some(next);
    }

    /// Idle connections in this worker's pool (the metrics read all pools at once:
    /// `IdlePools::idle`).
    #[cfg(test)]
    pub(crate) fn idle(&self) -> usize {
        self.pool().idle.load(Ordering::Relaxed)
    }

    /// Opened and reused, as the worker publishes them for the metrics.
    pub(crate) fn counts(&self) -> ServerConnCounts {
        ServerConnCounts {
            opened: self.opened,
            reused: self.reused,
        }
    }

    /// Closes every idle connection in this worker's pool (the worker is draining or stopping).
    pub(crate) fn close_idle(&mut self) {
        let pool = &self.pools.pools[self.me];
        let mut lists = pool.lock();
        self.slots.reclaim(&mut lists.taken);
        let all: Vec<Entry> = lists.by_server.drain().flat_map(|(_, l)| l).collect();
        pool.count(-(all.len() as isize));
        drop(lists);
        for e in all {
            self.slots.release(e.id);
        }
        self.next_expiry = None;
    }
}

impl Drop for ServerConns {
    /// A worker that ends closes its idle connections: nobody would watch them any more.
    fn drop(&mut self) {
        self.close_idle();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::{BackendAddr, ServerSpec};
    use mio::{Events, Poll};
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    fn server(l: &TcpListener) -> Arc<Server> {
        let addr = l.local_addr().unwrap();
        Arc::new(Server::new(ServerSpec::new(BackendAddr::Tcp(addr))))
    }

    /// A connection to `l`, and the server's end of it.
    fn connect(l: &TcpListener) -> (Stream, TcpStream) {
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        s.set_nonblocking(true).unwrap();
        let (peer, _) = l.accept().unwrap();
        (Stream::Tcp(mio::net::TcpStream::from_std(s)), peer)
    }

    /// Two workers' connections over shared pools, and their epolls.
    fn two() -> (ServerConns, Poll, ServerConns, Poll) {
        let pools = Arc::new(IdlePools::new(2));
        let (pa, pb) = (Poll::new().unwrap(), Poll::new().unwrap());
        let a = ServerConns::new(pools.clone(), 0, pa.registry()).unwrap();
        let b = ServerConns::new(pools, 1, pb.registry()).unwrap();
        (a, pa, b, pb)
    }

    /// Opens a connection in `c`, registered in `poll`, and checks it in idle.
    fn idle_one(c: &mut ServerConns, poll: &Poll, l: &TcpListener, sv: &Arc<Server>) -> TcpStream {
        let (mut s, peer) = connect(l);
        let (id, token) = c.open(Token(2));
        poll.registry()
            .register(s.source(), token, Interest::READABLE | Interest::WRITABLE)
            .unwrap();
        c.checkin(id, s, sv, 8, u64::MAX - 1);
        peer
    }

    fn tokens(poll: &mut Poll) -> Vec<Token> {
        let mut events = Events::with_capacity(16);
        poll.poll(&mut events, Some(Duration::from_millis(50)))
            .unwrap();
        events.iter().map(|e| e.token()).collect()
    }

    #[test]
    fn own_idle_connections_come_first_and_count_as_reused() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let sv = server(&l);
        let (mut a, mut pa, mut b, pb) = two();
        let _peer = idle_one(&mut a, &pa, &l, &sv);
        let _ = tokens(&mut pa);
        assert_eq!((a.counts().opened, a.idle()), (1, 1));
        let (id, _s) = a.checkout(&sv, Token(4), pa.registry()).unwrap();
        assert_eq!(a.counts().reused, 1);
        assert_eq!(a.idle(), 0);
        // The entry's reference to the server stays with the lent connection's slot.
        assert!(matches!(
            &a.slots.slots[id as usize].state,
            State::Busy(Token(4), Some(held)) if Arc::ptr_eq(held, &sv)
        ));
        assert!(b.checkout(&sv, Token(6), pb.registry()).is_none());
        assert_eq!(b.counts().reused, 0);
    }

    #[test]
    fn a_worker_takes_another_workers_idle_connection_and_watches_it() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let sv = server(&l);
        let other = server(&l);
        let (mut a, mut pa, mut b, mut pb) = two();
        let peer = idle_one(&mut a, &pa, &l, &sv);
        let _ = tokens(&mut pa);
        let gen = a.slots.slots[0].gen;
        // Never lent for another server, even one at the same address.
        assert!(b.checkout(&other, Token(6), pb.registry()).is_none());
        let (id, stream) = b.checkout(&sv, Token(6), pb.registry()).unwrap();
        assert_eq!((b.counts().opened, b.counts().reused), (0, 1));
        assert_eq!((a.idle(), b.idle()), (0, 0));
        let token = b.slots.token(id);
        // Checked in again, the connection's entry holds the reference it came out with: the
        // server's count of references is what it was while the connection was idle.
        let refs = Arc::strong_count(&sv);
        b.checkin(id, stream, &sv, 8, u64::MAX - 1);
        assert_eq!(Arc::strong_count(&sv), refs);
        assert_eq!(b.idle(), 1);
        let _ = tokens(&mut pb);
        // The server closes it: b sees it under its own token, a (deregistered) nothing.
        drop(peer);
        let mut events = Events::with_capacity(16);
        pb.poll(&mut events, Some(Duration::from_secs(5))).unwrap();
        let ev = events
            .iter()
            .find(|e| e.token() == token)
            .expect("b's event");
        assert!(matches!(b.owner(ev), Owner::Nobody));
        assert_eq!(b.idle(), 0, "closed on the server's close");
        assert!(tokens(&mut pa).is_empty());
        // a frees the slot the next time it holds its lock, under a new generation.
        assert!(matches!(a.slots.slots[0].state, State::Idle(_)));
        a.close_idle();
        assert!(matches!(a.slots.slots[0].state, State::Free));
        assert_ne!(a.slots.slots[0].gen, gen);
        assert_eq!(a.slots.free, vec![0]);
    }

    #[test]
    fn each_worker_keeps_at_most_max_idle_per_server() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let sv = server(&l);
        let (mut a, pa, _b, _pb) = two();
        let mut peers = Vec::new();
        for _ in 0..3 {
            let (s, peer) = connect(&l);
            let (id, _) = a.open(Token(2));
            a.checkin(id, s, &sv, 2, u64::MAX - 1);
            peers.push(peer);
        }
        assert_eq!(a.idle(), 2);
        // The third was closed: its server end reads EOF.
        peers[2]
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(peers[2].read(&mut [0u8; 1]).unwrap(), 0);
        drop(pa);
    }

    #[test]
    fn idle_connections_expire_and_close_when_the_worker_ends() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let sv = server(&l);
        let (mut a, _pa, _b, _pb) = two();
        let mut peers = Vec::new();
        for expires in [100, 200] {
            let (s, peer) = connect(&l);
            let (id, _) = a.open(Token(2));
            a.checkin(id, s, &sv, 8, expires);
            peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            peers.push(peer);
        }
        assert_eq!(a.next_expiry(), Some(100));
        a.expire(150);
        assert_eq!((a.idle(), a.next_expiry()), (1, Some(200)));
        assert_eq!(peers[0].read(&mut [0u8; 1]).unwrap(), 0);
        drop(a);
        assert_eq!(peers[1].read(&mut [0u8; 1]).unwrap(), 0);
    }
}
