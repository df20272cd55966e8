"""What URLFrontier's calls do to a crawlq frontier, without gRPC: plain functions on a
:class:`~crawlq.Frontier`, run by :mod:`crawlq.serve.grpc_server` (on its event loop or in
worker threads).

URLFrontier names a fetched URL by its text (a KnownURLItem), where crawlq answers a
lease by its token. So each GetURLs call leaves the lease handles of the URLs it handed
out in the store, one value for the call (named by the call's number), and the server
keeps them in memory by URL (:class:`Handles`): an answer through the server that
leased finds its handle there; one through another server on the store (or through this
one after a restart) finds it in the calls' values, which the server reads when a URL
is not in its memory. A server killed in between loses nothing: the handles are in the
store, and a lease no server answers ends and its URL is served again.
"""

from __future__ import annotations

import functools
import json
import secrets
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any

from ..errors import ConfigError, InvalidURL
from ..frontier import Frontier
from ..handles import answering, handle, lease_of
from ..models import PRIORITY_MAX, Lease, Outcome, QueueInfo, Request
from ..stores import dumpfmt

META = "urlfrontier"
"""The key in ``Request.meta`` under which a URL's URLFrontier metadata is kept."""
DEAD = "crawlq_dead"
"""The metadata key under which a dead URL (one crawlq gave up on: its error) is listed
and reported, with the date 0 of a URL never fetched again: it is not done (no record,
not counted completed), and a client can tell it from one that is."""
CREATED = "urlfrontier_created"
"""The key in ``Request.meta`` under which the server keeps when it first stored a URL
(epoch seconds: URLFrontier's creation date, what PurgeURLs compares)."""
_DAY = 86_400.0
_URL = "crawlq:uf:url:"
"""Prefix of the store value kept for a URL fetched for good (named after its canonical
form): its record, a JSON object (its text, queue, metadata and creation date), with
no expiry. URLFrontier lists and reports fetched URLs, where crawlq's seen-set keeps
only their fingerprints: the records are the text, in the crawl's store (dumped, loaded
and cleared with it)."""
_CALL = "crawlq:uf:call:"
"""Prefix of the store value kept for a GetURLs call, named by its number (the tally
_CALLS): when its handles may be forgotten (epoch seconds), then a line per URL handed
out, "<token>.<retries> <created> <url>" (the URL canonical: no space, no newline);
kept until then (LATE_KEPT after its last lease ends). One write per call, where a
value per URL is a write per URL at a random place of the store's index (on SQLite,
leasing cost 17 µs a URL that way, 8 µs this way: bench_urlfrontier's in-process
figures, docs/benchmarks.md)."""
_EPOCH = "crawlq:uf:epoch"
"""The tally that tells one life of the crawl from the next: 0 until the first GetURLs
call sets it to a random number (again after the crawl is cleared, when the calls are
numbered from 1 again); servers forget the handles of another epoch."""
_CALLS = "crawlq:uf:calls"
"""The tally that numbers the crawl's GetURLs calls, whichever server makes them: the
names of their values follow each other, so a server reads the calls it has not seen
by their numbers."""
_COMPLETED = "crawlq:uf:completed:"
"""Prefix of the tallies that count, for a queue with a crawl limit, its URLs fetched
for good (counted from the records when the limit is set)."""
_RETURNED = "crawlq:uf:returned"
"""The tally of the leases the server ended itself (DeleteQueue's, and those GetURLs
leased and gave back: over a call's limits, or leased ahead for a client that left),
counted by the store as retried like any lease put back: GetStats' ``retried`` leaves
them out (see :func:`_give_back`), counting a client's answers with a date only."""
_COMPLETED_ALL = "crawlq:uf:completed"
"""The tally of the crawl's URLs fetched for good (those with a record)."""
_LIMITS_ON = "crawlq:uf:limits"
"""The store value present once a crawl limit was set in the crawl: only then are
queues' completed counts kept as URLs are answered."""
_BLOCK = "crawlq:uf:block:"
"""Prefix of the store values that keep until when a queue is blocked by BlockQueueUntil
(epoch seconds, ASCII; expiring then)."""
_LIMIT = "crawlq:uf:limit:"
"""Prefix of the store values that keep a queue's crawl limit (ASCII; SetCrawlLimit)."""
LIMIT_BLOCK = 366 * _DAY
"""How long a queue at its crawl limit is blocked; blocked again by each URL fetched
(and unblocked when its limit is raised or removed)."""
OK, SKIPPED, FAIL = 0, 1, 2
"""URLFrontier's AckMessage.Status values."""


@dataclass(frozen=True, slots=True)
class Item:
    """One URL as a client sent it: its text, queue key ('' for the server's choice),
    metadata, and for a known URL its refetch time (0: never again; None: discovered)."""

    url: str
    key: str
    metadata: Mapping[str, list[str]]
    refetch: int | None = None


MAX_KEY = 255
"""The longest queue key a client may give, in characters: an item with a longer one is
SKIPPED, as the reference server skips it."""
_NOTHING = Item("", "", {}, -1)
"""An item left out of a put (already answered SKIPPED)."""


def _digest(url: str) -> str:
    return blake2b(url.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


LATE_KEPT = 600.0
"""Seconds a lease handle is kept past its lease's end, so that an answer coming late
is known as one (it changes nothing) rather than taken for a URL never leased."""


def _url_name(url: str) -> str:
    """The value kept for ``url`` (in canonical form): see _URL."""
    return _URL + _digest(url)


def date_priority(date: float, now: float) -> int:
    """The crawlq priority that serves a queue's due URLs in URLFrontier's order, by
    their date. A URL due now or later gets 0: a queue hands out its URLs in the order
    they were put, and one due later joins it when its date comes, so both come in date
    order. One put with a date past goes ahead of them, the older the further (the
    priority falls with the date): the one case arrival order does not give. (Few
    distinct priorities, then: on the Redis store each is a list of its own.)"""
    if date >= now:
        return 0
    return max(1, PRIORITY_MAX - max(0, int(date)))


def _request(item: Item, dated: Mapping[str, Any], date: float | None = None,
             now: float | None = None, **extra: Any) -> Request:
    """The request for a client's URL; ``dated``: the meta of an undecorated URL made
    now (shared by a call's requests: a request's meta is never changed), or first
    stored at another time, ``now`` then being the time; ``date``: its refetch date
    (None: a discovered URL, due now)."""
    meta = {**dated, META: {k: list(v) for k, v in item.metadata.items()}} \
        if item.metadata else dated
    if date is None:
        return Request(item.url, queue=item.key or None, meta=meta, **extra)
    return Request(item.url, queue=item.key or None, meta=meta,
                   priority=date_priority(date, dated[CREATED] if now is None else now),
                   **extra)


def created_of(request: Request) -> int:
    """When the server first stored the request's URL (epoch seconds; 0: not known, it
    came in another way than URLFrontier's API)."""
    return _created_in(request.meta)


def _created_in(meta: object) -> int:
    at = meta.get(CREATED) if isinstance(meta, Mapping) else None
    return date_of(at) if isinstance(at, int) else 0


MAX_DATE = 2**64 - 1
"""The latest date URLFrontier's messages carry (a uint64 of epoch seconds)."""


def date_of(when: float) -> int:
    """A date kept by crawlq (epoch seconds; a refetch date is kept as a float, exact to
    the second up to 2**53) as URLFrontier's messages carry it: whole seconds within
    0 to MAX_DATE (the largest date a client can send, 2**64-1, is kept as 2**64 and
    reported as sent)."""
    if when != when:  # (NaN: no date)
        return 0
    return 0 if when <= 0 else MAX_DATE if when >= MAX_DATE else round(when)


def purge(frontier: Frontier, days: int, queue: str | None = None) -> int:
    """Remove the queued, scheduled and done URLs (of ``queue``; None: all) stored more
    than ``days`` days ago; how many. Leased URLs stay leased, URLs of unknown date
    stay, and every URL stays in the seen-set. (Scans of the crawl.)"""
    now = frontier.clock()
    cutoff = now - days * _DAY

    def old(request: Request) -> bool:
        return 0 < created_of(request) < cutoff

    n = frontier.remove_queued(old, queue)
    gone: list[str] = []
    completed: dict[str, int] = {}
    for name, d in _records(frontier):
        if 0 < d.created < cutoff and queue in (None, d.key):
            gone.append(name)
            completed[d.key] = completed.get(d.key, 0) - 1
    if gone:
        frontier.store.drop_values(gone)
        _count_completed(frontier, completed, now)
    return n + len(gone)


def metadata_of(request: Request) -> dict[str, list[str]]:
    """The URLFrontier metadata a request carries (empty: none)."""
    return _clean(request.meta.get(META) if request.meta else None)


@dataclass(slots=True)
class _Held:
    """A URL's lease as :class:`Handles` keeps it: enough to answer it."""

    token: int
    retries: int
    created: int  # (when a server first stored the URL: its record's creation date)
    call: int  # (the number of the GetURLs call that handed it out)

    def lease(self) -> Lease:
        return answering(self.token, self.retries)


class Handles:
    """The lease handles of a crawl's URLs handed out by GetURLs, in memory by URL
    (canonical), as this server knows them: the calls it made, and those of other
    servers (or of itself before a restart) it read from the store when an answer named
    a URL it did not hold. A handle goes when its URL is answered through this server,
    or when its call's time is up (LATE_KEPT after its last lease ends: an answer later
    than that is taken for one of a URL never leased); past ``most`` handles, those of
    the oldest calls go first (an answer to one of them through this server may then be
    taken for one of a URL not leased: other servers still read them from the store).

    The memory belongs to one life of the crawl: a crawl cleared (DeleteCrawl, through
    any server) numbers its calls from 1 again, and its epoch (a tally set by the first
    call after) changes; a server that sees another epoch forgets what it held.

    Thread-safe: the server may run its calls in worker threads."""

    SCAN = 1000
    """Calls read at a time when a server reads the calls it has not seen."""
    GAP_WAIT = 60.0
    """Seconds a call number with no value yet is looked for again: on a store without
    transactions (Redis) a call is numbered a round trip before its value is written."""

    def __init__(self, most: int = 500_000) -> None:
        self.most = most
        self._held: dict[str, _Held] = {}
        self._calls: deque[tuple[int, float, list[str]]] = deque()  # (call, until, urls)
        self._mine: set[int] = set()  # (the calls this server made: never read back)
        self._read_to: int | None = None  # (the calls read from the store: up to this)
        self._gaps: dict[int, float] = {}  # (numbers with no value yet -> until when)
        self._epoch: int | None = None  # (the life of the crawl all this belongs to)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._held)

    def leased(self, call: int, held: Sequence[tuple[str, _Held]], until: float,
               now: float, epoch: int) -> None:
        """Keep the handles of call number ``call`` (made here: ``held``, by URL) until
        ``until``; ``epoch``: the crawl's when the call was made."""
        with self._lock:
            self._in_epoch(epoch)
            self._mine.add(call)
            known = self._held
            for url, h in held:
                old = known.get(url)
                if old is None or old.call < call:
                    known[url] = h
            self._calls.append((call, until, [url for url, _ in held]))
            self._sweep(now)

    def find(self, urls: Sequence[str]) -> list[_Held | None]:
        """The handles held for ``urls`` (canonical; None where none is)."""
        get = self._held.get
        with self._lock:
            return [get(u) for u in urls]

    def answered(self, urls: Iterable[tuple[str, _Held]]) -> None:
        """Forget the handles answered (each while it is still the one held)."""
        with self._lock:
            held = self._held
            for url, h in urls:
                if held.get(url) is h:
                    del held[url]

    def forget(self) -> None:
        """Forget every handle (the crawl was deleted)."""
        with self._lock:
            self._forget()

    def _forget(self) -> None:
        self._held.clear()
        self._calls.clear()
        self._mine.clear()
        self._gaps.clear()
        self._read_to = self._epoch = None

    def _in_epoch(self, epoch: int) -> None:
        """Forget what belongs to another life of the crawl (the lock held)."""
        if epoch != self._epoch:
            self._forget()
            self._epoch = epoch

    def read(self, frontier: Frontier) -> None:
        """Read the calls made since the last read (by other servers, or by this one
        before a restart) from the store. The first read goes back from the newest call
        until a run of SCAN calls whose values (of those made elsewhere) are all gone:
        their time was up, so are the older ones', unless a call leased for far longer
        than those after it."""
        top, epoch = frontier.store.tallies([_CALLS, _EPOCH])
        now = frontier.clock()
        with self._lock:
            self._in_epoch(epoch)
            low, mine = self._read_to, set(self._mine)
            gaps = [c for c, end in self._gaps.items() if end > now and c not in mine]
        rows: list[tuple[int, bytes]] = []
        missing: list[int] = []
        if low is None:
            hi = top
            while hi > 0:
                lo = max(0, hi - self.SCAN)
                looked = [c for c in range(hi, lo, -1) if c not in mine]
                found = self._rows(frontier, looked, now)
                rows += found
                if hi == top:  # (the newest may be numbered and not written yet)
                    have = {c for c, _ in found}
                    missing += [c for c in looked if c not in have]
                if looked and not found:
                    break
                hi = lo
        else:
            for lo in range(low, top, self.SCAN):
                looked = [c for c in range(lo + 1, min(top, lo + self.SCAN) + 1)
                          if c not in mine]
                found = self._rows(frontier, looked, now)
                rows += found
                have = {c for c, _ in found}
                missing += [c for c in looked if c not in have]
        filled: list[int] = []
        if gaps:
            found = self._rows(frontier, gaps, now)
            rows += found
            filled = [c for c, _ in found]
        with self._lock:
            if epoch != self._epoch:  # (forgotten meanwhile: the crawl was deleted)
                return
            self._gaps = {c: end for c, end in self._gaps.items() if end > now}
            for c in filled:
                self._gaps.pop(c, None)
            self._gaps.update((c, now + self.GAP_WAIT) for c in missing)
            held = self._held
            for call, raw in sorted(rows):
                until_text, _, body = raw.decode("utf-8", "surrogateescape").partition("\n")
                try:
                    until = float(until_text)
                except ValueError:
                    continue  # (not a call's value: left alone)
                if until <= now:
                    continue
                urls = []
                for line in body.split("\n"):
                    handle_text, _, rest = line.partition(" ")
                    created, _, url = rest.partition(" ")
                    try:
                        le = lease_of(handle_text)
                    except ConfigError:
                        continue
                    if not (url and created.isdigit()):
                        continue
                    old = held.get(url)
                    if old is None or old.call < call:
                        held[url] = _Held(le.token, le.request.retries, int(created), call)
                        urls.append(url)
                self._calls.append((call, until, urls))
            self._read_to = top
            self._sweep(now)

    @staticmethod
    def _rows(frontier: Frontier, calls: list[int], now: float) -> list[tuple[int, bytes]]:
        if not calls:
            return []
        got = frontier.store.get_values([f"{_CALL}{c}" for c in calls], now)
        return [(c, v) for c, v in zip(calls, got) if v is not None]

    def _sweep(self, now: float) -> None:
        """Forget the calls whose time is up, and the oldest past ``most`` handles (the
        lock held)."""
        calls, held = self._calls, self._held
        while calls and (calls[0][1] <= now or len(held) > self.most):
            call, _, urls = calls.popleft()
            self._mine.discard(call)
            for url in urls:
                h = held.get(url)
                if h is not None and h.call == call:
                    del held[url]


def lease(frontier: Frontier, n: int, ttl: float, per_queue: int,
          max_queues: int, queue: str | None, handles: Handles,
          taken: dict[str, int] | None = None) -> list[Lease]:
    """Lease up to ``n`` URLs for ``ttl`` seconds (of ``queue`` only, when given), at most
    ``per_queue`` from a queue and from at most ``max_queues`` queues (0: no limit);
    leases over the limits go back at once. ``taken``: the URLs per queue leased so
    far by the same GetURLs call (its parts share the limits), updated. Keeps the
    handles (see the module docstring), in one atomic step with the leases where the
    store has them."""
    with frontier.transaction():
        kept = _lease(frontier, n, ttl, per_queue, max_queues, queue,
                      {} if taken is None else taken)
        if not kept:
            return []
        store = frontier.store
        call, epoch = store.tally({_CALLS: 1, _EPOCH: 0})
        if not epoch:  # (the first call of the crawl, or since it was cleared: a
            # number of its own, not the one of the life before)
            (epoch,) = store.tally({_EPOCH: secrets.randbelow(1 << 31) + 1})
        until = max(le.expires_at for le in kept) + LATE_KEPT
        held = [(le.request.url, _Held(le.token, le.request.retries,
                                       _created_in(le.request.meta), call)) for le in kept]
        lines = "\n".join(f"{handle(le)} {h.created} {url}"
                          for le, (url, h) in zip(kept, held))
        frontier.store.put_values([(f"{_CALL}{call}", f"{until!r}\n{lines}".encode(),
                                    until)])
    handles.leased(call, held, until, frontier.clock(), epoch)
    return kept


def _lease(frontier: Frontier, n: int, ttl: float, per_queue: int,
           max_queues: int, queue: str | None, taken: dict[str, int]) -> list[Lease]:
    leases = frontier.next(n, ttl=ttl, queue=queue)
    if not leases:
        return []
    kept: list[Lease] = []
    extra: list[Lease] = []
    for le in leases:
        count = taken.get(le.queue, 0)
        if (per_queue and count >= per_queue) or (
                max_queues and not count and len(taken) >= max_queues):
            extra.append(le)
            continue
        taken[le.queue] = count + 1
        kept.append(le)
    if extra:
        _give_back(frontier, extra)
    return kept


def _give_back(frontier: Frontier, leases: Sequence[Lease]) -> None:
    """End leases the server took and gives back (their URLs back in their queues at
    once), counted apart from a client's retries (_RETURNED)."""
    n = frontier.done(leases, Outcome.RETRY)
    if n:
        frontier.store.tally({_RETURNED: n})


def give_back(frontier: Frontier, leases: Sequence[Lease], handles: Handles) -> None:
    """Put leases handed out by :func:`lease` but never sent back in their queues."""
    _give_back(frontier, leases)
    handles.answered((le.request.url, h) for le, h in zip(
        leases, handles.find([le.request.url for le in leases])) if h is not None)


def put(frontier: Frontier, items: Sequence[Item], handles: Handles) -> list[int]:
    """Apply a client's URLs in one go; one AckMessage status per item. ``handles``:
    the crawl's lease handles (see :class:`Handles`).

    Discovered URLs are added; one not added is SKIPPED (do not send it again): a
    duplicate (known already, as URLFrontier's reference server answers), an invalid
    URL, one over its queue's limit, one whose queue key is over MAX_KEY characters (a
    known one too). A known URL whose lease is held is answered:
    done for good (refetch 0) or back in its queue from its refetch time. A known URL
    with no lease held (never leased here, or its lease ended long ago) is an update of
    the crawl's one entry of it, as in the reference server: its queued or scheduled
    entry is replaced by what the update says (done for good, or queued for its
    refetch time), and it is marked seen.
    """
    statuses = [OK] * len(items)
    dated = {CREATED: int(frontier.clock())}
    if any(len(it.key) > MAX_KEY for it in items):  # (skipped, as by the reference)
        for i, it in enumerate(items):
            if len(it.key) > MAX_KEY:
                statuses[i] = SKIPPED
        items = [it if len(it.key) <= MAX_KEY else _NOTHING for it in items]
    # (DEAD is crawlq's word for a URL it gave up on, never a client's metadata; a
    # known item with the date 0 that carries it is a dead URL as ListURLs lists it)
    said = {i: (it.metadata[DEAD] or [""])[0] for i, it in enumerate(items)
            if DEAD in it.metadata and it.refetch == 0}
    if any(DEAD in it.metadata for it in items):
        items = [_without_dead(it) if DEAD in it.metadata else it for it in items]
    discovered = [i for i, it in enumerate(items) if it.refetch is None]
    if discovered:
        result = frontier.add([_request(it, dated) for it in (items[i] for i in discovered)])
        for i, added in zip(discovered, result.added_flags):
            if not added:
                statuses[i] = SKIPPED
    known = [i for i, it in enumerate(items) if it.refetch is not None and it is not _NOTHING]
    if known:
        # (one transaction where the store has them: the answers, the URLs kept as
        # text and the counts commit together, once)
        with frontier.transaction():
            answered = _put_known(frontier, items, known, said, statuses, dated, handles)
        handles.answered(answered)  # (once committed: a batch rolled back keeps them)
    return statuses


def _held_for(frontier: Frontier, items: Sequence[Item], known: list[int],
              statuses: list[int], handles: Handles) -> tuple[dict[int, str],
                                                              dict[int, _Held]]:
    """The canonical URL of each known item (an invalid one is SKIPPED), and the lease
    handle held for it. A client sends back the URL it was handed, canonical: only the
    others are canonicalized; the calls this server has not seen are read only when a
    URL is not in its memory."""
    urls = [items[i].url for i in known]
    canon: dict[int, str] = {}
    held: dict[int, _Held] = {}
    missing: list[int] = []
    for i, url, h in zip(known, urls, handles.find(urls)):
        if h is not None:
            canon[i], held[i] = url, h
            continue
        try:
            canon[i] = frontier.canonicalize(url)
        except InvalidURL:
            statuses[i] = SKIPPED
            continue
        missing.append(i)
    for attempt in range(2):
        if not missing:
            break
        if attempt:
            handles.read(frontier)
        found = handles.find([canon[i] for i in missing])
        held.update((i, h) for i, h in zip(missing, found) if h is not None)
        missing = [i for i, h in zip(missing, found) if h is None]
    return canon, held


def _answer(frontier: Frontier, items: Sequence[Item], answers: list[tuple[int, _Held]],
            now: float) -> list[tuple[int, _Held]]:
    """Answer held leases: done for good (refetch 0), or back in their queue from their
    refetch time; those whose answer took effect (the lease was still held)."""
    groups: dict[float | None, list[tuple[int, _Held]]] = {}
    for i, h in answers:
        when = items[i].refetch or 0
        groups.setdefault(max(0.0, when - now) if when else None, []).append((i, h))
    took: list[tuple[int, _Held]] = []
    for after, group in groups.items():
        leases = [h.lease() for _, h in group]
        flags = (frontier.done_each(leases) if after is None
                 else frontier.done_each(leases, Outcome.RETRY, after=after))
        took += [x for x, ok in zip(group, flags) if ok]
    return took


def _put_known(frontier: Frontier, items: Sequence[Item], known: list[int],
               said: Mapping[int, str], statuses: list[int], dated: Mapping[str, Any],
               handles: Handles) -> list[tuple[str, _Held]]:
    """The known URLs of a put (see :func:`put`); returns the handles answered."""
    canon, held = _held_for(frontier, items, known, statuses, handles)
    now = frontier.clock()
    answers = list(held.items())
    took = _answer(frontier, items, answers, now)
    if len(took) < len(answers):
        # (an answer that took no effect: late, the same URL twice, or a handle since
        # replaced by a newer lease of the URL that this server has not read yet)
        done = {i for i, _ in took}
        stale = [(i, h) for i, h in answers if i not in done]
        handles.read(frontier)
        newer = [(i, n) for (i, h), n in zip(stale, handles.find([canon[i] for i, _ in stale]))
                 if n is not None and n.token != h.token]
        if newer:
            took += _answer(frontier, items, newer, now)
    kept: list[tuple[str, bytes, float | None]] = []  # records
    completed: dict[str, int] = {}  # queue -> URLs newly fetched for good, or no longer
    for i, h in took:
        if not items[i].refetch:
            value, key = _record(frontier, items[i], canon[i], _url_name(canon[i]), h.created)
            kept.append(value)
            completed[key] = completed.get(key, 0) + 1
    if kept:
        frontier.store.put_values(kept)
    last = {canon[i]: i for i in canon if i not in held}
    unleased = [i for i in canon if i not in held and last[canon[i]] == i]
    if unleased:
        _update(frontier, items, canon, unleased, said, statuses, int(dated[CREATED]),
                completed)
    if completed:
        _count_completed(frontier, completed, now)
    return [(canon[i], h) for i, h in took]


def _update(frontier: Frontier, items: Sequence[Item], canon: Mapping[int, str],
            unleased: Sequence[int], said: Mapping[int, str], statuses: list[int], now: int,
            completed: dict[str, int]) -> None:
    """Known URLs not leased (one item per URL): each is an update of the crawl's one
    entry of it, as in the reference server, which replaces it. The update says what
    the URL is now: done for good (refetch 0: a record), or due at its date (an entry),
    keeping the date it was first stored; an item that carried DEAD with the date 0
    (``said``: its error, by item; a dead URL as ListURLs reports it) is that dead
    URL: nothing changes for a URL the crawl holds, and one it does not is kept dead
    (never fetched, not completed). ``completed`` (queue -> URLs newly done, or no
    longer) is updated.

    Never through admission again (a URL the crawl holds is no new request: no budget
    counts it twice, none refuses it), and never lost: the new state is written before
    the old one goes (on Redis, a kill in between leaves the URL twice, never gone:
    the next update of it with a date leaves one). Only URLs the crawl has seen can
    have an entry to replace: a dated URL is offered to add() first (a new URL is
    added as any, counted once; one in the seen-set comes back a duplicate, counted
    as one, and is updated), a URL with a record put again with the date 0 stays
    done (a new record); only the others are looked for: one read of each queue they
    name (Frontier.remove_queued picking nothing), one removal step for each queue
    holding an entry to remove, and one read of the dead requests if one of them is
    found in no queue."""
    names = [_url_name(canon[i]) for i in unleased]
    records: dict[int, Listed] = {}  # the URLs fetched for good (their record)
    for i, raw in zip(unleased, frontier.store.get_values(names, now)):
        record = None if raw is None else _record_of(raw)
        if record is not None:
            records[i] = record
    # (a dated URL never seen is new: added as any, under the crawl's rules)
    probe = [i for i in unleased if items[i].refetch and i not in records]
    seen_dated: list[int] = []
    if probe:
        got = frontier.add([_request(items[i], {CREATED: now}, items[i].refetch, now,
                                     not_before=float(items[i].refetch or 0))
                            for i in probe])
        refused = {probe[r.index] for r in got.rejected}
        for i, added in zip(probe, got.added_flags):
            if i in refused:
                statuses[i] = SKIPPED  # (not in the crawl: nothing of it lost)
            elif not added:
                seen_dated.append(i)
    # (a URL done for good and put with no date is queued nowhere, but for a kill
    # between its record's write and its entry's removal: fetched once more, then)
    looked = seen_dated + [i for i in unleased if (i in records) == bool(items[i].refetch)]
    keys = {i: items[i].key or frontier.queue_of(canon[i]) for i in unleased}
    old = _entries_of(frontier, [(keys[i], canon[i]) for i in looked])
    dead: dict[str, list[tuple[int, str, Request]]] = {}
    if any(canon[i] not in old for i in looked):
        wanted = {canon[i] for i in looked}
        for d in frontier.dead(2**31 - 1):
            if d.request.url in wanted:
                dead.setdefault(d.request.url, []).append((d.id, d.queue, d.request))
    values: list[tuple[str, bytes, float | None]] = []
    loads: list[dict[str, Any]] = []
    keep: dict[str, tuple[Any, ...] | None] = {}  # URL -> the entry it keeps, if any
    drop: list[int] = []  # the URLs no longer fetched for good (their record goes)
    requeue: list[int] = []  # dead requests replaced
    new_queues: set[str] = set()
    for i, name in zip(unleased, names):
        url, item, key = canon[i], items[i], keys[i]
        if i in probe and i not in seen_dated:
            continue  # (added, or refused: not the crawl's)
        entries, record, gone = old.get(url, []), records.get(i), dead.get(url, [])
        created = (record.created if record is not None
                   else next((c for c in (created_of(r) for r in entries) if c), 0)
                   or next((c for c in (created_of(r) for _, _, r in gone) if c), 0)
                   or now)
        if i in said:
            if record is not None or entries or gone:
                continue  # (the crawl holds it: the dead URL as listed, put back)
            # (a URL another crawl gave up on: dead here too, never fetched)
            loads.append({"type": "dead", "queue": key, "error": said[i],
                          "died_at": float(now),
                          "request": dumpfmt.request_to_json(_request(item, {CREATED: now}))})
            if (fp := frontier.fingerprint_of(url)) is not None:
                loads.append(dumpfmt.seen(fp, None))
            continue
        requeue += [d for d, _, _ in gone]
        if item.refetch:
            req = _request(item, {CREATED: created}, item.refetch, now,
                           not_before=float(item.refetch))
            want = _entry_key(req)
            same = next((e for e in entries if _same_listing(e, req)), None)
            if same is not None and not gone:
                keep[url] = _entry_key(same)  # (it says so already: nothing changes)
            else:
                keep[url] = want
                loads.append({"type": "entry", "queue": key,
                              "request": dumpfmt.request_to_json(req)})
            if record is not None:
                drop.append(i)
                completed[record.key] = completed.get(record.key, 0) - 1
        else:
            value, rkey = _record(frontier, item, url, name, created)
            values.append(value)
            keep[url] = None
            if record is None:
                completed[rkey] = completed.get(rkey, 0) + 1
                if not entries and not gone:
                    # (a queue holding a URL done for good exists, as in the reference
                    # server, though crawlq never queued the URL: it is listed, counted,
                    # and dumped queue by queue)
                    new_queues.add(rkey)
                if (fp := frontier.fingerprint_of(url)) is not None:
                    loads.append(dumpfmt.seen(fp, None))
    # The new state first: the records, the entries and seen marks (by load: no
    # admission), then the old entries go.
    if values:
        frontier.store.put_values(values)
    loads += [dumpfmt.queue(k, 0, 0.0, {}, None) for k in sorted(new_queues)]
    if loads:
        frontier.load(loads)
    if requeue:  # (a dead request replaced: back in its queue, then removed with the others)
        frontier.requeue_dead(requeue)
    removals = {url: k for url, k in keep.items() if old.get(url) or dead.get(url)}
    if removals:
        where = {(keys[i], u) for i in unleased if (u := canon[i]) in removals}
        where.update((q, u) for u in removals for _, q, _ in dead.get(u, []))
        _remove_entries(frontier, sorted(where), removals)
    if drop:
        frontier.store.drop_values([_url_name(canon[i]) for i in drop])


def _without_dead(item: Item) -> Item:
    """The item without DEAD in its metadata: crawlq's own word, never kept as a
    client's metadata."""
    return Item(item.url, item.key, {k: v for k, v in item.metadata.items() if k != DEAD},
                item.refetch)


def _entry_key(request: Request) -> tuple[Any, ...]:
    """What tells a queued entry of a URL from another of it."""
    meta = metadata_of(request)
    return (request.url, request.priority, request.not_before, created_of(request),
            tuple(sorted((k, tuple(v)) for k, v in meta.items())))


def _same_listing(entry: Request, update: Request) -> bool:
    """Whether an entry is listed as ``update`` would be: the same date, metadata and
    creation date (DumpURLs' output put back: nothing to change)."""
    def view(r: Request) -> Listed:
        return _listed({"type": "entry", "queue": "",
                        "request": dumpfmt.request_to_json(r)}, 0.0)
    return view(entry) == view(update)


def _entries_of(frontier: Frontier, urls: Sequence[tuple[str, str]]
                ) -> dict[str, list[Request]]:
    """The queued and scheduled entries of ``urls`` ((queue, canonical URL) pairs), by
    URL: one read of each queue named (Frontier.remove_queued picking nothing)."""
    found: dict[str, list[Request]] = {}

    def note(wanted: set[str], request: Request) -> bool:
        if request.url in wanted:
            found.setdefault(request.url, []).append(request)
        return False

    _each_queue(frontier, urls, note)
    return found


def _remove_entries(frontier: Frontier, where: Sequence[tuple[str, str]],
                    keep: Mapping[str, tuple[Any, ...] | None]) -> None:
    """Remove the queued and scheduled entries of the URLs of ``keep`` (in the queues
    ``where`` names: (queue, URL) pairs) but one entry per URL like ``keep[url]``
    (None: none kept); one step per queue."""
    kept: set[str] = set()

    def pick(wanted: set[str], request: Request) -> bool:
        url = request.url
        if url not in wanted:
            return False
        if url not in kept and keep[url] is not None and _entry_key(request) == keep[url]:
            kept.add(url)
            return False
        return True

    _each_queue(frontier, where, pick)


def _each_queue(frontier: Frontier, pairs: Sequence[tuple[str, str]],
                pick: Callable[[set[str], Request], bool]) -> None:
    """One Frontier.remove_queued step in each queue ``pairs`` ((queue, URL)) names,
    removing what ``pick`` (the URLs wanted in the queue, a request) says."""
    by_queue: dict[str, set[str]] = {}
    for key, url in pairs:
        by_queue.setdefault(key, set()).add(url)
    for key, wanted in by_queue.items():
        frontier.remove_queued(functools.partial(pick, wanted), key)


def _count_completed(frontier: Frontier, deltas: Mapping[str, int], now: float) -> None:
    """Add ``deltas`` (queue key -> URLs newly fetched for good, or no longer) to the
    crawl's completed count, and to those of the queues with a crawl limit (tallies of
    the store: atomic, whichever servers answer at once). A queue that reaches its
    crawl limit is blocked; one back under it, unblocked."""
    keys = [k for k, d in deltas.items() if d]
    if not keys:
        return
    counts = {_COMPLETED_ALL: sum(deltas[k] for k in keys)}
    limited: list[tuple[str, int]] = []
    (limits_on,) = frontier.store.get_values([_LIMITS_ON], now)
    if limits_on is not None:
        limits = frontier.store.get_values([_limit_name(k) for k in keys], now)
        limited = [(k, _count(v)) for k, v in zip(keys, limits) if _count(v)]
        counts.update((_completed_name(k), deltas[k]) for k, _ in limited)
    got = frontier.store.tally(counts)
    for (k, limit), n in zip(limited, got[1:]):
        _hold_to_limit(frontier, k, n >= limit, n - deltas[k] >= limit)


def _hold_to_limit(frontier: Frontier, key: str, reached: bool, held: bool) -> None:
    """Block queue ``key`` when it ``reached`` its crawl limit; unblock it when it no
    longer does and was ``held`` by a limit (its block ends; crawlq keeps one rest per
    queue, so a block of BlockQueueUntil ends too)."""
    if reached:
        frontier.block(key, until=frontier.clock() + LIMIT_BLOCK)
    elif held:
        frontier.unblock(key)


def set_limit(frontier: Frontier, key: str, limit: int) -> None:
    """URLFrontier's SetCrawlLimit: queue ``key`` serves no more URLs once ``limit``
    of them were fetched for good (0: no limit). Kept in the store (a value with no
    expiry: every server on it follows it, and it survives restarts). Its URLs done so
    far are counted from their records (a scan of the crawl: a control call)."""
    store = frontier.store
    name = _completed_name(key)
    now = frontier.clock()
    (old,) = store.get_values([_limit_name(key)], now)
    was = _count(old)
    (before,) = store.tallies([name])
    if limit:
        # (its count from here on; answers counted meanwhile, if it had a limit, stay)
        store.put_values([(_limit_name(key), str(limit).encode(), None),
                          (_LIMITS_ON, b"1", None)])
        done = _completed_of(frontier, key)
        (done,) = store.tally({name: done - before}) if not was else (before,)
    else:
        done = before
        store.drop_values([_limit_name(key)])
        store.drop_tallies([name])
    _hold_to_limit(frontier, key, bool(limit) and done >= limit, bool(was) and done >= was)


def block(frontier: Frontier, key: str, until: float) -> None:
    """URLFrontier's BlockQueueUntil: queue ``key`` serves nothing before ``until``
    (epoch seconds); a time past ends its block (:func:`unblock`). The time is kept too
    (a value of the queue's until then) so that ListQueues hides the queue meanwhile, as
    the reference does: crawlq's one rest per queue does not tell a block from a rest
    after an answer, which the reference lists."""
    if until <= frontier.clock():
        unblock(frontier, key)
        return
    frontier.block(key, until=until)
    frontier.store.put_values([(_block_name(key), repr(until).encode(), until)])


def unblock(frontier: Frontier, key: str) -> None:
    """URLFrontier's BlockQueueUntil with a time past: queue ``key``'s block ends (and
    any rest it is in), unless it is held by its crawl limit."""
    frontier.store.drop_values([_block_name(key)])
    limit, done = limit_of(frontier, key)
    if not (limit and done >= limit):
        frontier.unblock(key)


def set_delay(frontier: Frontier, key: str | None, delay: float | None,
              change: Callable[[], None] | None = None) -> None:
    """URLFrontier's SetDelay: queue ``key`` rests ``delay`` seconds after each answer
    (None: the crawl's default again); with no ``key``, ``change`` sets the crawl's
    default ``delay``, for its queues with no delay of their own. A rest already running
    ends as the new delay says, as the reference server's does (it checks last served +
    delay when it serves, so a lowered delay applies at once). crawlq rests a queue
    after each answer, until ``ready_at``; the answer was at most ``ready_at -`` the old
    ``min_delay`` (the rest was at least that), so the rest now ends at the latest
    ``ready_at - old min_delay + new max_delay``, never later than it did: exact for
    the delays SetDelay sets (min_delay = max_delay), never sooner than the new delay
    after the answer otherwise. A block (BlockQueueUntil, a crawl limit) is not a rest:
    it holds. The queues are read before the change and again after it: a rest begun
    in between (an answer) is left as it is. On a store without transactions (Redis)
    the rest is ended and the shorter one set in two steps, so a GetURLs of another
    server in between may lease from the queue before the new delay passed, and an
    answer after the second read has its rest replaced by the shorter one: closing
    these needs a store step that shortens a queue's rest to a time only if it is
    still the one read. (Scans of the queues, two with no ``key``: a control call.)"""
    def resting() -> dict[str, QueueInfo]:
        """The queues the change is for, resting after an answer (keyed: one queue)."""
        now = frontier.clock()
        infos = ([q for q in [queue_info(frontier, key)] if q is not None]
                 if key is not None
                 else [q for q in queue_infos(frontier) if "min_delay" not in q.settings])
        return {q.key: q for q in infos if q.state == "resting" and q.ready_at > now}

    before = resting()
    policy = frontier.store.policy
    old = {k: q.settings.get("min_delay", policy.min_delay) for k, q in before.items()}
    if key is not None:
        frontier.configure_queue(key, min_delay=delay, max_delay=delay)
    elif change is not None:
        change()
    if not before:
        return
    # (read again once the delay changed: a queue answered meanwhile rests from that
    # answer, by the old delay or the new one, and is left as it is; only the rests
    # that were running before the change, and still are, end sooner)
    after = resting()
    keys = [k for k, q in after.items() if k in before and q.ready_at == before[k].ready_at]
    if not keys:
        return
    policy = frontier.store.policy
    now = frontier.clock()
    held = [b or c for b, c in zip(blocked(frontier, keys), _at_limit(frontier, keys))]
    for k, hold in zip(keys, held):
        q = after[k]
        new = delay if delay is not None else policy.max_delay if key is not None \
            else q.settings.get("max_delay", policy.max_delay)
        end = q.ready_at - old[k] + new
        if hold or end >= q.ready_at:
            continue
        with frontier.transaction():  # (one step where the store has transactions)
            frontier.unblock(k)
            if end > now:
                frontier.block(k, until=end)


def _at_limit(frontier: Frontier, keys: Sequence[str]) -> list[bool]:
    """Whether each queue of ``keys`` is held by its crawl limit."""
    limits = [_count(v) for v in frontier.store.get_values(
        [_limit_name(k) for k in keys], frontier.clock())]
    limited = [(k, n) for k, n in zip(keys, limits) if n]
    if not limited:
        return [False] * len(keys)
    done = frontier.store.tallies([_completed_name(k) for k, _ in limited])
    reached = {k for (k, n), d in zip(limited, done) if d >= n}
    return [k in reached for k in keys]


def blocked(frontier: Frontier, keys: Sequence[str]) -> list[bool]:
    """Whether each queue of ``keys`` is blocked by BlockQueueUntil (until later)."""
    now = frontier.clock()
    kept = frontier.store.get_values([_block_name(k) for k in keys], now) if keys else []
    return [v is not None and _time(v) > now for v in kept]


def _time(raw: bytes) -> float:
    try:
        return float(raw)
    except ValueError:
        return 0.0


def _block_name(key: str) -> str:
    return _BLOCK + _digest(key)


def limit_of(frontier: Frontier, key: str) -> tuple[int, int]:
    """Queue ``key``'s crawl limit (0: none) and how many of its URLs were fetched for
    good (kept while it has a limit; else counted from their records: a scan)."""
    (limit,) = frontier.store.get_values([_limit_name(key)], frontier.clock())
    if _count(limit):
        return _count(limit), frontier.store.tallies([_completed_name(key)])[0]
    return 0, _completed_of(frontier, key)


def _completed_of(frontier: Frontier, key: str) -> int:
    """How many URLs of queue ``key`` are fetched for good (a scan of the records)."""
    return sum(1 for _, d in _records(frontier) if d.key == key)


def _records(frontier: Frontier) -> Iterator[tuple[str, Listed]]:
    """Every URL fetched for good, with the name of its record (a scan of the crawl)."""
    for rec in frontier.records():
        if (d := _record_in(rec)) is not None:
            yield str(rec["name"]), d


def _record_in(rec: Mapping[str, Any]) -> Listed | None:
    """The URL a dump record keeps as fetched for good, or None for any other record."""
    if rec.get("type") != "value" or not str(rec.get("name")).startswith(_URL):
        return None
    return _record_of(dumpfmt.value_data(rec))


def _count(raw: bytes | None) -> int:
    """A count kept as ASCII digits (0: none, or not one)."""
    try:
        return int(raw) if raw else 0
    except ValueError:
        return 0


def _completed_name(key: str) -> str:
    return _COMPLETED + _digest(key)


def _limit_name(key: str) -> str:
    return _LIMIT + _digest(key)


def _record(frontier: Frontier, item: Item, url: str, name: str,
            created: int) -> tuple[tuple[str, bytes, float | None], str]:
    """The store value that keeps ``url`` (canonical, its value ``name``) as fetched
    for good, and the URL's queue."""
    key = item.key or frontier.queue_of(url)
    text = f'{{"u":{_json_str(url)},"k":{_json_str(key)},"c":{int(created)}'
    if item.metadata:
        text += ',"m":' + json.dumps({k: list(v) for k, v in item.metadata.items()},
                                     separators=(",", ":"))
    return (name, (text + "}").encode(), None), key


_json_str = json.encoder.encode_basestring
"""A str as a JSON string (json's C function: a URL's record is made per answer)."""


def queue_infos(frontier: Frontier) -> list[QueueInfo]:
    """Every queue of the crawl (a scan: for the listing calls, not the hot path)."""
    return frontier.queues(limit=2**31 - 1)


def queue_info(frontier: Frontier, key: str) -> QueueInfo | None:
    """One queue's figures, or None for a queue crawlq does not hold."""
    return next((q for q in queue_infos(frontier) if q.key == key), None)


def active_urls(q: QueueInfo) -> int:
    """URLFrontier's "active" URLs of a queue: those not completed yet (queued, due
    later, or leased)."""
    return q.queued + q.scheduled + q.leased


def is_active_queue(q: QueueInfo) -> bool:
    """URLFrontier's "active" queue: it holds URLs not completed yet. (A blocked queue
    counts too, as in the reference.)"""
    return active_urls(q) > 0


def stat_counts(frontier: Frontier) -> tuple[int, int, int, dict[str, int]]:
    """A crawl's size (URLs not completed: queued, due later or leased), URLs in
    process, queue count and named counts for GetStats, as the reference counts them
    (a scan of the queues, as the reference's)."""
    st = frontier.stats()
    active = sum(1 for q in queue_infos(frontier) if is_active_queue(q))
    completed, returned = frontier.store.tallies([_COMPLETED_ALL, _RETURNED])
    counts = {"completed": completed,
              "active_queues": active, "seen": st.seen, "added": st.added,
              "scheduled": st.scheduled, "failed": st.failed,
              "retried": max(0, st.retried - returned),
              "dead": st.dead, "duplicates": st.duplicates,
              "rejected": sum(st.rejected.values())}
    return st.queued + st.leased, st.leased, st.queues_total, counts


@dataclass(frozen=True, slots=True)
class Listed:
    """A URL of the crawl as URLFrontier lists it: known, with the date it is due
    (``date``: epoch seconds; 0: never again: fetched for good, or dead, its metadata
    saying so under DEAD)."""

    url: str
    key: str
    metadata: dict[str, list[str]]
    date: int
    created: int = 0


def listed(frontier: Frontier, key: str = "", text: str | None = None,
           ignore_case: bool = False) -> Iterator[Listed]:
    """The URLs of the crawl (queued, leased, scheduled, dead, fetched for good),
    optionally of one queue and containing ``text``; in the dump's order (a scan of the
    whole crawl)."""
    needle = None if not text else text.lower() if ignore_case else text
    now = frontier.clock()
    for rec in frontier.records():
        kind = rec.get("type")
        if kind in ("entry", "dead"):
            if key and rec.get("queue") != key:
                continue
            found = _listed(rec, now)
        elif (done := _record_in(rec)) is not None:
            if key and done.key != key:
                continue
            found = done
        else:
            continue
        url = found.url
        if needle is None or needle in (url.lower() if ignore_case else url):
            yield found


def status_of(frontier: Frontier, url: str) -> Listed | None:
    """What the crawl knows of ``url`` (None: nothing). A URL fetched for good is
    looked up by its name; one queued, leased or dead by a scan of the crawl."""
    canon = frontier.canonicalize(url)
    (kept,) = frontier.store.get_values([_url_name(canon)], frontier.clock())
    done = None if kept is None else _record_of(kept)
    if done is not None:
        return done
    fp = frontier.fingerprint_of(canon)
    hexed = None if fp is None else fp.hex()
    seen = False
    for rec in frontier.records():
        kind = rec.get("type")
        if kind in ("entry", "dead"):
            if str(rec["request"]["url"]) == canon:
                return _listed(rec, frontier.clock())
        elif kind == "seen" and rec.get("fp") == hexed:
            seen = True
    # (seen, but not through URLFrontier's calls: fetched for good)
    return Listed(canon, frontier.queue_of(canon), {}, 0) if seen else None


def delete_queue(frontier: Frontier, key: str, handles: Handles) -> int:
    """URLFrontier's DeleteQueue: queue ``key`` and every URL in it go (queued, leased,
    scheduled, fetched for good); how many of its URLs were active (not completed), as
    the reference answers. (Scans of the crawl: an admin call.)
    Its leases are ended first (their URLs back in the queue, then deleted with it), so
    that the store forgets the queue; a late answer to one of them changes nothing."""
    urls: list[str] = []
    kept: list[str] = []
    for rec in frontier.records():
        kind = rec.get("type")
        if kind == "entry" and rec.get("queue") == key:
            urls.append(str(rec["request"]["url"]))
        elif (d := _record_in(rec)) is not None and d.key == key:
            kept.append(str(rec["name"]))
    # (its dead URLs go too: requeued, then deleted with the others)
    dead = [d.id for d in frontier.dead(2**31 - 1) if d.queue == key]
    with frontier.transaction():
        if dead:
            frontier.requeue_dead(dead)
        # (a late answer to a lease ended here takes no effect: the handles stay
        # until their time is up, here and in the store, so it is known as late)
        handles.read(frontier)
        held = [h.lease() for h in handles.find(urls) if h is not None]
        if held:
            _give_back(frontier, held)
        frontier.store.drop_values([*kept, _limit_name(key), _block_name(key)])
        frontier.store.tally({_COMPLETED_ALL: -len(kept)})
        frontier.store.drop_tallies([_completed_name(key)])
        return frontier.delete_queue(key)


def _record_of(data: bytes) -> Listed | None:
    """A URL's record (see _URL), or None for a value that is not one."""
    if data[:1] != b"{":
        return None
    try:
        d = json.loads(data)
        return Listed(str(d["u"]), str(d["k"]), _clean(d.get("m")), 0,
                      date_of(float(d.get("c") or 0)))
    except (ValueError, KeyError, TypeError):
        return None


def _listed(rec: Mapping[str, Any], now: float) -> Listed:
    """An entry or dead record of the dump as a Listed URL: a dead one is due never,
    one with a ``not_before`` then, one put with a date already past at that date (its
    priority tells it: see date_priority), another when a server first stored it (its
    date for a discovered URL), or now for one that came in another way."""
    req = rec["request"]
    meta = dumpfmt.from_json(req.get("meta") or {})
    md = meta.get(META) if isinstance(meta, Mapping) else None
    created = _created_in(meta)
    not_before = req.get("not_before")
    metadata = _clean(md)
    if rec.get("type") == "dead":
        date = 0
        metadata[DEAD] = [str(rec.get("error") or "")]
    elif not_before:
        date = date_of(not_before)
    elif created and int(req.get("priority") or 0) > 0:  # (put with a date past)
        date = date_of(PRIORITY_MAX - int(req["priority"]))
    else:
        date = created or int(now)
    return Listed(str(req["url"]), str(rec.get("queue")), metadata, date, created)


def _clean(md: object) -> dict[str, list[str]]:
    if not isinstance(md, Mapping):
        return {}
    return {str(k): [str(x) for x in v] for k, v in md.items() if isinstance(v, list)}


__all__ = [
    "CREATED",
    "DEAD",
    "FAIL",
    "META",
    "OK",
    "SKIPPED",
    "Handles",
    "Item",
    "Listed",
    "active_urls",
    "block",
    "blocked",
    "created_of",
    "date_of",
    "date_priority",
    "delete_queue",
    "give_back",
    "is_active_queue",
    "lease",
    "limit_of",
    "listed",
    "metadata_of",
    "purge",
    "put",
    "queue_info",
    "queue_infos",
    "set_delay",
    "set_limit",
    "stat_counts",
    "status_of",
    "unblock",
]
