//! Fuzz target for `quill_core::h2`: a whole HTTP/2 server connection fed the fuzzer's bytes after
//! a valid preface, cut into pieces at points the input chooses, with every request answered by
//! an HTTP/1.1 response pumped through `h2::Response` as the proxy does. Nothing panics, the
//! connection never holds more streams than it allows, and its output stays bounded.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quill_core::h2::{frame, Config, Conn, Event, Response};

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let cut = usize::from(cut) + 1;
    let mut input = frame::PREFACE.to_vec();
    frame::write_settings(&mut input, &[]);
    input.extend_from_slice(rest);
    let mut c = Conn::new(Config::default());
    let mut open: Vec<(u32, Response)> = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    for (i, piece) in input.chunks(cut).enumerate() {
        pending.extend_from_slice(piece);
        for _ in 0..10_000 {
            let (n, ev) = c.feed(&pending, i as u64);
            let mut done = n == 0;
            match ev {
                Event::Request { stream, .. } => open.push((stream, Response::new(false))),
                Event::Reset { stream, .. } => open.retain(|(s, _)| *s != stream),
                Event::Error(_) => done = true,
                _ => {}
            }
            pending.drain(..n);
            if done {
                break;
            }
        }
        for (stream, r) in &mut open {
            let _ = r.pump(
                &mut c,
                *stream,
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nx: y\r\n\r\n",
                true,
            );
        }
        open.retain(|(_, r)| !r.is_done());
        assert!(c.open_streams() <= 100);
        let n = c.output().len();
        c.sent(n);
    }
});
