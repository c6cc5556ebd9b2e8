//! Quill: a Pen-compatible TCP load balancer for Linux, with one event loop per worker thread.
//!
//! Layers (a module uses only its own layer or lower ones):
//! - leaves: [`sys`] (all `unsafe`), [`addr`], [`clock`], [`metrics`];
//! - pure logic: [`config`], [`command`], [`balancer`], [`backend`];
//! - I/O: [`listener`], [`proxy`], [`log`], [`demo`];
//! - assembly: [`runtime`], [`cli`].

// Only `sys` may contain unsafe code; the compiler enforces it for every other module.
#![deny(unsafe_code)]

pub mod acl;
pub mod addr;
pub mod admin;
pub mod backend;
pub mod balancer;
pub mod bench;
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
pub mod proxy;
pub mod runtime;
pub mod status;
#[allow(unsafe_code)]
pub mod sys;
pub mod systemd;
