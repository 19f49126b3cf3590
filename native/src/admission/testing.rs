//! Test helpers shared by the admission unit tests: unique segment names, a table that unlinks
//! itself, a pid no process has, and the table's structural invariant.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use super::table::AdmissionTable;

pub fn unique_name(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "test-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub struct Table(pub AdmissionTable);

impl Drop for Table {
    fn drop(&mut self) {
        let _ = self.0.unlink();
    }
}

pub fn table(capacity: u32) -> Table {
    Table(AdmissionTable::create(&unique_name("t"), capacity).unwrap())
}

pub fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// Every live entry is reachable from its home without crossing an empty slot, and no
/// (hash, pid) appears twice.
pub fn check_structure(t: &AdmissionTable) {
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
