"""The ``crawlq`` command: its parser (each subcommand added by the module that runs
it), the store it works on, and the dispatch to each command. :func:`main` is the
console script; :func:`run` the same, returning the exit status."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import IO, Any, NoReturn

from .. import __version__
from ..errors import CommandError, CrawlqError
from ..frontier import Frontier
from ..serve import LOCAL_VALUES
from ..stores import sqlite_file
from . import crawl, frontier_commands, serve, state_commands
from .report import report

DEFAULT_STORE = "sqlite:///crawlq.db"
READ_ONLY = ("stats", "queues", "dead", "dump", "check")
"""Commands that only look: they never create a store."""


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as one ``crawlq: error:`` line like every other error
    (argparse prints the usage and ``crawlq crawl: error:``)."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.split(" ", 1)[1] + " " if " " in self.prog else ""
        raise CommandError(f"{message} (see crawlq {command}--help)")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="crawlq",
        description="crawlq: a durable, polite crawl frontier. These commands inspect and "
                    "feed a frontier stored at --store.",
        epilog="Store URLs: sqlite:///relative.db, sqlite:////absolute/path.db, memory:// "
               "(gone when the command ends). Docs: docs/cli.md.",
    )
    p.add_argument("--version", action="version", version=f"crawlq {__version__}")
    p.add_argument("--store", default=None,
                   help=f"store URL (default: $CRAWLQ_STORE or {DEFAULT_STORE}; for crawl: "
                        "$CRAWLQ_STORE or memory)")
    p.add_argument("-o", "--option", action="append", default=[], metavar="NAME=VALUE",
                   help="a Frontier.open option, e.g. -o min_delay=2 -o concurrency=4 "
                        "(repeatable; see docs/options.md)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    frontier_commands.register(sub)
    state_commands.register(sub)
    crawl.register(sub)
    serve.register(sub)
    return p


def _options(pairs: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        name, eq, raw = pair.partition("=")
        if not eq or not name:
            raise CrawlqError(f"--option wants NAME=VALUE, got {pair!r}")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out[name.strip().replace("-", "_")] = value
    return out


def run(argv: Sequence[str] | None = None, out: IO[str] | None = None,
        stdin: IO[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 usage or crawlq error). Commands
    raise their errors (:class:`~crawlq.errors.CrawlqError`); they are reported here,
    by :func:`~crawlq.cli.report.report`."""
    try:
        return _run(argv, out, stdin)
    except CrawlqError as exc:
        return report(exc)
    except BrokenPipeError:
        return 0


def _run(argv: Sequence[str] | None, out: IO[str] | None, stdin: IO[str] | None) -> int:
    out = out or sys.stdout
    stdin = stdin or sys.stdin
    args = _parser().parse_args(argv)
    args.argv = list(argv) if argv is not None else sys.argv[1:]  # (--workers runs it)
    if args.command in crawl.COMMANDS:  # (its store: --state, or its own --store)
        return crawl.command(args)
    store = args.store or os.environ.get("CRAWLQ_STORE") or DEFAULT_STORE
    sqlite_file(store)  # (a malformed store URL is the first error, whatever the command)
    if args.command == "check":  # (before opening it: a damaged file cannot be)
        return state_commands.cmd_check(store, out)
    if args.command == "load":  # (before a store is created)
        state_commands.refuse_unreadable(args.file)
    options = _options(args.option)
    if args.command == "serve":
        return serve.command(args, store, options)
    if args.command in READ_ONLY:
        # (opening it would create an empty store, and print zeros as if it were one)
        options["create"] = False
    # (a server's own values on its store, such as its pause: not dumped, not loaded)
    options.setdefault("local_values", LOCAL_VALUES)
    with Frontier.open(store, **options) as f:
        if args.command == "dump":
            return state_commands.cmd_dump(f, args.file, out)
        if args.command == "load":
            return state_commands.cmd_load(f, args.file, out, stdin)
        return frontier_commands.command(f, args, out, stdin)


def main() -> None:
    """Console-script entry point: every error is one ``crawlq: error:`` line."""
    try:
        sys.exit(run())
    except KeyboardInterrupt:
        sys.exit(report(CommandError("interrupted", status=130)))
    except Exception as exc:  # a bug: still one line (CRAWLQ_TRACEBACK=1 shows it whole)
        if os.environ.get("CRAWLQ_TRACEBACK"):
            raise
        sys.exit(report(CommandError(f"internal error, please report it: "
                                     f"{type(exc).__name__}: {exc} (CRAWLQ_TRACEBACK=1 "
                                     "shows where)")))
