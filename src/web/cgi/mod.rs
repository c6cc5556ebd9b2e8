//! CGI scripts run as children of Quill (docs/cgi.md): the `cgi` route action.
//!
//! - [`resolve`]: which script a request path names, beneath the root as a static file is (the
//!   first segment that is a regular file is the script, the rest `PATH_INFO`), and that it is
//!   executable;
//! - [`env`]: the script's environment (RFC 3875);
//! - [`spawn`]: the spawner thread that starts and reaps children, the process-wide count that
//!   `max_children` bounds, and the kill of a child's process group;
//! - [`Pipes`]: the worker's ends of a child's stdin, stdout and stderr, nonblocking, for its
//!   event loop.
//!
//! The HTTP session (`proxy::http::cgi`) streams the request body to stdin, reads stdout through
//! `quill_core::cgi`'s translator into the client's response and logs stderr.

pub(crate) mod env;
pub(crate) mod spawn;

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use mio::unix::pipe::{Receiver, Sender};
use quill_core::http1::path;
use quill_core::sys::Links;

use crate::web::open_beneath;

use crate::route::CgiRoot;

/// The script a request names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Script {
    /// Its path from the root, with a leading `/` (`/sub/env.sh`): `SCRIPT_NAME`.
    pub name: Vec<u8>,
    /// The decoded rest of the path (`/a/b`), or empty: `PATH_INFO`.
    pub path_info: Vec<u8>,
}

/// Finds the script `target`'s path names beneath `root`: the first segment that is a regular
/// file. Refused with the status to answer: 400 for a path with no file form (a `..` above the
/// root, `%00`, an encoded `/`), 404 for a hidden segment (`.git`), a name that does not exist
/// or a path of directories only, 403 for a file that is not executable or not regular, or a
/// link that leaves the root. Nothing refused is ever run.
pub(crate) fn resolve(root: &CgiRoot, target: &[u8]) -> Result<Script, u16> {
    let raw = path::target_path(target);
    let mut buf = vec![0u8; raw.len()];
    let n = path::file_path(raw, &mut buf).map_err(|_| 400u16)?;
    buf.truncate(n);
    if path::hidden_segment(&buf) {
        return Err(404);
    }
    // Each segment end: `/a/b/c` is tried as `a`, `a/b`, `a/b/c`.
    let ends = (1..=buf.len()).filter(|&i| i == buf.len() || buf[i] == b'/');
    for end in ends {
        let rel = &buf[1..end];
        if rel.is_empty() {
            continue;
        }
        let file = match open_beneath(root.dir.as_fd(), rel, Links::Inside) {
            Ok(fd) => std::fs::File::from(fd),
            Err(e) => return Err(refusal(&e)),
        };
        let meta = file.metadata().map_err(|_| 403u16)?;
        if meta.is_dir() {
            continue;
        }
        if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
            return Err(403);
        }
        return Ok(Script {
            name: buf[..end].to_vec(),
            path_info: buf[end..].to_vec(),
        });
    }
    Err(404)
}

/// The status for a name that could not be opened: 404 when it does not exist, 403 otherwise
/// (a link out of the root, a permission).
fn refusal(e: &io::Error) -> u16 {
    match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => 404,
        _ => 403,
    }
}

/// The worker's ends of a child's pipes, nonblocking, and the child they belong to.
#[derive(Debug)]
pub(crate) struct Pipes {
    /// Where the request body goes (None once it is all written, or when the script left).
    pub stdin: Option<Sender>,
    pub stdout: Option<Receiver>,
    pub stderr: Option<Receiver>,
    pub child: Arc<spawn::Child>,
}

/// Makes a child's three pipes and hands its ends, with `job`'s script and environment, to the
/// spawner; the worker keeps the returned ends. The caller counted the child
/// ([`spawn::admit`]).
pub(crate) fn start(
    program: std::path::PathBuf,
    dir: std::path::PathBuf,
    env: Vec<(Vec<u8>, Vec<u8>)>,
) -> io::Result<Pipes> {
    let (stdin_w, stdin_r) = pipe_pair()?;
    let (stdout_w, stdout_r) = pipe_pair()?;
    let (stderr_w, stderr_r) = pipe_pair()?;
    // The child's ends block (a script reads and writes as it would on a terminal); ours do not.
    let stdin_r = blocking(Receiver::from(stdin_r))?;
    let stdout_w = blocking(Sender::from(stdout_w))?;
    let stderr_w = blocking(Sender::from(stderr_w))?;
    let child = Arc::new(spawn::Child::default());
    spawn::spawn(spawn::Job {
        program,
        dir,
        env,
        stdin: stdin_r,
        stdout: stdout_w,
        stderr: stderr_w,
        child: child.clone(),
    });
    Ok(Pipes {
        stdin: Some(Sender::from(stdin_w)),
        stdout: Some(Receiver::from(stdout_r)),
        stderr: Some(Receiver::from(stderr_r)),
        child,
    })
}

/// A pipe end made blocking, as a descriptor for the child.
fn blocking<E: Into<OwnedFd> + SetBlocking>(end: E) -> io::Result<OwnedFd> {
    end.set_blocking()?;
    Ok(end.into())
}

/// The two kinds of pipe ends, made blocking.
trait SetBlocking {
    fn set_blocking(&self) -> io::Result<()>;
}

impl SetBlocking for Sender {
    fn set_blocking(&self) -> io::Result<()> {
        self.set_nonblocking(false)
    }
}

impl SetBlocking for Receiver {
    fn set_blocking(&self) -> io::Result<()> {
        self.set_nonblocking(false)
    }
}

/// A pipe, both ends nonblocking and close-on-exec: (write end, read end).
fn pipe_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let (tx, rx) = mio::unix::pipe::new()?;
    Ok((tx.into(), rx.into()))
}
