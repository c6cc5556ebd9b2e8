//! The HTTP/2 floods and bombs of issue 26 point 5, one test each (`attacks.py --case NAME`), on
//! Quill's h2c listener in front of a backend that counts what reaches it.
//!
//! Each test (alone in this binary: no other test runs beside it) measures a legitimate client's
//! p99 alone (`attacks.py --case legit`, for as long as it will run beside the attack), then
//! runs the attack with the legitimate client beside it, sampling Quill's memory all along.
//! Every test asserts, per attacking connection (each test has one):
//! - at most 200 requests reach the backend (their request line, the legitimate client's apart);
//! - at most 1 MiB of memory growth in Quill;
//! - the legitimate client loses no request and keeps its p99 under twice its quiet value;
//!
//! and then how the attacker's connection ended: a flood or bomb is closed (a GOAWAY, if any, says
//! ENHANCE_YOUR_CALM or PROTOCOL_ERROR); stream exhaustion and slow bodies end with every stream
//! refused, reset or answered (at the HTTP/1 timeouts, 2 s here) and the idle connection closed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::http_support::Backend;
use crate::script::{self, start_quill, target_args, Script, Transport};
use crate::support::QuillProcess;

/// Seconds a flood lasts (attacks.py stops sooner once Quill ends the connection).
const FLOOD_SECS: &str = "3";
/// Seconds stream exhaustion and slow bodies hold their connection: the 2 s timeouts below, then
/// the 2 s of idleness, with room.
const HOLD_SECS: &str = "10";
/// Past this an attack or the legitimate client is killed (each ends by itself well before).
const SCRIPT_LIMIT: Duration = Duration::from_secs(30);
/// The timeouts of the slow attacks' listener, short so that the tests are.
const SLOW_HTTP: &str = concat!(
    "header_timeout = \"2s\"\n",
    "body_timeout = \"2s\"\n",
    "keepalive_timeout = \"2s\"\n",
);
/// The path of the legitimate client's requests, by which the backend's count leaves them out.
const LEGIT_PATH: &str = "/legit";
/// Backend requests one attacking connection may start.
const MAX_BACKEND_REQUESTS: usize = 200;
/// Memory growth one attacking connection may cause, in KiB.
const MAX_GROWTH_KIB: u64 = 1024;
/// The floor under the quiet p99 before doubling it: on a shared 2-core machine a quiet p99 of
/// loopback requests swings between under 1 ms and several (scheduling noise, not Quill), and the
/// attacker, Quill, the backend and both clients share those cores.
const P99_FLOOR_MS: f64 = 5.0;

/// What a run of one attack gave.
struct Outcome {
    attack: String,
    /// attacks.py's report.
    report: Value,
    /// The legitimate client's report, alone then beside the attack.
    quiet: Value,
    beside: Value,
    /// Requests that reached the backend (legitimate ones apart).
    backend_requests: usize,
    growth_kib: u64,
}

/// Quill (h2c, `http` more lines of `[listener.http]`) in front of a counting backend; the
/// attack `name` run with `args`, the legitimate client beside it for `legit_secs`.
fn attack(name: &str, http: &str, args: &[&str], legit_secs: &str) -> Outcome {
    let _turn = script::exclusive_turn();
    let backend = Backend::fixed(64);
    let quill = start_quill(&backend, Transport::H2c, http);
    let target = target_args(&quill, Transport::H2c);
    // Alone for as long as it runs beside the attack: a p99 over a longer run takes in more of
    // the shared machine's pauses, and the two must be measured alike to be compared.
    let quiet =
        legit(&target, &["--requests", "100000", "--duration", legit_secs]).wait(SCRIPT_LIMIT);
    let quiet_report = quiet.json();
    assert_eq!(
        quiet_report["failed"],
        0,
        "the legitimate client alone:\n{}",
        quiet.describe()
    );
    let baseline = settled_rss_anon_kib(quill.pid);
    let sampler = PeakSampler::start(&quill);
    let mut attack_args = target.clone();
    attack_args.extend(["--case", name].iter().map(|s| s.to_string()));
    attack_args.extend(args.iter().map(|s| s.to_string()));
    let attacker = Script::spawn("attacks.py", &attack_args);
    let beside = legit(&target, &["--requests", "100000", "--duration", legit_secs]);
    let attack_run = attacker.wait(SCRIPT_LIMIT);
    let beside_run = beside.wait(SCRIPT_LIMIT);
    let peak = sampler.stop();
    Outcome {
        attack: name.to_string(),
        report: attack_run.json(),
        quiet: quiet_report,
        beside: beside_run.json(),
        backend_requests: attack_requests(&backend),
        growth_kib: peak.saturating_sub(baseline),
    }
}

/// The legitimate client, started in the background.
fn legit(target: &[String], args: &[&str]) -> Script {
    let mut all = target.to_vec();
    all.extend(
        ["--case", "legit", "--path", LEGIT_PATH]
            .iter()
            .map(|s| s.to_string()),
    );
    all.extend(args.iter().map(|s| s.to_string()));
    Script::spawn("attacks.py", &all)
}

/// Request lines the backend received for `/` (the attacks' path; the legitimate client asks
/// for [`LEGIT_PATH`]): requests started, whether or not their bodies ever came.
fn attack_requests(backend: &Backend) -> usize {
    backend
        .received()
        .iter()
        .flat_map(|bytes| bytes.split(|&b| b == b'\n'))
        .filter(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(space) = line.iter().position(|&b| b == b' ') else {
                return false;
            };
            line[..space].iter().all(u8::is_ascii_uppercase) && &line[space..] == b" / HTTP/1.1"
        })
        .count()
}

impl Outcome {
    /// What every attack must keep to (the module's doc).
    fn assert_contained(&self) {
        assert!(
            self.backend_requests <= MAX_BACKEND_REQUESTS,
            "{}: {} requests reached the backend (at most {MAX_BACKEND_REQUESTS})\n{self}",
            self.attack,
            self.backend_requests
        );
        assert!(
            self.growth_kib <= MAX_GROWTH_KIB,
            "{}: Quill grew by {} KiB (at most {MAX_GROWTH_KIB})\n{self}",
            self.attack,
            self.growth_kib
        );
        let quiet = ms(&self.quiet["p99_ms"]);
        let limit = 2.0 * quiet.max(P99_FLOOR_MS);
        assert!(
            self.beside["failed"] == 0 && ms(&self.beside["p99_ms"]) <= limit,
            "{}: the legitimate client beside the attack failed requests or its p99 passed \
             {limit} ms (twice the larger of its quiet p99, {quiet} ms, and {P99_FLOOR_MS} ms)\n{self}",
            self.attack
        );
    }

    /// A flood or bomb: the connection was closed, after a GOAWAY that says so, if any.
    fn assert_closed(&self) {
        let r = &self.report;
        let code = r["goaway_code"].as_str();
        assert!(
            r["closed"] == true
                && code.is_none_or(|c| c == "ENHANCE_YOUR_CALM" || c == "PROTOCOL_ERROR"),
            "{}: expected the connection closed (a GOAWAY, if any, of ENHANCE_YOUR_CALM or \
             PROTOCOL_ERROR); it ended {} with GOAWAY {code:?}\n{self}",
            self.attack,
            r["ended"]
        );
        self.assert_contained();
    }

    /// Stream exhaustion, slow bodies: each stream opened was refused, reset or answered, then
    /// the connection, idle, was closed (gracefully or not).
    fn assert_streams_ended_then_idle_closed(&self) {
        let r = &self.report;
        let opened = r["requests_sent"].as_u64().unwrap_or(0);
        assert!(
            opened > 0 && r["streams_ended"].as_u64() >= Some(opened),
            "{}: expected all {opened} streams refused, reset or answered; {} were\n{self}",
            self.attack,
            r["streams_ended"]
        );
        let code = r["goaway_code"].as_str();
        assert!(
            r["closed"] == true
                && code.is_none_or(|c| {
                    c == "NO_ERROR" || c == "ENHANCE_YOUR_CALM" || c == "PROTOCOL_ERROR"
                }),
            "{}: expected the idle connection closed within {HOLD_SECS} s; it ended {} with \
             GOAWAY {code:?}\n{self}",
            self.attack,
            r["ended"]
        );
        self.assert_contained();
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "attack: {}\nlegitimate client alone: {}\nbeside the attack: {}\n\
             backend requests: {}, Quill's growth: {} KiB",
            self.report, self.quiet, self.beside, self.backend_requests, self.growth_kib
        )
    }
}

fn ms(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::INFINITY)
}

// === Memory ==================================================================================

/// RssAnon of a process in KiB: its heap and stacks. Not VmRSS, which also counts the pages of the
/// binary as new code runs (megabytes of a debug build, when an attack first takes an error path).
fn rss_anon_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no RssAnon in /proc/{pid}/status:\n{status}"))
}

/// RssAnon once three readings 100 ms apart agree (or after 2 s, the latest).
fn settled_rss_anon_kib(pid: u32) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut last = rss_anon_kib(pid);
    let mut same = 0;
    while same < 2 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(100));
        let now = rss_anon_kib(pid);
        same = if now == last { same + 1 } else { 0 };
        last = now;
    }
    last
}

/// Samples a process's RssAnon every 20 ms in a thread, keeping the peak.
struct PeakSampler {
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<u64>,
}

impl PeakSampler {
    fn start(quill: &QuillProcess) -> PeakSampler {
        let pid = quill.pid;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = thread::spawn(move || {
            let mut peak = rss_anon_kib(pid);
            // Bounded: 30 s of samples at most, however long the attack.
            for _ in 0..1500 {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                thread::sleep(Duration::from_millis(20));
                peak = peak.max(rss_anon_kib(pid));
            }
            peak
        });
        PeakSampler { stop, thread }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .join()
            .expect("the memory sampler does not panic")
    }
}

// === The attacks =============================================================================

fn flood(name: &str) -> Outcome {
    attack(name, "", &["--duration", FLOOD_SECS], FLOOD_SECS)
}

fn slow(name: &str) -> Outcome {
    attack(name, SLOW_HTTP, &["--hold", HOLD_SECS], HOLD_SECS)
}

#[test]
fn rapid_reset_is_closed_and_starts_few_server_requests() {
    flood("rapid_reset").assert_closed();
}

#[test]
fn made_you_reset_is_closed_and_starts_few_server_requests() {
    flood("made_you_reset").assert_closed();
}

#[test]
fn continuation_flood_is_closed_before_the_header_block_grows() {
    flood("continuation_flood").assert_closed();
}

#[test]
fn hpack_bomb_is_closed_without_decoding_the_bomb_into_memory() {
    flood("hpack_bomb").assert_closed();
}

#[test]
fn http2_bomb_of_tiny_fields_and_window_drips_is_closed() {
    flood("http2_bomb").assert_closed();
}

#[test]
fn settings_flood_is_closed() {
    flood("settings_flood").assert_closed();
}

#[test]
fn ping_flood_is_closed() {
    flood("ping_flood").assert_closed();
}

#[test]
fn empty_data_flood_is_closed() {
    flood("empty_data_flood").assert_closed();
}

#[test]
fn window_update_flood_is_closed() {
    flood("window_update_flood").assert_closed();
}

#[test]
fn stream_exhaustion_is_refused_or_reset_at_the_body_timeout_and_the_idle_connection_closed() {
    slow("stream_exhaustion").assert_streams_ended_then_idle_closed();
}

#[test]
fn slow_body_is_reset_at_the_body_timeout_and_the_idle_connection_closed() {
    slow("slow_body").assert_streams_ended_then_idle_closed();
}

// === A server's flood ========================================================================

/// A server that answers with interim heads without end (no flow-control window holds HEADERS
/// back) to a client that never reads: Quill stops taking the stream's heads once its output
/// for the client is full, the stream's pipe fills, its session stops reading the server, and
/// the server's writes block. Quill's memory stays bounded, and it goes on serving others.
#[test]
fn a_servers_endless_interim_heads_to_a_client_that_does_not_read_stay_in_bounded_memory() {
    use std::io::Write;

    use crate::http_support::{response, Step};
    use crate::kit::{client, start_h2c};

    // Alone, as the other attacks are: the flood takes the cores for a moment.
    let _turn = script::exclusive_turn();
    let flood = b"HTTP/1.1 103 Early Hints\r\nLink: <a>\r\n\r\n".repeat(1_000_000);
    let backend = Backend::start(move |r| {
        if r.target == "/flood" {
            vec![Step::Send(flood.clone())]
        } else {
            vec![Step::Send(response(200, "", b"ok"))]
        }
    });
    let q = start_h2c(&backend, "", "");
    let before = settled_rss_anon_kib(q.pid);
    let sampler = PeakSampler::start(&q);
    let mut attacker = std::net::TcpStream::connect(("127.0.0.1", q.port)).expect("connect");
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    // HEADERS, END_STREAM | END_HEADERS, stream 1: GET (2), http (6), :path literal "/flood"
    // (name 4, not indexed), :authority literal "x" (name 1).
    let mut block = vec![0x82, 0x86, 0x04, 6];
    block.extend_from_slice(b"/flood");
    block.extend_from_slice(&[0x01, 1, b'x']);
    hello.extend_from_slice(&[0, 0, block.len() as u8, 1, 0x05, 0, 0, 0, 1]);
    hello.extend_from_slice(&block);
    attacker.write_all(&hello).expect("send the request");
    let flooding = crate::http_support::wait_until(Duration::from_secs(10), || {
        backend.requests().iter().any(|r| r.target == "/flood")
    });
    assert!(flooding, "the request never reached the server");
    // Long enough for Quill to take millions of the server's bytes, were nothing holding it.
    thread::sleep(Duration::from_secs(4));
    let r = client(q.port, &["--request", "GET /other"]);
    assert_eq!(
        r.status(1),
        Some(200),
        "another client is served: {:?}",
        r.lines
    );
    let peak = sampler.stop();
    let growth = peak.saturating_sub(before);
    eprintln!("RssAnon {before} KiB before, peak {peak} KiB: +{growth} KiB");
    assert!(
        growth <= 4 * 1024,
        "Quill grew by {growth} KiB under one server's flood of interim heads"
    );
    drop(attacker);
}
