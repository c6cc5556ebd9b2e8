//! Fuzz target for `quill_core::fastcgi::Decoder` on arbitrary bytes: never panics, every call
//! consumes a byte or gives an event, event ranges lie within the input fed, and the bytes fed in
//! two pieces (cut where the first byte says) give the same streams and events as fed whole.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quill_core::fastcgi::{Decoder, Error, Event, REQUEST_ID};

/// The events of `pieces` fed in order, stream content joined, or the error.
fn decode(pieces: &[&[u8]]) -> Result<(Vec<u8>, Vec<u8>, Vec<Event>), Error> {
    let (mut out, mut err, mut others) = (Vec::new(), Vec::new(), Vec::new());
    let mut dec = Decoder::new(REQUEST_ID);
    for piece in pieces {
        let mut rest = *piece;
        while !rest.is_empty() {
            let (n, event) = dec.feed(rest)?;
            assert!(n <= rest.len());
            match event {
                Some(Event::Stdout(r)) => out.extend_from_slice(&rest[r]),
                Some(Event::Stderr(r)) => err.extend_from_slice(&rest[r]),
                Some(e) => others.push(e),
                None => assert_eq!(n, rest.len(), "no event, yet input left"),
            }
            rest = &rest[n..];
        }
    }
    Ok((out, err, others))
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, data)) = data.split_first() else { return };
    let cut = usize::from(cut).min(data.len());
    let whole = decode(&[data]);
    let split = decode(&[&data[..cut], &data[cut..]]);
    match (&whole, &split) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a, b),
        _ => panic!("whole {whole:?} but cut at {cut} {split:?}"),
    }
});
