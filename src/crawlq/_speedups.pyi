"""Types of the optional C extension (src/crawlq/_speedups.c)."""

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

def blake2b_128(data: bytes) -> bytes:
    """``hashlib.blake2b(data, digest_size=16).digest()``."""

def admit(entries: Sequence[Any], qids: Mapping[str, int], caps: Mapping[int, int],
          accepted: dict[int, int], batch: set[bytes], known: dict[bytes, float | None],
          fresh: list[tuple[bytes, float | None]], now: float, seq: int, lifo_max: int,
          statuses: tuple[int, int, int],
          ) -> tuple[list[int], list[tuple[Any, ...]], list[tuple[Any, ...]], int, int, int]:
    """crawlq.stores.sqlite._admit for an exact seen-set, in C."""

def take_rows(got: list[tuple[Any, ...]], cursor: dict[int, tuple[int, ...]],
              keys: Mapping[int, str], token: int, expires: float, ints: list[int],
              payloads: list[bytes], out: list[tuple[Any, ...]], counts: dict[int, int],
              ) -> int:
    """crawlq.stores.sqlite._take_rows in C."""

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

class Applier:
    """SQLiteStore._apply_rows in C: settle queue rows with their deltas."""

    def __init__(self, delta_type: type, policy_type: type, policies: dict[Any, Any],
                 policy_of: Callable[[tuple[Any, ...]], Any], cache: dict[int, Any],
                 sql_lookup: str, sql_counts: tuple[str, str], sql_plain: tuple[str, str],
                 no_cursor: int, states: tuple[int, int, int, int], cursors_at: int,
                 settings_at: int) -> None: ...
    def apply(self, rows: Iterable[Sequence[Any]], deltas: dict[int, Any],
              now: float) -> dict[str, list[tuple[Any, ...]]]: ...

class MemoryLoops:
    """The memory store's add, lease and release loops in C."""

    def __init__(self, queue_type: type, prio_bias: int, states: tuple[int, int, int, int],
                 verdicts: tuple[int, int, int], policy_type: type, ack_done: int) -> None: ...
    def add(self, store: Any, entries: Sequence[Any], now: float,
            out: list[int]) -> tuple[int, int, int]: ...
    def lease(self, store: Any, out: list[Any], limit: int, now: float,
              expires: float) -> None: ...
    def release(self, store: Any, acks: Sequence[Any], now: float,
                out: list[bool]) -> tuple[int, int] | None: ...

class FingerprintSet:
    """A set of 16-byte fingerprints (other keys in an ordinary set beside)."""

    def __contains__(self, key: object) -> bool: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[bytes]: ...
    def add(self, key: bytes) -> None: ...
