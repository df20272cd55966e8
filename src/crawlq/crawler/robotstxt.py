"""robots.txt decisions that agree with Google's matcher, parsed once per host.

The file is read by Google's own parser (google/robotstxt through its pybind11 binding,
the ``jwm.robotstxt`` package): line syntax, accepted typos (``disalow``), a missing
colon, comments, a byte order mark and the percent-escaping of patterns are Google's.
Google's matcher itself re-parses the whole file for every URL it is asked about, which
makes each URL pay for the file (tens of microseconds for a large one); so the rules are
taken once, through the parser's callbacks, and kept ready to match:

- the group selection mirrors ``RobotsMatcher::HandleUserAgent/HandleAllow/
  HandleDisallow`` of robots.cc (a ``User-agent`` line after a rule starts a new group;
  an agent matches by its product token, case-insensitively; ``*`` is the fallback, and
  is ignored once the file names our agent anywhere);
- a pattern matches a prefix of the URL's path, params and query, ``*`` standing for any
  run of characters and a final ``$`` anchoring the end; the longest matching pattern
  wins and an allow wins a tie (``allow: .../index.html`` also allows ``.../``).

Rules are indexed by their literal prefix (up to the first ``*`` or ``$``): a decision
looks up the prefixes of the path, then tries the few rules found, longest first. A
rule with wildcards is a regular expression in which each ``*`` is matched leftmost and
never backtracked into (a lookahead, atomic in Python's ``re``), so no pattern can make
a decision take more than linear time in the URL's length. A file may hold tens of
thousands of wildcard rules under one prefix (``Disallow: /*x1*q``, ``/*x2*q``...): the
rules of such a prefix are also indexed by a piece of literal text each must find in
the path (its needle), so a decision tries only the rules whose needle the path holds,
found by looking up the path's short substrings, not by trying every rule. Rules that
share a needle are still all tried: a file of more than :data:`MANY_RULES` rules is
decided off the event loop by the crawler (see ``Robots.permits``).
tests/crawler/test_robots_conformance.py checks every decision against Google's matcher
on the robots.txt corpus of protego's sdist and runs Google's test cases (from
robotspy's sdist).
"""

from __future__ import annotations

import functools
import math
import operator
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from jwm.robotstxt import googlebot

_EXTRACT = re.compile(r"[A-Za-z_-]*")
_PRODUCT = re.compile(r"[^/\s]*")
_C_SPACE = " \t\n\v\f\r"
_PATH_START = re.compile(r"[/?;]")
_ASCII = "".join(map(chr, range(128)))  # (kept as they are: only the rest is encoded)


def extract_user_agent(value: str) -> str:
    """The matchable part of a ``User-agent`` line's value: its leading letters, ``-``
    and ``_`` (``Googlebot/2.1`` -> ``Googlebot``), as Google's ``ExtractUserAgent``."""
    m = _EXTRACT.match(value)
    return m.group(0) if m else ""


def product_token(user_agent: str) -> str:
    """The name a crawler's user agent is matched by: its product, before any ``/`` or
    space (``crawlq/1.0 (+https://...)`` -> ``crawlq``). Matched as Google's matcher
    matches the name it is given, so a name with other characters than letters, ``-``
    and ``_`` (``AB42bot``) is never named by a group."""
    m = _PRODUCT.match(user_agent)
    return m.group(0) if m else ""


def path_params_query(url: str) -> str:
    """The part of ``url`` that rules match: path, params and query, without the
    fragment; ``/`` when empty (Google's ``GetPathParamsQuery``), with characters
    outside ASCII percent-encoded as UTF-8 (Google expects an encoded URL)."""
    start = 2 if url.startswith("//") else 0
    early = _PATH_START.search(url, start)
    proto = url.find("://", start)
    if proto < 0 or (early is not None and early.start() < proto):
        proto = start
    else:
        proto += 3
    found = _PATH_START.search(url, proto)
    if found is None:
        return "/"
    at = found.start()
    hash_at = url.find("#", start)
    if 0 <= hash_at < at:
        return "/"
    path = url[at:hash_at] if hash_at >= 0 else url[at:]
    if path[0] != "/":
        path = "/" + path
    return path if path.isascii() else quote(path, safe=_ASCII)


@dataclass
class RobotsTxt:
    """The rules of one robots.txt for one agent, ready to match."""

    agent: str
    """The name the groups were selected for."""
    rules: list[tuple[int, bool, str]] = field(default_factory=list)
    """(priority, allow, pattern) of the selected groups, best first."""
    crawl_delay: float | None = None
    """The selected group's ``Crawl-delay`` (Google ignores it; crawlers honour it)."""
    sitemaps: list[str] = field(default_factory=list)
    """Every ``Sitemap:`` line of the file."""
    ignored_delays: list[str] = field(default_factory=list)
    """``Crawl-delay`` values of the selected groups that are no delay (non-finite or
    negative): ignored, for the crawler to warn about."""
    _index: dict[str, _Bucket] = field(default_factory=dict)
    _lengths: list[int] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str, agent: str) -> RobotsTxt:
        """Parse ``text`` (decoded robots.txt) for ``agent``: the name groups are matched
        against, as Google's matcher takes it (a crawler gives its
        :func:`product_token`)."""
        handler = _Groups(agent.lower())
        googlebot.ParseRobotsTxt(text, handler)
        if handler.ever_specific:
            chosen, delay = handler.specific, handler.specific_delay
        else:
            chosen, delay = handler.globals_, handler.global_delay
        rules: list[tuple[int, bool, str]] = []
        for allow, pattern in chosen:
            if pattern:
                rules.append((len(pattern), allow, pattern))
            slash = pattern.rfind("/")
            if allow and slash >= 0 and pattern.startswith("/index.htm", slash):
                rules.append((slash + 2, True, pattern[:slash + 1] + "$"))
        # longest first; at equal length an allow first (a disallow must be longer)
        rules.sort(key=lambda r: (-r[0], not r[1]))
        out = cls(agent, rules, delay, handler.sitemaps, handler.bad_delays)
        out._compile()
        return out

    def _compile(self) -> None:
        """Index the rules by literal prefix, each bucket best first."""
        index: dict[str, list[Rule]] = {}
        for priority, allow, pattern in self.rules:
            cut = min((i for i in (pattern.find("*"), pattern.find("$")) if i >= 0),
                      default=len(pattern))
            rest = pattern[cut:]
            index.setdefault(pattern[:cut], []).append(
                ((-priority, not allow), allow, rest, _rest_regex(rest) if rest else None))
        self._index = {prefix: _Bucket(rules) for prefix, rules in index.items()}
        self._lengths = sorted({len(p) for p in index})

    @property
    def many(self) -> bool:
        """Whether the file has more than :data:`MANY_RULES` rules for the agent (a
        decision may then try thousands of patterns)."""
        return len(self.rules) > MANY_RULES

    def allows(self, url: str) -> bool:
        """May the agent fetch ``url``?"""
        if not self._index:
            return True
        path = path_params_query(url)
        best: tuple[int, bool] | None = None
        allowed = True
        index = self._index
        for n in self._lengths:
            if n > len(path):
                break
            bucket = index.get(path[:n])
            if bucket is None:
                continue
            for key, allow, _, rx in bucket.candidates(path, n):  # (best first)
                if best is not None and key >= best:
                    break
                if rx is None or rx.match(path, n):
                    best, allowed = key, allow
                    break
        return allowed


Rule = tuple[tuple[int, bool], bool, str, "re.Pattern[str] | None"]
"""(sort key: best first, allow, the pattern after its literal prefix ("" for none), and
that part as a regular expression matched where the prefix ended (None for none))."""

MANY_RULES = 1000
"""A file of more rules (for the agent) than this is decided off the event loop."""

NEEDLES_FROM = 32
"""A bucket of more rules than this is indexed by needle."""
NEEDLE_MAX = 8
"""A needle is at most this long (a part of a literal piece is found wherever it is)."""


class _Bucket:
    """The rules of one literal prefix, best first. Beyond :data:`NEEDLES_FROM` rules,
    each rule with wildcards is also filed under its needle: the start of the longest
    literal piece of its pattern after the prefix (one the path must contain for the
    rule to match); rules with no such piece (``/*``, ``/a$``) are always candidates."""

    __slots__ = ("always", "lengths", "needles", "rules")

    def __init__(self, rules: list[Rule]) -> None:
        self.rules = rules
        self.needles: dict[str, list[Rule]] | None = None
        self.lengths: list[int] = []
        self.always: list[Rule] = []
        if len(rules) <= NEEDLES_FROM:
            return
        needles: dict[str, list[Rule]] = {}
        for rule in rules:
            pieces = rule[2].rstrip("$").split("*") if rule[2] else []
            needle = max(pieces, key=len, default="")[:NEEDLE_MAX]
            if needle:
                needles.setdefault(needle, []).append(rule)
            else:
                self.always.append(rule)
        self.needles = needles
        self.lengths = sorted({len(k) for k in needles})

    def candidates(self, path: str, start: int) -> list[Rule]:
        """The rules that may match ``path`` from ``start`` on, best first: every rule,
        or with the needle index those whose needle is in that part of the path
        (a lookup per substring of each needle length: the cost of a decision grows
        with the path's length, not with the number of rules)."""
        needles = self.needles
        if needles is None:
            return self.rules
        end = len(path)
        found = {path[i:i + n] for n in self.lengths for i in range(start, end - n + 1)}
        found.intersection_update(needles)
        if not found:
            return self.always
        out = self.always + [rule for needle in found for rule in needles[needle]]
        out.sort(key=_KEY)
        return out


_KEY = operator.itemgetter(0)


@functools.lru_cache(maxsize=4096)
def _rest_regex(rest: str) -> re.Pattern[str]:
    """What Google's ``Matches`` does with the part of a pattern from its first ``*`` or
    final ``$`` on, at the position where the literal prefix ended."""
    anchored = rest.endswith("$")
    if anchored:
        rest = rest[:-1]
    segments = re.sub(r"\*+", "*", rest).split("*")
    out = [re.escape(segments[0])]
    last = len(segments) - 1
    for i, seg in enumerate(segments[1:], 1):
        if i == last and anchored:
            out.append(".*" + re.escape(seg))  # the last one must end the path
        elif seg:  # leftmost, and atomic: never backtracked into
            out.append(f"(?=(?P<g{i}>.*?{re.escape(seg)}))(?P=g{i})")
    if anchored:
        out.append(r"\Z")
    return re.compile("".join(out), re.S)


class _Groups(googlebot.RobotsParseHandler):  # type: ignore[misc]
    """Collects the rules that apply to ``agent``, as RobotsMatcher decides it."""

    def __init__(self, agent: str) -> None:
        super().__init__()
        self.agent = agent
        self.specific: list[tuple[bool, str]] = []
        self.globals_: list[tuple[bool, str]] = []
        self.specific_delay: float | None = None
        self.global_delay: float | None = None
        self.sitemaps: list[str] = []
        self.bad_delays: list[str] = []
        self.seen_global = self.seen_specific = self.ever_specific = False
        self.separator = False

    def HandleRobotsStart(self) -> None:  # (Google's names: the parser calls them)
        pass

    def HandleRobotsEnd(self) -> None:
        pass

    def HandleUserAgent(self, line: int, value: str) -> None:
        if self.separator:
            self.seen_specific = self.seen_global = self.separator = False
        if value[:1] == "*" and (len(value) == 1 or value[1] in _C_SPACE):
            self.seen_global = True
        elif extract_user_agent(value).lower() == self.agent:
            self.ever_specific = self.seen_specific = True

    def _rule(self, allow: bool, value: str) -> None:
        if not (self.seen_specific or self.seen_global):
            return
        self.separator = True
        (self.specific if self.seen_specific else self.globals_).append((allow, value))

    def HandleAllow(self, line: int, value: str) -> None:
        self._rule(True, value)

    def HandleDisallow(self, line: int, value: str) -> None:
        self._rule(False, value)

    def HandleSitemap(self, line: int, value: str) -> None:
        if value:
            self.sitemaps.append(value)

    def HandleUnknownAction(self, line: int, action: str, value: str) -> None:
        if action.lower() != "crawl-delay" or not (self.seen_specific or self.seen_global):
            return
        try:
            delay = float(value)
        except ValueError:
            return
        if not math.isfinite(delay) or delay < 0:  # (no delay anyone can mean)
            self.bad_delays.append(value)
            return
        if self.seen_specific:
            if self.specific_delay is None:
                self.specific_delay = delay
        elif self.global_delay is None:
            self.global_delay = delay

    def ReportLineMetadata(self, line: int, metadata: Any) -> None:
        pass
