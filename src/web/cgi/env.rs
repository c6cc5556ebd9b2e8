//! The environment of a CGI script (RFC 3875 §4.1), built from what the session knows of the
//! request without I/O: [`environment`] takes a [`Request`] and gives the variables as
//! `(name, value)` byte strings, which the spawner hands to `Command::envs` after clearing
//! Quill's own environment (a script sees only its request, and a `PATH`).

use std::net::SocketAddr;

/// What a script's environment is made of.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request<'a> {
    /// The method's token as sent (`GET`).
    pub method: &'a [u8],
    /// `HTTP/1.1` or `HTTP/1.0`.
    pub protocol: &'a str,
    /// The request target as sent (`/cgi/env.sh/a%20b?x=1`): `REQUEST_URI`.
    pub target: &'a [u8],
    /// The script's path from the root, with its leading `/` (`/env.sh`): `SCRIPT_NAME`.
    pub script_name: &'a [u8],
    /// The rest of the decoded path after the script (`/a b`), or empty: `PATH_INFO`.
    pub path_info: &'a [u8],
    /// The root's directory on disk (`SCRIPT_FILENAME` and `PATH_TRANSLATED` start with it).
    pub root: &'a [u8],
    /// The client: the real one, after a PROXY header (None on a Unix socket).
    pub client: Option<SocketAddr>,
    /// The address the client connected to (its port is `SERVER_PORT`).
    pub local: Option<SocketAddr>,
    /// The request's host (Host without its port); the local address when absent.
    pub host: Option<&'a [u8]>,
    /// TLS: `HTTPS=on`.
    pub https: bool,
    /// The body's length as the script reads it from stdin (None: no body).
    pub content_length: Option<u64>,
    /// The request's header fields, `(name, value)`, in order.
    pub fields: &'a [(&'a [u8], &'a [u8])],
}

/// The `SERVER_SOFTWARE` value.
const SOFTWARE: &str = concat!("Quill/", env!("CARGO_PKG_VERSION"));

/// The `PATH` a script gets (an interpreter named by `#!/usr/bin/env` must be found).
const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The script's environment: the RFC 3875 meta-variables, `REQUEST_URI`, `SCRIPT_FILENAME`,
/// `HTTPS` on TLS, and every request field as `HTTP_NAME` but `Proxy` (httpoxy: a script's HTTP
/// library would take `HTTP_PROXY` for its proxy), `Content-Type` and `Content-Length` (given as
/// their own variables) and a name with `_` (`X_A` and `X-A` would be one variable: the one a
/// proxy checked and the one the script reads could differ). Repeated fields are joined with
/// `, ` (`; ` for `Cookie`).
pub(crate) fn environment(r: &Request) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut env: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(24 + r.fields.len());
    let mut set = |name: &str, value: &[u8]| env.push((name.as_bytes().to_vec(), value.to_vec()));
    set("GATEWAY_INTERFACE", b"CGI/1.1");
    set("SERVER_SOFTWARE", SOFTWARE.as_bytes());
    set("SERVER_PROTOCOL", r.protocol.as_bytes());
    set("REQUEST_METHOD", r.method);
    set("REQUEST_URI", r.target);
    let query = r
        .target
        .iter()
        .position(|&b| b == b'?')
        .map_or(&b""[..], |q| &r.target[q + 1..]);
    set("QUERY_STRING", query);
    set("SCRIPT_NAME", r.script_name);
    set("SCRIPT_FILENAME", &join(r.root, r.script_name));
    set("PATH_INFO", r.path_info);
    if !r.path_info.is_empty() {
        set("PATH_TRANSLATED", &join(r.root, r.path_info));
    }
    if let Some(c) = r.client {
        set("REMOTE_ADDR", c.ip().to_string().as_bytes());
        set("REMOTE_PORT", c.port().to_string().as_bytes());
    }
    let local_ip = r.local.map(|l| l.ip().to_string()).unwrap_or_default();
    set("SERVER_NAME", r.host.unwrap_or(local_ip.as_bytes()));
    if let Some(l) = r.local {
        set("SERVER_PORT", l.port().to_string().as_bytes());
    }
    if r.https {
        set("HTTPS", b"on");
    }
    if let Some(n) = r.content_length {
        set("CONTENT_LENGTH", n.to_string().as_bytes());
    }
    set("PATH", PATH.as_bytes());
    for &(name, value) in r.fields {
        if name.eq_ignore_ascii_case(b"content-type") {
            set("CONTENT_TYPE", value);
        }
    }
    fields_as_variables(r.fields, &mut env);
    env
}

/// Appends `HTTP_*` for each field passed on (see [`environment`]).
fn fields_as_variables(fields: &[(&[u8], &[u8])], env: &mut Vec<(Vec<u8>, Vec<u8>)>) {
    const SKIPPED: [&[u8]; 3] = [b"proxy", b"content-type", b"content-length"];
    for &(name, value) in fields {
        if SKIPPED.iter().any(|s| name.eq_ignore_ascii_case(s)) || name.contains(&b'_') {
            continue;
        }
        let mut var = b"HTTP_".to_vec();
        var.extend(name.iter().map(|&b| match b {
            b'-' => b'_',
            b => b.to_ascii_uppercase(),
        }));
        match env.iter_mut().find(|(n, _)| *n == var) {
            Some((_, v)) => {
                let sep: &[u8] = if name.eq_ignore_ascii_case(b"cookie") {
                    b"; "
                } else {
                    b", "
                };
                v.extend_from_slice(sep);
                v.extend_from_slice(value);
            }
            None => env.push((var, value.to_vec())),
        }
    }
}

/// `root` + `path` (which starts with `/`), with one slash between them.
fn join(root: &[u8], path: &[u8]) -> Vec<u8> {
    let mut out = root.strip_suffix(b"/").unwrap_or(root).to_vec();
    out.extend_from_slice(path);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(fields: &'a [(&'a [u8], &'a [u8])]) -> Request<'a> {
        Request {
            method: b"POST",
            protocol: "HTTP/1.1",
            target: b"/env.sh/a%20b?x=1&y",
            script_name: b"/env.sh",
            path_info: b"/a b",
            root: b"/srv/cgi/",
            client: Some("192.0.2.7:4567".parse().unwrap()),
            local: Some("127.0.0.1:8080".parse().unwrap()),
            host: Some(b"example.com"),
            https: true,
            content_length: Some(5),
            fields,
        }
    }

    fn var<'a>(env: &'a [(Vec<u8>, Vec<u8>)], name: &str) -> Option<&'a [u8]> {
        env.iter()
            .find(|(n, _)| n == name.as_bytes())
            .map(|(_, v)| &v[..])
    }

    #[test]
    fn the_rfc_3875_variables_describe_the_request() {
        let env = environment(&request(&[(b"Content-Type", b"text/plain")]));
        let expect: [(&str, &[u8]); 17] = [
            ("GATEWAY_INTERFACE", b"CGI/1.1"),
            ("SERVER_PROTOCOL", b"HTTP/1.1"),
            ("REQUEST_METHOD", b"POST"),
            ("REQUEST_URI", b"/env.sh/a%20b?x=1&y"),
            ("QUERY_STRING", b"x=1&y"),
            ("SCRIPT_NAME", b"/env.sh"),
            ("SCRIPT_FILENAME", b"/srv/cgi/env.sh"),
            ("PATH_INFO", b"/a b"),
            ("PATH_TRANSLATED", b"/srv/cgi/a b"),
            ("REMOTE_ADDR", b"192.0.2.7"),
            ("REMOTE_PORT", b"4567"),
            ("SERVER_NAME", b"example.com"),
            ("SERVER_PORT", b"8080"),
            ("HTTPS", b"on"),
            ("CONTENT_LENGTH", b"5"),
            ("CONTENT_TYPE", b"text/plain"),
            ("PATH", PATH.as_bytes()),
        ];
        for (name, value) in expect {
            assert_eq!(var(&env, name), Some(value), "{name}");
        }
        assert!(var(&env, "HTTP_CONTENT_TYPE").is_none());
    }

    #[test]
    fn fields_become_http_variables_but_proxy_and_underscored_names() {
        let fields: [(&[u8], &[u8]); 6] = [
            (b"X-Trace-Id", b"abc"),
            (b"Proxy", b"http://evil:1"),
            (b"X_Trace_Id", b"spoofed"),
            (b"Cookie", b"a=1"),
            (b"cookie", b"b=2"),
            (b"Content-Length", b"5"),
        ];
        let env = environment(&request(&fields));
        assert_eq!(var(&env, "HTTP_X_TRACE_ID"), Some(&b"abc"[..]));
        assert_eq!(var(&env, "HTTP_COOKIE"), Some(&b"a=1; b=2"[..]));
        assert!(var(&env, "HTTP_PROXY").is_none());
        assert!(var(&env, "HTTP_CONTENT_LENGTH").is_none());
    }

    #[test]
    fn no_path_info_means_no_path_translated_and_no_body_no_length() {
        let mut r = request(&[]);
        r.path_info = b"";
        r.content_length = None;
        r.https = false;
        r.host = None;
        let env = environment(&r);
        assert_eq!(var(&env, "PATH_INFO"), Some(&b""[..]));
        assert!(var(&env, "PATH_TRANSLATED").is_none());
        assert!(var(&env, "CONTENT_LENGTH").is_none());
        assert!(var(&env, "HTTPS").is_none());
        assert_eq!(var(&env, "SERVER_NAME"), Some(&b"127.0.0.1"[..]));
    }
}
