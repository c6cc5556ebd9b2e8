//! The record layer of a terminated TLS connection once its handshake is done, pure (bytes in;
//! plaintext, events and records out; no socket). Quill's TLS streams (`net::tls` in the quill
//! package) drive it; it lives here, behind the `tls` feature, so that its fuzz target builds it
//! as a crate item rather than including a file of the product.
//!
//! After the handshake the server's rustls connection is turned into its traffic secrets and a
//! `KernelConnection` (rustls' kernel API, made for kTLS): the connection's large state is
//! dropped, and records are protected here with rustls' own record protection
//! (`MessageEncrypter`/`MessageDecrypter` of the negotiated suite), but for TLS 1.3's records out:
//! those are sealed into the caller's output buffer ([`Sink`]) with aws-lc's AEAD, the crypto
//! rustls uses, AES-GCM's straight from the caller's plaintext when a record's bytes are one
//! slice, without a copy first (RFC 8446 §5.2: the plaintext, its content type, the tag; the
//! nonce the static IV XOR the sequence number; the record header as additional data). A
//! differential test checks every TLS 1.3 suite byte for byte against rustls' sealing. The
//! `KernelConnection` is kept only to compute the next secrets of a TLS 1.3 key update.
//!
//! What rustls does per record, this does too: records over the version's size are refused with
//! record_overflow, a record that fails to decrypt with bad_record_mac, plaintext over 16 KiB with
//! record_overflow; more than 32 empty records in a row end the connection. Alerts: close_notify
//! ends the peer's plaintext, an unknown level is an illegal_parameter, a fatal one ends the
//! connection; warnings are bounded (4 in the connection's life), and TLS 1.3 allows only
//! user_canceled as a warning (any other is a decode_error). Handshake messages are joined across
//! records (RFC 8446 allows fragmenting them) but not interleaved with other records, and a message
//! that changes keys must end its record. TLS 1.3: a KeyUpdate gives new receive keys (and is
//! answered when asked; a `request_update` other than 0 or 1 is an illegal_parameter; more than
//! 32 KeyUpdates without application data between them are refused, as rustls bounds them); any
//! other handshake message is an unexpected_message. TLS 1.2: a ClientHello (renegotiation) is
//! answered with a no_renegotiation warning, once (a second one ends the connection), any other
//! handshake message is an unexpected_message; ChangeCipherSpec and unknown content types are
//! refused with unexpected_message. Before the write sequence number reaches the suite's
//! confidentiality limit, TLS 1.3 updates its sending keys, TLS 1.2 closes.

use std::ops::Range;

use aws_lc_rs::aead::{
    Aad, LessSafeKey, Nonce, TlsProtocolId, TlsRecordSealingKey, UnboundKey, AES_128_GCM,
    AES_256_GCM, CHACHA20_POLY1305,
};
use rustls::crypto::cipher::{
    make_tls13_aad, AeadKey, InboundOpaqueMessage, Iv, MessageDecrypter, MessageEncrypter,
    Nonce as TlsNonce, OutboundChunks, OutboundPlainMessage,
};
use rustls::kernel::KernelConnection;
use rustls::server::ServerConnectionData;
use rustls::{
    AlertDescription, CipherSuite, ConnectionTrafficSecrets, ContentType, Error, ExtractedSecrets,
    ProtocolVersion, SupportedCipherSuite,
};

/// The most plaintext a record carries.
pub const MAX_PLAIN: usize = 1 << 14;
/// The largest TLS 1.3 record payload (plaintext, content type, padding and tag).
const MAX_CIPHER_13: usize = MAX_PLAIN + 256;
/// The largest TLS 1.2 record payload.
const MAX_CIPHER_12: usize = MAX_PLAIN + 2048;
/// Record header: type, version, length.
const HEADER: usize = 5;
/// The sequence numbers rustls stops at: past the soft one it refreshes keys or closes, at the
/// hard one it refuses to read or write.
const SEQ_SOFT_LIMIT: u64 = 0xffff_ffff_ffff_0000;
const SEQ_HARD_LIMIT: u64 = 0xffff_ffff_ffff_fffe;
/// TLS 1.3 KeyUpdate: handshake type 24, a one-byte body.
const KEY_UPDATE: u8 = 24;
/// KeyUpdates the peer may send in a row without application data between them (rustls' own
/// bound): past it the connection is refused, so a peer cannot keep us deriving keys for free.
const KEY_UPDATES_IN_A_ROW: u8 = 32;
/// TLS 1.2 ClientHello (a renegotiation attempt after the handshake).
const CLIENT_HELLO: u8 = 1;
/// Empty records the peer may send in a row (rustls' bound).
const EMPTY_IN_A_ROW: u8 = 32;
/// Warning alerts the peer may send in the connection's life (rustls' bound).
const WARNINGS: u8 = 4;
/// The largest handshake message joined after the handshake (rustls' own limit): only a TLS
/// 1.2 ClientHello is that long, and its bytes are skipped, not kept.
const MAX_HANDSHAKE_MESSAGE: u32 = 0xffff;

/// An AEAD tag's length (all of TLS 1.3's suites).
const TAG: usize = 16;

/// Where [`Records`] puts the records it seals: room at the end of an output buffer, filled in
/// place.
pub trait Sink {
    /// At least `n` bytes of room after the bytes held.
    fn room(&mut self, n: usize) -> &mut [u8];
    /// The first `n` bytes of the room are filled: they are held now.
    fn filled(&mut self, n: usize);
}

/// A `Vec` as a [`Sink`] (tests, fuzzing): the records sealed, in order.
#[derive(Debug, Default)]
pub struct Collect {
    bytes: Vec<u8>,
    held: usize,
}

impl Collect {
    /// The records sealed so far.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..self.held]
    }

    pub fn into_bytes(mut self) -> Vec<u8> {
        self.bytes.truncate(self.held);
        self.bytes
    }
}

impl Sink for Collect {
    fn room(&mut self, n: usize) -> &mut [u8] {
        self.bytes.truncate(self.held);
        self.bytes.resize(self.held + n, 0);
        &mut self.bytes[self.held..]
    }

    fn filled(&mut self, n: usize) {
        self.held = (self.held + n).min(self.bytes.len());
        self.bytes.truncate(self.held);
    }
}

/// What a record read brought.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// Application data, decrypted in place: this range of the buffer given.
    Data(Range<usize>),
    /// close_notify: the peer's plaintext has ended.
    PeerClosed,
    /// A record with nothing for the reader (a key update, an ignored alert).
    Nothing,
}

/// The traffic state of a server connection: keys, sequence numbers, what is owed to the peer.
pub struct Records {
    kernel: Box<KernelConnection<ServerConnectionData>>,
    enc: Sealer,
    dec: Box<dyn MessageDecrypter>,
    tx_seq: u64,
    rx_seq: u64,
    suite: SupportedCipherSuite,
    /// The write sequence number at which TLS 1.3 updates keys and TLS 1.2 closes.
    tx_limit: u64,
    tls13: bool,
    /// The peer asked for a key update: ours is owed before the next record.
    owe_key_update: bool,
    /// The peer's KeyUpdates since its last application data.
    key_updates: u8,
    /// A fatal alert to send (once), after which nothing else is.
    owe_alert: Option<AlertDescription>,
    /// A warning alert to send (no_renegotiation) before the next record.
    owe_warning: Option<AlertDescription>,
    /// The handshake message being joined across records.
    joining: Joining,
    /// Empty records since the last one that was not.
    empty_in_a_row: u8,
    /// Warning alerts received.
    warnings: u8,
    /// Renegotiation attempts received (TLS 1.2).
    renegotiations: u8,
    /// The connection failed (a fatal alert was sent or received): nothing more is read or written.
    failed: bool,
    /// close_notify was sent: nothing more is written.
    closed_tx: bool,
}

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Records")
            .field("suite", &self.suite.suite())
            .field("tx_seq", &self.tx_seq)
            .field("rx_seq", &self.rx_seq)
            .finish_non_exhaustive()
    }
}

/// A handshake message being joined across records: its 4-byte header, then its body (only a
/// KeyUpdate's one byte is kept; a refused ClientHello's are skipped).
#[derive(Debug, Default)]
struct Joining {
    head: [u8; 4],
    /// Header bytes held (0 when no message is being joined).
    have: u8,
    /// Body bytes still to come, once the header is whole.
    left: u32,
    /// The KeyUpdate's `request_update`, once it came.
    request: Option<u8>,
}

impl Joining {
    fn active(&self) -> bool {
        self.have > 0
    }
}

fn key_iv(secrets: ConnectionTrafficSecrets) -> Result<(AeadKey, Iv), Error> {
    match secrets {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv }
        | ConnectionTrafficSecrets::Aes256Gcm { key, iv }
        | ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => Ok((key, iv)),
        _ => Err(Error::General("unsupported TLS traffic secrets".into())),
    }
}

/// The most records sealed under a key before it is taken over (see [`encrypter`]): rustls'
/// handshake seals a few (Finished, session tickets).
const PRIME_MAX: u64 = 64;

/// The encrypter for `secrets`, ready to seal record `seq`. aws-lc's AES-GCM sealing keys learn
/// their nonce mask from the first record they seal (taken to be number 0) and then refuse a
/// nonce that does not count up from it; rustls sealed the first records of a key taken over
/// after the handshake, so the new encrypter first seals an empty record for each earlier number
/// and drops it (never sent: no nonce is seen twice).
fn encrypter(
    suite: SupportedCipherSuite,
    (seq, secrets): (u64, ConnectionTrafficSecrets),
) -> Result<Box<dyn MessageEncrypter>, Error> {
    if seq > PRIME_MAX {
        return Err(Error::General(
            "TLS keys taken over too late in their sequence".into(),
        ));
    }
    let mut enc = new_encrypter(suite, secrets)?;
    for n in 0..seq {
        let msg = OutboundPlainMessage {
            typ: ContentType::ApplicationData,
            version: ProtocolVersion::TLSv1_2,
            payload: OutboundChunks::new_empty(),
        };
        enc.encrypt(msg, n)?;
    }
    Ok(enc)
}

/// How records out are sealed.
enum Sealer {
    /// TLS 1.3: into the sink, here.
    Own(Box<Tls13Sealer>),
    /// TLS 1.2: rustls' encrypter.
    Rustls(Box<dyn MessageEncrypter>),
}

/// The sealer of `secrets`' keys, ready for record `seq`: TLS 1.3's own, else rustls'
/// ([`encrypter`]).
fn sealer(
    suite: SupportedCipherSuite,
    (seq, secrets): (u64, ConnectionTrafficSecrets),
) -> Result<Sealer, Error> {
    match (suite, Tls13Sealer::algorithm(suite.suite())) {
        (SupportedCipherSuite::Tls13(_), Some(algorithm)) => {
            let (key, iv) = key_iv(secrets)?;
            Ok(Sealer::Own(Box::new(Tls13Sealer::new(
                algorithm,
                key.as_ref(),
                iv,
                seq,
            )?)))
        }
        _ => Ok(Sealer::Rustls(encrypter(suite, (seq, secrets))?)),
    }
}

/// TLS 1.3 record protection (RFC 8446 §5.2-5.3) for one direction's keys.
struct Tls13Sealer {
    key: SealingKey,
    iv: Iv,
}

/// The AEAD key of a [`Tls13Sealer`].
enum SealingKey {
    /// AES-GCM: aws-lc's TLS 1.3 construction, which can encrypt from the caller's plaintext
    /// straight into the record (no copy into the record first). It checks that nonces come
    /// in order of sequence number, from record 0 on (see [`Tls13Sealer::new`]).
    Gcm(TlsRecordSealingKey),
    /// ChaCha20-Poly1305 (which that construction does not offer): sealed in place.
    General(LessSafeKey),
}

impl Tls13Sealer {
    /// The AEAD of a TLS 1.3 suite (those rustls offers).
    fn algorithm(suite: CipherSuite) -> Option<&'static aws_lc_rs::aead::Algorithm> {
        match suite {
            CipherSuite::TLS13_AES_128_GCM_SHA256 => Some(&AES_128_GCM),
            CipherSuite::TLS13_AES_256_GCM_SHA384 => Some(&AES_256_GCM),
            CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 => Some(&CHACHA20_POLY1305),
            _ => None,
        }
    }

    /// The sealer of `key` and `iv`, whose next record is number `seq`.
    ///
    /// aws-lc's TLS 1.3 AES-GCM takes the nonce of its first seal as that of record 0 (the IV
    /// itself) and refuses nonces out of order after it. Rustls hands over keys that sealed a
    /// few records already (the session tickets after the handshake), so a sealer that starts
    /// past record 0 first seals an empty record 0 whose output is dropped: it tells aws-lc
    /// the IV, and no bytes of it leave this function (rustls' own record 0, under the same key
    /// and nonce, is the only one the peer ever sees).
    fn new(
        algorithm: &'static aws_lc_rs::aead::Algorithm,
        key: &[u8],
        iv: Iv,
        seq: u64,
    ) -> Result<Tls13Sealer, Error> {
        let bad = |_| Error::General("bad TLS 1.3 traffic key".into());
        let key = if *algorithm == AES_128_GCM || *algorithm == AES_256_GCM {
            let mut gcm =
                TlsRecordSealingKey::new(algorithm, TlsProtocolId::TLS13, key).map_err(bad)?;
            if seq > 0 {
                let nonce = Nonce::assume_unique_for_key(TlsNonce::new(&iv, 0).0);
                gcm.seal_in_place_separate_tag(nonce, Aad::empty(), &mut [])
                    .map(drop)
                    .map_err(bad)?;
            }
            SealingKey::Gcm(gcm)
        } else {
            SealingKey::General(LessSafeKey::new(
                UnboundKey::new(algorithm, key).map_err(bad)?,
            ))
        };
        Ok(Tls13Sealer { key, iv })
    }

    /// The sealer of a TLS 1.3 suite's key and IV, for record `seq` on (the differential
    /// test's way in).
    #[cfg(test)]
    fn for_suite(suite: CipherSuite, key: &[u8], iv: &[u8], seq: u64) -> Option<Tls13Sealer> {
        let iv: [u8; 12] = iv.try_into().ok()?;
        Tls13Sealer::new(Tls13Sealer::algorithm(suite)?, key, Iv::from(iv), seq).ok()
    }

    /// Whether records are sealed by aws-lc's TLS 1.3 AES-GCM construction (from the caller's
    /// bytes) rather than in place.
    #[cfg(test)]
    fn seals_out_of_place(&self) -> bool {
        matches!(self.key, SealingKey::Gcm(_))
    }

    /// Seals record number `seq` of content type `typ` holding `plain` (at most [`MAX_PLAIN`]
    /// bytes) into `out`'s room.
    fn seal(
        &mut self,
        typ: ContentType,
        plain: &OutboundChunks<'_>,
        seq: u64,
        out: &mut dyn Sink,
    ) -> Result<(), Error> {
        let n = plain.len();
        let payload = n + 1 + TAG;
        let total = HEADER + payload;
        let length = u16::try_from(payload).map_err(|_| Error::EncryptError)?;
        let record = out
            .room(total)
            .get_mut(..total)
            .ok_or(Error::EncryptError)?;
        let (header, body) = record.split_at_mut(HEADER);
        let aad = make_tls13_aad(usize::from(length));
        header.copy_from_slice(&aad);
        // rustls' own nonce (the IV XOR the sequence number) and additional data (the header).
        let nonce = Nonce::assume_unique_for_key(TlsNonce::new(&self.iv, seq).0);
        let typ = [u8::from(typ)];
        match (&mut self.key, contiguous(plain)) {
            (SealingKey::Gcm(key), Some(plain)) => {
                // From the caller's bytes into the record; the content type and the tag after.
                let (cipher, rest) = body.split_at_mut(n);
                key.seal_out_of_place_scatter(nonce, Aad::from(aad), plain, cipher, &typ, rest)
                    .map_err(|_| Error::EncryptError)?;
            }
            (key, _) => {
                let (inner, tag_out) = body.split_at_mut(n + 1);
                copy_chunks(plain, &mut inner[..n]);
                inner[n] = typ[0];
                let tag = match key {
                    SealingKey::Gcm(key) => {
                        key.seal_in_place_separate_tag(nonce, Aad::from(aad), inner)
                    }
                    SealingKey::General(key) => {
                        key.seal_in_place_separate_tag(nonce, Aad::from(aad), inner)
                    }
                }
                .map_err(|_| Error::EncryptError)?;
                tag_out.copy_from_slice(tag.as_ref());
            }
        }
        out.filled(total);
        Ok(())
    }
}

/// The pieces of `chunks`' bytes in order, each a slice of one chunk (empty ones left out).
fn parts<'a>(chunks: &OutboundChunks<'a>) -> impl Iterator<Item = &'a [u8]> {
    let (single, list, start, end) = match *chunks {
        OutboundChunks::Single(bytes) => (Some(bytes), &[][..], 0, 0),
        OutboundChunks::Multiple { chunks, start, end } => (None, chunks, start, end),
    };
    let mut at = 0;
    let pieces = list.iter().filter_map(move |chunk| {
        let (from, to) = (at, at + chunk.len());
        at = to;
        let part = chunk.get(start.clamp(from, to) - from..end.clamp(from, to) - from)?;
        (!part.is_empty()).then_some(part)
    });
    single.into_iter().chain(pieces)
}

/// The bytes of `chunks` when they are one slice (a record's plaintext taken from one buffer).
fn contiguous<'a>(chunks: &OutboundChunks<'a>) -> Option<&'a [u8]> {
    let mut parts = parts(chunks);
    let first = parts.next().unwrap_or_default();
    parts.next().is_none().then_some(first)
}

/// Copies the bytes of `chunks` into `out` (exactly as long).
fn copy_chunks(chunks: &OutboundChunks<'_>, out: &mut [u8]) {
    let mut written = 0;
    for part in parts(chunks) {
        out[written..written + part.len()].copy_from_slice(part);
        written += part.len();
    }
}

fn new_encrypter(
    suite: SupportedCipherSuite,
    secrets: ConnectionTrafficSecrets,
) -> Result<Box<dyn MessageEncrypter>, Error> {
    let (key, iv) = key_iv(secrets)?;
    Ok(match suite {
        SupportedCipherSuite::Tls13(s) => s.aead_alg.encrypter(key, iv),
        SupportedCipherSuite::Tls12(s) => {
            // TLS 1.2's 12 bytes are the key block's fixed part, then its explicit nonce part.
            let fixed = s.aead_alg.key_block_shape().fixed_iv_len;
            let iv = iv.as_ref();
            let (fixed, explicit) = iv.split_at(fixed.min(iv.len()));
            s.aead_alg.encrypter(key, fixed, explicit)
        }
    })
}

fn decrypter(
    suite: SupportedCipherSuite,
    secrets: ConnectionTrafficSecrets,
) -> Result<Box<dyn MessageDecrypter>, Error> {
    let (key, iv) = key_iv(secrets)?;
    Ok(match suite {
        SupportedCipherSuite::Tls13(s) => s.aead_alg.decrypter(key, iv),
        SupportedCipherSuite::Tls12(s) => {
            let fixed = s.aead_alg.key_block_shape().fixed_iv_len;
            let iv = iv.as_ref();
            s.aead_alg.decrypter(key, &iv[..fixed.min(iv.len())])
        }
    })
}

impl Records {
    /// The traffic state from what `dangerous_into_kernel_connection` gave.
    pub fn new(
        secrets: ExtractedSecrets,
        kernel: KernelConnection<ServerConnectionData>,
    ) -> Result<Records, Error> {
        let suite = kernel.negotiated_cipher_suite();
        let tls13 = kernel.protocol_version() == ProtocolVersion::TLSv1_3;
        let tx_seq = secrets.tx.0;
        let (rx_seq, rx) = secrets.rx;
        let limit = match suite {
            SupportedCipherSuite::Tls13(s) => s.common.confidentiality_limit,
            SupportedCipherSuite::Tls12(s) => s.common.confidentiality_limit,
        };
        Ok(Records {
            enc: sealer(suite, secrets.tx)?,
            dec: decrypter(suite, rx)?,
            kernel: Box::new(kernel),
            tx_seq,
            rx_seq,
            suite,
            tx_limit: limit.min(SEQ_SOFT_LIMIT),
            tls13,
            owe_key_update: false,
            key_updates: 0,
            owe_alert: None,
            owe_warning: None,
            joining: Joining::default(),
            empty_in_a_row: 0,
            warnings: 0,
            renegotiations: 0,
            failed: false,
            closed_tx: false,
        })
    }

    pub fn is_tls13(&self) -> bool {
        self.tls13
    }

    /// Whether nothing more can be written (close_notify sent, or the connection failed).
    pub fn write_closed(&self) -> bool {
        self.closed_tx || self.failed
    }

    /// Records a fatal error: the alert is owed (sent by [`Records::owed`]).
    fn fatal(&mut self, alert: AlertDescription, e: Error) -> Error {
        if !self.failed {
            self.owe_alert = Some(alert);
        }
        self.failed = true;
        e
    }

    /// Reads the first record of `buf`: `Ok(None)` while it is not whole, else the bytes it took
    /// and what it brought. An error is fatal (its alert, if any, is owed).
    pub fn read(&mut self, buf: &mut [u8]) -> Result<Option<(usize, Event)>, Error> {
        if self.failed {
            return Err(Error::General("the TLS connection failed".into()));
        }
        let Some(&[typ, v0, v1, l0, l1]) = buf.get(..HEADER) else {
            return Ok(None);
        };
        let typ = ContentType::from(typ);
        if !matches!(
            typ,
            ContentType::ApplicationData | ContentType::Alert | ContentType::Handshake
        ) {
            // ChangeCipherSpec after the handshake, or no known type at all.
            return Err(self.fatal(
                AlertDescription::UnexpectedMessage,
                Error::General(format!("unexpected TLS record type {typ:?}")),
            ));
        }
        if v0 != 3 {
            return Err(self.fatal(
                AlertDescription::DecodeError,
                Error::General("TLS record with an unknown version".into()),
            ));
        }
        let len = usize::from(u16::from_be_bytes([l0, l1]));
        let max = if self.tls13 {
            MAX_CIPHER_13
        } else {
            MAX_CIPHER_12
        };
        if len > max {
            return Err(self.fatal(
                AlertDescription::RecordOverflow,
                Error::PeerSentOversizedRecord,
            ));
        }
        let Some(record) = buf.get_mut(..HEADER + len) else {
            return Ok(None);
        };
        if self.rx_seq >= SEQ_HARD_LIMIT {
            return Err(self.fatal(
                AlertDescription::InternalError,
                Error::General("TLS read sequence number exhausted".into()),
            ));
        }
        let base = record.as_ptr() as usize;
        let version = ProtocolVersion::from(u16::from_be_bytes([v0, v1]));
        let msg = InboundOpaqueMessage::new(typ, version, &mut record[HEADER..]);
        let plain = match self.dec.decrypt(msg, self.rx_seq) {
            Ok(p) => p,
            Err(e) => {
                // As rustls answers each: a bad MAC, an inner plaintext too long, an inner
                // ChangeCipherSpec or no content type at all (TLS 1.3).
                let alert = match e {
                    Error::DecryptError => AlertDescription::BadRecordMac,
                    Error::PeerSentOversizedRecord => AlertDescription::RecordOverflow,
                    _ => AlertDescription::UnexpectedMessage,
                };
                return Err(self.fatal(alert, e));
            }
        };
        self.rx_seq += 1;
        if plain.payload.len() > MAX_PLAIN {
            return Err(self.fatal(
                AlertDescription::RecordOverflow,
                Error::PeerSentOversizedRecord,
            ));
        }
        let start = (plain.payload.as_ptr() as usize).saturating_sub(base);
        let range = start..start + plain.payload.len();
        let typ = plain.typ;
        let payload = &buf[range.clone()];
        if payload.is_empty() {
            self.empty_in_a_row = self.empty_in_a_row.saturating_add(1);
            if self.empty_in_a_row > EMPTY_IN_A_ROW {
                // As rustls: the connection ends, no alert.
                self.failed = true;
                return Err(Error::General("too many empty TLS records in a row".into()));
            }
        } else {
            self.empty_in_a_row = 0;
        }
        if self.joining.active() && typ != ContentType::Handshake {
            // RFC 8446 5.1: no other record between the fragments of a handshake message.
            return Err(self.fatal(
                AlertDescription::UnexpectedMessage,
                Error::General("a TLS record between a handshake message's fragments".into()),
            ));
        }
        let event = match typ {
            ContentType::ApplicationData => {
                if !payload.is_empty() {
                    self.key_updates = 0;
                }
                Event::Data(range)
            }
            ContentType::Alert => {
                let (level, desc) = match *payload {
                    [level, desc] => (level, AlertDescription::from(desc)),
                    _ => {
                        return Err(self.fatal(
                            AlertDescription::DecodeError,
                            Error::General("malformed TLS alert".into()),
                        ))
                    }
                };
                self.alert(level, desc)?
            }
            ContentType::Handshake => {
                if payload.is_empty() {
                    return Err(self.fatal(
                        AlertDescription::DecodeError,
                        Error::General("an empty TLS handshake record".into()),
                    ));
                }
                self.handshake(payload)?;
                Event::Nothing
            }
            _ => {
                return Err(self.fatal(
                    AlertDescription::UnexpectedMessage,
                    Error::General(format!("unexpected TLS record type {typ:?}")),
                ))
            }
        };
        Ok(Some((HEADER + len, event)))
    }

    fn alert(&mut self, level: u8, desc: AlertDescription) -> Result<Event, Error> {
        if !matches!(level, 1 | 2) {
            return Err(self.fatal(
                AlertDescription::IllegalParameter,
                Error::AlertReceived(desc),
            ));
        }
        if desc == AlertDescription::CloseNotify {
            return Ok(Event::PeerClosed);
        }
        if level == 1 {
            self.warnings = self.warnings.saturating_add(1);
            if self.warnings > WARNINGS {
                // As rustls: the connection ends, no alert.
                self.failed = true;
                return Err(Error::General("too many TLS warning alerts".into()));
            }
            if !self.tls13 || desc == AlertDescription::UserCanceled {
                return Ok(Event::Nothing);
            }
            // TLS 1.3 has no warnings but user_canceled.
            return Err(self.fatal(AlertDescription::DecodeError, Error::AlertReceived(desc)));
        }
        // A fatal alert from the peer: none is sent back.
        self.failed = true;
        Err(Error::AlertReceived(desc))
    }

    /// A handshake record's plaintext (not empty): joined into messages, each judged once whole.
    fn handshake(&mut self, mut p: &[u8]) -> Result<(), Error> {
        while !p.is_empty() {
            let j = &mut self.joining;
            if j.have < 4 {
                let k = usize::from(4 - j.have).min(p.len());
                j.head[usize::from(j.have)..usize::from(j.have) + k].copy_from_slice(&p[..k]);
                // `k` is at most 4.
                j.have += k as u8;
                p = &p[k..];
                if j.have < 4 {
                    return Ok(());
                }
                let [typ, a, b, c] = j.head;
                let len = u32::from_be_bytes([0, a, b, c]);
                j.left = len;
                let refused = match (self.tls13, typ) {
                    (true, KEY_UPDATE) if len != 1 => Some(AlertDescription::DecodeError),
                    (true, KEY_UPDATE) | (false, CLIENT_HELLO) => None,
                    _ => Some(AlertDescription::UnexpectedMessage),
                };
                if let Some(alert) = refused {
                    return Err(self.fatal(
                        alert,
                        Error::General(format!("unexpected TLS handshake message {typ}")),
                    ));
                }
                if len > MAX_HANDSHAKE_MESSAGE {
                    return Err(self.fatal(
                        AlertDescription::DecodeError,
                        Error::General("TLS handshake message too large".into()),
                    ));
                }
            }
            let j = &mut self.joining;
            let k = usize::try_from(j.left).map_or(p.len(), |left| left.min(p.len()));
            if j.head[0] == KEY_UPDATE && k > 0 {
                j.request = Some(p[0]);
            }
            // `k` is at most `j.left`.
            j.left -= k as u32;
            p = &p[k..];
            if j.left > 0 {
                return Ok(());
            }
            let typ = j.head[0];
            let request = j.request;
            self.joining = Joining::default();
            if typ == KEY_UPDATE {
                // A message that changes keys must end its record (RFC 8446 5.1).
                if !p.is_empty() {
                    return Err(self.fatal(
                        AlertDescription::UnexpectedMessage,
                        Error::General("a TLS KeyUpdate not at the end of its record".into()),
                    ));
                }
                let requested = match request {
                    Some(0) => false,
                    Some(1) => true,
                    _ => {
                        return Err(self.fatal(
                            AlertDescription::IllegalParameter,
                            Error::General("a TLS KeyUpdate with an unknown request".into()),
                        ))
                    }
                };
                self.key_update(requested)?;
            } else {
                // TLS 1.2 renegotiation: refused with a warning, once, as rustls does.
                self.renegotiations = self.renegotiations.saturating_add(1);
                if self.renegotiations > 1 {
                    self.failed = true;
                    return Err(Error::General("too many TLS renegotiation attempts".into()));
                }
                self.owe_warning = Some(AlertDescription::NoRenegotiation);
            }
        }
        Ok(())
    }

    /// The peer's KeyUpdate: new receive keys from the next record on.
    fn key_update(&mut self, requested: bool) -> Result<(), Error> {
        self.key_updates = self.key_updates.saturating_add(1);
        if self.key_updates > KEY_UPDATES_IN_A_ROW {
            return Err(self.fatal(
                AlertDescription::UnexpectedMessage,
                Error::General("too many TLS key updates without data".into()),
            ));
        }
        let updated = self
            .kernel
            .update_rx_secret()
            .and_then(|(seq, secrets)| Ok((seq, decrypter(self.suite, secrets)?)));
        match updated {
            Ok((seq, dec)) => {
                self.dec = dec;
                self.rx_seq = seq;
                self.owe_key_update |= requested;
                Ok(())
            }
            Err(e) => Err(self.fatal(AlertDescription::InternalError, e)),
        }
    }

    /// Encrypts one record of `typ` from `chunks` (at most [`MAX_PLAIN`] bytes) into `out`.
    fn seal(
        &mut self,
        typ: ContentType,
        chunks: OutboundChunks<'_>,
        out: &mut dyn Sink,
    ) -> Result<(), Error> {
        if self.tx_seq >= SEQ_HARD_LIMIT {
            self.failed = true;
            return Err(Error::EncryptError);
        }
        match &mut self.enc {
            Sealer::Own(sealer) => sealer.seal(typ, &chunks, self.tx_seq, out)?,
            Sealer::Rustls(enc) => {
                let msg = OutboundPlainMessage {
                    typ,
                    version: ProtocolVersion::TLSv1_2,
                    payload: chunks,
                };
                let sealed = enc.encrypt(msg, self.tx_seq)?.encode();
                let room = out.room(sealed.len());
                room.get_mut(..sealed.len())
                    .ok_or(Error::EncryptError)?
                    .copy_from_slice(&sealed);
                out.filled(sealed.len());
            }
        }
        self.tx_seq += 1;
        Ok(())
    }

    /// Our KeyUpdate, sealed with the current keys, then new sending keys.
    fn send_key_update(&mut self, out: &mut dyn Sink) -> Result<(), Error> {
        let msg: &[&[u8]] = &[&[KEY_UPDATE, 0, 0, 1, 0]];
        self.seal(ContentType::Handshake, OutboundChunks::new(msg), out)?;
        // The new sealer first: the old keys must never seal again (from sequence 0 they would
        // repeat nonces), so a failure here ends the connection's writing.
        let updated = self
            .kernel
            .update_tx_secret()
            .and_then(|(seq, secrets)| Ok((seq, sealer(self.suite, (seq, secrets))?)));
        match updated {
            Ok((seq, enc)) => {
                self.tx_seq = seq;
                self.enc = enc;
                Ok(())
            }
            Err(e) => {
                self.failed = true;
                Err(e)
            }
        }
    }

    /// What is owed to the peer (a fatal alert, or our KeyUpdate), sealed into `out`.
    pub fn owed(&mut self, out: &mut dyn Sink) {
        if let Some(desc) = self.owe_alert.take() {
            self.closed_tx = true;
            let alert: &[&[u8]] = &[&[2, u8::from(desc)]];
            let _ = self.seal(ContentType::Alert, OutboundChunks::new(alert), out);
            return;
        }
        if let Some(desc) = self.owe_warning.take() {
            if !self.write_closed() {
                let alert: &[&[u8]] = &[&[1, u8::from(desc)]];
                if self
                    .seal(ContentType::Alert, OutboundChunks::new(alert), out)
                    .is_err()
                {
                    self.failed = true;
                }
            }
        }
        if self.owe_key_update && !self.write_closed() {
            self.owe_key_update = false;
            if self.send_key_update(out).is_err() {
                self.failed = true;
            }
        }
    }

    /// Encrypts application data (any length, cut into records) into `out`.
    pub fn write(&mut self, data: &[&[u8]], out: &mut dyn Sink) -> Result<(), Error> {
        self.owed(out);
        if self.write_closed() {
            return Err(Error::General(
                "the TLS connection is closed for writing".into(),
            ));
        }
        let mut rest = OutboundChunks::new(data);
        loop {
            if self.tx_seq >= self.tx_limit {
                if self.tls13 {
                    self.send_key_update(out)?;
                } else {
                    // TLS 1.2 cannot change keys: the connection ends, cleanly.
                    self.close_notify(out);
                    return Err(Error::General("TLS 1.2 write limit reached".into()));
                }
            }
            let (now, later) = rest.split_at(MAX_PLAIN);
            self.seal(ContentType::ApplicationData, now, out)?;
            if later.is_empty() {
                return Ok(());
            }
            rest = later;
        }
    }

    /// close_notify (once), sealed into `out`.
    pub fn close_notify(&mut self, out: &mut dyn Sink) {
        self.owed(out);
        if self.write_closed() {
            return;
        }
        self.closed_tx = true;
        let alert: &[&[u8]] = &[&[1, 0]];
        let _ = self.seal(ContentType::Alert, OutboundChunks::new(alert), out);
    }
}

#[cfg(test)]
#[path = "tls_records_tests.rs"]
mod tests;
