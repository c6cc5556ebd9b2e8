//! UDP in a TOML file: a listener's `udp = { ... }` (or `[listener.udp]`), which needs
//! `protocol = "udp"`. Every error is one line, `FILE:LINE: udp: KEY: ...`.

use std::ops::Range;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::super::http::shown;
use super::super::model::{parse_duration, ConfigError, UdpSettings, MAX_FLOWS};

type Key = Option<Spanned<toml::Value>>;
type At<'a> = &'a dyn Fn(Range<usize>) -> String;

/// `udp = { ... }`: each key kept with its span.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUdp {
    flow_timeout: Key,
    max_flows: Key,
    max_flows_per_source: Key,
    flow_responses: Key,
}

fn fail(at: At, v: &Spanned<toml::Value>, key: &str, why: impl std::fmt::Display) -> ConfigError {
    ConfigError::usage(format!("{}udp: {key}: {why}", at(v.span())))
}

fn count(
    v: &Spanned<toml::Value>,
    key: &str,
    min: u32,
    max: u32,
    at: At,
) -> Result<u32, ConfigError> {
    match v.get_ref() {
        toml::Value::Integer(n) if *n >= i64::from(min) && *n <= i64::from(max) => Ok(*n as u32),
        toml::Value::Integer(n) => Err(fail(
            at,
            v,
            key,
            format!("{n} is out of range ({min} to {max})"),
        )),
        other => Err(fail(
            at,
            v,
            key,
            format!("{} is not a number", shown(other)),
        )),
    }
}

impl RawUdp {
    /// The settings, from the defaults and the keys given.
    pub(super) fn build(&self, at: At) -> Result<UdpSettings, ConfigError> {
        let mut s = UdpSettings::default();
        if let Some(v) = &self.flow_timeout {
            let key = "flow_timeout";
            let d = match v.get_ref() {
                toml::Value::Integer(n) => u64::try_from(*n)
                    .map(Duration::from_secs)
                    .map_err(|_| fail(at, v, key, format!("{n} is not a duration")))?,
                toml::Value::String(t) => parse_duration(t).map_err(|e| fail(at, v, key, e))?,
                other => {
                    return Err(fail(
                        at,
                        v,
                        key,
                        format!("{} is not a duration (expected e.g. \"30s\")", shown(other)),
                    ))
                }
            };
            if d < Duration::from_millis(10) || d > Duration::from_secs(24 * 3600) {
                return Err(fail(at, v, key, "must be at least 10ms and at most 24h"));
            }
            s.flow_timeout = d;
        }
        if let Some(v) = &self.max_flows {
            s.max_flows = Some(count(v, "max_flows", 1, MAX_FLOWS, at)?);
        }
        if let Some(v) = &self.max_flows_per_source {
            s.max_flows_per_source = Some(count(v, "max_flows_per_source", 1, MAX_FLOWS, at)?);
        }
        if let Some(v) = &self.flow_responses {
            s.flow_responses = count(v, "flow_responses", 0, u32::MAX, at)?;
        }
        Ok(s)
    }
}
