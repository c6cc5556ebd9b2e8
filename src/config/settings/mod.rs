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
//! The same holds for the process-wide and `[http]` scalar settings (`tables`: `global_table`,
//! `http_table`), whose structs `model` generates with the structured fields added by hand.
//! Structured tables (routes, TLS, UDP, health, geoip) stay hand-written in their own modules.
//! This module sits below `model` and imports nothing from the rest of `config`.
//!
//! Files: this one holds the shared grammar (`in_range`, the control argument helpers, `Dur`)
//! and the descriptors (`About`, `Entry`, `Field`); `kinds` the kinds; `tuning` the tuning table
//! and what it generates; `tables` the process-wide and `[http]` tables; `tests` the unit tests
//! and the man-page check.

mod kinds;
mod tables;
mod tuning;

use std::fmt;
use std::ops::RangeInclusive;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use quill_core::duration::{parse_duration, MAX_DURATION};

pub(crate) use kinds::*;
pub(crate) use tables::*;
pub(crate) use tuning::*;

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
pub(crate) fn not_negatable<T>(name: &str) -> Result<T, CommandError> {
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

#[cfg(test)]
mod tests;
