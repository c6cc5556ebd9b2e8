//! The control socket: Pen's framing (a client connects, sends one command line, reads the reply
//! until the server closes), so `penctl`, `nc` and `quill ctl` all work. This file holds the
//! socket and the access rules; [`server`] runs it off the data path (one mio loop over the
//! listening socket and every client, and a thread each for the commands that may block),
//! [`exec`] does what a line asks, and [`client`] is `quill ctl`.
//!
//! Safety rules: the Unix socket is created mode 0600 and only root and Quill's own user may use
//! it (SO_PEERCRED); it may do everything. TCP is bound only to loopback unless `control_acl` is
//! set, and then the ACL is checked for every client; a TCP client has `control_level` (read,
//! operate or admin; default operate) and, with `control_token_file`, must start its line with
//! `auth TOKEN`. Whatever the level, commands that name files, paths or local sockets, move a
//! listener, hand sockets over or exit are refused over TCP. Every reply is followed by an
//! orderly close (write side shut, the client's leftover bytes read and discarded) so that it is
//! never lost to a reset; a descriptor is kept in reserve so EMFILE never leaves it unanswered.
//!
//! Takeover: a new process sends `takeover` over the Unix socket and receives every listening
//! socket (and this control socket) by SCM_RIGHTS; the handshake itself is in `takeover`.

mod client;
mod exec;
mod server;

use std::io;
use std::net::{IpAddr, TcpListener};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use crate::addr::ListenAddr;
use crate::command::{Needs, Request as Line};
use crate::config::ControlLevel;
use crate::state::controller::Controller;
use crate::systemd::Inherited;
use crate::takeover;

pub(crate) use client::client;
use exec::Failure;
pub(crate) use server::{spawn, ControlHandle};

/// Where `quill ctl` looks when no `--socket` is given (and `QUILL_SOCKET` is unset).
pub(crate) const DEFAULT_SOCKET: &str = "/run/quill/quill.sock";

/// The control listening socket.
pub(crate) enum ControlSocket {
    Unix(UnixListener, PathBuf),
    Tcp(TcpListener),
}

impl ControlSocket {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            ControlSocket::Unix(l, _) => l.as_fd(),
            ControlSocket::Tcp(l) => l.as_fd(),
        }
    }
}

/// Opens the control socket at `addr`, or takes the inherited one named `control` when it is a
/// listening socket at `addr` (one elsewhere is closed and `addr` bound anew: the control socket
/// is always where the configuration says). A file at a Unix path is replaced only when it is a
/// stale socket.
pub(crate) fn open(addr: &ListenAddr, inherited: &mut Vec<Inherited>) -> io::Result<ControlSocket> {
    if let Some(fd) =
        crate::systemd::take_named(inherited, takeover::CONTROL_NAME, addr, "control socket")
    {
        return Ok(match addr {
            ListenAddr::Unix(p) => ControlSocket::Unix(UnixListener::from(fd), p.clone()),
            ListenAddr::Tcp(_) => ControlSocket::Tcp(TcpListener::from(fd)),
        });
    }
    match addr {
        ListenAddr::Tcp(a) => Ok(ControlSocket::Tcp(TcpListener::bind(a)?)),
        ListenAddr::Unix(path) => {
            crate::listener::remove_stale_socket(path).map_err(|e| {
                if e.kind() == io::ErrorKind::AddrInUse {
                    io::Error::new(
                        io::ErrorKind::AddrInUse,
                        "a running process serves it (use --takeover to replace it)",
                    )
                } else {
                    e
                }
            })?;
            // Created 0600 from the start: no window where others could connect.
            let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
            let bound = UnixListener::bind(path);
            rustix::process::umask(old);
            Ok(ControlSocket::Unix(bound?, path.clone()))
        }
    }
}

/// The bearer token TCP clients must present (`control_token_file`), read at start and again
/// whenever the file (or the configured path, after a reload) changes.
#[derive(Default)]
struct TokenFile {
    path: Option<PathBuf>,
    stamp: Option<(u64, Option<std::time::SystemTime>)>,
    token: Option<Vec<u8>>,
}

/// Why the token file cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("control_token_file {}: {problem}", path.display())]
pub(crate) struct TokenError {
    path: PathBuf,
    #[source]
    problem: TokenProblem,
}

#[derive(Debug, thiserror::Error)]
enum TokenProblem {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("the file is empty")]
    Empty,
    #[error("the token contains whitespace")]
    Whitespace,
}

impl TokenFile {
    fn load(&mut self, path: &Path) -> Result<(), TokenError> {
        let fail = |problem: TokenProblem| TokenError {
            path: path.to_path_buf(),
            problem,
        };
        let meta = std::fs::metadata(path).map_err(|e| fail(e.into()))?;
        let stamp = Some((meta.len(), meta.modified().ok()));
        if self.path.as_deref() == Some(path) && self.stamp == stamp && self.token.is_some() {
            return Ok(());
        }
        self.path = Some(path.to_path_buf());
        self.stamp = stamp;
        self.token = None;
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.into()))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(fail(TokenProblem::Empty));
        }
        if token.contains(char::is_whitespace) {
            return Err(fail(TokenProblem::Whitespace));
        }
        self.token = Some(token.as_bytes().to_vec());
        Ok(())
    }
    /// Whether `given` is the token the configuration asks for now; true when none is asked.
    /// A token file that became unreadable or empty denies everyone (and says why in the log).
    fn permits(&mut self, configured: Option<&Path>, given: Option<&str>) -> bool {
        let Some(path) = configured else {
            return true;
        };
        if let Err(e) = self.load(path) {
            tracing::error!("{e}; denying TCP control clients until it is fixed");
            return false;
        }
        match (&self.token, given) {
            (Some(token), Some(given)) => same_secret(token, given.as_bytes()),
            _ => false,
        }
    }
}

/// Compares two secrets in a time that depends on their lengths only, not on where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

/// Splits a leading `auth TOKEN ` from a control line: (token, the rest).
fn split_auth(line: &str) -> (Option<&str>, &str) {
    let trimmed = line.trim_start();
    match trimmed.strip_prefix("auth") {
        Some(rest) if rest.starts_with(char::is_whitespace) => {
            let rest = rest.trim_start();
            match rest.split_once(char::is_whitespace) {
                Some((token, cmd)) => (Some(token), cmd),
                None => (Some(rest), ""),
            }
        }
        _ => (None, line),
    }
}

/// The refusal for a request this channel may not make; None when it may.
fn refuse(req: &Line, line: &str, local: bool, level: ControlLevel) -> Option<Failure> {
    let line = line.trim().to_string();
    match req.action.needs() {
        Needs::UnixSocket if !local => Some(Failure::NeedsUnixSocket { line }),
        Needs::Level(needed) if needed > level => Some(Failure::NeedsLevel {
            line,
            needed,
            has: level,
        }),
        _ => None,
    }
}

/// Whether a TCP client may use the control socket: `control_acl` when set, else loopback only.
fn tcp_client_allowed(ip: IpAddr, controller: &Controller) -> bool {
    let config = controller.config();
    match config.global.control_acl {
        Some(n) => config.global.acls.permits(n, ip),
        None => ip.is_loopback(),
    }
}

#[cfg(test)]
mod tests;
