//! HTTP/2 on client connections end to end, over the real binary (issue 26, docs/http2.md): the
//! proxy path ([`proxy`]), the lifecycle of a connection ([`lifecycle`]), interoperation with
//! curl, nghttp, h2load and Chromium ([`interop`]), h2spec's 147 server cases ([`conformance`])
//! and the published floods and bombs ([`attacks`]). The clients are Python scripts beside this
//! file (`client.py`, `h2spec.py`, `attacks.py`, run by Debian's /usr/bin/python3 with
//! python3-h2), nghttp2's tools and curl, against Quill's h2c listener or its TLS listener with
//! ALPN h2, in front of an HTTP/1.1 test backend. `PEERS.md` says how h2o and nginx fare against
//! the same scripts.
//!
//! One test binary (`cargo test --test h2`); each file beside this one is a module of it.
//! The support code it needs is compiled once, here; `allow(dead_code)` marks the support
//! modules other binaries share, of which this one calls a part.

#[allow(dead_code)]
#[path = "../admin_support/mod.rs"]
mod admin_support;
#[allow(dead_code)]
#[path = "../support/desync.rs"]
mod desync;
#[allow(dead_code)]
#[path = "../support/http.rs"]
mod http_support;
#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;
#[allow(dead_code)]
#[path = "../support/tls.rs"]
mod tls_support;

#[allow(dead_code)]
mod kit;

mod attacks;
mod conformance;
mod interop;
mod lifecycle;
mod proxy;
mod script;
