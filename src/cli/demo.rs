//! `quill demo`: Quill over built-in demo HTTP backends, with a health check, a control socket,
//! the status page and an HTTP listener with a route, and what to try printed.

use std::process::ExitCode;

use super::{fail, run};
use crate::addr;
use crate::command::ModeWord;
use crate::config::{self, Config, ErrorKind, Global, ListenerConfig, ListenerKind};
use crate::demo::{Behaviour, DemoServer};
use crate::runtime::Start;

/// The demo's HTTP listener: the port after the TCP listener's when it is free now, else any
/// free port (none for a Unix socket). The demo is for trying things: a tiny race is acceptable.
fn listen_addr_for_http(listen: &str) -> addr::ListenAddr {
    let Ok(addr::ListenAddr::Tcp(mut a)) = addr::parse_listen(listen) else {
        return config::model::pool_addr();
    };
    let next = a.port().checked_add(1);
    a.set_port(next.unwrap_or(0));
    if next.is_none() || std::net::TcpListener::bind(a).is_err() {
        a.set_port(0);
        match std::net::TcpListener::bind(a).and_then(|l| l.local_addr()) {
            Ok(free) => a = free,
            Err(_) => return config::model::pool_addr(),
        }
    }
    addr::ListenAddr::Tcp(a)
}

/// `quill demo`: Quill on `listen`, round robin over `backends` demo HTTP backends, with a
/// health check, a control socket, the status page and (on the next port) an HTTP listener
/// with a route; prints what to try, then runs until stopped.
pub(super) fn demo(listen: &str, backends: u16, debug: u8) -> ExitCode {
    let listen_addr = match addr::parse_listen(listen) {
        Ok(a) => a,
        Err(e) => return fail(ErrorKind::Usage, &format!("--listen: {e}")),
    };
    let mut servers = Vec::new();
    let mut l = ListenerConfig::new("demo", listen_addr);
    l.mode.set(ModeWord::RoundRobin, true);
    // The backends queue connects as deeply as Quill's listener does: the suggested
    // `quill bench --idle 1000` opens about 1000 / N backend connections in a burst.
    let backlog = Global::default().backlog;
    for i in 1..=backends {
        let s = match start_backend(format!("demo-{i}"), backlog) {
            Ok(s) => s,
            Err(code) => return code,
        };
        l.servers
            .push(addr::ServerSpec::new(addr::BackendAddr::Tcp(s.addr())));
        servers.push(s);
    }
    // Show the operations side too: a health check, a control socket and the status page.
    l.health = Some(config::HealthCheck {
        kind: config::CheckKind::Http {
            path: "/".into(),
            expect: (200, 399),
        },
        ..config::HealthCheck::default()
    });
    let control = std::env::temp_dir().join(format!("quill-demo-{}.sock", std::process::id()));
    // An admin port free now (the demo is for trying things, a tiny race is acceptable).
    let admin = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .ok();
    let mut global = Global {
        control: Some(addr::ListenAddr::Unix(control.clone())),
        admin,
        ..Global::default()
    };
    global.debug = debug;
    let mut listeners = vec![l];
    let mut pools = Vec::new();
    let mut http_lines = String::new();
    if let addr::ListenAddr::Tcp(a) = listen_addr_for_http(listen) {
        let http = match DemoHttp::start(a, &listeners[0], backlog) {
            Ok(http) => http,
            Err(code) => return code,
        };
        pools.push(http.pool);
        listeners.push(http.listener);
        servers.push(http.api);
        http_lines = http_lines_to_try(a, admin);
    }
    let config = Config {
        global,
        listeners,
        pools,
    };
    print_what_to_try(listen, backends, &servers, &control, admin, &http_lines);
    run(config, Start::default())
}

/// Starts a demo HTTP backend that names itself `name`; when it cannot, says so (exit 1).
fn start_backend(name: String, backlog: u32) -> Result<DemoServer, ExitCode> {
    DemoServer::start_with_backlog("127.0.0.1:0", Behaviour::Http { name }, backlog).map_err(|e| {
        fail(
            ErrorKind::Runtime,
            &format!("cannot start demo backend: {e}"),
        )
    })
}

/// The demo's HTTP listener: `/api/` to its own pool, everything else to the demo backends,
/// each request balanced on its own over kept-alive server connections.
struct DemoHttp {
    /// The TCP listener's settings in HTTP mode, on the next port, with the route.
    listener: ListenerConfig,
    /// Pool `api`, over its one backend.
    pool: ListenerConfig,
    /// That backend (`api-1`).
    api: DemoServer,
}

impl DemoHttp {
    /// The HTTP listener on `a`, made from the TCP listener `tcp`, and its `api` pool's backend
    /// started.
    fn start(
        a: std::net::SocketAddr,
        tcp: &ListenerConfig,
        backlog: u32,
    ) -> Result<DemoHttp, ExitCode> {
        let api = start_backend("api-1".into(), backlog)?;
        let mut pool = ListenerConfig::new("api", config::model::pool_addr());
        pool.mode.set(ModeWord::RoundRobin, true);
        pool.servers
            .push(addr::ServerSpec::new(addr::BackendAddr::Tcp(api.addr())));
        let mut h = tcp.clone();
        h.name = "demo-http".into();
        h.listen = addr::ListenAddr::Tcp(a);
        h.kind = ListenerKind::http(config::HttpSettings::default());
        h.routes = vec![api_route()];
        // A small site too: `/site/` from a directory written now (static files, listing on).
        if let Some(site) = demo_site() {
            h.routes.push(site);
        }
        Ok(DemoHttp {
            listener: h,
            pool,
            api,
        })
    }
}

/// The demo's one route: a path under `/api/` goes to pool `api`.
fn api_route() -> config::RouteConfig {
    config::RouteConfig {
        path: Some(config::PathMatch::Prefix("/api/".into())),
        ..config::RouteConfig::new("api", config::RouteAction::Pool("api".into()))
    }
}

/// The demo site's files: an index page, a stylesheet, a text file and a folder to list.
const SITE_FILES: &[(&str, &str)] = &[
    (
        "site/index.html",
        "<!doctype html>\n<html><head><title>Quill demo site</title>\n<link rel=\"stylesheet\" href=\"style.css\"></head>\n<body><h1>Served by Quill from a directory</h1>\n<p>Try <a href=\"files/\">a directory listing</a> and <a href=\"hello.txt\">a text file</a>.</p></body></html>\n",
    ),
    ("site/style.css", "body { font-family: sans-serif; margin: 2em; }\n"),
    ("site/hello.txt", "Hello from Quill's static files.\n"),
    ("site/files/one.txt", "one\n"),
    ("site/files/two.txt", "two\n"),
];

/// The route serving the demo site: `/site/` from a directory written under the temporary
/// folder (None when it cannot be written: the demo runs without it).
fn demo_site() -> Option<config::RouteConfig> {
    let root = std::env::temp_dir().join(format!("quill-demo-site-{}", std::process::id()));
    for (name, text) in SITE_FILES {
        let path = root.join(name);
        std::fs::create_dir_all(path.parent()?).ok()?;
        std::fs::write(&path, text).ok()?;
    }
    let mut action = config::StaticAction::new(root);
    action.listing = true;
    Some(config::RouteConfig {
        path: Some(config::PathMatch::Prefix("/site/".into())),
        ..config::RouteConfig::new("site", config::RouteAction::Static(Box::new(action)))
    })
}

/// What to try on the HTTP listener on `a` (and the server connection metrics on `admin`).
fn http_lines_to_try(a: std::net::SocketAddr, admin: Option<std::net::SocketAddr>) -> String {
    let metrics = admin.map_or(String::new(), |m| {
        format!(
            "\x20 curl -s http://{m}/metrics | grep server_connections    # opened vs reused server connections\n"
        )
    });
    format!(
        "And HTTP mode (a reverse proxy with routes) on http://{a}/:\n\
         \x20 curl http://{a}/api/users       # route /api/ -> pool api (api-1)\n\
         \x20 curl http://{a}/                # no route matches -> the demo backends, round robin\n\
         \x20 curl http://{a}/headers         # what the backend received: X-Forwarded-For, X-Request-ID, ...\n\
         \x20 curl -sv http://{a}/ http://{a}/ 2>&1 | grep -i 're-using'   # two requests, one kept-alive connection\n\
         \x20 curl http://{a}/site/            # a small site served from a directory (static files)\n\
         \x20 curl -si http://{a}/site/hello.txt -H 'Range: bytes=0-4'   # 206, ETag, Last-Modified\n\
         \x20 curl http://{a}/site/files/      # a directory listing\n\
         {metrics}"
    )
}

/// Prints what the demo runs and what to try: the first `backends` of `servers` are the demo
/// backends; `http_lines` is what to try on the HTTP listener (empty without one).
fn print_what_to_try(
    listen: &str,
    backends: u16,
    servers: &[DemoServer],
    control: &std::path::Path,
    admin: Option<std::net::SocketAddr>,
    http_lines: &str,
) {
    let backends_list: Vec<String> = servers
        .iter()
        .take(usize::from(backends))
        .map(|s| s.addr().to_string())
        .collect();
    let ctl = format!("quill ctl --socket {}", control.display());
    let page = admin.map_or(String::new(), |a| {
        format!(
            "\x20 xdg-open http://{a}/              # live status page, in a browser (metrics: http://{a}/metrics)\n"
        )
    });
    println!(
        "Quill demo: balancing http://{listen}/ round robin over {} demo backends ({}), with HTTP health checks.\n\
         Try:\n\
         \x20 curl http://{listen}/            # run it a few times: demo-1, demo-2, demo-3, ...\n\
         \x20 curl -s http://{listen}/bytes/1000000 | wc -c    # a 1 MB response through the proxy\n\
         \x20 quill bench --idle 1000 --active 50 --duration 5s http://{listen}/    # load, 1,000 idle held\n\
         {page}\
         \x20 {ctl} listener demo servers          # the pool in Pen's format, with state and health\n\
         \x20 {ctl} listener demo server 1 drain   # take demo-2 out gently; 'server 1 enable' brings it back\n\
         {http_lines}\
         Stop with Ctrl-C (a second Ctrl-C stops at once).",
        backends,
        backends_list.join(", ")
    );
}
