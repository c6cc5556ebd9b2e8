//! The start-up of a DSR process (listeners with `dsr_if`): frames, not sessions, so no
//! listening socket, workers or control socket. The same phases as [`super::startup`]'s, in the
//! DSR module's terms: the packet sockets opened (`dsr::open`, the part that needs CAP_NET_RAW),
//! the pid file written and privileges dropped, then one thread per listener (`dsr::serve`)
//! until SIGTERM or SIGINT.
//!
//! It is here and not in `dsr` because the pid file and the privileges are start-up's
//! ([`super::startup::drop_privileges`]), and a service may not import the assembly layer.

use super::startup::{drop_privileges, write_pid_file};
use crate::config::Config;
use crate::state::RunError;

/// Runs the DSR listeners of `config` until they have stopped.
pub(super) fn run(config: &Config) -> Result<(), RunError> {
    let opened = crate::dsr::open(config)?;
    // The packet sockets are open: what follows needs no privilege.
    write_pid_file(&config.global)?;
    drop_privileges(&config.global)?;
    crate::dsr::serve(opened)
}
