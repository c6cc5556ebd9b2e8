//! `geoip = "FILE"` (docs/design.md#geoip): the MaxMind DB that `acl N permit|deny country CC`
//! entries are checked against, read (and checked: `crate::geoip`) with the configuration, so
//! a reload reads it again and a bad file fails the reload, naming the file, while the running
//! configuration keeps the database it has. A relative path is taken from the file's directory.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use toml::Spanned;

use crate::acl::{Acls, GeoDb};
use crate::config::model::ConfigError;

/// The largest database read (GeoLite2-Country is about 10 MB, GeoIP2-City about 120 MB).
const MAX_DB: u64 = 512 * 1024 * 1024;

/// Reads the database `raw` names (relative to `dir`).
pub(super) fn load(
    raw: &Spanned<PathBuf>,
    dir: &Path,
    at: &dyn Fn(Range<usize>) -> String,
) -> Result<GeoDb, ConfigError> {
    let path = dir.join(raw.get_ref());
    let fail = |why: String| {
        ConfigError::usage(format!(
            "{}geoip: cannot use '{}': {why}",
            at(raw.span()),
            path.display()
        ))
    };
    let len = std::fs::metadata(&path)
        .map_err(|e| fail(e.to_string()))?
        .len();
    if len > MAX_DB {
        return Err(fail(format!("{len} bytes (at most {MAX_DB})")));
    }
    let bytes = std::fs::read(&path).map_err(|e| fail(e.to_string()))?;
    let db = crate::geoip::Db::new(bytes).map_err(fail)?;
    Ok(GeoDb {
        path,
        db: Arc::new(db),
    })
}

/// A country entry needs a database: the first list with one, when there is none, is an error
/// at that list's line (`lines`: where each list was written).
pub(super) fn check(
    acls: &Acls,
    lines: &dyn Fn(crate::acl::AclId) -> Option<Range<usize>>,
    at: &dyn Fn(Range<usize>) -> String,
) -> Result<(), ConfigError> {
    match acls.with_country() {
        Some(n) if acls.geo.is_none() => Err(ConfigError::usage(format!(
            "{}acl {n}: country entries need a GeoIP database (geoip = \"FILE.mmdb\")",
            at(lines(n).unwrap_or(0..0))
        ))),
        _ => Ok(()),
    }
}
