//! Content codings (RFC 9110 §8.4.1) of the precompressed variants a file server keeps beside a
//! file (`app.js.br`, `app.js.zst`, `app.js.gz`), and the choice among them by the request's
//! `Accept-Encoding` (§12.5.3).
//!
//! The choice: among the codings the server has, those the client accepts with a weight above
//! zero; the highest weight wins, and on a tie the server's order (the configured list, e.g.
//! `["br", "gzip"]`). Browsers send no weights (`gzip, deflate, br, zstd`), so in practice the
//! server's order decides. A coding is accepted by its own member (`x-gzip` counts as `gzip`,
//! §8.4.1.3) or, when not listed, by `*`; names are case-insensitive. A member with an invalid
//! weight counts as weight 0 (refused): the identity is always a safe answer.

/// A content coding Quill serves from a precompressed file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Coding {
    /// Brotli (RFC 7932), files ending in `.br`.
    Br,
    /// Zstandard (RFC 8878), files ending in `.zst`.
    Zstd,
    /// gzip (RFC 1952), files ending in `.gz`.
    Gzip,
}

impl Coding {
    /// Every coding, in the order a server prefers them by default (smallest output first).
    pub const ALL: [Coding; 3] = [Coding::Br, Coding::Zstd, Coding::Gzip];

    /// The coding's token, as in `Content-Encoding` and `Accept-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Br => "br",
            Coding::Zstd => "zstd",
            Coding::Gzip => "gzip",
        }
    }

    /// The suffix of the precompressed file beside the original (with its dot).
    pub fn file_suffix(self) -> &'static str {
        match self {
            Coding::Br => ".br",
            Coding::Zstd => ".zst",
            Coding::Gzip => ".gz",
        }
    }

    /// The coding named by a configuration token (`br`, `zstd`, `gzip`), case-insensitive.
    pub fn from_token(token: &[u8]) -> Option<Coding> {
        Coding::ALL
            .into_iter()
            .find(|c| c.token().as_bytes().eq_ignore_ascii_case(token))
    }
}

/// A weight (`q`, §12.4.2) in thousandths: 0 (not acceptable) to 1000.
type Weight = u16;

/// Whether `value` (an Accept-Encoding field value) accepts `coding` (a coding token) with a
/// weight above zero.
pub fn accepts(value: &[u8], coding: &[u8]) -> bool {
    weight(value, coding) > 0
}

/// The coding to send among `available` (in the server's order of preference), or `None` for
/// the identity: see the module's documentation for the rule.
pub fn choose(value: &[u8], available: &[Coding]) -> Option<Coding> {
    let mut best: Option<(Coding, Weight)> = None;
    for &c in available {
        let w = weight(value, c.token().as_bytes());
        if w > 0 && best.is_none_or(|(_, bw)| w > bw) {
            best = Some((c, w));
        }
    }
    best.map(|(c, _)| c)
}

/// The weight `value` gives `coding`: its own member's (the first, if listed twice), else `*`'s,
/// else 0.
fn weight(value: &[u8], coding: &[u8]) -> Weight {
    let mut star = None;
    for member in value.split(|&b| b == b',') {
        let mut parts = member.split(|&b| b == b';');
        let name = super::trim(parts.next().unwrap_or_default());
        if name.is_empty() {
            continue;
        }
        let w = member_weight(parts);
        if same_coding(name, coding) {
            return w;
        }
        if name == b"*" && star.is_none() {
            star = Some(w);
        }
    }
    star.unwrap_or(0)
}

/// `gzip` and `x-gzip` are one coding (§8.4.1.3); names compare case-insensitively.
fn same_coding(a: &[u8], b: &[u8]) -> bool {
    fn canon(n: &[u8]) -> &[u8] {
        let x_gzip = n.len() == 6 && n[..2].eq_ignore_ascii_case(b"x-");
        if x_gzip && n[2..].eq_ignore_ascii_case(b"gzip") {
            &n[2..]
        } else {
            n
        }
    }
    canon(a).eq_ignore_ascii_case(canon(b))
}

/// The weight of a member's parameters: `q=` (1000 if absent); an invalid one is 0.
fn member_weight<'a>(params: impl Iterator<Item = &'a [u8]>) -> Weight {
    let mut w = 1000;
    for p in params {
        let p = super::trim(p);
        if p.len() >= 2 && p[..2].eq_ignore_ascii_case(b"q=") {
            w = qvalue(&p[2..]).unwrap_or(0);
        }
    }
    w
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )` in thousandths.
fn qvalue(v: &[u8]) -> Option<Weight> {
    let (int, frac) = match v.iter().position(|&b| b == b'.') {
        Some(i) => (&v[..i], &v[i + 1..]),
        None => (v, &b""[..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths: Weight = 0;
    for i in 0..3 {
        thousandths = thousandths * 10 + frac.get(i).map_or(0, |d| Weight::from(d - b'0'));
    }
    match int {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_listed_coding_is_accepted_unless_its_weight_is_zero() {
        assert!(accepts(b"gzip, deflate, br, zstd", b"br"));
        assert!(accepts(b"GZIP", b"gzip"));
        assert!(accepts(b"x-gzip", b"gzip"));
        assert!(accepts(b"gzip", b"x-gzip"));
        assert!(accepts(b"br;q=0.001", b"br"));
        assert!(accepts(b"br ; q=1.000", b"br"));
        assert!(accepts(b"br;Q=0.5", b"br"));
        assert!(!accepts(b"br;q=0", b"br"));
        assert!(!accepts(b"br;q=0.000", b"br"));
        assert!(!accepts(b"gzip", b"br"));
        assert!(!accepts(b"", b"gzip"));
        assert!(!accepts(b"x-br", b"br"));
        assert!(!accepts(b"gzipx", b"gzip"));
    }

    #[test]
    fn a_star_accepts_what_is_not_listed() {
        assert!(accepts(b"*", b"br"));
        assert!(!accepts(b"*;q=0", b"br"));
        assert!(accepts(b"gzip;q=0, *", b"br"));
        assert!(!accepts(b"gzip;q=0, *", b"gzip"));
        assert!(!accepts(b"*, br;q=0", b"br"));
    }

    #[test]
    fn an_invalid_weight_refuses_the_coding() {
        for v in [
            "br;q=2",
            "br;q=1.5",
            "br;q=0.0001",
            "br;q=",
            "br;q=abc",
            "br;q=-1",
            "br;q=.5",
        ] {
            assert!(!accepts(v.as_bytes(), b"br"), "{v}");
        }
        assert!(accepts(b"br;level=5", b"br"));
    }

    #[test]
    fn the_choice_follows_weight_then_server_order() {
        let server = [Coding::Br, Coding::Gzip];
        assert_eq!(
            choose(b"gzip, deflate, br, zstd", &server),
            Some(Coding::Br)
        );
        assert_eq!(
            choose(b"gzip, deflate, br, zstd", &[Coding::Gzip, Coding::Br]),
            Some(Coding::Gzip)
        );
        assert_eq!(choose(b"gzip;q=1, br;q=0.5", &server), Some(Coding::Gzip));
        assert_eq!(choose(b"gzip, deflate", &server), Some(Coding::Gzip));
        assert_eq!(choose(b"identity", &server), None);
        assert_eq!(choose(b"br;q=0, gzip;q=0", &server), None);
        assert_eq!(choose(b"*", &server), Some(Coding::Br));
        assert_eq!(choose(b"zstd", &server), None);
        assert_eq!(choose(b"zstd", &Coding::ALL), Some(Coding::Zstd));
        assert_eq!(choose(b"br", &[]), None);
    }

    #[test]
    fn configuration_tokens_name_codings() {
        assert_eq!(Coding::from_token(b"BR"), Some(Coding::Br));
        assert_eq!(Coding::from_token(b"zstd"), Some(Coding::Zstd));
        assert_eq!(Coding::from_token(b"deflate"), None);
        for c in Coding::ALL {
            assert_eq!(Coding::from_token(c.token().as_bytes()), Some(c));
        }
    }

    proptest! {
        #[test]
        fn the_choice_is_accepted_and_none_better_is_passed_over(
            members in proptest::collection::vec((0usize..6, proptest::option::of(0u16..=1000)), 0..6),
        ) {
            let names = ["br", "gzip", "x-gzip", "zstd", "*", "deflate"];
            let value = members.iter().map(|&(n, q)| match q {
                Some(q) => format!("{};q={}.{:03}", names[n], q / 1000, q % 1000),
                None => names[n].to_string(),
            }).collect::<Vec<_>>().join(", ");
            let v = value.as_bytes();
            match choose(v, &Coding::ALL) {
                Some(c) => {
                    prop_assert!(accepts(v, c.token().as_bytes()));
                    let w = weight(v, c.token().as_bytes());
                    for other in Coding::ALL {
                        prop_assert!(weight(v, other.token().as_bytes()) <= w, "{}", value);
                    }
                }
                None => {
                    for c in Coding::ALL {
                        prop_assert!(!accepts(v, c.token().as_bytes()), "{}", value);
                    }
                }
            }
        }

        #[test]
        fn arbitrary_values_never_panic(v in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = choose(&v, &Coding::ALL);
        }
    }
}
