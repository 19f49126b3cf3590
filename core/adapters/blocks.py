"""The DB block allocator of order-id sequence numbers (DESIGN.md section 4, source 1), shared by
the embedded and the MySQL backends: each worker takes a block of ``SEQUENCE_BLOCK`` numbers
per region and day in one transaction, then hands them out from memory.
"""

from __future__ import annotations

SEQUENCE_BLOCK = 1000
DB_SOURCE = 1  # DESIGN.md section 4: source 1 = the DB's block allocator


class BlockSequence:
    """A SequenceSource over blocks; subclasses implement ``take_block``."""

    __slots__ = ("_blocks",)

    def __init__(self) -> None:
        self._blocks: dict[tuple[int, int], tuple[int, int]] = {}

    async def take_block(self, region: int, yymmdd: int) -> int:
        """Advance the stored counter of (region, day) by SEQUENCE_BLOCK, atomically, and return
        its new value: the block is [value - SEQUENCE_BLOCK, value)."""
        raise NotImplementedError

    async def next(self, region: int, yymmdd: int) -> tuple[int, int]:
        """The next (1, sequence) for the region and day; never repeats across workers or restarts."""
        key = (region, yymmdd)
        start, end = self._blocks.get(key, (0, 0))
        if start >= end:
            end = await self.take_block(region, yymmdd)
            start = end - SEQUENCE_BLOCK
        self._blocks[key] = (start + 1, end)
        return DB_SOURCE, start
