//! A property test (D3 and D16, docs/design.md#bounded-input): arbitrary control lines (the real
//! command words mixed with hostile numbers, addresses and random text) applied to a configuration,
//! and arbitrary TOML files, never panic; every configuration accepted is within every bound and
//! builds its pools with a tracking table no larger than `MAX_CLIENTS`. Runs in a few seconds; more
//! cases with
//! `PROPTEST_CASES=N`.

use super::*;
use crate::backend::Pool;
use crate::command::{parse_request, Action};
use proptest::prelude::*;
use std::sync::Arc;

const WORDS: &[&str] = &[
    "server",
    "servers",
    "no",
    "add",
    "remove",
    "address",
    "port",
    "max",
    "hard",
    "weight",
    "prio",
    "acl",
    "blacklist",
    "timeout",
    "tracking",
    "clients_max",
    "conn_max",
    "max_per_source",
    "idle_timeout",
    "tcp_fastclose",
    "proxy_protocol",
    "v1",
    "v2",
    "up",
    "down",
    "both",
    "off",
    "tcp_nodelay",
    "keepalive",
    "transparent",
    "dsr_if",
    "dsr_ip",
    "dsr_wait",
    "tarpit_acl",
    "source",
    "hash",
    "roundrobin",
    "stubborn",
    "leastconn",
    "p2c",
    "maglev",
    "client_acl",
    "control_acl",
    "permit",
    "deny",
    "debug",
    "listen",
    "listener",
    "json",
    "drain",
    "enable",
    "disable",
    "none",
    "recent",
    "log",
    "web_stats",
    "a",
    "b",
    "mode",
];

const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "5",
    "65535",
    "65536",
    "1000000",
    "1000001",
    "2592000",
    "2592001",
    "4294967295",
    "4294967296",
    "18446744073709551",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999",
    "500ms",
    "720h",
    "721h",
    "30d",
    "1e9",
];

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(NUMBERS).prop_map(String::from),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<u32>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
    ]
}

fn address() -> impl Strategy<Value = String> {
    let v4 = any::<[u8; 4]>().prop_map(|b| format!("{}.{}.{}.{}", b[0], b[1], b[2], b[3]));
    prop_oneof![
        v4.clone(),
        (v4.clone(), any::<u16>()).prop_map(|(a, p)| format!("{a}:{p}")),
        (v4, any::<u16>(), any::<u32>()).prop_map(|(a, p, m)| format!("{a}:{p}:{m}:1:2")),
        any::<u128>().prop_map(|a| format!("[{}]:80", std::net::Ipv6Addr::from(a))),
        any::<u128>().prop_map(|a| std::net::Ipv6Addr::from(a).to_string()),
        prop::sample::select(
            &[
                "0.0.0.0",
                "255.255.255.255",
                "::",
                "::ffff:127.0.0.1",
                "::ffff:0:0/96",
                "127.0.0.1:1:2:3",
                "127.0.0.1:7000",
                "127.0.0.1",
                "/tmp/q.sock",
                "@abs",
                "[::1",
                "1.2.3.4/33",
                "10.0.0.0/8",
                "255.255.0.0",
                "[::]:7000",
            ][..]
        )
        .prop_map(String::from),
    ]
}

fn random_text() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..8).prop_map(String::from_iter)
}

fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(WORDS).prop_map(String::from),
        3 => number(),
        2 => address(),
        1 => random_text(),
    ]
}

/// Mostly a command word and a few arguments (so `clients_max 4294967295` comes up often),
/// sometimes any sequence of tokens.
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (prop::sample::select(WORDS), prop::collection::vec(token(), 0..4))
            .prop_map(|(w, args)| format!("{w} {}", args.join(" "))),
        1 => prop::collection::vec(token(), 0..8).prop_map(|w| w.join(" ")),
    ]
}

fn base() -> Config {
    from_toml(
        "base.toml",
        "[acl]\n1 = [\"deny 127.0.0.2\"]\n\
         [[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:7000\"\n\
         servers = [\"127.0.0.1:7001\", \"127.0.0.1:7002:5:10:2:1\"]\n\
         [[listener]]\nname = \"b\"\nlisten = \"7100\"\nservers = [\"[::1]:7101\"]\n",
        &TuningPatch::default(),
    )
    .expect("base config")
}

/// What every accepted configuration must satisfy, and its pools built (carrying over from
/// `old` as a reload does).
fn accepted(c: &Config, old: &[Pool]) -> Vec<Pool> {
    c.validate().expect("an accepted configuration validates");
    let acls = Arc::new(c.global.acls.clone());
    c.listeners
        .iter()
        .enumerate()
        .map(|(i, l)| {
            l.tuning.check().expect("tuning within bounds");
            assert!(l.tuning.tracking_time <= MAX_DURATION);
            let pool = Pool::build(l, acls.clone(), old.get(i), 0);
            assert!(pool.clients.capacity() <= MAX_CLIENTS as usize + 4);
            pool
        })
        .collect()
}

fn cases() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(2500),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

const TOML_KEYS: &[&str] = &[
    "workers",
    "max_connections",
    "backlog",
    "accept_batch",
    "drain_timeout",
    "drain_grace",
    "connect_timeout",
    "blacklist",
    "tracking_time",
    "clients_max",
    "idle_timeout",
    "fin_timeout",
    "max_per_source",
    "control_acl",
    "slow_start",
    "control",
    "admin",
    "control_level",
];

fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        number().prop_map(|n| if n.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
            n
        } else {
            format!("\"{n}\"")
        }),
        number().prop_map(|n| format!("\"{n}\"")),
        address().prop_map(|a| format!("\"{a}\"")),
        random_text().prop_map(|t| format!("{t:?}")),
    ]
}

fn toml_file() -> impl Strategy<Value = String> {
    let setting = || {
        (prop::sample::select(TOML_KEYS), toml_value()).prop_map(|(k, v)| format!("{k} = {v}\n"))
    };
    let server = prop_oneof![
        address().prop_map(|a| format!("{a:?}")),
        (
            address(),
            prop::sample::select(&["max", "hard", "weight", "prio", "acl"][..]),
            number()
        )
            .prop_map(|(a, k, n)| format!("{{ address = {a:?}, {k} = {n} }}")),
    ];
    (
        prop::collection::vec(setting(), 0..4),
        prop::collection::vec(setting(), 0..3),
        prop::collection::vec(server, 1..4),
        prop::collection::vec(address(), 0..2),
    )
        .prop_map(|(top, inner, servers, acl)| {
            let acl: Vec<String> = acl.iter().map(|a| format!("\"deny {a}\"")).collect();
            format!(
                "{}[acl]\n5 = [{}]\n[[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:7000\"\n{}servers = [{}]\n",
                top.concat(),
                acl.join(", "),
                inner.concat(),
                servers.join(", ")
            )
        })
}

const HTTP_KEYS: &[&str] = &[
    "header_timeout",
    "keepalive_timeout",
    "body_timeout",
    "response_timeout",
    "tunnel_timeout",
    "server_keepalive",
    "server_idle_timeout",
    "max_body",
    "max_request_line",
    "max_header_bytes",
    "max_headers",
    "forwarded_for",
    "trusted_proxies",
    "x_forwarded_proto",
    "x_forwarded_host",
    "forwarded",
    "via",
    "request_id",
    "normalize_path",
    "underscores_in_headers",
    "request_headers",
    "response_headers",
];

/// A value for an HTTP key: the generic ones, sizes, lists and header edits with hostile text.
fn http_value() -> impl Strategy<Value = String> {
    let unit = prop::sample::select(&["", "k", "m", "g", "K", "x", "kb"][..]);
    prop_oneof![
        2 => toml_value(),
        2 => (number(), unit).prop_map(|(n, u)| format!("\"{n}{u}\"")),
        1 => prop::sample::select(&["true", "false", "\"append\"", "\"off\"", "\"quill\""][..])
            .prop_map(String::from),
        1 => prop::collection::vec(address(), 0..3).prop_map(|a| format!("{a:?}")),
        2 => (
            prop::sample::select(&["remove", "set", "add", "put"][..]),
            random_text(),
            random_text(),
        )
            .prop_map(|(op, name, value)| if op == "remove" {
                format!("{{ remove = [{name:?}] }}")
            } else {
                format!("{{ {op} = {{ {name:?} = {value:?} }} }}")
            }),
    ]
}

fn http_file() -> impl Strategy<Value = String> {
    let setting = || {
        (prop::sample::select(HTTP_KEYS), http_value()).prop_map(|(k, v)| format!("{k} = {v}\n"))
    };
    (
        prop::collection::vec(setting(), 0..4),
        prop::sample::select(&["\"http\"", "\"tcp\"", "\"udp\""][..]),
        prop::collection::vec(setting(), 0..4),
    )
        .prop_map(|(top, protocol, inner)| {
            format!(
                "[http]\n{}[[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:7000\"\n\
                 protocol = {protocol}\nservers = [\"127.0.0.1:7001\"]\n[listener.http]\n{}",
                top.concat(),
                inner.concat()
            )
        })
}

proptest! {
    #![proptest_config(cases())]

    /// Arbitrary `[http]` and `[listener.http]` tables: a one-line `FILE:LINE:` error or
    /// settings within every bound, never a panic.
    #[test]
    fn http_settings_never_panic_and_stay_in_bounds(file in http_file()) {
        match from_toml("p.toml", &file, &TuningPatch::default()) {
            Ok(c) => {
                accepted(&c, &[]);
                for l in &c.listeners {
                    let h = l.http().expect("[listener.http] only on an HTTP listener");
                    prop_assert_eq!(h.check(), Ok(()));
                }
            }
            Err(e) => {
                prop_assert!(e.message.starts_with("p.toml:"), "{}", e.message);
                prop_assert!(!e.message.contains('\n'), "one line: {:?}", e.message);
            }
        }
    }

    #[test]
    fn control_language_and_config_loader_never_panic(
        lines in prop::collection::vec(line(), 1..10),
        file in toml_file(),
    ) {
        let mut c = base();
        let mut pools = accepted(&c, &[]);
        for text in &lines {
            let Ok(req) = parse_request(text) else { continue };
            let Action::Set(cmd) = &req.action else { continue };
            // As the controller does: a copy changed, validated, then kept.
            let mut next = c.clone();
            let listener = req.listener.as_deref().or(Some("a"));
            if next.apply(listener, cmd).is_ok() && next.validate().is_ok() {
                pools = accepted(&next, &pools);
                c = next;
            }
        }
        if let Ok(loaded) = from_toml("p.toml", &file, &TuningPatch::default()) {
            accepted(&loaded, &[]);
        }
    }
}
