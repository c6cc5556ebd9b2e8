//! Cold file ranges read off the workers (docs/web.md#a-cold-page-cache).
//!
//! A worker sends a large file with `sendfile` (or `pread` over TLS), which waits for the disk
//! when the pages are not in the page cache: every other client of that worker waits meanwhile.
//! So before it sends a range, [`crate::web::send::Sending`] asks the kernel whether the range is
//! cached (`cachestat`, no read). When it is not, the session hands the range to this pool: a
//! thread reads it (`pread` into a scratch buffer, which leaves the pages in the cache), then posts
//! the session's token to its worker's [`Mailbox`] and wakes the worker, which sends the range
//! from the cache. Meanwhile the worker serves its other clients.
//!
//! The pool is the process's: [`THREADS`] threads, started on first use, over one queue. A job
//! holds the file's representation (`Arc<Rep>`, and so its descriptor) until it is read.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use mio::Token;

use super::cache::{Body, Rep};
use crate::queue::Mailbox;

/// Reader threads: a cold range waits on the disk, not on the CPU, so a few serve every worker.
pub(crate) const THREADS: usize = 2;
/// Bytes read per `pread` call (the scratch buffer of each thread).
const CHUNK: usize = 256 << 10;

/// A range to read into the page cache for a session.
#[derive(Debug)]
pub(crate) struct Job {
    pub rep: Arc<Rep>,
    pub from: u64,
    pub len: u64,
    /// The session's client token and its worker's mailbox: where "read" is posted.
    pub token: Token,
    pub mailbox: Arc<Mailbox>,
}

#[derive(Debug, Default)]
struct Pool {
    jobs: Mutex<VecDeque<Job>>,
    ready: Condvar,
}

static POOL: OnceLock<Option<Arc<Pool>>> = OnceLock::new();

/// Ranges read by the pool since the process started (the metrics).
static READS: AtomicU64 = AtomicU64::new(0);

/// How many cold ranges the pool has read.
pub(crate) fn reads() -> u64 {
    READS.load(Ordering::Relaxed)
}

/// Starts the threads (once); None when none could be started.
fn pool() -> Option<&'static Arc<Pool>> {
    POOL.get_or_init(|| {
        let pool = Arc::new(Pool::default());
        let mut started = 0;
        for i in 0..THREADS {
            let p = pool.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("quill-read-{i}"))
                .spawn(move || run(&p));
            match spawned {
                Ok(_) => started += 1,
                Err(e) => tracing::warn!("cannot start a file reader thread: {e}"),
            }
        }
        (started > 0).then_some(pool)
    })
    .as_ref()
}

/// Queues `job`; Err(job) when there is no reader thread (the caller sends the range anyway,
/// waiting on the disk).
pub(crate) fn submit(job: Job) -> Result<(), Job> {
    let Some(pool) = pool() else {
        return Err(job);
    };
    pool.jobs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push_back(job);
    pool.ready.notify_one();
    Ok(())
}

fn run(pool: &Pool) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let job = {
            let mut jobs = pool.jobs.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(job) = jobs.pop_front() {
                    break job;
                }
                jobs = pool.ready.wait(jobs).unwrap_or_else(|e| e.into_inner());
            }
        };
        read(&job, &mut buf);
        READS.fetch_add(1, Ordering::Relaxed);
        job.mailbox.post_read(job.token);
    }
}

/// Reads the job's range, which leaves its pages in the page cache. An error or a short file
/// ends the read: the send that follows meets it itself.
fn read(job: &Job, buf: &mut [u8]) {
    let Body::File(fd) = &job.rep.body else {
        return;
    };
    let end = job.from.saturating_add(job.len);
    let mut at = job.from;
    while at < end {
        let want = ((end - at) as usize).min(buf.len());
        match quill_core::sys::pread(fd.as_fd(), &mut buf[..want], at) {
            Ok(0) | Err(_) => return,
            Ok(n) => at += n as u64,
        }
    }
}
