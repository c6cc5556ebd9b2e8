//! `[health]` / `[listener.health]` tables read into a `HealthCheck`.

use super::*;

/// `[health]` / `[listener.health]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHealth {
    /// "tcp" or "http".
    #[serde(rename = "type")]
    kind: Option<String>,
    path: Option<String>,
    expect: Option<String>,
    /// The datagram of a `udp` check.
    send: Option<String>,
    interval: Option<Dur>,
    timeout: Option<Dur>,
    rise: Option<u32>,
    fall: Option<u32>,
    /// The `Host` of an HTTP check (a name or address, with an optional port).
    host: Option<String>,
}

impl RawHealth {
    pub(super) fn build(&self) -> Result<HealthCheck, String> {
        let mut h = HealthCheck::default();
        let kind = self
            .kind
            .as_deref()
            .unwrap_or(if self.path.is_some() { "http" } else { "tcp" });
        h.kind = match kind {
            "udp" => {
                if self.path.is_some() || self.host.is_some() {
                    return Err("health: path and host need type = \"http\"".into());
                }
                let send = self.send.clone().unwrap_or_default();
                let expect = self.expect.clone().unwrap_or_default();
                if send.len() > 1024 || expect.len() > 1024 {
                    return Err("health: send and expect are at most 1024 bytes".into());
                }
                CheckKind::Udp { send, expect }
            }
            "tcp" => {
                if self.path.is_some() || self.expect.is_some() || self.host.is_some() {
                    return Err("health: path, expect and host need type = \"http\"".into());
                }
                if self.send.is_some() {
                    return Err("health: send needs type = \"udp\"".into());
                }
                CheckKind::Tcp
            }
            "http" => {
                if self.send.is_some() {
                    return Err("health: send needs type = \"udp\"".into());
                }
                // An empty path is `/`, as `--check http:` says.
                let path = match self.path.as_deref() {
                    None | Some("") => "/",
                    Some(p) => p,
                };
                validate_check_path(path)?;
                let path = path.to_string();
                let expect = match &self.expect {
                    Some(e) => parse_status_range(e)?,
                    None => (200, 399),
                };
                CheckKind::Http { path, expect }
            }
            other => {
                return Err(format!(
                    "health: unknown type '{other}' (expected tcp, http or udp)"
                ))
            }
        };
        if let Some(host) = &self.host {
            let ok = !host.is_empty()
                && host.len() <= 255
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-.:[]_".contains(&b));
            if !ok {
                return Err(format!(
                    "health: host '{}' is not a host name or address with an optional port",
                    host.escape_debug()
                ));
            }
            h.host = Some(host.clone());
        }
        if let Some(d) = self.interval {
            h.interval = nonzero(d.0, "health interval").map_err(|e| e.message)?;
        }
        if let Some(d) = self.timeout {
            h.timeout = nonzero(d.0, "health timeout").map_err(|e| e.message)?;
        }
        for (v, slot, name) in [
            (self.rise, &mut h.rise, "rise"),
            (self.fall, &mut h.fall, "fall"),
        ] {
            if let Some(n) = v {
                if n == 0 {
                    return Err(format!("health: {name} must be at least 1"));
                }
                *slot = n;
            }
        }
        h.check()?;
        Ok(h)
    }
}
