"""The queue engine (stores/rules.py) as the stores run it: one definition of each
transition, so a plug point such as a QueuePolicy with a ``delay()`` of its own gives
the same rests on the memory and SQLite stores, and the lease rounds of one call come
out in the same order."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawlq import Frontier
from crawlq.stores import rules
from crawlq.stores.base import ACK_DONE, QueuePolicy, ack
from crawlq.stores.memory import MemoryStore
from crawlq.stores.sqlite import SQLiteStore

T0 = 1_800_000_000.0


class _QuickRestsLong(QueuePolicy):
    """A delay that does not grow with the fetch's duration: a quick answer (a cache
    hit, an error page) rests the queue long, a slow one briefly."""

    def delay(self, duration: float | None) -> float:
        return 10.0 if (duration or 0.0) < 1.0 else 1.0


def _stores(tmp_path: Path, group_commit: float) -> dict[str, Frontier]:
    clock = lambda: T0  # noqa: E731  (one instant: the rests are the answers')
    policy = _QuickRestsLong(concurrency=3)
    return {"memory": Frontier(MemoryStore(policy), clock=clock),
            "sqlite": Frontier(SQLiteStore(str(tmp_path / f"q{group_commit}.db"), policy,
                                           group_commit=group_commit), clock=clock)}


@pytest.mark.parametrize("group_commit", [0.0, 60.0])
def test_a_delay_of_its_own_rests_the_same_on_memory_and_sqlite(
        tmp_path: Path, group_commit: float) -> None:
    """Three leases of one queue answered in one call, and (held for group commit or
    not) in two calls: the queue rests the longest of its answers' rests, each answer's
    rest its policy's ``delay()`` of its own duration, on both stores."""
    rests = {}
    for kind, f in _stores(tmp_path, group_commit).items():
        f.add([f"http://a.test/{i}" for i in range(3)] + ["http://b.test/1",
                                                         "http://b.test/2"])
        got = f.next(10)
        a = [le for le in got if le.queue == "a.test"]
        b = [le for le in got if le.queue == "b.test"]
        f.done(a, duration=0.5)  # (one call: its durations 0.5 and, below, 2.0)
        f.done(b[0], duration=0.2)
        f.done(b[1], duration=2.0)
        rests[kind] = {q.key: q.ready_at - T0 for q in f.queues()}
        f.close()
    assert rests["memory"] == rests["sqlite"]
    assert rests["sqlite"]["b.test"] == 10.0  # (the quick answer's rest, not delay(2.0))


def test_one_call_with_answers_of_several_durations(tmp_path: Path) -> None:
    """One done() answering a quick and a slow lease of one queue: delay() of each."""
    rests = {}
    for kind, f in _stores(tmp_path, 60.0).items():
        f.add(["http://c.test/1", "http://c.test/2"])
        got = f.next(10)
        f.store.release([ack(got[0].token, ACK_DONE, 0.2), ack(got[1].token, ACK_DONE, 2.0)],
                        T0)
        rests[kind] = [q.ready_at - T0 for q in f.queues()]
        f.close()
    assert rests["memory"] == rests["sqlite"] == [10.0]


def test_rounds_serve_the_line_in_turn() -> None:
    """A lease call's rounds: one from each queue in line order, then a fair share of
    what is left from those with room, a round going on where ``left`` cut it short."""
    assert rules.rounds([1, 1, 1], 2) == [[(0, 1), (1, 1)]]
    assert rules.rounds([3, 1, 2], 10) == [[(0, 3), (1, 1), (2, 2)]]
    assert rules.rounds([5, 1, 5], 7) == [[(0, 2), (1, 1), (2, 2)], [(0, 1), (2, 1)]]
    assert rules.rounds([], 5) == []


def test_waking_goes_time_by_time_entries_first() -> None:
    """event_times: each distinct time once, in order; at a time both lists reach, the
    entries due end first (they are brought in before the expired leases)."""
    assert rules.event_times([1.0, 1.0, 3.0], [0.5, 1.0, 4.0]) == [
        (0.5, 0, 1), (1.0, 2, 2), (3.0, 3, 2), (4.0, 3, 3)]
    assert rules.event_times([], []) == []
    assert rules.expired_once(0, 1) == (1, False)
    assert rules.expired_once(1, 1) == (2, True)
    assert rules.expired_once(0, 0) == (1, True)


def test_an_answer_places_its_entry() -> None:
    """answer_place: done leaves, dead dies, a requeue waits for a later not_before or
    comes back at once (a not_before already past, or none)."""
    t = 100.0
    assert rules.answer_place(rules.ACK_DONE, 200.0, t) == rules.GONE
    assert rules.answer_place(rules.ACK_DEAD, None, t) == rules.DIES
    assert rules.answer_place(rules.ACK_REQUEUE, 200.0, t) == rules.LATER
    assert rules.answer_place(rules.ACK_REQUEUE, 100.0, t) == rules.BACK
    assert rules.answer_place(rules.ACK_REQUEUE, None, t) == rules.BACK


def test_parking() -> None:
    """A ready queue parked rests DOMAIN_WAIT at most; it is parked while that rest is
    its rest and not over; a domain's ended leases make the longest parked ready first
    (then by key), none whose park is over."""
    ready_at, parked = rules.park(50.0, 100.0)
    assert ready_at == parked == 100.0 + rules.DOMAIN_WAIT
    assert rules.is_parked(rules.RESTING, ready_at, parked, 101.0)
    assert not rules.is_parked(rules.RESTING, ready_at + 1, parked, 101.0)  # (a block since)
    assert not rules.is_parked(rules.RESTING, ready_at, parked, ready_at)  # (over)
    assert not rules.is_parked(rules.READY, ready_at, parked, 101.0)
    parked_queues = [(105.0, "b.test", 2), (103.0, "z.test", 3), (105.0, "a.test", 1),
                     (101.0, "c.test", 4)]
    assert rules.unparked_first(parked_queues, 2, 102.0) == [3, 1]
    assert rules.unparked_first(parked_queues, 9, 100.0) == [4, 3, 1, 2]
    policy = QueuePolicy(domain_concurrency=2)
    assert rules.joins_line(policy, 1, 0) and not rules.joins_line(policy, 1, 1)
    assert rules.joins_line(QueuePolicy(), 10**6, 10**6)  # (no cap)


def test_lease_order_is_the_same_on_memory_and_sqlite(tmp_path: Path) -> None:
    """One next() over queues of different priorities and sizes, concurrency 3: the
    leases come out in the same order on both stores (the rounds of rules.rounds)."""
    got = {}
    for kind, f in _stores(tmp_path, 0.0).items():
        f.add([f"http://{h}.test/{i}" for h in "abcdef" for i in range("abcdef".index(h) + 1)])
        got[kind] = [le.request.url for le in f.next(11)]
        f.close()
    assert got["memory"] == got["sqlite"]
    assert len(got["memory"]) == 11 and got["memory"][:6] == [
        f"http://{h}.test/0" for h in "abcdef"]
