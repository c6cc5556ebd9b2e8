//! Named pools and routes (docs/design.md#http-mode, docs/design.md#http-routes): `[[pool]]` and
//! `[[listener.route]]` read from TOML (what `quill check` says of them, every error one line
//! with FILE:LINE), and requests through the real binary taking their routes: by host (exact and
//! `*.suffix`), path prefix and regex, method and header; to named pools, redirects, fixed
//! responses and 403; per-route client ACL, rate limit (429 with Retry-After), header edits and
//! path rewrite; 404 when nothing matches and the listener has no servers; `pool NAME` over the
//! control socket; a reload that changes routes while a request is in flight.

use crate::ctl;
use crate::http_support;
use crate::support;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ctl::*;
use http_support::*;
use support::*;

const T: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A backend that answers every request `200` with body `NAME TARGET`.
fn named(name: &'static str) -> Backend {
    Backend::start(move |r| {
        vec![Step::Send(response(
            200,
            "Content-Type: text/plain\r\n",
            format!("{name} {}", r.target).as_bytes(),
        ))]
    })
}

/// Quill from a TOML file: `body(port)` is the whole file, the control socket at DIR/ctl.sock
/// added on top. Returns the process and the file's path (for reloads).
fn start(body: impl Fn(u16) -> String) -> (QuillProcess, PathBuf) {
    let (q, probe, _) = Quill::spawn_first(|dir, port| {
        let cfg = dir.join("quill.toml");
        let text = format!(
            "control = \"{}\"\nworkers = 1\n{}",
            dir.join("ctl.sock").display(),
            body(port)
        );
        std::fs::write(&cfg, text).unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    });
    drop(probe);
    let cfg = q.path("quill.toml");
    wait_ctl(&q, &q.path("ctl.sock"));
    (q, cfg)
}

/// `[[pool]] NAME` with `servers`.
fn pool(name: &str, servers: &[SocketAddr]) -> String {
    let list: Vec<String> = servers.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "[[pool]]\nname = \"{name}\"\nservers = [{}]\n",
        list.join(", ")
    )
}

/// An HTTP listener on `port`, with `servers` (may be empty) and the route tables `routes`.
fn listener(port: u16, servers: &[SocketAddr], routes: &str) -> String {
    let list: Vec<String> = servers.iter().map(|a| format!("\"{a}\"")).collect();
    let servers = if list.is_empty() {
        String::new()
    } else {
        format!("servers = [{}]\n", list.join(", "))
    };
    format!(
        "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n{servers}{routes}"
    )
}

/// The named pools (each NAME and its servers) a routed listener's routes may name.
type Pools<'a> = &'a [(&'a str, &'a [SocketAddr])];

/// `pools` as `[[pool]]` tables, then an HTTP listener on `port` over `servers` (may be empty)
/// with the route tables `routes`.
fn routed(port: u16, pools: Pools, servers: &[SocketAddr], routes: &str) -> String {
    let mut text: String = pools.iter().map(|(name, s)| pool(name, s)).collect();
    text.push_str(&listener(port, servers, routes));
    text
}

/// Quill with the file [`routed`] writes; its control socket is `q.path("ctl.sock")`.
fn start_routed(pools: Pools, servers: &[SocketAddr], routes: &str) -> QuillProcess {
    start(|port| routed(port, pools, servers, routes)).0
}

/// Backends `name` and `default` (keep both alive while quill runs), and quill whose listener
/// over `default` has the route tables `routes`, which may name pool `name` over the first.
fn start_one_pool(name: &'static str, routes: &str) -> (Backend, Backend, QuillProcess) {
    let (routed, default) = (named(name), named("default"));
    let q = start_routed(&[(name, &[routed.addr()])], &[default.addr()], routes);
    (routed, default, q)
}

fn client(q: &QuillProcess) -> Client {
    Client::connect(q.addr())
}

/// A GET with Host `host` and extra header lines.
fn get_host(target: &str, host: &str, extra: &str) -> Vec<u8> {
    format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n").into_bytes()
}

fn body(r: &Response) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

fn write_cfg(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("q.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn check(text: &str) -> (i32, String, String) {
    let dir = scratch_dir();
    let path = write_cfg(dir.path(), text);
    run_quill_output(&["check", "--config", path.to_str().unwrap()])
}

/// `quill check` of `text` exits 2 with one line `quill: error: q.toml:LINE: ...` where LINE is
/// the line holding `at`, and the line names every one of `needles`.
fn refused(text: &str, at: &str, needles: &[&str]) {
    let line = text
        .lines()
        .position(|l| l.contains(at))
        .expect("`at` is in the text")
        + 1;
    refused_at(text, line, needles);
}

/// As [`refused`], at line `line`.
fn refused_at(text: &str, line: usize, needles: &[&str]) {
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

const POOLS: &str = "[[pool]]\nname = \"api\"\nservers = [\"127.0.0.1:9001\"]\n";

fn file(routes: &str) -> String {
    format!(
        "{POOLS}[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:18080\"\nprotocol = \"http\"\n\
         servers = [\"127.0.0.1:9002\"]\n{routes}"
    )
}

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

#[test]
fn quill_check_explains_named_pools_and_routes_one_line_each() {
    let text = "[acl]\n1 = [\"permit 10.0.0.0/8\"]\n\
        [[pool]]\nname = \"api\"\nservers = [\"127.0.0.1:9001\", \"127.0.0.1:9002\"]\nmode = [\"roundrobin\"]\n\
        health = { type = \"http\", path = \"/health\" }\n\
        [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:18080\"\nprotocol = \"http\"\n\
        [[listener.route]]\nname = \"api\"\nhost = [\"api.example.com\", \"*.example.org\"]\npath = \"/api/\"\n\
        methods = [\"GET\", \"POST\"]\nheaders = { \"X-Env\" = \"prod\" }\nclient_acl = 1\npool = \"api\"\n\
        rewrite_path = { prefix = \"/api/\", replace = \"/\" }\nrate = \"100/s\"\nburst = 20\n\
        [[listener.route]]\npath_regex = \"^/old/\"\nredirect = { to = \"https://example.com/\", status = 308 }\n\
        [[listener.route]]\nmethods = [\"DELETE\"]\ndeny = true\n\
        [[listener.route]]\nrespond = { status = 503, body = \"down\\n\" }\n";
    let (code, out, err) = check(text);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    for want in [
        "pool 'api': mode roundrobin\n",
        "  server 1: 127.0.0.1:9002",
        "  health check: http GET /health",
        "  route 'api': host api.example.com or *.example.org, path /api/*, method GET or POST, \
         x-env = prod -> pool api; clients outside acl 1 get 403; path /api/ rewritten to /; \
         rate 100/s burst 20 per client address (429 over it)\n",
        "  route 'route-2': path ~ ^/old/ -> redirect 308 to https://example.com/ + path and query\n",
        "  route 'route-3': method DELETE -> deny (403)\n",
        "  route 'route-4': any request -> respond 503 (5 bytes of text/plain; charset=utf-8)\n",
        "  no route matched: 404 (the listener has no servers)\n",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    // With servers of its own, unmatched requests go there.
    let (code, out, _) = check(&file("[[listener.route]]\npath = \"/a\"\npool = \"api\"\n"));
    assert_eq!(code, 0);
    assert!(
        out.contains("  no route matched: the listener's own servers\n"),
        "{out}"
    );
}

#[test]
fn route_and_pool_errors_are_one_line_with_file_and_line() {
    refused(
        &file("[[listener.route]]\npath = \"/a\"\npool = \"nope\"\n"),
        "[[listener.route]]",
        &["no pool named 'nope'"],
    );
    refused(
        &file("[[listener.route]]\npool = \"api\"\ndeny = true\n"),
        "deny = true",
        &["pool and deny", "exactly one action"],
    );
    refused(
        &file("[[listener.route]]\npath = \"/a\"\n"),
        "[[listener.route]]",
        &["no action"],
    );
    // Paths are matched in normal form: a prefix that is not would never match.
    refused(
        &file("[[listener.route]]\npath = \"/a//b/./c\"\npool = \"api\"\n"),
        "path = ",
        &["never matches", "normal form", "write '/a/b/c'"],
    );
    refused(
        &file("[[listener.route]]\npath = \"/../a\"\npool = \"api\"\n"),
        "path = ",
        &["never matches", "no normal form"],
    );
    refused(
        &file(
            "[[listener.route]]\npath = \"/api/\"\npool = \"api\"\n\
             rewrite_path = { prefix = \"/%61pi/\", replace = \"/\" }\n",
        ),
        "rewrite_path",
        &["rewrite_path: prefix", "write '/api/'"],
    );
    refused(
        &file("[[listener.route]]\npath_regex = \"^/(a\"\npool = \"api\"\n"),
        "path_regex",
        &["path_regex", "invalid regex"],
    );
    refused(
        &file("[[listener.route]]\nheaders = { \"X-A\" = { regex = \"[\" } }\npool = \"api\"\n"),
        "headers",
        &["X-A", "invalid regex"],
    );
    refused(
        &file("[[listener.route]]\nredirect = { to = \"https://e/\", status = 200 }\n"),
        "redirect",
        &["status 200 is not a redirect"],
    );
    for status in ["99", "600", "100"] {
        refused(
            &file(&format!(
                "[[listener.route]]\nrespond = {{ status = {status} }}\n"
            )),
            "respond",
            &[&format!("status {status} is out of range")],
        );
    }
    refused(
        &file("[[listener.route]]\nmethods = [\"get\"]\npool = \"api\"\n"),
        "methods",
        &["case-sensitive", "GET"],
    );
    refused(
        &file("[[listener.route]]\nhost = \"a.example.com:80\"\npool = \"api\"\n"),
        "host",
        &["a.example.com:80"],
    );
    refused(
        &file("[[listener.route]]\nrate = \"100/d\"\npool = \"api\"\n"),
        "rate",
        &["invalid rate '100/d'"],
    );
    refused(
        &file("[[listener.route]]\nburst = 5\npool = \"api\"\n"),
        "burst",
        &["burst needs a rate"],
    );
    refused(
        &file("[[listener.route]]\npath = \"/a\"\ndeny = true\nrewrite_path = { prefix = \"/a\", replace = \"/\" }\n"),
        "rewrite_path",
        &["only a route to a pool"],
    );
    // The file's lines 1-8 are the pool and the listener; the second route starts at line 12.
    refused_at(
        &file("[[listener.route]]\nname = \"x\"\ndeny = true\n[[listener.route]]\nname = \"x\"\ndeny = true\n"),
        12,
        &["two routes are named 'x'"],
    );
    refused(
        &format!(
            "{POOLS}[[listener]]\nname = \"tcp\"\nlisten = \"127.0.0.1:18081\"\nservers = [\"127.0.0.1:9002\"]\n\
             [[listener.route]]\ndeny = true\n"
        ),
        "[[listener.route]]",
        &["needs protocol = \"http\""],
    );
    refused(
        &format!(
            "{POOLS}[[listener]]\nname = \"tcp\"\nlisten = \"127.0.0.1:18081\"\nprotocol = \"http\"\n"
        ),
        "name = \"tcp\"",
        &["listener 'tcp' has no servers"],
    );
    refused(
        "[[pool]]\nname = \"empty\"\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:18080\"\n\
         servers = [\"127.0.0.1:9002\"]\n",
        "name = \"empty\"",
        &["pool 'empty' has no servers"],
    );
    refused_at(
        &format!("{POOLS}{}", file("")),
        5,
        &["duplicate pool name 'api'"],
    );
    refused(
        &file("").replace(
            "servers = [\"127.0.0.1:9001\"]",
            "servers = [\"127.0.0.1:18080\"]",
        ),
        "127.0.0.1:18080\"]",
        &["pool 'api': server 0 127.0.0.1:18080 is one of Quill's own listen addresses"],
    );
    refused(
        &file("[[listener.route]]\nbogus = 1\ndeny = true\n"),
        "bogus",
        &["bogus"],
    );
}

// ---------------------------------------------------------------------------------------------
// Requests through routes (the HTTP session consults `Pool.routes`)
// ---------------------------------------------------------------------------------------------

#[test]
fn http_routes_by_host_path_method_and_header_reach_their_pools() {
    let (api, admin, beta, web, default) = (
        named("api"),
        named("admin"),
        named("beta"),
        named("web"),
        named("default"),
    );
    let q = start_routed(
        &[
            ("api", &[api.addr()]),
            ("admin", &[admin.addr()]),
            ("beta", &[beta.addr()]),
            ("web", &[web.addr()]),
        ],
        &[default.addr()],
        "[[listener.route]]\nheaders = { \"X-Beta\" = \"yes\" }\npool = \"beta\"\n\
         [[listener.route]]\nmethods = [\"POST\", \"PUT\"]\npath = \"/admin/\"\npool = \"admin\"\n\
         [[listener.route]]\nhost = \"api.example.com\"\npath = \"/v1/\"\npool = \"api\"\n\
         [[listener.route]]\nhost = \"www.example.com\"\npool = \"web\"\n",
    );
    let mut c = client(&q);
    let mut ask = |req: Vec<u8>| {
        let r = c.roundtrip(&req);
        assert_eq!(r.status, 200, "{}", body(&r));
        body(&r)
    };
    assert_eq!(
        ask(get_host("/v1/users?x=1", "API.example.com:8080", "")),
        "api /v1/users?x=1"
    );
    assert_eq!(
        ask(get_host("/v2/users", "api.example.com", "")),
        "default /v2/users"
    );
    assert_eq!(ask(get_host("/", "www.example.com", "")), "web /");
    assert_eq!(
        ask(request("POST", "/admin/x", "", b"hi")),
        "admin /admin/x"
    );
    assert_eq!(
        ask(get("/admin/x")),
        "default /admin/x",
        "GET is not POST or PUT"
    );
    assert_eq!(
        ask(get_host("/v1/users", "api.example.com", "X-Beta: yes\r\n")),
        "beta /v1/users",
        "the first route that matches wins"
    );
    assert_eq!(
        ask(get_host("/", "www.example.com", "X-Beta: no\r\n")),
        "web /"
    );
    // Each pool got exactly its requests.
    assert_eq!(api.requests().len(), 1);
    assert_eq!(beta.requests().len(), 1);
    assert_eq!(admin.requests().len(), 1);
    assert_eq!(web.requests().len(), 2);
    assert_eq!(default.requests().len(), 2);
}

#[test]
fn http_wildcard_host_route_matches_subdomains_only() {
    let (_sub, _default, q) = start_one_pool(
        "sub",
        "[[listener.route]]\nhost = \"*.example.com\"\npool = \"sub\"\n",
    );
    let mut c = client(&q);
    for (host, want) in [
        ("a.example.com", "sub"),
        ("a.b.EXAMPLE.com:80", "sub"),
        ("example.com", "default"),
        ("badexample.com", "default"),
        ("example.com.evil.test", "default"),
    ] {
        let r = c.roundtrip(&get_host("/", host, ""));
        assert_eq!(body(&r), format!("{want} /"), "Host: {host}");
    }
}

#[test]
fn http_path_regex_route() {
    let (_img, _default, q) = start_one_pool(
        "img",
        "[[listener.route]]\npath_regex = \"(?i)\\\\.(png|jpg)$\"\npool = \"img\"\n",
    );
    let mut c = client(&q);
    assert_eq!(body(&c.roundtrip(&get("/a/b.PNG"))), "img /a/b.PNG");
    assert_eq!(
        body(&c.roundtrip(&get("/a/b.jpg?size=2"))),
        "img /a/b.jpg?size=2",
        "the query is not part of the path"
    );
    assert_eq!(
        body(&c.roundtrip(&get("/a/b.png.txt"))),
        "default /a/b.png.txt"
    );
}

#[test]
fn http_redirect_appends_path_and_query_unless_exact() {
    let default = named("default");
    let q = start_routed(
        &[],
        &[default.addr()],
        "[[listener.route]]\npath = \"/old/\"\nredirect = { to = \"https://new.example.com/\", status = 308 }\n\
         [[listener.route]]\npath = \"/gone\"\nredirect = { to = \"https://example.com/home\", status = 301, exact = true }\n",
    );
    let mut c = client(&q);
    let r = c.roundtrip(&get("/old/a/b?c=1&d=2"));
    assert_eq!(r.status, 308);
    assert_eq!(
        r.header("location"),
        Some("https://new.example.com/old/a/b?c=1&d=2")
    );
    assert!(!r.says_close(), "a redirect keeps the connection");
    let r = c.roundtrip(&get("/gone/x?y"));
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("https://example.com/home"));
    assert!(
        default.requests().is_empty(),
        "no server saw a redirected request"
    );
}

#[test]
fn http_respond_route_answers_without_a_server() {
    let q = start_routed(
        &[],
        &[],
        "[[listener.route]]\npath = \"/health\"\nrespond = { status = 200, body = \"ok\\n\" }\n\
         [[listener.route]]\nrespond = { status = 503, body = \"maintenance\\n\", content_type = \"text/html\" }\n",
    );
    let mut c = client(&q);
    let r = c.roundtrip(&get("/health"));
    assert_eq!((r.status, body(&r).as_str()), (200, "ok\n"));
    let r = c.roundtrip(&get("/anything"));
    assert_eq!((r.status, body(&r).as_str()), (503, "maintenance\n"));
    assert_eq!(r.header("content-type"), Some("text/html"));
    c.send(&request("HEAD", "/health", "", b""));
    let h = c.read_head_response();
    assert_eq!(h.status, 200);
    assert_eq!(
        h.header("content-length"),
        Some("3"),
        "HEAD keeps the length"
    );
    assert!(h.body.is_empty());
    // No stray body bytes before the next answer.
    let r = c.roundtrip(&get("/health"));
    assert_eq!((r.status, body(&r).as_str()), (200, "ok\n"));
}

#[test]
fn http_deny_route_gives_403() {
    let default = named("default");
    let q = start_routed(
        &[],
        &[default.addr()],
        "[[listener.route]]\nmethods = [\"DELETE\"]\ndeny = true\n\
         [[listener.route]]\npath = \"/.git\"\ndeny = true\n",
    );
    let mut c = client(&q);
    assert_eq!(c.roundtrip(&request("DELETE", "/x", "", b"")).status, 403);
    let mut c = client(&q);
    assert_eq!(c.roundtrip(&get("/.git/config")).status, 403);
    let mut c = client(&q);
    assert_eq!(c.roundtrip(&get("/ok")).status, 200);
    assert_eq!(
        default.requests().len(),
        1,
        "denied requests reach no server"
    );
}

#[test]
fn http_route_client_acl_denies_other_addresses() {
    let (admin, default) = (named("admin"), named("default"));
    let (q, _) = start(|port| {
        format!(
            "[acl]\n1 = [\"permit 127.0.0.2\", \"deny 0.0.0.0/0\"]\n{}",
            routed(
                port,
                &[("admin", &[admin.addr()])],
                &[default.addr()],
                "[[listener.route]]\npath = \"/admin\"\nclient_acl = 1\npool = \"admin\"\n",
            )
        )
    });
    let local: IpAddr = "127.0.0.1".parse().unwrap();
    let other: IpAddr = "127.0.0.2".parse().unwrap();
    let mut from_local = Client::from_stream(connect_from(local, q.addr()).unwrap());
    assert_eq!(from_local.roundtrip(&get("/admin/x")).status, 403);
    let mut from_local = Client::from_stream(connect_from(local, q.addr()).unwrap());
    assert_eq!(
        body(&from_local.roundtrip(&get("/other"))),
        "default /other"
    );
    let mut from_other = Client::from_stream(connect_from(other, q.addr()).unwrap());
    let r = from_other.roundtrip(&get("/admin/x"));
    assert_eq!((r.status, body(&r).as_str()), (200, "admin /admin/x"));
    assert_eq!(admin.requests().len(), 1);
}

#[test]
fn http_rate_limited_route_gives_429_with_retry_after() {
    let (api, _default, q) = start_one_pool(
        "api",
        "[[listener.route]]\npath = \"/api/\"\nrate = \"1/m\"\nburst = 2\npool = \"api\"\n",
    );
    let mut c = client(&q);
    assert_eq!(c.roundtrip(&get("/api/1")).status, 200);
    assert_eq!(c.roundtrip(&get("/api/2")).status, 200);
    let r = c.roundtrip(&get("/api/3"));
    assert_eq!(r.status, 429, "{}", body(&r));
    let wait: u64 = r
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!((1..=60).contains(&wait), "Retry-After {wait}");
    // The bucket is the client address's, not the connection's: a new connection is still limited.
    let mut c2 = client(&q);
    assert_eq!(c2.roundtrip(&get("/api/4")).status, 429);
    assert_eq!(
        c2.roundtrip(&get("/free")).status,
        200,
        "other routes are not limited"
    );
    assert_eq!(api.requests().len(), 2);
}

#[test]
fn http_route_header_edits_and_rewrite_path() {
    let api = Backend::start(|r| {
        vec![Step::Send(response(
            200,
            "Server: secret/1.0\r\n",
            echo_text(r).as_bytes(),
        ))]
    });
    let default = named("default");
    let q = start_routed(
        &[("api", &[api.addr()])],
        &[default.addr()],
        "[[listener.route]]\npath = \"/api/\"\npool = \"api\"\n\
         rewrite_path = { prefix = \"/api/\", replace = \"/v2/\" }\n\
         request_headers = { set = { \"X-Route\" = \"api\" }, remove = [\"X-Debug\"] }\n\
         response_headers = { remove = [\"Server\"], add = { \"X-Served-By\" = \"api\" } }\n",
    );
    let mut c = client(&q);
    let r = c.roundtrip(&request("GET", "/api/users?id=7", "X-Debug: 1\r\n", b""));
    assert_eq!(r.status, 200);
    let req = &api.wait_requests(1, T)[0];
    assert_eq!(req.target, "/v2/users?id=7");
    assert_eq!(req.header_all("x-route"), vec!["api"]);
    assert!(!req.has("x-debug"), "{:?}", req.headers);
    assert!(r.header("server").is_none(), "{:?}", r.headers);
    assert_eq!(r.header("x-served-by"), Some("api"));
    // The default pool gets neither the edits nor the rewrite.
    let r = c.roundtrip(&get("/other"));
    assert!(r.header("x-served-by").is_none());
    assert_eq!(default.requests()[0].target, "/other");
    assert!(!default.requests()[0].has("x-route"));
}

#[test]
fn http_unmatched_request_without_default_pool_gets_404() {
    let api = named("api");
    let q = start_routed(
        &[("api", &[api.addr()])],
        &[],
        "[[listener.route]]\npath = \"/api/\"\npool = \"api\"\n",
    );
    let mut c = client(&q);
    assert_eq!(c.roundtrip(&get("/api/x")).status, 200);
    let r = c.roundtrip(&get("/elsewhere"));
    assert_eq!(r.status, 404);
    assert_eq!(api.requests().len(), 1);
}

#[test]
fn http_control_command_drains_a_named_pool_server() {
    let (a, b) = (named("a"), named("b"));
    // Round robin: with Pen's default client tracking, every request from 127.0.0.1 would stay
    // on the server it had while server 0 was drained.
    let (q, _) = start(|port| {
        format!(
            "{}mode = [\"roundrobin\"]\n{}",
            pool("api", &[a.addr(), b.addr()]),
            listener(port, &[], "[[listener.route]]\npool = \"api\"\n")
        )
    });
    let sock = q.path("ctl.sock");
    let servers = ctl(&sock, "pool api servers");
    assert!(
        servers.contains(&format!(" port {} ", a.addr().port())),
        "{servers}"
    );
    assert!(
        servers.contains(&format!(" port {} ", b.addr().port())),
        "{servers}"
    );
    ctl_ok(&sock, "pool api server 0 drain");
    assert!(ctl(&sock, "pool api servers").contains("drain"));
    ctl_err(&sock, "pool nope server 0 drain", "no pool named 'nope'");
    ctl_ok(&sock, "pool api blacklist 7");
    assert_eq!(ctl(&sock, "pool api blacklist").trim(), "7");
    ctl_err(&sock, "pool api listen 127.0.0.1:1", "not a pool setting");
    let before = a.requests().len();
    for i in 0..6 {
        let mut c = client(&q);
        let r = c.roundtrip(&get(&format!("/{i}")));
        assert_eq!(
            body(&r),
            format!("b /{i}"),
            "drained server 0 gets no new request"
        );
    }
    assert_eq!(a.requests().len(), before);
    ctl_ok(&sock, "pool api server 0 enable");
    let got_a = (0..10).any(|i| {
        let mut c = client(&q);
        body(&c.roundtrip(&get(&format!("/again{i}")))).starts_with("a ")
    });
    assert!(got_a, "enabled again, server 0 takes requests");
}

#[test]
fn http_reload_changes_routes_without_dropping_a_request_in_flight() {
    let gate = Gate::new();
    let g = gate.clone();
    let old = Backend::start(move |r| {
        let mut steps = Vec::new();
        if r.target == "/slow" {
            steps.push(Step::Wait(g.clone()));
        }
        steps.push(Step::Send(response(
            200,
            "",
            format!("old {}", r.target).as_bytes(),
        )));
        steps
    });
    let new = named("new");
    let routes = |to: &str| format!("[[listener.route]]\npath = \"/\"\npool = \"{to}\"\n");
    let (q, cfg) = start(|port| {
        let pools: Pools = &[("old", &[old.addr()]), ("new", &[new.addr()])];
        routed(port, pools, &[], &routes("old"))
    });
    let mut in_flight = client(&q);
    in_flight.send(&get("/slow"));
    assert!(
        !old.wait_requests(1, T).is_empty(),
        "the slow request reached the old pool"
    );
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace(&routes("old"), &routes("new"))).unwrap();
    let reply = ctl(&q.path("ctl.sock"), "reload");
    assert!(reply.contains("reloaded"), "{reply}");
    let mut c = client(&q);
    assert_eq!(body(&c.roundtrip(&get("/after"))), "new /after");
    gate.open_once();
    let r = in_flight.read_response();
    assert_eq!((r.status, body(&r).as_str()), (200, "old /slow"));
    // The kept-alive connection's next request takes the new route.
    assert_eq!(body(&in_flight.roundtrip(&get("/next"))), "new /next");
}

/// Quill with pool `api` over `servers`, checked by HTTP every 100 ms (`check`: the fields of
/// `health` besides type and timing; rise and fall 1), and a listener whose one route goes there.
fn start_checked_pool(servers: &[SocketAddr], check: &str) -> QuillProcess {
    let health = format!(
        "health = {{ type = \"http\", {check}, interval = \"100ms\", timeout = \"500ms\", \
         rise = 1, fall = 1 }}\n"
    );
    let routes = "[[listener.route]]\npool = \"api\"\n";
    start(|port| {
        format!(
            "{}{health}{}",
            pool("api", servers),
            listener(port, &[], routes)
        )
    })
    .0
}

/// Waits (at most `T`) until `pool api servers` shows server 0 up and server 1 down; returns
/// whether it did and the last answer.
fn wait_first_up_second_down(q: &QuillProcess) -> (bool, String) {
    let sock = q.path("ctl.sock");
    let mut last = String::new();
    let seen = wait_until(T, || {
        last = ctl(&sock, "pool api servers");
        let lines: Vec<&str> = last.lines().collect();
        lines.len() == 2 && lines[0].contains(" health up ") && lines[1].contains(" health down ")
    });
    (seen, last)
}

#[test]
fn named_pool_servers_are_health_checked() {
    let up = named("up");
    let dead = refused_addr();
    let q = start_checked_pool(&[up.addr(), dead], "path = \"/health\"");
    let (down, last) = wait_first_up_second_down(&q);
    assert!(down, "the dead server of the named pool goes down:\n{last}");
}

// ---------------------------------------------------------------------------------------------
// Stickiness by an inserted cookie (docs/design.md#stickiness)
// ---------------------------------------------------------------------------------------------

/// The `Set-Cookie` value Quill gave (`NAME=VALUE`), if any.
fn sticky_cookie_of(r: &Response) -> Option<String> {
    r.header_all("set-cookie")
        .into_iter()
        .find(|v| v.starts_with("SRV="))
        .map(|v| v.split(';').next().unwrap_or("").to_string())
}

/// Quill with a round-robin HTTP listener over `servers` that inserts the cookie `SRV`.
fn start_sticky(servers: &[SocketAddr]) -> QuillProcess {
    start(|port| {
        format!(
            "{}mode = [\"roundrobin\"]\nsticky_cookie = \"SRV\"\n",
            listener(port, servers, "")
        )
    })
    .0
}

/// A first request on a new connection: the cookie (`SRV=...`) Quill set and the name of the
/// server that answered (the first letter of the body).
fn first_sticky(q: &QuillProcess) -> (String, String) {
    let first = client(q).roundtrip(&get("/"));
    let cookie = sticky_cookie_of(&first).expect("a Set-Cookie for the server");
    (cookie, body(&first)[..1].to_string())
}

#[test]
fn http_sticky_cookie_keeps_a_client_on_its_server_across_connections() {
    let (a, b) = (named("a"), named("b"));
    let q = start_sticky(&[a.addr(), b.addr()]);
    // The first answer names the server in a cookie.
    let (cookie, server) = first_sticky(&q);
    // With the cookie, every request on new connections reaches that server, though round robin
    // alone would alternate; and no new cookie is sent.
    for i in 0..6 {
        let r = client(&q).roundtrip(&get_host(
            &format!("/{i}"),
            "example.test",
            &format!("Cookie: x=1; {cookie}\r\n"),
        ));
        assert_eq!(
            body(&r)[..1],
            server,
            "request {i} went elsewhere: {}",
            body(&r)
        );
        assert!(
            sticky_cookie_of(&r).is_none(),
            "cookie sent again: {:?}",
            r.header_all("set-cookie")
        );
    }
    // Without it, round robin goes on.
    let bodies: Vec<String> = (0..4)
        .map(|i| body(&client(&q).roundtrip(&get(&format!("/n{i}"))))[..1].to_string())
        .collect();
    assert!(bodies.iter().any(|s| *s != server), "{bodies:?}");
}

#[test]
fn http_sticky_cookie_naming_a_drained_server_moves_the_client_and_renews_the_cookie() {
    let (a, b) = (named("a"), named("b"));
    let q = start_sticky(&[a.addr(), b.addr()]);
    let (cookie, server) = first_sticky(&q);
    let index = if server == "a" { 0 } else { 1 };
    ctl_ok(&q.path("ctl.sock"), &format!("server {index} drain"));
    let r = client(&q).roundtrip(&get_host(
        "/after",
        "example.test",
        &format!("Cookie: {cookie}\r\n"),
    ));
    assert_ne!(
        body(&r)[..1],
        server,
        "a drained server took a sticky request"
    );
    let renewed = sticky_cookie_of(&r).expect("a new cookie for the new server");
    assert_ne!(renewed, cookie);
}

#[test]
fn sticky_cookie_must_be_a_token() {
    let (code, _, err) = check(
        "[[listener]]\nname = \"w\"\nlisten = \"127.0.0.1:1\"\nprotocol = \"http\"\nservers = [\"127.0.0.1:2\"]\nsticky_cookie = \"a b\"\n",
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("sticky_cookie") && err.contains(":6:"),
        "{err}"
    );
}

#[test]
fn http_health_check_sends_the_configured_host() {
    // A virtual-host server: 200 for app.example.com, 404 for anything else.
    let vhost = Backend::start(|r| {
        let status = if r.header("host") == Some("app.example.com") {
            200
        } else {
            404
        };
        vec![Step::Send(response(status, "", b"x")), Step::Close]
    });
    let other = Backend::start(|_| vec![Step::Send(response(404, "", b"x")), Step::Close]);
    let q = start_checked_pool(&[vhost.addr(), other.addr()], "host = \"app.example.com\"");
    let (seen, last) = wait_first_up_second_down(&q);
    let sock = q.path("ctl.sock");
    assert!(seen, "the check must carry Host: app.example.com:\n{last}");
    // Servers start up: the proof is that the virtual host stays up after checks it answered
    // only because of the Host they carried.
    let checks = vhost.wait_requests(2, T);
    let after = ctl(&sock, "pool api servers");
    assert!(
        after
            .lines()
            .next()
            .is_some_and(|l| l.contains(" health up ")),
        "{after}"
    );
    let hosts: Vec<String> = checks
        .iter()
        .filter_map(|r| r.header("host").map(str::to_string))
        .collect();
    assert!(
        !hosts.is_empty() && hosts.iter().all(|h| h == "app.example.com"),
        "{hosts:?}"
    );
}

/// Sends `raw` on a new connection and returns the status (0 when the connection closed first).
fn status_of(q: &QuillProcess, raw: &[u8]) -> u16 {
    let mut c = client(q);
    c.send(raw);
    c.try_read_response(false, T).map_or(0, |r| r.status)
}

#[test]
fn absolute_form_with_userinfo_only_authority_is_400() {
    // E2 of the turn-3 probe: routing read the target's (empty or invalid) authority, the
    // rewrite kept the client's Host, so a host route's deny and client_acl were passed.
    let (admin, default) = (named("admin"), named("default"));
    let (q, _) = start(|port| {
        format!(
            "[acl]\n1 = [\"deny 127.0.0.0/8\"]\n{}",
            routed(
                port,
                &[("admin", &[admin.addr()])],
                &[default.addr()],
                "[[listener.route]]\nhost = \"admin.test\"\ndeny = true\n\
                 [[listener.route]]\nhost = \"*.internal.test\"\nclient_acl = 1\npool = \"admin\"\n",
            )
        )
    });
    for (target, host) in [
        ("http://x@/secret", "admin.test"),
        ("http://admin.test|/secret", "admin.test"),
        ("http://a{b/secret", "admin.test"),
        ("HTTP://x^y/", "admin.test"),
        ("http://x@admin.test/secret", "admin.test"),
        ("http://x@/secret", "foo.internal.test"),
        // A Host that names another host than the target's authority.
        ("http://app.test/secret", "admin.test"),
    ] {
        let raw = get_host(target, host, "");
        assert_eq!(status_of(&q, &raw), 400, "{target} with Host {host}");
    }
    // The same host in both: the route decides as it does for origin form.
    assert_eq!(
        status_of(&q, &get_host("http://admin.test/secret", "admin.test", "")),
        403
    );
    assert_eq!(
        status_of(&q, &get_host("/secret", "foo.internal.test", "")),
        403
    );
    assert_eq!(
        status_of(&q, &get_host("HTTP://App.Test:80/x", "app.test", "")),
        200
    );
    let reqs = default.wait_requests(1, T);
    assert_eq!(reqs.len(), 1, "only the last request reached a server");
    assert_eq!(reqs[0].target, "/x");
    assert_eq!(reqs[0].header_all("host"), vec!["App.Test:80"]);
    assert!(admin.requests().is_empty());
}

#[test]
fn deny_on_admin_meets_dot_segment_and_encoded_paths() {
    // E13: a deny on /admin was passed by //admin, /%61dmin, /./admin and /x/../admin, which a
    // server that resolves the path reads as /admin (nginx matches its locations that way).
    let (api, default) = (named("api"), named("default"));
    let (q, _) = start(|port| {
        format!(
            "[acl]\n1 = [\"deny 127.0.0.0/8\"]\n{}",
            routed(
                port,
                &[("api", &[api.addr()])],
                &[default.addr()],
                "[[listener.route]]\npath = \"/admin\"\ndeny = true\n\
                 [[listener.route]]\npath = \"/internal/\"\nclient_acl = 1\npool = \"api\"\n\
                 [[listener.route]]\npath_regex = \"^/api/v[0-9]+/\"\npool = \"api\"\n\
                 rewrite_path = { prefix = \"/api/\", replace = \"/\" }\n",
            )
        )
    });
    for target in [
        "/admin",
        "//admin",
        "/%61dmin",
        "/./admin",
        "/x/../admin",
        "/%2Fadmin",
        "/x%2F..%2Fadmin",
        "/x/%2e%2e/admin",
        "http://h/x/../admin",
        "/internal/x",
        "//internal//x",
        "/public/..%2Finternal/x",
    ] {
        let raw = get_host(target, "h", "");
        assert_eq!(status_of(&q, &raw), 403, "{target}");
    }
    // A `..` above the root and a broken escape are refused, as nginx does.
    for target in [
        "/../admin",
        "/x/../../admin",
        "/%2e%2e/admin",
        "/a%zz",
        "/a%00",
    ] {
        let raw = get_host(target, "h", "");
        assert_eq!(status_of(&q, &raw), 400, "{target}");
    }
    // Case and `;` are kept: these are other paths.
    assert_eq!(status_of(&q, &get_host("/ADMIN", "h", "")), 200);
    // A path regex and a path rewrite see the normal form too; the rewritten path goes out in
    // normal form, any other path as the client sent it.
    assert_eq!(
        status_of(&q, &get_host("/api//v2/./users?a=/b", "h", "")),
        200
    );
    assert_eq!(status_of(&q, &get_host("/pub//x/../y%41?q", "h", "")), 200);
    let to_api = api.wait_requests(1, T);
    assert_eq!(to_api[0].target, "/v2/users?a=/b");
    let to_default = default.wait_requests(2, T);
    let targets: Vec<&str> = to_default.iter().map(|r| r.target.as_str()).collect();
    assert_eq!(targets, ["/ADMIN", "/pub//x/../y%41?q"]);
}

#[test]
fn normalize_path_forward_sends_the_path_a_route_matched() {
    let default = named("default");
    let (q, _) = start(|port| {
        format!(
            "{}[listener.http]\nnormalize_path = \"forward\"\n",
            listener(
                port,
                &[default.addr()],
                "[[listener.route]]\npath = \"/admin\"\ndeny = true\n"
            )
        )
    });
    assert_eq!(status_of(&q, &get_host("/x/../admin", "h", "")), 403);
    assert_eq!(
        status_of(&q, &get_host("//pub/./a/../b%7e?q=/../x", "h", "")),
        200
    );
    let reqs = default.wait_requests(1, T);
    assert_eq!(reqs[0].target, "/pub/b~?q=/../x");
    let (code, out, err) = check(&std::fs::read_to_string(q.path("quill.toml")).unwrap());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("normalize_path forward"), "{out}");
}
