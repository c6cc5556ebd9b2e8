//! Diagnostics (tracing on stderr) and the access log: one line per session, Pen's fields first
//! (client, time, server), then bytes each way, duration and how the session ended.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, Registry};

use crate::config::LogFormat;
use crate::metrics::End;

/// A JSON string literal (quotes and escapes) for `s`.
pub fn json_string(s: &str) -> String {
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
pub fn init(debug: u8) {
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
pub fn set_level(debug: u8) {
    if let Some(handle) = LEVEL.get() {
        if let Err(e) = handle.modify(|f| *f = level_for(debug)) {
            tracing::warn!("cannot change the log level: {e}");
        }
    }
}

/// One finished session, as the access log records it.
pub struct Entry<'a> {
    pub client_ip: &'a dyn std::fmt::Display,
    pub unix_time: u64,
    pub server: Option<&'a dyn std::fmt::Display>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub duration_ms: u64,
    pub end: End,
}

/// A worker's handle on the access log file: buffered, flushed once per event-loop turn, and
/// reopened (same path) after `SIGHUP` so log rotation works.
pub struct AccessLog {
    path: PathBuf,
    out: BufWriter<File>,
    format: LogFormat,
    generation: u64,
}

impl AccessLog {
    pub fn open(path: &Path, format: LogFormat, generation: u64) -> io::Result<AccessLog> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(AccessLog::new(path, file, format, generation))
    }

    /// Wraps a file already opened (before a chroot or privilege drop) at `path`.
    pub fn new(path: &Path, file: File, format: LogFormat, generation: u64) -> AccessLog {
        AccessLog {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(32 * 1024, file),
            format,
            generation,
        }
    }

    /// The log generation this file belongs to.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Reopens the file if the log generation moved on (a `SIGHUP` happened).
    pub fn reopen_if(&mut self, generation: u64) {
        if generation == self.generation {
            return;
        }
        let _ = self.out.flush();
        match AccessLog::open(&self.path, self.format, generation) {
            Ok(fresh) => *self = fresh,
            Err(e) => {
                tracing::warn!("cannot reopen access log {}: {e}", self.path.display());
                self.generation = generation;
            }
        }
    }

    pub fn write(&mut self, e: &Entry<'_>) {
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
        let _ = writeln!(
            self.out,
            "{} {} {} {} {} {}.{:03} {}",
            e.client_ip,
            e.unix_time,
            server,
            e.bytes_in,
            e.bytes_out,
            e.duration_ms / 1000,
            e.duration_ms % 1000,
            e.end.name()
        );
    }

    pub fn flush(&mut self) {
        if !self.out.buffer().is_empty() {
            let _ = self.out.flush();
        }
    }
}
