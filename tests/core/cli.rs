//! Command line: help/version, usage errors (exit 2, first stderr line names the value), unsupported
//! and obsolete Pen options, bind failures (exit 1).

use crate::support;

use std::net::TcpListener;
use support::*;

#[test]
fn help_exits_0_and_describes_options() {
    let (code, out, err) = run_quill_output(&["--help"]);
    assert_eq!(code, 0, "--help exit code; stderr:\n{err}");
    assert!(
        out.contains("quill"),
        "--help output should name the program:\n{out}"
    );
    assert!(
        out.contains("--roundrobin"),
        "--help should list the Pen options:\n{out}"
    );
}

#[test]
fn version_exits_0_and_prints_quill_0_1_0() {
    let (code, out, err) = run_quill_output(&["--version"]);
    assert_eq!(code, 0, "--version exit code; stderr:\n{err}");
    assert_eq!(out.trim(), "quill 0.1.0");
}

fn server() -> String {
    spec(refused_addr())
}

fn listen() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// Runs quill expecting exit 2 and a first stderr line that contains `needle`.
fn expect_usage_error(args: &[&str], needle: &str) -> String {
    let (code, err) = run_quill_expect_exit(args);
    assert_eq!(code, 2, "quill {args:?} should exit 2; stderr:\n{err}");
    let first = first_line(&err);
    assert!(
        first.contains(needle),
        "first stderr line should name {needle:?}; got {first:?}\nfull stderr:\n{err}"
    );
    err
}

#[test]
fn cli_unknown_flag_exits_2_naming_the_flag() {
    let (l, s) = (listen(), server());
    expect_usage_error(&["--no-such-flag", &l, &s], "--no-such-flag");
}

#[test]
fn cli_bad_duration_exits_2_naming_the_value() {
    let (l, s) = (listen(), server());
    expect_usage_error(&["-b", "5parsecs", &l, &s], "5parsecs");
    expect_usage_error(&["--fin-timeout", "soon", &l, &s], "soon");
}

#[test]
fn cli_bad_server_spec_exits_2_naming_the_value() {
    let l = listen();
    expect_usage_error(&[&l, "127.0.0.1:notaport"], "notaport");
}

#[test]
fn cli_max_connections_not_a_number_exits_2_naming_the_value() {
    let (l, s) = (listen(), server());
    expect_usage_error(&["-x", "abc", &l, &s], "abc");
}

#[test]
fn cli_config_together_with_positional_args_exits_2() {
    let dir = scratch_dir();
    let cfg = dir.path().join("quill.toml");
    let port = free_port();
    std::fs::write(
        &cfg,
        format!("[[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:{port}\"\nservers = [\"127.0.0.1:9\"]\n"),
    )
    .unwrap();
    let (l, s) = (listen(), server());
    let (code, err) = run_quill_expect_exit(&["--config", cfg.to_str().unwrap(), &l, &s]);
    assert_eq!(
        code, 2,
        "--config with positional args should exit 2; stderr:\n{err}"
    );
    let first = first_line(&err);
    assert!(
        first.contains("config"),
        "first stderr line should explain the --config conflict: {first:?}"
    );
}

#[test]
fn cli_obsolete_dash_d_is_accepted_with_a_notice() {
    let g = greet("g");
    let servers = [spec(g.addr())];
    let q = Quill::start(&["-D"], &servers);
    // It really serves.
    let (name, mut s) = greet_session(q.port);
    assert_eq!(name, "g");
    echo_roundtrip(&mut s, b"still works\n");
    let err = q.stderr();
    assert!(
        err.lines().any(|l| l.contains("-D")),
        "a one-line notice about -D expected on stderr:\n{err}"
    );
}

#[test]
fn cli_port_in_use_exits_1_naming_the_address() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let s = server();
    let (code, err) = run_quill_expect_exit(&[&addr, &s]);
    assert_eq!(code, 1, "bind failure should exit 1; stderr:\n{err}");
    let first = first_line(&err);
    assert!(
        first.contains(&addr),
        "first stderr line should name {addr}: {first:?}\nstderr:\n{err}"
    );
    assert!(
        err.to_lowercase().contains("in use"),
        "stderr should say the address is in use:\n{err}"
    );
    drop(taken);
}
