//! Spreading a run over child processes when its connections need more descriptors than one
//! process may open (the per-process limit cannot always be raised).
//!
//! The parent re-executes its own binary with a hidden `--spread-child` flag and a share of the
//! idle connections, active clients and requests. The children open their idle connections, say
//! `ready` on stdout and wait for `go` on stdin, so every child's active phase starts together;
//! they say `done` after it and wait for `verify`, so every idle connection is held until the
//! last child finishes; then each prints its [`Tally`] as one JSON line and exits.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};

use super::engine::{self, Phases, Tally};
use super::watch::{Sampler, Watched};
use super::{Options, Stop};

/// Descriptors kept free in each process for its own files, event loops and pipes.
const RESERVE: u64 = 200;

/// How many processes the run needs: 1 when its connections fit in this one.
pub fn processes(opts: &Options) -> Result<usize, String> {
    let limit = crate::sys::raise_nofile_limit()
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

struct Kid {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Kid {
    fn expect(&mut self, word: &str) -> Result<String, String> {
        let mut line = String::new();
        match self.stdout.read_line(&mut line) {
            Ok(n) if n > 0 && (word.is_empty() || line.trim() == word) => Ok(line),
            _ => Err(format!(
                "bench child {} stopped before saying '{word}'",
                self.child.id()
            )),
        }
    }

    fn say(&mut self, word: &str) -> Result<(), String> {
        writeln!(self.stdin, "{word}")
            .and_then(|_| self.stdin.flush())
            .map_err(|e| format!("bench child {}: {e}", self.child.id()))
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        // Kills this child by its PID if it is still running (an error path), then reaps it.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Runs the measurement over `n` child processes; returns the merged tally and what was watched.
pub fn run(
    opts: &Options,
    n: usize,
    sampler: &mut Sampler,
) -> Result<(Tally, Vec<Watched>), String> {
    eprintln!(
        "quill bench: spreading {} connections over {n} processes",
        thousands((opts.idle + opts.active) as u64)
    );
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the quill binary: {e}"))?;
    let mut kids = Vec::with_capacity(n);
    for c in 0..n {
        let mut child = Command::new(&exe)
            .args(child_args(opts, c, n))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start a bench child: {e}"))?;
        let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
        let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
            return Err("bench child without pipes".into());
        };
        kids.push(Kid {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        });
    }
    for k in kids.iter_mut() {
        k.expect("ready")?;
    }
    sampler.start();
    for k in kids.iter_mut() {
        k.say("go")?;
    }
    for k in kids.iter_mut() {
        k.expect("done")?;
    }
    let watched = sampler.stop();
    for k in kids.iter_mut() {
        k.say("verify")?;
    }
    let mut total = Tally::default();
    for k in kids.iter_mut() {
        let line = k.expect("")?;
        let t: Tally = serde_json::from_str(&line)
            .map_err(|e| format!("bench child {} sent a bad result: {e}", k.child.id()))?;
        total.merge(&t);
    }
    Ok((total, watched))
}

/// The child's side of the handshake, on its stdin and stdout.
struct Handshake;

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
        Handshake::exchange("ready", "go");
    }
    fn active_done(&mut self) {
        Handshake::exchange("done", "verify");
    }
}

/// `quill bench --spread-child`: runs its share and prints its tally as one JSON line.
pub fn child_main(opts: &Options) -> ExitCode {
    let _ = crate::sys::raise_nofile_limit();
    match engine::run(opts, &mut Handshake, false) {
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

/// 82000 → "82,000".
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
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

    #[test]
    fn shares_add_up() {
        let total: u64 = (0..7).map(|c| share(82_000, c, 7)).sum();
        assert_eq!(total, 82_000);
    }
}
