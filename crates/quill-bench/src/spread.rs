//! Spreading a run over child processes when its connections need more descriptors than one
//! process may open (the per-process limit cannot always be raised).
//!
//! The parent re-executes its own binary with a hidden `--spread-child` flag and a share of the
//! idle connections, active clients and requests. The children open their idle connections, say
//! `ready` on stdout and wait for `go` on stdin, so every child's active phase starts together;
//! they say `done` after it and wait for `verify`, so every idle connection is held until the
//! last child finishes; then each prints its [`Tally`] as one JSON line and exits. Meanwhile each
//! child reports `progress IDLE DONE FAILED` every 250 ms; one thread per child reads its lines,
//! and the parent draws the sum as the progress bar of a one-process run.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::engine::{self, Counts, Phases, Tally};
use super::report::{thousands, Meter};
use super::watch::{Sampler, Watched};
use super::{Options, Stop};

/// Descriptors kept free in each process for its own files, event loops and pipes.
const RESERVE: u64 = 200;

/// How many processes the run needs: 1 when its connections fit in this one.
pub(crate) fn processes(opts: &Options) -> Result<usize, String> {
    let limit = quill_core::sys::raise_nofile_limit()
        .map_err(|e| format!("cannot read the open-file limit: {e}"))?;
    let capacity = limit.saturating_sub(RESERVE).max(1);
    let needed = (opts.idle + opts.active) as u64;
    let n = needed.div_ceil(capacity).max(1) as usize;
    if n > 1 && opts.active < n {
        return Err(format!(
            "--active {}: {needed} connections need {n} processes (at most {capacity} descriptors each), \
             so at least {n} active clients",
            opts.active
        ));
    }
    Ok(n)
}

/// `total / n`, the first `total % n` shares one more.
fn share(total: u64, c: usize, n: usize) -> u64 {
    total / n as u64 + u64::from((c as u64) < total % n as u64)
}

/// The arguments of child `c` of `n`.
fn child_args(opts: &Options, c: usize, n: usize) -> Vec<String> {
    let mut args = vec![
        "bench".to_string(),
        "--spread-child".into(),
        format!("--idle={}", share(opts.idle as u64, c, n)),
        format!("--active={}", share(opts.active as u64, c, n)),
        format!("--timeout={}ms", opts.timeout.as_millis()),
        format!("--threads={}", opts.threads),
    ];
    if opts.target.is_udp() {
        args.push(format!("--size={}", opts.size));
    }
    match opts.stop {
        Stop::Requests(r) => args.push(format!("--requests={}", share(r, c, n))),
        Stop::After(d) => args.push(format!("--duration={}ms", d.as_millis().max(1))),
    }
    if opts.keepalive {
        args.push("--keepalive".into());
    }
    if let Some(s) = &opts.sources_arg {
        args.push(format!("--sources={s}"));
    }
    args.push(opts.target.url.clone());
    args
}

/// A line from a child, or the end of its output.
enum Said {
    Line(usize, String),
    End(usize),
}

/// The children, their stdin, and one thread per child reading its stdout into one channel, so
/// the parent can wait on all of them at once while it draws their progress.
struct Kids {
    children: Vec<Child>,
    stdins: Vec<ChildStdin>,
    said: mpsc::Receiver<Said>,
    /// Each child's last progress report.
    counts: Vec<Counts>,
    /// Children whose output has ended.
    ended: Vec<bool>,
}

impl Kids {
    fn start(opts: &Options, n: usize) -> Result<Kids, String> {
        let exe =
            std::env::current_exe().map_err(|e| format!("cannot find the quill binary: {e}"))?;
        let (tx, said) = mpsc::channel();
        let mut kids = Kids {
            children: Vec::with_capacity(n),
            stdins: Vec::with_capacity(n),
            said,
            counts: vec![Counts::default(); n],
            ended: vec![false; n],
        };
        for c in 0..n {
            let mut child = Command::new(&exe)
                .args(child_args(opts, c, n))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| format!("cannot start a bench child: {e}"))?;
            let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
            kids.children.push(child);
            let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
                return Err("bench child without pipes".into());
            };
            kids.stdins.push(stdin);
            let tx = tx.clone();
            std::thread::Builder::new()
                .name(format!("bench-child-{c}"))
                .spawn(move || read_lines(c, stdout, &tx))
                .map_err(|e| format!("cannot start a reader thread: {e}"))?;
        }
        Ok(kids)
    }

    /// Waits until every child has said `word` (any line but progress, for ""), drawing their
    /// progress meanwhile. Returns what each said.
    fn expect(&mut self, word: &str, meter: &mut Meter) -> Result<Vec<String>, String> {
        let n = self.children.len();
        let stopped = |c: usize, kids: &Kids| {
            format!(
                "bench child {} stopped before saying '{word}'",
                kids.children[c].id()
            )
        };
        if let Some(c) = self.ended.iter().position(|&e| e) {
            return Err(stopped(c, self));
        }
        let mut lines: Vec<Option<String>> = vec![None; n];
        let mut left = n;
        while left > 0 {
            match self.said.recv_timeout(Duration::from_millis(50)) {
                Ok(Said::Line(c, line)) => {
                    if let Some(counts) = parse_progress(&line) {
                        self.counts[c] = counts;
                    } else if (word.is_empty() || line.trim() == word) && lines[c].is_none() {
                        lines[c] = Some(line);
                        left -= 1;
                    }
                }
                Ok(Said::End(c)) => {
                    self.ended[c] = true;
                    if lines[c].is_none() {
                        return Err(stopped(c, self));
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err("every bench child stopped".into());
                }
            }
            let mut total = Counts::default();
            for c in &self.counts {
                total.add(*c);
            }
            meter.tick(total);
        }
        Ok(lines.into_iter().flatten().collect())
    }

    fn say(&mut self, word: &str) -> Result<(), String> {
        for (stdin, child) in self.stdins.iter_mut().zip(&self.children) {
            writeln!(stdin, "{word}")
                .and_then(|_| stdin.flush())
                .map_err(|e| format!("bench child {}: {e}", child.id()))?;
        }
        Ok(())
    }
}

impl Drop for Kids {
    fn drop(&mut self) {
        // Kills each child by its PID if it is still running (an error path), then reaps it.
        for child in &mut self.children {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

/// A child's stdout, line by line, until it ends.
fn read_lines(c: usize, stdout: ChildStdout, tx: &mpsc::Sender<Said>) {
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
        if tx.send(Said::Line(c, std::mem::take(&mut line))).is_err() {
            return;
        }
    }
    let _ = tx.send(Said::End(c));
}

/// `progress IDLE DONE FAILED`, a child's counts.
fn parse_progress(line: &str) -> Option<Counts> {
    let mut f = line.strip_prefix("progress ")?.split_whitespace();
    let mut next = || f.next()?.parse().ok();
    Some(Counts {
        idle: next()?,
        done: next()?,
        failed: next()?,
    })
}

/// Runs the measurement over `n` child processes; returns the merged tally and what was watched.
/// Progress (the children's counts, summed) goes to `meter`.
pub(crate) fn run(
    opts: &Options,
    n: usize,
    sampler: &mut Sampler,
    meter: &mut Meter,
) -> Result<(Tally, Vec<Watched>), String> {
    eprintln!(
        "quill bench: spreading {} connections over {n} processes",
        thousands((opts.idle + opts.active) as u64)
    );
    let mut kids = Kids::start(opts, n)?;
    kids.expect("ready", meter)?;
    sampler.start();
    meter.start(Instant::now());
    kids.say("go")?;
    kids.expect("done", meter)?;
    meter.clear();
    let watched = sampler.stop();
    kids.say("verify")?;
    let mut total = Tally::default();
    for (line, child) in kids.expect("", meter)?.iter().zip(&kids.children) {
        let t: Tally = serde_json::from_str(line)
            .map_err(|e| format!("bench child {} sent a bad result: {e}", child.id()))?;
        total.merge(&t);
    }
    Ok((total, watched))
}

/// The child's side of the handshake, on its stdin and stdout, and its progress every 250 ms.
#[derive(Default)]
struct Handshake {
    last: Option<Instant>,
    counts: Counts,
}

impl Handshake {
    fn report(&mut self) {
        self.last = Some(Instant::now());
        let c = self.counts;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "progress {} {} {}", c.idle, c.done, c.failed);
        let _ = out.flush();
    }
}

impl Handshake {
    fn exchange(say: &str, wait: &str) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{say}");
        let _ = out.flush();
        let mut line = String::new();
        // EOF (the parent went away) also ends the wait; the run then simply goes on.
        while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
            if line.trim() == wait {
                return;
            }
            line.clear();
        }
    }
}

impl Phases for Handshake {
    fn idle_open(&mut self) {
        self.report();
        Handshake::exchange("ready", "go");
    }
    fn active_done(&mut self) {
        self.report();
        Handshake::exchange("done", "verify");
    }
    fn tick(&mut self, c: Counts) {
        self.counts = c;
        let due = self
            .last
            .is_none_or(|t| t.elapsed() >= Duration::from_millis(250));
        if due {
            self.report();
        }
    }
}

/// `quill bench --spread-child`: runs its share and prints its tally as one JSON line.
pub(crate) fn child_main(opts: &Options) -> ExitCode {
    let _ = quill_core::sys::raise_nofile_limit();
    match engine::run(opts, &mut Handshake::default()) {
        Ok(t) => match serde_json::to_string(&t) {
            Ok(json) => {
                println!("{json}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("quill: error: {e}");
                ExitCode::from(1)
            }
        },
        Err(e) => {
            eprintln!("quill: error: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up() {
        let total: u64 = (0..7).map(|c| share(82_000, c, 7)).sum();
        assert_eq!(total, 82_000);
    }
}
