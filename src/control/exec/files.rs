//! Commands about files: `write` (the running configuration as commands), `include` (a file of
//! commands applied as one change) and `reopen` (the access logs, after rotation).

use std::path::Path;

use serde_json::json;

use super::{Answer, Failure, Reply};
use crate::state::controller::Controller;

/// `write [FILE]`: the running configuration as commands, to FILE or the `-F` file.
pub(super) fn write(controller: &Controller, path: Option<&Path>) -> Answer {
    let config = controller.config();
    let Some(path) = path
        .map(Path::to_path_buf)
        .or(config.global.command_file.clone())
    else {
        return Err(Failure::WriteNeedsFile);
    };
    match std::fs::write(&path, config.to_commands()) {
        Ok(()) => Ok(Reply::done(json!({ "ok": true, "file": path }))),
        Err(source) => Err(Failure::Write { path, source }),
    }
}

/// `include FILE`: its commands applied as one change.
pub(super) fn include(controller: &Controller, path: &Path) -> Answer {
    let applied = controller.include(path)?;
    Ok(Reply::done(
        json!({ "ok": true, "note": applied.to_string() }),
    ))
}

/// `reopen`: every access log opened again at its path.
pub(super) fn reopen(controller: &Controller) -> Answer {
    controller.reopen();
    let logs = controller.access_logs();
    let text = if logs.is_empty() {
        "no access log to reopen\n".into()
    } else {
        let names: Vec<String> = logs.iter().map(|p| p.display().to_string()).collect();
        format!("reopened: {}\n", names.join(", "))
    };
    // `log` (the first file) as before; `logs` every file, per-listener ones included.
    Ok(Reply::new(
        text,
        json!({ "ok": true, "log": logs.first(), "logs": logs }),
    ))
}
