#!/usr/bin/env python3
"""Count the CPU instructions a small crawl costs a store (SQLite by default, or memory):
a steady figure on a noisy machine, where wall-clock A/B runs of the same code differ by
10% or more.

Runs a scaled-down reference workload (default 40,000 offered requests over 1,000 hosts,
level-0 merges every 10,000 rows, so every level is used) through the store: add
in batches of 1,000, then next(200)/done until empty. With ``--callgrind`` it runs itself
under ``valgrind --tool=callgrind`` and prints the instructions executed (Ir), which
include interpreter start-up and imports (about 1.5 G; the same for both sides of an
A/B). Compare two trees with PYTHONPATH:

    python bench/instructions.py --callgrind
    PYTHONPATH=/tmp/old/src python bench/instructions.py --callgrind

``callgrind_annotate --inclusive=yes callgrind.out.crawlq`` then tells where they go.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile


def crawl(n: int, hosts: int, store: str) -> int:
    from workload import generate  # (bench/workload.py)

    from crawlq import Frontier, Request
    from crawlq.stores import sqlite as sqlite_store

    sqlite_store.L0_ROWS = 10_000  # type: ignore[attr-defined]  # (scaled down: merges happen)
    urls, prios, _ = generate(n, hosts, 42)
    pairs = list(zip(urls, prios))
    d = tempfile.mkdtemp()
    try:
        url = f"sqlite:///{d}/i.db" if store == "sqlite" else "memory://"
        with Frontier.open(url, min_delay=0, max_delay=0, delay_factor=0,
                           concurrency=1_000_000) as f:
            for i in range(0, len(pairs), 1_000):
                f.add([Request(u, priority=p) for u, p in pairs[i:i + 1_000]])
            taken = 0
            while leases := f.next(200):
                taken += len(leases)
                f.done(leases)
    finally:
        shutil.rmtree(d)
    return taken


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40_000, help="offered requests")
    ap.add_argument("--hosts", type=int, default=1_000)
    ap.add_argument("--store", choices=("sqlite", "memory"), default="sqlite")
    ap.add_argument("--callgrind", action="store_true",
                    help="run under valgrind --tool=callgrind and print the instruction count")
    a = ap.parse_args()
    if not a.callgrind:
        print(f"{crawl(a.n, a.hosts, a.store):,} leased")
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=callgrind.out.crawlq",
         sys.executable, __file__, "--n", str(a.n), "--hosts", str(a.hosts),
         "--store", a.store],
        env={**os.environ, "PYTHONHASHSEED": "0"}, capture_output=True, text=True, check=True)
    m = re.search(r"Collected : (\d+)", out.stderr)
    print(out.stdout.strip())
    print(f"{int(m.group(1)):,} instructions" if m else out.stderr[-2000:])


if __name__ == "__main__":
    main()
