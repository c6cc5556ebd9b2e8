//! Name resolution off the workers. socket-proxyd resolves its server's name for every connection;
//! getaddrinfo blocks (a slow DNS server can hold it for seconds), so a worker never calls it: it
//! hands the session's server to the threads here and goes on with its other sessions. The answer
//! comes back in the worker's queue, and the worker's waker makes it look.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;

use crate::addr::BackendAddr;
use crate::backend::Server;
use crate::state::shared::Shared;

/// Lookups that may run at once. A few, so that one name stuck on a dead DNS server does not hold
/// up every other session; more would only help with many slow names at once.
pub(crate) const THREADS: usize = 4;

/// Which session asked, and which of its attempts: an answer for an attempt that has moved on
/// (timed out, session closed, slot reused) is recognised and dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Key {
    pub idx: u32,
    pub gen: u32,
    pub seq: u32,
}

/// One lookup: the server whose `BackendAddr::Name` to resolve, for worker `worker`.
struct Job {
    worker: usize,
    key: Key,
    server: Arc<Server>,
}

/// The first address of the server's name (socket-proxyd uses the first result and no other).
#[derive(Debug)]
pub(crate) struct Answer {
    pub key: Key,
    pub result: io::Result<SocketAddr>,
}

/// The resolver threads' end of things, shared by the workers.
pub(crate) struct Resolver {
    jobs: mpsc::Sender<Job>,
    /// One queue per worker.
    answers: Vec<Mutex<Vec<Answer>>>,
    /// Lookups made since start (numbered in the debug log, so each session's lookup shows).
    lookups: AtomicU64,
}

impl Resolver {
    /// Starts `threads` resolver threads answering `workers` workers (woken through `shared`).
    pub(crate) fn start(
        shared: Arc<Shared>,
        workers: usize,
        threads: usize,
    ) -> io::Result<Arc<Resolver>> {
        let (tx, rx) = mpsc::channel::<Job>();
        let resolver = Arc::new(Resolver {
            jobs: tx,
            answers: (0..workers).map(|_| Mutex::new(Vec::new())).collect(),
            lookups: AtomicU64::new(0),
        });
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads.max(1) {
            let (rx, resolver, shared) = (rx.clone(), resolver.clone(), shared.clone());
            thread::Builder::new()
                .name(format!("quill-resolve-{i}"))
                .spawn(move || resolver.serve(&rx, &shared))?;
        }
        Ok(resolver)
    }

    /// Asks for `server`'s name on behalf of worker `worker`; never blocks.
    pub(crate) fn ask(&self, worker: usize, key: Key, server: Arc<Server>) {
        // The threads hold the receiver for the life of the process: sending cannot fail.
        let _ = self.jobs.send(Job {
            worker,
            key,
            server,
        });
    }

    /// Moves the answers waiting for worker `worker` into `out`.
    pub(crate) fn take_answers(&self, worker: usize, out: &mut Vec<Answer>) {
        if let Some(queue) = self.answers.get(worker) {
            out.append(&mut queue.lock().unwrap_or_else(|e| e.into_inner()));
        }
    }

    /// One thread: takes jobs until the process ends.
    fn serve(&self, jobs: &Mutex<mpsc::Receiver<Job>>, shared: &Shared) {
        loop {
            // Only one idle thread waits in recv; the others wait for the lock.
            let job = match jobs.lock().unwrap_or_else(|e| e.into_inner()).recv() {
                Ok(job) => job,
                Err(_) => return,
            };
            let result = resolve(job.server.addr());
            let n = self.lookups.fetch_add(1, Ordering::Relaxed) + 1;
            match &result {
                Ok(addr) => {
                    tracing::debug!("resolved {} to {addr} (lookup {n})", job.server.addr())
                }
                Err(e) => tracing::debug!("cannot resolve {}: {e} (lookup {n})", job.server.addr()),
            }
            let Some(queue) = self.answers.get(job.worker) else {
                continue;
            };
            queue
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Answer {
                    key: job.key,
                    result,
                });
            if let Some(waker) = shared.wakers.get().and_then(|w| w.get(job.worker)) {
                let _ = waker.wake();
            }
        }
    }
}

/// getaddrinfo (any family, stream sockets) for a `Name`; the first address wins.
fn resolve(addr: &BackendAddr) -> io::Result<SocketAddr> {
    let BackendAddr::Name { host, port } = addr else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{addr} is not a name"),
        ));
    };
    (host.as_str(), *port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("'{host}' has no address")))
}
