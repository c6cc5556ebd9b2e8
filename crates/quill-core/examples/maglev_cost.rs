//! What a Maglev table costs (bench/maglev.sh runs this in release): the time to build the table
//! of N equal servers, and the time of a lookup over random keys with every server up and with a
//! tenth of them down. Prints one Markdown row per N.

// A benchmark measures wall time; quill-core's pure code must not read the clock, this does.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::time::Instant;

use quill_core::maglev::{hash_bytes, Server, Table};

fn main() {
    let lookups: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    println!("| servers | M | build ms | lookup ns (all up) | lookup ns (a tenth down) | max/avg slots |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for n in [2usize, 10, 100, 1000] {
        let ids: Vec<String> = (0..n)
            .map(|i| format!("10.{}.{}.{}:80", i >> 16 & 0xff, i >> 8 & 0xff, i & 0xff))
            .collect();
        let servers: Vec<Server<'_>> = ids
            .iter()
            .map(|id| Server {
                identity: id.as_bytes(),
                weight: 1,
            })
            .collect();
        // The best of three builds.
        let mut build_ms = f64::MAX;
        let mut table = Table::build(&servers, 0);
        for _ in 0..3 {
            let t0 = Instant::now();
            table = black_box(Table::build(black_box(&servers), 0));
            build_ms = build_ms.min(t0.elapsed().as_secs_f64() * 1e3);
        }
        let per_lookup = |down: &dyn Fn(usize) -> bool| {
            let t0 = Instant::now();
            let mut sum = 0usize;
            for k in 0..lookups {
                let key = hash_bytes(&k.to_le_bytes(), 7);
                sum = sum.wrapping_add(table.lookup(key, |i| !down(i)).unwrap_or(0));
            }
            black_box(sum);
            t0.elapsed().as_secs_f64() * 1e9 / lookups as f64
        };
        let up = per_lookup(&|_| false);
        let tenth = per_lookup(&|i| i % 10 == 3);
        let shares = table.shares(n);
        let max = shares.iter().copied().max().unwrap_or(0) as f64;
        let avg = table.size() as f64 / n as f64;
        println!(
            "| {n} | {} | {build_ms:.2} | {up:.1} | {tenth:.1} | {:.4} |",
            table.size(),
            max / avg
        );
    }
}
