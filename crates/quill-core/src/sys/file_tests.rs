//! The file calls against a real directory tree under the temporary directory: containment by
//! the kernel, the kinds `file_info` tells, the reads and sends, the listing.

use super::*;
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// A directory under `std::env::temp_dir()` with a name of its own, removed on drop.
pub(crate) struct TempTree(pub(crate) PathBuf);

impl TempTree {
    pub(crate) fn new(tag: &str) -> TempTree {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("quill-core-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        TempTree(dir)
    }

    pub(crate) fn file(&self, rel: &str, body: &[u8]) {
        std::fs::write(self.0.join(rel), body).unwrap();
    }

    pub(crate) fn dir(&self, rel: &str) {
        std::fs::create_dir(self.0.join(rel)).unwrap();
    }

    pub(crate) fn link(&self, rel: &str, target: impl AsRef<Path>) {
        std::os::unix::fs::symlink(target, self.0.join(rel)).unwrap();
    }

    pub(crate) fn fifo(&self, rel: &str) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            self.0.join(rel),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
    }

    pub(crate) fn open_root(&self) -> OwnedFd {
        OwnedFd::from(std::fs::File::open(&self.0).unwrap())
    }
}

impl Drop for TempTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn kind(root: &OwnedFd, rel: &[u8], links: Links) -> io::Result<FileKind> {
    let fd = open_beneath(root.as_fd(), rel, links)?;
    Ok(file_info(fd.as_fd())?.kind)
}

fn errno(result: io::Result<FileKind>) -> Option<i32> {
    result.err().and_then(|e| e.raw_os_error())
}

#[test]
fn a_regular_file_opens_with_its_size_and_mtime() {
    let t = TempTree::new("info");
    t.file("a.txt", b"hello");
    let root = t.open_root();
    let fd = open_beneath(root.as_fd(), b"a.txt", Links::Inside).unwrap();
    let info = file_info(fd.as_fd()).unwrap();
    let meta = std::fs::metadata(t.0.join("a.txt")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(info.kind, FileKind::Regular);
    assert_eq!(info.size, 5);
    assert_eq!(info.mtime_sec, meta.mtime());
    assert_eq!(i64::from(info.mtime_nsec), meta.mtime_nsec());
    assert_eq!((info.dev, info.ino), (meta.dev(), meta.ino()));
}

#[test]
fn the_empty_name_and_dot_are_the_root_itself() {
    let t = TempTree::new("rootself");
    let root = t.open_root();
    assert_eq!(kind(&root, b"", Links::Inside).unwrap(), FileKind::Dir);
    assert_eq!(kind(&root, b".", Links::None).unwrap(), FileKind::Dir);
}

#[test]
fn an_absolute_name_is_refused_under_every_policy() {
    let t = TempTree::new("abs");
    let root = t.open_root();
    for links in [Links::Inside, Links::None, Links::Anywhere] {
        let err = open_beneath(root.as_fd(), b"/etc/passwd", links).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{links:?}");
    }
}

#[test]
fn dot_dot_above_the_root_is_refused_by_the_kernel() {
    let t = TempTree::new("dotdot");
    t.dir("sub");
    let root = t.open_root();
    assert_eq!(errno(kind(&root, b"..", Links::Inside)), Some(libc::EXDEV));
    assert_eq!(
        errno(kind(&root, b"sub/../..", Links::None)),
        Some(libc::EXDEV)
    );
    assert_eq!(
        kind(&root, b"sub/..", Links::Inside).unwrap(),
        FileKind::Dir
    );
}

#[test]
fn a_symlink_inside_the_root_follows_only_when_links_are_allowed() {
    let t = TempTree::new("inlink");
    t.file("real.txt", b"x");
    t.link("alias.txt", "real.txt");
    let root = t.open_root();
    assert_eq!(
        kind(&root, b"alias.txt", Links::Inside).unwrap(),
        FileKind::Regular
    );
    assert_eq!(
        kind(&root, b"alias.txt", Links::Anywhere).unwrap(),
        FileKind::Regular
    );
    assert_eq!(
        errno(kind(&root, b"alias.txt", Links::None)),
        Some(libc::ELOOP)
    );
}

#[test]
fn a_symlink_out_of_the_root_is_refused_unless_anywhere() {
    let t = TempTree::new("outlink");
    t.link("etc", "/etc");
    t.link("up", "../../..");
    let root = t.open_root();
    assert_eq!(
        errno(kind(&root, b"etc/passwd", Links::Inside)),
        Some(libc::EXDEV)
    );
    assert_eq!(errno(kind(&root, b"up", Links::Inside)), Some(libc::EXDEV));
    assert_eq!(kind(&root, b"etc", Links::Anywhere).unwrap(), FileKind::Dir);
}

#[test]
fn a_fifo_opens_at_once_and_is_other() {
    let t = TempTree::new("fifo");
    t.fifo("pipe");
    let root = t.open_root();
    // No writer exists: a blocking open would wait forever; this one returns.
    assert_eq!(
        kind(&root, b"pipe", Links::Inside).unwrap(),
        FileKind::Other
    );
}

#[test]
fn a_device_through_a_symlink_under_anywhere_is_other() {
    let t = TempTree::new("dev");
    t.link("null", "/dev/null");
    let root = t.open_root();
    assert_eq!(
        kind(&root, b"null", Links::Anywhere).unwrap(),
        FileKind::Other
    );
    assert_eq!(
        errno(kind(&root, b"null", Links::Inside)),
        Some(libc::EXDEV)
    );
}

#[test]
fn pread_and_pread_nowait_read_at_an_offset() {
    let t = TempTree::new("pread");
    t.file("f", b"0123456789");
    let root = t.open_root();
    let fd = open_beneath(root.as_fd(), b"f", Links::Inside).unwrap();
    let mut buf = [0u8; 4];
    assert_eq!(pread(fd.as_fd(), &mut buf, 3).unwrap(), 4);
    assert_eq!(&buf, b"3456");
    assert_eq!(pread(fd.as_fd(), &mut buf, 10).unwrap(), 0);
    // Just written, so resident: NOWAIT reads it (or the file system cannot tell).
    match pread_nowait(fd.as_fd(), &mut buf, 6) {
        Ok(got) => {
            assert_eq!(got, Some(4));
            assert_eq!(&buf, b"6789");
        }
        Err(e) => assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}"),
    }
}

#[test]
fn sendfile_moves_the_offset_and_send_more_sends() {
    let t = TempTree::new("sendfile");
    t.file("f", b"abcdefgh");
    let root = t.open_root();
    let fd = open_beneath(root.as_fd(), b"f", Links::Inside).unwrap();
    let (a, mut b) = UnixStream::pair().unwrap();
    assert_eq!(send_more(a.as_fd(), b"head:").unwrap(), 5);
    let mut offset = 2;
    assert_eq!(sendfile(a.as_fd(), fd.as_fd(), &mut offset, 4).unwrap(), 4);
    assert_eq!(offset, 6);
    assert_eq!(
        sendfile(a.as_fd(), fd.as_fd(), &mut offset, 100).unwrap(),
        2
    );
    assert_eq!(
        sendfile(a.as_fd(), fd.as_fd(), &mut offset, 100).unwrap(),
        0
    );
    drop(a);
    let mut got = Vec::new();
    b.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"head:cdefgh");
}

#[test]
fn send_more_to_a_closed_peer_is_broken_pipe_not_a_signal() {
    let (a, b) = UnixStream::pair().unwrap();
    drop(b);
    let err = send_more(a.as_fd(), b"x").unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
}

fn listing(t: &TempTree, rel: &[u8], max: usize) -> Vec<DirEntry> {
    let root = t.open_root();
    let dir = open_beneath(root.as_fd(), rel, Links::Inside).unwrap();
    let mut entries = read_dir(dir.as_fd(), max).unwrap();
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    entries
}

#[test]
fn read_dir_lists_kinds_sizes_and_follows_only_links_beneath() {
    let t = TempTree::new("readdir");
    t.dir("d");
    t.file("d/f.txt", b"12345");
    t.dir("d/sub");
    t.link("d/to-f", "f.txt");
    t.link("d/to-sub", "sub");
    t.link("d/dangling", "nowhere");
    t.link("d/to-passwd", "/etc/passwd");
    t.link("d/up", "../outside.txt");
    t.file("outside.txt", b"secret");
    t.fifo("d/pipe");
    std::fs::write(
        t.0.join("d").join(std::ffi::OsStr::from_bytes(b"\xff.bin")),
        b"",
    )
    .unwrap();
    let got = listing(&t, b"d", 100);
    let row = |name: &[u8]| {
        let e = got.iter().find(|e| e.name == name).unwrap();
        (e.kind, e.size, e.mtime.is_some())
    };
    assert_eq!(got.len(), 9);
    assert_eq!(row(b"f.txt"), (FileKind::Regular, Some(5), true));
    assert_eq!(row(b"sub"), (FileKind::Dir, None, true));
    assert_eq!(row(b"to-f"), (FileKind::Regular, Some(5), true));
    assert_eq!(row(b"to-sub"), (FileKind::Dir, None, true));
    assert_eq!(row(b"dangling"), (FileKind::Other, None, true));
    assert_eq!(row(b"to-passwd"), (FileKind::Other, None, true));
    assert_eq!(row(b"up"), (FileKind::Other, None, true));
    assert_eq!(row(b"pipe"), (FileKind::Other, None, true));
    assert_eq!(row(b"\xff.bin"), (FileKind::Regular, Some(0), true));
}

#[test]
fn read_dir_stops_at_max_entries() {
    let t = TempTree::new("readdirmax");
    for i in 0..10 {
        t.file(&format!("f{i}"), b"");
    }
    assert_eq!(listing(&t, b"", 3).len(), 3);
    assert_eq!(listing(&t, b"", 0).len(), 0);
    assert_eq!(listing(&t, b".", 100).len(), 10);
}

/// What the traversal corpus expects of a request path.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// `file_path` refuses it: 400 before any file system call.
    Refused(crate::http1::path::PathError),
    /// The kernel refuses a step out of the root (`EXDEV`).
    Escapes,
    /// A symlink where none is allowed (`ELOOP`).
    Link,
    /// The name does not exist under the root (the bytes were a name, not a way out).
    Missing,
    /// It opens, as this kind.
    Opens(FileKind),
}

/// A request path through `file_path` and `open_beneath` under `root`.
fn serve(root: &OwnedFd, path: &[u8], links: Links) -> Outcome {
    let mut form = vec![0u8; path.len()];
    let n = match crate::http1::path::file_path(path, &mut form) {
        Ok(n) => n,
        Err(e) => return Outcome::Refused(e),
    };
    match kind(root, &form[1..n], links) {
        Ok(k) => Outcome::Opens(k),
        Err(e) => match e.raw_os_error() {
            Some(libc::EXDEV) => Outcome::Escapes,
            Some(libc::ELOOP) => Outcome::Link,
            Some(libc::ENOENT) => Outcome::Missing,
            _ => panic!("{}: {e}", String::from_utf8_lossy(path)),
        },
    }
}

#[test]
fn the_traversal_corpus_never_leaves_the_root() {
    use crate::http1::path::PathError::*;
    use FileKind::*;
    use Links::{Anywhere, Inside};
    use Outcome::*;
    let t = TempTree::new("corpus");
    t.file("secret", b"outside the root");
    t.dir("www");
    t.file("www/index.html", b"<p>hi</p>");
    t.dir("www/sub");
    t.file("www/sub/page.html", b"page");
    t.link("www/etc-link", "/etc");
    t.link("www/up", "../../..");
    t.link("www/secret-link", "../secret");
    t.link("www/alias.html", "index.html");
    t.link("www/sub/back.html", "../index.html");
    t.link("www/null", "/dev/null");
    t.fifo("www/pipe");
    let root = OwnedFd::from(std::fs::File::open(t.0.join("www")).unwrap());
    let corpus: &[(&str, &[u8], Links, Outcome)] = &[
        ("dot dot", b"/..", Inside, Refused(AboveRoot)),
        (
            "dot dot to a file",
            b"/../secret",
            Inside,
            Refused(AboveRoot),
        ),
        (
            "encoded dot dot",
            b"/%2e%2e/secret",
            Inside,
            Refused(AboveRoot),
        ),
        (
            "mixed-case encoded dot dot",
            b"/%2E%2e/",
            Inside,
            Refused(AboveRoot),
        ),
        (
            "half-encoded dot dot",
            b"/.%2e/secret",
            Inside,
            Refused(AboveRoot),
        ),
        (
            "dot dot below a name",
            b"/a/../../secret",
            Inside,
            Refused(AboveRoot),
        ),
        ("encoded slash", b"/%2f", Inside, Refused(EncodedSlash)),
        (
            "dot dot across encoded slashes",
            b"/..%2f..%2fsecret",
            Inside,
            Refused(EncodedSlash),
        ),
        ("encoded NUL", b"/%00", Inside, Refused(Nul)),
        (
            "NUL before an extension",
            b"/index.html%00.txt",
            Inside,
            Refused(Nul),
        ),
        ("raw NUL", b"/index.html\0", Inside, Refused(Nul)),
        ("backslash dot dot", b"/\\..\\secret", Inside, Missing),
        (
            "encoded backslash dot dot",
            b"/%5c..%5csecret",
            Inside,
            Missing,
        ),
        (
            "overlong UTF-8 dots",
            b"/%c0%ae%c0%ae/secret",
            Inside,
            Missing,
        ),
        (
            "double-encoded dot dot",
            b"/%252e%252e/secret",
            Inside,
            Missing,
        ),
        ("double slash to /etc", b"//etc/passwd", Inside, Missing),
        (
            "dot dot that stays inside",
            b"/sub/../index.html",
            Inside,
            Opens(Regular),
        ),
        ("the root", b"/", Inside, Opens(Dir)),
        ("a directory with its slash", b"/sub/", Inside, Opens(Dir)),
        ("symlink to /etc", b"/etc-link/passwd", Inside, Escapes),
        (
            "symlink to /etc, anywhere",
            b"/etc-link/passwd",
            Anywhere,
            Opens(Regular),
        ),
        ("symlink ../../..", b"/up/etc/passwd", Inside, Escapes),
        (
            "symlink to a file outside",
            b"/secret-link",
            Inside,
            Escapes,
        ),
        ("symlink inside", b"/alias.html", Inside, Opens(Regular)),
        (
            "symlink inside, no links",
            b"/alias.html",
            Links::None,
            Link,
        ),
        (
            "symlink up but inside",
            b"/sub/back.html",
            Inside,
            Opens(Regular),
        ),
        ("FIFO", b"/pipe", Inside, Opens(Other)),
        (
            "device through a symlink, anywhere",
            b"/null",
            Anywhere,
            Opens(Other),
        ),
        ("device through a symlink", b"/null", Inside, Escapes),
    ];
    for (name, path, links, want) in corpus {
        assert_eq!(&serve(&root, path, *links), want, "{name}");
    }
}

/// The lookup used where the kernel has no `openat2`, called directly (this kernel has it): files
/// and directories under the root open, and every symlink (inside or out), `..` and escape is
/// refused.
#[test]
fn the_walk_without_openat2_opens_what_is_under_the_root_and_follows_no_link() {
    let t = TempTree::new("walk");
    t.dir("d");
    t.dir("d/e");
    t.file("d/e/f", b"body");
    t.file("top", b"x");
    t.link("d/to_top", "../top");
    t.link("d/up", "..");
    t.link("out", "/etc");
    let root = t.open_root();
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
    let read = |rel: &[u8]| -> io::Result<Vec<u8>> {
        let fd = open_walk(root.as_fd(), rel, flags)?;
        let mut s = String::new();
        std::fs::File::from(fd).read_to_string(&mut s)?;
        Ok(s.into_bytes())
    };
    assert_eq!(read(b"d/e/f").unwrap(), b"body");
    assert_eq!(read(b"./d//e/./f").unwrap(), b"body");
    assert_eq!(read(b"top").unwrap(), b"x");
    for refused in [
        &b"d/to_top"[..],
        b"d/up/top",
        b"out/passwd",
        b"out",
        b"../etc/passwd",
        b"d/../top",
    ] {
        let e = open_walk(root.as_fd(), refused, flags).unwrap_err();
        let code = e.raw_os_error();
        assert!(
            [Some(libc::ELOOP), Some(libc::ENOTDIR), Some(libc::EXDEV)].contains(&code),
            "{}: {e}",
            String::from_utf8_lossy(refused)
        );
    }
    assert!(open_walk(root.as_fd(), b"missing", flags).is_err());
    // The root itself, and a directory.
    assert!(open_walk(root.as_fd(), b".", flags).is_ok());
    assert!(open_walk(root.as_fd(), b"", flags).is_ok());
    assert!(open_walk(root.as_fd(), b"d/e", flags).is_ok());
}
