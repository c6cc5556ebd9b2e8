//! Durations as people write them (`30`, `500ms`, `2s`, `5m`, `1h`), parsed and formatted back:
//! one grammar for the command line, the configuration file, the control language and `quill bench`.

use std::time::Duration;

/// The longest duration any setting takes: 30 days. Longer is a typo (`timeout 18446744073709551`
/// would never time out), and every duration then fits the tracking table's 32-bit seconds.
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);
/// Parses a duration: a bare number is seconds (as Pen), or a number followed by ms, s, m or h.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let bad = || format!("invalid duration '{s}' (expected e.g. 30, 500ms, 2s, 5m, 1h)");
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let ms = match unit {
        "" | "s" => n.checked_mul(1000),
        "ms" => Some(n),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => None,
    };
    let d = ms.map(Duration::from_millis).ok_or_else(bad)?;
    if d > MAX_DURATION {
        return Err(format!("invalid duration '{s}': at most 30 days (720h)"));
    }
    Ok(d)
}

/// Formats a duration the way `parse_duration` reads it back.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0 => "0s".to_string(),
        _ if ms.is_multiple_of(3_600_000) => format!("{}h", ms / 3_600_000),
        _ if ms.is_multiple_of(60_000) => format!("{}m", ms / 60_000),
        _ if ms.is_multiple_of(1000) => format!("{}s", ms / 1000),
        _ => format!("{ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_back_as_they_were_written() {
        for d in [0, 1, 999, 1000, 60_000, 90_000, 3_600_000] {
            let d = Duration::from_millis(d);
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert!(parse_duration("721h").is_err());
        assert!(parse_duration("10 minutes").is_err());
    }
}
