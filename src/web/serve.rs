//! What a static root answers to a request (docs/web.md#what-a-request-gets), decided from the
//! request's method, path and fields and what the file cache says is there: the file (whole, a
//! range, several ranges, a precompressed sibling), 304 or 412 by the preconditions, 416, a
//! redirect to the directory's slash, an index file, a listing, or an error status.
//!
//! The order of RFC 9110: the method (405 with `Allow`), the path (400 when it has no file form,
//! 404 for a hidden name), the file (301, 403, 404), the representation (`Accept-Encoding`), the
//! preconditions (§13.2.2), then `Range` (§14.2).

use std::sync::Arc;

use quill_core::files::coding::{self, Coding};
use quill_core::files::{multipart, precondition, range};
use quill_core::http1::path;
use quill_core::http1::Method;

use super::cache::{FileCache, Found, Lookup, Rep};
use super::head::Head;
use super::send::Sending;
use super::{dir, listing};
use crate::log::Served;
use crate::proxy::copy::Buf;
use crate::route::StaticRoot;

/// The request as a static root reads it.
pub(crate) struct Request<'a> {
    pub method: Method,
    /// The request target as sent (path and query).
    pub target: &'a [u8],
    /// The value of a request field by lower-case name (repeated fields joined by `, `).
    pub field: &'a dyn Fn(&[u8]) -> Option<&'a [u8]>,
    pub keep_alive: bool,
    /// Seconds since the epoch now (RFC 850 dates' century).
    pub now_s: i64,
}

/// The answer: its status, what goes out, and what the access log says was served.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: u16,
    pub sending: Sending,
    /// What a 206 serves (the access log's range).
    pub range: Option<Served>,
}

/// The most entries a listing shows.
const MAX_LISTING: usize = 10_000;

/// Answers `req` from `root`. `out` is the pooled buffer the head is written into; `date` the
/// current `Date` value; `boundary` a random number for a multipart boundary.
pub(crate) fn answer(
    root: &StaticRoot,
    req: &Request,
    cache: &mut FileCache,
    now_ms: u64,
    date: &[u8],
    out: Buf,
    boundary: u64,
) -> Answer {
    let head = Head::new(out, date, req.keep_alive, req.method == Method::Head);
    if !matches!(req.method, Method::Get | Method::Head) {
        return head.status_only(405, &[(b"Allow", b"GET, HEAD")]);
    }
    let raw = path::target_path(req.target);
    let mut buf = vec![0u8; raw.len()];
    let Ok(n) = path::file_path(raw, &mut buf) else {
        return head.status_only(400, &[]);
    };
    buf.truncate(n);
    let file = buf;
    if !root.action.dotfiles && path::hidden_segment(&file) {
        return head.status_only(404, &[]);
    }
    let dir_asked = file.ends_with(b"/");
    let rel = file.trim_start_matches_slash();
    match cache.lookup(root, rel.trim_end_slash(), now_ms) {
        Lookup::File(found) if !dir_asked => serve(&found, req, head, boundary, root),
        Lookup::File(_) => head.status_only(404, &[]),
        Lookup::Dir if !dir_asked => {
            let mut location = encode_path(&file);
            location.push(b'/');
            if let Some(q) = query(req.target) {
                location.push(b'?');
                location.extend_from_slice(q);
            }
            head.status_only(301, &[(b"Location", &location)])
        }
        Lookup::Dir => directory(root, rel, &file, req, cache, now_ms, head, boundary),
        Lookup::Missing => match &root.action.fallback {
            Some(f) => {
                let rel = f.as_bytes().trim_start_matches_slash();
                match cache.lookup(root, rel, now_ms) {
                    Lookup::File(found) => serve(&found, req, head, boundary, root),
                    _ => head.status_only(404, &[]),
                }
            }
            None => head.status_only(404, &[]),
        },
    }
}

/// A directory asked for with its slash: its first index file, else its listing, else 403.
#[allow(clippy::too_many_arguments)]
fn directory(
    root: &StaticRoot,
    rel: &[u8],
    file: &[u8],
    req: &Request,
    cache: &mut FileCache,
    now_ms: u64,
    head: Head,
    boundary: u64,
) -> Answer {
    for index in &root.action.index {
        let mut p = rel.to_vec();
        if !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(index.as_bytes());
        if let Lookup::File(found) = cache.lookup(root, &p, now_ms) {
            return serve(&found, req, head, boundary, root);
        }
    }
    if !root.action.listing {
        return head.status_only(403, &[]);
    }
    let json = (req.field)(b"accept").is_some_and(|a| {
        let a = a.to_ascii_lowercase();
        a.windows(16).any(|w| w == b"application/json")
    });
    let Ok(mut entries) = dir::read(root, rel, MAX_LISTING) else {
        return head.status_only(403, &[]);
    };
    if !root.action.dotfiles {
        entries.retain(|e| !e.name.starts_with(b"."));
    }
    let mut body = Vec::new();
    let content_type: &[u8] = if json {
        listing::json(&mut entries, &mut body);
        b"application/json"
    } else {
        listing::html(file, &mut entries, &mut body);
        b"text/html; charset=utf-8"
    };
    head.with_body(200, content_type, &body, &[(b"Vary", b"Accept")])
}

/// A file: the representation the client accepts, then its preconditions and ranges.
fn serve(
    found: &Arc<Found>,
    req: &Request,
    head: Head,
    boundary: u64,
    root: &StaticRoot,
) -> Answer {
    let ranged = (req.field)(b"range");
    // A range is of the identity representation only (a client that resumes a download must
    // get the same bytes whatever it now accepts).
    let chosen = match ((req.field)(b"accept-encoding"), ranged) {
        (Some(accept), None) if !found.variants.is_empty() => {
            let mut available = [Coding::Gzip; 3];
            let n = found.variants.len().min(3);
            for (slot, (c, _)) in available.iter_mut().zip(&found.variants) {
                *slot = *c;
            }
            coding::choose(accept, &available[..n])
                .and_then(|c| found.variants.iter().find(|(v, _)| *v == c))
        }
        _ => None,
    };
    let (rep, encoding) = match chosen {
        Some((c, r)) => (r, Some(c.token())),
        None => (&found.identity, None),
    };
    let mut fields: Vec<(&[u8], &[u8])> = Vec::with_capacity(8);
    fields.push((b"Last-Modified", &rep.last_modified));
    fields.push((b"ETag", rep.etag.as_bytes()));
    if !found.variants.is_empty() {
        fields.push((b"Vary", b"Accept-Encoding"));
    }
    if let Some(cc) = &root.action.cache_control {
        fields.push((b"Cache-Control", cc.as_bytes()));
    }
    let conditions = precondition::Conditions {
        if_match: (req.field)(b"if-match"),
        if_none_match: (req.field)(b"if-none-match"),
        if_modified_since: (req.field)(b"if-modified-since"),
        if_unmodified_since: (req.field)(b"if-unmodified-since"),
        if_range: (req.field)(b"if-range"),
        range: ranged,
        max_ranges: root.action.max_ranges as usize,
        now_s: req.now_s,
    };
    let representation = precondition::Representation {
        etag: rep.etag,
        last_modified_s: rep.mtime,
        size: rep.size,
    };
    let method = match req.method {
        Method::Get => precondition::Method::Get,
        Method::Head => precondition::Method::Head,
        _ => precondition::Method::Other,
    };
    let verdict = precondition::evaluate(&conditions, &representation, method);
    if matches!(verdict, precondition::Verdict::NotModified) {
        return head.status_only(304, &fields);
    }
    if let Some(e) = encoding {
        fields.push((b"Content-Encoding", e.as_bytes()));
    }
    let mime = found.mime.as_bytes();
    match verdict {
        precondition::Verdict::PreconditionFailed => head.status_only(412, &[]),
        precondition::Verdict::RangeNotSatisfiable => {
            let cr = range::unsatisfied(rep.size);
            fields.push((b"Content-Range", cr.as_bytes()));
            head.status_only(416, &fields)
        }
        precondition::Verdict::Partial(set) => ranges(rep, &set, mime, &fields, head, boundary),
        _ => {
            // Said on the whole file only (a 206 or 416 shows ranges are served), as nginx does.
            fields.push((b"Accept-Ranges", b"bytes"));
            let mut a = head.file(200, mime, rep.size, &fields, rep.clone());
            a.sending.file(0, rep.size);
            a
        }
    }
}

/// A 206: one range with `Content-Range`, several as `multipart/byteranges` whose length is
/// known before the first byte.
fn ranges(
    rep: &Arc<Rep>,
    set: &range::Ranges,
    mime: &[u8],
    fields: &[(&[u8], &[u8])],
    head: Head,
    boundary: u64,
) -> Answer {
    if let [r] = set.as_slice() {
        let cr = range::content_range(*r, rep.size);
        let mut fields = fields.to_vec();
        fields.push((b"Content-Range", cr.as_bytes()));
        let mut a = head.file(206, mime, r.len(), &fields, rep.clone());
        a.sending.file(r.start, r.end + 1);
        a.range = (a.status == 206).then_some(Served::Bytes {
            first: r.start,
            last: r.end,
            size: rep.size,
        });
        return a;
    }
    let b = multipart::Boundary::from_u64(boundary);
    let total = multipart::total_len(set, mime, rep.size);
    let ct = b.content_type();
    let mut a = head.file(206, &ct, total, fields, rep.clone());
    a.range = (a.status == 206).then_some(Served::Multipart {
        parts: set.as_slice().len() as u32,
    });
    let mut part = Vec::new();
    for (i, r) in set.as_slice().iter().enumerate() {
        part.clear();
        multipart::write_part_head(&mut part, &b, i, mime, *r, rep.size);
        a.sending.extra(&part);
        a.sending.file(r.start, r.end + 1);
    }
    part.clear();
    multipart::write_closing(&mut part, &b);
    a.sending.extra(&part);
    a
}

/// The query of a request target, without its `?`.
fn query(target: &[u8]) -> Option<&[u8]> {
    let i = target.iter().position(|&b| b == b'?')?;
    Some(&target[i + 1..])
}

/// A decoded path percent-encoded again for a `Location` field: every byte that is not an
/// unreserved character, `/` or a sub-delimiter is escaped.
fn encode_path(p: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(p.len() + 8);
    for &b in p {
        let plain = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'/' | b'-'
                    | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'@'
            );
        if plain {
            out.push(b);
        } else {
            out.push(b'%');
            out.push(b"0123456789ABCDEF"[usize::from(b >> 4)]);
            out.push(b"0123456789ABCDEF"[usize::from(b & 15)]);
        }
    }
    out
}

/// Slash trimming on byte paths.
trait Slashes {
    fn trim_start_matches_slash(&self) -> &[u8];
    fn trim_end_slash(&self) -> &[u8];
}

impl Slashes for [u8] {
    fn trim_start_matches_slash(&self) -> &[u8] {
        self.strip_prefix(b"/").unwrap_or(self)
    }
    fn trim_end_slash(&self) -> &[u8] {
        self.strip_suffix(b"/").unwrap_or(self)
    }
}
