"""crawlq: a durable, polite crawl frontier.

    from crawlq import Frontier, Request, Outcome

    with Frontier.open("sqlite:///crawl.db") as frontier:
        frontier.add([Request("https://example.com/", priority=5)])
        for lease in frontier.next(100):
            ...
            frontier.done(lease)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOMES = {
    "AddResult": "models",
    "AsyncFrontier": "aio",
    "Canonicalizer": "policies.canonical",
    "ConfigError": "errors",
    "CrawlqError": "errors",
    "DeadRequest": "models",
    "Fingerprinter": "policies.fingerprint",
    "Frontier": "frontier",
    "InvalidURL": "errors",
    "Lease": "models",
    "LeaseError": "errors",
    "LeasePolicy": "policies.frontier",
    "Outcome": "models",
    "QueueInfo": "models",
    "QueuePolicy": "stores.base",
    "Rejection": "models",
    "Request": "models",
    "RetryPolicy": "policies.frontier",
    "Stats": "models",
    "StoreBusy": "errors",
    "StoreCorrupt": "errors",
    "StoreError": "errors",
    "StoreFull": "errors",
    "StoreReadOnly": "errors",
    "URLPolicy": "policies.frontier",
}
"""The module of each public name. They are imported on first use (PEP 562), so that a
process that needs one part only (a crawl's link parsers: :mod:`crawlq.crawler.links`)
does not load the frontier, its stores and asyncio to start."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
