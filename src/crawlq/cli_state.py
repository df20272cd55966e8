"""The CLI's commands that move state in and out of a store: ``dump``, ``load``, and
``done`` / ``fail`` / ``retry`` (answering the leases ``next`` printed)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from typing import IO, Any

from . import handles
from .errors import CrawlqError
from .frontier import Frontier
from .models import Outcome


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


def cmd_answer(f: Frontier, args: argparse.Namespace, out: IO[str], stdin: IO[str]) -> int:
    """done / fail / retry: answer leases by their handles."""
    given: list[str] = []
    for item in args.leases:
        if item != "-":
            given.append(item)
            continue
        for line in stdin:
            line = line.strip()
            if line.startswith("{"):
                try:
                    given.append(json.loads(line)["lease"])
                except (ValueError, KeyError, TypeError) as exc:
                    raise CrawlqError(f"not a line of next's output: {line[:80]!r} "
                                      f"({exc!r})") from None
            elif line:
                given.append(line)
    leases = [handles.lease_of(h) for h in given]
    if args.command == "done":
        held = f.done(leases)
    elif args.command == "fail":
        held = f.done(leases, Outcome.FAILED, error=args.error)
    else:
        held = f.done(leases, Outcome.RETRY, after=args.after)
    late = len(leases) - held
    print(f"answered {held} lease(s)" + (f"; {late} had expired or were answered before "
                                         "(nothing changed for those)" if late else ""),
          file=out)
    return 0


def cmd_dump(f: Frontier, path: str, out: IO[str]) -> int:
    try:
        sink = out if path == "-" else open(path, "w", encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise CrawlqError(f"cannot write the dump to {path}: {exc}") from None
    n = 0
    try:
        progress = Progress("dumping")
        for rec in f.dump():
            sink.write(json.dumps(rec, ensure_ascii=False) + "\n")
            n += 1
            if n % 10_000 == 0:
                progress.update(n)
        progress.close()
        sink.flush()
    except OSError as exc:
        raise CrawlqError(f"writing the dump to {path} failed after {n} records: {exc}; "
                          "the dump is incomplete") from None
    finally:
        if sink is not out:
            with contextlib.suppress(OSError):
                sink.close()
    if path != "-":
        print(f"dumped {n} records to {path}", file=out)
    return 0


def cmd_load(f: Frontier, path: str, out: IO[str], stdin: IO[str]) -> int:
    try:
        src = stdin if path == "-" else open(path, encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise CrawlqError(f"cannot read {path}: {exc}") from None
    progress = Progress("loading")

    def records() -> Iterator[dict[str, Any]]:
        for i, line in enumerate(src, 1):
            if line.strip():
                try:
                    rec = json.loads(line)
                except (json.JSONDecodeError, RecursionError) as exc:
                    raise CrawlqError(f"{path}:{i}: not JSON: {exc}") from None
                if not isinstance(rec, dict):
                    raise CrawlqError(f"{path}:{i}: a dump record is a JSON object, not "
                                      f"{type(rec).__name__}")
                yield rec
            if i % 10_000 == 0:
                progress.update(i)

    try:
        n = f.load(records())
    except (OSError, UnicodeDecodeError) as exc:
        raise CrawlqError(f"cannot read {path}: {exc}") from None
    finally:
        progress.close()
        if src is not stdin:
            src.close()
    print(f"loaded {n} records", file=out)
    return 0
