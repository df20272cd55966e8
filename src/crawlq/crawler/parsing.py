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
concurrent.futures' process pool cannot kill one task (only break the whole pool);
multiprocessing's forkserver and spawn import the caller's main script again in each
worker (a script without a ``__main__`` guard would run twice), and fork is unsafe in a
process with threads. So a worker is a plain ``python -m`` subprocess, spoken to over
its stdin and stdout with length-prefixed pickles (it is our own child: trusted).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import signal
import struct
import sys
from typing import Any, BinaryIO

from .links import Page, decode_html, extract

MAX_LINKS = 10_000
"""Links kept from one page (the size budget of a page's work, with ``--max-bytes``)."""

INLINE_BYTES = 8192
"""Pages up to this size are parsed in a thread of this process instead: the slowest
markup measured at that size (``<b class=..><p>`` pairs) takes lexbor about 40 ms, and
the round trip to a worker costs more than that saves on such small pages."""

_LEN = struct.Struct(">I")


class ParseTimeout(Exception):
    """A page took longer than the parse budget; its worker was killed."""


class ParseFailed(Exception):
    """A worker died while parsing a page, or could not start, or the page did not
    parse."""


class ParseMemory(ParseFailed):
    """A page needed more memory than a worker may take (see :data:`MEMORY_FACTOR`);
    that worker was replaced."""


MEMORY_FACTOR = 20
"""A worker may take this many times ``--max-bytes`` of memory (address space) beyond
what it holds when it starts, and at least :data:`MEMORY_FLOOR`: lexbor builds about
25 bytes of tree per byte of a page made only of links, so the default 5 MB page limit
gives room to any page, while a raised ``--max-bytes`` cannot let a hostile page take
the machine's memory (RLIMIT_AS: an allocation over it fails, the page is reported)."""
MEMORY_FLOOR = 256 * 1024 * 1024


def memory_budget(max_bytes: int) -> int:
    """Bytes of address space a worker may add to its own for pages of ``max_bytes``."""
    return max(MEMORY_FACTOR * max_bytes, MEMORY_FLOOR)


def _status(field: str) -> int:
    """A size this process's /proc status gives (``VmSize``: its address space now,
    ``VmPeak``: the most it held), in bytes; 0 where /proc cannot tell."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _parse(body: bytes, charset: str | None, url: str) -> Page:
    page = extract(decode_html(body, charset), url)
    return Page(page.title, page.links[:MAX_LINKS], page.nofollow)


def _serve(src: BinaryIO, dst: BinaryIO, limit: int = 0, budget: int = 0) -> None:
    """A worker: parse framed pages from ``src`` until it ends (the parent went away).

    Each reply is ``(kind, payload, retire)``: kind ``ok`` (payload: title, links,
    nofollow), ``error`` (payload: why) or ``memory`` (the parse ran out of the
    address space ``limit`` set on this process). With ``retire`` the worker ends after
    the reply and the parent starts another: after a memory failure, and after a parse
    that took the process past half its ``budget`` (its heap may stay fragmented near
    the limit, which would fail the next page, or make an ordinary error look like a
    memory failure)."""
    while True:
        head = src.read(4)
        if len(head) < 4:
            return
        body, charset, url = pickle.loads(src.read(_LEN.unpack(head)[0]))
        kind = "ok"
        payload: Any = None
        try:
            payload = tuple(_parse(body, charset, url))
        except Exception as exc:  # reported to the parent, which counts it
            kind, payload = "error", f"{type(exc).__name__}: {exc}"
            if isinstance(exc, MemoryError):
                kind = "memory"
        peak = _status("VmPeak") if limit > 0 else 0
        # (lexbor reports a failed allocation as "Can't parse HTML", Python as a
        # MemoryError: the address space used says which it was; a worker that came
        # near the limit before is retired, so a high peak is this page's)
        if kind == "error" and peak >= limit - (32 << 20) > 0:
            kind = "memory"
        retire = kind == "memory" or (limit > 0 and peak >= limit - budget // 2)
        data = pickle.dumps((kind, payload, retire), protocol=pickle.HIGHEST_PROTOCOL)
        dst.write(_LEN.pack(len(data)) + data)
        dst.flush()
        if retire:
            return


class _Worker:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        self.stdin = proc.stdin
        self.stdout = proc.stdout

    async def parse(self, job: bytes) -> Any:
        self.stdin.write(_LEN.pack(len(job)) + job)
        await self.stdin.drain()
        n = _LEN.unpack(await self.stdout.readexactly(4))[0]
        return pickle.loads(await self.stdout.readexactly(n))

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()


class Parsers:
    """At most ``workers`` pages parsed at once (default: one per CPU), each within
    ``timeout`` seconds. Workers (``python -m crawlq.crawler.parsing``: a plain
    subprocess, so nothing of the caller's program is imported or run again in it)
    start on first use and stop at :meth:`close`."""

    def __init__(self, timeout: float = 10.0, workers: int | None = None,
                 max_bytes: int = 5_000_000) -> None:
        self.timeout = timeout
        self.workers = workers or os.cpu_count() or 1
        self.memory = memory_budget(max_bytes)
        """Bytes of address space each worker may take beyond its start."""
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._slots: asyncio.Semaphore | None = None

    async def _spawn(self) -> _Worker:
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "crawlq.crawler.parsing", str(self.memory),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                limit=1 << 24)
        except OSError as exc:
            raise ParseFailed(f"cannot start a parser process: {exc}") from None
        w = _Worker(proc)
        self._all.add(w)
        return w

    def _drop(self, w: _Worker) -> None:
        self._all.discard(w)
        w.kill()

    async def extract(self, body: bytes, charset: str | None, url: str) -> Page:
        """Title and links of an HTML page; raises :class:`ParseTimeout` or
        :class:`ParseFailed`."""
        if len(body) <= INLINE_BYTES:
            try:
                return await asyncio.to_thread(_parse, body, charset, url)
            except Exception as exc:
                raise ParseFailed(f"{type(exc).__name__}: {exc}") from None
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.workers)
        job = pickle.dumps((body, charset, url), protocol=pickle.HIGHEST_PROTOCOL)
        async with self._slots:
            w = self._idle.pop() if self._idle else await self._spawn()
            try:
                reply = await asyncio.wait_for(w.parse(job), self.timeout)
            except asyncio.TimeoutError:
                self._drop(w)
                raise ParseTimeout(f"parsing took over {self.timeout:g}s") from None
            except (asyncio.IncompleteReadError, OSError, pickle.UnpicklingError) as exc:
                self._drop(w)
                raise ParseFailed(f"the parser process died: {exc!r}") from None
            except BaseException:  # cancelled mid-parse: the worker may be busy
                self._drop(w)
                raise
            kind, payload, retire = reply
            if retire:  # (that worker ends after this reply: see _serve)
                self._drop(w)
            else:
                self._idle.append(w)
        if kind == "memory":
            raise ParseMemory(f"parsing needed over {self.memory >> 20} MiB: {payload}")
        if kind != "ok":
            raise ParseFailed(payload)
        title, links, nofollow = payload
        return Page(title, links, nofollow)

    def close(self) -> None:
        """Stop every worker (each also stops on its own when its input ends)."""
        for w in list(self._all):
            self._drop(w)
        self._idle.clear()

    async def aclose(self) -> None:
        """Stop every worker and wait until each has exited (its pipes closed)."""
        workers = list(self._all)
        self.close()
        for w in workers:
            with contextlib.suppress(asyncio.TimeoutError, ProcessLookupError):
                await asyncio.wait_for(w.proc.wait(), 5.0)


def main() -> None:
    """The worker's entry point: framed requests on stdin, replies on stdout."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # (nothing else may write to the replies' pipe)
    limit = 0
    budget = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    start = _status("VmSize")
    if budget > 0 and start > 0:
        import resource

        limit = start + budget
        with contextlib.suppress(ValueError, OSError):  # (a lower hard limit: kept)
            resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
    # the parent gone (killed, or done) ends this worker's work quietly
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, EOFError):
        _serve(sys.stdin.buffer, out, limit, budget)
    with contextlib.suppress(OSError):
        out.close()


if __name__ == "__main__":
    main()
