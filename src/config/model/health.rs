//! An active health check for a pool's servers (`HealthCheck`, `CheckKind`): its bounds and how
//! it is shown.

use std::fmt;
use std::time::Duration;

use super::bounds::{check_duration, format_duration, in_range, MAX_RISE_FALL};

/// An active health check for the servers of a pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HealthCheck {
    pub kind: CheckKind,
    /// Time between two checks of one server.
    pub interval: Duration,
    /// How long one check may take.
    pub timeout: Duration,
    /// Successes in a row that bring a down server up.
    pub rise: u32,
    /// Failures in a row that take an up server down.
    pub fall: u32,
    /// The `Host` an HTTP check sends (`host`); None: the server's address.
    pub host: Option<String>,
}

/// What a check does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CheckKind {
    /// The connect succeeds.
    Tcp,
    /// `GET path HTTP/1.0` answers with a status in `expect` (inclusive).
    Http { path: String, expect: (u16, u16) },
    /// UDP servers: the datagram `send` draws an answer containing `expect` (any answer when empty).
    Udp { send: String, expect: String },
}

impl HealthCheck {
    /// Checks every bound: interval and timeout more than 0 and at most 30 days, rise and fall 1
    /// to `MAX_RISE_FALL`.
    pub(crate) fn check(&self) -> Result<(), String> {
        for (name, d) in [
            ("health interval", self.interval),
            ("health timeout", self.timeout),
        ] {
            if d.is_zero() {
                return Err(format!("{name}: must be more than 0"));
            }
            check_duration(name, d)?;
        }
        in_range("health rise", self.rise.into(), 1..=MAX_RISE_FALL.into())?;
        in_range("health fall", self.fall.into(), 1..=MAX_RISE_FALL.into())
    }
}

impl Default for HealthCheck {
    fn default() -> HealthCheck {
        HealthCheck {
            kind: CheckKind::Tcp,
            interval: Duration::from_secs(2),
            timeout: Duration::from_secs(1),
            rise: 2,
            fall: 3,
            host: None,
        }
    }
}

impl fmt::Display for HealthCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            CheckKind::Tcp => f.write_str("tcp")?,
            CheckKind::Udp { send, expect } => {
                write!(f, "udp sending {send:?}")?;
                if !expect.is_empty() {
                    write!(f, " expecting {expect:?}")?;
                }
            }
            CheckKind::Http { path, expect } => {
                write!(f, "http GET {path} expecting {}-{}", expect.0, expect.1)?;
                if let Some(host) = &self.host {
                    write!(f, " with Host {host}")?;
                }
            }
        }
        write!(
            f,
            " every {}, timeout {}, rise {}, fall {}",
            format_duration(self.interval),
            format_duration(self.timeout),
            self.rise,
            self.fall
        )
    }
}
