//! A listener's sites compiled (docs/sites.md): which site a request's host names (its exact
//! name, else the longest wildcard, else the default site), hence which slice of the listener's
//! routes is tried, or the status a host no site names gets (`unknown_host`). Lookups do not
//! allocate: the host is lower-cased into a buffer on the stack.

use std::collections::HashMap;
use std::ops::Range;

use crate::config::{HostMatch, RouteConfig, SiteConfig, UnknownHost};

/// The longest host looked up; a longer one is no site's (RFC 1035: 253, plus a final dot).
const MAX_HOST: usize = 256;

/// A listener's sites: each site's routes (a range of the listener's routes) and its names.
#[derive(Debug)]
pub(crate) struct Sites {
    /// Site `i`'s routes: `routes[spans[i]]`.
    spans: Vec<Range<usize>>,
    /// The site names, in order (logs, the status page).
    pub names: Vec<Box<str>>,
    /// Exact names (lower case) to their site.
    exact: HashMap<Box<[u8]>, u32>,
    /// `.example.com` (for `*.example.com`) to its site.
    wildcards: HashMap<Box<[u8]>, u32>,
    default: Option<u32>,
    /// The routes outside any site: `routes[..outside]`.
    outside: usize,
    /// What a host no site names gets when there is no default site: None, the routes outside.
    unknown: Option<u16>,
}

/// Where a request's routes are looked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Choice {
    /// The routes of site `site` (None: the routes outside any site): the indices of the
    /// listener's routes to try, in order.
    Routes {
        site: Option<u32>,
        routes: Range<usize>,
    },
    /// No site: answer this status (404, 421).
    Status(u16),
}

impl Sites {
    /// Compiles `sites`, whose routes are those of `routes` tagged with their index (after the
    /// routes outside any site, grouped by site in order, as the loader puts them).
    pub(crate) fn build(
        sites: &[SiteConfig],
        routes: &[RouteConfig],
        unknown: UnknownHost,
    ) -> Sites {
        let outside = routes.iter().take_while(|r| r.site.is_none()).count();
        let spans = (0..sites.len())
            .map(|s| {
                let mine = |r: &RouteConfig| r.site == Some(s as u32);
                let start = routes.iter().position(mine).unwrap_or(routes.len());
                let len = routes[start..].iter().take_while(|r| mine(r)).count();
                start..start + len
            })
            .collect();
        let mut exact = HashMap::new();
        let mut wildcards = HashMap::new();
        for (i, site) in sites.iter().enumerate() {
            for n in &site.names {
                let (map, key) = match n {
                    HostMatch::Exact(h) => (&mut exact, h),
                    HostMatch::Suffix(s) => (&mut wildcards, s),
                };
                map.entry(key.to_ascii_lowercase().into_bytes().into_boxed_slice())
                    .or_insert(i as u32);
            }
        }
        Sites {
            spans,
            names: sites.iter().map(|s| s.name.as_str().into()).collect(),
            exact,
            wildcards,
            default: sites.iter().position(|s| s.default).map(|i| i as u32),
            outside,
            unknown: unknown.status(),
        }
    }

    /// The site that names `host` (a host name without port or final dot: `route::host_name`):
    /// its exact name, else the longest `*.suffix` it is under. None: no site names it.
    pub(crate) fn named(&self, host: &[u8]) -> Option<u32> {
        let mut buf = [0u8; MAX_HOST];
        let lower = buf.get_mut(..host.len())?;
        lower.copy_from_slice(host);
        lower.make_ascii_lowercase();
        if let Some(&i) = self.exact.get(&*lower) {
            return Some(i);
        }
        // `.b.example.com`, then `.example.com`, then `.com`: the first found is the longest.
        (1..lower.len())
            .filter(|&i| lower[i] == b'.')
            .find_map(|i| self.wildcards.get(&lower[i..]).copied())
    }

    /// Where a request for `host` (None: it has none) looks for its route.
    pub(crate) fn choose(&self, host: Option<&[u8]>) -> Choice {
        let site = host.and_then(|h| self.named(h)).or(self.default);
        match (site, self.unknown) {
            (Some(s), _) => Choice::Routes {
                site: Some(s),
                routes: self.spans[s as usize].clone(),
            },
            (None, Some(status)) => Choice::Status(status),
            (None, None) => Choice::Routes {
                site: None,
                routes: 0..self.outside,
            },
        }
    }

    /// The site a request was served by, for its access-log line: the site of `route` (an
    /// index into the listener's routes) when it matched one, else the site its `host` chose
    /// (a site whose routes all missed answers 404 itself). None: no site.
    pub(crate) fn site_of(&self, route: Option<usize>, host: Option<&[u8]>) -> Option<u32> {
        if let Some(i) = route {
            return self
                .spans
                .iter()
                .position(|s| s.contains(&i))
                .map(|s| s as u32);
        }
        match self.choose(host) {
            Choice::Routes { site, .. } => site,
            Choice::Status(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A site called after its first name, with `names` (`*.x` for wildcards).
    fn site(names: &[&str], default: bool) -> SiteConfig {
        SiteConfig {
            name: names[0].into(),
            names: names
                .iter()
                .map(|n| match n.strip_prefix('*') {
                    Some(suffix) => HostMatch::Suffix(suffix.into()),
                    None => HostMatch::Exact((*n).into()),
                })
                .collect(),
            default,
            certs: Vec::new(),
            log: None,
        }
    }

    /// `outside` routes outside any site, then `per_site[i]` routes for site i.
    fn routes(outside: usize, per_site: &[usize]) -> Vec<RouteConfig> {
        let mut out: Vec<RouteConfig> = (0..outside)
            .map(|i| RouteConfig::any(format!("out-{i}")))
            .collect();
        for (s, &n) in per_site.iter().enumerate() {
            for i in 0..n {
                let mut r = RouteConfig::any(format!("s{s}-{i}"));
                r.site = Some(s as u32);
                out.push(r);
            }
        }
        out
    }

    fn routes_of(site: u32, routes: Range<usize>) -> Choice {
        Choice::Routes {
            site: Some(site),
            routes,
        }
    }

    #[test]
    fn exact_names_win_then_the_longest_wildcard_then_the_default() {
        let sites = [
            site(&["a.test"], false),
            site(&["b.test", "*.b.test"], false),
            site(&["*.x.b.test"], false),
            site(&["www.x.b.test"], false),
            site(&["d.test"], true),
        ];
        let s = Sites::build(&sites, &routes(2, &[1, 2, 1, 1, 1]), UnknownHost::Default);
        assert_eq!(s.choose(Some(b"A.TEST")), routes_of(0, 2..3));
        assert_eq!(s.choose(Some(b"b.test")), routes_of(1, 3..5));
        assert_eq!(s.choose(Some(b"w.b.test")), routes_of(1, 3..5));
        assert_eq!(s.choose(Some(b"deep.x.b.test")), routes_of(2, 5..6));
        assert_eq!(s.choose(Some(b"www.x.b.test")), routes_of(3, 6..7));
        assert_eq!(s.choose(Some(b"xb.test")), routes_of(4, 7..8));
        assert_eq!(s.choose(None), routes_of(4, 7..8));
    }

    #[test]
    fn a_request_is_its_routes_site_else_its_hosts() {
        let sites = [site(&["a.test"], false), site(&["b.test"], false)];
        let s = Sites::build(&sites, &routes(2, &[2, 1]), UnknownHost::Default);
        assert_eq!(
            s.site_of(Some(0), Some(b"a.test")),
            None,
            "outside any site"
        );
        assert_eq!(s.site_of(Some(3), None), Some(0));
        assert_eq!(
            s.site_of(Some(4), Some(b"a.test")),
            Some(1),
            "the route wins"
        );
        assert_eq!(
            s.site_of(None, Some(b"B.test")),
            Some(1),
            "its routes all missed"
        );
        assert_eq!(s.site_of(None, Some(b"c.test")), None);
        let s404 = Sites::build(&sites, &routes(0, &[1, 1]), UnknownHost::NotFound);
        assert_eq!(s404.site_of(None, Some(b"c.test")), None);
    }

    #[test]
    fn without_a_default_an_unknown_host_gets_the_outside_routes_or_its_status() {
        let sites = [site(&["a.test"], false)];
        let config = routes(3, &[1]);
        let outside = Sites::build(&sites, &config, UnknownHost::Default);
        let want = Choice::Routes {
            site: None,
            routes: 0..3,
        };
        assert_eq!(outside.choose(Some(b"b.test")), want);
        assert_eq!(outside.choose(None), want);
        let s421 = Sites::build(&sites, &config, UnknownHost::Misdirected);
        assert_eq!(s421.choose(Some(b"b.test")), Choice::Status(421));
        let s404 = Sites::build(&sites, &config, UnknownHost::NotFound);
        assert_eq!(s404.choose(Some(b"b.test")), Choice::Status(404));
        // A wildcard does not take its own domain, nor a host longer than any name.
        assert_eq!(s404.choose(Some(&[b'a'; 300])), Choice::Status(404));
    }

    /// The site a host gets by the rule itself: the exact name, else the wildcard with the most
    /// labels the host is under, else none.
    fn reference(sites: &[SiteConfig], host: &str) -> Option<u32> {
        let host = host.to_ascii_lowercase();
        let exact = sites.iter().position(|s| {
            s.names
                .iter()
                .any(|n| matches!(n, HostMatch::Exact(e) if *e == host))
        });
        exact
            .or_else(|| {
                sites
                    .iter()
                    .enumerate()
                    .flat_map(|(i, s)| s.names.iter().map(move |n| (i, n)))
                    .filter_map(|(i, n)| match n {
                        HostMatch::Suffix(sfx)
                            if host.len() > sfx.len() && host.ends_with(sfx.as_str()) =>
                        {
                            Some((sfx.len(), i))
                        }
                        _ => None,
                    })
                    .max_by_key(|&(len, i)| (len, std::cmp::Reverse(i)))
                    .map(|(_, i)| i)
            })
            .map(|i| i as u32)
    }

    fn label() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["a", "b", "www", "x", "api"]).prop_map(String::from)
    }

    fn name() -> impl Strategy<Value = String> {
        prop::collection::vec(label(), 1..4).prop_map(|l| l.join("."))
    }

    proptest! {
        #[test]
        fn the_site_named_is_the_exact_name_else_the_longest_wildcard(
            names in prop::collection::vec((name(), any::<bool>()), 1..8),
            host in name(),
            upper in any::<bool>(),
        ) {
            // Each name once (the loader refuses a name in two sites).
            let mut seen = std::collections::HashSet::new();
            let sites: Vec<SiteConfig> = names
                .iter()
                .filter(|(n, wild)| seen.insert((n.clone(), *wild)))
                .map(|(n, wild)| site(&[&if *wild { format!("*.{n}") } else { n.clone() }], false))
                .collect();
            let s = Sites::build(&sites, &routes(0, &vec![1; sites.len()]), UnknownHost::NotFound);
            let asked = if upper { host.to_ascii_uppercase() } else { host.clone() };
            prop_assert_eq!(s.named(asked.as_bytes()), reference(&sites, &host));
        }
    }
}
