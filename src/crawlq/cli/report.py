"""How the command line speaks on standard error: every error as one ``crawlq: error:``
line (:func:`report`), and the progress counter of long commands (:class:`Progress`)."""

from __future__ import annotations

import sys
import time

from ..errors import CommandError, CrawlqError

ERROR = "crawlq: error: "
"""How every error line of the command line begins (``crawlq crawl --workers`` reads its
workers' by it)."""


def report(exc: CrawlqError) -> int:
    """The one way the command line reports an error: one ``crawlq: error:`` line on
    standard error (then a :class:`~crawlq.errors.CommandError`'s advice line), and the
    exit status (the CommandError's, else 2)."""
    print(f"{ERROR}{exc}", file=sys.stderr)
    if isinstance(exc, CommandError):
        if exc.advice:
            print(exc.advice, file=sys.stderr)
        return exc.status
    return 2


class Progress:
    """A one-line progress counter on standard error, only when it is a terminal."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.on = sys.stderr.isatty()
        self.start = self.last = time.monotonic()

    def update(self, n: int) -> None:
        now = time.monotonic()
        if self.on and now - self.last > 0.2:
            self.last = now
            rate = n / max(now - self.start, 1e-9)
            print(f"\r{self.what}: {n:,} ({rate:,.0f}/s)", end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.on:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
