//! TOML configuration: two listeners end to end, `quill check`, errors with PATH:LINE, the example.

use crate::support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::*;

/// Writes `text` as DIR/NAME and returns the path.
fn write_cfg(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The 1-based line number of the first line containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .expect("needle in config")
        + 1
}

fn check(path: &Path) -> (i32, String, String) {
    run_quill_output(&["check", "--config", path.to_str().unwrap()])
}

/// Expects `quill check` to exit 2 with "PATH:LINE" on the first stderr line.
fn expect_check_error_at(path: &Path, line: usize) -> String {
    let (code, out, err) = check(path);
    assert_eq!(
        code, 2,
        "check should exit 2; stdout:\n{out}\nstderr:\n{err}"
    );
    let first = first_line(&err);
    let want = format!("{}:{line}", path.display());
    assert!(
        first.contains(&want),
        "first stderr line should contain {want:?}: {first:?}\nstderr:\n{err}"
    );
    first
}

fn valid_config(p1: u16, p2: u16, web: &[SocketAddr], db: &[SocketAddr], log: &Path) -> String {
    let webs: Vec<String> = web.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        r#"# two listeners, each with its own pool and mode
workers = 2
connect_timeout = "1s"
blacklist = 2
fin_timeout = "1s"
drain_timeout = "3s"
log = "{log}"

[[listener]]
name = "web"
listen = "127.0.0.1:{p1}"
mode = ["roundrobin"]
servers = [{webs}]

[[listener]]
name = "db"
listen = "127.0.0.1:{p2}"
mode = ["prio", "roundrobin"]
servers = [
  {{ address = "{d0}", prio = 1 }},
  {{ address = "{d1}", prio = 0, weight = 2 }},
]
"#,
        log = log.display(),
        webs = webs.join(", "),
        d0 = db[0],
        d1 = db[1],
    )
}

#[test]
fn config_two_listeners_each_with_own_pool_and_mode_work_end_to_end() {
    let (w1, w2, w3) = (greet("web-1"), greet("web-2"), greet("web-3"));
    let (d0, d1) = (greet("db-0"), greet("db-1"));
    let web = [w1.addr(), w2.addr(), w3.addr()];
    let db = [d0.addr(), d1.addr()];
    let p2_shared = std::sync::Mutex::new(0u16);
    let mut q = Quill::start_with(|dir, p1| {
        let p2 = free_port();
        *p2_shared.lock().unwrap() = p2;
        let cfg = write_cfg(
            dir,
            "quill.toml",
            &valid_config(p1, p2, &web, &db, &dir.join("access.log")),
        );
        vec!["--config".into(), cfg.display().to_string()]
    });
    let p2 = *p2_shared.lock().unwrap();
    // Second listener ready too (bounded poll; the probe is a session we let settle).
    let (probe, _) = q
        .wait_ready_tcp(SocketAddr::from(([127, 0, 0, 1], p2)))
        .unwrap_or_else(|e| panic!("{e}"));
    drop(probe);
    q.settle();
    run_two_listener_checks(&q, p2);
}

fn run_two_listener_checks(q: &QuillProcess, p2: u16) {
    // web: round robin without tracking over three backends: 9 sequential clients, 3 each.
    let names: Vec<String> = (0..9).map(|_| greet_name(q.port)).collect();
    let t = tally(&names);
    assert_eq!(
        t.len(),
        3,
        "web listener should use all three web backends: {names:?}"
    );
    for (name, n) in &t {
        assert!(name.starts_with("web-"), "web listener answered by {name}");
        assert_eq!(*n, 3, "round robin share of {name}: {names:?}");
    }
    // db: prio: every client goes to the prio-0 server db-1.
    for _ in 0..6 {
        let (name, mut s) = greet_session(p2);
        assert_eq!(
            name, "db-1",
            "db listener (prio) should always pick the prio 0 server"
        );
        echo_roundtrip(&mut s, b"select 1;\n");
    }
    // The log key from the config is used.
    let lines = q.wait_log_lines(q.probes + 15, Duration::from_secs(5));
    assert!(lines.iter().all(|l| l.client == "127.0.0.1"), "{lines:#?}");
}

#[test]
fn config_check_valid_exits_0_and_explains_listeners() {
    let dir = scratch_dir();
    let a = [refused_addr(), refused_addr(), refused_addr()];
    let b = [refused_addr(), refused_addr()];
    let (p1, p2) = (free_port(), free_port());
    let cfg = write_cfg(
        dir.path(),
        "ok.toml",
        &valid_config(p1, p2, &a, &b, &dir.path().join("a.log")),
    );
    let (code, out, err) = check(&cfg);
    assert_eq!(
        code, 0,
        "valid config should check OK; stderr:\n{err}\nstdout:\n{out}"
    );
    let lower = out.to_lowercase();
    assert!(
        lower.contains("listener"),
        "check output should explain the listeners:\n{out}"
    );
    for (name, port) in [("web", p1), ("db", p2)] {
        assert!(
            out.contains(name) || out.contains(&format!("127.0.0.1:{port}")),
            "check output should mention listener {name} / 127.0.0.1:{port}:\n{out}"
        );
    }
}

#[test]
fn config_unknown_key_reports_file_and_line() {
    let dir = scratch_dir();
    let text = "workers = 2\nfrobnicate = true\n\n[[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:1\"\nservers = [\"127.0.0.1:2\"]\n";
    let cfg = write_cfg(dir.path(), "unknown.toml", text);
    let first = expect_check_error_at(&cfg, line_of(text, "frobnicate"));
    assert!(
        first.contains("frobnicate"),
        "error should name the unknown key: {first:?}"
    );

    // Unknown key inside a listener table.
    let text = "[[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:1\"\nservers = [\"127.0.0.1:2\"]\nwieght = 3\n";
    let cfg = write_cfg(dir.path(), "unknown2.toml", text);
    let first = expect_check_error_at(&cfg, line_of(text, "wieght"));
    assert!(
        first.contains("wieght"),
        "error should name the unknown key: {first:?}"
    );
}

#[test]
fn config_bad_duration_reports_file_and_line() {
    let dir = scratch_dir();
    let text = "workers = 1\nconnect_timeout = \"3 parsecs\"\n[[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:1\"\nservers = [\"127.0.0.1:2\"]\n";
    let cfg = write_cfg(dir.path(), "dur.toml", text);
    expect_check_error_at(&cfg, line_of(text, "parsecs"));
}

#[test]
fn config_bad_server_address_reports_file_and_line() {
    let dir = scratch_dir();
    let text = "[[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:1\"\nservers = [\n  \"127.0.0.1:2\",\n  \"127.0.0.1:notaport\",\n]\n";
    let cfg = write_cfg(dir.path(), "srv.toml", text);
    let (code, out, err) = check(&cfg);
    assert_eq!(
        code, 2,
        "bad server should fail the check; stdout:\n{out}\nstderr:\n{err}"
    );
    let first = first_line(&err);
    let path = cfg.display().to_string();
    // The error points into the servers list (the bad entry's line, or the `servers =` line).
    let ok_lines = [line_of(text, "notaport"), line_of(text, "servers")];
    assert!(
        ok_lines
            .iter()
            .any(|l| first.contains(&format!("{path}:{l}"))),
        "first stderr line should point at {path}:{ok_lines:?}: {first:?}"
    );
}

#[test]
fn config_missing_listen_reports_file_and_line() {
    let dir = scratch_dir();
    let text = "workers = 1\n\n[[listener]]\nname = \"nolisten\"\nservers = [\"127.0.0.1:2\"]\n";
    let cfg = write_cfg(dir.path(), "nolisten.toml", text);
    let (code, out, err) = check(&cfg);
    assert_eq!(
        code, 2,
        "missing listen should fail; stdout:\n{out}\nstderr:\n{err}"
    );
    let first = first_line(&err);
    let prefix = format!("{}:", cfg.display());
    let at = first
        .find(&prefix)
        .unwrap_or_else(|| panic!("first line should contain {prefix:?}: {first:?}"));
    let line: usize = first[at + prefix.len()..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("no line number after {prefix:?}: {first:?}"));
    // The listener table spans from its header to the end of the file.
    let (from, to) = (line_of(text, "[[listener]]"), text.lines().count());
    assert!(
        (from..=to).contains(&line),
        "line {line} should be within the listener table {from}..={to}: {first:?}"
    );
    assert!(
        first.contains("listen"),
        "error should name the missing key: {first:?}"
    );
}

#[test]
fn config_error_at_startup_exits_2() {
    let dir = scratch_dir();
    let text = "frobnicate = 1\n";
    let cfg = write_cfg(dir.path(), "bad.toml", text);
    let (code, err) = run_quill_expect_exit(&["--config", cfg.to_str().unwrap()]);
    assert_eq!(
        code, 2,
        "bad config at startup should exit 2; stderr:\n{err}"
    );
    assert!(
        first_line(&err).contains(&format!("{}:1", cfg.display())),
        "stderr:\n{err}"
    );
}

#[test]
fn config_example_file_exists_and_validates() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quill.toml");
    assert!(
        p.exists(),
        "examples/quill.toml must exist (the documented example config)"
    );
    let (code, out, err) = check(&p);
    assert_eq!(
        code, 0,
        "examples/quill.toml should validate; stdout:\n{out}\nstderr:\n{err}"
    );
    assert!(
        out.to_lowercase().contains("listener"),
        "check output:\n{out}"
    );
}

/// An HTTP listener (Apache combined lines) and a TCP listener (Pen's lines) on one access log
/// file: `quill check` and a start refuse it, at the TCP listener's line, saying which listeners,
/// which formats, which file and how to fix it. Each with its own file, or both in JSON, is fine.
#[test]
fn check_refuses_http_and_tcp_listeners_logging_to_one_file() {
    let dir = scratch_dir();
    let log = dir.path().join("access.log");
    let mixed = format!(
        "log = \"{}\"\n\
         [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{}\"\nprotocol = \"http\"\nservers = [\"127.0.0.1:9\"]\n\
         [[listener]]\nname = \"tcp\"\nlisten = \"127.0.0.1:{}\"\nservers = [\"127.0.0.1:9\"]\n",
        log.display(),
        free_port(),
        free_port()
    );
    let cfg = write_cfg(dir.path(), "mixed.toml", &mixed);
    let first = expect_check_error_at(&cfg, line_of(&mixed, "name = \"tcp\""));
    for word in [
        "'tcp'",
        "'web'",
        "Pen",
        "combined",
        "access.log",
        "its own file",
        "log =",
    ] {
        assert!(first.contains(word), "{word:?} in {first:?}");
    }
    // A start is refused the same way, before anything listens.
    let (code, err) = run_quill_expect_exit(&["--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 2, "start should exit 2; stderr:\n{err}");
    assert!(first_line(&err).contains("'tcp'"), "{err}");
    // A listener's own `log` on the process-wide file is the same file: refused at its `log` line.
    let own_same = mixed.replace(
        "name = \"tcp\"\n",
        &format!("name = \"tcp\"\nlog = \"{}\"\n", log.display()),
    );
    let cfg = write_cfg(dir.path(), "own-same.toml", &own_same);
    let first = expect_check_error_at(&cfg, line_of(&own_same, "name = \"tcp\"") + 1);
    assert!(
        first.contains("give listener 'web' its own file"),
        "{first}"
    );
    // Fixed: the TCP listener gets its own file.
    let tcp_log = dir.path().join("tcp.log");
    let fixed = mixed.replace(
        "name = \"tcp\"\n",
        &format!("name = \"tcp\"\nlog = \"{}\"\n", tcp_log.display()),
    );
    let cfg = write_cfg(dir.path(), "fixed.toml", &fixed);
    let (code, out, err) = check(&cfg);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        out.contains(&format!("access log {}: Apache combined", log.display())),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "access log {}: Pen's session lines",
            tcp_log.display()
        )) && out.contains("its own file"),
        "{out}"
    );
    // JSON for both: one JSON object per line whatever the listener, so one file is fine.
    let json = mixed.replace("log = ", "log_format = \"json\"\nlog = ");
    let cfg = write_cfg(dir.path(), "json.toml", &json);
    let (code, out, err) = check(&cfg);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    // But not text and JSON in one file.
    let half = mixed.replace(
        "name = \"tcp\"\n",
        "name = \"tcp\"\nlog_format = \"json\"\n",
    );
    let cfg = write_cfg(dir.path(), "half.toml", &half);
    let first = expect_check_error_at(&cfg, line_of(&half, "name = \"tcp\""));
    assert!(first.contains("JSON lines"), "{first}");
}

#[test]
fn config_bad_listen_per_worker_reports_file_and_line() {
    let dir = scratch_dir();
    let text = "workers = 2\nlisten_per_worker = \"yes\"\n[[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:1\"\nservers = [\"127.0.0.1:2\"]\n";
    let cfg = write_cfg(dir.path(), "per_worker.toml", text);
    // The line is the key's; the message says what it takes (as for every boolean key).
    let first = expect_check_error_at(&cfg, line_of(text, "listen_per_worker"));
    assert!(
        first.contains("\"yes\", expected a boolean"),
        "error should say a boolean is expected: {first:?}"
    );
}
