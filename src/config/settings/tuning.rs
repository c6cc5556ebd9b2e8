//! The tuning table: per-listener timeouts and socket settings, and what it generates
//! (`Tuning`, `TuningPatch`, `Tune`, the `TUNING` descriptors).

use std::net::IpAddr;
use std::time::Duration;

use super::{
    About, CommandError, Count, Entry, Explain, Fastclose, FastcloseWord, Field, Flag, IpWord,
    Kind, Parsed, ProxyVersion, ProxyWord, Scope, Secs,
};

// === The tuning table ===

/// Calls macro `$m` with `$pre` and then the tuning settings: per-listener timeouts and socket
/// settings, accepted at the top level of a file (every listener's default) and in a listener.
/// The order is the TOML reader's (the key list an unknown key's error names); `WRITE_ORDER` is
/// `write`'s. Each entry: the doc, `key: Type = default`, the `Tune` variant, the control word
/// (or None), the kind, the scope, how `explain` tells of it and the bounds in words.
macro_rules! tuning_table {
    ($m:ident $($pre:tt)*) => {
        $m! { $($pre)* ;
            /// Backend connect timeout (`-t`).
            connect_timeout: Duration = Duration::from_secs(3),
                ConnectTimeout, Some("timeout"), Secs { nonzero: true }, All, Own, "";
            /// How long an HTTP request waits for a server while every usable one is at its
            /// `max` (HAProxy's `timeout queue`), then 503; zero = refused at once (Pen's way).
            queue_timeout: Duration = Duration::from_secs(10),
                QueueTimeout, Some("queue_timeout"), Secs { nonzero: false }, All, Own, "";
            /// How long a failed server is skipped (`-b`).
            blacklist: Duration = Duration::from_secs(30),
                Blacklist, Some("blacklist"), Secs { nonzero: false }, All, Own, "";
            /// Client tracking expiry (`-T`), zero = never.
            tracking_time: Duration = Duration::ZERO,
                Tracking, Some("tracking"), Secs { nonzero: false }, All, Quiet, "";
            /// Client tracking table size (`-c`).
            clients_max: u32 = 2048,
                ClientsMax, Some("clients_max"),
                Count {
                    file: 1..=crate::balancer::MAX_CLIENTS as u64,
                    control: 0..=crate::balancer::MAX_CLIENTS as u64,
                    floor: 1,
                },
                All, Own, "1 to 1000000";
            /// Close sessions with no traffic for this long; zero = never.
            idle_timeout: Duration = Duration::ZERO,
                IdleTimeout, Some("idle_timeout"), Secs { nonzero: false }, All, Own, "";
            /// Close a half-closed session that makes no progress for this long.
            fin_timeout: Duration = Duration::from_secs(60),
                FinTimeout, None, Secs { nonzero: false }, All, Own, "";
            /// TCP_NODELAY on client and backend sockets.
            tcp_nodelay: bool = true,
                TcpNodelay, Some("tcp_nodelay"), Flag { write_off: true }, Tcp, Quiet, "";
            /// Pen's `tcp_fastclose`: which side's EOF closes the whole session at once.
            tcp_fastclose: Fastclose = Fastclose::Off,
                TcpFastclose, Some("tcp_fastclose"), FastcloseWord, Tcp, Quiet, "off, up, down or both";
            /// TCP_DEFER_ACCEPT on listeners whose clients speak first (HTTP, TLS, PROXY
            /// protocol, SNI routes): a client is accepted once its first bytes are in.
            defer_accept: bool = true,
                DeferAccept, Some("defer_accept"), Flag { write_off: true }, Tcp, Quiet, "";
            /// SO_KEEPALIVE on client and backend sockets.
            keepalive: bool = false,
                Keepalive, Some("keepalive"), Flag { write_off: true }, Tcp, Quiet, "";
            /// Sessions one client address may hold on this listener at once; 0 = no limit.
            max_per_source: u32 = 0,
                MaxPerSource, Some("max_per_source"),
                Count {
                    file: 0..=crate::addr::MAX_SESSIONS as u64,
                    control: 0..=crate::addr::MAX_SESSIONS as u64,
                    floor: 0,
                },
                All, Own, "0 to 1000000";
            /// Pen's `transparent`: server connections leave from the client's own address
            /// (IP_TRANSPARENT; TCP listeners only).
            transparent: bool = false,
                Transparent, Some("transparent"), Flag { write_off: false }, All, Own, "";
            /// Pen's `source IP`: the local address of server connections.
            source: Option<IpAddr> = None,
                Source, Some("source"), IpWord, All, Own, "an IP address";
            /// PROXY protocol header sent to this pool's servers before the client's bytes
            /// (`proxy_protocol = "v1" | "v2"`); None = none.
            proxy_protocol: Option<ProxyVersion> = None,
                ProxyProtocol, Some("proxy_protocol"), ProxyWord, All, Quiet, "v1, v2 or off";
        }
    };
}
pub(crate) use tuning_table;

/// `write`'s order of the tuning settings (by key): every one with a control word, once.
pub(crate) const WRITE_ORDER: &[&str] = &[
    "blacklist",
    "connect_timeout",
    "queue_timeout",
    "tracking_time",
    "clients_max",
    "max_per_source",
    "idle_timeout",
    "tcp_fastclose",
    "proxy_protocol",
    "tcp_nodelay",
    "defer_accept",
    "keepalive",
    "transparent",
    "source",
];

/// Generates the section's struct, default, patch, control value and descriptors from the table.
macro_rules! define_tuning {
    ($(;)? $(
        $(#[doc = $doc:literal])*
        $field:ident : $ty:ty = $default:expr,
            $variant:ident, $word:expr, $kty:ident $({ $($kbody:tt)* })?, $scope:ident, $explain:ident,
                $bounds:expr;
    )*) => {
        /// Per-listener timeouts and socket settings. Top-level values in a file are the
        /// defaults. Generated from [`tuning_table`].
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub(crate) struct Tuning {
            $( $(#[doc = $doc])* pub $field: $ty, )*
        }

        impl Default for Tuning {
            fn default() -> Tuning {
                Tuning { $( $field: $default, )* }
            }
        }

        /// A partial `Tuning`: what one source (file level, command line) sets.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub(crate) struct TuningPatch {
            $( pub $field: Option<$ty>, )*
        }

        impl Tuning {
            /// Sets every value the patch sets.
            pub(crate) fn apply(&mut self, p: &TuningPatch) {
                $( if let Some(v) = &p.$field { self.$field = v.clone(); } )*
            }
        }

        /// One tuning setting's new value, from a control line (`timeout 5`, `no keepalive`).
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub(crate) enum Tune {
            $( $variant($ty), )*
        }

        impl Tune {
            /// Parses a control line whose word is a tuning setting's; None for any other word.
            pub(crate) fn parse(
                word: &str,
                negated: bool,
                args: &[&str],
            ) -> Option<Result<Parsed<Tune>, CommandError>> {
                $(
                    if $word == Some(word) {
                        return Some($kty $({ $($kbody)* })?.parse_word(word, negated, args).map(|p| p.map(Tune::$variant)));
                    }
                )*
                None
            }

            /// Sets the value in `t`, after the setting's own check; the error is the message.
            pub(crate) fn apply(&self, t: &mut Tuning) -> Result<(), String> {
                match self {
                    $( Tune::$variant(v) => {
                        let name = $word.unwrap_or(stringify!($field));
                        t.$field = $kty $({ $($kbody)* })?.on_set(name, v.clone())?;
                    } )*
                }
                Ok(())
            }
        }

        /// The tuning settings' descriptors, in the table's order.
        pub(crate) static TUNING: &[&dyn Entry<Tuning>] = &[
            $( &Field::<Tuning, _> {
                about: About {
                    key: stringify!($field),
                    word: $word,
                    bounds: $bounds,
                    doc: concat!($($doc, )*),
                    scope: Scope::$scope,
                    explain: Explain::$explain,
                },
                kind: $kty $({ $($kbody)* })?,
                get: |t: &Tuning| &t.$field,
                get_mut: |t: &mut Tuning| &mut t.$field,
            }, )*
        ];
    };
}

tuning_table!(define_tuning);

impl Tuning {
    /// Checks every bound.
    pub(crate) fn check(&self) -> Result<(), String> {
        TUNING.iter().try_for_each(|e| e.check(self))
    }

    /// The control lines `write` states for these settings, each after `prefix`; `udp`: of a
    /// UDP listener (TCP-only settings left out).
    pub(crate) fn write(&self, out: &mut String, prefix: &str, udp: bool) {
        for key in WRITE_ORDER {
            let Some(e) = TUNING.iter().find(|e| e.about().key == *key) else {
                continue;
            };
            if udp && e.about().scope == Scope::Tcp {
                continue;
            }
            if let Some(line) = e.written(self) {
                *out += &format!("{prefix}{line}\n");
            }
        }
    }

    /// The reload merge of every tuning setting (see `state::merge`).
    pub(crate) fn merge(base: &Tuning, ours: &Tuning, theirs: &Tuning) -> Tuning {
        let mut out = theirs.clone();
        for e in TUNING {
            e.merge(base, ours, theirs, &mut out);
        }
        out
    }

    /// The settings `explain` lists as `key value` that differ from their default.
    pub(crate) fn listed_differences(&self) -> Vec<String> {
        let d = Tuning::default();
        TUNING
            .iter()
            .filter(|e| e.about().explain == Explain::Listed && !e.is_default(self, &d))
            .map(|e| format!("{} {}", e.about().key, e.shown(self)))
            .collect()
    }
}
