"""The path of one call through crawlq's modules: which modules a ``next()`` and a
``done()`` enter on a store, the caller -> callee pairs of modules, and how often a
module is entered again while it waits for another one below it (a callback). A
reading aid with numbers a reviewer can recount (issue 59: "the files next() crosses on
SQLite"), not a speed bench.

    python bench/call_path.py [--store sqlite|memory] [--tiny] [--show]

It warms the store up (adds, leases, answers) and then traces one ``next(10)`` and one
``done()`` of one lease with :func:`sys.setprofile`: every Python function entered and
every compiled function (mypyc, C) called from Python whose module is crawlq's (calls
between compiled modules are not seen). ``--show`` prints the modules and re-entries.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from crawlq import Frontier

T0 = 1_800_000_000.0


def _module(frame: FrameType, event: str, arg: Any) -> str:
    """The module a profile call event enters ("" when it is not crawlq's)."""
    if event == "call":
        name = frame.f_globals.get("__name__", "")
    else:
        name = getattr(arg, "__module__", None) or ""
    return name if name.startswith("crawlq") else ""


class Path_:
    """What one call's trace found: the modules in the order first entered, the
    caller -> callee module pairs, and the re-entries: a crawlq module entered while it
    is on the stack already under another crawlq module (a callback: the reader must go
    back to a module they had left)."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.edges: set[tuple[str, str]] = set()
        self.reentries: list[str] = []


def trace(call: Callable[[], object]) -> Path_:
    """Trace ``call`` (see :class:`Path_`)."""
    out = Path_()
    stack: list[str] = []

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            mod = _module(frame, event, arg)
            if mod:
                caller = next((m for m in reversed(stack) if m), "")
                if caller and caller != mod:
                    out.edges.add((caller, mod))
                    if mod in stack:
                        out.reentries.append(f"{caller} -> {mod}")
                if mod not in out.order:
                    out.order.append(mod)
            stack.append(mod)
        elif event in ("return", "c_return", "c_exception") and stack:
            stack.pop()

    sys.setprofile(hook)
    try:
        call()
    finally:
        sys.setprofile(None)
    return out


def main() -> None:
    """Parse arguments, warm a store up, trace a next() and a done()."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    ap.add_argument("--tiny", action="store_true", help="a small warm-up (CI)")
    ap.add_argument("--show", action="store_true", help="print each path")
    args = ap.parse_args()
    clock = [T0]
    with tempfile.TemporaryDirectory() as tmp:
        url = ("sqlite:///" + str(Path(tmp) / "path.db") if args.store == "sqlite"
               else "memory://")
        f = Frontier.open(url, clock=lambda: clock[0], min_delay=0, max_delay=0,
                          delay_factor=0)
        hosts, per = (5, 4) if args.tiny else (50, 40)
        f.add([f"http://h{h}.test/{i}" for h in range(hosts) for i in range(per)])
        for _ in range(3):  # (warm: caches, read-ahead, held answers)
            f.done(f.next(10))
        leases: list[Any] = []
        rows: list[tuple[str, Path_]] = []
        nxt = trace(lambda: leases.extend(f.next(10)))
        rows.append(("next(10)", nxt))
        done = trace(lambda: f.done(leases[0]))
        rows.append(("done(1 lease)", done))
        nxt2 = trace(lambda: leases.extend(f.next(10)))  # (takes the held answer)
        rows.append(("next(10) after it", nxt2))
        f.close()
    print(f"store: {args.store}")
    print(f"{'call':20s} {'modules':>8s} {'edges':>6s} {'re-entries':>11s}")
    for name, path in rows:
        print(f"{name:20s} {len(path.order):8d} {len(path.edges):6d} "
              f"{len(path.reentries):11d}")
        if args.show:
            print("   modules: " + ", ".join(m.removeprefix("crawlq.") for m in path.order))
            for edge in sorted(set(path.reentries)):
                print("   re-entry: " + edge.replace("crawlq.", ""))


if __name__ == "__main__":
    main()
