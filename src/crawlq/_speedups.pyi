"""Types of the optional C extension (src/crawlq/_speedups.c)."""

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

def blake2b_128(data: bytes) -> bytes:
    """``hashlib.blake2b(data, digest_size=16).digest()``."""

class FastAdd:
    """Frontier.add's plain case: canonical URL, host key, fingerprint, payload."""

    def __init__(self, request_type: type, no_meta: Mapping[str, Any],
                 schemes: Iterable[str], drop_params: Sequence[str],
                 drop_prefixes: Sequence[str], max_length: int, priority_max: int) -> None: ...
    def prepare(self, requests: Sequence[Any], start: int, end: int,
                revisit_at: float | None, slow: Callable[[int, Any], Any],
                entries: list[Any], index: list[int]) -> None: ...
    def canonical(self, url: str) -> tuple[str, str] | None: ...

class LeaseMaker:
    """Frontier.next's Lease objects from a store's rows."""

    def __init__(self, request_type: type, lease_type: type, no_meta: Mapping[str, Any],
                 from_payload: Callable[..., Any]) -> None: ...
    def leases(self, rows: list[Any], now: float) -> list[Any]: ...

class FingerprintSet:
    """A set of 16-byte fingerprints (other keys in an ordinary set beside)."""

    def __contains__(self, key: object) -> bool: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[bytes]: ...
    def add(self, key: bytes) -> None: ...
