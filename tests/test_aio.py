"""AsyncFrontier where the contract suite cannot look: the event loop goes on while a
store call waits (a real redis-server behind a real delay proxy), a cancelled lease call
gives its leases back, errors come out as the sync API's, calls run on the loop or on
threads as the store needs, and an async transaction holds other tasks' calls off
without holding the loop. (The contract itself runs through AsyncFrontier on every
store: tests/stores/test_contract.py.)"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crawlq import AsyncFrontier, ConfigError, Frontier, Request, StoreError
from crawlq.testing.delayproxy import DelayProxy
from crawlq.testing.redis_server import LocalRedis

FAST: dict[str, Any] = {"min_delay": 0.0, "max_delay": 0.0, "delay_factor": 0.0}


@pytest.fixture
def far_redis(redis_server: LocalRedis, request: pytest.FixtureRequest) -> Iterator[str]:
    """The session's redis-server behind a proxy adding 0.1 s each way."""
    port = int(redis_server.url.rsplit(":", 1)[1].split("/")[0])
    with DelayProxy(port, 0.1) as proxy:
        yield f"redis://127.0.0.1:{proxy.port}/0?prefix=aio-{request.node.name[:40]}"


def test_the_loop_runs_while_a_far_store_call_waits(far_redis: str) -> None:
    async def go() -> tuple[int, float | None]:
        async with await AsyncFrontier.open(far_redis, **FAST) as f:
            await f.add(["https://a.example/1"])
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            t = asyncio.create_task(ticker())
            at = await f.next_ready_at()  # (a 0.2 s round trip)
            t.cancel()
            return ticks, at

    ticks, at = asyncio.run(go())
    assert at is not None
    assert ticks >= 8, ticks  # the loop went on: ~20 ticks of 10 ms in 0.2 s


def test_a_cancelled_lease_call_puts_its_leases_back(far_redis: str) -> None:
    async def go() -> None:
        async with await AsyncFrontier.open(far_redis, **FAST) as f:
            await f.add([f"https://{h}.example/" for h in "abc"])
            call = asyncio.create_task(f.next(3))
            await asyncio.sleep(0.05)  # (sent, not answered)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            for _ in range(100):  # until the answer came and the leases went back
                st = await f.stats()
                if st.leased == 0 and st.queued == 3:
                    break
                await asyncio.sleep(0.05)
            assert (st.leased, st.queued) == (0, 3)
            assert len(await f.next(3)) == 3  # back, and nothing failed
            assert (await f.stats()).failed == 0

    asyncio.run(go())


def test_errors_are_the_sync_apis(redis_server: LocalRedis, tmp_path: Path) -> None:
    async def go() -> None:
        async with await AsyncFrontier.open(f"sqlite:///{tmp_path}/f.db") as f:
            with pytest.raises(ConfigError):
                await f.next("two")  # type: ignore[arg-type]
            with pytest.raises(ConfigError):
                await f.block("a.example")  # neither until= nor seconds=
            result = await f.add(["not a url", "https://a.example/"])
            assert result.added == 1 and result.rejected[0].reason == "not-absolute"
        with pytest.raises(ConfigError):
            await AsyncFrontier.open("memory://", concurrency=0)
        with pytest.raises(ConfigError):
            await f.stats()  # closed
        # Redis away: the same StoreError, after the retry deadline
        gone = LocalRedis(tmp_path / "gone")
        gone.start()
        url = gone.url + "?retry_deadline=0.5"
        async with await AsyncFrontier.open(url) as g:
            await g.add(["https://a.example/"])
            gone.stop()
            with pytest.raises(StoreError, match="unreachable"):
                await g.next(1)

    asyncio.run(go())


def test_calls_run_on_the_loop_or_on_threads_as_the_store_needs(tmp_path: Path) -> None:
    async def where_it_runs(url: str, **options: Any) -> str:
        async with await AsyncFrontier.open(url, **options) as f:
            await f.add(["https://a.example/"])
            threads: list[str] = []

            def record(req: Request) -> bool:
                threads.append(threading.current_thread().name)
                return False

            await f.remove_queued(record)
            return threads[0]

    assert asyncio.run(where_it_runs("memory://")) == "MainThread"
    # SQLite in WAL mode, synchronous=normal: its calls are work, not waits
    assert asyncio.run(where_it_runs(f"sqlite:///{tmp_path}/f.db")) == "MainThread"
    # with an fsync per commit they wait: on threads; and on threads when asked
    assert asyncio.run(where_it_runs(f"sqlite:///{tmp_path}/g.db", synchronous="full")
                       ).startswith("crawlq-store")
    assert asyncio.run(where_it_runs(f"sqlite:///{tmp_path}/h.db", threads=2)
                       ).startswith("crawlq-store")


def test_an_async_transaction_holds_other_tasks_off_not_the_loop(tmp_path: Path) -> None:
    async def go() -> None:
        async with await AsyncFrontier.open(f"sqlite:///{tmp_path}/f.db", **FAST) as f:
            await f.add(["https://a.example/1"])
            order: list[str] = []
            inside = asyncio.Event()

            async def other() -> None:
                await inside.wait()
                await f.add(["https://b.example/1"])  # waits for the block's end
                order.append("other added")

            task = asyncio.create_task(other())
            async with f.transaction():
                (lease,) = await f.next(1)
                inside.set()
                await asyncio.sleep(0.2)  # the loop runs: other() is waiting on a thread
                order.append("block ends")
                await f.done(lease)
            await task
            assert order == ["block ends", "other added"]
            st = await f.stats()
            assert (st.done, st.queued) == (1, 1)
            # an exception leaving the block undoes its calls
            with pytest.raises(ZeroDivisionError):
                async with f.transaction():
                    await f.next(1)
                    raise ZeroDivisionError
            assert (await f.stats()).leased == 0

    asyncio.run(go())


def test_wait_sleeps_on_the_loop_until_work_is_due() -> None:
    async def go() -> None:
        async with AsyncFrontier(Frontier.open("memory://", min_delay=0.3, max_delay=0.3,
                                               delay_factor=0.0)) as f:
            await f.add(["https://a.example/1", "https://a.example/2"])
            (lease,) = await f.next(1)
            await f.done(lease)  # a.example now rests 0.3 s
            assert await f.next(1) == []
            loop = asyncio.get_running_loop()
            t = loop.time()
            assert await f.wait() is True
            assert loop.time() - t >= 0.25
            (lease,) = await f.next(1)
            await f.done(lease)
            assert await f.wait() is False  # nothing queued, nothing leased

    asyncio.run(go())
