//! Socket primitives under every session and probe: a connected stream ([`Stream`]), what the
//! event loop knows of its readiness ([`Ready`]), the client's address ([`ClientAddr`]), and
//! nonblocking connects to a server ([`connect`], [`connect_tcp`]), and TLS over a socket
//! ([`tls::TlsStream`]).

pub(crate) mod fastcgi;
pub(crate) mod h2pipe;
pub(crate) mod tls;

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd};

use mio::event::{Event, Source};
use mio::net::{TcpStream, UnixStream};
use socket2::SockRef;

use crate::addr::BackendAddr;
use crate::config::Tuning;

/// A connected socket: TCP or Unix stream, or TLS over one of them.
#[derive(Debug)]
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// Boxed: a TLS connection is large and most streams are plain.
    Tls(Box<tls::TlsStream>),
    /// A FastCGI server's connection, read and written as HTTP/1.1 ([`fastcgi::FcgiStream`]).
    Fcgi(Box<fastcgi::FcgiStream>),
    /// One HTTP/2 stream of a client connection, read and written as HTTP/1.1
    /// ([`h2pipe::H2Stream`], a pointer): no socket of its own.
    H2(h2pipe::H2Stream),
}

impl Stream {
    pub(crate) fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).read(buf),
            Stream::Unix(s) => (&*s).read(buf),
            Stream::Tls(t) => t.read(buf),
            Stream::Fcgi(f) => f.read(buf),
            Stream::H2(h) => h.read(buf),
        }
    }

    pub(crate) fn write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).write(buf),
            Stream::Unix(s) => (&*s).write(buf),
            Stream::Tls(t) => t.write(buf),
            Stream::Fcgi(f) => f.write(buf),
            Stream::H2(h) => h.write(buf),
        }
    }

    /// Writes several slices in one call (`writev`).
    pub(crate) fn write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).write_vectored(bufs),
            Stream::Unix(s) => (&*s).write_vectored(bufs),
            Stream::Tls(t) => t.write_vectored(bufs),
            Stream::Fcgi(f) => f.write_vectored(bufs),
            Stream::H2(h) => h.write_vectored(bufs),
        }
    }

    /// Whether bytes may move by `splice(2)`: not through TLS, whose socket carries records.
    pub(crate) fn can_splice(&self) -> bool {
        !matches!(self, Stream::Tls(_) | Stream::Fcgi(_) | Stream::H2(_))
    }

    /// Whether the client's connection is TLS (the scheme of its requests is `https`).
    pub(crate) fn is_tls(&self) -> bool {
        match self {
            Stream::Tls(_) => true,
            Stream::H2(h) => h.tls(),
            _ => false,
        }
    }

    /// The TLS server name the client asked for.
    pub(crate) fn server_name(&self) -> Option<&str> {
        match self {
            Stream::Tls(t) => t.server_name(),
            Stream::H2(h) => h.sni(),
            _ => None,
        }
    }

    /// An HTTP/2 stream (no socket of its own: not registered with the poll).
    pub(crate) fn h2(&self) -> Option<&h2pipe::H2Stream> {
        match self {
            Stream::H2(h) => Some(h),
            _ => None,
        }
    }

    /// Whether the stream holds bytes it took but the socket did not (TLS records); a plain
    /// socket never does.
    pub(crate) fn has_backlog(&self) -> bool {
        match self {
            Stream::Tls(t) => t.has_backlog(),
            Stream::Fcgi(f) => f.has_backlog(),
            _ => false,
        }
    }

    /// Sends the backlog if the socket is writable: Ok(true) when none is left. A full socket
    /// clears `ready.writable`. No syscall on a plain socket.
    #[inline]
    pub(crate) fn flush_backlog(&self, ready: &mut Ready) -> io::Result<bool> {
        match self {
            Stream::Tls(t) if t.has_backlog() => {
                if !ready.writable {
                    return Ok(false);
                }
                let done = t.flush_backlog()?;
                if !done {
                    ready.writable = false;
                }
                Ok(done)
            }
            Stream::Fcgi(f) => f.flush_backlog(ready),
            _ => Ok(true),
        }
    }

    /// Sends the backlog now (the caller knows the socket is writable): Ok(true) when none is
    /// left. No syscall on a plain socket.
    pub(crate) fn send_backlog(&self) -> io::Result<bool> {
        match self {
            Stream::Tls(t) => t.flush_backlog(),
            Stream::Fcgi(f) => f.send_backlog(),
            _ => Ok(true),
        }
    }

    /// Whether the peer's data has ended where the socket cannot say so (TLS close_notify): a
    /// short read is then followed by EOF, not by an edge.
    pub(crate) fn ended(&self) -> bool {
        match self {
            Stream::Tls(t) => t.ended(),
            Stream::Fcgi(f) => f.ended(),
            Stream::H2(h) => h.ended(),
            _ => false,
        }
    }

    /// The TLS connection, when this is one.
    pub(crate) fn tls(&self) -> Option<&tls::TlsStream> {
        match self {
            Stream::Tls(t) => Some(t),
            _ => None,
        }
    }

    /// Writes the last bytes before an EOF: with MSG_MORE the kernel holds a short tail so that the
    /// shutdown() or close() that follows sends it and the FIN in one segment (one packet and one
    /// ACK fewer per session). Unix sockets ignore the flag.
    pub(crate) fn write_last(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => SockRef::from(s).send_with_flags(buf, libc::MSG_MORE),
            Stream::Unix(s) => (&*s).write(buf),
            Stream::Tls(t) => t.write(buf),
            Stream::Fcgi(f) => f.write(buf),
            Stream::H2(h) => h.write(buf),
        }
    }

    /// Sends EOF to the peer (half-close); the other direction stays open. TLS: close_notify,
    /// then the FIN; `WouldBlock` while records still wait for the socket (the FIN follows them:
    /// see [`Stream::flush_backlog`]).
    pub(crate) fn shutdown_write(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Write),
            Stream::Unix(s) => s.shutdown(Shutdown::Write),
            Stream::Tls(t) => t.shutdown_write(),
            Stream::Fcgi(f) => f.sock().shutdown_write(),
            Stream::H2(h) => h.shutdown_write(),
        }
    }

    /// The stream of an HTTP/2 connection (see [`h2pipe`]).
    pub(crate) fn is_h2(&self) -> bool {
        matches!(self, Stream::H2(_))
    }

    /// An HTTP/2 stream's next bytes are the response head `written` describes, a header block:
    /// the connection's session sends it as it is (other streams have no use for it).
    pub(crate) fn note_head(&self, written: quill_core::h2::Written) {
        if let Stream::H2(h) = self {
            h.note_head(written);
        }
    }

    /// Makes the coming close() abortive (SO_LINGER 0: an RST, unsent bytes dropped), so the peer
    /// sees the stream cut as a reset rather than a clean end. Unix sockets have no reset: they
    /// close as usual.
    pub(crate) fn reset_on_close(&self) {
        if let Stream::Tls(t) = self {
            return t.sock().reset_on_close();
        }
        if let Stream::Fcgi(f) = self {
            return f.sock().reset_on_close();
        }
        if let Stream::H2(h) = self {
            return h.reset_on_close();
        }
        if let Stream::Tcp(s) = self {
            // Best effort: if it fails the peer gets a FIN, as before.
            let _ = SockRef::from(s).set_linger(Some(std::time::Duration::ZERO));
        }
    }

    pub(crate) fn take_error(&self) -> io::Result<Option<io::Error>> {
        match self {
            Stream::Tcp(s) => s.take_error(),
            Stream::Unix(s) => s.take_error(),
            Stream::Tls(t) => t.sock().take_error(),
            Stream::Fcgi(f) => f.sock().take_error(),
            Stream::H2(_) => Ok(None),
        }
    }

    pub(crate) fn source(&mut self) -> &mut dyn Source {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
            Stream::Tls(t) => t.sock_mut().source(),
            Stream::Fcgi(f) => f.sock_mut().source(),
            // Never registered (see `Stream::h2`); a pipe has no descriptor.
            Stream::H2(h) => &mut h.no_source,
        }
    }
}

impl AsFd for Stream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
            Stream::Tls(t) => t.sock().as_fd(),
            Stream::Fcgi(f) => f.sock().as_fd(),
            // Every caller asks `can_splice` first, which is false for a stream: reaching this
            // is a bug of that caller, and ends its session alone (`runtime::panics`).
            Stream::H2(_) => unreachable!("an HTTP/2 stream has no descriptor"),
        }
    }
}

/// What the event loop knows about one socket. Edge-triggered: a flag is set by an event and
/// cleared only when a syscall says the socket has nothing more (EAGAIN, or a short read).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Ready {
    pub readable: bool,
    pub writable: bool,
    /// The peer has sent EOF or reset: once the receive queue is drained, reads return 0 (EOF) or
    /// fail (reset: then `error` is set too).
    pub read_closed: bool,
    /// The socket has a pending error (EPOLLERR: a reset, a timeout): the next read or write
    /// reports it.
    pub error: bool,
}

impl Ready {
    pub(crate) fn update(&mut self, ev: &Event) {
        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
            self.readable = true;
        }
        if ev.is_read_closed() {
            self.read_closed = true;
        }
        if ev.is_error() {
            self.error = true;
        }
        if ev.is_writable() || ev.is_write_closed() || ev.is_error() {
            self.writable = true;
        }
    }
}

/// The client's address.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ClientAddr {
    Ip(SocketAddr),
    Unix,
}

impl ClientAddr {
    pub(crate) fn ip(&self) -> Option<IpAddr> {
        match self {
            ClientAddr::Ip(a) => Some(a.ip()),
            ClientAddr::Unix => None,
        }
    }

    /// The client address with its port (for `connections`).
    pub(crate) fn to_string_with_port(self) -> String {
        match self {
            ClientAddr::Ip(a) => a.to_string(),
            ClientAddr::Unix => "unix".to_string(),
        }
    }
}

impl fmt::Display for ClientAddr {
    /// The client IP as Pen logs it (no port); "unix" for Unix-socket clients.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientAddr::Ip(a) => write!(f, "{}", a.ip()),
            ClientAddr::Unix => f.write_str("unix"),
        }
    }
}

/// Whether a connect error is ours (no descriptors, no ports, no memory) rather than the server's:
/// such errors must not blacklist a healthy server.
pub(crate) fn is_local_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM | libc::EADDRNOTAVAIL)
    ) || e.get_ref().is_some_and(|inner| inner.is::<BindError>())
}

/// Setting up the local end of a server connection failed (`transparent`, `source`): Quill's
/// set-up, not the server's fault.
#[derive(Debug)]
pub(crate) struct BindError(String);

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BindError {}

fn bind_error(what: fmt::Arguments<'_>, e: &io::Error) -> io::Error {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) => " (transparent needs CAP_NET_ADMIN or CAP_NET_RAW)",
        Some(libc::EINVAL | libc::EAFNOSUPPORT) => {
            " (the client's and the server's address families differ)"
        }
        _ => "",
    };
    io::Error::other(BindError(format!("{what}: {e}{hint}")))
}

/// Whether this process may set IP_TRANSPARENT (CAP_NET_ADMIN or CAP_NET_RAW), on a socket of
/// its own that is closed at once.
pub(crate) fn check_transparent() -> io::Result<()> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM.cloexec(), None)?;
    socket.set_ip_transparent_v4(true).map_err(|e| {
        if e.raw_os_error() == Some(libc::EPERM) {
            io::Error::new(
                e.kind(),
                format!("{e}: needs CAP_NET_ADMIN or CAP_NET_RAW (the `user` option drops them; systemd's AmbientCapabilities= keeps them)"),
            )
        } else {
            e
        }
    })
}

/// Where a server connection leaves from: the pool's `source`, or with `transparent` the
/// client's address; None when neither applies (the kernel picks, as for any connect).
pub(crate) fn local_end(t: &Tuning, client: &ClientAddr) -> Option<(IpAddr, bool)> {
    match (t.transparent, client) {
        // A client on a dual-stack listener has an IPv4-mapped address: bind the IPv4 one.
        (true, ClientAddr::Ip(a)) => Some((a.ip().to_canonical(), true)),
        _ => t.source.map(|ip| (ip, false)),
    }
}

/// A nonblocking socket of `kind` for a connection to `addr`, its local end set up: bound to
/// `ip` (port 0: the kernel picks one, so one address serves any number of destinations) when
/// `from` gives one. `transparent` sets IP_TRANSPARENT/IPV6_TRANSPARENT first, which lets the
/// bind use an address this host does not own (the client's).
pub(crate) fn socket_from(
    addr: SocketAddr,
    kind: socket2::Type,
    from: Option<(IpAddr, bool)>,
) -> io::Result<socket2::Socket> {
    use socket2::{Domain, Socket};
    let socket = Socket::new(
        Domain::for_address(addr),
        kind.nonblocking().cloexec(),
        None,
    )?;
    let Some((ip, transparent)) = from else {
        return Ok(socket);
    };
    if transparent {
        let set = if addr.is_ipv4() {
            socket.set_ip_transparent_v4(true)
        } else {
            socket.set_ip_transparent_v6(true)
        };
        set.map_err(|e| bind_error(format_args!("transparent"), &e))?;
    }
    // Only an optimisation (ports shared between destinations): a kernel without it still works.
    let _ = quill_core::sys::set_bind_address_no_port(socket.as_fd());
    socket
        .bind(&SocketAddr::new(ip, 0).into())
        .map_err(|e| bind_error(format_args!("bind to {ip}"), &e))?;
    Ok(socket)
}

/// Opens a TCP socket whose local end `from` sets up ([`socket_from`]) and starts a nonblocking
/// connect.
fn connect_from(addr: SocketAddr, ip: IpAddr, transparent: bool) -> io::Result<TcpStream> {
    let socket = socket_from(addr, socket2::Type::STREAM, Some((ip, transparent)))?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    Ok(TcpStream::from_std(std::net::TcpStream::from(socket)))
}

/// Opens a nonblocking connection (connect in progress for TCP). A `Name` must have been resolved
/// by the caller (`connect_tcp`): resolving here would block the worker.
pub(crate) fn connect(
    addr: &BackendAddr,
    t: &Tuning,
    from: Option<(IpAddr, bool)>,
) -> io::Result<Stream> {
    match addr {
        BackendAddr::Tcp(a) => connect_tcp(*a, t, from),
        BackendAddr::Unix(p) => UnixStream::connect(p).map(Stream::Unix),
        BackendAddr::Abstract(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            UnixStream::connect_addr(&addr).map(Stream::Unix)
        }
        BackendAddr::Name { host, .. } => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("'{host}' must be resolved before connecting"),
        )),
    }
}

/// Opens a nonblocking TCP connection with the pool's socket options (`tcp_nodelay`, `keepalive`).
/// `from`: the local address (and whether it is the client's, bound transparently).
pub(crate) fn connect_tcp(
    addr: SocketAddr,
    t: &Tuning,
    from: Option<(IpAddr, bool)>,
) -> io::Result<Stream> {
    let s = match from {
        Some((ip, transparent)) => connect_from(addr, ip, transparent)?,
        None => TcpStream::connect(addr)?,
    };
    if t.tcp_nodelay {
        s.set_nodelay(true)?;
    }
    if t.keepalive {
        SockRef::from(&s).set_keepalive(true)?;
    }
    Ok(Stream::Tcp(s))
}
