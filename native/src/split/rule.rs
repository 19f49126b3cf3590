//! The lucky split's rule, docs/architecture.md section 3: the exact double-average rule in integer fen over
//! any source of u64 draws, with our own rejection rule for an integer in [0, k); and the equal
//! split.

use std::fmt;

use super::fast;

/// `split_all` refuses more shares than this: the list is built in memory (docs/architecture.md caps packets at 100).
pub const MAX_SPLIT_ALL_COUNT: i64 = 1_000_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SplitError {
    CountBelowOne(i64),
    NegativeTotal(i64),
    TotalBelowCount { total: i64, count: i64 },
    Remainder { total: i64, count: i64 },
    TooManyShares(i64),
    BeyondInt64(&'static str),
    SeedOutOfRange,
    Entropy(String),
    RngUnavailable,
}

impl fmt::Display for SplitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::CountBelowOne(c) => write!(f, "count must be >= 1, got {c}"),
            Self::NegativeTotal(t) => write!(f, "total must not be negative, got {t} fen"),
            Self::TotalBelowCount { total, count } => write!(
                f,
                "total {total} fen is below count {count}: every share is at least 1 fen"
            ),
            Self::Remainder { total, count } => write!(
                f,
                "total {total} fen is not a multiple of count {count}: equal packets never round"
            ),
            Self::TooManyShares(c) => {
                write!(
                    f,
                    "count {c} is above split_all's limit of {MAX_SPLIT_ALL_COUNT} shares"
                )
            }
            Self::BeyondInt64(name) => write!(f, "{name} is beyond the int64 range"),
            Self::SeedOutOfRange => write!(f, "seed must be None or an int in [0, 2**64)"),
            Self::Entropy(e) => write!(f, "the OS refused random bytes: {e}"),
            Self::RngUnavailable => write!(f, "the thread's random generator is unavailable"),
        }
    }
}

impl std::error::Error for SplitError {}

/// A source of uniform u64 words; the split's only contact with randomness.
pub trait DrawU64 {
    fn next_u64(&mut self) -> u64;

    /// The draws the source has made and not yet given out, in order, if it buffers them (a
    /// keystream); none (the default) takes every share down the general path.
    #[inline(always)]
    fn buffered(&self) -> &[u64] {
        &[]
    }

    /// Takes `n` of the `buffered` draws.
    #[inline(always)]
    fn skip(&mut self, _n: usize) {}
}

/// An integer uniform on [0, k) by our own rejection rule: draw v, reject while
/// v >= 2^64 - (2^64 mod k), return v mod k. k <= 1 consumes no draw and gives 0.
#[inline(always)]
pub fn below<R: DrawU64 + ?Sized>(rng: &mut R, k: u64) -> u64 {
    if k <= 1 {
        return 0;
    }
    loop {
        let v = rng.next_u64();
        // v < 2^64 - k implies v < 2^64 - (2^64 mod k): skip the second division on the common path.
        if v <= u64::MAX - k || v <= u64::MAX - k.wrapping_neg() % k {
            return v % k;
        }
    }
}

fn check_lucky(total: i64, count: i64) -> Result<(), SplitError> {
    if count < 1 {
        return Err(SplitError::CountBelowOne(count));
    }
    if total < 0 {
        return Err(SplitError::NegativeTotal(total));
    }
    if total < count {
        return Err(SplitError::TotalBelowCount { total, count });
    }
    Ok(())
}

/// One share of `m` fen over `n` shares (validated: 1 <= n <= m). Draw order: the coin
/// below(n) only when r = 2F mod n > 0, then x = below(U + 1) only when U > 0.
#[inline(always)]
fn share_unchecked<R: DrawU64 + ?Sized>(rng: &mut R, m: u64, n: u64) -> u64 {
    if n <= 1 {
        return m;
    }
    let free = m - n;
    let two_f = 2 * free;
    let r = two_f % n;
    let mut upper = two_f / n;
    if r > 0 && below(rng, n) < r {
        upper += 1;
    }
    1 + below(rng, upper + 1)
}

/// One lucky share by the exact double-average rule of docs/architecture.md section 3.
pub fn lucky_share<R: DrawU64 + ?Sized>(rng: &mut R, remaining: i64, count: i64) -> Result<i64, SplitError> {
    check_lucky(remaining, count)?;
    let share = share_unchecked(rng, remaining.unsigned_abs(), count.unsigned_abs());
    i64::try_from(share).map_err(|_| SplitError::BeyondInt64("share"))
}

pub(super) fn check_split_all(total: i64, count: i64) -> Result<(), SplitError> {
    check_lucky(total, count)?;
    if count > MAX_SPLIT_ALL_COUNT {
        return Err(SplitError::TooManyShares(count));
    }
    Ok(())
}

/// Shares below this may come through `Shares::put_run`.
pub const SMALL_SHARE: u16 = 1024;

/// Where the shares of a packet go, in opening order.
pub trait Shares {
    type Error: From<SplitError>;

    /// Share `position`.
    fn put(&mut self, position: usize, share: i64) -> Result<(), Self::Error>;

    /// Shares `position` to `position + run.len() - 1`, each below SMALL_SHARE (a run of the
    /// division-free path).
    #[inline(always)]
    fn put_run(&mut self, position: usize, run: &[u16]) -> Result<(), Self::Error> {
        for (offset, &share) in run.iter().enumerate() {
            self.put(position + offset, i64::from(share))?;
        }
        Ok(())
    }
}

impl Shares for Vec<i64> {
    type Error = SplitError;

    fn put(&mut self, _position: usize, share: i64) -> Result<(), SplitError> {
        self.push(share);
        Ok(())
    }
}

/// A closure as `Shares`.
struct Sink<F>(F);

impl<E: From<SplitError>, F: FnMut(usize, i64) -> Result<(), E>> Shares for Sink<F> {
    type Error = E;

    #[inline(always)]
    fn put(&mut self, position: usize, share: i64) -> Result<(), E> {
        (self.0)(position, share)
    }
}

/// Every share of a lucky packet in opening order, each handed to `sink(position, share)`.
pub fn lucky_split_each<R, E, F>(rng: &mut R, total: i64, count: i64, sink: F) -> Result<(), E>
where
    R: DrawU64 + ?Sized,
    E: From<SplitError>,
    F: FnMut(usize, i64) -> Result<(), E>,
{
    lucky_split_into(rng, total, count, &mut Sink(sink))
}

/// Every share of a lucky packet in opening order, into `shares`: runs of shares from the buffered
/// draws by the division-free path (fast.rs), and every share that path cannot make by the
/// general one.
pub fn lucky_split_into<R, S>(rng: &mut R, total: i64, count: i64, shares: &mut S) -> Result<(), S::Error>
where
    R: DrawU64 + ?Sized,
    S: Shares + ?Sized,
{
    check_split_all(total, count)?;
    let (mut m, mut left, mut position) = (total.unsigned_abs(), count.unsigned_abs(), 0);
    while left > 0 {
        if fast::in_range(m, left) && rng.buffered().len() >= 2 {
            let (run, stopped) = fast::run(rng.buffered(), m, left, position, shares);
            rng.skip(run.draws);
            (m, left, position) = (run.fen_left, left - run.shares as u64, position + run.shares);
            stopped?;
        }
        let s = share_unchecked(rng, m, left);
        (m, left) = (m - s, left - 1);
        shares.put(
            position,
            i64::try_from(s).map_err(|_| SplitError::BeyondInt64("share"))?,
        )?;
        position += 1;
    }
    Ok(())
}

/// Every share of a lucky packet, in opening order.
pub fn lucky_split_all<R: DrawU64 + ?Sized>(rng: &mut R, total: i64, count: i64) -> Result<Vec<i64>, SplitError> {
    check_split_all(total, count)?;
    let mut shares = Vec::with_capacity(count.unsigned_abs().try_into().unwrap_or(0));
    lucky_split_into(rng, total, count, &mut shares)?;
    Ok(shares)
}

/// The per-share amount of an equal packet; refuses any remainder.
pub fn equal_share(total: i64, count: i64) -> Result<i64, SplitError> {
    check_lucky(total, count)?;
    if total % count != 0 {
        return Err(SplitError::Remainder { total, count });
    }
    Ok(total / count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::split::rng::seeded_rng;
    use proptest::prelude::*;

    struct Script(Vec<u64>, usize);

    impl DrawU64 for Script {
        fn next_u64(&mut self) -> u64 {
            let v = self.0[self.1];
            self.1 += 1;
            v
        }
    }

    #[test]
    fn below_rejects_the_biased_tail() {
        // 2^64 mod 3 == 1, so only u64::MAX is rejected.
        let mut s = Script(vec![u64::MAX, u64::MAX - 1], 0);
        assert_eq!(below(&mut s, 3), (u64::MAX - 1) % 3);
        assert_eq!(s.1, 2);
        let mut s = Script(vec![u64::MAX], 0);
        assert_eq!(below(&mut s, 1 << 32), u64::MAX % (1 << 32));
        let mut s = Script(vec![], 0);
        assert_eq!(below(&mut s, 1), 0);
        assert_eq!(below(&mut s, 0), 0);
    }

    #[test]
    fn draw_order_is_coin_then_x() {
        // m=4, n=3: F=1, 2F=2, r=2 -> coin below(3) < 2 makes U=1, then x = below(2).
        let mut s = Script(vec![1, 7], 0);
        assert_eq!(lucky_share(&mut s, 4, 3), Ok(2));
        let mut s = Script(vec![2], 0);
        assert_eq!(lucky_share(&mut s, 4, 3), Ok(1));
        assert_eq!(s.1, 1);
        // m=6, n=3: r=0 -> no coin, x = below(3).
        let mut s = Script(vec![5], 0);
        assert_eq!(lucky_share(&mut s, 6, 3), Ok(3));
        let mut s = Script(vec![], 0);
        assert_eq!(lucky_share(&mut s, 3, 3), Ok(1));
        assert_eq!(lucky_share(&mut s, 17, 1), Ok(17));
    }

    #[test]
    fn invalid_inputs_name_the_reason() {
        let mut rng = seeded_rng(1);
        assert_eq!(lucky_share(&mut rng, 10, 0), Err(SplitError::CountBelowOne(0)));
        assert_eq!(lucky_share(&mut rng, -1, 1), Err(SplitError::NegativeTotal(-1)));
        assert_eq!(
            lucky_share(&mut rng, 10, 15),
            Err(SplitError::TotalBelowCount { total: 10, count: 15 })
        );
        assert_eq!(
            lucky_split_all(&mut rng, i64::MAX, MAX_SPLIT_ALL_COUNT + 1),
            Err(SplitError::TooManyShares(MAX_SPLIT_ALL_COUNT + 1))
        );
        assert_eq!(
            equal_share(100, 18),
            Err(SplitError::Remainder { total: 100, count: 18 })
        );
        assert_eq!(
            equal_share(5, 10),
            Err(SplitError::TotalBelowCount { total: 5, count: 10 })
        );
        assert_eq!(equal_share(90, 18), Ok(5));
        assert!(SplitError::Remainder { total: 100, count: 18 }
            .to_string()
            .contains("never round"));
    }

    #[test]
    fn extreme_totals_do_not_overflow() {
        let mut rng = seeded_rng(7);
        let shares = lucky_split_all(&mut rng, i64::MAX, 3).unwrap();
        assert_eq!(shares.iter().map(|&s| s as i128).sum::<i128>(), i64::MAX as i128);
        assert_eq!(lucky_share(&mut rng, i64::MAX, 1), Ok(i64::MAX));
        assert!(lucky_share(&mut rng, i64::MAX, 2).unwrap() >= 1);
    }

    #[test]
    fn split_each_yields_positions_in_order_and_stops_on_sink_error() {
        let mut seen = Vec::new();
        let done: Result<(), SplitError> = lucky_split_each(&mut seeded_rng(3), 50, 5, |p, s| {
            seen.push((p, s));
            Ok(())
        });
        assert_eq!(done, Ok(()));
        assert_eq!(seen.iter().map(|&(p, _)| p).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
        let shares: Vec<i64> = seen.iter().map(|&(_, s)| s).collect();
        assert_eq!(shares, lucky_split_all(&mut seeded_rng(3), 50, 5).unwrap());
        let mut calls = 0;
        let stopped = lucky_split_each(&mut seeded_rng(3), 50, 5, |_, _| {
            calls += 1;
            Err(SplitError::RngUnavailable)
        });
        assert_eq!((stopped, calls), (Err(SplitError::RngUnavailable), 1));
    }

    proptest! {
        #[test]
        fn lucky_split_conserves_money(seed: u64, count in 1i64..=120, extra in 0i64..=50_000) {
            let total = count + extra;
            let mut rng = seeded_rng(seed);
            let shares = lucky_split_all(&mut rng, total, count).unwrap();
            prop_assert_eq!(shares.len() as i64, count);
            prop_assert_eq!(shares.iter().sum::<i64>(), total);
            let mut m = total;
            for (i, &s) in shares.iter().enumerate() {
                let n = count - i as i64;
                prop_assert!(s >= 1);
                prop_assert!(s - 1 <= m - n, "x = {} exceeds F = {}", s - 1, m - n);
                if n == 1 { prop_assert_eq!(s, m); }
                m -= s;
            }
            prop_assert_eq!(m, 0);
        }

        #[test]
        fn share_stays_below_the_bound(seed: u64, n in 2i64..=200, extra in 0i64..=1_000_000) {
            let m = n + extra;
            let mut rng = seeded_rng(seed);
            let s = lucky_share(&mut rng, m, n).unwrap();
            let f = (m - n) as i128;
            let bound = (2 * f) / n as i128 + i128::from((2 * f) % n as i128 != 0);
            prop_assert!((s - 1) as i128 <= bound);
            prop_assert!((s - 1) as i128 <= f);
        }

        #[test]
        fn seeded_is_deterministic(seed: u64, count in 1i64..=100) {
            let a = lucky_split_all(&mut seeded_rng(seed), 10_000, count).unwrap();
            let b = lucky_split_all(&mut seeded_rng(seed), 10_000, count).unwrap();
            prop_assert_eq!(a, b);
        }

        #[test]
        fn below_is_in_range(seed: u64, k in 1u64..=u64::MAX) {
            prop_assert!(below(&mut seeded_rng(seed), k) < k);
        }
    }
}
