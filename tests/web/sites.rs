//! Virtual hosts (docs/sites.md) through the real binary: `[[listener.site]]`s chosen by Host
//! (exact name, longest wildcard, default site; port, case and a final dot ignored), each site's
//! own routes, `unknown_host` (404, 421, or the routes outside any site), a site's certificate
//! chosen by SNI and 421 for a Host another site's certificate serves, a reload adding a site,
//! what `quill check` says of sites, and the configuration errors with FILE:LINE (a site's own
//! `log` is in observe.rs).

use crate::http_support;
use crate::support;
use crate::tls_support;

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use http_support::*;
use support::*;
use tls_support::{cn_of, toml_path, Ca, ClientOpts, KeyAlg, TlsClient};

const T: Duration = Duration::from_secs(10);

/// Quill from a TOML file `body(dir, port)` (one worker), ready.
fn start(body: impl Fn(&Path, u16) -> String) -> QuillProcess {
    Quill::start_with(|dir, port| {
        let cfg = dir.join("quill.toml");
        std::fs::write(&cfg, format!("workers = 1\n{}", body(dir, port))).unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    })
}

/// An HTTP listener on `port` without servers, then `rest` (its sites and routes).
fn listener(port: u16, rest: &str) -> String {
    format!(
        "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n{rest}"
    )
}

/// `[[listener.site]]` with `names` and one `respond` route answering `body`, plus `extra` keys.
fn site(names: &str, body: &str, extra: &str) -> String {
    format!(
        "[[listener.site]]\nnames = {names}\n{extra}\n[[listener.site.route]]\nrespond = {{ body = \"{body}\" }}\n"
    )
}

/// GET `path` with `Host: host` on a new connection: (status, body).
fn get(q: &QuillProcess, host: &str, path: &str) -> (u16, String) {
    let mut c = Client::connect(q.addr());
    c.send(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes());
    let r = c.try_read_response(false, T).expect("a response");
    (r.status, r.text())
}

#[test]
fn sites_are_chosen_by_exact_name_then_longest_wildcard_then_the_default() {
    let q = start(|_, port| {
        listener(port, "")
            + &site("[\"a.test\"]", "A", "")
            + &site("[\"b.test\", \"*.b.test\"]", "B", "")
            + &site("[\"*.x.b.test\"]", "XB", "")
            + &site("[\"www.x.b.test\"]", "WWW", "")
            + &site("[\"d.test\"]", "D", "default = true")
    });
    let cases = [
        ("a.test", "A"),
        // Port, case and a final dot do not change the host.
        ("A.Test:8080", "A"),
        ("a.test.", "A"),
        ("b.test", "B"),
        ("www.b.test", "B"),
        // The longest wildcard wins over a shorter one; an exact name over both.
        ("deep.x.b.test", "XB"),
        ("www.x.b.test", "WWW"),
        // `*.b.test` is not `xb.test`; an unknown host gets the default site.
        ("xb.test", "D"),
        ("unknown.example", "D"),
        ("d.test", "D"),
    ];
    for (host, want) in cases {
        assert_eq!(get(&q, host, "/"), (200, want.to_string()), "Host: {host}");
    }
}

#[test]
fn a_site_tries_only_its_own_routes_and_answers_404_when_they_all_miss() {
    let q = start(|_, port| {
        listener(
            port,
            "[[listener.route]]\npath = \"/outside/\"\nrespond = { body = \"OUT\" }\n",
        ) + "[[listener.site]]\nnames = [\"a.test\"]\n[[listener.site.route]]\npath = \"/api/\"\nrespond = { body = \"A-API\" }\n"
            + "[[listener.site.route]]\npath = \"/\"\nmethods = [\"POST\"]\nrespond = { body = \"A-POST\" }\n"
            + &site("[\"b.test\"]", "B", "")
    });
    assert_eq!(get(&q, "a.test", "/api/x"), (200, "A-API".into()));
    // Neither another site's routes nor the routes outside any site are tried for a site.
    assert_eq!(get(&q, "a.test", "/outside/x").0, 404);
    assert_eq!(get(&q, "a.test", "/other").0, 404);
    assert_eq!(get(&q, "b.test", "/api/x"), (200, "B".into()));
    // No default site and the default unknown_host: the routes outside any site.
    assert_eq!(get(&q, "c.test", "/outside/x"), (200, "OUT".into()));
    assert_eq!(get(&q, "c.test", "/api/x").0, 404);
}

#[test]
fn unknown_host_421_answers_a_host_no_site_names() {
    let q = start(|_, port| {
        listener(port, "unknown_host = \"421\"\n") + &site("[\"a.test\"]", "A", "")
    });
    assert_eq!(get(&q, "a.test", "/"), (200, "A".into()));
    assert_eq!(get(&q, "b.test", "/").0, 421);
    assert_eq!(get(&q, "127.0.0.1", "/").0, 421);
}

#[test]
fn unknown_host_404_answers_a_host_no_site_names() {
    let q = start(|_, port| {
        listener(
            port,
            "unknown_host = \"404\"\n[[listener.route]]\nrespond = { body = \"OUT\" }\n",
        ) + &site("[\"a.test\"]", "A", "")
    });
    assert_eq!(get(&q, "a.test", "/"), (200, "A".into()));
    assert_eq!(get(&q, "b.test", "/").0, 404);
}

/// Reads one response with a Content-Length body from a TLS client (bounded).
fn tls_response(c: &mut TlsClient) -> (u16, String) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + T;
    while Instant::now() < deadline {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if got.len() >= end + 4 + len {
                let status = head[9..12].parse().unwrap();
                let body = String::from_utf8_lossy(&got[end + 4..end + 4 + len]).into_owned();
                return (status, body);
            }
        }
        let n = c.stream.read(&mut buf).unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    panic!(
        "no whole response in {T:?}: {}",
        String::from_utf8_lossy(&got)
    );
}

fn tls_get(c: &mut TlsClient, host: &str) -> (u16, String) {
    write!(c.stream, "GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
    c.stream.flush().unwrap();
    tls_response(c)
}

#[test]
fn a_sites_certificate_is_chosen_by_sni_and_another_sites_host_on_its_connection_gets_421() {
    let ca = Ca::new("Sites CA");
    let main = ca.server("main", &["main.test"], KeyAlg::EcdsaP256);
    let a = ca.server("a", &["a.test"], KeyAlg::EcdsaP256);
    let b = ca.server("b", &["b.test", "*.b.test"], KeyAlg::EcdsaP256);
    let q = start(|dir, port| {
        let pair = |c: &tls_support::Cert, stem: &str| {
            let (cert, key) = c.write(dir, stem);
            format!(
                "[{{ cert = \"{}\", key = \"{}\" }}]",
                toml_path(&cert),
                toml_path(&key)
            )
        };
        listener(
            port,
            &format!("tls = {{ certs = {} }}\n", pair(&main, "main")),
        ) + &site("[\"a.test\"]", "A", &format!("certs = {}", pair(&a, "a")))
            + &site(
                "[\"b.test\", \"*.b.test\"]",
                "B",
                &format!("certs = {}", pair(&b, "b")),
            )
    });
    let certs = [("main", &main), ("a", &a), ("b", &b)];
    let open = |sni: &'static str| {
        let opts = ClientOpts {
            sni: Some(sni),
            ..ClientOpts::default()
        };
        TlsClient::connect(q.addr(), &opts).unwrap()
    };
    let mut ca_conn = open("a.test");
    assert_eq!(cn_of(&ca_conn.peer_cert(), &certs), "a");
    assert_eq!(tls_get(&mut ca_conn, "a.test"), (200, "A".into()));
    // Site b's certificate does not cover a.test's connection: misdirected.
    assert_eq!(tls_get(&mut ca_conn, "b.test").0, 421);
    let mut cb = open("www.b.test");
    assert_eq!(cn_of(&cb.peer_cert(), &certs), "b");
    // The same certificate covers b.test: served on this connection.
    assert_eq!(tls_get(&mut cb, "b.test"), (200, "B".into()));
    assert_eq!(tls_get(&mut cb, "a.test").0, 421);
    // A name no site's certificate has gets the listener's.
    let cm = open("other.test");
    assert_eq!(cn_of(&cm.peer_cert(), &certs), "main");
}

#[test]
fn a_reload_adds_a_site() {
    let q = start(|_, port| listener(port, "") + &site("[\"a.test\"]", "A", ""));
    assert_eq!(get(&q, "b.test", "/").0, 404);
    let cfg = q.path("quill.toml");
    let text = std::fs::read_to_string(&cfg).unwrap() + &site("[\"b.test\"]", "B", "");
    std::fs::write(&cfg, text).unwrap();
    let status = std::process::Command::new("kill")
        .args(["-HUP", &q.pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(
        wait_until(T, || get(&q, "b.test", "/") == (200, "B".into())),
        "site b served after the reload"
    );
    assert_eq!(get(&q, "a.test", "/"), (200, "A".into()));
}

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

fn check(text: &str) -> (i32, String, String) {
    let dir = scratch_dir();
    let path = dir.path().join("q.toml");
    std::fs::write(&path, text).unwrap();
    run_quill_output(&["check", "--config", path.to_str().unwrap()])
}

/// `quill check` of `text` exits 2 with one line naming `q.toml:LINE:` (the line holding `at`)
/// and each of `needles`.
fn refused(text: &str, at: &str, needles: &[&str]) {
    let line = text
        .lines()
        .position(|l| l.contains(at))
        .expect("`at` is in the text")
        + 1;
    let (code, out, err) = check(text);
    assert_eq!(code, 2, "should be refused; stdout:\n{out}\nstderr:\n{err}");
    let err = strip_ansi(&err);
    let lines: Vec<&str> = err.trim_end().lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err:?}");
    assert!(
        lines[0].contains(&format!("q.toml:{line}: ")),
        "should name line {line}: {err:?}"
    );
    for n in needles {
        assert!(lines[0].contains(n), "should name {n:?}: {err:?}");
    }
}

const HEAD: &str =
    "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:18080\"\nprotocol = \"http\"\n";

#[test]
fn site_configuration_errors_name_their_file_and_line() {
    // Two default sites: the second's default.
    let two_defaults = format!(
        "{HEAD}{}[[listener.site]]\nnames = [\"b.test\"]\ndefault = true # 2nd\n[[listener.site.route]]\ndeny = true\n",
        site("[\"a.test\"]", "A", "default = true")
    );
    refused(
        &two_defaults,
        "# 2nd",
        &["at most one default site", "site 'a.test'"],
    );
    // A name in two sites: the second's names.
    let twice = format!(
        "{HEAD}{}{}",
        site("[\"a.test\", \"*.x.test\"]", "A", ""),
        site("[\"*.X.test\"]", "B", "")
    );
    refused(&twice, "*.X.test", &["*.x.test", "one site"]);
    // A site without names.
    let nameless = format!("{HEAD}[[listener.site]] # here\nroot = \"/tmp\"\n");
    refused(&nameless, "# here", &["no names"]);
    // certs on a listener without TLS.
    let certs = format!(
        "{HEAD}{}",
        site(
            "[\"a.test\"]",
            "A",
            "certs = [{ cert = \"a.pem\", key = \"a.key\" }]"
        )
    );
    refused(&certs, "certs = [", &["certs need a listener with tls"]);
    // A default site and unknown_host = "421" contradict.
    let unknown = format!(
        "{HEAD}unknown_host = \"421\"\n{}",
        site("[\"a.test\"]", "A", "default = true")
    );
    refused(&unknown, "unknown_host", &["unknown_host", "default"]);
    let bad = format!(
        "{HEAD}unknown_host = \"410\"\n{}",
        site("[\"a.test\"]", "A", "")
    );
    refused(&bad, "unknown_host", &["'410'", "default, 404, 421"]);
    // Sites on a TCP listener.
    let tcp = format!(
        "[[listener]]\nname = \"t\"\nlisten = \"127.0.0.1:18081\"\nservers = [\"127.0.0.1:9\"]\n{}",
        site("[\"a.test\"]", "A", "")
    );
    refused(&tcp, "[[listener.site]]", &["sites need an HTTP listener"]);
    // A site whose route has a bad key is refused at the route's line.
    let route = format!(
        "{HEAD}[[listener.site]]\nnames = [\"a.test\"]\n[[listener.site.route]]\npath = \"no-slash\"\nrespond = {{}}\n"
    );
    refused(&route, "no-slash", &["path"]);
}

#[test]
fn quill_check_explains_each_site_with_its_routes() {
    let dir = scratch_dir();
    let text = format!(
        "{HEAD}unknown_host = \"421\"\n{}{}[[listener.site]]\nname = \"files\"\nnames = [\"f.test\"]\nroot = \"{}\"\nstatic = {{ listing = true }}\n",
        site("[\"a.test\", \"*.a.test\"]", "A", ""),
        site("[\"b.test\"]", "B", ""),
        dir.path().display()
    );
    let (code, out, err) = check(&text);
    assert_eq!(code, 0, "{err}");
    for want in [
        "site 'a.test': a.test, *.a.test",
        "route 'a.test/route-1'",
        "site 'b.test': b.test",
        "site 'files': f.test",
        "route 'files/root'",
        "listing on",
        "a host no site names: 421",
    ] {
        assert!(out.contains(want), "{want:?} in:\n{out}");
    }
}

#[test]
fn each_site_serves_files_from_its_own_root_after_its_own_routes() {
    let q = start(|dir, port| {
        for (site, text) in [("a", "file of a"), ("b", "file of b")] {
            let root = dir.join(site);
            std::fs::create_dir_all(&root).unwrap();
            std::fs::write(root.join("page.txt"), text).unwrap();
            std::fs::write(root.join("index.html"), format!("<p>{site}</p>")).unwrap();
        }
        listener(port, "")
            + "[[listener.site]]\nnames = [\"a.test\"]\nroot = \"a\"\n\
               [[listener.site.route]]\npath = \"/api/\"\nrespond = { body = \"api of a\" }\n"
            + "[[listener.site]]\nnames = [\"b.test\"]\nroot = \"b\"\n"
    });
    assert_eq!(get(&q, "a.test", "/page.txt"), (200, "file of a".into()));
    assert_eq!(get(&q, "b.test", "/page.txt"), (200, "file of b".into()));
    assert_eq!(get(&q, "a.test", "/"), (200, "<p>a</p>".into()));
    assert_eq!(get(&q, "a.test", "/api/x"), (200, "api of a".into()));
    assert_eq!(
        get(&q, "b.test", "/api/x").0,
        404,
        "b has no such file and no api route"
    );
    assert_eq!(get(&q, "a.test", "/missing").0, 404);
}
