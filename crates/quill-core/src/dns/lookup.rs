//! One discovery round as a state machine: the question a pool's servers come from (an SRV name,
//! or a host name and port), the queries it takes, and the servers they give. No I/O and no
//! clock: the caller sends each query [`Lookup::start`] and [`Lookup::on_reply`] hand it (over
//! UDP, or TCP when `tcp` is set), feeds back each reply or failure, and reads
//! [`Lookup::outcome`] once nothing is pending.
//!
//! An SRV answer gives servers at its targets' addresses: from the additional section when the
//! DNS server sent them (knot, Consul), else from follow-up A queries (then AAAA for a target
//! with no A record), as unbound's local data needs. A target `.` (RFC 2782: no service) is
//! skipped. A host name gives one server per A and AAAA record, at the configured port.
//!
//! The round's TTL is the least TTL of the records it used. A round fails (and the caller keeps
//! the servers it has) when a query fails or nothing usable comes back; it never yields an empty
//! set.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use super::{reply, DnsError, QType, RrData};

/// At most this many SRV records are used from one answer (Kubernetes' and Consul's answers for
/// a service of this many instances are about 10 KiB).
pub const MAX_SRV: usize = 512;

/// What a pool's servers come from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Want {
    /// An SRV name (`_http._tcp.web.service.consul`): targets, ports, priorities and weights.
    Srv(String),
    /// A host name's A and AAAA records, each a server at `port`.
    Host { name: String, port: u16 },
}

impl Want {
    /// The name asked first.
    pub fn name(&self) -> &str {
        match self {
            Want::Srv(n) => n,
            Want::Host { name, .. } => name,
        }
    }
}

/// One server found.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Found {
    /// What identifies it whatever its address: `TARGET:PORT` for an SRV record (Maglev tables
    /// are built from it); None for a host's address records (the address is the identity).
    pub identity: Option<String>,
    pub addr: SocketAddr,
    /// SRV priority (lowest wins; Pen's PRIO), 0 for host records.
    pub priority: u16,
    /// SRV weight (0 is kept as 0: the caller decides), 1 for host records.
    pub weight: u16,
}

/// A query of the round, to send or sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ask {
    pub id: u16,
    pub name: String,
    pub qtype: QType,
    /// Over TCP (the UDP answer was truncated).
    pub tcp: bool,
    done: bool,
}

impl Ask {
    /// The bytes to send (over TCP with their two-byte length).
    pub fn message(&self) -> Result<Vec<u8>, DnsError> {
        super::query(self.id, &self.name, self.qtype, self.tcp)
    }
}

/// One SRV record kept for the round.
#[derive(Clone, Debug)]
struct SrvRec {
    priority: u16,
    weight: u16,
    port: u16,
    target: String,
}

/// One discovery round.
#[derive(Debug)]
pub struct Lookup {
    want: Want,
    asks: Vec<Ask>,
    srv: Vec<SrvRec>,
    /// Addresses per name (SRV targets, or the host), from answers and additional sections.
    addrs: BTreeMap<String, Vec<IpAddr>>,
    ttl: u32,
    failed: Option<DnsError>,
}

impl Lookup {
    pub fn new(want: Want) -> Lookup {
        Lookup {
            want,
            asks: Vec::new(),
            srv: Vec::new(),
            addrs: BTreeMap::new(),
            ttl: u32::MAX,
            failed: None,
        }
    }

    pub fn want(&self) -> &Want {
        &self.want
    }

    /// The round's first queries (their indices): SRV, or A and AAAA.
    pub fn start(&mut self, id: &mut dyn FnMut() -> u16) -> Vec<usize> {
        let name = super::normalize(self.want.name());
        match &self.want {
            Want::Srv(_) => vec![self.push(id(), &name, QType::Srv, false)],
            Want::Host { .. } => vec![
                self.push(id(), &name, QType::A, false),
                self.push(id(), &name, QType::Aaaa, false),
            ],
        }
    }

    fn push(&mut self, id: u16, name: &str, qtype: QType, tcp: bool) -> usize {
        self.asks.push(Ask {
            id,
            name: name.to_string(),
            qtype,
            tcp,
            done: false,
        });
        self.asks.len() - 1
    }

    /// Query `i`.
    pub fn ask(&self, i: usize) -> Option<&Ask> {
        self.asks.get(i)
    }

    /// Whether query `i` still waits for its reply.
    pub fn pending(&self, i: usize) -> bool {
        self.failed.is_none() && self.asks.get(i).is_some_and(|a| !a.done)
    }

    /// Takes `bytes` as the reply to query `i`. Ok with the queries to send next (the same
    /// question over TCP after a truncated answer, follow-up address queries); Err when the bytes
    /// are not a reply to it (another's, a forgery, garbage): the query still waits, and the
    /// caller drops the bytes.
    pub fn on_reply(
        &mut self,
        i: usize,
        bytes: &[u8],
        id: &mut dyn FnMut() -> u16,
    ) -> Result<Vec<usize>, DnsError> {
        if !self.pending(i) {
            return Err(DnsError::NotOurs);
        }
        let ask = self.asks[i].clone();
        let r = match reply(bytes, ask.id, &ask.name, ask.qtype) {
            Err(DnsError::NotOurs) => return Err(DnsError::NotOurs),
            Err(DnsError::Malformed) if !ask.tcp => return Err(DnsError::Malformed),
            // An address query for a name with no such record: empty, not a failure (a target
            // may have only AAAA records, a host only A).
            Err(DnsError::NxDomain) if ask.qtype != QType::Srv => {
                self.asks[i].done = true;
                return Ok(self.after_address(&ask, id));
            }
            Err(e) => {
                self.asks[i].done = true;
                self.failed = Some(e);
                return Ok(Vec::new());
            }
            Ok(r) => r,
        };
        self.asks[i].done = true;
        if r.truncated && !ask.tcp {
            return Ok(vec![self.push(id(), &ask.name, ask.qtype, true)]);
        }
        for rr in &r.additional {
            if let RrData::Addr(ip) = rr.data {
                self.add_addr(&rr.name, ip, rr.ttl);
            }
        }
        match ask.qtype {
            QType::Srv => Ok(self.take_srv(&r, id)),
            QType::A | QType::Aaaa => {
                for rr in &r.answers {
                    if let RrData::Addr(ip) = rr.data {
                        // The records of an alias chain stand for the name asked.
                        self.add_addr(&ask.name, ip, rr.ttl);
                    }
                }
                Ok(self.after_address(&ask, id))
            }
        }
    }

    /// Query `i` got no answer (every resolver tried, or a socket error): the round fails.
    pub fn fail(&mut self, i: usize, why: DnsError) {
        if let Some(a) = self.asks.get_mut(i) {
            a.done = true;
        }
        if self.failed.is_none() {
            self.failed = Some(why);
        }
    }

    fn add_addr(&mut self, name: &str, ip: IpAddr, ttl: u32) {
        let list = self.addrs.entry(name.to_string()).or_default();
        if !list.contains(&ip) {
            list.push(ip);
        }
        self.ttl = self.ttl.min(ttl);
    }

    fn take_srv(&mut self, r: &super::Reply, id: &mut dyn FnMut() -> u16) -> Vec<usize> {
        for rr in r.answers.iter().take(MAX_SRV) {
            if let RrData::Srv {
                priority,
                weight,
                port,
                target,
            } = &rr.data
            {
                if target.is_empty() {
                    continue;
                }
                self.ttl = self.ttl.min(rr.ttl);
                self.srv.push(SrvRec {
                    priority: *priority,
                    weight: *weight,
                    port: *port,
                    target: target.clone(),
                });
            }
        }
        // Targets the additional section did not resolve: ask their A records.
        let mut missing: Vec<String> = self
            .srv
            .iter()
            .filter(|s| !self.addrs.contains_key(&s.target))
            .map(|s| s.target.clone())
            .collect();
        missing.sort();
        missing.dedup();
        missing
            .into_iter()
            .map(|t| self.push(id(), &t, QType::A, false))
            .collect()
    }

    /// After an SRV target's A query found nothing, its AAAA query.
    fn after_address(&mut self, ask: &Ask, id: &mut dyn FnMut() -> u16) -> Vec<usize> {
        let is_target = matches!(self.want, Want::Srv(_));
        if is_target && ask.qtype == QType::A && !self.addrs.contains_key(&ask.name) {
            return vec![self.push(id(), &ask.name, QType::Aaaa, false)];
        }
        Vec::new()
    }

    /// The round's result once no query is pending: the servers found (sorted, never empty) and
    /// the least TTL of the records used; None while queries are pending.
    pub fn outcome(&self) -> Option<Result<(Vec<Found>, u32), DnsError>> {
        if let Some(e) = &self.failed {
            return Some(Err(e.clone()));
        }
        if self.asks.iter().any(|a| !a.done) {
            return None;
        }
        let mut found: Vec<Found> = match &self.want {
            Want::Srv(_) => self
                .srv
                .iter()
                .filter_map(|s| {
                    // One address per target: the least IPv4 one, else the least IPv6 one, so
                    // every instance picks the same.
                    let addrs = self.addrs.get(&s.target)?;
                    let ip = addrs
                        .iter()
                        .filter(|a| a.is_ipv4())
                        .min()
                        .or_else(|| addrs.iter().min())?;
                    Some(Found {
                        identity: Some(format!("{}:{}", s.target, s.port)),
                        addr: SocketAddr::new(*ip, s.port),
                        priority: s.priority,
                        weight: s.weight,
                    })
                })
                .collect(),
            Want::Host { name, port } => self
                .addrs
                .get(&super::normalize(name))
                .into_iter()
                .flatten()
                .map(|ip| Found {
                    identity: None,
                    addr: SocketAddr::new(*ip, *port),
                    priority: 0,
                    weight: 1,
                })
                .collect(),
        };
        found.sort();
        // Two targets at one address are one server.
        let mut seen = std::collections::HashSet::new();
        found.retain(|f| seen.insert(f.addr));
        if found.is_empty() {
            return Some(Err(DnsError::Empty));
        }
        Some(Ok((found, self.ttl)))
    }
}
