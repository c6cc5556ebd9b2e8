//! What each control command does, one file per family: [`show`] (a setting's value),
//! [`servers`] (servers, listeners, pools, the status report), [`sessions`] (clients seen, open
//! connections, closing one), [`changes`] (settings, `reload`, `tls reload`), [`files`] (`write`,
//! `include`, `reopen`) and [`process`] (`pid`, `exit`, `takeover`). [`execute`] picks the family;
//! each command answers a [`Reply`] (its text and its JSON) or a [`Failure`], and the caller
//! renders the answer as the request asked ([`render`]). Nothing here touches the control socket.

mod changes;
mod files;
mod process;
mod servers;
mod sessions;
mod show;

use std::io;
use std::path::PathBuf;

use serde_json::{json, Value};

use crate::command::{Action, CommandError, Request as Line};
use crate::config::ControlLevel;
use crate::state::controller::Controller;
use crate::state::plan::ApplyError;

/// A command's answer: the text for people and penctl (empty when there is nothing to say) and
/// the same for scripts as JSON.
#[derive(Debug)]
pub(crate) struct Reply {
    pub text: String,
    pub json: Value,
}

impl Reply {
    fn new(text: String, json: Value) -> Reply {
        Reply { text, json }
    }

    /// Done, with nothing to say but `json`.
    fn done(json: Value) -> Reply {
        Reply::new(String::new(), json)
    }
}

/// What a command line gets: a reply, or why not.
pub(crate) type Answer = Result<Reply, Failure>;

/// Why a command was not done; one line, shown as `error: ...` (or `{"error": ...}`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    /// The line does not parse.
    #[error(transparent)]
    Parse(#[from] CommandError),
    #[error("'{line}' needs the Unix control socket (it names a file or local socket, moves a listener, hands sockets over or exits)")]
    NeedsUnixSocket { line: String },
    #[error("'{line}' needs control level {} (this connection has {})", needed.name(), has.name())]
    NeedsLevel {
        line: String,
        needed: ControlLevel,
        has: ControlLevel,
    },
    /// A change (a setting, `include`) was refused.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error("reload rejected: {0}")]
    Reload(#[source] ApplyError),
    #[error("tls reload: {0}")]
    TlsReload(#[source] ApplyError),
    #[error("no listener named '{0}'")]
    NoListener(String),
    /// Several listeners and none named: their names, so the operator need not open the
    /// configuration to find them.
    #[error("there are {} listeners ({}): say which with 'listener NAME' first", .0.len(), .0.join(", "))]
    WhichListener(Vec<String>),
    #[error("no pool named '{0}'")]
    NoPool(String),
    #[error("no connection {0}")]
    NoConnection(u64),
    #[error("exit is not allowed (start Quill with -X)")]
    ExitNotAllowed,
    #[error("write needs a FILE (no -F file to default to)")]
    WriteNeedsFile,
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
    #[error("takeover is a conversation between Quill processes")]
    Takeover,
    #[error("'pool {0}' takes server commands, pool settings (set or shown) and 'servers' only")]
    PoolCommand(String),
}

impl Failure {
    /// No listener `name`, or (without a name) not one listener but `names`.
    fn listener(name: Option<&str>, names: Vec<String>) -> Failure {
        match name {
            Some(n) => Failure::NoListener(n.to_string()),
            None => Failure::WhichListener(names),
        }
    }
}

/// The bytes sent for `answer`: its text, or with `json` its JSON on one line.
pub(crate) fn render(answer: &Answer, json: bool) -> String {
    match (answer, json) {
        (Ok(reply), false) => reply.text.clone(),
        (Ok(reply), true) => format!("{}\n", reply.json),
        (Err(e), false) => format!("error: {e}\n"),
        (Err(e), true) => format!("{}\n", json!({ "error": e.to_string() })),
    }
}

/// Does what `req` asks (its channel already checked) and answers.
pub(crate) fn execute(req: &Line, controller: &Controller) -> Answer {
    let listener = req.listener.as_deref();
    if let Some(name) = req.pool.as_deref() {
        return execute_pool(req, name, controller);
    }
    let shared = controller.shared();
    match &req.action {
        Action::Set(cmd) => changes::set(controller, listener, cmd),
        Action::Show(setting) => show::show(*setting, show::Target::Listener(listener), controller),
        Action::Servers => servers::servers(shared, listener),
        Action::Hash => servers::hash(shared, listener),
        Action::Status => servers::status(controller),
        Action::Recent(secs) => sessions::recent(shared, *secs),
        Action::Listeners => servers::listeners(shared),
        Action::Pools => servers::pools(shared),
        Action::Connections => sessions::connections(shared, listener, None),
        Action::Connection(n) => sessions::connections(shared, listener, Some(*n)),
        Action::Close(n) => sessions::close(shared, *n),
        Action::Pid => process::pid(),
        Action::Exit => process::exit(controller),
        Action::Write(path) => files::write(controller, path.as_deref()),
        Action::Include(path) => files::include(controller, path),
        Action::Reload => changes::reload(controller),
        Action::Reopen => files::reopen(controller),
        Action::Takeover | Action::TakeoverDone => Err(Failure::Takeover),
        Action::TlsReload(name) => changes::tls_reload(controller, name.as_deref().or(listener)),
    }
}

/// A line that starts `pool NAME`: a named pool's settings and servers, as `listener NAME`
/// reaches a listener's pool.
fn execute_pool(req: &Line, name: &str, controller: &Controller) -> Answer {
    match &req.action {
        Action::Set(cmd) => changes::set_pool(controller, name, cmd),
        Action::Show(setting) => show::show(*setting, show::Target::Pool(name), controller),
        Action::Servers => servers::pool_servers(controller, name),
        Action::Hash => servers::pool_hash(controller, name),
        _ => Err(Failure::PoolCommand(name.to_string())),
    }
}

#[cfg(test)]
mod tests;
