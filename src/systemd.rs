//! systemd integration without libsystemd: sockets passed by socket activation (`LISTEN_FDS`,
//! `LISTEN_FDNAMES`), and `sd_notify` messages (READY, RELOADING, STOPPING, WATCHDOG) sent as one
//! datagram each to `NOTIFY_SOCKET`. Both are plain protocols (see sd_listen_fds(3), sd_notify(3)).

use std::io;
use std::os::fd::OwnedFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

use crate::sys;

/// The first descriptor systemd passes.
const LISTEN_FDS_START: i32 = 3;

/// A socket this process was given rather than bound itself, with its name if it has one.
#[derive(Debug)]
pub struct Inherited {
    pub name: Option<String>,
    pub fd: OwnedFd,
}

/// Takes the sockets passed by socket activation, if `LISTEN_PID` names this process. The variables
/// are removed so that nothing started later inherits them.
pub fn listen_fds() -> io::Result<Vec<Inherited>> {
    let pid = std::env::var("LISTEN_PID").ok();
    let count = std::env::var("LISTEN_FDS").ok();
    let names = std::env::var("LISTEN_FDNAMES").ok();
    for var in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(var);
    }
    let (Some(pid), Some(count)) = (pid, count) else {
        return Ok(Vec::new());
    };
    if pid.trim().parse::<u32>().ok() != Some(std::process::id()) {
        return Ok(Vec::new());
    }
    let count: i32 = count.trim().parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("LISTEN_FDS: '{count}' is not a number"),
        )
    })?;
    let names: Vec<String> = names
        .map(|n| n.split(':').map(str::to_string).collect())
        .unwrap_or_default();
    (0..count.max(0))
        .map(|i| {
            let fd = sys::take_inherited_fd(LISTEN_FDS_START + i).map_err(|e| {
                io::Error::new(e.kind(), format!("LISTEN_FDS descriptor {}: {e}", 3 + i))
            })?;
            let name = names
                .get(i as usize)
                .filter(|n| !n.is_empty() && n.as_str() != "unknown")
                .cloned();
            Ok(Inherited { name, fd })
        })
        .collect()
}

/// Sends one `sd_notify` message ("READY=1", ...) if systemd asked for them; errors are logged.
pub fn notify(state: &str) {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let result = (|| -> io::Result<()> {
        let socket = UnixDatagram::unbound()?;
        let bytes = target.as_encoded_bytes();
        let addr = match bytes.strip_prefix(b"@") {
            Some(name) => SocketAddr::from_abstract_name(name)?,
            None => SocketAddr::from_pathname(&target)?,
        };
        socket.send_to_addr(state.as_bytes(), &addr)?;
        Ok(())
    })();
    if let Err(e) = result {
        tracing::warn!("sd_notify {state:?}: {e}");
    }
}

/// `RELOADING=1` with the monotonic time systemd's notify-reload services expect.
pub fn notify_reloading() {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let usec = now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1000;
    notify(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
}

/// How often to send `WATCHDOG=1`: half the interval systemd set, if it set one for us.
pub fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.parse::<u32>().ok() != Some(std::process::id()) {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}
