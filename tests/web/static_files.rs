//! Static files through the real binary (docs/web.md): `quill serve DIR` and the `static` route
//! action, with RFC 9110's semantics (methods, content types, index files, the directory slash,
//! validators, preconditions, ranges, precompressed siblings), large files by `sendfile` and over
//! TLS, pipelined requests, the access log, and paths that must never leave their root.

use crate::http_support;
use crate::support;
use crate::tls_support;

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use http_support::*;
use support::*;

const T: Duration = Duration::from_secs(10);

/// The files every test's root holds.
fn write_site(root: &Path) {
    let w = |name: &str, bytes: &[u8]| {
        let p = root.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    };
    w("index.html", b"<h1>home</h1>\n");
    w("hello.txt", b"hello, world\n");
    w("style.css", b"body { color: black }\n");
    w("data.bin", &body_pattern(5000));
    w("big.bin", &body_pattern(3 << 20));
    w("docs/guide.html", b"<p>guide</p>\n");
    w("empty/.keep", b"");
    w("app.js", b"console.log('plain');\n");
    w("app.js.gz", b"GZIP-BYTES");
    w("app.js.br", b"BROTLI-BYTES");
    w(".secret", b"hidden\n");
    w("noext", b"what am I\n");
    w("zero.txt", b"");
}

/// `quill serve ROOT` with `extra` options, on a free port; the root is `DIR/www` of the
/// process's scratch directory, filled by [`write_site`].
fn serve(extra: &[&str]) -> QuillProcess {
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    let (q, _probe, _) = Quill::spawn_first(|dir, port| {
        let root = dir.join("www");
        write_site(&root);
        let mut args = vec![
            "serve".to_string(),
            root.display().to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--workers".into(),
            "1".into(),
        ];
        args.extend(extra.iter().cloned());
        args
    });
    q
}

fn get_on(q: &QuillProcess, target: &str, extra: &str) -> Response {
    let mut c = Client::connect(q.addr());
    c.roundtrip(&request("GET", target, extra, b""))
}

#[test]
fn quill_serve_answers_a_file_with_its_length_type_validators_and_date() {
    let q = serve(&[]);
    let r = get_on(&q, "/hello.txt", "");
    assert_eq!(r.status, 200, "{}", show(&r.raw_head));
    assert_eq!(r.body, b"hello, world\n");
    assert_eq!(r.header("content-length"), Some("13"));
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    let etag = r.header("etag").expect("an ETag");
    assert!(
        etag.starts_with('"') && etag.ends_with('"') && !etag.starts_with("W/"),
        "{etag}"
    );
    assert!(r
        .header("last-modified")
        .is_some_and(|v| v.ends_with(" GMT")));
    assert!(r.header("date").is_some_and(|v| v.ends_with(" GMT")));
    // The same file asked again: the same validators (no inode, nothing per process).
    let again = get_on(&q, "/hello.txt", "");
    assert_eq!(again.header("etag"), Some(etag));
}

#[test]
fn head_answers_the_fields_of_get_without_a_body() {
    let q = serve(&[]);
    let mut c = Client::connect(q.addr());
    c.send(&request("HEAD", "/data.bin", "", b""));
    let r = c.read_head_response();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("5000"));
    // The connection carries the next request right after the head: no body was sent.
    let next = c.roundtrip(&get("/hello.txt"));
    assert_eq!(next.body, b"hello, world\n");
}

#[test]
fn other_methods_get_405_with_allow() {
    let q = serve(&[]);
    for method in ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"] {
        let mut c = Client::connect(q.addr());
        let r = c.roundtrip(&request(method, "/hello.txt", "", b""));
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("allow"), Some("GET, HEAD"), "{method}");
    }
}

#[test]
fn content_types_follow_the_extension_with_utf8_for_text() {
    let q = serve(&[]);
    let cases = [
        ("/index.html", "text/html; charset=utf-8"),
        ("/style.css", "text/css; charset=utf-8"),
        ("/app.js", "text/javascript; charset=utf-8"),
        ("/data.bin", "application/octet-stream"),
        ("/noext", "application/octet-stream"),
    ];
    for (path, ct) in cases {
        assert_eq!(
            get_on(&q, path, "").header("content-type"),
            Some(ct),
            "{path}"
        );
    }
}

#[test]
fn a_directory_without_its_slash_is_a_301_to_it_with_the_query_kept() {
    let q = serve(&[]);
    let r = get_on(&q, "/docs?x=1", "");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/docs/?x=1"));
}

#[test]
fn a_directory_serves_its_index_file_and_the_root_is_a_directory() {
    let q = serve(&[]);
    let r = get_on(&q, "/", "");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"<h1>home</h1>\n");
    let mut c = Client::connect(q.addr());
    let r = c.roundtrip(&get("/docs/"));
    assert_eq!(
        r.status,
        403,
        "no index and no listing: {}",
        show(&r.raw_head)
    );
}

#[test]
fn a_directory_is_listed_with_listing_in_html_and_json() {
    let q = serve(&["--listing"]);
    let r = get_on(&q, "/docs/", "");
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    assert!(r.text().contains("guide.html"), "{}", r.text());
    let j = get_on(&q, "/docs/", "Accept: application/json\r\n");
    assert_eq!(j.header("content-type"), Some("application/json"));
    assert!(j.text().contains("\"guide.html\""), "{}", j.text());
    // The root itself has an index file: it is served, not listed.
    assert_eq!(get_on(&q, "/", "").body, b"<h1>home</h1>\n");
}

#[test]
fn a_missing_file_is_404_and_a_file_asked_as_a_directory_too() {
    let q = serve(&[]);
    assert_eq!(get_on(&q, "/nothing.txt", "").status, 404);
    assert_eq!(get_on(&q, "/hello.txt/", "").status, 404);
}

#[test]
fn an_empty_file_is_200_with_length_0() {
    let q = serve(&[]);
    let r = get_on(&q, "/zero.txt", "");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("0"));
}

#[test]
fn if_none_match_with_the_etag_is_304_without_a_body_and_weak_tags_match_too() {
    let q = serve(&[]);
    let etag = get_on(&q, "/hello.txt", "")
        .header("etag")
        .unwrap()
        .to_string();
    let mut c = Client::connect(q.addr());
    c.send(&request(
        "GET",
        "/hello.txt",
        &format!("If-None-Match: {etag}\r\n"),
        b"",
    ));
    let r = c.read_head_response();
    assert_eq!(r.status, 304);
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    assert!(r.header("content-length").is_none());
    let weak = c.roundtrip(&request(
        "GET",
        "/hello.txt",
        &format!("If-None-Match: W/{etag}\r\n"),
        b"",
    ));
    assert_eq!(weak.status, 304, "weak comparison (RFC 9110 §13.1.2)");
    let other = c.roundtrip(&request(
        "GET",
        "/hello.txt",
        "If-None-Match: \"nope\"\r\n",
        b"",
    ));
    assert_eq!(other.status, 200);
}

#[test]
fn if_modified_since_is_304_and_if_none_match_takes_precedence() {
    let q = serve(&[]);
    let lm = get_on(&q, "/hello.txt", "")
        .header("last-modified")
        .unwrap()
        .to_string();
    assert_eq!(
        get_on(&q, "/hello.txt", &format!("If-Modified-Since: {lm}\r\n")).status,
        304
    );
    let both = format!("If-None-Match: \"other\"\r\nIf-Modified-Since: {lm}\r\n");
    assert_eq!(get_on(&q, "/hello.txt", &both).status, 200);
}

#[test]
fn if_match_and_if_unmodified_since_failing_are_412() {
    let q = serve(&[]);
    assert_eq!(
        get_on(&q, "/hello.txt", "If-Match: \"nope\"\r\n").status,
        412
    );
    let old = "If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n";
    assert_eq!(get_on(&q, "/hello.txt", old).status, 412);
    let etag = get_on(&q, "/hello.txt", "")
        .header("etag")
        .unwrap()
        .to_string();
    assert_eq!(
        get_on(&q, "/hello.txt", &format!("If-Match: {etag}\r\n")).status,
        200
    );
}

#[test]
fn a_range_is_206_with_content_range_and_the_bytes() {
    let q = serve(&[]);
    let r = get_on(&q, "/data.bin", "Range: bytes=100-199\r\n");
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), Some("bytes 100-199/5000"));
    assert_eq!(r.body, body_pattern(5000)[100..200].to_vec());
    let suffix = get_on(&q, "/data.bin", "Range: bytes=-10\r\n");
    assert_eq!(suffix.body, body_pattern(5000)[4990..].to_vec());
}

#[test]
fn several_ranges_are_multipart_byteranges_with_a_length() {
    let q = serve(&[]);
    let r = get_on(&q, "/data.bin", "Range: bytes=0-9,100-109\r\n");
    assert_eq!(r.status, 206);
    let ct = r.header("content-type").unwrap();
    assert!(ct.starts_with("multipart/byteranges; boundary="), "{ct}");
    assert_eq!(
        r.header("content-length")
            .unwrap()
            .parse::<usize>()
            .unwrap(),
        r.body.len()
    );
    let text = String::from_utf8_lossy(&r.body).into_owned();
    assert!(text.contains("Content-Range: bytes 0-9/5000"), "{text}");
    assert!(text.contains("Content-Range: bytes 100-109/5000"), "{text}");
}

#[test]
fn a_range_past_the_end_is_416_with_bytes_star_size() {
    let q = serve(&[]);
    let r = get_on(&q, "/data.bin", "Range: bytes=6000-\r\n");
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */5000"));
}

#[test]
fn if_range_with_another_tag_gets_the_whole_file() {
    let q = serve(&[]);
    let r = get_on(&q, "/data.bin", "Range: bytes=0-9\r\nIf-Range: \"old\"\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 5000);
    let etag = r.header("etag").unwrap().to_string();
    let r = get_on(
        &q,
        "/data.bin",
        &format!("Range: bytes=0-9\r\nIf-Range: {etag}\r\n"),
    );
    assert_eq!(r.status, 206);
}

#[test]
fn a_precompressed_sibling_goes_to_a_client_that_accepts_it_with_vary_and_its_own_etag() {
    let q = serve(&["--precompressed"]);
    let plain = get_on(&q, "/app.js", "");
    assert_eq!(plain.body, b"console.log('plain');\n");
    assert_eq!(plain.header("vary"), Some("Accept-Encoding"));
    let br = get_on(&q, "/app.js", "Accept-Encoding: gzip, br\r\n");
    assert_eq!(br.body, b"BROTLI-BYTES");
    assert_eq!(br.header("content-encoding"), Some("br"));
    assert_eq!(br.header("vary"), Some("Accept-Encoding"));
    assert_eq!(
        br.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    assert_ne!(br.header("etag"), plain.header("etag"));
    let gz = get_on(&q, "/app.js", "Accept-Encoding: gzip\r\n");
    assert_eq!(gz.body, b"GZIP-BYTES");
    let refused = get_on(&q, "/app.js", "Accept-Encoding: br;q=0, gzip;q=0\r\n");
    assert_eq!(refused.body, b"console.log('plain');\n");
}

#[test]
fn a_dotfile_is_404_unless_dotfiles_are_served() {
    let q = serve(&[]);
    assert_eq!(get_on(&q, "/.secret", "").status, 404);
    let q = serve(&["--dotfiles"]);
    assert_eq!(get_on(&q, "/.secret", "").body, b"hidden\n");
}

#[test]
fn a_large_file_arrives_whole_and_byte_exact_with_keep_alive_after_it() {
    let q = serve(&[]);
    let mut c = Client::connect(q.addr());
    let r = c.roundtrip(&get("/big.bin"));
    assert_eq!(r.status, 200);
    assert!(r.body == body_pattern(3 << 20), "3 MiB file corrupted");
    let r = c.roundtrip(&request(
        "GET",
        "/big.bin",
        "Range: bytes=1000000-1000099\r\n",
        b"",
    ));
    assert_eq!(r.body, body_pattern(3 << 20)[1_000_000..1_000_100].to_vec());
    assert_eq!(c.roundtrip(&get("/hello.txt")).body, b"hello, world\n");
}

#[test]
fn a_slow_reader_of_a_large_file_gets_every_byte() {
    let q = serve(&[]);
    let mut s = connect(q.addr());
    s.write_all(&get("/big.bin")).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    s.set_read_timeout(Some(T)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {} bytes", got.len());
        got.extend_from_slice(&buf[..n]);
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            if got.len() - (i + 4) >= 3 << 20 {
                assert!(got[i + 4..] == body_pattern(3 << 20)[..], "bytes differ");
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!("only {} bytes within 30 s", got.len());
}

#[test]
fn pipelined_requests_each_get_their_file_in_order() {
    let q = serve(&[]);
    let mut c = Client::connect(q.addr());
    let mut batch = Vec::new();
    for _ in 0..20 {
        batch.extend_from_slice(&get("/hello.txt"));
        batch.extend_from_slice(&get("/data.bin"));
        batch.extend_from_slice(&request("HEAD", "/big.bin", "", b""));
    }
    c.send(&batch);
    for i in 0..20 {
        assert_eq!(c.read_response().body, b"hello, world\n", "round {i}");
        assert_eq!(c.read_response().body.len(), 5000, "round {i}");
        assert_eq!(
            c.read_head_response().header("content-length"),
            Some("3145728")
        );
    }
}

#[test]
fn the_fallback_serves_a_single_page_application_for_unknown_paths() {
    let q = serve(&["--fallback", "/index.html"]);
    let r = get_on(&q, "/app/route/42", "");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"<h1>home</h1>\n");
}

#[test]
fn paths_that_climb_out_of_the_root_never_reach_a_file_outside_it() {
    let (q, _probe, _) = Quill::spawn_first(|dir, port| {
        let root = dir.join("www");
        write_site(&root);
        std::fs::write(dir.join("outside.txt"), b"OUTSIDE").unwrap();
        std::os::unix::fs::symlink(dir.join("outside.txt"), root.join("link-out")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("etc")).unwrap();
        std::os::unix::fs::symlink("hello.txt", root.join("link-in")).unwrap();
        vec![
            "serve".into(),
            root.display().to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
        ]
    });
    let corpus = [
        "/../outside.txt",
        "/%2e%2e/outside.txt",
        "/%2E%2e/outside.txt",
        "/docs/../../outside.txt",
        "/..%2foutside.txt",
        "/%2e%2e%2foutside.txt",
        "/..\\outside.txt",
        "/%c0%ae%c0%ae/outside.txt",
        "//../outside.txt",
        "/link-out",
        "/etc/passwd",
        "/etc/hostname",
        "/hello.txt%00.html",
        "/%00",
    ];
    for target in corpus {
        let mut c = Client::connect(q.addr());
        c.send(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        // A target the parser refuses outright may close the connection: nothing leaked.
        if let Ok(r) = c.try_read_response(false, T) {
            assert!(
                r.status == 400 || r.status == 404,
                "{target}: {} {}",
                r.status,
                r.text()
            );
            assert!(
                !r.text().contains("OUTSIDE") && !r.text().contains("root:"),
                "{target}"
            );
        }
    }
    // A link that stays inside the root is followed.
    assert_eq!(get_on(&q, "/link-in", "").body, b"hello, world\n");
}

#[test]
fn the_access_log_has_a_line_per_file_request() {
    let (q, _probe, _) = Quill::spawn_first(|dir, port| {
        let root = dir.join("www");
        write_site(&root);
        vec![
            "serve".into(),
            root.display().to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--log".into(),
            dir.join("access.log").display().to_string(),
        ]
    });
    get_on(&q, "/hello.txt", "");
    get_on(&q, "/missing", "");
    let path = q.path("access.log");
    // Each worker writes its lines to the file at the end of its own turn, after the response
    // went out: the two connections may be on different workers, so wait for both lines.
    let ok = wait_until(T, || {
        std::fs::read_to_string(&path).is_ok_and(|t| {
            t.contains("GET /hello.txt HTTP/1.1\" 200") && t.contains("GET /missing HTTP/1.1\" 404")
        })
    });
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(ok, "log: {text}");
    assert!(text.contains("GET /hello.txt HTTP/1.1\" 200"), "{text}");
    assert!(text.contains("GET /missing HTTP/1.1\" 404"), "{text}");
}

#[test]
fn files_are_served_over_tls_byte_exact() {
    let (q, _probe, _) = Quill::spawn_first(|dir, port| {
        let root = dir.join("www");
        write_site(&root);
        let cert =
            tls_support::self_signed("localhost", &["localhost"], tls_support::KeyAlg::EcdsaP256);
        let (c, k) = cert.write(dir, "site");
        vec![
            "serve".into(),
            root.display().to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "-E".into(),
            c.display().to_string(),
            "-K".into(),
            k.display().to_string(),
        ]
    });
    let opts = tls_support::ClientOpts {
        sni: Some("localhost"),
        ..Default::default()
    };
    let mut t = tls_support::TlsClient::connect(q.addr(), &opts).expect("handshake");
    t.stream
        .write_all(b"GET /big.bin HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut raw = Vec::new();
    let _ = t.stream.read_to_end(&mut raw);
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    assert!(raw.starts_with(b"HTTP/1.1 200"), "{}", show(&raw[..end]));
    assert!(
        raw[end..] == body_pattern(3 << 20)[..],
        "3 MiB over TLS: {} bytes",
        raw.len() - end
    );
}

#[test]
fn a_static_route_in_toml_serves_beside_a_pool_route() {
    let backend = Backend::start(|_| vec![Step::Send(response(200, "", b"from the pool"))]);
    let (q, _probe, _) = Quill::spawn_first(|dir, port| {
        let root = dir.join("www");
        write_site(&root);
        let cfg = dir.join("quill.toml");
        std::fs::write(
            &cfg,
            format!(
                "workers = 1\n[[pool]]\nname = \"api\"\nservers = [\"{}\"]\n\
                 [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
                 [[listener.route]]\npath = \"/api/\"\npool = \"api\"\n\
                 [[listener.route]]\nstatic = {{ root = \"www\", cache_control = \"max-age=60\" }}\n",
                backend.addr()
            ),
        )
        .unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    });
    assert_eq!(get_on(&q, "/api/x", "").body, b"from the pool");
    let r = get_on(&q, "/hello.txt", "");
    assert_eq!(r.body, b"hello, world\n");
    assert_eq!(r.header("cache-control"), Some("max-age=60"));
}

#[test]
fn a_static_root_that_is_not_a_directory_is_refused_with_its_line() {
    let dir = scratch_dir();
    let cfg = dir.path().join("quill.toml");
    std::fs::write(
        &cfg,
        "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:1\"\nprotocol = \"http\"\n\
         [[listener.route]]\nstatic = { root = \"nowhere\" }\n",
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .args(["check", "--config", &cfg.display().to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("quill.toml:6") && err.contains("static: root"),
        "{err}"
    );
}
