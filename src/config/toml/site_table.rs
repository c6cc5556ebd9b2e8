//! A listener's `[[listener.site]]`s and `unknown_host` (docs/sites.md), put into its model:
//! the sites and their routes (read by `config::sites`), and the sites' certificates added to
//! the listener's TLS certificates, where a handshake's server name chooses among them.

use std::ops::Range;
use std::path::Path;

use super::super::model::{ConfigError, ListenerConfig, UnknownHost};
use super::super::sites;
use super::tls_table;
use super::RawListener;

type At<'a> = &'a dyn Fn(Range<usize>) -> String;

/// Reads the listener's sites into `l` (after its own routes, which come first).
pub(super) fn read_sites(
    rl: &RawListener,
    l: &mut ListenerConfig,
    dir: &Path,
    at: At,
) -> Result<(), ConfigError> {
    let name = l.name.clone();
    let fail = |span: Range<usize>, e: String| {
        ConfigError::usage(format!("{}listener '{name}': {e}", at(span)))
    };
    if let Some(u) = &rl.unknown_host {
        l.unknown_host = UnknownHost::parse(u.get_ref()).ok_or_else(|| {
            fail(
                u.span(),
                format!(
                    "unknown_host: '{}' is not one of default, 404, 421",
                    u.get_ref().escape_debug()
                ),
            )
        })?;
        if rl.site.is_empty() {
            return Err(fail(
                u.span(),
                "unknown_host: the listener has no [[listener.site]]".into(),
            ));
        }
    }
    let Some(first) = rl.site.first() else {
        return Ok(());
    };
    if !l.is_http() {
        return Err(fail(
            first.span(),
            "sites need an HTTP listener (protocol = \"http\")".into(),
        ));
    }
    let (mut found, routes) = sites::sites(&rl.site, &l.routes, &name, at, dir)?;
    if let (Some(u), Some(status), Some(d)) = (
        &rl.unknown_host,
        l.unknown_host.status(),
        found.iter().find(|s| s.default),
    ) {
        return Err(fail(
            u.span(),
            format!(
                "unknown_host = \"{status}\": site '{}' is the default, which takes every unknown host (give one or the other)",
                d.name
            ),
        ));
    }
    for (site, rs) in found.iter_mut().zip(&rl.site) {
        let Some(v) = rs.get_ref().certs() else {
            continue;
        };
        let Some(tls) = l.stream_mut().and_then(|s| s.tls.as_mut()) else {
            return Err(fail(
                v.span(),
                format!(
                    "site '{}': certs need a listener with tls (the listener's own tls = {{ ... }})",
                    site.name
                ),
            ));
        };
        let certs = tls_table::site_certs(v, dir, at)?;
        site.certs = certs.iter().map(|c| c.cert.path.clone()).collect();
        tls.certs.extend(certs);
        tls_table::check_joined(tls, v, at)?;
    }
    l.routes.extend(routes);
    l.sites = found;
    Ok(())
}
