//! A listener's or `[[pool]]`'s `servers`: a list (`["HOST:PORT", { address = ... }]`) or a table
//! saying where DNS publishes them (`{ srv = "_http._tcp.web.service.consul", resolvers =
//! ["127.0.0.1:8600"] }`, `{ name = "web.default.svc.cluster.local", port = 8080 }`).

use std::fmt;
use std::ops::Range;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

use super::RawServer;
use crate::config::model::ConfigError;
use crate::config::model::{parse_resolver, Discovery, DEFAULT_HOLD};
use crate::config::settings::Dur;
use quill_core::dns::lookup::Want;

#[derive(Debug)]
pub(super) enum RawServers {
    List(Vec<Spanned<RawServer>>),
    Discover(RawDiscovery),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDiscovery {
    srv: Option<String>,
    name: Option<String>,
    port: Option<u16>,
    resolvers: Option<Vec<String>>,
    hold: Option<Dur>,
}

impl<'de> Deserialize<'de> for RawServers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RawServers, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawServers;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a list of servers, or a table { srv = \"NAME\" } or { name = \"NAME\", port = PORT }",
                )
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<RawServers, A::Error> {
                Vec::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(RawServers::List)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawServers, A::Error> {
                RawDiscovery::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(RawServers::Discover)
            }
        }
        d.deserialize_any(V)
    }
}

/// The listed servers (none when `servers` is absent or a discovery table).
pub(super) fn listed(servers: &Option<Spanned<RawServers>>) -> &[Spanned<RawServer>] {
    match servers.as_ref().map(Spanned::get_ref) {
        Some(RawServers::List(l)) => l,
        _ => &[],
    }
}

/// Whether `servers` is absent or an empty list.
pub(super) fn none(servers: &Option<Spanned<RawServers>>) -> bool {
    match servers.as_ref().map(Spanned::get_ref) {
        None => true,
        Some(RawServers::List(l)) => l.is_empty(),
        Some(RawServers::Discover(_)) => false,
    }
}

/// The discovery table of `servers`, checked; None for a list.
pub(super) fn discovery(
    servers: &Option<Spanned<RawServers>>,
    at: &dyn Fn(Range<usize>) -> String,
) -> Result<Option<Discovery>, ConfigError> {
    let Some(s) = servers else {
        return Ok(None);
    };
    let RawServers::Discover(raw) = s.get_ref() else {
        return Ok(None);
    };
    let fail = |e: String| ConfigError::usage(format!("{}servers: {e}", at(s.span())));
    let want = match (&raw.srv, &raw.name, raw.port) {
        (Some(srv), None, None) => Want::Srv(srv.clone()),
        (None, Some(name), Some(port)) => Want::Host {
            name: name.clone(),
            port,
        },
        (Some(_), _, _) => {
            return Err(fail(
                "srv takes neither name nor port (the SRV records give the ports)".into(),
            ))
        }
        (None, Some(_), None) => return Err(fail("name needs a port".into())),
        (None, None, _) => {
            return Err(fail(
                "expected srv = \"_SERVICE._tcp.NAME\" or name = \"NAME\" with port".into(),
            ))
        }
    };
    let resolvers = raw
        .resolvers
        .iter()
        .flatten()
        .map(|r| parse_resolver(r))
        .collect::<Result<Vec<_>, _>>()
        .map_err(fail)?;
    let d = Discovery {
        want,
        resolvers,
        hold: raw.hold.as_ref().map_or(DEFAULT_HOLD, |h| h.0),
    };
    d.check().map_err(fail)?;
    Ok(Some(d))
}
