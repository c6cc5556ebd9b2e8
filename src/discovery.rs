//! Pools that follow DNS (`servers = { srv = ... }`, `srv:NAME`, `dns:NAME:PORT`): the sockets
//! and timers around `quill_core::dns::lookup`, on the health checker's thread and its event
//! loop (never a worker's). Each pool that follows a name has one round at a time: its queries
//! go over UDP from a fresh socket each (a random source port from the kernel, a random ID),
//! connected to the resolver so nothing else's datagrams are read; a truncated answer is asked
//! again over TCP; a query with no answer within [`QUERY_TIMEOUT_MS`] goes to the next resolver,
//! and the round fails when every resolver has been tried.
//!
//! A round that finds servers hands them to [`Controller::discovered`], the path `quill ctl`
//! changes take; the next round starts at the least TTL of the records used, held to 1 s..5 min
//! (Consul answers with TTL 0). A failed round keeps the pool as it is (DNS never empties a
//! pool) and retries after 1 s; once the resolvers have failed for longer than the pool's `hold`,
//! the pool is reported stale (a warning in the log, `quill_discovery_stale` 1) until they answer.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use mio::net::{TcpStream, UdpSocket};
use mio::{Interest, Registry, Token};
use quill_core::dns::lookup::{Lookup, Want};
use quill_core::dns::DnsError;
use quill_core::rand::Rng;

use crate::config::model::Discovery;
use crate::state::controller::Controller;
use crate::state::shared::DiscoveryStat;

/// How long a query waits for its answer from one resolver (ms).
pub(crate) const QUERY_TIMEOUT_MS: u64 = 1_000;
/// Least and most time between two rounds that found servers (ms): the TTL held to this range.
pub(crate) const MIN_REFRESH_MS: u64 = 1_000;
pub(crate) const MAX_REFRESH_MS: u64 = 300_000;
/// After a failed round, the next one starts this much later (ms).
const RETRY_MS: u64 = 1_000;
/// Tokens of discovery sockets start here (the health checker's probe tokens are the addresses
/// of its servers in memory, far below).
pub(crate) const TOKEN_BASE: usize = 1 << (usize::BITS - 2);
/// At most this many queries of one round in flight (an SRV answer without addresses may name
/// hundreds of targets: their queries wait their turn).
const MAX_IN_FLIGHT: usize = 32;
/// Largest DNS message read (over TCP the length says; over UDP the EDNS size announced).
const MAX_MESSAGE: usize = 65_535;

/// A pool that follows a name: listener or named pool `name`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    name: String,
    pool: bool,
    discovery: Discovery,
}

struct Source {
    /// Clock ms when the next round is due (none is running).
    due_ms: u64,
    round: Option<Round>,
    /// Clock ms of the last round that found servers, or when the source was first seen.
    good_ms: u64,
    stat: DiscoveryStat,
    /// The sync that last saw the pool follow this name.
    seen: u64,
    /// Whether the failure of the current streak was logged at warn already.
    warned: bool,
    /// The resolver that answered last: rounds start with it.
    resolver: usize,
}

struct Round {
    lookup: Lookup,
    /// The queries in flight, by token.
    queries: HashMap<usize, Query>,
    /// Queries waiting for room ([`MAX_IN_FLIGHT`]): (ask, resolver).
    waiting: std::collections::VecDeque<(usize, usize)>,
}

struct Query {
    /// Which of the lookup's queries.
    ask: usize,
    /// Which resolver of the list, and how many were tried for it.
    resolver: usize,
    tries: usize,
    conn: Conn,
    deadline_ms: u64,
}

enum Conn {
    Udp(UdpSocket),
    Tcp {
        stream: TcpStream,
        out: Vec<u8>,
        sent: usize,
        got: Vec<u8>,
    },
}

/// The discovery side of the health checker.
pub(crate) struct Discoverer {
    controller: Arc<Controller>,
    sources: HashMap<Key, Source>,
    rng: Rng,
    next_token: usize,
    round: u64,
}

impl Discoverer {
    /// `seed` is mixed with 8 bytes of the kernel's random source, so that query IDs cannot be
    /// guessed from the process's start time and PID.
    pub(crate) fn new(controller: Arc<Controller>, seed: u64) -> Discoverer {
        let mut bytes = [0u8; 8];
        if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
            let _ = f.read_exact(&mut bytes);
        }
        Discoverer {
            controller,
            sources: HashMap::new(),
            rng: Rng::new((seed ^ u64::from_ne_bytes(bytes)) | 1),
            next_token: 0,
            round: 0,
        }
    }

    /// Follows the running pools: `pools` is (name, named pool?, discovery) for each pool that
    /// follows a name. A new one is asked at once; one no longer followed is dropped with its
    /// queries.
    pub(crate) fn sync(
        &mut self,
        pools: impl Iterator<Item = (String, bool, Discovery)>,
        registry: &Registry,
        now_ms: u64,
    ) {
        self.round += 1;
        for (name, pool, discovery) in pools {
            let key = Key {
                name,
                pool,
                discovery,
            };
            let round = self.round;
            self.sources
                .entry(key.clone())
                .or_insert_with(|| Source {
                    due_ms: now_ms,
                    round: None,
                    good_ms: now_ms,
                    stat: DiscoveryStat {
                        pool: key.name.clone(),
                        source: key.discovery.source(),
                        ..DiscoveryStat::default()
                    },
                    seen: round,
                    warned: false,
                    resolver: 0,
                })
                .seen = round;
        }
        let round = self.round;
        self.sources.retain(|_, s| {
            if s.seen == round {
                return true;
            }
            if let Some(r) = &mut s.round {
                for q in r.queries.values_mut() {
                    q.deregister(registry);
                }
            }
            false
        });
        self.publish();
    }

    /// Whether `token` is one of discovery's.
    pub(crate) fn owns(token: Token) -> bool {
        token.0 >= TOKEN_BASE
    }

    /// The earliest time something is due: a round to start or a query's deadline.
    pub(crate) fn next_wake(&self) -> u64 {
        self.sources
            .values()
            .map(|s| match &s.round {
                None => s.due_ms,
                Some(r) => r
                    .queries
                    .values()
                    .map(|q| q.deadline_ms)
                    .min()
                    .unwrap_or(u64::MAX),
            })
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Starts the rounds that are due and moves on queries past their deadline.
    pub(crate) fn tick(&mut self, registry: &Registry, now_ms: u64) {
        let keys: Vec<Key> = self.sources.keys().cloned().collect();
        for key in keys {
            let Some(source) = self.sources.get_mut(&key) else {
                continue;
            };
            if source.round.is_none() && now_ms >= source.due_ms {
                let mut lookup = Lookup::new(key.discovery.want.clone());
                let rng = &mut self.rng;
                let asks = lookup.start(&mut || rng.next_u64() as u16);
                source.round = Some(Round {
                    lookup,
                    queries: HashMap::new(),
                    waiting: Default::default(),
                });
                let first = source.resolver;
                for ask in asks {
                    self.send(&key, ask, first, 0, registry, now_ms);
                }
            }
            self.expire(&key, registry, now_ms);
            self.conclude(&key, now_ms);
        }
        self.publish();
    }

    /// Queries past their deadline go to the next resolver, or fail the round.
    fn expire(&mut self, key: &Key, registry: &Registry, now_ms: u64) {
        let Some(round) = self.sources.get_mut(key).and_then(|s| s.round.as_mut()) else {
            return;
        };
        let late: Vec<usize> = round
            .queries
            .iter()
            .filter(|(_, q)| now_ms >= q.deadline_ms)
            .map(|(t, _)| *t)
            .collect();
        if late.is_empty() {
            return;
        }
        let mut again = Vec::new();
        let count = resolvers(&key.discovery).len();
        for token in late {
            let Some(mut q) = round.queries.remove(&token) else {
                continue;
            };
            q.deregister(registry);
            // Every resolver once, and one at least twice.
            if q.tries + 1 < count.max(2) {
                again.push((q.ask, (q.resolver + 1) % count, q.tries + 1));
            } else {
                round.lookup.fail(q.ask, DnsError::Timeout);
            }
        }
        for (ask, resolver, tries) in again {
            self.send(key, ask, resolver, tries, registry, now_ms);
        }
        self.pump(key, registry, now_ms);
    }

    /// Sends waiting queries while there is room.
    fn pump(&mut self, key: &Key, registry: &Registry, now_ms: u64) {
        for _ in 0..MAX_IN_FLIGHT {
            let Some(round) = self.sources.get_mut(key).and_then(|s| s.round.as_mut()) else {
                return;
            };
            if round.queries.len() >= MAX_IN_FLIGHT {
                return;
            }
            let Some((ask, resolver)) = round.waiting.pop_front() else {
                return;
            };
            self.send(key, ask, resolver, 0, registry, now_ms);
        }
    }

    /// Sends the lookup's query `ask` to resolver number `resolver` (a fresh socket and token).
    fn send(
        &mut self,
        key: &Key,
        ask: usize,
        resolver: usize,
        tries: usize,
        registry: &Registry,
        now_ms: u64,
    ) {
        let token = TOKEN_BASE + self.next_token;
        self.next_token = (self.next_token + 1) % TOKEN_BASE;
        let list = resolvers(&key.discovery);
        let to = list[resolver % list.len()];
        let Some(source) = self.sources.get_mut(key) else {
            return;
        };
        let Some(round) = source.round.as_mut() else {
            return;
        };
        let Some(a) = round.lookup.ask(ask).cloned() else {
            return;
        };
        if round.queries.len() >= MAX_IN_FLIGHT {
            round.waiting.push_back((ask, resolver));
            return;
        }
        let opened = a
            .message()
            .map_err(|e| io::Error::other(e.to_string()))
            .and_then(|msg| open(to, a.tcp, msg, registry, Token(token)));
        match opened {
            Ok(conn) => {
                source.stat.queries += 1;
                round.queries.insert(
                    token,
                    Query {
                        ask,
                        resolver,
                        tries,
                        conn,
                        deadline_ms: now_ms + QUERY_TIMEOUT_MS * if a.tcp { 2 } else { 1 },
                    },
                );
            }
            Err(e) => {
                tracing::debug!(
                    "{}: DNS query {} {} to {to}: {e}",
                    what(key),
                    a.qtype.as_str(),
                    a.name
                );
                round.lookup.fail(ask, DnsError::Io(format!("{to}: {e}")));
            }
        }
    }

    /// A readiness event on a discovery socket.
    pub(crate) fn on_event(&mut self, token: Token, registry: &Registry, now_ms: u64) {
        let Some(key) = self
            .sources
            .iter()
            .find(|(_, s)| {
                s.round
                    .as_ref()
                    .is_some_and(|r| r.queries.contains_key(&token.0))
            })
            .map(|(k, _)| k.clone())
        else {
            return;
        };
        let mut next = Vec::new();
        let mut answered_by = None;
        {
            let Some(round) = self.sources.get_mut(&key).and_then(|s| s.round.as_mut()) else {
                return;
            };
            let Some(q) = round.queries.get_mut(&token.0) else {
                return;
            };
            let (ask, resolver) = (q.ask, q.resolver);
            let rng = &mut self.rng;
            let mut ids = || rng.next_u64() as u16;
            match q.read(registry, token) {
                Ok(replies) => {
                    let mut answered = false;
                    for bytes in replies {
                        // Bytes that are not the answer (another ID, a forgery) are dropped and
                        // the query waits on.
                        if let Ok(more) = round.lookup.on_reply(ask, &bytes, &mut ids) {
                            next.extend(more);
                            answered = true;
                            answered_by = Some(resolver);
                            break;
                        }
                    }
                    if answered || !round.lookup.pending(ask) {
                        if let Some(mut q) = round.queries.remove(&token.0) {
                            q.deregister(registry);
                        }
                    } else if q.is_tcp() && q.tcp_done() {
                        // A TCP answer that is not ours: that resolver is no use.
                        q.deadline_ms = now_ms;
                    }
                }
                Err(e) => {
                    tracing::debug!("{}: DNS query failed: {e}", what(&key));
                    // Moves on to the next resolver at the next tick.
                    q.deadline_ms = now_ms;
                }
            }
        }
        // Follow-ups (the TCP retry, the targets' addresses) go to the resolver that answered,
        // and the next rounds start with it.
        let to = answered_by.unwrap_or(0);
        if let (Some(r), Some(s)) = (answered_by, self.sources.get_mut(&key)) {
            s.resolver = r;
        }
        for ask in next {
            self.send(&key, ask, to, 0, registry, now_ms);
        }
        self.pump(&key, registry, now_ms);
        self.expire(&key, registry, now_ms);
        self.conclude(&key, now_ms);
        self.publish();
    }

    /// Ends the source's round if its lookup is over: the servers go to the pool, or the failure
    /// is counted and, past `hold`, reported.
    fn conclude(&mut self, key: &Key, now_ms: u64) {
        let Some(source) = self.sources.get_mut(key) else {
            return;
        };
        let Some(outcome) = source.round.as_ref().and_then(|r| r.lookup.outcome()) else {
            return;
        };
        if let Some(r) = &mut source.round {
            // A failed round may leave queries in flight: their sockets close with them.
            r.queries.clear();
        }
        source.round = None;
        match outcome {
            Ok((found, ttl)) => {
                source.due_ms =
                    now_ms + (u64::from(ttl) * 1_000).clamp(MIN_REFRESH_MS, MAX_REFRESH_MS);
                source.good_ms = now_ms;
                source.stat.rounds_ok += 1;
                source.stat.servers = found.len();
                if source.stat.stale || source.warned {
                    tracing::info!("{}: DNS answers again ({} servers)", what(key), found.len());
                }
                source.stat.stale = false;
                source.warned = false;
                match self
                    .controller
                    .discovered(&key.name, key.pool, &key.discovery, &found)
                {
                    Ok(d) if d.added.is_empty() && d.removed.is_empty() => {}
                    Ok(d) => {
                        source.stat.changes += 1;
                        let list = |v: &[crate::addr::BackendAddr]| {
                            v.iter()
                                .map(|a| a.to_string())
                                .collect::<Vec<_>>()
                                .join(" ")
                        };
                        tracing::info!(
                            "{}: servers from DNS: {} now (added: [{}], removed: [{}]; removed ones drain)",
                            what(key),
                            found.len(),
                            list(&d.added),
                            list(&d.removed)
                        );
                    }
                    Err(e) => tracing::warn!("{}: cannot apply the servers found: {e}", what(key)),
                }
            }
            Err(e) => {
                source.due_ms = now_ms + RETRY_MS;
                source.stat.rounds_failed += 1;
                let held = now_ms.saturating_sub(source.good_ms);
                let hold = crate::clock::millis(key.discovery.hold);
                if !source.warned {
                    source.warned = true;
                    tracing::warn!(
                        "{}: DNS lookup failed: {e}; the pool keeps its servers",
                        what(key)
                    );
                } else {
                    tracing::debug!("{}: DNS lookup failed again: {e}", what(key));
                }
                if held >= hold && !source.stat.stale {
                    source.stat.stale = true;
                    tracing::warn!(
                        "{}: DNS has not answered for {}s (hold {}s): the pool is stale and keeps its last servers",
                        what(key),
                        held / 1000,
                        hold / 1000
                    );
                }
            }
        }
    }

    /// Writes each pool's record where the metrics read it.
    fn publish(&self) {
        let mut stats: Vec<DiscoveryStat> = self.sources.values().map(|s| s.stat.clone()).collect();
        stats.sort_by(|a, b| a.pool.cmp(&b.pool));
        let shared = self.controller.shared();
        let mut slot = shared.discovery.lock().unwrap_or_else(|e| e.into_inner());
        if *slot != stats {
            *slot = stats;
        }
    }
}

impl Query {
    fn deregister(&mut self, registry: &Registry) {
        let _ = match &mut self.conn {
            Conn::Udp(s) => registry.deregister(s),
            Conn::Tcp { stream, .. } => registry.deregister(stream),
        };
    }

    fn is_tcp(&self) -> bool {
        matches!(self.conn, Conn::Tcp { .. })
    }

    /// Whether a whole TCP message (or the end of the stream) has been read.
    fn tcp_done(&self) -> bool {
        match &self.conn {
            Conn::Tcp { got, .. } => tcp_message(got).is_some(),
            Conn::Udp(_) => false,
        }
    }

    /// Reads what arrived: the datagrams, or the TCP message once whole (after sending what is
    /// left of the query).
    fn read(&mut self, registry: &Registry, token: Token) -> io::Result<Vec<Vec<u8>>> {
        match &mut self.conn {
            Conn::Udp(socket) => {
                let mut out = Vec::new();
                let mut buf = vec![0u8; MAX_MESSAGE];
                // Bounded: a flood of forged datagrams cannot hold the thread. What is left
                // stays readable: registering again brings a new event for it.
                for _ in 0..64 {
                    match socket.recv(&mut buf) {
                        Ok(n) => out.push(buf[..n].to_vec()),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(out),
                        Err(e) => return Err(e),
                    }
                }
                registry.reregister(socket, token, Interest::READABLE)?;
                Ok(out)
            }
            Conn::Tcp {
                stream,
                out,
                sent,
                got,
            } => {
                while *sent < out.len() {
                    match stream.write(&out[*sent..]) {
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(n) => *sent += n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Vec::new()),
                        Err(e) if e.kind() == io::ErrorKind::NotConnected => return Ok(Vec::new()),
                        Err(e) => return Err(e),
                    }
                }
                let mut buf = [0u8; 16 * 1024];
                loop {
                    match stream.read(&mut buf) {
                        Ok(0) => {
                            return match tcp_message(got) {
                                Some(m) => Ok(vec![m.to_vec()]),
                                None => Err(io::ErrorKind::UnexpectedEof.into()),
                            }
                        }
                        Ok(n) => {
                            got.extend_from_slice(&buf[..n]);
                            if got.len() > MAX_MESSAGE + 2 {
                                return Err(io::Error::other("DNS message too long"));
                            }
                            if let Some(m) = tcp_message(got) {
                                return Ok(vec![m.to_vec()]);
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Vec::new()),
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
}

/// The first whole message of a TCP stream (after its two-byte length).
fn tcp_message(got: &[u8]) -> Option<&[u8]> {
    let len = usize::from(u16::from_be_bytes([*got.first()?, *got.get(1)?]));
    got.get(2..2 + len)
}

/// A socket for one query to `to`, registered under `token`, the query sent (UDP) or queued until
/// the connection is up (TCP).
fn open(
    to: SocketAddr,
    tcp: bool,
    msg: Vec<u8>,
    registry: &Registry,
    token: Token,
) -> io::Result<Conn> {
    if tcp {
        let mut stream = TcpStream::connect(to)?;
        registry.register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)?;
        return Ok(Conn::Tcp {
            stream,
            out: msg,
            sent: 0,
            got: Vec::new(),
        });
    }
    let any: IpAddr = match to {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    // Port 0: the kernel picks a random ephemeral port for each query.
    let mut socket = UdpSocket::bind(SocketAddr::new(any, 0))?;
    socket.connect(to)?;
    socket.send(&msg)?;
    registry.register(&mut socket, token, Interest::READABLE)?;
    Ok(Conn::Udp(socket))
}

/// The resolvers of `d`: its own, else the `nameserver` lines of /etc/resolv.conf, else the
/// local resolver (127.0.0.1:53, as the C library does).
fn resolvers(d: &Discovery) -> Vec<SocketAddr> {
    if !d.resolvers.is_empty() {
        return d.resolvers.clone();
    }
    let text = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let list = resolv_conf(&text);
    if list.is_empty() {
        vec![SocketAddr::from(([127, 0, 0, 1], 53))]
    } else {
        list
    }
}

/// The `nameserver` addresses of a resolv.conf text (port 53), at most three as the C library.
fn resolv_conf(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next()? == "nameserver").then_some(())?;
            // A scoped IPv6 address (fe80::1%eth0) is left out.
            let ip: IpAddr = words.next()?.parse().ok()?;
            Some(SocketAddr::new(ip, 53))
        })
        .take(3)
        .collect()
}

fn what(key: &Key) -> String {
    let kind = if key.pool { "pool" } else { "listener" };
    let name = match &key.discovery.want {
        Want::Srv(n) => format!("SRV {n}"),
        Want::Host { name, port } => format!("{name}:{port}"),
    };
    format!("{kind} '{}' ({name})", key.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_gives_the_nameservers_at_port_53() {
        let text = "# comment\nsearch example\nnameserver 10.0.0.2\nnameserver ::1\nnameserver fe80::1%eth0\noptions ndots:5\nnameserver 10.0.0.3\nnameserver 10.0.0.4\n";
        let list: Vec<String> = resolv_conf(text).iter().map(|a| a.to_string()).collect();
        assert_eq!(list, ["10.0.0.2:53", "[::1]:53", "10.0.0.3:53"]);
    }

    #[test]
    fn a_tcp_message_is_whole_only_with_all_its_bytes() {
        assert_eq!(tcp_message(&[0]), None);
        assert_eq!(tcp_message(&[0, 3, 1, 2]), None);
        assert_eq!(tcp_message(&[0, 3, 1, 2, 3, 4]), Some(&[1, 2, 3][..]));
    }
}
