//! Each scalar setting described once: its TOML key, its control word, its type and bounds, its
//! default and a one-line doc, in one table per section. The table is the single place a scalar
//! setting is declared: [`tuning_table`] generates the model's struct ([`Tuning`]), its partial
//! form ([`TuningPatch`]), the control language's value ([`Tune`]) and the descriptors
//! ([`TUNING`]) that drive the TOML reader (`toml`'s raw tables take their keys from the same
//! list), the control language (`command`), `write`, `explain`, the reload merge
//! (`state::merge`) and the man-page check (this module's tests read `docs/quill.toml.5`).
//!
//! A setting's grammar is its [`Kind`]: how a file value is read, how a control line is parsed,
//! how the value is written back and shown. The kinds keep every message of the grammars they
//! replace word for word.
//!
//! Structured tables (routes, TLS, UDP, health, geoip) stay hand-written in their own modules.
//! This module sits below `model` and imports nothing from the rest of `config`.

use std::fmt;
use std::net::IpAddr;
use std::ops::{Range, RangeInclusive};
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use toml::Spanned;

use quill_core::duration::{format_duration, parse_duration, MAX_DURATION};
pub(crate) use quill_core::proxy_header::Version as ProxyVersion;

/// Why a control line was rejected; the message names the offending word.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub(crate) struct CommandError(pub String);

// === Shared grammar ===

/// Checks that setting `name` is within `range`; the message names the setting, the value and
/// the bounds.
pub(crate) fn in_range(name: &str, value: u64, range: RangeInclusive<u64>) -> Result<(), String> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(format!(
            "{name}: {value} is out of range ({} to {})",
            range.start(),
            range.end()
        ))
    }
}

/// Checks that duration setting `name` is at most 30 days.
pub(crate) fn check_duration(name: &str, d: Duration) -> Result<(), String> {
    if d > MAX_DURATION {
        Err(format!("{name}: {} is more than 30 days", d.as_secs()))
    } else {
        Ok(())
    }
}

/// A control word that takes no argument.
pub(crate) fn no_args(name: &str, args: &[&str]) -> Result<(), CommandError> {
    match args.first() {
        None => Ok(()),
        Some(extra) => Err(CommandError(format!(
            "{name}: unexpected argument '{extra}'"
        ))),
    }
}

/// The one argument of a control word.
pub(crate) fn one_arg<'a>(name: &str, args: &[&'a str]) -> Result<&'a str, CommandError> {
    match args {
        [value] => Ok(value),
        [] => Err(CommandError(format!("{name} needs a value"))),
        [_, extra, ..] => Err(CommandError(format!(
            "{name}: unexpected argument '{extra}'"
        ))),
    }
}

/// A duration argument (`30`, `500ms`, ...).
pub(crate) fn duration_arg(name: &str, args: &[&str]) -> Result<Duration, CommandError> {
    let value = one_arg(name, args)?;
    parse_duration(value).map_err(|e| CommandError(format!("{name}: {e}")))
}

/// A number argument.
pub(crate) fn number_arg<T: std::str::FromStr>(
    name: &str,
    args: &[&str],
) -> Result<T, CommandError> {
    let value = one_arg(name, args)?;
    value
        .parse()
        .map_err(|_| CommandError(format!("{name}: '{value}' is not a number")))
}

/// A number within `range`; out of range names the command, the value and the bounds.
pub(crate) fn bounded_arg<T: TryFrom<u64>>(
    name: &str,
    args: &[&str],
    range: RangeInclusive<u64>,
) -> Result<T, CommandError> {
    let n: u64 = number_arg(name, args)?;
    in_range(name, n, range).map_err(CommandError)?;
    T::try_from(n).map_err(|_| CommandError(format!("{name}: {n} is out of range")))
}

/// The refusal of `no WORD` for a word that cannot be negated.
fn not_negatable<T>(name: &str) -> Result<T, CommandError> {
    Err(CommandError(format!("'no {name}' is not a command")))
}

/// A duration in a file: integer seconds or a string with a unit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Dur, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as 30, \"500ms\", \"2s\", \"5m\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                match u64::try_from(v).map(Duration::from_secs) {
                    Ok(d) if d <= MAX_DURATION => Ok(Dur(d)),
                    Ok(_) => Err(E::custom(format!(
                        "invalid duration {v}: at most 30 days (2592000 seconds)"
                    ))),
                    Err(_) => Err(E::custom(format!("invalid duration {v}"))),
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                parse_duration(v).map(Dur).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

// === Value types that belong to one setting ===

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
    fn map<W>(self, f: impl FnOnce(V) -> W) -> Parsed<W> {
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

// === Descriptors ===

/// Which listeners `write` states a setting for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Every listener and pool.
    All,
    /// Not UDP listeners (they have no TCP connection to clients or servers).
    Tcp,
}

/// How `explain` (`quill check`) tells of a setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Explain {
    /// In a sentence of its own, written by `explain`.
    Own,
    /// Not told.
    Quiet,
    /// As `key value` in the list of settings that differ from their default.
    Listed,
}

/// What the table says of one setting, whatever its type.
#[derive(Clone, Copy, Debug)]
pub(crate) struct About {
    /// The TOML key.
    pub key: &'static str,
    /// The control word (`-O`, `-F`, the control socket); None: the file only.
    pub word: Option<&'static str>,
    /// Its bounds, in words (empty: any value of its type; for the docs and their check).
    #[cfg_attr(not(test), allow(dead_code))]
    pub bounds: &'static str,
    /// The one-line doc (for the docs and their check).
    #[cfg_attr(not(test), allow(dead_code))]
    pub doc: &'static str,
    pub scope: Scope,
    pub explain: Explain,
}

impl About {
    /// The name messages, `write` and checks use: the control word, else the key.
    pub(crate) fn name(&self) -> &'static str {
        self.word.unwrap_or(self.key)
    }
}

/// One setting of section `S`, whatever its kind: what `write`, `explain`, `merge` and the
/// checks need, through the setting's typed accessors.
pub(crate) trait Entry<S>: Sync {
    fn about(&self) -> &About;
    /// Its type as the man page names it (for the docs and their check).
    #[cfg_attr(not(test), allow(dead_code))]
    fn type_name(&self) -> &'static str;
    /// The control line that sets its value in `s` (after any prefix), if `write` states it.
    fn written(&self, s: &S) -> Option<String>;
    /// Its value in `s`, in words.
    fn shown(&self, s: &S) -> String;
    /// Whether `s` holds its default (`defaults`).
    fn is_default(&self, s: &S, defaults: &S) -> bool;
    /// The reload merge: `theirs` (the sources now) if the sources changed it since `base`,
    /// else the running value (`ours`); into `out`.
    fn merge(&self, base: &S, ours: &S, theirs: &S, out: &mut S);
    /// Checks its bounds in `s`.
    fn check(&self, s: &S) -> Result<(), String>;
}

/// A setting of section `S` with kind `K`: the descriptor and the typed accessors into `S`.
pub(crate) struct Field<S: 'static, K: Kind> {
    pub about: About,
    pub kind: K,
    pub get: fn(&S) -> &K::Value,
    pub get_mut: fn(&mut S) -> &mut K::Value,
}

impl<S: 'static, K: Kind> Entry<S> for Field<S, K> {
    fn about(&self) -> &About {
        &self.about
    }
    fn type_name(&self) -> &'static str {
        self.kind.type_name()
    }
    fn written(&self, s: &S) -> Option<String> {
        self.kind.written(self.about.name(), (self.get)(s))
    }
    fn shown(&self, s: &S) -> String {
        self.kind.shown((self.get)(s))
    }
    fn is_default(&self, s: &S, defaults: &S) -> bool {
        (self.get)(s) == (self.get)(defaults)
    }
    fn merge(&self, base: &S, ours: &S, theirs: &S, out: &mut S) {
        let (b, o, t) = ((self.get)(base), (self.get)(ours), (self.get)(theirs));
        *(self.get_mut)(out) = if b == t { o.clone() } else { t.clone() };
    }
    fn check(&self, s: &S) -> Result<(), String> {
        self.kind.check(self.about.name(), (self.get)(s))
    }
}

// === The tuning table ===

/// Calls macro `$m` with `$pre` and then the tuning settings: per-listener timeouts and socket
/// settings, accepted at the top level of a file (every listener's default) and in a listener.
/// The order is the TOML reader's (the key list an unknown key's error names); `WRITE_ORDER` is
/// `write`'s. Each entry: the doc, `key: Type = default`, the `Tune` variant, the control word
/// (or None), the kind, the scope, how `explain` tells of it and the bounds in words.
macro_rules! tuning_table {
    ($m:ident $($pre:tt)*) => {
        $m! { $($pre)* ;
            /// Backend connect timeout (`-t`).
            connect_timeout: Duration = Duration::from_secs(3),
                ConnectTimeout, Some("timeout"), Secs { nonzero: true }, All, Own, "";
            /// How long a failed server is skipped (`-b`).
            blacklist: Duration = Duration::from_secs(30),
                Blacklist, Some("blacklist"), Secs { nonzero: false }, All, Own, "";
            /// Client tracking expiry (`-T`), zero = never.
            tracking_time: Duration = Duration::ZERO,
                Tracking, Some("tracking"), Secs { nonzero: false }, All, Quiet, "";
            /// Client tracking table size (`-c`).
            clients_max: u32 = 2048,
                ClientsMax, Some("clients_max"),
                Count {
                    file: 1..=crate::balancer::MAX_CLIENTS as u64,
                    control: 0..=crate::balancer::MAX_CLIENTS as u64,
                    floor: 1,
                },
                All, Own, "1 to 1000000";
            /// Close sessions with no traffic for this long; zero = never.
            idle_timeout: Duration = Duration::ZERO,
                IdleTimeout, Some("idle_timeout"), Secs { nonzero: false }, All, Own, "";
            /// Close a half-closed session that makes no progress for this long.
            fin_timeout: Duration = Duration::from_secs(60),
                FinTimeout, None, Secs { nonzero: false }, All, Own, "";
            /// TCP_NODELAY on client and backend sockets.
            tcp_nodelay: bool = true,
                TcpNodelay, Some("tcp_nodelay"), Flag { write_off: true }, Tcp, Quiet, "";
            /// Pen's `tcp_fastclose`: which side's EOF closes the whole session at once.
            tcp_fastclose: Fastclose = Fastclose::Off,
                TcpFastclose, Some("tcp_fastclose"), FastcloseWord, Tcp, Quiet, "off, up, down or both";
            /// SO_KEEPALIVE on client and backend sockets.
            keepalive: bool = false,
                Keepalive, Some("keepalive"), Flag { write_off: true }, Tcp, Quiet, "";
            /// Sessions one client address may hold on this listener at once; 0 = no limit.
            max_per_source: u32 = 0,
                MaxPerSource, Some("max_per_source"),
                Count {
                    file: 0..=crate::addr::MAX_SESSIONS as u64,
                    control: 0..=crate::addr::MAX_SESSIONS as u64,
                    floor: 0,
                },
                All, Own, "0 to 1000000";
            /// Pen's `transparent`: server connections leave from the client's own address
            /// (IP_TRANSPARENT; TCP listeners only).
            transparent: bool = false,
                Transparent, Some("transparent"), Flag { write_off: false }, All, Own, "";
            /// Pen's `source IP`: the local address of server connections.
            source: Option<IpAddr> = None,
                Source, Some("source"), IpWord, All, Own, "an IP address";
            /// PROXY protocol header sent to this pool's servers before the client's bytes
            /// (`proxy_protocol = "v1" | "v2"`); None = none.
            proxy_protocol: Option<ProxyVersion> = None,
                ProxyProtocol, Some("proxy_protocol"), ProxyWord, All, Quiet, "v1, v2 or off";
        }
    };
}
pub(crate) use tuning_table;

/// `write`'s order of the tuning settings (by key): every one with a control word, once.
pub(crate) const WRITE_ORDER: &[&str] = &[
    "blacklist",
    "connect_timeout",
    "tracking_time",
    "clients_max",
    "max_per_source",
    "idle_timeout",
    "tcp_fastclose",
    "proxy_protocol",
    "tcp_nodelay",
    "keepalive",
    "transparent",
    "source",
];

/// Generates the section's struct, default, patch, control value and descriptors from the table.
macro_rules! define_tuning {
    ($(;)? $(
        $(#[doc = $doc:literal])*
        $field:ident : $ty:ty = $default:expr,
            $variant:ident, $word:expr, $kty:ident $({ $($kbody:tt)* })?, $scope:ident, $explain:ident,
                $bounds:expr;
    )*) => {
        /// Per-listener timeouts and socket settings. Top-level values in a file are the
        /// defaults. Generated from [`tuning_table`].
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub(crate) struct Tuning {
            $( $(#[doc = $doc])* pub $field: $ty, )*
        }

        impl Default for Tuning {
            fn default() -> Tuning {
                Tuning { $( $field: $default, )* }
            }
        }

        /// A partial `Tuning`: what one source (file level, command line) sets.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub(crate) struct TuningPatch {
            $( pub $field: Option<$ty>, )*
        }

        impl Tuning {
            /// Sets every value the patch sets.
            pub(crate) fn apply(&mut self, p: &TuningPatch) {
                $( if let Some(v) = &p.$field { self.$field = v.clone(); } )*
            }
        }

        /// One tuning setting's new value, from a control line (`timeout 5`, `no keepalive`).
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub(crate) enum Tune {
            $( $variant($ty), )*
        }

        impl Tune {
            /// Parses a control line whose word is a tuning setting's; None for any other word.
            pub(crate) fn parse(
                word: &str,
                negated: bool,
                args: &[&str],
            ) -> Option<Result<Parsed<Tune>, CommandError>> {
                $(
                    if $word == Some(word) {
                        return Some($kty $({ $($kbody)* })?.parse_word(word, negated, args).map(|p| p.map(Tune::$variant)));
                    }
                )*
                None
            }

            /// Sets the value in `t`, after the setting's own check; the error is the message.
            pub(crate) fn apply(&self, t: &mut Tuning) -> Result<(), String> {
                match self {
                    $( Tune::$variant(v) => {
                        let name = $word.unwrap_or(stringify!($field));
                        t.$field = $kty $({ $($kbody)* })?.on_set(name, v.clone())?;
                    } )*
                }
                Ok(())
            }
        }

        /// The tuning settings' descriptors, in the table's order.
        pub(crate) static TUNING: &[&dyn Entry<Tuning>] = &[
            $( &Field::<Tuning, _> {
                about: About {
                    key: stringify!($field),
                    word: $word,
                    bounds: $bounds,
                    doc: concat!($($doc, )*),
                    scope: Scope::$scope,
                    explain: Explain::$explain,
                },
                kind: $kty $({ $($kbody)* })?,
                get: |t: &Tuning| &t.$field,
                get_mut: |t: &mut Tuning| &mut t.$field,
            }, )*
        ];
    };
}

tuning_table!(define_tuning);

impl Tuning {
    /// Checks every bound.
    pub(crate) fn check(&self) -> Result<(), String> {
        TUNING.iter().try_for_each(|e| e.check(self))
    }

    /// The control lines `write` states for these settings, each after `prefix`; `udp`: of a
    /// UDP listener (TCP-only settings left out).
    pub(crate) fn write(&self, out: &mut String, prefix: &str, udp: bool) {
        for key in WRITE_ORDER {
            let Some(e) = TUNING.iter().find(|e| e.about().key == *key) else {
                continue;
            };
            if udp && e.about().scope == Scope::Tcp {
                continue;
            }
            if let Some(line) = e.written(self) {
                *out += &format!("{prefix}{line}\n");
            }
        }
    }

    /// The reload merge of every tuning setting (see `state::merge`).
    pub(crate) fn merge(base: &Tuning, ours: &Tuning, theirs: &Tuning) -> Tuning {
        let mut out = theirs.clone();
        for e in TUNING {
            e.merge(base, ours, theirs, &mut out);
        }
        out
    }

    /// The settings `explain` lists as `key value` that differ from their default.
    pub(crate) fn listed_differences(&self) -> Vec<String> {
        let d = Tuning::default();
        TUNING
            .iter()
            .filter(|e| e.about().explain == Explain::Listed && !e.is_default(self, &d))
            .map(|e| format!("{} {}", e.about().key, e.shown(self)))
            .collect()
    }
}

// === The process-wide table ===

/// Calls macro `$m` with `$pre` and then the process-wide scalar settings (top-level keys of a
/// file). The order is the TOML reader's and the checks'. Each entry: the doc, `key: Type =
/// default`, the kind, how `explain` tells of it and the bounds in words. The other process-wide
/// settings (paths, the control socket, ACLs) are hand-written in `model::Global`.
macro_rules! global_table {
    ($m:ident $($pre:tt)*) => {
        $m! { $($pre)* ;
            /// Worker threads (`-W`; default: the number of cores).
            workers: usize = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
                Threads { file: 1..=crate::config::settings::MAX_WORKERS as u64 }, Own,
                "1 to 1024";
            /// Sessions per process (`-x`); None = what the open-file limit allows.
            max_connections: Option<u32> = None,
                Limit { file: 1..=crate::addr::MAX_SESSIONS as u64 }, Own, "1 to 1000000";
            /// The listen backlog.
            backlog: u32 = 1024,
                Count {
                    file: 1..=crate::config::settings::MAX_BACKLOG as u64,
                    control: 1..=crate::config::settings::MAX_BACKLOG as u64,
                    floor: 0,
                },
                Own, "1 to 65535";
            /// Accepts per wake-up (`-m`).
            accept_batch: u32 = 100,
                Count {
                    file: 1..=crate::config::settings::MAX_ACCEPT_BATCH as u64,
                    control: 1..=crate::config::settings::MAX_ACCEPT_BATCH as u64,
                    floor: 0,
                },
                Own, "1 to 10000";
            /// How long a drain (reload, takeover, SIGTERM) lets sessions finish.
            drain_timeout: Duration = Duration::from_secs(30), Secs { nonzero: false }, Own, "";
            /// How long a drain keeps idle HTTP clients (kept alive, or accepted with no request
            /// yet) open for one more request, answered with `Connection: close`; capped by
            /// `drain_timeout`.
            drain_grace: Duration = Duration::from_secs(2), Secs { nonzero: false }, Own, "";
            /// TCP Fast Open on the listeners.
            tfo: bool = true, Flag { write_off: false }, Quiet, "";
            /// SO_REUSEPORT on the listeners.
            reuseport: bool = false, Flag { write_off: false }, Quiet, "";
            /// Bulk flows move through splice pipes (zero copy); false copies everything through
            /// buffers.
            splice: bool = true, Flag { write_off: false }, Quiet, "";
        }
    };
}
pub(crate) use global_table;

/// The most worker threads.
pub(crate) const MAX_WORKERS: usize = 1024;
/// The largest listen backlog (the kernel caps it at `net.core.somaxconn` anyway).
pub(crate) const MAX_BACKLOG: u32 = 65_535;
/// The most accepts per wake-up (`-m`).
pub(crate) const MAX_ACCEPT_BATCH: u32 = 10_000;

/// Generates `Global` (in `model`): the table's settings, then the others given before the `;`
/// (`name: Type = default,`), and the descriptors `GLOBAL`.
macro_rules! define_global {
    (
        $(#[$meta:meta])*
        { $( $(#[doc = $xdoc:literal])* $xfield:ident : $xty:ty = $xdefault:expr, )* } ;
        $(
            $(#[doc = $doc:literal])*
            $field:ident : $ty:ty = $default:expr, $kty:ident $({ $($kbody:tt)* })?,
                $explain:ident, $bounds:expr;
        )*
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub(crate) struct Global {
            $( $(#[doc = $doc])* pub $field: $ty, )*
            $( $(#[doc = $xdoc])* pub $xfield: $xty, )*
        }

        impl Default for Global {
            fn default() -> Global {
                Global {
                    $( $field: $default, )*
                    $( $xfield: $xdefault, )*
                }
            }
        }

        impl Global {
            /// The reload merge of every field: `theirs` (the sources now) if the sources
            /// changed it since `base`, else the running value (`ours`); see `state::merge`.
            pub(crate) fn merge(base: &Global, ours: &Global, theirs: &Global) -> Global {
                let mut out = theirs.clone();
                for e in GLOBAL {
                    e.merge(base, ours, theirs, &mut out);
                }
                $(
                    if base.$xfield == theirs.$xfield {
                        out.$xfield = ours.$xfield.clone();
                    }
                )*
                out
            }
        }

        /// The descriptors of the process-wide scalar settings, in the table's order.
        pub(crate) static GLOBAL: &[&dyn settings::Entry<Global>] = &[
            $( &settings::Field::<Global, _> {
                about: settings::About {
                    key: stringify!($field),
                    word: None,
                    bounds: $bounds,
                    doc: concat!($($doc, )*),
                    scope: settings::Scope::All,
                    explain: settings::Explain::$explain,
                },
                kind: settings::$kty $({ $($kbody)* })?,
                get: |g: &Global| &g.$field,
                get_mut: |g: &mut Global| &mut g.$field,
            }, )*
        ];
    };
}
pub(crate) use define_global;

// === The [http] table ===

/// Calls macro `$m` with `$pre` and then the scalar settings of an HTTP listener (`[http]`, the
/// file-wide defaults, and `[listener.http]`). The order is the TOML reader's; `HTTP_EXPLAIN_ORDER`
/// is `explain`'s. Each entry: the doc, `key: Type = default`, the kind (defined in
/// `config::http`, where the grammars of HTTP values live) and the bounds in words. The
/// structured keys (`request_headers`, `response_headers`, `error_pages`) are hand-written.
macro_rules! http_table {
    ($m:ident $($pre:tt)*) => {
        $m! { $($pre)* ;
            /// A request head must be complete this long after its first byte (408 if not;
            /// slowloris).
            header_timeout: Duration = Duration::from_secs(10), HttpSecs, "";
            /// A kept-alive client may stay idle this long between requests.
            keepalive_timeout: Duration = Duration::from_secs(60), HttpSecs, "";
            /// No body progress either way for this long ends the exchange.
            body_timeout: Duration = Duration::from_secs(60), HttpSecs, "";
            /// The server must send its first response byte this long after the request (504
            /// if not).
            response_timeout: Duration = Duration::from_secs(60), HttpSecs, "";
            /// An upgraded connection (WebSocket) may stay idle this long.
            tunnel_timeout: Duration = Duration::from_secs(3600), HttpSecs, "";
            /// Idle kept-alive connections a worker keeps per server.
            server_keepalive: u32 = 64,
                Ranged { range: 0..=MAX_SERVER_KEEPALIVE, sized: false }, "0 to 10000";
            /// An idle server connection is closed after this long (below usual server
            /// timeouts).
            server_idle_timeout: Duration = Duration::from_secs(4), HttpSecs, "";
            /// Largest request body accepted (413 over it); None = unlimited.
            max_body: Option<u64> = None, Size, "";
            /// Longest request line (414 over it).
            max_request_line: u32 = 8 * 1024,
                Ranged { range: MIN_HEAD_LIMIT..=MAX_HEAD_LIMIT, sized: true }, "256 to 16384";
            /// Largest request head (431 over it).
            max_header_bytes: u32 = 16 * 1024,
                Ranged { range: MIN_HEAD_LIMIT..=MAX_HEAD_LIMIT, sized: true }, "256 to 16384";
            /// Most request header fields (431 over it).
            max_headers: u32 = 100, Ranged { range: 1..=MAX_HEADERS, sized: false }, "1 to 1000";
            /// How `X-Forwarded-For` is written.
            forwarded_for: ForwardedFor = ForwardedFor::Append, ForwardedForWord,
                "append, replace or off";
            /// Peers whose `X-Forwarded-For` (and `Forwarded`) is kept; from anyone else it is
            /// replaced.
            trusted_proxies: Vec<Net> = Vec::new(), Proxies, "";
            /// Add `X-Forwarded-Proto`.
            x_forwarded_proto: bool = true, HttpBool, "";
            /// Add `X-Forwarded-Host`.
            x_forwarded_host: bool = true, HttpBool, "";
            /// Add an RFC 7239 `Forwarded` field.
            forwarded: bool = false, HttpBool, "";
            /// Add `Via: 1.1 NAME` to requests and responses; None = no Via.
            via: Option<String> = None, ViaWord, "";
            /// Add `X-Request-ID` to requests that have none (and log it).
            request_id: bool = true, HttpBool, "";
            /// Whether servers get the path in normal form too (`Forward`), or as the client
            /// sent it (`Match`, the default); routes always match it normalised.
            normalize_path: NormalizePath = NormalizePath::Match, NormalizeWord,
                "match or forward";
            /// Keep request header fields whose names have `_` (nginx's
            /// `underscores_in_headers`); dropped by default, so `X_Forwarded_For` cannot pass
            /// for `X-Forwarded-For`.
            underscores_in_headers: bool = false, HttpBool, "";
        }
    };
}
pub(crate) use http_table;

/// `explain`'s order of the `[http]` keys (the differences from the defaults it lists), the
/// structured ones included.
pub(crate) const HTTP_EXPLAIN_ORDER: &[&str] = &[
    "header_timeout",
    "keepalive_timeout",
    "body_timeout",
    "response_timeout",
    "tunnel_timeout",
    "server_keepalive",
    "server_idle_timeout",
    "max_body",
    "max_request_line",
    "max_header_bytes",
    "max_headers",
    "forwarded_for",
    "trusted_proxies",
    "x_forwarded_proto",
    "x_forwarded_host",
    "forwarded",
    "request_id",
    "underscores_in_headers",
    "via",
    "normalize_path",
    "request_headers",
    "response_headers",
    "error_pages",
];

/// Generates `HttpSettings` (in `model`): the table's settings, then the structured ones given
/// before the `;` (`name: Type = default,`).
macro_rules! define_http_settings {
    (
        $(#[$meta:meta])*
        { $( $(#[doc = $xdoc:literal])* $xfield:ident : $xty:ty = $xdefault:expr, )* } ;
        $(
            $(#[doc = $doc:literal])*
            $field:ident : $ty:ty = $default:expr, $kty:ident $({ $($kbody:tt)* })?, $bounds:expr;
        )*
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub(crate) struct HttpSettings {
            $( $(#[doc = $doc])* pub $field: $ty, )*
            $( $(#[doc = $xdoc])* pub $xfield: $xty, )*
        }

        impl Default for HttpSettings {
            fn default() -> HttpSettings {
                HttpSettings {
                    $( $field: $default, )*
                    $( $xfield: $xdefault, )*
                }
            }
        }
    };
}
pub(crate) use define_http_settings;

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
