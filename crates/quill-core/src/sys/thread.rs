//! [`ThreadRc`]: an `Rc` that stays with the thread that made it, inside a type that must be
//! `Send`.
//!
//! A worker's sessions are `Send` (a kept-alive HTTP client may move to another worker between
//! requests, and the worker itself is built before its thread starts), yet the two sessions of an
//! HTTP/2 stream, which always live on one worker, share their pipe: an `Rc` there costs no atomic
//! operation where an `Arc<Mutex<_>>` costs several per request. This wrapper makes such an `Rc`
//! `Send` by refusing to touch it anywhere but on its own thread: elsewhere it panics on use and
//! leaks on drop. Part of `sys`, the one home of `unsafe`.

#![allow(unsafe_code)]

use std::cell::Cell;
use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The next thread's number (0: not numbered yet).
static NEXT: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's number, never given to another thread.
    static THIS: Cell<u64> = const { Cell::new(0) };
}

/// The number of the calling thread: one atomic operation the first time a thread asks, a
/// thread-local read after.
fn this_thread() -> u64 {
    THIS.with(|this| match this.get() {
        0 => {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            this.set(n);
            n
        }
        n => n,
    })
}

/// An `Rc<T>` usable only on the thread that made it: dereferencing or cloning it on another
/// thread panics, and dropping it there leaks it (its count is never touched off its thread).
/// One pointer, as an `Rc`: the owning thread's number lives beside the value.
pub struct ThreadRc<T> {
    rc: ManuallyDrop<Rc<Owned<T>>>,
}

struct Owned<T> {
    /// The number of the thread that made the value: never written after.
    owner: u64,
    value: T,
}

// SAFETY: an `Rc` is `!Send` because its count is not atomic. This one's count is changed only
// by `clone`, `Drop` and `get_mut`, which `check` first or, for `Drop`, leak the pointer off the
// owning thread; the value is reached only through `check`. Off its thread the wrapper only reads
// `owner`, which nothing writes after `new`. So the count and the value are only ever touched on
// one thread. The wrapper is not `Sync` (an `Rc` is not), so a shared reference never crosses.
unsafe impl<T> Send for ThreadRc<T> {}

impl<T> ThreadRc<T> {
    pub fn new(value: T) -> ThreadRc<T> {
        ThreadRc {
            rc: ManuallyDrop::new(Rc::new(Owned {
                owner: this_thread(),
                value,
            })),
        }
    }

    /// Whether the calling thread is the one that may use the value.
    #[inline]
    pub fn is_here(&self) -> bool {
        self.rc.owner == this_thread()
    }

    #[inline]
    fn check(&self) {
        assert!(
            self.is_here(),
            "a thread-bound value was used off the thread that made it"
        );
    }

    /// How many `ThreadRc`s hold the value (`Rc::strong_count`).
    pub fn holders(this: &ThreadRc<T>) -> usize {
        this.check();
        Rc::strong_count(&this.rc)
    }

    /// The value, if this is its only holder (`Rc::get_mut`).
    pub fn get_mut(this: &mut ThreadRc<T>) -> Option<&mut T> {
        this.check();
        Rc::get_mut(&mut this.rc).map(|o| &mut o.value)
    }
}

impl<T> Deref for ThreadRc<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        self.check();
        &self.rc.value
    }
}

impl<T> Clone for ThreadRc<T> {
    fn clone(&self) -> ThreadRc<T> {
        self.check();
        ThreadRc {
            rc: ManuallyDrop::new(Rc::clone(&self.rc)),
        }
    }
}

impl<T> Drop for ThreadRc<T> {
    fn drop(&mut self) {
        if self.is_here() {
            // SAFETY: dropped once (this is the wrapper's drop, and nothing else takes the `Rc`
            // out), on the thread that made it.
            unsafe { ManuallyDrop::drop(&mut self.rc) }
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for ThreadRc<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_here() {
            T::fmt(self, f)
        } else {
            f.write_str("ThreadRc(on another thread)")
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// Counts its drops.
    struct Dropped<'a>(&'a Cell<u32>);

    impl Drop for Dropped<'_> {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }

    #[test]
    fn a_value_is_shared_and_dropped_on_its_thread() {
        let drops = Cell::new(0);
        let mut one = ThreadRc::new(Dropped(&drops));
        assert!(ThreadRc::get_mut(&mut one).is_some(), "one holder");
        let two = one.clone();
        assert_eq!(ThreadRc::holders(&one), 2);
        assert!(ThreadRc::get_mut(&mut one).is_none(), "two holders");
        assert!(std::ptr::eq(&*one, &*two));
        drop(one);
        assert_eq!((ThreadRc::holders(&two), drops.get()), (1, 0));
        drop(two);
        assert_eq!(drops.get(), 1, "the last holder drops the value");
        assert_eq!(std::mem::size_of::<ThreadRc<u64>>(), 8, "one pointer");
    }

    #[test]
    fn off_its_thread_a_value_cannot_be_used_and_is_never_dropped() {
        static DROPS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        #[derive(Debug)]
        struct Counted;
        impl Drop for Counted {
            fn drop(&mut self) {
                DROPS.fetch_add(1, Ordering::Relaxed);
            }
        }
        let here = ThreadRc::new(Counted);
        let there = here.clone();
        let (used, cloned) = std::thread::spawn(move || {
            assert!(!there.is_here());
            let try_ =
                |f: &dyn Fn()| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_ok();
            let used = try_(&|| {
                let _: &Counted = &there;
            });
            let cloned = try_(&|| drop(there.clone()));
            assert_eq!(format!("{there:?}"), "ThreadRc(on another thread)");
            drop(there);
            (used, cloned)
        })
        .join()
        .unwrap();
        assert!(
            !used && !cloned,
            "dereferencing or cloning on another thread panics"
        );
        // The clone dropped there was leaked: its count was never touched.
        assert_eq!(ThreadRc::holders(&here), 2);
        drop(here);
        assert_eq!(DROPS.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn threads_get_numbers_of_their_own() {
        let here = this_thread();
        assert_eq!(here, this_thread());
        let there = std::thread::spawn(this_thread).join().unwrap();
        assert_ne!(here, there);
        assert_ne!(there, 0);
    }
}
