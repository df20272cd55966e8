"""The SQLite store's database: the storage machinery under :class:`~.sqlite.SQLiteStore`.

:class:`Database` owns the connection and the transaction every call runs in (with
group commit: :mod:`.sqlite_group`), what this connection keeps between transactions
(queue ids and rows, :mod:`.sqlite_queues`; entries read ahead, :mod:`.sqlite_ahead`;
named values' names, :mod:`.sqlite_values`) and when it must forget it (another
connection wrote, a rollback), when waking may next find something, the durable
counters and sequences, and the writing of entries into level 0 with the levels' merges
(:mod:`.sqlite_levels`). It knows nothing of what a call does to queues: that is the
store's, through the queue engine (:mod:`.rules`). It holds the acknowledgements held
for group commit and hands them to the store in the next transaction
(:meth:`Database.take_held`); its flusher thread commits them through the store's own
call (``flush``), the one way back from it to the store.
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from contextlib import contextmanager
from typing import Any

from ..errors import ConfigError, StoreError, StoreReadOnly
from . import sqlite_leases
from .base import Ack
from .rules import RESTING
from .sqlite_ahead import ReadAhead
from .sqlite_group import GROUP_MAX, GroupCommit
from .sqlite_levels import drop_behind_cursors, settle_levels
from .sqlite_queues import QueueCache
from .sqlite_rows import CURSORS_AT, Delta
from .sqlite_schema import CURSOR_LEVELS, NO_CURSOR, initialize, store_error
from .sqlite_values import ValueLog

MIN_SQLITE = (3, 35, 0)
"""The oldest SQLite the store runs on: it uses RETURNING (3.35), upserts (3.24) and row
values (3.15)."""
DEFAULT_CACHE_MB = 6.0
"""SQLite's page cache per connection, in MiB (option ``cache_mb``; SQLite's own default
is 2). A fixed amount: it does not grow with the queue."""

Held = list[tuple[float, Sequence[Ack]]]
"""Calls held for group commit: each call's time and answers, in the order made."""


class Database:
    """One SQLite store file as one connection sees it (see the module's docstring)."""

    def __init__(self, path: str, *, synchronous: str, busy_timeout: float, cache_mb: float,
                 bloom: tuple[int, float] | None, lifo: bool, grouped: bool,
                 group_commit: float, flush: Callable[[], None]) -> None:
        if synchronous.lower() not in ("normal", "full", "off"):
            raise ConfigError("synchronous must be 'normal', 'full' or 'off'")
        if not 0 < cache_mb <= 1 << 20:
            raise ConfigError(f"cache_mb is SQLite's page cache in MiB (0 < cache_mb <= "
                              f"1048576): got {cache_mb!r}")
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            # (otherwise the first RETURNING would fail as "near RETURNING: syntax error",
            # which reads like a broken file)
            raise StoreError(
                f"the SQLite store needs SQLite >= {'.'.join(map(str, MIN_SQLITE))}; this "
                f"Python's sqlite3 module uses {sqlite3.sqlite_version} (a newer Python or "
                "distribution has it; or use memory:// or redis://)")
        self.path = path
        self._held: Held | None = None  # (see take_held)
        self._counts: dict[str, int] = {}  # counter changes of the transaction (count)
        self.expiries: bool | None = None
        """Whether the expiries table may have rows (None: unknown, another connection
        wrote): while it has none, answering a lease need not look there."""
        self.wake_due: float | None = None
        """The earliest time waking may find a scheduled entry due, a lease call
        expired, a rest ended or a named value's time up, as far as this connection
        knows (None: not known; unknown again whenever another connection wrote, or a
        transaction rolled back): before it, waking's statements would find nothing and
        are skipped. Every write of this connection that makes one lowers it
        (:meth:`wake_no_sooner`)."""
        self.events_due: float | None = None
        """The same for scheduled entries and lease expiries alone (rests and values
        left out): the answers of held calls are applied together while none is due
        between them."""
        self.lock = threading.RLock()
        self.group = GroupCommit(path, group_commit, self.lock, flush)
        """Small acknowledgements held until a transaction takes them, and small lease
        calls' transactions left open (:mod:`.sqlite_group`)."""
        self.queues = QueueCache()
        """Queue ids, keys and rows (:mod:`.sqlite_queues`)."""
        self.queues.grouped = grouped
        try:
            self.conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None,
                                        check_same_thread=False)
        except sqlite3.Error as exc:
            why = _why_unopenable(path)
            # (a folder that cannot be written: read-only, as a write to the store is)
            kind = StoreReadOnly if why is not None and why.startswith(_NO_WRITE) else \
                StoreError
            raise kind(f"cannot open {path}: {why or exc}") from exc
        try:
            _wal_mode(self.conn, busy_timeout)
            self.conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
            self.conn.execute("PRAGMA temp_store=MEMORY")
            # Debian builds SQLite with secure_delete on: every freed page (a next()
            # call's lease blob at done(), level 0 after a merge) is zeroed and written
            # to the WAL once more. FAST zeroes only where that costs no extra write.
            self.conn.execute("PRAGMA secure_delete=FAST")
            # (negative: KiB) A batch's level-0 pages and the seek paths of its
            # fingerprints do not fit SQLite's default 2 MiB, and each page that fell out
            # is read back from the WAL (docs/benchmarks.md, "why the SQLite store").
            self.conn.execute(f"PRAGMA cache_size={-max(1, round(cache_mb * 1024))}")
            # The WAL is checkpointed every 1,000 pages (SQLite's default) and cut back
            # to 4 MiB after each checkpoint, so it stays a small part of the store's
            # disk: with 10,000 pages and 64 MiB it stayed at its high-water mark, ~280
            # bytes per queued URL beside the database's ~70 (bench_frontier's disk
            # column, 348 -> 95 B/req), for no speed that the bench could tell apart.
            self.conn.execute("PRAGMA wal_autocheckpoint=1000")
            self.conn.execute("PRAGMA journal_size_limit=4194304")
            initialize(self.conn, path, bloom, lifo, grouped, self.group.openers.alone)
        except BaseException as exc:
            self.conn.close()
            with self.lock:  # (its lock on the file: this store object never opened)
                self.group.close()
            if isinstance(exc, sqlite3.Error):
                raise store_error(path, exc, "is not a usable crawlq store") from exc
            raise
        self._version = -1  # (PRAGMA data_version when this connection last looked)
        self.epoch: int | None = None
        """meta's queue_epoch when this connection last looked (None: look again)."""
        self.ahead = ReadAhead()
        """Entries read ahead by lease (:mod:`.sqlite_ahead`), valid under the same rule
        as queue rows, and while no entry is put before the last of them
        (:meth:`before_level0`) and no merge moves rows between levels
        (:meth:`settled`)."""
        self.values = ValueLog()
        """Named values: the log's names (:mod:`.sqlite_values`)."""
        self.closed = False
        self.tx_open = False
        """A transaction is open (see :meth:`tx`)."""
        self._tx_doomed = False  # (a call in it failed: it must not commit)

    def close(self) -> None:
        """Close the connection and stop the flusher (once; the store commits what is
        held first)."""
        with self.lock:
            if not self.closed:
                self.closed = True
                self.group.close()
                self.conn.close()

    def cleared(self) -> None:
        """After every table but ``meta`` was emptied in this transaction (the store's
        ``clear``): nothing this connection kept between calls holds any more."""
        self.epoch = None
        self._counts.clear()
        self.queues.forget_ids()
        self.queues.rows.clear()
        self.ahead.forget()
        self.expiries = False
        self.wake_due = self.events_due = None
        self.group.own = sqlite_leases.OwnCalls()  # (the leases it made are gone)

    def note_due(self, c: sqlite3.Connection, values_next: str) -> None:
        """After waking: when the next of its events may be due, each through its
        index (scheduled_due, lease_calls_expiry, queues_resting; ``values_next``, the
        SQL of the named values' next expiry)."""
        times = c.execute(
            "SELECT (SELECT min(due) FROM scheduled), (SELECT min(expires) FROM lease_calls), "
            f"(SELECT min(ready_at) FROM queues WHERE state={RESTING}), "
            f"({values_next})").fetchone()
        self.wake_due = min((float(t) for t in times if t is not None), default=math.inf)
        self.events_due = min((float(t) for t in times[:2] if t is not None),
                              default=math.inf)

    @contextmanager
    def tx(self, leased: Sized | None = None) -> Iterator[sqlite3.Connection]:
        """One atomic step: BEGIN IMMEDIATE ... COMMIT, driver errors wrapped. Inside
        a :meth:`transaction` block (this thread's: the lock says so) a call joins it.
        ``leased``: a lease call's result, filled in the block; with fewer than
        GROUP_MAX leases the commit may wait for the calls that follow (see
        :mod:`.sqlite_group`). A call finding such a deferred transaction open joins it,
        and commits it unless it defers too."""
        with self.lock:
            if self.closed:
                raise StoreError("the store is closed")
            c = self.conn
            if self.tx_open:
                if self._tx_doomed:
                    raise StoreError("a call in this transaction failed: the transaction "
                                     "is rolled back at the end of its block")
                try:
                    yield c
                except BaseException as exc:  # (it may have done half its work)
                    self._tx_doomed = True
                    if isinstance(exc, sqlite3.Error):
                        raise store_error(self.path, exc) from exc
                    raise
                return
            group = self.group
            joined = group.open  # (a deferred transaction: it has held the lock since)
            if not joined:
                try:
                    c.execute("BEGIN IMMEDIATE")
                except sqlite3.Error as exc:
                    raise store_error(self.path, exc) from exc
            self.tx_open = True
            try:
                if not joined:
                    (version,) = c.execute("PRAGMA data_version").fetchone()
                    if version != self._version:  # another connection committed
                        self.queues.rows.clear()
                        (epoch,) = c.execute(
                            "SELECT value FROM meta WHERE name='queue_epoch'").fetchone()
                        if epoch != self.epoch:  # it deleted queues (or cleared)
                            self.queues.forget_ids()
                            self.epoch = epoch
                        self.ahead.forget()
                        self.values.others_wrote()
                        self.expiries = self.wake_due = self.events_due = None
                        self._version = version
                # (every call sees the acknowledgements made before it: the store
                # applies them first, take_held)
                self._held = group.take()
                yield c
                if self._counts:
                    self.write_counts(c)
                if self.queues.stale:
                    self.queues.rows.clear()
                    self.queues.stale = False
                if self._tx_doomed:
                    raise StoreError("a call in this transaction failed: the transaction "
                                     "was rolled back")
                if leased is not None and len(leased) < GROUP_MAX and group.may_defer():
                    group.defer()
                else:
                    c.execute("COMMIT")
                    group.committed()
            except sqlite3.Error as exc:
                self._rollback()
                raise store_error(self.path, exc) from exc
            except BaseException:
                self._rollback()
                raise
            finally:
                self.tx_open = self._tx_doomed = False

    def _rollback(self) -> None:
        self._held = None  # (the group holds them again)
        self.group.rolled_back()
        self.queues.rows.clear()  # it may hold changes that were not committed
        self._counts.clear()
        self.ahead.forget()
        self.values.forget()
        self.wake_due = self.events_due = None
        self.queues.stale = False
        # (and queues created in the transaction: their qids may go to other keys)
        self.queues.forget_ids()
        try:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    def take_held(self) -> Held | None:
        """The calls held for group commit that the transaction just begun took from
        the group (once; None: none, or a transaction joined): its first work, applied
        by the store, each call at its own time."""
        held, self._held = self._held, None
        return held

    def know_expiries(self, c: sqlite3.Connection) -> None:
        """Find out whether the expiries table has rows, if not known (see __init__)."""
        if self.expiries is None:
            self.expiries = c.execute(
                "SELECT EXISTS (SELECT 1 FROM expiries)").fetchone()[0] == 1

    def take(self, c: sqlite3.Connection, name: str, n: int) -> int:
        """Reserve ``n`` numbers of sequence ``name``; returns the last one before them."""
        (start,) = c.execute("SELECT value FROM meta WHERE name=?", (name,)).fetchone()
        if n:
            c.execute("UPDATE meta SET value=? WHERE name=?", (start + n, name))
        return int(start)

    def count(self, c: sqlite3.Connection, **deltas: int) -> None:
        """Add to the durable counters: summed in memory and written once, at the end of
        the transaction (a small call changes several, some back and forth)."""
        counts = self._counts
        for k, v in deltas.items():
            if v:
                counts[k] = counts.get(k, 0) + v

    def write_counts(self, c: sqlite3.Connection) -> None:
        c.executemany("UPDATE meta SET value = value + ? WHERE name = ?",
                      [(v, k) for k, v in self._counts.items() if v])
        self._counts.clear()

    def reject(self, c: sqlite3.Connection, reasons: Mapping[str, int]) -> None:
        c.executemany("INSERT INTO rejected (reason, n) VALUES (?, ?) ON CONFLICT(reason) "
                      "DO UPDATE SET n = n + excluded.n", list(reasons.items()))

    def settled(self, merged: bool) -> None:
        """After settle_levels: a merge may have reset cursors in queue rows, so none of
        the cached rows can be used (also not ones a caller read before it and writes
        back through _apply later in the transaction: forgotten again at its end)."""
        if merged:
            self.queues.rows.clear()
            self.ahead.forget()
            self.queues.stale = True

    def wake_no_sooner(self, at: float, event: bool = True) -> None:
        """Something of _wake's may be due at ``at`` (a scheduled entry or a lease call's
        expiry: an ``event``; a rest's end or a value's expiry: not), written in this
        transaction: it must not be skipped then."""
        due = self.wake_due
        if due is not None and at < due:
            self.wake_due = at
        due = self.events_due
        if event and due is not None and at < due:
            self.events_due = at

    def before_level0(self, c: sqlite3.Connection, rows: Sequence[Sequence[Any]],
                       queue_rows: Iterable[Sequence[Any]] | None = None) -> set[int]:
        """Before ``rows`` (qid, nprio, ord, ...) go into level 0: a queue with one at or
        before its cursor there (a better priority than what it leased there, a lease
        come back) first drops what it leased there, and the cursor is reset, so that a
        cursor never passes a queued row. ``queue_rows``: the rows of (at least) those
        queues, when the caller has them. Returns those queues; their cached rows are
        forgotten (a caller holding them reads them again). A queue's entries read
        ahead are dropped too, unless all its new rows sort after them."""
        self.ahead.before(rows)
        if queue_rows is None:
            queue_rows = self.queues.rows_of(c, sorted({r[0] for r in rows}))
        at = CURSORS_AT + 2 * CURSOR_LEVELS.index(0)
        # (most queues have no cursor there: only theirs need their new rows' keys)
        cursors = {q[0]: (q[at], q[at + 1]) for q in queue_rows if q[at] != NO_CURSOR}
        if not cursors:
            return set()
        behind: dict[int, tuple[int, int, int]] = {}
        for r in rows:
            cur = cursors.get(r[0])
            if cur is not None and (r[1], r[2]) <= cur:
                behind[r[0]] = (r[0], *cur)
        if behind:
            drop_behind_cursors(c, 0, sorted(behind.values()))
            self.queues.forget(behind)
        return set(behind)

    def to_level0(self, c: sqlite3.Connection, rows: Sequence[sqlite_leases.LeaseRow],
                   deltas: dict[int, Delta], was_leased: bool,
                   targets: Sequence[Delta] | None = None) -> None:
        """Entries (qid, nprio, ord, retries, payload) into level 0 and their queues'
        deltas (``targets``: each row's own, else its queue's in ``deltas``), for all but
        add (which settles its own rows in bulk)."""
        if not rows:
            return
        self.before_level0(c, rows)
        c.executemany("INSERT INTO entries0 VALUES (?,?,?,?,?)",
                      [(*e[:4], bytearray(e[4])) for e in rows])
        self.settled(settle_levels(c, "entries", len(rows)))
        for i, (qid, nprio, *_) in enumerate(rows):
            if targets is not None:
                d = targets[i]
            else:
                d = deltas.get(qid) or deltas.setdefault(qid, Delta())
            d.inflight -= was_leased
            d.queued += 1
            d.offer_head(nprio)

    @staticmethod
    def add_tally(c: sqlite3.Connection, name: str, delta: int) -> int:
        c.execute("INSERT INTO tallies VALUES (?1, max(0, ?2)) ON CONFLICT(name) DO UPDATE "
                  "SET n = max(0, n + ?2)", (name, delta))
        (n,) = c.execute("SELECT n FROM tallies WHERE name=?", (name,)).fetchone()
        return int(n)


_NO_WRITE = "no permission to create files in"


def _wal_mode(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """Put the database in WAL mode, waiting up to ``busy_timeout`` for the lock. Two
    processes opening a new store file at once (``crawlq crawl --workers``) both switch
    it, and the switch needs the file to itself: SQLite answers the one that finds it
    taken "database is locked" at once, without its busy handler (seen: a worker died
    at open, 1 in ~40 runs of two workers), so the wait is ours."""
    deadline = time.monotonic() + busy_timeout
    pause = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL").fetchone()
            return
        except sqlite3.OperationalError as exc:
            code = getattr(exc, "sqlite_errorcode", None)
            busy = code & 0xFF == 5 if isinstance(code, int) else "locked" in str(exc)
            if not busy or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _why_unopenable(path: str) -> str | None:
    """Why SQLite could not open ``path``, in the user's terms: SQLite says only "unable
    to open database file" for a missing directory, a directory or a denied write."""
    target = os.path.abspath(path)
    if os.path.isdir(target):
        return "it is a directory, not a file"
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        hint = ""
        if not os.path.isabs(path):
            # sqlite:///x is relative; people often mean sqlite:////x.
            hint = (f" (sqlite:///{path} is relative to the current directory "
                    f"{os.getcwd()}; write sqlite:////{path} for /{path})")
        return f"the directory {parent} does not exist{hint}"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{_NO_WRITE} {parent}"
    return None

