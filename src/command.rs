//! Pen's control language (penctl): one command per line, parsed into a [`Command`]. Used by `-O`/`-o`
//! at start-up now, and by the control socket and `-F` files later. Parsing is pure; applying a
//! command to a configuration lives in `config`.

use std::time::Duration;

use crate::config::{parse_duration, Fastclose};

/// A selection flag that `mode`-group commands turn on (`hash`) or off (`no hash`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeWord {
    RoundRobin,
    Hash,
    Weight,
    Prio,
    Stubborn,
    LeastConn,
    P2c,
}

impl ModeWord {
    pub const ALL: [ModeWord; 7] = [
        ModeWord::RoundRobin,
        ModeWord::Hash,
        ModeWord::Weight,
        ModeWord::Prio,
        ModeWord::Stubborn,
        ModeWord::LeastConn,
        ModeWord::P2c,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ModeWord::RoundRobin => "roundrobin",
            ModeWord::Hash => "hash",
            ModeWord::Weight => "weight",
            ModeWord::Prio => "prio",
            ModeWord::Stubborn => "stubborn",
            ModeWord::LeastConn => "leastconn",
            ModeWord::P2c => "p2c",
        }
    }

    pub fn parse(word: &str) -> Option<ModeWord> {
        ModeWord::ALL.into_iter().find(|w| w.name() == word)
    }
}

/// Changes to one server (`server N ...`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerChange {
    pub address: Option<String>,
    pub port: Option<u16>,
    pub max: Option<u32>,
    pub hard: Option<u32>,
    pub weight: Option<u32>,
    pub prio: Option<u32>,
    pub blacklist: Option<Duration>,
}

/// One parsed command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Mode(ModeWord, bool),
    Blacklist(Duration),
    Timeout(Duration),
    Tracking(Duration),
    ClientsMax(u32),
    ConnMax(u32),
    TcpNodelay(bool),
    TcpFastclose(Fastclose),
    Keepalive(bool),
    IdleTimeout(Duration),
    Server(usize, ServerChange),
}

/// Why a command line was rejected; the message names the offending word.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct CommandError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, CommandError> {
    Err(CommandError(msg.into()))
}

/// Parses one command line (`hash`, `no weight`, `server 1 weight 3`, ...).
pub fn parse(line: &str) -> Result<Command, CommandError> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let Some((&first, rest)) = words.split_first() else {
        return err("empty command");
    };
    let (negated, name, args) = if first == "no" {
        match rest.split_first() {
            Some((&name, args)) => (true, name, args),
            None => return err("'no' needs a command"),
        }
    } else {
        (false, first, rest)
    };
    if let Some(word) = ModeWord::parse(name) {
        no_args(name, args)?;
        return Ok(Command::Mode(word, !negated));
    }
    let cmd = match (name, negated) {
        ("tcp_nodelay", _) => {
            no_args(name, args)?;
            Command::TcpNodelay(!negated)
        }
        ("keepalive", _) => {
            no_args(name, args)?;
            Command::Keepalive(!negated)
        }
        ("blacklist", false) => Command::Blacklist(duration_arg(name, args)?),
        ("timeout", false) => Command::Timeout(duration_arg(name, args)?),
        ("tracking", false) => Command::Tracking(duration_arg(name, args)?),
        ("idle_timeout", false) => Command::IdleTimeout(duration_arg(name, args)?),
        ("clients_max", false) => Command::ClientsMax(number_arg(name, args)?),
        ("conn_max", false) => Command::ConnMax(number_arg(name, args)?),
        ("tcp_fastclose", false) => match args {
            [value] => Command::TcpFastclose(Fastclose::parse(value).ok_or_else(|| {
                CommandError(format!("tcp_fastclose: '{value}' is not up|down|both|off"))
            })?),
            _ => return err("tcp_fastclose needs one of up|down|both|off"),
        },
        ("server", false) => parse_server(args)?,
        _ if negated => return err(format!("'no {name}' is not a command")),
        _ => return err(format!("unknown command '{name}'")),
    };
    Ok(cmd)
}

fn no_args(name: &str, args: &[&str]) -> Result<(), CommandError> {
    match args.first() {
        None => Ok(()),
        Some(extra) => err(format!("{name}: unexpected argument '{extra}'")),
    }
}

fn one_arg<'a>(name: &str, args: &[&'a str]) -> Result<&'a str, CommandError> {
    match args {
        [value] => Ok(value),
        [] => err(format!("{name} needs a value")),
        [_, extra, ..] => err(format!("{name}: unexpected argument '{extra}'")),
    }
}

fn duration_arg(name: &str, args: &[&str]) -> Result<Duration, CommandError> {
    let value = one_arg(name, args)?;
    parse_duration(value).map_err(|e| CommandError(format!("{name}: {e}")))
}

fn number_arg<T: std::str::FromStr>(name: &str, args: &[&str]) -> Result<T, CommandError> {
    let value = one_arg(name, args)?;
    value
        .parse()
        .map_err(|_| CommandError(format!("{name}: '{value}' is not a number")))
}

fn parse_server(args: &[&str]) -> Result<Command, CommandError> {
    let Some((&index, mut rest)) = args.split_first() else {
        return err("server needs a server number");
    };
    let index: usize = index
        .parse()
        .map_err(|_| CommandError(format!("server: '{index}' is not a server number")))?;
    let mut change = ServerChange::default();
    while let Some((&key, tail)) = rest.split_first() {
        let Some((&value, tail)) = tail.split_first() else {
            return err(format!("server {index}: '{key}' needs a value"));
        };
        let num = |v: &str| -> Result<u32, CommandError> {
            v.parse()
                .map_err(|_| CommandError(format!("server {index}: {key} '{v}' is not a number")))
        };
        match key {
            "address" => change.address = Some(value.to_string()),
            "port" => {
                change.port = Some(value.parse().ok().filter(|p| *p > 0).ok_or_else(|| {
                    CommandError(format!("server {index}: port '{value}' is not a port"))
                })?)
            }
            "max" => change.max = Some(num(value)?),
            "hard" => change.hard = Some(num(value)?),
            "weight" => change.weight = Some(num(value)?),
            "prio" => change.prio = Some(num(value)?),
            "blacklist" => {
                change.blacklist = Some(
                    parse_duration(value)
                        .map_err(|e| CommandError(format!("server {index}: blacklist: {e}")))?,
                )
            }
            _ => return err(format!("server {index}: unknown setting '{key}'")),
        }
        rest = tail;
    }
    Ok(Command::Server(index, change))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pen_commands() {
        let check =
            |line: &str, expected: Command| assert_eq!(parse(line).unwrap(), expected, "{line}");
        check("hash", Command::Mode(ModeWord::Hash, true));
        check("no  roundrobin", Command::Mode(ModeWord::RoundRobin, false));
        check("blacklist 10", Command::Blacklist(Duration::from_secs(10)));
        check(
            "timeout 500ms",
            Command::Timeout(Duration::from_millis(500)),
        );
        check("tcp_fastclose both", Command::TcpFastclose(Fastclose::Both));
        check("no tcp_nodelay", Command::TcpNodelay(false));
        check(
            "server 1 address 10.0.0.2 port 81 weight 3",
            Command::Server(
                1,
                ServerChange {
                    address: Some("10.0.0.2".into()),
                    port: Some(81),
                    weight: Some(3),
                    ..Default::default()
                },
            ),
        );
    }

    #[test]
    fn rejects_with_the_offending_word() {
        for (line, word) in [
            ("frobnicate", "frobnicate"),
            ("hash now", "now"),
            ("blacklist soon", "soon"),
            ("server x", "x"),
            ("server 1 colour red", "colour"),
            ("tcp_fastclose sideways", "sideways"),
            ("no blacklist", "blacklist"),
        ] {
            let e = parse(line).unwrap_err().to_string();
            assert!(e.contains(word), "{line}: {e}");
        }
    }
}

#[cfg(test)]
mod robustness {
    /// Any sequence of known and unknown words parses or fails with a message, never panics.
    #[test]
    fn word_salad_never_panics() {
        let words = [
            "server",
            "no",
            "hash",
            "0",
            "1",
            "-1",
            "99999999999999999999",
            "address",
            "port",
            "max",
            "weight",
            "blacklist",
            "tcp_fastclose",
            "up",
            "timeout",
            "5ms",
            "",
            "\u{0}",
            "é",
        ];
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..5_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let n = (rng % 7) as usize;
            let line: Vec<&str> = (0..n)
                .map(|k| words[((rng >> (k * 5)) % words.len() as u64) as usize])
                .collect();
            let _ = super::parse(&line.join(" "));
        }
    }
}
