//! Unit tests of the control socket's access rules (who may ask what) and line framing.

use super::server::{line_complete, parse_line, MAX_LINE};
use super::*;
use crate::command::{self, Needs};

fn needs(line: &str) -> Needs {
    command::parse_request(line)
        .unwrap_or_else(|e| panic!("{line}: {e}"))
        .action
        .needs()
}

#[test]
fn paths_and_local_sockets_need_the_unix_socket_and_hosts_do_not() {
    for line in [
        "server 0 address /run/app.sock",
        "server 0 address @abstract",
        "server 0 address app.sock/",
        "server 0 address [::1",
        "server 0 address host:80/x",
        "server add /run/app.sock",
        "server add @app",
        "server add ./x:1:2",
        "listen 127.0.0.1:9000",
        "listen /tmp/q.sock",
        "log /tmp/a.log",
        "web_stats /tmp/s.html",
        "include /etc/shadow",
        "write",
        "exit",
        "takeover",
        "takeover_done",
    ] {
        assert_eq!(needs(line), Needs::UnixSocket, "{line}");
    }
    let admin = Needs::Level(ControlLevel::Admin);
    for line in [
        "server 0 address 10.0.0.2",
        "server 0 address ::1",
        "server 0 address [::1]:80",
        "server 0 address backend-1.example.org",
        "server 0 port 81",
        "server 0 acl 1",
        "server 0 weight 2 address 10.0.0.2",
        "server add 10.0.0.3:80:0:0:1",
        "server 1 remove",
        "no log",
        "hash",
        "reload",
        "tls reload",
        "tls reload web",
        "conn_max 5",
    ] {
        assert_eq!(needs(line), admin, "{line}");
    }
    for line in [
        "server 0 drain",
        "server 1 weight 3 max 4 hard 5 prio 1",
        "close 3",
        "reopen",
    ] {
        assert_eq!(needs(line), Needs::Level(ControlLevel::Operate), "{line}");
    }
    for line in [
        "servers",
        "status",
        "listeners",
        "pools",
        "listener web connections",
        "pid",
        "json listener a servers",
        "mode",
        "acl 1",
    ] {
        assert_eq!(needs(line), Needs::Level(ControlLevel::Read), "{line}");
    }
}

#[test]
fn auth_prefix_is_split_off_and_compared_by_value() {
    assert_eq!(split_auth("auth t0k servers"), (Some("t0k"), "servers"));
    assert_eq!(split_auth("auth t0k"), (Some("t0k"), ""));
    assert_eq!(split_auth("servers"), (None, "servers"));
    assert_eq!(split_auth("authx servers"), (None, "authx servers"));
    assert!(same_secret(b"abc", b"abc"));
    assert!(!same_secret(b"abc", b"abd"));
    assert!(!same_secret(b"abc", b"abcd"));
    assert!(!same_secret(b"", b"a"));
}

#[test]
fn a_line_is_cut_at_its_newline_and_bounded() {
    assert_eq!(parse_line(b"pid\r\nexit\n".to_vec()), Ok("pid".into()));
    assert!(parse_line(vec![b'x'; MAX_LINE + 1]).is_err());
    assert!(parse_line(b"\xff\n".to_vec()).is_err());
    assert!(line_complete(b"a\n") && !line_complete(b"a"));
}

#[test]
fn a_request_is_refused_by_channel_and_level_with_the_line_it_was() {
    let req = command::parse_request("json exit").unwrap();
    let refused = refuse(&req, " json exit ", false, ControlLevel::Admin).unwrap();
    assert_eq!(
        refused.to_string(),
        "'json exit' needs the Unix control socket (it names a file or local socket, moves a listener, hands sockets over or exits)"
    );
    assert!(refuse(&req, "json exit", true, ControlLevel::Read).is_none());
    let req = command::parse_request("server 0 drain").unwrap();
    let refused = refuse(&req, "server 0 drain", false, ControlLevel::Read).unwrap();
    assert_eq!(
        refused.to_string(),
        "'server 0 drain' needs control level operate (this connection has read)"
    );
    assert!(refuse(&req, "server 0 drain", false, ControlLevel::Operate).is_none());
}

#[test]
fn a_line_that_is_no_command_says_why() {
    let long = parse_line(vec![b'x'; MAX_LINE + 1]).unwrap_err();
    assert_eq!(long.to_string(), "command line longer than 4096 bytes");
    let bytes = parse_line(b"\xff\n".to_vec()).unwrap_err();
    assert_eq!(bytes.to_string(), "command is not UTF-8");
}
