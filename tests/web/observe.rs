//! What Quill tells of the web server it is (docs/observability.md): the access log's `source`
//! (`file`, `server`, `quill`, ...) and the range a 206 served, the response metrics by source
//! and class with the 304s and 206s apart, the file cache's hits, misses and descriptors, the CGI
//! children gauge at rest, the same numbers in `/api/status`, and a site's own access log
//! (docs/sites.md), reopened like the others.

use crate::admin_support;
use crate::http_support::wait_until;
use crate::support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use admin_support::{metrics, start_with_admin, status_json, wait_metrics, Metrics};
use serde_json::Value;
use support::*;

const T: Duration = Duration::from_secs(10);

/// A file larger than the cache keeps in memory (16 KiB): served from a held descriptor.
const BIG: usize = 20 * 1024;

/// The files of the root: a small text file and a large one.
fn write_root(root: &Path) {
    std::fs::create_dir_all(root).unwrap();
    std::fs::write(root.join("small.txt"), b"small file\n").unwrap();
    std::fs::write(root.join("big.bin"), pattern_bytes(0, BIG)).unwrap();
}

/// One request on its own connection: (status, head, body).
fn fetch(addr: SocketAddr, path: &str, host: &str, extra: &str) -> (u16, String, Vec<u8>) {
    let mut s = connect(addr);
    write_all(
        &mut s,
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n")
            .as_bytes(),
    );
    let raw = read_until_eof(&mut s, T);
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no head for {path}: {:?}", String::from_utf8_lossy(&raw)))
        + 4;
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let status = head[9..12].parse().unwrap();
    (status, head, raw[end..].to_vec())
}

/// The value of field `name` in a response head.
fn field<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The JSON lines of an access log, once it has `n` (bounded wait).
fn json_lines(path: &Path, n: usize) -> Vec<Value> {
    let mut lines = Vec::new();
    let ok = wait_until(T, || {
        lines = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        lines.len() >= n
    });
    assert!(
        ok,
        "{} has {} lines, want {n}: {lines:?}",
        path.display(),
        lines.len()
    );
    lines
}

/// The line of the request whose request line starts with `request`.
fn line_of<'a>(lines: &'a [Value], request: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| {
            l["request"]
                .as_str()
                .is_some_and(|r| r.starts_with(request))
        })
        .unwrap_or_else(|| panic!("no line for {request}: {lines:?}"))
}

fn responses(m: &Metrics, source: &str, class: &str) -> f64 {
    m.value(
        "quill_http_responses_total",
        &[("source", source), ("class", class)],
    )
}

/// A listener with a `respond` route, a route to a pool of one demo backend, and a static root
/// for everything else; JSON access log, one worker, the admin listener.
fn start_web(backend: SocketAddr) -> (QuillProcess, SocketAddr) {
    start_with_admin(|dir, port, admin| {
        let root = dir.join("www");
        write_root(&root);
        let cfg = dir.join("quill.toml");
        let text = format!(
            "workers = 1\nadmin = \"{admin}\"\nlog = \"{log}\"\nlog_format = \"json\"\n\
             [[pool]]\nname = \"api\"\nservers = [\"{backend}\"]\n\
             [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
             [[listener.route]]\nname = \"hello\"\npath = \"/hello\"\nrespond = {{ body = \"hi\" }}\n\
             [[listener.route]]\nname = \"api\"\npath = \"/api/\"\npool = \"api\"\n\
             [[listener.route]]\nname = \"files\"\nstatic = {{ root = \"{root}\" }}\n",
            log = dir.join("access.log").display(),
            root = root.display(),
        );
        std::fs::write(&cfg, text).unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    })
}

#[test]
fn each_source_is_logged_and_counted_with_the_range_and_cache_it_used() {
    let backend = http("api");
    let (q, admin) = start_web(backend.addr());
    let addr = q.addr();
    // At rest: nothing looked up, no descriptor held, no CGI child.
    let m = metrics(admin);
    assert_eq!(
        m.value("quill_file_cache_lookups_total", &[("result", "miss")]),
        0.0
    );
    assert_eq!(
        m.value("quill_file_cache_lookups_total", &[("result", "hit")]),
        0.0
    );
    assert_eq!(m.value("quill_file_cache_descriptors", &[]), 0.0);
    assert!(
        m.value("quill_file_cache_descriptors_max", &[]) > 0.0,
        "{}",
        m.text
    );
    assert_eq!(m.value("quill_cgi_children", &[]), 0.0);

    // A small file: the first lookup misses, the second hits.
    let (status, head, body) = fetch(addr, "/small.txt", "t", "");
    assert_eq!((status, &body[..]), (200, &b"small file\n"[..]), "{head}");
    wait_metrics(admin, "one miss", |m| {
        m.value("quill_file_cache_lookups_total", &[("result", "miss")]) == 1.0
            && m.value("quill_file_cache_lookups_total", &[("result", "hit")]) == 0.0
    });
    let etag = field(&head, "etag").expect("an ETag").to_string();
    let (status, _, _) = fetch(
        addr,
        "/small.txt",
        "t",
        &format!("If-None-Match: {etag}\r\n"),
    );
    assert_eq!(status, 304);
    wait_metrics(admin, "then a hit", |m| {
        m.value("quill_file_cache_lookups_total", &[("result", "hit")]) == 1.0
            && m.value("quill_file_cache_lookups_total", &[("result", "miss")]) == 1.0
    });

    // A large file: its descriptor stays held by the cache.
    let (status, _, body) = fetch(addr, "/big.bin", "t", "");
    assert_eq!((status, body.len()), (200, BIG));
    wait_metrics(admin, "a descriptor held", |m| {
        m.value("quill_file_cache_descriptors", &[]) == 1.0
    });
    let (status, head, body) = fetch(addr, "/big.bin", "t", "Range: bytes=0-99\r\n");
    assert_eq!((status, body.len()), (206, 100), "{head}");
    let (status, head, _) = fetch(addr, "/big.bin", "t", "Range: bytes=0-9,20-29,40-49\r\n");
    assert_eq!(status, 206, "{head}");
    assert!(field(&head, "content-type").is_some_and(|v| v.starts_with("multipart/byteranges")));

    // A pool's server, and Quill's own answer.
    let (status, _, _) = fetch(addr, "/api/x", "t", "");
    assert_eq!(status, 200);
    let (status, _, body) = fetch(addr, "/hello", "t", "");
    assert_eq!((status, &body[..]), (200, &b"hi"[..]));

    let m = wait_metrics(admin, "seven responses", |m| {
        m.sum("quill_http_responses_total", &[]) == 7.0
    });
    assert_eq!(
        responses(&m, "file", "2xx"),
        4.0,
        "200 small, 200 big, two 206s"
    );
    assert_eq!(responses(&m, "file", "3xx"), 1.0);
    assert_eq!(responses(&m, "server", "2xx"), 1.0);
    assert_eq!(responses(&m, "quill", "2xx"), 1.0);
    assert_eq!(
        m.sum("quill_http_responses_total", &[("source", "cgi")]),
        0.0
    );
    let not_modified = "quill_http_responses_not_modified_total";
    assert_eq!(m.value(not_modified, &[("source", "file")]), 1.0);
    assert_eq!(m.sum(not_modified, &[]), 1.0);
    let partial = "quill_http_responses_partial_total";
    assert_eq!(m.value(partial, &[("source", "file")]), 2.0);
    assert_eq!(m.sum(partial, &[]), 2.0);
    assert_eq!(
        m.value("quill_file_cache_lookups_total", &[("result", "miss")]),
        2.0
    );
    assert_eq!(
        m.value("quill_file_cache_lookups_total", &[("result", "hit")]),
        3.0
    );
    assert_eq!(m.value("quill_file_cache_entries", &[]), 2.0);

    // The same numbers in /api/status (what the status page draws).
    let s = status_json(admin);
    let file = &s["http"]["sources"]["file"];
    assert_eq!(file["responses"], 5, "{s}");
    assert_eq!(file["classes"]["2xx"], 4);
    assert_eq!(file["not_modified"], 1);
    assert_eq!(file["partial"], 2);
    assert_eq!(s["http"]["sources"]["server"]["responses"], 1);
    assert_eq!(s["http"]["sources"]["quill"]["responses"], 1);
    assert_eq!(s["files"]["cache_hits"], 3);
    assert_eq!(s["files"]["cache_misses"], 2);
    assert_eq!(s["files"]["cache_entries"], 2);
    assert_eq!(s["files"]["descriptors"], 1);
    assert_eq!(s["cgi"]["children"], 0);

    // Each line names its source, and a 206 its range.
    let lines = json_lines(&q.path("access.log"), 7);
    for (request, source) in [
        ("GET /small.txt", "file"),
        ("GET /api/x", "server"),
        ("GET /hello", "quill"),
    ] {
        let l = line_of(&lines, request);
        assert_eq!(l["status"], 200, "{l}");
        assert_eq!(l["source"], source, "{l}");
        assert_eq!(l["range"], Value::Null, "{l}");
    }
    let by_status =
        |status: u64| -> Vec<&Value> { lines.iter().filter(|l| l["status"] == status).collect() };
    let not_modified = by_status(304);
    assert_eq!(not_modified.len(), 1, "{lines:?}");
    assert_eq!(not_modified[0]["source"], "file");
    let ranges: Vec<&str> = by_status(206)
        .iter()
        .map(|l| {
            assert_eq!(l["source"], "file", "{l}");
            l["range"]
                .as_str()
                .unwrap_or_else(|| panic!("no range: {l}"))
        })
        .collect();
    assert_eq!(
        ranges,
        [format!("bytes 0-99/{BIG}"), "multipart 3".to_string()]
    );
    let whole = lines
        .iter()
        .find(|l| l["request"] == "GET /big.bin HTTP/1.1" && l["status"] == 200)
        .expect("the whole big file's line");
    assert_eq!(whole["source"], "file");
    assert_eq!(whole["range"], Value::Null);
    drop(backend);
}

#[test]
fn a_file_range_ends_the_text_line_after_the_request_id() {
    let (q, _probe, _) = Quill::spawn_first(|dir, port| {
        let root = dir.join("www");
        write_root(&root);
        vec![
            "serve".into(),
            root.display().to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--log".into(),
            dir.join("access.log").display().to_string(),
        ]
    });
    let (status, _, _) = fetch(q.addr(), "/big.bin", "t", "Range: bytes=10-19\r\n");
    assert_eq!(status, 206);
    let (status, _, _) = fetch(q.addr(), "/small.txt", "t", "");
    assert_eq!(status, 200);
    let path = q.path("access.log");
    let ok = wait_until(T, || {
        std::fs::read_to_string(&path).is_ok_and(|t| t.lines().count() >= 2)
    });
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(ok, "{text}");
    let ranged = text
        .lines()
        .find(|l| l.contains("GET /big.bin"))
        .expect("its line");
    assert!(ranged.ends_with(&format!(" bytes=10-19/{BIG}")), "{ranged}");
    let fields: Vec<&str> = ranged.rsplitn(3, ' ').collect();
    assert!(
        fields[1].starts_with('"'),
        "the request id before it: {ranged}"
    );
    assert!(ranged.contains("\" 206 "), "{ranged}");
    assert!(ranged.contains(" file "), "its source: {ranged}");
    let whole = text
        .lines()
        .find(|l| l.contains("GET /small.txt"))
        .expect("its line");
    assert!(whole.ends_with('"'), "no range on a 200: {whole}");
}

/// A listener whose process-wide log is `listener.log`, with site `a.test` (its own `a.log`,
/// one route under `/only`) and site `b.test` (no log of its own).
fn start_sites() -> QuillProcess {
    Quill::start_with(|dir, port| {
        let cfg = dir.join("quill.toml");
        let text = format!(
            "workers = 1\nlog = \"listener.log\"\nlog_format = \"json\"\n\
             [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
             [[listener.site]]\nnames = [\"a.test\"]\nlog = \"a.log\"\n\
             [[listener.site.route]]\npath = \"/only\"\nrespond = {{ body = \"A\" }}\n\
             [[listener.site]]\nnames = [\"b.test\"]\n\
             [[listener.site.route]]\nrespond = {{ body = \"B\" }}\n"
        );
        std::fs::write(&cfg, text).unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    })
}

#[test]
fn a_site_with_its_own_log_gets_its_lines_and_the_listeners_log_does_not() {
    let q = start_sites();
    let addr = q.addr();
    assert_eq!(fetch(addr, "/only", "a.test", "").0, 200);
    // A request for the site that none of its routes took is still the site's.
    assert_eq!(fetch(addr, "/other", "A.TEST:80", "").0, 404);
    assert_eq!(fetch(addr, "/b", "b.test", "").0, 200);
    let site = json_lines(&q.path("a.log"), 2);
    let listener = json_lines(&q.path("listener.log"), 1);
    let requests = |lines: &[Value]| -> Vec<String> {
        lines
            .iter()
            .map(|l| l["request"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        requests(&site),
        ["GET /only HTTP/1.1", "GET /other HTTP/1.1"],
        "the site's file"
    );
    assert_eq!(
        requests(&listener),
        ["GET /b HTTP/1.1"],
        "the listener's file"
    );
    assert_eq!(site[0]["source"], "quill");
    assert_eq!(site[1]["status"], 404);
    // `quill check` shows the site's file.
    let cfg = q.path("quill.toml");
    let (code, out, err) = run_quill_output(&["check", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let a_log = q.path("a.log");
    assert!(
        out.contains(&format!("access log {}", a_log.display())),
        "{out}"
    );

    // Rotated like the others: after a move and SIGUSR2, the site's lines go to a new file at
    // its path.
    std::fs::rename(q.path("a.log"), q.path("a.log.1")).unwrap();
    q.signal("USR2");
    let ok = wait_until(T, || q.path("a.log").exists());
    assert!(ok, "a.log was not opened again");
    assert_eq!(fetch(addr, "/only", "a.test", "").0, 200);
    let after = json_lines(&q.path("a.log"), 1);
    assert!(
        after.iter().all(|l| l["request"] == "GET /only HTTP/1.1"),
        "{after:?}"
    );
    let listener = json_lines(&q.path("listener.log"), 1);
    assert_eq!(
        requests(&listener),
        ["GET /b HTTP/1.1"],
        "nothing more in the listener's file"
    );
}

#[test]
fn a_site_log_shared_with_another_kind_of_line_is_refused() {
    let dir = scratch_dir();
    let cfg = dir.path().join("quill.toml");
    let text = "log = \"shared.log\"\n\
        [[listener]]\nname = \"tcp\"\nlisten = \"127.0.0.1:1\"\nservers = [\"127.0.0.1:2\"]\n\
        [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:3\"\nprotocol = \"http\"\nlog = \"web.log\"\n\
        [[listener.site]]\nnames = [\"a.test\"]\nlog = \"shared.log\"\n\
        [[listener.site.route]]\nrespond = {}\n";
    std::fs::write(&cfg, text).unwrap();
    let (code, _, err) = run_quill_output(&["check", "--config", &cfg.display().to_string()]);
    assert_eq!(code, 2, "{err}");
    for want in [
        "site 'a.test' of listener 'web'",
        "shared.log",
        "listener 'tcp'",
    ] {
        assert!(err.contains(want), "{want} missing: {err}");
    }
}
