//! The workspace's one random number generator: a 64-bit xorshift (Marsaglia's shifts 13, 7,
//! 17), for the balancer's choices, the jitter of health probes and the deterministic inputs of
//! robustness tests. Fast, and not secret: nothing that must be unpredictable uses it.

/// A xorshift64 generator. A seed of 0 gives only zeros: seed it with anything else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose first number is the one after `seed`.
    pub const fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next number (the state moves on to it).
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number below `n` (0 when `n` is 0), from the next one.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64().checked_rem(n).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn the_sequence_is_the_xorshift_the_product_always_drew() {
        // The numbers the hand-written copies gave from this seed.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rng = Rng::new(x);
        for _ in 0..1000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            assert_eq!(rng.next_u64(), x);
        }
        assert_eq!(Rng::new(0).next_u64(), 0);
        assert!((0..100).all(|_| rng.below(7) < 7));
        assert_eq!(rng.below(0), 0);
    }
}
