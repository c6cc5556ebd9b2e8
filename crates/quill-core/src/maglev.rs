//! Maglev consistent hashing (Eisenbud et al., "Maglev: A Fast and Reliable Software Network Load
//! Balancer", NSDI 2016, §3.4): a lookup table of M slots, each naming a server, so that a key's
//! server is one hash and one array index away, every server holds a share of the slots in
//! proportion to its weight, and a change of the server set moves few keys.
//!
//! The table is a documented function of (the servers' identities, their weights, the seed), and
//! of nothing else: not the order the servers are listed in, not the process, not the machine.
//! Several Quills given the same servers build the same table and send a key to the same server
//! without talking to each other. An upgrade must never change it silently: the tests pin the
//! [`Table::fingerprint`] of a fixed server set.
//!
//! The function:
//! 1. Each server's identity (its `HOST:PORT` as written, or an SRV target and port) is hashed
//!    with [`hash_bytes`] three times, under the seed xor three fixed salts: its *order*, its
//!    *offset* (mod M) and its *skip* (mod M − 1, plus 1).
//! 2. The servers are sorted by (order hash, identity bytes); servers of weight 0 are left out.
//! 3. M is the smallest of [`SIZES`] that is at least 100 × the servers (the paper keeps shares
//!    within about 1% of each other with M > 100 N), or the largest.
//! 4. The slots are filled in passes over the sorted servers. In each pass every server adds its
//!    weight to its credit; while the credit reaches the largest weight, the server pays that much
//!    and claims its next free slot in its own permutation `(offset + j × skip) mod M`, j = 0, 1,
//!    … (so the server of the largest weight claims one slot per pass, a server of half that
//!    weight one every other pass). The passes stop when every slot is claimed.
//! 5. A lookup takes slot `key mod M` and walks forward to the first slot whose server is
//!    available, so a server that is down (or that one instance sees down) moves only its own keys.
//!
//! Everything here is pure: bytes and numbers in, a table out.

/// The table sizes, primes: M is the smallest that is at least 100 × the servers.
pub const SIZES: [u32; 3] = [65_537, 655_373, 6_553_733];

/// The most servers a table holds (slots name them with 16 bits).
pub const MAX_SERVERS: usize = u16::MAX as usize;

const SALT_ORDER: u64 = 0x6f72_6465_7200_0001;
const SALT_OFFSET: u64 = 0x6f66_6673_6574_0002;
const SALT_SKIP: u64 = 0x736b_6970_0000_0003;
const SALT_FINGERPRINT: u64 = 0x6669_6e67_6572_0004;

/// A 64-bit finaliser (splitmix64's): every input bit moves every output bit.
pub fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The hash of `bytes` under `salt`: FNV-1a (64 bits) from the offset basis xor `salt`, then
/// [`mix`]. Fixed forever: tables and keys of every Quill version depend on it.
pub fn hash_bytes(bytes: &[u8], salt: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ salt;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix(h)
}

/// A server as the table sees it: what identifies it everywhere, and its weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Server<'a> {
    pub identity: &'a [u8],
    pub weight: u32,
}

/// A built table: slots naming servers by the caller's index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    /// Each slot's server, as an index into `servers`.
    slots: Vec<u16>,
    /// The caller's index of each server in sorted order.
    servers: Vec<usize>,
    fingerprint: u64,
}

impl<'a> Server<'a> {
    /// Servers of weight 1 with these identities, in this order.
    pub fn equal<S: AsRef<[u8]>>(identities: &'a [S]) -> Vec<Server<'a>> {
        identities
            .iter()
            .map(|id| Server {
                identity: id.as_ref(),
                weight: 1,
            })
            .collect()
    }
}

impl Table {
    /// Builds the table of `servers` (the caller's order, which does not matter) under `seed`.
    /// Servers of weight 0 get no slot; past [`MAX_SERVERS`] the rest are left out. With no
    /// server of weight above 0 the table is empty and every lookup gives None.
    pub fn build(servers: &[Server<'_>], seed: u64) -> Table {
        let mut order: Vec<(u64, usize)> = servers
            .iter()
            .enumerate()
            .filter(|(_, s)| s.weight > 0)
            .map(|(i, s)| (hash_bytes(s.identity, seed ^ SALT_ORDER), i))
            .collect();
        order.sort_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| servers[a.1].identity.cmp(servers[b.1].identity))
        });
        order.truncate(MAX_SERVERS);
        let n = order.len();
        if n == 0 {
            return Table {
                slots: Vec::new(),
                servers: Vec::new(),
                fingerprint: hash_bytes(&[], seed ^ SALT_FINGERPRINT),
            };
        }
        let m = size_for(n);
        let m64 = u64::from(m);
        let ids: Vec<&[u8]> = order.iter().map(|&(_, i)| servers[i].identity).collect();
        let weights: Vec<u64> = order
            .iter()
            .map(|&(_, i)| u64::from(servers[i].weight))
            .collect();
        let offset: Vec<u64> = ids
            .iter()
            .map(|id| hash_bytes(id, seed ^ SALT_OFFSET) % m64)
            .collect();
        let skip: Vec<u64> = ids
            .iter()
            .map(|id| hash_bytes(id, seed ^ SALT_SKIP) % (m64 - 1) + 1)
            .collect();
        let max_weight = weights.iter().copied().max().unwrap_or(1);
        // Each server's next candidate slot, (offset + j × skip) mod M, advanced by additions.
        let mut next = offset;
        let mut credit = vec![0u64; n];
        let mut slots = vec![u16::MAX; m as usize];
        let mut filled = 0usize;
        'fill: loop {
            for i in 0..n {
                credit[i] += weights[i];
                while credit[i] >= max_weight {
                    credit[i] -= max_weight;
                    // The next free slot in server i's permutation; M is prime and skip is in
                    // 1..M, so the permutation visits every slot and a free one is found.
                    loop {
                        let c = next[i] as usize;
                        next[i] += skip[i];
                        if next[i] >= m64 {
                            next[i] -= m64;
                        }
                        if slots[c] == u16::MAX {
                            slots[c] = i as u16;
                            break;
                        }
                    }
                    filled += 1;
                    if filled == m as usize {
                        break 'fill;
                    }
                }
            }
        }
        let mut fp = hash_bytes(&m.to_le_bytes(), seed ^ SALT_FINGERPRINT);
        for id in &ids {
            fp = mix(fp ^ hash_bytes(id, SALT_FINGERPRINT));
        }
        for &s in &slots {
            fp = (fp ^ u64::from(s)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        Table {
            slots,
            servers: order.into_iter().map(|(_, i)| i).collect(),
            fingerprint: mix(fp),
        }
    }

    /// The table's size M (0 when empty).
    pub fn size(&self) -> usize {
        self.slots.len()
    }

    /// A hash of the table: the size, the servers' identities in sorted order and every slot.
    /// Two tables with the same fingerprint send every key to the same server.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// The server (the caller's index) for a key's hash, walking forward from its slot past the
    /// servers `available` refuses. None when the table is empty or no server is available;
    /// the walk is bounded by the table's size.
    pub fn lookup(&self, key: u64, available: impl Fn(usize) -> bool) -> Option<usize> {
        let m = self.slots.len();
        if m == 0 {
            return None;
        }
        let start = (key % m as u64) as usize;
        // After this many unavailable slots, make sure some server is available at all before
        // walking on (a walk over every slot is M steps).
        let check_at = self.servers.len().saturating_mul(8);
        for step in 0..m {
            let i = start + step;
            let slot = self.slots[if i >= m { i - m } else { i }];
            let server = self.servers[usize::from(slot)];
            if available(server) {
                return Some(server);
            }
            if step == check_at && !self.servers.iter().any(|&s| available(s)) {
                return None;
            }
        }
        None
    }

    /// How many slots each server (the caller's index) holds, in the caller's order of
    /// `servers` as given to [`Table::build`] (`len` entries).
    pub fn shares(&self, len: usize) -> Vec<usize> {
        let mut out = vec![0; len];
        for &s in &self.slots {
            if let Some(c) = out.get_mut(self.servers[usize::from(s)]) {
                *c += 1;
            }
        }
        out
    }
}

/// M for `n` servers: the smallest of [`SIZES`] at least 100 × n, else the largest.
pub fn size_for(n: usize) -> u32 {
    let want = (n as u64).saturating_mul(100);
    SIZES
        .iter()
        .copied()
        .find(|&m| u64::from(m) >= want)
        .unwrap_or(SIZES[SIZES.len() - 1])
}

#[cfg(test)]
#[path = "maglev_tests.rs"]
mod tests;
