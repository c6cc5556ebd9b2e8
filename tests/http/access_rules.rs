//! Access rules (docs/access-rules.md) through the real binary, as an attacker would try them:
//! `deny` routes on a path prefix, a regex and a case-insensitive prefix in front of a real
//! backend, and every other spelling of the refused paths (escapes, `//`, dot segments, `;`,
//! case, `%00`, `%2F`, absolute form, a fragment, overlong UTF-8), each answered 403 or 400 while
//! the backend sees nothing; then the hotlink rule (`invalid_referer`) with each kind of
//! `Referer`.

use crate::http_support;
use crate::support;

use std::time::Duration;

use http_support::*;
use support::*;

const T: Duration = Duration::from_secs(10);

/// A backend that answers every request `200` with body `backend TARGET`.
fn backend() -> Backend {
    Backend::start(|r| {
        vec![Step::Send(response(
            200,
            "Content-Type: text/plain\r\n",
            format!("backend {}", r.target).as_bytes(),
        ))]
    })
}

/// Quill with one HTTP listener over `backend` and the route tables `routes`.
fn start(backend: &Backend, routes: &str) -> QuillProcess {
    let addr = backend.addr();
    let (q, probe, _) = Quill::spawn_first(|dir, port| {
        let cfg = dir.join("quill.toml");
        let text = format!(
            "workers = 1\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\n\
             protocol = \"http\"\nservers = [\"{addr}\"]\n{routes}"
        );
        std::fs::write(&cfg, text).unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    });
    drop(probe);
    q
}

/// The status Quill answers one request (raw bytes, on a connection of its own).
fn status_of(q: &QuillProcess, raw: &[u8]) -> u16 {
    let mut c = Client::connect(q.addr());
    c.send(raw);
    c.read_response().status
}

/// `GET target` with Host `site.example` and extra header lines.
fn get(target: &str, extra: &str) -> Vec<u8> {
    format!("GET {target} HTTP/1.1\r\nHost: site.example\r\n{extra}\r\n").into_bytes()
}

const DENY_ROUTES: &str = "\
[[listener.route]]
name = \"private\"
path = \"/private\"
deny = true

[[listener.route]]
name = \"php\"
path_regex = '\\.php$'
path_case = \"insensitive\"
deny = true

[[listener.route]]
name = \"admin\"
path = \"/admin\"
path_case = \"insensitive\"
deny = true
";

/// Each way of spelling a refused path, and the answer it must get (403: the route took it;
/// 400: the path has no normal form or the target is not valid).
const BYPASSES: &[(&str, u16)] = &[
    ("/private", 403),
    ("/private/x", 403),
    ("/priv%61te", 403),
    ("/%70rivate", 403),
    ("/%70%72%69%76%61%74%65", 403),
    ("//private", 403),
    ("///private//x", 403),
    ("/./private", 403),
    ("/%2e/private", 403),
    ("/x/../private", 403),
    ("/x/%2e%2e/private", 403),
    ("/x/..%2fprivate", 403),
    ("/private;x", 403),
    ("/private?x=1", 403),
    ("/private%2fx", 403),
    ("/private%2Fx", 403),
    ("/%2fprivate", 403),
    ("/ADMIN", 403),
    ("/Admin/x", 403),
    ("/%41dmin", 403),
    ("/%61DMIN", 403),
    ("/a.php", 403),
    ("/a.PHP", 403),
    ("/a.pHp", 403),
    ("/a.ph%70", 403),
    ("/a.php?x", 403),
    ("/dir/../a.php", 403),
    ("/a.php%00", 400),
    ("/private%00", 400),
    ("/../private", 400),
    ("/private%zz", 400),
    ("/private#frag", 400),
    ("/a.php#.txt", 400),
    ("/%C0%AE%C0%AE/private", 400),
    ("/x/%c0%ae%c0%ae/private", 400),
    ("/%c0%afprivate", 400),
    ("/%E0%80%AFprivate", 400),
];

#[test]
fn no_spelling_of_a_denied_path_reaches_the_backend() {
    let b = backend();
    let q = start(&b, DENY_ROUTES);
    let mut wrong = Vec::new();
    for (target, want) in BYPASSES {
        let got = status_of(&q, &get(target, ""));
        if got != *want {
            wrong.push(format!("{target}: {got}, want {want}"));
        }
    }
    // Absolute form: the path after the authority is matched.
    for target in [
        "http://site.example/private",
        "http://site.example//priv%61te",
    ] {
        let got = status_of(&q, &get(target, ""));
        if got != 403 {
            wrong.push(format!("{target}: {got}, want 403"));
        }
    }
    // Overlong UTF-8 as raw bytes is not a valid target at all.
    let raw = b"GET /\xc0\xae\xc0\xae/private HTTP/1.1\r\nHost: site.example\r\n\r\n";
    let got = status_of(&q, raw);
    if got != 400 {
        wrong.push(format!("raw overlong: {got}, want 400"));
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert!(
        b.requests().is_empty(),
        "the backend saw {:?}",
        b.requests().iter().map(|r| &r.target).collect::<Vec<_>>()
    );
}

#[test]
fn a_case_sensitive_prefix_passes_other_cases_and_neighbours_by_design() {
    let b = backend();
    let q = start(&b, DENY_ROUTES);
    // `path = "/private"` without path_case is nginx's `location /private`: case is kept.
    for target in [
        "/PRIVATE",
        "/Private/x",
        "/public",
        "/a.php.txt",
        "/adm",
        "/%2528private",
    ] {
        assert_eq!(status_of(&q, &get(target, "")), 200, "{target}");
    }
    let seen: Vec<String> = b
        .wait_requests(6, T)
        .iter()
        .map(|r| r.target.clone())
        .collect();
    // The backend gets the path as sent.
    assert_eq!(
        seen,
        [
            "/PRIVATE",
            "/Private/x",
            "/public",
            "/a.php.txt",
            "/adm",
            "/%2528private"
        ]
    );
}

const HOTLINK_ROUTES: &str = "\
[[listener.route]]
name = \"hotlink\"
path_regex = '\\.(png|jpg)$'
path_case = \"insensitive\"
invalid_referer = { valid = [\"example.com\", \"*.example.com\"], none = true, blocked = true, server_names = true }
deny = true
";

/// `Referer` header lines and whether the image is served (200) or refused (403).
const REFERERS: &[(&str, u16)] = &[
    ("", 200),
    ("Referer: -\r\n", 200),
    ("Referer: site.example/page\r\n", 200),
    ("Referer: http://site.example/page\r\n", 200),
    ("Referer: https://SITE.example:8443/page\r\n", 200),
    ("Referer: http://example.com/\r\n", 200),
    ("Referer: https://www.example.com/a\r\n", 200),
    ("Referer: https://a.b.Example.COM./a\r\n", 200),
    ("Referer: http://example.com:8080/x\r\n", 200),
    ("Referer: http://user:pw@example.com/x\r\n", 200),
    ("Referer: https://evil.net/\r\n", 403),
    ("Referer: https://evil.example.com.attacker.net/\r\n", 403),
    ("Referer: https://badexample.com/\r\n", 403),
    ("Referer: http://example.com@evil.net/\r\n", 403),
    ("Referer: http://example.com:pw@evil.net:80/\r\n", 403),
    ("Referer: http://evil.net\\@example.com/\r\n", 403),
    ("Referer: http://ex%61mple.com/\r\n", 403),
    ("Referer: http://example.com:evil/\r\n", 403),
    ("Referer: http:///example.com\r\n", 403),
];

#[test]
fn images_linked_from_other_sites_are_refused_and_the_own_sites_pass() {
    let b = backend();
    let q = start(&b, HOTLINK_ROUTES);
    let mut wrong = Vec::new();
    let mut served = 0;
    for (extra, want) in REFERERS {
        let got = status_of(&q, &get("/img/cat.PNG", extra));
        if got != *want {
            wrong.push(format!("{extra:?}: {got}, want {want}"));
        }
        served += usize::from(*want == 200);
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // A page (no image) is served whatever the Referer.
    assert_eq!(
        status_of(&q, &get("/index.html", "Referer: https://evil.net/\r\n")),
        200
    );
    let seen = b.wait_requests(served + 1, T);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        b.requests().len(),
        served + 1,
        "a refused request reached the backend"
    );
    assert_eq!(seen.last().map(|r| r.target.as_str()), Some("/index.html"));
}

#[test]
fn without_none_or_blocked_a_missing_or_blanked_referer_is_refused() {
    let b = backend();
    let q = start(
        &b,
        "[[listener.route]]\npath = \"/img/\"\n\
         invalid_referer = { valid = [\"*.example.com\"] }\ndeny = true\n",
    );
    assert_eq!(status_of(&q, &get("/img/a.png", "")), 403);
    assert_eq!(status_of(&q, &get("/img/a.png", "Referer: -\r\n")), 403);
    assert_eq!(
        status_of(&q, &get("/img/a.png", "Referer: http://site.example/\r\n")),
        403,
        "the own host is valid only with server_names"
    );
    assert_eq!(
        status_of(&q, &get("/img/a.png", "Referer: http://example.com/\r\n")),
        403,
        "*.example.com is for subdomains"
    );
    assert_eq!(
        status_of(
            &q,
            &get("/img/a.png", "Referer: http://www.example.com/\r\n")
        ),
        200
    );
    assert_eq!(b.wait_requests(1, T).len(), 1);
}

/// A listener (no servers needed for `quill check`) with the route tables `routes`.
fn check_file(routes: &str) -> (i32, String, String, String, std::path::PathBuf) {
    let dir = scratch_dir();
    let text = format!(
        "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:18080\"\nprotocol = \"http\"\n\
         servers = [\"127.0.0.1:9001\"]\n{routes}"
    );
    let path = dir.path().join("q.toml");
    std::fs::write(&path, &text).unwrap();
    let (code, out, err) = run_quill_output(&["check", "--config", path.to_str().unwrap()]);
    drop(dir);
    (code, out, err, text, path)
}

#[test]
fn quill_check_explains_the_rules_and_refuses_bad_ones_with_file_and_line() {
    let (code, out, err, _, _) = check_file(&format!("{DENY_ROUTES}{HOTLINK_ROUTES}"));
    assert_eq!(code, 0, "{err}");
    for needle in [
        "route 'private': path /private* -> deny (403)",
        // The regex as `quill check` shows it: escaped, so the backslash is doubled.
        r"route 'php': path ~* \\.php$ -> deny (403)",
        "route 'admin': path /admin* without case -> deny (403)",
        "route 'hotlink': path ~* \\\\.(png|jpg)$, Referer not one of [none, blocked, \
         server_names, example.com, *.example.com] -> deny (403)",
    ] {
        assert!(out.contains(needle), "{needle:?} not in:\n{out}");
    }
    for (routes, at, reason) in [
        (
            "[[listener.route]]\npath = \"/a\"\npath_case = \"upper\"\ndeny = true\n",
            "path_case",
            "route 'route-1': path_case: 'upper' (expected \"sensitive\" or \"insensitive\")",
        ),
        (
            "[[listener.route]]\ninvalid_referer = { valid = [\"*.example.com:443\"] }\n\
             deny = true\n",
            "invalid_referer",
            "route 'route-1': invalid_referer: valid: '*.example.com:443' is not a host name",
        ),
        (
            "[[listener.route]]\ninvalid_referer = { blocked = false }\ndeny = true\n",
            "invalid_referer",
            "route 'route-1': invalid_referer: nothing is valid",
        ),
    ] {
        let (code, _, err, text, path) = check_file(routes);
        assert_eq!(code, 2, "{err}");
        let line = text.lines().position(|l| l.contains(at)).unwrap() + 1;
        let want = format!("quill: error: {}:{line}: {reason}", path.display());
        assert!(err.starts_with(&want), "{err:?} should start with {want:?}");
        assert_eq!(err.lines().count(), 1, "{err:?}");
    }
}
