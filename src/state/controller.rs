//! The running configuration and the one way it changes: a new `Config` (from a control command or
//! a reload) is compared with the running one and the difference is applied in place. Servers that
//! stay keep their sessions, counters, blacklist and health; listeners that stay keep their socket;
//! new listeners are bound before anything changes, so a reload that cannot bind changes nothing.
//! Established sessions are never touched: they hold the pool snapshot they started with.
//! A reload keeps what the operator changed at run time unless the sources changed the same
//! setting (see [`super::merge`]); logs can be reopened without a reload ([`Controller::reopen`]).

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};

use arc_swap::ArcSwap;

use super::shared::{Listener, Phase, Shared};
use super::{merge, Msg, Rebuild, RunError};
use crate::acl::Acls;
use crate::backend::{Pool, PoolKind, Routes};
use crate::clock::Clock;
use crate::command::{Command, CommandFile, Quoting};
use crate::config::{Config, Global, ListenerConfig};
use crate::listener::{self, BindOptions, ListenSocket};
use crate::log::LogPlan;
use crate::metrics::HttpStats;
use crate::systemd::Inherited;

pub(crate) struct Controller {
    shared: Arc<Shared>,
    state: Mutex<State>,
    rebuild: Option<Rebuild>,
    events: Option<mpsc::Sender<Msg>>,
}

struct State {
    config: Config,
    /// What the sources said at the last load (start or reload): a reload compares the sources
    /// with it to tell their changes from the operator's.
    loaded: Config,
    next_listener_id: u64,
}

fn bind_options(g: &Global, l: &ListenerConfig) -> BindOptions {
    BindOptions {
        backlog: g.backlog,
        reuseport: g.reuseport,
        tfo: g.tfo,
        nodelay: l.tuning.tcp_nodelay,
        keepalive: l.tuning.keepalive,
        udp_sockets: if l.udp().is_some() {
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
) -> Result<ListenSocket, String> {
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
        return listener::bind_udp(*at, bind_options(g, l).udp_sockets, &taken)
            .map_err(|e| format!("cannot bind UDP {}: {e}", l.listen));
    }
    let mut i = 0;
    while i < inherited.len() {
        let by_name = inherited[i].name.as_deref() == Some(l.name.as_str());
        let fd = inherited[i]
            .fd
            .try_clone()
            .map_err(|e| format!("listener '{}': {e}", l.name))?;
        match listener::from_fd(fd) {
            Ok((socket, addr)) if by_name || addr == l.listen => {
                inherited.remove(i);
                set_inherited_options(&socket, &bind_options(g, l));
                return Ok(socket);
            }
            Ok(_) => i += 1,
            Err(e) if by_name => {
                return Err(format!("inherited socket '{}': {e}", l.name));
            }
            Err(_) => i += 1,
        }
    }
    listener::bind(&l.listen, &bind_options(g, l))
        .map_err(|e| format!("cannot listen on {}: {e}", l.listen))
}

/// Sets on a socket systemd (or the previous process) bound the options that accepted clients
/// inherit, as `listener::bind` does: without them every client of a socket-activated listener
/// would run with Nagle's algorithm on. Failures only cost that, so they are logged.
fn set_inherited_options(socket: &ListenSocket, o: &BindOptions) {
    if let ListenSocket::Tcp(_) = socket {
        let s = socket2::SockRef::from(socket);
        let result = s.set_tcp_nodelay(o.nodelay).and_then(|()| {
            if o.keepalive {
                s.set_keepalive(true)
            } else {
                Ok(())
            }
        });
        if let Err(e) = result {
            tracing::warn!("cannot set options on an inherited socket: {e}");
        }
    }
}

/// Builds the named pools of `config`, each keeping the state of the old pool of its name (its
/// servers by address, as a listener's pool does across a reload).
fn named_pools(
    config: &Config,
    acls: &Arc<Acls>,
    old: &[Arc<Pool>],
    now: u64,
) -> Result<Vec<Arc<Pool>>, String> {
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
) -> Result<Option<Arc<crate::tls::client::ClientTls>>, String> {
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
        .map_err(|e| format!("{}: {e}", l.what()))
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
) -> Result<Pool, String> {
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
        )?;
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
                .map_err(|e| format!("{}: {e}", l.what()))?,
            ),
        });
    }
    Ok(pool)
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
        let named = named_pools(&config, &acls, &[], now).map_err(RunError)?;
        let mut listeners = Vec::new();
        for (id, l) in config.listeners.iter().enumerate() {
            let socket = open_socket(l, &config.global, inherited).map_err(RunError)?;
            let pool = listener_pool(l, &acls, None, &named, now, config.global.workers)
                .map_err(RunError)?;
            listeners.push(Arc::new(Listener {
                id: id as u64,
                name: l.name.clone(),
                addr: l.listen.clone(),
                socket,
                pool: ArcSwap::from_pointee(pool),
                http: Arc::new(HttpStats::new(config.global.workers)),
                flows: Default::default(),
                flow_sources: Default::default(),
            }));
        }
        let shared = Arc::new(Shared::new(clock, listeners, max_sessions, &config.global));
        *shared.access_log.lock().unwrap_or_else(|e| e.into_inner()) = LogPlan::new(&config);
        shared.pools.store(Arc::new(named));
        let loaded = config.clone();
        let mut config = config;
        for l in config.listeners.iter_mut().chain(&mut config.pools) {
            l.initial_blacklist.clear();
        }
        Ok(Controller {
            shared,
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
    pub(crate) fn set(&self, listener: Option<&str>, cmd: &Command) -> Result<String, String> {
        self.set_to(listener, None, cmd)
    }

    /// Applies one setting command to a listener or, with `pool`, to a named pool.
    pub(crate) fn set_to(
        &self,
        listener: Option<&str>,
        pool: Option<&str>,
        cmd: &Command,
    ) -> Result<String, String> {
        let mut st = self.lock();
        let mut next = st.config.clone();
        next.apply_to(listener, pool, cmd).map_err(|e| e.message)?;
        next.validate().map_err(|e| e.message)?;
        // `log PATH` naming a log already open reopens it (after a `mv`, as logrotate does).
        let reopen = matches!(cmd, Command::Log(Some(p))
            if LogPlan::new(&st.config).files.iter().any(|(f, _)| f == p));
        let summary = self.apply(&mut st, next)?;
        if reopen {
            self.reopen();
        }
        Ok(summary)
    }

    /// Rebuilds the configuration from its sources and applies the difference, keeping what
    /// was changed at run time and not changed since in the sources. An invalid new
    /// configuration changes nothing.
    pub(crate) fn reload(&self) -> Result<String, String> {
        let Some(rebuild) = &self.rebuild else {
            self.reopen();
            return Ok("nothing to reload from; logs reopened".into());
        };
        let sources = rebuild().map_err(|e| e.message)?;
        let mut st = self.lock();
        let next = merge::merge(&st.loaded, &st.config, &sources);
        next.validate().map_err(|e| e.message)?;
        let summary = self.apply(&mut st, next)?;
        st.loaded = sources;
        self.reopen();
        Ok(summary)
    }

    /// Applies the commands of a file (`include`) as one change. The file (a regular file, at
    /// most 4 MiB, opened nonblocking) is read before the lock is taken, so a slow one holds up
    /// only this caller; errors never quote its lines.
    pub(crate) fn include(&self, path: &std::path::Path) -> Result<String, String> {
        let file = CommandFile::read(path, Quoting::Never).map_err(|e| e.message)?;
        let mut st = self.lock();
        let mut next = st.config.clone();
        next.apply_commands(&file).map_err(|e| e.message)?;
        next.validate().map_err(|e| e.message)?;
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

    /// Applies `next` in place of the running configuration; returns what changed, in words.
    fn apply(&self, st: &mut State, mut next: Config) -> Result<String, String> {
        if self.shared.phase() != Phase::Running {
            // Draining has emptied the listener list: a change now would bind them all again.
            return Err("stopping: the configuration no longer changes".into());
        }
        if let Some(l) = next.listeners.iter().find(|l| l.dsr().is_some()) {
            return Err(format!(
                "{}: dsr_if: direct server return starts with the process, not in a running proxy (restart Quill)",
                l.what()
            ));
        }
        let old = &st.config;
        let (old_logs, next_logs) = (LogPlan::new(old), LogPlan::new(&next));
        for (path, _) in &next_logs.files {
            if !old_logs.files.iter().any(|(p, _)| p == path) {
                check_access_log(path)?;
            }
        }
        let now = self.shared.clock.now_ms();
        let mut notes = Vec::new();
        let (a, b) = (&old.global, &next.global);
        for (changed, what) in [
            (a.workers != b.workers, "workers"),
            (a.backlog != b.backlog, "backlog"),
            (a.tfo != b.tfo, "tfo"),
            (a.reuseport != b.reuseport, "reuseport"),
            (a.splice != b.splice, "splice"),
            (a.user != b.user, "user"),
            (a.chroot != b.chroot, "chroot"),
            (a.pid_file != b.pid_file, "pid_file"),
            (a.control != b.control, "control"),
            (a.admin != b.admin, "admin"),
            (a.accept_batch != b.accept_batch, "accept_batch"),
        ] {
            if changed {
                notes.push(format!("{what} changed: takes effect at the next restart"));
            }
        }
        // New sockets first: if one cannot be bound, nothing has changed yet.
        let current = self.shared.listeners.load_full();
        let mut fresh: Vec<(usize, ListenSocket)> = Vec::new();
        for (i, l) in next.listeners.iter().enumerate() {
            let kept = current.iter().any(|c| {
                c.name == l.name
                    && c.addr == l.listen
                    && c.socket.udp().is_some() == l.udp().is_some()
            });
            if !kept {
                let socket = open_socket(l, &next.global, &mut Vec::new())?;
                fresh.push((i, socket));
            }
        }
        let acls = Arc::new(next.global.acls.clone());
        // Named pools first: the listeners' routes point at them.
        let old_named = self.shared.pools.load_full();
        for p in &next.pools {
            if let Some(was) = old.pools.iter().find(|o| o.name == p.name) {
                describe_pool_change(was, p, &mut notes);
            } else {
                notes.push(format!("pool '{}' added", p.name));
            }
        }
        for o in &old.pools {
            if !next.pools.iter().any(|p| p.name == o.name) {
                notes.push(format!("pool '{}' removed", o.name));
            }
        }
        let named = named_pools(&next, &acls, &old_named, now)?;
        // Every route is compiled before anything is swapped: a failure changes nothing.
        let mut built = Vec::with_capacity(next.listeners.len());
        for l in &next.listeners {
            let was = current
                .iter()
                .find(|c| c.name == l.name)
                .map(|c| c.pool.load_full());
            built.push(Some(listener_pool(
                l,
                &acls,
                was.as_deref(),
                &named,
                now,
                self.shared.counters.len(),
            )?));
        }
        let mut list = Vec::new();
        let mut listeners_changed = false;
        for (i, l) in next.listeners.iter().enumerate() {
            let same = current.iter().find(|c| {
                c.name == l.name
                    && c.addr == l.listen
                    && c.socket.udp().is_some() == l.udp().is_some()
            });
            if let Some(was) = old.listeners.iter().find(|o| o.name == l.name) {
                describe_pool_change(was, l, &mut notes);
            }
            match same {
                Some(c) => {
                    let old_pool = c.pool.load();
                    let (t0, t1) = (&old_pool.tuning, &l.tuning);
                    if t0.tcp_nodelay != t1.tcp_nodelay || t0.keepalive != t1.keepalive {
                        if let Err(e) = c.socket.set_inherited_options(t1.tcp_nodelay, t1.keepalive)
                        {
                            notes.push(format!("listener '{}': socket options: {e}", l.name));
                        }
                    }
                    let pool = built[i]
                        .take()
                        .ok_or_else(|| format!("listener '{}': pool missing", l.name))?;
                    c.pool.store(Arc::new(pool));
                    list.push(c.clone());
                }
                None => {
                    let pos = fresh
                        .iter()
                        .position(|(j, _)| *j == i)
                        .ok_or_else(|| format!("listener '{}': socket missing", l.name))?;
                    let (_, socket) = fresh.remove(pos);
                    // A listener that moved keeps its servers' state (its pool was built from
                    // the old one of its name).
                    let pool = built[i]
                        .take()
                        .ok_or_else(|| format!("listener '{}': pool missing", l.name))?;
                    list.push(Arc::new(Listener {
                        id: st.next_listener_id,
                        name: l.name.clone(),
                        addr: l.listen.clone(),
                        socket,
                        pool: ArcSwap::from_pointee(pool),
                        http: Arc::new(HttpStats::new(self.shared.counters.len())),
                        flows: Default::default(),
                        flow_sources: Default::default(),
                    }));
                    st.next_listener_id += 1;
                    listeners_changed = true;
                    notes.push(format!("listener '{}' on {} added", l.name, l.listen));
                }
            }
        }
        for c in current.iter() {
            if !list.iter().any(|l| l.id == c.id) {
                listeners_changed = true;
                notes.push(format!("listener '{}' on {} removed", c.name, c.addr));
                if let Some(path) = c.socket.path() {
                    if !next.listeners.iter().any(|l| l.listen == c.addr)
                        && !self.shared.is_systemd_file(path)
                    {
                        crate::listener::remove_socket_file(path);
                    }
                }
            }
        }
        self.shared.pools.store(Arc::new(named));
        if listeners_changed {
            self.shared.listeners.store(Arc::new(list));
        }
        if a.max_connections != b.max_connections {
            if let Some(n) = b.max_connections {
                self.shared
                    .max_sessions
                    .store(u64::from(n), Ordering::Relaxed);
                notes.push(format!("conn_max {n}"));
            }
        }
        if old_logs != next_logs {
            *self
                .shared
                .access_log
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = next_logs;
            self.shared.log_generation.fetch_add(1, Ordering::Relaxed);
        }
        if a.debug != b.debug {
            crate::log::set_level(b.debug);
            notes.push(format!("debug level {}", b.debug));
        }
        self.shared.wake_all();
        for l in next.listeners.iter_mut().chain(&mut next.pools) {
            l.initial_blacklist.clear();
        }
        let changed = *old != next;
        st.config = next;
        if notes.is_empty() {
            notes.push(if changed { "applied" } else { "no change" }.into());
        }
        Ok(notes.join("; "))
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

/// `tls reload [NAME]`.
impl Controller {
    /// Re-reads the certificate, key, OCSP, CA, CRL and ticket-key files of listener `name`'s TLS
    /// (every TLS listener's without a name) and applies the result as a reload would: new
    /// handshakes get the new files, established sessions keep theirs. A file that cannot be
    /// read or used changes nothing, and the error names it. A listener with `sni_path` takes
    /// its certificates from the sources rebuilt (the directory read again); its other files are
    /// re-read by path.
    pub(crate) fn tls_reload(&self, name: Option<&str>) -> Result<String, String> {
        let running = self.config();
        if let Some(n) = name {
            match running.listeners.iter().find(|l| l.name == n) {
                None => return Err(format!("no listener named '{n}'")),
                Some(l) if l.tls().is_none() => {
                    return Err(format!("listener '{n}' does not terminate TLS"))
                }
                Some(_) => {}
            }
        }
        let chosen: Vec<&ListenerConfig> = running
            .listeners
            .iter()
            .filter(|l| l.tls().is_some() && name.is_none_or(|n| n == l.name))
            .collect();
        if chosen.is_empty() {
            return Ok("no listener terminates TLS".into());
        }
        let sources = match &self.rebuild {
            Some(rebuild) if chosen.iter().any(|l| has_sni_path(l)) => {
                Some(rebuild().map_err(|e| e.message)?)
            }
            _ => None,
        };
        let mut fresh = Vec::new();
        for l in chosen {
            let Some(was) = l.tls() else { continue };
            let from_sources = sources
                .as_ref()
                .and_then(|c| c.listeners.iter().find(|s| s.name == l.name))
                .and_then(|s| s.tls());
            let now = reread_tls(was, from_sources).map_err(|e| e.to_string())?;
            crate::tls::build_server(
                &now,
                l.http().is_some(),
                &crate::tls::tickets::shared_keys(),
            )
            .map_err(|e| e.to_string())?;
            fresh.push((l.name.clone(), was.clone(), now));
        }
        let mut st = self.lock();
        let mut next = st.config.clone();
        let mut reread = Vec::new();
        for (lname, was, now) in &fresh {
            // A change that came in meanwhile wins over what was read here.
            let same = |l: &&mut ListenerConfig| l.name == *lname && l.tls() == Some(was);
            if let Some(l) = next.listeners.iter_mut().find(same) {
                l.set_tls(Some(now.clone()));
                reread.push(format!("'{lname}'"));
            }
        }
        let summary = self.apply(&mut st, next)?;
        // The sources' files are the ones just read: a later reload that finds them unchanged
        // keeps them.
        for (lname, was, now) in fresh {
            let same = |l: &&mut ListenerConfig| l.name == lname && l.tls() == Some(&was);
            if let Some(l) = st.loaded.listeners.iter_mut().find(same) {
                l.set_tls(Some(now));
            }
        }
        Ok(format!(
            "files re-read for listener {}; {summary}",
            reread.join(", ")
        ))
    }
}

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
fn check_access_log(path: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .map(drop)
        .map_err(|e| format!("cannot open access log {}: {e}", path.display()))
}

/// Says in words how a listener's pool changed (for the reply and the log).
fn describe_pool_change(was: &ListenerConfig, now: &ListenerConfig, notes: &mut Vec<String>) {
    // Maps by address: linear, so a pool of 40,000 servers costs no more than its length.
    let before: std::collections::HashMap<_, _> =
        was.servers.iter().rev().map(|o| (&o.addr, o)).collect();
    let after: std::collections::HashSet<_> = now.servers.iter().map(|s| &s.addr).collect();
    for s in &now.servers {
        match before.get(&s.addr) {
            None => notes.push(format!("'{}': server {} added", now.name, s.addr)),
            Some(o) if *o != s => notes.push(format!("'{}': server {} changed", now.name, s.addr)),
            Some(_) => {}
        }
    }
    for o in &was.servers {
        if !after.contains(&o.addr) {
            notes.push(format!("'{}': server {} removed", now.name, o.addr));
        }
    }
    if was.mode != now.mode {
        notes.push(format!("'{}': mode {}", now.name, now.mode));
    }
    if was.tuning != now.tuning
        || was.emergency != now.emergency
        || was.abuse != now.abuse
        || was.client_acl != now.client_acl
        || was.health != now.health
        || was.slow_start != now.slow_start
    {
        notes.push(format!("'{}': settings changed", now.name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{from_toml, TuningPatch};
    use crate::route::Action;

    fn config(port: u16, extra_route: &str) -> Config {
        from_toml(
            "c.toml",
            &format!(
                "[[pool]]\nname = \"api\"\nservers = [\"127.0.0.1:9\", \"127.0.0.1:10\"]\n\
                 [[pool]]\nname = \"web\"\nservers = [\"127.0.0.1:11\"]\n\
                 [[listener]]\nname = \"h\"\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
                 [[listener.route]]\npath = \"/api/\"\npool = \"api\"\n{extra_route}"
            ),
            &TuningPatch::default(),
        )
        .unwrap()
    }

    /// The named pool a listener's route `i` sends to.
    fn routed(c: &Controller, i: usize) -> Arc<Pool> {
        let listeners = c.shared().listeners.load();
        let pool = listeners[0].pool.load();
        match &pool.routes.as_ref().expect("routes").routes[i].action {
            Action::Pool(p) => p.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn named_pools_are_shared_by_routes_and_keep_their_servers_across_changes() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let c =
            Controller::start(config(port, ""), Clock::default(), 100, &mut Vec::new()).unwrap();
        let api = c.shared().pool("api").expect("named pool api");
        assert!(
            Arc::ptr_eq(&routed(&c, 0), &api),
            "the route holds the named pool"
        );
        let server = api.servers[1].clone();
        // A drain through `pool api`: a new snapshot, the same server, now draining.
        let cmd = crate::command::parse("server 1 drain").unwrap();
        c.set_to(None, Some("api"), &cmd).unwrap();
        let api2 = c.shared().pool("api").unwrap();
        assert!(!Arc::ptr_eq(&api, &api2));
        assert!(
            Arc::ptr_eq(&api2.servers[1], &server),
            "same address, same server"
        );
        assert_eq!(server.admin(), crate::addr::AdminState::Drain);
        assert!(
            Arc::ptr_eq(&routed(&c, 0), &api2),
            "routes follow the new snapshot"
        );
        assert!(c.set_to(None, Some("nope"), &cmd).is_err());
        // A new route to the other pool, as a reload would bring.
        let mut st = c.lock();
        let next = config(port, "[[listener.route]]\npool = \"web\"\n");
        let note = c.apply(&mut st, next).unwrap();
        drop(st);
        // The drain was the running state's only; applied directly, the new config undoes it.
        assert!(
            note.contains("'api': server 127.0.0.1:10 changed"),
            "{note}"
        );
        assert!(Arc::ptr_eq(
            &routed(&c, 1),
            &c.shared().pool("web").unwrap()
        ));
        assert!(Arc::ptr_eq(
            &c.shared().pool("api").unwrap().servers[1],
            &server
        ));
    }
}
