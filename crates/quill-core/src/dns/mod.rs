//! DNS for service discovery: the messages Quill sends to find a pool's servers (SRV, A and AAAA
//! questions) and the checks on what comes back, with no I/O. Encoding and decoding are
//! hickory-proto's; this module adds what a client must check itself: the reply answers our
//! question with our ID, the response code, truncation (then the question goes again over TCP),
//! and which records belong to the question (the owner name, following CNAMEs).
//!
//! [`lookup::Lookup`] turns one discovery question (`_http._tcp.web.service.consul` or a host
//! name and port) into queries and their replies into servers.

pub mod lookup;
#[cfg(test)]
mod tests;

use std::net::IpAddr;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};

/// The EDNS payload size announced in queries: the DNS flag day 2020 value, which no path
/// fragments. An answer that does not fit comes back truncated and is asked again over TCP.
pub const EDNS_PAYLOAD: u16 = 1232;

/// Longest name accepted (RFC 1035: 255 bytes on the wire).
pub const MAX_NAME: usize = 253;

/// The record types discovery asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QType {
    Srv,
    A,
    Aaaa,
}

impl QType {
    fn record_type(self) -> RecordType {
        match self {
            QType::Srv => RecordType::SRV,
            QType::A => RecordType::A,
            QType::Aaaa => RecordType::AAAA,
        }
    }

    /// Its name in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            QType::Srv => "SRV",
            QType::A => "A",
            QType::Aaaa => "AAAA",
        }
    }
}

/// Why a reply was not taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    #[error("'{0}' is not a valid DNS name")]
    Name(String),
    #[error("malformed DNS message")]
    Malformed,
    #[error("not a reply to our query (ID or question differs)")]
    NotOurs,
    #[error("the name does not exist (NXDOMAIN)")]
    NxDomain,
    #[error("the server answered {0}")]
    Rcode(String),
    #[error("no usable records in the answer")]
    Empty,
    #[error("no answer in time")]
    Timeout,
    #[error("{0}")]
    Io(String),
}

/// A record of a reply that discovery uses; names are lower case without the final dot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rr {
    pub name: String,
    pub ttl: u32,
    pub data: RrData,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RrData {
    Srv {
        priority: u16,
        weight: u16,
        port: u16,
        target: String,
    },
    Addr(IpAddr),
    Cname(String),
}

/// A reply that answers our question.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reply {
    /// The server cut the answer (TC): ask again over TCP.
    pub truncated: bool,
    /// The answer section's records of the question's type whose owner is the question's name or
    /// an alias of it (CNAMEs followed, at most 8).
    pub answers: Vec<Rr>,
    /// The additional section's address records (SRV targets' addresses, as knot and Consul send).
    pub additional: Vec<Rr>,
}

/// `name` as discovery compares it: lower case, without the final dot.
pub fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn parse_name(name: &str) -> Result<Name, DnsError> {
    let n = normalize(name);
    if n.is_empty() || n.len() > MAX_NAME {
        return Err(DnsError::Name(name.to_string()));
    }
    let mut parsed = Name::from_ascii(&n).map_err(|_| DnsError::Name(name.to_string()))?;
    parsed.set_fqdn(true);
    Ok(parsed)
}

/// Checks that `name` can be asked (syntax and length).
pub fn check_name(name: &str) -> Result<(), DnsError> {
    parse_name(name).map(|_| ())
}

/// The query for (`name`, `qtype`) with `id`, recursion desired and EDNS; over TCP (`tcp`) with
/// its two-byte length first.
pub fn query(id: u16, name: &str, qtype: QType, tcp: bool) -> Result<Vec<u8>, DnsError> {
    let mut m = Message::new(id, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(parse_name(name)?, qtype.record_type()));
    let mut edns = Edns::new();
    edns.set_max_payload(EDNS_PAYLOAD);
    m.set_edns(edns);
    let body = m.to_vec().map_err(|_| DnsError::Malformed)?;
    if !tcp {
        return Ok(body);
    }
    let mut out = Vec::with_capacity(body.len() + 2);
    out.extend_from_slice(&(body.len() as u16).to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Reads `bytes` (one UDP datagram, or a TCP message without its length) as the reply to the
/// query (`id`, `name`, `qtype`).
pub fn reply(bytes: &[u8], id: u16, name: &str, qtype: QType) -> Result<Reply, DnsError> {
    let m = Message::from_vec(bytes).map_err(|_| DnsError::Malformed)?;
    let meta = &m.metadata;
    let asked = normalize(name);
    let same_question = m.queries.len() == 1
        && m.queries[0].query_type() == qtype.record_type()
        && normalize(&m.queries[0].name().to_ascii()) == asked;
    if meta.id != id || meta.message_type != MessageType::Response || !same_question {
        return Err(DnsError::NotOurs);
    }
    match meta.response_code {
        ResponseCode::NoError => {}
        ResponseCode::NXDomain => return Err(DnsError::NxDomain),
        other => return Err(DnsError::Rcode(other.to_string())),
    }
    let records = |section: &[hickory_proto::rr::Record]| -> Vec<Rr> {
        section
            .iter()
            .filter_map(|r| {
                let data = match &r.data {
                    RData::SRV(s) => RrData::Srv {
                        priority: s.priority,
                        weight: s.weight,
                        port: s.port,
                        target: normalize(&s.target.to_ascii()),
                    },
                    RData::A(a) => RrData::Addr(IpAddr::V4(a.0)),
                    RData::AAAA(a) => RrData::Addr(IpAddr::V6(a.0)),
                    RData::CNAME(c) => RrData::Cname(normalize(&c.0.to_ascii())),
                    _ => return None,
                };
                Some(Rr {
                    name: normalize(&r.name.to_ascii()),
                    ttl: r.ttl,
                    data,
                })
            })
            .collect()
    };
    let all = records(&m.answers);
    // The names that stand for the question: it, then each CNAME target in turn.
    let mut owners = vec![asked];
    for _ in 0..8 {
        let last = owners.last().cloned().unwrap_or_default();
        let next = all.iter().find_map(|r| match &r.data {
            RrData::Cname(t) if r.name == last && !owners.contains(t) => Some(t.clone()),
            _ => None,
        });
        match next {
            Some(t) => owners.push(t),
            None => break,
        }
    }
    let wanted = |d: &RrData| {
        matches!(
            (qtype, d),
            (QType::Srv, RrData::Srv { .. })
                | (QType::A, RrData::Addr(IpAddr::V4(_)))
                | (QType::Aaaa, RrData::Addr(IpAddr::V6(_)))
        )
    };
    let answers = all
        .into_iter()
        .filter(|r| wanted(&r.data) && owners.contains(&r.name))
        .collect();
    let additional = records(&m.additionals)
        .into_iter()
        .filter(|r| matches!(r.data, RrData::Addr(_)))
        .collect();
    Ok(Reply {
        truncated: meta.truncation,
        answers,
        additional,
    })
}
