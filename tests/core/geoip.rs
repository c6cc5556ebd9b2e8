//! GeoIP (docs/design.md#geoip): `acl N permit|deny country CC` against a MaxMind DB
//! (`geoip = "FILE"`), reloaded with the configuration. The clients' addresses come in PROXY
//! headers from a trusted loopback source (127.0.0.2, `accept_proxy`): the test database's
//! networks (81.2.69.142 is GB, 89.160.20.112 SE, per MaxMind's test data) are only written in
//! headers, and no packet goes to them.

use crate::ctl;
use crate::support;

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctl::*;
use support::*;

const T: Duration = Duration::from_secs(10);

fn test_db() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/geoip/GeoIP2-Country-Test.mmdb")
}

/// Quill with `geoip` = a copy of the test database in its scratch directory (`geo.mmdb`), ACL
/// list 1 = `acl`, a listener trusting 127.0.0.2 for PROXY headers and checking list 1, in front
/// of `server`.
fn start(acl: &str, server: SocketAddr) -> (QuillProcess, PathBuf) {
    let cfg_path = Arc::new(Mutex::new(PathBuf::new()));
    let q = Quill::start_with(|dir: &Path, port| {
        std::fs::copy(test_db(), dir.join("geo.mmdb")).unwrap();
        let cfg = dir.join("quill.toml");
        std::fs::write(
            &cfg,
            format!(
                "log = \"{}\"\ncontrol = \"{}\"\ngeoip = \"geo.mmdb\"\n[acl]\n1 = [{acl}]\n[[listener]]\nname = \"l\"\nlisten = \"127.0.0.1:{port}\"\nservers = [\"{server}\"]\nclient_acl = 1\naccept_proxy = [\"127.0.0.2/32\"]\n",
                dir.join("access.log").display(),
                dir.join("ctl.sock").display()
            ),
        )
        .unwrap();
        *cfg_path.lock().unwrap() = cfg.clone();
        vec!["--config".into(), cfg.display().to_string()]
    });
    let cfg = cfg_path.lock().unwrap().clone();
    (q, cfg)
}

/// Whether a client that the PROXY header says is `src` gets its bytes echoed (else Quill
/// closed it).
fn echoes_for(q: &QuillProcess, src: &str) -> bool {
    let mut c = connect_from("127.0.0.2".parse().unwrap(), q.addr()).unwrap();
    let mut first = format!("PROXY TCP4 {src} 127.0.0.1 5000 {}\r\n", q.addr().port()).into_bytes();
    first.extend_from_slice(b"ping");
    c.write_all(&first).unwrap();
    let (got, _) = wait_closed_after(&mut c, 4);
    got == b"ping"
}

/// Reads up to `n` bytes or until the connection closes; returns what came.
fn wait_closed_after(c: &mut std::net::TcpStream, n: usize) -> (Vec<u8>, ()) {
    use std::io::Read;
    let mut got = Vec::new();
    let mut b = [0u8; 64];
    let end = std::time::Instant::now() + T;
    while got.len() < n && std::time::Instant::now() < end {
        match c.read(&mut b) {
            Ok(0) | Err(_) => break,
            Ok(k) => got.extend_from_slice(&b[..k]),
        }
    }
    (got, ())
}

#[test]
fn geoip_country_deny_blocks_client() {
    let e = echo();
    let (q, _) = start("\"deny country GB\"", e.addr());
    assert!(!echoes_for(&q, "81.2.69.142"), "GB is denied");
    assert!(echoes_for(&q, "89.160.20.112"), "SE passes");
    // An address the database has no country for matches no country entry.
    assert!(echoes_for(&q, "10.1.2.3"));
    let lines = q.wait_log_lines(3, T);
    assert!(
        lines
            .iter()
            .any(|l| l.client == "81.2.69.142" && l.end == "denied"),
        "{lines:#?}"
    );
}

#[test]
fn geoip_country_permit_list_denies_everyone_else() {
    // Pen's rule: a list ending in a permit denies whoever no entry matched.
    let e = echo();
    let (q, _) = start("\"permit country SE\"", e.addr());
    assert!(echoes_for(&q, "89.160.20.112"));
    assert!(!echoes_for(&q, "81.2.69.142"));
    assert!(!echoes_for(&q, "10.1.2.3"));
}

#[test]
fn geoip_reload_picks_new_database() {
    let e = echo();
    let (q, _) = start("\"deny country GB\"", e.addr());
    assert!(!echoes_for(&q, "81.2.69.142"));
    let db = q.path("geo.mmdb");

    // A bad file: the reload is refused, naming the file, and the database in use stays.
    std::fs::write(&db, b"not a database").unwrap();
    q.signal("HUP");
    assert!(
        q.wait_stderr_contains("geo.mmdb': not a MaxMind DB", T),
        "{}",
        q.stderr()
    );
    assert!(
        !echoes_for(&q, "81.2.69.142"),
        "the old database still denies GB"
    );

    // A new database where the test network's country is ZZ instead: after the reload, the GB
    // entry no longer matches it.
    let mut bytes = std::fs::read(test_db()).unwrap();
    let mut changed = 0;
    for i in 0..bytes.len().saturating_sub(2) {
        // A 2-byte UTF-8 string "GB" in the data section: control byte 0x42, then the letters.
        if bytes[i..i + 3] == *b"\x42GB" {
            bytes[i + 1..i + 3].copy_from_slice(b"ZZ");
            changed += 1;
        }
    }
    assert!(changed > 0);
    std::fs::write(&db, &bytes).unwrap();
    q.signal("HUP");
    assert!(
        q.wait_stderr_contains("SIGHUP: reloaded", T),
        "{}",
        q.stderr()
    );
    let mut passed = false;
    for _ in 0..50 {
        if echoes_for(&q, "81.2.69.142") {
            passed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(passed, "the new database is in use: {}", q.stderr());
    assert!(echoes_for(&q, "89.160.20.112"));
}

fn check_fails(text: &str, needle: &str) {
    let dir = scratch_dir();
    let cfg = dir.path().join("g.toml");
    std::fs::write(&cfg, text).unwrap();
    let (code, _out, err) = run_quill_output(&["check", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(needle), "{needle:?} not in:\n{err}");
}

#[test]
fn geoip_config_errors_name_file_and_line() {
    let listener = "[[listener]]\nname = \"l\"\nlisten = \"127.0.0.1:1\"\nservers = [\"127.0.0.1:2\"]\nclient_acl = 1\n";
    // A country entry without a database.
    check_fails(
        &format!("[acl]\n1 = [\"deny country GB\"]\n{listener}"),
        "g.toml:2: acl 1: country entries need a GeoIP database",
    );
    // A database that is not one, or missing.
    check_fails(
        &format!("geoip = \"/dev/null\"\n[acl]\n1 = [\"deny country GB\"]\n{listener}"),
        "g.toml:1: geoip: cannot use '/dev/null': not a MaxMind DB",
    );
    check_fails(
        &format!("geoip = \"nowhere.mmdb\"\n{listener}"),
        "g.toml:1: geoip: cannot use",
    );
    // A bad country code.
    check_fails(
        &format!(
            "geoip = \"{}\"\n[acl]\n1 = [\"deny country GBR\"]\n{listener}",
            test_db().display()
        ),
        "'GBR' is not a two-letter country code",
    );
}

#[test]
fn geoip_is_explained_by_check() {
    let dir = scratch_dir();
    let cfg = dir.path().join("g.toml");
    std::fs::write(
        &cfg,
        format!(
            "geoip = \"{}\"\n[acl]\n1 = [\"deny country GB\"]\n[[listener]]\nname = \"l\"\nlisten = \"127.0.0.1:1\"\nservers = [\"127.0.0.1:2\"]\nclient_acl = 1\n",
            test_db().display()
        ),
    )
    .unwrap();
    let (code, out, err) = run_quill_output(&["check", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("(GeoIP2-Country), for country entries"),
        "{out}"
    );
    assert!(out.contains("acl 1: deny country GB"), "{out}");
}

#[test]
fn geoip_control_command_adds_a_country_entry_and_write_saves_it() {
    let e = echo();
    let (q, _) = start("\"permit 0.0.0.0/0\"", e.addr());
    let sock = ctl_sock(&q);
    assert!(echoes_for(&q, "81.2.69.142"));
    ctl_ok(&sock, "no acl 1");
    ctl_ok(&sock, "acl 1 deny country gb");
    assert!(!echoes_for(&q, "81.2.69.142"));
    assert!(echoes_for(&q, "89.160.20.112"));
    let saved = q.path("saved.cfg");
    ctl_ok(&sock, &format!("write {}", saved.display()));
    let text = std::fs::read_to_string(&saved).unwrap();
    assert!(text.contains("acl 1 deny country GB"), "{text}");
}

fn ctl_sock(q: &QuillProcess) -> PathBuf {
    q.path("ctl.sock")
}
