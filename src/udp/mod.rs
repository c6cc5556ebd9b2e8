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
//!
//! The files: this one holds the worker's tables ([`UdpWorker`]: listeners synced, events routed,
//! flows expired, closed and reported); `client.rs` the client side (batches read, a new flow
//! made); `server.rs` the server side (a flow's socket, replies read and sent in batches);
//! `failover.rs` the ICMP errors weighed and the flow moved to the next server.

use std::hash::RandomState;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use mio::{Registry, Token};
use quill_core::flows::{FlowId, FlowTable, IcmpWatch};

use crate::backend::{Pool, ServerLease};
use crate::clock::millis;
use crate::log::{AccessLog, Entry, LogPlan};
use crate::metrics::{Counters, End};
use crate::state::shared::{Listener, SessionInfo, Shared};
use crate::sys;

mod client;
mod failover;
mod server;

use server::Pending;

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

    /// Whether this worker has nothing of UDP: no table, no queued reply, no socket to read
    /// again (a worker of TCP listeners only skips its turn's UDP steps).
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.again.is_empty() && self.tables.iter().all(Option::is_none)
    }

    pub(crate) fn has_again(&self) -> bool {
        !self.again.is_empty()
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

/// A flow of `client` left its listener's table: it no longer counts against `max_flows`, its
/// source's share or the process's descriptors.
fn release(listener: &Listener, client: &SocketAddr, cx: &Cx<'_>) {
    listener.flows.fetch_sub(1, Ordering::Relaxed);
    listener.flow_sources.give(client.ip());
    cx.shared.udp_flows.fetch_sub(1, Ordering::Relaxed);
    cx.counters.udp_flows_open.fetch_sub(1, Ordering::Relaxed);
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

fn timeout_ms(t: &Table) -> u64 {
    let pool = t.listener.load_pool();
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
