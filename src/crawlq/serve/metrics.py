"""Prometheus metrics of a served frontier (prometheus-client).

The frontier's own counters and queue states are read from ``stats()`` at each scrape
(so they are the store's, shared by every process on it, not this server's alone);
per-call latency, rejections by reason and store errors are this server's.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..frontier import Frontier

_COUNTERS = ("seen", "added", "done", "failed", "retried", "redelivered", "late_acks",
             "duplicates")
_GAUGES = ("queued", "scheduled", "leased", "dead")


class _StoreCollector(Collector):
    """The store's counters and queue states, read at scrape time."""

    def __init__(self, frontier: Frontier) -> None:
        self.frontier = frontier

    def collect(self) -> Iterator[Metric]:
        s = self.frontier.stats()
        for name in _COUNTERS:
            yield CounterMetricFamily(f"crawlq_{name}", f"requests {name} (the store's count)",
                                      value=getattr(s, name))
        for name in _GAUGES:
            yield GaugeMetricFamily(f"crawlq_{name}", f"requests {name} now",
                                    value=getattr(s, name))
        rej = CounterMetricFamily("crawlq_rejected", "requests rejected, by reason",
                                  labels=["reason"])
        for reason, n in sorted(s.rejected.items()):
            rej.add_metric([reason], n)
        yield rej
        states = GaugeMetricFamily("crawlq_queues", "queues by state", labels=["state"])
        for state, n in (("ready", s.queues_ready), ("busy", s.queues_busy),
                         ("resting", s.queues_resting), ("exhausted", s.queues_exhausted)):
            states.add_metric([state], n)
        yield states
        yield GaugeMetricFamily("crawlq_queues_total", "queues", value=s.queues_total)


class Metrics:
    """The server's registry: the store's figures and this server's own."""

    def __init__(self, frontier: Frontier) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_StoreCollector(frontier))
        self.latency = Histogram("crawlq_call_seconds", "time to answer an API call",
                                 ["call"], registry=self.registry)
        self.rejections = Counter("crawlq_served_rejections", "requests this server "
                                  "rejected at add, by reason", ["reason"],
                                  registry=self.registry)
        self.store_errors = Counter("crawlq_store_errors", "calls that failed because the "
                                    "store did", registry=self.registry)

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
