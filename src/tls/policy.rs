//! Protocol versions, cipher suites and ALPN of a listener's TLS.

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

/// The provider with only the configured cipher suites, in the configured order.
pub(crate) fn provider_for(settings: &TlsSettings) -> Result<CryptoProvider, TlsError> {
    let mut provider = super::provider();
    if settings.ciphers.is_empty() {
        return Ok(provider);
    }
    let mut suites = Vec::with_capacity(settings.ciphers.len());
    for name in &settings.ciphers {
        let found = provider
            .cipher_suites
            .iter()
            .find(|s| suite_name(s) == name.as_str())
            .ok_or_else(|| TlsError::new(format!("tls: unknown cipher suite {name:?}")))?;
        suites.push(*found);
    }
    provider.cipher_suites = suites;
    Ok(provider)
}

/// A suite's rustls name (`TLS13_AES_128_GCM_SHA256`).
pub(crate) fn suite_name(suite: &rustls::SupportedCipherSuite) -> &'static str {
    suite.suite().as_str().unwrap_or("unknown")
}

/// The ALPN protocols a listener advertises.
pub(crate) fn alpn(settings: &TlsSettings, http: bool) -> Vec<Vec<u8>> {
    match &settings.alpn {
        Some(list) => list.iter().map(|p| p.as_bytes().to_vec()).collect(),
        None if http => vec![b"http/1.1".to_vec()],
        None => Vec::new(),
    }
}
