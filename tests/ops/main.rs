//! Operating Quill, over the real binary: accepting (epoll and io_uring), reload and takeover, systemd, the process lifecycle,
//! worker threads, day-to-day operations, packaging and `quill bench`.
//!
//! One test binary (`cargo test --test ops`); each file beside this one is a module of it.
//! The support code it needs is compiled once, here; `allow(dead_code)` marks the support
//! modules other binaries share, of which this one calls a part.

#[allow(dead_code)]
#[path = "../support/ctl.rs"]
mod ctl;
#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;

mod accept;
mod bench;
mod lifecycle;
mod listen_per_worker;
mod ops;
mod packaging;
mod reload;
mod systemd;
mod workers;
