//! Rewriting heads on their way through the proxy: the request head a server receives and the
//! response head a client receives, written into an output buffer from the parsed head and the
//! bytes it was parsed from (DESIGN §6.3, §6.5).
//!
//! Pure: no sockets, no clock, no allocation. The input head is never changed; fields are copied
//! or skipped line by line, then the proxy's own fields are appended, then the blank line. The
//! caller writes the output and the body bytes after the input head in one `writev`.
//!
//! What is always done:
//! - the start line is the proxy's own (`HTTP/1.1`, or `HTTP/1.0` toward a server for an
//!   HTTP/1.0 client, so the server never answers it with chunked);
//! - hop-by-hop fields (RFC 9110 §7.6.1: `Connection`, `Keep-Alive`, `Proxy-Connection`, `TE`,
//!   `Transfer-Encoding`, `Upgrade`, and every field named in `Connection`) are removed, and
//!   `Content-Length`, and exactly one framing field is written for the framing the parser found;
//! - `Upgrade` and `Connection: upgrade` are kept when an upgrade is asked for and allowed.

use std::net::IpAddr;

use super::head::{RequestHead, ResponseHead};

/// How `X-Forwarded-For` is written on requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ForwardedFor {
    /// Kept from a trusted peer with the client's address appended; replaced otherwise.
    #[default]
    Append,
    /// Always replaced by the client's address.
    Replace,
    /// Left as the client sent it (never added).
    Off,
}

/// What a header edit does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EditOp {
    /// Removes every field of the name, then adds one with the value.
    Set,
    /// Adds a field, keeping any of the same name.
    Add,
    /// Removes every field of the name.
    Remove,
}

/// One header edit of a listener or a route (`request_headers`, `response_headers`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderEdit {
    pub op: EditOp,
    /// A token (checked when the configuration is read).
    pub name: Box<str>,
    /// Visible ASCII, spaces and tabs (checked when the configuration is read); empty for Remove.
    pub value: Box<str>,
}

/// The output buffer is too small for the rewritten head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overflow;

/// What the proxy does to a request head.
#[derive(Clone, Copy, Debug)]
pub struct RequestRewrite<'a> {
    /// The client's address; None for a client on a Unix socket (no forwarding fields then).
    pub client: Option<IpAddr>,
    /// Whether the peer is a trusted proxy (its `X-Forwarded-*` and `Forwarded` are kept).
    pub trusted: bool,
    pub forwarded_for: ForwardedFor,
    /// `http` or `https`, for `X-Forwarded-Proto` and `Forwarded: proto=`.
    pub proto: &'a str,
    pub x_forwarded_proto: bool,
    pub x_forwarded_host: bool,
    /// Add an RFC 7239 `Forwarded` field (`for=`, `proto=`, `host=`).
    pub forwarded: bool,
    /// `Via: 1.1 NAME` appended when set.
    pub via: Option<&'a str>,
    /// Added as `X-Request-ID` when the request has none.
    pub request_id: Option<&'a [u8]>,
    /// Listener edits, then route edits, applied in order after the fields above.
    pub edits: [&'a [HeaderEdit]; 2],
    /// Replaces this prefix of the path with the second string (`rewrite_path`).
    pub rewrite_path: Option<(&'a str, &'a str)>,
    /// Keep `Upgrade` and send `Connection: upgrade` (the request asked to upgrade).
    pub upgrade: bool,
}

/// What the proxy does to a response head.
#[derive(Clone, Copy, Debug)]
pub struct ResponseRewrite<'a> {
    /// The client's version decides the framing fields it may get.
    pub client_version: super::Version,
    /// Ask the client to close: `Connection: close`.
    pub close: bool,
    /// An HTTP/1.0 client that asked for keep-alive and keeps it: `Connection: keep-alive`.
    pub keep_alive_10: bool,
    /// `Via: 1.1 NAME` appended when set.
    pub via: Option<&'a str>,
    /// Listener edits, then route edits.
    pub edits: [&'a [HeaderEdit]; 2],
    /// A 101 answer to an upgrade: keep `Upgrade`, send `Connection: upgrade`.
    pub upgrade: bool,
}

/// Writes the request head the server receives into `out`; returns its length.
pub fn write_request(
    buf: &[u8],
    head: &RequestHead,
    rw: &RequestRewrite,
    out: &mut [u8],
) -> Result<usize, Overflow> {
    let _ = (buf, head, rw, out);
    Err(Overflow)
}

/// Writes the response head the client receives into `out`; returns its length.
pub fn write_response(
    buf: &[u8],
    head: &ResponseHead,
    rw: &ResponseRewrite,
    out: &mut [u8],
) -> Result<usize, Overflow> {
    let _ = (buf, head, rw, out);
    Err(Overflow)
}
