//! The host-wide rate limiter: GCRA, i.e. a token bucket kept as one "theoretical arrival time"
//! word updated by CAS in `/dev/shm/hongbao-rl-<name>`. Lock-free, so a process killed mid-call
//! cannot wedge it; time is CLOCK_MONOTONIC (system-wide) in 1/16 ns ticks since the segment's
//! creation.

use std::sync::atomic::{AtomicU64, Ordering};

use super::error::{AdmissionError, Result};
use super::shm::{monotonic_ns, shm_path, Segment, OFF_MAGIC, OFF_VERSION, VERSION};

const LIMITER_MAGIC: u64 = u64::from_le_bytes(*b"HBRATEL\0");
const LIMITER_LEN: usize = 128;
const OFF_INTERVAL: usize = 16;
const OFF_TAU: usize = 24;
const OFF_BASE_NS: usize = 32;
const OFF_RATE: usize = 40;
const OFF_BURST: usize = 48;
const OFF_TAT: usize = 64;
const TICKS_PER_NS: u64 = 16;
const TICKS_PER_SECOND: f64 = 16e9;
pub const MAX_RATE: f64 = 1e9;
pub const MAX_BURST: u64 = 1 << 32;
const MAX_TAU: u64 = 1 << 62;

/// A host-wide token bucket (plain-Rust API; the Python class wraps it).
pub struct RateLimiter {
    seg: Segment,
    name: String,
    interval: u64,
    tau: u64,
    base_ns: u64,
    rate: f64,
    burst: u64,
}

impl RateLimiter {
    pub fn create(name: &str, rate_per_second: f64, burst: u64) -> Result<Self> {
        if !(rate_per_second.is_finite() && rate_per_second > 0.0 && rate_per_second <= MAX_RATE) {
            return Err(AdmissionError::InvalidArgument(format!(
                "rate_per_second must be in (0, {MAX_RATE:e}], got {rate_per_second}"
            )));
        }
        if burst == 0 || burst > MAX_BURST {
            return Err(AdmissionError::InvalidArgument(format!(
                "burst must be in [1, {MAX_BURST}], got {burst}"
            )));
        }
        let interval_f = (TICKS_PER_SECOND / rate_per_second).round();
        let tau_f = interval_f * burst as f64;
        if tau_f >= MAX_TAU as f64 {
            return Err(AdmissionError::InvalidArgument(format!(
                "burst / rate_per_second = {} s is too long a window",
                burst as f64 / rate_per_second
            )));
        }
        let interval = interval_f as u64;
        let tau = interval * burst;
        let base_ns = monotonic_ns();
        let seg = Segment::create(shm_path("hongbao-rl-", name)?, LIMITER_LEN, |seg| {
            // ORDERING: Relaxed fields, then the magic with Release (pairs with attach's Acquire).
            seg.u32_at(OFF_VERSION).store(VERSION, Ordering::Relaxed);
            seg.u64_at(OFF_INTERVAL).store(interval, Ordering::Relaxed);
            seg.u64_at(OFF_TAU).store(tau, Ordering::Relaxed);
            seg.u64_at(OFF_BASE_NS).store(base_ns, Ordering::Relaxed);
            seg.u64_at(OFF_RATE).store(rate_per_second.to_bits(), Ordering::Relaxed);
            seg.u64_at(OFF_BURST).store(burst, Ordering::Relaxed);
            seg.u64_at(OFF_TAT).store(0, Ordering::Relaxed);
            seg.u64_at(OFF_MAGIC).store(LIMITER_MAGIC, Ordering::Release);
        })?;
        Ok(Self {
            seg,
            name: name.to_owned(),
            interval,
            tau,
            base_ns,
            rate: rate_per_second,
            burst,
        })
    }

    pub fn attach(name: &str) -> Result<Self> {
        let seg = Segment::open(shm_path("hongbao-rl-", name)?, LIMITER_LEN)?;
        // ORDERING: Acquire pairs with create's Release store of the magic.
        if seg.u64_at(OFF_MAGIC).load(Ordering::Acquire) != LIMITER_MAGIC {
            return Err(AdmissionError::BadSegment("wrong magic for a rate limiter".to_owned()));
        }
        // ORDERING: Relaxed: immutable after create, ordered by the magic's Acquire load.
        let version = seg.u32_at(OFF_VERSION).load(Ordering::Relaxed);
        let interval = seg.u64_at(OFF_INTERVAL).load(Ordering::Relaxed);
        let tau = seg.u64_at(OFF_TAU).load(Ordering::Relaxed);
        let base_ns = seg.u64_at(OFF_BASE_NS).load(Ordering::Relaxed);
        let rate = f64::from_bits(seg.u64_at(OFF_RATE).load(Ordering::Relaxed));
        let burst = seg.u64_at(OFF_BURST).load(Ordering::Relaxed);
        if version != VERSION {
            return Err(AdmissionError::BadSegment(format!(
                "version {version}, expected {VERSION}"
            )));
        }
        let consistent = seg.len() == LIMITER_LEN
            && interval > 0
            && (1..=MAX_BURST).contains(&burst)
            && interval.checked_mul(burst) == Some(tau)
            && tau < MAX_TAU
            && rate.is_finite()
            && rate > 0.0;
        if !consistent {
            return Err(AdmissionError::BadSegment(
                "inconsistent rate limiter header".to_owned(),
            ));
        }
        Ok(Self {
            seg,
            name: name.to_owned(),
            interval,
            tau,
            base_ns,
            rate,
            burst,
        })
    }

    pub fn unlink(&self) -> Result<()> {
        self.seg.unlink()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn rate_per_second(&self) -> f64 {
        self.rate
    }

    pub fn burst(&self) -> u64 {
        self.burst
    }

    fn now_ticks(&self) -> u64 {
        monotonic_ns().saturating_sub(self.base_ns).saturating_mul(TICKS_PER_NS)
    }

    fn tat(&self) -> &AtomicU64 {
        self.seg.u64_at(OFF_TAT)
    }

    pub fn try_acquire(&self, n: u64) -> bool {
        self.try_acquire_at(n, self.now_ticks())
    }

    /// GCRA: taking n tokens pushes the theoretical arrival time by n intervals; allowed while it
    /// stays within tau (= burst intervals) of now. Equivalent to a bucket of `burst` tokens.
    fn try_acquire_at(&self, n: u64, now: u64) -> bool {
        if n == 0 {
            return true;
        }
        if n > self.burst {
            return false;
        }
        let cost = self.interval * n;
        // ORDERING: Relaxed: the word is the whole shared state, and the CAS is atomic on its own.
        let mut tat = self.tat().load(Ordering::Relaxed);
        loop {
            let new_tat = tat.max(now).saturating_add(cost);
            if new_tat - now > self.tau {
                return false;
            }
            // ORDERING: Relaxed, as above.
            match self
                .tat()
                .compare_exchange_weak(tat, new_tat, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(seen) => tat = seen,
            }
        }
    }

    /// Seconds until `n` tokens are available (0.0 if they are now; infinity if n > burst).
    pub fn retry_after(&self, n: u64) -> f64 {
        self.retry_after_at(n, self.now_ticks())
    }

    fn retry_after_at(&self, n: u64, now: u64) -> f64 {
        if n > self.burst {
            return f64::INFINITY;
        }
        // ORDERING: Relaxed: a snapshot of the self-contained state word.
        let tat = self.tat().load(Ordering::Relaxed);
        let ready = tat.max(now).saturating_add(self.interval * n).saturating_sub(self.tau);
        ready.saturating_sub(now) as f64 / TICKS_PER_SECOND
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::testing::unique_name;

    fn limiter(rate: f64, burst: u64) -> RateLimiter {
        RateLimiter::create(&unique_name("rl"), rate, burst).unwrap()
    }

    #[test]
    fn gcra_is_a_token_bucket() {
        let rl = limiter(10.0, 3);
        let interval = 1_600_000_000; // 0.1 s in ticks
        assert_eq!(rl.interval, interval);
        let t0 = 5 * interval;
        assert!(rl.try_acquire_at(2, t0));
        assert!(rl.try_acquire_at(1, t0));
        assert!(!rl.try_acquire_at(1, t0));
        assert_eq!(rl.retry_after_at(1, t0), 0.1);
        assert_eq!(rl.retry_after_at(3, t0), 0.3);
        assert!(!rl.try_acquire_at(1, t0 + interval - 1));
        assert!(rl.try_acquire_at(1, t0 + interval));
        assert!(!rl.try_acquire_at(1, t0 + interval));
        assert_eq!(rl.retry_after_at(1, t0 + 100 * interval), 0.0);
        assert!(rl.try_acquire_at(3, t0 + 100 * interval), "refill caps at burst");
        assert!(!rl.try_acquire_at(1, t0 + 100 * interval));
        assert!(rl.try_acquire_at(0, t0 + 100 * interval));
        assert!(!rl.try_acquire_at(4, t0 + 10_000 * interval));
        assert_eq!(rl.retry_after_at(4, 0), f64::INFINITY);
        rl.unlink().unwrap();
    }

    #[test]
    fn limiter_attach_and_validation() {
        let rl = limiter(2.5, 7);
        let other = RateLimiter::attach(rl.name()).unwrap();
        assert_eq!((other.rate_per_second(), other.burst()), (2.5, 7));
        assert!(other.try_acquire(7));
        assert!(!rl.try_acquire(1));
        rl.unlink().unwrap();
        assert!(matches!(RateLimiter::attach(rl.name()), Err(AdmissionError::Io(_))));
        for (rate, burst) in [
            (0.0, 1),
            (-1.0, 1),
            (f64::NAN, 1),
            (2e9, 1),
            (1.0, 0),
            (1.0, MAX_BURST + 1),
            (1e-9, 1 << 20),
        ] {
            assert!(
                matches!(
                    RateLimiter::create("x", rate, burst),
                    Err(AdmissionError::InvalidArgument(_))
                ),
                "{rate} {burst}"
            );
        }
    }
}
