//! The whole connection driven by random conversations cut at random points: it never panics,
//! a conversation reads the same whether it arrives whole or in pieces, and its buffers stay
//! bounded.

use proptest::prelude::*;

use super::frame::{flag, kind, Code};
use super::tests::{block, feed_all, frame_bytes, get, start, Ev};
use super::*;

/// One random frame of a client: mostly well formed, sometimes not.
fn any_frame() -> impl Strategy<Value = Vec<u8>> {
    let stream = prop_oneof![Just(0u32), Just(1), Just(3), Just(5), 1u32..40];
    prop_oneof![
        (0u32..20).prop_map(|i| get(1 + 2 * i, "/")),
        (
            stream.clone(),
            any::<u8>(),
            proptest::collection::vec(any::<u8>(), 0..40)
        )
            .prop_map(|(s, f, d)| frame_bytes(kind::DATA, f & 0x9, s, &d)),
        (stream.clone(), any::<u32>()).prop_map(|(s, c)| frame_bytes(
            kind::RST_STREAM,
            0,
            s,
            &c.to_be_bytes()
        )),
        (stream.clone(), any::<u32>()).prop_map(|(s, i)| frame_bytes(
            kind::WINDOW_UPDATE,
            0,
            s,
            &i.to_be_bytes()
        )),
        proptest::collection::vec(any::<u8>(), 0..13).prop_map(|p| frame_bytes(
            kind::SETTINGS,
            0,
            0,
            &p
        )),
        Just(frame_bytes(kind::PING, 0, 0, &[1; 8])),
        (
            stream.clone(),
            any::<u8>(),
            proptest::collection::vec(any::<u8>(), 0..30)
        )
            .prop_map(|(s, f, p)| frame_bytes(kind::HEADERS, f, s, &p)),
        (stream.clone(), any::<u8>()).prop_map(|(s, f)| frame_bytes(
            kind::CONTINUATION,
            f,
            s,
            &block(&[("a", "b")])
        )),
        (stream, proptest::collection::vec(any::<u8>(), 0..8)).prop_map(|(s, p)| frame_bytes(
            kind::PRIORITY,
            0,
            s,
            &p
        )),
        (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..20))
            .prop_map(|(k, p)| frame_bytes(k, 0, 1, &p)),
        Just(frame_bytes(
            kind::HEADERS,
            flag::END_HEADERS,
            7,
            &block(&[
                (":method", "POST"),
                (":scheme", "http"),
                (":path", "/"),
                ("content-length", "2")
            ])
        )),
    ]
}

fn conversation() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any_frame(), 0..30).prop_map(|frames| {
        let mut v = start();
        for f in frames {
            v.extend(f);
        }
        v
    })
}

/// Feeds `input` in pieces ending at `cuts`, keeping unread bytes as a socket reader does.
fn feed_cut(c: &mut Conn, input: &[u8], cuts: &[usize]) -> Vec<Ev> {
    let mut pending = Vec::new();
    let mut evs = Vec::new();
    let mut last = 0;
    let mut points: Vec<usize> = cuts.iter().map(|&x| x % (input.len() + 1)).collect();
    points.push(input.len());
    points.sort_unstable();
    for p in points {
        pending.extend_from_slice(&input[last..p]);
        last = p;
        let (e, used) = feed_all(c, &pending, 0);
        pending.drain(..used);
        let failed = e.iter().any(|x| matches!(x, Ev::Error(_)));
        evs.extend(e);
        if failed {
            break;
        }
    }
    evs
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_conversation_reads_the_same_whole_or_cut(input in conversation(), cuts in proptest::collection::vec(any::<usize>(), 0..8)) {
        let mut whole = Conn::new(Config::default());
        let a = feed_cut(&mut whole, &input, &[]);
        let mut cut = Conn::new(Config::default());
        let b = feed_cut(&mut cut, &input, &cuts);
        prop_assert_eq!(a, b);
        prop_assert_eq!(whole.output(), cut.output());
    }

    #[test]
    fn random_bytes_after_the_preface_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut c = Conn::new(Config::default());
        let mut input = start();
        input.extend(tail);
        let evs = feed_cut(&mut c, &input, &[]);
        // Whatever came, the connection either goes on or ends with a GOAWAY.
        if let Some(Ev::Error(code)) = evs.last() {
            prop_assert!(*code != Code::NO_ERROR);
        }
        prop_assert!(c.open_streams() <= 100);
    }

    /// Responses of any framing, pumped in pieces with the window opened a little at a time,
    /// arrive whole: the DATA payload is the body.
    #[test]
    fn responses_arrive_whole_through_small_windows(body in proptest::collection::vec(any::<u8>(), 0..3000), chunked in any::<bool>(), step in 1usize..700) {
        let mut c = Conn::new(Config::default());
        let mut input = super::frame::PREFACE.to_vec();
        super::frame::write_settings(&mut input, &[(super::frame::setting::INITIAL_WINDOW_SIZE, 100)]);
        input.extend(get(1, "/"));
        feed_all(&mut c, &input, 0);
        let mut h1 = Vec::new();
        if chunked {
            h1.extend_from_slice(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n");
            for part in body.chunks(257) {
                h1.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                h1.extend_from_slice(part);
                h1.extend_from_slice(b"\r\n");
            }
            h1.extend_from_slice(b"0\r\n\r\n");
        } else {
            h1.extend_from_slice(format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len()).as_bytes());
            h1.extend_from_slice(&body);
        }
        let mut r = Response::new(false);
        let mut at = 0;
        let mut fed = 0;
        for _ in 0..10_000 {
            fed = (fed + step).min(h1.len());
            let n = r.pump(&mut c, 1, &h1[at..fed], false, (0, &[])).unwrap();
            at += n;
            if r.is_done() { break; }
            let mut wu = Vec::new();
            super::frame::write_window_update(&mut wu, 1, 100);
            super::frame::write_window_update(&mut wu, 0, 100);
            feed_all(&mut c, &wu, 0);
        }
        prop_assert!(r.is_done());
        let out = c.output().to_vec();
        let mut got = Vec::new();
        let mut i = 0;
        while let Some(h) = super::frame::Header::parse(&out[i..]) {
            let end = i + 9 + h.len as usize;
            if h.kind == kind::DATA && h.stream == 1 { got.extend_from_slice(&out[i + 9..end]); }
            i = end;
        }
        prop_assert_eq!(got, body);
    }
}
