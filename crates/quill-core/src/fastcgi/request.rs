//! The parameters of one request (RFC 3875 §4.1, named as nginx's `fastcgi_params` names them,
//! which PHP applications expect), written as a `PARAMS` stream: what the web server knows
//! about the request in [`Request`], its header fields as `HTTP_*`.

use std::io::Write as _;
use std::net::SocketAddr;

use super::encode::{NameRefused, Params};

/// What a request's parameters are made of. Byte strings are passed as they are: CGI gives them
/// no encoding.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// `REQUEST_METHOD`.
    pub method: &'a [u8],
    /// `REQUEST_URI`: the request target as the client sent it (path and query).
    pub request_uri: &'a [u8],
    /// `DOCUMENT_URI`: the normal path the route matched.
    pub document_uri: &'a [u8],
    /// `QUERY_STRING`: after the `?`, without it (empty when none).
    pub query: &'a [u8],
    /// `SCRIPT_NAME`: the script part of the path ([`super::split_script`]).
    pub script_name: &'a [u8],
    /// `PATH_INFO`: the rest of the path (written only when not empty).
    pub path_info: &'a [u8],
    /// `DOCUMENT_ROOT`: the route's root, without a trailing `/`; `SCRIPT_FILENAME` is it
    /// followed by `script_name`.
    pub document_root: &'a [u8],
    /// `SERVER_PROTOCOL`: `HTTP/1.1` or `HTTP/1.0`.
    pub protocol: &'a [u8],
    /// On TLS: `REQUEST_SCHEME` is `https` and `HTTPS` is `on`.
    pub https: bool,
    /// `CONTENT_TYPE`: the request's, or empty.
    pub content_type: &'a [u8],
    /// `CONTENT_LENGTH`: the body's length (written only when there is one).
    pub content_length: Option<u64>,
    /// `SERVER_NAME`: the request's host, without its port.
    pub server_name: &'a [u8],
    /// `SERVER_SOFTWARE`.
    pub server_software: &'a [u8],
    /// `REMOTE_ADDR` and `REMOTE_PORT`: the client (the PROXY protocol's, when one was read).
    pub remote: SocketAddr,
    /// `SERVER_ADDR` and `SERVER_PORT`: where the client connected (None on a Unix socket: not
    /// written).
    pub local: Option<SocketAddr>,
}

/// Writes the parameters of `req` and its header `fields` (name, value) into `params`, then the
/// caller finishes the stream. Fields named more than once become one parameter, their values
/// joined by `, ` (`; ` for `Cookie`), as RFC 3875 §4.1.18 asks; refused names (`Proxy`,
/// `Content-Type`, `Content-Length`, underscores, non-tokens: see [`super::http_param_name`]) are
/// left out. Returns how many fields were left out. Refuses a parameter longer than a record.
pub fn write_params<'f, F>(
    req: &Request,
    fields: F,
    params: &mut Params,
) -> Result<usize, NameRefused>
where
    F: Iterator<Item = (&'f [u8], &'f [u8])> + Clone,
{
    write_request(req, params)?;
    let mut left_out = 0;
    for (i, (name, _)) in fields.clone().enumerate() {
        let seen = fields
            .clone()
            .take(i)
            .any(|(n, _)| n.eq_ignore_ascii_case(name));
        if seen {
            continue;
        }
        let values = fields
            .clone()
            .skip(i)
            .filter(|(n, _)| n.eq_ignore_ascii_case(name));
        let sep: &[u8] = if name.eq_ignore_ascii_case(b"cookie") {
            b"; "
        } else {
            b", "
        };
        match params.add_field_joined(name, values.map(|(_, v)| v), sep) {
            Ok(()) => {}
            Err(NameRefused::TooLong) => return Err(NameRefused::TooLong),
            Err(_) => left_out += 1,
        }
    }
    Ok(left_out)
}

fn write_request(req: &Request, params: &mut Params) -> Result<(), NameRefused> {
    let fixed: [(&[u8], &[u8]); 12] = [
        (b"GATEWAY_INTERFACE", b"CGI/1.1"),
        (b"SERVER_SOFTWARE", req.server_software),
        (b"REQUEST_METHOD", req.method),
        (b"REQUEST_URI", req.request_uri),
        (b"DOCUMENT_URI", req.document_uri),
        (b"QUERY_STRING", req.query),
        (b"SCRIPT_NAME", req.script_name),
        (b"DOCUMENT_ROOT", req.document_root),
        (b"SERVER_PROTOCOL", req.protocol),
        (
            b"REQUEST_SCHEME",
            if req.https { b"https" } else { b"http" },
        ),
        (b"CONTENT_TYPE", req.content_type),
        (b"SERVER_NAME", req.server_name),
    ];
    for (name, value) in fixed {
        params.add(name, value)?;
    }
    params.add_joined(b"SCRIPT_FILENAME", &[req.document_root, req.script_name])?;
    if !req.path_info.is_empty() {
        params.add(b"PATH_INFO", req.path_info)?;
    }
    if req.https {
        params.add(b"HTTPS", b"on")?;
    }
    if let Some(n) = req.content_length {
        params.add(b"CONTENT_LENGTH", Text::of(format_args!("{n}")).as_bytes())?;
    }
    params.add(
        b"REMOTE_ADDR",
        Text::of(format_args!("{}", req.remote.ip().to_canonical())).as_bytes(),
    )?;
    params.add(
        b"REMOTE_PORT",
        Text::of(format_args!("{}", req.remote.port())).as_bytes(),
    )?;
    if let Some(local) = req.local {
        params.add(
            b"SERVER_ADDR",
            Text::of(format_args!("{}", local.ip().to_canonical())).as_bytes(),
        )?;
        params.add(
            b"SERVER_PORT",
            Text::of(format_args!("{}", local.port())).as_bytes(),
        )?;
    }
    // PHP built as CGI refuses to run without it (its `cgi.force_redirect`).
    params.add(b"REDIRECT_STATUS", b"200")
}

/// A number or address formatted on the stack (an IPv6 address takes at most 45 bytes).
struct Text {
    buf: [u8; 48],
    len: usize,
}

impl Text {
    fn of(args: std::fmt::Arguments) -> Text {
        let mut buf = [0; 48];
        let mut cursor = std::io::Cursor::new(&mut buf[..]);
        // Every caller's text fits in 48 bytes.
        let _ = cursor.write_fmt(args);
        let len = cursor.position() as usize;
        Text { buf, len }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}
