//! The slot arrays of the admission table: open addressing with linear probing and
//! backward-shift deletion (no tombstones), and the rebuild that repairs a table left half-written.
//!
//! - One slot per (key, pid), so a dead worker's counts are attributable and reclaimable. The home
//!   position depends on the key only, so linear probing from it meets every slot of the key.
//! - nslots is the power of two >= 2 * capacity: load <= 1/2, short probes, and every probe meets an
//!   empty slot. Deletion shifts later entries back (no tombstones): a key back at 0 frees its slot.
//! - Repair (after a holder died mid-shift: a hole in a probe chain, or one entry in two slots)
//!   copies the live entries, deduped, into the spare array and then flips `active` with one store,
//!   so a crash during repair loses nothing.
//! - A slot's pid is written last with Release and cleared with Release, so a half-written slot
//!   reads as empty and a moved entry is visible at its new place before it leaves the old one.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::error::{AdmissionError, Result};
use super::table::{AdmissionTable, OFF_ACTIVE, OFF_LIVE, OFF_LOCK};

pub(super) const SLOT_LEN: usize = 16;

pub(super) struct Slot<'a> {
    pub(super) hash: &'a AtomicU64,
    pub(super) pid: &'a AtomicU32,
    pub(super) count: &'a AtomicU32,
}

// ORDERING (all Slot accessors): Relaxed under the table lock, whose Acquire CAS / Release store
// order them between holders; pid stores are Release and repair's pid loads Acquire, so a holder
// that dies mid-write leaves either an empty slot or a complete one (see the module comment).
impl Slot<'_> {
    pub(super) fn pid(&self) -> u32 {
        self.pid.load(Ordering::Relaxed)
    }
    pub(super) fn pid_acquire(&self) -> u32 {
        self.pid.load(Ordering::Acquire)
    }
    pub(super) fn hash(&self) -> u64 {
        self.hash.load(Ordering::Relaxed)
    }
    pub(super) fn count(&self) -> u32 {
        self.count.load(Ordering::Relaxed)
    }
    pub(super) fn set_count(&self, count: u32) {
        self.count.store(count, Ordering::Relaxed);
    }
    pub(super) fn fill(&self, hash: u64, pid: u32, count: u32) {
        self.hash.store(hash, Ordering::Relaxed);
        self.count.store(count, Ordering::Relaxed);
        self.pid.store(pid, Ordering::Release);
    }
    pub(super) fn clear(&self) {
        self.pid.store(0, Ordering::Release);
    }
}

pub(super) struct Probe {
    pub(super) total: u64,
    pub(super) mine: Option<usize>,
    pub(super) empty: Option<usize>,
}

/// The table lock, held; `array` is the active slot array. Dropping releases the lock.
pub(super) struct Locked<'a> {
    pub(super) table: &'a AdmissionTable,
    pub(super) array: usize,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // ORDERING: Release publishes this critical section's writes to the next Acquire CAS.
        self.table.seg.u32_at(OFF_LOCK).store(0, Ordering::Release);
    }
}

impl Locked<'_> {
    pub(super) fn slot(&self, i: usize) -> Slot<'_> {
        self.table.slot(self.array, i)
    }

    pub(super) fn home(&self, hash: u64) -> usize {
        (hash as usize) & self.table.mask
    }

    // ORDERING (live): Relaxed under the lock; repair recomputes it, so a torn update cannot last.
    pub(super) fn live(&self) -> u32 {
        self.table.seg.u32_at(OFF_LIVE).load(Ordering::Relaxed)
    }

    pub(super) fn set_live(&self, live: u32) {
        self.table.seg.u32_at(OFF_LIVE).store(live, Ordering::Relaxed);
    }

    /// Walks the key's probe chain: the key's total, this pid's slot, and the chain's end.
    pub(super) fn probe(&self, hash: u64, pid: u32) -> Probe {
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

    pub(super) fn enter(&self, hash: u64, pid: u32, limit: u32) -> Result<bool> {
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

    pub(super) fn leave(&self, hash: u64, pid: u32) -> Result<()> {
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
    pub(super) fn remove(&self, i: usize) {
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

    pub(super) fn holds_any(&self, pid: u32) -> bool {
        (0..=self.table.mask).any(|i| self.slot(i).pid() == pid)
    }

    /// Copies the active array's entries, deduplicated and without `exclude`'s, into the spare
    /// array, then makes it active. Returns the counts dropped for `exclude`.
    pub(super) fn rebuild(&mut self, exclude: Option<u32>) -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::testing::{check_structure, table};
    use proptest::prelude::*;
    use std::collections::HashMap;

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
}
