//! [`decide`] without sockets: pools built from TOML, request heads parsed from bytes, several
//! cases per kind of [`Decision`].

use std::net::IpAddr;
use std::sync::Arc;

use quill_core::http1::{self, FieldIndex};

use super::*;
use crate::backend::Routes;
use crate::config::{from_toml, TuningPatch};

/// Listener `h`'s pool snapshot (servers 127.0.0.1:9003, then `listener` lines) with its routes
/// to the named pools `api` (two servers, `sticky_cookie = "SRV"`) and `web`; `global` goes
/// before the tables (`[http]` settings).
fn pool(global: &str, listener: &str) -> Arc<Pool> {
    let text = format!(
        "{global}[acl]\n1 = [\"permit 10.0.0.0/8\", \"deny 0.0.0.0/0\"]\n\
         [[pool]]\nname = \"api\"\nservers = [\"127.0.0.1:9001\", \"127.0.0.1:9004\"]\n\
         sticky_cookie = \"SRV\"\n\
         [[pool]]\nname = \"web\"\nservers = [\"127.0.0.1:9002\"]\n\
         [[listener]]\nname = \"h\"\nlisten = \"127.0.0.1:8000\"\nprotocol = \"http\"\n\
         servers = [\"127.0.0.1:9003\"]\n{listener}"
    );
    let c = from_toml("d.toml", &text, &TuningPatch::default()).unwrap();
    let acls = Arc::new(c.global.acls.clone());
    let named: Vec<Arc<Pool>> = c
        .pools
        .iter()
        .map(|p| Arc::new(Pool::build(p, acls.clone(), None, 0)))
        .collect();
    let l = &c.listeners[0];
    let mut pool = Pool::build(l, acls.clone(), None, 0);
    if !l.routes.is_empty() {
        let routes = Routes::build(
            "h",
            &l.routes,
            acls,
            |n| named.iter().find(|p| p.name == n).cloned(),
            None,
            1,
        )
        .unwrap();
        pool.routes = Some(Arc::new(routes));
    }
    Arc::new(pool)
}

const ROUTES: &str = "[[listener.route]]\nname = \"inside\"\npath = \"/inside/\"\n\
     client_acl = 1\npool = \"web\"\n\
     [[listener.route]]\nname = \"slow\"\npath = \"/slow/\"\nrate = \"1/m\"\nburst = 1\n\
     pool = \"web\"\n\
     [[listener.route]]\nname = \"old\"\npath = \"/old/\"\n\
     redirect = { to = \"https://example.com/\", status = 308 }\n\
     [[listener.route]]\nname = \"bots\"\nheaders = { \"user-agent\" = \"bot\" }\ndeny = true\n\
     [[listener.route]]\nname = \"api\"\npath = \"/api/\"\npool = \"api\"\n";

fn ip(s: &str) -> Client<'static> {
    Client {
        ip: Some(s.parse::<IpAddr>().unwrap()),
        sni: None,
    }
}

/// Parses `request` and decides on it for `client` at `now`.
fn decide_at(
    pool: &Arc<Pool>,
    request: &str,
    client: Client,
    rates: &RateTable,
    now: u64,
) -> Decision {
    let buf = request.as_bytes();
    let mut fields = FieldIndex::empty();
    let head = http1::parse_request_indexed(buf, &limits(settings(pool)), &mut fields)
        .unwrap()
        .unwrap();
    let req = Request {
        head: &head,
        fields: &fields,
        buf,
    };
    decide(req, pool, client, rates, now)
}

fn decide_one(pool: &Arc<Pool>, request: &str) -> Decision {
    decide_at(pool, request, ip("10.0.0.1"), &RateTable::new(), 0)
}

fn get(target: &str, extra: &str) -> String {
    format!("GET {target} HTTP/1.1\r\nHost: a.example\r\n{extra}\r\n")
}

fn forward(d: Decision) -> Forward {
    match d {
        Decision::Forward(f) => f,
        other => panic!("not forwarded: {other:?}"),
    }
}

#[test]
fn refuses_connect_a_body_over_max_body_and_a_path_above_the_root() {
    let p = pool("[http]\nmax_body = \"1k\"\n", ROUTES);
    let refused = |request: &str| match decide_one(&p, request) {
        Decision::Refuse {
            status,
            parse_error,
        } => (status, parse_error),
        other => panic!("not refused: {other:?}"),
    };
    assert_eq!(
        refused("CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n"),
        (405, None)
    );
    assert_eq!(
        refused("POST /api/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1025\r\n\r\n"),
        (413, None)
    );
    assert_eq!(
        refused(&get("/a/../../x", "")),
        (400, Some(http1::Error::InvalidTarget))
    );
    // At the limit, and chunked (counted as it comes): forwarded.
    let at_limit = "POST /api/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1024\r\n\r\n";
    assert!(matches!(decide_one(&p, at_limit), Decision::Forward(_)));
}

#[test]
fn answers_locally_for_a_route_acl_rate_answer_and_when_nothing_serves() {
    let p = pool("", ROUTES);
    let rates = RateTable::new();
    // The route's client_acl refuses a client outside 10.0.0.0/8.
    assert!(matches!(
        decide_at(&p, &get("/inside/x", ""), ip("192.0.2.1"), &rates, 0),
        Decision::Local(Local::Status {
            status: 403,
            retry_after: None,
            route: Some(0)
        })
    ));
    // The route's rate: one request a minute, the second within it waits.
    let slow = get("/slow/x", "");
    let first = decide_at(&p, &slow, ip("10.0.0.2"), &rates, 1_000);
    assert!(matches!(
        first,
        Decision::Forward(Forward { route: Some(1), .. })
    ));
    match decide_at(&p, &slow, ip("10.0.0.2"), &rates, 2_000) {
        Decision::Local(Local::Status {
            status: 429,
            retry_after: Some(wait),
            route: Some(1),
        }) => assert!((1..=60).contains(&wait), "{wait}"),
        other => panic!("not limited: {other:?}"),
    }
    // Another client has its own bucket.
    let other = decide_at(&p, &slow, ip("10.0.0.3"), &rates, 2_000);
    assert!(matches!(other, Decision::Forward(_)));
    // A redirect and a deny are the route's own answers.
    assert!(matches!(
        decide_one(&p, &get("/old/page", "")),
        Decision::Local(Local::Route(2))
    ));
    assert!(matches!(
        decide_one(&p, &get("/x", "User-Agent: bot\r\n")),
        Decision::Local(Local::Route(3))
    ));
    assert_eq!(Local::Route(3).route(), Some(3));
    // No route matched and the listener has no server of its own: 404.
    let mut bare = Arc::try_unwrap(pool("", ROUTES)).unwrap();
    bare.servers.clear();
    let bare = Arc::new(bare);
    let d = decide_one(&bare, &get("/nothing", ""));
    assert!(matches!(
        d,
        Decision::Local(Local::Status {
            status: 404,
            retry_after: None,
            route: None
        })
    ));
    // A route still serves.
    assert!(matches!(
        decide_one(&bare, &get("/api/", "")),
        Decision::Forward(_)
    ));
}

#[test]
fn forwards_to_the_route_pool_or_the_listener_with_stickiness_and_upgrade() {
    let p = pool("", ROUTES);
    // No route matched: the listener's own snapshot.
    let f = forward(decide_one(&p, &get("/page", "")));
    assert!(Arc::ptr_eq(&f.pool, &p));
    assert_eq!((f.route, f.sticky, f.upgrade), (None, None, false));
    // A route to a named pool, whose stickiness cookie names its second server.
    let api = p.sticky.as_ref().map(|_| ()).is_none();
    assert!(api, "the listener's own pool has no stickiness");
    let f = forward(decide_one(&p, &get("/api/x", "")));
    assert_eq!(f.pool.name, "api");
    assert_eq!(f.route, Some(4));
    assert_eq!(f.sticky, None);
    let value = f.pool.sticky.as_ref().unwrap().values[1];
    let cookie = format!(
        "Cookie: a=b; SRV={}\r\n",
        std::str::from_utf8(&value).unwrap()
    );
    let f = forward(decide_one(&p, &get("/api/x", &cookie)));
    assert_eq!(f.sticky, Some(1));
    // An upgrade asked without a body; with a body it is not one.
    let ws = "Connection: upgrade\r\nUpgrade: websocket\r\n";
    assert!(forward(decide_one(&p, &get("/ws", ws))).upgrade);
    let with_body =
        format!("POST /ws HTTP/1.1\r\nHost: a.example\r\n{ws}Content-Length: 2\r\n\r\nhi");
    assert!(!forward(decide_one(&p, &with_body)).upgrade);
    assert!(!forward(decide_one(&p, &get("/ws", "Connection: upgrade\r\n"))).upgrade);
}

#[test]
fn a_listener_without_tls_never_answers_421() {
    let p = pool("", "");
    let client = Client {
        ip: None,
        sni: Some("other.example"),
    };
    let d = decide_at(&p, &get("/", ""), client, &RateTable::new(), 0);
    assert!(matches!(d, Decision::Forward(_)));
    // A client on a Unix socket passes a route's client_acl, as Pen's does.
    let p = pool("", ROUTES);
    let d = decide_at(
        &p,
        &get("/inside/", ""),
        Client::default(),
        &RateTable::new(),
        0,
    );
    assert!(matches!(
        d,
        Decision::Forward(Forward { route: Some(0), .. })
    ));
}

#[test]
fn idempotent_methods_are_the_replayable_ones() {
    use quill_core::http1::Method;
    for m in [Method::Get, Method::Head, Method::Put, Method::Delete] {
        assert!(idempotent(m), "{m:?}");
    }
    assert!(!idempotent(Method::Post));
}

#[test]
fn maglev_key_is_the_hash_of_the_first_header_or_cookie_value_trimmed() {
    let hash = |v: &[u8]| Some(quill_core::maglev::hash_bytes(v, 0));
    let header = pool("", "mode = [\"maglev\"]\nhash_key = \"header X-User\"\n");
    let key = |p: &Arc<Pool>, extra: &str| forward(decide_one(p, &get("/", extra))).key;
    assert_eq!(key(&header, "X-User: \t ann \t\r\n"), hash(b"ann"));
    assert_eq!(key(&header, "x-user: a b\r\nX-User: c\r\n"), hash(b"a b"));
    // Absent or empty: the client address's key (None here).
    assert_eq!(key(&header, ""), None);
    assert_eq!(key(&header, "X-User:  \r\n"), None);
    let cookie = pool("", "mode = [\"maglev\"]\nhash_key = \"cookie sid\"\n");
    assert_eq!(
        key(
            &cookie,
            "Cookie: SID=1; x=2\r\nCookie: a=b;  sid= s1 ; sid=s2\r\n"
        ),
        hash(b"s1")
    );
    assert_eq!(key(&cookie, "Cookie: SID=1\r\n"), None);
    assert_eq!(key(&cookie, "Cookie: sid=\r\n"), None);
    // The client address's key, or no maglev: no request key.
    let client = pool("", "mode = [\"maglev\"]\nhash_key = \"client\"\n");
    assert_eq!(key(&client, "X-User: ann\r\n"), None);
    let plain = pool("", "");
    assert_eq!(key(&plain, "X-User: ann\r\n"), None);
}
