//! Several measurements in one run: every `--target` at every `--sweep` level, interleaved (at each
//! level the targets take turns, the order rotating from level to level, so a slow drift of the
//! machine does not favour one of them), with one summary line per measurement, the whole set as
//! JSON, and the shootout chart (`--plot`). `--rounds N` repeats the whole set, the order rotating
//! one step further each round; the table and the chart then show each target and level's median.

use std::sync::Arc;

use serde::Serialize;

use super::plot::{self, Series};
use super::report::thousands;
use super::{measure, stderr_is_terminal, BenchArgs, Options, Stop, Summary, Target};

/// A failure: the exit status (2 for arguments, 1 for the run) and the message.
pub(crate) struct Failure(pub u8, pub String);

/// One measurement of the set.
#[derive(Serialize)]
struct Row {
    target: String,
    url: String,
    active: u32,
    /// From 1.
    round: u32,
    summary: Summary,
}

/// A target at a level over every round.
#[derive(Serialize)]
struct Median {
    target: String,
    url: String,
    active: u32,
    rounds: u32,
    /// Median, lowest and highest complete requests per second.
    requests_per_second: f64,
    requests_per_second_min: f64,
    requests_per_second_max: f64,
    /// Medians of the rounds' latency percentiles, and the highest latency of any round (µs).
    p50_us: u64,
    p99_us: u64,
    max_us: u64,
    /// Over every round.
    complete: u64,
    failed: u64,
    /// The fewest idle connections still open at the end of a round.
    idle_held: u64,
}

#[derive(Serialize)]
struct Report<'a> {
    levels: &'a [u32],
    idle: usize,
    keepalive: bool,
    rounds: u32,
    /// Every measurement, by target, level and round.
    results: &'a [Row],
    /// One per target and level.
    medians: &'a [Median],
}

/// The median of `v` (the mean of the middle two for an even count); 0 when empty.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Folds the rounds of each target and level (`rows` sorted by target, then level).
fn medians(rows: &[Row]) -> Vec<Median> {
    rows.chunk_by(|a, b| a.target == b.target && a.active == b.active)
        .map(|g| {
            let of =
                |f: &dyn Fn(&Summary) -> f64| median(g.iter().map(|r| f(&r.summary)).collect());
            let rps: Vec<f64> = g.iter().map(|r| r.summary.requests_per_second).collect();
            Median {
                target: g[0].target.clone(),
                url: g[0].url.clone(),
                active: g[0].active,
                rounds: g.len() as u32,
                requests_per_second: median(rps.clone()),
                requests_per_second_min: rps.iter().copied().fold(f64::INFINITY, f64::min),
                requests_per_second_max: rps.iter().copied().fold(0.0, f64::max),
                p50_us: of(&|s| s.latency_us.p50 as f64).round() as u64,
                p99_us: of(&|s| s.latency_us.p99 as f64).round() as u64,
                max_us: g
                    .iter()
                    .map(|r| r.summary.latency_us.max)
                    .max()
                    .unwrap_or(0),
                complete: g.iter().map(|r| r.summary.complete).sum(),
                failed: g.iter().map(|r| r.summary.failed).sum(),
                idle_held: g.iter().map(|r| r.summary.idle_held).min().unwrap_or(0),
            }
        })
        .collect()
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
pub(crate) fn run(args: &BenchArgs, base: &Options) -> Result<(), Failure> {
    let targets = targets(args)?;
    let levels: Vec<u32> = match &args.sweep {
        Some(l) => l.0.clone(),
        None => vec![u32::try_from(base.active).unwrap_or(u32::MAX)],
    };
    let rounds = args.rounds.max(1);
    let total = levels.len() * targets.len() * rounds as usize;
    let mut rows: Vec<Row> = Vec::with_capacity(total);
    let terminal = stderr_is_terminal();
    for round in 0..rounds as usize {
        for (li, &level) in levels.iter().enumerate() {
            for k in 0..targets.len() {
                let (name, target) = &targets[(li + k + round) % targets.len()];
                let row = measure_one(base, args, name, target, level, round as u32 + 1, terminal)?;
                eprintln!(
                    "[{}/{total}] {}",
                    rows.len() + 1,
                    progress_line(&row, base.idle, rounds)
                );
                rows.push(row);
            }
        }
    }
    // Report in a stable order: by target as given, then by level, then by round.
    let order = |r: &Row| {
        targets
            .iter()
            .position(|(n, _)| *n == r.target)
            .unwrap_or(0)
    };
    rows.sort_by_key(|r| (order(r), r.active, r.round));
    let medians = medians(&rows);
    if args.json {
        let report = Report {
            levels: &levels,
            idle: base.idle,
            keepalive: base.keepalive,
            rounds,
            results: &rows,
            medians: &medians,
        };
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| Failure(1, e.to_string()))?
        );
    } else if rounds == 1 {
        print!("{}", table(&rows));
    } else {
        print!("{}", median_table(&medians));
    }
    if let Some(path) = &args.plot {
        let series: Vec<Series> = targets
            .iter()
            .map(|(name, _)| Series {
                name: name.clone(),
                points: medians
                    .iter()
                    .filter(|m| m.target == *name)
                    .map(|m| (m.active, m.requests_per_second))
                    .collect(),
            })
            .collect();
        let svg = plot::render_svg(
            &title(base, rounds),
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

/// One measurement: `target` at `level` active clients.
fn measure_one(
    base: &Options,
    args: &BenchArgs,
    name: &str,
    target: &Target,
    level: u32,
    round: u32,
    terminal: bool,
) -> Result<Row, Failure> {
    let mut opts = base.clone();
    opts.target = Arc::new(target.clone());
    opts.active = level as usize;
    if args.requests.is_none() && args.duration.is_none() {
        opts.stop = Stop::Requests(u64::from(level));
    }
    let summary = measure(&opts, terminal).map_err(|e| Failure(1, format!("{name}: {e}")))?;
    Ok(Row {
        target: name.to_string(),
        url: target.url.clone(),
        active: level,
        round,
        summary,
    })
}

/// `quill at 50 active + 5000 idle (round 2): 9,669 req/s, p99 9.60 ms, 0 failed`
fn progress_line(r: &Row, idle: usize, rounds: u32) -> String {
    let s = &r.summary;
    format!(
        "{} at {} active{}{}: {:.0} req/s, p99 {:.2} ms, {} failed",
        r.target,
        r.active,
        if idle > 0 {
            format!(" + {idle} idle")
        } else {
            String::new()
        },
        if rounds > 1 {
            format!(" (round {})", r.round)
        } else {
            String::new()
        },
        s.requests_per_second,
        s.latency_us.p99 as f64 / 1000.0,
        s.failed
    )
}

fn title(base: &Options, rounds: u32) -> String {
    let mut what = Vec::new();
    if base.idle > 0 {
        what.push(format!(
            "{} idle connections held",
            thousands(base.idle as u64)
        ));
    }
    what.push(
        if base.keepalive {
            "keep-alive"
        } else {
            "a new connection per request"
        }
        .to_string(),
    );
    if rounds > 1 {
        what.push(format!("median of {rounds} rounds"));
    }
    format!("Requests per second by concurrency ({})", what.join(", "))
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

/// One line per target and level: the median over the rounds, with the range.
fn median_table(medians: &[Median]) -> String {
    let width = medians
        .iter()
        .map(|m| m.target.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let mut out = format!(
        "{:<width$}  {:>7}  {:>6}  {:>12}  {:>17}  {:>9}  {:>9}  {:>9}  {:>8}\n",
        "target", "active", "rounds", "requests/s", "range", "p50 ms", "p99 ms", "max ms", "failed"
    );
    for m in medians {
        let range = format!(
            "{}-{}",
            thousands(m.requests_per_second_min.round() as u64),
            thousands(m.requests_per_second_max.round() as u64)
        );
        out += &format!(
            "{:<width$}  {:>7}  {:>6}  {:>12}  {:>17}  {:>9.2}  {:>9.2}  {:>9.2}  {:>8}\n",
            m.target,
            m.active,
            m.rounds,
            thousands(m.requests_per_second.round() as u64),
            range,
            m.p50_us as f64 / 1000.0,
            m.p99_us as f64 / 1000.0,
            m.max_us as f64 / 1000.0,
            m.failed
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![]), 0.0);
    }
}
