//! TLS to servers (`server_tls`): the rustls client configuration a pool's server connections and
//! health checks use, built from [`ClientSettings`] when the pool is built (never by a worker).
//! Verification is on by default, against the configured CA file or the system's roots;
//! `verify = false` keeps the handshake's signature checks but accepts any certificate (HAProxy's
//! `verify none`), and says so in the log when the pool is built.

use std::net::IpAddr;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use super::{ClientSettings, TlsError};

/// A pool's TLS to its servers.
#[derive(Debug)]
pub(crate) struct ClientTls {
    /// What it was built from: a pool rebuilt with the same settings keeps this object (and
    /// the sessions rustls keeps for resumption).
    pub settings: ClientSettings,
    pub config: Arc<rustls::ClientConfig>,
    /// The configured name (SNI and verification), if any.
    name: Option<ServerName<'static>>,
}

impl ClientTls {
    /// The name a connection to the server at `ip` sends and verifies: the configured one, else
    /// the address itself (no SNI is sent for an address).
    pub(crate) fn server_name(&self, ip: Option<IpAddr>) -> Option<ServerName<'static>> {
        match (&self.name, ip) {
            (Some(n), _) => Some(n.clone()),
            (None, Some(ip)) => Some(ServerName::IpAddress(ip.into())),
            (None, None) => None,
        }
    }

    /// A client connection to a server at `ip` (None: a Unix socket, which needs `sni`).
    pub(crate) fn connect(&self, ip: Option<IpAddr>) -> Result<rustls::ClientConnection, TlsError> {
        let name = self.server_name(ip).ok_or_else(|| {
            TlsError::new("server_tls: a server on a Unix socket needs `sni` to be set")
        })?;
        rustls::ClientConnection::new(self.config.clone(), name)
            .map_err(|e| TlsError::new(format!("server_tls: {e}")))
    }
}

/// Builds a pool's TLS to its servers; `http` offers ALPN `http/1.1` when none is configured.
pub(crate) fn build_client(settings: &ClientSettings, http: bool) -> Result<ClientTls, TlsError> {
    let provider = Arc::new(super::provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::new(format!("server_tls: {e}")))?;
    let builder = if settings.verify {
        builder.with_root_certificates(roots(settings)?)
    } else {
        tracing::warn!("server_tls: verify = false: servers' certificates are not checked");
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
    };
    let mut config = match &settings.cert {
        Some(files) => {
            let chain = CertificateDer::pem_slice_iter(&files.cert.bytes)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| {
                    TlsError::file(&files.cert.path, format!("bad PEM certificate: {e}"))
                })?;
            let key = PrivateKeyDer::from_pem_slice(&files.key.bytes).map_err(|e| {
                TlsError::file(&files.key.path, format!("no usable private key: {e}"))
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| TlsError::file(&files.key.path, format!("{e}")))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = if settings.alpn.is_empty() && http {
        vec![b"http/1.1".to_vec()]
    } else {
        settings
            .alpn
            .iter()
            .map(|p| p.as_bytes().to_vec())
            .collect()
    };
    let name =
        match &settings.sni {
            Some(n) => Some(ServerName::try_from(n.clone()).map_err(|_| {
                TlsError::new(format!("server_tls: sni: '{n}' is not a server name"))
            })?),
            None => None,
        };
    Ok(ClientTls {
        settings: settings.clone(),
        config: Arc::new(config),
        name,
    })
}

/// The CA file's certificates, or the system's roots.
fn roots(settings: &ClientSettings) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    match &settings.ca {
        Some(file) => {
            for cert in CertificateDer::pem_slice_iter(&file.bytes) {
                let cert = cert
                    .map_err(|e| TlsError::file(&file.path, format!("bad PEM certificate: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| TlsError::file(&file.path, format!("bad CA certificate: {e}")))?;
            }
            if roots.is_empty() {
                return Err(TlsError::file(&file.path, "no certificate in the file"));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                // A system root rustls cannot use is skipped, as every client does.
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(TlsError::new(
                    "server_tls: no system root certificates found; set `ca`",
                ));
            }
        }
    }
    Ok(roots)
}

/// `verify = false`: any certificate, but the handshake's signatures are still checked (the
/// connection is encrypted to whoever holds the key of the certificate shown).
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
