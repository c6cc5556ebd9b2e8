//! Tests of `mmdb` against MaxMind's published test database (tests/data/geoip/, with the JSON
//! source in MaxMind-DB's test-data saying which network is which country), and on damaged
//! copies of it: truncated, bytes flipped, arbitrary bytes. None may panic.

use proptest::prelude::*;

use super::*;

const TEST_DB: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/data/geoip/GeoIP2-Country-Test.mmdb"
));

fn db() -> Db {
    Db::new(TEST_DB.to_vec()).unwrap()
}

fn cc(db: &Db, ip: &str) -> Option<String> {
    db.country(ip.parse().unwrap())
        .map(|c| String::from_utf8(c.to_vec()).unwrap())
}

#[test]
fn test_database_reads_its_metadata() {
    assert_eq!(db().database_type(), "GeoIP2-Country");
}

#[test]
fn countries_of_the_test_networks() {
    let db = db();
    assert_eq!(cc(&db, "81.2.69.142").as_deref(), Some("GB"));
    assert_eq!(cc(&db, "81.2.69.160").as_deref(), Some("GB"));
    assert_eq!(cc(&db, "2.125.160.216").as_deref(), Some("GB"));
    assert_eq!(cc(&db, "89.160.20.112").as_deref(), Some("SE"));
    assert_eq!(cc(&db, "216.160.83.56").as_deref(), Some("US"));
    assert_eq!(cc(&db, "67.43.156.1").as_deref(), Some("BT"));
    assert_eq!(cc(&db, "2001:218::1").as_deref(), Some("JP"));
    // An IPv4-mapped IPv6 address (a dual-stack listener's view) reads as IPv4.
    assert_eq!(cc(&db, "::ffff:81.2.69.142").as_deref(), Some("GB"));
    // A network with a record but no country, and addresses the database does not list.
    assert_eq!(cc(&db, "214.1.1.1"), None);
    assert_eq!(cc(&db, "10.0.0.1"), None);
    assert_eq!(cc(&db, "127.0.0.1"), None);
    assert_eq!(cc(&db, "::1"), None);
}

#[test]
fn not_a_database_is_refused() {
    assert_eq!(Db::new(b"hello".to_vec()).unwrap_err(), DbError::NoMetadata);
    assert_eq!(Db::new(Vec::new()).unwrap_err(), DbError::NoMetadata);
    // The data cut off before the metadata marker's end.
    let cut = TEST_DB[..TEST_DB.len() / 2].to_vec();
    assert!(Db::new(cut).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn damaged_databases_never_panic(flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..16),
                                     ips in proptest::collection::vec(any::<u128>(), 1..8)) {
        let mut bytes = TEST_DB.to_vec();
        for (at, b) in flips {
            let i = at % bytes.len();
            bytes[i] = b;
        }
        if let Ok(db) = Db::new(bytes) {
            for ip in ips {
                let _ = db.country(std::net::Ipv6Addr::from(ip).into());
                let _ = db.country(std::net::Ipv4Addr::from(ip as u32).into());
            }
        }
    }

    #[test]
    fn arbitrary_bytes_after_the_marker_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..200),
                                                    head in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut bytes = head;
        bytes.extend_from_slice(METADATA_MARKER);
        bytes.extend_from_slice(&tail);
        if let Ok(db) = Db::new(bytes) {
            let _ = db.country("81.2.69.142".parse().unwrap());
        }
    }
}
