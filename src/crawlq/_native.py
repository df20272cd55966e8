"""Where crawlq picks its optional C code (crawlq._speedups) or its pure-Python twin."""

from __future__ import annotations

import importlib
import os
from typing import Any


def native(name: str) -> Any:
    """``crawlq._speedups.<name>``, or None where the Python code must run instead: the
    extension was not built (no C compiler at install time), or ``CRAWLQ_PURE_PYTHON=1``
    (read at each call, so tests and users can switch it per frontier)."""
    if os.environ.get("CRAWLQ_PURE_PYTHON"):
        return None
    try:
        return getattr(importlib.import_module("crawlq._speedups"), name)
    except ImportError:  # built without a C compiler: the pure-Python path
        return None
