"""The SQLite store's per-row rules, in plain Python over rows and dicts: a queue row's
layout and the UPDATE statements that write it, the settling of a queue's state after a
call (:func:`settle`), add's verdict on each entry (:func:`admit`), a lease round's
bookkeeping (:func:`take_rows`) and the seen-set inside one transaction
(:class:`SeenMarks`).

They run once per entry, lease or changed queue, so setup.py compiles this module with
mypyc from this very source where it can (the .py runs where it cannot: the same
results, slower). Nothing here touches the database: :mod:`.sqlite` reads the rows,
calls these, and runs the statements they return.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from .base import ADDED, DUPLICATE, OVER_BUDGET
from .bloom import BLOCK_BYTES, BloomShape, test_and_set
from .policy import QUEUE_SETTINGS, QueuePolicy
from .rules import (
    RESTING,
    TAIL,
    answer_rest,
    domain_refusal,
    entry_rank,
    over_cap,
    rested,
    served,
    settled,
)
from .sqlite_schema import CURSOR_LEVELS, NO_CURSOR, head_of

SEQ_MAX: Final = 2**48
"""Where LIFO orders are counted from (see :func:`order_of`)."""


def order_of(seq: int, lifo: bool, place: int) -> int:
    """The ``ord`` of the ``seq``-th entry numbered (the ``entry_seq`` counter), put at
    ``place`` (:func:`.rules.entry_rank`; its rank, offset by SEQ_MAX in a LIFO store:
    LIFO stores made before ranks kept ``SEQ_MAX - seq``)."""
    rank = entry_rank(seq, lifo, place)
    return rank + SEQ_MAX if lifo else rank

QUEUE_COLS: Final = ("qid, state, head, since, ready_at, queued, inflight, session, accepted, "
              + "".join(f"ifnull(l{lv}_nprio, {NO_CURSOR}), l{lv}_ord, " for lv in CURSOR_LEVELS)
              + ", ".join(QUEUE_SETTINGS))
"""A queue row as the store reads and caches it. (A NULL cursor reads as NO_CURSOR:
pysqlite binds None, and bytes, through its slow adaptation path, which formats an
AttributeError for every value, about 5% of a batch's time; ints, floats, str and
bytearray bind directly.)"""
# Where each counter is in a queue row (the first columns of QUEUE_COLS).
Q_QID: Final = 0
Q_STATE: Final = 1
Q_HEAD: Final = 2
Q_SINCE: Final = 3
Q_READY_AT: Final = 4
Q_QUEUED: Final = 5
Q_INFLIGHT: Final = 6
Q_SESSION: Final = 7
Q_ACCEPTED: Final = 8
CURSORS_AT: Final = 9
"""Where the cursors (nprio, ord per CURSOR_LEVELS) start in a queue row."""
SETTINGS_AT: Final = CURSORS_AT + 2 * len(CURSOR_LEVELS)
"""Where QUEUE_SETTINGS start in a queue row."""
_NO_OVERRIDES: Final = (None,) * len(QUEUE_SETTINGS)


def _update_queue(cols: Sequence[str], lookup: bool, cursors: bool) -> str:
    """UPDATE of a queue row: ``cols`` then, with ``cursors``, the cursors (nprio, ord
    per CURSOR_LEVELS) from the parameters, then the qid; with ``lookup`` (and
    ``cursors``), its head is looked up past the new cursors (a subquery sees the row's
    old values). A head or a cursor's nprio of NO_CURSOR is stored as NULL."""
    names = list(cols) + [f"l{lv}_{c}" for lv in CURSOR_LEVELS for c in ("nprio", "ord")
                          if cursors]
    sets = [f"{name}=nullif(?{i}, {NO_CURSOR})" if name == "head" or name.endswith("_nprio")
            else f"{name}=?{i}" for i, name in enumerate(names, 1)]
    if lookup:
        assert cursors
        n = len(cols)
        sets.append("head=(" + head_of(
            {lv: (f"?{n + 2 * i + 1}", f"?{n + 2 * i + 2}") for i, lv in enumerate(CURSOR_LEVELS)}
        ) + ")")
    return f"UPDATE queues SET {', '.join(sets)} WHERE qid=?{len(names) + 1}"


_STATE_COLS = ("state", "since", "ready_at", "queued", "inflight", "session", "accepted")
# [without, with] the cursors: counters only (no indexed column changes), the state with
# a known head. The state with the head looked up always takes the cursors as parameters:
# a row value of the row's own columns, (nprio, ord) > (l1_nprio, l1_ord), is seeked by
# nprio alone and steps over every leased row behind the cursor at that priority.
UPDATE_COUNTS: Final = [_update_queue(("queued", "inflight", "session", "accepted"), False, m)
                 for m in (False, True)]
UPDATE_PLAIN: Final = [_update_queue((*_STATE_COLS, "head"), False, m) for m in (False, True)]
UPDATE_LOOKUP: Final = _update_queue(_STATE_COLS, True, True)


class Delta:
    """Pending changes to one queue inside a transaction."""

    accepted: int
    inflight: int
    queued: int
    session: int
    served: bool
    recompute: bool
    head: int | None
    exact: bool
    ready_at: float
    answers: list[tuple[float | None, float | None]] | None
    cursor: tuple[int, ...] | None
    at: float | None
    then: Delta | None

    def __init__(self) -> None:
        self.accepted = 0
        self.inflight = 0
        self.queued = 0
        self.session = 0
        self.served = False  # leased from: goes to the back of the line
        self.recompute = False  # entries left the queue: its head must be looked up
        self.head = None  # a new candidate head (negated priority)
        self.exact = False  # head is the queue's head after the call, not a candidate
        self.ready_at = 0.0
        # The answers that ended leases: (duration, explicit delay) each; None: none.
        # Each asks a rest of its own (rules.answer_rest), the queue rests the longest.
        self.answers = None
        # The queue's cursors (nprio, ord per CURSOR_LEVELS; NO_CURSOR: none) after
        # the call, when it leased.
        self.cursor = None
        # When the changes happened, if not at the settling call's time (answers held
        # for group commit are applied at their own times).
        self.at = None
        # The same queue's changes at a later time, applied after these (the answers of
        # several held calls to one queue).
        self.then = None

    def answered(self, duration: float | None, delay: float | None) -> None:
        """A lease of the queue ended with an answer (its fetch's ``duration``, an
        explicit ``delay``)."""
        answers = self.answers
        if answers is None:
            self.answers = [(duration, delay)]
        else:
            answers.append((duration, delay))

    def offer_head(self, nprio: int) -> None:
        """An entry of (negated) priority ``nprio`` joined the queue."""
        head = self.head
        if head is None or nprio < head:
            self.head = nprio


def policy_of(base: QueuePolicy, cache: dict[tuple[Any, ...], QueuePolicy],
              overrides: tuple[Any, ...]) -> QueuePolicy:
    """The policy of a queue with ``overrides`` (QUEUE_SETTINGS values, None: the
    default), made once per distinct overrides and kept in ``cache``."""
    pol = cache.get(overrides)
    if pol is None:
        pol = base.merged({k: v for k, v in zip(QUEUE_SETTINGS, overrides) if v is not None})
        cache[overrides] = pol
    return pol


def settle(rows: Iterable[tuple[Any, ...]], deltas: dict[int, Delta], now: float,
           base: QueuePolicy, policies: dict[tuple[Any, ...], QueuePolicy],
           cache: dict[int, tuple[Any, ...]], rests: list[float], spent: list[int]
           ) -> dict[str, list[tuple[Any, ...]]]:
    """The one settle step: each queue's row (``rows``, QUEUE_COLS) with its ``deltas``
    applied (a chain of them, ``Delta.then``, one after the other, each at its time)
    through the queue rules' transitions (:func:`.rules.rested` per answer,
    :func:`.rules.served` after a lease call, :func:`.rules.settled`). Returns the UPDATE
    statements to run (statement -> parameters); ``cache`` (queue rows by qid) gets the
    new rows, or loses those whose head the statement looks up; ``rests`` gets the rest
    end of each queue it leaves resting, ``spent`` the qid of each whose session a lease
    call spent."""
    writes: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        qid: int = row[Q_QID]
        d = deltas.get(qid)
        if d is None:
            continue
        # (each field read into a typed local first: compiled, the arithmetic is native)
        state: int = row[Q_STATE]
        head: int | None = row[Q_HEAD]
        since: float = row[Q_SINCE]
        ready_at: float = row[Q_READY_AT]
        queued: int = row[Q_QUEUED]
        inflight: int = row[Q_INFLIGHT]
        session: int = row[Q_SESSION]
        accepted: int = row[Q_ACCEPTED]
        settings = row[SETTINGS_AT:]
        # (most queues override nothing: their policy is the base one, known without
        # hashing the settings)
        pol = base if settings == _NO_OVERRIDES else policies.get(settings)
        if pol is None:
            pol = policy_of(base, policies, settings)
        first = d
        new_state = state
        step: Delta | None = d
        while step is not None:  # (the queue's changes, one time after the other)
            queued += step.queued
            inflight += step.inflight
            session += step.session
            accepted += step.accepted
            was_served = step.served
            t = now if step.at is None else step.at  # (the changes happened then)
            if step.ready_at > ready_at:
                ready_at = step.ready_at
            answers = step.answers
            if answers is not None:
                for duration, delay in answers:
                    ready_at, session = rested(ready_at, session, t,
                                               answer_rest(pol, duration, delay))
            if was_served:
                ready_at, session, yielded = served(pol, ready_at, session, t)
                if yielded:
                    spent.append(qid)
            new_head = step.head
            if step.exact or (new_head is not None and (head is None or new_head < head)):
                head = new_head  # (an exact head replaces the old one, a candidate may)
            new_state, since = settled(new_state, was_served, queued, inflight,
                                       pol.concurrency, since, ready_at, t)
            step = step.then
        d = first
        if new_state == RESTING:
            rests.append(ready_at)
        cursor = d.cursor
        moved = cursor is not None
        if cursor is None:
            cursor = row[CURSORS_AT:SETTINGS_AT]
        vals: tuple[Any, ...]
        if d.recompute and queued > 0:
            key, moved = UPDATE_LOOKUP, True
            vals = (new_state, since, ready_at, queued, inflight, session, accepted)
            cache.pop(qid, None)  # its head is looked up in SQL
        else:
            if queued <= 0:
                head = None
            if queued > 0 and new_state == state and since == row[Q_SINCE] and \
                    ready_at == row[Q_READY_AT] and head == row[Q_HEAD]:
                # Counters only: no indexed column changes, so no index is rewritten.
                key = UPDATE_COUNTS[moved]
                vals = (queued, inflight, session, accepted)
            else:
                key = UPDATE_PLAIN[moved]
                vals = (new_state, since, ready_at, queued, inflight, session, accepted,
                        NO_CURSOR if head is None else head)
            state_cols = (qid, new_state, head, since, ready_at, queued, inflight, session,
                          accepted)
            cache[qid] = state_cols + cursor + settings
        if moved:
            vals += cursor
        w = writes.get(key)
        if w is None:
            w = writes[key] = []
        w.append(vals + (qid,))  # noqa: RUF005  (concatenation: faster than a display)
    return writes


class SeenMarks:
    """The seen-set inside one transaction: what was read of it for this call's
    fingerprints (``known``: exact, or ``blocks`` of a Bloom filter), and what the call
    marks (``fresh`` and ``batch``; ``dirty`` blocks). The store reads and writes the
    database around it."""

    bloom: BloomShape | None
    known: dict[bytes, float | None]
    fresh: list[tuple[bytes, float | None]]
    blocks: dict[int, bytearray]
    dirty: set[int]
    batch: set[bytes]

    def __init__(self, bloom: BloomShape | None) -> None:
        self.bloom = bloom
        self.known = {}
        self.fresh = []
        self.blocks = {}
        self.dirty = set()
        self.batch = set()

    def is_dup(self, fp: bytes, now: float) -> bool:
        """Whether ``fp`` was seen (and is not due for a revisit at ``now``)."""
        if fp in self.batch:
            return True
        if self.bloom is not None:
            block, bits = self.bloom.locate(fp)
            data = self.blocks.get(block)
            return data is not None and all(data[b >> 3] & (1 << (b & 7)) for b in bits)
        if fp not in self.known:
            return False
        at = self.known[fp]
        return at is None or at > now

    def mark(self, fp: bytes, revisit_at: float | None) -> None:
        """Record ``fp`` as seen (until ``revisit_at``, None: for good)."""
        self.batch.add(fp)
        if self.bloom is not None:
            block, bits = self.bloom.locate(fp)
            data = self.blocks.get(block)
            if data is None:
                data = self.blocks[block] = bytearray(BLOCK_BYTES)
            test_and_set(data, bits)
            self.dirty.add(block)
        else:
            self.fresh.append((fp, revisit_at))


def admit(entries: Sequence[tuple[Any, ...]], qids: Mapping[str, Any],
          policies: Mapping[int, QueuePolicy], accepted: dict[int, int], seen: SeenMarks,
          now: float,
          seq: int, lifo: bool, dids: Mapping[int, int], domain_accepted: dict[int, int],
          domain_queues: dict[int, int], fresh: set[int],
          ) -> tuple[list[int], list[tuple[Any, ...]], list[tuple[Any, ...]], int, int, int]:
    """add's verdict on each entry (an Entry), in order: a duplicate (checked and marked
    in ``seen``), over its queue's cap (its policy in ``policies``, by qid; ``accepted``
    counts up: :func:`.rules.over_cap`), refused by its domain (``dids``: qid -> domain,
    none for a queue without;
    ``domain_accepted`` and ``domain_queues`` count up, ``fresh``: the queues made for
    this call that took nothing yet, which it removes as they take one:
    :func:`.rules.domain_refusal`), or added with the next number of the sequence after
    ``seq``.

    Returns (statuses, new rows for level 0 (qid, nprio, ord, retries, payload), rows for
    ``scheduled`` (due, qid, nprio, ord, retries, payload), duplicates, fingerprints
    marked, the last sequence number used).
    """
    out: list[int] = []
    new_rows: list[tuple[Any, ...]] = []
    later: list[tuple[Any, ...]] = []
    dups = seen_added = 0
    for e in entries:
        fp: bytes | None = e[0]
        qid = qids[e[1]]
        if fp is not None and seen.is_dup(fp, now):
            out.append(DUPLICATE)
            dups += 1
            continue
        pol = policies[qid]
        did = dids.get(qid, -1)  # (-1: no domain, the rules are off)
        if qid in fresh:  # (a queue of its own: its domain may have as many as it has)
            verdict = 0 if did < 0 else domain_refusal(
                pol, domain_accepted.get(did, 0), domain_queues.get(did, 0), True)
            if not verdict:
                fresh.discard(qid)
                if did >= 0:
                    domain_queues[did] = domain_queues.get(did, 0) + 1
        elif over_cap(pol, accepted[qid]):
            verdict = OVER_BUDGET
        else:
            verdict = 0 if did < 0 else domain_refusal(pol, domain_accepted.get(did, 0), 0,
                                                       False)
        if verdict:
            out.append(verdict)
            continue
        if did >= 0:
            domain_accepted[did] = domain_accepted.get(did, 0) + 1
        if fp is not None:
            seen.mark(fp, e[5])
            seen_added += 1
        accepted[qid] += 1
        seq += 1
        order = order_of(seq, lifo, TAIL)
        not_before = e[4]
        if not_before is None or not_before <= now:
            new_rows.append((qid, -e[2], order, e[6], bytearray(e[3])))
        else:
            later.append((not_before, qid, -e[2], order, e[6], e[3]))
        out.append(ADDED)
    return out, new_rows, later, dups, seen_added, seq


def take_rows(got: list[tuple[Any, ...]], cursor: dict[int, tuple[int, ...]],
              keys: Mapping[int, str], token: int, expires: float, ints: list[int],
              payloads: list[bytes], out: list[tuple[Any, ...]], counts: dict[int, int],
              ) -> int:
    """One round of a lease call's entries ``got`` (qid, nprio, ord, retries, payload,
    level, ...): each gets the token after ``token`` (the last one is returned), its ints
    (FIELDS) and payload for sqlite_leases.write, its lease row (token, key, priority,
    retries, payload, expires) in ``out``, and a count for its queue in ``counts``; the
    queue's ``cursor`` in the entry's level moves to it."""
    # (the fields stay the objects the row holds, Any: compiled, a typed int would be
    # unboxed here and boxed anew, a new object, for each container it goes into)
    for row in got:
        qid, nprio, order, retries, payload = row[0], row[1], row[2], row[3], row[4]
        level: int = row[5]
        token += 1
        ints.append(qid)
        ints.append(nprio)
        ints.append(order)
        ints.append(retries)
        payloads.append(payload)
        # Not deleted: the queue's cursor in the level moves past it (in key order, as
        # the heads and read-ahead statements return them).
        cur, at = cursor[qid], 2 * level
        cursor[qid] = cur[:at] + (nprio, order) + cur[at + 2:]  # noqa: RUF005
        out.append((token, keys[qid], -nprio, retries, payload, expires))
        counts[qid] = counts.get(qid, 0) + 1
    return token
