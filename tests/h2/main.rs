//! HTTP/2 on client connections end to end, over the real binary (docs/http2.md): the proxy path
//! ([`proxy`]), the lifecycle of a connection ([`lifecycle`]), interoperation with curl, nghttp,
//! h2load and Chromium ([`interop`]), h2spec's cases ([`conformance`]) and the published attacks
//! ([`attacks`]). Clients are Debian's python3-h2 (`client.py`, `h2spec.py`, `attacks.py`
//! beside this file), nghttp2's tools and curl.
//!
//! One test binary (`cargo test --test h2`); each file beside this one is a module of it.

#[allow(dead_code)]
#[path = "../admin_support/mod.rs"]
mod admin_support;
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

mod interop;
mod lifecycle;
mod proxy;
