//! Quill: a Pen-compatible TCP load balancer for Linux, with one event loop per worker thread.
//!
//! The modules' layers (which may import which) are listed and checked in `tests/layers.rs`.

// An item is `pub` only when another crate can reach it (the binary, the tests, the other
// crates of the workspace); the rest is `pub(crate)`, so the compiler finds what is dead.
#![deny(unreachable_pub)]
// No unsafe code here: the workspace lint table denies it; all of it is in `quill_core::sys`.
// Quill never panics on input: the workspace's panic bans, held here at the crate root so that
// the integration tests (same package, other targets) are not under them (see Cargo.toml).
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod acl;
mod addr;
mod admin;
mod backend;
mod balancer;
pub mod cli;
mod clock;
mod command;
mod config;
mod control;
pub mod demo;
mod discovery;
mod dsr;
mod generate;
mod geoip;
mod health;
mod listener;
mod log;
mod metrics;
mod net;
mod per_worker;
mod proxy;
mod queue;
mod route;
mod runtime;
mod status;
// The syscall wrappers live in `quill-core` (shared with `quill-bench`); `crate::sys` names them.
pub(crate) use quill_core::sys;
mod state;
mod systemd;
mod takeover;
mod tls;
mod udp;
mod web;
