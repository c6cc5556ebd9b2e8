//! A cold page cache (docs/web.md#a-cold-page-cache): a file range that is not in the page cache
//! is read by the reader threads, off the worker, before it is sent, and the worker's other
//! clients are served meanwhile. The latency this saves is a benchmark's figure
//! (`bench/coldio.py`, docs/benchmarks.md#a-cold-page-cache); these tests check that the reads
//! go off the worker, that the bytes arrive whole, and that a warm file takes no such read.

use crate::admin_support;
use crate::http_support;
use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use admin_support::{metrics, start_with_admin};
use http_support::*;
use support::*;

const BIG: usize = 32 << 20;

/// Drops the file's pages from the page cache (written back first), and says whether the kernel
/// now reports the file as not cached: a file system that keeps everything in memory (tmpfs)
/// cannot make a cold file.
fn evict(path: &Path) -> bool {
    let f = std::fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    rustix::fs::fadvise(f.as_fd(), 0, None, rustix::fs::Advice::DontNeed).unwrap();
    matches!(
        quill_core::sys::is_cached(f.as_fd(), 0, BIG as u64),
        Ok(Some(false))
    )
}

fn start(root: &Path) -> (QuillProcess, std::net::SocketAddr) {
    let root = root.to_path_buf();
    start_with_admin(move |dir, port, admin| {
        let cfg = dir.join("quill.toml");
        let text = format!(
            "workers = 1\nadmin = \"{admin}\"\n\
             [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
             [[listener.route]]\nname = \"files\"\nstatic = {{ root = \"{root}\" }}\n",
            root = root.display(),
        );
        std::fs::write(&cfg, text).unwrap();
        vec!["--config".into(), cfg.display().to_string()]
    })
}

/// Downloads `path` on its own connection and returns the body.
fn download(addr: std::net::SocketAddr, path: &str) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head")
        + 4;
    assert!(raw.starts_with(b"HTTP/1.1 200"), "{:?}", &raw[..end]);
    raw.split_off(end)
}

fn cold_reads(admin: std::net::SocketAddr) -> f64 {
    metrics(admin).value("quill_file_cold_reads_total", &[])
}

#[test]
fn a_cold_file_is_read_off_the_worker_and_arrives_whole_while_others_are_served() {
    let dir = scratch_dir();
    let root = dir.path().join("www");
    std::fs::create_dir_all(&root).unwrap();
    let big = body_pattern(BIG);
    std::fs::write(root.join("big.bin"), &big).unwrap();
    std::fs::write(root.join("hot.txt"), b"hot\n").unwrap();
    assert!(
        evict(&root.join("big.bin")),
        "the page cache kept the file after POSIX_FADV_DONTNEED: /tmp must be a disk file system"
    );
    let (q, admin) = start(&root);
    let addr = q.addr();
    assert_eq!(cold_reads(admin), 0.0);
    std::thread::scope(|s| {
        let cold = s.spawn(|| download(addr, "/big.bin"));
        // The worker's other client, meanwhile: every answer comes (bounded loop).
        let mut c = Client::connect(addr);
        let started = Instant::now();
        let mut served = 0;
        while !cold.is_finished() && started.elapsed() < Duration::from_secs(30) && served < 2000 {
            let r = c.roundtrip(&get("/hot.txt"));
            assert_eq!(r.status, 200);
            assert_eq!(r.body, b"hot\n");
            served += 1;
        }
        let body = cold.join().unwrap();
        assert!(
            body == big,
            "the cold file arrived changed ({} bytes)",
            body.len()
        );
    });
    assert!(
        cold_reads(admin) >= 1.0,
        "no range of the cold file was read off the worker"
    );
}

#[test]
fn a_warm_file_takes_no_read_off_the_worker() {
    let dir = scratch_dir();
    let root = dir.path().join("www");
    std::fs::create_dir_all(&root).unwrap();
    let big = body_pattern(4 << 20);
    std::fs::write(root.join("warm.bin"), &big).unwrap();
    // Read once here: its pages are cached.
    assert_eq!(std::fs::read(root.join("warm.bin")).unwrap(), big);
    let (q, admin) = start(&root);
    assert!(download(q.addr(), "/warm.bin") == big);
    assert_eq!(cold_reads(admin), 0.0);
}
