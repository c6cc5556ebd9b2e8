//! Quill as a web server (docs/web.md): the `static` route action's files and their directory
//! listings, and what a worker keeps to serve them fast.

pub(crate) mod listing;
