def xxh3_64(data: bytes) -> int:
    """XXH3 64-bit hash of `data` with seed 0 (xxHash by Yann Collet, XXH3_64bits, spec
    https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md), as an int in [0, 2**64).

    The routing hash of hongbao: identical on every process, machine and version (no randomized
    seed), so Redis adapters and other services may use it to route as this module does.
    `data` must be `bytes` (TypeError otherwise)."""

def shard_of(order_id: str, n_db: int, n_tables: int) -> tuple[int, int, int]:
    """Storage shard of an order id as `(db, table, day)` (DESIGN.md section 4).

    With h = `xxh3_64` of the id's 20 ASCII bytes: db = h mod n_db, table = (h div n_db) mod
    n_tables, day = the id's day of month (1..31), naming `db_{db:02}.t_packet_{table:02}_{day}`.
    Stable across processes, machines and versions.

    Raises ValueError if `n_db` or `n_tables` is not in [1, 2**31) (checked first), or if
    `order_id` is not a valid id (the same messages as `decode_order_id`); TypeError if
    `order_id` is not a str."""

def node_of(key: str, n_nodes: int) -> int:
    """Node in [0, n_nodes) owning `key`: jump consistent hash (J. Lamping and E. Veach, "A Fast,
    Minimal Memory, Consistent Hash Algorithm", 2014, arXiv:1406.2294) of `xxh3_64` of the key's
    UTF-8 bytes.

    Consistent: growing from n to n + 1 nodes moves about 1/(n + 1) of the keys, all of them to
    the new node n. Raises ValueError if `n_nodes` is not in [1, 2**31) or `key` holds lone
    surrogates (UnicodeEncodeError); TypeError if `key` is not a str."""

def online_shard(user_id: str) -> int:
    """Online-presence shard of a user, in [0, 16): `xxh3_64` of the user id's UTF-8 bytes mod 16.
    Raises TypeError if `user_id` is not a str, ValueError (UnicodeEncodeError) on lone
    surrogates."""
