//! The web-server actions of a route (docs/web.md): `static` (files under a root), `fastcgi` (a
//! script under a root run by a FastCGI pool) and `cgi` (a script under a root run as a child).
//! Pure data: `config::web` reads them from TOML, `route` opens their roots, `web` serves them.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

pub(crate) use quill_core::files::coding::Coding;

/// How a static root treats symbolic links (`symlinks`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Symlinks {
    /// Followed while they stay beneath the root (`openat2` with `RESOLVE_BENEATH`); the default.
    #[default]
    Inside,
    /// Never followed: a link is not found.
    Never,
    /// Followed anywhere (the operator links content in from elsewhere on purpose); `..` in a
    /// request path still never climbs above the root.
    Anywhere,
}

impl Symlinks {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Symlinks::Inside => "inside",
            Symlinks::Never => "never",
            Symlinks::Anywhere => "anywhere",
        }
    }
}

/// `static = { root, index, listing, precompressed, cache_control, fallback, max_ranges,
/// dotfiles, symlinks }`: files served from beneath `root`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StaticAction {
    /// An absolute directory (a relative one is taken from the configuration file's folder).
    pub root: PathBuf,
    /// Tried in order for a directory (`["index.html"]`).
    pub index: Vec<String>,
    /// A directory without an index file is listed (HTML, or JSON when asked) instead of 404.
    pub listing: bool,
    /// The siblings tried, in this order, for a client that accepts their coding (`NAME.br`,
    /// `NAME.zst`, `NAME.gz`).
    pub precompressed: Vec<Coding>,
    /// Sent as `Cache-Control` with every file.
    pub cache_control: Option<String>,
    /// A path under the root served for a GET or HEAD whose file does not exist (a single-page
    /// application's `/index.html`).
    pub fallback: Option<String>,
    /// The most ranges one request may ask for (more: the whole file); 0 turns ranges off.
    pub max_ranges: u32,
    /// Whether names starting with `.` are served (`/.well-known/` always is).
    pub dotfiles: bool,
    pub symlinks: Symlinks,
}

impl StaticAction {
    /// The defaults for a root.
    pub(crate) fn new(root: PathBuf) -> StaticAction {
        StaticAction {
            root,
            index: vec!["index.html".into()],
            listing: false,
            precompressed: Vec::new(),
            cache_control: None,
            fallback: None,
            max_ranges: DEFAULT_MAX_RANGES,
            dotfiles: false,
            symlinks: Symlinks::Inside,
        }
    }
}

/// `max_ranges` when not given.
pub(crate) const DEFAULT_MAX_RANGES: u32 = 16;
/// The most ranges `max_ranges` may allow.
pub(crate) const MAX_RANGES: u32 = quill_core::files::range::MAX_PARTS as u32;

/// `fastcgi = { pool, root, index, split_path }`: scripts under `root` run by the FastCGI pool
/// `pool` (a `[[pool]]` with `protocol = "fastcgi"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FastcgiAction {
    pub pool: String,
    pub root: PathBuf,
    /// The script of a path that names a directory (`index.php`).
    pub index: String,
    /// Where a path is split into the script and `PATH_INFO` (`.php`: `/a.php/b` runs `/a.php`).
    pub split_path: String,
    /// The script a path that names no script runs (`/index.php`: a front controller, as
    /// nginx's `try_files $uri /index.php?$args`); None: 404.
    pub fallback: Option<String>,
}

/// `cgi = { root, timeout, max_children }`: scripts under `root` run as child processes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CgiAction {
    pub root: PathBuf,
    /// A child still running after this is killed (its process group) and the request gets 504.
    pub timeout: Duration,
    /// Children running at once in the whole process; more requests get 503.
    pub max_children: u32,
}

impl fmt::Display for StaticAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "static files from {}", self.root.display())?;
        if self.listing {
            f.write_str(", listing on")?;
        }
        if !self.precompressed.is_empty() {
            let codings: Vec<&str> = self.precompressed.iter().map(|c| c.token()).collect();
            write!(f, ", precompressed {}", codings.join(" "))?;
        }
        if self.dotfiles {
            f.write_str(", dotfiles served")?;
        }
        write!(f, ", symlinks {}", self.symlinks.name())
    }
}
