//! Admission: accepting from a listener (paused for a while when the process runs out of
//! descriptors), handing a client to a less loaded worker, then the session's place under `-x`
//! (a [`SessionPermit`]), `client_acl`, `max_per_source` and room for a TLS handshake, before
//! the session its listener calls for is installed in a slot.

use std::io;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{decode, Slot, Worker, RECENT};
use crate::backend::Admission;
use crate::metrics::{Counters, End};
use crate::net::{ClientAddr, Stream};
use crate::proxy::Session;
use crate::runtime::timers::Armed;
use crate::state::permit::SessionPermit;
use crate::state::shared::{Listener, Request, SourceSlot};

/// A worker hands an accepted client to the least loaded worker when it holds more than this
/// many sessions beyond that one's, plus an eighth of its own (so that steady traffic, whose
/// counts move by a few, keeps its clients where they were accepted).
const SPREAD_SLACK: u64 = 2;
/// How long a listener rests after the process ran out of descriptors.
pub(super) const EMFILE_PAUSE_MS: u64 = 100;
/// Running out of descriptors is said at most this often per worker (then at debug level).
const EMFILE_WARN_MS: u64 = 10_000;

impl Worker {
    /// Accepts up to `accept_batch` clients from each of this worker's sockets of listener `li`
    /// (`accept4`), until they have none.
    pub(super) fn accept(&mut self, li: usize, now: u64) {
        let listener = self.listeners[li].listener.clone();
        let mut k = 0;
        while let Some(&shard) = self.listeners.get(li).and_then(|l| l.share.get(k)) {
            k += 1;
            if !self.accept_from(li, &listener, shard, self.shared.accept_batch as usize, now) {
                return;
            }
        }
    }

    /// Takes what is queued on every socket of listener `li`, this worker's share or not (the
    /// last worker to drain, before the sockets close): bounded per socket as a drain's pass is.
    pub(super) fn accept_every_socket(&mut self, li: usize, now: u64) {
        let listener = self.listeners[li].listener.clone();
        let most = 64 * self.shared.accept_batch as usize;
        for shard in 0..listener.socket.fds().len() {
            if !self.accept_from(li, &listener, shard, most, now) {
                return;
            }
        }
    }

    /// Accepts up to `most` clients from socket `shard` of listener `li`, until it has none;
    /// false when the listener rests (out of descriptors).
    fn accept_from(
        &mut self,
        li: usize,
        listener: &Arc<Listener>,
        shard: usize,
        most: usize,
        now: u64,
    ) -> bool {
        for _ in 0..most {
            match listener.socket.accept(shard) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                accepted => {
                    if !self.accepted(li, listener, accepted, now) {
                        return false;
                    }
                }
            }
        }
        true
    }

    /// Opens a client accepted on listener `li` (by `accept4` or by the worker's ring), or
    /// counts why accepting failed; false when the listener rests (out of descriptors).
    pub(super) fn accepted(
        &mut self,
        li: usize,
        listener: &Arc<Listener>,
        accepted: io::Result<(Stream, ClientAddr)>,
        now: u64,
    ) -> bool {
        match accepted {
            Ok((stream, peer)) => {
                let pinned = self.listeners[li].pinned;
                if let Some((stream, peer)) = self.spread(listener, pinned, stream, peer) {
                    self.open(listener, stream, peer, now);
                }
                true
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                ) =>
            {
                Counters::add(&self.counters().accept_errors, 1);
                if self
                    .emfile_warned_ms
                    .is_none_or(|t| now.saturating_sub(t) >= EMFILE_WARN_MS)
                {
                    self.emfile_warned_ms = Some(now);
                    tracing::warn!(
                        "accept: {e}; pausing the listener for {EMFILE_PAUSE_MS} ms (said at most every {} s)",
                        EMFILE_WARN_MS / 1000
                    );
                } else {
                    tracing::debug!("accept: {e}; pausing the listener for {EMFILE_PAUSE_MS} ms");
                }
                self.deregister_listener(li);
                self.listeners[li].paused_until = now + EMFILE_PAUSE_MS;
                false
            }
            Err(e) => {
                // ECONNABORTED and friends concern one client only.
                Counters::add(&self.counters().accept_errors, 1);
                tracing::debug!("accept: {e}");
                true
            }
        }
    }

    /// Keeps an accepted client (gives it back) or hands it to another worker
    /// ([`Worker::handover_target`]). The kernel wakes the first waiting worker for a burst of
    /// connects and that worker takes the whole queue, so without this one worker could hold
    /// every connection of a burst (measured: all 50 of `wrk -c50`'s, the other worker idle).
    /// The other worker opens it from its inbox (`Request::Adopt`) as if it had accepted it.
    fn spread(
        &mut self,
        listener: &Arc<Listener>,
        pinned: bool,
        stream: Stream,
        peer: ClientAddr,
    ) -> Option<(Stream, ClientAddr)> {
        if self.shared.loads.len() < 2 || self.draining {
            return Some((stream, peer));
        }
        // A client that cannot move later (TLS, h2c) is spread over every worker, as all of
        // them accept it (`WorkerListener::pinned`); any other goes to the accepting ones.
        let target = if pinned {
            self.spread_target(self.shared.loads.len(), true)
        } else {
            self.handover_target()
        };
        let Some(target) = target else {
            return Some((stream, peer));
        };
        match self.post(target, Request::Adopt(listener.clone(), stream, peer)) {
            Ok(()) => None,
            Err(Request::Adopt(_, stream, peer)) => Some((stream, peer)),
            // `post` gives back what it was given.
            Err(_) => None,
        }
    }

    /// The worker a client of this one should go to, if any (a client just accepted, or a
    /// kept-alive one between two requests): the least loaded of the workers that accept
    /// (`runtime::balance`), when this one does not accept or holds clearly more than it
    /// (`SPREAD_SLACK` plus an eighth of its own).
    pub(super) fn handover_target(&self) -> Option<usize> {
        self.spread_target(self.accepting_n, self.accepting)
    }

    /// The least loaded of the first `n` workers, when this one is not among those that may
    /// keep the client (`keeps` false) or holds clearly more than it.
    fn spread_target(&self, n: usize, keeps: bool) -> Option<usize> {
        let loads = &self.shared.loads;
        let n = n.min(loads.len());
        let (theirs, target) = (0..n)
            .filter(|&i| i != self.id)
            .map(|i| (loads[i].get(), i))
            .min()?;
        if !keeps {
            return Some(target);
        }
        let mine = loads[self.id].get();
        (mine > theirs + SPREAD_SLACK + mine / 8).then_some(target)
    }

    /// Puts `req` (a client handed over) in worker `target`'s inbox, counted as pending there,
    /// and wakes that worker when its inbox was empty; gives `req` back when it has stopped.
    pub(super) fn post(&self, target: usize, req: Request) -> Result<(), Request> {
        let Some(waker) = self.shared.wakers.get().and_then(|w| w.get(target)) else {
            return Err(req);
        };
        let was_empty = {
            let mut inbox = self.shared.inboxes[target]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let Some(queue) = inbox.as_mut() else {
                // That worker has stopped.
                return Err(req);
            };
            self.shared.loads[target]
                .pending
                .fetch_add(1, Ordering::Relaxed);
            queue.push(req);
            queue.len() == 1
        };
        if was_empty {
            if let Err(e) = waker.wake() {
                tracing::warn!("worker {}: cannot wake worker {target}: {e}", self.id);
            }
        }
        Ok(())
    }

    pub(super) fn open(
        &mut self,
        listener: &Arc<Listener>,
        stream: Stream,
        peer: ClientAddr,
        now: u64,
    ) {
        Counters::add(&self.counters().accepted, 1);
        let pool = listener.load_pool();
        if pool.accept_proxy().is_empty() {
            return self.admit(listener, stream, peer, now);
        }
        let http = pool.http().is_some();
        let trusted = peer
            .ip()
            .is_some_and(|ip| pool.accept_proxy().iter().any(|n| n.contains(ip)));
        drop(pool);
        if !trusted {
            // Not one of the listener's upstream proxies: closed at accept.
            return self.refuse(&peer, End::ProxyUntrusted, http, listener);
        }
        let Some(permit) = self.permit_or_refuse(&peer, http, listener) else {
            return;
        };
        let id = self.next_id();
        let session = Session::proxy_header(listener.clone(), id, stream, peer, now);
        self.install(session, permit, None, listener, now);
    }

    /// The next session id: unique in the process (worker number in the low part).
    pub(super) fn next_id(&mut self) -> u64 {
        let id = self.next_session * self.shared.counters.len() as u64 + self.id as u64;
        self.next_session += 1;
        id
    }

    /// Puts a new session of `listener` (and its permit) in a free slot and starts it.
    fn install(
        &mut self,
        session: Session,
        permit: SessionPermit,
        source: Option<SourceSlot>,
        listener: &Listener,
        now: u64,
    ) {
        let (idx, gen) = self.place(session, Some(permit), source, listener);
        self.call(idx, gen, now, |s, cx| s.start(cx));
    }

    /// Puts a session of `listener` (with its permit and its address's count) in a free slot:
    /// its index and generation.
    pub(super) fn place(
        &mut self,
        session: Session,
        permit: Option<SessionPermit>,
        source: Option<SourceSlot>,
        listener: &Listener,
    ) -> (usize, u32) {
        let log = self.log_plan.file_of(&listener.name);
        self.place_in(session, permit, source, (listener.id, log))
    }

    /// [`place`](Self::place) with the listener's id and its access log's file known.
    pub(super) fn place_in(
        &mut self,
        session: Session,
        permit: Option<SessionPermit>,
        source: Option<SourceSlot>,
        (listener, log): (u64, Option<u32>),
    ) -> (usize, u32) {
        let idx = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                self.slots.push(Slot {
                    gen: 0,
                    session: None,
                    permit: None,
                    source: None,
                    timer: Armed::default(),
                    listener: 0,
                    log: None,
                });
                self.slots.len() - 1
            }
        };
        self.slots[idx].permit = permit;
        self.slots[idx].source = source;
        self.slots[idx].listener = listener;
        self.slots[idx].log = log;
        self.live += 1;
        self.publish_load();
        self.slots[idx].session = Some(session);
        (idx, self.slots[idx].gen)
    }

    /// Admits a client from `peer` (its own address, or the one its PROXY header carried):
    /// `-x`, `client_acl`, `max_per_source`, then the session its listener calls for.
    fn admit(&mut self, listener: &Arc<Listener>, stream: Stream, peer: ClientAddr, now: u64) {
        let pool = listener.load_pool_full();
        let http = pool.http().is_some();
        if let Some(ip) = peer.ip() {
            if self.recent.len() == RECENT {
                self.recent.pop_front();
            }
            self.recent.push_back((ip, now));
        }
        let Some(permit) = self.permit_or_refuse(&peer, http, listener) else {
            return;
        };
        let denied = !pool.admits(peer.ip());
        if denied && pool.abuse.is_none() {
            drop(permit);
            return self.refuse(&peer, End::Denied, http, listener);
        }
        let limit = pool.tuning.max_per_source;
        let source = match peer.ip() {
            Some(ip) if limit > 0 => {
                let slot = self.shared.sources().admit(listener.id, ip, limit);
                if slot.is_none() {
                    // Over its address's share: closed at once, as over `-x`.
                    drop(permit);
                    return self.refuse(&peer, End::Refused, http, listener);
                }
                slot
            }
            _ => None,
        };
        let id = self.next_id();
        if let Some(tls) = pool.tls().filter(|_| !denied) {
            self.make_room_for_handshake(tls, peer.ip(), now);
        }
        let session = match pool.admission(denied) {
            Admission::Tls => match Session::tls(listener.clone(), pool, id, stream, peer, now) {
                Ok(s) => s,
                Err(_closed) => {
                    // Over `max_handshakes` in progress on this worker: closed at once.
                    crate::proxy::handshake::overloaded(self.counters());
                    drop(source);
                    drop(permit);
                    return self.refuse(&peer, End::Refused, http, listener);
                }
            },
            Admission::Http => Session::http(listener.clone(), id, stream, peer, now),
            // A TCP listener's routes pick the pool by the TLS ClientHello's server name.
            Admission::Peek => Session::peek(pool, id, stream, peer, now),
            Admission::Tcp => Session::tcp(pool, id, stream, peer, denied, now),
        };
        self.install(session, permit, source, listener, now);
    }

    /// A trusted client's PROXY header was read: its slot is freed without an end (it is the
    /// same client) and it is admitted as a client from `addr`.
    pub(super) fn admit_proxied(&mut self, idx: usize, addr: ClientAddr, now: u64) {
        let Some((mut s, permit)) = self.free_slot(idx) else {
            return;
        };
        // Its place under `-x` is given back and taken again by `admit`, as for a new client.
        drop(permit);
        if let Some((listener, stream)) = s.take_proxied() {
            self.admit(&listener, stream, addr, now);
        }
    }

    /// Closes the least recently active TLS handshakes (counted as evicted) while a new one from
    /// `ip` would be over the worker's or that address's bound.
    fn make_room_for_handshake(
        &mut self,
        tls: &crate::tls::ServerTls,
        ip: Option<IpAddr>,
        now: u64,
    ) {
        use crate::proxy::handshake;
        for _ in 0..4 {
            let max = (tls.max_handshakes, tls.max_handshakes_per_source);
            let Some(victim) = handshake::to_evict(max.0, max.1, ip) else {
                return;
            };
            let (idx, gen, _) = decode(victim);
            let held = self
                .slots
                .get(idx)
                .is_some_and(|s| s.gen == gen && s.session.is_some());
            if held {
                handshake::evicted(self.counters());
                self.close(idx, End::TlsTimeout, now);
            }
            handshake::forget(victim);
        }
    }

    /// Takes a place for a new session under `-x` (and what the open-file limit allows), or,
    /// when there is no room, refuses the client (counted and logged): the caller closes it.
    fn permit_or_refuse(
        &mut self,
        peer: &ClientAddr,
        http: bool,
        listener: &Listener,
    ) -> Option<SessionPermit> {
        // UDP flows hold one descriptor each: sessions (two each) get what they leave.
        let flows = self.shared.udp_flows.load(Ordering::Relaxed);
        let max = self.shared.max_sessions.load(Ordering::Relaxed).min(
            self.shared
                .fd_sessions
                .load(Ordering::Relaxed)
                .saturating_sub(flows.div_ceil(2)),
        );
        let permit = self.shared.active.try_take(max);
        if permit.is_none() {
            self.refuse(peer, End::Refused, http, listener);
        }
        permit
    }

    /// A client refused at accept as `end`: counted and logged (the caller closes it).
    fn refuse(&mut self, peer: &ClientAddr, end: End, http: bool, listener: &Listener) {
        self.counters().ended(end);
        self.log_refused(peer, end, http, listener);
    }
}
