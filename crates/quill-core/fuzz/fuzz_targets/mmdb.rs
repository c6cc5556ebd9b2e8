//! Fuzz target for `quill_core::mmdb`: arbitrary bytes as a MaxMind DB (after the metadata
//! marker, so the tree and data readers are reached) never panic, open or lookup.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quill_core::mmdb::Db;

fuzz_target!(|data: &[u8]| {
    let split = data.len() / 2;
    let mut bytes = data[..split].to_vec();
    bytes.extend_from_slice(b"\xab\xcd\xefMaxMind.com");
    bytes.extend_from_slice(&data[split..]);
    if let Ok(db) = Db::new(bytes) {
        for ip in ["81.2.69.142", "::1", "2001:218::1", "0.0.0.0", "255.255.255.255"] {
            let _ = db.country(ip.parse().unwrap());
        }
    }
});
