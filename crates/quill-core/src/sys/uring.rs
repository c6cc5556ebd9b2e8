//! A worker's io_uring for accepting: one multishot accept per listening socket, each under a key
//! of the caller's (the completions carry it), cancelled synchronously, and the accepted
//! descriptors reaped from the completion queue without a system call. The ring's descriptor is
//! pollable: it reads ready while completions wait, so the worker's epoll instance watches it.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use io_uring::types::{CancelBuilder, Fd};
use io_uring::{cqueue, opcode, IoUring};

/// Submission queue entries: one per accept armed or cancelled at a time is plenty.
const SQ_ENTRIES: u32 = 16;
/// Completion queue entries: accepted connections waiting for the worker's next turn. Past this
/// the kernel keeps them aside (`IORING_FEAT_NODROP`) and [`AcceptRing::take`] flushes them.
const CQ_ENTRIES: u32 = 1024;

/// Set (to anything) in the environment, makes [`AcceptRing::new`] fail as a kernel that refuses
/// io_uring would (`kernel.io_uring_disabled`, a seccomp filter): the tests of the fallback to
/// epoll set it. Documented in quill.toml(5).
const URING_REFUSED_ENV: &str = "QUILL_TEST_IO_URING_REFUSED";

/// One completion of a multishot accept.
#[derive(Debug)]
pub struct Accepted {
    /// The key the accept was armed with.
    pub key: u64,
    /// The accepted socket (nonblocking, close-on-exec), or why accepting failed.
    pub result: io::Result<OwnedFd>,
    /// Whether the accept stays armed; false: it has ended (an error, a cancel, or the kernel
    /// stopped it) and must be armed again to go on accepting.
    pub armed: bool,
}

/// A ring that accepts on listening sockets.
pub struct AcceptRing {
    ring: IoUring,
    /// A submission failed with an entry queued: the ring is not submitted to again (the entry
    /// names a listener by descriptor number, which may since have been closed and reused).
    broken: bool,
}

impl std::fmt::Debug for AcceptRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcceptRing")
            .field("fd", &self.ring.as_raw_fd())
            .finish()
    }
}

impl AcceptRing {
    /// A new ring. The thread that arms accepts on it is the one the kernel completes them on:
    /// arm them from the thread that reaps them.
    pub fn new() -> io::Result<AcceptRing> {
        if std::env::var_os(URING_REFUSED_ENV).is_some() {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        let ring = IoUring::builder()
            .setup_cqsize(CQ_ENTRIES)
            .build(SQ_ENTRIES)?;
        // Multishot accept needs Linux 5.19 and the synchronous cancel 6.0: a kernel older than
        // that refuses this cancel of nothing (EINVAL), and the ring is not used (`auto` then
        // accepts through epoll), rather than one whose accepts fail or cannot be let go of.
        match ring
            .submitter()
            .register_sync_cancel(None, CancelBuilder::user_data(u64::MAX))
        {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("no synchronous cancel (Linux 6.0 or later is needed): {e}"),
                ))
            }
        }
        Ok(AcceptRing {
            ring,
            broken: false,
        })
    }

    fn usable(&self) -> io::Result<()> {
        if self.broken {
            return Err(io::Error::other("the io_uring failed a submission before"));
        }
        Ok(())
    }

    /// Submits what is queued; a failure leaves the ring broken (see `broken`).
    fn submit(&mut self) -> io::Result<()> {
        self.ring
            .submit()
            .map(drop)
            .inspect_err(|_| self.broken = true)
    }

    /// Arms a multishot accept on `listener` under `key`: every client it accepts completes
    /// with `key` until it is cancelled or ends.
    pub fn accept(&mut self, listener: BorrowedFd<'_>, key: u64) -> io::Result<()> {
        self.usable()?;
        let entry = opcode::AcceptMulti::new(Fd(listener.as_raw_fd()))
            .flags(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
            .build()
            .user_data(key);
        // SAFETY: a multishot accept without an address buffer names no memory of ours; the
        // kernel takes its own reference on the listening socket's file when it reads the entry,
        // which `submit` below does while `listener` is borrowed, so before it can be closed. If
        // that submission fails the entry stays queued, and the ring is marked broken: it is
        // never submitted to again.
        let pushed = unsafe { self.ring.submission().push(&entry) };
        if pushed.is_err() {
            // Full: what is queued goes in first, then there is room.
            self.submit()?;
            // SAFETY: as above.
            unsafe { self.ring.submission().push(&entry) }
                .map_err(|_| io::Error::other("io_uring submission queue full"))?;
        }
        self.submit()
    }

    /// Cancels the accept armed under `key` and waits until it is: no client is accepted under
    /// `key` after this returns. Its completions so far (and the last one, that says it ended)
    /// wait in the queue for [`AcceptRing::take`]. None armed is not an error.
    pub fn cancel(&mut self, key: u64) -> io::Result<()> {
        match self
            .ring
            .submitter()
            .register_sync_cancel(None, CancelBuilder::user_data(key).all())
        {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// Moves every completion waiting (those the kernel kept aside when the queue was full
    /// included) to `out`.
    pub fn take(&mut self, out: &mut Vec<Accepted>) -> io::Result<()> {
        loop {
            for cqe in self.ring.completion() {
                let fd = cqe.result();
                let result = if fd >= 0 {
                    // SAFETY: a successful accept's result is a new descriptor that nothing
                    // else owns; it is owned from here on.
                    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
                } else {
                    Err(io::Error::from_raw_os_error(-fd))
                };
                out.push(Accepted {
                    key: cqe.user_data(),
                    result,
                    armed: cqueue::more(cqe.flags()),
                });
            }
            if !self.ring.submission().cq_overflow() {
                return Ok(());
            }
            // An enter flushes what the kernel kept aside into the queue now emptied.
            self.usable()?;
            self.submit()?;
        }
    }
}

impl Drop for AcceptRing {
    /// Cancels every accept still armed and closes the clients accepted that nobody took (their
    /// descriptors would otherwise stay open until the process ends).
    fn drop(&mut self) {
        let _ = self
            .ring
            .submitter()
            .register_sync_cancel(None, CancelBuilder::any());
        let mut left = Vec::new();
        let _ = self.take(&mut left);
    }
}

impl AsFd for AcceptRing {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.ring.as_fd()
    }
}
