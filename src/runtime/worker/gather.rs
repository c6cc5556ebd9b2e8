//! Moving kept-alive HTTP clients between workers (`concentrate`, see `runtime::balance`): the
//! first `Shared::accepting` workers accept clients; a worker past them lets go of its
//! listeners and hands each plain HTTP client, between two requests, to the least loaded
//! accepting worker; an accepting worker that holds clearly more than another (as at accept:
//! `SPREAD_SLACK` plus an eighth) hands clients over the same way. The client's socket moves
//! with its session, its place under `-x` and its address's count: nothing of it is closed or
//! counted again, and its next request is read by the worker it moved to.

use super::Worker;
use crate::proxy::Session;
use crate::state::permit::SessionPermit;
use crate::state::shared::{Request, SourceSlot};

/// A session on its way to another worker, with its place under `-x` and its address's count
/// (in `Request::Move`).
pub(super) struct Moved {
    session: Session,
    permit: Option<SessionPermit>,
    source: Option<SourceSlot>,
}

impl Worker {
    /// Follows `Shared::accepting`: registers or lets go of the listeners, and when this worker
    /// no longer accepts, hands over every client that can move now (the others move when their
    /// current request is done).
    pub(super) fn follow_accepting(&mut self, now: u64) {
        let want = self.id < self.accepting_n;
        if want == self.accepting || self.draining {
            return;
        }
        self.accepting = want;
        for i in 0..self.listeners.len() {
            let w = &self.listeners[i];
            if w.paused_until != 0 || w.pinned || w.own {
                // Resumed (or not) when its pause ends; a pinned one, or one whose sockets are
                // this worker's own, is always taken.
                continue;
            }
            if want {
                if let Err(e) = self.register_listener(i) {
                    tracing::warn!("worker {}: cannot register a listener: {e}", self.id);
                }
            } else {
                self.deregister_listener(i);
            }
        }
        if !want {
            for idx in 0..self.slots.len() {
                self.gather(idx, now);
            }
        }
    }

    /// Hands session `idx` to another worker if it can move (a plain HTTP client between two
    /// requests) and should ([`Worker::handover_target`]). True when it went.
    pub(super) fn gather(&mut self, idx: usize, now: u64) -> bool {
        if self.draining {
            return false;
        }
        let movable = self
            .slots
            .get(idx)
            .and_then(|s| s.session.as_ref())
            .is_some_and(Session::movable);
        if !movable {
            return false;
        }
        let Some(target) = self.handover_target() else {
            return false;
        };
        let open = self.shared.inboxes[target]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        if !open {
            // That worker has stopped.
            return false;
        }
        let source = self.slots[idx].source.take();
        let Some((mut session, permit)) = self.free_slot(idx) else {
            return false;
        };
        session.detach(self.poll.registry());
        let moved = Moved {
            session,
            permit,
            source,
        };
        match self.post(target, Request::Move(Box::new(moved))) {
            Ok(()) => {
                crate::metrics::Counters::add(&self.counters().moved, 1);
                true
            }
            Err(Request::Move(moved)) => {
                // That worker stopped since the look above: carried on here, as if moved
                // back (its inbox stays closed, so this happens at most once per session).
                self.take_moved(moved, now);
                true
            }
            // `post` gives back what it was given.
            Err(_) => true,
        }
    }

    /// Carries on a session another worker moved here (a [`Moved`]).
    pub(super) fn take_moved(&mut self, m: Box<dyn std::any::Any + Send>, now: u64) {
        let Ok(m) = m.downcast::<Moved>() else {
            tracing::error!("worker {}: a moved session of an unknown kind", self.id);
            return;
        };
        let Moved {
            session,
            permit,
            source,
        } = *m;
        let Some(listener) = session.listener().cloned() else {
            tracing::error!("worker {}: a moved session without its listener", self.id);
            return;
        };
        let (idx, gen) = self.place(session, permit, source, &listener);
        self.call(idx, gen, now, |s, cx| s.attach(cx));
    }
}
