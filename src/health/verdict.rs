//! The pure half of health checking: how a run of probe results turns into an up or down
//! decision (rise and fall), and how an HTTP status line is read. No sockets, no clock.

use crate::config::HealthCheck;

/// What one probe concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    /// Failed, with the reason in words (for the transition log line).
    Fail(String),
}

/// A health decision that changes the server's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// `fall` probes in a row failed on a server that was up.
    Down { failed: u32 },
    /// `rise` probes in a row passed on a server that was down.
    Up { passed: u32 },
}

/// Consecutive results of one server's probes. A pass clears the failures and a failure clears
/// the passes, so only an unbroken run counts towards `rise` or `fall`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Streak {
    passed: u32,
    failed: u32,
}

impl Streak {
    /// Adds one result for a server that is down (`is_down`) or not, and says whether the run
    /// is now long enough to change its state.
    pub fn record(&mut self, ok: bool, is_down: bool, check: &HealthCheck) -> Option<Transition> {
        if ok {
            self.passed = self.passed.saturating_add(1);
            self.failed = 0;
            (is_down && self.passed >= check.rise).then_some(Transition::Up {
                passed: self.passed,
            })
        } else {
            self.failed = self.failed.saturating_add(1);
            self.passed = 0;
            (!is_down && self.failed >= check.fall).then_some(Transition::Down {
                failed: self.failed,
            })
        }
    }
}

/// What the bytes received so far say about an HTTP status line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusLine {
    /// Not enough bytes yet (and nothing wrong so far).
    Incomplete,
    /// `HTTP/1.x NNN`, with NNN in 100..=599.
    Status(u16),
    /// Not an HTTP/1.x status line.
    Invalid,
}

const PREFIX: &[u8] = b"HTTP/1.";

/// Reads the status line at the start of `buf`. `eof`: the server has closed, so no more bytes
/// will come. Rejects as soon as the bytes cannot begin a status line, so a server speaking
/// another protocol fails at once instead of at the timeout.
pub fn parse_status_line(buf: &[u8], eof: bool) -> StatusLine {
    let n = buf.len().min(PREFIX.len());
    if buf[..n] != PREFIX[..n] {
        return StatusLine::Invalid;
    }
    let line = match buf.iter().position(|&b| b == b'\n') {
        Some(i) => &buf[..i],
        // "HTTP/1.1 200" and then a space or the end of the line: a longer line can still come.
        None if !eof && buf.len() < PREFIX.len() + 6 => return StatusLine::Incomplete,
        None if !eof => &buf[..PREFIX.len() + 6],
        None => buf,
    };
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    status_of(line).map_or(StatusLine::Invalid, StatusLine::Status)
}

/// The status of `HTTP/1.x NNN[ reason]`.
fn status_of(line: &[u8]) -> Option<u16> {
    let rest = line.strip_prefix(PREFIX)?;
    let (&minor, rest) = rest.split_first()?;
    let rest = rest.strip_prefix(b" ")?;
    if !minor.is_ascii_digit() || rest.len() < 3 {
        return None;
    }
    let (code, after) = rest.split_at(3);
    if !code.iter().all(u8::is_ascii_digit) || !(after.is_empty() || after[0] == b' ') {
        return None;
    }
    let code = code
        .iter()
        .fold(0u16, |acc, &d| acc * 10 + u16::from(d - b'0'));
    (100..=599).contains(&code).then_some(code)
}

/// The first bytes of an answer, printable, for a log line (at most 40 characters).
pub fn quote(buf: &[u8]) -> String {
    let line = buf.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut out: String = line
        .iter()
        .take(40)
        .map(|&b| match b {
            b' '..=b'~' => b as char,
            _ => '.',
        })
        .collect();
    if line.len() > 40 {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(rise: u32, fall: u32) -> HealthCheck {
        HealthCheck {
            rise,
            fall,
            ..HealthCheck::default()
        }
    }

    #[test]
    fn fall_failures_in_a_row_take_an_up_server_down() {
        let c = check(2, 3);
        let mut s = Streak::default();
        assert_eq!(s.record(false, false, &c), None);
        assert_eq!(s.record(false, false, &c), None);
        assert_eq!(s.record(true, false, &c), None, "a pass breaks the run");
        assert_eq!(s.record(false, false, &c), None);
        assert_eq!(s.record(false, false, &c), None);
        assert_eq!(
            s.record(false, false, &c),
            Some(Transition::Down { failed: 3 })
        );
        // Already down: more failures change nothing.
        assert_eq!(s.record(false, true, &c), None);
    }

    #[test]
    fn rise_passes_in_a_row_bring_a_down_server_up() {
        let c = check(2, 3);
        let mut s = Streak::default();
        assert_eq!(s.record(false, true, &c), None);
        assert_eq!(s.record(true, true, &c), None);
        assert_eq!(s.record(false, true, &c), None, "a failure breaks the run");
        assert_eq!(s.record(true, true, &c), None);
        assert_eq!(s.record(true, true, &c), Some(Transition::Up { passed: 2 }));
        // Up: passes change nothing.
        assert_eq!(s.record(true, false, &c), None);
    }

    #[test]
    fn rise_and_fall_of_one_act_on_the_first_result() {
        let c = check(1, 1);
        let mut s = Streak::default();
        assert_eq!(
            s.record(false, false, &c),
            Some(Transition::Down { failed: 1 })
        );
        assert_eq!(s.record(true, true, &c), Some(Transition::Up { passed: 1 }));
    }

    #[test]
    fn status_lines() {
        let cases: &[(&[u8], bool, StatusLine)] = &[
            (b"HTTP/1.1 200 OK\r\n", false, StatusLine::Status(200)),
            (
                b"HTTP/1.0 503 Service Unavailable\r\nX: y\r\n",
                false,
                StatusLine::Status(503),
            ),
            (b"HTTP/1.1 204\r\n", false, StatusLine::Status(204)),
            (b"HTTP/1.1 301 ", false, StatusLine::Status(301)),
            (b"HTTP/1.1 404", true, StatusLine::Status(404)),
            (b"HTTP/1.1 200 OK\n", false, StatusLine::Status(200)),
            (b"", false, StatusLine::Incomplete),
            (b"HTT", false, StatusLine::Incomplete),
            (b"HTTP/1.1 20", false, StatusLine::Incomplete),
            (b"HTTP/1.1 200", false, StatusLine::Incomplete),
            (b"HTTP/1.1 20", true, StatusLine::Invalid),
            (b"", true, StatusLine::Invalid),
            (b"SSH-2.0-OpenSSH_9.6\r\n", false, StatusLine::Invalid),
            (b"X", false, StatusLine::Invalid),
            (b"HTTP/2 200\r\n", false, StatusLine::Invalid),
            (b"HTTP/1.1 2000\r\n", false, StatusLine::Invalid),
            (b"HTTP/1.1 abc\r\n", false, StatusLine::Invalid),
            (b"HTTP/1.1 099\r\n", false, StatusLine::Invalid),
            (b"HTTP/1.1 600\r\n", false, StatusLine::Invalid),
            (b"HTTP/1.x 200\r\n", false, StatusLine::Invalid),
            (b"HTTP/1.1  200\r\n", false, StatusLine::Invalid),
        ];
        for (bytes, eof, want) in cases {
            assert_eq!(
                parse_status_line(bytes, *eof),
                *want,
                "{:?} eof={eof}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    #[test]
    fn quoted_answers_are_short_and_printable() {
        assert_eq!(quote(b"SSH-2.0\r\nmore"), "SSH-2.0");
        assert_eq!(quote(b"a\rb"), "a.b");
        assert_eq!(quote(&[0u8, 1, 2]), "...");
        assert_eq!(quote(&[b'a'; 50]), format!("{}...", "a".repeat(40)));
    }
}
