//! Commands that report what runs: a listener's or a named pool's `servers`, `listeners`,
//! `pools` and Pen's `status` report (also written to the `-w` file).

use std::sync::Arc;

use serde_json::{json, Value};

use super::{Answer, Failure, Reply};
use crate::state::controller::Controller;
use crate::state::shared::Shared;
use crate::status;

/// `servers`: listener `name`'s servers (the only listener's without a name), one Pen line each.
pub(super) fn servers(shared: &Arc<Shared>, name: Option<&str>) -> Answer {
    let snap = status::snapshot(shared);
    let Some(l) = pick_listener(&snap, name) else {
        let names = snap.listeners.iter().map(|l| l.name.clone()).collect();
        return Err(Failure::listener(name, names));
    };
    let mut text = String::new();
    for s in &l.servers {
        text += &status::pen_server_line(s);
    }
    let value = serde_json::to_value(&l.servers).unwrap_or(Value::Null);
    Ok(Reply::new(text, value))
}

fn pick_listener<'a>(
    snap: &'a status::Snapshot,
    name: Option<&str>,
) -> Option<&'a status::ListenerStatus> {
    match name {
        Some(n) => snap.listeners.iter().find(|l| l.name == n),
        None if snap.listeners.len() == 1 => snap.listeners.first(),
        None => None,
    }
}

/// `hash table`: listener `name`'s Maglev tables (the only listener's without a name).
pub(super) fn hash(shared: &Arc<Shared>, name: Option<&str>) -> Answer {
    let snap = status::snapshot(shared);
    let Some(l) = pick_listener(&snap, name) else {
        let names = snap.listeners.iter().map(|l| l.name.clone()).collect();
        return Err(Failure::listener(name, names));
    };
    Ok(hash_reply(&l.maglev))
}

/// `pool NAME hash table`.
pub(super) fn pool_hash(controller: &Controller, name: &str) -> Answer {
    let Some(pool) = controller.shared().pool(name) else {
        return Err(Failure::NoPool(name.to_string()));
    };
    Ok(hash_reply(&status::MaglevStatus::of(&pool)))
}

/// One line per table, `prio P size M fingerprint HEX`, best level first; a line saying so when
/// the mode has no `maglev`.
fn hash_reply(tables: &[status::MaglevStatus]) -> Reply {
    let text = if tables.is_empty() {
        "no Maglev table (the mode has no maglev)\n".to_string()
    } else {
        tables
            .iter()
            .map(|t| {
                format!(
                    "prio {} size {} fingerprint {}\n",
                    t.prio, t.size, t.fingerprint
                )
            })
            .collect()
    };
    Reply::new(text, serde_json::to_value(tables).unwrap_or(Value::Null))
}

/// `pool NAME servers`.
pub(super) fn pool_servers(controller: &Controller, name: &str) -> Answer {
    let Some(pool) = controller.shared().pool(name) else {
        return Err(Failure::NoPool(name.to_string()));
    };
    let now = controller.shared().clock.now_ms();
    let servers: Vec<_> = pool
        .servers
        .iter()
        .enumerate()
        .map(|(i, s)| status::server_status(i, s, now))
        .collect();
    let text: String = servers.iter().map(status::pen_server_line).collect();
    let value = serde_json::to_value(&servers).unwrap_or(Value::Null);
    Ok(Reply::new(text, value))
}

/// `status`: Pen's HTML report, written to the `-w` file too.
pub(super) fn status(controller: &Controller) -> Answer {
    let snap = status::snapshot(controller.shared());
    if let Err(e) = status::write_file(controller) {
        tracing::warn!("{e}");
    }
    let value = serde_json::to_value(&snap).unwrap_or(Value::Null);
    Ok(Reply::new(status::pen_html(&snap), value))
}

/// `listeners`: one line each.
pub(super) fn listeners(shared: &Arc<Shared>) -> Answer {
    let snap = status::snapshot(shared);
    let text: String = snap
        .listeners
        .iter()
        .map(|l| {
            format!(
                "{} listen {} protocol {} mode {} servers {}\n",
                l.name,
                l.listen,
                l.protocol,
                l.mode,
                l.servers.len()
            )
        })
        .collect();
    let value: Vec<Value> = snap
        .listeners
        .iter()
        .map(|l| {
            json!({ "name": l.name, "listen": l.listen, "protocol": l.protocol,
                "mode": l.mode, "servers": l.servers.len() })
        })
        .collect();
    Ok(Reply::new(text, Value::Array(value)))
}

/// `pools`: the named pools, one line each.
pub(super) fn pools(shared: &Arc<Shared>) -> Answer {
    let snap = status::snapshot(shared);
    let text: String = snap
        .pools
        .iter()
        .map(|p| format!("{} mode {} servers {}\n", p.name, p.mode, p.servers.len()))
        .collect();
    let value: Vec<Value> = snap
        .pools
        .iter()
        .map(|p| json!({ "name": p.name, "mode": p.mode, "servers": p.servers.len() }))
        .collect();
    Ok(Reply::new(text, Value::Array(value)))
}
