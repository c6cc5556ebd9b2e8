//! Unit tests of [`Plan::between`] and of the text of notes and errors, without sockets: the
//! running listeners are views of the old configuration, as they are in a running process.

use std::path::Path;

use super::*;
use crate::config::{from_toml, TuningPatch};

const TWO: &str = "[[pool]]\nname = \"api\"\nservers = [\"127.0.0.1:9\", \"127.0.0.1:10\"]\n\
    [[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:8001\"\nservers = [\"127.0.0.1:11\"]\n\
    [[listener]]\nname = \"b\"\nlisten = \"127.0.0.1:8002\"\nservers = [\"127.0.0.1:12\"]\n";

fn config(text: &str) -> Config {
    from_toml("c.toml", text, &TuningPatch::default()).unwrap()
}

/// The listeners of `c` as a running process serving `c` has them.
fn running(c: &Config) -> Vec<Running<'_>> {
    c.listeners
        .iter()
        .map(|l| Running {
            name: &l.name,
            addr: &l.listen,
            udp: l.udp().is_some(),
            options: SocketOptions::of(l),
            file: match &l.listen {
                ListenAddr::Unix(p) => Some(p.as_path()),
                ListenAddr::Tcp(_) => None,
            },
        })
        .collect()
}

fn plan(old: &Config, new: &Config) -> Plan {
    Plan::between(old, new, &running(old)).unwrap()
}

/// Every note of `p` in the order the reply gives them.
fn notes(p: &Plan) -> Vec<String> {
    p.before
        .iter()
        .chain(p.listeners.iter().flat_map(|s| &s.notes))
        .chain(&p.after)
        .map(Note::to_string)
        .collect()
}

fn keep(running: usize) -> Socket {
    Socket::Keep {
        running,
        options: None,
    }
}

#[test]
fn the_same_configuration_is_an_empty_plan() {
    let c = config(TWO);
    let p = plan(&c, &c);
    assert!(notes(&p).is_empty(), "{:?}", notes(&p));
    let sockets: Vec<Socket> = p.listeners.iter().map(|s| s.socket).collect();
    assert_eq!(sockets, [keep(0), keep(1)]);
    assert!(p.removed.is_empty() && p.new_logs.is_empty());
    assert!(p.conn_max.is_none() && p.logs.is_none() && p.debug.is_none());
    assert!(!p.listeners_change());
}

#[test]
fn an_added_listener_is_bound_and_said() {
    let old = config(TWO);
    let new = config(&format!(
        "{TWO}[[listener]]\nname = \"c\"\nlisten = \"127.0.0.1:8003\"\nservers = [\"127.0.0.1:13\"]\n"
    ));
    let p = plan(&old, &new);
    assert_eq!(p.listeners[2].socket, Socket::Bind);
    assert_eq!(notes(&p), ["listener 'c' on 127.0.0.1:8003 added"]);
    assert!(p.listeners_change());
}

#[test]
fn a_removed_listener_is_removed_and_said() {
    let old = config(TWO);
    let mut new = old.clone();
    new.listeners.remove(0);
    let p = plan(&old, &new);
    assert_eq!(p.listeners[0].socket, keep(1));
    assert_eq!(
        p.removed,
        [Removal {
            running: 0,
            unlink: None
        }]
    );
    assert_eq!(notes(&p), ["listener 'a' on 127.0.0.1:8001 removed"]);
    assert!(p.listeners_change());
}

#[test]
fn a_listener_that_moves_is_bound_anew_and_its_old_socket_removed() {
    let old = config(TWO);
    let mut new = old.clone();
    new.listeners[1].listen = ListenAddr::Tcp("127.0.0.1:8009".parse().unwrap());
    let p = plan(&old, &new);
    assert_eq!(p.listeners[0].socket, keep(0));
    assert_eq!(p.listeners[1].socket, Socket::Bind);
    assert_eq!(p.removed.len(), 1);
    assert_eq!(p.removed[0].running, 1);
    assert_eq!(
        notes(&p),
        [
            "listener 'b' on 127.0.0.1:8009 added",
            "listener 'b' on 127.0.0.1:8002 removed"
        ]
    );
}

#[test]
fn a_unix_socket_file_goes_with_its_listener_unless_its_address_is_taken_again() {
    let unix = |name: &str| {
        format!("[[listener]]\nname = \"{name}\"\nlisten = \"/tmp/q.sock\"\nservers = [\"127.0.0.1:11\"]\n")
    };
    let old = config(&unix("u"));
    let gone = config(TWO);
    let p = plan(&old, &gone);
    assert_eq!(
        p.removed[0].unlink.as_deref(),
        Some(Path::new("/tmp/q.sock"))
    );
    // Renamed: a new listener at the same path, so the file stays for it.
    let renamed = config(&unix("v"));
    let p = plan(&old, &renamed);
    assert_eq!(p.listeners[0].socket, Socket::Bind);
    assert_eq!(p.removed[0].unlink, None);
    // A socket file systemd owns is never removed: the running view has none.
    let mut view = running(&old);
    view[0].file = None;
    let p = Plan::between(&old, &gone, &view).unwrap();
    assert_eq!(p.removed[0].unlink, None);
}

#[test]
fn a_listener_that_changes_kind_at_the_same_address_is_bound_anew() {
    let old = config(TWO);
    let mut view = running(&old);
    view[0].udp = true;
    let p = Plan::between(&old, &old, &view).unwrap();
    assert_eq!(p.listeners[0].socket, Socket::Bind);
    assert_eq!(p.removed[0].running, 0);
}

#[test]
fn socket_options_are_set_on_a_kept_socket_only_when_they_change() {
    let old = config(TWO);
    let mut new = old.clone();
    let was = new.listeners[1].tuning.tcp_nodelay;
    new.listeners[1].tuning.tcp_nodelay = !was;
    let p = plan(&old, &new);
    assert_eq!(p.listeners[0].socket, keep(0));
    let Socket::Keep {
        running: 1,
        options: Some(o),
    } = p.listeners[1].socket
    else {
        panic!("{:?}", p.listeners[1].socket);
    };
    assert_eq!(o.nodelay, !was);
    assert_eq!(notes(&p), ["'b': settings changed"]);
    assert!(!p.listeners_change());
}

#[test]
fn restart_only_settings_are_noted_in_their_order() {
    let old = config(TWO);
    let mut new = old.clone();
    new.global.accept_batch += 1;
    new.global.workers += 1;
    new.global.splice = !new.global.splice;
    let p = plan(&old, &new);
    assert_eq!(
        notes(&p),
        [
            "workers changed: takes effect at the next restart",
            "splice changed: takes effect at the next restart",
            "accept_batch changed: takes effect at the next restart"
        ]
    );
    assert!(p
        .listeners
        .iter()
        .all(|s| matches!(s.socket, Socket::Keep { .. })));
}

#[test]
fn server_changes_are_said_per_pool_named_pools_first() {
    let old = config(TWO);
    let new = config(
        "[[pool]]\nname = \"api\"\nservers = [\"127.0.0.1:9\", \"127.0.0.1:14\"]\n\
         [[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:8001\"\nservers = [\"127.0.0.1:11\"]\n\
         [[listener]]\nname = \"b\"\nlisten = \"127.0.0.1:8002\"\nmode = [\"roundrobin\"]\n\
         servers = [\"127.0.0.1:12:20\"]\n",
    );
    let p = plan(&old, &new);
    let mode = new.listeners[1].mode;
    assert_eq!(
        notes(&p),
        [
            "'api': server 127.0.0.1:14 added".to_string(),
            "'api': server 127.0.0.1:10 removed".to_string(),
            "'b': server 127.0.0.1:12 changed".to_string(),
            format!("'b': mode {mode}"),
        ]
    );
}

#[test]
fn named_pools_added_and_removed_are_said() {
    let old = config(TWO);
    let new = config(&TWO.replace("name = \"api\"", "name = \"web\""));
    assert_eq!(
        notes(&plan(&old, &new)),
        ["pool 'web' added", "pool 'api' removed"]
    );
}

#[test]
fn a_site_log_a_reload_adds_is_opened_first_and_moves_the_plan() {
    let web = |site_log: &str| {
        config(&format!(
            "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:8003\"\nprotocol = \"http\"\n\
             [[listener.site]]\nnames = [\"a.test\"]\n{site_log}\n\
             [[listener.site.route]]\nrespond = {{}}\n"
        ))
    };
    let old = web("");
    let new = web("log = \"/tmp/quill-plan-site.log\"");
    let p = plan(&old, &new);
    assert_eq!(p.new_logs, [Path::new("/tmp/quill-plan-site.log")]);
    let logs = p.logs.expect("a new log plan");
    assert_eq!(logs.file_of_site("web", 0), Some(0));
    // Taken away again: the plan moves back, nothing to open.
    let p = plan(&new, &old);
    assert!(p.new_logs.is_empty());
    assert_eq!(p.logs, Some(LogPlan::new(&old)));
}

#[test]
fn conn_max_debug_and_logs_are_planned_after_the_listeners() {
    let old = config(TWO);
    let mut new = old.clone();
    new.listeners.remove(1);
    new.global.max_connections = Some(5);
    new.global.debug = old.global.debug + 1;
    new.global.log = Some("/tmp/quill-plan-test.log".into());
    let p = plan(&old, &new);
    assert_eq!(p.conn_max, Some(5));
    assert_eq!(p.debug, Some(new.global.debug));
    assert_eq!(p.new_logs, [Path::new("/tmp/quill-plan-test.log")]);
    assert_eq!(p.logs, Some(LogPlan::new(&new)));
    assert_eq!(
        notes(&p),
        [
            "listener 'b' on 127.0.0.1:8002 removed".to_string(),
            "conn_max 5".to_string(),
            format!("debug level {}", new.global.debug),
        ]
    );
    // An access log already open is not opened again first.
    let p = plan(&new, &new);
    assert!(p.new_logs.is_empty() && p.logs.is_none());
}

#[test]
fn conn_max_back_to_its_default_changes_nothing_at_run_time() {
    let mut old = config(TWO);
    old.global.max_connections = Some(5);
    let mut new = old.clone();
    new.global.max_connections = None;
    let p = plan(&old, &new);
    assert_eq!(p.conn_max, None);
    assert!(notes(&p).is_empty());
}

#[test]
fn direct_server_return_is_refused_in_a_running_process() {
    let old = config(TWO);
    let mut new = old.clone();
    new.listeners[1].set_dsr_if(Some("eth0".into())).unwrap();
    let e = Plan::between(&old, &new, &running(&old)).unwrap_err();
    assert!(matches!(e, ApplyError::DsrAtRuntime { .. }));
    assert_eq!(
        e.to_string(),
        "listener 'b': dsr_if: direct server return starts with the process, not in a running proxy (restart Quill)"
    );
}

#[test]
fn applied_joins_its_notes_and_is_never_empty() {
    assert_eq!(Applied::new(Vec::new(), false).to_string(), "no change");
    assert_eq!(Applied::new(Vec::new(), true).to_string(), "applied");
    let notes = vec![Note::ConnMax(3), Note::Debug(1)];
    assert_eq!(
        Applied::new(notes, false).to_string(),
        "conn_max 3; debug level 1"
    );
    let reread = Note::Reread(vec!["a".into(), "b".into()]);
    let applied = Applied::new(vec![reread, Note::Applied], true);
    assert_eq!(
        applied.to_string(),
        "files re-read for listener 'a', 'b'; applied"
    );
    assert_eq!(
        Applied::new(vec![Note::NothingToReload], true).to_string(),
        "nothing to reload from; logs reopened"
    );
}

#[test]
fn errors_keep_their_text_and_their_source() {
    use std::error::Error as _;
    let e = ApplyError::Bind {
        addr: ListenAddr::Tcp("127.0.0.1:1".parse().unwrap()),
        source: io::Error::from(io::ErrorKind::AddrInUse),
    };
    assert!(
        e.to_string().starts_with("cannot listen on 127.0.0.1:1: "),
        "{e}"
    );
    assert!(e.source().is_some());
    let e = ApplyError::AccessLog {
        path: "/nowhere/a.log".into(),
        source: io::Error::from(io::ErrorKind::NotFound),
    };
    assert!(
        e.to_string()
            .starts_with("cannot open access log /nowhere/a.log: "),
        "{e}"
    );
    let note = Note::SocketOptions {
        listener: "a".into(),
        error: io::Error::from(io::ErrorKind::InvalidInput),
    };
    assert!(note
        .to_string()
        .starts_with("listener 'a': socket options: "));
    assert_eq!(
        ApplyError::Stopping.to_string(),
        "stopping: the configuration no longer changes"
    );
    assert_eq!(
        ApplyError::NotTls("w".into()).to_string(),
        "listener 'w' does not terminate TLS"
    );
}
