//! Direct server return (Pen's `dsr_if`, `dsr_ip`, `tarpit_acl`; Quill's `dsr_wait`): Quill owns
//! a virtual address on an Ethernet segment without the kernel knowing it. It answers ARP for it
//! (and announces it with a gratuitous ARP at start), reads the clients' frames for it on a packet
//! socket bound to the interface, picks a server by a hash of the flow (so all of a connection's
//! or a UDP exchange's frames reach one server), rewrites the destination MAC to the server's
//! (learnt by ARP) and sends the frame out again. The servers hold the virtual address on their
//! loopback and answer the clients straight: replies never reach Quill.
//!
//! One thread per DSR listener, not the worker loop: there is nothing else to wait for (no
//! sessions, no timers but the ARP probes, checked between blocks and at least every 100 ms), and
//! a DSR process runs no proxy listeners (`Config::validate`). The frames arrive in a TPACKET_V3
//! receive ring (`sys::PacketRing`): the kernel writes them into memory shared with Quill and
//! wakes the thread once per block of frames (a block is handed over when full or about
//! `dsr_wait`, default 2 ms, after its first frame), not once per frame; the frames are rewritten
//! in place in the ring and sent on with one `sendmmsg` per block (up to 64 frames a call), with
//! PACKET_QDISC_BYPASS. Measured in `bench/dsr.sh` (docs/benchmarks.md#direct-server-return):
//! Quill's CPU per forwarded frame went from about 20 µs with one blocking `recvmsg` and one `send`
//! per frame (a wake-up per frame) to 2-3 µs. What is left per frame is mostly the kernel's sending
//! work (an skb, the driver's transmit). IPv4 only: IPv6 neighbour discovery is left.
//!
//! Two ways to choose a flow's server:
//! - by default, weighted rendezvous hashing (`dsr::choose`) of the flow under a key random per
//!   process, over the servers whose MAC is known: N hashes per frame, and another process (or
//!   this one restarted) sends the same flow elsewhere;
//! - with `maglev` in the listener's mode, the pool's Maglev table (`MaglevSet`, built as the
//!   proxy's is: from the servers' identities, weights and priorities, not their order) looked up
//!   with the flow's fixed key (`dsr::maglev_key`: the 5-tuple, no secret), walking past servers
//!   whose MAC is unknown or forgotten: one hash per frame, and every Quill in front of the same
//!   servers sends a flow to the same server (so a flow that ECMP moves to another Quill keeps
//!   its server). A bounded connection tracking table (`quill_core::conntrack`, `DSR_FLOWS`
//!   entries, idle after `DSR_FLOW_IDLE`) keeps a flow this Quill forwards on its server while
//!   that server stays available, even when the table's answer for it changes (a server comes
//!   back).
//!
//! The pure frame work (parsing, hashing, the server choice, ARP and the tarpit's SYN-ACK) is in
//! `quill_core::dsr`, the tracking in `quill_core::conntrack`; the packet socket in
//! `quill_core::sys`.

use std::hash::{BuildHasher, Hasher};
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quill_core::conntrack::Conntrack;
use quill_core::dsr::{self, Flow, Mac, Payload};
use quill_core::sys::{self, PacketSocket};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::acl::{AclId, Acls};
use crate::addr::BackendAddr;
use crate::balancer::MaglevSet;
use crate::config::{Config, ListenerConfig, DSR_FLOWS, DSR_FLOW_IDLE};
use crate::state::{RunError, ThreadKind};

/// How often each server is asked for its MAC (an ARP probe).
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// A server that has not answered a probe for this long gets no new flows.
const FORGET_AFTER: Duration = Duration::from_secs(5);
/// The read timeout: how late a probe or the stop flag may be seen on a silent segment.
const TICK: Duration = Duration::from_millis(100);
/// The receive ring: blocks of this many bytes (about 250 ACK-sized frames, 20 full-size ones)...
const RING_BLOCK: usize = 32 * 1024;
/// ... this many of them (2 MiB mapped per DSR listener; many small blocks rather than a few big
/// ones, since on a slow segment each block carries what arrived in one wait below, and the ring
/// is full once every block is Quill's).
const RING_BLOCKS: usize = 64;
// A block that does not fill is handed to Quill after the listener's `dsr_wait`
// (`ListenerConfig::dsr_wait_ms`, default 2 ms; kernels that retire blocks on their clock tick
// round it up to a tick): about the most a frame waits on a quiet segment, and what lets one
// wake-up carry many frames on a busy one. Measured in `bench/dsr.sh`
// (docs/benchmarks.md#direct-server-return): 1 ms left Quill's CPU per GiB at 0.14 of TCP mode's, 2
// ms at 0.09-0.10 with the same download speed, 4 ms at 0.09 with slower downloads (the clients'
// ACKs wait longer).

/// What one DSR listener did (logged at stop).
#[derive(Default)]
struct Stats {
    forwarded: AtomicU64,
    bytes: AtomicU64,
    arp_replies: AtomicU64,
    tarpitted: AtomicU64,
    no_server: AtomicU64,
    dropped: AtomicU64,
}

struct Server {
    ip: Ipv4Addr,
    weight: u32,
    mac: Option<(Mac, Instant)>,
}

/// How a listener chooses a flow's server (see the module's documentation).
enum Selection {
    /// Weighted rendezvous under a key random per process.
    Rendezvous { key: u64 },
    /// The Maglev table, and the flows this instance tracks.
    Maglev {
        tables: MaglevSet,
        flows: Box<Conntrack>,
    },
}

struct Engine {
    name: String,
    ifname: String,
    socket: PacketSocket,
    /// The receive ring (taken by [`Engine::run`]).
    ring: Option<sys::PacketRing>,
    vip: Ipv4Addr,
    port: u16,
    servers: Vec<Server>,
    /// `tarpit_acl`: the lists (with the GeoIP database their country entries need) and which.
    tarpit: Option<(Acls, AclId)>,
    /// Random per process: the tarpit's sequence numbers.
    key: u64,
    selection: Selection,
    /// The clock the flow tracking counts milliseconds on.
    started: Instant,
    stats: Arc<Stats>,
}

fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(u64::from(std::process::id()));
    h.finish()
}

impl Engine {
    fn open(l: &ListenerConfig, config: &Config) -> Result<Engine, RunError> {
        let ifname = l.dsr().map(|d| d.ifname().to_string()).unwrap_or_default();
        let (vip, port) = l
            .dsr_vip()
            .ok_or_else(|| RunError::DsrAddress { what: l.what() })?;
        let socket = sys::packet_socket(&ifname).map_err(|source| RunError::PacketSocket {
            what: l.what(),
            ifname: ifname.clone(),
            source,
        })?;
        let ring = sys::packet_rx_ring(socket.fd.as_fd(), RING_BLOCK, RING_BLOCKS, l.dsr_wait_ms())
            .map_err(|source| RunError::PacketRing {
                what: l.what(),
                ifname: ifname.clone(),
                source,
            })?;
        // Best effort: a kernel without it queues the frames as any other sender's.
        let _ = sys::set_packet_qdisc_bypass(socket.fd.as_fd());
        // `Config::validate` refuses servers that are not IPv4 addresses in a DSR listener; any
        // other is left out of both the servers and the Maglev table, so their indices agree.
        let (servers, identities): (Vec<Server>, Vec<(String, u32, u32)>) = l
            .servers
            .iter()
            .filter_map(|s| match &s.addr {
                BackendAddr::Tcp(a) => match a.ip() {
                    IpAddr::V4(ip) => Some((
                        Server {
                            ip,
                            weight: s.weight.max(1),
                            mac: None,
                        },
                        (s.addr.to_string(), s.weight, s.prio),
                    )),
                    IpAddr::V6(_) => None,
                },
                _ => None,
            })
            .unzip();
        let key = random_u64();
        let selection = if l.mode.maglev {
            Selection::Maglev {
                tables: MaglevSet::build(identities, l.mode.prio),
                flows: Box::new(Conntrack::new(DSR_FLOWS, DSR_FLOW_IDLE.as_millis() as u64)),
            }
        } else {
            Selection::Rendezvous { key }
        };
        Ok(Engine {
            name: l.name.clone(),
            ifname,
            socket,
            ring: Some(ring),
            vip,
            port,
            servers,
            tarpit: l
                .dsr()
                .and_then(|d| d.tarpit_acl)
                .map(|n| (config.global.acls.clone(), n)),
            key,
            selection,
            started: Instant::now(),
            stats: Arc::default(),
        })
    }

    fn send(&self, frame: &[u8]) {
        if sys::packet_send(self.socket.fd.as_fd(), frame).is_err() {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn probe(&self) {
        for s in &self.servers {
            self.send(&dsr::arp_probe(s.ip, self.socket.mac));
        }
    }

    fn run(mut self, stop: &AtomicBool) {
        let mac = self.socket.mac;
        let Some(mut ring) = self.ring.take() else {
            return;
        };
        // The same socket under a second descriptor, to wait on while the frame handling
        // borrows the engine.
        let wait_fd = match self.socket.fd.try_clone() {
            Ok(fd) => fd,
            Err(e) => {
                tracing::error!("dsr_if {}: {e}", self.ifname);
                return;
            }
        };
        // The announcement, twice (a first one may meet a segment still settling), then probes.
        self.send(&dsr::gratuitous_arp(self.vip, mac));
        let mut garp_again = Some(Instant::now() + Duration::from_secs(1));
        self.probe();
        let mut next_probe = Instant::now() + Duration::from_millis(200);
        // Per block: its frames, and those to send on (offset, length). Their capacity stays.
        let mut frames = Vec::with_capacity(1024);
        let mut out: Vec<(usize, usize)> = Vec::with_capacity(1024);
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= next_probe {
                self.probe();
                next_probe = now + PROBE_EVERY;
            }
            if garp_again.is_some_and(|t| now >= t) {
                self.send(&dsr::gratuitous_arp(self.vip, mac));
                garp_again = None;
            }
            let read = ring.read_blocks(wait_fd.as_fd(), TICK, &mut frames, |block, got| {
                let now = Instant::now();
                out.clear();
                for f in got {
                    let frame = &mut block[f.offset..f.offset + f.len];
                    if self.handle(frame, f.csum_not_ready, now) {
                        out.push((f.offset, f.len));
                    }
                }
                if out.is_empty() {
                    return;
                }
                let (sent, bytes) = sys::packet_send_many(self.socket.fd.as_fd(), block, &out);
                let stats = &self.stats;
                stats.forwarded.fetch_add(sent as u64, Ordering::Relaxed);
                stats
                    .dropped
                    .fetch_add((out.len() - sent) as u64, Ordering::Relaxed);
                stats.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
            });
            if let Err(e) = read {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::warn!("dsr_if {}: read failed: {e}", self.ifname);
                    std::thread::sleep(TICK);
                }
            }
        }
    }

    /// Handles one frame read; true when it is to be sent on as it now is (its MACs rewritten).
    fn handle(&mut self, frame: &mut [u8], csum_not_ready: bool, now: Instant) -> bool {
        let mac = self.socket.mac;
        let Some(parsed) = dsr::parse(frame) else {
            return false;
        };
        if parsed.src == mac {
            return false;
        }
        match parsed.payload {
            Payload::Arp(arp) => {
                if let Some(s) = self.servers.iter_mut().find(|s| s.ip == arp.sender_ip) {
                    s.mac = Some((arp.sender_mac, now));
                }
                if let Some(reply) = dsr::arp_reply(&arp, self.vip, mac) {
                    self.send(&reply);
                    self.stats.arp_replies.fetch_add(1, Ordering::Relaxed);
                }
                false
            }
            Payload::Ip(flow) => {
                if parsed.dst != mac || flow.dst != IpAddr::V4(self.vip) {
                    return false;
                }
                let ported = matches!(flow.proto, dsr::PROTO_TCP | dsr::PROTO_UDP);
                if ported && flow.dst_port != self.port && flow.dst_port != 0 {
                    return false;
                }
                if self
                    .tarpit
                    .as_ref()
                    .is_some_and(|(acls, n)| !acls.permits(*n, flow.src))
                {
                    let isn = dsr::flow_hash(&flow, self.key) as u32;
                    if let Some(synack) = dsr::tarpit_synack(&flow, parsed.src, mac, isn) {
                        self.send(&synack);
                    }
                    self.stats.tarpitted.fetch_add(1, Ordering::Relaxed);
                    return false;
                }
                let Some((to, _)) = self
                    .pick(&flow, now)
                    .and_then(|i| self.servers.get(i))
                    .and_then(|s| s.mac)
                else {
                    self.stats.no_server.fetch_add(1, Ordering::Relaxed);
                    return false;
                };
                if csum_not_ready {
                    dsr::fill_checksum(frame);
                }
                dsr::rewrite_macs(frame, to, mac);
                true
            }
            Payload::Other => false,
        }
    }
}

impl Engine {
    /// The server (index) for a frame of `flow` at `now`, among those whose MAC is known.
    fn pick(&mut self, flow: &Flow, now: Instant) -> Option<usize> {
        let servers = &self.servers;
        let known = |i: usize| {
            servers[i]
                .mac
                .is_some_and(|(_, seen)| now.duration_since(seen) < FORGET_AFTER)
        };
        match &mut self.selection {
            Selection::Rendezvous { key } => dsr::choose(
                dsr::flow_hash(flow, *key),
                (0..servers.len())
                    .filter(|&i| known(i))
                    .map(|i| (i, servers[i].weight)),
            ),
            Selection::Maglev { tables, flows } => {
                let hash = dsr::maglev_key(flow);
                let now_ms = now.duration_since(self.started).as_millis() as u64;
                flows
                    .server_for(
                        dsr::flow_id(flow),
                        hash,
                        now_ms,
                        |s| known(s as usize),
                        || tables.lookup(hash, &known).map(|i| i as u32),
                    )
                    .map(|s| s as usize)
            }
        }
    }

    /// How flows choose their server, for the start-up log.
    fn describe_selection(&self) -> String {
        match &self.selection {
            Selection::Rendezvous { .. } => "weighted rendezvous hashing".to_string(),
            Selection::Maglev { tables, flows } => {
                let levels: Vec<String> = tables
                    .fingerprints()
                    .iter()
                    .map(|(prio, size, fp)| {
                        format!("prio {prio}: {size} slots, fingerprint {fp:016x}")
                    })
                    .collect();
                format!(
                    "Maglev table ({}), {} flows tracked",
                    levels.join("; "),
                    flows.capacity()
                )
            }
        }
    }
}

/// The DSR listeners of a configuration with their packet sockets open (the part that needs
/// CAP_NET_RAW); [`serve`] runs them.
pub(crate) struct Opened(Vec<Engine>, Signals);

/// Opens the packet socket of every listener of `config` (all DSR listeners).
pub(crate) fn open(config: &Config) -> Result<Opened, RunError> {
    let signals = Signals::new([SIGTERM, SIGINT, SIGHUP]).map_err(RunError::Signals)?;
    let engines = config
        .listeners
        .iter()
        .map(|l| Engine::open(l, config))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Opened(engines, signals))
}

/// Runs the opened DSR listeners, one thread each, until SIGTERM or SIGINT.
pub(crate) fn serve(opened: Opened) -> Result<(), RunError> {
    let Opened(engines, mut signals) = opened;
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for e in engines {
        tracing::info!(
            "listener '{}': direct server return on {} for {}:{} to {} server(s), chosen by {}",
            e.name,
            e.ifname,
            e.vip,
            e.port,
            e.servers.len(),
            e.describe_selection()
        );
        let stats = e.stats.clone();
        let name = e.name.clone();
        let stop = stop.clone();
        let t = std::thread::Builder::new()
            .name(format!("dsr-{name}"))
            .spawn(move || e.run(&stop))
            .map_err(|source| RunError::Thread {
                what: ThreadKind::Dsr,
                source,
            })?;
        threads.push((t, name, stats));
    }
    for sig in signals.forever() {
        if sig == SIGHUP {
            tracing::warn!("SIGHUP: reload is not supported yet in a DSR process (restart it)");
            continue;
        }
        tracing::info!("signal {sig}: stopping");
        break;
    }
    stop.store(true, Ordering::Relaxed);
    for (t, name, s) in threads {
        let _ = t.join();
        tracing::info!(
            "listener '{name}': {} frames ({} bytes) forwarded, {} ARP replies, {} tarpitted, {} without a server, {} send failures",
            s.forwarded.load(Ordering::Relaxed),
            s.bytes.load(Ordering::Relaxed),
            s.arp_replies.load(Ordering::Relaxed),
            s.tarpitted.load(Ordering::Relaxed),
            s.no_server.load(Ordering::Relaxed),
            s.dropped.load(Ordering::Relaxed),
        );
    }
    Ok(())
}
