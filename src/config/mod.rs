//! The validated configuration: what every listener accepts on, its pool, its selection mode and its
//! timeouts, plus process-wide settings. Built from the Pen command line (see `cli`) or a TOML file,
//! then handed to the runtime. Workers never read files: they receive a `Config`.
//!
//! Every error names the offending value; errors from a file start with `PATH:LINE:`.
//!
//! One file per job; `model` is below the others and imports none of them:
//! - `settings`: each scalar setting described once (key, control word, type, bounds, default,
//!   doc), and what the table generates (`Tuning`, `TuningPatch`, `Tune`); below `model`;
//! - `model`: the types (`Config`, `Global`, `ListenerConfig`, `HealthCheck`...), the
//!   bounds of every number and `validate`, one file per section;
//! - `toml`: reading a TOML file into the model (`Raw*`, `from_toml`);
//! - `write`: the model written back as control commands (the `write` command);
//! - `explain`: `quill check`'s explanation (a server's limits in `write`'s words);
//! - `http`: an HTTP listener's settings checked, patched key by key (`[http]`, `[listener.http]`)
//!   and compared with the defaults; the size and header-edit grammars.
//! - `routes`: `[[listener.route]]` tables read into `RouteConfig` (named `[[pool]]`s are read by
//!   `toml`, as listeners without a socket);
//! - `sites`: `[[listener.site]]` tables read into `SiteConfig` and the site's routes.
//!
//! Everything is re-exported here, so `crate::config::X` names any of it. Control commands are
//! applied to the model by `command::apply` (above `config`, which imports no `command`).

mod explain;
pub(crate) mod http;
pub(crate) mod model;
#[cfg(test)]
mod proptests;
mod routes;
pub(crate) mod settings;
mod sites;
mod toml;
mod web;
mod write;

pub(crate) use model::CgiAction;
pub(crate) use model::{
    compile_pattern, format_duration, parse_check_kind, parse_duration, parse_status_range,
    proxy_protocol_name, CheckKind, Config, ConfigError, ControlLevel, DsrSettings, ErrorKind,
    FastcgiAction, Global, HealthCheck, HostMatch, HttpSettings, ListenerConfig, ListenerKind,
    LogFormat, NormalizePath, PathCase, PathMatch, ProxyVersion, RateLimit, RefererRule,
    RouteAction, RouteConfig, SiteConfig, StaticAction, StreamKind, StreamProto, Symlinks, Tuning,
    TuningPatch, UnknownHost, ValueMatch, DSR_FLOWS, DSR_FLOW_IDLE, MAX_ACCEPT_BATCH, MAX_BACKLOG,
    MAX_CLIENTS, MAX_RISE_FALL, MAX_SESSIONS, MAX_WORKERS,
};
pub(crate) use toml::{check_certificates, load_file, parse_admin, read_config_text};
// What only the unit tests of other modules reach through `config`.
#[cfg(test)]
pub(crate) use model::MAX_DURATION;
#[cfg(test)]
pub(crate) use toml::from_toml;
