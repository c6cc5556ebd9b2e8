//! Active health checks (in progress: the checker thread is not written yet).

use std::io;
use std::sync::Arc;

use crate::runtime::shared::Shared;

/// Starts the health checker for every pool that has a check configured.
pub fn spawn(_shared: Arc<Shared>) -> io::Result<()> {
    Ok(())
}
