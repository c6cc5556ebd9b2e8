//! The bounds every number of the model is held to (`MAX_*`); the checks that name a setting,
//! its value and its bounds when one is out of range are `settings`' (re-exported here).

use std::ops::RangeInclusive;
use std::time::Duration;

use super::ConfigError;

// === Bounds ===
//
// Every number Quill takes has a bound, checked where it is parsed (command line, TOML, control
// language) and again by `Config::validate`, so no input can make Quill allocate without limit,
// wait for ever or wrap a counter.

pub(crate) use crate::balancer::MAX_CLIENTS;
pub(crate) use quill_core::duration::{format_duration, parse_duration, MAX_DURATION};
/// The largest health-check `rise` and `fall`.
pub(crate) const MAX_RISE_FALL: u32 = 1_000;
pub(crate) use crate::addr::{MAX_SESSIONS, MAX_WEIGHT};

pub(crate) use crate::config::settings::{
    check_duration, in_range, MAX_ACCEPT_BATCH, MAX_BACKLOG, MAX_WORKERS,
};

/// `dsr_wait`'s bounds, in ms: the kernel takes whole milliseconds, and past a second a lone
/// frame would wait longer than a client's TCP retransmission.
pub(crate) const DSR_WAIT_MS: RangeInclusive<u64> = 1..=1000;

/// The most `max_flows` one listener may ask for.
pub(crate) const MAX_FLOWS: u32 = 16_777_216;

/// The most routes one listener may have.
pub(crate) const MAX_ROUTES: usize = 1024;
/// The longest TLS `handshake_timeout`.
pub(crate) const MAX_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(300);
/// The most TLS `max_handshakes` (per worker).
pub(crate) const MAX_HANDSHAKES: u32 = 65_536;
/// The most certificates one listener may have (a list, or an `sni_path` directory).
pub(crate) const MAX_CERTS: usize = 10_000;
/// The most named pools.
pub(crate) const MAX_POOLS: usize = 1024;
/// The longest body a `respond` route may hold (its whole answer fits one 16 KiB buffer).
pub(crate) const MAX_RESPOND_BODY: usize = 8 * 1024;
/// The most requests a `rate` may allow per period, and the largest `burst`.
pub(crate) const MAX_RATE: u32 = 1_000_000;

pub(crate) fn nonzero(d: Duration, what: &str) -> Result<Duration, ConfigError> {
    if d.is_zero() {
        Err(ConfigError::usage(format!("{what}: must be more than 0")))
    } else {
        Ok(d)
    }
}
