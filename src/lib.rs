//! Quill: a Pen-compatible TCP load balancer for Linux, with one event loop per worker thread.
//!
//! Layers (a module uses only its own layer or lower ones):
//! - leaves: [`sys`] (all `unsafe`), [`addr`], [`clock`], [`metrics`];
//! - pure logic: [`config`], [`command`], [`balancer`], [`backend`];
//! - I/O: [`net`], [`listener`], [`proxy`], [`log`], [`demo`];
//! - assembly: [`runtime`], [`cli`].

// No unsafe code here: the workspace lint table denies it; all of it is in `quill_core::sys`.

pub mod acl;
pub mod addr;
pub mod admin;
pub mod backend;
pub mod balancer;
pub mod cli;
pub mod clock;
pub mod command;
pub mod config;
pub mod control;
pub mod demo;
pub mod health;
pub mod listener;
pub mod log;
pub mod metrics;
pub mod net;
pub mod proxy;
pub mod runtime;
pub mod status;
// The syscall wrappers live in `quill-core` (shared with `quill-bench`); `crate::sys` names them.
pub(crate) use quill_core::sys;
pub mod state;
pub mod systemd;
