//! Numbers written in decimal ASCII without allocating: what heads (`Content-Length`, ranges,
//! ports) and log fields need, written into a caller's 20-byte buffer.

/// The most digits a `u64` takes.
pub const MAX_DIGITS: usize = 20;

/// `n` in decimal, at the end of `buf`.
pub fn digits(n: u64, buf: &mut [u8; MAX_DIGITS]) -> &[u8] {
    let mut at = buf.len();
    let mut n = n;
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[at..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_width_is_written_as_std_writes_it() {
        let mut buf = [0; MAX_DIGITS];
        for n in [0, 7, 10, 99, 100, 65_535, 1 << 32, u64::MAX - 1, u64::MAX] {
            assert_eq!(digits(n, &mut buf), n.to_string().as_bytes());
        }
    }
}
