//! Direct server return end to end, over the real binary, in network namespaces.
//!
//! One test binary (`cargo test --test dsr`); each file beside this one is a module of it.
//! The support code it needs is compiled once, here; `allow(dead_code)` marks the support
//! modules other binaries share, of which this one calls a part.

#[allow(dead_code)]
#[path = "../support/netns.rs"]
mod netns;
#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;

mod dsr;
mod ecmp;
mod maglev;
