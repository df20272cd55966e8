"""Hostile command lines and input lines: every one ends in exit status 0, or 2 with one
``crawlq: error:`` line; never a traceback, never the catch-all "internal error".

Runs the real entry point (``crawlq.cli.main``) in-process, for speed. Nothing here
reaches the network: crawls resolve every name to 127.0.0.1, which the address guard
refuses without a connection.
"""

from __future__ import annotations

import io
import random
import sys
from pathlib import Path

import pytest

from crawlq.cli import main

HOSTILE_VALUES = ["", "-", "0", "-1", "1e400", "nan", "inf", "99999999999999999999999",
                  "x", "true", "null", "[]", "{}", '"', "\x00", "é", "a=b", "--", "1e12",
                  "sqlite:/x.db", "sqlite://host/x.db", "memory://",
                  "sqlite:///nope/dir/x.db", "http://[zzz]/", "ftp://x/"]
OPTIONS = ["lifo", "min_delay", "concurrency", "bloom_capacity", "bloom_error_rate",
           "clock", "priority", "lease_ttl", "max_retries", "synchronous", "prefix",
           "nosuch"]
INPUT_LINES = ["[1, 2]", "3", '"a string"', "null", "{", '{"url": 5}',
               '{"url": "http://a.test/", "priority": 1e400}',
               '{"url": "http://a.test/", "priority": "high"}',
               '{"url": "http://a.test/", "meta": [1]}', '{"url": "http://a.test/", '
               '"referrer": 7}', '{"url": "http://a.test/", "not_before": "x"}',
               '{"type": "request", "url": "http://a.test/", "priority": 1e30}',
               '{"type": "nonsense"}', "\x00\x01", "http://a.test/" + "a" * 5000,
               "[" * 10_000, "not a url", "http://a.test:99999/"]


def run(argv: list[str], stdin: str = "") -> tuple[int, str, str]:
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # (has .buffer, as stdout)
    err = io.StringIO()
    saved = sys.argv, sys.stdin, sys.stdout, sys.stderr
    sys.argv, sys.stdin, sys.stdout, sys.stderr = (["crawlq", *argv], io.StringIO(stdin),
                                                  out, err)
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    finally:
        sys.argv, sys.stdin, sys.stdout, sys.stderr = saved
    out.flush()
    return code, out.buffer.getvalue().decode("utf-8", "replace"), err.getvalue()


def check(argv: list[str], stdin: str = "") -> None:
    code, _, err = run(argv, stdin)
    assert "Traceback" not in err and "internal error" not in err, (argv, err)
    assert code in (0, 2), (argv, code, err)
    if code == 2:
        errors = [ln for ln in err.splitlines() if ln.startswith("crawlq: error:")]
        assert len(errors) == 1, (argv, err)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CRAWLQ_STORE", raising=False)


def test_named_hostile_cases(tmp_path: Path) -> None:
    (tmp_path / "damaged.db").write_bytes(b"garbage" * 100)
    (tmp_path / "lines.jsonl").write_text("\n".join(INPUT_LINES))
    (tmp_path / "big.jsonl").write_text('{"type": "meta", "seen": 1e400}\n')
    cases = [[], ["--nope"], ["stats", "--nope"], ["load", "missing.jsonl"],
             ["load", "lines.jsonl"], ["load", "big.jsonl"], ["load", str(tmp_path)],
             ["-o", "clock=1", "stats"], ["-o", "bloom_capacity=1e12", "stats"],
             ["--store", "sqlite:///damaged.db", "stats"],
             ["--store", "sqlite:///damaged.db", "dump"], ["dump", "/dev/full"],
             ["dump", str(tmp_path)], ["--store", "sqlite:/x.db", "stats"],
             ["next", "-1"], ["dead", "x"], ["crawl"], ["crawl", "http://[zzz]/"],
             ["crawl", "http://a.test/", "--concurrency", "x"],
             ["crawl", "http://a.test/", "--out", "x.csv"],
             ["crawl", "http://a.test/", "--lease-ttl", "1"],
             ["crawl", "http://a.test/", "--priority", "("],
             ["crawl", "http://a.test/", "--allow-address", "nonsense"]]
    for argv in cases:
        if argv[:1] == ["crawl"] and len(argv) > 1:
            argv = [*argv, "--resolve", "*=127.0.0.1", "--progress", "0"]
        check(argv)
    for line in INPUT_LINES:
        check(["--store", "memory://", "add", "-"], line + "\n")
        check(["--store", "memory://", "load", "-"], line + "\n")


def test_random_hostile_command_lines() -> None:
    rng = random.Random(24)
    for _ in range(300):
        kind = rng.choice(["option", "store", "add", "load", "next", "crawl", "junk"])
        value = rng.choice(HOSTILE_VALUES)
        if kind == "option":
            argv = ["--store", "memory://", "-o", f"{rng.choice(OPTIONS)}={value}",
                    rng.choice(["stats", "queues", "dead", "next"])]
        elif kind == "store":
            argv = ["--store", value, rng.choice(["stats", "dump", "queues"])]
        elif kind == "add":
            argv = ["--store", "memory://", "add", value or "-", "--priority", value]
        elif kind == "load":
            argv = ["--store", "memory://", "load", "-"]
        elif kind == "next":
            argv = ["--store", "memory://", "next", value]
        elif kind == "crawl":
            flag = rng.choice(["--concurrency", "--timeout", "--max-pages", "--min-delay",
                               "--out", "--format", "--store", "--state", "--duration",
                               "--max-backoff", "--parse-timeout", "--per-host"])
            argv = ["crawl", rng.choice([*HOSTILE_VALUES[-2:], "http://a.test/", value]),
                    flag, value, "--resolve", "*=127.0.0.1", "--progress", "0",
                    "--max-retries", "0"]
        else:
            argv = [rng.choice(HOSTILE_VALUES) for _ in range(rng.randint(1, 4))]
        stdin = "\n".join(rng.sample(INPUT_LINES, 3)) + "\n"
        check(argv, stdin)


def test_read_only_commands_never_create_a_store(tmp_path: Path) -> None:
    for command in ("stats", "queues", "dead", "dump"):
        code, _, err = run(["--store", f"sqlite:///{tmp_path}/typo.db", command])
        assert code == 2 and "no crawl at" in err and "typo.db does not exist" in err
    assert not list(tmp_path.glob("typo.db*"))
    code, _, err = run(["--store", "sqlite:/crawl.db", "add", "http://a.test/"])
    assert code == 2 and "sqlite:///relative/path.db" in err  # not "rawl.db"
    assert not list(tmp_path.iterdir())
