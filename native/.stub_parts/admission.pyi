from typing import final

@final
class AdmissionTable:
    """Per-key admission counters shared by every process of one host (DESIGN.md sections 6 and 8:
    "at most K transactions on one packet in the DB at once", across all workers).

    The table lives in the POSIX shared-memory file `/dev/shm/hongbao-<name>` (Linux). Each slot
    holds (xxh3-64 of the key's UTF-8, pid, count): counts are attributed to the process that took
    them, so the master can `reclaim` a dead worker's. The slots form an open-addressing table with
    linear probing and backward-shift deletion (D. E. Knuth, TAOCP vol. 3, section 6.4, Algorithm
    R): a key whose count returns to 0 frees its slot, with no tombstones, so enter/leave churn over
    any number of keys never fills the table. All operations take one spinlock word in the segment
    holding the owner's pid; critical sections are a few loads and stores. A waiter that keeps
    seeing the same owner checks `kill(owner, 0)`; if that process is gone (ESRCH) it takes the lock
    over and rebuilds the table into a spare array, so a worker killed mid-operation neither wedges
    nor corrupts it.

    Requirements: every user in one pid namespace (containers sharing /dev/shm must share pids too).
    Two different keys with equal 64-bit hashes would share one count (odds 2**-64 per pair).

    Not constructible directly: use `create` (the master, before forking workers) or `attach`."""

    @staticmethod
    def create(name: str, capacity: int) -> AdmissionTable:
        """Create the segment `/dev/shm/hongbao-<name>` with room for `capacity` live (key, pid)
        slots (the table itself has the power of two >= 2 * capacity slots, twice: 64 to 128 bytes
        per unit of capacity, reserved up front), replacing any existing segment of that name atomically (rename):
        processes still attached to the old one keep it, so create before starting workers.

        Raises ValueError if `name` is not 1 to 100 characters of [A-Za-z0-9_.-] or `capacity`
        is not in [1, 2**20]; OSError (e.g. ENOSPC when /dev/shm is full, PermissionError)."""

    @staticmethod
    def attach(name: str) -> AdmissionTable:
        """Map the existing segment `/dev/shm/hongbao-<name>`.

        Raises FileNotFoundError if it does not exist, ValueError if `name` is invalid or the file
        is not an admission table of this version (magic, version, size), other OSError on I/O."""

    def unlink(self) -> None:
        """Remove the name `/dev/shm/hongbao-<name>`; mappings stay valid until every attached
        object is gone. Raises FileNotFoundError if the name is already gone."""

    @property
    def name(self) -> str:
        """The segment name given to `create` / `attach` (without the `hongbao-` prefix)."""

    @property
    def capacity(self) -> int:
        """Maximum number of live (key, pid) slots; one more raises `AdmissionTableFull`."""

    def try_enter(self, key: str, limit: int) -> bool:
        """Enter `key` if fewer than `limit` are inside it across every process: returns True and
        counts one for this process, or returns False and changes nothing. `limit` 0 never admits.

        Raises AdmissionTableFull if the key needs a new slot (this process holds none for it)
        and all `capacity` slots are live (the table is unchanged and keeps working); ValueError
        if `limit` is not in [0, 2**32 - 1] or `key` holds lone surrogates; TypeError for a
        non-str key."""

    def leave(self, key: str) -> None:
        """Give back one admission to `key` held by this process; at 0 the slot is freed.

        Raises ValueError if this process holds none for `key` (a count never goes negative)."""

    def in_flight(self, key: str) -> int:
        """How many are inside `key` now, summed over every process."""

    def reclaim(self, pid: int) -> int:
        """Drop every count held by process `pid` (call it for a worker that died, after reaping
        it) and return how many counts were dropped (0 if it held none).

        Raises ValueError if `pid` is not in [1, 2**31 - 1]."""

    def __len__(self) -> int:
        """Live (key, pid) slots, i.e. distinct (key, process) pairs with a count > 0."""

@final
class RateLimiter:
    """A token bucket shared by every process of one host: `burst` tokens, refilled at
    `rate_per_second` (DESIGN.md section 10: "DB check behind a rate limiter"; push case P-11:
    connection admission with 503 + Retry-After).

    Kept in `/dev/shm/hongbao-rl-<name>` as the generic cell rate algorithm (GCRA, ITU-T I.371;
    equivalent to a token bucket): one 64-bit "theoretical arrival time" updated by compare-and-
    swap, so it is lock-free and a process killed mid-call cannot wedge it. Time is CLOCK_MONOTONIC
    (system-wide, so every process agrees) in 1/16 ns ticks since creation; the emission interval
    is rounded to a tick (relative rate error below 1e-6 for rates up to 1e4 per second).

    Requirements: every user in one time namespace. Not constructible directly: use `create` or
    `attach`."""

    @staticmethod
    def create(name: str, rate_per_second: float, burst: int) -> RateLimiter:
        """Create `/dev/shm/hongbao-rl-<name>` holding a full bucket, replacing any existing one
        atomically (as `AdmissionTable.create`).

        Raises ValueError if `name` is invalid, `rate_per_second` is not in (0, 1e9] (tokens per
        second), `burst` is not in [1, 2**32], or burst / rate_per_second exceeds about 9 years;
        OSError on I/O."""

    @staticmethod
    def attach(name: str) -> RateLimiter:
        """Map the existing `/dev/shm/hongbao-rl-<name>`. Raises FileNotFoundError if missing,
        ValueError if the name is invalid or the file is not a rate limiter of this version."""

    def unlink(self) -> None:
        """Remove the name; mappings stay valid. Raises FileNotFoundError if already gone."""

    @property
    def name(self) -> str:
        """The segment name (without the `hongbao-rl-` prefix)."""

    @property
    def rate_per_second(self) -> float:
        """Refill rate, tokens per second."""

    @property
    def burst(self) -> int:
        """Bucket size in tokens: the most that can be taken at once after a quiet period."""

    def try_acquire(self, n: int = 1) -> bool:
        """Take `n` tokens if all are available now (True), else take none (False). `n` = 0 is
        always True; `n` > `burst` is always False. Raises ValueError if `n` < 0."""

    def retry_after(self, n: int = 1) -> float:
        """Seconds until `n` tokens will be available (0.0 if they are now; `math.inf` if
        `n` > `burst`), for a Retry-After header (round up). Raises ValueError if `n` < 0."""
