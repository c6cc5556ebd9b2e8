//! Quill under attack, over the real binary: abusive clients, the admin and control sockets,
//! the data path, hostile input, takeover, trusted files, and memory and descriptor bounds.
//!
//! One test binary (`cargo test --test security`); each file beside this one is a module of it.
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

mod abuse;
mod admin;
mod control;
mod data;
mod input;
mod memory;
mod takeover;
mod trusted_files;
