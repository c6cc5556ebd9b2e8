//! The worker's access log files: reopened when the log generation moves on, and the lines of
//! refused clients and of TCP sessions.

use std::sync::atomic::Ordering;

use super::Worker;
use crate::log::HttpEntry;
use crate::log::{AccessLog, Entry};
use crate::metrics::End;
use crate::net::ClientAddr;
use crate::state::shared::Listener;

impl Worker {
    /// Reopens every access log file after the log generation moved on (SIGUSR2, `reopen`, a
    /// reload), opening the files of a new plan and closing those it no longer names; open
    /// sessions then write to their listener's file in the new plan (a session of a listener
    /// the change removed keeps its file if the plan still has it with the same format).
    pub(super) fn follow_log(&mut self) {
        let generation = self.shared.log_generation.load(Ordering::Relaxed);
        if generation == self.log_generation {
            return;
        }
        self.log_generation = generation;
        let plan = self
            .shared
            .access_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for log in self.logs.iter_mut().flatten() {
            log.flush();
        }
        self.logs = plan
            .files
            .iter()
            .map(|(path, format)| match AccessLog::open(path, *format) {
                Ok(log) => Some(log),
                Err(e) => {
                    tracing::warn!("cannot open access log {}: {e}", path.display());
                    None
                }
            })
            .collect();
        if plan != self.log_plan {
            let listeners = self.shared.listeners.load();
            let by_id: std::collections::HashMap<u64, Option<u32>> = listeners
                .iter()
                .map(|l| (l.id, plan.file_of(&l.name)))
                .collect();
            let old = &self.log_plan;
            for slot in self.slots.iter_mut().filter(|s| s.session.is_some()) {
                slot.log = match by_id.get(&slot.listener) {
                    Some(&log) => log,
                    None => slot
                        .log
                        .and_then(|i| old.files.get(i as usize))
                        .and_then(|f| plan.files.iter().position(|g| g == f))
                        .map(|i| i as u32),
                };
            }
            self.log_plan = plan;
        }
    }

    /// A client refused at accept: a session line on a TCP listener, a request line without a
    /// request on an HTTP one (one format per listener in the file).
    pub(super) fn log_refused(
        &mut self,
        peer: &ClientAddr,
        end: End,
        http: bool,
        listener: &Listener,
    ) {
        let log = self.log_plan.file_of(&listener.name);
        self.log_refused_to(log, peer, end, http);
    }

    /// [`Self::log_refused`] into access log file `log` (None: not logged).
    pub(super) fn log_refused_to(
        &mut self,
        log: Option<u32>,
        peer: &ClientAddr,
        end: End,
        http: bool,
    ) {
        if !http {
            return self.log_line(log, peer, None, 0, 0, 0, end);
        }
        if let Some(log) = self.log_file(log) {
            log.write_http(&HttpEntry {
                client_ip: peer,
                unix_time: crate::clock::unix_time(),
                text: &[],
                lens: [0; 5],
                generated_id: &[],
                status: 0,
                source: crate::metrics::Source::Quill,
                range: None,
                bytes_in: 0,
                bytes_out: 0,
                server: None,
                route: None,
                client_cert: None,
                connect_us: None,
                first_byte_us: None,
                total_us: 0,
                end,
            });
        }
    }

    /// Access log file `i` of this worker, if it logs there and the file is open.
    fn log_file(&mut self, i: Option<u32>) -> Option<&mut AccessLog> {
        self.logs.get_mut(i? as usize)?.as_mut()
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn log_line(
        &mut self,
        log: Option<u32>,
        peer: &ClientAddr,
        server: Option<&dyn std::fmt::Display>,
        up: u64,
        down: u64,
        ms: u64,
        end: End,
    ) {
        if let Some(log) = self.log_file(log) {
            log.write(&Entry {
                client_ip: peer,
                unix_time: crate::clock::unix_time(),
                server,
                bytes_in: up,
                bytes_out: down,
                duration_ms: ms,
                end,
            });
        }
    }
}
