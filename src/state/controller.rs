//! The running configuration and the one way it changes: a new `Config` (from a control command or
//! a reload) is compared with the running one ([`Plan::between`]) and the difference is applied in
//! place. Servers that stay keep their sessions, counters, blacklist and health; listeners that
//! stay keep their socket; new listeners are bound and every pool is built before anything is
//! swapped, so a change that cannot bind or build changes nothing. Established sessions are never
//! touched: they hold the pool snapshot they started with.
//! A reload keeps what the operator changed at run time unless the sources changed the same
//! setting (see [`super::merge`]); logs can be reopened without a reload ([`Controller::reopen`]).

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};

use super::plan::{Applied, ApplyError, Note, Plan, Running, Socket, SocketOptions};
use super::shared::{Listener, Phase, Shared};
use super::{merge, Msg, Rebuild, RunError};
use crate::acl::Acls;
use crate::backend::{Pool, PoolKind, Routes};
use crate::clock::Clock;
use crate::command::{Command, CommandFile, Quoting};
use crate::config::{Config, Global, ListenerConfig};
use crate::listener::{self, BindOptions, ListenSocket};
use crate::log::LogPlan;
use crate::route::Sites;
use crate::systemd::Inherited;

pub(crate) struct Controller {
    shared: Arc<Shared>,
    state: Mutex<State>,
    rebuild: Option<Rebuild>,
    events: Option<mpsc::Sender<Msg>>,
    /// `listen_per_worker` as the process started: it takes effect at a start only (as the worker
    /// count, which `shared` holds), so a listener a reload adds is bound with it, not the file's
    /// new value.
    started_per_worker: bool,
}

struct State {
    config: Config,
    /// What the sources said at the last load (start or reload): a reload compares the sources
    /// with it to tell their changes from the operator's.
    loaded: Config,
    next_listener_id: u64,
}

/// What a change needs before anything is swapped: a socket and a pool for each listener of the
/// next configuration (in its order), and the named pools.
struct Built {
    sockets: Vec<Ready>,
    pools: Vec<Pool>,
    named: Vec<Arc<Pool>>,
}

/// A listener's socket, ready for the swap.
enum Ready {
    /// A running listener that stays; with options, they are set on its socket.
    Kept {
        listener: Arc<Listener>,
        options: Option<SocketOptions>,
    },
    /// A socket just bound.
    Fresh(ListenSocket),
}

fn bind_options(g: &Global, l: &ListenerConfig) -> BindOptions {
    BindOptions {
        backlog: g.backlog,
        reuseport: g.reuseport,
        tfo: g.tfo,
        nodelay: l.tuning.tcp_nodelay,
        keepalive: l.tuning.keepalive,
        defer: l.defers_accept(),
        udp_sockets: if l.udp().is_some() {
            g.workers.max(1)
        } else {
            0
        },
        tcp_sockets: if g.listen_per_worker
            && l.udp().is_none()
            && matches!(l.listen, crate::addr::ListenAddr::Tcp(_))
        {
            g.workers.max(1)
        } else {
            0
        },
    }
}

/// The socket for `l`: an inherited one that matches it by name or address, else a new one.
fn open_socket(
    l: &ListenerConfig,
    g: &Global,
    inherited: &mut Vec<Inherited>,
) -> Result<ListenSocket, ApplyError> {
    if let (Some(_), crate::addr::ListenAddr::Tcp(at)) = (&l.udp(), &l.listen) {
        // A UDP listener takes every socket handed over under its name (vetted to be bound at
        // its address), then binds the rest of its sockets beside them.
        let mut taken = Vec::new();
        let mut i = 0;
        while i < inherited.len() {
            if inherited[i].name.as_deref() == Some(l.name.as_str()) {
                taken.push(inherited.remove(i).fd);
            } else {
                i += 1;
            }
        }
        return listener::bind_udp(*at, bind_options(g, l).udp_sockets, &taken).map_err(|source| {
            ApplyError::BindUdp {
                addr: l.listen.clone(),
                source,
            }
        });
    }
    // A TCP listener takes the first socket that matches it by name or address, then every other
    // TCP socket bound to that same address (one per worker with `listen_per_worker` in the
    // process it takes over from, found by its name or, for a listener renamed since, by its
    // address): closing one would reset the clients queued on it. A socket at another address
    // is left for the listener it belongs to, even under the same name (systemd gives every
    // socket of a unit its `FileDescriptorName`).
    let mut taken = Vec::new();
    let mut first: Option<crate::addr::ListenAddr> = None;
    let mut i = 0;
    while i < inherited.len() {
        let by_name = inherited[i].name.as_deref() == Some(l.name.as_str());
        let fd = inherited[i]
            .fd
            .try_clone()
            .map_err(|source| ApplyError::Duplicate {
                name: l.name.clone(),
                source,
            })?;
        match listener::from_fd(fd) {
            Ok((socket, addr))
                if (by_name || addr == l.listen) && first.as_ref().is_none_or(|f| *f == addr) =>
            {
                if first.is_some() && !matches!(socket, ListenSocket::Tcp(_)) {
                    // A Unix socket (or anything but TCP) comes alone, and only first.
                    i += 1;
                    continue;
                }
                inherited.remove(i);
                set_inherited_options(&socket, &bind_options(g, l));
                match socket {
                    ListenSocket::Tcp(tcp) => {
                        taken.push(tcp);
                        first = Some(addr);
                    }
                    other => return Ok(other),
                }
            }
            Ok(_) => i += 1,
            Err(source) if by_name => {
                return Err(ApplyError::Inherited {
                    name: l.name.clone(),
                    source,
                });
            }
            Err(_) => i += 1,
        }
    }
    let o = bind_options(g, l);
    // The sockets taken are at `first` (the configured address, unless systemd's socket of this
    // name is bound elsewhere): more are bound beside them there.
    let bound = match (first.as_ref().unwrap_or(&l.listen), taken.len()) {
        (_, 0) => listener::bind(&l.listen, &o),
        (_, 1) if o.tcp_sockets == 0 => Ok(ListenSocket::Tcp(taken.remove(0))),
        (crate::addr::ListenAddr::Tcp(at), _) => listener::bind_tcp_shards(*at, &o, taken),
        (_, _) => Ok(ListenSocket::TcpShards(taken)),
    };
    bound.map_err(|source| ApplyError::Bind {
        addr: l.listen.clone(),
        source,
    })
}

/// Sets on a socket systemd (or the previous process) bound the options that accepted clients
/// inherit, and TCP_DEFER_ACCEPT, as `listener::bind` does: without them every client of a
/// socket-activated listener would run with Nagle's algorithm on. Failures only cost that, so
/// they are logged.
fn set_inherited_options(socket: &ListenSocket, o: &BindOptions) {
    if let Err(e) = socket.set_inherited_options(o.nodelay, o.keepalive, o.defer) {
        tracing::warn!("cannot set options on an inherited socket: {e}");
    }
}

/// Builds the named pools of `config`, each keeping the state of the old pool of its name (its
/// servers by address, as a listener's pool does across a reload).
fn named_pools(
    config: &Config,
    acls: &Arc<Acls>,
    old: &[Arc<Pool>],
    now: u64,
) -> Result<Vec<Arc<Pool>>, ApplyError> {
    config
        .pools
        .iter()
        .map(|p| {
            let was = old.iter().find(|o| o.name == p.name);
            let mut pool = Pool::build(p, acls.clone(), was.map(|o| &**o), now);
            pool.server_tls = server_tls(p, was.map(|o| &**o), true)?;
            Ok(Arc::new(pool))
        })
        .collect()
}

/// A pool's TLS to its servers: the old pool's while the settings are the same (keeping the
/// sessions rustls remembers for resumption), else built anew.
fn server_tls(
    l: &ListenerConfig,
    old: Option<&Pool>,
    http: bool,
) -> Result<Option<Arc<crate::tls::client::ClientTls>>, ApplyError> {
    let Some(settings) = &l.server_tls else {
        return Ok(None);
    };
    if let Some(was) = old.and_then(|o| o.server_tls.as_ref()) {
        if was.settings == *settings {
            return Ok(Some(was.clone()));
        }
    }
    crate::tls::client::build_client(settings, http)
        .map(|c| Some(Arc::new(c)))
        .map_err(|source| ApplyError::Tls {
            what: l.what(),
            source,
        })
}

/// A listener's pool with its routes, which point at `named` (the pools just built) and keep the
/// request counters of the old pool's routes of the same name; new counters have room for
/// `workers` workers.
fn listener_pool(
    l: &ListenerConfig,
    acls: &Arc<Acls>,
    old: Option<&Pool>,
    named: &[Arc<Pool>],
    now: u64,
    workers: usize,
) -> Result<Pool, ApplyError> {
    let mut pool = Pool::build(l, acls.clone(), old, now);
    pool.server_tls = server_tls(l, old, l.http().is_some())?;
    if !l.routes.is_empty() {
        let routes = Routes::build(
            &l.name,
            &l.routes,
            acls.clone(),
            |name| named.iter().find(|p| p.name == name).cloned(),
            old.and_then(|o| o.routes.as_deref()),
            workers,
        )
        .map_err(ApplyError::Routes)?;
        let mut routes = routes;
        if !l.sites.is_empty() {
            routes.sites = Some(Sites::build(&l.sites, &l.routes, l.unknown_host));
        }
        pool.routes = Some(Arc::new(routes));
    }
    if let (Some(settings), PoolKind::Stream(stream)) = (l.tls(), &mut pool.kind) {
        stream.tls = Some(match old.and_then(|o| o.tls()) {
            Some(was) if was.settings == *settings => was.clone(),
            _ => Arc::new(
                crate::tls::build_server(
                    settings,
                    l.http().is_some(),
                    &crate::tls::tickets::shared_keys(),
                )
                .map_err(|source| ApplyError::Tls {
                    what: l.what(),
                    source,
                })?,
            ),
        });
    }
    Ok(pool)
}

/// A new running listener `l` on `socket`, with counters for `workers` workers.
fn new_listener(
    id: u64,
    l: &ListenerConfig,
    socket: ListenSocket,
    pool: Pool,
    workers: usize,
) -> Listener {
    Listener::new(id, l.name.clone(), l.listen.clone(), socket, pool, workers)
}

impl Controller {
    /// Binds (or inherits) every listener and builds the shared state.
    pub(crate) fn start(
        config: Config,
        clock: Clock,
        max_sessions: u64,
        inherited: &mut Vec<Inherited>,
    ) -> Result<Controller, RunError> {
        let now = clock.now_ms();
        let acls = Arc::new(config.global.acls.clone());
        let named = named_pools(&config, &acls, &[], now).map_err(RunError::Apply)?;
        let mut listeners = Vec::new();
        for (id, l) in config.listeners.iter().enumerate() {
            let socket = open_socket(l, &config.global, inherited).map_err(RunError::Apply)?;
            let pool = listener_pool(l, &acls, None, &named, now, config.global.workers)
                .map_err(RunError::Apply)?;
            let workers = config.global.workers;
            listeners.push(Arc::new(new_listener(id as u64, l, socket, pool, workers)));
        }
        let shared = Arc::new(Shared::new(clock, listeners, max_sessions, &config.global));
        *shared.access_log.lock().unwrap_or_else(|e| e.into_inner()) = LogPlan::new(&config);
        shared.pools.store(Arc::new(named));
        let loaded = config.clone();
        let mut config = config;
        clear_blacklists(&mut config);
        Ok(Controller {
            shared,
            started_per_worker: config.global.listen_per_worker,
            state: Mutex::new(State {
                next_listener_id: config.listeners.len() as u64,
                config,
                loaded,
            }),
            rebuild: None,
            events: None,
        })
    }

    /// Sets where lifecycle requests (`exit`, handover) go, and how reloads rebuild.
    pub(crate) fn with_events(mut self, events: mpsc::Sender<Msg>) -> Controller {
        self.events = Some(events);
        self
    }

    pub(crate) fn with_rebuild(mut self, rebuild: Option<Rebuild>) -> Controller {
        self.rebuild = rebuild;
        self
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A copy of the running configuration.
    pub(crate) fn config(&self) -> Config {
        self.lock().config.clone()
    }

    /// Applies one setting command to the running configuration.
    pub(crate) fn set(&self, listener: Option<&str>, cmd: &Command) -> Result<Applied, ApplyError> {
        self.set_to(listener, None, cmd)
    }

    /// Applies one setting command to a listener or, with `pool`, to a named pool.
    pub(crate) fn set_to(
        &self,
        listener: Option<&str>,
        pool: Option<&str>,
        cmd: &Command,
    ) -> Result<Applied, ApplyError> {
        let mut st = self.lock();
        let mut next = st.config.clone();
        next.apply_to(listener, pool, cmd)?;
        next.validate()?;
        // `log PATH` naming a log already open reopens it (after a `mv`, as logrotate does).
        let reopen = matches!(cmd, Command::Log(Some(p))
            if LogPlan::new(&st.config).files.iter().any(|(f, _)| f == p));
        let applied = self.apply(&mut st, next)?;
        if reopen {
            self.reopen();
        }
        Ok(applied)
    }

    /// Rebuilds the configuration from its sources and applies the difference, keeping what
    /// was changed at run time and not changed since in the sources. An invalid new
    /// configuration changes nothing.
    pub(crate) fn reload(&self) -> Result<Applied, ApplyError> {
        let Some(rebuild) = &self.rebuild else {
            self.reopen();
            return Ok(Applied::new(vec![Note::NothingToReload], true));
        };
        let sources = rebuild()?;
        let mut st = self.lock();
        let next = merge::merge(&st.loaded, &st.config, &sources);
        next.validate()?;
        let applied = self.apply(&mut st, next)?;
        st.loaded = sources;
        self.reopen();
        Ok(applied)
    }

    /// Applies the commands of a file (`include`) as one change. The file (a regular file, at
    /// most 4 MiB, opened nonblocking) is read before the lock is taken, so a slow one holds up
    /// only this caller; errors never quote its lines.
    pub(crate) fn include(&self, path: &std::path::Path) -> Result<Applied, ApplyError> {
        let file = CommandFile::read(path, Quoting::Never)?;
        let mut st = self.lock();
        let mut next = st.config.clone();
        next.apply_commands(&file)?;
        next.validate()?;
        self.apply(&mut st, next)
    }

    /// Reopens the access log at its path (SIGUSR2, `reopen`, and after every reload): for log
    /// rotation, without touching the configuration. Each worker reopens its own handle.
    pub(crate) fn reopen(&self) {
        self.shared.log_generation.fetch_add(1, Ordering::Relaxed);
        self.shared.wake_all();
    }

    /// The access log files now in use (for the `reopen` reply).
    pub(crate) fn access_logs(&self) -> Vec<std::path::PathBuf> {
        LogPlan::new(&self.lock().config)
            .files
            .into_iter()
            .map(|(path, _)| path)
            .collect()
    }

    /// Applies `next` in place of the running configuration: plans the change, opens the new
    /// access logs, binds the new sockets and builds every pool (a failure so far changes
    /// nothing), then swaps. Returns what changed.
    fn apply(&self, st: &mut State, mut next: Config) -> Result<Applied, ApplyError> {
        if self.shared.phase() != Phase::Running {
            // Draining has emptied the listener list: a change now would bind them all again.
            return Err(ApplyError::Stopping);
        }
        let current = self.shared.listeners.load_full();
        let plan = Plan::between(&st.config, &next, &self.running(&current))?;
        for path in &plan.new_logs {
            check_access_log(path)?;
        }
        let built = self.build(&plan, &next, &current)?;
        let notes = self.swap(st, plan, &next, built);
        clear_blacklists(&mut next);
        let changed = st.config != next;
        st.config = next;
        Ok(Applied::new(notes, changed))
    }

    /// The running listeners as the plan sees them.
    fn running<'a>(&self, current: &'a [Arc<Listener>]) -> Vec<Running<'a>> {
        current
            .iter()
            .map(|c| {
                let pool = c.load_pool();
                Running {
                    name: &c.name,
                    addr: &c.addr,
                    udp: c.socket.udp().is_some(),
                    options: SocketOptions {
                        nodelay: pool.tuning.tcp_nodelay,
                        keepalive: pool.tuning.keepalive,
                        defer: pool.defers_accept(),
                    },
                    file: c.socket.path().filter(|p| !self.shared.is_systemd_file(p)),
                }
            })
            .collect()
    }

    /// Binds the sockets `plan` asks for, then builds the named pools and every listener's pool
    /// (each from the running pool of its name). Nothing running changes if this fails.
    fn build(
        &self,
        plan: &Plan,
        next: &Config,
        current: &[Arc<Listener>],
    ) -> Result<Built, ApplyError> {
        let now = self.shared.clock.now_ms();
        // New sockets first: if one cannot be bound, nothing has changed yet.
        let mut sockets = Vec::with_capacity(plan.listeners.len());
        // New sockets follow the running worker count and layout (see `started_per_worker`).
        let mut running = next.global.clone();
        running.workers = self.shared.counters.len();
        running.listen_per_worker = self.started_per_worker;
        for (step, l) in plan.listeners.iter().zip(&next.listeners) {
            sockets.push(match step.socket {
                Socket::Keep { running, options } => Ready::Kept {
                    listener: current[running].clone(),
                    options,
                },
                Socket::Bind => Ready::Fresh(open_socket(l, &running, &mut Vec::new())?),
            });
        }
        let acls = Arc::new(next.global.acls.clone());
        // Named pools first: the listeners' routes point at them.
        let named = named_pools(next, &acls, &self.shared.pools.load_full(), now)?;
        // Every route is compiled before anything is swapped: a failure changes nothing.
        let workers = self.shared.counters.len();
        let pools = next
            .listeners
            .iter()
            .map(|l| {
                let was = current
                    .iter()
                    .find(|c| c.name == l.name)
                    .map(|c| c.load_pool_full());
                listener_pool(l, &acls, was.as_deref(), &named, now, workers)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Built {
            sockets,
            pools,
            named,
        })
    }

    /// Puts what `build` made in place of what runs, as `plan` says; returns the notes.
    fn swap(&self, st: &mut State, plan: Plan, next: &Config, built: Built) -> Vec<Note> {
        let listeners_change = plan.listeners_change();
        let mut notes = plan.before;
        let workers = self.shared.counters.len();
        let mut list = Vec::with_capacity(next.listeners.len());
        let each = plan
            .listeners
            .into_iter()
            .zip(built.sockets)
            .zip(built.pools);
        for (((step, ready), pool), l) in each.zip(&next.listeners) {
            notes.extend(step.notes);
            list.push(match ready {
                Ready::Kept { listener, options } => {
                    if let Some(o) = options {
                        if let Err(error) =
                            listener
                                .socket
                                .set_inherited_options(o.nodelay, o.keepalive, o.defer)
                        {
                            let listener = l.name.clone();
                            notes.push(Note::SocketOptions { listener, error });
                        }
                    }
                    listener.set_pool(Arc::new(pool));
                    listener
                }
                // A listener that moved keeps its servers' state (its pool was built from the
                // old one of its name).
                Ready::Fresh(socket) => {
                    let id = st.next_listener_id;
                    st.next_listener_id += 1;
                    Arc::new(new_listener(id, l, socket, pool, workers))
                }
            });
        }
        for path in plan.removed.iter().filter_map(|r| r.unlink.as_deref()) {
            crate::listener::remove_socket_file(path);
        }
        notes.extend(plan.after);
        self.shared.pools.store(Arc::new(built.named));
        if listeners_change {
            self.shared.listeners.store(Arc::new(list));
        }
        if let Some(n) = plan.conn_max {
            self.shared
                .max_sessions
                .store(u64::from(n), Ordering::Relaxed);
        }
        if let Some(logs) = plan.logs {
            *self
                .shared
                .access_log
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = logs;
            self.shared.log_generation.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(level) = plan.debug {
            crate::log::set_level(level);
        }
        self.shared.wake_all();
        notes
    }

    /// The `-w` file Pen's HTML report is written to, if one is set (`status::write_file`).
    pub(crate) fn status_file(&self) -> Option<std::path::PathBuf> {
        self.lock().config.global.status_file.clone()
    }

    /// Asks the main thread for something (`exit`, handover).
    pub(crate) fn send(&self, msg: Msg) {
        if let Some(tx) = &self.events {
            let _ = tx.send(msg);
        }
    }
}

/// What a discovery answer changed in a pool: the servers that came and went.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Discovered {
    pub added: Vec<crate::addr::BackendAddr>,
    pub removed: Vec<crate::addr::BackendAddr>,
}

impl Controller {
    /// Puts the servers `found` in DNS in place of those of listener (or, with `pool`, named
    /// pool) `name`, if it still follows `discovery` (a reload may have changed it meanwhile):
    /// the same path as a `quill ctl` change, so a server that leaves drains (its sessions hold
    /// the pool they started with) and one that arrives in a checked pool starts down until it
    /// passes. Servers that stay keep their place (`server N` goes on naming them) and what the
    /// operator set on them (limits, ACL, drain or disable); their weight and priority follow
    /// the SRV records. An empty `found` changes nothing.
    pub(crate) fn discovered(
        &self,
        name: &str,
        pool: bool,
        discovery: &crate::config::model::Discovery,
        found: &[quill_core::dns::lookup::Found],
    ) -> Result<Discovered, ApplyError> {
        use crate::addr::{BackendAddr, ServerSpec};
        if found.is_empty() {
            return Ok(Discovered::default());
        }
        let mut st = self.lock();
        let mut next = st.config.clone();
        let list = if pool {
            &mut next.pools
        } else {
            &mut next.listeners
        };
        let Some(l) = list
            .iter_mut()
            .find(|l| l.name == name && l.discovery.as_ref() == Some(discovery))
        else {
            return Ok(Discovered::default());
        };
        let spec_of = |f: &quill_core::dns::lookup::Found, old: Option<&ServerSpec>| {
            let mut s = old
                .cloned()
                .unwrap_or_else(|| ServerSpec::new(BackendAddr::Tcp(f.addr)));
            // SRV weight 0 ("very small chance", RFC 2782) would mean "never" in Pen's modes.
            s.weight = u32::from(f.weight).clamp(1, crate::addr::MAX_WEIGHT);
            s.prio = u32::from(f.priority).min(crate::addr::MAX_WEIGHT);
            s.identity = f.identity.clone();
            s
        };
        let is_found = |a: &BackendAddr| matches!(a, BackendAddr::Tcp(t) if found.iter().any(|f| f.addr == *t));
        let mut out = Discovered::default();
        let mut servers: Vec<ServerSpec> = Vec::with_capacity(found.len());
        for s in &l.servers {
            match &s.addr {
                BackendAddr::Tcp(t) if is_found(&s.addr) => {
                    if let Some(f) = found.iter().find(|f| f.addr == *t) {
                        servers.push(spec_of(f, Some(s)));
                    }
                }
                _ => out.removed.push(s.addr.clone()),
            }
        }
        for f in found {
            if !servers.iter().any(|s| s.addr == BackendAddr::Tcp(f.addr)) {
                servers.push(spec_of(f, None));
                out.added.push(BackendAddr::Tcp(f.addr));
            }
        }
        if servers == l.servers {
            return Ok(out);
        }
        l.servers = servers;
        next.validate()?;
        self.apply(&mut st, next)?;
        Ok(out)
    }
}

/// `initial_blacklist` is an instruction for the first pool built (`-b` at start): once applied,
/// the running configuration no longer holds it.
fn clear_blacklists(config: &mut Config) {
    for l in config.listeners.iter_mut().chain(&mut config.pools) {
        l.initial_blacklist.clear();
    }
}

/// `tls reload [NAME]`.
impl Controller {
    /// Re-reads the certificate, key, OCSP, CA, CRL and ticket-key files of listener `name`'s TLS
    /// (every TLS listener's without a name) and applies the result as a reload would: new
    /// handshakes get the new files, established sessions keep theirs. A file that cannot be
    /// read or used changes nothing, and the error names it. A listener with `sni_path` takes
    /// its certificates from the sources rebuilt (the directory read again); its other files are
    /// re-read by path.
    pub(crate) fn tls_reload(&self, name: Option<&str>) -> Result<Applied, ApplyError> {
        let running = self.config();
        if let Some(n) = name {
            match running.listeners.iter().find(|l| l.name == n) {
                None => return Err(ApplyError::NoListener(n.to_string())),
                Some(l) if l.tls().is_none() => return Err(ApplyError::NotTls(n.to_string())),
                Some(_) => {}
            }
        }
        let chosen: Vec<&ListenerConfig> = running
            .listeners
            .iter()
            .filter(|l| l.tls().is_some() && name.is_none_or(|n| n == l.name))
            .collect();
        if chosen.is_empty() {
            return Ok(Applied::new(vec![Note::NoTlsListener], true));
        }
        let fresh = self.reread(&chosen)?;
        let mut st = self.lock();
        let mut next = st.config.clone();
        let mut reread = Vec::new();
        for (lname, was, now) in &fresh {
            // A change that came in meanwhile wins over what was read here.
            let same = |l: &&mut ListenerConfig| l.name == *lname && l.tls() == Some(was);
            if let Some(l) = next.listeners.iter_mut().find(same) {
                l.set_tls(Some(now.clone()));
                reread.push(lname.clone());
            }
        }
        let mut applied = self.apply(&mut st, next)?;
        // The sources' files are the ones just read: a later reload that finds them unchanged
        // keeps them.
        for (lname, was, now) in fresh {
            let same = |l: &&mut ListenerConfig| l.name == lname && l.tls() == Some(&was);
            if let Some(l) = st.loaded.listeners.iter_mut().find(same) {
                l.set_tls(Some(now));
            }
        }
        applied.notes.insert(0, Note::Reread(reread));
        Ok(applied)
    }

    /// The TLS settings of each of `chosen` read again and checked to build: (name, the
    /// settings before, the settings now).
    fn reread(&self, chosen: &[&ListenerConfig]) -> Result<Vec<Reread>, ApplyError> {
        let sources = match &self.rebuild {
            Some(rebuild) if chosen.iter().any(|l| has_sni_path(l)) => Some(rebuild()?),
            _ => None,
        };
        let mut fresh = Vec::new();
        for l in chosen {
            let Some(was) = l.tls() else { continue };
            let from_sources = sources
                .as_ref()
                .and_then(|c| c.listeners.iter().find(|s| s.name == l.name))
                .and_then(|s| s.tls());
            let now = reread_tls(was, from_sources).map_err(ApplyError::TlsFiles)?;
            crate::tls::build_server(
                &now,
                l.http().is_some(),
                &crate::tls::tickets::shared_keys(),
            )
            .map_err(ApplyError::TlsFiles)?;
            fresh.push((l.name.clone(), was.clone(), now));
        }
        Ok(fresh)
    }
}

/// A listener's TLS settings re-read: its name, the settings before and after.
type Reread = (String, crate::tls::TlsSettings, crate::tls::TlsSettings);

fn has_sni_path(l: &ListenerConfig) -> bool {
    l.tls().is_some_and(|t| t.sni_path.is_some())
}

/// `settings` with every file read again; with `sni_path`, the certificates of `sources` (the
/// same listener's settings rebuilt from the configuration's sources) when given.
fn reread_tls(
    settings: &crate::tls::TlsSettings,
    sources: Option<&crate::tls::TlsSettings>,
) -> Result<crate::tls::TlsSettings, crate::tls::TlsError> {
    use crate::tls::FileData;
    let again = |f: &FileData| FileData::read(&f.path);
    let mut out = settings.clone();
    match sources {
        Some(s) if settings.sni_path.is_some() => out.certs = s.certs.clone(),
        _ => {
            for c in &mut out.certs {
                c.cert = again(&c.cert)?;
                c.key = again(&c.key)?;
                if let Some(o) = &c.ocsp {
                    c.ocsp = Some(again(o)?);
                }
            }
        }
    }
    if let Some(auth) = &mut out.client_auth {
        // The directory is listed again (a CA added or removed there counts); the other files
        // are re-read by path.
        if let Some(dir) = &auth.ca_dir {
            auth.ca.retain(|f| !f.path.starts_with(dir));
        }
        for f in auth.ca.iter_mut().chain(auth.crls.iter_mut()) {
            *f = again(f)?;
        }
        if let Some(dir) = &auth.ca_dir {
            auth.ca.extend(crate::tls::certs::read_ca_dir(dir)?);
        }
    }
    if let Some(keys) = &out.ticket_keys {
        out.ticket_keys = Some(again(keys)?);
    }
    Ok(out)
}

/// Opens the access log a change names, as the workers will, so that a file that cannot be
/// opened (a missing directory, a directory, a FIFO nobody reads) is an error and changes nothing
/// instead of a warning after the fact. Nonblocking: a FIFO never holds the caller.
fn check_access_log(path: &std::path::Path) -> Result<(), ApplyError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .map(drop)
        .map_err(|source| ApplyError::AccessLog {
            path: path.to_path_buf(),
            source,
        })
}

#[cfg(test)]
#[path = "controller_tests.rs"]
mod tests;
