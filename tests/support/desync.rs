//! The `http_desync_guardian` corpus (159 request-smuggling cases, shipped in the crate's package
//! under `tests/`), read for the tests that send it through Quill: as HTTP/1 requests
//! (tests/http/safety.rs) and as HTTP/2 streams (tests/h2/proxy.rs). And the check that a
//! forwarded request is a normalised one.

use std::path::PathBuf;

/// One corpus case.
#[derive(Clone, Debug, Default)]
pub struct Case {
    pub file: String,
    pub name: String,
    pub uri: Vec<u8>,
    pub method: Vec<u8>,
    pub version: Vec<u8>,
    /// (name, value, tier of the header: Compliant, NonCompliant or Bad)
    pub headers: Vec<(Vec<u8>, Vec<u8>, String)>,
    /// Severe, Ambiguous, Acceptable or Compliant.
    pub tier: String,
}

/// The corpus directory: the crate's `tests/` in the cargo registry source dir.
pub fn corpus_dir() -> Result<PathBuf, String> {
    let mut homes = Vec::new();
    if let Ok(h) = std::env::var("CARGO_HOME") {
        homes.push(PathBuf::from(h));
    }
    if let Ok(h) = std::env::var("HOME") {
        homes.push(PathBuf::from(h).join(".cargo"));
    }
    for home in &homes {
        let src = home.join("registry").join("src");
        let Ok(indexes) = std::fs::read_dir(&src) else {
            continue;
        };
        for index in indexes.flatten() {
            let dir = index
                .path()
                .join("http_desync_guardian-0.1.3")
                .join("tests");
            if dir.join("severe.yaml").is_file() {
                return Ok(dir);
            }
        }
    }
    Err(format!(
        "http_desync_guardian-0.1.3/tests/ not found under registry/src/*/ of {homes:?}: \
         it is a dev-dependency, so `cargo fetch` (or any build of the tests) puts it there"
    ))
}

/// A scalar as the corpus writes it. Double-quoted: YAML escapes (`\xNN` is the byte NN, so
/// `"\xa0"` is one obs-text byte, the case's intent), single-quoted: `''` is a quote, plain: up to
/// a ` #` comment. Then, as the crate's own test harness does, backslash escapes left in the
/// text are read once more (a plain `/foo\t/bar` holds a tab).
pub fn scalar(text: &str) -> Vec<u8> {
    let t = text.trim();
    let mut out = Vec::new();
    if let Some(body) = t.strip_prefix('"') {
        let b = body.as_bytes();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'"' => break,
                b'\\' if i + 1 < b.len() => {
                    i += 1;
                    match b[i] {
                        b'x' => {
                            let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap();
                            out.push(u8::from_str_radix(hex, 16).unwrap());
                            i += 2;
                        }
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'0' => out.push(0),
                        b'\\' => out.push(b'\\'),
                        other => out.push(other),
                    }
                }
                c => out.push(c),
            }
            i += 1;
        }
    } else if let Some(body) = t.strip_prefix('\'') {
        let s = body.rsplit_once('\'').map_or(body, |(s, _)| s);
        out.extend_from_slice(s.replace("''", "'").as_bytes());
    } else {
        let s = t.split(" #").next().unwrap_or_default().trim();
        out.extend_from_slice(s.as_bytes());
    }
    unescape(&out)
}

/// The crate harness's second pass: `\x`, `\b`, `\f`, `\n`, `\r`, `\t`, `\C` = C.
pub fn unescape(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' || i + 1 >= b.len() {
            out.push(b[i]);
            i += 1;
            continue;
        }
        i += 1;
        match b[i] {
            b'x' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("3f");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 2;
            }
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            c => out.push(c),
        }
        i += 1;
    }
    out
}

/// Parses one corpus file. The format is a small, regular subset of YAML (a list of cases, each
/// with one-line scalars, a `headers` list of name/value/tier and an `expected` map), read here
/// line by line rather than with a YAML crate: one more dependency for ten files whose shape the
/// test checks (every case complete, 159 in all, the tier counts the crate documents).
pub fn parse_corpus(file: &str, text: &str) -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    let mut section = "";
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let indent = line.len() - trimmed.len();
        let (item, rest) = match trimmed.strip_prefix("- ") {
            Some(r) => (true, r),
            None => (false, trimmed),
        };
        let (key, value) = match rest.split_once(':') {
            Some((k, v)) if !k.trim().contains(' ') => (k.trim(), v),
            _ => ("", rest),
        };
        match (indent, item, key) {
            (0, true, "name") => {
                cases.push(Case {
                    file: file.to_string(),
                    name: String::from_utf8_lossy(&scalar(value)).into_owned(),
                    ..Case::default()
                });
                section = "";
            }
            (2, false, "uri") => cases.last_mut().unwrap().uri = scalar(value),
            (2, false, "method") => cases.last_mut().unwrap().method = scalar(value),
            (2, false, "version") => cases.last_mut().unwrap().version = scalar(value),
            (2, false, "headers") => section = "headers",
            (2, false, "expected") => section = "expected",
            (4, true, "name") if section == "headers" => {
                cases
                    .last_mut()
                    .unwrap()
                    .headers
                    .push((scalar(value), Vec::new(), String::new()));
            }
            (6, false, "value") if section == "headers" => {
                cases.last_mut().unwrap().headers.last_mut().unwrap().1 = scalar(value)
            }
            (6, false, "tier") if section == "headers" => {
                cases.last_mut().unwrap().headers.last_mut().unwrap().2 =
                    String::from_utf8_lossy(&scalar(value)).into_owned()
            }
            (4, false, "tier") if section == "expected" => {
                cases.last_mut().unwrap().tier =
                    String::from_utf8_lossy(&scalar(value)).into_owned()
            }
            (4, false, "reason") | (4, false, "required_message_items") | (6, true, _) => {}
            _ => panic!("{file}: unexpected corpus line {line:?}"),
        }
    }
    cases
}

/// The request bytes of a case: its request line, its header lines, `Host` (the corpus has none,
/// and 1.1 requires one), and a small body matching a plain Content-Length or a chunked coding,
/// so a forwarded request completes and the backend answers.
pub fn case_bytes(c: &Case) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&c.method);
    out.push(b' ');
    out.extend_from_slice(&c.uri);
    if !c.version.is_empty() {
        out.push(b' ');
        out.extend_from_slice(&c.version);
    }
    out.extend_from_slice(b"\r\n");
    let mut body = Vec::new();
    for (n, v, _) in &c.headers {
        out.extend_from_slice(n);
        out.extend_from_slice(b": ");
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
        let name = String::from_utf8_lossy(n).to_ascii_lowercase();
        let value = String::from_utf8_lossy(v).to_ascii_lowercase();
        if name == "transfer-encoding" && value.trim().ends_with("chunked") {
            body = b"0\r\n\r\n".to_vec();
        } else if name == "content-length" && body.is_empty() {
            // "1000,1000" is a list a proxy may fold into one value (RFC 9110 §8.6).
            let first = value.split(',').next().unwrap_or_default();
            if let Ok(n) = first.trim().parse::<usize>() {
                body = vec![b'x'; n.min(8 << 20)];
            }
        }
    }
    // Host last, so the case's first line follows the request line as the corpus wrote it (a
    // case whose first header name starts with a space is about exactly that).
    out.extend_from_slice(b"Host: corpus.test\r\n\r\n");
    out.extend_from_slice(&body);
    out
}

pub fn loaded_corpus() -> Vec<Case> {
    let dir = corpus_dir().unwrap_or_else(|e| panic!("{e}"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut all = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        all.extend(parse_corpus(&name, &text));
    }
    all
}

/// Whether forwarded bytes are a normalised request: (a) a head that parses strictly (with
/// Host), (b) with at most one framing field (`Content-Length` or `Transfer-Encoding`), and
/// (c) none of the case's non-compliant fields other than those two as it came (name compared
/// without case, value without the spaces around it). Framing fields are judged by (b): the
/// proxy regenerates them, so one clean field is the normalised form of a doubtful one.
pub fn normalised(c: &Case, got: &[u8]) -> Result<(), String> {
    let limits = quill_core::http1::Limits::default();
    let head = match quill_core::http1::parse_request(got, &limits) {
        Ok(Some(h)) => h,
        Ok(None) => return Err("an incomplete head".into()),
        Err(e) => return Err(format!("a head that does not parse strictly ({e:?})")),
    };
    let fields: Vec<(Vec<u8>, Vec<u8>)> = quill_core::http1::fields(got, head.len)
        .map(|f| {
            (
                f.name.of(got).to_ascii_lowercase(),
                f.value.of(got).to_vec(),
            )
        })
        .collect();
    let framing = fields
        .iter()
        .filter(|(n, _)| n == b"content-length" || n == b"transfer-encoding")
        .count();
    if framing > 1 {
        return Err(format!("{framing} framing fields"));
    }
    for (n, v, tier) in &c.headers {
        let name = n.to_ascii_lowercase();
        if tier == "Compliant" || name == b"content-length" || name == b"transfer-encoding" {
            continue;
        }
        let value = v.trim_ascii();
        if fields
            .iter()
            .any(|(fname, fvalue)| *fname == name && fvalue.as_slice() == value)
        {
            return Err(format!(
                "the {tier} field {}: {} as it came",
                String::from_utf8_lossy(n),
                String::from_utf8_lossy(value)
            ));
        }
    }
    Ok(())
}
