//! A directory's listing page, rendered: HTML for a browser, JSON for a program. Pure: the
//! caller reads the entries (`quill_core::sys::read_dir`) and sends the bytes.
//!
//! Names are bytes, not text: on the page a name is shown as UTF-8 with every invalid sequence
//! replaced by U+FFFD and HTML-escaped, and linked by its exact bytes percent-encoded (every byte
//! but the unreserved ones of RFC 3986 §2.3), so a name such as `<script>`, `a"b`, `x#y`, `p?q` or
//! `c:d` is shown as text and links to itself, never to markup, a fragment, a query or a scheme.
//! Directories come first, then files, each group by name (bytewise). Sizes are human-readable
//! on the page (powers of 1024) and exact in JSON; times are UTC, `YYYY-MM-DD HH:MM` on the page
//! and Unix seconds in JSON (a number a program compares without parsing a date).

/// One entry of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The name's bytes as the file system holds them.
    pub name: Vec<u8>,
    /// A directory (linked with a trailing `/`), or anything else (a file).
    pub dir: bool,
    /// Bytes, for a regular file; `None` for a directory or when unknown.
    pub size: Option<u64>,
    /// Last modification, Unix seconds, when known.
    pub mtime: Option<i64>,
}

/// Directories first, then by name, bytewise.
fn sort(entries: &mut [Entry]) {
    entries.sort_by(|a, b| b.dir.cmp(&a.dir).then_with(|| a.name.cmp(&b.name)));
}

/// Appends the HTML listing page of the directory at `url_path` (the request's decoded path,
/// shown in the title and heading) to `out`, with `entries` sorted in place. A `../` link leads
/// up, except at `/`.
pub(crate) fn html(url_path: &[u8], entries: &mut [Entry], out: &mut Vec<u8>) {
    sort(entries);
    out.extend_from_slice(b"<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n");
    out.extend_from_slice(b"<title>Index of ");
    html_text(url_path, out);
    out.extend_from_slice(b"</title>\n</head>\n<body>\n<h1>Index of ");
    html_text(url_path, out);
    out.extend_from_slice(
        b"</h1>\n<table>\n<tr><th>Name</th><th>Size</th><th>Modified</th></tr>\n",
    );
    if url_path != b"/" {
        out.extend_from_slice(b"<tr><td><a href=\"../\">../</a></td><td></td><td></td></tr>\n");
    }
    for entry in entries.iter() {
        html_row(entry, out);
    }
    out.extend_from_slice(b"</table>\n</body>\n</html>\n");
}

/// One row of the HTML table: link, size, time.
fn html_row(entry: &Entry, out: &mut Vec<u8>) {
    let slash: &[u8] = if entry.dir { b"/" } else { b"" };
    out.extend_from_slice(b"<tr><td><a href=\"");
    href(&entry.name, out);
    out.extend_from_slice(slash);
    out.extend_from_slice(b"\">");
    html_text(&entry.name, out);
    out.extend_from_slice(slash);
    out.extend_from_slice(b"</a></td><td>");
    match entry.size {
        Some(size) if !entry.dir => human_size(size, out),
        _ => out.push(b'-'),
    }
    out.extend_from_slice(b"</td><td>");
    if let Some(mtime) = entry.mtime {
        date_time(mtime, out);
    }
    out.extend_from_slice(b"</td></tr>\n");
}

/// `bytes` as text in HTML: invalid UTF-8 as U+FFFD, `&<>"'` as character references.
fn html_text(bytes: &[u8], out: &mut Vec<u8>) {
    for c in String::from_utf8_lossy(bytes).chars() {
        match c {
            '&' => out.extend_from_slice(b"&amp;"),
            '<' => out.extend_from_slice(b"&lt;"),
            '>' => out.extend_from_slice(b"&gt;"),
            '"' => out.extend_from_slice(b"&quot;"),
            '\'' => out.extend_from_slice(b"&#39;"),
            c => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
}

/// A name as one relative path segment: every byte but the unreserved ones percent-encoded
/// (so also `/`, `%`, `?`, `#`, `:` and every byte that HTML gives a meaning to in an attribute).
fn href(name: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in name {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

/// A size for people: bytes below 1 KiB (`512 B`), else one decimal in the largest power of
/// 1024 that fits, rounded (`1.5 KiB`, `20.0 MiB`).
fn human_size(size: u64, out: &mut Vec<u8>) {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if size < 1024 {
        out.extend_from_slice(format!("{size} B").as_bytes());
        return;
    }
    let mut unit = 0;
    while unit + 1 < UNITS.len() && size >= 1u64 << (10 * (unit + 2)) {
        unit += 1;
    }
    let div = 1u128 << (10 * (unit + 1));
    let mut tenths = (u128::from(size) * 10 + div / 2) / div;
    // Rounding up may reach the next unit (1023.96 KiB is 1.0 MiB, not 1024.0 KiB).
    if tenths >= 10240 && unit + 1 < UNITS.len() {
        unit += 1;
        tenths = (tenths + 512) / 1024;
    }
    let text = format!("{}.{} {}", tenths / 10, tenths % 10, UNITS[unit]);
    out.extend_from_slice(text.as_bytes());
}

/// Unix seconds as `YYYY-MM-DD HH:MM`, UTC.
fn date_time(secs: i64, out: &mut Vec<u8>) {
    let days = secs.div_euclid(86_400);
    let in_day = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let (hh, mm) = (in_day / 3600, in_day % 3600 / 60);
    out.extend_from_slice(format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}").as_bytes());
}

/// The proleptic Gregorian date (year, month 1-12, day 1-31) of a day counted from 1970-01-01.
/// Days are shifted to start 0000-03-01, so that the leap day ends a year; then the 400-year era
/// (146,097 days), the year of the era (365 days, plus one every 4 years but the 100th, plus one
/// the 400th) and the day of the year, counted from March, give the month by a line through the
/// month lengths (153 days per 5 months).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365], from March 1
    let mp = (5 * doy + 2) / 153; // [0, 11], March = 0
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Appends the JSON listing to `out`, with `entries` sorted in place: an array of objects
/// `{"name": string, "type": "file" | "directory", "size": number | null, "mtime": number | null}`,
/// `size` the exact byte count of a file, `mtime` Unix seconds.
pub(crate) fn json(entries: &mut [Entry], out: &mut Vec<u8>) {
    sort(entries);
    out.push(b'[');
    for (i, entry) in entries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"name\":");
        json_string(&entry.name, out);
        let kind: &[u8] = if entry.dir { b"directory" } else { b"file" };
        out.extend_from_slice(b",\"type\":\"");
        out.extend_from_slice(kind);
        out.extend_from_slice(b"\",\"size\":");
        json_number(entry.size.filter(|_| !entry.dir).map(i128::from), out);
        out.extend_from_slice(b",\"mtime\":");
        json_number(entry.mtime.map(i128::from), out);
        out.push(b'}');
    }
    out.extend_from_slice(b"]\n");
}

/// A number, or `null`.
fn json_number(n: Option<i128>, out: &mut Vec<u8>) {
    match n {
        Some(n) => out.extend_from_slice(n.to_string().as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
}

/// `bytes` as a JSON string (RFC 8259): invalid UTF-8 as U+FFFD; `"`, `\` and control characters
/// escaped, and `<`, `>`, `&`, U+2028 and U+2029 too, so the text is inert even where a browser
/// sniffs it as HTML or a script embeds it.
fn json_string(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for c in String::from_utf8_lossy(bytes).chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}') => {
                out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes());
            }
            c => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out.push(b'"');
}

#[cfg(test)]
#[path = "listing_tests.rs"]
mod tests;
