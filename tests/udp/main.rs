//! UDP listeners end to end, over the real binary.
//!
//! One test binary (`cargo test --test udp`); each file beside this one is a module of it.
//! The support code it needs is compiled once, here; `allow(dead_code)` marks the support
//! modules other binaries share, of which this one calls a part.

#[allow(dead_code)]
#[path = "../support/ctl.rs"]
mod ctl;
#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;

mod udp;
