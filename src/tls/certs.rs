//! Certificates and keys: read and checked when the configuration is loaded, then chosen per
//! handshake by server name.
//!
//! A listener's [`CertStore`] is built once per configuration load from its [`TlsSettings`] and
//! never changes: every worker reads it without a lock, and a reload builds a new one (the
//! listener's `ServerConfig` is replaced whole). A handshake's certificate is, in order: the
//! certificates of its exact server name (case-insensitive, a trailing dot ignored), those of the
//! wildcard one level up (`*.example.com` answers `www.example.com`, neither `example.com` nor
//! `a.b.example.com`), then the default ones, unless `strict_sni` (then no certificate: the
//! handshake fails, also for a client that sends no server name). Among the certificates of one
//! name (an ECDSA and an RSA one, say) the first whose key signs with a scheme the client offers
//! wins, ECDSA before Ed25519 before RSA.
//!
//! Also here: Pen's `ssl_sni_path` layout ([`read_sni_dir`]), CA directories ([`read_ca_dir`]),
//! the client-certificate verifier ([`client_verifier`]) and a client certificate's subject as
//! text ([`subject_of`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{SignatureAlgorithm, SignatureScheme};

use super::{CertFiles, ClientAuth, FileData, TlsError, TlsSettings};

/// The most directory entries [`read_sni_dir`] and [`read_ca_dir`] look at.
pub(crate) const MAX_DIR_FILES: usize = 10_000;
/// The longest server name (RFC 1035: 253 characters, and a trailing dot).
const MAX_NAME: usize = 254;
/// The signature schemes a key is probed for at load (what it can sign a handshake with).
const SCHEMES: [SignatureScheme; 10] = [
    SignatureScheme::ECDSA_NISTP256_SHA256,
    SignatureScheme::ECDSA_NISTP384_SHA384,
    SignatureScheme::ECDSA_NISTP521_SHA512,
    SignatureScheme::ED25519,
    SignatureScheme::RSA_PSS_SHA256,
    SignatureScheme::RSA_PSS_SHA384,
    SignatureScheme::RSA_PSS_SHA512,
    SignatureScheme::RSA_PKCS1_SHA256,
    SignatureScheme::RSA_PKCS1_SHA384,
    SignatureScheme::RSA_PKCS1_SHA512,
];

/// A certificate's key type, in the order a handshake prefers them (the cheaper signature first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum KeyKind {
    Ecdsa,
    Ed25519,
    Rsa,
    Other,
}

/// One certificate as served.
#[derive(Debug)]
pub(crate) struct Served {
    pub key: Arc<CertifiedKey>,
    /// Where it came from (the certificate file), for logs and metrics.
    pub path: PathBuf,
    /// The server names it answers for, lower-case without a trailing dot (`*.example.com` for
    /// a wildcard); empty when it is reachable only as the default.
    pub names: Vec<String>,
    /// The leaf's notAfter, in seconds since the Unix epoch (an expired certificate is served
    /// all the same: the expiry is reported, not refused).
    pub not_after_unix: i64,
    pub kind: KeyKind,
    /// Marked `default` in the configuration.
    pub default: bool,
    /// The signature schemes its key can sign a handshake with.
    schemes: Vec<SignatureScheme>,
}

impl Served {
    /// The client offers a signature scheme this certificate's key can sign with.
    fn signs_for(&self, offered: &[SignatureScheme]) -> bool {
        self.schemes.iter().any(|s| offered.contains(s))
    }
}

/// The certificates of a listener and how a handshake picks one. Immutable once built.
#[derive(Debug)]
pub(crate) struct CertStore {
    certs: Vec<Served>,
    /// Exact name to the certificates answering it (indexes into `certs`, preferred first).
    exact: HashMap<Box<str>, Box<[usize]>>,
    /// `example.com` for `*.example.com`, to the certificates answering it.
    wildcards: HashMap<Box<str>, Box<[usize]>>,
    /// Served when no name matches (and without SNI), unless `strict`.
    default: Box<[usize]>,
    strict: bool,
}

impl CertStore {
    /// Reads and checks every certificate of `settings.certs` (`sni_path` already expanded
    /// into them by the configuration loader: see [`read_sni_dir`]).
    pub(crate) fn build(settings: &TlsSettings) -> Result<CertStore, TlsError> {
        if settings.certs.is_empty() {
            return Err(match &settings.sni_path {
                Some(dir) => TlsError::file(dir, "no NAME.crt certificate in the directory"),
                None => TlsError::new("tls: no certificate"),
            });
        }
        let certs = settings
            .certs
            .iter()
            .map(load)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CertStore::index(certs, settings.strict_sni))
    }

    /// Builds the name indexes over certificates already loaded.
    fn index(certs: Vec<Served>, strict: bool) -> CertStore {
        let mut exact: HashMap<Box<str>, Vec<usize>> = HashMap::new();
        let mut wildcards: HashMap<Box<str>, Vec<usize>> = HashMap::new();
        for (i, served) in certs.iter().enumerate() {
            for name in &served.names {
                let (map, key) = match name.strip_prefix("*.") {
                    Some(parent) => (&mut wildcards, parent),
                    None => (&mut exact, name.as_str()),
                };
                let group = map.entry(key.into()).or_default();
                if !group.contains(&i) {
                    group.push(i);
                }
            }
        }
        let default = default_group(&certs);
        let finish = |map: HashMap<Box<str>, Vec<usize>>| {
            map.into_iter()
                .map(|(k, v)| (k, prefer(&certs, v)))
                .collect::<HashMap<_, _>>()
        };
        let exact = finish(exact);
        let wildcards = finish(wildcards);
        let default = prefer(&certs, default);
        CertStore {
            certs,
            exact,
            wildcards,
            default,
            strict,
        }
    }

    /// Every certificate served, in configuration order (for the expiry metric and the status
    /// page).
    pub(crate) fn served(&self) -> &[Served] {
        &self.certs
    }

    /// The certificates answering `name` (exact, then wildcard), preferred first; None when no
    /// certificate names it. Does not allocate.
    fn lookup(&self, name: &str) -> Option<&[usize]> {
        let mut buf = [0u8; MAX_NAME];
        let name = lower(name, &mut buf)?;
        if let Some(group) = self.exact.get(name) {
            return Some(group);
        }
        let (_, parent) = name.split_once('.')?;
        if parent.is_empty() {
            return None;
        }
        self.wildcards.get(parent).map(|g| &**g)
    }

    /// Whether a request for `host` on a connection whose handshake named `sni` is served the
    /// same certificates `host` would have been served (else it is misdirected: 421).
    pub(crate) fn serves_alike(&self, sni: &str, host: &str) -> bool {
        let group = |name: &str| match self.lookup(name) {
            Some(g) => Some(g),
            None if self.strict => None,
            None => Some(&*self.default),
        };
        group(sni) == group(host)
    }

    /// The certificate of a group the client can verify: the first whose key signs with a
    /// scheme it offers, else the group's first (the handshake then fails on rustls' own terms).
    fn pick(&self, group: &[usize], offered: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        let best = group
            .iter()
            .find(|&&i| self.certs[i].signs_for(offered))
            .or_else(|| group.first())?;
        Some(self.certs[*best].key.clone())
    }

    /// The certificate for a server name and the client's signature schemes, as a handshake
    /// gets it.
    fn choose(
        &self,
        server_name: Option<&str>,
        offered: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        let group = match server_name.and_then(|n| self.lookup(n)) {
            Some(group) => group,
            None if self.strict => return None,
            None => &self.default,
        };
        self.pick(group, offered)
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.choose(hello.server_name(), hello.signature_schemes())
    }
}

/// The default certificates: those marked `default` (an ECDSA and an RSA one may both be), else
/// the first and every other certificate with the same names.
fn default_group(certs: &[Served]) -> Vec<usize> {
    let marked: Vec<usize> = (0..certs.len()).filter(|&i| certs[i].default).collect();
    if !marked.is_empty() {
        return marked;
    }
    let Some(first) = certs.first() else {
        return Vec::new();
    };
    let mut names = first.names.clone();
    names.sort();
    (0..certs.len())
        .filter(|&i| {
            let mut other = certs[i].names.clone();
            other.sort();
            other == names
        })
        .collect()
}

/// Orders a group by key preference, configuration order within a kind.
fn prefer(certs: &[Served], mut group: Vec<usize>) -> Box<[usize]> {
    group.sort_by_key(|&i| (certs[i].kind, i));
    group.into_boxed_slice()
}

/// `name` lower-cased into `buf` without its trailing dot; None when too long to be a name.
fn lower<'b>(name: &str, buf: &'b mut [u8; MAX_NAME]) -> Option<&'b str> {
    let name = name.strip_suffix('.').unwrap_or(name);
    let bytes = name.as_bytes();
    let out = buf.get_mut(..bytes.len())?;
    out.copy_from_slice(bytes);
    out.make_ascii_lowercase();
    std::str::from_utf8(out).ok()
}

/// A server name as served: lower-case, no trailing dot, letters, digits and `-` in labels
/// (host names: no `_`), `*` only as a whole first label. None when it is not one.
pub(crate) fn normalize_name(name: &str) -> Option<String> {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name.is_empty() || name.len() >= MAX_NAME {
        return None;
    }
    let rest = name.strip_prefix("*.").unwrap_or(&name);
    let label_ok = |l: &str| {
        !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    rest.split('.').all(label_ok).then_some(name)
}

/// Reads one certificate chain and its key, checks that they belong together, and finds the
/// names it serves and its expiry.
pub(crate) fn load(files: &CertFiles) -> Result<Served, TlsError> {
    let cert_path = &files.cert.path;
    let chain = read_chain(&files.cert)?;
    let key = read_key(&files.key)?;
    let signing = super::provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| TlsError::file(&files.key.path, format!("unusable private key: {e}")))?;
    let kind = match signing.algorithm() {
        SignatureAlgorithm::ECDSA => KeyKind::Ecdsa,
        SignatureAlgorithm::ED25519 => KeyKind::Ed25519,
        SignatureAlgorithm::RSA => KeyKind::Rsa,
        _ => KeyKind::Other,
    };
    let schemes = SCHEMES
        .iter()
        .copied()
        .filter(|s| signing.choose_scheme(&[*s]).is_some())
        .collect();
    let leaf = Leaf::parse(&chain[0]).map_err(|e| TlsError::file(cert_path, e))?;
    let mut key = CertifiedKey::new(chain, signing);
    key.keys_match().map_err(|_| {
        TlsError::file(
            &files.key.path,
            format!(
                "the private key does not match the certificate in {}",
                cert_path.display()
            ),
        )
    })?;
    if let Some(ocsp) = &files.ocsp {
        if ocsp.bytes.first() != Some(&0x30) {
            return Err(TlsError::file(
                &ocsp.path,
                "not a DER OCSP response (convert a PEM one with `openssl ocsp -respin`)",
            ));
        }
        key.ocsp = Some(ocsp.bytes.to_vec());
    }
    let names = served_names(files, leaf.names)?;
    Ok(Served {
        key: Arc::new(key),
        path: cert_path.clone(),
        names,
        not_after_unix: leaf.not_after_unix,
        kind,
        default: files.default,
        schemes,
    })
}

/// The names a certificate serves: the configured ones (checked), else the certificate's.
fn served_names(files: &CertFiles, from_cert: Vec<String>) -> Result<Vec<String>, TlsError> {
    if files.names.is_empty() {
        return Ok(from_cert);
    }
    files
        .names
        .iter()
        .map(|n| {
            normalize_name(n).ok_or_else(|| {
                TlsError::file(
                    &files.cert.path,
                    format!("{n:?} is not a server name (a.example or *.example)"),
                )
            })
        })
        .collect()
}

/// The certificates of a PEM file, leaf first; at least one.
fn read_chain(file: &FileData) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let chain = CertificateDer::pem_slice_iter(&file.bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::file(&file.path, format!("bad PEM certificate: {e}")))?;
    if chain.is_empty() {
        return Err(TlsError::file(&file.path, "no PEM certificate in the file"));
    }
    Ok(chain)
}

/// The first private key of a PEM file (PKCS#8, PKCS#1 or SEC1; certificates around it are
/// skipped, so the key may share the certificate's file).
fn read_key(file: &FileData) -> Result<PrivateKeyDer<'static>, TlsError> {
    match PrivateKeyDer::from_pem_slice(&file.bytes) {
        Ok(key) => Ok(key),
        Err(_) if contains(&file.bytes, b"-----BEGIN ENCRYPTED PRIVATE KEY") => {
            Err(TlsError::file(
                &file.path,
                "an encrypted private key (decrypt it first: `openssl pkey`)",
            ))
        }
        Err(rustls::pki_types::pem::Error::NoItemsFound) => Err(TlsError::file(
            &file.path,
            "no private key in the file (PEM: PKCS#8, PKCS#1 or SEC1)",
        )),
        Err(e) => Err(TlsError::file(
            &file.path,
            format!("bad PEM private key: {e}"),
        )),
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// What Quill reads from a leaf certificate.
struct Leaf {
    names: Vec<String>,
    not_after_unix: i64,
}

impl Leaf {
    fn parse(der: &CertificateDer<'_>) -> Result<Leaf, String> {
        let (_, cert) = x509_parser::parse_x509_certificate(der)
            .map_err(|e| format!("bad certificate: {e}"))?;
        let mut names = Vec::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for general in &san.value.general_names {
                if let x509_parser::extensions::GeneralName::DNSName(n) = general {
                    if let Some(n) = normalize_name(n) {
                        if !names.contains(&n) {
                            names.push(n);
                        }
                    }
                }
            }
        }
        if names.is_empty() {
            let cn = cert.subject().iter_common_name().next();
            if let Some(n) = cn.and_then(|a| a.as_str().ok()).and_then(normalize_name) {
                names.push(n);
            }
        }
        Ok(Leaf {
            names,
            not_after_unix: cert.validity().not_after.timestamp(),
        })
    }
}

/// The entries of a directory, sorted by name: regular files only (symbolic links followed),
/// at most [`MAX_DIR_FILES`] entries looked at.
fn dir_files(dir: &Path) -> Result<Vec<PathBuf>, TlsError> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| TlsError::file(dir, format!("cannot read: {e}")))?;
    let mut files = Vec::new();
    for (n, entry) in entries.enumerate() {
        if n >= MAX_DIR_FILES {
            return Err(TlsError::file(
                dir,
                format!("more than {MAX_DIR_FILES} entries in the directory"),
            ));
        }
        let entry = entry.map_err(|e| TlsError::file(dir, format!("cannot read: {e}")))?;
        let path = entry.path();
        if std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Pen's `ssl_sni_path DIR` layout: for every `DIR/NAME.crt`, the key `DIR/NAME.key` (which
/// must exist) and, when present, `DIR/NAME.ca`, a chain appended after the certificate. NAME,
/// the file's stem, is the server name served (`*.example.com.crt` is a wildcard); when the stem
/// is not a server name (`_wildcard.crt`, say), the certificate's own names are served. Sorted
/// by file name: with no other certificate, the first is the default.
pub(crate) fn read_sni_dir(dir: &Path) -> Result<Vec<CertFiles>, TlsError> {
    let mut certs = Vec::new();
    for path in dir_files(dir)? {
        if path.extension().is_none_or(|e| e != "crt") {
            continue;
        }
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        let key_path = path.with_extension("key");
        if !key_path.exists() {
            return Err(TlsError::file(
                &path,
                format!("no key beside it ({} is missing)", key_path.display()),
            ));
        }
        let mut cert = FileData::read(&path)?;
        let ca_path = path.with_extension("ca");
        if ca_path.exists() {
            let ca = FileData::read(&ca_path)?;
            read_chain(&ca)?;
            let mut bytes = cert.bytes.to_vec();
            bytes.push(b'\n');
            bytes.extend_from_slice(&ca.bytes);
            cert.bytes = bytes.into();
        }
        certs.push(CertFiles {
            cert,
            key: FileData::read(&key_path)?,
            ocsp: None,
            names: normalize_name(&stem).into_iter().collect(),
            default: false,
        });
    }
    Ok(certs)
}

/// Pen's `-A DIR`: every regular file of the directory that holds at least one PEM
/// certificate (others, such as a README, are skipped), sorted by name; at least one.
pub(crate) fn read_ca_dir(dir: &Path) -> Result<Vec<FileData>, TlsError> {
    let mut cas = Vec::new();
    for path in dir_files(dir)? {
        let file = FileData::read(&path)?;
        if CertificateDer::pem_slice_iter(&file.bytes).any(|c| c.is_ok()) {
            cas.push(file);
        }
    }
    if cas.is_empty() {
        return Err(TlsError::file(dir, "no PEM certificate in the directory"));
    }
    Ok(cas)
}

/// The certificate revocation lists of a file: PEM (`X509 CRL` sections) or one DER list.
fn read_crls(file: &FileData) -> Result<Vec<CertificateRevocationListDer<'static>>, TlsError> {
    let mut crls = CertificateRevocationListDer::pem_slice_iter(&file.bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::file(&file.path, format!("bad PEM CRL: {e}")))?;
    if crls.is_empty() && file.bytes.first() == Some(&0x30) {
        crls.push(CertificateRevocationListDer::from(file.bytes.to_vec()));
    }
    if crls.is_empty() {
        return Err(TlsError::file(
            &file.path,
            "no certificate revocation list (PEM or DER) in the file",
        ));
    }
    for crl in &crls {
        x509_parser::parse_x509_crl(crl)
            .map_err(|e| TlsError::file(&file.path, format!("bad CRL: {e}")))?;
    }
    Ok(crls)
}

/// The verifier of client certificates (mTLS): chains to the `ca` certificates, checked against
/// the CRLs when any is given (every certificate of the chain: one whose issuer has no CRL
/// given is refused, as OpenSSL's `CRL_CHECK_ALL` does; a CRL past its nextUpdate still
/// counts); a client without a certificate is let in unless `required`.
pub(crate) fn client_verifier(
    auth: &ClientAuth,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for file in &auth.ca {
        for cert in read_chain(file)? {
            roots
                .add(cert)
                .map_err(|e| TlsError::file(&file.path, format!("bad CA certificate: {e}")))?;
        }
    }
    let mut crls = Vec::new();
    for file in &auth.crls {
        crls.extend(read_crls(file)?);
    }
    let mut builder =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::new(super::provider()))
            .with_crls(crls);
    if !auth.required {
        builder = builder.allow_unauthenticated();
    }
    builder
        .build()
        .map_err(|e| TlsError::new(format!("tls: client certificates: {e}")))
}

/// A certificate's subject distinguished name as text, most specific first as RFC 4514 writes
/// it (`CN=alice,O=Example`), for `X-Client-Cert-Subject` and the access log. Printable ASCII
/// only: control bytes, bytes above 0x7e and RFC 4514's specials are escaped (`\0A`, `\,`), so
/// the text can go in a header or a log line as it is. None when `der` is not a certificate.
pub(crate) fn subject_of(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let registry = x509_parser::objects::oid_registry();
    let mut out = String::new();
    for rdn in cert
        .subject()
        .iter_rdn()
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        if !out.is_empty() {
            out.push(',');
        }
        for (n, atv) in rdn.iter().enumerate() {
            if n > 0 {
                out.push('+');
            }
            match x509_parser::objects::oid2abbrev(atv.attr_type(), registry) {
                Ok("Email") => out.push_str("emailAddress"),
                Ok(short) => escape_into(&mut out, short.as_bytes(), false),
                Err(_) => out.push_str(&atv.attr_type().to_id_string()),
            }
            out.push('=');
            match atv.as_str() {
                Ok(value) => escape_into(&mut out, value.as_bytes(), true),
                Err(_) => escape_into(&mut out, atv.as_slice(), true),
            }
        }
    }
    Some(out)
}

/// Appends `value` escaped as an RFC 4514 attribute value (`specials`) or as is but for bytes
/// outside printable ASCII, which become `\XX`.
fn escape_into(out: &mut String, value: &[u8], specials: bool) {
    use std::fmt::Write as _;
    let last = value.len().saturating_sub(1);
    for (i, &b) in value.iter().enumerate() {
        let special = matches!(b, b'"' | b'+' | b',' | b';' | b'<' | b'>' | b'\\' | b'=')
            || (i == 0 && matches!(b, b'#' | b' '))
            || (i == last && b == b' ');
        if !(0x20..0x7f).contains(&b) {
            let _ = write!(out, "\\{b:02X}");
        } else if specials && special {
            out.push('\\');
            out.push(char::from(b));
        } else {
            out.push(char::from(b));
        }
    }
}

#[cfg(test)]
#[path = "certs_tests.rs"]
mod tests;
