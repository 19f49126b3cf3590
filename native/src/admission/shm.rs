//! The shared-memory segments under /dev/shm: names, the header words every segment starts with
//! (magic, version), creation by rename, mapping, and the process facts (pid, monotonic time)
//! that the table and the limiter share.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Once;

use memmap2::{MmapOptions, MmapRaw};

use super::error::{AdmissionError, Result};

pub(super) const SHM_DIR: &str = "/dev/shm";
pub(super) const MAX_NAME_LEN: usize = 100;
pub(super) const VERSION: u32 = 1;
pub(super) const OFF_MAGIC: usize = 0;
pub(super) const OFF_VERSION: usize = 8;

static CACHED_PID: AtomicU32 = AtomicU32::new(0);
static ATFORK: Once = Once::new();

extern "C" fn forget_pid_in_child() {
    // ORDERING: Relaxed: the child is single-threaded while fork handlers run.
    CACHED_PID.store(0, Ordering::Relaxed);
}

/// This process's pid, cached; a fork handler clears the cache in the child.
pub(super) fn current_pid() -> u32 {
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

pub(super) fn monotonic_ns() -> u64 {
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
pub(super) struct Segment {
    map: MmapRaw,
    path: PathBuf,
}

impl Segment {
    /// Builds the file under a private temporary name, initialises it, then renames it over
    /// `path`: attachers never see a half-initialised segment, and a stale one is replaced whole.
    pub(super) fn create(path: PathBuf, len: usize, init: impl FnOnce(&Segment)) -> Result<Segment> {
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

    pub(super) fn open(path: PathBuf, min_len: usize) -> Result<Segment> {
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

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    pub(super) fn u32_at(&self, off: usize) -> &AtomicU32 {
        // SAFETY: callers pass 4-aligned offsets with off + 4 <= len (layout validated at create or
        // attach); the mapping is page-aligned and lives as long as &self; AtomicU32 tolerates
        // concurrent access from other processes.
        unsafe { &*(self.map.as_mut_ptr().add(off) as *const AtomicU32) }
    }

    pub(super) fn u64_at(&self, off: usize) -> &AtomicU64 {
        // SAFETY: as in u32_at, with 8-aligned offsets and off + 8 <= len.
        unsafe { &*(self.map.as_mut_ptr().add(off) as *const AtomicU64) }
    }

    pub(super) fn unlink(&self) -> Result<()> {
        fs::remove_file(&self.path).map_err(|e| with_path(e, &self.path))
    }
}

/// Keeps the error kind (so Python gets FileNotFoundError, PermissionError, ...) and adds the path.
pub(super) fn with_path(e: io::Error, path: &Path) -> AdmissionError {
    AdmissionError::Io(io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

pub(super) fn shm_path(prefix: &str, name: &str) -> Result<PathBuf> {
    validate_name(name)?;
    Ok(Path::new(SHM_DIR).join(format!("{prefix}{name}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::AdmissionTable;

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
}
