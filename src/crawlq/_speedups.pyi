"""Types of the optional C extension (src/crawlq/_speedups.c)."""

from collections.abc import Iterator

def blake2b_128(data: bytes) -> bytes:
    """``hashlib.blake2b(data, digest_size=16).digest()``."""

class FingerprintSet:
    """A set of 16-byte fingerprints (other keys in an ordinary set beside)."""

    def __contains__(self, key: object) -> bool: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[bytes]: ...
    def add(self, key: bytes) -> None: ...
