//! The admission table: per-(key, pid) counts in one segment, guarded by one spinlock word.
//!
//! Segment `/dev/shm/hongbao-<name>` (native-endian words):
//!   0 magic u64 | 8 version u32 | 12 capacity u32 | 16 nslots u32 | 20 active u32 | 24 live u32
//!   64 lock u32 (holder's pid, 0 = free; own cache line)
//!   128 slot array 0, then slot array 1: nslots slots of 16 bytes (key_hash u64, pid u32, count u32)
//!
//! - One spinlock word holding the owner's pid guards the table; critical sections are a few loads
//!   and stores, no syscalls. A waiter that sees one owner for long checks kill(owner, 0); on ESRCH
//!   it steals the lock and repairs the table (slots.rs), because the dead owner may have stopped
//!   mid-shift. `reclaim` uses the same rebuild (rare: once per dead worker).
//! - Limits: key identity is the 64-bit xxh3 of its UTF-8 (two keys colliding would share counts,
//!   odds 2^-64 per pair); all users share one pid namespace and one time namespace; a dead
//!   holder's pid reused by a new process before any waiter checks it (~10 ms) stalls the lock.

use std::io;
use std::sync::atomic::Ordering;
use std::time::Duration;

use xxhash_rust::xxh3::xxh3_64;

use super::error::{AdmissionError, Result};
use super::shm::{current_pid, shm_path, Segment, OFF_MAGIC, OFF_VERSION, VERSION};
use super::slots::{Locked, Slot, SLOT_LEN};

const TABLE_MAGIC: u64 = u64::from_le_bytes(*b"HBADMIT\0");
pub const MAX_CAPACITY: u32 = 1 << 20;
pub(super) const HEADER_LEN: usize = 128;
const OFF_CAPACITY: usize = 12;
const OFF_NSLOTS: usize = 16;
pub(super) const OFF_ACTIVE: usize = 20;
pub(super) const OFF_LIVE: usize = 24;
pub(super) const OFF_LOCK: usize = 64;

const SPIN_WAITS: u32 = 64;
const YIELD_WAITS: u32 = 128;
const SLEEP_WAIT: Duration = Duration::from_micros(50);
const LIVENESS_CHECK_EVERY: u32 = 256;

/// False only when no process has this pid (ESRCH), or the word cannot be a pid at all.
fn pid_alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if p <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks existence; p > 0 addresses one process, never a group.
    let rc = unsafe { libc::kill(p, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

fn key_hash(key: &str) -> u64 {
    xxh3_64(key.as_bytes())
}

/// The shared admission table (plain-Rust API; the Python class wraps it).
pub struct AdmissionTable {
    pub(super) seg: Segment,
    name: String,
    pub(super) capacity: u32,
    pub(super) mask: usize,
}

fn nslots_for(capacity: u32) -> u32 {
    capacity.saturating_mul(2).next_power_of_two().max(8)
}

fn table_len(nslots: u32) -> usize {
    HEADER_LEN + 2 * (nslots as usize) * SLOT_LEN
}

impl AdmissionTable {
    pub fn create(name: &str, capacity: u32) -> Result<Self> {
        if capacity == 0 || capacity > MAX_CAPACITY {
            return Err(AdmissionError::InvalidArgument(format!(
                "capacity must be in [1, {MAX_CAPACITY}], got {capacity}"
            )));
        }
        let nslots = nslots_for(capacity);
        let seg = Segment::create(shm_path("hongbao-", name)?, table_len(nslots), |seg| {
            // ORDERING: Relaxed for the fields, then a Release store of the magic; attach loads
            // the magic with Acquire (the rename already orders them in practice).
            seg.u32_at(OFF_VERSION).store(VERSION, Ordering::Relaxed);
            seg.u32_at(OFF_CAPACITY).store(capacity, Ordering::Relaxed);
            seg.u32_at(OFF_NSLOTS).store(nslots, Ordering::Relaxed);
            seg.u64_at(OFF_MAGIC).store(TABLE_MAGIC, Ordering::Release);
        })?;
        Ok(Self::from_parts(seg, name, capacity, nslots))
    }

    pub fn attach(name: &str) -> Result<Self> {
        let seg = Segment::open(shm_path("hongbao-", name)?, HEADER_LEN)?;
        // ORDERING: Acquire pairs with the Release store of the magic in create.
        if seg.u64_at(OFF_MAGIC).load(Ordering::Acquire) != TABLE_MAGIC {
            return Err(AdmissionError::BadSegment(
                "wrong magic for an admission table".to_owned(),
            ));
        }
        // ORDERING: Relaxed: immutable after create, ordered by the magic's Acquire load.
        let version = seg.u32_at(OFF_VERSION).load(Ordering::Relaxed);
        let capacity = seg.u32_at(OFF_CAPACITY).load(Ordering::Relaxed);
        let nslots = seg.u32_at(OFF_NSLOTS).load(Ordering::Relaxed);
        if version != VERSION {
            return Err(AdmissionError::BadSegment(format!(
                "version {version}, expected {VERSION}"
            )));
        }
        if capacity == 0 || capacity > MAX_CAPACITY || nslots != nslots_for(capacity) || seg.len() != table_len(nslots)
        {
            return Err(AdmissionError::BadSegment(format!(
                "inconsistent header: capacity {capacity}, nslots {nslots}, {} bytes",
                seg.len()
            )));
        }
        Ok(Self::from_parts(seg, name, capacity, nslots))
    }

    fn from_parts(seg: Segment, name: &str, capacity: u32, nslots: u32) -> Self {
        Self {
            seg,
            name: name.to_owned(),
            capacity,
            mask: nslots as usize - 1,
        }
    }

    pub fn unlink(&self) -> Result<()> {
        self.seg.unlink()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Live (key, pid) slots.
    pub fn len(&self) -> usize {
        self.lock().live() as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn try_enter(&self, key: &str, limit: u32) -> Result<bool> {
        self.lock().enter(key_hash(key), current_pid(), limit)
    }

    pub fn leave(&self, key: &str) -> Result<()> {
        self.lock().leave(key_hash(key), current_pid())
    }

    pub fn in_flight(&self, key: &str) -> u64 {
        self.lock().probe(key_hash(key), 0).total
    }

    /// Drops every count held by `pid`; returns how many counts were dropped.
    pub fn reclaim(&self, pid: u32) -> u64 {
        let mut locked = self.lock();
        if !locked.holds_any(pid) {
            return 0;
        }
        locked.rebuild(Some(pid))
    }

    pub(super) fn slot(&self, array: usize, i: usize) -> Slot<'_> {
        let index = (array & 1) * (self.mask + 1) + (i & self.mask);
        let off = HEADER_LEN + index * SLOT_LEN;
        Slot {
            hash: self.seg.u64_at(off),
            pid: self.seg.u32_at(off + 8),
            count: self.seg.u32_at(off + 12),
        }
    }

    pub(super) fn lock(&self) -> Locked<'_> {
        let me = current_pid();
        let word = self.seg.u32_at(OFF_LOCK);
        let mut owner_seen = 0;
        let mut waits: u32 = 0;
        loop {
            // ORDERING: Acquire on success pairs with Locked::drop's Release: the previous holder's
            // writes are visible. Relaxed on failure: the value only steers the wait.
            match word.compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return self.locked(),
                Err(0) => continue,
                Err(owner) => {
                    if owner != owner_seen {
                        owner_seen = owner;
                        waits = 0;
                    }
                    waits = waits.saturating_add(1);
                    wait_a_little(waits);
                    if waits.is_multiple_of(LIVENESS_CHECK_EVERY) && !pid_alive(owner) {
                        // ORDERING: Acquire as above; the dead owner never released, so repair
                        // reads its slots with Acquire loads of each pid.
                        if word
                            .compare_exchange(owner, me, Ordering::Acquire, Ordering::Relaxed)
                            .is_ok()
                        {
                            let mut locked = self.locked();
                            locked.rebuild(None);
                            return locked;
                        }
                    }
                }
            }
        }
    }

    pub(super) fn locked(&self) -> Locked<'_> {
        // ORDERING: Acquire pairs with the Release flip in rebuild (also when its writer died).
        let array = self.seg.u32_at(OFF_ACTIVE).load(Ordering::Acquire) as usize & 1;
        Locked { table: self, array }
    }
}

fn wait_a_little(waits: u32) {
    if waits <= SPIN_WAITS {
        std::hint::spin_loop();
    } else if waits <= YIELD_WAITS {
        std::thread::yield_now();
    } else {
        std::thread::sleep(SLEEP_WAIT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::rate::RateLimiter;
    use crate::admission::shm::SHM_DIR;
    use crate::admission::testing::{check_structure, dead_pid, table, unique_name};
    use std::fs;
    use std::path::Path;
    use std::sync::Arc;

    #[test]
    fn create_attach_unlink() {
        let t = table(64);
        assert_eq!(t.0.capacity(), 64);
        assert_eq!(t.0.mask + 1, 128);
        let other = AdmissionTable::attach(t.0.name()).unwrap();
        assert!(t.0.try_enter("k", 2).unwrap());
        assert_eq!(other.in_flight("k"), 1);
        assert_eq!(other.len(), 1);
        other.unlink().unwrap();
        assert!(
            matches!(AdmissionTable::attach(t.0.name()), Err(AdmissionError::Io(e)) if e.kind() == io::ErrorKind::NotFound)
        );
        assert_eq!(t.0.in_flight("k"), 1, "an unlinked segment stays mapped");
        assert!(matches!(
            AdmissionTable::create("x", 0),
            Err(AdmissionError::InvalidArgument(_))
        ));
        assert!(matches!(
            AdmissionTable::create("x", MAX_CAPACITY + 1),
            Err(AdmissionError::InvalidArgument(_))
        ));
    }

    #[test]
    fn attach_rejects_foreign_segments() {
        let name = unique_name("rl");
        let rl = RateLimiter::create(&name, 10.0, 2).unwrap();
        let path = Path::new(SHM_DIR).join(format!("hongbao-{name}"));
        fs::copy(Path::new(SHM_DIR).join(format!("hongbao-rl-{name}")), &path).unwrap();
        assert!(matches!(
            AdmissionTable::attach(&name),
            Err(AdmissionError::BadSegment(_))
        ));
        fs::write(&path, b"short").unwrap();
        assert!(matches!(
            AdmissionTable::attach(&name),
            Err(AdmissionError::BadSegment(_))
        ));
        fs::remove_file(&path).unwrap();
        rl.unlink().unwrap();
    }

    #[test]
    fn enter_leave_semantics() {
        let t = table(8);
        assert!(t.0.try_enter("p", 2).unwrap());
        assert!(t.0.try_enter("p", 2).unwrap());
        assert!(!t.0.try_enter("p", 2).unwrap());
        assert!(!t.0.try_enter("q", 0).unwrap());
        assert_eq!(t.0.in_flight("p"), 2);
        assert_eq!(t.0.in_flight("q"), 0);
        t.0.leave("p").unwrap();
        assert!(t.0.try_enter("p", 2).unwrap());
        t.0.leave("p").unwrap();
        t.0.leave("p").unwrap();
        assert!(matches!(t.0.leave("p"), Err(AdmissionError::NotHeld)));
        assert_eq!(t.0.in_flight("p"), 0);
        assert!(t.0.is_empty());
    }

    #[test]
    fn slots_are_reused_and_full_is_an_error() {
        let t = table(4);
        for i in 0..10_000 {
            let key = format!("k{i}");
            assert!(t.0.try_enter(&key, 1).unwrap());
            t.0.leave(&key).unwrap();
        }
        assert_eq!(t.0.len(), 0);
        for i in 0..4 {
            assert!(t.0.try_enter(&format!("f{i}"), 5).unwrap());
        }
        assert!(matches!(
            t.0.try_enter("f4", 5),
            Err(AdmissionError::TableFull { capacity: 4 })
        ));
        assert!(t.0.try_enter("f0", 5).unwrap(), "an existing slot still counts up");
        t.0.leave("f1").unwrap();
        assert!(t.0.try_enter("f4", 5).unwrap());
        check_structure(&t.0);
    }

    #[test]
    fn dead_lock_holder_is_stolen_and_the_table_repaired() {
        let t = table(8);
        let locked = t.0.lock();
        // Three entries in one cluster (homes 1, 1, 2), then a removal that died halfway:
        // the entry at slot 1 cleared (hole), and slot 2's entry copied into it but not cleared.
        locked.enter(1, 11, 9).unwrap();
        locked.enter(1, 12, 9).unwrap();
        locked.enter(1, 12, 9).unwrap();
        locked.enter(2, 13, 9).unwrap();
        locked.slot(1).clear();
        let moved = locked.slot(2);
        locked.slot(1).fill(moved.hash(), moved.pid(), moved.count());
        drop(locked);
        t.0.seg.u32_at(OFF_LOCK).store(dead_pid(), Ordering::Relaxed);
        assert_eq!(t.0.lock().probe(1, 0).total, 2, "duplicate dropped, count kept");
        let locked = t.0.lock();
        assert_eq!(locked.probe(2, 0).total, 1);
        assert_eq!(locked.live(), 2);
        drop(locked);
        check_structure(&t.0);

        // A hole in the middle of a chain: entries beyond it become reachable again.
        let locked = t.0.lock();
        locked.enter(3, 14, 9).unwrap();
        let hole = (0..=t.0.mask)
            .find(|&i| locked.slot(i).hash() == 1 && locked.slot(i).pid() != 0)
            .unwrap();
        locked.slot(hole).clear();
        drop(locked);
        t.0.seg.u32_at(OFF_LOCK).store(dead_pid(), Ordering::Relaxed);
        assert_eq!(t.0.in_flight("anything"), 0);
        let locked = t.0.lock();
        assert_eq!((locked.probe(2, 0).total, locked.probe(3, 0).total), (1, 1));
        drop(locked);
        check_structure(&t.0);
    }

    #[test]
    fn threads_never_exceed_the_limit() {
        let t = Arc::new(table(8));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let t = Arc::clone(&t);
                std::thread::spawn(move || {
                    let mut entered = 0u32;
                    for _ in 0..2_000 {
                        if t.0.try_enter("hot", 3).unwrap() {
                            entered += 1;
                            assert!(t.0.in_flight("hot") <= 3);
                            t.0.leave("hot").unwrap();
                        }
                    }
                    entered
                })
            })
            .collect();
        let entered: u32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(entered > 0);
        assert_eq!(t.0.in_flight("hot"), 0);
    }
}
