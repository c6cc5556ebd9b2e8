//! Reading the web-server actions of a route (`static`, `fastcgi`, `cgi`; docs/web.md) into the
//! model. Roots are taken from the configuration file's folder when relative and must be
//! directories when the file is loaded; each error names the key.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::model::{
    parse_duration, CgiAction, Coding, FastcgiAction, StaticAction, Symlinks, MAX_RANGES,
};

/// The longest index name, fallback path, split suffix or `Cache-Control` value.
const MAX_TEXT: usize = 1024;
/// The most index names a static root may try.
const MAX_INDEX: usize = 16;
/// The most CGI children `max_children` may allow.
const MAX_CHILDREN: u32 = 4096;

/// `static = { ... }` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStatic {
    root: String,
    index: Option<Vec<String>>,
    listing: Option<bool>,
    precompressed: Option<Vec<String>>,
    cache_control: Option<String>,
    fallback: Option<String>,
    max_ranges: Option<u32>,
    dotfiles: Option<bool>,
    symlinks: Option<String>,
}

/// `fastcgi = { ... }` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFastcgi {
    pool: String,
    root: String,
    index: Option<String>,
    split_path: Option<String>,
    fallback: Option<String>,
}

/// `cgi = { ... }` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCgi {
    root: String,
    timeout: Option<String>,
    max_children: Option<u32>,
}

/// `root`: a directory, relative to `dir` (the configuration file's folder) unless absolute.
pub(crate) fn root_dir(root: &str, dir: &Path) -> Result<PathBuf, String> {
    if root.is_empty() || root.contains('\0') {
        return Err("root: must name a directory".into());
    }
    let path = dir.join(root);
    match std::fs::metadata(&path) {
        Ok(m) if m.is_dir() => Ok(path),
        Ok(_) => Err(format!("root: {} is not a directory", path.display())),
        Err(e) => Err(format!("root: {}: {e}", path.display())),
    }
}

/// A plain file name (an index, a split suffix): no `/`, no NUL, not `.` or `..`, not empty.
fn file_name(key: &str, s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > MAX_TEXT || s.contains(['/', '\0']) || s == "." || s == ".." {
        return Err(format!(
            "{key}: '{}' is not a file name (no /, not empty)",
            s.escape_debug()
        ));
    }
    Ok(())
}

/// A `fallback`: a path under the root (starts with `/`, no `.` or `..` segment, no query).
fn fallback_path(f: &str) -> Result<String, String> {
    let ok = f.starts_with('/')
        && f.len() <= MAX_TEXT
        && f.bytes().all(|b| b.is_ascii_graphic())
        && !f.contains(['?', '#'])
        && !f.split('/').any(|seg| seg == "." || seg == "..");
    if !ok {
        return Err(format!(
            "fallback: '{}' is not a path under the root (starts with /, no . or .. segment)",
            f.escape_debug()
        ));
    }
    Ok(f.to_string())
}

impl RawStatic {
    pub(super) fn build(&self, dir: &Path) -> Result<StaticAction, String> {
        let mut a = StaticAction::new(root_dir(&self.root, dir)?);
        if let Some(index) = &self.index {
            if index.len() > MAX_INDEX {
                return Err(format!("index: at most {MAX_INDEX} names"));
            }
            for name in index {
                file_name("index", name)?;
            }
            a.index.clone_from(index);
        }
        a.listing = self.listing.unwrap_or(false);
        if let Some(list) = &self.precompressed {
            a.precompressed = precompressed(list)?;
        }
        if let Some(cc) = &self.cache_control {
            if cc.is_empty()
                || cc.len() > MAX_TEXT
                || !cc.bytes().all(|b| b == b' ' || b.is_ascii_graphic())
            {
                return Err(format!(
                    "cache_control: '{}' is not a field value (visible ASCII and spaces)",
                    cc.escape_debug()
                ));
            }
            a.cache_control = Some(cc.clone());
        }
        if let Some(f) = &self.fallback {
            a.fallback = Some(fallback_path(f)?);
        }
        if let Some(n) = self.max_ranges {
            if n > MAX_RANGES {
                return Err(format!("max_ranges: {n} is over {MAX_RANGES}"));
            }
            a.max_ranges = n;
        }
        a.dotfiles = self.dotfiles.unwrap_or(false);
        if let Some(s) = &self.symlinks {
            a.symlinks = match s.as_str() {
                "inside" => Symlinks::Inside,
                "never" => Symlinks::Never,
                "anywhere" => Symlinks::Anywhere,
                other => {
                    return Err(format!(
                        "symlinks: '{}' is not one of inside, never, anywhere",
                        other.escape_debug()
                    ))
                }
            };
        }
        Ok(a)
    }
}

/// `precompressed = ["br", "zstd", "gzip"]`: each coding once.
fn precompressed(list: &[String]) -> Result<Vec<Coding>, String> {
    let mut out = Vec::with_capacity(list.len());
    for c in list {
        let Some(coding) = Coding::from_token(c.as_bytes()) else {
            return Err(format!(
                "precompressed: '{}' is not br, zstd or gzip",
                c.escape_debug()
            ));
        };
        if out.contains(&coding) {
            return Err(format!("precompressed: '{c}' is given twice"));
        }
        out.push(coding);
    }
    Ok(out)
}

impl RawFastcgi {
    pub(super) fn build(&self, dir: &Path) -> Result<FastcgiAction, String> {
        let pool = self.pool.trim();
        if pool.is_empty() {
            return Err("pool: no name given".into());
        }
        let index = self.index.clone().unwrap_or_else(|| "index.php".into());
        file_name("index", &index)?;
        let split_path = self.split_path.clone().unwrap_or_else(|| ".php".into());
        file_name("split_path", &split_path)?;
        let fallback = self.fallback.as_deref().map(fallback_path).transpose()?;
        if let Some(f) = &fallback {
            if quill_core::fastcgi::split_script(f.as_bytes(), split_path.as_bytes()).is_none() {
                return Err(format!(
                    "fallback: '{f}' is not a script (its name does not end with {split_path})"
                ));
            }
        }
        Ok(FastcgiAction {
            pool: pool.to_string(),
            root: root_dir(&self.root, dir)?,
            index,
            split_path,
            fallback,
        })
    }
}

impl RawCgi {
    pub(super) fn build(&self, dir: &Path) -> Result<CgiAction, String> {
        let timeout = match &self.timeout {
            None => Duration::from_secs(30),
            Some(t) => parse_duration(t).map_err(|e| format!("timeout: {e}"))?,
        };
        if timeout.is_zero() {
            return Err("timeout: must be more than 0".into());
        }
        let max_children = self.max_children.unwrap_or(64);
        if max_children == 0 || max_children > MAX_CHILDREN {
            return Err(format!(
                "max_children: {max_children} is out of range (1 to {MAX_CHILDREN})"
            ));
        }
        Ok(CgiAction {
            root: root_dir(&self.root, dir)?,
            timeout,
            max_children,
        })
    }
}
