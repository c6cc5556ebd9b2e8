//! The admin listener under attack (D7, D15, D17 in docs/design.md#probe-findings): idle and slow
//! connections held against it cannot starve a scrape; a DNS-rebinding page (a foreign `Host`)
//! reads nothing; the optional token (`admin_token_file`) is required when set, as a Bearer token
//! or the Basic password; a listener bound beyond loopback is warned about; and a process out of
//! descriptors answers `503` instead of leaving a scrape unanswered.

use crate::admin_support;
use crate::support;

use std::fs;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use admin_support::*;
use support::*;

/// The token the token tests configure (printable, with characters Basic and Bearer must carry).
const TOKEN: &str = "q-Adm1n.t0ken_~x:y";

fn http_backend() -> (DemoServer, Vec<String>) {
    let b = http("a");
    let specs = vec![spec(b.addr())];
    (b, specs)
}

/// One request with the given `Host` and `Authorization` (each left out when None).
fn ask(admin: SocketAddr, path: &str, host: Option<&str>, auth: Option<&str>) -> Reply {
    let mut raw = format!("GET {path} HTTP/1.1\r\n");
    if let Some(h) = host {
        raw += &format!("Host: {h}\r\n");
    }
    if let Some(a) = auth {
        raw += &format!("Authorization: {a}\r\n");
    }
    raw += "\r\n";
    request(admin, raw.as_bytes())
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", base64(format!("{user}:{password}").as_bytes()))
}

fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Quill over `servers` with `--admin` and `--admin-token-file DIR/admin.token` holding `TOKEN`,
/// started once its admin listener answers at all (401 without the token).
fn start_with_token(servers: &[String]) -> (QuillProcess, SocketAddr) {
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut q = Quill::start_with(|dir, port| {
        let file = dir.join("admin.token");
        fs::write(&file, format!("{TOKEN}\n")).unwrap();
        let mut args = vec![
            "--admin".to_string(),
            admin.to_string(),
            "--admin-token-file".to_string(),
            file.display().to_string(),
        ];
        args.extend(pen_args(dir, port, &[], servers));
        args
    });
    wait_answering(&mut q, admin);
    (q, admin)
}

/// Polls the admin listener (bounded) until it answers anything.
fn wait_answering(q: &mut QuillProcess, admin: SocketAddr) {
    let deadline = Instant::now() + READY_TIMEOUT;
    while Instant::now() < deadline {
        if let Some(st) = q.try_exit() {
            panic!("quill exited ({st}); stderr:\n{}", q.stderr());
        }
        if try_request(admin, b"GET /metrics HTTP/1.0\r\n\r\n").is_ok() {
            return;
        }
        thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "admin listener {admin} not answering; stderr:\n{}",
        q.stderr()
    );
}

// ---------------------------------------------------------------------------------------------
// D7: starving the admin listener
// ---------------------------------------------------------------------------------------------

/// The start of a request head the slow clients never finish.
const SLOW_HEAD: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Slow: ";

/// One connection held by the attacker: idle (sends nothing) or slow (one byte per round).
struct Held {
    stream: Option<TcpStream>,
    slow: bool,
    sent: usize,
}

impl Held {
    fn open(admin: SocketAddr, slow: bool) -> Held {
        let stream = TcpStream::connect_timeout(&admin, Duration::from_secs(2)).ok();
        if let Some(s) = &stream {
            let _ = s.set_nonblocking(true);
        }
        Held {
            stream,
            slow,
            sent: 0,
        }
    }

    /// One round: a slow client sends its next byte; a connection Quill closed (or answered,
    /// which it does only when closing) is opened again, as a persistent attacker does. Returns
    /// whether it had to be re-opened.
    fn round(&mut self, admin: SocketAddr) -> bool {
        let alive = match &mut self.stream {
            None => false,
            Some(s) => {
                let mut b = [0u8; 256];
                let open =
                    matches!(s.read(&mut b), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
                let byte = SLOW_HEAD.get(self.sent).copied().unwrap_or(b'a');
                open && (!self.slow || s.write(&[byte]).is_ok_and(|n| n == 1))
            }
        };
        if alive {
            self.sent += 1;
            return false;
        }
        *self = Held::open(admin, self.slow);
        true
    }
}

/// Holds `idle` silent and `slow` slowloris connections (one header byte every 500 ms each),
/// re-opening those Quill closes, until `stop` (or 60 s). `held` is set once all are open.
fn attack(
    admin: SocketAddr,
    idle: usize,
    slow: usize,
    stop: &AtomicBool,
    held: &AtomicUsize,
) -> usize {
    let mut conns: Vec<Held> = (0..idle)
        .map(|_| Held::open(admin, false))
        .chain((0..slow).map(|_| Held::open(admin, true)))
        .collect();
    held.store(
        conns.iter().filter(|c| c.stream.is_some()).count(),
        Ordering::SeqCst,
    );
    let mut reopened = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
        for c in &mut conns {
            reopened += usize::from(c.round(admin));
        }
        for _ in 0..10 {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
    reopened
}

/// `GET /metrics`: the status, if the whole answer came within `limit`.
fn scrape_within(admin: SocketAddr, limit: Duration) -> Result<u16, String> {
    let started = Instant::now();
    let mut s = TcpStream::connect_timeout(&admin, limit).map_err(|e| format!("connect: {e}"))?;
    set_timeouts(&s, limit);
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .map_err(|e| format!("send: {e}"))?;
    let (bytes, end) = try_read_until_eof(&mut s, limit, 4 << 20);
    end.map_err(|e| format!("read: {e}"))?;
    if started.elapsed() > limit {
        return Err(format!("answered after {:?}", started.elapsed()));
    }
    parse_reply(&bytes)
        .map(|r| r.status)
        .map_err(|e| e.to_string())
}

#[test]
fn admin_answers_metrics_while_300_idle_and_300_slowloris_connections_are_held() {
    // 600 sockets here and as many in quill: more than a default soft limit allows on some hosts.
    let _ = quill_core::sys::raise_nofile_limit();
    let (_b, servers) = http_backend();
    let (q, admin) = start_pen_with_admin(&[], &servers);
    let stop = Arc::new(AtomicBool::new(false));
    let held = Arc::new(AtomicUsize::new(0));
    let attacker = {
        let (stop, held) = (stop.clone(), held.clone());
        thread::spawn(move || attack(admin, 300, 300, &stop, &held))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while held.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    let holding = held.load(Ordering::SeqCst);
    // At least 100 scrapes and 7 s: through the moment the held connections reach their 5 s
    // deadline and are opened again (time, not a count alone: on a loaded machine the attacker's
    // rounds over 600 connections lag, and 100 quick scrapes ended before it saw a cut one).
    let mut failures = Vec::new();
    let scraping = Instant::now();
    for i in 0..300 {
        if i >= 100 && scraping.elapsed() >= Duration::from_secs(7) {
            break;
        }
        match scrape_within(admin, Duration::from_secs(1)) {
            Ok(200) => {}
            other => failures.push(format!("try {i}: {other:?}")),
        }
        thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::SeqCst);
    let reopened = attacker.join().expect("attacker thread");
    assert!(holding >= 590, "the attacker held only {holding} of 600");
    assert!(
        failures.len() <= 1,
        "{} of 100 scrapes failed while {holding} connections were held ({reopened} re-opened): \
         {failures:?}\nstderr:\n{}",
        failures.len(),
        q.stderr()
    );
    // The held connections were cut at their deadline (and re-opened by the attacker).
    assert!(reopened >= 300, "only {reopened} held connections were cut");
}

// ---------------------------------------------------------------------------------------------
// D15: DNS rebinding, the token, exposure
// ---------------------------------------------------------------------------------------------

#[test]
fn admin_refuses_a_foreign_host_header() {
    let (_b, servers) = http_backend();
    let (_q, admin) = start_pen_with_admin(&[], &servers);
    let port = admin.port();
    let with_port = format!("attacker.example:{port}");
    for host in [
        "attacker.example",
        with_port.as_str(),
        "localhost.attacker.example",
        "127.0.0.1.nip.io",
    ] {
        for path in ["/api/status", "/metrics", "/"] {
            let r = ask(admin, path, Some(host), None);
            assert_eq!(r.status, 421, "Host: {host}, {path}: {}", r.head);
            let text = r.text();
            for secret in ["quill_", "listeners", "\"pid\"", "<script"] {
                assert!(!text.contains(secret), "Host: {host} read {secret}: {text}");
            }
            assert_eq!(r.header("www-authenticate"), None);
        }
    }
    // What a browser sends when pointed at an address or at localhost, and clients with no Host.
    let accepted = [
        admin.to_string(),
        "127.0.0.1".to_string(),
        format!("localhost:{port}"),
        "LOCALHOST".to_string(),
        format!("[::1]:{port}"),
    ];
    for host in &accepted {
        assert_eq!(
            ask(admin, "/api/status", Some(host), None).status,
            200,
            "Host: {host}"
        );
    }
    let old = request(admin, b"GET /metrics HTTP/1.0\r\n\r\n");
    assert_eq!(old.status, 200);
    // Two Host headers (which one counts?) are not guessed at.
    let two = request(
        admin,
        b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nHost: attacker.example\r\n\r\n",
    );
    assert_eq!(two.status, 400);
}

#[test]
fn admin_with_a_token_refuses_requests_without_it() {
    let (_b, servers) = http_backend();
    let (_q, admin) = start_with_token(&servers);
    let host = admin.to_string();
    let shouted = bearer(&TOKEN.to_uppercase());
    let prefix = bearer(&TOKEN[..TOKEN.len() - 1]);
    let longer = bearer(&format!("{TOKEN}x"));
    let as_user = basic(TOKEN, "x");
    let wrong = basic("admin", "nope");
    let bare = TOKEN.to_string();
    let other = format!("Token {TOKEN}");
    for (what, auth) in [
        ("no credentials", None),
        ("a wrong bearer", Some("Bearer nope")),
        ("the token in upper case", Some(shouted.as_str())),
        ("a prefix of the token", Some(prefix.as_str())),
        ("the token and more", Some(longer.as_str())),
        ("the token as the Basic user", Some(as_user.as_str())),
        ("a wrong Basic password", Some(wrong.as_str())),
        ("the token without a scheme", Some(bare.as_str())),
        ("an unknown scheme", Some(other.as_str())),
        ("Basic that is not base64", Some("Basic !!!")),
    ] {
        for path in ["/metrics", "/api/status", "/", "/nope"] {
            let r = ask(admin, path, Some(&host), auth);
            assert_eq!(r.status, 401, "{what}, {path}: {}", r.head);
            assert_eq!(
                r.header("www-authenticate").as_deref(),
                Some("Basic realm=\"quill\""),
                "{what}"
            );
            assert!(!r.text().contains("quill_"), "{what}: {}", r.text());
        }
    }
    // A rebinding page knows no token: 421, with no WWW-Authenticate that would make the browser
    // prompt for the token under the attacker's name.
    let r = ask(admin, "/api/status", Some("attacker.example"), None);
    assert_eq!(r.status, 421);
    assert_eq!(r.header("www-authenticate"), None);
}

#[test]
fn admin_token_works_as_bearer_and_basic_password() {
    let (_b, servers) = http_backend();
    let (_q, admin) = start_with_token(&servers);
    let host = admin.to_string();
    let as_bearer = bearer(TOKEN);
    let as_basic = basic("anyone", TOKEN);
    let no_user = basic("", TOKEN);
    for auth in [&as_bearer, &as_basic, &no_user] {
        let m = ask(admin, "/metrics", Some(&host), Some(auth));
        assert_eq!(m.status, 200, "{auth}: {}", m.head);
        parse_metrics(&m.text()).family("quill_sessions_accepted_total");
        let s = ask(admin, "/api/status", Some(&host), Some(auth));
        assert_eq!(s.status, 200, "{auth}");
        let json: serde_json::Value = serde_json::from_slice(&s.body).unwrap();
        assert!(json["listeners"].is_array(), "{json}");
        let page = ask(admin, "/", Some(&host), Some(auth));
        assert_eq!(page.status, 200, "{auth}");
        assert!(page.text().contains("api/status"));
    }
    // The scheme is case-insensitive; the token is what no rebinding page can know, so with it any
    // Host is answered (a proxy or tunnel in front may well rename the host).
    let lower = format!("bearer {TOKEN}");
    assert_eq!(
        ask(admin, "/metrics", Some(&host), Some(&lower)).status,
        200
    );
    let far = ask(
        admin,
        "/metrics",
        Some("metrics.internal.example"),
        Some(&as_bearer),
    );
    assert_eq!(far.status, 200);
}

#[test]
fn admin_token_is_read_again_on_reload() {
    let (_b, servers) = http_backend();
    let (q, admin) = start_with_token(&servers);
    let host = admin.to_string();
    let file = q.path("admin.token");
    fs::write(&file, "second-token\n").unwrap();
    q.signal("HUP");
    let fresh = bearer("second-token");
    let deadline = Instant::now() + Duration::from_secs(10);
    while ask(admin, "/metrics", Some(&host), Some(&fresh)).status != 200 {
        assert!(
            Instant::now() < deadline,
            "new token not accepted after SIGHUP; stderr:\n{}",
            q.stderr()
        );
        thread::sleep(Duration::from_millis(50));
    }
    let old = ask(admin, "/metrics", Some(&host), Some(&bearer(TOKEN)));
    assert_eq!(old.status, 401, "the old token still works after a reload");
    // A reload that finds the file emptied keeps the token it had (and says so), rather than
    // leaving the listener open to anyone.
    fs::write(&file, "\n").unwrap();
    q.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert_eq!(ask(admin, "/metrics", Some(&host), None).status, 401);
        if q.stderr().contains("keeping the token read before") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no warning; stderr:\n{}",
            q.stderr()
        );
        thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        ask(admin, "/metrics", Some(&host), Some(&fresh)).status,
        200
    );
}

#[test]
fn admin_token_file_that_is_missing_empty_or_spaced_stops_the_start() {
    let dir = scratch_dir();
    let cases: [(&str, Option<&str>, &str); 3] = [
        ("missing.token", None, "cannot read it"),
        ("empty.token", Some(" \n"), "empty"),
        (
            "spaced.token",
            Some("two words\n"),
            "printable ASCII without spaces",
        ),
    ];
    for (name, content, why) in cases {
        let file = dir.path().join(name);
        if let Some(c) = content {
            fs::write(&file, c).unwrap();
        }
        let admin = format!("127.0.0.1:{}", free_port());
        let listen = format!("127.0.0.1:{}", free_port());
        let file_arg = file.display().to_string();
        let (code, err) = run_quill_expect_exit(&[
            "-f",
            "--admin",
            &admin,
            "--admin-token-file",
            &file_arg,
            &listen,
            "127.0.0.1:9",
        ]);
        assert_ne!(code, 0, "{name}: {err}");
        let line = err
            .lines()
            .find(|l| l.contains("admin_token_file"))
            .unwrap_or_else(|| panic!("{name}: no error naming the file: {err}"));
        assert!(
            line.contains(&file_arg) && line.contains(why),
            "{name}: {line}"
        );
    }
}

/// Starts quill with `--admin ADMIN` (and the token file when `token`); returns once the admin
/// listener answers.
fn start_exposed(admin: &str, token: bool, servers: &[String]) -> QuillProcess {
    let mut q = Quill::start_with(|dir, port| {
        let mut args = vec!["--admin".to_string(), admin.to_string()];
        if token {
            let file = dir.join("admin.token");
            fs::write(&file, TOKEN).unwrap();
            args.push("--admin-token-file".into());
            args.push(file.display().to_string());
        }
        args.extend(pen_args(dir, port, &[], servers));
        args
    });
    let port = admin.rsplit(':').next().unwrap().parse().unwrap();
    wait_answering(&mut q, SocketAddr::from(([127, 0, 0, 1], port)));
    q
}

fn exposure_warning(q: &QuillProcess) -> Option<String> {
    q.stderr()
        .lines()
        .find(|l| l.contains("reachable beyond this host"))
        .map(str::to_string)
}

#[test]
fn admin_bound_beyond_loopback_warns() {
    let (_b, servers) = http_backend();
    // Bound to every address (the test still talks to it over loopback only).
    let open = start_exposed(&format!("0.0.0.0:{}", free_port()), false, &servers);
    let line = exposure_warning(&open).unwrap_or_else(|| panic!("no warning:\n{}", open.stderr()));
    for says in [
        "WARN",
        "no authentication",
        "anyone who can reach it can read the status",
        "admin_token_file",
    ] {
        assert!(line.contains(says), "the warning lacks {says:?}: {line}");
    }
    drop(open);
    // With a token, the warning says what protects it.
    let guarded = start_exposed(&format!("0.0.0.0:{}", free_port()), true, &servers);
    let line =
        exposure_warning(&guarded).unwrap_or_else(|| panic!("no warning:\n{}", guarded.stderr()));
    assert!(line.contains("the token of admin_token_file"), "{line}");
    assert!(line.contains("protects it"), "{line}");
    assert!(!line.contains("no authentication"), "{line}");
    drop(guarded);
    // On loopback there is nothing to warn about.
    let local = start_exposed(&format!("127.0.0.1:{}", free_port()), false, &servers);
    assert_eq!(exposure_warning(&local), None);
}

// ---------------------------------------------------------------------------------------------
// D17: out of descriptors
// ---------------------------------------------------------------------------------------------

const PRLIMIT: &str = "/usr/bin/prlimit";

/// The descriptor numbers `pid` has open.
fn open_descriptors(pid: u32) -> Vec<usize> {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The highest descriptor of `pid` open on /dev/null: the admin listener's reserve (stdin is
/// /dev/null too, but it is descriptor 0).
fn reserve_descriptor(pid: u32) -> Option<usize> {
    open_descriptors(pid)
        .into_iter()
        .filter(|&fd| fd > 2)
        .filter(|fd| {
            fs::read_link(format!("/proc/{pid}/fd/{fd}")).is_ok_and(|t| t == Path::new("/dev/null"))
        })
        .max()
}

/// How many descriptor numbers below `limit` `pid` could still open.
fn free_below(pid: u32, limit: usize) -> usize {
    limit
        - open_descriptors(pid)
            .iter()
            .filter(|&&fd| fd < limit)
            .count()
}

/// Takes `pid`'s free descriptors below `limit` with idle admin clients (`fillers`) until none
/// has come free for 300 ms, longer than the listener's 100 ms pause: a client that the data path
/// accepts with the last descriptor fails its server connect (EMFILE) and is closed, which frees
/// that descriptor again for a moment (seen in CI: a check right after one filler found it free).
/// Bounded by 3.5 s, well inside the 5 s the admin listener gives an idle client before closing
/// it (the fillers must outlive the checks that follow); false if descriptors were still coming
/// free then.
fn fill_descriptors(
    pid: u32,
    limit: usize,
    admin: SocketAddr,
    fillers: &mut Vec<TcpStream>,
) -> bool {
    let mut quiet_since = Instant::now();
    let until = Instant::now() + Duration::from_millis(3500);
    while Instant::now() < until {
        if free_below(pid, limit) > 0 {
            fillers.push(connect(admin));
            quiet_since = Instant::now();
        } else if quiet_since.elapsed() >= Duration::from_millis(300) {
            return true;
        }
        thread::sleep(Duration::from_millis(25));
    }
    false
}

#[test]
fn admin_answers_503_when_the_data_path_has_used_every_descriptor() {
    if !Path::new(PRLIMIT).exists() {
        eprintln!("skipped: {PRLIMIT} (util-linux) is not installed");
        return;
    }
    // An echo server keeps each session open as long as its client.
    let backend = echo();
    let (q, admin) = start_pen_with_admin(&[], &[spec(backend.addr())]);
    // Room for a few more descriptors, no more (a new descriptor takes the lowest free number).
    let fds = open_descriptors(q.pid);
    let first_free = (0..).find(|n| !fds.contains(n)).unwrap();
    let reserve = reserve_descriptor(q.pid).unwrap_or(0);
    let mut limit = first_free.max(reserve + 1) + 6;
    // An even number free: sessions (two descriptors each) can take them all, so the fill below
    // rarely needs an admin filler, which the admin listener closes after its 5 s head deadline
    // (under load the fill outlasted it and the first fillers' descriptors came free again).
    if free_below(q.pid, limit) % 2 == 1 {
        limit += 1;
    }
    let st = Command::new(PRLIMIT)
        .args(["--pid", &q.pid.to_string(), &format!("--nofile={limit}:")])
        .status()
        .expect("run prlimit");
    assert!(st.success(), "prlimit failed");
    // Clients on the data path take what is left (each session holds two descriptors: client and
    // server); an idle admin client takes the last one if an odd one is left over.
    let clients: Vec<TcpStream> = (0..16).map(|_| connect_port(q.port)).collect();
    // The sessions first (until the count of descriptors has not moved for 100 ms, at most 2 s):
    // a filler taken while they still open would leave them an odd number.
    let mut last = (open_descriptors(q.pid).len(), Instant::now());
    let settle_by = Instant::now() + Duration::from_secs(2);
    while Instant::now() < settle_by && last.1.elapsed() < Duration::from_millis(100) {
        thread::sleep(Duration::from_millis(10));
        let n = open_descriptors(q.pid).len();
        if n != last.0 {
            last = (n, Instant::now());
        }
    }
    let mut fillers = Vec::new();
    assert!(
        fill_descriptors(q.pid, limit, admin, &mut fillers),
        "quill never ran out of descriptors (limit {limit}, descriptors {:?})",
        open_descriptors(q.pid)
    );
    // More clients find none left (the data path's sessions may have used up the first ones).
    let late: Vec<TcpStream> = (0..4).map(|_| connect_port(q.port)).collect();
    assert!(
        q.wait_stderr_contains("pausing the listener", Duration::from_secs(5)),
        "the data path never ran out of descriptors (limit {limit}, {} idle admin clients, \
         descriptors {:?}); stderr:\n{}",
        fillers.len(),
        open_descriptors(q.pid),
        q.stderr()
    );
    // An idle admin filler is closed at the admin listener's 5 s head deadline, which a loaded
    // machine can reach by now (seen in CI): the fillers are renewed (closed, then opened again
    // with a fresh deadline) right before asking.
    if !fillers.is_empty() {
        drop(std::mem::take(&mut fillers));
        for _ in 0..40 {
            if free_below(q.pid, limit) > 0 {
                break;
            }
            thread::sleep(Duration::from_millis(25));
        }
    }
    assert!(
        fill_descriptors(q.pid, limit, admin, &mut fillers),
        "descriptors came free again (limit {limit}, {} idle admin clients, descriptors {:?})",
        fillers.len(),
        open_descriptors(q.pid)
    );
    // The admin listener answers from its reserved descriptor instead of going silent, and takes
    // the reserve back for the next one.
    for _ in 0..2 {
        let busy = request(admin, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
        assert_eq!(busy.status, 503, "{}", busy.head);
    }
    // Once descriptors are free again, scrapes are served.
    drop(clients);
    drop(late);
    drop(fillers);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = request(admin, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").status;
        if status == 200 {
            break;
        }
        assert_eq!(status, 503);
        assert!(
            Instant::now() < deadline,
            "still 503 after the clients left"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn admin_closes_each_connection_as_soon_as_its_client_does() {
    // Under steady scraping, a connection lives until its client closes, not until the linger
    // deadline: eight busy clients never make quill hold hundreds of them (which would fill the
    // listener and turn scrapes into 503s).
    let (_b, servers) = http_backend();
    let (q, admin) = start_pen_with_admin(&[], &servers);
    let before = open_descriptors(q.pid).len();
    let done = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let done = done.clone();
            thread::spawn(move || {
                let mut statuses = Vec::new();
                for _ in 0..250 {
                    if done.load(Ordering::SeqCst) {
                        break;
                    }
                    let r = try_request(admin, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
                    statuses.push(r.map(|r| r.status).unwrap_or(0));
                }
                statuses
            })
        })
        .collect();
    let mut most = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while clients.iter().any(|c| !c.is_finished()) && Instant::now() < deadline {
        most = most.max(open_descriptors(q.pid).len());
        thread::sleep(Duration::from_millis(5));
    }
    done.store(true, Ordering::SeqCst);
    let statuses: Vec<u16> = clients
        .into_iter()
        .flat_map(|c| c.join().expect("client thread"))
        .collect();
    assert!(
        statuses.iter().all(|&s| s == 200),
        "not all 200: {statuses:?}"
    );
    assert!(
        most < before + 100,
        "quill held {} descriptors for 8 clients (started with {before})",
        most
    );
}
