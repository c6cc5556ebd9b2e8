//! Fuzz target for `quill_core::flows::FlowTable`: bytes read as a sequence of operations
//! (insert, touch, remove, pop the oldest idle flow) on small keys; the table never panics and
//! its invariants hold after every operation.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quill_core::flows::FlowTable;

fuzz_target!(|data: &[u8]| {
    let mut t: FlowTable<u8, u8> = FlowTable::new();
    for (now, pair) in data.chunks(2).enumerate() {
        let now = now as u64;
        let (op, k) = (pair[0], pair.get(1).copied().unwrap_or(0));
        match op % 4 {
            0 => {
                t.insert(k, k, now);
            }
            1 => {
                if let Some(id) = t.find(&k) {
                    t.touch(id, now);
                }
            }
            2 => {
                if let Some(id) = t.find(&k) {
                    assert_eq!(t.remove(id), Some((k, k)));
                    assert!(t.find(&k).is_none());
                }
            }
            _ => {
                let oldest = t.oldest();
                if let Some((id, key, _)) = t.pop_idle(now.saturating_sub(u64::from(k % 8))) {
                    assert_eq!(Some(id), oldest.map(|(id, _)| id));
                    assert!(t.find(&key).is_none());
                }
            }
        }
        if let Err(e) = t.check() {
            panic!("after op {now}: {e}");
        }
    }
});
