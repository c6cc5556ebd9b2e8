//! What a Maglev table costs (bench/maglev.sh runs this in release): the time to build the table
//! of N equal servers, and the time of a lookup over random keys with every server up and with a
//! tenth of them down; then what a weight change disrupts: the share of keys that move when one
//! of N equal servers doubles its weight or halves it. Prints one Markdown table of each.
//!
//!   maglev_cost [LOOKUPS]    both tables (LOOKUPS per lookup case, default 10,000,000)
//!   maglev_cost weights      the weight-change table only

// A benchmark measures wall time; quill-core's pure code must not read the clock, this does.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::time::Instant;

use quill_core::maglev::{hash_bytes, Server, Table};
use quill_core::rand::Rng;

/// Random server sets per N for the weight-change figures.
const SETS: usize = 20;

fn main() {
    let arg = std::env::args().nth(1);
    if arg.as_deref() != Some("weights") {
        let lookups = arg.and_then(|a| a.parse().ok()).unwrap_or(10_000_000);
        costs(lookups);
        println!();
    }
    weight_changes();
}

/// Build time, lookup time and balance of the table of N equal servers.
fn costs(lookups: u64) {
    println!("| servers | M | build ms | lookup ns (all up) | lookup ns (a tenth down) | max/avg slots |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for n in [2usize, 10, 100, 1000] {
        let ids: Vec<String> = (0..n)
            .map(|i| format!("10.{}.{}.{}:80", i >> 16 & 0xff, i >> 8 & 0xff, i & 0xff))
            .collect();
        let servers = weighted(&ids, 1, None);
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

/// The share of keys that move when one server of N changes weight, averaged over [`SETS`]
/// random server sets (random identities, a random server changed), next to the ideal: the
/// change of that server's share, which is all a perfect scheme would move.
/// - 1 → 2: every server at weight 1, then the one at 2 (its share 1/N → 2/(N + 1)).
/// - 2 → 1: every server at weight 2, then the one at 1 (its share 1/N → 1/(2N − 1)).
/// - For comparison, that server removed (the ideal: its share, 1/N).
///
/// Weights act only through their ratios (the table's turns compare credits with the largest
/// weight), so 100 → 200 among 100s moves exactly what 1 → 2 among 1s does. Every server is up:
/// a key's server is its slot's, so the share of slots whose server changed is the share of
/// keys moved.
fn weight_changes() {
    println!("| servers | M | weight 1 → 2: keys moved (max of {SETS} sets) | ideal | ratio | weight 2 → 1: keys moved (max) | ideal | ratio | removed: keys moved (max) | ideal | ratio |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut rng = Rng::new(2026);
    for n in [10usize, 100, 1000] {
        let (mut up, mut up_max, mut down, mut down_max) = (0.0, 0.0f64, 0.0, 0.0f64);
        let (mut gone, mut gone_max) = (0.0, 0.0f64);
        let mut size = 0;
        for _ in 0..SETS {
            let ids = identities(&mut rng, n);
            let which = rng.below(n as u64) as usize;
            let ones = Table::build(&weighted(&ids, 1, None), 0);
            let doubled = Table::build(&weighted(&ids, 1, Some((which, 2))), 0);
            let twos = Table::build(&weighted(&ids, 2, None), 0);
            let halved = Table::build(&weighted(&ids, 2, Some((which, 1))), 0);
            let m = moved(&ones, &doubled);
            up += m;
            up_max = up_max.max(m);
            let m = moved(&twos, &halved);
            down += m;
            down_max = down_max.max(m);
            let mut rest = ids.clone();
            rest.remove(which);
            let without = Table::build(&weighted(&rest, 1, None), 0);
            let m = moved_by_identity(&ones, &ids, &without, &rest);
            gone += m;
            gone_max = gone_max.max(m);
            size = ones.size();
        }
        let nf = n as f64;
        let ideal_up = 2.0 / (nf + 1.0) - 1.0 / nf;
        let ideal_down = 1.0 / nf - 1.0 / (2.0 * nf - 1.0);
        let (up, down, gone) = (up / SETS as f64, down / SETS as f64, gone / SETS as f64);
        println!(
            "| {n} | {size} | {:.2}% ({:.2}%) | {:.2}% | {:.1} | {:.2}% ({:.2}%) | {:.2}% | {:.1} | {:.2}% ({:.2}%) | {:.2}% | {:.1} |",
            up * 100.0,
            up_max * 100.0,
            ideal_up * 100.0,
            up / ideal_up,
            down * 100.0,
            down_max * 100.0,
            ideal_down * 100.0,
            down / ideal_down,
            gone * 100.0,
            gone_max * 100.0,
            100.0 / nf,
            gone * nf,
        );
    }
}

/// `ids` as servers of weight `base`, but for `changed`: (index, its weight).
fn weighted(ids: &[String], base: u32, changed: Option<(usize, u32)>) -> Vec<Server<'_>> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| Server {
            identity: id.as_bytes(),
            weight: match changed {
                Some((c, w)) if c == i => w,
                _ => base,
            },
        })
        .collect()
}

/// `n` distinct identities `10.A.B.C:PORT` drawn from `rng`.
fn identities(rng: &mut Rng, n: usize) -> Vec<String> {
    let mut seen = std::collections::HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let v = rng.next_u64();
        let id = format!(
            "10.{}.{}.{}:{}",
            v & 0xff,
            (v >> 8) & 0xff,
            (v >> 16) & 0xff,
            1024 + (v >> 24) % 60_000
        );
        if seen.insert(id.clone()) {
            out.push(id);
        }
    }
    out
}

/// The share of slots whose server, by identity, differs between two tables of the same size
/// (`a` of the servers `a_ids`, `b` of `b_ids`).
fn moved_by_identity(a: &Table, a_ids: &[String], b: &Table, b_ids: &[String]) -> f64 {
    assert_eq!(a.size(), b.size(), "N and N - 1 servers, the same size");
    let changed = (0..a.size() as u64)
        .filter(|&k| {
            let sa = a.lookup(k, |_| true).map(|i| &a_ids[i]);
            let sb = b.lookup(k, |_| true).map(|i| &b_ids[i]);
            sa != sb
        })
        .count();
    changed as f64 / a.size() as f64
}

/// The share of slots whose server differs between two tables of the same servers (the same
/// indexes) and size.
fn moved(a: &Table, b: &Table) -> f64 {
    assert_eq!(a.size(), b.size(), "the same servers, the same size");
    let changed = (0..a.size() as u64)
        .filter(|&k| a.lookup(k, |_| true) != b.lookup(k, |_| true))
        .count();
    changed as f64 / a.size() as f64
}
