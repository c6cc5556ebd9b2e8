//! Turning HTTP mode on in the configuration: `-H` / `--http` on the command line, `protocol =
//! "http"` with `[http]` defaults and `[listener.http]` overrides in TOML, the errors for bad
//! HTTP settings (one line, naming the key, the value and FILE:LINE), what `quill check` says of
//! an HTTP listener, and `write` keeping an HTTP listener HTTP.

use crate::ctl;
use crate::http_support;
use crate::support;

use std::path::{Path, PathBuf};

use ctl::*;
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

/// Expects `quill check` of `text` to exit 2 with one stderr line that starts with
/// `quill: error: PATH:LINE:` (LINE: the line holding `at`) and contains every `needles`.
fn expect_refused(text: &str, at: &str, needles: &[&str]) -> String {
    let dir = scratch_dir();
    let path = write_cfg(dir.path(), "q.toml", text);
    let (code, out, err) = check(&path);
    assert_eq!(
        code, 2,
        "check should exit 2; stdout:\n{out}\nstderr:\n{err}"
    );
    assert_eq!(err.lines().count(), 1, "one error line: {err:?}");
    let want = format!("quill: error: {}:{}: ", path.display(), line_of(text, at));
    assert!(err.starts_with(&want), "{err:?} should start with {want:?}");
    for needle in needles {
        assert!(err.contains(needle), "{err:?} should contain {needle:?}");
    }
    err
}

const WEB: &str = r#"[[listener]]
name = "web"
listen = "127.0.0.1:18080"
servers = ["127.0.0.1:9001"]
"#;

/// An HTTP listener's TOML with `body` in its `[listener.http]` table.
fn http_listener(body: &str) -> String {
    format!("{WEB}protocol = \"http\"\n[listener.http]\n{body}\n")
}

const HTTP_LINE: &str = "HTTP listener (protocol http)";

#[test]
fn http_flag_makes_an_http_listener() {
    // Checked without starting: the command line `quill -H ...` would start.
    let (code, out, err) = run_quill_output(&["check", "-H", "18080", "127.0.0.1:9001"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.starts_with("command line: OK\n"), "{out}");
    assert!(
        out.contains(&format!("{HTTP_LINE}, every HTTP setting at its default")),
        "{out}"
    );
    let (code, out, _) = run_quill_output(&["check", "--http", "18080", "127.0.0.1:9001"]);
    assert_eq!(code, 0);
    assert!(out.contains(HTTP_LINE), "{out}");
    // Without -H the same command line is a TCP listener.
    let (code, out, _) = run_quill_output(&["check", "18080", "127.0.0.1:9001"]);
    assert_eq!(code, 0);
    assert!(!out.contains(HTTP_LINE), "{out}");
    // With a file: every listener, with the file's [http] settings.
    let dir = scratch_dir();
    let path = write_cfg(
        dir.path(),
        "q.toml",
        &format!("[http]\nmax_body = \"1m\"\n{WEB}"),
    );
    let (code, out, _) = check(&path);
    assert_eq!(code, 0);
    assert!(!out.contains(HTTP_LINE), "{out}");
    let (code, out, err) = run_quill_output(&["check", "--config", path.to_str().unwrap(), "-H"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "{HTTP_LINE}, settings that differ from the defaults: max_body 1m"
        )),
        "{out}"
    );
    // And a real process started with -H runs an HTTP listener (no longer "not supported yet"):
    // its `write` says so.
    let backend = greet("a");
    let (q, sock) = start_ctl(&["-H"], &[spec(backend.addr())]);
    let saved = q.path("saved.cmds");
    ctl_ok(&sock, &format!("write {}", saved.display()));
    let written = std::fs::read_to_string(&saved).unwrap();
    assert!(written.contains("# listener default: HTTP"), "{written}");
}

#[test]
fn http_flag_is_shown_in_help() {
    let (code, out, err) = run_quill_output(&["-H", "--help"]);
    assert_eq!(code, 0, "{err}");
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("-H, --http"))
        .unwrap_or_else(|| panic!("no -H, --http in --help:\n{out}"));
    assert!(line.contains("HTTP"), "{line}");
}

#[test]
fn toml_protocol_http_with_listener_overrides() {
    let text = r#"[http]
max_body = "10m"
via = "edge"
request_headers = { remove = ["X-Debug"], set = { "X-Env" = "prod" } }

[[listener]]
name = "web"
listen = "127.0.0.1:18080"
protocol = "http"
servers = ["127.0.0.1:9001"]
[listener.http]
response_timeout = "5s"
max_header_bytes = "12k"
via = false

[[listener]]
name = "api"
listen = "127.0.0.1:18081"
protocol = "http"
servers = ["127.0.0.1:9001"]

[[listener]]
name = "db"
listen = "127.0.0.1:18082"
protocol = "tcp"
servers = ["127.0.0.1:9001"]
"#;
    let dir = scratch_dir();
    let path = write_cfg(dir.path(), "q.toml", text);
    let (code, out, err) = check(&path);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    // The explanation of each listener runs to the next `listener '` line.
    let section = |name: &str| -> String {
        let start = out
            .find(&format!("listener '{name}'"))
            .unwrap_or_else(|| panic!("no listener {name} in:\n{out}"));
        let rest = &out[start + 1..];
        let end = rest.find("\nlistener '").map_or(rest.len(), |i| i + 1);
        out[start..start + 1 + end].to_string()
    };
    let web = section("web");
    assert!(
        web.contains(&format!(
            "{HTTP_LINE}, settings that differ from the defaults: response_timeout 5s; \
             max_body 10m; max_header_bytes 12k; request_headers remove X-Debug, set X-Env: prod\n"
        )),
        "{web}"
    );
    let api = section("api");
    assert!(
        api.contains(&format!(
            "{HTTP_LINE}, settings that differ from the defaults: max_body 10m; via \"edge\"; \
             request_headers remove X-Debug, set X-Env: prod\n"
        )),
        "{api}"
    );
    assert!(!section("db").contains("HTTP"), "{}", section("db"));
}

#[test]
fn listener_http_on_a_tcp_listener_is_an_error_with_file_and_line() {
    let text = format!("{WEB}[listener.http]\nresponse_timeout = \"5s\"\n");
    expect_refused(
        &text,
        "[listener.http]",
        &[
            "listener 'web'",
            "[listener.http] needs protocol = \"http\"",
        ],
    );
    let text = format!("{WEB}protocol = \"tcp\"\nhttp = {{ max_headers = 50 }}\n");
    expect_refused(&text, "http = {", &["listener 'web'", "needs protocol"]);
}

#[test]
fn bad_header_edit_name_is_refused() {
    expect_refused(
        &http_listener(r#"request_headers = { set = { "X Env" = "prod" } }"#),
        "request_headers",
        &["request_headers: 'X Env' is not a valid header name"],
    );
    expect_refused(
        &http_listener(r#"response_headers = { remove = ["Bad:Name"] }"#),
        "response_headers",
        &["response_headers: 'Bad:Name' is not a valid header name"],
    );
    // A value with CR LF would smuggle a header: refused, the message escaped on one line.
    expect_refused(
        &http_listener(r#"request_headers = { add = { "X-A" = "1\r\nX-Admin: yes" } }"#),
        "request_headers",
        &["request_headers: the value of X-A", "\\r"],
    );
    expect_refused(
        &format!("[http]\nrequest_headers = {{ set = {{ \"Content-Length\" = \"0\" }} }}\n{WEB}"),
        "request_headers",
        &["Content-Length cannot be edited"],
    );
}

#[test]
fn bad_size_is_refused_with_the_key() {
    expect_refused(
        &http_listener("max_body = \"10q\""),
        "max_body",
        &["max_body: invalid size '10q'", "k, m or g"],
    );
    expect_refused(
        &format!("[http]\nmax_header_bytes = \"4m\"\n{WEB}"),
        "max_header_bytes",
        &["max_header_bytes: 4194304 is out of range (256 to 16384)"],
    );
    expect_refused(
        &http_listener("max_request_line = 100"),
        "max_request_line",
        &["max_request_line: 100 is out of range (256 to 16384)"],
    );
    expect_refused(
        &http_listener("max_request_line = \"16k\"\nmax_header_bytes = \"8k\""),
        "max_request_line",
        &["max_request_line: 16384 is more than max_header_bytes 8192"],
    );
    expect_refused(
        &http_listener("max_headers = 0"),
        "max_headers",
        &["max_headers: 0 is out of range (1 to 1000)"],
    );
    expect_refused(
        &http_listener("header_timeout = 0"),
        "header_timeout",
        &["header_timeout: 0s must be more than 0"],
    );
    expect_refused(
        &http_listener("trusted_proxies = [\"10.0.0.0/40\"]"),
        "trusted_proxies",
        &["trusted_proxies: '10.0.0.0/40'"],
    );
}

#[test]
fn protocols_other_than_tcp_http_and_udp_are_refused() {
    // protocol = "udp" is supported since docs/design.md#layer-4-beyond-tcp (tests/udp/udp.rs), but
    // not with HTTP settings.
    expect_refused(
        &format!("{WEB}protocol = \"udp\"\n[listener.http]\nmax_headers = 5\n"),
        "name",
        &["[listener.http] (not with protocol = \"udp\")"],
    );
    expect_refused(
        &format!("{WEB}protocol = \"quic\"\n"),
        "protocol",
        &["invalid protocol 'quic' (expected tcp, http or udp)"],
    );
}

#[test]
fn tcp_fastclose_on_an_http_listener_is_refused() {
    expect_refused(
        &format!("{WEB}protocol = \"http\"\ntcp_fastclose = \"both\"\n"),
        "tcp_fastclose",
        &["tcp_fastclose: 'both' does not apply to HTTP listener 'web'"],
    );
    // On the command line, through -O.
    let (code, _, err) = run_quill_output(&[
        "check",
        "-H",
        "-O",
        "tcp_fastclose both",
        "18080",
        "127.0.0.1:9001",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("tcp_fastclose both: does not apply to an HTTP listener"),
        "{err}"
    );
}

#[test]
fn write_round_trip_keeps_an_http_listener_http() {
    let backend = greet("a");
    let toml = |port: u16| {
        format!(
            "[http]\nmax_body = \"2m\"\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\n\
             protocol = \"http\"\nservers = [\"{}\"]\n[listener.http]\nresponse_timeout = \"7s\"\n",
            backend.addr()
        )
    };
    let q = Quill::start_with(|dir, port| {
        let path = write_cfg(dir, "q.toml", &toml(port));
        vec![
            "--config".into(),
            path.display().to_string(),
            "-C".into(),
            dir.join("ctl.sock").display().to_string(),
        ]
    });
    let sock = q.path("ctl.sock");
    wait_ctl(&q, &sock);
    ctl_ok(&sock, "server 0 weight 3");
    let saved = q.path("saved.cmds");
    ctl_ok(&sock, &format!("write {}", saved.display()));
    // What a restart would load: the same file, then the written commands.
    let again = format!("command_file = \"{}\"\n{}", saved.display(), toml(q.port));
    let path = write_cfg(&q.path(""), "again.toml", &again);
    let (code, out, err) = check(&path);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        out.contains(&format!(
            "{HTTP_LINE}, settings that differ from the defaults: response_timeout 7s; max_body 2m\n"
        )),
        "{out}"
    );
    assert!(
        out.contains("weight 3"),
        "the runtime change came back: {out}"
    );
}

#[test]
fn reload_keeps_an_http_listener_http_and_applies_the_files_change() {
    let backend = greet("a");
    let toml = |port: u16, protocol: &str| {
        format!(
            "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"{protocol}\"\n\
             servers = [\"{}\"]\n",
            backend.addr()
        )
    };
    let q = Quill::start_with(|dir, port| {
        let path = write_cfg(dir, "q.toml", &toml(port, "tcp"));
        vec![
            "--config".into(),
            path.display().to_string(),
            "-C".into(),
            dir.join("ctl.sock").display().to_string(),
        ]
    });
    let sock = q.path("ctl.sock");
    wait_ctl(&q, &sock);
    let written = |name: &str| {
        let saved = q.path(name);
        ctl_ok(&sock, &format!("write {}", saved.display()));
        std::fs::read_to_string(&saved).unwrap()
    };
    assert!(!written("tcp.cmds").contains("HTTP"));
    // The file now says HTTP: a reload makes the listener HTTP.
    write_cfg(&q.path(""), "q.toml", &toml(q.port, "http"));
    ctl_ok(&sock, "reload");
    assert!(written("http.cmds").contains("# listener web: HTTP"));
    // A reload of the same file keeps it HTTP.
    ctl_ok(&sock, "reload");
    assert!(written("again.cmds").contains("# listener web: HTTP"));
}

#[test]
fn reload_keeps_the_http_flag_of_the_command_line() {
    let backend = greet("a");
    let (q, sock) = start_ctl(&["-H"], &[spec(backend.addr())]);
    ctl_ok(&sock, "reload");
    let saved = q.path("saved.cmds");
    ctl_ok(&sock, &format!("write {}", saved.display()));
    let written = std::fs::read_to_string(&saved).unwrap();
    assert!(written.contains("# listener default: HTTP"), "{written}");
}

#[test]
fn http_error_pages_replace_the_body_of_quills_own_answers() {
    // The only server is a port nobody listens on: every request gets Quill's 503.
    let dead = free_port();
    let page = "<html><body>Back soon</body></html>\n";
    let q = Quill::start_with(|dir, port| {
        std::fs::create_dir_all(dir.join("pages")).unwrap();
        std::fs::write(dir.join("pages/503.html"), page).unwrap();
        let text = format!(
            "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
             servers = [\"127.0.0.1:{dead}\"]\n[listener.http]\n\
             error_pages = {{ 503 = \"pages/503.html\" }}\n"
        );
        let path = write_cfg(dir, "q.toml", &text);
        vec!["--config".into(), path.display().to_string()]
    });
    let mut c = std::net::TcpStream::connect(q.addr()).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    std::io::Write::write_all(&mut c, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut reply = String::new();
    std::io::Read::read_to_string(&mut c, &mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 503 "), "{reply}");
    assert!(
        reply.contains("\r\nContent-Type: text/html; charset=utf-8\r\n"),
        "{reply}"
    );
    assert!(
        reply.contains(&format!("\r\nContent-Length: {}\r\n", page.len())),
        "{reply}"
    );
    assert!(reply.contains("\r\nConnection: close\r\n"), "{reply}");
    assert!(reply.ends_with(&format!("\r\n\r\n{page}")), "{reply}");
}

#[test]
fn http_error_pages_name_a_missing_file_or_a_status_quill_does_not_answer() {
    let missing = expect_refused(
        &http_listener("error_pages = { 503 = \"nope/503.html\" }"),
        "error_pages",
        &["error_pages: 503: ", "nope/503.html"],
    );
    assert!(missing.contains("No such file"), "{missing}");
    expect_refused(
        &http_listener("error_pages = { 200 = \"ok.html\" }"),
        "error_pages",
        &["error_pages: '200' is not a status Quill answers itself"],
    );
}

#[test]
fn http_error_pages_also_give_a_routes_own_answers_their_body_and_keep_the_connection() {
    // No servers of its own: what no route takes is Quill's 404; `/private` is denied (403).
    let q = Quill::start_with(|dir, port| {
        std::fs::write(dir.join("404.txt"), "nothing here\n").unwrap();
        std::fs::write(dir.join("403.htm"), "<p>no</p>\n").unwrap();
        let text = format!(
            "[http]\nerror_pages = {{ 404 = \"404.txt\", 403 = \"403.htm\" }}\n\
             [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
             [[listener.route]]\nname = \"private\"\npath = \"/private\"\ndeny = true\n"
        );
        let path = write_cfg(dir, "q.toml", &text);
        vec!["--config".into(), path.display().to_string()]
    });
    let mut c = http_support::Client::connect(q.addr());
    let r = c.roundtrip(b"GET /elsewhere HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.status, 404);
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.body, b"nothing here\n");
    // The same connection: Quill's own answers to a route keep it alive.
    let r = c.roundtrip(b"GET /private HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.status, 403);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(r.body, b"<p>no</p>\n");
}
