"""The ``crawlq`` command line: crawl, or look at and feed a frontier on any store URL.

    crawlq demo                                              # crawl the local test web
    crawlq crawl https://example.com/ --state ./crawl --max-pages 1000 --out pages.jsonl

    crawlq add https://example.com/ https://example.org/     # or: ... | crawlq add -
    crawlq stats
    crawlq queues
    crawlq next -n 10 --ack
    crawlq dump > state.jsonl ; crawlq --store sqlite:///copy.db load state.jsonl

Its modules: :mod:`~crawlq.cli.command` (the parser, the store, the dispatch, ``main``);
one module per kind of command, each adding its subcommands to the parser and running
them: :mod:`~crawlq.cli.frontier_commands` (add, next, done, fail, retry, stats,
queues, dead, requeue-dead), :mod:`~crawlq.cli.state_commands` (dump, load, check),
:mod:`~crawlq.cli.crawl` (crawl, demo; with :mod:`~crawlq.cli.crawl_options` and
:mod:`~crawlq.cli.crawl_workers` for ``--workers``) and :mod:`~crawlq.cli.serve`; and
the leaves they share: :mod:`~crawlq.cli.argtypes` (argparse types) and
:mod:`~crawlq.cli.report` (the one ``crawlq: error:`` line, the progress counter).
"""

from __future__ import annotations

from .command import main, run

__all__ = ["main", "run"]
