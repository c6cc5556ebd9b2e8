//! Commands about the process itself: `pid` and `exit` (the takeover conversation is the control
//! server's, with `takeover`).

use serde_json::json;

use super::{Answer, Failure, Reply};
use crate::state::controller::Controller;

/// `pid`.
pub(super) fn pid() -> Answer {
    let pid = std::process::id();
    Ok(Reply::new(format!("{pid}\n"), json!({ "pid": pid })))
}

/// `exit`, when Quill was started with `-X`: the caller tells the main thread once this reply
/// is written.
pub(super) fn exit(controller: &Controller) -> Answer {
    if !controller.config().global.allow_exit {
        return Err(Failure::ExitNotAllowed);
    }
    Ok(Reply::done(json!({ "ok": true })))
}
