//! The client side of a UDP listener: reading client datagrams in batches, relaying each to its
//! flow's server, and making the flow of a new client (admission, loop check, selection, the
//! flow's socket).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

use quill_core::flows::{FlowId, IcmpWatch};
use quill_core::proxy_header;

use super::failover::{move_on, read_errors, refused};
use super::server::{connect_server, send, Connect};
use super::{canonical, token_of, Cx, Flow, UdpWorker, BUDGET, FLOW_IDS};
use crate::addr::BackendAddr;
use crate::backend::{Pool, ServerLease};
use crate::balancer::{self, Client};
use crate::metrics::{Counters, End, UdpRefusal};
use crate::sys;

impl UdpWorker {
    /// Reads the datagrams queued on listening socket `j` of table `ti` and relays them.
    pub(super) fn read_clients(&mut self, ti: usize, j: usize, cx: &mut Cx<'_>) {
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
        let pool = listener.load_pool_full();
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
            key: None,
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
