//! Stateless session tickets: keys shared by every worker of the process and carried over a
//! takeover, so a returning client resumes whichever worker or process it reaches.
//!
//! Keys come from HAProxy's `tls-ticket-keys` file format (one base64 key per line, 48 bytes:
//! 16 name, 16 AES-128, 16 HMAC; or 80 bytes: 16 name, 32 AES-256, 32 HMAC; `#` comments and
//! blank lines skipped; the second-to-last key encrypts when there are two or more, so the last
//! one can be distributed before it is used; every key decrypts), or are generated: three 80-byte
//! keys, rotated every hour (the oldest dropped, a new one appended), the middle one encrypting,
//! shared by every listener without a key file ([`shared_keys`]) and handed to the next process
//! on a takeover ([`TicketKeys::export`], [`install_shared`]).
//!
//! A ticket is RFC 5077 §4's construction: `name(16) | IV(16) | AES-CBC(PKCS#7 padded state) |
//! HMAC-SHA256(name | IV | ciphertext)`, encrypt-then-MAC: the MAC is checked (in constant time)
//! before anything is decrypted, and any byte sequence is at worst "not a ticket of ours".
//!
//! Time: the pure parts take it as an argument ([`KeySet::generate`], [`KeySet::rotated`]); the
//! `ProducesTickets` methods, which rustls calls without one, read the wall clock through
//! [`now`] (`crate::clock::unix_time`) only for generated keys, to rotate them when due.

use std::fmt;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use aws_lc_rs::cipher::{
    Algorithm, DecryptionContext, PaddedBlockDecryptingKey, PaddedBlockEncryptingKey,
    UnboundCipherKey, AES_128, AES_256,
};
use aws_lc_rs::hmac;
use aws_lc_rs::iv::FixedLength;
use base64::Engine as _;
use rustls::server::ProducesTickets;

use super::{FileData, TlsError};

/// The lifetime hint sent with each ticket (a generated key encrypts for an hour and decrypts for
/// one more).
pub(crate) const LIFETIME_SECS: u32 = 2 * 3600;
/// Generated keys rotate this often.
pub(crate) const ROTATION_SECS: u64 = 3600;
/// Generated keys held at once: the previous, the one encrypting, the next.
const GENERATED: usize = 3;
/// A key of name, AES-128 key and 16-byte HMAC key.
pub(crate) const SHORT_KEY: usize = 48;
/// A key of name, AES-256 key and 32-byte HMAC key.
pub(crate) const LONG_KEY: usize = 80;
const NAME_LEN: usize = 16;
const IV_LEN: usize = 16;
const BLOCK_LEN: usize = 16;
const MAC_LEN: usize = 32;
/// The version of [`TicketKeys::export`]'s format.
pub(crate) const EXPORT_VERSION: u8 = 1;

/// One ticket key: its name (the first bytes of every ticket it made), its cipher keys and the
/// bytes it was made from (what a takeover hands over).
struct Key {
    raw: Box<[u8]>,
    name: [u8; NAME_LEN],
    seal: PaddedBlockEncryptingKey,
    open: PaddedBlockDecryptingKey,
    mac: hmac::Key,
}

impl Key {
    /// A key from its 48 or 80 bytes; None for any other length.
    fn new(raw: &[u8]) -> Option<Key> {
        let (algorithm, half): (&'static Algorithm, usize) = match raw.len() {
            SHORT_KEY => (&AES_128, 16),
            LONG_KEY => (&AES_256, 32),
            _ => return None,
        };
        let name: [u8; NAME_LEN] = raw.get(..NAME_LEN)?.try_into().ok()?;
        let aes = raw.get(NAME_LEN..NAME_LEN + half)?;
        let mac = raw.get(NAME_LEN + half..)?;
        let unbound = || UnboundCipherKey::new(algorithm, aes).ok();
        Some(Key {
            raw: raw.into(),
            name,
            seal: PaddedBlockEncryptingKey::cbc_pkcs7(unbound()?).ok()?,
            open: PaddedBlockDecryptingKey::cbc_pkcs7(unbound()?).ok()?,
            mac: hmac::Key::new(hmac::HMAC_SHA256, mac),
        })
    }

    /// A new random key of [`LONG_KEY`] bytes.
    fn random() -> Option<Key> {
        let mut raw = [0u8; LONG_KEY];
        aws_lc_rs::rand::fill(&mut raw).ok()?;
        Key::new(&raw)
    }

    fn seal(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let mut body = plain.to_vec();
        let context = self.seal.encrypt(&mut body).ok()?;
        let iv: &[u8] = (&context).try_into().ok()?;
        let mut ticket = Vec::with_capacity(NAME_LEN + IV_LEN + body.len() + MAC_LEN);
        ticket.extend_from_slice(&self.name);
        ticket.extend_from_slice(iv);
        ticket.extend_from_slice(&body);
        let tag = hmac::sign(&self.mac, &ticket);
        ticket.extend_from_slice(tag.as_ref());
        Some(ticket)
    }

    /// The state in `ticket` if this key made it (its name already matched).
    fn open(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        let (signed, tag) = ticket.split_at_checked(ticket.len().checked_sub(MAC_LEN)?)?;
        hmac::verify(&self.mac, signed, tag).ok()?;
        let iv: [u8; IV_LEN] = signed.get(NAME_LEN..NAME_LEN + IV_LEN)?.try_into().ok()?;
        let mut body = signed.get(NAME_LEN + IV_LEN..)?.to_vec();
        let context = DecryptionContext::Iv128(FixedLength::from(iv));
        let plain = self.open.decrypt(&mut body, context).ok()?;
        Some(plain.to_vec())
    }
}

/// Whether `ticket` has the shape of one of ours: name, IV, at least one whole cipher block, MAC.
fn well_formed(ticket: &[u8]) -> bool {
    let fixed = NAME_LEN + IV_LEN + MAC_LEN;
    ticket.len() >= fixed + BLOCK_LEN && (ticket.len() - fixed).is_multiple_of(BLOCK_LEN)
}

/// A set of keys: every one decrypts, `keys[enc]` encrypts. Generated sets know when they rotate.
pub(crate) struct KeySet {
    keys: Vec<Key>,
    enc: usize,
    /// Unix time (seconds) at which a generated set rotates; None for a key file's.
    rotate_at: Option<u64>,
}

impl KeySet {
    /// HAProxy's rule: the second-to-last key encrypts when there are two or more.
    fn encrypting(count: usize) -> usize {
        count.saturating_sub(2)
    }

    fn from_keys(keys: Vec<Key>, rotate_at: Option<u64>) -> KeySet {
        KeySet {
            enc: KeySet::encrypting(keys.len()),
            keys,
            rotate_at,
        }
    }

    /// Parses a `tls-ticket-keys` file. Errors name the file and line.
    pub(crate) fn parse(file: &FileData) -> Result<KeySet, TlsError> {
        let shown = file.path.display();
        let text = std::str::from_utf8(&file.bytes)
            .map_err(|_| TlsError::file(&file.path, "not text: a base64 key per line"))?;
        let mut keys = Vec::new();
        let mut first: Option<(usize, usize)> = None;
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(line)
                .map_err(|_| TlsError::new(format!("{shown}:{n}: not base64")))?;
            if bytes.len() != SHORT_KEY && bytes.len() != LONG_KEY {
                return Err(TlsError::new(format!(
                    "{shown}:{n}: a key has {SHORT_KEY} or {LONG_KEY} bytes, not {}",
                    bytes.len()
                )));
            }
            match first {
                Some((len, at)) if len != bytes.len() => {
                    return Err(TlsError::new(format!(
                        "{shown}:{n}: {} bytes where line {at} has {len}: all keys have one length",
                        bytes.len()
                    )))
                }
                Some(_) => {}
                None => first = Some((bytes.len(), n)),
            }
            let key = Key::new(&bytes)
                .ok_or_else(|| TlsError::new(format!("{shown}:{n}: not a usable key")))?;
            keys.push(key);
        }
        if keys.is_empty() {
            return Err(TlsError::file(&file.path, "no ticket key in the file"));
        }
        Ok(KeySet::from_keys(keys, None))
    }

    /// Three new random keys, rotating at `now + ROTATION_SECS`.
    pub(crate) fn generate(now: u64) -> Result<KeySet, TlsError> {
        let keys = (0..GENERATED)
            .map(|_| Key::random())
            .collect::<Option<Vec<Key>>>()
            .ok_or_else(|| TlsError::new("tls: cannot generate ticket keys"))?;
        Ok(KeySet::from_keys(
            keys,
            Some(now.saturating_add(ROTATION_SECS)),
        ))
    }

    /// The set after rotating as many times as are due at `now` (the oldest keys dropped, as
    /// many new ones appended), or None when no rotation is due (or the set never rotates).
    pub(crate) fn rotated(&self, now: u64) -> Option<KeySet> {
        let at = self.rotate_at?;
        if now < at {
            return None;
        }
        let due = ((now - at) / ROTATION_SECS).saturating_add(1);
        let steps = usize::try_from(due).unwrap_or(usize::MAX).min(GENERATED);
        let mut keys: Vec<Key> = self
            .keys
            .iter()
            .skip(steps)
            .filter_map(|k| Key::new(&k.raw))
            .collect();
        for _ in 0..steps {
            keys.push(Key::random()?);
        }
        let next = at.saturating_add(due.saturating_mul(ROTATION_SECS));
        Some(KeySet::from_keys(keys, Some(next)))
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.keys.get(self.enc)?.seal(plain)
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        if !well_formed(ticket) {
            return None;
        }
        let name = ticket.get(..NAME_LEN)?;
        self.keys
            .iter()
            .find(|k| k.name[..] == *name)
            .and_then(|k| k.open(ticket))
    }

    /// Version-1 bytes: `enc(1) | rotate_at(8, big-endian, 0 = never) | key length(1) |
    /// count(1) | keys`.
    fn export(&self) -> Vec<u8> {
        let len = self.keys.first().map_or(0, |k| k.raw.len());
        let mut out = Vec::with_capacity(11 + len * self.keys.len());
        out.push(u8::try_from(self.enc).unwrap_or(0));
        out.extend_from_slice(&self.rotate_at.unwrap_or(0).to_be_bytes());
        out.push(u8::try_from(len).unwrap_or(0));
        out.push(u8::try_from(self.keys.len()).unwrap_or(0));
        for k in self.keys.iter().take(usize::from(u8::MAX)) {
            out.extend_from_slice(&k.raw);
        }
        out
    }

    /// The set [`KeySet::export`] wrote; None for anything else.
    fn import(bytes: &[u8]) -> Option<KeySet> {
        let (&enc, rest) = bytes.split_first()?;
        let (at, rest) = rest.split_at_checked(8)?;
        let rotate_at = u64::from_be_bytes(at.try_into().ok()?);
        let (&len, rest) = rest.split_first()?;
        let (&count, rest) = rest.split_first()?;
        let (len, count) = (usize::from(len), usize::from(count));
        if count == 0
            || len == 0
            || usize::from(enc) >= count
            || rest.len() != len.checked_mul(count)?
        {
            return None;
        }
        let keys = rest
            .chunks_exact(len)
            .map(Key::new)
            .collect::<Option<Vec<Key>>>()?;
        Some(KeySet {
            keys,
            enc: usize::from(enc),
            rotate_at: (rotate_at != 0).then_some(rotate_at),
        })
    }
}

/// Shows how many keys, which one encrypts and when they rotate; never a key's bytes.
impl fmt::Debug for KeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeySet")
            .field("keys", &self.keys.len())
            .field("encrypting", &self.enc)
            .field("rotate_at", &self.rotate_at)
            .finish()
    }
}

/// The ticket keys a listener's `ServerConfig` uses: one encrypts, every one decrypts. Read
/// with one `ArcSwap` load per ticket; generated keys rotate in place when due.
pub(crate) struct TicketKeys {
    set: ArcSwap<KeySet>,
}

impl fmt::Debug for TicketKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TicketKeys")
            .field(&**self.set.load())
            .finish()
    }
}

/// The wall clock in Unix seconds, read only to rotate generated keys (rustls asks for tickets
/// without giving the time).
fn now() -> u64 {
    crate::clock::unix_time()
}

impl TicketKeys {
    fn with(set: KeySet) -> TicketKeys {
        TicketKeys {
            set: ArcSwap::from_pointee(set),
        }
    }

    /// Keys generated by this process, rotating hourly from now.
    pub(crate) fn generate() -> Result<Arc<TicketKeys>, TlsError> {
        Ok(Arc::new(TicketKeys::with(KeySet::generate(now())?)))
    }

    /// Keys read from HAProxy's `tls-ticket-keys` file format.
    pub(crate) fn from_file(file: &FileData) -> Result<Arc<TicketKeys>, TlsError> {
        Ok(Arc::new(TicketKeys::with(KeySet::parse(file)?)))
    }

    /// The keys as a takeover hands them over ([`EXPORT_VERSION`]'s format).
    pub(crate) fn export(&self) -> Vec<u8> {
        self.set.load().export()
    }

    /// Keys that [`TicketKeys::export`] wrote; None for any other bytes.
    pub(crate) fn import(bytes: &[u8]) -> Option<TicketKeys> {
        KeySet::import(bytes).map(TicketKeys::with)
    }

    /// The set to use at `now`, rotated first when due (several workers may race: whichever
    /// swaps first wins, the others see its set as not due).
    fn current_at(&self, now: u64) -> arc_swap::Guard<Arc<KeySet>> {
        let set = self.set.load();
        if set.rotate_at.is_some_and(|at| now >= at) {
            drop(set);
            self.set
                .rcu(|cur| cur.rotated(now).map_or_else(|| cur.clone(), Arc::new));
            return self.set.load();
        }
        set
    }

    fn current(&self) -> arc_swap::Guard<Arc<KeySet>> {
        let set = self.set.load();
        if set.rotate_at.is_none() {
            return set;
        }
        drop(set);
        self.current_at(now())
    }
}

impl ProducesTickets for TicketKeys {
    fn enabled(&self) -> bool {
        !self.set.load().keys.is_empty()
    }

    fn lifetime(&self) -> u32 {
        LIFETIME_SECS
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.current().encrypt(plain)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.current().decrypt(cipher)
    }
}

static SHARED: OnceLock<Arc<TicketKeys>> = OnceLock::new();

/// The process's generated keys, shared by every listener without a key file (generated on first
/// use; a takeover installs the previous process's instead).
pub(crate) fn shared_keys() -> Arc<TicketKeys> {
    SHARED
        .get_or_init(|| {
            TicketKeys::generate().unwrap_or_else(|_| {
                Arc::new(TicketKeys::with(KeySet {
                    keys: Vec::new(),
                    enc: 0,
                    rotate_at: None,
                }))
            })
        })
        .clone()
}

/// Makes `keys` (a previous process's, from a takeover) the shared keys: listeners built before
/// or after use them, since they hold the one shared object whose key set this replaces.
pub(crate) fn install_shared(keys: TicketKeys) {
    shared_keys().set.store(keys.set.load_full());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key_line(len: usize, seed: u8) -> String {
        let bytes: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    fn file(text: &str) -> FileData {
        FileData {
            path: "keys.txt".into(),
            bytes: text.as_bytes().into(),
        }
    }

    fn parse(text: &str) -> Result<KeySet, String> {
        KeySet::parse(&file(text)).map_err(|e| e.to_string())
    }

    #[test]
    fn a_ticket_decrypts_with_the_key_that_made_it_and_no_other() {
        let set = parse(&key_line(LONG_KEY, 1)).unwrap();
        let ticket = set.encrypt(b"session state").unwrap();
        assert_eq!(set.decrypt(&ticket).unwrap(), b"session state");
        let other = parse(&key_line(LONG_KEY, 2)).unwrap();
        assert_eq!(other.decrypt(&ticket), None);
        let short = parse(&key_line(SHORT_KEY, 1)).unwrap();
        let t = short.encrypt(b"").unwrap();
        assert_eq!(short.decrypt(&t).unwrap(), b"");
    }

    #[test]
    fn the_second_to_last_key_encrypts_and_every_key_decrypts() {
        let lines = [1, 2, 3].map(|s| key_line(SHORT_KEY, s)).join("\n");
        let set = parse(&format!("# keys\n\n{lines}\n")).unwrap();
        assert_eq!((set.keys.len(), set.enc), (3, 1));
        let ticket = set.encrypt(b"x").unwrap();
        assert_eq!(ticket[..NAME_LEN], set.keys[1].name);
        for (i, seed) in [1u8, 2, 3].iter().enumerate() {
            let alone = parse(&key_line(SHORT_KEY, *seed)).unwrap();
            let t = alone.encrypt(b"y").unwrap();
            assert_eq!(set.decrypt(&t).unwrap(), b"y", "key {i}");
        }
        assert_eq!(parse(&key_line(SHORT_KEY, 9)).unwrap().enc, 0);
        assert_eq!(KeySet::encrypting(2), 0);
        assert_eq!(KeySet::encrypting(0), 0);
    }

    #[test]
    fn a_bad_key_file_is_named_with_its_line() {
        let good = key_line(SHORT_KEY, 1);
        assert_eq!(
            parse(&format!("{good}\n# c\nnot*base64\n")).unwrap_err(),
            "keys.txt:3: not base64"
        );
        assert_eq!(
            parse(&key_line(20, 1)).unwrap_err(),
            "keys.txt:1: a key has 48 or 80 bytes, not 20"
        );
        assert_eq!(
            parse(&format!("{good}\n{}\n", key_line(LONG_KEY, 2))).unwrap_err(),
            "keys.txt:2: 80 bytes where line 1 has 48: all keys have one length"
        );
        assert_eq!(
            parse("# only a comment\n").unwrap_err(),
            "keys.txt: no ticket key in the file"
        );
    }

    #[test]
    fn generated_keys_rotate_hourly_and_keep_the_previous_key_for_decrypting() {
        let set = KeySet::generate(1000).unwrap();
        assert_eq!((set.keys.len(), set.enc), (3, 1));
        assert!(set.rotated(1000 + ROTATION_SECS - 1).is_none());
        let ticket = set.encrypt(b"s").unwrap();
        let next = set.rotated(1000 + ROTATION_SECS).unwrap();
        assert_eq!(next.rotate_at, Some(1000 + 2 * ROTATION_SECS));
        assert_eq!(next.keys[0].name, set.keys[1].name);
        assert_eq!(next.decrypt(&ticket).unwrap(), b"s");
        let after = next.rotated(1000 + 2 * ROTATION_SECS + 5).unwrap();
        assert_eq!(after.decrypt(&ticket), None);
        // Long idle: everything is replaced at once, and the next rotation is in the future.
        let late = set.rotated(1000 + 10 * ROTATION_SECS + 7).unwrap();
        assert_eq!(late.keys.len(), 3);
        assert!(late
            .keys
            .iter()
            .all(|k| set.keys.iter().all(|o| o.name != k.name)));
        assert_eq!(late.rotate_at, Some(1000 + 11 * ROTATION_SECS));
    }

    #[test]
    fn ticket_keys_rotate_in_place_when_due() {
        let keys = TicketKeys::with(KeySet::generate(0).unwrap());
        let before = keys.current_at(10).keys[1].name;
        assert_eq!(keys.current_at(ROTATION_SECS - 1).keys[1].name, before);
        let now = keys.current_at(ROTATION_SECS);
        assert_eq!(now.keys[0].name, before);
        assert_eq!(keys.set.load().rotate_at, Some(2 * ROTATION_SECS));
    }

    #[test]
    fn exported_keys_import_to_the_same_keys() {
        let keys = TicketKeys::with(KeySet::generate(77).unwrap());
        let ticket = keys.current_at(78).encrypt(b"state").unwrap();
        let bytes = keys.export();
        let back = TicketKeys::import(&bytes).unwrap();
        assert_eq!(back.set.load().rotate_at, Some(77 + ROTATION_SECS));
        assert_eq!(back.current_at(78).decrypt(&ticket).unwrap(), b"state");
        assert_eq!(back.export(), bytes);
        for cut in 0..bytes.len() {
            assert!(TicketKeys::import(&bytes[..cut]).is_none(), "cut at {cut}");
        }
        let mut bad_enc = bytes.clone();
        bad_enc[0] = 3;
        assert!(TicketKeys::import(&bad_enc).is_none());
    }

    #[test]
    fn a_tampered_ticket_is_refused() {
        let set = KeySet::generate(0).unwrap();
        let ticket = set.encrypt(b"0123456789abcdef0123").unwrap();
        for i in 0..ticket.len() {
            let mut t = ticket.clone();
            t[i] ^= 0x01;
            assert_eq!(set.decrypt(&t), None, "byte {i}");
        }
    }

    #[test]
    fn install_shared_replaces_the_keys_of_configs_built_before() {
        let shared = shared_keys();
        let given = TicketKeys::with(KeySet::generate(now()).unwrap());
        let ticket = given.encrypt(b"handed over").unwrap();
        install_shared(given);
        assert_eq!(shared.decrypt(&ticket).unwrap(), b"handed over");
        assert!(shared.enabled());
        assert_eq!(shared.lifetime(), LIFETIME_SECS);
    }

    /// Handshakes in memory between rustls' client and the `ServerConfig` that `build_server`
    /// makes: tickets of one config resume on another built from the same keys.
    mod handshakes {
        use super::*;
        use crate::tls::{build_server, CertFiles, ClientAuth, TlsSettings};
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::CertificateDer;
        use rustls::{ClientConfig, ClientConnection, HandshakeKind, ServerConnection};

        struct Site {
            settings: TlsSettings,
            roots: rustls::RootCertStore,
        }

        fn site() -> Site {
            let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
            let pem = ck.cert.pem();
            let data = |name: &str, text: &str| FileData {
                path: name.into(),
                bytes: text.as_bytes().into(),
            };
            let certs = vec![CertFiles {
                cert: data("site.pem", &pem),
                key: data("site.key", &ck.signing_key.serialize_pem()),
                ocsp: None,
                names: Vec::new(),
                default: true,
            }];
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(CertificateDer::from_pem_slice(pem.as_bytes()).unwrap())
                .unwrap();
            Site {
                settings: TlsSettings::new(certs),
                roots,
            }
        }

        fn client(
            site: &Site,
            version: &'static rustls::SupportedProtocolVersion,
        ) -> Arc<ClientConfig> {
            Arc::new(
                ClientConfig::builder_with_provider(Arc::new(crate::tls::provider()))
                    .with_protocol_versions(&[version])
                    .unwrap()
                    .with_root_certificates(site.roots.clone())
                    .with_no_client_auth(),
            )
        }

        fn server(settings: &TlsSettings, shared: &Arc<TicketKeys>) -> Arc<rustls::ServerConfig> {
            build_server(settings, false, shared).unwrap().config
        }

        fn handshake(
            client: &Arc<ClientConfig>,
            server: &Arc<rustls::ServerConfig>,
        ) -> HandshakeKind {
            let name = "localhost".try_into().unwrap();
            let mut c = ClientConnection::new(client.clone(), name).unwrap();
            let mut s = ServerConnection::new(server.clone()).unwrap();
            for _ in 0..20 {
                let mut buf = Vec::new();
                while c.wants_write() {
                    c.write_tls(&mut buf).unwrap();
                }
                let mut rd = &buf[..];
                while !rd.is_empty() {
                    s.read_tls(&mut rd).unwrap();
                    s.process_new_packets().unwrap();
                }
                let mut buf = Vec::new();
                while s.wants_write() {
                    s.write_tls(&mut buf).unwrap();
                }
                let mut rd = &buf[..];
                while !rd.is_empty() {
                    c.read_tls(&mut rd).unwrap();
                    c.process_new_packets().unwrap();
                }
                if !c.is_handshaking()
                    && !s.is_handshaking()
                    && !s.wants_write()
                    && !c.wants_write()
                {
                    break;
                }
            }
            assert!(!c.is_handshaking());
            c.handshake_kind().unwrap()
        }

        const VERSIONS: [&rustls::SupportedProtocolVersion; 2] =
            [&rustls::version::TLS13, &rustls::version::TLS12];

        #[test]
        fn two_configs_with_one_key_file_resume_each_others_sessions() {
            let mut site = site();
            let lines = [1, 2].map(|s| key_line(LONG_KEY, s)).join("\n");
            site.settings.ticket_keys = Some(file(&lines));
            let unused = shared_keys();
            for v in VERSIONS {
                let c = client(&site, v);
                let (a, b) = (
                    server(&site.settings, &unused),
                    server(&site.settings, &unused),
                );
                assert_eq!(handshake(&c, &a), HandshakeKind::Full);
                assert_eq!(handshake(&c, &b), HandshakeKind::Resumed, "{v:?}");
                assert_eq!(handshake(&c, &a), HandshakeKind::Resumed, "{v:?}");
            }
        }

        #[test]
        fn handed_over_keys_resume_and_other_keys_do_not() {
            let site = site();
            let old = TicketKeys::generate().unwrap();
            let new = Arc::new(TicketKeys::import(&old.export()).unwrap());
            let other = TicketKeys::generate().unwrap();
            for v in VERSIONS {
                let c = client(&site, v);
                assert_eq!(
                    handshake(&c, &server(&site.settings, &old)),
                    HandshakeKind::Full
                );
                let on_new = handshake(&c, &server(&site.settings, &new));
                assert_eq!(on_new, HandshakeKind::Resumed, "{v:?}");
                let c = client(&site, v);
                assert_eq!(
                    handshake(&c, &server(&site.settings, &old)),
                    HandshakeKind::Full
                );
                let on_other = handshake(&c, &server(&site.settings, &other));
                assert_eq!(on_other, HandshakeKind::Full, "{v:?}");
            }
        }

        #[test]
        fn no_resumption_when_client_certificates_are_asked_for() {
            let mut site = site();
            let ca = rcgen::generate_simple_self_signed(vec!["ca".into()]).unwrap();
            site.settings.client_auth = Some(ClientAuth {
                ca: vec![file(&ca.cert.pem())],
                crls: Vec::new(),
                required: false,
                ca_dir: None,
            });
            let keys = TicketKeys::generate().unwrap();
            for v in VERSIONS {
                let c = client(&site, v);
                let s = server(&site.settings, &keys);
                assert_eq!(handshake(&c, &s), HandshakeKind::Full);
                assert_eq!(handshake(&c, &s), HandshakeKind::Full, "{v:?}");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn no_byte_sequence_panics_or_decrypts(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let set = KeySet::generate(0).unwrap();
            prop_assert_eq!(set.decrypt(&bytes), None);
            // A well-formed ticket under a key name of ours still needs the MAC.
            let mut named = set.keys[1].name.to_vec();
            named.extend_from_slice(&bytes);
            prop_assert_eq!(set.decrypt(&named), None);
            let _ = TicketKeys::import(&bytes);
            let _ = KeySet::parse(&FileData { path: "k".into(), bytes: bytes.clone().into() });
        }
    }
}
