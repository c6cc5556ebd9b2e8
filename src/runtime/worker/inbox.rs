//! The worker's inbox: the control thread's requests (a report of the sessions, closing one)
//! and the clients other workers handed over (accepted, or moved between requests).

use std::sync::atomic::Ordering;

use super::Worker;
use crate::metrics::End;
use crate::state::shared::{Report, Request};

impl Worker {
    /// Answers the control thread, and opens (or carries on) the clients other workers handed
    /// over.
    pub(super) fn answer(&mut self, now: u64) {
        let requests = self.shared.inboxes[self.id]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        for r in requests {
            match r {
                Request::Report(reply) => {
                    let mut sessions: Vec<_> = self
                        .slots
                        .iter()
                        .filter_map(|slot| slot.session.as_ref())
                        .map(|s| s.info(now))
                        .collect();
                    self.udp.report(now, &mut sessions);
                    // Clock milliseconds to Unix seconds (the clock started with the process).
                    let started = self.shared.started_unix;
                    let recent = self
                        .recent
                        .iter()
                        .map(|&(ip, ms)| (ip, started + ms / 1000))
                        .collect();
                    let _ = reply.send(Report { sessions, recent });
                }
                Request::Close(id, reply) => {
                    let found = self
                        .slots
                        .iter()
                        .position(|slot| slot.session.as_ref().is_some_and(|s| s.id() == id));
                    if let Some(idx) = found {
                        self.close(idx, End::Closed, now);
                    }
                    let flow = found.is_none() && {
                        let mut cx = udp_cx!(self, now);
                        self.udp.close_id(id, &mut cx)
                    };
                    let _ = reply.send(found.is_some() || flow);
                }
                Request::Adopt(listener, stream, peer) => {
                    self.shared.loads[self.id]
                        .pending
                        .fetch_sub(1, Ordering::Relaxed);
                    self.open(&listener, stream, peer, now);
                }
                Request::Move(moved) => {
                    self.shared.loads[self.id]
                        .pending
                        .fetch_sub(1, Ordering::Relaxed);
                    self.take_moved(moved, now);
                }
            }
        }
    }

    /// Closes the inbox unless a client handed over waits in it (then the worker stays to take
    /// it: it was woken for it). Under the inbox's lock, so no client is handed over after this
    /// looked.
    pub(super) fn close_inbox(&self) -> bool {
        let mut inbox = self.shared.inboxes[self.id]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if inbox.as_ref().is_some_and(|q| {
            q.iter()
                .any(|r| matches!(r, Request::Adopt(..) | Request::Move(..)))
        }) {
            return false;
        }
        drop(inbox.take());
        true
    }
}
