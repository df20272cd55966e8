"""The SQLite store's own machinery, seen from outside: entry and seen-set levels,
read-ahead, schema upgrades, damaged and newer files, group commit of small calls,
cached queue rows across processes, values whose time is up."""

from __future__ import annotations

import math
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_stores_agree import lease_step

from crawlq import Frontier, Request, StoreCorrupt
from crawlq.handles import handle, lease_of
from crawlq.stores import sqlite_ahead, sqlite_levels, sqlite_values
from crawlq.stores.memory import MemoryStore
from crawlq.testing import FAST, Clock


def _level_sizes(path: Path, tables: tuple[str, ...] = ("seen0", "seen1", "seen")
                 ) -> dict[str, int]:
    with sqlite3.connect(path) as c:
        return {t: c.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}


def test_sqlite_entry_levels_keep_queue_order(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Queued entries through entries0 -> entries1 -> entries (merged every 50 rows):
    each host's requests still come out by priority, then first in first out, whichever
    level they are in, each exactly once, also after reopening."""

    monkeypatch.setattr(sqlite_levels, "L0_ROWS", 50)
    db = tmp_path / "f.db"
    reqs = [Request(f"https://h{i % 7}.example/p/{i}", priority=(i // 300) % 3)
            for i in range(2107)]
    with Frontier.open(f"sqlite:///{db}", concurrency=3, **FAST) as f:
        for i in range(0, len(reqs), 42):
            assert f.add(reqs[i:i + 42]).added == len(reqs[i:i + 42])
    sizes = _level_sizes(db, ("entries0", "entries1", "entries"))
    assert all(sizes.values()) and sum(sizes.values()) == 2107, sizes
    out: dict[str, list[tuple[int, int]]] = {}
    with Frontier.open(f"sqlite:///{db}", concurrency=3, **FAST) as f:
        while leases := f.next(11):
            for lease in leases:
                n = int(lease.request.url.rsplit("/", 1)[1])
                out.setdefault(lease.queue, []).append((-lease.request.priority, n))
            f.done(leases)
        assert f.stats().finished
    assert sum(len(v) for v in out.values()) == 2107
    for got in out.values():
        assert got == sorted(got)  # priority first, then the order they were added in


def test_sqlite_level0_grows_with_the_store(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Level 0 merges at L0_ROWS rows in a small store, and at 1/50 of the rows (up to
    4 x L0_ROWS) in a big one: fewer, bigger merges. Every entry still comes out once."""

    monkeypatch.setattr(sqlite_levels, "L0_ROWS", 10)
    assert [sqlite_levels.l0_limit(n) for n in (0, 500, 1000, 1500, 10**9)] == \
        [10, 10, 20, 30, 40]
    db = tmp_path / "f.db"
    peak_small = peak_big = 0
    with Frontier.open(f"sqlite:///{db}", concurrency=1000, **FAST) as f:
        for i in range(0, 2800, 7):
            f.add([Request(f"https://h{j % 13}.example/{j}") for j in range(i, i + 7)])
            rows = _level_sizes(db, ("entries0",))["entries0"]
            if i < 400:
                peak_small = max(peak_small, rows)
            elif i >= 2100:
                peak_big = max(peak_big, rows)
        # (the add that brings level 0 to its limit merges it: after an add of 7, level 0
        # holds less than the limit, and at least the limit - 7 before a merge)
        assert peak_small < 10
        assert 40 - 7 <= peak_big < 40  # (from 2,000 queued: 40, 4 x 10)
        taken = 0
        while leases := f.next(100):
            taken += len(leases)
            f.done(leases)
        assert taken == 2800 and f.stats().finished


def test_sqlite_level_cursors_survive_merges_and_redelivery(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries leased from levels 1 and 2 stay there behind their queue's cursors. New
    entries merged into those levels that sort before a cursor (a better priority), leases
    that expire back, and a reopen neither lose nor repeat an entry."""

    monkeypatch.setattr(sqlite_levels, "L0_ROWS", 5)
    monkeypatch.setattr(sqlite_levels, "SLICES", 2)  # the queue's slice merges every 2nd
    now = [1000.0]
    db = tmp_path / "f.db"
    opts = dict(clock=lambda: now[0], lease_ttl=10, concurrency=1000, **FAST)
    first = [f"https://a.example/first/{i}" for i in range(66)]
    better = [f"https://a.example/better/{i}" for i in range(30)]
    worse = [f"https://a.example/worse/{i}" for i in range(30)]
    with Frontier.open(f"sqlite:///{db}", **opts) as f:
        for i in range(0, 66, 6):
            assert f.add(first[i:i + 6]).added == 6
        sizes = _level_sizes(db, ("entries0", "entries1", "entries"))
        assert sizes == {"entries0": 0, "entries1": 6, "entries": 60}
        with f.transaction():  # (committed at once: the file is read below)
            leases = f.next(64)
        assert [lease.request.url for lease in leases] == first[:64]
        assert _level_sizes(db, ("entries0", "entries1", "entries")) == sizes  # no deletes
        with sqlite3.connect(db) as c:
            assert c.execute("SELECT l1_nprio, l2_nprio FROM queues").fetchone() == (0, 0)
        f.done(leases[:30])  # the other 34 are left to expire
        for i in range(0, 30, 6):
            assert f.add([Request(u, priority=3) for u in better[i:i + 6]]).added == 6
            assert f.add([Request(u, priority=-3) for u in worse[i:i + 6]]).added == 6
        assert f.stats().queued == 2 + 60
    now[0] += 11
    order: list[str] = []
    with Frontier.open(f"sqlite:///{db}", **opts) as f:
        while leases := f.next(7):
            order += [lease.request.url for lease in leases]
            f.done(leases)
        s = f.stats()
        assert s.finished and s.redelivered == 34 and s.done == 126
    # By priority, then in the order added; the expired leases come back in their place.
    assert order == better + first[30:] + worse


_AHEAD_VARIANTS = {"off": (0, 65_536, 1024, 4), "default": (16, 65_536, 1024, 4),
                   "tiny": (2, 65_536, 1024, 1), "full": (4, 12, 1024, 1),
                   "renew": (4, 65_536, 2, 1)}


@pytest.mark.parametrize("hosts", [9, 40])
@pytest.mark.parametrize("concurrency", [1, 1000])
@pytest.mark.parametrize("l0_rows", [7, 100_000])
def test_sqlite_read_ahead_leases_like_the_heads_statement(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, l0_rows: int,
        concurrency: int, hosts: int) -> None:
    """Entries read ahead per queue (sqlite_ahead.ReadAhead) give the same leases in the
    same order as the heads statement alone (read-ahead off), on a random mix of adds
    on 9 or 40 hosts (random priorities: some before what was read ahead), leases of random
    sizes, acknowledgements, failures, retries, expiries, adds by a second connection
    to the same file, and reopens; with small and large read-ahead, with a bound so
    small that most queues take the heads statement, with all dropped every 2 calls,
    for big queues only or all, and with levels merged every 7 rows or never."""
    import random

    monkeypatch.setattr(sqlite_levels, "L0_ROWS", l0_rows)
    monkeypatch.setattr(sqlite_levels, "SLICES", 2)
    rng = random.Random(11)
    ops: list[tuple[str, Any]] = []
    for _ in range(400):
        op = rng.choice(["add", "add", "next", "next", "next", "done", "fail", "retry",
                         "expire", "other", "reopen"])
        if op in ("add", "other"):
            ops.append((op, [(rng.randrange(hosts), rng.randint(-3, 3))
                             for _ in range(rng.randint(1, 25))]))
        elif op in ("next", "done", "fail", "retry"):
            ops.append((op, rng.randint(1, 30)))
        elif rng.random() < 0.2:
            ops.append((op, None))

    def run(variant: str) -> list[list[str]]:
        for name, value in zip(("AHEAD", "AHEAD_ROWS", "AHEAD_RENEW", "AHEAD_FROM"),
                               _AHEAD_VARIANTS[variant]):
            monkeypatch.setattr(sqlite_ahead, name, value)
        now = [1000.0]
        db = tmp_path / f"{variant}.db"
        opts: dict[str, Any] = dict(clock=lambda: now[0], lease_ttl=10, max_retries=2,
                                    concurrency=concurrency, **FAST)
        out: list[list[str]] = []
        held: list[Any] = []
        n = 0

        def requests(arg: list[tuple[int, int]]) -> list[Request]:
            nonlocal n
            n += len(arg)
            return [Request(f"https://h{h}.example/{n - len(arg) + i}", priority=p)
                    for i, (h, p) in enumerate(arg)]

        f = Frontier.open(f"sqlite:///{db}", **opts)
        try:
            for op, arg in ops:
                if op == "add":
                    f.add(requests(arg))
                elif op == "other":  # another connection: this one's reads are stale
                    with Frontier.open(f"sqlite:///{db}", **opts) as g:
                        g.add(requests(arg))
                elif lease_step(f, op, arg, out, held):
                    pass
                elif op == "expire":
                    now[0] += 11  # every lease held expires
                    held.clear()
                else:
                    f.close()
                    f = Frontier.open(f"sqlite:///{db}", **opts)
                    held.clear()  # (their leases expire below)
            now[0] += 11  # the leases held expire
            while not f.stats().finished:
                while leases := f.next(7):
                    out.append([lease.request.url for lease in leases])
                    f.done(leases)
                now[0] += 1000  # failures wait out their backoff
            s = f.stats()
            assert s.done + s.dead == s.seen == n
        finally:
            f.close()
        return out

    expected = run("off")
    assert sum(map(len, expected)) > 1000
    for variant in ("default", "tiny", "full", "renew"):
        assert run(variant) == expected, variant


@pytest.mark.parametrize("ahead_from", [1, 0])
def test_sqlite_read_ahead_sees_entries_added_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ahead_from: int) -> None:
    """A queue's entries read ahead, all it had, then one more added after them (a worse
    priority) and one before them (a better one): each is leased in its place, and the
    queue's place in the line follows its head; with and without reading ahead."""
    monkeypatch.setattr(sqlite_ahead, "AHEAD_FROM", ahead_from or 10**9)
    with Frontier.open(f"sqlite:///{tmp_path}/f.db", concurrency=1000, **FAST) as f:
        f.add([Request("https://a.example/1", priority=5),
               Request("https://a.example/2", priority=5),
               Request("https://b.example/x", priority=0)])

        def take() -> str:
            (lease,) = f.next(1)
            f.done(lease)
            return lease.request.url

        assert take() == "https://a.example/1"  # (a's two read ahead: all it has)
        assert bool(f.store._db.ahead.queues) == bool(ahead_from)  # type: ignore[attr-defined]
        f.add([Request("https://a.example/3", priority=-5)])
        assert [take() for _ in range(3)] == [
            "https://a.example/2", "https://b.example/x", "https://a.example/3"]
        f.add([Request(f"https://a.example/{i}", priority=5) for i in (4, 5, 6)])
        assert take() == "https://a.example/4"
        f.add([Request("https://a.example/7", priority=9)])
        assert [take() for _ in range(3)] == [
            "https://a.example/7", "https://a.example/5", "https://a.example/6"]
        assert f.stats().finished


def test_sqlite_read_ahead_is_bounded(tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """What a connection reads ahead stays near its bound however many queues are ready
    (then the others take the heads statement), its count matches what it holds, and
    every entry is still leased once."""
    monkeypatch.setattr(sqlite_ahead, "AHEAD", 4)
    monkeypatch.setattr(sqlite_ahead, "AHEAD_ROWS", 100)
    monkeypatch.setattr(sqlite_levels, "L0_ROWS", 500)
    urls = [f"https://h{i % 200}.example/{i}" for i in range(4000)]
    with Frontier.open(f"sqlite:///{tmp_path}/f.db", concurrency=1000, **FAST) as f:
        for i in range(0, len(urls), 1000):
            f.add([Request(u, priority=j % 3) for j, u in enumerate(urls[i:i + 1000])])
        store = f.store
        leased: list[str] = []
        most = 0
        while leases := f.next(50):
            leased += [lease.request.url for lease in leases]
            f.done(leases)
            ahead = store._db.ahead  # type: ignore[attr-defined]
            held = sum(len(rows) for rows, _ in ahead.queues.values())
            assert held == ahead.rows
            most = max(most, held)
        assert 0 < most <= 3 * 100
        assert sorted(leased) == sorted(urls)


def test_sqlite_seen_levels_merge_and_still_dedup(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Thousands of fingerprints through seen0 -> seen1 -> seen (merged every 50 keys, one
    of 16 key slices at a time): every one is still a duplicate, before and after reopening,
    a revisit's newer time in a young level wins over the old one in seen, and a dump
    lists each fingerprint once."""

    monkeypatch.setattr(sqlite_levels, "L0_ROWS", 50)
    db = tmp_path / "f.db"
    now = [1000.0]
    urls = [f"https://h{i % 37}.example/p/{i}" for i in range(3000)]
    with Frontier.open(f"sqlite:///{db}", clock=lambda: now[0], revisit_after=100,
                       **FAST) as f:
        for i in range(0, len(urls), 70):
            assert f.add(urls[i:i + 70]).added == len(urls[i:i + 70])
        sizes = _level_sizes(db)
        assert sizes["seen"] > 1000 and sizes["seen1"] > 0 and sum(sizes.values()) == 3000
        assert f.add(urls).added == 0
    with Frontier.open(f"sqlite:///{db}", clock=lambda: now[0], revisit_after=100,
                       **FAST) as f:
        assert f.add(urls[::-1]).added == 0
        now[0] += 101  # every fingerprint may be accepted again: once, with a new time
        assert f.add(urls[:500]).added == 500
        assert f.add(urls[:500]).added == 0
        sizes = _level_sizes(db)
        assert sum(sizes.values()) > 3000  # the revisited keys are in two levels for now
        seen = [r["fp"] for r in f.records() if r.get("type") == "seen"]
        assert len(seen) == len(set(seen)) == 3000
        now[0] += 50  # the revisited 500 are not due again; the other 2,500 still are
        assert f.add(urls).added == 2500


_LEASES_V3 = ("CREATE TABLE leases (token INTEGER PRIMARY KEY, expires REAL NOT NULL, "
              "qid INTEGER NOT NULL, nprio INTEGER NOT NULL, ord INTEGER NOT NULL, "
              "retries INTEGER NOT NULL, payload BLOB NOT NULL)")
"""Schemas 1 to 3 kept a row per lease."""


def _as_lease_rows(c: sqlite3.Connection) -> None:
    """Turn a file's leases back into schema 3's rows."""
    c.execute(_LEASES_V3)
    for token, expires, qid, nprio, order, retries, payload in [
            (first + k, expires, *row)
            for last, first, expires in c.execute(
                "SELECT last, first, expires FROM lease_calls").fetchall()
            for k, row in enumerate(_open_call(c, last))]:
        c.execute("INSERT INTO leases VALUES (?,?,?,?,?,?,?)",
                  (token, expires, qid, nprio, order, retries, payload))
    c.execute("DROP TABLE lease_calls")
    c.execute("DROP TABLE lease_data")


def _open_call(c: sqlite3.Connection, last: int) -> list[tuple[Any, ...]]:
    from crawlq.stores import sqlite_leases

    (acked,) = c.execute("SELECT acked FROM lease_calls WHERE last=?", (last,)).fetchone()
    assert acked is None  # (every lease of the call still open)
    return [row for _, _, row in sqlite_leases._open_rows(c, "WHERE l.last = ?", (last,))]


def _as_values_without_log(c: sqlite3.Connection) -> None:
    """Make a store file's named values as schemas 1 to 7 kept them: in ``vals`` only."""
    c.execute("INSERT OR REPLACE INTO vals SELECT name, value, expires FROM vals_log")
    c.execute("DROP TABLE vals_log")
    c.execute("DELETE FROM meta WHERE name IN ('vals_seq', 'vals_merged', 'vals_rows')")


def test_sqlite_schema_7_file_keeps_its_values(tmp_path: Path) -> None:
    """A file from before the log of named values (schema 7) opens with its values
    readable, replaced and dropped as any; new ones go to the log."""
    db = tmp_path / "old.db"
    with Frontier.open(f"sqlite:///{db}", **FAST) as f:
        f.store.put_values([(f"v:{i}", b"old", None) for i in range(5)])
    with sqlite3.connect(db) as c:
        _as_values_without_log(c)
        c.execute("UPDATE meta SET value=7 WHERE name='schema'")
    with Frontier.open(f"sqlite:///{db}", **FAST) as f:
        f.store.put_values([("v:1", b"new", None), ("v:9", b"nine", None)])
        f.store.drop_values(["v:2"])
        assert f.store.get_values([f"v:{i}" for i in (0, 1, 2, 9)], 0.0) == [
            b"old", b"new", None, b"nine"]
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT name FROM vals_log ORDER BY id").fetchall() == [
            ("v:1",), ("v:9",)]
        assert c.execute("SELECT value FROM meta WHERE name='schema'").fetchone() == (8,)


def test_sqlite_older_schema_file_open_elsewhere_is_not_upgraded(tmp_path: Path) -> None:
    """A file of an older schema that another process has open (an older crawlq, which
    would go on writing the old layout) is not upgraded: a clear StoreBusy, the file
    unchanged; once that process is gone, it opens and is upgraded."""
    from crawlq import StoreBusy
    from crawlq.stores.sqlite_group import Openers

    db = tmp_path / "old.db"
    with Frontier.open(f"sqlite:///{db}", **FAST) as f:
        f.put_value("kept", b"1")
    with sqlite3.connect(db) as c:
        _as_values_without_log(c)
        c.execute("UPDATE meta SET value=7 WHERE name='schema'")
    elsewhere = Openers(str(db))  # (what every store object holds while it is open)
    with pytest.raises(StoreBusy, match="schema 7, open in another process"):
        Frontier.open(f"sqlite:///{db}", **FAST)
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT value FROM meta WHERE name='schema'").fetchone() == (7,)
    elsewhere.close()
    with Frontier.open(f"sqlite:///{db}", **FAST) as f:
        assert f.get_value("kept") == b"1"


@pytest.mark.parametrize("schema", [1, 2, 3, 4, 5, 6, 7])
def test_sqlite_older_schema_file_is_upgraded(tmp_path: Path, schema: int) -> None:
    """A file written before the seen-set had levels (schema 1), before level 2 had
    cursors (schema 2), before leases were kept per call (schema 3), before level 0 had
    cursors (schema 4), before ties in the ready line went by key (schema 5), before
    queues had domains (schema 6), or before named values had a log (schema 7) opens,
    keeps its fingerprints, entries and values, and gets the new tables, columns and
    index; its queues get their domains."""
    db = tmp_path / "old.db"
    with Frontier.open(f"sqlite:///{db}", **FAST) as f:
        f.add(["https://a.example/1", "https://a.example/2"])
    with sqlite3.connect(db) as c:  # make it look like the old schema
        c.execute("INSERT INTO seen SELECT * FROM seen0")
        c.execute("INSERT INTO entries SELECT * FROM entries0")
        c.execute("DELETE FROM seen0")
        c.execute("DELETE FROM entries0")
        for level, since in ((0, 5), (2, 3)):
            if schema < since:
                c.execute(f"ALTER TABLE queues DROP COLUMN l{level}_nprio")
                c.execute(f"ALTER TABLE queues DROP COLUMN l{level}_ord")
        if schema <= 3:
            _as_lease_rows(c)
        if schema == 1:
            for t in ("seen0", "seen1", "entries0", "entries1"):
                c.execute(f"DROP TABLE {t}")
            c.execute("DELETE FROM meta WHERE name IN ('seen0_keys', 'seen_slice', "
                      "'entries0_rows', 'entry_slice')")
        c.execute("DROP INDEX queues_line")
        c.execute("DROP INDEX queues_domain")
        c.execute("DROP INDEX queues_out")
        c.execute("DROP INDEX queues_parked")
        c.execute("ALTER TABLE queues DROP COLUMN did")
        c.execute("ALTER TABLE queues DROP COLUMN parked")
        c.execute("DROP TABLE domains")
        c.execute("CREATE INDEX queues_ready ON queues (head, since) WHERE state = 0")
        _as_values_without_log(c)
        c.execute("UPDATE meta SET value=? WHERE name='schema'", (schema,))
    with Frontier.open(f"sqlite:///{db}", **FAST) as f:
        assert f.add(["https://a.example/1", "https://a.example/3"]).added == 1
        assert [lease.request.url for lease in f.next(3)] == ["https://a.example/1"]
        assert (f.stats().queued, f.stats().leased) == (2, 1)
        entries = [r for r in f.records() if r.get("type") == "entry"]
        assert len(entries) == 3  # 2 queued and the leased one
    assert _level_sizes(db) == {"seen0": 1, "seen1": 0, "seen": 2}
    # The leased row stays in level 2, behind its queue's cursor, until its slice merges.
    assert _level_sizes(db, ("entries0", "entries")) == {"entries0": 1, "entries": 2}
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT l2_nprio, l2_ord FROM queues").fetchall() == [(0, 1)]
        assert c.execute("SELECT value FROM meta WHERE name='schema'").fetchone() == (8,)
        # (domains are kept only under domain rules: opened with one, queues get theirs)
        assert c.execute("SELECT count(*) FROM domains").fetchone() == (0,)
    Frontier.open(f"sqlite:///{db}", max_domain_urls=10, **FAST).close()
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT name, domains.accepted FROM domains JOIN queues USING (did)"
                         ).fetchall() == [("a.example", 3)]
        indexes = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert "queues_line" in indexes and "queues_ready" not in indexes
        assert not c.execute("SELECT 1 FROM sqlite_master WHERE name='leases'").fetchall()


def test_damaged_lease_data_is_store_corrupt(tmp_path: Path) -> None:
    """A lease call whose packed data lost bytes is a StoreCorrupt naming it, from
    ``done`` and from the expiry that ``next`` runs, not an IndexError."""
    db = tmp_path / "l.db"
    now = [1000.0]
    opts = dict(clock=lambda: now[0], lease_ttl=10, **FAST)
    with Frontier.open(f"sqlite:///{db}", **opts) as f:
        f.add([f"https://h{i}.example/" for i in range(3)])
        leases = f.next(3)
    with sqlite3.connect(db) as c:
        c.execute("UPDATE lease_data SET ints = substr(ints, 1, 40)")
    with Frontier.open(f"sqlite:///{db}", group_commit=0, **opts) as f:
        with pytest.raises(StoreCorrupt, match=r"lease data of a next\(\) call is damaged"):
            f.done(leases)
        now[0] += 11
        with pytest.raises(StoreCorrupt, match="damaged: 40 bytes where 96"):
            f.next(3)
    # With group commit (the default) the answer is held, and the damage is reported by
    # the call that commits it (here next(); close() too: nothing is dropped quietly).
    f = Frontier.open(f"sqlite:///{db}", **opts)
    f.done(leases)
    with pytest.raises(StoreCorrupt, match=r"lease data of a next\(\) call is damaged"):
        f.next(3)
    with pytest.raises(StoreCorrupt):
        f.close()


def test_sqlite_schema_3_leases_survive_the_upgrade(tmp_path: Path) -> None:
    """Leases held in a schema-3 file (a row each) are still held after the upgrade:
    answerable, and redelivered when they expire."""
    db = tmp_path / "old.db"
    now = [1000.0]
    opts = dict(clock=lambda: now[0], lease_ttl=10, **FAST)
    with Frontier.open(f"sqlite:///{db}", **opts) as f:
        f.add([f"https://h{i}.example/p" for i in range(3)])
        a, b = f.next(2)
    with sqlite3.connect(db) as c:
        _as_lease_rows(c)
        assert c.execute("SELECT count(*) FROM leases").fetchone() == (2,)
        c.execute("UPDATE meta SET value=3 WHERE name='schema'")
    with Frontier.open(f"sqlite:///{db}", **opts) as f:
        assert f.done(a) == 1
        assert f.done(a) == 0  # (answered already)
        assert f.stats().leased == 1
        now[0] += 11  # b's lease expires: it comes back, once
        back = f.next(5)
        assert b.request.url in [le.request.url for le in back]
        stats = f.stats()
        assert (stats.redelivered, stats.done, stats.leased) == (1, 1, 2)


def test_sqlite_file_of_a_newer_crawlq_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    Frontier.open(f"sqlite:///{db}", **FAST).close()
    with sqlite3.connect(db) as c:
        c.execute("UPDATE meta SET value=99 WHERE name='schema'")
    with pytest.raises(StoreCorrupt, match="schema 99"):
        Frontier.open(f"sqlite:///{db}", **FAST)


def test_sqlite_queue_rows_cached_by_one_process_follow_another(tmp_path: Path) -> None:
    """A store keeps the queue rows it read or wrote in memory while no other connection
    commits: here another one acknowledges its lease and changes the queue's settings, and
    the first one's next add and next lease go by the file, not by what it remembered
    (a stale row would write the finished lease back as in flight: the queue stuck busy)."""
    db = f"sqlite:///{tmp_path}/f.db"
    with Frontier.open(db, **FAST) as a, Frontier.open(db, **FAST) as b:
        a.add([f"https://h.example/{i}" for i in range(3)])
        (lease,) = a.next(10)  # concurrency 1: the queue is busy now
        a.add(["https://h.example/3"])  # (its row is in a's memory now)
        assert a.next(10) == []
        b.done(lease)
        b.configure_queue("h.example", concurrency=2)
        a.add(["https://h.example/4"])
        got = a.next(10)
        assert [x.request.url for x in got] == ["https://h.example/1", "https://h.example/2"]
        a.done(got)
        s = a.stats(per_queue=5)
        assert (s.leased, s.done, s.queued) == (0, 3, 2)
        assert s.per_queue[0].leased == 0 and s.per_queue[0].queued == 2


def test_a_locked_full_or_read_only_store_is_not_called_damaged(tmp_path: Path) -> None:
    """Each says what it is (a user told "damaged" might delete a healthy crawl), and
    the store is intact afterwards."""
    from crawlq import StoreBusy, StoreFull, StoreReadOnly

    path = tmp_path / "f.db"
    url = f"sqlite:///{path}"
    with Frontier.open(url, **FAST) as f:
        f.add("https://a.example/1")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process in the middle of a write
    try:
        with pytest.raises(StoreBusy, match="locked by another connection"), \
                Frontier.open(url, busy_timeout=0.2, **FAST) as f:
            f.add("https://a.example/2")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with Frontier.open(url, **FAST) as f:
        f.store._db.conn.execute("PRAGMA max_page_count=1")  # type: ignore[attr-defined]
        with pytest.raises(StoreFull, match="the disk is full"):  # (as a full disk does)
            f.add([f"https://b.example/{i}" for i in range(5000)])
        f.store._db.conn.execute("PRAGMA query_only=1")  # type: ignore[attr-defined]
        with pytest.raises(StoreReadOnly, match="cannot be written"):
            f.add("https://c.example/")
    with Frontier.open(url, **FAST) as f:  # nothing of the failed calls was kept
        s = f.stats()
        assert (s.seen, s.queued) == (1, 1)


def test_a_held_answer_is_checked_against_the_leases_this_store_made(
        tmp_path: Path) -> None:
    """A small answer (held for group commit) is checked against the leases this store
    object made, without reading the file; a lease another process leased is read from
    the file. A lease another process answered first is found at the commit: counted
    late, never applied twice."""
    url = f"sqlite:///{tmp_path}/own.db"
    with Frontier.open(url, **FAST) as f, Frontier.open(url, **FAST) as g:
        f.add([f"https://h{i}.example/" for i in range(3)])
        with f.transaction():  # (committed at once: g reads them from the file)
            a, b, c = f.next(3)
        assert g.done(lease_of(handle(a))) == 1  # (g made no lease: it reads the file)
        assert g.done(lease_of(handle(a))) == 0
        g.store._commit_held()  # type: ignore[attr-defined]
        assert f.done(a) == 1  # (what f knows of its own leases: found late below)
        assert f.done([b, c]) == 2 and f.done(b) == 0
        f.store._commit_held()  # type: ignore[attr-defined]
        s = f.stats()
        assert (s.done, s.late_acks, s.leased) == (3, 3, 0)  # (a twice more, b once)


def test_held_answers_keep_being_committed_while_they_keep_coming(tmp_path: Path) -> None:
    """The flusher thread, woken by the first answer held, then looks every
    group_commit seconds while answers keep coming (no wake-up per answer): each of a
    run of answers, a few ms apart, is committed soon without any further call."""
    url = f"sqlite:///{tmp_path}/tick.db"
    with Frontier.open(url, **FAST) as f, Frontier.open(url, **FAST) as other:
        f.add([f"https://h{i}.example/" for i in range(5)])
        for k, lease in enumerate(f.next(5), 1):
            assert f.done(lease) == 1
            deadline = time.monotonic() + 5
            while other.stats().done < k:
                assert time.monotonic() < deadline, f"answer {k} was never committed"
                time.sleep(0.002)


def test_small_acknowledgements_are_committed_together_and_soon(tmp_path: Path) -> None:
    """One done() per lease (group commit): another connection sees the answers within
    the group_commit delay, without any further call; a process that dies with answers
    held loses only those answers (the pages come back), never a request."""
    url = f"sqlite:///{tmp_path}/g.db"
    with Frontier.open(url, lease_ttl=1, **FAST) as f:
        f.add([f"https://h{i}.example/" for i in range(4)])
        leases = f.next(4)
        assert [f.done(le) for le in leases[:2]] == [1, 1]
        assert f.done(leases[0]) == 0  # answered twice: once
        with Frontier.open(url, **FAST) as other:
            deadline = time.monotonic() + 5
            while other.stats().done < 2:  # (the flusher thread commits them: no call of f)
                assert time.monotonic() < deadline, "held answers were never committed"
                time.sleep(0.01)
            assert other.stats().late_acks == 1
    time.sleep(1.1)  # (the other two leases expire: the process below takes them)
    code = (
        "import os, sys\nfrom crawlq import Frontier\n"
        f"f = Frontier.open({url!r}, lease_ttl=1, group_commit=1.0, min_delay=0, "
        "max_delay=0, delay_factor=0)\n"
        "leases = f.next(2)\nfor le in leases: f.done(le)\n"
        "print(len(leases), flush=True)\nos._exit(0)  # (dies with the answers held)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.stdout.strip() == "2", r.stderr
    time.sleep(1.1)  # past their leases
    with Frontier.open(url, **FAST) as f:
        s = f.stats()
        assert (s.done, s.leased, s.queued) == (2, 0, 2)  # the two came back
        assert len(f.next(5)) == 2



def test_small_lease_calls_are_committed_together_and_soon(tmp_path: Path) -> None:
    """A small next() of a store object alone on its file leaves its transaction open
    for the calls that follow (group commit): the flusher commits it within
    group_commit, close() at once. A process that dies first loses only those leases:
    their requests are handed out again at once, none lost. With another store object
    on the file, a lease call commits before it returns (the other's writes would
    wait for it), and so does one in a transaction() block."""
    url, db = f"sqlite:///{tmp_path}/l.db", tmp_path / "l.db"

    def queued_in_file() -> int:  # (as another process sees the file)
        with sqlite3.connect(db) as c:
            return int(c.execute("SELECT value FROM meta WHERE name='queued'").fetchone()[0])

    with Frontier.open(url, group_commit=1.0, **FAST) as f:
        f.add([f"https://h{i}.example/" for i in range(6)])
        assert queued_in_file() == 6  # (an add commits before it returns)
        first = f.next(1)
        assert queued_in_file() == 6  # (not committed yet)
        assert f.done(first) == 1 and len(f.next(1)) == 1  # (joins the open transaction)
        deadline = time.monotonic() + 5
        while queued_in_file() != 4:  # (the flusher commits both: no call of f)
            assert time.monotonic() < deadline, "a small lease call was never committed"
            time.sleep(0.01)
        with f.transaction():
            f.next(1)
        assert queued_in_file() == 3
        with Frontier.open(url, **FAST) as other:
            assert len(f.next(1)) == 1 and queued_in_file() == 2  # (not alone: at once)
            assert other.stats().leased == 3
        assert (tmp_path / "l.db-open").exists()  # (f still has it open)
        f.next(1)
        assert queued_in_file() == 2
    assert queued_in_file() == 1  # (close commits)
    assert not (tmp_path / "l.db-open").exists()  # (the last to close removes it)
    code = (
        "import os\nfrom crawlq import Frontier\n"
        f"f = Frontier.open({url!r}, group_commit=1.0, min_delay=0, max_delay=0, "
        "delay_factor=0)\n"
        "print(len(f.next(5)), flush=True)\nos._exit(0)  # (dies with its leases open)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.stdout.strip() == "1", r.stderr
    with Frontier.open(url, **FAST) as f:  # (no lease to wait for: it was never made)
        s = f.stats()
        assert (s.queued, s.leased, s.done) == (1, 4, 1)
        assert len(f.next(5)) == 1

def _values_held(f: Frontier) -> int:
    """How many named values the store holds, expired or not (its own room for them)."""
    store: Any = f.store
    if isinstance(store, MemoryStore):
        return len(store._values)
    if type(store).__name__ == "SQLiteStore":
        store._commit_held()  # (what another connection sees once it is committed)
        with sqlite3.connect(store.path) as c:
            return int(c.execute("SELECT (SELECT count(*) FROM vals) + "
                                 "(SELECT count(*) FROM vals_log)").fetchone()[0])
    held, expiring = store._client.hlen(f"{store._p}:kv"), store._client.zcard(f"{store._p}:kvx")
    assert expiring <= held
    return int(held)


@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis"])
def test_values_whose_time_is_up_are_dropped(kind: str, tmp_path: Path,
                                             request: pytest.FixtureRequest) -> None:
    """Named values take no room once their time is up (a server leaves one per URL it
    hands out): a call that wakes queues drops them, 1,000 at least per call; values
    kept for good or for longer stay; one put again before the drop is the new one."""
    url = {"memory": "memory://", "sqlite": f"sqlite:///{tmp_path}/v.db"}.get(kind) or \
        f"{request.getfixturevalue('redis_server').url}?prefix=values"
    clock = Clock()
    with Frontier.open(url, clock=clock, **FAST) as f:
        own = _values_held(f)  # (the frontier keeps its settings as one)
        f.store.put_values([(f"lease:{i}", b"h", clock() + 10) for i in range(2500)])
        for i in range(5):
            f.put_value(f"robots:{i}", b"r", ttl=1000)
            f.put_value(f"for-good:{i}", b"g")
        assert _values_held(f) == own + 2510
        clock.advance(20)
        f.put_value("lease:7", b"again", ttl=100)
        for _ in range(3):
            assert f.next(10) == []
        assert _values_held(f) == own + 11
        assert f.get_value("lease:7") == b"again"
        clock.advance(1000)
        f.stats()
        assert _values_held(f) == own + 5
        assert [f.get_value(f"for-good:{i}") for i in range(5)] == [b"g"] * 5


def test_sqlite_skips_waking_only_while_nothing_can_be_due(tmp_path: Path) -> None:
    """The SQLite store skips _wake's statements while it knows nothing can be due;
    each write of its own that makes something due later (an entry scheduled by add
    or by a retry, a lease's expiry, a queue's rest) brings that time forward."""
    clock = Clock()
    f = Frontier.open(f"sqlite:///{tmp_path}/w.db", clock=clock, min_delay=5.0,
                      max_delay=5.0, delay_factor=0.0, lease_ttl=30)
    store: Any = f.store
    assert f.next(5) == [] and store._db.wake_due == math.inf  # known: nothing anywhere
    f.add([Request("https://a.example/1", not_before=clock() + 10)])  # scheduled
    clock.advance(9.9)
    assert f.next(5) == []
    clock.advance(0.1)
    (first,) = f.next(5)
    f.add(["https://a.example/2"])
    f.done(first, duration=0.2)  # the host rests 5 s
    clock.advance(4.9)
    assert f.next(5) == []
    clock.advance(0.1)
    (second,) = f.next(5)
    assert second.request.url == "https://a.example/2"
    clock.advance(30)  # its lease expires: back in its queue
    (again,) = f.next(5)
    assert again.request.url == second.request.url and f.stats().redelivered == 1
    f.retry(again, after=20)  # scheduled by an answer
    clock.advance(19.9)
    assert f.next(5) == []
    clock.advance(0.1)
    assert [le.request.url for le in f.next(5)] == ["https://a.example/2"]
    f.close()


def test_sqlite_a_queue_deleted_by_another_connection_is_made_again(tmp_path: Path) -> None:
    """A connection keeps queue ids by key; when another one deletes a queue (or
    clears the store), the first reads them again instead of adding to a queue id that
    is gone (which would lose what it adds)."""
    url = f"sqlite:///{tmp_path}/f.db"
    with Frontier.open(url, **FAST) as one, Frontier.open(url, **FAST) as two:
        one.add("https://a.example/1")
        assert two.delete_queue("a.example") == 1
        assert one.add("https://a.example/2").added == 1
        assert [le.request.url for le in two.next(5)] == ["https://a.example/2"]
        two.clear()
        assert one.add("https://a.example/3").added == 1
        assert two.stats().queued == 1
        assert [q.key for q in two.queues()] == ["a.example"]


def test_sqlite_a_store_file_from_before_the_queue_epoch_opens(tmp_path: Path) -> None:
    """A file made before crawlq kept ``queue_epoch`` (and the scheduled_queue index)
    opens with both, and deleting a queue from another connection works on it."""
    db = tmp_path / "old.db"
    with Frontier.open(f"sqlite:///{db}") as f:
        f.add("https://a.example/1")
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM meta WHERE name='queue_epoch'")
    conn.execute("DROP INDEX scheduled_queue")
    conn.commit()
    conn.close()
    with Frontier.open(f"sqlite:///{db}") as one, Frontier.open(f"sqlite:///{db}") as two:
        one.add("https://b.example/1")
        assert two.delete_queue("a.example") == 1
        assert one.add("https://a.example/2").added == 1
        assert sorted(q.key for q in two.queues()) == ["a.example", "b.example"]
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name='scheduled_queue'"
                        ).fetchone() == (1,)
    conn.close()


def test_sqlite_named_values_log_grows_with_the_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The log of named values is merged at LOG_ROWS values while the table is small,
    and at a quarter of the table's rows (up to MAX_LOG_ROWS) once it is bigger, so a
    merge (which rewrites the table) comes the rarer the bigger the table; a second
    connection follows the size the first one's merge set."""
    monkeypatch.setattr(sqlite_values, "LOG_ROWS", 10)
    monkeypatch.setattr(sqlite_values, "MAX_LOG_ROWS", 30)
    clock = Clock()
    url = f"sqlite:///{tmp_path}/v.db"
    one = Frontier.open(url, clock=clock, **FAST)
    two = Frontier.open(url, clock=clock, **FAST)

    def logged() -> int:
        with sqlite3.connect(one.store.path) as c:  # type: ignore[attr-defined]
            return int(c.execute("SELECT count(*) FROM vals_log").fetchone()[0])

    def put(f: Frontier, tag: str, n: int) -> None:
        f.store.put_values([(f"{tag}:{i}", b"v", None) for i in range(n)])

    put(one, "a", 9 - logged())  # (besides the frontier's own: its canonical form)
    assert logged() == 9
    put(one, "b", 1)  # (10 values: merged, the table small)
    assert logged() == 0
    put(one, "c", 100)  # (merged: 110 rows in the table, the next log 27 values)
    assert logged() == 0
    put(two, "d", 26)
    assert logged() == 26  # (past LOG_ROWS, under a quarter of the table)
    put(two, "e", 1)
    assert logged() == 0
    put(one, "f", 400)  # (merged; a quarter of the table is past MAX_LOG_ROWS)
    put(one, "g", 29)
    assert logged() == 29
    put(two, "h", 1)
    assert logged() == 0
    assert one.store.get_values(["a:0", "c:99", "d:25", "g:28", "h:0"], clock()) == [b"v"] * 5
    one.store.clear()  # (an empty table: LOG_ROWS again)
    put(two, "i", 10)
    assert logged() == 0
    one.close()
    two.close()


def test_sqlite_named_values_through_the_log_and_two_connections(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SQLite store's named values (crawlq.stores.sqlite_values): written to the log,
    merged into their table once the log is full; each connection keeps the log's names
    in memory, and follows what another one writes, replaces, drops, lets expire and
    merges; a value in the log whose time is up takes an older one of its name in the
    table with it; a rolled-back write leaves the value it replaced."""
    monkeypatch.setattr(sqlite_values, "LOG_ROWS", 10)
    clock = Clock()
    url = f"sqlite:///{tmp_path}/v.db"
    one = Frontier.open(url, clock=clock, **FAST)
    two = Frontier.open(url, clock=clock, **FAST)
    names = [f"a:{i}" for i in range(10)]

    def log(f: Frontier) -> list[str]:
        with sqlite3.connect(f.store.path) as c:  # type: ignore[attr-defined]
            return [r[0] for r in c.execute("SELECT name FROM vals_log ORDER BY id")]

    one.store.put_values([(n, b"first", None) for n in names])  # (a full log: merged)
    assert "a:0" not in log(one)
    two.store.put_values([("a:1", b"log", clock() + 10), ("a:2", b"two", None)])
    assert log(two)[-2:] == ["a:1", "a:2"]
    assert one.store.get_values(["a:1", "a:2", "a:3"], clock()) == [b"log", b"two", b"first"]
    one.store.put_values([("a:2", b"one", None)])  # (replaces two's row in the log)
    assert log(one).count("a:2") == 1
    assert two.store.get_values(["a:2"], clock()) == [b"one"]
    two.store.drop_values(["a:2", "a:3"])
    assert one.store.get_values(["a:2", "a:3"], clock()) == [None, None]
    clock.advance(20)
    assert one.next(1) == []  # (wakes: a:1's time is up, and its older row goes too)
    assert two.store.get_values(["a:1"], clock()) == [None]
    two.store.put_values([("c", b"kept", None)])
    with pytest.raises(RuntimeError), one.transaction():
        one.store.put_values([("a:4", b"undone", None), ("c", b"undone", None)])
        raise RuntimeError
    assert one.store.get_values(["a:4", "c"], clock()) == [b"first", b"kept"]
    two.store.put_values([(f"b:{i}", b"b", None) for i in range(10)])  # (merged again)
    assert log(one) == []
    assert one.store.get_values(["b:9", "a:4", "a:1"], clock()) == [b"b", b"first", None]
    one.close()
    two.close()
    with Frontier.open(url, clock=clock, **FAST) as again:
        assert again.store.get_values(["a:0", "a:1", "a:2", "b:0"], clock()) == [
            b"first", None, None, b"b"]
