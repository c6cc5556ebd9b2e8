//! The running state, one layer below everything that reads it: [`shared`] (what the workers,
//! the control socket, the health checker and the admin listener read and count), [`permit`]
//! (the session count against `-x` and the permit each session holds) and [`controller`]
//! (changes to the running configuration, one at a time, each decided first by a
//! [`plan::Plan`]), with the messages the main thread waits for and [`RunError`], why the process
//! could not start or run.

pub(crate) mod controller;
mod error;
pub(crate) mod idle;
mod merge;
pub(crate) mod permit;
pub(crate) mod plan;
pub(crate) mod shared;

pub(crate) use error::{PrivilegeError, RunError, ThreadKind};

use crate::config::{Config, ConfigError};

/// Rebuilds the configuration from its sources (file, command line, `-F` file) for a reload.
pub(crate) type Rebuild = Box<dyn Fn() -> Result<Config, ConfigError> + Send + Sync>;

/// What the main thread waits for.
pub(crate) enum Msg {
    Signal(i32),
    WorkerDone,
    /// `exit` over the control socket.
    Exit,
    /// A new process has the sockets: drain without removing socket files.
    HandedOver,
}
