"""A small scriptable web server for hostile-web tests: real HTTP on 127.0.0.1, one port,
many host names (by the Host header), each answer written by the test.

A route is ``(host, path) -> handler`` (``host`` ``*`` matches any host); a handler
takes the :class:`Hit` and returns ``(status, headers, body)``. Every request is
logged with its time, host, path and headers. A crawler reaches the hosts through its
``resolve`` option (``*.test=127.0.0.1``), so no name resolution is involved.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Answer = tuple[int, list[tuple[str, str]], bytes]


@dataclass
class Hit:
    """One request the server answered."""

    at: float
    host: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Hit], Answer]


def html(body: str, *headers: tuple[str, str]) -> Answer:
    """A 200 HTML page."""
    return 200, [("Content-Type", "text/html; charset=utf-8"), *headers], body.encode()


def page_with_links(title: str, links: list[str]) -> Answer:
    """A 200 HTML page titled ``title`` linking to ``links``."""
    anchors = "".join(f'<a href="{u}">{u}</a>' for u in links)
    return html(f"<html><head><title>{title}</title></head><body>{anchors}</body></html>")


NOT_FOUND: Answer = (404, [("Content-Type", "text/plain")], b"not found")


class HostileWeb:
    """The server; use :func:`serve_routes`."""

    def __init__(self, routes: dict[tuple[str, str], Handler],
                 fallback: Handler | None = None) -> None:
        self.routes = routes
        self.fallback = fallback
        self.log: list[Hit] = []
        self._lock = threading.Lock()
        web = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                host = (self.headers.get("Host") or "").rpartition(":")[0] or ""
                hit = Hit(time.time(), host, self.path, dict(self.headers.items()))
                with web._lock:
                    web.log.append(hit)
                handler = (web.routes.get((host, self.path))
                           or web.routes.get(("*", self.path)) or web.fallback)
                status, headers, body = handler(hit) if handler else NOT_FOUND
                chunked = ("Transfer-Encoding", "chunked") in headers
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                if not chunked:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if chunked:  # three chunks, then the last one
                    step = max(len(body) // 3, 1)
                    for i in range(0, len(body), step):
                        part = body[i:i + step]
                        self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]

    def url(self, host: str, path: str = "/") -> str:
        """``http://host:port/path`` on this server."""
        return f"http://{host}:{self.port}{path}"

    def hits(self, host: str | None = None) -> list[Hit]:
        """The requests answered so far (of ``host``), in order."""
        with self._lock:
            return [h for h in self.log if host is None or h.host == host]


@contextmanager
def serve_routes(routes: dict[tuple[str, str], Handler],
                 fallback: Handler | None = None) -> Iterator[HostileWeb]:
    """Run a :class:`HostileWeb` on a free port of 127.0.0.1 during a ``with``."""
    web = HostileWeb(routes, fallback)
    thread = threading.Thread(target=web.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield web
    finally:
        web.server.shutdown()
        web.server.server_close()
