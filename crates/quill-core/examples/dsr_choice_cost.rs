//! What choosing a frame's server costs in direct server return (bench/dsr_choice.sh runs this in
//! release), for N equal servers: weighted rendezvous (`dsr::flow_hash` then `dsr::choose` over
//! the N servers, Quill's default) against the Maglev table (`dsr::maglev_key`, `dsr::flow_id`,
//! the flow tracking's `Conntrack::server_for` and, for a flow it does not hold, `Table::lookup`).
//! Frames come from 10,000 flows in turn (so the tracking holds them all after the first round),
//! and once more from a new flow per frame (every frame a tracking miss and an insert, the
//! oldest evicted). Prints one Markdown row per N: nanoseconds per frame.

// A benchmark measures wall time; quill-core's pure code must not read the clock, this does.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use quill_core::conntrack::Conntrack;
use quill_core::dsr::{self, Flow};
use quill_core::maglev::{Server, Table};

fn flow(k: u64) -> Flow {
    Flow {
        src: IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | (k as u32 >> 16))),
        dst: IpAddr::V4(Ipv4Addr::new(10, 72, 0, 100)),
        proto: dsr::PROTO_TCP,
        src_port: k as u16,
        dst_port: 80,
        tcp_flags: dsr::TCP_ACK,
        tcp_seq: 0,
    }
}

fn main() {
    let frames: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5_000_000);
    println!("| servers | rendezvous ns/frame | Maglev ns/frame (tracked flows) | Maglev ns/frame (a new flow each frame) |");
    println!("|---:|---:|---:|---:|");
    for n in [2usize, 10, 100, 1000] {
        let ids: Vec<String> = (0..n)
            .map(|i| format!("10.{}.{}.{}:80", i >> 16 & 0xff, i >> 8 & 0xff, i & 0xff))
            .collect();
        let table = Table::build(&Server::equal(&ids), 0);
        let known = |i: usize| black_box(i) < n;
        let key = 0x1234_5678_9abc_def0u64;

        let t0 = Instant::now();
        let mut sum = 0usize;
        for k in 0..frames {
            let f = flow(k % 10_000);
            let h = dsr::flow_hash(&f, key);
            let pick = dsr::choose(h, (0..n).filter(|&i| known(i)).map(|i| (i, 1)));
            sum = sum.wrapping_add(pick.unwrap_or(0));
        }
        black_box(sum);
        let rendezvous = t0.elapsed().as_secs_f64() * 1e9 / frames as f64;

        let per_frame = |distinct: u64| {
            let mut flows = Conntrack::new(65_536, 120_000);
            let t0 = Instant::now();
            let mut sum = 0u32;
            for k in 0..frames {
                let f = flow(k % distinct);
                let h = dsr::maglev_key(&f);
                let pick = flows.server_for(
                    dsr::flow_id(&f),
                    h,
                    k / 1000,
                    |s| known(s as usize),
                    || table.lookup(h, known).map(|i| i as u32),
                );
                sum = sum.wrapping_add(pick.unwrap_or(0));
            }
            black_box(sum);
            t0.elapsed().as_secs_f64() * 1e9 / frames as f64
        };
        let tracked = per_frame(10_000);
        let fresh = per_frame(u64::MAX);
        println!("| {n} | {rendezvous:.1} | {tracked:.1} | {fresh:.1} |");
    }
}
