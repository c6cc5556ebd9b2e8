use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CNAME, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use proptest::prelude::*;

use super::lookup::{Found, Lookup, Want};
use super::{query, reply, DnsError, QType, RrData, EDNS_PAYLOAD};

fn name(s: &str) -> Name {
    let mut n = Name::from_ascii(s).unwrap();
    n.set_fqdn(true);
    n
}

/// A server's reply to the query in `q` (bytes without a TCP length).
fn answer(q: &[u8], build: impl FnOnce(&mut Message)) -> Vec<u8> {
    let asked = Message::from_vec(q).unwrap();
    let mut m = Message::new(asked.metadata.id, MessageType::Response, OpCode::Query);
    m.add_queries(asked.queries.clone());
    build(&mut m);
    m.to_vec().unwrap()
}

fn srv(owner: &str, prio: u16, weight: u16, port: u16, target: &str, ttl: u32) -> Record {
    Record::from_rdata(
        name(owner),
        ttl,
        RData::SRV(SRV::new(prio, weight, port, name(target))),
    )
}

fn a(owner: &str, ip: [u8; 4], ttl: u32) -> Record {
    Record::from_rdata(name(owner), ttl, RData::A(A(Ipv4Addr::from(ip))))
}

fn counter() -> impl FnMut() -> u16 {
    let mut n = 100u16;
    move || {
        n += 1;
        n
    }
}

type Run = (Result<(Vec<Found>, u32), DnsError>, Vec<super::lookup::Ask>);

/// Runs `lookup` against `server` (a function from a query to its reply bytes), with at most
/// `limit` queries; returns the outcome and the queries asked.
fn run(
    mut lookup: Lookup,
    limit: usize,
    mut server: impl FnMut(&super::lookup::Ask, &[u8]) -> Vec<u8>,
) -> Run {
    let mut ids = counter();
    let mut todo = lookup.start(&mut ids);
    let mut asked = Vec::new();
    while let Some(i) = todo.pop() {
        assert!(asked.len() < limit, "more than {limit} queries");
        let ask = lookup.ask(i).unwrap().clone();
        let msg = ask.message().unwrap();
        let body = if ask.tcp { &msg[2..] } else { &msg[..] };
        let bytes = server(&ask, body);
        asked.push(ask);
        todo.extend(lookup.on_reply(i, &bytes, &mut ids).unwrap());
    }
    (lookup.outcome().expect("nothing pending"), asked)
}

#[test]
fn query_asks_one_question_with_recursion_and_edns() {
    let q = query(0xbeef, "_http._tcp.web.service.consul.", QType::Srv, false).unwrap();
    let m = Message::from_vec(&q).unwrap();
    assert_eq!(m.metadata.id, 0xbeef);
    assert!(m.metadata.recursion_desired);
    assert_eq!(m.queries.len(), 1);
    assert_eq!(m.queries[0].query_type(), RecordType::SRV);
    assert_eq!(
        m.queries[0].name().to_ascii(),
        "_http._tcp.web.service.consul."
    );
    assert_eq!(m.edns.unwrap().max_payload(), EDNS_PAYLOAD);
    let t = query(0xbeef, "_http._tcp.web.service.consul", QType::Srv, true).unwrap();
    assert_eq!(usize::from(u16::from_be_bytes([t[0], t[1]])), q.len());
    assert_eq!(&t[2..], &q[..]);
}

#[test]
fn bad_names_are_refused() {
    assert!(query(1, "", QType::A, false).is_err());
    assert!(query(1, &"a".repeat(300), QType::A, false).is_err());
    assert!(query(1, "a..b", QType::A, false).is_err());
}

#[test]
fn a_reply_with_another_id_or_question_is_not_ours() {
    let q = query(7, "web.consul", QType::A, false).unwrap();
    let good = answer(&q, |m| {
        m.add_answer(a("web.consul", [10, 0, 0, 1], 5));
    });
    assert_eq!(
        reply(&good, 7, "web.consul", QType::A)
            .unwrap()
            .answers
            .len(),
        1
    );
    assert_eq!(
        reply(&good, 8, "web.consul", QType::A),
        Err(DnsError::NotOurs)
    );
    assert_eq!(
        reply(&good, 7, "other.consul", QType::A),
        Err(DnsError::NotOurs)
    );
    assert_eq!(
        reply(&good, 7, "web.consul", QType::Aaaa),
        Err(DnsError::NotOurs)
    );
    // Our own query echoed back is not a response.
    assert_eq!(reply(&q, 7, "web.consul", QType::A), Err(DnsError::NotOurs));
    // Names compare without case.
    assert!(reply(&good, 7, "WEB.Consul.", QType::A).is_ok());
}

#[test]
fn response_codes_are_errors() {
    let q = query(7, "web.consul", QType::Srv, false).unwrap();
    let nx = answer(&q, |m| {
        m.metadata.response_code = ResponseCode::NXDomain;
    });
    assert_eq!(
        reply(&nx, 7, "web.consul", QType::Srv),
        Err(DnsError::NxDomain)
    );
    let fail = answer(&q, |m| {
        m.metadata.response_code = ResponseCode::ServFail;
    });
    assert!(matches!(
        reply(&fail, 7, "web.consul", QType::Srv),
        Err(DnsError::Rcode(_))
    ));
}

#[test]
fn records_of_other_names_are_ignored_and_cnames_followed() {
    let q = query(7, "web.svc", QType::A, false).unwrap();
    let bytes = answer(&q, |m| {
        m.add_answer(Record::from_rdata(
            name("web.svc"),
            30,
            RData::CNAME(CNAME(name("real.svc"))),
        ));
        m.add_answer(a("real.svc", [10, 0, 0, 2], 20));
        m.add_answer(a("stranger.svc", [10, 0, 0, 9], 20));
    });
    let r = reply(&bytes, 7, "web.svc", QType::A).unwrap();
    let ips: Vec<_> = r
        .answers
        .iter()
        .map(|r| match r.data {
            RrData::Addr(ip) => ip,
            _ => panic!("not an address"),
        })
        .collect();
    assert_eq!(ips, vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))]);
}

#[test]
fn srv_with_additional_addresses_needs_one_query() {
    let want = Want::Srv("_http._tcp.web.service.consul".into());
    let (out, asked) = run(Lookup::new(want), 10, |_, q| {
        answer(q, |m| {
            let owner = "_http._tcp.web.service.consul";
            m.add_answer(srv(owner, 1, 10, 8081, "b1.node.consul", 0));
            m.add_answer(srv(owner, 2, 20, 8082, "b2.node.consul", 5));
            m.add_additional(a("b1.node.consul", [127, 0, 0, 11], 0));
            m.add_additional(a("b2.node.consul", [127, 0, 0, 12], 0));
        })
    });
    assert_eq!(asked.len(), 1);
    let (found, ttl) = out.unwrap();
    assert_eq!(ttl, 0);
    assert_eq!(
        found,
        vec![
            Found {
                identity: Some("b1.node.consul:8081".into()),
                addr: "127.0.0.11:8081".parse().unwrap(),
                priority: 1,
                weight: 10,
            },
            Found {
                identity: Some("b2.node.consul:8082".into()),
                addr: "127.0.0.12:8082".parse().unwrap(),
                priority: 2,
                weight: 20,
            },
        ]
    );
}

#[test]
fn srv_targets_without_additional_are_asked_a_then_aaaa() {
    let want = Want::Srv("_web._tcp.web.default.svc.cluster.local".into());
    let (out, asked) = run(Lookup::new(want), 10, |ask, q| {
        answer(q, |m| match (ask.qtype, ask.name.as_str()) {
            (QType::Srv, owner) => {
                m.add_answer(srv(
                    owner,
                    0,
                    1,
                    8080,
                    "p4.web.default.svc.cluster.local",
                    30,
                ));
                m.add_answer(srv(
                    owner,
                    0,
                    1,
                    8080,
                    "p6.web.default.svc.cluster.local",
                    30,
                ));
            }
            (QType::A, "p4.web.default.svc.cluster.local") => {
                m.add_answer(a(&ask.name, [127, 0, 0, 4], 10));
            }
            (QType::A, _) => {}
            (QType::Aaaa, _) => {
                m.add_answer(Record::from_rdata(
                    name(&ask.name),
                    20,
                    RData::AAAA(AAAA(Ipv6Addr::LOCALHOST)),
                ));
            }
        })
    });
    let kinds: Vec<_> = asked.iter().map(|a| (a.qtype, a.name.as_str())).collect();
    assert_eq!(kinds.len(), 4, "{kinds:?}");
    let (found, ttl) = out.unwrap();
    assert_eq!(ttl, 10);
    let addrs: Vec<SocketAddr> = found.iter().map(|f| f.addr).collect();
    assert_eq!(
        addrs,
        vec![
            "127.0.0.4:8080".parse().unwrap(),
            "[::1]:8080".parse().unwrap()
        ]
    );
}

#[test]
fn a_truncated_answer_is_asked_again_over_tcp() {
    let owner = "_http._tcp.big.service.consul";
    let (out, asked) = run(Lookup::new(Want::Srv(owner.into())), 10, |ask, q| {
        answer(q, |m| {
            if !ask.tcp {
                m.metadata.truncation = true;
                return;
            }
            for k in 0..100u8 {
                let target = format!("n{k}.node.consul");
                m.add_answer(srv(owner, 0, 1, 9000 + u16::from(k), &target, 3));
                m.add_additional(a(&target, [127, 1, 0, k], 3));
            }
        })
    });
    assert_eq!(asked.len(), 2);
    assert!(!asked[0].tcp && asked[1].tcp);
    assert_ne!(asked[0].id, asked[1].id, "each query has its own ID");
    let (found, ttl) = out.unwrap();
    assert_eq!((found.len(), ttl), (100, 3));
}

#[test]
fn a_host_gives_a_server_per_address_at_the_port() {
    let want = Want::Host {
        name: "web.default.svc.cluster.local".into(),
        port: 8080,
    };
    let (out, _) = run(Lookup::new(want), 4, |ask, q| {
        answer(q, |m| {
            if ask.qtype == QType::A {
                m.add_answer(a(&ask.name, [127, 0, 0, 2], 7));
                m.add_answer(a(&ask.name, [127, 0, 0, 1], 9));
            } else {
                m.metadata.response_code = ResponseCode::NXDomain;
            }
        })
    });
    let (found, ttl) = out.unwrap();
    assert_eq!(ttl, 7);
    let addrs: Vec<String> = found.iter().map(|f| f.addr.to_string()).collect();
    assert_eq!(addrs, ["127.0.0.1:8080", "127.0.0.2:8080"]);
}

#[test]
fn nothing_usable_or_a_failure_is_an_error_never_an_empty_set() {
    let owner = "_http._tcp.gone.service.consul";
    let (out, _) = run(Lookup::new(Want::Srv(owner.into())), 4, |_, q| {
        answer(q, |m| m.metadata.response_code = ResponseCode::NXDomain)
    });
    assert_eq!(out, Err(DnsError::NxDomain));
    let (out, _) = run(Lookup::new(Want::Srv(owner.into())), 4, |_, q| {
        answer(q, |_| {})
    });
    assert_eq!(out, Err(DnsError::Empty));
    // A target "." means no service there.
    let (out, _) = run(Lookup::new(Want::Srv(owner.into())), 4, |_, q| {
        answer(q, |m| {
            m.add_answer(Record::from_rdata(
                name(owner),
                5,
                RData::SRV(SRV::new(0, 0, 80, Name::root())),
            ));
        })
    });
    assert_eq!(out, Err(DnsError::Empty));
    let mut l = Lookup::new(Want::Srv(owner.into()));
    let first = l.start(&mut counter());
    assert!(l.outcome().is_none(), "pending");
    l.fail(first[0], DnsError::Timeout);
    assert_eq!(l.outcome(), Some(Err(DnsError::Timeout)));
}

#[test]
fn a_forged_reply_leaves_the_query_waiting() {
    let mut ids = counter();
    let mut l = Lookup::new(Want::Srv("_x._tcp.svc".into()));
    let i = l.start(&mut ids)[0];
    let wrong = query(1, "_x._tcp.svc", QType::Srv, false).unwrap();
    assert!(l.on_reply(i, &wrong, &mut ids).is_err());
    assert!(l.on_reply(i, b"garbage", &mut ids).is_err());
    assert!(l.pending(i));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any bytes as any reply: no panic, and a round always ends within a bounded number of
    /// queries (each reply can add at most the queries its records name).
    #[test]
    fn random_replies_never_panic_and_rounds_end(
        replies in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..600), 1..12),
        srv_round in any::<bool>(),
    ) {
        let want = if srv_round {
            Want::Srv("_h._tcp.s.consul".into())
        } else {
            Want::Host { name: "s.consul".into(), port: 80 }
        };
        let mut l = Lookup::new(want);
        let mut ids = counter();
        let mut todo = l.start(&mut ids);
        let mut n = 0;
        while let Some(i) = todo.pop() {
            n += 1;
            prop_assert!(n < 2 * super::lookup::MAX_SRV + 8);
            let bytes = &replies[n % replies.len()];
            match l.on_reply(i, bytes, &mut ids) {
                Ok(more) => todo.extend(more),
                Err(_) => l.fail(i, DnsError::Timeout),
            }
        }
        prop_assert!(l.outcome().is_some());
    }

    /// A real reply cut or with one byte changed: no panic; a cut one is never taken whole.
    #[test]
    fn mangled_replies_never_panic(cut in 0usize..200, flip in 0usize..200, bit in 0u8..8) {
        let q = query(9, "_h._tcp.s.consul", QType::Srv, false).unwrap();
        let mut good = answer(&q, |m| {
            m.add_answer(srv("_h._tcp.s.consul", 1, 1, 80, "t.consul", 5));
            m.add_additional(a("t.consul", [127, 0, 0, 1], 5));
        });
        let cut = cut.min(good.len());
        if cut < good.len() {
            prop_assert!(reply(&good[..cut], 9, "_h._tcp.s.consul", QType::Srv).is_err());
        }
        let at = flip % good.len();
        good[at] ^= 1 << bit;
        let _ = reply(&good, 9, "_h._tcp.s.consul", QType::Srv);
    }
}
