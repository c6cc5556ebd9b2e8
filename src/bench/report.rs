//! What `quill bench` prints: the summary of one measurement as the seed's table (same labels,
//! values from column 31), plus latency percentiles, failures by kind and watched processes; the
//! same summary as one JSON object; and the progress shown on stderr during the run.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::engine::{Failures, Progress, Tally};
use super::watch::Watched;
use super::Options;

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
    pub latency_us: Latency,
    pub failures: Failures,
    pub watch: Vec<WatchReport>,
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

/// Progress on stderr: on a terminal one line redrawn at most 4 times a second and cleared at
/// the end; otherwise a plain line every second (logs and pipes get no carriage returns).
pub struct Meter {
    show: bool,
    tty: bool,
    idle_total: u64,
    start: Option<Instant>,
    last: Option<Instant>,
    drawn: bool,
}

impl Meter {
    pub fn new(show: bool, idle_total: u64) -> Meter {
        Meter {
            show,
            tty: super::stderr_is_terminal(),
            idle_total,
            start: None,
            last: None,
            drawn: false,
        }
    }

    pub fn start(&mut self, at: Instant) {
        self.start = Some(at);
        self.last = Some(at);
    }

    /// While the idle connections open.
    pub fn idle(&mut self, progress: &[Progress]) {
        if self.idle_total == 0 {
            return;
        }
        let open: u64 = progress
            .iter()
            .map(|p| p.idle.load(Ordering::Relaxed))
            .sum();
        let total = self.idle_total;
        self.emit(|| format!("idle connections open: {open}/{total}"));
    }

    /// During the active phase.
    pub fn active(&mut self, progress: &[Progress]) {
        let done: u64 = progress
            .iter()
            .map(|p| p.done.load(Ordering::Relaxed))
            .sum();
        let failed: u64 = progress
            .iter()
            .map(|p| p.failed.load(Ordering::Relaxed))
            .sum();
        let secs = self.start.map_or(0.0, |s| s.elapsed().as_secs_f64());
        let rate = done as f64 / secs.max(1e-3);
        self.emit(|| format!("{secs:.1} s: {done} requests, {failed} failed, {rate:.0} req/s"));
    }

    fn emit(&mut self, text: impl FnOnce() -> String) {
        if !self.show {
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
            let _ = write!(err, "\r{}\x1b[K", text());
            self.drawn = true;
        } else {
            let _ = writeln!(err, "quill bench: {}", text());
        }
        let _ = err.flush();
    }

    /// Removes the progress line from the terminal.
    pub fn clear(&mut self) {
        if self.drawn {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
            self.drawn = false;
        }
    }
}
