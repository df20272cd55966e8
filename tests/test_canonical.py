"""Unit tests of the canonicalizer and fingerprints: one step at a time.

(tests/test_url_conformance.py checks it against public test data: WHATWG's URL tests
and w3lib's.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from crawlq import Canonicalizer, Fingerprinter, InvalidURL, Request
from crawlq.policies.canonical import looks_like_session_id
from crawlq.policies.queueing import host_key, resolve_queue_key

canon = Canonicalizer()


@pytest.mark.parametrize(("url", "expected"), [
    ("HTTP://Example.COM/Path", "http://example.com/Path"),            # path case kept
    ("https://example.com:443/", "https://example.com/"),
    ("http://example.com:80/", "http://example.com/"),
    ("http://example.com:8080/", "http://example.com:8080/"),
    ("https://example.com", "https://example.com/"),                   # empty path
    ("https://example.com/a#frag", "https://example.com/a"),
    ("https://example.com/a/./b/../c", "https://example.com/a/c"),
    ("https://example.com/a/b/..", "https://example.com/a/"),
    ("https://example.com/%7euser/%2F%41", "https://example.com/~user/%2FA"),
    ("https://example.com/%e2%82%ac", "https://example.com/%E2%82%AC"),
    ("https://example.com/a b", "https://example.com/a%20b"),
    ("https://example.com/ü", "https://example.com/%C3%BC"),
    ("https://example.com/100%", "https://example.com/100%25"),
    ("https://example.com/?b=2&a=1", "https://example.com/?a=1&b=2"),
    ("https://example.com/?a=2&b=1&a=1", "https://example.com/?a=2&a=1&b=1"),  # stable
    ("https://example.com/?Q=x&q=y", "https://example.com/?Q=x&q=y"),  # query case kept
    ("https://example.com/?utm_source=a&x=1&UTM_Medium=b", "https://example.com/?x=1"),
    ("https://example.com/?gclid=1&fbclid=2&sid=3", "https://example.com/?sid=3"),
    ("https://example.com/?sid=9f8e7d6c5b4a39281706&x=1", "https://example.com/?x=1"),
    ("https://slashdot.org/article.pl?sid=05/03/04/1234",
     "https://slashdot.org/article.pl?sid=05/03/04/1234"),                # an id: kept
    ("https://example.com/?PHPSESSID=5f0e3d2c1b0a99887766a", "https://example.com/"),
    ("https://example.com/p;jsessionid=ABC?x=1", "https://example.com/p?x=1"),
    ("https://example.com/?&&a=1&", "https://example.com/?a=1"),
    ("https://bücher.example/", "https://xn--bcher-kva.example/"),
    ("https://user:pw@Example.com/", "https://user:pw@example.com/"),
    ("https://[2001:DB8::1]:443/", "https://[2001:db8::1]/"),
    ("  https://example.com/x  ", "https://example.com/x"),
    ("https://example.com./", "https://example.com./"),               # as browsers
    ("https://faß.de/", "https://xn--fa-hia.de/"),                      # UTS #46, not 2003
    ("http://0x7f.1/", "http://127.0.0.1/"),                            # IPv4 forms
    ("http://[::0:1]/", "http://[::1]/"),                               # IPv6 compressed
    ("http:\\\\a.example\\b", "http://a.example/b"),                  # backslashes
    ("https://example.com/a\tb\nc", "https://example.com/abc"),          # tab, newline
    ("https://example.com/a\x01b", "https://example.com/a%01b"),
    ("http://host/%%36%31", "http://host/%2561"),                       # one pass
    ("https://example.com/%2e;jsessionid=1/y", "https://example.com/y"),
])
def test_canonical_forms(url: str, expected: str) -> None:
    assert canon(url) == expected


def test_query_pairs_are_sorted_stably_by_name() -> None:
    """Against Python's own stable sort, on queries short and long, in order already
    or not, with names that repeat (the long ones ``scrapy bench`` makes) or not."""
    import random

    rnd = random.Random(7)
    for _ in range(500):
        names = rnd.choice([["n"], ["a", "b"], ["total", "show", "n"],
                            [f"k{i}" for i in range(12)], ["b", "a", "ab", "a_", "B"]])
        pairs = [f"{rnd.choice(names)}={rnd.randrange(100)}"
                 for _ in range(rnd.choice([1, 2, 3, 5, 40, 150]))]
        if rnd.random() < 0.3:
            pairs.append(rnd.choice(names))  # a name without "="
        if rnd.random() < 0.3:
            pairs.sort(key=lambda p: p.partition("=")[0])  # in order already
        expected = "&".join(sorted(pairs, key=lambda p: p.partition("=")[0]))
        assert canon("https://example.com/?" + "&".join(pairs)) == \
            "https://example.com/?" + expected


def test_each_step_can_be_switched_off() -> None:
    c = Canonicalizer(drop_fragment=False, sort_query=False, normalize_percent=False,
                      drop_params=(), drop_prefixes=(), session_params=(),
                      drop_session_in_path=False)
    url = "https://Ex.com:443/a/../b;jsessionid=1?b=%7e&a=2&utm_x=1#f"
    # What is left is WHATWG's serialization: what the fetcher requests.
    assert c(url) == "https://ex.com/b;jsessionid=1?b=%7e&a=2&utm_x=1#f"


def test_canonical_form_is_idempotent_on_hard_cases() -> None:
    for url in ("http://foo.09..", "http://host/%%36%31", "http://../", "https://a/%2e%2E/b",
                "https://a/?%zz=1&%41=2", "http://h/%2e;jsessionid=1/..;phpsessid=2/x"):
        try:
            once = canon(url)
        except InvalidURL:
            continue
        assert canon(once) == once, url


def test_session_ids_look_like_tokens() -> None:
    assert looks_like_session_id("1A2B3C4D5E6F7A8B9C0D")
    assert looks_like_session_id("a3f2-bb01-4c5d-9e8f")
    assert not looks_like_session_id("05/03/04/1234")
    assert not looks_like_session_id("1234567890123456789")  # a number: an id
    assert not looks_like_session_id("abc123")


def test_versions_name_the_form_and_its_steps() -> None:
    assert Canonicalizer().version == Canonicalizer().version
    assert Canonicalizer().version.startswith("2:")
    assert Canonicalizer(sort_query=False).version != Canonicalizer().version
    assert Canonicalizer(schemes=("https",)).version == Canonicalizer().version


def test_optional_params_can_be_dropped() -> None:
    c = Canonicalizer(drop_params={"callback", "_"})
    assert c("https://a.example/j?callback=jq123&_=1699&id=4") == "https://a.example/j?id=4"


@pytest.mark.parametrize(("url", "reason"), [
    ("", "empty"),
    ("ftp://example.com/", "bad-scheme"),
    ("javascript:alert(1)", "bad-scheme"),
    ("example.com/page", "not-absolute"),
    ("https://", "no-host"),
    ("https://:80/", "no-host"),
    ("https://exa_mple.com:99999/", "bad-port"),
    ("https://example.com:8x/", "bad-port"),
    ("https://ex ample.com/", "bad-host"),
    ("https://exa\x01mple.com/", "control-chars"),
    ("https://example.com/" + "x" * 9000, "too-long"),
    ("https://[::1/", "bad-host"),
    ("https://[zzz]/", "bad-host"),
    ("http://1.2.3.4.5/", "bad-host"),
])
def test_invalid_urls_have_reasons(url: str, reason: str) -> None:
    with pytest.raises(InvalidURL) as err:
        canon(url)
    assert err.value.reason == reason
    assert reason in str(err.value)


def test_long_url_limit_is_configurable() -> None:
    assert Canonicalizer(max_length=20_000)("https://a.example/" + "x" * 15_000)
    with pytest.raises(InvalidURL):
        Canonicalizer(max_length=30)("https://a.example/" + "x" * 40)


def test_other_schemes_can_be_allowed() -> None:
    assert Canonicalizer(schemes=("http", "https", "ftp"))("FTP://H.example/x") == \
        "ftp://h.example/x"


def test_split_gives_the_host_key() -> None:
    assert canon.split("https://user@Example.com:8443/x") == (
        "https://user@example.com:8443/x", "example.com:8443")
    assert host_key("https://user@example.com:8443/x?y") == "example.com:8443"


def test_queue_by_callable_and_errors() -> None:
    assert resolve_queue_key(lambda u: "one")("https://a/") == "one"
    with pytest.raises(ValueError):
        resolve_queue_key("nope")


def test_fingerprints() -> None:
    fp = Fingerprinter()
    a = fp(Request("https://a.example/"), "https://a.example/")
    assert len(a) == 16
    assert a == fp(Request("https://A.example/"), "https://a.example/")
    post = Request("https://a.example/", method="POST", body=b"x=1")
    assert fp(post, "https://a.example/") != a
    assert fp(post, "https://a.example/") != fp(
        Request("https://a.example/", method="POST", body=b"x=2"), "https://a.example/")
    src = Fingerprinter(source_aware=True)
    r1 = Request("https://a.example/", referrer="https://r1/")
    r2 = Request("https://a.example/", referrer="https://r2/")
    assert src(r1, "https://a.example/") != src(r2, "https://a.example/")
    assert fp(r1, "https://a.example/") == fp(r2, "https://a.example/")


def test_inlined_fingerprint_matches_the_fingerprinter() -> None:
    from crawlq import Frontier

    seen: list[bytes] = []

    class Spy(Fingerprinter):  # a subclass takes the generic path
        def __call__(self, request: Request, canonical_url: str) -> bytes:
            fp = super().__call__(request, canonical_url)
            seen.append(fp)
            return fp

    url = "https://a.example/x?b=1&a=2"
    with Frontier.open("memory://", fingerprint=Spy()) as slow, \
            Frontier.open("memory://") as fast:
        slow.add(url)
        fast.add(url)
        assert [e["fp"] for e in fast.dump() if e["type"] == "seen"] == [seen[0].hex()]


def test_a_crawl_keeps_its_canonical_form(tmp_path: Path) -> None:
    from crawlq import ConfigError, Frontier

    store = f"sqlite:///{tmp_path}/crawl.db"
    other = Canonicalizer(sort_query=False)
    with Frontier.open(store) as f:
        f.add(["https://a.example/p?b=1&a=2", "https://b.example/"])
        assert f.canonical_form == Canonicalizer().version
    with pytest.raises(ConfigError, match=r"crawlq dump.*crawlq load"):
        Frontier.open(store, canonicalize=other)
    with Frontier.open(store) as f:  # the same form: fine
        assert f.stats().queued == 2
    with Frontier.open(store, canonicalize=other, create=False) as f:  # only looking
        records = list(f.dump())
    assert records[0]["canonical_form"] == Canonicalizer().version
    # Moved into a crawl of the other form: its requests are known in that form too.
    with Frontier.open(f"sqlite:///{tmp_path}/moved.db", canonicalize=other) as g:
        assert g.load(records) == len(records) - 1  # (the header is not applied)
        r = g.add(["https://a.example/p?b=1&a=2", "https://b.example/"])
        assert r.duplicates == 2
        assert g.stats().queued == 2


def test_a_crawl_from_before_forms_is_form_1(tmp_path: Path) -> None:
    import sqlite3

    from crawlq import ConfigError, Frontier

    db = tmp_path / "old.db"
    with Frontier.open(f"sqlite:///{db}") as f:
        f.add("https://a.example/")
    with sqlite3.connect(db) as conn:  # as crawlq wrote it before it recorded forms
        conn.execute("DELETE FROM vals")
        conn.execute("DELETE FROM vals_log")
    with pytest.raises(ConfigError, match="canonical form 1"):
        Frontier.open(f"sqlite:///{db}")
    with Frontier.open(f"sqlite:///{db}", create=False) as f:
        assert next(iter(f.dump()))["canonical_form"] == "1"
