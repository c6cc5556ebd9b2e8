//! Reading a directory beneath a static root for its listing: opened as any file is (beneath the
//! root, under its link rule), its entries read with a bound on their number.

use std::io;
use std::os::fd::AsFd;

use quill_core::sys::{self as sysfile, FileKind};

use super::listing::Entry;
use crate::route::StaticRoot;

/// The entries of the directory `rel` beneath the root (at most `max`).
pub(crate) fn read(root: &StaticRoot, rel: &[u8], max: usize) -> io::Result<Vec<Entry>> {
    let dir = super::open_beneath(root.dir.as_fd(), rel, super::cache::links(&root.action))?;
    let entries = sysfile::read_dir(dir.as_fd(), max)?;
    Ok(entries
        .into_iter()
        .map(|e| Entry {
            dir: e.kind == FileKind::Dir,
            size: (e.kind == FileKind::Regular).then_some(e.size).flatten(),
            mtime: e.mtime,
            name: e.name,
        })
        .collect())
}
