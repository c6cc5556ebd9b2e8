//! Fuzz target for `quill_core::dns::lookup`: a whole discovery round (SRV or host) fed the
//! fuzzer's bytes as replies, cut into pieces at points the input chooses; nothing panics, every
//! round ends within a bounded number of queries, and an ended round never yields an empty set.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quill_core::dns::lookup::{Lookup, Want, MAX_SRV};
use quill_core::dns::DnsError;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let want = if first & 1 == 0 {
        Want::Srv("_h._tcp.s.consul".into())
    } else {
        Want::Host { name: "s.consul".into(), port: 80 }
    };
    let mut lookup = Lookup::new(want);
    let mut id = 0u16;
    let mut ids = || {
        id = id.wrapping_add(1);
        id
    };
    let mut todo = lookup.start(&mut ids);
    // Replies: pieces of the input, each prefixed by its length byte.
    let mut pieces = rest;
    let mut asked = 0;
    while let Some(i) = todo.pop() {
        asked += 1;
        assert!(asked <= 2 * MAX_SRV + 8);
        let (len, tail) = match pieces.split_first() {
            Some((&n, t)) => (usize::from(n) * 4, t),
            None => (0, pieces),
        };
        let cut = len.min(tail.len());
        let (reply, next) = tail.split_at(cut);
        pieces = next;
        match lookup.on_reply(i, reply, &mut ids) {
            Ok(more) => todo.extend(more),
            Err(_) => lookup.fail(i, DnsError::Timeout),
        }
    }
    if let Some(Ok((found, _))) = lookup.outcome() {
        assert!(!found.is_empty());
    }
});
