//! The grammars of setting values ([`Kind`]): how a file value is read, a control line parsed,
//! a value checked, written back and shown; and the value types that belong to one setting
//! (`Fastclose`, the `proxy_protocol` words).

use std::fmt;
use std::net::IpAddr;
use std::ops::{Range, RangeInclusive};
use std::time::Duration;

use serde::de::{self, Deserializer};
use serde::Deserialize;
use toml::Spanned;

use quill_core::duration::format_duration;
pub(crate) use quill_core::proxy_header::Version as ProxyVersion;

use super::{
    bounded_arg, check_duration, duration_arg, in_range, no_args, not_negatable, CommandError, Dur,
};

// === Value types that belong to one setting ===

/// `accept`: how workers accept TCP clients.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum AcceptMode {
    /// A multishot accept in each worker's io_uring, or epoll when the kernel refuses io_uring.
    Auto,
    /// `accept4` when epoll says a listener is readable (the default: io_uring measured no
    /// cheaper, docs/benchmarks.md).
    #[default]
    Epoll,
    /// A multishot accept in each worker's io_uring; Quill does not start without one.
    IoUring,
}

impl AcceptMode {
    pub(crate) fn parse(s: &str) -> Option<AcceptMode> {
        Some(match s {
            "auto" => AcceptMode::Auto,
            "epoll" => AcceptMode::Epoll,
            "io_uring" => AcceptMode::IoUring,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            AcceptMode::Auto => "auto",
            AcceptMode::Epoll => "epoll",
            AcceptMode::IoUring => "io_uring",
        }
    }
}

/// Pen's `tcp_fastclose`: which side's EOF closes the whole session at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Fastclose {
    #[default]
    Off,
    /// The server's EOF closes the session.
    Up,
    /// The client's EOF closes the session.
    Down,
    Both,
}

impl Fastclose {
    pub(crate) fn parse(s: &str) -> Option<Fastclose> {
        Some(match s {
            "off" => Fastclose::Off,
            "up" => Fastclose::Up,
            "down" => Fastclose::Down,
            "both" => Fastclose::Both,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Fastclose::Off => "off",
            Fastclose::Up => "up",
            Fastclose::Down => "down",
            Fastclose::Both => "both",
        }
    }

    /// Whether the server's EOF ends the session.
    pub(crate) fn on_server_eof(self) -> bool {
        matches!(self, Fastclose::Up | Fastclose::Both)
    }

    /// Whether the client's EOF ends the session.
    pub(crate) fn on_client_eof(self) -> bool {
        matches!(self, Fastclose::Down | Fastclose::Both)
    }
}

impl<'de> Deserialize<'de> for Fastclose {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Fastclose, D::Error> {
        let s = String::deserialize(d)?;
        Fastclose::parse(&s).ok_or_else(|| {
            de::Error::custom(format!(
                "invalid tcp_fastclose '{s}' (expected off, up, down, both)"
            ))
        })
    }
}

/// The name of a `proxy_protocol` setting: `v1`, `v2` or `off`.
pub(crate) fn proxy_protocol_name(v: Option<ProxyVersion>) -> &'static str {
    v.map_or("off", ProxyVersion::as_str)
}

/// Reads `v1`, `v2` or `off` (a `proxy_protocol` value).
pub(crate) fn parse_proxy_protocol(s: &str) -> Option<Option<ProxyVersion>> {
    if s.eq_ignore_ascii_case("off") {
        Some(None)
    } else {
        ProxyVersion::from_name(s).map(Some)
    }
}

// === Kinds: one grammar per type of value ===

/// What a control line with a setting's word asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Parsed<V> {
    /// The bare word: show the value.
    Show,
    /// Set the value.
    Set(V),
}

impl<V> Parsed<V> {
    pub(crate) fn map<W>(self, f: impl FnOnce(V) -> W) -> Parsed<W> {
        match self {
            Parsed::Show => Parsed::Show,
            Parsed::Set(v) => Parsed::Set(f(v)),
        }
    }
}

/// A setting's grammar: how a value is read from a file and from a control line, checked,
/// written back and shown. `name` is the setting's control word (its key when it has none).
pub(crate) trait Kind: Sync {
    type Value: Clone + PartialEq + fmt::Debug;
    /// The type's name in the man page (`duration`, `integer`, `bool`, `string`).
    const TYPE: &'static str;
    /// What a file holds (serde reads it, so a value of the wrong type is serde's error).
    type Raw;
    /// The value of `raw`, read for key `key`; an error comes with the span it names.
    fn read(&self, key: &str, raw: &Self::Raw) -> Result<Self::Value, (String, Range<usize>)>;
    /// A control line `[no] name ARGS...` (a setting of the file only has no control word).
    fn parse_word(
        &self,
        name: &str,
        _negated: bool,
        _args: &[&str],
    ) -> Result<Parsed<Self::Value>, CommandError> {
        Err(CommandError(format!("unknown command '{name}'")))
    }
    /// What applying a control value does to it (a check, a floor).
    fn on_set(&self, _name: &str, v: Self::Value) -> Result<Self::Value, String> {
        Ok(v)
    }
    /// Checks the bounds of a value held in the model.
    fn check(&self, _name: &str, _v: &Self::Value) -> Result<(), String> {
        Ok(())
    }
    /// The control line that sets `v` (after any prefix), or None when `write` leaves it out.
    fn written(&self, _name: &str, _v: &Self::Value) -> Option<String> {
        None
    }
    /// The value in words (`explain`, defaults in docs).
    fn shown(&self, v: &Self::Value) -> String;
    /// The type's name in the man page (for the docs and their check).
    #[cfg_attr(not(test), allow(dead_code))]
    fn type_name(&self) -> &'static str {
        Self::TYPE
    }
}

/// A duration (`30`, `"500ms"` in a file; `timeout 500ms` on a control line).
pub(crate) struct Secs {
    /// A control line may not set it to 0.
    pub nonzero: bool,
}

impl Kind for Secs {
    const TYPE: &'static str = "duration";
    type Value = Duration;
    type Raw = Dur;
    fn read(&self, _key: &str, raw: &Dur) -> Result<Duration, (String, Range<usize>)> {
        Ok(raw.0)
    }
    fn parse_word(
        &self,
        name: &str,
        negated: bool,
        args: &[&str],
    ) -> Result<Parsed<Duration>, CommandError> {
        match (negated, args) {
            (false, []) => Ok(Parsed::Show),
            (false, _) => duration_arg(name, args).map(Parsed::Set),
            (true, _) => not_negatable(name),
        }
    }
    fn on_set(&self, name: &str, v: Duration) -> Result<Duration, String> {
        if self.nonzero && v.is_zero() {
            return Err(format!("{name}: must be more than 0"));
        }
        Ok(v)
    }
    fn check(&self, name: &str, v: &Duration) -> Result<(), String> {
        check_duration(name, *v)
    }
    fn written(&self, name: &str, v: &Duration) -> Option<String> {
        Some(format!("{name} {}", format_duration(*v)))
    }
    fn shown(&self, v: &Duration) -> String {
        format_duration(*v)
    }
}

/// A count within bounds (`clients_max = 2048`; `clients_max 2048`).
pub(crate) struct Count {
    /// What a file may say.
    pub file: RangeInclusive<u64>,
    /// What a control line may say (checked again when applied).
    pub control: RangeInclusive<u64>,
    /// A control value below it is raised to it.
    pub floor: u32,
}

impl Kind for Count {
    const TYPE: &'static str = "integer";
    type Value = u32;
    type Raw = Spanned<u32>;
    fn read(&self, key: &str, raw: &Spanned<u32>) -> Result<u32, (String, Range<usize>)> {
        let n = *raw.get_ref();
        in_range(key, n.into(), self.file.clone())
            .map(|()| n)
            .map_err(|e| (e, raw.span()))
    }
    fn parse_word(
        &self,
        name: &str,
        negated: bool,
        args: &[&str],
    ) -> Result<Parsed<u32>, CommandError> {
        match (negated, args) {
            (false, []) => Ok(Parsed::Show),
            (false, _) => bounded_arg(name, args, self.control.clone()).map(Parsed::Set),
            (true, _) => not_negatable(name),
        }
    }
    fn on_set(&self, name: &str, v: u32) -> Result<u32, String> {
        in_range(name, v.into(), self.control.clone())?;
        Ok(v.max(self.floor))
    }
    fn check(&self, name: &str, v: &u32) -> Result<(), String> {
        in_range(name, (*v).into(), self.file.clone())
    }
    fn written(&self, name: &str, v: &u32) -> Option<String> {
        Some(format!("{name} {v}"))
    }
    fn shown(&self, v: &u32) -> String {
        v.to_string()
    }
}

/// On or off (`keepalive = true`; `keepalive`, `no keepalive`).
pub(crate) struct Flag {
    /// `write` states it when off too (`no tcp_nodelay`); else only when on.
    pub write_off: bool,
}

impl Kind for Flag {
    const TYPE: &'static str = "bool";
    type Value = bool;
    type Raw = bool;
    fn read(&self, _key: &str, raw: &bool) -> Result<bool, (String, Range<usize>)> {
        Ok(*raw)
    }
    fn parse_word(
        &self,
        name: &str,
        negated: bool,
        args: &[&str],
    ) -> Result<Parsed<bool>, CommandError> {
        no_args(name, args).map(|()| Parsed::Set(!negated))
    }
    fn written(&self, name: &str, v: &bool) -> Option<String> {
        match (*v, self.write_off) {
            (true, _) => Some(name.to_string()),
            (false, true) => Some(format!("no {name}")),
            (false, false) => None,
        }
    }
    fn shown(&self, v: &bool) -> String {
        v.to_string()
    }
}

/// `tcp_fastclose`: off, up, down or both.
pub(crate) struct FastcloseWord;

impl Kind for FastcloseWord {
    const TYPE: &'static str = "string";
    type Value = Fastclose;
    type Raw = Spanned<Fastclose>;
    fn read(
        &self,
        _key: &str,
        raw: &Spanned<Fastclose>,
    ) -> Result<Fastclose, (String, Range<usize>)> {
        Ok(*raw.get_ref())
    }
    fn parse_word(
        &self,
        name: &str,
        negated: bool,
        args: &[&str],
    ) -> Result<Parsed<Fastclose>, CommandError> {
        match (negated, args) {
            (false, []) => Ok(Parsed::Show),
            (false, [value]) => Fastclose::parse(value)
                .map(Parsed::Set)
                .ok_or_else(|| CommandError(format!("{name}: '{value}' is not up|down|both|off"))),
            (false, _) => Err(CommandError(format!(
                "{name} needs one of up|down|both|off"
            ))),
            (true, _) => not_negatable(name),
        }
    }
    fn written(&self, name: &str, v: &Fastclose) -> Option<String> {
        Some(format!("{name} {}", v.name()))
    }
    fn shown(&self, v: &Fastclose) -> String {
        v.name().to_string()
    }
}

/// `accept`: epoll, io_uring or auto (a file's key only: it takes effect at a restart).
pub(crate) struct AcceptWord;

impl Kind for AcceptWord {
    const TYPE: &'static str = "string";
    type Value = AcceptMode;
    type Raw = Spanned<String>;
    fn read(&self, key: &str, raw: &Spanned<String>) -> Result<AcceptMode, (String, Range<usize>)> {
        AcceptMode::parse(raw.get_ref()).ok_or_else(|| {
            (
                format!(
                    "invalid {key} '{}' (expected epoll, io_uring or auto)",
                    raw.get_ref().escape_debug()
                ),
                raw.span(),
            )
        })
    }
    fn shown(&self, v: &AcceptMode) -> String {
        v.name().to_string()
    }
}

/// `proxy_protocol`: v1, v2 or off.
pub(crate) struct ProxyWord;

impl Kind for ProxyWord {
    const TYPE: &'static str = "string";
    type Value = Option<ProxyVersion>;
    type Raw = Spanned<String>;
    fn read(
        &self,
        key: &str,
        raw: &Spanned<String>,
    ) -> Result<Option<ProxyVersion>, (String, Range<usize>)> {
        parse_proxy_protocol(raw.get_ref()).ok_or_else(|| {
            (
                format!(
                    "invalid {key} '{}' (expected v1, v2 or off)",
                    raw.get_ref().escape_debug()
                ),
                raw.span(),
            )
        })
    }
    fn parse_word(
        &self,
        name: &str,
        negated: bool,
        args: &[&str],
    ) -> Result<Parsed<Option<ProxyVersion>>, CommandError> {
        match (negated, args) {
            (false, []) => Ok(Parsed::Show),
            (false, [value]) => parse_proxy_protocol(value)
                .map(Parsed::Set)
                .ok_or_else(|| CommandError(format!("{name}: '{value}' is not v1|v2|off"))),
            (false, _) => Err(CommandError(format!("{name} needs one of v1|v2|off"))),
            (true, _) => not_negatable(name),
        }
    }
    fn written(&self, name: &str, v: &Option<ProxyVersion>) -> Option<String> {
        Some(format!("{name} {}", proxy_protocol_name(*v)))
    }
    fn shown(&self, v: &Option<ProxyVersion>) -> String {
        proxy_protocol_name(*v).to_string()
    }
}

/// An optional IP address (`source = "10.0.0.1"`; `source 10.0.0.1`, `no source`).
pub(crate) struct IpWord;

impl Kind for IpWord {
    const TYPE: &'static str = "string";
    type Value = Option<IpAddr>;
    type Raw = Spanned<String>;
    fn read(
        &self,
        key: &str,
        raw: &Spanned<String>,
    ) -> Result<Option<IpAddr>, (String, Range<usize>)> {
        raw.get_ref().parse().map(Some).map_err(|_| {
            (
                format!(
                    "{key}: '{}' is not an IP address",
                    raw.get_ref().escape_debug()
                ),
                raw.span(),
            )
        })
    }
    fn parse_word(
        &self,
        name: &str,
        negated: bool,
        args: &[&str],
    ) -> Result<Parsed<Option<IpAddr>>, CommandError> {
        match (negated, args) {
            (false, []) => Ok(Parsed::Show),
            (false, [ip]) => ip
                .parse()
                .map(|ip| Parsed::Set(Some(ip)))
                .map_err(|_| CommandError(format!("{name}: '{ip}' is not an IP address"))),
            (false, _) => Err(CommandError(format!("{name} needs one IP address"))),
            (true, []) => Ok(Parsed::Set(None)),
            (true, _) => not_negatable(name),
        }
    }
    fn written(&self, name: &str, v: &Option<IpAddr>) -> Option<String> {
        v.map(|ip| format!("{name} {ip}"))
    }
    fn shown(&self, v: &Option<IpAddr>) -> String {
        v.map_or_else(|| "none".to_string(), |ip| ip.to_string())
    }
}

/// A thread count (`workers = 4`).
pub(crate) struct Threads {
    pub file: RangeInclusive<u64>,
}

impl Kind for Threads {
    type Value = usize;
    const TYPE: &'static str = "integer";
    type Raw = Spanned<usize>;
    fn read(&self, key: &str, raw: &Spanned<usize>) -> Result<usize, (String, Range<usize>)> {
        let n = *raw.get_ref();
        in_range(key, n as u64, self.file.clone())
            .map(|()| n)
            .map_err(|e| (e, raw.span()))
    }
    fn check(&self, name: &str, v: &usize) -> Result<(), String> {
        in_range(name, *v as u64, self.file.clone())
    }
    fn shown(&self, v: &usize) -> String {
        v.to_string()
    }
}

/// An optional limit within bounds (`max_connections = 5000`); none: no limit of its own.
pub(crate) struct Limit {
    pub file: RangeInclusive<u64>,
}

impl Kind for Limit {
    type Value = Option<u32>;
    const TYPE: &'static str = "integer";
    type Raw = Spanned<u32>;
    fn read(&self, key: &str, raw: &Spanned<u32>) -> Result<Option<u32>, (String, Range<usize>)> {
        let n = *raw.get_ref();
        in_range(key, n.into(), self.file.clone())
            .map(|()| Some(n))
            .map_err(|e| (e, raw.span()))
    }
    fn check(&self, name: &str, v: &Option<u32>) -> Result<(), String> {
        v.map_or(Ok(()), |n| in_range(name, n.into(), self.file.clone()))
    }
    fn shown(&self, v: &Option<u32>) -> String {
        v.map_or_else(|| "none".to_string(), |n| n.to_string())
    }
}
