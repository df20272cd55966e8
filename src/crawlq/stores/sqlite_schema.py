"""The SQLite store's schema, and how a file is checked before use.

An entry is queued (``entries0``, ``entries1`` or ``entries``, below), ``scheduled``
(waiting for ``not_before`` or a retry backoff) or leased (handed out: ``lease_calls``
and ``lease_data``, a pair of rows per ``next`` call, see sqlite_leases), and moves
between them whole. The queued tables are clustered by (queue, negated priority,
order): a queue's next entries are its first rows, found by one index seek in each, and
a batch taken from a queue dirties few pages.

Queued entries and the exact seen-set are each log-structured in three levels of the
same shape, because a batch of new rows spread over a big B-tree rewrites about one
random page per row (docs/benchmarks.md#why-the-sqlite-store-is-built-as-it-is). New
rows go to level 0 (``entries0``, ``seen0``), which stays small, so a batch rewrites
only its few hundred pages. Every ``L0_ROWS`` rows (in a big store, 1/50 of its rows, up
to 4 x ``L0_ROWS``: fewer, bigger merges), level 0 is merged in key order into level 1
(``entries1``, ``seen1``), and one of ``SLICES`` slices of the key space (a rotating
cursor: queue-id ranges, fingerprint first bytes) moves from level 1 into level 2
(``entries``, ``seen``): the big table is written one contiguous key range at a time.
Readers look at all three levels: a queue's head is the best of its three heads; a
fingerprint's newest level wins (seen0, then seen1, then seen), since a revisit writes a
new ``revisit_at`` while the old row waits in an older level. The merges run inside the
``add`` that fills level 0, so they are atomic like every other step.

Leasing deletes nothing from the levels: a batch of leases takes the heads of many
queues, spread over many pages, and one page rewritten per lease made taking slow (the
same write volume as adding into one big table; in level 0, about half of the pages a
``next(1000)`` wrote). A queue's rows in one level are leased in key order (its head is
the best over the levels), so each queue keeps a cursor per level, ``(l0_nprio, l0_ord)``,
``(l1_nprio, l1_ord)`` and ``(l2_nprio, l2_ord)`` (a NULL ``nprio``: none): the key of the
last row it leased from that level. Rows at or before it are gone from the queue;
readers of the level look past it. A cursor must not pass a row that is still queued,
so before rows arrive in a level that may sort before a queue's cursor, the rows behind
it are deleted (in key order) and the cursor is reset:

- when rows go into level 0 (an add with a better priority than what the queue leased
  there, a lease come back under its old key), for those queues (the SQLite store's
  ``_before_level0``);
- at a merge of level 0 into level 1, for the queues with a new row before their
  level-1 cursor; the rows behind the level-0 cursors are not merged, and every level-0
  cursor is reset;
- when a slice of level 1 moves into level 2, for all the slice's queues, in both
  levels (so leased rows stay in the file at most one round of the slice cursor).

Rows that come back from a lease (an expiry, a retry) return to level 0.

Write volume per batch and B-tree operations per URL, not statements, are what limit a
WAL database, hence this layout.

Queues carry their own state code (:class:`.rules.QueueState`), ``head``
(the negated priority of the best queued entry, so that one ascending index orders
ready queues by priority then by ``since``), counters and per-queue overrides.

Schema 2 added the levels, schema 3 the cursors of levels 1 and 2, schema 4 the leases
per call (before, a ``leases`` row per lease), schema 5 the cursors of level 0, schema 6
the ready line's ties broken by key (index ``queues_line``), schema 8 the log of named
values (``vals_log``, see :mod:`.sqlite_values`); older
files are upgraded when opened (a schema-1 file's rows stay in level 2; each old lease
row becomes a call of its own).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from typing import Final

from ..errors import StoreBusy, StoreCorrupt, StoreError, StoreFull, StoreReadOnly
from . import sqlite_leases
from .rules import EXHAUSTED, READY, RESTING

SCHEMA_VERSION = 8

NO_CURSOR: Final = -(2**62)
"""Below every negated priority: the cursor of a queue that has leased nothing from a
level since that level's rows behind the cursors were last deleted. Stored as NULL
``l1_nprio`` (``l2_nprio``), which takes no room in the row."""
CURSOR_LEVELS = (0, 1, 2)
"""The entry levels read past a per-queue cursor, ``queues.l{level}_nprio, l{level}_ord``."""

SEEN_LEVELS = ("seen0", "seen1", "seen")
"""The seen-set's tables, level 0 (the newest rows) first."""
ENTRY_LEVELS = ("entries0", "entries1", "entries")
"""The queued entries' tables, level 0 first."""
L0_ROWS = 50_000
"""Rows in level 0 that trigger a merge into level 1 (and one slice of level 1 into 2), in
a store of up to 2.5M rows of the kind; bigger ones grow level 0 (see the SQLite store's
``_l0_limit``)."""
SLICES = 16


COUNTERS = ("seen", "added", "done", "failed", "retried", "dead", "redelivered",
            "late_acks", "duplicates", "queued", "scheduled", "leased",
            "entry_seq", "lease_seq", "seen0_keys", "seen_slice", "entries0_rows",
            "entry_slice", "queue_epoch", "vals_seq", "vals_merged")

DDL = f"""
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rejected (
    reason TEXT PRIMARY KEY,
    n INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS bloom (
    block INTEGER PRIMARY KEY,
    bits BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS queues (
    qid INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    state INTEGER NOT NULL DEFAULT {EXHAUSTED},
    head INTEGER,
    since REAL NOT NULL DEFAULT 0,
    ready_at REAL NOT NULL DEFAULT 0,
    queued INTEGER NOT NULL DEFAULT 0,
    inflight INTEGER NOT NULL DEFAULT 0,
    accepted INTEGER NOT NULL DEFAULT 0,
    session INTEGER NOT NULL DEFAULT 0,
    l0_nprio INTEGER,
    l0_ord INTEGER NOT NULL DEFAULT 0,
    l1_nprio INTEGER,
    l1_ord INTEGER NOT NULL DEFAULT 0,
    l2_nprio INTEGER,
    l2_ord INTEGER NOT NULL DEFAULT 0,
    concurrency INTEGER,
    min_delay REAL,
    max_delay REAL,
    delay_factor REAL,
    max_queue_urls INTEGER,
    session_budget INTEGER,
    session_rest REAL,
    did INTEGER,
    parked REAL
);
CREATE TABLE IF NOT EXISTS domains (
    did INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    accepted INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS queues_line ON queues (head, since, key) WHERE state = {READY};
CREATE INDEX IF NOT EXISTS queues_resting ON queues (ready_at) WHERE state = {RESTING};
CREATE TABLE IF NOT EXISTS scheduled (
    id INTEGER PRIMARY KEY,
    due REAL NOT NULL,
    qid INTEGER NOT NULL,
    nprio INTEGER NOT NULL,
    ord INTEGER NOT NULL,
    retries INTEGER NOT NULL,
    payload BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS scheduled_due ON scheduled (due);
CREATE INDEX IF NOT EXISTS scheduled_queue ON scheduled (qid);
CREATE TABLE IF NOT EXISTS tallies (
    name TEXT PRIMARY KEY,
    n INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS vals (
    name TEXT PRIMARY KEY,
    value BLOB NOT NULL,
    expires REAL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS vals_expiry ON vals (expires) WHERE expires IS NOT NULL;
CREATE TABLE IF NOT EXISTS vals_log (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    value BLOB NOT NULL,
    expires REAL
);
CREATE INDEX IF NOT EXISTS vals_log_expiry ON vals_log (expires) WHERE expires IS NOT NULL;
CREATE TABLE IF NOT EXISTS expiries (
    qid INTEGER NOT NULL,
    nprio INTEGER NOT NULL,
    ord INTEGER NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (qid, nprio, ord)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dead (
    id INTEGER PRIMARY KEY,
    qid INTEGER NOT NULL,
    prio INTEGER NOT NULL,
    retries INTEGER NOT NULL,
    payload BLOB NOT NULL,
    error TEXT NOT NULL,
    died_at REAL NOT NULL
);
"""
DDL += sqlite_leases.DDL
# The levels of one kind share their shape.
DDL += "".join(f"CREATE TABLE IF NOT EXISTS {t} (fp BLOB PRIMARY KEY, revisit_at REAL) "
               "WITHOUT ROWID;\n" for t in SEEN_LEVELS)
DDL += "".join(f"CREATE TABLE IF NOT EXISTS {t} (qid INTEGER NOT NULL, nprio INTEGER NOT NULL, "
               "ord INTEGER NOT NULL, retries INTEGER NOT NULL DEFAULT 0, payload BLOB NOT NULL, "
               "PRIMARY KEY (qid, nprio, ord)) WITHOUT ROWID;\n" for t in ENTRY_LEVELS)

def head_of(cursors: dict[int, tuple[str, str]]) -> str:
    """Scalar subquery: the negated priority of a queue ``queues.qid``'s best queued
    entry, past the cursors (SQL parameters, ``nprio`` NULL or NO_CURSOR for none) given
    per level: one index seek in each level. (With the queue row's own columns as
    cursors SQLite would seek by ``nprio`` alone.)"""
    return "SELECT min(n) FROM (" + " UNION ALL ".join(
        f"SELECT n FROM (SELECT nprio AS n FROM {ENTRY_LEVELS[level]} "
        f"WHERE qid = queues.qid AND (nprio, ord) > (ifnull({cursors[level][0]}, "
        f"{NO_CURSOR}), {cursors[level][1]}) ORDER BY nprio, ord LIMIT 1)"
        for level in CURSOR_LEVELS) + ")"


def store_error(path: str, exc: sqlite3.Error, corrupt: str = "is damaged") -> StoreError:
    """The crawlq error that says what a driver error means for the store at ``path``
    (``corrupt``: how to say that the file is damaged or not a store). A locked, full or
    read-only store is not a damaged one: a user told so might delete a healthy crawl."""
    code = getattr(exc, "sqlite_errorcode", None)  # (Python 3.11+; else the message)
    primary = code & 0xFF if isinstance(code, int) else None
    msg = str(exc).lower()
    if primary in (5, 6) or (primary is None and ("locked" in msg or "busy" in msg)):
        return StoreBusy(
            f"{path} is locked by another connection (a process still using it, or one "
            f"that is writing) and stayed locked past busy_timeout: {exc}; the store is "
            "fine: run again when it is free, or raise busy_timeout")
    if primary == 13 or (primary is None and "is full" in msg):
        return StoreFull(f"{path}: the disk is full ({exc}); the call that failed changed "
                         "nothing: free some space and run again")
    if primary == 8 or (primary is None and "readonly" in msg) or (
            primary == 14 and not _writable(path)):  # (14: cannot open, e.g. its -wal)
        return StoreReadOnly(f"{path} cannot be written ({exc}): check the permissions of "
                             "the file and its directory, and that the disk is writable")
    if primary == 10 or (primary is None and "i/o" in msg):
        return StoreError(f"{path}: the disk failed to read or write ({exc})")
    if primary in (11, 26) or (primary is None and isinstance(exc, sqlite3.DatabaseError)
                               and not isinstance(exc, sqlite3.OperationalError)):
        return StoreCorrupt(f"{path} {corrupt}: {exc} (crawlq check tells more)")
    return StoreError(f"{path}: {exc}")


def _writable(path: str) -> bool:
    """Whether the store file and its directory (where SQLite makes its -wal and -shm
    files) may be written: a read-only mount says no even to root."""
    where = os.path.abspath(path)
    return all(os.access(p, os.W_OK) for p in (where, os.path.dirname(where))
               if os.path.exists(p))


def _statements(script: str) -> Iterator[str]:
    """The statements of ``script`` (a trigger's body holds semicolons of its own)."""
    stmt = ""
    for part in script.split(";"):
        stmt += part + ";"
        if sqlite3.complete_statement(stmt):
            if stmt.strip(" \n;"):
                yield stmt
            stmt = ""


def initialize(conn: sqlite3.Connection, path: str, bloom_shape: tuple[int, float] | None,
               lifo: bool, grouped: bool, alone: Callable[[], bool]) -> None:
    """Create the schema in a new file, or check that an existing file is a crawlq store.
    ``grouped``: the store keeps domains (:func:`.rules.groups`): queues without theirs
    get them (:func:`domains_of_queues`). An older schema is upgraded only while
    ``alone()`` says no other store object has the file open: one that does runs an
    older crawlq (a newer one would have upgraded it), which would go on writing the old
    layout."""
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.Error as exc:
        raise store_error(path, exc, "is not a usable SQLite file") from exc
    if names and "meta" not in names:
        raise StoreCorrupt(f"{path} is an SQLite database but not a crawlq store "
                           f"(tables: {sorted(names)[:5]})")
    conn.execute("BEGIN IMMEDIATE")
    try:
        for stmt in _statements(DDL):
            conn.execute(stmt)
        row = conn.execute("SELECT value FROM meta WHERE name='schema'").fetchone()
        if row is None:
            conn.execute("INSERT INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
            conn.executemany("INSERT OR IGNORE INTO meta VALUES (?, 0)", [(c,) for c in COUNTERS])
            conn.execute("INSERT INTO meta VALUES ('lifo', ?)", (int(lifo),))
            conn.execute("INSERT INTO meta VALUES ('bloom', ?)",
                         (None if bloom_shape is None else f"{bloom_shape[0]}:{bloom_shape[1]}",))
        else:
            if row[0] not in (1, 2, 3, 4, 5, 6, 7, SCHEMA_VERSION):
                raise StoreCorrupt(f"{path} has crawlq schema {row[0]}, this crawlq reads "
                                   f"{SCHEMA_VERSION}")
            # (counters added since the file was made start at zero)
            conn.executemany("INSERT OR IGNORE INTO meta VALUES (?, 0)",
                             [(c,) for c in COUNTERS])
            if row[0] != SCHEMA_VERSION and not alone():
                conn.execute("ROLLBACK")
                raise StoreBusy(
                    f"{path} is a crawlq store of schema {row[0]}, open in another process "
                    f"(an older crawlq): it is upgraded to schema {SCHEMA_VERSION} when "
                    "no other process has it open; stop those processes and open it again")
            if row[0] != SCHEMA_VERSION:
                # Schema 1 had one table each: its rows stay as level 2. Schema 2 had no
                # cursors, schema 4 none in level 0: every row there is queued (the
                # default cursor).
                cols = {r[1] for r in conn.execute("PRAGMA table_info(queues)")}
                for level in CURSOR_LEVELS:
                    if f"l{level}_nprio" not in cols:
                        conn.execute(f"ALTER TABLE queues ADD COLUMN l{level}_nprio INTEGER")
                        conn.execute(f"ALTER TABLE queues ADD COLUMN l{level}_ord INTEGER "
                                     "NOT NULL DEFAULT 0")
                # Schemas 1 to 6 had no domains: each queue gets its own, below.
                if "did" not in cols:
                    conn.execute("ALTER TABLE queues ADD COLUMN did INTEGER")
                    conn.execute("ALTER TABLE queues ADD COLUMN parked REAL")
            if row[0] in (1, 2, 3):
                # Schemas 1 to 3 kept a row per lease.
                sqlite_leases.convert_rows(conn)
            # Schemas 1 to 5 broke ties in the ready line by queue id (queues_ready);
            # the line is ordered by key now (queues_line, made above).
            conn.execute("DROP INDEX IF EXISTS queues_ready")
            if row[0] != SCHEMA_VERSION:
                conn.execute("UPDATE meta SET value=? WHERE name='schema'", (SCHEMA_VERSION,))
            stored = conn.execute("SELECT value FROM meta WHERE name='bloom'").fetchone()
            want = None if bloom_shape is None else f"{bloom_shape[0]}:{bloom_shape[1]}"
            if stored is None or stored[0] != want:
                conn.execute("ROLLBACK")
                from ..errors import ConfigError

                raise ConfigError(
                    f"{path} was created with bloom={stored[0] if stored else None!r}; "
                    f"opened with bloom={want!r}: reopen with the same seen-set options")
        for stmt in _statements(DOMAIN_INDEXES):  # (after the column exists)
            conn.execute(stmt)
        if grouped:
            domains_of_queues(conn)
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise store_error(path, exc, "cannot hold the crawlq schema") from exc
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


DOMAIN_INDEXES = """
CREATE INDEX IF NOT EXISTS queues_domain ON queues (did);
CREATE INDEX IF NOT EXISTS queues_out ON queues (did, inflight)
    WHERE inflight > 0 AND did IS NOT NULL;
CREATE INDEX IF NOT EXISTS queues_parked ON queues (did, parked) WHERE parked IS NOT NULL;
"""
"""A domain's queues (counted for ``max_domain_queues``), those with leases out (their
sum is the domain's leases in flight, for ``domain_concurrency``) and those parked
(``queues.parked``: the end of the rest parking gave them, see rules): made once
``queues.did`` exists."""


def domains_of_queues(conn: sqlite3.Connection) -> None:
    """Give each queue without a domain (made by a store without domain rules, or before
    domains existed) its domain, and each domain the entries those queues accepted."""
    rows = conn.execute("SELECT qid, key, accepted FROM queues WHERE did IS NULL").fetchall()
    if not rows:
        return
    from ..policies.domains import domain_of

    names = [domain_of(key) for _, key, _ in rows]
    conn.executemany("INSERT OR IGNORE INTO domains (name) VALUES (?)",
                     [(n,) for n in set(names)])
    dids = dict(conn.execute("SELECT name, did FROM domains"))
    conn.executemany("UPDATE queues SET did=? WHERE qid=?",
                     [(dids[n], qid) for n, (qid, _, _) in zip(names, rows)])
    accepted: dict[int, int] = {}
    for n, (_, _, acc) in zip(names, rows):
        accepted[dids[n]] = accepted.get(dids[n], 0) + acc
    conn.executemany("UPDATE domains SET accepted=accepted+? WHERE did=?",
                     [(a, d) for d, a in accepted.items()])


def check(path: str) -> list[str]:
    """What SQLite's integrity check and a look at crawlq's own tables find wrong with
    the store file at ``path`` (read only); empty when nothing. A file that cannot be
    written (read-only media) is read as immutable: SQLite could not make the shared
    memory file that reading a WAL database with others takes, and no one can be
    writing it there."""
    fixed = "" if _writable(path) else "&immutable=1"
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro{fixed}", uri=True)
    except sqlite3.Error as exc:
        return [f"cannot open it: {exc}"]
    try:
        problems = [line for r in conn.execute("PRAGMA integrity_check(100)")
                    for line in str(r[0]).splitlines()
                    if line != "ok" and not line.startswith("*** in database")]
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        missing = sorted({"meta", "queues", "entries", "dead"} - names)
        if missing:
            problems.append(f"not a crawlq store: no table {', '.join(missing)}")
        return problems
    except sqlite3.Error as exc:
        err = store_error(path, exc)
        if not isinstance(err, StoreCorrupt):  # (a lock or a full disk is no damage)
            raise err from exc
        return [str(exc)]
    finally:
        conn.close()
