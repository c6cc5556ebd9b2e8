//! Fuzz target for `quill_core::h2::hpack`'s decoder, differential against loona-hpack (the
//! decoder Quill used before its own): the input is cut into header blocks of one connection
//! (each block's length is its first byte), and every block Quill accepts, loona-hpack accepts
//! with the same fields in the same order. Quill may refuse more (a table size update after a
//! field, which RFC 7541 §4.2 forbids and loona-hpack takes); the comparison ends at the first
//! block either refuses, as the connection would. Nothing panics.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quill_core::h2::hpack::{Decoder, TABLE_SIZE};

type Fields = Vec<(Vec<u8>, Vec<u8>)>;

fuzz_target!(|data: &[u8]| {
    let mut mine = Decoder::default();
    let mut theirs = loona_hpack::Decoder::new();
    theirs.set_max_allowed_table_size(TABLE_SIZE);
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let (block, tail) = tail.split_at(usize::from(len).min(tail.len()));
        rest = tail;
        let mut a: Fields = Vec::new();
        let ok = mine
            .decode(block, |n, v| a.push((n.to_vec(), v.to_vec())))
            .is_ok();
        let mut b: Fields = Vec::new();
        let their_ok = theirs
            .decode_with_cb(block, |n, v| b.push((n.to_vec(), v.to_vec())))
            .is_ok();
        if !ok || !their_ok {
            assert!(!ok || their_ok, "Quill accepted {block:02x?}, loona-hpack did not");
            return;
        }
        assert_eq!(a, b, "block {block:02x?}");
    }
});
