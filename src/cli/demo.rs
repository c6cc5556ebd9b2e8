//! `quill demo`: Quill over built-in demo HTTP backends, with a health check, a control socket,
//! the status page and an HTTP listener with a route, and what to try printed.

use std::process::ExitCode;

use super::{fail, run};
use crate::addr;
use crate::command::ModeWord;
use crate::config::{self, Config, ErrorKind, Global, ListenerConfig};
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
        match DemoServer::start_with_backlog(
            "127.0.0.1:0",
            Behaviour::Http {
                name: format!("demo-{i}"),
            },
            backlog,
        ) {
            Ok(s) => {
                l.servers
                    .push(addr::ServerSpec::new(addr::BackendAddr::Tcp(s.addr())));
                servers.push(s);
            }
            Err(e) => {
                return fail(
                    ErrorKind::Runtime,
                    &format!("cannot start demo backend: {e}"),
                )
            }
        }
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
    // An HTTP listener on the next port: `/api/` to its own pool, everything else to the demo
    // backends above, each request balanced on its own over kept-alive server connections.
    let mut listeners = vec![l];
    let mut pools = Vec::new();
    let mut http_lines = String::new();
    if let addr::ListenAddr::Tcp(a) = listen_addr_for_http(listen) {
        let api = match DemoServer::start_with_backlog(
            "127.0.0.1:0",
            Behaviour::Http {
                name: "api-1".into(),
            },
            backlog,
        ) {
            Ok(s) => s,
            Err(e) => {
                return fail(
                    ErrorKind::Runtime,
                    &format!("cannot start demo backend: {e}"),
                )
            }
        };
        let mut pool = ListenerConfig::new("api", config::model::pool_addr());
        pool.mode.set(ModeWord::RoundRobin, true);
        pool.servers
            .push(addr::ServerSpec::new(addr::BackendAddr::Tcp(api.addr())));
        pools.push(pool);
        let mut h = listeners[0].clone();
        h.name = "demo-http".into();
        h.listen = addr::ListenAddr::Tcp(a);
        h.http = Some(config::HttpSettings::default());
        h.routes = vec![config::RouteConfig {
            name: "api".into(),
            hosts: Vec::new(),
            sni: Vec::new(),
            path: Some(config::PathMatch::Prefix("/api/".into())),
            methods: Vec::new(),
            headers: Vec::new(),
            client_acl: None,
            action: config::RouteAction::Pool("api".into()),
            request_headers: Vec::new(),
            response_headers: Vec::new(),
            rewrite_path: None,
            rate: None,
        }];
        listeners.push(h);
        servers.push(api);
        let metrics = admin.map_or(String::new(), |m| {
            format!(
                "\x20 curl -s http://{m}/metrics | grep server_connections    # opened vs reused server connections\n"
            )
        });
        http_lines = format!(
            "And HTTP mode (a reverse proxy with routes) on http://{a}/:\n\
             \x20 curl http://{a}/api/users       # route /api/ -> pool api (api-1)\n\
             \x20 curl http://{a}/                # no route matches -> the demo backends, round robin\n\
             \x20 curl http://{a}/headers         # what the backend received: X-Forwarded-For, X-Request-ID, ...\n\
             \x20 curl -sv http://{a}/ http://{a}/ 2>&1 | grep -i 're-using'   # two requests, one kept-alive connection\n\
             {metrics}"
        );
    }
    let config = Config {
        global,
        listeners,
        pools,
    };
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
    run(config, Start::default())
}
