//! The same share as rule.rs, without a division instruction, when the numbers are small (the
//! usual packet) and the source can show its next two draws (a buffered keystream).
//!
//! A share's chain (m -> U -> x -> the next m) holds two divisions, and a 64-bit division takes
//! tens of cycles. Below TABLE both are multiplications by reciprocals from tables built at
//! compile time (D. Lemire, O. Kaser, N. Kurz, "Faster remainder by direct computation", 2019):
//! a / n = (a * ceil(2^64 / n)) >> 64 for a, n < 2^32, and v mod k = ((ceil(2^128 / k) * v mod
//! 2^128) * k) >> 128 for any u64 v and k >= 2. The coin folds into one quotient: with
//! 2F = qn + r, r > 0 and c in [0, n) the coin's value, q + [c < r] = floor((2F + n - 1 - c) / n).
//! This path makes only the usual share, which draws a coin and then x (see `free_share`). Both
//! draws are read before either is taken; one that fails the quick acceptance test
//! (v <= 2^64 - 1 - k, which implies the rejection rule's v < 2^64 - (2^64 mod k)), any other
//! share, or numbers out of the tables' range, send the share down the general path with nothing
//! drawn.

#[cfg(test)]
use super::rule::SplitError;
use super::rule::{Shares, SMALL_SHARE};

/// Divisors below this have reciprocals in the tables (a power of two: indexes are masked). The
/// shares of a run are below it too.
const TABLE: usize = SMALL_SHARE as usize;

/// ceil(2^64 / n) for 2 <= n < TABLE.
static RECIP_64: [u64; TABLE] = {
    let mut t = [0u64; TABLE];
    let mut n = 2;
    while n < TABLE {
        t[n] = u64::MAX / n as u64 + 1;
        n += 1;
    }
    t
};

/// ceil(2^128 / k) for 2 <= k < TABLE, in two halves (8-byte entries index without a shift); 0
/// for k = 1, which makes `rem` give v mod 1 = 0.
static RECIP_128_HIGH: [u64; TABLE] = recip_128_half(64);
static RECIP_128_LOW: [u64; TABLE] = recip_128_half(0);

const fn recip_128_half(shift: u32) -> [u64; TABLE] {
    let mut t = [0u64; TABLE];
    let mut k = 2;
    while k < TABLE {
        t[k] = ((u128::MAX / k as u128 + 1) >> shift) as u64;
        k += 1;
    }
    t
}

#[inline(always)]
fn mul_high(a: u64, b: u64) -> u64 {
    ((u128::from(a) * u128::from(b)) >> 64) as u64
}

/// floor(a / n) for a < 2^32 and 2 <= n < TABLE.
#[inline(always)]
fn quot(a: u64, n: u64) -> u64 {
    mul_high(a, RECIP_64[n as usize & (TABLE - 1)])
}

/// v mod k for 1 <= k < TABLE.
#[inline(always)]
fn rem(v: u64, k: u64) -> u64 {
    let i = k as usize & (TABLE - 1);
    let recip = (u128::from(RECIP_128_HIGH[i]) << 64) | u128::from(RECIP_128_LOW[i]);
    let low = recip.wrapping_mul(u128::from(v));
    let carry = mul_high(low as u64, k);
    (((low >> 64) * u128::from(k) + u128::from(carry)) >> 64) as u64
}

/// What `run` made: how many shares, from how many draws, and the fen still to share.
pub(super) struct Run {
    pub shares: usize,
    pub draws: usize,
    pub fen_left: u64,
}

/// Whether this path can share `m` fen over `n` shares: n and 2F + n below the reciprocals'
/// ranges (F and n only shrink as shares are drawn, so they stay in range for the whole run), and
/// the share's U + 1 <= 2m / n below TABLE (checked again for every share, as m / n moves).
#[inline(always)]
pub(super) fn in_range(m: u64, n: u64) -> bool {
    2 <= n && n < TABLE as u64 && n <= m && 2 * (m - n) + n <= u64::from(u32::MAX) && 2 * m < TABLE as u64 * n
}

/// Most shares one run makes: each takes two draws, and a keystream buffers 256.
const RUN: usize = 128;

/// Shares of `m` fen over `n` shares from the buffered `draws`, handed together to
/// `shares.put_run` at `position`, for as long as this path can make them (at most RUN) and
/// never the last (the general path makes those). What it made, and the error `put_run` gave if
/// any. Not inlined: on its own, the loop keeps its state in registers; and it stores each share
/// in a buffer of its own, so no write into the caller's objects sits inside the chain from one
/// share to the next.
#[inline(never)]
pub(super) fn run<S: Shares + ?Sized>(
    draws: &[u64],
    m: u64,
    n: u64,
    position: usize,
    shares: &mut S,
) -> (Run, Result<(), S::Error>) {
    let (mut free, mut n, mut made) = (m.saturating_sub(n), n, 0);
    let mut run = [0u16; RUN];
    if in_range(m, n) {
        for (slot, pair) in run.iter_mut().zip(draws.chunks_exact(2)) {
            if n <= 1 {
                break;
            }
            let Some(x) = free_share(free, n, pair[0], pair[1]) else {
                break;
            };
            // 1 + x < TABLE = SMALL_SHARE.
            *slot = (1 + x) as u16;
            (free, n, made) = (free - x, n - 1, made + 1);
        }
    }
    let fen_left = if made == 0 { m } else { free + n };
    (
        Run {
            shares: made,
            draws: 2 * made,
            fen_left,
        },
        shares.put_run(position, run.get(..made).unwrap_or_default()),
    )
}

/// With `free` = F = m - n fen free over `n` >= 2 shares (2F + n < 2^32, n < TABLE), and the
/// next draws `first` and `second`: the share's x (the share is 1 + x) by the rule of rule.rs,
/// taking both draws; `None` when this path cannot tell.
///
/// This path makes the usual share only: one with a coin (r > 0) and 2F >= n, so that U >= 1
/// whatever the coin, and the share takes both draws (the coin `first`, x from `second`). That
/// is told from F alone by a branch the CPU predicts, so where the next share's draws sit never
/// waits for this share's coin: the chain from one share to the next is F's alone. A share with
/// no coin (2F a multiple of n, 1 in n) or that may draw no x (2F < n, a packet's last fen)
/// goes down the general path.
#[inline(always)]
fn free_share(free: u64, n: u64, first: u64, second: u64) -> Option<u64> {
    let two_f = 2 * free;
    if two_f < n || two_f == quot(two_f, n) * n {
        return None;
    }
    let coin = rem(first, n);
    let k = quot(two_f + n - 1 - coin, n) + 1;
    if k >= TABLE as u64 || first > u64::MAX - n || second > u64::MAX - k {
        return None;
    }
    Some(rem(second, k))
}

/// The share of `m` fen over `n` shares (1 <= n <= m) when the next draws are `first` and
/// `second`, with how many of them it takes; `None` when this path cannot tell.
#[cfg(test)]
fn share(m: u64, n: u64, first: u64, second: u64) -> Option<(u64, usize)> {
    /// Keeps the first share, then stops the run.
    struct First(Option<u64>);
    impl Shares for First {
        type Error = SplitError;
        fn put(&mut self, _: usize, share: i64) -> Result<(), SplitError> {
            self.0 = Some(share as u64);
            Err(SplitError::RngUnavailable)
        }
    }
    let mut first_share = First(None);
    let (made, _) = run(&[first, second], m, n, 0, &mut first_share);
    first_share.0.map(|share| (share, made.draws))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::split::rng::seeded_rng;
    use crate::split::rule::{lucky_share, lucky_split_all, lucky_split_into, DrawU64};
    use proptest::prelude::*;

    /// Scripted draws, then zeros (always accepted).
    struct Script {
        draws: Vec<u64>,
        at: usize,
    }

    impl DrawU64 for Script {
        fn next_u64(&mut self) -> u64 {
            self.at += 1;
            self.draws.get(self.at - 1).copied().unwrap_or(0)
        }
    }

    /// The share of m over n by the general path of rule.rs from `draws`, and the draws it took.
    fn general(m: u64, n: u64, draws: &[u64]) -> (u64, usize) {
        let mut script = Script {
            draws: draws.to_vec(),
            at: 0,
        };
        let share = lucky_share(&mut script, m as i64, n as i64).unwrap() as u64;
        (share, script.at)
    }

    /// Hides `buffered`, so every share takes the general path.
    struct General<R>(R);

    impl<R: DrawU64> DrawU64 for General<R> {
        fn next_u64(&mut self) -> u64 {
            self.0.next_u64()
        }
    }

    const EDGES: [u64; 8] = [0, 1, 2, 1 << 32, u64::MAX / 3, u64::MAX - 1024, u64::MAX - 1, u64::MAX];

    #[test]
    fn reciprocals_divide_exactly() {
        for d in 2..TABLE as u64 {
            for a in [
                0,
                1,
                d - 1,
                d,
                d + 1,
                12_345,
                u64::from(u32::MAX) - d,
                u64::from(u32::MAX),
            ] {
                assert_eq!(quot(a, d), a / d, "{a} / {d}");
            }
            for v in EDGES
                .into_iter()
                .chain([d - 1, d, d * 977, u64::MAX - d, u64::MAX - d + 1])
            {
                assert_eq!(rem(v, d), v % d, "{v} mod {d}");
            }
        }
        assert_eq!(rem(u64::MAX, 1), 0);
    }

    #[test]
    fn draws_near_the_rejection_limit_take_the_general_path() {
        // n = 3, F = 2 (a coin, as 2F mod 3 = 1): u64::MAX is the one rejected coin (2^64 mod
        // 3 = 1); u64::MAX - 2 is accepted but above the quick test's bound, so the general path
        // decides both.
        for first in [u64::MAX, u64::MAX - 1, u64::MAX - 2] {
            assert_eq!(share(5, 3, first, 5), None, "first draw {first}");
        }
        assert_eq!(share(5, 3, u64::MAX - 3, 5), Some(general(5, 3, &[u64::MAX - 3, 5])));
    }

    #[test]
    fn shares_without_a_coin_or_an_x_take_the_general_path() {
        // 2F = 6 is a multiple of n = 3 (no coin); 2F = 2 < n = 3 (U may be 0).
        assert_eq!(share(6, 3, 7, 5), None);
        assert_eq!(share(4, 3, 7, 5), None);
        assert_eq!(share(7, 3, 7, 5), Some(general(7, 3, &[7, 5])));
    }

    #[test]
    fn the_usual_packet_takes_this_path() {
        /// Counts the shares that came through `put_run` (this path) and all of them.
        #[derive(Default)]
        struct Counted {
            small: usize,
            all: usize,
        }
        impl Shares for Counted {
            type Error = SplitError;
            fn put(&mut self, _: usize, _: i64) -> Result<(), SplitError> {
                self.all += 1;
                Ok(())
            }
            fn put_run(&mut self, _: usize, run: &[u16]) -> Result<(), SplitError> {
                self.small += run.len();
                self.all += run.len();
                Ok(())
            }
        }
        let mut rng = seeded_rng(20240603);
        let mut counted = Counted::default();
        assert_eq!(
            run(rng.buffered(), 10_000, 100, 0, &mut counted).0.shares,
            0,
            "nothing buffered yet"
        );
        let mut counted = Counted::default();
        lucky_split_into(&mut rng, 10_000, 100, &mut counted).unwrap();
        // The general path makes the first share (it fills the buffer), the last, the shares
        // with no coin (about 1 in n) and those after the buffer's end.
        assert_eq!(counted.all, 100);
        assert!(counted.small >= 90, "{} of 100 shares", counted.small);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

        #[test]
        fn fast_share_is_the_general_share(
            n in 1u64..1100,
            extra in prop_oneof![0u64..4, 0u64..3_000, 0u64..600_000, 0u64..(1 << 33)],
            first in prop_oneof![any::<u64>(), (0u64..2048).prop_map(|d| u64::MAX - d)],
            second in prop_oneof![any::<u64>(), (0u64..2048).prop_map(|d| u64::MAX - d)],
            rest in proptest::collection::vec(any::<u64>(), 4),
        ) {
            let m = n + extra;
            if let Some(got) = share(m, n, first, second) {
                let draws = [vec![first, second], rest].concat();
                prop_assert_eq!(got, general(m, n, &draws));
            }
        }

        #[test]
        fn split_all_is_the_same_on_both_paths(seed: u64, count in 1i64..=300, extra in prop_oneof![0i64..2_000, 0i64..200_000]) {
            let total = count + extra;
            let fast = lucky_split_all(&mut seeded_rng(seed), total, count).unwrap();
            let slow = lucky_split_all(&mut General(seeded_rng(seed)), total, count).unwrap();
            prop_assert_eq!(fast, slow);
        }
    }
}
