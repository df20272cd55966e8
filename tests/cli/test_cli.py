"""The crawlq command line, run as a real subprocess on a real SQLite file (and on a
real redis-server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from crawlq.testing.redis_server import LocalRedis


def crawlq(tmp: Path, *args: str, stdin: str = "",
           store: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CRAWLQ_STORE": store or f"sqlite:///{tmp}/cli.db"}
    return subprocess.run([sys.executable, "-m", "crawlq.cli", *args], input=stdin,
                          capture_output=True, text=True, env=env, timeout=60)


def test_add_stats_next_queues(tmp_path: Path) -> None:
    r = crawlq(tmp_path, "add", "https://a.example/1", "https://A.example/1#x", "ftp://x/")
    assert r.returncode == 0
    assert "added 1, duplicates 1, rejected 1 (bad-scheme: 1)" in r.stdout
    r = crawlq(tmp_path, "add", "-", stdin='https://b.example/\n{"url": "https://c.example/", '
               '"priority": 9}\n\nnot a url\n')
    assert "offered 3, added 2" in r.stdout
    r = crawlq(tmp_path, "stats", "--json")
    s = json.loads(r.stdout)
    assert (s["seen"], s["queued"], s["rejected"]) == (3, 3, {"bad-scheme": 1,
                                                             "not-absolute": 1})
    r = crawlq(tmp_path, "next", "-n", "2")
    leased = [json.loads(line) for line in r.stdout.splitlines()]
    assert leased[0]["url"] == "https://c.example/" and len(leased) == 2
    r = crawlq(tmp_path, "queues", "--json")
    assert {json.loads(x)["key"] for x in r.stdout.splitlines()} == {
        "a.example", "b.example", "c.example"}
    r = crawlq(tmp_path, "next", "-n", "5", "--ack")
    assert len(r.stdout.splitlines()) == 1
    r = crawlq(tmp_path, "stats")
    assert "done" in r.stdout and r.returncode == 0


def test_dump_and_load(tmp_path: Path) -> None:
    crawlq(tmp_path, "add", "https://a.example/1", "https://b.example/2")
    dump = tmp_path / "d.jsonl"
    assert crawlq(tmp_path, "dump", str(dump)).returncode == 0
    env = {**os.environ, "CRAWLQ_STORE": f"sqlite:///{tmp_path}/copy.db"}
    r = subprocess.run([sys.executable, "-m", "crawlq.cli", "load", str(dump)],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and "loaded" in r.stdout
    r = subprocess.run([sys.executable, "-m", "crawlq.cli", "stats", "--json"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert json.loads(r.stdout)["queued"] == 2


def test_errors_are_clear_and_exit_2(tmp_path: Path) -> None:
    r = crawlq(tmp_path, "--store", "nosuch://", "stats")
    assert r.returncode == 2 and "unknown store URL" in r.stderr
    bad = tmp_path / "bad.db"
    bad.write_text("not sqlite" * 500)
    r = crawlq(tmp_path, "--store", f"sqlite:///{bad}", "stats")
    assert r.returncode == 2 and "crawlq: error:" in r.stderr and "Traceback" not in r.stderr
    r = crawlq(tmp_path, "stats")  # read-only: no store made where there was none
    assert r.returncode == 2 and "no crawl at" in r.stderr
    assert crawlq(tmp_path, "add", "http://a.example/").returncode == 0
    r = crawlq(tmp_path, "-o", "bogus=1", "stats")
    assert r.returncode == 2 and "unknown option" in r.stderr
    for args in (("next", "-n", "-3"), ("stats", "--queues", "x"), ("queues", "-n", "1.5")):
        r = crawlq(tmp_path, *args)
        assert r.returncode == 2 and "must be a whole number >= 0" in r.stderr, args
    r = crawlq(tmp_path, "-o", "lifo=maybe", "stats")  # not read as true
    assert r.returncode == 2 and "lifo must be true or false, not 'maybe'" in r.stderr
    assert crawlq(tmp_path, "-o", "lifo=false", "stats").returncode == 0
    r = crawlq(tmp_path, "load", str(tmp_path / "missing.jsonl"))
    assert r.returncode != 0


def test_help_lists_commands(tmp_path: Path) -> None:
    r = crawlq(tmp_path, "--help")
    for cmd in ("add", "next", "stats", "queues", "dump", "load"):
        assert cmd in r.stdout


def test_cli_on_redis_then_dump_into_sqlite(tmp_path: Path, redis_server: LocalRedis) -> None:
    store = f"{redis_server.url}?prefix=cli-{tmp_path.name}"
    r = crawlq(tmp_path, "add", "https://a.example/1", "https://b.example/1", store=store)
    assert "added 2" in r.stdout, r.stderr
    r = crawlq(tmp_path, "next", "-n", "1", "--ack", store=store)
    assert len(r.stdout.splitlines()) == 1
    s = json.loads(crawlq(tmp_path, "stats", "--json", store=store).stdout)
    assert (s["seen"], s["done"], s["queued"]) == (2, 1, 1)
    dump = tmp_path / "dump.jsonl"
    assert crawlq(tmp_path, "dump", str(dump), store=store).returncode == 0
    assert crawlq(tmp_path, "load", str(dump)).returncode == 0  # into SQLite
    t = json.loads(crawlq(tmp_path, "stats", "--json").stdout)
    assert (t["seen"], t["done"], t["queued"]) == (2, 1, 1)


_CORE_ONLY = """
import sys
EXTRAS = {"aiohttp", "jwm", "prometheus_client", "selectolax", "warcio", "brotli", "scrapy",
          "redis"}
class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in EXTRAS:
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, NotInstalled())
from crawlq.cli import main
sys.argv[0] = "crawlq"
main()
"""
"""``python -c`` as on an install of the core alone: the extras cannot be imported."""


def test_the_core_install_runs_every_command_but_crawl(tmp_path: Path) -> None:
    def core(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", _CORE_ONLY, *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)

    store = f"sqlite:///{tmp_path}/core.db"
    assert core("--help").returncode == 0
    for command in (["add", "https://example.com/"], ["stats"], ["queues"], ["dead"],
                    ["next", "--ack"], ["requeue-dead"], ["dump"]):
        r = core("--store", store, *command)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (command, r.stderr)
    r = core("--store", store, "crawl", "https://example.com/")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("crawlq: error:") and "crawlq[crawl]" in r.stderr


def test_check_finds_damage_and_says_so_on_one_line(tmp_path: Path) -> None:
    import random

    store = f"sqlite:///{tmp_path}/c.db"
    for i in range(3):
        assert crawlq(tmp_path, "add", f"https://a{i}.example/", store=store).returncode == 0
    ok = crawlq(tmp_path, "check", store=store)
    assert ok.returncode == 0 and "no damage found" in ok.stdout
    db = tmp_path / "c.db"
    data = bytearray(db.read_bytes())
    rng = random.Random(7)
    for page in range(3, len(data) // 4096):  # scribble over every b-tree page's cells
        data[page * 4096 + 8:page * 4096 + 60] = bytes(rng.randrange(256) for _ in range(52))
    db.write_bytes(bytes(data))
    bad = crawlq(tmp_path, "check", store=store)
    lines = bad.stderr.strip().splitlines()
    assert bad.returncode == 2 and len(lines) == 1, bad.stderr
    assert lines[0].startswith("crawlq: error:") and "is damaged" in lines[0]
    assert "problem(s)" in lines[0]
    gone = crawlq(tmp_path, "check", store=f"sqlite:///{tmp_path}/none.db")
    assert gone.returncode == 2 and "does not exist" in gone.stderr
    assert not (tmp_path / "none.db").exists()


def test_load_of_a_missing_file_creates_no_store(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/new.db"
    r = crawlq(tmp_path, "load", str(tmp_path / "missing.jsonl"), store=store)
    assert r.returncode == 2 and r.stderr.startswith("crawlq: error: cannot read")
    assert not (tmp_path / "new.db").exists()


def test_commands_that_look_never_create_a_redis_crawl(tmp_path: Path,
                                                       redis_server: LocalRedis) -> None:
    import redis

    store = f"{redis_server.url}?prefix=nothing-here"
    for command in (["stats"], ["queues"], ["dead"], ["dump"]):
        r = crawlq(tmp_path, *command, store=store)
        assert r.returncode == 2 and "no crawl at" in r.stderr, (command, r.stderr)
    assert redis.Redis.from_url(redis_server.url).keys("{nothing-here}*") == []
    assert crawlq(tmp_path, "add", "https://a.example/", store=store).returncode == 0
    assert crawlq(tmp_path, "stats", store=store).returncode == 0  # now there is one


def test_every_cli_error_is_reported_in_one_place() -> None:
    """Commands raise; ``crawlq.cli.report.report`` alone writes the ``crawlq: error:`` line."""
    import crawlq

    root = Path(crawlq.__file__).parent
    writers = [f"{p.relative_to(root)}:{n}" for p in root.rglob("*.py")
               for n, line in enumerate(p.read_text().splitlines(), 1)
               if '"crawlq: error:' in line or "'crawlq: error:" in line]
    assert len(writers) == 1 and writers[0].startswith("cli/report.py:"), writers
