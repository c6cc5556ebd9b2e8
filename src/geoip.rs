//! The country of a client address, for ACL entries `country CC`, from a MaxMind DB file
//! (`geoip = "FILE.mmdb"`). The `maxminddb` crate reads the file; a lookup walks the tree and
//! decodes only `country.iso_code`, borrowed from the database's bytes (as read in the crate's code,
//! not measured: it allocates only to describe a damaged record).

use std::fmt;
use std::net::IpAddr;

/// A MaxMind DB (GeoIP2/GeoLite2 Country or City), held in memory.
pub(crate) struct Db {
    reader: maxminddb::Reader<Vec<u8>>,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Db")
            .field("type", &self.database_type())
            .finish_non_exhaustive()
    }
}

impl Db {
    /// The database in `bytes`, its metadata checked; Err says why it is not one.
    pub(crate) fn new(bytes: Vec<u8>) -> Result<Db, String> {
        maxminddb::Reader::from_source(bytes)
            .map(|reader| Db { reader })
            .map_err(|e| format!("not a MaxMind DB ({e})"))
    }

    /// The database's type as its metadata says (`GeoIP2-Country`, `GeoLite2-City`, ...).
    pub(crate) fn database_type(&self) -> &str {
        &self.reader.metadata().database_type
    }

    /// The ISO 3166 code (upper case) of the country `ip` is in; None when the database lists
    /// none for it (or cannot be read there). An IPv4-mapped IPv6 address is looked up as IPv4.
    pub(crate) fn country(&self, ip: IpAddr) -> Option<[u8; 2]> {
        let found = self.reader.lookup(ip.to_canonical()).ok()?;
        let code: &str = found
            .decode_path(&maxminddb::path!["country", "iso_code"])
            .ok()??;
        match code.as_bytes() {
            &[a, b] => Some([a.to_ascii_uppercase(), b.to_ascii_uppercase()]),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    //! Against MaxMind's published test database (tests/data/geoip/; MaxMind-DB's test-data JSON
    //! says which network is which country).

    use super::*;

    const TEST_DB: &[u8] = include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/geoip/GeoIP2-Country-Test.mmdb"
    ));

    fn cc(db: &Db, ip: &str) -> Option<String> {
        db.country(ip.parse().unwrap())
            .map(|c| String::from_utf8(c.to_vec()).unwrap())
    }

    #[test]
    fn countries_of_the_test_networks() {
        let db = Db::new(TEST_DB.to_vec()).unwrap();
        assert_eq!(db.database_type(), "GeoIP2-Country");
        for (ip, want) in [
            ("81.2.69.142", Some("GB")),
            ("2.125.160.216", Some("GB")),
            ("89.160.20.112", Some("SE")),
            ("216.160.83.56", Some("US")),
            ("67.43.156.1", Some("BT")),
            ("2001:218::1", Some("JP")),
            // A dual-stack listener's view of an IPv4 client.
            ("::ffff:81.2.69.142", Some("GB")),
            // A network with a record but no country, and addresses not listed.
            ("214.1.1.1", None),
            ("10.0.0.1", None),
            ("127.0.0.1", None),
            ("::1", None),
        ] {
            assert_eq!(cc(&db, ip).as_deref(), want, "{ip}");
        }
    }

    #[test]
    fn what_is_not_a_database_is_refused_with_a_reason() {
        for bytes in [
            b"hello".to_vec(),
            Vec::new(),
            TEST_DB[..TEST_DB.len() / 2].to_vec(),
        ] {
            let e = Db::new(bytes).unwrap_err();
            assert!(e.starts_with("not a MaxMind DB"), "{e}");
        }
    }

    #[test]
    fn damaged_databases_never_panic() {
        // Bytes flipped all over the data section and the tree (bounded, deterministic).
        let mut rng = quill_core::rand::Rng::new(0x9e37_79b9_7f4a_7c15);
        for _ in 0..200 {
            let mut bytes = TEST_DB.to_vec();
            for _ in 0..8 {
                let x = rng.next_u64();
                let i = (x as usize) % bytes.len();
                bytes[i] = (x >> 32) as u8;
            }
            if let Ok(db) = Db::new(bytes) {
                for ip in ["81.2.69.142", "2001:218::1", "1.2.3.4", "::"] {
                    let _ = db.country(ip.parse().unwrap());
                }
            }
        }
    }
}
