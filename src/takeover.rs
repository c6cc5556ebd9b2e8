//! The takeover handshake: how a new Quill process receives every listening socket of the running
//! one by SCM_RIGHTS, so that an upgrade never refuses a connection. The new process sends
//! `takeover` over the control socket (Unix only: the control thread checks that) and receives the
//! sockets with their names as one JSON line; once it serves, it writes `done` on the same
//! connection and the old process drains. If the connection closes first, nothing changes in the
//! old process.
//!
//! The generated TLS session-ticket keys go along, so that sessions resume across the upgrade:
//! the old process's JSON line offers them (`"ticket_keys": 1`, the version of the key message),
//! the new process asks with `ticket_keys 1` and receives one message, `version(1) |
//! length(4, big-endian) | keys` ([`tickets::TicketKeys::export`]), which it installs before any
//! listener's TLS is built. Either side may be an older Quill: an old process offers nothing and
//! the new one keeps the keys it generates; an old new process never asks. Key files are not
//! handed over: the new process reads them itself.
//!
//! Both halves live here, apart from the control socket that carries the first line, so that the
//! runtime (the new process's start-up) and the control thread (the old process) both call down
//! into it instead of into each other.

use std::io::{self, BufRead, BufReader, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mio::Waker;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde_json::{json, Value};

use crate::state::controller::Controller;
use crate::state::Msg;
use crate::systemd::Inherited;
use crate::tls::tickets;

/// The name the control socket has among handed-over sockets.
pub(crate) const CONTROL_NAME: &str = "control";
/// The admin listener's name among handed-over sockets.
pub(crate) const ADMIN_NAME: &str = "admin";
/// How long the new process may take to answer, as the control socket's `IO_TIMEOUT`.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the old process waits for the new one to say it serves.
const TAKEOVER_TIMEOUT: Duration = Duration::from_secs(60);
/// Most sockets one takeover hands over: the most one message may carry (the kernel's
/// `SCM_MAX_FD`). A UDP listener, or a TCP one with `listen_per_worker`, hands over one socket per
/// worker; a takeover past this is refused with the count, and the old process keeps serving.
const MAX_FDS: usize = 253;
/// Longest answer line read (`done`, or what a confused peer says instead), as a command line.
const MAX_ANSWER: usize = 4096;
/// The new process's request for the ticket keys, in the version it reads.
const KEYS_REQUEST: &str = "ticket_keys 1";
/// Longest key message accepted (255 keys of 80 bytes and a header fit easily).
const MAX_KEYS_MESSAGE: u32 = 64 * 1024;
/// Lines the old process reads before `done` (the key request, and one spare).
const MAX_REQUESTS: usize = 4;

/// Old process: hands every listening socket, the control socket (`control_socket`) and the admin
/// listener to the new process, then waits for it to say it serves; once it does, marks the state
/// handed over, wakes the control loop (`waker`) and tells the main thread.
pub(crate) fn hand_over(
    conn: &UnixStream,
    control_socket: BorrowedFd<'_>,
    controller: &Controller,
    waker: &Waker,
) -> io::Result<()> {
    let listeners = controller.shared().listeners.load_full();
    // A UDP listener has one socket per worker: each goes under the listener's name.
    let mut names: Vec<String> = Vec::new();
    let mut fds: Vec<BorrowedFd<'_>> = Vec::new();
    for l in listeners.iter() {
        for fd in l.socket.fds() {
            names.push(l.name.clone());
            fds.push(fd);
        }
    }
    names.push(CONTROL_NAME.to_string());
    fds.push(control_socket);
    if let Some(admin) = controller.shared().admin_socket.get() {
        names.push(ADMIN_NAME.to_string());
        fds.push(admin.as_fd());
    }
    if fds.len() > MAX_FDS {
        let mut c = conn;
        return c.write_all(
            format!("error: too many sockets to hand over ({})\n", fds.len()).as_bytes(),
        );
    }
    let offer = json!({ "names": names, "ticket_keys": tickets::EXPORT_VERSION });
    let payload = format!("{offer}\n");
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other("ancillary buffer too small"));
    }
    rustix::net::sendmsg(
        conn,
        &[IoSlice::new(payload.as_bytes())],
        &mut control,
        SendFlags::empty(),
    )?;
    tracing::info!(
        "takeover: handed {} socket(s) to a new process; waiting for it to serve",
        fds.len()
    );
    conn.set_read_timeout(Some(TAKEOVER_TIMEOUT))?;
    let mut reader = conn;
    // The new process waits for the keys before it says anything else, so a line read here
    // never takes bytes of the next one.
    let mut answer = read_line(&mut reader);
    for _ in 0..MAX_REQUESTS {
        match &answer {
            Ok(line) if line.trim() == KEYS_REQUEST => {
                let keys = tickets::shared_keys().export();
                if let Err(e) = (&*conn).write_all(&key_message(&keys)) {
                    tracing::warn!("takeover: cannot send the session-ticket keys: {e}");
                }
                answer = read_line(&mut reader);
            }
            _ => break,
        }
    }
    match answer {
        Ok(line) if line.trim() == "done" => {
            let _ = (&*conn).write_all(b"ok\n");
            controller
                .shared()
                .handed_over
                .store(true, Ordering::Relaxed);
            let _ = waker.wake();
            controller.send(Msg::HandedOver);
            Ok(())
        }
        Ok(line) => {
            tracing::warn!("takeover: the new process said {line:?}; carrying on");
            Ok(())
        }
        Err(e) => {
            tracing::warn!("takeover: the new process did not confirm ({e}); carrying on");
            Ok(())
        }
    }
}

/// New process: asks the Quill behind `path` for its sockets. Keep the returned stream and pass
/// it to [`finish_takeover`] once serving. Every error names `path`; one that does not answer
/// within `IO_TIMEOUT` is said to be silent.
pub(crate) fn request_takeover(path: &Path) -> io::Result<(Vec<Inherited>, UnixStream)> {
    let shown = path.display();
    let mut conn = UnixStream::connect(path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot connect to {shown}: {e}")))?;
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    conn.set_write_timeout(Some(IO_TIMEOUT))?;
    conn.write_all(b"takeover\n")
        .map_err(|e| io::Error::new(e.kind(), format!("cannot ask {shown}: {e}")))?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match rustix::net::recvmsg(
            &conn,
            &mut [IoSliceMut::new(&mut buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the process behind {shown} did not answer within {} s",
                        IO_TIMEOUT.as_secs()
                    ),
                ))
            }
            Err(e) => {
                let e = io::Error::from(e);
                return Err(io::Error::new(e.kind(), format!("{shown}: {e}")));
            }
            Ok(got) => break got,
        }
    };
    if got.bytes == 0 {
        return Err(io::Error::other(format!(
            "the process behind {shown} closed the connection without answering"
        )));
    }
    let mut fds: Vec<OwnedFd> = Vec::new();
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = msg {
            fds.extend(received);
        }
    }
    let text = String::from_utf8_lossy(&buf[..got.bytes]);
    if let Some(msg) = text.strip_prefix("error: ") {
        return Err(io::Error::other(format!("{shown}: {}", msg.trim())));
    }
    let value: Value = serde_json::from_str(text.trim()).map_err(|e| {
        io::Error::other(format!("{shown}: unexpected answer {:?}: {e}", text.trim()))
    })?;
    let names: Vec<String> = value["names"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if fds.is_empty() || fds.len() != names.len() {
        return Err(io::Error::other(format!(
            "{shown}: received {} socket(s) for {} name(s)",
            fds.len(),
            names.len()
        )));
    }
    if value["ticket_keys"].as_u64() == Some(u64::from(tickets::EXPORT_VERSION)) {
        match receive_keys(&mut conn) {
            Ok(keys) => {
                tickets::install_shared(keys);
                tracing::info!("takeover: session-ticket keys received from {shown}");
            }
            Err(e) => tracing::warn!(
                "takeover: no session-ticket keys from {shown} ({e}); sessions of the old \
                 process will not resume here"
            ),
        }
    }
    let inherited = names
        .into_iter()
        .zip(fds)
        .map(|(name, fd)| Inherited {
            name: Some(name),
            fd,
        })
        .collect();
    Ok((inherited, conn))
}

/// The key message: `version(1) | length(4, big-endian) | keys`.
fn key_message(keys: &[u8]) -> Vec<u8> {
    let len = u32::try_from(keys.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(5 + keys.len());
    out.push(tickets::EXPORT_VERSION);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(keys);
    out
}

/// Reads one key message (see [`key_message`]): its keys' bytes.
fn read_key_message(r: &mut dyn Read) -> io::Result<Vec<u8>> {
    let mut head = [0u8; 5];
    r.read_exact(&mut head)?;
    let [version, len @ ..] = head;
    if version != tickets::EXPORT_VERSION {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "key message version {version}, not {}",
                tickets::EXPORT_VERSION
            ),
        ));
    }
    let len = u32::from_be_bytes(len);
    if len > MAX_KEYS_MESSAGE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("key message of {len} bytes"),
        ));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body)?;
    Ok(body)
}

/// New process: asks for the old process's generated ticket keys and reads them.
fn receive_keys(conn: &mut UnixStream) -> io::Result<tickets::TicketKeys> {
    conn.write_all(format!("{KEYS_REQUEST}\n").as_bytes())?;
    let body = read_key_message(conn)?;
    tickets::TicketKeys::import(&body)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "keys not understood"))
}

/// New process: tells the old one it serves now, so it drains.
pub(crate) fn finish_takeover(mut conn: UnixStream) {
    if let Err(e) = conn.write_all(b"done\n") {
        tracing::warn!("takeover: cannot tell the old process to drain: {e}");
        return;
    }
    let _ = read_line(&mut conn);
}

/// Reads one line (without its end), at most `MAX_ANSWER` bytes.
fn read_line(r: &mut dyn Read) -> io::Result<String> {
    let mut reader = BufReader::new(r.take(MAX_ANSWER as u64 + 1));
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line)?;
    if line.len() > MAX_ANSWER {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "command line too long",
        ));
    }
    String::from_utf8(line)
        .map(|s| s.trim_end_matches(['\n', '\r']).to_string())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "command is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_message_reads_back_and_a_bad_one_is_refused() {
        let msg = key_message(b"keys");
        assert_eq!(msg, b"\x01\x00\x00\x00\x04keys");
        assert_eq!(read_key_message(&mut &msg[..]).unwrap(), b"keys");
        assert!(read_key_message(&mut &msg[..6]).is_err());
        assert!(read_key_message(&mut &b"\x02\x00\x00\x00\x00"[..]).is_err());
        assert!(read_key_message(&mut &b"\x01\xff\xff\xff\xff"[..]).is_err());
    }
}
