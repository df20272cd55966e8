"""The JSON Lines format of ``crawlq dump`` / ``crawlq load``: one record per line.

Records (``type`` field): ``dump`` (first: the dump's id, so that loading it twice can
be refused), ``counters``, ``queue`` (key, accepted, ready_at, settings, since), ``entry`` (a
queued, scheduled or leased request; leases are dumped as queued), ``dead`` (a buried
request and its error), ``seen`` (a fingerprint, hex, with its revisit time),
``bloom`` (the filter's bits, base64), ``tallies`` (named counts, added up on load) and
``value`` (a named value, base64: those with
no expiry; one with an expiry belongs to the store's leases and times). Requests are
plain JSON with the body base64-encoded, so a dump can be read and edited by hand; in
``meta``, bytes are ``{"$bytes": base64}`` and a mapping whose keys are not all strings
is ``{"$map": [[key, value], ...]}``.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, Protocol

from ..errors import ConfigError
from ..models import Request, request_problem
from .base import DeadEntry
from .policy import typed_settings


def request_to_json(req: Request) -> dict[str, Any]:
    """A JSON-friendly dict of a request, defaults left out."""
    d: dict[str, Any] = {"url": req.url}
    if req.method != "GET":
        d["method"] = req.method
    if req.body:
        d["body_b64"] = base64.b64encode(req.body).decode("ascii")
    if req.priority:
        d["priority"] = req.priority
    if req.depth:
        d["depth"] = req.depth
    if req.referrer is not None:
        d["referrer"] = req.referrer
    if req.meta:
        d["meta"] = to_json(dict(req.meta))
    if req.dont_filter:
        d["dont_filter"] = True
    if req.not_before is not None:
        d["not_before"] = req.not_before
    if req.retries:
        d["retries"] = req.retries
    if req.revisit_after is not None:
        d["revisit_after"] = req.revisit_after
    return d


def request_from_json(d: Mapping[str, Any]) -> Request:
    """Inverse of :func:`request_to_json`; raises ConfigError on a malformed record."""
    try:
        return Request(
            url=str(d["url"]), method=str(d.get("method", "GET")),
            body=base64.b64decode(d["body_b64"]) if d.get("body_b64") else b"",
            priority=int(d.get("priority", 0)), depth=int(d.get("depth", 0)),
            referrer=d.get("referrer"), meta=from_json(dict(d.get("meta") or {})),
            dont_filter=bool(d.get("dont_filter", False)),
            not_before=d.get("not_before"), retries=int(d.get("retries", 0)),
            revisit_after=d.get("revisit_after"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"malformed request record {dict(d)!r}: {exc}") from exc


def to_json(value: Any) -> Any:
    """``value`` (what msgpack keeps: bytes, mappings with any keys...) as JSON values;
    :func:`from_json` undoes it."""
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, Mapping):
        if all(isinstance(k, str) for k in value) and not (
                len(value) == 1 and next(iter(value)) in _TAGS):
            return {k: to_json(v) for k, v in value.items()}
        return {"$map": [[to_json(k), to_json(v)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def from_json(value: Any) -> Any:
    """The inverse of :func:`to_json`."""
    if isinstance(value, dict):
        if len(value) == 1:
            tag, inner = next(iter(value.items()))
            if tag == "$bytes":
                return base64.b64decode(inner)
            if tag == "$map":
                return {_hashable(from_json(k)): from_json(v) for k, v in inner}
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v) for v in value]
    return value


_TAGS = ("$bytes", "$map")


def _hashable(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key


def header(dump_id: str, created: float, canonical_form: str | None) -> dict[str, Any]:
    """The first record of a dump: its id, when it was made and the canonical form of
    the crawl's URLs (None: a canonicalize function of the user's)."""
    return {"type": "dump", "id": dump_id, "created": created,
            "canonical_form": canonical_form}


def value(name: str, data: bytes, expires: float | None) -> dict[str, Any]:
    """A named value record."""
    return {"type": "value", "name": name, "value_b64": base64.b64encode(data).decode("ascii"),
            "expires": expires}


def value_data(rec: Mapping[str, Any]) -> bytes:
    """The data of a named value record (ConfigError for a broken one)."""
    try:
        return base64.b64decode(rec["value_b64"], validate=True)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"a broken value record: {exc}") from None


def _payload_json(payload: bytes, priority: int, retries: int, key: str) -> dict[str, Any]:
    return request_to_json(Request.from_payload(payload, priority, retries, None, key))


def counters(values: Mapping[str, int], rejected: Mapping[str, int]) -> dict[str, Any]:
    """The counters record."""
    return {"type": "counters", "counters": dict(values), "rejected": dict(rejected)}


def queue(key: str, accepted: int, ready_at: float, settings: Mapping[str, float],
          since: float | None, leased_out: bool = False) -> dict[str, Any]:
    """A queue record: its counters, rest, overrides, and since when it has waited in
    the ready line (its place there, if it is ready; None: not known, a place as any
    queue whose rest ended then). A queue waits from its rest's end at the earliest,
    whether or not a call noticed that end before the dump (the stores notice at
    different calls: a dump must not depend on it). ``leased_out``: it was out of the
    line for its leases (busy, or nothing else queued), which are dumped as queued
    entries, as if they had expired at the load: it waits from the load (None), not
    from before its leases, whether or not they had run out unnoticed."""
    if leased_out:
        since = None
    elif since is not None and ready_at > since:
        since = ready_at
    return {"type": "queue", "key": key, "accepted": accepted, "ready_at": ready_at,
            "settings": typed_settings(settings), "since": since}


def entry(key: str, priority: int, retries: int, payload: bytes,
          not_before: float | None) -> dict[str, Any]:
    """An entry record."""
    req = _payload_json(payload, priority, retries, key)
    if not_before is not None:
        req["not_before"] = not_before
    return {"type": "entry", "queue": key, "request": req}


def dead(d: DeadEntry) -> dict[str, Any]:
    """A dead-request record."""
    return {"type": "dead", "queue": d.queue, "error": d.error, "died_at": d.died_at,
            "request": _payload_json(d.payload, d.priority, d.retries, d.queue)}


def seen(fp: bytes, revisit_at: float | None) -> dict[str, Any]:
    """A seen-set record."""
    rec: dict[str, Any] = {"type": "seen", "fp": fp.hex()}
    if revisit_at is not None:
        rec["revisit_at"] = revisit_at
    return rec


def tallies(counts: Mapping[str, int]) -> dict[str, Any]:
    """The tallies record (:meth:`~crawlq.stores.base.Store.tally`)."""
    return {"type": "tallies", "tallies": dict(counts)}


def bloom(bits: bytes | bytearray) -> dict[str, Any]:
    """The Bloom filter record."""
    return {"type": "bloom", "bits_b64": base64.b64encode(bytes(bits)).decode("ascii")}


class Loader(Protocol):
    """What a store gives :func:`apply` to write loaded records with: each store's own
    loader, in the store's module, which writes through the parts its store hands it
    and the store's public calls (memory, SQLite) or gathers the writes its store then
    sends (Redis), using none of the store's private names (tests/test_layout.py)."""

    def load_seen(self, fp: bytes, revisit_at: float | None) -> None:
        """A fingerprint of the seen-set, due again at ``revisit_at``."""

    def load_bloom(self, bits: bytes) -> None:
        """A Bloom filter's bits (OR-ed into the store's filter of the same shape)."""

    def load_entry(self, key: str, priority: int, retries: int, payload: bytes,
                   not_before: float | None) -> None:
        """A queued (or scheduled, with ``not_before``) entry of queue ``key``."""

    def load_queue(self, key: str, accepted: int, ready_at: float,
                   settings: Mapping[str, float], since: float | None) -> None:
        """A queue's counters, rest and setting overrides, and since when it has waited
        if it is ready once the load is done (None: not known, an older dump)."""

    def load_dead(self, queue: str, priority: int, retries: int, payload: bytes,
                  error: str, died_at: float) -> None:
        """A dead entry."""

    def load_counters(self, counters: Mapping[str, int],
                      rejected: Mapping[str, int]) -> None:
        """Counters, added to the store's."""

    def load_value(self, name: str, data: bytes, expires: float | None) -> None:
        """A named value."""

    def load_tallies(self, counts: Mapping[str, int]) -> None:
        """Tallies, added to the store's."""


def _settings(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A queue record's overrides, each in its type: a count written as a whole float
    (``2.0``: the memory store's dumps did, before issue 58) is the int it is; anything
    else stays as written, for the store's check to judge."""
    whole = {k: v for k, v in raw.items() if isinstance(v, float) and v.is_integer()}
    return {**raw, **typed_settings(whole)}


def apply(store: Loader, rec: Mapping[str, Any]) -> int:
    """Apply one dump record through ``store`` (a store's loader); returns 1, or
    raises ConfigError."""
    kind = rec.get("type")
    try:
        if kind == "seen":
            store.load_seen(bytes.fromhex(rec["fp"]), rec.get("revisit_at"))
        elif kind == "entry" or kind == "dead":
            req = request_from_json(rec["request"])
            problem = request_problem(req)  # (what add() refuses, load refuses too)
            if problem is not None:
                raise ConfigError(f"a {kind} record of {req.url!r}: {problem}")
            payload = req.to_payload(str(rec["queue"]))
            if kind == "entry":
                store.load_entry(str(rec["queue"]), req.priority, req.retries, payload,
                                  req.not_before)
            else:
                store.load_dead(str(rec["queue"]), req.priority, req.retries, payload,
                                 str(rec.get("error", "")), float(rec.get("died_at", 0.0)))
        elif kind == "queue":
            since = rec.get("since")
            store.load_queue(str(rec["key"]), int(rec.get("accepted", 0)),
                             float(rec.get("ready_at", 0.0)),
                             _settings(rec.get("settings") or {}),
                             None if since is None else float(since))
        elif kind == "counters":
            store.load_counters(rec.get("counters") or {}, rec.get("rejected") or {})
        elif kind == "bloom":
            store.load_bloom(base64.b64decode(rec["bits_b64"]))
        elif kind == "value":
            expires = rec.get("expires")
            store.load_value(str(rec["name"]), value_data(rec),
                              None if expires is None else float(expires))
        elif kind == "tallies":
            counts = rec.get("tallies") or {}
            store.load_tallies({str(k): int(v) for k, v in counts.items()})
        elif kind == "dump":
            return 0  # (the header: Frontier.load reads it)
        else:
            raise ConfigError(f"unknown record type {kind!r}")
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"malformed {kind} record: {exc}") from exc
    return 1
