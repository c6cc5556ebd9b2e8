//! Connection tracking for direct server return on a Maglev table (the Maglev paper's §3.3): which
//! server each flow this instance forwards went to, so that a flow keeps its server when the
//! table's answer for it changes (a server that was unavailable comes back) for as long as that
//! server stays available. A flow seen first here (one that an ECMP change moved from another
//! instance) takes the table's answer, which every instance shares.
//!
//! Bounded and allocated once: [`Conntrack::new`] makes every entry; nothing grows afterwards.
//! The entries are in sets of [`WAYS`]; a flow lives in the set its hash names, and a new flow
//! takes a free or expired way of that set, else the way seen least recently (so a flood of new
//! flows evicts the oldest entries, never more than the capacity). An entry expires once its
//! flow has been idle for the table's idle time: it is then free, with no sweep. A flow that
//! lost its entry is looked up in the Maglev table again, which gives the same server unless
//! the set of available servers changed in between.
//!
//! Pure: no clock (the caller passes milliseconds on its own clock), no sockets.

/// Entries per set: a lookup reads one set (8 × 32 bytes, four cache lines).
pub const WAYS: usize = 8;

/// A free entry's server.
const FREE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Entry {
    /// The flow's identity (see `quill_core::dsr::flow_id`).
    key: u128,
    /// When the flow last sent a frame (caller's milliseconds).
    seen: u64,
    /// The server it goes to (the caller's index), FREE when unused.
    server: u32,
}

const EMPTY: Entry = Entry {
    key: 0,
    seen: 0,
    server: FREE,
};

/// Flows and their servers, at most [`Conntrack::capacity`] of them.
#[derive(Debug)]
pub struct Conntrack {
    entries: Box<[Entry]>,
    sets: usize,
    idle_ms: u64,
}

impl Conntrack {
    /// A table of `capacity` entries (rounded up to a multiple of [`WAYS`], at least one set)
    /// whose entries expire after `idle_ms` without a frame.
    pub fn new(capacity: usize, idle_ms: u64) -> Conntrack {
        let sets = capacity.div_ceil(WAYS).max(1);
        Conntrack {
            entries: vec![EMPTY; sets * WAYS].into_boxed_slice(),
            sets,
            idle_ms,
        }
    }

    /// How many flows it can hold.
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// How many flows it holds at `now_ms` (reads every entry: for tests and statistics).
    pub fn len(&self, now_ms: u64) -> usize {
        self.entries.iter().filter(|e| self.live(e, now_ms)).count()
    }

    fn live(&self, e: &Entry, now_ms: u64) -> bool {
        e.server != FREE && now_ms.saturating_sub(e.seen) < self.idle_ms
    }

    /// The entries of the set `hash` names.
    fn set(&mut self, hash: u64) -> &mut [Entry] {
        // The high half of hash × sets: uniform over the sets without a division.
        let s = ((u128::from(hash) * self.sets as u128) >> 64) as usize;
        &mut self.entries[s * WAYS..(s + 1) * WAYS]
    }

    /// The server of flow `key` (whose hash is `hash`) if it has a live entry; the entry counts
    /// as seen at `now_ms`.
    pub fn get(&mut self, key: u128, hash: u64, now_ms: u64) -> Option<u32> {
        let idle = self.idle_ms;
        let e = self
            .set(hash)
            .iter_mut()
            .find(|e| e.server != FREE && e.key == key)?;
        if now_ms.saturating_sub(e.seen) >= idle {
            return None;
        }
        e.seen = e.seen.max(now_ms);
        Some(e.server)
    }

    /// Records that flow `key` goes to `server` (not `u32::MAX`) as of `now_ms`: in its own
    /// entry if it has one, else in a free or expired way of its set, else in place of the way
    /// seen least recently.
    pub fn insert(&mut self, key: u128, hash: u64, server: u32, now_ms: u64) {
        debug_assert_ne!(server, FREE);
        let idle = self.idle_ms;
        let set = self.set(hash);
        let at = set
            .iter()
            .position(|e| e.server != FREE && e.key == key)
            .or_else(|| {
                set.iter()
                    .position(|e| e.server == FREE || now_ms.saturating_sub(e.seen) >= idle)
            })
            .unwrap_or_else(|| (0..WAYS).min_by_key(|&w| set[w].seen).unwrap_or_default());
        set[at] = Entry {
            key,
            seen: now_ms,
            server,
        };
    }

    /// Forgets flow `key`; whether it had an entry.
    pub fn remove(&mut self, key: u128, hash: u64) -> bool {
        match self
            .set(hash)
            .iter_mut()
            .find(|e| e.server != FREE && e.key == key)
        {
            Some(e) => {
                *e = EMPTY;
                true
            }
            None => false,
        }
    }

    /// The server for a frame of flow `key`: the one it already goes to while `available`
    /// accepts it, else what `choose` gives (the Maglev table), which the flow then keeps. None
    /// when it has no available server and `choose` gives none (its entry, if any, stays).
    pub fn server_for(
        &mut self,
        key: u128,
        hash: u64,
        now_ms: u64,
        available: impl Fn(u32) -> bool,
        choose: impl FnOnce() -> Option<u32>,
    ) -> Option<u32> {
        if let Some(s) = self.get(key, hash, now_ms) {
            if available(s) {
                return Some(s);
            }
        }
        let s = choose()?;
        self.insert(key, hash, s, now_ms);
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(key: u128) -> u64 {
        crate::maglev::mix((key >> 64) as u64 ^ crate::maglev::mix(key as u64 ^ 0x5bd1_e995))
    }

    #[test]
    fn a_tracked_flow_keeps_its_server_while_available_then_takes_the_new_choice() {
        let mut t = Conntrack::new(64, 1000);
        let k = 7u128;
        // First frame: server 1 is the table's answer.
        assert_eq!(t.server_for(k, h(k), 10, |_| true, || Some(1)), Some(1));
        // The table now says 0 (server 0 came back): the flow stays on 1.
        assert_eq!(t.server_for(k, h(k), 20, |_| true, || Some(0)), Some(1));
        // Server 1 goes away: the flow moves to the table's answer and keeps it.
        assert_eq!(t.server_for(k, h(k), 30, |s| s != 1, || Some(0)), Some(0));
        assert_eq!(t.server_for(k, h(k), 40, |_| true, || Some(1)), Some(0));
        // No server at all: None, and the entry is kept for when one is back.
        assert_eq!(t.server_for(k, h(k), 50, |_| false, || None), None);
        assert_eq!(t.get(k, h(k), 60), Some(0));
    }

    #[test]
    fn entries_expire_after_the_idle_time_and_frames_keep_them() {
        let mut t = Conntrack::new(64, 1000);
        t.insert(1, h(1), 3, 0);
        assert_eq!(t.get(1, h(1), 999), Some(3));
        // Seen at 999: alive until 1999.
        assert_eq!(t.get(1, h(1), 1998), Some(3));
        assert_eq!(t.get(1, h(1), 2998), None);
        assert_eq!(t.len(2998), 0);
        // Expired: a new choice is taken, not the old one.
        assert_eq!(t.server_for(1, h(1), 3000, |_| true, || Some(4)), Some(4));
        assert!(t.remove(1, h(1)));
        assert!(!t.remove(1, h(1)));
        assert_eq!(t.get(1, h(1), 3001), None);
    }

    #[test]
    fn a_full_set_evicts_the_flow_seen_least_recently() {
        // One set: every key shares it.
        let mut t = Conntrack::new(WAYS, 10_000);
        assert_eq!(t.capacity(), WAYS);
        for k in 0..WAYS as u128 {
            t.insert(k, h(k), k as u32, 100 + k as u64);
        }
        // Flow 0 is refreshed; flow 1 is now the oldest.
        assert_eq!(t.get(0, h(0), 200), Some(0));
        t.insert(99, h(99), 9, 201);
        assert_eq!(t.get(1, h(1), 202), None);
        assert_eq!(t.get(0, h(0), 202), Some(0));
        assert_eq!(t.get(99, h(99), 202), Some(9));
        assert_eq!(t.len(202), WAYS);
    }

    /// A flood of 400,000 new flows (a SYN flood from spoofed sources) into the default 65,536
    /// entries: the table never holds more than its capacity, and 100 flows that keep sending keep
    /// their entries and servers throughout. Each sends once per 2,000 frames of the flood, far
    /// more often than its set of 8 turns over (on average every 65,536 new flows): a flow is
    /// evicted only when 8 newer ones land in its set while it is silent.
    #[test]
    fn a_flood_of_new_flows_stays_within_capacity_and_spares_active_flows() {
        let mut t = Conntrack::new(65_536, 120_000);
        let active = |i: u64| (u128::from(i) << 64) | 1;
        for i in 0..100u64 {
            t.insert(active(i), h(active(i)), (i % 7) as u32, 1);
        }
        let mut next_active = 0u64;
        for n in 0..400_000u64 {
            let now = 2 + n / 100;
            let flood = (u128::from(n) << 64) | 2;
            t.server_for(flood, h(flood), now, |_| true, || Some(99));
            if n % 20 == 0 {
                let k = active(next_active % 100);
                let got = t.server_for(k, h(k), now, |_| true, || Some(99));
                assert_eq!(
                    got,
                    Some((next_active % 100 % 7) as u32),
                    "active flow lost at {n}"
                );
                next_active += 1;
            }
        }
        assert_eq!(t.len(4000), 65_536);
        assert_eq!(t.capacity(), 65_536);
    }

    #[test]
    fn capacity_rounds_up_to_whole_sets() {
        assert_eq!(Conntrack::new(0, 1).capacity(), WAYS);
        assert_eq!(Conntrack::new(65_536, 1).capacity(), 65_536);
        assert_eq!(Conntrack::new(65_537, 1).capacity(), 65_536 + WAYS);
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        #[derive(Clone, Debug)]
        enum Op {
            /// A frame of flow k (the table would say s), t ms after the previous operation.
            Frame(u16, u32, u16),
            Remove(u16),
        }

        fn ops() -> impl Strategy<Value = Vec<Op>> {
            proptest::collection::vec(
                prop_oneof![
                    8 => (0..600u16, 0..5u32, 0..40u16).prop_map(|(k, s, t)| Op::Frame(k, s, t)),
                    1 => (0..600u16).prop_map(Op::Remove),
                ],
                0..2000,
            )
        }

        proptest! {
            /// Whatever frames arrive, the table holds at most its capacity (its entries are
            /// never more than were allocated at the start), a flow just seen is found with its
            /// server, and a live flow's server changes only when it is unavailable.
            #[test]
            fn the_table_stays_within_its_capacity_and_pins_live_flows(
                ops in ops(),
                capacity in 1..200usize,
            ) {
                let mut t = Conntrack::new(capacity, 500);
                let allocated = t.capacity();
                prop_assert!(allocated >= capacity && allocated < capacity + WAYS);
                let mut now = 1u64;
                for op in ops {
                    match op {
                        Op::Frame(k, s, dt) => {
                            now += u64::from(dt);
                            let key = u128::from(k) << 64 | 0xfeed;
                            let hash = crate::maglev::mix(u64::from(k));
                            let before = t.get(key, hash, now);
                            let got = t.server_for(key, hash, now, |x| x != 4, || Some(s));
                            match before {
                                Some(b) if b != 4 => prop_assert_eq!(got, Some(b)),
                                _ => prop_assert_eq!(got, Some(s)),
                            }
                            prop_assert_eq!(t.get(key, hash, now), got);
                        }
                        Op::Remove(k) => {
                            let key = u128::from(k) << 64 | 0xfeed;
                            t.remove(key, crate::maglev::mix(u64::from(k)));
                            prop_assert_eq!(t.get(key, crate::maglev::mix(u64::from(k)), now), None);
                        }
                    }
                    prop_assert!(t.len(now) <= allocated);
                    prop_assert_eq!(t.capacity(), allocated);
                }
            }
        }
    }
}
