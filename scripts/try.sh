#!/usr/bin/env bash
# The "run" command of README.md: install crawlq with its crawler into .venv, then
#   1. crawl the built-in local test web (served on 127.0.0.1, no internet needed) with
#      the real crawler, on a SQLite frontier in ./demo-crawl/frontier.db;
#   2. look at that frontier with the CLI.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet -e '.[crawl]'
set -x
.venv/bin/crawlq demo --state demo-crawl --out demo-pages.jsonl
.venv/bin/crawlq --store sqlite:///demo-crawl/frontier.db stats --queues 5
head -c 400 demo-pages.jsonl; echo
