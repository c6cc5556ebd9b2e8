//! A request answered from a static root (docs/web.md): the session asks `web::serve` for the
//! answer, then sends it over as many turns as the client's socket needs, and logs and counts it
//! as its answer with the source `file` (and the range a 206 served).

use std::sync::Arc;

use quill_core::http1::{self, FieldIndex};

use super::log;
use super::request::route_stats;
use super::HttpSession;
use crate::log::Served;
use crate::metrics::{End, Source};
use crate::proxy::{Ctx, Step};
use crate::route::StaticRoot;
use crate::web::send::{Sending, Sent};
use crate::web::{readahead, serve};

/// A file response in flight.
#[derive(Debug)]
pub(super) struct FileOut {
    sending: Sending,
    status: u16,
    route: u32,
    keep: bool,
    range: Option<Served>,
    /// Clock ms of the last progress (body_timeout runs from it).
    pub(super) active_ms: u64,
    /// A cold range of the file is being read off the worker (`web::readahead`): the send
    /// waits for the worker's wake.
    reading: bool,
}

impl FileOut {
    pub(super) fn release(&mut self, pools: &mut crate::proxy::copy::Pools) {
        self.sending.release(pools);
    }

    /// The cold range it waited for is read: true if it was waiting.
    pub(super) fn read_done(&mut self) -> bool {
        if !std::mem::take(&mut self.reading) {
            return false;
        }
        self.sending.read_done();
        true
    }
}

impl HttpSession {
    /// Answers the request whose head is parsed in the input from the static root of route
    /// `route`; `keep` says whether the connection may carry another request after it.
    pub(super) fn serve_static(
        &mut self,
        head: &http1::RequestHead,
        fields: &FieldIndex,
        root: &Arc<StaticRoot>,
        route: usize,
        keep: bool,
        cx: &mut Ctx,
    ) -> Result<(), Step> {
        let buf = self.input.unparsed();
        let field = |name: &[u8]| fields.value(buf, name);
        let req = serve::Request {
            method: head.method,
            target: head.target.of(buf),
            field: &field,
            keep_alive: keep,
            now_s: crate::clock::unix_time() as i64,
        };
        let boundary = cx.rand();
        let date = cx.files.date();
        let answer = serve::answer(
            root,
            &req,
            &mut cx.files.cache,
            cx.now,
            &date,
            cx.pools.buffer(),
            boundary,
        );
        cx.counters.publish_file_cache(cx.files.cache.counts());
        // Past the request head: what follows is the next request (a body, which a GET or HEAD
        // does not have, closes the connection after the answer: `keep` is false then).
        self.input.fed += head.len as u32;
        self.input.fwd = self.input.fed;
        self.file = Some(Box::new(FileOut {
            sending: answer.sending,
            status: answer.status,
            route: route as u32,
            keep: keep && answer.status != 500,
            range: answer.range,
            active_ms: cx.now,
            reading: false,
        }));
        self.drive_file(cx).map(|_| ())
    }

    /// Sends more of the file response. Ok(true) when it is complete and the next request may
    /// be read; Ok(false) when the client's socket is full.
    pub(super) fn drive_file(&mut self, cx: &mut Ctx) -> Result<bool, Step> {
        let Some(out) = self.file.as_mut() else {
            return Ok(true);
        };
        if out.reading {
            return Ok(false);
        }
        let before = out.sending.sent;
        let pumped = out
            .sending
            .pump(&self.client, &mut self.client_ready, cx.pools);
        if out.sending.sent != before {
            out.active_ms = cx.now;
        }
        if let (Some((from, len)), Some(rep)) =
            (out.sending.take_prefetch(), out.sending.rep().cloned())
        {
            // Read ahead while this range goes out; its wake finds the session not waiting.
            let _ = readahead::submit(readahead::Job {
                rep,
                from,
                len,
                token: cx.client_token,
                mailbox: cx.mailbox.clone(),
            });
        }
        match pumped {
            Ok(Sent::Complete) => {}
            Ok(Sent::Blocked) => return Ok(false),
            Ok(Sent::Yielded) => return Err(Step::Again),
            Ok(Sent::Cold) => {
                let (Some(rep), Some((from, len))) =
                    (out.sending.rep().cloned(), out.sending.cold_range())
                else {
                    out.sending.read_done();
                    return Err(Step::Again);
                };
                let job = readahead::Job {
                    rep,
                    from,
                    len,
                    token: cx.client_token,
                    mailbox: cx.mailbox.clone(),
                };
                return match readahead::submit(job) {
                    Ok(()) => {
                        out.reading = true;
                        Ok(false)
                    }
                    // No reader thread: send it anyway (waiting on the disk).
                    Err(_) => {
                        out.sending.read_done();
                        Err(Step::Again)
                    }
                };
            }
            Err(e) => {
                tracing::debug!("{}: file response: {e}", self.addr.to_string_with_port());
                self.end_file(End::ClientReset, cx);
                // Part of the response went: the client must not take it for a whole one.
                self.client.reset_on_close();
                return Err(Step::Close(End::ClientReset));
            }
        }
        let keep = self.file.as_ref().is_some_and(|f| f.keep);
        self.end_file(End::Done, cx);
        if keep {
            Ok(true)
        } else {
            Err(Step::Close(End::Done))
        }
    }

    /// The file response is over (sent, or cut by `end`): counted, logged, buffers given back.
    pub(super) fn end_file(&mut self, end: End, cx: &mut Ctx) {
        let Some(mut out) = self.file.take() else {
            return;
        };
        out.sending.release(cx.pools);
        let sent = out.sending.sent;
        self.bytes_out += sent;
        self.requests += 1;
        let route = Some(out.route);
        cx.counters.http_request(
            &self.listener.http,
            route_stats(&self.pool, route),
            out.status,
            None,
        );
        self.record(
            log::Line {
                status: out.status,
                source: Source::File,
                range: out.range,
                bytes: (0, sent),
                ex: None,
                route,
                end,
            },
            cx,
        );
        self.input.settle(cx.pools);
        self.idle_since = cx.now;
    }
}
