//! Tests of `range`: RFC 9110 §14.1.2's examples, the outcomes of invalid, excessive and
//! unsatisfiable fields, and properties of what any field gives.

use super::*;
use proptest::prelude::*;

fn parts(value: &str, size: u64, max: usize) -> Vec<(u64, u64)> {
    match parse(value.as_bytes(), size, max) {
        RangeOutcome::Partial(r) => r.as_slice().iter().map(|r| (r.start, r.end)).collect(),
        other => panic!("{value}: {other:?}"),
    }
}

#[test]
fn the_rfc_examples_select_their_bytes() {
    assert_eq!(parts("bytes=0-499", 10_000, 4), [(0, 499)]);
    assert_eq!(parts("bytes=500-999", 10_000, 4), [(500, 999)]);
    assert_eq!(parts("bytes=-500", 10_000, 4), [(9500, 9999)]);
    assert_eq!(parts("bytes=9500-", 10_000, 4), [(9500, 9999)]);
    assert_eq!(parts("bytes=0-0,-1", 10_000, 4), [(0, 0), (9999, 9999)]);
    assert_eq!(parts("bytes= 0-999, 4500-5499, -1000", 10_000, 4).len(), 3);
}

#[test]
fn overlapping_and_adjacent_ranges_are_merged_in_ascending_order() {
    assert_eq!(parts("bytes=500-600,601-999", 10_000, 4), [(500, 999)]);
    assert_eq!(parts("bytes=500-700,601-999", 10_000, 4), [(500, 999)]);
    assert_eq!(parts("bytes=-1,0-0", 10_000, 4), [(0, 0), (9999, 9999)]);
    assert_eq!(parts("bytes=5-9,0-1,3-4", 10, 4), [(0, 1), (3, 9)]);
    assert_eq!(parts("bytes=5-9,0-1,3-3", 10, 4), [(0, 1), (3, 3), (5, 9)]);
    assert_eq!(parts("bytes=0-,0-,0-,0-", 10, 4), [(0, 9)]);
}

#[test]
fn a_range_past_the_end_is_cut_at_the_end() {
    assert_eq!(parts("bytes=5-100", 10, 1), [(5, 9)]);
    assert_eq!(parts("bytes=-100", 10, 1), [(0, 9)]);
    assert_eq!(parts("bytes=0-99999999999999999999999", 10, 1), [(0, 9)]);
}

#[test]
fn a_range_starting_past_the_end_is_416() {
    for v in [
        "bytes=10-",
        "bytes=10-20",
        "bytes=-0",
        "bytes=99999999999999999999999-",
    ] {
        assert_eq!(
            parse(v.as_bytes(), 10, 4),
            RangeOutcome::Unsatisfiable,
            "{v}"
        );
    }
    assert_eq!(parse(b"bytes=0-", 0, 4), RangeOutcome::Unsatisfiable);
    assert_eq!(parse(b"bytes=-5", 0, 4), RangeOutcome::Unsatisfiable);
    // One satisfiable range is enough: the others are left out.
    assert_eq!(parts("bytes=20-30,2-3", 10, 4), [(2, 3)]);
}

#[test]
fn an_invalid_or_foreign_range_is_ignored() {
    for v in [
        "",
        "bytes",
        "bytes=",
        "bytes=,",
        "bytes=-",
        "bytes=5-4",
        "bytes=a-b",
        "bytes=0-1;x",
        "bytes=0-1,junk",
        "bytes=+1-2",
        "bytes = 0-1",
        "items=0-1",
        "bytes=0--1",
        "bytes=1 -2",
    ] {
        assert_eq!(parse(v.as_bytes(), 10, 4), RangeOutcome::Full, "{v}");
    }
    assert_eq!(parts("BYTES=0-1", 10, 4), [(0, 1)]);
}

#[test]
fn more_ranges_than_allowed_serve_the_whole_file() {
    assert_eq!(parse(b"bytes=0-0,2-2,4-4", 10, 2), RangeOutcome::Full);
    assert_eq!(parts("bytes=0-0,2-2", 10, 2).len(), 2);
    assert_eq!(parse(b"bytes=0-0", 10, 0), RangeOutcome::Full);
    // Unsatisfiable ranges do not count.
    assert_eq!(parts("bytes=0-0,20-,30-", 10, 1), [(0, 0)]);
    let many = format!("bytes={}", vec!["0-0"; 17].join(","));
    assert_eq!(parse(many.as_bytes(), 10, 100), RangeOutcome::Full);
}

#[test]
fn the_apache_killer_request_costs_at_most_the_file() {
    let value = format!(
        "bytes=0-,{}",
        (1..1300)
            .map(|i| format!("5-{i}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    assert_eq!(parse(value.as_bytes(), 100_000, 16), RangeOutcome::Full);
    let value = format!("bytes={}", vec!["0-"; 16].join(","));
    assert_eq!(parts(&value, 100_000, 16), [(0, 99_999)]);
}

#[test]
fn content_range_values_are_written_exactly() {
    let r = ByteRange { start: 0, end: 499 };
    assert_eq!(content_range(r, 1234).as_bytes(), b"bytes 0-499/1234");
    assert_eq!(unsatisfied(0).as_bytes(), b"bytes */0");
    let max = ByteRange {
        start: u64::MAX - 1,
        end: u64::MAX - 1,
    };
    let c = content_range(max, u64::MAX);
    assert_eq!(c.as_bytes().len(), CONTENT_RANGE_MAX);
    assert_eq!(
        c.as_bytes(),
        format!("bytes {0}-{0}/{1}", u64::MAX - 1, u64::MAX).as_bytes()
    );
}

fn spec() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..200, 0u64..200).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
        (0u64..200).prop_map(|a| format!("{a}-")),
        (0u64..200).prop_map(|a| format!("-{a}")),
    ]
}

proptest! {
    #[test]
    fn parts_stay_inside_the_file_sorted_apart_and_bounded(
        specs in proptest::collection::vec(spec(), 1..24),
        size in 0u64..150,
        max in 0usize..20,
    ) {
        let value = format!("bytes={}", specs.join(","));
        match parse(value.as_bytes(), size, max) {
            RangeOutcome::Partial(r) => {
                let p = r.as_slice();
                prop_assert!(!p.is_empty() && p.len() <= max.min(MAX_PARTS));
                for part in p {
                    prop_assert!(part.start <= part.end && part.end < size);
                }
                for w in p.windows(2) {
                    prop_assert!(w[0].end + 1 < w[1].start, "{:?}", p);
                }
                prop_assert!(r.total_len() <= size);
                // Every byte a spec asked for is in a part, and no other byte.
                for b in 0..size {
                    let asked = specs.iter().any(|s| resolve(read_spec(s.as_bytes()).unwrap(), size)
                        .is_some_and(|x| x.start <= b && b <= x.end));
                    let served = p.iter().any(|x| x.start <= b && b <= x.end);
                    prop_assert_eq!(asked, served, "byte {}", b);
                }
            }
            RangeOutcome::Unsatisfiable => {
                prop_assert!(max > 0);
                for s in &specs {
                    prop_assert_eq!(resolve(read_spec(s.as_bytes()).unwrap(), size), None);
                }
            }
            RangeOutcome::Full => {
                let satisfiable = specs.iter()
                    .filter(|s| resolve(read_spec(s.as_bytes()).unwrap(), size).is_some())
                    .count();
                prop_assert!(max == 0 || satisfiable > max.min(MAX_PARTS), "{}", value);
            }
        }
    }

    #[test]
    fn arbitrary_values_never_panic(v in proptest::collection::vec(any::<u8>(), 0..64), size in any::<u64>(), max in 0usize..40) {
        if let RangeOutcome::Partial(r) = parse(&v, size, max) {
            prop_assert!(r.total_len() <= size);
        }
    }
}
