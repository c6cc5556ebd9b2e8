//! Virtual hosts (docs/sites.md): a listener's sites, each a set of host names with its own
//! routes (kept in the listener's `routes`, tagged with their site: see `RouteConfig::site`) and
//! certificates, and what a Host no site names gets (`unknown_host`).

use std::fmt;
use std::path::PathBuf;

use super::http::HostMatch;

/// The most sites one listener may have.
pub(crate) const MAX_SITES: usize = 1024;
/// The most names one site may have.
pub(crate) const MAX_SITE_NAMES: usize = 256;

/// One `[[listener.site]]`. Its routes (its own `[[listener.site.route]]`s, then one for its
/// `root`) are in the listener's `routes`, after the routes outside any site, with `site` set to
/// this site's place in `ListenerConfig::sites`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SiteConfig {
    /// `name`, else its first name as written: the prefix of its routes' default names.
    pub name: String,
    /// Exact names (lower case, no trailing dot) and `*.suffix` wildcards.
    pub names: Vec<HostMatch>,
    /// The listener's default site: a Host no site names gets it.
    pub default: bool,
    /// Its certificates' files (already in the listener's TLS certificates, chosen by SNI);
    /// kept here to explain the site.
    pub certs: Vec<PathBuf>,
    /// Its own access log (`log = "FILE"`, relative to the configuration file's folder): its
    /// requests' lines go there instead of the listener's file, in the listener's format.
    pub log: Option<PathBuf>,
}

/// What a request whose Host no site names gets (`unknown_host`), when the listener has sites.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum UnknownHost {
    /// The default site if one is marked, else the routes outside any site (then the
    /// listener's own servers, else 404).
    #[default]
    Default,
    /// 404 Not Found.
    NotFound,
    /// 421 Misdirected Request.
    Misdirected,
}

impl UnknownHost {
    /// The value of `unknown_host` that reads as this.
    pub(crate) fn word(self) -> &'static str {
        match self {
            UnknownHost::Default => "default",
            UnknownHost::NotFound => "404",
            UnknownHost::Misdirected => "421",
        }
    }

    /// Reads `unknown_host`'s value.
    pub(crate) fn parse(s: &str) -> Option<UnknownHost> {
        [
            UnknownHost::Default,
            UnknownHost::NotFound,
            UnknownHost::Misdirected,
        ]
        .into_iter()
        .find(|u| u.word() == s)
    }

    /// The status it answers with, None for `default`.
    pub(crate) fn status(self) -> Option<u16> {
        match self {
            UnknownHost::Default => None,
            UnknownHost::NotFound => Some(404),
            UnknownHost::Misdirected => Some(421),
        }
    }
}

impl fmt::Display for SiteConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "site '{}':", self.name)?;
        for (i, n) in self.names.iter().enumerate() {
            f.write_str(if i == 0 { " " } else { ", " })?;
            write!(f, "{n}")?;
        }
        if self.default {
            f.write_str(" (default)")?;
        }
        Ok(())
    }
}
