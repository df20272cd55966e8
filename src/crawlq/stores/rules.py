"""The queue rules: a queue's states, when it moves between them, how long it rests
after a fetch, how many entries a lease round may take from it, when its session
budget is spent, and when it accepts no more entries. The one definition the memory
and SQLite stores call (the Redis store's Lua scripts are the only other copy, and
tests/stores/test_stores_agree.py runs the same call sequences on all three).

Within a priority, a queue's entries are served by rank (:func:`entry_rank`): an entry
added goes behind the others (FIFO) or ahead of them (LIFO); one that comes back at once
(an expired lease, a retry without a later time) goes ahead of them, several in one call
in the order they were leased; one that was waiting for a time (``not_before``, a retry
later, a failure's backoff) joins as if added when its time comes; one loaded from a
dump goes behind them, so a dump's entries keep their order. Queues whose waits tie are
served in key order.

A queue is

- ``EXHAUSTED`` when it has nothing queued (entries scheduled for later are not in
  the queue yet, and leased ones are out of it);
- ``BUSY`` when it has as many leases in flight as its ``concurrency``;
- ``RESTING`` until ``ready_at``: the politeness rest after a fetch, a block, or the
  rest at the end of a session;
- ``READY`` otherwise: in the ready line, ordered by its best entry's priority, then
  by how long it has waited (``since``), then by its creation.

Queues are grouped by domain (their key's registered domain, one per site: see
:func:`crawlq.policies.domains.domain_of`), and a domain is bounded as a whole: its
leases in flight (:func:`domain_room`), the entries it accepts and the queues it has
(:func:`domain_refusal`). A ready queue whose domain has no room when a lease call
reaches it is not served: it is *parked*, resting until a lease of its domain ends (one
parked queue, the longest parked, is ready again per lease ended) or ``DOMAIN_WAIT``
seconds at most, and the call goes on down the line, so one site with many host names
takes no more than its domain's share while the other sites are served in their turn,
and its own queues come back as its leases end. A parked queue is one whose rest is
still the one parking set (a block or a politeness rest since keeps it resting) and
has not ended: a park that ended before a lease of its domain ends is over (the
queue was ready since its end, whichever call noticed), and that lease makes another
parked queue ready. A queue emptied (``delete_queue``, ``remove_queued``) is parked no
more: nothing of it waits for its domain, and its next request is ready at once.

A queue joins a call's line only if its domain has room for one more lease than its
queues ahead in the line take, and each queue's room in the call, no more than it has
queued, leaves one for each queue of its domain behind it (:func:`share_domains`).

setup.py compiles this module with mypyc (the stores call it once per queue per call);
the .py runs where it cannot be compiled.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

from .policy import QueuePolicy

# add()'s verdicts on an entry refused by its domain (crawlq.stores.base has the others).
OVER_DOMAIN_BUDGET: Final = 3
"""The entry's domain accepted ``max_domain_urls`` entries already."""
OVER_DOMAIN_QUEUES: Final = 4
"""The entry would make a new queue in a domain that has ``max_domain_queues``."""


class QueueState(IntEnum):
    """A queue's state; its value is what the SQLite store keeps in ``queues.state``
    (and the Lua scripts in a queue's record)."""

    READY = 0
    BUSY = 1
    RESTING = 2
    EXHAUSTED = 3

    @property
    def label(self) -> str:
        """The state's name in listings (``crawlq queues``, :class:`QueueInfo`)."""
        return self.name.lower()


# The states as plain ints, for the compiled loops and for SQL text: compiled, a Final
# int is a C constant, where a QueueState member is an object looked up on its class.
READY: Final = 0
BUSY: Final = 1
RESTING: Final = 2
EXHAUSTED: Final = 3


TAIL: Final = 0
"""Where an added entry goes (see :func:`entry_rank`)."""
HEAD: Final = 1
"""Where an entry that comes back at once goes."""
LAST: Final = 2
"""Where an entry loaded from a dump goes."""


def entry_rank(n: int, lifo: bool, place: int) -> int:
    """The rank among its queue's entries of one priority (served lowest first) of the
    ``n``-th entry a store numbers (``n`` counts up from 1) put at ``place``: ``TAIL``
    ranks it after every entry numbered before it (FIFO) or before them (LIFO), ``HEAD``
    before them, ``LAST`` after them."""
    if place == LAST or (place == TAIL and not lifo):
        return n
    return -n


def state_of(queued: int, inflight: int, concurrency: int, ready_at: float,
             now: float) -> int:
    """The state a queue with ``queued`` entries, ``inflight`` leases and a rest until
    ``ready_at`` is in at ``now`` (see the module's docstring)."""
    if queued <= 0:
        return EXHAUSTED
    if inflight >= concurrency:
        return BUSY
    if ready_at > now:
        return RESTING
    return READY


def label(queued: int, inflight: int, concurrency: int, ready_at: float, now: float) -> str:
    """:func:`state_of` by name, for listings."""
    return QueueState(state_of(queued, inflight, concurrency, ready_at, now)).label


def ready_since(old: int, served: bool, since: float, ready_at: float, now: float) -> float:
    """Since when a queue that is ``READY`` after a call has waited in the ready line:
    one that stayed ready keeps its place; one just served goes to the back (``now``);
    one whose rest ended has waited since the rest's end; any other since ``now``."""
    if served:
        return now
    if old == READY:
        return since
    if old == RESTING:
        return ready_at
    return now


def rest_after(policy: QueuePolicy, longest: float | None, explicit: float | None) -> float:
    """How long a queue rests after the leases that ended in one call: the longest of
    their rests, where a lease answered with an explicit ``delay`` rests that long and
    any other rests ``policy.delay(duration)``. ``longest``: the longest duration of the
    answers without a delay (None: there were none); ``explicit``: the longest explicit
    delay (None: none). (``delay`` grows with the duration, so the longest duration gives
    the longest of those rests.) A rest > 0 also ends the queue's session."""
    rest = 0.0
    if longest is not None:
        rest = policy.delay(longest)
    if explicit is not None and explicit > rest:
        rest = explicit
    return rest


def session_spent(policy: QueuePolicy, session: int) -> bool:
    """Whether a queue that gave ``session`` leases in a row has spent its session
    budget: it then rests ``session_rest`` and goes to the back of the line."""
    budget = policy.session_budget
    return budget > 0 and session >= budget


def lease_room(policy: QueuePolicy, inflight: int, session: int, queued: int) -> int:
    """How many leases a ready queue with ``inflight`` leases out, ``session`` given in
    a row and ``queued`` entries queued may give in one call: what its concurrency
    leaves room for and what its session budget has left, no more than it holds (so
    that its domain's room it cannot use goes to the others: :func:`share_domains`),
    and at least one (a ready queue always gives one: a budget lowered below the
    session so far leaves it one more). A lease call's rounds take from each queue
    until it gave this many, or has nothing left."""
    free = policy.concurrency - inflight
    budget = policy.session_budget
    if budget > 0 and budget - session < free:
        free = budget - session
    if queued < free:
        free = queued
    return free if free > 1 else 1


def over_cap(policy: QueuePolicy, accepted: int) -> bool:
    """Whether a queue that accepted ``accepted`` entries takes no more (its
    ``max_queue_urls``; 0: no cap)."""
    cap = policy.max_queue_urls
    return cap > 0 and accepted >= cap


NO_CAP: Final = 1 << 30
"""What :func:`domain_room` answers for a domain without a cap."""
DOMAIN_WAIT: Final = 5.0
"""Seconds a parked queue rests at most (see the module's docstring): it is ready again
as soon as a lease of its domain ends, this is the bound should none end."""


def groups(policy: QueuePolicy) -> bool:
    """Whether a store under ``policy`` keeps its queues' domains and their counts (some
    domain setting is on). Without, it keeps none (a store opened with domain settings
    later gives the queues it holds their domains then, and counts from then on): the
    domain rules cost nothing where they are off."""
    return (policy.domain_concurrency > 0 or policy.max_domain_urls > 0
            or policy.max_domain_queues > 0)


def domain_room(policy: QueuePolicy, inflight: int) -> int:
    """How many more leases a domain with ``inflight`` leases out may give now (its
    ``domain_concurrency``; NO_CAP when it has none); 0 or less: none."""
    cap = policy.domain_concurrency
    return cap - inflight if cap > 0 else NO_CAP


def domain_refusal(policy: QueuePolicy, accepted: int, queues: int, new_queue: bool) -> int:
    """Whether a domain that accepted ``accepted`` entries and has ``queues`` queues takes
    one more entry (``new_queue``: one that would make a queue of its own): 0 when it
    does, else the verdict (OVER_DOMAIN_QUEUES, OVER_DOMAIN_BUDGET). Checked after the
    entry's own queue's cap (:func:`over_cap`)."""
    cap = policy.max_domain_queues
    if new_queue and cap > 0 and queues >= cap:
        return OVER_DOMAIN_QUEUES
    cap = policy.max_domain_urls
    if cap > 0 and accepted >= cap:
        return OVER_DOMAIN_BUDGET
    return 0


def share_domains(rooms: list[int], domains: list[int], free: dict[int, int]) -> None:
    """Cap, in place, the rooms (leases each may give, :func:`lease_room`) of a lease
    call's line, queue by queue in line order, so that the queues of a domain take no
    more than ``free[domain]`` (its :func:`domain_room`) together and each of them
    behind gets one: ``domains[i]`` is the domain (by number) of the ``i``-th queue; a
    domain not in ``free`` has no cap."""
    left = dict(free)
    behind: dict[int, int] = {}
    for d in domains:
        if d in left:
            behind[d] = behind.get(d, 0) + 1
    for i in range(len(rooms)):
        d = domains[i]
        if d in left:
            n = behind[d] - 1
            behind[d] = n
            r = min(rooms[i], left[d] - n)
            rooms[i] = r
            left[d] -= r
