//! Quill as a web server (docs/web.md): the `static` route action's files, their directory
//! listings, and what a worker keeps to serve them fast.
//!
//! - [`cache`]: the worker's open-file cache and the process-wide descriptor budget;
//! - [`serve`]: what a request to a static root gets (RFC 9110's methods, preconditions and
//!   ranges, precompressed siblings, index files, listings), written by [`head`];
//! - [`send`]: how the response goes out (`writev`, `MSG_MORE` + `sendfile`, `pread` over TLS);
//! - [`dir`] and [`listing`]: a directory's entries and their HTML or JSON page.
//!
//! The HTTP session (`proxy::http`) calls [`serve::answer`] for a request routed to a static
//! root and drives the [`send::Sending`] it returns.

pub(crate) mod cache;
pub(crate) mod cgi;
pub(crate) mod dir;
pub(crate) mod head;
pub(crate) mod listing;
pub(crate) mod readahead;
pub(crate) mod send;
pub(crate) mod serve;

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use cache::FileCache;
use quill_core::sys::{self, Links};

/// [`sys::open_beneath`] for the roots the web server opens files under (static files, listings,
/// CGI scripts), saying once per process when `Links::Inside` cannot be honoured: without
/// `openat2` (Linux < 5.6, or a seccomp filter that refuses it) no symlink is followed. The
/// FastCGI route's check that a script exists is in the model layer, below this one, and calls
/// `sys` directly: it falls back the same way, and a FastCGI-only site is not told.
pub(crate) fn open_beneath(root: BorrowedFd<'_>, rel: &[u8], links: Links) -> io::Result<OwnedFd> {
    let fd = sys::open_beneath(root, rel, links);
    if links == Links::Inside && sys::openat2_missing() {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            tracing::warn!(
                "openat2 is not available (Linux before 5.6, or a seccomp filter refuses it): \
                 files are opened a path component at a time and symlinks under roots with \
                 symlinks = \"inside\" (static files, CGI and FastCGI scripts) are not followed, \
                 as with \"never\""
            )
        });
    }
    fd
}

/// A worker's web-server state: its file cache and the current `Date` value.
#[derive(Debug)]
pub(crate) struct Files {
    pub cache: FileCache,
    date_secs: i64,
    date: [u8; 29],
}

/// Entries a worker's file cache holds at most.
pub(crate) const CACHE_ENTRIES: usize = 10_000;
/// Bytes of small files a worker's file cache holds at most.
pub(crate) const CACHE_BYTES: usize = 64 << 20;

impl Default for Files {
    fn default() -> Files {
        Files {
            cache: FileCache::new(CACHE_ENTRIES, CACHE_BYTES),
            date_secs: i64::MIN,
            date: [b' '; 29],
        }
    }
}

impl Files {
    /// The `Date` field's value now (formatted once a second).
    pub(crate) fn date(&mut self) -> [u8; 29] {
        let secs = crate::clock::unix_time() as i64;
        if secs != self.date_secs {
            self.date_secs = secs;
            self.date = quill_core::files::date::format(secs);
        }
        self.date
    }
}
