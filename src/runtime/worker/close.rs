//! Ending a session: its slot freed, its permit, lease and counters given back, its line
//! logged; a session that panicked is reset alone.

use std::sync::atomic::Ordering;

use mio::Token;

use super::{token, Worker, CLIENT, GEN_MASK};
use crate::metrics::{Counters, End};
use crate::proxy::Session;
use crate::runtime::panics;
use crate::state::permit::SessionPermit;

impl Worker {
    /// Session `idx` panicked: it is logged and counted, and closed as [`End::Panic`] (client
    /// and server connections reset, buffers and lease given back, its server connection
    /// closed, never returned to the idle pool); the worker and its other sessions go on.
    pub(super) fn reset_panicked(&mut self, idx: usize, panic: &str, now: u64) {
        let id = self.slots[idx].session.as_ref().map_or(0, Session::id);
        tracing::error!(
            "worker {}: session {id} panicked; it is reset and every other session goes on: {panic}",
            self.id
        );
        self.close(idx, End::Panic, now);
    }

    /// Takes slot `idx`'s session and its permit out and frees the slot (a new generation, its
    /// source count and timer given back); None when it held none. The caller drops the permit
    /// when the session is done with.
    pub(super) fn free_slot(&mut self, idx: usize) -> Option<(Session, Option<SessionPermit>)> {
        let slot = &mut self.slots[idx];
        let s = slot.session.take()?;
        let permit = slot.permit.take();
        slot.gen = (slot.gen + 1) & GEN_MASK;
        slot.source = None;
        slot.timer.clear();
        self.free.push(idx as u32);
        self.live -= 1;
        self.publish_load();
        Some((s, permit))
    }

    pub(super) fn close(&mut self, idx: usize, end: End, now: u64) {
        let owner = token(idx, self.slots[idx].gen, CLIENT);
        let log = self.slots[idx].log;
        let Some((mut s, permit)) = self.free_slot(idx) else {
            return;
        };
        let http = matches!(s, Session::Http(_) | Session::H2(_));
        // An HTTP/2 stream's session: its requests are logged and counted as requests; the
        // connection's session counts the client, its bytes and its end.
        let stream = s.is_stream();
        let http_at_close = s.logs_http_at_close();
        let closed = panics::contain(|| s.close(end, &mut self.pools, &mut self.conns));
        if end == End::Panic {
            // Whatever server connection slot the session still held is freed: the connection
            // it named was closed with the session, never returned to the idle pool.
            self.conns.forget_owned_by(owner);
        }
        let c = match closed {
            Ok(c) => c,
            Err(panic) => return self.close_panicked(s, permit, owner, &panic),
        };
        // The lease (the server's count of this session) lives to the end of this call, since the
        // log line below names its server; dropping it there instead of ending it first saves an
        // Arc clone (a shared counter touched by every worker) per session.
        if let Some(lease) = &c.server {
            lease.server().count_bytes(c.bytes_in, c.bytes_out);
        }
        drop(permit);
        self.shared.last_busy_ms.store(now, Ordering::Relaxed);
        if stream {
            s.recycle_stream();
            return;
        }
        let counters = &self.shared.counters[self.id];
        counters.ended(end);
        Counters::add(&counters.bytes_in, c.bytes_in);
        Counters::add(&counters.bytes_out, c.bytes_out);
        let server_addr = c
            .server
            .as_ref()
            .map(|lease| lease.server().addr() as &dyn std::fmt::Display);
        tracing::debug!(
            "session {} -> {}: {} bytes in, {} bytes out, {}",
            c.client,
            server_addr.unwrap_or(&"-"),
            c.bytes_in,
            c.bytes_out,
            end.name()
        );
        if http_at_close {
            self.log_refused_to(log, &c.client, end, true);
        } else if !http {
            // HTTP sessions log each request instead.
            self.log_line(
                log,
                &c.client,
                server_addr,
                c.bytes_in,
                c.bytes_out,
                now.saturating_sub(c.started_ms),
                end,
            );
        }
    }

    /// A session panicked while it was being closed: it is dropped as it is (its sockets closed,
    /// its lease given back by their own drops) and counted; nothing of it is logged but the panic.
    fn close_panicked(
        &mut self,
        s: Session,
        permit: Option<SessionPermit>,
        owner: Token,
        panic: &str,
    ) {
        tracing::error!(
            "worker {}: session {} panicked while closing; dropped: {panic}",
            self.id,
            s.id()
        );
        if let Err(again) = panics::contain(move || drop(s)) {
            tracing::error!(
                "worker {}: dropping that session panicked too: {again}",
                self.id
            );
        }
        self.conns.forget_owned_by(owner);
        drop(permit);
        self.counters().ended(End::Panic);
    }
}
