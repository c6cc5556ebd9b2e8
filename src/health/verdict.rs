//! The pure half of health checking: how a run of probe results turns into an up or down
//! decision (rise and fall), and how an answer is quoted in a log line. No sockets, no clock.
//! (The status line itself is read by `quill_core::http1::status_code`.)

use crate::config::HealthCheck;

/// What one probe concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    Pass,
    /// Failed, with the reason in words (for the transition log line).
    Fail(String),
}

/// A health decision that changes the server's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Transition {
    /// `fall` probes in a row failed on a server that was up.
    Down { failed: u32 },
    /// `rise` probes in a row passed on a server that was down.
    Up { passed: u32 },
}

/// Consecutive results of one server's probes. A pass clears the failures and a failure clears
/// the passes, so only an unbroken run counts towards `rise` or `fall`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Streak {
    passed: u32,
    failed: u32,
}

impl Streak {
    /// Adds one result for a server that is down (`is_down`) or not, and says whether the run
    /// is now long enough to change its state.
    pub(super) fn record(
        &mut self,
        ok: bool,
        is_down: bool,
        check: &HealthCheck,
    ) -> Option<Transition> {
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

/// The first bytes of an answer, printable, for a log line (at most 40 characters).
pub(super) fn quote(buf: &[u8]) -> String {
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
    fn quoted_answers_are_short_and_printable() {
        assert_eq!(quote(b"SSH-2.0\r\nmore"), "SSH-2.0");
        assert_eq!(quote(b"a\rb"), "a.b");
        assert_eq!(quote(&[0u8, 1, 2]), "...");
        assert_eq!(quote(&[b'a'; 50]), format!("{}...", "a".repeat(40)));
    }
}
