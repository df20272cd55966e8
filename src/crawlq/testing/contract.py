"""The store contract suite's whole: :class:`FrontierContract`, assembled from one class
per part (adding, ordering, politeness, domains, leases, accounting), and
:class:`MemoryOnlyContract`. Import them from :mod:`crawlq.testing`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..frontier import Frontier
from .accounting import AccountingContract
from .adding import AddingContract
from .domains import DomainContract
from .env import Clock, Env
from .leases import LeaseContract
from .ordering import OrderingContract
from .politeness import PolitenessContract


class FrontierContract(AddingContract, OrderingContract, PolitenessContract, DomainContract,
                       LeaseContract, AccountingContract):
    """Behaviour every store must show through the Frontier API."""

    def open_frontier(self, clock: Clock, path: Path, **options: Any) -> Frontier:
        """Open a frontier on the store under test; ``path`` is a fresh folder."""
        raise NotImplementedError

    # -- fixtures ------------------------------------------------------------------

    @pytest.fixture(params=["live", "reopened"])
    def reopen_mode(self, request: pytest.FixtureRequest) -> str:
        """Durable stores run each test twice; a memory store overrides this fixture
        with ``params=["live"]`` (see :class:`MemoryOnlyContract`)."""
        return str(request.param)

    @pytest.fixture
    def env(self, tmp_path: Path, reopen_mode: str) -> Iterator[Env]:
        e = Env(self, tmp_path, reopen_mode == "reopened")
        yield e
        e.close()


class MemoryOnlyContract(FrontierContract):
    """The contract for stores that keep nothing across a reopen, by design."""

    @pytest.fixture(params=["live"])
    def reopen_mode(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)
