//! CGI scripts run as Quill's children (docs/cgi.md), through the real binary with real shell
//! and Python scripts: the RFC 3875 environment, request bodies on stdin (Content-Length and
//! chunked), the script's response head (Status, Location, its own Content-Length or none),
//! a large output byte for byte, stderr to the log (bounded), the timeout and a client that
//! leaves (the process group killed), many requests at once (max_children, no zombies), and
//! paths that must never run anything.

use crate::http_support;
use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use http_support::*;
use support::*;

const T: Duration = Duration::from_secs(10);

/// Writes `name` under `dir` with `text`, executable.
fn script(dir: &Path, name: &str, text: &str) {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The scripts every test's root (`DIR/cgi-bin`) holds; `dir` is the scratch directory (pid
/// files and markers go there).
fn write_scripts(dir: &Path) {
    let bin = dir.join("cgi-bin");
    let d = dir.display();
    script(
        &bin,
        "env.sh",
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\nenv\n",
    );
    script(
        &bin,
        "echo.py",
        "#!/usr/bin/env python3\nimport os, sys\n\
         n = int(os.environ.get('CONTENT_LENGTH') or 0)\n\
         data = sys.stdin.buffer.read(n)\n\
         sys.stdout.buffer.write(b'Content-Type: application/octet-stream\\r\\n\
         Content-Length: %d\\r\\n\\r\\n' % len(data) + data)\n",
    );
    script(
        &bin,
        "status.sh",
        "#!/bin/sh\nprintf 'Status: 404 Not Here\\nContent-Type: text/plain\\n\\nnope\\n'\n",
    );
    script(
        &bin,
        "redirect.sh",
        "#!/bin/sh\nprintf 'Location: https://example.com/elsewhere\\n\\n'\n",
    );
    script(
        &bin,
        "nolength.sh",
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\n'\necho one\necho two\n",
    );
    script(
        &bin,
        "big.py",
        "#!/usr/bin/env python3\nimport sys\n\
         sys.stdout.buffer.write(b'Content-Type: application/octet-stream\\n\\n')\n\
         sys.stdout.buffer.write(bytes(i % 251 for i in range(1 << 20)))\n",
    );
    script(
        &bin,
        "noisy.sh",
        "#!/bin/sh\ni=0\nwhile [ $i -lt 3000 ]; do echo \"noise line $i\" >&2; i=$((i+1)); done\n\
         printf 'Content-Type: text/plain\\n\\nfine\\n'\n",
    );
    // Never exits on its own (30 s, so that a failed test leaves nothing for long); its own
    // child is in its process group.
    script(
        &bin,
        "hang.sh",
        &format!(
            "#!/bin/sh\nsleep 30 &\necho $! > {d}/$QUERY_STRING.child\necho $$ > {d}/$QUERY_STRING.pid\nwait\n"
        ),
    );
    script(
        &bin,
        "quick.sh",
        "#!/bin/sh\nsleep 0.05\nprintf 'Content-Type: text/plain\\n\\nquick\\n'\n",
    );
    // Not executable: must never run.
    let plain = bin.join("plain.sh");
    std::fs::write(&plain, format!("#!/bin/sh\ntouch {d}/ran-plain\n")).unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    // Outside the root, reached through a link: must never run.
    script(
        dir,
        "outside.sh",
        &format!("#!/bin/sh\ntouch {d}/ran-outside\n"),
    );
    std::os::unix::fs::symlink(dir.join("outside.sh"), bin.join("link.sh")).unwrap();
}

/// Quill with one `cgi` route on `DIR/cgi-bin` (`extra`: more keys of the action).
fn start(extra: &str) -> QuillProcess {
    Quill::start_with(|dir, port| {
        write_scripts(dir);
        let cfg = dir.join("quill.toml");
        std::fs::write(
            &cfg,
            format!(
                "workers = 1\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\n\
                 protocol = \"http\"\n[[listener.route]]\n\
                 cgi = {{ root = \"cgi-bin\"{extra} }}\n"
            ),
        )
        .unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    })
}

fn fetch(q: &QuillProcess, target: &str, extra: &str) -> Response {
    let mut c = Client::connect(q.addr());
    c.roundtrip(&request("GET", target, extra, b""))
}

/// Waits (bounded) for `path` to hold a pid.
fn read_pid(path: &Path, within: Duration) -> u32 {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if let Ok(s) = std::fs::read_to_string(path) {
            if let Ok(pid) = s.trim().parse() {
                return pid;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no pid in {} after {within:?}", path.display());
}

/// Whether process `pid` is gone (or a zombie no one waits for yet: not running either way).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn wait_gone(pid: u32, within: Duration) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if gone(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The children of `parent` and how many are zombies.
fn children_of(parent: u32) -> (usize, usize) {
    let (mut all, mut zombies) = (0, 0);
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let state = f.next().unwrap_or("");
        if f.next().and_then(|p| p.parse::<u32>().ok()) == Some(parent) {
            all += 1;
            zombies += usize::from(state == "Z");
        }
    }
    (all, zombies)
}

fn env_of(r: &Response) -> Vec<String> {
    r.text().lines().map(str::to_string).collect()
}

#[test]
fn a_script_sees_the_rfc_3875_environment_of_its_request() {
    let q = start("");
    let r = fetch(
        &q,
        "/env.sh/extra/path?x=1&y=two",
        "X-Custom: yes\r\nProxy: http://evil.test:1\r\n",
    );
    assert_eq!(r.status, 200, "{}", show(&r.raw_head));
    let env = env_of(&r);
    let root = q.path("cgi-bin");
    let want = [
        "GATEWAY_INTERFACE=CGI/1.1".to_string(),
        "REQUEST_METHOD=GET".into(),
        "QUERY_STRING=x=1&y=two".into(),
        "PATH_INFO=/extra/path".into(),
        format!("PATH_TRANSLATED={}/extra/path", root.display()),
        "SCRIPT_NAME=/env.sh".into(),
        format!("SCRIPT_FILENAME={}/env.sh", root.display()),
        "REQUEST_URI=/env.sh/extra/path?x=1&y=two".into(),
        "REMOTE_ADDR=127.0.0.1".into(),
        "SERVER_NAME=example.test".into(),
        format!("SERVER_PORT={}", q.port),
        "SERVER_PROTOCOL=HTTP/1.1".into(),
        "HTTP_X_CUSTOM=yes".into(),
        "HTTP_HOST=example.test".into(),
    ];
    for w in &want {
        assert!(env.contains(w), "{w} missing from:\n{}", r.text());
    }
    assert!(env.iter().any(|l| l.starts_with("REMOTE_PORT=")));
    assert!(env.iter().any(|l| l.starts_with("SERVER_SOFTWARE=Quill/")));
    assert!(!env.iter().any(|l| l.starts_with("HTTP_PROXY=")), "httpoxy");
    assert!(!env.iter().any(|l| l.starts_with("HTTPS=")));
}

#[test]
fn a_post_body_reaches_stdin_with_content_length_and_chunked() {
    let q = start("");
    let body = body_pattern(200_000);
    let r = Client::connect(q.addr()).roundtrip(&request("POST", "/echo.py", "", &body));
    assert_eq!(r.status, 200, "{}", show(&r.raw_head));
    assert_eq!(r.header("content-length"), Some("200000"));
    assert!(r.body == body, "the echo differs");

    let mut c = Client::connect(q.addr());
    c.send(
        b"POST /echo.py HTTP/1.1\r\nHost: example.test\r\nTransfer-Encoding: chunked\r\n\r\n\
          5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n",
    );
    let r = c.read_response();
    assert_eq!(r.status, 200, "{}", show(&r.raw_head));
    assert_eq!(r.body, b"hello, world");
    // The connection is kept: a second request on it is answered too.
    let again = c.roundtrip(&get("/status.sh"));
    assert_eq!(again.status, 404);
}

#[test]
fn status_location_and_unknown_length_become_the_response_head_and_framing() {
    let q = start("");
    let r = fetch(&q, "/status.sh", "");
    assert_eq!(r.status, 404);
    assert!(r.raw_head.starts_with(b"HTTP/1.1 404 Not Here\r\n"));
    assert_eq!(r.body, b"nope\n");

    let r = fetch(&q, "/redirect.sh", "");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("https://example.com/elsewhere"));

    let r = fetch(&q, "/nolength.sh", "");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(r.body, b"one\ntwo\n");

    let mut c = Client::connect(q.addr());
    c.send(b"GET /nolength.sh HTTP/1.0\r\n\r\n");
    let r = c.read_response();
    assert_eq!(r.status, 200);
    assert!(r.header("transfer-encoding").is_none(), "no chunks for 1.0");
    assert_eq!(r.body, b"one\ntwo\n");
}

#[test]
fn a_large_output_arrives_byte_for_byte() {
    let q = start("");
    let r = fetch(&q, "/big.py", "");
    assert_eq!(r.status, 200, "{}", show(&r.raw_head));
    let want: Vec<u8> = (0..1usize << 20).map(|i| (i % 251) as u8).collect();
    assert_eq!(r.body.len(), want.len());
    assert!(r.body == want, "the body differs");
}

#[test]
fn a_stderr_flood_is_logged_bounded_and_the_response_is_fine() {
    let q = start("");
    let r = fetch(&q, "/noisy.sh", "");
    assert_eq!(r.status, 200, "{}", show(&r.raw_head));
    assert_eq!(r.body, b"fine\n");
    assert!(q.wait_stderr_contains("noise line 0", T), "{}", q.stderr());
    let logged = q.stderr().matches("noise line").count();
    assert!((1..=20).contains(&logged), "{logged} stderr lines logged");
}

#[test]
fn a_script_that_never_exits_gets_504_and_its_process_group_is_killed() {
    let q = start(", timeout = \"1s\"");
    let started = Instant::now();
    let r = fetch(&q, "/hang.sh?t1", "");
    assert_eq!(r.status, 504, "{}", show(&r.raw_head));
    assert!(started.elapsed() < Duration::from_secs(8));
    let script = read_pid(&q.path("t1.pid"), T);
    let child = read_pid(&q.path("t1.child"), T);
    assert!(wait_gone(script, T), "the script {script} still runs");
    assert!(wait_gone(child, T), "the script's child {child} still runs");
}

#[test]
fn a_client_that_leaves_mid_script_has_the_process_group_killed() {
    let q = start("");
    let mut c = Client::connect(q.addr());
    c.send(&get("/hang.sh?t2"));
    let script = read_pid(&q.path("t2.pid"), T);
    let child = read_pid(&q.path("t2.child"), T);
    drop(c);
    assert!(wait_gone(script, T), "the script {script} still runs");
    assert!(wait_gone(child, T), "the script's child {child} still runs");
}

#[test]
fn two_hundred_requests_at_once_are_all_answered_within_max_children_and_leave_no_zombies() {
    const MAX: usize = 8;
    let q = start(&format!(", max_children = {MAX}"));
    let pid = q.pid;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut most = 0;
            let end = Instant::now() + Duration::from_secs(60);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < end {
                let (all, zombies) = children_of(pid);
                most = most.max(all - zombies);
                std::thread::sleep(Duration::from_millis(5));
            }
            most
        })
    };
    let addr = q.addr();
    let clients: Vec<_> = (0..200)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                c.send(&request("GET", "/quick.sh", "Connection: close\r\n", b""));
                c.try_read_response(false, Duration::from_secs(60))
                    .map(|r| (r.status, r.body))
            })
        })
        .collect();
    let mut statuses = std::collections::BTreeMap::new();
    for t in clients {
        let (status, body) = t.join().unwrap().expect("every request is answered");
        if status == 200 {
            assert_eq!(body, b"quick\n");
        }
        *statuses.entry(status).or_insert(0) += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let most = sampler.join().unwrap();
    assert!(most <= MAX, "{most} children at once");
    assert!(
        statuses.get(&200).is_some_and(|&n| n >= MAX),
        "{statuses:?}"
    );
    assert_eq!(
        statuses.keys().filter(|&&s| s != 200 && s != 503).count(),
        0,
        "{statuses:?}"
    );
    // Every child reaped: none left, zombie or not.
    let end = Instant::now() + T;
    while children_of(pid).0 > 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(children_of(pid), (0, 0));
}

#[test]
fn beyond_max_children_a_request_gets_503() {
    let q = start(", max_children = 1, timeout = \"3s\"");
    let mut hold = Client::connect(q.addr());
    hold.send(&get("/hang.sh?t3"));
    read_pid(&q.path("t3.pid"), T);
    let r = fetch(&q, "/quick.sh", "");
    assert_eq!(r.status, 503);
    drop(hold);
}

#[test]
fn a_file_not_executable_or_outside_the_root_is_never_run() {
    let q = start("");
    let cases: [(&str, &[u16]); 4] = [
        ("/plain.sh", &[403]),
        ("/link.sh", &[403]),
        ("/../outside.sh", &[400, 403, 404]),
        ("/%2e%2e/outside.sh", &[400, 403, 404]),
    ];
    for (target, want) in cases {
        let r = fetch(&q, target, "");
        assert!(want.contains(&r.status), "{target}: {}", r.status);
    }
    let r = fetch(&q, "/missing.sh", "");
    assert_eq!(r.status, 404);
    std::thread::sleep(Duration::from_millis(200));
    for marker in ["ran-plain", "ran-outside"] {
        assert!(!q.path(marker).exists(), "{marker}: a script ran");
    }
}
