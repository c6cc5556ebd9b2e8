//! The only home of `unsafe`: thin wrappers over Linux syscalls that neither std, mio nor socket2
//! expose (splice and pipes, exclusive epoll registration, resource limits, privilege drop, a
//! socket's unacknowledged bytes), and over glibc's heap trim.
//!
//! Every wrapper returns `io::Result` and takes borrowed descriptors; nothing here keeps state.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

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

/// Raises the soft open-file limit to the hard limit; returns the new soft limit.
pub fn raise_nofile_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit.
    check(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: `raised` is a valid rlimit read by the kernel.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    Ok(lim.rlim_cur)
}

/// A user's numeric identity, looked up by name.
#[derive(Clone, Copy, Debug)]
pub struct UserIds {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
}

/// Looks up `name` in the user database (before any chroot, which would hide /etc/passwd).
pub fn lookup_user(name: &str) -> io::Result<Option<UserIds>> {
    let cname = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in user name"))?;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: passwd is a plain C struct; all-zero is a valid (empty) value that getpwnam_r overwrites.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer refers to live, correctly sized storage owned by this frame.
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    if result.is_null() {
        return Ok(None);
    }
    Ok(Some(UserIds {
        uid: pwd.pw_uid,
        gid: pwd.pw_gid,
    }))
}

/// Changes the root directory to `dir` and moves into it.
pub fn chroot(dir: &Path) -> io::Result<()> {
    std::os::unix::fs::chroot(dir)?;
    std::env::set_current_dir("/")
}

/// Drops to `ids` for the whole process: supplementary groups, then group, then user (the order
/// matters: once the uid is gone the process may no longer change its groups).
pub fn drop_privileges(ids: UserIds) -> io::Result<()> {
    // SAFETY: a one-element array of a valid gid, read by the kernel.
    check(unsafe { libc::setgroups(1, &ids.gid) })?;
    // SAFETY: plain integer arguments. glibc applies setgid/setuid to every thread of the process.
    check(unsafe { libc::setgid(ids.gid) })?;
    // SAFETY: as above.
    check(unsafe { libc::setuid(ids.uid) })?;
    Ok(())
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

/// Sets IP_BIND_ADDRESS_NO_PORT: a `bind` to a source address with port 0 leaves the port choice to
/// `connect`, which can then reuse one port for different destinations. Without it every bound
/// socket holds its own ephemeral port, and one source address runs out after about 28,000.
pub fn set_bind_address_no_port(fd: BorrowedFd<'_>) -> io::Result<()> {
    setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT, 1)
}

/// Moves the calling thread into the network namespace `ns` (an open `/run/netns/NAME` or
/// `/proc/PID/ns/net`): sockets it creates from then on belong to that namespace, and keep it
/// wherever they are used. Other threads are not affected. For tests and benchmarks that build
/// several hosts out of namespaces; needs CAP_SYS_ADMIN.
pub fn enter_netns(ns: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: setns takes a descriptor borrowed for the call and a constant; it changes only the
    // calling thread's namespace.
    check(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }).map(|_| ())
}

/// A raw packet socket (AF_PACKET, every protocol) bound to one interface, for direct server
/// return: it reads every frame the interface receives and sends whole frames out of it.
#[derive(Debug)]
pub struct PacketSocket {
    pub fd: OwnedFd,
    pub ifindex: i32,
    /// The interface's hardware address.
    pub mac: [u8; 6],
}

/// Opens a packet socket on interface `ifname` (needs CAP_NET_RAW). Frames this socket sends
/// are not read back by it (PACKET_IGNORE_OUTGOING, where the kernel has it), and each read
/// frame says whether its checksum is still to be computed (PACKET_AUXDATA).
pub fn packet_socket(ifname: &str) -> io::Result<PacketSocket> {
    let name = CString::new(ifname).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    if name.as_bytes().len() >= libc::IFNAMSIZ {
        return Err(io::Error::from_raw_os_error(libc::ENODEV));
    }
    // SAFETY: the name is a NUL-terminated string that outlives the call.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        return Err(io::Error::last_os_error());
    }
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket(2) with constant arguments; the result is checked before use.
    let raw = check(unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::c_int::from(proto),
        )
    })?;
    // SAFETY: socket(2) just returned this descriptor and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: ifreq is plain data; zeroed is a valid value for it.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFHWADDR reads the name from and writes the address into the ifreq, which
    // lives on the stack for the call; the descriptor is open.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) })?;
    let mut mac = [0u8; 6];
    // SAFETY: after a successful SIOCGIFHWADDR the union holds ifru_hwaddr.
    let hw = unsafe { req.ifr_ifru.ifru_hwaddr };
    for (dst, src) in mac.iter_mut().zip(hw.sa_data.iter()) {
        *dst = *src as u8;
    }
    // SAFETY: sockaddr_ll is plain data; zeroed is valid, and the fields set below are its own.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = proto;
    addr.sll_ifindex = ifindex as i32;
    // SAFETY: the address is a sockaddr_ll on the stack, its size passed with it.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })?;
    setsockopt_int(fd.as_fd(), libc::SOL_PACKET, libc::PACKET_AUXDATA, 1)?;
    // Older kernels lack it: the loop then also sees its own frames and skips them by MAC.
    let _ = setsockopt_int(
        fd.as_fd(),
        libc::SOL_PACKET,
        libc::PACKET_IGNORE_OUTGOING,
        1,
    );
    Ok(PacketSocket {
        fd,
        ifindex: ifindex as i32,
        mac,
    })
}

/// Reads one frame into `buf`: its length (cut to `buf`'s) and whether its TCP/UDP checksum is
/// still to be filled in (TP_STATUS_CSUMNOTREADY: a frame from a local or virtual interface
/// that left its checksum to hardware).
pub fn packet_recv(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, bool)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for one tpacket_auxdata control message (u64s: aligned for cmsghdr).
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; zeroed is valid, and the fields set below point at the
    // iovec and control buffer above, which outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: recvmsg writes at most iov_len bytes into buf and msg_controllen into control.
    let n = check_size(unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, 0) })?;
    let mut csum_not_ready = false;
    // SAFETY: the CMSG_* macros walk the control buffer the kernel filled, within
    // msg_controllen; a tpacket_auxdata is read unaligned from the message's data.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_PACKET && (*c).cmsg_type == libc::PACKET_AUXDATA {
                let aux: libc::tpacket_auxdata =
                    std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                csum_not_ready = aux.tp_status & libc::TP_STATUS_CSUMNOTREADY != 0;
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n.min(buf.len()), csum_not_ready))
}

/// Sends one whole frame out of the packet socket's interface.
pub fn packet_send(fd: BorrowedFd<'_>, frame: &[u8]) -> io::Result<usize> {
    // SAFETY: send reads frame.len() bytes from the slice; the descriptor is borrowed, so open.
    check_size(unsafe { libc::send(fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) })
}

/// Sets SO_RCVLOWAT: the socket reads as ready (and wakes a waiter) only once this many bytes
/// are queued, or at end of stream or an error.
pub fn set_recv_lowat(fd: BorrowedFd<'_>, bytes: libc::c_int) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, bytes)
}

/// Clock ticks per second, the unit of the CPU times in /proc/PID/stat (100 on nearly every Linux).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf only reads a constant of the running system.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as u64
    } else {
        100
    }
}

/// The soft limit on open files (what this process may open now).
pub fn nofile_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit.
    check(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    Ok(lim.rlim_cur)
}

/// Gives the C heap's free memory back to the OS (glibc `malloc_trim(0)`): every whole free page
/// of every arena, not only the top of each heap, which is all that glibc returns on its own.
/// Returns whether any memory was released. Takes each arena's lock in turn and costs one
/// madvise per free run of pages: for the end of a burst, not for every request. Does nothing
/// where the C library is not glibc.
pub fn trim_heap() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes a plain size and changes only the allocator's own state, under
        // the allocator's locks; it may be called from any thread at any time.
        unsafe { libc::malloc_trim(0) != 0 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn trim_heap_gives_freed_pages_back() {
        // 8 MiB in 16 KiB blocks (below the mmap threshold: they come from the heap, touched),
        // and a small block after them so that the heap's top cannot shrink on its own.
        let blocks: Vec<Vec<u8>> = (0..512).map(|_| vec![1u8; 16 * 1024]).collect();
        let pin = vec![1u8; 64];
        drop(blocks);
        assert!(super::trim_heap(), "nothing was given back");
        drop(pin);
    }
}
