"""``crawlq crawl --workers N``: N crawl processes on one store, one command.

Each worker is the same ``crawlq crawl`` command in a process of its own (a crawl uses
about a core and a half: its event loop, its parser threads), told by the environment
that it is worker ``i`` of ``N``: it writes its own output file (``pages.jsonl`` →
``pages.w1.jsonl``, ``pages.w2.jsonl``...), shows no progress line, and leaves its
summary for this process, which shows one progress line (from the store's counts) and
one summary (the workers' added up). Politeness needs nothing here: the store holds
every host's concurrency, delays and budgets for every process that shares it, which
is also how several machines running the same command on one Redis crawl share it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from ..crawler.config import Summary
from ..errors import CommandError
from .report import ERROR

WORKER = "CRAWLQ_CRAWL_WORKER"
"""The environment variable that makes a ``crawlq crawl`` worker ``I/N`` of a
``--workers N`` run (set by this module; not for users)."""
SUMMARY = "CRAWLQ_CRAWL_SUMMARY"
"""Where a worker leaves its summary (JSON), for the process that started it."""


def worker_index() -> tuple[int, int] | None:
    """(i, n) when this process is worker i of n, else None."""
    raw = os.environ.get(WORKER)
    if not raw:
        return None
    i, _, n = raw.partition("/")
    return int(i), int(n)


def worker_out(path: str, i: int) -> str:
    """Worker ``i``'s output file: ``NAME.wI.EXT`` beside ``path`` (``pages.jsonl`` →
    ``pages.w1.jsonl``; ``crawl.warc.gz`` → ``crawl.w1.warc.gz``)."""
    p = Path(path)
    stem, dot, rest = p.name.partition(".")
    return str(p.with_name(f"{stem}.w{i}{dot}{rest}"))


def check(store: str, out: str | None, n: int, metrics: int | None) -> None:
    """Refuse a ``--workers`` run that cannot share its crawl (CommandError)."""
    if metrics is not None:
        raise CommandError("--metrics serves one process's metrics: run --workers "
                           "without it (crawlq serve's /metrics shows a shared store)")
    if store.startswith("memory:"):
        raise CommandError(f"--workers {n} needs a store the workers share: --state DIR "
                           "(SQLite) or --store redis://... (a memory store is one "
                           "process's)")
    if out == "-":
        raise CommandError("--workers writes one output file per worker: give --out a "
                           "file name, not standard output")


class _Worker:
    """One worker process and what it said on stderr."""

    def __init__(self, argv: Sequence[str], i: int, n: int, folder: str) -> None:
        self.i = i
        self.summary_path = os.path.join(folder, f"summary{i}.json")
        env = {**os.environ, WORKER: f"{i}/{n}", SUMMARY: self.summary_path}
        # (a session of its own: a Ctrl-C at the terminal reaches this process only,
        # which passes one stop on; the terminal's signal to every process of the group
        # and ours would make two, which mean "stop at once")
        self.proc = subprocess.Popen([sys.executable, "-m", "crawlq.cli", *argv], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, errors="replace", start_new_session=True)
        self.error: str | None = None
        self._reader = threading.Thread(target=self._relay, args=(self.proc.stderr,),
                                        daemon=True)
        self._reader.start()

    def _relay(self, stream: IO[str] | None) -> None:
        """Pass the worker's log on (prefixed with its number); keep its error line."""
        if stream is None:
            return
        for line in stream:
            if line.startswith(ERROR):
                self.error = line[len(ERROR):].strip()
            else:
                sys.stderr.write(f"[w{self.i}] {line}")

    def wait(self) -> int:
        status = self.proc.wait()
        self._reader.join(5)
        return status

    def summary(self) -> Summary | None:
        try:
            return Summary.from_json(Path(self.summary_path).read_text())
        except (OSError, ValueError, TypeError):
            return None


def run(argv: Sequence[str], n: int, store: str, every: float | None) -> int:
    """Run ``argv`` (this ``crawlq crawl`` command line) as ``n`` workers on ``store``;
    show one progress line and one summary; returns the exit status."""
    with tempfile.TemporaryDirectory(prefix="crawlq-workers-") as folder:
        workers: list[_Worker] = []
        stops: list[int] = []

        def forward(signum: int, _frame: object) -> None:
            stops.append(signum)
            for w in workers:  # a second signal: at once
                w.proc.send_signal(signal.SIGTERM if len(stops) == 1 else signal.SIGKILL)

        old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            for i in range(1, n + 1):
                workers.append(_Worker(argv, i, n, folder))
            _progress(workers, store, every if every is not None else
                      (0.5 if sys.stderr.isatty() else 10.0))
            statuses = [w.wait() for w in workers]
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            for w in workers:  # (this process failed: none is left running alone)
                if w.proc.poll() is None:
                    w.proc.kill()
                    w.proc.wait()
        parts = [p for p in (w.summary() for w in workers) if p is not None]
    summary = Summary.combined(parts)
    summary.finished = summary.finished and len(parts) == len(workers)
    for line in summary.lines():
        print(line)
    print(f"({n} workers on {store})")
    failed = [(w, st) for w, st in zip(workers, statuses) if st != 0]
    if stops:
        return 128 + stops[0]
    if failed:
        w, st = failed[0]
        raise CommandError(f"worker {w.i} of {n} failed: {w.error or f'exit status {st}'}"
                           + (f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""),
                           status=st if 0 < st < 128 else 2)
    return 0


def _progress(workers: list[_Worker], store: str, every: float) -> None:
    """One progress line for the workers, from the store's counts, until they end."""
    from ..frontier import Frontier

    tty = sys.stderr.isatty()
    start = time.monotonic()
    last_done, last_t = 0, start
    frontier = None
    while any(w.proc.poll() is None for w in workers):
        deadline = time.monotonic() + every if every > 0 else None
        while any(w.proc.poll() is None for w in workers) and (
                deadline is None or time.monotonic() < deadline):
            time.sleep(0.05)
        if deadline is None or not any(w.proc.poll() is None for w in workers):
            continue
        try:
            if frontier is None:
                frontier = Frontier.open(store, create=False)
            st = frontier.stats()
        except Exception:  # (not there yet, or busy: the next tick shows it)
            continue
        now = time.monotonic()
        rate = (st.done - last_done) / max(now - last_t, 1e-9)
        last_done, last_t = st.done, now
        running = sum(w.proc.poll() is None for w in workers)
        line = (f"pages {st.done}  {rate:.1f}/s  queued {st.queued}  in flight {st.leased}"
                f"  workers {running}/{len(workers)}  {int(now - start)}s")
        print(f"\r\033[K{line}" if tty else line, end="" if tty else "\n",
              file=sys.stderr, flush=True)
    if frontier is not None:
        frontier.close()
    if tty:
        print("\r\033[K", end="", file=sys.stderr, flush=True)
