//! Whole HTTP sessions through Quill (docs/design.md#positions-move-with-the-buffer). Started once
//! per fuzzing process: a scripted server on loopback and Quill itself, in this process
//! (`quill::cli::main_with`), with two HTTP listeners in front of the server, one plain and one
//! with TLS (a certificate made at start-up). Each input is a session (tests/support/session.rs,
//! the model the property tests in tests/http/sessions.rs play too): its first byte picks the
//! listener, the rest the requests, their pieces and the server's answers. A wrong, missing or
//! reordered response is a panic here; a panic in a Quill worker aborts the process; libFuzzer
//! reports both.

#![no_main]

#[allow(dead_code)] // the model serves the property tests too: this target calls a part of it
#[path = "../../tests/support/session.rs"]
mod session;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use session::{Case, Server};

struct Rig {
    server: Server,
    plain: SocketAddr,
    tls: SocketAddr,
    tls_config: Arc<rustls::ClientConfig>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

fn rig() -> &'static Rig {
    static RIG: OnceLock<Rig> = OnceLock::new();
    RIG.get_or_init(|| {
        let server = Server::start();
        let dir = std::env::temp_dir().join(format!("quill-fuzz-session-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cert = rcgen::generate_simple_self_signed(vec!["site.test".to_string()]).unwrap();
        let (cert_path, key_path) = (dir.join("site.pem"), dir.join("site.key"));
        std::fs::write(&cert_path, cert.cert.pem()).unwrap();
        std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
        let (plain, tls) = (free_port(), free_port());
        let backend = server.addr;
        let config = format!(
            "workers = 1\n\
             [[listener]]\nname = \"plain\"\nlisten = \"127.0.0.1:{plain}\"\nprotocol = \"http\"\nservers = [\"{backend}\"]\n\
             [[listener]]\nname = \"tls\"\nlisten = \"127.0.0.1:{tls}\"\nprotocol = \"http\"\nservers = [\"{backend}\"]\n\
             [listener.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
            cert_path.display(),
            key_path.display()
        );
        let config_path = dir.join("quill.toml");
        std::fs::write(&config_path, config).unwrap();
        std::thread::spawn(move || {
            let code = quill::cli::main_with(["quill".into(), "--config".into(), config_path.into()]);
            panic!("quill ended: {code:?}");
        });
        let (plain, tls) = (
            SocketAddr::from(([127, 0, 0, 1], plain)),
            SocketAddr::from(([127, 0, 0, 1], tls)),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(plain).is_err() || TcpStream::connect(tls).is_err() {
            assert!(Instant::now() < deadline, "quill did not start listening");
            std::thread::sleep(Duration::from_millis(20));
        }
        Rig {
            server,
            plain,
            tls,
            tls_config: session::tls_client_config(),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let rig = rig();
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let case = Case::from_bytes(rest);
    rig.server.load(&case);
    let conn = if first & 1 == 0 {
        TcpStream::connect(rig.plain).unwrap()
    } else {
        session::tls_bridge(rig.tls, rig.tls_config.clone()).unwrap()
    };
    if let Err(e) = session::play(&case, conn) {
        panic!("{e}\ncase: {case:?}");
    }
    if let Err(e) = session::check_server(&case, &rig.server.seen()) {
        panic!("{e}\ncase: {case:?}");
    }
});
