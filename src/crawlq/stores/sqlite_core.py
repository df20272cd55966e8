"""The SQLite store's foundation: its connection and the transaction every call runs in.

:class:`SQLiteCore` opens the file (WAL, the pragmas the store is tuned for), runs each
call as one ``BEGIN IMMEDIATE`` transaction (re-entrant inside a
:meth:`~SQLiteCore.transaction` block; held acknowledgements applied first: see
:mod:`.sqlite_group`), keeps the durable counters, and owns the one step that writes a
queue's changes and recomputes its state (:meth:`~SQLiteCore._apply`), with the entries
put back into level 0 (:meth:`~SQLiteCore._to_level0`). The calls themselves are in
:mod:`.sqlite_answers` (leases coming back), :mod:`.sqlite_admin` (looking and steering)
and :mod:`.sqlite` (add and lease), each a subclass of the one before.
"""

from __future__ import annotations

import abc
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence, Sized
from contextlib import contextmanager
from typing import Any

from ..errors import ConfigError, StoreError
from . import sqlite_leases
from .base import MAX_REDELIVERIES, Ack, QueuePolicy
from .bloom import BloomShape
from .sqlite_ahead import ReadAhead
from .sqlite_group import GROUP_COMMIT, GROUP_MAX, GroupCommit
from .sqlite_levels import drop_behind_cursors, settle_levels
from .sqlite_queues import QueueCache
from .sqlite_rows import CURSORS_AT, Delta, policy_of, settle
from .sqlite_schema import CURSOR_LEVELS, NO_CURSOR, initialize, store_error

MIN_SQLITE = (3, 35, 0)
"""The oldest SQLite the store runs on: it uses RETURNING (3.35), upserts (3.24) and row
values (3.15)."""
DEFAULT_CACHE_MB = 6.0
"""SQLite's page cache per connection, in MiB (option ``cache_mb``; SQLite's own default
is 2). A fixed amount: it does not grow with the queue."""

class SQLiteCore(abc.ABC):
    """The connection, the transaction and the queue-settling step every SQLite store call
    stands on (the store is :class:`crawlq.stores.sqlite.SQLiteStore`)."""

    def __init__(
        self,
        path: str,
        policy: QueuePolicy | None = None,
        *,
        lifo: bool = False,
        bloom: BloomShape | None = None,
        synchronous: str = "normal",
        busy_timeout: float = 60.0,
        cache_mb: float = DEFAULT_CACHE_MB,
        max_redeliveries: int = MAX_REDELIVERIES,
        group_commit: float = GROUP_COMMIT,
    ) -> None:
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
        self.policy = policy or QueuePolicy()
        self.lifo = lifo
        self.max_redeliveries = max_redeliveries
        self.group_commit = group_commit
        self._counts: dict[str, int] = {}  # counter changes of the transaction (_count)
        # Whether the expiries table may have rows (None: unknown, another connection
        # wrote): while it has none, answering a lease need not look there.
        self._expiries: bool | None = None
        # The earliest expiry of a named value (None: unknown, another connection
        # wrote; inf: none): until then waking need not look for values to drop.
        # The earliest time _wake may find a scheduled entry due, a lease call expired, a
        # rest ended or a named value's time up, as far as this connection knows (None:
        # not known; unknown again whenever another connection wrote, or a transaction
        # rolled back): before it, _wake's statements would find nothing and are
        # skipped. Every write of this connection that makes one lowers it
        # (_wake_no_sooner).
        self._wake_due: float | None = None
        self._bloom = bloom
        self._lock = threading.RLock()
        # Small acknowledgements, held until a transaction takes them (see release).
        self._group = GroupCommit(path, group_commit, self._lock, self._commit_held)
        self._queues = QueueCache()  # queue ids, keys and rows (sqlite_queues)
        self._policies: dict[tuple[Any, ...], QueuePolicy] = {}
        try:
            self._conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None,
                                         check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {path}: {_why_unopenable(path) or exc}") from exc
        try:
            self._conn.execute("PRAGMA journal_mode=WAL").fetchone()
            self._conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
            self._conn.execute("PRAGMA temp_store=MEMORY")
            # Debian builds SQLite with secure_delete on: every freed page (a next()
            # call's lease blob at done(), level 0 after a merge) is zeroed and written
            # to the WAL once more. FAST zeroes only where that costs no extra write.
            self._conn.execute("PRAGMA secure_delete=FAST")
            # (negative: KiB) A batch's level-0 pages and the seek paths of its
            # fingerprints do not fit SQLite's default 2 MiB, and each page that fell out
            # is read back from the WAL (docs/benchmarks.md, "why the SQLite store").
            self._conn.execute(f"PRAGMA cache_size={-max(1, round(cache_mb * 1024))}")
            # The WAL is checkpointed every 1,000 pages (SQLite's default) and cut back
            # to 4 MiB after each checkpoint, so it stays a small part of the store's
            # disk: with 10,000 pages and 64 MiB it stayed at its high-water mark, ~280
            # bytes per queued URL beside the database's ~70 (bench_frontier's disk
            # column, 348 -> 95 B/req), for no speed that the bench could tell apart.
            self._conn.execute("PRAGMA wal_autocheckpoint=1000")
            self._conn.execute("PRAGMA journal_size_limit=4194304")
            initialize(self._conn, path,
                       None if bloom is None else (bloom.capacity, bloom.error_rate), lifo)
        except sqlite3.Error as exc:
            self._conn.close()
            raise store_error(path, exc, "is not a usable crawlq store") from exc
        except BaseException:
            self._conn.close()
            raise
        self._version = -1  # (PRAGMA data_version when this connection last looked)
        # Entries read ahead by lease (sqlite_ahead), valid under the same rule as
        # queue rows, and while no entry is put before the last of them (_before_level0) and
        # no merge moves rows between levels (_settled).
        self._ahead = ReadAhead()
        self._closed = False
        self._tx_open = False  # (a transaction is open: see _tx)
        self._tx_doomed = False  # (a call in it failed: it must not commit)

    # -- plumbing ----------------------------------------------------------------------

    @contextmanager
    def _tx(self, leased: Sized | None = None) -> Iterator[sqlite3.Connection]:
        """One atomic step: BEGIN IMMEDIATE ... COMMIT, driver errors wrapped. Inside
        a :meth:`transaction` block (this thread's: the lock says so) a call joins it.
        ``leased``: a lease call's result, filled in the block; with fewer than
        GROUP_MAX leases the commit may wait for the calls that follow (see
        :mod:`.sqlite_group`). A call finding such a deferred transaction open joins it,
        and commits it unless it defers too."""
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed")
            c = self._conn
            if self._tx_open:
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
            group = self._group
            joined = group.open  # (a deferred transaction: it has held the lock since)
            if not joined:
                try:
                    c.execute("BEGIN IMMEDIATE")
                except sqlite3.Error as exc:
                    raise store_error(self.path, exc) from exc
            self._tx_open = True
            try:
                if not joined:
                    (version,) = c.execute("PRAGMA data_version").fetchone()
                    if version != self._version:  # another connection committed
                        self._queues.rows.clear()
                        self._ahead.forget()
                        self._expiries = self._wake_due = None
                        self._version = version
                taken = group.take()
                if taken is not None:  # every call sees the acknowledgements made before it
                    self._release(c, *taken)
                yield c
                if self._counts:
                    self._write_counts(c)
                if self._queues.stale:
                    self._queues.rows.clear()
                    self._queues.stale = False
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
                self._tx_open = self._tx_doomed = False

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """See :class:`~crawlq.stores.base.Transactions`: one SQLite transaction for the
        block; this thread's calls inside join it, other threads' wait for its end."""
        with self._tx():
            yield

    def _rollback(self) -> None:
        self._group.rolled_back()
        self._queues.rows.clear()  # it may hold changes that were not committed
        self._counts.clear()
        self._ahead.forget()
        self._wake_due = None
        self._queues.stale = False
        # (and queues created in the transaction: their qids may go to other keys)
        self._queues.forget_ids()
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    def _take(self, c: sqlite3.Connection, name: str, n: int) -> int:
        """Reserve ``n`` numbers of sequence ``name``; returns the last one before them."""
        (start,) = c.execute("SELECT value FROM meta WHERE name=?", (name,)).fetchone()
        if n:
            c.execute("UPDATE meta SET value=? WHERE name=?", (start + n, name))
        return int(start)

    def _count(self, c: sqlite3.Connection, **deltas: int) -> None:
        """Add to the durable counters: summed in memory and written once, at the end of
        the transaction (a small call changes several, some back and forth)."""
        counts = self._counts
        for k, v in deltas.items():
            if v:
                counts[k] = counts.get(k, 0) + v

    def _write_counts(self, c: sqlite3.Connection) -> None:
        c.executemany("UPDATE meta SET value = value + ? WHERE name = ?",
                      [(v, k) for k, v in self._counts.items() if v])
        self._counts.clear()

    def _policy(self, overrides: tuple[Any, ...]) -> QueuePolicy:
        return policy_of(self.policy, self._policies, overrides)

    def _settled(self, merged: bool) -> None:
        """After settle_levels: a merge may have reset cursors in queue rows, so none of
        the cached rows can be used (also not ones a caller read before it and writes
        back through _apply later in the transaction: forgotten again at its end)."""
        if merged:
            self._queues.rows.clear()
            self._ahead.forget()
            self._queues.stale = True

    def _wake_no_sooner(self, at: float) -> None:
        """Something of _wake's may be due at ``at`` (a scheduled entry, a lease call's
        expiry, a rest's end, a value's expiry, written in this transaction): it must
        not be skipped then."""
        due = self._wake_due
        if due is not None and at < due:
            self._wake_due = at

    def _apply(self, c: sqlite3.Connection, deltas: dict[int, Delta], now: float,
               rows: Iterable[tuple[Any, ...]] | None = None) -> None:
        """Write queue changes and recompute each queue's state (the one settle step).

        ``rows``: the queues' current rows (``QUEUE_COLS``) when the caller read them
        in this transaction already; otherwise they are read here.
        """
        if not deltas:
            return
        if rows is None:
            rows = self._queues.rows_of(c, list(deltas))
        rests: list[float] = []
        writes = settle(rows, deltas, now, self.policy, self._policies, self._queues.rows,
                        rests)
        for sql, args in writes.items():
            c.executemany(sql, args)
        if rests:
            self._wake_no_sooner(min(rests))

    def _before_level0(self, c: sqlite3.Connection, rows: Sequence[Sequence[Any]],
                       queue_rows: Iterable[Sequence[Any]] | None = None) -> set[int]:
        """Before ``rows`` (qid, nprio, ord, ...) go into level 0: a queue with one at or
        before its cursor there (a better priority than what it leased there, a lease
        come back) first drops what it leased there, and the cursor is reset, so that a
        cursor never passes a queued row. ``queue_rows``: the rows of (at least) those
        queues, when the caller has them. Returns those queues; their cached rows are
        forgotten (a caller holding them reads them again). A queue's entries read
        ahead are dropped too, unless all its new rows sort after them."""
        self._ahead.before(rows)
        if queue_rows is None:
            queue_rows = self._queues.rows_of(c, sorted({r[0] for r in rows}))
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
            self._queues.forget(behind)
        return set(behind)

    def _to_level0(self, c: sqlite3.Connection, rows: Sequence[sqlite_leases.LeaseRow],
                   deltas: dict[int, Delta], was_leased: bool) -> None:
        """Entries (qid, nprio, ord, retries, payload) into level 0 and their queues'
        deltas, for all but add (which settles its own rows in bulk). Under its old key,
        a lease come back goes to the head of its queue, where it was."""
        if not rows:
            return
        self._before_level0(c, rows)
        c.executemany("INSERT INTO entries0 VALUES (?,?,?,?,?)",
                      [(*e[:4], bytearray(e[4])) for e in rows])
        self._settled(settle_levels(c, "entries", len(rows)))
        for qid, nprio, *_ in rows:
            d = deltas.get(qid) or deltas.setdefault(qid, Delta())
            d.inflight -= was_leased
            d.queued += 1
            d.offer_head(nprio)

    @abc.abstractmethod
    def _release(self, c: sqlite3.Connection, acks: Sequence[Ack], now: float) -> list[bool]:
        """Apply ``acks`` in the transaction ``c`` (:class:`.sqlite_answers.SQLiteAnswers`:
        ``_tx`` applies the held ones with it)."""

    def _commit_held(self) -> None:
        """Commit the held acknowledgements now (an empty transaction takes them)."""
        with self._tx():
            pass

    def _reject(self, c: sqlite3.Connection, reasons: Mapping[str, int]) -> None:
        c.executemany("INSERT INTO rejected (reason, n) VALUES (?, ?) ON CONFLICT(reason) "
                      "DO UPDATE SET n = n + excluded.n", list(reasons.items()))

    def close(self) -> None:
        """See :meth:`Store.close` (held acknowledgements are committed first)."""
        with self._lock:
            if not self._closed:
                try:
                    if self._group.pending:
                        self._commit_held()
                finally:
                    self._closed = True
                    self._group.close()
                    self._conn.close()


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
        return f"no permission to create files in {parent}"
    return None

