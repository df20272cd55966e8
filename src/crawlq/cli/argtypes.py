"""The command line's argparse types: whole numbers (:func:`count`), sizes, seconds and
durations. A value out of range is a usage error naming the flag, one
``crawlq: error:`` line like any other."""

from __future__ import annotations

import argparse
import math
from typing import Any


def count(least: int) -> Any:
    """An argparse type: a whole number >= ``least`` (a usage error naming the flag
    otherwise)."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            n = least - 1
        if n < least:
            raise argparse.ArgumentTypeError(
                f"must be a whole number >= {least}, not {text!r}")
        return n
    return parse


_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def size(text: str) -> int:
    """An argparse type: bytes, with an optional K, M or G (powers of 1024)."""
    t = text.strip().upper().removesuffix("B")
    scale = 1024 ** (" KMG".index(t[-1])) if t and t[-1] in "KMG" else 1
    try:
        n = int(float(t[:-1] if scale > 1 else t) * scale)
    except (ValueError, OverflowError):
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"want a size like 500M or 1G, not {text!r}")
    return n


def seconds(least: float) -> Any:
    """An argparse type: a finite number of seconds >= ``least``."""
    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            x = math.nan
        if not math.isfinite(x) or x < least:
            raise argparse.ArgumentTypeError(
                f"want a number of seconds >= {least:g}, not {text!r}")
        return x
    return parse


def duration(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``2h``, ``1d`` -> seconds (an argparse type)."""
    t = text.strip().lower()
    unit = t[-1] if t and t[-1] in "smhd" else ""
    try:
        value = float(t[: len(t) - len(unit)])
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (try 30s, 10m, 2h, 1d)") from None
    if value < 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (try 30s, 10m, 2h, 1d)")
    return value * _UNITS[unit]
