//! The server side of a flow: its connected socket (opened, and sent on), the replies read from
//! it into the worker's send batch, and the batch sent to the clients and counted per flow.

use std::hash::{BuildHasher, RandomState};
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;

use mio::{Interest, Token};
use quill_core::flows::{FlowId, IcmpWatch};
use socket2::Type;

use super::failover::{move_on, read_errors, refused};
use super::{finish, release, token_of, Cx, Flow, UdpWorker, BUDGET, QUOTE_PREFIX};
use crate::addr::BackendAddr;
use crate::metrics::{Counters, End};
use crate::sys;

impl UdpWorker {
    /// Reads the replies queued on flow `id`'s socket into the send batch.
    pub(super) fn read_server(&mut self, ti: usize, id: FlowId, cx: &mut Cx<'_>) {
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
                        flow: Box::new(flow),
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
                finish(client, *flow, end, cx);
            }
        }
        self.pending = pending;
        batch.clear();
        self.replies = Some(batch);
    }
}

/// A reply queued in the worker's batch: the flow it counts for, or the flow itself when it
/// ended with this reply (out of its table, waiting to be counted and logged).
#[derive(Debug)]
pub(super) enum Pending {
    Live(FlowId),
    Ended {
        id: FlowId,
        client: SocketAddr,
        /// Boxed: a flow is large, and ends are rare beside live replies.
        flow: Box<Flow>,
        end: End,
    },
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

/// Opens the flow's socket to its leased server: connected, registered under `tok`. False when
/// the server cannot be used (a Unix or named address, or the connect failed at once: then it is
/// blacklisted); a local failure is false too, without blame.
pub(super) fn connect_server(
    flow: &mut Flow,
    client: &SocketAddr,
    tok: Token,
    cx: &mut Cx<'_>,
) -> Connect {
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
pub(super) enum Connect {
    Done,
    /// The server cannot be used: blacklist it and try the next ([`move_on`]).
    TryNext,
    /// A local failure (descriptors, ports, memory): the flow ends, no server blamed.
    Local,
}

/// Sends `header` (a PROXY header, or nothing) and `data` as one datagram on the flow's socket;
/// Ok(the payload's length). The datagram's start is remembered (hashed with `hasher`) for
/// [`read_errors`].
pub(super) fn send(
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
