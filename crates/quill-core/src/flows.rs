//! A UDP flow table, pure (no sockets, no clock): a slab of flows keyed by the client's address,
//! kept in idle order (least recently active first). One table per worker and listener; all its
//! flows share one idle timeout, so the idle order is also the expiry order: the oldest idle flow
//! is the one evicted at `max_flows` and the first to time out, and no timer heap is needed.
//!
//! A flow is named by a [`FlowId`] (slot and generation): a handle kept elsewhere (an epoll token)
//! that outlives its flow finds nothing instead of the slot's next flow.

use std::collections::HashMap;
use std::hash::Hash;

const NIL: u32 = u32::MAX;

/// A flow's handle: its slot and the slot's generation when the flow was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowId {
    pub slot: u32,
    pub gen: u32,
}

#[derive(Debug)]
struct Entry<K, V> {
    gen: u32,
    /// Idle-order links (slots), NIL at the ends; unused while the slot is free.
    prev: u32,
    next: u32,
    /// When the flow last carried a datagram (caller's clock).
    last: u64,
    flow: Option<(K, V)>,
}

/// Flows by client key `K`, each with a value `V` (its server socket, counters).
#[derive(Debug)]
pub struct FlowTable<K, V> {
    entries: Vec<Entry<K, V>>,
    free: Vec<u32>,
    by_key: HashMap<K, u32>,
    /// Least recently active flow, and most recently active.
    head: u32,
    tail: u32,
}

impl<K: Hash + Eq + Copy, V> Default for FlowTable<K, V> {
    fn default() -> Self {
        FlowTable::new()
    }
}

impl<K: Hash + Eq + Copy, V> FlowTable<K, V> {
    pub fn new() -> FlowTable<K, V> {
        FlowTable {
            entries: Vec::new(),
            free: Vec::new(),
            by_key: HashMap::new(),
            head: NIL,
            tail: NIL,
        }
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// The flow of client `key`, if it has one.
    pub fn find(&self, key: &K) -> Option<FlowId> {
        self.by_key.get(key).map(|&slot| FlowId {
            slot,
            gen: self.entries[slot as usize].gen,
        })
    }

    /// The live flow in `slot`, if any.
    pub fn id_at(&self, slot: u32) -> Option<FlowId> {
        let e = self.entries.get(slot as usize)?;
        e.flow.as_ref().map(|_| FlowId { slot, gen: e.gen })
    }

    /// Adds a flow for `key` (which must have none: an existing one is returned unchanged with
    /// `value` dropped), most recently active at `now`.
    pub fn insert(&mut self, key: K, value: V, now: u64) -> FlowId {
        if let Some(id) = self.find(&key) {
            return id;
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.entries.push(Entry {
                    gen: 0,
                    prev: NIL,
                    next: NIL,
                    last: 0,
                    flow: None,
                });
                (self.entries.len() - 1) as u32
            }
        };
        let e = &mut self.entries[slot as usize];
        e.flow = Some((key, value));
        e.last = now;
        let gen = e.gen;
        self.by_key.insert(key, slot);
        self.link_tail(slot);
        FlowId { slot, gen }
    }

    fn live(&self, id: FlowId) -> Option<&Entry<K, V>> {
        self.entries
            .get(id.slot as usize)
            .filter(|e| e.gen == id.gen && e.flow.is_some())
    }

    /// The flow's client key and value.
    pub fn get(&self, id: FlowId) -> Option<(&K, &V)> {
        self.live(id)
            .and_then(|e| e.flow.as_ref())
            .map(|(k, v)| (k, v))
    }

    pub fn get_mut(&mut self, id: FlowId) -> Option<(&K, &mut V)> {
        self.entries
            .get_mut(id.slot as usize)
            .filter(|e| e.gen == id.gen)
            .and_then(|e| e.flow.as_mut())
            .map(|(k, v)| (&*k, v))
    }

    /// When the flow last carried a datagram.
    pub fn last_active(&self, id: FlowId) -> Option<u64> {
        self.live(id).map(|e| e.last)
    }

    /// The flow carried a datagram at `now`: it becomes the most recently active.
    pub fn touch(&mut self, id: FlowId, now: u64) {
        if self.live(id).is_none() {
            return;
        }
        let e = &mut self.entries[id.slot as usize];
        // A clock that stepped back never moves a flow ahead of later ones.
        e.last = e.last.max(now);
        self.unlink(id.slot);
        self.link_tail(id.slot);
    }

    /// Ends the flow, giving back its key and value.
    pub fn remove(&mut self, id: FlowId) -> Option<(K, V)> {
        self.live(id)?;
        self.unlink(id.slot);
        let e = &mut self.entries[id.slot as usize];
        let (key, value) = e.flow.take()?;
        e.gen = e.gen.wrapping_add(1);
        self.by_key.remove(&key);
        self.free.push(id.slot);
        Some((key, value))
    }

    /// The least recently active flow, with when it was last active.
    pub fn oldest(&self) -> Option<(FlowId, u64)> {
        if self.head == NIL {
            return None;
        }
        let e = &self.entries[self.head as usize];
        Some((
            FlowId {
                slot: self.head,
                gen: e.gen,
            },
            e.last,
        ))
    }

    /// Removes and returns the oldest flow if it was last active at or before `before`.
    pub fn pop_idle(&mut self, before: u64) -> Option<(FlowId, K, V)> {
        let (id, last) = self.oldest()?;
        if last > before {
            return None;
        }
        self.remove(id).map(|(k, v)| (id, k, v))
    }

    /// Every live flow, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (FlowId, &K, &V, u64)> + '_ {
        self.entries.iter().enumerate().filter_map(|(i, e)| {
            e.flow.as_ref().map(|(k, v)| {
                (
                    FlowId {
                        slot: i as u32,
                        gen: e.gen,
                    },
                    k,
                    v,
                    e.last,
                )
            })
        })
    }

    /// Ids of every live flow (to end them all).
    pub fn ids(&self) -> Vec<FlowId> {
        self.iter().map(|(id, ..)| id).collect()
    }

    fn unlink(&mut self, slot: u32) {
        let (prev, next) = {
            let e = &self.entries[slot as usize];
            (e.prev, e.next)
        };
        if prev == NIL {
            self.head = next;
        } else {
            self.entries[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.entries[next as usize].prev = prev;
        }
        let e = &mut self.entries[slot as usize];
        e.prev = NIL;
        e.next = NIL;
    }

    fn link_tail(&mut self, slot: u32) {
        let tail = self.tail;
        {
            let e = &mut self.entries[slot as usize];
            e.prev = tail;
            e.next = NIL;
        }
        if tail == NIL {
            self.head = slot;
        } else {
            self.entries[tail as usize].next = slot;
        }
        self.tail = slot;
    }

    /// Checks the table's invariants (tests and fuzzing): the idle list holds every live flow once,
    /// in non-decreasing activity order, and the key map agrees with the slots.
    pub fn check(&self) -> Result<(), String> {
        let mut seen = 0usize;
        let mut at = self.head;
        let mut prev = NIL;
        let mut last = 0u64;
        while at != NIL {
            let e = self
                .entries
                .get(at as usize)
                .ok_or_else(|| format!("link to missing slot {at}"))?;
            let (k, _) = e
                .flow
                .as_ref()
                .ok_or_else(|| format!("free slot {at} in the idle list"))?;
            if e.prev != prev {
                return Err(format!("slot {at}: back link {} not {prev}", e.prev));
            }
            if e.last < last {
                return Err(format!("slot {at}: out of idle order"));
            }
            if self.by_key.get(k) != Some(&at) {
                return Err(format!("slot {at}: key map disagrees"));
            }
            last = e.last;
            seen += 1;
            if seen > self.entries.len() {
                return Err("idle list has a cycle".into());
            }
            prev = at;
            at = e.next;
        }
        if prev != self.tail {
            return Err("tail is not the last flow".into());
        }
        if seen != self.by_key.len() {
            return Err(format!("{seen} flows listed, {} keyed", self.by_key.len()));
        }
        Ok(())
    }
}

/// How many of a flow's last datagrams [`IcmpWatch`] remembers.
pub const SENT_KEPT: usize = 4;
/// How long a datagram sent after a first ICMP error may go unanswered before the server counts
/// as unreachable ([`IcmpWatch::unanswered`]), in the caller's clock (ms).
pub const UNANSWERED_MS: u64 = 1_000;

/// What one flow knows about ICMP errors from its server, pure: keys of the starts of its last
/// datagrams (the caller hashes them with a secret of its own), and the errors that quoted one of
/// them. An error that quotes none of them is forged (an off-path sender does not know what the
/// flow sent) and is not counted. The server is unreachable after two counted errors, or after
/// one and then a datagram that stays unanswered for [`UNANSWERED_MS`]; any reply from the server
/// clears both.
/// Kept small: every flow has one (48 bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IcmpWatch {
    /// Keys of the starts of the last datagrams sent, and how many bytes each start has.
    keys: [u64; SENT_KEPT],
    lens: [u8; SENT_KEPT],
    filled: u8,
    next: u8,
    errors: u8,
    /// When the first datagram after the last counted error left, while none was answered
    /// (`NEVER`: none).
    waiting_since: u64,
}

const NEVER: u64 = u64::MAX;

impl Default for IcmpWatch {
    fn default() -> Self {
        IcmpWatch {
            keys: [0; SENT_KEPT],
            lens: [0; SENT_KEPT],
            filled: 0,
            next: 0,
            errors: 0,
            waiting_since: NEVER,
        }
    }
}

/// What an ICMP error means for a flow's server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IcmpVerdict {
    /// It quotes nothing this flow sent: ignored.
    Forged,
    /// Counted, but one error alone takes no server out.
    Counted,
    /// The server is unreachable: take it out.
    Unreachable,
}

impl IcmpWatch {
    /// A datagram left for the server at `now`: `key` is the caller's hash of its first `len`
    /// bytes (at most the caller's prefix length).
    pub fn sent(&mut self, key: u64, len: u8, now: u64) {
        self.keys[usize::from(self.next)] = key;
        self.lens[usize::from(self.next)] = len;
        self.next = (self.next + 1) % SENT_KEPT as u8;
        self.filled = (self.filled + 1).min(SENT_KEPT as u8);
        if self.errors > 0 && self.waiting_since == NEVER {
            self.waiting_since = now.min(NEVER - 1);
        }
    }

    /// The server answered: it is there, whatever errors came before.
    pub fn answered(&mut self) {
        self.errors = 0;
        self.waiting_since = NEVER;
    }

    /// Whether the quoted payload is the start of one of the last datagrams sent: `key_of(len)`
    /// is the caller's hash of the quote's first `len` bytes, None when fewer were quoted.
    pub fn quotes_sent(&self, key_of: impl Fn(u8) -> Option<u64>) -> bool {
        let n = usize::from(self.filled);
        self.keys[..n]
            .iter()
            .zip(&self.lens[..n])
            .any(|(&key, &len)| key_of(len) == Some(key))
    }

    /// An ICMP error (port unreachable from the server's own address) arrived; `quotes_sent` is
    /// what [`IcmpWatch::quotes_sent`] said of its payload.
    pub fn error(&mut self, quotes_sent: bool) -> IcmpVerdict {
        if !quotes_sent {
            return IcmpVerdict::Forged;
        }
        self.errors = self.errors.saturating_add(1);
        if self.errors >= 2 {
            IcmpVerdict::Unreachable
        } else {
            IcmpVerdict::Counted
        }
    }

    /// One error was counted and a datagram sent after it has had no answer for
    /// [`UNANSWERED_MS`] at `now` (asked when the client sends again).
    pub fn unanswered(&self, now: u64) -> bool {
        self.errors > 0
            && self.waiting_since != NEVER
            && now.saturating_sub(self.waiting_since) >= UNANSWERED_MS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(bytes: &[u8]) -> u64 {
        // Any injective-enough function does for the model; the product uses a keyed hash.
        bytes.iter().fold(bytes.len() as u64, |h, &b| {
            h.wrapping_mul(31).wrapping_add(u64::from(b))
        })
    }

    fn watch_sent(w: &mut IcmpWatch, data: &[u8], now: u64) {
        let len = data.len().min(32);
        w.sent(key(&data[..len]), len as u8, now);
    }

    fn quote(w: &IcmpWatch, quoted: &[u8]) -> bool {
        w.quotes_sent(|len| quoted.get(..usize::from(len)).map(key))
    }

    #[test]
    fn an_icmp_error_counts_only_when_it_quotes_a_datagram_sent() {
        let mut w = IcmpWatch::default();
        watch_sent(&mut w, b"query-1 with a random id 8f3a", 0);
        // Header-only quotes and guesses are forged, however many come.
        for _ in 0..5 {
            assert_eq!(w.error(quote(&w, b"")), IcmpVerdict::Forged);
            assert_eq!(w.error(quote(&w, b"guess")), IcmpVerdict::Forged);
        }
        // A quote cut shorter than what was remembered proves nothing either.
        assert_eq!(w.error(quote(&w, b"query-1")), IcmpVerdict::Forged);
        // The real one: the datagram's start (a router may quote more than was remembered).
        assert_eq!(
            w.error(quote(&w, b"query-1 with a random id 8f3a")),
            IcmpVerdict::Counted
        );
        assert_eq!(
            w.error(quote(&w, b"query-1 with a random id 8f3a")),
            IcmpVerdict::Unreachable
        );
    }

    #[test]
    fn a_reply_clears_the_errors_and_one_error_needs_an_unanswered_datagram() {
        let mut w = IcmpWatch::default();
        watch_sent(&mut w, b"a", 0);
        assert_eq!(w.error(quote(&w, b"a")), IcmpVerdict::Counted);
        assert!(!w.unanswered(5_000), "no datagram sent since the error");
        w.answered();
        assert_eq!(
            w.error(quote(&w, b"a")),
            IcmpVerdict::Counted,
            "counting again from one"
        );
        watch_sent(&mut w, b"b", 100);
        assert!(!w.unanswered(100 + UNANSWERED_MS - 1));
        assert!(w.unanswered(100 + UNANSWERED_MS));
        w.answered();
        assert!(!w.unanswered(10_000));
    }

    #[test]
    fn a_watch_stays_small() {
        assert!(std::mem::size_of::<IcmpWatch>() <= 48);
    }

    #[test]
    fn only_the_last_datagrams_are_remembered() {
        let mut w = IcmpWatch::default();
        for i in 0..(SENT_KEPT as u8 + 1) {
            watch_sent(&mut w, &[b'd', i], u64::from(i));
        }
        assert!(!quote(&w, b"d\x00"), "the oldest was forgotten");
        for i in 1..(SENT_KEPT as u8 + 1) {
            assert!(quote(&w, &[b'd', i]));
        }
    }

    #[test]
    fn flows_are_found_by_key_and_a_stale_id_finds_nothing() {
        let mut t: FlowTable<u32, &str> = FlowTable::new();
        let a = t.insert(1, "a", 10);
        let b = t.insert(2, "b", 20);
        assert_eq!(t.find(&1), Some(a));
        assert_eq!(t.get(b).map(|(_, v)| *v), Some("b"));
        assert_eq!(t.remove(a), Some((1, "a")));
        assert!(t.get(a).is_none());
        let c = t.insert(3, "c", 30);
        assert_eq!(c.slot, a.slot, "the free slot is reused");
        assert!(t.get(a).is_none(), "the old id does not name the new flow");
        t.check().unwrap();
    }

    #[test]
    fn the_oldest_idle_flow_goes_first() {
        let mut t: FlowTable<u32, ()> = FlowTable::new();
        let a = t.insert(1, (), 10);
        t.insert(2, (), 20);
        t.insert(3, (), 30);
        t.touch(a, 40);
        assert_eq!(t.pop_idle(u64::MAX).map(|(_, k, _)| k), Some(2));
        assert!(t.pop_idle(25).is_none(), "flow 3 was active at 30");
        assert_eq!(t.pop_idle(30).map(|(_, k, _)| k), Some(3));
        assert_eq!(t.pop_idle(40).map(|(_, k, _)| k), Some(1));
        assert!(t.is_empty());
        t.check().unwrap();
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8),
        Touch(u8),
        Remove(u8),
        PopIdle(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            any::<u8>().prop_map(Op::Insert),
            any::<u8>().prop_map(Op::Touch),
            any::<u8>().prop_map(Op::Remove),
            any::<u8>().prop_map(Op::PopIdle),
        ]
    }

    proptest! {
        /// Any sequence of operations keeps the invariants and agrees with a plain model (a map
        /// of key to last activity): the flow popped is always one least recently active.
        #[test]
        fn any_operations_keep_the_table_consistent(ops in proptest::collection::vec(op(), 0..200)) {
            let mut t: FlowTable<u8, u8> = FlowTable::new();
            let mut model: HashMap<u8, u64> = HashMap::new();
            for (now, op) in ops.into_iter().enumerate() {
                let now = now as u64;
                match op {
                    Op::Insert(k) => {
                        t.insert(k, k, now);
                        model.entry(k).or_insert(now);
                    }
                    Op::Touch(k) => {
                        if let Some(id) = t.find(&k) {
                            t.touch(id, now);
                            model.insert(k, now);
                        }
                    }
                    Op::Remove(k) => {
                        let id = t.find(&k);
                        prop_assert_eq!(id.is_some(), model.contains_key(&k));
                        if let Some(id) = id {
                            prop_assert_eq!(t.remove(id), Some((k, k)));
                            model.remove(&k);
                        }
                    }
                    Op::PopIdle(b) => {
                        let before = now.saturating_sub(u64::from(b % 16));
                        let min = model.values().copied().min();
                        match t.pop_idle(before) {
                            Some((_, k, _)) => {
                                prop_assert_eq!(Some(model[&k]), min);
                                prop_assert!(model[&k] <= before);
                                model.remove(&k);
                            }
                            None => prop_assert!(min.is_none_or(|m| m > before)),
                        }
                    }
                }
                prop_assert!(t.check().is_ok(), "{:?}", t.check());
                prop_assert_eq!(t.len(), model.len());
            }
        }
    }
}
