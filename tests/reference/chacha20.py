"""Pure-Python ChaCha20 (RFC 8439 section 2.3) and the u64 stream of rand_chacha's ChaCha20Rng.

`chacha20_block` is the block function of RFC 8439 section 2.3 (32-bit counter, 96-bit nonce).
`ChaCha20U64Stream` reproduces `rand_chacha::ChaCha20Rng::from_seed(key)` with stream 0: rand_chacha
puts a 64-bit block counter in words 12-13 and the 64-bit stream id in words 14-15, which for stream 0
and fewer than 2**32 blocks is RFC 8439's layout with a zero nonce. `next_u64` is rand_core's
`BlockRng::next_u64`: two consecutive 32-bit keystream words, low word first, i.e. the next 8
keystream bytes read little-endian. Slow (tens of microseconds a block); for tests only.
"""

import struct

_MASK = 0xFFFFFFFF
_CONSTANTS = (0x61707865, 0x3320646E, 0x79622D32, 0x6B206574)  # "expand 32-byte k"


def _rotl(v: int, c: int) -> int:
    return ((v << c) & _MASK) | (v >> (32 - c))


def _quarter_round(x: list[int], a: int, b: int, c: int, d: int) -> None:
    """RFC 8439 section 2.1, on four words of the state."""
    x[a] = (x[a] + x[b]) & _MASK
    x[d] = _rotl(x[d] ^ x[a], 16)
    x[c] = (x[c] + x[d]) & _MASK
    x[b] = _rotl(x[b] ^ x[c], 12)
    x[a] = (x[a] + x[b]) & _MASK
    x[d] = _rotl(x[d] ^ x[a], 8)
    x[c] = (x[c] + x[d]) & _MASK
    x[b] = _rotl(x[b] ^ x[c], 7)


def chacha20_block(key: bytes, counter: int, nonce: bytes) -> bytes:
    """The 64-byte ChaCha20 block for a 32-byte key, a 32-bit counter and a 12-byte nonce (RFC 8439 2.3)."""
    if len(key) != 32 or len(nonce) != 12 or not 0 <= counter <= _MASK:
        raise ValueError("chacha20_block needs a 32-byte key, a 12-byte nonce and a 32-bit counter")
    state = [*_CONSTANTS, *struct.unpack("<8I", key), counter, *struct.unpack("<3I", nonce)]
    x = list(state)
    for _ in range(10):
        _quarter_round(x, 0, 4, 8, 12)
        _quarter_round(x, 1, 5, 9, 13)
        _quarter_round(x, 2, 6, 10, 14)
        _quarter_round(x, 3, 7, 11, 15)
        _quarter_round(x, 0, 5, 10, 15)
        _quarter_round(x, 1, 6, 11, 12)
        _quarter_round(x, 2, 7, 8, 13)
        _quarter_round(x, 3, 4, 9, 14)
    return struct.pack("<16I", *((a + b) & _MASK for a, b in zip(x, state, strict=True)))


class ChaCha20U64Stream:
    """The u64 words of rand_chacha's ChaCha20Rng keyed by `key`, stream 0, from word position 0."""

    __slots__ = ("_key", "_block", "_words", "_index")

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError("ChaCha20 needs a 32-byte key")
        self._key = key
        self._block = 0
        self._words: tuple[int, ...] = ()
        self._index = 0

    def next_u64(self) -> int:
        """The next 8 keystream bytes as a little-endian unsigned 64-bit integer."""
        if self._index >= len(self._words):
            counter, high = self._block & _MASK, self._block >> 32
            nonce = struct.pack("<3I", high, 0, 0)  # word 13 is the counter's high half in rand_chacha
            self._words = struct.unpack("<8Q", chacha20_block(self._key, counter, nonce))
            self._block += 1
            self._index = 0
        value = self._words[self._index]
        self._index += 1
        return value
