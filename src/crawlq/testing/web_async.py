"""The test web's asyncio engine (:mod:`crawlq.testing.web`, ``engine="asyncio"``)."""

from __future__ import annotations

import asyncio
import ssl
from http import HTTPStatus
from typing import Protocol

from .web_site import SiteSpec


class Routes(Protocol):
    """What the engine asks of the test web (:class:`crawlq.testing.web.TestWeb`): the
    same routing and log as the threaded engine's."""

    spec: SiteSpec

    def delay_of(self, i: int | None, path: str) -> float: ...

    def route(self, i: int | None, path: str) -> tuple[int, list[tuple[str, str]], bytes]: ...

    def record(self, host: str, path: str, status: int, user_agent: str) -> None: ...


class AsyncServer:
    """The test web's asyncio engine: HTTP/1.1 GET and HEAD with keep-alive, enough
    for crawlers, routed by :meth:`TestWeb.route <crawlq.testing.web.TestWeb.route>`
    like the threaded engine."""

    def __init__(self, web: Routes, ssl_ctx: ssl.SSLContext | None) -> None:
        import socket

        self.web = web
        self.ssl_ctx = ssl_ctx
        self.loop = asyncio.new_event_loop()
        # Bound here so that the port is known before the thread starts.
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1024)
        self.port: int = self.sock.getsockname()[1]
        self._server: asyncio.AbstractServer | None = None

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self._server = self.loop.run_until_complete(
            self.loop.create_server(lambda: Conn(self.web, self.loop), sock=self.sock,
                                    ssl=self.ssl_ctx))
        self.loop.run_forever()
        self._server.close()
        self.loop.run_until_complete(self._server.wait_closed())
        self.loop.close()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


class Conn(asyncio.Protocol):
    """One client connection: requests are answered in order, one at a time."""

    MAX_HEAD = 65536

    def __init__(self, web: Routes, loop: asyncio.AbstractEventLoop) -> None:
        self.web, self.loop = web, loop
        self.buf = b""
        self.busy = False  # an answer is being delayed (slow page): later ones wait
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._serve()

    def _serve(self) -> None:
        while not self.busy and self.transport is not None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > self.MAX_HEAD:
                    self._fail(431)
                return
            lines = self.buf[:end].decode("latin-1").split("\r\n")
            fields = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if sep:
                    fields[name.strip().lower()] = value.strip()
            body_len = int(fields.get("content-length", "0") or 0)
            if len(self.buf) < end + 4 + body_len:
                return  # a request body still arriving (crawlers send none; skipped)
            self.buf = self.buf[end + 4 + body_len:]
            try:
                method, path, version = lines[0].split(" ", 2)
            except ValueError:
                self._fail(400)
                return
            keep = version == "HTTP/1.1" and fields.get("connection", "").lower() != "close"
            host = fields.get("host", "").split(":")[0].lower()
            agent = fields.get("user-agent", "")
            i = self.web.spec.host_index(host)
            delay = self.web.delay_of(i, path)
            if delay:
                self.busy = True
                self.loop.call_later(delay, self._answer, method, path, host, i, agent, keep)
                return
            self._answer(method, path, host, i, agent, keep)

    def _answer(self, method: str, path: str, host: str, i: int | None, agent: str,
                keep: bool) -> None:
        self.busy = False
        if self.transport is None:
            return
        status, headers, body = self.web.route(i, path)
        self.web.record(host, path, status, agent)
        head = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
        head += [f"{k}: {v}" for k, v in headers]
        head.append(f"Content-Length: {len(body)}")
        if not keep:
            head.append("Connection: close")
        out = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        self.transport.write(out if method == "HEAD" else out + body)
        if not keep:
            self.transport.close()
            self.transport = None
            return
        if self.buf:
            self._serve()

    def _fail(self, status: int) -> None:
        if self.transport is not None:
            self.transport.write(f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
                                 "Content-Length: 0\r\nConnection: close\r\n\r\n".encode())
            self.transport.close()
            self.transport = None
