//! Pen's access control lists: ten numbered lists (0-9) of `permit|deny` entries, checked in order.
//! The first entry that matches decides; when none matches, the answer is the opposite of the last
//! entry (a list ending in `permit X` denies everyone else); an empty list permits everyone.
//!
//! Entries are `IPv4 [MASK]` (dotted mask, default /32), `IPv4/LEN`, or `IPv6[/LEN]` (default /128).
//! An IPv4 client seen as an IPv4-mapped IPv6 address is matched as IPv4, and so is an entry written
//! in that form (`::ffff:127.0.0.1`, `::ffff:0:0/96`): both sides are canonicalised the same way.
//! An IPv6 entry shorter than /96 that covers the mapped range (`::/0`) matches IPv4 clients too.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::{Index, IndexMut};
use std::sync::Arc;

use crate::geoip::Db;

use serde::Serialize;

/// How many lists there are (numbered 0 to 9, as in Pen).
pub(crate) const LISTS: usize = 10;

/// One network: an address and a prefix length; or, in an ACL entry, a country (Pen's
/// `country CC`, matched through the GeoIP database).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Net {
    V4(u32, u8),
    V6(u128, u8),
    /// An ISO 3166-1 alpha-2 code, upper case.
    Country([u8; 2]),
}

impl Net {
    /// Whether `ip` is in this network (a country is never matched here: see
    /// [`Acl::permits_with`]).
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        match (self, canonical(ip)) {
            (Net::V4(net, len), IpAddr::V4(a)) => {
                let mask = if *len == 0 { 0 } else { u32::MAX << (32 - len) };
                u32::from(a) & mask == net & mask
            }
            (Net::V6(net, len), IpAddr::V6(a)) => v6_contains(*net, *len, a),
            // Only a prefix shorter than /96 can still cover mapped addresses: longer mapped
            // entries were made IPv4 when parsed.
            (Net::V6(net, len), IpAddr::V4(a)) => v6_contains(*net, *len, a.to_ipv6_mapped()),
            _ => false,
        }
    }
}

fn v6_contains(net: u128, len: u8, a: Ipv6Addr) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len.min(128))
    };
    u128::from(a) & mask == net & mask
}

impl fmt::Display for Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Net::V4(a, len) => write!(f, "{}/{len}", Ipv4Addr::from(*a)),
            Net::V6(a, len) => write!(f, "{}/{len}", Ipv6Addr::from(*a)),
            Net::Country([a, b]) => write!(f, "country {}{}", char::from(*a), char::from(*b)),
        }
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// One entry of a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub permit: bool,
    pub net: Net,
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let word = if self.permit { "permit" } else { "deny" };
        write!(f, "{word} {}", self.net)
    }
}

/// One list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Acl {
    pub entries: Vec<Entry>,
}

impl Acl {
    /// Whether the list lets `ip` through (Pen's rule; see the module notes); country entries
    /// match nothing (no GeoIP database).
    #[cfg(test)]
    pub(crate) fn permits(&self, ip: IpAddr) -> bool {
        self.permits_with(ip, None)
    }

    /// Whether the list lets `ip` through, its country (looked up at most once, only when a
    /// country entry is reached) from `geo`. An address the database has no country for
    /// matches no country entry.
    pub(crate) fn permits_with(&self, ip: IpAddr, geo: Option<&Db>) -> bool {
        let mut country: Option<Option<[u8; 2]>> = None;
        let mut matches = |net: &Net| match net {
            Net::Country(cc) => {
                *country.get_or_insert_with(|| geo.and_then(|g| g.country(ip))) == Some(*cc)
            }
            n => n.contains(ip),
        };
        match self.entries.iter().find(|e| matches(&e.net)) {
            Some(e) => e.permit,
            None => self.entries.last().is_none_or(|last| !last.permit),
        }
    }

    /// Whether a country entry is in the list.
    pub(crate) fn has_country(&self) -> bool {
        self.entries
            .iter()
            .any(|e| matches!(e.net, Net::Country(_)))
    }
}

/// A list's number, 0 to 9. Made only by [`parse_list`] and [`AclId::new`], which check it, so
/// indexing [`Acls`] with it cannot go out of bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub(crate) struct AclId(u8);

impl AclId {
    /// List `n`, if there is one.
    pub(crate) fn new(n: u8) -> Option<AclId> {
        ((n as usize) < LISTS).then_some(AclId(n))
    }

    /// The number, as written in the control language and the TOML file.
    pub(crate) fn get(self) -> u8 {
        self.0
    }
}

impl fmt::Display for AclId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The GeoIP database country entries are checked against (`geoip = "FILE"`), read with the
/// configuration: a reload reads it again, so two loads differ even when the file did not change
/// (the pools are rebuilt with the database just read).
#[derive(Clone, Debug)]
pub(crate) struct GeoDb {
    pub path: std::path::PathBuf,
    pub db: Arc<Db>,
}

impl PartialEq for GeoDb {
    fn eq(&self, other: &GeoDb) -> bool {
        self.path == other.path && Arc::ptr_eq(&self.db, &other.db)
    }
}

impl Eq for GeoDb {}

/// The ten lists, as configured, indexed by [`AclId`], and the GeoIP database their country
/// entries need.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Acls {
    lists: [Acl; LISTS],
    pub geo: Option<GeoDb>,
}

impl Acls {
    /// Whether list `n` lets `ip` through, countries looked up in the GeoIP database.
    pub(crate) fn permits(&self, n: AclId, ip: IpAddr) -> bool {
        self[n].permits_with(ip, self.geo.as_ref().map(|g| &*g.db))
    }

    /// The first list with a country entry.
    pub(crate) fn with_country(&self) -> Option<AclId> {
        self.iter().find(|(_, l)| l.has_country()).map(|(n, _)| n)
    }

    /// Every list with its number, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (AclId, &Acl)> {
        (0u8..).map(AclId).zip(self.lists.iter())
    }

    /// Every list number, in order.
    pub(crate) fn ids() -> impl Iterator<Item = AclId> {
        (0u8..LISTS as u8).map(AclId)
    }
}

impl Index<AclId> for Acls {
    type Output = Acl;

    fn index(&self, id: AclId) -> &Acl {
        &self.lists[usize::from(id.0)]
    }
}

impl IndexMut<AclId> for Acls {
    fn index_mut(&mut self, id: AclId) -> &mut Acl {
        &mut self.lists[usize::from(id.0)]
    }
}

/// Parses a list number `0`..`9`.
pub(crate) fn parse_list(s: &str) -> Result<AclId, String> {
    s.parse::<u8>()
        .ok()
        .and_then(AclId::new)
        .ok_or_else(|| format!("'{s}' is not an ACL number (0-9)"))
}

/// Parses the words after `acl N`: `permit|deny ADDR [MASK]`.
pub(crate) fn parse_entry(words: &[&str]) -> Result<Entry, String> {
    let (permit, rest) = match words.split_first() {
        Some((&"permit", rest)) => (true, rest),
        Some((&"deny", rest)) => (false, rest),
        Some((w, _)) => return Err(format!("'{w}' is not permit or deny")),
        None => return Err("needs permit or deny and an address".into()),
    };
    let net = match rest {
        ["country", cc] => parse_country(cc)?,
        ["country", ..] => return Err("country needs one two-letter code (e.g. GB)".into()),
        [addr] => parse_net(addr, None)?,
        [addr, mask] => parse_net(addr, Some(mask))?,
        [] => return Err("needs an address".into()),
        [_, _, extra, ..] => return Err(format!("unexpected '{extra}'")),
    };
    Ok(Entry { permit, net })
}

/// A country code: two ASCII letters (ISO 3166-1 alpha-2), either case.
fn parse_country(cc: &str) -> Result<Net, String> {
    match cc.as_bytes() {
        [a, b] if a.is_ascii_alphabetic() && b.is_ascii_alphabetic() => Ok(Net::Country([
            a.to_ascii_uppercase(),
            b.to_ascii_uppercase(),
        ])),
        _ => Err(format!("'{cc}' is not a two-letter country code")),
    }
}

/// `ADDR`, `ADDR/LEN` or (IPv4) `ADDR MASK`: an ACL entry's network, and a `trusted_proxies` entry.
pub(crate) fn parse_net(addr: &str, mask: Option<&str>) -> Result<Net, String> {
    let (ip, len) = match addr.split_once('/') {
        Some((ip, len)) => (ip, Some(len)),
        None => (addr, None),
    };
    let ip: IpAddr = ip
        .parse()
        .map_err(|_| format!("'{ip}' is not an IP address"))?;
    match ip {
        IpAddr::V4(v4) => {
            let len = match (len, mask) {
                (Some(_), Some(m)) => {
                    return Err(format!("'{addr}' has a length and a mask '{m}'"))
                }
                (Some(len), None) => prefix(len, 32)?,
                (None, Some(m)) => dotted_mask(m)?,
                (None, None) => 32,
            };
            Ok(Net::V4(u32::from(v4), len))
        }
        IpAddr::V6(v6) => {
            if let Some(m) = mask {
                return Err(format!("unexpected '{m}' (IPv6 takes ADDR/LEN)"));
            }
            let len = len.map_or(Ok(128), |l| prefix(l, 128))?;
            // `::ffff:a.b.c.d/96+n` is the IPv4 network a.b.c.d/n, as clients are matched.
            match v6.to_ipv4_mapped() {
                Some(v4) if len >= 96 => Ok(Net::V4(u32::from(v4), len - 96)),
                _ => Ok(Net::V6(u128::from(v6), len)),
            }
        }
    }
}

fn prefix(s: &str, max: u8) -> Result<u8, String> {
    s.parse::<u8>()
        .ok()
        .filter(|&n| n <= max)
        .ok_or_else(|| format!("'/{s}' is not a prefix length (0-{max})"))
}

fn dotted_mask(s: &str) -> Result<u8, String> {
    let m: Ipv4Addr = s
        .parse()
        .map_err(|_| format!("'{s}' is not a dotted mask"))?;
    let m = u32::from(m);
    let len = m.leading_ones();
    if m.checked_shl(len).unwrap_or(0) != 0 {
        return Err(format!("'{s}' is not a contiguous mask"));
    }
    Ok(len as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(lines: &[&str]) -> Acl {
        Acl {
            entries: lines
                .iter()
                .map(|l| parse_entry(&l.split_whitespace().collect::<Vec<_>>()).unwrap())
                .collect(),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn first_match_wins_and_no_match_is_the_opposite_of_the_last_entry() {
        let a = acl(&["deny 10.1.0.0 255.255.0.0", "permit 10.0.0.0/8"]);
        assert!(!a.permits(ip("10.1.2.3")));
        assert!(a.permits(ip("10.2.3.4")));
        assert!(
            !a.permits(ip("192.168.1.1")),
            "last entry permits, so others are denied"
        );
        let b = acl(&["deny 127.0.0.2"]);
        assert!(!b.permits(ip("127.0.0.2")));
        assert!(b.permits(ip("127.0.0.1")));
        assert!(Acl::default().permits(ip("1.2.3.4")));
    }

    #[test]
    fn ipv6_prefixes_and_mapped_ipv4_clients() {
        let a = acl(&["permit ::1", "permit 2001:db8::/32"]);
        assert!(a.permits(ip("::1")));
        assert!(a.permits(ip("2001:db8:1::5")));
        assert!(!a.permits(ip("2001:db9::1")));
        let b = acl(&["deny 127.0.0.0/8"]);
        assert!(!b.permits(ip("::ffff:127.0.0.1")));
    }

    #[test]
    fn acl_entry_in_ipv4_mapped_form_denies_the_ipv4_client() {
        for entry in [
            "deny ::ffff:127.0.0.1",
            "deny ::ffff:0:0/96",
            "deny ::ffff:7f00:1",
            "deny ::ffff:127.0.0.0/104",
        ] {
            let a = acl(&[entry]);
            assert!(!a.permits(ip("127.0.0.1")), "{entry}: IPv4 client");
            assert!(!a.permits(ip("::ffff:127.0.0.1")), "{entry}: mapped client");
            assert!(
                a.permits(ip("::1")),
                "{entry}: other IPv6 clients untouched"
            );
        }
        assert_eq!(
            acl(&["deny ::ffff:7f00:1"]).entries[0].to_string(),
            "deny 127.0.0.1/32"
        );
        assert_eq!(
            acl(&["deny ::ffff:0:0/96"]).entries[0].to_string(),
            "deny 0.0.0.0/0"
        );
        // A short IPv6 prefix covering the mapped range covers IPv4 clients as well.
        assert!(!acl(&["deny ::/0"]).permits(ip("10.1.2.3")));
        assert!(acl(&["deny 2001:db8::/32"]).permits(ip("10.1.2.3")));
        // The mapped entry and the client agree whatever form each takes.
        let b = acl(&["permit ::ffff:10.0.0.0/104"]);
        assert!(b.permits(ip("10.9.8.7")));
        assert!(!b.permits(ip("11.0.0.1")));
    }

    #[test]
    fn bad_entries_name_what_is_wrong() {
        let e = |l: &str| parse_entry(&l.split_whitespace().collect::<Vec<_>>()).unwrap_err();
        assert!(e("allow 1.2.3.4").contains("allow"));
        assert!(e("permit 1.2.3").contains("1.2.3"));
        assert!(e("permit 1.2.3.4 255.0.255.0").contains("contiguous"));
        assert!(e("permit 10.0.0.0/33").contains("/33"));
        assert!(e("permit ::1 64").contains("64"));
        assert!(parse_list("10").is_err());
        assert!(parse_list("-1").is_err());
    }

    #[test]
    fn list_numbers_are_zero_to_nine_and_index_the_lists() {
        assert_eq!(parse_list("9").map(AclId::get), Ok(9));
        assert_eq!(AclId::new(10), None);
        let mut lists = Acls::default();
        let nine = AclId::new(9).unwrap();
        lists[nine]
            .entries
            .push(parse_entry(&["deny", "10.0.0.1"]).unwrap());
        let numbers: Vec<u8> = lists.iter().map(|(n, _)| n.get()).collect();
        assert_eq!(numbers, (0..10).collect::<Vec<u8>>());
        assert!(!lists[nine].permits("10.0.0.1".parse().unwrap()));
        assert_eq!(nine.to_string(), "9");
    }
}
