#!/usr/bin/env bash
# The "run" command of README.md: install crawlq into .venv and use its CLI on a local
# SQLite frontier (./try-crawl.db). No server, no network beyond the package install.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet -e .
export CRAWLQ_STORE="sqlite:///try-crawl.db"
rm -f try-crawl.db try-crawl.db-wal try-crawl.db-shm
set -x
.venv/bin/crawlq add https://example.com/ "https://Example.com:443/?utm_source=x#top" \
    https://example.org/a https://example.org/b https://example.net/ ftp://not-crawlable/
printf '%s\n' '{"url": "https://example.org/urgent", "priority": 9}' | .venv/bin/crawlq add -
.venv/bin/crawlq next -n 3 --ack
.venv/bin/crawlq stats --queues 5
