//! Several measurements in one run: every `--target` at every `--sweep` level, interleaved (at each
//! level the targets take turns, the order rotating from level to level, so a slow drift of the
//! machine does not favour one of them), with one summary line per measurement, the whole set as
//! JSON, and the shootout chart (`--plot`).

use std::sync::Arc;

use serde::Serialize;

use super::plot::{self, Series};
use super::spread::thousands;
use super::{measure, stderr_is_terminal, BenchArgs, Options, Stop, Summary, Target};

/// A failure: the exit status (2 for arguments, 1 for the run) and the message.
pub struct Failure(pub u8, pub String);

/// One measurement of the set.
#[derive(Serialize)]
struct Row {
    target: String,
    url: String,
    active: u32,
    summary: Summary,
}

#[derive(Serialize)]
struct Report<'a> {
    levels: &'a [u32],
    idle: usize,
    keepalive: bool,
    results: &'a [Row],
}

/// The targets by name: the `--target`s, or the positional TARGET as "target".
fn targets(args: &BenchArgs) -> Result<Vec<(String, Target)>, Failure> {
    let usage = |m: String| Failure(2, m);
    match (&args.target, args.targets.is_empty()) {
        (Some(_), false) => Err(usage(
            "give either TARGET or --target NAME=URL, not both".into(),
        )),
        (Some(t), true) => Ok(vec![("target".into(), t.clone())]),
        (None, _) => {
            for (i, (name, _)) in args.targets.iter().enumerate() {
                if args.targets[..i].iter().any(|(n, _)| n == name) {
                    return Err(usage(format!("--target {name}: the name is used twice")));
                }
            }
            Ok(args.targets.clone())
        }
    }
}

/// Runs the set, prints it, and draws the chart if asked.
pub fn run(args: &BenchArgs, base: &Options) -> Result<(), Failure> {
    let targets = targets(args)?;
    let levels: Vec<u32> = match &args.sweep {
        Some(l) => l.0.clone(),
        None => vec![u32::try_from(base.active).unwrap_or(u32::MAX)],
    };
    let total = levels.len() * targets.len();
    let mut rows: Vec<Row> = Vec::with_capacity(total);
    let terminal = stderr_is_terminal();
    for (li, &level) in levels.iter().enumerate() {
        for k in 0..targets.len() {
            let (name, target) = &targets[(li + k) % targets.len()];
            let mut opts = base.clone();
            opts.target = Arc::new(target.clone());
            opts.active = level as usize;
            if args.requests.is_none() && args.duration.is_none() {
                opts.stop = Stop::Requests(u64::from(level));
            }
            let summary =
                measure(&opts, terminal).map_err(|e| Failure(1, format!("{name}: {e}")))?;
            eprintln!(
                "[{}/{total}] {name} at {level} active{}: {:.0} req/s, p99 {:.2} ms, {} failed",
                rows.len() + 1,
                if base.idle > 0 {
                    format!(" + {} idle", base.idle)
                } else {
                    String::new()
                },
                summary.requests_per_second,
                summary.latency_us.p99 as f64 / 1000.0,
                summary.failed
            );
            rows.push(Row {
                target: name.clone(),
                url: target.url.clone(),
                active: level,
                summary,
            });
        }
    }
    // Report in a stable order: by target as given, then by level.
    let order = |r: &Row| {
        targets
            .iter()
            .position(|(n, _)| *n == r.target)
            .unwrap_or(0)
    };
    rows.sort_by_key(|r| (order(r), r.active));
    if args.json {
        let report = Report {
            levels: &levels,
            idle: base.idle,
            keepalive: base.keepalive,
            results: &rows,
        };
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| Failure(1, e.to_string()))?
        );
    } else {
        print!("{}", table(&rows));
    }
    if let Some(path) = &args.plot {
        let series: Vec<Series> = targets
            .iter()
            .map(|(name, _)| Series {
                name: name.clone(),
                points: rows
                    .iter()
                    .filter(|r| r.target == *name)
                    .map(|r| (r.active, r.summary.requests_per_second))
                    .collect(),
            })
            .collect();
        let svg = plot::render_svg(
            &title(base),
            "concurrent active connections",
            "requests per second",
            &series,
        )
        .map_err(|e| Failure(1, format!("--plot: {e}")))?;
        std::fs::write(path, svg)
            .map_err(|e| Failure(1, format!("--plot {}: {e}", path.display())))?;
        eprintln!("chart written to {}", path.display());
    }
    Ok(())
}

fn title(base: &Options) -> String {
    let mode = if base.keepalive {
        "keep-alive"
    } else {
        "a new connection per request"
    };
    if base.idle > 0 {
        format!(
            "Requests per second by concurrency ({} idle connections held, {mode})",
            thousands(base.idle as u64)
        )
    } else {
        format!("Requests per second by concurrency ({mode})")
    }
}

/// One line per measurement, aligned.
fn table(rows: &[Row]) -> String {
    let width = rows
        .iter()
        .map(|r| r.target.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let mut out = format!(
        "{:<width$}  {:>7}  {:>7}  {:>12}  {:>9}  {:>9}  {:>9}  {:>8}  {:>8}\n",
        "target",
        "active",
        "idle",
        "requests/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "complete",
        "failed"
    );
    for r in rows {
        let s = &r.summary;
        out += &format!(
            "{:<width$}  {:>7}  {:>7}  {:>12}  {:>9.2}  {:>9.2}  {:>9.2}  {:>8}  {:>8}\n",
            r.target,
            r.active,
            s.idle,
            thousands(s.requests_per_second.round() as u64),
            s.latency_us.p50 as f64 / 1000.0,
            s.latency_us.p99 as f64 / 1000.0,
            s.latency_us.max as f64 / 1000.0,
            s.complete,
            s.failed
        );
    }
    out
}
