//! Reading `[[listener.site]]` tables (docs/sites.md) into `model::SiteConfig` and the site's
//! routes: its names, its own `[[listener.site.route]]`s and its `root` (a last `static` route),
//! each checked with the line of its key, and its own access log (`log`). A site's certificates are read by the
//! TOML loader, which adds them to the listener's TLS settings.

use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use super::model::{
    ConfigError, HostMatch, RouteAction, RouteConfig, SiteConfig, MAX_SITES, MAX_SITE_NAMES,
};
use super::routes::{host, RawRoute};
use super::web::RawStatic;

type At<'a> = &'a dyn Fn(Range<usize>) -> String;

/// One `[[listener.site]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSite {
    name: Option<Spanned<String>>,
    names: Option<Spanned<Vec<String>>>,
    root: Option<Spanned<String>>,
    #[serde(rename = "static")]
    static_files: Option<Spanned<toml::Table>>,
    /// Read by the TOML loader (`certs`): see [`RawSite::certs`].
    certs: Option<Spanned<toml::Value>>,
    /// Its own access log file (see `SiteConfig::log`).
    log: Option<Spanned<PathBuf>>,
    default: Option<Spanned<bool>>,
    #[serde(default)]
    route: Vec<Spanned<RawRoute>>,
}

impl RawSite {
    /// Its `certs` key as written, for the loader (which knows the listener's TLS).
    pub(super) fn certs(&self) -> Option<&Spanned<toml::Value>> {
        self.certs.as_ref()
    }
}

/// A listener's sites and their routes, to be appended to the routes outside any site
/// (`outside`, whose names the sites' routes must not take).
pub(super) fn sites(
    raw: &[Spanned<RawSite>],
    outside: &[RouteConfig],
    listener: &str,
    at: At,
    dir: &Path,
) -> Result<(Vec<SiteConfig>, Vec<RouteConfig>), ConfigError> {
    let fail = |span: Range<usize>, e: String| {
        ConfigError::usage(format!("{}listener '{listener}': {e}", at(span)))
    };
    if raw.len() > MAX_SITES {
        return Err(fail(
            raw[MAX_SITES].span(),
            format!("{} sites (at most {MAX_SITES})", raw.len()),
        ));
    }
    let mut sites: Vec<SiteConfig> = Vec::with_capacity(raw.len());
    let mut routes: Vec<RouteConfig> = Vec::new();
    for (i, rs) in raw.iter().enumerate() {
        let mut site = rs.get_ref().build(rs.span(), &fail)?;
        site.log = rs.get_ref().log.as_ref().map(|p| dir.join(p.get_ref()));
        check_against(&site, rs, &sites, &fail)?;
        let index = u32::try_from(i).unwrap_or(u32::MAX);
        for r in rs.get_ref().routes(&site, index, at, dir, &fail)? {
            if let Some(o) = outside.iter().chain(&routes).find(|o| o.name == r.name) {
                return Err(fail(
                    rs.span(),
                    format!("two routes are named '{}'", o.name),
                ));
            }
            routes.push(r);
        }
        sites.push(site);
    }
    Ok((sites, routes))
}

/// Refuses a site that names a host an earlier site names, or a second default site.
fn check_against(
    site: &SiteConfig,
    rs: &Spanned<RawSite>,
    earlier: &[SiteConfig],
    fail: &dyn Fn(Range<usize>, String) -> ConfigError,
) -> Result<(), ConfigError> {
    let raw = rs.get_ref();
    for other in earlier {
        if let Some(n) = site.names.iter().find(|n| other.names.contains(n)) {
            let span = raw.names.as_ref().map_or_else(|| rs.span(), |v| v.span());
            return Err(fail(
                span,
                format!(
                    "site '{}': {n} is a name of site '{}' too (a name belongs to one site)",
                    site.name, other.name
                ),
            ));
        }
        if site.default && other.default {
            let span = raw.default.as_ref().map_or_else(|| rs.span(), |v| v.span());
            return Err(fail(
                span,
                format!(
                    "site '{}': site '{}' is the default already (at most one default site)",
                    site.name, other.name
                ),
            ));
        }
    }
    Ok(())
}

impl RawSite {
    /// The site itself (names, name, default); its routes are read by [`RawSite::routes`].
    fn build(
        &self,
        span: Range<usize>,
        fail: &dyn Fn(Range<usize>, String) -> ConfigError,
    ) -> Result<SiteConfig, ConfigError> {
        let Some(v) = &self.names else {
            return Err(fail(
                span,
                "site: no names (names = [\"example.com\", \"*.example.com\"])".into(),
            ));
        };
        let list = v.get_ref();
        if list.is_empty() || list.len() > MAX_SITE_NAMES {
            return Err(fail(
                v.span(),
                format!("site: names: 1 to {MAX_SITE_NAMES} names"),
            ));
        }
        let mut names: Vec<HostMatch> = Vec::with_capacity(list.len());
        for n in list {
            // A trailing dot names the same host (the request's is ignored too).
            let bare = n.strip_suffix('.').unwrap_or(n);
            let m = host(&toml::Value::String(bare.into()))
                .map_err(|e| fail(v.span(), format!("site: names: {e}")))?;
            if !names.contains(&m) {
                names.push(m);
            }
        }
        let name = match &self.name {
            Some(n) => {
                let s = n.get_ref().trim();
                if s.is_empty() || s.len() > 64 || !s.bytes().all(|b| b.is_ascii_graphic()) {
                    return Err(fail(
                        n.span(),
                        format!(
                            "site name '{}': 1 to 64 visible characters, no spaces",
                            s.escape_debug()
                        ),
                    ));
                }
                s.to_string()
            }
            None => names[0].to_string(),
        };
        if self.route.is_empty() && self.root.is_none() {
            return Err(fail(
                span,
                format!("site '{name}': serves nothing (give it a root or routes)"),
            ));
        }
        Ok(SiteConfig {
            name,
            names,
            default: self.default.as_ref().is_some_and(|d| *d.get_ref()),
            certs: Vec::new(),
            log: None,
        })
    }

    /// The site's routes in order: its `[[listener.site.route]]`s (unnamed ones are called
    /// `SITE/route-N`), then `SITE/root` for its `root`.
    fn routes(
        &self,
        site: &SiteConfig,
        index: u32,
        at: At,
        dir: &Path,
        fail: &dyn Fn(Range<usize>, String) -> ConfigError,
    ) -> Result<Vec<RouteConfig>, ConfigError> {
        let mut out: Vec<RouteConfig> = Vec::with_capacity(self.route.len() + 1);
        for (i, r) in self.route.iter().enumerate() {
            let mut route = r.get_ref().build(i + 1, r.span(), at, dir)?;
            if !r.get_ref().is_named() {
                route.name = format!("{}/route-{}", site.name, i + 1);
            }
            if !route.sni.is_empty() {
                return Err(fail(
                    r.span(),
                    format!(
                        "route '{}': sni is for TCP listeners (a site's routes match requests)",
                        route.name
                    ),
                ));
            }
            if let Some(o) = out.iter().find(|o| o.name == route.name) {
                return Err(fail(r.span(), format!("two routes are named '{}'", o.name)));
            }
            route.site = Some(index);
            out.push(route);
        }
        if let Some(root) = self.root_route(site, fail, dir)? {
            out.push(RouteConfig {
                site: Some(index),
                ..root
            });
        }
        Ok(out)
    }

    /// `root` (with `static`'s keys, but not its root): the route that serves the site's files
    /// when none of its routes matched.
    fn root_route(
        &self,
        site: &SiteConfig,
        fail: &dyn Fn(Range<usize>, String) -> ConfigError,
        dir: &Path,
    ) -> Result<Option<RouteConfig>, ConfigError> {
        let Some(root) = &self.root else {
            if let Some(s) = &self.static_files {
                return Err(fail(
                    s.span(),
                    format!("site '{}': static needs the site's root", site.name),
                ));
            }
            return Ok(None);
        };
        let mut table = self
            .static_files
            .as_ref()
            .map(|s| s.get_ref().clone())
            .unwrap_or_default();
        if table.contains_key("root") {
            let span = self.static_files.as_ref().map_or(root.span(), |s| s.span());
            return Err(fail(
                span,
                format!(
                    "site '{}': static: root is the site's own root key",
                    site.name
                ),
            ));
        }
        table.insert("root".into(), toml::Value::String(root.get_ref().clone()));
        let action = RawStatic::deserialize(toml::Value::Table(table))
            .map_err(|e| e.message().to_string())
            .and_then(|raw| raw.build(dir))
            .map_err(|e| {
                // A bad root is the root key's fault, anything else the static table's.
                let span = match &self.static_files {
                    Some(s) if !e.starts_with("root:") => s.span(),
                    _ => root.span(),
                };
                fail(span, format!("site '{}': {e}", site.name))
            })?;
        let mut route = RouteConfig::any(format!("{}/root", site.name));
        route.action = RouteAction::Static(Box::new(action));
        Ok(Some(route))
    }
}
