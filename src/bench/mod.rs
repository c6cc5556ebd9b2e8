//! `quill bench`: the load balancer shootout as a built-in tool.

pub mod plot;
pub mod spec;
