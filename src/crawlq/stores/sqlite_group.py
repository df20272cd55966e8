"""Group commit of the SQLite store's small acknowledgements and small leases.

A ``done()`` per fetched page, as a crawler's loop makes them, would cost a transaction
each (a commit, ~50-170 µs). Instead a small call is answered at once, from what the
store object knows of the leases it made (:class:`~crawlq.stores.sqlite_leases.OwnCalls`;
a lease it did not make is read from the file), and held: the next transaction of any
call applies it first thing, or the flusher thread commits it ``wait`` seconds after the
first answer was held, whichever comes first.

A small ``next()`` (fewer than ``GROUP_MAX`` leases) runs its statements at once but
leaves its transaction open ("deferred"): the calls that follow join it, and the first
call that must be durable when it returns (an add, any call but a small lease), the
flusher after ``wait`` seconds, or a lease call finding the transaction ``wait`` seconds
old commits it. A crash in between undoes those answers (their leases expire and the
pages are fetched again) and those leases (their requests were never leased: they are
handed out again at once), never an add.

:class:`GroupCommit` keeps the held answers, knows whether a deferred transaction is
open, and runs the flusher; the store owns the lock they share and the transaction
that applies them (see ``Database.tx`` in :mod:`.sqlite_db`).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Sequence

from ..errors import StoreError
from . import sqlite_leases
from .base import Ack
from .sqlite_schema import store_error

if sys.platform != "win32":  # (no flock there: nothing is deferred, see Openers)
    import fcntl

log = logging.getLogger("crawlq.stores.sqlite")

GROUP_COMMIT = 0.005
"""Default longest wait of a small acknowledgement or lease call for others to share its
transaction (seconds; the ``group_commit`` store option, 0: every call commits on its
own)."""
GROUP_MAX = 1000
"""Acknowledgements held at most: a call of as many is committed on its own, and the
held ones are committed when they reach it."""
FLUSHER_IDLE = 1.0
"""Seconds without an answer held before the flusher waits untimed (for a notify)."""
OPEN_SUFFIX = "-open"
"""The file beside a database whose locks tell who has it open (see :class:`Openers`)."""
SQLITE_SUFFIXES = ("", "-wal", "-shm", OPEN_SUFFIX)
"""A SQLite store's files: the database, SQLite's two beside it, and the one whose
locks tell who has it open."""


class Openers:
    """Whether a store object is the only one with its database open, in any process.

    Each store object holds a shared ``flock`` on the file ``<database>-open`` from
    open to close; only one alone can take it exclusively. (A guide, not a guard: at
    worst, in a rare race with a closing store object, two store objects each believe
    they are alone and take turns less fairly; nothing is leased twice either way.)
    A deferred transaction holds SQLite's write lock between calls: another connection
    waiting for it sleeps in SQLite's busy handler and, woken at its own pace, seldom
    finds the lock free (measured: one of four worker processes never wrote). So a
    small lease call's commit is deferred only while its store object is alone.
    Without ``flock`` (Windows) or the file (a read-only directory) nothing is
    deferred.
    """

    def __init__(self, path: str) -> None:
        self._fd = -1
        self._pid = os.getpid()
        self._path = path + OPEN_SUFFIX
        self._private = path in ("", ":memory:")  # (a database no one else can open)
        if self._private or sys.platform == "win32":
            return
        for _ in range(100):  # (the last store object to close removes the file)
            try:
                fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError:
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
                st, now = os.fstat(fd), os.stat(self._path)
                if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino):
                    self._fd = fd
                    return
            except OSError:
                pass
            os.close(fd)  # (removed as it was locked: open the new one)

    def alone(self) -> bool:
        """Whether no other store object has the database open now (two syscalls)."""
        if self._private:
            return True
        if self._fd < 0 or os.getpid() != self._pid:  # (a forked child shares the lock)
            return False
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            alone = True
        except OSError:  # (Linux drops the shared lock before it fails to convert it)
            alone = False
        fcntl.flock(self._fd, fcntl.LOCK_SH)  # (shared again: others may open)
        return alone

    def close(self) -> None:
        """Let go of the lock; the last store object to close removes the file (an
        opener that locked it meanwhile sees it gone and opens a new one)."""
        if self._fd < 0:
            return
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(self._path)
        except OSError:
            pass
        os.close(self._fd)
        self._fd = -1


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
        # The held calls, each with its time (each is applied at its own time, as if
        # it had committed on its own), and how many answers they hold.
        self._calls: list[tuple[float, Sequence[Ack]]] = []
        self._n = 0
        self._tokens: set[int] = set()  # (their leases that were open: answered once)
        self._since = 0.0  # (monotonic) when the first of them was held
        self._taken: list[tuple[float, Sequence[Ack]]] | None = None  # (in the open tx)
        self.open = False  # a deferred transaction is open on the store's connection
        self.openers = Openers(path)
        self._commit = commit
        self._cv = threading.Condition(lock)  # answers were held, or the store closed
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._idle = False  # (the flusher waits without a timeout: it needs a notify)

    @property
    def pending(self) -> bool:
        """Whether answers are held or a deferred transaction is open: the store has
        work that is not committed yet."""
        return self.open or bool(self._calls)

    def may_defer(self) -> bool:
        """Whether a small lease call's transaction may stay open: group commit is on,
        and what the transaction holds uncommitted (a deferred transaction joined, or
        answers it took) is younger than ``wait``."""
        if self.wait <= 0 or self.closed:
            return False
        started = self.open or self._taken is not None
        if started and time.monotonic() - self._since >= self.wait:
            return False
        return self.openers.alone()

    def defer(self) -> None:
        """The open transaction stays open, for the flusher or a later call to commit
        (at the latest ``wait`` after its oldest uncommitted work)."""
        if not self.open:
            if self._taken is None:  # (else its clock runs from the first answer held)
                self._since = time.monotonic()
            self.open = True
            self._wake()

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
                read = sqlite_leases.open_tokens(conn, [acks[i][0] for i in unknown], now)
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
        was_empty = not self.pending
        self._calls.append((now, acks))  # (the others count as late at the commit)
        self._n += len(acks)
        if self._n >= GROUP_MAX:
            self._commit()
        elif was_empty:
            self._since = time.monotonic()
            self._wake()
        return out

    def take(self) -> list[tuple[float, Sequence[Ack]]] | None:
        """The held calls (time, answers), in the order they were made, now the open
        transaction's to apply."""
        if not self._calls:
            return None
        taken = self._calls
        if self._taken is None:
            self._taken = list(taken)
        else:  # a deferred transaction took (and applied) some before: all are held
            self._taken.extend(taken)  # again if it rolls back
        self._calls, self._tokens, self._n = [], set(), 0
        return taken

    def committed(self) -> None:
        """The transaction that took them committed."""
        self._taken = None
        self.open = False

    def rolled_back(self) -> None:
        """The transaction did not commit: what it took is held again, for the next
        call; what this object knew of leases may be of calls that were undone."""
        self.open = False
        if self._taken is not None:
            taken, self._taken = self._taken, None
            self._calls[:0] = taken
            self._n += sum(len(acks) for _, acks in taken)
            self._tokens.update(a[0] for _, acks in taken for a in acks)
        self.own = sqlite_leases.OwnCalls()

    def close(self) -> None:
        """The store closed: the flusher returns."""
        self.closed = True
        self.openers.close()
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
                if not self.pending:
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
