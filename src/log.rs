//! Diagnostics (tracing on stderr) and the access log: one line per session, Pen's fields first
//! (client, time, server), then bytes each way, duration and how the session ended. A field that
//! can carry any byte (a Unix server path) is escaped, so one session is always one line of
//! space-separated fields (text) or one JSON object (json).

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, Registry};

use crate::config::{Config, LogFormat};
use crate::metrics::{End, Source};

/// A JSON string literal (quotes and escapes) for `s`.
pub(crate) fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Appends `value` as one field of a text log line: control bytes (C0 and DEL), space and
/// backslash are escaped (`\n`, `\r`, `\t`, `\x1b`, `\x20`, `\\`), so a hostile path cannot
/// split the line, add fields or send terminal escapes to whoever reads the log.
pub(crate) fn push_text_field(out: &mut String, value: &dyn std::fmt::Display) {
    let start = out.len();
    let _ = write!(out, "{value}");
    if !out[start..]
        .bytes()
        .any(|b| b <= b' ' || b == 0x7f || b == b'\\')
    {
        return;
    }
    let raw = out.split_off(start);
    for c in raw.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\\' => out.push_str("\\\\"),
            c if c <= ' ' || c == '\x7f' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
}

/// Changes the diagnostic level at run time (`debug N`).
static LEVEL: OnceLock<reload::Handle<LevelFilter, Registry>> = OnceLock::new();

fn level_for(debug: u8) -> LevelFilter {
    match debug {
        0 => LevelFilter::INFO,
        1 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    }
}

/// Sets up human logs on stderr: info by default, debug with `-d`, trace with `-dd`. The level can
/// change later with [`set_level`]; disabled levels cost nothing at their call sites.
pub(crate) fn init(debug: u8) {
    let (filter, handle) = reload::Layer::new(level_for(debug));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(io::stderr)
        .with_target(false)
        .with_ansi(false);
    if tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .try_init()
        .is_ok()
    {
        let _ = LEVEL.set(handle);
    }
}

/// Sets the diagnostic level (`debug N` over the control socket or a reload).
pub(crate) fn set_level(debug: u8) {
    if let Some(handle) = LEVEL.get() {
        if let Err(e) = handle.modify(|f| *f = level_for(debug)) {
            tracing::warn!("cannot change the log level: {e}");
        }
    }
}

/// One finished session, as the access log records it.
pub(crate) struct Entry<'a> {
    pub client_ip: &'a dyn std::fmt::Display,
    pub unix_time: u64,
    pub server: Option<&'a dyn std::fmt::Display>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub duration_ms: u64,
    pub end: End,
}

/// One HTTP request, as the access log records it on an HTTP listener.
pub(crate) struct HttpEntry<'a> {
    pub client_ip: &'a dyn std::fmt::Display,
    pub unix_time: u64,
    /// The request line, Host, Referer, User-Agent and X-Request-ID as received, one after the
    /// other, with their lengths in `lens` (empty when the request could not be read).
    pub text: &'a [u8],
    pub lens: [u16; 5],
    /// The request id Quill sent when the request had none (empty if none).
    pub generated_id: &'a [u8],
    /// 0 when no response was sent.
    pub status: u16,
    /// Who made the response (a server, a static root, FastCGI, CGI or Quill itself).
    pub source: Source,
    /// The range a 206 served, if it was a file's.
    pub range: Option<Served>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub server: Option<&'a dyn std::fmt::Display>,
    /// The route the request matched (None: the listener's own servers, or no request).
    pub route: Option<&'a str>,
    pub connect_us: Option<u64>,
    pub first_byte_us: Option<u64>,
    pub total_us: u64,
    pub end: End,
    /// The subject of the client's verified TLS certificate (mTLS), if any.
    pub client_cert: Option<&'a str>,
}

/// What a 206 served: one byte range of a representation (`Content-Range`'s value), or several
/// as a `multipart/byteranges` body of this many parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Served {
    Bytes { first: u64, last: u64, size: u64 },
    Multipart { parts: u32 },
}

impl Served {
    /// `bytes 0-99/1000` or `multipart 3` (JSON); with `sep` `=` for the text line, where a
    /// field has no space.
    fn write(self, out: &mut String, sep: char) {
        let _ = match self {
            Served::Bytes { first, last, size } => write!(out, "bytes{sep}{first}-{last}/{size}"),
            Served::Multipart { parts } => write!(out, "multipart{sep}{parts}"),
        };
    }
}

impl HttpEntry<'_> {
    /// Field `i` of `text` (0 request line, 1 host, 2 referer, 3 user agent, 4 request id).
    fn part(&self, i: usize) -> &[u8] {
        let start: usize = self.lens[..i].iter().map(|&n| usize::from(n)).sum();
        let end = start + usize::from(self.lens[i]);
        self.text.get(start..end).unwrap_or_default()
    }

    /// The request id: the client's, or the one Quill made.
    fn request_id(&self) -> &[u8] {
        let theirs = self.part(4);
        if theirs.is_empty() {
            self.generated_id
        } else {
            theirs
        }
    }
}

/// Appends `bytes` inside double quotes: `"`, `\`, control bytes and bytes above 0x7e escaped
/// as `\xHH`, so a hostile request cannot split the line or forge fields; `"-"` when empty.
fn push_quoted(out: &mut String, bytes: &[u8]) {
    if bytes.is_empty() {
        // As Apache logs a missing field.
        out.push_str("\"-\"");
        return;
    }
    out.push('"');
    for &b in bytes {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            let _ = write!(out, "\\x{b:02x}");
        } else {
            out.push(b as char);
        }
    }
    out.push('"');
}

/// Milliseconds with three decimals, or `-`.
fn push_ms(out: &mut String, us: Option<u64>) {
    match us {
        Some(us) => {
            let _ = write!(out, "{}.{:03}", us / 1000, us % 1000);
        }
        None => out.push('-'),
    }
}

/// `[23/Nov/2026:14:09:20 +0000]` for a Unix time (UTC).
fn push_clf_time(out: &mut String, unix: u64) {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let _ = write!(
        out,
        "[{day:02}/{}/{year}:{:02}:{:02}:{:02} +0000]",
        MONTHS[(month - 1) as usize],
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    );
}

/// The access log files of a configuration, and which listener writes into which: each file
/// once, with its format. Every worker holds one handle per file (see [`AccessLog`]); the
/// controller replaces the plan when a change moves a listener's file, and every reopen (SIGUSR2,
/// `reopen`, a reload) makes the workers open each file again at its path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LogPlan {
    pub files: Vec<(PathBuf, LogFormat)>,
    /// Listener name and the index of its file (listeners that log nothing are absent).
    pub listeners: Vec<(String, u32)>,
    /// Listener name, the index of one of its sites (in its `[[listener.site]]` order) and the
    /// index of that site's own file (sites without a `log` are absent).
    pub sites: Vec<(String, u32, u32)>,
}

impl LogPlan {
    pub(crate) fn new(config: &Config) -> LogPlan {
        let mut plan = LogPlan::default();
        if let Some(path) = &config.global.log {
            // Opened even when every listener has its own (as before per-listener files), so
            // `log FILE` and a reopen behave alike either way.
            plan.files.push((path.clone(), config.global.log_format));
        }
        for l in &config.listeners {
            let Some(log) = config.listener_log(l) else {
                continue;
            };
            let i = plan.file((log.path, log.format));
            plan.listeners.push((l.name.clone(), i));
        }
        for l in &config.listeners {
            for (s, site) in l.sites.iter().enumerate() {
                if let Some(log) = config.site_log(l, site) {
                    let i = plan.file((log.path, log.format));
                    plan.sites.push((l.name.clone(), s as u32, i));
                }
            }
        }
        plan
    }

    /// The index of `entry` in `files`, added if it is new.
    fn file(&mut self, entry: (PathBuf, LogFormat)) -> u32 {
        let i = match self.files.iter().position(|f| *f == entry) {
            Some(i) => i,
            None => {
                self.files.push(entry);
                self.files.len() - 1
            }
        };
        i as u32
    }

    /// The index of the own file of site `site` of listener `listener`, if it has one.
    pub(crate) fn file_of_site(&self, listener: &str, site: u32) -> Option<u32> {
        self.sites
            .iter()
            .find(|(n, s, _)| *s == site && n == listener)
            .map(|&(_, _, i)| i)
    }

    /// The index of listener `name`'s file, if it logs.
    pub(crate) fn file_of(&self, name: &str) -> Option<u32> {
        self.listeners
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, i)| i)
    }
}

/// The access log files an HTTP session may write a request's line to, for one call into it:
/// the worker's open files, the plan they follow, and the session's listener's file. A request
/// served by a site with its own `log` goes to that site's file instead of the listener's.
pub(crate) struct Logs<'a> {
    pub files: &'a mut [Option<AccessLog>],
    pub plan: &'a LogPlan,
    /// The file of the session's listener (None: it logs nothing of its own).
    pub listener: Option<u32>,
}

impl Logs<'_> {
    /// Whether a line of this session may be written anywhere (its listener logs, or some
    /// site has its own file): when not, the request's text need not be kept.
    pub(crate) fn is_on(&self) -> bool {
        self.listener.is_some() || !self.plan.sites.is_empty()
    }

    /// The file for a request of listener `listener` served by its site `site` (None: by no
    /// site): the site's own file if it has one, else the listener's.
    pub(crate) fn for_request(
        &mut self,
        listener: &str,
        site: Option<u32>,
    ) -> Option<&mut AccessLog> {
        let own = site.and_then(|s| self.plan.file_of_site(listener, s));
        let i = own.or(self.listener)?;
        self.files.get_mut(i as usize)?.as_mut()
    }
}

/// A worker's handle on one access log file: buffered, flushed once per event-loop turn. Log
/// rotation (SIGUSR2, `reopen`, a reload) moves the log generation on; the worker then opens a
/// fresh handle at the same path.
pub(crate) struct AccessLog {
    out: BufWriter<File>,
    format: LogFormat,
    /// One text line being built (kept to reuse its allocation).
    line: String,
}

impl AccessLog {
    pub(crate) fn open(path: &Path, format: LogFormat) -> io::Result<AccessLog> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(AccessLog::new(file, format))
    }

    /// Wraps a file already opened (before a chroot or privilege drop).
    pub(crate) fn new(file: File, format: LogFormat) -> AccessLog {
        AccessLog {
            out: BufWriter::with_capacity(32 * 1024, file),
            format,
            line: String::new(),
        }
    }

    pub(crate) fn write(&mut self, e: &Entry<'_>) {
        let server: &dyn std::fmt::Display = e.server.unwrap_or(&"-");
        if self.format == LogFormat::Json {
            let server = e.server.map(|s| s.to_string());
            let _ = writeln!(
                self.out,
                "{{\"client\":{},\"time\":{},\"server\":{},\"bytes_in\":{},\"bytes_out\":{},\"duration_ms\":{},\"end\":\"{}\"}}",
                json_string(&e.client_ip.to_string()),
                e.unix_time,
                server.as_deref().map_or("null".to_string(), json_string),
                e.bytes_in,
                e.bytes_out,
                e.duration_ms,
                e.end.name()
            );
            return;
        }
        let line = &mut self.line;
        line.clear();
        push_text_field(line, e.client_ip);
        let _ = write!(line, " {} ", e.unix_time);
        push_text_field(line, server);
        let _ = writeln!(
            line,
            " {} {} {}.{:03} {}",
            e.bytes_in,
            e.bytes_out,
            e.duration_ms / 1000,
            e.duration_ms % 1000,
            e.end.name()
        );
        let _ = self.out.write_all(line.as_bytes());
    }

    /// One HTTP request: `text` is the Apache combined format followed by Quill's fields,
    /// `json` the same fields as one object (docs/observability.md#access-log).
    pub(crate) fn write_http(&mut self, e: &HttpEntry<'_>) {
        let line = &mut self.line;
        line.clear();
        let server = e.server.map(|s| s.to_string());
        let source = e.source.name();
        if self.format == LogFormat::Json {
            let text = |b: &[u8]| json_string(&String::from_utf8_lossy(b));
            let ms = |us: Option<u64>| {
                us.map_or("null".to_string(), |us| {
                    format!("{}.{:03}", us / 1000, us % 1000)
                })
            };
            let _ = writeln!(
                line,
                "{{\"client\":{},\"time\":{},\"request\":{},\"host\":{},\"status\":{},\"bytes_in\":{},\"bytes_out\":{},\"referer\":{},\"user_agent\":{},\"server\":{},\"route\":{},\"source\":\"{source}\",\"connect_ms\":{},\"first_byte_ms\":{},\"total_ms\":{},\"end\":\"{}\",\"request_id\":{},\"client_cert\":{},\"range\":{}}}",
                json_string(&e.client_ip.to_string()),
                e.unix_time,
                text(e.part(0)),
                text(e.part(1)),
                e.status,
                e.bytes_in,
                e.bytes_out,
                text(e.part(2)),
                text(e.part(3)),
                server.as_deref().map_or("null".to_string(), json_string),
                e.route.map_or("null".to_string(), json_string),
                ms(e.connect_us),
                ms(e.first_byte_us),
                ms(Some(e.total_us)),
                e.end.name(),
                text(e.request_id()),
                e.client_cert.map_or("null".to_string(), json_string),
                e.range.map_or("null".to_string(), |r| {
                    let mut v = String::from("\"");
                    r.write(&mut v, ' ');
                    v.push('"');
                    v
                }),
            );
        } else {
            push_text_field(line, e.client_ip);
            line.push_str(" - - ");
            push_clf_time(line, e.unix_time);
            line.push(' ');
            push_quoted(line, e.part(0));
            let _ = write!(line, " {} {} ", e.status, e.bytes_out);
            push_quoted(line, e.part(2));
            line.push(' ');
            push_quoted(line, e.part(3));
            line.push(' ');
            push_text_field(line, &server.as_deref().unwrap_or("-"));
            line.push(' ');
            push_text_field(line, &e.route.unwrap_or("-"));
            let _ = write!(line, " {source} ");
            push_ms(line, e.connect_us);
            line.push(' ');
            push_ms(line, e.first_byte_us);
            line.push(' ');
            push_ms(line, Some(e.total_us));
            let _ = write!(line, " {} ", e.end.name());
            push_quoted(line, e.request_id());
            if let Some(subject) = e.client_cert {
                // Only with a client certificate (mTLS): lines without one keep their fields.
                line.push(' ');
                push_quoted(line, subject.as_bytes());
            }
            if let Some(range) = e.range {
                // Only on a file's 206, last and unquoted (so never taken for the subject).
                line.push(' ');
                range.write(line, '=');
            }
            line.push('\n');
        }
        let _ = self.out.write_all(line.as_bytes());
    }

    pub(crate) fn flush(&mut self) {
        if !self.out.buffer().is_empty() {
            let _ = self.out.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(s: &str) -> String {
        let mut out = String::from("x ");
        push_text_field(&mut out, &s);
        out
    }

    #[test]
    fn clf_time_is_the_utc_date() {
        let mut s = String::new();
        push_clf_time(&mut s, 1_795_442_960);
        assert_eq!(s, "[23/Nov/2026:14:09:20 +0000]");
        s.clear();
        push_clf_time(&mut s, 951_782_400);
        assert_eq!(s, "[29/Feb/2000:00:00:00 +0000]");
    }

    #[test]
    fn quoted_fields_escape_quotes_and_control_bytes() {
        let mut s = String::new();
        push_quoted(&mut s, b"a\"b\n\xff");
        assert_eq!(s, r#""a\x22b\x0a\xff""#);
    }

    #[test]
    fn text_access_log_escapes_newlines_and_escape_bytes() {
        assert_eq!(field("/run/app.sock"), "x /run/app.sock");
        assert_eq!(field("127.0.0.1:80"), "x 127.0.0.1:80");
        assert_eq!(field("/tmp/a\nb"), "x /tmp/a\\nb");
        assert_eq!(field("/tmp/\x1b[31mred"), "x /tmp/\\x1b[31mred");
        assert_eq!(field("a b\tc\rd\x7f\x00"), "x a\\x20b\\tc\\rd\\x7f\\x00");
        assert_eq!(field("back\\slash é"), "x back\\\\slash\\x20é");
    }

    fn http_entry(source: Source, range: Option<Served>, cert: Option<&str>) -> HttpEntry<'_> {
        HttpEntry {
            client_ip: &"127.0.0.1",
            unix_time: 1_795_442_960,
            text: b"GET /a HTTP/1.1",
            lens: [15, 0, 0, 0, 0],
            generated_id: b"0123456789abcdef",
            status: 206,
            source,
            range,
            bytes_in: 0,
            bytes_out: 100,
            server: None,
            route: Some("files"),
            connect_us: None,
            first_byte_us: None,
            total_us: 0,
            end: End::Done,
            client_cert: cert,
        }
    }

    /// The lines `entries` make in `format`.
    fn http_lines(format: LogFormat, entries: &[HttpEntry<'_>]) -> Vec<String> {
        let dir =
            std::env::temp_dir().join(format!("quill-log-r-{}-{format:?}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("access.log");
        let mut log = AccessLog::open(&path, format).unwrap();
        for e in entries {
            log.write_http(e);
        }
        log.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        text.lines().map(String::from).collect()
    }

    #[test]
    fn the_source_and_a_files_range_end_the_line_told_apart_from_the_subject() {
        let one = Served::Bytes {
            first: 0,
            last: 99,
            size: 1000,
        };
        let parts = Served::Multipart { parts: 3 };
        let entries = [
            http_entry(Source::File, Some(one), None),
            http_entry(Source::File, Some(parts), Some("CN=a b")),
            http_entry(Source::Server, None, None),
            http_entry(Source::Quill, None, Some("CN=c")),
        ];
        let text = http_lines(LogFormat::Text, &entries);
        assert!(
            text[0].ends_with(" files file - - 0.000 done \"0123456789abcdef\" bytes=0-99/1000"),
            "{}",
            text[0]
        );
        assert!(
            text[1].ends_with(" \"0123456789abcdef\" \"CN=a b\" multipart=3"),
            "{}",
            text[1]
        );
        assert!(
            text[2].ends_with(" files server - - 0.000 done \"0123456789abcdef\""),
            "{}",
            text[2]
        );
        assert!(
            text[3].ends_with(" files quill - - 0.000 done \"0123456789abcdef\" \"CN=c\""),
            "{}",
            text[3]
        );
        let json = http_lines(LogFormat::Json, &entries);
        assert!(json[0].ends_with(",\"source\":\"file\",\"connect_ms\":null,\"first_byte_ms\":null,\"total_ms\":0.000,\"end\":\"done\",\"request_id\":\"0123456789abcdef\",\"client_cert\":null,\"range\":\"bytes 0-99/1000\"}"), "{}", json[0]);
        assert!(
            json[1].ends_with(",\"range\":\"multipart 3\"}"),
            "{}",
            json[1]
        );
        assert!(
            json[2].contains("\"source\":\"server\"") && json[2].ends_with(",\"range\":null}"),
            "{}",
            json[2]
        );
        assert!(json[3].contains("\"source\":\"quill\""), "{}", json[3]);
    }

    #[test]
    fn a_site_with_its_own_log_has_a_file_of_the_plan() {
        let text = "log = \"/tmp/all.log\"\n\
            [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:1\"\nprotocol = \"http\"\n\
            [[listener.site]]\nnames = [\"a\"]\nlog = \"/tmp/a.log\"\n[[listener.site.route]]\nrespond = {}\n\
            [[listener.site]]\nnames = [\"b\"]\n[[listener.site.route]]\nrespond = {}\n\
            [[listener.site]]\nnames = [\"c\"]\nlog = \"/tmp/all.log\"\n[[listener.site.route]]\nrespond = {}\n";
        let config = crate::config::from_toml("/tmp/c.toml", text, &Default::default()).unwrap();
        let plan = LogPlan::new(&config);
        assert_eq!(plan.files.len(), 2, "{plan:?}");
        assert_eq!(plan.files[1].0, Path::new("/tmp/a.log"));
        assert_eq!(plan.file_of("web"), Some(0));
        assert_eq!(plan.file_of_site("web", 0), Some(1));
        assert_eq!(plan.file_of_site("web", 1), None, "the listener's file");
        assert_eq!(plan.file_of_site("web", 2), Some(0), "one file, once");
        assert_eq!(plan.file_of_site("other", 0), None);
    }

    #[test]
    fn a_hostile_server_path_stays_one_line_of_seven_fields() {
        let dir = std::env::temp_dir().join(format!("quill-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("access.log");
        let mut log = AccessLog::open(&path, LogFormat::Text).unwrap();
        let server = "/tmp/evil\n127.0.0.9 1 x 0 0 0.000 done\x1b]0;owned\x07.sock";
        for _ in 0..2 {
            log.write(&Entry {
                client_ip: &"127.0.0.1",
                unix_time: 1,
                server: Some(&server),
                bytes_in: 2,
                bytes_out: 3,
                duration_ms: 4,
                end: End::Done,
            });
        }
        log.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(text.lines().count(), 2, "{text:?}");
        for line in text.lines() {
            assert_eq!(line.split(' ').count(), 7, "{line:?}");
            assert!(!line.contains('\x1b') && !line.contains('\x07'), "{line:?}");
        }
    }
}
