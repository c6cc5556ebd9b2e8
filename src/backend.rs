//! Who is in a pool and whether they can take work: each server's live state (sessions, blacklist)
//! in atomics shared by all workers, and the pool snapshot a listener swaps atomically on change.
//!
//! Never connects or probes: workers report connect outcomes here.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::addr::{BackendAddr, ServerSpec};
use crate::balancer::{ClientTable, Cursor, Mode, ServerSet};
use crate::clock::millis;
use crate::config::{ListenerConfig, Tuning};

/// One server's live state.
#[derive(Debug)]
pub struct Server {
    pub spec: ServerSpec,
    /// Sessions using (or connecting to) this server now.
    pub sessions: AtomicU64,
    /// Until when (clock ms) the server is skipped; 0 = not blacklisted.
    blacklisted_until: AtomicU64,
    /// Sessions ever sent here, and connects that failed.
    pub total: AtomicU64,
    pub failures: AtomicU64,
}

impl Server {
    pub fn new(spec: ServerSpec) -> Server {
        Server {
            spec,
            sessions: AtomicU64::new(0),
            blacklisted_until: AtomicU64::new(0),
            total: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        }
    }

    pub fn addr(&self) -> &BackendAddr {
        &self.spec.addr
    }

    pub fn is_blacklisted(&self, now_ms: u64) -> bool {
        self.blacklisted_until.load(Ordering::Relaxed) > now_ms
    }

    /// Skips this server until `now_ms + d`.
    pub fn blacklist(&self, now_ms: u64, d: Duration) {
        self.blacklisted_until
            .store(now_ms.saturating_add(millis(d)), Ordering::Relaxed);
    }

    /// Pen's availability rule: not blacklisted, and under MAXCONN, or, for a client tracked to this
    /// server, under HARD (0 = no limit).
    pub fn is_available(&self, tracked: bool, now_ms: u64) -> bool {
        if self.is_blacklisted(now_ms) {
            return false;
        }
        let sessions = self.sessions.load(Ordering::Relaxed);
        let limit = if tracked && self.spec.hard > 0 {
            self.spec.hard
        } else {
            self.spec.max
        };
        limit == 0 || sessions < u64::from(limit)
    }

    pub fn session_started(&self) {
        self.sessions.fetch_add(1, Ordering::Relaxed);
        self.total.fetch_add(1, Ordering::Relaxed);
    }

    pub fn session_ended(&self) {
        self.sessions.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A listener's pool as the data path sees it: servers, emergency server, mode and tuning. Swapped
/// whole when the configuration changes; sessions keep the snapshot they started with.
#[derive(Debug)]
pub struct Pool {
    pub name: String,
    pub mode: Mode,
    pub tuning: Tuning,
    pub servers: Vec<Arc<Server>>,
    pub emergency: Option<Arc<Server>>,
    pub cursor: Cursor,
    pub clients: ClientTable,
}

impl Pool {
    /// Builds a pool from its configuration; `now_ms` starts initial blacklists.
    pub fn from_config(l: &ListenerConfig, now_ms: u64) -> Pool {
        let servers: Vec<Arc<Server>> = l
            .servers
            .iter()
            .cloned()
            .map(|s| Arc::new(Server::new(s)))
            .collect();
        for (i, d) in &l.initial_blacklist {
            if let Some(s) = servers.get(*i) {
                s.blacklist(now_ms, *d);
            }
        }
        let emergency = l.emergency.clone().map(|addr| {
            Arc::new(Server::new(ServerSpec {
                addr,
                max: 0,
                hard: 0,
                weight: 1,
                prio: 0,
            }))
        });
        Pool {
            name: l.name.clone(),
            mode: l.mode,
            tuning: l.tuning.clone(),
            servers,
            emergency,
            cursor: Cursor::default(),
            clients: ClientTable::new(l.tuning.clients_max),
        }
    }
}

impl ServerSet for Pool {
    fn len(&self) -> usize {
        self.servers.len()
    }

    fn is_available(&self, i: usize, tracked: bool, now_ms: u64) -> bool {
        self.servers[i].is_available(tracked, now_ms)
    }

    fn load(&self, i: usize) -> u64 {
        self.servers[i].sessions.load(Ordering::Relaxed)
    }

    fn weight(&self, i: usize) -> u32 {
        self.servers[i].spec.weight
    }

    fn prio(&self, i: usize) -> u32 {
        self.servers[i].spec.prio
    }
}
