"""The crawl's progress display: a live line on a terminal, a log line otherwise."""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from typing import Any


class Progress:
    """A live progress line on a terminal (redrawn twice a second), a log line every
    10 s otherwise: pages, rate, queued and in flight, hosts ready and resting, errors."""

    def __init__(self, crawler: Any, every: float | None = None) -> None:
        self.crawler = crawler
        self.tty = sys.stderr.isatty()
        self.interval = every if every is not None else 0.5 if self.tty else 10.0
        self.start = time.monotonic()
        self.last_n, self.last_t = 0, self.start

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                frontier = self.crawler.frontier
                self.show(await frontier.stats() if frontier is not None else None)
            except Exception as exc:  # a display must never stop the crawl
                print(f"(progress unavailable: {exc})", file=sys.stderr)
                return

    def line(self, st: Any = None) -> str:
        """The progress line; ``st``: the frontier's stats, if at hand."""
        c = self.crawler
        s = c.summary
        now = time.monotonic()
        rate = (s.fetched - self.last_n) / max(now - self.last_t, 1e-9)  # recent rate
        self.last_n, self.last_t = s.fetched, now
        of = f"/{c.config.max_pages}" if c.config.max_pages else ""
        out = f"pages {s.fetched}{of}  {rate:.1f}/s"
        if st is not None:
            out += (f"  queued {st.queued}  in flight {st.leased}  hosts ready "
                    f"{st.queues_ready} busy {st.queues_busy} resting {st.queues_resting}")
        errors = sum(s.errors.values()) + sum(s.blocked.values())
        out += f"  errors {errors}  {_clock(now - self.start)}"
        return out

    def show(self, st: Any = None) -> None:
        """Print the progress line (``st``: the frontier's stats, if at hand)."""
        if self.tty:
            cols = shutil.get_terminal_size((120, 20)).columns
            print(f"\r\033[K{self.line(st)[:cols - 1]}", end="", file=sys.stderr,
                  flush=True)
        else:
            print(self.line(st), file=sys.stderr, flush=True)

    def clear(self) -> None:
        if self.tty:
            print("\r\033[K", end="", file=sys.stderr, flush=True)


def _clock(seconds: float) -> str:
    m, sec = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{sec:02d}"
