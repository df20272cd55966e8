"""The Store protocol: where all frontier state lives, with its semantics written once.

Every method is one atomic step on every backend (a lock in memory, one transaction in
SQLite, one Lua script in Redis): no caller ever sees half of a call, with one stated
exception: on Redis, an ``add`` or ``release`` of more than ``CHUNK`` (2,000) entries
runs as one script per chunk, sent in one round trip, so that no script stalls the
server's other clients. Each chunk is atomic; the batch is not. Cut off in the middle
(a connection lost), the chunks the server received whole are applied and the others
are not, and the retry sends the batch again: entries of applied chunks come back as
``DUPLICATE`` (never added twice), answers of applied chunks as not held (their leases
were ended by the first try). Times are epoch seconds passed in by the caller; stores
never read the clock (the Frontier does).

Queue model (Heritrix's): each entry waits in the queue named by its key. A queue is
*ready* when it has entries, fewer leases in flight than its ``concurrency`` and its
``ready_at`` (politeness rest, block) has come; *busy* when it has as many leases in
flight as its ``concurrency``; *resting* when it has entries but waits for
``ready_at``; *exhausted* when nothing is queued. Ready queues are served by the
priority of their best entry (higher first), then by how long they have been ready,
then by key; within a queue by priority, then by each entry's rank (FIFO, or LIFO with
``lifo=True``; an entry back at once at the head). :mod:`.rules` holds these rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Final, NamedTuple, Protocol, runtime_checkable

from ..models import DEPTH_MAX as DEPTH_MAX  # (the request rules live in models)
from ..models import PRIORITY_MAX as PRIORITY_MAX
from ..models import RETRIES_MAX as RETRIES_MAX
from ..models import QueueInfo, Stats
from .policy import QUEUE_SETTINGS as QUEUE_SETTINGS  # (the policy rules live in policy)
from .policy import QueuePolicy as QueuePolicy
from .policy import as_count as as_count
from .policy import as_seconds as as_seconds
from .policy import check_settings as check_settings
from .policy import flag as flag
from .rules import ACK_DEAD as ACK_DEAD  # (the answers' kinds: the engine's, rules)
from .rules import ACK_DONE as ACK_DONE
from .rules import ACK_REQUEUE as ACK_REQUEUE
from .rules import OVER_DOMAIN_BUDGET as OVER_DOMAIN_BUDGET  # (the domain rules: rules)
from .rules import OVER_DOMAIN_QUEUES as OVER_DOMAIN_QUEUES

# add() status codes, one per entry.
# (Final: modules compiled by mypyc read them as constants)
ADDED: Final = 0
DUPLICATE: Final = 1
OVER_BUDGET: Final = 2

REFUSALS: Final = {OVER_BUDGET: "queue-budget", OVER_DOMAIN_BUDGET: "domain-budget",
                   OVER_DOMAIN_QUEUES: "domain-queues"}
"""add()'s verdicts on refused entries, by the reason their store counts them under in
``stats().rejected``."""



MAX_REDELIVERIES = 5
"""How many times a request's lease may expire unanswered (a fetcher that crashed,
stalled or was killed) before the store keeps it as dead: a page that kills every
fetcher it reaches stops being handed out. Counted over the request's life; a store
option (``max_redeliveries``)."""


def expired_error(times: int, cap: int) -> str:
    """The error of a request kept as dead after ``times`` expired leases (the Redis
    store's Lua writes the same words: the contract suite checks them)."""
    return f"lease expired unanswered {times} times (max_redeliveries {cap})"


# The three records of the hot paths are plain tuples, not NamedTuples: building a
# NamedTuple costs ten times as much, and there is one per URL per call.

Entry = tuple[bytes | None, str, int, bytes, "float | None", "float | None", int]
"""A request as the store sees it, for :meth:`Store.add`:
``(fingerprint, queue, priority, payload, not_before, revisit_at, retries)``.

``fingerprint`` is the seen-set key (``None`` bypasses dedup: dont_filter, retries,
undeduplicated POST); ``payload`` is opaque; ``not_before`` delays the entry;
``revisit_at`` is when the fingerprint may be accepted again (``None``: never).
"""

Leased = tuple[int, str, int, int, bytes, float]
"""An entry handed out by :meth:`Store.lease`:
``(token, queue, priority, retries, payload, expires_at)``."""

Ack = tuple[int, int, "float | None", "float | None", int, "str | None", bool, "float | None"]
"""How one lease ends, for :meth:`Store.release`:
``(token, kind, duration, not_before, retries, error, failed, delay)``.

``kind`` is ACK_DONE, ACK_REQUEUE or ACK_DEAD; ``duration`` (seconds the fetch took)
feeds the politeness delay; ``not_before`` and ``retries`` apply to a requeue;
``error`` is the last error; ``failed`` counts the ack as a failure; ``delay`` is an
explicit politeness delay overriding the formula.
"""


def ack(token: int, kind: int, duration: float | None = None, not_before: float | None = None,
        retries: int = 0, error: str | None = None, failed: bool = False,
        delay: float | None = None) -> Ack:
    """Build an :data:`Ack` with keywords (off the hot path)."""
    return (token, kind, duration, not_before, retries, error, failed, delay)


class DeadEntry(NamedTuple):
    """A buried entry as the store returns it."""

    id: int
    queue: str
    priority: int
    retries: int
    payload: bytes
    error: str
    died_at: float


Pick = Callable[[int, int, bytes, float | None], bool]
"""``where(priority, retries, payload, not_before)`` of ``remove_queued``: whether an entry
goes (``not_before``: its due time when it is scheduled, else None)."""


@runtime_checkable
class Store(Protocol):
    """The storage contract every backend implements (see module docstring): every
    member here, on every store. What only some stores offer is a capability below
    (:class:`Transactions`, :class:`PipelinedAdd`, :class:`Exchanges`,
    :class:`Destroyable`, :class:`Namespaced`), each checked with ``isinstance`` where
    it is used.

    Each method is one atomic step of the store (a lock, a transaction, a Lua script):
    another process sees all of it or none of it (Redis batches over 2,000 entries:
    each chunk; see the module's docstring). The contract suite in
    :mod:`crawlq.testing` is its executable specification. A store registered under
    the ``crawlq.stores`` entry points that lacks a member is refused when it is
    opened (ConfigError naming what it lacks).
    """

    @property
    def policy(self) -> QueuePolicy:
        """The store's default queue policy (each queue's is it with its overrides)."""

    @property
    def in_process(self) -> bool:
        """Whether the store's calls are work of this process that never waits on I/O
        (the memory store; SQLite unless ``synchronous=full``):
        :class:`~crawlq.aio.AsyncFrontier` then calls it on the event loop. When False
        (Redis: every call waits on the network) it calls it on worker threads, so its
        calls must be safe to make from several threads at once (each store takes its
        own lock). A class attribute will do; a store unsure says False."""

    def add(self, entries: Sequence[Entry], now: float) -> list[int]:
        """Atomically check-and-add: per entry ADDED, DUPLICATE, or a refusal counted in
        ``stats().rejected`` under its reason (:data:`REFUSALS`): OVER_BUDGET (its
        queue's cap), OVER_DOMAIN_QUEUES or OVER_DOMAIN_BUDGET (its domain's caps, see
        :mod:`.rules`).

        An entry is a duplicate when its fingerprint is in the seen-set and its revisit
        time (if any) has not come, or when an earlier entry of the same batch had it.
        Entries with ``not_before`` in the future wait until then.
        """
        ...

    def lease(self, now: float, limit: int, ttl: float,
              queue: str | None = None) -> list[Leased]:
        """Hand out at most ``limit`` ready entries, leased until ``now + ttl``.

        First returns expired leases to their queues (counted as redelivered).
        Takes at most ``concurrency - in flight`` entries from each ready queue; with
        ``queue``, from that queue only (nothing if it is not ready). An empty list
        means nothing is ready now (not necessarily that nothing is left).
        """
        ...

    def release(self, acks: Sequence[Ack], now: float) -> list[bool]:
        """End leases: done, requeue, or bury. Per ack, whether the lease was still held.

        Acks for expired or unknown leases change nothing and are counted as
        ``late_acks``. Each released queue rests for its politeness delay.
        """
        ...

    def renew(self, tokens: Sequence[int], expires: float, now: float) -> list[bool]:
        """Extend the leases still held among ``tokens`` to ``expires`` (never
        shortened); per token, whether it was still held. Leases whose time has passed
        go back to their queues first, as in :meth:`lease`, and are not renewed."""
        ...

    def next_ready_at(self, now: float) -> float | None:
        """When something may next be leased: ``now`` if a queue is ready; else the
        earliest rest end, scheduled time or lease expiry; ``None`` when nothing is
        queued or leased (the crawl is over). Lets a fetch loop sleep instead of poll."""
        ...

    def block(self, queue: str, until: float, now: float) -> None:
        """Keep ``queue`` from being leased before ``until`` (Retry-After, 429); an
        unknown queue is made, empty, with the block (its first entries wait for it)."""
        ...

    def unblock(self, queue: str, now: float) -> None:
        """End ``queue``'s rest at ``now``, whatever began it (a block, a politeness
        rest, the rest after a session): with something queued and a lease free, it is
        ready at once, as a queue whose rest ended then. Nothing for an unknown queue
        or one not resting."""
        ...

    def configure_queue(self, queue: str, settings: Mapping[str, float | None],
                        now: float) -> None:
        """Override policy settings for one queue (``None`` removes an override), kept
        durably with the queue; an unknown queue is made, empty, with them."""
        ...

    def set_policy(self, policy: QueuePolicy) -> None:
        """From now on, in this process, ``policy`` is the default of queues without
        their own settings (theirs still override it); a rest it changes applies from
        each queue's next answer. The store does not keep it: a process gives its own
        policy when it opens the store."""
        ...

    def count_rejected(self, reasons: Mapping[str, int]) -> None:
        """Add to the durable counters of rejected requests by reason (an empty
        mapping: nothing)."""
        ...

    def put_values(self, items: Sequence[tuple[str, bytes, float | None]]) -> None:
        """Keep named values ``(name, value, expires_at)`` for every process of the crawl
        (``expires_at`` None: for good), replacing older ones: what a crawler learned
        about a host (its robots.txt) and wants to learn once, not once per process.
        A value whose time is up takes no room for long: the store drops it at the
        latest in the first call after that time that wakes queues (``lease``,
        ``stats``, ``next_ready_at``...), in bounded steps per call."""
        ...

    def get_values(self, names: Sequence[str], now: float) -> list[bytes | None]:
        """The values kept under ``names``, in their order; None for those never kept
        or expired (an empty list for no names)."""
        ...

    def drop_values(self, names: Sequence[str]) -> None:
        """Forget the values kept under ``names`` now, in one atomic step (a name with
        none: nothing): for a value that served its purpose before its time is up."""
        ...

    def count_duplicates(self, n: int) -> None:
        """Add ``n`` to the durable duplicates counter: duplicates a caller recognized
        from its own record of what the store has seen, without offering them."""
        ...

    def tally(self, deltas: Mapping[str, int]) -> list[int]:
        """Add each delta to its named count, each atomically (on the memory and SQLite
        stores all in one step); the counts after it, in the order given. A count never
        goes below 0. Tallies are named counts changed in one atomic step whoever calls:
        ``crawlq serve`` counts URLs done for good with them, where several servers
        answer URLs of one store at once (a read and a write of a value would lose
        counts). They are dumped and loaded (added up, as the store's counters are) and
        go with :meth:`clear`."""
        ...

    def tallies(self, names: Sequence[str]) -> list[int]:
        """The named counts (0 for one never counted)."""
        ...

    def drop_tallies(self, names: Sequence[str]) -> None:
        """Forget the named counts (they read 0 again)."""
        ...

    def stats(self, now: float, per_queue: int = 0) -> Stats:
        """Counters, queue-state counts and the ``per_queue`` largest queues, as of one
        moment (all zero for a new store)."""
        ...

    def queues(self, now: float, limit: int = 100) -> list[QueueInfo]:
        """Up to ``limit`` queues, most queued first (an empty list: no queues)."""
        ...

    def dead(self, limit: int = 100) -> list[DeadEntry]:
        """Up to ``limit`` buried entries, oldest first (an empty list: none)."""
        ...

    def delete_queue(self, queue: str, now: float) -> int:
        """Remove ``queue``'s queued and scheduled entries in one atomic step; how many
        (0 for an unknown queue). Leased ones stay leased. A queue left with no lease
        out and no dead entry is forgotten with its settings and counts (gone from
        :meth:`Store.queues` and :meth:`Store.stats`)."""
        ...

    def remove_queued(self, queue: str, where: Pick, now: float) -> int:
        """Remove the queued and scheduled entries of ``queue`` that ``where`` picks,
        in one atomic step (each store's: a transaction, a lock; Redis removes those
        still there when its script runs); how many (0 for an unknown queue or none
        picked). Leased ones stay leased; an error raised by ``where`` removes nothing."""
        ...

    def requeue_dead(self, ids: Iterable[int] | None, now: float) -> int:
        """Put buried entries (all when ``ids`` is None) back in their queues, retries
        0; how many (ids of no dead entry are left out: 0 when none is)."""
        ...

    def clear(self) -> None:
        """Empty the store in place, its object still open (``Frontier.clear``;
        ``crawlq serve``'s DeleteCrawl of the crawl it was given): forget everything in
        one atomic step: entries queued, scheduled and leased
        (their answers come late), the seen-set, dead entries, queues, counters,
        rejections, named values and tallies. The store's options stay."""
        ...

    def dump(self) -> Iterator[dict[str, Any]]:
        """Every piece of state as JSON-friendly records (``crawlq dump``, moving a
        crawl between stores; see :mod:`crawlq.stores.dumpfmt`), read from one
        consistent snapshot where the store has them (SQLite); nothing for an empty
        store. A queue's entries of one priority come in the order it would hand them
        out, its leased ones first (in the order they were leased: as if they had
        expired); scheduled entries by their time, then the order they were scheduled
        in."""
        ...

    def load(self, records: Iterable[dict[str, Any]], now: float) -> int:
        """Merge records produced by :meth:`dump` at ``now``, in one atomic step where
        the store has one (SQLite: a bad record loads nothing); returns how many were
        applied (0 for none). A queue's entries keep their order (each loaded behind
        what the queue holds), and a ready queue its place in the ready line."""
        ...

    def close(self) -> None:
        """Release resources; idempotent."""
        ...


def lacking(store: object) -> list[str]:
    """The members of :class:`Store` that ``store`` lacks, by name (none: it is one)."""
    members = {*vars(Store), *vars(Store).get("__annotations__", {})}
    return [name for name in sorted(members) if not name.startswith("_")
            and not hasattr(store, name)]


# -- capabilities: what only some stores offer beyond Store, each declared here and
# checked with isinstance() where it is used, never by probing for a name (a store has
# it when it has the members, with those signatures: the contract suite tests each on
# every store that has it; tests/stores/test_store_capabilities.py pins which store
# declares which).

@runtime_checkable
class Transactions(Protocol):
    """What a store may offer to make several calls one atomic step (SQLite does).

    Optional: :meth:`~crawlq.Frontier.transaction` on a store without it runs the calls
    of its block one by one, each its own atomic step, as outside a block.
    """

    def transaction(self) -> AbstractContextManager[None]:
        """A block whose calls on this store object, from this thread, are one atomic
        step: they take effect together when the block ends. An exception leaving the
        block undoes them all (leases handed out inside it are void, answers given
        inside it were not given); so does a call that fails inside it, even if the
        exception is caught there (later calls in the block then raise StoreError, and
        so does the end of the block). Blocks nest (an inner block is part of the
        outer); other threads' calls wait for the block to end."""
        ...


@runtime_checkable
class PipelinedAdd(Protocol):
    """Adding a batch in parts without waiting for each (Redis: its server works on one
    part while the next is canonicalized). :meth:`~crawlq.Frontier.add` uses it for
    big batches; a store without it gets one :meth:`Store.add` call."""

    def add_begin(self, entries: Sequence[Entry], now: float) -> Callable[[], list[int]]:
        """Send ``entries`` to be added (as :meth:`Store.add`) and return at once; the
        returned function waits for their statuses. Each part is atomic on its own."""
        ...


@runtime_checkable
class Exchanges(Protocol):
    """:meth:`Store.add`, :meth:`Store.release` and :meth:`Store.lease` sent together
    (Redis: one pipelined round trip on one connection, run in that order).
    :meth:`~crawlq.Frontier.exchange` uses it; a store without it gets the three calls
    in one :class:`Transactions` block where it has one."""

    def exchange(self, entries: Sequence[Entry], acks: Sequence[Ack], limit: int,
                 ttl: float, now: float) -> tuple[list[int], list[bool], list[Leased]]:
        """The statuses of ``entries`` (as :meth:`Store.add`), then whether each of
        ``acks`` was held (as :meth:`Store.release`), then up to ``limit`` leases (as
        :meth:`Store.lease`). Each part is atomic on its own."""
        ...


@runtime_checkable
class Destroyable(Protocol):
    """Deleting all of a store's state (``crawlq serve``'s DeleteCrawl, the Scrapy
    scheduler's throwaway crawls): :func:`crawlq.stores.destroy_store`. The SQLite and
    Redis stores have it; a memory store's state goes with its object."""

    def destroy(self) -> int:
        """Delete every piece of the store's state (a SQLite store closes first, then
        its files go); returns how many keys or files were deleted (0: there was
        nothing). :func:`~crawlq.stores.destroy_store` closes the store after."""
        ...


@runtime_checkable
class Namespaced(Protocol):
    """A store that lives under a name in a shared server (Redis: a key prefix), and
    can list the other crawls beside it (``crawlq serve``'s crawl IDs)."""

    prefix: str

    def prefixes_under(self, start: str) -> list[str]:
        """The prefixes of the crawls on the same server that begin with ``start``."""
        ...
