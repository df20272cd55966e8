"""The SQLite store: the embedded, durable default.

Every Store call is one ``BEGIN IMMEDIATE`` transaction in WAL mode, so a process killed
at any moment leaves the file at the last committed call, and several processes can
share one file (writers take turns; no entry is ever leased twice). Small
acknowledgements and small lease calls are group-committed with the calls that follow
(:mod:`.sqlite_group`): a crash undoes at most those, never an add. With
``synchronous=normal`` (the default) a committed call survives a killed process; with
``synchronous=full`` it survives a power loss too, at a cost in speed.

:class:`SQLiteStore` is the store as the queue engine sees it: what each call does to
queues, through :mod:`.rules` (the lease pass, answers, waking, parking, steering,
listings, deleting, dump and load), and the one settling step that writes a queue's
changed numbers (:meth:`SQLiteStore._apply`, with :func:`.sqlite_rows.settle`). Under it
is its :class:`~.sqlite_db.Database` (:mod:`.sqlite_db`), the storage machinery: the
connection, the transaction every call runs in, group commit (:mod:`.sqlite_group`),
what is cached between calls (queue rows, :mod:`.sqlite_queues`; entries read ahead,
:mod:`.sqlite_ahead`; value names, :mod:`.sqlite_values`), counters and sequences, and
writing entries into the levels (:mod:`.sqlite_levels`). The other parts, each in its
module: the schema and the checks of a file (:mod:`.sqlite_schema`), the per-row steps
compiled by mypyc (:mod:`.sqlite_rows`: settling a queue row, add's verdicts, a lease
round), the leases of each call (:mod:`.sqlite_leases`) and the dump's reader
(:mod:`.sqlite_dump`).
"""

from __future__ import annotations

import math
import os
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from contextlib import contextmanager
from typing import Any

from ..errors import ConfigError, StoreError
from ..models import QueueInfo, Stats
from . import dumpfmt, sqlite_dump, sqlite_leases
from .base import (
    ACK_DONE,
    ACK_REQUEUE,
    MAX_REDELIVERIES,
    QUEUE_SETTINGS,
    REFUSALS,
    Ack,
    DeadEntry,
    Entry,
    Leased,
    Pick,
    QueuePolicy,
    check_settings,
    expired_error,
)
from .bloom import BLOCK_BYTES, BloomShape
from .policy import typed_settings
from .rules import (
    BUSY,
    DIES,
    EXHAUSTED,
    GONE,
    HEAD,
    LAST,
    LATER,
    READY,
    RESTING,
    TAIL,
    answer_place,
    domain_room,
    event_times,
    expired_once,
    groups,
    is_parked,
    joins_line,
    label,
    lease_room,
    park,
    rounds,
    share_domains,
    unparked_first,
)
from .sqlite_ahead import NO_HEAD
from .sqlite_db import DEFAULT_CACHE_MB, Database
from .sqlite_group import GROUP_COMMIT, SQLITE_SUFFIXES
from .sqlite_levels import (
    FIRST_ENTRIES,
    SeenTx,
    chunks,
    insert_rows,
    marks,
    settle_levels,
)
from .sqlite_queues import Domains
from .sqlite_rows import (
    CURSORS_AT,
    Q_ACCEPTED,
    Q_INFLIGHT,
    Q_QID,
    Q_QUEUED,
    Q_READY_AT,
    Q_SESSION,
    SETTINGS_AT,
    Delta,
    admit,
    order_of,
    policy_of,
    settle,
    take_rows,
)
from .sqlite_schema import (
    COUNTERS,
    CURSOR_LEVELS,
    ENTRY_LEVELS,
    NO_CURSOR,
    SEEN_LEVELS,
    domains_of_queues,
)
from .sqlite_values import NEXT_EXPIRY

__all__ = ["DEFAULT_CACHE_MB", "SQLiteStore"]


class SQLiteStore:
    """Durable store in one SQLite file; see :class:`crawlq.stores.base.Store`.

    Each call runs in its database's transaction (:meth:`.sqlite_db.Database.tx`, the
    held acknowledgements applied first), wakes what came due (:meth:`_wake`), and
    writes each queue it changed through the one settling step (:meth:`_apply`, with
    :func:`.sqlite_rows.settle`)."""

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
        self.in_process = str(synchronous).lower() != "full"
        """Whether its calls are work of this process rather than waits: in WAL mode
        with ``synchronous=normal`` a commit is a write to the page cache, no fsync
        (``full`` waits for one per commit). :class:`~crawlq.aio.AsyncFrontier` then
        calls it on the event loop: on a worker thread the same Python work would hold
        the GIL all the same, and the hand-offs cost a crawl about a third of its pages/s
        (bench_crawl, measured)."""
        self.path = path
        self.policy = policy or QueuePolicy()
        self.lifo = lifo
        self.max_redeliveries = max_redeliveries
        self.group_commit = group_commit
        self._bloom = bloom
        self._policies: dict[tuple[Any, ...], QueuePolicy] = {}
        self._db = Database(
            path, synchronous=synchronous, busy_timeout=busy_timeout, cache_mb=cache_mb,
            bloom=None if bloom is None else (bloom.capacity, bloom.error_rate), lifo=lifo,
            grouped=groups(self.policy), group_commit=group_commit,
            flush=self._commit_held)
        """The file as this connection sees it: the transaction each call runs in and
        what is kept between calls (:mod:`.sqlite_db`)."""

    # -- the store's life -------------------------------------------------------------

    @contextmanager
    def _tx(self, leased: Sized | None = None) -> Iterator[sqlite3.Connection]:
        """One call's transaction (:meth:`.sqlite_db.Database.tx`: joined where one is
        open, deferred for a small lease call), whose first work is to apply the
        acknowledgements held for group commit, each call at its own time."""
        with self._db.tx(leased) as c:
            held = self._db.take_held()
            if held is not None:
                self._release(c, held)
            yield c

    def _commit_held(self) -> None:
        """Commit the held acknowledgements now (an empty transaction takes them): the
        flusher's call, and close's."""
        with self._tx():
            pass

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """See :class:`~crawlq.stores.base.Transactions`: one SQLite transaction for the
        block; this thread's calls inside join it, other threads' wait for its end."""
        with self._tx():
            yield

    def close(self) -> None:
        """See :meth:`Store.close` (held acknowledgements are committed first)."""
        with self._db.lock:
            if not self._db.closed:
                try:
                    if self._db.group.pending:
                        self._commit_held()
                finally:
                    self._db.close()

    def destroy(self) -> int:
        """See :meth:`~crawlq.stores.base.Destroyable.destroy`: closes the store, then
        deletes its files (``SQLITE_SUFFIXES``); returns how many there were."""
        self.close()
        n = 0
        for suffix in SQLITE_SUFFIXES:
            try:
                os.remove(self.path + suffix)
                n += 1
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StoreError(f"cannot delete {self.path + suffix}: "
                                 f"{exc.strerror}") from exc
        return n

    # -- the calls of a crawl ------------------------------------------------------

    def add(self, entries: Sequence[Entry], now: float) -> list[int]:
        """See :meth:`Store.add`."""
        if not entries:
            return []
        with self._tx() as c:
            queues = self._db.queues
            # Queues the batch would make: made now, and dropped at the end if their
            # domain refused them (or all their entries were duplicates).
            new_keys = queues.existing(c, dict.fromkeys([e[1] for e in entries]))
            grouped = groups(self.policy)
            domains = Domains(c, self.policy, queues, new_keys)
            made = set(queues.create(c, new_keys, grouped))
            qids = queues.qids
            used = sorted({qids[e[1]] for e in entries})
            qrows = queues.rows_of(c, used)
            rows = {r[0]: r for r in qrows}
            accepted = {qid: rows[qid][Q_ACCEPTED] for qid in used}
            policies = {qid: self._policy(tuple(rows[qid][SETTINGS_AT:])) for qid in used}
            dids: dict[int, int] = {}  # (none: the domain rules are off)
            if grouped:
                known = queues.dids_of(c, used)  # (copied: the cache may drop ids)
                dids = {qid: dv for qid in used if (dv := known[qid]) is not None}
                domains.read_accepted(c, set(dids.values()))
            seen = SeenTx(c, self._bloom)
            seen.prefetch([e[0] for e in entries if e[0] is not None])
            seq = self._db.take(c, "entry_seq", len(entries))
            out, new_rows, later, dups, seen_added, seq = admit(
                entries, qids, policies, accepted, seen.marks, now, seq, self.lifo,
                dids, domains.accepted, domains.queues, made)
            deltas: dict[int, Delta] = {}
            if new_rows:
                new_rows.sort()  # in key order: inserts walk the b-tree once
                # Per queue: its rows are a run, the first of them its best (a candidate head).
                last = None
                for row in new_rows:
                    if row[0] != last:
                        last = row[0]
                        d = deltas[last] = Delta()
                        d.head = row[1]
                    d.queued += 1
                reset = self._db.before_level0(c, new_rows, qrows)
                if reset:  # (rows read before are stale there: their cursors changed)
                    fresh = {r[0]: r for r in self._db.queues.rows_of(c, sorted(reset))}
                    qrows = [fresh.get(r[0], r) for r in qrows]
                insert_rows(c, "INSERT INTO entries0", 5, new_rows)
                self._db.settled(settle_levels(c, "entries", len(new_rows)))
            if later:
                c.executemany("INSERT INTO scheduled (due, qid, nprio, ord, retries, payload) "
                              "VALUES (?,?,?,?,?,?)", later)
                self._db.wake_no_sooner(min(r[0] for r in later))
            seen.flush()
            for qid, n in accepted.items():
                if n != rows[qid][Q_ACCEPTED]:
                    d = deltas.get(qid) or deltas.setdefault(qid, Delta())
                    d.accepted = n - rows[qid][Q_ACCEPTED]
            if made:  # (made for entries that were all refused or duplicates)
                queues.drop(c, sorted(made))
                qrows = [r for r in qrows if r[0] not in made]
            self._apply(c, deltas, now, qrows)
            if dids:
                domains.write_accepted(c, dids, accepted, rows)
            if len(new_rows) + len(later) + dups < len(out):
                refused = Counter(REFUSALS[st] for st in out if st in REFUSALS)
                self._db.reject(c, refused)
            n = len(new_rows) + len(later)
            self._db.count(c, added=n, seen=seen_added, duplicates=dups, queued=n,
                        scheduled=len(later))
        return out

    def lease(self, now: float, limit: int, ttl: float,
              queue: str | None = None) -> list[Leased]:
        """See :meth:`Store.lease`."""
        out: list[Leased] = []
        if limit <= 0:
            return out
        expires = now + ttl
        with self._tx(leased=out) as c:
            self._wake(c, now)
            self._db.ahead.called()
            token = first = self._db.take(c, "lease_seq", 0)
            first += 1
            # the leases' entries, for sqlite_leases.write: FIELDS ints each, and payloads
            ints: list[int] = []
            payloads: list[bytes] = []
            again = True
            while again and len(out) < limit:
                # (passes: a queue whose session ended without a rest is ready again at
                # once, behind the others, and may give more in this call)
                token, again = self._lease_pass(c, now, limit, expires, queue, out, ints,
                                                payloads, token)
            if not out:
                return out
            sqlite_leases.write(c, first, expires, ints, payloads)
            self._db.wake_no_sooner(expires)
            self._db.group.own.made(first, token, expires)
            c.execute("UPDATE meta SET value=? WHERE name='lease_seq'", (token,))
            self._db.count(c, leased=len(out), queued=-len(out))
        return out

    def _lease_pass(self, c: sqlite3.Connection, now: float, limit: int, expires: float,
                    queue: str | None, out: list[Leased], ints: list[int],
                    payloads: list[bytes], token: int) -> tuple[int, bool]:
        """One pass of :meth:`lease` over the ready line, its leases numbered after
        ``token``; the last token given, and whether a queue it served may be ready
        again (its session ended)."""
        # The ready queues in line (the index alone), their rows from the cache.
        if queue is None:
            active = [r[0] for r in c.execute(
                f"SELECT qid FROM queues WHERE state={READY} ORDER BY head, since, key "
                "LIMIT ?", (limit - len(out),))]
        else:
            active = [r[0] for r in c.execute(
                f"SELECT qid FROM queues WHERE state={READY} AND key=?", (queue,))]
        free: dict[int, int] = {}  # did -> leases its domain may give, for capped ones
        if active and self.policy.domain_concurrency > 0:
            active, free = self._domain_line(c, active, now, limit - len(out),
                                             queue is None)
        if not active:
            return token, False
        cands = self._db.queues.rows_of(c, active)
        keys = self._db.queues.keys_of(c, active)
        # qid -> the keys of the last entries it leased from each level past 0 (see
        # sqlite_schema): nprio (NO_CURSOR: none), ord per CURSOR_LEVELS
        cursor = {r[0]: r[CURSORS_AT:SETTINGS_AT] for r in cands}
        room = self._room(c, active, cands, free)
        taken: dict[int, int] = {}
        # qid -> its head after the call when known exactly (NO_HEAD: none left in
        # the levels; MAYBE_MORE: read on below; None: not known, looked up)
        after: dict[int, Any] = {}
        for each in rounds([room[qid] for qid in active], limit - len(out)):
            got: list[tuple[Any, ...]] = []
            if all(k == 1 for _, k in each):  # (one from each: read ahead, or heads)
                got = self._db.ahead.take(c, [active[i] for i, _ in each], cursor, after,
                                       cands)
            else:
                for i, k in each:
                    qid = active[i]
                    got += self._db.ahead.take_first(c, qid, k, cursor[qid], after)
            token = take_rows(got, cursor, keys, token, expires, ints, payloads, out,
                              taken)
        self._db.ahead.read_on(c, after, cursor)
        deltas: dict[int, Delta] = {}
        for qid, k in taken.items():
            d = deltas[qid] = Delta()
            d.inflight = k
            d.queued = -k
            d.session = k
            d.served = True
            head = after.get(qid)
            if head is None:
                d.recompute = True
            else:
                d.head, d.exact = (None if head is NO_HEAD else head), True
            d.cursor = cursor[qid]  # (every entry leased moved a cursor)
        spent = self._apply(c, deltas, now, cands)
        return token, bool(spent)

    def _room(self, c: sqlite3.Connection, line: list[int], rows: Iterable[Sequence[Any]],
              free: dict[int, int]) -> dict[int, int]:
        """qid -> how many leases each of these ready queues (``rows``, of ``line`` in
        its order) may give in this call (:func:`.rules.lease_room`), sharing the room
        of their domain (``free``, for capped ones: :func:`.rules.share_domains`)."""
        room = {r[0]: lease_room(self._policy(tuple(r[SETTINGS_AT:])), r[Q_INFLIGHT],
                                 r[Q_SESSION], r[Q_QUEUED]) for r in rows}
        if free:
            dids = self._db.queues.dids_of(c, line)
            rooms = [room[qid] for qid in line]
            share_domains(rooms, [-1 if (dv := dids[qid]) is None else dv for qid in line],
                          free)
            room.update(zip(line, rooms))
        return room

    def _domain_line(self, c: sqlite3.Connection, active: list[int], now: float,
                     want: int, more: bool) -> tuple[list[int], dict[int, int]]:
        """A lease call's line under ``domain_concurrency``: of the ready queues
        ``active`` (the first of the line), those whose domain has room for one more
        lease than its queues ahead of them take; the others are parked, not served,
        and (``more``) the line goes on past them, up to ``want`` queues.
        Returns the line and the room of each of its domains (did -> leases)."""
        queues = self._db.queues
        line: list[int] = []
        inflight: dict[int, int] = {}  # did -> its leases out
        ahead: dict[int, int] = {}
        while active:
            dids = queues.dids_of(c, active)
            unknown = sorted({dv for qid in active if (dv := dids[qid]) is not None}
                             - inflight.keys())
            inflight.update(dict.fromkeys(unknown, 0))
            for part in chunks(unknown):
                inflight.update(c.execute(
                    "SELECT did, sum(inflight) FROM queues WHERE inflight > 0 "
                    "AND did IS NOT NULL AND did IN "
                    f"({marks(len(part))}) GROUP BY did", part))
            ready_at = {r[Q_QID]: r[Q_READY_AT] for r in queues.rows_of(c, active)}
            resting: dict[int, Delta] = {}
            parked: list[tuple[float, int]] = []
            for qid in active:
                qdid = dids[qid]
                if qdid is None:  # (a queue without a domain: no cap)
                    line.append(qid)
                    continue
                n = ahead.get(qdid, 0)
                if joins_line(self.policy, inflight[qdid], n):
                    ahead[qdid] = n + 1
                    line.append(qid)
                else:
                    d = resting[qid] = Delta()
                    d.ready_at, until = park(ready_at[qid], now)
                    if until:
                        parked.append((until, qid))
            if not resting:
                break
            self._apply(c, resting, now)
            c.executemany("UPDATE queues SET parked=? WHERE qid=?", parked)
            if not more or len(line) >= want:
                break
            # (the queues rested left the line's index: those in the line come first)
            active = [r[0] for r in c.execute(
                f"SELECT qid FROM queues WHERE state={READY} ORDER BY head, since, key "
                "LIMIT ? OFFSET ?", (want - len(line), len(line)))]
        return line, {did: domain_room(self.policy, inflight[did]) for did in ahead}

    def renew(self, tokens: Sequence[int], expires: float, now: float) -> list[bool]:
        """See :meth:`Store.renew` (per ``next()`` call: see sqlite_leases.renew)."""
        with self._tx() as c:
            self._wake(c, now)
            held = sqlite_leases.renew(c, tokens, expires)
        with self._db.lock:  # (once committed)
            self._db.group.own.renewed([t for t, ok in zip(tokens, held) if ok], expires)
        return held

    def release(self, acks: Sequence[Ack], now: float) -> list[bool]:
        """See :meth:`Store.release`.

        Group commit (:mod:`~crawlq.stores.sqlite_group`): a small call is answered at
        once and held, to be applied at the start of the next transaction (any call's)
        or by the flusher thread after ``group_commit`` seconds; a crash in between
        undoes those acknowledgements (their leases expire and the pages are fetched
        again), never an add. Rests start from the latest of the held calls' times."""
        if not acks:
            return []
        if not self._db.group.holds(len(acks)) or self._db.tx_open:
            # (in a transaction block: applied in it, nothing held; another thread's
            # call waits for the block and then commits on its own)
            with self._tx() as c:
                applied = self._release(c, [(now, acks)])
            with self._db.lock:  # (once committed: a failed call answered nothing)
                self._db.group.own.answered(a[0] for a in acks)
            return applied
        with self._db.lock:
            if self._db.closed:
                raise StoreError("the store is closed")
            return self._db.group.hold(self._db.conn, acks, now)

    def _release(self, c: sqlite3.Connection,
                 calls: Sequence[tuple[float, Sequence[Ack]]]) -> list[bool]:
        """Apply the answers of ``calls`` (each a call's time and answers, in the order
        they were made: one call, or the calls held for group commit) in the transaction
        ``c``, each as if it had been applied on its own at its time: what came due by
        then woken first (an answer after its lease's expiry is late, whether or not a
        call noticed the expiry), its rests counted from then. Returns, per answer of
        every call, whether its lease was still held.

        The leases are closed for all calls at once (one read and write per lease call,
        which per-lease ``done()`` calls share); the queues' changes are applied in runs
        of calls that touch distinct queues with nothing coming due between them (each
        queue settled at its own answer's time), which gives what one call after the
        other gives."""
        first_at = calls[0][0]
        self._wake(c, first_at)
        self._db.know_expiries(c)
        # token -> when it was first answered: a lease that expired by then is late
        when: dict[int, float] = {}
        for at, acks in calls:
            for a in acks:
                when.setdefault(a[0], at)
        # token -> (qid, nprio) of each open lease among them, now closed; the whole
        # entry of those that go back, die or wait (a token answered twice: its first
        # answer wins, the second finds it closed)
        everything = [a for _, acks in calls for a in acks]
        held, entries = sqlite_leases.answer(
            c, when, set(when) if self._db.expiries
            else {a[0] for a in everything if a[1] != ACK_DONE})
        if self.policy.domain_concurrency > 0:
            self._unpark_answered(c, held, when)
        if self._db.expiries:
            # Entries done or dead end their expiry counts (retried ones keep them).
            ended = {a[0] for a in everything if a[1] != ACK_REQUEUE}
            c.executemany("DELETE FROM expiries WHERE qid=? AND nprio=? AND ord=?",
                          [e[:3] for t, e in entries.items() if t in ended])
        out: list[bool] = []
        run = _AnswerRun()
        for at, acks in calls:
            # (a rest that ends between the calls is no reason to stop a run: a queue
            # settled from resting gets the same place whenever its rest's end is seen;
            # a queue answered again in a later call gets its changes chained, applied
            # after the earlier ones, at their time: Delta.then)
            if run.calls and (self._db.events_due is None or at >= self._db.events_due):
                self._apply_answers(c, run)
                run = _AnswerRun()
                self._wake(c, at)
            run.calls += 1
            run.at = at
            mine: dict[int, Delta] = {}  # (this call's changes, per queue)
            for token, kind, duration, not_before, retries, error, failed, delay in acks:
                h = held.pop(token, None)
                if h is None:
                    out.append(False)
                    run.late += 1
                    continue
                out.append(True)
                qid, nprio = h
                d = mine.get(qid)
                if d is None:
                    d = mine[qid] = Delta()
                    d.at = at
                    before = run.last.get(qid)
                    if before is None:
                        run.deltas[qid] = d
                    else:
                        before.then = d
                    run.last[qid] = d
                d.inflight -= 1
                d.answered(duration, delay)
                place = answer_place(kind, not_before, at)
                if place == GONE:
                    run.done += 1
                elif place == DIES:
                    e = entries[token]
                    run.dead.append((qid, -nprio, retries, bytearray(e[4]), error or "", at))
                    run.failed += 1
                else:
                    run.retried += 1
                    run.failed += failed
                    e = entries[token]
                    if place == LATER:
                        run.later.append((not_before, qid, nprio, e[2], retries,
                                          bytearray(e[4])))
                    else:
                        run.back.append((run.calls, token, (qid, nprio, e[2], retries, e[4]),
                                         d))
        if run.calls:
            self._apply_answers(c, run)
        return out

    def _apply_answers(self, c: sqlite3.Connection, run: _AnswerRun) -> None:
        """Write a run of answers (see :meth:`_release`): dead entries, entries back in
        their queues or scheduled, the queues' changes, the counters."""
        if run.dead:
            c.executemany("INSERT INTO dead (qid, prio, retries, payload, error, died_at) "
                          "VALUES (?,?,?,?,?,?)", run.dead)
        # Back at the head of their queues: call by call, several of one call in the
        # order they were leased (numbered latest lease first: rules.HEAD).
        run.back.sort(key=lambda b: (b[0], -b[1]))
        back = self._renumbered(c, [b[2] for b in run.back], HEAD)
        self._db.to_level0(c, back, run.deltas, False,  # (inflight counted above)
                        [b[3] for b in run.back])
        if run.later:
            c.executemany("INSERT INTO scheduled (due, qid, nprio, ord, retries, payload) "
                          "VALUES (?,?,?,?,?,?)", run.later)
            self._db.wake_no_sooner(min(r[0] for r in run.later))
        self._apply(c, run.deltas, run.at)
        requeued = len(run.back) + len(run.later)
        n_dead = len(run.dead)
        self._db.count(c, done=run.done, failed=run.failed, retried=run.retried, dead=n_dead,
                    late_acks=run.late, leased=-(run.done + n_dead + requeued),
                    queued=requeued, scheduled=len(run.later))

    def next_ready_at(self, now: float) -> float | None:
        """See :meth:`Store.next_ready_at`."""
        with self._tx() as c:
            self._wake(c, now)
            if c.execute(f"SELECT 1 FROM queues WHERE state={READY} LIMIT 1").fetchone():
                return now
            (at,) = c.execute(
                f"SELECT min(t) FROM (SELECT min(ready_at) AS t FROM queues WHERE state={RESTING} "
                "UNION ALL SELECT min(due) FROM scheduled "
                "UNION ALL SELECT min(expires) FROM lease_calls)").fetchone()
            return None if at is None else float(at)

    # -- waking: due entries, expired leases, ended rests --------------------------

    def _wake(self, c: sqlite3.Connection, now: float) -> None:
        """Expired leases back to their queues, due entries in, rested queues ready;
        named values whose time is up dropped.

        Due entries and expired leases are settled in time order, each at its own time
        (due entries first at equal times, as the memory store takes them): a queue they
        make ready has waited since then, not since the call that noticed."""
        due = self._db.wake_due
        if due is not None and now < due:
            return  # nothing can be due yet (see Database.wake_due)
        self._wake_events(c, now)
        self._db.values.expire(c, now)  # values whose time is up
        self._db.note_due(c, NEXT_EXPIRY)

    def _wake_events(self, c: sqlite3.Connection, now: float) -> None:
        """_wake's due entries, expired leases and ended rests. Time by time: the
        entries due then join their queues as if added then (in the order they were
        scheduled), then the leases that expired then come back at the head of their
        queues (several in the order they were leased) or, past ``max_redeliveries``
        expiries, die; each queue settled at that time (rules.entry_rank)."""
        due = c.execute(
            "DELETE FROM scheduled WHERE due <= ? RETURNING due, id, qid, nprio, ord, "
            "retries, payload", (now,)).fetchall()
        expired = sqlite_leases.expire(c, now)
        if due or expired:
            self._db.know_expiries(c)
            due.sort(key=lambda r: (r[0], r[1]))
            expired.sort(key=lambda e: (e[0], e[1]))  # (by time, then lease order)
            n_back = n_buried = 0
            i = j = 0
            for at, i_end, j_end in event_times([r[0] for r in due],
                                                [e[0] for e in expired]):
                deltas: dict[int, Delta] = {}
                rows = [r[2:] for r in due[i:i_end]]
                self._db.to_level0(c, self._renumbered(c, rows, TAIL), deltas, False)
                gone = [e[2] for e in expired[j:j_end]]
                i, j = i_end, j_end
                back, dead = self._expired(c, gone, at)
                # (back at the head: numbered latest lease first, so that they keep the
                # order they were leased in; the dead are kept in lease order)
                self._db.to_level0(c, self._renumbered(c, back[::-1], HEAD), deltas, True)
                for qid in dead:
                    (deltas.get(qid) or deltas.setdefault(qid, Delta())).inflight -= 1
                self._apply(c, deltas, at)
                n_back += len(back)
                n_buried += len(dead)
            self._db.count(c, redelivered=n_back, leased=-n_back - n_buried, queued=n_back,
                        dead=n_buried, failed=n_buried, scheduled=-len(due))
        # A rest's end, in bulk: a resting queue has entries and room (else it would be
        # exhausted or busy), so it is ready, and has waited since its rest ended
        # (rules.state_of, rules.ready_since).
        self._db.queues.forget(r[0] for r in c.execute(
            f"UPDATE queues SET state={READY}, since=ready_at, parked=NULL "
            f"WHERE state={RESTING} "
            "AND ready_at <= ? RETURNING qid", (now,)).fetchall())

    def _renumbered(self, c: sqlite3.Connection, rows: Sequence[sqlite_leases.LeaseRow],
                    place: int) -> list[sqlite_leases.LeaseRow]:
        """``rows`` (qid, nprio, ord, retries, payload), in this order, numbered anew at
        ``place`` (rules.TAIL, HEAD); an entry's count of expired leases follows it."""
        if not rows:
            return []
        seq = self._db.take(c, "entry_seq", len(rows))
        out = []
        moves = []
        for qid, nprio, old, retries, payload in rows:
            seq += 1
            order = order_of(seq, self.lifo, place)
            out.append((qid, nprio, order, retries, payload))
            moves.append((order, qid, nprio, old))
        if self._db.expiries:
            c.executemany("UPDATE expiries SET ord=? WHERE qid=? AND nprio=? AND ord=?",
                          moves)
        return out

    def _expired(self, c: sqlite3.Connection, rows: Sequence[sqlite_leases.LeaseRow],
                 at: float) -> tuple[list[sqlite_leases.LeaseRow], list[int]]:
        """The entries of leases that expired at ``at``: those that come back, and the
        queue of each that died, past ``max_redeliveries`` expiries. An entry's count is
        a row of ``expiries`` under its key (qid, nprio, ord), which follows it."""
        cap = self.max_redeliveries
        back: list[sqlite_leases.LeaseRow] = []
        dead: list[int] = []
        counts: list[tuple[int, int, int, int]] = []
        gone: list[tuple[int, int, int]] = []
        dead_rows: list[tuple[Any, ...]] = []
        for row in rows:
            key = (row[0], row[1], row[2])
            got = c.execute("SELECT n FROM expiries WHERE qid=? AND nprio=? AND ord=?",
                            key).fetchone() if self._db.expiries else None
            n, dies = expired_once(got[0] if got else 0, cap)
            if dies:
                gone.append(key)
                dead_rows.append((row[0], -row[1], row[3], bytearray(row[4]),
                                  expired_error(n, cap), at))
                dead.append(row[0])
            else:
                counts.append((*key, n))
                back.append(row)
        c.executemany("INSERT OR REPLACE INTO expiries VALUES (?,?,?,?)", counts)
        c.executemany("DELETE FROM expiries WHERE qid=? AND nprio=? AND ord=?", gone)
        c.executemany("INSERT INTO dead (qid, prio, retries, payload, error, died_at) "
                      "VALUES (?,?,?,?,?,?)", dead_rows)
        if counts:
            self._db.expiries = True
        return back, dead

    # -- steps every call stands on: sequences, counters, settling queues, level 0 ---

    def _policy(self, overrides: tuple[Any, ...]) -> QueuePolicy:
        return policy_of(self.policy, self._policies, overrides)

    def _apply(self, c: sqlite3.Connection, deltas: dict[int, Delta], now: float,
               rows: Iterable[tuple[Any, ...]] | None = None) -> list[int]:
        """Write queue changes and recompute each queue's state (the one settle step).
        Returns the queues whose session a lease call spent (:func:`.rules.served`).

        ``rows``: the queues' current rows (``QUEUE_COLS``) when the caller read them
        in this transaction already; otherwise they are read here.
        """
        spent: list[int] = []
        if not deltas:
            return spent
        if rows is None:
            rows = self._db.queues.rows_of(c, list(deltas))
        rests: list[float] = []
        writes = settle(rows, deltas, now, self.policy, self._policies, self._db.queues.rows,
                        rests, spent)
        for sql, args in writes.items():
            c.executemany(sql, args)
        if rests:
            self._db.wake_no_sooner(min(rests), event=False)
        if self.policy.domain_concurrency > 0:
            # Leases that ended make as many parked queues of their domains ready
            # (rules), each at the time its lease ended.
            freed: list[tuple[float, int, int]] = []  # (time, qid, leases ended)
            for qid, d in deltas.items():
                step: Delta | None = d
                while step is not None:
                    if step.inflight < 0:
                        freed.append((now if step.at is None else step.at, qid,
                                      -step.inflight))
                    step = step.then
            if freed:
                self._unpark(c, freed)
        return spent

    def _unpark_answered(self, c: sqlite3.Connection, held: Mapping[int, Any],
                         when: Mapping[int, float]) -> None:
        """End the park of each parked queue a lease of which these answers end
        (``held``: token -> (qid, ...); ``when``: token -> the time of its answer), at
        its first answer's time: the rest after its answer must not be absorbed in the
        park's end (see rules)."""
        first: dict[int, float] = {}
        for token, h in held.items():
            at = when[token]
            if at < first.get(h[0], math.inf):
                first[h[0]] = at
        # (the parked queues, few but in a trap, by their own index; then those answered)
        # (a park that ended by the answer's time is over: the queue was ready then)
        parked = [qid for qid, state, ready_at, until in c.execute(
            "SELECT qid, state, ready_at, parked FROM queues INDEXED BY queues_parked "
            "WHERE parked IS NOT NULL")
            if qid in first and is_parked(state, ready_at, until, first[qid])]
        if parked:
            c.executemany("UPDATE queues SET ready_at=?, parked=NULL WHERE qid=?",
                          [(first[qid], qid) for qid in parked])
            self._db.queues.forget(parked)

    def _unpark(self, c: sqlite3.Connection, freed: list[tuple[float, int, int]]) -> None:
        """Make ready, per domain, as many of its parked queues as it ended leases
        (``freed``: time, qid, leases ended), the longest parked first, each at the time
        of the lease that ended (see rules)."""
        dids = self._db.queues.dids_of(c, [qid for _, qid, _ in freed])
        by_time: dict[float, dict[int, int]] = {}
        for t, qid, n in freed:
            did = dids[qid]
            if did is not None:
                per = by_time.setdefault(t, {})
                per[did] = per.get(did, 0) + n
        for t in sorted(by_time):
            want = by_time[t]
            parked: dict[int, list[tuple[float, str, int]]] = {}
            for part in chunks(sorted(want)):  # (one seek per domain, in one statement)
                for did, qid, state, ready_at, until, key in c.execute(
                        "SELECT did, qid, state, ready_at, parked, key FROM queues WHERE "
                        f"parked IS NOT NULL AND did IN ({marks(len(part))})", part):
                    if is_parked(state, ready_at, until, t):
                        parked.setdefault(did, []).append((until, key, qid))
            ready: list[int] = []
            for did, rows in parked.items():
                ready += unparked_first(rows, want[did], t)
            if ready:
                c.executemany("UPDATE queues SET ready_at=?, parked=NULL WHERE qid=?",
                              [(t, qid) for qid in ready])
                self._db.queues.forget(ready)
                self._apply(c, {qid: Delta() for qid in ready}, t)

    # -- steering ------------------------------------------------------------------

    def block(self, queue: str, until: float, now: float) -> None:
        """See :meth:`Store.block`."""
        with self._tx() as c:
            self._wake(c, now)  # (a rest that ended is seen: the queue keeps its place)
            qid = self._db.queues.qid_map(c, [queue])[queue]
            self._end_park(c, qid, now)  # (a block replaces a park: see rules)
            d = Delta()
            d.ready_at = until
            self._apply(c, {qid: d}, now)

    def _end_park(self, c: sqlite3.Connection, qid: int, now: float) -> None:
        """End the park of queue ``qid``, if it is parked, at ``now`` (a park that ended
        by then is over: the queue was ready since its end)."""
        row = c.execute("SELECT state, ready_at, parked FROM queues WHERE qid=?",
                        (qid,)).fetchone()
        if row[2] is not None and is_parked(row[0], row[1], row[2], now):
            c.execute("UPDATE queues SET ready_at=?, parked=NULL WHERE qid=?", (now, qid))
            self._db.queues.forget([qid])

    def unblock(self, queue: str, now: float) -> None:
        """See :meth:`Store.unblock`."""
        with self._tx() as c:
            row = c.execute("SELECT qid FROM queues WHERE key=? AND ready_at>?",
                            (queue, now)).fetchone()
            if row is None:
                return
            c.execute("UPDATE queues SET ready_at=? WHERE qid=?", (now, row[0]))
            self._db.queues.forget([row[0]])
            self._apply(c, {row[0]: Delta()}, now)

    def configure_queue(self, queue: str, settings: Mapping[str, float | None],
                        now: float) -> None:
        """See :meth:`Store.configure_queue`."""
        clean = check_settings(settings)
        if not clean:
            return
        with self._tx() as c:
            qid = self._db.queues.qid_map(c, [queue])[queue]
            cols = ", ".join(f"{k}=?" for k in clean)
            c.execute(f"UPDATE queues SET {cols} WHERE qid=?", (*clean.values(), qid))
            self._db.queues.forget([qid])
            self._apply(c, {qid: Delta()}, now)

    def clear(self) -> None:
        """See :meth:`Store.clear`: one transaction empties
        every table but ``meta``, whose counters start again from zero."""
        with self._tx() as c:
            self._db.values.clear(c)
            for table in ("rejected", "bloom", "queues", "domains", "scheduled", "tallies",
                          "expiries",
                          "dead", "lease_calls", "lease_data", *SEEN_LEVELS, *ENTRY_LEVELS):
                c.execute(f"DELETE FROM {table}")
            # (the sequences go on: a late answer to a lease of before must not find a
            # lease of after under its token)
            c.executemany("UPDATE meta SET value=0 WHERE name=?",
                          [(n,) for n in COUNTERS
                           if n not in ("entry_seq", "lease_seq", "queue_epoch", "vals_seq",
                                        "vals_merged")])
            c.execute("UPDATE meta SET value=value+1 WHERE name='queue_epoch'")
            self._db.cleared()

    def set_policy(self, policy: QueuePolicy) -> None:
        """See :meth:`Store.set_policy`. Answers held for
        group commit are applied first, under the policy of their time."""
        with self._db.lock:
            if self._db.group.pending:
                self._commit_held()
            if groups(policy) and not groups(self.policy):
                with self._tx() as c:
                    domains_of_queues(c)
                    self._db.queues.forget_ids()  # (their domains changed)
            self.policy = policy
            self._policies.clear()  # (each queue's policy is this one merged)
            self._db.queues.grouped = groups(policy)

    def count_rejected(self, reasons: Mapping[str, int]) -> None:
        """See :meth:`Store.count_rejected`."""
        with self._tx() as c:
            self._db.reject(c, reasons)

    def count_duplicates(self, n: int) -> None:
        """See :meth:`Store.count_duplicates`."""
        with self._tx() as c:
            self._db.count(c, duplicates=n)

    def put_values(self, items: Sequence[tuple[str, bytes, float | None]]) -> None:
        """See :meth:`Store.put_values`."""
        with self._tx() as c:
            self._db.values.put(c, items)
            expiries = [e for _, _, e in items if e is not None]
            if expiries:
                self._db.wake_no_sooner(min(expiries), event=False)

    def tally(self, deltas: Mapping[str, int]) -> list[int]:
        """See :meth:`Store.tally`: one transaction."""
        with self._tx() as c:
            return [self._db.add_tally(c, name, int(d)) for name, d in deltas.items()]

    def tallies(self, names: Sequence[str]) -> list[int]:
        """See :meth:`Store.tallies`."""
        got: dict[str, int] = {}
        with self._tx() as c:
            for part in chunks(list(names)):
                got.update(c.execute(f"SELECT name, n FROM tallies WHERE name IN "
                                     f"({marks(len(part))})", part).fetchall())
        return [got.get(n, 0) for n in names]

    def drop_tallies(self, names: Sequence[str]) -> None:
        """See :meth:`Store.drop_tallies`."""
        with self._tx() as c:
            c.executemany("DELETE FROM tallies WHERE name=?", [(n,) for n in names])

    def drop_values(self, names: Sequence[str]) -> None:
        """See :meth:`Store.drop_values`."""
        with self._tx() as c:
            self._db.values.drop(c, names)

    def get_values(self, names: Sequence[str], now: float) -> list[bytes | None]:
        """See :meth:`Store.get_values`."""
        with self._tx() as c:
            return self._db.values.get(c, names, now)

    # -- looking -------------------------------------------------------------------

    def stats(self, now: float, per_queue: int = 0) -> Stats:
        """See :meth:`Store.stats`."""
        with self._tx() as c:
            self._wake(c, now)
            self._db.write_counts(c)  # (those of the answers applied at the start)
            m = dict(c.execute("SELECT name, value FROM meta"))
            states = dict(c.execute("SELECT state, count(*) FROM queues GROUP BY state"))
            rejected = dict(c.execute("SELECT reason, n FROM rejected"))
            per = self._queue_infos(c, now, per_queue) if per_queue else []
        return Stats(
            seen=m["seen"], added=m["added"], queued=m["queued"], scheduled=m["scheduled"],
            leased=m["leased"], done=m["done"], failed=m["failed"], retried=m["retried"],
            dead=m["dead"], redelivered=m["redelivered"], late_acks=m["late_acks"],
            duplicates=m["duplicates"], rejected=rejected,
            queues_total=sum(states.values()), queues_ready=states.get(READY, 0),
            queues_busy=states.get(BUSY, 0), queues_resting=states.get(RESTING, 0),
            queues_exhausted=states.get(EXHAUSTED, 0), per_queue=tuple(per),
        )

    def _queue_infos(self, c: sqlite3.Connection, now: float, limit: int) -> list[QueueInfo]:
        out = []
        rows = c.execute(
            f"SELECT qid, key, queued, inflight, ready_at, accepted, "
            f"{', '.join(QUEUE_SETTINGS)} FROM queues ORDER BY queued DESC, inflight DESC "
            "LIMIT ?", (limit,)).fetchall()
        waiting: dict[int, int] = {}
        for part in chunks([r[0] for r in rows]):
            waiting.update(c.execute(  # (index scheduled_queue)
                f"SELECT qid, count(*) FROM scheduled WHERE qid IN ({marks(len(part))}) "
                "GROUP BY qid", part).fetchall())
        for row in rows:
            qid, key, queued, inflight, ready_at, accepted = row[:6]
            pol = self._policy(tuple(row[6:]))
            settings = typed_settings({k: v for k, v in zip(QUEUE_SETTINGS, row[6:])
                                       if v is not None})
            out.append(QueueInfo(key, queued, inflight, ready_at, accepted,
                                 label(queued, inflight, pol.concurrency, ready_at, now),
                                 settings, waiting.get(qid, 0)))
        return out

    def queues(self, now: float, limit: int = 100) -> list[QueueInfo]:
        """See :meth:`Store.queues`."""
        with self._tx() as c:
            self._wake(c, now)
            return self._queue_infos(c, now, limit)

    def dead(self, limit: int = 100) -> list[DeadEntry]:
        """See :meth:`Store.dead`."""
        with self._tx() as c:
            return [DeadEntry(*r) for r in c.execute(
                "SELECT d.id, q.key, d.prio, d.retries, d.payload, d.error, d.died_at "
                "FROM dead d JOIN queues q ON q.qid = d.qid ORDER BY d.id LIMIT ?", (limit,))]

    # -- removing and requeueing ---------------------------------------------------

    def delete_queue(self, queue: str, now: float) -> int:
        """See :meth:`Store.delete_queue`.
        Its rows behind the cursors (what it leased) go too: a lease keeps what it needs
        to put its entry back (sqlite_leases), so the cursors start afresh."""
        with self._tx() as c:
            self._wake(c, now)
            row = c.execute("SELECT qid, queued FROM queues WHERE key=?", (queue,)).fetchone()
            if row is None:
                return 0
            qid, queued = row
            for table in ENTRY_LEVELS:
                c.execute(f"DELETE FROM {table} WHERE qid=?", (qid,))
            n_sched = c.execute("DELETE FROM scheduled WHERE qid=?", (qid,)).rowcount
            self._end_park(c, qid, now)  # (an empty queue waits for no domain: see rules)
            self._db.ahead.forget()
            self._db.queues.forget([qid])
            d = Delta()
            d.queued = -queued
            d.exact = True  # (head None: nothing left)
            d.cursor = (NO_CURSOR, 0) * len(CURSOR_LEVELS)
            self._apply(c, {qid: d}, now)
            self._db.count(c, queued=-(queued + n_sched), scheduled=-n_sched)
            left = c.execute("SELECT inflight FROM queues WHERE qid=?", (qid,)).fetchone()[0]
            if not left and c.execute("SELECT 1 FROM dead WHERE qid=? LIMIT 1",
                                      (qid,)).fetchone() is None:
                # Nothing of it is left: it goes, settings and counts with it. Other
                # connections keep qids by key: the epoch tells them to read them again.
                c.execute("DELETE FROM queues WHERE qid=?", (qid,))
                c.execute("DELETE FROM expiries WHERE qid=?", (qid,))
                c.execute("UPDATE meta SET value=value+1 WHERE name='queue_epoch'")
                self._db.queues.forget([qid])
                self._db.queues.forget_ids()
                self._db.epoch = None
            return int(queued) + n_sched

    def remove_queued(self, queue: str, where: Pick, now: float) -> int:
        """See :meth:`Store.remove_queued`: the queue's entries past
        its cursors (its queued ones) and its scheduled ones, each given to ``where``."""
        with self._tx() as c:
            self._wake(c, now)
            found = c.execute("SELECT qid FROM queues WHERE key=?", (queue,)).fetchone()
            if found is None:
                return 0
            (row,) = self._db.queues.rows_of(c, [found[0]])
            qid, queued = row[Q_QID], row[Q_QUEUED]
            entries = c.execute(FIRST_ENTRIES, (qid, queued, *row[CURSORS_AT:SETTINGS_AT])
                                ).fetchall() if queued else []
            gone = [(level, nprio, order) for _, nprio, order, retries, payload, level
                    in entries if where(-nprio, retries, payload, None)]
            later = [(sid,) for sid, due, nprio, retries, payload in c.execute(
                "SELECT id, due, nprio, retries, payload FROM scheduled WHERE qid=?", (qid,))
                if where(-nprio, retries, payload, due)]
            for level, table in enumerate(ENTRY_LEVELS):
                c.executemany(f"DELETE FROM {table} WHERE qid=? AND nprio=? AND ord=?",
                              [(qid, n, o) for lv, n, o in gone if lv == level])
            c.executemany("DELETE FROM scheduled WHERE id=?", later)
            if gone:
                if len(gone) == queued:  # (an empty queue waits for no domain: see rules)
                    self._end_park(c, qid, now)
                self._db.ahead.forget()
                self._db.queues.forget([qid])
                d = Delta()
                d.queued = -len(gone)
                d.recompute = True  # (its head may have gone)
                self._apply(c, {qid: d}, now)
            self._db.count(c, queued=-(len(gone) + len(later)), scheduled=-len(later))
            return len(gone) + len(later)

    def requeue_dead(self, ids: Iterable[int] | None, now: float) -> int:
        """See :meth:`Store.requeue_dead`."""
        with self._tx() as c:
            if ids is None:
                rows = c.execute("SELECT id, qid, prio, payload FROM dead ORDER BY id").fetchall()
            else:
                wanted = list(ids)
                rows = []
                for part in chunks(wanted):
                    rows.extend(c.execute("SELECT id, qid, prio, payload FROM dead WHERE id IN "
                                          f"({marks(len(part))}) ORDER BY id", part))
            if not rows:
                return 0
            seq = self._db.take(c, "entry_seq", len(rows))
            deltas: dict[int, Delta] = {}
            new_rows = []
            for _did, qid, prio, payload in rows:
                seq += 1
                new_rows.append((qid, -prio, order_of(seq, self.lifo, TAIL), 0, payload))
            self._db.to_level0(c, new_rows, deltas, False)
            c.executemany("DELETE FROM dead WHERE id=?", [(r[0],) for r in rows])
            self._apply(c, deltas, now)
            self._db.count(c, dead=-len(rows), queued=len(rows))
            return len(rows)

    # -- dump and load -------------------------------------------------------------

    def dump(self) -> Iterator[dict[str, Any]]:
        """See :meth:`Store.dump`. Reads a consistent snapshot on its own connection."""
        with self._db.lock:
            if self._db.closed:
                raise StoreError("the store is closed")
            if self._db.group.pending:
                self._commit_held()
        yield from sqlite_dump.records(self.path, self._bloom)

    def load(self, records: Iterable[dict[str, Any]], now: float) -> int:
        """See :meth:`Store.load`. All records are applied in one transaction."""
        loader = _Loader(self._db, self._bloom, self.lifo, self._apply, now)
        with self._tx() as c:
            loader.c = c
            n = sum(dumpfmt.apply(loader, rec) for rec in records)
            loader.finish()
            # (values, scheduled entries, leases and rests loaded: their times are not
            # known here)
            self._db.wake_due = self._db.events_due = None
        return n


class _AnswerRun:
    """Answers of consecutive calls applied together (see SQLiteStore._release)."""

    def __init__(self) -> None:
        self.calls = 0
        self.at = 0.0  # the time of its last call
        self.deltas: dict[int, Delta] = {}
        self.dead: list[tuple[Any, ...]] = []
        # (call, token, row, the call's changes to the row's queue)
        self.back: list[tuple[int, int, sqlite_leases.LeaseRow, Delta]] = []
        self.last: dict[int, Delta] = {}  # qid -> the last changes in the run's chain
        self.later: list[tuple[Any, ...]] = []
        self.done = self.failed = self.retried = self.late = 0


class _Loader:
    """The SQLite store's :class:`~.dumpfmt.Loader`, inside one transaction (the store's
    ``load`` opens it and sets ``c``). It writes as the store's own calls do: through the
    database's steps (its queue ids, sequences, level-0 rules and counters) and the
    store's settling step (``settle``), both handed to it."""

    def __init__(self, db: Database, bloom: BloomShape | None, lifo: bool,
                 settle: Callable[[sqlite3.Connection, dict[int, Delta], float], object],
                 now: float) -> None:
        self.db = db
        self.bloom = bloom
        self.lifo = lifo
        self.settle = settle
        self.now = now
        self.since: dict[int, float] = {}  # qid -> since when it waited, as dumped
        self.c: sqlite3.Connection
        self.seen: SeenTx | None = None
        self.deltas: dict[int, Delta] = {}
        self.counts: dict[str, int] = {}
        self.entries = 0  # queued entries loaded since the last level merge check
        self.values: list[tuple[str, bytes, float | None]] = []  # (written in batches)

    def _qid(self, key: str) -> int:
        return self.db.queues.qid_map(self.c, [key])[key]

    def load_seen(self, fp: bytes, revisit_at: float | None) -> None:
        if self.seen is None:
            self.seen = SeenTx(self.c, self.bloom)
        if self.bloom is not None:
            self.seen.prefetch([fp])
        marks = self.seen.marks
        marks.mark(fp, revisit_at)
        marks.batch.clear()
        if len(marks.fresh) > 10_000 or len(marks.dirty) > 1_000:
            self.seen.flush()
            marks.fresh.clear()
            marks.dirty.clear()

    def load_bloom(self, bits: bytes) -> None:
        shape = self.bloom
        if shape is None or len(bits) != shape.size_bytes:
            raise ConfigError("dump has a Bloom filter of another shape than this store")
        for b in range(shape.blocks):
            chunk = bits[b * BLOCK_BYTES:(b + 1) * BLOCK_BYTES]
            if any(chunk):
                row = self.c.execute("SELECT bits FROM bloom WHERE block=?", (b,)).fetchone()
                merged = bytes(x | y for x, y in zip(chunk, row[0])) if row else chunk
                self.c.execute("INSERT OR REPLACE INTO bloom VALUES (?, ?)", (b, merged))

    def load_entry(self, key: str, priority: int, retries: int, payload: bytes,
                    not_before: float | None) -> None:
        qid = self._qid(key)
        seq = self.db.take(self.c, "entry_seq", 1) + 1
        order = order_of(seq, self.lifo, LAST)
        self.counts["queued"] = self.counts.get("queued", 0) + 1
        if not_before is not None:
            self.c.execute("INSERT INTO scheduled (due, qid, nprio, ord, retries, payload) "
                           "VALUES (?,?,?,?,?,?)", (not_before, qid, -priority, order, retries,
                                                     payload))
            self.counts["scheduled"] = self.counts.get("scheduled", 0) + 1
            return
        self.db.before_level0(self.c, [(qid, -priority, order)])
        self.c.execute("INSERT INTO entries0 VALUES (?,?,?,?,?)",
                       (qid, -priority, order, retries, payload))
        self.entries += 1
        if self.entries >= 10_000:
            self.db.settled(settle_levels(self.c, "entries", self.entries))
            self.entries = 0
        d = self.deltas.get(qid) or self.deltas.setdefault(qid, Delta())
        d.queued += 1
        d.offer_head(-priority)

    def load_queue(self, key: str, accepted: int, ready_at: float,
                   settings: Mapping[str, float], since: float | None) -> None:
        qid = self._qid(key)
        if since is not None:
            self.since[qid] = since
        clean = check_settings(settings)
        self.db.queues.forget([qid])
        self.c.execute("UPDATE domains SET accepted = accepted + max(0, ?1 - (SELECT accepted "
                       "FROM queues WHERE qid=?2)) WHERE did=(SELECT did FROM queues "
                       "WHERE qid=?2)", (accepted, qid))
        self.c.execute("UPDATE queues SET accepted = max(accepted, ?) WHERE qid=?",
                       (accepted, qid))
        if clean:
            cols = ", ".join(f"{k}=?" for k in clean)
            self.c.execute(f"UPDATE queues SET {cols} WHERE qid=?", (*clean.values(), qid))
        d = self.deltas.get(qid) or self.deltas.setdefault(qid, Delta())
        d.ready_at = max(d.ready_at, ready_at)

    def load_dead(self, queue: str, priority: int, retries: int, payload: bytes,
                   error: str, died_at: float) -> None:
        self.c.execute("INSERT INTO dead (qid, prio, retries, payload, error, died_at) "
                       "VALUES (?,?,?,?,?,?)",
                       (self._qid(queue), priority, retries, payload, error, died_at))
        self.counts["dead"] = self.counts.get("dead", 0) + 1

    def load_counters(self, counters: Mapping[str, int], rejected: Mapping[str, int]) -> None:
        for k, v in counters.items():
            if k in ("seen", "added", "done", "failed", "retried", "redelivered",
                     "late_acks", "duplicates"):
                self.counts[k] = self.counts.get(k, 0) + int(v)
        if rejected:
            self.db.reject(self.c, {r: int(v) for r, v in rejected.items()})

    def load_value(self, name: str, data: bytes, expires: float | None) -> None:
        self.values.append((name, data, expires))
        if len(self.values) >= 10_000:
            self.db.values.put(self.c, self.values)
            self.values.clear()

    def load_tallies(self, counts: Mapping[str, int]) -> None:
        for name, n in counts.items():
            Database.add_tally(self.c, name, n)

    def finish(self) -> None:
        if self.values:
            self.db.values.put(self.c, self.values)
        if self.seen is not None:
            self.seen.flush()
        self.db.settled(settle_levels(self.c, "entries", self.entries))
        self.settle(self.c, self.deltas, self.now)
        self.db.count(self.c, **self.counts)
        # The loaded queues that are ready take their places in the ready line.
        self.c.executemany(f"UPDATE queues SET since=? WHERE qid=? AND state={READY}",
                           [(since, qid) for qid, since in self.since.items()])
        self.db.queues.forget(self.since)
