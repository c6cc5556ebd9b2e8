//! What the Debian package ships besides the binary: the man pages `quill generate man` renders
//! from the clap definitions, the shell completions of `quill generate completions`, and the
//! hand-written `docs/quill.toml.5`, checked against what `quill --help` and the TOML loader say.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_quill");

fn quill(args: &[&str]) -> Output {
    let out = Command::new(BIN)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"));
    out
}

fn stdout_of(args: &[&str]) -> String {
    let out = quill(args);
    assert!(
        out.status.success(),
        "quill {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The options a help text lists: every `-x`/`--long` at the start of an option line (before its
/// description), then every `[alias: --name]`.
fn options_in_help(help: &str) -> (Vec<String>, Vec<String>) {
    let mut found = Vec::new();
    let mut aliases = Vec::new();
    for line in help.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('-') && line.starts_with(' ') {
            for word in trimmed.split_whitespace() {
                let word = word.trim_end_matches(',').trim_end_matches("...");
                if !word.starts_with('-') {
                    break;
                }
                found.push(word.to_string());
            }
        }
        if let Some((_, rest)) = line.split_once("[alias: ") {
            let names = rest.split(']').next().unwrap_or_default();
            aliases.extend(names.split(", ").map(str::to_string));
        }
    }
    (found, aliases)
}

/// Asserts that `page` names each option in bold (`\fB--name\fR`, as clap_mangen writes
/// it) and each alias in an `[alias: ...]` note.
fn assert_names(page: &str, name: &str, (options, aliases): &(Vec<String>, Vec<String>)) {
    for option in options {
        assert!(
            page.contains(&format!("\\fB{option}\\fR")),
            "{name} does not name {option}"
        );
    }
    for alias in aliases {
        assert!(
            page.contains(&format!("[alias: {alias}")) || page.contains(&format!(", {alias}")),
            "{name} does not name the alias {alias}"
        );
    }
}

/// roff text with its escaped hyphens (`\-`) plain, so an option reads as on the command line.
fn plain(roff: &str) -> String {
    roff.replace("\\-", "-")
}

#[test]
fn generated_man_page_names_every_option() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let listed = stdout_of(&["generate", "man", &dir.path().display().to_string()]);
    let page = |name: &str| {
        let path = dir.path().join(name);
        assert!(
            listed.lines().any(|l| Path::new(l) == path),
            "{name} not reported as written: {listed}"
        );
        plain(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}")))
    };

    let main_help = stdout_of(&["--help"]);
    let main_page = page("quill.1");
    let options = options_in_help(&main_help);
    // The Pen-style options, the long-only ones and socket-proxyd's alias are all in `--help`.
    for expected in ["-r", "--roundrobin", "-x", "--config", "--exit-idle-time"] {
        assert!(
            options.0.iter().any(|o| o == expected),
            "{expected} not in --help"
        );
    }
    assert_eq!(options.1, ["--connections-max"], "the aliases of --help");
    assert_names(&main_page, "quill.1", &options);
    assert!(main_page.contains("\n.TH quill 1 "), "not a section 1 page");
    assert!(main_page.contains(".SH NOTES") && main_page.contains("HOST[:PORT[:MAXCONN"));
    assert!(
        main_page.contains("quill.toml\\fR(5)"),
        "no SEE ALSO quill.toml(5)"
    );

    // One page per subcommand, naming every option of `quill help SUB`.
    let subs = ["demo", "check", "ctl", "generate"];
    let bench = quill(&["help", "bench"]).status.success();
    for sub in subs.iter().chain(bench.then_some(&"bench")) {
        let help = stdout_of(&["help", sub]);
        let page = page(&format!("quill-{sub}.1"));
        assert!(
            main_page.contains(&format!("quill-{sub}\\fR(1)")),
            "quill.1 does not refer to quill-{sub}(1)"
        );
        let options = options_in_help(&help);
        assert!(
            sub == &"generate" || !options.0.is_empty(),
            "no option parsed from `quill help {sub}`"
        );
        assert_names(&page, &format!("quill-{sub}.1"), &options);
    }
}

#[test]
fn completions_are_generated_for_bash_zsh_and_fish() {
    let marks = [
        ("bash", "complete -F _quill"),
        ("zsh", "#compdef quill"),
        ("fish", "complete -c quill"),
    ];
    for (shell, mark) in marks {
        let script = stdout_of(&["generate", "completions", shell]);
        assert!(script.contains(mark), "{shell}: no `{mark}`");
        for word in ["roundrobin", "connect-timeout", "ctl", "token-file"] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
    }
    // Where bash is at hand, its script must at least parse.
    let bash = stdout_of(&["generate", "completions", "bash"]);
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("quill.bash");
    std::fs::write(&file, bash).expect("write the bash script");
    if let Ok(out) = Command::new("bash").arg("-n").arg(&file).output() {
        assert!(
            out.status.success(),
            "bash -n: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // An unknown shell is a usage error naming the ones there are.
    let out = quill(&["generate", "completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bash"));
}

/// The keys the TOML loader accepts at one level, read from the error it gives for an unknown key
/// there (serde lists every field: "unknown field `x`, expected one of `a`, `b`").
fn accepted_keys(toml: &str) -> Vec<String> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("unknown.toml");
    std::fs::write(&file, toml).expect("write the TOML file");
    let out = quill(&["check", "--config", &file.display().to_string()]);
    assert_eq!(out.status.code(), Some(2), "an unknown key must be refused");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let (_, list) = err
        .split_once("expected one of ")
        .unwrap_or_else(|| panic!("no key list in: {err}"));
    let keys: Vec<String> = list
        .split(", ")
        .map(|k| k.trim().trim_matches('`').to_string())
        .collect();
    assert!(keys.len() > 3, "too few keys parsed from: {err}");
    keys
}

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

#[test]
fn toml_man_page_names_every_configuration_key() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/quill.toml.5"))
        .expect("docs/quill.toml.5");
    assert!(page.contains(".TH QUILL.TOML 5"), "not a section 5 page");
    let sections = bold_terms_by_section(&page);
    let documented = |section: &str| sections.get(section).cloned().unwrap_or_default();
    let tuning = documented("TUNING KEYS");

    let listener = "[[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:1\"\n";
    let levels = [
        ("TOP-LEVEL KEYS", "zz_unknown = 1\n".to_string()),
        ("HEALTH TABLE", "[health]\nzz_unknown = 1\n".to_string()),
        ("HTTP TABLE", "[http]\nzz_unknown = 1\n".to_string()),
        (
            "LISTENER TABLES",
            format!("{listener}servers = [\"127.0.0.1:2\"]\nzz_unknown = 1\n"),
        ),
        (
            "SERVER TABLES",
            format!("{listener}servers = [{{ address = \"127.0.0.1:2\", zz_unknown = 1 }}]\n"),
        ),
    ];
    for (section, toml) in levels {
        let here = documented(section);
        assert!(!here.is_empty(), "no section {section} in quill.toml.5");
        let keys = accepted_keys(&toml);
        for key in &keys {
            assert!(
                here.contains(key) || tuning.contains(key),
                "quill.toml.5 does not document `{key}` under {section} (or TUNING KEYS)"
            );
        }
        // And nothing documented there that the loader would refuse.
        for term in &here {
            assert!(
                keys.contains(term),
                "quill.toml.5 documents `{term}` under {section}, which the loader refuses"
            );
        }
    }
    // Tuning keys are accepted at the top level and in a listener alike.
    let top = accepted_keys("zz_unknown = 1\n");
    let in_listener = accepted_keys(&format!("{listener}servers = [\"127.0.0.1:2\"]\nzz = 1\n"));
    for key in &tuning {
        assert!(
            top.contains(key) && in_listener.contains(key),
            "tuning key `{key}` is not accepted at both levels"
        );
    }
}

/// `scripts/pgo-build`'s training load runs through today's binary: every server it starts
/// answers, every request of every load succeeds (TCP mode, HTTP mode kept alive and not, TLS
/// termination, TLS to servers, files, UDP flows, HTTP/2 when h2load is here) and every process
/// exits with status 0 on SIGTERM, which is when an instrumented build writes its counts. The profile-guided build
/// itself (two release builds, about ten minutes) is not run here; this keeps what it trains on
/// from drifting away from the command line it drives.
#[test]
fn pgo_build_training_load_runs_through_quill() {
    for tool in ["openssl", "curl", "python3"] {
        if Command::new(tool).arg("--version").output().is_err() {
            eprintln!("skipped: {tool} is missing (scripts/test installs it)");
            return;
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ports: Vec<String> = (0..7)
        .map(|_| crate::support::free_port().to_string())
        .collect();
    let out = Command::new(root.join("scripts/pgo-build"))
        .args(["--train", BIN])
        .env("QUILL_PGO_PORTS", ports.join(" "))
        .env("QUILL_PGO_SECONDS", "1")
        .output()
        .expect("scripts/pgo-build runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scripts/pgo-build --train failed ({}):\n{stderr}",
        out.status
    );
    assert!(stderr.contains("the training load ran through"), "{stderr}");
}
