//! Listening sockets: bound once at start-up (before privileges are dropped), shared by every worker
//! (or, for UDP and with `listen_per_worker` for TCP, one SO_REUSEPORT socket per worker), with the
//! options accepted sockets inherit (TCP_NODELAY, SO_KEEPALIVE) set here once instead of once per
//! connection. A Unix socket path is only ever cleared of a stale socket file, never of
//! anything else, and a socket handed over by another process is checked to be a listening stream
//! socket before its address is believed.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use mio::net::{TcpListener, UnixListener};
use socket2::{Domain, SockAddr, Socket, Type};

use crate::addr::ListenAddr;
use crate::net::{ClientAddr, Stream};
use crate::sys;

/// Socket options for a listener.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BindOptions {
    pub backlog: u32,
    pub reuseport: bool,
    pub tfo: bool,
    pub nodelay: bool,
    pub keepalive: bool,
    /// TCP_DEFER_ACCEPT: a client is accepted once its first bytes are in (listeners whose
    /// clients speak first; see `ListenerConfig::defers_accept`).
    pub defer: bool,
    /// A UDP listener with this many SO_REUSEPORT sockets (one per worker); 0 = TCP or Unix.
    pub udp_sockets: usize,
    /// A TCP listener with this many SO_REUSEPORT sockets (`listen_per_worker`: one per
    /// worker); 0 = one socket shared by the workers.
    pub tcp_sockets: usize,
}

/// A bound, listening, nonblocking socket.
#[derive(Debug)]
pub(crate) enum ListenSocket {
    /// One TCP socket, watched by every worker (exclusive wake-ups).
    Tcp(TcpListener),
    /// A TCP listener of SO_REUSEPORT sockets bound to one address (`listen_per_worker`), worker
    /// `i` accepting from those whose index is `i` modulo the worker count: the kernel hashes
    /// each connection to one socket's queue, so workers share no queue and no wait queue.
    TcpShards(Vec<TcpListener>),
    Unix(UnixListener, PathBuf),
    /// A UDP listener: SO_REUSEPORT sockets bound to one address, worker `i` reading those whose
    /// index is `i` modulo the worker count. The kernel hashes a client's address and port to one
    /// of them, so all of a client's datagrams reach one worker, which keeps its flow.
    Udp(Vec<mio::net::UdpSocket>),
}

impl ListenSocket {
    /// At the end of a drain: closes a TCP or Unix listening socket's file in this process (its
    /// descriptor number stays, on a placeholder, for the sessions that still hold the listener).
    /// A UDP listener's sockets stay: its flows still read replies through them.
    pub(crate) fn close_stream_socket(&self) {
        if matches!(self, ListenSocket::Udp(_)) {
            return;
        }
        for fd in self.fds() {
            if let Err(e) = sys::close_in_place(fd) {
                tracing::warn!("drain: cannot close a listening socket: {e}");
            }
        }
    }

    /// Accepts one client (accept4 with NONBLOCK|CLOEXEC) from socket `shard` of a listener
    /// with one socket per worker, or from the one socket of any other (`shard` 0).
    pub(crate) fn accept(&self, shard: usize) -> io::Result<(Stream, ClientAddr)> {
        let tcp = match self {
            ListenSocket::Tcp(l) => l,
            ListenSocket::TcpShards(s) => s.get(shard).ok_or(io::ErrorKind::NotFound)?,
            ListenSocket::Unix(l, _) => {
                return l.accept().map(|(s, _)| (Stream::Unix(s), ClientAddr::Unix));
            }
            ListenSocket::Udp(_) => return Err(io::Error::from(io::ErrorKind::Unsupported)),
        };
        tcp.accept()
            .map(|(s, a)| (Stream::Tcp(s), ClientAddr::Ip(a)))
    }

    /// The sockets worker `worker` of `workers` accepts from, by index: its share of a listener
    /// with one socket per worker, or the one socket of any other stream listener.
    pub(crate) fn share(&self, worker: usize, workers: usize) -> Vec<usize> {
        match self {
            ListenSocket::TcpShards(s) => (0..s.len())
                .filter(|i| i % workers.max(1) == worker)
                .collect(),
            _ => vec![0],
        }
    }

    /// Socket `shard` of a stream listener (see [`ListenSocket::share`]).
    pub(crate) fn shard_fd(&self, shard: usize) -> Option<BorrowedFd<'_>> {
        match self {
            ListenSocket::TcpShards(s) => s.get(shard).map(AsFd::as_fd),
            ListenSocket::Udp(_) => None,
            other => Some(other.as_fd()),
        }
    }

    /// Whether this is a TCP listener with one socket per worker.
    pub(crate) fn is_sharded(&self) -> bool {
        matches!(self, ListenSocket::TcpShards(_))
    }

    /// The UDP sockets, if this is a UDP listener.
    pub(crate) fn udp(&self) -> Option<&[mio::net::UdpSocket]> {
        match self {
            ListenSocket::Udp(s) => Some(s),
            _ => None,
        }
    }

    /// Every descriptor of the listener (several for UDP), to hand over on takeover.
    pub(crate) fn fds(&self) -> Vec<BorrowedFd<'_>> {
        match self {
            ListenSocket::Udp(s) => s.iter().map(AsFd::as_fd).collect(),
            ListenSocket::TcpShards(s) => s.iter().map(AsFd::as_fd).collect(),
            other => vec![other.as_fd()],
        }
    }

    /// The Unix socket file, removed when Quill stops.
    pub(crate) fn path(&self) -> Option<&Path> {
        match self {
            ListenSocket::Unix(_, p) => Some(p),
            _ => None,
        }
    }

    /// Changes the options accepted sockets inherit and whether accepts wait for the client's
    /// first bytes (a reload, or `tcp_nodelay` / `keepalive` / `defer_accept`).
    pub(crate) fn set_inherited_options(
        &self,
        nodelay: bool,
        keepalive: bool,
        defer: bool,
    ) -> io::Result<()> {
        let tcp: &[TcpListener] = match self {
            ListenSocket::Tcp(l) => std::slice::from_ref(l),
            ListenSocket::TcpShards(s) => s,
            _ => &[],
        };
        for l in tcp {
            let s = socket2::SockRef::from(l);
            s.set_tcp_nodelay(nodelay)?;
            s.set_keepalive(keepalive)?;
            sys::set_tcp_defer_accept(l.as_fd(), defer_seconds(defer))?;
        }
        Ok(())
    }

    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        match self {
            ListenSocket::Tcp(l) => l.local_addr().ok(),
            ListenSocket::TcpShards(s) => s.first().and_then(|s| s.local_addr().ok()),
            ListenSocket::Udp(s) => s.first().and_then(|s| s.local_addr().ok()),
            ListenSocket::Unix(..) => None,
        }
    }
}

impl AsFd for ListenSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            ListenSocket::Tcp(l) => l.as_fd(),
            // Never empty: `bind_tcp_shards` makes at least one, as does a takeover (only what
            // it was handed over, one or more, becomes the list).
            ListenSocket::TcpShards(s) => s[0].as_fd(),
            ListenSocket::Unix(l, _) => l.as_fd(),
            // A UDP listener has one socket per worker (never none: `bind_udp` makes at least one).
            ListenSocket::Udp(s) => s[0].as_fd(),
        }
    }
}

/// Takes a listening socket inherited from systemd or from the process Quill takes over from.
/// Returns it with the address it listens on.
pub(crate) fn from_fd(fd: OwnedFd) -> io::Result<(ListenSocket, ListenAddr)> {
    let addr = listening_addr(fd.as_fd())?;
    let socket = Socket::from(fd);
    socket.set_nonblocking(true)?;
    Ok(match &addr {
        ListenAddr::Tcp(_) => {
            let l: std::net::TcpListener = socket.into();
            (ListenSocket::Tcp(TcpListener::from_std(l)), addr)
        }
        ListenAddr::Unix(path) => {
            let l: std::os::unix::net::UnixListener = socket.into();
            let socket = ListenSocket::Unix(UnixListener::from_std(l), path.clone());
            (socket, addr)
        }
    })
}

/// Where a socket someone else handed over listens. An error unless it is a listening stream
/// socket (SO_ACCEPTCONN, SO_TYPE) on TCP or a Unix socket path: a connected socket, a datagram
/// socket, a pipe or a file is never taken for a listener.
pub(crate) fn listening_addr(fd: BorrowedFd<'_>) -> io::Result<ListenAddr> {
    let socket = socket2::SockRef::from(&fd);
    if !socket.is_listener()? || socket.r#type()? != Type::STREAM {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a listening stream socket",
        ));
    }
    let local = socket.local_addr()?;
    if let Some(addr) = local.as_socket() {
        return Ok(ListenAddr::Tcp(addr));
    }
    match local.as_pathname() {
        Some(path) => Ok(ListenAddr::Unix(path.to_path_buf())),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "unsupported socket family (expected TCP or a Unix socket path)",
        )),
    }
}

/// Whether a socket listening on `actual` is the one the configuration asks for at `configured`.
/// Unix paths match when they name the same file (one process may have written a relative path).
pub(crate) fn same_address(actual: &ListenAddr, configured: &ListenAddr) -> bool {
    match (actual, configured) {
        (ListenAddr::Unix(a), ListenAddr::Unix(b)) if a != b => {
            use std::os::unix::fs::MetadataExt;
            match (std::fs::symlink_metadata(a), std::fs::symlink_metadata(b)) {
                (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
                _ => false,
            }
        }
        _ => actual == configured,
    }
}

/// Binds and listens. A port in use is an error unless `reuseport` (shared with other processes).
pub(crate) fn bind(addr: &ListenAddr, o: &BindOptions) -> io::Result<ListenSocket> {
    match addr {
        ListenAddr::Tcp(a) if o.udp_sockets > 0 => bind_udp(*a, o.udp_sockets, &[]),
        ListenAddr::Tcp(a) if o.tcp_sockets > 0 => bind_tcp_shards(*a, o, Vec::new()),
        ListenAddr::Tcp(a) => bind_tcp(*a, o),
        ListenAddr::Unix(p) => bind_unix(p, o),
    }
}

fn bind_tcp(addr: SocketAddr, o: &BindOptions) -> io::Result<ListenSocket> {
    let socket = tcp_socket(addr, o, o.reuseport)?;
    Ok(ListenSocket::Tcp(TcpListener::from_std(socket.into())))
}

/// A TCP listener of `o.tcp_sockets` SO_REUSEPORT sockets at `addr` (at least one): those
/// `inherited` (handed over by the process we take over from, or by systemd) first, then new ones
/// bound beside them. Sockets handed over are all kept, however many the workers now are: closing
/// one would reset the connections queued on it. A socket handed over without SO_REUSEPORT (from a
/// process with one shared socket) cannot have others beside it, so the listener stays as it was.
///
/// SO_REUSEPORT would let any process of the same user bind into the group; unless `reuseport`
/// allows sharing the port, a fresh group is bound only after a plain socket could bind the
/// address, so a port another process listens on is an error, as with one shared socket.
pub(crate) fn bind_tcp_shards(
    addr: SocketAddr,
    o: &BindOptions,
    inherited: Vec<TcpListener>,
) -> io::Result<ListenSocket> {
    let mut sockets = inherited;
    if let Some(first) = sockets.first() {
        if !socket2::SockRef::from(first).reuse_port()? {
            return Ok(match sockets.len() {
                1 => ListenSocket::Tcp(sockets.remove(0)),
                _ => ListenSocket::TcpShards(sockets),
            });
        }
    } else if !o.reuseport && addr.port() != 0 {
        probe_free(addr)?;
    }
    while sockets.len() < o.tcp_sockets.max(1) {
        // The address we bound, not the configured one: port 0 binds the rest to the first's port.
        let at = sockets
            .first()
            .and_then(|s: &TcpListener| s.local_addr().ok())
            .unwrap_or(addr);
        let socket = tcp_socket(at, o, true)?;
        sockets.push(TcpListener::from_std(socket.into()));
    }
    Ok(ListenSocket::TcpShards(sockets))
}

/// An error (`AddrInUse`) when a socket without SO_REUSEPORT cannot bind `addr`: another process
/// listens there. The probe never listens, so no client can connect to it, and is closed at once.
fn probe_free(addr: SocketAddr) -> io::Result<()> {
    let probe = Socket::new(Domain::for_address(addr), Type::STREAM.nonblocking(), None)?;
    probe.set_reuse_address(true)?;
    probe.bind(&addr.into())
}

/// A listening TCP socket at `addr` with the options its clients inherit.
fn tcp_socket(addr: SocketAddr, o: &BindOptions, reuseport: bool) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM.nonblocking(), None)?;
    // SO_REUSEADDR only lets us rebind over TIME_WAIT leftovers; a live listener still conflicts.
    socket.set_reuse_address(true)?;
    if reuseport {
        socket.set_reuse_port(true)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(o.backlog.min(i32::MAX as u32) as i32)?;
    // Accepted sockets inherit these, which saves a setsockopt per client.
    socket.set_tcp_nodelay(o.nodelay)?;
    if o.keepalive {
        socket.set_keepalive(true)?;
    }
    if o.defer {
        sys::set_tcp_defer_accept(socket.as_fd(), defer_seconds(true))?;
    }
    if o.tfo {
        if let Err(e) = sys::set_tcp_fastopen(socket.as_fd(), o.backlog.min(4096) as i32) {
            tracing::debug!("TCP_FASTOPEN not set on {addr}: {e}");
        }
    }
    Ok(socket)
}

/// TCP_DEFER_ACCEPT's value: a client that connects and sends nothing is accepted all the same
/// after about a second (the kernel's first SYN-ACK retransmission), so it meets the HTTP
/// `header_timeout` late by that much at most; 0 turns deferral off.
fn defer_seconds(defer: bool) -> i32 {
    if defer {
        1
    } else {
        0
    }
}

/// A UDP listener of `count` sockets at `addr`: those `inherited` (from the process we take over
/// from) first, then new ones bound beside them with SO_REUSEPORT. Each reports the destination
/// address of what it receives (packet info), so replies leave from the address the client wrote
/// to even on a wildcard address.
pub(crate) fn bind_udp(
    addr: SocketAddr,
    count: usize,
    inherited: &[OwnedFd],
) -> io::Result<ListenSocket> {
    let mut sockets = Vec::with_capacity(count.max(inherited.len()).max(1));
    for fd in inherited {
        let socket = Socket::from(fd.try_clone()?);
        socket.set_nonblocking(true)?;
        sys::set_recv_pktinfo(socket.as_fd(), addr.is_ipv6())?;
        sockets.push(mio::net::UdpSocket::from_std(socket.into()));
    }
    while sockets.len() < count.max(1) {
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM.nonblocking(), None)?;
        // Every socket of the group, ours and those of a process taking over, shares the port.
        socket.set_reuse_port(true)?;
        if addr.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        sys::set_recv_pktinfo(socket.as_fd(), addr.is_ipv6())?;
        // The address we bound, not the configured one: port 0 binds the rest to the first's port.
        let at = sockets
            .first()
            .and_then(|s: &mio::net::UdpSocket| s.local_addr().ok())
            .unwrap_or(addr);
        socket.bind(&at.into())?;
        sockets.push(mio::net::UdpSocket::from_std(socket.into()));
    }
    Ok(ListenSocket::Udp(sockets))
}

/// Where a UDP socket someone else handed over is bound; an error unless it is a datagram socket
/// bound to an IP address.
pub(crate) fn udp_addr(fd: BorrowedFd<'_>) -> io::Result<SocketAddr> {
    let socket = socket2::SockRef::from(&fd);
    if socket.r#type()? != Type::DGRAM {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a datagram socket",
        ));
    }
    socket
        .local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not bound to an IP address"))
}

fn bind_unix(path: &Path, o: &BindOptions) -> io::Result<ListenSocket> {
    remove_stale_socket(path)?;
    let socket = Socket::new(Domain::UNIX, Type::STREAM.nonblocking(), None)?;
    socket.bind(&SockAddr::unix(path)?)?;
    socket.listen(o.backlog.min(i32::MAX as u32) as i32)?;
    let std_listener: std::os::unix::net::UnixListener = socket.into();
    Ok(ListenSocket::Unix(
        UnixListener::from_std(std_listener),
        path.to_path_buf(),
    ))
}

/// Makes room for a Unix socket at `path`: removes what is there only when it is a socket file
/// (not followed if a symlink) that nobody answers on, left by a process that died. Anything else
/// stays: a regular file, a directory or a symlink is an error ("exists and is not a socket"), and
/// so is a live socket (`AddrInUse`: another process serves it).
pub(crate) fn remove_stale_socket(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "exists and is not a socket",
        ));
    }
    // A nonblocking connect: a live listener with a full backlog answers EAGAIN, never blocks us.
    let probe = Socket::new(Domain::UNIX, Type::STREAM.nonblocking(), None)?;
    match probe.connect(&SockAddr::unix(path)?) {
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            match std::fs::remove_file(path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Ok(()) => Err(io::Error::new(io::ErrorKind::AddrInUse, "address in use")),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            Err(io::Error::new(io::ErrorKind::AddrInUse, "address in use"))
        }
        Err(e) => Err(e),
    }
}

/// Removes the socket file Quill bound at `path` when it stops or moves the listener, unless
/// something else has taken its place since (a regular file, a directory, a symlink stay).
pub(crate) fn remove_socket_file(path: &Path) {
    use std::os::unix::fs::FileTypeExt;
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
}
