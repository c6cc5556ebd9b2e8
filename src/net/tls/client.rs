//! The client side of an originated TLS connection (to a server): rustls' buffered
//! `ClientConnection`, driven over the plain socket through [`Io`]. Few are open at once, and
//! idle ones are pooled by HTTP mode, so its buffers are not worth pooling per worker.

use std::io::{self, IoSlice, Read, Write};

use rustls::ClientConnection;

use super::{tls_error, Handshake, HandshakeError, Ready, Stream, TlsStream};

/// `io::Read`/`io::Write` over the plain socket for rustls' `read_tls`/`write_tls`.
pub(super) struct Io<'a>(pub(super) &'a Stream);

impl Read for Io<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Io<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl TlsStream {
    /// [`TlsStream::handshake`] on the client side.
    pub(super) fn client_handshake(
        &self,
        conn: &mut ClientConnection,
        ready: &mut Ready,
    ) -> Result<Handshake, HandshakeError> {
        let mut plaintext = false;
        for _ in 0..64 {
            while conn.wants_write() && ready.writable {
                match conn.write_tls(&mut Io(&self.sock)) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready.writable = false,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(HandshakeError::Io(e)),
                }
            }
            if !conn.is_handshaking() {
                if conn.wants_write() {
                    return Ok(Handshake::Pending);
                }
                if plaintext || self.eof.get() {
                    ready.readable = true;
                }
                return Ok(Handshake::Done);
            }
            if !ready.readable {
                return Ok(Handshake::Pending);
            }
            match conn.read_tls(&mut Io(&self.sock)) {
                Ok(0) => {
                    self.eof.set(true);
                    return Err(HandshakeError::Closed);
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready.readable = false;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    if ready.error || e.kind() == io::ErrorKind::ConnectionReset {
                        return Err(HandshakeError::Closed);
                    }
                    return Err(HandshakeError::Io(e));
                }
            }
            match conn.process_new_packets() {
                Ok(state) => plaintext = state.plaintext_bytes_to_read() > 0,
                Err(e) => {
                    // The alert rustls queued, best effort: the server learns why.
                    let _ = conn.write_tls(&mut Io(&self.sock));
                    return Err(HandshakeError::Tls(e));
                }
            }
        }
        Ok(Handshake::Pending)
    }

    /// [`TlsStream::read`] on the client side.
    pub(super) fn client_read(
        &self,
        conn: &mut ClientConnection,
        buf: &mut [u8],
    ) -> io::Result<usize> {
        let mut n = 0;
        loop {
            match conn.reader().read(&mut buf[n..]) {
                Ok(0) => {
                    self.ended.set(true);
                    return Ok(n);
                }
                Ok(k) => {
                    n += k;
                    if n == buf.len() {
                        return Ok(n);
                    }
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The socket closed without close_notify: an end all the same (many clients do
                // it); what was sent before it is delivered.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    self.ended.set(true);
                    return Ok(n);
                }
                Err(e) => return if n > 0 { Ok(n) } else { Err(e) },
            }
            if self.eof.get() {
                return Ok(n);
            }
            match conn.read_tls(&mut Io(&self.sock)) {
                Ok(0) => self.eof.set(true),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return if n > 0 { Ok(n) } else { Err(e) };
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return if n > 0 { Ok(n) } else { Err(e) },
            }
            if let Err(e) = conn.process_new_packets() {
                let _ = conn.write_tls(&mut Io(&self.sock));
                return if n > 0 { Ok(n) } else { Err(tls_error(e)) };
            }
            // Records rustls must answer (a key update, an alert): out with the next write, or
            // now if the socket takes them.
            if conn.wants_write() {
                let _ = conn.write_tls(&mut Io(&self.sock));
            }
        }
    }
}
