"""The contract suite's clock and each test's frontier (its close/reopen checkpoints)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from ..frontier import Frontier

T0 = 1_800_000_000.0


class Clock:
    """A hand-moved clock for frontier tests."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.t += seconds


FAST = {"min_delay": 0.0, "max_delay": 0.0, "delay_factor": 0.0}
"""Options that turn politeness delays off, for tests about other things."""


class Opener(Protocol):
    """What opens the frontier under test (a contract class)."""

    def open_frontier(self, clock: Clock, path: Path, **options: Any) -> Frontier: ...


class Env:
    """One test's frontier, its clock, and its close/reopen checkpoints."""

    def __init__(self, contract: Opener, path: Path, reopen: bool) -> None:
        self.contract = contract
        self.path = path
        self.reopen = reopen
        self.clock = Clock()
        self.frontier: Frontier | None = None
        self.options: dict[str, Any] = {}
        self.others: list[Frontier] = []

    def open(self, **options: Any) -> Frontier:
        self.options = options
        self.frontier = self.contract.open_frontier(self.clock, self.path / "main", **options)
        return self.frontier

    def open_other(self, **options: Any) -> Frontier:
        """A second, independent frontier (another store)."""
        n = len(self.others)
        g = self.contract.open_frontier(self.clock, self.path / f"other{n}", **options)
        self.others.append(g)
        return g

    def checkpoint(self) -> Frontier:
        """Close and reopen the store when testing durability; else the same frontier."""
        assert self.frontier is not None
        if self.reopen:
            self.frontier.close()
            self.frontier = self.contract.open_frontier(self.clock, self.path / "main",
                                                        **self.options)
        return self.frontier

    def close(self) -> None:
        for g in [self.frontier, *self.others]:
            if g is not None:
                g.close()

