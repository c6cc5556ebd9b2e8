//! Fuzz target for `quill_core::dsr` on arbitrary frames: parsing never panics; an ARP request
//! for the virtual address is answered with a reply that parses back to what it says; a flow's
//! hash and server choice are the same twice; a tarpit SYN-ACK parses back as the SYN's answer;
//! filling in a checksum twice gives the same frame.

#![no_main]

use std::net::Ipv4Addr;

use libfuzzer_sys::fuzz_target;
use quill_core::dsr::{self, Payload};

const MAC: dsr::Mac = [2, 0, 0, 0, 0, 1];

fuzz_target!(|data: &[u8]| {
    let Some(frame) = dsr::parse(data) else {
        assert!(data.len() < 18);
        return;
    };
    match frame.payload {
        Payload::Arp(arp) => {
            let vip = Ipv4Addr::new(10, 0, 0, 100);
            if let Some(reply) = dsr::arp_reply(&arp, vip, MAC) {
                let back = dsr::parse(&reply).expect("reply parses");
                let Payload::Arp(r) = back.payload else {
                    panic!("reply is not ARP")
                };
                assert_eq!((r.sender_ip, r.sender_mac, r.op), (vip, MAC, dsr::ARP_REPLY));
                assert_eq!((r.target_ip, r.target_mac), (arp.sender_ip, arp.sender_mac));
            }
        }
        Payload::Ip(flow) => {
            let h = dsr::flow_hash(&flow, 7);
            assert_eq!(h, dsr::flow_hash(&flow, 7));
            let servers = [(0, 1), (1, 3), (2, 0)];
            let a = dsr::choose(h, servers.into_iter());
            assert_eq!(a, dsr::choose(h, servers.into_iter()));
            assert_ne!(a, Some(2));
            if let Some(f) = dsr::tarpit_synack(&flow, frame.src, MAC, 1) {
                let Some(Payload::Ip(back)) = dsr::parse(&f).map(|f| f.payload) else {
                    panic!("SYN-ACK does not parse")
                };
                assert_eq!((back.src, back.dst), (flow.dst, flow.src));
                assert_eq!((back.src_port, back.dst_port), (flow.dst_port, flow.src_port));
            }
        }
        Payload::Other => {}
    }
    let mut copy = data.to_vec();
    dsr::rewrite_macs(&mut copy, MAC, MAC);
    assert_eq!(copy[12..], data[12..]);
    // A checksum filled in once is filled in the same way again.
    if dsr::fill_checksum(&mut copy) {
        let once = copy.clone();
        assert!(dsr::fill_checksum(&mut copy));
        assert_eq!(copy, once);
    }
});
