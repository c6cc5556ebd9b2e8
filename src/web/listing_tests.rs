//! The listing page: order, escaping of hostile names, sizes, dates, JSON that parses back.

use super::*;

fn entry(name: &[u8], dir: bool, size: Option<u64>, mtime: Option<i64>) -> Entry {
    Entry {
        name: name.to_vec(),
        dir,
        size,
        mtime,
    }
}

fn page(url_path: &[u8], entries: &mut [Entry]) -> String {
    let mut out = Vec::new();
    html(url_path, entries, &mut out);
    String::from_utf8(out).unwrap()
}

fn json_value(entries: &mut [Entry]) -> serde_json::Value {
    let mut out = Vec::new();
    json(entries, &mut out);
    serde_json::from_slice(&out).unwrap()
}

fn size_text(size: u64) -> String {
    let mut out = Vec::new();
    human_size(size, &mut out);
    String::from_utf8(out).unwrap()
}

fn date_text(secs: i64) -> String {
    let mut out = Vec::new();
    date_time(secs, &mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn directories_come_first_then_names_bytewise() {
    let mut entries = vec![
        entry(b"b.txt", false, Some(1), None),
        entry(b"zdir", true, None, None),
        entry(b"B.txt", false, Some(1), None),
        entry(b"adir", true, None, None),
        entry(b"a.txt", false, Some(1), None),
    ];
    let body = page(b"/x/", &mut entries);
    let at = |s: &str| body.find(s).unwrap();
    assert!(at(">adir/<") < at(">zdir/<"));
    assert!(at(">zdir/<") < at(">B.txt<"));
    assert!(at(">B.txt<") < at(">a.txt<"));
    assert!(at(">a.txt<") < at(">b.txt<"));
    let names: Vec<_> = entries.iter().map(|e| e.name.clone()).collect();
    assert_eq!(
        names,
        [&b"adir"[..], b"zdir", b"B.txt", b"a.txt", b"b.txt"].map(<[u8]>::to_vec)
    );
}

#[test]
fn hostile_names_are_text_on_the_page_and_exact_in_the_link() {
    let mut entries = vec![
        entry(b"<script>alert(1)</script>", false, Some(3), None),
        entry(b"\"><img src=x onerror=alert(1)>", false, Some(3), None),
        entry(b"a&b", false, Some(3), None),
        entry(b"it's", false, Some(3), None),
        entry(b"javascript:alert(1)", false, Some(3), None),
    ];
    let body = page(b"/", &mut entries);
    assert!(!body.contains("<script>"), "{body}");
    assert!(!body.contains("<img"), "{body}");
    assert!(
        body.contains(">&lt;script&gt;alert(1)&lt;/script&gt;<"),
        "{body}"
    );
    assert!(
        body.contains("href=\"%3Cscript%3Ealert%281%29%3C%2Fscript%3E\""),
        "{body}"
    );
    assert!(
        body.contains(">&quot;&gt;&lt;img src=x onerror=alert(1)&gt;<"),
        "{body}"
    );
    assert!(body.contains("href=\"%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E\""));
    assert!(
        body.contains(">a&amp;b<") && body.contains("href=\"a%26b\""),
        "{body}"
    );
    assert!(
        body.contains(">it&#39;s<") && body.contains("href=\"it%27s\""),
        "{body}"
    );
    // A colon is encoded: the link is a relative name, never a scheme.
    assert!(
        body.contains("href=\"javascript%3Aalert%281%29\""),
        "{body}"
    );
}

#[test]
fn percent_hash_and_question_mark_link_to_the_name_itself() {
    let mut entries = vec![entry(b"100% #1?.txt", false, Some(1), None)];
    let body = page(b"/", &mut entries);
    assert!(body.contains("href=\"100%25%20%231%3F.txt\""), "{body}");
    assert!(body.contains(">100% #1?.txt<"), "{body}");
}

#[test]
fn a_name_that_is_not_utf8_shows_a_replacement_and_links_its_bytes() {
    let mut entries = vec![entry(b"caf\xe9.txt", false, Some(1), None)];
    let body = page(b"/", &mut entries);
    assert!(body.contains(">caf\u{fffd}.txt<"), "{body}");
    assert!(body.contains("href=\"caf%E9.txt\""), "{body}");
    let v = json_value(&mut entries);
    assert_eq!(v[0]["name"], "caf\u{fffd}.txt");
}

#[test]
fn the_page_title_is_the_escaped_path_and_up_is_linked_below_the_root() {
    let body = page(b"/a<b>/", &mut []);
    assert!(
        body.contains("<title>Index of /a&lt;b&gt;/</title>"),
        "{body}"
    );
    assert!(body.contains("<h1>Index of /a&lt;b&gt;/</h1>"), "{body}");
    assert!(body.contains("<a href=\"../\">../</a>"), "{body}");
    let root = page(b"/", &mut []);
    assert!(!root.contains("../"), "{root}");
}

#[test]
fn directories_link_with_a_slash_and_have_no_size() {
    let mut entries = vec![entry(b"sub dir", true, Some(4096), Some(0))];
    let body = page(b"/", &mut entries);
    assert!(
        body.contains(
            "<tr><td><a href=\"sub%20dir/\">sub dir/</a></td><td>-</td><td>1970-01-01 00:00</td></tr>"
        ),
        "{body}"
    );
}

#[test]
fn sizes_are_human_readable_in_powers_of_1024() {
    for (size, want) in [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (10 * 1024 * 1024 + 1, "10.0 MiB"),
        (1024 * 1024 - 1, "1.0 MiB"),
        (5 << 30, "5.0 GiB"),
        (u64::MAX, "16.0 EiB"),
    ] {
        assert_eq!(size_text(size), want, "{size}");
    }
}

#[test]
fn dates_are_utc_civil_dates_across_leap_days_and_before_1970() {
    for (secs, want) in [
        (0, "1970-01-01 00:00"),
        (951_782_400, "2000-02-29 00:00"),
        (951_868_799, "2000-02-29 23:59"),
        (1_709_164_800, "2024-02-29 00:00"),
        (4_107_542_400, "2100-03-01 00:00"),
        (1_700_000_000, "2023-11-14 22:13"),
        (-1, "1969-12-31 23:59"),
        (-2_208_988_800, "1900-01-01 00:00"),
        (253_402_300_799, "9999-12-31 23:59"),
    ] {
        assert_eq!(date_text(secs), want, "{secs}");
    }
}

#[test]
fn civil_dates_agree_with_counting_days_year_by_year() {
    // An independent count: walk the calendar day by day from 1600-01-01 to 2400-12-31.
    let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let lengths = |y: i64| {
        [
            31,
            if leap(y) { 29 } else { 28 },
            31,
            30,
            31,
            30,
            31,
            31,
            30,
            31,
            30,
            31,
        ]
    };
    // 1600-01-01 is 135,140 days before 1970-01-01.
    let mut day = -135_140i64;
    for y in 1600..=2400 {
        for (m, len) in lengths(y).into_iter().enumerate() {
            for d in 1..=len {
                assert_eq!(civil_from_days(day), (y, m as u32 + 1, d), "day {day}");
                day += 1;
            }
        }
    }
}

#[test]
fn json_lists_exact_sizes_unix_times_and_escaped_names() {
    let mut entries = vec![
        entry(b"big.iso", false, Some(u64::MAX), Some(1_700_000_000)),
        entry(b"dir", true, Some(4096), None),
        entry(b"q\"\\\n<&>\x01", false, None, Some(-5)),
    ];
    let mut raw = Vec::new();
    json(&mut entries, &mut raw);
    let text = String::from_utf8(raw.clone()).unwrap();
    assert!(!text.contains('<') && !text.contains('&'), "{text}");
    let v: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(
        v,
        serde_json::json!([
            {"name": "dir", "type": "directory", "size": null, "mtime": null},
            {"name": "big.iso", "type": "file", "size": u64::MAX, "mtime": 1_700_000_000},
            {"name": "q\"\\\n<&>\u{1}", "type": "file", "size": null, "mtime": -5},
        ])
    );
}

#[test]
fn an_empty_directory_is_an_empty_array_and_a_table_without_rows() {
    assert_eq!(json_value(&mut []), serde_json::json!([]));
    let body = page(b"/", &mut []);
    assert_eq!(body.matches("<tr>").count(), 1, "{body}");
}
