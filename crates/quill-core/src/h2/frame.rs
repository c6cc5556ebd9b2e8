//! The frame layer of RFC 9113 §4 and §6: the 9-byte frame header, the frame types and flags
//! Quill reads, the error codes, and writers for the frames a server sends. Nothing here keeps
//! state; [`super::conn::Conn`] decides what a frame means.

/// What a client sends before its first frame (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Bytes of a frame header.
pub const HEADER_LEN: usize = 9;
/// The smallest SETTINGS_MAX_FRAME_SIZE, and the default (RFC 9113 §6.5.2).
pub const DEFAULT_MAX_FRAME: u32 = 16_384;
/// The largest SETTINGS_MAX_FRAME_SIZE.
pub const MAX_MAX_FRAME: u32 = (1 << 24) - 1;
/// The initial flow-control window of a stream and of the connection (RFC 9113 §6.9.2).
pub const DEFAULT_WINDOW: u32 = 65_535;
/// The largest flow-control window.
pub const MAX_WINDOW: i64 = (1 << 31) - 1;

/// Frame types (RFC 9113 §6).
pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS identifiers (RFC 9113 §6.5.2).
pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// An error code of RST_STREAM and GOAWAY (RFC 9113 §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Code(pub u32);

impl Code {
    pub const NO_ERROR: Code = Code(0x0);
    pub const PROTOCOL_ERROR: Code = Code(0x1);
    pub const INTERNAL_ERROR: Code = Code(0x2);
    pub const FLOW_CONTROL_ERROR: Code = Code(0x3);
    pub const SETTINGS_TIMEOUT: Code = Code(0x4);
    pub const STREAM_CLOSED: Code = Code(0x5);
    pub const FRAME_SIZE_ERROR: Code = Code(0x6);
    pub const REFUSED_STREAM: Code = Code(0x7);
    pub const CANCEL: Code = Code(0x8);
    pub const COMPRESSION_ERROR: Code = Code(0x9);
    pub const CONNECT_ERROR: Code = Code(0xa);
    pub const ENHANCE_YOUR_CALM: Code = Code(0xb);
    pub const INADEQUATE_SECURITY: Code = Code(0xc);
    pub const HTTP_1_1_REQUIRED: Code = Code(0xd);

    /// The name RFC 9113 gives the code (for logs and metrics).
    pub fn name(self) -> &'static str {
        match self.0 {
            0x0 => "NO_ERROR",
            0x1 => "PROTOCOL_ERROR",
            0x2 => "INTERNAL_ERROR",
            0x3 => "FLOW_CONTROL_ERROR",
            0x4 => "SETTINGS_TIMEOUT",
            0x5 => "STREAM_CLOSED",
            0x6 => "FRAME_SIZE_ERROR",
            0x7 => "REFUSED_STREAM",
            0x8 => "CANCEL",
            0x9 => "COMPRESSION_ERROR",
            0xa => "CONNECT_ERROR",
            0xb => "ENHANCE_YOUR_CALM",
            0xc => "INADEQUATE_SECURITY",
            0xd => "HTTP_1_1_REQUIRED",
            _ => "UNKNOWN",
        }
    }
}

/// A frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Payload length.
    pub len: u32,
    pub kind: u8,
    pub flags: u8,
    /// The stream identifier, the reserved bit cleared.
    pub stream: u32,
}

impl Header {
    /// The header at the start of `b`, if 9 bytes are there.
    pub fn parse(b: &[u8]) -> Option<Header> {
        let h = b.get(..HEADER_LEN)?;
        Some(Header {
            len: u32::from_be_bytes([0, h[0], h[1], h[2]]),
            kind: h[3],
            flags: h[4],
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        })
    }

    pub fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }
}

/// A frame header's bytes.
pub fn header_bytes(len: usize, kind: u8, flags: u8, stream: u32) -> [u8; HEADER_LEN] {
    let len = len as u32;
    let s = (stream & 0x7fff_ffff).to_be_bytes();
    [
        (len >> 16) as u8,
        (len >> 8) as u8,
        len as u8,
        kind,
        flags,
        s[0],
        s[1],
        s[2],
        s[3],
    ]
}

/// Appends a frame header.
pub fn write_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&header_bytes(len, kind, flags, stream));
}

/// Appends a SETTINGS frame with these (identifier, value) pairs.
pub fn write_settings(out: &mut Vec<u8>, settings: &[(u16, u32)]) {
    write_header(out, settings.len() * 6, kind::SETTINGS, 0, 0);
    for &(id, value) in settings {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

/// Appends a SETTINGS acknowledgement.
pub fn write_settings_ack(out: &mut Vec<u8>) {
    write_header(out, 0, kind::SETTINGS, flag::ACK, 0);
}

/// Appends a PING acknowledgement carrying `payload`.
pub fn write_ping_ack(out: &mut Vec<u8>, payload: &[u8; 8]) {
    write_header(out, 8, kind::PING, flag::ACK, 0);
    out.extend_from_slice(payload);
}

/// Appends a GOAWAY frame.
pub fn write_goaway(out: &mut Vec<u8>, last_stream: u32, code: Code) {
    write_header(out, 8, kind::GOAWAY, 0, 0);
    out.extend_from_slice(&(last_stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(&code.0.to_be_bytes());
}

/// Appends a RST_STREAM frame.
pub fn write_rst(out: &mut Vec<u8>, stream: u32, code: Code) {
    write_header(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&code.0.to_be_bytes());
}

/// Appends a WINDOW_UPDATE frame (`increment` 1 to 2^31-1).
pub fn write_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    write_header(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&(increment & 0x7fff_ffff).to_be_bytes());
}
