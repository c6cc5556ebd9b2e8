use super::*;
use crate::rand::Rng;

/// `n` distinct identities `10.A.B.C:PORT` drawn from `rng`.
fn identities(rng: &mut Rng, n: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(n);
    while out.len() < n {
        let v = rng.next_u64();
        let id = format!(
            "10.{}.{}.{}:{}",
            v & 0xff,
            (v >> 8) & 0xff,
            (v >> 16) & 0xff,
            1024 + (v >> 24) % 60_000
        );
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

fn equal(ids: &[String]) -> Vec<Server<'_>> {
    Server::equal(ids)
}

/// The share of keys (slots) whose server, by identity, differs between two tables.
fn moved(a: &Table, a_ids: &[String], b: &Table, b_ids: &[String]) -> f64 {
    assert_eq!(a.size(), b.size());
    let changed = (0..a.size())
        .filter(|&k| {
            let sa = a.lookup(k as u64, |_| true).map(|i| &a_ids[i]);
            let sb = b.lookup(k as u64, |_| true).map(|i| &b_ids[i]);
            sa != sb
        })
        .count();
    changed as f64 / a.size() as f64
}

#[test]
fn the_table_of_a_fixed_server_set_never_changes() {
    // An upgrade that changed this would silently remap every client between two versions of
    // Quill running side by side: change it only with a note that says so.
    let ids: Vec<String> = (1..=10).map(|i| format!("10.0.0.{i}:80")).collect();
    let t = Table::build(&equal(&ids), 0);
    assert_eq!(t.size(), 65_537);
    assert_eq!(
        t.fingerprint(),
        0xc9f1_76cb_1a98_f1f5,
        "{:#x}",
        t.fingerprint()
    );
    let picks: Vec<usize> = (0..8u64)
        .map(|k| t.lookup(hash_bytes(&k.to_le_bytes(), 0), |_| true).unwrap())
        .collect();
    assert_eq!(picks, [5, 6, 7, 9, 0, 6, 6, 5]);
    assert_eq!(
        hash_bytes(b"10.0.0.1:80", 0),
        0xdbbc_907f_2153_1a73,
        "{:#x}",
        hash_bytes(b"10.0.0.1:80", 0)
    );
}

#[test]
fn the_order_servers_are_listed_in_does_not_matter() {
    let mut rng = Rng::new(7);
    for n in [2, 3, 10, 100] {
        let ids = identities(&mut rng, n);
        let a = Table::build(&equal(&ids), 42);
        let mut rev = ids.clone();
        rev.reverse();
        let b = Table::build(&equal(&rev), 42);
        assert_eq!(a.fingerprint(), b.fingerprint(), "n = {n}");
        assert_eq!(moved(&a, &ids, &b, &rev), 0.0, "n = {n}");
        for k in 0..10_000u64 {
            let key = hash_bytes(&k.to_le_bytes(), 1);
            let x = a.lookup(key, |_| true).map(|i| &ids[i]);
            let y = b.lookup(key, |_| true).map(|i| &rev[i]);
            assert_eq!(x, y, "n = {n}, key {k}");
        }
        // Another seed is another table.
        assert_ne!(
            Table::build(&equal(&ids), 43).fingerprint(),
            a.fingerprint()
        );
    }
}

#[test]
fn equal_weights_hold_equal_shares() {
    let mut rng = Rng::new(11);
    for n in [1, 2, 7, 100, 1000] {
        let ids = identities(&mut rng, n);
        let t = Table::build(&equal(&ids), 0);
        assert_eq!(t.size() as u32, size_for(n));
        let shares = t.shares(n);
        let (min, max) = (*shares.iter().min().unwrap(), *shares.iter().max().unwrap());
        // One slot per server per pass: shares differ by at most one slot.
        assert!(max - min <= 1, "n = {n}: {min}..{max}");
        let avg = t.size() as f64 / n as f64;
        assert!(
            max as f64 / avg <= 1.01,
            "n = {n}: max/avg {}",
            max as f64 / avg
        );
    }
}

#[test]
fn weights_give_shares_in_proportion() {
    let ids: Vec<String> = (0..4).map(|i| format!("192.0.2.{i}:8080")).collect();
    let weights = [1u32, 2, 3, 0];
    let servers: Vec<Server<'_>> = ids
        .iter()
        .zip(weights)
        .map(|(id, weight)| Server {
            identity: id.as_bytes(),
            weight,
        })
        .collect();
    let t = Table::build(&servers, 0);
    let shares = t.shares(4);
    assert_eq!(shares[3], 0, "weight 0 holds nothing");
    let total: usize = shares.iter().sum();
    assert_eq!(total, t.size());
    for (i, w) in weights.iter().enumerate().take(3) {
        let want = t.size() as f64 * f64::from(*w) / 6.0;
        let got = shares[i] as f64;
        assert!(
            (got - want).abs() / want < 0.001,
            "server {i}: {got} slots, want {want}"
        );
    }
    // Nothing of weight above 0: an empty table.
    let none = Table::build(
        &[Server {
            identity: b"a:1",
            weight: 0,
        }],
        0,
    );
    assert_eq!(none.size(), 0);
    assert_eq!(none.lookup(5, |_| true), None);
}

#[test]
fn removing_or_adding_one_of_n_servers_moves_about_one_nth_of_the_keys() {
    // The bound: 1/N + 0.7%, averaged over 20 random server sets (fewer for the
    // largest N in this unoptimised test build; bench/maglev.py runs the whole grid).
    let mut rng = Rng::new(2026);
    for (n, sets) in [
        (1, 20),
        (2, 20),
        (3, 20),
        (10, 20),
        (50, 20),
        (100, 20),
        (1000, 2),
    ] {
        let (mut removed, mut added) = (0.0, 0.0);
        for _ in 0..sets {
            let ids = identities(&mut rng, n + 1);
            let full = Table::build(&equal(&ids), 9);
            let fewer: Vec<String> = ids[..n].to_vec();
            let less = Table::build(&equal(&fewer), 9);
            if less.size() != full.size() {
                continue;
            }
            // Removing the last server of n + 1, and adding it to n.
            removed += moved(&full, &ids, &less, &fewer);
            added += moved(&less, &fewer, &full, &ids);
        }
        let (removed, added) = (removed / sets as f64, added / sets as f64);
        eprintln!(
            "n + 1 = {}: removing one moved {:.4}, adding one {:.4} (ideal {:.4})",
            n + 1,
            removed,
            added,
            1.0 / (n + 1) as f64
        );
        let bound_remove = 1.0 / (n + 1) as f64 + 0.007;
        let bound_add = 1.0 / (n + 1) as f64 + 0.007;
        assert!(
            removed <= bound_remove,
            "n = {n}: removing one moved {removed:.4}"
        );
        assert!(added <= bound_add, "n = {n}: adding one moved {added:.4}");
    }
}

#[test]
fn a_server_that_is_down_moves_only_its_own_keys() {
    let mut rng = Rng::new(5);
    let ids = identities(&mut rng, 20);
    let t = Table::build(&equal(&ids), 0);
    let down = 7;
    for k in 0..20_000u64 {
        let key = hash_bytes(&k.to_le_bytes(), 3);
        let up = t.lookup(key, |_| true).unwrap();
        let with_down = t.lookup(key, |i| i != down).unwrap();
        assert_ne!(with_down, down);
        if up != down {
            assert_eq!(with_down, up, "key {k} moved though its server is up");
        }
    }
    // Every server down: None, after a bounded walk.
    assert_eq!(t.lookup(123, |_| false), None);
}

#[test]
fn table_sizes_follow_the_server_count() {
    assert_eq!(size_for(1), 65_537);
    assert_eq!(size_for(655), 65_537);
    assert_eq!(size_for(656), 655_373);
    assert_eq!(size_for(6_553), 655_373);
    assert_eq!(size_for(6_554), 6_553_733);
    assert_eq!(size_for(MAX_SERVERS), 6_553_733);
}
