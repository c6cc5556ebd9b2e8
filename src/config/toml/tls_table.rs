//! TLS in a TOML file: a listener's `tls = { ... }` (or `[listener.tls]`), the file-wide `[tls]`
//! defaults of every key but the certificates, and `server_tls = { ... }` on a `[[pool]]` or a
//! `[[listener]]`. Every file is read here, relative to the configuration file's directory; every
//! error is one line, `FILE:LINE: tls: KEY: ...`, naming the file at fault when there is one.
//! A listener's settings are then built as a worker would build them
//! ([`crate::tls::build_server`]), so a certificate that does not match its key, or a cipher
//! rustls does not have, fails `quill check` and start-up instead of the first handshake.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::tls::{
    self, CertFiles, ClientAuth, ClientSettings, FileData, TlsError, TlsSettings, TlsVersion,
};

use super::super::http::shown;
use super::super::model::{
    parse_duration, ConfigError, MAX_CERTS, MAX_HANDSHAKES, MAX_HANDSHAKE_TIMEOUT,
};

type Key = Option<Spanned<toml::Value>>;
type At<'a> = &'a dyn Fn(Range<usize>) -> String;

/// `tls = { ... }` / `[listener.tls]` / `[tls]`: each key kept with its span.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    cert: Key,
    key: Key,
    certs: Key,
    sni_path: Key,
    min_version: Key,
    ciphers: Key,
    server_cipher_order: Key,
    alpn: Key,
    strict_sni: Key,
    handshake_timeout: Key,
    handshake_first_byte_timeout: Key,
    max_handshakes: Key,
    max_handshakes_per_source: Key,
    client_ca: Key,
    client_ca_dir: Key,
    client_crl: Key,
    client_verify: Key,
    ticket_keys: Key,
    tickets: Key,
}

/// `server_tls = { verify, ca, sni, cert, key, alpn }`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServerTls {
    verify: Key,
    ca: Key,
    sni: Key,
    cert: Key,
    key: Key,
    alpn: Key,
}

/// `client_verify`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verify {
    None,
    Optional,
    Required,
}

/// What every listener's `tls` starts from: the built-in defaults with `[tls]` applied.
#[derive(Clone, Debug)]
pub(super) struct TlsDefaults {
    settings: TlsSettings,
    client: ClientKeys,
}

/// The client-certificate keys as read so far (a listener's override `[tls]`'s one by one).
#[derive(Clone, Debug, Default)]
struct ClientKeys {
    ca: Vec<FileData>,
    ca_dir: Vec<FileData>,
    ca_dir_path: Option<std::path::PathBuf>,
    crls: Vec<FileData>,
    verify: Option<(Verify, Range<usize>)>,
}

/// A key's error: `FILE:LINE: tls: KEY: WHY`.
fn fail(at: At, v: &Spanned<toml::Value>, name: &str, why: impl std::fmt::Display) -> ConfigError {
    ConfigError::usage(format!("{}tls: {name}: {why}", at(v.span())))
}

/// A TLS error as a key's reason: without the `tls: ` its message may start with.
fn reason(e: &TlsError) -> String {
    let text = e.to_string();
    match text.strip_prefix("tls: ") {
        Some(rest) => rest.to_string(),
        None => text,
    }
}

fn string<'a>(v: &'a Spanned<toml::Value>, name: &str, at: At) -> Result<&'a str, ConfigError> {
    match v.get_ref() {
        toml::Value::String(s) if !s.is_empty() && !s.chars().any(char::is_control) => Ok(s),
        other => Err(fail(
            at,
            v,
            name,
            format!("{} is not a name in quotes", shown(other)),
        )),
    }
}

fn boolean(v: &Spanned<toml::Value>, name: &str, at: At) -> Result<bool, ConfigError> {
    match v.get_ref() {
        toml::Value::Boolean(b) => Ok(*b),
        other => Err(fail(
            at,
            v,
            name,
            format!("{} is not true or false", shown(other)),
        )),
    }
}

fn strings(v: &Spanned<toml::Value>, name: &str, at: At) -> Result<Vec<String>, ConfigError> {
    let not_list = || {
        fail(
            at,
            v,
            name,
            format!("{} is not a list of names in quotes", shown(v.get_ref())),
        )
    };
    let list = v.get_ref().as_array().ok_or_else(not_list)?;
    list.iter()
        .map(|e| match e {
            toml::Value::String(s) if !s.is_empty() && !s.chars().any(char::is_control) => {
                Ok(s.clone())
            }
            _ => Err(not_list()),
        })
        .collect()
}

/// A file named by a key, read now, relative to `dir`.
fn file(v: &Spanned<toml::Value>, name: &str, dir: &Path, at: At) -> Result<FileData, ConfigError> {
    let path = dir.join(string(v, name, at)?);
    FileData::read(&path).map_err(|e| fail(at, v, name, e))
}

fn path_in(
    v: &Spanned<toml::Value>,
    name: &str,
    dir: &Path,
    at: At,
) -> Result<PathBuf, ConfigError> {
    Ok(dir.join(string(v, name, at)?))
}

/// ALPN protocol names: 1 to 255 bytes each, at most 16.
fn alpn(v: &Spanned<toml::Value>, name: &str, at: At) -> Result<Vec<String>, ConfigError> {
    let list = strings(v, name, at)?;
    if list.len() > 16 {
        return Err(fail(
            at,
            v,
            name,
            format!("{} protocols (at most 16)", list.len()),
        ));
    }
    if let Some(bad) = list.iter().find(|p| p.len() > 255 || !p.is_ascii()) {
        return Err(fail(
            at,
            v,
            name,
            format!(
                "'{}' is not a protocol name (ASCII, 1 to 255 bytes)",
                bad.escape_debug()
            ),
        ));
    }
    Ok(list)
}

/// A server name as a certificate's `names` or `server_tls`' `sni` give it: a DNS name, with `*.`
/// as a wildcard first label when `wildcard`.
pub(crate) fn check_server_name(name: &str, wildcard: bool) -> Result<String, String> {
    let lower = name.to_ascii_lowercase();
    let rest = match lower.strip_prefix("*.") {
        Some(rest) if wildcard => rest,
        _ => &lower,
    };
    let ok = !rest.is_empty()
        && lower.len() <= 253
        && rest.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if ok {
        Ok(lower)
    } else {
        Err(format!("'{}' is not a server name", name.escape_debug()))
    }
}

impl RawTls {
    /// `[tls]`: the defaults of every key but the certificates, checked (and files read) once.
    pub(super) fn defaults(
        raw: Option<&Spanned<RawTls>>,
        dir: &Path,
        at: At,
    ) -> Result<TlsDefaults, ConfigError> {
        let mut d = TlsDefaults {
            settings: TlsSettings::new(Vec::new()),
            client: ClientKeys::default(),
        };
        let Some(raw) = raw else { return Ok(d) };
        let raw = raw.get_ref();
        for (v, name) in [
            (&raw.cert, "cert"),
            (&raw.key, "key"),
            (&raw.certs, "certs"),
            (&raw.sni_path, "sni_path"),
        ] {
            if let Some(v) = v {
                return Err(fail(at, v, name, "certificates go in a listener's tls table ([tls] holds the defaults of the other keys)"));
            }
        }
        raw.apply(&mut d.settings, &mut d.client, dir, at)?;
        Ok(d)
    }

    /// A listener's TLS: `defaults` with this table's keys over them, its certificates read,
    /// then built as a worker would build it. `table` is the table's span (for errors about it
    /// as a whole); `http` says the listener speaks HTTP.
    pub(super) fn build(
        &self,
        defaults: &TlsDefaults,
        table: Range<usize>,
        http: bool,
        dir: &Path,
        at: At,
    ) -> Result<TlsSettings, ConfigError> {
        let mut settings = defaults.settings.clone();
        let mut client = defaults.client.clone();
        self.apply(&mut settings, &mut client, dir, at)?;
        settings.certs = self.certs(dir, at)?;
        if let Some(v) = &self.sni_path {
            let path = path_in(v, "sni_path", dir, at)?;
            let found = tls::certs::read_sni_dir(&path).map_err(|e| fail(at, v, "sni_path", e))?;
            settings.certs.extend(found);
            settings.sni_path = Some(path);
        }
        let whole = |why: String| ConfigError::usage(format!("{}tls: {why}", at(table.clone())));
        if settings.certs.is_empty() {
            return Err(whole(
                "no certificate (set cert and key, certs = [...] or sni_path)".into(),
            ));
        }
        if settings.certs.len() > MAX_CERTS {
            return Err(whole(format!(
                "{} certificates (at most {MAX_CERTS})",
                settings.certs.len()
            )));
        }
        settings.client_auth = client.finish(at)?;
        tls::build_server(&settings, http, &tls::tickets::shared_keys())
            .map_err(|e| whole(reason(&e)))?;
        Ok(settings)
    }

    /// The certificates: `cert` (with `key`, else the same file) or `certs = [...]`.
    fn certs(&self, dir: &Path, at: At) -> Result<Vec<CertFiles>, ConfigError> {
        if let (Some(_), Some(v)) = (&self.cert, &self.certs) {
            return Err(fail(
                at,
                v,
                "certs",
                "give cert (and key) or certs, not both",
            ));
        }
        if let Some(c) = &self.cert {
            let cert = file(c, "cert", dir, at)?;
            let key = match &self.key {
                Some(k) => file(k, "key", dir, at)?,
                None => cert.clone(),
            };
            return Ok(vec![CertFiles {
                cert,
                key,
                ocsp: None,
                names: Vec::new(),
                default: false,
            }]);
        }
        if let Some(k) = &self.key {
            return Err(fail(
                at,
                k,
                "key",
                "needs cert (the certificate the key belongs to)",
            ));
        }
        let Some(v) = &self.certs else {
            return Ok(Vec::new());
        };
        let entries = v.get_ref().as_array().ok_or_else(|| {
            fail(
                at,
                v,
                "certs",
                "expected a list of tables: certs = [{ cert = \"a.pem\", key = \"a.key\" }]",
            )
        })?;
        if entries.len() > MAX_CERTS {
            return Err(fail(
                at,
                v,
                "certs",
                format!("{} certificates (at most {MAX_CERTS})", entries.len()),
            ));
        }
        let mut certs = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            certs.push(cert_entry(entry, i, v, dir, at)?);
        }
        if certs.iter().filter(|c| c.default).count() > 1 {
            return Err(fail(
                at,
                v,
                "certs",
                "more than one certificate has default = true",
            ));
        }
        Ok(certs)
    }

    /// The keys other than the certificates, over `s` and `client`, in a fixed order (versions
    /// and ciphers, handshakes, tickets, client certificates).
    fn apply(
        &self,
        s: &mut TlsSettings,
        client: &mut ClientKeys,
        dir: &Path,
        at: At,
    ) -> Result<(), ConfigError> {
        self.apply_protocol(s, at)?;
        self.apply_handshakes(s, at)?;
        self.apply_tickets(s, dir, at)?;
        self.apply_client(client, dir, at)
    }

    /// `min_version`, `ciphers`, `server_cipher_order`, `alpn`, `strict_sni`.
    fn apply_protocol(&self, s: &mut TlsSettings, at: At) -> Result<(), ConfigError> {
        if let Some(v) = &self.min_version {
            s.min_version = min_version(v, at)?;
        }
        if let Some(v) = &self.ciphers {
            s.ciphers = ciphers(v, at)?;
        }
        if let Some(v) = &self.server_cipher_order {
            s.server_cipher_order = boolean(v, "server_cipher_order", at)?;
        }
        if let Some(v) = &self.alpn {
            s.alpn = Some(alpn(v, "alpn", at)?);
        }
        if let Some(v) = &self.strict_sni {
            s.strict_sni = boolean(v, "strict_sni", at)?;
        }
        Ok(())
    }

    /// `handshake_timeout`, `handshake_first_byte_timeout`, `max_handshakes_per_source`,
    /// `max_handshakes`.
    fn apply_handshakes(&self, s: &mut TlsSettings, at: At) -> Result<(), ConfigError> {
        if let Some(v) = &self.handshake_timeout {
            s.handshake_timeout = handshake_timeout(v, "handshake_timeout", at)?;
        }
        if let Some(v) = &self.handshake_first_byte_timeout {
            s.handshake_first_byte_timeout =
                handshake_timeout(v, "handshake_first_byte_timeout", at)?;
        }
        if let Some(v) = &self.max_handshakes_per_source {
            s.max_handshakes_per_source = handshakes(v, "max_handshakes_per_source", at)?;
        }
        if let Some(v) = &self.max_handshakes {
            s.max_handshakes = handshakes(v, "max_handshakes", at)?;
        }
        Ok(())
    }

    /// `ticket_keys` (a file, read now) and `tickets`.
    fn apply_tickets(&self, s: &mut TlsSettings, dir: &Path, at: At) -> Result<(), ConfigError> {
        if let Some(v) = &self.ticket_keys {
            s.ticket_keys = Some(file(v, "ticket_keys", dir, at)?);
        }
        if let Some(v) = &self.tickets {
            s.tickets = boolean(v, "tickets", at)?;
        }
        Ok(())
    }

    /// `client_ca`, `client_ca_dir`, `client_crl` (files read now) and `client_verify`.
    fn apply_client(&self, client: &mut ClientKeys, dir: &Path, at: At) -> Result<(), ConfigError> {
        if let Some(v) = &self.client_ca {
            let f = file(v, "client_ca", dir, at)?;
            check_certificates(&f).map_err(|e| fail(at, v, "client_ca", e))?;
            client.ca = vec![f];
        }
        if let Some(v) = &self.client_ca_dir {
            let path = path_in(v, "client_ca_dir", dir, at)?;
            client.ca_dir =
                tls::certs::read_ca_dir(&path).map_err(|e| fail(at, v, "client_ca_dir", e))?;
            client.ca_dir_path = Some(path);
        }
        if let Some(v) = &self.client_crl {
            client.crls = crl_files(v, dir, at)?;
        }
        if let Some(v) = &self.client_verify {
            client.verify = Some((verify(v, at)?, v.span()));
        }
        Ok(())
    }
}

/// `min_version`: "1.2" or "1.3" (older versions named as such: rustls does not speak them).
fn min_version(v: &Spanned<toml::Value>, at: At) -> Result<TlsVersion, ConfigError> {
    let text = string(v, "min_version", at)?;
    match TlsVersion::parse(text) {
        Some(version) => Ok(version),
        None if matches!(text, "1.0" | "1.1" | "1" | "TLSv1" | "TLSv1.1" | "SSLv3") => Err(fail(
            at,
            v,
            "min_version",
            format!("'{text}' is not supported: rustls speaks TLS 1.2 and 1.3"),
        )),
        None => Err(fail(
            at,
            v,
            "min_version",
            format!("'{}' is not \"1.2\" or \"1.3\"", text.escape_debug()),
        )),
    }
}

/// `max_handshakes` or `max_handshakes_per_source` (`name`): 1 to [`MAX_HANDSHAKES`].
fn handshakes(v: &Spanned<toml::Value>, name: &str, at: At) -> Result<u32, ConfigError> {
    match v.get_ref() {
        toml::Value::Integer(n) if (1..=i64::from(MAX_HANDSHAKES)).contains(n) => Ok(*n as u32),
        other => Err(fail(
            at,
            v,
            name,
            format!("{} is out of range (1 to {MAX_HANDSHAKES})", shown(other)),
        )),
    }
}

/// `client_crl`: one file or a list of them, each read now.
fn crl_files(v: &Spanned<toml::Value>, dir: &Path, at: At) -> Result<Vec<FileData>, ConfigError> {
    let files: Vec<Spanned<toml::Value>> = match v.get_ref() {
        toml::Value::String(_) => vec![v.clone()],
        _ => strings(v, "client_crl", at)?
            .into_iter()
            .map(|s| Spanned::new(v.span(), toml::Value::String(s)))
            .collect(),
    };
    files
        .iter()
        .map(|f| file(f, "client_crl", dir, at))
        .collect()
}

/// `client_verify`: none, optional or required.
fn verify(v: &Spanned<toml::Value>, at: At) -> Result<Verify, ConfigError> {
    match string(v, "client_verify", at)? {
        "none" => Ok(Verify::None),
        "optional" => Ok(Verify::Optional),
        "required" => Ok(Verify::Required),
        other => Err(fail(
            at,
            v,
            "client_verify",
            format!(
                "'{}' is not none, optional or required",
                other.escape_debug()
            ),
        )),
    }
}

impl ClientKeys {
    /// Client certificates as the keys ask: `client_verify` (optional when a CA is given and
    /// it is not) over the CA files.
    fn finish(self, at: At) -> Result<Option<ClientAuth>, ConfigError> {
        let mut ca = self.ca;
        ca.extend(self.ca_dir);
        let verify = match (&self.verify, ca.is_empty()) {
            (None, true) => Verify::None,
            (None, false) => Verify::Optional,
            (Some((Verify::None, _)), _) => Verify::None,
            (Some((_, span)), true) => {
                return Err(ConfigError::usage(format!(
                    "{}tls: client_verify: needs client_ca or client_ca_dir (the CAs client certificates must chain to)",
                    at(span.clone())
                )))
            }
            (Some((v, _)), false) => *v,
        };
        Ok(match verify {
            Verify::None => None,
            _ => Some(ClientAuth {
                ca,
                crls: self.crls,
                ca_dir: self.ca_dir_path,
                required: verify == Verify::Required,
            }),
        })
    }
}

/// A site's `certs = [...]` (the entries of a listener's `certs`), read and checked for a
/// listener whose TLS they join; errors as the listener's (`tls: certs: ...`).
pub(super) fn site_certs(
    v: &Spanned<toml::Value>,
    dir: &Path,
    at: At,
) -> Result<Vec<CertFiles>, ConfigError> {
    RawTls {
        certs: Some(v.clone()),
        ..RawTls::default()
    }
    .certs(dir, at)
}

/// Checks a listener's TLS settings whole once a site's certificates joined them (a key that
/// does not fit its certificate, too many certificates): `span` is the site's `certs`.
pub(super) fn check_joined(
    settings: &TlsSettings,
    v: &Spanned<toml::Value>,
    at: At,
) -> Result<(), ConfigError> {
    if settings.certs.len() > MAX_CERTS {
        return Err(fail(
            at,
            v,
            "certs",
            format!(
                "{} certificates with the sites' (at most {MAX_CERTS})",
                settings.certs.len()
            ),
        ));
    }
    tls::build_server(settings, true, &tls::tickets::shared_keys())
        .map(drop)
        .map_err(|e| fail(at, v, "certs", reason(&e)))
}

/// One entry of `certs = [...]`.
fn cert_entry(
    entry: &toml::Value,
    i: usize,
    v: &Spanned<toml::Value>,
    dir: &Path,
    at: At,
) -> Result<CertFiles, ConfigError> {
    let name = format!("certs[{i}]");
    let Some(t) = entry.as_table() else {
        return Err(fail(
            at,
            v,
            &name,
            format!(
                "{} is not a table {{ cert = \"a.pem\", key = \"a.key\" }}",
                shown(entry)
            ),
        ));
    };
    if let Some(k) = t
        .keys()
        .find(|k| !["cert", "key", "ocsp", "names", "default"].contains(&k.as_str()))
    {
        return Err(fail(
            at,
            v,
            &name,
            format!(
                "unknown key `{}` (expected cert, key, ocsp, names, default)",
                k.escape_debug()
            ),
        ));
    }
    let sub = |key: &str| t.get(key).map(|x| Spanned::new(v.span(), x.clone()));
    let Some(cert) = sub("cert") else {
        return Err(fail(at, v, &name, "needs cert"));
    };
    let cert = file(&cert, &format!("{name}.cert"), dir, at)?;
    let key = match sub("key") {
        Some(k) => file(&k, &format!("{name}.key"), dir, at)?,
        None => cert.clone(),
    };
    let ocsp = sub("ocsp")
        .map(|o| file(&o, &format!("{name}.ocsp"), dir, at))
        .transpose()?;
    let names = match sub("names") {
        Some(n) => strings(&n, &format!("{name}.names"), at)?
            .iter()
            .map(|s| {
                check_server_name(s, true).map_err(|e| fail(at, v, &format!("{name}.names"), e))
            })
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    let default = sub("default")
        .map(|d| boolean(&d, &format!("{name}.default"), at))
        .transpose()?
        .unwrap_or(false);
    Ok(CertFiles {
        cert,
        key,
        ocsp,
        names,
        default,
    })
}

/// `ciphers = [...]`: each suite by its rustls or OpenSSL name, kept by its rustls name.
fn ciphers(v: &Spanned<toml::Value>, at: At) -> Result<Vec<String>, ConfigError> {
    if let toml::Value::String(s) = v.get_ref() {
        // A single string: an OpenSSL cipher string, or a name that belongs in a list.
        let why = match tls::policy::suite_name_of(s) {
            Ok(_) => format!("expected a list: ciphers = [\"{}\"]", s.escape_debug()),
            Err(e) => e,
        };
        return Err(fail(at, v, "ciphers", why));
    }
    let mut names: Vec<String> = Vec::new();
    for name in strings(v, "ciphers", at)? {
        let found = tls::policy::suite_name_of(&name).map_err(|e| fail(at, v, "ciphers", e))?;
        if !names.iter().any(|n| n == found) {
            names.push(found.to_string());
        }
    }
    if names.is_empty() {
        return Err(fail(
            at,
            v,
            "ciphers",
            "an empty list (leave ciphers out for rustls' defaults)",
        ));
    }
    Ok(names)
}

/// `handshake_timeout` (or `handshake_first_byte_timeout`, `name`): seconds or a duration with a
/// unit, more than 0 and at most 5 minutes.
fn handshake_timeout(
    v: &Spanned<toml::Value>,
    name: &'static str,
    at: At,
) -> Result<Duration, ConfigError> {
    let d = match v.get_ref() {
        toml::Value::Integer(n) => u64::try_from(*n)
            .map(Duration::from_secs)
            .map_err(|_| fail(at, v, name, format!("{n} is not a duration")))?,
        toml::Value::String(s) if s.chars().any(char::is_control) => {
            return Err(fail(
                at,
                v,
                name,
                format!("invalid duration '{}'", s.escape_debug()),
            ))
        }
        toml::Value::String(s) => parse_duration(s).map_err(|e| fail(at, v, name, e))?,
        other => {
            return Err(fail(
                at,
                v,
                name,
                format!("{} is not a duration (expected e.g. \"10s\")", shown(other)),
            ))
        }
    };
    if d.is_zero() || d > MAX_HANDSHAKE_TIMEOUT {
        return Err(fail(at, v, name, "must be more than 0 and at most 5m"));
    }
    Ok(d)
}

/// Whether a file holds at least one PEM certificate, each one well formed.
pub(crate) fn check_certificates(f: &FileData) -> Result<(), TlsError> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::CertificateDer;
    let certs = CertificateDer::pem_slice_iter(&f.bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::file(&f.path, format!("bad PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(TlsError::file(&f.path, "no PEM certificate in the file"));
    }
    Ok(())
}

/// Whether a file holds a PEM private key.
fn check_key(f: &FileData) -> Result<(), TlsError> {
    use rustls::pki_types::pem::PemObject as _;
    rustls::pki_types::PrivateKeyDer::from_pem_slice(&f.bytes)
        .map(|_| ())
        .map_err(|e| TlsError::file(&f.path, format!("no usable private key: {e}")))
}

impl RawServerTls {
    /// `server_tls`: files read and their PEM checked, a client certificate against its key (the
    /// TLS to servers is built with the pool).
    pub(super) fn build(&self, dir: &Path, at: At) -> Result<ClientSettings, ConfigError> {
        let mut s = ClientSettings::default();
        let fail = |v: &Spanned<toml::Value>, name: &str, why: String| {
            ConfigError::usage(format!("{}server_tls: {name}: {why}", at(v.span())))
        };
        let tls_fail = |v: &Spanned<toml::Value>, name: &str, e: ConfigError| {
            // The key helpers say `tls: KEY:`; this table is `server_tls`.
            let prefix = at(v.span());
            let rest = e.message.strip_prefix(&prefix).unwrap_or(&e.message);
            let rest = rest.strip_prefix("tls: ").unwrap_or(rest);
            let rest = rest.strip_prefix(&format!("{name}: ")).unwrap_or(rest);
            fail(v, name, rest.to_string())
        };
        if let Some(v) = &self.verify {
            s.verify = boolean(v, "verify", at).map_err(|e| tls_fail(v, "verify", e))?;
        }
        if let Some(v) = &self.ca {
            let f = file(v, "ca", &PathBuf::from(dir), at).map_err(|e| tls_fail(v, "ca", e))?;
            check_certificates(&f).map_err(|e| fail(v, "ca", e.to_string()))?;
            s.ca = Some(f);
        }
        if let Some(v) = &self.sni {
            let name = string(v, "sni", at).map_err(|e| tls_fail(v, "sni", e))?;
            s.sni = Some(check_server_name(name, false).map_err(|e| fail(v, "sni", e))?);
        }
        if let Some(v) = &self.alpn {
            s.alpn = alpn(v, "alpn", at).map_err(|e| tls_fail(v, "alpn", e))?;
        }
        match (&self.cert, &self.key) {
            (None, Some(k)) => {
                return Err(fail(
                    k,
                    "key",
                    "needs cert (the client certificate the key belongs to)".into(),
                ))
            }
            (None, None) => {}
            (Some(c), k) => {
                let cert = file(c, "cert", dir, at).map_err(|e| tls_fail(c, "cert", e))?;
                check_certificates(&cert).map_err(|e| fail(c, "cert", e.to_string()))?;
                let key = match k {
                    Some(k) => file(k, "key", dir, at).map_err(|e| tls_fail(k, "key", e))?,
                    None => cert.clone(),
                };
                check_key(&key).map_err(|e| fail(k.as_ref().unwrap_or(c), "key", e.to_string()))?;
                s.cert = Some(CertFiles {
                    cert,
                    key,
                    ocsp: None,
                    names: Vec::new(),
                    default: false,
                });
                // The client certificate and its key must go together: built once here so a
                // mismatch stops the load, not the first connection.
                tls::client::build_client(&s, false).map_err(|e| fail(c, "cert", e.to_string()))?;
            }
        }
        Ok(s)
    }
}
