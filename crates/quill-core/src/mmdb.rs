//! A MaxMind DB reader for one question: the ISO country code of an address (issue 13, point 5:
//! `acl N permit|deny country CC`). The format (MaxMind DB 2.0, the `.mmdb` files GeoLite2 and
//! GeoIP2 ship as) is a binary search tree over the address bits whose leaves point into a data
//! section of typed values; the metadata map sits at the end of the file after a marker.
//!
//! Pure: the file's bytes are given; no I/O, no clock, and a lookup allocates nothing: it walks
//! the tree, then reads `country.iso_code` in place (map keys compared as bytes, other values
//! skipped without being decoded). Every offset is bounds-checked and nesting is bounded, so a
//! corrupt or hostile file gives an error or no country, never a panic.

use std::fmt;
use std::net::IpAddr;

/// Ends the data before the metadata map.
const METADATA_MARKER: &[u8] = b"\xab\xcd\xefMaxMind.com";
/// The metadata is in the last 128 KiB of the file.
const METADATA_MAX: usize = 128 * 1024;
/// Bytes of zeros between the search tree and the data section.
const DATA_SEPARATOR: usize = 16;
/// Deepest nesting of maps and arrays a lookup walks through.
const MAX_DEPTH: u32 = 32;

/// Why bytes are not a usable MaxMind DB.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DbError {
    /// No metadata marker in the last 128 KiB.
    NoMetadata,
    /// The metadata map is malformed or lacks `node_count`, `record_size` or `ip_version`.
    Metadata(&'static str),
    /// A record size other than 24, 28 or 32 bits.
    RecordSize(u64),
    /// An IP version other than 4 or 6.
    IpVersion(u64),
    /// The search tree does not fit before the metadata.
    Truncated,
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DbError::NoMetadata => f.write_str("not a MaxMind DB (no metadata marker)"),
            DbError::Metadata(what) => write!(f, "bad MaxMind DB metadata: {what}"),
            DbError::RecordSize(n) => write!(f, "unsupported MaxMind DB record size {n}"),
            DbError::IpVersion(n) => write!(f, "unsupported MaxMind DB ip_version {n}"),
            DbError::Truncated => f.write_str("MaxMind DB search tree truncated"),
        }
    }
}

/// A MaxMind DB in memory.
pub struct Db {
    bytes: Vec<u8>,
    node_count: u32,
    record_size: u32,
    ip_version: u32,
    /// Where the data section starts (after the tree and the separator), and where it ends.
    data_start: usize,
    data_end: usize,
    /// The node reached after 96 zero bits in an IPv6 tree (where IPv4 addresses start).
    ipv4_start: u32,
    database_type: String,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Db({}, {} bytes, {} nodes)",
            self.database_type,
            self.bytes.len(),
            self.node_count
        )
    }
}

/// One decoded value, borrowed: only what a lookup looks at is kept.
#[derive(Clone, Copy, Debug)]
enum Val<'a> {
    Str(&'a [u8]),
    Uint(u64),
    /// A map of `n` pairs starting at the offset.
    Map(usize, usize),
    Other,
}

/// A typed-value reader over one section (the data section, or the metadata).
struct Section<'a> {
    bytes: &'a [u8],
}

impl<'a> Section<'a> {
    fn byte(&self, at: usize) -> Option<u8> {
        self.bytes.get(at).copied()
    }

    fn uint(&self, at: usize, len: usize) -> Option<u64> {
        let b = self.bytes.get(at..at.checked_add(len)?)?;
        if len > 8 {
            return None;
        }
        Some(b.iter().fold(0u64, |n, &x| (n << 8) | u64::from(x)))
    }

    /// The control byte at `at`: (type, size, where the payload starts). Pointers come back as
    /// type 1 with the target offset as size.
    fn head(&self, mut at: usize) -> Option<(u8, usize, usize)> {
        let ctrl = self.byte(at)?;
        at += 1;
        let mut ty = ctrl >> 5;
        if ty == 1 {
            let ss = usize::from((ctrl >> 3) & 3);
            let vvv = u64::from(ctrl & 7);
            let target = match ss {
                0 => (vvv << 8) | self.uint(at, 1)?,
                1 => ((vvv << 16) | self.uint(at, 2)?) + 2048,
                2 => ((vvv << 24) | self.uint(at, 3)?) + 526_336,
                _ => self.uint(at, 4)?,
            };
            return Some((1, usize::try_from(target).ok()?, at + ss + 1));
        }
        if ty == 0 {
            ty = 7u8.checked_add(self.byte(at)?)?;
            at += 1;
        }
        let size = usize::from(ctrl & 0x1f);
        let (size, at) = match size {
            0..=28 => (size, at),
            29 => (29 + self.uint(at, 1)? as usize, at + 1),
            30 => (285 + self.uint(at, 2)? as usize, at + 2),
            _ => (65_821 + self.uint(at, 3)? as usize, at + 3),
        };
        Some((ty, size, at))
    }

    /// The value at `at` (a pointer followed, once) and the offset just past it (past the
    /// pointer, not its target).
    fn value(&self, at: usize, depth: u32) -> Option<(Val<'a>, usize)> {
        let (ty, size, payload) = self.head(at)?;
        if ty == 1 {
            let (target_ty, _, _) = self.head(size)?;
            // A pointer to a pointer is invalid (the spec says so).
            if target_ty == 1 {
                return None;
            }
            let (v, _) = self.value(size, depth)?;
            return Some((v, payload));
        }
        let end = |n: usize| payload.checked_add(n).filter(|&e| e <= self.bytes.len());
        match ty {
            2 => Some((Val::Str(self.bytes.get(payload..end(size)?)?), end(size)?)),
            5 | 6 | 9 if size <= 8 => Some((Val::Uint(self.uint(payload, size)?), end(size)?)),
            3 | 4 | 8 | 10 | 15 => Some((Val::Other, end(size)?)),
            7 => {
                let next = self.skip_items(payload, size.checked_mul(2)?, depth)?;
                Some((Val::Map(size, payload), next))
            }
            11 => Some((Val::Other, self.skip_items(payload, size, depth)?)),
            14 => Some((Val::Other, payload)),
            _ => None,
        }
    }

    /// Skips `n` values from `at`; returns the offset after them.
    fn skip_items(&self, mut at: usize, n: usize, depth: u32) -> Option<usize> {
        if depth >= MAX_DEPTH || n > self.bytes.len() {
            return None;
        }
        for _ in 0..n {
            at = self.value(at, depth + 1)?.1;
        }
        Some(at)
    }

    /// The value of `key` in the map of `n` pairs at `at`.
    fn get(&self, n: usize, mut at: usize, key: &[u8], depth: u32) -> Option<Val<'a>> {
        for _ in 0..n {
            let (k, after_key) = self.value(at, depth + 1)?;
            let (v, after_value) = self.value(after_key, depth + 1)?;
            if matches!(k, Val::Str(s) if s == key) {
                return Some(v);
            }
            at = after_value;
        }
        None
    }
}

impl Db {
    /// Reads a database from its bytes: the metadata and the shape of the tree are checked
    /// here; lookups check the rest as they go.
    pub fn new(bytes: Vec<u8>) -> Result<Db, DbError> {
        let tail_from = bytes.len().saturating_sub(METADATA_MAX);
        let marker = bytes[tail_from..]
            .windows(METADATA_MARKER.len())
            .rposition(|w| w == METADATA_MARKER)
            .ok_or(DbError::NoMetadata)?;
        let meta_start = tail_from + marker + METADATA_MARKER.len();
        let meta = Section {
            bytes: &bytes[meta_start..],
        };
        let Some((Val::Map(n, at), _)) = meta.value(0, 0) else {
            return Err(DbError::Metadata("not a map"));
        };
        let uint = |key: &'static str| match meta.get(n, at, key.as_bytes(), 0) {
            Some(Val::Uint(v)) => Ok(v),
            _ => Err(DbError::Metadata(key)),
        };
        let node_count = uint("node_count")?;
        let record_size = uint("record_size")?;
        let ip_version = uint("ip_version")?;
        let database_type = match meta.get(n, at, b"database_type", 0) {
            Some(Val::Str(s)) => String::from_utf8_lossy(s).into_owned(),
            _ => String::new(),
        };
        if !matches!(record_size, 24 | 28 | 32) {
            return Err(DbError::RecordSize(record_size));
        }
        if !matches!(ip_version, 4 | 6) {
            return Err(DbError::IpVersion(ip_version));
        }
        let node_count = u32::try_from(node_count).map_err(|_| DbError::Truncated)?;
        let tree_size = (node_count as usize)
            .checked_mul(record_size as usize / 4)
            .ok_or(DbError::Truncated)?;
        let data_start = tree_size
            .checked_add(DATA_SEPARATOR)
            .ok_or(DbError::Truncated)?;
        let data_end = tail_from + marker;
        if data_start > data_end {
            return Err(DbError::Truncated);
        }
        let mut db = Db {
            bytes,
            node_count,
            record_size: record_size as u32,
            ip_version: ip_version as u32,
            data_start,
            data_end,
            ipv4_start: 0,
            database_type,
        };
        if db.ip_version == 6 {
            let mut node = 0;
            for _ in 0..96 {
                if node >= db.node_count {
                    break;
                }
                node = db.record(node, 0).ok_or(DbError::Truncated)?;
            }
            db.ipv4_start = node;
        }
        Ok(db)
    }

    /// The metadata's `database_type` (e.g. `GeoIP2-Country`).
    pub fn database_type(&self) -> &str {
        &self.database_type
    }

    /// The left (`bit` 0) or right record of `node`.
    fn record(&self, node: u32, bit: u8) -> Option<u32> {
        let n = node as usize;
        let b = |i: usize| self.bytes.get(i).copied().map(u32::from);
        match self.record_size {
            24 => {
                let at = n.checked_mul(6)? + usize::from(bit) * 3;
                Some((b(at)? << 16) | (b(at + 1)? << 8) | b(at + 2)?)
            }
            28 => {
                let at = n.checked_mul(7)?;
                let middle = b(at + 3)?;
                if bit == 0 {
                    Some(((middle & 0xf0) << 20) | (b(at)? << 16) | (b(at + 1)? << 8) | b(at + 2)?)
                } else {
                    Some(
                        ((middle & 0x0f) << 24)
                            | (b(at + 4)? << 16)
                            | (b(at + 5)? << 8)
                            | b(at + 6)?,
                    )
                }
            }
            _ => {
                let at = n.checked_mul(8)? + usize::from(bit) * 4;
                Some((b(at)? << 24) | (b(at + 1)? << 16) | (b(at + 2)? << 8) | b(at + 3)?)
            }
        }
    }

    /// The data-section offset of the record for `ip`, if the database has one.
    fn data_of(&self, ip: IpAddr) -> Option<usize> {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let (bits, count, mut node): (u128, u32, u32) = match (ip, self.ip_version) {
            (IpAddr::V4(v4), 4) => (u128::from(u32::from(v4)) << 96, 32, 0),
            (IpAddr::V4(v4), _) => (u128::from(u32::from(v4)) << 96, 32, self.ipv4_start),
            (IpAddr::V6(v6), 6) => (u128::from(v6), 128, 0),
            (IpAddr::V6(_), _) => return None,
        };
        for i in 0..count {
            if node >= self.node_count {
                break;
            }
            let bit = ((bits >> (127 - i)) & 1) as u8;
            node = self.record(node, bit)?;
        }
        if node <= self.node_count {
            // Equal: no data for this address; below: the tree ended early (corrupt).
            return None;
        }
        let off = (node - self.node_count) as usize;
        off.checked_sub(DATA_SEPARATOR)
    }

    /// The ISO 3166-1 alpha-2 code (`country.iso_code`) of `ip`, as two upper-case ASCII
    /// letters; None when the database has none for it (or the record is malformed).
    pub fn country(&self, ip: IpAddr) -> Option<[u8; 2]> {
        let off = self.data_of(ip)?;
        let data = Section {
            bytes: self.bytes.get(self.data_start..self.data_end)?,
        };
        let Val::Map(n, at) = data.value(off, 0)?.0 else {
            return None;
        };
        let Val::Map(n, at) = data.get(n, at, b"country", 0)? else {
            return None;
        };
        match data.get(n, at, b"iso_code", 1)? {
            Val::Str(&[a, b]) if a.is_ascii_uppercase() && b.is_ascii_uppercase() => Some([a, b]),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
