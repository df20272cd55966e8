"""Testing with crawlq: the store contract suite, and the local servers crawlq's own
tests, benchmarks and demo run against.

**The store contract suite** is the executable specification of a crawlq Store.
Anyone writing a store subclasses :class:`FrontierContract` in a pytest module and
implements :meth:`FrontierContract.open_frontier`; every test then runs twice, the second
time closing and reopening the store at its checkpoints (a store that keeps nothing
across a reopen, by design, subclasses :class:`MemoryOnlyContract` instead)::

    class TestMyStore(FrontierContract):
        def open_frontier(self, clock, path, **options):
            return Frontier.open(f"mystore://{path}", clock=clock, **options)

Time is a :class:`Clock` the tests move by hand; nothing here sleeps. (The suite needs
pytest; its names are imported on first use, so that the servers below load without it.)

**Local servers**, each a module of its own:

- :mod:`crawlq.testing.web`: the local test web, a generated multi-host site on
  127.0.0.1 (``crawlq demo`` crawls it); its asyncio engine is
  :mod:`~crawlq.testing.web_async`, its pages :mod:`~crawlq.testing.web_site`;
- :mod:`crawlq.testing.redis_server`: throwaway ``redis-server`` processes and clusters
  on free loopback ports;
- :mod:`crawlq.testing.delayproxy`: a TCP proxy that adds a delay each way (a store
  "on another machine").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .contract import FrontierContract, MemoryOnlyContract
    from .env import FAST, T0, Clock

__all__ = ["FAST", "T0", "Clock", "FrontierContract", "MemoryOnlyContract"]


def __getattr__(name: str) -> Any:
    if name in ("FrontierContract", "MemoryOnlyContract"):
        from . import contract

        return getattr(contract, name)
    if name in __all__:
        from . import env

        return getattr(env, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
