//! `--watch PID`: a sampler thread that reads each watched process's CPU times and resident memory
//! from /proc every 100 ms during the active phase.
//!
//! CPU comes from /proc/PID/stat (utime + stime, in clock ticks), which already sums every thread
//! of the process, including threads that exited during the run (the per-thread files under
//! /proc/PID/task would miss those); the thread count is kept for the report. Memory is VmRSS
//! from /proc/PID/status.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

const INTERVAL: Duration = Duration::from_millis(100);

/// What was seen of one process during the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Watched {
    pub pid: u32,
    /// The process name (`comm`).
    pub name: String,
    pub user_seconds: f64,
    pub system_seconds: f64,
    pub peak_rss_kib: u64,
    pub mean_rss_kib: u64,
    pub threads: u64,
    pub samples: u64,
}

/// One reading of /proc for a process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reading {
    pub user_ticks: u64,
    pub system_ticks: u64,
    pub threads: u64,
    pub rss_kib: u64,
}

/// Reads /proc/PID/stat and /proc/PID/status; None when the process is gone.
pub(crate) fn read(pid: u32) -> Option<Reading> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let mut r = parse_stat(&stat)?;
    r.rss_kib = parse_rss(&status).unwrap_or(0);
    Some(r)
}

/// utime, stime and num_threads from a stat line. The name field may hold spaces and ')', so
/// fields are counted from the last ')'.
pub(crate) fn parse_stat(stat: &str) -> Option<Reading> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: field 3 (state) is f[0], so field N is f[N - 3].
    Some(Reading {
        user_ticks: f.get(11)?.parse().ok()?,
        system_ticks: f.get(12)?.parse().ok()?,
        threads: f.get(17)?.parse().ok()?,
        rss_kib: 0,
    })
}

fn parse_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Samples the watched processes between `start` and `stop`.
pub(crate) struct Sampler {
    pids: Vec<u32>,
    running: Arc<AtomicBool>,
    state: Arc<Mutex<Vec<Track>>>,
    thread: Option<JoinHandle<()>>,
}

/// Running figures for one process.
#[derive(Clone, Copy, Default)]
struct Track {
    first: Option<Reading>,
    last: Option<Reading>,
    peak_rss: u64,
    rss_sum: u64,
    samples: u64,
    threads: u64,
}

impl Track {
    fn add(&mut self, r: Reading) {
        self.first.get_or_insert(r);
        self.last = Some(r);
        self.peak_rss = self.peak_rss.max(r.rss_kib);
        self.rss_sum += r.rss_kib;
        self.samples += 1;
        self.threads = self.threads.max(r.threads);
    }
}

impl Sampler {
    /// Checks that every process exists; the error names the first one that does not.
    pub(crate) fn new(pids: &[u32]) -> Result<Sampler, String> {
        for &pid in pids {
            if read(pid).is_none() {
                return Err(format!("--watch {pid}: no such process"));
            }
        }
        Ok(Sampler {
            pids: pids.to_vec(),
            running: Arc::new(AtomicBool::new(false)),
            state: Arc::new(Mutex::new(vec![Track::default(); pids.len()])),
            thread: None,
        })
    }

    /// Takes the first reading now and keeps sampling on a thread until `stop`.
    pub(crate) fn start(&mut self) {
        if self.pids.is_empty() {
            return;
        }
        self.sample();
        self.running.store(true, Ordering::Release);
        let (pids, running, state) = (self.pids.clone(), self.running.clone(), self.state.clone());
        self.thread = std::thread::Builder::new()
            .name("bench-watch".into())
            .spawn(move || {
                while running.load(Ordering::Acquire) {
                    std::thread::sleep(INTERVAL);
                    sample_into(&pids, &state);
                }
            })
            .ok();
    }

    fn sample(&self) {
        sample_into(&self.pids, &self.state);
    }

    /// Takes the last reading and returns what each process used between start and stop.
    pub(crate) fn stop(&mut self) -> Vec<Watched> {
        if self.pids.is_empty() {
            return Vec::new();
        }
        self.running.store(false, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.sample();
        let ticks = quill_core::sys::clock_ticks_per_second() as f64;
        let tracks = self.state.lock().map(|t| t.clone()).unwrap_or_default();
        self.pids
            .iter()
            .zip(tracks)
            .map(|(&pid, t)| summarize(pid, &t, ticks))
            .collect()
    }
}

fn sample_into(pids: &[u32], state: &Mutex<Vec<Track>>) {
    let readings: Vec<Option<Reading>> = pids.iter().map(|&p| read(p)).collect();
    if let Ok(mut tracks) = state.lock() {
        for (track, r) in tracks.iter_mut().zip(readings) {
            if let Some(r) = r {
                track.add(r);
            }
        }
    }
}

fn summarize(pid: u32, t: &Track, ticks: f64) -> Watched {
    let (first, last) = (t.first.unwrap_or_default(), t.last.unwrap_or_default());
    Watched {
        pid,
        name: name(pid),
        user_seconds: last.user_ticks.saturating_sub(first.user_ticks) as f64 / ticks,
        system_seconds: last.system_ticks.saturating_sub(first.system_ticks) as f64 / ticks,
        peak_rss_kib: t.peak_rss,
        mean_rss_kib: t.rss_sum.checked_div(t.samples).unwrap_or(0),
        threads: t.threads,
        samples: t.samples,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_last_paren() {
        let line = "42 (a) b) c) R 1 2 3 4 5 6 7 8 9 10 250 31 0 0 20 0 7 0 100 0 0";
        let r = parse_stat(line).unwrap();
        assert_eq!((r.user_ticks, r.system_ticks, r.threads), (250, 31, 7));
    }

    #[test]
    fn rss_is_read_from_status() {
        assert_eq!(parse_rss("Name:\tx\nVmRSS:\t   1234 kB\n"), Some(1234));
    }

    #[test]
    fn own_process_reads() {
        let r = read(std::process::id()).unwrap();
        assert!(r.rss_kib > 0 && r.threads >= 1);
    }
}
