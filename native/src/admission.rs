//! Per-packet admission counters and host-wide token buckets in shared memory (DESIGN.md sections 6
//! and 8), used by every worker process of one host.
//!
//! Admission segment `/dev/shm/hongbao-<name>` (native-endian words):
//!   0 magic u64 | 8 version u32 | 12 capacity u32 | 16 nslots u32 | 20 active u32 | 24 live u32
//!   64 lock u32 (holder's pid, 0 = free; own cache line)
//!   128 slot array 0, then slot array 1: nslots slots of 16 bytes (key_hash u64, pid u32, count u32)
//!
//! Why this shape:
//! - One slot per (key, pid), so a dead worker's counts are attributable and reclaimable. The home
//!   position depends on the key only, so linear probing from it meets every slot of the key.
//! - nslots is the power of two >= 2 * capacity: load <= 1/2, short probes, and every probe meets an
//!   empty slot. Deletion shifts later entries back (no tombstones): a key back at 0 frees its slot.
//! - One spinlock word holding the owner's pid guards the table; critical sections are a few loads
//!   and stores, no syscalls. A waiter that sees one owner for long checks kill(owner, 0); on ESRCH
//!   it steals the lock and repairs the table, because the dead owner may have stopped mid-shift
//!   (a hole in a probe chain, or one entry in two slots). Repair copies the live entries, deduped,
//!   into the spare array and then flips `active` with one store, so a crash during repair loses
//!   nothing. `reclaim` uses the same rebuild (rare: once per dead worker).
//! - A slot's pid is written last with Release and cleared with Release, so a half-written slot
//!   reads as empty and a moved entry is visible at its new place before it leaves the old one.
//! - Limits: key identity is the 64-bit xxh3 of its UTF-8 (two keys colliding would share counts,
//!   odds 2^-64 per pair); all users share one pid namespace and one time namespace; a dead
//!   holder's pid reused by a new process before any waiter checks it (~10 ms) stalls the lock.
//!
//! Rate limiter segment `/dev/shm/hongbao-rl-<name>`: GCRA, i.e. a token bucket kept as one
//! "theoretical arrival time" word updated by CAS. Lock-free, so a process killed mid-call cannot
//! wedge it; time is CLOCK_MONOTONIC (system-wide) in 1/16 ns ticks since the segment's creation.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Once;
use std::time::Duration;

use memmap2::{MmapOptions, MmapRaw};
use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::prelude::*;
use xxhash_rust::xxh3::xxh3_64;

use crate::errors::AdmissionTableFull;

const SHM_DIR: &str = "/dev/shm";
const MAX_NAME_LEN: usize = 100;
const VERSION: u32 = 1;

const TABLE_MAGIC: u64 = u64::from_le_bytes(*b"HBADMIT\0");
pub const MAX_CAPACITY: u32 = 1 << 20;
const HEADER_LEN: usize = 128;
const SLOT_LEN: usize = 16;
const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_CAPACITY: usize = 12;
const OFF_NSLOTS: usize = 16;
const OFF_ACTIVE: usize = 20;
const OFF_LIVE: usize = 24;
const OFF_LOCK: usize = 64;

const SPIN_WAITS: u32 = 64;
const YIELD_WAITS: u32 = 128;
const SLEEP_WAIT: Duration = Duration::from_micros(50);
const LIVENESS_CHECK_EVERY: u32 = 256;

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

#[derive(Debug)]
pub enum AdmissionError {
    InvalidName(String),
    InvalidArgument(String),
    BadSegment(String),
    TableFull { capacity: u32 },
    NotHeld,
    Io(io::Error),
}

impl fmt::Display for AdmissionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidName(name) => write!(
                f,
                "invalid segment name {name:?}: use 1 to {MAX_NAME_LEN} characters from [A-Za-z0-9_.-]"
            ),
            Self::InvalidArgument(why) => f.write_str(why),
            Self::BadSegment(why) => write!(f, "not a hongbao shared-memory segment: {why}"),
            Self::TableFull { capacity } => {
                write!(f, "admission table full: all {capacity} (key, pid) slots are in use")
            }
            Self::NotHeld => f.write_str("this process holds no admission for this key"),
            Self::Io(e) => write!(f, "{e}"),
        }
    }
}

impl From<io::Error> for AdmissionError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

impl From<AdmissionError> for PyErr {
    fn from(e: AdmissionError) -> PyErr {
        match e {
            AdmissionError::Io(io) => io.into(),
            AdmissionError::TableFull { .. } => AdmissionTableFull::new_err(e.to_string()),
            other => PyValueError::new_err(other.to_string()),
        }
    }
}

pub type Result<T> = std::result::Result<T, AdmissionError>;

static CACHED_PID: AtomicU32 = AtomicU32::new(0);
static ATFORK: Once = Once::new();

extern "C" fn forget_pid_in_child() {
    // ORDERING: Relaxed: the child is single-threaded while fork handlers run.
    CACHED_PID.store(0, Ordering::Relaxed);
}

/// This process's pid, cached; a fork handler clears the cache in the child.
fn current_pid() -> u32 {
    // ORDERING: Relaxed: the value is self-contained, nothing else is published through it.
    let cached = CACHED_PID.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    ATFORK.call_once(|| {
        // SAFETY: the handler only stores to a static atomic, which is async-signal-safe.
        unsafe { libc::pthread_atfork(None, None, Some(forget_pid_in_child)) };
    });
    // SAFETY: getpid has no preconditions and cannot fail.
    let pid = unsafe { libc::getpid() }.unsigned_abs();
    // ORDERING: Relaxed, as above.
    CACHED_PID.store(pid, Ordering::Relaxed);
    pid
}

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

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid, writable timespec; CLOCK_MONOTONIC exists on every Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

pub fn validate_name(name: &str) -> Result<()> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    if name.is_empty() || name.len() > MAX_NAME_LEN || !name.chars().all(ok_char) {
        return Err(AdmissionError::InvalidName(name.to_owned()));
    }
    Ok(())
}

/// A mapped /dev/shm file. Offsets passed to the accessors are checked against the length by
/// the callers' layout validation (header constants, masked slot indexes).
struct Segment {
    map: MmapRaw,
    path: PathBuf,
}

impl Segment {
    /// Builds the file under a private temporary name, initialises it, then renames it over
    /// `path`: attachers never see a half-initialised segment, and a stale one is replaced whole.
    fn create(path: PathBuf, len: usize, init: impl FnOnce(&Segment)) -> Result<Segment> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        // ORDERING: Relaxed: only uniqueness of the counter value matters.
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("hongbao");
        let tmp = path.with_file_name(format!(".{file_name}.{}.{seq}.{}", current_pid(), monotonic_ns()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| with_path(e, &tmp))?;
        let built = Self::build(&file, path, len, init).and_then(|seg| {
            fs::rename(&tmp, &seg.path).map_err(|e| with_path(e, &seg.path))?;
            Ok(seg)
        });
        if built.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        built
    }

    fn build(file: &File, path: PathBuf, len: usize, init: impl FnOnce(&Segment)) -> Result<Segment> {
        let off_len = libc::off_t::try_from(len)
            .map_err(|_| AdmissionError::InvalidArgument(format!("segment of {len} bytes is too large")))?;
        // SAFETY: fd is an open, writable file owned by `file`; reserving the pages up front turns a
        // full /dev/shm into ENOSPC here instead of SIGBUS on first touch.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, off_len) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc).into());
        }
        let map = MmapOptions::new().len(len).map_raw(file)?;
        let seg = Segment { map, path };
        init(&seg);
        Ok(seg)
    }

    fn open(path: PathBuf, min_len: usize) -> Result<Segment> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| with_path(e, &path))?;
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| AdmissionError::BadSegment("file too large".to_owned()))?;
        if len < min_len {
            return Err(AdmissionError::BadSegment(format!(
                "{len} bytes, shorter than its header"
            )));
        }
        let map = MmapOptions::new().len(len).map_raw(&file)?;
        Ok(Segment { map, path })
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        // SAFETY: callers pass 4-aligned offsets with off + 4 <= len (layout validated at create or
        // attach); the mapping is page-aligned and lives as long as &self; AtomicU32 tolerates
        // concurrent access from other processes.
        unsafe { &*(self.map.as_mut_ptr().add(off) as *const AtomicU32) }
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        // SAFETY: as in u32_at, with 8-aligned offsets and off + 8 <= len.
        unsafe { &*(self.map.as_mut_ptr().add(off) as *const AtomicU64) }
    }

    fn unlink(&self) -> Result<()> {
        fs::remove_file(&self.path).map_err(|e| with_path(e, &self.path))
    }
}

/// Keeps the error kind (so Python gets FileNotFoundError, PermissionError, ...) and adds the path.
fn with_path(e: io::Error, path: &Path) -> AdmissionError {
    AdmissionError::Io(io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

fn shm_path(prefix: &str, name: &str) -> Result<PathBuf> {
    validate_name(name)?;
    Ok(Path::new(SHM_DIR).join(format!("{prefix}{name}")))
}

fn key_hash(key: &str) -> u64 {
    xxh3_64(key.as_bytes())
}

struct Slot<'a> {
    hash: &'a AtomicU64,
    pid: &'a AtomicU32,
    count: &'a AtomicU32,
}

// ORDERING (all Slot accessors): Relaxed under the table lock, whose Acquire CAS / Release store
// order them between holders; pid stores are Release and repair's pid loads Acquire, so a holder
// that dies mid-write leaves either an empty slot or a complete one (see the module comment).
impl Slot<'_> {
    fn pid(&self) -> u32 {
        self.pid.load(Ordering::Relaxed)
    }
    fn pid_acquire(&self) -> u32 {
        self.pid.load(Ordering::Acquire)
    }
    fn hash(&self) -> u64 {
        self.hash.load(Ordering::Relaxed)
    }
    fn count(&self) -> u32 {
        self.count.load(Ordering::Relaxed)
    }
    fn set_count(&self, count: u32) {
        self.count.store(count, Ordering::Relaxed);
    }
    fn fill(&self, hash: u64, pid: u32, count: u32) {
        self.hash.store(hash, Ordering::Relaxed);
        self.count.store(count, Ordering::Relaxed);
        self.pid.store(pid, Ordering::Release);
    }
    fn clear(&self) {
        self.pid.store(0, Ordering::Release);
    }
}

/// The shared admission table (plain-Rust API; the Python class wraps it).
pub struct AdmissionTable {
    seg: Segment,
    name: String,
    capacity: u32,
    mask: usize,
}

struct Probe {
    total: u64,
    mine: Option<usize>,
    empty: Option<usize>,
}

/// The table lock, held; `array` is the active slot array. Dropping releases the lock.
struct Locked<'a> {
    table: &'a AdmissionTable,
    array: usize,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // ORDERING: Release publishes this critical section's writes to the next Acquire CAS.
        self.table.seg.u32_at(OFF_LOCK).store(0, Ordering::Release);
    }
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

    fn slot(&self, array: usize, i: usize) -> Slot<'_> {
        let index = (array & 1) * (self.mask + 1) + (i & self.mask);
        let off = HEADER_LEN + index * SLOT_LEN;
        Slot {
            hash: self.seg.u64_at(off),
            pid: self.seg.u32_at(off + 8),
            count: self.seg.u32_at(off + 12),
        }
    }

    fn lock(&self) -> Locked<'_> {
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
                    if waits % LIVENESS_CHECK_EVERY == 0 && !pid_alive(owner) {
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

    fn locked(&self) -> Locked<'_> {
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

impl Locked<'_> {
    fn slot(&self, i: usize) -> Slot<'_> {
        self.table.slot(self.array, i)
    }

    fn home(&self, hash: u64) -> usize {
        (hash as usize) & self.table.mask
    }

    // ORDERING (live): Relaxed under the lock; repair recomputes it, so a torn update cannot last.
    fn live(&self) -> u32 {
        self.table.seg.u32_at(OFF_LIVE).load(Ordering::Relaxed)
    }

    fn set_live(&self, live: u32) {
        self.table.seg.u32_at(OFF_LIVE).store(live, Ordering::Relaxed);
    }

    /// Walks the key's probe chain: the key's total, this pid's slot, and the chain's end.
    fn probe(&self, hash: u64, pid: u32) -> Probe {
        let mut probe = Probe {
            total: 0,
            mine: None,
            empty: None,
        };
        let mut i = self.home(hash);
        for _ in 0..=self.table.mask {
            let slot = self.slot(i);
            let p = slot.pid();
            if p == 0 {
                probe.empty = Some(i);
                break;
            }
            if slot.hash() == hash {
                probe.total += u64::from(slot.count());
                if p == pid {
                    probe.mine = Some(i);
                }
            }
            i = (i + 1) & self.table.mask;
        }
        probe
    }

    fn enter(&self, hash: u64, pid: u32, limit: u32) -> Result<bool> {
        let probe = self.probe(hash, pid);
        if probe.total >= u64::from(limit) {
            return Ok(false);
        }
        if let Some(i) = probe.mine {
            let slot = self.slot(i);
            slot.set_count(slot.count().saturating_add(1));
            return Ok(true);
        }
        let live = self.live();
        match probe.empty {
            Some(i) if live < self.table.capacity => {
                self.slot(i).fill(hash, pid, 1);
                self.set_live(live + 1);
                Ok(true)
            }
            _ => Err(AdmissionError::TableFull {
                capacity: self.table.capacity,
            }),
        }
    }

    fn leave(&self, hash: u64, pid: u32) -> Result<()> {
        let Some(i) = self.probe(hash, pid).mine else {
            return Err(AdmissionError::NotHeld);
        };
        let slot = self.slot(i);
        let count = slot.count();
        if count > 1 {
            slot.set_count(count - 1);
        } else {
            self.remove(i);
            self.set_live(self.live().saturating_sub(1));
        }
        Ok(())
    }

    /// Backward-shift deletion: later entries of the cluster move into the hole when their home
    /// allows it, so no tombstone is left and every chain stays unbroken.
    fn remove(&self, i: usize) {
        let mask = self.table.mask;
        let mut hole = i;
        self.slot(hole).clear();
        let mut j = hole;
        for _ in 0..mask {
            j = (j + 1) & mask;
            let slot = self.slot(j);
            let pid = slot.pid();
            if pid == 0 {
                return;
            }
            let hash = slot.hash();
            let home = self.home(hash);
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.slot(hole).fill(hash, pid, slot.count());
                slot.clear();
                hole = j;
            }
        }
    }

    fn holds_any(&self, pid: u32) -> bool {
        (0..=self.table.mask).any(|i| self.slot(i).pid() == pid)
    }

    /// Copies the active array's entries, deduplicated and without `exclude`'s, into the spare
    /// array, then makes it active. Returns the counts dropped for `exclude`.
    fn rebuild(&mut self, exclude: Option<u32>) -> u64 {
        let table = self.table;
        let (from, to) = (self.array, self.array ^ 1);
        let mask = table.mask;
        for i in 0..=mask {
            table.slot(to, i).clear();
        }
        let mut live: u32 = 0;
        let mut dropped: u64 = 0;
        for i in 0..=mask {
            let src = table.slot(from, i);
            let pid = src.pid_acquire();
            let count = src.count();
            if pid == 0 || count == 0 {
                continue;
            }
            if Some(pid) == exclude {
                dropped += u64::from(count);
                continue;
            }
            if live >= table.capacity {
                continue;
            }
            let hash = src.hash();
            let mut j = self.home(hash);
            for _ in 0..=mask {
                let dst = table.slot(to, j);
                let dst_pid = dst.pid();
                if dst_pid == 0 {
                    dst.fill(hash, pid, count);
                    live += 1;
                    break;
                }
                if dst_pid == pid && dst.hash() == hash {
                    break;
                }
                j = (j + 1) & mask;
            }
        }
        self.set_live(live);
        // ORDERING: Release: the new array's slots are written before it becomes active.
        table.seg.u32_at(OFF_ACTIVE).store(to as u32, Ordering::Release);
        self.array = to;
        dropped
    }
}

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

/// A Python int of any size, saturated to i64: out-of-range values get this module's ValueError,
/// never OverflowError; non-ints still raise TypeError.
#[derive(Clone, Copy)]
struct AnyInt {
    value: i64,
    exact: bool,
}

impl AnyInt {
    const ONE: AnyInt = AnyInt { value: 1, exact: true };

    fn in_range(self, what: &str, lo: i64, hi: i64) -> Result<i64> {
        if self.exact && (lo..=hi).contains(&self.value) {
            return Ok(self.value);
        }
        let got = if self.exact {
            self.value.to_string()
        } else {
            "an int beyond 64 bits".to_owned()
        };
        Err(AdmissionError::InvalidArgument(format!(
            "{what} must be in [{lo}, {hi}], got {got}"
        )))
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for AnyInt {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        match obj.extract::<i64>() {
            Ok(value) => Ok(AnyInt { value, exact: true }),
            Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => {
                let value = if obj.lt(0)? { i64::MIN } else { i64::MAX };
                Ok(AnyInt { value, exact: false })
            }
            Err(e) => Err(e),
        }
    }
}

const PID_MAX: i64 = libc::pid_t::MAX as i64;

#[pyclass(frozen, name = "AdmissionTable", module = "hongbao_native")]
pub struct PyAdmissionTable {
    inner: AdmissionTable,
}

#[pymethods]
impl PyAdmissionTable {
    #[staticmethod]
    fn create(name: &str, capacity: AnyInt) -> PyResult<Self> {
        let capacity = capacity.in_range("capacity", 1, i64::from(MAX_CAPACITY))?;
        Ok(Self {
            inner: AdmissionTable::create(name, capacity as u32)?,
        })
    }

    #[staticmethod]
    fn attach(name: &str) -> PyResult<Self> {
        Ok(Self {
            inner: AdmissionTable::attach(name)?,
        })
    }

    fn unlink(&self) -> PyResult<()> {
        Ok(self.inner.unlink()?)
    }

    fn try_enter(&self, key: &str, limit: AnyInt) -> PyResult<bool> {
        let limit = limit.in_range("limit", 0, i64::from(u32::MAX))?;
        Ok(self.inner.try_enter(key, limit as u32)?)
    }

    fn leave(&self, key: &str) -> PyResult<()> {
        Ok(self.inner.leave(key)?)
    }

    fn in_flight(&self, key: &str) -> u64 {
        self.inner.in_flight(key)
    }

    fn reclaim(&self, pid: AnyInt) -> PyResult<u64> {
        let pid = pid.in_range("pid", 1, PID_MAX)?;
        Ok(self.inner.reclaim(pid as u32))
    }

    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    #[getter]
    fn capacity(&self) -> u32 {
        self.inner.capacity()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "AdmissionTable(name='{}', capacity={})",
            self.inner.name(),
            self.inner.capacity()
        )
    }
}

#[pyclass(frozen, name = "RateLimiter", module = "hongbao_native")]
pub struct PyRateLimiter {
    inner: RateLimiter,
}

#[pymethods]
impl PyRateLimiter {
    #[staticmethod]
    fn create(name: &str, rate_per_second: f64, burst: AnyInt) -> PyResult<Self> {
        let burst = burst.in_range("burst", 1, MAX_BURST as i64)?;
        Ok(Self {
            inner: RateLimiter::create(name, rate_per_second, burst as u64)?,
        })
    }

    #[staticmethod]
    fn attach(name: &str) -> PyResult<Self> {
        Ok(Self {
            inner: RateLimiter::attach(name)?,
        })
    }

    fn unlink(&self) -> PyResult<()> {
        Ok(self.inner.unlink()?)
    }

    #[pyo3(signature = (n = AnyInt::ONE), text_signature = "($self, n=1)")]
    fn try_acquire(&self, n: AnyInt) -> PyResult<bool> {
        Ok(self.inner.try_acquire(n.in_range("n", 0, i64::MAX)? as u64))
    }

    #[pyo3(signature = (n = AnyInt::ONE), text_signature = "($self, n=1)")]
    fn retry_after(&self, n: AnyInt) -> PyResult<f64> {
        Ok(self.inner.retry_after(n.in_range("n", 0, i64::MAX)? as u64))
    }

    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    #[getter]
    fn rate_per_second(&self) -> f64 {
        self.inner.rate_per_second()
    }

    #[getter]
    fn burst(&self) -> u64 {
        self.inner.burst()
    }

    fn __repr__(&self) -> String {
        format!(
            "RateLimiter(name='{}', rate_per_second={:?}, burst={})",
            self.inner.name(),
            self.inner.rate_per_second(),
            self.inner.burst()
        )
    }
}

pub fn init_pymodule(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyAdmissionTable>()?;
    m.add_class::<PyRateLimiter>()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;
    use std::sync::Arc;

    fn unique_name(tag: &str) -> String {
        static N: AtomicU64 = AtomicU64::new(0);
        format!(
            "test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        )
    }

    struct Table(AdmissionTable);

    impl Drop for Table {
        fn drop(&mut self) {
            let _ = self.0.unlink();
        }
    }

    fn table(capacity: u32) -> Table {
        Table(AdmissionTable::create(&unique_name("t"), capacity).unwrap())
    }

    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    /// Every live entry is reachable from its home without crossing an empty slot, and no
    /// (hash, pid) appears twice.
    fn check_structure(t: &AdmissionTable) {
        let locked = t.lock();
        let mut seen = HashMap::new();
        for i in 0..=t.mask {
            let slot = locked.slot(i);
            if slot.pid() == 0 {
                continue;
            }
            assert!(slot.count() > 0, "live slot {i} with count 0");
            assert!(seen.insert((slot.hash(), slot.pid()), i).is_none(), "duplicate at {i}");
            let mut j = locked.home(slot.hash());
            while j != i {
                assert_ne!(locked.slot(j).pid(), 0, "slot {i} unreachable: hole at {j}");
                j = (j + 1) & t.mask;
            }
        }
        assert_eq!(locked.live() as usize, seen.len());
    }

    #[test]
    fn names_are_validated() {
        for bad in ["", "a/b", "..\u{e9}", "x y", &"n".repeat(101)] {
            assert!(
                matches!(AdmissionTable::create(bad, 4), Err(AdmissionError::InvalidName(_))),
                "{bad:?}"
            );
        }
        assert!(validate_name(&"n".repeat(100)).is_ok());
        assert!(validate_name("Ab0_.-").is_ok());
    }

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
    fn reclaim_drops_a_pids_counts() {
        let t = table(16);
        let locked = t.0.lock();
        for pid in [101, 102] {
            for _ in 0..3 {
                assert!(locked.enter(7, pid, 10).unwrap());
            }
            assert!(locked.enter(8, pid, 10).unwrap());
        }
        drop(locked);
        assert_eq!(t.0.reclaim(101), 4);
        assert_eq!(t.0.reclaim(101), 0);
        let locked = t.0.lock();
        assert_eq!(locked.probe(7, 0).total, 3);
        assert_eq!(locked.probe(8, 0).total, 1);
        drop(locked);
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

    #[derive(Debug, Clone)]
    enum Op {
        Enter(u64, u32, u32),
        Leave(u64, u32),
        Reclaim(u32),
        Repair,
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few distinct homes (and keys sharing a home) so clusters collide and wrap around.
        let hash = (0u64..8, 0u64..3).prop_map(|(home, tag)| home | (tag << 40));
        let pid = 1u32..4;
        prop_oneof![
            4 => (hash.clone(), pid.clone(), 0u32..4).prop_map(|(h, p, l)| Op::Enter(h, p, l)),
            4 => (hash, pid.clone()).prop_map(|(h, p)| Op::Leave(h, p)),
            1 => pid.prop_map(Op::Reclaim),
            1 => Just(Op::Repair),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        #[test]
        fn matches_a_hashmap_model(ops in prop::collection::vec(op(), 1..120)) {
            let t = table(4);
            let mut model: HashMap<(u64, u32), u32> = HashMap::new();
            for op in ops {
                let mut locked = t.0.lock();
                match op {
                    Op::Enter(h, p, limit) => {
                        let total: u32 = model.iter().filter(|((mh, _), _)| *mh == h).map(|(_, c)| *c).sum();
                        let expected = if total >= limit {
                            Ok(false)
                        } else if model.contains_key(&(h, p)) || model.len() < 4 {
                            *model.entry((h, p)).or_insert(0) += 1;
                            Ok(true)
                        } else {
                            Err(())
                        };
                        let got = locked.enter(h, p, limit);
                        prop_assert_eq!(got.map_err(|e| matches!(e, AdmissionError::TableFull { .. })).map_err(|_| ()), expected);
                    }
                    Op::Leave(h, p) => {
                        let got = locked.leave(h, p);
                        match model.get_mut(&(h, p)) {
                            Some(c) => {
                                prop_assert!(got.is_ok());
                                *c -= 1;
                                if *c == 0 {
                                    model.remove(&(h, p));
                                }
                            }
                            None => prop_assert!(matches!(got, Err(AdmissionError::NotHeld))),
                        }
                    }
                    Op::Reclaim(p) => {
                        drop(locked);
                        let expected: u32 = model.iter().filter(|((_, mp), _)| *mp == p).map(|(_, c)| *c).sum();
                        model.retain(|(_, mp), _| *mp != p);
                        prop_assert_eq!(t.0.reclaim(p), u64::from(expected));
                        locked = t.0.lock();
                    }
                    Op::Repair => {
                        locked.rebuild(None);
                    }
                }
                for home in 0..8u64 {
                    for tag in 0..3u64 {
                        let h = home | (tag << 40);
                        let expected: u32 = model.iter().filter(|((mh, _), _)| *mh == h).map(|(_, c)| *c).sum();
                        prop_assert_eq!(locked.probe(h, 0).total, u64::from(expected));
                    }
                }
                drop(locked);
                check_structure(&t.0);
                prop_assert_eq!(t.0.len(), model.len());
            }
        }
    }

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
