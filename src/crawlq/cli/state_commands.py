"""The commands on a store's whole state: ``dump`` and ``load`` (every queue, request,
counter and seen fingerprint as JSON lines, out and in) and ``check`` (damage in a
SQLite store)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import IO, Any

from ..errors import CrawlqError, StoreCorrupt
from ..frontier import Frontier
from ..stores import sqlite_file
from ..stores.sqlite_schema import check
from .report import Progress

COMMANDS = ("dump", "load", "check")
"""The subcommands this module adds and runs."""


def register(sub: Any) -> None:
    """Add the ``dump``, ``load`` and ``check`` subcommands to the CLI's subparsers."""
    du = sub.add_parser("dump", help="export the whole state as JSON lines",
                        description="Write every queue, request (queued, leased, scheduled, "
                                    "dead), counter and seen fingerprint as JSON lines.")
    du.add_argument("file", nargs="?", default="-", help="output file (default: stdout)")

    lo = sub.add_parser("load", help="import JSON lines written by dump",
                        description="Merge a dump into the store (in one transaction).")
    lo.add_argument("file", nargs="?", default="-", help="input file (default: stdin)")

    sub.add_parser("check", help="look for damage in a SQLite store",
                   description="Run SQLite's integrity check on the store's file (read "
                               "only) and check that it is a crawlq store.")


def cmd_check(store: str, out: IO[str]) -> int:
    """``check``, on the store's file, never opened as a store (a damaged file cannot
    be)."""
    path = sqlite_file(store)
    if path is None:
        raise CrawlqError(f"check reads sqlite:// stores, not {store}")
    if not os.path.exists(path):
        raise CrawlqError(f"no crawl at {store}: {path} does not exist")
    problems = check(path)
    if problems:
        raise StoreCorrupt(f"{path} is damaged: {'; '.join(problems[:3])} "
                           f"({len(problems)} problem(s); a dump may save what is "
                           "readable)")
    print(f"{path}: no damage found (SQLite's integrity check)", file=out)
    return 0


def refuse_unreadable(path: str) -> None:
    """``load`` of a file that cannot be read fails before a store is created."""
    if path != "-":
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise CrawlqError(f"cannot read {path}: {exc.strerror or exc}") from None


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
