//! Several hosts out of network namespaces, for tests and benchmarks that need more than loopback
//! (transparent proxying, direct server return). A [`Lab`] creates namespaces with unique names
//! (`q<pid>n<k><role>`), joins them with veth pairs or a bridge, runs processes inside them
//! (`ip netns exec`, stopped by PID) and opens sockets inside them from a thread that entered the
//! namespace (`quill_core::sys::enter_netns`). Only private addresses are used (10.x). Dropping
//! the lab, also on a panic, kills its processes and deletes its namespaces, which removes every
//! interface inside them.
//!
//! [`Lab::new`] fails when the kernel or the user may not create namespaces: the test then prints
//! "skipped: ..." and passes (see [`lab_or_skip`]).

use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// One process started in a namespace: killed by PID when the lab is dropped.
pub struct NsChild {
    pub child: Child,
    pub stderr: PathBuf,
}

impl NsChild {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The exit status if the process has ended.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

pub struct Lab {
    prefix: String,
    namespaces: Vec<String>,
    pub children: Vec<NsChild>,
    pub dir: tempfile::TempDir,
}

/// A lab, or None after printing why the test is skipped.
pub fn lab_or_skip(test: &str) -> Option<Lab> {
    match Lab::new() {
        Ok(lab) => Some(lab),
        Err(why) => {
            println!("skipped: {test}: network namespaces unavailable: {why}");
            eprintln!("skipped: {test}: network namespaces unavailable: {why}");
            None
        }
    }
}

fn run(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Lab {
    /// A new, empty lab; Err when `ip netns add` is refused (not root, no netns support).
    pub fn new() -> Result<Lab, String> {
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let mut lab = Lab {
            prefix: format!("q{}n{k}", std::process::id()),
            namespaces: Vec::new(),
            children: Vec::new(),
            dir: tempfile::Builder::new()
                .prefix("quill-ns")
                .tempdir_in("/tmp")
                .map_err(|e| e.to_string())?,
        };
        // The probe: the first namespace. Its failure is the reason to skip.
        lab.try_ns("probe")?;
        Ok(lab)
    }

    fn try_ns(&mut self, role: &str) -> Result<String, String> {
        let name = format!("{}{role}", self.prefix);
        run(&["ip", "netns", "add", &name])?;
        self.namespaces.push(name.clone());
        run(&["ip", "-n", &name, "link", "set", "lo", "up"])?;
        Ok(name)
    }

    /// A new namespace (loopback up); its full name.
    pub fn ns(&mut self, role: &str) -> String {
        self.try_ns(role).expect("create namespace")
    }

    /// `ip -n NS ARGS...`; panics with ip's message on failure.
    pub fn ip(&self, ns: &str, args: &[&str]) {
        let mut all = vec!["ip", "-n", ns];
        all.extend_from_slice(args);
        run(&all).expect("ip");
    }

    /// `ip netns exec NS CMD...` to completion; panics on failure.
    pub fn exec(&self, ns: &str, cmd: &[&str]) {
        let mut all = vec!["ip", "netns", "exec", ns];
        all.extend_from_slice(cmd);
        run(&all).expect("ip netns exec");
    }

    /// `ip netns exec NS CMD...`'s standard output; panics on failure.
    pub fn output(&self, ns: &str, cmd: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(cmd)
            .stdin(Stdio::null())
            .output()
            .expect("ip netns exec");
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// An interface counter inside `ns` (`rx_bytes`, `tx_packets`, ...).
    pub fn counter(&self, ns: &str, ifname: &str, name: &str) -> u64 {
        let path = format!("/sys/class/net/{ifname}/statistics/{name}");
        self.output(ns, &["cat", &path]).parse().expect("counter")
    }

    /// A sysctl inside `ns` (`net.ipv4.ip_forward=1` style).
    pub fn sysctl(&self, ns: &str, setting: &str) {
        self.exec(ns, &["sysctl", "-qw", setting]);
    }

    /// A veth pair: `a_if` in `a_ns` with `a_addr` (CIDR, or "" for none), `b_if` in `b_ns` with
    /// `b_addr`; both up.
    pub fn veth(&self, a_ns: &str, a_if: &str, a_addr: &str, b_ns: &str, b_if: &str, b_addr: &str) {
        run(&[
            "ip", "link", "add", a_if, "netns", a_ns, "type", "veth", "peer", "name", b_if,
            "netns", b_ns,
        ])
        .expect("veth pair");
        for (ns, ifname, addr) in [(a_ns, a_if, a_addr), (b_ns, b_if, b_addr)] {
            if !addr.is_empty() {
                self.ip(ns, &["addr", "add", addr, "dev", ifname]);
            }
            self.ip(ns, &["link", "set", ifname, "up"]);
        }
    }

    /// A bridge `br0` in namespace `hub`, with one veth per member: `(ns, ifname, addr)`; the
    /// bridge end of member i is `p<i>` in `hub`.
    pub fn bridge(&self, hub: &str, members: &[(&str, &str, &str)]) {
        self.ip(hub, &["link", "add", "name", "br0", "type", "bridge"]);
        self.ip(hub, &["link", "set", "br0", "up"]);
        for (i, (ns, ifname, addr)) in members.iter().enumerate() {
            let port = format!("p{i}");
            self.veth(ns, ifname, addr, hub, &port, "");
            self.ip(hub, &["link", "set", &port, "master", "br0"]);
        }
    }

    /// Starts `cmd` inside `ns` (stdout discarded, stderr to a file); its index in `children`.
    pub fn spawn(&mut self, ns: &str, cmd: &[&str]) -> usize {
        let i = self.children.len();
        let stderr = self.dir.path().join(format!("child{i}.err"));
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(cmd)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("spawn in namespace");
        self.children.push(NsChild { child, stderr });
        i
    }

    /// Runs `f` on a thread inside `ns`: sockets it opens belong to `ns` and keep it.
    pub fn within<T: Send + 'static>(&self, ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{ns}");
        thread::spawn(move || {
            let file = File::open(&path).expect("open namespace");
            quill_core::sys::enter_netns(file.as_fd()).expect("setns");
            f()
        })
        .join()
        .expect("thread in namespace")
    }

    /// Connects from `ns` to `addr` until it works (bounded by `within`), checking that child
    /// `watch` is still running; the connected stream.
    pub fn wait_listening(&mut self, ns: &str, addr: SocketAddr, watch: usize) -> TcpStream {
        let deadline = Instant::now() + Duration::from_secs(10);
        for _ in 0..1000 {
            if let Some(st) = self.children[watch].exited() {
                panic!(
                    "process exited ({st}); stderr:\n{}",
                    self.children[watch].stderr()
                );
            }
            let got = self.within(ns, move || {
                TcpStream::connect_timeout(&addr, Duration::from_millis(300))
            });
            if let Ok(s) = got {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "nothing listening on {addr} in {ns}; stderr:\n{}",
                self.children[watch].stderr()
            );
            thread::sleep(Duration::from_millis(20));
        }
        panic!("readiness loop exhausted");
    }

    /// Kills child `i` (by PID) and reaps it.
    pub fn stop(&mut self, i: usize) {
        let c = &mut self.children[i].child;
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.child.kill();
            let _ = c.child.wait();
        }
        for ns in self.namespaces.iter().rev() {
            let _ = run(&["ip", "netns", "del", ns]);
        }
    }
}
