//! The model's unit tests: durations, and every bound refused with a one-line message whether it
//! comes from TOML or the control language.

use std::fmt;
use std::time::Duration;

use super::*;
use crate::command::parse;
use crate::config::from_toml;

#[test]
fn durations() {
    let check =
        |s: &str, ms: u64| assert_eq!(parse_duration(s), Ok(Duration::from_millis(ms)), "{s}");
    check("30", 30_000);
    check("500ms", 500);
    check("2s", 2_000);
    check("5m", 300_000);
    check("1h", 3_600_000);
    for bad in ["", "s", "1.5s", "-1", "3d", "1 s", "99999999999999999999"] {
        assert!(parse_duration(bad).is_err(), "{bad}");
    }
}
fn toml(extra_top: &str, extra_listener: &str) -> Result<Config, ConfigError> {
    from_toml(
        "b.toml",
        &format!(
            "{extra_top}\n[[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:7000\"\n{extra_listener}\n\
             servers = [\"127.0.0.1:7001\"]\n"
        ),
        &TuningPatch::default(),
    )
}

fn refused<T: fmt::Debug>(r: Result<T, ConfigError>, needle: &str) {
    let e = r.expect_err("refused").message;
    assert!(e.contains(needle), "{e:?} should name {needle:?}");
    assert!(!e.contains('\n'), "one line: {e:?}");
}

fn one() -> Config {
    toml("", "").unwrap()
}

fn apply(c: &mut Config, line: &str) -> Result<(), ConfigError> {
    // As the controller does: a change that does not validate changes nothing.
    let cmd = parse(line).map_err(|e| ConfigError::usage(e.0))?;
    let mut next = c.clone();
    next.apply(None, &cmd)?;
    next.validate()?;
    *c = next;
    Ok(())
}

#[test]
fn clients_max_of_four_billion_is_refused_not_an_abort() {
    refused(
        toml("clients_max = 4294967295", ""),
        "b.toml:1: clients_max",
    );
    refused(toml("", "clients_max = 1000001"), "b.toml:5: clients_max");
    refused(apply(&mut one(), "clients_max 4294967295"), "4294967295");
    assert!(toml("clients_max = 1000000", "").is_ok());
}

#[test]
fn timeout_of_eighteen_quintillion_seconds_is_refused() {
    refused(toml("connect_timeout = 18446744073709551", ""), "30 days");
    refused(toml("", "idle_timeout = \"2592001s\""), "30 days");
    refused(apply(&mut one(), "timeout 18446744073709551"), "30 days");
    assert!(parse_duration("720h").is_ok());
    assert!(parse_duration("721h").unwrap_err().contains("30 days"));
}

#[test]
fn tracking_of_two_to_the_32_does_not_wrap() {
    refused(apply(&mut one(), "tracking 4294967296"), "4294967296");
    refused(toml("tracking_time = 4294967296", ""), "b.toml:1:");
    let mut c = one();
    apply(&mut c, "tracking 30d").unwrap_err();
    apply(&mut c, "tracking 720h").unwrap();
    assert_eq!(
        c.listeners[0].tuning.tracking_time.as_secs() as u32 as u64,
        2_592_000
    );
}

#[test]
fn accept_is_epoll_io_uring_or_auto_and_a_bad_value_is_named_by_file_and_line() {
    use crate::config::settings::AcceptMode;
    assert_eq!(one().global.accept, AcceptMode::Epoll);
    for (word, mode) in [
        ("epoll", AcceptMode::Epoll),
        ("io_uring", AcceptMode::IoUring),
        ("auto", AcceptMode::Auto),
    ] {
        let c = toml(&format!("accept = \"{word}\""), "").unwrap();
        assert_eq!(c.global.accept, mode);
    }
    refused(
        toml("accept = \"uring\"", ""),
        "b.toml:1: invalid accept 'uring' (expected epoll, io_uring or auto)",
    );
}

#[test]
fn every_other_number_has_a_bound() {
    refused(toml("workers = 1025", ""), "b.toml:1: workers");
    refused(toml("max_connections = 0", ""), "max_connections");
    refused(toml("max_connections = 1000001", ""), "max_connections");
    refused(toml("backlog = 70000", ""), "backlog");
    refused(toml("accept_batch = 0", ""), "accept_batch");
    refused(toml("max_per_source = 1000001", ""), "max_per_source");
    refused(toml("[health]\nrise = 1001", ""), "rise");
    refused(
        from_toml(
            "b.toml",
            "[[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:7000\"\n\
             servers = [{ address = \"127.0.0.1:7001\", weight = 4000000000 }]\n",
            &TuningPatch::default(),
        ),
        "b.toml:4: weight",
    );
    let mut c = one();
    refused(apply(&mut c, "conn_max 4294967295"), "conn_max");
    refused(apply(&mut c, "server 0 weight 4294967295"), "weight");
    refused(apply(&mut c, "max_per_source 1000001"), "max_per_source");
    apply(&mut c, "max_per_source 5").unwrap();
    assert_eq!(c.listeners[0].tuning.max_per_source, 5);
    assert!(c.to_commands().contains("max_per_source 5\n"));
    assert!(c.explain().contains("sessions per client address: 5"));
}

#[test]
fn server_address_with_trailing_junk_is_refused() {
    let mut c = one();
    refused(
        apply(&mut c, "server 0 address 127.0.0.1:1:2:3"),
        "127.0.0.1:1:2:3",
    );
    assert_eq!(c.listeners[0].servers[0].addr.to_string(), "127.0.0.1:7001");
    apply(&mut c, "server 0 address 127.0.0.2:9").unwrap();
    apply(&mut c, "server 0 address ::1").unwrap();
    assert_eq!(c.listeners[0].servers[0].addr.to_string(), "[::1]:9");
    refused(
        apply(&mut c, "server 1 address 127.0.0.1:1:2"),
        "127.0.0.1:1:2",
    );
}

#[test]
fn server_address_0_0_0_0_is_refused() {
    for bad in [
        "0.0.0.0",
        "255.255.255.255",
        "224.0.0.1",
        "::",
        "::ffff:0.0.0.0",
        "ff02::1",
    ] {
        let mut c = one();
        refused(
            apply(&mut c, &format!("server 0 address {bad}")),
            "is not a server address",
        );
        refused(
            apply(&mut c, &format!("server add [{bad}]:80")),
            "is not a server address",
        );
    }
    refused(toml("", "emergency = \"0.0.0.0:80\""), "b.toml:5:");
}

#[test]
fn control_acl_naming_an_empty_list_is_refused() {
    refused(toml("control_acl = 5", ""), "b.toml:1: control_acl 5");
    refused(
        toml(
            "control = \"0.0.0.0:10080\"\ncontrol_acl = 5\n[acl]\n4 = [\"permit 10.0.0.1\"]",
            "",
        ),
        "ACL list 5 is empty",
    );
    let ok = toml("control_acl = 5\n[acl]\n5 = [\"permit 10.0.0.1\"]", "").unwrap();
    let mut c = one();
    refused(apply(&mut c, "control_acl 5"), "empty");
    let mut c = ok;
    refused(apply(&mut c, "no acl 5"), "control_acl 5");
    apply(&mut c, "no control_acl").unwrap();
    apply(&mut c, "no acl 5").unwrap();
}

#[test]
fn server_that_is_quills_own_listener_is_refused() {
    refused(
        from_toml(
            "b.toml",
            "[[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:7000\"\n\
             servers = [\"127.0.0.1:7001\",\n \"127.0.0.1:7000\"]\n",
            &TuningPatch::default(),
        ),
        "b.toml:5: listener 'a': server 1 127.0.0.1:7000 is one of Quill's own listen addresses",
    );
    let mut c = one();
    refused(apply(&mut c, "server 0 port 7000"), "own listen");
    refused(apply(&mut c, "server add 127.0.0.1:7000"), "own listen");
    refused(
        apply(&mut c, "server 0 address [::ffff:127.0.0.1]:7000"),
        "own listen",
    );
    assert_eq!(c.listeners[0].servers.len(), 1);
    // A wildcard listener: any local address on its port loops.
    let w = from_toml(
        "w.toml",
        "[[listener]]\nname = \"w\"\nlisten = \"7100\"\nservers = [\"127.0.0.1:7001\"]\n",
        &TuningPatch::default(),
    )
    .unwrap();
    for (line, loops) in [
        ("server 0 address 127.0.0.1:7100", true),
        ("server 0 address 127.0.0.5:7100", true),
        ("server 0 address [::1]:7100", true),
        ("server 0 address 192.0.2.1:7100", false),
        ("server 0 address 127.0.0.1:7101", false),
    ] {
        assert_eq!(apply(&mut w.clone(), line).is_err(), loops, "{line}");
    }
    refused(toml("", "abuse = \"127.0.0.1:7000\""), "abuse server");
    // Another listener of the same process counts too.
    refused(
        from_toml(
            "b.toml",
            "[[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:7000\"\nservers = [\"127.0.0.1:7201\"]\n\
             [[listener]]\nname = \"b\"\nlisten = \"127.0.0.1:7201\"\nservers = [\"127.0.0.1:7001\"]\n",
            &TuningPatch::default(),
        ),
        "b.toml:4: listener 'a': server 0",
    );
}

#[test]
fn forty_thousand_servers_check_in_under_a_second() {
    let mut text =
        String::from("[[listener]]\nname = \"big\"\nlisten = \"127.0.0.1:7000\"\nservers = [\n");
    for i in 0..40_000u32 {
        text += &format!("  \"10.{}.{}.{}:80\",\n", i >> 16, (i >> 8) & 255, i & 255);
    }
    text += "]\n";
    let started = std::time::Instant::now();
    let c = from_toml("big.toml", &text, &TuningPatch::default()).unwrap();
    let _ = c.explain();
    let pool = crate::backend::Pool::build(&c.listeners[0], Default::default(), None, 0);
    let again = crate::backend::Pool::build(&c.listeners[0], Default::default(), Some(&pool), 0);
    assert!(std::sync::Arc::ptr_eq(
        &pool.servers[39_999],
        &again.servers[39_999]
    ));
    // Unoptimised test build on a busy machine: the old code took minutes here.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

/// `dsr_wait`: a bare number is milliseconds, a unit is read as any duration; whole
/// milliseconds from 1 to 1000 only; a listener without `dsr_if` refuses it.
#[test]
fn dsr_wait_takes_milliseconds_within_range_and_needs_dsr_if() {
    for (text, ms) in [
        ("1", 1),
        ("2", 2),
        ("50ms", 50),
        ("1s", 1000),
        (" 1000 ", 1000),
    ] {
        assert_eq!(
            parse_dsr_wait(text),
            Ok(Duration::from_millis(ms)),
            "{text}"
        );
    }
    for bad in [
        "0",
        "1001",
        "2s",
        "0ms",
        "",
        "ms",
        "-1",
        "1.5",
        "99999999999999999999999",
    ] {
        let e = parse_dsr_wait(bad).expect_err(bad);
        assert!(e.starts_with("dsr_wait: "), "{bad}: {e}");
    }
    let mut c = toml("", "dsr_if = \"eth0\"\ndsr_wait = 9").unwrap();
    assert_eq!(c.listeners[0].dsr_wait_ms(), 9);
    apply(&mut c, "no dsr_wait").unwrap();
    assert_eq!(c.listeners[0].dsr_wait_ms(), 2);
    apply(&mut c, "dsr_wait 40").unwrap();
    assert_eq!(
        c.listeners[0].dsr().and_then(|d| d.wait),
        Some(Duration::from_millis(40))
    );
    refused(apply(&mut c, "dsr_wait 0"), "out of range");
    assert_eq!(c.listeners[0].dsr_wait_ms(), 40);
    refused(toml("", "dsr_wait = 9"), "dsr_wait needs dsr_if");
    let mut plain = one();
    assert!(apply(&mut plain, "dsr_wait 9").is_err());
    assert_eq!(plain.listeners[0].dsr().and_then(|d| d.wait), None);
}

#[test]
fn a_listener_of_two_kinds_is_refused_when_the_file_is_read() {
    refused(
        toml("", "protocol = \"udp\"\ndsr_if = \"eth0\""),
        "listener 'a': dsr_if (not with protocol = \"udp\")",
    );
    refused(
        toml("", "protocol = \"udp\"\naccept_proxy = [\"10.0.0.0/8\"]"),
        "accept_proxy: listener 'a' is not a TCP listener",
    );
    refused(
        toml("", "dsr_if = \"eth0\"\naccept_proxy = [\"10.0.0.0/8\"]"),
        "accept_proxy: listener 'a' is not a TCP listener",
    );
    refused(
        toml("", "protocol = \"http\"\ndsr_if = \"eth0\""),
        "b.toml:3: listener 'a': dsr_if: direct server return forwards frames, not HTTP or TLS",
    );
    refused(
        toml("", "protocol = \"udp\"\ndsr_ip = \"10.0.0.1\""),
        "b.toml:3: listener 'a': dsr_ip and tarpit_acl need dsr_if",
    );
}

/// A server found through SRV is known to Maglev tables by its `TARGET:PORT`, so Quills that
/// resolve the same records build the same table whatever the addresses; a listed one by its
/// address as written.
#[test]
fn maglev_identity_is_the_srv_target_for_a_discovered_server() {
    use crate::addr::{BackendAddr, ServerSpec};
    let mut l = ListenerConfig::new(
        "l",
        crate::addr::ListenAddr::Tcp("127.0.0.1:1".parse().unwrap()),
    );
    let mut found = ServerSpec::new(BackendAddr::Tcp("10.0.0.7:8080".parse().unwrap()));
    found.identity = Some("pod-1.web.default.svc.cluster.local:8080".into());
    found.weight = 3;
    l.servers.push(found);
    l.servers.push(ServerSpec::new(BackendAddr::Tcp(
        "10.0.0.8:80".parse().unwrap(),
    )));
    assert_eq!(
        l.maglev_servers(),
        vec![
            ("pod-1.web.default.svc.cluster.local:8080".to_string(), 3, 0),
            ("10.0.0.8:80".to_string(), 1, 0),
        ]
    );
}
