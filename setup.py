"""Build the optional compiled parts; everything else is in pyproject.toml.

- ``crawlq._speedups``: C code for the plain case of ``Frontier.add`` and ``next`` and
  the stores' inner loops.
- ``crawlq.policies.canonical``, compiled by mypyc from its own Python source: the one
  definition of canonical URLs, about 1.4x faster compiled (it runs once per offered
  URL). The .py beside it is the same code, run where the build could not compile it.

Both are optional: without a C compiler (or mypyc) the build goes on without them and
crawlq runs its pure-Python code (same results, slower). ``CRAWLQ_NO_MYPYC=1`` skips
the mypyc step.
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup


def compiled_python() -> list[Extension]:
    """The mypyc extensions, or none where mypyc cannot build them."""
    if os.environ.get("CRAWLQ_NO_MYPYC"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("crawlq: mypyc is not installed: canonical.py runs as Python", file=sys.stderr)
        return []
    try:
        # (mypy reads the rest of crawlq only for types, without reporting on it: the
        # build environment need not have the optional extras it imports, like redis)
        extensions = mypycify(["--follow-imports=silent", "--ignore-missing-imports",
                               "src/crawlq/policies/canonical.py"], opt_level="3")
    except (Exception, SystemExit) as exc:  # (mypyc exits on a type error)
        print(f"crawlq: mypyc failed ({exc}): canonical.py runs as Python", file=sys.stderr)
        return []
    for ext in extensions:
        ext.optional = True
    return list(extensions)


setup(
    ext_modules=[
        Extension(
            "crawlq._speedups",
            sources=["src/crawlq/_speedups.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        *compiled_python(),
    ]
)
