//! Commands that change the running configuration through the controller: a setting (on a
//! listener's pool or a named pool), `reload` and `tls reload`. The reply's `note` is what the
//! change did, in words.

use serde_json::json;

use super::{Answer, Failure, Reply};
use crate::command::Command;
use crate::state::controller::Controller;
use crate::state::plan::Applied;
use crate::status;

fn noted(applied: &Applied) -> Reply {
    Reply::done(json!({ "ok": true, "note": applied.to_string() }))
}

/// A setting command on a listener's pool (or the only listener's).
pub(super) fn set(controller: &Controller, listener: Option<&str>, cmd: &Command) -> Answer {
    let applied = controller.set(listener, cmd)?;
    after_set(cmd, controller);
    Ok(noted(&applied))
}

/// A setting command on named pool `name`.
pub(super) fn set_pool(controller: &Controller, name: &str, cmd: &Command) -> Answer {
    let applied = controller.set_to(None, Some(name), cmd)?;
    Ok(noted(&applied))
}

/// Commands whose effect is more than a configuration change.
fn after_set(cmd: &Command, controller: &Controller) {
    if let Command::WebStats(Some(_)) = cmd {
        if let Err(e) = status::write_file(controller) {
            tracing::warn!("{e}");
        }
    }
}

/// `reload`: logged as SIGHUP's reload is, so Quill's own log records every change however asked.
pub(super) fn reload(controller: &Controller) -> Answer {
    match controller.reload() {
        Ok(applied) => {
            tracing::info!("control reload: reloaded: {applied}");
            let note = applied.to_string();
            Ok(Reply::new(
                format!("reloaded: {note}\n"),
                json!({ "ok": true, "note": note }),
            ))
        }
        Err(e) => {
            tracing::warn!(
                "control reload: reload rejected, still running the previous configuration: {e}"
            );
            Err(Failure::Reload(e))
        }
    }
}

/// `tls reload [NAME]`: listener `name`'s TLS files read again (every TLS listener's without).
pub(super) fn tls_reload(controller: &Controller, name: Option<&str>) -> Answer {
    let applied = controller.tls_reload(name).map_err(Failure::TlsReload)?;
    let note = applied.to_string();
    Ok(Reply::new(
        format!("tls reloaded: {note}\n"),
        json!({ "ok": true, "note": note }),
    ))
}
