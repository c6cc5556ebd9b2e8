//! `RunError`'s text, compared with the message each start-up failure printed when it was built
//! with `format!` (the same words, so that nothing an operator reads changes), and its sources.

use std::error::Error as _;
use std::io;
use std::path::PathBuf;

use super::{PrivilegeError, RunError, ThreadKind};
use crate::addr::ListenAddr;

fn e() -> io::Error {
    io::Error::other("boom")
}

#[test]
fn every_message_reads_as_the_formatted_one_did() {
    let path = PathBuf::from("/run/quill.pid");
    let addr: std::net::SocketAddr = "127.0.0.1:22001".parse().unwrap();
    let cases: Vec<(RunError, String)> = vec![
        (RunError::Signals(e()), "cannot handle signals: boom".into()),
        (RunError::Takeover(e()), "takeover: boom".into()),
        (RunError::Systemd(e()), "socket activation: boom".into()),
        (
            RunError::ControlSocket {
                addr: ListenAddr::Unix("/run/quill.sock".into()),
                source: e(),
            },
            "cannot open control socket /run/quill.sock: boom".into(),
        ),
        (
            RunError::Bind { addr, source: e() },
            format!("cannot open admin listener {addr}: boom"),
        ),
        (
            RunError::Apply(crate::state::plan::ApplyError::Bind {
                addr: ListenAddr::Tcp("127.0.0.1:1".parse().unwrap()),
                source: e(),
            }),
            "cannot listen on 127.0.0.1:1: boom".into(),
        ),
        (RunError::AdminToken("token".into()), "token".into()),
        (
            RunError::PidFile {
                path: path.clone(),
                source: e(),
            },
            format!("cannot write pid file {}: boom", path.display()),
        ),
        (
            RunError::AccessLog {
                path: "/var/log/a.log".into(),
                source: e(),
            },
            "cannot open access log /var/log/a.log: boom".into(),
        ),
        (
            RunError::Transparent {
                what: "listener 'web'".into(),
                source: e(),
            },
            "listener 'web': transparent: boom".into(),
        ),
        (
            RunError::Epoll(e()),
            "cannot create epoll instance: boom".into(),
        ),
        (RunError::Waker(e()), "cannot create waker: boom".into()),
        (RunError::LogHandles(e()), "access log: boom".into()),
        (
            RunError::Worker { id: 3, source: e() },
            "worker 3: boom".into(),
        ),
        (
            RunError::DsrAddress {
                what: "listener 'd'".into(),
            },
            "listener 'd': dsr_if needs a virtual address".into(),
        ),
        (
            RunError::PacketSocket {
                what: "listener 'd'".into(),
                ifname: "eth0".into(),
                source: e(),
            },
            "listener 'd': dsr_if eth0: cannot open a packet socket: boom".into(),
        ),
        (
            RunError::PacketRing {
                what: "listener 'd'".into(),
                ifname: "eth0".into(),
                source: e(),
            },
            "listener 'd': dsr_if eth0: cannot map a receive ring (TPACKET_V3): boom".into(),
        ),
    ];
    for (error, text) in cases {
        assert_eq!(error.to_string(), text);
    }
}

#[test]
fn a_refused_packet_socket_says_what_privilege_it_needs() {
    let source = io::Error::from_raw_os_error(libc::EPERM);
    let shown = source.to_string();
    let error = RunError::PacketSocket {
        what: "listener 'd'".into(),
        ifname: "eth0".into(),
        source,
    };
    assert_eq!(
        error.to_string(),
        format!(
            "listener 'd': dsr_if eth0: cannot open a packet socket: {shown} (needs CAP_NET_RAW)"
        )
    );
}

#[test]
fn privileges_read_as_before_and_keep_their_source() {
    let cases: Vec<(PrivilegeError, &str, bool)> = vec![
        (
            PrivilegeError::LookUp {
                user: "nobody".into(),
                source: e(),
            },
            "cannot look up user 'nobody': boom",
            true,
        ),
        (
            PrivilegeError::UnknownUser {
                user: "nobody".into(),
            },
            "unknown user 'nobody'",
            false,
        ),
        (
            PrivilegeError::Chroot {
                dir: "/var/empty".into(),
                source: e(),
            },
            "cannot chroot to /var/empty: boom",
            true,
        ),
        (
            PrivilegeError::BecomeUser {
                user: "nobody".into(),
                source: e(),
            },
            "cannot become user 'nobody': boom",
            true,
        ),
    ];
    for (inner, text, has_source) in cases {
        let error = RunError::from(inner);
        assert_eq!(error.to_string(), text);
        assert_eq!(error.source().is_some(), has_source, "{text}");
    }
}

#[test]
fn each_thread_is_named_as_before() {
    let names = [
        (ThreadKind::Worker, "cannot start worker thread: boom"),
        (ThreadKind::Resolver, "cannot start resolver threads: boom"),
        (ThreadKind::Control, "cannot start control thread: boom"),
        (
            ThreadKind::HealthChecker,
            "cannot start health checker: boom",
        ),
        (ThreadKind::Admin, "cannot start admin listener: boom"),
        (ThreadKind::Signals, "cannot start signal thread: boom"),
        (ThreadKind::Dsr, "cannot start DSR thread: boom"),
    ];
    for (what, text) in names {
        let error = RunError::Thread { what, source: e() };
        assert_eq!(error.to_string(), text);
        assert!(error.source().is_some(), "{text}");
    }
}
