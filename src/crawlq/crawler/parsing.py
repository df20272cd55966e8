"""Link extraction in worker processes, each page within a time budget.

lexbor (selectolax) builds the tree as browsers do, and some markup makes that far
slower than linear: 80,000 nested ``<div>`` take about ten seconds, a few thousand
``<b class=..><p>`` pairs take minutes. A thread cannot be stopped, so such a page would
hold a CPU for as long as it liked, and its lease could expire under it (then the page is
fetched and parsed again, forever). So each page is parsed in a worker process; one that
outlives ``timeout`` is killed and replaced, and the page is reported as
:class:`ParseTimeout` (the crawler saves it and follows none of its links). The event
loop never waits on a parse, and the workers use the machine's cores in parallel.

Why processes and not a library: no HTML parser offers a bounded-time mode, and
concurrent.futures' process pool cannot kill one task (only break the whole pool).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from multiprocessing.connection import Connection
from typing import Any

from .links import Page, decode_html, extract

MAX_LINKS = 10_000
"""Links kept from one page (the size budget of a page's work, with ``--max-bytes``)."""


class ParseTimeout(Exception):
    """A page took longer than the parse budget; its worker was killed."""


class ParseFailed(Exception):
    """A worker died while parsing a page (e.g. out of memory)."""


def _serve(conn: Connection) -> None:
    """A worker: parse pages until the parent goes away."""
    while True:
        try:
            body, charset, url = conn.recv()
        except (EOFError, OSError):
            return
        try:
            page = extract(decode_html(body, charset), url)
            reply: Any = (page.title, page.links[:MAX_LINKS], page.nofollow)
        except Exception as exc:  # reported to the parent, which counts it
            reply = f"{type(exc).__name__}: {exc}"
        conn.send(reply)


class _Worker:
    def __init__(self, ctx: Any) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child,), daemon=True,
                                name="crawlq-parse")
        self.proc.start()
        child.close()

    def kill(self) -> None:
        self.conn.close()
        self.proc.kill()
        self.proc.join(5)


class Parsers:
    """At most ``workers`` pages parsed at once (default: one per CPU), each within
    ``timeout`` seconds. Workers start on first use (forkserver: safe in a process
    with threads) and stop at :meth:`close`."""

    def __init__(self, timeout: float = 10.0, workers: int | None = None) -> None:
        self.timeout = timeout
        self.workers = workers or os.cpu_count() or 1
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._slots: asyncio.Semaphore | None = None
        self._ctx: Any = None

    def _spawn(self) -> _Worker:
        if self._ctx is None:
            self._ctx = multiprocessing.get_context("forkserver")
            self._ctx.set_forkserver_preload(["crawlq.crawler.links"])
        w = _Worker(self._ctx)
        self._all.add(w)
        return w

    def _drop(self, w: _Worker) -> None:
        self._all.discard(w)
        w.kill()

    async def extract(self, body: bytes, charset: str | None, url: str) -> Page:
        """Title and links of an HTML page; raises :class:`ParseTimeout` or
        :class:`ParseFailed`."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.workers)
        async with self._slots:
            w = self._idle.pop() if self._idle else self._spawn()
            loop = asyncio.get_running_loop()
            ready: asyncio.Future[None] = loop.create_future()

            def wake() -> None:
                if not ready.done():
                    ready.set_result(None)

            fd = w.conn.fileno()
            loop.add_reader(fd, wake)
            try:
                w.conn.send((body, charset, url))
                await asyncio.wait_for(ready, self.timeout)
                reply = w.conn.recv()
            except asyncio.TimeoutError:
                loop.remove_reader(fd)
                self._drop(w)
                raise ParseTimeout(f"parsing took over {self.timeout:g}s") from None
            except (EOFError, OSError) as exc:
                loop.remove_reader(fd)
                self._drop(w)
                raise ParseFailed(f"the parser process died: {exc}") from None
            except BaseException:  # cancelled mid-parse: the worker may be busy
                loop.remove_reader(fd)
                self._drop(w)
                raise
            loop.remove_reader(fd)
            self._idle.append(w)
        if isinstance(reply, str):
            raise ParseFailed(reply)
        title, links, nofollow = reply
        return Page(title, links, nofollow)

    def close(self) -> None:
        """Stop every worker."""
        for w in list(self._all):
            self._drop(w)
        self._idle.clear()
