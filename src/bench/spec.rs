//! The small languages of `quill bench`'s command line: concurrency sweeps (`--sweep`), named
//! targets (`--target NAME=URL` and the positional TARGET) and client source addresses
//! (`--sources`). Parsing is pure and never panics; every error names the value it refused, in
//! the form `invalid <what> '<value>' (<why>)`, ready to be printed after `quill bench: `.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The most concurrency levels one `--sweep` may ask for: each is a full measurement.
pub const MAX_SWEEP_POINTS: usize = 1000;

/// The most addresses `--sources` may name (a /16's worth: more than any test here needs).
pub const MAX_SOURCES: u64 = 65_536;

/// The longest target name `--target` accepts (it becomes a table column and a legend entry).
pub const MAX_NAME_LEN: usize = 64;

/// Parses `--sweep`: the concurrency levels to measure, in order.
///
/// Three forms:
/// - `START:END:STEP`: START, START+STEP, … up to END. END is inclusive and is always the last
///   level: when it is not on the step grid it is appended, so `50:120:50` gives 50, 100, 120.
/// - a single level: `500`;
/// - a comma list, measured in the order given: `50,100,500`.
///
/// Every level is at least 1, no level may repeat, and at most [`MAX_SWEEP_POINTS`] levels.
pub fn parse_sweep(s: &str) -> Result<Vec<u32>, String> {
    let s = s.trim();
    let levels = if s.contains(':') {
        parse_sweep_range(s)?
    } else {
        parse_sweep_list(s)?
    };
    if levels.len() > MAX_SWEEP_POINTS {
        return Err(format!(
            "invalid sweep '{s}' ({} levels, at most {MAX_SWEEP_POINTS})",
            levels.len()
        ));
    }
    Ok(levels)
}

/// `START:END:STEP`, END inclusive and always present.
fn parse_sweep_range(s: &str) -> Result<Vec<u32>, String> {
    let fields: Vec<&str> = s.split(':').collect();
    let [start, end, step] = fields[..] else {
        return Err(format!(
            "invalid sweep '{s}' (expected START:END:STEP, e.g. 100:1000:100)"
        ));
    };
    let start = sweep_number(s, start, "start")?;
    let end = sweep_number(s, end, "end")?;
    let step = sweep_number(s, step, "step")?;
    if start > end {
        return Err(format!(
            "invalid sweep '{s}' (start {start} is greater than end {end})"
        ));
    }
    // Count before building, so `1:4000000000:1` is refused without allocating.
    let on_grid = u64::from(end - start) / u64::from(step) + 1;
    let count = on_grid + u64::from((end - start) % step != 0);
    if count > MAX_SWEEP_POINTS as u64 {
        return Err(format!(
            "invalid sweep '{s}' ({count} levels, at most {MAX_SWEEP_POINTS})"
        ));
    }
    let mut levels: Vec<u32> = (0..on_grid)
        .map(|i| start + (i as u32) * step) // ≤ end, so no overflow
        .collect();
    if levels.last() != Some(&end) {
        levels.push(end);
    }
    Ok(levels)
}

/// One field of a range: a positive whole number.
fn sweep_number(s: &str, field: &str, what: &str) -> Result<u32, String> {
    let field = field.trim();
    match field.parse::<u32>() {
        Ok(0) => Err(format!("invalid sweep '{s}' ({what} must be at least 1)")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "invalid sweep '{s}' ({what} '{field}' is not a whole number from 1 to {})",
            u32::MAX
        )),
    }
}

/// `500` or `50,100,500`.
fn parse_sweep_list(s: &str) -> Result<Vec<u32>, String> {
    let mut levels = Vec::new();
    for item in s.split(',') {
        if levels.len() == MAX_SWEEP_POINTS {
            return Err(format!(
                "invalid sweep '{s}' (more than {MAX_SWEEP_POINTS} levels)"
            ));
        }
        let level = sweep_number(s, item, "level")?;
        if levels.contains(&level) {
            return Err(format!("invalid sweep '{s}' (level {level} is repeated)"));
        }
        levels.push(level);
    }
    Ok(levels)
}

/// What `quill bench` talks to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `http://host[:port][/path]`: one HTTP/1.1 GET of `path` per request.
    Http {
        /// A name or an IP address; an IPv6 address is kept without its brackets.
        host: String,
        port: u16,
        /// Starts with `/`; may carry a query string.
        path: String,
    },
    /// `tcp://host:port`: connect, send a line, read a line.
    Tcp { host: String, port: u16 },
}

impl Endpoint {
    pub fn host(&self) -> &str {
        match self {
            Endpoint::Http { host, .. } | Endpoint::Tcp { host, .. } => host,
        }
    }

    pub fn port(&self) -> u16 {
        match self {
            Endpoint::Http { port, .. } | Endpoint::Tcp { port, .. } => *port,
        }
    }

    /// `host:port`, with an IPv6 address in brackets: what to resolve, and HTTP's `Host` value
    /// (with the port always shown, which every server accepts).
    pub fn authority(&self) -> String {
        let port = self.port();
        match self.host() {
            host if host.contains(':') => format!("[{host}]:{port}"),
            host => format!("{host}:{port}"),
        }
    }
}

/// The URL form [`parse_endpoint`] reads back to the same value.
impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Http { path, .. } => write!(f, "http://{}{path}", self.authority()),
            Endpoint::Tcp { .. } => write!(f, "tcp://{}", self.authority()),
        }
    }
}

/// Parses a target URL: `http://host[:port][/path]` (port 80 and path `/` by default) or
/// `tcp://host:port` (port required). `host` is a name, an IPv4 address or a bracketed IPv6
/// address (`http://[::1]:8080/`). No user info, fragment, `https` or other scheme.
pub fn parse_endpoint(s: &str) -> Result<Endpoint, String> {
    let bad = |why: &str| format!("invalid target '{s}' ({why})");
    let Some((scheme, rest)) = s.split_once("://") else {
        return Err(bad("expected http://host:port/path or tcp://host:port"));
    };
    let http = match scheme.to_ascii_lowercase().as_str() {
        "http" => true,
        "tcp" => false,
        "https" => return Err(bad("https is not supported; use http:// or tcp://")),
        _ => return Err(bad("the scheme must be http:// or tcp://")),
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (host, port) = split_authority(authority).map_err(|why| bad(&why))?;
    if http {
        let path = match path {
            "" => "/".to_string(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_string(),
        };
        if let Some(c) = path.chars().find(|c| !c.is_ascii_graphic()) {
            return Err(bad(&format!("the path may not contain {c:?}")));
        }
        if path.contains('#') {
            return Err(bad("a fragment (#…) is never sent; leave it out"));
        }
        Ok(Endpoint::Http {
            host,
            port: port.unwrap_or(80),
            path,
        })
    } else {
        if !path.is_empty() {
            return Err(bad("a tcp:// target has no path"));
        }
        let port = port.ok_or_else(|| bad("a tcp:// target needs a port"))?;
        Ok(Endpoint::Tcp { host, port })
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`, checked; the port is `None` when absent.
fn split_authority(authority: &str) -> Result<(String, Option<u16>), String> {
    if authority.contains('@') {
        return Err("user info (user@) is not supported".to_string());
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (v6, after) = rest
            .split_once(']')
            .ok_or("an IPv6 address needs its closing ]")?;
        if v6.parse::<Ipv6Addr>().is_err() {
            return Err(format!("'{v6}' is not an IPv6 address"));
        }
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or("expected :port after ]")?),
        };
        (v6, port)
    } else {
        match authority.split_once(':') {
            _ if authority.matches(':').count() > 1 => {
                return Err("an IPv6 address must be in brackets, e.g. [::1]:8080".to_string())
            }
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("the host is missing".to_string());
    }
    let is_v6 = authority.starts_with('[');
    if !is_v6
        && !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
    {
        return Err(format!("'{host}' is not a host name or address"));
    }
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => Some(n),
            _ => return Err(format!("port '{p}' is not a number from 1 to 65535")),
        },
    };
    Ok((host.to_string(), port))
}

/// One `--target NAME=URL`: a balancer (or the backend itself) measured under its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Letters, digits, `_`, `.` and `-`; unique among targets (the caller checks).
    pub name: String,
    pub endpoint: Endpoint,
}

/// Parses `NAME=URL`, e.g. `haproxy-tcp=tcp://127.0.0.1:8001` (the URL as [`parse_endpoint`]).
/// The name is 1 to [`MAX_NAME_LEN`] of `A-Z a-z 0-9 _ . -`.
pub fn parse_target(s: &str) -> Result<Target, String> {
    let Some((name, url)) = s.split_once('=') else {
        return Err(format!(
            "invalid target '{s}' (expected NAME=URL, e.g. quill=http://127.0.0.1:8080/)"
        ));
    };
    let name_ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-');
    if name.is_empty() || name.len() > MAX_NAME_LEN || !name.bytes().all(name_ok) {
        return Err(format!(
            "invalid target name '{name}' (1 to {MAX_NAME_LEN} of A-Z a-z 0-9 _ . -)"
        ));
    }
    Ok(Target {
        name: name.to_string(),
        endpoint: parse_endpoint(url)?,
    })
}

/// Parses `--sources`: the local addresses client connections are bound to, in order.
///
/// Either one address (IPv4 or IPv6) or an inclusive IPv4 range `A-B`, e.g.
/// `127.0.0.1-127.0.0.50` (50 addresses). Any address is accepted (binding to one this host
/// lacks fails later, at connect time); a range may not run backwards nor hold more than
/// [`MAX_SOURCES`] addresses.
pub fn parse_sources(s: &str) -> Result<Vec<IpAddr>, String> {
    let s = s.trim();
    let addr = |a: &str| -> Result<IpAddr, String> {
        a.trim().parse().map_err(|_| {
            format!(
                "invalid sources '{s}' ('{}' is not an IP address)",
                a.trim()
            )
        })
    };
    let Some((a, b)) = s.split_once('-') else {
        return Ok(vec![addr(s)?]);
    };
    let (IpAddr::V4(first), IpAddr::V4(last)) = (addr(a)?, addr(b)?) else {
        return Err(format!(
            "invalid sources '{s}' (a range must be IPv4, e.g. 127.0.0.1-127.0.0.50)"
        ));
    };
    let (lo, hi) = (u32::from(first), u32::from(last));
    if lo > hi {
        return Err(format!(
            "invalid sources '{s}' (the range runs backwards: {first} is after {last})"
        ));
    }
    let count = u64::from(hi - lo) + 1;
    if count > MAX_SOURCES {
        return Err(format!(
            "invalid sources '{s}' ({count} addresses, at most {MAX_SOURCES})"
        ));
    }
    Ok((lo..=hi).map(|n| IpAddr::V4(Ipv4Addr::from(n))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_range_includes_end() {
        assert_eq!(
            parse_sweep("100:1000:100").unwrap(),
            (1..=10).map(|i| i * 100).collect::<Vec<u32>>()
        );
        assert_eq!(parse_sweep("50:120:50").unwrap(), [50, 100, 120]);
        assert_eq!(parse_sweep("5:5:1").unwrap(), [5]);
        assert_eq!(parse_sweep("1:3:10").unwrap(), [1, 3]);
        assert_eq!(parse_sweep(" 10 : 30 : 10 ").unwrap(), [10, 20, 30]);
        let top = u32::MAX;
        assert_eq!(
            parse_sweep(&format!("{}:{top}:1", top - 2)).unwrap(),
            [top - 2, top - 1, top]
        );
        assert_eq!(
            parse_sweep(&format!("1:{top}:{}", top / 2)).unwrap(),
            [1, 1 + top / 2, top]
        );
    }

    #[test]
    fn sweep_single_and_list() {
        assert_eq!(parse_sweep("500").unwrap(), [500]);
        assert_eq!(parse_sweep("50,100,500").unwrap(), [50, 100, 500]);
        assert_eq!(parse_sweep("500, 50").unwrap(), [500, 50]);
    }

    #[test]
    fn sweep_errors_name_the_value() {
        let err = |s: &str| parse_sweep(s).unwrap_err();
        assert!(err("100:1000:0").contains("step must be at least 1"));
        assert!(err("0:10:1").contains("start must be at least 1"));
        assert!(err("1000:100:100").contains("start 1000 is greater than end 100"));
        assert!(err("1:100000:1").contains("100000 levels, at most 1000"));
        assert!(err("1:4294967295:1").contains("at most 1000"));
        assert!(err("1:x:1").contains("end 'x'"));
        assert!(err("1:10").contains("expected START:END:STEP"));
        assert!(err("1:10:1:1").contains("expected START:END:STEP"));
        assert!(err("50,abc").contains("level 'abc'"));
        assert!(err("50,,60").contains("level ''"));
        assert!(err("").contains("level ''"));
        assert!(err("-5").contains("level '-5'"));
        assert!(err("4294967296").contains("level '4294967296'"));
        assert!(err("50,0").contains("level must be at least 1"));
        assert!(err("50,100,50").contains("level 50 is repeated"));
        let many: Vec<String> = (1..=1001).map(|n| n.to_string()).collect();
        assert!(err(&many.join(",")).contains("more than 1000"));
        assert_eq!(parse_sweep("1:1000:1").unwrap().len(), 1000);
    }

    #[test]
    fn endpoints() {
        let http = |host: &str, port, path: &str| Endpoint::Http {
            host: host.into(),
            port,
            path: path.into(),
        };
        let tcp = |host: &str, port| Endpoint::Tcp {
            host: host.into(),
            port,
        };
        let ok = |s: &str| parse_endpoint(s).unwrap();
        assert_eq!(ok("http://127.0.0.1:8080/x"), http("127.0.0.1", 8080, "/x"));
        assert_eq!(ok("http://localhost"), http("localhost", 80, "/"));
        assert_eq!(ok("http://localhost/"), http("localhost", 80, "/"));
        assert_eq!(ok("HTTP://a.b-c:1/p?q=1&r"), http("a.b-c", 1, "/p?q=1&r"));
        assert_eq!(ok("http://h:81?q"), http("h", 81, "/?q"));
        assert_eq!(ok("http://[::1]:8080/"), http("::1", 8080, "/"));
        assert_eq!(ok("http://[::1]"), http("::1", 80, "/"));
        assert_eq!(ok("tcp://127.0.0.1:9000"), tcp("127.0.0.1", 9000));
        assert_eq!(ok("tcp://[fe80::1]:9"), tcp("fe80::1", 9));
        assert_eq!(ok("http://[::1]:8080/a").authority(), "[::1]:8080");
        assert_eq!(ok("tcp://h:9").authority(), "h:9");
        for s in ["http://[::1]:8080/a?b", "tcp://h:9", "http://h:80/"] {
            assert_eq!(ok(s).to_string(), s);
        }
    }

    #[test]
    fn endpoint_errors() {
        let err = |s: &str| parse_endpoint(s).unwrap_err();
        assert!(err("127.0.0.1:80").contains("expected http://"));
        assert!(err("https://h/").contains("https is not supported"));
        assert!(err("udp://h:1").contains("scheme"));
        assert!(err("tcp://h").contains("needs a port"));
        assert!(err("tcp://h:1/x").contains("no path"));
        assert!(err("http://h:0/").contains("port '0'"));
        assert!(err("http://h:65536/").contains("port '65536'"));
        assert!(err("http://h:/").contains("port ''"));
        assert!(err("http://:80/").contains("host is missing"));
        assert!(err("http:///").contains("host is missing"));
        assert!(err("http://::1:80/").contains("must be in brackets"));
        assert!(err("http://[::1/").contains("closing ]"));
        assert!(err("http://[nope]:1/").contains("'nope' is not an IPv6"));
        assert!(err("http://[::1]x/").contains("expected :port"));
        assert!(err("http://u@h/").contains("user info"));
        assert!(err("http://h_h/").contains("'h_h' is not a host"));
        assert!(err("http://h/a b").contains("' '"));
        assert!(err("http://h/é").contains("'é'"));
        assert!(err("http://h/a#f").contains("fragment"));
    }

    #[test]
    fn targets() {
        let t = parse_target("haproxy-tcp=tcp://127.0.0.1:8001").unwrap();
        assert_eq!(t.name, "haproxy-tcp");
        assert_eq!(t.endpoint.port(), 8001);
        let t = parse_target("q.1_x=http://h/?a=b").unwrap();
        assert_eq!((t.name.as_str(), t.endpoint.host()), ("q.1_x", "h"));
        assert!(parse_target("http://h/")
            .unwrap_err()
            .contains("expected NAME=URL"));
        assert!(parse_target("=http://h/").unwrap_err().contains("name ''"));
        assert!(parse_target("a b=http://h/")
            .unwrap_err()
            .contains("name 'a b'"));
        assert!(parse_target(&format!("{}=http://h/", "n".repeat(65))).is_err());
        assert!(parse_target("ok=ftp://h/").unwrap_err().contains("scheme"));
    }

    #[test]
    fn sources() {
        let v4 = |s: &str| IpAddr::V4(s.parse().unwrap());
        let all = parse_sources("127.0.0.1-127.0.0.50").unwrap();
        assert_eq!(all.len(), 50);
        assert_eq!((all[0], all[49]), (v4("127.0.0.1"), v4("127.0.0.50")));
        let across = parse_sources("127.0.0.255-127.0.1.1").unwrap();
        assert_eq!(
            across,
            [v4("127.0.0.255"), v4("127.0.1.0"), v4("127.0.1.1")]
        );
        assert_eq!(parse_sources("127.0.0.9").unwrap(), [v4("127.0.0.9")]);
        assert_eq!(parse_sources("10.0.0.1-10.0.0.1").unwrap().len(), 1);
        assert_eq!(
            parse_sources("::1").unwrap(),
            [IpAddr::V6(Ipv6Addr::LOCALHOST)]
        );
        assert_eq!(
            parse_sources("127.0.0.0-127.0.255.255").unwrap().len(),
            65_536
        );
        let err = |s: &str| parse_sources(s).unwrap_err();
        assert!(err("127.0.0.0-127.1.0.0").contains("65537 addresses, at most 65536"));
        assert!(err("0.0.0.0-255.255.255.255").contains("4294967296 addresses"));
        assert!(err("127.0.0.50-127.0.0.1").contains("runs backwards"));
        assert!(err("::1-::2").contains("must be IPv4"));
        assert!(err("127.0.0.1-").contains("'' is not an IP address"));
        assert!(err("127.0.0.300").contains("'127.0.0.300'"));
        assert!(err("127.0.0.1-b-c").contains("'b-c'"));
    }

    /// A tiny deterministic generator (xorshift64*), so the robustness test needs no crate.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Random strings built from the pieces these grammars care about never panic a parser,
    /// and whatever is accepted keeps the documented invariants.
    #[test]
    fn random_input_never_panics() {
        const PIECES: &[&str] = &[
            "0",
            "1",
            "9",
            "50",
            "100",
            "4294967295",
            "4294967296",
            "65535",
            "65536",
            ":",
            ",",
            "-",
            "=",
            ".",
            "/",
            "//",
            "[",
            "]",
            "::1",
            "127.0.0.1",
            "255",
            "http://",
            "tcp://",
            "https://",
            "h",
            "name",
            "?",
            "#",
            "@",
            " ",
            "\t",
            "é",
            "\u{0}",
            "%",
            "_",
            "",
        ];
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..20_000 {
            let len = rng.below(10);
            let s: String = (0..len).map(|_| PIECES[rng.below(PIECES.len())]).collect();
            if let Ok(levels) = parse_sweep(&s) {
                assert!(
                    !levels.is_empty() && levels.len() <= MAX_SWEEP_POINTS,
                    "{s:?}"
                );
                assert!(levels.iter().all(|&l| l >= 1), "{s:?}");
            }
            if let Ok(ep) = parse_endpoint(&s) {
                assert_eq!(parse_endpoint(&ep.to_string()).as_ref(), Ok(&ep), "{s:?}");
                assert!(ep.port() >= 1, "{s:?}");
            }
            if let Ok(t) = parse_target(&s) {
                assert!(!t.name.is_empty(), "{s:?}");
            }
            if let Ok(addrs) = parse_sources(&s) {
                assert!(
                    !addrs.is_empty() && addrs.len() as u64 <= MAX_SOURCES,
                    "{s:?}"
                );
            }
        }
    }
}
