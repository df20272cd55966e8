"""What a crawl offers the frontier (crawlq.crawler.discover.Links) and how it judges a
link's scope (crawlq.crawler.scope.Scope): a link the frontier took is not offered
again, one it rejected is, and a URL's remembered verdict never hides its depth.
On a real memory frontier; the spy only records what reaches it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from crawlq import AsyncFrontier, Request, StoreError
from crawlq.crawler import discover, scope
from crawlq.crawler.config import Summary
from crawlq.crawler.discover import Links
from crawlq.crawler.scope import Scope


class Spy:
    """Records the URLs each exchange/add call brings to ``frontier`` (then makes it)."""

    def __init__(self, frontier: AsyncFrontier) -> None:
        self.offered: list[str] = []
        self.inner_exchange, self.inner_add = frontier.exchange, frontier.add
        frontier.exchange = self.exchange  # type: ignore[method-assign,assignment]
        frontier.add = self.add  # type: ignore[method-assign,assignment]

    async def exchange(self, add: list[Request], *args: Any, **kw: Any) -> Any:
        self.offered += [r.url for r in add]
        return await self.inner_exchange(add, *args, **kw)

    async def add(self, add: list[Request], *args: Any, **kw: Any) -> Any:
        self.offered += [r.url for r in add]
        return await self.inner_add(add, *args, **kw)


def test_a_link_the_frontier_took_is_not_offered_again() -> None:
    summary = Summary()

    async def go() -> None:
        async with await AsyncFrontier.open("memory://") as f:
            spy, links = Spy(f), Links(Scope(["a.test"]), summary)
            page = ["http://a.test/1", "http://a.test/2", "http://b.test/x"]
            links.follow(f, page, 1, "http://a.test/")
            await links.flush(f)
            assert spy.offered == page[:2] and summary.links_added == 2
            links.follow(f, [*page, "http://a.test/3"], 2, "http://a.test/1")
            await links.flush(f)  # only the new one reaches the frontier
            assert spy.offered == [*page[:2], "http://a.test/3"]
            assert summary.out_of_scope["off-domain"] == 2  # (counted each time met)
            links.new_round()  # a round of revisits: all are offered again
            links.follow(f, page, 1, "http://a.test/")
            await links.flush(f)
            assert spy.offered[3:] == page[:2]
            assert (await f.stats()).queued == 3

    asyncio.run(go())


def test_a_link_the_frontier_rejected_is_offered_again() -> None:
    """Over a queue's budget: rejected each time it is met, and counted each time."""
    summary = Summary()

    async def go() -> None:
        async with await AsyncFrontier.open("memory://", max_queue_urls=1) as f:
            spy, links = Spy(f), Links(Scope(), summary)
            for _ in range(3):
                links.follow(f, ["http://a.test/1", "http://a.test/2"], 1, "http://a.test/")
                await links.flush(f)
            assert spy.offered == ["http://a.test/1", "http://a.test/2", "http://a.test/2",
                                   "http://a.test/2"]
            assert summary.out_of_scope["queue-budget"] == 3

    asyncio.run(go())


def test_links_that_did_not_reach_the_frontier_are_offered_again() -> None:
    """A failed store call: the links are given back, and none counts as taken."""
    summary = Summary()

    async def go() -> None:
        async with await AsyncFrontier.open("memory://") as f:
            spy, links = Spy(f), Links(Scope(), summary)
            real = spy.inner_add

            async def failing(add: list[Request], *args: Any, **kw: Any) -> Any:
                raise StoreError("the store went away")

            spy.inner_add = failing  # type: ignore[assignment]
            links.follow(f, ["http://a.test/1"], 1, "http://a.test/")
            with pytest.raises(StoreError):
                await links.flush(f)
            spy.inner_add = real
            links.follow(f, ["http://a.test/1"], 1, "http://a.test/")
            await links.flush(f)  # (given back, and met again: offered, taken once)
            assert spy.offered == ["http://a.test/1"] * 3
            assert summary.links_added == 1

    asyncio.run(go())


def test_what_is_remembered_is_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(discover, "OFFERED_KEPT", 4)
    monkeypatch.setattr(scope, "VERDICTS_KEPT", 4)
    summary = Summary()

    async def go() -> None:
        async with await AsyncFrontier.open("memory://") as f:
            spy, links = Spy(f), Links(Scope(["a.test"]), summary)
            urls = [f"http://a.test/{i}" for i in range(10)]
            for i in range(0, 10, 2):
                links.follow(f, [*urls[i:i + 2], f"http://b.test/{i}"], 1, "http://a.test/")
                await links.flush(f)
            assert summary.out_of_scope["off-domain"] == 5  # (verdicts forgotten,
            links.follow(f, [f"http://b.test/{i}" for i in range(0, 10, 2)], 1,  # judged
                         "http://a.test/")                                    # again alike)
            assert summary.out_of_scope["off-domain"] == 10
            links.follow(f, urls, 1, "http://a.test/")  # the early ones were forgotten
            await links.flush(f)
            assert spy.offered[:10] == urls and set(spy.offered[10:]) < set(urls)
            assert (await f.stats()).queued == 10  # (the frontier still knew them)

    asyncio.run(go())


def test_a_remembered_verdict_still_minds_the_depth() -> None:
    s = Scope(["a.test"], max_depth=2)
    assert s.why_not("http://a.test/x", 1) is None
    assert s.why_not("http://a.test/x", 3) == "too-deep"
    assert s.why_not("http://a.test/x", 2) is None
    assert s.why_not("http://b.test/x", 1) == "off-domain"
    assert s.why_not("http://b.test/x", 1) == "off-domain"


def test_a_link_taken_then_met_too_deep_is_counted_too_deep() -> None:
    """What is left out is counted each time met, a link taken before included."""
    summary = Summary()

    async def go() -> None:
        async with await AsyncFrontier.open("memory://") as f:
            links = Links(Scope(["a.test"], max_depth=2), summary)
            links.follow(f, ["http://a.test/1"], 1, "http://a.test/")
            await links.flush(f)
            links.follow(f, ["http://a.test/1"], 3, "http://a.test/deep")
            assert summary.out_of_scope["too-deep"] == 1 and not links.take()

    asyncio.run(go())
