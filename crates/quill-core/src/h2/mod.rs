//! HTTP/2, server side (RFC 9113, RFC 7541), pure: bytes in, events and bytes out, as
//! [`crate::http1`] is. [`frame`] is the frame layer, [`hpack`] header compression (Quill's own,
//! with `huffman` the string code), [`fields`] the checks a request's header list must pass and its
//! HTTP/1.1 form, [`conn`] one connection's state machine (streams, flow control, SETTINGS,
//! PING, GOAWAY, RST_STREAM, the flood counters), and [`response`] an HTTP/1.1 response turned
//! into frames. The proxy maps each stream onto its HTTP/1 path: requests are written as strict
//! HTTP/1.1 heads that the HTTP/1 parser reads next, responses come back as HTTP/1.1 bytes.

pub mod conn;
pub mod fields;
pub mod frame;
pub mod hpack;
mod huffman;
pub mod response;

pub use conn::{Config, Conn, Event};
pub use fields::{write_http1, BodyForm, FieldList, Malformed};
pub use frame::Code;
pub use response::{encode_response_head, Response, Written};

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
