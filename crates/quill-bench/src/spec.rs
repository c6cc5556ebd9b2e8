//! The small languages of `quill bench`'s command line that are not URLs: concurrency sweeps
//! (`--sweep`) and named targets (`--target NAME=URL`; the URL itself is `target::parse_target`'s).
//! Parsing never panics; every error names the value it refused.

use super::target::{self, Target};

/// The most concurrency levels one `--sweep` may ask for: each is a full measurement.
pub(crate) const MAX_SWEEP_POINTS: usize = 1000;

/// The longest target name `--target` accepts (it becomes a table column and a legend entry).
pub(crate) const MAX_NAME_LEN: usize = 64;

/// Parses `--sweep`: the concurrency levels to measure, in order.
///
/// Three forms:
/// - `START:END:STEP`: START, START+STEP, … up to END. END is inclusive and is always the last
///   level: when it is not on the step grid it is appended, so `50:120:50` gives 50, 100, 120.
/// - a single level: `500`;
/// - a comma list, measured in the order given: `50,100,500`.
///
/// Every level is at least 1, no level may repeat, and at most [`MAX_SWEEP_POINTS`] levels.
pub(crate) fn parse_sweep(s: &str) -> Result<Vec<u32>, String> {
    let s = s.trim();
    let levels = if s.contains(':') {
        parse_sweep_range(s)?
    } else {
        parse_sweep_list(s)?
    };
    if levels.len() > MAX_SWEEP_POINTS {
        return Err(format!(
            "invalid sweep '{s}' ({} levels, at most {MAX_SWEEP_POINTS})",
            levels.len()
        ));
    }
    Ok(levels)
}

/// `START:END:STEP`, END inclusive and always present.
fn parse_sweep_range(s: &str) -> Result<Vec<u32>, String> {
    let fields: Vec<&str> = s.split(':').collect();
    let [start, end, step] = fields[..] else {
        return Err(format!(
            "invalid sweep '{s}' (expected START:END:STEP, e.g. 100:1000:100)"
        ));
    };
    let start = sweep_number(s, start, "start")?;
    let end = sweep_number(s, end, "end")?;
    let step = sweep_number(s, step, "step")?;
    if start > end {
        return Err(format!(
            "invalid sweep '{s}' (start {start} is greater than end {end})"
        ));
    }
    // Count before building, so `1:4000000000:1` is refused without allocating.
    let on_grid = u64::from(end - start) / u64::from(step) + 1;
    let count = on_grid + u64::from((end - start) % step != 0);
    if count > MAX_SWEEP_POINTS as u64 {
        return Err(format!(
            "invalid sweep '{s}' ({count} levels, at most {MAX_SWEEP_POINTS})"
        ));
    }
    let mut levels: Vec<u32> = (0..on_grid)
        .map(|i| start + (i as u32) * step) // ≤ end, so no overflow
        .collect();
    if levels.last() != Some(&end) {
        levels.push(end);
    }
    Ok(levels)
}

/// One field of a range: a positive whole number.
fn sweep_number(s: &str, field: &str, what: &str) -> Result<u32, String> {
    let field = field.trim();
    match field.parse::<u32>() {
        Ok(0) => Err(format!("invalid sweep '{s}' ({what} must be at least 1)")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "invalid sweep '{s}' ({what} '{field}' is not a whole number from 1 to {})",
            u32::MAX
        )),
    }
}

/// `500` or `50,100,500`.
fn parse_sweep_list(s: &str) -> Result<Vec<u32>, String> {
    let mut levels = Vec::new();
    for item in s.split(',') {
        if levels.len() == MAX_SWEEP_POINTS {
            return Err(format!(
                "invalid sweep '{s}' (more than {MAX_SWEEP_POINTS} levels)"
            ));
        }
        let level = sweep_number(s, item, "level")?;
        if levels.contains(&level) {
            return Err(format!("invalid sweep '{s}' (level {level} is repeated)"));
        }
        levels.push(level);
    }
    Ok(levels)
}

/// Parses `NAME=URL`, e.g. `haproxy-tcp=http://127.0.0.1:8001/1k`: the name is 1 to
/// [`MAX_NAME_LEN`] of `A-Z a-z 0-9 _ . -` (unique among targets: the caller checks); the URL is
/// what the positional TARGET takes.
pub(crate) fn parse_named(s: &str) -> Result<(String, Target), String> {
    let Some((name, url)) = s.split_once('=') else {
        return Err(format!(
            "invalid target '{s}' (expected NAME=URL, e.g. quill=http://127.0.0.1:8080/)"
        ));
    };
    let name_ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-');
    if name.is_empty() || name.len() > MAX_NAME_LEN || !name.bytes().all(name_ok) {
        return Err(format!(
            "invalid target name '{name}' (1 to {MAX_NAME_LEN} of A-Z a-z 0-9 _ . -)"
        ));
    }
    Ok((name.to_string(), target::parse_target(url)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_range_includes_end() {
        assert_eq!(
            parse_sweep("100:1000:100").unwrap(),
            (1..=10).map(|i| i * 100).collect::<Vec<u32>>()
        );
        assert_eq!(parse_sweep("50:120:50").unwrap(), [50, 100, 120]);
        assert_eq!(parse_sweep("5:5:1").unwrap(), [5]);
        assert_eq!(parse_sweep("1:3:10").unwrap(), [1, 3]);
        assert_eq!(parse_sweep(" 10 : 30 : 10 ").unwrap(), [10, 20, 30]);
        let top = u32::MAX;
        assert_eq!(
            parse_sweep(&format!("{}:{top}:1", top - 2)).unwrap(),
            [top - 2, top - 1, top]
        );
        assert_eq!(
            parse_sweep(&format!("1:{top}:{}", top / 2)).unwrap(),
            [1, 1 + top / 2, top]
        );
    }

    #[test]
    fn sweep_single_and_list() {
        assert_eq!(parse_sweep("500").unwrap(), [500]);
        assert_eq!(parse_sweep("50,100,500").unwrap(), [50, 100, 500]);
        assert_eq!(parse_sweep("500, 50").unwrap(), [500, 50]);
    }

    #[test]
    fn sweep_errors_name_the_value() {
        let err = |s: &str| parse_sweep(s).unwrap_err();
        assert!(err("100:1000:0").contains("step must be at least 1"));
        assert!(err("0:10:1").contains("start must be at least 1"));
        assert!(err("1000:100:100").contains("start 1000 is greater than end 100"));
        assert!(err("1:100000:1").contains("100000 levels, at most 1000"));
        assert!(err("1:4294967295:1").contains("at most 1000"));
        assert!(err("1:x:1").contains("end 'x'"));
        assert!(err("1:10").contains("expected START:END:STEP"));
        assert!(err("1:10:1:1").contains("expected START:END:STEP"));
        assert!(err("50,abc").contains("level 'abc'"));
        assert!(err("50,,60").contains("level ''"));
        assert!(err("").contains("level ''"));
        assert!(err("-5").contains("level '-5'"));
        assert!(err("4294967296").contains("level '4294967296'"));
        assert!(err("50,0").contains("level must be at least 1"));
        assert!(err("50,100,50").contains("level 50 is repeated"));
        let many: Vec<String> = (1..=1001).map(|n| n.to_string()).collect();
        assert!(err(&many.join(",")).contains("more than 1000"));
        assert_eq!(parse_sweep("1:1000:1").unwrap().len(), 1000);
    }

    /// Random strings built from the pieces these grammars care about never panic a parser,
    /// and whatever is accepted keeps the documented invariants.
    #[test]
    fn named_targets() {
        let (name, t) = parse_named("haproxy-tcp=http://127.0.0.1:8001/1k").unwrap();
        assert_eq!(name, "haproxy-tcp");
        assert_eq!(t.addr.port(), 8001);
        assert!(parse_named("http://127.0.0.1/")
            .unwrap_err()
            .contains("expected NAME=URL"));
        assert!(parse_named("=http://127.0.0.1/")
            .unwrap_err()
            .contains("name ''"));
        assert!(parse_named("a b=http://127.0.0.1/")
            .unwrap_err()
            .contains("name 'a b'"));
        assert!(parse_named(&format!("{}=http://127.0.0.1/", "n".repeat(65))).is_err());
        assert!(parse_named("ok=ftp://127.0.0.1/").is_err());
    }

    #[test]
    fn random_input_never_panics() {
        const PIECES: &[&str] = &[
            "0",
            "1",
            "9",
            "50",
            "100",
            "4294967295",
            "4294967296",
            "65535",
            "65536",
            ":",
            ",",
            "-",
            "=",
            ".",
            "/",
            "//",
            "[",
            "]",
            "::1",
            "127.0.0.1",
            "255",
            "http://",
            "tcp://",
            "https://",
            "h",
            "name",
            "?",
            "#",
            "@",
            " ",
            "\t",
            "é",
            "\u{0}",
            "%",
            "_",
            "",
        ];
        let mut rng = quill_core::rand::Rng::new(0x9E37_79B9_7F4A_7C15);
        for _ in 0..20_000 {
            let len = rng.below(10);
            let s: String = (0..len)
                .map(|_| PIECES[rng.below(PIECES.len() as u64) as usize])
                .collect();
            if let Ok(levels) = parse_sweep(&s) {
                assert!(
                    !levels.is_empty() && levels.len() <= MAX_SWEEP_POINTS,
                    "{s:?}"
                );
                assert!(levels.iter().all(|&l| l >= 1), "{s:?}");
            }
            // Names only with IP hosts here: a host name would be resolved.
            if let Ok((name, _)) = parse_named(&format!("{s}=http://127.0.0.1:1/")) {
                assert!(!name.is_empty() && name.len() <= MAX_NAME_LEN, "{s:?}");
            }
        }
    }
}
