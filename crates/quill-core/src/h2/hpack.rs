//! HPACK (RFC 7541) behind Quill's own interface: decoding is loona-hpack's (the decoder sozu
//! uses), wrapped so it can be replaced by a hand-written one without touching the connection;
//! encoding is Quill's own and keeps no state: every field is a literal that is never added to a
//! dynamic table (an indexed `:status` when the static table has it, the name's static index
//! when it has the name). A response head costs a few more bytes than with a dynamic table, and a
//! connection keeps no encoder table at all, which is what keeps an idle connection small.

/// The static table of RFC 7541 Appendix A (index 1 first): names, and the values an indexed
/// field of that index means.
#[cfg(test)]
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
    inner: loona_hpack::Decoder<'static>,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("hpack::Decoder")
    }
}

impl Default for Decoder {
    fn default() -> Decoder {
        let mut inner = loona_hpack::Decoder::new();
        inner.set_max_allowed_table_size(TABLE_SIZE);
        Decoder { inner }
    }
}

impl Decoder {
    /// Decodes a whole header block, calling `field(name, value)` for each field in order. The
    /// table changes as the block says even when the caller keeps none of the fields (it must
    /// stay in step with the client's encoder). Field names and values are borrowed: an indexed
    /// field costs no copy, whatever its size.
    pub fn decode(
        &mut self,
        block: &[u8],
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), CompressionError> {
        self.inner
            .decode_with_cb(block, |name, value| field(&name, &value))
            .map_err(|_| CompressionError)
    }
}

/// Appends an HPACK integer of `prefix` bits, the first byte's other bits being `first`.
fn integer(out: &mut Vec<u8>, first: u8, prefix: u32, mut value: usize) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// Appends a string literal, not Huffman-coded.
fn string(out: &mut Vec<u8>, s: &[u8]) {
    integer(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// The static index of a field name (lowercase) that a response may carry: `accept-charset`
/// (15) to `www-authenticate` (61). A match on the bytes (the compiler sorts it by length
/// first), as this is done for every field of every response.
fn name_index(name: &[u8]) -> Option<usize> {
    Some(match name {
        b"accept-charset" => 15,
        b"accept-encoding" => 16,
        b"accept-language" => 17,
        b"accept-ranges" => 18,
        b"accept" => 19,
        b"access-control-allow-origin" => 20,
        b"age" => 21,
        b"allow" => 22,
        b"authorization" => 23,
        b"cache-control" => 24,
        b"content-disposition" => 25,
        b"content-encoding" => 26,
        b"content-language" => 27,
        b"content-length" => 28,
        b"content-location" => 29,
        b"content-range" => 30,
        b"content-type" => 31,
        b"cookie" => 32,
        b"date" => 33,
        b"etag" => 34,
        b"expect" => 35,
        b"expires" => 36,
        b"from" => 37,
        b"host" => 38,
        b"if-match" => 39,
        b"if-modified-since" => 40,
        b"if-none-match" => 41,
        b"if-range" => 42,
        b"if-unmodified-since" => 43,
        b"last-modified" => 44,
        b"link" => 45,
        b"location" => 46,
        b"max-forwards" => 47,
        b"proxy-authenticate" => 48,
        b"proxy-authorization" => 49,
        b"range" => 50,
        b"referer" => 51,
        b"refresh" => 52,
        b"retry-after" => 53,
        b"server" => 54,
        b"set-cookie" => 55,
        b"strict-transport-security" => 56,
        b"transfer-encoding" => 57,
        b"user-agent" => 58,
        b"vary" => 59,
        b"via" => 60,
        b"www-authenticate" => 61,
        _ => return None,
    })
}

/// Appends `:status` (indexed when the static table has the code).
pub fn encode_status(out: &mut Vec<u8>, status: u16) {
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
        Some(i) => out.push(0x80 | i),
        None => {
            // Literal without indexing, name `:status` (index 8).
            integer(out, 0, 4, 8);
            let digits = [
                b'0' + (status / 100 % 10) as u8,
                b'0' + (status / 10 % 10) as u8,
                b'0' + (status % 10) as u8,
            ];
            string(out, &digits);
        }
    }
}

/// Appends one field as a literal without indexing, its name lowercased (HTTP/2 field names are
/// lowercase; an HTTP/1 server's need not be).
pub fn encode_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    let mut lower = [0u8; 64];
    let name_lc: &[u8] = if name.len() <= lower.len() {
        let l = &mut lower[..name.len()];
        for (d, s) in l.iter_mut().zip(name) {
            *d = s.to_ascii_lowercase();
        }
        l
    } else {
        name
    };
    match name_index(name_lc) {
        Some(i) => integer(out, 0, 4, i),
        None => {
            out.push(0);
            integer(out, 0, 7, name.len());
            out.extend(name.iter().map(u8::to_ascii_lowercase));
        }
    }
    string(out, value);
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
        for name in [":status", ":path", "x-served-by", "content-lengthx", ""] {
            assert_eq!(name_index(name.as_bytes()), None, "{name}");
        }
    }

    #[test]
    fn integers_past_the_prefix_take_continuation_bytes() {
        // RFC 7541 C.1.2: 1337 with a 5-bit prefix.
        let mut out = Vec::new();
        integer(&mut out, 0, 5, 1337);
        assert_eq!(out, [31, 154, 10]);
    }
}
