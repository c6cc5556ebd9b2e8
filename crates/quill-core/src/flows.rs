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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
