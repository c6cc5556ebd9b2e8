//! TLS end to end, over the real binary: termination and its configuration, certificates and
//! their reload, session resumption, TLS toward origins, passthrough, HTTP over TLS, and an audit
//! by other TLS stacks.
//!
//! One test binary (`cargo test --test tls`); each file beside this one is a module of it.
//! The support code it needs is compiled once, here; `allow(dead_code)` marks the support
//! modules other binaries share, of which this one calls a part.

#[allow(dead_code)]
#[path = "../admin_support/mod.rs"]
mod admin_support;
#[allow(dead_code)]
#[path = "../support/ctl.rs"]
mod ctl;
#[allow(dead_code)]
#[path = "../support/http.rs"]
mod http_support;
#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;
#[allow(dead_code)]
#[path = "../support/tls.rs"]
mod tls_support;

mod audit;
mod certs;
mod config;
mod http;
mod origin;
mod passthrough;
mod proxy;
mod reload;
mod resume;
mod tls_local;
