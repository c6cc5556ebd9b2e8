//! Packet sockets (AF_PACKET) for direct server return: opening one on an interface, reading and
//! sending single frames, the TPACKET_V3 receive ring ([`PacketRing`]) and batched sends
//! ([`packet_send_many`]). Part of `sys`, the one home of `unsafe`.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::{check, check_size, setsockopt_int};

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
    if block_nr == 0 || block_size < 4096 || !block_size.is_multiple_of(4096) {
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
