//! WebSocket and other upgrades through an HTTP listener (docs/design.md#upgrades): after a
//! `101 Switching Protocols` the connection is a tunnel on the TCP data path, with its own
//! `tunnel_timeout`. The WebSocket client and server are `tungstenite`'s (RFC 6455 handshake,
//! masked frames, the close handshake), not ours.

use crate::http_support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use http_support::*;
use tungstenite::{Message, WebSocket};

const T: Duration = Duration::from_secs(10);

/// A WebSocket server on loopback that echoes every message with a prefix and answers `big` with
/// 3 MB, for one connection; returns its address and the thread that reports what it saw.
fn ws_server() -> (std::net::SocketAddr, thread::JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let h = thread::spawn(move || {
        let mut seen = Vec::new();
        let (stream, _) = listener.accept().expect("accept");
        stream.set_read_timeout(Some(T)).expect("timeout");
        let mut ws = tungstenite::accept(stream).expect("server handshake");
        for _ in 0..100 {
            match ws.read() {
                Ok(Message::Text(t)) => {
                    seen.push(t.to_string());
                    if t.as_str() == "big" {
                        let big = "x".repeat(3_000_000);
                        ws.send(Message::text(big)).expect("send big");
                    } else {
                        ws.send(Message::text(format!("echo: {t}"))).expect("send");
                    }
                }
                Ok(Message::Close(_)) => {
                    seen.push("close".to_string());
                    // tungstenite answers the close; flush it out.
                    let _ = ws.flush();
                    break;
                }
                Ok(_) => {}
                Err(e) => {
                    seen.push(format!("error: {e}"));
                    break;
                }
            }
        }
        seen
    });
    (addr, h)
}

fn ws_client(proxy: std::net::SocketAddr) -> WebSocket<TcpStream> {
    let stream = TcpStream::connect(proxy).expect("connect to quill");
    stream.set_read_timeout(Some(T)).expect("timeout");
    let url = format!("ws://{proxy}/chat");
    let (ws, resp) = tungstenite::client(url.as_str(), stream).expect("client handshake");
    assert_eq!(resp.status(), 101);
    ws
}

#[test]
fn http_websocket_exchange_both_ways_and_close_handshake() {
    let (addr, server) = ws_server();
    let p = start_pen(&[addr]);
    let mut ws = ws_client(p.addr());
    for i in 0..3 {
        ws.send(Message::text(format!("hello {i}"))).expect("send");
        let reply = ws.read().expect("read");
        assert_eq!(reply, Message::text(format!("echo: hello {i}")));
    }
    // A bulky message: the tunnel moves it whole (through splice once bulky).
    ws.send(Message::text("big")).expect("send big");
    match ws.read().expect("read big") {
        Message::Text(t) => assert!(t.len() == 3_000_000 && t.bytes().all(|b| b == b'x')),
        other => panic!("unexpected {other:?}"),
    }
    ws.close(None).expect("close");
    // The server's close frame comes back through the tunnel; then the stream ends.
    let deadline = Instant::now() + T;
    loop {
        assert!(Instant::now() < deadline, "no close handshake");
        match ws.read() {
            Ok(Message::Close(_)) | Ok(_) => continue,
            Err(tungstenite::Error::ConnectionClosed) => break,
            Err(e) => panic!("close handshake failed: {e}"),
        }
    }
    let seen = server.join().expect("server thread");
    assert_eq!(
        seen,
        vec!["hello 0", "hello 1", "hello 2", "big", "close"],
        "what the server saw"
    );
}

#[test]
fn http_upgrade_request_carries_upgrade_and_connection_upgrade_to_the_server() {
    let b = Backend::start(|_| {
        vec![Step::Send(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: demo\r\nConnection: upgrade\r\n\r\nfrom-server"
                .to_vec(),
        )]
    });
    let p = start_pen(&[b.addr()]);
    let mut s = TcpStream::connect(p.addr()).expect("connect");
    s.set_read_timeout(Some(T)).expect("timeout");
    s.write_all(
        b"GET /up HTTP/1.1\r\nHost: example.test\r\nConnection: Upgrade\r\nUpgrade: demo\r\n\r\n",
    )
    .expect("send");
    let mut got = Vec::new();
    let deadline = Instant::now() + T;
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"from-server") && Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 101 "), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("connection: upgrade"),
        "{text}"
    );
    assert!(text.ends_with("from-server"), "{text}");
    let reqs = b.wait_requests(1, T);
    let r = &reqs[0];
    assert_eq!(r.header("upgrade"), Some("demo"));
    assert!(r
        .header("connection")
        .is_some_and(|c| c.eq_ignore_ascii_case("upgrade")));
}

#[test]
fn http_unrequested_101_gives_502() {
    let b = Backend::start(|_| {
        vec![Step::Send(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: demo\r\nConnection: upgrade\r\n\r\n"
                .to_vec(),
        )]
    });
    let p = start_pen(&[b.addr()]);
    let mut c = p.client();
    let r = c.roundtrip(&get("/no-upgrade"));
    assert_eq!(r.status, 502, "{}", show(&r.raw_head));
}

#[test]
fn http_idle_tunnel_is_closed_after_tunnel_timeout() {
    let (addr, _server) = ws_server();
    let p = start_proxy("tunnel_timeout = \"1s\"", &[addr]);
    let mut ws = ws_client(p.addr());
    ws.send(Message::text("hello")).expect("send");
    assert_eq!(ws.read().expect("read"), Message::text("echo: hello"));
    let started = Instant::now();
    // Silent now: the tunnel is cut after about a second, well before the read timeout.
    let r = ws.read();
    assert!(r.is_err(), "{r:?}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(8),
        "closed after {waited:?}"
    );
}
