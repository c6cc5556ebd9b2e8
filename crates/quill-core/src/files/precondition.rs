//! Conditional requests on a file (RFC 9110 §13.2.2): the preconditions evaluated in the RFC's
//! order, then the Range field (§14.2) gated by If-Range (§13.1.5), into one verdict.
//!
//! The order, exactly: If-Match (strong comparison) false → 412; else, without If-Match,
//! If-Unmodified-Since false → 412; then If-None-Match (weak comparison) false → 304 for GET and
//! HEAD, 412 for other methods; else, without If-None-Match and for GET or HEAD only,
//! If-Modified-Since false → 304; then, for GET only, a Range is honoured when there is no
//! If-Range or If-Range matches (a strong entity-tag comparison, or a date equal to the
//! file's Last-Modified). An invalid date in If-Modified-Since, If-Unmodified-Since or If-Range is
//! ignored (§13.1.3, §13.1.4) or, in If-Range, does not match (§13.1.5).

use super::date;
use super::etag::{self, Comparison, Etag};
use super::range::{self, RangeOutcome, Ranges};

/// The request's method, as far as conditionals care (§13.2.1, §14.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// GET: the only method with ranges; a failed If-None-Match or If-Modified-Since is 304.
    Get,
    /// HEAD: as GET without ranges.
    Head,
    /// Any other method: a failed If-None-Match is 412; If-Modified-Since is ignored.
    Other,
}

/// The request's conditional fields, raw (`None`: absent). A repeated field is joined with `, `
/// by the caller, as a list field's members are (an If-Modified-Since so joined is then invalid,
/// and ignored, as §13.1.3 says).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Conditions<'a> {
    /// `If-Match`.
    pub if_match: Option<&'a [u8]>,
    /// `If-None-Match`.
    pub if_none_match: Option<&'a [u8]>,
    /// `If-Modified-Since`.
    pub if_modified_since: Option<&'a [u8]>,
    /// `If-Unmodified-Since`.
    pub if_unmodified_since: Option<&'a [u8]>,
    /// `If-Range`.
    pub if_range: Option<&'a [u8]>,
    /// `Range`.
    pub range: Option<&'a [u8]>,
    /// The most ranges served in one response (the `max_ranges` setting; 0: ranges off).
    pub max_ranges: usize,
    /// The time the request is answered, seconds since the epoch (the century of an RFC 850
    /// date, §5.6.7).
    pub now_s: i64,
}

/// What the file server knows of the selected representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Representation {
    /// Its strong entity tag ([`etag::strong`]).
    pub etag: Etag,
    /// Its `Last-Modified`, seconds since the epoch (the modification time's whole seconds).
    pub last_modified_s: i64,
    /// Its length in bytes.
    pub size: u64,
}

/// The response to give.
// The ranges live on the stack by design (no allocation per request); the value is made once
// per request and moved once, so its 272 bytes cost nothing a Box would save.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// 200 with the whole representation (or, for HEAD, its fields).
    Full,
    /// 206 with these parts.
    Partial(Ranges),
    /// 416, with `Content-Range: bytes */SIZE` ([`range::unsatisfied`]).
    RangeNotSatisfiable,
    /// 304, with the fields a 200 would carry among ETag, Last-Modified, Cache-Control, Expires,
    /// Vary and Content-Location, and no body (§15.4.5).
    NotModified,
    /// 412 Precondition Failed.
    PreconditionFailed,
}

/// Evaluates a request's conditionals and Range against a representation, in RFC 9110 §13.2.2's
/// order (see the module's documentation).
pub fn evaluate(req: &Conditions<'_>, rep: &Representation, method: Method) -> Verdict {
    let tag = rep.etag.tag();
    if let Some(v) = req.if_match {
        if !etag::list_matches(v, tag, Comparison::Strong) {
            return Verdict::PreconditionFailed;
        }
    } else if let Some(since) = req
        .if_unmodified_since
        .and_then(|v| date::parse(v, req.now_s))
    {
        if rep.last_modified_s > since {
            return Verdict::PreconditionFailed;
        }
    }
    let get_or_head = matches!(method, Method::Get | Method::Head);
    if let Some(v) = req.if_none_match {
        if etag::list_matches(v, tag, Comparison::Weak) {
            return match get_or_head {
                true => Verdict::NotModified,
                false => Verdict::PreconditionFailed,
            };
        }
    } else if get_or_head {
        let since = req
            .if_modified_since
            .and_then(|v| date::parse(v, req.now_s));
        if since.is_some_and(|since| rep.last_modified_s <= since) {
            return Verdict::NotModified;
        }
    }
    match (method, req.range) {
        (Method::Get, Some(r))
            if req
                .if_range
                .is_none_or(|v| if_range_matches(v, rep, req.now_s)) =>
        {
            match range::parse(r, rep.size, req.max_ranges) {
                RangeOutcome::Full => Verdict::Full,
                RangeOutcome::Partial(p) => Verdict::Partial(p),
                RangeOutcome::Unsatisfiable => Verdict::RangeNotSatisfiable,
            }
        }
        _ => Verdict::Full,
    }
}

/// Whether an If-Range value matches (§13.1.5): an entity tag by strong comparison (a weak tag
/// never matches), or an HTTP-date equal to the Last-Modified the file would be sent with. Quill's
/// Last-Modified is a strong validator only to the second; the entity tag, to the nanosecond, is
/// the better validator and the one a client sends when it has both.
fn if_range_matches(value: &[u8], rep: &Representation, now_s: i64) -> bool {
    let v = super::trim(value);
    if v.starts_with(b"\"") || v.starts_with(b"W/") {
        return etag::parse(v).is_some_and(|t| etag::strong_eq(t, rep.etag.tag()));
    }
    date::parse(v, now_s) == Some(rep.last_modified_s)
}

#[cfg(test)]
#[path = "precondition_tests.rs"]
mod tests;
