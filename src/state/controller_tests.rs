//! Unit tests of the controller: named pools shared by routes across changes.

use super::*;
use crate::config::{from_toml, TuningPatch};
use crate::route::Action;

fn config(port: u16, extra_route: &str) -> Config {
    from_toml(
        "c.toml",
        &format!(
            "[[pool]]\nname = \"api\"\nservers = [\"127.0.0.1:9\", \"127.0.0.1:10\"]\n\
             [[pool]]\nname = \"web\"\nservers = [\"127.0.0.1:11\"]\n\
             [[listener]]\nname = \"h\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
             [[listener.route]]\npath = \"/api/\"\npool = \"api\"\n{extra_route}"
        ),
        &TuningPatch::default(),
    )
    .unwrap()
}

/// The named pool a listener's route `i` sends to.
fn routed(c: &Controller, i: usize) -> Arc<Pool> {
    let listeners = c.shared().listeners.load();
    let pool = listeners[0].load_pool();
    match &pool.routes.as_ref().expect("routes").routes[i].action {
        Action::Pool(p) => p.clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn named_pools_are_shared_by_routes_and_keep_their_servers_across_changes() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let c = Controller::start(config(port, ""), Clock::default(), 100, &mut Vec::new()).unwrap();
    let api = c.shared().pool("api").expect("named pool api");
    assert!(
        Arc::ptr_eq(&routed(&c, 0), &api),
        "the route holds the named pool"
    );
    let server = api.servers[1].clone();
    // A drain through `pool api`: a new snapshot, the same server, now draining.
    let cmd = crate::command::parse("server 1 drain").unwrap();
    c.set_to(None, Some("api"), &cmd).unwrap();
    let api2 = c.shared().pool("api").unwrap();
    assert!(!Arc::ptr_eq(&api, &api2));
    assert!(
        Arc::ptr_eq(&api2.servers[1], &server),
        "same address, same server"
    );
    assert_eq!(server.admin(), crate::addr::AdminState::Drain);
    assert!(
        Arc::ptr_eq(&routed(&c, 0), &api2),
        "routes follow the new snapshot"
    );
    assert!(c.set_to(None, Some("nope"), &cmd).is_err());
    // A new route to the other pool, as a reload would bring.
    let mut st = c.lock();
    let next = config(port, "[[listener.route]]\npool = \"web\"\n");
    let note = c.apply(&mut st, next).unwrap().to_string();
    drop(st);
    // The drain was the running state's only; applied directly, the new config undoes it.
    assert!(
        note.contains("'api': server 127.0.0.1:10 changed"),
        "{note}"
    );
    assert!(Arc::ptr_eq(
        &routed(&c, 1),
        &c.shared().pool("web").unwrap()
    ));
    assert!(Arc::ptr_eq(
        &c.shared().pool("api").unwrap().servers[1],
        &server
    ));
}
