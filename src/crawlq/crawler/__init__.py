"""``crawlq crawl``: a polite async crawler on the frontier (needs ``crawlq[crawl]``)."""

from __future__ import annotations

from .core import CrawlConfig, Crawler, Summary

__all__ = ["CrawlConfig", "Crawler", "Summary"]
