//! FastCGI through the real binary (docs/fastcgi.md): a `[[pool]]` with `protocol = "fastcgi"`
//! and the `fastcgi` route action, against Debian's php-fpm over a Unix socket and over TCP, and
//! fcgiwrap running a shell script: nginx's parameters, bodies with a length and chunked, the
//! response's status, fields and framing, stderr to Quill's log, scripts that must exist beneath
//! the root, httpoxy, the client's address through the PROXY protocol, timeouts, a server that
//! dies, and connections kept between requests.

use crate::http_support;
use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use http_support::*;
use support::*;

const PHP_FPM: &str = "/usr/sbin/php-fpm8.2";
const FCGIWRAP: &str = "/usr/sbin/fcgiwrap";

/// A child process in a process group of its own, the whole group stopped by its PID when
/// dropped (php-fpm's workers outlive a master killed alone).
struct Peer {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Peer {
    fn kill(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// php-fpm with two pools of two children each over the same scripts: one on a Unix socket, one
/// on 127.0.0.1.
struct Php {
    peer: Peer,
    sock: PathBuf,
    tcp: SocketAddr,
    www: PathBuf,
}

fn write_scripts(www: &Path) {
    let w = |name: &str, text: &str| {
        let p = www.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    w("hello.php", "<?php echo \"hello from php\\n\";");
    w(
        "env.php",
        "<?php header('Content-Type: application/json'); $k = ['SCRIPT_NAME','SCRIPT_FILENAME','PATH_INFO','QUERY_STRING','REQUEST_URI','DOCUMENT_URI','REQUEST_METHOD','REMOTE_ADDR','SERVER_PORT','SERVER_NAME','HTTPS','HTTP_X_TEST','HTTP_HOST','CONTENT_TYPE','CONTENT_LENGTH']; $o = []; foreach ($k as $n) { $o[$n] = $_SERVER[$n] ?? null; } $o['getenv_HTTP_PROXY'] = getenv('HTTP_PROXY'); $o['server_HTTP_PROXY'] = $_SERVER['HTTP_PROXY'] ?? null; echo json_encode($o);",
    );
    w(
        "big.php",
        "<?php echo str_repeat('0123456789abcdef', 65536);",
    );
    w("post.php", "<?php echo file_get_contents('php://input');");
    w(
        "missing.php",
        "<?php http_response_code(404); header('X-Custom: yes'); echo 'nope';",
    );
    w(
        "redirect.php",
        "<?php header('Location: https://example.com/there');",
    );
    w(
        "warn.php",
        "<?php error_log('quill-stderr-marker'); echo 'warned';",
    );
    w("sleep.php", "<?php sleep(4); echo 'late';");
    w("nap.php", "<?php usleep(20000); echo getmypid();");
    w(
        "partial.php",
        "<?php header('Content-Type: text/plain'); echo str_repeat('x', 100000); flush(); sleep(5); echo 'end';",
    );
    w(
        "length.php",
        "<?php header('Content-Length: 5'); echo 'exact';",
    );
    w("index.php", "<?php echo 'front ', $_SERVER['REQUEST_URI'];");
    w("fpm-status.php", "");
    w("uploads/evil.jpg", "<?php echo 'must never run';");
    w("static.txt", "not a script\n");
}

/// Starts php-fpm over a fresh directory of scripts.
fn start_php() -> Php {
    let dir = scratch_dir();
    let www = dir.path().join("www");
    write_scripts(&www);
    let sock = dir.path().join("php.sock");
    let port = free_port();
    let conf = format!(
        "[global]\npid = {d}/fpm.pid\nerror_log = {d}/fpm.log\ndaemonize = no\n\
         [unix]\nlisten = {sock}\nlisten.mode = 0666\npm = static\npm.max_children = 2\n\
         pm.status_path = /fpm-status.php\ncatch_workers_output = no\n\
         [tcp]\nlisten = 127.0.0.1:{port}\npm = static\npm.max_children = 2\n\
         pm.status_path = /fpm-status.php\n",
        d = dir.path().display(),
        sock = sock.display(),
    );
    let conf_path = dir.path().join("php-fpm.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let mut cmd = Command::new(PHP_FPM);
    cmd.args(["-F", "-n", "-y"]).arg(&conf_path);
    // Root runs it only when told to (CI runs as root).
    if rustix_is_root() {
        cmd.arg("-R");
    }
    let child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect(
            "php-fpm8.2 (Debian package php8.2-fpm) must be installed: scripts/test installs it",
        );
    let tcp: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let peer = Peer { child, _dir: dir };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(sock.exists() && TcpStream::connect(tcp).is_ok()) {
        assert!(Instant::now() < deadline, "php-fpm did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Php {
        peer,
        sock,
        tcp,
        www,
    }
}

fn rustix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Quill with a FastCGI pool of `server` and a route sending every request to it for the
/// scripts of `www`; `listener` and `http` are extra lines of the listener and its
/// `[listener.http]`, `action` extra keys of the `fastcgi` action.
fn quill(server: &str, www: &Path, listener: &str, http: &str, action: &str) -> QuillProcess {
    quill_in(
        "workers = 1",
        &format!("\"{server}\""),
        www,
        listener,
        http,
        action,
    )
}

/// As [`quill`], with `top` as the file's first lines and `server` the TOML value of the pool's
/// one server (a string or a table).
fn quill_in(
    top: &str,
    server: &str,
    www: &Path,
    listener: &str,
    http: &str,
    action: &str,
) -> QuillProcess {
    let (q, _probe, _) = Quill::spawn_first(|dir, port| {
        let cfg = dir.join("quill.toml");
        let text = format!(
            "{top}\nlog = \"{log}\"\n\
             [[pool]]\nname = \"php\"\nprotocol = \"fastcgi\"\nservers = [{server}]\n\
             [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n{listener}\n\
             [listener.http]\n{http}\n\
             [[listener.route]]\nname = \"php\"\nfastcgi = {{ pool = \"php\", root = \"{www}\"{action} }}\n",
            log = dir.join("access.log").display(),
            www = www.display(),
        );
        std::fs::write(&cfg, text).unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    });
    q
}

fn php_quill(php: &Php) -> QuillProcess {
    quill(&php.sock.display().to_string(), &php.www, "", "", "")
}

fn get_from(q: &QuillProcess, target: &str, extra: &str) -> Response {
    Client::connect(q.addr()).roundtrip(&request("GET", target, extra, b""))
}

/// The JSON value of `key` in env.php's answer, as text (`null` for a missing one).
fn json_field(body: &[u8], key: &str) -> String {
    let text = String::from_utf8_lossy(body);
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    match &v[key] {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[test]
fn a_php_script_answers_over_a_unix_socket_and_over_tcp() {
    let php = start_php();
    for server in [php.sock.display().to_string(), php.tcp.to_string()] {
        let q = quill(&server, &php.www, "", "", "");
        let r = get_from(&q, "/hello.php", "");
        assert_eq!(r.status, 200, "{server}: {}", show(&r.raw_head));
        assert_eq!(r.body, b"hello from php\n", "{server}");
        assert!(
            r.header("content-type")
                .is_some_and(|v| v.starts_with("text/html")),
            "{server}: {}",
            show(&r.raw_head)
        );
        // No length from PHP: chunked to an HTTP/1.1 client.
        assert_eq!(r.header("transfer-encoding"), Some("chunked"), "{server}");
        // The access log names the source.
        let deadline = Instant::now() + Duration::from_secs(5);
        let logged = loop {
            let text = std::fs::read_to_string(q.log_path()).unwrap_or_default();
            if text.contains("/hello.php") || Instant::now() > deadline {
                break text;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let line = logged
            .lines()
            .find(|l| l.contains("/hello.php"))
            .unwrap_or("");
        assert!(line.contains(" fastcgi "), "{logged}");
    }
}

#[test]
fn parameters_name_the_script_path_info_query_and_client_as_nginx_does() {
    let php = start_php();
    let q = php_quill(&php);
    let r = get_from(&q, "/env.php/extra/path?a=1&b=2", "X-Test: yes\r\n");
    assert_eq!(r.status, 200, "{}", show(&r.raw_head));
    let f = |k| json_field(&r.body, k);
    assert_eq!(f("SCRIPT_NAME"), "/env.php");
    assert_eq!(
        f("SCRIPT_FILENAME"),
        format!("{}/env.php", php.www.display())
    );
    assert_eq!(f("PATH_INFO"), "/extra/path");
    assert_eq!(f("QUERY_STRING"), "a=1&b=2");
    assert_eq!(f("REQUEST_URI"), "/env.php/extra/path?a=1&b=2");
    assert_eq!(f("DOCUMENT_URI"), "/env.php/extra/path");
    assert_eq!(f("REQUEST_METHOD"), "GET");
    assert_eq!(f("REMOTE_ADDR"), "127.0.0.1");
    assert_eq!(f("SERVER_PORT"), q.port.to_string());
    assert_eq!(f("HTTP_X_TEST"), "yes");
    assert_eq!(f("HTTPS"), "null");
}

#[test]
fn an_http_1_0_client_gets_the_response_ended_by_the_close() {
    let php = start_php();
    let q = php_quill(&php);
    let mut s = TcpStream::connect(q.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /hello.php HTTP/1.0\r\nHost: h\r\n\r\n")
        .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("\r\n\r\nhello from php\n"), "{text}");
    // The next HTTP/1.1 request on another connection still works (the pool is not stuck).
    assert_eq!(get_from(&q, "/hello.php", "").body, b"hello from php\n");
}

#[test]
fn a_proxy_header_never_becomes_http_proxy() {
    let php = start_php();
    let q = php_quill(&php);
    let r = get_from(&q, "/env.php", "Proxy: http://evil.example:8080\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(json_field(&r.body, "getenv_HTTP_PROXY"), "false");
    assert_eq!(json_field(&r.body, "server_HTTP_PROXY"), "null");
}

#[test]
fn the_client_address_of_a_proxy_protocol_header_is_remote_addr() {
    let php = start_php();
    let q = quill(
        &php.sock.display().to_string(),
        &php.www,
        "accept_proxy = [\"127.0.0.0/8\"]",
        "",
        "",
    );
    let mut s = TcpStream::connect(q.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"PROXY TCP4 203.0.113.9 127.0.0.1 40000 80\r\nGET /env.php HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    let body = &text[text.find("\r\n\r\n").expect("a response") + 4..];
    // Chunked: the JSON is the first chunk's data.
    let json = &body[body.find('{').unwrap()..=body.rfind('}').unwrap()];
    assert_eq!(json_field(json.as_bytes(), "REMOTE_ADDR"), "203.0.113.9");
}

#[test]
fn request_bodies_with_a_length_and_chunked_reach_php_whole() {
    let php = start_php();
    let q = php_quill(&php);
    let body = body_pattern(300_000);
    let mut c = Client::connect(q.addr());
    let r = c.roundtrip(&request("POST", "/post.php", "", &body));
    assert_eq!(r.status, 200, "{}", show(&r.raw_head));
    assert!(r.body == body, "{} bytes back", r.body.len());
    // Chunked: collected, then sent with its length (PHP reads CONTENT_LENGTH bytes).
    let mut chunked = Vec::new();
    for piece in body.chunks(70_000) {
        chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        chunked.extend_from_slice(piece);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let mut head =
        b"POST /post.php HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    head.extend_from_slice(&chunked);
    let r = c.roundtrip(&head);
    assert_eq!(r.status, 200, "{}", show(&r.raw_head));
    assert!(r.body == body, "{} bytes back", r.body.len());
}

#[test]
fn a_chunked_body_over_max_body_is_413() {
    let php = start_php();
    let q = quill(
        &php.sock.display().to_string(),
        &php.www,
        "",
        "max_body = \"1k\"",
        "",
    );
    let mut c = Client::connect(q.addr());
    let mut req =
        b"POST /post.php HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    req.extend_from_slice(b"800\r\n");
    req.extend_from_slice(&[b'a'; 0x800]);
    req.extend_from_slice(b"\r\n0\r\n\r\n");
    let r = c.roundtrip(&req);
    assert_eq!(r.status, 413, "{}", show(&r.raw_head));
}

#[test]
fn a_megabyte_of_output_arrives_byte_for_byte() {
    let php = start_php();
    let q = php_quill(&php);
    let r = get_from(&q, "/big.php", "");
    assert_eq!(r.status, 200);
    let expected = "0123456789abcdef".repeat(65536);
    assert_eq!(r.body.len(), expected.len());
    assert!(r.body == expected.as_bytes(), "the body differs");
}

#[test]
fn status_location_fields_and_content_length_from_php_are_kept() {
    let php = start_php();
    let q = php_quill(&php);
    let r = get_from(&q, "/missing.php", "");
    assert_eq!(r.status, 404);
    assert_eq!(r.header("x-custom"), Some("yes"));
    assert_eq!(r.body, b"nope");
    let r = get_from(&q, "/redirect.php", "");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("https://example.com/there"));
    let r = get_from(&q, "/length.php", "");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("5"));
    assert_eq!(r.header("transfer-encoding"), None);
    assert_eq!(r.body, b"exact");
}

#[test]
fn php_stderr_goes_to_quills_log() {
    let php = start_php();
    let q = php_quill(&php);
    let r = get_from(&q, "/warn.php", "");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"warned");
    assert!(
        q.wait_stderr_contains("quill-stderr-marker", Duration::from_secs(5)),
        "stderr:\n{}",
        q.stderr()
    );
}

#[test]
fn a_script_must_be_a_file_beneath_the_root_or_it_is_404_without_asking_php() {
    let php = start_php();
    let q = php_quill(&php);
    for target in [
        "/uploads/evil.jpg/x.php",
        "/uploads/evil.jpg",
        "/nothing.php",
        "/static.txt",
        "/%2e%2e/etc/passwd.php",
        "/.env.php",
    ] {
        let r = get_from(&q, target, "");
        assert!(
            r.status == 404 || r.status == 400,
            "{target}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
        assert!(!String::from_utf8_lossy(&r.body).contains("must never run"));
    }
}

#[test]
fn a_fallback_script_answers_paths_that_name_no_script() {
    let php = start_php();
    let q = quill(
        &php.sock.display().to_string(),
        &php.www,
        "",
        "",
        ", fallback = \"/index.php\"",
    );
    let r = get_from(&q, "/blog/post-42?p=1", "");
    assert_eq!(r.status, 200, "{}", show(&r.raw_head));
    assert_eq!(r.body, b"front /blog/post-42?p=1");
    // A script that exists still runs itself.
    assert_eq!(get_from(&q, "/hello.php", "").body, b"hello from php\n");
}

#[test]
fn a_slow_script_gets_504_at_the_response_timeout() {
    let php = start_php();
    let q = quill(
        &php.sock.display().to_string(),
        &php.www,
        "",
        "response_timeout = \"1s\"",
        "",
    );
    let started = Instant::now();
    let r = get_from(&q, "/sleep.php", "");
    assert_eq!(r.status, 504, "{}", show(&r.raw_head));
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[test]
fn php_fpm_killed_before_the_head_is_502_and_after_it_cuts_the_response() {
    let mut php = start_php();
    let q = php_quill(&php);
    // Before the head: 502.
    let mut c = Client::connect(q.addr());
    c.send(&get("/sleep.php"));
    std::thread::sleep(Duration::from_millis(700));
    php.peer.kill();
    let r = c.read_response();
    assert_eq!(r.status, 502, "{}", show(&r.raw_head));
    // After the head: the client's response is cut (never completed as if whole).
    let php = start_php();
    let q = php_quill(&php);
    let mut s = TcpStream::connect(q.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /partial.php HTTP/1.1\r\nHost: h\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while got.len() < 100_000 {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed early");
        got.extend_from_slice(&buf[..n]);
    }
    drop(php);
    let _ = s.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{}", &text[..100]);
    assert!(
        !text.ends_with("0\r\n\r\n"),
        "a cut response must not end like a whole one"
    );
}

#[test]
fn connections_to_a_server_with_max_are_kept_between_requests() {
    let php = start_php();
    let server = format!("{{ address = \"{}\", max = 2 }}", php.tcp);
    let q = quill_in("workers = 1", &server, &php.www, "", "", "");
    let status = |q: &QuillProcess| {
        let r = get_from(q, "/fpm-status.php", "");
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let text = String::from_utf8_lossy(&r.body).into_owned();
        text.lines()
            .find_map(|l| l.strip_prefix("accepted conn:"))
            .unwrap_or_else(|| panic!("no accepted conn in {text}"))
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    let before = status(&q);
    let mut c = Client::connect(q.addr());
    for i in 0..200 {
        let r = c.roundtrip(&get("/hello.php"));
        assert_eq!(r.status, 200, "request {i}");
    }
    let after = status(&q);
    // One worker, php-fpm's pool of two children: every request on the same kept connection
    // counts as one accepted request in php-fpm, but the connections Quill opened stay few.
    let opened = established_to(php.tcp);
    assert!(
        opened <= 2,
        "{opened} connections to php-fpm after 200 requests"
    );
    assert!(
        after - before >= 200,
        "php-fpm saw {} requests",
        after - before
    );
}

/// `clients` clients at once, each sending `each` requests for `target` on its own kept-alive
/// connection (a new one after an answer of Quill's own, which closes it); the statuses, in no
/// particular order.
fn load(q: &QuillProcess, target: &str, clients: usize, each: usize) -> Vec<u16> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|_| {
                s.spawn(|| {
                    let mut c = Client::connect(q.addr());
                    (0..each)
                        .map(|_| {
                            let status = c.roundtrip(&get(target)).status;
                            if status != 200 {
                                c = Client::connect(q.addr());
                            }
                            status
                        })
                        .collect::<Vec<u16>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
}

#[test]
fn without_max_more_clients_than_children_are_all_served() {
    // php-fpm's pool has two children; a kept connection holds its child until it closes, so
    // a proxy keeping more connections than children leaves requests on connections no child
    // accepts (nginx with fastcgi_keep_conn stalls so: docs/benchmarks.md#fastcgi). Without a
    // `max` Quill keeps none: eight clients at once are all served, well before the timeout.
    let php = start_php();
    let q = quill(
        &php.tcp.to_string(),
        &php.www,
        "",
        "response_timeout = \"10s\"",
        "",
    );
    let started = Instant::now();
    let statuses = load(&q, "/nap.php", 8, 10);
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "80 requests took {:?}",
        started.elapsed()
    );
}

#[test]
fn over_max_requests_wait_in_the_queue_on_connections_kept_to_max() {
    let php = start_php();
    let server = format!("{{ address = \"{}\", max = 2 }}", php.tcp);
    let q = quill_in(
        "workers = 2\nqueue_timeout = \"20s\"",
        &server,
        &php.www,
        "",
        "response_timeout = \"20s\"",
        "",
    );
    let statuses = load(&q, "/nap.php", 8, 10);
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    // Two workers, eight clients: never more connections than the server's max, each kept.
    let opened = established_to(php.tcp);
    assert!(opened <= 2, "{opened} connections to php-fpm");
    assert!(opened >= 1, "no connection kept");
}

#[test]
fn with_no_queue_requests_over_max_are_refused_at_once() {
    // The contrast of the test above: with queue_timeout = 0 (Pen's way) a request that finds
    // the server at its max gets 503.
    let php = start_php();
    let server = format!("{{ address = \"{}\", max = 1 }}", php.tcp);
    let q = quill_in(
        "workers = 1\nqueue_timeout = 0",
        &server,
        &php.www,
        "",
        "",
        "",
    );
    let statuses = load(&q, "/nap.php", 6, 5);
    assert!(statuses.contains(&503), "{statuses:?}");
    assert!(statuses.contains(&200), "{statuses:?}");
}

#[test]
fn a_request_waits_at_most_queue_timeout_then_gets_503() {
    let php = start_php();
    let server = format!("{{ address = \"{}\", max = 1 }}", php.sock.display());
    let q = quill_in(
        "workers = 1\nqueue_timeout = \"1s\"",
        &server,
        &php.www,
        "",
        "response_timeout = \"10s\"",
        "",
    );
    std::thread::scope(|s| {
        let slow = s.spawn(|| get_from(&q, "/sleep.php", ""));
        // The slow request holds the one place first.
        std::thread::sleep(Duration::from_millis(500));
        let started = Instant::now();
        let r = get_from(&q, "/hello.php", "");
        let waited = started.elapsed();
        assert_eq!(r.status, 503, "{}", show(&r.raw_head));
        assert!(
            waited >= Duration::from_millis(900) && waited < Duration::from_secs(3),
            "answered after {waited:?}"
        );
        assert_eq!(slow.join().unwrap().status, 200);
    });
    // The place is free again: the next request is served at once.
    assert_eq!(get_from(&q, "/hello.php", "").status, 200);
}

/// Established TCP connections to `addr` (from /proc/net/tcp: the remote end of Quill's side).
fn established_to(addr: SocketAddr) -> usize {
    let port = format!("{:04X}", addr.port());
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap();
    text.lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // rem_address is field 2, state field 3 (01: established).
            f.len() > 3 && f[2].ends_with(&format!(":{port}")) && f[3] == "01"
        })
        .count()
}

#[test]
fn fcgiwrap_runs_a_shell_script() {
    let dir = scratch_dir();
    let www = dir.path().join("cgi");
    std::fs::create_dir_all(&www).unwrap();
    let script = www.join("hello.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\nStatus: 201 Made\\r\\n\\r\\n'\necho \"sh says $QUERY_STRING\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sock = dir.path().join("fcgiwrap.sock");
    let child = Command::new(FCGIWRAP)
        .args(["-c", "2", "-s"])
        .arg(format!("unix:{}", sock.display()))
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("fcgiwrap (Debian package fcgiwrap) must be installed: scripts/test installs it");
    let _peer = Peer { child, _dir: dir };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sock.exists() {
        assert!(Instant::now() < deadline, "fcgiwrap did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let q = quill(
        &sock.display().to_string(),
        &www,
        "",
        "",
        ", split_path = \".sh\"",
    );
    let r = get_from(&q, "/hello.sh?x=7", "");
    assert_eq!(r.status, 201, "{}", show(&r.raw_head));
    assert_eq!(r.body, b"sh says x=7\n");
}

/// `quill check` of a file holding `text`: its exit status, stdout and stderr.
fn check(text: &str) -> (Option<i32>, String, String) {
    let dir = scratch_dir();
    let cfg = dir.path().join("quill.toml");
    std::fs::write(&cfg, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_quill"))
        .args(["check", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_route_to_a_fastcgi_pool_without_the_fastcgi_action_is_refused_at_load() {
    let (code, _, err) = check(
        "[[pool]]\nname = \"php\"\nprotocol = \"fastcgi\"\nservers = [\"127.0.0.1:9\"]\n\
         [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:1\"\nprotocol = \"http\"\n\
         [[listener.route]]\nname = \"r\"\npool = \"php\"\n",
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("quill.toml:9") && err.contains("speaks FastCGI"),
        "{err}"
    );
    let (code, _, err) = check(
        "[[pool]]\nname = \"php\"\nprotocol = \"fastcgi\"\nservers = [\"127.0.0.1:9\"]\n\
         server_tls = {}\n\
         [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:1\"\nprotocol = \"http\"\n",
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("takes no server_tls"), "{err}");
}

#[test]
fn quill_check_says_which_fastcgi_servers_keep_connections_and_how_long_requests_wait() {
    let (code, text, err) = check(
        "queue_timeout = \"4s\"\n\
         [[pool]]\nname = \"php\"\nprotocol = \"fastcgi\"\n\
         servers = [{ address = \"/run/php.sock\", max = 5 }, \"127.0.0.1:9000\"]\n\
         [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:1\"\nprotocol = \"http\"\n\
         [[listener.route]]\nname = \"r\"\nfastcgi = { pool = \"php\", root = \"/srv\" }\n",
    );
    assert_eq!(code, Some(0), "{text}{err}");
    assert!(
        text.contains("connections kept between requests to the servers with a max (1 of 2)"),
        "{text}"
    );
    assert!(
        text.contains("wait up to 4s in the queue (queue_timeout), then 503"),
        "{text}"
    );
}
