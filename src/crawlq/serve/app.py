"""``crawlq serve``'s JSON API over HTTP: the frontier for callers in other processes and
languages, with Prometheus metrics at ``/metrics``.

Every call is one frontier call (one store step), run in a worker thread so that a slow
store call never holds up the others. Errors are JSON ``{"error": ...}`` with a status
that says whose fault it was: 400 a bad request (nothing changed), 401 a missing or
wrong token, 404 an unknown path, 413 a batch over the limits, 503 the store failed
(the call changed nothing; the server stays up).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from ..errors import ConfigError, CrawlqError, StoreError
from ..frontier import Frontier
from ..handles import lease_of, lease_out, record
from ..models import Outcome, Request
from ..stores.dumpfmt import request_from_json
from . import LOCAL_VALUES
from .metrics import Metrics

MAX_BATCH = 10_000
"""Most requests one add, leases one next, or handles one ack may carry."""
MAX_BODY = 64 * 1024 * 1024
"""Largest request body accepted, in bytes."""

ACTIVE = LOCAL_VALUES[0] + "active"
"""The store value of the active flag, ``crawlq:serve:active`` (b"0": paused; absent:
active): kept in the store, so it holds across restarts and for every server on the
store; a server's own, not the crawl's (``LOCAL_VALUES``: not dumped, not loaded)."""
_STATIC = Path(__file__).with_name("static")


def is_active(frontier: Frontier) -> bool:
    """The active flag: False while paused (``next`` and GetURLs hand out nothing)."""
    return frontier.get_value(ACTIVE) != b"0"


def set_active(frontier: Frontier, active: bool) -> None:
    """Pause (False) or resume (True) every server on ``frontier``'s store."""
    frontier.put_value(ACTIVE, b"1" if active else b"0")

_OUTCOMES = {"done": Outcome.DONE, "failed": Outcome.FAILED, "retry": Outcome.RETRY,
             "dead": Outcome.DEAD}
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class HTTPProblem(Exception):
    """A request the API refuses, with its status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def make_app(frontier: Frontier, token: str | None = None,
             metrics: Metrics | None = None) -> web.Application:
    """The API on ``frontier``; with ``token``, every call needs ``Authorization:
    Bearer <token>``. ``metrics``: the figures to serve (shared with the gRPC API)."""
    metrics = metrics or Metrics(frontier)
    api = _Api(frontier, metrics)

    @web.middleware
    async def guard(request: web.Request, handler: _Handler) -> web.StreamResponse:
        started = time.perf_counter()
        name = request.match_info.route.name or "unknown"
        try:
            if token is not None and name != "dashboard":  # (the page holds no data)
                given = request.headers.get("Authorization", "")
                if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                    raise HTTPProblem(401, "a bearer token is needed (Authorization: "
                                           "Bearer <token>)")
            return await handler(request)
        except HTTPProblem as exc:
            return _error(exc.status, str(exc))
        except web.HTTPException as exc:  # aiohttp's own (404, 405, 413...)
            return _error(exc.status, exc.reason)
        except StoreError as exc:
            metrics.store_errors.inc()
            return _error(503, f"the store failed: {exc}")
        except CrawlqError as exc:
            return _error(400, str(exc))
        finally:
            metrics.latency.labels(name).observe(time.perf_counter() - started)

    app = web.Application(middlewares=[guard], client_max_size=MAX_BODY)
    app.router.add_post("/v1/add", api.add, name="add")
    app.router.add_post("/v1/next", api.next, name="next")
    app.router.add_post("/v1/ack", api.ack, name="ack")
    app.router.add_get("/v1/stats", api.stats, name="stats")
    app.router.add_get("/v1/queues", api.queues, name="queues")
    app.router.add_get("/v1/dead", api.dead, name="dead")
    app.router.add_post("/v1/requeue-dead", api.requeue_dead, name="requeue-dead")
    app.router.add_get("/metrics", api.metrics, name="metrics")
    app.router.add_get("/v1/active", api.get_active, name="active")
    app.router.add_post("/v1/active", api.set_active, name="set-active")
    app.router.add_get("/", api.dashboard, name="dashboard")
    return app


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read() or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise HTTPProblem(400, f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise HTTPProblem(400, f"the body is a JSON object, not {type(body).__name__}")
    return body


def _count(value: object, name: str, default: int, most: int = MAX_BATCH) -> int:
    if value is None:
        return default
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise HTTPProblem(400, f"{name} must be a whole number >= 0, not {value!r}")
    if value > most:
        raise HTTPProblem(413, f"{name} may be at most {most}, not {value}")
    return value


def _items(body: dict[str, Any], name: str) -> list[Any]:
    items = body.get(name)
    if not isinstance(items, list):
        raise HTTPProblem(400, f"{name!r} must be a JSON list")
    if len(items) > MAX_BATCH:
        raise HTTPProblem(413, f"at most {MAX_BATCH} {name} per call, not {len(items)}")
    return items


class _Api:
    """The handlers: each parses and checks its input, then makes one frontier call in a
    worker thread."""

    def __init__(self, frontier: Frontier, metrics: Metrics) -> None:
        self.f = frontier
        self.figures = metrics

    async def add(self, request: web.Request) -> web.Response:
        items = _items(await _body(request), "requests")
        reqs: list[Request | str] = []
        for i, item in enumerate(items):
            if isinstance(item, dict):
                try:
                    reqs.append(request_from_json(item))
                except ConfigError as exc:
                    raise HTTPProblem(400, f"requests[{i}]: {exc}") from None
            elif isinstance(item, str):
                reqs.append(item)
            else:
                raise HTTPProblem(400, f"requests[{i}] must be a URL or a request object")
        r = await asyncio.to_thread(self.f.add, reqs)
        for rej in r.rejected:
            self.figures.rejections.labels(rej.reason).inc()
        return web.json_response({
            "added": r.added, "duplicates": r.duplicates,
            "rejected": [{"index": x.index, "url": x.url, "reason": x.reason,
                          "detail": x.detail} for x in r.rejected]})

    async def next(self, request: web.Request) -> web.Response:
        n = _count((await _body(request)).get("n"), "n", 1)
        if not await asyncio.to_thread(is_active, self.f):
            return web.json_response({"leases": [], "paused": True})
        leases = await asyncio.to_thread(lease_out, self.f, n)
        return web.json_response({"leases": [record(le) for le in leases]})

    async def get_active(self, request: web.Request) -> web.Response:
        return web.json_response({"active": await asyncio.to_thread(is_active, self.f)})

    async def set_active(self, request: web.Request) -> web.Response:
        active = (await _body(request)).get("active")
        if not isinstance(active, bool):
            raise HTTPProblem(400, "active must be true or false")
        await asyncio.to_thread(set_active, self.f, active)
        return web.json_response({"active": active})

    async def dashboard(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(_STATIC / "dashboard.html")

    async def ack(self, request: web.Request) -> web.Response:
        body = await _body(request)
        leases = [lease_of(h) for h in _items(body, "leases")]
        outcome = _OUTCOMES.get(body.get("outcome", "done"))
        if outcome is None:
            raise HTTPProblem(400, f"outcome must be one of {sorted(_OUTCOMES)}, not "
                                   f"{body.get('outcome')!r}")
        error = body.get("error")
        if error is not None and not isinstance(error, str):
            raise HTTPProblem(400, "error must be a string")
        after, duration = body.get("after", 0.0), body.get("duration")
        held = await asyncio.to_thread(self.f.done, leases, outcome, error=error,
                                       duration=duration, after=after)
        return web.json_response({"held": held, "late": len(leases) - held})

    async def stats(self, request: web.Request) -> web.Response:
        per_queue = _count(request.query.get("queues"), "queues", 0, 1000)
        s = await asyncio.to_thread(self.f.stats, per_queue)
        return web.json_response(s.as_dict())

    async def queues(self, request: web.Request) -> web.Response:
        n = _count(request.query.get("n"), "n", 20, 1000)
        qs = await asyncio.to_thread(self.f.queues, n)
        return web.json_response({"queues": [q.as_dict() for q in qs]})

    async def dead(self, request: web.Request) -> web.Response:
        n = _count(request.query.get("n"), "n", 20, MAX_BATCH)
        ds = await asyncio.to_thread(self.f.dead, n)
        return web.json_response({"dead": [
            {"id": d.id, "queue": d.queue, "error": d.error, "died_at": d.died_at,
             "url": d.request.url} for d in ds]})

    async def requeue_dead(self, request: web.Request) -> web.Response:
        n = await asyncio.to_thread(self.f.requeue_dead)
        return web.json_response({"requeued": n})

    async def metrics(self, request: web.Request) -> web.Response:
        text, content_type = await asyncio.to_thread(self.figures.render)
        return web.Response(body=text, headers={"Content-Type": content_type})
