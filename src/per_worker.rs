//! Values that every worker changes on every request (a server's total of sessions and its bytes),
//! kept one per worker, each on a cache line of its own, so that no worker writes a line another
//! worker wrote last: a worker adds to its own slot with a load and a store, no locked
//! instruction, and a reader sums the slots.
//!
//! A worker thread says which it is once ([`enter_worker`]); the slots are as many as the
//! workers the process runs ([`set_workers`], fixed for its life: a reload keeps the start's
//! count), plus one that every other thread, and a worker numbered past the slots (a value made
//! before the count was set), shares with atomic adds.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::metrics::Counters;

/// How many workers the process runs (1 until [`set_workers`]).
static WORKERS: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    /// This thread's worker number; `usize::MAX` on a thread that is not a worker.
    static WORKER: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// The process runs `workers` workers: values made from now on have a slot for each.
pub(crate) fn set_workers(workers: usize) {
    WORKERS.store(workers.max(1), Ordering::Relaxed);
}

/// The calling thread is worker `id`, for the rest of its life.
pub(crate) fn enter_worker(id: usize) {
    WORKER.with(|w| w.set(id));
}

/// One value on a cache line of its own: 64 bytes, the line x86-64 and most ARM cores move.
/// Some x86-64 cores also fetch a line's neighbour ahead, and Apple's cores move 128 bytes, so
/// neighbouring slots may still share a little there (`metrics::HttpStats`, a few per listener,
/// takes 128; a slot per worker for every server takes half the memory at 64).
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct Line<T>(pub(crate) T);

impl<T> std::ops::Deref for Line<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// A value of type `T` per worker, and one shared by every other thread (see the module doc).
#[derive(Debug)]
pub(crate) struct PerWorker<T> {
    /// The workers' slots, then the shared one.
    slots: Box<[Line<T>]>,
}

impl<T: Default> PerWorker<T> {
    /// A slot for each worker of the process and the shared one, each `T::default()`.
    pub(crate) fn new() -> PerWorker<T> {
        let slots = WORKERS.load(Ordering::Relaxed) + 1;
        PerWorker {
            slots: (0..slots).map(|_| Line::default()).collect(),
        }
    }
}

impl<T> PerWorker<T> {
    /// The calling thread's slot, and whether it writes it alone (a worker's own slot; the
    /// shared one takes atomic adds).
    pub(crate) fn mine(&self) -> (&T, bool) {
        let shared = self.slots.len() - 1;
        let i = WORKER.with(Cell::get).min(shared);
        (&self.slots[i].0, i < shared)
    }

    /// Every slot, the workers' first.
    pub(crate) fn slots(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().map(|l| &l.0)
    }
}

/// Adds `n` to `counter`, a slot [`PerWorker::mine`] gave: a load and a store when the thread
/// writes it alone (as a worker's own `metrics::Counters` are added to), an atomic add when it is
/// shared.
pub(crate) fn add(counter: &AtomicU64, alone: bool, n: u64) {
    if alone {
        Counters::add(counter, n);
    } else {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_is_no_worker_shares_the_last_slot() {
        let counts = PerWorker::<AtomicU64>::new();
        let (slot, alone) = counts.mine();
        assert!(!alone);
        add(slot, alone, 3);
        assert_eq!(
            counts.slots().last().map(|c| c.load(Ordering::Relaxed)),
            Some(3)
        );
    }

    #[test]
    fn a_worker_writes_its_own_slot_and_one_past_the_slots_shares() {
        std::thread::spawn(|| {
            enter_worker(0);
            let counts = PerWorker::<AtomicU64>::new();
            let (slot, alone) = counts.mine();
            assert!(alone);
            add(slot, alone, 2);
            let sum: u64 = counts.slots().map(|c| c.load(Ordering::Relaxed)).sum();
            assert_eq!(sum, 2);
            assert_eq!(
                counts.slots().next().map(|c| c.load(Ordering::Relaxed)),
                Some(2)
            );
            // A worker numbered past the slots (a value made before the count was known).
            enter_worker(7);
            let (slot, alone) = counts.mine();
            assert!(!alone);
            add(slot, alone, 1);
            assert_eq!(
                counts.slots().last().map(|c| c.load(Ordering::Relaxed)),
                Some(1)
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn each_slot_is_a_cache_line_of_its_own() {
        assert_eq!(std::mem::align_of::<Line<AtomicU64>>(), 64);
        let counts = PerWorker::<AtomicU64>::new();
        let addrs: Vec<usize> = counts.slots().map(|c| c as *const _ as usize).collect();
        assert!(addrs.windows(2).all(|w| w[1] - w[0] >= 64));
    }
}
