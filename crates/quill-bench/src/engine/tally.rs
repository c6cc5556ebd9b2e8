//! What an engine counts: failures by [`Kind`], and the [`Tally`] of a run (counters and a latency
//! histogram) that threads, spread children and the report merge and serialize.

use std::io;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Largest latency the histogram holds (one hour, in µs); longer ones are clamped.
pub(super) const MAX_LATENCY_US: u64 = 3_600_000_000;

/// Why a request (or an idle connection) failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Refused,
    Reset,
    Timeout,
    BadResponse,
    IdleClosed,
    Other,
}

impl Kind {
    /// The kind of a socket error.
    pub(crate) fn of(e: &io::Error) -> Kind {
        match e.kind() {
            io::ErrorKind::ConnectionRefused => Kind::Refused,
            io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe => Kind::Reset,
            io::ErrorKind::TimedOut => Kind::Timeout,
            _ => Kind::Other,
        }
    }
}

/// Failures by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failures {
    pub refused: u64,
    pub reset: u64,
    pub timeout: u64,
    pub bad_response: u64,
    pub idle_closed: u64,
    pub other: u64,
}

impl Failures {
    pub fn add(&mut self, kind: Kind) {
        *match kind {
            Kind::Refused => &mut self.refused,
            Kind::Reset => &mut self.reset,
            Kind::Timeout => &mut self.timeout,
            Kind::BadResponse => &mut self.bad_response,
            Kind::IdleClosed => &mut self.idle_closed,
            Kind::Other => &mut self.other,
        } += 1;
    }

    pub fn total(&self) -> u64 {
        self.refused + self.reset + self.timeout + self.bad_response + self.idle_closed + self.other
    }

    /// (name, count) for every kind, in a fixed order.
    pub fn by_name(&self) -> [(&'static str, u64); 6] {
        [
            ("refused", self.refused),
            ("reset", self.reset),
            ("timeout", self.timeout),
            ("bad_response", self.bad_response),
            ("idle_closed", self.idle_closed),
            ("other", self.other),
        ]
    }

    fn merge(&mut self, o: &Failures) {
        self.refused += o.refused;
        self.reset += o.reset;
        self.timeout += o.timeout;
        self.bad_response += o.bad_response;
        self.idle_closed += o.idle_closed;
        self.other += o.other;
    }
}

/// What one engine (thread, process, or all of them merged) measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Tally {
    /// Requests answered in full with a 2xx status (a whole line in tcp mode).
    pub complete: u64,
    pub failures: Failures,
    /// Bytes received on active connections (heads and bodies).
    pub bytes: u64,
    /// Body bytes among them (chunk framing excluded); a whole line in tcp mode.
    pub body_bytes: u64,
    /// Idle connections still open when they were checked at the end.
    pub idle_held: u64,
    /// udp:// only: datagrams sent by the active flows (each one is answered, lost, refused or
    /// bad, or was still in flight when a `--requests` run ended).
    #[serde(default)]
    pub sent: u64,
    /// udp:// only: replies that matched no request in flight (late: after their request's
    /// `--timeout`, already counted lost; or duplicates).
    #[serde(default)]
    pub late: u64,
    /// Seconds from the start of the active phase to its end.
    pub seconds: f64,
    /// Latency of every finished request (successful or not), in µs.
    #[serde(with = "pairs")]
    pub latency: Histogram<u64>,
}

impl Default for Tally {
    fn default() -> Tally {
        Tally {
            complete: 0,
            failures: Failures::default(),
            bytes: 0,
            body_bytes: 0,
            idle_held: 0,
            sent: 0,
            late: 0,
            seconds: 0.0,
            latency: new_histogram(),
        }
    }
}

impl Tally {
    /// Adds another tally's counters and latencies; the run time is the longer of the two.
    pub fn merge(&mut self, o: &Tally) {
        self.complete += o.complete;
        self.failures.merge(&o.failures);
        self.bytes += o.bytes;
        self.body_bytes += o.body_bytes;
        self.idle_held += o.idle_held;
        self.sent += o.sent;
        self.late += o.late;
        self.seconds = self.seconds.max(o.seconds);
        // Both histograms have the same fixed bounds, so adding cannot fail.
        let _ = self.latency.add(&o.latency);
    }
}

#[expect(
    clippy::expect_used,
    reason = "the bounds are constants, valid by construction"
)]
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("constant histogram bounds are valid")
}

/// A histogram as JSON: the list of recorded (value, count) pairs, which is all a merge needs.
mod pairs {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(h: &Histogram<u64>, s: S) -> Result<S::Ok, S::Error> {
        let v: Vec<(u64, u64)> = h
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_since_last_iteration()))
            .collect();
        v.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Histogram<u64>, D::Error> {
        let v: Vec<(u64, u64)> = Vec::deserialize(d)?;
        let mut h = new_histogram();
        for (value, count) in v {
            h.saturating_record_n(value.min(MAX_LATENCY_US), count);
        }
        Ok(h)
    }
}
