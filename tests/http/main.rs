//! HTTP listeners end to end, over the real binary: the proxy and its safety rules, routes,
//! configuration and control, the request lifecycle, access log, metrics, server connections,
//! upgrades, whole sessions, and properties over arbitrary bytes.
//!
//! One test binary (`cargo test --test http`); each file beside this one is a module of it.
//! The support code it needs is compiled once, here; `allow(dead_code)` marks the support
//! modules other binaries share, of which this one calls a part.

#[allow(dead_code)]
#[path = "../admin_support/mod.rs"]
mod admin_support;
#[allow(dead_code)]
#[path = "../support/ctl.rs"]
mod ctl;
#[allow(dead_code)]
#[path = "../support/desync.rs"]
mod desync;
#[allow(dead_code)]
#[path = "../support/http.rs"]
mod http_support;
#[path = "../support/session.rs"]
mod session;
#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;
#[allow(dead_code)]
#[path = "../support/tls.rs"]
mod tls_support;

mod access_rules;
mod config;
mod control;
mod http1;
mod lifecycle;
mod log;
mod maglev;
mod metrics;
mod property;
mod proxy;
mod routes;
mod safety;
mod server_conns;
mod sessions;
mod upgrade;
mod workers;
