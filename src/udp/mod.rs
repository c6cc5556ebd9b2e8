//! UDP balancing: the I/O edge around `quill_core::flows`. A *flow* is one client address and
//! port on one listener, relayed to one server through a connected UDP socket of its own, and it
//! lives on one worker: a UDP listener is one SO_REUSEPORT socket per worker (`listener::bind_udp`),
//! and the kernel hashes each client's address to one socket, so all of a client's datagrams
//! reach the worker that holds its flow.
//!
//! - A client's first datagram makes the flow: Pen's selection (`balancer::pick`: tracking,
//!   priorities, weights, hash, the base policy, slow start, ACLs) on the listener's current pool
//!   snapshot, then a socket connected to the server, registered in the worker's epoll.
//! - Datagrams from the client go out on that socket; replies come back on it and leave from the
//!   listening socket with the source address the client wrote to (packet info), so a wildcard
//!   listener answers from the right address.
//! - A datagram whose source is one of Quill's own UDP listening addresses (for a wildcard
//!   listener: its port on any local address) or a server of the listener's pool makes no flow:
//!   answering it would start a loop (Quill answering itself, or a ping-pong with the server).
//!   It is dropped and counted (`quill_udp_datagrams_refused_total`).
//! - Each flow holds a descriptor: all flows of the process together hold at most as many as
//!   `-x`'s share of the open-file limit allows sessions (half the descriptors left after the
//!   reserve; sessions get what flows leave, see `runtime::worker`), and one source (an IPv4
//!   address, an IPv6 /64) at most `max_flows_per_source` of a listener's: past that its new
//!   flows are refused, nobody else's is evicted for it.
//! - A server is taken out (blacklisted like a refused TCP connect, the flow moving to the next
//!   server in Pen's failover order, the emergency server last, or ending `refused` when none is
//!   left) by ICMP port unreachable read from the flow socket's error queue (IP_RECVERR) only:
//!   sent from the server's own address, about a datagram to the server, quoting the start of
//!   one of the flow's last datagrams (`quill_core::flows::IcmpWatch`); two such errors, or one
//!   and then a datagram unanswered for a second. A forged error (another sender, or a quote of
//!   nothing the flow sent) is counted and ignored.
//! - A flow ends after `flow_timeout` with no datagram either way (`idle_timeout`), after
//!   `flow_responses` replies to each datagram the client sent (`responses`), when `max_flows` needs room for a new client (the flow
//!   idle for longest goes: `evicted`), or at the drain deadline (`shutdown`). Each end writes one
//!   access-log line: client, server, bytes each way, duration, end.
//!
//! Nothing is allocated per datagram: client datagrams are read up to 16 per `recvmmsg` into one
//! batch of buffers per worker (`sys::RecvBatch`, 16 x 64 KiB, only the pages datagrams touch are
//! resident), and servers' replies are read (one `recvmmsg` per flow socket and event, no more
//! than `flow_responses` still owes) straight into a second batch (`sys::SendBatch`, 32 x 64 KiB)
//! that goes to the clients with one `sendmmsg` at the end of the worker's turn, or
//! sooner when it is full or the next reply leaves from another listening socket. A reply is
//! counted for its flow (bytes, datagrams, drops) once the batch is sent; a flow that ends with
//! a queued reply (`flow_responses`) leaves its table at once and is counted and logged then.

use std::hash::{BuildHasher, RandomState};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use mio::{Interest, Registry, Token};
use quill_core::flows::{FlowId, FlowTable, IcmpVerdict, IcmpWatch};
use quill_core::proxy_header;
use socket2::Type;

use crate::addr::BackendAddr;
use crate::backend::{Pool, ServerLease};
use crate::balancer::{self, Client};
use crate::clock::millis;
use crate::log::{AccessLog, Entry, LogPlan};
use crate::metrics::{Counters, End, UdpRefusal};
use crate::state::shared::{Listener, SessionInfo, Shared};
use crate::sys;

/// Tokens of UDP sockets: `UDP_BASE | table << 48 | x << 32 | slot`, where a flow's server socket
/// has its flow's slot and generation (16 bits) and a listening socket the slot `LISTEN_SLOT` and
/// its index in the listener's sockets.
pub(crate) const UDP_BASE: usize = 1 << 58;
const TABLE_BITS: u32 = 10;
const LISTEN_SLOT: usize = 0xffff_ffff;
/// Datagrams read from one socket per event before others get their turn (listening sockets are
/// level-triggered: what is left wakes the worker again; server sockets are driven again).
const BUDGET: usize = 64;
/// The first flow id: sessions and flows share `connections` and `close N`.
pub(crate) const FLOW_IDS: u64 = 1 << 40;
/// The largest UDP payload (IPv4: 65,535 - 20 - 8).
const BUF: usize = 65_536;
/// How many bytes of each datagram's start a flow remembers (as a keyed hash) to recognise an
/// ICMP error's quote: past a PROXY v2 header (28 or 52 bytes), some of the client's payload.
const QUOTE_PREFIX: usize = 64;
/// ICMP errors read from one flow socket's error queue per call.
const ERRORS_PER_CALL: usize = 8;

/// Whether `t` is a UDP token.
pub(crate) fn is_udp_token(t: Token) -> bool {
    t.0 & UDP_BASE != 0 && t.0 < UDP_BASE << 1
}

fn token(table: usize, x: usize, slot: usize) -> Token {
    Token(UDP_BASE | (table << 48) | ((x & 0xffff) << 32) | slot)
}

/// One flow: its server socket and what it carried. Kept small (memory per idle flow counts).
#[derive(Debug)]
struct Flow {
    id: u64,
    /// Connected to the server (None only while the flow moves to another server).
    socket: Option<mio::net::UdpSocket>,
    /// The server's claim (counted in its sessions), None only between two servers.
    lease: Option<ServerLease>,
    /// The pool snapshot the flow picked from (a reload applies to new flows).
    pool: Arc<Pool>,
    /// Pen's failover order: the first choice, how many after it were tried, the emergency
    /// server taken (`u32::MAX`: none).
    first: u32,
    tried: u32,
    emergency: bool,
    /// The listening socket the client wrote to, and the address it wrote to.
    via: u16,
    local: Option<(IpAddr, u32)>,
    started_ms: u64,
    datagrams_in: u32,
    datagrams_out: u32,
    responses: u32,
    bytes_in: u64,
    bytes_out: u64,
    /// The starts of its last datagrams and the ICMP errors that quoted one (see `read_errors`).
    icmp: IcmpWatch,
}

/// A UDP listener as one worker sees it.
#[derive(Debug)]
struct Table {
    listener: Arc<Listener>,
    /// The port the listener's sockets are bound to (what clients wrote to, for PROXY headers).
    port: u16,
    /// The listener's socket indexes this worker reads (registered while `listening`).
    sockets: Vec<usize>,
    listening: bool,
    flows: FlowTable<SocketAddr, Flow>,
}

/// What the worker lends for one call.
pub(crate) struct Cx<'a> {
    pub registry: &'a Registry,
    pub now: u64,
    pub rand: u64,
    pub counters: &'a Counters,
    /// For the process's count of flows and the flows' share of descriptors.
    pub shared: &'a Shared,
    /// The worker's access log files, and which listener writes into which.
    pub logs: &'a mut [Option<AccessLog>],
    pub log_plan: &'a LogPlan,
}

/// A worker's UDP listeners and their flows.
pub(crate) struct UdpWorker {
    worker: usize,
    workers: usize,
    tables: Vec<Option<Table>>,
    /// Servers' replies, sent to the clients with one `sendmmsg` (made with the first table).
    replies: Option<sys::SendBatch>,
    /// What each queued reply counts for, in the batch's order, and the listening socket they
    /// all leave from (table, socket index).
    pending: Vec<Pending>,
    reply_via: (usize, u16),
    /// Client datagrams, read up to `sys::BATCH_MAX` per `recvmmsg` (made with the first table).
    batch: Option<sys::RecvBatch>,
    /// Server sockets that stopped on their budget: read again after this turn.
    again: Vec<(usize, FlowId)>,
    next_flow: u64,
    draining: bool,
    /// The local addresses of every UDP listener of the process (IPv4-mapped ones canonical):
    /// a datagram from one of them makes no flow.
    own: Vec<SocketAddr>,
    /// Keys the hashes of the starts of datagrams sent ([`IcmpWatch`]): secret to this worker.
    hasher: RandomState,
}

impl UdpWorker {
    pub(crate) fn new(worker: usize, workers: usize) -> UdpWorker {
        UdpWorker {
            worker,
            workers: workers.max(1),
            tables: Vec::new(),
            replies: None,
            pending: Vec::new(),
            reply_via: (0, 0),
            batch: None,
            again: Vec::new(),
            next_flow: 0,
            draining: false,
            own: Vec::new(),
            hasher: RandomState::new(),
        }
    }

    /// Open flows on this worker.
    pub(crate) fn flows(&self) -> usize {
        self.tables.iter().flatten().map(|t| t.flows.len()).sum()
    }

    /// Follows the shared listener list: registers the sockets of new UDP listeners, stops
    /// reading those that left it (their flows carry on until they end).
    pub(crate) fn sync(&mut self, current: &[Arc<Listener>], epfd: i32) {
        self.own = current
            .iter()
            .filter_map(|l| l.socket.udp())
            .filter_map(|sockets| sockets.first().and_then(|s| s.local_addr().ok()))
            .map(canonical)
            .collect();
        for i in 0..self.tables.len() {
            let Some(t) = &mut self.tables[i] else {
                continue;
            };
            let kept = current.iter().any(|l| Arc::ptr_eq(l, &t.listener));
            if !kept && t.listening {
                stop_listening(t, epfd);
            }
        }
        if self.draining {
            return;
        }
        for l in current {
            let Some(sockets) = l.socket.udp() else {
                continue;
            };
            if self
                .tables
                .iter()
                .flatten()
                .any(|t| Arc::ptr_eq(&t.listener, l))
            {
                continue;
            }
            let mine: Vec<usize> = (0..sockets.len())
                .filter(|j| j % self.workers == self.worker)
                .collect();
            let slot = match self.tables.iter().position(Option::is_none) {
                Some(i) => i,
                None if self.tables.len() < 1 << TABLE_BITS => {
                    self.tables.push(None);
                    self.tables.len() - 1
                }
                None => {
                    tracing::warn!("worker {}: too many UDP listeners", self.worker);
                    continue;
                }
            };
            for &j in &mine {
                let t = token(slot, j, LISTEN_SLOT);
                if let Err(e) = sys::epoll_add_exclusive(epfd, sockets[j].as_fd(), t.0 as u64) {
                    tracing::warn!("UDP listener '{}': cannot register: {e}", l.name);
                }
            }
            if self.batch.is_none() {
                self.batch = Some(sys::RecvBatch::new(sys::BATCH_MAX, BUF));
                self.replies = Some(sys::SendBatch::new(sys::SEND_BATCH_MAX, BUF));
                self.pending = Vec::with_capacity(sys::SEND_BATCH_MAX);
            }
            let port = sockets
                .first()
                .and_then(|s| s.local_addr().ok())
                .map_or(0, |a| a.port());
            self.tables[slot] = Some(Table {
                listener: l.clone(),
                port,
                sockets: mine,
                listening: true,
                flows: FlowTable::new(),
            });
        }
    }

    /// The process drains: stop reading clients; flows relay their servers' replies until they
    /// end (timeout, responses) or the drain deadline cuts them.
    pub(crate) fn start_drain(&mut self, epfd: i32) {
        self.draining = true;
        for t in self.tables.iter_mut().flatten() {
            if t.listening {
                stop_listening(t, epfd);
            }
        }
        self.retire();
    }

    /// Drops the tables of listeners no longer read once their last flow ended.
    fn retire(&mut self) {
        for (i, t) in self.tables.iter_mut().enumerate() {
            // Queued replies still need their listening socket.
            if i == self.reply_via.0 && !self.pending.is_empty() {
                continue;
            }
            if t.as_ref()
                .is_some_and(|t| !t.listening && t.flows.is_empty())
            {
                *t = None;
            }
        }
    }

    /// An event on a UDP token.
    pub(crate) fn on_event(&mut self, tok: Token, cx: &mut Cx<'_>) {
        let table = (tok.0 >> 48) & ((1 << TABLE_BITS) - 1);
        let x = (tok.0 >> 32) & 0xffff;
        let slot = tok.0 & 0xffff_ffff;
        if slot == LISTEN_SLOT {
            self.read_clients(table, x, cx);
            return;
        }
        let Some(Some(t)) = self.tables.get(table) else {
            return;
        };
        let Some(id) = t
            .flows
            .id_at(slot as u32)
            .filter(|id| id.gen & 0xffff == x as u32)
        else {
            return;
        };
        self.read_server(table, id, cx);
    }

    /// Drives the server sockets that stopped on their budget.
    pub(crate) fn drive_again(&mut self, cx: &mut Cx<'_>) {
        let again = std::mem::take(&mut self.again);
        for (table, id) in again {
            self.read_server(table, id, cx);
        }
    }

    pub(crate) fn has_again(&self) -> bool {
        !self.again.is_empty()
    }

    fn read_clients(&mut self, ti: usize, j: usize, cx: &mut Cx<'_>) {
        // Taken out while its datagrams are handled (they borrow it), put back after.
        let Some(mut batch) = self.batch.take() else {
            return;
        };
        let mut read = 0;
        while read < BUDGET {
            let Some(Some(t)) = self.tables.get(ti) else {
                break;
            };
            let Some(sock) = t.listener.socket.udp().and_then(|s| s.get(j)) else {
                break;
            };
            let got = match batch.recv(sock.as_fd()) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::debug!("UDP listener '{}': {e}", t.listener.name);
                    break;
                }
            };
            for i in 0..got {
                let Some((dg, data)) = batch.get(i) else {
                    Counters::add(&cx.counters.udp_drops, 1);
                    continue;
                };
                if dg.truncated {
                    Counters::add(&cx.counters.udp_drops, 1);
                    continue;
                }
                self.client_datagram(ti, j, dg, data, cx);
            }
            read += got;
            if got < sys::BATCH_MAX {
                // The queue is drained (a short batch): the next datagram brings a new event.
                break;
            }
        }
        self.batch = Some(batch);
    }

    fn client_datagram(
        &mut self,
        ti: usize,
        j: usize,
        dg: sys::Datagram,
        data: &[u8],
        cx: &mut Cx<'_>,
    ) {
        let Some(Some(t)) = self.tables.get_mut(ti) else {
            return;
        };
        let id = match t.flows.find(&dg.from) {
            Some(id) => id,
            None => match self.new_flow(ti, j, &dg, cx) {
                Some(id) => id,
                None => {
                    Counters::add(&cx.counters.udp_drops, 1);
                    return;
                }
            },
        };
        let Some(Some(t)) = self.tables.get_mut(ti) else {
            return;
        };
        t.flows.touch(id, cx.now);
        let port = t.port;
        let Some((_, flow)) = t.flows.get_mut(id) else {
            return;
        };
        // With `proxy_protocol = "v2"` every datagram carries a DGRAM header naming the client
        // and the address it wrote to, made on the stack and sent with the payload in one
        // `sendmsg` (two iovecs: the payload is not copied).
        let header = flow.pool.tuning.proxy_protocol.map(|_| {
            // Packet info names the address; without it, the listener's own (bound to one).
            let to = flow
                .local
                .map(|(ip, _)| ip)
                .or(flow.pool.local.map(|a| a.ip()))
                .unwrap_or(match dg.from {
                    SocketAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                    SocketAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
                });
            proxy_header::encode_v2(
                proxy_header::Transport::Dgram,
                dg.from,
                SocketAddr::new(to, port),
            )
        });
        let header = header.as_ref().map_or(&[][..], |h| h.as_bytes());
        let hasher = &self.hasher;
        // One counted ICMP error, then a datagram unanswered for a second: the server is out.
        let mut out = flow.icmp.unanswered(cx.now);
        let mut sent = Ok(0);
        for attempt in 0..2 {
            if out {
                // Move on and send this datagram to the next server.
                if let Err(end) = move_on(flow, &dg.from, token_of(ti, id), cx) {
                    self.end(ti, id, refused(end), cx);
                    return;
                }
            }
            sent = send(flow, header, data, hasher, cx.now);
            match &sent {
                Err(e) if attempt == 0 && e.kind() != io::ErrorKind::WouldBlock => {
                    // The socket's pending error (an ICMP error came in): read its error queue,
                    // then send again (the error is spent), to the next server if this one is out.
                    out = read_errors(flow, hasher, cx);
                }
                _ => break,
            }
        }
        match sent {
            Ok(n) => {
                flow.datagrams_in = flow.datagrams_in.saturating_add(1);
                flow.bytes_in += n as u64;
                Counters::add(&cx.counters.udp_datagrams_in, 1);
                Counters::add(&cx.counters.udp_bytes_in, n as u64);
            }
            Err(e) => {
                tracing::debug!("UDP flow {}: send to server: {e}", flow.id);
                Counters::add(&cx.counters.udp_drops, 1);
            }
        }
    }

    /// Makes the flow of a new client, evicting the flow idle for longest at `max_flows`.
    /// None when the datagram is dropped (denied, no server, no room, a local error).
    fn new_flow(
        &mut self,
        ti: usize,
        j: usize,
        dg: &sys::Datagram,
        cx: &mut Cx<'_>,
    ) -> Option<FlowId> {
        let t = self.tables.get(ti)?.as_ref()?;
        let listener = t.listener.clone();
        let pool = listener.pool.load_full();
        if let Some(why) = self.loop_source(dg, &pool) {
            tracing::debug!(
                "UDP listener '{}': datagram from {} dropped ({})",
                listener.name,
                dg.from,
                why.name()
            );
            Counters::add(&cx.counters.udp_refused[why as usize], 1);
            return None;
        }
        if !pool.admits(Some(dg.from.ip())) {
            cx.counters.ended(End::Denied);
            return None;
        }
        // The flows' share of descriptors (the process's), this listener's max_flows within it,
        // and a source's share of those.
        let budget = cx.shared.fd_sessions.load(Ordering::Relaxed);
        let max = pool
            .udp()
            .and_then(|u| u.max_flows)
            .map_or(budget, |n| u64::from(n).min(budget));
        let per_source = pool
            .udp()
            .and_then(|u| u.max_flows_per_source)
            .map_or((max / 4).max(1), u64::from);
        if !listener.flow_sources.take(dg.from.ip(), per_source) {
            Counters::add(
                &cx.counters.udp_refused[UdpRefusal::SourceLimit as usize],
                1,
            );
            return None;
        }
        let at_max = listener.flows.load(Ordering::Relaxed) >= max;
        if at_max || cx.shared.udp_flows.load(Ordering::Relaxed) >= budget {
            match t.flows.oldest() {
                Some((oldest, _)) => {
                    Counters::add(&cx.counters.udp_evictions, 1);
                    self.end(ti, oldest, End::Evicted, cx);
                }
                None => {
                    // Flows of other workers (or, for descriptors, other listeners) hold them all.
                    listener.flow_sources.give(dg.from.ip());
                    if !at_max {
                        Counters::add(
                            &cx.counters.udp_refused[UdpRefusal::Descriptors as usize],
                            1,
                        );
                    }
                    return None;
                }
            }
        }
        let t = self.tables.get_mut(ti)?.as_mut()?;
        let client = Client {
            ip: Some(dg.from.ip()),
            port: dg.from.port(),
        };
        let tracked = if pool.mode.tracking() {
            pool.clients.lookup(
                dg.from.ip(),
                (cx.now / 1000) as u32,
                pool.tuning.tracking_time.as_secs() as u32,
            )
        } else {
            None
        };
        let first = balancer::pick(
            &pool.view(client.ip),
            &pool.mode,
            &client,
            tracked,
            &pool.cursor,
            cx.rand,
            cx.now,
        );
        // Flow ids start at FLOW_IDS, apart from session ids (`connections`, `close N`).
        let id = FLOW_IDS + self.next_flow * self.workers as u64 + self.worker as u64;
        self.next_flow += 1;
        // The flow first, then its socket: the socket's token needs the flow's slot and generation.
        let mut flow = Flow {
            id,
            socket: None,
            lease: None,
            pool: pool.clone(),
            first: first.map_or(u32::MAX, |i| i as u32),
            tried: 0,
            emergency: false,
            via: j as u16,
            local: dg.to,
            started_ms: cx.now,
            datagrams_in: 0,
            datagrams_out: 0,
            responses: 0,
            bytes_in: 0,
            bytes_out: 0,
            icmp: IcmpWatch::default(),
        };
        let lease = match first {
            Some(i) => Some(ServerLease::new(pool.servers[i].clone())),
            None => {
                flow.emergency = true;
                pool.emergency.clone().map(ServerLease::new)
            }
        };
        flow.lease = lease;
        let fid = t.flows.insert(dg.from, flow, cx.now);
        listener.flows.fetch_add(1, Ordering::Relaxed);
        cx.shared.udp_flows.fetch_add(1, Ordering::Relaxed);
        Counters::add(&cx.counters.udp_flows_open, 1);
        Counters::add(&cx.counters.udp_flows_total, 1);
        let tok = token_of(ti, fid);
        let (_, flow) = t.flows.get_mut(fid)?;
        let ok = match flow.lease.as_ref() {
            Some(_) => match connect_server(flow, &dg.from, tok, cx) {
                Connect::Done => Ok(()),
                Connect::TryNext => move_on(flow, &dg.from, tok, cx),
                Connect::Local => Err(End::Error),
            },
            None => Err(End::NoServer),
        };
        if let Err(end) = ok {
            self.end(ti, fid, end, cx);
            return None;
        }
        Some(fid)
    }

    /// Whether a datagram from `dg.from` would start a loop: from one of Quill's own UDP
    /// listening addresses (a wildcard listener's port on any local address), or from a server of
    /// the pool.
    fn loop_source(&self, dg: &sys::Datagram, pool: &Pool) -> Option<UdpRefusal> {
        let from = canonical(dg.from);
        let own = self.own.iter().any(|a| {
            a.port() == from.port()
                && (a.ip() == from.ip() || (a.ip().is_unspecified() && is_local(from.ip(), dg)))
        });
        if own {
            return Some(UdpRefusal::QuillAddress);
        }
        let server = pool
            .servers
            .iter()
            .chain(pool.emergency.iter())
            .any(|s| matches!(s.addr(), BackendAddr::Tcp(a) if canonical(*a) == from));
        server.then_some(UdpRefusal::PoolServer)
    }

    fn read_server(&mut self, ti: usize, id: FlowId, cx: &mut Cx<'_>) {
        let mut budget = BUDGET;
        while budget > 0 {
            let Some(Some(t)) = self.tables.get(ti) else {
                return;
            };
            let Some((_, flow)) = t.flows.get(id) else {
                return;
            };
            let via = (ti, flow.via);
            // One batch leaves from one listening socket: send what is queued first when the
            // batch is full or this reply leaves from another socket.
            let full = self.replies.as_ref().is_none_or(sys::SendBatch::is_full);
            if !self.pending.is_empty() && (full || self.reply_via != via) {
                self.flush(cx);
            }
            let Some(Some(t)) = self.tables.get_mut(ti) else {
                return;
            };
            let Some((&client, flow)) = t.flows.get_mut(id) else {
                return;
            };
            let Some(socket) = &flow.socket else {
                return;
            };
            let Some(batch) = self.replies.as_mut() else {
                return;
            };
            // `flow_responses` replies per datagram the client sent: the flow ends once every
            // datagram has had its replies (a client that sends its next query before the
            // first answer, as DNS clients do on one socket, keeps its flow until both are
            // answered). No more than those are read: a later reply is not the client's.
            let per = flow.pool.udp().map_or(0, |u| u.flow_responses);
            let owed = per.saturating_mul(flow.datagrams_in.max(1));
            let want = if per > 0 {
                owed.saturating_sub(flow.responses).max(1) as usize
            } else {
                usize::MAX
            };
            let asked = budget.min(want);
            // Every reply queued on the socket, up to `asked`, straight into the batch's slots
            // with one `recvmmsg`; counted for the flow once the batch is sent (`flush`).
            let got = match batch.recv_queue(socket.as_fd(), asked, &client, flow.local) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // The socket's pending error: an ICMP error came in (or a local one). Only
                    // what its error queue shows can take the server out.
                    tracing::debug!("UDP flow {}: from server: {e}", flow.id);
                    if read_errors(flow, &self.hasher, cx) {
                        if let Err(end) = move_on(flow, &client, token_of(ti, id), cx) {
                            self.end(ti, id, refused(end), cx);
                            return;
                        }
                    }
                    budget -= 1;
                    continue;
                }
            };
            if got == 0 {
                // Not reached: the batch had room and at least one was asked.
                return;
            }
            budget = budget.saturating_sub(got);
            // The server answered: it is there, whatever ICMP errors said.
            flow.icmp.answered();
            self.reply_via = via;
            flow.responses = flow.responses.saturating_add(got as u32);
            for _ in 1..got {
                self.pending.push(Pending::Live(id));
            }
            if per > 0 && flow.responses >= owed {
                // Out of the table now (the client's next datagram makes a new flow); counted,
                // logged and closed once its reply is sent.
                if let Some((client, flow)) = t.flows.remove(id) {
                    release(&t.listener, &client, cx);
                    self.pending.push(Pending::Ended {
                        id,
                        client,
                        flow,
                        end: End::Responses,
                    });
                }
                return;
            }
            t.flows.touch(id, cx.now);
            self.pending.push(Pending::Live(id));
            if got < asked {
                // Fewer than asked: the socket's queue is empty (a new reply brings a new event).
                return;
            }
        }
        self.again.push((ti, id));
    }

    /// Sends the queued replies (one `sendmmsg`, more only after a failed datagram) and counts
    /// each for its flow; the flows that ended with their reply are then logged and closed.
    pub(crate) fn flush(&mut self, cx: &mut Cx<'_>) {
        if self.pending.is_empty() {
            return;
        }
        let Some(mut batch) = self.replies.take() else {
            return;
        };
        let (ti, via) = self.reply_via;
        let sent = match self
            .tables
            .get(ti)
            .and_then(Option::as_ref)
            .and_then(|t| t.listener.socket.udp())
            .and_then(|s| s.get(usize::from(via)))
        {
            Some(sock) => {
                batch.send(sock.as_fd());
                true
            }
            None => false,
        };
        let mut pending = std::mem::take(&mut self.pending);
        for i in 0..pending.len() {
            let result = if sent { batch.result(i) } else { None };
            let (done, later) = pending.split_at_mut(i + 1);
            let id = match &mut done[i] {
                Pending::Live(id) => *id,
                Pending::Ended { client, flow, .. } => {
                    sent_to(flow, client, result, cx);
                    continue;
                }
            };
            let open = self
                .tables
                .get_mut(ti)
                .and_then(Option::as_mut)
                .and_then(|t| t.flows.get_mut(id));
            if let Some((client, flow)) = open {
                sent_to(flow, client, result, cx);
                continue;
            }
            // The flow ended with a later reply of this batch: counted for it.
            let ended = later.iter_mut().find_map(|p| match p {
                Pending::Ended {
                    id: e,
                    client,
                    flow,
                    ..
                } if *e == id => Some((client, flow)),
                _ => None,
            });
            match ended {
                Some((client, flow)) => sent_to(flow, client, result, cx),
                // Not reached: a flow with a queued reply ends only after a flush, or with a
                // queued reply of its own.
                None => Counters::add(&cx.counters.udp_drops, 1),
            }
        }
        for p in pending.drain(..) {
            if let Pending::Ended {
                client, flow, end, ..
            } = p
            {
                finish(client, flow, end, cx);
            }
        }
        self.pending = pending;
        batch.clear();
        self.replies = Some(batch);
    }

    /// When the next flow times out (clock ms).
    pub(crate) fn next_expiry(&self) -> Option<u64> {
        self.tables
            .iter()
            .flatten()
            .filter_map(|t| {
                let (_, last) = t.flows.oldest()?;
                Some(last.saturating_add(timeout_ms(t)))
            })
            .min()
    }

    /// Ends the flows idle for their listener's `flow_timeout`.
    pub(crate) fn expire(&mut self, cx: &mut Cx<'_>) {
        self.flush(cx);
        for ti in 0..self.tables.len() {
            while let Some(Some(t)) = self.tables.get(ti) {
                let Some((id, last)) = t.flows.oldest() else {
                    break;
                };
                if last.saturating_add(timeout_ms(t)) > cx.now {
                    break;
                }
                self.end(ti, id, End::IdleTimeout, cx);
            }
        }
        if self.draining || self.tables.iter().flatten().any(|t| !t.listening) {
            self.retire();
        }
    }

    /// Ends every flow (the drain deadline, a stop).
    pub(crate) fn close_all(&mut self, end: End, cx: &mut Cx<'_>) {
        self.flush(cx);
        for ti in 0..self.tables.len() {
            let ids = match &self.tables[ti] {
                Some(t) => t.flows.ids(),
                None => continue,
            };
            for id in ids {
                self.end(ti, id, end, cx);
            }
        }
        self.retire();
    }

    /// Ends flow `id` if this worker has it (`close N`).
    pub(crate) fn close_id(&mut self, flow_id: u64, cx: &mut Cx<'_>) -> bool {
        for ti in 0..self.tables.len() {
            let found = self.tables[ti].as_ref().and_then(|t| {
                t.flows
                    .iter()
                    .find(|(_, _, f, _)| f.id == flow_id)
                    .map(|(id, ..)| id)
            });
            if let Some(id) = found {
                self.end(ti, id, End::Closed, cx);
                return true;
            }
        }
        false
    }

    /// The open flows, as `connections` shows them.
    pub(crate) fn report(&self, now: u64, out: &mut Vec<SessionInfo>) {
        for t in self.tables.iter().flatten() {
            for (_, client, f, _) in t.flows.iter() {
                out.push(SessionInfo {
                    id: f.id,
                    listener: t.listener.name.clone(),
                    client: client.to_string(),
                    server: f.lease.as_ref().map(|l| l.server().addr().to_string()),
                    age_ms: now.saturating_sub(f.started_ms),
                    bytes_in: f.bytes_in,
                    bytes_out: f.bytes_out,
                    state: "flow",
                });
            }
        }
    }

    fn end(&mut self, ti: usize, id: FlowId, end: End, cx: &mut Cx<'_>) {
        // A queued reply of this flow is counted for it first (the access log gets its bytes).
        if self.reply_via.0 == ti
            && self
                .pending
                .iter()
                .any(|p| matches!(p, Pending::Live(q) if *q == id))
        {
            self.flush(cx);
        }
        let Some(Some(t)) = self.tables.get_mut(ti) else {
            return;
        };
        let Some((client, flow)) = t.flows.remove(id) else {
            return;
        };
        release(&t.listener, &client, cx);
        finish(client, flow, end, cx);
    }
}

/// A reply queued in the worker's batch: the flow it counts for, or the flow itself when it
/// ended with this reply (out of its table, waiting to be counted and logged).
#[derive(Debug)]
enum Pending {
    Live(FlowId),
    Ended {
        id: FlowId,
        client: SocketAddr,
        flow: Flow,
        end: End,
    },
}

/// A flow of `client` left its listener's table: it no longer counts against `max_flows`, its
/// source's share or the process's descriptors.
fn release(listener: &Listener, client: &SocketAddr, cx: &Cx<'_>) {
    listener.flows.fetch_sub(1, Ordering::Relaxed);
    listener.flow_sources.give(client.ip());
    cx.shared.udp_flows.fetch_sub(1, Ordering::Relaxed);
    cx.counters.udp_flows_open.fetch_sub(1, Ordering::Relaxed);
}

/// Counts a reply for `flow` once the batch was sent: its bytes, or a drop.
fn sent_to(flow: &mut Flow, client: &SocketAddr, result: Option<io::Result<usize>>, cx: &Cx<'_>) {
    match result {
        Some(Ok(n)) => {
            flow.datagrams_out = flow.datagrams_out.saturating_add(1);
            flow.bytes_out += n as u64;
            Counters::add(&cx.counters.udp_datagrams_out, 1);
            Counters::add(&cx.counters.udp_bytes_out, n as u64);
        }
        Some(Err(e)) => {
            tracing::debug!("UDP flow {}: to client {client}: {e}", flow.id);
            Counters::add(&cx.counters.udp_drops, 1);
        }
        None => {
            tracing::debug!(
                "UDP flow {}: to client {client}: no listening socket",
                flow.id
            );
            Counters::add(&cx.counters.udp_drops, 1);
        }
    }
}

/// The end of a flow out of its table: counters, the server's bytes, the lease returned, one
/// access-log line; its socket closes here, which also takes it out of the epoll set.
fn finish(client: SocketAddr, flow: Flow, end: End, cx: &mut Cx<'_>) {
    cx.counters.ended(end);
    Counters::add(&cx.counters.bytes_in, flow.bytes_in);
    Counters::add(&cx.counters.bytes_out, flow.bytes_out);
    let server = flow.lease.as_ref().map(|l| l.server().clone());
    if let Some(s) = &server {
        s.count_bytes(flow.bytes_in, flow.bytes_out);
    }
    let server_addr = server.as_ref().map(|s| s.addr() as &dyn std::fmt::Display);
    tracing::debug!(
        "UDP flow {} {client} -> {}: {} datagrams ({} bytes) in, {} datagrams ({} bytes) out, {}",
        flow.id,
        server_addr.unwrap_or(&"-"),
        flow.datagrams_in,
        flow.bytes_in,
        flow.datagrams_out,
        flow.bytes_out,
        end.name()
    );
    let file = cx.log_plan.file_of(&flow.pool.name);
    if let Some(log) = file
        .and_then(|i| cx.logs.get_mut(i as usize))
        .and_then(Option::as_mut)
    {
        log.write(&Entry {
            client_ip: &client.ip(),
            unix_time: crate::clock::unix_time(),
            server: server_addr,
            bytes_in: flow.bytes_in,
            bytes_out: flow.bytes_out,
            duration_ms: cx.now.saturating_sub(flow.started_ms),
            end,
        });
    }
    drop(flow);
}

/// How a flow ends after ICMP port unreachable: `refused` when no server is left.
fn refused(end: End) -> End {
    match end {
        End::NoServer => End::Refused,
        other => other,
    }
}

fn timeout_ms(t: &Table) -> u64 {
    let pool = t.listener.pool.load();
    millis(
        pool.udp()
            .map_or(std::time::Duration::from_secs(30), |u| u.flow_timeout),
    )
}

fn token_of(ti: usize, id: FlowId) -> Token {
    token(ti, id.gen as usize, id.slot as usize)
}

fn stop_listening(t: &mut Table, epfd: i32) {
    if let Some(sockets) = t.listener.socket.udp() {
        for &j in &t.sockets {
            if let Some(s) = sockets.get(j) {
                let _ = sys::epoll_del(epfd, s.as_fd());
            }
        }
    }
    t.listening = false;
}

/// Opens the flow's socket to its leased server: connected, registered under `tok`. False when
/// the server cannot be used (a Unix or named address, or the connect failed at once: then it is
/// blacklisted); a local failure is false too, without blame.
fn connect_server(flow: &mut Flow, client: &SocketAddr, tok: Token, cx: &mut Cx<'_>) -> Connect {
    let Some(lease) = &flow.lease else {
        return Connect::TryNext;
    };
    let server = lease.server().clone();
    let BackendAddr::Tcp(addr) = server.addr() else {
        return Connect::TryNext;
    };
    // The pool's `source`, or with `transparent` the client's own address, as for TCP.
    let from = crate::net::local_end(&flow.pool.tuning, &crate::net::ClientAddr::Ip(*client));
    let made = crate::net::socket_from(*addr, Type::DGRAM, from)
        .and_then(|s| s.connect(&(*addr).into()).map(|()| s));
    let socket = match made {
        Ok(s) => mio::net::UdpSocket::from_std(s.into()),
        Err(e) => {
            tracing::debug!("UDP flow {}: cannot connect to {addr}: {e}", flow.id);
            if crate::net::is_local_error(&e) {
                // Out of descriptors, ports or memory: no server is to blame.
                return Connect::Local;
            }
            return Connect::TryNext;
        }
    };
    let mut socket = socket;
    // ICMP errors are read from the error queue, with their sender and quote (`read_errors`).
    if let Err(e) = sys::set_recv_errors(socket.as_fd(), addr.is_ipv6()) {
        tracing::debug!("UDP flow {}: IP_RECVERR: {e}", flow.id);
    }
    if let Err(e) = cx.registry.register(&mut socket, tok, Interest::READABLE) {
        tracing::debug!("UDP flow {}: cannot register: {e}", flow.id);
        return Connect::Local;
    }
    // The old socket, if any, closes here (and leaves the epoll set with it); what it sent says
    // nothing of the new server's errors.
    flow.socket = Some(socket);
    flow.icmp = IcmpWatch::default();
    if flow.pool.mode.tracking() && !flow.emergency {
        if let Some(i) = flow.current_index() {
            flow.pool
                .clients
                .store(client.ip(), i, (cx.now / 1000) as u32);
        }
    }
    Connect::Done
}

/// What opening a flow's socket to its server gave.
enum Connect {
    Done,
    /// The server cannot be used: blacklist it and try the next ([`move_on`]).
    TryNext,
    /// A local failure (descriptors, ports, memory): the flow ends, no server blamed.
    Local,
}

/// Sends `header` (a PROXY header, or nothing) and `data` as one datagram on the flow's socket;
/// Ok(the payload's length). The datagram's start is remembered (hashed with `hasher`) for
/// [`read_errors`].
fn send(
    flow: &mut Flow,
    header: &[u8],
    data: &[u8],
    hasher: &RandomState,
    now: u64,
) -> io::Result<usize> {
    let Some(s) = &flow.socket else {
        return Err(io::Error::from(io::ErrorKind::NotConnected));
    };
    let n = if header.is_empty() {
        s.send(data)?
    } else {
        let parts = [io::IoSlice::new(header), io::IoSlice::new(data)];
        let mut no_cmsg = rustix::net::SendAncillaryBuffer::default();
        rustix::net::sendmsg(s, &parts, &mut no_cmsg, rustix::net::SendFlags::empty())
            .map(|n| n.saturating_sub(header.len()))
            .map_err(io::Error::from)?
    };
    let mut start = [0u8; QUOTE_PREFIX];
    let h = header.len().min(QUOTE_PREFIX);
    start[..h].copy_from_slice(&header[..h]);
    let d = data.len().min(QUOTE_PREFIX - h);
    start[h..h + d].copy_from_slice(&data[..d]);
    let len = h + d;
    flow.icmp
        .sent(hasher.hash_one(&start[..len]), len as u8, now);
    Ok(n)
}

/// Reads the ICMP errors queued on the flow's socket (IP_RECVERR) and weighs them: one counts
/// only when it is a port unreachable from the server's own address, about a datagram to the
/// server, quoting the start of one the flow sent (an off-path sender cannot know it); others
/// are counted as ignored. True when the server is to be taken out ([`IcmpWatch`]: two such
/// errors, or one and an unanswered datagram).
fn read_errors(flow: &mut Flow, hasher: &RandomState, cx: &Cx<'_>) -> bool {
    let (Some(socket), Some(lease)) = (&flow.socket, &flow.lease) else {
        return false;
    };
    let BackendAddr::Tcp(server) = lease.server().addr() else {
        return false;
    };
    let server = canonical(*server);
    let mut out = false;
    let mut quote = [0u8; QUOTE_PREFIX];
    for _ in 0..ERRORS_PER_CALL {
        let e = match sys::recv_error(socket.as_fd(), &mut quote) {
            Ok(e) => e,
            Err(_) => break,
        };
        if !e.icmp || e.errno != libc_econnrefused() {
            // Not a port unreachable (a local error, a host unreachable, a fragmentation
            // notice): no server is blamed for it.
            tracing::debug!("UDP flow {}: error queue: {e:?}", flow.id);
            continue;
        }
        let from_server = e.offender.map(|ip| ip.to_canonical()) == Some(server.ip())
            && e.to.map(canonical) == Some(server);
        let quoted = &quote[..e.quoted];
        let quotes_sent = from_server
            && flow.icmp.quotes_sent(|len| {
                quoted
                    .get(..usize::from(len))
                    .map(|start| hasher.hash_one(start))
            });
        match flow.icmp.error(quotes_sent) {
            IcmpVerdict::Forged => {
                Counters::add(&cx.counters.udp_icmp_ignored, 1);
                tracing::debug!(
                    "UDP flow {}: ICMP port unreachable from {:?} about {:?} ignored (not from the server, or quoting nothing the flow sent)",
                    flow.id,
                    e.offender,
                    e.to
                );
            }
            IcmpVerdict::Counted => {}
            IcmpVerdict::Unreachable => out = true,
        }
    }
    out
}

/// ECONNREFUSED: what a port unreachable becomes.
fn libc_econnrefused() -> i32 {
    io::Error::from(io::ErrorKind::ConnectionRefused)
        .raw_os_error()
        .unwrap_or(111)
}

/// `a` with an IPv4-mapped IPv6 address as IPv4.
fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

impl Flow {
    /// The index in the pool of the server the flow is leased to (None for the emergency).
    fn current_index(&self) -> Option<usize> {
        let lease = self.lease.as_ref()?;
        self.pool
            .servers
            .iter()
            .position(|s| Arc::ptr_eq(s, lease.server()))
    }
}

/// The flow's server refused (ICMP port unreachable) or could not be used: blacklist it and move
/// the flow to the next server in Pen's failover order, then the emergency server. Err(NoServer)
/// when none is left (after ICMP the flow ends `refused`), Err(Error) on a local failure.
fn move_on(flow: &mut Flow, client: &SocketAddr, tok: Token, cx: &mut Cx<'_>) -> Result<(), End> {
    loop {
        if let Some(lease) = flow.lease.take() {
            let server = lease.end();
            if !server.is_blacklisted(cx.now) {
                server.blacklist(cx.now, flow.pool.tuning.blacklist);
                server.failures.fetch_add(1, Ordering::Relaxed);
                Counters::add(&cx.counters.connect_failures, 1);
                tracing::info!(
                    "UDP server {} failed (ICMP unreachable or no socket to it)",
                    server.addr()
                );
            }
        }
        flow.socket = None;
        let pool = flow.pool.clone();
        let stubborn_failed = pool.mode.stubborn && flow.first != u32::MAX;
        let next = if flow.emergency || stubborn_failed {
            return Err(End::NoServer);
        } else if flow.first != u32::MAX {
            let mut tried = flow.tried as usize;
            let next = balancer::failover(
                &pool.view(Some(client.ip())),
                flow.first as usize,
                &mut tried,
                cx.now,
            );
            flow.tried = tried as u32;
            next
        } else {
            None
        };
        match next {
            Some(i) => flow.lease = Some(ServerLease::new(pool.servers[i].clone())),
            None => {
                flow.emergency = true;
                match pool.emergency.clone() {
                    Some(s) => flow.lease = Some(ServerLease::new(s)),
                    None => return Err(End::NoServer),
                }
            }
        }
        match connect_server(flow, client, tok, cx) {
            Connect::Done => return Ok(()),
            Connect::TryNext => {}
            Connect::Local => return Err(End::Error),
        }
    }
}

/// Whether `ip` (canonical) is an address of this host: a loopback one, the one the datagram was
/// sent to, or one the kernel routes locally (a UDP socket connected to it takes it as its own
/// source, as for any local destination; a bind test would say yes to every address under
/// `ip_nonlocal_bind`). Asked only for a datagram from a wildcard listener's port: rare, and
/// cheaper than the flow it would make.
fn is_local(ip: IpAddr, dg: &sys::Datagram) -> bool {
    if ip.is_loopback() || dg.to.is_some_and(|(to, _)| to.to_canonical() == ip) {
        return true;
    }
    let any = match ip {
        IpAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
        IpAddr::V6(_) => SocketAddr::from(([0u16; 8], 0)),
    };
    std::net::UdpSocket::bind(any)
        .and_then(|s| {
            s.connect(SocketAddr::new(ip, 9))
                .and_then(|()| s.local_addr())
        })
        .is_ok_and(|local| local.ip().to_canonical() == ip)
}
