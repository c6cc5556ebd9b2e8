//! Unit tests of how an answer is rendered and of the failures' text, without a socket.

use super::*;

#[test]
fn a_reply_is_rendered_as_its_text_or_its_json() {
    let ok: Answer = Ok(Reply::new("1 2\n".into(), json!({ "pid": 12 })));
    assert_eq!(render(&ok, false), "1 2\n");
    assert_eq!(render(&ok, true), "{\"pid\":12}\n");
    let done: Answer = Ok(Reply::done(json!({ "ok": true })));
    assert_eq!(render(&done, false), "");
    assert_eq!(render(&done, true), "{\"ok\":true}\n");
}

#[test]
fn a_failure_is_rendered_as_an_error_line_or_an_error_object() {
    let e: Answer = Err(Failure::NoConnection(7));
    assert_eq!(render(&e, false), "error: no connection 7\n");
    assert_eq!(render(&e, true), "{\"error\":\"no connection 7\"}\n");
}

#[test]
fn failures_keep_their_text() {
    let which = Failure::listener(None, vec!["a".into(), "b".into()]);
    assert_eq!(
        which.to_string(),
        "there are 2 listeners (a, b): say which with 'listener NAME' first"
    );
    assert_eq!(
        Failure::listener(Some("x"), Vec::new()).to_string(),
        "no listener named 'x'"
    );
    let level = Failure::NeedsLevel {
        line: "hash".into(),
        needed: ControlLevel::Admin,
        has: ControlLevel::Operate,
    };
    assert_eq!(
        level.to_string(),
        "'hash' needs control level admin (this connection has operate)"
    );
    let reload = Failure::Reload(ApplyError::Stopping);
    assert_eq!(
        reload.to_string(),
        "reload rejected: stopping: the configuration no longer changes"
    );
    assert_eq!(
        Failure::PoolCommand("api".into()).to_string(),
        "'pool api' takes server commands, pool settings (set or shown) and 'servers' only"
    );
}
