//! Unit tests of `[[listener.route]]`: every error `RawRoute::build` can give, word for word with
//! its line, and a route of every kind read back whole.

use std::time::Duration;

use crate::config::{
    from_toml, HostMatch, PathMatch, RateLimit, RouteAction, RouteConfig, TuningPatch, ValueMatch,
};

/// Lines 1 to 8; a route's `[[listener.route]]` header is line 9, its first key line 10.
const FILE: &str = "[[pool]]\nname = \"api\"\nservers = [\"127.0.0.1:30001\"]\n\
                    [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:30080\"\nprotocol = \"http\"\n\
                    servers = [\"127.0.0.1:30002\"]\n";

/// The error for a listener with `routes` after it, without the file's name.
fn refused(routes: &str) -> String {
    let text = format!("{FILE}{routes}");
    match from_toml("q.toml", &text, &TuningPatch::default()) {
        Ok(_) => panic!("should be refused:\n{routes}"),
        Err(e) => e
            .message
            .strip_prefix("q.toml:")
            .unwrap_or(&e.message)
            .to_string(),
    }
}

/// `[[listener.route]]` with `body` (one key a line) and `pool = "api"` after it.
fn to_pool(body: &str) -> String {
    refused(&format!("[[listener.route]]\n{body}\npool = \"api\"\n"))
}

#[test]
fn name_and_matchers_are_refused_with_their_line_and_reason() {
    let cases: &[(&str, &str)] = &[
        (
            "name = \"a b\"",
            "10: route name 'a b': 1 to 64 visible characters, no spaces",
        ),
        ("host = []", "10: route 'route-1': host: 1 to 256 hosts"),
        (
            "host = 7",
            "10: route 'route-1': host: 7 is not a host name",
        ),
        (
            "host = \"a.example:80\"",
            "10: route 'route-1': host: 'a.example:80' is not a host name or *.suffix (no port, scheme or path)",
        ),
        (
            "path = \"/a\"\npath_regex = \"^/b\"",
            "11: route 'route-1': path and path_regex: give one or the other",
        ),
        (
            "path = \"a\"",
            "10: route 'route-1': path: 'a' is not a path prefix (starts with /, no space or ?)",
        ),
        ("path = \"\"", "10: route 'route-1': path: must not be empty"),
        (
            "path_regex = \"(\"",
            "10: route 'route-1': path_regex: ",
        ),
        ("methods = []", "10: route 'route-1': methods: 1 to 256 methods"),
        (
            "methods = [\"GE T\"]",
            "10: route 'route-1': methods: 'GE T' is not a method",
        ),
        (
            "methods = [\"get\"]",
            "10: route 'route-1': methods: 'get' (methods are case-sensitive: write GET)",
        ),
        (
            "headers = {}",
            "10: route 'route-1': headers: 1 to 256 header matchers",
        ),
        (
            "headers = { \"a b\" = \"x\" }",
            "10: route 'route-1': headers: 'a b' is not a header name",
        ),
        (
            "headers = { X = { regex = 1 } }",
            "10: route 'route-1': headers: X: regex must be a string",
        ),
        (
            "headers = { X = { regex = \"\" } }",
            "10: route 'route-1': headers: X: X: must not be empty",
        ),
        (
            "headers = { X = 1 }",
            "10: route 'route-1': headers: X = 1 (expected a value or { regex = \"...\" })",
        ),
        (
            "client_acl = 10",
            "10: route 'route-1': client_acl: '10' is not an ACL number (0-9)",
        ),
        (
            "name = \"r\"\nrewrite_path = { prefix = \"a\", replace = \"/\" }",
            "11: route 'r': rewrite_path: prefix and replace must be paths (start with /, no space or ?)",
        ),
        (
            "rewrite_path = { prefix = \"/a//\", replace = \"/\" }",
            "10: route 'route-1': rewrite_path: prefix: '/a//' never matches: request paths are matched in normal form (write '/a/')",
        ),
        ("burst = 3", "10: route 'route-1': burst needs a rate"),
        ("rate = \"x\"", "10: route 'route-1': "),
        (
            "rate = \"10/s\"\nburst = 0",
            "11: route 'route-1': burst: 0 is out of range (1 to ",
        ),
        ("sni = []", "10: route 'route-1': sni: 1 to 256 names"),
    ];
    let wrong: Vec<String> = cases
        .iter()
        .map(|(body, want)| (body, want, to_pool(body)))
        .filter(|(_, want, got)| !got.starts_with(*want) || got.contains('\n'))
        .map(|(body, want, got)| format!("{body}: {got:?} should start with {want:?}"))
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn actions_are_refused_with_their_line_and_reason() {
    let cases: &[(&str, &str)] = &[
        (
            "path = \"/\"",
            "9: route 'route-1': no action (give one of pool, redirect, respond, deny, static, fastcgi, cgi)",
        ),
        (
            "deny = true\nrespond = {}",
            "10: route 'route-1': respond and deny: a route has exactly one action",
        ),
        ("pool = \" \"", "10: route 'route-1': pool: no name given"),
        (
            "redirect = { to = \"\" }",
            "10: route 'route-1': redirect: to: must not be empty",
        ),
        (
            "redirect = { to = \"/a b\" }",
            "10: route 'route-1': redirect: to '/a b' holds a space or control character",
        ),
        (
            "redirect = { to = \"/\", status = 200 }",
            "10: route 'route-1': redirect: status 200 is not a redirect (expected 301, 302, 303, 307 or 308)",
        ),
        (
            "respond = { status = 100 }",
            "10: route 'route-1': respond: status 100 is out of range (200 to 599)",
        ),
        (
            "respond = { status = 204, body = \"x\" }",
            "10: route 'route-1': respond: status 204 has no body",
        ),
        (
            "respond = { content_type = \"\" }",
            "10: route 'route-1': respond: content_type: must not be empty",
        ),
        (
            "respond = { content_type = \"a\\tb\" }",
            "10: route 'route-1': respond: content_type 'a\\tb' holds a control character",
        ),
        (
            "deny = false",
            "10: route 'route-1': deny = false is not an action (leave it out, or give another)",
        ),
        (
            "redirect = { to = \"/\" }\nrewrite_path = { prefix = \"/a\", replace = \"/\" }",
            "11: route 'route-1': rewrite_path: only a route to a pool sends a path on",
        ),
    ];
    let wrong: Vec<String> = cases
        .iter()
        .map(|(body, want)| {
            (
                body,
                want,
                refused(&format!("[[listener.route]]\n{body}\n")),
            )
        })
        .filter(|(_, want, got)| !got.starts_with(*want) || got.contains('\n'))
        .map(|(body, want, got)| format!("{body}: {got:?} should start with {want:?}"))
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_first_fault_in_key_order_is_the_one_reported() {
    // A bad host and a bad method: host is checked first, whatever the order in the file.
    let got = to_pool("methods = [\"get\"]\nhost = \"a b\"");
    assert!(got.starts_with("11: route 'route-1': host: "), "{got:?}");
    // A bad rate and no action: the action is checked before the rate.
    let got = refused("[[listener.route]]\nrate = \"x\"\n");
    assert!(got.starts_with("9: route 'route-1': no action"), "{got:?}");
}

/// The routes of a listener with `routes` after it.
fn routes(routes: &str) -> Vec<RouteConfig> {
    let text = format!("{FILE}{routes}");
    match from_toml("q.toml", &text, &TuningPatch::default()) {
        Ok(c) => c.listeners[0].routes.clone(),
        Err(e) => panic!("{routes}: {}", e.message),
    }
}

#[test]
fn a_route_of_every_kind_is_read_back_whole() {
    let r = routes(
        "[[listener.route]]\nname = \" api \"\nhost = [\"API.example.com\", \"*.example.org\"]\n\
         path = \"/api/\"\nmethods = [\"GET\", \"POST\"]\nheaders = { \"X-Env\" = \"prod\", \
         \"X-Id\" = { regex = \"^[0-9]+$\" } }\nclient_acl = 1\npool = \" api \"\n\
         rewrite_path = { prefix = \"/api/\", replace = \"/\" }\nrate = \"100/s\"\n\
         [[listener.route]]\npath_regex = \"^/old/\"\nredirect = { to = \"https://example.com/\" }\n\
         rate = \"5/m\"\nburst = 2\n\
         [[listener.route]]\nmethods = [\"DELETE\"]\ndeny = true\n\
         [[listener.route]]\nhost = \"[::1]\"\nrespond = { status = 503, body = \"down\" }\n",
    );
    assert_eq!(r.len(), 4);
    assert_eq!(r[0].name, "api");
    assert_eq!(
        r[0].hosts,
        [
            HostMatch::Exact("api.example.com".into()),
            HostMatch::Suffix(".example.org".into())
        ]
    );
    assert_eq!(r[0].path, Some(PathMatch::Prefix("/api/".into())));
    assert_eq!(r[0].methods, ["GET", "POST"]);
    assert_eq!(
        r[0].headers,
        [
            ("x-env".to_string(), ValueMatch::Exact("prod".into())),
            ("x-id".to_string(), ValueMatch::Regex("^[0-9]+$".into()))
        ]
    );
    assert!(r[0].client_acl.is_some());
    assert_eq!(r[0].action, RouteAction::Pool("api".into()));
    assert_eq!(r[0].rewrite_path, Some(("/api/".into(), "/".into())));
    let per_second = RateLimit {
        count: 100,
        period: Duration::from_secs(1),
        burst: 100,
    };
    assert_eq!(r[0].rate, Some(per_second));
    assert!(r[0].sni.is_empty());
    assert_eq!(r[1].name, "route-2");
    assert_eq!(r[1].path, Some(PathMatch::Regex("^/old/".into())));
    assert_eq!(
        r[1].action,
        RouteAction::Redirect {
            to: "https://example.com/".into(),
            status: 302,
            exact: false
        }
    );
    let per_minute = RateLimit {
        count: 5,
        period: Duration::from_secs(60),
        burst: 2,
    };
    assert_eq!(r[1].rate, Some(per_minute));
    assert_eq!(r[2].action, RouteAction::Deny);
    assert_eq!(r[2].methods, ["DELETE"]);
    assert_eq!(r[3].hosts, [HostMatch::Exact("[::1]".into())]);
    assert_eq!(
        r[3].action,
        RouteAction::Respond {
            status: 503,
            body: "down".into(),
            content_type: "text/plain; charset=utf-8".into()
        }
    );
}

#[test]
fn path_case_and_invalid_referer_are_refused_with_their_line_and_reason() {
    let cases: &[(&str, &str)] = &[
        (
            "path = \"/a\"\npath_case = \"nocase\"",
            "11: route 'route-1': path_case: 'nocase' (expected \"sensitive\" or \"insensitive\")",
        ),
        (
            "path_case = \"insensitive\"",
            "10: route 'route-1': path_case: no path or path_regex to apply to",
        ),
        (
            "invalid_referer = { valid = [\"example.com:80\"] }",
            "10: route 'route-1': invalid_referer: valid: 'example.com:80' is not a host name or \
             *.suffix (no port, scheme or path)",
        ),
        (
            "invalid_referer = { valid = [\"https://example.com/\"], none = true }",
            "10: route 'route-1': invalid_referer: valid: 'https://example.com/' is not a host \
             name or *.suffix (no port, scheme or path)",
        ),
        (
            "invalid_referer = { none = false }",
            "10: route 'route-1': invalid_referer: nothing is valid, so every request would match \
             (give valid hosts, or none, blocked or server_names = true)",
        ),
    ];
    for (body, want) in cases {
        assert_eq!(to_pool(body), *want, "{body}");
    }
    // An unknown key of the table is named by serde with the line.
    let e = to_pool("invalid_referer = { valid = [], hosts = [] }");
    assert!(e.starts_with("10:") && e.contains("hosts"), "{e}");
}

#[test]
fn path_case_and_invalid_referer_are_read_back_whole() {
    use crate::config::{PathCase, RefererRule};
    let r = routes(
        "[[listener.route]]\npath_regex = '\\.php$'\npath_case = \"insensitive\"\ndeny = true\n\
         [[listener.route]]\npath = \"/img/\"\n\
         invalid_referer = { valid = [\"Example.com\", \"*.example.com\"], none = true, \
         blocked = true, server_names = true }\ndeny = true\n\
         [[listener.route]]\npath = \"/x\"\npath_case = \"sensitive\"\ndeny = true\n",
    );
    assert_eq!(r[0].path_case, PathCase::Insensitive);
    assert_eq!(r[0].invalid_referer, None);
    assert_eq!(r[1].path_case, PathCase::Sensitive);
    let rule = RefererRule {
        valid: vec![
            HostMatch::Exact("example.com".into()),
            HostMatch::Suffix(".example.com".into()),
        ],
        none: true,
        blocked: true,
        server_names: true,
    };
    assert_eq!(r[1].invalid_referer, Some(rule));
    assert_eq!(
        r[1].invalid_referer
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some("Referer not one of [none, blocked, server_names, example.com, *.example.com]")
    );
    assert_eq!(r[2].path_case, PathCase::Sensitive);
}
