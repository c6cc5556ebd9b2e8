//! `quill ctl`: sends one command line to a control socket (Unix or TCP) and returns the reply.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{TokenError, TokenFile, DEFAULT_SOCKET};

/// Why `quill ctl` failed (exit status 1).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CtlError {
    #[error("quill ctl: no command given (try 'servers')")]
    NoCommand,
    #[error(transparent)]
    Token(#[from] TokenError),
    #[error("cannot reach control socket {at}: {source}")]
    Unreachable { at: String, source: io::Error },
    #[error("control socket {at}: {source}")]
    Exchange { at: String, source: io::Error },
    /// The server's error reply, without its `error: `.
    #[error("{0}")]
    Refused(String),
}

/// `quill ctl`: sends one command, returns the reply to print; an error when the reply is one or
/// the socket cannot be reached. With a token file (`--token-file`, else `$QUILL_TOKEN_FILE`), a
/// line to a TCP control socket starts with `auth TOKEN` (the Unix socket needs none).
pub(crate) fn client(
    socket: Option<&str>,
    json: bool,
    token_file: Option<&Path>,
    words: &[String],
) -> Result<String, CtlError> {
    if words.is_empty() {
        return Err(CtlError::NoCommand);
    }
    let target = socket
        .map(str::to_string)
        .or_else(|| std::env::var("QUILL_SOCKET").ok())
        .unwrap_or_else(|| DEFAULT_SOCKET.to_string());
    let mut line = words.join(" ");
    if json {
        line = format!("json {line}");
    }
    line.push('\n');
    let is_tcp = !target.contains('/')
        && !Path::new(&target).exists()
        && (target.parse::<u16>().is_ok() || target.contains(':'));
    let token_file = token_file
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("QUILL_TOKEN_FILE").map(PathBuf::from));
    if let (true, Some(file)) = (is_tcp, token_file) {
        let mut token = TokenFile::default();
        token.load(&file)?;
        let token = token.token.unwrap_or_default();
        line = format!("auth {} {line}", String::from_utf8_lossy(&token));
    }
    let reply = if !is_tcp {
        let mut s = UnixStream::connect(&target).map_err(|source| CtlError::Unreachable {
            at: target.clone(),
            source,
        })?;
        exchange(&mut s, &line)
    } else {
        let addr = if target.contains(':') {
            target.clone()
        } else {
            format!("127.0.0.1:{target}")
        };
        let mut s = TcpStream::connect(&addr)
            .map_err(|source| CtlError::Unreachable { at: addr, source })?;
        exchange(&mut s, &line)
    }
    .map_err(|source| CtlError::Exchange { at: target, source })?;
    let is_error = reply.starts_with("error: ")
        || (json
            && serde_json::from_str::<Value>(reply.trim()).is_ok_and(|v| v.get("error").is_some()));
    if is_error {
        let message = reply.trim_end().trim_start_matches("error: ");
        Err(CtlError::Refused(message.to_string()))
    } else {
        Ok(reply)
    }
}

fn exchange(s: &mut (impl Read + Write), line: &str) -> io::Result<String> {
    s.write_all(line.as_bytes())?;
    let mut reply = String::new();
    s.read_to_string(&mut reply)?;
    Ok(reply)
}
