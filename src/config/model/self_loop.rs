//! Finding a backend that is one of Quill's own listen addresses (`Config::self_loop`): every
//! session sent there would loop back into Quill.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};

use crate::addr::{BackendAddr, ListenAddr};

use super::Config;

/// Which backend of a listener `Config::self_loop` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Member {
    Server(usize),
    Emergency,
    Abuse,
}

/// A backend that is one of Quill's own listen addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SelfLoop {
    /// Which listener, or named pool: the pools are numbered after the listeners.
    pub listener: usize,
    pub member: Member,
}

impl SelfLoop {
    /// One line naming the listener (or pool), the backend and its address.
    pub(crate) fn message(&self, config: &Config) -> String {
        let Some(l) = config
            .listeners
            .iter()
            .chain(&config.pools)
            .nth(self.listener)
        else {
            return "a server is one of Quill's own listen addresses".into();
        };
        let (what, addr) = match self.member {
            Member::Server(i) => (format!("server {i}"), l.servers[i].addr.to_string()),
            Member::Emergency => (
                "emergency server".to_string(),
                l.emergency
                    .as_ref()
                    .map_or(String::new(), |a| a.to_string()),
            ),
            Member::Abuse => (
                "abuse server".to_string(),
                l.abuse.as_ref().map_or(String::new(), |a| a.to_string()),
            ),
        };
        format!(
            "{}: {what} {addr} is one of Quill's own listen addresses \
             (every session would loop back into Quill)",
            l.what()
        )
    }
}

/// An IPv4-mapped IPv6 address as IPv4, as clients and listeners see it.
fn canonical(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(a, |v4| SocketAddr::new(IpAddr::V4(v4), a.port())),
        IpAddr::V4(_) => a,
    }
}

/// Whether `ip` is this host's: loopback, or an address a socket can be bound to (a cheap
/// question to the kernel, asked only for a server on a wildcard listener's port).
fn is_local_ip(ip: IpAddr) -> bool {
    ip.is_loopback() || std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

impl Config {
    /// The first server (or emergency or abuse server) that is one of Quill's own listen
    /// addresses: every session sent there would come back and open another, without end. Exact
    /// matches count, and so does any local address on the port of a wildcard listener
    /// (`0.0.0.0:P`, `[::]:P`). Linear in the number of servers.
    pub(crate) fn self_loop(&self) -> Option<SelfLoop> {
        let mut exact = HashSet::new();
        let mut wildcard_ports = HashSet::new();
        let mut paths = HashSet::new();
        for l in &self.listeners {
            match &l.listen {
                ListenAddr::Tcp(a) if a.ip().is_unspecified() => {
                    wildcard_ports.insert(a.port());
                }
                ListenAddr::Tcp(a) => {
                    exact.insert(canonical(*a));
                }
                ListenAddr::Unix(p) => {
                    paths.insert(p.as_path());
                }
            }
        }
        // One question to the kernel per distinct address, however many servers share it.
        let mut local: std::collections::HashMap<IpAddr, bool> = Default::default();
        let mut mine = |addr: &BackendAddr| match addr {
            BackendAddr::Tcp(a) => {
                let a = canonical(*a);
                exact.contains(&a)
                    || (wildcard_ports.contains(&a.port())
                        && *local.entry(a.ip()).or_insert_with(|| is_local_ip(a.ip())))
            }
            BackendAddr::Unix(p) => paths.contains(p.as_path()),
            _ => false,
        };
        for (li, l) in self.listeners.iter().chain(&self.pools).enumerate() {
            if let Some(i) = l.servers.iter().position(|s| mine(&s.addr)) {
                return Some(SelfLoop {
                    listener: li,
                    member: Member::Server(i),
                });
            }
            if l.emergency.as_ref().is_some_and(&mut mine) {
                return Some(SelfLoop {
                    listener: li,
                    member: Member::Emergency,
                });
            }
            if l.abuse.as_ref().is_some_and(&mut mine) {
                return Some(SelfLoop {
                    listener: li,
                    member: Member::Abuse,
                });
            }
        }
        None
    }
}
