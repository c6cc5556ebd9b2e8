//! When a flow's server refuses: the ICMP errors on the flow's socket weighed (only a genuine
//! port unreachable counts), and the flow moved on to the next server in Pen's failover order.

use std::hash::{BuildHasher, RandomState};
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

use mio::Token;
use quill_core::flows::IcmpVerdict;

use super::server::{connect_server, Connect};
use super::{canonical, Cx, Flow, ERRORS_PER_CALL, QUOTE_PREFIX};
use crate::addr::BackendAddr;
use crate::backend::ServerLease;
use crate::balancer;
use crate::metrics::{Counters, End};
use crate::sys;

/// Reads the ICMP errors queued on the flow's socket (IP_RECVERR) and weighs them: one counts
/// only when it is a port unreachable from the server's own address, about a datagram to the
/// server, quoting the start of one the flow sent (an off-path sender cannot know it); others
/// are counted as ignored. True when the server is to be taken out
/// ([`IcmpWatch`](quill_core::flows::IcmpWatch): two such errors, or one and an unanswered
/// datagram).
pub(super) fn read_errors(flow: &mut Flow, hasher: &RandomState, cx: &Cx<'_>) -> bool {
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

/// How a flow ends after ICMP port unreachable: `refused` when no server is left.
pub(super) fn refused(end: End) -> End {
    match end {
        End::NoServer => End::Refused,
        other => other,
    }
}

/// The flow's server refused (ICMP port unreachable) or could not be used: blacklist it and move
/// the flow to the next server in Pen's failover order, then the emergency server. Err(NoServer)
/// when none is left (after ICMP the flow ends `refused`), Err(Error) on a local failure.
pub(super) fn move_on(
    flow: &mut Flow,
    client: &SocketAddr,
    tok: Token,
    cx: &mut Cx<'_>,
) -> Result<(), End> {
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
