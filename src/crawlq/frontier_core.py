"""The Frontier's base: its options, how a request becomes a store entry (the one
definition of what ``add`` accepts), the crawl's canonical form and closing.
:class:`~crawlq.frontier_admin.FrontierAdmin` extends it with looking and steering,
and :class:`~crawlq.frontier.Frontier` with a crawl's calls (add, next, done)."""

from __future__ import annotations

import functools
import gc
import time
from collections.abc import Callable, Iterable
from typing import Any, Concatenate, ParamSpec, TypeVar

from .entries import EntryMaker
from .errors import ConfigError, CrawlqError
from .models import Request
from .policies.canonical import DEFAULT_MAX_LENGTH, Canonicalizer
from .policies.fingerprint import Fingerprinter, FingerprintFunction, url_fingerprint
from .policies.queueing import QueueKeyFunction, host_key, resolve_queue_key
from .stores.base import (
    Store,
    as_count,
    as_seconds,
    flag,
)

_FORM = "crawlq:canonical-form"
"""The store value holding the canonical form of a crawl's URLs."""

_F = TypeVar("_F", bound="FrontierCore")
_P = ParamSpec("_P")
_R = TypeVar("_R")


def _gc_paused(
        method: Callable[Concatenate[_F, _P], _R]) -> Callable[Concatenate[_F, _P], _R]:
    """Run a hot-path method with Python's cyclic garbage collector paused (unless the
    frontier's ``pause_gc`` is off, or the collector is off already).

    CPython starts a collection every 700 container objects allocated, and every tenth
    of those collections walks an older generation, every hundredth the whole heap. A
    batch call allocates thousands of short-lived tuples (rows, entries, leases) but
    makes no reference cycles, so each batch set off several collections that only
    walked the caller's heap (the crawler's, the benchmark's) and freed nothing. Paused,
    the allocations still count: the next allocation after the call starts one
    collection instead of several, so cycles anywhere are still collected, later.
    (Mercurial does the same around its big parses, for the same reason.)
    """

    @functools.wraps(method)
    def paused(self: _F, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        if not self.pause_gc or not gc.isenabled():
            return method(self, *args, **kwargs)
        gc.disable()
        try:
            return method(self, *args, **kwargs)
        finally:
            gc.enable()

    return paused




class FrontierCore:
    """The Frontier's options and the steps its calls share (the frontier is
    :class:`crawlq.frontier.Frontier`; build one with :meth:`open`)."""

    def __init__(
        self,
        store: Store,
        *,
        canonicalize: bool | Callable[[str], str] = True,
        max_url_length: int = DEFAULT_MAX_LENGTH,
        schemes: Iterable[str] = ("http", "https"),
        fingerprint: FingerprintFunction | None = None,
        source_aware: bool = False,
        dedup_post: bool = True,
        queue_by: str | QueueKeyFunction = "host",
        priority: Callable[[Request], int] | None = None,
        revisit_after: float | None = None,
        lease_ttl: float = 300.0,
        max_retries: int = 3,
        retry_backoff: float = 60.0,
        retry_backoff_max: float = 3600.0,
        strict_acks: bool = False,
        pause_gc: bool = True,
        clock: Callable[[], float] = time.time,
        _check_form: bool = True,
    ) -> None:
        # (checked here, not where they are used: a bad retry_backoff would otherwise
        # raise only at the first failed fetch, deep into a crawl)
        lease_ttl = as_seconds("lease_ttl", lease_ttl, positive=True)
        max_retries = as_count("max_retries", max_retries)
        retry_backoff = as_seconds("retry_backoff", retry_backoff)
        retry_backoff_max = as_seconds("retry_backoff_max", retry_backoff_max)
        if revisit_after is not None:
            revisit_after = as_seconds("revisit_after", revisit_after, positive=True)
        max_url_length = as_count("max_url_length", max_url_length, 1)
        names = (None if isinstance(schemes, str) or not isinstance(schemes, Iterable)
                 else tuple(schemes))
        if names is None or not all(isinstance(x, str) for x in names):
            raise ConfigError(f"schemes must be a list of scheme names, like ['https'], "
                              f"not {schemes!r}")
        schemes = names
        for name, fn in (("clock", clock), ("priority", priority),
                         ("fingerprint", fingerprint)):
            if (fn is not None or name == "clock") and not callable(fn):
                raise ConfigError(f"{name} must be a function, not {fn!r}")
        source_aware = flag("source_aware", source_aware)
        dedup_post = flag("dedup_post", dedup_post)
        strict_acks = flag("strict_acks", strict_acks)
        pause_gc = flag("pause_gc", pause_gc)
        self.store = store
        if canonicalize is True:
            self.canonicalize: Callable[[str], str] = Canonicalizer(
                schemes=schemes, max_length=max_url_length)
        elif canonicalize is False:
            # crawlq's steps off: the URL as the WHATWG parser serializes it (what the
            # fetcher requests), validated (scheme, host, length).
            self.canonicalize = Canonicalizer(
                drop_fragment=False, normalize_percent=False, sort_query=False,
                drop_params=(), drop_prefixes=(), session_params=(),
                drop_session_in_path=False, schemes=schemes, max_length=max_url_length)
        elif callable(canonicalize):
            self.canonicalize = canonicalize
        else:
            raise ConfigError("canonicalize must be True, False or a callable")
        self.fingerprint: FingerprintFunction = fingerprint or Fingerprinter(
            source_aware=source_aware)
        self.dedup_post = dedup_post
        self.queue_key = resolve_queue_key(queue_by)
        if isinstance(self.canonicalize, Canonicalizer) and self.queue_key is host_key:
            # The canonicalizer has the host at hand: one step instead of two.
            self._split: Callable[[str], tuple[str, str]] = self.canonicalize.split
        else:
            canon_fn, key_fn = self.canonicalize, self.queue_key

            def split(url: str) -> tuple[str, str]:
                c = canon_fn(url)
                return c, key_fn(c)

            self._split = split
        self.priority = priority
        self.revisit_after = revisit_after
        self.lease_ttl = float(lease_ttl)
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        self.strict_acks = strict_acks
        self.pause_gc = pause_gc
        self.clock = clock
        fp = self.fingerprint
        self._entries = EntryMaker(
            self._split, fp,
            url_fingerprint if type(fp) is Fingerprinter and not fp.source_aware else None,
            priority, dedup_post, revisit_after)
        """The one definition of what add() accepts: each request's store entry."""
        if _check_form:
            self._check_canonical_form()

    @classmethod
    def open(cls: type[_F], url: str = "memory://", **options: Any) -> _F:
        """Open a frontier on the store named by ``url``.

        ``memory://``, ``sqlite:///path/to/file.db`` (relative: ``sqlite:///crawl.db``;
        absolute: ``sqlite:////abs/path.db``), later ``redis://``. Options are split
        between the store (politeness, budgets, seen-set) and the frontier (see
        ``docs/options.md``).
        """
        from .stores import STORE_OPTIONS, open_store

        store_opts = {k: options.pop(k) for k in list(options) if k in STORE_OPTIONS}
        frontier_opts = options
        if store_opts.get("bloom_capacity") and frontier_opts.get("revisit_after"):
            raise ConfigError("revisit_after needs the exact seen-set: a Bloom filter cannot "
                              "remember when a URL was seen (drop bloom_capacity)")
        try:
            store = open_store(url, **store_opts)
        except CrawlqError:
            raise
        except (TypeError, ValueError) as exc:  # e.g. concurrency="four"
            raise ConfigError(f"bad store option: {exc}") from None
        # (commands that only look, opened with create=False, may read a crawl of
        # another canonical form: `crawlq dump` is how it moves to this one)
        frontier_opts["_check_form"] = store_opts.get("create", True) is not False
        try:
            return cls(store, **frontier_opts)
        except TypeError as exc:
            store.close()
            raise ConfigError(f"unknown option: {exc}") from None
        except BaseException:
            store.close()
            raise

    def fingerprint_of(self, request: Request | str) -> bytes | None:
        """The seen-set key :meth:`add` would use for ``request`` (None: it bypasses
        dedup). Raises :class:`InvalidURL` for a URL that add() would reject."""
        req = Request(request) if isinstance(request, str) else request
        canon, _ = self._split(req.url)
        return self._entries.seen_key(req, canon)

    def queue_of(self, url: str) -> str:
        """The queue key a URL would wait in."""
        return self.queue_key(self.canonicalize(url))

    @property
    def canonical_form(self) -> str | None:
        """The version of the canonical form this frontier gives URLs
        (:attr:`Canonicalizer.version`), or None for a canonicalize function of the
        user's own (whose forms crawlq cannot tell apart)."""
        canon = self.canonicalize
        return canon.version if isinstance(canon, Canonicalizer) else None

    def _check_canonical_form(self) -> None:
        """Record this frontier's canonical form with a new crawl; refuse a crawl whose
        URLs were canonicalized another way (mixed, the same page would be queued once
        per form and the seen-set would miss)."""
        form = self.canonical_form
        if form is None:
            return
        theirs = self._stored_form()
        if theirs is None:
            self.store.put_values([(_FORM, form.encode(), None)])
        elif theirs != form:
            raise ConfigError(
                f"this crawl's URLs are in canonical form {theirs}, this frontier's are in "
                f"form {form} (another crawlq version or canonicalizer steps): move it with "
                "`crawlq dump` and `crawlq load` into a new store, which re-fingerprints "
                "its requests, or open it with the same steps")

    def _stored_form(self) -> str | None:
        """The canonical form the crawl recorded; ``"1"`` for a crawl with requests but
        none recorded (written before crawlq recorded forms, by its RFC 3986 parser);
        None for a new crawl."""
        stored = self.store.get_values([_FORM], self.clock())[0]
        if stored is not None:
            return stored.decode("utf-8", "replace")
        st = self.store.stats(self.clock(), 0)
        return "1" if (st.seen or st.added or st.queued or st.dead) else None

    def close(self) -> None:
        """Close the store; the frontier cannot be used afterwards."""
        self.store.close()

    def __enter__(self: _F) -> _F:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Frontier store={type(self.store).__name__}>"
