//! Routing hashes (docs/architecture.md section 4): xxh3-64 (seed 0) of the id or key, shard = (db, table, day),
//! node = jump consistent hash (Lamping & Veach 2014), online shard = hash mod 16. No randomized
//! hashing anywhere: the same input routes the same on every process, machine and version.

use std::fmt;
use std::num::NonZeroU32;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::order_id::{self, OrderIdError};

pub const ONLINE_SHARDS: u64 = 16;
/// Exclusive upper bound of every count (n_db, n_tables, n_nodes): jump hash's int32 buckets.
pub const COUNT_LIMIT: i64 = 1 << 31;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoutingError {
    OrderId(OrderIdError),
    Count { name: &'static str, value: i64 },
}

fn count_message(name: &str, value: &dyn fmt::Display) -> String {
    format!("{name} must be in [1, 2**31), got {value}")
}

impl fmt::Display for RoutingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RoutingError::OrderId(e) => e.fmt(f),
            RoutingError::Count { name, value } => f.write_str(&count_message(name, value)),
        }
    }
}

impl std::error::Error for RoutingError {}

impl From<OrderIdError> for RoutingError {
    fn from(err: OrderIdError) -> Self {
        RoutingError::OrderId(err)
    }
}

impl From<RoutingError> for PyErr {
    fn from(err: RoutingError) -> PyErr {
        PyValueError::new_err(err.to_string())
    }
}

/// xxh3-64 with seed 0.
pub fn xxh3_64(data: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(data)
}

/// Jump consistent hash, exactly the paper's C++ (arXiv:1406.2294, figure 1), same float operations.
pub fn jump_hash(mut key: u64, n_buckets: NonZeroU32) -> u32 {
    let n = i64::from(n_buckets.get());
    let (mut b, mut j) = (-1i64, 0i64);
    while j < n {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    u32::try_from(b).unwrap_or(0)
}

fn count(name: &'static str, value: i64) -> Result<NonZeroU32, RoutingError> {
    u32::try_from(value)
        .ok()
        .filter(|_| value < COUNT_LIMIT)
        .and_then(NonZeroU32::new)
        .ok_or(RoutingError::Count { name, value })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub db: u32,
    pub table: u32,
    pub day: u8,
}

/// Validates the id, then db = h mod N, table = (h div N) mod M, day = the id's dd.
pub fn shard_of(order_id: &str, n_db: i64, n_tables: i64) -> Result<Shard, RoutingError> {
    let n = u64::from(count("n_db", n_db)?.get());
    let m = u64::from(count("n_tables", n_tables)?.get());
    let day = order_id::decode(order_id)?.day();
    let h = xxh3_64(order_id.as_bytes());
    // Both remainders are below a u32 count, so the narrowing cannot fail.
    let db = u32::try_from(h % n).unwrap_or(0);
    let table = u32::try_from(h / n % m).unwrap_or(0);
    Ok(Shard { db, table, day })
}

pub fn node_of(key: &[u8], n_nodes: i64) -> Result<u32, RoutingError> {
    Ok(jump_hash(xxh3_64(key), count("n_nodes", n_nodes)?))
}

pub fn online_shard(user_id: &[u8]) -> u8 {
    (xxh3_64(user_id) % ONLINE_SHARDS) as u8
}

// ---- Python layer ----

fn count_arg(obj: &Bound<'_, PyAny>, name: &'static str) -> PyResult<i64> {
    order_id::int_arg(obj)?.map_err(|huge| PyValueError::new_err(count_message(name, &huge)))
}

#[pyfunction(name = "xxh3_64")]
fn py_xxh3_64(data: &[u8]) -> u64 {
    xxh3_64(data)
}

#[pyfunction(name = "shard_of")]
fn py_shard_of(
    order_id: &Bound<'_, PyString>,
    n_db: &Bound<'_, PyAny>,
    n_tables: &Bound<'_, PyAny>,
) -> PyResult<(u32, u32, u8)> {
    let n_db = count_arg(n_db, "n_db")?;
    let n_tables = count_arg(n_tables, "n_tables")?;
    let shard = order_id::with_id_str(order_id, |s| Ok(shard_of(s, n_db, n_tables)))??;
    let shard = shard?;
    Ok((shard.db, shard.table, shard.day))
}

#[pyfunction(name = "node_of")]
fn py_node_of(key: &str, n_nodes: &Bound<'_, PyAny>) -> PyResult<u32> {
    Ok(node_of(key.as_bytes(), count_arg(n_nodes, "n_nodes")?)?)
}

#[pyfunction(name = "online_shard")]
fn py_online_shard(user_id: &str) -> u8 {
    online_shard(user_id.as_bytes())
}

pub fn init_pymodule(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(py_xxh3_64, m)?)?;
    m.add_function(wrap_pyfunction!(py_shard_of, m)?)?;
    m.add_function(wrap_pyfunction!(py_node_of, m)?)?;
    m.add_function(wrap_pyfunction!(py_online_shard, m)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    #[test]
    fn xxh3_golden() {
        // Same values from the C xxHash library (python `xxhash` 4.1.0, XXH3_64bits, seed 0).
        let buf: Vec<u8> = (0..2048u32).map(|i| ((i * 7 + 3) % 256) as u8).collect();
        let golden: [(usize, u64); 14] = [
            (0, 0x2d06800538d394c2),
            (1, 0x13e608bc156defed),
            (3, 0xa9088dda485b481c),
            (4, 0x6d9253b16c8b1ed3),
            (8, 0x60539db630471163),
            (9, 0xfeff668361d723a8),
            (16, 0xb8c859b0f030b585),
            (17, 0x714a04408e79b80f),
            (128, 0x67425a03650261bf),
            (129, 0xc664bf3311c6abc4),
            (240, 0x64556dc6b462a6cf),
            (241, 0x8beadd3a8874fe17),
            (1024, 0x9b81661c641c72b1),
            (2048, 0xabe604813ba62ed1),
        ];
        for (n, h) in golden {
            assert_eq!(xxh3_64(&buf[..n]), h, "length {n}");
        }
    }

    #[test]
    fn routing_golden() {
        let shards = [
            ("12402290000000000421", (0, 4, 29), (0, 21, 29)),
            ("29912311999999999997", (1, 2, 31), (9, 14, 31)),
            ("10001010000000000004", (2, 5, 1), (6, 1, 1)),
            ("22508150001234567899", (3, 3, 15), (15, 28, 15)),
        ];
        for (id, (d4, t8, day), (d16, t32, _)) in shards {
            assert_eq!(shard_of(id, 4, 8).unwrap(), Shard { db: d4, table: t8, day });
            assert_eq!(
                shard_of(id, 16, 32).unwrap(),
                Shard {
                    db: d16,
                    table: t32,
                    day
                }
            );
        }
        let nodes: [(&str, [u32; 6], u8); 4] = [
            ("", [0, 0, 0, 0, 52, 241], 2),
            ("user:1", [0, 1, 1, 1, 69, 198], 1),
            ("红包", [0, 1, 2, 6, 94, 743], 7),
            ("order:12402290000000000421", [0, 0, 0, 8, 8, 680], 9),
        ];
        for (key, expected, shard) in nodes {
            let got: Vec<u32> = [1, 2, 3, 10, 100, 1000]
                .iter()
                .map(|&n| node_of(key.as_bytes(), n).unwrap())
                .collect();
            assert_eq!(got, expected, "{key}");
            assert_eq!(online_shard(key.as_bytes()), shard, "{key}");
        }
    }

    #[test]
    fn jump_hash_golden_vectors_from_clickhouse() {
        // ClickHouse tests/queries/0_stateless/00580_consistent_hashing_functions.{sql,reference}
        assert_eq!(jump_hash(1, nz(1)), 0);
        assert_eq!(jump_hash(42, nz(57)), 43);
        assert_eq!(jump_hash(256, nz(1024)), 520);
        assert_eq!(jump_hash(3_735_883_980, nz(1)), 0);
        assert_eq!(jump_hash(3_735_883_980, nz(666)), 361);
        assert_eq!(jump_hash(16_045_690_984_833_335_023, nz(255)), 237);
    }

    #[test]
    fn counts_are_validated() {
        let id = "12402290000000000421";
        assert_eq!(shard_of(id, 0, 2), Err(RoutingError::Count { name: "n_db", value: 0 }));
        assert_eq!(
            shard_of(id, 2, -1),
            Err(RoutingError::Count {
                name: "n_tables",
                value: -1
            })
        );
        assert_eq!(
            node_of(b"k", COUNT_LIMIT),
            Err(RoutingError::Count {
                name: "n_nodes",
                value: COUNT_LIMIT
            })
        );
        assert!(node_of(b"k", COUNT_LIMIT - 1).is_ok());
        assert_eq!(
            shard_of("12402290000000000423", 2, 2),
            Err(RoutingError::OrderId(OrderIdError::CheckDigit {
                expected: 1,
                found: 3
            }))
        );
    }

    #[test]
    fn shard_of_uses_the_id_hash_and_day() {
        let id = "12402290000000000421";
        let h = xxh3_64(id.as_bytes());
        let s = shard_of(id, 4, 8).unwrap();
        assert_eq!(
            s,
            Shard {
                db: (h % 4) as u32,
                table: (h / 4 % 8) as u32,
                day: 29
            }
        );
        assert_eq!(
            shard_of(id, 1, 1).unwrap(),
            Shard {
                db: 0,
                table: 0,
                day: 29
            }
        );
    }

    proptest! {
        #[test]
        fn jump_hash_in_range_and_monotone(key in any::<u64>(), n in 1u32..10_000) {
            let a = jump_hash(key, nz(n));
            let b = jump_hash(key, nz(n + 1));
            prop_assert!(a < n);
            prop_assert!(b == a || b == n);
        }

        #[test]
        fn online_shard_in_range(user in any::<Vec<u8>>()) {
            prop_assert!(u64::from(online_shard(&user)) < ONLINE_SHARDS);
        }
    }
}
