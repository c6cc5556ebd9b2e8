//! The layer rule of ARCHITECTURE.md, checked: every module of `src/` has a layer in [`LAYERS`],
//! imports only from its own layer or lower ones, and no modules import each other in a circle.
//! The crates under `crates/` are checked for circles (they have no layers of their own), file by
//! file: two files of one folder that import each other are a circle too.
//!
//! What counts as an import: every `use` path and every `crate::`/`super::` path in code, read
//! from the source text (comments and string literals skipped). Test code (`#[cfg(test)]` items
//! and modules, such as the config property test) is left out: a test may build its fixture with
//! a module above the one it tests. A failure names `file:line` of each offending path.
//!
//! Run it alone with `cargo test --test layers`; it reads files only and starts no process.
//! `LAYERS_ROOT=DIR` checks another checkout instead (for instance an older commit unpacked with
//! `git archive COMMIT src crates | tar -x -C DIR`, to see the circles it had).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The layers, lowest first; a module may import from its own layer and the ones above it in
/// this list. An entry `a::b` makes a submodule a module of its own (the config files, which must
/// not import each other in a circle either); any other submodule counts as its top module.
const LAYERS: &[(&str, &[&str])] = &[
    // Leaves: the vocabulary everything shares, no state (`sys` is quill-core's syscall wrappers).
    (
        "leaf",
        &[
            "sys",
            "addr",
            "acl",
            "geoip",
            "clock",
            "metrics",
            "per_worker",
        ],
    ),
    // Pure model: the configuration and what selects and counts servers. No sockets.
    (
        "model",
        &[
            "balancer",
            "command",
            "config",
            "config::settings",
            "config::model",
            "config::toml",
            "config::write",
            "config::explain",
            "config::http",
            "config::routes",
            "config::sites",
            "config::web",
            "backend",
            "queue",
            "route",
            "tls",
        ],
    ),
    // Socket primitives and the process's outputs: they never read the running state.
    ("sockets", &["net", "listener", "systemd", "log"]),
    // The running state: the shared tables and the controller that changes them.
    ("state", &["state"]),
    // I/O that reads the running state or serves sessions. Three rooms are nodes of their own so
    // that nothing creeps into them: `proxy::copy` (the buffers and copy loop), the HTTP request
    // decision `proxy::http::request` (pure: no socket, no session) and `control::exec` (what each
    // control command does: it never reaches back to the socket and its loop).
    (
        "services",
        &[
            "proxy",
            "proxy::copy",
            "proxy::http::request",
            "udp",
            "takeover",
            "health",
            "discovery",
            "status",
            "admin",
            "control",
            "control::exec",
            "demo",
            "dsr",
            "web",
        ],
    ),
    // Assembly: start-up, threads, the main loop, the command line (`generate`: man pages and
    // completions from the command line's definitions).
    ("assembly", &["runtime", "cli", "generate"]),
];

/// Imports that point up, allowed for a stated reason. An entry that no import needs any more
/// fails the check, so that it is deleted with the code that needed it.
const EXEMPT: &[(&str, &str, &str)] = &[];

#[test]
fn every_module_of_src_keeps_to_its_layer_without_circles() {
    let root = std::env::var("LAYERS_ROOT")
        .map_or(PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    let root = root.as_path();
    let files = read_tree(&root.join("src"), root);
    let report = check(&files, Some(LAYERS), EXEMPT);
    assert!(report.is_empty(), "layer check of src/ failed:\n{report}");
}

/// Layers whose modules take the time as an argument instead of reading the clock (the
/// quill-core crate bans it in its clippy.toml; clippy's settings cannot name modules of this one).
const CLOCK_FREE: &[&str] = &["leaf", "model"];
/// The one module of those layers whose job is to read the clock.
const CLOCK: &str = "clock";

#[test]
fn pure_modules_take_the_time_as_an_argument() {
    let root = std::env::var("LAYERS_ROOT")
        .map_or(PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    let files = read_tree(&root.join("src"), &root);
    let report = clock_reads(&files, LAYERS, CLOCK_FREE, CLOCK);
    assert!(report.is_empty(), "clock reads in pure modules:\n{report}");
}

#[test]
fn the_workspace_crates_have_no_circles() {
    let root = std::env::var("LAYERS_ROOT")
        .map_or(PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    let root = root.as_path();
    for krate in ["crates/quill-core/src", "crates/quill-bench/src"] {
        let files = read_tree(&root.join(krate), root);
        assert!(!files.is_empty(), "{krate}: no sources found");
        let report = check(&files, None, &[]);
        assert!(
            report.is_empty(),
            "circle check of {krate} failed:\n{report}"
        );
    }
}

// === The check's own tests: it must fail where it should ===

const TINY: &[(&str, &[&str])] = &[("low", &["a", "c"]), ("high", &["b"])];

fn src(files: &[(&str, &str)]) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect()
}

#[test]
fn an_import_from_a_higher_layer_is_named_with_its_file_and_line() {
    let files = src(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        (
            "src/a.rs",
            "//! A.\n\nuse std::fmt;\nuse crate::b::Thing;\n",
        ),
        ("src/b.rs", "use crate::a;\n"),
    ]);
    let report = check(&files, Some(TINY), &[]);
    assert!(
        report.contains("src/a.rs:4: a (low) imports b (high)"),
        "{report}"
    );
}

#[test]
fn paths_in_code_and_grouped_imports_count_and_comments_do_not() {
    let files = src(&[
        ("src/lib.rs", ""),
        (
            "src/a.rs",
            "// crate::b::x in a comment\nfn f() {\n    let s = \"crate::b::y\";\n    \
             crate::b::call();\n}\nuse crate::{\n    c::One,\n    b::Two,\n};\n",
        ),
        ("src/b.rs", ""),
        ("src/c.rs", ""),
    ]);
    let report = check(&files, Some(TINY), &[]);
    assert!(report.contains("src/a.rs:4: a (low)"), "{report}");
    assert!(report.contains("src/a.rs:8: a (low)"), "{report}");
    assert!(!report.contains("src/a.rs:1:"), "{report}");
    assert!(!report.contains("src/a.rs:3:"), "{report}");
}

#[test]
fn a_circle_within_one_layer_is_named() {
    let files = src(&[
        ("src/a.rs", "use crate::c::X;\n"),
        ("src/c/mod.rs", "mod inner;\n"),
        ("src/c/inner.rs", "use super::super::a::Y;\n"),
    ]);
    let report = check(&files, Some(TINY), &[]);
    assert!(
        report.contains("circle: a -> c (src/a.rs:1) -> a (src/c/inner.rs:1)"),
        "{report}"
    );
}

#[test]
fn in_a_crate_a_circle_between_two_files_of_one_folder_is_named_but_not_one_with_the_folder() {
    // quill-core's `http1` had this one: `body` took `is_tchar` from `head`, `head` took
    // `Framing` from `body`. The folder's `mod.rs` re-exports both and both use its `Error`.
    let files = src(&[
        ("src/lib.rs", "pub mod http1;\n"),
        (
            "src/http1/mod.rs",
            "pub mod body;\npub mod head;\npub use body::Framing;\npub use head::parse;\n",
        ),
        (
            "src/http1/body.rs",
            "use super::head::is_tchar;\nuse super::Error;\n",
        ),
        (
            "src/http1/head.rs",
            "use super::body::Framing;\nuse super::Error;\n",
        ),
    ]);
    let report = check(&files, None, &[]);
    assert_eq!(
        report,
        "circle: http1::body -> http1::head (src/http1/body.rs:1) -> http1::body \
         (src/http1/head.rs:1)\n"
    );
    // With the byte classes in a file of their own, nothing is left.
    let files = src(&[
        (
            "src/http1/mod.rs",
            "pub mod body;\npub mod grammar;\npub mod head;\n",
        ),
        ("src/http1/grammar.rs", "pub fn is_tchar() {}\n"),
        (
            "src/http1/body.rs",
            "use super::grammar::is_tchar;\nuse super::Error;\n",
        ),
        (
            "src/http1/head.rs",
            "use super::body::Framing;\nuse super::Error;\n",
        ),
    ]);
    assert_eq!(check(&files, None, &[]), "");
}

#[test]
fn test_code_and_test_only_files_are_left_out_but_a_stale_exemption_is_not() {
    let files = src(&[
        (
            "src/a.rs",
            "#[cfg(test)]\nmod tests {\n    use crate::b::X;\n    fn f() { let c = '{'; }\n}\n\
             #[cfg(test)]\nmod property;\n",
        ),
        ("src/a/property.rs", "use crate::b::Y;\n"),
        ("src/b.rs", "use crate::a::Z;\n"),
    ]);
    assert_eq!(check(&files, Some(TINY), &[]), "");
    let report = check(&files, Some(TINY), &[("a", "b", "why")]);
    assert!(
        report.contains("exemption a -> b is not needed"),
        "{report}"
    );
}

#[test]
fn a_clock_read_in_a_pure_module_is_named_but_not_in_its_tests() {
    let files = src(&[
        (
            "src/a.rs",
            "fn f() {\n    let t = std::time::Instant::now();\n}\n\
             #[cfg(test)]\nmod tests {\n    fn g() { let _ = Instant::now(); }\n}\n",
        ),
        ("src/b.rs", "fn f() { let _ = SystemTime::now(); }\n"),
    ]);
    let report = clock_reads(&files, TINY, &["low"], "c");
    assert_eq!(
        report,
        "src/a.rs:2: a (low) reads the clock (Instant::now)\n"
    );
}

#[test]
fn a_module_without_a_layer_is_refused() {
    let files = src(&[("src/d.rs", "use crate::a::X;\n"), ("src/a.rs", "")]);
    let report = check(&files, Some(TINY), &[]);
    assert!(
        report.contains("src/d.rs: module d has no layer"),
        "{report}"
    );
}

// === The check ===

/// Every `Instant::now` and `SystemTime::now` outside test code in a module of `layers` other
/// than `clock`, one line each.
fn clock_reads(
    files: &[(String, String)],
    table: &[(&str, &[&str])],
    layers: &[&str],
    clock: &str,
) -> String {
    let mut report = String::new();
    let test_only = test_only_modules(files);
    for (file, text) in files {
        let Some(module) = module_of(file) else {
            continue;
        };
        if test_only.iter().any(|t| module.starts_with(t)) {
            continue;
        }
        let Some(top) = module.first() else {
            continue;
        };
        let Some((layer, _)) = table
            .iter()
            .find(|(_, names)| names.contains(&top.as_str()))
        else {
            continue;
        };
        if !layers.contains(layer) || top == clock {
            continue;
        }
        let (toks, _) = drop_test_code(lex(text));
        for w in toks.windows(3) {
            if let [(Tok::Ident(ty), line), (Tok::PathSep, _), (Tok::Ident(f), _)] = w {
                if (ty == "Instant" || ty == "SystemTime") && f == "now" {
                    let _ = writeln!(
                        report,
                        "{file}:{line}: {top} ({layer}) reads the clock ({ty}::now)"
                    );
                }
            }
        }
    }
    report
}

/// The modules declared `#[cfg(test)] mod x;`: their files are test code.
fn test_only_modules(files: &[(String, String)]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (file, text) in files {
        let Some(module) = module_of(file) else {
            continue;
        };
        for child in drop_test_code(lex(text)).1 {
            let mut m = module.clone();
            m.push(child);
            out.push(m);
        }
    }
    out
}

/// Every `.rs` file under `dir`, as (path relative to `root`, text), sorted by path.
fn read_tree(dir: &Path, root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                let rel = p.strip_prefix(root).unwrap_or(&p);
                out.push((rel.display().to_string(), text));
            }
        }
    }
    out.sort();
    out
}

/// One import found: the module path it names (from the crate root) and where.
struct Import {
    path: Vec<String>,
    line: usize,
}

/// The report: one line per fault, empty when the rule holds. `layers` None: circles only, each
/// module with a file of its own a node (a folder module and the files inside it are not a
/// circle: it declares and re-exports them, they use what it defines).
fn check(
    files: &[(String, String)],
    layers: Option<&[(&str, &[&str])]>,
    exempt: &[(&str, &str, &str)],
) -> String {
    let mut report = String::new();
    let layer_of = |node: &str| -> Option<usize> {
        match layers {
            None => Some(0),
            Some(table) => table.iter().position(|(_, names)| names.contains(&node)),
        }
    };
    let layer_name = |i: usize| layers.map_or("", |t| t[i].0);
    let modules: BTreeSet<Vec<String>> = files.iter().filter_map(|(f, _)| module_of(f)).collect();
    // A module path → its node: the longest table entry it starts with (without layers: the
    // longest module with a file that it starts with, or its top module).
    let node_of = |path: &[String]| -> Option<String> {
        let entries: Vec<&str> = match layers {
            Some(table) => table.iter().flat_map(|(_, n)| n.iter().copied()).collect(),
            None => {
                let known = (1..=path.len())
                    .rev()
                    .find(|&n| modules.contains(&path[..n]));
                return known.map_or_else(|| path.first().cloned(), |n| Some(path[..n].join("::")));
            }
        };
        entries
            .into_iter()
            .filter(|e| {
                let segs: Vec<&str> = e.split("::").collect();
                segs.len() <= path.len() && segs.iter().zip(path).all(|(a, b)| *a == b)
            })
            .max_by_key(|e| e.len())
            .map(str::to_string)
    };

    let scans: Vec<(String, Vec<String>, Vec<Import>)> = files
        .iter()
        .filter_map(|(file, text)| {
            let module = module_of(file)?;
            let imports = scan(text, &module);
            Some((file.clone(), module, imports))
        })
        .collect();
    let test_only = test_only_modules(files);

    // (from, to) → every place it is imported.
    let mut edges: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (file, module, imports) in &scans {
        if module.is_empty() || test_only.iter().any(|t| module.starts_with(t)) {
            continue;
        }
        let Some(from) = node_of(module) else {
            let _ = writeln!(
                report,
                "{file}: module {} has no layer in LAYERS",
                module.join("::")
            );
            continue;
        };
        for import in imports {
            let Some(to) = node_of(&import.path) else {
                if layers.is_some() && !import.path.is_empty() {
                    let _ = writeln!(
                        report,
                        "{file}:{}: module {} has no layer in LAYERS",
                        import.line, import.path[0]
                    );
                }
                continue;
            };
            let nested = |a: &str, b: &str| a.starts_with(b) && a[b.len()..].starts_with("::");
            if to != from && (layers.is_some() || !(nested(&to, &from) || nested(&from, &to))) {
                edges
                    .entry((from.clone(), to))
                    .or_default()
                    .push(format!("{file}:{}", import.line));
            }
        }
    }

    // Upward arrows.
    let mut used_exemptions = BTreeSet::new();
    for ((from, to), places) in &edges {
        let (Some(lf), Some(lt)) = (layer_of(from), layer_of(to)) else {
            continue;
        };
        if lt <= lf {
            continue;
        }
        if let Some(i) = exempt.iter().position(|(f, t, _)| f == from && t == to) {
            used_exemptions.insert(i);
            continue;
        }
        for place in places {
            let _ = writeln!(
                report,
                "{place}: {from} ({}) imports {to} ({}), a higher layer",
                layer_name(lf),
                layer_name(lt)
            );
        }
    }
    for (i, (from, to, _)) in exempt.iter().enumerate() {
        if !used_exemptions.contains(&i) {
            let _ = writeln!(
                report,
                "exemption {from} -> {to} is not needed any more: delete it from EXEMPT"
            );
        }
    }

    // Circles: for each node, the shortest way back to itself, reported once per set of nodes.
    let mut graph: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        graph.entry(from).or_default().push(to);
    }
    let mut seen: BTreeSet<Vec<&str>> = BTreeSet::new();
    for &start in graph.keys() {
        let Some(cycle) = shortest_cycle(&graph, start) else {
            continue;
        };
        let mut key = cycle.clone();
        key.sort();
        if !seen.insert(key) {
            continue;
        }
        let mut line = format!("circle: {start}");
        for pair in cycle.windows(2).chain(std::iter::once(
            [cycle[cycle.len() - 1], cycle[0]].as_slice(),
        )) {
            let place = &edges[&(pair[0].to_string(), pair[1].to_string())][0];
            let _ = write!(line, " -> {} ({place})", pair[1]);
        }
        let _ = writeln!(report, "{line}");
    }
    report
}

/// The nodes of the shortest circle through `start` (starting with it), by breadth-first search.
fn shortest_cycle<'a>(
    graph: &BTreeMap<&'a str, Vec<&'a str>>,
    start: &'a str,
) -> Option<Vec<&'a str>> {
    let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(n) = queue.pop_front() {
        for &next in graph.get(n).map_or(&[][..], |v| v.as_slice()) {
            if next == start {
                let mut path = vec![n];
                let mut at = n;
                while at != start {
                    at = parent[at];
                    path.push(at);
                }
                path.reverse();
                return Some(path);
            }
            if next != start && !parent.contains_key(next) {
                parent.insert(next, n);
                queue.push_back(next);
            }
        }
    }
    None
}

/// The module a file holds, from the crate root: `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`,
/// `src/lib.rs` the root; None for the binary's `main.rs`.
fn module_of(file: &str) -> Option<Vec<String>> {
    let rel = file.split_once("src/").map_or(file, |(_, r)| r);
    let rel = rel.strip_suffix(".rs")?;
    let mut segs: Vec<String> = rel.split('/').map(str::to_string).collect();
    match segs.last().map(String::as_str) {
        Some("main") if segs.len() == 1 => return None,
        Some("lib") if segs.len() == 1 => segs.clear(),
        Some("mod") => {
            segs.pop();
        }
        _ => {}
    }
    Some(segs)
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Semi,
    Star,
    Hash,
    Bang,
    Other(char),
}

/// The tokens that matter here, each with its line; comments, strings and character literals
/// are dropped.
fn lex(text: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    while i < c.len() {
        let ch = c[i];
        match ch {
            '\n' => {
                line += 1;
                i += 1;
            }
            '/' if at(i + 1) == '/' => {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
            }
            '/' if at(i + 1) == '*' => {
                let mut depth = 0;
                while i < c.len() {
                    if c[i] == '/' && at(i + 1) == '*' {
                        depth += 1;
                        i += 2;
                    } else if c[i] == '*' && at(i + 1) == '/' {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        line += usize::from(c[i] == '\n');
                        i += 1;
                    }
                }
            }
            '"' => {
                i += 1;
                while i < c.len() && c[i] != '"' {
                    if c[i] == '\\' {
                        i += 1;
                    }
                    line += usize::from(at(i) == '\n');
                    i += 1;
                }
                i += 1;
            }
            '\'' => {
                // A character literal ('x', '\n', '\u{1F600}') or a lifetime ('a).
                if at(i + 1) == '\\' {
                    i += 2;
                    while i < c.len() && c[i] != '\'' {
                        i += 1;
                    }
                    i += 1;
                } else if at(i + 2) == '\'' {
                    i += 3;
                } else {
                    i += 1;
                }
            }
            ':' if at(i + 1) == ':' => {
                out.push((Tok::PathSep, line));
                i += 2;
            }
            '{' | '}' | ',' | ';' | '*' | '#' | '!' => {
                let t = match ch {
                    '{' => Tok::Open,
                    '}' => Tok::Close,
                    ',' => Tok::Comma,
                    ';' => Tok::Semi,
                    '*' => Tok::Star,
                    '#' => Tok::Hash,
                    _ => Tok::Bang,
                };
                out.push((t, line));
                i += 1;
            }
            _ if ch.is_alphabetic() || ch == '_' => {
                let start = i;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
                let word: String = c[start..i].iter().collect();
                // Raw and byte strings: r"..", r#".."#, b"..", br".."; b'x' is a byte.
                let raw = matches!(word.as_str(), "r" | "br") && matches!(at(i), '"' | '#');
                if raw {
                    let mut hashes = 0;
                    while at(i) == '#' {
                        hashes += 1;
                        i += 1;
                    }
                    if at(i) == '"' {
                        i += 1;
                        loop {
                            if i >= c.len() {
                                break;
                            }
                            if c[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#') {
                                i += 1 + hashes;
                                break;
                            }
                            line += usize::from(c[i] == '\n');
                            i += 1;
                        }
                        continue;
                    }
                }
                if word == "b" && matches!(at(i), '"' | '\'') {
                    continue; // the literal is skipped by the next round
                }
                out.push((Tok::Ident(word), line));
            }
            _ if ch.is_ascii_digit() => {
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_' || c[i] == '.') {
                    if c[i] == '.' && !at(i + 1).is_ascii_digit() {
                        break;
                    }
                    i += 1;
                }
            }
            _ => {
                if !ch.is_whitespace() {
                    out.push((Tok::Other(ch), line));
                }
                i += 1;
            }
        }
    }
    out
}

/// Drops every item under `#[cfg(test)]` from the tokens; returns the rest and the names of
/// test-only child modules declared as `mod x;`.
fn drop_test_code(toks: Vec<(Tok, usize)>) -> (Vec<(Tok, usize)>, Vec<String>) {
    let is = |t: &[(Tok, usize)], i: usize, want: &Tok| t.get(i).is_some_and(|(x, _)| x == want);
    let ident = |t: &[(Tok, usize)], i: usize, want: &str| matches!(t.get(i), Some((Tok::Ident(w), _)) if w == want);
    let (mut out, mut test_mods) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < toks.len() {
        let cfg_test = is(&toks, i, &Tok::Hash)
            && is(&toks, i + 1, &Tok::Other('['))
            && ident(&toks, i + 2, "cfg")
            && is(&toks, i + 3, &Tok::Other('('))
            && ident(&toks, i + 4, "test")
            && is(&toks, i + 5, &Tok::Other(')'))
            && is(&toks, i + 6, &Tok::Other(']'));
        if !cfg_test {
            out.push(toks[i].clone());
            i += 1;
            continue;
        }
        // Skip the item: to its `;` before any block, or to the end of its first block.
        i += 7;
        if ident(&toks, i, "mod") {
            if let (Some((Tok::Ident(name), _)), true) =
                (toks.get(i + 1), is(&toks, i + 2, &Tok::Semi))
            {
                test_mods.push(name.clone());
            }
        }
        let mut depth = 0usize;
        while i < toks.len() {
            match toks[i].0 {
                Tok::Semi if depth == 0 => {
                    i += 1;
                    break;
                }
                Tok::Open => depth += 1,
                Tok::Close => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        i += 1;
                        break;
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
    (out, test_mods)
}

/// The imports of one file holding `module`, each as a module path from the crate root.
fn scan(text: &str, module: &[String]) -> Vec<Import> {
    let (toks, _) = drop_test_code(lex(text));
    let mut children = Vec::new();
    for w in toks.windows(3) {
        if let [(Tok::Ident(m), _), (Tok::Ident(name), _), (Tok::Semi | Tok::Open, _)] = w {
            if m == "mod" {
                children.push(name.clone());
            }
        }
    }
    let mut raw: Vec<(Vec<String>, usize)> = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        match &toks[i].0 {
            Tok::Ident(w) if w == "use" => {
                i += 1;
                use_tree(&toks, &mut i, Vec::new(), &mut raw);
            }
            Tok::Ident(w)
                if (w == "crate" || w == "super")
                    && toks.get(i + 1).is_some_and(|t| t.0 == Tok::PathSep) =>
            {
                let line = toks[i].1;
                let mut segs = vec![w.clone()];
                i += 1;
                while toks.get(i).is_some_and(|t| t.0 == Tok::PathSep) {
                    match toks.get(i + 1) {
                        Some((Tok::Ident(s), _)) => {
                            segs.push(s.clone());
                            i += 2;
                        }
                        _ => break,
                    }
                }
                raw.push((segs, line));
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    raw.into_iter()
        .filter_map(|(segs, line)| {
            resolve(&segs, module, &children).map(|path| Import { path, line })
        })
        .collect()
}

/// Reads one use tree at `i` (after `use`), pushing every full path with the line of its last
/// segment; leaves `i` after the tree.
fn use_tree(
    toks: &[(Tok, usize)],
    i: &mut usize,
    mut prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, usize)>,
) {
    loop {
        let Some((t, line)) = toks.get(*i) else {
            return;
        };
        match t {
            Tok::PathSep => *i += 1,
            Tok::Ident(s) if s == "as" => {
                *i += 2;
                out.push((prefix, *line));
                return;
            }
            Tok::Ident(s) => {
                prefix.push(s.clone());
                *i += 1;
                if !toks.get(*i).is_some_and(|t| t.0 == Tok::PathSep) {
                    if toks
                        .get(*i)
                        .is_some_and(|t| matches!(&t.0, Tok::Ident(a) if a == "as"))
                    {
                        *i += 2;
                    }
                    out.push((prefix, *line));
                    return;
                }
            }
            Tok::Star => {
                *i += 1;
                out.push((prefix, *line));
                return;
            }
            Tok::Open => {
                *i += 1;
                loop {
                    match toks.get(*i).map(|t| &t.0) {
                        None => return,
                        Some(Tok::Close) => {
                            *i += 1;
                            return;
                        }
                        Some(Tok::Comma) => *i += 1,
                        Some(_) => {
                            let before = *i;
                            use_tree(toks, i, prefix.clone(), out);
                            if *i == before {
                                *i += 1;
                            }
                        }
                    }
                }
            }
            _ => return,
        }
    }
}

/// A path as written in `module` → the module path it names from the crate root; None when it
/// names another crate (std, serde...).
fn resolve(segs: &[String], module: &[String], children: &[String]) -> Option<Vec<String>> {
    let first = segs.first()?;
    let mut path: Vec<String> = match first.as_str() {
        "crate" => segs[1..].to_vec(),
        "self" => module.iter().chain(&segs[1..]).cloned().collect(),
        "super" => {
            let ups = segs.iter().take_while(|s| *s == "super").count();
            let base = &module[..module.len().saturating_sub(ups)];
            base.iter().chain(&segs[ups..]).cloned().collect()
        }
        name if children.iter().any(|c| c == name) => module.iter().chain(segs).cloned().collect(),
        _ => return None,
    };
    // `use crate::config::{self, X}` names `config` itself.
    if path.last().is_some_and(|s| s == "self") {
        path.pop();
    }
    Some(path)
}
