//! [`vacate`]: a box emptied of its value and kept for another, so a worker that makes and ends a
//! session per HTTP/2 stream reuses the sessions' boxes instead of going through the allocator
//! (whose per-size caches hold seven blocks: a burst of hundreds of streams ending at once went
//! to its slower paths, malloc's bins and consolidation). Part of `sys`, the one home of `unsafe`.

#![allow(unsafe_code)]

use std::mem::MaybeUninit;

/// Drops the value in `b` and returns its allocation, empty; `Box::write` puts a new value in.
/// A destructor that panics leaks the allocation (it is never freed twice).
pub fn vacate<T>(b: Box<T>) -> Box<MaybeUninit<T>> {
    let raw = Box::into_raw(b);
    // SAFETY: `raw` comes from `Box::into_raw`, so it is valid, aligned and owned here: the value
    // is dropped once, in place. `MaybeUninit<T>` has `T`'s size and alignment, so the box made
    // from the same pointer frees it with the layout it was allocated with, and holds memory that
    // may be uninitialized, as it now is. If the drop panics, `Box::from_raw` is never reached
    // and the allocation leaks.
    unsafe {
        std::ptr::drop_in_place(raw);
        Box::from_raw(raw.cast::<MaybeUninit<T>>())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    struct Counted<'a>(&'a Cell<u32>, u64);

    impl Drop for Counted<'_> {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }

    #[test]
    fn a_vacated_box_dropped_its_value_and_takes_another_in_the_same_place() {
        let drops = Cell::new(0);
        let first = Box::new(Counted(&drops, 1));
        let at = &*first as *const Counted<'_> as usize;
        let empty = vacate(first);
        assert_eq!(drops.get(), 1, "the value is dropped");
        let second = Box::write(empty, Counted(&drops, 2));
        assert_eq!(
            &*second as *const Counted<'_> as usize, at,
            "the same allocation"
        );
        assert_eq!(second.1, 2);
        drop(second);
        assert_eq!(drops.get(), 2);
        // An empty box dropped as such drops nothing.
        drop(vacate(Box::new(Counted(&drops, 3))));
        assert_eq!(drops.get(), 3);
    }
}
