//! Per-listener timeouts and socket settings (`Tuning`), the partial form one source sets
//! (`TuningPatch`), and `tcp_fastclose`'s choices.

use std::net::IpAddr;
use std::time::Duration;

use super::bounds::{check_duration, in_range, MAX_CLIENTS, MAX_SESSIONS};

/// Pen's `tcp_fastclose`: which side's EOF closes the whole session at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Fastclose {
    #[default]
    Off,
    /// The server's EOF closes the session.
    Up,
    /// The client's EOF closes the session.
    Down,
    Both,
}

impl Fastclose {
    pub(crate) fn parse(s: &str) -> Option<Fastclose> {
        Some(match s {
            "off" => Fastclose::Off,
            "up" => Fastclose::Up,
            "down" => Fastclose::Down,
            "both" => Fastclose::Both,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Fastclose::Off => "off",
            Fastclose::Up => "up",
            Fastclose::Down => "down",
            Fastclose::Both => "both",
        }
    }

    /// Whether the server's EOF ends the session.
    pub(crate) fn on_server_eof(self) -> bool {
        matches!(self, Fastclose::Up | Fastclose::Both)
    }

    /// Whether the client's EOF ends the session.
    pub(crate) fn on_client_eof(self) -> bool {
        matches!(self, Fastclose::Down | Fastclose::Both)
    }
}

pub(crate) use quill_core::proxy_header::Version as ProxyVersion;

/// Per-listener timeouts and socket settings. Top-level values in a file are the defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Tuning {
    /// Backend connect timeout (`-t`).
    pub connect_timeout: Duration,
    /// How long a failed server is skipped (`-b`).
    pub blacklist: Duration,
    /// Client tracking expiry (`-T`), zero = never.
    pub tracking_time: Duration,
    /// Client tracking table size (`-c`).
    pub clients_max: u32,
    /// Close sessions with no traffic for this long; zero = never.
    pub idle_timeout: Duration,
    /// Close a half-closed session that makes no progress for this long.
    pub fin_timeout: Duration,
    pub tcp_nodelay: bool,
    pub tcp_fastclose: Fastclose,
    /// SO_KEEPALIVE on client and backend sockets.
    pub keepalive: bool,
    /// Sessions one client address may hold on this listener at once; 0 = no limit.
    pub max_per_source: u32,
    /// Pen's `transparent`: server connections leave from the client's own address
    /// (IP_TRANSPARENT; TCP listeners only).
    pub transparent: bool,
    /// Pen's `source IP`: the local address of server connections.
    pub source: Option<IpAddr>,
    /// PROXY protocol header sent to this pool's servers before the client's bytes
    /// (`proxy_protocol = "v1" | "v2"`); None = none.
    pub proxy_protocol: Option<ProxyVersion>,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            connect_timeout: Duration::from_secs(3),
            blacklist: Duration::from_secs(30),
            tracking_time: Duration::ZERO,
            clients_max: 2048,
            idle_timeout: Duration::ZERO,
            fin_timeout: Duration::from_secs(60),
            tcp_nodelay: true,
            tcp_fastclose: Fastclose::Off,
            keepalive: false,
            max_per_source: 0,
            transparent: false,
            source: None,
            proxy_protocol: None,
        }
    }
}

/// A partial `Tuning`: what one source (file level, command line) sets.
#[derive(Clone, Debug, Default)]
pub(crate) struct TuningPatch {
    pub connect_timeout: Option<Duration>,
    pub blacklist: Option<Duration>,
    pub tracking_time: Option<Duration>,
    pub clients_max: Option<u32>,
    pub idle_timeout: Option<Duration>,
    pub fin_timeout: Option<Duration>,
    pub tcp_nodelay: Option<bool>,
    pub tcp_fastclose: Option<Fastclose>,
    pub keepalive: Option<bool>,
    pub max_per_source: Option<u32>,
    pub transparent: Option<bool>,
    pub source: Option<IpAddr>,
    /// `Some(None)`: `off`.
    pub proxy_protocol: Option<Option<ProxyVersion>>,
}

impl Tuning {
    /// Checks every bound (see `MAX_*`).
    pub(crate) fn check(&self) -> Result<(), String> {
        for (name, d) in [
            ("timeout", self.connect_timeout),
            ("blacklist", self.blacklist),
            ("tracking", self.tracking_time),
            ("idle_timeout", self.idle_timeout),
            ("fin_timeout", self.fin_timeout),
        ] {
            check_duration(name, d)?;
        }
        in_range(
            "clients_max",
            self.clients_max.into(),
            1..=MAX_CLIENTS.into(),
        )?;
        in_range(
            "max_per_source",
            self.max_per_source.into(),
            0..=MAX_SESSIONS.into(),
        )
    }

    pub(crate) fn apply(&mut self, p: &TuningPatch) {
        fn set<T: Clone>(slot: &mut T, value: &Option<T>) {
            if let Some(v) = value {
                *slot = v.clone();
            }
        }
        set(&mut self.connect_timeout, &p.connect_timeout);
        set(&mut self.blacklist, &p.blacklist);
        set(&mut self.tracking_time, &p.tracking_time);
        set(&mut self.clients_max, &p.clients_max);
        set(&mut self.idle_timeout, &p.idle_timeout);
        set(&mut self.fin_timeout, &p.fin_timeout);
        set(&mut self.tcp_nodelay, &p.tcp_nodelay);
        set(&mut self.tcp_fastclose, &p.tcp_fastclose);
        set(&mut self.keepalive, &p.keepalive);
        set(&mut self.max_per_source, &p.max_per_source);
        set(&mut self.transparent, &p.transparent);
        if p.source.is_some() {
            self.source = p.source;
        }
        set(&mut self.proxy_protocol, &p.proxy_protocol);
    }
}
