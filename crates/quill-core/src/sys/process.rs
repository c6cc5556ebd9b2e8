//! The process's own settings, wrapped: the open-file limit, the user database and the drop of
//! privileges (chroot, groups, gid, uid), the network namespace of the calling thread, the clock
//! tick, the monotonic clock (for the product's `clock`), and glibc's heap trim. Part of `sys`,
//! the one home of `unsafe`.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::Path;

use super::check;

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

/// Moves the calling thread into the network namespace `ns` (an open `/run/netns/NAME` or
/// `/proc/PID/ns/net`): sockets it creates from then on belong to that namespace, and keep it
/// wherever they are used. Other threads are not affected. For tests and benchmarks that build
/// several hosts out of namespaces; needs CAP_SYS_ADMIN.
pub fn enter_netns(ns: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: setns takes a descriptor borrowed for the call and a constant; it changes only the
    // calling thread's namespace.
    check(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }).map(|_| ())
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

/// `CLOCK_MONOTONIC` (the clock `std::time::Instant` reads) in microseconds, through glibc's vDSO
/// call, without `Instant`'s checked subtraction and `Duration` arithmetic: a worker reads it
/// twice a turn.
pub fn monotonic_us() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec the call writes and nothing else holds.
    let ret = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    // CLOCK_MONOTONIC exists on every Linux; were it missing, no deadline could be kept, and
    // this stops as loudly as `Instant::now` would (a zero would stop every timer silently).
    assert_eq!(ret, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    // Both fields are non-negative for CLOCK_MONOTONIC (time since boot).
    (t.tv_sec as u64) * 1_000_000 + (t.tv_nsec as u64) / 1000
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
