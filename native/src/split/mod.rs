//! Lucky and equal split of a packet, docs/architecture.md section 3: the rule (rule) and its division-free
//! path for small numbers (fast), its generators (rng), then the PyO3 layer (py). Docs live in the
//! stub.

mod fast;
mod py;
mod rng;
mod rule;

pub use py::{init_pymodule, Splitter};
pub use rng::{seeded_rng, with_os_rng, OsSeeded, RESEED_AFTER_DRAWS};
pub use rule::{
    below, equal_share, lucky_share, lucky_split_all, lucky_split_each, lucky_split_into, DrawU64, Shares, SplitError,
    MAX_SPLIT_ALL_COUNT, SMALL_SHARE,
};
