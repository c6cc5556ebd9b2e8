//! Time as the data path sees it: milliseconds since the process started (monotonic, cheap to read
//! through the vDSO) and wall-clock seconds for logs.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A monotonic origin shared by all workers, so times stored in shared atomics compare.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    /// [`quill_core::sys::monotonic_us`] when the clock was made.
    origin_us: u64,
}

impl Default for Clock {
    fn default() -> Clock {
        Clock {
            origin_us: quill_core::sys::monotonic_us(),
        }
    }
}

impl Clock {
    /// Milliseconds since the origin; never 0, so 0 can mean "unset" in atomics.
    pub(crate) fn now_ms(&self) -> u64 {
        ms_of(self.now_us())
    }

    /// Microseconds since the origin (a worker reads it once a turn: see [`ms_of`]).
    pub(crate) fn now_us(&self) -> u64 {
        quill_core::sys::monotonic_us().saturating_sub(self.origin_us)
    }
}

/// [`Clock::now_ms`] of the moment [`Clock::now_us`] read `us`.
pub(crate) fn ms_of(us: u64) -> u64 {
    us / 1000 + 1
}

/// Seconds since the Unix epoch, for log lines.
pub(crate) fn unix_time() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A duration in whole milliseconds, saturating (a configured "100000h" must not wrap a deadline).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
