//! Issue 26 point 3's interoperation: curl, nghttp and h2load over TLS with ALPN h2, and
//! headless Chromium loading a page through Quill over HTTP/2.

use std::process::Command;
use std::time::Duration;

use crate::http_support::Backend;
use crate::kit::{run, start_tls};

#[test]
fn nghttp_fetches_over_tls_and_h2() {
    let backend = Backend::fixed(100_000);
    let q = start_tls(&backend, "", "");
    let url = format!("https://127.0.0.1:{}/file", q.port);
    let (out, err, ok) = run(
        Command::new("nghttp").args(["-nv", &url]),
        Duration::from_secs(20),
    );
    assert!(ok, "{out}\n{err}");
    assert!(out.contains(":status: 200"), "{out}");
    assert!(out.contains("recv DATA frame"), "{out}");
}

#[test]
fn h2load_multiplexed_requests_all_succeed_over_tls() {
    let backend = Backend::fixed(1024);
    let q = start_tls(&backend, "", "");
    let url = format!("https://127.0.0.1:{}/", q.port);
    let (out, err, ok) = run(
        Command::new("h2load").args(["-n", "2000", "-c", "4", "-m", "10", &url]),
        Duration::from_secs(60),
    );
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("Application protocol: h2"), "{out}");
    assert!(
        out.contains("requests: 2000 total, 2000 started, 2000 done, 2000 succeeded, 0 failed"),
        "{out}"
    );
}

#[test]
fn chromium_loads_a_page_through_quill_over_http2() {
    let backend = Backend::start(|_| {
        vec![crate::http_support::Step::Send(crate::http_support::response(
            200,
            "Content-Type: text/html\r\n",
            b"<html><body><p id=x>served over h2</p><script>document.getElementById('x').textContent += ' ' + performance.getEntriesByType('navigation')[0].nextHopProtocol</script></body></html>",
        ))]
    });
    let q = start_tls(&backend, "", "");
    let profile = tempfile::tempdir().unwrap();
    let url = format!("https://localhost:{}/", q.port);
    let (out, err, ok) = run(
        Command::new("/usr/bin/chromium").args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--ignore-certificate-errors",
            "--host-resolver-rules=MAP localhost 127.0.0.1",
            &format!("--user-data-dir={}", profile.path().display()),
            "--dump-dom",
            &url,
        ]),
        Duration::from_secs(60),
    );
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("served over h2 h2"), "{out}\n{err}");
}
