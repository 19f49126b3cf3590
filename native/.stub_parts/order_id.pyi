from typing import final

@final
class OrderIdParts:
    """The fields of a decoded order id (see `decode_order_id`); immutable, hashable, compares by value.

    Not constructible from Python: obtain one from `decode_order_id`."""

    @property
    def region(self) -> int:
        """1 = north, 2 = south (DESIGN.md section 9: requests are served by this region)."""

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
    (DESIGN.md section 4), e.g. `encode_order_id(1, 240229, 0, 42) == "12402290000000000421"`.

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
