"""The crawl's seeds: offered each round, reported when refused, revived when an
earlier run gave them up."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..aio import AsyncFrontier
from ..models import Request
from .config import Summary
from .scope import Scope

log = logging.getLogger("crawlq.crawl")


async def offer(frontier: AsyncFrontier, urls: Sequence[str], scope: Scope, summary: Summary,
          report: bool) -> None:
    """Offer the seeds; with ``report`` (the first round), count those the frontier
    already had and report those it refused."""
    result = await frontier.add([Request(u, priority=scope.priority(u)) for u in urls])
    if not report:
        return
    summary.seeds_known = result.duplicates
    for rej in result.rejected:
        refuse(summary, rej.url, rej.reason + (f" ({rej.detail})" if rej.detail else ""))


def refuse(summary: Summary, url: str, why: str) -> None:
    """Report a seed that cannot be crawled (logged once; the summary keeps the last
    reason)."""
    if url not in summary.seeds_refused:
        log.warning("seed %s not crawled: %s", url, why)
    summary.seeds_refused[url] = why


async def revive(frontier: AsyncFrontier, urls: Sequence[str]) -> int:
    """Seeds named again get another chance if an earlier run gave them up (dead):
    e.g. a blocked address, run again with the option that allows it. Other dead URLs
    stay dead (``crawlq requeue-dead`` revives them). Returns how many were revived."""
    if not (await frontier.stats()).dead:
        return 0
    canonical = set()
    for u in urls:
        try:
            canonical.add(frontier.canonicalize(u))
        except ValueError:
            continue
    ids = [d.id for d in await frontier.dead(100_000) if d.request.url in canonical]
    if ids:
        log.info("%d seed(s) given up by an earlier run are tried again", len(ids))
        await frontier.requeue_dead(ids)
    return len(ids)
