//! Direct server return (Pen's `dsr_if`, `dsr_ip`, `tarpit_acl`): Quill owns a virtual address on
//! an Ethernet segment without the kernel knowing it. It answers ARP for it (and announces it
//! with a gratuitous ARP at start), reads the clients' frames for it on a packet socket bound to
//! the interface, picks a server by a hash of the flow (so all of a connection's or a UDP
//! exchange's frames reach one server), rewrites the destination MAC to the server's (learnt by
//! ARP) and sends the frame out again. The servers hold the virtual address on their loopback and
//! answer the clients straight: replies never reach Quill.
//!
//! One thread per DSR listener, not the worker loop: the loop is one blocking `recvmsg` and one
//! `send` per frame with nothing else to wait for (no sessions, no timers but the ARP probes,
//! checked between frames and on a 100 ms read timeout), and a DSR process runs no proxy
//! listeners (`Config::validate`). Frames are handled one per syscall; TPACKET rings or
//! `recvmmsg` were not measured and are not used. IPv4 only: IPv6 neighbour discovery is left.
//!
//! The pure frame work (parsing, hashing, the server choice, ARP and the tarpit's SYN-ACK) is in
//! `quill_core::dsr`; the packet socket in `quill_core::sys`.

use std::hash::{BuildHasher, Hasher};
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quill_core::dsr::{self, Mac, Payload};
use quill_core::sys::{self, PacketSocket};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::acl::{AclId, Acls};
use crate::addr::BackendAddr;
use crate::config::{Config, ListenerConfig};
use crate::state::RunError;

/// How often each server is asked for its MAC (an ARP probe).
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// A server that has not answered a probe for this long gets no new flows.
const FORGET_AFTER: Duration = Duration::from_secs(5);
/// The read timeout: how late a probe or the stop flag may be seen on a silent segment.
const TICK: Duration = Duration::from_millis(100);
/// The largest frame read (a standard MTU with a VLAN tag; bigger frames are cut and dropped).
const FRAME_MAX: usize = 9216;

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

struct Engine {
    name: String,
    ifname: String,
    socket: PacketSocket,
    vip: Ipv4Addr,
    port: u16,
    servers: Vec<Server>,
    /// `tarpit_acl`: the lists (with the GeoIP database their country entries need) and which.
    tarpit: Option<(Acls, AclId)>,
    key: u64,
    stats: Arc<Stats>,
}

fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(u64::from(std::process::id()));
    h.finish()
}

impl Engine {
    fn open(l: &ListenerConfig, config: &Config) -> Result<Engine, RunError> {
        let ifname = l.dsr_if.clone().unwrap_or_default();
        let (vip, port) = l
            .dsr_vip()
            .ok_or_else(|| RunError(format!("{}: dsr_if needs a virtual address", l.what())))?;
        let socket = sys::packet_socket(&ifname).map_err(|e| {
            let hint = if e.raw_os_error() == Some(libc::EPERM) {
                " (needs CAP_NET_RAW)"
            } else {
                ""
            };
            RunError(format!(
                "{}: dsr_if {ifname}: cannot open a packet socket: {e}{hint}",
                l.what()
            ))
        })?;
        socket2::SockRef::from(&socket.fd)
            .set_read_timeout(Some(TICK))
            .map_err(|e| RunError(format!("dsr_if {ifname}: {e}")))?;
        let servers = l
            .servers
            .iter()
            .filter_map(|s| match &s.addr {
                BackendAddr::Tcp(a) => match a.ip() {
                    IpAddr::V4(ip) => Some(Server {
                        ip,
                        weight: s.weight.max(1),
                        mac: None,
                    }),
                    IpAddr::V6(_) => None,
                },
                _ => None,
            })
            .collect();
        Ok(Engine {
            name: l.name.clone(),
            ifname,
            socket,
            vip,
            port,
            servers,
            tarpit: l.tarpit_acl.map(|n| (config.global.acls.clone(), n)),
            key: random_u64(),
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
        // The announcement, twice (a first one may meet a segment still settling), then probes.
        self.send(&dsr::gratuitous_arp(self.vip, mac));
        let mut garp_again = Some(Instant::now() + Duration::from_secs(1));
        self.probe();
        let mut next_probe = Instant::now() + Duration::from_millis(200);
        let mut buf = vec![0u8; FRAME_MAX];
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
            let (n, csum_not_ready) = match sys::packet_recv(self.socket.fd.as_fd(), &mut buf) {
                Ok(got) => got,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    continue
                }
                Err(e) => {
                    tracing::warn!("dsr_if {}: read failed: {e}", self.ifname);
                    std::thread::sleep(TICK);
                    continue;
                }
            };
            self.handle(&mut buf[..n], csum_not_ready, now);
        }
    }

    fn handle(&mut self, frame: &mut [u8], csum_not_ready: bool, now: Instant) {
        let mac = self.socket.mac;
        let Some(parsed) = dsr::parse(frame) else {
            return;
        };
        if parsed.src == mac {
            return;
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
            }
            Payload::Ip(flow) => {
                if parsed.dst != mac || flow.dst != IpAddr::V4(self.vip) {
                    return;
                }
                let ported = matches!(flow.proto, dsr::PROTO_TCP | dsr::PROTO_UDP);
                if ported && flow.dst_port != self.port && flow.dst_port != 0 {
                    return;
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
                    return;
                }
                let hash = dsr::flow_hash(&flow, self.key);
                let known = self.servers.iter().enumerate().filter_map(|(i, s)| {
                    s.mac
                        .filter(|(_, seen)| now.duration_since(*seen) < FORGET_AFTER)
                        .map(|_| (i, s.weight))
                });
                let Some((to, _)) = dsr::choose(hash, known)
                    .and_then(|i| self.servers.get(i))
                    .and_then(|s| s.mac)
                else {
                    self.stats.no_server.fetch_add(1, Ordering::Relaxed);
                    return;
                };
                if csum_not_ready {
                    dsr::fill_checksum(frame);
                }
                dsr::rewrite_macs(frame, to, mac);
                self.send(frame);
                self.stats.forwarded.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .bytes
                    .fetch_add(frame.len() as u64, Ordering::Relaxed);
            }
            Payload::Other => {}
        }
    }
}

/// The DSR listeners of a configuration with their packet sockets open (the part that needs
/// CAP_NET_RAW); [`serve`] runs them.
pub(crate) struct Opened(Vec<Engine>, Signals);

/// Opens the packet socket of every listener of `config` (all DSR listeners).
pub(crate) fn open(config: &Config) -> Result<Opened, RunError> {
    let signals = Signals::new([SIGTERM, SIGINT, SIGHUP])
        .map_err(|e| RunError(format!("cannot handle signals: {e}")))?;
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
            "listener '{}': direct server return on {} for {}:{} to {} server(s)",
            e.name,
            e.ifname,
            e.vip,
            e.port,
            e.servers.len()
        );
        let stats = e.stats.clone();
        let name = e.name.clone();
        let stop = stop.clone();
        let t = std::thread::Builder::new()
            .name(format!("dsr-{name}"))
            .spawn(move || e.run(&stop))
            .map_err(|e| RunError(format!("cannot start DSR thread: {e}")))?;
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
