//! One probe: a nonblocking connect to a server (and the TLS handshake with it, for a pool with
//! `server_tls`: a TCP check then passes once the handshake does) and, for HTTP checks, one
//! request and the status line of the answer. Driven by readiness events; never blocks, reads at most [`MAX_ANSWER`]
//! bytes, and owns exactly one socket, closed when the probe is dropped.

use std::io::{self, ErrorKind};

use mio::event::Event;
use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};

use quill_core::http1;

use super::verdict::{quote, Outcome};
use crate::addr::BackendAddr;
use crate::config::{CheckKind, HealthCheck};
use crate::net::Stream;

/// Most bytes of an answer read while looking for the status line.
pub(super) const MAX_ANSWER: usize = 4096;

/// Where a probe is.
#[derive(Debug)]
enum Phase {
    Connecting,
    /// TLS to the server: connected, handshake under way.
    Handshaking,
    /// Sending the request; `sent` bytes are out.
    Sending {
        sent: usize,
    },
    /// Waiting for the status line; the answer so far.
    Reading {
        answer: Vec<u8>,
    },
}

/// A probe in flight.
#[derive(Debug)]
pub(super) struct Probe {
    /// The connection of a TCP or HTTP check; None for a UDP check.
    stream: Option<Stream>,
    /// A UDP check: its socket, connected to the server, and the text the answer must hold.
    udp: Option<(mio::net::UdpSocket, Vec<u8>)>,
    /// The socket's readiness (for the TLS handshake).
    ready: crate::net::Ready,
    phase: Phase,
    /// What to send once connected: the PROXY header (`proxy_protocol`) and the HTTP request;
    /// None for a TCP check without a header (connecting is the whole check).
    request: Option<Vec<u8>>,
    /// With `server_tls`: the PROXY header, written on the bare socket once connected, before
    /// the TLS handshake (without TLS it leads `request` instead).
    preface: Option<quill_core::proxy_header::Encoded>,
    /// An HTTP check: the answer's status decides (else sending is the end of it).
    answer: bool,
    /// Statuses that pass an HTTP check.
    expect: (u16, u16),
    /// Clock ms when the probe started, and when it fails if still unfinished.
    pub started_ms: u64,
    pub deadline_ms: u64,
}

/// Why no probe could be started.
pub(super) enum StartError {
    /// The server refused at once (a Unix socket with nobody listening, an unreachable network).
    Server(Outcome),
    /// We are out of descriptors, ports or memory: says nothing about the server.
    Local(io::Error),
}

/// How a pool's probes leave: from its `source` address, with its `proxy_protocol` header first.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Leave {
    pub source: Option<std::net::IpAddr>,
    pub proxy: Option<crate::config::ProxyVersion>,
}

impl Leave {
    pub(super) fn of(t: &crate::config::Tuning) -> Leave {
        Leave {
            source: t.source,
            proxy: t.proxy_protocol,
        }
    }
}

impl Probe {
    /// Starts a probe of `addr` for `check`, registered under `token`.
    pub(super) fn start(
        addr: &BackendAddr,
        check: &HealthCheck,
        tls: Option<&crate::tls::client::ClientTls>,
        how: Leave,
        registry: &Registry,
        token: Token,
        now_ms: u64,
    ) -> Result<Probe, StartError> {
        let Leave { source, proxy } = how;
        if let CheckKind::Udp { send, expect } = &check.kind {
            let udp = open_udp(addr, source, proxy, send.as_bytes(), registry, token)?;
            return Ok(Probe {
                stream: None,
                udp: Some((udp, expect.as_bytes().to_vec())),
                ready: crate::net::Ready::default(),
                phase: Phase::Reading { answer: Vec::new() },
                request: None,
                preface: None,
                answer: true,
                expect: (0, 0),
                started_ms: now_ms,
                deadline_ms: now_ms.saturating_add(crate::clock::millis(check.timeout).max(1)),
            });
        }
        let mut stream = open(addr, source).map_err(|e| {
            if crate::net::is_local_error(&e) {
                StartError::Local(e)
            } else {
                StartError::Server(Outcome::Fail(connect_reason(&e)))
            }
        })?;
        if let Some(tls) = tls {
            let ip = match addr {
                BackendAddr::Tcp(a) => Some(a.ip()),
                _ => None,
            };
            let conn = tls
                .connect(ip)
                .map_err(|e| StartError::Server(Outcome::Fail(e.to_string())))?;
            stream = Stream::Tls(Box::new(crate::net::tls::TlsStream::client(stream, conn)));
        }
        registry
            .register(
                stream.source(),
                token,
                Interest::READABLE | Interest::WRITABLE,
            )
            .map_err(StartError::Local)?;
        let (mut request, expect) = match &check.kind {
            CheckKind::Tcp | CheckKind::Udp { .. } => (None, (0, 0)),
            CheckKind::Http { path, expect } => {
                (Some(request(path, addr, check.host.as_deref())), *expect)
            }
        };
        let answer = request.is_some();
        let mut preface = None;
        if let Some(version) = proxy {
            // A connection of Quill's own: v1 UNKNOWN or v2 LOCAL, so the server keeps the
            // probe's real addresses. Over TLS it goes before the handshake.
            let header = quill_core::proxy_header::encode_unknown(version);
            if tls.is_some() {
                preface = Some(header);
            } else {
                let mut bytes = header.as_bytes().to_vec();
                bytes.extend_from_slice(request.as_deref().unwrap_or_default());
                request = Some(bytes);
            }
        }
        Ok(Probe {
            stream: Some(stream),
            udp: None,
            ready: crate::net::Ready::default(),
            phase: Phase::Connecting,
            request,
            preface,
            answer,
            expect,
            started_ms: now_ms,
            deadline_ms: now_ms.saturating_add(crate::clock::millis(check.timeout).max(1)),
        })
    }

    /// Makes what progress the socket allows after `event`. None = not finished yet.
    pub(super) fn advance(&mut self, event: &Event) -> Option<Outcome> {
        if let Some((socket, expect)) = &self.udp {
            return udp_answer(socket, expect);
        }
        let Some(stream) = &self.stream else {
            return Some(Outcome::Fail("no connection".into()));
        };
        self.ready.update(event);
        if let Phase::Connecting = self.phase {
            if !(event.is_writable() || event.is_error() || event.is_write_closed()) {
                return None;
            }
            match self.connected() {
                Ok(false) => return None,
                Ok(true) => {}
                Err(e) => return Some(Outcome::Fail(connect_reason(&e))),
            }
            if let (Some(header), Stream::Tls(tls)) = (self.preface.take(), stream) {
                // Just connected: the send buffer is empty and takes the header whole.
                let bytes = header.as_bytes();
                // MSG_MORE: it leaves with the ClientHello, in one segment.
                match tls.sock().write_last(bytes) {
                    Ok(n) if n == bytes.len() => {}
                    Ok(n) => {
                        return Some(Outcome::Fail(format!(
                            "PROXY header: {n} of {} bytes written",
                            bytes.len()
                        )))
                    }
                    Err(e) => return Some(Outcome::Fail(format!("PROXY header: {e}"))),
                }
            }
            self.phase = Phase::Handshaking;
        }
        if let Phase::Handshaking = self.phase {
            if let Stream::Tls(tls) = stream {
                use crate::net::tls::{Handshake, HandshakeError};
                match tls.handshake(&mut self.ready) {
                    Ok(Handshake::Pending) => return None,
                    Ok(Handshake::Done) => {}
                    Err(HandshakeError::Tls(e)) => {
                        return Some(Outcome::Fail(format!("TLS handshake failed: {e}")))
                    }
                    Err(HandshakeError::Closed) => {
                        return Some(Outcome::Fail("TLS handshake: closed by the server".into()))
                    }
                    Err(HandshakeError::Io(e)) => {
                        return Some(Outcome::Fail(format!("TLS handshake: {e}")))
                    }
                }
            }
            if self.request.is_none() {
                return Some(Outcome::Pass);
            }
            self.phase = Phase::Sending { sent: 0 };
        }
        if let Phase::Sending { sent } = &mut self.phase {
            let request = self.request.as_deref().unwrap_or_default();
            while *sent < request.len() {
                match stream.write(&request[*sent..]) {
                    Ok(n) => *sent += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Some(Outcome::Fail(format!("cannot send request: {e}"))),
                }
            }
            if !self.answer {
                return Some(Outcome::Pass);
            }
            self.phase = Phase::Reading {
                answer: Vec::with_capacity(256),
            };
        }
        match &mut self.phase {
            Phase::Reading { answer } => read_status(stream, answer, self.expect),
            _ => None,
        }
    }

    /// Why the probe failed when its deadline passed.
    pub(super) fn timeout_reason(&self, timeout_ms: u64) -> String {
        if self.udp.is_some() {
            return format!("no answer within {timeout_ms}ms");
        }
        match self.phase {
            Phase::Connecting => format!("connect timed out after {timeout_ms}ms"),
            Phase::Handshaking => format!("TLS handshake timed out after {timeout_ms}ms"),
            _ => format!("no status line within {timeout_ms}ms"),
        }
    }

    /// Whether the connect has completed: Err with its error if it failed.
    fn connected(&self) -> io::Result<bool> {
        let Some(stream) = &self.stream else {
            return Ok(false);
        };
        if let Some(e) = stream.take_error()? {
            return Err(e);
        }
        match stream {
            Stream::Tcp(s) => match s.peer_addr() {
                Ok(_) => Ok(true),
                Err(e) if e.kind() == ErrorKind::NotConnected => Ok(false),
                Err(e) => Err(e),
            },
            // A Unix connect completes (or fails) inside connect() itself.
            Stream::Unix(_) => Ok(true),
            // A TLS stream is made over a connected socket (a probe makes no FastCGI stream
            // and no HTTP/2 stream).
            Stream::Tls(_) | Stream::Fcgi(_) | Stream::H2(_) => Ok(true),
        }
    }
}

/// Reads what has arrived (to EAGAIN, at most [`MAX_ANSWER`] bytes in all) and judges the status
/// line once there is one.
fn read_status(stream: &Stream, answer: &mut Vec<u8>, expect: (u16, u16)) -> Option<Outcome> {
    let mut chunk = [0u8; 1024];
    loop {
        let room = (MAX_ANSWER - answer.len()).min(chunk.len());
        let eof = match stream.read(&mut chunk[..room]) {
            Ok(0) => true,
            Ok(n) => {
                answer.extend_from_slice(&chunk[..n]);
                false
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Some(Outcome::Fail(answer_reason(&e))),
        };
        match http1::status_code(answer, eof) {
            Ok(Some(code)) if (expect.0..=expect.1).contains(&code) => return Some(Outcome::Pass),
            Ok(Some(code)) => {
                return Some(Outcome::Fail(format!(
                    "status {code} (expected {}-{})",
                    expect.0, expect.1
                )))
            }
            Err(_) if answer.is_empty() => {
                return Some(Outcome::Fail("closed before a status line".into()))
            }
            Err(_) => {
                return Some(Outcome::Fail(format!(
                    "invalid status line \"{}\"",
                    quote(answer)
                )))
            }
            Ok(None) if answer.len() >= MAX_ANSWER => {
                return Some(Outcome::Fail(format!(
                    "no status line in the first {MAX_ANSWER} bytes"
                )))
            }
            Ok(None) if eof => return Some(Outcome::Fail("closed before a status line".into())),
            Ok(None) => {}
        }
    }
}

/// The request of an HTTP check: HTTP/1.0 and `Connection: close`, so the server answers once
/// and closes.
fn request(path: &str, addr: &BackendAddr, host: Option<&str>) -> Vec<u8> {
    let host = match (host, addr) {
        (Some(h), _) => h.to_string(),
        (None, addr) => match addr {
            BackendAddr::Tcp(a) => a.to_string(),
            BackendAddr::Unix(_) | BackendAddr::Abstract(_) => "localhost".to_string(),
            BackendAddr::Name { host, port } => format!("{host}:{port}"),
        },
    };
    format!(
        "GET {path} HTTP/1.0\r\nHost: {host}\r\nUser-Agent: quill-health\r\nConnection: close\r\n\r\n"
    )
    .into_bytes()
}

/// Opens a nonblocking connection (in progress for TCP; done or failed for Unix sockets), from
/// `source` when the pool pins one.
fn open(addr: &BackendAddr, source: Option<std::net::IpAddr>) -> io::Result<Stream> {
    match addr {
        BackendAddr::Tcp(a) => match source {
            Some(ip) => {
                crate::net::connect_tcp(*a, &crate::config::Tuning::default(), Some((ip, false)))
            }
            None => TcpStream::connect(*a).map(Stream::Tcp),
        },
        BackendAddr::Unix(p) => UnixStream::connect(p).map(Stream::Unix),
        BackendAddr::Abstract(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            UnixStream::connect_addr(&addr).map(Stream::Unix)
        }
        // Never watched (see `Checker::refresh`): resolving here would block the checker.
        BackendAddr::Name { .. } => Err(io::Error::new(
            ErrorKind::Unsupported,
            "server names are not checked",
        )),
    }
}

/// A failed connect in words: "connect refused", "connect failed: ...".
fn connect_reason(e: &io::Error) -> String {
    match e.kind() {
        ErrorKind::ConnectionRefused => "connect refused".into(),
        ErrorKind::NotFound => "connect failed: no such socket".into(),
        ErrorKind::WouldBlock => "connect failed: socket backlog full".into(),
        _ => format!("connect failed: {e}"),
    }
}

/// A failed read of the answer in words.
fn answer_reason(e: &io::Error) -> String {
    match e.kind() {
        ErrorKind::ConnectionReset => "connection reset before a status line".into(),
        _ => format!("cannot read the answer: {e}"),
    }
}

/// Opens a UDP socket connected to the server, registers it and sends the check's datagram.
fn open_udp(
    addr: &BackendAddr,
    source: Option<std::net::IpAddr>,
    proxy: Option<crate::config::ProxyVersion>,
    send: &[u8],
    registry: &Registry,
    token: Token,
) -> Result<mio::net::UdpSocket, StartError> {
    let BackendAddr::Tcp(addr) = addr else {
        return Err(StartError::Server(Outcome::Fail(
            "a UDP check needs an IP address and port".into(),
        )));
    };
    // From the pool's `source` when it has one, as its flows leave.
    let socket = crate::net::socket_from(*addr, socket2::Type::DGRAM, source.map(|ip| (ip, false)))
        .map_err(StartError::Local)?;
    let mut socket = mio::net::UdpSocket::from_std(socket.into());
    socket.connect(*addr).map_err(|e| {
        if crate::net::is_local_error(&e) {
            StartError::Local(e)
        } else {
            StartError::Server(Outcome::Fail(format!("connect failed: {e}")))
        }
    })?;
    registry
        .register(&mut socket, token, Interest::READABLE)
        .map_err(StartError::Local)?;
    // A pool with `proxy_protocol` (v2 on UDP) gets the check with a LOCAL header in front, as
    // its flows' datagrams carry one: the server keeps the probe's real addresses.
    let mut with_header = Vec::new();
    let send = match proxy {
        Some(_) => {
            with_header.extend_from_slice(quill_core::proxy_header::encode_local().as_bytes());
            with_header.extend_from_slice(send);
            &with_header[..]
        }
        None => send,
    };
    match socket.send(send) {
        Ok(_) => Ok(socket),
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => Err(StartError::Server(
            Outcome::Fail("port unreachable (ICMP)".into()),
        )),
        Err(e) if crate::net::is_local_error(&e) => Err(StartError::Local(e)),
        Err(e) => Err(StartError::Server(Outcome::Fail(format!(
            "cannot send the check datagram: {e}"
        )))),
    }
}

/// Reads the answers to a UDP check (to EAGAIN): passes on one holding `expect` (any answer when
/// empty). An ICMP port unreachable (the socket's pending error) does not fail it: anyone who
/// knows the server's address can forge one (E6, docs/design.md#udp-cannot-loop-or-starve), so only
/// an answer decides, and a server that gives none fails the check at its timeout.
fn udp_answer(socket: &mio::net::UdpSocket, expect: &[u8]) -> Option<Outcome> {
    let mut buf = [0u8; 2048];
    loop {
        match socket.recv(&mut buf) {
            Ok(n) => {
                let answer = &buf[..n];
                if expect.is_empty() || answer.windows(expect.len()).any(|w| w == expect) {
                    return Some(Outcome::Pass);
                }
                return Some(Outcome::Fail(format!(
                    "answer \"{}\" does not contain \"{}\"",
                    quote(answer),
                    quote(expect)
                )));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            // Reading the error clears it: the next read looks for an answer again.
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => continue,
            Err(e) => return Some(Outcome::Fail(format!("cannot read the answer: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port unreachable (here the kernel's own, as a forged one would be) leaves the check
    /// waiting for an answer; the answer that comes after it decides.
    #[test]
    fn icmp_port_unreachable_alone_does_not_fail_a_udp_check() {
        let closed = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let dead = closed.local_addr().unwrap();
        drop(closed);
        let std_socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        std_socket.connect(dead).unwrap();
        std_socket.set_nonblocking(true).unwrap();
        let socket = mio::net::UdpSocket::from_std(std_socket);
        socket.send(b"PING").unwrap();
        // Wait (bounded) until the kernel's ICMP error has been queued on the socket.
        let mut refused = false;
        for _ in 0..100 {
            let mut probe = [0u8; 1];
            match socket.peek(&mut probe) {
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                    refused = true;
                    break;
                }
                _ => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        }
        // peek took the error; make one more for udp_answer to meet.
        assert!(refused, "the kernel answered with port unreachable");
        socket.send(b"PING").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(udp_answer(&socket, b"PONG"), None);
    }

    #[test]
    fn http_request_names_the_server_and_closes() {
        let a: BackendAddr = BackendAddr::Tcp("[::1]:8080".parse().unwrap());
        assert_eq!(
            String::from_utf8(request("/health?x=1", &a, None)).unwrap(),
            "GET /health?x=1 HTTP/1.0\r\nHost: [::1]:8080\r\nUser-Agent: quill-health\r\nConnection: close\r\n\r\n"
        );
        let u = BackendAddr::Unix("/run/app.sock".into());
        assert!(String::from_utf8(request("/", &u, None))
            .unwrap()
            .contains("\r\nHost: localhost\r\n"));
    }

    #[test]
    fn http_check_sends_the_configured_host() {
        let a: BackendAddr = BackendAddr::Tcp("127.0.0.1:8080".parse().unwrap());
        let text = String::from_utf8(request("/", &a, Some("app.example.com"))).unwrap();
        assert!(text.contains("\r\nHost: app.example.com\r\n"), "{text}");
    }
}
