//! Certificates and keys: read, checked, and chosen per handshake by server name.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;

use super::{CertFiles, ClientAuth, TlsError, TlsSettings};

/// One certificate as served.
#[derive(Debug)]
pub(crate) struct Served {
    pub key: Arc<CertifiedKey>,
    /// Where it came from (the certificate file), for logs and metrics.
    pub path: std::path::PathBuf,
    /// The server names it answers for.
    pub names: Vec<String>,
    /// The certificate's notAfter, Unix seconds.
    pub not_after_unix: i64,
}

/// The certificates of a listener and how a handshake picks one.
#[derive(Debug)]
pub(crate) struct CertStore {
    certs: Vec<Served>,
}

impl CertStore {
    pub(crate) fn build(settings: &TlsSettings) -> Result<CertStore, TlsError> {
        if settings.certs.is_empty() {
            return Err(TlsError::new("tls: no certificate"));
        }
        let certs = settings
            .certs
            .iter()
            .map(load)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CertStore { certs })
    }

    pub(crate) fn served(&self) -> &[Served] {
        &self.certs
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.certs.first().map(|c| c.key.clone())
    }
}

/// Reads one certificate chain and its key and checks that they belong together.
pub(crate) fn load(files: &CertFiles) -> Result<Served, TlsError> {
    let chain = CertificateDer::pem_slice_iter(&files.cert.bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::file(&files.cert.path, format!("bad PEM certificate: {e}")))?;
    if chain.is_empty() {
        return Err(TlsError::file(
            &files.cert.path,
            "no certificate in the file",
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&files.key.bytes)
        .map_err(|e| TlsError::file(&files.key.path, format!("no usable private key: {e}")))?;
    let provider = super::provider();
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| TlsError::file(&files.key.path, format!("unusable private key: {e}")))?;
    let key = CertifiedKey::new(chain, signing);
    key.keys_match().map_err(|e| {
        TlsError::file(
            &files.key.path,
            format!("does not match {}: {e}", files.cert.path.display()),
        )
    })?;
    Ok(Served {
        key: Arc::new(key),
        path: files.cert.path.clone(),
        names: files.names.clone(),
        not_after_unix: 0,
    })
}

/// The verifier of client certificates (mTLS).
pub(crate) fn client_verifier(
    auth: &ClientAuth,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for file in &auth.ca {
        for cert in CertificateDer::pem_slice_iter(&file.bytes) {
            let cert =
                cert.map_err(|e| TlsError::file(&file.path, format!("bad PEM certificate: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| TlsError::file(&file.path, format!("bad CA certificate: {e}")))?;
        }
    }
    let mut builder =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::new(super::provider()));
    if !auth.required {
        builder = builder.allow_unauthenticated();
    }
    builder
        .build()
        .map_err(|e| TlsError::new(format!("tls: client certificates: {e}")))
}
