//! Quill as a web server, end to end over the real binary: static files and their HTTP semantics,
//! paths that must never leave their root, directory listings, virtual hosts, FastCGI, CGI and
//! access rules, against real peers (nginx as the reference, php-fpm, fcgiwrap).
//!
//! One test binary (`cargo test --test web`); each file beside this one is a module of it.

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

mod cgi;
mod cold_io;
mod fastcgi;
mod nginx_differential;
mod observe;
mod sites;
mod static_files;
