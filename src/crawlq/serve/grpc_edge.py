"""``crawlq serve``'s gRPC server on a compiled transport: the part of ``grpc.aio.Server``
that :mod:`.grpc_server` uses (generic handlers, one port, start, stop), serving the same
grpcio method handlers, over :mod:`crawlq.serve._edge` (gRPC's C++ library).

Why: grpcio's own server spends ~25 µs of Python on each message of a stream and ~80 on
each pair a bidirectional stream reads and answers (a completion-queue round trip and
asyncio futures per message), and URLFrontier's GetURLs + ack is three messages a URL:
about 110 µs of a URL's ~165 went to the transport. Here gRPC's C++ threads read and write
the messages; this module wakes on one file descriptor, takes every message that arrived
(any calls') in one call, feeds each call's handler its requests, and hands its answers
back as bytes. The handlers are the ones grpcio would run (``grpc.*_rpc_method_handler``),
so the service is defined once and runs on either server.

What a handler sees of its context: ``abort()`` (as grpcio's, raising
``grpc.aio.AbortError``), ``invocation_metadata()``, ``peer()``, ``cancelled()``,
``done()``. A handler that raises anything else ends its call UNKNOWN, as grpcio's does.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any, NoReturn

import grpc
from grpc import aio

from . import _edge

_LOG = logging.getLogger(__name__)
_CONSUMED_EVERY = 512
"""A stream's messages taken by its handler are reported to the transport (which reads at
most ``_edge.WINDOW`` messages or 8 MiB ahead of them) this many at a time, and whenever
none wait."""
_DRAIN_EVERY = 256
"""A handler that has written this many messages since the transport last said all were
out waits until they are (a client reading slower than the handler answers holds the
handler, not the server's memory)."""


class _Details:
    """What a generic handler is asked with (grpc.HandlerCallDetails)."""

    __slots__ = ("invocation_metadata", "method")

    def __init__(self, method: str, metadata: tuple[tuple[str, Any], ...]) -> None:
        self.method = method
        self.invocation_metadata = metadata


class _Context:
    """The servicer context of one call (the part of grpc.aio.ServicerContext used)."""

    __slots__ = ("_call",)

    def __init__(self, call: _Call) -> None:
        self._call = call

    async def abort(self, code: grpc.StatusCode, details: str = "",
                    trailing_metadata: Sequence[tuple[str, Any]] = ()) -> NoReturn:
        """End the call with ``code`` and ``details``: raises, as grpcio's abort."""
        self._call.status = (code, details)
        raise aio.AbortError()

    def invocation_metadata(self) -> tuple[tuple[str, Any], ...]:
        """The client's metadata, as (key, value) pairs."""
        return self._call.metadata

    def peer(self) -> str:
        """The client's address, as gRPC names it (e.g. ``ipv4:127.0.0.1:5000``)."""
        return self._call.peer

    def cancelled(self) -> bool:
        """Whether the client left (or the deadline passed) before the call ended."""
        return self._call.cancelled

    def done(self) -> bool:
        """Whether the call has ended."""
        return self._call.ended


class _Call:
    """One call's state on the Python side: its requests as they arrive, its status."""

    __slots__ = (
        "cancelled",
        "drained",
        "edge",
        "ended",
        "half_closed",
        "id",
        "metadata",
        "peer",
        "requests",
        "status",
        "taken",
        "taken_bytes",
        "task",
        "unsent",
        "waiter",
    )

    def __init__(self, id: int, edge: Any, metadata: tuple[tuple[str, Any], ...],
                 peer: str) -> None:
        self.id = id
        self.edge = edge
        self.metadata = metadata
        self.peer = peer
        self.requests: deque[bytes] = deque()
        self.half_closed = False
        self.waiter: asyncio.Future[None] | None = None
        self.drained: asyncio.Future[None] | None = None
        self.unsent = 0
        self.taken = 0
        self.taken_bytes = 0
        self.status: tuple[grpc.StatusCode, str] | None = None
        self.cancelled = False
        self.ended = False
        self.task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def next_request(self) -> bytes | None:
        """The next message of the client's stream; None once it ended."""
        while not self.requests:
            if self.half_closed:
                return None
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        raw = self.requests.popleft()
        self.taken += 1
        self.taken_bytes += len(raw)
        if self.taken >= _CONSUMED_EVERY or not self.requests:
            self.edge.read_more(self.id, self.taken, self.taken_bytes)
            self.taken = self.taken_bytes = 0
        return raw

    async def stream(self, parse: Any) -> AsyncIterator[Any]:
        while (raw := await self.next_request()) is not None:
            yield parse(raw) if parse else raw

    async def write(self, message: bytes) -> None:
        self.unsent += 1
        if self.unsent < _DRAIN_EVERY:
            self.edge.write(self.id, [message])
            return
        self.edge.write(self.id, [message], True)
        self.unsent = 0
        if not self.ended:
            self.drained = asyncio.get_running_loop().create_future()
            await self.drained

    def end(self) -> None:
        """The transport is done with the call: nothing waits on it any more."""
        self.ended = True
        self.half_closed = True
        self.wake()
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)


class EdgeServer:
    """A gRPC server on the compiled transport, with grpc.aio.Server's methods that
    :func:`crawlq.serve.grpc_server.start` uses."""

    def __init__(self, max_message: int) -> None:
        self._edge = _edge.Edge()
        self._max_message = max_message
        self._handlers: list[Any] = []
        self._calls: dict[int, _Call] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._stopping = False

    def add_generic_rpc_handlers(self, handlers: Sequence[Any]) -> None:
        """Serve calls with these grpc.GenericRpcHandler's, the first that knows a call's
        method answering it."""
        self._handlers.extend(handlers)

    def add_insecure_port(self, address: str) -> int:
        """Listen on ``address`` (``host:port``; port 0: a free one): the port bound.
        Calls are taken from the moment it returns, served once :meth:`start` ran."""
        return self._listen(address, None)

    def add_secure_port_pem(self, address: str, key: bytes, chain: bytes) -> int:
        """As :meth:`add_insecure_port`, over TLS with this private key and certificate
        chain (PEM)."""
        return self._listen(address, (key, chain))

    def _listen(self, address: str, pem: tuple[bytes, bytes] | None) -> int:
        key, chain = pem if pem else (None, None)
        port: int = self._edge.start(address, self._max_message,
                                     key.decode() if key else None,
                                     chain.decode() if chain else None)
        return port

    async def start(self) -> None:
        """Serve the calls (those that came since the port was bound first)."""
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        self._loop.add_reader(self._edge.fileno(), self._pump)
        self._pump()

    async def stop(self, grace: float | None) -> None:
        """Stop taking calls; those under way have ``grace`` seconds to end, then are
        cancelled."""
        if self._loop is None or self._stopped is None:
            return
        if self._stopping:  # (stopped, or stopping: wait for that)
            await self._stopped.wait()
            return
        self._stopping = True
        # (the loop goes on meanwhile: the calls under way end, their answers reach
        # the transport, until the grace is over)
        await asyncio.to_thread(self._edge.shutdown, float(grace or 0.0))
        self._pump()
        self._loop.remove_reader(self._edge.fileno())
        self._stopped.set()

    async def wait_for_termination(self) -> None:
        """Return once the server has stopped."""
        assert self._stopped is not None
        await self._stopped.wait()

    # -- the events -------------------------------------------------------------------

    def _pump(self) -> None:
        """Take the events that arrived (the transport's eventfd is readable)."""
        for call_id, kind, payload in self._edge.events():
            try:
                self._event(call_id, kind, payload)
            except Exception:  # (a fault here must not stop the other calls' events)
                _LOG.exception("gRPC: event %s of call %s", kind, call_id)

    def _event(self, call_id: int, kind: int, payload: Any) -> None:
        if kind == _edge.START:
            self._start(call_id, *payload)
            return
        call = self._calls.get(call_id)
        if call is None:  # (not known: its start failed, logged)
            return
        if kind == _edge.MESSAGE:
            call.requests.append(payload)
            call.wake()
        elif kind == _edge.DRAINED:
            if call.drained is not None and not call.drained.done():
                call.drained.set_result(None)
        elif kind == _edge.HALF_CLOSE:
            call.half_closed = True
            call.wake()
        elif kind == _edge.CANCEL:
            call.cancelled = True
            if call.task is not None:
                call.task.cancel()
            else:
                self._finish(call)
        elif kind == _edge.DONE:
            del self._calls[call_id]
            call.end()
            if call.task is not None and not call.task.done():
                call.task.cancel()

    def _start(self, call_id: int, method: str, metadata: tuple[tuple[str, Any], ...],
               peer: str) -> None:
        call = self._calls[call_id] = _Call(call_id, self._edge, metadata, peer)
        details = _Details(method, metadata)
        for generic in self._handlers:
            handler = generic.service(details)
            if handler is not None:
                break
        else:
            call.status = (grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
            self._finish(call)
            return
        call.task = asyncio.ensure_future(self._serve(call, handler))

    def _finish(self, call: _Call) -> None:
        code, details = call.status or (
            (grpc.StatusCode.CANCELLED, "the client left") if call.cancelled
            else (grpc.StatusCode.OK, ""))
        if not call.ended:
            self._edge.finish(call.id, code.value[0], details)

    async def _serve(self, call: _Call, handler: Any) -> None:
        """Run one call's handler: its request (or stream) in, its answers out."""
        context = _Context(call)
        parse, serialize = handler.request_deserializer, handler.response_serializer
        try:
            if handler.request_streaming:
                request: Any = call.stream(parse)
            else:
                raw = await call.next_request()
                if raw is None:
                    call.status = (grpc.StatusCode.INTERNAL, "no request message")
                    return
                request = parse(raw) if parse else raw
            if handler.response_streaming:
                method = handler.stream_stream if handler.request_streaming \
                    else handler.unary_stream
                async for answer in method(request, context):
                    await call.write(serialize(answer) if serialize else answer)
            else:
                method = handler.stream_unary if handler.request_streaming \
                    else handler.unary_unary
                answer = await method(request, context)
                await call.write(serialize(answer) if serialize else answer)
        except aio.AbortError:
            pass  # (the status is set)
        except asyncio.CancelledError:
            if not call.cancelled and not call.ended:
                call.status = (grpc.StatusCode.UNAVAILABLE, "the server is stopping")
                raise  # (the loop itself ends)
        except Exception as exc:  # (as grpcio: the handler's fault ends its call UNKNOWN)
            _LOG.exception("gRPC call failed")
            call.status = (grpc.StatusCode.UNKNOWN, f"Unexpected {type(exc)}: {exc}")
        finally:
            self._finish(call)
