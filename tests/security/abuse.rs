//! Hostile or broken SERVERS: resets mid-stream, instant closes, arbitrary bytes, servers that never
//! read, and a client that never reads (backpressure must reach the server instead of quill's
//! memory). The client side of abuse is covered by tests/core/forwarding.rs
//! (`abusive_clients_are_survived`).

use crate::support;

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use support::*;

/// A byte-exact echo session of `n` bytes through quill on 127.0.0.1:port.
fn echo_session_exact(port: u16, seed: u64, n: usize) {
    let mut s = connect_port(port);
    let data = pattern_bytes(seed, n);
    let got = send_and_collect(&mut s, data.clone(), Duration::from_secs(20));
    assert_same_bytes(&got, &data, &format!("echo session of {n} bytes"));
}

/// Bytes in a socket's send queue not yet acknowledged by the peer (SIOCOUTQ), through the
/// workspace's one `unsafe` module.
fn unacked_bytes(s: &TcpStream) -> i32 {
    let n = quill_core::sys::unacked_bytes(s.as_fd()).expect("ioctl(SIOCOUTQ)");
    i32::try_from(n).expect("send queue fits an i32")
}

/// A test-local TCP backend on 127.0.0.1: every accepted connection is handed to `handler` on its
/// own thread (with read/write timeouts set). Stops accepting when dropped; bounded lifetime.
struct Backend {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicU64>,
}

impl Backend {
    fn start(handler: impl Fn(TcpStream) + Send + Sync + 'static) -> Backend {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicU64::new(0));
        let (stop2, acc2) = (stop.clone(), accepted.clone());
        let handler = Arc::new(handler);
        thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            while !stop2.load(Ordering::SeqCst) && Instant::now() < deadline {
                match l.accept() {
                    Ok((c, _)) => {
                        let _ = c.set_nonblocking(false);
                        set_timeouts(&c, IO_TIMEOUT);
                        acc2.fetch_add(1, Ordering::SeqCst);
                        let h = handler.clone();
                        thread::spawn(move || h(c));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Backend {
            addr,
            stop,
            accepted,
        }
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Echoes until EOF (then sends FIN) or an error.
fn echo_rest(mut c: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    for _ in 0..1_000_000 {
        match c.read(&mut buf) {
            Ok(0) => {
                let _ = c.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => {
                if c.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(_) => return,
        }
    }
}

#[test]
fn server_reset_mid_stream_is_counted_and_survived() {
    // The backend reads a 12-byte command. "RST" followed by a decimal size (padded with spaces to
    // 12 bytes): it writes that many pattern bytes, makes sure quill has them (big sizes: waits for
    // SIOCOUTQ == 0, every byte acknowledged, so the reset cannot discard any), then closes with
    // SO_LINGER 0, which sends a RST and no FIN. Any other command: it echoes the command and
    // everything after it (a healthy backend).
    let b = Backend::start(|mut c| {
        let mut cmd = [0u8; 12];
        if c.read_exact(&mut cmd).is_err() {
            return;
        }
        if let Some(n) = cmd
            .strip_prefix(b"RST")
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| d.trim().parse::<usize>().ok())
        {
            let data = pattern_bytes(0, n);
            socket2::SockRef::from(&c)
                .set_linger(Some(Duration::ZERO))
                .unwrap();
            if c.write_all(&data).is_err() {
                return;
            }
            // Small writes on loopback are transmitted within write() (initial window ~640 KiB),
            // so the RST can follow at once and lands right behind the data, often before quill
            // has read it. Bigger ones: wait until quill's kernel acknowledged every byte.
            if n > 64 * 1024 {
                let deadline = Instant::now() + Duration::from_secs(10);
                while unacked_bytes(&c) > 0 && Instant::now() < deadline {
                    thread::sleep(Duration::from_millis(2));
                }
            }
            drop(c); // RST
        } else {
            if c.write_all(&cmd).is_err() {
                return;
            }
            echo_rest(c);
        }
    });
    let mut q = Quill::start(&["--workers", "2"], &[spec(b.addr())]);
    // Small (copy buffer path), medium, and bulky (splice path once a read fills a buffer); each
    // size made distinct with `+ i`, so each session's log line is known by its byte counts. 60
    // sessions, because whether quill reads the last data before or together with the RST is a
    // race on its side, and both orders must be handled.
    for i in 0..60usize {
        let n = [1usize, 100, 10_000, 16_384, 1_000_000][i % 5] + i;
        let mut s = connect_port(q.port);
        write_all(&mut s, format!("RST{n:<9}").as_bytes());
        let (got, how) = wait_closed(&mut s, Duration::from_secs(10));
        // Every byte the server sent before its reset reaches the client (quill had all of them).
        assert_same_bytes(
            &got,
            &pattern_bytes(0, n),
            "bytes sent before the server reset",
        );
        // The client is closed (EOF or reset, not left hanging): wait_closed panics on a hang.
        eprintln!("session {i} ({n} bytes): client saw {how:?}");
        // The server's SO_LINGER-0 close sends a RST and never a FIN, so the session is over: quill
        // must end it at once (the client is still open here) and account it as a server reset,
        // not as a clean "done".
        let is_ours = |l: &LogLine| l.bytes_in == 12 && l.bytes_out == n as u64;
        let line = match wait_log(&q.log_path(), Duration::from_secs(3), |ls| {
            ls.iter().any(is_ours)
        }) {
            Ok(ls) => ls.into_iter().find(is_ours).unwrap(),
            Err(_) => {
                // Not ended: find out how quill accounts it once the client closes too.
                drop(s);
                let late = wait_log_line(&q.log_path(), Duration::from_secs(5), is_ours);
                panic!(
                    "session {i} ({n} bytes): the server's RST was passed on as an EOF and the \
                     session stayed open until the client closed; then it was logged as {late:?}"
                );
            }
        };
        assert_eq!(
            line.end, "server_reset",
            "session {i} ({n} bytes): {line:?}"
        );
        assert_eq!(line.server, b.addr().to_string(), "{line:?}");
        assert!(
            q.try_exit().is_none(),
            "quill died after a server reset:\n{}",
            q.stderr()
        );
    }
    // The same server, asked to behave, is used again (a reset is not a failed connect) and the
    // session is byte-exact.
    let mut s = connect_port(q.port);
    let data: Vec<u8> = b"HELLO-ECHO!\n"
        .iter()
        .copied()
        .chain(pattern_bytes(5, 300_000))
        .collect();
    let got = send_and_collect(&mut s, data.clone(), Duration::from_secs(20));
    assert_same_bytes(&got, &data, "healthy session after server resets");
    let line = wait_log_line(&q.log_path(), Duration::from_secs(5), |l| {
        l.bytes_in == data.len() as u64
    });
    assert_eq!(
        (line.bytes_out, line.end.as_str()),
        (data.len() as u64, "done"),
        "{line:?}"
    );
    assert!(q.try_exit().is_none(), "quill died:\n{}", q.stderr());
}

#[test]
fn server_instant_close_is_survived() {
    // Closes every connection at once until `healthy` is set, then echoes.
    let healthy = Arc::new(AtomicBool::new(false));
    let h2 = healthy.clone();
    let b = Backend::start(move |c| {
        if h2.load(Ordering::SeqCst) {
            echo_rest(c);
        } else {
            drop(c);
        }
    });
    let mut q = Quill::start(&["--workers", "2"], &[spec(b.addr())]);
    let before = q.log_lines().len();
    let accepted_before = b.accepted.load(Ordering::SeqCst);
    for i in 0..100 {
        let mut s = connect_port(q.port);
        let t = Instant::now();
        // The server's FIN is passed on: the client sees EOF (no bytes), well before the default
        // 60 s fin timeout, i.e. quill does not sit on a session whose server is gone.
        let (got, how) = wait_closed(&mut s, Duration::from_secs(3));
        assert!(got.is_empty(), "session {i}: unexpected bytes {got:?}");
        assert_eq!(
            how,
            Closed::Eof,
            "session {i}: server FIN must reach the client as EOF"
        );
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "session {i}: EOF took {:?}",
            t.elapsed()
        );
    }
    assert!(
        q.try_exit().is_none(),
        "quill died after 100 instant closes:\n{}",
        q.stderr()
    );
    assert_eq!(
        b.accepted.load(Ordering::SeqCst) - accepted_before,
        100,
        "every client was connected to the server"
    );
    // Each of those sessions ends cleanly once the client closes too.
    let lines = q.wait_log_lines(before + 100, Duration::from_secs(5));
    for l in &lines[before..] {
        assert_eq!(
            (l.bytes_in, l.bytes_out, l.end.as_str()),
            (0, 0, "done"),
            "{l:?}"
        );
        assert_eq!(l.server, b.addr().to_string(), "{l:?}");
    }
    // The server was not blacklisted for closing: a normal session works, byte for byte.
    healthy.store(true, Ordering::SeqCst);
    echo_session_exact(q.port, 11, 200_000);
    assert!(q.try_exit().is_none(), "quill died:\n{}", q.stderr());
}

/// 1 MiB of bytes that an L7 proxy might trip over: NULs, CR/LF, an HTTP head, a PROXY protocol
/// line, TLS record headers, then every byte value in a scrambled order.
fn garbage_mib() -> Vec<u8> {
    let mut d: Vec<u8> = Vec::with_capacity(1 << 20);
    d.extend_from_slice(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n");
    d.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc\r\n\r\n\0\0\0");
    d.extend_from_slice(&[0x16, 0x03, 0x01, 0xff, 0xff, 0x15, 0x03, 0x03, 0x00, 0x02]);
    d.extend((0..=255u8).rev());
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while d.len() < 1 << 20 {
        // xorshift64*
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        d.push((x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8);
    }
    d
}

#[test]
fn server_garbage_is_forwarded_untouched() {
    let data = Arc::new(garbage_mib());
    let mut seen = [false; 256];
    for &b in data.iter() {
        seen[b as usize] = true;
    }
    assert!(
        seen.iter().all(|&s| s),
        "the test data covers all 256 byte values"
    );
    let d2 = data.clone();
    let b = Backend::start(move |mut c| {
        let _ = c.write_all(&d2);
        // Plain close: the client sends nothing, so this is a FIN after the data.
    });
    let mut q = Quill::start(&["--workers", "2"], &[spec(b.addr())]);
    for round in 0..3 {
        let mut s = connect_port(q.port);
        let got = read_until_eof(&mut s, Duration::from_secs(20));
        assert_same_bytes(
            &got,
            &data,
            &format!("round {round}: 1 MiB of arbitrary bytes"),
        );
        drop(s);
        let line = wait_log_line(&q.log_path(), Duration::from_secs(5), |l| {
            l.bytes_out == data.len() as u64
        });
        assert_eq!((line.bytes_in, line.end.as_str()), (0, "done"), "{line:?}");
    }
    assert!(q.try_exit().is_none(), "quill died:\n{}", q.stderr());
}

/// Writes a config with two listeners (on `p1` and `p2`), each with one server.
fn two_listener_config(dir: &Path, p1: u16, p2: u16, s1: SocketAddr, s2: SocketAddr) -> String {
    let text = format!(
        "workers = 2\nlog = \"{log}\"\n\n[[listener]]\nname = \"stuck\"\nlisten = \"127.0.0.1:{p1}\"\nservers = [\"{s1}\"]\n\n[[listener]]\nname = \"ok\"\nlisten = \"127.0.0.1:{p2}\"\nservers = [\"{s2}\"]\n",
        log = dir.join("access.log").display()
    );
    let path = dir.join("quill.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn server_that_never_reads_does_not_block_other_sessions() {
    let hold = Holder::start(); // accepts and never reads
    let e = echo();
    let p2_shared = Mutex::new(0u16);
    // The readiness connection on the stuck listener is kept open (closed, it would sit
    // half-closed in front of the Holder, which never closes).
    let (mut q, _probe, _) = Quill::spawn_first(|dir, p1| {
        let p2 = free_port();
        *p2_shared.lock().unwrap() = p2;
        let cfg = two_listener_config(dir, p1, p2, hold.addr(), e.addr());
        vec!["--config".into(), cfg]
    });
    assert!(hold.wait_count(1, Duration::from_secs(5)), "probe session");
    let p2 = *p2_shared.lock().unwrap();
    let (probe, _) = q
        .wait_ready_tcp(SocketAddr::from(([127, 0, 0, 1], p2)))
        .unwrap_or_else(|e| panic!("{e}"));
    drop(probe);
    let held_before = hold.count();

    let rss_before = vm_rss_kib(q.pid);

    // The stuck session: the client pushes with nonblocking writes until the writes stop making
    // progress (the server never reads, so the socket buffers on the way fill up). The brief asked
    // for 8 MiB, but on loopback the kernel alone absorbs about 9-11 MiB here (client send buffer
    // up to tcp_wmem max 4 MiB, quill's autotuned receive buffer, quill's send buffer up to 4 MiB,
    // the server's receive buffer, one 256 KiB splice pipe), so we offer up to 64 MiB.
    let mut stuck = connect_port(q.port);
    assert!(
        hold.wait_count(held_before + 1, Duration::from_secs(5)),
        "the stuck session reached the server"
    );
    stuck.set_nonblocking(true).unwrap();
    let total = 64usize << 20;
    let chunk = pattern_bytes(0, 64 * 1024);
    let mut sent = 0usize;
    let mut last_progress = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(8);
    while sent < total && Instant::now() < deadline {
        let want = (total - sent).min(chunk.len());
        match stuck.write(&chunk[..want]) {
            Ok(n) => {
                sent += n;
                last_progress = Instant::now();
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if last_progress.elapsed() > Duration::from_millis(500) {
                    break;
                }
                thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("stuck client write failed after {sent} bytes: {e}"),
        }
    }
    eprintln!("stuck client wrote {sent} bytes before its writes blocked");
    assert!(
        sent < total,
        "64 MiB went into a server that never reads: somebody buffers without bound"
    );
    // Those bytes sit in kernel socket buffers, not in quill's heap.
    let growth = vm_rss_kib(q.pid).saturating_sub(rss_before);
    assert!(
        growth < 8 * 1024,
        "quill's VmRSS grew by {growth} KiB while holding a stuck session"
    );

    // While that session is stuck, other sessions through the same quill work, byte for byte,
    // concurrently (several of them, so both workers are exercised).
    let others: Vec<_> = (0..8u64)
        .map(|i| thread::spawn(move || echo_session_exact(p2, i, 256 * 1024 + i as usize)))
        .collect();
    for t in others {
        t.join().expect("a session next to the stuck one failed");
    }
    assert!(
        still_open(&mut stuck, Duration::from_millis(50)),
        "the stuck session is left alone (still open)"
    );

    // The stuck client gives up (reset, as a client that times out would do).
    socket2::SockRef::from(&stuck)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(stuck);
    // The client socket is dead (RST): the session must end and free its descriptors and its
    // pending data, although its server still does not read.
    let is_stuck = |l: &LogLine| l.server == hold.addr().to_string() && l.bytes_in > 0;
    let line = match wait_log(&q.log_path(), Duration::from_secs(5), |ls| {
        ls.iter().any(is_stuck)
    }) {
        Ok(ls) => ls.into_iter().find(is_stuck).unwrap(),
        Err(_) => panic!(
            "the stuck client reset its connection but quill kept the session (and its backend \
             connection with the unsent data) open for 5 s without logging it"
        ),
    };
    assert_eq!(line.end, "client_reset", "{line:?}");
    assert!(q.try_exit().is_none(), "quill died:\n{}", q.stderr());
    echo_session_exact(p2, 99, 1 << 20);
}

/// Streams an HTTP response body of `n` pattern bytes from `s` and checks it (bounded).
fn read_pattern_body(s: &mut TcpStream, n: usize, within: Duration) {
    let deadline = Instant::now() + within;
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert!(head.len() < 16 * 1024, "response head too long");
        assert_eq!(
            s.read(&mut b).expect("read response head"),
            1,
            "EOF in head"
        );
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains(&format!("Content-Length: {n}\r\n")), "{head}");
    let mut buf = vec![0u8; 256 * 1024];
    let mut off = 0usize;
    while off < n {
        assert!(
            Instant::now() < deadline,
            "body: only {off} of {n} bytes within {within:?}"
        );
        let k = s
            .read(&mut buf[..(n - off).min(256 * 1024)])
            .expect("read body");
        assert!(k > 0, "EOF after {off} of {n} body bytes");
        for (j, &byte) in buf[..k].iter().enumerate() {
            if byte != pattern((off + j) as u64) {
                panic!("body byte {} differs", off + j);
            }
        }
        off += k;
    }
}

#[test]
fn client_that_never_reads_does_not_grow_quill_memory() {
    let h = http("web");
    let mut q = Quill::start(&["--workers", "2"], &[spec(h.addr())]);
    // Warm up: one bulky response read in full, so pools and pipes exist before the baseline.
    for _ in 0..2 {
        let mut w = connect_port(q.port);
        write_all(&mut w, b"GET /bytes/2000000 HTTP/1.1\r\nHost: t\r\n\r\n");
        read_pattern_body(&mut w, 2_000_000, Duration::from_secs(10));
    }
    thread::sleep(Duration::from_millis(200));
    let rss_before = vm_rss_kib(q.pid);
    let served_before = h.served().bytes_out.load(Ordering::SeqCst);

    let n = 50_000_000usize;
    let mut s = connect_port(q.port);
    write_all(
        &mut s,
        format!("GET /bytes/{n} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes(),
    );
    // The client reads nothing for 2 s.
    thread::sleep(Duration::from_secs(2));
    let rss_stuck = vm_rss_kib(q.pid);
    let growth = rss_stuck.saturating_sub(rss_before);
    eprintln!("quill VmRSS {rss_before} KiB -> {rss_stuck} KiB while the client does not read");
    // The backend's write of the 50 MB body has not completed: backpressure reached it.
    assert_eq!(
        h.served().bytes_out.load(Ordering::SeqCst),
        served_before,
        "the 50 MB response was fully accepted from the backend although the client reads nothing"
    );
    // Quill holds at most a few socket/pipe buffers' worth, not the response.
    assert!(
        growth < 8 * 1024,
        "quill's VmRSS grew by {growth} KiB while a client did not read a 50 MB response"
    );
    assert!(q.try_exit().is_none(), "quill died:\n{}", q.stderr());
    // Once the client reads, it gets the whole response, byte for byte.
    read_pattern_body(&mut s, n, Duration::from_secs(30));
}
