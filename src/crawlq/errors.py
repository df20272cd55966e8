"""crawlq's exception tree.

Every error crawlq raises on purpose derives from :class:`CrawlqError`::

    CrawlqError
    ├── ConfigError        bad option, unknown store URL scheme, bad argument
    ├── CommandError       a ``crawlq`` command failed (an exit status, advice)
    ├── InvalidURL         a URL the canonicalizer refuses (``reason`` says why)
    ├── LeaseError         acknowledging a lease the store no longer holds (strict_acks)
    ├── OutputError        the crawler's output cannot be written (crawler.output)
    ├── RedisUnavailable   redis-server cannot be found or started (testing.redis_server)
    └── StoreError         the backing store failed (I/O, corruption, lost connection)
        ├── StoreCorrupt   the store file is not a crawlq store or is damaged
        ├── StoreBusy      another connection holds the store locked (past busy_timeout)
        ├── StoreFull      the disk, the store's size limit or Redis's maxmemory is full
        └── StoreReadOnly  the store cannot be written (permissions, read-only mount)

Driver exceptions (sqlite3, redis) are wrapped into :class:`StoreError` so callers
need to know only this tree. One exception stands apart: ``crawlq.payload.PayloadError``
(a ``ValueError``) is what the compiled payload codec raises for a request msgpack
cannot encode; ``add`` turns it into an ``invalid-request`` rejection, never lets it
out.
"""

from __future__ import annotations


class CrawlqError(Exception):
    """Base class of every error crawlq raises on purpose."""


class ConfigError(CrawlqError, ValueError):
    """An option, argument or store URL is not valid."""


class CommandError(CrawlqError):
    """A ``crawlq`` command could not do its work. The command line prints it as every
    error, one ``crawlq: error: <message>`` line, then ``advice`` (a line saying what to
    do next) when given, and exits with ``status``."""

    def __init__(self, message: str, *, status: int = 2, advice: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.advice = advice


class InvalidURL(CrawlqError, ValueError):
    """A URL was refused; ``reason`` is a short machine-readable slug.

    Reasons: ``empty``, ``too-long``, ``control-chars``, ``not-absolute``, ``bad-scheme``,
    ``no-host``, ``bad-host``, ``bad-port``, ``bad-priority``. ``add``
    also reports ``queue-budget`` (over a queue's cap), ``invalid-request`` (not a
    serializable Request) and ``custom`` (a user's key function raised).
    """

    def __init__(self, reason: str, url: str = "", detail: str = "") -> None:
        self.reason = reason
        self.url = url
        self.detail = detail
        shown = url if len(url) <= 120 else url[:117] + "..."
        msg = f"{reason}: {shown!r}"
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)


class LeaseError(CrawlqError):
    """A lease was acknowledged that the store no longer holds (expired or unknown).

    Raised only by a frontier opened with ``strict_acks=True``; otherwise such acknowledgements
    are a counted no-op (see ``Stats.late_acks``).
    """

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens
        super().__init__(f"{len(tokens)} lease(s) expired or unknown: {tokens[:10]}")


class StoreError(CrawlqError):
    """The backing store failed: I/O error, lost connection, locked too long."""


class StoreCorrupt(StoreError):
    """The store's file or keys are not a crawlq store, or are damaged."""


class StoreBusy(StoreError):
    """Another connection kept the store locked longer than the busy timeout; the store
    is fine: try again, or give ``busy_timeout`` more time."""


class StoreFull(StoreError):
    """The disk holding the store (or the store's own size limit) is full; the call
    that failed changed nothing."""


class StoreReadOnly(StoreError):
    """The store cannot be written: a read-only file, directory or mount."""
