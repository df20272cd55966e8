"""``crawlq crawl --metrics PORT``: the crawl's own Prometheus metrics (pages by status,
bytes, fetch latency, errors by kind), served by prometheus-client on 127.0.0.1."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ..models import Request
from .fetch import Fetched


class CrawlMetrics:
    """The metrics of one crawl, fed by the crawler's ``page`` and ``error`` events, at
    ``http://HOST:PORT/metrics`` until :meth:`close`."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        try:
            from prometheus_client import (
                CollectorRegistry,
                Counter,
                Histogram,
                start_http_server,
            )
        except ImportError as exc:
            raise ConfigError(f"--metrics needs prometheus-client: pip install "
                              f"'crawlq[serve]' ({exc})") from None
        r = self.registry = CollectorRegistry()
        self.pages = Counter("crawlq_crawl_pages", "pages fetched, by HTTP status",
                             ["status"], registry=r)
        self.bytes = Counter("crawlq_crawl_bytes", "bytes of the bodies received",
                             registry=r)
        self.latency = Histogram("crawlq_crawl_fetch_seconds", "time a fetch took",
                                 registry=r)
        self.errors = Counter("crawlq_crawl_errors", "fetches that failed, by kind",
                              ["kind"], registry=r)
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=r)
        except OSError as exc:
            raise ConfigError(f"--metrics: cannot listen on {host}:{port}: "
                              f"{exc.strerror or exc}") from None
        self.port = self._server.server_port

    def events(self) -> dict[str, Any]:
        """The crawler events that feed the metrics."""
        return {"page": self.page, "error": self.error}

    def page(self, request: Request, r: Fetched) -> None:
        """A fetched page."""
        self.pages.labels(str(r.status)).inc()
        self.bytes.inc(len(r.raw or r.body))
        self.latency.observe(r.elapsed)

    def error(self, request: Request, exc: BaseException) -> None:
        """A fetch that failed."""
        kind = getattr(exc, "kind", None) or getattr(exc, "reason", None)
        self.errors.labels(str(kind or type(exc).__name__)).inc()

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
