//! The worker's open-file cache (docs/web.md#the-file-cache): what a file under a static root
//! is (its size, modification time, ETag, content type and precompressed siblings), with its
//! bytes for a small file and its open descriptor for a larger one, so that a request for a
//! cached file costs no `openat`, no `stat` and (small files) no read.
//!
//! Per worker, so no lock: each worker holds its own entries. An entry is trusted for
//! [`VALID_MS`]; the first request after that looks the path up again with `statx` (by name, no
//! open) and compares device, inode, size and time with the entry (a deploy that renamed a new
//! file in place shows as another inode), and loads it again, opened beneath the root, on any
//! change. The `statx` is no containment check and needs none: only the very file that was
//! opened beneath the root matches. Bounded: at most `max_entries` entries and `max_bytes` bytes of content per worker,
//! the least recently used going first; the descriptors of all workers together stay inside a
//! process-wide budget ([`FdBudget`]) taken from the `-x` reserve. Past the budget a large file
//! is opened for its request only and closed after it.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use quill_core::files::coding::Coding;
use quill_core::files::etag::{self, Etag};
use quill_core::files::{date, mime};
use quill_core::sys::{self as sysfile, FileInfo, FileKind, Links};

use crate::config::{StaticAction, Symlinks};
use crate::metrics::FileCacheCounts;
use crate::route::StaticRoot;

/// How long an entry is trusted without looking at the file again (as lighttpd's stat cache).
pub(crate) const VALID_MS: u64 = 1000;
/// Files up to this size are kept in memory and sent without a descriptor.
pub(crate) const SMALL_FILE: u64 = 16 * 1024;

/// One representation of a file: the file itself or one of its precompressed siblings.
#[derive(Debug)]
pub(crate) struct Rep {
    pub size: u64,
    /// Seconds since the epoch (`Last-Modified`, `If-Modified-Since`).
    pub mtime: i64,
    pub etag: Etag,
    /// `Last-Modified`'s value.
    pub last_modified: [u8; 29],
    pub body: Body,
}

/// Where a representation's bytes are.
#[derive(Debug)]
pub(crate) enum Body {
    /// A small file, read once.
    Bytes(Box<[u8]>),
    /// A larger file, open; counted in the descriptor budget while cached.
    File(Fd),
}

/// An open file of the cache, its budget slot given back when the last holder drops it.
#[derive(Debug)]
pub(crate) struct Fd {
    fd: OwnedFd,
    counted: bool,
}

impl Fd {
    pub(crate) fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        if self.counted {
            FdBudget::release();
        }
    }
}

/// What identifies the state of a file: if any of it changed, the entry is stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_ns: u32,
}

impl Stamp {
    fn of(i: &FileInfo) -> Stamp {
        Stamp {
            dev: i.dev,
            ino: i.ino,
            size: i.size,
            mtime: i.mtime_sec,
            mtime_ns: i.mtime_nsec,
        }
    }
}

/// A file found beneath a root: its representation, its content type and its siblings.
#[derive(Debug)]
pub(crate) struct Found {
    pub identity: Arc<Rep>,
    pub mime: &'static str,
    /// The precompressed siblings present, in the root's `precompressed` order.
    pub variants: Vec<(Coding, Arc<Rep>)>,
}

/// What a path beneath a root is.
#[derive(Debug, Clone)]
pub(crate) enum Lookup {
    File(Arc<Found>),
    Dir,
    /// Nothing there, or nothing Quill serves (a FIFO, a device, a link it may not follow).
    Missing,
}

/// The process-wide count of descriptors the file caches hold, against a limit set at start.
pub(crate) struct FdBudget;

static FDS_HELD: AtomicUsize = AtomicUsize::new(0);
static FDS_LIMIT: AtomicUsize = AtomicUsize::new(0);

impl FdBudget {
    /// Sets the limit (the descriptors reserved for file caches at start).
    pub(crate) fn set_limit(n: usize) {
        FDS_LIMIT.store(n, Ordering::Relaxed);
    }

    /// Takes a slot if one is left.
    fn take() -> bool {
        let limit = FDS_LIMIT.load(Ordering::Relaxed);
        FDS_HELD
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok()
    }

    fn release() {
        FDS_HELD.fetch_sub(1, Ordering::Relaxed);
    }

    /// Descriptors the file caches of all workers hold now.
    pub(crate) fn held() -> usize {
        FDS_HELD.load(Ordering::Relaxed)
    }

    /// The most they may hold (set at start).
    pub(crate) fn limit() -> usize {
        FDS_LIMIT.load(Ordering::Relaxed)
    }
}

/// A cache entry and its place in the recency list.
#[derive(Debug)]
struct Slot {
    key: (u64, Box<[u8]>),
    lookup: Lookup,
    stamp: Option<Stamp>,
    checked_ms: u64,
    bytes: usize,
    prev: u32,
    next: u32,
}

const NIL: u32 = u32::MAX;

/// The cache counters, for the metrics.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct CacheStats {
    pub hits: u64,
    pub misses: u64,
}

/// A worker's file cache.
#[derive(Debug)]
pub(crate) struct FileCache {
    /// By root id, then by path: a lookup borrows the request's path (no key allocated per
    /// request; only an insertion owns one).
    map: HashMap<u64, HashMap<Box<[u8]>, u32>>,
    /// Entries held, all roots together.
    entries: usize,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Most recently used first.
    head: u32,
    tail: u32,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
    pub stats: CacheStats,
}

impl FileCache {
    pub(crate) fn new(max_entries: usize, max_bytes: usize) -> FileCache {
        FileCache {
            map: HashMap::new(),
            entries: 0,
            slots: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            bytes: 0,
            max_entries: max_entries.max(1),
            max_bytes,
            stats: CacheStats::default(),
        }
    }

    /// Its counters and its size, as the metrics take them.
    pub(crate) fn counts(&self) -> FileCacheCounts {
        FileCacheCounts {
            hits: self.stats.hits,
            misses: self.stats.misses,
            entries: self.entries as u64,
        }
    }

    /// What `rel` (a file path beneath the root, without its leading `/`) is, from the cache
    /// when the entry is fresh (or still matches the file), else from the file system.
    pub(crate) fn lookup(&mut self, root: &StaticRoot, rel: &[u8], now_ms: u64) -> Lookup {
        let found = self.map.get(&root.id).and_then(|m| m.get(rel)).copied();
        if let Some(i) = found {
            let fresh = now_ms.saturating_sub(self.slots[i as usize].checked_ms) < VALID_MS;
            if fresh || self.unchanged(root, i, rel) {
                self.slots[i as usize].checked_ms = now_ms;
                self.touch(i);
                self.stats.hits += 1;
                return self.slots[i as usize].lookup.clone();
            }
            self.remove(i);
        }
        self.stats.misses += 1;
        let (lookup, stamp, bytes) = load(root, rel);
        // A file whose descriptor did not fit in the budget serves this request only.
        let keep = match &lookup {
            Lookup::File(f) => {
                f.identity.cacheable() && f.variants.iter().all(|(_, v)| v.cacheable())
            }
            _ => true,
        };
        if keep {
            self.insert((root.id, rel.into()), lookup.clone(), stamp, bytes, now_ms);
        }
        lookup
    }

    /// Whether the file at `rel` is still the one slot `i` describes: its `statx` by name
    /// compared (a name that now leads elsewhere, out of the root included, is another file,
    /// loaded again beneath the root).
    fn unchanged(&self, root: &StaticRoot, i: u32, rel: &[u8]) -> bool {
        let slot = &self.slots[i as usize];
        let follow = !matches!(links(&root.action), Links::None);
        let now = sysfile::file_info_at(root.dir.as_fd(), rel, follow).ok();
        match (slot.stamp, now) {
            (Some(old), Some(info)) => old == Stamp::of(&info),
            (None, None) => true,
            _ => false,
        }
    }

    fn insert(
        &mut self,
        key: (u64, Box<[u8]>),
        lookup: Lookup,
        stamp: Option<Stamp>,
        bytes: usize,
        now_ms: u64,
    ) {
        while self.entries >= self.max_entries
            || (self.bytes + bytes > self.max_bytes && self.tail != NIL)
        {
            if self.tail == NIL {
                break;
            }
            self.remove(self.tail);
        }
        let slot = Slot {
            key: key.clone(),
            lookup,
            stamp,
            checked_ms: now_ms,
            bytes,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        self.bytes += bytes;
        self.map.entry(key.0).or_default().insert(key.1, i);
        self.entries += 1;
        self.link_front(i);
    }

    fn remove(&mut self, i: u32) {
        self.unlink(i);
        let slot = &mut self.slots[i as usize];
        self.bytes -= slot.bytes;
        slot.lookup = Lookup::Missing;
        slot.bytes = 0;
        let (root, path) = std::mem::take(&mut slot.key);
        if let Some(m) = self.map.get_mut(&root) {
            if m.remove(&path).is_some() {
                self.entries -= 1;
            }
            if m.is_empty() {
                self.map.remove(&root);
            }
        }
        self.free.push(i);
    }

    fn touch(&mut self, i: u32) {
        if self.head != i {
            self.unlink(i);
            self.link_front(i);
        }
    }

    fn link_front(&mut self, i: u32) {
        self.slots[i as usize].prev = NIL;
        self.slots[i as usize].next = self.head;
        if self.head != NIL {
            self.slots[self.head as usize].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    fn unlink(&mut self, i: u32) {
        let (prev, next) = {
            let s = &self.slots[i as usize];
            (s.prev, s.next)
        };
        if prev != NIL {
            self.slots[prev as usize].next = next;
        } else if self.head == i {
            self.head = next;
        }
        if next != NIL {
            self.slots[next as usize].prev = prev;
        } else if self.tail == i {
            self.tail = prev;
        }
        self.slots[i as usize].prev = NIL;
        self.slots[i as usize].next = NIL;
    }
}

/// The symbolic-link rule of a root, as the opening call takes it.
pub(crate) fn links(a: &StaticAction) -> Links {
    match a.symlinks {
        Symlinks::Inside => Links::Inside,
        Symlinks::Never => Links::None,
        Symlinks::Anywhere => Links::Anywhere,
    }
}

/// Reads what `rel` is from the file system: the lookup, the identity to revalidate it by and
/// the bytes it holds in memory.
fn load(root: &StaticRoot, rel: &[u8]) -> (Lookup, Option<Stamp>, usize) {
    let Some((fd, info)) = open(root, rel) else {
        return (Lookup::Missing, None, 0);
    };
    match info.kind {
        FileKind::Dir => return (Lookup::Dir, Some(Stamp::of(&info)), 0),
        FileKind::Other => return (Lookup::Missing, Some(Stamp::of(&info)), 0),
        FileKind::Regular => {}
    }
    let Some(identity) = rep(fd, &info, None) else {
        return (Lookup::Missing, None, 0);
    };
    let mut bytes = held_bytes(&identity);
    let mut variants = Vec::new();
    for &coding in &root.action.precompressed {
        let mut name = rel.to_vec();
        name.extend_from_slice(coding.file_suffix().as_bytes());
        let Some((vfd, vinfo)) = open(root, &name) else {
            continue;
        };
        if vinfo.kind != FileKind::Regular {
            continue;
        }
        if let Some(v) = rep(vfd, &vinfo, Some(coding)) {
            bytes += held_bytes(&v);
            variants.push((coding, Arc::new(v)));
        }
    }
    let found = Found {
        identity: Arc::new(identity),
        mime: mime::from_path(rel),
        variants,
    };
    (Lookup::File(Arc::new(found)), Some(Stamp::of(&info)), bytes)
}

fn held_bytes(r: &Rep) -> usize {
    match &r.body {
        Body::Bytes(b) => b.len(),
        Body::File(_) => 0,
    }
}

/// Opens `rel` beneath the root under its link rule, with what it is.
fn open(root: &StaticRoot, rel: &[u8]) -> Option<(OwnedFd, FileInfo)> {
    let fd = super::open_beneath(root.dir.as_fd(), rel, links(&root.action)).ok()?;
    let info = sysfile::file_info(fd.as_fd()).ok()?;
    Some((fd, info))
}

/// A representation of the open regular file `fd`: read into memory when small, else kept open
/// (counted in the budget; past it, kept for this request only).
fn rep(fd: OwnedFd, info: &FileInfo, coding: Option<Coding>) -> Option<Rep> {
    let body = if info.size <= SMALL_FILE {
        let mut buf = vec![0u8; info.size as usize];
        let mut got = 0;
        while got < buf.len() {
            match sysfile::pread(fd.as_fd(), &mut buf[got..], got as u64) {
                Ok(0) => return None,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
        Body::Bytes(buf.into_boxed_slice())
    } else {
        Body::File(Fd {
            fd,
            counted: FdBudget::take(),
        })
    };
    Some(Rep {
        size: info.size,
        mtime: info.mtime_sec,
        etag: etag::strong(info.mtime_sec, info.mtime_nsec, info.size, coding),
        last_modified: date::format(info.mtime_sec),
        body,
    })
}

impl Rep {
    /// Whether the cache may keep this representation (its descriptor is in the budget).
    pub(crate) fn cacheable(&self) -> bool {
        match &self.body {
            Body::Bytes(_) => true,
            Body::File(f) => f.counted,
        }
    }
}
