"""hongbao_native: the hot paths of hongbao, in Rust (PyO3, built by maturin).

Each section below mirrors one file of native/src: the lucky split (docs/architecture.md section 3), the
order-id codec (section 4), routing hashes (section 4), shared-memory admission counters and a
token bucket (sections 6 and 8), RFC 6455 WebSocket framing, and HTTP/1.1 parsing and encoding.
Money is always integer fen; every function raises the documented error, never panics.
"""

from collections.abc import Iterable
from typing import Final, Literal, Self, final

__version__: str
"""The version of the native crate (Cargo.toml)."""
build_profile: str
"""Either "release" or "debug": benchmarks refuse to run on a debug build."""
__all__ = [
    "OP_BINARY",
    "OP_CLOSE",
    "OP_CONT",
    "OP_PING",
    "OP_PONG",
    "OP_TEXT",
    "AdmissionTable",
    "AdmissionTableFull",
    "Frame",
    "FrameDecoder",
    "HttpParseError",
    "OrderIdParts",
    "ProtocolError",
    "RateLimiter",
    "Request",
    "RequestParser",
    "Splitter",
    "__version__",
    "accept_key",
    "build_profile",
    "decode_order_id",
    "encode_close",
    "encode_frame",
    "encode_order_id",
    "encode_response",
    "is_valid_order_id",
    "node_of",
    "online_shard",
    "shard_of",
    "split_equal",
    "split_lucky",
    "xxh3_64",
]

# --- errors.rs ------------------------------------------------------------------------------------

class ProtocolError(ValueError):
    """A WebSocket protocol violation found by `FrameDecoder.feed` (RFC 6455 section 7.4.1).

    `close_code` is the close code to fail the connection with: 1002 protocol error,
    1007 invalid UTF-8 in a text message or close reason, 1009 message or frame too big."""

    close_code: int

class HttpParseError(ValueError):
    """A malformed or oversized HTTP request found by `RequestParser.feed`.

    `status` is the HTTP status to answer with before closing the connection: 400, 413
    (content over the limit), 431 (header section over the limits), 501 (unknown transfer
    coding) or 505 (HTTP version)."""

    status: int

class AdmissionTableFull(ValueError):
    """`AdmissionTable.try_enter` needed a new slot and the shared table has none free
    (its capacity in live (key, pid) pairs is reached); the table is unchanged."""

# --- split/ ----------------------------------------------------------------------------------------

def split_lucky(remaining_fen: int, remaining_count: int) -> int:
    """One lucky share, in fen, of `remaining_fen` fen still in a packet with `remaining_count`
    shares still unopened; computed at open time, never pre-allocated.

    The rule is docs/architecture.md section 3's double-average rule made exact in integer fen: "With `m` fen
    and `n` shares left: if n == 1 the share is m. Otherwise every share first gets its 1 fen; of the
    free fen F = m - n, draw an upper bound U = floor(2F/n), plus one with probability
    (2F mod n)/n; draw x uniformly from {0..U}; the share is 1 + x. Then E[x] = F/n exactly, the
    remaining average is a martingale, and every position's expected share is exactly m/n."
    No clamp is needed (x <= F always), so the caller can always pay the rest at least 1 fen each.

    Randomness: a ChaCha20 generator per OS thread (the stream of `Splitter` below), keyed with 32
    bytes from the OS (getrandom) on first use, rekeyed from the OS every 65 536 u64 draws, and
    rekeyed in any child after fork() (a pthread_atfork child handler bumps a generation counter),
    so a forked worker never replays its master's stream. Draw order and integer rule are those of
    `Splitter` below.

    Raises ValueError naming the reason: `remaining_count` < 1, `remaining_fen` negative,
    `remaining_fen` < `remaining_count` (every share is at least 1 fen), or either argument outside
    the int64 range. Raises TypeError for non-ints (floats never enter a money path) and OSError if
    the OS refuses random bytes."""

def split_equal(total_fen: int, count: int) -> int:
    """The per-share amount, in fen, of an equal packet of `total_fen` fen over `count` shares.

    docs/architecture.md section 3: "the sender gives the per-share amount; total = per_share x count, so
    there is no remainder to lose (`split_equal(total, count)` only validates: it raises on any
    remainder)". Equal packets never round.

    Raises ValueError naming the reason: `count` < 1, `total_fen` negative, `total_fen` < `count`
    (a share would be 0 fen), `total_fen` not a multiple of `count`, or either argument outside the
    int64 range. Raises TypeError for non-ints."""

@final
class Splitter:
    """A lucky-split generator: the OS-seeded CSPRNG (`seed=None`), or a deterministic ChaCha20
    stream for tests and replays (an int seed).

    `Splitter(seed)` with 0 <= seed < 2**64 is ChaCha20 (RFC 8439 section 2.3 block function, 20
    rounds) keyed by the seed's 8 little-endian bytes followed by 24 zero bytes, 64-bit block
    counter from 0, stream (nonce) 0: the stream of rand_chacha's ChaCha20Rng (native/src/chacha.rs
    makes it, and its tests compare the two). A u64 draw is the next 8 keystream bytes read
    little-endian, as rand_core's `next_u64`. An integer uniform on [0, k) is our own rejection rule
    (docs/architecture.md section 3): draw a u64 v, reject while v >= 2**64 - (2**64 mod k), return v mod k;
    k == 1 takes no draw. So seeded outputs never change with a crate upgrade, and golden vectors stay valid:
    `Splitter(0).split_all(100, 10) == [4, 21, 5, 18, 4, 15, 4, 8, 14, 7]` and
    `Splitter(42).split_all(100, 10) == [11, 5, 13, 2, 15, 19, 2, 9, 13, 11]`.

    Draw order for one share of m fen over n shares (n >= 2): F = m - n, q = floor(2F/n),
    r = 2F mod n; if r > 0, the coin: draw c in [0, n) and set U = q + 1 if c < r, else U = q (no
    draw when r == 0); then, if U > 0, draw x in [0, U + 1) (no draw when U == 0). The share is
    1 + x. n == 1 returns m and draws nothing. A seeded Splitter is one stream: `next` and
    `split_all` calls continue it in call order; a copy made by fork() continues the same stream
    in both processes (it is a replay tool, never for real money).

    `Splitter()` / `Splitter(None)` holds no stream of its own: it draws from the same per-thread,
    fork-safe OS-seeded generator as `split_lucky`.

    Safe to share between threads: a seeded Splitter serialises calls on an internal lock, each
    `next` or `split_all` taking its draws as one block.

    Raises ValueError if `seed` is an int outside [0, 2**64); TypeError if it is not an int."""

    def __new__(cls, seed: int | None = None) -> Splitter: ...
    def next(self, remaining_fen: int, remaining_count: int) -> int:
        """One lucky share in fen, by the rule and draw order above; the arguments and errors are
        those of `split_lucky`."""

    def split_all(self, total_fen: int, count: int) -> list[int]:
        """All `count` shares, in fen and in opening order, of a lucky packet of `total_fen` fen:
        exactly `count` ints, each >= 1, summing to `total_fen`; share i is drawn with
        `next(total_fen - sum(shares[:i]), count - i)`.

        Raises ValueError naming the reason: `count` < 1, `total_fen` negative, `total_fen` <
        `count`, either argument outside the int64 range, or `count` > 1 000 000 (the list is built
        in memory; docs/architecture.md caps packets at 100 shares). TypeError for non-ints."""

# --- order_id.rs ----------------------------------------------------------------------------------

@final
class OrderIdParts:
    """The fields of a decoded order id (see `decode_order_id`); immutable, hashable, compares by value.

    Not constructible from Python: obtain one from `decode_order_id`."""

    @property
    def region(self) -> int:
        """1 = north, 2 = south (docs/architecture.md section 9: requests are served by this region)."""

    @property
    def yymmdd(self) -> int:
        """The sender's business day as an int 0..991231 (year 2000 + yy), e.g. 240229; the id
        renders it zero-padded to 6 digits."""

    @property
    def day(self) -> int:
        """Day of month, 1..31 (`yymmdd % 100`): picks the day table of the shard."""

    @property
    def source(self) -> int:
        """0 = Redis INCR on `seq:{region}:{yymmdd}`, 1 = the database's block allocator; the two
        sequence spaces never collide because this digit differs."""

    @property
    def sequence(self) -> int:
        """The sequence number, 0 <= sequence < 10**11."""

    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

def encode_order_id(region: int, yymmdd: int, source: int, sequence: int) -> str:
    """Render an order id: 20 ASCII digits `region(1) yymmdd(6) source(1) sequence(11) check(1)`
    (docs/architecture.md section 4), e.g. `encode_order_id(1, 240229, 0, 42) == "12402290000000000421"`.

    The check digit is Damm's algorithm (H. Michael Damm, "Total anti-symmetrische Quasigruppen",
    2004; the standard order-10 weakly totally anti-symmetric quasigroup) over the first 19
    digits: it detects every single-digit error and every transposition of adjacent digits.

    Raises ValueError naming the first invalid field, checked in argument order:
    `region` not 1 (north) or 2 (south); `yymmdd` not a calendar date of year 2000 + yy
    (Gregorian, leap years included: 000229 and 240229 are valid, 230229 is not); `source` not 0
    (Redis INCR) or 1 (DB block allocator); `sequence` not in [0, 10**11). Ints of any size are
    accepted and range-checked (ValueError, never OverflowError); non-ints raise TypeError."""

def decode_order_id(s: str) -> OrderIdParts:
    """Parse and validate an order id produced by `encode_order_id`.

    Raises ValueError whose message starts with `order id <field>:`, checking in this order:
    `length` (not 20 characters), `digits` (a character that is not an ASCII digit 0-9; other
    Unicode digits and lone surrogates are rejected), `check digit` (Damm check failed: a typo or
    a swap), then `region`, `date`, `source` as in `encode_order_id`. Raises TypeError if `s` is
    not a str. Never panics, whatever the input."""

def is_valid_order_id(s: object) -> bool:
    """True exactly when `decode_order_id(s)` would succeed; False for any other input, including
    non-str objects. Never raises: the fast filter that rejects garbage ids before any cache or
    database access."""

# --- routing.rs -----------------------------------------------------------------------------------

def xxh3_64(data: bytes) -> int:
    """XXH3 64-bit hash of `data` with seed 0 (xxHash by Yann Collet, XXH3_64bits, spec
    https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md), as an int in [0, 2**64).

    The routing hash of hongbao: identical on every process, machine and version (no randomized
    seed), so Redis adapters and other services may use it to route as this module does.
    `data` must be `bytes` (TypeError otherwise)."""

def shard_of(order_id: str, n_db: int, n_tables: int) -> tuple[int, int, int]:
    """Storage shard of an order id as `(db, table, day)` (docs/architecture.md section 4).

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

# --- admission.rs ---------------------------------------------------------------------------------

@final
class AdmissionTable:
    """Per-key admission counters shared by every process of one host (docs/architecture.md sections 6 and 8:
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
    `rate_per_second` (docs/architecture.md section 10: "DB check behind a rate limiter"; push case P-11:
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

# --- ws_frame.rs ----------------------------------------------------------------------------------

# --- WebSocket framing, RFC 6455 (native/src/ws_frame.rs) ------------------------------------

OP_CONT: Final = 0
"""Continuation frame opcode (RFC 6455 section 5.2, 11.8)."""
OP_TEXT: Final = 1
"""Text frame opcode: the message is UTF-8 (RFC 6455 section 5.6)."""
OP_BINARY: Final = 2
"""Binary frame opcode (RFC 6455 section 5.6)."""
OP_CLOSE: Final = 8
"""Close control frame opcode (RFC 6455 section 5.5.1)."""
OP_PING: Final = 9
"""Ping control frame opcode (RFC 6455 section 5.5.2)."""
OP_PONG: Final = 10
"""Pong control frame opcode (RFC 6455 section 5.5.3)."""

def accept_key(sec_websocket_key: str) -> str:
    """The `Sec-WebSocket-Accept` value for a client's `Sec-WebSocket-Key` header.

    RFC 6455 section 4.2.2 (step 5.4 of the server's handshake) and section 1.3:
    base64(SHA-1(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11")), a 28-character string.
    `accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="`.

    Raises ValueError unless the key is canonical, padded base64 (RFC 4648 section 4) of exactly
    16 bytes (section 4.1: "a randomly selected 16-byte value that has been base64-encoded"), i.e.
    24 characters ending in "=="; surrounding whitespace is not stripped (the HTTP parser trims
    optional whitespace around header values).
    """

def encode_frame(
    opcode: int,
    payload: bytes | bytearray | memoryview,
    *,
    fin: bool = True,
    mask_key: bytes | None = None,
    rsv1: bool = False,
) -> bytes:
    """One WebSocket frame: header then payload, RFC 6455 section 5.2.

    The payload length uses the minimal encoding (7-bit up to 125 bytes, 16-bit up to 65535,
    64-bit above). With `mask_key` (exactly 4 bytes, which a client must draw fresh from a strong
    source for every frame, section 5.3) the MASK bit is set, the key follows the length and the
    payload is XORed with it (section 5.3); without it the frame is unmasked, as a server sends.
    `fin=False` makes a fragment (section 5.4: the first fragment carries OP_TEXT or OP_BINARY,
    the rest OP_CONT). `rsv1` marks a compressed message start (RFC 7692 section 6) and is only
    accepted with OP_TEXT or OP_BINARY. The payload is not UTF-8 checked (a fragment may end
    inside a code point). Any bytes-like object is accepted; `bytes` is read without a copy.

    Raises ValueError for an opcode other than 0, 1, 2, 8, 9, 10 (section 5.2, 11.8); for a
    control frame (8, 9, 10) with a payload above 125 bytes or fin=False (section 5.5); for rsv1
    on a control or continuation frame; for a mask_key that is not 4 bytes.
    """

def encode_close(code: int, reason: str = "", *, mask_key: bytes | None = None) -> bytes:
    """A close frame (RFC 6455 section 5.5.1): a 2-byte big-endian status code, then the reason
    as UTF-8; unmasked (server side) unless `mask_key` (4 bytes) is given.

    Raises ValueError for a code that may not be sent (allowed: 1000-1003, 1007-1014 from
    section 7.4.1 and the IANA registry of section 11.7, and 3000-4999 from section 7.4.2; 1004,
    1005, 1006 and 1015 are reserved and never sent) and for a reason above 123 UTF-8 bytes (the
    control frame limit of 125 bytes minus the code).
    """

@final
class Frame:
    """A decoded message or control frame, as `FrameDecoder.feed` delivers it.

    Data messages arrive whole: the payloads of all fragments joined, with the opcode of the
    first fragment (OP_TEXT or OP_BINARY, never OP_CONT). Control frames (OP_PING, OP_PONG,
    OP_CLOSE) arrive on their own, even between the fragments of a message (RFC 6455 section 5.4).
    """

    @property
    def opcode(self) -> int:
        """OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING or OP_PONG."""
    @property
    def payload(self) -> bytes:
        """The unmasked payload; for OP_TEXT valid UTF-8; for OP_CLOSE the code and reason bytes."""
    @property
    def close_code(self) -> int | None:
        """OP_CLOSE only: the status code (already checked valid, RFC 6455 section 7.4); None for
        an empty close payload (which section 7.1.5 reads as 1005, "no status received") and for
        every other opcode."""
    @property
    def close_reason(self) -> str:
        """OP_CLOSE only: the reason (validated UTF-8, section 5.5.1); "" otherwise."""
    @property
    def text(self) -> str:
        """The payload of an OP_TEXT message as str. Raises ValueError for any other opcode."""

@final
class FrameDecoder:
    """Incremental RFC 6455 frame decoder for one connection's receive direction.

    `max_frame_size` and `max_message_size` are in bytes of payload (header bytes are not
    counted): a frame whose header claims more than `max_frame_size`, or a data message whose
    fragments' claimed lengths add up to more than `max_message_size`, fails with 1009 as soon as
    that header is read, before any of its payload arrives and without allocating it. Memory is
    bounded by what actually arrived: at most one message, one control frame and 14 header bytes
    are held. `require_mask=True` is the server side (RFC 6455 section 5.1: every client frame is
    masked); with False both masked and unmasked frames are accepted (for a client, or tests).
    Negative limits raise OverflowError.

    Not thread-safe by design: one decoder per connection; a concurrent or re-entrant `feed` raises
    RuntimeError rather than blocking.
    """

    def __new__(cls, max_frame_size: int, max_message_size: int, require_mask: bool = True) -> Self: ...
    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Consume the next bytes received (any amount, split anywhere) and return, in stream
        order, every data message completed and every control frame completed by them (possibly
        none). The decoder unmasks (section 5.3) and reassembles fragments (section 5.4).

        Raises ProtocolError (a ValueError) whose `close_code` attribute is the code to fail the
        connection with (section 7.1.7; send a close frame with it, then drop the connection):

        - 1002 (protocol error): RSV1-3 set (no extension is negotiated, section 5.2); a reserved
          opcode 3-7 or 11-15 (section 5.2); a control frame with FIN=0 or a payload length above
          125 (section 5.5); an unmasked frame when `require_mask` (section 5.1); a continuation
          with no message open, or a new text/binary frame while one is open (section 5.4); a
          length not in its minimal encoding, or a 64-bit length with its top bit set (section
          5.2); a close payload of 1 byte, or a close code outside 1000-1003, 1007-1014,
          3000-4999 (sections 5.5.1, 7.4).
        - 1007 (invalid payload data): a text message, or a close reason, that is not UTF-8
          (sections 5.6, 8.1). Checked incrementally across fragments and partial frames: a code
          point may be split anywhere, and the error is raised as soon as the first byte that
          cannot continue a valid sequence arrives (including surrogates, overlongs and code
          points above U+10FFFF, RFC 3629 section 4); a message that ends inside a code point
          fails at its last byte.
        - 1009 (message too big): see the class docstring.

        Every check runs as soon as the bytes it needs are there, in stream order, so the first
        violation (and its close code) does not depend on how the bytes were chunked. Frames
        completed earlier in the same call that raises are discarded with it. After an error the
        decoder stays failed: every later call raises a ProtocolError with the same code.
        The frames after a close frame are still decoded; stopping is the connection's job.
        """
    @property
    def max_frame_size(self) -> int:
        """Largest accepted frame payload, in bytes."""
    @property
    def max_message_size(self) -> int:
        """Largest accepted message (sum of its fragments' payloads), in bytes."""
    @property
    def require_mask(self) -> bool:
        """True when unmasked frames are refused (server side)."""
    @property
    def failed(self) -> bool:
        """True once `feed` has raised ProtocolError."""

# --- http.rs --------------------------------------------------------------------------------------

@final
class Request:
    """One complete HTTP/1.0 or HTTP/1.1 request, as returned by `RequestParser.feed`.

    Immutable. The request line and header section are parsed by the `httparse` crate
    (RFC 9112 sections 3 and 5); framing follows RFC 9112 section 6.3."""

    @property
    def method(self) -> str:
        """The method token, case preserved (`"GET"`, `"POST"`, ...; RFC 9110 section 9)."""
    @property
    def target(self) -> str:
        """The raw request-target (RFC 9112 section 3.2), ASCII, e.g. `"/v1/packets/7/open?x=1"`."""
    @property
    def path(self) -> str:
        """The path of the target: an origin-form target before its first `'?'`; for an
        absolute-form target (`http://host/p?q`) its path (`"/p"`, or `"/"` when it has none);
        authority-form and `"*"` as given. Not percent-decoded."""
    @property
    def query(self) -> str:
        """The part of the target after its first `'?'`, `""` if none. Not percent-decoded."""
    @property
    def version(self) -> Literal["1.0", "1.1"]:
        """The HTTP version of the request line."""
    @property
    def headers(self) -> list[tuple[str, str]]:
        """The header fields in arrival order as (name, value): names lower-cased, values
        decoded as ISO-8859-1 (RFC 9110 section 5.5) with surrounding whitespace removed.
        Repeated fields stay separate. A new list on each access; trailer fields of a
        chunked request are not included."""
    @property
    def body(self) -> bytes:
        """The content: `Content-Length` bytes, or the de-chunked `Transfer-Encoding: chunked`
        content (chunk extensions and trailers dropped); `b""` when the request has neither."""
    @property
    def keep_alive(self) -> bool:
        """Whether the connection may carry another request (RFC 9112 section 9.3): HTTP/1.1
        unless `Connection: close`; HTTP/1.0 only with `Connection: keep-alive` (and no close)."""
    @property
    def websocket(self) -> bool:
        """An HTTP/1.1 request with `Upgrade: websocket` and a `Connection` option `upgrade`
        (RFC 6455 section 4.2.1; tokens compared case-insensitively). Method, `Sec-WebSocket-Key`
        and `Sec-WebSocket-Version` are for the handshake to check. The parser stops after it:
        see `RequestParser.take_buffered`."""
    def header(self, name: str) -> str | None:
        """The value of header field `name` (any case), `None` if absent; a field sent more
        than once gives its values joined with `", "` (RFC 9110 section 5.3)."""
    def __repr__(self) -> str: ...

@final
class RequestParser:
    """Incremental HTTP/1.x request parser for one connection (RFC 9112).

    Feed it the bytes as they arrive; it buffers partial input and returns every request that
    became complete, in order (pipelining). Limits, with the status `HttpParseError.status`
    carries when one is passed:

    - `max_header_size` (bytes): the request line plus header section, including leading
      empty lines, every CRLF and the final empty line, may be exactly this long; one byte
      more is 431. The same limit applies to the trailer section of a chunked request.
    - `max_headers`: at most this many header fields (and trailer fields); one more is 431.
    - `max_body_size` (bytes): the content may be exactly this long; longer is 413, found
      from `Content-Length` before any content is read, or while de-chunking as soon as a
      chunk size would pass it.

    Other errors: 400 for a malformed request line or header field (including obs-fold and
    whitespace before the colon, RFC 9112 section 5.1), a missing or repeated `Host` in
    HTTP/1.1 (RFC 9112 section 3.2), a non-ASCII target, both `Content-Length` and
    `Transfer-Encoding` (request smuggling, RFC 9112 section 6.3), differing or non-numeric
    `Content-Length` values (RFC 9110 section 8.6), `Transfer-Encoding` in HTTP/1.0,
    `chunked` repeated, a bad chunk-size line (no hex digit first, a control character, a
    line over 4096 bytes) or chunk data not followed by CRLF (RFC 9112 section 7.1);
    501 for any transfer coding other than `chunked` (RFC 9112 section 6.1); 505 for a
    well-formed version other than HTTP/1.0 and HTTP/1.1.

    The result never depends on how the input is split across `feed` calls. After an error
    the parser stays failed: every later `feed` raises the same error. Not thread-safe.
    A negative limit raises OverflowError."""

    def __new__(
        cls, max_header_size: int = 8192, max_headers: int = 64, max_body_size: int = 1048576
    ) -> RequestParser: ...
    def feed(self, data: bytes) -> list[Request]:
        """Add `data` and return the requests it completed (possibly none, possibly several).

        After a WebSocket upgrade request (`Request.websocket`) the bytes that follow are not
        HTTP: they are kept for `take_buffered` and `feed` returns `[]` from then on.
        Raises `HttpParseError` (with `.status` 400, 413, 431, 501 or 505) for a bad request
        (answer `status`, then close the connection). When requests completed before the bad
        one in the same call, they are returned and the error is raised by the next call
        (`state` is `"failed"` meanwhile; `feed(b"")` raises it), so pipelined requests ahead of
        a bad one are answered first, whatever the split (RFC 9112 section 9.3.2)."""
    @property
    def pending_bytes(self) -> int:
        """Bytes received that are not part of a returned request yet (buffered raw input plus
        content already de-chunked); 0 after an error."""
    @property
    def state(self) -> Literal["idle", "head", "body", "upgraded", "failed"]:
        """What the parser waits for, to pick a read timeout: `"idle"` between requests with
        nothing buffered (keep-alive timeout), `"head"` within a request head (header timeout),
        `"body"` within the content (body timeout), `"upgraded"` after a WebSocket upgrade
        request, `"failed"` after an error."""
    @property
    def max_header_size(self) -> int:
        """The header section limit in bytes."""
    @property
    def max_headers(self) -> int:
        """The header field count limit."""
    @property
    def max_body_size(self) -> int:
        """The content limit in bytes."""
    def take_continue(self) -> bool:
        """True once for a request whose HTTP/1.1 head carried `Expect: 100-continue` and a
        body, while none of that body has arrived: write `HTTP/1.1 100 Continue\\r\\n\\r\\n`
        then (RFC 9110 section 10.1.1). False otherwise."""
    def take_buffered(self) -> bytes:
        """Remove and return the buffered, unparsed bytes; after a WebSocket upgrade these are
        the first bytes of the WebSocket stream."""

def encode_response(status: int, headers: Iterable[tuple[str, str]], body: bytes) -> bytes:
    """Encode an HTTP/1.1 response: status line, `headers` in order, body.

    The status line is `HTTP/1.1 <status> <reason>` with the reason phrase of RFC 9110
    section 15 (plus 103, 425, 428, 429, 431, 451, 511 from RFCs 8297, 8470, 6585, 7725;
    empty for an unregistered code). Header names are written as given, values encoded as
    ISO-8859-1. `Content-Length: <len(body)>` is appended unless a `Content-Length` or
    `Transfer-Encoding` header is given, and never for 1xx, 204 and 304 (RFC 9110 section
    8.6, RFC 9112 section 6.1).

    `headers` is a list (or any iterable) of 2-tuples of str; anything else raises TypeError.
    Raises ValueError for: `status` outside 100..=599; a header tuple that is not a pair; a header
    name that is empty or not an RFC 9110 token; a header value with CR, LF, NUL or another control
    character except HTAB, or a character beyond U+00FF (response splitting, RFC 9110 section 5.5);
    a body with status 1xx, 204 or 304; `Content-Length` given twice, non-numeric, together with
    `Transfer-Encoding`, in a 1xx or 204 response, or differing from `len(body)` when `body` is not
    empty (an empty body with `Content-Length` is a HEAD response)."""
