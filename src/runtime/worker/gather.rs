//! Moving kept-alive HTTP clients between workers (`concentrate`, see `runtime::balance`): the
//! first `Shared::accepting` workers accept clients; a worker past them lets go of its
//! listeners and hands each plain HTTP client, between two requests, to the least loaded
//! accepting worker; an accepting worker that holds clearly more than another (as at accept:
//! `SPREAD_SLACK` plus an eighth) hands clients over the same way. The client's socket moves
//! with its session, its place under `-x` and its address's count: nothing of it is closed or
//! counted again, and its next request is read by the worker it moved to.

use std::sync::atomic::Ordering;

use std::sync::Arc;

use super::admit::SPREAD_SLACK;
use super::Worker;
use crate::proxy::Session;
use crate::state::permit::SessionPermit;
use crate::state::shared::{Listener, Request, SourceSlot};

/// A session on its way to another worker, with its place under `-x` and its address's count
/// (in `Request::Move`).
pub(super) struct Moved {
    session: Session,
    permit: Option<SessionPermit>,
    source: Option<SourceSlot>,
    listener: Arc<Listener>,
}

impl Worker {
    /// Follows `Shared::accepting`: registers or lets go of the listeners, and when this worker
    /// no longer accepts, hands over every client that can move now (the others move when their
    /// current request is done).
    pub(super) fn follow_accepting(&mut self) {
        let want = self.id < self.accepting_n;
        if want == self.accepting || self.draining {
            return;
        }
        self.accepting = want;
        for i in 0..self.listeners.len() {
            if self.listeners[i].paused_until != 0 {
                // Resumed (or not) when its pause ends.
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
                self.gather(idx);
            }
        }
    }

    /// The worker a client of this one should move to, if any: the least loaded accepting one
    /// when this one does not accept, or when this one holds clearly more than it.
    fn gather_target(&self) -> Option<usize> {
        let loads = &self.shared.loads;
        let n = self.accepting_n.min(loads.len());
        let (theirs, target) = (0..n)
            .filter(|&i| i != self.id)
            .map(|i| (loads[i].get(), i))
            .min()?;
        if !self.accepting {
            return Some(target);
        }
        let mine = loads[self.id].get();
        (mine > theirs + SPREAD_SLACK + mine / 8).then_some(target)
    }

    /// Hands session `idx` to another worker if it can move (a plain HTTP client between two
    /// requests) and should ([`Worker::gather_target`]). True when it went.
    pub(super) fn gather(&mut self, idx: usize) -> bool {
        if self.draining {
            return false;
        }
        let listener = match self.slots.get(idx).and_then(|s| s.session.as_ref()) {
            Some(s) => match s.movable() {
                Some(l) => l.clone(),
                None => return false,
            },
            None => return false,
        };
        let Some(target) = self.gather_target() else {
            return false;
        };
        let shared = self.shared.clone();
        let Some(waker) = shared.wakers.get().and_then(|w| w.get(target)) else {
            return false;
        };
        let was_empty = {
            let mut inbox = shared.inboxes[target]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let Some(queue) = inbox.as_mut() else {
                // That worker has stopped.
                return false;
            };
            let source = self.slots[idx].source.take();
            let Some((mut session, permit)) = self.free_slot(idx) else {
                return false;
            };
            session.detach(self.poll.registry());
            shared.loads[target].pending.fetch_add(1, Ordering::Relaxed);
            queue.push(Request::Move(Box::new(Moved {
                session,
                permit,
                source,
                listener,
            })));
            queue.len() == 1
        };
        crate::metrics::Counters::add(&self.counters().moved, 1);
        if was_empty {
            if let Err(e) = waker.wake() {
                tracing::warn!("worker {}: cannot wake worker {target}: {e}", self.id);
            }
        }
        true
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
            listener,
        } = *m;
        let (idx, gen) = self.place(session, permit, source, &listener);
        self.call(idx, gen, now, |s, cx| s.attach(cx));
    }
}
