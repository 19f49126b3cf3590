//! Lucky and equal split of a packet, DESIGN.md section 3. Docs live in the stub (split.pyi).

use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use pyo3::exceptions::{PyOSError, PyOverflowError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyList;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};

/// `split_all` refuses more shares than this: the list is built in memory (DESIGN.md caps packets at 100).
pub const MAX_SPLIT_ALL_COUNT: i64 = 1_000_000;
/// The OS-seeded generator takes a fresh 32-byte key from the OS after this many u64 draws.
pub const RESEED_AFTER_DRAWS: u64 = 1 << 16;

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

impl From<SplitError> for PyErr {
    fn from(e: SplitError) -> PyErr {
        match e {
            SplitError::Entropy(_) => PyOSError::new_err(e.to_string()),
            SplitError::RngUnavailable => PyRuntimeError::new_err(e.to_string()),
            _ => PyValueError::new_err(e.to_string()),
        }
    }
}

/// A source of uniform u64 words; the split's only contact with randomness.
pub trait DrawU64 {
    fn next_u64(&mut self) -> u64;
}

impl DrawU64 for ChaCha20Rng {
    fn next_u64(&mut self) -> u64 {
        RngCore::next_u64(self)
    }
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

/// One lucky share by the exact double-average rule of DESIGN.md section 3.
pub fn lucky_share<R: DrawU64 + ?Sized>(rng: &mut R, remaining: i64, count: i64) -> Result<i64, SplitError> {
    check_lucky(remaining, count)?;
    let share = share_unchecked(rng, remaining.unsigned_abs(), count.unsigned_abs());
    i64::try_from(share).map_err(|_| SplitError::BeyondInt64("share"))
}

fn check_split_all(total: i64, count: i64) -> Result<(), SplitError> {
    check_lucky(total, count)?;
    if count > MAX_SPLIT_ALL_COUNT {
        return Err(SplitError::TooManyShares(count));
    }
    Ok(())
}

/// Every share of a lucky packet in opening order, each handed to `sink(position, share)`.
pub fn lucky_split_each<R, E, F>(rng: &mut R, total: i64, count: i64, mut sink: F) -> Result<(), E>
where
    R: DrawU64 + ?Sized,
    E: From<SplitError>,
    F: FnMut(usize, i64) -> Result<(), E>,
{
    check_split_all(total, count)?;
    let mut m = total.unsigned_abs();
    for (position, left) in (1..=count.unsigned_abs()).rev().enumerate() {
        let s = share_unchecked(rng, m, left);
        m -= s;
        sink(
            position,
            i64::try_from(s).map_err(|_| SplitError::BeyondInt64("share"))?,
        )?;
    }
    Ok(())
}

/// Every share of a lucky packet, in opening order.
pub fn lucky_split_all<R: DrawU64 + ?Sized>(rng: &mut R, total: i64, count: i64) -> Result<Vec<i64>, SplitError> {
    check_split_all(total, count)?;
    let mut shares = Vec::with_capacity(count.unsigned_abs().try_into().unwrap_or(0));
    lucky_split_each(rng, total, count, |_, s| {
        shares.push(s);
        Ok::<(), SplitError>(())
    })?;
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

/// The seeded generator: ChaCha20, key = seed's 8 little-endian bytes then 24 zero bytes, stream 0.
pub fn seeded_rng(seed: u64) -> ChaCha20Rng {
    let mut key = [0u8; 32];
    for (dst, src) in key.iter_mut().zip(seed.to_le_bytes()) {
        *dst = src;
    }
    ChaCha20Rng::from_seed(key)
}

static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
static ATFORK_REGISTERED: OnceLock<bool> = OnceLock::new();

extern "C" fn bump_fork_generation() {
    // ORDERING: runs in the forked child's only thread, which reads the counter afterwards
    // in program order; no other memory is published through it.
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
}

fn atfork_registered() -> bool {
    *ATFORK_REGISTERED.get_or_init(|| {
        // SAFETY: the handler is a plain extern "C" fn that only touches an atomic, which is
        // async-signal-safe, as a fork child handler must be.
        unsafe { libc::pthread_atfork(None, None, Some(bump_fork_generation)) == 0 }
    })
}

/// This thread's OS-keyed generator (see `with_os_rng`).
pub struct OsSeeded {
    rng: ChaCha20Rng,
    generation: u64,
    pid: u32,
    draws: u64,
}

impl DrawU64 for OsSeeded {
    fn next_u64(&mut self) -> u64 {
        self.draws = self.draws.wrapping_add(1);
        RngCore::next_u64(&mut self.rng)
    }
}

fn os_key() -> Result<[u8; 32], SplitError> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| SplitError::Entropy(e.to_string()))?;
    Ok(key)
}

thread_local! {
    static OS_RNG: RefCell<Option<OsSeeded>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's OS-seeded ChaCha20, rekeyed from the OS first if it is new,
/// past RESEED_AFTER_DRAWS, or this process was forked since it was keyed.
pub fn with_os_rng<T>(f: impl FnOnce(&mut OsSeeded) -> T) -> Result<T, SplitError> {
    let hooked = atfork_registered();
    // ORDERING: see bump_fork_generation; only this thread's own history matters.
    let generation = FORK_GENERATION.load(Ordering::Relaxed);
    let pid = if hooked { 0 } else { std::process::id() };
    OS_RNG
        .try_with(|cell| {
            let mut slot = cell.try_borrow_mut().map_err(|_| SplitError::RngUnavailable)?;
            let stale = match slot.as_ref() {
                Some(s) => s.generation != generation || s.pid != pid || s.draws >= RESEED_AFTER_DRAWS,
                None => true,
            };
            if stale {
                *slot = Some(OsSeeded {
                    rng: ChaCha20Rng::from_seed(os_key()?),
                    generation,
                    pid,
                    draws: 0,
                });
            }
            match slot.as_mut() {
                Some(state) => Ok(f(state)),
                None => Err(SplitError::RngUnavailable),
            }
        })
        .map_err(|_| SplitError::RngUnavailable)?
}

fn int64_arg(obj: &Bound<'_, PyAny>, name: &'static str) -> PyResult<i64> {
    obj.extract::<i64>().map_err(|e| {
        if e.is_instance_of::<PyOverflowError>(obj.py()) {
            SplitError::BeyondInt64(name).into()
        } else {
            e
        }
    })
}

#[pyfunction]
#[pyo3(signature = (remaining_fen, remaining_count))]
fn split_lucky(remaining_fen: &Bound<'_, PyAny>, remaining_count: &Bound<'_, PyAny>) -> PyResult<i64> {
    let m = int64_arg(remaining_fen, "remaining_fen")?;
    let n = int64_arg(remaining_count, "remaining_count")?;
    Ok(with_os_rng(|rng| lucky_share(rng, m, n))??)
}

#[pyfunction]
#[pyo3(signature = (total_fen, count))]
fn split_equal(total_fen: &Bound<'_, PyAny>, count: &Bound<'_, PyAny>) -> PyResult<i64> {
    let t = int64_arg(total_fen, "total_fen")?;
    let n = int64_arg(count, "count")?;
    Ok(equal_share(t, n)?)
}

#[pyclass(frozen, module = "hongbao_native")]
pub struct Splitter {
    seeded: Option<Mutex<ChaCha20Rng>>,
}

impl Splitter {
    fn seeded_rng(lock: &Mutex<ChaCha20Rng>) -> std::sync::MutexGuard<'_, ChaCha20Rng> {
        lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[pymethods]
impl Splitter {
    #[new]
    #[pyo3(signature = (seed=None), text_signature = "(seed=None)")]
    fn new(seed: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let seeded = match seed {
            None => None,
            Some(obj) if obj.is_none() => None,
            Some(obj) => {
                let s = obj.extract::<u64>().map_err(|e| {
                    if e.is_instance_of::<PyOverflowError>(obj.py()) {
                        SplitError::SeedOutOfRange.into()
                    } else {
                        e
                    }
                })?;
                Some(Mutex::new(seeded_rng(s)))
            }
        };
        Ok(Self { seeded })
    }

    #[pyo3(signature = (remaining_fen, remaining_count))]
    fn next(&self, remaining_fen: &Bound<'_, PyAny>, remaining_count: &Bound<'_, PyAny>) -> PyResult<i64> {
        let m = int64_arg(remaining_fen, "remaining_fen")?;
        let n = int64_arg(remaining_count, "remaining_count")?;
        Ok(match &self.seeded {
            None => with_os_rng(|rng| lucky_share(rng, m, n))??,
            Some(lock) => lucky_share(&mut *Self::seeded_rng(lock), m, n)?,
        })
    }

    #[pyo3(signature = (total_fen, count))]
    fn split_all<'py>(&self, total_fen: &Bound<'py, PyAny>, count: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let t = int64_arg(total_fen, "total_fen")?;
        let n = int64_arg(count, "count")?;
        check_split_all(t, n)?;
        let py = total_fen.py();
        let len = pyo3::ffi::Py_ssize_t::try_from(n).map_err(|_| SplitError::TooManyShares(n))?;
        // SAFETY: PyList_New returns a new reference or NULL with an exception set (turned into
        // Err). It is created before any lock or thread-local borrow is taken, so the collection it
        // may trigger cannot re-enter the generator.
        let list = unsafe { Bound::from_owned_ptr_or_err(py, pyo3::ffi::PyList_New(len))? };
        let fill = |position: usize, share: i64| -> PyResult<()> {
            // SAFETY: PyLong_FromLongLong returns a new reference or NULL with an exception set; it
            // allocates an int, which never runs Python code or a collection.
            let item = unsafe { pyo3::ffi::PyLong_FromLongLong(share) };
            if item.is_null() {
                return Err(PyErr::fetch(py));
            }
            // SAFETY: position < len (lucky_split_each yields exactly `count` shares), the list is
            // new and not yet shared, and SET_ITEM steals `item`. A list left partly filled by an
            // error holds NULLs, which list deallocation skips.
            unsafe { pyo3::ffi::PyList_SET_ITEM(list.as_ptr(), position as pyo3::ffi::Py_ssize_t, item) };
            Ok(())
        };
        match &self.seeded {
            None => with_os_rng(|rng| lucky_split_each(rng, t, n, fill))??,
            Some(lock) => lucky_split_each(&mut *Self::seeded_rng(lock), t, n, fill)?,
        }
        Ok(list.cast_into::<PyList>()?)
    }
}

pub fn init_pymodule(m: &Bound<'_, PyModule>) -> PyResult<()> {
    atfork_registered();
    m.add_function(wrap_pyfunction!(split_lucky, m)?)?;
    m.add_function(wrap_pyfunction!(split_equal, m)?)?;
    m.add_class::<Splitter>()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn seed_zero_is_rfc8439_zero_key_keystream() {
        // RFC 8439 appendix A.1 test vector #1: zero key, zero nonce, counter 0.
        let mut rng = seeded_rng(0);
        assert_eq!(DrawU64::next_u64(&mut rng), 0x903d_f1a0_ade0_b876);
        assert_eq!(DrawU64::next_u64(&mut rng), 0x28bd_8653_e56a_5d40);
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
    fn os_rng_is_fresh_after_fork() {
        let parent_before = with_os_rng(|r| r.next_u64()).unwrap();
        let mut fds = [0i32; 2];
        // SAFETY: fds has room for the two descriptors pipe writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child only draws, writes 8 bytes and _exits; it never returns into the harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let v = with_os_rng(|r| r.next_u64()).unwrap_or(0).to_le_bytes();
            // SAFETY: v is 8 valid bytes; _exit ends the child without running the harness.
            unsafe {
                libc::write(fds[1], v.as_ptr().cast(), 8);
                libc::_exit(0);
            }
        }
        let parent_after = with_os_rng(|r| r.next_u64()).unwrap();
        let mut buf = [0u8; 8];
        // SAFETY: buf has room for 8 bytes; pid is our child.
        unsafe {
            assert_eq!(libc::read(fds[0], buf.as_mut_ptr().cast(), 8), 8);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        let child = u64::from_le_bytes(buf);
        assert_ne!(child, parent_after);
        assert_ne!(child, parent_before);
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

    #[test]
    fn os_rng_rekeys_after_reseed_interval() {
        let mut old = with_os_rng(|s| {
            s.draws = RESEED_AFTER_DRAWS;
            s.rng.clone()
        })
        .unwrap();
        let (draws, fresh) = with_os_rng(|s| {
            let v = s.next_u64();
            (s.draws, v)
        })
        .unwrap();
        assert_eq!(draws, 1);
        assert_ne!(fresh, DrawU64::next_u64(&mut old));
        let again = with_os_rng(|s| s.draws).unwrap();
        assert_eq!(again, 1);
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
