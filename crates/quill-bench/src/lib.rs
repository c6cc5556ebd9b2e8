//! `quill bench`: a load generator shaped like the long-lived-connection tests of Pen's author
//! (many idle connections held open, a few active clients) that also watches the CPU and memory
//! of the processes under test.
//!
//! `args` is the command line, [`Options`] the validated plan, [`measure`] runs one measurement
//! and returns a [`Summary`]; `engine` is the event loop (HTTP responses read by `quill_core::http1`),
//! `report` the table and JSON, `watch` the /proc sampler, `spread` the child processes used when
//! one process has too few descriptors.

// An item is `pub` only when another crate can reach it (the binary, the tests, the other
// crates of the workspace); the rest is `pub(crate)`, so the compiler finds what is dead.
#![deny(unreachable_pub)]

mod engine;
mod matrix;
mod plot;
mod report;
mod spec;
mod spread;
mod target;
mod watch;

use std::io::IsTerminal;
use std::net::IpAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

pub use engine::Tally;
pub use report::Summary;
pub use target::{Sources, Target};

const AFTER_HELP: &str = "\
TARGET is http://HOST[:PORT]/PATH (HTTP/1.1 GET; a 2xx response is a success), tcp://HOST:PORT
(send a line, read a line) or udp://HOST:PORT (send a datagram of --size bytes, wait for the same
bytes back). Durations: 500ms, 2s, 1m. Without --requests or --duration, every
active client makes one request.

--sources A-B binds each connection to one of the addresses A..B in turn (e.g.
127.0.0.1-127.0.0.50), so more connections fit than one source address has ports.

udp://: each active client is one flow, one socket for the whole run (--keepalive changes nothing):
it sends a datagram, waits for the echo, sends the next. A datagram carries a sequence number, so a
reply is matched to its request: no reply within --timeout is a lost datagram (counted exactly,
`lost`), a reply arriving after that is counted as `late`, never as an answer. --idle F opens F flows
that each send one datagram, wait for its reply and then stay silent (the balancer's idle flows).

--sweep START:END:STEP measures once per concurrency level (--active), END inclusive: it is always the
last level, so 50:120:50 gives 50, 100, 120; also a single level (500) or a list (50,100,500).
--target NAME=URL (repeatable) measures several balancers in one run, interleaved: at each level every
target in turn, the order rotating from level to level. --rounds N repeats the whole set N times and
reports the median of each target and level (with the range). --plot FILE.svg draws requests/s
against concurrency, one line per target.

Examples:
  quill bench --active 50 --keepalive --duration 10s http://127.0.0.1:8080/
  quill bench --idle 5000 --active 200 --requests 20000 --watch 4242 http://127.0.0.1:8080/
  quill bench --idle 80000 --active 2000 --sources 127.0.0.1-127.0.0.20 http://127.0.0.1:8080/
  quill bench --active 10 --duration 2s --json tcp://127.0.0.1:9000
  quill bench --active 64 --duration 5s --size 512 --timeout 1s udp://127.0.0.1:5300
  quill bench --idle 100000 --active 10 --sources 127.0.0.1-127.0.0.10 udp://127.0.0.1:5300
  quill bench --idle 5000 --sweep 50:1000:190 --duration 5s --target quill=http://127.0.0.1:8080/ \\
      --target haproxy=http://127.0.0.1:8081/ --plot shootout.svg";

/// `quill bench` options.
#[derive(Debug, Clone, Args)]
#[command(after_help = AFTER_HELP)]
pub struct BenchArgs {
    /// Print help
    #[arg(short = 'h', long, action = clap::ArgAction::Help)]
    help: Option<bool>,
    /// Connections opened first and held open, silent, for the whole run
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub idle: usize,
    /// Concurrent clients making requests
    #[arg(long, value_name = "M", default_value_t = 1)]
    pub active: usize,
    /// Total requests to make (default: one per active client)
    #[arg(long, value_name = "R", conflicts_with = "duration")]
    pub requests: Option<u64>,
    /// Run for this long instead of a number of requests
    #[arg(long, value_name = "DUR", value_parser = duration)]
    pub duration: Option<Duration>,
    /// Reuse a connection for the next request when the response allows it (default: a new
    /// connection per request)
    #[arg(long)]
    pub keepalive: bool,
    /// Source addresses A-B (e.g. 127.0.0.1-127.0.0.50), used in turn, bound before connect
    #[arg(long, value_name = "A-B", value_parser = target::parse_sources)]
    pub sources: Option<Sources>,
    /// Longest wait for one response (or one idle connect) before it counts as a timeout
    #[arg(long, value_name = "DUR", value_parser = duration, default_value = "10s")]
    pub timeout: Duration,
    /// Datagram size in bytes, udp:// only (8 to 65507; the first 8 carry a sequence number)
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(8..=65507))]
    pub size: Option<u32>,
    /// Event-loop threads
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: u16,
    /// Sample this process's CPU and memory during the run (repeatable)
    #[arg(long, value_name = "PID")]
    pub watch: Vec<u32>,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub json: bool,
    /// Internal: run as a child of a spread run (share given by the other options)
    #[arg(long, hide = true)]
    pub spread_child: bool,
    /// A named target, NAME=URL (repeatable; instead of TARGET): several balancers in one run
    #[arg(long = "target", value_name = "NAME=URL", value_parser = spec::parse_named)]
    pub targets: Vec<(String, Target)>,
    /// Concurrency levels, one measurement each: START:END:STEP (END inclusive), N, or N,N,...
    #[arg(long, value_name = "LEVELS", value_parser = parse_levels)]
    pub sweep: Option<Levels>,
    /// Draw requests/s against concurrency, one line per target, as an SVG file
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<std::path::PathBuf>,
    /// Repeat the whole set of measurements N times (the order rotating each round); the table
    /// and the chart show the median of each target and level
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// What to load: http://HOST[:PORT]/PATH, tcp://HOST:PORT or udp://HOST:PORT (or give
    /// --target NAME=URL)
    #[allow(
        rustdoc::broken_intra_doc_links,
        reason = "this text is also the --help line, where [:PORT] means an optional port"
    )]
    #[arg(value_name = "TARGET", value_parser = target::parse_target, required_unless_present = "targets")]
    pub target: Option<Target>,
}

/// The concurrency levels of `--sweep`.
#[derive(Debug, Clone)]
pub struct Levels(pub Vec<u32>);

fn parse_levels(s: &str) -> Result<Levels, String> {
    spec::parse_sweep(s).map(Levels)
}

fn duration(s: &str) -> Result<Duration, String> {
    quill_core::duration::parse_duration(s)
}

/// What one measurement does: the validated form of [`BenchArgs`] (minus output choices).
#[derive(Debug, Clone)]
pub struct Options {
    pub target: Arc<Target>,
    pub idle: usize,
    pub active: usize,
    pub stop: Stop,
    pub keepalive: bool,
    pub sources: Option<Arc<[IpAddr]>>,
    /// `--sources` as given (passed on to spread children).
    pub sources_arg: Option<String>,
    pub timeout: Duration,
    pub threads: usize,
    pub watch: Vec<u32>,
    /// Datagram size of udp:// targets.
    pub size: usize,
}

/// Datagram size when `--size` is not given.
pub const DEFAULT_UDP_SIZE: u32 = 64;

/// When the active clients stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Requests(u64),
    After(Duration),
}

impl Options {
    /// Validates the arguments; the error is one line naming the offending value.
    pub fn from_args(a: &BenchArgs) -> Result<Options, String> {
        if a.active == 0 && !a.spread_child {
            return Err("--active 0: at least one active client is needed".into());
        }
        if a.duration == Some(Duration::ZERO) {
            return Err("--duration 0: the run needs a length".into());
        }
        if a.requests == Some(0) {
            return Err("--requests 0: at least one request is needed".into());
        }
        if a.timeout.is_zero() {
            return Err("--timeout 0: a request needs time".into());
        }
        for &pid in &a.watch {
            if watch::read(pid).is_none() {
                return Err(format!("--watch {pid}: no such process"));
            }
        }
        let target = a
            .target
            .clone()
            .or_else(|| a.targets.first().map(|t| t.1.clone()))
            .ok_or("no TARGET given (or --target NAME=URL)")?;
        let any_udp = target.is_udp() || a.targets.iter().any(|t| t.1.is_udp());
        if let (Some(size), false) = (a.size, any_udp) {
            return Err(format!("--size {size}: only udp:// targets send datagrams"));
        }
        let stop = match (a.requests, a.duration) {
            (_, Some(d)) => Stop::After(d),
            (Some(r), None) => Stop::Requests(r),
            (None, None) => Stop::Requests(a.active as u64),
        };
        Ok(Options {
            target: Arc::new(target),
            idle: a.idle,
            active: a.active,
            stop,
            keepalive: a.keepalive,
            sources: a.sources.as_ref().map(|s| s.addresses().into()),
            sources_arg: a.sources.map(|s| format!("{}-{}", s.first, s.last)),
            timeout: a.timeout,
            threads: usize::from(a.threads),
            watch: a.watch.clone(),
            size: a.size.unwrap_or(DEFAULT_UDP_SIZE) as usize,
        })
    }
}

/// Runs one measurement: in this process, or spread over child processes when the connections
/// need more descriptors than one process may open. `progress` shows progress on stderr.
pub fn measure(opts: &Options, progress: bool) -> Result<Summary, String> {
    let mut sampler = watch::Sampler::new(&opts.watch)?;
    let n = spread::processes(opts)?;
    let mut meter = report::Meter::new(progress, opts.idle as u64, opts.stop);
    let (tally, watched) = if n > 1 {
        spread::run(opts, n, &mut sampler, &mut meter)?
    } else {
        let mut phases = Watching {
            sampler: &mut sampler,
            meter: &mut meter,
            watched: Vec::new(),
        };
        let tally = engine::run(opts, &mut phases)?;
        (tally, phases.watched)
    };
    Ok(Summary::new(opts, &tally, &watched, n as u64))
}

/// Watches the processes during the active phase of a run in this process, and shows progress.
struct Watching<'a> {
    sampler: &'a mut watch::Sampler,
    meter: &'a mut report::Meter,
    watched: Vec<watch::Watched>,
}

impl engine::Phases for Watching<'_> {
    fn idle_open(&mut self) {
        self.sampler.start();
        self.meter.start(std::time::Instant::now());
    }
    fn active_done(&mut self) {
        self.meter.clear();
        self.watched = self.sampler.stop();
    }
    fn tick(&mut self, counts: engine::Counts) {
        self.meter.tick(counts);
    }
}

/// `quill bench`: runs and prints; exit 0 when the run happened (failed requests included), 2 for
/// bad arguments, 1 when the run could not be made.
pub fn run(args: &BenchArgs) -> ExitCode {
    let opts = match Options::from_args(args) {
        Ok(o) => o,
        Err(e) => return fail(2, &e),
    };
    if args.spread_child {
        return spread::child_main(&opts);
    }
    if !args.targets.is_empty() || args.sweep.is_some() || args.plot.is_some() || args.rounds > 1 {
        return match matrix::run(args, &opts) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e.0, &e.1),
        };
    }
    match measure(&opts, true) {
        Ok(summary) => {
            if args.json {
                println!("{}", summary.to_json());
            } else {
                print!("{}", summary.table());
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(1, &e),
    }
}

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("quill: error: {message}");
    ExitCode::from(code)
}

/// Whether progress should redraw one line (a terminal) or print plain periodic lines.
pub(crate) fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal()
}
