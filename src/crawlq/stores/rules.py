"""The queue engine: a queue's states and each transition it goes through, written once,
as pure functions over a queue's numbers, which the memory and SQLite stores both run
(each store only keeps and persists the numbers): the rest after an answer
(:func:`answer_rest`, :func:`rested`) and where its entry goes (:func:`answer_place`),
a lease call's pass over the ready line (its rooms, :func:`lease_room` and
:func:`share_domains`; its rounds, :func:`rounds`; the session after it,
:func:`served`), a queue's state and place in line after any change (:func:`settled`),
waking (:func:`event_times`, :func:`expired_once`), a domain's parked queues
(:func:`joins_line`, :func:`park`, :func:`is_parked`, :func:`unparked_first`) and what
``add`` accepts of a queue and a domain (:func:`over_cap`, :func:`domain_refusal`). The
Redis store's Lua scripts are the only other copy (a script runs on the server in one
step), and tests/stores/test_stores_differ.py runs the same call sequences on all three
stores.

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

# The kinds of answer release() takes (an Ack's kind; crawlq.stores.base has them too).
ACK_DONE: Final = 0
"""Done: the entry leaves the frontier (its fingerprint stays seen)."""
ACK_REQUEUE: Final = 1
"""Back to its queue: a retry after a failure, or retry-later (see ``Ack.failed``)."""
ACK_DEAD: Final = 2
"""Given up: kept as dead."""

# Where an answered lease's entry goes (answer_place).
GONE: Final = 0
"""Out of the frontier (done)."""
DIES: Final = 1
"""Kept as dead."""
BACK: Final = 2
"""Back at the head of its queue at once (:data:`HEAD`)."""
LATER: Final = 3
"""Scheduled: it joins its queue at its time as if added then."""

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


def answer_rest(policy: QueuePolicy, duration: float | None, delay: float | None) -> float:
    """The rest one answer asks of its queue: its explicit ``delay``, else
    ``policy.delay(duration)``. A queue answered several times in one call rests the
    longest of its answers' rests (:func:`rested`, once per answer): ``delay()`` is a
    plug point that need not grow with the duration."""
    if delay is not None:
        return delay
    return policy.delay(duration or 0.0)


def answer_place(kind: int, not_before: float | None, t: float) -> int:
    """Where the entry of a lease answered at ``t`` goes (GONE, DIES, BACK or LATER): a
    requeue waits for ``not_before`` when that is later than ``t``, else comes back at
    the head of its queue at once."""
    if kind == ACK_DONE:
        return GONE
    if kind == ACK_DEAD:
        return DIES
    if not_before is not None and not_before > t:
        return LATER
    return BACK


def rested(ready_at: float, session: int, t: float, rest: float) -> tuple[float, int]:
    """A queue's (``ready_at``, ``session``) after an answer at ``t`` that asks a rest of
    ``rest`` seconds (:func:`answer_rest`): it rests at least that long, and a rest > 0
    ends its session."""
    if rest > 0:
        if t + rest > ready_at:
            ready_at = t + rest
        session = 0
    return ready_at, session


def session_spent(policy: QueuePolicy, session: int) -> bool:
    """Whether a queue that gave ``session`` leases in a row has spent its session
    budget: it then rests ``session_rest`` and goes to the back of the line."""
    budget = policy.session_budget
    return budget > 0 and session >= budget


def served(policy: QueuePolicy, ready_at: float, session: int, t: float
           ) -> tuple[float, int, bool]:
    """A queue's (``ready_at``, ``session``) after a lease call at ``t`` took from it
    (``session`` counts what it took), and whether its session is spent
    (:func:`session_spent`): it then yields to the others, resting ``session_rest``, and
    its session starts again (a queue ready again at once may give more in the same
    call, behind the others: the call's next pass)."""
    if session_spent(policy, session):
        rest_end = t + policy.session_rest
        return (rest_end if rest_end > ready_at else ready_at), 0, True
    return ready_at, session, False


def settled(old: int, was_served: bool, queued: int, inflight: int, concurrency: int,
            since: float, ready_at: float, t: float) -> tuple[int, float]:
    """A queue's (state, since) after a change at ``t``: its state from its numbers
    (:func:`state_of`) and, ready, its place in line (:func:`ready_since`; ``old``: its
    state before, ``was_served``: a lease call took from it)."""
    state = state_of(queued, inflight, concurrency, ready_at, t)
    if state == READY:
        since = ready_since(old, was_served, since, ready_at, t)
    return state, since


def rounds(rooms: list[int], left: int) -> list[list[tuple[int, int]]]:
    """The rounds of one pass of a lease call over its line of ready queues: ``rooms``,
    how many leases each queue of the line may give (:func:`lease_room`, shared by
    domain: :func:`share_domains`), in line order; ``left``, how many leases the call
    still wants. Each round is a list of (the queue's place in the line, how many it
    gives), in serving order: one from each queue in line order, then (a fair share of
    what is left, so that one big queue needs few rounds) a share from those with room
    left; a round cut short by ``left`` goes on, in the next, where it stopped, before
    those asked again."""
    out: list[list[tuple[int, int]]] = []
    room = list(rooms)
    active = list(range(len(room)))
    while active and left > 0:
        want = active[:left]
        share = left // len(want)
        if share < 1:
            share = 1
        this: list[tuple[int, int]] = []
        for i in want:
            k = share if share < left else left
            if room[i] < k:
                k = room[i]
            if k > 0:
                this.append((i, k))
                room[i] -= k
                left -= k
        out.append(this)
        active = active[len(want):] + [i for i in want if room[i] > 0]
    return out


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


def joins_line(policy: QueuePolicy, domain_inflight: int, ahead: int) -> bool:
    """Whether a ready queue joins a lease call's line: its domain (``domain_inflight``
    leases out) has room for one more lease than its ``ahead`` queues already in the
    line take; else it is parked (:func:`park`)."""
    return domain_room(policy, domain_inflight) - ahead > 0


def park(ready_at: float, now: float) -> tuple[float, float]:
    """A ready queue whose domain has no room at ``now``, parked: its (``ready_at``,
    ``parked``): it rests until a lease of its domain ends (:func:`unparked`) or
    DOMAIN_WAIT at most; ``parked`` is that end (0.0: a longer rest it has is not a
    park)."""
    until = now + DOMAIN_WAIT
    if until > ready_at:
        return until, until
    return ready_at, 0.0


def is_parked(state: int, ready_at: float, parked: float, t: float) -> bool:
    """Whether a queue is parked at ``t``: resting still the rest parking gave it, and
    that rest not over (a block or a politeness rest since is not a park, nor a park
    that ended: the queue was ready since its end, whichever call noticed)."""
    return parked > t and state == RESTING and ready_at == parked


def unparked_first(parked: list[tuple[float, str, int]], n: int, t: float) -> list[int]:
    """Of a domain's parked queues (the end of each one's park, its key, its id), those
    that ``n`` of its leases ending at ``t`` make ready: the longest parked first (the
    earliest end), then by key; a park over by ``t`` is none."""
    return [q for until, _, q in sorted(parked) if until > t][:n]


def expired_once(expired_before: int, cap: int) -> tuple[int, bool]:
    """An entry whose lease expired unanswered, after ``expired_before`` such expiries:
    its count now, and whether it dies (more than ``cap``, ``max_redeliveries``) rather
    than coming back at the head of its queue."""
    n = expired_before + 1
    return n, n > cap


def event_times(due: list[float], expired: list[float]) -> list[tuple[float, int, int]]:
    """The order in which a store brings in what came due (each list in time order: the
    times of entries scheduled for later, of leases that expired): time by time, and at
    each (``t``, the end in ``due`` of what is due at ``t``, the end in ``expired`` of
    what expired at ``t``): the entries due first, joining their queues as if added then
    (:data:`TAIL`, in the order they were scheduled), then the leases (:func:`expired_once`:
    back at the :data:`HEAD` of their queues in the order they were leased, or dead),
    each queue then settled at ``t``, so that a queue made ready has waited since then,
    not since the call that noticed."""
    out: list[tuple[float, int, int]] = []
    i = j = 0
    nd, ne = len(due), len(expired)
    while i < nd or j < ne:
        t = due[i] if j >= ne or (i < nd and due[i] <= expired[j]) else expired[j]
        while i < nd and due[i] == t:
            i += 1
        while j < ne and expired[j] == t:
            j += 1
        out.append((t, i, j))
    return out
