"""What each store offers beyond the Store protocol, as its declared capabilities say
(crawlq.stores.base): checked with isinstance, as the Frontier and serve check them.
Every store is a whole Store (the protocol's members are the calls every store has),
and says whether its calls are work of this process (``in_process``)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from crawlq import Frontier
from crawlq.stores import destroy_store
from crawlq.stores.base import (
    Destroyable,
    Exchanges,
    Namespaced,
    PipelinedAdd,
    Store,
    Transactions,
    lacking,
)
from crawlq.testing.redis_server import LocalRedis

CAPABILITIES = (Transactions, PipelinedAdd, Exchanges, Destroyable, Namespaced)
"""Every capability protocol of crawlq.stores.base (the test below checks the list)."""


def offered(url: str) -> tuple[set[str], bool]:
    """The capabilities the store at ``url`` declares, and its ``in_process``."""
    with Frontier.open(url) as f:
        assert isinstance(f.store, Store) and lacking(f.store) == []
        return {c.__name__ for c in CAPABILITIES if isinstance(f.store, c)}, f.store.in_process


def test_each_store_declares_what_it_offers(tmp_path: Path,
                                            redis_server: LocalRedis) -> None:
    assert offered("memory://") == (set(), True)
    assert offered(f"sqlite:///{tmp_path}/a.db") == ({"Transactions", "Destroyable"}, True)
    assert offered(f"sqlite:///{tmp_path}/b.db?synchronous=full") == (
        {"Transactions", "Destroyable"}, False)
    assert offered(redis_server.url + "?prefix=caps") == (
        {"PipelinedAdd", "Exchanges", "Destroyable", "Namespaced"}, False)


def test_the_capabilities_are_what_base_declares() -> None:
    """CAPABILITIES above is every Protocol of base besides Store, each runtime-checkable
    (isinstance raises TypeError on one that is not): a capability added there is added
    to the test above. (The memory store there has none of them: no capability is one
    that every store has, which would belong in Store.)"""
    from crawlq.stores import base

    declared = {v for v in vars(base).values()
                if isinstance(v, type) and Protocol in v.__bases__ and v is not Store}
    assert declared == set(CAPABILITIES)
    for capability in declared:
        assert not isinstance(object(), capability)


def test_destroying_a_sqlite_store_deletes_its_files(tmp_path: Path) -> None:
    f = Frontier.open(f"sqlite:///{tmp_path}/gone.db")
    f.add(["http://a.test/"])
    assert (tmp_path / "gone.db").exists()
    destroy_store(f.store)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
