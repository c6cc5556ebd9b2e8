//! Protocol versions, cipher suites and ALPN of a listener's TLS.
//!
//! Cipher suites are named as rustls names them (`TLS13_AES_128_GCM_SHA256`,
//! `TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256`) or as OpenSSL does (`TLS_AES_128_GCM_SHA256`,
//! `ECDHE-ECDSA-AES128-GCM-SHA256`), so Pen's `ssl_ciphers` lists and nginx's or HAProxy's suite
//! names work. An OpenSSL cipher *string* (`HIGH:!aNULL`) is refused: it selects suites by rules
//! whose result depends on the OpenSSL build, where a list of names says what is offered.

use rustls::crypto::CryptoProvider;
use rustls::SupportedProtocolVersion;

use super::{TlsError, TlsSettings, TlsVersion};

/// The versions from `min` up (rustls has nothing below 1.2).
pub(crate) fn versions(min: TlsVersion) -> &'static [&'static SupportedProtocolVersion] {
    static BOTH: [&SupportedProtocolVersion; 2] =
        [&rustls::version::TLS13, &rustls::version::TLS12];
    static ONLY_13: [&SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
    match min {
        TlsVersion::V1_2 => &BOTH,
        TlsVersion::V1_3 => &ONLY_13,
    }
}

/// OpenSSL's names of the suites rustls has, with rustls' names.
const OPENSSL_NAMES: [(&str, &str); 9] = [
    ("TLS_AES_128_GCM_SHA256", "TLS13_AES_128_GCM_SHA256"),
    ("TLS_AES_256_GCM_SHA384", "TLS13_AES_256_GCM_SHA384"),
    (
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS13_CHACHA20_POLY1305_SHA256",
    ),
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
];

/// Words and characters that only an OpenSSL cipher string has (`HIGH:!aNULL:@STRENGTH`).
fn is_cipher_string(name: &str) -> bool {
    const KEYWORDS: [&str; 12] = [
        "ALL",
        "DEFAULT",
        "HIGH",
        "MEDIUM",
        "LOW",
        "COMPLEMENTOFALL",
        "COMPLEMENTOFDEFAULT",
        "aNULL",
        "eNULL",
        "NULL",
        "SECURE128",
        "SECURE192",
    ];
    name.contains([':', '!', '+', '@', ',', ' '])
        || name.starts_with('-')
        || KEYWORDS.contains(&name)
}

/// The rustls name of a cipher suite given by its rustls, IANA or OpenSSL name (ASCII case
/// ignored). The error is one line saying what to write instead.
pub(crate) fn suite_name_of(name: &str) -> Result<&'static str, String> {
    let provider = super::provider();
    let known = provider.cipher_suites.iter().map(suite_name);
    for rustls_name in known {
        if rustls_name.eq_ignore_ascii_case(name) {
            return Ok(rustls_name);
        }
    }
    if let Some((_, rustls_name)) = OPENSSL_NAMES
        .iter()
        .find(|(openssl, _)| openssl.eq_ignore_ascii_case(name))
    {
        return Ok(rustls_name);
    }
    let shown = name.escape_debug();
    if is_cipher_string(name) {
        return Err(format!(
            "'{shown}' is an OpenSSL cipher string: list suite names instead, \
             e.g. TLS13_AES_128_GCM_SHA256, ECDHE-ECDSA-AES128-GCM-SHA256"
        ));
    }
    Err(format!(
        "unknown cipher suite '{shown}' (rustls has: {})",
        all_names().join(", ")
    ))
}

/// Every suite rustls offers here, by rustls name, in its order of preference.
pub(crate) fn all_names() -> Vec<&'static str> {
    super::provider()
        .cipher_suites
        .iter()
        .map(suite_name)
        .collect()
}

/// The provider with only the configured cipher suites, in the configured order.
pub(crate) fn provider_for(settings: &TlsSettings) -> Result<CryptoProvider, TlsError> {
    let mut provider = super::provider();
    if settings.ciphers.is_empty() {
        return Ok(provider);
    }
    let mut suites = Vec::with_capacity(settings.ciphers.len());
    for name in &settings.ciphers {
        let wanted = suite_name_of(name).map_err(|e| TlsError::new(format!("tls: {e}")))?;
        let found = provider
            .cipher_suites
            .iter()
            .find(|s| suite_name(s) == wanted)
            .ok_or_else(|| TlsError::new(format!("tls: unknown cipher suite {name:?}")))?;
        if !suites.contains(found) {
            suites.push(*found);
        }
    }
    let any_13 = suites
        .iter()
        .any(|s| s.version() == &rustls::version::TLS13);
    if settings.min_version == TlsVersion::V1_3 && !any_13 {
        return Err(TlsError::new(
            "tls: min_version 1.3 but no TLS 1.3 suite in ciphers",
        ));
    }
    provider.cipher_suites = suites;
    Ok(provider)
}

/// A suite's rustls name (`TLS13_AES_128_GCM_SHA256`).
pub(crate) fn suite_name(suite: &rustls::SupportedCipherSuite) -> &'static str {
    suite.suite().as_str().unwrap_or("unknown")
}

/// The ALPN protocols a listener advertises: an HTTP listener's default is `h2, http/1.1`
/// (HTTP/2 first, as every browser asks; `alpn = ["http/1.1"]` turns HTTP/2 off).
pub(crate) fn alpn(settings: &TlsSettings, http: bool) -> Vec<Vec<u8>> {
    match &settings.alpn {
        Some(list) => list.iter().map(|p| p.as_bytes().to_vec()).collect(),
        None if http => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rustls_and_openssl_names_name_the_same_suites() {
        for (openssl, rustls_name) in OPENSSL_NAMES {
            assert_eq!(suite_name_of(openssl), Ok(rustls_name));
            assert_eq!(suite_name_of(rustls_name), Ok(rustls_name));
            assert!(all_names().contains(&rustls_name), "{rustls_name}");
        }
        assert_eq!(
            suite_name_of("ecdhe-ecdsa-aes128-gcm-sha256"),
            Ok("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256")
        );
    }

    #[test]
    fn cipher_strings_and_unknown_names_are_refused_in_one_line() {
        for s in ["HIGH:!aNULL", "HIGH", "!MD5", "DEFAULT", "ALL:@STRENGTH"] {
            let e = suite_name_of(s).unwrap_err();
            assert!(e.contains("OpenSSL cipher string"), "{e}");
            assert!(!e.contains('\n'));
        }
        let e = suite_name_of("AES128-SHA").unwrap_err();
        assert!(e.starts_with("unknown cipher suite 'AES128-SHA'"), "{e}");
        assert!(e.contains("TLS13_AES_128_GCM_SHA256"), "{e}");
    }

    #[test]
    fn the_default_suites_prefer_aes_128_gcm_then_aes_256_gcm_then_chacha() {
        let names = all_names();
        assert_eq!(
            names[..3],
            [
                "TLS13_AES_128_GCM_SHA256",
                "TLS13_AES_256_GCM_SHA384",
                "TLS13_CHACHA20_POLY1305_SHA256"
            ]
        );
        let tls12: Vec<_> = names[3..]
            .iter()
            .map(|n| n.contains("AES_128_GCM"))
            .collect();
        assert!(tls12.iter().take_while(|&&a| a).count() >= 2, "{names:?}");
        assert!(
            names[3..].iter().all(|n| n.starts_with("TLS_ECDHE_")),
            "{names:?}"
        );
    }

    #[test]
    fn the_provider_keeps_only_the_listed_suites_in_order() {
        let mut s = TlsSettings::new(Vec::new());
        s.ciphers = vec![
            "ECDHE-RSA-AES256-GCM-SHA384".into(),
            "TLS_AES_128_GCM_SHA256".into(),
        ];
        let p = provider_for(&s).unwrap();
        let names: Vec<_> = p.cipher_suites.iter().map(suite_name).collect();
        assert_eq!(
            names,
            [
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
                "TLS13_AES_128_GCM_SHA256"
            ]
        );
        s.min_version = TlsVersion::V1_3;
        s.ciphers = vec!["ECDHE-RSA-AES256-GCM-SHA384".into()];
        assert!(provider_for(&s).unwrap_err().message.contains("1.3"));
    }
}
