//! HPACK's Huffman code (RFC 7541 §5.2 and Appendix B), decoding only: Quill writes its string
//! literals raw. The code is canonical (codes of one length are consecutive, in symbol order, and
//! each length starts where the shorter ones end), so the appendix is fully given by its bit
//! lengths, which are all this file transcribes; the codes, the code tree and the decoder's table
//! are computed from them at compile time, with the properties the decoder relies on checked
//! there (a wrong length fails the build, not a request).
//!
//! The decoder reads four bits at a time: one table row per inner node of the code tree (256 of
//! them) and one entry per nibble, saying the node reached, the symbol completed on the way if any
//! (every code is at least five bits, so at most one), and whether EOS was met. Two loads per
//! input byte, no allocation but the output's.

/// The bit length of each symbol's code, 0 to 255 then EOS (256), as RFC 7541 Appendix B lists
/// them.
#[rustfmt::skip]
const LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, // 0-15
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, // 16-31
     6, 10, 10, 12, 13,  6,  8, 11, 10, 10,  8, 11,  8,  6,  6,  6, // 32-47
     5,  5,  5,  6,  6,  6,  6,  6,  6,  6,  7,  8, 15,  6, 12, 10, // 48-63
    13,  6,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7, // 64-79
     7,  7,  7,  7,  7,  7,  7,  7,  8,  7,  8, 13, 19, 13, 14,  6, // 80-95
    15,  5,  6,  5,  6,  5,  6,  6,  6,  5,  7,  7,  6,  6,  6,  5, // 96-111
     6,  7,  6,  5,  5,  6,  7,  7,  7,  7,  7, 15, 11, 14, 13, 28, // 112-127
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, // 128-143
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, // 144-159
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, // 160-175
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, // 176-191
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, // 192-207
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, // 208-223
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, // 224-239
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, // 240-255
    30, // 256-256
];

/// The symbol the code ends in: the end of a string's padding, an error inside one.
const EOS: u16 = 256;

/// A child of a tree node that is a symbol rather than another node.
const LEAF: u16 = 0x8000;

/// The canonical codes of [`LENGTHS`], right-aligned.
const fn codes() -> [u32; 257] {
    let mut codes = [0u32; 257];
    let mut code: u32 = 0;
    let mut len: u8 = 1;
    while len <= 30 {
        let mut sym = 0;
        while sym < 257 {
            if LENGTHS[sym] == len {
                codes[sym] = code;
                code += 1;
            }
            sym += 1;
        }
        code <<= 1;
        len += 1;
    }
    // Complete: the last code of the longest length is all ones (EOS's, 30 of them).
    assert!(codes[EOS as usize] == (1 << 30) - 1);
    codes
}

/// The code tree: 256 inner nodes (node 0 the root), each with two children that are inner
/// nodes or `LEAF | symbol`, and for each node whether the bits leading to it are all ones and
/// how many there are (what padding may be).
struct Tree {
    child: [[u16; 2]; 256],
    ones: [bool; 256],
    depth: [u8; 256],
}

const fn tree() -> Tree {
    let codes = codes();
    let mut t = Tree {
        child: [[0; 2]; 256],
        ones: [false; 256],
        depth: [0; 256],
    };
    t.ones[0] = true;
    let mut nodes = 1;
    let mut sym = 0;
    while sym < 257 {
        let len = LENGTHS[sym] as u32;
        let mut node = 0;
        let mut k = 0;
        while k < len {
            let bit = ((codes[sym] >> (len - 1 - k)) & 1) as usize;
            let next = t.child[node][bit];
            if k + 1 == len {
                assert!(next == 0, "a code is the prefix of another");
                t.child[node][bit] = LEAF | sym as u16;
            } else if next == 0 {
                assert!(nodes < 256, "more inner nodes than a complete code has");
                t.child[node][bit] = nodes as u16;
                t.ones[nodes] = t.ones[node] && bit == 1;
                t.depth[nodes] = t.depth[node] + 1;
                node = nodes;
                nodes += 1;
            } else {
                assert!(next & LEAF == 0, "a code is the prefix of another");
                node = next as usize;
            }
            k += 1;
        }
        sym += 1;
    }
    assert!(nodes == 256, "the code is not complete");
    t
}

/// One entry of the decoder's table: the node reached after four bits, the symbol completed on
/// the way (with [`EMIT`]) and [`FAIL`] when that symbol was EOS.
#[derive(Clone, Copy)]
struct Step {
    next: u8,
    sym: u8,
    flags: u8,
}

const EMIT: u8 = 1;
const FAIL: u8 = 2;

/// The decoder's table and, per node, whether a string may end there (the bits since the last
/// symbol are at most seven ones: EOS's prefix as padding).
struct Table {
    steps: [[Step; 16]; 256],
    end_ok: [bool; 256],
}

const fn table() -> Table {
    let t = tree();
    let mut out = Table {
        steps: [[Step {
            next: 0,
            sym: 0,
            flags: 0,
        }; 16]; 256],
        end_ok: [false; 256],
    };
    let mut node = 0;
    while node < 256 {
        out.end_ok[node] = t.ones[node] && t.depth[node] <= 7;
        let mut nibble = 0;
        while nibble < 16 {
            let mut at = node;
            let mut step = Step {
                next: 0,
                sym: 0,
                flags: 0,
            };
            let mut k = 0;
            while k < 4 {
                let bit = (nibble >> (3 - k)) & 1;
                let c = t.child[at][bit];
                if c & LEAF != 0 {
                    let sym = c & !LEAF;
                    if sym == EOS {
                        step.flags = FAIL;
                        break;
                    }
                    assert!(step.flags & EMIT == 0, "two symbols in four bits");
                    step.flags = EMIT;
                    step.sym = sym as u8;
                    at = 0;
                } else {
                    at = c as usize;
                }
                k += 1;
            }
            step.next = at as u8;
            out.steps[node][nibble] = step;
            nibble += 1;
        }
        node += 1;
    }
    out
}

static TABLE: Table = table();

/// A Huffman-coded string that does not decode: it holds EOS, or ends in more than seven bits of
/// padding or in padding that is not all ones (RFC 7541 §5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Invalid;

/// Appends the decoding of `src` to `out`.
pub(super) fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), Invalid> {
    // At most 8/5 of the input: every code is at least five bits.
    out.reserve(src.len() * 8 / 5 + 1);
    let mut node = 0usize;
    for &b in src {
        for nibble in [b >> 4, b & 0x0f] {
            let step = TABLE.steps[node][usize::from(nibble)];
            if step.flags & FAIL != 0 {
                return Err(Invalid);
            }
            if step.flags & EMIT != 0 {
                out.push(step.sym);
            }
            node = usize::from(step.next);
        }
    }
    if TABLE.end_ok[node] {
        Ok(())
    } else {
        Err(Invalid)
    }
}

/// A test-side encoder from the same codes (Quill writes literals raw), padded with ones.
#[cfg(test)]
pub(super) fn encode(s: &[u8]) -> Vec<u8> {
    let codes = codes();
    let (mut acc, mut bits, mut out) = (0u64, 0u32, Vec::new());
    for &b in s {
        let len = u32::from(LENGTHS[usize::from(b)]);
        acc = (acc << len) | u64::from(codes[usize::from(b)]);
        bits += len;
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
        acc &= (1 << bits) - 1;
    }
    if bits > 0 {
        let pad = 8 - bits;
        out.push(((acc << pad) | ((1 << pad) - 1)) as u8);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(src: &[u8]) -> Result<Vec<u8>, Invalid> {
        let mut out = Vec::new();
        decode(src, &mut out).map(|()| out)
    }

    /// RFC 7541 Appendix C.4.1 and C.6.1's Huffman strings.
    #[test]
    fn the_rfcs_examples_decode() {
        let cases: [(&[u8], &[u8]); 4] = [
            (
                &[
                    0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
                ],
                b"www.example.com",
            ),
            (&[0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf], b"no-cache"),
            (&[0x64, 0x02], b"302"),
            (&[0xae, 0xc3, 0x77, 0x1a, 0x4b], b"private"),
        ];
        for (src, want) in cases {
            assert_eq!(decoded(src).unwrap(), want);
        }
    }

    #[test]
    fn every_byte_value_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(decoded(&encode(&all)).unwrap(), all);
        for b in 0..=255u8 {
            assert_eq!(decoded(&encode(&[b, b, b])).unwrap(), [b, b, b]);
        }
        assert_eq!(decoded(&[]).unwrap(), b"");
    }

    #[test]
    fn eos_in_a_string_is_invalid() {
        // 30 ones (EOS) then padding: four bytes of ones.
        assert_eq!(decoded(&[0xff, 0xff, 0xff, 0xff]), Err(Invalid));
    }

    #[test]
    fn padding_of_eight_bits_or_more_is_invalid() {
        // '0' (00000) then 3 ones is valid; a whole byte of ones after it is not.
        assert_eq!(decoded(&[0x07]).unwrap(), b"0");
        assert_eq!(decoded(&[0x07, 0xff]), Err(Invalid));
        assert_eq!(decoded(&[0xff]), Err(Invalid));
    }

    #[test]
    fn padding_that_is_not_ones_is_invalid() {
        // '0' then 000: the start of another code, not EOS's prefix.
        assert_eq!(decoded(&[0x00]), Err(Invalid));
        assert_eq!(decoded(&[0x06]), Err(Invalid));
    }
}
