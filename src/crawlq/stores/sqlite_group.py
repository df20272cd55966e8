"""Group commit of the SQLite store's small acknowledgements.

A ``done()`` per fetched page, as a crawler's loop makes them, would cost a transaction
each (a commit, ~50-170 µs). Instead a small call is answered at once, from what the
store object knows of the leases it made (:class:`~crawlq.stores.sqlite_leases.OwnCalls`;
a lease it did not make is read from the file), and held: the next transaction of any
call applies it first thing, or the flusher thread commits it ``wait`` seconds after the
first answer was held, whichever comes first. A crash in between undoes those answers
(their leases expire and the pages are fetched again), never an add.

:class:`GroupCommit` keeps the held answers and runs the flusher; the store owns the
lock they share and the transaction that applies them (see ``SQLiteCore._tx``).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence

from ..errors import StoreError
from . import sqlite_leases
from .base import Ack
from .sqlite_schema import store_error

log = logging.getLogger("crawlq.stores.sqlite")

GROUP_COMMIT = 0.005
"""Default longest wait of a small acknowledgement for others to share its transaction
(seconds; the ``group_commit`` store option, 0: every call commits on its own)."""
GROUP_MAX = 1000
"""Acknowledgements held at most: a call of as many is committed on its own, and the
held ones are committed when they reach it."""
FLUSHER_IDLE = 1.0
"""Seconds without an answer held before the flusher waits untimed (for a notify)."""


class GroupCommit:
    """The answers held by one store object, and the thread that commits them.

    Every method but :meth:`holds` is called with the store's lock held (the lock given
    here, which the flusher's condition shares); ``commit`` runs an empty transaction
    of the store, which takes the held answers (:meth:`take`).
    """

    def __init__(self, path: str, wait: float, lock: threading.RLock,
                 commit: Callable[[], None]) -> None:
        self.path = path
        self.wait = wait
        self.own = sqlite_leases.OwnCalls()  # (to check held answers without a read)
        self.closed = False
        self._acks: list[Ack] = []
        self._tokens: set[int] = set()  # (their leases that were open: answered once)
        self._now = 0.0  # the latest time of a held call (rests start from it)
        self._since = 0.0  # (monotonic) when the first of them was held
        self._taken: tuple[list[Ack], float] | None = None  # (in the open transaction)
        self._commit = commit
        self._cv = threading.Condition(lock)  # answers were held, or the store closed
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._idle = False  # (the flusher waits without a timeout: it needs a notify)

    @property
    def pending(self) -> bool:
        """Whether answers are held."""
        return bool(self._acks)

    def holds(self, n: int) -> bool:
        """Whether a call answering ``n`` leases is held (else it commits on its own)."""
        return self.wait > 0 and n < GROUP_MAX

    def hold(self, conn: sqlite3.Connection, acks: Sequence[Ack], now: float) -> list[bool]:
        """Hold ``acks``; per answer, whether its lease was open (a token answered twice
        counts once; an answer another process gave first is found at the commit,
        where this one counts as late)."""
        take, held = self.own.take, self._tokens
        out: list[bool] = []
        unknown: list[int] = []  # (not leased by this object: read from the file)
        for a in acks:
            was = take(a[0], now)
            if was is None:
                unknown.append(len(out))
            out.append(was is True)
        if unknown:
            try:
                read = sqlite_leases.open_tokens(conn, [acks[i][0] for i in unknown])
            except sqlite3.Error as exc:
                raise store_error(self.path, exc) from exc
            for i, was_open in zip(unknown, read):
                out[i] = was_open
        for i, a in enumerate(acks):
            if out[i]:
                if a[0] in held:
                    out[i] = False
                else:
                    held.add(a[0])
        was_empty = not self._acks
        self._acks.extend(acks)  # (the others count as late at the commit)
        self._now = max(self._now, now)
        if len(self._acks) >= GROUP_MAX:
            self._commit()
        elif was_empty:
            self._since = time.monotonic()
            self._wake()
        return out

    def take(self) -> tuple[list[Ack], float] | None:
        """The held answers and their time, now the open transaction's to apply."""
        if not self._acks:
            return None
        self._taken = (self._acks, self._now)
        self._acks, self._tokens, self._now = [], set(), 0.0
        return self._taken

    def committed(self) -> None:
        """The transaction that took them committed."""
        self._taken = None

    def rolled_back(self) -> None:
        """The transaction did not commit: what it took is held again, for the next
        call; what this object knew of leases may be of calls that were undone."""
        if self._taken is not None:
            acks, now = self._taken
            self._taken = None
            self._acks[:0] = acks
            self._tokens.update(a[0] for a in acks)
            self._now = max(self._now, now)
        self.own = sqlite_leases.OwnCalls()

    def close(self) -> None:
        """The store closed: the flusher returns."""
        self.closed = True
        self._cv.notify_all()

    def _wake(self) -> None:
        """Tell the flusher that answers are held (started on first use, and again in a
        forked child, which has no threads)."""
        pid = os.getpid()
        if self._thread is None or self._pid != pid:
            self._pid = pid
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"crawlq-group-commit:{self.path}")
            self._thread.start()
        if self._idle:
            self._cv.notify()

    def _run(self) -> None:
        """The flusher: commits held answers ``wait`` seconds after the first of them
        was held, unless a transaction took them first. One thread for the store's
        life: a ``threading.Timer`` per wait cost ~220 µs of CPU (a Scrapy crawl holds
        answers hundreds of times a minute). While answers keep coming it looks every
        ``wait`` seconds rather than being woken for each first answer held: a loop of
        ``next()`` then ``done()`` holds one answer per call, and each wake-up cost
        ~30 µs of its ~200."""
        with self._cv:
            while not self.closed:
                if not self._acks:
                    if time.monotonic() - self._since > FLUSHER_IDLE:
                        self._idle = True  # (quiet: sleep until told)
                        self._cv.wait()
                        self._idle = False
                    else:
                        self._cv.wait(self.wait)
                    continue
                wait = self._since + self.wait - time.monotonic()
                if wait > 0:
                    self._cv.wait(wait)
                    continue
                try:
                    self._commit()
                except StoreError:  # (held again: the next call retries, and says why)
                    log.warning("committing held acknowledgements of %s failed", self.path,
                                exc_info=True)
                    self._cv.wait(1.0)  # (then again: a busy store may clear)
