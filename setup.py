"""Build the optional compiled parts; everything else is in pyproject.toml.

- ``crawlq._speedups``: two kernels on bytes in C, BLAKE2b-128 and the memory store's
  compact seen-set; they know nothing of crawlq's objects or rules.
- Modules compiled by mypyc from their own Python source (``COMPILED``): the one
  definition of a rule that runs once per URL, compiled; the .py beside each is the same
  code, run where the build could not compile it. ``entries.py`` (what ``add`` accepts,
  a request's store entry, the leases of ``next``), ``payload.py`` (a request's stored
  bytes), ``policies/canonical.py`` (canonical URLs, about 1.4x faster compiled),
  ``stores/policy.py`` (the politeness delay and
  per-queue settings), ``stores/sqlite_rows.py`` (the SQLite store's per-entry,
  per-lease and per-queue rules) and ``stores/memory_loops.py`` (the memory store's
  add, lease and release loops).

- ``crawlq.serve._edge`` (C++): ``crawlq serve``'s gRPC transport on the system's gRPC
  C++ library (pkg-config grpc++), where it is installed: calls reach Python as batches
  of events (see ``serve/grpc_edge.py``).

All are optional: without a C compiler (or mypyc, or gRPC's C++ library) the build goes
on without them and crawlq runs its pure-Python code (same results, slower; grpcio's own
gRPC server). ``CRAWLQ_NO_MYPYC=1`` skips
the mypyc step.
"""

from __future__ import annotations

import os
import subprocess
import sys

from setuptools import Extension, setup


COMPILED = ["src/crawlq/entries.py", "src/crawlq/payload.py",
            "src/crawlq/policies/canonical.py", "src/crawlq/stores/policy.py",
            "src/crawlq/stores/sqlite_rows.py", "src/crawlq/stores/memory_queues.py",
            "src/crawlq/stores/rules.py"]


def compiled_python() -> list[Extension]:
    """The mypyc extensions, or none where mypyc cannot build them."""
    if os.environ.get("CRAWLQ_NO_MYPYC"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("crawlq: mypyc is not installed: COMPILED modules run as Python",
              file=sys.stderr)
        return []
    try:
        # (mypy reads the rest of crawlq only for types, without reporting on it: the
        # build environment need not have the optional extras it imports, like redis)
        extensions = mypycify(["--follow-imports=silent", "--ignore-missing-imports",
                               *COMPILED], opt_level="3", group_name="crawlq")
    except (Exception, SystemExit) as exc:  # (mypyc exits on a type error)
        print(f"crawlq: mypyc failed ({exc}): COMPILED modules run as Python",
              file=sys.stderr)
        return []
    for ext in extensions:
        ext.optional = True
    return list(extensions)


def grpc_edge() -> list[Extension]:
    """``crawlq.serve._edge``, gRPC's transport in C++ for ``crawlq serve``, where the
    system's gRPC C++ library is installed (pkg-config grpc++; Debian/Ubuntu:
    libgrpc++-dev); elsewhere the server runs on grpcio alone."""
    try:
        cflags = subprocess.run(["pkg-config", "--cflags", "grpc++"], check=True,
                                capture_output=True, text=True).stdout.split()
        libs = subprocess.run(["pkg-config", "--libs", "grpc++"], check=True,
                              capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        print("crawlq: gRPC's C++ library not found (pkg-config grpc++): crawlq serve "
              "runs on grpcio alone", file=sys.stderr)
        return []
    return [Extension("crawlq.serve._edge", sources=["src/crawlq/serve/_edge.cc"],
                      language="c++", optional=True,
                      extra_compile_args=["-O2", "-std=c++17", *cflags],
                      extra_link_args=libs)]


setup(
    ext_modules=[
        Extension(
            "crawlq._speedups",
            sources=["src/crawlq/_speedups.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        *compiled_python(),
        *grpc_edge(),
    ]
)
