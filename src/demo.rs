//! Built-in backends: the HTTP demo servers behind `quill demo`, and the echo and HTTP servers the
//! integration tests start in-process. One home for test backends, so the demo and the tests exercise
//! the same code.
//!
//! These are deliberately simple (a thread per connection, blocking I/O): they serve demos and tests,
//! never benchmarks, which use nginx.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use quill_core::http1::{self, Body, Framing, Limits, Method, RequestHead, Version};

/// The HTTP demo backend's request heads: 431 past 16 KiB; a request without `Host` is answered.
const LIMITS: Limits = Limits {
    max_head: 16 * 1024,
    max_request_line: 16 * 1024,
    max_headers: 100,
    require_host: false,
};

/// The listen backlog of [`DemoServer::start`]: Quill's own default (`-q`), so a burst of
/// connects (`quill bench --idle 1000`) does not overflow the queue into 1-second SYN retries.
pub const BACKLOG: u32 = 1024;

/// What a demo server does with each connection.
#[derive(Clone, Debug)]
pub enum Behaviour {
    /// HTTP/1.1 with keep-alive. `GET /` and `GET /api/...` answer `NAME\n`; `GET /headers`
    /// lists the request's header fields; `GET /bytes/N` answers N bytes of a repeating pattern
    /// (see [`pattern`]); anything else answers 404.
    Http { name: String },
    /// Echo every byte back; on EOF from the client, finish echoing, then shut down the write side.
    Echo,
    /// Send `NAME\n` at once, then echo like [`Behaviour::Echo`] (shows which backend answered).
    Greet { name: String },
}

/// Counters a demo server keeps about what it served, for tests to compare against.
#[derive(Debug, Default)]
pub struct Served {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// HTTP requests answered (HTTP behaviour only).
    pub requests: AtomicU64,
    /// Bytes read from clients.
    pub bytes_in: AtomicU64,
    /// Bytes written to clients.
    pub bytes_out: AtomicU64,
}

/// A running demo server. Dropping it stops accepting; connections already open finish on their own.
pub struct DemoServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    served: Arc<Served>,
}

impl DemoServer {
    /// Binds `addr` (port 0 picks a free port) and serves `behaviour` on a background thread.
    pub fn start(addr: &str, behaviour: Behaviour) -> io::Result<DemoServer> {
        DemoServer::start_with_backlog(addr, behaviour, BACKLOG)
    }

    /// As [`DemoServer::start`], listening with `backlog` (the kernel caps it at somaxconn).
    pub fn start_with_backlog(
        addr: &str,
        behaviour: Behaviour,
        backlog: u32,
    ) -> io::Result<DemoServer> {
        let listener = bind(addr, backlog)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(Served::default());
        let (stop2, served2) = (stop.clone(), served.clone());
        thread::Builder::new()
            .name(format!("demo-{addr}"))
            .spawn(move || accept_loop(listener, behaviour, stop2, served2))?;
        Ok(DemoServer { addr, stop, served })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the server has served so far.
    pub fn served(&self) -> &Served {
        &self.served
    }
}

impl Drop for DemoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept so the thread sees the flag and exits.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

/// A blocking listener on `addr` with `backlog` (std's `TcpListener::bind` always asks for 128).
fn bind(addr: &str, backlog: u32) -> io::Result<TcpListener> {
    use std::net::ToSocketAddrs;
    let addr = addr
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address to bind"))?;
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    Ok(socket.into())
}

/// The byte at offset `i` of the `/bytes/N` body: a pattern that makes reordering or loss visible.
pub fn pattern(i: u64) -> u8 {
    b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[(i % 62) as usize]
}

fn accept_loop(
    listener: TcpListener,
    behaviour: Behaviour,
    stop: Arc<AtomicBool>,
    served: Arc<Served>,
) {
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(conn) = conn else {
            thread::sleep(Duration::from_millis(10));
            continue;
        };
        served.connections.fetch_add(1, Ordering::Relaxed);
        let (behaviour, served) = (behaviour.clone(), served.clone());
        let spawned = thread::Builder::new().stack_size(64 * 1024).spawn(move || {
            let _ = serve(conn, &behaviour, &served);
        });
        if spawned.is_err() {
            thread::sleep(Duration::from_millis(10));
        }
    }
}

fn serve(mut conn: TcpStream, behaviour: &Behaviour, served: &Served) -> io::Result<()> {
    let _ = conn.set_nodelay(true);
    match behaviour {
        Behaviour::Http { name } => serve_http(conn, name, served),
        Behaviour::Echo => echo(conn, served),
        Behaviour::Greet { name } => {
            let greeting = format!("{name}\n");
            conn.write_all(greeting.as_bytes())?;
            served
                .bytes_out
                .fetch_add(greeting.len() as u64, Ordering::Relaxed);
            echo(conn, served)
        }
    }
}

fn echo(mut conn: TcpStream, served: &Served) -> io::Result<()> {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            conn.shutdown(Shutdown::Write)?;
            return Ok(());
        }
        served.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
        conn.write_all(&buf[..n])?;
        served.bytes_out.fetch_add(n as u64, Ordering::Relaxed);
    }
}

fn serve_http(mut conn: TcpStream, name: &str, served: &Served) -> io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 4096];
    // The body of the request last answered, skipped (the demo reads no bodies).
    let mut body = Body::new(Framing::None);
    loop {
        // Serve every complete request already buffered (pipelining), then read more.
        loop {
            if !body.is_done() {
                let Ok(fed) = body.feed(&head) else {
                    return Ok(());
                };
                head.drain(..fed.used);
                if !fed.done {
                    break;
                }
            }
            let request = match http1::parse_request(&head, &LIMITS) {
                Ok(Some(request)) => request,
                Ok(None) => break,
                Err(e) => {
                    let status = e.request_status();
                    let reply = http1::canned(status).map_or(&b""[..], |c| c.bytes);
                    conn.write_all(reply)?;
                    return Ok(());
                }
            };
            let keep_alive = answer(&mut conn, &head, &request, name, served)?;
            head.drain(..request.len);
            body = Body::new(request.framing);
            if !keep_alive {
                conn.shutdown(Shutdown::Write)?;
                return drain_until_eof(conn);
            }
        }
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        served.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
        head.extend_from_slice(&buf[..n]);
    }
}

fn drain_until_eof(mut conn: TcpStream) -> io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut buf = [0u8; 4096];
    while conn.read(&mut buf)? > 0 {}
    Ok(())
}

/// Writes the response to one request head; returns whether the connection stays open.
fn answer(
    conn: &mut TcpStream,
    buf: &[u8],
    request: &RequestHead,
    name: &str,
    served: &Served,
) -> io::Result<bool> {
    served.requests.fetch_add(1, Ordering::Relaxed);
    let method = request.method;
    let path = std::str::from_utf8(request.target.of(buf)).unwrap_or("");
    let keep_alive = request.version == Version::Http11 && !request.connection.close;
    let (status, body): (&str, Vec<u8>) = if method != Method::Get && method != Method::Head {
        ("405 Method Not Allowed", b"method not allowed\n".to_vec())
    } else if path == "/" || path.starts_with("/api/") {
        ("200 OK", format!("{name}\n").into_bytes())
    } else if path == "/headers" {
        // What reached the backend: shows what a proxy in front added (X-Forwarded-For, ...).
        let mut text = format!("{name} received:\n");
        for f in http1::fields(buf, request.len) {
            text.push_str(&String::from_utf8_lossy(f.line.of(buf)));
        }
        ("200 OK", text.replace('\r', "").into_bytes())
    } else if let Some(n) = path
        .strip_prefix("/bytes/")
        .and_then(|n| n.parse::<u64>().ok())
    {
        ("200 OK", (0..n.min(64 << 20)).map(pattern).collect())
    } else {
        ("404 Not Found", b"not found\n".to_vec())
    };
    let connection = if keep_alive { "keep-alive" } else { "close" };
    let head = format!(
        "HTTP/1.1 {status}\r\nServer: quill-demo\r\nX-Backend: {name}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: {connection}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    let mut written = head.len();
    if method != Method::Head {
        conn.write_all(&body)?;
        written += body.len();
    }
    served
        .bytes_out
        .fetch_add(written as u64, Ordering::Relaxed);
    Ok(keep_alive)
}
