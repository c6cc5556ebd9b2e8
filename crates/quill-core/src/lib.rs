//! What the product (`quill`) and its load generator (`quill-bench`) share, below both: the
//! `sys` wrappers (the workspace's only `unsafe`), the duration grammar and, pure and fuzzed,
//! the HTTP/1 module, the TLS ClientHello reader (`tls_hello`, SNI routing without termination)
//! the frames of direct server return (`dsr`), the PROXY protocol header (`proxy_header`), the
//! HTTP semantics of serving a file (`files`: types, validators, conditionals, ranges), FastCGI
//! records (`fastcgi`), the CGI response head (`cgi`), Maglev consistent-hashing tables
//! (`maglev`), the connection tracking of DSR on those tables (`conntrack`) and,
//! with the `tls` feature, the record layer of terminated TLS (`tls_records`); the one random
//! number generator (`rand::Rng`) and numbers in decimal without allocating (`decimal`).

// An item is `pub` only when another crate can reach it (the binary, the tests, the other
// crates of the workspace); the rest is `pub(crate)`, so the compiler finds what is dead.
#![deny(unreachable_pub)]
// Only `sys` may contain unsafe code (each of its files allows it on its own); the compiler
// enforces it for every other module.
#![deny(unsafe_code)]

pub mod cgi;
pub mod conntrack;
pub mod decimal;
pub mod dns;
pub mod dsr;
pub mod duration;
pub mod fastcgi;
pub mod files;
pub mod flows;
pub mod h2;
pub mod http1;
pub mod maglev;
pub mod proxy_header;
pub mod rand;
pub mod sys;
pub mod tls_hello;
// Built for the quill package (which enables `tls`) and for this crate's own tests.
#[cfg(any(feature = "tls", test))]
pub mod tls_records;
