"""A raw HTTP/1.1 server for wire-level tests: real sockets on 127.0.0.1, every byte of
every answer written by the test (any status line, any framing, unsolicited bytes after
an answer), which a conforming server library would not let a test send.

A handler takes ``(host, path)`` and returns the parts of its answer: ``(delay,
bytes)`` pairs written in order after sleeping ``delay`` seconds each; a part of
``None`` closes the connection. Requests on one connection are read one after another
(keep-alive). Every request is logged as ``(time, host, path, connection number)``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Part = tuple[float, bytes | None]
RawHandler = Callable[[str, str], list[Part]]


def response(status: str, body: bytes, *headers: tuple[str, str],
             length: bool = True) -> bytes:
    """The bytes of one response: ``status`` as the status line's code and reason
    (``"200 OK"``, ``"000 Zero"``), a Content-Length unless ``length`` is False."""
    head = [f"HTTP/1.1 {status}", "Content-Type: text/html; charset=utf-8"]
    head += [f"{k}: {v}" for k, v in headers]
    if length:
        head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


class RawWeb:
    """The server; use :func:`serve_raw`."""

    def __init__(self, handler: RawHandler) -> None:
        self.handler = handler
        self.log: list[tuple[float, str, str, int]] = []
        self.port = 0
        self._connections = 0
        self._lock = threading.Lock()

    def url(self, host: str, path: str = "/") -> str:
        """``http://host:port/path`` on this server."""
        return f"http://{host}:{self.port}{path}"

    def hits(self) -> list[tuple[float, str, str, int]]:
        """The requests read so far, in order."""
        with self._lock:
            return list(self.log)

    async def _serve(self, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        self._connections += 1
        number = self._connections
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                host = next((v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])
                             if k.lower() == "host"), "").rpartition(":")[0]
                with self._lock:
                    self.log.append((time.time(), host, path, number))
                for delay, data in self.handler(host, path):
                    if delay:
                        await asyncio.sleep(delay)
                    if data is None:
                        return
                    writer.write(data)
                    await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            writer.close()


@contextmanager
def serve_raw(handler: RawHandler) -> Iterator[RawWeb]:
    """Run a :class:`RawWeb` on a free port of 127.0.0.1 (its own thread and event
    loop) during a ``with``."""
    web = RawWeb(handler)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    server: list[asyncio.Server] = []

    async def start() -> None:
        server.append(await asyncio.start_server(web._serve, "127.0.0.1", 0))
        web.port = server[0].sockets[0].getsockname()[1]
        started.set()

    def run() -> None:
        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(10)
    async def stop() -> None:
        server[0].close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    try:
        yield web
    finally:
        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
