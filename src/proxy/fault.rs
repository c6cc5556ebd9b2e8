//! Fault injection for the panic-containment test (docs/design.md#a-bug-ends-one-session;
//! `runtime::panics`).
//!
//! `QUILL_FAULT_PANIC_TARGET`, read once (at start, when the worker's panic hook is installed),
//! names a request target that makes an HTTP session panic once it holds its server connection,
//! buffers and lease: how `tests/core/session.rs` makes one session fail as a bug would. Unset
//! (always, outside tests), it costs one load of a static per request sent.

use std::sync::OnceLock;

/// The target of `QUILL_FAULT_PANIC_TARGET`, read once.
pub(crate) fn target() -> Option<&'static [u8]> {
    static TARGET: OnceLock<Option<Box<[u8]>>> = OnceLock::new();
    TARGET
        .get_or_init(|| {
            std::env::var_os("QUILL_FAULT_PANIC_TARGET")
                .filter(|v| !v.is_empty())
                .map(|v| v.into_encoded_bytes().into_boxed_slice())
        })
        .as_deref()
}

/// Panics when `request_target` is the one `QUILL_FAULT_PANIC_TARGET` names.
pub(crate) fn inject(request_target: &[u8]) {
    if target().is_some_and(|t| t == request_target) {
        injected();
    }
}

#[cold]
#[inline(never)]
#[expect(
    clippy::panic,
    reason = "the fault asked for by QUILL_FAULT_PANIC_TARGET"
)]
fn injected() {
    panic!("fault injected by QUILL_FAULT_PANIC_TARGET");
}
