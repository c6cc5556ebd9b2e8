//! Diagnostics (tracing on stderr) and the access log: one line per session, Pen's fields first
//! (client, time, server), then bytes each way, duration and how the session ended. A field that
//! can carry any byte (a Unix server path) is escaped, so one session is always one line of
//! space-separated fields (text) or one JSON object (json).

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::OnceLock;

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, Registry};

use crate::config::LogFormat;
use crate::metrics::End;

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

/// A worker's handle on the access log file: buffered, flushed once per event-loop turn. Log
/// rotation (SIGUSR2, `reopen`, a reload) moves the log generation on; the worker then opens a
/// fresh handle at the same path.
pub(crate) struct AccessLog {
    out: BufWriter<File>,
    format: LogFormat,
    generation: u64,
    /// One text line being built (kept to reuse its allocation).
    line: String,
}

impl AccessLog {
    pub(crate) fn open(path: &Path, format: LogFormat, generation: u64) -> io::Result<AccessLog> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(AccessLog::new(file, format, generation))
    }

    /// Wraps a file already opened (before a chroot or privilege drop).
    pub(crate) fn new(file: File, format: LogFormat, generation: u64) -> AccessLog {
        AccessLog {
            out: BufWriter::with_capacity(32 * 1024, file),
            format,
            generation,
            line: String::new(),
        }
    }

    /// The log generation this file belongs to.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
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
    fn text_access_log_escapes_newlines_and_escape_bytes() {
        assert_eq!(field("/run/app.sock"), "x /run/app.sock");
        assert_eq!(field("127.0.0.1:80"), "x 127.0.0.1:80");
        assert_eq!(field("/tmp/a\nb"), "x /tmp/a\\nb");
        assert_eq!(field("/tmp/\x1b[31mred"), "x /tmp/\\x1b[31mred");
        assert_eq!(field("a b\tc\rd\x7f\x00"), "x a\\x20b\\tc\\rd\\x7f\\x00");
        assert_eq!(field("back\\slash é"), "x back\\\\slash\\x20é");
    }

    #[test]
    fn a_hostile_server_path_stays_one_line_of_seven_fields() {
        let dir = std::env::temp_dir().join(format!("quill-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("access.log");
        let mut log = AccessLog::open(&path, LogFormat::Text, 0).unwrap();
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
