//! Server selection, in Pen's order: client tracking, then prio, weight, hash, and finally the base
//! policy (round robin, least connections, or power of two random choices); then failover order.
//!
//! Pure logic: it reads server load through [`ServerSet`], takes the time and randomness as
//! arguments, and never does I/O. The tracking table is shared by all workers without a lock.

use std::cmp::Ordering as CmpOrdering;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use quill_core::maglev::{self, Table};

/// The largest client tracking table (`clients_max`): 16 bytes a client, so at most 16 MB.
pub(crate) const MAX_CLIENTS: u32 = 1_000_000;

/// Most servers one pool may hold (server numbers are stored in 16 bits in the tracking table).
pub(crate) const MAX_SERVERS: usize = 65_000;

/// A selection flag that `mode`-group commands turn on (`hash`) or off (`no hash`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ModeWord {
    RoundRobin,
    Hash,
    Weight,
    Prio,
    Stubborn,
    LeastConn,
    P2c,
    Maglev,
}

impl ModeWord {
    pub(crate) const ALL: [ModeWord; 8] = [
        ModeWord::RoundRobin,
        ModeWord::Hash,
        ModeWord::Weight,
        ModeWord::Prio,
        ModeWord::Stubborn,
        ModeWord::LeastConn,
        ModeWord::P2c,
        ModeWord::Maglev,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            ModeWord::RoundRobin => "roundrobin",
            ModeWord::Hash => "hash",
            ModeWord::Weight => "weight",
            ModeWord::Prio => "prio",
            ModeWord::Stubborn => "stubborn",
            ModeWord::LeastConn => "leastconn",
            ModeWord::P2c => "p2c",
            ModeWord::Maglev => "maglev",
        }
    }

    pub(crate) fn parse(word: &str) -> Option<ModeWord> {
        ModeWord::ALL.into_iter().find(|w| w.name() == word)
    }
}

/// The base policy used when no Pen flag (prio, weight, hash) applies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Base {
    #[default]
    RoundRobin,
    LeastConn,
    P2c,
}

/// A listener's selection mode: Pen's flags combined, not a single algorithm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Mode {
    /// Pen's `roundrobin`: no client tracking.
    pub roundrobin: bool,
    pub hash: bool,
    pub weight: bool,
    pub prio: bool,
    pub stubborn: bool,
    /// Maglev consistent hashing of the client address (with `roundrobin`: address and port),
    /// one table per priority level with `prio` ([`MaglevSet`]); no client tracking.
    pub maglev: bool,
    pub base: Base,
}

impl Mode {
    pub(crate) fn set(&mut self, word: ModeWord, on: bool) {
        match word {
            ModeWord::RoundRobin => self.roundrobin = on,
            ModeWord::Hash => self.hash = on,
            ModeWord::Weight => self.weight = on,
            ModeWord::Prio => self.prio = on,
            ModeWord::Stubborn => self.stubborn = on,
            ModeWord::LeastConn => {
                self.base = if on {
                    Base::LeastConn
                } else {
                    Base::RoundRobin
                }
            }
            ModeWord::P2c => self.base = if on { Base::P2c } else { Base::RoundRobin },
            ModeWord::Maglev => self.maglev = on,
        }
    }

    pub(crate) fn is_set(&self, word: ModeWord) -> bool {
        match word {
            ModeWord::RoundRobin => self.roundrobin,
            ModeWord::Hash => self.hash,
            ModeWord::Weight => self.weight,
            ModeWord::Prio => self.prio,
            ModeWord::Stubborn => self.stubborn,
            ModeWord::LeastConn => self.base == Base::LeastConn,
            ModeWord::P2c => self.base == Base::P2c,
            ModeWord::Maglev => self.maglev,
        }
    }

    /// Whether clients are tracked (Pen's default; never with `maglev`, whose table is what
    /// every instance agrees on).
    pub(crate) fn tracking(&self) -> bool {
        !self.roundrobin && !self.maglev
    }
}

impl fmt::Display for Mode {
    /// The words that are set, in Pen's order; "tracking" when none is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words: Vec<&str> = ModeWord::ALL
            .into_iter()
            .filter(|w| self.is_set(*w))
            .map(ModeWord::name)
            .collect();
        if words.is_empty() {
            f.write_str("tracking")
        } else {
            f.write_str(&words.join(" "))
        }
    }
}

/// What the balancer may know about a pool's servers.
pub(crate) trait ServerSet {
    fn len(&self) -> usize;
    /// Whether server `i` may take a new session now (`tracked`: the client's last server, which may
    /// use the HARD limit).
    fn is_available(&self, i: usize, tracked: bool, now_ms: u64) -> bool;
    /// Active sessions on server `i`.
    fn load(&self, i: usize) -> u64;
    fn weight(&self, i: usize) -> u32;
    fn prio(&self, i: usize) -> u32;
    /// Share during slow start, in thousandths (1000 = full).
    fn ramp(&self, _i: usize, _now_ms: u64) -> u32 {
        1000
    }
    /// The pool's Maglev tables (built when its mode has `maglev`).
    fn maglev(&self) -> Option<&MaglevSet> {
        None
    }
}

/// The client as the balancer sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Client {
    /// The address (None for Unix-socket clients).
    pub ip: Option<IpAddr>,
    pub port: u16,
    /// An HTTP request's Maglev key (its `hash_key` header or cookie, hashed), which `maglev`
    /// looks up instead of the address's. None: the address's.
    pub key: Option<u64>,
}

impl Client {
    /// The hash used by `-h`: the IPv4 address as a number (plus the port with `roundrobin`, as
    /// Pen does); IPv6 folds the whole address (Pen uses only its last byte).
    fn hash_key(&self, with_port: bool) -> u64 {
        let base = match self.ip {
            Some(IpAddr::V4(v4)) => u64::from(u32::from(v4)),
            Some(IpAddr::V6(v6)) => mix(u128::from(v6) as u64 ^ (u128::from(v6) >> 64) as u64),
            None => 0,
        };
        if with_port {
            base.wrapping_add(u64::from(self.port))
        } else {
            base
        }
    }

    /// The key `maglev` looks up: [`quill_core::maglev::hash_bytes`] of the address's bytes
    /// (4 or 16), then with `with_port` the port's two bytes (big-endian), under seed 0.
    /// An HTTP request's own key, when it has one, stands instead.
    pub(crate) fn maglev_key(&self, with_port: bool) -> u64 {
        if let Some(key) = self.key {
            return key;
        }
        let mut bytes = [0u8; 18];
        let mut len = match self.ip {
            Some(IpAddr::V4(a)) => {
                bytes[..4].copy_from_slice(&a.octets());
                4
            }
            Some(IpAddr::V6(a)) => {
                bytes[..16].copy_from_slice(&a.octets());
                16
            }
            None => 0,
        };
        if with_port {
            bytes[len..len + 2].copy_from_slice(&self.port.to_be_bytes());
            len += 2;
        }
        maglev::hash_bytes(&bytes[..len], 0)
    }
}

/// A pool's Maglev tables: one over every server, or with `prio` one per priority level, best
/// (lowest) first. Built off the data path with the pool (`Pool::build`), from the servers'
/// identities (their addresses as written), weights and priorities: the order they are listed
/// in does not matter.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct MaglevSet {
    /// (priority, table, the pool's index of each of the table's servers).
    levels: Vec<(u32, Table, Vec<usize>)>,
    /// What the tables were built from (identity, weight, priority; and whether by level), to
    /// reuse them when a rebuilt pool has the same.
    from: (Vec<(String, u32, u32)>, bool),
}

impl MaglevSet {
    /// The tables of `servers` (identity, weight, priority), by level when `by_prio`.
    pub(crate) fn build(servers: Vec<(String, u32, u32)>, by_prio: bool) -> MaglevSet {
        let mut prios: Vec<u32> = if by_prio {
            servers.iter().map(|s| s.2).collect()
        } else {
            vec![0]
        };
        prios.sort_unstable();
        prios.dedup();
        let levels = prios
            .into_iter()
            .map(|prio| {
                let members: Vec<usize> = (0..servers.len())
                    .filter(|&i| !by_prio || servers[i].2 == prio)
                    .collect();
                let specs: Vec<maglev::Server<'_>> = members
                    .iter()
                    .map(|&i| maglev::Server {
                        identity: servers[i].0.as_bytes(),
                        weight: servers[i].1,
                    })
                    .collect();
                (prio, Table::build(&specs, 0), members)
            })
            .collect();
        MaglevSet {
            levels,
            from: (servers, by_prio),
        }
    }

    /// Whether these tables were built from `servers` as [`MaglevSet::build`] would be.
    pub(crate) fn built_from(&self, servers: &[(String, u32, u32)], by_prio: bool) -> bool {
        self.from.0 == servers && self.from.1 == by_prio
    }

    /// The server (the pool's index) for `key`: in the best level that has an available server,
    /// its table's slot for the key, walking past unavailable servers (a level with none gives
    /// None after a bounded walk, see `Table::lookup`).
    pub(crate) fn lookup(&self, key: u64, avail: &dyn Fn(usize) -> bool) -> Option<usize> {
        self.levels.iter().find_map(|(_, table, members)| {
            table.lookup(key, |k| avail(members[k])).map(|k| members[k])
        })
    }

    /// Each level's priority, table size and fingerprint, best first.
    pub(crate) fn fingerprints(&self) -> Vec<(u32, usize, u64)> {
        self.levels
            .iter()
            .map(|(p, t, _)| (*p, t.size(), t.fingerprint()))
            .collect()
    }
}

/// Per-pool selection state shared by all workers: one round-robin position, so that clients go
/// round the servers in turn whichever worker takes them (each server gets exactly its share, as
/// with Pen's one process; a position per worker was tried and broke that: docs/benchmarks.md).
#[derive(Debug, Default)]
pub(crate) struct Cursor(AtomicUsize);

impl Cursor {
    fn next(&self) -> usize {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// Chooses the first server for a client. `tracked` is the client's last server from the tracking
/// table, if any. Returns None when no server is available (the caller then uses the emergency
/// server).
pub(crate) fn pick<S: ServerSet>(
    set: &S,
    mode: &Mode,
    client: &Client,
    tracked: Option<usize>,
    cursor: &Cursor,
    rand: u64,
    now_ms: u64,
) -> Option<usize> {
    let n = set.len();
    if n == 0 {
        return None;
    }
    if let Some(t) = tracked.filter(|&t| t < n && set.is_available(t, true, now_ms)) {
        return Some(t);
    }
    let avail = |i: usize| set.is_available(i, false, now_ms);
    // Slow start: a ramping server is passed over in proportion to how far it still has to go,
    // unless nothing else is left.
    let ramped = |i: usize| {
        avail(i) && {
            let r = set.ramp(i, now_ms);
            r >= 1000 || (mix(rand ^ i as u64) % 1000) < u64::from(r)
        }
    };
    choose(set, mode, client, cursor, rand, &ramped)
        .or_else(|| choose(set, mode, client, cursor, rand, &avail))
}

fn choose<S: ServerSet>(
    set: &S,
    mode: &Mode,
    client: &Client,
    cursor: &Cursor,
    rand: u64,
    avail: &dyn Fn(usize) -> bool,
) -> Option<usize> {
    let n = set.len();
    if mode.maglev {
        if let Some(tables) = set.maglev() {
            return tables.lookup(client.maglev_key(mode.roundrobin), avail);
        }
    }
    if mode.prio {
        let best = (0..n).filter(|&i| avail(i)).map(|i| set.prio(i)).min()?;
        return rotate(n, cursor.next(), |i| avail(i) && set.prio(i) == best, |_| 0);
    }
    if mode.weight {
        return least_weighted(set, n, cursor.next(), avail);
    }
    if mode.hash {
        let start = (client.hash_key(mode.roundrobin) % n as u64) as usize;
        return (0..n).map(|k| (start + k) % n).find(|&i| avail(i));
    }
    match mode.base {
        Base::RoundRobin => (0..n).map(|_| cursor.next() % n).find(|&i| avail(i)),
        Base::LeastConn => rotate(n, cursor.next(), avail, |i| set.load(i)),
        Base::P2c => {
            let a = (0..n)
                .map(|k| (rand as usize + k) % n)
                .find(|&i| avail(i))?;
            let b = (0..n)
                .map(|k| ((rand >> 32) as usize + k) % n)
                .find(|&i| avail(i))?;
            Some(if scaled_less(set, b, a) { b } else { a })
        }
    }
}

/// Servers to try after `first` failed, in Pen's order: the ones after it, wrapping around, each
/// once. `tried` is how many of them have been offered already.
pub(crate) fn failover<S: ServerSet>(
    set: &S,
    first: usize,
    tried: &mut usize,
    now_ms: u64,
) -> Option<usize> {
    let n = set.len();
    while *tried + 1 < n {
        *tried += 1;
        let i = (first + *tried) % n;
        if set.is_available(i, false, now_ms) {
            return Some(i);
        }
    }
    None
}

/// Among eligible servers, the best by `cmp` (Less = better); ties are shared in turn: the
/// `start`-th of the tied servers (modulo their number) wins, so equal servers take turns.
fn best_rotating(
    n: usize,
    start: usize,
    eligible: impl Fn(usize) -> bool,
    cmp: impl Fn(usize, usize) -> CmpOrdering,
) -> Option<usize> {
    let mut best: Option<usize> = None;
    let mut ties = 0;
    for i in (0..n).filter(|&i| eligible(i)) {
        match best.map(|b| cmp(i, b)) {
            None | Some(CmpOrdering::Less) => {
                best = Some(i);
                ties = 1;
            }
            Some(CmpOrdering::Equal) => ties += 1,
            Some(CmpOrdering::Greater) => {}
        }
    }
    let best = best?;
    let wanted = start % ties;
    (0..n)
        .filter(|&i| eligible(i) && cmp(i, best) == CmpOrdering::Equal)
        .nth(wanted)
}

fn rotate(
    n: usize,
    start: usize,
    avail: impl Fn(usize) -> bool,
    key: impl Fn(usize) -> u64,
) -> Option<usize> {
    best_rotating(n, start, avail, |a, b| key(a).cmp(&key(b)))
}

/// Weighted least connections: smallest sessions/weight; weight 0 is never chosen.
fn least_weighted<S: ServerSet>(
    set: &S,
    n: usize,
    start: usize,
    avail: &dyn Fn(usize) -> bool,
) -> Option<usize> {
    best_rotating(
        n,
        start,
        |i| set.weight(i) > 0 && avail(i),
        |a, b| scaled_cmp(set, a, b),
    )
}

fn scaled_cmp<S: ServerSet>(set: &S, a: usize, b: usize) -> CmpOrdering {
    let (wa, wb) = (
        u128::from(set.weight(a).max(1)),
        u128::from(set.weight(b).max(1)),
    );
    (u128::from(set.load(a)) * wb).cmp(&(u128::from(set.load(b)) * wa))
}

/// load(a)/weight(a) < load(b)/weight(b), without division; weight 0 counts as 1 here.
fn scaled_less<S: ServerSet>(set: &S, a: usize, b: usize) -> bool {
    let (wa, wb) = (
        u128::from(set.weight(a).max(1)),
        u128::from(set.weight(b).max(1)),
    );
    u128::from(set.load(a)) * wb < u128::from(set.load(b)) * wa
}

/// A 64-bit mixer (splitmix64's finaliser): fixed, so every worker agrees.
pub(crate) fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

// === Client tracking ===

const WAYS: usize = 4;

/// Pen's client table: client address -> last server, shared by all workers without a lock.
///
/// Set-associative (4 slots per bucket, the oldest replaced), each slot two atomics. A writer
/// racing another on the same slot can leave a key with the other's value; the value carries 16 bits
/// of its key, so such a torn slot reads as a miss rather than as a wrong answer.
#[derive(Debug)]
pub(crate) struct ClientTable {
    keys: Box<[AtomicU64]>,
    values: Box<[AtomicU64]>,
    buckets: usize,
}

impl ClientTable {
    /// A table holding about `size` clients, at most [`MAX_CLIENTS`] (the configuration
    /// refuses more; the cap here makes sure no value can ask for gigabytes at once).
    pub(crate) fn new(size: u32) -> ClientTable {
        let size = size.min(MAX_CLIENTS);
        let buckets = (size as usize).div_ceil(WAYS).max(1);
        let slots = buckets * WAYS;
        ClientTable {
            keys: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            values: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            buckets,
        }
    }

    /// How many clients the table can hold (slots allocated).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.keys.len()
    }

    fn key(ip: IpAddr) -> u64 {
        let raw = match ip {
            IpAddr::V4(v4) => u64::from(u32::from(v4)),
            IpAddr::V6(v6) => u128::from(v6) as u64 ^ mix((u128::from(v6) >> 64) as u64),
        };
        mix(raw) | 1
    }

    fn pack(key: u64, server: usize, now_s: u32) -> u64 {
        ((server as u64 + 1) << 48) | ((key & 0xffff) << 32) | u64::from(now_s)
    }

    /// The client's last server, if it was seen within `expiry_s` seconds (0 = never expires).
    pub(crate) fn lookup(&self, ip: IpAddr, now_s: u32, expiry_s: u32) -> Option<usize> {
        let key = Self::key(ip);
        let base = (key as usize % self.buckets) * WAYS;
        for slot in base..base + WAYS {
            if self.keys[slot].load(Ordering::Acquire) != key {
                continue;
            }
            let v = self.values[slot].load(Ordering::Acquire);
            let (server, check, seen) = ((v >> 48) as usize, (v >> 32) & 0xffff, v as u32);
            if server == 0 || check != key & 0xffff {
                return None;
            }
            if expiry_s != 0 && now_s.saturating_sub(seen) > expiry_s {
                return None;
            }
            return Some(server - 1);
        }
        None
    }

    /// Records that the client now uses `server`.
    pub(crate) fn store(&self, ip: IpAddr, server: usize, now_s: u32) {
        let key = Self::key(ip);
        let base = (key as usize % self.buckets) * WAYS;
        let value = Self::pack(key, server, now_s);
        let mut victim = base;
        let mut oldest = u32::MAX;
        for slot in base..base + WAYS {
            let k = self.keys[slot].load(Ordering::Acquire);
            if k == key || k == 0 {
                victim = slot;
                break;
            }
            let seen = self.values[slot].load(Ordering::Relaxed) as u32;
            if seen < oldest {
                oldest = seen;
                victim = slot;
            }
        }
        self.values[victim].store(value, Ordering::Release);
        self.keys[victim].store(key, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Set {
        load: Vec<u64>,
        weight: Vec<u32>,
        prio: Vec<u32>,
        up: Vec<bool>,
    }

    impl Set {
        fn new(n: usize) -> Set {
            Set {
                load: vec![0; n],
                weight: vec![1; n],
                prio: vec![0; n],
                up: vec![true; n],
            }
        }
    }

    impl ServerSet for Set {
        fn len(&self) -> usize {
            self.load.len()
        }
        fn is_available(&self, i: usize, _tracked: bool, _now: u64) -> bool {
            self.up[i]
        }
        fn load(&self, i: usize) -> u64 {
            self.load[i]
        }
        fn weight(&self, i: usize) -> u32 {
            self.weight[i]
        }
        fn prio(&self, i: usize) -> u32 {
            self.prio[i]
        }
    }

    fn client() -> Client {
        Client {
            ip: Some("10.0.0.7".parse().unwrap()),
            port: 4000,
            key: None,
        }
    }

    fn counts(set: &Set, mode: Mode, rounds: usize) -> Vec<usize> {
        let cursor = Cursor::default();
        let mut counts = vec![0; set.len()];
        for r in 0..rounds {
            let i = pick(set, &mode, &client(), None, &cursor, mix(r as u64), 0).unwrap();
            counts[i] += 1;
        }
        counts
    }

    #[test]
    fn round_robin_skips_a_down_server_evenly() {
        let mut set = Set::new(3);
        set.up[1] = false;
        assert_eq!(counts(&set, Mode::default(), 300), vec![150, 0, 150]);
    }

    #[test]
    fn prio_prefers_lowest_and_rotates_ties() {
        let mut set = Set::new(4);
        set.prio = vec![2, 1, 1, 0];
        set.up[3] = false;
        let mode = Mode {
            prio: true,
            ..Mode::default()
        };
        assert_eq!(counts(&set, mode, 100), vec![0, 50, 50, 0]);
    }

    #[test]
    fn weight_picks_least_loaded_per_weight_and_never_weight_zero() {
        let mut set = Set::new(3);
        set.weight = vec![1, 3, 0];
        set.load = vec![1, 2, 0];
        let mode = Mode {
            weight: true,
            ..Mode::default()
        };
        // 1/1 vs 2/3: server 1 is less loaded per weight; server 2 has weight 0.
        assert_eq!(counts(&set, mode, 10), vec![0, 10, 0]);
    }

    #[test]
    fn hash_is_stable_and_fails_over_in_order() {
        let mut set = Set::new(5);
        let mode = Mode {
            hash: true,
            ..Mode::default()
        };
        let first = counts(&set, mode, 10)
            .iter()
            .position(|&c| c == 10)
            .unwrap();
        assert_eq!(
            first,
            (u32::from("10.0.0.7".parse::<std::net::Ipv4Addr>().unwrap()) % 5) as usize
        );
        set.up[first] = false;
        let second = counts(&set, mode, 10)
            .iter()
            .position(|&c| c == 10)
            .unwrap();
        assert_eq!(second, (first + 1) % 5);
    }

    #[test]
    fn leastconn_and_p2c_prefer_the_idle_server() {
        let mut set = Set::new(2);
        set.load = vec![5, 0];
        for base in [Base::LeastConn, Base::P2c] {
            let mode = Mode {
                base,
                ..Mode::default()
            };
            let c = counts(&set, mode, 20);
            assert!(c[1] >= c[0] && c[1] > 0, "{base:?}: {c:?}");
        }
        let mode = Mode {
            base: Base::LeastConn,
            ..Mode::default()
        };
        assert_eq!(counts(&set, mode, 20), vec![0, 20]);
    }

    #[test]
    fn tracked_client_returns_to_its_server_while_available() {
        let mut set = Set::new(3);
        let cursor = Cursor::default();
        assert_eq!(
            pick(&set, &Mode::default(), &client(), Some(2), &cursor, 0, 0),
            Some(2)
        );
        set.up[2] = false;
        assert_ne!(
            pick(&set, &Mode::default(), &client(), Some(2), &cursor, 0, 0),
            Some(2)
        );
    }

    #[test]
    fn failover_walks_the_following_servers_once() {
        let mut set = Set::new(4);
        set.up[2] = false;
        let mut tried = 0;
        let order: Vec<usize> = std::iter::from_fn(|| failover(&set, 1, &mut tried, 0)).collect();
        assert_eq!(order, vec![3, 0]);
    }

    #[test]
    fn client_table_remembers_and_expires() {
        let t = ClientTable::new(8);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        assert_eq!(t.lookup(a, 100, 0), None);
        t.store(a, 3, 100);
        assert_eq!(t.lookup(a, 5000, 0), Some(3));
        assert_eq!(t.lookup(a, 105, 10), Some(3));
        assert_eq!(t.lookup(a, 111, 10), None);
        // Many clients in a tiny table: it stays bounded and keeps the newest.
        for i in 0..100u32 {
            t.store(IpAddr::V4(i.into()), (i % 7) as usize, 200 + i);
        }
        assert_eq!(t.lookup(IpAddr::V4(99u32.into()), 300, 0), Some(99 % 7));
    }

    fn maglev_servers(prios: &[u32]) -> Vec<(String, u32, u32)> {
        prios
            .iter()
            .enumerate()
            .map(|(i, &p)| (format!("10.0.0.{i}:80"), 1, p))
            .collect()
    }

    #[test]
    fn maglev_uses_the_best_priority_level_with_a_server_up() {
        let set = MaglevSet::build(maglev_servers(&[1, 0, 1, 0]), true);
        assert_eq!(set.fingerprints().len(), 2);
        assert_eq!(set.fingerprints()[0].0, 0, "best level first");
        for k in 0..2_000u64 {
            let key = mix(k);
            let pick = set.lookup(key, &|_| true).unwrap();
            assert!(pick == 1 || pick == 3, "key {k}: {pick} is not of level 0");
            // Level 0 all down: level 1 serves.
            let pick = set.lookup(key, &|i| i == 0 || i == 2).unwrap();
            assert!(pick == 0 || pick == 2);
            // One server of level 0 down: its keys stay in level 0.
            assert_eq!(set.lookup(key, &|i| i != 1), Some(3));
        }
        assert_eq!(set.lookup(5, &|_| false), None);
        // Without prio: one table over all four.
        let flat = MaglevSet::build(maglev_servers(&[1, 0, 1, 0]), false);
        assert_eq!(flat.fingerprints().len(), 1);
        let hits: std::collections::BTreeSet<usize> = (0..2_000u64)
            .filter_map(|k| flat.lookup(mix(k), &|_| true))
            .collect();
        assert_eq!(hits.len(), 4);
        assert!(flat.built_from(&maglev_servers(&[1, 0, 1, 0]), false));
        assert!(!flat.built_from(&maglev_servers(&[1, 0, 1, 0]), true));
    }

    #[test]
    fn maglev_keys_are_the_address_then_the_port() {
        let c = |port| Client {
            ip: Some(IpAddr::from([192, 0, 2, 7])),
            port,
            key: None,
        };
        assert_eq!(c(1).maglev_key(false), c(2).maglev_key(false));
        assert_ne!(c(1).maglev_key(true), c(2).maglev_key(true));
        assert_eq!(
            c(1).maglev_key(false),
            quill_core::maglev::hash_bytes(&[192, 0, 2, 7], 0)
        );
        // A request's own key (`hash_key` header or cookie) stands instead, port or not.
        let keyed = Client {
            key: Some(42),
            ..c(1)
        };
        assert_eq!(keyed.maglev_key(false), 42);
        assert_eq!(keyed.maglev_key(true), 42);
    }
}
