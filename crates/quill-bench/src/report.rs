//! What `quill bench` prints: the summary of one measurement as the seed's table (same labels,
//! values from column 31), plus latency percentiles, failures by kind and watched processes; the
//! same summary as one JSON object; and the progress shown on stderr during the run.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::engine::{Counts, Failures, Tally};
use super::watch::Watched;
use super::{Options, Stop};

/// The result of one measurement.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Summary {
    pub target: String,
    pub idle: u64,
    pub active: u64,
    pub concurrency: u64,
    pub keepalive: bool,
    /// How many processes shared the connections (1 unless spread).
    pub processes: u64,
    /// Length of the active phase.
    pub seconds: f64,
    pub complete: u64,
    /// Failed requests plus idle connections that failed or were closed.
    pub failed: u64,
    pub total_bytes: u64,
    pub body_bytes: u64,
    /// Complete requests per second.
    pub requests_per_second: f64,
    /// Received KiB per second.
    pub transfer_kib_per_second: f64,
    /// Idle connections still open at the end.
    pub idle_held: u64,
    /// udp:// only (0 otherwise): datagrams the active flows sent, those lost (no reply within
    /// --timeout; `failures.timeout`), and replies that matched no request in flight.
    #[serde(default)]
    pub datagrams_sent: u64,
    #[serde(default)]
    pub lost: u64,
    #[serde(default)]
    pub late: u64,
    pub latency_us: Latency,
    pub failures: Failures,
    pub watch: Vec<WatchReport>,
    /// Whether the target was udp:// (the table then shows the datagram counts).
    #[serde(default)]
    pub udp: bool,
}

/// Latency percentiles over every finished request, in µs.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Latency {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub mean: f64,
}

/// A watched process's use during the active phase.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WatchReport {
    pub pid: u32,
    pub name: String,
    pub user_seconds: f64,
    pub system_seconds: f64,
    /// (user + system) CPU µs per complete request.
    pub cpu_us_per_request: f64,
    pub peak_rss_kib: u64,
    pub mean_rss_kib: u64,
    pub threads: u64,
}

impl Summary {
    pub fn new(opts: &Options, t: &Tally, watched: &[Watched], processes: u64) -> Summary {
        let secs = t.seconds.max(1e-9);
        let h = &t.latency;
        let latency = if h.is_empty() {
            Latency::default()
        } else {
            Latency {
                p50: h.value_at_quantile(0.5),
                p90: h.value_at_quantile(0.9),
                p99: h.value_at_quantile(0.99),
                p999: h.value_at_quantile(0.999),
                max: h.max(),
                mean: h.mean(),
            }
        };
        Summary {
            target: opts.target.url.clone(),
            idle: opts.idle as u64,
            active: opts.active as u64,
            concurrency: (opts.idle + opts.active) as u64,
            keepalive: opts.keepalive,
            processes,
            seconds: t.seconds,
            complete: t.complete,
            failed: t.failures.total(),
            total_bytes: t.bytes,
            body_bytes: t.body_bytes,
            requests_per_second: t.complete as f64 / secs,
            transfer_kib_per_second: t.bytes as f64 / 1024.0 / secs,
            idle_held: t.idle_held,
            datagrams_sent: t.sent,
            lost: if opts.target.is_udp() {
                t.failures.timeout
            } else {
                0
            },
            late: t.late,
            udp: opts.target.is_udp(),
            latency_us: latency,
            failures: t.failures,
            watch: watched
                .iter()
                .map(|w| watch_report(w, t.complete))
                .collect(),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// The seed's table, then latency, failures by kind and one line per watched process.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let mut row = |label: &str, value: String| {
            let _ = writeln!(out, "{label:<29} {value}");
        };
        row("Idle Connections:", self.idle.to_string());
        row("Active Connections:", self.active.to_string());
        row("Total Concurrency Level:", self.concurrency.to_string());
        row(
            "Average time taken for tests:",
            format!("{:.3} seconds", self.seconds),
        );
        row("Complete requests:", self.complete.to_string());
        row("Failed requests:", self.failed.to_string());
        row("Total transferred:", format!("{} bytes", self.total_bytes));
        row("HTML transferred:", format!("{} bytes", self.body_bytes));
        row(
            "Requests per second:",
            format!("{:.2} [#/sec] (mean)", self.requests_per_second),
        );
        row(
            "Transfer rate:",
            format!("{:.2} [Kbytes/sec] received", self.transfer_kib_per_second),
        );
        let l = &self.latency_us;
        for (name, us) in [
            ("p50", l.p50),
            ("p90", l.p90),
            ("p99", l.p99),
            ("p99.9", l.p999),
            ("max", l.max),
        ] {
            row(
                &format!("Latency {name}:"),
                format!("{:.3} ms", us as f64 / 1000.0),
            );
        }
        row("Failures by kind:", failure_list(&self.failures));
        if self.udp {
            row("Datagrams sent:", self.datagrams_sent.to_string());
            let share = self.lost as f64 * 100.0 / self.datagrams_sent.max(1) as f64;
            row("Lost datagrams:", format!("{} ({share:.3}%)", self.lost));
            row("Late replies:", self.late.to_string());
        }
        for w in &self.watch {
            row(
                &format!("Watch {} ({}):", w.pid, w.name),
                format!(
                    "user {:.2} s, system {:.2} s, {:.1} µs CPU/request, peak RSS {} KiB, mean RSS {} KiB",
                    w.user_seconds, w.system_seconds, w.cpu_us_per_request, w.peak_rss_kib, w.mean_rss_kib
                ),
            );
        }
        out
    }
}

fn failure_list(f: &Failures) -> String {
    let parts: Vec<String> = f
        .by_name()
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

fn watch_report(w: &Watched, complete: u64) -> WatchReport {
    let cpu = w.user_seconds + w.system_seconds;
    WatchReport {
        pid: w.pid,
        name: w.name.clone(),
        user_seconds: w.user_seconds,
        system_seconds: w.system_seconds,
        cpu_us_per_request: if complete == 0 {
            0.0
        } else {
            cpu * 1e6 / complete as f64
        },
        peak_rss_kib: w.peak_rss_kib,
        mean_rss_kib: w.mean_rss_kib,
        threads: w.threads,
    }
}

// === Progress ===

/// Width of the progress bar, in characters between its brackets.
const BAR: usize = 20;

/// Progress on stderr. On a terminal: a bar with counts, redrawn in place at most 4 times a
/// second and cleared at the end. Otherwise a plain line every second (logs and pipes get no
/// carriage returns).
pub(crate) struct Meter {
    show: bool,
    tty: bool,
    idle_total: u64,
    stop: Stop,
    start: Option<Instant>,
    last: Option<Instant>,
    drawn: bool,
    /// Cleared for good: the run is over.
    over: bool,
}

impl Meter {
    pub(crate) fn new(show: bool, idle_total: u64, stop: Stop) -> Meter {
        Meter {
            show,
            tty: super::stderr_is_terminal(),
            idle_total,
            stop,
            start: None,
            last: None,
            drawn: false,
            over: false,
        }
    }

    pub(crate) fn start(&mut self, at: Instant) {
        self.start = Some(at);
        self.last = Some(at);
    }

    /// Draws the counts: the idle phase until [`Meter::start`], then the active phase.
    pub(crate) fn tick(&mut self, c: Counts) {
        if self.start.is_some() {
            self.active(c.done, c.failed);
        } else {
            self.idle(c.idle);
        }
    }

    /// While the idle connections open.
    fn idle(&mut self, open: u64) {
        if self.idle_total == 0 {
            return;
        }
        let total = self.idle_total;
        let frac = open as f64 / total as f64;
        self.emit(frac, || {
            format!(
                "idle connections open: {}/{}",
                thousands(open),
                thousands(total)
            )
        });
    }

    /// During the active phase.
    fn active(&mut self, done: u64, failed: u64) {
        let secs = self.start.map_or(0.0, |s| s.elapsed().as_secs_f64());
        let rate = done as f64 / secs.max(1e-3);
        let (frac, goal) = match self.stop {
            Stop::Requests(r) => (
                (done + failed) as f64 / r.max(1) as f64,
                format!("{}/{} req", thousands(done + failed), thousands(r)),
            ),
            Stop::After(d) => (
                secs / d.as_secs_f64().max(1e-3),
                format!(
                    "{secs:.1}/{:.1} s, {} req",
                    d.as_secs_f64(),
                    thousands(done)
                ),
            ),
        };
        self.emit(frac, || {
            format!(
                "{goal}, {} req/s, {} failed",
                thousands(rate as u64),
                thousands(failed)
            )
        });
    }

    fn emit(&mut self, frac: f64, text: impl FnOnce() -> String) {
        if !self.show || self.over {
            return;
        }
        let every = if self.tty {
            Duration::from_millis(250)
        } else {
            Duration::from_secs(1)
        };
        let now = Instant::now();
        let last = *self.last.get_or_insert(now);
        if now.duration_since(last) < every {
            return;
        }
        self.last = Some(now);
        let mut err = std::io::stderr().lock();
        if self.tty {
            // One line, cut to the terminal's width: a wrapped line could not be redrawn.
            let mut line = format!("{} {}", bar(frac), text());
            // A terminal that does not know its size says 0 columns.
            let width = match rustix::termios::tcgetwinsize(std::io::stderr()) {
                Ok(w) if w.ws_col > 0 => usize::from(w.ws_col).max(20),
                _ => 80,
            };
            line.truncate(width - 1);
            let _ = write!(err, "\r{line}\x1b[K");
            self.drawn = true;
        } else {
            let _ = writeln!(err, "quill bench: {}", text());
        }
        let _ = err.flush();
    }

    /// Removes the progress line from the terminal; nothing is drawn after it.
    pub(crate) fn clear(&mut self) {
        self.over = true;
        if self.drawn {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
            self.drawn = false;
        }
    }
}

/// `[#########---------------]  37%`: `frac` of the way, clamped to 0..=1.
fn bar(frac: f64) -> String {
    let frac = if frac.is_finite() {
        frac.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let full = (frac * BAR as f64).round() as usize;
    format!(
        "[{}{}] {:>3}%",
        "#".repeat(full),
        "-".repeat(BAR - full),
        (frac * 100.0).floor() as u32
    )
}

/// 82000 → "82,000".
pub(crate) fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(82_000), "82,000");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
