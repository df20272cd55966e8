"""crawlq: a durable, polite crawl frontier.

    from crawlq import Frontier, Request, Outcome

    with Frontier.open("sqlite:///crawl.db") as frontier:
        frontier.add([Request("https://example.com/", priority=5)])
        for lease in frontier.next(100):
            ...
            frontier.done(lease)
"""

from __future__ import annotations

from .aio import AsyncFrontier
from .errors import (
    ConfigError,
    CrawlqError,
    InvalidURL,
    LeaseError,
    StoreBusy,
    StoreCorrupt,
    StoreError,
    StoreFull,
    StoreReadOnly,
)
from .frontier import Frontier
from .models import (
    AddResult,
    DeadRequest,
    Lease,
    Outcome,
    QueueInfo,
    Rejection,
    Request,
    Stats,
)
from .policies.canonical import Canonicalizer
from .policies.fingerprint import Fingerprinter
from .policies.frontier import LeasePolicy, RetryPolicy, URLPolicy
from .stores.base import QueuePolicy

__version__ = "0.1.0"

__all__ = [
    "AddResult",
    "AsyncFrontier",
    "Canonicalizer",
    "ConfigError",
    "CrawlqError",
    "DeadRequest",
    "Fingerprinter",
    "Frontier",
    "InvalidURL",
    "Lease",
    "LeaseError",
    "LeasePolicy",
    "Outcome",
    "QueueInfo",
    "QueuePolicy",
    "Rejection",
    "Request",
    "RetryPolicy",
    "Stats",
    "StoreBusy",
    "StoreCorrupt",
    "StoreError",
    "StoreFull",
    "StoreReadOnly",
    "URLPolicy",
    "__version__",
]
