//! The process's session count against `-x` (`conn_max`) and the open-file limit:
//! [`SessionCount`] is shared by all workers, and each session holds a [`SessionPermit`] that
//! gives its place back when dropped, so every way a session ends (closed, panicked, handed on
//! as a PROXY-protocol client) uncounts it once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Sessions open in all workers (`Shared::active`).
#[derive(Debug, Default)]
pub(crate) struct SessionCount(AtomicU64);

impl SessionCount {
    /// The sessions counted now (what status reports, the metrics and `--exit-idle-time` read;
    /// the ordering is the caller's, as for an atomic's `load`).
    pub(crate) fn load(&self, order: Ordering) -> u64 {
        self.0.load(order)
    }

    /// Counts one more session if fewer than `max` are counted, or None (nothing counted then).
    /// One atomic add decides: of racing workers, exactly those that found the count under
    /// `max` hold a permit.
    pub(crate) fn try_take(self: &Arc<Self>, max: u64) -> Option<SessionPermit> {
        if self.0.fetch_add(1, Ordering::Relaxed) < max {
            return Some(SessionPermit {
                count: self.clone(),
            });
        }
        self.0.fetch_sub(1, Ordering::Relaxed);
        None
    }
}

/// One session counted in a [`SessionCount`]; uncounted when dropped.
#[derive(Debug)]
#[must_use = "a permit dropped at once gives its place back at once"]
pub(crate) struct SessionPermit {
    count: Arc<SessionCount>,
}

impl Drop for SessionPermit {
    fn drop(&mut self) {
        self.count.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
#[path = "permit_tests.rs"]
mod tests;
