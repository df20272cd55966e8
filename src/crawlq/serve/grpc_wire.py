"""The wire side of ``crawlq serve``'s URLFrontier API: the proto, compiled when the
server starts (grpcio-tools' ``grpc.protos_and_services``: ``urlfrontier.proto`` beside
this module is the one definition of the wire format), the service and reflection added
to a server (:func:`add_service`: a request that cannot be parsed is INVALID_ARGUMENT,
:func:`add_reflection`), :class:`Refused` (a call refused with a gRPC status) and
:func:`batches` (a client's stream read in batches). The
servicer that stands on them is :class:`crawlq.serve.grpc_server.Service`.
"""

from __future__ import annotations

import asyncio
import sys
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError

from .app import MAX_BATCH

MAX_MESSAGE = 64 * 1024 * 1024
"""Largest message accepted or sent, in bytes."""
LINGER = 0.002
"""Seconds a stream's batch waits for more messages while they keep arriving."""
_T = TypeVar("_T")


def load_proto() -> tuple[Any, Any]:
    """The URLFrontier message classes and service helpers, compiled from the proto."""
    root = str(Path(__file__).resolve().parent.parent.parent)
    sys.path.insert(0, root)
    try:
        return grpc.protos_and_services(  # type: ignore[no-any-return]
            "crawlq/serve/urlfrontier.proto")
    finally:
        sys.path.remove(root)


class Refused(Exception):
    """A call refused with a gRPC status."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class Malformed:
    """A request message that could not be parsed, in its place: the servicer answers
    it INVALID_ARGUMENT (:func:`check`), where a deserializer's error would end the
    call UNKNOWN."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


def check(message: object) -> None:
    """Refused (INVALID_ARGUMENT) for a :class:`Malformed` request message: the one
    test of one (:func:`checked` ends a call with it)."""
    if message.__class__ is Malformed:
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT, message.why)


async def checked(context: Any, message: object) -> None:
    """End the call INVALID_ARGUMENT for a :class:`Malformed` request message (a
    unary call's, before its method runs; a stream's as its method takes it)."""
    try:
        check(message)
    except Refused as exc:
        await context.abort(exc.code, str(exc))


def _parser(cls: Any, method: str) -> Callable[[bytes], Any]:
    """``cls.FromString``, giving a :class:`Malformed` for bytes that are not one."""
    parse = cls.FromString
    name = cls.DESCRIPTOR.full_name

    def parsed(raw: bytes) -> Any:
        try:
            return parse(raw)
        except DecodeError as exc:
            return Malformed(f"{method}: the request is not a {name} message ({exc})")

    return parsed


def add_service(servicer: Any, pb: Any, server: Any) -> None:
    """Serve ``servicer``'s methods as URLFrontier's service on ``server``, as the
    proto's generated helper does, but a request message that cannot be parsed reaches
    the servicer as a :class:`Malformed`: a unary call is answered INVALID_ARGUMENT
    here; a streaming call's method checks its messages itself (:func:`check`,
    :func:`checked`: a stream checked as its batches are taken, no step per message)."""
    service = pb.DESCRIPTOR.services_by_name["URLFrontier"]
    handlers = {}
    for m in service.methods:
        parse = _parser(getattr(pb, m.input_type.name), m.name)
        write = getattr(pb, m.output_type.name).SerializeToString
        method = getattr(servicer, m.name)
        if m.client_streaming:
            handlers[m.name] = grpc.stream_stream_rpc_method_handler(
                method, request_deserializer=parse, response_serializer=write)
        elif m.server_streaming:
            handlers[m.name] = grpc.unary_stream_rpc_method_handler(
                method, request_deserializer=parse, response_serializer=write)
        else:
            handlers[m.name] = grpc.unary_unary_rpc_method_handler(
                _checked(method), request_deserializer=parse, response_serializer=write)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),))


def _checked(method: Callable[[Any, Any], Awaitable[Any]]
             ) -> Callable[[Any, Any], Awaitable[Any]]:
    async def call(request: Any, context: Any) -> Any:
        await checked(context, request)
        return await method(request, context)

    return call


REFLECTION = ("grpc.reflection.v1.ServerReflection",
              "grpc.reflection.v1alpha.ServerReflection")
"""The names of gRPC's reflection service the server answers: v1, which grpcurl and newer
tools ask first, and v1alpha, which older ones ask."""


def add_reflection(services: Sequence[str], server: Any) -> bool:
    """Answer gRPC server reflection on ``server`` for ``services`` (and reflection
    itself), under both names of REFLECTION; False when grpcio-reflection is not
    installed. grpcio-reflection ships v1alpha only: v1 is the same service (the same
    messages, field for field) in another package, so its servicer answers both."""
    try:
        from grpc_reflection.v1alpha import reflection, reflection_pb2
    except ImportError:
        return False
    servicer = reflection.aio.ReflectionServicer((*services, *REFLECTION))
    handlers = {"ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString)}
    server.add_generic_rpc_handlers(tuple(
        grpc.method_handlers_generic_handler(name, handlers) for name in REFLECTION))
    return True



async def batches(items: AsyncIterator[_T], most: int = MAX_BATCH,
                  linger: float = LINGER) -> AsyncIterator[list[_T]]:
    """The items of a client's stream in lists of what has arrived (at most ``most``):
    one store call per list instead of one per message. A client streams its messages
    one by one, faster than a store call's fixed cost but not all at once, so while
    messages keep arriving the list waits ``linger`` seconds for more (again while more
    came): a trickle becomes a batch for one extra ``linger`` of latency."""
    buf: deque[_T] = deque()
    arrived, room = asyncio.Event(), asyncio.Event()
    room.set()
    end: list[BaseException | None] = []  # (set when the stream ended: its error or None)

    async def read() -> None:
        try:
            async for item in items:
                buf.append(item)
                arrived.set()
                if len(buf) >= most:  # (back-pressure: the client waits for the store)
                    room.clear()
                    await room.wait()
            end.append(None)
        except BaseException as exc:  # (the client went away: end the batches with it)
            end.append(exc)
        arrived.set()

    reader = asyncio.ensure_future(read())
    try:
        while True:
            await arrived.wait()
            while not end and len(buf) < most:
                before = len(buf)
                await asyncio.sleep(linger)
                if len(buf) == before:
                    break
            arrived.clear()
            batch = [buf.popleft() for _ in range(min(most, len(buf)))]
            room.set()
            if batch:
                yield batch
            if buf:
                arrived.set()
            elif end:
                if end[0] is not None:
                    raise end[0]
                return
    finally:
        reader.cancel()
