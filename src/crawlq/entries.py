"""Requests into store entries, and store rows back into leases: the one definition of
what :meth:`Frontier.add <crawlq.Frontier.add>` accepts and of the leases
:meth:`~crawlq.Frontier.next` hands out.

Both run once per URL, so setup.py compiles this module with mypyc (the .py runs where
it could not be built, with the same results). Requests and leases are the public
dataclasses of :mod:`crawlq.models`, read and built through their attributes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from .errors import ConfigError, InvalidURL
from .models import NO_META, Lease, Rejection, Request, request_problem
from .payload import PayloadError, decode, encode
from .stores.base import DEPTH_MAX, PRIORITY_MAX, RETRIES_MAX, Entry

_INF: Final = math.inf


def url_of(req: object) -> str:
    """A request's URL for a rejection (its repr when it is not a string)."""
    url = getattr(req, "url", req)
    return url if isinstance(url, str) else repr(url)


class EntryMaker:
    """Turns requests into store entries under one frontier's rules: its ``split``
    (URL -> canonical URL and queue key), ``fingerprint``, ``priority`` function,
    ``dedup_post`` and default ``revisit_after``. ``url_fingerprint``: given when
    ``fingerprint`` is the default one, whose key of a GET without a body is
    :func:`~crawlq.policies.fingerprint.url_fingerprint` of its canonical URL (asked
    directly, without the request)."""

    def __init__(self, split: Callable[[str], tuple[str, str]],
                 fingerprint: Callable[[Any, str], bytes],
                 url_fingerprint: Callable[[str], bytes] | None,
                 priority: Callable[[Any], int] | None, dedup_post: bool,
                 revisit_after: float | None) -> None:
        self.split = split
        self.fingerprint = fingerprint
        self.url_fingerprint = url_fingerprint
        self.priority = priority
        self.dedup_post = dedup_post
        self.revisit_after = revisit_after

    def make(self, requests: Sequence[Any], start: int, stop: int, now: float,
             rejected: list[Rejection], entries: list[Entry], index: list[int]) -> None:
        """Append the entries of ``requests[start:stop]`` to ``entries`` and their
        positions to ``index``; a request that is not accepted goes to ``rejected``
        with its reason instead."""
        stop = min(stop, len(requests))
        for i in range(start, stop):
            entry = self.entry(i, requests[i], now, rejected)
            if entry is not None:
                entries.append(entry)
                index.append(i)

    def seen_key(self, req: Any, canon: str) -> bytes | None:
        """The seen-set key of request ``req`` whose URL canonicalizes to ``canon``, or
        None: it bypasses dedup (``dont_filter``, a retry, a POST without
        ``dedup_post``)."""
        return self._seen_key(req, canon, req.method, req.body, req.retries,
                              req.dont_filter)

    def _seen_key(self, item: Any, canon: str, method: Any, body: Any, retries: Any,
                  dont_filter: Any) -> bytes | None:
        """:meth:`seen_key` of a request or URL, given the fields it reads (entry() has
        them at hand)."""
        if dont_filter or retries or (not self.dedup_post and method == "POST"):
            return None
        if self.url_fingerprint is not None and method == "GET" and not body:
            return self.url_fingerprint(canon)
        return self.fingerprint(_request(item), canon)

    def entry(self, i: int, item: Any, now: float, rejected: list[Rejection]) -> Entry | None:
        """The entry of request (or URL) ``item``, at position ``i`` of its batch; or
        None, with the reason appended to ``rejected``."""
        try:
            if isinstance(item, str):
                # A URL: a Request's defaults, without building one (most never need it)
                url: Any = item
                queue: Any = None
                method: Any = "GET"
                body: Any = b""
                retries: Any = 0
                dont_filter: Any = False
                prio: Any = 0
                nb: Any = None
                ref: Any = None
                depth: Any = 0
                revisit: Any = None
                meta: Any = NO_META
            else:
                url = item.url
                queue = item.queue
                method = item.method
                body = item.body
                retries = item.retries
                dont_filter = item.dont_filter
                prio = item.priority
                nb = item.not_before
                ref = item.referrer
                depth = item.depth
                revisit = item.revisit_after
                meta = item.meta
            canon, key = self.split(url)
            if queue is not None:
                if not isinstance(queue, str) or not queue or len(queue) > 1024:
                    raise ConfigError("queue must be a non-empty str of at most 1024 "
                                      f"characters, not {queue!r}")
                key = queue
            fp = self._seen_key(item, canon, method, body, retries, dont_filter)
            if self.priority is not None:
                prio = self.priority(_request(item))
            if prio.__class__ is not int or not -PRIORITY_MAX <= prio <= PRIORITY_MAX:
                raise InvalidURL("bad-priority", url,
                                 f"priority must be an int within ±{PRIORITY_MAX}: {prio!r}")
            if (retries.__class__ is not int or not 0 <= retries <= RETRIES_MAX
                    or (nb is not None and ((nb.__class__ is not float and nb.__class__ is not int)
                                            or not math.isfinite(nb)))
                    or body.__class__ is not bytes
                    or (ref is not None and ref.__class__ is not str)
                    or depth.__class__ is not int or not 0 <= depth <= DEPTH_MAX
                    or method.__class__ is not str or not method
                    or dont_filter.__class__ is not bool
                    or (meta.__class__ is not dict and meta is not NO_META
                        and not isinstance(meta, Mapping))
                    or (revisit is not None and ((revisit.__class__ is not float
                                                  and revisit.__class__ is not int)
                                                 or not 0 < revisit < _INF))):
                raise ConfigError(request_problem(item) or "invalid request")
            payload = encode(url, key, depth, ref, method, body,
                             dict(meta) if meta else None, dont_filter, revisit)
            if revisit is None:
                revisit = self.revisit_after
            return (fp, key, prio, payload, nb,
                    None if revisit is None else now + revisit, retries)
        except InvalidURL as exc:
            rejected.append(Rejection(i, url_of(item), exc.reason, exc.detail))
        except (ConfigError, PayloadError, AttributeError, TypeError) as exc:
            rejected.append(Rejection(i, url_of(item), "invalid-request", str(exc)))
        except Exception as exc:  # a user's key function failed on this URL
            rejected.append(Rejection(i, url_of(item), "custom", repr(exc)))
        return None


def _request(item: Any) -> Any:
    """The Request of a request or URL."""
    return Request(item) if isinstance(item, str) else item


def leases(rows: list[Any], now: float) -> list[Lease]:
    """The leases of a store's ``lease()`` rows (token, queue, priority, retries,
    payload, expires: tuples or lists), leased at ``now``."""
    out: list[Lease] = []
    for row in rows:
        token, queue, prio, retries, payload, expires = row
        url, method, body, depth, ref, meta, dont_filter, revisit = decode(payload, queue)
        req = Request(url, method, body, prio, depth, ref, NO_META if meta is None else meta,
                      dont_filter, None, retries, revisit, None)
        out.append(Lease(token, req, queue, now, expires))
    return out
