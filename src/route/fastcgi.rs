//! The `fastcgi` route action's side of the web server: its root, open ([`FastcgiRoot`]), and
//! which script a request runs ([`FastcgiRoot::resolve`]): the request path in its file form,
//! split at the first segment ending with `split_path` (`/a.php/b` runs `/a.php` with
//! `PATH_INFO` `/b`), a directory's `index`, else the `fallback` script; the script must be a
//! regular file beneath the root before the FastCGI server is asked anything, so a path like
//! `/uploads/evil.jpg/x.php` is a 404 here and never reaches an application that would look for
//! a shorter script itself (PHP's `cgi.fix_pathinfo`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use quill_core::fastcgi::split_script;
use quill_core::http1::path::{file_path, hidden_segment};
use quill_core::sys::{file_info, open_beneath, FileKind, Links};

use crate::config::FastcgiAction;

/// How long a worker trusts what it found of a script (there or not), as the file cache trusts
/// an entry: a script added, removed or replaced is seen within this.
const SEEN_FOR_MS: u64 = 1000;
/// The most script names a worker remembers of one root, and the most roots (then it forgets
/// them all and starts again: old roots are left behind by reloads).
const SEEN_MAX: usize = 4096;
const SEEN_ROOTS: usize = 16;

/// Each root's own number, so that a worker's memory of one never answers for another (a
/// reload opens the roots anew).
static NEXT_ROOT: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Per worker: whether a script name of a root is a regular file beneath it, and when that
    /// was looked at. Without it every request opens its script (`openat2`, `fstat`, `close`).
    static SEEN: RefCell<HashMap<u64, Seen>> = RefCell::new(HashMap::new());
}

/// Script names of one root: whether each is a script, and since when that is known.
type Seen = HashMap<Box<[u8]>, (bool, u64)>;

/// A `fastcgi` action's root, open: scripts are looked up beneath its descriptor.
#[derive(Debug)]
pub(crate) struct FastcgiRoot {
    pub action: FastcgiAction,
    pub dir: OwnedFd,
    /// This root's number in the workers' memory of scripts.
    id: u64,
    /// The root as the application sees it (`DOCUMENT_ROOT`), without a trailing `/`.
    pub document_root: Box<[u8]>,
}

/// The script a request runs, in [`Script::path`]: the script's name (from the root), then the
/// path info.
#[derive(Debug, Default)]
pub(crate) struct Script {
    /// The script name followed by the path info.
    pub path: Vec<u8>,
    /// Bytes of `path` that are the script's name.
    pub name_len: usize,
    /// The normal path the request named (`DOCUMENT_URI`), at the end of `path`.
    pub uri_at: usize,
}

impl Script {
    pub(crate) fn name(&self) -> &[u8] {
        &self.path[..self.name_len]
    }

    pub(crate) fn path_info(&self) -> &[u8] {
        &self.path[self.name_len..self.uri_at]
    }

    pub(crate) fn document_uri(&self) -> &[u8] {
        &self.path[self.uri_at..]
    }
}

impl FastcgiRoot {
    /// Opens `action.root`; the error names it.
    pub(crate) fn open(action: &FastcgiAction) -> Result<FastcgiRoot, String> {
        let dir = std::fs::File::open(&action.root)
            .map_err(|e| format!("fastcgi: root {}: {e}", action.root.display()))?;
        if !dir.metadata().map(|m| m.is_dir()).unwrap_or(false) {
            return Err(format!(
                "fastcgi: root {} is not a directory",
                action.root.display()
            ));
        }
        let root = std::path::absolute(&action.root).unwrap_or_else(|_| action.root.clone());
        let mut document_root = root.as_os_str().as_encoded_bytes().to_vec();
        while document_root.len() > 1 && document_root.ends_with(b"/") {
            document_root.pop();
        }
        Ok(FastcgiRoot {
            action: action.clone(),
            dir: dir.into(),
            document_root: document_root.into(),
            id: NEXT_ROOT.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// The script the request `target` runs, written into `script`; Err: the status to answer
    /// (404 when no script is there; 400 when the path has no file form).
    pub(crate) fn resolve(
        &self,
        target: &[u8],
        script: &mut Script,
        now_ms: u64,
    ) -> Result<(), u16> {
        let path = target.split(|&b| b == b'?').next().unwrap_or_default();
        let mut normal = vec![0; path.len()];
        let n = file_path(path, &mut normal).map_err(|_| 400u16)?;
        normal.truncate(n);
        let a = &self.action;
        script.path.clear();
        if !hidden_segment(&normal) {
            let mut candidate = normal.clone();
            if candidate.ends_with(b"/") {
                candidate.extend_from_slice(a.index.as_bytes());
            }
            if let Some((name, info)) = split_script(&candidate, a.split_path.as_bytes()) {
                if self.is_script(name, now_ms) {
                    script.path.extend_from_slice(name);
                    script.name_len = name.len();
                    script.path.extend_from_slice(info);
                    script.uri_at = script.path.len();
                    script.path.extend_from_slice(&normal);
                    return Ok(());
                }
            }
        }
        match &a.fallback {
            Some(f) if self.is_script(f.as_bytes(), now_ms) => {
                script.path.extend_from_slice(f.as_bytes());
                script.name_len = f.len();
                script.uri_at = script.path.len();
                script.path.extend_from_slice(f.as_bytes());
                Ok(())
            }
            _ => Err(404),
        }
    }

    /// Whether `name` (from the root, starting with `/`) is a regular file beneath the root
    /// (symbolic links followed only while they stay beneath it), as this worker last looked
    /// less than [`SEEN_FOR_MS`] before `now` (ms), or as it looks now.
    fn is_script(&self, name: &[u8], now: u64) -> bool {
        let known = SEEN.with_borrow(|seen| {
            let (found, at) = *seen.get(&self.id)?.get(name)?;
            (now.saturating_sub(at) < SEEN_FOR_MS).then_some(found)
        });
        if let Some(found) = known {
            return found;
        }
        let found = self.look(name);
        SEEN.with_borrow_mut(|seen| {
            if seen.len() >= SEEN_ROOTS && !seen.contains_key(&self.id) {
                seen.clear();
            }
            let names = seen.entry(self.id).or_default();
            if names.len() >= SEEN_MAX {
                names.clear();
            }
            names.insert(name.into(), (found, now));
        });
        found
    }

    /// Looks at `name` beneath the root now.
    fn look(&self, name: &[u8]) -> bool {
        let rel = name.strip_prefix(b"/").unwrap_or(name);
        let Ok(fd) = open_beneath(self.dir.as_fd(), rel, Links::Inside) else {
            return false;
        };
        file_info(fd.as_fd()).is_ok_and(|i| i.kind == FileKind::Regular)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(fallback: Option<&str>) -> (tempfile_dir::Dir, FastcgiRoot) {
        let d = tempfile_dir::Dir::new();
        std::fs::create_dir_all(d.0.join("blog")).unwrap();
        std::fs::create_dir_all(d.0.join("uploads")).unwrap();
        std::fs::write(d.0.join("index.php"), "<?php").unwrap();
        std::fs::write(d.0.join("a.php"), "<?php").unwrap();
        std::fs::write(d.0.join("blog/index.php"), "<?php").unwrap();
        std::fs::write(d.0.join("uploads/evil.jpg"), "<?php").unwrap();
        std::fs::write(d.0.join(".hidden.php"), "<?php").unwrap();
        let action = FastcgiAction {
            pool: "php".into(),
            root: d.0.clone(),
            index: "index.php".into(),
            split_path: ".php".into(),
            fallback: fallback.map(String::from),
        };
        let r = FastcgiRoot::open(&action).unwrap();
        (d, r)
    }

    fn run(r: &FastcgiRoot, target: &str) -> Result<(String, String, String), u16> {
        let mut s = Script::default();
        r.resolve(target.as_bytes(), &mut s, 0)?;
        let t = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        Ok((t(s.name()), t(s.path_info()), t(s.document_uri())))
    }

    fn ok(name: &str, info: &str, uri: &str) -> Result<(String, String, String), u16> {
        Ok((name.into(), info.into(), uri.into()))
    }

    #[test]
    fn a_script_and_its_path_info_are_split_at_the_suffix() {
        let (_d, r) = root(None);
        assert_eq!(run(&r, "/a.php"), ok("/a.php", "", "/a.php"));
        assert_eq!(
            run(&r, "/a.php/b/c?x=1"),
            ok("/a.php", "/b/c", "/a.php/b/c")
        );
        assert_eq!(run(&r, "/blog/"), ok("/blog/index.php", "", "/blog/"));
        assert_eq!(run(&r, "/"), ok("/index.php", "", "/"));
        assert_eq!(run(&r, "/%61.php"), ok("/a.php", "", "/a.php"));
    }

    #[test]
    fn a_script_that_is_not_a_regular_file_beneath_the_root_is_404() {
        let (_d, r) = root(None);
        assert_eq!(run(&r, "/uploads/evil.jpg/x.php"), Err(404));
        assert_eq!(run(&r, "/missing.php"), Err(404));
        assert_eq!(run(&r, "/uploads/"), Err(404));
        assert_eq!(run(&r, "/blog"), Err(404));
        assert_eq!(run(&r, "/.hidden.php"), Err(404));
        assert_eq!(run(&r, "/a.txt"), Err(404));
        assert_eq!(run(&r, "/../a.php"), Err(400));
        assert_eq!(run(&r, "/a%2fb.php"), Err(400));
    }

    /// What a worker found of a script holds for a second: a script removed is still run
    /// within it (php-fpm then answers for itself), and is a 404 after it; one added likewise.
    #[test]
    fn a_worker_trusts_what_it_found_of_a_script_for_a_second() {
        let (d, r) = root(None);
        let t0 = 5_000;
        assert!(r.is_script(b"/a.php", t0));
        assert!(!r.is_script(b"/new.php", t0));
        std::fs::remove_file(d.0.join("a.php")).unwrap();
        std::fs::write(d.0.join("new.php"), "<?php").unwrap();
        let soon = t0 + 500;
        assert!(r.is_script(b"/a.php", soon));
        assert!(!r.is_script(b"/new.php", soon));
        let later = t0 + SEEN_FOR_MS;
        assert!(!r.is_script(b"/a.php", later));
        assert!(r.is_script(b"/new.php", later));
        // Another root (a reload opens them anew) does not see this root's memory.
        let (_d2, r2) = root(None);
        assert!(r2.is_script(b"/a.php", soon));
    }

    #[test]
    fn a_path_without_a_script_runs_the_fallback() {
        let (_d, r) = root(Some("/index.php"));
        assert_eq!(run(&r, "/posts/42?x"), ok("/index.php", "", "/index.php"));
        assert_eq!(run(&r, "/a.php/b"), ok("/a.php", "/b", "/a.php/b"));
        assert_eq!(
            run(&r, "/uploads/evil.jpg/x.php"),
            ok("/index.php", "", "/index.php")
        );
    }

    /// A directory under the system's temporary one, removed on drop.
    mod tempfile_dir {
        pub(super) struct Dir(pub std::path::PathBuf);

        impl Dir {
            pub(super) fn new() -> Dir {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let p = std::env::temp_dir().join(format!(
                    "quill-fcgi-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }

        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }
}
