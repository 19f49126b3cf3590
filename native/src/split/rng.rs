//! The split's generators: the seeded ChaCha20 stream, and the per-thread OS-seeded ChaCha20 that
//! rekeys itself from the OS periodically and after fork().

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::rule::{DrawU64, SplitError};
use crate::chacha::ChaCha20;

/// The OS-seeded generator takes a fresh 32-byte key from the OS after this many u64 draws.
pub const RESEED_AFTER_DRAWS: u64 = 1 << 16;

impl DrawU64 for ChaCha20 {
    #[inline(always)]
    fn next_u64(&mut self) -> u64 {
        ChaCha20::next_u64(self)
    }

    #[inline(always)]
    fn buffered(&self) -> &[u64] {
        ChaCha20::buffered(self)
    }

    #[inline(always)]
    fn skip(&mut self, n: usize) {
        ChaCha20::skip(self, n)
    }
}

/// The seeded generator: ChaCha20, key = seed's 8 little-endian bytes then 24 zero bytes, stream 0.
pub fn seeded_rng(seed: u64) -> ChaCha20 {
    let mut key = [0u8; 32];
    for (dst, src) in key.iter_mut().zip(seed.to_le_bytes()) {
        *dst = src;
    }
    ChaCha20::from_seed(key)
}

static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
static ATFORK_REGISTERED: OnceLock<bool> = OnceLock::new();

extern "C" fn bump_fork_generation() {
    // ORDERING: runs in the forked child's only thread, which reads the counter afterwards
    // in program order; no other memory is published through it.
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
}

pub(super) fn atfork_registered() -> bool {
    *ATFORK_REGISTERED.get_or_init(|| {
        // SAFETY: the handler is a plain extern "C" fn that only touches an atomic, which is
        // async-signal-safe, as a fork child handler must be.
        unsafe { libc::pthread_atfork(None, None, Some(bump_fork_generation)) == 0 }
    })
}

/// This thread's OS-keyed generator (see `with_os_rng`).
pub struct OsSeeded {
    rng: ChaCha20,
    generation: u64,
    pid: u32,
    draws: u64,
}

impl DrawU64 for OsSeeded {
    #[inline(always)]
    fn next_u64(&mut self) -> u64 {
        self.draws = self.draws.wrapping_add(1);
        self.rng.next_u64()
    }

    #[inline(always)]
    fn buffered(&self) -> &[u64] {
        self.rng.buffered()
    }

    #[inline(always)]
    fn skip(&mut self, n: usize) {
        self.draws = self.draws.wrapping_add(n as u64);
        self.rng.skip(n);
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
                    rng: ChaCha20::from_seed(os_key()?),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_zero_is_rfc8439_zero_key_keystream() {
        // RFC 8439 appendix A.1 test vector #1: zero key, zero nonce, counter 0.
        let mut rng = seeded_rng(0);
        assert_eq!(DrawU64::next_u64(&mut rng), 0x903d_f1a0_ade0_b876);
        assert_eq!(DrawU64::next_u64(&mut rng), 0x28bd_8653_e56a_5d40);
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
}
