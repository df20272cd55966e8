"""``crawlq crawl``: a polite async crawler on the frontier (needs ``crawlq[crawl]``).

The names below are imported on first use, so that the command line
(:mod:`crawlq.cli.crawl`, which registers the ``crawl`` command) loads without the
extra: every other command then works on the core install, and ``crawl`` says which
extra to install.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core import CrawlConfig, Crawler, Summary

__all__ = ["CrawlConfig", "Crawler", "Summary"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import core

        return getattr(core, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
