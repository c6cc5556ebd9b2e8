//! Pools that follow DNS (`servers = { srv = ... }`, `{ name = ..., port = ... }`, Pen's server
//! arguments `srv:NAME[@RESOLVER]` and `dns:NAME:PORT[@RESOLVER]`): what to ask, whom, and how
//! long a pool keeps its last good set when nobody answers. The asking is `crate::discovery`'s.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use quill_core::dns::lookup::Want;

/// How long a pool whose resolvers fail keeps its servers before it is reported stale
/// (HAProxy's `hold` defaults).
pub(crate) const DEFAULT_HOLD: Duration = Duration::from_secs(30);
/// The longest `hold`.
pub(crate) const MAX_HOLD: Duration = Duration::from_secs(86_400);
/// At most this many resolvers per pool.
pub(crate) const MAX_RESOLVERS: usize = 8;

/// Where a pool's servers come from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Discovery {
    pub want: Want,
    /// Asked in turn (the next after a timeout); empty: the `nameserver` lines of
    /// /etc/resolv.conf, read at each round.
    pub resolvers: Vec<SocketAddr>,
    /// The last good set is kept through failures; after this long it is reported stale (it is
    /// still kept: a pool is never emptied by DNS).
    pub hold: Duration,
}

impl Discovery {
    /// How `quill check`, the status and the logs name it: `SRV NAME` or `NAME:PORT (A/AAAA)`,
    /// with the resolvers.
    pub(crate) fn describe(&self) -> String {
        let what = match &self.want {
            Want::Srv(n) => format!("SRV {n}"),
            Want::Host { name, port } => format!("A/AAAA {name} port {port}"),
        };
        let from = if self.resolvers.is_empty() {
            "the resolvers of /etc/resolv.conf".to_string()
        } else {
            let list: Vec<String> = self.resolvers.iter().map(|r| r.to_string()).collect();
            list.join(", ")
        };
        format!("{what} from {from}, hold {}s", self.hold.as_secs())
    }

    /// Pen's server argument, as `quill` writes it back: `srv:NAME[@R]` or `dns:NAME:PORT[@R]`.
    pub(crate) fn pen_arg(&self) -> String {
        let mut s = self.source();
        for r in &self.resolvers {
            s += &format!("@{r}");
        }
        s
    }

    /// `srv:NAME` or `dns:NAME:PORT`: the metrics' `source` label.
    pub(crate) fn source(&self) -> String {
        match &self.want {
            Want::Srv(n) => format!("srv:{n}"),
            Want::Host { name, port } => format!("dns:{name}:{port}"),
        }
    }

    pub(crate) fn check(&self) -> Result<(), String> {
        quill_core::dns::check_name(self.want.name()).map_err(|e| e.to_string())?;
        if let Want::Host { port: 0, .. } = self.want {
            return Err("port 0".into());
        }
        if self.resolvers.len() > MAX_RESOLVERS {
            return Err(format!("more than {MAX_RESOLVERS} resolvers"));
        }
        if self.hold < Duration::from_secs(1) || self.hold > MAX_HOLD {
            return Err(format!(
                "hold {}s (expected 1s to {}s)",
                self.hold.as_secs_f64(),
                MAX_HOLD.as_secs()
            ));
        }
        Ok(())
    }
}

/// A resolver: `IP`, `IP:PORT` or `[IPv6]:PORT` (port 53 when none is given).
pub(crate) fn parse_resolver(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    s.trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 53))
        .map_err(|_| format!("resolver '{s}' is not IP or IP:PORT"))
}

/// Pen's discovery server arguments: `srv:NAME[@RESOLVER]...` and `dns:NAME:PORT[@RESOLVER]...`;
/// None when `arg` is neither (an ordinary server).
pub(crate) fn parse_discovery_arg(arg: &str) -> Option<Result<Discovery, String>> {
    let (srv, rest) = if let Some(r) = arg.strip_prefix("srv:") {
        (true, r)
    } else if let Some(r) = arg.strip_prefix("dns:") {
        (false, r)
    } else {
        return None;
    };
    Some((|| {
        let mut parts = rest.split('@');
        let head = parts.next().unwrap_or_default();
        let resolvers = parts.map(parse_resolver).collect::<Result<Vec<_>, _>>()?;
        let want = if srv {
            Want::Srv(head.to_string())
        } else {
            let (name, port) = head
                .rsplit_once(':')
                .ok_or_else(|| "expected dns:NAME:PORT".to_string())?;
            let port = port
                .parse::<u16>()
                .map_err(|_| format!("port '{port}' is not a number from 1 to 65535"))?;
            Want::Host {
                name: name.to_string(),
                port,
            }
        };
        let d = Discovery {
            want,
            resolvers,
            hold: DEFAULT_HOLD,
        };
        d.check()?;
        Ok(d)
    })())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pen_arguments_parse_and_write_back() {
        let d = parse_discovery_arg("srv:_http._tcp.web.service.consul@127.0.0.1:8600")
            .unwrap()
            .unwrap();
        assert_eq!(d.want, Want::Srv("_http._tcp.web.service.consul".into()));
        assert_eq!(d.resolvers, vec!["127.0.0.1:8600".parse().unwrap()]);
        assert_eq!(
            d.pen_arg(),
            "srv:_http._tcp.web.service.consul@127.0.0.1:8600"
        );
        let d = parse_discovery_arg("dns:web.default.svc.cluster.local:8080@::1")
            .unwrap()
            .unwrap();
        assert_eq!(
            d.want,
            Want::Host {
                name: "web.default.svc.cluster.local".into(),
                port: 8080
            }
        );
        assert_eq!(d.resolvers, vec!["[::1]:53".parse().unwrap()]);
        assert!(parse_discovery_arg("127.0.0.1:80").is_none());
        assert!(parse_discovery_arg("dns:web").unwrap().is_err());
        assert!(parse_discovery_arg("dns:web:0").unwrap().is_err());
        assert!(parse_discovery_arg("srv:a..b").unwrap().is_err());
        assert!(parse_discovery_arg("srv:web@nowhere").unwrap().is_err());
    }
}
