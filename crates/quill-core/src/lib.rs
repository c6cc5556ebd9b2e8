//! What the product (`quill`) and its load generator (`quill-bench`) share, below both: the
//! `sys` wrappers (the workspace's only `unsafe`), the duration grammar and, pure and fuzzed,
//! the HTTP/1 module.

// Only `sys` may contain unsafe code; the compiler enforces it for every other module.
#![deny(unsafe_code)]

pub mod duration;
pub mod http1;
#[allow(unsafe_code)]
pub mod sys;
