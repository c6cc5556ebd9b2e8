//! The only home of `unsafe`: thin wrappers over Linux syscalls that neither std, mio nor socket2
//! expose, over glibc's heap trim, and over the SSE2 intrinsics of the HTTP/1 head parser's byte
//! classes (`simd`). This file holds the `check` helpers every wrapper uses, and
//! the descriptor and socket calls (pipes and splice, exclusive epoll registration, inherited and
//! replaced descriptors, integer socket options, a socket's unacknowledged bytes); by kind, the
//! rest lives in `file` (the web server's opens beneath a root, metadata, body reads and sends,
//! directory entries, all through rustix), `process` (resource limits, users, privilege drop,
//! network namespaces, heap trim, the monotonic clock), `packet` (packet sockets, their receive
//! ring and batched sends) and `udp` (packet info, the ICMP error queue, [`SendBatch`] and
//! [`RecvBatch`]), `uring` (a worker's io_uring for accepting, [`AcceptRing`]), `thread`
//! ([`ThreadRc`], an `Rc` kept on its thread inside a `Send` type), `reuse` ([`vacate`], a box
//! kept for another value) and `simd`. Each file allows `unsafe` on its own and carries a
//! `// SAFETY:` comment on every block; callers name everything as `sys::X`.
//!
//! Every wrapper returns `io::Result` and takes borrowed descriptors; nothing here keeps state but
//! [`PacketRing`], the mapping of a packet socket's receive ring, and [`AcceptRing`].

#![allow(unsafe_code)]

mod file;
mod packet;
mod process;
mod reuse;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub mod simd;
mod thread;
mod udp;
mod uring;

pub use file::{
    file_info, file_info_at, open_beneath, openat2_missing, pread, pread_nowait, read_dir,
    send_more, sendfile, DirEntry, FileInfo, FileKind, Links,
};
pub use packet::{
    packet_recv, packet_rx_ring, packet_send, packet_send_many, packet_socket,
    set_packet_qdisc_bypass, PacketRing, PacketSocket, RingFrame, PACKET_SEND_BATCH,
};
pub use process::{
    chroot, clock_ticks_per_second, drop_privileges, enter_netns, lookup_user, monotonic_us,
    nofile_limit, raise_nofile_limit, trim_heap, UserIds,
};
pub use reuse::vacate;
pub use thread::ThreadRc;
pub use udp::{
    recv_error, send_from_to, set_recv_errors, set_recv_pktinfo, Datagram, QueuedError, RecvBatch,
    SendBatch, BATCH_MAX, SEND_BATCH_MAX,
};
pub use uring::{AcceptRing, Accepted};

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn check_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// `cachestat(2)`'s syscall number (Linux 6.5; the same on x86-64 and aarch64). libc 0.2 does not
/// name it for every target yet.
const SYS_CACHESTAT: libc::c_long = 451;

/// Whether every page of `file`'s range `offset..offset + len` is in the page cache now
/// (`cachestat(2)`), so reading or sending it cannot wait on the disk; nothing is read.
/// `Ok(None)` when the kernel has no `cachestat` (before 6.5) or cannot tell for this file: the
/// caller then goes ahead as if it were cached.
pub fn is_cached(file: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<Option<bool>> {
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    if len == 0 {
        return Ok(Some(true));
    }
    let range = Range { off: offset, len };
    let mut stat = Stat::default();
    // SAFETY: cachestat reads one `struct cachestat_range` (two u64s, `range`) and writes one
    // `struct cachestat` (five u64s, `stat`), both valid for the call; flags must be 0; the fd
    // is open (borrowed).
    let ret = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const Range,
            &mut stat as *mut Stat,
            0 as libc::c_uint,
        )
    };
    if ret < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOSYS | libc::EOPNOTSUPP | libc::EBADF | libc::EPERM) => Ok(None),
            _ => Err(e),
        };
    }
    let page = page_size();
    let pages = (offset + len - 1) / page - offset / page + 1;
    Ok(Some(stat.nr_cache >= pages))
}

/// The size of a memory page (the unit of the page cache).
fn page_size() -> u64 {
    // SAFETY: sysconf reads no memory of ours; _SC_PAGESIZE is always supported on Linux.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as u64,
        _ => 4096,
    }
}

/// A nonblocking, close-on-exec pipe: (read end, write end). When `size` is given the pipe's capacity
/// is raised to it (best effort: the kernel may cap it at `/proc/sys/fs/pipe-max-size`).
pub fn pipe(size: Option<usize>) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a valid, writable array of two ints, as pipe2 requires.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    if let Some(size) = size {
        // SAFETY: F_SETPIPE_SZ takes an int argument and only reads it; the fd is open.
        let _ = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, size as libc::c_int) };
    }
    Ok((read, write))
}

/// Bytes a TCP socket has sent or queued that its peer has not acknowledged yet (SIOCOUTQ): 0 once
/// the peer's kernel has everything, so a reset sent then destroys nothing in flight.
pub fn unacked_bytes(socket: BorrowedFd<'_>) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ on sockets) writes one int to the valid, writable `n`; the
    // descriptor is borrowed for the call.
    check(unsafe { libc::ioctl(socket.as_raw_fd(), libc::TIOCOUTQ, &mut n) })?;
    Ok(n.max(0) as usize)
}

/// Moves up to `len` bytes from `from` to `to` inside the kernel; one of them must be a pipe.
/// Nonblocking: `WouldBlock` when the source is empty or the destination full; `Ok(0)` at EOF.
pub fn splice(from: BorrowedFd<'_>, to: BorrowedFd<'_>, len: usize) -> io::Result<usize> {
    let flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK;
    // SAFETY: both descriptors are borrowed for the call, null offsets mean "use the file position",
    // which is what a socket or pipe requires.
    let n = unsafe {
        libc::splice(
            from.as_raw_fd(),
            std::ptr::null_mut(),
            to.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            flags,
        )
    };
    check_size(n)
}

/// Registers `fd` for readability with the epoll instance `epfd` in exclusive mode (EPOLLEXCLUSIVE):
/// when several workers wait on the same listening socket, one new connection wakes one of them.
/// Level-triggered, so a worker that stops after an accept batch is woken again for what remains.
pub fn epoll_add_exclusive(epfd: RawFd, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
    let mut event = libc::epoll_event {
        events: (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32,
        u64: token,
    };
    // SAFETY: `event` is a valid epoll_event that outlives the call; the kernel copies it.
    check(unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut event) })?;
    Ok(())
}

/// Removes `fd` from the epoll instance `epfd`.
pub fn epoll_del(epfd: RawFd, fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut event = libc::epoll_event { events: 0, u64: 0 };
    // SAFETY: a non-null event pointer keeps old kernels happy; it is not read for EPOLL_CTL_DEL.
    check(unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_DEL, fd.as_raw_fd(), &mut event) })?;
    Ok(())
}

/// Sets an integer socket option (the ones socket2 has no setter for).
fn setsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is a c_int living on the stack for the duration of the call, and
    // its size is passed with it; the descriptor is borrowed, so it is open.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            &value as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Enables TCP Fast Open on a listening socket with a queue of `qlen` pending Fast Open requests.
pub fn set_tcp_fastopen(fd: BorrowedFd<'_>, qlen: libc::c_int) -> io::Result<()> {
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_FASTOPEN, qlen)
}

/// Sets TCP_DEFER_ACCEPT on a listening socket: a client is accepted only once its first bytes
/// have arrived (or after about `seconds`), so a client that speaks first is read at accept.
pub fn set_tcp_defer_accept(fd: BorrowedFd<'_>, seconds: libc::c_int) -> io::Result<()> {
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT, seconds)
}

/// Takes ownership of a descriptor the process inherited at start (systemd's `LISTEN_FDS`), after
/// checking that it is open, and marks it close-on-exec.
pub fn take_inherited_fd(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD only reads the descriptor's flags; an invalid fd gives EBADF, nothing else.
    let flags = check(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    // SAFETY: F_SETFD with an int argument changes only this descriptor's flags.
    check(unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) })?;
    // SAFETY: the fd is open (F_GETFD succeeded) and was handed to this process to own: nothing
    // else in the process refers to it, since it is called once per inherited fd at start-up.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Closes the open file behind `fd` while keeping the number `fd` open: a fresh, unbound Unix
/// socket takes its place (`dup3`), so whatever still holds the number (a listener shared with
/// sessions that outlive its last accept) closes that socket later, and the old file is released
/// now (a listening socket that no other process holds stops taking connections: the kernel
/// refuses them instead of queueing them for nobody).
pub fn close_in_place(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: socket(2) takes plain integer arguments and returns a new descriptor or -1.
    let dummy =
        check(unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `dummy` was just opened and is owned by nothing else; wrapping it closes it once.
    let dummy = unsafe { OwnedFd::from_raw_fd(dummy) };
    // SAFETY: dup3 makes `fd` (borrowed, open for this call) refer to `dummy`'s file, closing its
    // old file atomically; both descriptors stay valid, each with one owner.
    check(unsafe { libc::dup3(dummy.as_raw_fd(), fd.as_raw_fd(), libc::O_CLOEXEC) })?;
    Ok(())
}

/// Sets IP_BIND_ADDRESS_NO_PORT: a `bind` to a source address with port 0 leaves the port choice to
/// `connect`, which can then reuse one port for different destinations. Without it every bound
/// socket holds its own ephemeral port, and one source address runs out after about 28,000.
pub fn set_bind_address_no_port(fd: BorrowedFd<'_>) -> io::Result<()> {
    setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT, 1)
}

/// Sets SO_RCVLOWAT: the socket reads as ready (and wakes a waiter) only once this many bytes
/// are queued, or at end of stream or an error.
pub fn set_recv_lowat(fd: BorrowedFd<'_>, bytes: libc::c_int) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, bytes)
}
