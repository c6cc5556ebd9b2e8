//! The port registry of the integration tests. Binding port 0 and releasing it races: the kernel
//! hands that port out again as anyone's ephemeral port (a client's, a demo server's) before
//! Quill binds it. Ports here come from below the ephemeral range (32768 and up on Linux), from
//! 20000 to 31999, in one block of [`BLOCK`] ports per test binary ([`BINARIES`]), so binaries
//! running in parallel never hand out the same port. Inside a block a counter gives each call the
//! next port, starting at an offset taken from the process id (two runs of one binary, from two
//! checkouts, start apart), and a port is handed out only when it can be bound on that address
//! right now, over TCP and UDP.

use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::OnceLock;

/// The first port of the first block.
const FIRST: u16 = 20_000;
/// Ports in each binary's block.
const BLOCK: u16 = 1_150;
/// The test binaries that take ports, each with its block in this order (`tests/NAME/main.rs`).
const BINARIES: [&str; 10] = [
    "core", "http", "tls", "udp", "dsr", "control", "ops", "security", "web", "h2",
];

/// The first port of this binary's block: its name is the crate being compiled.
fn block_start() -> u16 {
    let name = env!("CARGO_CRATE_NAME");
    let index = BINARIES
        .iter()
        .position(|b| *b == name)
        .unwrap_or_else(|| panic!("tests/support/ports.rs: give the test binary {name} a block"));
    FIRST + BLOCK * index as u16
}

/// The next port of this binary's block, round the block.
fn next_in_block() -> u16 {
    static START: OnceLock<u16> = OnceLock::new();
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = *START.get_or_init(|| (std::process::id() % u32::from(BLOCK)) as u16);
    let n = NEXT.fetch_add(1, Ordering::Relaxed) % BLOCK;
    block_start() + (start + n) % BLOCK
}

/// A port of this binary's block that nothing holds on `ip`, over TCP or UDP; None when none of
/// the block's ports can be bound there (or `ip` itself cannot be bound, as ::1 without IPv6).
pub fn port_on(ip: IpAddr) -> Option<u16> {
    TcpListener::bind(SocketAddr::new(ip, 0)).ok()?;
    (0..BLOCK).map(|_| next_in_block()).find(|&port| {
        let addr = SocketAddr::new(ip, port);
        TcpListener::bind(addr).is_ok() && UdpSocket::bind(addr).is_ok()
    })
}
