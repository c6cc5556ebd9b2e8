//! Quill's control plane end to end, over the real binary: the control socket and its
//! language, the admin listener (status, metrics) and the status page.
//!
//! One test binary (`cargo test --test control`); each file beside this one is a module of it.
//! The support code it needs is compiled once, here; `allow(dead_code)` marks the support
//! modules other binaries share, of which this one calls a part.

#[path = "../admin_support/mod.rs"]
mod admin_support;
#[allow(dead_code)]
#[path = "../support/ctl.rs"]
mod ctl;
#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;

mod admin;
mod control;
mod status_page;
