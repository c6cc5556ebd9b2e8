//! What a reload keeps of the operator's runtime changes
//! (docs/design.md#reload-keeps-runtime-changes), as HAProxy keeps server state across reloads with
//! `server-state-file`. Three configurations meet: what the sources (TOML file, command line, `-F`
//! file) said at the last load, what runs now (those sources plus every change made over the
//! control socket since), and what the sources say now. Each setting (a server's weight, its drain,
//! a listener's `roundrobin`, a timeout, ...) takes the new sources' value if the sources changed
//! it since the last load, else keeps the running value.
//!
//! Servers are matched by address (the n-th server of an address with the n-th one). A server
//! added at run time stays, unless the new sources name its address too (it is then theirs); a
//! server removed at run time stays removed, unless the sources newly name it. Listeners are
//! matched by name and follow the sources: they cannot be added or removed at run time. Named
//! pools (`[[pool]]`) merge as listeners do, matched by name; routes follow the sources.
//!
//! Pure: no sockets, no state; the controller applies the result as any other change.

use std::collections::HashMap;

use crate::acl::Acls;
use crate::addr::{BackendAddr, ServerSpec};
use crate::balancer::Mode;
use crate::config::{
    Config, DsrSettings, Global, ListenerConfig, ListenerKind, StreamKind, Tuning,
};

/// `theirs` if the sources changed the value since the last load, else the running one.
fn pick<T: PartialEq + Clone>(base: &T, ours: &T, theirs: &T) -> T {
    if base == theirs {
        ours.clone()
    } else {
        theirs.clone()
    }
}

/// Merges every field listed before `;` with [`pick`]. Every field of the struct must be named,
/// the ones merged some other way after `;`, so that a new field is a compile error here
/// rather than a setting a reload silently resets or never applies.
macro_rules! merge_fields {
    ($ty:ident, $base:expr, $ours:expr, $theirs:expr, $out:expr; $($f:ident),* ; $($other:ident),*) => {{
        let $ty { $($f: _,)* $($other: _,)* } = $theirs;
        $( $out.$f = pick(&$base.$f, &$ours.$f, &$theirs.$f); )*
    }};
}

/// The configuration a reload applies: `theirs` (the sources now) with the runtime changes in
/// `ours` that the sources did not override since `base` (the sources at the last load).
pub(super) fn merge(base: &Config, ours: &Config, theirs: &Config) -> Config {
    let mut out = theirs.clone();
    out.global = merge_global(&base.global, &ours.global, &theirs.global);
    for l in &mut out.listeners {
        let (Some(b), Some(o)) = (
            base.listeners.iter().find(|x| x.name == l.name),
            ours.listeners.iter().find(|x| x.name == l.name),
        ) else {
            // New in the sources: nothing was changed at run time.
            continue;
        };
        *l = merge_listener(b, o, l);
    }
    // Named pools as listeners: matched by name, runtime changes (a drained server) kept.
    for p in &mut out.pools {
        let (Some(b), Some(o)) = (
            base.pools.iter().find(|x| x.name == p.name),
            ours.pools.iter().find(|x| x.name == p.name),
        ) else {
            continue;
        };
        *p = merge_listener(b, o, p);
    }
    out
}

fn merge_global(base: &Global, ours: &Global, theirs: &Global) -> Global {
    // Every field picked as one, then each of Pen's ten lists on its own: `acl 3 ...` at run
    // time survives an edit of list 4.
    let mut out = Global::merge(base, ours, theirs);
    out.acls = theirs.acls.clone();
    for id in Acls::ids() {
        out.acls[id] = pick(&base.acls[id], &ours.acls[id], &theirs.acls[id]);
    }
    out
}

fn merge_listener(
    base: &ListenerConfig,
    ours: &ListenerConfig,
    theirs: &ListenerConfig,
) -> ListenerConfig {
    let mut out = theirs.clone();
    merge_fields!(ListenerConfig, base, ours, theirs, out;
        name, listen, emergency, health, slow_start, client_acl, abuse, routes, sites,
        unknown_host, sticky_cookie, hash_key,
        server_tls, fastcgi, log, log_format;
        mode, tuning, servers, initial_blacklist, kind, discovery);
    out.kind = merge_kind(&base.kind, &ours.kind, &theirs.kind);
    out.mode = merge_mode(base, ours, theirs);
    out.tuning = Tuning::merge(&base.tuning, &ours.tuning, &theirs.tuning);
    out.servers = match (&ours.discovery, &theirs.discovery) {
        // A pool found in DNS keeps the set it has until DNS answers (a new name, or a list
        // turned into a name, is replaced at the first answer: DNS never empties a pool).
        (_, Some(_)) => ours.servers.clone(),
        // From DNS to a list: the list.
        (Some(_), None) => theirs.servers.clone(),
        (None, None) => merge_servers(&base.servers, &ours.servers, &theirs.servers),
    };
    // `server N blacklist T` in the sources applies again on every reload, to the same server
    // wherever it now stands.
    let keys = keyed(&out.servers);
    let theirs_keys = keyed(&theirs.servers);
    out.initial_blacklist = theirs
        .initial_blacklist
        .iter()
        .filter_map(|(i, d)| {
            let key = theirs_keys.iter().find(|(_, at)| at == i)?.0.clone();
            let at = keys.iter().find(|(k, _)| *k == key)?.1;
            Some((at, *d))
        })
        .collect();
    out
}

/// A listener's kind: part by part while the three agree on what kind it is (TLS, PROXY
/// acceptance and HTTP-or-TCP of a stream listener; each DSR setting), else the sources' kind
/// if they changed it, else the running one.
fn merge_kind(base: &ListenerKind, ours: &ListenerKind, theirs: &ListenerKind) -> ListenerKind {
    use ListenerKind::{Dsr, Stream};
    match (base, ours, theirs) {
        (Stream(b), Stream(o), Stream(t)) => {
            let mut out = t.clone();
            merge_fields!(StreamKind, b, o, t, out; tls, accept_proxy, proto;);
            Stream(out)
        }
        (Dsr(b), Dsr(o), Dsr(t)) => {
            let mut out = t.clone();
            merge_fields!(DsrSettings, b, o, t, out; interface, ip, wait, tarpit_acl;);
            Dsr(out)
        }
        _ => pick(base, ours, theirs),
    }
}

fn merge_mode(base: &ListenerConfig, ours: &ListenerConfig, theirs: &ListenerConfig) -> Mode {
    let (b, o, t) = (&base.mode, &ours.mode, &theirs.mode);
    let mut out = *t;
    merge_fields!(Mode, b, o, t, out; roundrobin, hash, weight, prio, stubborn, maglev, base;);
    out
}

/// A server's identity across the three lists: its address and which occurrence of that
/// address it is (a pool may name one address twice).
type Key = (BackendAddr, usize);

/// Every server's key, with its index.
fn keyed(servers: &[ServerSpec]) -> Vec<(Key, usize)> {
    let mut seen: HashMap<&BackendAddr, usize> = HashMap::new();
    servers
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let n = seen.entry(&s.addr).or_insert(0);
            *n += 1;
            ((s.addr.clone(), *n - 1), i)
        })
        .collect()
}

/// The running servers in their running order (so `server N` keeps meaning the same server),
/// less those the sources removed, each merged field by field; then the servers the sources
/// newly name, in their order.
fn merge_servers(
    base: &[ServerSpec],
    ours: &[ServerSpec],
    theirs: &[ServerSpec],
) -> Vec<ServerSpec> {
    let index = |list: &[ServerSpec]| -> HashMap<Key, usize> { keyed(list).into_iter().collect() };
    let (in_base, in_ours, in_theirs) = (index(base), index(ours), index(theirs));
    let mut out = Vec::with_capacity(ours.len().max(theirs.len()));
    for (key, i) in keyed(ours) {
        let o = &ours[i];
        match (in_base.get(&key), in_theirs.get(&key)) {
            // In the sources before and now: field by field.
            (Some(&b), Some(&t)) => out.push(merge_server(&base[b], o, &theirs[t])),
            // The sources removed it.
            (Some(_), None) => {}
            // Added at run time, and the sources now name it too: theirs.
            (None, Some(&t)) => out.push(theirs[t].clone()),
            // Added at run time: stays.
            (None, None) => out.push(o.clone()),
        }
    }
    for (key, t) in keyed(theirs) {
        // Newly named by the sources and not running yet. One the sources named before and the
        // operator removed stays removed.
        if !in_ours.contains_key(&key) && !in_base.contains_key(&key) {
            out.push(theirs[t].clone());
        }
    }
    out
}

fn merge_server(base: &ServerSpec, ours: &ServerSpec, theirs: &ServerSpec) -> ServerSpec {
    let mut out = theirs.clone();
    merge_fields!(ServerSpec, base, ours, theirs, out; max, hard, weight, prio, acl, state; addr, identity);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::{parse_listen, parse_server, AdminState};
    use crate::balancer::Base;

    fn server(spec: &str) -> ServerSpec {
        parse_server(spec, None).unwrap()
    }

    fn config(servers: &[&str]) -> Config {
        let mut l = ListenerConfig::new("web", parse_listen("127.0.0.1:8080").unwrap());
        l.servers = servers.iter().map(|s| server(s)).collect();
        Config {
            global: Global::default(),
            listeners: vec![l],
            pools: Vec::new(),
        }
    }

    fn addrs(c: &Config) -> Vec<String> {
        c.listeners[0]
            .servers
            .iter()
            .map(|s| s.addr.to_string())
            .collect()
    }

    const A: &str = "127.0.0.1:9001";
    const B: &str = "127.0.0.1:9002";
    const C: &str = "127.0.0.1:9003";

    #[test]
    fn a_reload_of_unchanged_sources_keeps_every_runtime_change() {
        let base = config(&[A, B]);
        let mut ours = base.clone();
        ours.listeners[0].servers[1].state = AdminState::Drain;
        ours.listeners[0].servers[0].weight = 4;
        ours.listeners[0].servers.push(server(C));
        ours.listeners[0].mode.roundrobin = true;
        ours.listeners[0].tuning.idle_timeout = std::time::Duration::from_secs(9);
        ours.global.log = Some("/tmp/x.log".into());
        assert_eq!(merge(&base, &ours, &base.clone()), ours);
    }

    #[test]
    fn what_the_sources_changed_wins_and_the_rest_is_kept() {
        let base = config(&[A, B]);
        let mut ours = base.clone();
        ours.listeners[0].servers[0].weight = 4;
        ours.listeners[0].servers[0].state = AdminState::Disabled;
        ours.listeners[0].mode.hash = true;
        let mut theirs = base.clone();
        theirs.listeners[0].servers[0].weight = 7;
        theirs.listeners[0].mode.base = Base::LeastConn;
        let got = merge(&base, &ours, &theirs);
        let s = &got.listeners[0].servers[0];
        assert_eq!((s.weight, s.state), (7, AdminState::Disabled));
        let m = got.listeners[0].mode;
        assert!(m.hash, "runtime hash kept");
        assert_eq!(m.base, Base::LeastConn, "the file's leastconn applied");
    }

    #[test]
    fn servers_added_and_removed_at_run_time_stay_so() {
        let base = config(&[A, B]);
        let mut ours = base.clone();
        ours.listeners[0].servers.remove(0);
        ours.listeners[0].servers.push(server(C));
        assert_eq!(addrs(&merge(&base, &ours, &base.clone())), [B, C]);
        // The sources add C themselves (with their weight) and drop B.
        let theirs = config(&[A, &format!("{C}:0:0:9")]);
        let got = merge(&base, &ours, &theirs);
        assert_eq!(addrs(&got), [C]);
        assert_eq!(got.listeners[0].servers[0].weight, 9);
    }

    #[test]
    fn a_server_the_sources_newly_name_is_added_even_if_removed_before() {
        let base = config(&[A]);
        let mut ours = base.clone();
        ours.listeners[0].servers.push(server(B));
        ours.listeners[0].servers.remove(1);
        let theirs = config(&[A, B, C]);
        assert_eq!(addrs(&merge(&base, &ours, &theirs)), [A, B, C]);
    }

    #[test]
    fn a_duplicated_address_is_matched_occurrence_by_occurrence() {
        let base = config(&[A, A]);
        let mut ours = base.clone();
        ours.listeners[0].servers[1].state = AdminState::Drain;
        let got = merge(&base, &ours, &config(&[A, A, B]));
        assert_eq!(addrs(&got), [A, A, B]);
        let states: Vec<_> = got.listeners[0].servers.iter().map(|s| s.state).collect();
        assert_eq!(
            states,
            [AdminState::Enabled, AdminState::Drain, AdminState::Enabled]
        );
    }

    #[test]
    fn a_sources_blacklist_follows_its_server() {
        let base = config(&[A, B]);
        let mut ours = base.clone();
        ours.listeners[0].servers.remove(0);
        let mut theirs = base.clone();
        let d = std::time::Duration::from_secs(5);
        theirs.listeners[0].initial_blacklist = vec![(1, d)];
        let got = merge(&base, &ours, &theirs);
        assert_eq!(addrs(&got), [B]);
        assert_eq!(got.listeners[0].initial_blacklist, [(0, d)]);
    }

    #[test]
    fn a_reload_keeps_an_http_listener_http_and_applies_its_new_settings() {
        let mut base = config(&[A]);
        base.listeners[0].kind = ListenerKind::http(crate::config::HttpSettings::default());
        let mut ours = base.clone();
        ours.listeners[0].servers[0].weight = 3;
        // Unchanged sources: still HTTP, runtime change kept.
        let got = merge(&base, &ours, &base.clone());
        assert_eq!(got.listeners[0].http(), base.listeners[0].http());
        assert_eq!(got.listeners[0].servers[0].weight, 3);
        // The file changed a setting: the new settings, still HTTP.
        let mut theirs = base.clone();
        let h = crate::config::HttpSettings {
            response_timeout: std::time::Duration::from_secs(5),
            ..Default::default()
        };
        theirs.listeners[0].kind = ListenerKind::http(h.clone());
        assert_eq!(merge(&base, &ours, &theirs).listeners[0].http(), Some(&h));
        // The file turned HTTP off: TCP again.
        let mut tcp = base.clone();
        tcp.listeners[0].kind = ListenerKind::default();
        assert_eq!(merge(&base, &ours, &tcp).listeners[0].http(), None);
    }

    #[test]
    fn a_reload_keeps_a_named_pools_runtime_changes_and_takes_its_new_servers() {
        let mut base = config(&[A]);
        let mut p = ListenerConfig::new("api", crate::config::model::pool_addr());
        p.servers = vec![server(B)];
        base.pools.push(p);
        let mut ours = base.clone();
        ours.pools[0].servers[0].state = AdminState::Drain;
        let got = merge(&base, &ours, &base.clone());
        assert_eq!(got.pools[0].servers[0].state, AdminState::Drain);
        let mut theirs = base.clone();
        theirs.pools[0].servers.push(server(C));
        let got = merge(&base, &ours, &theirs);
        let states: Vec<_> = got.pools[0].servers.iter().map(|s| s.state).collect();
        assert_eq!(states, [AdminState::Drain, AdminState::Enabled]);
    }

    #[test]
    fn a_listener_new_in_the_sources_is_taken_whole() {
        let base = config(&[A]);
        let mut theirs = base.clone();
        let mut l = ListenerConfig::new("db", parse_listen("127.0.0.1:8081").unwrap());
        l.servers.push(server(B));
        theirs.listeners.push(l);
        assert_eq!(merge(&base, &base.clone(), &theirs), theirs);
    }
}
