//! UDP with addresses: the packet info that tells a wildcard listener where a datagram went
//! (and makes a reply leave from there), the ICMP error queue ([`recv_error`]), and the batches a
//! worker reads and sends datagrams with ([`RecvBatch`], [`SendBatch`]). Part of `sys`, the one
//! home of `unsafe`.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::{check, check_size, setsockopt_int};

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
mod tests {
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
