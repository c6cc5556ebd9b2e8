//! The admin HTTP listener (in progress: not written yet).

use std::io;
use std::net::TcpListener;
use std::sync::Arc;

use crate::runtime::shared::Shared;

/// Serves `/metrics`, `/api/status` and `/` on `socket`.
pub fn spawn(_socket: TcpListener, _shared: Arc<Shared>) -> io::Result<()> {
    Ok(())
}
