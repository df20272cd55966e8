"""A TCP proxy on 127.0.0.1 that adds a fixed delay each way: a store "on another
machine" for tests and benchmarks, without leaving the machine.

Each chunk of bytes read on one side is written to the other ``delay`` seconds later,
in order, while the reads go on (the link is slow, not narrow): a request pipelined
behind another is not held up by more than the delay, as on a real network. The proxy
runs in a process of its own (:class:`DelayProxy` starts it), so its work does not take
the measured process's CPU or event loop. Tools such as ``tc netem`` do this in the
kernel, but need root and a network namespace; this needs neither.

    python -m crawlq.testing.delayproxy --to 127.0.0.1:6379 --delay 0.001 --port 7000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import subprocess
import sys
import time

from ..errors import CrawlqError
from .redis_server import free_port


class _Side(asyncio.Protocol):
    """One end of a proxied connection: what it reads goes to ``peer`` after the delay."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        self.loop = loop
        self.delay = delay
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.early: list[bytes] = []  # read before the other end was connected
        self.connecting: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP,
                                                      socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is None:
            self.early.append(data)
            return
        self.loop.call_at(self.loop.time() + self.delay, peer.send, data)

    def send(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None:  # (after what was read has gone through)
            self.loop.call_at(self.loop.time() + self.delay, self.peer.close)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def serve(port: int, host: str, to_port: int, delay: float) -> None:
    """Proxy 127.0.0.1:``port`` to ``host``:``to_port`` with ``delay`` each way, forever."""
    loop = asyncio.get_running_loop()

    def accept() -> _Side:
        near = _Side(loop, delay)

        async def connect() -> None:
            try:
                _, far = await loop.create_connection(lambda: _Side(loop, delay), host,
                                                      to_port)
            except OSError:
                near.close()
                return
            near.peer, far.peer = far, near
            for data in near.early:
                near.data_received(data)
            near.early.clear()

        near.connecting = loop.create_task(connect())  # (held: a task may be collected)
        return near

    server = await loop.create_server(accept, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


class DelayProxy:
    """The proxy in a child process, on a free loopback port (:attr:`port`); a context
    manager that stops it."""

    def __init__(self, to_port: int, delay: float, host: str = "127.0.0.1") -> None:
        self.to_port = to_port
        self.host = host
        self.delay = delay
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> DelayProxy:
        """Start the child and wait until it accepts connections."""
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "crawlq.testing.delayproxy", "--port", str(self.port),
             "--to", f"{self.host}:{self.to_port}", "--delay", repr(self.delay)])
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=1):
                return self
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise CrawlqError(f"the delay proxy did not start on port {self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop the child."""
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(10)
            self._proc = None

    def __enter__(self) -> DelayProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    """``python -m crawlq.testing.delayproxy``: run the proxy in the foreground."""
    parser = argparse.ArgumentParser(prog="python -m crawlq.testing.delayproxy",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument("--to", required=True, metavar="HOST:PORT",
                        help="where connections go")
    parser.add_argument("--delay", type=float, required=True,
                        help="seconds added each way")
    args = parser.parse_args(argv)
    host, _, port = args.to.rpartition(":")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port, host or "127.0.0.1", int(port), args.delay))


if __name__ == "__main__":
    main()
