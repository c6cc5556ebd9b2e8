//! Tests of `precondition`: each rule on its own, their precedence, and a model check of
//! `evaluate` against RFC 9110 §13.2.2's five steps written out one by one.

use super::*;
use proptest::prelude::*;

/// 2026-12-01 00:00:00.
const NOW: i64 = 1_796_083_200;
/// Sun, 06 Nov 1994 08:49:37 GMT.
const LM: i64 = 784_111_777;

fn rep() -> Representation {
    Representation {
        etag: etag::strong(LM, 5, 100, None),
        last_modified_s: LM,
        size: 100,
    }
}

fn cond() -> Conditions<'static> {
    Conditions {
        max_ranges: 4,
        now_s: NOW,
        ..Conditions::default()
    }
}

fn tag() -> Vec<u8> {
    rep().etag.as_bytes().to_vec()
}

#[test]
fn if_match_fails_with_412_unless_a_tag_matches_strongly() {
    let t = tag();
    let weak = [b"W/", &t[..]].concat();
    let run = |v: &[u8]| {
        evaluate(
            &Conditions {
                if_match: Some(v),
                ..cond()
            },
            &rep(),
            Method::Get,
        )
    };
    assert_eq!(run(&t), Verdict::Full);
    assert_eq!(run(b"*"), Verdict::Full);
    assert_eq!(run(&weak), Verdict::PreconditionFailed);
    assert_eq!(run(b"\"other\""), Verdict::PreconditionFailed);
    assert_eq!(run(b"garbage"), Verdict::PreconditionFailed);
}

#[test]
fn if_unmodified_since_fails_when_the_file_is_newer_and_yields_to_if_match() {
    let run = |c: Conditions<'_>| evaluate(&c, &rep(), Method::Other);
    let before = b"Sun, 06 Nov 1994 08:49:36 GMT";
    let at = b"Sun, 06 Nov 1994 08:49:37 GMT";
    assert_eq!(
        run(Conditions {
            if_unmodified_since: Some(before),
            ..cond()
        }),
        Verdict::PreconditionFailed
    );
    assert_eq!(
        run(Conditions {
            if_unmodified_since: Some(at),
            ..cond()
        }),
        Verdict::Full
    );
    assert_eq!(
        run(Conditions {
            if_unmodified_since: Some(b"yesterday"),
            ..cond()
        }),
        Verdict::Full
    );
    let t = tag();
    let c = Conditions {
        if_match: Some(&t),
        if_unmodified_since: Some(before),
        ..cond()
    };
    assert_eq!(run(c), Verdict::Full);
}

#[test]
fn if_none_match_is_304_for_get_and_head_and_412_otherwise() {
    let t = tag();
    let weak = [b"W/", &t[..]].concat();
    for v in [&t[..], &weak[..], b"*", b"\"a\", W/\"b\"", b"\"a\""] {
        let matched = v != b"\"a\", W/\"b\"" && v != b"\"a\"";
        let c = Conditions {
            if_none_match: Some(v),
            ..cond()
        };
        let expect = |m| match (matched, m) {
            (false, _) => Verdict::Full,
            (true, Method::Other) => Verdict::PreconditionFailed,
            (true, _) => Verdict::NotModified,
        };
        for m in [Method::Get, Method::Head, Method::Other] {
            assert_eq!(
                evaluate(&c, &rep(), m),
                expect(m),
                "{:?} {m:?}",
                String::from_utf8_lossy(v)
            );
        }
    }
}

#[test]
fn if_modified_since_is_304_for_get_and_head_only_and_yields_to_if_none_match() {
    let at = b"Sun, 06 Nov 1994 08:49:37 GMT";
    let before = b"Sunday, 06-Nov-94 08:49:36 GMT";
    let c = Conditions {
        if_modified_since: Some(at),
        ..cond()
    };
    assert_eq!(evaluate(&c, &rep(), Method::Get), Verdict::NotModified);
    assert_eq!(evaluate(&c, &rep(), Method::Head), Verdict::NotModified);
    assert_eq!(evaluate(&c, &rep(), Method::Other), Verdict::Full);
    let c = Conditions {
        if_modified_since: Some(before),
        ..cond()
    };
    assert_eq!(evaluate(&c, &rep(), Method::Get), Verdict::Full);
    let c = Conditions {
        if_modified_since: Some(b"Sun, 06 Nov 1994 08:49:37 GMT, x"),
        ..cond()
    };
    assert_eq!(evaluate(&c, &rep(), Method::Get), Verdict::Full);
    // A changed tag wins over an unchanged date.
    let c = Conditions {
        if_none_match: Some(b"\"old\""),
        if_modified_since: Some(at),
        ..cond()
    };
    assert_eq!(evaluate(&c, &rep(), Method::Get), Verdict::Full);
}

#[test]
fn a_range_is_served_for_get_only() {
    let c = Conditions {
        range: Some(b"bytes=0-9"),
        ..cond()
    };
    assert!(matches!(
        evaluate(&c, &rep(), Method::Get),
        Verdict::Partial(_)
    ));
    assert_eq!(evaluate(&c, &rep(), Method::Head), Verdict::Full);
    assert_eq!(evaluate(&c, &rep(), Method::Other), Verdict::Full);
    let c = Conditions {
        range: Some(b"bytes=100-"),
        ..cond()
    };
    assert_eq!(
        evaluate(&c, &rep(), Method::Get),
        Verdict::RangeNotSatisfiable
    );
    let c = Conditions {
        range: Some(b"bytes=0-9"),
        max_ranges: 0,
        ..cond()
    };
    assert_eq!(evaluate(&c, &rep(), Method::Get), Verdict::Full);
}

#[test]
fn if_range_gates_the_range_by_strong_tag_or_exact_date() {
    let t = tag();
    let weak = [b"W/", &t[..]].concat();
    let run = |ir: &[u8]| {
        let c = Conditions {
            range: Some(b"bytes=0-9"),
            if_range: Some(ir),
            ..cond()
        };
        matches!(evaluate(&c, &rep(), Method::Get), Verdict::Partial(_))
    };
    assert!(run(&t));
    assert!(!run(&weak));
    assert!(!run(b"\"other\""));
    assert!(run(b"Sun, 06 Nov 1994 08:49:37 GMT"));
    assert!(!run(b"Sun, 06 Nov 1994 08:49:38 GMT"));
    assert!(!run(b"Sun, 06 Nov 1994 08:49:36 GMT"));
    assert!(!run(b"not a validator"));
    // Without a Range, If-Range changes nothing.
    let c = Conditions {
        if_range: Some(b"\"other\""),
        ..cond()
    };
    assert_eq!(evaluate(&c, &rep(), Method::Get), Verdict::Full);
}

/// RFC 9110 §13.2.2 as written, step by step, with the field evaluations of §13.1 spelled out.
fn reference(c: &Conditions<'_>, r: &Representation, m: Method) -> Verdict {
    let cur = r.etag.tag();
    let date = |v: Option<&[u8]>| v.and_then(|v| date::parse(v, c.now_s));
    // Step 1: If-Match present → evaluate; false → 412. Absent → step 2.
    let step1 = c
        .if_match
        .map(|v| etag::list_matches(v, cur, Comparison::Strong));
    if step1 == Some(false) {
        return Verdict::PreconditionFailed;
    }
    // Step 2: no If-Match, If-Unmodified-Since present (and valid) → false → 412.
    if step1.is_none() {
        if let Some(d) = date(c.if_unmodified_since) {
            let condition = r.last_modified_s <= d;
            if !condition {
                return Verdict::PreconditionFailed;
            }
        }
    }
    // Step 3: If-None-Match present → false: 304 for GET/HEAD, else 412. Then step 5.
    let gh = m == Method::Get || m == Method::Head;
    match c.if_none_match {
        Some(v) => {
            let condition = !etag::list_matches(v, cur, Comparison::Weak);
            if !condition {
                return if gh {
                    Verdict::NotModified
                } else {
                    Verdict::PreconditionFailed
                };
            }
        }
        // Step 4: GET/HEAD, no If-None-Match, If-Modified-Since present → false: 304.
        None => {
            if let (true, Some(d)) = (gh, date(c.if_modified_since)) {
                let condition = r.last_modified_s > d;
                if !condition {
                    return Verdict::NotModified;
                }
            }
        }
    }
    // Step 5: GET with Range and If-Range: If-Range true → Range applies; else ignore Range.
    if m != Method::Get {
        return Verdict::Full;
    }
    let Some(range) = c.range else {
        return Verdict::Full;
    };
    if let Some(ir) = c.if_range {
        let is_tag = ir.first() == Some(&b'"') || ir.starts_with(b"W/");
        let condition = if is_tag {
            etag::parse(ir).is_some_and(|t| etag::strong_eq(t, cur))
        } else {
            date(Some(ir)) == Some(r.last_modified_s)
        };
        if !condition {
            return Verdict::Full;
        }
    }
    match range::parse(range, r.size, c.max_ranges) {
        RangeOutcome::Full => Verdict::Full,
        RangeOutcome::Partial(p) => Verdict::Partial(p),
        RangeOutcome::Unsatisfiable => Verdict::RangeNotSatisfiable,
    }
}

/// A field value drawn from what matters: the current tag (strong and weak), other tags, `*`,
/// dates around Last-Modified, garbage.
fn field(current: Vec<u8>) -> impl Strategy<Value = Option<Vec<u8>>> {
    let weak = [b"W/", &current[..]].concat();
    let list = [b"\"x\", ", &current[..]].concat();
    prop_oneof![
        Just(None),
        Just(Some(current)),
        Just(Some(weak)),
        Just(Some(list)),
        Just(Some(b"*".to_vec())),
        Just(Some(b"\"x\"".to_vec())),
        Just(Some(b"garbage".to_vec())),
        (-2i64..=2).prop_map(|d| Some(date::format(LM + d).to_vec())),
    ]
}

fn method() -> impl Strategy<Value = Method> {
    prop_oneof![Just(Method::Get), Just(Method::Head), Just(Method::Other)]
}

proptest! {
    #[test]
    fn evaluate_agrees_with_the_rfc_steps(
        fields in proptest::collection::vec(field(tag()), 5),
        range in prop_oneof![Just(None), Just(Some(b"bytes=0-9".to_vec())), Just(Some(b"bytes=500-".to_vec()))],
        m in method(),
    ) {
        let c = Conditions {
            if_match: fields[0].as_deref(),
            if_none_match: fields[1].as_deref(),
            if_modified_since: fields[2].as_deref(),
            if_unmodified_since: fields[3].as_deref(),
            if_range: fields[4].as_deref(),
            range: range.as_deref(),
            ..cond()
        };
        prop_assert_eq!(evaluate(&c, &rep(), m), reference(&c, &rep(), m));
    }

    #[test]
    fn arbitrary_fields_never_panic(
        fields in proptest::collection::vec(proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)), 6),
        m in method(),
        size in any::<u64>(),
    ) {
        let c = Conditions {
            if_match: fields[0].as_deref(),
            if_none_match: fields[1].as_deref(),
            if_modified_since: fields[2].as_deref(),
            if_unmodified_since: fields[3].as_deref(),
            if_range: fields[4].as_deref(),
            range: fields[5].as_deref(),
            ..cond()
        };
        let r = Representation { size, ..rep() };
        prop_assert_eq!(evaluate(&c, &r, m), reference(&c, &r, m));
    }
}
