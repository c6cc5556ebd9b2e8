//! The small grammars of setting values shared by the command line, TOML and the control
//! language: health check kinds and status ranges, `dsr_wait`, rates and route
//! patterns (`proxy_protocol`'s words are `settings`'). Each returns a one-line message naming the bad text.

use std::time::Duration;

use super::bounds::{parse_duration, DSR_WAIT_MS, MAX_RATE};
use super::health::CheckKind;

/// Parses `tcp` or `http:/path` (the `--check` option and the `check` command).
pub(crate) fn parse_check_kind(s: &str) -> Result<CheckKind, String> {
    match s {
        "tcp" => Ok(CheckKind::Tcp),
        "udp" => Ok(CheckKind::Udp {
            send: String::new(),
            expect: String::new(),
        }),
        _ if s.starts_with("udp:") => Ok(CheckKind::Udp {
            send: s["udp:".len()..].to_string(),
            expect: String::new(),
        }),
        _ => match s.strip_prefix("http:").or(s.strip_prefix("http")) {
            Some(path) => {
                let path = if path.is_empty() { "/" } else { path };
                validate_check_path(path)?;
                Ok(CheckKind::Http {
                    path: path.to_string(),
                    expect: (200, 399),
                })
            }
            None => Err(format!(
                "invalid check '{s}' (expected tcp, http:/path or udp:DATAGRAM)"
            )),
        },
    }
}

/// Checks an HTTP health check's path: it starts with `/` and holds no space or control byte
/// (it is sent as is in the request line).
pub(crate) fn validate_check_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(format!("invalid check path '{path}' (expected /path)"));
    }
    Ok(())
}

/// Parses a status range `200-399` or a single status `200`.
pub(crate) fn parse_status_range(s: &str) -> Result<(u16, u16), String> {
    let bad = || format!("invalid status range '{s}' (expected e.g. 200-399)");
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let a: u16 = a.trim().parse().map_err(|_| bad())?;
    let b: u16 = b.trim().parse().map_err(|_| bad())?;
    if !(100..=599).contains(&a) || !(a..=599).contains(&b) {
        return Err(bad());
    }
    Ok((a, b))
}

/// Parses `dsr_wait`'s value: a bare number is milliseconds (Pen-style `dsr_wait MS`), or a
/// duration with a unit (`2ms`, `1s`); whole milliseconds within [`DSR_WAIT_MS`].
pub(crate) fn parse_dsr_wait(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let d = if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        t.parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| format!("dsr_wait: '{t}' is not a number of milliseconds"))?
    } else {
        parse_duration(t).map_err(|_| {
            format!("dsr_wait: '{t}' is not a number of milliseconds (e.g. 2 or 2ms)")
        })?
    };
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if !DSR_WAIT_MS.contains(&ms) {
        return Err(format!(
            "dsr_wait: '{t}' is out of range ({} to {} ms)",
            DSR_WAIT_MS.start(),
            DSR_WAIT_MS.end()
        ));
    }
    Ok(d)
}

/// The largest compiled size of one route pattern (regex's own measure), so that no pattern can
/// make a reload allocate without limit.
const MAX_PATTERN_SIZE: usize = 1 << 20;

/// Compiles a `path_regex` or header `regex` as routes use it: on bytes, without Unicode classes
/// (`.` is any byte, `(?i)` folds ASCII), found anywhere unless anchored with `^` / `$`. Linear
/// time in the input whatever the pattern (no backtracking).
pub(crate) fn compile_pattern(p: &str) -> Result<regex::bytes::Regex, String> {
    regex::bytes::RegexBuilder::new(p)
        .unicode(false)
        .size_limit(MAX_PATTERN_SIZE)
        .build()
        .map_err(|e| {
            let why = e.to_string();
            // regex's messages span lines (the pattern with a caret under it): keep the last.
            let last = why
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            format!(
                "invalid regex '{}': {}",
                p.escape_debug(),
                last.trim().trim_start_matches("error: ")
            )
        })
}

/// Parses `N/s`, `N/m` or `N/h` (also `N/sec`, `N/min`, `N/hour`, `N/second`, `N/minute`).
pub(crate) fn parse_rate(s: &str) -> Result<(u32, Duration), String> {
    let bad = || {
        format!(
            "invalid rate '{}' (expected e.g. \"100/s\", \"30/m\", \"500/h\")",
            s.escape_debug()
        )
    };
    let (n, unit) = s.split_once('/').ok_or_else(bad)?;
    let n: u32 = n.trim().parse().map_err(|_| bad())?;
    let period = match unit.trim() {
        "s" | "sec" | "second" => Duration::from_secs(1),
        "m" | "min" | "minute" => Duration::from_secs(60),
        "h" | "hour" => Duration::from_secs(3600),
        _ => return Err(bad()),
    };
    if n == 0 || n > MAX_RATE {
        return Err(format!("rate '{s}': the count must be 1 to {MAX_RATE}"));
    }
    Ok((n, period))
}
