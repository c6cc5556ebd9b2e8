//! HTTP/2 on client connections, end to end over the real binary (issue 26): h2spec's 147 server
//! cases and the published floods and bombs, each driven by a Python script beside this file
//! (`h2spec.py`, `attacks.py`, run by Debian's /usr/bin/python3 with python3-h2) against Quill's
//! prior-knowledge h2c listener, a few over TLS with ALPN h2, in front of an HTTP/1.1 test backend.
//! `PEERS.md` says how h2o and nginx fare against the same scripts.
//!
//! One test binary (`cargo test --test h2`); each file beside this one is a module of it.
//! The support code it needs is compiled once, here; `allow(dead_code)` marks the support
//! modules other binaries share, of which this one calls a part.

#[allow(dead_code)]
#[path = "../support/http.rs"]
mod http_support;
#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;
#[allow(dead_code)]
#[path = "../support/tls.rs"]
mod tls_support;

mod attacks;
mod conformance;
mod script;
