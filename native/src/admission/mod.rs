//! Per-packet admission counters and host-wide token buckets in shared memory (docs/architecture.md sections 6
//! and 8), used by every worker process of one host: the segments (shm), the admission table
//! (table, over its slot arrays in slots), the rate limiter (rate), then the PyO3 layer (py).

mod error;
mod py;
mod rate;
mod shm;
mod slots;
mod table;
#[cfg(test)]
mod testing;

pub use error::{AdmissionError, Result};
pub use py::{init_pymodule, PyAdmissionTable, PyRateLimiter};
pub use rate::{RateLimiter, MAX_BURST, MAX_RATE};
pub use shm::validate_name;
pub use table::{AdmissionTable, MAX_CAPACITY};
