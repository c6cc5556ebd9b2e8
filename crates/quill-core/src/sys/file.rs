//! The file calls of the web server, wrapped: opening a name that can never resolve outside its
//! root (`openat2` with `RESOLVE_BENEATH`), a file's metadata (`statx`, `fstat` where the kernel
//! or a sandbox refuses it), the reads and sends of a body (`sendfile`, `pread`, `preadv2` with
//! `RWF_NOWAIT`, `send` with `MSG_MORE`) and a directory's entries with their metadata. Part of
//! `sys`; every call goes through rustix's safe wrappers, so this file holds no `unsafe`.
//!
//! Containment is the kernel's: a relative name is resolved component by component against the
//! root descriptor, and `RESOLVE_BENEATH` refuses (`EXDEV`) any step, `..` or symlink, that would
//! leave it, even when the tree changes between the check and the use, which no check on the
//! string can promise. Where the kernel has no `openat2` (Linux before 5.6, or a seccomp filter
//! that refuses it), the lookup is done a component at a time with `O_NOFOLLOW` instead: no
//! symlink is followed at all and `..` is refused, so the containment holds, and `Inside` serves
//! as `None` does there.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, StatxFlags};
use rustix::io::{Errno, ReadWriteFlags};
use rustix::net::SendFlags;

/// Which symlinks [`open_beneath`] follows: the operator's choice for a static root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Links {
    /// Symlinks whose target stays under the root (`RESOLVE_BENEATH`): the safe default.
    Inside,
    /// No symlink at all, anywhere on the path (`RESOLVE_NO_SYMLINKS`).
    None,
    /// Any symlink, wherever it points (plain `openat`): the root is a starting point, not a
    /// boundary, for a tree the operator builds out of links on purpose.
    Anywhere,
}

/// What a name is, as far as the file server cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file: the only kind with a body to send.
    Regular,
    /// A directory: an index file, a listing or a refusal.
    Dir,
    /// Anything else (FIFO, socket, device, a symlink that cannot be followed): never served.
    Other,
}

/// A file's metadata, read once from its open descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileInfo {
    pub kind: FileKind,
    /// Bytes (regular files); what the file system says for the other kinds.
    pub size: u64,
    /// Last modification, seconds since the Unix epoch (negative before it).
    pub mtime_sec: i64,
    /// Nanoseconds past `mtime_sec`, below one billion.
    pub mtime_nsec: u32,
    /// The device and inode: the identity of the file for a cache (a file replaced under the same
    /// name has another inode). Never part of an ETag: they differ between machines serving the
    /// same tree.
    pub dev: u64,
    pub ino: u64,
    /// The file system's preferred I/O size, when it gives one.
    pub blksize: Option<u32>,
}

/// One entry of a directory, as [`read_dir`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The name's bytes, as the file system holds them (not necessarily UTF-8).
    pub name: Vec<u8>,
    /// The kind of what the name leads to (a symlink's target when it can be followed).
    pub kind: FileKind,
    /// The size of a regular file; `None` for the other kinds and for a link not followed.
    pub size: Option<u64>,
    /// Last modification, Unix seconds; `None` when the entry could not be examined.
    pub mtime: Option<i64>,
}

/// Times `openat2` is tried again when it answers `EAGAIN`: with `RESOLVE_BENEATH` the kernel
/// gives that when a rename or mount elsewhere raced the lookup. A few tries, then the error.
const OPEN_RETRIES: usize = 4;

/// Opens `rel`, a relative name (no leading `/`; `""` or `"."` is the root itself), under the
/// directory `root`, read-only, close-on-exec, never as a controlling terminal and nonblocking
/// (a FIFO opens at once instead of waiting for a writer). With [`Links::Inside`] or
/// [`Links::None`] no step of the lookup may leave `root` (`..` above it, an absolute or escaping
/// symlink, a magic link of `/proc`): the kernel answers `EXDEV` (or `ELOOP` for a symlink under
/// `None`). An absolute `rel` is refused as `InvalidInput` whatever the policy.
pub fn open_beneath(root: BorrowedFd<'_>, rel: &[u8], links: Links) -> io::Result<OwnedFd> {
    if rel.first() == Some(&b'/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "open_beneath: the name is absolute",
        ));
    }
    let rel: &[u8] = if rel.is_empty() { b"." } else { rel };
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
    let resolve = match links {
        Links::Anywhere => return Ok(rustix::fs::openat(root, rel, flags, Mode::empty())?),
        Links::Inside => ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        Links::None => {
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS | ResolveFlags::NO_SYMLINKS
        }
    };
    openat2_retrying(root, rel, flags, resolve)
}

/// Set once `openat2` answered that the kernel (or a sandbox) does not have it: later lookups
/// go straight to [`open_walk`].
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Whether this process found `openat2` missing, so that symlinks under an `Inside` root are not
/// followed (for the operator's log).
pub fn openat2_missing() -> bool {
    NO_OPENAT2.load(Ordering::Relaxed)
}

/// `openat2`, tried again a bounded number of times on `EAGAIN` (a concurrent rename or mount);
/// [`open_walk`] where the kernel has none.
fn openat2_retrying(
    dir: BorrowedFd<'_>,
    rel: &[u8],
    flags: OFlags,
    resolve: ResolveFlags,
) -> io::Result<OwnedFd> {
    if NO_OPENAT2.load(Ordering::Relaxed) {
        return open_walk(dir, rel, flags);
    }
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(dir, rel, flags, Mode::empty(), resolve) {
            Err(Errno::AGAIN) if tries + 1 < OPEN_RETRIES => tries += 1,
            // ENOSYS: no such call (Linux < 5.6); EPERM: an old container runtime's seccomp
            // filter, which answers that for every call it does not know.
            Err(Errno::NOSYS | Errno::PERM) => {
                NO_OPENAT2.store(true, Ordering::Relaxed);
                return open_walk(dir, rel, flags);
            }
            other => return Ok(other?),
        }
    }
}

/// `rel` under `root` without `openat2`: one component at a time, each directory opened with
/// `O_PATH | O_DIRECTORY | O_NOFOLLOW` and the last with `flags | O_NOFOLLOW`, so no symlink is
/// followed anywhere on the path (`ELOOP` or `ENOTDIR`), and a `..` component is refused
/// (`EXDEV`): nothing outside `root` can be reached, whatever the tree holds.
fn open_walk(root: BorrowedFd<'_>, rel: &[u8], flags: OFlags) -> io::Result<OwnedFd> {
    let mut parts = rel
        .split(|&b| b == b'/')
        .filter(|p| !p.is_empty() && *p != b".")
        .peekable();
    let mut dir: Option<OwnedFd> = None;
    while let Some(part) = parts.next() {
        if part == b".." {
            return Err(Errno::XDEV.into());
        }
        let at = dir.as_ref().map_or(root, |d| d.as_fd());
        let last = parts.peek().is_none();
        let how = if last {
            flags | OFlags::NOFOLLOW
        } else {
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
        };
        let fd = rustix::fs::openat(at, part, how, Mode::empty())?;
        if last {
            return Ok(fd);
        }
        dir = Some(fd);
    }
    // No component but `.`: the root itself.
    Ok(rustix::fs::openat(root, ".", flags, Mode::empty())?)
}

/// The kind of a file from its type.
fn kind_of(file_type: FileType) -> FileKind {
    match file_type {
        FileType::RegularFile => FileKind::Regular,
        FileType::Directory => FileKind::Dir,
        _ => FileKind::Other,
    }
}

/// The answers of `statx` that mean "not here" (an old kernel, or a seccomp filter of an old
/// container runtime): the caller asks `fstat`/`fstatat` instead.
fn statx_unavailable(e: Errno) -> bool {
    e == Errno::NOSYS || e == Errno::PERM
}

/// `statx` of `name` relative to `dir` (`""` with `AT_EMPTY_PATH`: `dir` itself), or the older
/// `fstatat` where `statx` is unavailable; with the exact type (a symlink is told apart when
/// `flags` has `AT_SYMLINK_NOFOLLOW`).
fn stat_at(dir: BorrowedFd<'_>, name: &[u8], flags: AtFlags) -> io::Result<(FileInfo, FileType)> {
    let mask = StatxFlags::TYPE | StatxFlags::SIZE | StatxFlags::MTIME | StatxFlags::INO;
    match rustix::fs::statx(dir, name, flags | AtFlags::NO_AUTOMOUNT, mask) {
        Ok(x) => {
            let file_type = FileType::from_raw_mode(u32::from(x.stx_mode));
            let info = FileInfo {
                kind: kind_of(file_type),
                size: x.stx_size,
                mtime_sec: x.stx_mtime.tv_sec,
                mtime_nsec: x.stx_mtime.tv_nsec,
                dev: rustix::fs::makedev(x.stx_dev_major, x.stx_dev_minor),
                ino: x.stx_ino,
                blksize: (x.stx_blksize > 0).then_some(x.stx_blksize),
            };
            Ok((info, file_type))
        }
        Err(e) if statx_unavailable(e) => {
            let st = if name.is_empty() {
                rustix::fs::fstat(dir)?
            } else {
                rustix::fs::statat(dir, name, flags)?
            };
            let file_type = FileType::from_raw_mode(st.st_mode);
            let info = FileInfo {
                kind: kind_of(file_type),
                size: st.st_size.max(0) as u64,
                mtime_sec: st.st_mtime,
                mtime_nsec: st.st_mtime_nsec.clamp(0, 999_999_999) as u32,
                dev: st.st_dev,
                ino: st.st_ino,
                blksize: u32::try_from(st.st_blksize).ok().filter(|&b| b > 0),
            };
            Ok((info, file_type))
        }
        Err(e) => Err(e.into()),
    }
}

/// The metadata of an open file: kind, size, modification time, identity.
pub fn file_info(fd: BorrowedFd<'_>) -> io::Result<FileInfo> {
    Ok(stat_at(fd, b"", AtFlags::EMPTY_PATH)?.0)
}

/// The metadata of `rel` relative to `dir` by name, without opening it (`statx`): for checking
/// that a file opened before beneath `dir` is still the one at that name. This is no
/// containment check: the name may resolve anywhere (links are followed, except a link in the
/// last component when `follow` is false), so only an identity equal to the opened file's
/// (device, inode, size, time) says anything, and then it names that same file.
pub fn file_info_at(dir: BorrowedFd<'_>, rel: &[u8], follow: bool) -> io::Result<FileInfo> {
    let mut flags = if follow {
        AtFlags::empty()
    } else {
        AtFlags::SYMLINK_NOFOLLOW
    };
    if rel.is_empty() {
        flags |= AtFlags::EMPTY_PATH;
    }
    Ok(stat_at(dir, rel, flags)?.0)
}

/// Sends up to `count` bytes of `file`, from `*offset`, to the socket `out`, inside the kernel;
/// `*offset` moves past what was sent (the file's own position never moves). Nonblocking as `out`
/// is: `WouldBlock` when the socket's buffer is full. `Ok(0)` when `*offset` is at or past the end.
pub fn sendfile(
    out: BorrowedFd<'_>,
    file: BorrowedFd<'_>,
    offset: &mut u64,
    count: usize,
) -> io::Result<usize> {
    Ok(rustix::fs::sendfile(out, file, Some(offset), count)?)
}

/// Reads up to `buf.len()` bytes of `fd` at `offset` (the file's position does not move);
/// `Ok(0)` at the end. May block on a disk read.
pub fn pread(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    Ok(rustix::io::pread(fd, buf, offset)?)
}

/// Reads like [`pread`] but only what is in the page cache (`preadv2` with `RWF_NOWAIT`):
/// `Ok(None)` when the first page would need the disk (`EAGAIN`), `Ok(Some(n))` for the bytes
/// that were resident (possibly fewer than asked, `0` at the end). A file system that cannot
/// tell answers `Unsupported` (`EOPNOTSUPP`): the caller then reads with [`pread`] off the event
/// loop.
pub fn pread_nowait(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<Option<usize>> {
    let mut bufs = [io::IoSliceMut::new(buf)];
    match rustix::io::preadv2(fd, &mut bufs, offset, ReadWriteFlags::NOWAIT) {
        Ok(n) => Ok(Some(n)),
        Err(Errno::AGAIN) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Sends `buf` on a stream socket telling the kernel more follows (`MSG_MORE`: a response head
/// waits to share a segment with the body's first bytes), never raising `SIGPIPE` on a closed
/// peer (`MSG_NOSIGNAL`: `BrokenPipe` instead). Nonblocking as the socket is.
pub fn send_more(sock: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    Ok(rustix::net::send(
        sock,
        buf,
        SendFlags::MORE | SendFlags::NOSIGNAL,
    )?)
}

/// Lists the directory `dir`, at most `max` entries (without `.` and `..`), in the order the file
/// system gives them. Each entry is examined relative to `dir`: a symlink is followed when its
/// target stays beneath `dir` (looked up with `RESOLVE_BENEATH`, so the listing never tells the
/// size or time of a file outside the directory: a link to a sibling directory of the root counts
/// as escaping here); a dangling or escaping link is listed as [`FileKind::Other`] without size.
/// An entry removed between the read and its examination is left out. `dir` keeps its position: the
/// listing reads through a descriptor of its own.
pub fn read_dir(dir: BorrowedFd<'_>, max: usize) -> io::Result<Vec<DirEntry>> {
    let mut out = Vec::new();
    if max == 0 {
        return Ok(out);
    }
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if let Some(listed) = examine(dir, name)? {
            out.push(listed);
            if out.len() >= max {
                break;
            }
        }
    }
    Ok(out)
}

/// One entry of [`read_dir`]: `None` when it vanished before it could be examined.
fn examine(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<Option<DirEntry>> {
    let (own, file_type) = match stat_at(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(found) => found,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(_) => return Ok(Some(unexamined(name, None))),
    };
    let info = if file_type == FileType::Symlink {
        follow_beneath(dir, name)
    } else {
        Some(own)
    };
    Ok(Some(match info {
        Some(info) => DirEntry {
            name: name.to_vec(),
            kind: info.kind,
            size: (info.kind == FileKind::Regular).then_some(info.size),
            mtime: Some(info.mtime_sec),
        },
        None => unexamined(name, Some(own.mtime_sec)),
    }))
}

/// An entry listed without what it leads to.
fn unexamined(name: &[u8], mtime: Option<i64>) -> DirEntry {
    DirEntry {
        name: name.to_vec(),
        kind: FileKind::Other,
        size: None,
        mtime,
    }
}

/// The metadata of a symlink's target when it resolves beneath `dir` (an `O_PATH` descriptor:
/// nothing is opened for reading, a FIFO does not block); `None` for a dangling or escaping link.
fn follow_beneath(dir: BorrowedFd<'_>, name: &[u8]) -> Option<FileInfo> {
    let flags = OFlags::PATH | OFlags::CLOEXEC;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    let fd = openat2_retrying(dir, name, flags, resolve).ok()?;
    file_info(fd.as_fd()).ok()
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
