//! The server side of one HTTP/2 connection, without I/O: fed the client's bytes, it checks every
//! frame (RFC 9113 §4–§6), keeps the stream states, both directions' flow-control windows and the
//! flood counters, answers what the protocol answers by itself (SETTINGS and PING
//! acknowledgements, WINDOW_UPDATE as the application consumes bodies, RST_STREAM and GOAWAY on
//! errors), and hands the application what concerns it as [`Event`]s: requests, body bytes,
//! trailers, resets. The application answers through [`Conn::send_head`], [`Conn::send_data`]
//! and [`Conn::send_trailers`]; every frame goes to one output buffer, written to the socket in
//! one send per turn.

use super::fields::FieldList;
use super::frame::{self, flag, kind, setting, Code, Header, HEADER_LEN};
use super::hpack::{self, Decoder};

/// The limits of a connection (the `h2_*` settings of an HTTP listener).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// SETTINGS_MAX_CONCURRENT_STREAMS: a stream past it is refused (REFUSED_STREAM).
    pub max_concurrent_streams: u32,
    /// How much request body a stream may send before the application has read it.
    pub stream_window: u32,
    /// How much request body the whole connection may send before the application has read it:
    /// what one connection can make Quill hold.
    pub conn_window: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE (RFC 9113 §6.5.2's count: name, value and 32 per field),
    /// and the most fields of a request: past either, the request is answered 431.
    pub max_header_list: usize,
    pub max_headers: usize,
    /// A compressed header block longer than this, or in more CONTINUATION frames than
    /// `max_continuations`, ends the connection (ENHANCE_YOUR_CALM): the CONTINUATION flood.
    pub max_block: usize,
    pub max_continuations: u32,
    /// Streams the client resets before their response ended, streams refused and requests
    /// that are malformed ("glitches", Rapid Reset and MadeYouReset) may come in a burst of
    /// `glitch_burst`, then `glitch_rate` a second; past that, ENHANCE_YOUR_CALM.
    pub glitch_burst: u32,
    pub glitch_rate: u32,
    /// Frames that move no request on (PING, SETTINGS, PRIORITY, WINDOW_UPDATE the server does
    /// not wait for, empty DATA): a burst of `control_burst`, then `control_rate` a second.
    pub control_burst: u32,
    pub control_rate: u32,
    /// Requests one connection may carry, then a GOAWAY (0: no limit).
    pub max_requests: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_concurrent_streams: 100,
            stream_window: frame::DEFAULT_WINDOW,
            conn_window: 256 * 1024,
            max_header_list: 16 * 1024,
            max_headers: 100,
            max_block: 64 * 1024,
            max_continuations: 32,
            glitch_burst: 100,
            glitch_rate: 10,
            control_burst: 1000,
            control_rate: 100,
            max_requests: 0,
        }
    }
}

/// What a frame meant for the application.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// Nothing for the application (a frame the connection handled, or not a whole frame in
    /// the input yet when nothing was consumed).
    None,
    /// A request's header block: its fields are [`Conn::fields`] until the next call.
    /// `end_stream`: it has no body.
    Request { stream: u32, end_stream: bool },
    /// Body bytes of a request (possibly none, with `end_stream`).
    Data {
        stream: u32,
        data: &'a [u8],
        end_stream: bool,
    },
    /// The request's trailers ([`Conn::fields`]); the request ends with them.
    Trailers { stream: u32 },
    /// The stream is over before its exchange ended: the client reset it, or it broke a rule
    /// (RST_STREAM sent). Drop what was being done for it.
    Reset { stream: u32, code: Code },
    /// A send window grew: send what waited for it.
    WindowOpened,
    /// The client sent GOAWAY: no new requests will come.
    GoAway,
    /// A connection error: GOAWAY with this code is in the output; write it and close.
    Error(Code),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for the client's 24-byte preface.
    Preface,
    /// The first frame must be SETTINGS.
    FirstSettings,
    Open,
    /// A connection error was sent: nothing more is read.
    Failed,
}

#[derive(Debug)]
struct Stream {
    id: u32,
    /// The client may still send (it has not sent END_STREAM).
    remote_open: bool,
    /// Quill may still send (it has not sent END_STREAM).
    local_open: bool,
    send_window: i64,
    recv_window: i64,
    /// Body bytes consumed since the last WINDOW_UPDATE for this stream.
    recv_pending: u32,
    content_length: Option<u64>,
    received: u64,
}

/// A header block being received in HEADERS and CONTINUATION frames.
#[derive(Debug, Default)]
struct Block {
    stream: u32,
    end_stream: bool,
    buf: Vec<u8>,
    frames: u32,
    /// The block is dropped once decoded (a stream refused, ignored or reset).
    discard: bool,
    /// Once decoded, the stream is reset with this code.
    reset: Option<Code>,
}

/// A token bucket: `burst` at once, then `rate` a second.
#[derive(Debug, Default, Clone, Copy)]
struct Bucket {
    used: u32,
    at_ms: u64,
}

impl Bucket {
    /// Takes one; false when over.
    fn spend(&mut self, now_ms: u64, burst: u32, rate: u32) -> bool {
        let elapsed = now_ms.saturating_sub(self.at_ms);
        let refill = elapsed.saturating_mul(u64::from(rate)) / 1000;
        if refill > 0 || self.used == 0 {
            self.used = self
                .used
                .saturating_sub(refill.min(u64::from(u32::MAX)) as u32);
            self.at_ms = now_ms;
        }
        self.used = self.used.saturating_add(1);
        self.used <= burst
    }
}

/// Recently closed streams remembered, to tell a late frame on a stream Quill reset (ignored)
/// from a frame on a stream the client closed (an error).
const RECENT: usize = 16;
/// Room the output buffer is given when a header block is written: a batch of response heads
/// and small bodies fits without growing it step by step.
const OUT_RESERVE: usize = 4096;

/// One HTTP/2 connection, server side.
#[derive(Debug)]
pub struct Conn {
    cfg: Config,
    phase: Phase,
    decoder: Decoder,
    list: FieldList,
    peer_max_frame: u32,
    peer_initial_window: i64,
    send_window: i64,
    recv_window: i64,
    recv_pending: u32,
    streams: Vec<Stream>,
    /// The highest stream the client opened.
    last_id: u32,
    /// Recently closed streams, and whether Quill reset them.
    recent: [(u32, bool); RECENT],
    recent_at: usize,
    block: Option<Box<Block>>,
    /// The last stream id of the GOAWAY sent, if one was.
    goaway: Option<u32>,
    peer_goaway: bool,
    glitches: Bucket,
    controls: Bucket,
    /// Frames to send: those from `out_sent` on are [`Conn::output`] (a send moves the offset,
    /// not the bytes after it).
    out: Vec<u8>,
    out_sent: usize,
    /// Requests taken (`max_requests`).
    requests: u64,
}

impl Conn {
    /// A connection whose server preface (SETTINGS, and the connection window's increase) is in
    /// the output already.
    pub fn new(cfg: Config) -> Conn {
        let mut c = Conn {
            cfg,
            phase: Phase::Preface,
            decoder: Decoder::default(),
            list: FieldList::default(),
            peer_max_frame: frame::DEFAULT_MAX_FRAME,
            peer_initial_window: i64::from(frame::DEFAULT_WINDOW),
            send_window: i64::from(frame::DEFAULT_WINDOW),
            recv_window: i64::from(frame::DEFAULT_WINDOW),
            recv_pending: 0,
            streams: Vec::new(),
            last_id: 0,
            recent: [(0, false); RECENT],
            recent_at: 0,
            block: None,
            goaway: None,
            peer_goaway: false,
            glitches: Bucket::default(),
            controls: Bucket::default(),
            out: Vec::new(),
            out_sent: 0,
            requests: 0,
        };
        let mut settings = vec![
            (setting::MAX_CONCURRENT_STREAMS, cfg.max_concurrent_streams),
            (setting::MAX_HEADER_LIST_SIZE, cfg.max_header_list as u32),
            (setting::ENABLE_PUSH, 0),
        ];
        if cfg.stream_window != frame::DEFAULT_WINDOW {
            settings.push((setting::INITIAL_WINDOW_SIZE, cfg.stream_window));
        }
        frame::write_settings(&mut c.out, &settings);
        if cfg.conn_window > frame::DEFAULT_WINDOW {
            frame::write_window_update(&mut c.out, 0, cfg.conn_window - frame::DEFAULT_WINDOW);
            c.recv_window = i64::from(cfg.conn_window);
        }
        c
    }

    /// Bytes to send to the client.
    pub fn output(&self) -> &[u8] {
        self.out.get(self.out_sent..).unwrap_or_default()
    }

    /// `n` bytes of [`Conn::output`] were sent.
    ///
    /// The bytes sent stay in the buffer until the rest is no longer than they are: only then is
    /// the rest moved to the front, so each byte sent pays for at most one byte moved (a TLS
    /// socket takes a bounded amount a write, and moving the whole rest after each of them cost
    /// a 1 MiB download more copying than the body's own copy into its frames). The buffer holds
    /// less than twice the bytes not sent yet. All sent, the buffer is empty again, its memory
    /// kept for the frames that follow (until [`Conn::take_output_buffer`] or
    /// [`Conn::shrink`]).
    pub fn sent(&mut self, n: usize) {
        self.out_sent = (self.out_sent + n).min(self.out.len());
        let rest = self.out.len() - self.out_sent;
        if rest == 0 {
            self.out.clear();
            self.out_sent = 0;
        } else if rest <= self.out_sent {
            self.out.drain(..self.out_sent);
            self.out_sent = 0;
        }
        // What the offset's readers (`take_output_buffer`, `shrink`, `lend_output`: only on an
        // empty buffer) rely on.
        debug_assert!(self.out_sent == 0 || rest > self.out_sent);
    }

    /// The fields of the last [`Event::Request`] or [`Event::Trailers`].
    pub fn fields(&self) -> &FieldList {
        &self.list
    }

    /// Streams open (either way).
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Whether a header block is half received (the header timeout runs).
    pub fn in_block(&self) -> bool {
        self.block.is_some()
    }

    /// A connection error was sent, or a GOAWAY and no stream is left: close once the output
    /// is written.
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Failed
            || ((self.goaway.is_some() || self.peer_goaway) && self.streams.is_empty())
    }

    /// Whether new requests are still taken.
    pub fn accepts(&self) -> bool {
        self.goaway.is_none() && self.phase != Phase::Failed
    }

    /// Whether the output buffer holds no memory (an idle connection's, after [`Conn::shrink`]).
    pub fn output_released(&self) -> bool {
        self.out.capacity() == 0
    }

    /// An empty buffer to write the output into, when the connection holds none (a buffer kept
    /// from another connection: no allocation, and no growing, for the frames of a turn).
    pub fn lend_output(&mut self, mut buf: Vec<u8>) {
        if self.out.capacity() == 0 {
            buf.clear();
            self.out = buf;
        }
    }

    /// The output buffer, taken out when it holds nothing (to be kept for another connection).
    pub fn take_output_buffer(&mut self) -> Option<Vec<u8>> {
        (self.out.is_empty() && self.out.capacity() > 0).then(|| std::mem::take(&mut self.out))
    }

    /// Gives the buffers an idle connection does not need back.
    pub fn shrink(&mut self) {
        self.list.shrink();
        if self.out.is_empty() {
            self.out = Vec::new();
        }
        if self.streams.is_empty() {
            self.streams = Vec::new();
        }
    }

    fn stream(&mut self, id: u32) -> Option<&mut Stream> {
        self.streams.iter_mut().find(|s| s.id == id)
    }

    fn remember(&mut self, id: u32, ours: bool) {
        self.recent[self.recent_at] = (id, ours);
        self.recent_at = (self.recent_at + 1) % RECENT;
    }

    /// Whether Quill reset stream `id` recently (late frames on it are dropped).
    fn reset_by_us(&self, id: u32) -> bool {
        self.recent.iter().any(|&(s, ours)| s == id && ours)
    }

    fn remove(&mut self, id: u32, ours: bool) {
        if let Some(i) = self.streams.iter().position(|s| s.id == id) {
            self.streams.swap_remove(i);
        }
        self.remember(id, ours);
    }

    /// A connection error: GOAWAY with `code` in the output, nothing more read.
    fn fail(&mut self, code: Code) -> Event<'static> {
        if self.phase != Phase::Failed {
            frame::write_goaway(&mut self.out, self.last_id, code);
            self.phase = Phase::Failed;
            self.goaway = Some(self.last_id);
        }
        Event::Error(code)
    }

    /// A stream error on an open stream: RST_STREAM, and the application drops the exchange.
    fn stream_error(&mut self, id: u32, code: Code, now_ms: u64) -> Event<'static> {
        frame::write_rst(&mut self.out, id, code);
        self.remove(id, true);
        if !self.glitch(now_ms) {
            return self.fail(Code::ENHANCE_YOUR_CALM);
        }
        Event::Reset { stream: id, code }
    }

    fn glitch(&mut self, now_ms: u64) -> bool {
        let (b, r) = (self.cfg.glitch_burst, self.cfg.glitch_rate);
        self.glitches.spend(now_ms, b, r)
    }

    fn control(&mut self, now_ms: u64) -> bool {
        let (b, r) = (self.cfg.control_burst, self.cfg.control_rate);
        self.controls.spend(now_ms, b, r)
    }

    /// Reads at most one frame from `input`: the bytes it used (0: not a whole frame yet) and
    /// what it meant.
    pub fn feed<'a>(&mut self, input: &'a [u8], now_ms: u64) -> (usize, Event<'a>) {
        match self.phase {
            Phase::Failed => return (input.len(), Event::None),
            Phase::Preface => {
                let n = input.len().min(frame::PREFACE.len());
                if input[..n] != frame::PREFACE[..n] {
                    // Not HTTP/2: closed without a frame (RFC 9113 §3.4).
                    self.phase = Phase::Failed;
                    return (input.len(), Event::Error(Code::PROTOCOL_ERROR));
                }
                if n < frame::PREFACE.len() {
                    return (0, Event::None);
                }
                self.phase = Phase::FirstSettings;
                return (n, Event::None);
            }
            Phase::FirstSettings | Phase::Open => {}
        }
        let Some(h) = Header::parse(input) else {
            return (0, Event::None);
        };
        if h.len > frame::DEFAULT_MAX_FRAME {
            return (input.len(), self.fail(Code::FRAME_SIZE_ERROR));
        }
        let total = HEADER_LEN + h.len as usize;
        if input.len() < total {
            return (0, Event::None);
        }
        let payload = &input[HEADER_LEN..total];
        if self.phase == Phase::FirstSettings {
            if h.kind != kind::SETTINGS || h.has(flag::ACK) {
                return (total, self.fail(Code::PROTOCOL_ERROR));
            }
            self.phase = Phase::Open;
        }
        if self.block.is_some() && h.kind != kind::CONTINUATION {
            return (total, self.fail(Code::PROTOCOL_ERROR));
        }
        let event = match h.kind {
            kind::DATA => self.on_data(h, payload, now_ms),
            kind::HEADERS => self.on_headers(h, payload, now_ms),
            kind::PRIORITY => self.on_priority(h, payload, now_ms),
            kind::RST_STREAM => self.on_rst(h, payload, now_ms),
            kind::SETTINGS => self.on_settings(h, payload, now_ms),
            kind::PUSH_PROMISE => self.fail(Code::PROTOCOL_ERROR),
            kind::PING => self.on_ping(h, payload, now_ms),
            kind::GOAWAY => self.on_goaway(h),
            kind::WINDOW_UPDATE => self.on_window_update(h, payload, now_ms),
            kind::CONTINUATION => self.on_continuation(h, payload, now_ms),
            // Unknown types are ignored (RFC 9113 §4.1), but count as frames that move nothing.
            _ => {
                if self.control(now_ms) {
                    Event::None
                } else {
                    self.fail(Code::ENHANCE_YOUR_CALM)
                }
            }
        };
        (total, event)
    }

    /// The payload without its padding (PADDED flag); None when the padding is longer than the
    /// frame (PROTOCOL_ERROR).
    fn unpad(h: Header, payload: &[u8]) -> Option<&[u8]> {
        if !h.has(flag::PADDED) {
            return Some(payload);
        }
        let (&pad, rest) = payload.split_first()?;
        rest.len()
            .checked_sub(usize::from(pad))
            .map(|end| &rest[..end])
    }

    fn on_data<'a>(&mut self, h: Header, payload: &'a [u8], now_ms: u64) -> Event<'a> {
        if h.stream == 0 || h.stream > self.last_id {
            return self.fail(Code::PROTOCOL_ERROR);
        }
        let Some(data) = Self::unpad(h, payload) else {
            return self.fail(Code::PROTOCOL_ERROR);
        };
        // The whole frame counts against the windows, padding included.
        let len = i64::from(h.len);
        if len > self.recv_window {
            return self.fail(Code::FLOW_CONTROL_ERROR);
        }
        self.recv_window -= len;
        let end_stream = h.has(flag::END_STREAM);
        let open = self
            .streams
            .iter()
            .position(|s| s.id == h.stream && s.remote_open);
        let Some(i) = open else {
            // Not the application's: its window is given back at once.
            self.give_back_conn(h.len);
            if self.reset_by_us(h.stream) {
                return Event::None;
            }
            if self.streams.iter().any(|s| s.id == h.stream) {
                // Half closed (remote): a stream error (RFC 9113 §5.1), counted as a glitch.
                return self.stream_error(h.stream, Code::STREAM_CLOSED, now_ms);
            }
            return self.fail(Code::STREAM_CLOSED);
        };
        if data.is_empty() && !end_stream && !self.control(now_ms) {
            return self.fail(Code::ENHANCE_YOUR_CALM);
        }
        let s = &mut self.streams[i];
        if len > s.recv_window {
            self.give_back_conn(h.len);
            return self.stream_error(h.stream, Code::FLOW_CONTROL_ERROR, now_ms);
        }
        s.recv_window -= len;
        // Padding is consumed now; the data when the application says so.
        let pad = h.len - data.len() as u32;
        s.received += data.len() as u64;
        let over = s
            .content_length
            .is_some_and(|cl| s.received > cl || (end_stream && s.received != cl));
        if end_stream {
            s.remote_open = false;
        }
        if pad > 0 {
            self.release(h.stream, pad as usize);
        }
        if over {
            self.give_back_conn(data.len() as u32);
            return self.stream_error(h.stream, Code::PROTOCOL_ERROR, now_ms);
        }
        Event::Data {
            stream: h.stream,
            data,
            end_stream,
        }
    }

    fn give_back_conn(&mut self, n: u32) {
        self.recv_pending = self.recv_pending.saturating_add(n);
        if self.recv_pending >= self.cfg.conn_window / 2 {
            frame::write_window_update(&mut self.out, 0, self.recv_pending);
            self.recv_window += i64::from(self.recv_pending);
            self.recv_pending = 0;
        }
    }

    /// The application consumed `n` body bytes of `stream`: the windows open again (a
    /// WINDOW_UPDATE once half a window is consumed).
    pub fn release(&mut self, stream: u32, n: usize) {
        let n = n.min(u32::MAX as usize) as u32;
        if n == 0 {
            return;
        }
        self.give_back_conn(n);
        let half = self.cfg.stream_window / 2;
        let mut update = None;
        if let Some(s) = self.stream(stream) {
            s.recv_pending = s.recv_pending.saturating_add(n);
            if s.remote_open && s.recv_pending >= half {
                update = Some(s.recv_pending);
                s.recv_window += i64::from(s.recv_pending);
                s.recv_pending = 0;
            }
        }
        if let Some(inc) = update {
            frame::write_window_update(&mut self.out, stream, inc);
        }
    }

    fn on_headers(&mut self, h: Header, payload: &[u8], now_ms: u64) -> Event<'static> {
        if h.stream == 0 || h.stream.is_multiple_of(2) {
            return self.fail(Code::PROTOCOL_ERROR);
        }
        let Some(mut fragment) = Self::unpad(h, payload) else {
            return self.fail(Code::PROTOCOL_ERROR);
        };
        if h.has(flag::PRIORITY) {
            if fragment.len() < 5 {
                return self.fail(Code::FRAME_SIZE_ERROR);
            }
            let dep = u32::from_be_bytes([fragment[0], fragment[1], fragment[2], fragment[3]])
                & 0x7fff_ffff;
            if dep == h.stream {
                return self.fail(Code::PROTOCOL_ERROR);
            }
            fragment = &fragment[5..];
        }
        let end_stream = h.has(flag::END_STREAM);
        let mut discard = false;
        let mut reset = None;
        if h.stream <= self.last_id {
            // Trailers on an open stream, or a stream that is over.
            match self.streams.iter().find(|s| s.id == h.stream) {
                Some(s) if s.remote_open => {
                    if !end_stream {
                        return self.fail(Code::PROTOCOL_ERROR);
                    }
                }
                // Half closed (remote): decoded (the table must stay in step), then a stream
                // error.
                Some(_) => reset = Some(Code::STREAM_CLOSED),
                None if self.reset_by_us(h.stream) => discard = true,
                None if self.recent.iter().any(|&(s, _)| s == h.stream) => {
                    return self.fail(Code::STREAM_CLOSED)
                }
                None => return self.fail(Code::PROTOCOL_ERROR),
            }
        }
        let block = Block {
            stream: h.stream,
            end_stream,
            buf: Vec::new(),
            frames: 1,
            discard: discard || reset.is_some(),
            reset,
        };
        if h.has(flag::END_HEADERS) {
            // The usual block, whole in one frame: nothing kept, nothing allocated.
            return self.header_block(block, fragment, now_ms);
        }
        let mut block = Box::new(block);
        block.buf.extend_from_slice(fragment);
        self.block = Some(block);
        Event::None
    }

    fn on_continuation(&mut self, h: Header, payload: &[u8], now_ms: u64) -> Event<'static> {
        let Some(mut block) = self.block.take() else {
            // Not after an unfinished HEADERS: on a stream that was used, it is on a closed
            // stream; else it opens nothing.
            if h.stream != 0 && h.stream <= self.last_id {
                return self.fail(Code::STREAM_CLOSED);
            }
            return self.fail(Code::PROTOCOL_ERROR);
        };
        if h.stream != block.stream {
            return self.fail(Code::PROTOCOL_ERROR);
        }
        block.frames += 1;
        if block.frames > self.cfg.max_continuations
            || block.buf.len() + payload.len() > self.cfg.max_block
        {
            return self.fail(Code::ENHANCE_YOUR_CALM);
        }
        if h.has(flag::END_HEADERS) {
            let buf = std::mem::take(&mut block.buf);
            let event = self.header_block(*block, &buf_with(&buf, payload), now_ms);
            return event;
        }
        block.buf.extend_from_slice(payload);
        self.block = Some(block);
        Event::None
    }

    /// A whole header block: decoded (always: the table must stay in step), then a request,
    /// trailers, or dropped.
    fn header_block(&mut self, block: Block, bytes: &[u8], now_ms: u64) -> Event<'static> {
        let id = block.stream;
        let trailers = id <= self.last_id && !block.discard;
        self.list
            .begin(trailers, self.cfg.max_header_list, self.cfg.max_headers);
        let list = &mut self.list;
        if self.decoder.decode(bytes, |n, v| list.push(n, v)).is_err() {
            return self.fail(Code::COMPRESSION_ERROR);
        }
        if let Some(code) = block.reset {
            return self.stream_error(id, code, now_ms);
        }
        if block.discard {
            return Event::None;
        }
        if trailers {
            if self.list.malformed.is_some() || self.list.too_large {
                return self.stream_error(id, Code::PROTOCOL_ERROR, now_ms);
            }
            let Some(s) = self.stream(id) else {
                return Event::None;
            };
            s.remote_open = false;
            if s.content_length.is_some_and(|cl| cl != s.received) {
                return self.stream_error(id, Code::PROTOCOL_ERROR, now_ms);
            }
            return Event::Trailers { stream: id };
        }
        // A new stream.
        self.last_id = id;
        if self.goaway.is_some() {
            // Past the GOAWAY: ignored (the client retries it elsewhere).
            self.remember(id, true);
            return Event::None;
        }
        if self.streams.len() >= self.cfg.max_concurrent_streams as usize {
            frame::write_rst(&mut self.out, id, Code::REFUSED_STREAM);
            self.remember(id, true);
            if !self.glitch(now_ms) {
                return self.fail(Code::ENHANCE_YOUR_CALM);
            }
            return Event::None;
        }
        self.list.finish();
        let end_stream = block.end_stream;
        let content_length = self.list.content_length;
        if self.streams.capacity() == 0 {
            self.streams.reserve(16);
        }
        self.streams.push(Stream {
            id,
            remote_open: !end_stream,
            local_open: true,
            send_window: self.peer_initial_window,
            recv_window: i64::from(self.cfg.stream_window),
            recv_pending: 0,
            content_length,
            received: 0,
        });
        if self.list.malformed.is_some() || (end_stream && content_length.is_some_and(|cl| cl > 0))
        {
            return self.stream_error(id, Code::PROTOCOL_ERROR, now_ms);
        }
        if self.list.too_large {
            // Answered here: 431, and the stream is over.
            self.send_head(id, 431, std::iter::empty(), true);
            if !self.glitch(now_ms) {
                return self.fail(Code::ENHANCE_YOUR_CALM);
            }
            return Event::None;
        }
        self.requests += 1;
        if self.cfg.max_requests > 0 && self.requests >= self.cfg.max_requests {
            // The last request this connection takes.
            self.goaway_now();
        }
        Event::Request {
            stream: id,
            end_stream,
        }
    }

    fn on_priority(&mut self, h: Header, payload: &[u8], now_ms: u64) -> Event<'static> {
        if h.stream == 0 {
            return self.fail(Code::PROTOCOL_ERROR);
        }
        if payload.len() != 5 {
            if self.streams.iter().any(|st| st.id == h.stream) {
                return self.stream_error(h.stream, Code::FRAME_SIZE_ERROR, now_ms);
            }
            return self.fail(Code::FRAME_SIZE_ERROR);
        }
        let dep =
            u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff;
        if dep == h.stream {
            if self.streams.iter().any(|s| s.id == h.stream) {
                return self.stream_error(h.stream, Code::PROTOCOL_ERROR, now_ms);
            }
            return self.fail(Code::PROTOCOL_ERROR);
        }
        if !self.control(now_ms) {
            return self.fail(Code::ENHANCE_YOUR_CALM);
        }
        Event::None
    }

    fn on_rst(&mut self, h: Header, payload: &[u8], now_ms: u64) -> Event<'static> {
        if h.stream == 0 || h.stream > self.last_id {
            return self.fail(Code::PROTOCOL_ERROR);
        }
        if payload.len() != 4 {
            return self.fail(Code::FRAME_SIZE_ERROR);
        }
        let code = Code(u32::from_be_bytes([
            payload[0], payload[1], payload[2], payload[3],
        ]));
        let Some(s) = self.streams.iter().find(|s| s.id == h.stream) else {
            // A stream already over: nothing to do, but it moved nothing either.
            if !self.control(now_ms) {
                return self.fail(Code::ENHANCE_YOUR_CALM);
            }
            return Event::None;
        };
        let early = s.local_open;
        self.remove(h.stream, false);
        // A stream reset before its response ended is Rapid Reset's pattern.
        if early && !self.glitch(now_ms) {
            return self.fail(Code::ENHANCE_YOUR_CALM);
        }
        Event::Reset {
            stream: h.stream,
            code,
        }
    }

    fn on_settings(&mut self, h: Header, payload: &[u8], now_ms: u64) -> Event<'static> {
        if h.stream != 0 {
            return self.fail(Code::PROTOCOL_ERROR);
        }
        if h.has(flag::ACK) {
            if !payload.is_empty() {
                return self.fail(Code::FRAME_SIZE_ERROR);
            }
            return Event::None;
        }
        if !payload.len().is_multiple_of(6) {
            return self.fail(Code::FRAME_SIZE_ERROR);
        }
        if !self.control(now_ms) {
            return self.fail(Code::ENHANCE_YOUR_CALM);
        }
        let mut opened = false;
        for s in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([s[0], s[1]]);
            let value = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match id {
                setting::ENABLE_PUSH if value > 1 => return self.fail(Code::PROTOCOL_ERROR),
                setting::INITIAL_WINDOW_SIZE => {
                    if i64::from(value) > frame::MAX_WINDOW {
                        return self.fail(Code::FLOW_CONTROL_ERROR);
                    }
                    let delta = i64::from(value) - self.peer_initial_window;
                    self.peer_initial_window = i64::from(value);
                    for st in &mut self.streams {
                        st.send_window += delta;
                        if st.send_window > frame::MAX_WINDOW {
                            return self.fail(Code::FLOW_CONTROL_ERROR);
                        }
                    }
                    opened |= delta > 0;
                }
                setting::MAX_FRAME_SIZE => {
                    if !(frame::DEFAULT_MAX_FRAME..=frame::MAX_MAX_FRAME).contains(&value) {
                        return self.fail(Code::PROTOCOL_ERROR);
                    }
                    self.peer_max_frame = value;
                }
                // The table of Quill's encoder is always empty; the client's limits on what
                // it receives and unknown settings need nothing.
                _ => {}
            }
        }
        frame::write_settings_ack(&mut self.out);
        if opened {
            Event::WindowOpened
        } else {
            Event::None
        }
    }

    fn on_ping(&mut self, h: Header, payload: &[u8], now_ms: u64) -> Event<'static> {
        if h.stream != 0 {
            return self.fail(Code::PROTOCOL_ERROR);
        }
        let Ok(data) = <&[u8; 8]>::try_from(payload) else {
            return self.fail(Code::FRAME_SIZE_ERROR);
        };
        if h.has(flag::ACK) {
            return Event::None;
        }
        if !self.control(now_ms) {
            return self.fail(Code::ENHANCE_YOUR_CALM);
        }
        frame::write_ping_ack(&mut self.out, data);
        Event::None
    }

    fn on_goaway(&mut self, h: Header) -> Event<'static> {
        if h.stream != 0 {
            return self.fail(Code::PROTOCOL_ERROR);
        }
        self.peer_goaway = true;
        Event::GoAway
    }

    fn on_window_update(&mut self, h: Header, payload: &[u8], now_ms: u64) -> Event<'static> {
        if payload.len() != 4 {
            return self.fail(Code::FRAME_SIZE_ERROR);
        }
        let inc = i64::from(
            u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff,
        );
        if h.stream == 0 {
            if inc == 0 {
                return self.fail(Code::PROTOCOL_ERROR);
            }
            // Useful only while something waits for the window.
            let waiting = self.send_window <= 0;
            if !waiting && !self.control(now_ms) {
                return self.fail(Code::ENHANCE_YOUR_CALM);
            }
            self.send_window += inc;
            if self.send_window > frame::MAX_WINDOW {
                return self.fail(Code::FLOW_CONTROL_ERROR);
            }
            return Event::WindowOpened;
        }
        if h.stream > self.last_id {
            return self.fail(Code::PROTOCOL_ERROR);
        }
        let Some(i) = self.streams.iter().position(|s| s.id == h.stream) else {
            if !self.control(now_ms) {
                return self.fail(Code::ENHANCE_YOUR_CALM);
            }
            return Event::None;
        };
        if inc == 0 {
            return self.stream_error(h.stream, Code::PROTOCOL_ERROR, now_ms);
        }
        let s = &mut self.streams[i];
        let waiting = s.local_open && s.send_window <= 0;
        s.send_window += inc;
        if s.send_window > frame::MAX_WINDOW {
            return self.stream_error(h.stream, Code::FLOW_CONTROL_ERROR, now_ms);
        }
        if !waiting && !self.control(now_ms) {
            return self.fail(Code::ENHANCE_YOUR_CALM);
        }
        Event::WindowOpened
    }

    // === what the server sends ===

    /// Writes a header block (HEADERS, then CONTINUATION frames past the client's frame size).
    fn write_block(&mut self, id: u32, end_stream: bool, encode: impl FnOnce(&mut Vec<u8>)) {
        // Room for a turn's frames at once (the buffer is freed while the connection is idle):
        // one allocation, not a dozen growing ones.
        if self.out.capacity() == 0 {
            self.out.reserve(OUT_RESERVE);
        }
        let start = self.out.len();
        self.out.extend_from_slice(&[0; HEADER_LEN]);
        encode(&mut self.out);
        let len = self.out.len() - start - HEADER_LEN;
        let end = if end_stream { flag::END_STREAM } else { 0 };
        let max = self.peer_max_frame as usize;
        if len <= max {
            let h = frame::header_bytes(len, kind::HEADERS, end | flag::END_HEADERS, id);
            self.out[start..start + HEADER_LEN].copy_from_slice(&h);
            return;
        }
        let block = self.out.split_off(start + HEADER_LEN);
        self.out.truncate(start);
        let mut chunks = block.chunks(max).peekable();
        let mut first = true;
        while let Some(chunk) = chunks.next() {
            let last = chunks.peek().is_none();
            let (k, mut f) = if first {
                (kind::HEADERS, end)
            } else {
                (kind::CONTINUATION, 0)
            };
            if last {
                f |= flag::END_HEADERS;
            }
            frame::write_header(&mut self.out, chunk.len(), k, f, id);
            self.out.extend_from_slice(chunk);
            first = false;
        }
    }

    /// Sends a response head (or an interim 1xx one) on `stream`: `:status` then `fields`.
    /// Does nothing when the stream is gone.
    pub fn send_head<'f>(
        &mut self,
        stream: u32,
        status: u16,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
        end_stream: bool,
    ) {
        let Some(s) = self.stream(stream) else {
            return;
        };
        if !s.local_open {
            return;
        }
        self.write_block(stream, end_stream, |out| {
            hpack::encode_status(out, status);
            for (n, v) in fields {
                hpack::encode_field(out, n, v);
            }
        });
        if end_stream {
            self.local_end(stream);
        }
    }

    /// Sends a response head already encoded as a header block (`:status` first) on `stream`.
    /// Does nothing when the stream is gone.
    pub fn send_block(&mut self, stream: u32, block: &[u8], end_stream: bool) {
        if !self.stream(stream).is_some_and(|s| s.local_open) {
            return;
        }
        self.write_block(stream, end_stream, |out| out.extend_from_slice(block));
        if end_stream {
            self.local_end(stream);
        }
    }

    /// Sends trailers, which end the stream.
    pub fn send_trailers<'f>(
        &mut self,
        stream: u32,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
    ) {
        if !self.stream(stream).is_some_and(|s| s.local_open) {
            return;
        }
        self.write_block(stream, true, |out| {
            for (n, v) in fields {
                hpack::encode_field(out, n, v);
            }
        });
        self.local_end(stream);
    }

    /// How many body bytes `stream` may send now (both windows).
    pub fn window(&self, stream: u32) -> usize {
        match self.streams.iter().find(|s| s.id == stream) {
            Some(s) if s.local_open => s.send_window.min(self.send_window).max(0) as usize,
            _ => 0,
        }
    }

    /// Sends what the windows allow of `data` as DATA frames: the bytes taken. `end_stream`
    /// ends the stream when all of `data` was taken (an empty `data` may end it).
    pub fn send_data(&mut self, stream: u32, data: &[u8], end_stream: bool) -> usize {
        let n = data.len().min(self.window(stream));
        if n == 0 && !(data.is_empty() && end_stream) {
            return 0;
        }
        if !self.stream(stream).is_some_and(|s| s.local_open) {
            return 0;
        }
        let ends = end_stream && n == data.len();
        let max = self.peer_max_frame as usize;
        let mut at = 0;
        loop {
            let len = (n - at).min(max);
            let last = at + len == n;
            let f = if last && ends { flag::END_STREAM } else { 0 };
            frame::write_header(&mut self.out, len, kind::DATA, f, stream);
            self.out.extend_from_slice(&data[at..at + len]);
            at += len;
            if last {
                break;
            }
        }
        self.send_window -= n as i64;
        if let Some(s) = self.stream(stream) {
            s.send_window -= n as i64;
        }
        if ends {
            self.local_end(stream);
        }
        n
    }

    /// Quill ended its side of `stream`: the stream is over, or, while the client still sends
    /// its body, reset with NO_ERROR (the response is whole; the rest of the body is not
    /// wanted, RFC 9113 §8.1).
    fn local_end(&mut self, stream: u32) {
        let Some(s) = self.stream(stream) else {
            return;
        };
        s.local_open = false;
        if s.remote_open {
            frame::write_rst(&mut self.out, stream, Code::NO_ERROR);
            self.remove(stream, true);
        } else {
            self.remove(stream, false);
        }
    }

    /// Ends `stream` with RST_STREAM (its exchange failed or was dropped).
    pub fn reset(&mut self, stream: u32, code: Code) {
        if self.streams.iter().any(|s| s.id == stream) {
            frame::write_rst(&mut self.out, stream, code);
            self.remove(stream, true);
        }
    }

    /// Starts a graceful close (drain, reload): a GOAWAY naming the last stream taken; streams
    /// in flight finish, new ones are ignored, and [`Conn::is_done`] says when to close.
    /// The first call of a two-step close sends 2^31-1 (every stream the client may have sent
    /// already is still taken); `final_step` sends the real last stream.
    pub fn goaway_graceful(&mut self, final_step: bool) {
        if self.phase == Phase::Failed {
            return;
        }
        if final_step {
            self.goaway_now();
        } else if self.goaway.is_none() {
            frame::write_goaway(&mut self.out, frame::MAX_WINDOW as u32, Code::NO_ERROR);
            // Ask for a PING acknowledgement: once it comes, every stream sent before the GOAWAY
            // has been read.
            frame::write_header(&mut self.out, 8, kind::PING, 0, 0);
            self.out.extend_from_slice(b"quill-gw");
        }
    }

    fn goaway_now(&mut self) {
        if self.goaway.is_some_and(|g| g <= self.last_id) {
            return;
        }
        frame::write_goaway(&mut self.out, self.last_id, Code::NO_ERROR);
        self.goaway = Some(self.last_id);
    }

    /// Ends the connection now with `code` (a timeout, a drain's end).
    pub fn abort(&mut self, code: Code) {
        self.fail(code);
    }
}

/// `a` followed by `b`, for the last fragment of a block (one copy, at the block's end).
fn buf_with(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(a.len() + b.len());
    v.extend_from_slice(a);
    v.extend_from_slice(b);
    v
}
