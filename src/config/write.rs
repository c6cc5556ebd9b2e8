//! The configuration written back as control commands (the `write` command), in a form a `-F`
//! command file reads back.

use crate::addr::{AdminState, BackendAddr, ServerSpec};
use crate::balancer::ModeWord;

use super::model::{Config, ListenerConfig, ListenerKind, StreamKind, StreamProto};

/// A server's limits in the control language's words: `max M hard H weight W prio P [acl A]`.
pub(crate) fn server_limits(s: &ServerSpec) -> String {
    format!(
        "max {} hard {} weight {} prio {}{}",
        s.max,
        s.hard,
        s.weight,
        s.prio,
        s.acl.map_or(String::new(), |n| format!(" acl {n}"))
    )
}

impl Config {
    /// The settings as control commands, in a form `-F` reads back (the `write` command).
    /// The file is applied over the command line at start and on every reload, so it states
    /// every setting it covers, switched off ones included (`no hash`, `no client_acl`, `no acl
    /// N` before a list's entries): what was turned off at runtime stays off, and lists are not
    /// appended to twice.
    pub(crate) fn to_commands(&self) -> String {
        let g = &self.global;
        let mut out = String::from("# written by quill\n");
        if let Some(n) = g.max_connections {
            out += &format!("conn_max {n}\n");
        }
        for (n, list) in g.acls.iter() {
            out += &format!("no acl {n}\n");
            for e in &list.entries {
                out += &format!("acl {n} {e}\n");
            }
        }
        out += &match g.control_acl {
            Some(n) => format!("control_acl {n}\n"),
            None => "no control_acl\n".into(),
        };
        out += &match &g.log {
            Some(p) => format!("log {}\n", p.display()),
            None => "no log\n".into(),
        };
        out += &match &g.status_file {
            Some(p) => format!("web_stats {}\n", p.display()),
            None => "no web_stats\n".into(),
        };
        let several = self.listeners.len() > 1;
        for l in &self.listeners {
            let prefix = if several {
                format!("listener {} ", l.name)
            } else {
                String::new()
            };
            match &l.kind {
                ListenerKind::Stream(StreamKind {
                    proto: StreamProto::Http(_),
                    ..
                }) => {
                    // `http` keeps an HTTP listener as it is: its HTTP settings come from
                    // its source (`-H`, `protocol = "http"`, `[listener.http]`) on every start
                    // and reload.
                    out += &format!(
                    "# listener {}: HTTP (its HTTP settings come from -H or the TOML file)\n{prefix}http\n",
                    l.name
                );
                }
                ListenerKind::Udp(_) => {
                    // A UDP listener stays UDP: `-U` or `protocol = "udp"` says so at every start.
                    out += &format!(
                        "# listener {}: UDP (its flow settings come from -U or the TOML file)\n",
                        l.name
                    );
                }
                ListenerKind::Stream(_) | ListenerKind::Dsr(_) => {
                    out += &format!("{prefix}no http\n");
                }
            }
            // Always with `listener NAME`: without it, `log` is the process-wide file.
            out += &match &l.log {
                Some(p) => format!("listener {} log {}\n", l.name, p.display()),
                None => format!("listener {} no log\n", l.name),
            };
            if let Some(t) = l.tls() {
                write_tls(&mut out, &prefix, &l.name, t);
            }
            write_pool(&mut out, &prefix, l);
        }
        // Named pools (`[[pool]]`) come from the TOML file; their settings and servers are
        // written as `pool NAME` lines, which `-F` applies over the file.
        for p in &self.pools {
            write_pool(&mut out, &format!("pool {} ", p.name), p);
        }
        out
    }
}

/// A TLS listener's settings that Pen's `ssl_*` commands change, each line after `prefix`. Its
/// certificates, client CAs and the other keys come from their source (`-E`, `tls = { ... }`)
/// on every start and reload, where the files are read again. The commands cannot turn a suite
/// list, TLS 1.3 only or a name directory off, so the file states those only when on; the cipher
/// order is always stated, since either way can be set.
fn write_tls(out: &mut String, prefix: &str, name: &str, t: &crate::tls::TlsSettings) {
    *out += &format!("# listener {name}: TLS (its certificates come from -E or the TOML file)\n");
    if !t.ciphers.is_empty() {
        *out += &format!("{prefix}ssl_ciphers {}\n", t.ciphers.join(":"));
    }
    if t.min_version == crate::tls::TlsVersion::V1_3 {
        *out += &format!("{prefix}ssl_option no_tlsv1.2\n");
    }
    let order = if t.server_cipher_order {
        "cipher_server_preference"
    } else {
        "client_cipher_preference"
    };
    *out += &format!("{prefix}ssl_option {order}\n");
    if let Some(dir) = &t.sni_path {
        *out += &format!("{prefix}ssl_sni_path {}\n", dir.display());
    }
    let default = t.certs.iter().position(|c| c.default).unwrap_or(0);
    if let Some(ocsp) = t.certs.get(default).and_then(|c| c.ocsp.as_ref()) {
        *out += &format!("{prefix}ssl_ocsp_response {}\n", ocsp.path.display());
    }
}

/// The pool settings and servers of a listener or named pool, each line after `prefix`.
fn write_pool(out: &mut String, prefix: &str, l: &ListenerConfig) {
    // Words that are off first: `no p2c` after `leastconn` would reset the base policy.
    let (on, off): (Vec<ModeWord>, Vec<ModeWord>) =
        ModeWord::ALL.into_iter().partition(|w| l.mode.is_set(*w));
    for w in off {
        *out += &format!("{prefix}no {}\n", w.name());
    }
    for w in on {
        *out += &format!("{prefix}{}\n", w.name());
    }
    // A UDP listener has no TCP connection to its clients or servers: the TCP-only settings
    // are left out of its lines rather than written as if it had.
    l.tuning.write(out, prefix, l.udp().is_some());
    if let Some(dsr) = l.dsr() {
        *out += &format!("{prefix}dsr_if {}\n", dsr.ifname());
        if let Some(ip) = dsr.ip {
            *out += &format!("{prefix}dsr_ip {ip}\n");
        }
        if let Some(d) = dsr.wait {
            *out += &format!("{prefix}dsr_wait {}\n", d.as_millis());
        }
        if let Some(n) = dsr.tarpit_acl {
            *out += &format!("{prefix}tarpit_acl {n}\n");
        }
    }
    if !l.is_pool() {
        // A named pool has no clients of its own: the listener's `client_acl` checks them.
        *out += &match l.client_acl {
            Some(n) => format!("{prefix}client_acl {n}\n"),
            None => format!("{prefix}no client_acl\n"),
        };
    }
    if let Some(d) = &l.discovery {
        // The control language has no discovery command: the servers found are written as they
        // are now, and the line says where they came from.
        *out += &format!(
            "# servers found in DNS ({}): as found when written\n",
            d.pen_arg()
        );
    }
    for (i, s) in l.servers.iter().enumerate() {
        let addr = match &s.addr {
            BackendAddr::Tcp(a) => format!("address {} port {}", a.ip(), a.port()),
            other => format!("address {other}"),
        };
        let state = match s.state {
            AdminState::Enabled => String::new(),
            other => format!(" {}", other.name()),
        };
        *out += &format!("{prefix}server {i} {addr} {}{state}\n", server_limits(s));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{from_toml, ConfigError, TuningPatch};

    fn load(text: &str) -> Result<Config, ConfigError> {
        from_toml("q.toml", text, &TuningPatch::default())
    }

    /// A restart: the TOML `text` loaded again, then the `written` commands read with `-F` (from
    /// a temporary file named by `tag`), validated.
    fn read_back(text: &str, written: &str, tag: &str) -> Config {
        let file = std::env::temp_dir().join(format!("quill-write-{tag}-{}", std::process::id()));
        std::fs::write(&file, written).unwrap();
        let mut restarted = load(text).unwrap();
        restarted.apply_file(&file, 0).unwrap();
        let _ = std::fs::remove_file(&file);
        restarted.validate().unwrap();
        restarted
    }

    /// A listener's own access log is written back as `listener NAME log FILE` (one without it
    /// as `listener NAME no log`, the process-wide file), and reads back the same, also when it
    /// was changed over the control socket.
    #[test]
    fn written_commands_keep_each_listeners_own_log() {
        let text = "log = \"/tmp/q-tcp.log\"\n\
                    [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:1\"\nprotocol = \"http\"\n\
                    log = \"/tmp/q-web.log\"\nservers = [\"127.0.0.1:2\"]\n\
                    [[listener]]\nname = \"tcp\"\nlisten = \"127.0.0.1:3\"\nservers = [\"127.0.0.1:2\"]\n";
        let mut running = load(text).unwrap();
        running
            .apply(
                Some("web"),
                &crate::command::parse("log /tmp/q-web2.log").unwrap(),
            )
            .unwrap();
        assert_eq!(
            running.global.log.as_deref(),
            Some(std::path::Path::new("/tmp/q-tcp.log"))
        );
        let written = running.to_commands();
        assert!(
            written.contains("listener web log /tmp/q-web2.log\n"),
            "{written}"
        );
        assert!(written.contains("listener tcp no log\n"), "{written}");
        let restarted = read_back(text, &written, "own-log");
        assert_eq!(restarted, running, "{written}");
    }

    /// An HTTP listener written and read back over its TOML file is still HTTP, with the same
    /// settings; the written file says so in a comment and holds nothing that would change it.
    #[test]
    fn written_commands_keep_an_http_listener_http() {
        let text = "[http]\nmax_body = \"1m\"\n\
                    [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:1\"\nprotocol = \"http\"\n\
                    servers = [\"127.0.0.1:2\"]\n[listener.http]\nresponse_timeout = \"5s\"\n\
                    [[listener]]\nname = \"tcp\"\nlisten = \"127.0.0.1:3\"\nservers = [\"127.0.0.1:2\"]\n";
        let mut running = load(text).unwrap();
        for line in ["server 0 weight 3", "idle_timeout 9"] {
            running
                .apply(Some("web"), &crate::command::parse(line).unwrap())
                .unwrap();
        }
        let written = running.to_commands();
        assert!(written.contains("# listener web: HTTP"), "{written}");
        assert!(!written.contains("# listener tcp: HTTP"), "{written}");
        let restarted = read_back(text, &written, "http");
        assert_eq!(restarted, running, "{written}");
        let web = restarted.listeners[0].http().expect("still HTTP");
        assert_eq!(web.response_timeout, std::time::Duration::from_secs(5));
        assert_eq!(web.max_body, Some(1 << 20));
        assert_eq!(restarted.listeners[1].http(), None);
    }

    /// A named pool's runtime changes (`pool NAME server N drain`) are written as `pool NAME`
    /// lines and read back by `-F`.
    #[test]
    fn written_commands_keep_named_pool_changes() {
        let text = "[[pool]]\nname = \"api\"\nservers = [\"127.0.0.1:5\", \"127.0.0.1:6\"]\n\
                    [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:1\"\nprotocol = \"http\"\n\
                    [[listener.route]]\npool = \"api\"\n";
        let mut running = load(text).unwrap();
        for line in ["server 1 drain", "server 0 weight 4", "roundrobin"] {
            running
                .apply_pool("api", &crate::command::parse(line).unwrap())
                .unwrap();
        }
        assert!(running
            .apply_pool("api", &crate::command::parse("client_acl 1").unwrap())
            .is_err());
        assert!(running
            .apply_pool("nope", &crate::command::parse("server 0 drain").unwrap())
            .is_err());
        let written = running.to_commands();
        assert!(
            written.contains("pool api server 1 address 127.0.0.1 port 6 "),
            "{written}"
        );
        let restarted = read_back(text, &written, "pool");
        assert_eq!(restarted, running, "{written}");
    }

    /// `write` then `-F` over a command line that set other things gives back the written state.
    #[test]
    fn written_commands_read_back_over_other_command_line_settings() {
        let cli = |extra: &[&str]| {
            let mut c = load(
                "[[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:1\"\nmode = [\"roundrobin\"]\n\
                 client_acl = 1\nservers = [\"127.0.0.1:2\", \"[::1]:3\"]\n",
            )
            .unwrap();
            for line in extra {
                c.apply(None, &crate::command::parse(line).unwrap())
                    .unwrap();
            }
            c
        };
        let mut running = cli(&["acl 1 deny 10.0.0.1"]);
        for line in [
            "no roundrobin",
            "leastconn",
            "no client_acl",
            "server 1 weight 3 drain",
        ] {
            running
                .apply(None, &crate::command::parse(line).unwrap())
                .unwrap();
        }
        let dir = std::env::temp_dir().join(format!("quill-write-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("saved.cmds");
        std::fs::write(&file, running.to_commands()).unwrap();
        // The same command line again (its ACL entry included), then the file.
        let mut restarted = cli(&["acl 1 deny 10.0.0.1"]);
        restarted.apply_file(&file, 0).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        for l in &mut restarted.listeners {
            l.initial_blacklist.clear();
        }
        assert_eq!(restarted, running, "{}", running.to_commands());
    }

    /// A DSR listener's `dsr_wait` is written as `dsr_wait MS` and read back by `-F`; one left
    /// at its default is not written.
    #[test]
    fn written_commands_keep_dsr_wait() {
        let text = "[[listener]]\nname = \"d\"\nlisten = \"10.9.0.1:80\"\ndsr_if = \"eth0\"\n\
                    servers = [\"10.9.0.2:80\"]\n";
        assert!(!load(text).unwrap().to_commands().contains("dsr_wait"));
        let mut running = load(text).unwrap();
        running
            .apply(None, &crate::command::parse("dsr_wait 25ms").unwrap())
            .unwrap();
        let written = running.to_commands();
        assert!(written.contains("\ndsr_wait 25\n"), "{written}");
        let restarted = read_back(text, &written, "dsr-wait");
        assert_eq!(restarted, running, "{written}");
        assert_eq!(restarted.listeners[0].dsr_wait_ms(), 25);
    }
}
