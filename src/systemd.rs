//! systemd integration without libsystemd: sockets passed by socket activation (`LISTEN_FDS`,
//! `LISTEN_FDNAMES`), and `sd_notify` messages (READY, RELOADING, STOPPING, WATCHDOG) sent as one
//! datagram each to `NOTIFY_SOCKET`. Both are plain protocols (see sd_listen_fds(3), sd_notify(3)).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

use crate::addr::ListenAddr;
use crate::listener;
use crate::sys;

/// The first descriptor systemd passes.
const LISTEN_FDS_START: i32 = 3;

/// A socket this process was given rather than bound itself, with its name if it has one.
#[derive(Debug)]
pub(crate) struct Inherited {
    pub name: Option<String>,
    pub fd: OwnedFd,
}

/// Takes the sockets passed by socket activation, if `LISTEN_PID` names this process. The variables
/// are removed so that nothing started later inherits them.
pub(crate) fn listen_fds() -> io::Result<Vec<Inherited>> {
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

/// Takes the inherited socket named `name` (the control socket, the admin listener) when it is a
/// listening stream socket at `expected`. One that is not is closed with a warning, so the caller
/// binds `expected` anew: a socket is never served at an address the configuration does not name.
pub(crate) fn take_named(
    inherited: &mut Vec<Inherited>,
    name: &str,
    expected: &ListenAddr,
    what: &str,
) -> Option<OwnedFd> {
    let i = inherited
        .iter()
        .position(|s| s.name.as_deref() == Some(name))?;
    let socket = inherited.remove(i);
    match listener::listening_addr(socket.fd.as_fd()) {
        Ok(actual) if listener::same_address(&actual, expected) => Some(socket.fd),
        Ok(actual) => {
            tracing::warn!("{what} moved from {actual} to {expected}: bound anew");
            None
        }
        Err(e) => {
            tracing::warn!(
                "inherited socket '{name}' ({what}): {e}; closing it and binding {expected} anew"
            );
            None
        }
    }
}

/// Sends one `sd_notify` message ("READY=1", ...) if systemd asked for them; errors are logged.
pub(crate) fn notify(state: &str) {
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
pub(crate) fn notify_reloading() {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let usec = now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1000;
    notify(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
}

/// How often to send `WATCHDOG=1`: half the interval systemd set, if it set one for us.
pub(crate) fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.parse::<u32>().ok() != Some(std::process::id()) {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

/// Parses a systemd time span (systemd.time(7)): `infinity`, or numbers with units summed
/// (`90`, `1.5s`, `5min`, `1h 30min`, `250ms`); a bare number is seconds. Quill's own durations
/// (`500ms`, `2s`, `5m`, `1h`) mean the same here, so socket-proxyd's `--exit-idle-time` values
/// carry over unchanged. `infinity` is `Duration::MAX` (never).
pub(crate) fn parse_timespan(text: &str) -> Result<Duration, String> {
    let bad = |why: &str| format!("invalid time span '{text}': {why}");
    let s = text.trim();
    if s == "infinity" {
        return Ok(Duration::MAX);
    }
    let mut rest = s;
    let mut total = 0f64;
    let mut parts = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_len]
            .parse()
            .map_err(|_| bad("expected a number"))?;
        rest = rest[number_len..].trim_start();
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace())
            .unwrap_or(rest.len());
        let unit = timespan_unit(&rest[..unit_len])
            .ok_or_else(|| bad(&format!("unknown unit '{}'", &rest[..unit_len])))?;
        rest = rest[unit_len..].trim_start();
        total += number * unit;
        parts += 1;
    }
    if parts == 0 {
        return Err(bad("empty"));
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad("out of range"))
}

/// Seconds per unit of a systemd time span ("" = seconds).
fn timespan_unit(unit: &str) -> Option<f64> {
    Some(match unit {
        "usec" | "us" | "µs" | "μs" => 1e-6,
        "msec" | "ms" => 1e-3,
        "" | "seconds" | "second" | "sec" | "s" => 1.0,
        "minutes" | "minute" | "min" | "m" => 60.0,
        "hours" | "hour" | "hr" | "h" => 3600.0,
        "days" | "day" | "d" => 86_400.0,
        "weeks" | "week" | "w" => 604_800.0,
        "months" | "month" | "M" => 2_629_800.0,
        "years" | "year" | "y" => 31_557_600.0,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timespans_parse_like_systemd() {
        let check = |text: &str, ms: u128| {
            assert_eq!(parse_timespan(text).unwrap().as_millis(), ms, "{text}");
        };
        check("90", 90_000);
        check("1.5s", 1_500);
        check("250ms", 250);
        check("5min", 300_000);
        check("5m", 300_000);
        check("1h 30min", 5_400_000);
        check("2h30m", 9_000_000);
        check(" 1 sec ", 1_000);
        check("1d", 86_400_000);
        assert_eq!(parse_timespan("infinity"), Ok(Duration::MAX));
        for bad in ["", "x", "5 parsecs", "1..2s", "-1s", "s"] {
            let err = parse_timespan(bad).unwrap_err();
            assert!(err.contains(&format!("'{bad}'")), "{err}");
        }
    }
}
