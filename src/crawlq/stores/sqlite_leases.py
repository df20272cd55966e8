"""The SQLite store's leases, kept per ``next`` call rather than per lease.

A call's leases have consecutive tokens (``first`` .. ``last``) and one expiry time, so
they are written as two rows: ``lease_calls`` (small: the tokens, the expiry, how many
are still open and a bitmap of those answered) and ``lease_data`` (what is needed to
put a lease back: qid, negated priority, order and retries per lease, and the payloads).
A row per lease cost a B-tree insert at ``next`` and a delete at ``done`` for each
request, about a tenth of a batch crawl's time (measured when this was made); now a
call of 1,000 leases costs two inserts, and answering them two deletes. Answering part
of a call rewrites only its small ``lease_calls`` row.

Integers are packed as little-endian int64 arrays, so a file reads the same on any
machine.
"""

from __future__ import annotations

import sqlite3
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import accumulate
from typing import Any

from ..errors import StoreCorrupt

DDL = """
CREATE TABLE IF NOT EXISTS lease_calls (
    last INTEGER PRIMARY KEY,
    first INTEGER NOT NULL,
    expires REAL NOT NULL,
    open INTEGER NOT NULL,
    acked BLOB
);
CREATE INDEX IF NOT EXISTS lease_calls_expiry ON lease_calls (expires);
CREATE TABLE IF NOT EXISTS lease_data (
    last INTEGER PRIMARY KEY,
    ints BLOB NOT NULL,
    ends BLOB NOT NULL,
    payloads BLOB NOT NULL
);
CREATE TRIGGER IF NOT EXISTS lease_calls_gone AFTER DELETE ON lease_calls BEGIN
    DELETE FROM lease_data WHERE last = old.last;
END;
"""
"""``lease_calls``: a call's tokens are ``first`` .. ``last``; ``open`` of them are not
answered yet; bit ``t - first`` of ``acked`` (NULL: no bit yet) is set once token ``t``
is. ``lease_data``: per lease of the call, in token order, qid, nprio, ord and retries
(``ints``) and the end offset of its payload in ``payloads`` (``ends``); deleted with its
call by a trigger (one statement less per answered call)."""

FIELDS = 4  # ints per lease: qid, nprio, ord, retries

_SWAP = sys.byteorder != "little"

LeaseRow = tuple[int, int, int, int, bytes]
"""A lease's entry: qid, nprio, ord, retries, payload."""


def _pack(values: Iterable[int]) -> bytearray:
    a = array("q", values)
    if _SWAP:
        a.byteswap()
    # (bytearray: the sqlite3 module binds it directly, bytes go through adaptation)
    return bytearray(a.tobytes())


def _unpack(blob: bytes, n: int) -> array[int]:
    """``n`` packed ints; a blob of another size is a damaged file, not a crash later."""
    a = array("q")
    if not isinstance(blob, bytes) or len(blob) != 8 * n:
        size = f"{len(blob)} bytes" if isinstance(blob, bytes) else repr(blob)
        raise StoreCorrupt(f"the lease data of a next() call is damaged: {size} where "
                           f"{8 * n} bytes were written")
    a.frombytes(blob)
    if _SWAP:
        a.byteswap()
    return a


def write(c: sqlite3.Connection, first: int, expires: float, ints: Sequence[int],
          payloads: Sequence[bytes]) -> None:
    """Record the leases of one call: tokens ``first`` on, one per payload; ``ints``
    holds FIELDS values per lease."""
    if not payloads:
        return
    last = first + len(payloads) - 1
    c.execute("INSERT INTO lease_calls VALUES (?,?,?,?,NULL)",
              (last, first, expires, len(payloads)))
    c.execute("INSERT INTO lease_data VALUES (?,?,?,?)",
              (last, _pack(ints), _pack(accumulate(map(len, payloads))),
               bytearray().join(payloads)))


def _entry(ints: array[int], ends: array[int], payloads: bytes, k: int) -> LeaseRow:
    """The entry of the call's ``k``-th lease."""
    at = FIELDS * k
    return (ints[at], ints[at + 1], ints[at + 2], ints[at + 3],
            payloads[ends[k - 1] if k else 0:ends[k]])


def answer(c: sqlite3.Connection, when: Mapping[int, float], full: set[int] | frozenset[int]
           ) -> tuple[dict[int, tuple[int, int]], dict[int, LeaseRow]]:
    """Close the open leases among the tokens of ``when`` (token -> when it was
    answered): token -> (qid, nprio) for each of them (tokens unknown, answered before,
    or whose call expired by the time of their answer are left out: the latter stay
    open, for waking to take back), and the whole entry for those in ``full``. Calls
    with no open lease left are deleted."""
    held: dict[int, tuple[int, int]] = {}
    rows: dict[int, LeaseRow] = {}
    toks = sorted(when)
    i = 0
    while i < len(toks):
        call = c.execute("SELECT l.last, l.first, l.open, l.acked, d.ints, l.expires "
                         "FROM lease_calls l JOIN lease_data d ON d.last = l.last "
                         "WHERE l.last >= ? ORDER BY l.last LIMIT 1", (toks[i],)).fetchone()
        if call is None:
            break  # the rest belong to calls answered or expired already
        last, first, n_open, acked, ints_blob, expires = call
        j = bisect_right(toks, last, i)
        mine = [t for t in toks[i:j] if t >= first and when[t] < expires]
        i = j
        if not mine:
            continue
        bits = bytearray(acked) if acked is not None else bytearray((last - first) // 8 + 1)
        want_full = any(t in full for t in mine) if full else False
        if want_full:
            ends_blob, payloads = c.execute("SELECT ends, payloads FROM lease_data WHERE last=?",
                                            (last,)).fetchone()
            ends = _unpack(ends_blob, last - first + 1)
        ints = _unpack(ints_blob, FIELDS * (last - first + 1))
        if acked is None and len(mine) == last - first + 1:
            # The whole call answered at once (a batch crawler's done(leases)): its
            # tokens are first..last in order, the qids and nprios every FIELDS ints.
            held.update(zip(mine, zip(ints[::FIELDS], ints[1::FIELDS])))
            for t in (full.intersection(mine) if want_full else ()):
                rows[t] = _entry(ints, ends, payloads, t - first)
            c.execute("DELETE FROM lease_calls WHERE last=?", (last,))
            continue
        for t in mine:
            k = t - first
            byte, bit = k >> 3, 1 << (k & 7)
            if bits[byte] & bit:
                continue  # answered before
            bits[byte] |= bit
            n_open -= 1
            at = FIELDS * k
            held[t] = (ints[at], ints[at + 1])
            if want_full and t in full:
                rows[t] = _entry(ints, ends, payloads, k)
        if n_open <= 0:
            c.execute("DELETE FROM lease_calls WHERE last=?", (last,))
        else:
            c.execute("UPDATE lease_calls SET open=?, acked=? WHERE last=?",
                      (n_open, bits, last))
    return held, rows


def _open_call(c: sqlite3.Connection, token: int) -> tuple[int, float] | None:
    """The call (its ``last``, and its expiry) holding ``token`` while it is open (not
    answered, its call not closed), else None."""
    call = c.execute("SELECT last, first, acked, expires FROM lease_calls WHERE last >= ? "
                     "ORDER BY last LIMIT 1", (token,)).fetchone()
    if call is None or call[1] > token:
        return None
    k = token - call[1]
    if call[2] is not None and call[2][k >> 3] & (1 << (k & 7)):
        return None
    return int(call[0]), float(call[3])


def open_tokens(c: sqlite3.Connection, tokens: Sequence[int], now: float) -> list[bool]:
    """Per token, whether its lease is open and not expired at ``now`` (a read: for
    answers held to be committed later, see SQLiteStore.release; the commit wakes
    first, so an expired one is late then)."""
    out = []
    for t in tokens:
        call = _open_call(c, t)
        out.append(call is not None and call[1] > now)
    return out


class _Call:
    """A lease call as :class:`OwnCalls` knows it."""

    __slots__ = ("answered", "expires", "first")

    def __init__(self, first: int, expires: float) -> None:
        self.first = first
        self.expires = expires
        self.answered: set[int] = set()


class OwnCalls:
    """The lease calls this store object made, as far as it knows them, so that an
    answer held for group commit is checked without reading the file: a read outside a
    transaction costs about 7 µs, most of what holding an answer costs. What it cannot
    know is an answer another process gave one of these leases; such an answer is
    found at the commit, where this one counts as late (``late_acks``)."""

    KEPT = 4096
    """Calls remembered, the most recent (older ones are read from the file)."""

    def __init__(self) -> None:
        self._lasts: list[int] = []  # (increasing: tokens only grow)
        self._calls: dict[int, _Call] = {}

    def made(self, first: int, last: int, expires: float) -> None:
        """Remember a call's tokens ``first`` .. ``last`` leased until ``expires``."""
        self._lasts.append(last)
        self._calls[last] = _Call(first, expires)
        if len(self._lasts) > 2 * self.KEPT:
            for old in self._lasts[:self.KEPT]:
                del self._calls[old]
            del self._lasts[:self.KEPT]

    def _call(self, token: int) -> _Call | None:
        i = bisect_left(self._lasts, token)
        if i == len(self._lasts):
            return None
        call = self._calls[self._lasts[i]]
        return call if call.first <= token else None

    def take(self, token: int, now: float) -> bool | None:
        """Whether ``token``'s lease was open, noting it answered; None when this object
        cannot tell (not one of its calls, or past its expiry, which another process
        may have renewed)."""
        call = self._call(token)
        if call is None or call.expires <= now:
            return None
        if token in call.answered:
            return False
        call.answered.add(token)
        return True

    def answered(self, tokens: Iterable[int]) -> None:
        """Note that these leases were answered (here)."""
        for t in tokens:
            call = self._call(t)
            if call is not None:
                call.answered.add(t)

    def renewed(self, tokens: Iterable[int], expires: float) -> None:
        """Note that the calls holding these tokens now last until ``expires``."""
        for t in tokens:
            call = self._call(t)
            if call is not None:
                call.expires = max(call.expires, expires)


def renew(c: sqlite3.Connection, tokens: Sequence[int], expires: float) -> list[bool]:
    """Extend the calls holding the open leases among ``tokens`` to ``expires`` (a call
    has one expiry: its other open leases are extended too); per token, whether it was
    open. Expired calls must have been closed first (:func:`expire`)."""
    out = []
    calls: set[int] = set()
    for t in tokens:
        call = _open_call(c, t)
        if call is not None:
            calls.add(call[0])
        out.append(call is not None)
    c.executemany("UPDATE lease_calls SET expires = max(expires, ?) WHERE last = ?",
                  [(expires, last) for last in calls])
    return out


def _open_rows(c: sqlite3.Connection, where: str, args: Sequence[Any]
               ) -> Iterator[tuple[int, float, LeaseRow]]:
    """The open leases (token, its call's expiry, entry) of the calls ``where``
    selects."""
    for last, first, expires, acked, ints_blob, ends_blob, payloads in c.execute(
            "SELECT l.last, l.first, l.expires, l.acked, d.ints, d.ends, d.payloads "
            f"FROM lease_calls l JOIN lease_data d ON d.last = l.last {where} "
            "ORDER BY l.last",
            args).fetchall():
        n = last - first + 1
        ints, ends = _unpack(ints_blob, FIELDS * n), _unpack(ends_blob, n)
        for k in range(n):
            if acked is not None and acked[k >> 3] & (1 << (k & 7)):
                continue
            yield first + k, expires, _entry(ints, ends, payloads, k)


def expire(c: sqlite3.Connection, now: float) -> list[tuple[float, int, LeaseRow]]:
    """Close every lease whose call expired at ``now``: when each expired, its token,
    its entry."""
    out: list[tuple[float, int, LeaseRow]] = []
    for token, expires, row in _open_rows(c, "WHERE l.expires <= ?", (now,)):
        out.append((expires, token, row))
    # (calls with every lease answered were deleted already)
    c.execute("DELETE FROM lease_calls WHERE expires <= ?", (now,))
    return out


def open_leases(c: sqlite3.Connection) -> Iterator[LeaseRow]:
    """Every open lease's entry (for a dump)."""
    for _, _, row in _open_rows(c, "", ()):
        yield row


def convert_rows(c: sqlite3.Connection) -> None:
    """Schema 3 kept a row per lease in ``leases``: each becomes a call of its own."""
    for token, expires, qid, nprio, order, retries, payload in c.execute(
            "SELECT token, expires, qid, nprio, ord, retries, payload FROM leases").fetchall():
        write(c, token, expires, (qid, nprio, order, retries), (payload,))
    c.execute("DROP TABLE leases")
