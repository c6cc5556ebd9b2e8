//! TLS session resumption by stateless tickets
//! (docs/design.md#resumption-across-workers-and-processes): the ticket keys are the same in every
//! worker, in every process reading the same `ticket_keys` file (HAProxy's format), and in the
//! process that took over from the one that issued the ticket; a rotated key file keeps the
//! previous key's sessions; no resumption where client certificates are asked for; a bad key file
//! is refused with its file and line. A takeover keeps an established TLS session (the old process
//! drains it) and fails no handshake made while it happens. `openssl s_client -sess_out` saves a
//! session and
//! `-sess_in` offers it again; s_client says `Reused` or `New`.

use crate::support;
use crate::tls_local;
use crate::tls_support;

use std::fs;
use std::path::Path;
use std::time::Duration;

use support::*;
use tls_local::*;
use tls_support::{ClientOpts, TlsClient};

/// The protocol versions every resumption test runs with.
const VERSIONS: [&str; 2] = ["-tls1_3", "-tls1_2"];

/// A session saved to `file` from a full handshake with 127.0.0.1:PORT.
fn save_session(port: u16, version: &str, file: &Path) -> String {
    let path = file.display().to_string();
    let out = session(port, &[version, "-sess_out", &path], "first").unwrap();
    assert!(full(&out), "first handshake should be full:\n{out}");
    assert!(file.exists(), "s_client saved no session:\n{out}");
    out
}

/// Offers the session in `file` to 127.0.0.1:PORT; s_client's output.
fn offer_session(port: u16, version: &str, file: &Path, line: &str) -> String {
    let path = file.display().to_string();
    session(port, &[version, "-sess_in", &path], line).unwrap()
}

fn one_listener(dir: &Path, port: u16, server: std::net::SocketAddr, extra: &str) -> String {
    let (cert, key) = write_cert(dir, "site", "quill-resume", 1);
    tls_listener("tls", port, server, &cert, &key, extra)
}

#[test]
fn tls_session_resumes_on_any_worker() {
    let e = echo();
    let q = start_tls(|dir, port| one_listener(dir, port, e.addr(), ""));
    for version in VERSIONS {
        let file = q.path(&format!("sess{version}.pem"));
        save_session(q.port, version, &file);
        // Two workers share the listening socket (EPOLLEXCLUSIVE): over several connections both
        // take some, and every one resumes.
        for i in 0..6 {
            let out = offer_session(q.port, version, &file, &format!("again-{i}"));
            assert!(
                resumed(&out),
                "{version} connection {i} not resumed:\n{out}"
            );
        }
    }
}

#[test]
fn tls_ticket_key_file_lets_two_processes_resume_each_others_sessions() {
    let e = echo();
    let keys = scratch_dir();
    let key_file = keys.path().join("keys.txt");
    fs::write(
        &key_file,
        format!("# shared by both\n{}\n{}\n", key_line(80), key_line(80)),
    )
    .unwrap();
    let extra = format!("ticket_keys = \"{}\"\n", key_file.display());
    let a = start_tls(|dir, port| one_listener(dir, port, e.addr(), &extra));
    let b = start_tls(|dir, port| one_listener(dir, port, e.addr(), &extra));
    for version in VERSIONS {
        let from_a = a.path(&format!("a{version}.pem"));
        save_session(a.port, version, &from_a);
        let out = offer_session(b.port, version, &from_a, "a-on-b");
        assert!(
            resumed(&out),
            "{version}: a's session not resumed on b:\n{out}"
        );
        let from_b = b.path(&format!("b{version}.pem"));
        save_session(b.port, version, &from_b);
        let out = offer_session(a.port, version, &from_b, "b-on-a");
        assert!(
            resumed(&out),
            "{version}: b's session not resumed on a:\n{out}"
        );
    }
    // Without the file, each process has keys of its own: a's sessions do not resume on c.
    let c = start_tls(|dir, port| one_listener(dir, port, e.addr(), ""));
    let from_a = a.path("a-tls1_3.pem");
    let out = offer_session(c.port, "-tls1_3", &from_a, "a-on-c");
    assert!(full(&out), "a session resumed without shared keys:\n{out}");
}

#[test]
fn tls_session_resumes_across_a_takeover() {
    let e = echo();
    let mut old = start_tls(|dir, port| one_listener(dir, port, e.addr(), ""));
    let files: Vec<_> = VERSIONS
        .iter()
        .map(|v| {
            let f = old.path(&format!("sess{v}.pem"));
            save_session(old.port, v, &f);
            (v, f)
        })
        .collect();
    let mut args = quill_args(old.dir.path());
    args.extend([
        "--takeover".into(),
        old.path("c.sock").display().to_string(),
    ]);
    let new = QuillProcess::spawn_in(scratch_dir(), args, old.port);
    assert!(
        new.wait_stderr_contains("took over", Duration::from_secs(10)),
        "new:\n{}\nold:\n{}",
        new.stderr(),
        old.stderr()
    );
    assert!(
        new.stderr().contains("session-ticket keys received"),
        "{}",
        new.stderr()
    );
    // Once the old process has gone, every connection reaches the new one.
    let st = old
        .wait_exit(Duration::from_secs(10))
        .expect("old process exits");
    assert_eq!(st.code(), Some(0), "{}", old.stderr());
    for (version, file) in &files {
        let out = offer_session(new.port, version, file, "after the takeover");
        assert!(
            resumed(&out),
            "{version}: not resumed after the takeover:\n{out}"
        );
    }
    // The new process issues tickets with the same keys too.
    let again = new.path("new.pem");
    save_session(new.port, "-tls1_3", &again);
    assert!(resumed(&offer_session(new.port, "-tls1_3", &again, "x")));
}

#[test]
fn tls_no_resumption_when_client_certificates_are_asked_for() {
    let e = echo();
    let q = start_tls(|dir, port| {
        let ca = write_ca(dir, "ca");
        let extra = format!(
            "client_ca = \"{}\"\nclient_verify = \"optional\"\n",
            ca.display()
        );
        one_listener(dir, port, e.addr(), &extra)
    });
    for version in VERSIONS {
        let file = q.path(&format!("sess{version}.pem"));
        let path = file.display().to_string();
        let out = session(q.port, &[version, "-sess_out", &path], "first").unwrap();
        assert!(full(&out), "{out}");
        if file.exists() {
            let out = offer_session(q.port, version, &file, "second");
            assert!(
                full(&out) && !resumed(&out),
                "{version}: resumed though client certificates are asked for:\n{out}"
            );
        }
    }
}

#[test]
fn tls_rotated_ticket_key_file_still_resumes_sessions_of_the_previous_key() {
    let e = echo();
    let keys = scratch_dir();
    let key_file = keys.path().join("keys.txt");
    let (k1, k2, k3) = (key_line(48), key_line(48), key_line(48));
    // k1 encrypts (the second-to-last), k2 is the next key.
    fs::write(&key_file, format!("{k1}\n{k2}\n")).unwrap();
    let extra = format!("ticket_keys = \"{}\"\n", key_file.display());
    let q = start_tls(|dir, port| one_listener(dir, port, e.addr(), &extra));
    let old_sessions: Vec<_> = VERSIONS
        .iter()
        .map(|v| {
            let f = q.path(&format!("k1{v}.pem"));
            save_session(q.port, v, &f);
            (v, f)
        })
        .collect();
    // Rotation: append k3; k2 encrypts now, k1 still decrypts.
    replace_file(&key_file, format!("{k1}\n{k2}\n{k3}\n").as_bytes());
    let (ok, reply) = ctl(&q, &["tls", "reload", "tls"]);
    assert!(ok, "{reply}");
    for (version, file) in &old_sessions {
        let out = offer_session(q.port, version, file, "after rotation");
        assert!(
            resumed(&out),
            "{version}: k1's session lost by the rotation:\n{out}"
        );
    }
    // SIGHUP re-reads the key file too: with k1 dropped, its sessions no longer resume, and a
    // new one (under k2) does.
    replace_file(&key_file, format!("{k2}\n{k3}\n").as_bytes());
    q.signal("HUP");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    for (version, file) in &old_sessions {
        loop {
            let out = offer_session(q.port, version, file, "k1 dropped");
            if full(&out) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{version}: k1's session still resumes after SIGHUP dropped k1:\n{out}\n{}",
                q.stderr()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let f = q.path(&format!("k2{version}.pem"));
        save_session(q.port, version, &f);
        assert!(resumed(&offer_session(q.port, version, &f, "k2")));
    }
}

#[test]
fn tls_bad_ticket_key_file_is_refused_naming_file_and_line() {
    let e = echo();
    let keys = scratch_dir();
    let key_file = keys.path().join("keys.txt");
    let shown = key_file.display().to_string();
    // At start: line 3 is not base64.
    fs::write(
        &key_file,
        format!("# keys\n{}\nnot*base64*\n", key_line(48)),
    )
    .unwrap();
    let dir = scratch_dir();
    let port = free_port();
    let (cert, key) = write_cert(dir.path(), "site", "quill-resume", 1);
    let extra = format!("ticket_keys = \"{shown}\"\n");
    fs::write(
        dir.path().join("q.toml"),
        tls_listener("tls", port, e.addr(), &cert, &key, &extra),
    )
    .unwrap();
    let args = quill_args(dir.path());
    let mut q = QuillProcess::spawn_in(dir, args, port);
    let st = q
        .wait_exit(Duration::from_secs(10))
        .expect("quill refuses to start");
    assert_ne!(st.code(), Some(0));
    assert!(
        q.stderr().contains(&format!("{shown}:3: not base64")),
        "{}",
        q.stderr()
    );

    // At `tls reload`: a key of the wrong length keeps the running keys, the reply names the
    // file and line.
    let good = format!("{}\n{}\n", key_line(80), key_line(80));
    fs::write(&key_file, &good).unwrap();
    let q = start_tls(|dir, port| one_listener(dir, port, e.addr(), &extra));
    let file = q.path("sess.pem");
    save_session(q.port, "-tls1_3", &file);
    replace_file(&key_file, format!("{good}{}\n", key_line(32)).as_bytes());
    let (ok, reply) = ctl(&q, &["tls", "reload"]);
    assert!(!ok, "{reply}");
    assert!(
        reply.contains(&format!(
            "tls reload: {shown}:3: a key has 48 or 80 bytes, not 32"
        )),
        "{reply}"
    );
    assert_eq!(reply.trim().lines().count(), 1, "{reply}");
    let out = offer_session(q.port, "-tls1_3", &file, "old keys kept");
    assert!(resumed(&out), "{out}");
}

/// A TLS session to 127.0.0.1:PORT (any certificate accepted: the test checks continuity, not
/// the chain), handshake done, or why not.
fn tls_to(port: u16) -> Result<TlsClient, String> {
    let opts = ClientOpts {
        sni: Some("quill-resume"),
        ..ClientOpts::default()
    };
    TlsClient::connect(std::net::SocketAddr::from(([127, 0, 0, 1], port)), &opts)
}

/// One echo round trip through a session.
fn echo_tls(tls: &mut TlsClient, msg: &[u8]) -> Result<(), String> {
    match tls.echo(msg)? {
        got if got == msg => Ok(()),
        _ => Err("echo differs".into()),
    }
}

#[test]
fn tls_takeover_keeps_established_sessions_and_every_handshake_succeeds() {
    let e = echo();
    let mut old = start_tls(|dir, port| one_listener(dir, port, e.addr(), ""));
    let mut open = tls_to(old.port).expect("a session before the takeover");
    echo_tls(&mut open, b"before").unwrap();
    // Handshakes in a loop (bounded) while the new process takes over.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (port, stop2) = (old.port, stop.clone());
    let client = std::thread::spawn(move || {
        let (mut ok, mut failed) = (0, Vec::new());
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !stop2.load(std::sync::atomic::Ordering::Relaxed)
            && std::time::Instant::now() < deadline
            && ok + failed.len() < 2000
        {
            match tls_to(port).and_then(|mut t| echo_tls(&mut t, b"during")) {
                Ok(()) => ok += 1,
                Err(e) => failed.push(e),
            }
        }
        (ok, failed)
    });
    std::thread::sleep(Duration::from_millis(200));
    let mut args = quill_args(old.dir.path());
    args.extend([
        "--takeover".into(),
        old.path("c.sock").display().to_string(),
    ]);
    let new = QuillProcess::spawn_in(scratch_dir(), args, old.port);
    assert!(
        new.wait_stderr_contains("took over", Duration::from_secs(10)),
        "new:\n{}\nold:\n{}",
        new.stderr(),
        old.stderr()
    );
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed) = client.join().unwrap();
    // The session opened before is still served by the old process, which drains.
    echo_tls(&mut open, b"after").expect("the established session survives the takeover");
    drop(open);
    let st = old.wait_exit(Duration::from_secs(10)).expect("old exits");
    assert_eq!(st.code(), Some(0), "{}", old.stderr());
    assert!(ok > 0, "no handshake ran during the takeover");
    assert!(
        failed.is_empty(),
        "{} of {} handshakes failed during the takeover: {:?}",
        failed.len(),
        ok + failed.len(),
        &failed[..failed.len().min(3)]
    );
    // And after it, the new process serves.
    let mut t = tls_to(new.port).expect("a session after the takeover");
    echo_tls(&mut t, b"new").unwrap();
}
