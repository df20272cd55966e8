"""A store another package registers (entry point group ``crawlq.stores``) opens by its
URL scheme, and the contract suite runs against it as it would against crawlq's own.

The package is made here: a module and a ``.dist-info`` folder with its entry point, on
``sys.path``, found by importlib.metadata as an installed distribution would be.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crawlq import ConfigError, Frontier
from crawlq.testing import Clock, MemoryOnlyContract

PLUGIN = '''
from crawlq.stores.memory import MemoryStore

OPENED = []

def open_store(url, *, policy, lifo, bloom, max_redeliveries, **options):
    if options:
        raise TypeError(f"unexpected options {sorted(options)}")
    OPENED.append(url)
    return MemoryStore(policy, lifo=lifo, bloom=bloom, max_redeliveries=max_redeliveries)

def broken(url, **options):
    raise AssertionError("never called")

class HalfStore:
    """A memory store's every member but tally and in_process."""

    def __init__(self):
        self.inner = MemoryStore()

    def __getattr__(self, name):
        if name in ("tally", "in_process"):
            raise AttributeError(name)
        return getattr(self.inner, name)

def open_half(url, **options):
    return HalfStore()
'''


@pytest.fixture(scope="module", autouse=True)
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    site = tmp_path_factory.mktemp("site")
    (site / "mystore_plugin.py").write_text(PLUGIN)
    info = site / "mystore_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mystore-plugin\n"
                                   "Version: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[crawlq.stores]\nmystore = mystore_plugin:open_store\n"
        "brokenstore = mystore_plugin_missing:open_store\n"
        "halfstore = mystore_plugin:open_half\n")
    sys.path.insert(0, str(site))
    try:
        yield site
    finally:
        sys.path.remove(str(site))
        sys.modules.pop("mystore_plugin", None)


class TestRegisteredStore(MemoryOnlyContract):
    def open_frontier(self, clock: Clock, path: Path, **options: Any) -> Frontier:
        return Frontier.open(f"mystore://{path}", clock=clock, **options)


def test_the_registered_factory_gets_the_url_and_a_broken_one_is_named() -> None:
    import mystore_plugin  # type: ignore[import-not-found]

    with Frontier.open("mystore://somewhere", concurrency=3) as f:
        assert f.store.policy.concurrency == 3
    assert mystore_plugin.OPENED[-1] == "mystore://somewhere"
    with pytest.raises(ConfigError, match=r"registered for brokenstore:// .* cannot be"):
        Frontier.open("brokenstore://x")
    with pytest.raises(ConfigError, match=r"crawlq\.stores"):
        Frontier.open("nostore://x")


def test_a_registered_store_that_is_not_a_whole_store_is_refused() -> None:
    """A Frontier calls every member of the Store protocol: a registered store lacking
    one is refused when it is opened, with the members it lacks named."""
    with pytest.raises(ConfigError, match=r"halfstore:// is no crawlq Store: HalfStore "
                                          r"lacks in_process, tally \("):
        Frontier.open("halfstore://x")
