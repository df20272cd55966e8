"""What each store offers beyond the Store protocol, as its declared capabilities say
(crawlq.stores.base): checked with isinstance, as the Frontier and serve check them."""

from __future__ import annotations

from pathlib import Path

from crawlq import Frontier
from crawlq.stores import destroy_store
from crawlq.stores.base import (
    Clearable,
    Destroyable,
    Dumps,
    Namespaced,
    PipelinedAdd,
    PolicyChange,
    QueueDeletion,
    QueueRemoval,
    Tallies,
    Transactions,
    Unblocking,
)
from crawlq.testing.redis_server import LocalRedis

CAPABILITIES = (Dumps, QueueDeletion, QueueRemoval, PolicyChange, Clearable, Transactions,
                PipelinedAdd, Destroyable, Namespaced, Unblocking, Tallies)


def offered(url: str) -> set[str]:
    with Frontier.open(url) as f:
        return {c.__name__ for c in CAPABILITIES if isinstance(f.store, c)}


def test_each_store_declares_what_it_offers(tmp_path: Path,
                                            redis_server: LocalRedis) -> None:
    common = {"Dumps", "QueueDeletion", "QueueRemoval", "PolicyChange", "Clearable",
              "Unblocking", "Tallies"}
    assert offered("memory://") == common
    assert offered(f"sqlite:///{tmp_path}/a.db") == common | {"Transactions", "Destroyable"}
    assert offered(redis_server.url + "?prefix=caps") == common | {
        "PipelinedAdd", "Destroyable", "Namespaced"}


def test_destroying_a_sqlite_store_deletes_its_files(tmp_path: Path) -> None:
    f = Frontier.open(f"sqlite:///{tmp_path}/gone.db")
    f.add(["http://a.test/"])
    assert (tmp_path / "gone.db").exists()
    destroy_store(f.store)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
