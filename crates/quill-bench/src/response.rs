//! Reading one response from the bytes a bench connection receives: the HTTP/1.x head (httparse),
//! then the body framing (Content-Length, chunked or until close), or one line in tcp mode.
//!
//! Pure: no I/O, no allocation. The engine feeds bytes as they arrive and learns when the response
//! is whole, how many body bytes it had, whether it was a success and whether the connection may
//! carry another request.

/// Most headers a bench response may carry; more is a bad response.
const MAX_HEADERS: usize = 48;

/// What the head of an HTTP response says about the rest of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// Bytes of the status line and headers, up to and including the blank line.
    pub len: usize,
    /// A 2xx status.
    pub ok: bool,
    /// The server allows another request on this connection (HTTP/1.1 without `Connection: close`,
    /// or HTTP/1.0 with `Connection: keep-alive`), provided the body is delimited.
    pub reusable: bool,
    pub body: Framing,
}

/// How the end of a body is found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// This many bytes remain.
    Length(u64),
    Chunked(Chunked),
    /// The body ends when the server closes the connection.
    UntilClose,
}

/// Parses the head at the start of `buf`. `Ok(None)`: not whole yet. `Err(())`: not HTTP/1.x.
#[allow(clippy::result_unit_err)]
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, ()> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(()),
    };
    let code = response.code.ok_or(())?;
    let mut length = None;
    let mut chunked = false;
    let mut close = response.version == Some(0);
    for h in response.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let text = std::str::from_utf8(h.value).map_err(|_| ())?;
            length = Some(text.trim().parse::<u64>().map_err(|_| ())?);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = ends_with_token(h.value, b"chunked");
        } else if h.name.eq_ignore_ascii_case("connection") {
            if has_token(h.value, b"close") {
                close = true;
            } else if has_token(h.value, b"keep-alive") {
                close = false;
            }
        }
    }
    let body = if code / 100 == 1 || code == 204 || code == 304 {
        Framing::Length(0)
    } else if chunked {
        Framing::Chunked(Chunked::default())
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        Framing::UntilClose
    };
    Ok(Some(Head {
        len,
        ok: (200..300).contains(&code),
        reusable: !close && body != Framing::UntilClose,
        body,
    }))
}

/// The result of feeding body bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fed {
    /// Bytes of the input that belonged to the response.
    pub used: usize,
    /// Payload bytes among them (chunk sizes and trailers excluded).
    pub body: u64,
    /// The body is complete.
    pub done: bool,
}

impl Framing {
    /// Takes the body bytes in `data`; bytes after the end of the body are left unused.
    #[allow(clippy::result_unit_err)]
    pub fn feed(&mut self, data: &[u8]) -> Result<Fed, ()> {
        match self {
            Framing::Length(left) => {
                let take = (*left).min(data.len() as u64);
                *left -= take;
                Ok(Fed {
                    used: take as usize,
                    body: take,
                    done: *left == 0,
                })
            }
            Framing::Chunked(state) => state.feed(data),
            Framing::UntilClose => Ok(Fed {
                used: data.len(),
                body: data.len() as u64,
                done: false,
            }),
        }
    }
}

/// Where a chunked body decoder stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Chunked {
    /// Reading the hex size of the next chunk.
    #[default]
    Size,
    SizeDigits(u64),
    /// Skipping a chunk extension up to the end of the size line.
    Extension(u64),
    /// Payload bytes left in the current chunk.
    Data(u64),
    /// The CR LF after a chunk's payload.
    DataEnd,
    /// At the start of a trailer line (after the last, empty chunk).
    TrailerStart,
    /// Inside a trailer line.
    Trailer,
    /// Saw CR of the final empty line.
    FinalLf,
}

impl Chunked {
    fn feed(&mut self, data: &[u8]) -> Result<Fed, ()> {
        let mut i = 0;
        let mut body = 0u64;
        while i < data.len() {
            let b = data[i];
            match *self {
                Chunked::Data(left) => {
                    let take = left.min((data.len() - i) as u64);
                    body += take;
                    i += take as usize;
                    *self = if take == left {
                        Chunked::DataEnd
                    } else {
                        Chunked::Data(left - take)
                    };
                    continue;
                }
                Chunked::Size | Chunked::SizeDigits(_) => {
                    let n = match *self {
                        Chunked::SizeDigits(n) => n,
                        _ => 0,
                    };
                    *self = match (b as char).to_digit(16) {
                        Some(d) if n >> 60 == 0 => Chunked::SizeDigits(n * 16 + d as u64),
                        None if matches!(*self, Chunked::SizeDigits(_)) => Self::after_size(n, b)?,
                        _ => return Err(()),
                    };
                }
                Chunked::Extension(n) => {
                    if b == b'\n' {
                        *self = Self::start_chunk(n);
                    }
                }
                Chunked::DataEnd => match b {
                    b'\r' => {}
                    b'\n' => *self = Chunked::Size,
                    _ => return Err(()),
                },
                Chunked::TrailerStart => match b {
                    b'\r' => *self = Chunked::FinalLf,
                    b'\n' => return Ok(Self::finished(i + 1, body)),
                    _ => *self = Chunked::Trailer,
                },
                Chunked::Trailer => {
                    if b == b'\n' {
                        *self = Chunked::TrailerStart;
                    }
                }
                Chunked::FinalLf => {
                    return match b {
                        b'\n' => Ok(Self::finished(i + 1, body)),
                        _ => Err(()),
                    }
                }
            }
            i += 1;
        }
        Ok(Fed {
            used: i,
            body,
            done: false,
        })
    }

    fn after_size(n: u64, b: u8) -> Result<Chunked, ()> {
        match b {
            b'\n' => Ok(Self::start_chunk(n)),
            b'\r' | b';' | b' ' | b'\t' => Ok(Chunked::Extension(n)),
            _ => Err(()),
        }
    }

    fn start_chunk(n: u64) -> Chunked {
        if n == 0 {
            Chunked::TrailerStart
        } else {
            Chunked::Data(n)
        }
    }

    fn finished(used: usize, body: u64) -> Fed {
        Fed {
            used,
            body,
            done: true,
        }
    }
}

/// A comma-separated header value contains `token` (ASCII case-insensitive).
fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// The last coding of a comma-separated header value is `token`.
fn ends_with_token(value: &[u8], token: &[u8]) -> bool {
    value
        .rsplit(|&b| b == b',')
        .next()
        .is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Head {
        parse_head(text.as_bytes()).unwrap().unwrap()
    }

    #[test]
    fn content_length_response_is_reusable_in_http_1_1() {
        let h = head("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
        assert_eq!(h.len, 38);
        assert!(h.ok && h.reusable);
        assert_eq!(h.body, Framing::Length(5));
    }

    #[test]
    fn connection_close_and_http_1_0_are_not_reusable() {
        assert!(
            !head("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").reusable
        );
        assert!(!head("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").reusable);
        assert!(
            head("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n").reusable
        );
    }

    #[test]
    fn no_length_reads_until_close_and_non_2xx_is_not_ok() {
        let h = head("HTTP/1.1 500 Oops\r\n\r\n");
        assert!(!h.ok && !h.reusable);
        assert_eq!(h.body, Framing::UntilClose);
    }

    #[test]
    fn partial_and_garbage_heads() {
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Le"), Ok(None));
        assert_eq!(parse_head(b"SSH-2.0-OpenSSH\r\n\r\n"), Err(()));
    }

    #[test]
    fn chunked_body_counts_payload_in_any_split() {
        let body = b"5;x=1\r\nhello\r\n0b\r\n, world! ok\r\n0\r\nX-T: 1\r\n\r\nEXTRA";
        // Every split inside the response (the last 5 bytes are after it).
        for split in 0..body.len() - 5 {
            let mut f = Framing::Chunked(Chunked::default());
            let a = f.feed(&body[..split]).unwrap();
            assert!(!a.done, "split {split}");
            let b = f.feed(&body[split..]).unwrap();
            assert!(b.done, "split {split}");
            assert_eq!(a.body + b.body, 16, "split {split}");
            assert_eq!(a.used + b.used, body.len() - 5, "split {split}");
        }
    }

    #[test]
    fn chunked_bad_size_is_an_error() {
        let mut f = Framing::Chunked(Chunked::default());
        assert_eq!(f.feed(b"zz\r\n"), Err(()));
    }

    #[test]
    fn length_body_leaves_extra_bytes_unused() {
        let mut f = Framing::Length(3);
        let fed = f.feed(b"abcdef").unwrap();
        assert_eq!((fed.used, fed.body, fed.done), (3, 3, true));
    }
}
