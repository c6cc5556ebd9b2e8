//! The process-wide and `[http]` tables: the scalar settings of `Global` and `HttpSettings`,
//! and the macros that generate those structs where they live (`model`).

// === The process-wide table ===

/// Calls macro `$m` with `$pre` and then the process-wide scalar settings (top-level keys of a
/// file). The order is the TOML reader's and the checks'. Each entry: the doc, `key: Type =
/// default`, the kind, how `explain` tells of it and the bounds in words. The other process-wide
/// settings (paths, the control socket, ACLs) are hand-written in `model::Global`.
macro_rules! global_table {
    ($m:ident $($pre:tt)*) => {
        $m! { $($pre)* ;
            /// Worker threads (`-W`; default: the number of cores).
            workers: usize = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
                Threads { file: 1..=crate::config::settings::MAX_WORKERS as u64 }, Own,
                "1 to 1024";
            /// Sessions per process (`-x`); None = what the open-file limit allows.
            max_connections: Option<u32> = None,
                Limit { file: 1..=crate::addr::MAX_SESSIONS as u64 }, Own, "1 to 1000000";
            /// The listen backlog.
            backlog: u32 = 1024,
                Count {
                    file: 1..=crate::config::settings::MAX_BACKLOG as u64,
                    control: 1..=crate::config::settings::MAX_BACKLOG as u64,
                    floor: 0,
                },
                Own, "1 to 65535";
            /// Accepts per wake-up (`-m`).
            accept_batch: u32 = 100,
                Count {
                    file: 1..=crate::config::settings::MAX_ACCEPT_BATCH as u64,
                    control: 1..=crate::config::settings::MAX_ACCEPT_BATCH as u64,
                    floor: 0,
                },
                Own, "1 to 10000";
            /// How workers accept TCP clients: `accept4` when epoll says a listener is readable,
            /// or a multishot accept in each worker's io_uring (`auto`: io_uring unless the
            /// kernel refuses it).
            accept: AcceptMode = AcceptMode::Epoll, AcceptWord, Quiet, "epoll, io_uring or auto";
            /// How long a drain (reload, takeover, SIGTERM) lets sessions finish.
            drain_timeout: Duration = Duration::from_secs(30), Secs { nonzero: false }, Own, "";
            /// How long a drain keeps idle HTTP clients (kept alive, or accepted with no request
            /// yet) open for one more request, answered with `Connection: close`; capped by
            /// `drain_timeout`.
            drain_grace: Duration = Duration::from_secs(2), Secs { nonzero: false }, Own, "";
            /// TCP Fast Open on the listeners.
            tfo: bool = true, Flag { write_off: false }, Quiet, "";
            /// SO_REUSEPORT on the listeners.
            reuseport: bool = false, Flag { write_off: false }, Quiet, "";
            /// Each TCP listener gets one SO_REUSEPORT socket per worker, the kernel hashing
            /// each connection to one of them, instead of one socket every worker watches.
            listen_per_worker: bool = false, Flag { write_off: false }, Quiet, "";
            /// Bulk flows move through splice pipes (zero copy); false copies everything through
            /// buffers.
            splice: bool = true, Flag { write_off: false }, Quiet, "";
            /// While other processes leave no core idle, kept-alive HTTP clients gather on as
            /// few workers as carry Quill's load (fewer threads to wake); false keeps every
            /// worker accepting.
            concentrate: bool = true, Flag { write_off: false }, Quiet, "";
        }
    };
}
pub(crate) use global_table;

/// The most worker threads.
pub(crate) const MAX_WORKERS: usize = 1024;
/// The largest listen backlog (the kernel caps it at `net.core.somaxconn` anyway).
pub(crate) const MAX_BACKLOG: u32 = 65_535;
/// The most accepts per wake-up (`-m`).
pub(crate) const MAX_ACCEPT_BATCH: u32 = 10_000;

/// Generates `Global` (in `model`): the table's settings, then the others given before the `;`
/// (`name: Type = default,`), and the descriptors `GLOBAL`.
macro_rules! define_global {
    (
        $(#[$meta:meta])*
        { $( $(#[doc = $xdoc:literal])* $xfield:ident : $xty:ty = $xdefault:expr, )* } ;
        $(
            $(#[doc = $doc:literal])*
            $field:ident : $ty:ty = $default:expr, $kty:ident $({ $($kbody:tt)* })?,
                $explain:ident, $bounds:expr;
        )*
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub(crate) struct Global {
            $( $(#[doc = $doc])* pub $field: $ty, )*
            $( $(#[doc = $xdoc])* pub $xfield: $xty, )*
        }

        impl Default for Global {
            fn default() -> Global {
                Global {
                    $( $field: $default, )*
                    $( $xfield: $xdefault, )*
                }
            }
        }

        impl Global {
            /// The reload merge of every field: `theirs` (the sources now) if the sources
            /// changed it since `base`, else the running value (`ours`); see `state::merge`.
            pub(crate) fn merge(base: &Global, ours: &Global, theirs: &Global) -> Global {
                let mut out = theirs.clone();
                for e in GLOBAL {
                    e.merge(base, ours, theirs, &mut out);
                }
                $(
                    if base.$xfield == theirs.$xfield {
                        out.$xfield = ours.$xfield.clone();
                    }
                )*
                out
            }
        }

        /// The descriptors of the process-wide scalar settings, in the table's order.
        pub(crate) static GLOBAL: &[&dyn settings::Entry<Global>] = &[
            $( &settings::Field::<Global, _> {
                about: settings::About {
                    key: stringify!($field),
                    word: None,
                    bounds: $bounds,
                    doc: concat!($($doc, )*),
                    scope: settings::Scope::All,
                    explain: settings::Explain::$explain,
                },
                kind: settings::$kty $({ $($kbody)* })?,
                get: |g: &Global| &g.$field,
                get_mut: |g: &mut Global| &mut g.$field,
            }, )*
        ];
    };
}
pub(crate) use define_global;

// === The [http] table ===

/// Calls macro `$m` with `$pre` and then the scalar settings of an HTTP listener (`[http]`, the
/// file-wide defaults, and `[listener.http]`). The order is the TOML reader's; `HTTP_EXPLAIN_ORDER`
/// is `explain`'s. Each entry: the doc, `key: Type = default`, the kind (defined in
/// `config::http`, where the grammars of HTTP values live) and the bounds in words. The
/// structured keys (`request_headers`, `response_headers`, `error_pages`) are hand-written.
macro_rules! http_table {
    ($m:ident $($pre:tt)*) => {
        $m! { $($pre)* ;
            /// A request head must be complete this long after its first byte (408 if not;
            /// slowloris).
            header_timeout: Duration = Duration::from_secs(10), HttpSecs, "";
            /// A kept-alive client may stay idle this long between requests.
            keepalive_timeout: Duration = Duration::from_secs(60), HttpSecs, "";
            /// No body progress either way for this long ends the exchange.
            body_timeout: Duration = Duration::from_secs(60), HttpSecs, "";
            /// The server must send its first response byte this long after the request (504
            /// if not).
            response_timeout: Duration = Duration::from_secs(60), HttpSecs, "";
            /// An upgraded connection (WebSocket) may stay idle this long.
            tunnel_timeout: Duration = Duration::from_secs(3600), HttpSecs, "";
            /// Idle kept-alive connections a worker keeps per server.
            server_keepalive: u32 = 64,
                Ranged { range: 0..=MAX_SERVER_KEEPALIVE, sized: false }, "0 to 10000";
            /// An idle server connection is closed after this long (below usual server
            /// timeouts).
            server_idle_timeout: Duration = Duration::from_secs(4), HttpSecs, "";
            /// Requests one client connection may carry; the response to the last one says
            /// `Connection: close` (nginx's `keepalive_requests`). 0 = no limit.
            keepalive_requests: u32 = 0,
                Ranged { range: 0..=1_000_000, sized: false }, "0 to 1000000";
            /// Largest request body accepted (413 over it); None = unlimited.
            max_body: Option<u64> = None, Size, "";
            /// Longest request line (414 over it).
            max_request_line: u32 = 8 * 1024,
                Ranged { range: MIN_HEAD_LIMIT..=MAX_HEAD_LIMIT, sized: true }, "256 to 16384";
            /// Largest request head (431 over it).
            max_header_bytes: u32 = 16 * 1024,
                Ranged { range: MIN_HEAD_LIMIT..=MAX_HEAD_LIMIT, sized: true }, "256 to 16384";
            /// Most request header fields (431 over it).
            max_headers: u32 = 100, Ranged { range: 1..=MAX_HEADERS, sized: false }, "1 to 1000";
            /// How `X-Forwarded-For` is written.
            forwarded_for: ForwardedFor = ForwardedFor::Append, ForwardedForWord,
                "append, replace or off";
            /// Peers whose `X-Forwarded-For` (and `Forwarded`) is kept; from anyone else it is
            /// replaced.
            trusted_proxies: Vec<Net> = Vec::new(), Proxies, "";
            /// Add `X-Forwarded-Proto`.
            x_forwarded_proto: bool = true, HttpBool, "";
            /// Add `X-Forwarded-Host`.
            x_forwarded_host: bool = true, HttpBool, "";
            /// Add an RFC 7239 `Forwarded` field.
            forwarded: bool = false, HttpBool, "";
            /// Add `Via: 1.1 NAME` to requests and responses; None = no Via.
            via: Option<String> = None, ViaWord, "";
            /// Add `X-Request-ID` to requests that have none (and log it).
            request_id: bool = true, HttpBool, "";
            /// Whether servers get the path in normal form too (`Forward`), or as the client
            /// sent it (`Match`, the default); routes always match it normalised.
            normalize_path: NormalizePath = NormalizePath::Match, NormalizeWord,
                "match or forward";
            /// Keep request header fields whose names have `_` (nginx's
            /// `underscores_in_headers`); dropped by default, so `X_Forwarded_For` cannot pass
            /// for `X-Forwarded-For`.
            underscores_in_headers: bool = false, HttpBool, "";
            /// Take HTTP/2 with prior knowledge on a listener without TLS (h2c; HTTP/1.1 is
            /// still served there). Over TLS, HTTP/2 is chosen by ALPN.
            h2c: bool = false, HttpBool, "";
            /// HTTP/2 streams one connection may have open at once
            /// (SETTINGS_MAX_CONCURRENT_STREAMS); more are refused.
            h2_max_concurrent_streams: u32 = 100,
                Ranged { range: 1..=1000, sized: false }, "1 to 1000";
            /// HTTP/2 streams reset by the client before their response ended, refused or
            /// malformed that one connection may cause at once (then a tenth of it a second):
            /// past it, GOAWAY ENHANCE_YOUR_CALM (Rapid Reset, MadeYouReset).
            h2_glitches: u32 = 100, Ranged { range: 1..=100_000, sized: false }, "1 to 100000";
            /// HTTP/2 frames that move no request on (PING, SETTINGS, PRIORITY, empty DATA,
            /// WINDOW_UPDATE nothing waits for) one connection may send at once (then a tenth of
            /// it a second): past it, GOAWAY ENHANCE_YOUR_CALM.
            h2_control_frames: u32 = 1000,
                Ranged { range: 10..=1_000_000, sized: false }, "10 to 1000000";
        }
    };
}
pub(crate) use http_table;

/// `explain`'s order of the `[http]` keys (the differences from the defaults it lists), the
/// structured ones included.
pub(crate) const HTTP_EXPLAIN_ORDER: &[&str] = &[
    "header_timeout",
    "keepalive_timeout",
    "body_timeout",
    "response_timeout",
    "tunnel_timeout",
    "server_keepalive",
    "server_idle_timeout",
    "keepalive_requests",
    "max_body",
    "max_request_line",
    "max_header_bytes",
    "max_headers",
    "forwarded_for",
    "trusted_proxies",
    "x_forwarded_proto",
    "x_forwarded_host",
    "forwarded",
    "request_id",
    "underscores_in_headers",
    "h2c",
    "h2_max_concurrent_streams",
    "h2_glitches",
    "h2_control_frames",
    "via",
    "normalize_path",
    "request_headers",
    "response_headers",
    "error_pages",
];

/// Generates `HttpSettings` (in `model`): the table's settings, then the structured ones given
/// before the `;` (`name: Type = default,`).
macro_rules! define_http_settings {
    (
        $(#[$meta:meta])*
        { $( $(#[doc = $xdoc:literal])* $xfield:ident : $xty:ty = $xdefault:expr, )* } ;
        $(
            $(#[doc = $doc:literal])*
            $field:ident : $ty:ty = $default:expr, $kty:ident $({ $($kbody:tt)* })?, $bounds:expr;
        )*
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub(crate) struct HttpSettings {
            $( $(#[doc = $doc])* pub $field: $ty, )*
            $( $(#[doc = $xdoc])* pub $xfield: $xty, )*
        }

        impl Default for HttpSettings {
            fn default() -> HttpSettings {
                HttpSettings {
                    $( $field: $default, )*
                    $( $xfield: $xdefault, )*
                }
            }
        }
    };
}
pub(crate) use define_http_settings;
