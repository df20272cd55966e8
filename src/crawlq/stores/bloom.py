"""A blocked Bloom filter: the seen-set for crawls too big to remember exactly.

Each fingerprint maps to one block of ``BLOCK_BITS`` bits and sets ``k`` bits inside it,
so a batch touches one block per URL: a SQLite store reads and writes only those rows,
a Redis store only those keys. Fingerprints are already uniform hashes, so the bit
positions come straight from their bytes (double hashing), no rehashing needed.
"""

from __future__ import annotations

import math

from ..errors import ConfigError

BLOCK_BITS = 4096
BLOCK_BYTES = BLOCK_BITS // 8


class BloomShape:
    """Sizing for ``capacity`` items at false-positive rate ``error_rate``."""

    def __init__(self, capacity: int, error_rate: float) -> None:
        if capacity < 1:
            raise ConfigError("bloom capacity must be >= 1")
        if not 0 < error_rate < 0.5:
            raise ConfigError("bloom error_rate must be in (0, 0.5)")
        self.capacity = capacity
        self.error_rate = error_rate
        bits = -capacity * math.log(error_rate) / (math.log(2) ** 2)
        # Blocking costs a little accuracy; 10% more bits buys it back at these sizes.
        self.blocks = max(1, math.ceil(bits * 1.1 / BLOCK_BITS))
        self.k = max(1, round(bits / capacity * math.log(2)))

    @property
    def size_bytes(self) -> int:
        """Memory or disk the filter takes."""
        return self.blocks * BLOCK_BYTES

    def locate(self, fp: bytes) -> tuple[int, list[int]]:
        """The block of ``fp`` and its ``k`` bit positions inside that block."""
        if len(fp) < 16:
            fp = fp.ljust(16, b"\0")
        block = int.from_bytes(fp[:8], "big") % self.blocks
        h1 = int.from_bytes(fp[8:12], "big")
        h2 = int.from_bytes(fp[12:16], "big") | 1
        return block, [(h1 + i * h2) % BLOCK_BITS for i in range(self.k)]


def test_and_set(block: bytearray | memoryview, bits: list[int]) -> bool:
    """Set ``bits`` in ``block``; return True if they were all set already (seen)."""
    seen = True
    for b in bits:
        byte, mask = b >> 3, 1 << (b & 7)
        if not block[byte] & mask:
            seen = False
            block[byte] |= mask
    return seen


class MemoryBloom:
    """The filter in one bytearray (memory store)."""

    def __init__(self, shape: BloomShape) -> None:
        self.shape = shape
        self.bits = bytearray(shape.size_bytes)

    def contains(self, fp: bytes) -> bool:
        """True if ``fp`` was (probably) added before."""
        block, bits = self.shape.locate(fp)
        start = block * BLOCK_BYTES
        data = self.bits
        return all(data[start + (b >> 3)] & (1 << (b & 7)) for b in bits)

    def add(self, fp: bytes) -> bool:
        """Add ``fp``; True if it was (probably) present already."""
        block, bits = self.shape.locate(fp)
        start = block * BLOCK_BYTES
        return test_and_set(memoryview(self.bits)[start:start + BLOCK_BYTES], bits)
