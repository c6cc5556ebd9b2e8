//! A bug in one session ends that session, not the process (docs/design.md#a-bug-ends-one-session).
//!
//! The release profile unwinds (`panic = "abort"` made any panic the end of every listener and
//! session). The worker makes each call into a session through [`contain`]: a panic unwinds to
//! it, and the worker resets that session alone (its slot freed, its buffers and server lease
//! given back, its server connection closed and never returned to the idle pool) and goes on.
//! What a session call changes outside the session, it changes through calls that do not call
//! back into session code (the buffer pool, the server connection slots, the access-log buffer,
//! whose lines are built apart and written whole), so no state shared with other sessions is
//! left half-changed when the unwind passes through. (The worker's index of the response head
//! being parsed may be left half-filled: every parse begins it anew before anyone reads it.)
//!
//! The hook installed by [`install_hook`] keeps, for a panic inside [`contain`], its message,
//! location and a backtrace for the worker to log with the session's identity; any other panic
//! goes to the default hook, as before.
//!
//! `proxy::fault` (`QUILL_FAULT_PANIC_TARGET`, read when the hook is installed) makes one HTTP
//! session panic as a bug would, for `tests/core/session.rs`.

use std::any::Any;
use std::backtrace::Backtrace;
use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::OnceLock;

thread_local! {
    /// Inside [`contain`] on this thread: a panic is kept for the caller, not printed.
    static CONTAINED: Cell<bool> = const { Cell::new(false) };
    /// The last contained panic's message, location and backtrace.
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs the process's panic hook (once; later calls do nothing).
pub(crate) fn install_hook() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if CONTAINED.with(Cell::get) {
                let text = format!("{info}\nbacktrace:\n{}", Backtrace::force_capture());
                LAST.with(|last| *last.borrow_mut() = Some(text));
            } else {
                default(info);
            }
        }));
        crate::proxy::fault::target();
    });
}

/// Runs `f`; a panic in it comes back as its description (message, location, backtrace)
/// instead of unwinding further.
pub(crate) fn contain<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let outer = CONTAINED.with(|c| c.replace(true));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    CONTAINED.with(|c| c.set(outer));
    result.map_err(|payload| {
        LAST.with(|last| last.borrow_mut().take())
            .unwrap_or_else(|| describe(payload.as_ref()))
    })
}

/// A panic's message when the hook kept nothing (it was not installed).
fn describe(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contained_panic_comes_back_with_its_location_and_backtrace() {
        install_hook();
        let r: Result<(), String> = contain(|| {
            let v: Vec<u8> = Vec::new();
            let _ = v[std::hint::black_box(3)];
        });
        let text = r.expect_err("the index panics");
        assert!(text.contains("index out of bounds"), "{text}");
        assert!(text.contains("panics.rs"), "{text}");
        assert!(text.contains("backtrace:"), "{text}");
        assert_eq!(contain(|| 7), Ok(7));
    }
}
