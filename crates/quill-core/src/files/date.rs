//! HTTP-date (RFC 9110 §5.6.7): written as IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), read in
//! the three forms a recipient must accept: IMF-fixdate, the obsolete RFC 850 form
//! (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime (`Sun Nov  6 08:49:37 1994`). Hand-written on
//! the proleptic Gregorian calendar (days from and to a civil date, as in Howard Hinnant's
//! public-domain date algorithms), so that both directions are exact, allocation-free and
//! property-tested against each other; no crate needed for 150 lines.

/// The length of an IMF-fixdate.
pub const LEN: usize = 29;

/// The earliest time [`format()`] writes: 0001-01-01 00:00:00 (a four-digit year).
pub const MIN: i64 = -62_135_596_800;
/// The latest time [`format()`] writes: 9999-12-31 23:59:59.
pub const MAX: i64 = 253_402_300_799;

const DAYS: [&[u8; 3]; 7] = [b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat", b"Sun"];
const LONG_DAYS: [&[u8]; 7] = [
    b"Monday",
    b"Tuesday",
    b"Wednesday",
    b"Thursday",
    b"Friday",
    b"Saturday",
    b"Sunday",
];
const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// Writes `unix_s` (seconds since the epoch, UTC) as an IMF-fixdate. A time outside the years
/// 1–9999 is clamped to [`MIN`]/[`MAX`] (the format has four digits of year).
pub fn format(unix_s: i64) -> [u8; LEN] {
    let t = unix_s.clamp(MIN, MAX);
    let days = t.div_euclid(86_400);
    let secs = t.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    // 1970-01-01 was a Thursday (index 3 from Monday).
    let weekday = (days + 3).rem_euclid(7) as usize;
    let mut out = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    out[0..3].copy_from_slice(DAYS[weekday]);
    put2(&mut out[5..7], d);
    out[8..11].copy_from_slice(MONTHS[(m - 1) as usize]);
    put2(&mut out[12..14], y / 100);
    put2(&mut out[14..16], y % 100);
    put2(&mut out[17..19], secs / 3600);
    put2(&mut out[20..22], secs / 60 % 60);
    put2(&mut out[23..25], secs % 60);
    out
}

/// Reads an HTTP-date into seconds since the epoch; `None` if it is none of the three forms or
/// names a day that does not exist (an invalid `If-Modified-Since` is then ignored, RFC 9110
/// §13.1.3). Names are case-sensitive, as the grammar says. An RFC 850 two-digit year is the one
/// that is not more than 50 years after `now_s` (§5.6.7).
pub fn parse(value: &[u8], now_s: i64) -> Option<i64> {
    let v = super::trim(value);
    match v.get(3) {
        Some(b',') => parse_imf(v),
        Some(b' ') => parse_asctime(v),
        // A clock outside the years 1-9999 is wrong; clamped, the arithmetic cannot overflow.
        _ => parse_rfc850(v, now_s.clamp(MIN, MAX)),
    }
}

/// `Sun, 06 Nov 1994 08:49:37 GMT`
fn parse_imf(v: &[u8]) -> Option<i64> {
    if v.len() != LEN || !DAYS.iter().any(|d| v[..3] == d[..]) || &v[3..5] != b", " {
        return None;
    }
    if v[7] != b' ' || v[11] != b' ' || v[16] != b' ' || &v[25..] != b" GMT" {
        return None;
    }
    let day = num(&v[5..7])?;
    let month = month(&v[8..11])?;
    let year = num(&v[12..16])?;
    let secs = time(&v[17..25])?;
    to_unix(year, month, day, secs)
}

/// `Sun Nov  6 08:49:37 1994` (day padded with a space)
fn parse_asctime(v: &[u8]) -> Option<i64> {
    if v.len() != 24 || !DAYS.iter().any(|d| v[..3] == d[..]) {
        return None;
    }
    if v[3] != b' ' || v[7] != b' ' || v[10] != b' ' || v[19] != b' ' {
        return None;
    }
    let month = month(&v[4..7])?;
    let day = match v[8] {
        b' ' => num(&v[9..10])?,
        _ => num(&v[8..10])?,
    };
    let secs = time(&v[11..19])?;
    let year = num(&v[20..24])?;
    to_unix(year, month, day, secs)
}

/// `Sunday, 06-Nov-94 08:49:37 GMT`
fn parse_rfc850(v: &[u8], now_s: i64) -> Option<i64> {
    let comma = v.iter().position(|&b| b == b',')?;
    if !LONG_DAYS.contains(&&v[..comma]) {
        return None;
    }
    let r = &v[comma..];
    if r.len() != 24 || &r[..2] != b", " || r[4] != b'-' || r[8] != b'-' || r[11] != b' ' {
        return None;
    }
    if &r[20..] != b" GMT" {
        return None;
    }
    let day = num(&r[2..4])?;
    let month = month(&r[5..8])?;
    let yy = num(&r[9..11])?;
    let secs = time(&r[12..20])?;
    let now_year = civil_from_days(now_s.div_euclid(86_400)).0;
    let mut year = now_year - now_year.rem_euclid(100) + yy;
    if year > now_year + 50 {
        year -= 100;
    } else if year + 100 <= now_year + 50 {
        year += 100;
    }
    to_unix(year, month, day, secs)
}

/// `HH:MM:SS` → seconds of the day; a second of 60 (a leap second) is allowed by the grammar.
fn time(t: &[u8]) -> Option<i64> {
    if t[2] != b':' || t[5] != b':' {
        return None;
    }
    let (h, m, s) = (num(&t[0..2])?, num(&t[3..5])?, num(&t[6..8])?);
    (h < 24 && m < 60 && s <= 60).then_some(h * 3600 + m * 60 + s)
}

fn month(m: &[u8]) -> Option<i64> {
    MONTHS
        .iter()
        .position(|n| m == &n[..])
        .map(|i| i as i64 + 1)
}

/// Decimal digits only (no sign, no space).
fn num(d: &[u8]) -> Option<i64> {
    d.iter().try_fold(0i64, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + i64::from(b - b'0'))
    })
}

fn to_unix(year: i64, month: i64, day: i64, secs: i64) -> Option<i64> {
    if day < 1 || day > days_in_month(year, month) {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + secs)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (eras of 400 years, March-based years).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`]: (year, month 1–12, day 1–31).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Two decimal digits of `n` (0–99).
fn put2(out: &mut [u8], n: i64) {
    out[0] = b'0' + (n / 10 % 10) as u8;
    out[1] = b'0' + (n % 10) as u8;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// 2026-12-01, for the RFC 850 century.
    const NOW: i64 = 1_796_083_200;

    #[test]
    fn the_rfc_example_date_reads_the_same_in_all_three_forms() {
        let t = 784_111_777;
        assert_eq!(&format(t), b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(parse(b"Sun, 06 Nov 1994 08:49:37 GMT", NOW), Some(t));
        assert_eq!(parse(b"Sunday, 06-Nov-94 08:49:37 GMT", NOW), Some(t));
        assert_eq!(parse(b"Sun Nov  6 08:49:37 1994", NOW), Some(t));
        assert_eq!(parse(b" Sun, 06 Nov 1994 08:49:37 GMT\t", NOW), Some(t));
    }

    #[test]
    fn the_epoch_and_the_edges_format_exactly() {
        assert_eq!(&format(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(&format(951_782_400), b"Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(&format(MAX), b"Fri, 31 Dec 9999 23:59:59 GMT");
        assert_eq!(&format(MIN), b"Mon, 01 Jan 0001 00:00:00 GMT");
        assert_eq!(format(i64::MAX), format(MAX));
        assert_eq!(format(i64::MIN), format(MIN));
        assert_eq!(&format(-1), b"Wed, 31 Dec 1969 23:59:59 GMT");
    }

    #[test]
    fn an_rfc850_year_is_at_most_fifty_years_ahead() {
        let y = |s: &str| parse(s.as_bytes(), NOW).map(|t| civil_from_days(t / 86_400).0);
        assert_eq!(y("Monday, 01-Jan-76 00:00:00 GMT"), Some(2076));
        assert_eq!(y("Friday, 01-Jan-77 00:00:00 GMT"), Some(1977));
        assert_eq!(y("Thursday, 01-Jan-26 00:00:00 GMT"), Some(2026));
        assert_eq!(y("Saturday, 01-Jan-00 00:00:00 GMT"), Some(2000));
    }

    #[test]
    fn invalid_dates_are_none() {
        for v in [
            "",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "sun, 06 Nov 1994 08:49:37 GMT",
            "Sun, 06 nov 1994 08:49:37 GMT",
            "Sun, 31 Nov 1994 08:49:37 GMT",
            "Sun, 29 Feb 1900 00:00:00 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nov 1994 08:60:00 GMT",
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMT, Sun, 06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov +994 08:49:37 GMT",
            "Sunday, 06-Nov-1994 08:49:37 GMT",
            "Sun Nov 6 08:49:37 1994",
            "Sun Nov 00 08:49:37 1994",
            "Funday, 06-Nov-94 08:49:37 GMT",
            "1994-11-06T08:49:37Z",
        ] {
            assert_eq!(parse(v.as_bytes(), NOW), None, "{v}");
        }
    }

    #[test]
    fn a_leap_second_reads_as_the_next_second() {
        assert_eq!(
            parse(b"Wed, 31 Dec 2008 23:59:60 GMT", NOW),
            Some(1_230_768_000)
        );
    }

    proptest! {
        #[test]
        fn every_formatted_date_parses_back(t in MIN..=MAX) {
            let f = format(t);
            prop_assert_eq!(parse(&f, NOW), Some(t));
            let (y, m, d) = civil_from_days(t.div_euclid(86_400));
            prop_assert_eq!(days_from_civil(y, m, d), t.div_euclid(86_400));
        }

        #[test]
        fn asctime_and_imf_agree(t in 0i64..MAX) {
            let f = format(t);
            let s = std::str::from_utf8(&f).unwrap();
            // "Sun, 06 Nov 1994 08:49:37 GMT" -> "Sun Nov  6 08:49:37 1994"
            let day = s[5..7].trim_start_matches('0');
            let asc = format!("{} {} {:>2} {} {}", &s[..3], &s[8..11], day, &s[17..25], &s[12..16]);
            prop_assert_eq!(parse(asc.as_bytes(), NOW), Some(t));
        }

        #[test]
        fn arbitrary_bytes_never_panic(v in proptest::collection::vec(any::<u8>(), 0..40), now in any::<i64>()) {
            let _ = parse(&v, now);
        }

        #[test]
        fn any_clock_reads_an_rfc850_date(now in any::<i64>()) {
            prop_assert!(parse(b"Sunday, 06-Nov-94 08:49:37 GMT", now).is_some());
        }
    }
}
