//! The HTTP session's one deadline ([`HttpSession::deadline`]: header, keep-alive, connect,
//! response, body and tunnel timeouts, and a drain's grace) and the drain of a worker as the
//! session sees it.

use super::exchange::Answer;
use super::request::settings;
use super::HttpSession;
use crate::clock::millis;
use crate::metrics::End;
use crate::proxy::{Ctx, Step, NEVER};

impl HttpSession {
    /// The worker drains (see [`crate::proxy::Session::drain`]): a busy client gets `Connection: close`
    /// on its current response and is closed after it; an idle one is kept for one more request
    /// until `close_at` (kept alive) or `grace_end` (no request yet), and the new deadline is
    /// returned.
    pub(crate) fn drain(&mut self, close_at: u64, grace_end: u64) -> Option<u64> {
        self.draining = true;
        let idle = self.ex.is_none()
            && self.file.is_none()
            && self.cgi.is_none()
            && self.head_since.is_none()
            && !self.input.has_unparsed();
        // A busy client that is not told to close (its response began before the drain) gets
        // the whole grace for its next request, as does a client that has not sent one yet.
        self.drain_close_ms = if idle && self.requests > 0 {
            close_at
        } else {
            grace_end
        };
        idle.then(|| self.deadline())
    }

    /// A drain's grace for this idle client is over. A last read first: a request that came in
    /// just now is answered (with `Connection: close`) rather than lost with the connection;
    /// otherwise it is closed (nothing begun, nothing lost).
    pub(super) fn close_drained(&mut self, cx: &mut Ctx) -> Step {
        self.drain_close_ms = NEVER;
        self.client_ready.readable = true;
        match self.step(cx) {
            Step::Wait(_) if self.ex.is_none() && !self.input.has_unparsed() => {
                Step::Close(End::Done)
            }
            step => step,
        }
    }

    /// The session's one deadline.
    pub(super) fn deadline(&self) -> u64 {
        let s = settings(&self.pool);
        if let Some(run) = &self.cgi {
            return run.deadline(s.body_timeout);
        }
        if let Some(f) = &self.file {
            if s.body_timeout.is_zero() {
                return NEVER;
            }
            return f.active_ms.saturating_add(millis(s.body_timeout));
        }
        let Some(ex) = &self.ex else {
            if let Some(since) = self.head_since {
                return since.saturating_add(millis(s.header_timeout));
            }
            let limit = if self.requests == 0 {
                s.header_timeout
            } else {
                s.keepalive_timeout
            };
            return self
                .idle_since
                .saturating_add(millis(limit))
                .min(self.drain_close_ms);
        };
        if !ex.connector.is_connected() {
            return ex.connector.deadline();
        }
        if ex.answer == Answer::Tunnel {
            if s.tunnel_timeout.is_zero() {
                return NEVER;
            }
            return ex.active_ms().saturating_add(millis(s.tunnel_timeout));
        }
        if ex.awaits_response() {
            return ex.sent_ms().saturating_add(millis(s.response_timeout));
        }
        if s.body_timeout.is_zero() {
            return NEVER;
        }
        ex.active_ms().saturating_add(millis(s.body_timeout))
    }

    pub(super) fn wait(&self) -> Step {
        Step::Wait(self.deadline())
    }
}
