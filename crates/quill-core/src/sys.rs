//! The only home of `unsafe`: thin wrappers over Linux syscalls that neither std, mio nor socket2
//! expose (splice and pipes, exclusive epoll registration, resource limits, privilege drop, a
//! socket's unacknowledged bytes, packet sockets and their receive ring, a UDP socket's ICMP
//! error queue), and over glibc's heap trim.
//!
//! Every wrapper returns `io::Result` and takes borrowed descriptors; nothing here keeps state but
//! [`PacketRing`], the mapping of a packet socket's receive ring.

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

/// A TPACKET_V3 receive ring on a packet socket (PACKET_RX_RING): the kernel writes the frames the
/// socket receives straight into memory shared with Quill, in blocks, and wakes a reader once per
/// block (when the block is full or `timeout_ms` after its first frame), not once per frame. A
/// block is Quill's while it reads it and the kernel's again once handed back.
#[derive(Debug)]
pub struct PacketRing {
    map: std::ptr::NonNull<u8>,
    block_size: usize,
    block_nr: usize,
    /// The next block to read, in the kernel's order.
    next: usize,
}

// SAFETY: the ring is plain shared memory owned by this value alone (no thread-bound state); moving
// it to another thread moves the only handle to it.
unsafe impl Send for PacketRing {}

/// What one frame of a ring block is: where it lies in the block (offset, length) and whether its
/// TCP/UDP checksum is still to be filled in (as in [`packet_recv`]). Only whole frames are listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingFrame {
    pub offset: usize,
    pub len: usize,
    pub csum_not_ready: bool,
}

/// Sets a TPACKET_V3 receive ring of `block_nr` blocks of `block_size` bytes (a multiple of the
/// page size) on packet socket `fd` and maps it. A block is retired to the reader `timeout_ms`
/// after its first frame at the latest: that bounds the delay a frame waits in a block that does
/// not fill.
pub fn packet_rx_ring(
    fd: BorrowedFd<'_>,
    block_size: usize,
    block_nr: usize,
    timeout_ms: u32,
) -> io::Result<PacketRing> {
    let invalid = || io::Error::from(io::ErrorKind::InvalidInput);
    if block_nr == 0 || block_size < 4096 || block_size % 4096 != 0 {
        return Err(invalid());
    }
    let len = block_size.checked_mul(block_nr).ok_or_else(invalid)?;
    let frame_size = 2048usize;
    let req = libc::tpacket_req3 {
        tp_block_size: u32::try_from(block_size).map_err(|_| invalid())?,
        tp_block_nr: u32::try_from(block_nr).map_err(|_| invalid())?,
        tp_frame_size: frame_size as u32,
        tp_frame_nr: u32::try_from(len / frame_size).map_err(|_| invalid())?,
        tp_retire_blk_tov: timeout_ms.max(1),
        tp_sizeof_priv: 0,
        tp_feature_req_word: 0,
    };
    setsockopt_int(
        fd,
        libc::SOL_PACKET,
        libc::PACKET_VERSION,
        libc::tpacket_versions::TPACKET_V3 as libc::c_int,
    )?;
    // SAFETY: the option value is a tpacket_req3 on the stack, its size passed with it; the
    // kernel only reads it.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_RX_RING,
            (&req as *const libc::tpacket_req3).cast(),
            std::mem::size_of::<libc::tpacket_req3>() as libc::socklen_t,
        )
    })?;
    // SAFETY: maps the ring the kernel just made for this socket (its whole length, shared,
    // readable and writable, as packet_mmap(7) requires); the result is checked before use.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let map = std::ptr::NonNull::new(map.cast::<u8>()).ok_or_else(invalid)?;
    Ok(PacketRing {
        map,
        block_size,
        block_nr,
        next: 0,
    })
}

impl PacketRing {
    /// The status of the block starting at `base` (the start of a block inside the mapping).
    /// Read volatile: the kernel writes it; the caller's acquire fence orders the reads of the
    /// block's frames after it.
    fn block_status(&self, base: usize) -> u32 {
        debug_assert!(base + self.block_size <= self.block_size * self.block_nr);
        // SAFETY: `base` is the start of a block inside the mapping, whose first bytes are the
        // kernel's tpacket_block_desc (8-aligned: blocks are page-aligned); the mapping lives as
        // long as `self`.
        unsafe {
            let desc = self
                .map
                .as_ptr()
                .add(base)
                .cast::<libc::tpacket_block_desc>();
            std::ptr::read_volatile(std::ptr::addr_of!((*desc).hdr.bh1.block_status))
        }
    }

    /// Waits up to `timeout` for the next block of frames (poll), then gives it to `each_block`
    /// with the list of its frames (filled into `frames`, which keeps its capacity from block to
    /// block: no allocation once it has grown to a block's frame count), and hands the block back
    /// to the kernel. Goes on with the blocks that are ready after it, without waiting, up to the
    /// ring's size. Returns the number of frames read (0 when the wait ended without a block).
    pub fn read_blocks(
        &mut self,
        fd: BorrowedFd<'_>,
        timeout: std::time::Duration,
        frames: &mut Vec<RingFrame>,
        mut each_block: impl FnMut(&mut [u8], &[RingFrame]),
    ) -> io::Result<usize> {
        use std::sync::atomic::{fence, Ordering};
        let mut total = 0;
        for round in 0..self.block_nr {
            let base = self.next * self.block_size;
            let status = self.block_status(base);
            if status & libc::TP_STATUS_USER == 0 {
                if round > 0 {
                    break;
                }
                let mut pfd = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN | libc::POLLERR,
                    revents: 0,
                };
                let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
                // SAFETY: one pollfd on the stack, its count passed with it.
                check(unsafe { libc::poll(&mut pfd, 1, ms) })?;
                let status = self.block_status(base);
                if status & libc::TP_STATUS_USER == 0 {
                    if pfd.revents & libc::POLLERR != 0 {
                        return Err(take_socket_error(fd));
                    }
                    return Ok(0);
                }
            }
            fence(Ordering::Acquire);
            // SAFETY: the block is the reader's (TP_STATUS_USER) until handed back below, so the
            // kernel does not write it meanwhile; it lies whole inside the mapping, which lives as
            // long as `self`, borrowed mutably here.
            let block = unsafe {
                std::slice::from_raw_parts_mut(self.map.as_ptr().add(base), self.block_size)
            };
            frames.clear();
            let h = |at: usize| -> Option<u32> {
                block
                    .get(at..at + 4)
                    .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
            };
            // tpacket_block_desc: version, offset_to_priv, then tpacket_hdr_v1: block_status,
            // num_pkts, offset_to_first_pkt.
            let count = h(12).unwrap_or(0) as usize;
            let mut at = h(16).unwrap_or(0) as usize;
            for _ in 0..count {
                // tpacket3_hdr: tp_next_offset, tp_sec, tp_nsec, tp_snaplen, tp_len, tp_status,
                // tp_mac (u16).
                let (Some(next), Some(snaplen), Some(st), Some(mac)) =
                    (h(at), h(at + 12), h(at + 20), block.get(at + 24..at + 26))
                else {
                    break;
                };
                let offset = at + usize::from(u16::from_ne_bytes([mac[0], mac[1]]));
                let len = snaplen as usize;
                // A frame cut short (longer than a block) is skipped: it cannot be sent on whole.
                if h(at + 16) == Some(snaplen) && offset + len <= block.len() {
                    frames.push(RingFrame {
                        offset,
                        len,
                        csum_not_ready: st & libc::TP_STATUS_CSUMNOTREADY != 0,
                    });
                }
                if next == 0 {
                    break;
                }
                at += next as usize;
            }
            total += frames.len();
            each_block(block, frames);
            fence(Ordering::Release);
            // SAFETY: hands the block back: a volatile write of TP_STATUS_KERNEL to its status,
            // after the release fence that orders every access to the block before it.
            unsafe {
                let desc = self
                    .map
                    .as_ptr()
                    .add(base)
                    .cast::<libc::tpacket_block_desc>();
                std::ptr::write_volatile(
                    std::ptr::addr_of_mut!((*desc).hdr.bh1.block_status),
                    libc::TP_STATUS_KERNEL,
                );
            }
            self.next = (self.next + 1) % self.block_nr;
        }
        Ok(total)
    }
}

impl Drop for PacketRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in packet_rx_ring, once; nothing borrows it now.
        unsafe {
            libc::munmap(self.map.as_ptr().cast(), self.block_size * self.block_nr);
        }
    }
}

/// The error a socket reports (SO_ERROR, which also clears it), or the getsockopt's own failure.
fn take_socket_error(fd: BorrowedFd<'_>) -> io::Error {
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: SO_ERROR writes one int into `err`, whose size is passed in `len`; both live on the
    // stack for the call.
    let got = check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut libc::c_int).cast(),
            &mut len,
        )
    });
    match got {
        Err(e) => e,
        Ok(_) if err != 0 => io::Error::from_raw_os_error(err),
        Ok(_) => io::Error::other("packet socket reported an error"),
    }
}

/// The most frames one [`packet_send_many`] call gives the kernel at once.
pub const PACKET_SEND_BATCH: usize = 64;

/// Sends the frames at `frames` (offset, length) of `block` out of the packet socket's interface,
/// [`PACKET_SEND_BATCH`] per `sendmmsg`. Returns how many frames, and how many bytes of them, the
/// kernel took: a frame it refuses (or that lies outside `block`) is skipped and the others are
/// still sent.
pub fn packet_send_many(
    fd: BorrowedFd<'_>,
    block: &[u8],
    frames: &[(usize, usize)],
) -> (usize, usize) {
    let mut sent = 0;
    let mut bytes = 0;
    for chunk in frames.chunks(PACKET_SEND_BATCH) {
        // SAFETY: iovec and mmsghdr are plain old data; all zeroes is valid, pointers set below.
        let mut iovs: [libc::iovec; PACKET_SEND_BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; PACKET_SEND_BATCH] = unsafe { std::mem::zeroed() };
        let mut n = 0;
        for &(offset, len) in chunk {
            let Some(frame) = block.get(offset..offset.saturating_add(len)) else {
                continue;
            };
            iovs[n].iov_base = frame.as_ptr() as *mut libc::c_void;
            iovs[n].iov_len = frame.len();
            n += 1;
        }
        for (h, iov) in hdrs.iter_mut().zip(iovs.iter_mut()).take(n) {
            h.msg_hdr.msg_iov = iov;
            h.msg_hdr.msg_iovlen = 1;
        }
        let mut done = 0;
        while done < n {
            // SAFETY: headers done..n point at iovecs on this stack frame, each of which points
            // into `block` (checked above); all outlive the call and the kernel only reads them.
            let got = check(unsafe {
                libc::sendmmsg(
                    fd.as_raw_fd(),
                    hdrs.as_mut_ptr().add(done),
                    (n - done) as libc::c_uint,
                    0,
                )
            });
            match got {
                Ok(k) if k > 0 => {
                    let k = k as usize;
                    bytes += iovs[done..done + k]
                        .iter()
                        .map(|v| v.iov_len)
                        .sum::<usize>();
                    done += k;
                    sent += k;
                }
                // The frame at `done` was refused (or none was taken): skip it, go on.
                _ => done += 1,
            }
        }
    }
    (sent, bytes)
}

/// Sends the socket's frames straight to the interface's driver, past the traffic-control layer
/// (PACKET_QDISC_BYPASS): no queueing discipline sees them, and none delays them.
pub fn set_packet_qdisc_bypass(fd: BorrowedFd<'_>) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1)
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

/// Asks the kernel to report each datagram's destination address (IP_PKTINFO, and
/// IPV6_RECVPKTINFO on an IPv6 socket), read by [`RecvBatch`]: a wildcard UDP listener then
/// answers from the address the client wrote to.
pub fn set_recv_pktinfo(fd: BorrowedFd<'_>, v6: bool) -> io::Result<()> {
    let on: libc::c_int = 1;
    let (level, name) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO)
    } else {
        (libc::IPPROTO_IP, libc::IP_PKTINFO)
    };
    // SAFETY: the option value is a valid int whose size is passed; the fd is borrowed.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Asks the kernel to queue the ICMP errors a UDP socket draws on its error queue (IP_RECVERR, or
/// IPV6_RECVERR on an IPv6 socket), read with [`recv_error`]: each then names the host that sent
/// it and quotes the datagram it answers, so that a caller can tell a real error from a forged one.
pub fn set_recv_errors(fd: BorrowedFd<'_>, v6: bool) -> io::Result<()> {
    if v6 {
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVERR, 1)
    } else {
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVERR, 1)
    }
}

/// One error read from a socket's error queue ([`recv_error`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueuedError {
    /// The error the kernel made of it (ECONNREFUSED for a port unreachable).
    pub errno: i32,
    /// It came in an ICMP or ICMPv6 message (not a local error).
    pub icmp: bool,
    /// The ICMP type and code.
    pub icmp_type: u8,
    pub icmp_code: u8,
    /// The host that sent the ICMP message (its outer source address).
    pub offender: Option<std::net::IpAddr>,
    /// The destination of the datagram the message quotes (address and port).
    pub to: Option<std::net::SocketAddr>,
    /// How many bytes of the quoted datagram's payload were copied into the buffer.
    pub quoted: usize,
}

/// Room for an IP_RECVERR control message: a sock_extended_err and the offender's address.
const RECVERR_SPACE: usize = 128;

/// Reads one error from the socket's error queue (`recvmsg(MSG_ERRQUEUE)`), nonblocking: the
/// start of the quoted datagram's payload goes into `quote`. Err(WouldBlock) when the queue is
/// empty. Reading an error also clears the socket's pending error when no other is queued.
pub fn recv_error(fd: BorrowedFd<'_>, quote: &mut [u8]) -> io::Result<QueuedError> {
    // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
    let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut iov = libc::iovec {
        iov_base: quote.as_mut_ptr().cast(),
        iov_len: quote.len(),
    };
    // u64s: aligned for cmsghdr.
    let mut control = [0u64; RECVERR_SPACE / 8];
    // SAFETY: msghdr is plain data; zeroed is valid, and the fields set below point at the
    // address, iovec and control buffer above, which outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut name as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: recvmsg writes at most iov_len bytes into `quote`, msg_namelen into `name` and
    // msg_controllen into `control`; the descriptor is borrowed, so open.
    let n = check_size(unsafe {
        libc::recvmsg(
            fd.as_raw_fd(),
            &mut msg,
            libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
        )
    })?;
    let mut out = QueuedError {
        errno: 0,
        icmp: false,
        icmp_type: 0,
        icmp_code: 0,
        offender: None,
        to: sockaddr_to_std(&name),
        quoted: n.min(quote.len()),
    };
    // SAFETY: the CMSG_* macros walk the control buffer the kernel filled, within
    // msg_controllen; the sock_extended_err and the offender's sockaddr that follows it are read
    // unaligned from the message's data, only when the message is long enough to hold them.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let ours = ((*c).cmsg_level == libc::IPPROTO_IP && (*c).cmsg_type == libc::IP_RECVERR)
                || ((*c).cmsg_level == libc::IPPROTO_IPV6 && (*c).cmsg_type == libc::IPV6_RECVERR);
            let data = libc::CMSG_DATA(c);
            let len =
                ((*c).cmsg_len as usize).saturating_sub(data.offset_from(c.cast::<u8>()) as usize);
            let ee_size = std::mem::size_of::<libc::sock_extended_err>();
            if ours && len >= ee_size {
                let ee: libc::sock_extended_err = std::ptr::read_unaligned(data.cast());
                out.errno = ee.ee_errno as i32;
                out.icmp = ee.ee_origin == libc::SO_EE_ORIGIN_ICMP
                    || ee.ee_origin == libc::SO_EE_ORIGIN_ICMP6;
                out.icmp_type = ee.ee_type;
                out.icmp_code = ee.ee_code;
                let rest = len - ee_size;
                let mut offender: libc::sockaddr_storage = std::mem::zeroed();
                let copy = rest.min(std::mem::size_of::<libc::sockaddr_storage>());
                std::ptr::copy_nonoverlapping(
                    data.add(ee_size),
                    (&mut offender as *mut libc::sockaddr_storage).cast::<u8>(),
                    copy,
                );
                if copy >= std::mem::size_of::<libc::sockaddr_in>() {
                    out.offender = sockaddr_to_std(&offender).map(|a| a.ip());
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(out)
}

/// Room for one IPv4 or IPv6 packet-info control message.
const PKTINFO_SPACE: usize = 64;

fn sockaddr_to_std(ss: &libc::sockaddr_storage) -> Option<std::net::SocketAddr> {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
    match ss.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which it is large enough for.
            let a = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6, which it is large enough for.
            let a = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn std_to_sockaddr(addr: &std::net::SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        std::net::SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in.
            let sin = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            std::mem::size_of::<libc::sockaddr_in>()
        }
        std::net::SocketAddr::V6(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in6.
            let sin6 = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_scope_id = a.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// Where a datagram read by [`RecvBatch`] came from and went to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram {
    pub len: usize,
    /// The datagram did not fit the buffer and was cut (MSG_TRUNC).
    pub truncated: bool,
    pub from: std::net::SocketAddr,
    /// The address the sender wrote to (None without packet info), and the interface index.
    pub to: Option<(std::net::IpAddr, u32)>,
}

/// Sends one datagram to `to` from the local address `from` (packet info: IP_PKTINFO or
/// IPV6_PKTINFO with the interface index it came in on), or from the socket's own address when
/// `from` is None. Nonblocking.
pub fn send_from_to(
    fd: BorrowedFd<'_>,
    buf: &[u8],
    to: &std::net::SocketAddr,
    from: Option<(std::net::IpAddr, u32)>,
) -> io::Result<usize> {
    let (mut ss, len) = std_to_sockaddr(to);
    let mut control = [0u64; PKTINFO_SPACE / 8];
    let controllen = from.map_or(0, |from| write_pktinfo(&mut control, from));
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: plain old data, all zeroes is valid; the pointers are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut ss as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = len;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if controllen > 0 {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = controllen as _;
    }
    // SAFETY: every pointer in `msg` points to live memory of the length it gives (the data, the
    // address, the control area), all outliving the call; sendmsg only reads them.
    check_size(unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_DONTWAIT) })
}

/// Writes one packet-info control message (IP_PKTINFO or IPV6_PKTINFO) naming `from` as the
/// source address (and, for IPv6, its interface) into `control`; returns the control length.
fn write_pktinfo(
    control: &mut [u64; PKTINFO_SPACE / 8],
    (ip, ifindex): (std::net::IpAddr, u32),
) -> usize {
    // SAFETY: plain old data, all zeroes is valid; only the control fields are set, so that
    // CMSG_FIRSTHDR points at the start of `control`.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE only computes a size; the header written is inside `control` (64 bytes,
    // larger than either packet-info message's space), aligned for cmsghdr (u64 array), and its
    // data is written unaligned-safe as the type its level/type announce.
    unsafe {
        let (level, kind, data_len) = match ip {
            std::net::IpAddr::V4(_) => (
                libc::IPPROTO_IP,
                libc::IP_PKTINFO,
                std::mem::size_of::<libc::in_pktinfo>(),
            ),
            std::net::IpAddr::V6(_) => (
                libc::IPPROTO_IPV6,
                libc::IPV6_PKTINFO,
                std::mem::size_of::<libc::in6_pktinfo>(),
            ),
        };
        let space = libc::CMSG_SPACE(data_len as u32) as usize;
        msg.msg_controllen = space as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = level;
        (*c).cmsg_type = kind;
        (*c).cmsg_len = libc::CMSG_LEN(data_len as u32) as _;
        match ip {
            std::net::IpAddr::V4(v4) => {
                let info = libc::in_pktinfo {
                    ipi_ifindex: 0,
                    ipi_spec_dst: libc::in_addr {
                        s_addr: u32::from(v4).to_be(),
                    },
                    ipi_addr: libc::in_addr { s_addr: 0 },
                };
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::in_pktinfo>(), info);
            }
            std::net::IpAddr::V6(v6) => {
                let info = libc::in6_pktinfo {
                    ipi6_addr: libc::in6_addr {
                        s6_addr: v6.octets(),
                    },
                    ipi6_ifindex: ifindex,
                };
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::in6_pktinfo>(), info);
            }
        }
        space
    }
}

/// The most datagrams one [`SendBatch`] holds (one `sendmmsg`).
pub const SEND_BATCH_MAX: usize = 32;

/// Datagrams queued to be sent with one `sendmmsg` on one socket, each to its own destination
/// and from its own source address (packet info, as [`send_from_to`]). Made once per worker and
/// reused: each datagram is read straight into its slot ([`SendBatch::slot`]), then committed
/// ([`SendBatch::push`]); nothing is allocated per datagram, and of each slot's buffer only the
/// pages a datagram touches become resident. Plain data only (the kernel's arrays are built on
/// the stack per call).
pub struct SendBatch {
    size: usize,
    bufs: Box<[u8]>,
    names: Box<[libc::sockaddr_storage]>,
    /// Per datagram queued: payload length, address length, control length.
    lens: Box<[(usize, libc::socklen_t, usize)]>,
    controls: Box<[[u64; PKTINFO_SPACE / 8]]>,
    /// Per datagram after [`SendBatch::send`]: bytes sent, or the errno it met.
    results: Box<[Result<usize, i32>]>,
    count: usize,
}

impl SendBatch {
    /// Room for `count` datagrams (at most [`SEND_BATCH_MAX`]) of at most `size` bytes each.
    pub fn new(count: usize, size: usize) -> SendBatch {
        let count = count.clamp(1, SEND_BATCH_MAX);
        // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
        let zero: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        SendBatch {
            size,
            bufs: vec![0u8; count * size].into_boxed_slice(),
            names: vec![zero; count].into_boxed_slice(),
            lens: vec![(0, 0, 0); count].into_boxed_slice(),
            controls: vec![[0u64; PKTINFO_SPACE / 8]; count].into_boxed_slice(),
            results: vec![Ok(0); count].into_boxed_slice(),
            count: 0,
        }
    }

    /// Datagrams queued.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// No room for another datagram: send first.
    pub fn is_full(&self) -> bool {
        self.count == self.names.len()
    }

    /// The buffer of the next datagram (to read it into), None when the batch is full.
    pub fn slot(&mut self) -> Option<&mut [u8]> {
        if self.is_full() {
            return None;
        }
        let at = self.count * self.size;
        Some(&mut self.bufs[at..at + self.size])
    }

    /// Queues the next datagram: the first `len` bytes of its slot, to `to`, from `from` (None:
    /// the socket's own address). False when the batch is full.
    pub fn push(
        &mut self,
        len: usize,
        to: &std::net::SocketAddr,
        from: Option<(std::net::IpAddr, u32)>,
    ) -> bool {
        if self.is_full() {
            return false;
        }
        let i = self.count;
        let (ss, namelen) = std_to_sockaddr(to);
        self.names[i] = ss;
        let controllen = from.map_or(0, |from| write_pktinfo(&mut self.controls[i], from));
        self.lens[i] = (len.min(self.size), namelen, controllen);
        self.results[i] = Ok(0);
        self.count += 1;
        true
    }

    /// Copies `data` into the next slot and queues it ([`SendBatch::push`]); false when full.
    pub fn push_copy(
        &mut self,
        data: &[u8],
        to: &std::net::SocketAddr,
        from: Option<(std::net::IpAddr, u32)>,
    ) -> bool {
        let Some(buf) = self.slot() else {
            return false;
        };
        let n = data.len().min(buf.len());
        buf[..n].copy_from_slice(&data[..n]);
        self.push(n, to, from)
    }

    /// Reads up to `max` datagrams queued on the connected socket `fd` straight into the next
    /// slots with one `recvmmsg` (nonblocking: `WouldBlock` when none is), and queues each to `to`
    /// from `from` ([`SendBatch::push`]). Fewer than asked means the socket's queue is empty.
    /// Ok(0) only when the batch is full or `max` is 0.
    pub fn recv_queue(
        &mut self,
        fd: BorrowedFd<'_>,
        max: usize,
        to: &std::net::SocketAddr,
        from: Option<(std::net::IpAddr, u32)>,
    ) -> io::Result<usize> {
        let first = self.count;
        let n = max.min(self.names.len() - first);
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: iovec and mmsghdr are plain old data; all zeroes is valid, pointers set below.
        let mut iovs: [libc::iovec; SEND_BATCH_MAX] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; SEND_BATCH_MAX] = unsafe { std::mem::zeroed() };
        let base = self.bufs.as_mut_ptr();
        for k in 0..n {
            // SAFETY: slot `first + k` is inside `bufs` (count * size bytes long).
            iovs[k].iov_base = unsafe { base.add((first + k) * self.size) }.cast();
            iovs[k].iov_len = self.size;
            hdrs[k].msg_hdr.msg_iov = &mut iovs[k];
            hdrs[k].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: the first `n` headers point to live, writable slots of `size` bytes (no address,
        // no control area: the socket is connected), which outlive the call; the kernel writes at
        // most those lengths.
        let got = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        let got = (check(got)? as usize).min(n);
        if got > 0 {
            let (ss, namelen) = std_to_sockaddr(to);
            let mut control = [0u64; PKTINFO_SPACE / 8];
            let controllen = from.map_or(0, |from| write_pktinfo(&mut control, from));
            for (k, h) in hdrs[..got].iter().enumerate() {
                let i = first + k;
                self.names[i] = ss;
                self.controls[i] = control;
                self.lens[i] = ((h.msg_len as usize).min(self.size), namelen, controllen);
                self.results[i] = Ok(0);
            }
            self.count += got;
        }
        Ok(got)
    }

    /// Sends every queued datagram on `fd` (nonblocking): one `sendmmsg`, and after a partial one
    /// (the kernel stops at the first datagram that fails) another for the rest, the failed
    /// datagram skipped. Each datagram's outcome is then [`SendBatch::result`]. Returns the
    /// `sendmmsg` calls made. The batch stays queued until [`SendBatch::clear`].
    pub fn send(&mut self, fd: BorrowedFd<'_>) -> usize {
        let n = self.count;
        // SAFETY: iovec and mmsghdr are plain old data; all zeroes is valid, pointers set below.
        let mut iovs: [libc::iovec; SEND_BATCH_MAX] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; SEND_BATCH_MAX] = unsafe { std::mem::zeroed() };
        let base = self.bufs.as_mut_ptr();
        for i in 0..n {
            let (len, namelen, controllen) = self.lens[i];
            // SAFETY: `i * size` is inside `bufs` (count * size bytes long), and `len <= size`.
            iovs[i].iov_base = unsafe { base.add(i * self.size) }.cast();
            iovs[i].iov_len = len;
            let h = &mut hdrs[i].msg_hdr;
            h.msg_name = (&mut self.names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = namelen;
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            if controllen > 0 {
                h.msg_control = self.controls[i].as_mut_ptr().cast();
                h.msg_controllen = controllen as _;
            }
        }
        let mut start = 0;
        let mut calls = 0;
        while start < n {
            calls += 1;
            // SAFETY: headers `start..n` point to live memory of the lengths they give (each
            // datagram's bytes, address and control area), all outliving the call; the kernel
            // reads those and writes only each header's msg_len.
            let sent = unsafe {
                libc::sendmmsg(
                    fd.as_raw_fd(),
                    hdrs[start..n].as_mut_ptr(),
                    (n - start) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if sent < 0 {
                let err = io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO);
                if err == libc::EINTR {
                    continue;
                }
                // The first datagram failed: skip it, send the rest.
                self.results[start] = Err(err);
                start += 1;
                continue;
            }
            let sent = (sent as usize).min(n - start);
            if sent == 0 {
                self.results[start] = Err(libc::EIO);
                start += 1;
                continue;
            }
            let done = start..start + sent;
            for (r, h) in self.results[done.clone()].iter_mut().zip(&hdrs[done]) {
                *r = Ok(h.msg_len as usize);
            }
            start += sent;
        }
        calls
    }

    /// The outcome of datagram `i` of the last [`SendBatch::send`]: the bytes sent or the error.
    pub fn result(&self, i: usize) -> Option<io::Result<usize>> {
        if i >= self.count {
            return None;
        }
        Some(self.results[i].map_err(io::Error::from_raw_os_error))
    }

    /// Empties the batch (after its results were read).
    pub fn clear(&mut self) {
        self.count = 0;
    }
}

/// The most datagrams one [`RecvBatch::recv`] reads.
pub const BATCH_MAX: usize = 16;

/// Buffers for reading up to [`BATCH_MAX`] datagrams with one `recvmmsg`, each with its source and
/// (after [`set_recv_pktinfo`]) its destination. Made once per worker and reused: reading
/// allocates nothing. Plain data only (the kernel's pointer arrays are built on the stack per call).
pub struct RecvBatch {
    size: usize,
    bufs: Box<[u8]>,
    names: Box<[libc::sockaddr_storage]>,
    controls: Box<[[u64; PKTINFO_SPACE / 8]]>,
    /// Per datagram read: length, flags, control length.
    got: Box<[(usize, libc::c_int, usize)]>,
    count: usize,
}

impl RecvBatch {
    /// `count` datagrams (at most [`BATCH_MAX`]) of at most `size` bytes each.
    pub fn new(count: usize, size: usize) -> RecvBatch {
        let count = count.clamp(1, BATCH_MAX);
        // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
        let zero: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        RecvBatch {
            size,
            bufs: vec![0u8; count * size].into_boxed_slice(),
            names: vec![zero; count].into_boxed_slice(),
            controls: vec![[0u64; PKTINFO_SPACE / 8]; count].into_boxed_slice(),
            got: vec![(0, 0, 0); count].into_boxed_slice(),
            count: 0,
        }
    }

    /// Reads what is queued, up to the batch's size (nonblocking: `WouldBlock` when nothing is).
    pub fn recv(&mut self, fd: BorrowedFd<'_>) -> io::Result<usize> {
        let n = self.names.len();
        // SAFETY: iovec and mmsghdr are plain old data; all zeroes is valid, pointers set below.
        let mut iovs: [libc::iovec; BATCH_MAX] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; BATCH_MAX] = unsafe { std::mem::zeroed() };
        let base = self.bufs.as_mut_ptr();
        for i in 0..n {
            // SAFETY: `i * size` is inside `bufs` (count * size bytes long).
            iovs[i].iov_base = unsafe { base.add(i * self.size) }.cast();
            iovs[i].iov_len = self.size;
            let h = &mut hdrs[i].msg_hdr;
            h.msg_name = (&mut self.names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = self.controls[i].as_mut_ptr().cast();
            h.msg_controllen = PKTINFO_SPACE as _;
        }
        // SAFETY: the first `n` headers point to live, writable memory of the lengths they give
        // (each datagram's slice of `bufs`, its address storage, its control area), all of which
        // outlive the call; the kernel writes at most those lengths.
        let got = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        let got = check(got)? as usize;
        // msg_controllen is size_t with glibc and socklen_t with musl: the cast is for the latter.
        #[allow(clippy::unnecessary_cast)]
        for (slot, h) in self.got.iter_mut().zip(&hdrs[..got]) {
            *slot = (
                h.msg_len as usize,
                h.msg_hdr.msg_flags,
                h.msg_hdr.msg_controllen as usize,
            );
        }
        self.count = got;
        Ok(got)
    }

    /// Datagram `i` of the last read: where it came from and went to, and its bytes.
    pub fn get(&self, i: usize) -> Option<(Datagram, &[u8])> {
        if i >= self.count {
            return None;
        }
        let (len, flags, controllen) = self.got[i];
        let from = sockaddr_to_std(&self.names[i])?;
        let to = parse_pktinfo(&self.controls[i], controllen);
        let len = len.min(self.size);
        let data = &self.bufs[i * self.size..i * self.size + len];
        Some((
            Datagram {
                len,
                truncated: flags & libc::MSG_TRUNC != 0,
                from,
                to,
            },
            data,
        ))
    }
}

/// The destination address in a control area filled by the kernel (`controllen` bytes of it).
fn parse_pktinfo(
    control: &[u64; PKTINFO_SPACE / 8],
    controllen: usize,
) -> Option<(std::net::IpAddr, u32)> {
    // SAFETY: plain old data, all zeroes is valid; only the control fields are set, so the
    // CMSG macros walk `control` within `controllen` (capped at its size).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_control = control.as_ptr() as *mut libc::c_void;
    msg.msg_controllen = controllen.min(PKTINFO_SPACE) as _;
    let mut to = None;
    // SAFETY: the kernel wrote well-formed control messages into `control`; CMSG_FIRSTHDR and
    // CMSG_NXTHDR stay within msg_controllen, and each message's data is read unaligned as the type
    // its level and type announce.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let h = &*c;
            if h.cmsg_level == libc::IPPROTO_IP && h.cmsg_type == libc::IP_PKTINFO {
                let info = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::in_pktinfo>());
                let ip = std::net::Ipv4Addr::from(u32::from_be(info.ipi_addr.s_addr));
                to = Some((std::net::IpAddr::V4(ip), info.ipi_ifindex as u32));
            } else if h.cmsg_level == libc::IPPROTO_IPV6 && h.cmsg_type == libc::IPV6_PKTINFO {
                let info = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::in6_pktinfo>());
                let ip = std::net::Ipv6Addr::from(info.ipi6_addr.s6_addr);
                to = Some((std::net::IpAddr::V6(ip), info.ipi6_ifindex));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    to
}

#[cfg(test)]
mod udp_tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    #[test]
    fn a_batch_reads_queued_datagrams_with_their_source_and_destination() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        set_recv_pktinfo(server.as_fd(), false).unwrap();
        let to = server.local_addr().unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        for msg in [&b"one"[..], b"two", b"three"] {
            client.send_to(msg, to).unwrap();
        }
        let mut batch = RecvBatch::new(BATCH_MAX, 2048);
        let mut seen = Vec::new();
        // Loopback delivers at once, but give the kernel a few tries (bounded).
        for _ in 0..100 {
            match batch.recv(server.as_fd()) {
                Ok(n) => {
                    for i in 0..n {
                        let (dg, data) = batch.get(i).unwrap();
                        assert_eq!(dg.from, client.local_addr().unwrap());
                        assert_eq!(dg.to.map(|(ip, _)| ip), Some(to.ip()));
                        assert!(!dg.truncated);
                        seen.push(data.to_vec());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
            if seen.len() == 3 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(
            seen,
            vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]
        );
        assert!(batch.get(3).is_none());
        // A reply leaves from the address the datagram went to.
        send_from_to(
            server.as_fd(),
            b"back",
            &client.local_addr().unwrap(),
            Some((to.ip(), 0)),
        )
        .unwrap();
        let mut buf = [0u8; 16];
        client
            .set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        let (n, from) = client.recv_from(&mut buf).unwrap();
        assert_eq!((&buf[..n], from), (&b"back"[..], to));
    }

    #[test]
    fn a_send_batch_delivers_each_datagram_to_its_own_client_and_skips_a_failed_one() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let from = server.local_addr().unwrap();
        let clients: Vec<UdpSocket> = (0..5)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        let mut batch = SendBatch::new(6, 2048);
        assert!(batch.is_empty());
        // Client 2's datagram goes to port 0, which the kernel refuses (EINVAL): the datagrams
        // after it must still leave (a partial sendmmsg resumes after the failed one).
        let bad: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
        for (i, c) in clients.iter().enumerate() {
            let to = if i == 2 { bad } else { c.local_addr().unwrap() };
            let data = format!("reply {i}").into_bytes();
            if i % 2 == 0 {
                assert!(batch.push_copy(&data, &to, Some((from.ip(), 0))));
            } else {
                let slot = batch.slot().unwrap();
                slot[..data.len()].copy_from_slice(&data);
                assert!(batch.push(data.len(), &to, None));
            }
        }
        assert_eq!(batch.len(), 5);
        assert!(
            batch.send(server.as_fd()) >= 2,
            "a failure needs a second call"
        );
        for (i, c) in clients.iter().enumerate() {
            let result = batch.result(i).unwrap();
            if i == 2 {
                assert!(result.is_err(), "port 0 was accepted");
                continue;
            }
            assert_eq!(result.unwrap(), format!("reply {i}").len());
            c.set_read_timeout(Some(std::time::Duration::from_secs(2)))
                .unwrap();
            let mut buf = [0u8; 64];
            let (n, src) = c.recv_from(&mut buf).unwrap();
            assert_eq!(src, from);
            assert_eq!(&buf[..n], format!("reply {i}").as_bytes());
        }
        assert!(batch.result(5).is_none());
        batch.clear();
        assert!(batch.is_empty());
        // Full at its size: a seventh datagram is refused until the batch is sent.
        let to = clients[0].local_addr().unwrap();
        for _ in 0..6 {
            assert!(batch.push_copy(b"x", &to, None));
        }
        assert!(batch.is_full());
        assert!(batch.slot().is_none());
        assert!(!batch.push_copy(b"y", &to, None));
        assert_eq!(batch.send(server.as_fd()), 1);
        for i in 0..6 {
            assert_eq!(batch.result(i).unwrap().unwrap(), 1);
        }
    }

    #[test]
    fn a_send_batch_reads_queued_replies_into_its_slots_at_most_as_many_as_asked() {
        // A connected socket (a flow's) with three replies queued: read two, then the rest.
        let flow = UdpSocket::bind("127.0.0.1:0").unwrap();
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        flow.connect(peer.local_addr().unwrap()).unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        let listen = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = client.local_addr().unwrap();
        let mut batch = SendBatch::new(4, 2048);
        assert_eq!(
            batch
                .recv_queue(flow.as_fd(), 2, &to, None)
                .map_err(|e| e.kind()),
            Err(io::ErrorKind::WouldBlock)
        );
        for msg in [&b"a1"[..], b"b22", b"c333"] {
            peer.send_to(msg, flow.local_addr().unwrap()).unwrap();
        }
        let mut got = 0;
        for _ in 0..100 {
            match batch.recv_queue(
                flow.as_fd(),
                2 - got,
                &to,
                Some((listen.local_addr().unwrap().ip(), 0)),
            ) {
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
            if got == 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(batch.len(), 2);
        assert_eq!(batch.recv_queue(flow.as_fd(), 5, &to, None).unwrap(), 1);
        assert_eq!(batch.len(), 3);
        assert_eq!(batch.send(listen.as_fd()), 1);
        client
            .set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        let mut buf = [0u8; 64];
        for want in [&b"a1"[..], b"b22", b"c333"] {
            let (n, from) = client.recv_from(&mut buf).unwrap();
            assert_eq!((&buf[..n], from), (want, listen.local_addr().unwrap()));
        }
    }
}
