//! Commands about clients and their sessions, asked of every worker: `recent` (clients seen
//! lately), `connections` / `connection N` (open sessions) and `close N`.

use std::net::IpAddr;
use std::sync::Arc;

use serde_json::{json, Value};

use super::{Answer, Failure, Reply};
use crate::state::shared::{Report, Request, Shared};

/// `recent [SECS]`: clients that connected in the last `secs` seconds, latest first.
pub(super) fn recent(shared: &Arc<Shared>, secs: u64) -> Answer {
    let now = crate::clock::unix_time();
    let mut seen: Vec<(IpAddr, u64, u64)> = Vec::new();
    for report in shared.ask_all(Request::Report) {
        for (ip, t) in report.recent {
            if now.saturating_sub(t) > secs {
                continue;
            }
            match seen.iter_mut().find(|(i, _, _)| *i == ip) {
                Some(e) => {
                    e.1 += 1;
                    e.2 = e.2.max(t);
                }
                None => seen.push((ip, 1, t)),
            }
        }
    }
    seen.sort_by_key(|e| std::cmp::Reverse(e.2));
    let text: String = seen
        .iter()
        .map(|(ip, n, t)| format!("{ip} connects {n} last {}s ago\n", now.saturating_sub(*t)))
        .collect();
    let value: Vec<Value> = seen
        .iter()
        .map(|(ip, n, t)| json!({ "client": ip.to_string(), "connects": n, "last": t }))
        .collect();
    Ok(Reply::new(text, Value::Array(value)))
}

/// `connections` (of `listener` when named), or with `only` the one connection of that id.
pub(super) fn connections(
    shared: &Arc<Shared>,
    listener: Option<&str>,
    only: Option<u64>,
) -> Answer {
    if let Some(n) = listener {
        if !shared.listeners.load().iter().any(|l| l.name == n) {
            return Err(Failure::NoListener(n.to_string()));
        }
    }
    let mut sessions: Vec<_> = shared
        .ask_all(Request::Report)
        .into_iter()
        .flat_map(|r: Report| r.sessions)
        .filter(|s| listener.is_none_or(|n| s.listener == n))
        .collect();
    sessions.sort_by_key(|s| s.id);
    if let Some(n) = only {
        sessions.retain(|s| s.id == n);
        if sessions.is_empty() {
            return Err(Failure::NoConnection(n));
        }
    }
    let text: String = sessions
        .iter()
        .map(|s| {
            format!(
                "{} listener {} client {} server {} age {}s in {} out {} {}\n",
                s.id,
                s.listener,
                s.client,
                s.server.as_deref().unwrap_or("-"),
                s.age_ms / 1000,
                s.bytes_in,
                s.bytes_out,
                s.state
            )
        })
        .collect();
    let value: Vec<Value> = sessions
        .iter()
        .map(|s| {
            json!({ "id": s.id, "listener": s.listener, "client": s.client,
                "server": s.server, "age_ms": s.age_ms, "bytes_in": s.bytes_in,
                "bytes_out": s.bytes_out, "state": s.state })
        })
        .collect();
    Ok(Reply::new(text, Value::Array(value)))
}

/// `close N`: the worker holding connection N closes it.
pub(super) fn close(shared: &Arc<Shared>, n: u64) -> Answer {
    if shared.ask_all(|tx| Request::Close(n, tx)).contains(&true) {
        Ok(Reply::done(json!({ "ok": true })))
    } else {
        Err(Failure::NoConnection(n))
    }
}
