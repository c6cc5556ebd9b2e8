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
    stream: Stream,
    /// The socket's readiness (for the TLS handshake).
    ready: crate::net::Ready,
    phase: Phase,
    /// The HTTP request to send, or None for a TCP check (connecting is the whole check).
    request: Option<Vec<u8>>,
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

impl Probe {
    /// Starts a probe of `addr` for `check`, registered under `token`.
    pub(super) fn start(
        addr: &BackendAddr,
        check: &HealthCheck,
        tls: Option<&crate::tls::client::ClientTls>,
        registry: &Registry,
        token: Token,
        now_ms: u64,
    ) -> Result<Probe, StartError> {
        let mut stream = open(addr).map_err(|e| {
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
        let (request, expect) = match &check.kind {
            CheckKind::Tcp => (None, (0, 0)),
            CheckKind::Http { path, expect } => {
                (Some(request(path, addr, check.host.as_deref())), *expect)
            }
        };
        Ok(Probe {
            stream,
            ready: crate::net::Ready::default(),
            phase: Phase::Connecting,
            request,
            expect,
            started_ms: now_ms,
            deadline_ms: now_ms.saturating_add(crate::clock::millis(check.timeout).max(1)),
        })
    }

    /// Makes what progress the socket allows after `event`. None = not finished yet.
    pub(super) fn advance(&mut self, event: &Event) -> Option<Outcome> {
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
            self.phase = Phase::Handshaking;
        }
        if let Phase::Handshaking = self.phase {
            if let Stream::Tls(tls) = &self.stream {
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
                match self.stream.write(&request[*sent..]) {
                    Ok(n) => *sent += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Some(Outcome::Fail(format!("cannot send request: {e}"))),
                }
            }
            self.phase = Phase::Reading {
                answer: Vec::with_capacity(256),
            };
        }
        match &mut self.phase {
            Phase::Reading { answer } => read_status(&self.stream, answer, self.expect),
            _ => None,
        }
    }

    /// Why the probe failed when its deadline passed.
    pub(super) fn timeout_reason(&self, timeout_ms: u64) -> String {
        match self.phase {
            Phase::Connecting => format!("connect timed out after {timeout_ms}ms"),
            Phase::Handshaking => format!("TLS handshake timed out after {timeout_ms}ms"),
            _ => format!("no status line within {timeout_ms}ms"),
        }
    }

    /// Whether the connect has completed: Err with its error if it failed.
    fn connected(&self) -> io::Result<bool> {
        if let Some(e) = self.stream.take_error()? {
            return Err(e);
        }
        match &self.stream {
            Stream::Tcp(s) => match s.peer_addr() {
                Ok(_) => Ok(true),
                Err(e) if e.kind() == ErrorKind::NotConnected => Ok(false),
                Err(e) => Err(e),
            },
            // A Unix connect completes (or fails) inside connect() itself.
            Stream::Unix(_) => Ok(true),
            // A TLS stream is made over a connected socket.
            Stream::Tls(_) => Ok(true),
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

/// Opens a nonblocking connection (in progress for TCP; done or failed for Unix sockets).
fn open(addr: &BackendAddr) -> io::Result<Stream> {
    match addr {
        BackendAddr::Tcp(a) => TcpStream::connect(*a).map(Stream::Tcp),
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

#[cfg(test)]
mod tests {
    use super::*;

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
