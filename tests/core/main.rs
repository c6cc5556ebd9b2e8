//! Quill's layer-4 proxy end to end, over the real binary: balancing, failover, forwarding,
//! the command line and the configuration file, the demo servers, the session contract, ACLs and
//! GeoIP, health checks, PROXY protocol toward servers, and transparent proxying.
//!
//! One test binary (`cargo test --test core`); each file beside this one is a module of it.
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
#[path = "../support/netns.rs"]
mod netns;
#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;
#[allow(dead_code)]
#[path = "../support/tls.rs"]
mod tls_support;

mod acl;
mod balance;
mod cli;
mod config;
mod demo;
mod discovery;
mod failover;
mod forwarding;
mod geoip;
mod health;
mod proxy_protocol;
mod session;
mod transparent;
