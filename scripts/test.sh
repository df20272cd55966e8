#!/usr/bin/env bash
# The test command of README.md: sets up everything the suite needs, then runs it.
#   - a virtualenv in .venv with crawlq and every extra and dev tool (PyPI)
#   - checks: ruff (lint), mypy (types), then pytest (the whole suite)
# Extra arguments go to pytest, e.g.  bash scripts/test.sh -k sqlite -x
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "crawlq needs Python >= 3.10 (found: $("$PYTHON" --version 2>&1))" >&2
    exit 1
fi
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[all,dev]'

echo "== ruff"
.venv/bin/python -m ruff check src tests bench
echo "== mypy"
.venv/bin/python -m mypy
echo "== pytest"
.venv/bin/python -m pytest "$@"
