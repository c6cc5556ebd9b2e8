//! TLS (docs/design.md#tls-on-the-same-workers), the model half: what a listener's TLS termination
//! is configured with ([`TlsSettings`], files already read, so a reload that finds a file changed
//! makes the configuration differ), and the rustls objects built from it ([`ServerTls`]) that every
//! worker shares. No sockets here: `net::tls` drives a connection over a socket, `proxy::handshake`
//! carries a session through its handshake.
//!
//! - [`certs`]: certificates and keys read and checked, the SNI resolver (exact names, wildcards,
//!   a default, strict SNI; ECDSA or RSA for one name by what the client supports), Pen's
//!   `ssl_sni_path` layout, OCSP staples, expiry.
//! - [`tickets`]: stateless session tickets from keys shared by every worker and carried over a
//!   takeover (HAProxy's `tls-ticket-keys` file format).
//! - [`policy`]: protocol versions, cipher suites, ALPN.
//! - [`client`]: TLS to servers (`server_tls`).

pub(crate) mod certs;
pub(crate) mod client;
pub(crate) mod policy;
pub(crate) mod tickets;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The TLS handshake must be done within this by default (slow or silent clients cannot hold a
/// slot).
pub(crate) const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress per worker by default; beyond it, the least recently active one is
/// closed to make room.
pub(crate) const DEFAULT_MAX_HANDSHAKES: u32 = 1024;
/// How long a new client has to send its first byte (a ClientHello leaves as soon as the TCP
/// handshake is done, so it comes within one round trip: 3 s allows for the slowest links and a
/// lost packet's first retransmission, 1 s, twice over, and frees a silent connection's slot
/// three times sooner than `handshake_timeout`).
pub(crate) const DEFAULT_HANDSHAKE_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(3);
/// Handshakes in progress from one client address per worker (a browser opens a few connections
/// at once; past the bound, the address's own least recently active handshake makes room).
pub(crate) const DEFAULT_MAX_HANDSHAKES_PER_SOURCE: u32 = 32;
/// The largest certificate, key, CA, CRL, OCSP or ticket-key file read.
pub(crate) const MAX_FILE: u64 = 1024 * 1024;

/// A TLS error, naming the file it is about when there is one. One line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsError {
    /// The file at fault, if any.
    pub path: Option<PathBuf>,
    pub message: String,
}

impl TlsError {
    pub(crate) fn new(message: impl Into<String>) -> TlsError {
        TlsError {
            path: None,
            message: message.into(),
        }
    }

    pub(crate) fn file(path: &Path, message: impl Into<String>) -> TlsError {
        TlsError {
            path: Some(path.to_path_buf()),
            message: message.into(),
        }
    }
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(p) => write!(f, "{}: {}", p.display(), self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for TlsError {}

/// A file as configured and as read when the configuration was loaded (or reloaded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FileData {
    pub path: PathBuf,
    pub bytes: Arc<[u8]>,
}

impl FileData {
    /// Reads a regular file of at most [`MAX_FILE`] bytes, without blocking on a FIFO.
    pub(crate) fn read(path: &Path) -> Result<FileData, TlsError> {
        use std::io::Read as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| TlsError::file(path, format!("cannot read: {e}")))?;
        let meta = file
            .metadata()
            .map_err(|e| TlsError::file(path, format!("cannot read: {e}")))?;
        if !meta.is_file() {
            return Err(TlsError::file(path, "not a regular file"));
        }
        if meta.len() > MAX_FILE {
            return Err(TlsError::file(
                path,
                format!("larger than {} KiB", MAX_FILE / 1024),
            ));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.take(MAX_FILE + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| TlsError::file(path, format!("cannot read: {e}")))?;
        Ok(FileData {
            path: path.to_path_buf(),
            bytes: bytes.into(),
        })
    }
}

/// One certificate with its key: `cert` holds the leaf then its chain (PEM), `key` the private
/// key (PEM: PKCS#8, PKCS#1 or SEC1; may be the same file as `cert`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CertFiles {
    pub cert: FileData,
    pub key: FileData,
    /// A DER OCSP response stapled to handshakes (Pen's `ssl_oscp_response`), re-read with the
    /// certificate.
    pub ocsp: Option<FileData>,
    /// The server names this certificate answers for; empty = the names in the certificate
    /// (subjectAltName DNS names, else the subject's CN). `*.example.com` is a wildcard.
    pub names: Vec<String>,
    /// Served to clients whose server name matches no certificate (the first certificate is the
    /// default when none is marked).
    pub default: bool,
}

/// The lowest TLS version a listener accepts (rustls speaks 1.2 and 1.3 only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TlsVersion {
    V1_2,
    V1_3,
}

impl TlsVersion {
    pub(crate) fn parse(text: &str) -> Option<TlsVersion> {
        match text {
            "1.2" | "TLSv1.2" | "tls1.2" => Some(TlsVersion::V1_2),
            "1.3" | "TLSv1.3" | "tls1.3" => Some(TlsVersion::V1_3),
            _ => None,
        }
    }
}

/// Client certificates (mTLS; Pen's `-G`, `-A`, `-R`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClientAuth {
    /// CA certificates clients' certificates must chain to: the `ca` file's and every file of
    /// the `ca_dir` directory's.
    pub ca: Vec<FileData>,
    /// Certificate revocation lists (PEM or DER).
    pub crls: Vec<FileData>,
    /// The `ca_dir` directory its files came from (they are in `ca`): `tls reload` lists it
    /// again, so a CA added there is taken.
    pub ca_dir: Option<std::path::PathBuf>,
    /// A client without a certificate is refused (`-R`, `verify = "required"`); otherwise one
    /// is asked for, verified when given, and the session goes on without one.
    pub required: bool,
}

/// A listener's TLS termination (`tls = { ... }`, Pen's `-E`/`-K`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TlsSettings {
    /// At least one, unless `sni_path` gives them; the first is the default unless one is marked.
    pub certs: Vec<CertFiles>,
    /// Pen's `ssl_sni_path DIR`: `DIR/NAME.crt` with `NAME.key` (and `NAME.ca`, a chain appended
    /// to the certificate) for server name NAME, read into `certs` at load.
    pub sni_path: Option<PathBuf>,
    pub min_version: TlsVersion,
    /// Cipher suites by rustls name (`TLS13_AES_128_GCM_SHA256`) or OpenSSL name
    /// (`ECDHE-ECDSA-AES128-GCM-SHA256`), in order of preference; empty = rustls' defaults.
    pub ciphers: Vec<String>,
    /// The server's cipher order wins over the client's (Pen's `cipher_server_preference`; on by
    /// default, as audits such as testssl.sh expect: the server picks AES-GCM before ChaCha20
    /// on this hardware rather than whatever a client lists first).
    pub server_cipher_order: bool,
    /// ALPN protocols advertised; None = `http/1.1` on an HTTP listener, nothing on TCP.
    pub alpn: Option<Vec<String>>,
    /// A client whose server name matches no certificate is refused instead of getting the
    /// default one (also a client that sends no server name).
    pub strict_sni: bool,
    pub handshake_timeout: Duration,
    /// A client that sends nothing for this long after its connection is closed.
    pub handshake_first_byte_timeout: Duration,
    /// Handshakes in progress per worker; beyond it, the least recently active one is closed to
    /// make room.
    pub max_handshakes: u32,
    /// Handshakes in progress per client address and worker; beyond it, that address's least
    /// recently active one is closed to make room.
    pub max_handshakes_per_source: u32,
    pub client_auth: Option<ClientAuth>,
    /// HAProxy's `tls-ticket-keys` file; None = keys generated by the process and shared by
    /// all its listeners and workers (and the next process after a takeover).
    pub ticket_keys: Option<FileData>,
    /// Stateless session tickets (resumption). Always off when client certificates are asked
    /// for: a resumed session would skip their verification.
    pub tickets: bool,
}

impl TlsSettings {
    /// Settings with these certificates and every default.
    pub(crate) fn new(certs: Vec<CertFiles>) -> TlsSettings {
        TlsSettings {
            certs,
            sni_path: None,
            min_version: TlsVersion::V1_2,
            ciphers: Vec::new(),
            server_cipher_order: true,
            alpn: None,
            strict_sni: false,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            handshake_first_byte_timeout: DEFAULT_HANDSHAKE_FIRST_BYTE_TIMEOUT,
            max_handshakes: DEFAULT_MAX_HANDSHAKES,
            max_handshakes_per_source: DEFAULT_MAX_HANDSHAKES_PER_SOURCE,
            client_auth: None,
            ticket_keys: None,
            tickets: true,
        }
    }
}

/// A listener's TLS termination, built from its [`TlsSettings`] when the listener's pool is
/// built (start, reload, control commands); shared by every worker, read without a lock.
#[derive(Debug)]
pub(crate) struct ServerTls {
    /// What it was built from: a pool rebuilt with the same settings keeps this object.
    pub settings: TlsSettings,
    pub config: Arc<rustls::ServerConfig>,
    /// The certificates served, for the expiry metrics and the status page.
    pub certs: Arc<certs::CertStore>,
    pub handshake_timeout: Duration,
    pub handshake_first_byte_timeout: Duration,
    pub max_handshakes: u32,
    pub max_handshakes_per_source: u32,
}

/// The crypto every TLS object of Quill uses: rustls' aws-lc-rs provider, chosen explicitly
/// (rustls without default features installs none), narrowed to the configured suites.
///
/// Its suites are put in Mozilla's order (AES-128-GCM, then AES-256-GCM, then ChaCha20-Poly1305,
/// TLS 1.3 before 1.2), where rustls lists AES-256-GCM first. The server's order wins by default,
/// so this is what clients get: the same strength class, and measured here 16% less CPU per
/// full handshake (`bench/tls.sh`) (SHA-384's transcript and key schedule run on aws-lc's generic SHA-512 code,
/// SHA-256 on the CPU's SHA instructions).
pub(crate) fn provider() -> rustls::crypto::CryptoProvider {
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    p.cipher_suites.sort_by_key(|s| {
        let name = policy::suite_name(s);
        let bulk = if name.contains("AES_128_GCM") {
            0
        } else if name.contains("AES_256_GCM") {
            1
        } else {
            2
        };
        (s.version() != &rustls::version::TLS13, bulk)
    });
    p
}

/// Builds a listener's TLS from its settings. `http` says the listener speaks HTTP (ALPN
/// `http/1.1` by default). `shared` are the process's generated ticket keys, used when the
/// settings name no key file.
pub(crate) fn build_server(
    settings: &TlsSettings,
    http: bool,
    shared: &Arc<tickets::TicketKeys>,
) -> Result<ServerTls, TlsError> {
    let store = Arc::new(certs::CertStore::build(settings)?);
    let provider = policy::provider_for(settings)?;
    let versions = policy::versions(settings.min_version);
    let builder = rustls::ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(versions)
        .map_err(|e| TlsError::new(format!("tls: {e}")))?;
    let builder = match &settings.client_auth {
        Some(auth) => builder.with_client_cert_verifier(certs::client_verifier(auth)?),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(store.clone());
    config.ignore_client_order = settings.server_cipher_order;
    // After the handshake each connection keeps only its traffic secrets and rustls' kernel
    // connection (`net::tls`'s record layer): rustls must let them be taken.
    config.enable_secret_extraction = true;
    config.alpn_protocols = policy::alpn(settings, http);
    // No server-side session cache: resumption is by stateless tickets only, whose keys every
    // worker shares (a per-worker cache would miss: SO_REUSEPORT and EPOLLEXCLUSIVE send a
    // returning client to any worker).
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    let resume = settings.tickets && settings.client_auth.is_none();
    if resume {
        config.ticketer = match &settings.ticket_keys {
            Some(file) => tickets::TicketKeys::from_file(file)?,
            None => shared.clone(),
        };
        config.send_tls13_tickets = 1;
    } else {
        config.send_tls13_tickets = 0;
    }
    // TLS 1.3 0-RTT stays off (replayable requests): max_early_data_size is 0 by default.
    config.max_early_data_size = 0;
    Ok(ServerTls {
        settings: settings.clone(),
        config: Arc::new(config),
        certs: store,
        handshake_timeout: settings.handshake_timeout,
        handshake_first_byte_timeout: settings.handshake_first_byte_timeout,
        max_handshakes: settings.max_handshakes,
        max_handshakes_per_source: settings.max_handshakes_per_source,
    })
}

/// TLS to a pool's servers (`server_tls = { verify, ca, sni, cert, key }`): the sessions' server
/// connections and the health checks speak TLS to them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClientSettings {
    /// Verify the server's certificate chain and name (on by default; `verify = false` is
    /// HAProxy's `verify none`).
    pub verify: bool,
    /// CA certificates to verify against; None = the system's roots.
    pub ca: Option<FileData>,
    /// The server name sent (SNI) and verified; None = the server's host name when it was given
    /// as a name, else no SNI and the server's IP address is verified.
    pub sni: Option<String>,
    /// A client certificate presented to servers that ask for one.
    pub cert: Option<CertFiles>,
    /// ALPN offered to servers; empty = none (`http/1.1` from an HTTP listener's pools).
    pub alpn: Vec<String>,
}

impl Default for ClientSettings {
    fn default() -> ClientSettings {
        ClientSettings {
            verify: true,
            ca: None,
            sni: None,
            cert: None,
            alpn: Vec::new(),
        }
    }
}
