//! Unit tests of the settings table: its order lists, its grammars and the man page that
//! documents it.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;

/// The `.B key` lines of each `.SH` section of a roff page.
fn bold_terms_by_section(roff: &str) -> BTreeMap<String, Vec<String>> {
    let mut sections: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current = String::new();
    for line in roff.lines() {
        if let Some(name) = line.strip_prefix(".SH ") {
            current = name.trim_matches('"').to_string();
        } else if let Some(term) = line.strip_prefix(".B ") {
            sections
                .entry(current.clone())
                .or_default()
                .push(term.trim().to_string());
        }
    }
    sections
}

/// The plain text of the first line after `.B key` (a key's type, bounds and default), with
/// roff's font changes and quotes left out.
fn type_line(roff: &str, key: &str) -> Option<String> {
    let mut lines = roff.lines();
    lines.find(|l| l.strip_prefix(".B ").map(str::trim) == Some(key))?;
    let line = lines.next()?;
    Some(
        line.replace("\\fB", "")
            .replace("\\fR", "")
            .replace('"', ""),
    )
}

/// Checks that `section` of the man page documents every entry of `entries` with its type and
/// bounds, and (given `keys`) documents nothing but `keys` there.
fn check_section<S>(page: &str, section: &str, entries: &[&dyn Entry<S>], keys: Option<&[&str]>) {
    let sections = bold_terms_by_section(page);
    let documented = sections
        .get(section)
        .unwrap_or_else(|| panic!("no {section} section"));
    for e in entries {
        let a = e.about();
        let key = a.key;
        assert!(
            documented.iter().any(|d| d == key),
            "quill.toml.5 does not document `{key}` under {section}"
        );
        let line = type_line(page, key).unwrap_or_default();
        assert!(
            line.starts_with(e.type_name()) && line.contains(a.bounds),
            "quill.toml.5 gives `{key}` as '{line}', the table as {} {}",
            e.type_name(),
            a.bounds
        );
    }
    for term in documented.iter().filter(|_| keys.is_some()) {
        assert!(
            keys.unwrap_or_default().contains(&term.as_str()),
            "quill.toml.5 documents `{term}` under {section}, which the table lacks"
        );
    }
}

/// `docs/quill.toml.5` documents every setting of the tables in its section (TUNING KEYS, HTTP
/// TABLE, TOP-LEVEL KEYS) with the table's type and bounds, and nothing else in the first two.
#[test]
fn the_man_page_documents_the_table() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/quill.toml.5"))
        .expect("docs/quill.toml.5");
    let tuning: Vec<&str> = TUNING.iter().map(|e| e.about().key).collect();
    check_section(&page, "TUNING KEYS", TUNING, Some(&tuning));
    check_section(
        &page,
        "HTTP TABLE",
        crate::config::http::HTTP,
        Some(HTTP_EXPLAIN_ORDER),
    );
    // The top level has hand-written keys too (paths, the control socket, ACLs).
    check_section(&page, "TOP-LEVEL KEYS", crate::config::model::GLOBAL, None);
}

/// Every setting has a doc, a unique key and word, and `write` states each one with a word.
#[test]
fn every_setting_is_described_once() {
    let mut keys = std::collections::HashSet::new();
    let mut words = std::collections::HashSet::new();
    for e in TUNING {
        let a = e.about();
        assert!(!a.doc.trim().is_empty(), "{} has no doc", a.key);
        assert!(keys.insert(a.key), "{} twice", a.key);
        if let Some(w) = a.word {
            assert!(words.insert(w), "word {w} twice");
            assert_eq!(
                WRITE_ORDER.iter().filter(|k| **k == a.key).count(),
                1,
                "{} must be in WRITE_ORDER once",
                a.key
            );
        } else {
            assert!(!WRITE_ORDER.contains(&a.key), "{} has no word", a.key);
        }
    }
    assert_eq!(WRITE_ORDER.len(), words.len());
}

/// Each control word parses to its setting's value, shows on its own, and keeps the messages of
/// the grammar it replaced.
#[test]
fn control_words_parse_to_their_settings() {
    let set = |line: &str| {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (negated, rest) = match words.split_first() {
            Some((&"no", rest)) => (true, rest),
            _ => (false, &words[..]),
        };
        let (word, args) = rest.split_first().expect("a word");
        Tune::parse(word, negated, args).expect("a tuning word")
    };
    assert_eq!(
        set("timeout 500ms"),
        Ok(Parsed::Set(Tune::ConnectTimeout(Duration::from_millis(
            500
        ))))
    );
    assert_eq!(set("timeout"), Ok(Parsed::Show));
    assert_eq!(set("no keepalive"), Ok(Parsed::Set(Tune::Keepalive(false))));
    assert_eq!(set("no source"), Ok(Parsed::Set(Tune::Source(None))));
    assert_eq!(
        set("no timeout").unwrap_err().0,
        "'no timeout' is not a command"
    );
    assert_eq!(
        set("clients_max 1000001").unwrap_err().0,
        "clients_max: 1000001 is out of range (0 to 1000000)"
    );
    assert_eq!(
        set("tcp_fastclose a b").unwrap_err().0,
        "tcp_fastclose needs one of up|down|both|off"
    );
    assert_eq!(
        set("source a b").unwrap_err().0,
        "source needs one IP address"
    );
    assert_eq!(
        set("keepalive now").unwrap_err().0,
        "keepalive: unexpected argument 'now'"
    );
    assert!(Tune::parse("fin_timeout", false, &["5"]).is_none());
    assert!(Tune::parse("hash", false, &[]).is_none());
}

/// Applying a control value runs the setting's own check: `timeout 0` is refused, a
/// `clients_max` of 0 is raised to 1.
#[test]
fn applying_a_value_runs_its_check() {
    let mut t = Tuning::default();
    assert_eq!(
        Tune::ConnectTimeout(Duration::ZERO).apply(&mut t),
        Err("timeout: must be more than 0".to_string())
    );
    Tune::ClientsMax(0).apply(&mut t).unwrap();
    assert_eq!(t.clients_max, 1);
    Tune::Source(Some("10.0.0.1".parse().unwrap()))
        .apply(&mut t)
        .unwrap();
    assert_eq!(t.source, Some("10.0.0.1".parse().unwrap()));
}

/// `write` states the settings in its order, the TCP-only ones left out for UDP.
#[test]
fn write_states_each_setting_in_order() {
    let mut out = String::new();
    Tuning::default().write(&mut out, "p ", false);
    assert_eq!(
        out,
        "p blacklist 30s\np timeout 3s\np queue_timeout 10s\np tracking 0s\np clients_max 2048\np max_per_source 0\n\
         p idle_timeout 0s\np tcp_fastclose off\np proxy_protocol off\np tcp_nodelay\n\
         p defer_accept\np no keepalive\n"
    );
    let mut udp = String::new();
    Tuning::default().write(&mut udp, "", true);
    assert!(
        !udp.contains("tcp_") && !udp.contains("keepalive") && !udp.contains("defer"),
        "{udp}"
    );
}

/// The merge takes the sources' value where they changed it, else the running one.
#[test]
fn merge_keeps_runtime_changes_the_sources_did_not_override() {
    let base = Tuning::default();
    let mut ours = base.clone();
    ours.idle_timeout = Duration::from_secs(9);
    ours.clients_max = 10;
    let mut theirs = base.clone();
    theirs.clients_max = 20;
    let out = Tuning::merge(&base, &ours, &theirs);
    assert_eq!(out.idle_timeout, Duration::from_secs(9));
    assert_eq!(out.clients_max, 20);
}

/// `explain`'s order names every `[http]` setting of the table once, and the structured keys.
#[test]
fn the_http_explain_order_names_every_key_once() {
    let http = crate::config::http::HTTP;
    for e in http {
        let key = e.about().key;
        assert_eq!(
            HTTP_EXPLAIN_ORDER.iter().filter(|k| **k == key).count(),
            1,
            "{key}"
        );
    }
    assert_eq!(HTTP_EXPLAIN_ORDER.len(), http.len() + 3);
}
