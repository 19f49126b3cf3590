from typing import Final, Self, final

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
