"""Every store passes the one contract suite (crawlq.testing), durable ones also reopened."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crawlq import Frontier
from crawlq.testing import Clock, FrontierContract, MemoryOnlyContract


class TestMemoryStore(MemoryOnlyContract):
    def open_frontier(self, clock: Clock, path: Path, **options: Any) -> Frontier:
        return Frontier.open("memory://", clock=clock, **options)


class TestSQLiteStore(FrontierContract):
    def open_frontier(self, clock: Clock, path: Path, **options: Any) -> Frontier:
        path.mkdir(parents=True, exist_ok=True)
        return Frontier.open(f"sqlite:///{path}/frontier.db", clock=clock, **options)
