//! Maglev keys from HTTP requests (docs/design.md#consistent-hashing-maglev): `hash_key = "header
//! NAME"` or `"cookie NAME"` on an HTTP listener or a named pool with `mode = ["maglev"]`, and
//! `--hash-key` on the command line. Each request's server is the one its key names in the table,
//! computed here from `quill_core::maglev` with the documented bytes (the first field or cookie of
//! that name, trimmed; seed 0), so the tests pin the key as well as the agreement: across
//! connections, across kept-alive requests, across two processes listing the servers in opposite
//! orders; without the key, the client address's bytes; errors at the key's line.

use crate::ctl;
use crate::http_support;
use crate::support;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use http_support::*;
use quill_core::maglev::{hash_bytes, Server, Table};
use support::*;

/// The backends `s0`, `s1`, ...: each answers 200 with its name as the body.
fn backends(n: usize) -> Vec<Backend> {
    (0..n)
        .map(|i| {
            Backend::start(move |_| {
                vec![Step::Send(response(
                    200,
                    "Content-Type: text/plain\r\n",
                    format!("s{i}").as_bytes(),
                ))]
            })
        })
        .collect()
}

/// The name (`sI`) of the backend at `addr`.
fn name_of(backends: &[Backend], addr: SocketAddr) -> String {
    let i = backends.iter().position(|b| b.addr() == addr).unwrap();
    format!("s{i}")
}

/// The server the Maglev table of `servers` (identities `HOST:PORT` as written, weight 1, seed
/// 0) names for the key hashed from `bytes`: what Quill must pick.
fn expected(backends: &[Backend], bytes: &[u8]) -> String {
    let ids: Vec<String> = backends.iter().map(|b| b.addr().to_string()).collect();
    let table = Table::build(&Server::equal(&ids), 0);
    let i = table.lookup(hash_bytes(bytes, 0), |_| true).unwrap();
    format!("s{i}")
}

/// Quill from a TOML file (`body(port)`, with `workers`).
fn start(workers: usize, body: impl Fn(u16) -> String) -> QuillProcess {
    let (q, probe, _) = Quill::spawn_first(|dir, port| {
        let cfg = dir.join("quill.toml");
        std::fs::write(&cfg, format!("workers = {workers}\n{}", body(port))).unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    });
    drop(probe);
    q
}

/// An HTTP listener on `port` with `mode = ["maglev"]`, `hash_key = key` and `servers` in the
/// given order.
fn keyed_listener(port: u16, servers: &[SocketAddr], key: &str) -> String {
    let list: Vec<String> = servers.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
         mode = [\"maglev\"]\nhash_key = \"{key}\"\nservers = [{}]\n",
        list.join(", ")
    )
}

/// A GET of `/` with the extra header lines `extra`; the name of the server that answered.
fn ask(c: &mut Client, extra: &str) -> String {
    let r = c.roundtrip(format!("GET / HTTP/1.1\r\nHost: t\r\n{extra}\r\n").as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    String::from_utf8_lossy(&r.body).into_owned()
}

/// Asked on a new connection.
fn ask_new(q: &QuillProcess, extra: &str) -> String {
    ask(&mut Client::connect(q.addr()), extra)
}

/// The key of a request without a header or cookie key: the client address's (127.0.0.1).
const CLIENT_BYTES: &[u8] = &[127, 0, 0, 1];

#[test]
fn http_maglev_header_key_sends_each_value_to_its_server_across_connections_and_quills() {
    const USERS: usize = 64;
    let b = backends(4);
    let forward: Vec<SocketAddr> = b.iter().map(Backend::addr).collect();
    let mut reversed = forward.clone();
    reversed.reverse();
    let q1 = start(2, |port| keyed_listener(port, &forward, "header X-User"));
    let q2 = start(1, |port| keyed_listener(port, &reversed, "header X-User"));
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..USERS {
        let user = format!("user-{i}");
        let want = expected(&b, user.as_bytes());
        // The value is hashed trimmed, whatever the name's case, from the first such field.
        let one = ask_new(&q1, &format!("X-User:   {user} \t\r\n"));
        let two = ask_new(&q2, &format!("x-user: {user}\r\nX-User: other\r\n"));
        let again = ask_new(&q1, &format!("X-USER: {user}\r\n"));
        assert_eq!(
            (&one, &two, &again),
            (&want, &want, &want),
            "{user}: the first Quill, the second (servers in the opposite order), the first again"
        );
        *tally.entry(one).or_default() += 1;
    }
    // Different values spread over the servers (all from one client address, whose key alone
    // would send every request to one server). The servers' ports differ from run to run, so the
    // split does too: fewer than 2 of 64 on a server happens about once in a million runs.
    assert_eq!(tally.len(), 4, "64 users over 4 servers: {tally:?}");
    for (name, n) in &tally {
        assert!(*n >= USERS / 32, "{name} got {n} of {USERS}: {tally:?}");
    }
}

#[test]
fn http_maglev_header_key_is_read_per_request_on_a_kept_alive_connection() {
    let b = backends(4);
    let servers: Vec<SocketAddr> = b.iter().map(Backend::addr).collect();
    let q = start(1, |port| keyed_listener(port, &servers, "header X-User"));
    // Users whose servers differ, asked in turn on one client connection: each request goes to
    // its own user's server, over the server connections Quill keeps between requests.
    let users: Vec<String> = (0..40).map(|i| format!("u{i}")).collect();
    let mut picked: Vec<(&String, String)> = Vec::new();
    for u in &users {
        let want = expected(&b, u.as_bytes());
        if picked.iter().all(|(_, s)| *s != want) {
            picked.push((u, want));
        }
    }
    assert!(picked.len() >= 3, "users on at least 3 servers: {picked:?}");
    let mut c = Client::connect(q.addr());
    for round in 0..4 {
        for (user, want) in &picked {
            let got = ask(&mut c, &format!("X-User: {user}\r\n"));
            assert_eq!(&got, want, "round {round}, {user}");
        }
    }
    // Requests without the key on that connection fall back to the client address.
    let fallback = expected(&b, CLIENT_BYTES);
    assert_eq!(ask(&mut c, ""), fallback);
    // The server connections were reused (not one per request), and each server saw only its
    // own users' requests.
    let requests: usize = b.iter().map(|s| s.requests().len()).sum();
    let accepted: usize = b.iter().map(Backend::accepted).sum();
    assert_eq!(requests, picked.len() * 4 + 1);
    assert!(
        accepted < requests,
        "{accepted} server connections for {requests} requests"
    );
    for s in &b {
        let me = name_of(&b, s.addr());
        for r in s.requests() {
            let user = r
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("x-user"))
                .map(|(_, v)| v.trim().to_string());
            let want = match &user {
                Some(u) => expected(&b, u.as_bytes()),
                None => fallback.clone(),
            };
            assert_eq!(me, want, "{user:?} reached {me}");
        }
    }
}

#[test]
fn http_maglev_cookie_key_on_a_named_pool_and_its_fallback_to_the_client_address() {
    let b = backends(4);
    let list: Vec<String> = b.iter().map(|s| format!("\"{}\"", s.addr())).collect();
    let q = start(2, |port| {
        format!(
            "[[pool]]\nname = \"app\"\nmode = [\"maglev\"]\nhash_key = \"cookie session\"\n\
             servers = [{}]\n\
             [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
             [[listener.route]]\npath = \"/\"\npool = \"app\"\n",
            list.join(", ")
        )
    });
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..32 {
        let id = format!("sess{i}");
        let want = expected(&b, id.as_bytes());
        // The first cookie of that name, in whichever Cookie field, its value trimmed.
        let got = ask_new(
            &q,
            &format!(
                "Cookie: theme=dark; Session=no\r\nCookie: x=1;  session= {id} ; session=late\r\n"
            ),
        );
        assert_eq!(got, want, "{id}");
        seen.insert(got);
    }
    assert!(seen.len() >= 3, "32 sessions over 4 servers: {seen:?}");
    // No such cookie (names are exact: `Session` is another), or an empty one: the client
    // address's key.
    let fallback = expected(&b, CLIENT_BYTES);
    for extra in ["", "Cookie: Session=abc\r\n", "Cookie: session=\r\n"] {
        assert_eq!(ask_new(&q, extra), fallback, "{extra:?}");
    }
}

#[test]
fn http_maglev_hash_key_on_the_command_line() {
    let b = backends(3);
    let servers: Vec<String> = b.iter().map(|s| s.addr().to_string()).collect();
    let (q, probe, _) = Quill::spawn_first(|_, port| {
        let mut args: Vec<String> = ["-H", "--maglev", "--hash-key", "header X-Tenant"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.push(port.to_string());
        args.extend(servers.iter().cloned());
        args
    });
    drop(probe);
    for t in ["acme", "globex", "initech", "umbrella", "hooli"] {
        assert_eq!(
            ask_new(&q, &format!("X-Tenant: {t}\r\n")),
            expected(&b, t.as_bytes()),
            "{t}"
        );
    }
    // A header or cookie key is Maglev's: without --maglev (or -H) it is refused.
    for args in [
        &["-H", "--hash-key", "header X-Tenant", "1", "127.0.0.1:2"][..],
        &["--maglev", "--hash-key", "cookie s", "1", "127.0.0.1:2"][..],
        &[
            "-H",
            "--maglev",
            "--hash-key",
            "query x",
            "1",
            "127.0.0.1:2",
        ][..],
    ] {
        let (code, _, err) = run_quill_output(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains("hash") && err.lines().count() == 1,
            "{args:?}: {err}"
        );
    }
}

#[test]
fn http_maglev_hash_key_follows_the_file_on_reload_and_a_bad_one_keeps_the_running_key() {
    let b = backends(4);
    let servers: Vec<SocketAddr> = b.iter().map(Backend::addr).collect();
    let (q, probe, _) = Quill::spawn_first(|dir, port| {
        let cfg = dir.join("quill.toml");
        let text = format!(
            "control = \"{}\"\nworkers = 1\n{}",
            dir.join("ctl.sock").display(),
            keyed_listener(port, &servers, "header X-A")
        );
        std::fs::write(&cfg, text).unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    });
    drop(probe);
    let (cfg, sock) = (q.path("quill.toml"), q.path("ctl.sock"));
    ctl::wait_ctl(&q, &sock);
    // Values whose servers differ from the client address's, so that each pick shows which key
    // was read.
    let fallback = expected(&b, CLIENT_BYTES);
    let values: Vec<String> = (0..200)
        .map(|i| format!("v{i}"))
        .filter(|v| expected(&b, v.as_bytes()) != fallback)
        .take(8)
        .collect();
    assert_eq!(values.len(), 8);
    let both = |v: &str| format!("X-A: {v}\r\nCookie: c={v}\r\n");
    for v in &values {
        assert_eq!(ask_new(&q, &both(v)), expected(&b, v.as_bytes()), "X-A {v}");
        assert_eq!(
            ask_new(&q, &format!("Cookie: c={v}\r\n")),
            fallback,
            "no X-A"
        );
    }
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("header X-A", "cookie c")).unwrap();
    let reply = ctl::ctl(&sock, "reload");
    assert!(reply.contains("reloaded"), "{reply}");
    for v in &values {
        assert_eq!(
            ask_new(&q, &format!("Cookie: c={v}\r\n")),
            expected(&b, v.as_bytes()),
            "c {v}"
        );
        assert_eq!(ask_new(&q, &format!("X-A: {v}\r\n")), fallback, "no cookie");
    }
    // A bad key is refused with its line; the running key stays.
    std::fs::write(&cfg, text.replace("header X-A", "header")).unwrap();
    let reply = ctl::ctl(&sock, "reload");
    assert!(
        reply.starts_with("error:") && reply.contains("quill.toml:") && reply.contains("hash_key"),
        "{reply}"
    );
    let v = &values[0];
    assert_eq!(
        ask_new(&q, &format!("Cookie: c={v}\r\n")),
        expected(&b, v.as_bytes())
    );
}

/// `quill check` of `text` (in q.toml): its exit code, stdout and stderr.
fn check(text: &str) -> (i32, String, String) {
    let dir = scratch_dir();
    let path = dir.path().join("q.toml");
    std::fs::write(&path, text).unwrap();
    run_quill_output(&["check", "--config", path.to_str().unwrap()])
}

#[test]
fn hash_key_errors_name_the_line_and_quill_check_explains_the_key() {
    let head =
        "[[listener]]\nname = \"w\"\nlisten = \"127.0.0.1:1\"\nservers = [\"127.0.0.1:2\"]\n";
    for (extra, needle) in [
        (
            "protocol = \"http\"\nmode = [\"maglev\"]\nhash_key = \"query user\"\n",
            "expected client, header NAME or cookie NAME",
        ),
        (
            "protocol = \"http\"\nmode = [\"maglev\"]\nhash_key = \"header X User\"\n",
            "expected client, header NAME or cookie NAME",
        ),
        (
            "protocol = \"http\"\nmode = [\"maglev\"]\nhash_key = \"cookie a=b\"\n",
            "not a field or cookie name",
        ),
        (
            "protocol = \"http\"\nmode = [\"roundrobin\"]\nhash_key = \"header X-User\"\n",
            "add \"maglev\" to mode",
        ),
        (
            "mode = [\"maglev\"]\nhash_key = \"header X-User\"\n",
            "needs an HTTP listener",
        ),
    ] {
        let text = format!("{head}{extra}");
        let line = text
            .lines()
            .position(|l| l.starts_with("hash_key"))
            .unwrap()
            + 1;
        let (code, out, err) = check(&text);
        assert_eq!(code, 2, "{extra}: should be refused: {out}{err}");
        let err = strip_ansi(&err);
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(
            err.contains(&format!("q.toml:{line}: hash_key")) && err.contains(needle),
            "{extra}: {err}"
        );
    }
    let (code, out, err) = check(&format!(
        "{head}protocol = \"http\"\nmode = [\"maglev\"]\nhash_key = \"cookie session\"\n"
    ));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("maglev key: each request's session cookie")
            && out.contains("else the client address"),
        "{out}"
    );
    let (code, out, err) = check(&format!(
        "{head}mode = [\"maglev\"]\nhash_key = \"client\"\n"
    ));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("maglev key: the client address"), "{out}");
}
