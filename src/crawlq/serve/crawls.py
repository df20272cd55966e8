"""The crawls a server holds: URLFrontier's crawl IDs as crawlq stores.

The crawl ``DEFAULT`` (also named by an empty crawl ID) is the store ``crawlq serve``
was given. Every other crawl is a store of the same kind beside it, made when a URL is
first put into it, so that crawls share nothing (their seen-sets, queues, politeness
and counters are apart, and deleting one is deleting its store):

- ``sqlite:///dir/name.db``: the file ``dir/name.crawl-<ID>.db``;
- ``redis://…?prefix=P``: the key prefix ``P/crawl/<ID>``;
- ``memory://``: another memory store in this server.

A crawl ID is any text but spaces and control characters alone (those are DEFAULT, as
in URLFrontier's reference server; clients use names like ``example.1``). In a file
name or a key it is percent-encoded (every byte of its UTF-8 but letters, digits,
``_``, ``-``, ``.`` and ``~``; a ``.`` that begins it too), so no ID can reach outside
the store's directory or prefix; one whose encoded form is longer than ``MAX_ENCODED``
characters (a file name has at most 255 bytes) is refused with a clear error, never
taken in part.
"""

from __future__ import annotations

import glob
import logging
import os
import threading
import time
from collections.abc import Callable
from urllib.parse import quote, unquote

from ..errors import ConfigError
from ..frontier import Frontier
from ..stores import StoreURL, destroy_store
from ..stores.base import Namespaced

DEFAULT = "DEFAULT"
"""The crawl ID of the store the server was given (URLFrontier's default crawl)."""

DEFAULT_DELAY = "crawlq:uf:default-delay"
"""The store value holding a crawl's default delay (URLFrontier's SetDelay without a
queue key), in seconds as ASCII digits."""
RECHECK = 1.0
"""Seconds between two readings of a crawl's default delay by a server: another server
on the store that changed it is followed within this time."""

MAX_ENCODED = 200
"""The longest a crawl ID may be once percent-encoded (200 letters or digits; 33
characters such as ``ü``, 22 CJK characters)."""


def _encoded(crawl: str) -> str:
    """A crawl ID as it appears in a file name or a key prefix."""
    name = quote(crawl, safe="")  # (letters, digits, "_.-~" stay; "/" and all else: %XX)
    return "%2E" + name[1:] if name.startswith(".") else name


def _decoded(name: str) -> str | None:
    """The crawl ID of a file name's or a prefix's part, None if it is not one of ours."""
    try:
        crawl = unquote(name, errors="strict")
    except UnicodeDecodeError:
        return None
    return crawl if crawl and _encoded(crawl) == name else None
_SQLITE_MARK = ".crawl-"
_REDIS_MARK = "/crawl/"


def crawl_id(value: str) -> str:
    """``value`` as a crawl ID (empty, or only spaces and control characters: DEFAULT, as
    the reference server's ``CrawlID.normaliseCrawlID``, Java's ``trim``); ConfigError
    for one crawlq cannot keep."""
    if not value or max(value) <= " ":
        return DEFAULT
    if len(_encoded(value)) > MAX_ENCODED:
        raise ConfigError(f"crawl ID {value[:40]!r}... is too long: at most {MAX_ENCODED} "
                          "characters once percent-encoded (200 letters or digits)")
    return value


class Crawls:
    """The frontiers of a server's crawls, opened on first use and kept open.

    ``opener(url)`` opens a frontier with the server's options; thread-safe.
    """

    def __init__(self, store_url: str, default: Frontier,
                 opener: Callable[[str], Frontier]) -> None:
        self.store_url = store_url
        self.default = default
        self._opener = opener
        self._open: dict[str, Frontier] = {DEFAULT: default}
        self._lock = threading.Lock()
        self._url = StoreURL.parse(store_url)
        self._kind = self._url.kind
        # crawl -> (monotonic time of the last reading, the default delay applied)
        self._delays: dict[str, tuple[float, bytes | None]] = {}

    def get(self, crawl: str, *, create: bool) -> Frontier | None:
        """The frontier of ``crawl``; None when it does not exist and ``create`` is off."""
        crawl = crawl_id(crawl)
        with self._lock:
            frontier = self._open.get(crawl)
            if frontier is None:
                url = self._url_of(crawl)
                if not create and not self._exists(crawl, url):
                    return None
                frontier = self._opener(url)
                self._open[crawl] = frontier
        checked, _ = self._delays.get(crawl, (-RECHECK, None))
        if time.monotonic() - checked >= RECHECK:
            self._follow_delay(crawl, frontier)
        return frontier

    def check(self, crawl: str) -> None:
        """ConfigError for a crawl ID this server cannot keep (too long for an ID, or
        for a file name beside the store)."""
        name = crawl_id(crawl)
        if name != DEFAULT:
            self._url_of(name)

    def set_default_delay(self, crawl: str, seconds: int) -> None:
        """Make ``seconds`` the rest after each answer of the crawl's queues that have
        no delay of their own, for every server on its store (kept in the store)."""
        frontier = self.get(crawl, create=True)
        assert frontier is not None
        frontier.put_value(DEFAULT_DELAY, str(int(seconds)).encode("ascii"))
        self._follow_delay(crawl_id(crawl), frontier)

    def _follow_delay(self, crawl: str, frontier: Frontier) -> None:
        """Apply the crawl's default delay kept in its store, if it changed since the
        last reading (the frontier's own options hold until one is set)."""
        kept = frontier.get_value(DEFAULT_DELAY)
        _, applied = self._delays.get(crawl, (0.0, None))
        if kept is not None and kept != applied:
            try:
                seconds = float(kept.decode("ascii"))
                frontier.configure_default(min_delay=seconds, max_delay=seconds)
            except (UnicodeDecodeError, ValueError):  # (ConfigError is a ValueError)
                logging.getLogger(__name__).warning(
                    "crawl %s: ignoring a default delay that is not a number of seconds: "
                    "%r", crawl, kept[:40])
        self._delays[crawl] = (time.monotonic(), kept if kept is not None else applied)

    def names(self) -> list[str]:
        """Every crawl ID that holds something (a URL queued, leased, dead or known):
        DEFAULT first, then the others sorted (those of other servers on the same store
        too: they are found in the store, not in this server's memory)."""
        return [name for name in self._all_names() if self._holds_something(name)]

    def _holds_something(self, crawl: str) -> bool:
        frontier = self.get(crawl, create=False)
        if frontier is None:
            return False
        st = frontier.stats()
        return bool(st.queued or st.leased or st.dead or st.added or st.seen)

    def _all_names(self) -> list[str]:
        """Every crawl ID there is a store for, empty or not."""
        found = set(self._open)
        if self._kind == "sqlite":
            base = self._sqlite_stem()
            for path in glob.glob(glob.escape(base) + _SQLITE_MARK + "*.db"):
                crawl = _decoded(path[len(base) + len(_SQLITE_MARK):-3])
                if crawl is not None:
                    found.add(crawl)
        elif isinstance(store := self.default.store, Namespaced):
            for prefix in store.prefixes_under(store.prefix + _REDIS_MARK):
                crawl = _decoded(prefix[len(store.prefix) + len(_REDIS_MARK):])
                if crawl is not None:
                    found.add(crawl)
        found.discard(DEFAULT)
        return [DEFAULT, *sorted(found)]

    def delete(self, crawl: str) -> int:
        """Delete a crawl; returns how many URLs it held (queued, leased and dead).
        DEFAULT, the store the server was given, is emptied in place (the server keeps
        using it); any other crawl's store is deleted. Deleting a crawl that does not
        exist returns 0."""
        crawl = crawl_id(crawl)
        if crawl == DEFAULT:
            st = self.default.stats()
            self.default.clear()
            with self._lock:
                self._delays.pop(DEFAULT, None)
            return st.queued + st.leased + st.dead
        frontier = self.get(crawl, create=False)
        if frontier is None:
            return 0
        st = frontier.stats()
        held = st.queued + st.leased + st.dead
        with self._lock:
            self._open.pop(crawl, None)
            self._delays.pop(crawl, None)
            destroy_store(frontier.store)
        return held

    def close(self) -> None:
        """Close every crawl's frontier but DEFAULT's (its opener closes it)."""
        with self._lock:
            for name, frontier in self._open.items():
                if name != DEFAULT:
                    frontier.close()
            self._open = {DEFAULT: self.default}

    # -- where a crawl lives ------------------------------------------------------

    def _sqlite_stem(self) -> str:
        path = self._url.sqlite_path
        return path[:-3] if path.endswith(".db") else path

    def _url_of(self, crawl: str) -> str:
        if self._kind == "memory":
            return "memory://"
        if self._kind == "sqlite":
            path = self._sqlite_stem() + _SQLITE_MARK + _encoded(crawl) + ".db"
            if len(os.path.basename(path).encode()) > 255:
                raise ConfigError(f"crawl ID {crawl[:40]!r} is too long for a file name "
                                  f"beside {self.store_url}")
            query = self._url.raw_query
            return f"sqlite:///{path}" + (f"?{query}" if query else "")
        if self._kind == "redis" and isinstance(store := self.default.store, Namespaced):
            return self._url.with_query(
                drop=("prefix",), add=(("prefix", store.prefix + _REDIS_MARK + _encoded(crawl)),))
        raise ConfigError(f"crawl IDs other than {DEFAULT} need a memory, sqlite or redis "
                          f"store, not {self._url.scheme}://")

    def _exists(self, crawl: str, url: str) -> bool:
        if self._kind == "sqlite":
            return os.path.exists(StoreURL.parse(url).sqlite_path)
        if self._kind == "redis":
            return crawl in self._all_names()
        return False  # (memory: only what this server made, which is open)
