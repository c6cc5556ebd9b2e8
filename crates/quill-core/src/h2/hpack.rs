//! HPACK (RFC 7541), Quill's own on both sides. Decoding keeps the connection's dynamic table
//! (bounded by [`TABLE_SIZE`]) and hands each field to a callback borrowed where it lies: from the
//! static table, the dynamic table or the block, and only Huffman-coded literals are written out
//! (into one scratch buffer per block). It was loona-hpack's until its per-string Huffman decoder
//! (a hash map built for every literal) showed in the profile; loona-hpack stays as the reference
//! of a differential property test and fuzz target. Encoding keeps no state: every field is a
//! literal that is never added to a dynamic table (an indexed `:status` when the static table has
//! it, the name's static index when it has the name). A response head costs a few more bytes than
//! with a dynamic table, and a connection keeps no encoder table at all, which is what keeps an
//! idle connection small.

use std::collections::VecDeque;

use super::huffman;

/// The static table of RFC 7541 Appendix A (index 1 first): names, and the values an indexed
/// field of that index means.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// The largest dynamic table a client's encoder may use: SETTINGS_HEADER_TABLE_SIZE's default,
/// which Quill does not change (a larger table is memory held by every idle connection).
pub const TABLE_SIZE: usize = 4096;

/// A header block that does not decode (a connection error of type COMPRESSION_ERROR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompressionError;

/// The decoding side of one connection: its dynamic table, bounded by [`TABLE_SIZE`].
pub struct Decoder {
    /// Newest first: index 62 is `table[0]`.
    table: VecDeque<Entry>,
    /// The table's size as RFC 7541 §4.1 counts it (32 octets more per entry than its bytes).
    size: usize,
    /// The size the client's encoder last set (at most [`TABLE_SIZE`]).
    max: usize,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "hpack::Decoder({} entries, {} of {} octets)",
            self.table.len(),
            self.size,
            self.max
        )
    }
}

/// One dynamic table entry: the name's bytes then the value's, in one allocation.
struct Entry {
    bytes: Box<[u8]>,
    name: usize,
}

impl Entry {
    fn new(name: &[u8], value: &[u8]) -> Entry {
        let mut bytes = Vec::with_capacity(name.len() + value.len());
        bytes.extend_from_slice(name);
        bytes.extend_from_slice(value);
        Entry {
            bytes: bytes.into_boxed_slice(),
            name: name.len(),
        }
    }

    fn size(&self) -> usize {
        self.bytes.len() + 32
    }

    fn field(&self) -> (&[u8], &[u8]) {
        self.bytes.split_at(self.name)
    }
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max: TABLE_SIZE,
        }
    }
}

/// Where a decoded string lies: in the block or in the block's scratch buffer.
#[derive(Clone, Copy)]
enum Text {
    Block(usize, usize),
    Scratch(usize, usize),
}

impl Text {
    fn of<'a>(self, block: &'a [u8], scratch: &'a [u8]) -> &'a [u8] {
        match self {
            Text::Block(a, b) => &block[a..b],
            Text::Scratch(a, b) => &scratch[a..b],
        }
    }
}

/// A cursor over one header block.
struct Reader<'a> {
    block: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    /// An integer of `prefix` bits (RFC 7541 §5.1), the first byte's other bits ignored. Values
    /// past 2^28 are refused: no length or index of a block Quill accepts comes near.
    fn integer(&mut self, prefix: u32) -> Result<usize, CompressionError> {
        let max = (1usize << prefix) - 1;
        let first = usize::from(*self.block.get(self.pos).ok_or(CompressionError)?) & max;
        self.pos += 1;
        if first < max {
            return Ok(first);
        }
        let mut value = max;
        let mut shift = 0;
        loop {
            let b = *self.block.get(self.pos).ok_or(CompressionError)?;
            self.pos += 1;
            // Past four continuation bytes (28 bits) even zeros are refused: the shift is bounded.
            if shift > 21 {
                return Err(CompressionError);
            }
            value += usize::from(b & 0x7f) << shift;
            if value > 1 << 28 {
                return Err(CompressionError);
            }
            if b & 0x80 == 0 {
                return Ok(value);
            }
            shift += 7;
        }
    }

    /// A string literal (RFC 7541 §5.2): where it lies, Huffman-coded ones decoded into
    /// `scratch`.
    fn string(&mut self, scratch: &mut Vec<u8>) -> Result<Text, CompressionError> {
        let huffman = self.block.get(self.pos).ok_or(CompressionError)? & 0x80 != 0;
        let len = self.integer(7)?;
        let start = self.pos;
        let end = start.checked_add(len).ok_or(CompressionError)?;
        let raw = self.block.get(start..end).ok_or(CompressionError)?;
        self.pos = end;
        if !huffman {
            return Ok(Text::Block(start, end));
        }
        let from = scratch.len();
        huffman::decode(raw, scratch).map_err(|_| CompressionError)?;
        Ok(Text::Scratch(from, scratch.len()))
    }
}

impl Decoder {
    /// Decodes a whole header block, calling `field(name, value)` for each field in order. The
    /// table changes as the block says even when the caller keeps none of the fields (it must
    /// stay in step with the client's encoder). Field names and values are borrowed: an indexed
    /// field costs no copy, whatever its size. Table size updates are taken at the start of a
    /// block only (RFC 7541 §4.2), followed by a field, up to [`TABLE_SIZE`].
    pub fn decode(
        &mut self,
        block: &[u8],
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), CompressionError> {
        let mut r = Reader { block, pos: 0 };
        let mut scratch = Vec::new();
        let mut started = false;
        while let Some(&b) = block.get(r.pos) {
            if b & 0x80 != 0 {
                let (name, value) = self.get(r.integer(7)?)?;
                field(name, value);
            } else if b & 0xe0 == 0x20 {
                if started {
                    return Err(CompressionError);
                }
                let max = r.integer(5)?;
                if max > TABLE_SIZE {
                    return Err(CompressionError);
                }
                self.max = max;
                self.evict(0);
                if r.pos == block.len() {
                    // A block that ends in an update (h2spec's hpack/4.2 case).
                    return Err(CompressionError);
                }
                continue;
            } else {
                // 01: with incremental indexing (6-bit index); 0000 and 0001: without indexing
                // and never indexed (4-bit index), which a proxy that re-encodes treats alike.
                let indexing = b & 0x40 != 0;
                let index = r.integer(if indexing { 6 } else { 4 })?;
                scratch.clear();
                let name = match index {
                    0 => Some(r.string(&mut scratch)?),
                    _ => None,
                };
                let value = r.string(&mut scratch)?;
                let value = value.of(block, &scratch);
                let name = match name {
                    Some(name) => name.of(block, &scratch),
                    None => self.get(index)?.0,
                };
                field(name, value);
                if indexing {
                    let entry = Entry::new(name, value);
                    self.insert(entry);
                }
            }
            started = true;
        }
        Ok(())
    }

    /// The field at `index` of the static table then the dynamic one (RFC 7541 §2.3.3).
    fn get(&self, index: usize) -> Result<(&[u8], &[u8]), CompressionError> {
        match index {
            0 => Err(CompressionError),
            1..=61 => {
                let (n, v) = STATIC[index - 1];
                Ok((n.as_bytes(), v.as_bytes()))
            }
            _ => self
                .table
                .get(index - 62)
                .map(Entry::field)
                .ok_or(CompressionError),
        }
    }

    /// Adds an entry, evicting the oldest ones to make room; one larger than the whole table
    /// empties it and is not kept (RFC 7541 §4.4).
    fn insert(&mut self, entry: Entry) {
        let size = entry.size();
        if size > self.max {
            self.table.clear();
            self.size = 0;
            return;
        }
        self.evict(size);
        self.size += size;
        self.table.push_front(entry);
    }

    /// Evicts the oldest entries until `room` more octets fit under the current maximum.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            match self.table.pop_back() {
                Some(e) => self.size -= e.size(),
                None => break,
            }
        }
    }
}

/// Where encoded fields go: a `Vec` (the connection's frames), or a [`Block`] (a bounded slice,
/// where a stream's session writes its response's header block). Each field is written into
/// one piece of room asked for at once.
pub trait Sink {
    /// `n` more bytes at the end, to be filled; `None` if there is no room (then nothing more
    /// is written).
    fn room(&mut self, n: usize) -> Option<&mut [u8]>;
}

impl Sink for Vec<u8> {
    #[inline]
    fn room(&mut self, n: usize) -> Option<&mut [u8]> {
        let at = self.len();
        self.resize(at + n, 0);
        self.get_mut(at..)
    }
}

/// A header block written into a slice: what does not fit is not written, and the block is then
/// refused ([`Block::written`] is `None`).
pub struct Block<'a> {
    out: &'a mut [u8],
    len: usize,
    overflow: bool,
}

impl<'a> Block<'a> {
    pub fn new(out: &'a mut [u8]) -> Block<'a> {
        Block {
            out,
            len: 0,
            overflow: false,
        }
    }

    /// The block's length, or `None` if it did not fit.
    pub fn written(&self) -> Option<usize> {
        (!self.overflow).then_some(self.len)
    }
}

impl Sink for Block<'_> {
    #[inline]
    fn room(&mut self, n: usize) -> Option<&mut [u8]> {
        let end = self.len.checked_add(n).filter(|_| !self.overflow);
        match end.and_then(|end| self.out.get_mut(self.len..end)) {
            Some(room) => {
                self.len += n;
                Some(room)
            }
            None => {
                self.overflow = true;
                None
            }
        }
    }
}

/// How many bytes an HPACK integer of `prefix` bits takes.
#[inline]
fn integer_len(prefix: u32, value: usize) -> usize {
    let max = (1usize << prefix) - 1;
    if value < max {
        return 1;
    }
    let mut n = 2;
    let mut rest = (value - max) >> 7;
    while rest > 0 {
        n += 1;
        rest >>= 7;
    }
    n
}

/// Writes an HPACK integer of `prefix` bits at the start of `out` (at least
/// [`integer_len`] long), the first byte's other bits being `first`: the bytes written.
#[inline]
fn integer(out: &mut [u8], first: u8, prefix: u32, mut value: usize) -> usize {
    let max = (1usize << prefix) - 1;
    if value < max {
        out[0] = first | value as u8;
        return 1;
    }
    out[0] = first | max as u8;
    value -= max;
    let mut at = 1;
    while value >= 128 {
        out[at] = (value % 128) as u8 | 0x80;
        value /= 128;
        at += 1;
    }
    out[at] = value as u8;
    at + 1
}

/// The static index of a field name, in any case, that a response may carry: `accept-charset`
/// (15) to `www-authenticate` (61). Done for every field of every response, so the length and
/// the first letter pick the one or two names to compare with, and the comparison folds case
/// as it goes instead of lowercasing a copy first.
fn name_index(name: &[u8]) -> Option<usize> {
    let first = name.first().map_or(0, u8::to_ascii_lowercase);
    let is = |known: &[u8]| folded_eq(name, known);
    Some(match (name.len(), first) {
        (14, b'a') if is(b"accept-charset") => 15,
        (15, b'a') if is(b"accept-encoding") => 16,
        (15, b'a') if is(b"accept-language") => 17,
        (13, b'a') if is(b"accept-ranges") => 18,
        (6, b'a') if is(b"accept") => 19,
        (27, b'a') if is(b"access-control-allow-origin") => 20,
        (3, b'a') if is(b"age") => 21,
        (5, b'a') if is(b"allow") => 22,
        (13, b'a') if is(b"authorization") => 23,
        (13, b'c') if is(b"cache-control") => 24,
        (19, b'c') if is(b"content-disposition") => 25,
        (16, b'c') if is(b"content-encoding") => 26,
        (16, b'c') if is(b"content-language") => 27,
        (14, b'c') if is(b"content-length") => 28,
        (16, b'c') if is(b"content-location") => 29,
        (13, b'c') if is(b"content-range") => 30,
        (12, b'c') if is(b"content-type") => 31,
        (6, b'c') if is(b"cookie") => 32,
        (4, b'd') if is(b"date") => 33,
        (4, b'e') if is(b"etag") => 34,
        (6, b'e') if is(b"expect") => 35,
        (7, b'e') if is(b"expires") => 36,
        (4, b'f') if is(b"from") => 37,
        (4, b'h') if is(b"host") => 38,
        (8, b'i') if is(b"if-match") => 39,
        (17, b'i') if is(b"if-modified-since") => 40,
        (13, b'i') if is(b"if-none-match") => 41,
        (8, b'i') if is(b"if-range") => 42,
        (19, b'i') if is(b"if-unmodified-since") => 43,
        (13, b'l') if is(b"last-modified") => 44,
        (4, b'l') if is(b"link") => 45,
        (8, b'l') if is(b"location") => 46,
        (12, b'm') if is(b"max-forwards") => 47,
        (18, b'p') if is(b"proxy-authenticate") => 48,
        (19, b'p') if is(b"proxy-authorization") => 49,
        (5, b'r') if is(b"range") => 50,
        (7, b'r') if is(b"referer") => 51,
        (7, b'r') if is(b"refresh") => 52,
        (11, b'r') if is(b"retry-after") => 53,
        (6, b's') if is(b"server") => 54,
        (10, b's') if is(b"set-cookie") => 55,
        (25, b's') if is(b"strict-transport-security") => 56,
        (17, b't') if is(b"transfer-encoding") => 57,
        (10, b'u') if is(b"user-agent") => 58,
        (4, b'v') if is(b"vary") => 59,
        (3, b'v') if is(b"via") => 60,
        (16, b'w') if is(b"www-authenticate") => 61,
        _ => return None,
    })
}

/// Whether `name` is `lower` (lowercase) in any case: every byte compared, without a branch per
/// byte.
fn folded_eq(name: &[u8], lower: &[u8]) -> bool {
    name.len() == lower.len()
        && name
            .iter()
            .zip(lower)
            .fold(0, |diff, (&a, &b)| diff | (a.to_ascii_lowercase() ^ b))
            == 0
}

/// Appends `:status` (indexed when the static table has the code).
pub fn encode_status(out: &mut impl Sink, status: u16) {
    let indexed = match status {
        200 => Some(8),
        204 => Some(9),
        206 => Some(10),
        304 => Some(11),
        400 => Some(12),
        404 => Some(13),
        500 => Some(14),
        _ => None,
    };
    match indexed {
        Some(i) => {
            if let Some(room) = out.room(1) {
                room[0] = 0x80 | i;
            }
        }
        None => {
            // Literal without indexing, name `:status` (index 8), three digits.
            if let Some(room) = out.room(5) {
                room[0] = 0x08;
                room[1] = 3;
                room[2] = b'0' + (status / 100 % 10) as u8;
                room[3] = b'0' + (status / 10 % 10) as u8;
                room[4] = b'0' + (status % 10) as u8;
            }
        }
    }
}

/// Appends one field as a literal without indexing, its name lowercased (HTTP/2 field names are
/// lowercase; an HTTP/1 server's need not be).
pub fn encode_field(out: &mut impl Sink, name: &[u8], value: &[u8]) {
    encode_field_parts(out, name, &[value]);
}

/// [`encode_field`] of a value made of `parts`: the field's bytes counted first, then written
/// into one piece of room.
pub fn encode_field_parts(out: &mut impl Sink, name: &[u8], parts: &[&[u8]]) {
    let value_len: usize = parts.iter().map(|p| p.len()).sum();
    let index = name_index(name);
    let name_len = match index {
        Some(i) => integer_len(4, i),
        None => 1 + integer_len(7, name.len()) + name.len(),
    };
    let total = name_len + integer_len(7, value_len) + value_len;
    let Some(room) = out.room(total) else {
        return;
    };
    let mut at = match index {
        Some(i) => integer(room, 0, 4, i),
        None => {
            room[0] = 0;
            let at = 1 + integer(&mut room[1..], 0, 7, name.len());
            for (to, from) in room[at..at + name.len()].iter_mut().zip(name) {
                *to = from.to_ascii_lowercase();
            }
            at + name.len()
        }
    };
    at += integer(&mut room[at..], 0, 7, value_len);
    for p in parts {
        room[at..at + p.len()].copy_from_slice(p);
        at += p.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn decode_all(d: &mut Decoder, block: &[u8]) -> Vec<(String, String)> {
        let mut got = Vec::new();
        d.decode(block, |n, v| {
            got.push((
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            ))
        })
        .unwrap();
        got
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    /// RFC 7541 Appendix C.3: three requests without Huffman coding on one connection (the
    /// dynamic table carries `:authority` and `cache-control` from one to the next).
    #[test]
    fn rfc7541_c3_requests_without_huffman() {
        let mut d = Decoder::default();
        let first = decode_all(&mut d, &hex("828684410f7777772e6578616d706c652e636f6d"));
        assert_eq!(
            first,
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com")
            ])
        );
        let second = decode_all(&mut d, &hex("828684be58086e6f2d6361636865"));
        assert_eq!(
            second,
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache")
            ])
        );
        let third = decode_all(
            &mut d,
            &hex("828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565"),
        );
        assert_eq!(
            third,
            pairs(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value")
            ])
        );
    }

    /// RFC 7541 Appendix C.4: the same requests, Huffman-coded.
    #[test]
    fn rfc7541_c4_requests_with_huffman() {
        let mut d = Decoder::default();
        let first = decode_all(&mut d, &hex("828684418cf1e3c2e5f23a6ba0ab90f4ff"));
        assert_eq!(
            first[3],
            ("".to_string() + ":authority", "www.example.com".into())
        );
        let second = decode_all(&mut d, &hex("828684be5886a8eb10649cbf"));
        assert_eq!(second[4], ("cache-control".into(), "no-cache".into()));
        let third = decode_all(
            &mut d,
            &hex("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf"),
        );
        assert_eq!(third[4], ("custom-key".into(), "custom-value".into()));
    }

    /// RFC 7541 Appendix C.5: three responses with a 256-octet table: entries are evicted as
    /// the table fills (the decoder honours the size update the encoder sends first).
    #[test]
    fn rfc7541_c5_responses_evict_from_a_small_table() {
        let mut d = Decoder::default();
        // A size update to 256 first, then C.5.1's block.
        let mut block = hex("3fe101");
        block.extend(hex(
            "4803333032580770726976617465611d4d6f6e2c203231204f637420323031332032303a31333a323120474d546e1768747470733a2f2f7777772e6578616d706c652e636f6d",
        ));
        let first = decode_all(&mut d, &block);
        assert_eq!(
            first,
            pairs(&[
                (":status", "302"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
                ("location", "https://www.example.com")
            ])
        );
        let second = decode_all(&mut d, &hex("4803333037c1c0bf"));
        assert_eq!(second[0], (":status".into(), "307".into()));
        assert_eq!(
            second[3],
            ("location".into(), "https://www.example.com".into())
        );
    }

    #[test]
    fn size_update_at_the_end_of_a_block_is_a_compression_error() {
        let mut d = Decoder::default();
        assert_eq!(
            d.decode(&hex("823f e101"), |_, _| {}),
            Err(CompressionError)
        );
    }

    #[test]
    fn size_update_over_the_advertised_table_is_a_compression_error() {
        let mut d = Decoder::default();
        // 4097: 0x3f then 4097-31 = 4066 = 0xe2 0x1f.
        assert_eq!(d.decode(&hex("3fe21f82"), |_, _| {}), Err(CompressionError));
    }

    #[test]
    fn index_past_the_tables_is_a_compression_error() {
        let mut d = Decoder::default();
        assert_eq!(d.decode(&hex("be"), |_, _| {}), Err(CompressionError));
    }

    /// What Quill encodes decodes to the same fields (names lowercased).
    #[test]
    fn encoded_response_fields_decode_back() {
        let mut out = Vec::new();
        encode_status(&mut out, 200);
        encode_status(&mut out, 302);
        encode_field(&mut out, b"Content-Type", b"text/html");
        encode_field(&mut out, b"X-Custom-Thing", b"v");
        encode_field(&mut out, b"set-cookie", &[b'a'; 300]);
        let mut d = Decoder::default();
        let got = decode_all(&mut d, &out);
        assert_eq!(got[0], (":status".into(), "200".into()));
        assert_eq!(got[1], (":status".into(), "302".into()));
        assert_eq!(got[2], ("content-type".into(), "text/html".into()));
        assert_eq!(got[3], ("x-custom-thing".into(), "v".into()));
        assert_eq!(got[4].1.len(), 300);
    }

    #[test]
    fn name_index_is_the_static_tables_index_of_every_response_field_name() {
        for (i, (name, _)) in STATIC.iter().enumerate().skip(14) {
            assert_eq!(name_index(name.as_bytes()), Some(i + 1), "{name}");
        }
        for (i, (name, _)) in STATIC.iter().enumerate().skip(14) {
            // In any case, as HTTP/1 servers spell them.
            let upper = name.to_ascii_uppercase();
            assert_eq!(name_index(upper.as_bytes()), Some(i + 1), "{upper}");
            let mut capital = name.as_bytes().to_vec();
            capital[0] = capital[0].to_ascii_uppercase();
            assert_eq!(name_index(&capital), Some(i + 1), "{name}");
            // One byte off anywhere is another name.
            for at in 0..name.len() {
                let mut off = name.as_bytes().to_vec();
                off[at] ^= 0x01;
                let found = name_index(&off);
                assert!(
                    found.is_none() || STATIC[found.unwrap() - 1].0.as_bytes() == off,
                    "{name} at {at}"
                );
            }
        }
        for name in [
            ":status",
            ":path",
            "x-served-by",
            "content-lengthx",
            "",
            "-",
            "d",
        ] {
            assert_eq!(name_index(name.as_bytes()), None, "{name}");
        }
    }

    /// Found by the `hpack` fuzz target: continuation bytes of zeros once shifted past 64 bits.
    #[test]
    fn an_integer_of_many_zero_continuation_bytes_is_a_compression_error() {
        let mut d = Decoder::default();
        let mut block = vec![0xff];
        block.extend([0x80; 12]);
        block.push(0x00);
        assert_eq!(d.decode(&block, |_, _| {}), Err(CompressionError));
        // Four continuation bytes are still read.
        assert_eq!(
            d.decode(&[0x3f, 0x80, 0x80, 0x80, 0x00, 0x82], |_, _| {}),
            Ok(())
        );
    }

    #[test]
    fn integers_past_the_prefix_take_continuation_bytes() {
        // RFC 7541 C.1.2: 1337 with a 5-bit prefix.
        let mut out = Vec::new();
        int(&mut out, 0, 5, 1337);
        assert_eq!(out, [31, 154, 10]);
        // The length counted first is the length written, at every prefix's edges (`int`
        // checks it), and what is written decodes back.
        for prefix in 4..=7 {
            let max = (1usize << prefix) - 1;
            for value in [
                0,
                max - 1,
                max,
                max + 1,
                max + 127,
                max + 128,
                max + 16_383,
                max + 16_384,
                1 << 21,
            ] {
                let mut out = Vec::new();
                int(&mut out, 0, prefix, value);
                let mut r = Reader {
                    block: &out,
                    pos: 0,
                };
                assert_eq!(r.integer(prefix), Ok(value), "{value} with {prefix} bits");
            }
        }
    }

    /// One representation of a random header block (RFC 7541 §6), well formed or not.
    #[derive(Clone, Debug)]
    enum Rep {
        Indexed(usize),
        Literal {
            kind: u8,
            index: usize,
            name: Vec<u8>,
            value: Vec<u8>,
            huffman: (bool, bool),
        },
        SizeUpdate(usize),
        Raw(Vec<u8>),
    }

    /// An HPACK integer appended to `out`.
    fn int(out: &mut Vec<u8>, first: u8, prefix: u32, value: usize) {
        let at = out.len();
        out.resize(at + integer_len(prefix, value), 0);
        let n = integer(&mut out[at..], first, prefix, value);
        assert_eq!(at + n, out.len(), "integer_len agrees with integer");
    }

    fn str_literal(out: &mut Vec<u8>, s: &[u8], huffman: bool) {
        if huffman {
            let h = crate::h2::huffman::encode(s);
            int(out, 0x80, 7, h.len());
            out.extend_from_slice(&h);
        } else {
            int(out, 0, 7, s.len());
            out.extend_from_slice(s);
        }
    }

    fn write_rep(out: &mut Vec<u8>, rep: &Rep) {
        match rep {
            Rep::Indexed(i) => int(out, 0x80, 7, *i),
            Rep::Literal {
                kind,
                index,
                name,
                value,
                huffman,
            } => {
                let (first, prefix) = match kind % 3 {
                    0 => (0x40, 6),
                    1 => (0x00, 4),
                    _ => (0x10, 4),
                };
                int(out, first, prefix, *index);
                if *index == 0 {
                    str_literal(out, name, huffman.0);
                }
                str_literal(out, value, huffman.1);
            }
            Rep::SizeUpdate(n) => int(out, 0x20, 5, *n),
            Rep::Raw(b) => out.extend_from_slice(b),
        }
    }

    fn any_rep() -> impl proptest::strategy::Strategy<Value = Rep> {
        use proptest::prelude::*;
        let text = proptest::collection::vec(
            prop_oneof![b'a'..=b'z', Just(b'-'), Just(b':'), any::<u8>()],
            0..40,
        );
        prop_oneof![
            4 => (1usize..75).prop_map(Rep::Indexed),
            4 => (any::<u8>(), prop_oneof![Just(0usize), 1usize..75], text.clone(), text, any::<(bool, bool)>())
                .prop_map(|(kind, index, name, value, huffman)| Rep::Literal { kind, index, name, value, huffman }),
            1 => prop_oneof![0usize..300, 4000usize..4200].prop_map(Rep::SizeUpdate),
            1 => proptest::collection::vec(prop_oneof![Just(0x80u8), Just(0xff), any::<u8>()], 0..16).prop_map(Rep::Raw),
        ]
    }

    fn ours(d: &mut Decoder, block: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut got = Vec::new();
        d.decode(block, |n, v| got.push((n.to_vec(), v.to_vec())))
            .ok()
            .map(|()| got)
    }

    fn reference(
        d: &mut loona_hpack::Decoder<'_>,
        block: &[u8],
    ) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut got = Vec::new();
        d.decode_with_cb(block, |n, v| got.push((n.to_vec(), v.to_vec())))
            .ok()
            .map(|()| got)
    }

    /// Whether `block`, written from `reps`, may hold a size update after a field, which Quill
    /// refuses as RFC 7541 §4.2 and RFC 9113 §4.3.1 say and loona-hpack takes: one written after
    /// a field, or, from the first raw bytes on (which may put the decoder anywhere in what
    /// follows, the next representations' bytes included), a byte that could start one.
    fn late_size_update(reps: &[Rep], block: &[u8]) -> bool {
        let first_field = reps.iter().position(|r| !matches!(r, Rep::SizeUpdate(_)));
        let written_late = reps
            .iter()
            .enumerate()
            .any(|(i, r)| matches!(r, Rep::SizeUpdate(_)) && first_field.is_some_and(|f| i > f));
        let raw_from = reps.iter().position(|r| matches!(r, Rep::Raw(_))).map(|i| {
            let mut before = Vec::new();
            for r in &reps[..i] {
                write_rep(&mut before, r);
            }
            before.len()
        });
        let raw_could = raw_from.is_some_and(|at| block[at..].iter().any(|&x| x & 0xe0 == 0x20));
        written_late || raw_could
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(600))]

        /// Differential: over a connection's random blocks (valid and not: bad indexes, size
        /// updates anywhere, raw bytes, Huffman strings with any byte), Quill's decoder and
        /// loona-hpack (the one it replaced) accept the same blocks and give the same fields, and
        /// a block one of them refuses ends the comparison (the connection ends there).
        #[test]
        fn decodes_as_loona_hpack_does(blocks in proptest::collection::vec(
            proptest::collection::vec(any_rep(), 0..12), 1..6)) {
            let mut mine = Decoder::default();
            let mut theirs = loona_hpack::Decoder::new();
            theirs.set_max_allowed_table_size(TABLE_SIZE);
            for reps in &blocks {
                let mut block = Vec::new();
                for r in reps {
                    write_rep(&mut block, r);
                }
                let a = ours(&mut mine, &block);
                let b = reference(&mut theirs, &block);
                if a.is_none() && b.is_some() && late_size_update(reps, &block) {
                    break;
                }
                proptest::prop_assert_eq!(&a, &b, "block {:02x?}", block);
                if a.is_none() {
                    break;
                }
            }
        }
    }
}
